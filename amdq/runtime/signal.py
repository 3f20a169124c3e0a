"""Timeline signals: 16-byte slots (value, timestamp) in uncached host memory, written by the GPU."""
from __future__ import annotations

import os
import struct
import time
from typing import Callable

from ..errors import GPUFault, GPUTimeout

DEFAULT_TIMEOUT_MS = 30_000


def default_timeout_ms() -> int:
    v = os.environ.get("AMDQ_WAIT_TIMEOUT_MS")
    return int(v) if v else DEFAULT_TIMEOUT_MS


class Timeline:
    """A monotonically increasing 64-bit value per device: submission n completes when it reads >= n."""

    SLOT = 16

    def __init__(self, alloc, index: int = 0, start: int = 0):
        self.alloc, self.off = alloc, index * self.SLOT
        self.addr = alloc.va + self.off
        self.mv = alloc.cpu.mv
        self.value = start                      # last value handed to a submission
        struct.pack_into("<QQ", self.mv, self.off, start, 0)

    def next(self) -> int:
        self.value += 1
        return self.value

    @property
    def completed(self) -> int:
        return struct.unpack_from("<Q", self.mv, self.off)[0]

    def wait(self, value: int, timeout_ms: int | None, sleep: Callable[[int], dict | None],
             describe: Callable[[], dict]) -> None:
        """Wait until the timeline reaches `value`. The timeout restarts whenever the value moves;
        `sleep(ms)` blocks for the GPU's interrupt and returns fault data if the GPU faulted."""
        timeout = (default_timeout_ms() if timeout_ms is None else timeout_ms) / 1000
        last = self.completed
        deadline = time.monotonic() + timeout
        spins = 0
        while last < value:
            now = time.monotonic()
            if now >= deadline:
                info = describe()
                raise GPUTimeout(f"timed out after {timeout * 1000:.0f} ms waiting for timeline value {value} "
                                 f"on {info.get('queue', 'the queue')} (last value seen {last}); "
                                 f"{info.get('stuck', 'the queue made no progress')}", queue=info.get("queue"),
                                 awaited=value, last=last, packet=info.get("packet"))
            spins += 1
            fault = sleep(0 if spins < 64 else max(1, min(10, int((deadline - now) * 1000))))
            if fault:
                info = describe()
                addr = fault.get("address")
                kind = "page fault" if addr else "queue error (bad packet or engine fault)"
                where = f" at {addr:#x}" if addr else ""
                raise GPUFault(f"GPU {kind}{where} on {info.get('queue', 'the queue')} while waiting for timeline "
                               f"value {value}; {info.get('fault') or info.get('stuck', '')}".rstrip("; "),
                               address=addr or None,
                               **{k: v for k, v in info.items() if k != "address"})
            v = self.completed
            if v != last:
                last = v
                deadline = time.monotonic() + timeout
