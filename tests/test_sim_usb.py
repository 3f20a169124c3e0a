"""The simulated ASM24xx USB bridge (amdq/sim/usb/) driven with raw requests as the facts describe them
(shared/facts/usb_asm24.json through amdq.hw.usb_asm24): XDATA, PCIe set-up behind the bridge, TLPs to the GPU's
BARs, the SRAM and the GPU's DMA of it, counters, the timing model and the USB fault injections."""
from __future__ import annotations

import struct
import time

import pytest
import usb1

from amdq.errors import InvalidArgument
from amdq.hw import discovery as D
from amdq.hw import usb_asm24 as U
from amdq.sim.mmu import MMU, READABLE, SYSTEM, VALID, WRITEABLE
from amdq.sim.usb import LinkTiming, SimASM24Bridge, SimUSBContext

OUT, IN = U.REQTYPE_VENDOR_OUT, U.REQTYPE_VENDOR_IN


class Host:
    """The host's side of the raw protocol, written from the facts (what a driver does, in a few lines)."""

    def __init__(self, h):
        self.h = h

    def e4(self, addr: int, n: int, timeout: int = 1000) -> bytes:
        return self.h.controlRead(IN, U.REQ_XDATA_READ, addr, 0, n, timeout)

    def e5(self, addr: int, value: int) -> None:
        self.h.controlWrite(OUT, U.REQ_XDATA_WRITE, addr, value, b"", 1000)

    def power(self, on: bool = True) -> None:
        self.h.controlWrite(OUT, U.REQ_PCIE_POWER, int(on), 0, b"", U.TIMEOUTS_MS["f3"])

    def tlp(self, fmt: int, addr: int, size: int = 4, value: int = 0) -> bytes | None:
        """One mode-0 TLP; the F0 IN reply of a non-posted one."""
        be = U.byte_enables(addr, size)
        data = struct.pack("<III", addr & 0xFFFFFFFC, addr >> 32, (value << 8 * (addr & 3)) & 0xFFFFFFFF)
        self.h.controlWrite(OUT, U.REQ_TLP, U.f0_value(fmt, be), U.TLP_MODE_SINGLE, data, U.TIMEOUTS_MS["f0"])
        if U.is_posted(fmt):
            return None
        return self.h.controlRead(IN, U.REQ_TLP, 0, 0, U.F0_IN_LENGTH, U.TIMEOUTS_MS["f0"])

    def cfg(self, bus: int, off: int, size: int = 4, value: int | None = None) -> tuple[int, int, int]:
        """(completion status, value, engine status) of a config read or write to bus:0.0."""
        addr = U.config_address(bus, 0, 0, off)
        r = self.tlp(U.config_fmt_type(value is not None, bus), addr, size, value or 0)
        v = (struct.unpack_from("<I", r)[0] >> 8 * (off & 3)) & ((1 << 8 * size) - 1)
        return U.cpl_status(r), v, r[U.F0_IN_ENGINE]

    def program_bridges(self, upto: int = len(U.BRIDGE_BUSES)) -> None:
        for bus in U.BRIDGE_BUSES[:upto]:
            assert self.cfg(bus, U.CFG_BUS_NUMBERS, 4, U.bus_numbers(bus))[0] == U.CPL_SC
            for off, size, value in U.BRIDGE_PROGRAMMING[1:]:
                assert self.cfg(bus, off, size, value)[0] == U.CPL_SC

    def assign_bars(self) -> dict[int, tuple[int, int]]:
        """The facts' BAR assignment on the GPU (bus 4), then COMMAND = 7."""
        nxt = {False: U.BAR_NONPREF_BASE, True: U.BAR_PREF_BASE}
        bars, off = {}, U.CFG_BAR0
        while off < U.CFG_BAR_END:
            lo = self.cfg(U.GPU_BUS, off)[1]
            if lo & 1:
                off += 4
                continue
            pref, wide = bool(lo & 8), bool(lo & 4)
            self.cfg(U.GPU_BUS, off, 4, 0xFFFFFFFF)
            mask, hi = self.cfg(U.GPU_BUS, off)[1] & 0xFFFFFFF0, 0
            if wide:
                self.cfg(U.GPU_BUS, off + 4, 4, 0xFFFFFFFF)
                hi = self.cfg(U.GPU_BUS, off + 4)[1]
            size = (~(hi << 32 | mask) + 1) & ((1 << (64 if wide else 32)) - 1)
            addr = nxt[pref]
            self.cfg(U.GPU_BUS, off, 4, addr & 0xFFFFFFFF)
            if wide:
                self.cfg(U.GPU_BUS, off + 4, 4, addr >> 32)
            if size:
                bars[(off - U.CFG_BAR0) // 4] = (addr, size)
            nxt[pref] += -(-size // U.BAR_ALIGN) * U.BAR_ALIGN
            off += 8 if wide else 4
        self.cfg(U.GPU_BUS, U.CFG_COMMAND, 1, U.COMMAND_IO_MEM_MASTER)
        return bars

    def resize_bar(self) -> int:
        """The facts' Resizable BAR step: the largest size of the first capability with id 0x15; its index."""
        off = U.EXT_CAP_START
        while off:
            head = self.cfg(U.GPU_BUS, off)[1]
            if head & 0xFFFF == U.EXT_CAP_REBAR:
                cap = self.cfg(U.GPU_BUS, off + U.REBAR_CAP)[1]
                ctrl = self.cfg(U.GPU_BUS, off + U.REBAR_CTRL)[1]
                index = (cap >> 4).bit_length() - 1
                self.cfg(U.GPU_BUS, off + U.REBAR_CTRL, 4, ctrl & ~0x1F00 | index << 8)
                return index
            off = (head >> 20) & 0xFFC
        return -1

    def bring_up(self, resize: bool = True) -> dict[int, tuple[int, int]]:
        self.power()
        self.program_bridges()
        if resize:
            self.resize_bar()
        return self.assign_bars()

    def stream_write(self, addr: int, data: bytes) -> None:
        self.h.controlWrite(OUT, U.REQ_TLP, U.f0_value(U.MWR64, 0xF), U.TLP_MODE_STREAM_WRITE,
                            struct.pack("<III", addr & 0xFFFFFFFF, addr >> 32, len(data) // 4), U.TIMEOUTS_MS["f0"])
        self.h.bulkWrite(U.EP_BULK_OUT, data, U.TIMEOUTS_MS["bulk_out"])

    def stream_read(self, addr: int, n: int) -> bytes:
        self.h.controlWrite(OUT, U.REQ_TLP, U.f0_value(U.MRD64, 0xF), U.TLP_MODE_STREAM_READ,
                            struct.pack("<III", addr & 0xFFFFFFFF, addr >> 32, n // 4), U.TIMEOUTS_MS["f0"])
        return self.h.bulkRead(U.EP_BULK_IN, n, U.TIMEOUTS_MS["bulk_in_stream"])

    def f2_write(self, slot: int, data: bytes) -> None:
        data = data + bytes(-len(data) % U.F2_SECTOR)
        self.h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(len(data), False), U.f2_index(slot, len(data)), b"", 1000)
        self.h.bulkWrite(U.EP_BULK_OUT, data, 1000)


@pytest.fixture
def usb():
    ctx = SimUSBContext(arch="gfx1100", mode="sync")
    h = ctx.openByVendorIDAndProductID(*U.DRIVER_IDS[0])
    h.claimInterface(U.INTERFACE)
    yield ctx.bridge, Host(h)
    ctx.close()


def test_found_and_opened_as_libusb_finds_it(usb):
    bridge, host = usb
    ctx = SimUSBContext(bridges=[bridge])
    assert ctx.getByVendorIDAndProductID(*U.DRIVER_IDS[1]) is None           # it answers its own ids only
    dev = ctx.getByVendorIDAndProductID(*U.DRIVER_IDS[0])
    assert (dev.getVendorID(), dev.getProductID()) == U.DRIVER_IDS[0]
    assert dev.getDeviceSpeed() == usb1.SPEED_SUPER_PLUS
    h = dev.open()
    assert h.getDevice() is not None and h.getProduct().startswith(U.PRODUCT_PREFIXES)
    h.setConfiguration(U.CONFIGURATION)
    h.claimInterface(U.INTERFACE)
    h.setInterfaceAltSetting(U.INTERFACE, U.ALT_SETTING)
    with pytest.raises(usb1.USBErrorNotFound):
        h.claimInterface(1)
    d = h.controlRead(0x80, 6, 1 << 8, 0, 18, 1000)                         # GET_DESCRIPTOR(device)
    assert len(d) == 18 and struct.unpack_from("<HH", d, 8) == U.DRIVER_IDS[0] and d[7] == 9   # 512-byte EP0
    assert h.getASCIIStringDescriptor(7) is None
    info = bridge.info()
    assert info["chip"] == "ASM2464PD" and info["speed"] == "super_plus" and info["firmware"] == "1.00"
    assert info["name"] == "usb:1-2" and not info["pcie_up"]


def test_xdata_read_write_and_size_limits(usb):
    bridge, host = usb
    for i, v in enumerate(b"\x11\x22\x33"):
        host.e5(0x0400 + i, v)
    assert host.e4(0x0400, 3) == b"\x11\x22\x33"
    assert len(host.e4(0x0100, U.E4_MAX)) == U.E4_MAX
    with pytest.raises(usb1.USBErrorPipe):
        host.e4(0x0100, U.E4_MAX + 1)
    with pytest.raises(usb1.USBErrorPipe):                                   # E5 carries no data stage
        host.h.controlWrite(OUT, U.REQ_XDATA_WRITE, 0x400, 1, b"\x01", 1000)
    with pytest.raises(usb1.USBErrorPipe):                                   # not a request of the firmware
        host.h.controlWrite(OUT, 0xF5, 0, 0, b"", 1000)
    host.e5(U.XDATA_LTSSM_STATE, U.LTSSM_L0)                                  # read-only link state
    assert host.e4(U.XDATA_LTSSM_STATE, 1) == bytes([U.LTSSM_OFF])
    host.power()
    assert host.e4(U.XDATA_LTSSM_STATE, 1) == bytes([U.LTSSM_L0])
    # the sys_buf alias is bridge memory the GPU writes at its bus address
    host.e5(U.XDATA_COPYIN_FENCE, 0x5A)
    assert bridge.mem["sys_buf"].read(U.COPYIN_FENCE_BUS - U.SYS_BUF_BUS, 1) == b"\x5a"


def test_usb2_high_speed_e4_limit():
    ctx = SimUSBContext(arch="gfx1100", mode="sync", speed="high")
    try:
        h = ctx.openByVendorIDAndProductID(*U.DRIVER_IDS[0])
        assert h.getDevice().getDeviceSpeed() == usb1.SPEED_HIGH
        assert len(h.controlRead(IN, U.REQ_XDATA_READ, 0, 0, U.E4_MAX_HIGH_SPEED, 1000)) == 64
        t0 = ctx.bridge.model.clock_ns
        with pytest.raises(usb1.USBErrorTimeout):
            h.controlRead(IN, U.REQ_XDATA_READ, 0, 0, U.E4_MAX_HIGH_SPEED + 1, 1000)
        assert ctx.bridge.model.clock_ns - t0 >= 1000 * 10**6                 # the host waited its timeout
    finally:
        ctx.close()


def test_config_through_the_switch_ports_after_bus_numbers(usb):
    bridge, host = usb
    st, _, engine = host.cfg(U.GPU_BUS, 0)
    assert engine != 0                                                     # PCIe off: the engine gets no completion
    host.power()
    assert host.cfg(U.GPU_BUS, 0)[:2] == (U.CPL_UR, 0)                      # bus 4 not reachable yet
    st, ids, _ = host.cfg(0, 0)                                            # type 0: the bridge on the root's link
    assert st == U.CPL_SC and ids & 0xFFFF == 0x1B21
    assert host.cfg(0, 0x0E, 1)[1] & 0x7F == 1                              # a type-1 header
    host.program_bridges(upto=3)
    assert host.cfg(3, 0)[0] == U.CPL_SC
    assert host.cfg(U.GPU_BUS, 0)[0] == U.CPL_UR                            # bridge 3 not programmed
    host.program_bridges()
    st, ids, _ = host.cfg(U.GPU_BUS, 0)
    assert (st, ids) == (U.CPL_SC, 0x744C1002)
    assert host.cfg(U.GPU_BUS, 2, 2)[1] == 0x744C                           # a 2-byte read at offset 2
    assert host.cfg(5, 0)[0] == U.CPL_UR                                    # beyond the subordinate bus
    host.cfg(0, U.CFG_BUS_NUMBERS, 4, U.bus_numbers(0, subordinate=2))      # bridge 0 now stops at bus 2
    assert host.cfg(3, 0)[0] == U.CPL_UR and host.cfg(2, 0)[0] == U.CPL_SC
    host.cfg(0, U.CFG_BUS_NUMBERS, 4, U.bus_numbers(0))
    # the three bus numbers in one dword, as the facts' values say
    assert host.cfg(2, U.CFG_BUS_NUMBERS)[1] == U.bus_numbers(2) == 0x00040300
    host.power(False)                                                      # power off forgets everything
    host.power()
    assert host.cfg(U.GPU_BUS, 0)[0] == U.CPL_UR and host.cfg(0, U.CFG_BUS_NUMBERS)[1] == 0


def test_resizable_bar(usb):
    bridge, host = usb
    fn = bridge.fn
    bars = host.bring_up(resize=False)
    assert bars[0] == (U.BAR_PREF_BASE, 256 << 20)                          # the boot size
    data = host.stream_read(bars[0][0] + (256 << 20) - 8, 8)
    assert data == bytes(fn.vram[(256 << 20) - 8:256 << 20])
    assert bars[2][0] == bars[0][0] + (256 << 20)                           # the doorbells follow it
    host.cfg(U.GPU_BUS, U.CFG_COMMAND, 1, 0)
    index = host.resize_bar()
    assert 1 << (20 + index) == 1 << (fn.vram_size - 1).bit_length()
    bars = host.assign_bars()
    assert bars[0][1] == 1 << (20 + index)
    fn.vram[fn.vram_size - 4:fn.vram_size] = b"\x01\x02\x03\x04"
    assert host.stream_read(bars[0][0] + fn.vram_size - 4, 4) == b"\x01\x02\x03\x04"


def test_bar_sizing_and_register_tlps(usb):
    bridge, host = usb
    bars = host.bring_up()
    fn = bridge.fn
    assert bars[0] == (U.BAR_PREF_BASE, 1 << (fn.vram_size - 1).bit_length())
    assert bars[5] == (U.BAR_NONPREF_BASE, fn.bar_sizes[5])
    assert fn.bar_bus_address(0) == U.BAR_PREF_BASE and fn.bar_bus_address(5) == U.BAR_NONPREF_BASE
    bar5 = bars[5][0]
    r = host.tlp(U.MRD64, bar5 + 4 * D.REG_RCC_CONFIG_MEMSIZE)
    assert U.cpl_status(r) == U.CPL_SC and r[U.F0_IN_ENGINE] == 0
    assert struct.unpack_from("<I", r)[0] == fn.vram_size >> 20             # the register the GPU has
    reg = fn.raw.GC.regSCRATCH_REG5.addr
    host.tlp(U.MWR64, bar5 + 4 * reg, 4, 0xC0FFEE01)                         # posted: no completion read
    assert fn.mmio_read32(reg) == 0xC0FFEE01
    host.tlp(U.MWR64, bar5 + 4 * reg + 1, 1, 0x77)                           # one byte lane
    assert fn.mmio_read32(reg) == 0xC0FF7701
    assert struct.unpack("<I", host.stream_read(bar5 + 4 * reg, 4))[0] == 0xC0FF7701
    # VRAM through BAR0: a write stream and a read stream
    data = bytes(range(256)) * 64
    host.stream_write(bars[0][0] + 0x10000, data)
    assert bytes(fn.vram[0x10000:0x10000 + len(data)]) == data
    assert host.stream_read(bars[0][0] + 0x10000 + 4096, 4096) == data[4096:8192]


def test_unsupported_request_for_an_unmapped_address(usb):
    bridge, host = usb
    bars = host.bring_up()
    for addr in (0x5000_0000, bars[5][0] + bars[5][1], 0x1000):              # no BAR, past BAR5, below the windows
        r = host.tlp(U.MRD64, addr)
        assert U.cpl_status(r) == U.CPL_UR and r[U.F0_IN_ENGINE] == 0
    assert host.stream_read(0x5000_0000, 8) == b"\xff" * 8                   # all ones for the read stream
    host.cfg(U.GPU_BUS, U.CFG_COMMAND, 1, 0)                                # memory decoding off: BARs go away
    assert U.cpl_status(host.tlp(U.MRD64, bars[5][0])) == U.CPL_UR


def test_sram_by_f2_and_the_gpus_dma(usb):
    bridge, host = usb
    space = bridge.fn.gpu.space                                            # where the GPU's SYSTEM addresses go
    payload = bytes((i * 7) & 0xFF for i in range(3000))
    host.f2_write(16, payload)                                              # slot 16: SRAM offset 0x40000
    assert bridge.mem["sram"].read(16 * U.F2_SLOT, len(payload)) == payload
    assert space.system(U.SRAM_BUS + 16 * U.F2_SLOT, 64) is None            # nobody masters the bus yet
    host.bring_up()
    arena, off = space.system(U.SRAM_BUS + 16 * U.F2_SLOT, len(payload))
    assert arena.read(off, len(payload)) == payload                         # the GPU reads what F2 wrote
    # through the GPU's MMU: a SYSTEM PTE naming the SRAM's bus address, as the driver maps it
    gpu = bridge.fn.gpu
    mmu = MMU(gpu.vram, gpu.sysmem, gpu.target.gfx_version, vmid=15, space=space)
    mmu.configure(root=0x100000, depth=0, block_size=0, start=0, end=None)
    pte = (U.SRAM_BUS + 16 * U.F2_SLOT) | VALID | SYSTEM | READABLE | WRITEABLE
    gpu.vram.write(0x100000 + 8 * 1, struct.pack("<Q", pte))
    arena, pa, size, _ = mmu.walk(0x1000)
    assert arena is bridge.mem["sram"] and arena.read(pa, 64) == payload[:64]
    host.cfg(3, U.CFG_COMMAND, 1, 0x03)                                    # a switch port stops mastering
    mmu.invalidate()
    assert mmu.walk(0x1000) is None                                         # the GPU's read would fault
    host.cfg(3, U.CFG_COMMAND, 1, U.COMMAND_IO_MEM_MASTER)
    assert space.system(U.SRAM_BUS + U.SRAM_SIZE - 4, 8) is None             # past the SRAM
    assert space.system(0x1000, 4) is None                                  # no host RAM behind the bridge
    host.f2_write(0, b"\xab" * 16)
    assert host.e4(U.SRAM_XDATA, 16) == b"\xab" * 16                         # the XDATA alias
    # the GPU writes the copy-in fence into sys_buf; the host reads it with E4
    arena, off = space.system(U.COPYIN_FENCE_BUS, 8)
    arena.write(off, struct.pack("<Q", 41))
    assert struct.unpack("<Q", host.e4(U.XDATA_COPYIN_FENCE, 8))[0] == 41


def test_f2_read_waits_for_the_gpus_release_write(usb):
    bridge, host = usb
    host.bring_up()
    host.f2_write(0, b"\x5c" * 1024)
    h = host.h
    h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(1024, True), U.f2_index(0, 1024), b"", 1000)
    with pytest.raises(usb1.USBErrorTimeout):
        h.bulkRead(U.EP_BULK_IN, 1024, 50)                                  # no release: the stream never starts
    bars = {i: (bridge.fn.bar_bus_address(i),) for i in (0, 5)}
    h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(1024, True), U.f2_index(0, 1024), b"", 1000)
    # the copy-out sends its ring and doorbell writes (F0 streams with their own bulk OUTs) and reads back a
    # signal (an F0 read stream) between the F2 arm and the bulk IN: the F2 read stays armed through them
    host.stream_write(bars[0][0] + 0x2000, b"\x11" * 64)
    assert host.stream_read(bars[0][0] + 0x2000, 8) == b"\x11" * 8
    assert host.cfg(U.GPU_BUS, 0)[0] == U.CPL_SC
    arena, off = bridge.fn.gpu.space.system(U.BUS_COPYOUT_RELEASE, 4)
    arena.write(off, struct.pack("<I", U.COPYOUT_RELEASE_VALUE))            # the GPU's SDMA WRITE of 0
    assert h.bulkRead(U.EP_BULK_IN, 1024, 1000) == b"\x5c" * 1024


def test_bulk_phases_are_held_to_their_arms(usb):
    bridge, host = usb
    h = host.h
    host.power()
    with pytest.raises(usb1.USBErrorTimeout):
        h.bulkWrite(U.EP_BULK_OUT, b"\0" * 512, 10)                           # nothing armed: NAKed
    h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(1024, False), U.f2_index(0, 1024), b"", 1000)
    with pytest.raises(usb1.USBErrorPipe):
        h.bulkWrite(U.EP_BULK_OUT, b"\0" * 512, 1000)                         # not the armed length
    with pytest.raises(usb1.USBErrorPipe):                                   # past the SRAM
        h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(0x8000, False), U.f2_index(31, 0x8000), b"", 1000)
    with pytest.raises(usb1.USBErrorPipe):                                   # slot count short of the length
        h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(0x8000, False), 0x0100, b"", 1000)
    with pytest.raises(usb1.USBErrorPipe):                                   # a stream needs byte enables 0x0F
        h.controlWrite(OUT, U.REQ_TLP, U.f0_value(U.MWR64, 0x3), U.TLP_MODE_STREAM_WRITE,
                       struct.pack("<III", 0x10000000, 0, 1), 1000)
    with pytest.raises(usb1.USBErrorPipe):                                   # and a dword-aligned address
        h.controlWrite(OUT, U.REQ_TLP, U.f0_value(U.MRD64, 0xF), U.TLP_MODE_STREAM_READ,
                       struct.pack("<III", 0x10000002, 0, 1), 1000)
    with pytest.raises(usb1.USBErrorPipe):
        h.controlWrite(OUT, U.REQ_TLP, 0x0F20, 3, struct.pack("<III", 0, 0, 1), 1000)   # mode 3
    r = h.controlRead(IN, U.REQ_TLP, 0, 0, 8, 1000)
    assert r[U.F0_IN_ENGINE] != 0                                            # no completion pending


