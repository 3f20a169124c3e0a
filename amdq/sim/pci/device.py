"""The simulated PCI function (SIMPCI+AMD[:ARCH]): config space, BAR0 (VRAM, large or small), BAR2
(doorbells), BAR5 (MMIO: the register file whose side effects are the simulated blocks), VRAM with the IP
discovery binary at its place, mode1 reset, a state file that survives the process, boot fault injection.

On the bus (sim/host.py): the function claims bus windows for its 64-bit BARs 0 and 2 when it is created and
reports their addresses in its config-space BAR registers (read-only here: the host assigned them; the sizing
protocol is not modelled); another GPU's DMA to the BAR0 window reaches this VRAM (peer-to-peer) while memory
decoding is on. A gfx9 function may be a node of an XGMI hive (`xgmi=` or AMDQ_SIM_XGMI: the hive's name,
sim/xgmi.py): its IFWI sets the XGMI_LFB registers of every hub to the node's id and segment.

Hardware facts (sources):
* PCI IDs and classes: the PCI ID repository (pci.ids) entries of the reference boards of
  amdq.hw.targets (Navi 31 0x744c, Navi 48 0x7550, MI300X 0x74a1); class 0x030000 (VGA) for the Radeon
  boards and 0x120000 (processing accelerator) for Instinct; config-space layout from the PCI Local Bus
  specification (type 0 header: vendor @0, device @2, command @4 with memory-space bit 1 and bus-master
  bit 2, revision @8, class @9..0xb, BARs @0x10..0x24 with 64-bit prefetchable memory BARs 0/2 and the
  32-bit MMIO BAR 5 of these GPUs).
* Registers read before discovery: RCC_CONFIG_MEMSIZE (MiB) and MP0_SMN_C2PMSG_33 bit 31 (IFWI init done)
  at fixed dword addresses (amdgpu_discovery.c, see amdq.hw.discovery); the FB aperture the VBIOS sets
  in GCMC/MMMC_VM_FB_LOCATION_BASE/TOP (bits 47:24 of the address; gmc_v11_0.c, mmhub_v3_0.c).

Simulator choices (not hardware facts; the driver reads them from the device, never assumes them):
the FB base (FB_BASE), BAR2 and BAR5 sizes, the small-BAR size, and which part of VRAM the state file
keeps (STATE_VRAM_BYTES at the top: the boot region lives there; VRAM below does not survive a process).

`bus=`: the function sits on another bus than the host's (behind the simulated USB bridge: sim/usb/pcie.py, whose
bus gives the BARs no address until the host assigns them through config space there).

A register access beyond BAR5 is not decoded (as a BAR decodes only its size): the driver reaches such
registers through the NBIO's PCIE_INDEX2/DATA2 pair, as on hardware.
"""
from __future__ import annotations

import atexit
import collections
import fcntl
import importlib
import json
import mmap
import os
import random
import struct
import sys
import time
import zlib
from functools import partial
from typing import Any, Callable

import numpy as np

from ...errors import DeviceError, GPUFault, OutOfMemory, RegisterError
from ...hw import discovery as D
from ...hw.regmap import Layout, Registers
from ...hw.targets import Target, get_target
from ...iface.base import DMABuffer
from ..host import host_bus
from .. import xgmi as simxgmi
from ..regfile import RegisterFile
from . import gfx as simgfx
from . import sdma as simsdma
from .nbio import SimNBIO
from .part import SimPart

