"""The SDMA copy queue: packet encoders (amdq.hw.sdma), ring writes that never split a packet, staging
buffers for host<->device copies, and the GPU-side waits that order the device's queues.

Ring. Read/write pointers count bytes (KFD SDMA queues). A packet never wraps: when the ring's tail is
too short for the next packet it is zero-filled (a zero dword is a one-dword NOP) and writing restarts
at 0. Submission waits for ring space (doorbelling what it has written so far) with the wait timeout.

Signals. A submission ends with FENCE(low word), FENCE(high word), TRAP(event): the 64-bit timeline
value is written low half first, so a reader that sees the halves torn sees a value below the old one
(a later wait), never one above the new one.

Waits on 64-bit values. POLL_REGMEM and PM4 WAIT_REG_MEM compare one 32-bit word (unsigned; amdq.hw.pm4
has the WAIT_REG_MEM64 opcode but no body layout, and the command processor model does not run it).
`wait_packets`/`wait_on` wait for a 64-bit value v as two polls: high word >= v>>32, then low word >=
v & 0xffffffff. The first never passes early; the second is exact while the high word equals v's, and
`Device` keeps it so: before a timeline's value crosses into the next 2^32 block it synchronizes the
device, so no wait on the old block is still pending when the high word changes. Values may therefore
pass 2^31 and 2^32 freely.

Staging. Device buffers with a copy queue have no CPU mapping. `upload` copies host bytes into GTT
staging chunks (STAGING_CHUNK bytes) and queues one COPY_LINEAR per chunk, asynchronously; staging is
recycled when the copy queue's timeline passes it, and the host waits only when more than
STAGING_LIMIT bytes are in flight. `download` queues one copy per DOWNLOAD_PIECE bytes into its own
staging buffer and copies each piece out as soon as it landed (the engine moving the next meanwhile),
straight into the caller's buffer or the new bytes object: no pass over the data beyond the two copies.
"""
from __future__ import annotations

import ctypes
import struct
from collections import deque

import numpy as np

from ..hw import sdma
from ..iface.base import hint_of, writer64
from .hwqueue import HWQueue, stuck_report
from .signal import Timeline

FUNC_GEQ = 5
POLL_FOREVER = 0xFFF
STAGING_CHUNK = 8 << 20
STAGING_LIMIT = 64 << 20
DOWNLOAD_PIECE = 8 << 20
DOWNLOAD_LIMIT = 64 << 20