def test_counters_exact_per_request(usb):
    bridge, host = usb
    bridge.model.reset_counters()
    host.e4(0x0100, 8)
    host.e5(0x0100, 1)
    host.power()
    host.cfg(0, 0)                                                          # F0 OUT 12 bytes + F0 IN 8 bytes
    host.f2_write(0, b"\1" * 512)                                           # F2 arm + bulk OUT 512
    s = bridge.stats()
    assert (s["control_in"], s["control_out"], s["bulk_in"], s["bulk_out"]) == (2, 4, 0, 1)
    assert s["bytes_in"] == 8 + 8 and s["bytes_out"] == 12 + 512
    assert s["waits"] == 7 and s["failed"] == 0                          # each a synchronous transfer
    assert s["requests"] == {"0xe4": 1, "0xe5": 1, "0xf0": 2, "0xf2": 1, "0xf3": 1}
    assert s["tlps"] == {"CfgRd0": 1}
    with pytest.raises(usb1.USBErrorPipe):
        host.e4(0, 300)
    assert bridge.stats()["failed"] == 1 and bridge.stats()["control_in"] == 3


def test_timing_model():
    timing = LinkTiming(control_rtt_us=150, bulk_bytes_per_s=900e6, bulk_latency_us=30)
    bridge = SimASM24Bridge("gfx1100", timing=timing, mode="sync")
    ctx = SimUSBContext(bridges=[bridge])
    try:
        h = ctx.openByVendorIDAndProductID(*U.DRIVER_IDS[0])
        m = bridge.model
        t0 = m.clock_ns
        h.controlRead(IN, U.REQ_XDATA_READ, 0x100, 0, 8, 1000)
        assert m.clock_ns - t0 == m.cost_ns("control", 8) == 150_000 + int(8 * 1e9 / 40e6)
        n = 9 * 10**6 // 512 * 512
        host = Host(h)
        t0 = m.clock_ns
        h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(0x80000, False), U.f2_index(0, 0x80000), b"", 1000)
        h.bulkWrite(U.EP_BULK_OUT, bytes(0x80000), 1000)
        bulk = m.cost_ns("bulk", 0x80000)
        assert bulk == 30_000 + int(0x80000 * 1e9 / 900e6)                    # ~0.6 ms for 512 KiB
        assert m.clock_ns - t0 == m.cost_ns("control", 0) + bulk
        assert m.cost_ns("bulk", n) == pytest.approx(10e6 + 30e3, rel=0.01)   # 9 MB in ~10 ms at 900 MB/s
        # overlap: a bulk transfer submitted asynchronously while the GPU works 2 ms costs max, not the sum
        h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(0x80000, False), U.f2_index(0, 0x80000), b"", 1000)
        done = []
        t = h.getTransfer()
        t.setBulk(U.EP_BULK_OUT, bytes(0x80000), callback=done.append, timeout=1000)
        t0 = m.clock_ns
        t.submit()
        assert m.clock_ns == t0 and not done                                # the host did not wait
        m.idle_until(t0 + 2_000_000)                                        # the GPU's 2 ms
        ctx.handleEvents()
        assert done == [t] and t.getStatus() == usb1.TRANSFER_COMPLETED and t.getActualLength() == 0x80000
        assert m.clock_ns - t0 == 2_000_000                                 # the 0.6 ms hid under the GPU's work
        t0 = m.clock_ns
        host.power()                                                        # F3 returns once the link trained
        assert m.clock_ns - t0 == m.cost_ns("control", 0) + int(timing.pcie_train_us * 1e3)
        m.record()
        host.e4(0x100, 2)
        (start, end, kind, what), = m.events
        assert kind == "control" and what.startswith("E4 XDATA read 0x0100") and end - start == m.cost_ns("control", 2)
        m.record(False)
        # sleeping: wall time follows the modelled time
        m.timing.sleep = True
        w0 = time.perf_counter()
        for _ in range(20):
            host.e4(0x100, 1)
        assert time.perf_counter() - w0 >= 20 * 150e-6
    finally:
        ctx.close()


