"""The compile helper (sim/shader/jit/helper.py): background compiles run in a child process, the asking process
places what it stored without LLVM, and every way the helper can fail leaves the compile to the process itself."""
import json
import os
import subprocess
import sys
import textwrap

import msgpack
import numpy as np
import pytest

from amdq.sim.shader.jit import compiled, helper, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = "__kernel void k(__global float *a) { int i = get_global_id(0); a[i] = a[i] * 3.0f + 1.0f; }"


def _run_hot():
    """The kernel run in the default mode with every candidate compiled at its first trigger (in the background),
    then again once those compiles are done: (both outputs right, wave-instructions run compiled the second time)."""
    import harness
    a = np.arange(4096, dtype=np.float32)
    want = a * np.float32(3) + np.float32(1)
    ok = True
    for _ in range(3):
        (out,), _ = harness.run_cl(SRC, "k", [a], (64, 1, 1), (64, 1, 1))
        ok &= bool(np.array_equal(out, want))
    compiled.drain(120)
    before = runtime.counts["wave_instructions"]
    (out,), _ = harness.run_cl(SRC, "k", [a], (64, 1, 1), (64, 1, 1))
    return ok and bool(np.array_equal(out, want)), runtime.counts["wave_instructions"] - before


CHILD = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from amdq.sim.shader.jit import compiled, runtime
    import test_jit_helper as t
    runtime.HOT = runtime.SEARCH_SECONDS = 0.0      # (compile at once: in the background, by the helper)
    runtime.START_SECONDS = 0.0
    ok, used = t._run_hot()
    print(json.dumps({{"ok": ok, "used": used, "llvm": "llvmlite.binding" in sys.modules,
                      "helper": compiled.stats["helper_compiles"], "compiled": compiled.stats["compiled"]}}))
""")


def test_the_helper_compiles_and_the_process_places_without_llvm(tmp_path):
    """A process in the default mode hands its compiles to the helper, which names the host, makes the JIT library
    and stores each region; the process places them from the disk cache and runs them, never importing LLVM."""
    env = {**os.environ, "AMDQ_SIM_JIT_CACHE": str(tmp_path), "AMDQ_SIM_JIT": "1", "PYTHONPATH": ROOT}
    env.pop("AMDQ_SIM_JIT_HELPER", None)
    if compiled.cores() < 2:
        pytest.skip("one CPU: compiles stay in the process")
    p = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, tests=os.path.join(ROOT, "tests"))], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["used"] > 0, got
    assert got["helper"] >= 1 and got["compiled"] >= 1, got
    assert not got["llvm"], "the process started LLVM itself"
    assert list((tmp_path / "hosts").iterdir()) and list(tmp_path.glob("*.lnk"))


EXIT_CHILD = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    import numpy as np
    import harness
    from amdq.sim.shader.jit import helper, runtime
    runtime.HOT = runtime.SEARCH_SECONDS = 0.0      # (compile at once: in the background, by the helper)
    runtime.START_SECONDS = 0.0
    sent = []
    submit = helper.submit
    helper.submit = lambda *a: sent.append(a[0]) or submit(*a)
    a = np.arange(4096, dtype=np.float32)
    for op in ("*", "+", "-"):
        src = "__kernel void k(__global float *a) {{ int i = get_global_id(0); a[i] = a[i] %s 3.0f; }}" % op
        harness.run_cl(src, "k", [a], (64, 1, 1), (64, 1, 1))
    print(json.dumps({{"sent": len(sent), "queued": len(helper._queued)}}))   # (and exit at once)
""")


