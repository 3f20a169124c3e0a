"""Profiles: every launch and copy of a `with dev.profile():` block, with its stages measured apart,
saved as a Chrome/Perfetto trace (one track per queue for GPU execution, one host track, and a track per kind of
the interface's own events where it has them).

Interface events are a seam of the interface protocol, not of any one interface: an interface that times its own
work (the USB interface: every control and bulk transfer) offers `record_events(on) -> bool` (whether it was on)
and `interface_events(since=0) -> [(start_s, end_s, track, name, args)]` (host perf_counter seconds);
the profile switches the log on while it runs and puts each event on the track it names."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .device import Device
    from .program import LaunchRecord


class Profile:
    def __init__(self, dev: "Device"):
        self.dev = dev
        self.records: list[LaunchRecord] = []
        self._outer: Profile | None = None       # the AMDQ_TRACE profile this one runs inside (amdq.runtime.trace)
        self._ev_mark: int | None = None         # where this profile's interface events start (None: not listening)
        self._ev_was = False
        self.iface_events: list[tuple[float, float, str, str, dict]] = []   # taken when the profile ends

    def listen(self) -> None:
        """Ask the interface to log its own events while this profile runs (if it has any)."""
        it = self.dev.iface
        rec = getattr(it, "record_events", None)
        if rec is None or self._ev_mark is not None:
            return
        self._ev_was = rec(True)
        self._ev_mark = len(it.interface_events())

    def unlisten(self) -> None:
        """Keep the interface events logged so far and switch the log off if this profile switched it on."""
        if self._ev_mark is None:
            return
        it = self.dev.iface
        self.iface_events = list(it.interface_events(self._ev_mark))
        self._ev_mark = None
        if not self._ev_was:
            it.record_events(False)

    def events(self) -> list[tuple[float, float, str, str, dict]]:
        """The interface's events of this profile (so far, while it runs)."""
        evs = self.dev.iface.interface_events(self._ev_mark) if self._ev_mark is not None else self.iface_events
        return sorted(evs, key=lambda e: e[0])          # by start (an asynchronous transfer is logged when it ends)

    def add(self, rec: "LaunchRecord") -> None:
        self.records.append(rec)
        if self._outer is not None:
            self._outer.add(rec)

    def __enter__(self) -> "Profile":
        outer = self.dev.profiler
        if outer is not None and not getattr(outer, "ambient", False):
            raise RuntimeError("a profile is already active on this device")
        self._outer = outer
        self.dev.profiler = self
        self.listen()
        return self

    def __exit__(self, *exc) -> None:
        self.dev.profiler = self._outer
        try:
            if exc[0] is None:
                self.dev.synchronize()
                for r in self.records:
                    self.dev.resolve(r)
        finally:
            self.unlisten()

    def interface_summary(self) -> dict[str, dict[str, float]]:
        """Per interface track (e.g. "USB bulk"): events, bytes and seconds."""
        out: dict[str, dict[str, float]] = {}
        for t0, t1, track, _name, args in self.events():
            s = out.setdefault(track, {"events": 0, "bytes": 0, "seconds": 0.0})
            s["events"] += 1
            s["bytes"] += int(args.get("bytes", 0))
            s["seconds"] += t1 - t0
        return out

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kernel (or copy): calls and total seconds per stage, and memory growth (`alloc_bytes`, seconds in
        `alloc` and `sync`) of the launches that grew the scratch."""
        out: dict[str, dict[str, float]] = {}
        for r in self.records:
            s = out.setdefault(r.kernel, {"calls": 0, "encode": 0.0, "submit": 0.0, "gpu": 0.0, "wait": 0.0,
                                          "alloc_bytes": 0, "alloc": 0.0, "sync": 0.0})
            s["calls"] += 1
            s["encode"] += r.encode
            s["submit"] += r.submit
            s["gpu"] += r.gpu or 0.0
            s["wait"] += r.wait
            s["alloc_bytes"] += r.alloc_bytes
            s["alloc"] += r.alloc
            s["sync"] += r.sync
        return out

    def memory(self) -> list["LaunchRecord"]:
        """The records of the launches that grew device memory (scratch), in order."""
        return [r for r in self.records if r.alloc_bytes]

    def trace(self) -> dict:
        """The profile as a Chrome trace-event object (open it in ui.perfetto.dev)."""
        iev = self.events()
        if not self.records and not iev:
            return {"traceEvents": [], "displayTimeUnit": "ns"}
        t0 = min([min(r.extra.get("host_start", r.gpu_start or 0.0), r.gpu_start or 1e30) for r in self.records]
                 + [e[0] for e in iev])
        us = lambda t: (t - t0) * 1e6  # noqa: E731
        pid = 1
        tids = {"host": 1}
        ev = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"amdq {self.dev.name}"}},
              {"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "host"}}]
        for r in self.records:
            q = r.extra.get("queue", "queue")
            if q not in tids:
                tids[q] = len(tids) + 1
                ev.append({"ph": "M", "pid": pid, "tid": tids[q], "name": "thread_name", "args": {"name": f"GPU {q}"}})
            hs = r.extra.get("host_start")
            args = {k: str(v) for k, v in r.extra.items() if k in ("grid", "block", "bytes", "src", "dst")}
            args["value"] = r.value
            if r.simulated:
                args["gpu_clock"] = "simulated"
            if r.alloc_bytes:
                args.update(alloc_bytes=r.alloc_bytes, alloc_us=round(r.alloc * 1e6, 3), sync_us=round(r.sync * 1e6, 3))
            if hs is not None and r.alloc_bytes:
                ev.append({"ph": "X", "pid": pid, "tid": 1, "name": f"grow scratch ({r.alloc_bytes} bytes)",
                           "ts": us(hs), "dur": (r.alloc + r.sync) * 1e6, "cat": "memory",
                           "args": {"bytes": r.alloc_bytes, "sync_us": round(r.sync * 1e6, 3)}})
            if hs is not None:
                ev.append({"ph": "X", "pid": pid, "tid": 1, "name": f"encode {r.kernel}", "ts": us(hs),
                           "dur": r.encode * 1e6, "cat": "host", "args": args})
                ev.append({"ph": "X", "pid": pid, "tid": 1, "name": f"submit {r.kernel}", "ts": us(hs + r.encode),
                           "dur": r.submit * 1e6, "cat": "host", "args": args})
                if r.wait:
                    ev.append({"ph": "X", "pid": pid, "tid": 1, "name": f"wait {r.kernel}",
                               "ts": us(hs + r.encode + r.submit), "dur": r.wait * 1e6, "cat": "host"})
            if r.gpu_start is not None:
                ev.append({"ph": "X", "pid": pid, "tid": tids[q], "name": r.kernel, "ts": us(r.gpu_start),
                           "dur": max(r.gpu, 0.0) * 1e6, "cat": "gpu", "args": args})
        for start, end, track, name, args in iev:          # the interface's own work (USB transfers ...)
            if track not in tids:
                tids[track] = len(tids) + 1
                ev.append({"ph": "M", "pid": pid, "tid": tids[track], "name": "thread_name", "args": {"name": track}})
            ev.append({"ph": "X", "pid": pid, "tid": tids[track], "name": name, "ts": us(start),
                       "dur": max(end - start, 0.0) * 1e6, "cat": "interface",
                       "args": {k: v if isinstance(v, (int, float)) else str(v) for k, v in args.items()}})
        return {"traceEvents": ev, "displayTimeUnit": "ns"}

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.trace(), f)