def test_inject_unplug_after_bytes(usb):
    bridge, host = usb
    host.power()
    bridge.inject("usb_unplug", after_bytes=2000)
    for _ in range(3):
        host.f2_write(0, b"\0" * 512)                                       # 3 x (512 + 0) bytes go through
    with pytest.raises(usb1.USBErrorNoDevice):
        host.f2_write(0, b"\0" * 512)                                       # this one crosses 2000 bytes
    for call in (lambda: host.e4(0, 1), lambda: host.h.bulkRead(U.EP_BULK_IN, 4, 100),
                 lambda: host.h.claimInterface(0)):
        with pytest.raises(usb1.USBErrorNoDevice) as e:
            call()
        assert e.value.value == U.LIBUSB_ERROR_NO_DEVICE
    ctx = SimUSBContext(bridges=[bridge])
    assert ctx.getByVendorIDAndProductID(*U.DRIVER_IDS[0]) is None           # gone from the bus
    bridge.replug()
    h = ctx.openByVendorIDAndProductID(*U.DRIVER_IDS[0])
    assert h.controlRead(IN, U.REQ_XDATA_READ, U.XDATA_LTSSM_STATE, 0, 1, 1000) == bytes([U.LTSSM_L0])
    with pytest.raises(usb1.USBErrorNoDevice):
        host.e4(0, 1)                                                       # the old handle stays dead


