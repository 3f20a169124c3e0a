"""The shader JIT against the interpreter (the reference): every case of the kernel suite
(tests/test_shader_kernels.py, as tests/test_targets_suite.py enumerates it) for gfx1100, gfx1201 and gfx942,
each dispatch run twice, by the interpreter (AMDQ_SIM_JIT=0) on a copy of memory and with the JIT; all of
memory and every batch's final register state (VGPRs, SGPRs, SCC, PC, status, EXEC mask, MODE) must be
identical, and the suite's own numpy checks run on the JIT's outputs. Plus: faults under the JIT are the
interpreter's (page fault address, illegal-instruction PC), compiled code follows the instruction-cache
rules when code bytes change, and the disk cache is reused and keyed by the bytes.
"""
from __future__ import annotations

import copy
import os

import numpy as np
import pytest

import harness
import test_shader_kernels as suite
from amdq.errors import GPUException
from amdq.sim.shader import core as C
from amdq.sim.shader import wave as W
from amdq.sim.shader.jit import compiled, records, runtime
from test_targets_suite import _cases

ARCHS = {"gfx1100": (32, 64), "gfx1201": (32, 64), "gfx942": (64,), "gfx950": (64,)}


@pytest.fixture(autouse=True)
def _jit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path / "jit"))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")         # compiled before first use: every case runs compiled code


class Capture:
    """Final register state of every batch (taken when the batch hands its arrays back)."""

    def __init__(self, monkeypatch):
        self.states: list | None = None
        orig = W.WaveState.release
        cap = self

        def release(w):
            if cap.states is not None:
                cap.states.append({k: np.array(getattr(w, k)) for k in
                                   ("v", "s", "scc", "pc", "status", "em", "full", "mode")})
            orig(w)
        monkeypatch.setattr(W.WaveState, "release", release)


def _differential(monkeypatch, used: list, mode: str = "sync", steps: bool = True):
    """Every dispatch from now on runs twice: by the interpreter on a copy of memory, then with the JIT in `mode`
    (AMDQ_SIM_JIT); memory, final registers and faults must agree (and the scheduler's steps, unless `steps` is
    false: waves the JIT leaves at different PCs take the interpreter more steps)."""
    cap = Capture(monkeypatch)
    orig = C.ShaderCore.dispatch

    def dispatch(core, d, max_steps=None):
        mem = core.mem
        ref_mem = copy.copy(mem)
        ref_mem.buf = mem.buf.copy()
        ref_mem.starts, ref_mem.ends = list(mem.starts), list(mem.ends)
        monkeypatch.setenv("AMDQ_SIM_JIT", "0")
        cap.states = []
        err_ref = None
        try:
            ref = orig(C.ShaderCore(ref_mem), d, max_steps)
        except GPUException as e:
            err_ref = e
        ref_states = cap.states
        monkeypatch.setenv("AMDQ_SIM_JIT", mode)
        cap.states = []
        before, failed = runtime.counts["wave_instructions"], compiled.stats["compile_failures"]
        try:
            got = orig(core, d, max_steps)
        except GPUException as e:
            assert err_ref is not None and str(e) == str(err_ref), (e, err_ref)
            raise
        finally:
            jit_states, cap.states = cap.states, None
        assert err_ref is None, f"the interpreter failed, the JIT did not: {err_ref}"
        assert compiled.stats["compile_failures"] == failed, "a region failed to compile (left to the interpreter)"
        used.append(runtime.counts["wave_instructions"] - before)
        assert (got.wave_instructions, got.waves) == (ref.wave_instructions, ref.waves)
        assert got.steps == ref.steps or not steps
        top = mem.top
        diff = np.flatnonzero(mem.buf[:top] != ref_mem.buf[:top])
        assert not len(diff), f"memory differs at {len(diff)} bytes, first at {mem.base + int(diff[0]):#x}"
        assert len(jit_states) == len(ref_states)
        for b, (x, y) in enumerate(zip(jit_states, ref_states)):
            for k in x:
                bad = np.argwhere(x[k] != y[k])
                assert not len(bad), f"batch {b}: {k} differs at {bad[:4].tolist()}"
        return got
    monkeypatch.setattr(C.ShaderCore, "dispatch", dispatch)


def _interpreted(monkeypatch) -> set[str]:
    """The mnemonics the interpreter decodes from now on while the JIT is on (what it was left to run)."""
    interpreted: set[str] = set()
    get = C.ICache.get

    def noted(icache, pc, wave64):
        got = get(icache, pc, wave64)
        if os.environ.get("AMDQ_SIM_JIT") != "0":
            interpreted.add(got[1].mnemonic.removesuffix("_e32").removesuffix("_e64"))
        return got
    monkeypatch.setattr(C.ICache, "get", noted)
    return interpreted


def _params():
    for arch, waves in ARCHS.items():
        for name, kw in _cases():
            if "wave" in kw and kw["wave"] not in waves:
                continue
            cid = "-".join([name.removeprefix("test_")] + [f"{k}{v}" for k, v in kw.items()])
            yield pytest.param(arch, name, kw, id=f"{arch}-{cid}")


@pytest.mark.parametrize("arch, name, kw", list(_params()))
def test_jit_matches_interpreter(arch, name, kw, monkeypatch):
    """One suite case: interpreter and JIT give the same memory and final registers (and pass the suite's checks)."""
    used: list[int] = []
    _differential(monkeypatch, used)
    waves64 = ARCHS[arch] == (64,)

    def run_cl(*a, **k):
        flags = tuple(k.pop("flags", ()))
        if waves64:
            flags = tuple(f for f in flags if "wavefrontsize" not in f)
        return harness.run_cl(*a, **{**k, "flags": flags, "arch": arch})
    monkeypatch.setattr(suite, "run_cl", run_cl)
    getattr(suite, name)(**kw)
    assert used, "no dispatch ran"


WIDTH_CASES = ["vadd_partial", "divergent_loop", "wave_ops", "lds_transpose", "atomics_global", "dyn_lds",
               "select_cmp", "vec_fma"]


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("case", WIDTH_CASES)
def test_each_vector_width_matches_interpreter(case, arch, width, monkeypatch):
    """Generated code with 8 and with 16 lanes per vector operation (AMDQ_SIM_JIT_WIDTH; the host picks one, the
    other is what another host runs): the interpreter's memory and registers, wave32 and wave64."""
    monkeypatch.setenv("AMDQ_SIM_JIT_WIDTH", str(width))
    runtime.forget()                    # (regions compiled at the other width are not reused)
    for name, kw in _cases():
        if name != f"test_{case}" or (arch == "gfx942" and kw.get("wave", 64) != 64):
            continue
        test_jit_matches_interpreter(arch, name, kw, monkeypatch)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx950"])
