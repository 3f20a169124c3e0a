"""A progress line on stderr for a long simulated dispatch: workgroups done out of the total, once a dispatch has
run for THRESHOLD_S seconds and only when stderr is a terminal (a log or a pipe gets nothing). The shader core's
`Run` calls `update` after every batch of workgroups it retires."""
from __future__ import annotations

import sys
import time

THRESHOLD_S = 2.0          # a dispatch shorter than this prints nothing
INTERVAL_S = 0.5           # at most one update per interval


def is_terminal() -> bool:
    """Whether stderr is a terminal (tests replace this)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """The progress of one dispatch (one die's share on multi-XCC targets)."""

    __slots__ = ("t0", "last", "shown", "_what", "_args")

    def __init__(self, what: str, *args):
        """`what` names the work, %-formatted with args when first shown (most dispatches never are)."""
        self.t0, self.last, self.shown, self._what, self._args = time.monotonic(), 0.0, False, what, args

    @property
    def what(self) -> str:
        return self._what % self._args if self._args else self._what

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not self.shown and (now - self.t0 < THRESHOLD_S or finished or not is_terminal()):
            return
        if not finished and now - self.last < INTERVAL_S:
            return
        self.last, self.shown = now, True
        sys.stderr.write(f"\ramdq: {self.what}: {done}/{total} workgroups ({100 * done // max(total, 1)}%), "
                         f"{now - self.t0:.1f} s" + ("\n" if finished else ""))
        sys.stderr.flush()
