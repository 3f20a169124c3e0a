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