def test_jit_covers_the_bench_kernels(arch):
    """vadd and the tiled matmul run mostly compiled on gfx1100 and on gfx950 (CDNA4: CDNA3's translated keys),
    else the JIT does nothing there."""
    r = np.random.default_rng(0)
    n = 4096
    x, y = r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    before = runtime.counts["wave_instructions"]
    (_, _, out), st = harness.run_cl("vadd.cl", "vadd", [x, y, np.zeros(n, np.float32), 2.0, n], (n // 256, 1, 1),
                                     (256, 1, 1), arch=arch)
    assert np.array_equal(out, x + np.float32(2) * y)
    assert runtime.counts["wave_instructions"] - before > 0.6 * st.wave_instructions
    m = 32
    A, B = r.standard_normal((m, m)).astype(np.float32), r.standard_normal((m, m)).astype(np.float32)
    before = runtime.counts["wave_instructions"]
    _, st = harness.run_cl("matmul_tiled.cl", "matmul_tiled", [A, B, np.zeros((m, m), np.float32), m],
                           (m // 16, m // 16, 1), (16, 16, 1), arch=arch)
    assert runtime.counts["wave_instructions"] - before > 0.8 * st.wave_instructions


# ---------------------------------------------------------------- faults

def _run_both(monkeypatch, fn):
    out = {}
    for jit in ("0", "sync"):
        monkeypatch.setenv("AMDQ_SIM_JIT", jit)
        with pytest.raises(GPUException) as e:
            fn()
        out[jit] = e.value
    return out


def test_page_fault_same_address(monkeypatch):
    """A load from an unmapped address faults naming the same address and PC with or without the JIT."""
    n = 512
    bad = 0x7777_0000_0000

    def go():
        harness.run_cl("vadd.cl", "vadd", [bad, np.ones(n, np.float32), np.zeros(n, np.float32), 2.0, n],
                       (n // 256, 1, 1), (256, 1, 1))
    e = _run_both(monkeypatch, go)
    assert str(e["0"]) == str(e["sync"])
    assert e["0"].address == e["sync"].address == bad
    assert e["0"].info.get("pc") == e["sync"].info.get("pc")


def test_store_fault_writes_nothing_more(monkeypatch):
    """A store to an unmapped address: same fault, and the memory the JIT leaves is the interpreter's."""
    n = 512
    bad = 0x7777_0000_0000
    mems = {}

    def go(jit):
        mem = mems[jit] = harness.FlatMemory(1 << 24)
        harness.run(harness.compile_cl("vadd.cl", "gfx1100"), "vadd",
                        [np.ones(n, np.float32), np.ones(n, np.float32), bad, 2.0, n], (n // 256, 1, 1), (256, 1, 1),
                        mem=mem)
    errs = {}
    for jit in ("0", "sync"):
        monkeypatch.setenv("AMDQ_SIM_JIT", jit)
        with pytest.raises(GPUException) as e:
            go(jit)
        errs[jit] = e.value
    assert str(errs["0"]) == str(errs["sync"]) and errs["0"].address == bad
    assert np.array_equal(mems["0"].buf, mems["sync"].buf)


def _patched(monkeypatch, patch):
    """Dispatches whose code is changed by patch(mem, pgm_addr) first."""
    orig = C.ShaderCore.dispatch

    def dispatch(core, d, max_steps=None):
        patch(core.mem, d.pgm_addr)
        return orig(core, d, max_steps)
    monkeypatch.setattr(C.ShaderCore, "dispatch", dispatch)


def _vadd(n=512, mem=None):
    r = np.random.default_rng(3)
    x, y = r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    (_, _, out), _ = harness.run(harness.compile_cl("vadd.cl", "gfx1100"), "vadd",
                                 [x, y, np.zeros(n, np.float32), 2.0, n], (n // 256, 1, 1), (256, 1, 1), mem=mem)
    return x, y, out


def _find(mem, pc, word_pred, limit=64):
    """Address of the first instruction dword from pc satisfying word_pred (a linear scan of dwords)."""
    for i in range(limit):
        w = int(np.frombuffer(mem.read(pc + 4 * i, 4), np.uint32)[0])
        if word_pred(w):
            return pc + 4 * i, w
    raise AssertionError("instruction not found")


FMAC = lambda w: (w >> 25) == 0x2B     # noqa: E731  VOP2 v_fmac_f32 (RDNA3 opcode 43, bit 31 clear)


def test_illegal_instruction_same_pc(monkeypatch):
    """An illegal encoding in the middle of a translated block stops at the same PC with the same error."""
    def patch(mem, pc):
        at, _ = _find(mem, pc, FMAC)
        mem.write(at, np.array([0xFFFFFFFF], np.uint32).tobytes())
    _patched(monkeypatch, patch)
    e = _run_both(monkeypatch, _vadd)
    assert str(e["0"]) == str(e["sync"])
    assert e["0"].info.get("pc") == e["sync"].info.get("pc") is not None


def test_code_change_recompiles(monkeypatch):
    """Changed code bytes at the same address: the JIT runs the new code (a fresh core decodes them again),
    and the result is the interpreter's."""
    def to_add(mem, pc):
        at, w = _find(mem, pc, FMAC)
        mem.write(at, np.array([(w & ~(0x3F << 25)) | 3 << 25], np.uint32).tobytes())    # v_add_f32
    x, y, out = _vadd()
    assert np.array_equal(out, x + np.float32(2) * y)
    _patched(monkeypatch, to_add)
    for jit in ("sync", "0"):
        monkeypatch.setenv("AMDQ_SIM_JIT", jit)
        x, y, out = _vadd()
        assert np.array_equal(out, np.float32(2) + y), jit


def test_icache_rules_hold_for_compiled_code(monkeypatch):
    """On one core, one dispatch replayed: code rewritten in memory keeps running as before until the
    instruction cache is invalidated (as the interpreter's ICache does), then the new bytes run, under the JIT as
    without it."""
    results = {}
    orig = C.ShaderCore.dispatch
    for jit in ("0", "sync"):
        monkeypatch.setenv("AMDQ_SIM_JIT", jit)
        mem = harness.FlatMemory(1 << 24)
        core = C.ShaderCore(mem)
        monkeypatch.setattr(harness, "ShaderCore", lambda m: core)
        seen = []
        monkeypatch.setattr(C.ShaderCore, "dispatch", lambda c, d, max_steps=None: seen.append(d) or orig(c, d, max_steps))
        n = 512
        x, y, a = _vadd(n, mem=mem)
        d = seen[0]
        kernarg = d.user_data[0] | d.user_data[1] << 32
        c_addr = int(np.frombuffer(mem.read(kernarg + 16, 8), np.uint64)[0])
        out = lambda: np.frombuffer(mem.read(c_addr, 4 * n), np.float32).copy()   # noqa: E731
        at, w = _find(mem, d.pgm_addr, FMAC)
        mem.write(at, np.array([(w & ~(0x3F << 25)) | 3 << 25], np.uint32).tobytes())
        orig(core, d)
        b = out()                                    # stale: the ICache still holds the old lines
        core.invalidate_icache()
        orig(core, d)
        c = out()
        results[jit] = (a, b, c)
        assert np.array_equal(c, np.float32(2) + y), jit
    for jit in ("0", "sync"):
        a, b, c = results[jit]
        assert np.array_equal(a, b), jit
    for i in range(3):
        assert np.array_equal(results["0"][i], results["sync"][i])


def test_disk_cache_reused_and_keyed_by_bytes(monkeypatch, tmp_path):
    """Compiled code lands in AMDQ_SIM_JIT_CACHE; a process without it in memory loads it from disk."""
    d = tmp_path / "jit2"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(d))
    runtime.forget()
    _vadd()
    files = sorted(p.name for p in d.iterdir())         # object files, and the records naming them per code page
    assert any(f.endswith(".lnk") for f in files) and all(f.endswith(".lnk") for f in files if f != "pages")
    assert list((d / "pages").iterdir())
    runtime.forget()                                    # as a new process
    hits = compiled.stats["disk_hits"]
    x, y, out = _vadd()
    assert compiled.stats["disk_hits"] > hits
    assert np.array_equal(out, x + np.float32(2) * y)
    assert sorted(p.name for p in d.iterdir()) == files


def _second_process(monkeypatch) -> dict:
    """Forget what this process found and compiled (as a new process starts), in default mode with searches and
    compiles that would never come (every heat threshold infinite): what runs compiled now comes from the disk."""
    runtime.forget()
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", float("inf"))
    monkeypatch.setattr(runtime, "HOT", float("inf"))
    searched: list[int] = []
    orig = runtime._discover
    monkeypatch.setattr(runtime, "_discover", lambda *a, **k: searched.append(a[1]) or orig(*a, **k))
    return {"searched": searched, "compiled": compiled.stats["compiled"], "disk": compiled.stats["disk_hits"],
            "used": runtime.counts["wave_instructions"]}


def test_warm_start_runs_compiled_from_the_first_dispatch(monkeypatch, tmp_path):
    """A region compiled by one process is noted in its code page's record; a second process (nothing in memory)
    runs it compiled from its first dispatch, loaded from the disk: no search, no heat, no compile, and the
    interpreter's memory and registers."""
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path / "jit3"))
    runtime.forget()
    _vadd()
    assert list((tmp_path / "jit3" / "pages").iterdir())
    before = _second_process(monkeypatch)
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    x, y, out = _vadd()
    assert np.array_equal(out, x + np.float32(2) * y)
    assert used[0] > 0, "the first dispatch ran no compiled code"
    assert not before["searched"] and compiled.stats["compiled"] == before["compiled"]
    assert compiled.stats["disk_hits"] > before["disk"]


TWO = """
__kernel void twice(__global float *a) { int i = get_global_id(0); a[i] = a[i] * 2.0f + 1.0f; }
__kernel void halve(__global float *a) { int i = get_global_id(0); a[i] = a[i] * 0.5f - 3.0f; }
"""


def _two_compiled():
    """A first process (this one, from nothing) runs and compiles both kernels of TWO: (run(kernel) -> its output,
    the input)."""
    runtime.forget()
    a = np.arange(256, dtype=np.float32)

    def run(kernel):
        (out,), _ = harness.run_cl(TWO, kernel, [a], (4, 1, 1), (64, 1, 1))
        return out
    run("twice"), run("halve")
    return run, a


@pytest.mark.parametrize("host", ["known", "unknown"])
def test_warm_start_loads_the_other_kernels_of_a_page(monkeypatch, tmp_path, host):
    """Two kernels in one code page, both compiled by a first process: a second process loads the one it runs
    first at once, and the other, on a host an earlier process wrote down (keys and loads need no LLVM), when the
    interpreter first reaches it, else on the worker thread meanwhile; either way it runs compiled from its first
    dispatch too."""
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path / "jit7"))
    run, a = _two_compiled()
    before = _second_process(monkeypatch)
    if host == "unknown":
        monkeypatch.setattr(compiled, "host_known", lambda: False)
    submitted = []
    orig = compiled.submit_call
    monkeypatch.setattr(compiled, "submit_call", lambda fn: submitted.append(fn) or orig(fn))
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    assert np.array_equal(run("twice"), a * np.float32(2) + np.float32(1))
    assert len(submitted) == (1 if host == "unknown" else 0)          # (the other kernel's region)
    compiled.submit_call(lambda: None).result()          # (the worker is done with it)
    assert np.array_equal(run("halve"), a * np.float32(0.5) - np.float32(3))
    assert used[0] > 0 and used[1] > 0 and not before["searched"]
    assert compiled.stats["disk_hits"] == before["disk"] + 2 and compiled.stats["compiled"] == before["compiled"]


def test_a_background_load_the_interpreter_reaches_is_loaded_at_once(monkeypatch, tmp_path):
    """Two kernels of one page, both compiled by a first process; in a second process the worker thread is busy
    (with something that holds no LLVM lock: a host not written down yet, whose loads go there) when the second
    kernel first runs: its region's load, queued behind,
    is taken back and loaded at once, so that dispatch runs compiled too (not interpreted until the worker comes
    to it)."""
    import threading
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path / "jit10"))
    run, a = _two_compiled()
    before = _second_process(monkeypatch)
    monkeypatch.setattr(compiled, "host_known", lambda: False)    # (loads on the worker thread)
    compiled.start()
    compiled.submit_call(lambda: None).result()                 # (LLVM started: a load waits for nothing)
    gate = threading.Event()
    busy = compiled.submit_call(gate.wait)                      # the worker is busy until the gate opens
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    try:
        assert np.array_equal(run("twice"), a * np.float32(2) + np.float32(1))
        assert np.array_equal(run("halve"), a * np.float32(0.5) - np.float32(3))
        assert not busy.done()
    finally:
        gate.set()
    assert used[0] > 0 and used[1] > 0 and not before["searched"]
    assert compiled.stats["disk_hits"] == before["disk"] + 2


def test_a_page_image_loads_its_regions_at_once(monkeypatch, tmp_path):
    """At exit a process writes, per code page, one image of the regions it ran compiled there; the next process
    places it whole when it reads the page's record (one file, one mapping), and both kernels of the page then run
    compiled from their first dispatch without a region file read, with the interpreter's results. A process that
    ran only one of them writes nothing new; an image that is damaged is ignored (the region files load as without
    it)."""
    cache = tmp_path / "jit11"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(cache))
    run, a = _two_compiled()
    runtime.save_images()
    (image,) = list((cache / "images").iterdir())
    written = image.stat().st_mtime_ns
    for damaged in (False, True):
        if damaged:
            blob = bytearray(image.read_bytes())
            blob[len(blob) // 2] ^= 0x40
            image.write_bytes(bytes(blob))
        before = _second_process(monkeypatch)
        loads = compiled.stats["image_loads"]
        used: list[int] = []
        _differential(monkeypatch, used, mode="1")
        assert np.array_equal(run("twice"), a * np.float32(2) + np.float32(1))
        assert np.array_equal(run("halve"), a * np.float32(0.5) - np.float32(3))
        assert used[0] > 0 and used[1] > 0 and not before["searched"]
        assert compiled.stats["image_loads"] == loads + (0 if damaged else 1)
        assert compiled.stats["disk_hits"] == before["disk"] + (2 if damaged else 0)
        if not damaged:
            runtime.save_images()                        # (nothing new: the image stays as it was)
            assert image.stat().st_mtime_ns == written
    runtime.save_images()                                # (rewritten whole, from the region files)
    assert compiled.load_image(image.name[:-4]) and image.stat().st_mtime_ns != written


def test_the_recent_pages_index(monkeypatch, tmp_path):
    """The index keeps, per program, the first RECENT_PAGES pages its last run looked up, in that order, for the
    latest RECENT_PROGRAMS programs; a damaged one reads as empty (and is not a record)."""
    from amdq.sim.shader.jit import records
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    keys = [f"{i:064x}" for i in range(40)]
    assert records.recent() == []
    records.note_recent(keys[:3])
    records.note_recent(keys[5:7], prog="other")
    assert records.recent() == keys[:3] and records.recent("other") == keys[5:7]
    records.note_recent(keys[3:40])
    assert records.recent() == keys[3:3 + records.RECENT_PAGES] and records.recent("other") == keys[5:7]
    for p in range(records.RECENT_PROGRAMS):
        records.note_recent(keys[:1], prog=f"p{p}")
    assert records.recent("other") == [] and records.recent("p0") == keys[:1]
    index = tmp_path / records.RECENT
    index.write_bytes(index.read_bytes().replace(b"0", b"1", 1))
    assert records.recent("p0") == [] and records.any_on_disk() is False        # (the index is not a record)


def test_a_page_image_serves_only_its_bytes(monkeypatch, tmp_path):
    """An image under the name of other code (the code changed; a stale file put there) is placed, but none of its
    regions runs for other bytes: each is used only under the key of the bytes in memory."""
    cache = tmp_path / "jit12"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(cache))
    runtime.forget()
    _vadd()
    runtime.save_images()
    (old_rec,) = list((cache / "pages").iterdir())
    (old_img,) = list((cache / "images").iterdir())
    for f in cache.glob("*.lnk"):
        f.unlink()                                       # (only the image holds compiled code now)

    def to_add(mem, pc):
        at, w = _find(mem, pc, FMAC)
        mem.write(at, np.array([(w & ~(0x3F << 25)) | 3 << 25], np.uint32).tobytes())    # v_add_f32
        key = runtime._page_key("rdna3", False, mem.read(pc & ~4095, 4096))
        (cache / "pages" / key).write_bytes(old_rec.read_bytes())
        (cache / "images" / (key + ".img")).write_bytes(old_img.read_bytes())
    _patched(monkeypatch, to_add)
    before = _second_process(monkeypatch)
    loads = compiled.stats["image_loads"]
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    x, y, out = _vadd()
    assert np.array_equal(out, np.float32(2) + y)
    assert compiled.stats["image_loads"] == loads + 1 and used == [0]