# --- PCI identity (pci.ids) --------------------------------------------------------------------------------
VENDOR_AMD = 0x1002
PCI_IDS: dict[str, tuple[int, int, int]] = {       # arch -> (device id, revision, class code)
    "gfx1100": (0x744C, 0xC8, 0x030000),          # Navi 31 [Radeon RX 7900 XT/7900 XTX]
    "gfx1101": (0x747E, 0xC8, 0x030000),          # Navi 32 [Radeon RX 7700 XT / 7800 XT]
    "gfx1102": (0x7480, 0xC0, 0x030000),          # Navi 33 [Radeon RX 7600]
    "gfx1200": (0x7590, 0xC0, 0x030000),          # Navi 44 [Radeon RX 9060 XT]
    "gfx1201": (0x7550, 0xC0, 0x030000),          # Navi 48 [Radeon RX 9070/9070 XT]
    "gfx942": (0x74A1, 0x00, 0x120000),           # Aqua Vanjaram [Instinct MI300X]
    "gfx950": (0x75A0, 0x00, 0x120000),           # [Instinct MI355X]
}
CMD_MEMORY, CMD_MASTER = 1 << 1, 1 << 2           # command register bits
BAR_MEM64_PREFETCH, BAR_MEM32 = 0xC, 0x0          # BAR low bits: 64-bit prefetchable / 32-bit memory
BAR_MEM64 = 0x4                                   # BAR bits 2:1 = 2: a 64-bit BAR (its upper half in the next dword)
BAR_REGS = range(0x10, 0x28)                      # the six BAR dwords

# --- simulator choices ----------------------------------------------------------------------------------
FB_BASE = 0x80_0000_0000                          # where the FB aperture starts in the GPU's address space
DOORBELL_BYTES = 2 << 20
MMIO_BYTES = {9: 8 << 20, 11: 1 << 20, 12: 1 << 20}
SMALL_BAR_BYTES = 256 << 20
STATE_VRAM_BYTES = 128 << 20                      # the top of VRAM (below the discovery table) the state keeps
STATE_CHUNK = 1 << 16
STATE_MAGIC = b"AMDQSIMPCI1\n"

# The blocks other modules simulate, found by module (each defines one SimPart subclass), in boot order.
PART_MODULES = {"gmc": "amdq.sim.pci.gmc", "ih": "amdq.sim.pci.ih", "psp": "amdq.sim.pci.psp",
                "smu": "amdq.sim.pci.smu"}
_registered: dict[str, Callable[[Any], SimPart]] = {}


def register_part(name: str, factory: Callable[[Any], SimPart] | None) -> None:
    """Use `factory(dev)` for simulated block `name` instead of its module (None: back to the module). For
    tests that stand in for a block before its module exists."""
    if factory is None:
        _registered.pop(name, None)
    else:
        _registered[name] = factory


def _part_class(name: str) -> Callable[[Any], SimPart] | None:
    if name in _registered:
        return _registered[name]
    try:
        mod = importlib.import_module(PART_MODULES[name])
    except ModuleNotFoundError as e:
        if e.name != PART_MODULES[name]:
            raise
        return None
    if hasattr(mod, "INJECT_KINDS"):                   # the block's own fault kinds, before the env is parsed
        from ..inject import add_kinds
        add_kinds(mod.INJECT_KINDS)
    if hasattr(mod, "for_target"):
        return mod.for_target
    classes = [c for c in vars(mod).values()
               if isinstance(c, type) and issubclass(c, SimPart) and c is not SimPart and c.__module__ == mod.__name__]
    if len(classes) != 1:
        raise DeviceError(f"{mod.__name__}: expected one SimPart class or a for_target(dev), found "
                          f"{[c.__name__ for c in classes]}")
    return classes[0]


