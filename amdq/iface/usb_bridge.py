"""The ASM24xx bridge's vendor requests on a libusb handle (`usb1.USBDeviceHandle`, or the simulated bridge's handle
with the same methods): layer 1 of the USB interface (iface/usb.py).

E4/E5 XDATA reads and writes, F0 single TLPs (config and memory, with the completion status of the F0 IN reply,
engine errors retried) and F0 streams (memory writes on bulk OUT 0x02, reads on bulk IN 0x81), F2 SRAM DMA, F3
PCIe power. Posted register writes are queued and sent at the next read (or `flush`), writes to consecutive
dwords as one stream (an F0 arm and one bulk OUT); a lone dword goes as a single posted TLP (one control transfer:
F0 mode 0 with a posted memory write has no completion to collect), so a register write or a doorbell costs one
transfer. With a libusb context (asynchronous transfers) a stream's F0 arm and its bulk phase are submitted together
and waited for once (the bulk endpoint has nothing to move until the arm is taken), and a posted single TLP is
not waited for at all: it is collected at the next request (`reap`), where its error is raised; endpoint 0 keeps
requests in order. `round_trips` counts the host's waits for the bridge (a synchronous request, or a wait for a
submitted transfer not done yet). Every libusb error becomes an amdq.errors exception; a vanished device
(LIBUSB_ERROR_NO_DEVICE) is `DeviceLost` naming the request in flight, and every later call raises it at once.

Facts: shared/facts/usb_asm24.json through amdq.hw.usb_asm24. This module's choice (not a fact): STREAM_PIECE, the
longest stream one request moves (a libusb timeout covers a whole transfer).
"""
from __future__ import annotations

import contextlib
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from ..errors import DeviceError, DeviceLost
from ..hw import usb_asm24 as U

