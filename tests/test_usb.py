"""The USB interface (amdq/iface/usb.py): the bridge's requests and TLPs byte for byte against the facts
(shared/facts/usb_asm24.json), the PCIe bring-up, the register/VRAM/doorbell backends, libusb errors and unplug.

`Recorder` is a small fake libusb handle: it records every transfer and answers from a tiny model of the
PCIe side (config space of the four bridges and the GPU, BAR sizing, memory behind the BARs)."""
from __future__ import annotations

import struct

import pytest
import usb1

from amdq.errors import DeviceError, DeviceLost
from amdq.hw import usb_asm24 as H
from amdq.iface import usb as U


class GPUConfig:
    """Config space of a GPU function: BARs of the given sizes (sizing with all-ones), a Resizable-BAR capability."""

    def __init__(self, bars: dict[int, tuple[int, int]], rebar_sizes: int = 0x3FF0):
        self.space = bytearray(4096)
        struct.pack_into("<HH", self.space, 0, 0x1002, 0x744C)
        self.bars = bars                        # BAR index -> (size, type bits)
        self.val: dict[int, int] = {i: t for i, (s, t) in bars.items()}
        self.hi: dict[int, int] = {i: 0 for i in bars}
        struct.pack_into("<III", self.space, 0x100, 0x00010015, rebar_sizes, 0)     # ReBAR, next 0

    def read(self, off: int) -> int:
        dw = off & ~3
        if 0x10 <= dw < 0x28:
            i = (dw - 0x10) // 4
            if i in self.bars:
                return self.val[i]
            if i - 1 in self.bars and self.bars[i - 1][1] & 4:
                return self.hi[i - 1]
            return 0
        return struct.unpack_from("<I", self.space, dw)[0]

    def write(self, off: int, be: int, v: int) -> None:
        dw = off & ~3
        if 0x10 <= dw < 0x28:
            i = (dw - 0x10) // 4
            if i in self.bars:
                size, t = self.bars[i]
                self.val[i] = (v & ~(size - 1) & 0xFFFFFFF0 | t) & 0xFFFFFFFF
            elif i - 1 in self.bars and self.bars[i - 1][1] & 4:
                size = self.bars[i - 1][0]
                self.hi[i - 1] = v & ~((size - 1) >> 32) & 0xFFFFFFFF
            return
        old = struct.unpack_from("<I", self.space, dw)[0]
        m = sum(0xFF << 8 * k for k in range(4) if be >> k & 1)
        struct.pack_into("<I", self.space, dw, old & ~m | v & m)


class Recorder:
    """A fake usb1 handle (see the module doc). `calls` lists every transfer as a tuple."""

    def __init__(self, bars=None, link=H.LTSSM_L0, power_up=True):
        self.calls: list[tuple] = []
        self.xdata = bytearray(0x10000)
        self.xdata[H.XDATA_LTSSM_STATE] = link
        self.power_up = power_up
        self.cfg: dict[tuple[int, int, int], object] = {(b, 0, 0): bytearray(4096) for b in range(4)}
        for b in range(4):                                  # PCI-to-PCI bridges: an id, header type 1
            struct.pack_into("<HH", self.cfg[(b, 0, 0)], 0, 0x1B21, 0x2400 + b)
            self.cfg[(b, 0, 0)][0x0E] = 1
        self.gpu = GPUConfig(bars or {0: (256 << 20, 0xC), 2: (0x200000, 0x0), 5: (0x100000, 0x0)})
        self.mem: dict[int, int] = {}          # bus address -> byte
        self.reply = b""
        self.stream = None
        self.engine_fail = 0                   # F0 IN answers with byte 7 set this many times
        self.gone = False

    # config model: a bus is reachable when a bridge routes it (secondary <= bus <= subordinate)
    def _reachable(self, bus: int) -> bool:
        if bus == 0:
            return True
        for b in range(4):
            s = self.cfg[(b, 0, 0)]
            if s[0x19] <= bus <= s[0x1A] and s[0x19] != 0:
                return True
        return False

    def controlWrite(self, rt, req, value, index, data, timeout=0):
        if self.gone:
            raise usb1.USBErrorNoDevice(-4)
        self.calls.append(("out", rt, req, value, index, bytes(data), timeout))
        if req == H.REQ_XDATA_WRITE:
            self.xdata[value] = index
        elif req == H.REQ_PCIE_POWER:
            self.xdata[H.XDATA_LTSSM_STATE] = H.LTSSM_L0 if value and self.power_up else 0
        elif req == H.REQ_TLP:
            fmt, be, mode = value & 0xFF, value >> 8, index & 3
            lo, hi, word = struct.unpack("<III", data)
            addr = hi << 32 | lo
            if mode:
                self.stream = (mode, addr, word * 4)
                return len(data)
            if fmt in (H.MWR32, H.MWR64):                   # a single posted memory write
                for k in range(4):
                    if be >> k & 1:
                        self.mem[(addr & ~3) + k] = word >> 8 * k & 0xFF
            elif fmt & 0xBE == 0x04:                       # config
                bus, dev, fn, off = addr >> 24, (addr >> 19) & 31, (addr >> 16) & 7, addr & 0xFFC
                dst = self.gpu if (bus, dev, fn) == (4, 0, 0) else self.cfg.get((bus, dev, fn))
                if dst is None or not self._reachable(bus):
                    self.reply = struct.pack("<I", 0xFFFFFFFF) + bytes([1 << 5, 0, 0, 0])
                elif fmt & 0x40:
                    if isinstance(dst, GPUConfig):
                        dst.write(off, be, word)
                    else:
                        old = struct.unpack_from("<I", dst, off)[0]
                        m = sum(0xFF << 8 * k for k in range(4) if be >> k & 1)
                        struct.pack_into("<I", dst, off, old & ~m | word & m)
                    self.reply = bytes(8)
                else:
                    v = dst.read(off) if isinstance(dst, GPUConfig) else struct.unpack_from("<I", dst, off)[0]
                    self.reply = struct.pack("<I", v) + bytes(4)
        return len(data)

    def controlRead(self, rt, req, value, index, length, timeout=0):
        if self.gone:
            raise usb1.USBErrorNoDevice(-4)
        self.calls.append(("in", rt, req, value, index, length, timeout))
        if req == H.REQ_XDATA_READ:
            return bytes(self.xdata[value:value + length])
        if req == H.REQ_TLP:
            if self.engine_fail:
                self.engine_fail -= 1
                return bytes(7) + b"\x01"
            return self.reply
        raise usb1.USBErrorPipe(-9)

    def bulkWrite(self, ep, data, timeout=0):
        if self.gone:
            raise usb1.USBErrorNoDevice(-4)
        self.calls.append(("bulk_out", ep, bytes(data), timeout))
        if self.stream and self.stream[0] == 1:
            _, addr, n = self.stream
            assert len(data) == n
            for i, b in enumerate(data):
                self.mem[addr + i] = b
        self.stream = None
        return len(data)

    def bulkRead(self, ep, length, timeout=0):
        if self.gone:
            raise usb1.USBErrorNoDevice(-4)
        self.calls.append(("bulk_in", ep, length, timeout))
        if self.stream and self.stream[0] == 2:
            _, addr, n = self.stream
            assert length == n
            self.stream = None
            return bytes(self.mem.get(addr + i, 0) for i in range(n))
        return bytes(length)

    def close(self):
        pass