def state_dir() -> str:
    """Where simulated devices keep their state (AMDQ_SIM_STATE, default ~/.cache/amdq/sim-state)."""
    return os.environ.get("AMDQ_SIM_STATE") or os.path.join(
        os.environ.get("AMDQ_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "amdq")), "sim-state")


_U64 = struct.Struct("<Q")
SYNC_IDLE_MS = (0.2, 1.0)       # a sync-mode interrupt wait's pause when the GPU did not move: first, longest


class Doorbells:
    """BAR2: dword doorbells; a write rings the simulated GPU's engine behind that doorbell index."""

    def __init__(self, dev: "SimPCIDevice", size: int):
        self.dev, self.size = dev, size
        self.mv = memoryview(bytearray(size))
        self._config, self._ring = dev.config, dev.gpu.ring    # the command register and the GPU (the launch path)

    def _check(self, off: int, n: int) -> None:
        if not 0 <= off <= self.size - n or off % 4:
            raise RegisterError(f"doorbell offset {off:#x} is outside the {self.size:#x}-byte doorbell BAR or unaligned")

    def read32(self, off: int) -> int:
        self._check(off, 4)
        return struct.unpack_from("<I", self.mv, off)[0]

    def write32(self, off: int, value: int) -> None:
        self._check(off, 4)
        struct.pack_into("<I", self.mv, off, value & 0xFFFFFFFF)
        if self.dev.memory_enabled:
            self.dev.gpu.ring(off // 4, value & 0xFFFFFFFF)

    def write64(self, off: int, value: int) -> None:
        if not 0 <= off <= self.size - 8 or off & 3:               # (_check, inline: the launch path)
            self._check(off, 8)
        value &= 0xFFFFFFFFFFFFFFFF
        _U64.pack_into(self.mv, off, value)
        if self._config[4] & CMD_MEMORY:
            self._ring(off >> 2, value)

    def writer64(self, off: int):
        """write64 at `off` as a function of the value (the runtime binds a queue's doorbell once)."""
        self._check(off, 8)
        return self.dev.gpu.ringer(off >> 2, partial(_U64.pack_into, self.mv, off), (self._config, 4, CMD_MEMORY))


class MMIO:
    """BAR5 as the CPU sees it: dword registers up to the BAR's size; a disabled function reads all ones."""

    def __init__(self, dev: "SimPCIDevice", size: int):
        self.dev, self.size = dev, size

    def _check(self, addr: int) -> None:
        if not 0 <= addr * 4 <= self.size - 4:
            raise RegisterError(f"register address {addr:#x} is outside the {self.size:#x}-byte register BAR "
                                f"(reach it through BIF_BX0_PCIE_INDEX2/DATA2)")

    def read32(self, addr: int) -> int:
        self._check(addr)
        if not self.dev.memory_enabled:
            return 0xFFFFFFFF
        return self.dev.mmio_read32(addr)

    def write32(self, addr: int, value: int) -> None:
        self._check(addr)
        if self.dev.memory_enabled:
            self.dev.mmio_write32(addr, value)


class SimPCIDevice:
    """One simulated AMD GPU behind a PCI function. Implements the SimDevice contract of part.py for the
    simulated blocks, and the function's side (config space, BARs) for the interface."""

    def __init__(self, arch: str = "gfx1100", small_bar: bool = False, state: str | None = None,
                 persist: bool = True, mode: str | None = None, xgmi: str | None = None, bus: Any = None):
        from ..gpu import SimGPU
        self.target: Target = get_target(arch)
        self.arch = arch
        self.name = f"SIMPCI+AMD:{arch}"
        xgmi = xgmi if xgmi is not None else os.environ.get("AMDQ_SIM_XGMI") or None
        if xgmi and self.target.gfx_version != 9:
            raise DeviceError(f"{arch} has no XGMI links: only gfx9 parts (gfx942, gfx950) join a hive")
        parts = {n: _part_class(n) for n in PART_MODULES}           # before the injector reads AMDQ_SIM_INJECT
        from ..inject import add_kinds
        add_kinds(simgfx.INJECT_KINDS)
        self.gpu = SimGPU(arch, mode=mode, bus=host_bus() if bus is None else bus)   # the host's RAM and bus, shared by
        # every function; or another bus (behind a USB bridge, sim/usb/pcie.py), which places the BARs itself
        self.hive, self.node = (simxgmi.hive(xgmi), None) if xgmi else (None, None)
        self.inject = self.gpu.inject
        self.clear = self.gpu.clear                 # disarm an injection (as on the simulated GPU behind SIMKFD)
        self._exceptions: collections.deque = collections.deque()
        self.vram_size = self.gpu.vram.size
        self.vram: memoryview = self.gpu.vram.view(0, self.vram_size)
        self.discovery = D.for_target(self.target)
        self.layout = Layout(self.discovery.blocks())
        self.fb_base = FB_BASE
        self.t0 = time.perf_counter_ns()
        self.resets = 0
        self.lost_interrupts: list[tuple] = []
        # blocks: ours, then the others' (a missing module is a block this build does not simulate)
        self.nbio = SimNBIO(self)
        self.gfx = simgfx.for_target(self)
        self.sdma = simsdma.for_target(self)
        self.parts: dict[str, SimPart] = {"nbio": self.nbio, "gfx": self.gfx, "sdma": self.sdma}
        self.raw: Registers = Registers(self.layout, _Pending(), from_env=False)   # bound below
        for n, cls in parts.items():
            if cls is not None:
                self.parts[n] = cls(self)
        self.missing = [n for n, cls in parts.items() if cls is None]
        self.regfile = RegisterFile(self.layout, self, *self.parts.values())
        self.raw = self.regfile.raw
        # PCI function
        dev_id, rev, cls_code = PCI_IDS[arch]
        self.bar_sizes = {0: min(SMALL_BAR_BYTES, self.vram_size) if small_bar else self.vram_size,
                          2: DOORBELL_BYTES, 5: MMIO_BYTES[self.target.gfx_version]}
        self.small_bar = small_bar
        self.config = bytearray(4096)
        struct.pack_into("<HHHHB", self.config, 0, VENDOR_AMD, dev_id, 0, 0x0010, rev)
        self.config[9:12] = cls_code.to_bytes(3, "little")
        bus = self.gpu.bus
        self.bus_windows = {0: bus.claim(f"{self.name} BAR0", self.bar_sizes[0], self.gpu.vram,
                                         live=lambda: self.memory_enabled),
                            2: bus.claim(f"{self.name} BAR2", DOORBELL_BYTES)}
        for i, flags in ((0, BAR_MEM64_PREFETCH), (2, BAR_MEM64_PREFETCH), (5, BAR_MEM32)):
            addr = self.bus_windows.get(i, 0)
            struct.pack_into("<I", self.config, 0x10 + 4 * i, flags | (addr & 0xFFFFFFF0))
            if flags & BAR_MEM64:
                struct.pack_into("<I", self.config, 0x14 + 4 * i, addr >> 32)
        if self.hive is not None:
            self.node = self.hive.join(self.gpu.vram)
            self.gpu.hive = self.hive
        self.doorbells = Doorbells(self, DOORBELL_BYTES)
        self.mmio = MMIO(self, self.bar_sizes[5])
        # power on, then what survived the last process, then boot-time injections
        self.state_path = os.path.join(state or state_dir(), f"SIMPCI-{arch}.state") if persist else None
        self._saved_vram: tuple[list[int], bytes] | None = None
        try:
            self._lock_fd = self._lock() if persist else None
            self.power_on()
            self.restored = self._load_state()
            self._board_regs()                  # the board's topology, whatever a state file of another one said
            self._inject_boot()
            self.gpu.irq_handlers.append(self._record)   # after the IH's: a queue's record follows its vector
        except BaseException:
            self._leave_bus()
            self.gpu.close()
            raise
        atexit.register(self.close)             # a process that ends without closing still leaves its state

    def __getattr__(self, name: str) -> Any:
        """What the function does not have is the simulated GPU's behind it (its clock, engines, pump,
        wait_idle, core ...): tests and tools reach the GPU through `Device.sim` on every interface."""
        if name == "gpu" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.gpu, name)

    @property
    def defer(self) -> bool:
        """The simulated GPU's `defer` (set through the function as through the GPU: __getattr__ only reads)."""
        return self.gpu.defer

    @defer.setter
    def defer(self, on: bool) -> None:
        self.gpu.defer = on

    # -- the SimDevice contract ------------------------------------------------------------------------
    def mc_read(self, addr: int, n: int) -> bytes:
        off = self._fb(addr, n)
        return bytes(self.vram[off:off + n])

    def mc_write(self, addr: int, data: bytes) -> None:
        off = self._fb(addr, len(data))
        self.vram[off:off + len(data)] = data

    def _fb(self, addr: int, n: int) -> int:
        off = addr - self.fb_base
        if not 0 <= off <= self.vram_size - n:
            raise GPUFault(f"memory-controller address {addr:#x} (+{n}) is outside the FB aperture "
                           f"{self.fb_base:#x}..{self.fb_base + self.vram_size:#x}", address=addr)
        return off

    def interrupt(self, client_id: int, src_id: int, src_data: tuple[int, ...] = (), **fields: int) -> None:
        """An interrupt vector to the IH (fields: ring_id, vmid, vmid_src, pasid, node_id; see sim/pci/ih.py)."""
        ih = self.parts.get("ih")
        post = getattr(ih, "post", None)
        if post is None:
            self.lost_interrupts.append((client_id, src_id, tuple(src_data)))
        else:
            post(client_id, src_id, tuple(src_data), **fields)

    irq = "msi"                                 # the function's interrupt, as the PCI interface names it

    def wait_interrupt(self, timeout_ms: float | None) -> int:
        """Sleep until the IH signals the host (its MSI) or the timeout; the signals counted (0: timed out)."""
        wait = getattr(self.parts.get("ih"), "wait", None)
        if self.gpu.mode != "async":            # sync mode: the GPU advances on the threads that wait for it
            end = None if timeout_ms is None else time.monotonic() + max(0, timeout_ms) / 1000
            idle_ms = SYNC_IDLE_MS[0]
            while True:
                n = wait(0) if wait is not None else 0
                if n:
                    return n
                pumped = self.gpu.pump(64)          # at least one slice, even for a zero timeout
                if end is not None and time.monotonic() >= end:
                    return wait(0) if wait is not None else 0
                if pumped:
                    idle_ms = SYNC_IDLE_MS[0]
                    continue
                # nothing moved: asleep on the IH's signal (another thread's doorbell pumps the GPU and posts
                # there), a pause doubling up to SYNC_IDLE_MS[1] before looking again (an engine may wait on
                # memory the host writes without a doorbell)
                n = wait(idle_ms) if wait is not None else time.sleep(idle_ms / 1000) or 0
                if n:
                    return n
                idle_ms = min(idle_ms * 2, SYNC_IDLE_MS[1])
        if wait is None:
            time.sleep(max(0, timeout_ms or 0) / 1000)
            return 0
        return wait(timeout_ms)

    def clock_ns(self) -> int:
        return time.perf_counter_ns() - self.t0

    def firmware_loaded(self, fw_type: int, image: bytes) -> None:
        """The PSP accepted firmware `fw_type` (GFX_FW_TYPE_*): the blocks whose code it is hear of it."""
        for p in self.parts.values():
            f = getattr(p, "on_firmware", None)
            if f is not None:
                f(fw_type, image)

    def autoload_rlc(self) -> bool:
        """The PSP starts the RLC autoload (GFX_CMD_ID_AUTOLOAD_RLC); True if the RLC could start."""
        return self.gfx.on_autoload_rlc()

    def mode1_reset(self) -> None:
        """A mode1 reset (asked of the SMU or of the PSP's sOS): the whole GPU (PCI config space aside) is back at
        power-on."""
        self.resets += 1
        self.power_on()
        self.save_state()

    # -- register access (the full path, with side effects) -----------------------------------------------
    def mmio_read32(self, addr: int) -> int:
        if self.nbio.fixed(addr):
            return self.nbio.read_fixed(addr)
        return self.regfile.read32(addr)

    def mmio_write32(self, addr: int, value: int) -> None:
        if self.nbio.fixed(addr):
            self.nbio.write_fixed(addr, value & 0xFFFFFFFF)
        else:
            self.regfile.write32(addr, value)

    # handlers of the device itself: the state file follows the boot-state register
    def on_write_regSCRATCH_REG6(self, value: int) -> None:
        self.save_state(vram=False)

    # -- power-on ---------------------------------------------------------------------------------------
    def power_on(self) -> None:
        """Power-on state: VRAM cleared but for the discovery binary the IFWI places, registers at their reset
        values, every block reset, the registers firmware sets before any driver runs."""
        self.gpu.vram._map.madvise(mmap.MADV_DONTNEED, 0, self.vram_size)
        blob = D.encode(self.discovery)
        off = D.vram_offset(self.vram_size)
        self.vram[off:off + len(blob)] = blob
        if hasattr(self, "regfile"):
            self.regfile.store.values.clear()
        for p in self.parts.values():
            p.reset()
        poke = self.regfile.poke
        poke(D.REG_RCC_CONFIG_MEMSIZE, self.vram_size >> 20)
        poke(D.REG_MP0_SMN_C2PMSG_33, D.IFWI_INIT_DONE | self.regfile.peek(D.REG_MP0_SMN_C2PMSG_33))
        top = (self.fb_base + self.vram_size - 1) >> 24
        for i in range(self.layout.blocks["GC"].instances):
            gc = self.raw.block("GC", i)
            gc.regGCMC_VM_FB_LOCATION_BASE.write(FB_BASE=self.fb_base >> 24)
            gc.regGCMC_VM_FB_LOCATION_TOP.write(FB_TOP=top)
        mm = self.raw.MMHUB
        mm.regMMMC_VM_FB_LOCATION_BASE.write(FB_BASE=self.fb_base >> 24)
        mm.regMMMC_VM_FB_LOCATION_TOP.write(FB_TOP=top)
        self._board_regs()
        if "regSDMA0_F32_CNTL" in self.raw.GC:                   # SDMA and MEC come out of reset halted
            for n in (0, 1):
                self.raw.GC[f"regSDMA{n}_F32_CNTL"].write(HALT=1)
        if "regSDMA0_MCU_CNTL" in self.raw.GC:
            for n in (0, 1):
                self.raw.GC[f"regSDMA{n}_MCU_CNTL"].write(HALT=1)
        for i in range(self.layout.blocks["GC"].instances):
            gc = self.raw.block("GC", i)
            if "regCP_MEC_RS64_CNTL" in gc:
                gc.regCP_MEC_RS64_CNTL.write(MEC_HALT=1)
            else:
                gc.regCP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1)

    def _board_regs(self) -> None:
        """The XGMI_LFB registers the IFWI sets on every hub of a gfx9 part: the node's place in its hive (all 0, XGMI
        off, outside one)."""
        if self.target.gfx_version != 9:
            return
        fields = self.hive.registers(self.node) if self.hive is not None and self.node is not None else \
            {"XGMI_LFB_CNTL": {}, "XGMI_LFB_SIZE": {}}
        hubs = (("GC", "regGCMC_VM_", self.layout.blocks["GC"].instances), ("MMHUB", "regMMMC_VM_", 1))
        for block, prefix, n in hubs:
            for i in range(n):
                regs = self.raw.block(block, i)
                for name, f in fields.items():
                    if prefix + name in regs:
                        regs[prefix + name].write(**f)

    # -- the PCI function -------------------------------------------------------------------------------
    @property
    def memory_enabled(self) -> bool:
        return bool(self.config[4] & CMD_MEMORY)          # the command register's low byte (memory decode)

    def config_read(self, off: int, size: int = 4) -> int:
        if size not in (1, 2, 4) or not 0 <= off <= len(self.config) - size:
            raise RegisterError(f"config space read of {size} bytes at {off:#x} is outside the 4 KiB config space")
        return int.from_bytes(self.config[off:off + size], "little")

    def config_write(self, off: int, size: int, value: int) -> None:
        if size not in (1, 2, 4) or not 0 <= off <= len(self.config) - size:
            raise RegisterError(f"config space write of {size} bytes at {off:#x} is outside the 4 KiB config space")
        if off < 4 or 8 <= off < 0x10 or off + size > BAR_REGS.start and off < BAR_REGS.stop:
            return                                      # identity, class and the assigned BARs are read-only
        self.config[off:off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def bar_bus_address(self, n: int) -> int:
        """Where BAR `n` sits on the bus: the address in its config-space register (0: not assigned)."""
        if n not in (0, 2, 5):
            raise DeviceError(f"the simulated function has BARs 0, 2 and 5, not {n}")
        lo = self.config_read(0x10 + 4 * n)
        hi = self.config_read(0x14 + 4 * n) if lo & 0x6 == BAR_MEM64 else 0
        return hi << 32 | lo & 0xFFFFFFF0

    def bar(self, n: int) -> Any:
        """BAR0: VRAM (a memoryview of its first bar_sizes[0] bytes); BAR2: doorbells; BAR5: registers."""
        if n == 0:
            return self.vram[:self.bar_sizes[0]]
        if n == 2:
            return self.doorbells
        if n == 5:
            return self.mmio
        raise DeviceError(f"the simulated function has BARs 0, 2 and 5, not {n}")

    # -- what a debugger gets (the simulator keeps the engines' whole records) -----------------------------
    def _record(self, source: str, ctxid: int, vmid: int, info: dict) -> None:
        exc, eng = info.get("exception"), info.get("engine")
        if exc is not None:
            bell = next((d for d, e in list(self.gpu.engines.items()) if e is eng or eng in getattr(e, "xccs", ())),
                        None)
            self._exceptions.append((bell, exc))

    def take_exceptions(self) -> list[tuple[int | None, Any]]:
        """(doorbell index, QueueException) of every queue that stopped since the last call: the record as the
        engine kept it (what amdgpu reads back through SQ/CP debug registers; the simulator keeps it whole)."""
        out = []
        while self._exceptions:
            out.append(self._exceptions.popleft())
        return out

    def queue_progress(self, doorbell: int) -> int | None:
        """Packets and waves the queue behind `doorbell` has retired (a hang watchdog's view)."""
        eng = self.gpu.engines.get(doorbell)
        return getattr(eng, "progress", None)

    # -- host memory the GPU reaches (DMA) ----------------------------------------------------------------
    def dma_alloc(self, size: int) -> DMABuffer:
        """`size` bytes of host memory pinned for the GPU: its CPU view and its bus address."""
        if size <= 0:
            raise DeviceError(f"DMA buffer of {size} bytes")
        size = -(-size // 4096) * 4096
        host = self.gpu.sysmem
        try:                                    # 2 MiB and up: huge pages (contiguous, aligned on the bus)
            bus = host.alloc(size, 2 << 20 if size >= 2 << 20 else 4096)
        except MemoryError as e:
            raise OutOfMemory(f"host memory for the GPU: {e}") from None
        return DMABuffer(host.view(bus, size), bus, size)

    def dma_free(self, buf: DMABuffer) -> None:
        self.gpu.sysmem.free(buf.bus, buf.size)

    def dma_map(self, addr: int, size: int) -> DMABuffer:
        """The process's pages [addr, addr + size) mapped by the host IOMMU (sim/iommu.py): their bus address."""
        iommu = getattr(self.gpu.bus, "iommu", None)
        if iommu is None:
            e = DeviceError(f"{self.name}: its bus has no IOMMU to map user pages")
            e.unsupported = True
            raise e
        try:
            return DMABuffer(None, iommu.map(addr, size), size)
        except MemoryError as e:
            raise OutOfMemory(f"IOVA space for {size} bytes of user pages: {e}") from None

    def dma_unmap(self, buf: DMABuffer) -> None:
        self.gpu.bus.iommu.unmap(buf.bus)

    # -- state that survives the process ------------------------------------------------------------------
    def _state_window(self) -> tuple[int, int]:
        end = D.vram_offset(self.vram_size)
        return max(0, end - STATE_VRAM_BYTES), end

    def _lock(self) -> int:
        d = os.path.dirname(self.state_path)
        os.makedirs(d, exist_ok=True)
        fd = os.open(self.state_path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DeviceError(f"the simulated device {self.name} (state {self.state_path}) is in use by another "
                              f"process; set AMDQ_SIM_STATE to another directory for a second one") from None
        return fd

    def save_state(self, vram: bool = True) -> None:
        """Write what a real GPU keeps across processes: the top of VRAM, the registers, the blocks' state.
        vram=False keeps the VRAM of the last full save (the boot-state register writes: cheap, and what a
        process killed right after them must leave behind); close() and mode1 reset save VRAM too."""
        if self.state_path is None:
            return
        lo, hi = self._state_window()
        if vram or self._saved_vram is None:
            buf = np.frombuffer(self.vram[lo:hi], np.uint8).reshape(-1, STATE_CHUNK)
            used = np.flatnonzero(buf.any(axis=1))
            self._saved_vram = (used.tolist(), zlib.compress(buf[used].tobytes(), 1))
        chunks, body = self._saved_vram
        head = {"arch": self.arch, "vram": self.vram_size, "window": [lo, hi], "chunks": chunks,
                "regs": {str(a): v for a, v in self.regfile.store.values.items() if v},
                "parts": {n: p.save() for n, p in self.parts.items()}}
        hj = json.dumps(head).encode()
        tmp = f"{self.state_path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(STATE_MAGIC + struct.pack("<Q", len(hj)) + hj + body)
        os.replace(tmp, self.state_path)

    def _load_state(self) -> bool:
        if self.state_path is None or not os.path.exists(self.state_path):
            return False
        try:
            with open(self.state_path, "rb") as f:
                raw = f.read()
            if not raw.startswith(STATE_MAGIC):
                raise ValueError("not a state file")
            n = struct.unpack_from("<Q", raw, len(STATE_MAGIC))[0]
            p = len(STATE_MAGIC) + 8
            head = json.loads(raw[p:p + n])
            if head["arch"] != self.arch or head["vram"] != self.vram_size:
                raise ValueError(f"it is for {head['arch']} with {head['vram']} bytes of VRAM")
            packed = raw[p + n:]
            body = zlib.decompress(packed)
        except (OSError, ValueError, KeyError, zlib.error) as e:
            print(f"amdq: ignoring the simulated device state {self.state_path}: {e}", file=sys.stderr)
            return False
        lo, _ = head["window"]
        self._saved_vram = (head["chunks"], packed)
        for k, c in enumerate(head["chunks"]):
            o = lo + c * STATE_CHUNK
            self.vram[o:o + STATE_CHUNK] = body[k * STATE_CHUNK:(k + 1) * STATE_CHUNK]
        self.regfile.store.values.update({int(a): v for a, v in head["regs"].items()})
        for name, st in head["parts"].items():
            if name in self.parts:
                self.parts[name].load(st)
        return True

    # -- boot fault injection ---------------------------------------------------------------------------
    def _inject_boot(self) -> None:
        d = self.inject.take("dirty_scratch")
        if d is not None:
            gc = self.raw.GC
            for n in (5, 6, 7):
                gc[f"regSCRATCH_REG{n}"].write(int(d.get(f"reg{n}", random.getrandbits(32))) & 0xFFFFFFFF)
        a = self.inject.take("amdgpu_initialised")
        if a is not None:
            self.amdgpu_initialised()
        if self.inject.take("gfx_reset") is not None:
            self.gfx.reset()

    def amdgpu_initialised(self) -> None:
        """Leave the GPU as amdgpu does: the sOS running, firmware loaded, the RLC autoloaded, MEC and SDMA
        out of halt, VRAM in use; the scratch registers are amdgpu's (not this driver's)."""
        gfx9 = self.target.gfx_version == 9
        self.gfx.loaded |= {8, 4, 5} if gfx9 else {8, 0x44, 0x45, 0x59}
        self.sdma.loaded |= set(simsdma.SDMA_FW[self.sdma.major])
        if not gfx9:
            self.gfx.on_autoload_rlc()
        mp0 = self.raw.MP0
        for name in ("regMP0_SMN_C2PMSG_81", "regMPASP_SMN_C2PMSG_81"):
            if name in mp0:
                mp0[name].write(0x3A0000)                 # the sOS reports itself alive
        for p in self.parts.values():
            hook = getattr(p, "amdgpu_initialised", None)
            if hook is not None:
                hook()
        lo, hi = self._state_window()
        self.vram[lo:lo + 4096] = bytes(random.getrandbits(8) for _ in range(4096))
        gc = self.raw.GC
        for n in (5, 6, 7):
            gc[f"regSCRATCH_REG{n}"].write(0)

    def _leave_bus(self) -> None:
        """The function's BAR windows leave the bus, its VRAM the XGMI hive."""
        for base in self.bus_windows.values():
            self.gpu.bus.release(base)
        self.bus_windows = {}
        if self.hive is not None and self.node is not None:
            self.hive.leave(self.node)
            self.node = None

    def close(self) -> None:
        """Power off this process's view: the state is written, the lock released, the GPU model stopped."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        atexit.unregister(self.close)
        try:
            self.save_state()
        finally:
            self.gpu.close()
            self._leave_bus()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


class _Pending:
    """The backend of `raw` while the register file is being built (parts may keep `dev`, not `dev.raw`)."""

    def read32(self, addr: int) -> int:
        raise RegisterError("the simulated register file is not built yet")

    write32 = read32
