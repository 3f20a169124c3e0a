"""100 injected hangs and faults on the AM driver over the simulated PCI function (endless kernels, page faults, CP
hangs, SDMA hangs; a fixed-seed mix), each followed by a correct launch and copy on the same device.

Per target and failure kind it reports how many ran, `detect_ms` (the failing call until its error: for a hang
the wait timeout plus the driver's dequeue timeouts), `recover_ms` (the verified launch and copy after it) and
`reset_ms` (the engine reset itself: GRBM_SOFT_RESET and the queues bound again, or the SDMA engine's reset), as
medians and maxima. A CP hang must cost exactly one CP soft reset, an SDMA hang one SDMA reset, the others none.
Last line: JSON.

    python scripts/am_recovery_soak.py [--n 100] [--seed 7] [--arch gfx1100 --arch gfx942 ...] [--timeout-ms 60]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(root), str(root / "tests")]
import amdq  # noqa: E402
from failures import Bench, mix, run_mix  # noqa: E402

ARCHS = ("gfx1100", "gfx1201", "gfx942")
RESETS = {"hang_cp": ["compute"], "hang_sdma": ["SDMA0"]}


def soak(arch: str, n: int, seed: int, timeout_ms: int) -> dict:
    os.environ["AMDQ_WAIT_TIMEOUT_MS"] = str(timeout_ms)
    os.environ.setdefault("AMDQ_RING_BYTES", str(1 << 16))
    with tempfile.TemporaryDirectory(prefix="amdq-soak-") as state:
        os.environ["AMDQ_SIM_STATE"] = state
        dev = amdq.open_device(f"SIMPCI+AMD:{arch}")
        try:
            b = Bench(dev)
            b.check()
            history = dev.iface.driver.recovery.history
            seen = [len(history)]

            def after(kind: str, rec: dict) -> None:
                got = history[seen[0]:]
                want = RESETS.get(kind, [])
                if [r.engine for r in got] != want:
                    raise SystemExit(f"{arch}: {kind} cost the resets {[r.engine for r in got]}, not {want}")
                rec["reset_s"] = sum(r.seconds for r in got)
                seen[0] = len(history)
            t0 = time.perf_counter()
            out = run_mix(b, mix(n, seed), after)
            total = time.perf_counter() - t0
            if dev.iface.driver.lost is not None:
                raise SystemExit(f"{arch}: the device was lost: {dev.iface.driver.lost}")
        finally:
            dev.close()
    kinds: dict = {}
    for r in out:
        kinds.setdefault("page fault" if r["kind"] in ("null write", "unmapped read") else r["kind"], []).append(r)
    res = {"n": n, "seconds": round(total, 2), "kinds": {}}
    for k, rs in sorted(kinds.items()):
        row = {"count": len(rs)}
        for f in ("detect_s", "recover_s", "reset_s"):
            v = [r[f] * 1e3 for r in rs]
            row[f.replace("_s", "_ms")] = {"median": round(statistics.median(v), 1), "max": round(max(v), 1)}
        res["kinds"][k] = row
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--arch", action="append", choices=ARCHS)
    ap.add_argument("--timeout-ms", type=int, default=60)
    a = ap.parse_args()
    out = {"seed": a.seed, "timeout_ms": a.timeout_ms, "targets": {}}
    for arch in a.arch or ARCHS:
        r = soak(arch, a.n, a.seed, a.timeout_ms)
        out["targets"][arch] = r
        print(f"{arch}: {r['n']} failures in {r['seconds']:.1f} s")
        for k, row in r["kinds"].items():
            d, c, s = row["detect_ms"], row["recover_ms"], row["reset_ms"]
            print(f"  {k:15s} x{row['count']:3d}  detect {d['median']:7.1f} ms (max {d['max']:7.1f})  "
                  f"next launch+copy {c['median']:6.1f} ms (max {c['max']:6.1f})  "
                  f"reset {s['median']:6.1f} ms (max {s['max']:6.1f})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
