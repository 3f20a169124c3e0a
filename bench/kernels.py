"""Wall time per kernel of the project's whole OpenCL kernel suite, and of the demo model end to end, with the
shader JIT and with the interpreter, so a regression in either shows.

The suite is the one the tests run (tests/test_shader_kernels.py: every kernel of tests/kernels, each test
function with each choice of its parameters, outputs checked by the test's own assertions), on each target of
--arch (as tests/test_targets_suite.py runs it: RDNA with both wave sizes, CDNA wave64), plus the family kernels
of tests/kernels_cdna (gfx942: tests/test_cdna.py) and tests/kernels_rdna4 (gfx1201: tests/test_wmma.py). A
case's time is the wall time of its kernel runs (load, upload, dispatch, read back; clang's compile is done
before the clock starts, it is cached on disk), best of --repeat and of the ROUNDS child runs (interpreter and JIT
alternately: this machine is shared). --where core runs them on the shader core
alone (tests/harness.py), --where device through the public API on a SIMKFD device in sync mode
(tests/device_harness.py). The demo (`amdq demo`, amdq/demo.py) runs end to end on SIM:<first arch>: its wall
time, and its simulated GPU time per launch; with the JIT also warm (`demo.warm`: the run after the compile-time
child below compiled its kernels, loaded from that disk cache), what a user's later runs reach once the heat their
runs left in the cache's records paid for compiling the demo's kernels (jit/records.py); and `demo.cli`: the
command `amdq demo` itself, as a user runs it (DEV=SIM:<first arch>, a new process each of CLI_RUNS times, the
simulated GPU's default asynchronous engines, that same disk cache), the median run (`runs_gpu_ms_per_launch`: each
run's, in the order they ran: the first has no index of its own pages to read ahead); and `demo.fresh`: the same
command FRESH_RUNS times in a row from an empty disk cache, what a user's first runs on a machine pay (the JIT
library's compile, then code interpreted until the heat the runs leave in the records pays for compiling it: these
runs are slower than `cli`, whose cache the compile-time child filled). The warm figure is a process
that ran the whole suite first; the command's includes what a new process pays on its first launches (loading the
compiled code from disk, first-touch memory) and the asynchronous engines' thread hand-overs.

Each mode runs in a child process with AMDQ_SIM_JIT set (1: the JIT, 0: the interpreter); the JIT column is
measured when the tree has the JIT package (amdq/sim/shader/jit) and says "absent" otherwise. The JIT runs as a
user's first run does: its disk cache empty (a fresh AMDQ_SIM_JIT_CACHE), so what it compiles (only what gets hot,
jit/runtime.py) is paid in its column (`jit_compile_ms`: the compile time it spent per case, on its worker thread).
The ratio reported is the JIT's time against the interpreter's in the same run (`jit_speedup` = interpreter
seconds / JIT seconds).

Compile time per case (`compile_ms`, `disk_ms`, `memory_ms`): two more children run the suite with AMDQ_SIM_JIT=sync
(every kernel compiled whole before its first use, first tier: an upper bound of what the JIT compiles of it, which
is what ran of it once hot): one with an empty disk cache (cold: the compile), then one on the disk cache it left (a
new process: loading), each case twice there (the second: from memory, which costs nothing). The goal is at most
50 ms cold per case (`compile_goal_ms`); `compile.compile_threads`: the threads one compile uses (a large region's
IR is compiled in parts, one per thread, and linked); `compile.library_ms`: the JIT library (the first tier's shared
functions, jit/library.py), compiled once per machine before the first case and in no case's figure. Last line:
JSON.

    python bench/kernels.py [--quick] [--arch gfx1100,gfx1201,gfx942] [--where core|device] [--repeat N]
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

MODES = {"interp": "0", "jit": "1", "compile": "sync", "disk": "sync"}    # mode -> AMDQ_SIM_JIT
ROUNDS = 2             # the interpreter and JIT children run this many times, alternately (each case: the best)
COMPILE_GOAL_MS = 50
FAMILY = {"gfx942": [("test_cdna", "test_mfma"), ("test_cdna", "test_mfma_chain_through_lds"),
                     ("test_cdna", "test_sdwa_byte_short_vectors"), ("test_cdna", "test_atomic_add_f64")],
          "gfx1201": [("test_wmma", "test_wmma_matmul")]}


def _compile_threads() -> int | None:
    """Threads one JIT compile uses here (a large region's IR in parts, compiled at once: jit/compiled.py)."""
    try:
        from amdq.sim.shader.jit import compiled
    except ImportError:
        return None
    return compiled.compile_threads()


def has_jit() -> bool:
    """The shader JIT package is in this tree."""
    return importlib.util.find_spec("amdq.sim.shader.jit") is not None


def _cases(fn) -> list[dict]:
    """Keyword arguments of every parametrized variant of a test function (its pytest.mark.parametrize marks)."""
    axes = []
    for m in [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]:
        names = [n.strip() for n in m.args[0].split(",")]
        vals = [v.values if hasattr(v, "values") else v for v in m.args[1]]
        axes.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in vals])
    return [dict(itertools.chain.from_iterable(d.items() for d in combo)) for combo in itertools.product(*axes)]