def test_a_record_is_used_only_for_its_bytes(monkeypatch, tmp_path):
    """A record under the name of other code (the code changed; a foreign or stale file put there) loads nothing
    compiled for other bytes: the changed instruction runs as the interpreter runs it."""
    cache = tmp_path / "jit4"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(cache))
    runtime.forget()
    _vadd()
    (old,) = list((cache / "pages").iterdir())
    pages = {}

    def to_add(mem, pc):
        at, w = _find(mem, pc, FMAC)
        mem.write(at, np.array([(w & ~(0x3F << 25)) | 3 << 25], np.uint32).tobytes())    # v_add_f32
        page = pc & ~4095
        key = runtime._page_key("rdna3", False, mem.read(page, 4096))
        pages[key] = True
        (cache / "pages" / key).write_bytes(old.read_bytes())                           # the old page's record
    _patched(monkeypatch, to_add)
    before = _second_process(monkeypatch)
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    x, y, out = _vadd()
    assert pages and np.array_equal(out, np.float32(2) + y)
    assert compiled.stats["disk_hits"] == before["disk"] and used == [0]
    assert _candidates() and not before["searched"]      # (the record was taken: its blocks, nothing compiled)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_blocks_of_a_record_compile_from_their_bytes(monkeypatch, tmp_path, arch):
    """A record whose object files are gone: its candidates are taken (no search), and once hot their blocks are
    decoded from the bytes in memory, checked against the record and compiled, with the interpreter's results."""
    cache = tmp_path / "jit6"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(cache))
    runtime.forget()
    run = lambda: getattr(suite, "test_matmul_tiled")(**_cases_of("matmul_tiled"))    # noqa: E731
    monkeypatch.setattr(suite, "run_cl", lambda *a, **k: harness.run_cl(*a, **{**k, "arch": arch, "flags": tuple(
        f for f in k.get("flags", ()) if arch != "gfx942" or "wavefrontsize" not in f)}))
    run()
    for f in [*cache.glob("*.lnk"), *cache.glob("*.o")]:
        f.unlink()
    before = _second_process(monkeypatch)
    monkeypatch.setattr(runtime, "HOT", 0.0)
    decoded: list[int] = []
    orig = runtime._decoded
    monkeypatch.setattr(runtime, "_decoded", lambda c, b: decoded.append(
        any(isinstance(x.insts[0], runtime.Stored) for x in b)) or orig(c, b))
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    import time
    deadline = time.monotonic() + 120
    while not sum(used) and time.monotonic() < deadline:
        run()
        time.sleep(0.02)
    assert sum(used) > 0 and any(decoded) and not before["searched"]
    assert compiled.stats["compiled"] > before["compiled"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "wrong fields", "gap"])
def test_a_damaged_record_is_ignored(monkeypatch, tmp_path, damage):
    """A record that is damaged (a flipped or missing byte: its checksum fails), not JSON, or JSON that does not
    describe blocks breaks no dispatch: the page is searched and compiled as without one."""
    cache = tmp_path / "jit5"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(cache))
    runtime.forget()
    _vadd()
    (rec,) = list((cache / "pages").iterdir())
    data = bytearray(rec.read_bytes())
    if damage == "flip":
        data[-5] ^= 0x20
    elif damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "garbage":
        data = bytearray(b"not a record\n\x00\xff")
    else:
        from amdq.sim.shader.jit import records
        insts = [[0, 99, 0]] if damage == "wrong fields" else [[0, 4, 0], [8, 4, 0]]   # (gap: not one after another)
        records.write(rec.name, [{"blocks": [[0, insts, ["alu"] * len(insts), 0, 0, 0, 0, 0, []]], "lines": [],
                                  "empty": [], "regions": [[0]]}, {"blocks": "?"}])
        data = bytearray(rec.read_bytes())
    rec.write_bytes(bytes(data))
    runtime.forget()
    used: list[int] = []
    _differential(monkeypatch, used, mode="sync")
    x, y, out = _vadd()
    assert np.array_equal(out, x + np.float32(2) * y) and sum(used) > 0


