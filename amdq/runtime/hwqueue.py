"""The protocol every hardware queue of the runtime speaks (PM4 compute, AQL compute, SDMA copy), and what
they share: the ring-space wait, the report of where a queue is stuck, and recovery.

A queue is a runtime object that outlives its hardware queue: `reset()` destroys the hardware queue (on KFD
the kernel unmaps it and its waves are killed), creates a new one and restarts the writer side, while the
queue object, its timeline and everything bound to it (bound launches, graphs) stay valid. The values of
the work lost in a reset are recorded with the error that caused it (`fail`), so every wait on them raises
that error, and the timeline is realigned (its slot set to the last value handed out) so that no other
queue's GPU-side wait stays blocked on a dead timeline.

Protocol: `commands()` a command list (PM4 queues), `plan()` the cached launch of one shape (compute
queues), `launch()`, `bind()`, `submit()`, `wait_on()` (a GPU-side wait for another timeline), `describe()`
(the packet at the read pointer, decoded), `reset()`, `close()`.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..errors import AmdqError, DeviceLost, GPUException, GPUTimeout
from .signal import default_timeout_ms

MAX_FAILED = 32          # failed value ranges remembered per queue


def stuck_report(queue: str, rptr: int, wptr: int, where: str, packet, stopper: str | None) -> dict:
    """What a queue reports for timeouts and faults: its pointers, the decoded packet at its read pointer
    (`packet()` decodes it), where that is, and (if `stopper` names who stops) the fault wording."""
    info = {"queue": queue, "rptr": rptr, "wptr": wptr}
    if rptr >= wptr:
        info["stuck"] = "the queue is idle: everything submitted was consumed"
        return info
    info["packet"] = packet()
    info["stuck"] = f"stuck at {where}: {info['packet']}"
    if stopper:
        info["fault"] = f"{stopper} stopped at {where}: {info['packet']}"
    return info


class HWQueue:
    """Base of the runtime's hardware queues. Subclasses implement `_open` (create the hardware queue and
    the writer state), `_close_hw`, `rptr`, `describe`."""

    kind = "?"

    def __init__(self, dev, ring_bytes: int, timeline):
        self.dev, self.ring_bytes, self.timeline = dev, ring_bytes, timeline
        self.failed: list[tuple[int, int, AmdqError]] = []      # (first, last value, error) of lost work
        self.deps: list[tuple[int, object, int]] = []           # (own value, other queue, its value waited for)
        self.resets = 0
        self.gone = False                                       # the device was lost under it (reset)
        self._what: list[str | None] = [None] * 256    # what the last 256 submissions were, by value % 256
        self.q = None
        self._open()

    # -- to be provided ------------------------------------------------------------------------
    def _open(self) -> None:
        raise NotImplementedError

    def _close_hw(self) -> None:
        self.dev.iface.destroy_queue(self.q)

    def _open_ring(self, kind: str) -> None:
        """Create the interface's queue of a ring kind ("compute", "sdma") and map its dword ring; the write
        pointer starts at 0."""
        self.q = self.dev.iface.create_queue(kind, self.ring_bytes)
        self.name = f"{kind} queue {self.q.queue_id}"
        self.ring = np.frombuffer(self.q.ring.cpu.mv, np.uint32)
        self.ring_dw = len(self.ring)
        self.wptr = 0

    def describe(self) -> dict:
        raise NotImplementedError

    # -- progress and space ----------------------------------------------------------------------
    def progress(self) -> tuple:
        """What changes while the queue works: the read pointer and, where the interface can tell, the
        packets and waves it has retired (a long dispatch is progress, a hang is not)."""
        return self.rptr, self.dev.iface.queue_progress(self.q)

    def wait_space(self, room: Callable[[], bool], what: str, kick: Callable[[], None] | None = None) -> None:
        """Wait until `room()` (the GPU consumed enough of the ring). The timeout (AMDQ_WAIT_TIMEOUT_MS)
        restarts while the queue makes progress; then GPUTimeout, after which the caller recovers."""
        if kick is not None:
            kick()
        timeout = default_timeout_ms() / 1000
        deadline, seen = time.monotonic() + timeout, self.progress()
        while not room():
            exc = self.dev.iface.wait_events(1)
            if exc:
                resets = self.resets
                self.dev._exceptions(exc)
                if self.resets != resets:        # this queue stopped: the submission in progress is lost with it
                    err = self.error_for(self.timeline.value)
                    raise err if err is not None else GPUException(f"{self.name} stopped and was reset")
                continue
            now, p = time.monotonic(), self.progress()
            if p != seen:
                seen, deadline = p, now + timeout
            elif now > deadline:
                raise GPUTimeout(f"{self.name}: no ring space for {what} after {timeout * 1000:.0f} ms without "
                                 f"progress (read pointer stuck at {self.rptr}); {self.describe()['stuck']}",
                                 queue=self.name, ring_space=True)

    def note(self, value: int, what: str) -> None:
        """Remember what submission `value` is (a kernel's name, "copy"), for timeout messages."""
        self._what[value & 255] = what

    def what(self, value: int) -> str | None:
        return self._what[value & 255] if self.timeline.value - value < 256 else None

    # -- recovery --------------------------------------------------------------------------------
    def fail(self, first: int, last: int, error: AmdqError) -> None:
        """Submissions first..last are lost: waits on them raise `error`."""
        if last >= first:
            self.failed.append((first, last, error))
            del self.failed[:-MAX_FAILED]

    def error_for(self, value: int) -> AmdqError | None:
        for first, last, err in reversed(self.failed):
            if first <= value <= last:
                return err
        return None

    def depends(self, other, value: int) -> None:
        """The next submission waits (on the GPU) for `other` to reach `value`."""
        if len(self.deps) > 64:
            done = self.timeline.completed
            self.deps = [d for d in self.deps if d[0] > done]
        self.deps.append((self.timeline.value + 1, other, value))

    def reset(self) -> None:
        """Destroy the hardware queue (its waves are killed) and create a new one; the writer starts over.
        DeviceLost (the driver's reset did not bring the engine back) is not recovered from: it propagates."""
        try:
            self._close_hw()
        except DeviceLost:
            self.gone = True                        # gone with the device: close() has nothing left to destroy
            raise
        except (AmdqError, OSError):
            pass                                    # a queue the driver already dropped
        self.resets += 1
        self._open()

    def close(self) -> None:
        if not self.gone:
            self._close_hw()
