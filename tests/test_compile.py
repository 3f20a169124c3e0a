"""amdq.compile (llvmlite) for every target, checked against LLVM's tools like clang's objects."""
from __future__ import annotations

import hashlib

import pytest

import amdq
from amdq.codeobj import load_code_object
from amdq.errors import CompileError, UnsupportedTarget
from amdq.hw.elf import R_AMDGPU
from amdq.hw.targets import TARGETS
from clang import CACHE
from oracle import BASE, link_at, readelf_header, readelf_metadata, readelf_relocs, readelf_sections


@pytest.fixture(autouse=True)
def _no_compile_cache(monkeypatch):
    """These tests are about what LLVM does: every compile here runs it (no on-disk cache hits)."""
    monkeypatch.setenv("AMDQ_COMPILE_CACHE", "0")


IR = """
@table = addrspace(1) global [4 x i32] [i32 1, i32 2, i32 3, i32 4], align 4
@tptr = addrspace(1) global ptr addrspace(1) getelementptr ([4 x i32], ptr addrspace(1) @table, i64 0, i64 2), align 8

define amdgpu_kernel void @scale(ptr addrspace(1) %out, ptr addrspace(1) %in, float %k, i32 %n) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %v = load float, ptr addrspace(1) %p
  %m = fmul float %v, %k
  %tp = load ptr addrspace(1), ptr addrspace(1) @tptr
  %t = load i32, ptr addrspace(1) %tp
  %tf = sitofp i32 %t to float
  %r = fadd float %m, %tf
  %q = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %r, ptr addrspace(1) %q
  ret void
}

define amdgpu_kernel void @lds_sum(ptr addrspace(1) %out) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %s = getelementptr [64 x i32], ptr addrspace(3) @lds, i32 0, i32 %i
  store i32 %i, ptr addrspace(3) %s
  call void @llvm.amdgcn.s.barrier()
  %j = xor i32 %i, 1
  %t = getelementptr [64 x i32], ptr addrspace(3) @lds, i32 0, i32 %j
  %v = load i32, ptr addrspace(3) %t
  %q = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %v, ptr addrspace(1) %q
  ret void
}
@lds = internal addrspace(3) global [64 x i32] poison, align 4

declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
"""


def write(co: bytes) -> "Path":  # noqa: F821
    CACHE.mkdir(parents=True, exist_ok=True)
    p = CACHE / f"llvmlite-{hashlib.sha256(co).hexdigest()[:16]}.o"
    p.write_bytes(co)
    return p


@pytest.mark.parametrize("arch", list(TARGETS))
def test_compile_every_target(arch):
    co = amdq.compile(IR, arch)
    img = load_code_object(co, arch)
    assert img.arch == arch and img.cov == 5 and img.kind == "ET_REL"
    assert set(img.kernels) == {"scale", "lds_sum"}
    assert img.kernels["lds_sum"].descriptor.group_segment_fixed_size == 256
    assert img.kernels["scale"].descriptor.wave32 == (TARGETS[arch].wave_size == 32)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx942"])
def test_llvmlite_object_agrees_with_oracle(arch):
    path = write(amdq.compile(IR, arch))
    img = load_code_object(path.read_bytes())
    assert readelf_header(path)["Flags"]["Value"] & 0xFF == img.target.mach
    meta = readelf_metadata(path)
    for m in meta["amdhsa.kernels"]:
        k = img.kernels[m[".name"]]
        assert k.meta.kernarg_segment_size == m[".kernarg_segment_size"] == k.descriptor.kernarg_size
        assert k.meta.sgpr_count == m[".sgpr_count"] and k.meta.vgpr_count == m[".vgpr_count"]
        assert [(a.offset, a.size, a.value_kind) for a in k.meta.args] == [
            (a[".offset"], a[".size"], a[".value_kind"]) for a in m[".args"]]
    ours = sorted((r.offset, R_AMDGPU[r.type], r.sym.name if r.sym else "", r.addend) for r in img.elf.relocs)
    assert ours == sorted((o, t, s, a) for _, o, t, s, a in readelf_relocs(path))
    assert {"R_AMDGPU_ABS64", "R_AMDGPU_REL64"} <= {t for _, t, _, _ in ours}
    linked = link_at(path, BASE)
    secs = readelf_sections(linked)
    names = [s.name for s in img.elf.sections if s.index in img.section_offsets]
    placed = load_code_object(path.read_bytes(), placement={n: secs[n]["addr"] - BASE for n in names}).at(BASE)
    data = linked.read_bytes()
    for n in names:
        s = secs[n]
        if s["type"] != "SHT_NOBITS":
            o = s["addr"] - BASE
            assert placed[o:o + s["size"]] == data[s["offset"]:s["offset"] + s["size"]], n


def test_compile_error_carries_llvm_message():
    with pytest.raises(CompileError, match="doesn.t match function result type"):
        amdq.compile("define amdgpu_kernel void @k() {\n  ret i32 %x\n}\n", "gfx1100")
    with pytest.raises(CompileError):
        amdq.compile("this is not IR", "gfx1100")


def test_compile_unsupported_target():
    with pytest.raises(UnsupportedTarget, match="gfx1100"):
        amdq.compile(IR, "gfx803")


def test_compile_adds_code_object_version_to_existing_flags():
    ir = IR + '\n!llvm.module.flags = !{!0}\n!0 = !{i32 7, !"frame-pointer", i32 0}\n'
    assert load_code_object(amdq.compile(ir, "gfx1100")).cov == 5


# -- inline assembly and LLVM aborts: always a CompileError, never a dead process -----------------

ASM_IR = """
define amdgpu_kernel void @k(ptr addrspace(1) %out) {
  call void asm sideeffect "s_nop 0", ""()
  %v = call i32 asm "v_mov_b32 $0, 0x1234abcd", "=v"()
  store i32 %v, ptr addrspace(1) %out
  ret void
}
"""


