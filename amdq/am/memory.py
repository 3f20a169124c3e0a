"""The runtime's memory on an AM device: buffers at addresses of the process-wide GPU address window
(am/va.py), mapped into VM context 0 (the GMC's page tables, am/vm.py).

Kinds, as the interface protocol names them (iface/base.py Allocation):
- "vram": VRAM from the heap pool (am/tlsf.py); CPU-visible through BAR0 when `cpu` (on a small BAR from
  the part BAR0 shows), GPU-only otherwise (the hidden pool first where there is one);
- "gtt" / "uncached": host memory pinned for the function (its `dma_alloc`: VFIO's IOMMU on hardware, the
  simulated host memory on SIMPCI), mapped with SYSTEM and SNOOPED (UNCACHED: MTYPE UC, so the GPU's
  caches never hold it: queue pointers, signals).

Every map and unmap ends with the HDP and TLB flushes of the GMC (VM's flush callback), so a buffer is
visible to the GPU once `alloc` returns and gone from every TLB once `free` returns.
"""
from __future__ import annotations

import threading
from typing import Any

from ..errors import DeviceError, OutOfMemory
from ..iface.base import Allocation, Mapping
from . import va as VA
from .vm import MapFlags

PAGE = 4096


class Memory:
    """Buffers of one AM device (see the module doc). `fn`: the PCI function (bar(0), dma_alloc/dma_free)."""

    def __init__(self, gmc: Any, fn: Any):
        self.gmc, self.fn = gmc, fn
        self.pools = gmc.pools
        self.bar0 = memoryview(fn.bar(0)).cast("B")
        self.lock = threading.Lock()
        self.live: dict[int, Allocation] = {}

    @property
    def vm(self):
        return self.gmc.vm

    def alloc(self, size: int, kind: str = "vram", uncached: bool = False, cpu: bool = True,
              executable: bool = False) -> Allocation:
        """A buffer of `size` bytes (rounded up to pages) of `kind` ("vram" or "gtt"), mapped for the GPU."""
        if size <= 0:
            raise DeviceError(f"allocation of {size} bytes")
        size = (size + PAGE - 1) & -PAGE
        if kind not in ("vram", "gtt"):
            raise DeviceError(f"memory kind {kind!r}: an AM device has vram and gtt")
        va = VA.shared().alloc(size)
        try:
            if kind == "vram":
                a = self._vram(va, size, cpu, executable)
            else:
                a = self._host(va, size, uncached, executable)
        except BaseException:
            VA.shared().free(va)
            raise
        with self.lock:
            self.live[va] = a
        return a

    def _vram(self, va: int, size: int, cpu: bool, executable: bool) -> Allocation:
        pools = [self.pools.heap] if cpu or self.pools.hidden is None else [self.pools.hidden, self.pools.heap]
        err: OutOfMemory | None = None
        for pool in pools:
            try:
                off = pool.alloc(size, VA.default_alignment(size))
                break
            except OutOfMemory as e:
                err = e
        else:
            raise OutOfMemory(f"VRAM for {size} bytes ({'CPU-visible' if cpu else 'GPU-only'}): {err}") from None
        try:
            self.vm.map(va, self.vm.vram_pa(off), size, MapFlags(executable=executable))
        except BaseException:
            self.pools.free(off)
            raise
        mapping = Mapping(va, size, self.bar0[off:off + size]) if cpu and off + size <= len(self.bar0) else None
        return Allocation(va, size, "vram", ("vram", off), mapping, {"vram_offset": off})

    def _host(self, va: int, size: int, uncached: bool, executable: bool) -> Allocation:
        dma = self.fn.dma_alloc(size)
        try:
            self.vm.map(va, dma.bus, size, MapFlags.host(executable=executable, mtype="UC" if uncached else "NC"))
        except BaseException:
            self.fn.dma_free(dma)
            raise
        return Allocation(va, size, "uncached" if uncached else "gtt", ("host", dma), Mapping(va, size, dma.cpu),
                          {"bus": dma.bus})

    def free(self, a: Allocation) -> None:
        with self.lock:
            if self.live.pop(a.va, None) is None:
                raise DeviceError(f"free of {a.va:#x}: not a live allocation of this device")
        self.vm.unmap(a.va, a.size)                     # flushed before the memory is reused
        where, what = a.handle
        if where == "vram":
            self.pools.free(what)
        else:
            self.fn.dma_free(what)
        VA.shared().free(a.va)

    def available(self, kind: str = "vram") -> int | None:
        """Free VRAM bytes (heap pools); None for host memory (the OS's)."""
        if kind != "vram":
            return None
        return self.pools.heap.free_bytes + (self.pools.hidden.free_bytes if self.pools.hidden else 0)

    def close(self) -> None:
        """Every buffer still live unmapped and given back (the session ends)."""
        for a in list(self.live.values()):
            try:
                self.free(a)
            except DeviceError:
                pass
