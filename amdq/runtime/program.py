"""Programs loaded on a device, and kernels called like functions."""
from __future__ import annotations

import struct
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..codeobj.image import KernelInfo, ProgramImage
from ..errors import InvalidArgument
from . import kernargs

if TYPE_CHECKING:
    from .codemem import LoadedCode
    from .device import Device


@dataclass
class LaunchRecord:
    """Where one launch spent its time (seconds; GPU times converted to the host clock)."""
    kernel: str
    encode: float = 0.0
    submit: float = 0.0
    wait: float = 0.0
    gpu_start: float | None = None
    gpu_end: float | None = None
    value: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def gpu(self) -> float | None:
        return None if self.gpu_start is None else self.gpu_end - self.gpu_start


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


class Kernel:
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

    def __repr__(self) -> str:
        return f"<Kernel {self.name} of {self.prg}>"

    def __call__(self, *args, grid=(1, 1, 1), block=(1, 1, 1), wait: bool = False, timeout_ms: int | None = None):
        return self.prg.dev.launch(self, args, _dims(grid, "grid"), _dims(block, "block"), wait, timeout_ms)

    def bind(self, *args, grid=(1, 1, 1), block=(1, 1, 1)):
        """This launch recorded once (PM4: an indirect buffer; AQL: a ready dispatch packet) with its own
        kernel arguments; `.submit()` resubmits it and returns its timeline value."""
        dev = self.prg.dev
        with dev.lock:
            return dev.queue.bind(self, args, _dims(grid, "grid"), _dims(block, "block"))

    def kernargs(self, args: tuple, grid, block) -> tuple[bytes, int]:
        """(kernel-argument bytes, dynamic LDS bytes) of one launch shape, after checking the block size."""
        threads = block[0] * block[1] * block[2]
        if threads > self.meta.max_flat_workgroup_size:
            raise InvalidArgument(f"kernel {self.name}: block of {threads} work-items exceeds its maximum of "
                                  f"{self.meta.max_flat_workgroup_size}")
        return kernargs.pack(self.meta, args, grid, block, self.address_of, self.desc.group_segment_fixed_size,
                             self.prg.dev.target.lds_bytes)

    def address_of(self, buf) -> int:
        """The device address a buffer argument passes (a buffer of this device, not freed)."""
        dev = getattr(buf, "dev", None)
        if dev is not None and dev is not self.prg.dev:
            raise InvalidArgument(f"kernel {self.name}: {buf!r} belongs to {dev.name}, the kernel runs on "
                                  f"{self.prg.dev.name}; copy it to this device first")
        return buf.addr

    def pack_into(self, p, args: tuple, mv, off: int) -> None:
        """Write this call's kernel arguments (validated) at mv[off:]."""
        mv[off:off + len(p.blob)] = p.blob
        if p.fmt is not None and len(args) == len(self.meta.explicit_args):
            try:
                vals = list(args)
                dev = self.prg.dev
                for i in p.ptr:
                    v = vals[i]
                    if not isinstance(v, int):
                        vals[i] = v.addr if v.dev is dev else None     # another device's: the slow path says so
                p.fmt.pack_into(mv, off, *vals)
                return
            except (struct.error, AttributeError, TypeError):
                pass                                        # the slow path packs it or says what is wrong
        blob, _ = kernargs.pack(self.meta, args, p.grid, p.block, self.address_of, self.desc.group_segment_fixed_size,
                                self.prg.dev.target.lds_bytes)
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
        if name not in self._k:
            raise KeyError(f"no kernel {name!r} in the program (kernels: {', '.join(self.kernels)})")
        return self._k[name]

    def __repr__(self) -> str:
        state = " (freed)" if self.freed else ""
        return f"<Program {self.img.arch} {', '.join(self.kernels)} at {self.base:#x}{state}>"
