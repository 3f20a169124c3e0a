"""amdq.compile from source: OpenCL C and HIP through clang 19+ (run on the simulated GPU, checked with numpy),
the user's line numbers in errors of every language, hints for the wrong language, option checks, and the
on-disk compile cache (hits across processes, keys, corrupted entries)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.codeobj import clang as C
from amdq.codeobj import compile_cache, compiler, load_code_object
from amdq.errors import CompileError, InvalidArgument

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def clang():
    """The clang amdq.compile would use; skips (fails in CI) without one of version 19 or newer."""
    try:
        return C.find_clang()
    except CompileError as e:
        if os.environ.get("CI") or os.environ.get("AMDQ_REQUIRE_LLVM"):
            pytest.fail(str(e))
        pytest.skip(f"no clang 19 or newer for OpenCL C / HIP: {e}")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own compile cache, so a test sees only its own entries."""
    monkeypatch.setenv("AMDQ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("AMDQ_COMPILE_CACHE", raising=False)
    return tmp_path / "cache" / "compile"


@pytest.fixture(scope="module")
def dev():
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    yield d
    d.close()


CL_SAXPY = """\
__kernel void saxpy(__global float *y, __global const float *x, float a, int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i] + OFFSET;
}
"""

CL_REDUCE = """\
/* each work-group sums its 64 inputs through LDS; work-item 0 adds the sum to out[0] atomically */
__kernel void reduce(__global const int *in, __global int *out, __global int *groups) {
  __local int s[64];
  uint l = get_local_id(0);
  s[l] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint k = 32; k > 0; k >>= 1) {
    if (l < k) s[l] += s[l + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) { atom_add(out, s[0]); groups[get_group_id(0)] = get_num_groups(0); }
}
"""

HIP_KERNELS = """\
extern "C" __global__ void neighbour(float *a, const float *b, int n) {
  __shared__ float s[256];
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = b[i];
  __syncthreads();
  if (i < n) a[i] += s[threadIdx.x ^ 1] + gridDim.x;
}

extern "C" __global__ void hist(unsigned *h, const unsigned *v, int n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(&h[v[i] & 7], 1u);
    atomicMax(&h[8], v[i]);
    atomicSub(&h[9], 2u);
    atomicCAS(&h[10], 0u, 5u);
  }
}

__global__ void mangled(int *out) { out[threadIdx.x] = warpSize; }
"""


# -- running what clang compiled ----------------------------------------------------------------------

def test_opencl_saxpy_runs_with_options(clang, dev):
    co = amdq.compile(CL_SAXPY, arch=dev.arch, lang="opencl", options=["-DOFFSET=0.5f", "-O3"])
    img = load_code_object(co, dev.arch)
    assert img.kind == "ET_REL" and img.cov == 5
    x, y = np.arange(1000, dtype=np.float32), np.linspace(-1, 1, 1000, dtype=np.float32)
    bx, by = dev.upload(x), dev.upload(y)
    dev.load(co)["saxpy"](by, bx, 2.0, 1000, grid=(4, 1, 1), block=(256, 1, 1), wait=True)
    np.testing.assert_array_equal(by.numpy(np.float32), np.float32(2) * x + y + np.float32(0.5))


def test_opencl_lds_barrier_atomics(clang, dev):
    co = amdq.compile(CL_REDUCE, arch=dev.arch, lang="opencl")
    data = np.random.default_rng(1).integers(-1000, 1000, 64 * 8).astype(np.int32)
    bi, bo, bg = dev.upload(data), dev.upload(np.zeros(1, np.int32)), dev.upload(np.zeros(8, np.int32))
    dev.load(co)["reduce"](bi, bo, bg, grid=(8, 1, 1), block=(64, 1, 1), wait=True)
    assert bo.numpy(np.int32)[0] == data.sum()
    assert list(bg.numpy(np.int32)) == [8] * 8


def test_hip_kernels_run(clang, dev):
    co = amdq.compile(HIP_KERNELS, arch=dev.arch, lang="hip", opt=2)
    img = load_code_object(co, dev.arch)
    assert img.kind == "ET_DYN" and img.cov == 5                  # clang links HIP device code
    prg = dev.load(co)
    assert {"neighbour", "hist"} <= set(prg.kernels)
    assert any(k != "mangled" and "mangled" in k for k in prg.kernels)     # C++ names are mangled
    assert prg["mangled"] is prg[next(k for k in prg.kernels if "mangled" in k)]   # and found by their name
    with pytest.raises(KeyError, match="no kernel 'mangle'"):
        prg["mangle"]
    n = 512
    a, b = np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32) * 3
    ba, bb = dev.upload(a), dev.upload(b)
    prg["neighbour"](ba, bb, n, grid=(2, 1, 1), block=(256, 1, 1), wait=True)
    np.testing.assert_array_equal(ba.numpy(np.float32), a + b[np.arange(n) ^ 1] + 2)
    v = (np.arange(n) * 7 % 13).astype(np.uint32)
    bh, bv = dev.upload(np.zeros(11, np.uint32)), dev.upload(v)
    prg["hist"](bh, bv, n, grid=(2, 1, 1), block=(256, 1, 1), wait=True)
    h = bh.numpy(np.uint32)
    assert list(h[:8]) == list(np.bincount(v & 7, minlength=8))
    assert h[8] == v.max() and h[9] == (-2 * n) % 2**32 and h[10] == 5


