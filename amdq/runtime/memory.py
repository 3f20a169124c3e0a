"""Device memory: an allocator with an LRU cache of freed allocations, and the public Buffer."""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidArgument, OutOfMemory
from ..iface.base import Allocation

if TYPE_CHECKING:
    from .device import Device

PAGE = 4096


class Allocator:
    """Allocations of one interface, with freed ones kept (up to `cache_bytes`) for reuse by size.

    `live` counts the bytes handed out and not freed, `cached` the bytes kept for reuse. A failed
    allocation changes neither, unless returning the cache to the driver could have made it fit (the
    interface's `available()` memory plus the cached bytes of that kind reach the request, or the
    interface cannot tell): then the cache is emptied first and stays so if the retry fails too. What
    was live stays live and usable either way; the interface gives back whatever a failed attempt took.
    """

    def __init__(self, iface, cache_bytes: int = 256 << 20):
        self.iface, self.cache_bytes = iface, cache_bytes
        self.cache: OrderedDict[tuple, list[Allocation]] = OrderedDict()
        self.cached = 0
        self.live = 0
        self.live_allocs: dict[int, Allocation] = {}          # by GPU address: to name a faulting address
        self.live_by: dict[str, int] = {}                     # live bytes per memory kind
        self.peak_by: dict[str, int] = {}                     # the most live bytes per kind at once

    def alloc(self, size: int, kind: str = "vram", **kw) -> Allocation:
        size = max(PAGE, (size + PAGE - 1) & -PAGE)
        key = (size, kind, tuple(sorted(kw.items())))        # a CPU-less or uncached block is reused as such
        if self.cache.get(key):
            a = self.cache[key].pop()
            self.cached -= size
            self.live += size
            self._grow(kind, size)
            a.meta.pop("nbytes", None)
            a.meta.pop("what", None)
            if a.cpu is not None:
                a.cpu.reuse()                                # its last user's coherence hints are not the new one's
            self.live_allocs[a.va] = a
            return a
        try:
            a = self.iface.alloc(size, kind, **kw)
        except (OutOfMemory, OSError) as e:
            avail = self._available(kind)
            cached = self.cached_bytes(kind)
            if avail is not None and size > avail + cached:
                raise self._oom(size, kind, avail, e) from None
            self.trim(0)
            try:
                a = self.iface.alloc(size, kind, **kw)
            except (OutOfMemory, OSError) as e2:
                raise self._oom(size, kind, self._available(kind), e2) from None
        self.live += size
        self._grow(kind, size)
        a.meta["cache_key"] = key
        self.live_allocs[a.va] = a
        return a

    def _grow(self, kind: str, size: int) -> None:
        n = self.live_by.get(kind, 0) + size
        self.live_by[kind] = n
        if n > self.peak_by.get(kind, 0):
            self.peak_by[kind] = n

    def stats(self) -> dict[str, dict[str, int]]:
        """Per memory kind: live, cached and peak bytes."""
        kinds = set(self.live_by) | set(self.peak_by) | {k[1] for k, lst in self.cache.items() if lst}
        return {k: {"live": self.live_by.get(k, 0), "cached": self.cached_bytes(k), "peak": self.peak_by.get(k, 0)}
                for k in sorted(kinds)}

    def reset_peak(self) -> None:
        """Peaks start over at the live bytes."""
        self.peak_by = dict(self.live_by)

    def _available(self, kind: str) -> int | None:
        f = getattr(self.iface, "available", None)
        return f(kind) if f is not None else None

    def cached_bytes(self, kind: str | None = None) -> int:
        """Bytes cached for reuse (of one kind of memory, or all)."""
        if kind is None:
            return self.cached
        return sum(k[0] * len(lst) for k, lst in self.cache.items() if k[1] == kind)

    def _oom(self, size: int, kind: str, avail: int | None, cause: Exception) -> OutOfMemory:
        free = f"{avail} bytes available, " if avail is not None else ""
        return OutOfMemory(f"cannot allocate {size} bytes of {kind} memory ({free}{self.live} bytes live, "
                           f"{self.cached} cached): {cause}")

    def free(self, a: Allocation) -> None:
        self.live -= a.size
        k = a.meta.get("cache_key", (a.size, a.kind, ()))[1]
        self.live_by[k] = self.live_by.get(k, 0) - a.size
        self.live_allocs.pop(a.va, None)
        if a.meta.get("shared"):                        # mapped by a peer: given back now, which takes those down
            self.iface.free(a)
            return
        key = a.meta.get("cache_key", (a.size, a.kind, ()))
        self.cache.setdefault(key, []).append(a)
        self.cache.move_to_end(key)
        self.cached += a.size
        self.trim(self.cache_bytes)

    def trim(self, limit: int) -> None:
        """Give cached allocations back until at most `limit` bytes stay cached (oldest first)."""
        while self.cached > limit and self.cache:
            key, lst = next(iter(self.cache.items()))
            if not lst:
                del self.cache[key]
                continue
            a = lst.pop()
            self.cached -= a.size
            self.iface.free(a)