# --- facts: amdq.hw.usb_asm24 (generated from shared/facts/usb_asm24.json) ----------------------------------
USB_IDS = U.DRIVER_IDS                                  # (vid, pid) searched in this order
PRODUCT_PREFIXES = U.PRODUCT_PREFIXES
CONFIGURATION, INTERFACE, ALT_SETTING = U.CONFIGURATION, U.INTERFACE, U.ALT_SETTING
EP_BULK_OUT, EP_BULK_IN = U.EP_BULK_OUT, U.EP_BULK_IN
RT_VENDOR_OUT, RT_VENDOR_IN = U.REQTYPE_VENDOR_OUT, U.REQTYPE_VENDOR_IN
REQ_XDATA_READ, REQ_XDATA_WRITE = U.REQ_XDATA_READ, U.REQ_XDATA_WRITE
REQ_TLP, REQ_SRAM_DMA, REQ_PCIE_POWER = U.REQ_TLP, U.REQ_SRAM_DMA, U.REQ_PCIE_POWER
MODE_SINGLE, MODE_STREAM_WRITE, MODE_STREAM_READ = U.TLP_MODE_SINGLE, U.TLP_MODE_STREAM_WRITE, U.TLP_MODE_STREAM_READ
XDATA_READ_MAX = U.E4_MAX                                # bytes per E4 request
XDATA_READ_MAX_HIGH_SPEED = U.E4_MAX_HIGH_SPEED          # ... on USB 2.0 High-Speed (one 64-byte EP0 packet)
SPEED_HIGH = 3                                          # libusb_speed LIBUSB_SPEED_HIGH (libusb 1.0 API documentation)
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
LIBUSB_ERROR_PIPE = U.LIBUSB_ERROR_PIPE                 # a stalled endpoint
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

    def __init__(self, handle: Handle, name: str = "USB bridge", context: Any = None):
        self.h, self.name = handle, name
        # asynchronous transfers need the handle's getTransfer and the context's event loop (usb1, or the simulated
        # bridge's); without them every transfer is synchronous
        self.ctx = context if context is not None and hasattr(handle, "getTransfer") and \
            hasattr(context, "handleEventsTimeout") else None
        self.lock = threading.RLock()
        self.lost: DeviceLost | None = None
        self._errors = _usb_errors() + (_NoDevice,)
        self._posted: list[tuple[int, bytearray]] = []  # queued posted writes: (bus address, bytes), in order
        self.transfers = 0                              # control + bulk transfers made (for measurement)
        self.round_trips = 0                            # times the host waited for the bridge (see the module doc)
        self._unreaped: list[Pending] = []              # posted single TLPs submitted and not waited for
        self.xdata_read_max = XDATA_READ_MAX            # bytes per E4 (64 on a USB 2.0 High-Speed link)
        self.on_lost: Callable[[DeviceLost], None] | None = None    # told once, when the device vanishes
        self.identity: dict = {}                        # what the descriptors say (iface/usb.py describe)
        self._doing: list[str] = []                     # what the interface is doing (`doing`), for DeviceLost
        self.stalls_cleared = 0                         # bulk endpoint halts cleared (clearHalt) after a stall
        self.events: list[tuple[int, int, str, str, int]] | None = None   # (start ns, end ns, kind, what, bytes)
        self.max_events = 1 << 20

    @contextlib.contextmanager
    def doing(self, what: str) -> Iterator[None]:
        """Name what the interface does around a series of requests ("copy-in of 4096 bytes to 0x..."): a DeviceLost
        in it says so (`in_flight` names the request, `activity` this)."""
        self._doing.append(what)
        try:
            yield
        finally:
            self._doing.pop()

    def record(self, on: bool = True) -> None:
        """Time every transfer (start, end, kind, what, bytes) for a profile's interface track; off drops the log."""
        self.events = [] if on else None

    # -- transfers ------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, kind: str = "", nbytes: int = 0,
              endpoint: int | None = None) -> Any:
        if self.lost is not None:
            raise self.lost
        if kind:                                        # a synchronous transfer: the host waits for its answer
            self.transfers += 1
            self.round_trips += 1
        ev = self.events
        t0 = time.perf_counter_ns() if ev is not None and kind else 0
        try:
            out = fn(*args)
        except self._errors as e:
            code = _libusb_code(e)
            if code == LIBUSB_ERROR_NO_DEVICE or type(e).__name__ == "USBErrorNoDevice":
                unsent = sum(len(d) for _, d in self._posted) // 4
                doing = f" while {self._doing[-1]}" if self._doing else ""
                self.lost = DeviceLost(f"{self.name} is gone (unplugged?) during {what}{doing}: {e}"
                                       f"{f' ({unsent} queued register writes not sent)' if unsent else ''}; close the "
                                       f"device and open it again once it is back")
                self._posted = []
                self.lost.in_flight = what
                self.lost.activity = list(self._doing)
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                raise self.lost from None
            cleared = ""
            if code == LIBUSB_ERROR_PIPE and endpoint is not None and endpoint & 0x7F:
                cleared = self._clear_halt(endpoint)
            doing = f" while {self._doing[-1]}" if self._doing else ""
            err = DeviceError(f"{self.name}: {what}{doing} failed: {e} (libusb {code})"
                              + (f"; the endpoint stalled{cleared}" if code == LIBUSB_ERROR_PIPE else ""))
            err.libusb_code = code
            err.in_flight = what
            raise err from None
        if t0:
            t1 = time.perf_counter_ns()
            if len(ev) < self.max_events:
                ev.append((t0, t1, kind, what, nbytes))
        return out

    def _clear_halt(self, endpoint: int) -> str:
        """A stalled bulk endpoint runs again (CLEAR_FEATURE ENDPOINT_HALT: libusb's clear_halt); what to say."""
        clear = getattr(self.h, "clearHalt", None)
        if clear is None:
            return ""
        try:
            clear(endpoint)
        except self._errors as e:
            return f" and clearing its halt failed too ({e})"
        self.stalls_cleared += 1
        return f"; its halt was cleared (endpoint {endpoint:#04x}), so the next request runs"

    def _out(self, req: int, value: int, index: int, data: bytes = b"", timeout: int = TIMEOUT_CONTROL,
             what: str = "") -> None:
        self._call(what or f"control request {req:#04x}", self.h.controlWrite, RT_VENDOR_OUT, req, value, index,
                   bytes(data), timeout, kind="control OUT", nbytes=len(data), endpoint=0)

    def _in(self, req: int, value: int, index: int, length: int, timeout: int = TIMEOUT_CONTROL,
            what: str = "") -> bytes:
        what = what or f"control request {req:#04x} IN"
        got = bytes(self._call(what, self.h.controlRead, RT_VENDOR_IN, req, value, index, length, timeout,
                               kind="control IN", nbytes=length, endpoint=0))
        if len(got) != length:
            raise DeviceError(f"{self.name}: {what} answered {len(got)} bytes, not {length}")
        return got

    def _bulk_out(self, data: bytes, timeout: int, what: str) -> None:
        n = self._call(what, self.h.bulkWrite, EP_BULK_OUT, data, timeout, kind="bulk OUT", nbytes=len(data),
                       endpoint=EP_BULK_OUT)
        if n is not None and n != len(data):
            raise DeviceError(f"{self.name}: {what}: bulk OUT took {n} of {len(data)} bytes")

    def _bulk_in(self, length: int, timeout: int, what: str) -> bytes:
        got = bytes(self._call(what, self.h.bulkRead, EP_BULK_IN, length, timeout, kind="bulk IN", nbytes=length,
                               endpoint=EP_BULK_IN))
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
            step = self.xdata_read_max
            for a in range(addr, addr + n, step):
                k = min(step, addr + n - a)
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
        if len(data) == 4:                  # one dword: a single posted TLP, one control transfer (no bulk phase)
            what = f"memory write of 4 bytes at {addr:#x}"
            args = (REQ_TLP, BE_FULL << 8 | MWR64, MODE_SINGLE,
                    struct.pack("<III", addr & 0xFFFFFFFF, addr >> 32, struct.unpack("<I", data)[0]))
            if self.ctx is None:
                self._out(*args, TIMEOUT_TLP, what)
            else:                           # posted: nothing to wait for; collected (and its error raised) later
                self._unreaped.append(self._submit("control_out", what, TIMEOUT_TLP, *args))
            return
        for off in range(0, len(data), STREAM_PIECE):
            piece = data[off:off + STREAM_PIECE]
            what = f"memory write of {len(piece)} bytes at {addr + off:#x}"
            if self.ctx is None:
                self._arm(MODE_STREAM_WRITE, MWR64, addr + off, len(piece) // 4, what)
                self._bulk_out(piece, TIMEOUT_BULK_OUT, what)
                continue
            # the arm and its data go out together (the bulk endpoint is not ready until the arm is taken); the
            # host waits once, for the data, before the next request replaces the TLP engine's stream
            arm = self._submit("control_out", what, TIMEOUT_TLP, REQ_TLP, BE_FULL << 8 | MWR64, MODE_STREAM_WRITE,
                               struct.pack("<III", (addr + off) & 0xFFFFFFFF, (addr + off) >> 32, len(piece) // 4))
            self._pair(arm, self._submit("bulk_out", what, TIMEOUT_BULK_OUT, piece))

    def mem_write(self, addr: int, data: bytes) -> None:
        """Bytes to bus address addr (dword-aligned, a multiple of 4) as memory-write streams (one dword: a single
        posted TLP), now (after the queued posted writes)."""
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
        if self._unreaped:
            self.reap()
        done = 0
        try:
            for addr, data in self._posted:             # a write leaves the queue once it went out
                self._write_now(addr, bytes(data))
                done += 1
        finally:
            del self._posted[:done]

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
                if self.ctx is None:
                    self._arm(MODE_STREAM_READ, MRD64, addr + off, k // 4, what)
                    out.append(self._bulk_in(k, TIMEOUT_STREAM_IN, what))
                    continue
                # the arm and the read go out together (the bulk IN has no data until the arm is taken): one wait
                a = addr + off
                arm = self._submit("control_out", what, TIMEOUT_TLP, REQ_TLP, BE_FULL << 8 | MRD64, MODE_STREAM_READ,
                                   struct.pack("<III", a & 0xFFFFFFFF, a >> 32, k // 4))
                out.append(self._pair(arm, self._submit("bulk_in", what, TIMEOUT_STREAM_IN, k)))
            return b"".join(out)

    def _pair(self, arm: "Pending", data: "Pending") -> bytes | None:
        """Wait for a stream's data phase (its arm completes first), then collect the arm; the data's error is the
        one raised (the arm, if it failed too, is collected quietly)."""
        try:
            got = self.wait(data)
        except BaseException:
            if arm.done:
                try:
                    self.wait(arm)
                except Exception:               # the data phase's error is the one to report
                    pass
            raise
        self.wait(arm)
        return got

    # -- asynchronous transfers ---------------------------------------------------------------------------------
    @property
    def can_async(self) -> bool:
        return self.ctx is not None

    def submit(self, kind: str, what: str, timeout: int, *args: Any) -> "Pending":
        """Start a transfer without waiting for it: kind "control_out" (request, value, index, data), "control_in"
        (request, value, index, length), "bulk_out" (data) or "bulk_in" (length). Transfers on one endpoint
        complete in submission order (facts: usb.async_model). `wait` collects it."""
        if self.lost is not None:
            raise self.lost
        if self.ctx is None:
            raise DeviceError(f"{self.name}: asynchronous transfers need a libusb context (none was given)")
        with self.lock:
            self._flush()                       # queued register writes go first, in order
            return self._submit(kind, what, timeout, *args)

    def _submit(self, kind: str, what: str, timeout: int, *args: Any) -> "Pending":
        if self.lost is not None:
            raise self.lost
        p = Pending(what, kind, t0=time.perf_counter_ns())
        try:
            t = self.h.getTransfer()
        except self._errors as e:
            self._call(what, _raise, e)
        p.transfer = t

        def done(tr: Any) -> None:
            p.status, p.actual = tr.getStatus(), tr.getActualLength()
            if kind in ("control_in", "bulk_in"):
                p.data = bytes(tr.getBuffer()[:p.actual])
            p.done = True
        if kind == "bulk_out":
            (data,) = args
            p.length = len(data)
            t.setBulk(EP_BULK_OUT, bytes(data), callback=done, timeout=timeout)
        elif kind == "bulk_in":
            (length,) = args
            p.length = length
            t.setBulk(EP_BULK_IN, length, callback=done, timeout=timeout)
        elif kind == "control_out":
            req, value, index, data = args
            p.length = len(data)
            t.setControl(RT_VENDOR_OUT, req, value, index, bytes(data), callback=done, timeout=timeout)
        elif kind == "control_in":
            req, value, index, length = args
            p.length = length
            t.setControl(RT_VENDOR_IN, req, value, index, length, callback=done, timeout=timeout)
        else:
            raise DeviceError(f"unknown transfer kind {kind!r}")
        self._call(what, t.submit)
        self.transfers += 1
        p.deadline = time.monotonic() + (timeout or TIMEOUT_STREAM_IN) / 1000 + 1.0
        return p

    def wait(self, p: "Pending") -> bytes | None:
        """Wait for a submitted transfer (the context's events handled meanwhile); its IN data. A failed transfer
        raises as a synchronous one would: LIBUSB_TRANSFER_NO_DEVICE is DeviceLost, any other status DeviceError.
        A wait for a transfer not yet done is a round trip."""
        if not p.done:
            self.round_trips += 1
        while not p.done:                       # (events first: a transfer collected late may be long done)
            self._call(f"{p.what} (events)", self.ctx.handleEventsTimeout, 0.05)
            if not p.done and time.monotonic() > p.deadline:
                raise DeviceError(f"{self.name}: {p.what}: the asynchronous transfer did not complete")
        try:
            p.transfer.close()
        except Exception:                       # an already released transfer: nothing to give back
            pass
        if p.status == U.LIBUSB_TRANSFER_NO_DEVICE:
            self._call(p.what, _raise, _NoDevice("LIBUSB_TRANSFER_NO_DEVICE"))
        if p.status != U.LIBUSB_TRANSFER_COMPLETED:
            names = {v: k for k, v in vars(U).items() if k.startswith("LIBUSB_TRANSFER_")}
            cleared = ""
            if p.status == U.LIBUSB_TRANSFER_STALL:
                ep = {"bulk_out": EP_BULK_OUT, "bulk_in": EP_BULK_IN}.get(p.kind, 0)
                cleared = "; the endpoint stalled" + (self._clear_halt(ep) if ep else "")
            doing = f" while {self._doing[-1]}" if self._doing else ""
            code = _STATUS_CODES.get(p.status, -99)      # the synchronous call's libusb error for this status
            err = DeviceError(f"{self.name}: {p.what}{doing} failed: {names.get(p.status, p.status)} (libusb {code})"
                              f"{cleared}")
            err.transfer_status = p.status
            err.libusb_code = code
            err.in_flight = p.what
            raise err
        if p.actual != p.length:
            raise DeviceError(f"{self.name}: {p.what}: {p.actual} of {p.length} bytes")
        ev = self.events
        if ev is not None and len(ev) < self.max_events:
            kind = {"bulk_out": "bulk OUT", "bulk_in": "bulk IN", "control_out": "control OUT",
                    "control_in": "control IN"}[p.kind]
            ev.append((p.t0, time.perf_counter_ns(), kind, p.what, p.length))
        return p.data

    def reap(self, block: bool = False) -> None:
        """Collect the posted single TLPs sent without waiting: raise the first one's error (DeviceLost for a
        vanished device). `block`: wait for all of them (a round trip if any is still on the wire)."""
        if not self._unreaped:
            return
        if self.ctx is None:
            raise DeviceError(f"{self.name}: {len(self._unreaped)} asynchronous transfers are still to be collected "
                              f"and the controller has no libusb context left to collect them")
        with self.lock:
            if block:
                while self._unreaped:
                    self.wait(self._unreaped.pop(0))
                return
            if not self._unreaped[-1].done:
                self._call("collecting sent writes (events)", self.ctx.handleEventsTimeout, 0)
            while self._unreaped and self._unreaped[0].done:
                self.wait(self._unreaped.pop(0))

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


@dataclass
class Pending:
    """A submitted asynchronous transfer (Controller.submit / wait)."""
    what: str
    kind: str
    transfer: Any = None
    done: bool = False
    status: int = -1
    actual: int = 0
    length: int = 0
    data: bytes | None = None
    deadline: float = 0.0
    t0: int = 0                         # perf_counter_ns at submission (for the interface's event log)


# an asynchronous transfer's status -> the libusb error code a synchronous call ends with (libusb 1.0 API
# documentation: libusb_transfer_status, libusb_error; COMPLETED is no error)
_STATUS_CODES = {U.LIBUSB_TRANSFER_ERROR: U.LIBUSB_ERROR_IO, U.LIBUSB_TRANSFER_TIMED_OUT: U.LIBUSB_ERROR_TIMEOUT,
                 U.LIBUSB_TRANSFER_CANCELLED: U.LIBUSB_ERROR_INTERRUPTED, U.LIBUSB_TRANSFER_STALL: U.LIBUSB_ERROR_PIPE,
                 U.LIBUSB_TRANSFER_NO_DEVICE: U.LIBUSB_ERROR_NO_DEVICE,
                 U.LIBUSB_TRANSFER_OVERFLOW: U.LIBUSB_ERROR_OVERFLOW}


class _NoDevice(Exception):
    """A transfer that ended with LIBUSB_TRANSFER_NO_DEVICE, as the synchronous calls' error."""
    value = LIBUSB_ERROR_NO_DEVICE


def _raise(e: BaseException) -> None:
    raise e