@pytest.mark.parametrize("lang", ["hip", "opencl"])
def test_hip_at_opt0(clang, dev, lang):
    """-O0 keeps every index builtin call and the prelude's inline functions out of line: still no
    undefined symbols, and the right answer."""
    src = HIP_KERNELS if lang == "hip" else CL_SAXPY.replace("OFFSET", "0")
    co = amdq.compile(src, arch=dev.arch, lang=lang, opt=0)
    prg = dev.load(co)
    if lang == "hip":
        out = dev.upload(np.zeros(64, np.int32))
        prg[next(k for k in prg.kernels if "mangled" in k)](out, grid=1, block=64, wait=True)
        assert list(out.numpy(np.int32)) == [32] * 64           # gfx1100 runs wave32 by default
    else:
        x = np.arange(300, dtype=np.float32)
        bx, by = dev.upload(x), dev.upload(np.zeros(300, np.float32))
        prg["saxpy"](by, bx, 3.0, 300, grid=2, block=256, wait=True)
        np.testing.assert_array_equal(by.numpy(np.float32), 3 * x)


@pytest.mark.parametrize("arch,lang", [("gfx942", "hip"), ("gfx1201", "opencl")])
def test_other_targets(clang, arch, lang):
    d = amdq.open_device(f"SIMKFD+AMD:{arch}")
    try:
        if lang == "hip":
            prg = d.load(amdq.compile(HIP_KERNELS, arch=arch, lang="hip"))
            out = d.upload(np.zeros(64, np.int32))
            prg[next(k for k in prg.kernels if "mangled" in k)](out, grid=1, block=64, wait=True)
            assert list(out.numpy(np.int32)) == [64 if arch == "gfx942" else 32] * 64
        else:
            x = np.arange(500, dtype=np.float32)
            bx, by = d.upload(x), d.upload(np.ones(500, np.float32))
            d.load(amdq.compile(CL_SAXPY, arch=arch, lang="opencl", options=["-DOFFSET=1"]))["saxpy"](
                by, bx, 2.0, 500, grid=2, block=256, wait=True)
            np.testing.assert_array_equal(by.numpy(np.float32), 2 * x + 2)
    finally:
        d.close()


def test_target_clang_does_not_know(clang):
    if clang.version[0] >= 20:
        pytest.skip(f"{clang.name} knows gfx950")
    with pytest.raises(CompileError, match=r"clang\S* 19\.\S+ \(.*\) does not know gfx950; a newer clang does"):
        amdq.compile(CL_SAXPY, arch="gfx950", lang="opencl")


# -- errors at the user's lines -----------------------------------------------------------------------

IR_BAD = """\
define amdgpu_kernel void @k(ptr addrspace(1) %out) {
  store i32 1, ptr addrspace(1) %out
  ret i32 %x
}
"""


@pytest.mark.parametrize("prefix,line", [("", 3), ('target triple = "amdgcn-amd-amdhsa"\n', 4),
                                         ("; a comment\n\n", 5)])
