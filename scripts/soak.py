#!/usr/bin/env python3
"""Soak test: many launches of a one-wave kernel through a small ring, on the PM4 and the AQL queue.

Launch i writes i into out[i % check_every] and adds 1 to a counter (a plain read-modify-write, so the
launches must also run in order); every `check_every` launches the script reads both back and checks
each slot, and samples the process's RSS, the allocator's live bytes and the simulated VRAM in use.

    PYTHONPATH=. python3 scripts/soak.py [--launches 10000] [--ring-bytes 4096] [--queue pm4|aql|both]

tests/test_soak.py runs a shorter slice of the same routine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

IR = """
define amdgpu_kernel void @mark(ptr addrspace(1) %out, ptr addrspace(1) %count, i32 %slot, i32 %value) {
entry:
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %id = or i32 %lid, %wg
  %first = icmp eq i32 %id, 0
  br i1 %first, label %body, label %done
body:
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %slot
  store i32 %value, ptr addrspace(1) %p, align 4
  %n = load i32, ptr addrspace(1) %count, align 4
  %n1 = add i32 %n, 1
  store i32 %n1, ptr addrspace(1) %count, align 4
  br label %done
done:
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
"""


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(aql: bool, launches: int = 10_000, ring_bytes: int = 4096, check_every: int = 1000,
         arch: str = "gfx1100") -> dict:
    """Run the soak on a fresh simulated device; returns measurements (raises AssertionError on a wrong result)."""
    import amdq
    old = {k: os.environ.get(k) for k in ("AMD_AQL", "AMDQ_RING_BYTES")}
    os.environ["AMD_AQL"], os.environ["AMDQ_RING_BYTES"] = ("1" if aql else "0"), str(ring_bytes)
    try:
        dev = amdq.open_device(f"SIM:{arch}")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        k = dev.load(amdq.compile(IR, arch=arch))["mark"]
        out, count = dev.upload(np.full(check_every, -1, np.int32)), dev.upload(np.zeros(1, np.int32))
        dev.synchronize()
        samples = []
        rss0, t0 = rss_bytes(), time.perf_counter()
        for i in range(launches):
            k(out, count, i % check_every, i, grid=1, block=32)
            if (i + 1) % check_every == 0 or i + 1 == launches:
                n = i + 1
                first = (n - 1) // check_every * check_every
                got = out.numpy(np.int32)[:n - first]
                want = np.arange(first, n, dtype=np.int32)
                if not (got == want).all():
                    bad = int(np.flatnonzero(got != want)[0])
                    raise AssertionError(f"launch {first + bad}: out[{bad}] = {got[bad]}, expected {want[bad]}")
                c = int(count.numpy(np.int32)[0])
                if c != n:
                    raise AssertionError(f"after {n} launches the counter is {c}")
                dev._reclaim()
                samples.append({"launches": n, "rss": rss_bytes(), "live": dev.allocator.live,
                                "vram": dev.sim.vram.used, "t": time.perf_counter() - t0})
        elapsed = time.perf_counter() - t0
        q = dev.queue
        ring = q.slots if aql else q.ring_dw                # AQL: 64-byte packets; PM4: dwords
        return {"queue": q.name, "launches": launches, "seconds": elapsed, "ms_per_launch": 1e3 * elapsed / launches,
                "ring_bytes": ring_bytes, "wraps": q.wptr // ring, "rss_start": rss0, "samples": samples,
                "rss_growth": samples[-1]["rss"] - rss0, "rss_growth_after_first": samples[-1]["rss"] - samples[0]["rss"]}
    finally:
        dev.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--ring-bytes", type=int, default=4096)
    ap.add_argument("--check-every", type=int, default=1000)
    ap.add_argument("--queue", choices=("pm4", "aql", "both"), default="both")
    a = ap.parse_args(argv)
    for aql in {"pm4": [False], "aql": [True], "both": [False, True]}[a.queue]:
        r = soak(aql, a.launches, a.ring_bytes, a.check_every)
        print(f"{r['queue']}: {r['launches']} launches in {r['seconds']:.1f} s ({r['ms_per_launch']:.2f} ms each), "
              f"ring of {r['ring_bytes']} bytes wrapped {r['wraps']} times; RSS {r['rss_start'] / 2**20:.1f} MiB "
              f"-> {r['samples'][-1]['rss'] / 2**20:.1f} MiB (+{r['rss_growth'] / 2**20:.2f} MiB, "
              f"+{r['rss_growth_after_first'] / 2**20:.2f} MiB after the first check)")
        for s in r["samples"]:
            print(f"  {s['launches']:>7} launches  {s['t']:6.1f} s  RSS {s['rss'] / 2**20:8.1f} MiB  "
                  f"live {s['live']:>9} B  VRAM used {s['vram']:>9} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
