"""A fixed-seed slice of scripts/fuzz_codeobj.py: structure-aware mutations of real code objects
must load cleanly or raise an AmdqError, quickly (run the script for the full 10,000+ cases)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import msgpack
import pytest

import amdq.codeobj.image as image
import amdq.codeobj.metadata as md

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fuzz_codeobj.py"
CASES = 1200


def load_fuzzer():
    """scripts/fuzz_codeobj.py as a module (it is a script, not part of the amdq package)."""
    if "fuzz_codeobj" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fuzz_codeobj", SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["fuzz_codeobj"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["fuzz_codeobj"]


@pytest.fixture(scope="module")
def fuzz():
    return load_fuzzer()


@pytest.fixture(scope="module")
def seeds(fuzz):
    return fuzz.build_seeds()


@pytest.mark.timeout(120)
def test_fixed_seed_slice(fuzz, seeds):
    rep = fuzz.run(CASES, seed=20240601, seeds=seeds)
    bad = "\n".join(f"case {f['case']} ({f['seed_file']}, {f['mutators']}): {f['outcome']}: {f['detail']} {f['where']}"
                    for f in rep["failures"][:20])
    assert rep["escapes"] == 0, f"{rep['escapes']} of {CASES} mutated code objects escaped:\n{bad}\n" \
                                f"replay one with: python3 scripts/fuzz_codeobj.py --seed 20240601 --case N -v"
    out = rep["outcomes"]
    rejected = sum(v for k, v in out.items() if k.startswith("rejected:"))
    # the slice must exercise both sides: mutations that still load and mutations that are refused
    assert out.get("ok", 0) > CASES // 10 and rejected > CASES // 10, out
    # metadata value mutations reach the checks behind the msgpack decode: some of them load
    meta = rep["by_mutator"]
    assert meta["mm_arg_int"].get("rejected", 0) > 10 and meta["mm_kernel_int"].get("ok", 0) > 0, meta


def test_seeds_load_cleanly(fuzz, seeds):
    """Every unmutated seed loads and packs its arguments: the fuzzer starts from valid objects."""
    from amdq.codeobj import load_code_object
    assert len(seeds) >= 10
    assert {load_code_object(d).kind for _, d in seeds} == {"ET_REL", "ET_DYN"}
    assert {load_code_object(d).arch for _, d in seeds} >= {"gfx1100", "gfx1201", "gfx942"}
    for name, data in seeds:
        r = fuzz.run_case(data)
        assert r.outcome == "ok", (name, r)


def test_detects_escapes_and_silent_wrong_answers(fuzz, seeds, monkeypatch):
    """The harness itself reports what it is looking for: a non-AmdqError, and a loaded kernel whose
    arguments lie outside its kernarg segment (here made possible by disabling the load-time check)."""
    name, data = seeds[0]
    monkeypatch.setattr(image, "find_metadata", lambda notes: (_ for _ in ()).throw(KeyError("boom")))
    assert fuzz.run_case(data).outcome == "escape:KeyError"
    monkeypatch.undo()

    lay = fuzz.parse_layout(data)
    m = lay.meta
    m["amdhsa.kernels"][0][".args"][0][".offset"] = m["amdhsa.kernels"][0][".kernarg_segment_size"]
    bad = fuzz.with_metadata(lay, msgpack.packb(m))
    assert fuzz.run_case(bad).outcome == "rejected:CodeObjectError"
    monkeypatch.setattr(md, "_check_overlaps", lambda args, w: None)
    orig_arg = md._arg
    monkeypatch.setattr(md, "_arg", lambda a, where, kss: orig_arg(a, where, 1 << 30))
    r = fuzz.run_case(bad)
    assert r.outcome == "wrong" and r.where == "argument outside kernarg segment", r


# -- launch stage -----------------------------------------------------------------------------------

LAUNCHES = 40


@pytest.fixture(scope="module")
def launch_seeds(fuzz):
    return fuzz.build_launch_seeds()


@pytest.mark.timeout(120)
def test_fixed_seed_launch_slice(fuzz, launch_seeds, monkeypatch):
    """Mutated gfx1100 kernels launched on one PM4 and one AQL device: each completes or raises an AmdqError, and
    the known-good launch after it is exact, without recreating a device. Interpreted (AMDQ_SIM_JIT=0): the slice's
    150 ms timeout is set for the interpreter's speed (a mutated kernel that loops long times out there, and may
    finish once the JIT compiles its loop)."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "0")
    rep = fuzz.run_launch(LAUNCHES, seed=20240601, seeds=launch_seeds, timeout_ms=150)
    bad = "\n".join(f"case {f['case']} ({f['seed_file']}, {f['mutators']}, {f['queue']}): {f['outcome']}: "
                    f"{f['detail']} {f['where']}" for f in rep["failures"][:20])
    assert rep["failures_count"] == 0, f"{rep['failures_count']} launch failures:\n{bad}\nreplay one with: " \
                                       f"python3 scripts/fuzz_codeobj.py --launch 1 --seed 20240601 --case N"
    out = rep["outcomes"]
    assert rep["launches"] >= LAUNCHES and rep["submitted"] >= LAUNCHES * 3 // 4, rep
    # the slice reaches both sides: kernels that still run, and GPU faults of several kinds that are recovered
    errors = {k for k in out if k.startswith("error:")}
    assert out.get("completed", 0) >= LAUNCHES // 4 and len(errors) >= 3, out
    assert "error:IllegalInstruction" in errors, out
    assert rep["recoveries"] >= 4 and rep["devices_recreated"] == 0, rep


