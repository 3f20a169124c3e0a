"""The USB interface: the AM driver over an ASM24xx USB-to-PCIe bridge running the vendor-request firmware.

Layers, each only calling the one below (facts: shared/facts/usb_asm24.json, NOTES.md section 4):

1. `Controller`: the bridge's requests on a libusb handle (`usb1.USBDeviceHandle`, or the simulated bridge's
   handle with the same methods): E4/E5 XDATA reads and writes, F0 single TLPs (config and memory, with the
   completion status of the F0 IN reply) and F0 streams (memory writes on bulk OUT 0x02, reads on bulk IN 0x81),
   F2 SRAM DMA, F3 PCIe power. Posted register writes are queued and sent at the next read (or `flush`), writes
   to consecutive dwords as one stream: one transfer where the protocol allows it. Every libusb error becomes an
   amdq.errors exception; a vanished device (LIBUSB_ERROR_NO_DEVICE) is `DeviceLost` naming the request in
   flight, and every later call raises it at once.
2. `bring_up`: the PCIe side: power and link (XDATA LTSSM state), the four type-1 bridges on buses 0..3 (bus
   numbers, memory windows, command), the GPU on bus 4 (Resizable BAR at its largest, BARs sized with all-ones
   and placed, memory decode and bus mastering).
3. Backends: `Registers` (BAR5 dwords over TLPs), `VRAMWindow` (BAR0 byte reads and writes), `Doorbells`
   (BAR2 64-bit doorbells, one transfer each), gathered in `USBFunction`, which speaks the PCI function protocol
   of iface/pci.py, so the AM driver boots the GPU through it unchanged.
4. `USB`: the interface (the PCI interface over a `USBFunction`).

Sizes and choices of this module that are not facts: STREAM_PIECE (the longest stream one request moves; a
libusb timeout covers a whole transfer).
"""
from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..errors import DeviceError, DeviceLost
from ..hw import usb_asm24 as U
from .pci import PCI

# --- facts: amdq.hw.usb_asm24 (generated from shared/facts/usb_asm24.json) ----------------------------------
USB_IDS = U.DRIVER_IDS                                  # (vid, pid) searched in this order
PRODUCT_PREFIXES = U.PRODUCT_PREFIXES
CONFIGURATION, INTERFACE, ALT_SETTING = U.CONFIGURATION, U.INTERFACE, U.ALT_SETTING
EP_BULK_OUT, EP_BULK_IN = U.EP_BULK_OUT, U.EP_BULK_IN
RT_VENDOR_OUT, RT_VENDOR_IN = U.REQTYPE_VENDOR_OUT, U.REQTYPE_VENDOR_IN
REQ_XDATA_READ, REQ_XDATA_WRITE = U.REQ_XDATA_READ, U.REQ_XDATA_WRITE
REQ_TLP, REQ_SRAM_DMA, REQ_PCIE_POWER = U.REQ_TLP, U.REQ_SRAM_DMA, U.REQ_PCIE_POWER
MODE_SINGLE, MODE_STREAM_WRITE, MODE_STREAM_READ = U.TLP_MODE_SINGLE, U.TLP_MODE_STREAM_WRITE, U.TLP_MODE_STREAM_READ
XDATA_READ_MAX = 255                                    # bytes per E4 (limits.E4_bytes_per_request)
_T = U.TIMEOUTS_MS
TIMEOUT_CONTROL, TIMEOUT_TLP, TIMEOUT_POWER = _T["control"], _T["f0"], _T["f3"]
TIMEOUT_BULK_OUT, TIMEOUT_BULK_IN, TIMEOUT_STREAM_IN, TIMEOUT_SRAM_IN = (_T["bulk_out"], _T["bulk_in"],
                                                                          _T["bulk_in_stream"], _T["bulk_in_sram"])
TLP_RETRIES, TLP_RETRY_SLEEP_MS = U.TLP_RETRIES, U.TLP_RETRY_SLEEP_MS
MRD64, MWR64 = U.MRD64, U.MWR64
BE_FULL = U.STREAM_BYTE_ENABLES
COMPLETION_STATUS = U.CPL_STATUS_NAMES
LTSSM_STATE, LTSSM_L0 = U.XDATA_LTSSM_STATE, U.LTSSM_L0
SECTOR, SLOT = U.F2_SECTOR, U.F2_SLOT
SRAM_BYTES, SRAM_BUS = U.SRAM_SIZE, U.SRAM_BUS
F2_READ = U.F2_READ
CONFIG_OFFSET_MAX = U.CONFIG_OFFSET_MAX
BRIDGE_BUSES, GPU_BUS = U.BRIDGE_BUSES, U.GPU_BUS
MEM_BASE, PREF_BASE, BAR_ALIGN = U.BAR_NONPREF_BASE, U.BAR_PREF_BASE, U.BAR_ALIGN
CMD_IO, CMD_MEMORY, CMD_MASTER = 1, 2, 4                # PCI command register bits (COMMAND_IO_MEM_MASTER = 7)
EXT_CAP_START, EXT_CAP_REBAR = U.EXT_CAP_START, U.EXT_CAP_REBAR
LIBUSB_ERROR_NO_DEVICE = U.LIBUSB_ERROR_NO_DEVICE
is_posted = U.is_posted

# --- this module's choice (not a fact) ---
STREAM_PIECE = 1 << 20          # longest F0 stream per request: a multi-MiB write must fit one libusb timeout


class Handle(Protocol):
    """The part of `usb1.USBDeviceHandle` the controller uses (the simulated bridge's handle has the same)."""

    def controlRead(self, request_type: int, request: int, value: int, index: int, length: int,
                    timeout: int = 0) -> bytes: ...
    def controlWrite(self, request_type: int, request: int, value: int, index: int, data: bytes,
                     timeout: int = 0) -> int: ...
    def bulkRead(self, endpoint: int, length: int, timeout: int = 0) -> bytes: ...
    def bulkWrite(self, endpoint: int, data: bytes, timeout: int = 0) -> int: ...
    def close(self) -> None: ...