class Timer:
    """Wraps a run_cl: compiles first (not timed), then adds the run's wall time to `spent`."""

    def __init__(self, run, arch: str | None = None, wave64_only: bool = False, device: bool = False):
        self.run, self.arch, self.wave64_only, self.device = run, arch, wave64_only, device
        self.spent = 0.0
        self.kernels: list[str] = []

    def __call__(self, src, kernel, args, grid=(1, 1, 1), block=(64, 1, 1), arch="gfx1100", flags=(), **kw):
        from clang import compile_cl
        arch = self.arch or arch
        flags = tuple(flags)
        if self.wave64_only:                           # gfx9: wave64 only, and clang's default there
            flags = tuple(f for f in flags if "wavefrontsize" not in f)
        compile_cl(src, arch, flags=flags)            # cached on disk: the clock starts after it
        if self.device:
            import device_harness
            device_harness.device(kw.get("spec") or f"{kw.get('interface', 'SIMKFD')}+AMD:{arch}",
                                  kw.get("spec_suffix", ""))
        t = time.perf_counter()
        try:
            return self.run(src, kernel, args, grid, block, arch=arch, flags=flags, **kw)
        finally:
            self.spent += time.perf_counter() - t
            self.kernels.append(kernel)


def run_suite(archs: list[str], where: str, repeat: int, family: bool) -> dict:
    """{case id: {"seconds": best wall seconds, "kernels": [...]} or {"skipped"/"error": why}} for this process."""
    import pytest

    import device_harness
    import harness
    import test_shader_kernels as suite
    from amdq.hw.targets import get_target
    run = harness.run_cl if where == "core" else device_harness.run_cl
    out: dict[str, dict] = {}

    def case(cid: str, call, timers: list[Timer]) -> None:
        best, err = float("inf"), None
        spent = []                                       # per run: JIT compile and load ms (compile_ms below)
        for _ in range(repeat):
            for t in timers:
                t.spent, t.kernels = 0.0, []
            c0 = compile_ms()
            try:
                call()
            except pytest.skip.Exception as e:
                out[cid] = {"skipped": str(e)}
                return
            except Exception as e:                       # a failing case is reported, the rest still run
                err = f"{type(e).__name__}: {e}"
                break
            best = min(best, sum(t.spent for t in timers))
            _jit_wait()
            spent.append([round(b - a, 1) for a, b in zip(c0, compile_ms())])
        kernels = sorted({k for t in timers for k in t.kernels})
        out[cid] = {"error": err[:300]} if err else {"seconds": round(best, 4), "kernels": kernels,
                                                      "compile_ms": spent}

    for arch in archs:
        gen = get_target(arch).gen
        waves = (32, 64) if gen.wave32 else (64,)
        timer = Timer(run, arch, wave64_only=not gen.wave32, device=where == "device")
        orig = suite.run_cl
        suite.run_cl = timer
        try:
            for name in sorted(n for n in dir(suite) if n.startswith("test_")):
                fn = getattr(suite, name)
                for kw in _cases(fn):
                    if "wave" in kw and kw["wave"] not in waves:
                        continue
                    cid = "-".join([arch, name.removeprefix("test_")] + [f"{k}{v}" for k, v in kw.items()])
                    case(cid, lambda: fn(**kw), [timer])
        finally:
            suite.run_cl = orig
        for modname, fname in FAMILY.get(arch, []) if family else []:
            mod = __import__(modname)
            fn = getattr(mod, fname)
            timers = [Timer(harness.run_cl), Timer(device_harness.run_cl, device=True)]
            saved = (harness.run_cl, device_harness.run_cl)
            harness.run_cl, device_harness.run_cl = timers
            try:
                for kw in _cases(fn):
                    cid = "-".join([arch, fname.removeprefix("test_")] + [f"{k}{v}" for k, v in kw.items()])
                    case(cid, lambda: fn(**kw), timers)
            finally:
                harness.run_cl, device_harness.run_cl = saved
    return out