def test_llvm_error_lines_are_the_users(prefix, line):
    with pytest.raises(CompileError) as e:
        amdq.compile(prefix + IR_BAD, "gfx1100")
    assert e.value.lines == [line]
    assert f"<source>:{line}:7: error: value doesn't match function result type" in str(e.value)
    assert f"at line {line}:" in str(e.value) and "<string>" not in str(e.value)


CL_BAD = """\
// line 1
__kernel void k(__global int *a) {
  int i = get_global_id(0);
  a[i] = undefined_thing;
  a[i + 1] = also_undefined;
}
"""

HIP_BAD = """\
extern "C" __global__ void k(int *a) {
  a[threadIdx.x] = 1
}
"""


def test_opencl_error_lines(clang):
    with pytest.raises(CompileError) as e:
        amdq.compile(CL_BAD, "gfx1100", lang="opencl")
    msg = str(e.value)
    assert e.value.lines == [4, 5]
    assert "<source>:4:10: error: use of undeclared identifier 'undefined_thing'" in msg
    assert "<source>:5:14: error: use of undeclared identifier 'also_undefined'" in msg
    assert f"{clang.name} ({clang.path}) rejected the OpenCL C source for gfx1100 at lines 4, 5" in msg
    assert "amdq-clang-" not in msg                       # no temporary paths


def test_hip_error_lines(clang):
    with pytest.raises(CompileError) as e:
        amdq.compile(HIP_BAD, "gfx1100", lang="hip")
    assert e.value.lines == [2]
    assert "<source>:2:21: error: expected ';' after expression" in str(e.value)
    assert "rejected the HIP source for gfx1100 at line 2" in str(e.value)


def test_prelude_does_not_shift_lines(clang):
    """The prelude is force-included: an error on the first line is reported on line 1."""
    for lang, src in (("opencl", "int x = ;\n"), ("hip", "int x = ;\n")):
        with pytest.raises(CompileError) as e:
            amdq.compile(src, "gfx1100", lang=lang)
        assert e.value.lines == [1] and "<source>:1:9: error: expected expression" in str(e.value)


WRONG = [
    (CL_SAXPY, "llvm", "OpenCL C", "opencl"),
    (HIP_BAD.replace("= 1", "= 1;"), "llvm", "HIP", "hip"),
    (IR_BAD, "opencl", "LLVM IR", "llvm"),
    (IR_BAD, "hip", "LLVM IR", "llvm"),
    (HIP_KERNELS, "opencl", "HIP", "hip"),
    (CL_REDUCE, "hip", "OpenCL C", "opencl"),
]


@pytest.mark.parametrize("src,given,looks,lang", WRONG, ids=[f"{w[3]}-as-{w[1]}" for w in WRONG])
def test_wrong_language_hint(src, given, looks, lang, request):
    if given != "llvm":
        request.getfixturevalue("clang")
    assert compiler.guess_lang(src) == lang
    with pytest.raises(CompileError, match=rf"hint: the source looks like {looks}, not "
                                           rf"{compiler.LANG_NAMES[given]}: pass lang='{lang}'"):
        amdq.compile(src, "gfx1100", lang=given)


def test_no_hint_for_the_right_language(clang):
    with pytest.raises(CompileError) as e:
        amdq.compile(CL_BAD, "gfx1100", lang="opencl")
    assert "hint:" not in str(e.value)


# -- finding clang, checking arguments ----------------------------------------------------------------

def _fake_clang(d: Path, name: str, banner: str) -> Path:
    p = d / name
    p.write_text(f"#!/bin/sh\necho '{banner}'\necho 'Target: x86_64-pc-linux-gnu'\n")
    p.chmod(0o755)
    return p


