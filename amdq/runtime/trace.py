"""AMDQ_TRACE=file.json: every device an unmodified program opens records a profile (amdq.runtime.profile), and one
Chrome/Perfetto trace of them all (a process track per device) is written when the program exits.

The hook is `attach(dev)`, called by `open_device` when AMDQ_TRACE is set. A device's records are resolved (GPU
start and end) when it is closed, or at exit for a device still open; a `with dev.profile()` block inside the
program still works and its launches are in the trace too.
"""
from __future__ import annotations

import atexit
import json
import os
import sys

from ..errors import AmdqError
from .profile import Profile

_profiles: list[Profile] = []
_registered = False


def attach(dev) -> Profile | None:
    """Start recording `dev` for AMDQ_TRACE (None when the variable is unset or the device has no queues)."""
    global _registered
    if not os.environ.get("AMDQ_TRACE") or getattr(dev, "queue", None) is None:
        return None
    p = Profile(dev)
    p.ambient = True                      # a `with dev.profile()` of the program nests inside it
    p.finished = None
    dev.profiler = p
    p.listen()                            # the interface's own events (USB transfers) too
    _profiles.append(p)
    close = dev.close

    def close_traced() -> None:
        finish(p)
        close()
    dev.close = close_traced
    if not _registered:
        atexit.register(write)
        _registered = True
    return p


def finish(p: Profile) -> None:
    """Wait for the device's work, fill in GPU times and keep the trace events (once; before the device closes)."""
    if p.finished is not None:
        return
    dev = p.dev
    if not dev.closed:
        try:
            dev.synchronize()
        except AmdqError:
            pass                          # failed work keeps its host stages
        for r in p.records:
            try:
                dev.resolve(r)
            except (AmdqError, ValueError):
                pass
    p.finished = p.trace()["traceEvents"]
    if not dev.closed:
        p.unlisten()
    if dev.profiler is p:
        dev.profiler = None


def trace() -> dict:
    """One trace of every traced device (process id k+1 for the k-th device opened)."""
    events = []
    for k, p in enumerate(_profiles):
        finish(p)
        for e in p.finished:
            events.append({**e, "pid": k + 1})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write(path: str | None = None) -> None:
    """Write the trace to `path` (default AMDQ_TRACE); a failure is reported on stderr, not raised at exit."""
    path = path or os.environ.get("AMDQ_TRACE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            json.dump(trace(), f)
    except OSError as e:
        print(f"amdq: AMDQ_TRACE: cannot write {path}: {e}", file=sys.stderr)
