"""What every way of reaching a GPU gives the runtime: memory, queues, doorbells, waits, properties."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")

# Ring sizes by queue kind unless an interface says otherwise (a USB bridge's interface takes 1 MiB compute rings:
# every ring byte crosses the bridge); AMDQ_RING_BYTES / AMDQ_SDMA_RING_BYTES override them.
RING_BYTES = {"compute": 16 << 20, "sdma": 1 << 20}
# The USB bridge's interface (iface/usb.py): a 1 MiB compute ring, the SDMA ring sized for USB (facts:
# usb_asm24.json amd_over_usb.ring_and_buffer_sizes.sdma_queue_ring, 0x100000).
USB_RING_BYTES = {"compute": 1 << 20, "sdma": 0x100000}


def ring_bytes(iface: Any, kind: str) -> int:
    """The ring size of queue `kind` ("compute" or "sdma") on `iface` (its RING_BYTES table, else this one)."""
    return getattr(iface, "RING_BYTES", RING_BYTES)[kind]


class Mapping:
    """A CPU view of mapped memory (host memory, BAR-visible VRAM or a doorbell page).

    Coherence hints (the one seam for interfaces whose CPU view is a copy of the memory, as over a USB bridge,
    where no CPU mapping of VRAM exists; here, where the view is the memory, they do nothing):
    `wrote(off, n)` the CPU wrote [off, off + n) through `mv` (sent before the next doorbell); `watch(off, n)` the
    GPU writes [off, off + n) and the CPU polls it after every wait (a signal word); `refresh(off, n)` the CPU is
    about to read [off, off + n), which the GPU wrote (a queue's read pointer, a timestamp); `reuse()` the memory
    changes hands (the runtime's allocator hands a freed block out again): the hints given so far were its last
    user's, so its next user's writes are found without them until it gives its own."""

    def __init__(self, addr: int, size: int, mv: memoryview | None):
        self.addr, self.size, self.mv = addr, size, mv

    def wrote(self, off: int, n: int) -> None:
        """The CPU wrote [off, off + n) of the view (nothing to do: the view is the memory)."""

    def watch(self, off: int, n: int) -> None:
        """The GPU writes [off, off + n) and the CPU reads it after each wait (nothing to do here)."""

    def refresh(self, off: int, n: int) -> None:
        """Make [off, off + n) current before the CPU reads what the GPU wrote there (nothing to do here)."""

    def reuse(self) -> None:
        """The memory has a new user: forget the hints of the last one (nothing to do here)."""

    def write32(self, off: int, v: int) -> None:
        _U32.pack_into(self.mv, off, v & 0xFFFFFFFF)
        self.wrote(off, 4)

    def write64(self, off: int, v: int) -> None:
        _U64.pack_into(self.mv, off, v & 0xFFFFFFFFFFFFFFFF)
        self.wrote(off, 8)

    def writer64(self, off: int) -> Callable[[int], None]:
        """`write64(off, v)` bound once as a function of v (a queue's write pointer, its doorbell: the launch
        path): where writing needs no hint, just the store."""
        if type(self).write64 is Mapping.write64 and type(self).wrote is Mapping.wrote:
            return partial(_U64.pack_into, self.mv, off)
        return partial(self.write64, off)

    def read32(self, off: int) -> int:
        return struct.unpack_from("<I", self.mv, off)[0]

    def read64(self, off: int) -> int:
        return struct.unpack_from("<Q", self.mv, off)[0]


def writer64(m: Any, off: int) -> Callable[[int], None]:
    """`m.write64(off, v)` as a function of v, bound once: `m.writer64(off)` where `m` offers one (a Mapping, a
    doorbell BAR), else a partial."""
    w = getattr(m, "writer64", None)
    return w(off) if w is not None else partial(m.write64, off)


def hint_of(m: Any) -> Callable[[int, int], None] | None:
    """`m.wrote`, the coherence hint of a CPU view, or None where it does nothing (the view is the memory), so a
    hot path can skip the call."""
    w = getattr(m, "wrote", None)
    return None if w is None or getattr(type(m), "wrote", None) is Mapping.wrote else w


@dataclass
class DMABuffer:
    """Host memory pinned for a PCI function: the CPU's view and the bus address the GPU uses for it
    (contiguous on the bus)."""
    cpu: memoryview | None       # None: the pages are the process's own (a user-page mapping, `dma_map`)
    bus: int
    size: int


@dataclass
class Allocation:
    va: int                      # GPU virtual address (equal to the CPU address on KFD)
    size: int
    kind: str                    # "vram" | "gtt" | "uncached" | "doorbell"
    handle: Any = None
    cpu: Mapping | None = None   # None: not CPU-visible
    meta: dict = field(default_factory=dict)


@dataclass
class QueueInfo:
    kind: str                    # "compute" (PM4) | "aql" | "sdma"
    queue_id: int
    doorbell: Mapping            # where to write the write pointer
    doorbell_off: int
    ring: Allocation
    rptr: Allocation             # read-pointer report (written by the GPU)
    wptr: Allocation             # write-pointer copy (read by the GPU)
    extra: dict = field(default_factory=dict)
