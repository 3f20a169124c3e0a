"""What every way of reaching a GPU gives the runtime: memory, queues, doorbells, waits, properties."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any


class Mapping:
    """A CPU view of mapped memory (host memory, BAR-visible VRAM or a doorbell page)."""

    def __init__(self, addr: int, size: int, mv: memoryview | None):
        self.addr, self.size, self.mv = addr, size, mv

    def write32(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.mv, off, v & 0xFFFFFFFF)

    def write64(self, off: int, v: int) -> None:
        struct.pack_into("<Q", self.mv, off, v & 0xFFFFFFFFFFFFFFFF)

    def read32(self, off: int) -> int:
        return struct.unpack_from("<I", self.mv, off)[0]

    def read64(self, off: int) -> int:
        return struct.unpack_from("<Q", self.mv, off)[0]


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
