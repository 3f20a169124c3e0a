"""Boot benchmark: full and partial boot of the AM driver on the simulated PCI function, wall time and
register reads/writes per IP block. Goals on a developer machine: full < 1 s, partial < 0.1 s, and the
partial boot's register accesses <= 10 % of the full one's. The last line is JSON.

    python bench/boot.py [--arch gfx1100] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def run(arch: str, rounds: int) -> dict:
    from amdq.iface.pci import PCI
    from amdq.sim.pci.device import SimPCIDevice
    out: dict = {"arch": arch}
    with tempfile.TemporaryDirectory() as st:
        runs: dict[str, list] = {"full": [], "partial": []}
        for i in range(rounds):
            for want in ("full", "partial"):
                os.environ["AM_RESET"] = "1" if want == "full" else "0"
                dev = SimPCIDevice(arch, state=st, mode="sync")
                t0 = time.perf_counter()
                iface = PCI(dev, arch, standin=True)
                wall = time.perf_counter() - t0
                r = iface.report
                assert r.kind == want, (want, r.kind, r.reason)
                runs[want].append({"wall_s": wall, "boot_s": r.seconds, "reads": r.reads, "writes": r.writes,
                                   "blocks": {n: {"reads": b.reads, "writes": b.writes, "ms": round(b.seconds * 1e3, 3)}
                                              for n, b in r.blocks.items()}})
                iface.close()
                dev.close()
        os.environ.pop("AM_RESET", None)
    for k, rs in runs.items():
        best = min(rs, key=lambda x: x["boot_s"])
        out[k] = {"boot_s": round(best["boot_s"], 4), "wall_s": round(best["wall_s"], 4), "reads": best["reads"],
                  "writes": best["writes"], "blocks": best["blocks"]}
    f, p = out["full"], out["partial"]
    out["partial_access_ratio"] = round((p["reads"] + p["writes"]) / max(1, f["reads"] + f["writes"]), 4)
    out["goals"] = {"full_under_1s": f["boot_s"] < 1.0, "partial_under_0.1s": p["boot_s"] < 0.1,
                    "partial_accesses_le_10pct": out["partial_access_ratio"] <= 0.10}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx1100")
    ap.add_argument("--quick", action="store_true", help="one round (CI)")
    args = ap.parse_args()
    res = run(args.arch, 1 if args.quick else 3)
    for k in ("full", "partial"):
        r = res[k]
        print(f"{k:8s} boot {r['boot_s'] * 1e3:8.2f} ms  (open {r['wall_s'] * 1e3:8.2f} ms)  "
              f"{r['reads']} reads {r['writes']} writes")
        for n, b in r["blocks"].items():
            print(f"    {n:10s} {b['reads']:5d} R {b['writes']:5d} W {b['ms']:8.3f} ms")
    print(f"partial/full register accesses: {res['partial_access_ratio']:.1%}")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
