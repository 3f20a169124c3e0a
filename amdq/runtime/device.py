"""A device: one GPU reached through an interface, with its allocator, queue, timeline and programs."""
from __future__ import annotations

import bisect
import itertools
import logging
import os
import struct
import sys
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..codeobj import bundle as cobundle
from ..codeobj import cache as cocache
from ..errors import (AmdqError, DeviceClosed, DeviceError, DeviceLost, GPUFault, GPUTimeout, InvalidArgument,
                      OutOfMemory, UnsupportedTarget)
from ..hw import aql as A
from ..hw.targets import TARGETS, Target, get_target
from ..iface.base import hint_of, ring_bytes
from ..iface.exceptions import to_error
from . import array as arrays
from .aql_queue import TS_AT, AQLQueue
from .hwqueue import HWQueue
from .memory import Allocator, Buffer
from .codemem import LoadedCode
from .hostmem import PIN_MIN, HostPins, host_address
from .pm4_queue import PM4Queue
from .program import Launch, LaunchRecord, Program
from .program import _clock as _now, _new
from .sdma_queue import SDMAQueue
from .signal import Timeline, default_timeout_ms

log = logging.getLogger(__name__)
_said_sim = False
_serial = itertools.count(1)


def parse_spec(spec: str | None) -> tuple[str | None, str | None]:
    """`[IFACE+]AMD[:ARCH]` or `SIM[:ARCH]` -> (interface or None for automatic, arch or None)."""
    spec = (spec if spec is not None else os.environ.get("DEV", "AMD")).strip()
    head, _, arch = spec.partition(":")
    arch = arch.strip().lower() or None
    parts = [p.strip().upper() for p in head.split("+")]
    if parts == ["SIM"]:
        return "SIMKFD", arch
    if parts[-1] != "AMD" or len(parts) > 2:
        raise DeviceError(f"bad device spec {spec!r}: use [KFD|PCI|USB|SIMKFD|SIMPCI|SIMUSB+]AMD[:ARCH] or SIM[:ARCH]")
    iface = parts[0] if len(parts) == 2 else None
    if iface not in (None, "KFD", "PCI", "USB", "SIMKFD", "SIMPCI", "SIMUSB"):
        raise DeviceError(f"unknown interface {iface!r} in {spec!r}")
    if arch is not None:
        get_target(arch)
    return iface, arch


def _open_iface(iface: str | None, arch: str | None):
    global _said_sim
    from ..iface.kfd import KFD, list_gpus
    from ..iface.os_seam import OSSeam
    if iface in (None, "KFD"):
        seam = OSSeam()
        if seam.exists("/dev/kfd") and list_gpus(seam):
            return KFD(seam, arch), None
        if iface == "KFD":
            raise DeviceError("KFD requested but /dev/kfd has no GPU (is the amdgpu driver loaded?)")
    if iface in (None, "PCI"):
        from ..iface import pci
        if iface == "PCI" or pci.usable(pci.list_functions()):
            return pci.open_real(arch), None
    if iface in (None, "USB"):
        from ..iface import usb
        if iface == "USB" or usb.present():
            return usb.open_real(arch), None
    if iface == "SIMPCI":
        from ..iface.pci import PCI
        from ..sim.pci.device import SimPCIDevice
        sim = SimPCIDevice(arch or "gfx1100", small_bar=os.environ.get("AMDQ_SIM_SMALL_BAR", "0") not in ("", "0"))
        try:
            return PCI(sim, arch, standin=None), sim
        except BaseException:
            sim.close()
            raise
    if iface == "SIMUSB":
        from ..iface import usb
        from ..sim.usb import plug
        ctx = plug(arch or "gfx1100")                   # a bridge unplugged in this process comes back
        try:
            return usb.open_usb(ctx, arch, standin=None), ctx.bridge
        except BaseException:
            ctx.close()
            raise
    if iface is None and not _said_sim:
        print("amdq: no AMD GPU found, using the simulated GPU (DEV=SIM to choose it explicitly)", file=sys.stderr)
        _said_sim = True
    from ..sim.gpu import SimGPU
    from ..sim.kfd import SimKFD
    gpu = SimGPU(arch or "gfx1100")
    return KFD(SimKFD(gpu), arch or "gfx1100"), gpu


def use_aql(target: Target) -> bool:
    """AMD_AQL=1: the compute queue speaks AQL; AMD_AQL=0: PM4; unset: AQL on multi-die targets (gfx942, gfx950)."""
    v = os.environ.get("AMD_AQL", "").strip()
    return target.xcc > 1 if v == "" else v != "0"


@dataclass
class Scratch:
    """The queue scratch: `waves` wave slots of `wave_bytes` per XCC (COMPUTE_TMPRING_SIZE describes one XCC's
    share), `xcc` shares one after another from `base`."""
    alloc: object
    base: int
    lane_bytes: int
    wave_bytes: int
    waves: int
    tmpring: int
    xcc: int = 1

    @property
    def share(self) -> int:
        """Bytes of one XCC's share."""
        return self.wave_bytes * self.waves


class Kernargs:
    """A ring of kernel-argument space in host-visible memory, recycled as the timeline advances."""

    def __init__(self, dev, size: int = 1 << 22):
        self.dev, self.size = dev, size
        self.alloc = dev.allocator.alloc(size, "gtt")
        self.mv, self.cpu, self.va = self.alloc.cpu.mv, self.alloc.cpu, self.alloc.va
        self.hint = hint_of(self.cpu)               # cpu.wrote, or None where it does nothing (the launch path)
        self.head = 0

    def take(self, nbytes: int) -> tuple[int, int]:
        """(GPU address, offset) of `nbytes` fresh bytes."""
        need = (nbytes + 63) & ~63
        if need > self.size:
            raise InvalidArgument(f"{nbytes} bytes of kernel arguments exceed the {self.size}-byte kernel-argument ring")
        if self.head + need > self.size:
            self.dev.drain()                        # everything older is done (or lost): start over
            self.head = 0
        off = self.head
        self.head += need
        return self.alloc.va + off, off

    def push(self, blob: bytes, extra: int = 0) -> int:
        addr, off = self.take(len(blob) + extra)
        self.mv[off:off + len(blob)] = blob
        self.wrote(off, len(blob))
        return addr

    def wrote(self, off: int, n: int) -> None:
        """The CPU wrote [off, off + n) of the ring (the interface's coherence hint, base.Mapping.wrote)."""
        self.alloc.cpu.wrote(off, n)

    def read(self, addr: int, n: int) -> bytes:
        off = addr - self.alloc.va
        return bytes(self.mv[off:off + n])

    def write(self, addr: int, data: bytes) -> None:
        off = addr - self.alloc.va
        self.mv[off:off + len(data)] = data
        self.wrote(off, len(data))


