"""Programs loaded on a device, and kernels called like functions."""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..codeobj.image import KernelInfo, ProgramImage
from ..errors import InvalidArgument
from . import kernargs

if TYPE_CHECKING:
    from .aql_queue import AQLBound
    from .codemem import LoadedCode
    from .device import Device
    from .graph import Node
    from .pm4_queue import PM4Bound


@dataclass
class LaunchRecord:
    """Where one launch (or copy) spent its time, in seconds on the host clock: `encode` (building its
    commands and kernel arguments), `submit` (ring write and doorbell), `gpu` (start to end on the GPU, from
    its timestamps converted to the host clock; None when the launch was not timed), `wait` (the host blocked
    waiting for it). On the simulated GPU `simulated` is True: "gpu" is then the simulated GPU's clock, not a
    real device's time. A launch that grew the queue's scratch says so: `alloc_bytes` allocated, `alloc`
    seconds spent allocating and `sync` seconds waiting for the GPU to give memory back (both are part of
    `encode`)."""
    kernel: str
    encode: float = 0.0
    submit: float = 0.0
    wait: float = 0.0
    gpu_start: float | None = None
    gpu_end: float | None = None
    value: int = 0
    extra: dict = field(default_factory=dict)
    simulated: bool = False
    alloc_bytes: int = 0
    alloc: float = 0.0
    sync: float = 0.0

    @property
    def gpu(self) -> float | None:
        """GPU seconds from start to end (None unless the launch was timed); simulated time on the simulated GPU."""
        return None if self.gpu_start is None else self.gpu_end - self.gpu_start

    def stages(self) -> dict[str, float | None]:
        """The four stages by name: encode, submit, gpu, wait."""
        return {"encode": self.encode, "submit": self.submit, "gpu": self.gpu, "wait": self.wait}


_clock = time.perf_counter
_new = object.__new__           # a Launch made on a hot path: object.__new__(Launch), its four slots stored in place