# -- request and TLP encoding: exact bytes ---------------------------------------------------------------------
def test_config_read_of_gpu_id_matches_the_facts_example():
    h = Recorder()
    c = U.Controller(h)
    h.reply = struct.pack("<I", 0x744C1002) + bytes(4)
    h.cfg[(0, 0, 0)][0x19:0x1B] = bytes([1, 4])            # bus 4 routed
    assert c.config_read(4, 0, 0, 0) == 0x744C1002
    # facts: "read GPU vendor/device id (bus 4, dev 0, fn 0, offset 0)": wValue 0x0F05, wIndex 0, data 00 00 00 04 ...
    assert h.calls[0] == ("out", 0x40, 0xF0, 0x0F05, 0x0000, bytes.fromhex("000000040000000000000000"), 5000)
    assert h.calls[1] == ("in", 0xC0, 0xF0, 0, 0, 8, 5000)


def test_config_write_byte_lanes_and_type():
    h = Recorder()
    c = U.Controller(h)
    c.config_write(0, 0, 0, 0x06, 2, 0xBEEF)               # bus 0: type 0 write, bytes 2..3 of the dword at 4
    out = h.calls[0]
    assert out[2:5] == (0xF0, 0x0C << 8 | 0x44, 0)
    assert out[5] == struct.pack("<III", 0x4, 0, 0xBEEF << 16)
    assert h.calls[1][:3] == ("in", 0xC0, 0xF0)             # non-posted: its completion is collected
    with pytest.raises(U.TLPError, match="Unsupported Request"):
        c.config_read(3, 1, 2, 0x101, 1)                    # type 1, extended register, one byte at lane 1 (absent)
    out = h.calls[2]
    assert out[3] == 0x02 << 8 | 0x05
    assert out[5][:4] == struct.pack("<I", 3 << 24 | 1 << 19 | 2 << 16 | 0x100)


