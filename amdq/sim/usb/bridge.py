"""The simulated ASM24xx USB-to-PCIe bridge, custom firmware: the 8051 side. Its XDATA space (registers and
the windows onto bridge memory), the 512 KiB SRAM and the sys_buf/cq_buf areas the GPU reaches at their bus
addresses, the TLP engine behind F0 (single TLPs with a completion, memory write/read streams), the F2 SRAM DMA,
F3 PCIe power and link state, the armed bulk phases, per-transfer counters and timing (timing.py) and the USB
fault injections. The PCIe hierarchy behind it is pcie.py; the libusb-like handle is handle.py.

Facts: shared/facts/usb_asm24.json through amdq.hw.usb_asm24 (requests, limits, windows, formats, codes).

Simulator choices (the sources leave them open; `not_determined` in the facts):
* A request the firmware does not take (an unknown bRequest, a bad wLength, an F0 mode 3, a stream whose
  address is not dword aligned or whose byte enables are not 0x0F, an F2 outside the SRAM or whose slot count
  does not cover it, a bulk transfer whose length differs from the armed one) is refused with a STALL
  (USBErrorPipe), as USB devices refuse requests; the arm is dropped. An E4 over 255 bytes stalls; on a USB 2.0
  High-Speed link an E4 over 64 bytes times out (the public report in the facts). Endpoint 0 also answers the
  standard GET_DESCRIPTOR (device, strings) as any USB device does.
* The TLP engine and the F2 DMA keep their arms apart (an F0 request replaces only the TLP engine's stream, an
  F2 only the DMA's); a bulk transfer takes the latest arm of its direction and spends it. So the copy-out's F2
  read stays armed across the ring and doorbell writes sent before its bulk IN.
* A bulk transfer with nothing armed is never accepted: it times out (the endpoint NAKs).
* F0 IN with no completion pending, and any non-posted TLP while the link is down, answer engine status 1
  (byte 7 non-zero: the driver's retry path). A memory read stream while the link is down times out; a write
  stream is taken and dropped. A read stream to an address no BAR decodes returns all-ones dwords (the root
  complex's answer to an Unsupported Request); a write stream there is dropped (posted).
* The F2 read stream starts when the GPU writes the release dword (cq_buf + 12, bus 0x82200C): the bridge marks
  that dword when the read is armed and sees the GPU's write as the mark being replaced.
* F3 on trains the link at once (LTSSM 0x78) and powers the GPU on cold; F3 off resets every PCIe function.
* E5 stores the low byte of wIndex; the LTSSM register is read-only.
* A transfer an injected fault fails (usb_error, usb_stall) is not carried out; it counts as failed, not as a
  transfer of its kind. A deterministic-mode GPU (AMDQ_SIM_MODE=sync) is given a slice after every transfer.
"""
from __future__ import annotations

import struct
import threading
import time
from typing import Any

import usb1

from ...hw import usb_asm24 as U
from ..inject import add_kinds
from ..memory import Arena
from .pcie import BridgeBus, Topology, Window
from .timing import LinkModel, LinkTiming

INJECT_KINDS = {"usb_unplug": "usb", "usb_stall": "usb", "usb_error": "usb", "pcie_link_fail": "usb"}
add_kinds(INJECT_KINDS)                     # known before any AMDQ_SIM_INJECT is parsed

CHIP = "ASM2464PD"
BCD_DEVICE = 0x0100                         # firmware version reported in bcdDevice (simulator choice)
PRODUCT = "custom amdq simulated bridge"
MANUFACTURER = "amdq"
_RELEASE_MARK = 0xFFFFFFFF                  # cq_buf + 12 while an F2 read waits for its release
_SPEEDS = {"super_plus": usb1.SPEED_SUPER_PLUS, "super": usb1.SPEED_SUPER, "high": usb1.SPEED_HIGH}
_BCD_USB = {"super_plus": 0x0320, "super": 0x0300, "high": 0x0200}


class Stall(Exception):
    """The firmware refuses the request (the endpoint answers STALL)."""


class NoAnswer(Exception):
    """The device never answers (the transfer times out)."""