def test_no_clang_names_what_was_searched(tmp_path, monkeypatch):
    monkeypatch.delenv("AMDQ_CLANG", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompileError, match=r"needs clang 19 or newer, and none was found: searched AMDQ_CLANG "
                                           r"\(unset\) and clang-19 \.\.\. clang-40 and clang on PATH; install"):
        amdq.compile(CL_SAXPY, "gfx1100", lang="opencl")
    _fake_clang(tmp_path, "clang", "Ubuntu clang version 14.0.6")
    _fake_clang(tmp_path, "clang-19", "not a compiler")                   # runs, but says no clang version
    with pytest.raises(CompileError, match=r"on PATH \(found only clang 14\.0\.6, too old\); install"):
        amdq.compile(CL_SAXPY, "gfx1100", lang="hip")


def test_newest_clang_is_taken(tmp_path, monkeypatch):
    monkeypatch.delenv("AMDQ_CLANG", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    _fake_clang(tmp_path, "clang", "clang version 19.1.0")
    _fake_clang(tmp_path, "clang-21", "Some clang version 21.0.1 (x)")
    _fake_clang(tmp_path, "clang-18", "clang version 18.1.8")
    c = C.find_clang()
    assert c.version == (21, 0, 1) and c.path == str(tmp_path / "clang-21") and c.banner == "Some clang version 21.0.1 (x)"


def test_amdq_clang_env(tmp_path, monkeypatch):
    monkeypatch.setenv("AMDQ_CLANG", str(tmp_path / "nope"))
    with pytest.raises(CompileError, match=r"AMDQ_CLANG=.*nope is not a clang that runs"):
        amdq.compile(CL_SAXPY, "gfx1100", lang="opencl")
    monkeypatch.setenv("AMDQ_CLANG", str(_fake_clang(tmp_path, "oldclang", "clang version 17.0.0")))
    with pytest.raises(CompileError, match=r"is oldclang 17\.0\.0; amdq needs clang 19 or newer"):
        amdq.compile(CL_SAXPY, "gfx1100", lang="opencl")


FAKE_COMPILE = """#!/bin/sh
case "$1" in --version) echo 'clang version 19.1.0'; exit 0;; esac
while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done
%s
"""


@pytest.mark.parametrize("body,lang,match", [
    ('echo "clang: error: unable to execute command: Executable \\"lld\\" doesn\'t exist!" >&2; exit 1', "hip",
     r"fake 19\.1\.0 .* links HIP device code with lld, which is missing: install lld-19"),
    ('printf "MZ not an ELF" > "$out"; exit 0', "opencl",
     r"succeeded on the OpenCL C source for gfx1100 but wrote no ELF code object \(13 bytes, starting b'MZ not a'\)"),
    ("exit 0", "opencl", r"wrote no ELF code object \(0 bytes\)"),
    ("echo 'Segmentation fault' >&2; exit 139", "hip", r"rejected the HIP source for gfx1100 \(exit status 139\):\n"
                                                      r"Segmentation fault"),
])
def test_what_clang_does_wrong_is_a_compile_error(tmp_path, monkeypatch, body, lang, match):
    fake = tmp_path / "fake"
    fake.write_text(FAKE_COMPILE % body)
    fake.chmod(0o755)
    monkeypatch.setenv("AMDQ_CLANG", str(fake))
    with pytest.raises(CompileError, match=match):
        amdq.compile(CL_SAXPY if lang == "opencl" else HIP_KERNELS, "gfx1100", lang=lang)
    assert not list((tmp_path / "cache").glob("compile/*.co"))          # nothing cached


@pytest.mark.parametrize("options,match", [
    ("-O3", r"options is a list of strings .* not str '-O3': split it"),
    ([1], r"options must be strings, not int 1"),
    ([""], r"option '' is empty"),
    (["-o", "x.o"], r"option '-o' is set by amdq.compile itself"),
    (["-mcpu=gfx1201"], r"option '-mcpu=gfx1201' is set by amdq.compile itself"),
    (["--offload-arch=gfx90a"], r"is set by amdq.compile itself"),
    (["-emit-llvm"], r"is set by amdq.compile itself"),
])
def test_options_are_checked(options, match):
    with pytest.raises(InvalidArgument, match=match):
        amdq.compile(CL_SAXPY, "gfx1100", lang="opencl", options=options)


def test_llvm_takes_only_opt_options():
    with pytest.raises(InvalidArgument, match=r"option '-DX=1' is a clang option, which LLVM IR .* only be -O0"):
        amdq.compile(IR_BAD, "gfx1100", options=["-DX=1"])
    good = IR_BAD.replace("ret i32 %x", "ret void")
    assert amdq.compile(good, "gfx1100", options=["-O0"]) == amdq.compile(good, "gfx1100", opt=0)


def test_lang_and_source_are_checked():
    with pytest.raises(InvalidArgument, match=r"lang is one of 'llvm', 'opencl', 'hip', not 'cuda'"):
        amdq.compile(CL_SAXPY, "gfx1100", lang="cuda")
    with pytest.raises(InvalidArgument, match=r"compile takes OpenCL C text, not bytes \(decode it first\)"):
        amdq.compile(CL_SAXPY.encode(), "gfx1100", lang="opencl")


def test_preludes_are_package_data():
    import tomllib
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["amdq"]
    for p in C.PRELUDES.values():
        rel = Path(p).relative_to(ROOT / "amdq")
        assert os.path.isfile(p) and any(rel.match(g) for g in globs), rel


# -- the on-disk cache --------------------------------------------------------------------------------

IR_OK = IR_BAD.replace("ret i32 %x", "ret void")

CHILD = r"""
import json, sys
import amdq
from amdq.codeobj import clang, compile_cache, compiler
srcs = json.loads(sys.argv[1])
if sys.argv[2] == "nocompiler":              # any compilation now fails: only the cache can answer
    def boom(*a, **k):
        raise SystemExit("a compiler was run")
    compiler._compile_llvm = boom
    clang.compile_source = boom
out = {}
for lang, src in srcs.items():
    out[lang] = amdq.compile(src, "gfx1100", lang=lang).hex()
print(json.dumps({"co": out, "stats": compiler.stats, "cache": compile_cache.stats,
                  "llvm_loaded": "llvmlite.binding" in sys.modules}))
"""


def _child(srcs: dict, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(srcs), mode], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cache_hit_across_processes(clang, cache_dir):
    srcs = {"llvm": IR_OK, "opencl": CL_SAXPY.replace("OFFSET", "1"), "hip": HIP_KERNELS}
    first = _child(srcs, "compile")
    assert first["stats"] == {"llvmlite": 1, "llc": 0, "clang": 2} and first["cache"]["stores"] == 3
    assert len(list(cache_dir.glob("*.co"))) == 3 and not list(cache_dir.glob("*.tmp"))
    second = _child(srcs, "nocompiler")
    assert second["co"] == first["co"]
    assert second["stats"] == {"llvmlite": 0, "llc": 0, "clang": 0} and second["cache"]["hits"] == 3
    assert first["llvm_loaded"] and not second["llvm_loaded"]     # LLVM's identity was kept: no library loaded


def test_llvm_identity_note_is_checked(cache_dir):
    """The kept LLVM identity is used only when it reads as one; damaged, LLVM is asked again and it is rewritten."""
    compiler.llvm_version.cache_clear()
    try:
        real = compiler.llvm_version()
        (note,) = cache_dir.glob("llvm-*")
        assert note.read_text() == real
        note.write_text("garbage")
        compiler.llvm_version.cache_clear()
        assert compiler.llvm_version() == real and note.read_text() == real
    finally:
        compiler.llvm_version.cache_clear()


def _counted(lang: str, src: str, **kw) -> tuple[bytes, int]:
    key = "llvmlite" if lang == "llvm" else "clang"
    before = compiler.stats[key]
    co = amdq.compile(src, lang=lang, **kw)
    return co, compiler.stats[key] - before


def test_cache_key_changes(clang):
    src = CL_SAXPY
    variants = [dict(arch="gfx1100", options=["-DOFFSET=1"]), dict(arch="gfx1100", options=["-DOFFSET=2"]),
                dict(arch="gfx1201", options=["-DOFFSET=1"]), dict(arch="gfx1100", options=["-DOFFSET=1"], opt=0),
                dict(arch="gfx1100", options=["-DOFFSET=1", "-O3"])]
    cos = []
    for kw in variants:
        co, n = _counted("opencl", src, **kw)
        assert n == 1, kw                               # a new key each time
        cos.append(co)
    for kw, co in zip(variants, cos):
        again, n = _counted("opencl", src, **kw)
        assert n == 0 and again == co, kw               # and each one found again
    _, n = _counted("opencl", src + "\n// another source\n", **variants[0])
    assert n == 1
    _, n = _counted("llvm", IR_OK, arch="gfx1100")
    _, m = _counted("llvm", IR_OK, arch="gfx1100", opt=1)
    _, k = _counted("llvm", IR_OK, arch="gfx1100")
    assert (n, m, k) == (1, 1, 0)


def test_cache_key_has_the_compiler_version(clang, monkeypatch):
    co, n = _counted("opencl", CL_SAXPY.replace("OFFSET", "3"), arch="gfx1100")
    assert n == 1
    with monkeypatch.context() as m:
        m.setattr(C, "find_clang", lambda: C.Clang(clang.path, clang.version, clang.banner + " (rebuilt)"))
        _, n = _counted("opencl", CL_SAXPY.replace("OFFSET", "3"), arch="gfx1100")
        assert n == 1
        m.setattr(compiler, "llvm_version", lambda: "llvmlite 0.0, LLVM 99.0.0")
        _, a = _counted("llvm", IR_OK, arch="gfx1100")
    _, b = _counted("llvm", IR_OK, arch="gfx1100")
    assert (a, b) == (1, 1)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "header-only"])
