"""The PCIe hierarchy behind the simulated ASM24xx bridge, as on an eGPU board: the bridge is the root; four
type-1 (PCI-to-PCI bridge) functions in a chain on buses 0..3, device 0 function 0 each, then the GPU at bus 4.
The host programs each bridge's bus numbers and memory windows and the GPU's BARs over config TLPs; until it
has, requests below an unprogrammed bridge fail with Unsupported Request, as on hardware.

Hardware facts (sources): the topology and the host's programming sequence are shared/facts/usb_asm24.json
(`pcie_setup`, see amdq.hw.usb_asm24). The type-1 header layout (bus numbers at 0x18..0x1A; memory base/limit
at 0x20/0x22 holding address bits 31:20 in bits 15:4; prefetchable base/limit at 0x24/0x26 with bits 3:0 = 1 for
64-bit, upper halves at 0x28/0x2C; command at 0x04 with I/O, memory and bus-master bits 0..2), the routing rules
(a type-1 request goes down a bridge whose secondary..subordinate range holds its bus and becomes type 0 on the
secondary bus; a type-0 request is taken by the device on the link; a memory request goes down a bridge whose
memory-enabled window holds it, and up -- to the root -- from a bus-mastering function when it is outside the
window), the BAR sizing protocol (all ones written, the size mask read back; the bits below the size are
hardwired to 0) and completion status Unsupported Request for anything nobody claims are the PCI Local Bus and
PCI Express Base specifications.

Simulator choices (the sources do not say; see `not_determined` in the facts): which silicon the four bridges
are (ids below: the bridge chip's two ports, then the GPU board's switch upstream and downstream ports); a BAR
decodes its size rounded up to a power of two, VRAM answers for the first bar_sizes[0] bytes of BAR0 and an
access past it is Unsupported Request; the GPU function (when it has no extended capabilities of its own) shows
a Resizable BAR capability for BAR0 at 0x100 (sizes 1 MiB up to all of VRAM, 256 MiB at power-on, as boards
ship), whose size the host may change while memory decoding is off or on alike; a partial-dword register write is a read-modify-write of the register.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from ...hw import usb_asm24 as U
from ..memory import Arena

# (vendor, device) of the type-1 functions on buses 0..3 (simulator choice, see the module doc)
BRIDGE_IDS = ((0x1B21, 0x2464), (0x1B21, 0x2464), (0x1002, 0x1478), (0x1002, 0x1479))
CLASS_PCI_BRIDGE = 0x060400
CMD_IO, CMD_MEMORY, CMD_MASTER = 1, 2, 4
UR = U.CPL_UR


class NoHostMemory(Arena):
    """The `ram` of the bus behind a USB bridge: none. The GPU reaches only the bridge's memory windows."""

    def __init__(self) -> None:
        super().__init__("host memory (none behind a USB bridge)", 4096)

    def alloc(self, size: int, align: int = 4096) -> int:
        raise MemoryError("no host memory is reachable behind the USB bridge: only its SRAM, sys_buf and cq_buf")


class Window:
    """A range of the bus behind the bridge with memory behind it."""

    def __init__(self, base: int, size: int, name: str, arena: Arena, offset: int = 0):
        self.base, self.size, self.name, self.arena, self.offset = base, size, name, arena, offset

    @property
    def end(self) -> int:
        return self.base + self.size


class BridgeBus:
    """The bus address map the GPU behind the bridge sees (the SimGPU's `bus`): its DMA reaches the bridge's
    memory windows (SRAM at 0x200000, sys_buf, cq_buf) when every function on the way up masters the bus; no
    host RAM. `claim` is how a SimPCIDevice announces its BARs: here they get no address until the host
    assigns one through config space (see Endpoint)."""

    def __init__(self, windows: list[Window]):
        self.ram = NoHostMemory()
        self.windows = windows
        self.upstream_ok: Callable[[], bool] = lambda: False      # set by the Topology: the bus-master path
        self.claimed: dict[str, tuple[int, Arena | None, Callable[[], bool] | None]] = {}

    def claim(self, name: str, size: int, arena: Arena | None = None, offset: int = 0,
              live: Callable[[], bool] | None = None) -> int:
        """A BAR announced by its function: unassigned (0) until the host programs it."""
        self.claimed[name] = (size, arena, live)
        return 0

    def release(self, base: int) -> None:
        """The function is gone (nothing is placed by claim, so nothing to take off)."""

    def window(self, addr: int) -> Window | None:
        for w in self.windows:
            if w.base <= addr < w.end:
                return w
        return None

    def resolve(self, addr: int, n: int) -> tuple[Arena, int] | None:
        """(memory, offset) of the GPU's `n` bytes at bus address `addr`, None if nothing answers."""
        w = self.window(addr)
        if w is None or addr + n > w.end or not self.upstream_ok():
            return None
        return w.arena, w.offset + addr - w.base