def _llc():
    from clang import tool
    return tool("llc")            # skips without LLVM 19 (fails in CI, where it must be present)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx942"])
def test_valid_inline_asm_compiles(arch, monkeypatch):
    from clang import run, tool
    monkeypatch.setenv("AMDQ_LLC", _llc())
    co = amdq.compile(ASM_IR, arch)
    img = load_code_object(co, arch)
    assert set(img.kernels) == {"k"} and img.cov == 5 and img.kind == "ET_REL"
    dis = run(tool("llvm-objdump"), "-d", f"--mcpu={arch}", str(write(co)))
    assert "s_nop 0" in dis and "0x1234abcd" in dis.lower()


def test_valid_inline_asm_runs(monkeypatch):
    import numpy as np
    monkeypatch.setenv("AMDQ_LLC", _llc())
    co = amdq.compile(ASM_IR, "gfx1100")
    dev = amdq.open_device("SIM:gfx1100")
    try:
        out = dev.upload(np.zeros(1, np.uint32))
        dev.load(co)["k"](out, grid=1, block=1, wait=True)
        assert out.numpy(np.uint32)[0] == 0x1234ABCD       # the value only the inline asm writes
    finally:
        dev.close()


def test_invalid_inline_asm_is_a_compile_error(monkeypatch):
    monkeypatch.setenv("AMDQ_LLC", _llc())
    bad = ASM_IR.replace("s_nop 0", "s_bogus_instruction")
    with pytest.raises(CompileError, match=r"rejected the module with inline assembly for gfx1100.*"
                                           r"error: invalid instruction"):
        amdq.compile(bad, "gfx1100")
    with pytest.raises(CompileError, match=r"invalid operand|not a valid operand|error:"):
        amdq.compile(ASM_IR.replace("0x1234abcd", "s[9999]"), "gfx1100")
    assert load_code_object(amdq.compile(IR, "gfx1100")).kernels        # and compiling goes on


def test_module_level_asm_goes_to_llc(monkeypatch):
    monkeypatch.setenv("AMDQ_LLC", _llc())
    with pytest.raises(CompileError, match=r"inline assembly.*error:"):
        amdq.compile('module asm "s_bogus 1"\n' + IR, "gfx1100")


def test_inline_asm_without_llc_is_refused_clearly(monkeypatch):
    import amdq.codeobj.compiler as C
    monkeypatch.setattr(C, "find_llc", lambda: None)
    with pytest.raises(CompileError, match=r"inline assembly, which llvmlite's AMDGPU backend cannot assemble.*"
                                           r"install llvm-19 or set AMDQ_LLC"):
        amdq.compile(ASM_IR, "gfx1100")
    monkeypatch.undo()
    monkeypatch.setenv("AMDQ_LLC", "/nonexistent/llc")
    with pytest.raises(CompileError, match=r"could not run /nonexistent/llc"):
        amdq.compile(ASM_IR, "gfx1100")


def test_llc_that_does_not_know_the_target(monkeypatch):
    monkeypatch.setenv("AMDQ_LLC", _llc())
    import subprocess
    cpus = subprocess.run([_llc(), "-mtriple=amdgcn", "-mcpu=help"], capture_output=True, text=True)
    if "gfx950" in cpus.stdout + cpus.stderr:
        pytest.skip("this llc knows gfx950")
    with pytest.raises(CompileError, match=r"llc\S* does not know gfx950.*'gfx950' is not a recognized processor"):
        amdq.compile(ASM_IR, "gfx950")


ABORTS = {
    # LLVM's instruction selector aborts (report_fatal_error) on an MFMA intrinsic for RDNA
    "cannot select": ("""
define amdgpu_kernel void @k(ptr addrspace(1) %out) {
  %v = call <4 x float> @llvm.amdgcn.mfma.f32.4x4x1f32(float 1.0, float 2.0, <4 x float> zeroinitializer, i32 0, i32 0, i32 0)
  store <4 x float> %v, ptr addrspace(1) %out
  ret void
}
declare <4 x float> @llvm.amdgcn.mfma.f32.4x4x1f32(float, float, <4 x float>, i32, i32, i32)
""", r"LLVM aborted while compiling for gfx1100 \(killed by signal 6.*LLVM ERROR: Cannot select: intrinsic "
     r"%llvm.amdgcn.mfma"),
    # an unknown processor and feature in the function's attributes: warnings, then an abort
    "bad target-cpu": ("""
define amdgpu_kernel void @k(ptr addrspace(1) %out) #0 {
  store i32 1, ptr addrspace(1) %out
  ret void
}
attributes #0 = { "target-features"="+bogus,-wavefrontsize32" "target-cpu"="gfx9999" }
""", r"LLVM aborted while compiling for gfx1100.*'gfx9999' is not a recognized processor"),
}


@pytest.mark.parametrize("case", list(ABORTS))
def test_llvm_abort_is_a_compile_error(case):
    ir, message = ABORTS[case]
    with pytest.raises(CompileError, match=message):
        amdq.compile(ir, "gfx1100")
    co = amdq.compile(IR, "gfx1100")              # a fresh worker takes over
    assert set(load_code_object(co).kernels) == {"scale", "lds_sum"}


def test_compile_argument_checks():
    from amdq.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match="LLVM IR text, not bytes"):
        amdq.compile(IR.encode(), "gfx1100")
    with pytest.raises(InvalidArgument, match="opt is an optimisation level 0, 1, 2 or 3, not 7"):
        amdq.compile(IR, "gfx1100", opt=7)
    assert load_code_object(amdq.compile(IR, "gfx1100", opt=0)).kernels