class Launch:
    """The handle of one kernel launch, returned by every call (and by a bound launch's `submit()`).

    `done` says whether the GPU has finished it (or lost it to a fault); `wait(timeout_ms)` blocks until it
    finished and returns its stage record, or raises the error that stopped it (again on every call);
    `record` is the stage record (`LaunchRecord`) once it is done, else None. The GPU stage is measured
    for timed launches (`wait=True`, `timed=True`, or inside `dev.profile()`); otherwise `record.gpu` is
    None. The record is built when first asked for, so a launch pays only for this small object.

    (The untimed launch and the bound submissions make it as `_new(Launch)` and store its four slots themselves,
    as __init__ does: a call of the class with a Python __init__ costs some 45 ns more per launch. A slot added
    here is added there too: Device.launch, PM4Bound.submit, AQLBound.submit.)
    """

    __slots__ = ("queue", "value", "_info", "_rec")

    def __init__(self, queue, value: int, info: tuple):
        # info of a launch: (kernel name, host start, end of encoding, end of submission, timestamp slot or None,
        # grid, block, memory growth (bytes, alloc s, sync s) or None); of a bound launch's submission: (the
        # bound launch, host start, end of submission[, memory growth])
        self.queue, self.value, self._info, self._rec = queue, value, info, None

    def _details(self) -> tuple:
        i = self._info
        if type(i[0]) is str:
            return i
        b = i[0]
        return (b.kernel.name, i[1], i[1], i[2], None, b.grid, b.block, i[3] if len(i) > 3 else None)

    @property
    def kernel(self) -> str:
        """The kernel's name."""
        i = self._info[0]
        return i if type(i) is str else i.kernel.name

    @property
    def dev(self) -> "Device":
        """The device the launch ran on."""
        return self.queue.dev

    def __repr__(self) -> str:
        state = "device closed" if self.queue.dev.closed else "done" if self._finished() else "running"
        return f"<Launch {self.kernel} #{self.value} on {self.queue.name} ({state})>"

    def _finished(self) -> bool:
        q = self.queue
        if q.dev.closed:
            q.dev._check()                              # DeviceClosed: its timeline memory is gone
        return q.timeline.completed >= self.value or (bool(q.failed) and q.error_for(self.value) is not None)

    @property
    def done(self) -> bool:
        """True once the GPU has finished this launch, or lost it to a fault or timeout (then `wait()` raises)."""
        if self._finished():
            return True
        dev = self.queue.dev
        if not dev.closed:
            exc = dev.iface.wait_events(0)              # let a synchronous simulated GPU move; collect faults
            if exc:
                dev._exceptions(exc)
        return self._finished()

    @property
    def error(self):
        """The error that stopped this launch (an amdq.errors exception), or None."""
        q = self.queue
        return q.error_for(self.value) if q.failed else None

    def wait(self, timeout_ms: int | None = None) -> LaunchRecord:
        """Block until the launch has finished; returns its stage record. Raises the GPU error that stopped it
        (GPUFault, GPUTimeout, ...) or GPUTimeout when it does not finish in time."""
        if self.queue.dev.closed and self._rec is not None:
            return self._rec
        self._finished()                                # a closed device says so
        t = _clock()
        try:
            self.queue.dev.wait(self.value, timeout_ms, self.queue)
        finally:
            spent = _clock() - t
            rec = self.record
            if rec is not None:
                rec.wait += spent
        return rec

    @property
    def record(self) -> LaunchRecord | None:
        """The stage record once the launch is done (None before)."""
        rec = self._rec
        if rec is not None and (rec.gpu_start is not None or rec.extra.get("ts") is None):
            return rec                                  # complete: made once the launch was done
        if not self._finished():
            return None
        if rec is None:
            rec = self._rec = self._make()
        elif rec.extra.get("ts") is not None:
            self._resolve(rec)
        return rec

    def _make(self) -> LaunchRecord:
        name, t0, t1, t2, ts, grid, block, grew = self._details()
        q = self.queue
        rec = LaunchRecord(name, encode=t1 - t0, submit=t2 - t1, value=self.value, simulated=q.dev.sim is not None,
                           extra={"queue": q.name, "ts": ts, "host_start": t0, "grid": grid, "block": block})
        if grew is not None:
            rec.alloc_bytes, rec.alloc, rec.sync = grew
        if self._finished():
            self._resolve(rec)
        return rec

    def _resolve(self, rec: LaunchRecord) -> None:
        if self.error is None:
            self.queue.dev.resolve(rec)


def _dims(v, name: str) -> tuple[int, int, int]:
    if type(v) is int and v >= 1:
        return (v, 1, 1)
    if type(v) is tuple and len(v) == 3 and type(v[0]) is int and type(v[1]) is int and type(v[2]) is int \
            and v[0] >= 1 and v[1] >= 1 and v[2] >= 1:
        return v
    try:
        t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    except TypeError:
        raise InvalidArgument(f"{name} must be 1 to 3 positive integers, got {v!r}") from None
    if not 1 <= len(t) <= 3 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1
                                       for x in t):
        raise InvalidArgument(f"{name} must be 1 to 3 positive integers, got {v!r}")
    t = tuple(int(x) for x in t)
    return t + (1,) * (3 - len(t))


def _block(v, kernel: str) -> tuple[int, int, int]:
    if v is None:
        raise InvalidArgument(f"kernel {kernel}: block= is required, the work-items per workgroup (an int or 1 to 3 "
                              f"ints, e.g. block=256); grid= counts workgroups")
    return _dims(v, "block")


def _shared(v, kernel: str) -> int:
    if type(v) is int and v >= 0:
        return v
    if isinstance(v, np.integer) and v >= 0:
        return int(v)
    raise InvalidArgument(f"kernel {kernel}: shared_mem must be a non-negative number of bytes of dynamic LDS, "
                          f"not {v!r}")