class TLPError(DeviceError):
    """A PCIe request through the bridge did not complete successfully; `status` is the completion status (None:
    the bridge's engine gave up)."""

    def __init__(self, msg: str, status: int | None = None):
        super().__init__(msg)
        self.status = status


def _usb_errors() -> tuple[type, ...]:
    try:
        import usb1
    except ImportError:                                  # no libusb1 package: only the simulated bridge's errors
        return ()
    return (usb1.USBError,)


def _libusb_code(e: BaseException) -> int | None:
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


def config_address(bus: int, dev: int, fn: int, off: int) -> int:
    """The config-request address (bus 31:24, device 23:19, function 18:16, register 11:2, byte 1:0)."""
    try:
        return U.config_address(bus, dev, fn, off)
    except ValueError as e:
        raise DeviceError(str(e)) from None


def byte_enables(addr: int, size: int) -> int:
    """Lane byte enables of a 1..4-byte single TLP inside one dword."""
    try:
        return U.byte_enables(addr, size)
    except ValueError as e:
        raise DeviceError(str(e)) from None


class Controller:
    """The bridge's vendor requests on one handle (see the module doc). Thread-safe: a request and its data phase
    go out together under `lock`. `name` is what errors call the device."""

    def __init__(self, handle: Handle, name: str = "USB bridge"):
        self.h, self.name = handle, name
        self.lock = threading.RLock()
        self.lost: DeviceLost | None = None
        self._errors = _usb_errors()
        self._posted: list[tuple[int, bytearray]] = []  # queued posted writes: (bus address, bytes), in order
        self.transfers = 0                              # control + bulk transfers made (for measurement)
        self.on_lost: Callable[[DeviceLost], None] | None = None    # told once, when the device vanishes

    # -- transfers ------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        if self.lost is not None:
            raise self.lost
        self.transfers += 1
        try:
            return fn(*args)
        except self._errors as e:
            code = _libusb_code(e)
            if code == LIBUSB_ERROR_NO_DEVICE or type(e).__name__ == "USBErrorNoDevice":
                self.lost = DeviceLost(f"{self.name} is gone (unplugged?) during {what}: {e}; close the device and "
                                       f"open it again once it is back")
                self.lost.in_flight = what
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                raise self.lost from None
            err = DeviceError(f"{self.name}: {what} failed: {e} (libusb {code})")
            err.libusb_code = code
            raise err from None

    def _out(self, req: int, value: int, index: int, data: bytes = b"", timeout: int = TIMEOUT_CONTROL,
             what: str = "") -> None:
        self._call(what or f"control request {req:#04x}", self.h.controlWrite, RT_VENDOR_OUT, req, value, index,
                   bytes(data), timeout)

    def _in(self, req: int, value: int, index: int, length: int, timeout: int = TIMEOUT_CONTROL,
            what: str = "") -> bytes:
        what = what or f"control request {req:#04x} IN"
        got = bytes(self._call(what, self.h.controlRead, RT_VENDOR_IN, req, value, index, length, timeout))
        if len(got) != length:
            raise DeviceError(f"{self.name}: {what} answered {len(got)} bytes, not {length}")
        return got

    def _bulk_out(self, data: bytes, timeout: int, what: str) -> None:
        n = self._call(what, self.h.bulkWrite, EP_BULK_OUT, data, timeout)
        if n is not None and n != len(data):
            raise DeviceError(f"{self.name}: {what}: bulk OUT took {n} of {len(data)} bytes")

    def _bulk_in(self, length: int, timeout: int, what: str) -> bytes:
        got = bytes(self._call(what, self.h.bulkRead, EP_BULK_IN, length, timeout))
        if len(got) != length:
            raise DeviceError(f"{self.name}: {what}: bulk IN gave {len(got)} of {length} bytes")
        return got

    # -- XDATA (E4 / E5) --------------------------------------------------------------------------------------
    def xdata_read(self, addr: int, n: int) -> bytes:
        """n bytes of the bridge's XDATA from addr (E4, at most 255 bytes a request)."""
        if not 0 <= addr <= addr + n <= 0x10000:
            raise DeviceError(f"XDATA read of {n} bytes at {addr:#x} leaves the 64 KiB XDATA space")
        with self.lock:
            out = b""
            for a in range(addr, addr + n, XDATA_READ_MAX):
                k = min(XDATA_READ_MAX, addr + n - a)
                out += self._in(REQ_XDATA_READ, a, 0, k, TIMEOUT_CONTROL, f"XDATA read of {k} bytes at {a:#06x}")
            return out

    def xdata_write(self, addr: int, data: bytes) -> None:
        """Bytes into XDATA from addr (E5: one byte a request, the value in wIndex)."""
        if not 0 <= addr <= addr + len(data) <= 0x10000:
            raise DeviceError(f"XDATA write of {len(data)} bytes at {addr:#x} leaves the 64 KiB XDATA space")
        with self.lock:
            for i, b in enumerate(bytes(data)):
                self._out(REQ_XDATA_WRITE, addr + i, b, b"", TIMEOUT_CONTROL, f"XDATA write at {addr + i:#06x}")

    # -- single TLPs (F0 mode 0) ------------------------------------------------------------------------------
    def tlp(self, fmt_type: int, addr: int, value: int = 0, size: int = 4, what: str = "") -> int | None:
        """One TLP of 1..4 bytes at addr: the read value for a read, None for a write. Non-posted requests collect
        their completion (F0 IN): an engine error is retried (10 times, 1 ms apart), a completion status other
        than success is a TLPError."""
        be = byte_enables(addr, size)
        shift = 8 * (addr & 3)
        write = bool(fmt_type & 0x40)
        data = struct.pack("<III", addr & 0xFFFFFFFC, (addr >> 32) & 0xFFFFFFFF,
                           ((value & ((1 << 8 * size) - 1)) << shift) if write else 0)
        what = what or f"TLP {fmt_type:#04x} at {addr:#x}"
        with self.lock:
            self._flush()
            for attempt in range(TLP_RETRIES + 1):
                self._out(REQ_TLP, be << 8 | fmt_type, MODE_SINGLE, data, TIMEOUT_TLP, what)
                if is_posted(fmt_type):
                    return None
                reply = self._in(REQ_TLP, 0, 0, 8, TIMEOUT_TLP, f"{what} (completion)")
                if reply[7] == 0:
                    break
                time.sleep(TLP_RETRY_SLEEP_MS / 1000)
            else:
                raise TLPError(f"{self.name}: {what}: the bridge's TLP engine failed {TLP_RETRIES + 1} times "
                               f"(F0 IN status byte {reply[7]:#04x})")
            status = reply[4] >> 5
            if status:
                raise TLPError(f"{self.name}: {what}: completion status {status} "
                               f"({COMPLETION_STATUS.get(status, 'reserved')})", status)
            if write:
                return None
            return (struct.unpack_from("<I", reply)[0] >> shift) & ((1 << 8 * size) - 1)

    def config_read(self, bus: int, dev: int, fn: int, off: int, size: int = 4) -> int:
        """A config-space read (type 0 to bus 0, type 1 beyond)."""
        a = config_address(bus, dev, fn, off)
        return self.tlp(U.config_fmt_type(False, bus), a, 0, size, f"config read of {size} bytes at {bus:02x}:{dev:02x}.{fn} "
                        f"offset {off:#x}")

    def config_write(self, bus: int, dev: int, fn: int, off: int, size: int, value: int) -> None:
        """A config-space write (non-posted: its completion is checked)."""
        a = config_address(bus, dev, fn, off)
        self.tlp(U.config_fmt_type(True, bus), a, value, size, f"config write of {size} bytes at {bus:02x}:{dev:02x}.{fn} "
                 f"offset {off:#x}")

    # -- memory streams (F0 mode 1 / 2) ------------------------------------------------------------------------
    @staticmethod
    def _check_stream(addr: int, n: int) -> None:
        if addr & 3 or n & 3 or n <= 0:
            raise DeviceError(f"a memory stream needs a dword-aligned address and a length that is a positive "
                              f"multiple of 4 (got {n} bytes at {addr:#x})")

    def _arm(self, mode: int, fmt: int, addr: int, ndw: int, what: str) -> None:
        self._out(REQ_TLP, BE_FULL << 8 | fmt, mode, struct.pack("<III", addr & 0xFFFFFFFF, addr >> 32, ndw),
                  TIMEOUT_TLP, what)

    def _write_now(self, addr: int, data: bytes) -> None:
        for off in range(0, len(data), STREAM_PIECE):
            piece = data[off:off + STREAM_PIECE]
            what = f"memory write of {len(piece)} bytes at {addr + off:#x}"
            self._arm(MODE_STREAM_WRITE, MWR64, addr + off, len(piece) // 4, what)
            self._bulk_out(piece, TIMEOUT_BULK_OUT, what)

    def mem_write(self, addr: int, data: bytes) -> None:
        """Bytes to bus address addr (dword-aligned, a multiple of 4) as memory-write streams, now (after the
        queued posted writes)."""
        self._check_stream(addr, len(data))
        with self.lock:
            self._flush()
            self._write_now(addr, bytes(data))

    def post(self, addr: int, data: bytes) -> None:
        """A posted memory write that may wait for the next read or `flush`; queued writes to consecutive
        addresses go out as one stream (in the order they were queued)."""
        self._check_stream(addr, len(data))
        with self.lock:
            if self.lost is not None:
                raise self.lost
            if self._posted:
                last_addr, last = self._posted[-1]
                if last_addr + len(last) == addr:
                    last += data
                    return
            self._posted.append((addr, bytearray(data)))

    def _flush(self) -> None:
        posted, self._posted = self._posted, []
        for addr, data in posted:
            self._write_now(addr, bytes(data))

    def flush(self) -> None:
        """Send the queued posted writes."""
        with self.lock:
            self._flush()

    def mem_read(self, addr: int, n: int) -> bytes:
        """n bytes from bus address addr (dword-aligned, a multiple of 4) as memory-read streams."""
        self._check_stream(addr, n)
        with self.lock:
            self._flush()
            out = []
            for off in range(0, n, STREAM_PIECE):
                k = min(STREAM_PIECE, n - off)
                what = f"memory read of {k} bytes at {addr + off:#x}"
                self._arm(MODE_STREAM_READ, MRD64, addr + off, k // 4, what)
                out.append(self._bulk_in(k, TIMEOUT_STREAM_IN, what))
            return b"".join(out)

    # -- SRAM DMA (F2) and PCIe power (F3) ----------------------------------------------------------------
    def sram_write(self, offset: int, data: bytes) -> None:
        """Bytes into the bridge SRAM at offset (a multiple of the 16 KiB slot), padded to 512-byte sectors."""
        n = len(data)
        wire = (n + SECTOR - 1) // SECTOR * SECTOR
        if offset % SLOT or n <= 0 or offset + wire > SRAM_BYTES:
            raise DeviceError(f"SRAM write of {n} bytes at {offset:#x}: the offset must be a multiple of {SLOT:#x} and "
                              f"the data must fit the {SRAM_BYTES:#x}-byte SRAM")
        slot, slots = offset // SLOT, (wire + SLOT - 1) // SLOT
        with self.lock:
            self._flush()
            what = f"SRAM write of {n} bytes at {offset:#x}"
            self._out(REQ_SRAM_DMA, wire // SECTOR, slot | slots << 8, b"", TIMEOUT_CONTROL, what)
            self._bulk_out(bytes(data) + bytes(wire - n), TIMEOUT_BULK_OUT, what)

    def sram_read_arm(self, n: int) -> int:
        """Arm an SRAM read of n bytes from offset 0; the bytes the bulk IN will carry (n rounded up to sectors)."""
        wire = (n + SECTOR - 1) // SECTOR * SECTOR
        if n <= 0 or wire > SRAM_BYTES:
            raise DeviceError(f"SRAM read of {n} bytes: 1 to {SRAM_BYTES:#x} bytes")
        with self.lock:
            self._out(REQ_SRAM_DMA, (wire // SECTOR) | F2_READ, ((wire + SLOT - 1) // SLOT) << 8, b"", TIMEOUT_CONTROL,
                      f"SRAM read arm of {n} bytes")
        return wire

    def sram_read_data(self, n: int) -> bytes:
        """The bulk IN of an armed SRAM read (n bytes kept of the sector-rounded stream)."""
        wire = (n + SECTOR - 1) // SECTOR * SECTOR
        with self.lock:
            return self._bulk_in(wire, TIMEOUT_SRAM_IN, f"SRAM read of {n} bytes")[:n]

    def pcie_power(self, on: bool) -> None:
        """Power the PCIe side on (and train the link) or off (F3)."""
        with self.lock:
            self._out(REQ_PCIE_POWER, int(bool(on)), 0, b"", TIMEOUT_POWER, f"PCIe power {'on' if on else 'off'}")

    def link_state(self) -> int:
        """The downstream port's LTSSM state (XDATA 0xB450; 0x78: link up in L0)."""
        return self.xdata_read(LTSSM_STATE, 1)[0]


# --- the PCIe side: bring-up (pcie_setup) ------------------------------------------------------------------
@dataclass(frozen=True)
class BAR:
    """One GPU BAR as bring-up placed it."""
    index: int
    bus_address: int
    size: int
    prefetchable: bool
    is64: bool


def _resize_bar(ctrl: Controller, bus: int) -> int | None:
    """The Resizable-BAR capability's first BAR set to its largest size (pcie_setup.resizable_bar); that size's
    index (size = 1 MiB << index), None when the GPU has no such capability."""
    off, seen = EXT_CAP_START, set()
    while off and off not in seen and off <= CONFIG_OFFSET_MAX - 8:
        seen.add(off)
        hdr = ctrl.config_read(bus, 0, 0, off)
        if hdr in (0, 0xFFFFFFFF):
            return None
        if hdr & 0xFFFF == EXT_CAP_REBAR:
            cap = ctrl.config_read(bus, 0, 0, off + 4)
            if not cap >> 4:
                return None
            idx = (cap >> 4).bit_length() - 1
            cntl = ctrl.config_read(bus, 0, 0, off + 8)
            ctrl.config_write(bus, 0, 0, off + 8, 4, cntl & ~(0x1F << 8) | idx << 8)
            return idx
        off = (hdr >> 20) & 0xFFC
    return None


def size_bars(ctrl: Controller, bus: int = GPU_BUS) -> dict[int, BAR]:
    """Size every memory BAR of the function at bus:00.0 (all-ones written, read back) and place it: non-prefetchable
    from 0x1000_0000, prefetchable 64-bit ones from 0x8_0000_0000, each class in 2 MiB steps (pcie_setup.
    bar_assignment), each at an address aligned to its size (a BAR's low address bits are hardwired to zero: the
    PCI specification's natural alignment; the facts' 2 MiB steps alone would misplace a BAR larger than the
    distance to the next aligned address). A 32-bit prefetchable BAR is placed with the non-prefetchable ones
    (this module's choice: it cannot sit above 4 GiB)."""
    nxt = {False: MEM_BASE, True: PREF_BASE}
    bars: dict[int, BAR] = {}
    off = 0x10
    while off <= 0x24:
        lo = ctrl.config_read(bus, 0, 0, off)
        if lo & 1:                                      # an I/O BAR
            off += 4
            continue
        pref, is64 = bool(lo & 0x8), (lo & 0x6) == 0x4
        ctrl.config_write(bus, 0, 0, off, 4, 0xFFFFFFFF)
        mask = ctrl.config_read(bus, 0, 0, off) & 0xFFFFFFF0
        if is64:
            ctrl.config_write(bus, 0, 0, off + 4, 4, 0xFFFFFFFF)
            mask |= ctrl.config_read(bus, 0, 0, off + 4) << 32
            size = (~mask + 1) & 0xFFFFFFFFFFFFFFFF
        else:
            size = (~mask + 1) & 0xFFFFFFFF
        cls = pref and is64
        if size:                                        # a BAR decodes naturally aligned addresses (PCI spec)
            align = max(size, BAR_ALIGN)
            addr = (nxt[cls] + align - 1) // align * align
            ctrl.config_write(bus, 0, 0, off, 4, addr & 0xFFFFFFFF)
            if is64:
                ctrl.config_write(bus, 0, 0, off + 4, 4, addr >> 32)
            nxt[cls] = addr + (size + BAR_ALIGN - 1) // BAR_ALIGN * BAR_ALIGN
            bars[(off - 0x10) // 4] = BAR((off - 0x10) // 4, addr, size, pref, is64)
        else:
            ctrl.config_write(bus, 0, 0, off, 4, 0)
            if is64:
                ctrl.config_write(bus, 0, 0, off + 4, 4, 0)
        off += 8 if is64 else 4
    return bars


def bring_up(ctrl: Controller) -> dict[int, BAR]:
    """Power and link, the bridges on buses 0..3, the GPU's BARs on bus 4 (see the module doc); the BARs placed."""
    state = ctrl.link_state()
    if state != LTSSM_L0:
        ctrl.pcie_power(True)
        state = ctrl.link_state()
    if state != LTSSM_L0:
        raise DeviceError(f"{ctrl.name}: the PCIe link did not come up after power-on (LTSSM state {state:#04x} at "
                          f"XDATA {LTSSM_STATE:#06x}, {LTSSM_L0:#04x} is L0): check the GPU's power and seating")
    for bus in BRIDGE_BUSES:                            # in order: each bus is reachable once the one before routes
        cw = lambda off, size, v, b=bus: ctrl.config_write(b, 0, 0, off, size, v)   # noqa: E731
        cw(0x18, 4, U.bus_numbers(bus))     # primary 0, secondary bus+1, subordinate 4: one dword
        cw(0x20, 2, MEM_BASE >> 16)                     # memory window from 0x1000_0000 ...
        cw(0x22, 2, 0xFFFF)                             # ... to all-ones
        cw(0x24, 2, (PREF_BASE >> 16) & 0xFFF0)         # prefetchable window bits 31:20 ...
        cw(0x26, 2, 0xFFFF)
        cw(0x28, 4, PREF_BASE >> 32)                    # ... and 63:32
        cw(0x2C, 4, 0xFFFFFFFF)
        cw(0x04, 1, CMD_IO | CMD_MEMORY | CMD_MASTER)
    ident = ctrl.config_read(GPU_BUS, 0, 0, 0)
    if ident & 0xFFFF != 0x1002:
        raise DeviceError(f"{ctrl.name}: the function on bus {GPU_BUS} is {ident & 0xFFFF:#06x}:{ident >> 16:#06x}, "
                          f"not an AMD GPU (vendor 0x1002)")
    _resize_bar(ctrl, GPU_BUS)
    bars = size_bars(ctrl, GPU_BUS)
    for n in (0, 2, 5):
        if n not in bars:
            raise DeviceError(f"{ctrl.name}: the GPU's BAR{n} reads back no size; the AM driver needs BAR0 (VRAM), "
                              f"BAR2 (doorbells) and BAR5 (registers)")
    ctrl.config_write(GPU_BUS, 0, 0, 0x04, 1, CMD_IO | CMD_MEMORY | CMD_MASTER)
    return bars


# --- backends: BAR5 registers, BAR0 VRAM, BAR2 doorbells -----------------------------------------------------
class Registers:
    """BAR5 as a dword register backend: a read is one 4-byte stream read, a write a queued posted write (queued
    writes to consecutive registers go as one stream, all of them before the next read)."""

    def __init__(self, ctrl: Controller, base: int, size: int):
        self.ctrl, self.base, self.size = ctrl, base, size

    def _addr(self, addr: int) -> int:
        if not 0 <= addr * 4 <= self.size - 4:
            raise DeviceError(f"register address {addr:#x} is outside the {self.size:#x}-byte register BAR")
        return self.base + addr * 4

    def read32(self, addr: int) -> int:
        return struct.unpack("<I", self.ctrl.mem_read(self._addr(addr), 4))[0]

    def write32(self, addr: int, value: int) -> None:
        self.ctrl.post(self._addr(addr), struct.pack("<I", value & 0xFFFFFFFF))


class VRAMWindow:
    """BAR0 as byte reads and writes (a VRAM window the AM driver's VRAMAccess takes in place of a mapped BAR):
    unaligned ends are read, merged and written back as whole dwords."""

    def __init__(self, ctrl: Controller, base: int, size: int):
        self.ctrl, self.base, self.size = ctrl, base, size

    def __len__(self) -> int:
        return self.size

    def _check(self, off: int, n: int) -> None:
        if not 0 <= off <= off + n <= self.size:
            raise DeviceError(f"VRAM access of {n} bytes at {off:#x} leaves the {self.size:#x}-byte BAR0")

    def read(self, off: int, n: int) -> bytes:
        self._check(off, n)
        if n == 0:
            return b""
        lo, hi = off & ~3, (off + n + 3) & ~3
        return self.ctrl.mem_read(self.base + lo, hi - lo)[off - lo:off - lo + n]

    def write(self, off: int, data: bytes) -> None:
        n = len(data)
        self._check(off, n)
        if n == 0:
            return
        lo, hi = off & ~3, (off + n + 3) & ~3
        if lo == off and hi == off + n:
            self.ctrl.mem_write(self.base + off, bytes(data))
            return
        with self.ctrl.lock:
            buf = bytearray(hi - lo)
            if lo != off:
                buf[0:4] = self.ctrl.mem_read(self.base + lo, 4)
            if hi != off + n:
                buf[-4:] = self.ctrl.mem_read(self.base + hi - 4, 4)
            buf[off - lo:off - lo + n] = data
            self.ctrl.mem_write(self.base + lo, bytes(buf))


class Doorbells:
    """BAR2 as the interface protocol's doorbell Mapping: a 64-bit doorbell write is one 8-byte stream write
    (facts: amd_over_usb.doorbell_path), after `before()` (the interface pushes what the GPU is to read)."""

    def __init__(self, ctrl: Controller, base: int, size: int, before: Callable[[], None] | None = None):
        self.ctrl, self.base, self.size, self.before = ctrl, base, size, before
        self.addr, self.mv = 0, None
        self.rings = 0

    def _check(self, off: int, n: int) -> int:
        if off & (n - 1) or not 0 <= off <= self.size - n:
            raise DeviceError(f"doorbell write at {off:#x} is not an aligned {n}-byte slot of the "
                              f"{self.size:#x}-byte doorbell BAR")
        return self.base + off

    def write64(self, off: int, v: int) -> None:
        a = self._check(off, 8)
        if self.before is not None:
            self.before()
        self.ctrl.mem_write(a, struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF))
        self.rings += 1

    def write32(self, off: int, v: int) -> None:
        a = self._check(off, 4)
        if self.before is not None:
            self.before()
        self.ctrl.mem_write(a, struct.pack("<I", v & 0xFFFFFFFF))
        self.rings += 1

    def read32(self, off: int) -> int:
        return struct.unpack("<I", self.ctrl.mem_read(self._check(off, 4), 4))[0]

    def read64(self, off: int) -> int:
        return struct.unpack("<Q", self.ctrl.mem_read(self._check(off, 8), 8))[0]


# --- CPU views of VRAM: host shadows kept in step with VRAM -------------------------------------------------
class Shadows:
    """The runtime reads and writes its CPU-visible memory (rings, queue pointers, signals, kernel arguments,
    code) through memoryviews; over the bridge no such view of VRAM exists, so each CPU-visible allocation gets a
    host copy (its shadow) kept in step with VRAM at the points where the other side looks:
    - `flush` (before every doorbell): the dwords the host changed since the last sync go to VRAM, runs of them
      as one stream each (exactly the changed dwords where the GPU writes too, so a GPU-written read pointer
      beside a host-written write pointer is never overwritten);
    - `pull` (every interrupt wait): allocations the GPU writes (`pull` set: signals, queue pointers,
      timestamps) are read back, after their own host changes went out.
    `window` is BAR0 (VRAMWindow); entries are keyed by GPU address."""

    GAP_DW = 64                  # host-only memory: changed runs this close are sent as one stream

    def __init__(self, window: VRAMWindow):
        self.window = window
        self.lock = threading.RLock()
        self.entries: dict[int, list] = {}          # va -> [vram offset, buffer, clean copy, pull]

    def add(self, va: int, off: int, size: int) -> Any:
        """A new CPU view of VRAM [off, off + size) (its current contents), for the interface protocol."""
        import numpy as np
        from .base import Mapping
        data = bytearray(self.window.read(off, size))
        with self.lock:
            self.entries[va] = [off, data, np.frombuffer(bytes(data), np.uint32).copy(), False]
        return Mapping(va, size, memoryview(data))

    def set_pull(self, va: int, pull: bool) -> None:
        with self.lock:
            if va in self.entries:
                self.entries[va][3] = pull

    def drop(self, va: int) -> None:
        with self.lock:
            self.entries.pop(va, None)

    def _push(self, e: list, gap: int) -> None:
        import numpy as np
        off, data, clean, _ = e
        cur = np.frombuffer(data, np.uint32)
        idx = np.flatnonzero(cur != clean)
        if not len(idx):
            return
        breaks = np.flatnonzero(np.diff(idx) > gap + 1)
        starts = np.concatenate(([idx[0]], idx[breaks + 1]))
        ends = np.concatenate((idx[breaks], [idx[-1]])) + 1
        for s, t in zip(starts.tolist(), ends.tolist()):
            self.window.write(off + 4 * s, bytes(data[4 * s:4 * t]))
            clean[s:t] = cur[s:t]

    def flush(self) -> None:
        """Host changes of every shadow to VRAM."""
        with self.lock:
            for e in self.entries.values():
                self._push(e, 0 if e[3] else self.GAP_DW)

    def pull(self) -> None:
        """The GPU-written shadows read back from VRAM, after their host changes went out; a dword the host changes
        while the read is on the wire (another thread's write pointer) is kept and stays to be sent."""
        import numpy as np
        with self.lock:
            for e in self.entries.values():
                if not e[3]:
                    continue
                self._push(e, 0)
                off, data, clean, _ = e
                fresh = np.frombuffer(self.window.read(off, len(data)), np.uint32).copy()
                cur = np.frombuffer(data, np.uint32)
                late = cur != clean
                clean[:] = fresh
                fresh[late] = cur[late]
                cur[:] = fresh

    def write_through(self, va: int, rel: int, raw: bytes) -> bool:
        """Bytes written to VRAM at `rel` of the allocation at `va`: its shadow takes them too (False: none)."""
        import numpy as np
        with self.lock:
            e = self.entries.get(va)
            if e is None:
                return False
            off, data, clean, _ = e
            data[rel:rel + len(raw)] = raw
            lo, hi = rel // 4, (rel + len(raw) + 3) // 4
            clean[lo:hi] = np.frombuffer(bytes(data[4 * lo:4 * hi]), np.uint32)
            return True


# --- the function: what the PCI interface and the AM driver see ----------------------------------------------
class USBFunction:
    """The GPU behind the bridge as a PCI function (the protocol of iface/pci.py `Function`): config space through
    config TLPs to bus 4, BAR5 registers, BAR0 VRAM (a window object), BAR2 doorbells, CPU views of VRAM as
    shadows. No host memory is reachable by the GPU (`dma_alloc` says so: the AM memory uses VRAM instead), and
    the bus addresses behind the bridge are not the host's (`bar_bus_address` is 0: no peer-to-peer)."""

    vfio = False
    irq = None

    def __init__(self, ctrl: Controller, bars: dict[int, BAR], name: str, on_close: Callable[[], None] | None = None):
        self.ctrl, self.bars, self.name = ctrl, bars, f"USB {name}"
        self.bar_sizes = {n: b.size for n, b in bars.items()}
        self.regs = Registers(ctrl, bars[5].bus_address, bars[5].size)
        self.vram = VRAMWindow(ctrl, bars[0].bus_address, bars[0].size)
        self.shadows = Shadows(self.vram)
        self.doorbells = Doorbells(ctrl, bars[2].bus_address, bars[2].size, before=self.shadows.flush)
        self._on_close = on_close
        self.closed = False

    def config_read(self, off: int, size: int = 4) -> int:
        return self.ctrl.config_read(GPU_BUS, 0, 0, off, size)

    def config_write(self, off: int, size: int, value: int) -> None:
        self.ctrl.config_write(GPU_BUS, 0, 0, off, size, value)

    def enable(self) -> None:
        """Memory decoding and bus mastering on (bring-up set them; a reset may have cleared them)."""
        cmd = self.config_read(4, 2)
        if cmd & (CMD_MEMORY | CMD_MASTER) != CMD_MEMORY | CMD_MASTER:
            self.config_write(4, 2, cmd | CMD_MEMORY | CMD_MASTER)

    def bar(self, n: int) -> Any:
        """BAR5: the register backend; BAR0: the VRAM window; BAR2: the doorbells."""
        try:
            return {5: self.regs, 0: self.vram, 2: self.doorbells}[n]
        except KeyError:
            raise DeviceError(f"{self.name}: BAR{n} is not one the driver uses (0, 2, 5)") from None

    def vram_mapping(self, va: int, off: int, size: int) -> Any:
        """The CPU view of VRAM [off, off + size) mapped at `va`: a shadow (see Shadows)."""
        return self.shadows.add(va, off, size)

    def dma_alloc(self, size: int) -> Any:
        e = DeviceError(f"{self.name}: the GPU reaches no host memory through the bridge (only its SRAM); "
                        f"CPU-visible VRAM is used instead")
        e.unsupported = True
        raise e

    def dma_free(self, buf: Any) -> None:
        raise DeviceError(f"{self.name}: no DMA buffers behind the bridge")

    def bar_bus_address(self, n: int) -> int:
        """0: the BARs sit on the bridge's own bus, which no other device reaches (no peer-to-peer)."""
        return 0

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.ctrl.lost is None:
                self.ctrl.flush()
        finally:
            if self._on_close is not None:
                self._on_close()


# --- opening the bridge ---------------------------------------------------------------------------------------
def _guard(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """A libusb call outside a controller (opening): its error as an amdq error."""
    try:
        return fn(*args)
    except _usb_errors() as e:
        code = _libusb_code(e)
        cls = DeviceLost if code == LIBUSB_ERROR_NO_DEVICE else DeviceError
        raise cls(f"USB bridge: {what} failed: {e} (libusb {code})") from None


def open_handle(context: Any, ids: tuple[tuple[int, int], ...] = USB_IDS) -> tuple[Any, str]:
    """The first bridge with the custom firmware on `context` (a usb1.USBContext or the simulated bridge's), opened
    as the facts' open sequence says (usb.open_sequence): product string checked, a kernel driver detached (and
    the device reset), configuration 1, interface 0 claimed, alternate setting 0. (handle, "usb:BUS-ADDRESS")."""
    h = None
    for vid, pid in ids:
        h = _guard(f"opening {vid:04x}:{pid:04x}", context.openByVendorIDAndProductID, vid, pid)
        if h is not None:
            break
    if h is None:
        raise DeviceError("no ASM24xx USB bridge with the vendor-request firmware found ("
                          + ", ".join(f"{v:04x}:{p:04x}" for v, p in ids) + "); check the cable and its power, and "
                          "that this user may open the device (udev rule)")
    try:
        get_product = getattr(h, "getProduct", None)
        product = (_guard("reading the product string", get_product) if get_product else None) or ""
        if get_product is not None and not product.startswith(PRODUCT_PREFIXES):
            raise DeviceError(f"the USB device's product string {product!r} starts with none of "
                              f"{', '.join(PRODUCT_PREFIXES)}: not the bridge firmware this driver speaks to")
        active = getattr(h, "kernelDriverActive", None)
        if active is not None and _guard("asking for a kernel driver", active, INTERFACE):
            _guard("detaching the kernel driver", h.detachKernelDriver, INTERFACE)
            _guard("resetting the device", h.resetDevice)
        if hasattr(h, "setConfiguration"):
            _guard("setting configuration 1", h.setConfiguration, CONFIGURATION)
        _guard("claiming interface 0", h.claimInterface, INTERFACE)
        if hasattr(h, "setInterfaceAltSetting"):
            _guard("selecting alternate setting 0", h.setInterfaceAltSetting, INTERFACE, ALT_SETTING)
        d = h.getDevice()
        name = f"usb:{d.getBusNumber()}-{d.getDeviceAddress()}"
    except BaseException:
        try:
            h.close()
        except Exception:               # closing a handle that failed to open: its own error says nothing more
            pass
        raise
    return h, name


def open_function(context: Any) -> USBFunction:
    """The bridge opened and the PCIe side brought up: the GPU as a function for the AM driver."""
    h, name = open_handle(context)
    ctrl = Controller(h, f"USB bridge {name}")

    def release() -> None:
        try:
            if ctrl.lost is None and hasattr(h, "releaseInterface"):
                _guard("releasing interface 0", h.releaseInterface, INTERFACE)
        finally:
            try:
                h.close()
            except _usb_errors():       # closing a vanished device: nothing left to release
                pass
    try:
        bars = bring_up(ctrl)
    except BaseException:
        release()
        raise
    return USBFunction(ctrl, bars, name, release)


# --- the interface ----------------------------------------------------------------------------------------------
PULL_MAX = 64 << 10          # uncached CPU-visible allocations up to this size are GPU-written: read back on waits


class USB(PCI):
    """The AM driver over the bridge: the PCI interface on a USBFunction, with the USB runtime parameters (ring sizes
    of base.USB_RING_BYTES), shadows of CPU-visible VRAM kept in step (see Shadows) and host copies through BAR0.
    `standin`: the firmware policy, as for PCI."""
    name = "USB"

    def __init__(self, fn: USBFunction, arch: str | None = None, standin: bool | None = False):
        from .base import USB_RING_BYTES
        self.RING_BYTES = dict(USB_RING_BYTES)
        self.copier = None
        super().__init__(fn, arch, standin)
        fn.ctrl.on_lost = self._lost

    def _lost(self, e: DeviceLost) -> None:
        """The bridge vanished: the AM driver's GPU is lost (it refuses work, skips fini, leaves the session
        unclean: the next open boots fully)."""
        if self.driver.lost is None:
            self.driver.lost = e

    # memory: every buffer in VRAM; CPU views are shadows
    def alloc(self, size: int, kind: str = "vram", uncached: bool = False, cpu: bool = True,
              executable: bool = False) -> Any:
        self._check_link()
        a = super().alloc(size, kind, uncached, cpu, executable)
        if a.cpu is not None:
            self.fn.shadows.set_pull(a.va, uncached and a.size <= PULL_MAX)
        return a

    def free(self, a: Any) -> None:
        self.fn.shadows.drop(a.va)
        if self.fn.ctrl.lost is not None:               # nothing reaches the page tables: only the address goes
            from ..am import va as VA
            if self.memory.live.pop(a.va, None) is not None:
                VA.shared().free(a.va)
            return
        super().free(a)

    def _check_link(self) -> None:
        if self.fn.ctrl.lost is not None:
            raise self.fn.ctrl.lost

    def wait_events(self, timeout_ms: int) -> list | None:
        """The PCI interface's wait (the IH ring in VRAM, polled: no interrupts cross the bridge), then the
        GPU-written shadows read back."""
        self._check_link()
        found = super().wait_events(timeout_ms)
        self.fn.shadows.pull()
        return found

    def _vram_range(self, a: Any, off: int, n: int, what: str) -> int:
        vo = a.meta.get("vram_offset")
        if vo is None or not 0 <= off <= off + n <= a.size:
            raise DeviceError(f"{what} of {n} bytes at offset {off} of the allocation at {a.va:#x}: not inside a "
                              f"VRAM allocation of this device")
        if vo + off + n > self.fn.vram.size:
            raise DeviceError(f"{what}: VRAM {vo + off:#x}+{n:#x} lies past the {self.fn.vram.size:#x}-byte BAR0, "
                              f"which is all the host reaches over the bridge")
        return vo + off

    def _copier(self) -> Any:
        if self.copier is None:
            from ..am import va as VA
            from .usb_copy import BridgeCopier
            self.copier = BridgeCopier(self.fn.ctrl, self.driver.blocks["gmc"].vm, VA.shared())
        return self.copier

    def copy_in(self, a: Any, off: int, raw: Any, queue: Any = None) -> None:
        """Host bytes into the allocation at offset `off`, the GPU idle (the caller drained it): through the bridge
        SRAM on the SDMA queue `queue` (the runtime's copy queue; see usb_copy), else through BAR0. A shadow of
        the allocation takes them too."""
        self._check_link()
        data = bytes(memoryview(raw).cast("B"))
        if not data:
            return
        if queue is not None and a.meta.get("vram_offset") is not None and 0 <= off <= off + len(data) <= a.size:
            self._copier().copy_in(queue, a.va + off, data)
        else:
            self.fn.vram.write(self._vram_range(a, off, len(data), "copy in"), data)
        self.fn.shadows.write_through(a.va, off, data)

    def copy_out(self, a: Any, off: int, n: int, queue: Any = None) -> bytes:
        """n bytes of the allocation from offset `off`, the GPU idle: through the bridge SRAM on `queue`, else
        through BAR0."""
        self._check_link()
        if n <= 0:
            return b""
        self.fn.shadows.flush()
        if queue is not None and a.meta.get("vram_offset") is not None and 0 <= off <= off + n <= a.size:
            return self._copier().copy_out(queue, a.va + off, n)
        return self.fn.vram.read(self._vram_range(a, off, n, "copy out"), n)

    def close(self) -> None:
        """The PCI interface's close (queues, memory, fini), the SRAM mappings first; a bridge that is gone is only
        released (nothing can reach the GPU: its session stays unclean, so the next open boots it fully)."""
        if self.closed:
            return
        if self.fn.ctrl.lost is not None:
            self.closed = True
            self.fn.close()
            return
        if self.copier is not None:
            try:
                self.copier.close()
            except DeviceError:
                pass
            self.copier = None
        super().close()

    def info(self) -> dict:
        d = super().info()
        st = self.copier.stats if self.copier is not None else None
        d["bridge"] = {"name": self.fn.name, "transfers": self.fn.ctrl.transfers,
                       "bars": {f"BAR{n}": f"{b.bus_address:#x}+{b.size:#x}" for n, b in sorted(self.fn.bars.items())},
                       "copies": dict(vars(st)) if st is not None else None}
        return d


def open_usb(context: Any, arch: str | None = None, standin: bool | None = False) -> USB:
    """The first bridge on `context` (usb1.USBContext, or the simulated bridge's), its GPU booted."""
    fn = open_function(context)
    try:
        return USB(fn, arch, standin=standin)
    except BaseException:
        fn.close()
        raise


def open_real(arch: str | None = None) -> USB:
    """The first bridge on the machine's USB, its GPU booted."""
    try:
        import usb1
    except ImportError:
        raise DeviceError("the USB interface needs the libusb1 package (pip install libusb1) and libusb-1.0") from None
    return open_usb(_guard("initialising libusb", usb1.USBContext), arch, standin=False)


def present() -> bool:
    """Whether a bridge with the vendor-request firmware is on USB (for the default interface order)."""
    try:
        import usb1
        with usb1.USBContext() as ctx:
            return any(ctx.getByVendorIDAndProductID(v, p) is not None for v, p in USB_IDS)
    except Exception:                   # no libusb, no permission to enumerate: no bridge to use
        return False
