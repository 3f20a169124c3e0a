"""Soak: thousands of launches of a one-wave kernel through a 4 KiB ring, on the PM4 and the AQL queue,
every result checked, memory sampled. The suite runs a slice (AMDQ_SOAK_LAUNCHES, default 2,000);
`scripts/soak.py` runs the full 10,000 and prints the measurements."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("amdq_soak", Path(__file__).parent.parent / "scripts" / "soak.py")
soak_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak_mod)

LAUNCHES = int(os.environ.get("AMDQ_SOAK_LAUNCHES", "2000"))


@pytest.mark.parametrize("aql", [False, True], ids=["pm4", "aql"])
def test_soak_small_ring(aql):
    r = soak_mod.soak(aql, LAUNCHES, ring_bytes=4096, check_every=1000)   # raises on any wrong result
    assert r["launches"] == LAUNCHES and len(r["samples"]) == -(-LAUNCHES // 1000)
    assert r["wraps"] >= LAUNCHES // 100                     # the ring wrapped many times
    first, last = r["samples"][0], r["samples"][-1]
    assert last["live"] == first["live"] and last["vram"] == first["vram"]   # no device memory growth
    assert r["rss_growth"] < 200 << 20, f"RSS grew by {r['rss_growth'] / 2**20:.1f} MiB"
    print(f"\n{r['queue']}: {LAUNCHES} launches, {r['ms_per_launch']:.2f} ms each, RSS +{r['rss_growth'] / 2**20:.2f} MiB")
