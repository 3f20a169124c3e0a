"""Shader-core speed on real compiled kernels: vector add over 2^20 floats, a 256x256x256 tiled matmul
and a 2^20-element LDS reduction, run on the compute units directly (flat memory, no queue).

For each: wave-instructions executed, wave-instructions per second, and efficiency =
sum over steps of (time of one numpy uint32 add over the step's lanes) / time taken, i.e. how close
the core comes to one numpy operation per instruction. Each kernel runs once to warm up, then
--repeat times; the best wall time counts (CPU time is shown beside it: this machine is shared).
Last line: JSON.

With --arch A,B,... the same kernels run for each target (its ISA family's front end, its default wave
size) and each family's figures are also given as a ratio to gfx1100's in the same run: wave-instructions/s,
lane-instructions/s (a wave64 instruction does twice a wave32 one's work), efficiency, and work rate = the
same problem solved per second (gfx1100 seconds / this target's seconds). A wave64 target runs the same
kernel in fewer, wider instructions, so its wave-instruction rate, lane rate and efficiency understate it;
the family check (`family_vs_gfx1100` in the JSON: the lowest work rate over the kernels, target 0.8) is on
the work rate.

JIT (sim/shader/jit): every kernel runs twice, by the interpreter (AMDQ_SIM_JIT=0) and with the JIT (sync: compiled before first use);
each kernel's figures are the JIT's, with `interp_*` beside them (the same measurements for the interpreter) and
`jit_speedup` = interpreter seconds / JIT seconds. The JIT's timed runs are its steady state, every region
recompiled at -O2 (the second tier, jit/compiled.py TIERS); `jit_fast_seconds` and `jit_fast_speedup` are the same
runs with the first tier's code. JIT compile time per kernel: `jit_compile_ms` (cold, first tier: an empty memory and
disk cache), `jit_disk_ms` (a fresh process's load from the disk cache), `jit_cached_ms` (compiled code in memory:
the next dispatch pays nothing), `jit_opt_ms` (the -O2 recompile, cold), `jit_library_ms` (the JIT library, the first
tier's shared functions for both wave sizes: compiled once per machine before the cold compile, in no other figure). Compiled code runs on `jit_threads` threads (the dispatch's host
thread, plus AMDQ_SIM_JIT_THREADS - 1 workers for calls over whole workgroups without global memory access; the
ctypes calls release the interpreter lock). `jit_coverage`: the share of wave-instructions that ran as compiled code
(the rest ran in the interpreter). The JIT's efficiency counts its steps as the interpreter's.

The limit: with pyopencl and PoCL installed, the same OpenCL kernels (same source, sizes and inputs) also run
compiled natively for this CPU by PoCL in this process (bench/pocl.py); each kernel's `vs_pocl` is amdq's
seconds over PoCL's (goals: vadd within 10x, the tiled matmul within 3x). Without them the column is skipped
with a note (`pocl` in the JSON says why).

The fixed cost of a dispatch: per target, a one-wave kernel of about 100 instructions is launched through the
whole device (SIM:<arch>, engines on the launching thread) and its simulated GPU time (the dispatch's start
and end timestamps: on an AQL queue those of the dispatch's completion signal) is reported, median and best of
40 launches after 20 warm-up ones, in the best of three rounds (goal: at most 100 us), beside PoCL's time
for the same kernel as one workgroup; with the interpreter too (`interp_gpu_us_median`). `jit_fallbacks` names
the mnemonics that still ran in the interpreter with the JIT on (wave-instructions per run, the most first).

    python bench/shader.py [--quick] [--profile] [--arch gfx1100,gfx1201,gfx942]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from amdq.sim.shader import core as C  # noqa: E402
from harness import run_cl as _run_cl  # noqa: E402
from amdq.errors import UnsupportedInstruction  # noqa: E402


def numpy_op_time(lanes: int, cache: dict = {}) -> float:  # noqa: B006
    """Seconds for one numpy uint32 add over `lanes` lanes (best of several)."""
    if lanes not in cache:
        a = np.random.default_rng(0).integers(0, 1 << 31, lanes, dtype=np.uint32)
        b, out = a.copy(), np.empty_like(a)
        best = float("inf")
        for _ in range(7 if lanes >= 1 << 16 else 50):
            t = time.perf_counter()
            np.add(a, b, out=out)
            best = min(best, time.perf_counter() - t)
        cache[lanes] = best
    return cache[lanes]


class Meter:
    """Times every step of the scheduler and the lanes it covered."""

    def __init__(self):
        self.steps: list[int] = []
        self.by_inst: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        self.interpreted: dict[str, int] = defaultdict(int)   # mnemonic -> wave-instructions the interpreter ran
        self.on = False

    def install(self, profile: bool):
        meter, orig_get = self, C.ICache.get

        def get(icache, pc, wave64):
            fn, inst, control, whole, cell = orig_get(icache, pc, wave64)
            if not meter.on:
                return fn, inst, control, whole, cell

            def timer(step):
                def timed(w, sel):
                    t = time.perf_counter()
                    step(w, sel)
                    dt = time.perf_counter() - t
                    k = w.n if isinstance(sel, slice) else len(sel)
                    meter.steps.append(k * w.lanes)
                    meter.interpreted[inst.key] += k
                    if profile:
                        meter.by_inst[inst.mnemonic] += dt
                        meter.count[inst.mnemonic] += 1
                return timed
            return timer(fn), inst, control, timer(whole), cell
        C.ICache.get = get


def bench(name, src, kernel, args, grid, block, meter: Meter, flags=(), repeat: int = 5, arch: str = "gfx1100"):
    """The interpreter's figures (`interp_*`) beside the JIT's (see the module docstring)."""
    from amdq.sim.shader.jit import compiled, library, runtime
    old, old_opt = os.environ.get("AMDQ_SIM_JIT"), runtime.OPT_HOT
    try:
        os.environ["AMDQ_SIM_JIT"] = "0"
        _, interp = _bench(name, src, kernel, args, grid, block, meter, flags, repeat, arch)
        os.environ["AMDQ_SIM_JIT"] = "sync"            # compiled before first use: the timed runs are the JIT's
        run_cl = functools.partial(_run_cl, arch=arch)
        times = {}
        with tempfile.TemporaryDirectory() as d:              # cold: nothing compiled in memory or on disk
            old_dir = os.environ.get("AMDQ_SIM_JIT_CACHE")
            os.environ["AMDQ_SIM_JIT_CACHE"] = d
            try:
                runtime.OPT_HOT = float("inf")                # the fast tier alone first
                for what in ("compile", "disk", "cached", "opt"):
                    if what in ("compile", "disk"):
                        runtime.forget()
                        times.setdefault("library", library.ready())     # (once per machine: in no kernel's figure)
                    if what == "opt":                         # then every region again at -O2, cold
                        runtime.OPT_HOT = 0.0
                    c0 = sum(compiled.stats[k] for k in ("compile_seconds", "load_seconds", "recompile_seconds"))
                    run_cl(src, kernel, args, grid, block, flags=flags)
                    times[what] = sum(compiled.stats[k] for k in ("compile_seconds", "load_seconds",
                                                                  "recompile_seconds")) - c0
            finally:
                runtime.forget()
                if old_dir is None:
                    os.environ.pop("AMDQ_SIM_JIT_CACHE", None)
                else:
                    os.environ["AMDQ_SIM_JIT_CACHE"] = old_dir
        runtime.OPT_HOT = float("inf")
        _, fast = _bench(name, src, kernel, args, grid, block, meter, flags, repeat, arch)
        runtime.OPT_HOT = 0.0                                  # steady state: every region at -O2 (from the warm-up)
        outs, jit = _bench(name, src, kernel, args, grid, block, meter, flags, repeat, arch)
    finally:
        runtime.OPT_HOT = old_opt
        if old is None:
            os.environ.pop("AMDQ_SIM_JIT", None)
        else:
            os.environ["AMDQ_SIM_JIT"] = old
    res = dict(jit)
    res.update({f"interp_{k}": v for k, v in interp.items()
                if k not in ("wave_instructions", "steps", "jit_coverage", "jit_fallbacks")})
    res["jit_speedup"] = round(interp["seconds"] / max(jit["seconds"], 1e-9), 2)
    res["jit_fast_seconds"] = fast["seconds"]
    res["jit_fast_speedup"] = round(interp["seconds"] / max(fast["seconds"], 1e-9), 2)
    res.update({f"jit_{k}_ms": round(v * 1e3, 1) for k, v in times.items()})
    res["jit_threads"] = runtime.threads()
    return outs, res


def _bench(name, src, kernel, args, grid, block, meter: Meter, flags=(), repeat: int = 5, arch: str = "gfx1100"):
    """Best of `repeat` timed runs (after one warm-up run): wall and CPU seconds of the compute units alone."""
    run_cl = functools.partial(_run_cl, arch=arch)
    CASES[name] = (src, kernel, args, grid, block)                    # the same kernel again for PoCL
    run_cl(src, kernel, args, grid, block, flags=flags)               # compile, warm the decode cache
    _drain_jit()                                                      # (no compile in the background while timed)
    orig = C.ShaderCore.dispatch
    best = best_cpu = float("inf")

    def timed_dispatch(core, d, max_steps=None):                        # time the compute units alone
        t, c = time.perf_counter(), time.process_time()
        r = orig(core, d, max_steps)
        spent.append((time.perf_counter() - t, time.process_time() - c))
        return r
    C.ShaderCore.dispatch = timed_dispatch
    from amdq.sim.shader.jit import runtime
    compiled_before = runtime.counts["wave_instructions"]
    meter.interpreted.clear()
    try:
        for _ in range(repeat):
            meter.steps.clear()
            spent = []
            meter.on = True
            outs, stats = run_cl(src, kernel, args, grid, block, flags=flags)
            meter.on = False
            best = min(best, sum(s[0] for s in spent))
            best_cpu = min(best_cpu, sum(s[1] for s in spent))
    finally:
        meter.on = False
        C.ShaderCore.dispatch = orig
    coverage = (runtime.counts["wave_instructions"] - compiled_before) / max(1, repeat * stats.wave_instructions)
    ideal = sum(numpy_op_time(n) for n in meter.steps)
    if stats.steps > len(meter.steps):       # steps run as compiled code (not timed one by one): their mean lanes
        rest = stats.steps - len(meter.steps)
        lanes_rest = max(1, (stats.lane_steps - sum(meter.steps)) // rest)
        ideal += rest * numpy_op_time(int(lanes_rest))
    from amdq.hw.targets import get_target
    lanes = 32 if get_target(arch).gen.wave32 else 64
    fallbacks = sorted(meter.interpreted.items(), key=lambda kv: -kv[1])[:6]
    return outs, {"wave_instructions": stats.wave_instructions, "steps": stats.steps, "seconds": round(best, 4),
                  "cpu_seconds": round(best_cpu, 4), "wave_instructions_per_s": round(stats.wave_instructions / best),
                  "lane_instructions_per_s": round(stats.wave_instructions * lanes / best),
                  "efficiency": round(ideal / best, 3), "jit_coverage": round(coverage, 3),
                  "jit_fallbacks": {k: v // repeat for k, v in fallbacks}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes (CI)")
    ap.add_argument("--profile", action="store_true", help="time per mnemonic")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per kernel (the best counts)")
    ap.add_argument("--arch", default="gfx1100", help="comma-separated targets (each against gfx1100 in the same run)")
    a = ap.parse_args()
    meter = Meter()
    meter.install(a.profile)
    archs = [x.strip() for x in a.arch.split(",") if x.strip()]
    if len(archs) > 1 and "gfx1100" not in archs:
        archs.insert(0, "gfx1100")
    per = {arch: run_arch(arch, a, meter) for arch in archs}
    res = per[archs[0]] if len(archs) == 1 else {"archs": per}
    if len(archs) > 1:
        base = per["gfx1100"]
        for arch, r in per.items():
            for k, st in r.items():
                if isinstance(st, dict) and "wave_instructions_per_s" in st and k in base:
                    st["speed_vs_gfx1100"] = round(st["wave_instructions_per_s"] / base[k]["wave_instructions_per_s"], 2)
                    st["efficiency_vs_gfx1100"] = round(st["efficiency"] / max(base[k]["efficiency"], 1e-9), 2)
                    st["lane_speed_vs_gfx1100"] = round(st["lane_instructions_per_s"] / base[k]["lane_instructions_per_s"], 2)
                    st["work_vs_gfx1100"] = round(base[k]["seconds"] / st["seconds"], 2)
        res["family_vs_gfx1100"] = {arch: min(st["work_vs_gfx1100"] for st in r.values()
                                              if isinstance(st, dict) and "work_vs_gfx1100" in st)
                                    for arch, r in per.items() if "unsupported" not in r}
    res["targets"] = {"vadd_wave_instructions_per_s": 5_000_000, "vadd_efficiency": 0.3, "family_vs_gfx1100": 0.8,
                      "jit_vadd_wave_instructions_per_s": 100_000_000, "jit_matmul_wave_instructions_per_s": 100_000_000,
                      "jit_lds_reduce_wave_instructions_per_s": 80_000_000, "jit_compile_ms": 50}
    res["targets"].update(LIMIT_TARGETS)
    res["pocl"] = POCL_NOTE[0]
    print(json.dumps(res))


def run_arch(arch: str, a, meter) -> dict:
    """The three kernels on one target; {kernel: figures} (or {"unsupported": why})."""
    try:
        return _run_arch(arch, a, meter)
    except UnsupportedInstruction as e:
        print(f"{arch}: {e}")
        return {"unsupported": str(e)}


def _run_arch(arch: str, a, meter) -> dict:
    bench_ = functools.partial(bench, arch=arch, repeat=a.repeat)
    r = np.random.default_rng(0)
    n = 1 << (16 if a.quick else 20)
    m = 64 if a.quick else 256
    res = {}
    x, y = r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    (_, _, out), res["vadd"] = bench_("vadd", "vadd.cl", "vadd", [x, y, np.zeros(n, np.float32), 2.0, n],
                                      (n // 256, 1, 1), (256, 1, 1), meter)
    ok = {"vadd": bool(np.allclose(out, x + 2 * y, rtol=1e-6))}
    A, B = r.standard_normal((m, m)).astype(np.float32), r.standard_normal((m, m)).astype(np.float32)
    (_, _, Cm), res["matmul"] = bench_("matmul", "matmul_tiled.cl", "matmul_tiled",
                                       [A, B, np.zeros((m, m), np.float32), m], (m // 16, m // 16, 1), (16, 16, 1), meter)
    ok["matmul"] = bool(np.allclose(Cm, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3))
    v = r.random(n, np.float32)
    (_, part), res["lds_reduce"] = bench_("lds_reduce", "lds_reduce.cl", "lds_reduce",
                                          [v, np.zeros(n // 256, np.float32)], (n // 256, 1, 1), (256, 1, 1), meter)
    ok["lds_reduce"] = bool(np.allclose(part, v.reshape(-1, 256).astype(np.float64).sum(1), rtol=1e-5))
    for k, st in res.items():
        st["valid"] = ok[k]
        print(f"{arch:8s} {k:11s} {st['wave_instructions']:>9} wave-instr  {st['seconds']:8.3f} s ({st['cpu_seconds']:.3f} cpu)  "
              f"{st['wave_instructions_per_s'] / 1e6:7.2f} M/s  efficiency {st['efficiency']:.2f}  "
              f"{'valid' if ok[k] else 'WRONG'}  | interpreter {st['interp_seconds']:7.3f} s "
              f"{st['interp_wave_instructions_per_s'] / 1e6:6.2f} M/s  JIT x{st['jit_speedup']:.1f} (fast tier "
              f"x{st['jit_fast_speedup']:.1f})  compile {st['jit_compile_ms']:.0f} ms (disk {st['jit_disk_ms']:.0f}, "
              f"cached {st['jit_cached_ms']:.0f}, -O2 {st['jit_opt_ms']:.0f}), "
              f"{st['jit_threads']} threads, {100 * st['jit_coverage']:.0f}% compiled"
              + (f" (interpreted: {', '.join(f'{m} {n}' for m, n in st['jit_fallbacks'].items())})"
                 if st["jit_fallbacks"] else ""))
    if a.profile:
        for mn, t in sorted(meter.by_inst.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  {mn:32s} {t * 1e3:9.2f} ms  {meter.count[mn]:6d} steps", file=sys.stderr)
    res["sizes"] = {"vadd": n, "matmul": m, "lds_reduce": n}
    res["one_wave"] = one_wave_dispatch(arch, 40)          # (cheap: a median of 40 in the quick mode too)
    pocl_column(res, arch, {"vadd": out, "matmul": Cm, "lds_reduce": part}, a.repeat)
    return res


# -- the limits: PoCL on this CPU, and the fixed cost of one dispatch ------------------------------------------

CASES: dict[str, tuple] = {}            # kernel name -> (source, kernel, args, grid, block) as bench() ran it
POCL_NOTE = ["not tried"]
LIMIT_TARGETS = {"vadd_vs_pocl": 10, "matmul_vs_pocl": 3, "one_wave_dispatch_us": 100}
_pocl: list = []
_pocl_times: dict[str, tuple] = {}      # kernel name -> (PoCL seconds, outputs): measured once per run


def _open_pocl():
    """The PoCL device of this run (None, with POCL_NOTE saying why, when pyopencl or PoCL is missing)."""
    if not _pocl:
        from pocl import PoCL
        dev, why = PoCL.open()
        _pocl.append(dev)
        POCL_NOTE[0] = why
        if dev is None:
            print(f"PoCL column skipped: {why}")
    return _pocl[0]


def pocl_column(res: dict, arch: str, outs: dict, repeat: int) -> None:
    """Each kernel of `res` also on PoCL (same source, sizes, inputs): pocl_seconds, vs_pocl (amdq / PoCL) and
    whether PoCL's outputs agree with amdq's."""
    dev = _open_pocl()
    if dev is None:
        return
    for k, st in res.items():
        if k not in CASES or not isinstance(st, dict):
            continue
        if k not in _pocl_times:
            src, kernel, args, grid, block = CASES[k]
            got, t = dev.run(src, kernel, args, grid, block, repeat=repeat)
            _settle()
            _pocl_times[k] = (t, got)
        t, got = _pocl_times[k]
        mine, theirs = outs[k], got[-1]               # the kernel's output: its last array argument
        st["pocl_seconds"] = round(t, 6)
        st["vs_pocl"] = round(st["seconds"] / t, 2)
        st["pocl_agrees"] = bool(np.allclose(np.asarray(theirs).reshape(np.shape(mine)), mine, rtol=1e-4, atol=1e-4))
        print(f"{arch:8s} {k:11s} PoCL {t * 1e3:8.3f} ms ({dev.threads} threads)  amdq/PoCL {st['vs_pocl']:7.1f}x"
              f"{'' if st['pocl_agrees'] else '  (PoCL output differs)'}")


SETTLE_S = 0.3          # after a PoCL run (see _settle)
ONE_WAVE_ROUNDS = 3     # rounds of one-wave launches (the best round's median counts)
WARM_LAUNCHES = 20      # before the one-wave dispatch is timed (the first few launches of a process run colder)
ONE_WAVE_SRC = r"""
__kernel void one_wave(__global uint *a) {
  uint i = get_global_id(0);
  uint x = a[i] + i;
  #pragma unroll
  for (int j = 0; j < 6; j++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; }
  a[i] = x;
}
"""


def _xorshift(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint32) + np.arange(len(x), dtype=np.uint32)
    for _ in range(6):
        x ^= x << np.uint32(13)
        x ^= x >> np.uint32(17)
        x ^= x << np.uint32(5)
    return x


def _settle() -> None:
    """After PoCL ran: its worker threads spin for a while before they sleep, and would share this machine's cores
    with what is measured next (the next target's first one-wave dispatches ran ~1.5x slower)."""
    time.sleep(SETTLE_S)


def _drain_jit() -> None:
    try:
        from amdq.sim.shader.jit import compiled
    except ImportError:
        return
    compiled.drain(60)


def one_wave_dispatch(arch: str, launches: int) -> dict:
    """one_wave with the JIT (sync) and with the interpreter (`interp_*`), side by side."""
    old = os.environ.get("AMDQ_SIM_JIT")
    try:
        os.environ["AMDQ_SIM_JIT"] = "0"
        interp = _one_wave(arch, launches, pocl=False)
        os.environ["AMDQ_SIM_JIT"] = "sync"
        out = _one_wave(arch, launches)
    finally:
        if old is None:
            os.environ.pop("AMDQ_SIM_JIT", None)
        else:
            os.environ["AMDQ_SIM_JIT"] = old
    out.update({f"interp_{k}": v for k, v in interp.items() if k.startswith(("gpu_", "vs_goal"))})
    return out


def _one_wave(arch: str, launches: int, pocl: bool = True) -> dict:
    """Simulated GPU time of a one-wave dispatch of about 100 instructions through the whole device (SIM:<arch>,
    engines on the launching thread), median and best over `launches` launches after a warm-up, in the best of
    ONE_WAVE_ROUNDS rounds."""
    import os
    import statistics

    import amdq
    from amdq.errors import AmdqError
    from amdq.hw.targets import get_target
    lanes = 32 if get_target(arch).gen.wave32 else 64
    old = os.environ.get("AMDQ_SIM_MODE")
    os.environ["AMDQ_SIM_MODE"] = "sync"
    try:
        dev = amdq.open_device(f"SIM:{arch}")
    finally:
        if old is None:
            os.environ.pop("AMDQ_SIM_MODE", None)
        else:
            os.environ["AMDQ_SIM_MODE"] = old
    try:
        try:
            k = dev.load(amdq.compile(ONE_WAVE_SRC, dev.arch, lang="opencl"))["one_wave"]
        except AmdqError as e:
            print(f"{arch:8s} one-wave dispatch: not compiled ({e})")
            return {"unsupported": str(e)}
        x = np.arange(lanes, dtype=np.uint32) * np.uint32(2654435761)
        buf = dev.upload(x)
        for _ in range(WARM_LAUNCHES):                              # warm: load, decode, compile, the host's caches
            k(buf, grid=1, block=lanes, wait=True)
        _drain_jit()                                                # (no -O2 compile of earlier kernels runs beside)
        gpu = None
        for _ in range(ONE_WAVE_ROUNDS):                            # the round with the lowest median counts: this
            times = []                                              # machine is shared, and slows down in bursts
            for _ in range(launches):
                buf.write(x)
                times.append(k(buf, grid=1, block=lanes, wait=True).record.gpu)
            if gpu is None or statistics.median(times) < statistics.median(gpu):
                gpu = times
        valid = bool((buf.numpy(np.uint32) == _xorshift(x)).all())
        engines = getattr(getattr(dev.sim, "gpu", dev.sim), "engines", {})
        queue = next(iter(engines.values()), None)
        stats = getattr(queue, "last_stats", None)
        n = stats.wave_instructions if stats is not None else None
    finally:
        dev.close()
    out = {"wave_instructions": n, "lanes": lanes, "launches": launches,
           "gpu_us_median": round(statistics.median(gpu) * 1e6, 1), "gpu_us_best": round(min(gpu) * 1e6, 1),
           "valid": valid}
    out["vs_goal"] = round(out["gpu_us_median"] / LIMIT_TARGETS["one_wave_dispatch_us"], 2)
    pdev = _open_pocl() if pocl else None
    if pdev is not None:
        _, t = pdev.run(ONE_WAVE_SRC, "one_wave", [x], (1, 1, 1), (lanes, 1, 1), repeat=launches)
        _settle()
        out["pocl_us"] = round(t * 1e6, 1)
        out["vs_pocl"] = round(out["gpu_us_median"] / (t * 1e6), 1)
    how = "JIT" if os.environ.get("AMDQ_SIM_JIT", "0") not in ("0", "") else "interpreter"
    print(f"{arch:8s} one-wave dispatch ({n} wave-instructions, {how}): {out['gpu_us_median']:8.1f} us simulated GPU time "
          f"(best {out['gpu_us_best']:.1f}; goal {LIMIT_TARGETS['one_wave_dispatch_us']} us)"
          + (f"  PoCL {out['pocl_us']:.1f} us" if "pocl_us" in out else "") + ("" if valid else "  WRONG"))
    return out


if __name__ == "__main__":
    main()