def test_inject_unplug_from_the_environment(monkeypatch):
    monkeypatch.setenv("AMDQ_SIM_INJECT", "usb_unplug:after_transfers=3")
    ctx = SimUSBContext(arch="gfx1100", mode="sync")
    try:
        h = ctx.openByVendorIDAndProductID(*U.DRIVER_IDS[0])
        for _ in range(3):
            h.controlRead(IN, U.REQ_XDATA_READ, 0, 0, 1, 1000)
        t = h.getTransfer()
        t.setControl(IN, U.REQ_XDATA_READ, 0, 0, 1, timeout=1000)
        t.submit()
        ctx.handleEvents()
        assert t.getStatus() == usb1.TRANSFER_NO_DEVICE                      # an async transfer ends NO_DEVICE
        with pytest.raises(usb1.USBErrorNoDevice):
            h.controlRead(IN, U.REQ_XDATA_READ, 0, 0, 1, 1000)
    finally:
        ctx.close()


def test_inject_stall(usb):
    bridge, host = usb
    bars = host.bring_up()
    bridge.inject("usb_stall", endpoint=U.EP_BULK_IN)
    with pytest.raises(usb1.USBErrorPipe) as e:
        host.stream_read(bars[5][0], 4)
    assert e.value.value == U.LIBUSB_ERROR_PIPE
    with pytest.raises(usb1.USBErrorPipe):
        host.h.bulkRead(U.EP_BULK_IN, 4, 100)                               # halted until cleared
    host.h.clearHalt(U.EP_BULK_IN)
    assert len(host.stream_read(bars[5][0], 4)) == 4
    bridge.inject("usb_stall", endpoint=U.EP_CONTROL)
    with pytest.raises(usb1.USBErrorPipe):
        host.e4(0, 1)
    host.e4(0, 1)                                                           # EP0 recovers at the next setup


