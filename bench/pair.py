"""One device measured against another in the same run, round by round.

A benchmark gives, per device, named cases (a call, how many calls a round times, what to run untimed after
the round); `interleaved` runs round 1 of every case on every device, then round 2, ... and keeps the best
seconds per call, so what the machine does meanwhile (other processes, frequency changes) falls on both
devices alike instead of on whichever ran second. `against` turns two such results into time ratios and the
goal's verdict.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

GOAL = 1.2                     # SIMPCI within 1.2x of SIMKFD (the AM driver's issue)


@dataclass
class Case:
    fn: Callable[[], object]
    calls: int = 1
    reset: Callable[[], object] = lambda: None


def interleaved(cases: dict[str, dict[str, Case]], rounds: int) -> dict[str, dict[str, float]]:
    """Best-of-`rounds` seconds per call of every case of every device, the rounds alternating between devices
    (one untimed call of each case first)."""
    for per in cases.values():
        for c in per.values():
            c.fn()
            c.reset()
    best = {d: {k: float("inf") for k in per} for d, per in cases.items()}
    for _ in range(rounds):
        for d, per in cases.items():
            for k, c in per.items():
                t = time.perf_counter()
                for _ in range(c.calls):
                    c.fn()
                best[d][k] = min(best[d][k], (time.perf_counter() - t) / c.calls)
                c.reset()
    return best


def against(mine: dict[str, float], base: dict[str, float], keys: tuple[str, ...], goal: float = GOAL) -> dict:
    """Time ratios mine/base of `keys`, the base figures, and whether every ratio meets `goal`."""
    ratios = {k: round(mine[k] / base[k], 2) for k in keys}
    return {"vs_simkfd": ratios, "simkfd": {k: base[k] for k in keys},
            "goals": {f"within_{goal}x_of_simkfd": all(v <= goal for v in ratios.values())}}


def simkfd_of(spec: str) -> str:
    """The SIMKFD device of the same target as a SIMPCI `spec`."""
    return "SIMKFD+AMD:" + spec.partition(":")[2]