def test_corrupt_entry_is_compiled_again_and_replaced(cache_dir, damage):
    co, n = _counted("llvm", IR_OK, arch="gfx1100")
    (entry,) = cache_dir.glob("*.co")
    data = entry.read_bytes()
    bad = {"truncate": data[:-100], "flip": data[:-10] + bytes([data[-10] ^ 1]) + data[-9:],
           "garbage": b"not a cache entry at all" * 10, "empty": b"", "header-only": data[:48]}[damage]
    entry.write_bytes(bad)
    corrupt = compile_cache.stats["corrupt"]
    again, n = _counted("llvm", IR_OK, arch="gfx1100")
    assert n == 1 and again == co and compile_cache.stats["corrupt"] == corrupt + 1
    assert entry.read_bytes() == data                     # replaced by a whole entry
    _, n = _counted("llvm", IR_OK, arch="gfx1100")
    assert n == 0


def test_cache_can_be_disabled(cache_dir, monkeypatch):
    monkeypatch.setenv("AMDQ_COMPILE_CACHE", "0")
    counts = [_counted("llvm", IR_OK, arch="gfx1100")[1] for _ in range(2)]
    assert counts == [1, 1] and not cache_dir.exists()


def test_failed_store_leaves_nothing(cache_dir, monkeypatch):
    def fail(*a):
        raise OSError("disk full")
    with monkeypatch.context() as m:
        m.setattr(compile_cache.os, "replace", fail)
        co, n = _counted("llvm", IR_OK, arch="gfx1100")      # the compile itself succeeds
        assert n == 1 and co.startswith(b"\x7fELF")
        assert list(cache_dir.iterdir()) == []              # no entry, no temporary file
    assert _counted("llvm", IR_OK, arch="gfx1100")[1] == 1


def test_errors_are_not_cached():
    for _ in range(2):
        before = compiler.stats["llvmlite"]
        with pytest.raises(CompileError):
            amdq.compile(IR_BAD, "gfx1100")
        assert compiler.stats["llvmlite"] == before + 1


def test_inline_asm_key_has_llc(monkeypatch):
    """IR with inline assembly is compiled by llc: which llc (none) is part of the key, so a result llc made
    is not returned when there is no llc."""
    from clang import tool
    monkeypatch.setenv("AMDQ_LLC", tool("llc"))
    asm = 'define amdgpu_kernel void @k(ptr addrspace(1) %o) {\n  call void asm sideeffect "s_nop 0", ""()\n  ret void\n}\n'
    co, n = _counted("llvm", asm, arch="gfx1100")
    assert co.startswith(b"\x7fELF") and _counted("llvm", asm, arch="gfx1100")[1] == 0
    monkeypatch.setattr(compiler, "find_llc", lambda: None)
    with pytest.raises(CompileError, match="inline assembly"):
        amdq.compile(asm, "gfx1100")
