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