class Type1:
    """A PCI-to-PCI bridge function: its type-1 config header (the fields the host programs) and routing."""

    def __init__(self, index: int):
        self.index = index
        self.reset()

    def reset(self) -> None:
        """Power-on: bus numbers 0, windows closed, command 0."""
        vid, did = BRIDGE_IDS[self.index]
        c = self.config = bytearray(4096)
        struct.pack_into("<HHHH", c, 0, vid, did, 0, 0)    # no capability list
        c[9:12] = CLASS_PCI_BRIDGE.to_bytes(3, "little")
        c[0x0E] = 0x01                                      # header type 1
        struct.pack_into("<HH", c, 0x24, 0x0001, 0x0001)     # 64-bit prefetchable window, closed
        # writable bits per byte of the header (the rest reads as the hardware sets it)
        self.mask = bytearray(4096)
        for off, m in ((0x04, 0x07), (0x0C, 0xFF), (0x0D, 0xFF), (0x18, 0xFF), (0x19, 0xFF), (0x1A, 0xFF),
                       (0x1B, 0xFF), (0x1C, 0xF0), (0x1D, 0xF0), (0x20, 0xF0), (0x21, 0xFF), (0x22, 0xF0),
                       (0x23, 0xFF), (0x24, 0xF0), (0x25, 0xFF), (0x26, 0xF0), (0x27, 0xFF), (0x3C, 0xFF),
                       (0x3E, 0xFF), (0x3F, 0x0F)):
            self.mask[off] = m
        for off in range(0x28, 0x30):
            self.mask[off] = 0xFF

    def read(self, off: int, size: int) -> int:
        return int.from_bytes(self.config[off:off + size], "little")

    def write(self, off: int, size: int, value: int) -> None:
        for i in range(size):
            m = self.mask[off + i]
            b = (value >> 8 * i) & 0xFF
            self.config[off + i] = (self.config[off + i] & ~m | b & m) & 0xFF

    @property
    def command(self) -> int:
        return self.config[0x04]

    @property
    def secondary(self) -> int:
        return self.config[0x19]

    @property
    def subordinate(self) -> int:
        return self.config[0x1A]

    def forwards_config(self, bus: int) -> bool:
        return self.secondary != 0 and self.secondary <= bus <= self.subordinate

    def memory_windows(self) -> list[tuple[int, int]]:
        """The [base, limit] memory ranges it forwards downstream (empty when memory decoding is off)."""
        if not self.command & CMD_MEMORY:
            return []
        base, limit = struct.unpack_from("<HH", self.config, 0x20)
        out = [((base & 0xFFF0) << 16, (limit & 0xFFF0) << 16 | 0xFFFFF)]
        pb, pl = struct.unpack_from("<HH", self.config, 0x24)
        pbu, plu = struct.unpack_from("<II", self.config, 0x28)
        out.append((pbu << 32 | (pb & 0xFFF0) << 16, plu << 32 | (pl & 0xFFF0) << 16 | 0xFFFFF))
        return [(b, l) for b, l in out if b <= l]

    def forwards_memory(self, addr: int, n: int) -> bool:
        return any(b <= addr and addr + n - 1 <= l for b, l in self.memory_windows())