def test_inject_error_io_and_timeout(usb):
    bridge, host = usb
    host.power()
    bridge.inject("usb_error", endpoint=U.EP_BULK_OUT)
    host.e4(0, 1)                                                           # other endpoints are not affected
    host.h.controlWrite(OUT, U.REQ_SRAM_DMA, U.f2_value(512, False), U.f2_index(0, 512), b"", 1000)
    with pytest.raises(usb1.USBErrorIO) as e:
        host.h.bulkWrite(U.EP_BULK_OUT, b"\x42" * 512, 1000)
    assert e.value.value == U.LIBUSB_ERROR_IO
    host.h.bulkWrite(U.EP_BULK_OUT, b"\x42" * 512, 1000)                    # one transfer only; the arm stayed
    assert bridge.mem["sram"].read(0, 512) == b"\x42" * 512
    bridge.inject("usb_error", error="timeout", request=U.REQ_XDATA_READ)
    host.e5(0x100, 1)
    t0 = bridge.model.clock_ns
    with pytest.raises(usb1.USBErrorTimeout) as e:
        host.e4(0x100, 1, timeout=250)
    assert e.value.value == U.LIBUSB_ERROR_TIMEOUT and bridge.model.clock_ns - t0 >= 250 * 10**6
    assert host.e4(0x100, 1) == b"\x01"


