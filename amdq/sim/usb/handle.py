"""A libusb-like view of the simulated bridge: `SimUSBContext`, `SimUSBDevice`, `SimUSBDeviceHandle` with the
method names, arguments, return values and exceptions of the `libusb1` package's USBContext, USBDevice and
USBDeviceHandle (errors are usb1.USBError subclasses carrying libusb's codes), so the driver's code runs
unchanged on either. Asynchronous transfers (`getTransfer`) take the libusb1 USBTransfer calls the driver
uses: setControl/setBulk, submit, and completion callbacks delivered by `context.handleEvents()`.
"""
from __future__ import annotations

import collections
import os
from typing import Any, Callable, Iterator

import usb1

from ...hw import usb_asm24 as U
from .bridge import BCD_DEVICE, MANUFACTURER, SimASM24Bridge, take_parked


class SimUSBDevice:
    """One enumerated device (usb1.USBDevice's calls)."""

    def __init__(self, ctx: "SimUSBContext", bridge: SimASM24Bridge):
        self.ctx, self.bridge = ctx, bridge

    def getVendorID(self) -> int:
        return self.bridge.vid_pid[0]

    def getProductID(self) -> int:
        return self.bridge.vid_pid[1]

    def getBusNumber(self) -> int:
        return self.bridge.bus_number

    def getDeviceAddress(self) -> int:
        return self.bridge.address

    def getPortNumber(self) -> int:
        return 1

    def getDeviceSpeed(self) -> int:
        """usb1.SPEED_SUPER_PLUS, SPEED_SUPER or SPEED_HIGH."""
        return self.bridge.usb_speed

    def getbcdUSB(self) -> int:
        return self.bridge.bcd_usb

    def getbcdDevice(self) -> int:
        return BCD_DEVICE

    def getMaxPacketSize0(self) -> int:
        return U.MAX_PACKET_INFERRED["high" if self.bridge.speed == "high" else "super"]["ep0"]

    def getMaxPacketSize(self, endpoint: int) -> int:
        kind = "ep0" if endpoint & 0x7F == 0 else "bulk"
        return U.MAX_PACKET_INFERRED["high" if self.bridge.speed == "high" else "super"][kind]

    def getNumConfigurations(self) -> int:
        return 1

    def getProduct(self) -> str:
        return self.bridge.product

    def getManufacturer(self) -> str:
        return MANUFACTURER

    def getSerialNumber(self) -> str:
        return self.bridge.serial

    def open(self) -> "SimUSBDeviceHandle":
        if self.bridge.unplugged:
            raise usb1.USBErrorNoDevice()
        return SimUSBDeviceHandle(self)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<SimUSBDevice {self.getBusNumber():03d}:{self.getDeviceAddress():03d} " \
               f"{self.getVendorID():04x}:{self.getProductID():04x}>"


