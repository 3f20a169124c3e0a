"""The host side of the simulated machine, one per process and shared by every simulated PCI function: its RAM,
and the PCIe bus address map that a GPU page-table entry with the SYSTEM bit names.

Bus addresses:
* host RAM at 0 .. HOST_BYTES, so a buffer in host memory has one bus address on every GPU (RAM behind an
  IOMMU identity map);
* from 256 GiB (sim/iommu.py IOVA_BASE) to MMIO64_BASE, the host IOMMU's windows onto pinned user pages (a
  driver's DMA mapping of a process's own buffer: `iommu`);
* from MMIO64_BASE up, the 64-bit BARs of the functions: each function claims a window for each such BAR when
  it is created, aligned to the BAR's size rounded up to a power of two (a memory BAR decodes a naturally
  aligned, power-of-two range: PCI Local Bus specification, Base Address Registers), and reports its start in
  the BAR's config-space register, as the host's resource assignment would.

A bus access that falls in a window with memory behind it (BAR0: the function's VRAM, the first bar_sizes[0]
bytes of it) reaches that memory while the owner's memory decoding is on: peer-to-peer over PCIe. Any other
address has nothing behind it (`resolve` gives None), and the GPU that made the access faults.

Simulator choices (not facts): RAM starts at 0 and has no 32-bit MMIO hole below 4 GiB, so a 32-bit BAR (the
register BAR5) gets no bus address; windows start at 1 TiB; a window's address is reused once its function is
closed.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from .iommu import IOVA_BASE, IOVA_LIMIT, DMAWindows
from .memory import Arena

HOST_BYTES = 64 << 30                # reserved lazily: nothing is backed until it is written
MMIO64_BASE = 1 << 40                # where the 64-bit BAR windows begin
BUS_LIMIT = 1 << 48                  # a PTE names bus addresses of 48 bits (ADDR 47:12)
_lock = threading.Lock()
_arena: Arena | None = None
_bus: "Bus | None" = None


@dataclass(frozen=True)
class Window:
    """A BAR's range on the bus: [base, base + size) reaches `arena` from `offset` while `live()` says so
    (the owner decodes memory); `arena` None: nothing a DMA can reach (doorbells, registers)."""
    base: int
    size: int
    name: str
    arena: Arena | None = None
    offset: int = 0
    live: Callable[[], bool] | None = None

    @property
    def end(self) -> int:
        return self.base + self.size


class Bus:
    """The PCIe bus address map over the host's RAM (see the module doc)."""

    def __init__(self, ram: Arena, mmio_base: int = MMIO64_BASE, limit: int = BUS_LIMIT):
        if mmio_base < ram.size:
            raise ValueError(f"the BAR windows at {mmio_base:#x} would overlap host RAM (0..{ram.size:#x})")
        self.ram, self.mmio_base, self.limit = ram, mmio_base, limit
        self._lock = threading.Lock()
        self._windows: list[Window] = []              # sorted by base
        self.iommu = DMAWindows() if ram.size <= IOVA_BASE and IOVA_LIMIT <= mmio_base else None

    def claim(self, name: str, size: int, arena: Arena | None = None, offset: int = 0,
              live: Callable[[], bool] | None = None) -> int:
        """Place a BAR of `size` bytes on the bus (the lowest free aligned address from MMIO64_BASE); its base."""
        if size <= 0:
            raise ValueError(f"{name}: a BAR of {size} bytes")
        align = 1 << (size - 1).bit_length()
        with self._lock:
            base = -(-self.mmio_base // align) * align
            for w in self._windows:
                if base + size <= w.base:
                    break
                if w.end > base:
                    base = -(-w.end // align) * align
            if base + size > self.limit:
                raise MemoryError(f"{name}: no {size:#x}-byte window left below {self.limit:#x} on the simulated bus")
            self._windows = sorted(self._windows + [Window(base, size, name, arena, offset, live)],
                                   key=lambda w: w.base)      # a new list: lookups never lock
        return base

    def release(self, base: int) -> None:
        """The window at `base` leaves the bus (its function is gone)."""
        with self._lock:
            self._windows = [w for w in self._windows if w.base != base]

    def window(self, addr: int) -> Window | None:
        """The BAR window holding bus address `addr`, or None."""
        for w in self._windows:
            if w.base <= addr < w.end:
                return w
        return None

    def resolve(self, addr: int, n: int) -> tuple[Arena, int] | None:
        """(memory, offset in it) behind the `n` bus bytes at `addr`, or None if nothing (one memory) answers."""
        if addr < 0:
            return None
        if addr + n <= self.ram.size:
            return self.ram, addr
        if self.iommu is not None and IOVA_BASE <= addr < IOVA_LIMIT:
            return self.iommu.resolve(addr, n)
        w = self.window(addr)
        if w is None or w.arena is None or addr + n > w.end or (w.live is not None and not w.live()):
            return None
        return w.arena, w.offset + (addr - w.base)


def host_memory() -> Arena:
    """The process's host memory arena (created on first use)."""
    global _arena
    with _lock:
        if _arena is None:
            _arena = Arena("host memory", HOST_BYTES)
        return _arena


def host_bus() -> Bus:
    """The process's PCIe bus, over its host memory (created on first use)."""
    global _bus
    ram = host_memory()
    with _lock:
        if _bus is None:
            _bus = Bus(ram)
        return _bus