class Kernel:
    """A kernel of a loaded program, called like a function: `k(*args, grid=..., block=...)` (see __call__)."""

    def __init__(self, prg: "Program", info: KernelInfo):
        self.prg, self.info, self.name = prg, info, info.name
        self.label = f"kernel {info.name}"
        self.meta, self.desc = info.meta, info.descriptor
        self.addr = prg.base + info.entry_offset
        self.kd_addr = prg.base + info.kd_offset
        self._plans: dict[tuple, object] = {}         # launch plans of the device's compute queue, by shape
        self._has_lds = any(a.value_kind == "dynamic_shared_pointer" for a in self.meta.args)
        self._untyped = [i for i, a in enumerate(self.meta.explicit_args)
                         if a.value_kind == "by_value" and not a.type_name.strip()]
        self._pointee = {i: f for i, a in enumerate(self.meta.explicit_args)
                         if (f := kernargs.pointee_check(a)) is not None}     # typed pointers: dtype checks
        # a launch shape of a kernel without LDS arguments or scratch is (grid, block, timed, shared_mem): its
        # plan is looked up in `_shapes` without building the full plan key. (The Python types of untyped
        # arguments are in the full key; a plan's packer sends other types to the checked path.)
        self._plain = not self._has_lds and not self.desc.uses_scratch
        self._shapes: dict[tuple, object] = {}
        self._aql_shapes: dict[tuple, object] = {}     # the same for AQL dispatch packets (grid, block, shared_mem)

    def __repr__(self) -> str:
        return f"<Kernel {self.name} of {self.prg}>"

    def __call__(self, *args, grid=1, block=None, shared_mem: int = 0, wait: bool = False,
                 timeout_ms: int | None = None, timed: bool = False) -> "Launch | Node":
        """Launch the kernel on `grid` workgroups of `block` work-items each; returns its `Launch` handle.

        `grid` counts workgroups, not work-items (an OpenCL global size is grid * block): 4096 elements with 256 work-items per workgroup is `grid=16, block=256`. Both take an
        int or 1 to 3 ints; `block` is required. `shared_mem` adds that many bytes of dynamic LDS to the
        workgroup (what an `extern __shared__` array, an external addrspace(3) array in LLVM IR, uses),
        placed right after the kernel's static LDS; `amdq.LDS` arguments follow it. `wait=True` returns once
        the kernel finished (and raises its GPU error); `timed=True` (implied by wait=True and by
        `dev.profile()`) records GPU timestamps for the handle's record. Inside `dev.capture()` the launch is
        recorded, not run, and the graph's node is returned.

            h = k(out, x, 2.0, n, grid=(n + 255) // 256, block=256)
            h.wait()        # -> LaunchRecord: encode, submit, gpu, wait
        """
        g = (grid, 1, 1) if type(grid) is int and grid >= 1 else _dims(grid, "grid")
        b = (block, 1, 1) if type(block) is int and block >= 1 else _block(block, self.name)
        return self.prg.dev.launch(self, args, g, b, shared_mem if type(shared_mem) is int and shared_mem >= 0
                                   else _shared(shared_mem, self.name), wait, timeout_ms, timed)

    def bind(self, *args, grid=1, block=None, shared_mem: int = 0) -> "PM4Bound | AQLBound":
        """This launch recorded once (PM4: an indirect buffer; AQL: a ready dispatch packet) with its own
        kernel arguments; `.submit()` resubmits it and returns its `Launch` handle. Arguments as for a call."""
        dev = self.prg.dev
        g, b, sm = _dims(grid, "grid"), _block(block, self.name), _shared(shared_mem, self.name)
        with dev.lock:
            dev._check()
            return dev.queue.bind(self, args, g, b, sm)

    def kernargs(self, args: tuple, grid, block, shared_mem: int = 0) -> tuple[bytes, int]:
        """(kernel-argument bytes, dynamic LDS bytes) of one launch shape, after checking the block size."""
        threads = block[0] * block[1] * block[2]
        if threads > self.meta.max_flat_workgroup_size:
            raise InvalidArgument(f"kernel {self.name}: block of {threads} work-items exceeds its maximum of "
                                  f"{self.meta.max_flat_workgroup_size}")
        return kernargs.pack(self.meta, args, grid, block, self.address_of, self.desc.group_segment_fixed_size,
                             self.prg.dev.target.lds_bytes, shared_mem=shared_mem)

    def address_of(self, buf) -> int:
        """The device address a buffer argument passes (a buffer of this device, not freed)."""
        dev = getattr(buf, "dev", None)
        if dev is not None and dev is not self.prg.dev:
            raise InvalidArgument(f"kernel {self.name}: {buf!r} belongs to {dev.name}, the kernel runs on "
                                  f"{self.prg.dev.name}; copy it to this device first")
        return buf.addr

    def pack_into(self, p, args: tuple, mv, off: int) -> None:
        """Write this call's kernel arguments (validated) at mv[off:] with the plan's compiled packer (see
        kernargs.compile_packer): hidden arguments included; anything unusual takes the checked path."""
        p.pack(mv, off, args)

    def packer(self, p, args: tuple, blob: bytes) -> Callable[[memoryview, int, tuple], None]:
        """The compiled kernel-argument packer of plan `p` (built with `args`, its bytes `blob`)."""
        return kernargs.compile_packer(self.meta, args, blob, self.prg.dev, self._pointee,
                                       lambda mv, off, a: self._pack_checked(p, mv, off, a))

    def _pack_checked(self, p, mv, off: int, args: tuple) -> None:
        """The general packer: every check, and the error that names a wrong argument."""
        blob, _ = kernargs.pack(self.meta, args, p.grid, p.block, self.address_of, self.desc.group_segment_fixed_size,
                                self.prg.dev.target.lds_bytes, shared_mem=p.shared_mem)
        mv[off:off + len(blob)] = blob


