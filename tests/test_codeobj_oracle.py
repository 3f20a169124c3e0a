"""The loader against LLVM's tools: metadata, symbols, relocations, descriptor fields and relocated bytes."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from amdq.cli import main as amdq_main
from amdq.codeobj import load_code_object
from amdq.hw.elf import R_AMDGPU
from amdq.hw.targets import get_target
from oracle import (BASE, asm_directives, compile_cl, link_at, readelf_header, readelf_metadata, readelf_relocs,
                    readelf_sections, readelf_symbols)

HERE = Path(__file__).parent
SOURCES = sorted(p.name for p in (HERE / "kernels").glob("*.cl")) + sorted(
    str(p) for p in (HERE / "codeobj").glob("*.cl"))
ARCHS = ["gfx1100", "gfx1201", "gfx942"]
CASES = [(a, s) for a in ARCHS for s in SOURCES]


def ids(case):
    return f"{case[0]}-{Path(case[1]).stem}"


def inspect_json(path: Path, capsys) -> dict:
    assert amdq_main(["inspect", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("link", [True, False], ids=["hsaco", "obj"])
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_inspect_agrees_with_readelf(case, link, capsys):
    arch, src = case
    path = compile_cl(src, arch, link=link)
    got = inspect_json(path, capsys)
    meta = readelf_metadata(path)
    hdr = readelf_header(path)
    assert hdr["Flags"]["Value"] & 0xFF == get_target(arch).mach
    assert got["arch"] == arch
    assert meta["amdhsa.target"].endswith(arch)
    assert [k["name"] for k in got["kernels"]] == [k[".name"] for k in meta["amdhsa.kernels"]]
    syms = readelf_symbols(path)
    for k, m in zip(got["kernels"], meta["amdhsa.kernels"]):
        assert k["kernarg_size"] == m[".kernarg_segment_size"]
        assert k["group_segment_size"] == m[".group_segment_fixed_size"]
        assert k["private_segment_size"] == m[".private_segment_fixed_size"]
        assert k["wavefront_size"] == m[".wavefront_size"]
        assert k["wave32"] == (m[".wavefront_size"] == 32)
        assert k["sgpr_count"] == m[".sgpr_count"] and k["vgpr_count"] == m[".vgpr_count"]
        assert [(a["offset"], a["size"], a["value_kind"]) for a in k["args"]] == [
            (a[".offset"], a[".size"], a[".value_kind"]) for a in m[".args"]]
        kd, fn = syms[m[".symbol"]], syms[k["name"]]
        assert kd["size"] == 64 and kd["type"] == "Object" and fn["type"] == "Function"
        if link:   # a linked image is laid out by its virtual addresses
            assert k["kd_offset"] == kd["value"] and k["entry_offset"] == fn["value"]
        else:      # same symbol-relative layout within our placement of the sections
            img = load_code_object(path.read_bytes())
            secs = {s.name: img.section_offsets[s.index] for s in img.elf.sections if s.index in img.section_offsets}
            assert k["kd_offset"] == secs[kd["section"]] + kd["value"]
            assert k["entry_offset"] == secs[fn["section"]] + fn["value"]


# .amdhsa_* directive -> (register, field) of the decoded descriptor (AMDGPUUsage, "Code Object V3+ directives")
DIRECTIVES = {
    ".amdhsa_group_segment_fixed_size": ("kd", "group_segment_fixed_size"),
    ".amdhsa_private_segment_fixed_size": ("kd", "private_segment_fixed_size"),
    ".amdhsa_kernarg_size": ("kd", "kernarg_size"),
    ".amdhsa_user_sgpr_count": ("rsrc2", "USER_SGPR_COUNT"),
    ".amdhsa_user_sgpr_private_segment_buffer": ("props", "ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER"),
    ".amdhsa_user_sgpr_dispatch_ptr": ("props", "ENABLE_SGPR_DISPATCH_PTR"),
    ".amdhsa_user_sgpr_queue_ptr": ("props", "ENABLE_SGPR_QUEUE_PTR"),
    ".amdhsa_user_sgpr_kernarg_segment_ptr": ("props", "ENABLE_SGPR_KERNARG_SEGMENT_PTR"),
    ".amdhsa_user_sgpr_dispatch_id": ("props", "ENABLE_SGPR_DISPATCH_ID"),
    ".amdhsa_user_sgpr_flat_scratch_init": ("props", "ENABLE_SGPR_FLAT_SCRATCH_INIT"),
    ".amdhsa_user_sgpr_private_segment_size": ("props", "ENABLE_SGPR_PRIVATE_SEGMENT_SIZE"),
    ".amdhsa_wavefront_size32": ("props", "ENABLE_WAVEFRONT_SIZE32"),
    ".amdhsa_uses_dynamic_stack": ("props", "USES_DYNAMIC_STACK"),
    ".amdhsa_user_sgpr_kernarg_preload_length": ("preload", "LENGTH"),
    ".amdhsa_user_sgpr_kernarg_preload_offset": ("preload", "OFFSET"),
    ".amdhsa_enable_private_segment": ("rsrc2", "ENABLE_PRIVATE_SEGMENT"),
    ".amdhsa_system_sgpr_workgroup_id_x": ("rsrc2", "ENABLE_SGPR_WORKGROUP_ID_X"),
    ".amdhsa_system_sgpr_workgroup_id_y": ("rsrc2", "ENABLE_SGPR_WORKGROUP_ID_Y"),
    ".amdhsa_system_sgpr_workgroup_id_z": ("rsrc2", "ENABLE_SGPR_WORKGROUP_ID_Z"),
    ".amdhsa_system_sgpr_workgroup_info": ("rsrc2", "ENABLE_SGPR_WORKGROUP_INFO"),
    ".amdhsa_system_vgpr_workitem_id": ("rsrc2", "ENABLE_VGPR_WORKITEM_ID"),
    ".amdhsa_exception_fp_ieee_invalid_op": ("rsrc2", "ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION"),
    ".amdhsa_exception_fp_denorm_src": ("rsrc2", "ENABLE_EXCEPTION_FP_DENORMAL_SOURCE"),
    ".amdhsa_exception_fp_ieee_div_zero": ("rsrc2", "ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO"),
    ".amdhsa_exception_fp_ieee_overflow": ("rsrc2", "ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW"),
    ".amdhsa_exception_fp_ieee_underflow": ("rsrc2", "ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW"),
    ".amdhsa_exception_fp_ieee_inexact": ("rsrc2", "ENABLE_EXCEPTION_IEEE_754_FP_INEXACT"),
    ".amdhsa_exception_int_div_zero": ("rsrc2", "ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO"),
    ".amdhsa_float_round_mode_32": ("rsrc1", "FLOAT_ROUND_MODE_32"),
    ".amdhsa_float_round_mode_16_64": ("rsrc1", "FLOAT_ROUND_MODE_16_64"),
    ".amdhsa_float_denorm_mode_32": ("rsrc1", "FLOAT_DENORM_MODE_32"),
    ".amdhsa_float_denorm_mode_16_64": ("rsrc1", "FLOAT_DENORM_MODE_16_64"),
    ".amdhsa_dx10_clamp": ("rsrc1", "ENABLE_DX10_CLAMP"),
    ".amdhsa_ieee_mode": ("rsrc1", "ENABLE_IEEE_MODE"),
    ".amdhsa_fp16_overflow": ("rsrc1", "FP16_OVFL"),
    ".amdhsa_workgroup_processor_mode": ("rsrc1", "WGP_MODE"),
    ".amdhsa_memory_ordered": ("rsrc1", "MEM_ORDERED"),
    ".amdhsa_forward_progress": ("rsrc1", "FWD_PROGRESS"),
    ".amdhsa_round_robin_scheduling": ("rsrc1", "ENABLE_WG_RR_EN"),
    ".amdhsa_shared_vgpr_count": ("rsrc3", "SHARED_VGPR_COUNT"),
    ".amdhsa_inst_pref_size": ("rsrc3", "INST_PREF_SIZE"),
    ".amdhsa_tg_split": ("rsrc3", "TG_SPLIT"),
}
NOT_IN_DESCRIPTOR = {".amdhsa_next_free_sgpr", ".amdhsa_reserve_vcc", ".amdhsa_reserve_xnack_mask",
                     ".amdhsa_reserve_flat_scratch", ".amdhsa_next_free_vgpr", ".amdhsa_accum_offset"}


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_descriptor_agrees_with_compiler_directives(case):
    arch, src = case
    img = load_code_object(compile_cl(src, arch, link=True).read_bytes(), arch)
    directives = asm_directives(src, arch)
    assert set(directives) == set(img.kernels)
    for name, dirs in directives.items():
        d = img.kernels[name].descriptor
        regs = {"rsrc1": d.rsrc1, "rsrc2": d.rsrc2, "rsrc3": d.rsrc3, "props": d.properties,
                "preload": {"LENGTH": d.kernarg_preload & 0x7F, "OFFSET": d.kernarg_preload >> 7},
                "kd": {k: getattr(d, k) for k in ("group_segment_fixed_size", "private_segment_fixed_size",
                                                  "kernarg_size")}}
        checked = 0
        for directive, value in dirs.items():
            if directive in NOT_IN_DESCRIPTOR:
                continue
            assert directive in DIRECTIVES, f"directive {directive} not mapped to a descriptor field"
            reg, fld = DIRECTIVES[directive]
            assert regs[reg][fld] == value, f"{name}: {directive} {value} but {reg}.{fld}={regs[reg][fld]}"
            checked += 1
        assert checked >= 25
        if ".amdhsa_accum_offset" in dirs:      # GFX90A+: ACCUM_OFFSET = accum_offset / 4 - 1
            assert d.rsrc3["ACCUM_OFFSET"] == dirs[".amdhsa_accum_offset"] // 4 - 1
        nfv = dirs[".amdhsa_next_free_vgpr"]
        if d.gen >= 11:
            assert d.rsrc1["GRANULATED_WORKITEM_VGPR_COUNT"] == max(math.ceil(nfv / d.vgpr_granule), 1) - 1
        assert d.vgpr_alloc >= nfv


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_relocations_agree_with_readelf(case):
    arch, src = case
    path = compile_cl(src, arch, link=False)
    img = load_code_object(path.read_bytes())
    ours = sorted((r.offset, R_AMDGPU[r.type], r.sym.name if r.sym else "", r.addend) for r in img.elf.relocs)
    theirs = sorted((off, typ, sym, add) for _, off, typ, sym, add in readelf_relocs(path))
    assert ours == theirs


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_relocated_bytes_match_lld(case):
    """The object relocated by us at BASE equals what ld.lld-19 writes for the same object based at BASE."""
    arch, src = case
    obj = compile_cl(src, arch, link=False)
    linked = link_at(obj, BASE)
    lsecs = readelf_sections(linked)
    img0 = load_code_object(obj.read_bytes())
    loaded = {s.name for s in img0.elf.sections if s.index in img0.section_offsets}
    placement = {n: lsecs[n]["addr"] - BASE for n in loaded}
    ours = load_code_object(obj.read_bytes(), placement=placement).at(BASE)
    data = linked.read_bytes()
    compared = 0
    for n in loaded:
        s = lsecs[n]
        if s["type"] == "SHT_NOBITS":
            assert not any(ours[placement[n]:placement[n] + s["size"]])
            continue
        assert ours[placement[n]:placement[n] + s["size"]] == data[s["offset"]:s["offset"] + s["size"]], n
        compared += 1
    assert compared >= 2       # at least code and descriptors
    # The linked image loaded by the ET_DYN path at its own base reproduces the file's bytes too.
    dyn = load_code_object(data).at(BASE)
    for n in loaded:
        s = lsecs[n]
        if s["type"] != "SHT_NOBITS":
            assert dyn[s["addr"] - BASE:s["addr"] - BASE + s["size"]] == data[s["offset"]:s["offset"] + s["size"]]


@pytest.mark.parametrize("arch", ARCHS)
def test_dynamic_relocations_rebase(arch):
    """A linked image (base 0, RELATIVE64 in .rela.dyn) loaded at BASE equals the object placed alike."""
    src = str(HERE / "codeobj" / "globals.cl")
    hsaco, obj = compile_cl(src, arch, link=True), compile_cl(src, arch, link=False)
    dyn = load_code_object(hsaco.read_bytes())
    assert any(R_AMDGPU[f.type] == "R_AMDGPU_RELATIVE64" for f in dyn.fixups)
    secs = readelf_sections(hsaco)
    rel0 = load_code_object(obj.read_bytes())
    names = [s.name for s in rel0.elf.sections if s.index in rel0.section_offsets]
    rel = load_code_object(obj.read_bytes(), placement={n: secs[n]["addr"] for n in names})
    a, b = dyn.at(BASE), rel.at(BASE)
    for n in names:
        o, size = secs[n]["addr"], secs[n]["size"]
        assert a[o:o + size] == b[o:o + size], n
    ptr = int.from_bytes(a[secs[".data"]["addr"] + 16:secs[".data"]["addr"] + 24], "little")
    assert ptr == BASE + readelf_symbols(hsaco)["table"]["value"] + 4
