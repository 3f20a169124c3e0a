"""Simulated SDMA copy bandwidth against host memcpy of the same size, measured in the same run.

For 1 MiB and 64 MiB: a device-to-device copy on the SDMA queue (COPY_LINEAR through the GPU MMU,
submission to completion as the host sees it: encode, ring write, doorbell, engine, fence, wait) and
the host->device / device->host paths through staging buffers; the limit is one numpy copy of the
same bytes between two warm host arrays. Ratios are bandwidth / memcpy bandwidth (1.0 = as fast as
memcpy); the target is >= 0.5 for the 64 MiB device-to-device copy. Last line: JSON.

    python bench/copy.py [--quick] [--device SIMPCI+AMD:gfx1100]

With a SIMPCI device the same copies run on SIMKFD too, and the time ratios (goal <= 1.2) are reported.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import amdq  # noqa: E402

TARGET = 0.5


def best(fn, rounds: int) -> float:
    """Best-of-rounds seconds of one call (after one untimed warm-up call)."""
    fn()
    t = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def measure(spec: str, rounds: int) -> dict:
    """Copies of 1 MiB and 64 MiB on `spec`: SDMA device-to-device, host->device, device->host, memcpy."""
    dev = amdq.open_device(spec)
    if dev.copyq is None:
        raise SystemExit("bench/copy.py: the device has no SDMA queue (is AMD_DISABLE_SDMA set?)")
    res: dict = {"sizes": {}}
    ok = True
    for name, n in (("1MiB", 1 << 20), ("64MiB", 64 << 20)):
        data = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
        src, dst = dev.upload(data), dev.alloc(n)
        h1, h2 = data.copy(), np.empty_like(data)

        def d2d():
            dev.copy(dst, src, n)
            dev.synchronize()
        t_sdma = best(d2d, rounds)
        t_h2d = best(lambda: (dst.write(data), dev.synchronize()), rounds)
        t_d2h = best(lambda: src.read(), rounds)
        t_cpu = best(lambda: np.copyto(h2, h1), rounds)
        valid = dst.read() == data.tobytes()
        ok &= valid
        r = {"sdma_d2d_s": t_sdma, "h2d_s": t_h2d, "d2h_s": t_d2h, "memcpy_s": t_cpu,
             "sdma_d2d_GBps": round(n / t_sdma / 1e9, 2), "memcpy_GBps": round(n / t_cpu / 1e9, 2),
             "ratio_d2d": round(t_cpu / t_sdma, 3), "ratio_h2d": round(t_cpu / t_h2d, 3),
             "ratio_d2h": round(t_cpu / t_d2h, 3), "valid": bool(valid)}
        res["sizes"][name] = r
        print(f"{spec} {name:6s} SDMA d2d {r['sdma_d2d_GBps']:7.2f} GB/s  memcpy {r['memcpy_GBps']:7.2f} GB/s  "
              f"ratio d2d {r['ratio_d2d']:.2f}  h2d {r['ratio_h2d']:.2f}  d2h {r['ratio_d2h']:.2f}  "
              f"{'valid' if valid else 'WRONG'}")
        src.free(), dst.free()
    dev.close()
    res["results_valid"] = bool(ok)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="SIMKFD+AMD:gfx1100",
                    help="a SIMPCI device is measured against SIMKFD in the same run (goal: within 1.2x)")
    a = ap.parse_args()
    rounds = 3 if a.quick else 10
    res = measure(a.device, rounds)
    res.update(device=a.device, target_ratio_64MiB=TARGET)
    res["ratio_64MiB"] = res["sizes"]["64MiB"]["ratio_d2d"]
    res["meets_target"] = res["ratio_64MiB"] >= TARGET
    if a.device.upper().startswith("SIMPCI"):
        kfd = measure("SIMKFD+AMD:" + a.device.partition(":")[2], rounds)
        res["vs_simkfd"] = {size: round(kfd["sizes"][size]["sdma_d2d_GBps"] / max(r["sdma_d2d_GBps"], 1e-9), 2)
                            for size, r in res["sizes"].items()}      # time on SIMPCI / time on SIMKFD
        res["goals"] = {"within_1.2x_of_simkfd": all(v <= 1.2 for v in res["vs_simkfd"].values())}
        res["results_valid"] = res["results_valid"] and kfd["results_valid"]
        print("vs SIMKFD (time)  " + ", ".join(f"{k} {v:.2f}x" for k, v in res["vs_simkfd"].items()))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