class Program:
    """A code object loaded on one device: a handle on its code memory (shared with the other handles of
    the same code object on the device, see amdq.runtime.codemem for who owns what).

    `free()` gives this handle's share back; the memory is freed once no handle and not the program
    cache hold it, after the GPU finished the work submitted so far. Afterwards launches of this
    handle's kernels raise InvalidArgument. A handle nothing references any more is freed when it is
    garbage collected; one still referenced is never freed under its user by a cache eviction.
    """

    def __init__(self, dev: "Device", img: ProgramImage, code: "LoadedCode | None" = None):
        from .codemem import LoadedCode
        self.dev, self.img = dev, img
        t0 = time.perf_counter()
        self.code = code if code is not None else LoadedCode(dev, img)   # we own one reference to it
        self.base = self.code.base
        self.load_time = time.perf_counter() - t0
        self._freed = False
        self._release = weakref.finalize(self, self.code.release)      # at most once: free() or collection
        self._release.atexit = False
        self.kernels = list(img.kernels)
        self._k = {n: Kernel(self, k) for n, k in img.kernels.items()}

    @property
    def alloc(self):
        """The code memory (None once freed)."""
        return None if self._freed else self.code.alloc

    @property
    def freed(self) -> bool:
        """Whether the code memory was given back (by this handle or its owner)."""
        return self._freed or self.code.freed

    def free(self) -> None:
        """Give this handle's code memory back (idempotent); see the class docstring."""
        if self._freed:
            return
        self._freed = True
        self._release()
        if not self.dev.closed:
            self.dev._reclaim()

    def __getitem__(self, name: str) -> Kernel:
        """The kernel `name`: its symbol, or the plain name of a C++ (HIP) kernel compiled without extern "C"
        (`prg["axpy"]` for `_Z4axpyPffi`) when one kernel has that name."""
        k = self._k.get(name)
        if k is not None:
            return k
        mangled = [n for n in self._k if n.startswith(f"_Z{len(name)}{name}")] if name.isidentifier() else []
        if len(mangled) == 1:
            return self._k[mangled[0]]
        if mangled:
            raise KeyError(f"{name!r} names {len(mangled)} overloads in the program: {', '.join(mangled)}; "
                           f"take one by its symbol")
        raise KeyError(f"no kernel {name!r} in the program (kernels: {', '.join(self.kernels)})")

    def __repr__(self) -> str:
        state = " (freed)" if self.freed else ""
        return f"<Program {self.img.arch} {', '.join(self.kernels)} at {self.base:#x}{state}>"
