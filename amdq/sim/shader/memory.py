"""The shader core's view of memory: GPU virtual addresses to bytes, per lane, vectorised.

A memory model (the simulated device's MMU, or `FlatMemory` for running a kernel on its own)
implements `translate`; the load/store/atomic helpers here do the rest. A lane touching an address
the model does not map raises GPUFault naming the first such address.
"""
from __future__ import annotations

import bisect
from typing import Protocol

import numpy as np

from ...errors import GPUFault, OutOfMemory

Chunk = tuple[np.ndarray, "np.ndarray | None", np.ndarray]   # (backing uint8 array, lane indices or None=all, offsets)


class GPUMemory(Protocol):
    def translate(self, addr: np.ndarray, nbytes: int, write: bool) -> list[Chunk]:
        """Split lanes by backing store; every lane's [addr, addr+nbytes) must be mapped, else GPUFault."""


PAGE = 4096


class FlatMemory:
    """A bump-allocated arena of GPU virtual memory: what a kernel sees when run without a device."""

    def __init__(self, size: int = 1 << 30, base: int = 0x1000_0000_0000):
        self.base, self.size = base, size
        self.buf = np.zeros(size, np.uint8)            # zero pages are not touched until written
        self.top = 0
        self.starts: list[int] = []                     # allocation starts and ends (virtual), sorted
        self.ends: list[int] = []

    def alloc(self, nbytes: int, align: int = 256) -> int:
        off = (self.top + align - 1) & -align
        if off + nbytes > self.size:
            raise OutOfMemory(f"flat memory: {nbytes} bytes requested, {self.size - off} free of {self.size}")
        self.top = off + max(nbytes, 1)
        self.starts.append(self.base + off)
        self.ends.append(self.base + off + nbytes)
        return self.base + off

    def upload(self, data: bytes | np.ndarray, align: int = 256) -> int:
        raw = np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), np.uint8)
        addr = self.alloc(len(raw), align)
        self.write(addr, raw)
        return addr

    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        raw = np.frombuffer(data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes(), np.uint8)
        self.buf[addr - self.base:addr - self.base + len(raw)] = raw

    def read(self, addr: int, nbytes: int) -> bytes:
        return self.buf[addr - self.base:addr - self.base + nbytes].tobytes()

    def translate(self, addr: np.ndarray, nbytes: int, write: bool) -> list[Chunk]:
        lo, hi = int(addr.min()), int(addr.max()) + nbytes
        i = bisect.bisect_right(self.starts, lo) - 1
        if i >= 0 and hi <= self.ends[i]:               # every lane inside one allocation
            return [(self.buf, None, (addr - np.uint64(self.base)).astype(np.int64))]
        starts = np.array(self.starts, np.uint64)
        ends = np.array(self.ends, np.uint64)
        j = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
        ok = (j >= 0) & (addr + np.uint64(nbytes) <= ends[np.maximum(j, 0)])
        if not ok.all():
            bad = int(addr[np.argmin(ok)])
            raise GPUFault(f"GPU page fault: {'write' if write else 'read'} of {nbytes} bytes at {bad:#x} "
                           f"(not mapped)", address=bad, write=write)
        return [(self.buf, None, (addr - np.uint64(self.base)).astype(np.int64))]


def _gather(buf: np.ndarray, off: np.ndarray, nbytes: int) -> np.ndarray:
    words = max(1, nbytes // 4)
    if nbytes >= 4 and not (off & 3).any():
        return buf.view(np.uint32)[(off >> 2)[:, None] + np.arange(words)] if words > 1 else \
            buf.view(np.uint32)[off >> 2][:, None]
    if nbytes >= 4:
        return np.ascontiguousarray(buf[off[:, None] + np.arange(nbytes)]).view(np.uint32).reshape(-1, words)
    if nbytes == 2:
        b = buf[off[:, None] + np.arange(2)].astype(np.uint32)
        return (b[:, 0] | b[:, 1] << 8)[:, None]
    return buf[off].astype(np.uint32)[:, None]


def load(mem: GPUMemory, addr: np.ndarray, nbytes: int) -> np.ndarray:
    """Bytes at each lane's address: uint32 array (n, max(1, nbytes/4)); 1- and 2-byte loads zero-extend."""
    chunks = mem.translate(addr, nbytes, False)
    if len(chunks) == 1 and chunks[0][1] is None:
        return _gather(chunks[0][0], chunks[0][2], nbytes)
    out = np.empty((addr.shape[0], max(1, nbytes // 4)), np.uint32)
    for buf, idx, off in chunks:
        out[idx] = _gather(buf, off, nbytes)
    return out


def store(mem: GPUMemory, addr: np.ndarray, data: np.ndarray, nbytes: int) -> None:
    """Write each lane's data (uint32 (n, words), or (n,) for sub-dword stores) in lane order."""
    data = np.ascontiguousarray(data, np.uint32).reshape(addr.shape[0], -1)
    for buf, idx, off in mem.translate(addr, nbytes, True):
        d = data if idx is None else data[idx]
        if nbytes >= 4 and not (off & 3).any():
            words = nbytes // 4
            buf.view(np.uint32)[(off >> 2)[:, None] + np.arange(words)] = d[:, :words]
        else:
            raw = d.view(np.uint8).reshape(len(d), -1)[:, :nbytes]
            buf[off[:, None] + np.arange(nbytes)] = raw
