"""DMA windows onto pinned process memory: how a simulated GPU reaches a user's own pages (KFD USERPTR buffers,
AM host registrations), as an IOMMU maps pinned user pages at I/O virtual addresses (IOVA) for devices.

A window maps the whole pages of a user range [addr & ~4095, round_up(addr + size)) at one IOVA-contiguous
range: the IOVA of the first page is 2 MiB aligned, so a GPU mapping at a 2 MiB-aligned VA can use huge pages and
the MMU caches the window as one run. The GPU resolves a SYSTEM physical address through `resolve` as it does
host RAM; an address in no window has nothing behind it (the GPU faults).

Pinning is the caller's part: the pages must stay mapped in the process while their window exists (the runtime
holds the Python object owning them and unmaps before letting go, amdq/runtime/hostmem.py), as get_user_pages
holds them on a real kernel. The simulator reads and writes them directly (the memory is the process's own).

Simulator choices (not facts): windows start at IOVA_BASE (256 GiB, above the simulated host RAM and below the
BAR windows of sim/host.py) and are 2 MiB aligned; an unmapped window's range is reused.
"""
from __future__ import annotations

import bisect
import ctypes
import threading

import numpy as np

PAGE = 4096
HUGE = 2 << 20
IOVA_BASE = 1 << 38
IOVA_LIMIT = 1 << 40


class UserPages:
    """Pinned pages of the process as a memory the MMU can name (an Arena's `buf`, `size`, `name`)."""

    def __init__(self, addr: int, size: int):
        self.addr, self.size, self.name = addr, size, f"pinned user pages at {addr:#x}"
        self.buf = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(addr)) if size else np.zeros(0, np.uint8)


class DMAWindows:
    """IOVA windows onto pinned user pages (see the module doc): `map` places one, `unmap` takes it away, `resolve`
    turns a bus address into (memory, offset)."""

    def __init__(self, base: int = IOVA_BASE, limit: int = IOVA_LIMIT):
        self.base, self.limit = base, limit
        self._lock = threading.Lock()
        # (sorted IOVAs of the windows, their pages): replaced whole on change, so lookups take no lock
        self._windows: tuple[list[int], list[UserPages]] = ([], [])

    def map(self, addr: int, size: int) -> int:
        """Map the pages holding [addr, addr + size) (addr and size page aligned); the IOVA of the first page.
        MemoryError when no IOVA range of that size is left."""
        if addr % PAGE or size % PAGE or size <= 0 or addr <= 0:
            raise ValueError(f"DMA window of {size:#x} bytes at {addr:#x}: page-aligned, non-empty ranges only")
        pages = UserPages(addr, size)
        with self._lock:
            starts, all_pages = self._windows
            iova = self.base
            for s, p in zip(starts, all_pages):
                if iova + size <= s:
                    break
                iova = max(iova, -(-(s + p.size) // HUGE) * HUGE)
            if iova + size > self.limit:
                raise MemoryError(f"no {size:#x}-byte IOVA range left below {self.limit:#x}")
            i = bisect.bisect_left(starts, iova)
            self._windows = (starts[:i] + [iova] + starts[i:], all_pages[:i] + [pages] + all_pages[i:])
        return iova

    def unmap(self, iova: int) -> None:
        """Take the window at `iova` away (the GPU's later accesses there fault)."""
        with self._lock:
            starts, pages = self._windows
            if iova not in starts:
                raise ValueError(f"no DMA window at IOVA {iova:#x}")
            i = starts.index(iova)
            self._windows = (starts[:i] + starts[i + 1:], pages[:i] + pages[i + 1:])

    def resolve(self, addr: int, n: int) -> tuple[UserPages, int] | None:
        """(pages, offset) behind the `n` bytes at IOVA `addr`, or None if no one window holds them."""
        starts, pages = self._windows
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr + n > starts[i] + pages[i].size:
            return None
        return pages[i], addr - starts[i]

    def __len__(self) -> int:
        return len(self._windows[0])