class Submitting:
    """Around one submission to a queue, under the device lock: if it fails before its work reached the
    GPU, the timeline value it took is given back, and a queue that timed out on ring space is recovered.
    (A class, not a generator context manager: it is on every launch's path.)"""

    __slots__ = ("dev", "q", "mark")

    def __init__(self, dev: "Device", q: HWQueue):
        self.dev, self.q = dev, q

    def __enter__(self) -> None:
        dev = self.dev
        dev.lock.acquire()
        if dev.closed:
            dev.lock.release()
            dev._check()
        self.mark = self.q.timeline.value

    def __exit__(self, typ, e, tb) -> None:
        try:
            if typ is GPUTimeout:
                self.failed(self.dev, self.q, self.mark, e)
        finally:
            self.dev.lock.release()

    @staticmethod
    def failed(dev: "Device", q: HWQueue, mark: int, e: GPUTimeout) -> None:
        if e.info.get("ring_space"):
            q.timeline.value = mark                     # nothing of it runs: the value was not submitted
            dev._recover(q, e)


MEMORY_KINDS = ("vram", "gtt")
TS_SLOTS = 8192                 # timestamp slots of timed launches and copies, reused round robin
# A slot is an amd_signal_t whose start_ts/end_ts are the two timestamps: a timed AQL dispatch names it as its
# completion signal (the table zeroed when the device's first AQL queue opens: no event mailbox) and the packet
# processor writes them (the queue has profiling enabled); a PM4 launch or a copy writes them with its own timestamp
# packets.
TS_SLOT = A.AMD_SIGNAL.size                # (TS_AT: where in it the two timestamps are, aql_queue.py)
NEAR = 1 << 20                  # a faulting address this close to an allocation is named relative to it