def test_stream_write_and_read_encoding():
    h = Recorder()
    c = U.Controller(h)
    c.mem_write(0x8_0000_1000, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    assert h.calls[0] == ("out", 0x40, 0xF0, 0x0F60, 1, struct.pack("<III", 0x1000, 8, 2), 5000)
    assert h.calls[1] == ("bulk_out", 0x02, b"\x01\x02\x03\x04\x05\x06\x07\x08", 1000)
    assert c.mem_read(0x8_0000_1004, 4) == b"\x05\x06\x07\x08"
    assert h.calls[2] == ("out", 0x40, 0xF0, 0x0F20, 2, struct.pack("<III", 0x1004, 8, 1), 5000)
    assert h.calls[3] == ("bulk_in", 0x81, 4, 30000)
    with pytest.raises(DeviceError, match="dword-aligned"):
        c.mem_read(0x1002, 4)


def test_xdata_e4_split_and_e5_one_byte_each():
    h = Recorder()
    c = U.Controller(h)
    h.xdata[0x1000:0x1000 + 300] = bytes(range(256)) + bytes(range(44))
    assert c.xdata_read(0x1000, 300) == bytes(h.xdata[0x1000:0x1000 + 300])
    assert [x[3:6] for x in h.calls] == [(0x1000, 0, 255), (0x1000 + 255, 0, 45)]
    assert all(x[1:3] == (0xC0, 0xE4) for x in h.calls)
    h.calls.clear()
    c.xdata_write(0xA800, b"\x00\x11")
    assert h.calls == [("out", 0x40, 0xE5, 0xA800, 0x00, b"", 1000), ("out", 0x40, 0xE5, 0xA801, 0x11, b"", 1000)]


def test_f2_and_f3_encoding():
    h = Recorder()
    c = U.Controller(h)
    c.sram_write(0x40000, bytes(1000))                     # slot 16, 2 sectors, 1 slot
    assert h.calls[0] == ("out", 0x40, 0xF2, 2, 16 | 1 << 8, b"", 1000)
    assert h.calls[1][:2] == ("bulk_out", 0x02) and len(h.calls[1][2]) == 1024
    c.sram_write(0, bytes(0x40000))                        # facts: wValue 0x0200, wIndex 0x1000
    assert h.calls[2][3:5] == (0x0200, 0x1000)
    assert c.sram_read_arm(0x80000) == 0x80000             # facts: copy-out read arm of 512 KiB: 0x8400 / 0x2000
    assert h.calls[4][3:5] == (0x8400, 0x2000)
    c.pcie_power(True)
    assert h.calls[5] == ("out", 0x40, 0xF3, 1, 0, b"", 10000)
    with pytest.raises(DeviceError, match="multiple of"):
        c.sram_write(0x100, b"x")


def test_posted_register_writes_are_batched_into_one_stream():
    h = Recorder()
    c = U.Controller(h)
    regs = U.Registers(c, 0x1000_0000, 0x100000)
    for i in range(4):
        regs.write32(0x40 + i, i + 1)                       # four consecutive registers
    regs.write32(0x80, 9)
    assert h.calls == []                                    # queued
    assert regs.read32(0x40) == 1                           # a read sends them first, in order
    kinds = [(x[0], x[3:5] if x[0] == "out" else None) for x in h.calls]
    assert kinds == [("out", (0x0F60, 1)), ("bulk_out", None), ("out", (0x0F60, 0)), ("out", (0x0F20, 2)),
                     ("bulk_in", None)]
    assert h.calls[0][5] == struct.pack("<III", 0x1000_0100, 0, 4)
    assert h.calls[1][2] == struct.pack("<4I", 1, 2, 3, 4)
    assert h.calls[2][5] == struct.pack("<III", 0x1000_0200, 0, 9)   # a lone dword: one single posted TLP
    with pytest.raises(DeviceError, match="outside"):
        regs.read32(0x100000 // 4)


def test_completion_status_and_engine_retry():
    h = Recorder()
    c = U.Controller(h)
    with pytest.raises(U.TLPError, match="Unsupported Request") as e:
        c.config_read(4, 0, 0, 0)                           # bus 4 not routed yet: UR
    assert e.value.status == 1
    h.engine_fail = 3
    assert c.config_read(0, 0, 0, 0) == 0x24001B21          # retried until the engine captured a completion
    assert sum(1 for x in h.calls if x[0] == "in") == 1 + 4
    h.engine_fail = 100
    with pytest.raises(U.TLPError, match="11 times"):
        c.config_read(0, 0, 0, 0)


# -- PCIe bring-up ---------------------------------------------------------------------------------------------
def test_bring_up_programs_bridges_and_places_bars():
    h = Recorder(link=0)
    c = U.Controller(h)
    top = U.bring_up(c)
    bars = top.bars
    assert top.ports == tuple(U.Port(b, 0x1B21, 0x2400 + b) for b in range(4)) and top.gpu == (0x1002, 0x744C)
    assert h.calls[0][:4] == ("in", 0xC0, 0xE4, 0xB450)
    assert ("out", 0x40, 0xF3, 1, 0, b"", 10000) in h.calls     # powered on: the link was down
    for b in range(4):
        s = h.cfg[(b, 0, 0)]
        assert struct.unpack_from("<I", s, 0x18)[0] == (b + 1) << 8 | 4 << 16
        assert struct.unpack_from("<HHHH", s, 0x20) == (0x1000, 0xFFFF, 0x0000, 0xFFFF)
        assert struct.unpack_from("<II", s, 0x28) == (8, 0xFFFFFFFF)
        assert s[4] == 7
    # ReBAR: the largest size the capability offers (bits 4..13: index 9, 512 MiB), in control bits 12:8
    assert (struct.unpack_from("<I", h.gpu.space, 0x108)[0] >> 8) & 0x1F == 9
    assert bars[0] == U.BAR(0, 0x8_0000_0000, 256 << 20, True, True)
    assert bars[2] == U.BAR(2, 0x1000_0000, 0x200000, False, False)
    assert bars[5] == U.BAR(5, 0x1020_0000, 0x100000, False, False)
    assert h.gpu.val[0] & ~0xF == 0 and h.gpu.hi[0] == 8 and h.gpu.val[2] == 0x1000_0000
    assert h.gpu.val[5] == 0x1020_0000
    assert h.gpu.space[4] == 7


def test_bars_are_placed_at_their_natural_alignment():
    h = Recorder(bars={0: (64 << 30, 0xC), 2: (0x200000, 0xC), 5: (0x100000, 0x0)})
    bars = U.bring_up(U.Controller(h)).bars
    assert bars[0].bus_address == 64 << 30                               # 0x8_0000_0000 rounded up to 64 GiB
    assert bars[2].bus_address == (64 << 30) + (64 << 30)                # the next prefetchable address after it
    assert h.gpu.hi[0] << 32 | h.gpu.val[0] & ~0xF == 64 << 30           # the BAR kept all of it (no masked bits)


def test_bring_up_names_a_missing_bridge():
    h = Recorder()
    del h.cfg[(2, 0, 0)]
    with pytest.raises(DeviceError, match="no PCIe bridge answers at bus 2"):
        U.bring_up(U.Controller(h))


def test_bring_up_without_link_says_so():
    h = Recorder(link=0, power_up=False)
    with pytest.raises(DeviceError, match="LTSSM state 0x00"):
        U.bring_up(U.Controller(h))


def test_vram_window_unaligned_and_doorbell():
    h = Recorder()
    c = U.Controller(h)
    w = U.VRAMWindow(c, 0x8_0000_0000, 1 << 20)
    w.write(0, bytes(range(16)))
    w.write(5, b"\xAA\xBB\xCC")                              # inside one dword pair: read, merge, write back
    assert w.read(3, 6) == bytes([3, 4, 0xAA, 0xBB, 0xCC, 8])
    assert len(w) == 1 << 20
    with pytest.raises(DeviceError, match="leaves"):
        w.read((1 << 20) - 2, 4)
    rang = []
    d = U.Doorbells(c, 0x1000_0000, 0x2000, before=lambda: rang.append(1))
    h.calls.clear()
    d.write64(8 * 3, 0x1234)
    assert rang == [1]
    assert h.calls == [("out", 0x40, 0xF0, 0x0F60, 1, struct.pack("<III", 0x1000_0018, 0, 2), 5000),
                       ("bulk_out", 0x02, struct.pack("<Q", 0x1234), 1000)]
    h.calls.clear()
    d.write64(8 * 3, 0x5678)                                 # the upper half unchanged: only the lower dword, one TLP
    assert h.calls == [("out", 0x40, 0xF0, 0x0F60, 0, struct.pack("<III", 0x1000_0018, 0, 0x5678), 5000)]
    h.calls.clear()
    d.write64(8 * 3, 1 << 32 | 7)                            # it changed: all 64 bits again
    assert [x[0] for x in h.calls] == ["out", "bulk_out"] and h.calls[1][2] == struct.pack("<Q", 1 << 32 | 7)
    with pytest.raises(DeviceError, match="aligned"):
        d.write64(4, 1)


# -- errors -------------------------------------------------------------------------------------------------
def test_libusb_errors_become_amdq_errors_and_unplug_is_sticky():
    h = Recorder()
    c = U.Controller(h)

    def pipe(*a, **k):
        raise usb1.USBErrorPipe(-9)
    h.bulkRead = pipe
    with pytest.raises(DeviceError, match="libusb -9") as e:
        c.mem_read(0x1000, 4)
    assert not isinstance(e.value, DeviceLost) and e.value.libusb_code == -9
    h.gone = True
    c.post(0x3000, b"wxyz")
    with pytest.raises(DeviceLost, match="memory write of 4 bytes at 0x3000.*1 queued register writes not sent"):
        c.mem_write(0x2000, b"abcd")
    n = len(h.calls)
    h.gone = False                                           # even if it answered again: lost stays lost
    with pytest.raises(DeviceLost):
        c.xdata_read(0, 1)
    assert len(h.calls) == n


# -- on the simulated bridge (amdq/sim/usb) ----------------------------------------------------------------------
import pathlib                                                           # noqa: E402

import numpy as np                                                       # noqa: E402

import amdq                                                              # noqa: E402
from amdq.sim.usb import SimUSBContext                                   # noqa: E402

VADD = (pathlib.Path(amdq.__file__).parent / "examples" / "vadd.ll").read_text()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_bring_up_on_the_simulated_bridge(arch):
    ctx = SimUSBContext(arch=arch)
    try:
        assert ctx.bridge.ltssm == 0                                     # the firmware boots with PCIe off
        fn = U.open_function(ctx)
        c = fn.ctrl
        assert ctx.bridge.ltssm == H.LTSSM_L0
        for b in range(4):                                               # bus numbers: primary 0, secondary b+1, sub 4
            assert c.config_read(b, 0, 0, 0x18) & 0xFFFFFF == (b + 1) << 8 | 4 << 16
            assert c.config_read(b, 0, 0, 0x04, 1) & 7 == 7
        assert fn.config_read(0) & 0xFFFF == 0x1002
        b0 = fn.bars[0]
        assert b0.prefetchable and b0.is64 and b0.bus_address >= 0x8_0000_0000 and b0.bus_address % b0.size == 0
        assert b0.size >= ctx.bridge.fn.bar_sizes[0]                     # resized: all of VRAM visible
        assert fn.bars[5].bus_address == 0x1000_0000 and fn.bars[5].size == fn.bar_sizes[5]
        assert ctx.bridge.pcie.route_memory(b0.bus_address + ctx.bridge.fn.bar_sizes[0] - 16, 16) == \
            (0, ctx.bridge.fn.bar_sizes[0] - 16)                         # the top of VRAM answers
        for n, b in fn.bars.items():                                     # what the GPU's BAR registers hold
            lo = fn.config_read(0x10 + 4 * n)
            hi = fn.config_read(0x14 + 4 * n) if b.is64 else 0
            assert (hi << 32 | lo) & ~0xF == b.bus_address
            assert b.bus_address % H.BAR_ALIGN == 0
        spans = sorted((b.bus_address, b.bus_address + b.size) for b in fn.bars.values())
        assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))   # no overlaps
        assert fn.config_read(4, 2) & 6 == 6                             # memory decode and bus mastering
        fn.close()
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def dev():
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    yield d
    d.close()


