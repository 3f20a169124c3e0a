"""Timeline signals: 16-byte slots (value, timestamp) in uncached host memory, written by the GPU."""
from __future__ import annotations

import os
import struct
from typing import Callable

DEFAULT_TIMEOUT_MS = 30_000


def default_timeout_ms() -> int:
    """The wait timeout: AMDQ_WAIT_TIMEOUT_MS, else 30 s."""
    v = os.environ.get("AMDQ_WAIT_TIMEOUT_MS")
    return int(v) if v else DEFAULT_TIMEOUT_MS


class Timeline:
    """A monotonically increasing 64-bit value per queue: submission n completes when it reads >= n.
    `before(self)` (if given) is called before each value is handed out: the device's cross-queue hook.
    `moves` (a one-element list shared by a device's timelines) counts every value handed out by any of them;
    the hook sets `ordered` to `moves - value` once nothing is left to order, and `next()` skips it while that
    still holds (no other timeline moved since) and the value stays inside its 2^32 block."""

    SLOT = 16

    def __init__(self, alloc, index: int = 0, start: int = 0, before: Callable[["Timeline"], None] | None = None,
                 moves: list[int] | None = None):
        self.moves = [0] if moves is None else moves
        self.alloc, self.off = alloc, index * self.SLOT
        self.addr = alloc.va + self.off
        self.mv = alloc.cpu.mv
        self.value = start                      # last value handed to a submission
        self.before = before
        self.ordered: int | None = None         # moves - value when the hook last found nothing to order
        struct.pack_into("<QQ", self.mv, self.off, start, 0)
        alloc.cpu.wrote(self.off, 16)
        alloc.cpu.watch(self.off, 8)                # the GPU writes the value; waits poll it

    def next(self) -> int:
        """The next value for a submission (the ordering hook first, unless it has nothing to do)."""
        m = self.moves
        if (m[0] - self.value != self.ordered or not (self.value + 1) & 0xFFFFFFFF) and self.before is not None:
            self.before(self)
        m[0] += 1
        self.value += 1
        return self.value

    def advance(self) -> int:
        """The next value without the ordering hook (for a caller that orders its work itself)."""
        self.moves[0] += 1
        self.value += 1
        return self.value

    @property
    def completed(self) -> int:
        return struct.unpack_from("<Q", self.mv, self.off)[0]

    def realign(self) -> None:
        """After a queue reset: every value handed out counts as reached (the work is lost, not pending), so
        no GPU-side wait on this timeline stays blocked."""
        struct.pack_into("<Q", self.mv, self.off, self.value)
        self.alloc.cpu.wrote(self.off, 8)
