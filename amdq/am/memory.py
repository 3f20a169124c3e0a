"""The runtime's memory on an AM device: buffers at addresses of the process-wide GPU address window
(am/va.py), mapped into VM context 0 (the GMC's page tables, am/vm.py).

Kinds, as the interface protocol names them (iface/base.py Allocation):
- "vram": VRAM from the heap pool (am/tlsf.py); CPU-visible through BAR0 when `cpu` (on a small BAR from
  the part BAR0 shows), GPU-only otherwise (the hidden pool first where there is one);
- "gtt" / "uncached": host memory pinned for the function (its `dma_alloc`: VFIO's IOMMU on hardware, the
  simulated host memory on SIMPCI), mapped with SYSTEM and SNOOPED (UNCACHED: MTYPE UC, so the GPU's
  caches never hold it: queue pointers, signals).

- "userptr" (`register_host`): the process's own pages, which the function maps for its DMA (`dma_map`: VFIO's
  IOMMU on hardware, sim/iommu.py on SIMPCI), mapped like "gtt" at a GPU address of their own; the caller keeps
  the pages alive until it frees the registration.

A function that cannot pin host memory for the GPU (real hardware without VFIO's IOMMU mappings in this
build) gets CPU-visible VRAM for "gtt" and "uncached" buffers instead, as AM drivers commonly run everything
from VRAM; the allocation's meta says `instead_of`.

Every map and unmap ends with the HDP and TLB flushes of the GMC (VM's flush callback), so a buffer is
visible to the GPU once `alloc` returns and gone from every TLB once `free` returns.

Peers (`map_peer` / `unmap_peer`): a live buffer of another AM device is mapped into this device's VM context 0 at
its own GPU address (the address window is the process's, so no other buffer is there): VRAM through the peer's
BAR0 or over XGMI (am/peer.py), host memory at its bus address (host memory is the same for every device). The
mapping is the importer's ("peer" kind, no CPU view); when the owner frees the buffer (or closes), every importer's
mapping is taken down first, flushed, so no GPU reaches the memory once it can be reused: an access then faults on
the device that makes it. Mapping does not order work: the owner's writes must be finished (synchronized) before a
peer reads them.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from ..errors import DeviceError, OutOfMemory
from ..iface.base import Allocation, Mapping
from . import va as VA
from .peer import bar_bus_address, route
from .vm import MapFlags

PAGE = 4096


class Memory:
    """Buffers of one AM device (see the module doc). `fn`: the PCI function (bar(0), dma_alloc/dma_free)."""

    def __init__(self, gmc: Any, fn: Any):
        self.gmc, self.fn = gmc, fn
        self.pools = gmc.pools
        bar0 = fn.bar(0)
        window = hasattr(bar0, "read") and hasattr(bar0, "write")       # BAR0 over a bridge (iface/usb.py)
        self.bar0 = memoryview(bar0).cast("B") if not window else None
        self.bar0_size = len(bar0) if window else len(self.bar0)
        self.cpu_view = getattr(fn, "vram_mapping", None)   # the function's own CPU view of VRAM (va, offset, size)
        self.lock = threading.Lock()
        self.live: dict[int, Allocation] = {}
        self.host_memory = True          # False once the function says it cannot pin host memory for the GPU
        self.peers: dict[int, tuple[Allocation, "Memory"]] = {}     # VA -> (mapping here, the owner's Memory)
        self.exported: dict[int, set["Memory"]] = {}               # VA of a live buffer -> Memories mapping it

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
        mapping = None
        if cpu and off + size <= self.bar0_size:
            mapping = self.cpu_view(va, off, size) if self.cpu_view is not None else \
                Mapping(va, size, self.bar0[off:off + size])
        return Allocation(va, size, "vram", ("vram", off), mapping, {"vram_offset": off})

    def _host(self, va: int, size: int, uncached: bool, executable: bool) -> Allocation:
        if not self.host_memory:
            a = self._vram(va, size, True, executable)          # CPU-visible VRAM stands in for host memory
            a.meta["instead_of"] = "uncached" if uncached else "gtt"
            return a
        try:
            dma = self.fn.dma_alloc(size)
        except DeviceError as e:
            if not getattr(e, "unsupported", False):
                raise
            self.host_memory = False                            # the function cannot pin host memory (see doc)
            return self._host(va, size, uncached, executable)
        try:
            self.vm.map(va, dma.bus, size, MapFlags.host(executable=executable, mtype="UC" if uncached else "NC"))
        except BaseException:
            self.fn.dma_free(dma)
            raise
        return Allocation(va, size, "uncached" if uncached else "gtt", ("host", dma), Mapping(va, size, dma.cpu),
                          {"bus": dma.bus})

    def register_host(self, addr: int, size: int, writable: bool = True) -> Allocation:
        """The process's pages [addr, addr + size) (page aligned) mapped for the GPU (kind "userptr", no CPU view:
        the caller has the pages). DeviceError (`unsupported` set) where the function cannot map user pages."""
        if addr % PAGE or size % PAGE or size <= 0:
            raise DeviceError(f"register_host of {size:#x} bytes at {addr:#x}: page-aligned ranges only")
        dma_map = getattr(self.fn, "dma_map", None)
        if dma_map is None:
            e = DeviceError(f"{getattr(self.fn, 'name', 'the function')} cannot map user pages for the GPU")
            e.unsupported = True
            raise e
        dma = dma_map(addr, size)
        va = VA.shared().alloc(size)
        try:
            self.vm.map(va, dma.bus, size, MapFlags.host(writeable=writable))
        except BaseException:
            VA.shared().free(va)
            self.fn.dma_unmap(dma)
            raise
        a = Allocation(va, size, "userptr", ("user", dma), None, {"bus": dma.bus, "host": addr})
        with self.lock:
            self.live[va] = a
        return a

    def free(self, a: Allocation) -> None:
        with self.lock:
            if self.live.pop(a.va, None) is None:
                raise DeviceError(f"free of {a.va:#x}: not a live allocation of this device")
            importers = self.exported.pop(a.va, set())
        for m in importers:                             # no peer reaches it any more, then neither do we
            m._revoke(a.va)
        self.vm.unmap(a.va, a.size)                     # flushed before the memory is reused
        where, what = a.handle
        if where == "vram":
            self.pools.free(what)
        elif where == "user":
            self.fn.dma_unmap(what)                     # the pages are the process's alone again
        else:
            self.fn.dma_free(what)
        VA.shared().free(a.va)

    # -- peers ----------------------------------------------------------------------------------------
    def map_peer(self, peer: "Memory", a: Allocation, via: str | None = None, writable: bool = True) -> Allocation:
        """Map `a`, a live buffer of the device of `peer`, into this device's VM context 0 at `a.va` (see the
        module doc; `via` "pcie" or "xgmi" forces a route for VRAM). The mapping, for `unmap_peer`."""
        if peer is self:
            raise DeviceError(f"map_peer of {a.va:#x}: the buffer is this device's own, mapped already")
        with peer.lock:
            if peer.live.get(a.va) is not a:
                raise DeviceError(f"map_peer of {a.va:#x}: not a live allocation of the peer device")
            peer.exported.setdefault(a.va, set()).add(self)
        try:
            where, what = a.handle
            if where == "vram":
                r = route(self.gmc.xgmi, peer.gmc.xgmi, peer.gmc.vram_base, what, a.size,
                          bar_bus_address(peer.fn, 0), peer.fn.bar_sizes[0], via)
                via, pa, flags = r.via, r.pa, r.flags
            else:                                       # host memory: the same bus address for every device
                via, pa = "host", what.bus
                flags = MapFlags.host(mtype="UC" if a.kind == "uncached" else "NC")
            with self.lock:
                if a.va in self.peers:
                    raise DeviceError(f"map_peer of {a.va:#x}: mapped from the peer already")
                self.vm.map(a.va, pa, a.size, replace(flags, writeable=writable), peer=via == "xgmi")
                m = Allocation(a.va, a.size, "peer", ("peer", a), None, {"via": via, "pa": pa, "writable": writable})
                self.peers[a.va] = (m, peer)
        except BaseException:
            peer._unexport(a.va, self)
            raise
        with peer.lock:                                 # the owner may have freed it meanwhile: then it is not ours
            kept = peer.live.get(a.va) is a and self in peer.exported.get(a.va, ())
        if not kept:
            self._revoke(a.va)
            raise DeviceError(f"map_peer of {a.va:#x}: the peer freed the buffer while it was being mapped")
        return m

    def unmap_peer(self, m: Allocation) -> None:
        """Take down a mapping of `map_peer` (flushed: the GPU faults on it afterwards). A mapping the owner already
        took down (it freed the buffer) is left as it is."""
        with self.lock:
            ent = self.peers.get(m.va)
            if ent is None or ent[0] is not m:
                if m.meta.get("revoked"):
                    return
                raise DeviceError(f"unmap_peer of {m.va:#x}: not a peer mapping of this device")
            del self.peers[m.va]
            self.vm.unmap(m.va, m.size)
        ent[1]._unexport(m.va, self)

    def _unexport(self, va: int, importer: "Memory") -> None:
        """`importer` no longer maps this device's buffer at `va`."""
        with self.lock:
            users = self.exported.get(va)
            if users is not None:
                users.discard(importer)
                if not users:
                    del self.exported[va]

    def _revoke(self, va: int) -> None:
        """The owner frees the buffer at `va`: its mapping here goes (flushed) first."""
        with self.lock:
            ent = self.peers.pop(va, None)
            if ent is None:
                return
            ent[0].meta["revoked"] = True
            if self.vm is not None:
                self.vm.unmap(va, ent[0].size)

    def available(self, kind: str = "vram") -> int | None:
        """Free VRAM bytes (heap pools); None for host memory (the OS's)."""
        if kind != "vram":
            return None
        return self.pools.heap.free_bytes + (self.pools.hidden.free_bytes if self.pools.hidden else 0)

    def close(self) -> None:
        """Every peer mapping taken down, every buffer still live unmapped and given back (the session ends)."""
        for m, _ in list(self.peers.values()):
            try:
                self.unmap_peer(m)
            except DeviceError:
                pass
        for a in list(self.live.values()):
            try:
                self.free(a)
            except DeviceError:
                pass