def test_am_boot_and_register_round_trip(dev):
    assert dev.name == "SIMUSB+AMD:gfx1100" and dev.arch == "gfx1100"
    it = dev.iface
    assert isinstance(it, U.USB) and it.report.kind == "full" and it.driver.booted
    assert it.RING_BYTES == {"compute": 1 << 20, "sdma": 1 << 20}
    assert dev.queue.ring_bytes == 1 << 20 and dev.copyq.ring_bytes == 1 << 20
    r = it.driver.regs.GC.regSCRATCH_REG5                                # the TMR size this boot noted: put back
    keep = r.read()
    n = it.fn.ctrl.transfers
    r.write(0x5A5AC3C3)
    assert it.fn.ctrl.transfers == n                                     # queued ...
    assert r.read() == 0x5A5AC3C3                                        # ... and sent before the read
    assert it.fn.ctrl.transfers == n + 3                                 # one single TLP, one read stream
    r.write(keep)
    assert r.read() == keep
    info = dev.info()
    assert info["bridge"]["bars"]["BAR5"].startswith("0x10000000+")


def test_kernel_runs_on_simusb(dev):
    prg = dev.load(amdq.compile(VADD, arch="gfx1100"))
    n = 1000
    a = dev.upload(np.arange(n, dtype=np.float32))
    b = dev.upload(np.full(n, 0.5, np.float32))
    c = dev.alloc(4 * n)
    rec = prg["vadd"](a, b, c, 2.0, n, grid=(4, 1, 1), block=(256, 1, 1), wait=True).wait()
    assert rec.gpu_end >= rec.gpu_start                                  # timestamps read back from VRAM
    assert np.array_equal(c.numpy(np.float32), np.arange(n, dtype=np.float32) + 1.0)
    rec = prg["vadd"](c, b, a, -2.0, n, grid=(4, 1, 1), block=(256, 1, 1), wait=True)   # again: ring, kernargs pushed
    assert np.array_equal(a.numpy(np.float32), np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("size,off", [(1, 0), (3, 1), (4097, 7), (0x3FFFC, 0), (0x3FFFD, 2), (0x80001, 3),
                                      ((3 << 20) + 5, 1)])
def test_copies_through_the_bridge_sram_are_bit_exact(dev, size, off):
    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    buf = dev.alloc(size + off + 9)
    buf.write(bytes(size + off + 9))
    st = dev.iface.copier.stats
    before = (st.chunks_in, st.chunks_out)
    buf.write(data, off)
    assert buf.read(size, off) == data
    assert buf.read(off + 1) == bytes(off) + data[:1]                    # what lies before is untouched
    assert buf.read(9, off + size) == bytes(9)                           # and after
    assert st.chunks_in - before[0] == -(-size // H.COPYIN_CHUNK)      # through the SRAM windows
    assert st.chunks_out > before[1]


def test_bar0_copy_path_is_bit_exact(dev):
    data = bytes(range(256)) * 40 + b"xyz"
    buf = dev.alloc(len(data) + 8)
    dev.iface.copy_in(buf.alloc, 5, data)                                # no queue: through BAR0 streams
    assert dev.iface.copy_out(buf.alloc, 5, len(data)) == data
    assert buf.read(len(data), 5) == data                                # the SRAM path reads the same bytes
    with pytest.raises(DeviceError, match="not inside"):
        dev.iface.copy_in(buf.alloc, buf.alloc.size, b"x")


def test_unplug_is_device_lost_naming_the_request_then_at_once():
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        buf = d.upload(np.arange(64, dtype=np.uint32))
        d.sim.inject("usb_unplug")
        with pytest.raises(DeviceLost, match="gone .* during (SRAM|memory|control|XDATA|TLP)") as e:
            buf.read()
        assert e.value.in_flight
        ctrl = d.iface.fn.ctrl
        n = ctrl.transfers
        for op in (lambda: buf.read(), lambda: d.alloc(4096), lambda: d.synchronize(timeout_ms=100)):
            with pytest.raises(DeviceLost):
                op()
        assert ctrl.transfers == n                                       # refused before touching the bus
    finally:
        d.close()                                                        # a lost bridge is only released


def test_copy_in_program_polls_each_sentinel_and_fences_the_drain(dev):
    q, cop = dev.copyq, dev.iface._copier()
    data = bytes(range(251)) * 4000                                      # 1,004,000 bytes: 4 chunks, the last short
    buf = dev.alloc(len(data))
    dev.synchronize()
    w0, seq0 = q.wptr, cop.seq
    cop.copy_in(q, buf.addr, data)
    ring = q.ring
    pk = [p for _, p in q.t.walk(ring, (w0 >> 2) % len(ring), (q.wptr >> 2) % len(ring))]
    polls = [p for p in pk if p.name == "POLL_REGMEM" and p.fields.get("func") == 3]
    copies = [p for p in pk if p.name == "COPY_LINEAR"]
    writes = [p for p in pk if p.name == "WRITE_UNTILED" and p.fields["dst_addr"] == cop.fence_va]
    assert len(polls) == len(copies) == len(writes) == 4
    for c, (p, cp, wr) in enumerate(zip(polls, copies, writes)):
        seq = seq0 + c
        n = min(H.COPYIN_CHUNK, len(data) - c * H.COPYIN_CHUNK)
        wire = -(-(n + 4) // 512) * 512
        win = cop.sram_va + (H.COPYIN_WINDOW_BUS[seq & 1] - H.SRAM_BUS)
        assert p.fields["addr"] == win + wire - 4 and p.fields["value"] == 0x51000000 | seq
        assert cp.fields["src_addr"] == win and cp.fields["dst_addr"] == buf.addr + c * H.COPYIN_CHUNK
        assert cp.fields["count"] == n - 1
        assert wr.fields["data"][:2] == [seq + 1, 0]
    assert cop.fence() == cop.seq == seq0 + 4                            # the drain fence reached the last chunk
    assert buf.read() == data
    st = dev.info()["bridge"]["copies"]
    assert st["chunks_in"] >= 4 and st["drain_wait_s"] >= 0 and st["fence_reads"] >= 4


def test_a_libusb_error_is_an_amdq_error_and_the_next_call_works(dev):
    buf = dev.upload(np.arange(256, dtype=np.uint32))
    dev.sim.inject("usb_error", endpoint=H.EP_BULK_IN, error="io")
    with pytest.raises(DeviceError, match=r"Input/Output|LIBUSB_ERROR_IO|libusb -1") as e:
        buf.read()
    assert not isinstance(e.value, DeviceLost)
    assert np.array_equal(buf.numpy(np.uint32), np.arange(256, dtype=np.uint32))


def test_usb_spec_without_a_bridge_says_so(monkeypatch):
    class NoBridges:
        def openByVendorIDAndProductID(self, vid, pid):
            return None
    with pytest.raises(DeviceError, match="no ASM24xx USB bridge .* found .*add1:0001"):
        U.open_usb(NoBridges())
    if not U.present():                                                  # no bridge here: a clear amdq error
        with pytest.raises(DeviceError, match="libusb|no ASM24xx USB bridge"):
            amdq.open_device("USB+AMD")
    from amdq.runtime.device import parse_spec
    assert parse_spec("SIMUSB+AMD:gfx1201") == ("SIMUSB", "gfx1201") and parse_spec("USB+AMD") == ("USB", None)


def _real_libusb() -> bool:
    try:
        usb1.USBContext().open().close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _real_libusb(), reason="the libusb-1.0 C library is not installed (.ci/run installs "
                                               "Debian's libusb-1.0-0)")
def test_the_real_libusb_path_enumerates_and_finds_no_bridge_here():
    """The real path (usb1 over the libusb-1.0 C library, no simulator): the context opens, the bus is searched for
    every driver id, and a machine without a bridge gets the clear error, not a crash."""
    import usb1 as real
    with real.USBContext() as ctx:
        assert all(ctx.getByVendorIDAndProductID(v, p) is None for v, p in U.USB_IDS)
    assert not U.present()
    with pytest.raises(DeviceError, match="no ASM24xx USB bridge .* found"):
        U.open_real()
    with pytest.raises(DeviceError, match="no ASM24xx USB bridge .* found"):
        amdq.open_device("USB+AMD")


def test_shadows_push_only_what_the_host_changed():
    class Window:
        def __init__(self):
            self.mem, self.writes = bytearray(8192), []

        def read(self, off, n):
            return bytes(self.mem[off:off + n])

        def write(self, off, data):
            self.writes.append((off, len(data)))
            self.mem[off:off + len(data)] = data
    w = Window()
    sh = U.Shadows(w)
    m = sh.add(0x1000, 4096, 4096)
    sh.set_pull(0x1000, True)
    m.write64(0, 7)                                                      # host: a write pointer (reported)
    m.watch(8, 8)                                                        # GPU: the read pointer beside it
    struct.pack_into("<Q", w.mem, 4096 + 8, 99)
    sh.flush()
    assert w.writes == [(4096, 4)]                                       # exactly the changed dword
    assert struct.unpack_from("<Q", w.mem, 4096 + 8)[0] == 99            # the GPU's word untouched
    assert sh.pull() and not sh.pull()                                   # it changed once
    assert m.read64(8) == 99 and m.read64(0) == 7
    w.writes.clear()
    sh.flush()
    assert w.writes == []                                                # nothing changed since
    m.mv[100:108] = b"unseen!!"                                          # a write the runtime did not report ...
    sh.flush()
    assert w.writes == []                                                # ... is not sent: the view is tracked
    m2 = sh.add(0x3000, 0, 4096)                                         # host-only memory, never hinted: compared
    m2.mv[0:4] = b"abcd"
    m2.mv[40:44] = b"efgh"
    sh.flush()
    assert w.writes == [(0, 44)]                                         # changed runs close together: one stream
    w.writes.clear()
    m2.mv[8:12] = b"ijkl"
    m2.wrote(8, 4)                                                       # the first hint: tracked from now on
    m2.mv[2000:2004] = b"uvwx"                                           # (not reported: not sent)
    m2.mv[1000:1008] = b"mnopqrst"
    m2.wrote(1000, 8)
    sh.flush()
    assert w.writes == [(8, 4), (1000, 8)]                               # the reported ranges, nothing else


@pytest.mark.parametrize("after", [1, 6, 9])                           # in the doorbell's pushes, in the stream
def test_a_copy_in_failing_part_way_releases_the_copy_engine(dev, after):
    data = bytes(range(256)) * 3000                                      # 768,000 bytes: 3 chunks
    buf = dev.alloc(len(data))
    dev.synchronize()
    cop = dev.iface._copier()
    seq0 = cop.seq
    dev.sim.inject("usb_error", endpoint=H.EP_BULK_OUT, after_transfers=after, error="io")
    with pytest.raises(DeviceError, match="libusb -1|LIBUSB_TRANSFER_ERROR"):
        buf.write(data)
    assert cop.seq == seq0 + 3
    try:
        cop._wait_fence(cop.seq, "the released chunks")                 # the queued program ran to its end
        dev.synchronize(timeout_ms=5000)                                 # nothing blocks the copy queue
        buf.write(data)
    except DeviceError as e:                                             # (an open flake: say what the GPU sees)
        sram, words = dev.sim.mem["sram"], []
        for s in range(seq0, cop.seq):
            n = min(H.COPYIN_CHUNK, len(data) - (s - seq0) % 3 * H.COPYIN_CHUNK)
            at = H.COPYIN_WINDOW_BUS[s & 1] - H.SRAM_BUS + (n + 4 + 511) // 512 * 512 - 4
            words.append(f"seq {s}: {sram.u32(at):#x} at {at:#x}")
        engines = []
        for eng in list(dev.sim.fn.gpu.engines.values()):
            if type(eng).__name__.startswith("SDMA") or "sdma" in getattr(eng, "name", "").lower():
                seen = None
                try:
                    seen = hex(int(eng._read(cop.sram_va + 0x3FFFC, 4).view(np.uint32)[0]))
                except Exception as x:                                   # noqa: BLE001
                    seen = repr(x)
                engines.append(dict(name=eng.name, rptr=eng.rptr, wptr=eng.wptr, stopped=eng.stopped,
                                    busy=eng.busy, exception=repr(getattr(eng, "exception", None)),
                                    window0_sentinel=seen))
        raise AssertionError(f"{e}; seq0 {seq0}, seen {cop.seen}, arms {dev.sim.arms}, sentinels {words}, "
                             f"copy queue {dev.copyq.describe()}, engines {engines}, "
                             f"gpu busy {dev.sim.fn.gpu.busy} mode {dev.sim.fn.gpu.mode}") from e
    assert buf.read() == data


@pytest.mark.parametrize("arch,aql", [("gfx1100", "1"), ("gfx1201", "0")])
def test_kernel_runs_on_simusb_other_queue_and_target(monkeypatch, arch, aql):
    monkeypatch.setenv("AMD_AQL", aql)
    d = amdq.open_device(f"SIMUSB+AMD:{arch}")
    try:
        assert d.queue.kind == ("aql" if aql == "1" else "compute")
        prg = d.load(amdq.compile(VADD, arch=arch))
        n = 777
        a = d.upload(np.arange(n, dtype=np.float32))
        b = d.upload(np.full(n, 3.0, np.float32))
        c = d.alloc(4 * n)
        for _ in range(3):
            prg["vadd"](a, b, c, -1.0, n, grid=(4, 1, 1), block=(256, 1, 1))
        d.synchronize(timeout_ms=20000)
        assert np.array_equal(c.numpy(np.float32), np.arange(n, dtype=np.float32) - 3.0)
    finally:
        d.close()


def test_a_cpu_view_is_copied_only_once_the_cpu_touches_it(dev):
    it = dev.iface
    a = it.alloc(8 << 20, "vram")                                        # CPU-visible, as scratch is
    try:
        assert a.cpu is not None and a.va not in it.fn.shadows.entries   # nothing read over the bridge yet
        it.copy_in(a, 100, b"seen")                                      # through BAR0: no shadow to keep
        assert a.va not in it.fn.shadows.entries
        assert bytes(a.cpu.mv[100:104]) == b"seen"                       # first touch: made from VRAM
        a.cpu.write32(0, 0xABCD)
        it.fn.shadows.flush()
        assert it.fn.vram.read(a.meta["vram_offset"], 4) == struct.pack("<I", 0xABCD)
    finally:
        it.free(a)
    assert a.va not in it.fn.shadows.entries


def test_a_hung_copy_engine_fails_the_copy_out_and_recovers(monkeypatch):
    from amdq.errors import GPUTimeout
    from amdq.iface import usb_bridge
    monkeypatch.setattr(usb_bridge, "TIMEOUT_SRAM_IN", 500)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        buf = d.upload(np.arange(64, dtype=np.uint32))
        d.synchronize()
        d.sim.inject("hang_sdma")
        with pytest.raises(DeviceError, match="release dword .* stuck at ring byte .*COPY_LINEAR"):
            buf.read()
        with pytest.raises(GPUTimeout, match="sdma queue"):
            d.synchronize(timeout_ms=500)                                # the copy queue is reset
        d.sim.clear("hang_sdma")
        buf.write(np.arange(64, dtype=np.uint32)[::-1].copy())
        assert np.array_equal(buf.numpy(np.uint32), np.arange(64, dtype=np.uint32)[::-1])
    finally:
        d.close()


def test_without_a_copy_queue_cpu_copies_see_what_kernels_wrote(monkeypatch):
    monkeypatch.setenv("AMD_DISABLE_SDMA", "1")
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        assert d.copyq is None
        prg = d.load(amdq.compile(VADD, arch="gfx1100"))
        n = 300
        a = d.upload(np.arange(n, dtype=np.float32))
        b = d.upload(np.ones(n, np.float32))
        c, e = d.alloc(4 * n), d.alloc(4 * n)
        for k in (1.0, 5.0):                                             # the second time the CPU view exists
            prg["vadd"](a, b, c, k, n, grid=(2, 1, 1), block=(256, 1, 1), wait=True)
            d.copy(e, c, 4 * n, wait=True)                               # through the CPU views
            assert np.array_equal(e.numpy(np.float32), np.arange(n, dtype=np.float32) + k)
    finally:
        d.close()


@pytest.mark.parametrize("when", ["wait", "upload"])
def test_unplug_during_a_wait_or_an_upload(when):
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        prg = d.load(amdq.compile(VADD, arch="gfx1100"))
        n = 256
        a, b, c = (d.upload(np.ones(n, np.float32)) for _ in range(3))
        if when == "wait":
            prg["vadd"](a, b, c, 1.0, n, grid=(1, 1, 1), block=(256, 1, 1))
            d.sim.inject("usb_unplug")
            with pytest.raises(DeviceLost, match="gone"):
                d.synchronize(timeout_ms=5000)
        else:
            d.sim.inject("usb_unplug", after_bytes=600_000)             # in the middle of a 2 MiB upload
            with pytest.raises(DeviceLost, match="gone .* during (SRAM write|XDATA read|memory|F2 arm|copy-in chunk|drain fence)"):
                d.upload(np.zeros(1 << 19, np.float32))
        with pytest.raises(DeviceLost):
            prg["vadd"](a, b, c, 1.0, n, grid=(1, 1, 1), block=(256, 1, 1), wait=True)
    finally:
        d.close()


def test_copy_in_without_asynchronous_transfers(dev, monkeypatch):
    c = dev.iface.fn.ctrl
    assert c.can_async                                                   # the simulated context gives them
    c.reap(block=True)                                                   # what was sent without a wait, collected
    monkeypatch.setattr(c, "ctx", None)                                  # as on a handle without getTransfer
    data = np.random.default_rng(5).integers(0, 256, (1 << 20) + 3, dtype=np.uint8).tobytes()
    buf = dev.alloc(len(data) + 1)
    buf.write(data, 1)
    assert buf.read(len(data), 1) == data


def test_xdata_reads_on_a_high_speed_link_take_64_bytes_each():
    ctx = SimUSBContext(arch="gfx1100", speed="high")
    try:
        fn = U.open_function(ctx)
        assert fn.ctrl.xdata_read_max == 64
        fn.ctrl.xdata_write(0xA800, bytes(range(1, 9)))
        assert fn.ctrl.xdata_read(0xA800, 200)[:8] == bytes(range(1, 9))   # 4 requests, none over 64 bytes
        fn.close()
    finally:
        ctx.close()


def test_a_reused_block_takes_its_new_users_writes_without_their_hints(monkeypatch):
    """The runtime's allocator hands a freed block out again (a bound launch's IB, then a graph's arena): the
    last user's coherence hints made its shadow tracked; the new user's writes still reach VRAM."""
    monkeypatch.setenv("AMD_AQL", "0")
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        k = d.load(amdq.compile(VADD, arch="gfx1100"))["vadd"]
        n = 1024
        x, y, z = d.upload(np.arange(n, dtype=np.float32)), d.upload(np.ones(n, np.float32)), d.alloc(4 * n)
        b = k.bind(z, y, x, 1.0, n, grid=n // 256, block=256)
        b.submit().wait()
        ib = b.ib_alloc
        b.free()
        a = d.allocator.alloc(ib.size, "gtt", uncached=True)             # the same block, a new user
        assert a is ib
        a.cpu.mv[:8] = b"\xAB" * 8                                       # no hint
        d.iface.fn.shadows.flush()
        assert d.iface.fn.vram.read(a.meta["vram_offset"], 8) == b"\xAB" * 8
        d.allocator.free(a)
        with d.capture() as g:
            for _ in range(4):
                k(x, y, z, 3.0, n, grid=n // 256, block=256)
        g.replay()
        d.synchronize(timeout_ms=20000)
        assert np.array_equal(z.numpy(np.float32), x.numpy(np.float32) + 3.0)
    finally:
        d.close()


def test_kernel_arguments_in_the_ring_survive_its_wrapping(monkeypatch):
    """Over USB a PM4 launch carries its kernel arguments in the ring (a NOP's body): on a 16 KiB ring, 150
    launches wrap it a few times (filler NOPs where the arguments would cross its end), each with other
    arguments, every result right."""
    monkeypatch.setenv("AMD_AQL", "0")
    monkeypatch.setenv("AMDQ_RING_BYTES", str(16 << 10))
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        q = d.queue
        assert q.inline_kernargs and q.ring_dw == 4096
        k = d.load(amdq.compile(VADD, arch="gfx1100"))["vadd"]
        n = 256
        x, y = d.upload(np.arange(n, dtype=np.float32)), d.upload(np.ones(n, np.float32))
        outs = [d.alloc(4 * n) for _ in range(5)]
        seen = set()
        for i in range(150):
            k(x, y, outs[i % 5], float(i), n, grid=1, block=256)
            seen.add(q.wptr // q.ring_dw)
            if i % 5 == 4:
                d.synchronize(timeout_ms=20000)
                for j, o in enumerate(outs):
                    assert np.array_equal(o.numpy(np.float32), np.arange(n, dtype=np.float32) + float(i - 4 + j))
        assert len(seen) >= 3                                            # the ring wrapped at least twice
        assert 0 < len(q._inline) < 60                                   # arguments written over were let go
        assert q._limit <= q._inline[0][0] + q.ring_dw                   # the oldest still bounds the free space
        assert ka_in_ring(d, q)
    finally:
        d.close()


def ka_in_ring(d, q) -> bool:
    """The last launch's kernel-argument pointer (COMPUTE_USER_DATA_0/1 in its SET_SH_REG) points into the ring."""
    from amdq.hw import pm4
    t = pm4.table(q.gen)
    ring = q.ring
    i = (q.wptr - 64) % q.ring_dw
    words = [int(ring[(i + j) % q.ring_dw]) for j in range(64)]
    for s in range(len(words)):
        try:
            p = t.decode(words, s)
        except pm4.BadPacket:
            continue
        if p.name == "SET_SH_REG" and len(p.fields.get("VALUES", [])) >= 2:
            ka = p.fields["VALUES"][0] | p.fields["VALUES"][1] << 32
            if q.q.ring.va <= ka < q.q.ring.va + 4 * q.ring_dw:
                return True
    return False
