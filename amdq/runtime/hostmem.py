"""Pinned host memory: the caller's own pages mapped for the GPU, so host<->device copies are one SDMA pass
between them and VRAM (no staging copy), as a real runtime does with registered (locked) host memory.

A pin maps the whole pages holding a caller's buffer (the interface's `register_host`: a KFD USERPTR buffer, an
AM device's IOMMU mapping) and the SDMA engine copies from or to the buffer's bytes inside them, so a buffer need
not be page aligned: the copy starts at its offset in the first page and the bytes around it are never written.

Lifetime. A pin holds a memoryview of the object owning the memory, so the pages stay alive (and the object
unresized) while they are mapped; the mapping goes before the reference. Pins are cached for reuse, looked up by
address range (the pages of a live pin can belong to nothing else), for numpy arrays and bytes only (a cached
export would stop a bytearray or mmap from being resized or closed): a pin is dropped as soon as its object is
referenced by nothing but the pin (the caller let go: checked before and after every pinned copy), the least
recently used first beyond PIN_LIMIT bytes or PIN_COUNT pins, and in every case only once no submitted copy
still uses it.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import AmdqError
from ..iface.base import Allocation

log = logging.getLogger("amdq")

PAGE = 4096
PIN_MIN = 1 << 20                 # smaller copies go through staging: mapping costs more than the copy saves
PIN_LIMIT = 1 << 30               # pinned bytes kept cached at most
PIN_COUNT = 16                    # pins kept cached at most
_ALONE = 2                        # sys.getrefcount(pin.mv.obj) when the pin's view is the object's only holder
CACHEABLE = (np.ndarray, bytes)


@dataclass
class Pin:
    start: int                    # host address of the first mapped page
    end: int                      # host address past the last mapped page
    alloc: Allocation             # the GPU mapping (alloc.va: the GPU address of `start`)
    mv: memoryview | None         # holds the owner of the pages (None once released)
    writable: bool
    value: int = 0                # the copy queue's timeline value of the last copy using it

    def gpu(self, addr: int) -> int:
        """The GPU address of host address `addr` inside the pin."""
        return self.alloc.va + addr - self.start


def host_address(mv: memoryview) -> int:
    """The address of a contiguous buffer's first byte."""
    return np.frombuffer(mv, np.uint8).ctypes.data if mv.nbytes else 0


class HostPins:
    """The pins of one device (see the module doc). `register(mv, write)` gives a pin covering a buffer;
    `done(pin, value)` says the copy queue's submission `value` used it; `trim()` drops what is no longer needed."""

    def __init__(self, iface, queue):
        self.iface, self.queue = iface, queue          # the copy queue whose timeline says which copies finished
        self.pins: list[Pin] = []                     # cached, least recently used first
        self.supported = hasattr(iface, "register_host")

    @property
    def pinned(self) -> int:
        """Bytes mapped by cached pins."""
        return sum(p.end - p.start for p in self.pins)

    def register(self, mv: memoryview, write: bool) -> Pin | None:
        """A pin covering the bytes of `mv` (writable for a copy into them), or None where the interface cannot
        map host pages (then the caller stages)."""
        if not self.supported:
            return None
        addr = host_address(mv)
        self.trim()
        for i, p in enumerate(self.pins):
            if p.start <= addr and addr + mv.nbytes <= p.end and (p.writable or not write):
                self.pins.append(self.pins.pop(i))   # most recently used
                return p
        start, end = addr & -PAGE, (addr + mv.nbytes + PAGE - 1) & -PAGE
        try:
            a = self.iface.register_host(start, end - start, writable=write)
        except (AmdqError, OSError) as e:
            if getattr(e, "unsupported", False):
                self.supported = False
            log.debug("no pin of %d bytes at %#x (%s): staging instead", end - start, start, e)
            return None
        a.meta["what"] = f"mapping of the host pages at {start:#x} ({'writable' if write else 'read-only'})"
        pin = Pin(start, end, a, memoryview(mv), write)
        self.pins.append(pin)
        return pin

    def done(self, pin: Pin, value: int) -> None:
        """Submission `value` of the copy queue uses `pin`: it stays mapped at least until that completed."""
        pin.value = max(pin.value, value)

    def trim(self, limit: int = PIN_LIMIT, count: int = PIN_COUNT) -> None:
        """Drop pins no submitted copy still uses whose object only the pin holds, or that are not cacheable,
        then the least recently used beyond `limit` bytes or `count` pins."""
        done = self.queue.timeline.completed
        keep = []
        for p in self.pins:
            if p.value <= done and (not isinstance(p.mv.obj, CACHEABLE) or sys.getrefcount(p.mv.obj) <= _ALONE):
                self._release(p)
            else:
                keep.append(p)
        size = sum(p.end - p.start for p in keep)
        while keep and (size > limit or len(keep) > count):
            p = next((p for p in keep if p.value <= done), None)
            if p is None:
                break
            keep.remove(p)
            size -= p.end - p.start
            self._release(p)
        self.pins = keep

    def forget(self, pin: Pin) -> None:
        """Release `pin` now (its copy was lost with its queue: nothing runs it any more)."""
        if pin in self.pins:
            self.pins.remove(pin)
            self._release(pin)

    def _release(self, p: Pin) -> None:
        try:
            self.iface.free(p.alloc)                  # unmapped (TLBs flushed) first ...
        except (AmdqError, OSError) as e:
            log.debug("releasing a pin at %#x: %s", p.start, e)
        p.mv = None                                   # ... then the pages may go

    def close(self) -> None:
        """Release every pin (the queues are gone: nothing copies any more)."""
        for p in self.pins:
            self._release(p)
        self.pins = []