class SimUSBDeviceHandle:
    """An open device (usb1.USBDeviceHandle's calls). Every transfer goes to the bridge, counted and timed."""

    def __init__(self, device: SimUSBDevice):
        self.device, self.bridge = device, device.bridge
        self.generation = self.bridge.generation
        self.claimed: set[int] = set()
        self.configuration = U.CONFIGURATION
        self.alt_settings: dict[int, int] = {}
        self.closed = False

    def _live(self) -> SimASM24Bridge:
        if self.closed:
            raise usb1.USBErrorNoDevice()             # libusb would crash on a closed handle; a clear error here
        if self.bridge.unplugged or self.generation != self.bridge.generation:
            raise usb1.USBErrorNoDevice()
        return self.bridge

    def getDevice(self) -> SimUSBDevice:
        return self.device

    # -- synchronous transfers -------------------------------------------------------------------------------
    def controlRead(self, request_type: int, request: int, value: int, index: int, length: int,
                    timeout: int = 0) -> bytes:
        """A control IN transfer: the data the device returned (at most `length` bytes)."""
        request_type = (request_type & ~usb1.ENDPOINT_DIR_MASK) | usb1.ENDPOINT_IN
        return self._live().control(request_type, request, value & 0xFFFF, index & 0xFFFF, int(length), timeout)

    def controlWrite(self, request_type: int, request: int, value: int, index: int, data: bytes,
                     timeout: int = 0) -> int:
        """A control OUT transfer: the number of bytes sent."""
        request_type = (request_type & ~usb1.ENDPOINT_DIR_MASK) | usb1.ENDPOINT_OUT
        return self._live().control(request_type, request, value & 0xFFFF, index & 0xFFFF, bytes(data), timeout)

    def bulkRead(self, endpoint: int, length: int, timeout: int = 0) -> bytes:
        """A bulk IN transfer of `length` bytes."""
        endpoint = (endpoint & ~usb1.ENDPOINT_DIR_MASK) | usb1.ENDPOINT_IN
        return self._live().bulk(endpoint, int(length), timeout)

    def bulkWrite(self, endpoint: int, data: bytes, timeout: int = 0) -> int:
        """A bulk OUT transfer: the number of bytes sent."""
        endpoint = (endpoint & ~usb1.ENDPOINT_DIR_MASK) | usb1.ENDPOINT_OUT
        return self._live().bulk(endpoint, bytes(data), timeout)

    # -- device set-up ----------------------------------------------------------------------------------------
    def claimInterface(self, interface: int) -> None:
        self._live()
        if interface != U.INTERFACE:
            raise usb1.USBErrorNotFound()
        self.claimed.add(interface)

    def releaseInterface(self, interface: int) -> None:
        self._live()
        if interface not in self.claimed:
            raise usb1.USBErrorNotFound()
        self.claimed.discard(interface)

    def setConfiguration(self, configuration: int) -> None:
        self._live()
        if configuration != U.CONFIGURATION:
            raise usb1.USBErrorNotFound()
        self.configuration = configuration

    def getConfiguration(self) -> int:
        self._live()
        return self.configuration

    def setInterfaceAltSetting(self, interface: int, alt_setting: int) -> None:
        self._live()
        if interface not in self.claimed:
            raise usb1.USBErrorNotFound()
        if alt_setting != U.ALT_SETTING:
            raise usb1.USBErrorNotFound()
        self.alt_settings[interface] = alt_setting

    def kernelDriverActive(self, interface: int) -> bool:
        self._live()
        return False

    def detachKernelDriver(self, interface: int) -> None:
        self._live()
        raise usb1.USBErrorNotFound()                  # libusb: no driver bound

    def attachKernelDriver(self, interface: int) -> None:
        self._live()
        raise usb1.USBErrorNotFound()

    def setAutoDetachKernelDriver(self, enable: bool) -> None:
        self._live()

    def resetDevice(self) -> None:
        """A USB port reset: the bridge's USB side re-initialises (no replug of the PCIe side)."""
        b = self._live()
        with b.lock:
            b.arms.clear()
            b.halted.clear()

    def clearHalt(self, endpoint: int) -> None:
        self._live().clear_halt(endpoint)

    def getProduct(self) -> str | None:
        """iProduct (string descriptor 2), read from the device as libusb does."""
        return self.getASCIIStringDescriptor(2)

    def getManufacturer(self) -> str | None:
        return self.getASCIIStringDescriptor(1)

    def getSerialNumber(self) -> str | None:
        return self.getASCIIStringDescriptor(3)

    def getASCIIStringDescriptor(self, descriptor: int) -> str | None:
        """String descriptor `descriptor` read over endpoint 0 (a GET_DESCRIPTOR, counted), None if absent."""
        try:
            raw = self.controlRead(0x80, 6, 3 << 8 | descriptor, 0x0409, 255, 1000)
        except usb1.USBErrorPipe:
            return None
        return raw[2:raw[0]].decode("utf-16-le").encode("ascii", "replace").decode()

    def getTransfer(self, iso_packets: int = 0) -> "SimUSBTransfer":
        self._live()
        return SimUSBTransfer(self)

    def close(self) -> None:
        self.claimed.clear()
        self.closed = True

    def __enter__(self) -> "SimUSBDeviceHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SimUSBTransfer:
    """An asynchronous transfer (usb1.USBTransfer's calls the driver needs). `submit` puts it on the simulated
    link at once (endpoint 0 and each bulk endpoint complete in submission order, as the driver relies on) and
    the callback runs from the context's handleEvents, with the status libusb would give."""

    def __init__(self, handle: SimUSBDeviceHandle):
        self.handle = handle
        self.kind: str | None = None
        self.callback: Callable[["SimUSBTransfer"], Any] | None = None
        self.user_data: Any = None
        self.timeout = 0
        self.status = usb1.TRANSFER_COMPLETED
        self.buffer = bytearray()
        self.actual = 0
        self.submitted = False
        self.done_ns = 0

    def setControl(self, request_type: int, request: int, value: int, index: int, buffer_or_len: Any,
                   callback: Callable | None = None, user_data: Any = None, timeout: int = 0) -> None:
        """As usb1: an int length for an IN transfer, the data for an OUT one (no setup packet in front)."""
        self.kind = "control"
        self.setup = (request_type, request, value, index)
        self.buffer = bytearray(buffer_or_len) if not isinstance(buffer_or_len, int) else bytearray(buffer_or_len)
        self.out = not isinstance(buffer_or_len, int) and not request_type & 0x80
        self.callback, self.user_data, self.timeout = callback, user_data, timeout

    def setBulk(self, endpoint: int, buffer_or_len: Any, callback: Callable | None = None, user_data: Any = None,
                timeout: int = 0) -> None:
        self.kind = "bulk"
        self.endpoint = endpoint
        self.buffer = bytearray(buffer_or_len) if not isinstance(buffer_or_len, int) else bytearray(buffer_or_len)
        self.out = not endpoint & 0x80
        self.callback, self.user_data, self.timeout = callback, user_data, timeout

    def getStatus(self) -> int:
        return self.status

    def getActualLength(self) -> int:
        return self.actual

    def getBuffer(self) -> bytearray:
        return self.buffer

    def getUserData(self) -> Any:
        return self.user_data

    def isSubmitted(self) -> bool:
        return self.submitted

    def submit(self) -> None:
        """Carry the transfer out on the simulated bridge; its completion waits for handleEvents."""
        if self.submitted:
            raise usb1.USBErrorBusy()
        h = self.handle
        b = h._live()
        model = b.model
        t_before, trips = model.clock_ns, model.counters.waits
        self.submitted = True
        try:
            if self.kind == "control":
                rt, rq, v, i = self.setup
                if self.out:
                    self.actual = b.control(rt & 0x7F, rq, v, i, bytes(self.buffer), self.timeout)
                else:
                    got = b.control(rt | 0x80, rq, v, i, len(self.buffer), self.timeout)
                    self.buffer[:len(got)] = got
                    self.actual = len(got)
            elif self.kind == "bulk":
                if self.out:
                    self.actual = b.bulk(self.endpoint & 0x7F, bytes(self.buffer), self.timeout)
                else:
                    got = b.bulk(self.endpoint | 0x80, len(self.buffer), self.timeout)
                    self.buffer[:len(got)] = got
                    self.actual = len(got)
            else:
                raise usb1.USBErrorInvalidParam()
            self.status = usb1.TRANSFER_COMPLETED
        except usb1.USBErrorNoDevice:
            self.status = usb1.TRANSFER_NO_DEVICE
        except usb1.USBErrorPipe:
            self.status = usb1.TRANSFER_STALL
        except usb1.USBErrorTimeout:
            self.status = usb1.TRANSFER_TIMED_OUT
        except usb1.USBErrorIO:
            self.status = usb1.TRANSFER_ERROR
        # the synchronous path waited for it: give the host its time back, the link keeps it busy
        self.done_ns = model.clock_ns
        with model._lock:
            model.clock_ns = t_before
            model.counters.waits = trips
        h.device.ctx._pending.append(self)

    def cancel(self) -> None:
        """Too late, always: a simulated transfer is carried out when submitted (libusb: LIBUSB_ERROR_NOT_FOUND
        for a transfer that is not in flight); its callback still runs."""
        raise usb1.USBErrorNotFound()

    def close(self) -> None:
        if self.submitted:
            raise ValueError("cannot close a submitted transfer")