class SimASM24Bridge:
    """One simulated bridge with a simulated GPU behind it (a SimPCIDevice on the bridge's own bus)."""

    def __init__(self, arch: str = "gfx1100", speed: str = "super_plus", timing: LinkTiming | None = None,
                 mode: str | None = None, fn: Any = None, bus_number: int = 1, address: int = 2,
                 vid_pid: tuple[int, int] = U.DRIVER_IDS[0], product: str = PRODUCT, pump: bool = True):
        self.timing = timing or (LinkTiming.for_speed(speed) if speed != "super_plus" else LinkTiming.from_env())
        self.speed = self.timing.speed
        self.model = LinkModel(self.timing)
        self.bus_number, self.address, self.vid_pid, self.product = bus_number, address, vid_pid, product
        self.lock = threading.RLock()
        # bridge memory and the bus behind the bridge
        self.mem = {name: Arena(f"bridge {name}", size) for name, (_, _, _, size) in U.WINDOWS.items()}
        self.bus = BridgeBus([Window(bus, size, name, self.mem[name]) for name, (_, _, bus, size) in U.WINDOWS.items()])
        if fn is None:
            from ..pci.device import SimPCIDevice
            fn = SimPCIDevice(arch, persist=False, mode=mode, bus=self.bus)
        self.fn = fn
        self.pcie = Topology(fn, self.bus)
        self.injector = fn.inject
        self.pump = pump
        self.xdata = bytearray(U.XDATA_SIZE)
        self.ltssm = U.LTSSM_OFF                 # the custom firmware boots with PCIe off
        self.xdata[U.XDATA_LTSSM_STATE] = self.ltssm
        self.xdata[0xC8FF] = 0x07               # silicon revision byte of newer date codes (facts: firmware_internal)
        # the bulk phases armed, per engine: the TLP engine's stream (F0 mode 1/2) and the F2 DMA's; a bulk transfer
        # takes the latest arm of its direction, so an F2 read outlives the F0 requests sent before its bulk IN
        self.arms: dict[str, tuple[str, int, int, int]] = {}      # engine -> (kind, address, bytes, sequence)
        self._ready_ns = 0                      # the link time the latest arm was taken (its control transfer done)
        self._seq = 0
        self.cpl: tuple[int, int, int, int] | None = None   # (status, data, byte count, engine) for F0 IN
        self.unplugged = False
        self.unplugged_at: float | None = None   # time.monotonic() of the unplug (for tests: how long to notice)
        self.halted: set[int] = set()            # bulk endpoints that stall until clearHalt
        self.generation = 0                      # a replug makes old handles stale
        self._extra_ns = 0                       # time the current request takes beyond the link's (F3 training)

    def __getattr__(self, name: str) -> Any:
        """What the bridge does not have is the simulated GPU function's behind it (its inject/clear aside:
        the bridge's own take the USB kinds too), so tools reach the GPU through the bridge as through SIMPCI."""
        if name.startswith("_") or name == "fn":
            raise AttributeError(name)
        return getattr(self.fn, name)

    # -- identity and info ---------------------------------------------------------------------------------
    @property
    def usb_speed(self) -> int:
        return _SPEEDS[self.speed]

    @property
    def bcd_usb(self) -> int:
        return _BCD_USB[self.speed]

    def info(self) -> dict:
        """Chip, ids, link and firmware fields, the PCIe link state and the link counters."""
        return {"chip": CHIP, "vid": self.vid_pid[0], "pid": self.vid_pid[1], "product": self.product,
                "firmware": f"{BCD_DEVICE >> 8}.{BCD_DEVICE & 0xFF:02x}", "bcd_device": BCD_DEVICE,
                "bcd_usb": self.bcd_usb, "speed": self.speed, "signalling_gbps": self.timing.signalling_gbps,
                "ltssm": self.ltssm, "pcie_up": self.ltssm == U.LTSSM_L0, "gpu": self.fn.arch,
                "name": U.DEVICE_NAME_FORMAT.format(bus=self.bus_number, address=self.address),
                "link": self.model.stats()}

    def stats(self) -> dict:
        """The link's counters and clock (timing.LinkModel.stats)."""
        return self.model.stats()

    # -- fault injection -----------------------------------------------------------------------------------
    def inject(self, kind: str, **params: Any) -> None:
        """Arm a fault: usb_unplug, usb_stall, usb_error (see amdq/sim/inject.py), or any of the GPU's."""
        self.injector(kind, **params)

    def clear(self, kind: str | None = None) -> None:
        self.injector.clear(kind)

    def _faults(self, endpoint: int, nbytes: int, request: int | None) -> None:
        """Raise what an armed injection makes of this transfer (before it is carried out)."""
        if self.unplugged:
            raise usb1.USBErrorNoDevice()
        armed = self.injector.armed
        c = self.model.counters
        done = c.control_in + c.control_out + c.bulk_in + c.bulk_out
        moved = c.bytes_in + c.bytes_out
        p = armed.get("usb_unplug")
        if p is not None:
            p.setdefault("_base", (done, moved))
            d0, b0 = p["_base"]
            if "after_bytes" in p:
                gone = moved - b0 + nbytes > int(p["after_bytes"])
            elif "after_transfers" in p:
                gone = done - d0 >= int(p["after_transfers"])
            else:
                gone = True
            if gone:
                self.unplugged = True
                self.unplugged_at = time.monotonic()
                self.arms.clear()
                raise usb1.USBErrorNoDevice()
        p = armed.get("usb_stall")
        if p is not None and int(p.get("endpoint", U.EP_BULK_IN)) == endpoint:
            p.setdefault("_base", done)
            if done - p["_base"] >= int(p.get("after_transfers", 0)):
                self.injector.take("usb_stall")
                if endpoint != U.EP_CONTROL:
                    self.halted.add(endpoint)
                raise usb1.USBErrorPipe()
        if endpoint in self.halted:
            raise usb1.USBErrorPipe()
        p = armed.get("usb_error")
        if p is not None and ("endpoint" not in p or int(p["endpoint"]) == endpoint) and \
                ("request" not in p or request == int(p["request"])):
            p.setdefault("_base", done)
            if done - p["_base"] >= int(p.get("after_transfers", 0)):
                self.injector.take("usb_error")
                err = str(p.get("error", "io")).lower()
                if err not in ("io", "timeout"):
                    raise ValueError(f"usb_error: error={err!r} (io or timeout)")
                raise usb1.USBErrorTimeout() if err == "timeout" else usb1.USBErrorIO()

    def clear_halt(self, endpoint: int) -> None:
        """CLEAR_FEATURE(ENDPOINT_HALT): a stalled bulk endpoint runs again."""
        self.halted.discard(endpoint)

    def replug(self) -> None:
        """The cable goes back in: the USB side re-initialises (the F2 DMA state is reset), old handles are
        gone; PCIe power stays as it was."""
        with self.lock:
            self.injector.clear("usb_unplug")
            self.unplugged = False
            self.arms.clear()
            self.halted.clear()
            self.generation += 1

    # -- transfers (called by the handle; each counted and timed) -------------------------------------------
    def control(self, request_type: int, request: int, value: int, index: int, data: bytes | int,
                timeout: int) -> bytes | int:
        """One control transfer: IN (data is the length) returns bytes, OUT returns the bytes sent."""
        is_in = bool(request_type & 0x80)
        n = int(data) if is_in else len(data)
        with self.lock:
            self._injected(U.EP_CONTROL, n, request, timeout)
            seq = self._seq
            try:
                if is_in:
                    out: bytes | int = self._control_in(request_type, request, value, index, n)
                    got = len(out)
                else:
                    self._control_out(request_type, request, value, index, bytes(data))
                    out = got = n
            except Stall:
                self._fail("control", "in" if is_in else "out", 0, request, None, U.EP_CONTROL)
                raise usb1.USBErrorPipe() from None
            except NoAnswer:
                self._fail("control", "in" if is_in else "out", 0, request, timeout, U.EP_CONTROL)
                raise _timeout(is_in) from None
            self.model.count("control", "in" if is_in else "out", got, request)
            extra, self._extra_ns = self._extra_ns, 0
            what = f"{U.REQUEST_NAMES.get(request, hex(request))} {value:#06x}/{index:#06x} {got} bytes"
            self.model.transfer("control", got, extra, what, U.EP_CONTROL)
            if self._seq != seq:                # it armed a data phase: the endpoint is ready once it is done
                self._ready_ns = self.model.pipe_free_ns[U.EP_CONTROL]
        self._give_gpu()
        return out

    def bulk(self, endpoint: int, data: bytes | int, timeout: int) -> bytes | int:
        """One bulk transfer on 0x02 (data: bytes) or 0x81 (data: the length)."""
        is_in = bool(endpoint & 0x80)
        n = int(data) if is_in else len(data)
        with self.lock:
            self._injected(endpoint, n, None, timeout)
            try:
                if endpoint not in (U.EP_BULK_IN, U.EP_BULK_OUT):
                    raise _NotFound()
                if is_in:
                    out: bytes | int = self._bulk_in(n, timeout)
                else:
                    self._bulk_out(bytes(data))
                    out = n
            except _NotFound:
                self.model.counters.failed += 1
                raise usb1.USBErrorNotFound() from None
            except Stall:
                self._fail("bulk", "in" if is_in else "out", 0, None, None, endpoint)
                raise usb1.USBErrorPipe() from None
            except NoAnswer:
                self._fail("bulk", "in" if is_in else "out", 0, None, timeout, endpoint)
                raise _timeout(is_in) from None
            self.model.count("bulk", "in" if is_in else "out", n)
            self.model.transfer("bulk", n, 0, f"bulk {'IN' if is_in else 'OUT'} {endpoint:#04x} {n} bytes", endpoint,
                                self._ready_ns)     # (no data moves before its arm was taken: the endpoint NAKs)
        self._give_gpu()
        return out

    def _injected(self, endpoint: int, n: int, request: int | None, timeout: int) -> None:
        """An injected fault of this transfer (raised as libusb does), counted as a failure; a timeout costs the
        host its wait."""
        try:
            self._faults(endpoint, n, request)
        except usb1.USBError as e:
            self.model.counters.failed += 1
            if isinstance(e, usb1.USBErrorTimeout):             # the host waited its timeout out
                self.model.advance(int((timeout or U.TIMEOUTS_MS["control"]) * 1e6))
            raise

    def _fail(self, kind: str, direction: str, n: int, request: int | None, timeout_ms: int | None = None,
              endpoint: int = 0) -> None:
        self.model.count(kind, direction, n, request)
        self.model.counters.failed += 1
        if timeout_ms is None:
            self.model.transfer(kind, 0, 0, "", endpoint)
        else:                                  # the host waited out its timeout (0: libusb's "forever")
            self.model.transfer(kind, 0, int((timeout_ms or U.TIMEOUTS_MS["bulk_in_stream"]) * 1e6), "", endpoint)

    def _give_gpu(self) -> None:
        """A deterministic-mode GPU advances while the link carries data (it has no thread of its own)."""
        gpu = self.fn.gpu
        if self.pump and gpu.mode != "async" and not gpu.defer:
            gpu.pump(1 << 12)

    # -- control requests ------------------------------------------------------------------------------------
    def descriptor(self, kind: int, index: int) -> bytes:
        """A standard descriptor (USB 2.0/3.x specification, chapter 9): device (1) or string (3: 0 the language
        list, 1 manufacturer, 2 product, 3 serial); empty for others."""
        if kind == 1:
            ep0 = U.MAX_PACKET_INFERRED["high" if self.speed == "high" else "super"]["ep0"]
            mps0 = ep0 if self.speed == "high" else ep0.bit_length() - 1   # SuperSpeed gives the exponent
            return struct.pack("<BBHBBBBHHHBBBB", 18, 1, self.bcd_usb, 0, 0, 0, mps0, self.vid_pid[0],
                               self.vid_pid[1], BCD_DEVICE, 1, 2, 3, 1)
        if kind == 3:
            if index == 0:
                return bytes([4, 3]) + struct.pack("<H", 0x0409)
            text = {1: MANUFACTURER, 2: self.product, 3: self.serial}.get(index)
            if text is not None:
                raw = text.encode("utf-16-le")
                return bytes([2 + len(raw), 3]) + raw
        return b""

    @property
    def serial(self) -> str:
        return f"SIM{self.bus_number:02d}{self.address:03d}"

    def _control_in(self, request_type: int, request: int, value: int, index: int, n: int) -> bytes:
        if request_type & 0x60 == 0x00 and request == 6:          # standard GET_DESCRIPTOR
            d = self.descriptor(value >> 8, value & 0xFF)
            if not d:
                raise Stall()
            return d[:n]
        if request_type & 0x60 != 0x40:
            raise Stall()                                         # only vendor requests on this interface
        if request == U.REQ_XDATA_READ:
            limit = U.E4_MAX_HIGH_SPEED if self.speed == "high" else U.E4_MAX
            if n > limit:
                if self.speed == "high":
                    raise NoAnswer()
                raise Stall()
            if n == 0 or value + n > U.XDATA_SIZE:
                raise Stall()
            return self.xdata_read(value, n)
        if request == U.REQ_TLP:
            reply = self._f0_in()
            return reply[:n]
        raise Stall()

    def _control_out(self, request_type: int, request: int, value: int, index: int, data: bytes) -> None:
        if request_type & 0x60 != 0x40:
            raise Stall()
        if request == U.REQ_XDATA_WRITE:
            if data:
                raise Stall()
            self.xdata_write(value, bytes([index & 0xFF]))
        elif request == U.REQ_TLP:
            self._f0_out(value, index, data)
        elif request == U.REQ_SRAM_DMA:
            if data:
                raise Stall()
            self._f2(value, index)
        elif request == U.REQ_PCIE_POWER:
            if data:
                raise Stall()
            self._f3(value)
        else:
            raise Stall()

    # -- XDATA -----------------------------------------------------------------------------------------------
    def _alias(self, addr: int) -> tuple[str, int, int] | None:
        """(window, offset in it, bytes left in the alias) of XDATA address `addr`, None: plain XDATA."""
        for name, (xa, span, _, _) in U.WINDOWS.items():
            if xa <= addr < xa + span:
                return name, addr - xa, xa + span - addr
        return None

    def xdata_read(self, addr: int, n: int) -> bytes:
        """`n` bytes of XDATA from `addr`; the aliases read bridge memory."""
        out = bytearray()
        while n > 0:
            a = self._alias(addr)
            if a is None:
                nxt = min([xa for xa, *_ in U.WINDOWS.values() if xa > addr] + [U.XDATA_SIZE])
                k = min(n, nxt - addr)
                out += self.xdata[addr:addr + k]
            else:
                name, off, left = a
                k = min(n, left)
                out += self.mem[name].read(off, k)
            addr, n = addr + k, n - k
        return bytes(out)

    def xdata_write(self, addr: int, data: bytes) -> None:
        a = self._alias(addr)
        if a is not None:
            self.mem[a[0]].write(a[1], data)
        elif addr != U.XDATA_LTSSM_STATE:                          # link state: read-only
            self.xdata[addr:addr + len(data)] = data

    # -- F3: PCIe power --------------------------------------------------------------------------------------
    def _f3(self, value: int) -> None:
        if value == U.PCIE_POWER_ON:
            if self.ltssm != U.LTSSM_L0:
                self.fn.power_on()                                  # the GPU powers up cold
                self.pcie.reset()
                if "pcie_link_fail" in self.injector:             # training never leaves Configuration
                    self.set_ltssm(U.LTSSM_CONFIGURATION)
                    self._extra_ns = int(self.timing.pcie_train_us * 1e3)
                    return
                self.set_ltssm(U.LTSSM_L0)
                self._extra_ns = int(self.timing.pcie_train_us * 1e3)
        elif value == U.PCIE_POWER_OFF:
            self.set_ltssm(U.LTSSM_OFF)
            self.pcie.reset()
            self.arms.pop("tlp", None)
            self.cpl = None
        else:
            raise Stall()

    def set_ltssm(self, state: int) -> None:
        """The downstream port's link training state (0x78: L0)."""
        self.ltssm = state
        self.xdata[U.XDATA_LTSSM_STATE] = state

    @property
    def link_up(self) -> bool:
        return self.ltssm == U.LTSSM_L0

    # -- F0: the TLP engine ----------------------------------------------------------------------------------
    def _f0_out(self, value: int, index: int, data: bytes) -> None:
        if len(data) != U.F0_OUT_LENGTH or index & ~U.TLP_MODE_MASK:
            raise Stall()
        mode, fmt, be = index & U.TLP_MODE_MASK, value & 0xFF, (value >> 8) & 0xFF
        lo, hi, word = struct.unpack("<III", data)
        addr = lo if fmt in (U.MRD32, U.MWR32) else hi << 32 | lo       # a 32-bit format has no upper half
        self.arms.pop("tlp", None)
        if mode == U.TLP_MODE_SINGLE:
            self.cpl = None
            self._single(fmt, be, addr, word)
        elif mode in (U.TLP_MODE_STREAM_WRITE, U.TLP_MODE_STREAM_READ):
            want = (U.MWR32, U.MWR64) if mode == U.TLP_MODE_STREAM_WRITE else (U.MRD32, U.MRD64)
            if fmt not in want or be != U.STREAM_BYTE_ENABLES or addr & 3 or word == 0:
                raise Stall()
            kind = "tlp_write" if mode == U.TLP_MODE_STREAM_WRITE else "tlp_read"
            self._arm("tlp", kind, addr, 4 * word)
        else:
            raise Stall()

    def _single(self, fmt: int, be: int, addr: int, word: int) -> None:
        name = U.FMT_TYPE_NAMES.get(fmt)
        if U.is_config(fmt):
            if be & ~0xF:
                raise Stall()
            self.model.tlp(name)
            if not self.link_up:
                self.cpl = (0, 0, 0, 1)
                return
            bus, dev, func, reg = U.decode_config_address(addr & 0xFFFFFFFF)
            if addr >> 32:
                self.cpl = (U.CPL_UR, 0, 4, 0)
                return
            if U.is_write(fmt):
                sel = U.decode_byte_enables(be)
                if sel is not None and sel[1] != 3:           # one write of the enabled bytes
                    lo, size = sel
                    status, _ = self.pcie.config(fmt, bus, dev, func, reg + lo, size,
                                                 (word >> 8 * lo) & ((1 << 8 * size) - 1))
                elif be == 0:                                 # zero-length: just routed
                    status, _ = self.pcie.config(fmt, bus, dev, func, reg, 4, None)
                else:                                         # scattered (or 3) bytes: one by one
                    status = U.CPL_SC
                    for i in range(4):
                        if be >> i & 1 and status == U.CPL_SC:
                            status, _ = self.pcie.config(fmt, bus, dev, func, reg + i, 1, (word >> 8 * i) & 0xFF)
                self.cpl = (status, 0, 4, 0)
            else:
                status, v = self.pcie.config(fmt, bus, dev, func, reg, 4, None)
                self.cpl = (status, v if status == U.CPL_SC else 0, 4, 0)
        elif fmt in (U.MRD32, U.MRD64, U.MWR32, U.MWR64):
            if be & ~0xF:
                raise Stall()
            self.model.tlp(name)
            nbytes = bin(be).count("1")
            if U.is_posted(fmt):
                if self.link_up:
                    hit = self.pcie.route_memory(addr & ~3, 4)
                    if hit is not None:
                        self.pcie.gpu.mem_write(hit[0], hit[1], struct.pack("<I", word), be)
                return
            if not self.link_up:
                self.cpl = (0, 0, 0, 1)
                return
            hit = self.pcie.route_memory(addr & ~3, 4)
            data = None if hit is None else self.pcie.gpu.mem_read(hit[0], hit[1], 4)
            if data is None:
                self.cpl = (U.CPL_UR, 0, nbytes, 0)
            else:
                self.cpl = (U.CPL_SC, struct.unpack("<I", data)[0], nbytes, 0)
        elif fmt in U.MSG or fmt in U.MSGD:
            self.model.tlp("Msg")                                      # posted; nobody here takes messages
        else:
            raise Stall()

    def _f0_in(self) -> bytes:
        cpl, self.cpl = self.cpl, None
        if cpl is None:
            return struct.pack("<IBBBB", 0, 0, 0, 0, 1)               # no completion captured
        status, data, count, engine = cpl
        return struct.pack("<IBBBB", data & 0xFFFFFFFF, status << U.CPL_STATUS_SHIFT | (count >> 8) & 0xF,
                           count & 0xFF, status, engine)

    # -- F2: the SRAM DMA ------------------------------------------------------------------------------------
    def _f2(self, value: int, index: int) -> None:
        self.arms.pop("f2", None)
        sectors, read = value & U.F2_SECTORS_MASK, bool(value & U.F2_READ)
        slot, slots = index & U.F2_SLOT_MASK, (index >> U.F2_SLOTS_SHIFT) & 0xFF
        off, n = slot * U.F2_SLOT, sectors * U.F2_SECTOR
        if sectors == 0 or off + n > U.SRAM_SIZE or slots * U.F2_SLOT < n:
            raise Stall()
        if read:
            self.mem["cq_buf"].write(U.BUS_COPYOUT_RELEASE - U.CQ_BUF_BUS, struct.pack("<I", _RELEASE_MARK))
            self._arm("f2", "f2_read", off, n)
        else:
            self._arm("f2", "f2_write", off, n)

    def _released(self) -> bool:
        return self.mem["cq_buf"].u32(U.BUS_COPYOUT_RELEASE - U.CQ_BUF_BUS) != _RELEASE_MARK

    # -- bulk data phases ------------------------------------------------------------------------------------
    def _arm(self, engine: str, kind: str, addr: int, n: int) -> None:
        self._seq += 1
        self.arms[engine] = (kind, addr, n, self._seq)

    def _take(self, direction: str) -> tuple[str, int, int] | None:
        """The latest armed phase of `direction` ("write": bulk OUT, "read": bulk IN), spent by this transfer."""
        mine = [(a[3], e) for e, a in self.arms.items() if a[0].endswith(direction)]
        if not mine:
            return None
        kind, addr, n, _ = self.arms.pop(max(mine)[1])
        return kind, addr, n

    def _bulk_out(self, data: bytes) -> None:
        arm = self._take("write")
        if arm is None:
            raise NoAnswer()
        kind, addr, n = arm
        if len(data) != n:
            raise Stall()
        if kind == "f2_write":
            self.mem["sram"].write(addr, data)
            return
        self.model.tlp("MWr stream")
        if not self.link_up:
            return
        hit = self.pcie.route_memory(addr, n)
        if hit is not None:
            self.pcie.gpu.mem_write(hit[0], hit[1], data)

    def _bulk_in(self, n: int, timeout: int) -> bytes:
        arm = self._take("read")
        if arm is None:
            raise NoAnswer()
        kind, addr, want = arm
        if n != want:
            raise Stall()
        if kind == "f2_read":
            self._wait_release(timeout)
            return self.mem["sram"].read(addr, n)
        self.model.tlp("MRd stream")
        if not self.link_up:
            raise NoAnswer()
        hit = self.pcie.route_memory(addr, n)
        data = None if hit is None else self.pcie.gpu.mem_read(hit[0], hit[1], n)
        return b"\xff" * n if data is None else data

    def _wait_release(self, timeout_ms: int) -> None:
        """Hold the F2 read stream until the GPU writes the release dword (real time: the GPU runs meanwhile)."""
        end = time.monotonic() + (timeout_ms or U.TIMEOUTS_MS["bulk_in_sram"]) / 1000
        gpu = self.fn.gpu
        t0 = time.perf_counter_ns()
        while not self._released():
            if time.monotonic() >= end:
                raise NoAnswer()                    # the arm is spent
            p = self.injector.armed.get("usb_unplug")
            if self.unplugged or p is not None and not {"after_bytes", "after_transfers"} & set(p):
                self.unplugged = True               # the cable pulled while the stream waits: the transfer ends
                self.unplugged_at = self.unplugged_at or time.monotonic()
                self.arms.clear()
                raise usb1.USBErrorNoDevice()
            self.lock.release()                     # other host threads (and the GPU's DMA) may go on
            try:
                if gpu.mode != "async" and not gpu.defer:
                    if not gpu.pump(1 << 12):
                        time.sleep(0.0002)
                else:
                    time.sleep(0.0002)
            finally:
                self.lock.acquire()
        self.model.advance(0 if self.timing.sleep else time.perf_counter_ns() - t0)

    def close(self) -> None:
        """Power the simulated GPU off (its model stops) -- unless the cable was pulled: the GPU has power of its own,
        so the bridge stays on the simulated bus with the GPU as the lost session left it, parked for the next
        `plug` of its arch (handle.py; one parked bridge per arch: an older one is powered off)."""
        if self.unplugged:
            with _parked_lock:
                old = _parked.get(self.fn.arch)
                _parked[self.fn.arch] = self
            if old is not None and old is not self:
                old.fn.close()
            return
        with _parked_lock:
            if _parked.get(self.fn.arch) is self:
                del _parked[self.fn.arch]
        self.fn.close()


# bridges whose cable was pulled while a device had them open, by arch (see SimASM24Bridge.close)
_parked: dict[str, SimASM24Bridge] = {}
_parked_lock = threading.Lock()


def take_parked(arch: str) -> SimASM24Bridge | None:
    """The parked (unplugged) bridge with a GPU of `arch`, taken off the list; None if there is none."""
    with _parked_lock:
        return _parked.pop(arch, None)


class _NotFound(Exception):
    pass


def _timeout(is_in: bool) -> usb1.USBErrorTimeout:
    e = usb1.USBErrorTimeout()
    if is_in:
        e.received = b""
    else:
        e.transferred = 0
    return e
