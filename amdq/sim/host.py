"""The host's memory as simulated GPUs see it: one arena per process, shared by every simulated PCI
function, so a buffer in host memory has one bus address on every GPU (as RAM behind an IOMMU identity map
does). An address in it is the bus address a GPU page-table entry with the SYSTEM bit names."""
from __future__ import annotations

import threading

from .memory import Arena

HOST_BYTES = 64 << 30                # reserved lazily: nothing is backed until it is written
_lock = threading.Lock()
_arena: Arena | None = None


def host_memory() -> Arena:
    """The process's host memory arena (created on first use)."""
    global _arena
    with _lock:
        if _arena is None:
            _arena = Arena("host memory", HOST_BYTES)
        return _arena
