"""Kernel metadata is checked at load: argument layout against the kernarg segment, ranges, types,
overlaps. Each bad note is a CodeObjectError naming the kernel, the argument and the field."""
from __future__ import annotations

import re

import msgpack
import pytest

import amdq
from amdq.codeobj import load_code_object
from amdq.codeobj.metadata import MAX_KERNARG_SEGMENT, MAX_METADATA
from amdq.errors import CodeObjectError, LDSLimitExceeded
from amdq.runtime import kernargs
from test_fuzz_codeobj import load_fuzzer

IR = """
define amdgpu_kernel void @scale(ptr addrspace(1) %out, float %k, i32 %n, ptr addrspace(3) %tmp) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %q = getelementptr float, ptr addrspace(1) %out, i32 %i
  %s = getelementptr float, ptr addrspace(3) %tmp, i32 %i
  store float %k, ptr addrspace(3) %s
  %v = load float, ptr addrspace(3) %s
  store float %v, ptr addrspace(1) %q
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""


@pytest.fixture(scope="module")
def base():
    """(layout, decoded metadata) of a small llvmlite object whose arguments have names."""
    fz = load_fuzzer()
    lay = fz.parse_layout(amdq.compile(IR, "gfx1100"))
    return fz, lay


def with_meta(base, edit) -> bytes:
    fz, lay = base
    m = lay.meta
    edit(m["amdhsa.kernels"][0], m)
    return fz.with_metadata(lay, msgpack.packb(m, use_bin_type=True))


def arg(k, name):
    return next(a for a in k[".args"] if a.get(".name") == name)


def test_base_object_loads_and_packs(base):
    data = with_meta(base, lambda k, m: None)
    km = load_code_object(data).kernels["scale"].meta
    assert [a.name for a in km.explicit_args] == ["out", "k", "n", "tmp"]
    blob, dyn = kernargs.pack(km, (0x1000, 1.5, 3, amdq.LDS(64)), (1, 1, 1), (32, 1, 1), lambda b: 0, 0, 65536)
    assert len(blob) == km.kernarg_segment_size and dyn == 64


@pytest.mark.parametrize("field,value,message", [
    (".offset", 1 << 40, r".offset = 1099511627776 is out of range \(allowed 0..65536\)"),
    (".size", 1 << 40, r".size = 1099511627776 is out of range \(allowed 0..65536\)"),
    (".offset", -8, r".offset = -8 is out of range"),
    (".size", -1, r".size = -1 is out of range"),
    (".offset", 2.5, r".offset is float 2.5, expected int"),
    (".size", "4", r".size is str '4', expected int"),
    (".size", True, r".size is bool True, expected int"),
    (".offset", None, r".offset is NoneType None, expected int"),
])
def test_argument_field_out_of_range_or_wrong_type(base, field, value, message):
    data = with_meta(base, lambda k, m: arg(k, "n").__setitem__(field, value))
    with pytest.raises(CodeObjectError, match=r"kernel scale \.args\[2\] \(n\): " + message):
        load_code_object(data)


def test_argument_past_the_kernarg_segment(base):
    def edit(k, m):
        arg(k, "n")[".offset"] = k[".kernarg_segment_size"] - 2
    with pytest.raises(CodeObjectError, match=r"kernel scale \.args\[2\] \(n\): \.offset (\d+) \+ \.size 4 = \d+ runs "
                                              r"past the (\d+)-byte kernarg segment") as e:
        load_code_object(with_meta(base, edit))
    off, kss = map(int, re.search(r"\.offset (\d+) .* the (\d+)-byte", str(e.value)).groups())
    assert off == kss - 2


def test_kernarg_segment_size_bounded(base):
    with pytest.raises(CodeObjectError, match=rf"kernel scale: \.kernarg_segment_size = {1 << 20} is out of range "
                                              rf"\(allowed 0..{MAX_KERNARG_SEGMENT}\)"):
        load_code_object(with_meta(base, lambda k, m: k.__setitem__(".kernarg_segment_size", 1 << 20)))
    # a segment shrunk below its last argument is caught by the argument check
    def shrink(k, m):
        k[".kernarg_segment_size"] = max(a[".offset"] + a[".size"] for a in k[".args"]) - 1
    with pytest.raises(CodeObjectError, match=r"kernel scale \.args\[3\] \(tmp\): \.offset 16 \+ \.size 4 = 20 runs "
                                              r"past the 19-byte kernarg segment"):
        load_code_object(with_meta(base, shrink))


def test_overlapping_arguments(base):
    def edit(k, m):
        arg(k, "n")[".offset"] = arg(k, "k")[".offset"] + 2
    with pytest.raises(CodeObjectError, match=r"kernel scale: \.args\[2\] \(n\) at \.offset 10 overlaps "
                                              r"\.args\[1\] \(k\) at bytes 8..11"):
        load_code_object(with_meta(base, edit))


def test_missing_required_keys(base):
    for key in (".offset", ".size", ".value_kind"):
        with pytest.raises(CodeObjectError, match=rf"kernel scale \.args\[1\] \(k\) lacks {key}"):
            load_code_object(with_meta(base, lambda k, m: arg(k, "k").pop(key)))
    with pytest.raises(CodeObjectError, match=r"kernel scale lacks \.kernarg_segment_size"):
        load_code_object(with_meta(base, lambda k, m: k.pop(".kernarg_segment_size")))


def test_pointer_arguments_have_pointer_sizes(base):
    with pytest.raises(CodeObjectError, match=r"\.args\[0\] \(out\): \.size is 4, but a global_buffer argument is 8"):
        load_code_object(with_meta(base, lambda k, m: arg(k, "out").__setitem__(".size", 4)))
    with pytest.raises(CodeObjectError, match=r"\.args\[3\] \(tmp\): \.size is 2, but a dynamic_shared_pointer "
                                              r"argument is 4 or 8"):
        load_code_object(with_meta(base, lambda k, m: arg(k, "tmp").__setitem__(".size", 2)))


def test_pointee_align(base):
    with pytest.raises(CodeObjectError, match=r"\.args\[3\] \(tmp\): \.pointee_align = 12 is not a power of two"):
        load_code_object(with_meta(base, lambda k, m: arg(k, "tmp").__setitem__(".pointee_align", 12)))
    with pytest.raises(CodeObjectError, match=r"\.args\[3\] \(tmp\): \.pointee_align is str"):
        load_code_object(with_meta(base, lambda k, m: arg(k, "tmp").__setitem__(".pointee_align", "4")))


def test_lds_offset_that_the_pointer_cannot_hold(base):
    """A legal but enormous .pointee_align pushes the LDS offset past 32 bits: a clean LDSLimitExceeded."""
    km = load_code_object(with_meta(base, lambda k, m: arg(k, "tmp").__setitem__(".pointee_align", 1 << 32))) \
        .kernels["scale"].meta
    with pytest.raises(LDSLimitExceeded, match=r"would start at LDS byte 4294967296 \(pointee_align 4294967296\)"):
        kernargs.pack(km, (0, 1.0, 1, amdq.LDS(4)), (1, 1, 1), (1, 1, 1), lambda b: 0, 16, 65536)


@pytest.mark.parametrize("field,value,message", [
    (".group_segment_fixed_size", 1 << 33, r"\.group_segment_fixed_size = 8589934592 is out of range"),
    (".private_segment_fixed_size", -1, r"\.private_segment_fixed_size = -1 is out of range"),
    (".wavefront_size", 16, r"\.wavefront_size = 16 is out of range"),
    (".wavefront_size", 48, r"\.wavefront_size = 48, expected 32 or 64"),
    (".max_flat_workgroup_size", 0, r"\.max_flat_workgroup_size = 0 is out of range \(allowed 1..1024\)"),
    (".kernarg_segment_align", 12, r"\.kernarg_segment_align = 12 is not a power of two"),
    (".reqd_workgroup_size", [64, 64, 1], r"\.reqd_workgroup_size is \[64, 64, 1\], expected 3 positive integers"),
    (".reqd_workgroup_size", "x", r"\.reqd_workgroup_size is 'x'"),
    (".args", {"a": 1}, r"\.args is dict, not a list"),
    (".sgpr_count", 1 << 40, r"\.sgpr_count = 1099511627776 is out of range"),
])
def test_kernel_field_out_of_range_or_wrong_type(base, field, value, message):
    with pytest.raises(CodeObjectError, match=r"kernel scale: " + message):
        load_code_object(with_meta(base, lambda k, m: k.__setitem__(field, value)))


def test_wavefront_size_must_match_the_descriptor(base):
    with pytest.raises(CodeObjectError, match=r"kernel scale: metadata says \.wavefront_size 64, its descriptor wave32"):
        load_code_object(with_meta(base, lambda k, m: k.__setitem__(".wavefront_size", 64)))


def test_duplicate_kernel_and_too_many_arguments(base):
    with pytest.raises(CodeObjectError, match=r"metadata lists kernel scale twice"):
        load_code_object(with_meta(base, lambda k, m: m["amdhsa.kernels"].append(dict(k))))
    with pytest.raises(CodeObjectError, match=r"kernel scale: 5000 arguments, more than the 4096"):
        load_code_object(with_meta(base, lambda k, m: k.__setitem__(".args", [{}] * 5000)))


def test_huge_metadata_note_refused_before_decoding(base):
    with pytest.raises(CodeObjectError, match=rf"metadata note is \d+ bytes, more than the {MAX_METADATA >> 20} MiB"):
        load_code_object(with_meta(base, lambda k, m: m.__setitem__("amdhsa.padding", b"\0" * MAX_METADATA)))


def test_oversized_file_refused_before_parsing(base, monkeypatch):
    import amdq.codeobj.elf as elf
    data = with_meta(base, lambda k, m: None)
    monkeypatch.setattr(elf, "MAX_FILE", len(data) - 1)
    with pytest.raises(CodeObjectError, match=rf"code object is {len(data)} bytes, more than the"):
        load_code_object(data)
    monkeypatch.setattr(elf, "MAX_FILE", len(data))
    assert load_code_object(data).kernels