def test_timing_from_the_environment(monkeypatch):
    t = LinkTiming.from_env("speed=high,sleep=1,bulk_bytes_per_s=2e7")
    assert (t.speed, t.sleep, t.bulk_bytes_per_s, t.control_rtt_us) == ("high", True, 2e7, 250.0)
    assert LinkTiming.from_env("") == LinkTiming()
    with pytest.raises(InvalidArgument):
        LinkTiming.from_env("bulk=fast")
    monkeypatch.setenv("AMDQ_SIM_USB_TIMING", "control_rtt_us=100")
    ctx = SimUSBContext(arch="gfx1100", mode="sync")
    try:
        h = ctx.openByVendorIDAndProductID(*U.DRIVER_IDS[0])
        t0 = ctx.bridge.model.clock_ns
        h.controlRead(IN, U.REQ_XDATA_READ, 0, 0, 1, 1000)
        assert ctx.bridge.model.clock_ns - t0 == 100_000 + int(1e9 / 40e6)
        assert ctx.bridge.info()["link"]["control_rtt_us"] == 100
    finally:
        ctx.close()


def test_inject_pcie_link_fail(usb):
    bridge, host = usb
    bridge.inject("pcie_link_fail")
    host.power()
    assert host.e4(U.XDATA_LTSSM_STATE, 1) == bytes([U.LTSSM_CONFIGURATION])
    assert host.cfg(0, 0)[2] != 0                                           # no completion from anybody
    bridge.clear("pcie_link_fail")
    host.power()
    assert host.e4(U.XDATA_LTSSM_STATE, 1) == bytes([U.LTSSM_L0]) and host.cfg(0, 0)[0] == U.CPL_SC


def test_facts_module_is_what_the_generator_makes():
    import importlib.util
    import json
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("gen_usb", root / "scripts" / "gen_usb.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    facts = gen.FACTS / "usb_asm24.json"
    if not facts.exists():
        pytest.skip(f"no facts at {facts}")
    text = gen.render(json.loads(facts.read_text()))                      # checks the facts' worked examples
    assert (root / "amdq" / "hw" / "usb_asm24.py").read_text() == text