class Endpoint:
    """The GPU's function as the bridge's hierarchy sees it: a SimPCIDevice whose BARs the host sizes and
    assigns here (written into the function's own config space, so `bar_bus_address` reads them); every other
    config access is the function's own."""

    BARS = {0: U.CFG_BAR0, 2: U.CFG_BAR0 + 8, 5: U.CFG_BAR0 + 20}
    REBAR_BOOT_INDEX = 8                                    # BAR0 decodes 256 MiB at power-on

    def __init__(self, fn: Any):
        self.fn = fn
        self.rebar = not any(fn.config[U.EXT_CAP_START:U.EXT_CAP_START + 4])   # the function has no caps of its own
        full = (self.fn.bar_sizes[0] - 1).bit_length()
        self.rebar_max = max(0, full - 20)                  # the largest size index: all of VRAM
        self.reset()

    def reset(self) -> None:
        """Power-on: the BARs unassigned, the command register cleared, BAR0 at its boot size."""
        self.rebar_index = min(self.REBAR_BOOT_INDEX, self.rebar_max)
        self.sizing: set[int] = set()                       # BAR dwords that hold all ones (the size probe)
        for n, off in self.BARS.items():
            flags = self.fn.config_read(off) & 0xF
            struct.pack_into("<I", self.fn.config, off, flags)
            if flags & 0x4:
                struct.pack_into("<I", self.fn.config, off + 4, 0)
        self.fn.config[4] = 0

    def decode_size(self, n: int) -> int:
        """The range BAR `n` decodes: its size rounded up to a power of two (BAR0: the Resizable BAR size)."""
        if n == 0 and self.rebar:
            return 1 << (20 + self.rebar_index)
        return 1 << (self.fn.bar_sizes[n] - 1).bit_length()

    def bar_bytes(self, n: int) -> int:
        """The bytes with something behind them in BAR `n`."""
        return min(self.decode_size(n), self.fn.bar_sizes[n])

    # -- the Resizable BAR extended capability (PCI Express Base specification) at 0x100, for BAR0 -----------
    def _rebar_dword(self, off: int) -> int | None:
        rel = off - U.EXT_CAP_START
        if not self.rebar or not 0 <= rel < 12:
            return None
        if rel == 0:
            return U.EXT_CAP_REBAR | 1 << 16                # id, version 1, no next capability
        if rel == U.REBAR_CAP:
            return sum(1 << (4 + i) for i in range(self.rebar_max + 1))   # 1 MiB .. all of VRAM
        return self.rebar_index << U.REBAR_CTRL_SIZE[0] | 1 << 5   # one resizable BAR, BAR index 0

    def _bar_of(self, off: int) -> tuple[int, bool] | None:
        """(BAR index, upper half?) of the BAR dword at `off`, None for an unimplemented one."""
        for n, o in self.BARS.items():
            if off == o:
                return n, False
            if off == o + 4 and self.fn.config_read(o) & 0x4:
                return n, True
        return None

    def config_read(self, off: int, size: int) -> int:
        dw = off & ~3
        v = self._rebar_dword(dw)
        if U.CFG_BAR0 <= dw < U.CFG_BAR_END:
            v = self._bar_dword(dw)
        if v is not None:
            return (v >> 8 * (off & 3)) & ((1 << 8 * size) - 1)
        return self.fn.config_read(off, size)

    def _bar_dword(self, dw: int) -> int:
        hit = self._bar_of(dw)
        if hit is None:
            return 0
        n, upper = hit
        mask = ~(self.decode_size(n) - 1)
        if dw in self.sizing:
            lo_flags = self.fn.config_read(self.BARS[n]) & 0xF
            return (mask >> 32) & 0xFFFFFFFF if upper else (mask & 0xFFFFFFF0) | lo_flags
        return self.fn.config_read(dw)

    def config_write(self, off: int, size: int, value: int) -> None:
        dw = off & ~3
        if U.CFG_BAR0 <= dw < U.CFG_BAR_END:
            hit = self._bar_of(dw)
            if hit is None:
                return                                     # unimplemented BARs are hardwired to 0
            if size != 4:                                  # a partial write: the other bytes as they read
                sh, m = 8 * (off & 3), (1 << 8 * size) - 1
                value = self._bar_dword(dw) & ~(m << sh) | (value & m) << sh
            n, upper = hit
            if value & 0xFFFFFFFF == 0xFFFFFFFF:
                self.sizing.add(dw)
                return
            self.sizing.discard(dw)
            mask = ~(self.decode_size(n) - 1)
            if upper:
                v = value & (mask >> 32) & 0xFFFFFFFF
            else:
                v = value & mask & 0xFFFFFFF0 | self.fn.config_read(dw) & 0xF
            struct.pack_into("<I", self.fn.config, dw, v)
            return
        if self._rebar_dword(dw) is not None:
            if dw == U.EXT_CAP_START + U.REBAR_CTRL and off & 3 <= 1 < (off & 3) + size:
                lo, hi = U.REBAR_CTRL_SIZE
                index = ((value << 8 * (off & 3)) >> lo) & ((1 << (hi - lo + 1)) - 1)
                if index <= self.rebar_max:             # an unsupported size is not taken
                    self.rebar_index = index
                    b0 = self.BARS[0]               # the BAR's address bits below the new size read 0
                    old = self.fn.config_read(b0 + 4) << 32 | self.fn.config_read(b0)
                    new = old & ~(self.decode_size(0) - 1) | old & 0xF
                    struct.pack_into("<II", self.fn.config, b0, new & 0xFFFFFFFF, new >> 32)
            return
        self.fn.config_write(off, size, value)

    def bar_at(self, addr: int, n: int) -> tuple[int, int] | None:
        """(BAR index, offset) of the `n` bus bytes at `addr` when one BAR decodes them all."""
        if not self.fn.memory_enabled:
            return None
        for i in self.BARS:
            base = self.fn.bar_bus_address(i)
            if base == 0:
                continue                                    # unassigned
            size = self.decode_size(i)
            if base <= addr and addr + n <= base + size:
                return i, addr - base
        return None

    # -- memory requests at a BAR ----------------------------------------------------------------------
    def mem_read(self, bar: int, off: int, n: int) -> bytes | None:
        """`n` bytes (a multiple of 4 at a dword offset for registers and doorbells), None: unsupported."""
        fn = self.fn
        if off + n > self.bar_bytes(bar):
            return None
        if bar == 0:
            return bytes(fn.vram[off:off + n])
        if bar == 2:
            db = fn.doorbells
            return b"".join(struct.pack("<I", db.read32(off + i)) for i in range(0, n, 4))
        return b"".join(struct.pack("<I", fn.mmio.read32((off + i) // 4)) for i in range(0, n, 4))

    def mem_write(self, bar: int, off: int, data: bytes, be: int = 0xF) -> bool:
        """Write `data` (whole dwords; `be` the byte enables of a single-dword write); False: unsupported."""
        fn, n = self.fn, len(data)
        if off + n > self.bar_bytes(bar):
            return False
        if bar == 0:
            if be == 0xF:
                fn.vram[off:off + n] = data
            else:
                for i in range(4):
                    if be >> i & 1:
                        fn.vram[off + i] = data[i]
            return True
        if be != 0xF:                                      # a partial register write: read-modify-write
            old = struct.unpack("<I", self.mem_read(bar, off, 4))[0]
            new = struct.unpack("<I", data)[0]
            m = sum(0xFF << 8 * i for i in range(4) if be >> i & 1)
            data = struct.pack("<I", old & ~m | new & m)
        if bar == 2:
            db = fn.doorbells
            i = 0
            while i < n:
                if n - i >= 8 and (off + i) % 8 == 0:
                    db.write64(off + i, struct.unpack_from("<Q", data, i)[0])
                    i += 8
                else:
                    db.write32(off + i, struct.unpack_from("<I", data, i)[0])
                    i += 4
            return True
        for i in range(0, n, 4):
            fn.mmio.write32((off + i) // 4, struct.unpack_from("<I", data, i)[0])
        return True


class Topology:
    """Routes the root's requests: config TLPs down the bridge chain by bus number, memory TLPs down the
    bridges' windows to the GPU's BARs; and the GPU's DMA up to the root (BridgeBus.upstream_ok)."""

    def __init__(self, fn: Any, bus: BridgeBus):
        self.bridges = [Type1(i) for i in range(len(U.BRIDGE_BUSES))]
        self.gpu = Endpoint(fn)
        self.bus = bus
        bus.upstream_ok = self.upstream_ok

    def reset(self) -> None:
        """PCIe power off: every function back at power-on."""
        for b in self.bridges:
            b.reset()
        self.gpu.reset()

    def _target(self, fmt_type: int, bus: int, device: int, function: int) -> Any | None:
        """The function a config request reaches, None: nobody claims it (Unsupported Request)."""
        chain: list[Any] = [*self.bridges, self.gpu]      # chain[k] sits on the link below bridge k-1
        link_bus, k = 0, 0
        if fmt_type & 1 == 0:                             # type 0: the device on the root's link
            return chain[0] if device == 0 and function == 0 else None
        while k < len(self.bridges):
            br = self.bridges[k]
            if not br.forwards_config(bus):
                return None
            link_bus, k = br.secondary, k + 1
            if bus == link_bus:                           # type 1 becomes type 0 on this link
                return chain[k] if device == 0 and function == 0 else None
        return None

    def config(self, fmt_type: int, bus: int, device: int, function: int, off: int, size: int,
               value: int | None) -> tuple[int, int]:
        """(completion status, data) of a config read (value None) or write."""
        t = self._target(fmt_type, bus, device, function)
        if t is None:
            return UR, 0
        if value is None:
            return U.CPL_SC, t.config_read(off, size) if isinstance(t, Endpoint) else t.read(off, size)
        if isinstance(t, Endpoint):
            t.config_write(off, size, value)
        else:
            t.write(off, size, value)
        return U.CPL_SC, 0

    def route_memory(self, addr: int, n: int) -> tuple[int, int] | None:
        """(BAR, offset) a host memory request of `n` bytes reaches, None: Unsupported Request."""
        for br in self.bridges:
            if not br.forwards_memory(addr, n):
                return None
        return self.gpu.bar_at(addr, n)

    def upstream_ok(self) -> bool:
        """The GPU's requests reach the root: it and every bridge master the bus."""
        return bool(self.gpu.fn.config[4] & CMD_MASTER) and all(b.command & CMD_MASTER for b in self.bridges)
