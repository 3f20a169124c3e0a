"""Physical memory of the simulated GPU: VRAM and the host's system memory, both lazily backed.

Both are anonymous mappings reserved without swap accounting, so a 24 GiB VRAM costs nothing until a
page is written. `advise_huge` asks the host kernel for transparent huge pages (madvise MADV_HUGEPAGE, where THP
is in "madvise" mode) over the 2 MiB chunks of a range: the SDMA engine does so for the destinations of its large
copies, which then run at the speed of numpy's own (huge-page) arrays instead of taking a TLB miss every 4 KiB.
Only there: a whole arena on huge pages makes every first touch of a 2 MiB chunk zero (and perhaps compact) 2 MiB,
which on a loaded host stalled small first accesses for hundreds of milliseconds.
"""
from __future__ import annotations

import bisect
import mmap

import numpy as np

MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)
HUGE = 2 << 20


class Arena:
    """A byte-addressed physical memory (VRAM or system memory) with a page allocator: first fit over
    address-sorted holes below `top`, which merge on free (and give `top` back), so alloc/free cycles of
    any sizes do not fragment it for good. `used` counts the bytes allocated."""

    def __init__(self, name: str, size: int, page: int = 4096):
        self.name, self.size, self.page = name, size, page
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
        self._huge: set[int] | None = set() if hasattr(mmap, "MADV_HUGEPAGE") else None   # 2 MiB chunks advised
        self.buf = np.frombuffer(self._map, np.uint8)
        self.top = 0
        self.used = 0
        self.free_list: list[tuple[int, int]] = []      # (addr, size) holes below top, sorted by address

    def alloc(self, size: int, align: int = 4096) -> int:
        """Physical address of `size` contiguous bytes; raises MemoryError when the arena is full."""
        size = (size + self.page - 1) & -self.page
        fl = self.free_list
        for i, (a, s) in enumerate(fl):
            start = (a + align - 1) & -align
            if start + size <= a + s:
                fl[i:i + 1] = [h for h in ((a, start - a), (start + size, a + s - start - size)) if h[1]]
                self.used += size
                return start
        start = (self.top + align - 1) & -align
        if start + size > self.size:
            raise MemoryError(f"{self.name}: {size} bytes requested, {self.size - start} left of {self.size} "
                              f"({self.used} in use)")
        if start > self.top:
            fl.append((self.top, start - self.top))
        self.top = start + size
        self.used += size
        return start

    def free(self, addr: int, size: int) -> None:
        size = (size + self.page - 1) & -self.page
        self._map.madvise(mmap.MADV_DONTNEED, addr, size)    # zero pages, and give them back to the host
        self.used -= size
        fl = self.free_list
        i = bisect.bisect_left(fl, (addr, 0))
        end = addr + size
        if i < len(fl) and fl[i][0] == end:                 # merge with the hole above
            end += fl.pop(i)[1]
        if i > 0 and fl[i - 1][0] + fl[i - 1][1] == addr:   # and with the one below
            i -= 1
            addr = fl.pop(i)[0]
        if end == self.top:                                  # the topmost hole shrinks the arena instead
            self.top = addr
        else:
            fl.insert(i, (addr, end - addr))

    def advise_huge(self, addr: int, size: int) -> None:
        """Ask for transparent huge pages over the whole 2 MiB chunks of [addr, addr + size) (once per chunk; the
        pages already touched stay as they are)."""
        if self._huge is None:
            return
        lo, hi = -(-addr // HUGE), (addr + size) // HUGE
        for c in range(lo, hi):
            if c not in self._huge:
                self._huge.add(c)
                try:
                    self._map.madvise(mmap.MADV_HUGEPAGE, c * HUGE, HUGE)
                except OSError:                              # (a kernel without THP: 4 KiB pages it is)
                    self._huge = None
                    return

    def view(self, addr: int, size: int) -> memoryview:
        return memoryview(self._map)[addr:addr + size]

    def read(self, addr: int, size: int) -> bytes:
        return self.buf[addr:addr + size].tobytes()

    def write(self, addr: int, data: bytes) -> None:
        self.buf[addr:addr + len(data)] = np.frombuffer(bytes(data), np.uint8)

    def u32(self, addr: int) -> int:
        return int(self.buf[addr:addr + 4].view(np.uint32)[0])

    def u64(self, addr: int) -> int:
        return int(self.buf[addr:addr + 8].view(np.uint64)[0])
