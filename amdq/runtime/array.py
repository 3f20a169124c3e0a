"""Typed device arrays: device memory with a numpy dtype and shape, the small core of an array (shape, dtype,
size, nbytes, host copies). An Array passes to a kernel as a pointer argument and is
checked against the element type the code object's metadata records for it (`.type_name`, e.g. "float*").

Arrays are C-contiguous: `strides` are those of a C-ordered numpy array of the same shape and dtype.
`reshape` gives another view of the same memory. Raw bytes stay with `Buffer`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgument
from .memory import Buffer

if TYPE_CHECKING:
    from .device import Device


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        t = tuple(shape)
    except TypeError:
        raise InvalidArgument(f"shape must be an int or a sequence of ints, not {shape!r}") from None
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in t):
        raise InvalidArgument(f"shape must hold non-negative ints, not {shape!r}")
    return tuple(int(n) for n in t)


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise InvalidArgument(f"not a numpy dtype: {dtype!r} ({e})") from None
    if dt.hasobject:
        raise InvalidArgument(f"dtype {dt} holds Python object pointers, not data: use a numeric dtype")
    return dt


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


class Array:
    """A C-contiguous array in device memory: `shape`, `dtype`, `strides`, `size`, `nbytes`, `ndim`.

    `numpy()` (or `get()`) copies it to a new host array; `set(host)` copies a host array into it. Pass it
    to a kernel where a pointer goes: its dtype must fit the pointer's element type when the metadata
    names one (a float64 array for a `float*` raises DTypeMismatch, a TypeError). `free()` gives the
    memory back; after that every use raises InvalidArgument.
    """

    def __init__(self, buffer: Buffer, shape: tuple[int, ...], dtype: np.dtype):
        self.buffer, self.shape, self.dtype = buffer, shape, dtype
        self.dev: "Device" = buffer.dev
        self.size = math.prod(shape)
        self.nbytes = self.size * dtype.itemsize
        self.strides = _c_strides(shape, dtype.itemsize)

    # -- what a kernel argument needs -----------------------------------------------------------
    @property
    def addr(self) -> int:
        """GPU address of the first element."""
        if self.buffer.alloc is None:
            raise self._freed()
        return self.buffer.alloc.va

    ptr = addr

    def _freed(self, what: str = "use") -> InvalidArgument:
        return InvalidArgument(f"{what} of a freed array: the {self.dtype} array of shape {self.shape} that was at "
                               f"{self.buffer._va:#x} on {self.dev.name}; allocate a new one")

    # -- shape ------------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes of one element."""
        return self.dtype.itemsize

    @property
    def freed(self) -> bool:
        """Whether the array's memory was freed."""
        return self.buffer.alloc is None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        where = "freed" if self.freed else f"at {self.buffer.alloc.va:#x}"
        return f"<amdq.Array shape={self.shape} dtype={self.dtype} {where} on {self.dev.name}>"

    def reshape(self, *shape: Any) -> "Array":
        """The same memory with another shape of the same size (one dimension may be -1)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new = list(_shape([1 if n == -1 else n for n in shape]) if all(
            isinstance(n, (int, np.integer)) for n in shape) else _shape(shape))
        free = [i for i, n in enumerate(shape) if n == -1]
        known = math.prod(new)
        if len(free) == 1 and known and self.size % known == 0:
            new[free[0]] = self.size // known
        if len(free) > 1 or math.prod(new) != self.size:
            raise InvalidArgument(f"cannot reshape an array of shape {self.shape} (size {self.size}) to {tuple(shape)}")
        if self.freed:
            raise self._freed("reshape")
        return Array(self.buffer, tuple(new), self.dtype)

    # -- host copies ------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new, writable host array with this array's dtype, shape and contents (once the GPU finished
        the work submitted so far)."""
        if self.freed:
            raise self._freed("read")
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(self.buffer.read(self.nbytes), np.uint8)
        return out

    get = numpy                                      # the short name

    def set(self, host: Any) -> None:
        """Copy a host array (of this shape; its dtype cast to this one if numpy can do so safely within
        the kind, e.g. float32 -> float64) into this array."""
        if self.freed:
            raise self._freed("write")
        a = np.asarray(host)
        if a.shape != self.shape:
            raise InvalidArgument(f"set: a host array of shape {a.shape} into a device array of shape {self.shape}")
        if a.dtype != self.dtype:
            if a.dtype.hasobject or not np.can_cast(a.dtype, self.dtype, "same_kind"):
                raise InvalidArgument(f"set: cannot copy {a.dtype} into a {self.dtype} array; convert it first")
            a = a.astype(self.dtype)
        if self.nbytes:
            self.buffer.write(np.ascontiguousarray(a))

    def fill_zero(self) -> None:
        """Set every byte to zero."""
        if self.freed:
            raise self._freed("write")
        if self.nbytes:
            self.buffer.write(bytes(self.nbytes))

    def copy_from(self, src: "Array", wait: bool = False) -> None:
        """Device-to-device copy of another array of the same shape and dtype into this one."""
        if not isinstance(src, Array):
            raise InvalidArgument(f"copy_from takes an amdq.Array, not {type(src).__name__} (for a host array: set)")
        if src.shape != self.shape or src.dtype != self.dtype:
            raise InvalidArgument(f"copy_from: an array of {src.dtype} {src.shape} into one of {self.dtype} {self.shape}")
        if self.freed:
            raise self._freed("copy into")
        if src.freed:
            raise src._freed("copy from")
        if self.nbytes:
            self.dev.copy(self.buffer, src.buffer, self.nbytes, wait=wait)

    def free(self) -> None:
        """Give the memory back (views made by reshape share it: they are freed with it). A second free raises."""
        if self.freed:
            raise self._freed("free")
        self.buffer.free()


def from_host(dev: "Device", host: Any, dtype: Any = None) -> Array:
    """A device array holding a copy of a host array (or anything numpy turns into one)."""
    a = np.asarray(host, dtype=None if dtype is None else _dtype(dtype))
    dt = _dtype(a.dtype)
    arr = empty(dev, a.shape, dt)
    if a.nbytes:
        arr.buffer.write(np.ascontiguousarray(a))
    return arr


def empty(dev: "Device", shape: Any, dtype: Any = np.float32) -> Array:
    """A device array of `shape` and `dtype` whose contents are whatever the memory held."""
    shape, dt = _shape(shape), _dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    return Array(dev.alloc(max(nbytes, 1)), shape, dt)


def zeros(dev: "Device", shape: Any, dtype: Any = np.float32) -> Array:
    """A device array of `shape` and `dtype` filled with zeros."""
    arr = empty(dev, shape, dtype)
    arr.fill_zero()
    return arr