def compile_ms() -> tuple[float, float]:
    """This process's JIT milliseconds so far: (compiling, both tiers; loading from disk); 0s without the JIT."""
    if not has_jit():
        return 0.0, 0.0
    from amdq.sim.shader.jit import compiled
    st = compiled.stats
    return (st["compile_seconds"] + st["recompile_seconds"]) * 1e3, st["load_seconds"] * 1e3


def _jit_wait() -> None:
    """Let the JIT's worker finish what it is compiling (so a case's compile time is charged to it)."""
    if not has_jit():
        return
    from amdq.sim.shader.jit import compiled
    pool = compiled._pool
    if pool is not None:
        pool.submit(lambda: None).result()


def run_demo(arch: str) -> dict:
    """`amdq demo` on SIM:<arch> (engines on the launching thread): wall seconds, simulated GPU time per launch."""
    import amdq.demo as demo
    seen = []

    class Stages(demo.Stages):
        def __init__(self):
            super().__init__()
            seen.append(self)
    old, old_mode = demo.Stages, os.environ.get("AMDQ_SIM_MODE")
    demo.Stages, os.environ["AMDQ_SIM_MODE"] = Stages, "sync"
    buf = io.StringIO()
    try:
        t = time.perf_counter()
        rc = demo.run(f"SIM:{arch}", out=buf)
        wall = time.perf_counter() - t
    finally:
        demo.Stages = old
        if old_mode is None:
            os.environ.pop("AMDQ_SIM_MODE", None)
        else:
            os.environ["AMDQ_SIM_MODE"] = old_mode
    st = seen[-1]
    n = st.n["gpu"] or 1
    return {"seconds": round(wall, 3), "launches": st.n["gpu"], "gpu_ms_per_launch": round(st.t["gpu"] / n * 1e3, 3),
            "valid": rc == 0}


def _compile_row(cid: str, got: dict) -> dict:
    """A case's compile figures: what the JIT's own run compiled (ms, all runs), and the first tier's whole-kernel
    compile cold, from disk, from memory (the child runs' first, first and last run)."""
    def runs(mode):
        return got.get(mode, {}).get("suite", {}).get(cid, {}).get("compile_ms") or []
    row = {}
    if runs("jit"):
        row["jit_compile_ms"] = round(sum(r[0] for r in runs("jit")) / ROUNDS, 1)     # (a round's mean)
    if runs("compile"):
        row["compile_ms"] = runs("compile")[0][0]
    if runs("disk"):
        row["disk_ms"] = round(sum(runs("disk")[0]), 1)
        row["memory_ms"] = round(sum(runs("disk")[-1]), 1)
    return row


def _merge(got: dict, mode: str, res: dict, seconds: float) -> None:
    """Fold one child run into got[mode]: per case and for the demo the better of the rounds."""
    old = got.get(mode)
    res["run_seconds"] = seconds
    if old is None:
        got[mode] = res
        return
    old["run_seconds"] = round(old["run_seconds"] + seconds, 1)
    for cid, r in res["suite"].items():
        o = old["suite"].get(cid, {})
        if "seconds" in r and ("seconds" not in o or r["seconds"] < o["seconds"]):
            r["compile_ms"] = o.get("compile_ms", []) + r.get("compile_ms", [])
            old["suite"][cid] = r
        elif "seconds" in o:
            o["compile_ms"] = o.get("compile_ms", []) + r.get("compile_ms", [])
    if "demo" in res and res["demo"]["gpu_ms_per_launch"] < old["demo"]["gpu_ms_per_launch"]:
        old["demo"] = res["demo"]


def _child_env(**extra: str) -> dict:
    """This process's environment for a child process, this tree first on its PYTHONPATH, with `extra` set."""
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


CLI_RUNS = 5          # (the median of five: this VM's runs minutes apart differ by up to 30%)
FRESH_RUNS = 5        # the demo's first runs on a machine (demo.fresh)


