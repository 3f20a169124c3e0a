"""Counters and a timing model for the simulated USB link.

Every transfer is counted (control IN/OUT, bulk IN/OUT, bytes each way, host waits, per request code) and
given a modelled duration that advances a simulated clock (`clock_ns`); with `sleep=True` the model also
sleeps that long, so host work, link time and the simulated GPU (on its worker thread) overlap in wall time
as they would on hardware.

The defaults, near a USB 3.2 Gen 2 (10 Gbit/s) link, and why:
* `control_rtt_us` 150: a vendor control transfer is a setup, an optional data and a status stage, each
  scheduled by the host controller and answered by the bridge's 8051 firmware; measured round trips of
  firmware-handled control requests on SuperSpeed hosts are of the order of 100-200 us, so the middle.
* `control_bytes_per_s` 40e6: EP0 packets (512 bytes on SuperSpeed) with a firmware copy each; at most 4 KiB
  per transfer, so this term is small next to the round trip.
* `bulk_bytes_per_s` 900e6: 10 Gbit/s signalling with 128b/132b encoding leaves ~1.2 GB/s; protocol overhead
  and host-controller scheduling give ~900 MB/s in practice for large bulk transfers on this class of bridge.
* `bulk_latency_us` 30: the fixed cost of one bulk transfer (submission, first packet, completion event).
* `pcie_train_us` 20000: F3 returns once the link is trained; power ramp, detect and training to L0 take
  milliseconds to tens of milliseconds (PCIe allows up to 100 ms before the first configuration request).
* `high_speed` (USB 2.0 fallback, 480 Mbit/s): 250 us round trips, 40 MB/s bulk.
These are choices of the simulator, not facts of the sources; they are configurable per bridge (`timing=`) and
from the environment (`AMDQ_SIM_USB_TIMING="speed=high,sleep=1,bulk_bytes_per_s=4e8"`, see LinkTiming.from_env).

Overlap. USB schedules every endpoint on its own: endpoint 0 (control) is one pipe and each bulk endpoint another,
each pipe completing its transfers in submission order; only data shares the wire, one wire per direction
(USB 3 is dual-simplex: bulk OUT and bulk IN move at once). So a control transfer is its round trip on endpoint 0
(the firmware answers it; its few bytes do not hold the wire), and a bulk transfer holds its endpoint for its
latency and its bytes' time on the wire of its direction; a bulk transfer queued behind another on the same
endpoint follows it without a new latency (the host controller has it ready). `transfer` (a synchronous call)
starts when the host is free and its pipe is, and returns when it is done; `submit` starts a transfer without
waiting for it and `wait` waits for a submitted one, so a pipelined copy (an F2 arm on endpoint 0 while the
previous chunk streams on 0x02) shows its overlap; `idle_until(t)` moves the host clock to a time reached by other
work (the GPU's, for instance) without adding the link's time to it twice. `record()` keeps each transfer's span
(start, end, kind, what) for a profile's USB track. A wait is the host's clock waiting for the link.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from ...errors import InvalidArgument


@dataclass
class LinkTiming:
    """The model's parameters (see the module doc for the defaults)."""
    speed: str = "super_plus"              # "super_plus" (USB 3.2 Gen 2, 10 Gbit/s), "super" (5), "high" (USB 2)
    control_rtt_us: float = 150.0
    control_bytes_per_s: float = 40e6
    bulk_bytes_per_s: float = 900e6
    bulk_latency_us: float = 30.0
    pcie_train_us: float = 20_000.0        # F3 on: power-up and link training before the request completes
    sleep: bool = False                    # also sleep the modelled time

    @classmethod
    def for_speed(cls, speed: str, **kw) -> "LinkTiming":
        """Defaults for a link speed: super_plus (10 Gbit/s), super (5 Gbit/s), high (480 Mbit/s)."""
        base = {"super_plus": {}, "super": {"bulk_bytes_per_s": 400e6},
                "high": {"control_rtt_us": 250.0, "control_bytes_per_s": 20e6, "bulk_bytes_per_s": 40e6,
                         "bulk_latency_us": 125.0}}
        if speed not in base:
            raise ValueError(f"link speed {speed!r}: super_plus, super or high")
        return cls(speed=speed, **{**base[speed], **kw})

    @classmethod
    def from_env(cls, text: str | None = None) -> "LinkTiming":
        """AMDQ_SIM_USB_TIMING="key=value,...": the speed first (its defaults), then any field over it
        (e.g. "speed=high", "sleep=1,bulk_bytes_per_s=4e8"); unset: the USB 3.2 Gen 2 defaults."""
        text = os.environ.get("AMDQ_SIM_USB_TIMING", "") if text is None else text
        kv: dict[str, str] = {}
        for item in filter(None, (x.strip() for x in text.split(","))):
            k, sep, v = item.partition("=")
            if not sep or k.strip() not in cls.__dataclass_fields__:
                raise InvalidArgument(f"AMDQ_SIM_USB_TIMING: {item!r}: use key=value with keys "
                                      f"{', '.join(cls.__dataclass_fields__)}")
            kv[k.strip()] = v.strip()
        speed = kv.pop("speed", "super_plus")
        try:
            fields = {k: (v not in ("0", "false", "no", "")) if k == "sleep" else float(v) for k, v in kv.items()}
            return cls.for_speed(speed, **fields)
        except ValueError as e:
            raise InvalidArgument(f"AMDQ_SIM_USB_TIMING={text!r}: {e}") from None

    @property
    def signalling_gbps(self) -> float:
        return {"super_plus": 10.0, "super": 5.0, "high": 0.48}[self.speed]