def test_an_exiting_process_leaves_its_queued_compiles_to_the_helper(tmp_path):
    """A process that exits while compiles wait for the helper (it answers one at a time) sends them all at exit;
    the helper compiles every one after the process is gone, and stores it for the next run."""
    if compiled.cores() < 2:
        pytest.skip("one CPU: compiles stay in the process")
    env = {**os.environ, "AMDQ_SIM_JIT_CACHE": str(tmp_path), "AMDQ_SIM_JIT": "1", "PYTHONPATH": ROOT}
    env.pop("AMDQ_SIM_JIT_HELPER", None)
    p = subprocess.run([sys.executable, "-c", EXIT_CHILD.format(root=ROOT, tests=os.path.join(ROOT, "tests"))],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["sent"] >= 2 and got["queued"] >= 1, got     # (the helper was still starting: the rest queued)
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:                      # every region, and the JIT library
        if len(list(tmp_path.glob("*.lnk"))) >= got["sent"] + 1 and not list((tmp_path / "requests").iterdir()):
            break
        time.sleep(0.2)
    assert len(list(tmp_path.glob("*.lnk"))) == got["sent"] + 1, (got, sorted(tmp_path.iterdir()))


@pytest.fixture
def hot(monkeypatch, tmp_path):
    """This process in the default mode, compiling at the first trigger, with a fresh helper and disk cache."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.delenv("AMDQ_SIM_JIT_HELPER", raising=False)
    monkeypatch.setitem(compiled._state, "cores", 2)
    for k in ("HOT", "SEARCH_SECONDS", "START_SECONDS"):
        monkeypatch.setattr(runtime, k, 0.0)
    runtime.forget()
    helper.stop()
    yield tmp_path
    helper.stop()
    runtime.forget()


def test_a_helper_that_dies_leaves_the_compiles_to_the_process(hot, monkeypatch):
    """A helper that is gone (here: one that exits at once) is not asked again, and the process compiles itself."""
    monkeypatch.setattr(helper, "_start", lambda: subprocess.Popen(
        [sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0))
    h0, c0 = compiled.stats["helper_compiles"], compiled.stats["compiled"]
    ok, used = _run_hot()
    assert ok and used > 0
    assert compiled.stats["helper_compiles"] == h0 and compiled.stats["compiled"] > c0
    assert compiled._state.get("helper_gone") and not compiled.helper_wanted()


def test_the_helper_follows_the_process_settings(hot, monkeypatch, tmp_path_factory):
    """One helper serves a process whose disk cache and vector width change between compiles: each request carries
    them, and what it stores is where, and at the width, the process looks for it."""
    got = []
    for width in ("8", "16"):
        d = tmp_path_factory.mktemp(f"cache{width}")
        monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(d))
        monkeypatch.setenv("AMDQ_SIM_JIT_WIDTH", width)
        runtime.forget()
        h0 = compiled.stats["helper_compiles"]
        ok, used = _run_hot()
        got.append((ok, used > 0, compiled.stats["helper_compiles"] > h0, bool(list(d.glob("*.lnk")))))
    assert got == [(True, True, True, True)] * 2, got
    assert len(helper._proc) == 1


def test_an_exiting_process_drops_its_background_compiles(hot, monkeypatch):
    """A compile asked for once the process is exiting is dropped, not run (its heat is on record for the next run),
    by the helper or by the worker thread."""
    monkeypatch.setattr(compiled._exiting, "is_set", lambda: True)
    for fut in (compiled.submit(("0" * 64, "x"), ["f"], lambda *a: pytest.fail("made IR while exiting")),
                helper.submit(("0" * 64, "x"), ["f"], lambda *a: pytest.fail("made IR while exiting"), runtime.FAST,
                              1, lambda: pytest.fail("described while exiting"))):
        with pytest.raises(compiled.Abandoned):
            fut.result(60)


def test_llvms_start_is_charged_until_the_helper_runs(monkeypatch, tmp_path):
    """A candidate's compile threshold includes LLVM's start only until LLVM runs where the compiles run: with the
    helper, until it started (then every later candidate is compiled at the heat its own compile costs)."""
    from amdq.sim.shader.jit.block import Block
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.delenv("AMDQ_SIM_JIT_HELPER", raising=False)
    monkeypatch.setitem(compiled._state, "cores", 2)
    monkeypatch.delitem(compiled._state, "helper_gone", raising=False)
    monkeypatch.setattr(compiled, "started", lambda: False)
    monkeypatch.setattr(runtime, "HOT", 1.0)
    from types import SimpleNamespace
    blk = Block(0x1000, [SimpleNamespace(pc=0x1000 + 4 * j, size=4) for j in range(30)], ["alu"] * 30)
    triggers = []
    for proc in ([], [object()]):
        monkeypatch.setattr(helper, "_proc", proc)
        cand = runtime.Candidate("rdna3", False, [blk], (), (0x1000, b""))
        cand.saw(blk)
        triggers.append(cand.trigger)
    assert triggers[0] - triggers[1] == pytest.approx(runtime.START_SECONDS * runtime.HELPER_SHARE)
    monkeypatch.setenv("AMDQ_SIM_JIT_HELPER", "0")      # (compiles in this process: LLVM's start is this process's)
    assert not runtime._llvm_started()


def test_the_helper_is_off_when_asked_or_without_a_disk_cache(monkeypatch):
    monkeypatch.setitem(compiled._state, "cores", 2)
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", "/tmp/amdq-helper-test")
    monkeypatch.delenv("AMDQ_SIM_JIT_HELPER", raising=False)
    monkeypatch.delitem(compiled._state, "helper_gone", raising=False)
    assert compiled.helper_wanted()
    monkeypatch.setenv("AMDQ_SIM_JIT_HELPER", "0")
    assert not compiled.helper_wanted()
    monkeypatch.delenv("AMDQ_SIM_JIT_HELPER")
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", "off")
    assert not compiled.helper_wanted()
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", "/tmp/amdq-helper-test")
    monkeypatch.setitem(compiled._state, "helper_gone", "it died")
    assert not compiled.helper_wanted()
    monkeypatch.delitem(compiled._state, "helper_gone")
    monkeypatch.setitem(compiled._state, "cores", 1)
    assert not compiled.helper_wanted()


def test_a_region_description_gives_the_same_ir(monkeypatch, tmp_path):
    """What the helper makes from a region's description (runtime.describe_region: instructions as PCs, bytes and
    flags, the code lines) is the IR this process makes from the region's decoded blocks, at both tiers; a
    description whose bytes do not decode to what it says is refused."""
    import harness
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    runtime.forget()
    a = np.arange(256, dtype=np.float32)
    harness.run_cl(SRC, "k", [a], (4, 1, 1), (64, 1, 1))
    cands = [c for cs in runtime.KNOWN.values() for c in cs if c.parts]
    assert cands
    for cand in cands:
        blocks = cand.parts[0].blocks
        desc = runtime.describe_region(cand, blocks)
        desc = msgpack.unpackb(msgpack.packb(desc, use_bin_type=True), raw=False)    # (as the helper gets it)
        for tier, parts in ((runtime.FAST, 1), (runtime.FAST, 2), (runtime.OPT, 1)):
            assert runtime.region_ir(desc)(tier, parts) == runtime._make_ir(cand, blocks)(tier, parts)
        raw = bytearray(desc["blocks"][0][1][0][1])
        raw[-1] ^= 0xFF
        desc["blocks"][0][1][0][1] = bytes(raw)
        with pytest.raises(ValueError):
            runtime.region_ir(desc)(runtime.FAST, 1)
    runtime.forget()
