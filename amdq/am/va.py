"""GPU virtual addresses of the AM driver: one allocator for the whole process, shared by every AM device, so a
buffer has the same GPU address on every GPU that maps it (peer access, multi-GPU graphs need no address
translation).

The window is 16 TiB at 0x2000_0000_0000 (bit 45) in the 48-bit GPU address space: in the lower half that
every generation translates with the 4-level layout (amdq.hw.vm), far from address 0 (a null pointer
faults) and from where Linux puts a process's mmaps (just below 0x7FFF_FFFF_FFFF, top down), so it does
not meet the host addresses the KFD path uses as GPU addresses (iface/kfd.py maps each buffer at the
address of an anonymous mmap reservation: the kernel picks those, and there is no allocator of its own to
share). The engine is the TLSF of am/tlsf.py over addresses instead of VRAM offsets.

Alignment: 2 MiB for buffers of 2 MiB and more (so am/vm.py can map them with huge pages when their VRAM
is 2 MiB-aligned too), the largest power of two not above the size from 64 KiB (the largest PTE fragment the
buffer fills: one TLB entry for all of it), else 4 KiB; or what the caller asks.
"""
from __future__ import annotations

import threading

from .tlsf import TLSF

VA_BASE = 0x2000_0000_0000
VA_SIZE = 16 << 40
PAGE = 4096
HUGE = 2 << 20
FRAGMENT = 64 << 10


def default_alignment(size: int) -> int:
    """The alignment a buffer of `size` bytes gets when the caller does not ask for one: the largest power of
    two not above its size between 64 KiB and 2 MiB (so its PTEs carry the largest fragment it can fill, and
    from 2 MiB on it maps with huge pages), 4 KiB below 64 KiB."""
    if size < FRAGMENT:
        return PAGE
    return min(HUGE, 1 << (size.bit_length() - 1))


class VAAllocator:
    """A thread-safe allocator of GPU virtual addresses in [base, base + size)."""

    def __init__(self, base: int = VA_BASE, size: int = VA_SIZE, name: str = "GPU virtual addresses"):
        self._lock = threading.Lock()
        self._tlsf = TLSF(base, size, PAGE, name=f"{name} {base:#x}..{base + size - 1:#x}")
        self.base, self.size = base, size

    def alloc(self, size: int, align: int | None = None) -> int:
        """A GPU virtual address for `size` bytes (rounded up to 4 KiB); OutOfMemory when the window is used up."""
        align = default_alignment(size) if align is None else max(align, PAGE)
        with self._lock:
            return self._tlsf.alloc(size, align)

    def free(self, va: int) -> None:
        """Give back the range at `va` (InvalidFree if it is not a live allocation)."""
        with self._lock:
            self._tlsf.free(va)

    def size_of(self, va: int) -> int:
        with self._lock:
            return self._tlsf.size_of(va)

    @property
    def free_bytes(self) -> int:
        return self._tlsf.free_bytes

    def largest_free(self) -> int:
        with self._lock:
            return self._tlsf.largest_free()

    def __contains__(self, va: int) -> bool:
        return self.base <= va < self.base + self.size


_shared: VAAllocator | None = None
_shared_lock = threading.Lock()


def shared() -> VAAllocator:
    """The process's one allocator, made on first use."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = VAAllocator()
    return _shared