def cli_demo(arch: str, cache: str, runs: int = CLI_RUNS) -> dict:
    """`amdq demo` on DEV=SIM:<arch> as a user runs it (the command, a new process each time, the simulated GPU's
    default asynchronous engines) with the JIT's disk cache `cache`: the figures of the median run (by simulated
    GPU time per launch, the "gpu" row of its table) and every run's."""
    env = _child_env(DEV=f"SIM:{arch}", AMDQ_SIM_JIT_CACHE=cache)
    for k in ("AMDQ_SIM_JIT", "AMDQ_SIM_MODE"):
        env.pop(k, None)
    rows = []
    for _ in range(runs):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "amdq", "demo"], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        gpu = [line.split() for line in p.stdout.splitlines() if line.startswith("gpu ")]
        if p.returncode or not gpu:
            sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
            rows.append({"seconds": round(wall, 3), "launches": 0, "gpu_ms_per_launch": float("nan"), "valid": False})
            continue
        n, total_ms = int(gpu[0][1]), float(gpu[0][2])
        rows.append({"seconds": round(wall, 3), "launches": n, "gpu_ms_per_launch": round(total_ms / n, 3),
                     "valid": "all outputs valid" in p.stdout})
    ran = [r["gpu_ms_per_launch"] for r in rows]        # (in the order they ran: the first reads nothing ahead)
    rows.sort(key=lambda r: (not r["valid"], r["gpu_ms_per_launch"]))
    out = dict(rows[len(rows) // 2])
    out["valid"] = all(r["valid"] for r in rows)
    out["runs_gpu_ms_per_launch"] = ran
    return out


def child(a) -> None:
    """One mode in this process: the suite and the demo, as JSON on the last line."""
    archs = [x.strip() for x in a.arch.split(",") if x.strip()]
    res = {}
    if a.child in ("compile", "disk"):                # the first tier's compile time alone
        from amdq.sim.shader.jit import library, runtime
        runtime.OPT_HOT = float("inf")
        res["library_ms"] = round(library.ready() * 1e3, 1)     # (once per machine: not in any case's figure)
    res["suite"] = run_suite(archs, a.where, a.repeat, not a.quick)
    res["demo"] = run_demo(archs[0])                  # (compile: fills the disk cache; disk: the warm demo)
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="gfx1100 only, one run per case, no family kernels (CI)")
    ap.add_argument("--arch", default=None, help="comma-separated targets (default gfx1100,gfx1201,gfx942)")
    ap.add_argument("--where", default="core", choices=("core", "device"))
    ap.add_argument("--repeat", type=int, default=None, help="runs per case, the best counts (default 3, quick 1)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.arch = a.arch or ("gfx1100" if a.quick else "gfx1100,gfx1201,gfx942")
    a.repeat = a.repeat or (1 if a.quick else 3)
    if a.child:
        return child(a)
    jit = has_jit()
    modes = ["interp"] + (["jit"] if jit else [])
    got: dict[str, dict] = {}
    order = [m for _ in range(ROUNDS) for m in modes] + (["compile", "disk"] if jit else [])
    with tempfile.TemporaryDirectory() as made:
        for mode in order:
            env = _child_env(AMDQ_SIM_JIT=MODES[mode])
            cold = tempfile.mkdtemp(prefix="amdq-bench-jit-")                # the JIT's first run: an empty cache
            if mode != "interp":
                env["AMDQ_SIM_JIT_CACHE"] = made if mode in ("compile", "disk") else cold
            repeat = max(2, a.repeat) if mode == "disk" else a.repeat
            cmd = [sys.executable, __file__, "--child", mode, "--arch", a.arch, "--where", a.where,
                   "--repeat", str(repeat)] + (["--quick"] if a.quick else [])
            t = time.perf_counter()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            shutil.rmtree(cold, ignore_errors=True)
            lines = p.stdout.strip().splitlines()
            if p.returncode or not lines:
                sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
                raise SystemExit(f"bench/kernels.py: the {mode} run failed (exit {p.returncode})")
            _merge(got, mode, json.loads(lines[-1]), round(time.perf_counter() - t, 1))
        if jit:
            cli = cli_demo(a.arch.split(",")[0], made)
            with tempfile.TemporaryDirectory() as empty:      # a user's first runs: nothing compiled yet
                fresh = cli_demo(a.arch.split(",")[0], empty, FRESH_RUNS)
    cases: dict[str, dict] = {}
    for cid in got["interp"]["suite"]:
        row = {"kernels": got["interp"]["suite"][cid].get("kernels", [])}
        for mode in modes:
            r = got[mode]["suite"].get(cid, {})
            row[f"{mode}_s"] = r.get("seconds")
            if "error" in r or "skipped" in r:
                row[f"{mode}_{'error' if 'error' in r else 'skipped'}"] = r.get("error") or r.get("skipped")
        if not jit:
            row["jit_s"] = None
        else:
            if row.get("interp_s") and row.get("jit_s"):
                row["jit_speedup"] = round(row["interp_s"] / row["jit_s"], 2)
            row.update(_compile_row(cid, got))
        cases[cid] = row
    print(f"{'case':48s} {'interpreter s':>14s} {'JIT s':>10s} {'speedup':>8s} {'JIT compiled ms':>16s} "
          f"{'compile ms (cold/disk/memory)':>30s}")
    for cid, row in cases.items():
        i, j = row.get("interp_s"), row.get("jit_s")
        note = row.get("interp_error") or row.get("interp_skipped") or ""
        cold = "/".join(str(row.get(k, "-")) for k in ("compile_ms", "disk_ms", "memory_ms"))
        print(f"{cid[:48]:48s} {i if i is not None else '-':>14} {j if j is not None else '-':>10} "
              f"{row.get('jit_speedup', '-'):>8} {row.get('jit_compile_ms', '-'):>16} {cold:>30}"
              + (f"  {note[:60]}" if note else ""))
    totals = {m: round(sum(r["seconds"] for r in got[m]["suite"].values() if "seconds" in r), 3) for m in modes}
    demo = {m: got[m]["demo"] for m in modes}
    if jit:
        demo["warm"] = got["disk"]["demo"]
        demo["cli"] = cli
        demo["fresh"] = fresh
    labels = {"warm": "warm: its code compiled by an earlier process, loaded from the disk cache",
              "cli": f"`amdq demo` as a user runs it, a new process each, that disk cache: the median of {CLI_RUNS}",
              "fresh": f"`amdq demo` from an empty disk cache, {FRESH_RUNS} runs in a row: the median"}
    for m, d in demo.items():
        label = labels.get(m, m)
        runs = d.get("runs_gpu_ms_per_launch")
        print(f"demo ({label}): {d['seconds']:.2f} s end to end, {d['launches']} launches, "
              f"{d['gpu_ms_per_launch']:.2f} ms simulated GPU time per launch{'' if d['valid'] else '  WRONG'}"
              + (f" (the runs in order: {', '.join(f'{x:.2f}' for x in runs)})" if runs else ""))
    failed = sorted(c for c, r in cases.items() if any(k.endswith("_error") for k in r))
    compile_summary = None
    if jit:
        cold = {c: r["compile_ms"] for c, r in cases.items() if r.get("compile_ms") is not None}
        over = sorted(c for c, v in cold.items() if v > COMPILE_GOAL_MS)
        compile_summary = {"cold_max_ms": max(cold.values(), default=0.0),
                           "cold_median_ms": sorted(cold.values())[len(cold) // 2] if cold else 0.0,
                           "memory_max_ms": max((r.get("memory_ms", 0.0) for r in cases.values()), default=0.0),
                           "jit_compiled_total_ms": round(sum(r.get("jit_compile_ms", 0.0) for r in cases.values()), 1),
                           "over_goal": over, "compile_threads": _compile_threads(),
                           "library_ms": got["compile"].get("library_ms")}
        print(f"compile (first tier, whole kernels, {compile_summary['compile_threads']} threads a compile): median "
              f"{compile_summary['cold_median_ms']} ms, max {compile_summary['cold_max_ms']} ms cold, {len(over)} of "
              f"{len(cold)} cases over {COMPILE_GOAL_MS} ms; the JIT's own run compiled "
              f"{compile_summary['jit_compiled_total_ms']} ms in all; the JIT library (both wave sizes, once per "
              f"machine, before the cases) {compile_summary['library_ms']} ms")
    print(f"suite total: " + ", ".join(f"{m} {totals[m]:.2f} s" for m in modes)
          + ("" if jit else "  (no JIT in this tree: the JIT column is empty; AMDQ_SIM_JIT=1 measures it once it is)")
          + (f"; {len(failed)} cases failed" if failed else ""))
    res = {"where": a.where, "archs": a.arch.split(","), "repeat": a.repeat, "jit": "present" if jit else "absent",
           "cases": cases, "totals": totals, "demo": demo, "failed": failed,
           "jit_speedup_total": round(totals["interp"] / totals["jit"], 2) if jit and totals.get("jit") else None,
           "demo_targets": {"gpu_ms_per_launch": 2.0}, "compile": compile_summary,
           "compile_goal_ms": COMPILE_GOAL_MS,
           "run_seconds": {m: r["run_seconds"] for m, r in got.items()}}
    print(json.dumps(res))
    if failed or not all(d["valid"] for d in demo.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