class SimUSBContext:
    """usb1.USBContext's calls over simulated bridges (one, made for `arch`, unless `bridges` are given)."""

    def __init__(self, bridges: list[SimASM24Bridge] | None = None, arch: str = "gfx1100", own: bool | None = None,
                 **bridge_kw: Any):
        self.bridges = list(bridges) if bridges is not None else [SimASM24Bridge(arch, **bridge_kw)]
        self._pending: collections.deque[SimUSBTransfer] = collections.deque()
        self._own = bridges is None if own is None else own

    @property
    def bridge(self) -> SimASM24Bridge:
        """The first bridge (the one a default context made)."""
        return self.bridges[0]

    def getDeviceIterator(self, skip_on_error: bool = False) -> Iterator[SimUSBDevice]:
        for b in self.bridges:
            if not b.unplugged:
                yield SimUSBDevice(self, b)

    def getDeviceList(self, skip_on_access_error: bool = False, skip_on_error: bool = False) -> list[SimUSBDevice]:
        return list(self.getDeviceIterator())

    def getByVendorIDAndProductID(self, vendor_id: int, product_id: int, skip_on_access_error: bool = False,
                                  skip_on_error: bool = False) -> SimUSBDevice | None:
        for d in self.getDeviceIterator():
            if d.getVendorID() == vendor_id and d.getProductID() == product_id:
                return d
        return None

    def openByVendorIDAndProductID(self, vendor_id: int, product_id: int, skip_on_access_error: bool = False,
                                   skip_on_error: bool = False) -> SimUSBDeviceHandle | None:
        d = self.getByVendorIDAndProductID(vendor_id, product_id)
        return None if d is None else d.open()

    def handleEvents(self) -> None:
        """Wait for the next submitted transfer to complete (the host clock moves to its end) and run the callback
        of every transfer done by then, in completion order (libusb's event handling)."""
        self._complete(block=True)

    def handleEventsTimeout(self, tv: float = 0) -> None:
        """As handleEvents; with `tv` 0 it does not wait: only transfers already done complete."""
        self._complete(block=bool(tv))

    def _complete(self, block: bool) -> None:
        if not self._pending:
            return
        clock = lambda t: t.handle.bridge.model.clock_ns           # noqa: E731  (each bridge has its own clock)
        soonest = min(self._pending, key=lambda t: t.done_ns - clock(t))
        if soonest.done_ns > clock(soonest):
            if not block:
                return
            soonest.handle.bridge.model.wait(soonest.done_ns)
        done = sorted((t for t in self._pending if t.done_ns <= clock(t)), key=lambda t: t.done_ns)
        for t in done:
            self._pending.remove(t)
            t.submitted = False
            if t.callback is not None:
                t.callback(t)

    def open(self) -> "SimUSBContext":
        return self

    def close(self) -> None:
        """Close the context; bridges it made power their GPU off."""
        if self._own:
            for b in self.bridges:
                b.close()
        self.bridges = []

    def __enter__(self) -> "SimUSBContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def plug(arch: str = "gfx1100") -> SimUSBContext:
    """A context with the bridge SIMUSB+AMD:`arch` opens: the one whose cable was pulled in this process, plugged
    back in (its GPU as the lost session left it: powered, its session unclean), else a new one (a cold GPU).
    The context owns the bridge (closing it powers the GPU off, unless the cable is pulled again)."""
    b = take_parked(arch)
    if b is not None and b.fn.gpu.mode != (os.environ.get("AMDQ_SIM_MODE") or "async"):
        b.fn.close()                        # another simulator mode is asked for: that GPU is not the one
        b = None
    if b is None:
        return SimUSBContext(arch=arch)
    b.replug()
    return SimUSBContext([b], own=True)