class Buffer:
    """A range of device memory (raw bytes; `dev.array` makes typed arrays). `addr` is its GPU virtual address.
    Once freed, every use (as a kernel argument, read, write, copy, a second free) raises InvalidArgument."""

    dtype = None                                      # raw bytes: a typed pointer argument takes any Buffer

    def __init__(self, dev: "Device", alloc: Allocation, size: int, owned: bool = True):
        self.dev, self.alloc, self.size, self._owned = dev, alloc, size, owned
        self._va = alloc.va

    @property
    def addr(self) -> int:
        """The buffer's GPU virtual address (InvalidArgument once freed)."""
        a = self.alloc
        if a is None:
            raise self._freed()
        return a.va

    @property
    def freed(self) -> bool:
        """Whether the buffer was freed."""
        return self.alloc is None

    def _freed(self, what: str = "use") -> InvalidArgument:
        return InvalidArgument(f"{what} of a freed buffer: the {self.size}-byte buffer that was at {self._va:#x} on "
                               f"{self.dev.name}; allocate a new one")

    def __repr__(self) -> str:
        where = f"at {self.alloc.va:#x}" if self.alloc is not None else f"(freed, was at {self._va:#x})"
        return f"<Buffer {self.size} bytes {where} on {self.dev.name}>"

    def write(self, data, offset: int = 0) -> None:
        """Copy bytes or an array into the buffer (after the GPU finished work submitted so far); from 1 MiB on an idle
        device, one SDMA copy straight from its pages (pinned, amdq/runtime/hostmem.py), else through staging."""
        if self.alloc is None:
            raise self._freed("write")
        if isinstance(data, np.ndarray) and data.dtype.hasobject:
            raise InvalidArgument(f"cannot write an array of dtype {data.dtype}: it holds Python object pointers")
        raw = memoryview(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data).cast("B")
        if offset < 0 or offset + raw.nbytes > self.size:
            raise ValueError(f"write of {raw.nbytes} bytes at offset {offset} exceeds the {self.size}-byte buffer")
        self.dev._copy_in(self, offset, raw)

    def read(self, size: int | None = None, offset: int = 0) -> bytes:
        """The buffer's bytes, once the GPU finished the work submitted so far."""
        if self.alloc is None:
            raise self._freed("read")
        size = self.size - offset if size is None else size
        if offset < 0 or offset + size > self.size:
            raise ValueError(f"read of {size} bytes at offset {offset} exceeds the {self.size}-byte buffer")
        return self.dev._copy_out(self, offset, size)

    def read_into(self, out, offset: int = 0) -> None:
        """Copy the buffer's bytes from `offset` into `out` (a writable, contiguous buffer: a numpy array, a
        bytearray, a memoryview; as many bytes as it holds), once the GPU finished the work submitted so far.
        No new host memory is touched: from 1 MiB on the SDMA engine copies straight into its pages (pinned), below
        that it costs one copy out of staging."""
        if self.alloc is None:
            raise self._freed("read")
        try:
            mv = memoryview(out)
        except TypeError:
            raise InvalidArgument(f"read_into needs a writable buffer (numpy array, bytearray), not "
                                  f"{type(out).__name__}") from None
        if mv.readonly or not mv.c_contiguous:
            raise InvalidArgument("read_into needs a writable, contiguous buffer")
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        if offset < 0 or offset + mv.nbytes > self.size:
            raise ValueError(f"read of {mv.nbytes} bytes at offset {offset} exceeds the {self.size}-byte buffer")
        if mv.nbytes:
            self.dev._copy_out(self, offset, mv.nbytes, mv)

    def numpy(self, dtype=np.float32, shape=None) -> np.ndarray:
        """The buffer's bytes as a new (writable) array of `dtype`, reshaped to `shape` if given."""
        dtype = np.dtype(dtype)
        n = self.size // dtype.itemsize
        arr = np.empty(n, dtype)
        self.read_into(arr)
        return arr.reshape(shape) if shape is not None else arr

    def free(self) -> None:
        """Give the memory back (once the GPU finished the work submitted so far). A second free raises."""
        if self.alloc is None:
            raise self._freed("free")
        if self._owned:
            self.dev._release(self)
            self.alloc = None

    def __del__(self):
        try:
            if self._owned and self.alloc is not None and not self.dev.closed:
                self.dev._release(self)
        except Exception:
            pass