@dataclass
class Counters:
    """What crossed the link."""
    control_in: int = 0
    control_out: int = 0
    bulk_in: int = 0
    bulk_out: int = 0
    bytes_in: int = 0                       # device to host (control IN data + bulk IN)
    bytes_out: int = 0                      # host to device (control OUT data + bulk OUT)
    waits: int = 0                          # times the host clock waited for the link (wake-ups; the host's
                                            # round trips are counted by its controller, usb_bridge.Controller)
    failed: int = 0                         # transfers that ended in an error
    requests: dict[int, int] = field(default_factory=dict)   # bRequest -> count
    tlps: dict[str, int] = field(default_factory=dict)      # TLP kind (MRd64, CfgWr1 ...) -> count

    def as_dict(self) -> dict:
        return {"control_in": self.control_in, "control_out": self.control_out, "bulk_in": self.bulk_in,
                "bulk_out": self.bulk_out, "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "waits": self.waits, "failed": self.failed,
                "requests": {f"{k:#04x}": v for k, v in sorted(self.requests.items())}, "tlps": dict(self.tlps)}


class LinkModel:
    """The simulated clock of one bridge's link, its counters and the cost of each transfer."""

    def __init__(self, timing: LinkTiming | None = None):
        self.timing = timing or LinkTiming()
        self.counters = Counters()
        self.clock_ns = 0                   # the host's simulated time
        self.link_free_ns = 0               # when the link finishes everything on it
        self.pipe_free_ns: dict[int, int] = {}      # endpoint -> when its last transfer completes
        self.wire_free_ns = {"in": 0, "out": 0}     # per direction: when the wire is free of bulk data
        self.busy_ns = 0                    # summed time of every transfer (pipes overlap: may exceed the clock)
        self.events: list[tuple[int, int, str, str]] | None = None   # (start ns, end ns, kind, what) when recording
        self.max_events = 1 << 20
        self._lock = threading.Lock()

    def record(self, on: bool = True) -> None:
        """Keep every transfer's span on the link (for a profile's USB track); off drops the log."""
        self.events = [] if on else None

    def cost_ns(self, kind: str, nbytes: int) -> int:
        """Modelled duration of one transfer: kind 'control' or 'bulk', `nbytes` of data."""
        t = self.timing
        if kind == "control":
            return int(t.control_rtt_us * 1e3 + nbytes * 1e9 / t.control_bytes_per_s)
        return int(t.bulk_latency_us * 1e3 + nbytes * 1e9 / t.bulk_bytes_per_s)

    def count(self, kind: str, direction: str, nbytes: int, request: int | None = None) -> None:
        """Count one transfer (kind control/bulk, direction in/out)."""
        c = self.counters
        with self._lock:
            setattr(c, f"{kind}_{direction}", getattr(c, f"{kind}_{direction}") + 1)
            if direction == "in":
                c.bytes_in += nbytes
            else:
                c.bytes_out += nbytes
            if request is not None:
                c.requests[request] = c.requests.get(request, 0) + 1

    def tlp(self, name: str) -> None:
        with self._lock:
            self.counters.tlps[name] = self.counters.tlps.get(name, 0) + 1

    def submit(self, kind: str, nbytes: int, extra_ns: int = 0, what: str = "", endpoint: int = 0,
               not_before: int = 0) -> int:
        """Put a transfer on its endpoint's pipe without waiting for it: when it completes (simulated ns).
        `not_before`: the device takes it no earlier (a bulk phase waits for the control request that armed it)."""
        t = self.timing
        with self._lock:
            now = max(self.clock_ns, not_before)
            free = self.pipe_free_ns.get(endpoint, 0)
            if kind == "control":
                start = max(now, free)
                done = start + self.cost_ns(kind, nbytes) + extra_ns
            else:
                wire = "in" if endpoint & 0x80 else "out"
                queued = free > now                     # behind another transfer of its pipe: no new latency
                start = max(free, self.wire_free_ns[wire]) if queued else \
                    max(now + int(t.bulk_latency_us * 1e3), self.wire_free_ns[wire])
                done = start + int(nbytes * 1e9 / t.bulk_bytes_per_s) + extra_ns
                self.wire_free_ns[wire] = done
            self.pipe_free_ns[endpoint] = done
            self.link_free_ns = max(self.link_free_ns, done)
            self.busy_ns += done - start
            ev = self.events
            if ev is not None and len(ev) < self.max_events:
                ev.append((start, done, kind, what or f"{nbytes} bytes"))
            return done

    def wait(self, done_ns: int) -> None:
        """The host waits for a submitted transfer."""
        with self._lock:
            self.counters.waits += 1
        self.idle_until(done_ns)

    def transfer(self, kind: str, nbytes: int, extra_ns: int = 0, what: str = "", endpoint: int = 0,
                 not_before: int = 0) -> int:
        """A synchronous transfer: submitted and waited for; its duration as the host saw it."""
        t0 = self.clock_ns
        self.wait(self.submit(kind, nbytes, extra_ns, what, endpoint, not_before))
        return self.clock_ns - t0

    def idle_until(self, t_ns: int) -> None:
        """Advance the host clock to `t_ns` (never back), sleeping the difference when the model sleeps."""
        with self._lock:
            d = t_ns - self.clock_ns
            if d <= 0:
                return
            self.clock_ns = t_ns
        if self.timing.sleep:
            time.sleep(d / 1e9)

    def advance(self, ns: int) -> None:
        """The host spends `ns` on something else (its own work, a timeout)."""
        self.idle_until(self.clock_ns + int(ns))

    def stats(self) -> dict:
        """Counters, the clock and the link's parameters (for tests, `amdq info` and profiles)."""
        t = self.timing
        return dict(self.counters.as_dict(), clock_ns=self.clock_ns, link_busy_ns=self.busy_ns,
                    speed=t.speed, signalling_gbps=t.signalling_gbps, control_rtt_us=t.control_rtt_us,
                    bulk_bytes_per_s=t.bulk_bytes_per_s)

    def reset_counters(self) -> None:
        with self._lock:
            self.counters = Counters()