class Device:
    """One GPU. Safe to use from several threads: submissions, allocations and recovery take `lock`;
    waits sleep outside it."""

    def __init__(self, spec: str | None = None):
        iface_name, arch = parse_spec(spec)
        self.iface, self.sim = _open_iface(iface_name, arch)
        try:
            self._setup(arch)
        except BaseException:                   # (a GPU lost while the queues are made): nothing stays open
            try:
                self.iface.close()
            except Exception as e:              # the setup's error is the one to report
                log.debug("closing the interface of a device that failed to open: %s", e)
            finally:
                if self.sim is not None:
                    self.sim.close()
            raise

    def _setup(self, arch: str | None) -> None:
        self.arch = self.iface.arch
        if self.arch not in TARGETS:
            raise UnsupportedTarget(f"GPU {self.arch} is not supported: amdq supports {', '.join(TARGETS)}")
        if arch and arch != self.arch:
            raise UnsupportedTarget(f"asked for {arch}, the device is {self.arch}")
        self.target: Target = get_target(self.arch)
        self.uid = next(_serial)                     # never reused, unlike id(): keys the program cache
        self.name = f"{'SIM' if self.sim else ''}{self.iface.name}+AMD:{self.arch}"
        self.closed = False
        self.lock = threading.RLock()
        if not getattr(self.iface, "has_queues", True):  # booted, but no queues on this interface yet (AM part 1)
            self.queue, self.queues, self.copyq, self.scratch, self.profiler, self.capturing = None, [], None, None, None, None
            self.pins = None
            return
        self._kernel_names: dict[int, str] = {}          # entry and descriptor addresses -> kernel name
        self.allocator = Allocator(self.iface)
        self.signals = self.allocator.alloc(4096, "gtt", uncached=True)   # 16-byte timeline slots, one per queue
        self._slots = 0
        self._moves = [0]                                # values handed out by all timelines (Timeline.moves)
        self.ts_alloc = self.allocator.alloc(TS_SLOT * TS_SLOTS, "gtt", uncached=True)   # GPU timestamps of timed work
        self.ts_signals = False                          # the slots zeroed as AQL completion signals (AQLQueue._open)
        self._ts_next = 0                                # timestamp slots taken so far
        self._grew: tuple[int, float, float] | None = None     # memory growth not yet reported in a record
        self.queues: list = []
        self._queue_of: dict[int, object] = {}
        self.queue: HWQueue = (AQLQueue if use_aql(self.target) else PM4Queue)(
            self, int(os.environ.get("AMDQ_RING_BYTES") or ring_bytes(self.iface, "compute")), self.new_timeline())
        self.queues.append(self.queue)
        self.copyq: SDMAQueue | None = None             # None: buffers stay CPU-visible and copies use the CPU
        self._waited: dict = {}                          # (queue, other queue) -> other's value already waited for
        if os.environ.get("AMD_DISABLE_SDMA", "0") in ("", "0"):
            try:
                self.copyq = SDMAQueue(self, int(os.environ.get("AMDQ_SDMA_RING_BYTES") or ring_bytes(self.iface, "sdma")),
                                       self.new_timeline())
                self.queues.append(self.copyq)
            except (OSError, OutOfMemory) as e:                # the kernel refused (ENOMEM arrives as OutOfMemory)
                log.debug("no SDMA copy queue (%s): copies go through the CPU", e)
        self.pins = HostPins(self.iface, self.copyq) if self.copyq is not None else None   # host pages for SDMA
        self.kernargs = Kernargs(self)
        self.scratch: Scratch | None = None
        self.profiler = None
        self.capturing = None
        # memory freed while the GPU may still use it: (timeline marks, allocation). Appended without the device lock
        # (finalizers append to it, and a collection may run on any thread, the simulated GPU's worker while it holds
        # the GPU's lock among them: taking the device lock there deadlocks against a reset holding it); deque
        # appends and pops are atomic, so _reclaim under the lock takes only what was there when it started
        self._pending_free: deque[tuple[tuple, object]] = deque()
        self._codes: weakref.WeakSet = weakref.WeakSet()      # LoadedCode of this device, freed at close
        self._clock = self._measure_clock()

    def __repr__(self) -> str:
        return f"<Device {self.name}>"

    @property
    def xcc(self) -> int:
        """Compute dies (XCCs) of the device's partition, as the kernel driver's topology reports them."""
        n = getattr(self.iface, "num_xcc", None)
        return int(n) if n else self.target.xcc

    def _queues(self, what: str) -> None:
        """Raise if this device has no queues (an interface without them yet)."""
        self._check()
        if self.queue is None:
            from ..iface.pci import NOT_YET
            raise DeviceError(f"{self.name}: {what}: {NOT_YET}")

    def info(self) -> dict:
        """What the device reports about itself: target, compute dies, compute units, wave size, memory."""
        if self.queue is None:
            t = self.target
            return {"name": self.name, "arch": self.arch, "family": t.family, "num_xcc": self.xcc,
                    "compute_units": t.cus, "cus_per_xcc": t.cus // self.xcc, "wave_size": t.wave_size,
                    "lds_bytes": t.lds_bytes, "queue": None, **self.iface.info()}
        props = getattr(self.iface, "props", {}) or {}
        t, n = self.target, self.xcc
        simds, per_cu = props.get("simd_count"), props.get("simd_per_cu")
        cus = simds // per_cu if simds and per_cu else t.cus
        return {"name": self.name, "arch": self.arch, "family": t.family, "num_xcc": n, "compute_units": cus,
                "cus_per_xcc": cus // n, "shader_engines": props.get("array_count", t.ses * t.gen.arrays_per_se)
                // max(1, props.get("simd_arrays_per_engine", t.gen.arrays_per_se)),
                "wave_size": props.get("wave_front_size", t.wave_size),
                "lds_bytes": props.get("lds_size_in_kb", t.lds_bytes // 1024) * 1024,
                "vram_bytes": props.get("local_mem_size", t.vram_bytes), "queue": self.queue.kind,
                **(self.iface.info() if hasattr(self.iface, "info") else {})}      # AM: boot, firmware, clocks ...

    def new_timeline(self) -> Timeline:
        """A timeline in the next free signal slot (AMDQ_TIMELINE_START sets where values begin)."""
        t = Timeline(self.signals, self._slots, int(os.environ.get("AMDQ_TIMELINE_START", "0")),
                     before=self._before_signal, moves=self._moves)
        self._slots += 1
        return t

    def _before_signal(self, t: Timeline) -> None:
        """Called before a queue takes its next timeline value (that is, before it submits work): the queue
        first waits, on the GPU, for every other queue's outstanding work, so no copy or kernel can see
        memory another queue has not finished with. Before a value crosses into a new 2^32 block the
        device synchronizes, which keeps the two-word 32-bit waits exact (see amdq.runtime.copy)."""
        queues = self.queues
        if len(queues) < 2:
            t.ordered = self._moves[0] - t.value
            return
        if not (t.value + 1) & 0xFFFFFFFF:
            self.synchronize()
        if t.ordered == self._moves[0] - t.value:
            return                                      # no other timeline moved since everything was ordered
        q = self._queue_of.get(id(t))
        if q is None:
            q = self._queue_of[id(t)] = next((x for x in queues if x.timeline is t), None)
        waited = self._waited
        for o in queues:
            if o is q:
                continue
            ot = o.timeline
            key = (id(q), id(o))
            if ot.value <= waited.get(key, -1) or ot.completed >= ot.value:
                continue
            if q is None:
                self.wait(ot.value, queue=o, errors=False)
            else:
                q.depends(o, ot.value)
                q.wait_on(ot, ot.value)
            waited[key] = ot.value
        t.ordered = self._moves[0] - t.value

    @property
    def timeline(self) -> Timeline:
        """The compute queue's timeline."""
        return self.queue.timeline

    def _marks(self) -> tuple:
        return tuple((q.timeline, q.timeline.value) for q in self.queues)

    @property
    def idle(self) -> bool:
        """Whether every queue has completed everything submitted to it."""
        return all(q.timeline.completed >= q.timeline.value for q in self.queues)

    # -- clocks --------------------------------------------------------------------------------
    def _measure_clock(self) -> tuple[int, int, int]:
        """(GPU counter, host ns, GPU frequency) at one instant, to convert GPU timestamps to host time."""
        best = None
        for _ in range(3):
            t0 = time.perf_counter_ns()
            gpu, _cpu, _freq = self.iface.clock_counters()
            t1 = time.perf_counter_ns()
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, gpu, (t0 + t1) // 2)
        freq = 100_000_000
        return best[1], best[2], freq

    def gpu_to_host(self, ticks: int) -> float:
        """Host seconds (perf_counter) of a GPU clock value."""
        g0, h0, f = self._clock
        return (h0 + (ticks - g0) * 1e9 / f) / 1e9

    # -- memory --------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.closed:
            raise DeviceClosed(f"{self.name} is closed: open a new device")

    def alloc(self, nbytes: int, kind: str = "vram") -> Buffer:
        """A buffer of nbytes in device memory ("vram") or GPU-visible host memory ("gtt")."""
        if self.queue is None:
            self._queues("alloc")
        if isinstance(nbytes, np.integer):
            nbytes = int(nbytes)
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
            raise InvalidArgument(f"alloc needs a positive byte count, got {nbytes!r}")
        if kind not in MEMORY_KINDS:
            raise InvalidArgument(f"unknown memory kind {kind!r}: use one of {', '.join(MEMORY_KINDS)}")
        with self.lock:
            self._check()
            self._reclaim()
            cpu = not (kind == "vram" and self.copyq is not None)   # device memory without CPU mapping: SDMA moves it
            a = self.allocator.alloc(nbytes, kind, **({} if cpu else {"cpu": False}))
            a.meta["nbytes"] = nbytes
            return Buffer(self, a, nbytes)

    def upload(self, arr) -> Buffer:
        """A buffer holding a copy of the array (numeric dtypes; bytes-like objects as bytes)."""
        arr = np.ascontiguousarray(arr)
        if arr.dtype.hasobject:
            raise InvalidArgument(f"cannot upload an array of dtype {arr.dtype}: it holds Python object pointers, "
                                  f"not data; convert it to a numeric dtype first")
        b = self.alloc(max(arr.nbytes, 1))
        b.write(arr)
        return b

    def memory_stats(self) -> dict[str, dict[str, int]]:
        """Bytes of device memory per kind ("vram", "gtt", ...) as the allocator sees them: `live` (handed out:
        buffers, arrays, programs, scratch, the runtime's rings and arguments), `cached` (freed, kept for
        reuse), `peak` (the most live at once since the device opened or `reset_peak_memory()`)."""
        self._check()
        if self.queue is None:
            return {}
        with self.lock:
            self._reclaim()
            out = self.allocator.stats()
        for k in MEMORY_KINDS:
            out.setdefault(k, {"live": 0, "cached": 0, "peak": 0})
        return out

    def reset_peak_memory(self) -> None:
        """Start the `peak` of memory_stats() over at what is live now (to measure one phase, e.g. a model
        switch or the first large kernel, on its own)."""
        self._check()
        if self.queue is not None:
            with self.lock:
                self.allocator.reset_peak()

    def array(self, host, dtype=None) -> "arrays.Array":
        """A typed device array (amdq.Array) holding a copy of a host array: dtype and shape kept."""
        return arrays.from_host(self, host, dtype)

    def empty(self, shape, dtype=np.float32) -> "arrays.Array":
        """A typed device array of `shape` and `dtype`, contents undefined."""
        return arrays.empty(self, shape, dtype)

    def zeros(self, shape, dtype=np.float32) -> "arrays.Array":
        """A typed device array of `shape` and `dtype`, filled with zeros."""
        return arrays.zeros(self, shape, dtype)

    def _copy_in(self, buf: Buffer, off: int, raw: memoryview) -> None:
        if self.capturing is not None:
            raise RuntimeError("Buffer.write inside a capture: host transfers are not part of a graph; "
                               "write before capturing or use dev.copy between device buffers")
        with self.lock:
            self._check()
            bridge = getattr(self.iface, "copy_in", None)     # an interface with its own copy path (USB)
            if bridge is not None:
                if not self.idle:
                    self.drain()
                bridge(buf.alloc, off, raw, self.copyq)
                return
            if buf.alloc.cpu is None:
                # one pass from the caller's pages when nothing is in flight (the copy is waited for, so the caller
                # may change them once write returns); else through GTT staging, asynchronously
                if raw.nbytes >= PIN_MIN and self.idle and self._pinned_copy(buf.addr + off, raw, to_host=False):
                    return
                with self.submitting(self.copyq):
                    self.copyq.upload(buf.addr + off, raw)
                return
            if not self.idle:
                self.drain()
            buf.alloc.cpu.mv[off:off + raw.nbytes] = raw
            buf.alloc.cpu.wrote(off, raw.nbytes)

    def _copy_out(self, buf: Buffer, off: int, size: int, out: memoryview | None = None) -> bytes | None:
        """`size` bytes of buf at `off`: as new bytes, or into `out` (a writable byte view of `size` bytes)."""
        if self.capturing is not None:
            raise RuntimeError("Buffer.read inside a capture: nothing has run yet")
        with self.lock:
            self._check()
            bridge = getattr(self.iface, "copy_out", None)
            if bridge is not None:
                if not self.idle:
                    self.drain()
                data = bridge(buf.alloc, off, size, self.copyq)
                if out is None:
                    return data
                out[:size] = data
                return None
            if buf.alloc.cpu is None:                          # into the caller's pages, else through staging; waits
                if size >= PIN_MIN and out is not None and self._pinned_copy(buf.addr + off, out, to_host=True):
                    return None
                with self.submitting(self.copyq):
                    return self.copyq.download(buf.addr + off, size, out)
            if not self.idle:
                self.drain()
            buf.alloc.cpu.refresh(off, size)
            if out is None:
                return bytes(buf.alloc.cpu.mv[off:off + size])
            out[:size] = buf.alloc.cpu.mv[off:off + size]
            return None

    def _pinned_copy(self, addr: int, host: memoryview, to_host: bool) -> bool:
        """One SDMA copy between the GPU address `addr` and the caller's memory `host`, pinned for it (hostmem.py),
        waited for; False (nothing done) where the interface cannot pin it."""
        pin = self.pins.register(host, write=to_host)
        if pin is None:
            return False
        q, n, mine = self.copyq, host.nbytes, pin.gpu(host_address(host))
        with self.submitting(q):
            value = q.copy_run(mine, addr, n) if to_host else q.copy_run(addr, mine, n)
        q.note(value, f"copy of {n} bytes {'into' if to_host else 'from'} pinned host memory at {pin.start:#x}")
        self.pins.done(pin, value)
        try:
            self.wait(value, queue=q)
        except AmdqError:
            self.pins.forget(pin)                    # lost with its queue (reset): nothing reaches the pages now
            raise
        self.pins.trim()                             # (a bytearray's pin goes now: the caller may resize it)
        return True

    def copy(self, dst: Buffer, src: Buffer, nbytes: int, dst_offset: int = 0, src_offset: int = 0,
             wait: bool = False, timeout_ms: int | None = None) -> LaunchRecord | None:
        """Device-to-device copy of nbytes, ordered after all work submitted so far. On the SDMA queue it
        returns at once (with wait=True: after it finished, with a record of its stages); without one
        (AMD_DISABLE_SDMA=1, or no queue) the CPU copies through the mappings once the GPU is idle."""
        if type(dst) is not Buffer:
            dst = self._copy_operand(dst, "destination")
        if type(src) is not Buffer:
            src = self._copy_operand(src, "source")
        for b, o, what in ((dst, dst_offset, "destination"), (src, src_offset, "source")):
            if b.dev is not self:
                raise InvalidArgument(f"copy {what} {b!r} belongs to {b.dev.name}, not {self.name}")
            if b.alloc is None:
                raise b._freed(f"copy {'to' if what == 'destination' else 'from'}")
            if nbytes < 0 or o < 0 or o + nbytes > b.size:
                raise ValueError(f"copy of {nbytes} bytes at {what} offset {o} exceeds the {b.size}-byte buffer")
        if nbytes == 0:
            return None
        d_addr, s_addr = dst.alloc.va + dst_offset, src.alloc.va + src_offset
        if self.capturing is not None:
            self.capturing.add_copy(d_addr, s_addr, nbytes)
            return None
        q = self.copyq
        if q is not None and not wait and self.profiler is None:
            with self.submitting(q):                    # untimed: no record, the copy and its signal in one write
                value = q.copy_run(d_addr, s_addr, nbytes)
            q.note(value, f"copy of {nbytes} bytes")
            return None
        rec = LaunchRecord("copy", extra={"queue": self.copyq.name if self.copyq else "host", "bytes": nbytes,
                                          "src": hex(s_addr), "dst": hex(d_addr)})
        t0 = time.perf_counter()
        rec.extra["host_start"] = t0
        if self.copyq is not None:
            q = self.copyq
            with self.lock:
                self._check()
                timed = wait or self.profiler is not None
                ts = self._ts_slot() if timed else None
                packets = q.copy(d_addr, s_addr, nbytes)
                if ts is not None:
                    packets = q.timestamp(self.ts_addr(ts)) + packets + q.timestamp(self.ts_addr(ts) + 8)
                    rec.extra["ts"] = ts
                t1 = time.perf_counter()
                with self.submitting(q):
                    rec.value = q.run(packets)
                q.note(rec.value, f"copy of {nbytes} bytes")
                rec.encode, rec.submit = t1 - t0, time.perf_counter() - t1
                if self.profiler is not None:
                    self.profiler.add(rec)
            if not wait:
                return None
            t2 = time.perf_counter()
            self.wait(rec.value, timeout_ms, queue=q)
            rec.wait = time.perf_counter() - t2
            self.resolve(rec)
            return rec
        with self.lock:
            self._check()
            if not self.idle:
                self.drain()
            src.alloc.cpu.refresh(src_offset, nbytes)
            d = np.frombuffer(dst.alloc.cpu.mv, np.uint8)
            d[dst_offset:dst_offset + nbytes] = np.frombuffer(src.alloc.cpu.mv, np.uint8)[src_offset:src_offset + nbytes]
            dst.alloc.cpu.wrote(dst_offset, nbytes)
            rec.submit = time.perf_counter() - t0
            if self.profiler is not None:
                self.profiler.add(rec)
        return rec if wait else None

    @staticmethod
    def _copy_operand(b, what: str) -> Buffer:
        """The Buffer a copy's operand names (an Array's), or InvalidArgument."""
        if isinstance(b, arrays.Array):
            b = b.buffer
        if not isinstance(b, Buffer):
            raise InvalidArgument(f"copy {what} must be a Buffer or an Array, not {type(b).__name__}")
        return b

    # -- peer buffers --------------------------------------------------------------------------
    def map_peer(self, buf: Buffer, writable: bool = True) -> Buffer:
        """`buf`, a buffer of another device, mapped into this device's GPU address space at its own address
        (AM devices: through the owner's BAR0, or over XGMI within a hive): a Buffer of this device, for `copy`
        (this device's SDMA queue moves the bytes) and kernels. Mapping orders nothing: the owner's work on it must
        be finished first (`owner.synchronize()`). `unmap_peer` takes it down; freeing `buf` does too."""
        if not isinstance(buf, Buffer):
            raise InvalidArgument(f"map_peer takes a Buffer, not {type(buf).__name__}")
        if buf.dev is self:
            raise InvalidArgument(f"map_peer of {buf!r}: it is a buffer of this device already")
        buf.addr                                            # a freed buffer says so
        f = getattr(self.iface, "map_peer", None)
        if f is None or type(buf.dev.iface) is not type(self.iface):
            raise DeviceError(f"{self.name} cannot map memory of {buf.dev.name}: peer mappings are between AM "
                              f"(PCI) devices")
        with self.lock:
            self._check()
            a = f(buf.dev.iface, buf.alloc, writable=writable)
            buf.alloc.meta["shared"] = True                 # the owner's allocator gives it back, never reuses it
            a.meta.update(nbytes=buf.size, what=f"peer buffer of {buf.dev.name}")
            self.allocator.live_allocs[a.va] = a
            return Buffer(self, a, buf.size, owned=False)

    def unmap_peer(self, peer_buf: Buffer) -> None:
        """Take down a mapping of `map_peer` once this device's work submitted so far is done; this device's GPU
        faults on the address afterwards."""
        if not isinstance(peer_buf, Buffer) or peer_buf.dev is not self or peer_buf.alloc is None \
                or peer_buf.alloc.kind != "peer":
            raise InvalidArgument(f"unmap_peer takes a Buffer map_peer returned on {self.name}, not {peer_buf!r}")
        with self.lock:
            self._check()
            if not self.idle:
                self.drain()
            a, peer_buf.alloc = peer_buf.alloc, None
            self.allocator.live_allocs.pop(a.va, None)
            self.iface.unmap_peer(a)

    def _release(self, buf: Buffer) -> None:
        """A buffer's memory, freed once the work submitted so far is done. Lock-free: a finalizer calls it. (The
        marks are the timelines' values now: no reference to the buffer is left, so work using it has taken its
        value already.)"""
        self._pending_free.append((self._marks(), buf.alloc))

    def _reclaim(self) -> None:
        pending = self._pending_free
        if not pending:
            return
        with self.lock:
            for _ in range(len(pending)):           # (what finalizers append meanwhile waits for the next call)
                marks, a = entry = pending.popleft()
                if all(t.completed >= v for t, v in marks):
                    self.allocator.free(a)
                else:
                    pending.append(entry)

    def where(self, va: int) -> str | None:
        """Where an address lies among this device's live allocations, in words ("12 bytes past the end of a
        4096-byte buffer at 0x..."); None if nothing is near."""
        if va < 1 << 16:
            return f"a NULL pointer{'' if va == 0 else f' plus {va:#x}'}"
        pinned = [p.alloc for p in self.pins.pins] if self.pins is not None else []
        live = sorted(list(self.allocator.live_allocs.values()) + pinned, key=lambda a: a.va)
        if not live:
            return None
        starts = [a.va for a in live]
        i = bisect.bisect_right(starts, va) - 1
        below = live[i] if i >= 0 else None
        above = live[i + 1] if i + 1 < len(live) else None

        def name(a) -> str:
            n = a.meta.get("nbytes")
            what = a.meta.get("what", "buffer")
            return f"a {n if n is not None else a.size}-byte {what} at {a.va:#x}"
        if below is not None:
            n = below.meta.get("nbytes", below.size)
            if va < below.va + n:
                return f"offset {va - below.va:#x} of {name(below)}"
            past = va - (below.va + n)
            if past <= NEAR and (above is None or past <= above.va - va):
                return f"{past} bytes past the end of {name(below)}"
        if above is not None and above.va - va <= NEAR:
            return f"{above.va - va} bytes before {name(above)}"
        return "no allocation of this device is near it"

    def scratch_for(self, lane_bytes: int, wave_size: int) -> Scratch:
        """Scratch big enough for `lane_bytes` per lane on every wave slot of every XCC; grows, never shrinks.
        COMPUTE_TMPRING_SIZE.WAVES counts one XCC's slots (its CUs times their scratch slots, a multiple of
        its shader engines); the allocation holds one such share per XCC (amdq.hw.xcc)."""
        t = self.target
        unit = t.scratch_wave_align
        wave_bytes = (lane_bytes * wave_size + unit - 1) // unit * unit
        if self.scratch and self.scratch.wave_bytes >= wave_bytes:
            return self.scratch
        from ..hw import regs
        tm = regs.load("GC", t.ip["GC"]).regCOMPUTE_TMPRING_SIZE
        f = tm.fields["WAVESIZE"]
        most = ((1 << (f.hi - f.lo + 1)) - 1) * unit
        if wave_bytes > most:
            raise OutOfMemory(f"{lane_bytes} bytes of scratch per work-item need {wave_bytes} bytes per wave; "
                              f"COMPUTE_TMPRING_SIZE.WAVESIZE backs at most {most} (the kernel descriptor's "
                              f"private_segment_fixed_size is too large)")
        n = self.xcc
        ses = max(1, t.ses // n)
        fw = tm.fields["WAVES"]
        waves = min(t.cus // n * t.max_waves_per_cu, (1 << (fw.hi - fw.lo + 1)) - 1) // ses * ses
        size = wave_bytes * waves * n
        t0 = time.perf_counter()
        sync = 0.0
        old = self.scratch
        try:
            a = self.allocator.alloc(size, "vram")
        except OutOfMemory:
            if not self._pending_free and old is None:
                raise
            # memory the GPU still uses comes back once it is done: the old scratch and deferred frees
            t1 = time.perf_counter()
            self.drain()
            self._reclaim()
            if old is not None:
                self.allocator.free(old.alloc)
                self.scratch = old = None
            sync = time.perf_counter() - t1
            a = self.allocator.alloc(size, "vram")
        spent = time.perf_counter() - t0 - sync
        g = self._grew
        self._grew = (size, spent, sync) if g is None else (g[0] + size, g[1] + spent, g[2] + sync)
        a.meta["what"] = "scratch"
        self.scratch = Scratch(a, a.va, lane_bytes, wave_bytes, waves, tm.encode(WAVES=waves, WAVESIZE=wave_bytes // unit),
                               n)
        if old is not None:
            self._pending_free.append((self._marks(), old.alloc))
        return self.scratch

    # -- programs and launches -----------------------------------------------------------------
    def load(self, code_object: "bytes | str | os.PathLike") -> Program:
        """A new Program handle on the code object's memory, uploaded once per device while the program
        cache keeps it (amdq.runtime.codemem says who owns it); `prg.free()` lets go of it. Takes an AMDGPU
        code object, an offload bundle (plain or compressed) or a host ELF embedding one (bytes or a path):
        the bundle's entry for this device is loaded (amdq.codeobj.bundle)."""
        if isinstance(code_object, (str, os.PathLike)):
            with open(code_object, "rb") as f:
                code_object = f.read()
        if not isinstance(code_object, (bytes, bytearray, memoryview)):
            raise TypeError(f"load takes code-object bytes or a path, not {type(code_object).__name__}")
        if self.queue is None:
            self._queues("load")
        self._check()
        co = cobundle.code_object_for(code_object, self.arch)
        key = cocache.program_key(co, [self.uid])
        self._reclaim()
        while True:                        # an entry evicted between lookup and acquire is loaded again
            with self.lock:
                code = cocache.programs.get_or_create(key, lambda: LoadedCode(self, cocache.image_for(co, self.arch)))
                if code.acquire():
                    try:
                        prg = Program(self, code.img, code)
                    except BaseException:
                        code.release()
                        raise
                    code.alloc.meta["what"] = "program"
                    for k in prg._k.values():
                        self._kernel_names[k.addr] = self._kernel_names[k.kd_addr] = k.name
                    return prg

    def kernel_name(self, pc: int | None, kernel_object: int | None) -> str | None:
        """The kernel whose entry is `pc` or whose descriptor is at `kernel_object`."""
        for a in (pc, kernel_object):
            if a is not None and a in self._kernel_names:
                return self._kernel_names[a]
        return None

    def submitting(self, q: HWQueue) -> "Submitting":
        """`with dev.submitting(q):` around one submission to q (see Submitting)."""
        return Submitting(self, q)

    def _submit_failed(self, q: HWQueue, mark: int, e: GPUTimeout) -> None:
        """What Submitting does when a submission made inline (under the lock) timed out."""
        Submitting.failed(self, q, mark, e)

    def launch(self, kernel, args, grid, block, shared_mem: int = 0, wait: bool = False,
               timeout_ms: int | None = None, timed: bool = False) -> Launch:
        """Encode and submit one kernel launch on the compute queue (and wait for it if asked); its handle."""
        q = self.queue
        prg = kernel.prg
        if q is None or self.closed or prg.dev is not self or prg._freed or prg.code.alloc is None:
            self._refuse(kernel)
        if self.capturing is not None:
            self._check()
            if wait:
                raise RuntimeError("wait=True inside a capture: nothing runs until the graph is replayed")
            node = self.capturing.add_launch(kernel, args, grid, block, shared_mem)
            if self._grew is not None:
                node.grew = self.take_growth()  # scratch grown while capturing: the node says so
            return node
        if wait or timed or self.profiler is not None:
            return self._launch_timed(q, kernel, args, grid, block, shared_mem, wait, timeout_ms)
        lock = self.lock                         # what Submitting does, inline: this is the hottest path
        lock.acquire()
        try:
            if self.closed:
                self._check()
            mark = q.timeline.value
            t0 = _now()
            try:
                value, t1 = q.launch(kernel, args, grid, block, None, shared_mem)
            except BaseException as e:
                self._launch_failed(q, kernel, mark, e)
                raise
            q._what[value & 255] = kernel.label  # (q.note, inline)
            h = _new(Launch)                     # (Launch(q, value, info) without its __init__ call)
            h.queue, h.value, h._rec = q, value, None
            h._info = (kernel.name, t0, t1, _now(), None, grid, block,
                       self.take_growth() if self._grew is not None else None)
            return h
        finally:
            lock.release()

    def _launch_timed(self, q: HWQueue, kernel, args, grid, block, shared_mem: int, wait: bool,
                      timeout_ms: int | None) -> Launch:
        """`launch` with GPU timestamps (timed, waited for, or inside dev.profile())."""
        with self.lock:
            self._check()
            mark = q.timeline.value
            ts = self._ts_slot()
            t0 = _now()
            try:
                value, t1 = q.launch(kernel, args, grid, block, self.ts_addr(ts), shared_mem)
            except BaseException as e:
                self._launch_failed(q, kernel, mark, e)
                raise
            q.note(value, kernel.label)
            h = Launch(q, value, (kernel.name, t0, t1, _now(), ts, grid, block, self.take_growth()))
            if self.profiler is not None:
                h._rec = h._make()
                self.profiler.add(h._rec)
        if wait:
            h.wait(timeout_ms)
        return h

    def _launch_failed(self, q: HWQueue, kernel, mark: int, e: BaseException) -> None:
        """A launch raised `e` (under the lock): a ring-space timeout gives its value back and recovers the queue;
        a memory growth of a launch that failed stays unreported; a lost device says what was being launched."""
        if isinstance(e, GPUTimeout):
            Submitting.failed(self, q, mark, e)
            return
        self._grew = None
        if isinstance(e, DeviceLost):
            raise self._lost_while(e, f"launching {kernel.label} on {q.name}") from e

    def _refuse(self, kernel) -> None:
        """Raise why `kernel` cannot be launched here (no queues, a closed device, another device's or a freed
        program's kernel)."""
        if self.queue is None:
            self._queues("launch")
        self._check()
        prg = kernel.prg
        if prg.dev is not self:
            raise InvalidArgument(f"kernel {kernel.name} was loaded on {kernel.prg.dev.name}, not {self.name}")
        raise InvalidArgument(f"kernel {kernel.name}: its program {kernel.prg!r} was freed; load the code object again")

    def capture(self):
        """`with dev.capture() as g:` records launches without running them; `g.replay()` runs them all."""
        if self.queue is None:
            self._queues("capture")
        from .graph import Graph
        return Graph(self)

    def profile(self):
        """`with dev.profile() as p:` records every launch and copy; `p.save("trace.json")` writes a trace."""
        from .profile import Profile
        return Profile(self)

    def resolve(self, rec: LaunchRecord) -> None:
        """Fill in a record's GPU start/end from its timestamp slot (once its work has completed). A slot that
        later launches have taken again since (more than TS_SLOTS timed launches ago) leaves `gpu` None."""
        ts = rec.extra.get("ts")
        if ts is not None and rec.gpu_start is None:
            if self._ts_next - ts > TS_SLOTS:
                rec.extra["ts_lost"] = True
                return
            off = (ts % TS_SLOTS) * TS_SLOT + TS_AT
            self.ts_alloc.cpu.refresh(off, 16)
            a, b = struct.unpack_from("<QQ", self.ts_alloc.cpu.mv, off)
            rec.gpu_start, rec.gpu_end = self.gpu_to_host(a), self.gpu_to_host(b)

    def _ts_slot(self) -> int:
        """A fresh timestamp slot's number (its address: ts_addr)."""
        n = self._ts_next
        self._ts_next = n + 1
        return n

    def ts_addr(self, n: int) -> int:
        """GPU address of timestamp slot `n`'s two 64-bit GPU clock values (start, end: its start_ts, end_ts)."""
        return self.ts_alloc.va + (n % TS_SLOTS) * TS_SLOT + TS_AT

    def take_growth(self) -> tuple[int, float, float] | None:
        """(bytes allocated, seconds allocating, seconds synchronising) of the memory growth since the last call
        (scratch grown for a launch), for that launch's record; None if nothing grew."""
        g, self._grew = self._grew, None
        return g

    # -- waits, faults and recovery --------------------------------------------------------------
    def wait(self, value: "int | Launch", timeout_ms: int | None = None, queue: HWQueue | None = None,
             errors: bool = True) -> None:
        """Wait until `queue` (the compute queue by default) has completed submission `value` (a timeline value,
        or a launch's handle: its queue and value).

        The timeout (AMDQ_WAIT_TIMEOUT_MS, 30 s) restarts while the queue makes progress (its timeline,
        read pointer, or the waves a running dispatch retires); then the queue is recovered and GPUTimeout
        names where it was stuck. A GPU exception that stopped this work raises its error (every wait on
        lost work does); `errors=False` waits only until the work is done or lost (to recycle memory)."""
        if type(value) is Launch:
            queue, value = queue or value.queue, value.value
        q = queue or self.queue
        t = q.timeline
        if t.completed >= value and not q.failed:
            self._reclaim()
            return
        timeout = (default_timeout_ms() if timeout_ms is None else timeout_ms) / 1000
        deadline = time.monotonic() + timeout
        seen = None
        while True:
            err = q.error_for(value) if q.failed else None
            if err is not None:
                if errors:
                    raise err
                break
            if t.completed >= value:
                break
            if self.closed:
                raise DeviceClosed(f"{self.name} was closed while waiting for {q.name} to reach {value}")
            now = time.monotonic()
            # block in the interrupt wait (>= 1 ms or until an interrupt): polling with 0 ms waits keeps the
            # simulated GPU's worker thread from the interpreter lock for a whole switch interval (5 ms)
            try:
                exc = self.iface.wait_events(max(1, min(10, int((deadline - now) * 1000))))
            except DeviceLost as e:             # the GPU is gone: say which work was waited for
                raise self._lost_while(e, f"waiting for {q.what(value) or 'work'} (timeline value {value} on "
                                          f"{q.name}, {value - t.completed} submission(s) not completed)") from e
            if exc:
                self._exceptions(exc)
                continue
            if t.completed >= value:
                continue                    # done: the progress (a read pointer read) need not be asked
            p = (t.completed, q.progress())
            if p != seen:
                seen, deadline = p, time.monotonic() + timeout
            elif time.monotonic() >= deadline:
                with self.lock:
                    if t.completed >= value or q.error_for(value) is not None:
                        continue
                    info = q.describe()
                    what = q.what(t.completed + 1)
                    err = GPUTimeout(f"timed out after {timeout * 1000:.0f} ms without progress waiting for timeline "
                                     f"value {value} on {info.get('queue', q.name)} (last value seen {t.completed}"
                                     f"{f'; the next is {what}' if what else ''}); "
                                     f"{info.get('stuck', 'the queue made no progress')}; the queue was reset",
                                     queue=info.get("queue"), awaited=value, last=t.completed,
                                     packet=info.get("packet"), kernel=what)
                    self._recover(q, err)
                raise err
        self._reclaim()

    @staticmethod
    def _lost_while(e: DeviceLost, what: str) -> DeviceLost:
        """`e` again, saying what the runtime was doing; the interface's details (`in_flight` ...) kept."""
        err = DeviceLost(f"{e} [lost {what}]")
        err.__dict__.update(vars(e))
        err.waiting = what
        return err

    def drain(self) -> None:
        """Wait until every queue has finished (or lost) everything submitted; errors are left to the waits
        of the work that failed."""
        for q in self.queues:
            self.wait(q.timeline.value, None, q, errors=False)

    def synchronize(self, timeout_ms: int | None = None) -> None:
        """Wait until the GPU has finished everything submitted, on every queue (a failed submission raises; a lost
        GPU raises DeviceLost, even with nothing outstanding)."""
        alive = getattr(self.iface, "check_alive", None)
        if alive is not None and not self.closed:
            alive()
        for q in self.queues:
            self.wait(q.timeline.value, timeout_ms, q)

    def _exceptions(self, found: list) -> None:
        """Queue exceptions reported by the interface: each stopped queue is recovered and its lost work
        fails with the exception's error."""
        with self.lock:
            by_id = {q.q.queue_id: q for q in self.queues}
            for exc in found:
                if exc.queue_id is not None:
                    q = by_id.get(exc.queue_id)
                    if q is None:
                        continue                            # a queue already reset: its work failed already
                    targets = [q]
                else:                                       # the interface cannot tell which queue stopped
                    targets = [q for q in self.queues if q.timeline.completed < q.timeline.value] or [self.queue]
                err = to_error(exc, self.kernel_name, self.where, targets[0].name if len(targets) == 1 else None)
                for q in targets:
                    self._recover(q, err)

    def _recover(self, q: HWQueue, err: AmdqError) -> None:
        """Reset q after a fault or a timeout: its hardware queue is destroyed (running waves killed) and
        created again, its lost submissions fail with `err`, its timeline is realigned so no queue waits on
        it forever, and work of other queues ordered after the lost work fails with `err` too."""
        with self.lock:
            t = q.timeline
            first, last = t.completed + 1, t.value
            log.info("recovering %s after %s (submissions %d..%d lost)", q.name, type(err).__name__, first, last)
            q.reset()
            t.realign()
            q.fail(first, last, err)
            for o in self.queues:
                if o is q:
                    continue
                hit = [n for n, other, v in o.deps if other is q and first <= v <= last]
                if hit:
                    o.fail(min(hit), o.timeline.value, err)
            self._waited = {k: v for k, v in self._waited.items() if id(q) not in k}
            for o in self.queues:                       # the waits q had queued are lost with its ring
                o.timeline.ordered = None

    def close(self) -> None:
        """Release the queues, the memory and the interface (idempotent); a closed device raises DeviceClosed."""
        with self.lock:
            if self.closed:
                return
            if self.queue is None:                  # the interface's fini first, then the simulated function
                self.closed = True
                try:
                    self.iface.close()
                finally:
                    if self.sim is not None:
                        self.sim.close()
                return
            for q in self.queues:
                try:
                    q.close()
                except (AmdqError, OSError):
                    pass
            if self.pins is not None:
                self.pins.close()                   # the copy queue is gone: no copy reaches the pages
            cocache.programs.purge(lambda k: self.uid in k[1])     # (before closed: their frees are deferred)
            self.closed = True
            # the queues are gone, so nothing runs any more: give back program code, deferred frees and the
            # device's own memory, then the allocator's cache (live user buffers stay with their owners)
            for code in list(self._codes):
                code.drop()
            own = [a for _, a in self._pending_free] + [self.kernargs.alloc, self.signals, self.ts_alloc]
            own += [self.scratch.alloc] if self.scratch is not None else []
            self._pending_free.clear()
            for a in own:
                self.allocator.free(a)
            self.allocator.trim(0)
            if self.sim is not None:
                self.sim.close()                # first: the simulated GPU's worker stops with its engines
            try:
                self.iface.close()
            except OSError as e:
                log.debug("closing the interface: %s", e)


def open_device(spec: str | None = None) -> Device:
    """Open a GPU: `[IFACE+]AMD[:ARCH]`, `SIM[:ARCH]`, or the DEV environment variable."""
    dev = Device(spec)
    if os.environ.get("AMDQ_TRACE"):            # trace an unmodified program (amdq.runtime.trace)
        from .trace import attach
        attach(dev)
    return dev


__all__ = ["Device", "open_device", "parse_spec", "GPUFault"]