@pytest.mark.parametrize("queue", ["pm4", "aql"])
def test_endless_kernel_times_out_and_is_recovered(fuzz, launch_seeds, queue):
    """A mutated kernel that never ends is a GPUTimeout, its queue is reset and the known-good launch after it is
    exact on the same device. (The random slice reaches timeouts only through long loops whose length against the
    wait timeout depends on the machine's speed, so the hang is made deterministic here.)"""
    name, data = launch_seeds[0]
    lc = fuzz.Launcher(queue, 150)
    try:
        with fuzz.environ(AMDQ_WAIT_TIMEOUT_MS="150"):
            load, outs = fuzz.run_launch_case(lc, fuzz.endless(fuzz.parse_layout(data)), fuzz.StderrTap(None))
        assert load == "ok" and outs, (name, load, outs)
        assert all(r.outcome == "error:GPUTimeout" for r in outs), outs
        assert lc.resets >= len(outs) and lc.recreated == 0
    finally:
        lc.dev.close()


def test_launch_seeds_run_cleanly(fuzz, launch_seeds):
    """Every unmutated launch seed loads and completes: faults in the slice come from the mutations."""
    lc = fuzz.Launcher("pm4", 1000)
    try:
        for name, data in launch_seeds:
            load, outs = fuzz.run_launch_case(lc, data, fuzz.StderrTap(None))
            assert load == "ok" and outs and all(r.outcome == "completed" for r in outs), (name, load, outs)
        assert lc.recreated == 0 and lc.resets == 0
    finally:
        lc.dev.close()


def test_launch_harness_reports_failures(fuzz, launch_seeds, monkeypatch):
    """The launch harness names what it looks for: a simulator internal error, a non-AmdqError from the runtime,
    and a device left poisoned (here: the known-good kernel's code overwritten), which it recreates."""
    import amdq.runtime.device as device
    import amdq.sim.shader.core as core
    name, data = launch_seeds[0]
    lc = fuzz.Launcher("pm4", 150)
    tap = fuzz.StderrTap(None)
    try:
        start, launch_on = core.ShaderCore.start, device.Device.launch

        def broken(self, d):                             # a simulator bug, in the fuzzed kernel only
            if d.pgm_addr != lc.good.addr:
                raise KeyError("simulated bug")
            return start(self, d)
        monkeypatch.setattr(core.ShaderCore, "start", broken)
        _, outs = fuzz.run_launch_case(lc, data, tap)
        assert outs[0].outcome == "internal" and "KeyError" in outs[0].detail, outs
        monkeypatch.undo()

        def escaping(self, kernel, *a, **k):             # a runtime escape, for the fuzzed kernel only
            if kernel.name != "put":
                raise ZeroDivisionError("x")
            return launch_on(self, kernel, *a, **k)
        monkeypatch.setattr(device.Device, "launch", escaping)
        _, outs = fuzz.run_launch_case(lc, data, tap)
        assert outs[0].outcome == "escape:ZeroDivisionError", outs
        monkeypatch.undo()
        assert lc.recreated == 0                         # neither poisoned the device

        launch = fuzz.Launcher.launch

        def poisoning(self, kernel):
            r = launch(self, kernel)
            good = self.good
            off = good.addr - good.prg.base
            good.prg.alloc.cpu.mv[off:off + 4] = b"\xff\xff\xff\xff"
            return r
        monkeypatch.setattr(fuzz.Launcher, "launch", poisoning)
        _, outs = fuzz.run_launch_case(lc, data, tap)
        assert outs[0].outcome == "poisoned" and "IllegalInstruction" in outs[0].detail, outs
        assert lc.recreated == 1
        monkeypatch.undo()
        _, outs = fuzz.run_launch_case(lc, data, tap)          # the new device works
        assert [r.outcome for r in outs] == ["completed"], outs
    finally:
        lc.dev.close()