class SDMAQueue(HWQueue):
    """A KFD SDMA queue: the runtime's writer side of the ring, and host<->device copies through it."""

    kind = "sdma"

    def __init__(self, dev, ring_bytes: int, timeline: Timeline):
        self.version = dev.target.ip["SDMA"][0]
        self.t = sdma.table(self.version)
        self.max_copy = dev.target.sdma_max_copy       # bytes per COPY_LINEAR / CONSTANT_FILL (tests shrink it)
        self.event = getattr(dev.iface, "signal_event", 0)
        self._staged: deque = deque()                   # (timeline value, staging allocation) of uploads
        self._staged_bytes = 0
        # the packets of every copy and signal, by precomputed plans (the same words as t.encode)
        self._copy_linear = self.t.encoder("COPY_LINEAR", "count", "src_addr", "dst_addr")
        self._fence = self.t.encoder("FENCE", "addr", "data")
        self._trap = self.t.encoder("TRAP", "int_context")
        self._signal_dw = sum(len(p) for p in self.signal(0, 0))
        # a copy that is one COPY_LINEAR, with its signal: its words in one ring write (copy_run)
        self._copy_dw = len(self._copy_linear(0, 0, 0)) + self._signal_dw
        self._copy_words = struct.Struct(f"<{self._copy_dw}I").pack_into
        super().__init__(dev, ring_bytes, timeline)

    def _open(self) -> None:
        self._open_ring("sdma")                         # wptr in bytes, monotonic
        self._limit = self.ring_dw * 4
        q = self.q                                      # what a submission touches, bound once (a reset opens anew)
        self._rmv = q.ring.cpu.mv
        self._ring_wrote = hint_of(q.ring.cpu)
        self._set_wptr, self._ring_bell = writer64(q.wptr.cpu, 0), writer64(q.doorbell, q.doorbell_off)

    # -- encoders (each returns a list of packets, a packet being a list of dwords) --------------------
    def copy(self, dst: int, src: int, nbytes: int) -> list[list[int]]:
        """COPY_LINEAR packets moving nbytes from src to dst, split at `max_copy`."""
        out, step, enc = [], self.max_copy, self._copy_linear
        for off in range(0, nbytes, step):
            n = min(step, nbytes - off)
            out.append(enc(n - 1, src + off, dst + off))
        return out

    def fill(self, dst: int, value: int, nbytes: int) -> list[list[int]]:
        """CONSTANT_FILL packets writing the 32-bit `value` over nbytes (a multiple of 4) at dst."""
        if nbytes % 4:
            raise ValueError(f"fill of {nbytes} bytes: dword fills take a multiple of 4 bytes")
        out, step = [], self.max_copy & ~3
        for off in range(0, nbytes, step):
            n = min(step, nbytes - off)
            out.append(self.t.encode("CONSTANT_FILL", fillsize=2, dst_addr=dst + off, src_data_31_0=value & 0xFFFFFFFF,
                                     count=n - 4))
        return out

    def write(self, dst: int, dwords) -> list[list[int]]:
        """WRITE_UNTILED: the given dwords, stored by the engine at dst."""
        d = [int(x) & 0xFFFFFFFF for x in dwords]
        return [self.t.encode("WRITE_UNTILED", dst_addr=dst, count=len(d) - 1, data=d)]

    def fence(self, addr: int, value: int) -> list[list[int]]:
        return [self._fence(addr, value & 0xFFFFFFFF)]

    def trap(self, ctx: int | None = None) -> list[list[int]]:
        return [self._trap(self.event if ctx is None else ctx)]

    def signal(self, addr: int, value: int) -> list[list[int]]:
        """Write the 64-bit `value` at addr (low word first) and raise the interrupt that wakes waiters (none when
        the interface's signal_event is None: it takes no interrupts for signals)."""
        return self.fence(addr, value) + self.fence(addr + 4, value >> 32) + (self.trap() if self.event is not None
                                                                              else [])

    def poll(self, addr: int, value: int, mask: int = 0xFFFFFFFF, func: int = FUNC_GEQ) -> list[list[int]]:
        """POLL_REGMEM on memory: block until (dword at addr & mask) func value."""
        return [self.t.encode("POLL_REGMEM", mem_poll=1, func=func, addr=addr, value=value & 0xFFFFFFFF, mask=mask,
                              interval=10, retry_count=POLL_FOREVER)]

    def wait_packets(self, addr: int, value: int) -> list[list[int]]:
        """Block until the 64-bit timeline at addr reaches value (see the module notes)."""
        return self.poll(addr + 4, value >> 32) + self.poll(addr, value)

    def timestamp(self, addr: int) -> list[list[int]]:
        """TIMESTAMP GET_GLOBAL: the GPU clock counter (64 bits) to addr (8-byte aligned)."""
        return [self.t.encode("TIMESTAMP_GET_GLOBAL", write_addr=addr)]

    def indirect(self, addr: int, ndw: int) -> list[list[int]]:
        """Run ndw dwords of packets at addr (an indirect buffer; it may not contain INDIRECT)."""
        return [self.t.encode("INDIRECT", ib_base=addr, ib_size=ndw)]

    # -- the ring ---------------------------------------------------------------------------------
    @property
    def rptr(self) -> int:
        return self.q.rptr.cpu.read64(0)

    def room(self, ndw: int) -> None:
        """Make sure ndw more dwords (placed anywhere, pads included) fit the ring."""
        if self.wptr + 4 * ndw > self._limit:
            self._wait_space(ndw)

    def submit(self, packets: list[list[int]]) -> None:
        """Write packets to the ring (none split by the ring's end) and ring the doorbell."""
        ring, rdw, m = self.ring, self.ring_dw, self.q.ring.cpu
        for p in packets:
            n = len(p)
            if n > rdw:
                raise ValueError(f"a {n}-dword packet does not fit the {rdw}-dword ring")
            i = (self.wptr >> 2) % rdw
            pad = rdw - i if i + n > rdw else 0
            if self.wptr + 4 * (pad + n) > self._limit:
                self._wait_space(pad + n)
            if pad:
                ring[i:] = 0
                m.wrote(4 * i, 4 * pad)
                self.wptr += 4 * pad
                i = 0
            ring[i:i + n] = p
            m.wrote(4 * i, 4 * n)
            self.wptr += 4 * n
        self._doorbell()

    def _doorbell(self) -> None:
        self._set_wptr(self.wptr)
        self._ring_bell(self.wptr)

    def _wait_space(self, ndw: int) -> None:
        # doorbell first: let the engine consume what is already there
        self.wait_space(lambda: self.rptr >= self.wptr + 4 * ndw - 4 * self.ring_dw, f"{ndw} dwords", self._doorbell)
        self._limit = self.rptr + 4 * self.ring_dw

    def describe(self) -> dict:
        """Where the queue is: the packet at the engine's read pointer, decoded."""
        rp = self.rptr
        i = (rp >> 2) % self.ring_dw

        def packet() -> str:
            try:
                p = self.t.decode(self.ring[i:i + min((self.wptr - rp) >> 2, self.ring_dw - i)], 0)
            except sdma.BadPacket as e:
                return f"undecodable packet: {e}"
            desc = ", ".join(f"{k}={v:#x}" for k, v in p.fields.items()
                             if isinstance(v, int) and k not in ("op", "sub_op"))
            return f"{p.name}({desc})"
        return stuck_report(self.name, rp, self.wptr, f"ring byte {i * 4}", packet, "the engine")

    def close(self) -> None:
        for _, a in self._staged:
            self.dev.allocator.free(a)
        self._staged.clear()
        super().close()

    def wait_on(self, timeline: Timeline, value: int) -> None:
        """Make the queue wait on the GPU until `timeline` reaches value."""
        self.submit(self.wait_packets(timeline.addr, value))

    # -- operations (each ends with a signal of the queue's timeline) ----------------------------------
    def run(self, packets: list[list[int]]) -> int:
        """Submit packets followed by the timeline signal; returns the timeline value."""
        need = sum(len(p) for p in packets) + self._signal_dw
        if need + max(map(len, packets), default=0) <= self.ring_dw:
            self.room(need + max(map(len, packets), default=0))   # ring space first: a value taken is submitted
        value = self.timeline.next()                     # the device may queue waits on other queues here
        self.submit(packets + self.signal(self.timeline.addr, value))
        return value

    def copy_run(self, dst: int, src: int, nbytes: int) -> int:
        """`run(copy(dst, src, nbytes))`: the copy and its signal; returns the timeline value. A copy of one
        COPY_LINEAR whose words fit before the ring's end (the common case) is one write of its 17 dwords."""
        n = self._copy_dw
        w = self.wptr
        i = (w >> 2) % self.ring_dw
        if nbytes > self.max_copy or i + n > self.ring_dw or w + 4 * n > self._limit:
            return self.run(self.copy(dst, src, nbytes))
        value = self.timeline.next()                     # the device may queue waits on other queues here
        if self.wptr != w:                               # (it did: the copy goes after them)
            self.submit(self.copy(dst, src, nbytes) + self.signal(self.timeline.addr, value))
            return value
        a = self.timeline.addr
        words = self._copy_linear(nbytes - 1, src, dst) + self._fence(a, value & 0xFFFFFFFF) + \
            self._fence(a + 4, value >> 32)
        if self.event is not None:
            words += self._trap(self.event)
        self._copy_words(self._rmv, 4 * i, *words)
        if self._ring_wrote is not None:
            self._ring_wrote(4 * i, 4 * n)
        self.wptr = w = w + 4 * n
        self._set_wptr(w)
        self._ring_bell(w)
        return value

    def copy_async(self, dst: int, src: int, nbytes: int) -> int:
        """Device-side copy of nbytes between GPU addresses; returns the timeline value."""
        return self.copy_run(dst, src, nbytes)

    def upload(self, dst: int, raw: memoryview) -> int:
        """Host bytes to the GPU address dst through staging buffers; returns without waiting. Each chunk is
        queued as soon as it is staged, so the engine copies one chunk while the host stages the next (numpy
        copies, which let the simulated engine's thread run meanwhile)."""
        src = np.frombuffer(memoryview(raw).cast("B"), np.uint8)
        value = self.timeline.value
        for off in range(0, len(src), STAGING_CHUNK):
            n = min(STAGING_CHUNK, len(src) - off)
            a = self._stage(n)
            np.copyto(np.frombuffer(a.cpu.mv, np.uint8, n), src[off:off + n])
            a.cpu.wrote(0, n)
            value = self.run(self.copy(dst + off, a.va, n))
            self._staged.append((value, a))
            self._staged_bytes += a.size
        return value

    def _stage(self, n: int):
        done = self.timeline.completed
        while self._staged and (self._staged[0][0] <= done or self._staged_bytes + n > STAGING_LIMIT):
            v, a = self._staged.popleft()
            if v > done:
                self.dev.wait(v, queue=self, errors=False)     # lost copies free their staging too
                done = self.timeline.completed
            self._staged_bytes -= a.size
            self.dev.allocator.free(a)
        return self.dev.allocator.alloc(n, "gtt")

    def download(self, src: int, nbytes: int, out: memoryview | None = None) -> bytes | None:
        """nbytes at the GPU address src, once every queue's earlier work has finished writing them, as bytes
        or (with `out`, a writable buffer of nbytes) into `out`. One copy per DOWNLOAD_PIECE bytes into its own
        staging buffer, all queued at once; the host copies each piece out as soon as it has landed, while the
        engine moves the next (at most DOWNLOAD_LIMIT bytes of staging at a time)."""
        dst = None if out is None else np.frombuffer(out, np.uint8)
        if dst is None:
            result, dst = _fresh_bytes(nbytes)
        pending: deque = deque()
        off = 0
        while off < nbytes or pending:
            while off < nbytes and (not pending or len(pending) * DOWNLOAD_PIECE < DOWNLOAD_LIMIT):
                n = min(DOWNLOAD_PIECE, nbytes - off)
                a = self.dev.allocator.alloc(n, "gtt")
                pending.append((off, n, a, self.run(self.copy(a.va, src + off, n))))
                off += n
            o, n, a, v = pending[0]
            self.dev.wait(v, queue=self)                # on error the staging of what is in flight stays put
            pending.popleft()
            a.cpu.refresh(0, n)
            np.copyto(dst[o:o + n], np.frombuffer(a.cpu.mv, np.uint8, n))
            self.dev.allocator.free(a)
        return result if out is None else None


_PyBytes = getattr(ctypes, "pythonapi", None)
if _PyBytes is not None:
    _PyBytes = _PyBytes.PyBytes_FromStringAndSize
    _PyBytes.restype, _PyBytes.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_ssize_t)


def _fresh_bytes(n: int) -> tuple[bytes, np.ndarray]:
    """A new bytes object of n bytes and a writable array over its storage, for filling it before anyone else
    sees it (what C code does with PyBytes_FromStringAndSize(NULL, n)): the bytes are copied once, not twice."""
    if _PyBytes is None or n == 0:
        b = bytearray(n)
        return b, np.frombuffer(b, np.uint8)            # (a bytearray where the C API is not reachable)
    b = _PyBytes(None, n)
    addr = ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value
    return b, np.ctypeslib.as_array((ctypes.c_ubyte * n).from_address(addr))