def test_background_compile_switches_over(monkeypatch):
    """Default mode, code hot at once (HOT 0): the first dispatch runs interpreted while its region compiles on the
    worker thread; a later dispatch runs the compiled code, with the same results."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "HOT", 0.0)
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", 0.0)
    runtime.forget()
    x, y, out = _vadd(1024)
    assert np.array_equal(out, x + np.float32(2) * y)
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        before = runtime.counts["wave_instructions"]
        x, y, out = _vadd(1024)
        assert np.array_equal(out, x + np.float32(2) * y)
        if runtime.counts["wave_instructions"] > before:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the region never came into use")


def test_env_var_forces_the_interpreter(monkeypatch):
    """AMDQ_SIM_JIT=0: no compiled code runs, even code compiled already; unset: the JIT is on (the default)."""
    before = runtime.counts["calls"]
    _vadd()
    assert runtime.counts["calls"] > before             # (sync: compiled)
    monkeypatch.setenv("AMDQ_SIM_JIT", "0")
    assert not runtime.enabled()
    before = runtime.counts["calls"]
    x, y, out = _vadd()
    assert runtime.counts["calls"] == before
    assert np.array_equal(out, x + np.float32(2) * y)
    monkeypatch.delenv("AMDQ_SIM_JIT")
    assert runtime.enabled() and not runtime.synchronous()


NAN_OPS = """
__kernel void nanops(__global const float *a, __global const float *b, __global const float *c, __global float *o,
                     float s) {
  int i = get_global_id(0);
  float x = a[i], y = b[i], z = c[i];
  o[8 * i + 0] = x + y; o[8 * i + 1] = x - y; o[8 * i + 2] = x * y; o[8 * i + 3] = fma(x, y, z);
  o[8 * i + 4] = fma(s, y, z); o[8 * i + 5] = x * s; o[8 * i + 6] = y - s; o[8 * i + 7] = fma(x, s, z);
}
"""
SPECIAL = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0xFF812345, 0x7F800000, 0xFF800000, 0, 0x80000000,
                    0x00000001, 0x807FFFFF, 0x3F800000, 0x7F7FFFFF, 0xBF000000], np.uint32)


@pytest.mark.parametrize("wave", [32, 64])
@pytest.mark.parametrize("s", [float("nan"), float("inf"), 0.0, 2.0])
def test_nan_payloads_and_specials(monkeypatch, s, wave):
    """f32 add/sub/mul/fma over every pair (and triple) of NaN payloads, infinities, zeros, denormals: the JIT's
    results are the interpreter's bit for bit (the differential dispatch compares all of memory)."""
    used: list[int] = []
    _differential(monkeypatch, used)
    k = len(SPECIAL)
    ia, ib, ic = np.meshgrid(np.arange(k), np.arange(k), np.arange(k), indexing="ij")
    a, b, c = (SPECIAL[i.ravel()].view(np.float32) for i in (ia, ib, ic))
    n = len(a)
    pad = -n % 64
    a, b, c = (np.concatenate([x, np.ones(pad, np.float32)]) for x in (a, b, c))
    harness.run_cl(NAN_OPS, "nanops", [a, b, c, np.zeros(8 * len(a), np.float32), s], (len(a) // 64, 1, 1), (64, 1, 1),
                   flags=suite.wf(wave))
    assert used and used[0] > 0


DUAL_OPS = """
__kernel void duals(__global const float *a, __global const float *b, __global const float *c, __global float *o,
                    float s, float t) {
  int i = get_global_id(0);
  float x = a[i], y = b[i], z = c[i];
  float r0 = x * s, r1 = y + t, r2 = s - y, r3 = fma(s, x, z), r4 = fma(x, y, 3.5f), r5 = fma(x, 1.25f, y);
  float r6 = y * x, r7 = x - z, r8 = fma(t, y, r0), r9 = s + x, r10 = (x < y) ? r1 : r2;
  float r11 = fma(t, z, y), r12 = fma(x, z, r6);
  __global float *q = o + 16 * i;
  q[0] = r0; q[1] = r1; q[2] = r2; q[3] = r3; q[4] = r4; q[5] = r5; q[6] = r6; q[7] = r7; q[8] = r8; q[9] = r9;
  q[10] = r10; q[11] = z - t; q[12] = r11; q[13] = r12; q[14] = y * t; q[15] = fma(s, y, x);
}
"""


@pytest.mark.parametrize("s", [float("nan"), float("inf"), 2.0])
def test_vopd_nan_payloads_and_specials(monkeypatch, s):
    """VOPD (v_dual_*: mul, add, sub, subrev, fmac with an SGPR src0, fmaak, fmamk, cndmask; gfx1100 wave32) over
    the same specials: compiled, the interpreter's bits, NaN payloads included."""
    used: list[int] = []
    _differential(monkeypatch, used)
    k = len(SPECIAL)
    ia, ib, ic = np.meshgrid(np.arange(k), np.arange(k), np.arange(k), indexing="ij")
    a, b, c = (SPECIAL[i.ravel()].view(np.float32) for i in (ia, ib, ic))
    pad = -len(a) % 64
    a, b, c = (np.concatenate([x, np.ones(pad, np.float32)]) for x in (a, b, c))
    code = harness.compile_cl(DUAL_OPS, "gfx1100")
    from amdq.tools.disasm import disassemble_elf
    listing = [t for _, _, t in disassemble_elf(code.read_bytes() if hasattr(code, "read_bytes") else code)["duals"]]
    assert any(t.startswith("v_dual_fmac_f32") and ", s" in t for t in listing)     # the case the test is for
    harness.run(code, "duals", [a, b, c, np.zeros(16 * len(a), np.float32), s, float("-nan")],
                (len(a) // 64, 1, 1), (64, 1, 1))
    assert used and used[0] > 0


FLOAT_OPS = """
__kernel void fops(__global const float *a, __global const float *b, __global const int *n, __global float *o,
                   __global int *oi) {
  int i = get_global_id(0);
  float x = a[i], y = b[i];
  int k = n[i];
  __global float *q = o + 16 * i;
  q[0] = fmax(x, y); q[1] = fmin(x, y); q[2] = rint(x); q[3] = trunc(y); q[4] = floor(x); q[5] = ceil(y);
  q[6] = x / y; q[7] = ldexp(x, k); q[8] = __builtin_amdgcn_rcpf(x); q[9] = __builtin_amdgcn_rsqf(y);
  q[10] = __builtin_amdgcn_sqrtf(x); q[11] = fmax(fmax(x, y), 1.5f); q[12] = x / 3.0f; q[13] = y / x;
  q[14] = __builtin_amdgcn_exp2f(x); q[15] = __builtin_amdgcn_exp2f(-y);
  __global int *r = oi + 8 * i;
  r[0] = (int)x; r[1] = (int)(uint)y; r[2] = !(x < y); r[3] = !(x >= y); r[4] = !__builtin_isunordered(x, y);
  r[5] = __builtin_isunordered(x, y); r[6] = !(x == y) + 2 * !(x <= y); r[7] = (x != y) + 2 * !(x > y);
}
"""
FLOAT_SPECIAL = np.concatenate([SPECIAL, np.array([0x00800000, 0x80000001, 0x4B000001, 0x3F000000, 0xCF000000,
                                                   0x4F800000, 0x5F000000, 0x1F800000, 0x7E800000, 0x00400000,
                                                   0x3FC00000, 0xC0200000,
                                                   # exp's edges: 128, 2^-126's and 2^-149's exponents, -150, 200
                                                   0x43000000, 0x42FFFFFF, 0xC2FC0000, 0xC3150000, 0xC3160000,
                                                   0x43480000, 0xC3490000, 0x3DCCCCCD], np.uint32)])


@pytest.mark.parametrize("arch, wave", [("gfx1100", 32), ("gfx1100", 64), ("gfx942", 64)])
def test_float_ops_specials(monkeypatch, arch, wave):
    """min/max (MODE.IEEE), rounding, saturating conversions, ldexp, rcp/rsq/sqrt/exp, the v_div_scale/fmas/fixup
    division and the unordered compares over every pair of specials (NaN payloads, signaling NaNs, infinities,
    zeros, denormals, rounding ties, values near the division's scaling thresholds): the interpreter's bits, and
    none of those instructions left to the interpreter."""
    used: list[int] = []
    _differential(monkeypatch, used)
    interpreted = _interpreted(monkeypatch)
    k = len(FLOAT_SPECIAL)
    ia, ib = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    a, b = FLOAT_SPECIAL[ia.ravel()].view(np.float32), FLOAT_SPECIAL[ib.ravel()].view(np.float32)
    n = (np.arange(len(a)) * 37 % 601 - 300).astype(np.int32)
    n[::7] = np.array([-2**31, 2**31 - 1, 500, -500, 64, -149, 127], np.int32)[np.arange(len(n[::7])) % 7]
    pad = -len(a) % 64
    a, b = (np.concatenate([x, np.ones(pad, np.float32)]) for x in (a, b))
    n = np.concatenate([n, np.zeros(pad, np.int32)])
    flags = ("-cl-fp32-correctly-rounded-divide-sqrt",) + (suite.wf(wave) if arch == "gfx1100" else ())
    before = runtime.counts["wave_instructions"]
    harness.run_cl(FLOAT_OPS, "fops", [a, b, n, np.zeros(16 * len(a), np.float32), np.zeros(8 * len(a), np.int32)],
                   (len(a) // 64, 1, 1), (64, 1, 1), arch=arch, flags=flags)
    assert used and used[0] > 0
    assert not interpreted & {"v_exp_f32", "v_rcp_f32", "v_rsq_f32", "v_sqrt_f32", "v_ldexp_f32"}, interpreted


CARRY_OPS = """
__kernel void carry(__global const ulong *a, __global const ulong *b, __global ulong *o) {
  int i = get_global_id(0);
  ulong x = a[i], y = b[i];
  o[4 * i] = x + y; o[4 * i + 1] = x - y; o[4 * i + 2] = y - x; o[4 * i + 3] = x + y + (ulong)(x < y);
}
"""
CARRY_EDGES = np.array([0, 1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 0x100000000, 0x1FFFFFFFF,
                        0xFFFFFFFF00000000, 0xFFFFFFFFFFFFFFFF, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF,
                        0xFFFFFFFF7FFFFFFF, 0x00000001FFFFFFFE], np.uint64)


@pytest.mark.parametrize("arch, wave", [("gfx1100", 32), ("gfx1100", 64), ("gfx942", 64)])
def test_carry_chains(monkeypatch, arch, wave):
    """64-bit adds and subtracts (v_add_co_u32 / v_add_co_ci_u32, the subtract forms: their carry out and carry in,
    computed in 32-bit lanes) over every pair of edge values, where a carry or borrow in meets 0xFFFFFFFF or 0:
    numpy's uint64 results, the interpreter's bits and VCC, and none of them left to the interpreter."""
    used: list[int] = []
    _differential(monkeypatch, used)
    interpreted = _interpreted(monkeypatch)
    k = len(CARRY_EDGES)
    ia, ib = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    a, b = CARRY_EDGES[ia.ravel()], CARRY_EDGES[ib.ravel()]
    pad = -len(a) % 64
    a, b = (np.concatenate([x, np.full(pad, 3, np.uint64)]) for x in (a, b))
    flags = suite.wf(wave) if arch == "gfx1100" else ()
    (_, _, out), _ = harness.run_cl(CARRY_OPS, "carry", [a, b, np.zeros(4 * len(a), np.uint64)], (len(a) // 64, 1, 1),
                                    (64, 1, 1), arch=arch, flags=flags)
    want = np.stack([a + b, a - b, b - a, a + b + (a < b).astype(np.uint64)], axis=1).ravel()
    assert np.array_equal(out, want)
    assert used and used[0] > 0
    carries = {"v_add_co_u32", "v_add_co_ci_u32", "v_sub_co_u32", "v_sub_co_ci_u32", "v_subrev_co_u32",
               "v_subrev_co_ci_u32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32"}
    assert not interpreted & carries, interpreted


def test_a_region_compiled_in_parts(monkeypatch, tmp_path):
    """A large region's IR is compiled as two modules on two threads (each its own LLVM context, without llvmlite's
    lock) and linked into one image: the interpreter's results, for a kernel of many blocks."""
    from amdq.sim.shader.jit import block, compiled
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setattr(block, "SPLIT_LINES", 200)
    monkeypatch.setattr(compiled, "compile_threads", lambda: 2)
    monkeypatch.setattr(runtime, "compile_threads", lambda: 2)
    parts: list[int] = []
    orig = block.ModuleGen.text_parts
    monkeypatch.setattr(block.ModuleGen, "text_parts", lambda self, n: parts.append(len(got := orig(self, n))) or got)
    runtime.forget()
    for name, kw in _cases():
        if name == "test_atomics_global" and kw.get("wave") == 32:
            test_jit_matches_interpreter("gfx1100", name, kw, monkeypatch)
    assert parts and max(parts) == 2


ROW_LOAD = """
__kernel void rows(__global const float *a, __global const float *b, __global float *o, int k, int lim) {
  int i = get_global_id(0);
  if ((i & 63) < lim)
    o[i] = a[i >> 6] * b[i] + a[(i >> 6) + k];
}
"""


@pytest.mark.parametrize("wave", [32, 64])
def test_uniform_address_loads(monkeypatch, wave):
    """A load whose lanes all read one address (a[i / 64]: a matrix row's element, as in a matrix-vector loop) is
    one read broadcast to the wave: the interpreter's results; waves with lanes off (lane by lane); a row out of
    the mapped range: the same fault."""
    from amdq.sim.shader.jit import block, library
    emitted: list[int] = []
    orig = block.ModuleGen._gm_wave          # (a load's wave tier: the run, then the broadcast)
    monkeypatch.setattr(block.ModuleGen, "_gm_wave",
                        lambda self, f, em, write, *a: emitted.append(not write) or orig(self, f, em, write, *a))
    monkeypatch.setattr(library, "_made", {})       # (the library's text made again: its loads' functions)
    texts: list[str] = []
    orig_parts = block.ModuleGen.text_parts
    monkeypatch.setattr(block.ModuleGen, "text_parts", lambda self, n: texts.extend(got := orig_parts(self, n)) or got)
    used: list[int] = []
    _differential(monkeypatch, used)
    n = 1024
    a, b = np.arange(n // 64 + 4, dtype=np.float32) + 0.5, np.linspace(-1, 1, n, dtype=np.float32)
    row = np.arange(n) >> 6
    want = (a[row].astype(np.float64) * b + a[row + 1]).astype(np.float32)     # (fused: one rounding)
    for lim in (64, 40):
        (_, _, out), _ = harness.run_cl(ROW_LOAD, "rows", [a, b, np.zeros(n, np.float32), 1, lim], (n // 64, 1, 1),
                                        (64, 1, 1), flags=suite.wf(wave))
        assert np.array_equal(out, np.where((np.arange(n) & 63) < lim, want, 0))
    assert any(emitted) and used and all(u > 0 for u in used)
    lanes = int(wave)
    assert any(f"call i1 @{library.symbol(f'gm_r1{sv}', lanes)}(" in t for t in texts for sv in "sv")  # (called)
    with pytest.raises(GPUException):
        harness.run_cl(ROW_LOAD, "rows", [a, b, np.zeros(n, np.float32), 1 << 26, 64], (n // 64, 1, 1), (64, 1, 1),
                       flags=suite.wf(wave))


DIV_FMAS = """
__kernel void fmas(__global const float *a, __global const float *b, __global const float *c, __global float *o) {
  int i = get_global_id(0);
  float x = a[i], y = b[i], z = c[i];
  o[2 * i] = __builtin_amdgcn_div_fmasf(x, y, z, false);
  o[2 * i + 1] = __builtin_amdgcn_div_fmasf(x, y, z, (i & 1) != 0);
}
"""


def test_div_fmas_round_to_odd(monkeypatch):
    """v_div_fmas_f32 where the interpreter's f64 sum is an f32 tie with a non-zero error (fp._fma32's round to odd
    decides the result) and with VCC scaling, over specials too: the interpreter's bits."""
    used: list[int] = []
    _differential(monkeypatch, used)
    b32 = lambda *v: np.array(v, np.uint32).view(np.float32)    # noqa: E731
    # 2^-24 (1 + 2^-23) * (1 - 2^-23) + (1 + 2^-23): the f64 sum rounds onto the tie 1 + 2^-23 + 2^-24
    a = b32(0x33800001, 0x33800001, 0xB3800001, 0x33800001)
    b = b32(0x3F7FFFFE, 0x3F7FFFFE, 0x3F7FFFFE, 0xBF7FFFFE)
    c = b32(0x3F800001, 0xBF800001, 0xBF800001, 0x3F800003)
    k = len(SPECIAL)
    ia, ib, ic = np.meshgrid(np.arange(k), np.arange(k), np.arange(k), indexing="ij")
    a, b, c = (np.concatenate([t, SPECIAL[i.ravel()].view(np.float32)]) for t, i in ((a, ia), (b, ib), (c, ic)))
    pad = -len(a) % 64
    a, b, c = (np.concatenate([x, np.ones(pad, np.float32)]) for x in (a, b, c))
    (_, _, _, out), _ = harness.run_cl(DIV_FMAS, "fmas", [a, b, c, np.zeros(2 * len(a), np.float32)],
                                       (len(a) // 64, 1, 1), (64, 1, 1))
    assert used and used[0] > 0
    assert out.view(np.uint32)[0] == 0x3F800001          # the exact sum lies below the tie


def test_two_threads_match_the_interpreter(monkeypatch):
    """Calls split across two threads (every qualifying call: whole workgroups, no global memory) give the
    interpreter's memory and registers."""
    monkeypatch.setenv("AMDQ_SIM_JIT_THREADS", "2")
    monkeypatch.setattr(runtime, "PARALLEL_MIN", 0)
    used: list[int] = []
    _differential(monkeypatch, used)
    before = runtime.counts["parallel_calls"]
    suite.test_matmul_tiled()
    suite.test_lds_reduce(32)
    assert runtime.counts["parallel_calls"] > before


BARRIER_EARLY_EXIT = """
__kernel void exch(__global const int *a, __global int *o) {
  __local int t[64];
  int l = get_local_id(0), g = get_group_id(0);
  if (g % 3 == 1) return;                  /* whole workgroups end before the barrier: the others are not uniform */
  t[l] = a[get_global_id(0)] * 3 + l;
  barrier(CLK_LOCAL_MEM_FENCE);
  int x = t[63 - l] + t[(l + 5) & 63];
  barrier(CLK_LOCAL_MEM_FENCE);
  t[l] = x ^ l;
  barrier(CLK_LOCAL_MEM_FENCE);
  o[get_global_id(0)] = t[(l * 7) & 63] + x;
}
"""


@pytest.mark.parametrize("wave", [32, 64])
def test_barriers_in_blocks(monkeypatch, wave):
    """s_barrier inside compiled blocks: passed when every wave of the batch is in the call, the interpreter's
    otherwise (workgroups that ended early make the steps non-uniform): the same memory and registers."""
    used: list[int] = []
    _differential(monkeypatch, used)
    n = 64 * 12
    a = np.arange(n, dtype=np.int32) * 7 - 100
    (_, out), _ = harness.run_cl(BARRIER_EARLY_EXIT, "exch", [a, np.zeros(n, np.int32)], (12, 1, 1), (64, 1, 1),
                            flags=suite.wf(wave))
    assert used and used[0] > 0
    ref = a.copy().reshape(12, 64)
    l = np.arange(64)
    t = ref * 3 + l
    x = t[:, 63 - l] + t[:, (l + 5) & 63]
    t2 = x ^ l
    want = t2[:, (l * 7) & 63] + x
    got = out.reshape(12, 64)
    keep = np.arange(12) % 3 != 1
    assert (got[keep] == want[keep]).all() and (got[~keep] == 0).all()


# ---------------------------------------------------------------- chaining: compiled code going on from block to block

CHAIN_SRC = """
__kernel void wloop(__global int *o, __global const int *trips) {
  int g = get_global_id(0);
  int n = trips[get_local_id(0) >> 4];          /* per 16 lanes: waves (and halves of waves) go apart */
  int s = g;
  for (int k = 0; k < n; k++) { s = s * 3 + k; if (s & 1024) s ^= 77; }
  o[g] = s;
}
__kernel void late(__global int *o, __global const int *a, __global const int *b, int n) {
  int g = get_global_id(0);
  int s = 0;
  for (int k = 0; k < n; k++) {
    s = s * 5 + k;
    if (k == n - 3) s += b[g];                  /* b is first read after several iterations ran compiled */
  }
  o[g] = s + a[g];
}
__kernel void pick(__global int *o, __global const int *a, __global const int *b, __global const int *c) {
  int g = get_global_id(0);
  __global const int *p = (get_group_id(0) & 1) ? b : a;   /* odd workgroups read b: a later wave misses first */
  o[g] = p[get_local_id(0)] * 3 + c[g];
}
__kernel void bloop(__global int *o, int n) {
  __local int t[64];
  int l = get_local_id(0), g = get_group_id(0);
  if (g % 3 == 1) return;                       /* whole workgroups end early: later steps are not uniform */
  int s = l;
  for (int k = 0; k < n; k++) {
    t[l] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    s += t[(l + k) & 63];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  o[get_global_id(0)] = s;
}
"""
CHAIN_ARCHS = [("gfx1100", 32), ("gfx1100", 64), ("gfx1201", 32), ("gfx942", 64)]


def _chain_run(arch, wave, kernel, args, grid, block=(64, 1, 1)):
    flags = suite.wf(wave) if not arch.startswith("gfx9") else ()
    return harness.run_cl(CHAIN_SRC, kernel, args, grid, block, arch=arch, flags=flags)


@pytest.mark.parametrize("arch, wave", CHAIN_ARCHS)
def test_chained_loops_with_divergence(monkeypatch, arch, wave):
    """Loops run compiled from iteration to iteration while the waves of a call stay together; where they go apart
    (trip counts per 16 lanes) the scheduler takes over: the interpreter's memory, registers and step counts."""
    used: list[int] = []
    _differential(monkeypatch, used)
    trips = np.array([5, 5, 9, 9, 0, 3, 17, 1], np.int32)
    before = runtime.counts["chained"]
    (out, _), _ = _chain_run(arch, wave, "wloop", [np.zeros(128 * 4, np.int32), trips], (4, 1, 1), (128, 1, 1))
    assert used and used[0] > 0
    g = np.arange(512, dtype=np.int64)
    s, n = g.copy(), trips[(g % 128) >> 4]
    for k in range(int(trips.max())):
        t = (s * 3 + k) & 0xFFFFFFFF
        t = np.where(t & 1024, t ^ 77, t)
        s = np.where(k < n, t, s)
    assert np.array_equal(out.astype(np.int64) & 0xFFFFFFFF, s)
    assert runtime.counts["chained"] > before


@pytest.mark.parametrize("arch, wave", CHAIN_ARCHS)
def test_chained_miss_and_fault_mid_loop(monkeypatch, arch, wave):
    """A global load first reached after compiled iterations: its range is translated and the chain resumes; at an
    unmapped address it faults as the interpreter does (same address, same PC)."""
    used: list[int] = []
    _differential(monkeypatch, used)
    n = 256
    a, b = np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32) * 7
    misses, chained = runtime.counts["misses"], runtime.counts["chained"]
    (out, _, _), _ = _chain_run(arch, wave, "late", [np.zeros(n, np.int32), a, b, 12], (n // 64, 1, 1))
    s = np.zeros(n, np.int64)
    for k in range(12):
        s = (s * 5 + k + (b if k == 9 else 0)) & 0xFFFFFFFF
    assert np.array_equal(out.astype(np.int64) & 0xFFFFFFFF, (s + a) & 0xFFFFFFFF)
    assert runtime.counts["misses"] > misses and runtime.counts["chained"] > chained
    bad = 0x7777_0000_0000
    with pytest.raises(GPUException) as e:          # (the differential dispatch compares it with the interpreter's)
        _chain_run(arch, wave, "late", [np.zeros(n, np.int32), a, bad, 12], (n // 64, 1, 1))
    assert e.value.address == bad


@pytest.mark.parametrize("arch, wave", CHAIN_ARCHS)
def test_fused_block_stops_at_a_later_wave(monkeypatch, arch, wave):
    """A fused block (its loads and ALU work wave by wave) whose first miss is at a wave after the first: the waves
    before it finished the block, it resumes there once the range is translated; at an unmapped address it faults
    as the interpreter does (same address and PC, same memory)."""
    used: list[int] = []
    _differential(monkeypatch, used, steps=False)
    n = 256
    a, b, c = (np.arange(n, dtype=np.int32) * m for m in (1, 7, 11))
    misses = runtime.counts["misses"]
    (out, _, _, _), _ = _chain_run(arch, wave, "pick", [np.zeros(n, np.int32), a, b, c], (n // 64, 1, 1))
    l, odd = np.arange(n) % 64, (np.arange(n) // 64) % 2 == 1
    assert np.array_equal(out, np.where(odd, b[l], a[l]) * 3 + c)
    assert runtime.counts["misses"] > misses and sum(used)
    assert any(blk.fused and "gload" in blk.kinds for cand in _candidates() for blk in cand.blocks)
    bad = 0x7777_0000_0000
    with pytest.raises(GPUException) as e:          # (the differential dispatch compares it with the interpreter's)
        _chain_run(arch, wave, "pick", [np.zeros(n, np.int32), a, bad, c], (n // 64, 1, 1))
    assert e.value.address == bad
    # a range the memory model does not give the JIT (as an MMU's run a lane's access crosses): the interpreter runs
    # that load for the wave that stopped and the waves after it, the JIT the rest; the same memory and registers
    span = harness.FlatMemory.jit_span
    refused = [0]

    def jit_span(mem, addr, nbytes, write):
        i = int(np.searchsorted(mem.starts, addr, side="right")) - 1
        if i >= 0 and mem.read(mem.starts[i], 8) == b[:2].tobytes():
            refused[0] += 1
            return None
        return span(mem, addr, nbytes, write)
    monkeypatch.setattr(harness.FlatMemory, "jit_span", jit_span)
    fallbacks = runtime.counts["fallbacks"]
    (out, _, _, _), _ = _chain_run(arch, wave, "pick", [np.zeros(n, np.int32), a, b, c], (n // 64, 1, 1))
    assert np.array_equal(out, np.where(odd, b[l], a[l]) * 3 + c)
    assert refused[0] and runtime.counts["fallbacks"] > fallbacks


SPAN_SRC = """
__kernel void span(__global float *o, __global const float *a, __global const float *b, int k, int m) {
  int g = get_global_id(0);
  if (g < m) o[g] = a[g + k] * 2.0f + b[g];
}
__kernel void again(__global float *o, volatile __global const float *a, int m) {
  int g = get_global_id(0);
  float s = a[g];
  if (g < m) s += a[g] * 3.0f;               /* (its address registers set in every lane, some lanes off) */
  o[g] = s;
}
__kernel void spick(__global int *o, __global const int *a, __global const int *b, __global const int *c) {
  int g = get_global_id(0), w = get_group_id(0);
  __global const int *p = (w & 1) ? b : a;    /* odd workgroups read b: a later wave misses first */
  o[g] = p[w] * 3 + c[g];                       /* (a scalar load into its address register: gfx1100, gfx942) */
}
__kernel void sspan(__global float *o, __global const float *a, int k) {
  int g = get_global_id(0);
  o[g + k] = a[g] - 1.0f;
}
"""
_DISPATCH = C.ShaderCore.dispatch       # (the dispatch _differential wraps)


@pytest.mark.parametrize("width", ["8", "16"])
@pytest.mark.parametrize("arch, wave", CHAIN_ARCHS)
def test_whole_wave_accesses_and_their_edges(monkeypatch, arch, wave, width):
    """A single-dword global access whose lanes are all active on consecutive dwords inside one translated range is
    checked once for the whole wave (the first tier of block.ModuleGen._gm_text); any other wave takes the chunk and
    lane checks. Against the interpreter: all waves common; a partial EXEC in the last wave; the last wave's lanes
    running past the end of one allocation into the next (its range translated then: a miss at a later wave and
    lane); a load and a store past the end of an allocation faulting at a later wave and lane (same fault, and a
    store writes nothing)."""
    monkeypatch.setenv("AMDQ_SIM_JIT_WIDTH", width)
    used: list[int] = []
    _differential(monkeypatch, used)
    n = 1024                                    # (a multiple of 64 floats: the next buffer starts where one ends)
    r = np.random.default_rng(11)
    a, b = r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    o = np.zeros(n, np.float32)

    flags = suite.wf(wave) if not arch.startswith("gfx9") else ()

    def span(a_, k, m):
        return harness.run_cl(SPAN_SRC, "span", [o, a_, b, k, m], (n // 64, 1, 1), (64, 1, 1), arch=arch,
                              flags=flags)[0][0]
    assert np.array_equal(span(a, 0, n), a * np.float32(2) + b)
    m = n - 5
    out = span(a, 0, m)
    assert np.array_equal(out[:m], (a * np.float32(2) + b)[:m]) and not out[m:].any()
    out = harness.run_cl(SPAN_SRC, "again", [o, a, m], (n // 64, 1, 1), (64, 1, 1), arch=arch, flags=flags)[0][0]
    assert np.array_equal(out, np.where(np.arange(n) < m, a + a * np.float32(3), a))
    misses = runtime.counts["misses"]
    out = span(a, 20, n)                        # the last 20 lanes read b[0:20]
    assert np.array_equal(out, np.concatenate([a[20:], b[:20]]) * np.float32(2) + b)
    assert runtime.counts["misses"] > misses and all(used)
    with pytest.raises(GPUException) as e:      # a[n - 8:] is not mapped (the next buffer starts 256-aligned)
        span(a[:n - 8], 0, n)
    assert e.value.address is not None
    mems = {}
    errs = {}
    monkeypatch.setattr(C.ShaderCore, "dispatch", _DISPATCH)
    for jit in ("0", "sync"):                   # a store running past the end of o: the same fault and memory
        monkeypatch.setenv("AMDQ_SIM_JIT", jit)
        runtime.forget()
        mem = mems[jit] = harness.FlatMemory(1 << 24)
        with pytest.raises(GPUException) as e:
            harness.run(harness.compile_cl(SPAN_SRC, arch, flags=tuple(flags)), "sspan",
                        [np.zeros(n - 8, np.float32), a, 0], (n // 64, 1, 1), (64, 1, 1), mem=mem, arch=arch)
        errs[jit] = e.value
    assert str(errs["0"]) == str(errs["sync"])
    assert np.array_equal(mems["0"].buf, mems["sync"].buf)


@pytest.mark.parametrize("arch, wave", CHAIN_ARCHS)
def test_fused_scalar_load_over_its_address_stops_at_a_later_wave(monkeypatch, arch, wave):
    """A fused block's s_load whose destination is its address register runs in one pass (the wave checks, reads,
    then writes): a later wave's miss resumes there once the range is translated, its fault is the interpreter's."""
    used: list[int] = []
    _differential(monkeypatch, used, steps=False)
    n = 256
    a, b, c = (np.arange(n, dtype=np.int32) * m for m in (1, 7, 11))
    flags = suite.wf(wave) if not arch.startswith("gfx9") else ()

    def run(b_):
        return harness.run_cl(SPAN_SRC, "spick", [np.zeros(n, np.int32), a, b_, c], (n // 64, 1, 1), (64, 1, 1),
                              arch=arch, flags=flags)[0][0]
    misses = runtime.counts["misses"]
    w = np.arange(n) // 64
    assert np.array_equal(run(b), np.where(w & 1, b[w], a[w]) * 3 + c)
    assert runtime.counts["misses"] > misses and sum(used)
    assert any(blk.fused and "sload" in blk.kinds for cand in _candidates() for blk in cand.blocks)
    bad = 0x7777_0000_0000
    with pytest.raises(GPUException) as e:          # (the differential dispatch compares it with the interpreter's)
        run(bad)
    assert e.value.address is not None


MANY_SGPRS = """
__kernel void many(__global int *o, int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9,
                   int a10, int a11, int a12, int a13, int a14, int a15) {
  int g = get_global_id(0);                  /* sixteen arguments in SGPRs past the ones a dispatch sets */
  o[g] = a0 * g + a1 * (g ^ a2) + a3 * (g + a4) + a5 * (g >> 3) + (a6 ^ g) * a7 + a8 * (g & a9) + a10 * (g | a11)
       + a12 * (g - a13) + a14 * (g * a15);
}
"""


def test_registers_start_zero_after_compiled_batches(monkeypatch):
    """Register arrays handed from batch to batch are cleared only where the batch could have written them
    (WaveState.dirty_v, dirty_s: what the batch set, its compiled regions' registers, every register after an
    interpreted step): each batch still starts with zeros outside the registers it sets."""
    seen = []
    orig = C.Batch.__init__

    def init(batch, d, ids, core):
        orig(batch, d, ids, core)
        w, lay = batch.w, C.layout(d, len(ids))
        seen.append((w.v.nbytes, bool(w.v[1:].any()), bool(w.s[lay.sgpr_top:W.SGPR_SPECIAL].any())))
    monkeypatch.setattr(C.Batch, "__init__", init)
    r = np.random.default_rng(5)
    m, n = 256, 1 << 16                  # 2048 waves a batch: register arrays of 1 MiB and more (the POOL's)
    A, B = r.standard_normal((m, m)).astype(np.float32), r.standard_normal((m, m)).astype(np.float32)
    x, y = r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    ks = [int(k) for k in r.integers(1, 1000, 16)]
    for _ in range(2):
        for jit in ("sync", "0"):
            monkeypatch.setenv("AMDQ_SIM_JIT", jit)
            harness.run_cl(MANY_SGPRS, "many", [np.zeros(n, np.int32), *ks], (n // 256, 1, 1), (256, 1, 1))
            harness.run_cl("matmul_tiled.cl", "matmul_tiled", [A, B, np.zeros((m, m), np.float32), m],
                           (m // 16, m // 16, 1), (16, 16, 1))
            harness.run_cl("vadd.cl", "vadd", [x, y, np.zeros(n, np.float32), 2.0, n], (n // 256, 1, 1), (256, 1, 1))
            harness.run_cl("lds_reduce.cl", "lds_reduce", [x, np.zeros(n // 256, np.float32)], (n // 256, 1, 1),
                           (256, 1, 1))
    assert len(seen) == 16 and all(nb >= 1 << 20 for nb, _, _ in seen)
    assert not any(v or s for _, v, s in seen), seen


def test_split_calls_stop_while_the_other_threads_get_no_cpu(monkeypatch):
    """A split call whose other threads took none of its parts (their CPU busy elsewhere): this thread ran them all,
    and calls are not split for a while (unless AMDQ_SIM_JIT_THREADS asks for threads)."""
    class Busy:                         # a pool whose threads never get to run
        def submit(self, fn):
            pass
    monkeypatch.delenv("AMDQ_SIM_JIT_THREADS", raising=False)
    monkeypatch.setattr(runtime, "CPUS", 2)
    monkeypatch.setattr(runtime, "_starved", [0.0])
    assert runtime.threads() == 2
    parts = [(j, j + 1) for j in range(8)]
    rs = [0] * 8
    ran = []
    runtime._run_parts(Busy(), 2, lambda ctx, w, nw, st, end: ran.append(ctx) or -1, list(range(8)), 0, parts,
                       [(j, 0) for j in range(8)], rs, 1)
    assert ran == list(range(8)) and rs == [-1] * 8
    assert runtime.threads() == 1
    monkeypatch.setenv("AMDQ_SIM_JIT_THREADS", "2")
    assert runtime.threads() == 2


@pytest.mark.parametrize("arch, wave", CHAIN_ARCHS)
def test_chained_loops_with_barriers(monkeypatch, arch, wave):
    """s_barrier in a loop: passed in compiled code only with every wave of the batch in the call (here some
    workgroups ended early, so the interpreter parks the waves): the interpreter's memory and registers."""
    used: list[int] = []
    _differential(monkeypatch, used)
    (out, ), _ = _chain_run(arch, wave, "bloop", [np.zeros(64 * 6, np.int32), 7], (6, 1, 1))
    assert used and used[0] > 0
    want = np.zeros((6, 64), np.int64)
    l = np.arange(64)
    s = l.copy()
    for k in range(7):
        s = s + s[(l + k) & 63]
    want[:] = s & 0xFFFFFFFF
    got = out.reshape(6, 64).astype(np.int64) & 0xFFFFFFFF
    keep = np.arange(6) % 3 != 1
    assert (got[keep] == want[keep]).all() and (got[~keep] == 0).all()


@pytest.mark.parametrize("budget", [1, 7, 64])
def test_chain_honours_max_steps(monkeypatch, budget):
    """A batch run with max_steps returns within its budget plus one block (a compiled loop does not run on past
    it: an endless kernel still comes back to the command processor), and resuming gives the interpreter's results."""
    used: list[int] = []
    _differential(monkeypatch, used)
    orig = C.Run.step
    over: list[int] = []

    def step(run, max_steps):
        before = run.stats.steps
        done = orig(run, budget)
        over.append(run.stats.steps - before - budget)
        return done
    monkeypatch.setattr(C.Run, "step", step)
    chained = runtime.counts["chained"]
    _chain_run("gfx1100", 32, "late", [np.zeros(64, np.int32), np.arange(64, dtype=np.int32),
                                       np.arange(64, dtype=np.int32), 200], (1, 1, 1))
    assert used and used[0] > 0 and len(over) > 2
    assert max(over) < runtime.MAX_INSTS
    if budget > 1:
        assert runtime.counts["chained"] > chained


# ---------------------------------------------------------------- one-lane VALU and more scalar ALU

LANE_SRC = """
__kernel void lanes(__global int *o, __global const int *a, int s, ulong u, int t) {
  int i = get_global_id(0), l = get_local_id(0);
  int x = a[i];
  int r = 0;
  if (x & 1) {                                    /* a divergent EXEC: the first active lane is not lane 0 */
    r = __builtin_amdgcn_readfirstlane(x * 3);
    r += __builtin_amdgcn_readlane(x, (s + l / 64) & 63);
  }
  int mb = __builtin_amdgcn_mbcnt_hi(x, __builtin_amdgcn_mbcnt_lo(x ^ 0x5A5A5A5A, l));
  int sc = 0;
  if (s > 17) sc += 1;
  if ((unsigned)s < 40000u) sc += 2;
  if (s == -5) sc += 4;
  if (u != 0x123456789ull) sc += 8;
  if ((t >> (s & 31)) & 1) sc += 16;
  sc += __builtin_ctz(t | 0x10000) + 100 * __builtin_bitreverse32(s) + (t < 0 ? -t : t);
  o[4 * i] = r; o[4 * i + 2] = mb; o[4 * i + 3] = sc;
}
"""
WRITELANE_IR = """
declare i32 @llvm.amdgcn.writelane(i32, i32, i32)
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()

define amdgpu_kernel void @wl(ptr addrspace(1) %o, i32 %s, i32 %t) {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %wg = mul i32 %g, 64
  %i = add i32 %wg, %l
  %old = mul i32 %l, 3
  %lane = add i32 %t, %g
  %v = call i32 @llvm.amdgcn.writelane(i32 %s, i32 %lane, i32 %old)
  %sh = lshr i32 %s, %lane
  %b = and i32 %sh, 1
  %c = icmp ne i32 %b, 0
  br i1 %c, label %one, label %done
one:
  %v2 = add i32 %v, 1000
  br label %done
done:
  %r = phi i32 [ %v, %entry ], [ %v2, %one ]
  %p = getelementptr i32, ptr addrspace(1) %o, i32 %i
  store i32 %r, ptr addrspace(1) %p
  ret void
}
"""


@pytest.mark.parametrize("arch, wave", [("gfx1100", 32), ("gfx1100", 64), ("gfx1201", 32), ("gfx942", 64)])
@pytest.mark.parametrize("s, u, t", [(-5, 0x123456789, -77), (18, 0, 0x40000), (40000, 1 << 40, 3)])
def test_lane_ops_and_scalar_ops(monkeypatch, arch, wave, s, u, t):
    """v_readfirstlane/readlane/writelane_b32 (under a divergent EXEC), v_mbcnt_lo/hi, s_cmpk_*, s_cmp_*_u64,
    s_bitcmp*, s_ctz_i32_b32, s_brev_b32, s_abs_i32 compiled: the interpreter's memory and registers, and the
    values OpenCL says."""
    import amdq
    used: list[int] = []
    _differential(monkeypatch, used)
    n = 256
    a = (np.arange(n, dtype=np.int64) * 2654435761 % (1 << 31)).astype(np.int32)
    a[::5] |= 1
    flags = suite.wf(wave) if arch != "gfx942" else ()
    before = runtime.counts["wave_instructions"]
    (o, _), _ = harness.run_cl(LANE_SRC, "lanes", [np.zeros(4 * n, np.int32), a, s, u, t], (n // 64, 1, 1), (64, 1, 1),
                               arch=arch, flags=flags)
    sc = (s > 17) + 2 * ((s & 0xFFFFFFFF) < 40000) + 4 * (s == -5) + 8 * (u != 0x123456789) + 16 * ((t >> (s & 31)) & 1)
    brev = int(f"{s & 0xFFFFFFFF:032b}"[::-1], 2)
    ctz = ((t | 0x10000) & -(t | 0x10000)).bit_length() - 1
    assert (o.reshape(n, 4)[:, 3] == np.int32(np.uint32((sc + ctz + 100 * brev + abs(t)) & 0xFFFFFFFF))).all()
    wl = amdq.compile(WRITELANE_IR, arch)
    (o2,), _ = harness.run(wl, "wl", [np.zeros(n, np.int32), s, t & 15], (n // 64, 1, 1), (64, 1, 1), arch=arch)
    lanes = 64 if arch == "gfx942" else 32                     # (the IR kernel: the target's default wave size)
    want = (np.arange(n) % 64 * 3).reshape(-1, lanes)          # one row per wave
    for wv in range(n // lanes):
        g = wv * lanes // 64
        lane = (t & 15) + g
        want[wv, lane % lanes] = s
        if (s & 0xFFFFFFFF) >> lane & 1:
            want[wv] += 1000
    assert np.array_equal(o2, want.reshape(-1).astype(np.int32))
    assert used and runtime.counts["wave_instructions"] > before


# ---------------------------------------------------------------- tiering (runtime.py: what is compiled, and when)

COLD_BRANCH = """
__kernel void loop(__global const float *a, __global float *o, int n) {
  int i = get_global_id(0);
  float x = a[i];
  for (int j = 0; j < n; j++) x = x * 0.5f + (float)j;
  if (n < 0) { for (int j = 0; j < 7; j++) x = x * x + (float)(j * i); }   /* never runs */
  o[i] = x;
}
"""


def _candidates():
    return list({id(c): c for cs in runtime.KNOWN.values() for c in cs}.values())


def _loop(n_iter, n=256, wave=32):
    a = np.arange(n, dtype=np.float32) / 7
    (_, out), st = harness.run_cl(COLD_BRANCH, "loop", [a, np.zeros(n, np.float32), n_iter], (n // 64, 1, 1),
                                  (64, 1, 1), flags=suite.wf(wave))
    x = a.copy()
    for j in range(n_iter):
        x = x * np.float32(0.5) + np.float32(j)
    assert np.array_equal(out, x)
    return st


def test_a_short_kernel_is_not_compiled(monkeypatch):
    """Default mode: a kernel that runs for less than its compile would cost stays in the interpreter: nothing
    compiled or submitted, and what its search found (the blocks that ran) is still below its threshold."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    runtime.forget()
    compiled_before, used_before = compiled.stats["compiled"], runtime.counts["wave_instructions"]
    _loop(2)
    _loop(2)
    assert compiled.stats["compiled"] == compiled_before and runtime.counts["wave_instructions"] == used_before
    assert all(c.job is None and not c.parts and c.heat < c.trigger for c in _candidates())


@pytest.mark.parametrize("search", [float("inf"), 0.0])
def test_the_interpreter_asks_once_a_block(monkeypatch, search):
    """Default mode, nothing compiled: the interpreter asks the JIT where it enters a block (of a candidate; before a
    search, after each branch), not at every instruction; what it ran without asking still heats the code: the page
    (no search yet) or the candidates were charged every wave-instruction it ran, and some of its time."""
    import amdq.sim.shader.jit as jit
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "COMPILE_SECONDS", (1e9, 1e9))
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", search)
    runtime.forget()
    asked = []
    orig = jit.step
    monkeypatch.setattr(jit, "step", lambda *a: asked.append(a[3]) or orig(*a))
    n = 1024
    x = np.arange(n, dtype=np.float32)
    (_, _, out), st = harness.run(harness.compile_cl("vadd.cl", "gfx1100"), "vadd",
                                  [x, x, np.zeros(n, np.float32), 2.0, n], (n // 256, 1, 1), (256, 1, 1))
    assert np.array_equal(out, 3 * x)
    assert not any(c.parts or c.job for c in _candidates())
    assert 1 <= len(asked) <= st.steps // 4, (len(asked), st.steps)
    pages, cands = list(runtime.PAGE_HEAT.values()), _candidates()
    assert bool(cands) == (search == 0.0)
    assert sum(h.work for h in pages) + sum(c.work for c in cands) == st.wave_instructions
    assert sum(h.heat for h in pages) + sum(c.heat for c in cands) > 0


TWO_KERNELS = """
__kernel void first(__global float *a) { int i = get_global_id(0); a[i] = a[i] * 3.0f + 1.0f; }
__kernel void second(__global float *a) { int i = get_global_id(0); a[i] = a[i] * 0.5f - 2.0f; }
"""


def test_a_search_starts_at_every_kernel_that_heated_the_page(monkeypatch):
    """Two kernels of one code page, the first interpreted while the page stays below the search's threshold: the
    search the second one triggers starts at both entries (the heat that pays for it was both kernels'), so the
    first does not wait for the page to get hot again."""
    import amdq.sim.shader.jit as jit
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "COMPILE_SECONDS", (1e9, 1e9))
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", 1e9)
    runtime.forget()
    entries = []                                    # (the kernels' entry PCs, in the order they ran)
    orig = jit.step

    def step(batch, *a):
        if batch.d.pgm_addr not in entries:
            entries.append(batch.d.pgm_addr)
        return orig(batch, *a)
    monkeypatch.setattr(jit, "step", step)
    co = harness.compile_cl(TWO_KERNELS, "gfx1100")
    x = np.arange(256, dtype=np.float32)
    for name, want in (("first", x * np.float32(3) + np.float32(1)), ("second", x * np.float32(0.5) - np.float32(2))):
        (out,), _ = harness.run(co, name, [x], (4, 1, 1), (64, 1, 1))
        assert np.array_equal(out, want)
        assert not _candidates() if name == "first" else _candidates()
        monkeypatch.setattr(runtime, "SEARCH_SECONDS", 0.0)         # (the second kernel's first lookup searches)
    held = {b.pc for c in _candidates() for b in c.blocks}
    assert len(entries) == 2 and set(entries) <= held, (entries, sorted(held))


def test_a_searched_kernel_is_not_searched_again(monkeypatch):
    """A kernel searched once (its loop ran for longer than a search costs; never compiled here) is not searched
    again by the next dispatch's new shader core where it was: it takes the candidates, whose heat goes on
    growing."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "COMPILE_SECONDS", (1e9, 1e9))
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", 0.001)
    runtime.forget()
    _loop(50)
    cands = _candidates()
    heat = sum(c.heat for c in cands)
    found = []
    orig = runtime._discover
    monkeypatch.setattr(runtime, "_discover", lambda *a, **k: found.append(a[1]) or orig(*a, **k))
    _loop(50)
    held = {i.pc for c in cands for b in c.blocks for i in b.insts}
    assert cands and not held & set(found)             # (other code of the kernel may get searched: timing)
    assert all(c in _candidates() for c in cands) and not any(c.parts for c in cands)
    assert sum(c.heat for c in cands) > heat


def _record_of_loop(folder):
    """(candidates, page heat) of the one record under folder/pages."""
    (path,) = list((folder / "pages").iterdir())
    return records.read_page(path.name)


def test_heat_adds_up_over_processes(monkeypatch, tmp_path):
    """What a process interpreted is kept in its pages' records when it exits (save_heat): the page's own heat
    before any search, then its candidates' heat and the blocks that ran. The next process starts from it: a page
    that heated enough in earlier processes is searched at its first dispatch, a candidate hot enough over them
    is taken from the record without a search and compiled at its first dispatch; heat only grows."""
    d = tmp_path / "jit9"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(d))
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "HOT", float("inf"))
    runtime.forget()
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", float("inf"))      # process 1: heat, no search
    _loop(20)
    runtime.save_heat()
    cands, page = _record_of_loop(d)
    assert cands == [] and page > 0
    runtime.forget()                                                    # process 2: searched at its first dispatch
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", page / 2)
    searched: list[int] = []
    orig = runtime._discover
    monkeypatch.setattr(runtime, "_discover", lambda *a, **k: searched.append(a[1]) or orig(*a, **k))
    _loop(20)
    assert searched and _candidates()
    runtime.save_heat()
    cands, _ = _record_of_loop(d)
    heat = sum(c["heat"] for c in cands)
    assert heat > 0 and any(c["ran"] for c in cands)
    runtime.forget()                                                    # process 3: compiled from the record's heat
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", float("inf"))
    searched.clear()
    hot = max(cands, key=lambda c: c["heat"])
    monkeypatch.setattr(runtime, "HOT", 0.5 * hot["heat"] / (runtime._expected(1000) + runtime.START_SECONDS))
    before = compiled.stats["compiled"]
    _loop(20)
    assert not searched
    assert sum(c.heat for c in _candidates()) >= heat
    compiled.submit_call(lambda: None).result()                          # (the compile the first dispatch started)
    assert compiled.stats["compiled"] > before
    assert any(c.parts or c.job for c in _candidates())
    runtime.save_heat()
    cands, _ = _record_of_loop(d)
    assert sum(c["heat"] for c in cands) >= heat and any(c["regions"] for c in cands)


def test_compiled_time_adds_up_over_processes(monkeypatch, tmp_path):
    """A region's seconds in compiled code are kept in its page's record when the process exits (with the earlier
    processes' it was loaded with); a process whose region's seconds, all runs together, pay for its -O2 compile
    compiles that when it loads the region, and the next one loads the -O2 code."""
    d = tmp_path / "jit11"
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(d))
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    monkeypatch.setattr(runtime, "OPT_HOT", float("inf"))
    runtime.forget()
    _loop(200)                                                          # process 1: compiled at the first tier
    runtime.save_heat()
    cands, _ = _record_of_loop(d)
    seconds = [x for c in cands for x in c["seconds"]]
    assert seconds and max(seconds) > 0
    _second_process(monkeypatch)                                        # process 2: loads it, adds its seconds
    _loop(200)
    runtime.save_heat()
    cands, _ = _record_of_loop(d)
    total = max(x for c in cands for x in c["seconds"])
    assert total > 1.2 * max(seconds)                                   # (its own and process 1's)
    _second_process(monkeypatch)                                        # process 3: those pay for -O2
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    monkeypatch.setattr(runtime, "OPT_HOT", 1.0)
    monkeypatch.setattr(runtime, "OPT_RATIO", 1.0)
    monkeypatch.setattr(runtime, "_expected", lambda insts: 0.5 * total)     # (an -O2 compile costs half of them)
    monkeypatch.setattr(runtime, "_charge", lambda *a: None)           # (its own seconds count for nothing)
    before = compiled.stats["recompiled"]
    _loop(5)
    assert compiled.stats["recompiled"] > before
    assert any(p.tier == runtime.OPT for c in _candidates() for p in c.parts)
    _second_process(monkeypatch)                                        # process 4: loads the -O2 code
    _loop(5)
    assert any(p.tier == runtime.OPT and p.compiled.source == "disk" for c in _candidates() for p in c.parts)


@pytest.mark.parametrize("helper", ["0", "1"])
def test_a_hot_loop_compiles_what_ran(monkeypatch, tmp_path, helper):
    """Default mode: a loop that runs long enough is compiled (in the background) and then runs compiled, with the
    interpreter's results. Compiled in this process, only code the interpreter ran is compiled (the whole-kernel
    compile of sync mode also compiles the branch that never runs); by the compile helper, which costs this process
    the IR only, the whole candidate is, the branch that never runs too."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setenv("AMDQ_SIM_JIT_HELPER", helper)
    monkeypatch.setenv("AMDQ_SIM_JIT_CACHE", str(tmp_path))
    monkeypatch.setitem(compiled._state, "cores", 2)
    runtime.forget()
    fetched, recording = set(), [True]              # the PCs the interpreter fetched (not the searches)
    orig_get, orig_discover = C.ICache.get, runtime._discover
    monkeypatch.setattr(C.ICache, "get", lambda ic, pc, w: (fetched.add(pc) if recording[0] else None) or
                        orig_get(ic, pc, w))

    def discover(*a, **k):
        was, recording[0] = recording[0], False
        try:
            return orig_discover(*a, **k)
        finally:
            recording[0] = was
    monkeypatch.setattr(runtime, "_discover", discover)
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        before = runtime.counts["wave_instructions"]
        _loop(200)
        if runtime.counts["wave_instructions"] > before:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the hot loop never ran compiled")
    recording[0] = False

    def compiled_pcs():
        return {i.pc for c in _candidates() for p in c.parts for b in p.blocks for i in b.insts}
    hot = compiled_pcs()
    if helper == "1":
        assert compiled.stats["helper_compiles"] and hot - fetched, "the helper compiled only what ran"
        return
    assert hot and hot <= fetched
    monkeypatch.setenv("AMDQ_SIM_JIT", "sync")
    runtime.forget()
    _loop(2)
    assert compiled_pcs() - fetched, "the whole kernel holds no code that did not run: its cold branch is not cold"


def test_a_search_made_inside_a_loop_starts_at_the_kernels_entry_too(monkeypatch):
    """Default mode: when a page gets hot while the interpreter is inside the loop, the search also starts at the
    kernel's entry, so the candidate holds the kernel from its first instruction (its prologue is not left to a
    later, separate candidate that would chain no further than its end)."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", float("inf"))
    monkeypatch.setattr(runtime, "HOT", float("inf"))
    runtime.forget()
    pcs, found = [], []
    orig_lookup, orig_find = runtime.lookup, runtime._find

    def lookup(icache, pc, *a, **k):
        pcs.append(pc)
        if len(pcs) == 40:                          # (well inside the loop: the page's search is due now)
            for heat in runtime.PAGE_HEAT.values():
                heat.trigger = 0.0
        return orig_lookup(icache, pc, *a, **k)
    monkeypatch.setattr(runtime, "lookup", lookup)
    monkeypatch.setattr(runtime, "_find", lambda cache, icache, pc, *a: found.append(pc) or
                        orig_find(cache, icache, pc, *a))
    _loop(50)
    entry = pcs[0]                                  # (a dispatch's first lookup: where its waves start)
    assert found and found[0] != entry
    held = [c for c in _candidates() if found[0] in {i.pc for b in c.blocks for i in b.insts}]
    assert held and entry in held[0].by_pc, "the search left the kernel's entry out"


@pytest.mark.parametrize("case", ["matmul_tiled", "lds_reduce", "divergent_loop", "atomics_lds"])
def test_tiered_matches_interpreter(case, monkeypatch):
    """Default mode with everything hot at once (HOT and SEARCH_SECONDS 0): blocks compile on the worker thread as they first run and
    switch over mid-dispatch; every dispatch gives the interpreter's memory and registers."""
    monkeypatch.setattr(runtime, "HOT", 0.0)
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", 0.0)
    runtime.forget()
    used: list[int] = []
    _differential(monkeypatch, used, mode="1")
    fn = getattr(suite, f"test_{case}")
    kw = _cases_of(case)
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        fn(**kw)
        if sum(used):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("nothing ever ran compiled")


def _cases_of(case: str) -> dict:
    return next(kw for name, kw in _cases() if name == f"test_{case}")


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("case", ["matmul_tiled", "lds_reduce", "vadd_partial", "atomics_global"])
def test_second_tier_matches_interpreter(case, arch, monkeypatch):
    """Regions recompiled at -O2 (OPT_HOT 0: at their first call) give the interpreter's memory and registers."""
    monkeypatch.setattr(runtime, "OPT_HOT", 0.0)
    runtime.forget()
    recompiled = compiled.stats["recompiled"] + compiled.stats["memory_hits"] + compiled.stats["disk_hits"]
    used: list[int] = []
    _differential(monkeypatch, used)
    monkeypatch.setattr(suite, "run_cl", lambda *a, **k: harness.run_cl(*a, **{**k, "arch": arch, "flags": tuple(
        f for f in k.get("flags", ()) if arch != "gfx942" or "wavefrontsize" not in f)}))
    getattr(suite, f"test_{case}")(**_cases_of(case))
    assert sum(used) > 0
    assert any(p.tier == compiled.OPT for c in _candidates() for p in c.parts)
    assert compiled.stats["recompiled"] + compiled.stats["memory_hits"] + compiled.stats["disk_hits"] > recompiled


def test_two_simulated_gpus_share_candidates(monkeypatch, tmp_path):
    """Two simulated GPUs of one process (each with its worker thread) run the same hot loop at the same time: the
    candidates and regions they share are searched, compiled and installed under one lock; every result is exact."""
    import threading
    from sims import open_sim
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "HOT", 0.0)
    monkeypatch.setattr(runtime, "SEARCH_SECONDS", 0.0)
    runtime.forget()
    devs = [open_sim(monkeypatch, tmp_path / str(i), "SIMKFD", "gfx1100") for i in range(2)]
    try:
        code = harness.compile_cl(COLD_BRANCH, "gfx1100", flags=tuple(suite.wf(32))).read_bytes()
        n, n_iter = 256, 100
        a = np.arange(n, dtype=np.float32) / 7
        want = a.copy()
        for j in range(n_iter):
            want = want * np.float32(0.5) + np.float32(j)
        errors: list = []
        before = runtime.counts["wave_instructions"]
        import time
        deadline = time.monotonic() + 60

        def run(dev):
            try:
                k = dev.load(code)["loop"]
                src, out = dev.upload(a), dev.upload(np.zeros(n, np.float32))
                for i in range(10_000):        # until compiled code ran (at least 8 launches)
                    k(src, out, n_iter, grid=n // 64, block=64, wait=True)
                    if not np.array_equal(out.numpy(np.float32), want):
                        errors.append("wrong result")
                    if i >= 8 and (runtime.counts["wave_instructions"] > before or time.monotonic() > deadline):
                        break
            except Exception as e:         # reported by the main thread
                errors.append(repr(e))
        threads = [threading.Thread(target=run, args=(d,)) for d in devs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert runtime.counts["wave_instructions"] > before, "no compiled code ran"
    finally:
        for d in devs:
            d.close()


def test_code_slower_than_the_interpreter_is_turned_off(monkeypatch):
    """A region whose compiled code runs slower per wave-instruction than the interpreter did (here: the
    interpreter's record made to look very fast) is turned off, tried again at -O2, then off for good: the
    interpreter runs it, with the same results."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "1")
    monkeypatch.setattr(runtime, "JUDGE_SECONDS", 0.0)
    runtime.forget()
    import time
    deadline = time.monotonic() + 120
    while not any(c.parts for c in _candidates()) and time.monotonic() < deadline:
        _loop(200)
        time.sleep(0.02)
    hot = [c for c in _candidates() if c.parts]
    assert hot, "the hot loop was never compiled"
    for c in hot:
        c.heat, c.work = 1.0, 10 ** 15                  # the interpreter's record: 1 fs a wave-instruction
    parts = [p for c in hot for p in c.parts]
    while time.monotonic() < deadline:
        _loop(200)
        if all(p.off and p.tier == compiled.OPT and p.job is None for p in parts):
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the slow regions were not turned off after their -O2 trial")
    ran = [p.seconds for p in parts]
    _loop(200)
    assert all(p.off for p in parts) and [p.seconds for p in parts] == ran     # their code no longer runs


DENORM_SWITCH = """
__kernel void switch_mode(__global const float *a, __global const float *b, __global float *o) {
  int i = get_global_id(0);
  float x = a[i], y = b[i];
  float kept = x * y;
  __asm__ volatile(MODE_OFF : "+v"(y) : "v"(kept));
  o[2 * i] = kept; o[2 * i + 1] = x * y;
}
"""


@pytest.mark.parametrize("arch, mode_off", [("gfx1100", "s_denorm_mode 0"),
                                             ("gfx942", "s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 4), 0")])
def test_a_mode_change_stops_compiled_float_code(monkeypatch, arch, mode_off):
    """Compiled float code assumes MODE keeps f32 denormals: after a wave turns that off (s_denorm_mode or s_setreg
    of MODE, which the interpreter runs) the same kind of multiply flushes its denormal result to zero, as the
    interpreter does, even though the waves' MODE was found fine for compiled code before."""
    used: list[int] = []
    _differential(monkeypatch, used)
    n = 256
    a = np.full(n, 1e-20, np.float32)
    a[::3] = 3.0
    b = np.full(n, 1e-20, np.float32)
    src = DENORM_SWITCH.replace("MODE_OFF", '"' + mode_off + '"')
    (_, _, out), _ = harness.run_cl(src, "switch_mode", [a, b, np.zeros(2 * n, np.float32)], (n // 64, 1, 1),
                                    (64, 1, 1), arch=arch)
    kept, flushed = out[0::2], out[1::2]
    product = a * b
    assert np.array_equal(kept, product) and (kept[1::3] != 0).all()
    assert np.array_equal(flushed[1::3], np.zeros_like(flushed[1::3])) and np.array_equal(flushed[::3], product[::3])
    assert used and used[0] > 0
