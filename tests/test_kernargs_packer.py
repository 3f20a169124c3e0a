"""The compiled kernel-argument packer of a launch plan (kernargs.compile_packer) against the general, checked one
(kernargs.pack): the same bytes for every argument list both accept, and the same error where the checked one
refuses; wrong arguments of a shape whose plan exists raise before anything is submitted (PM4 and AQL)."""
from __future__ import annotations

import numpy as np
import pytest

import amdq
from amdq.errors import DTypeMismatch, InvalidArgument
from amdq.runtime import kernargs

TYPED = ("__kernel void f(__global float *a, int n, float s, double d, short h, __global uchar *raw) "
         "{ if (get_global_id(0) == 0) a[0] = n + s + d + h + raw[0]; }")
UNTYPED = """
define amdgpu_kernel void @g(ptr addrspace(1) %y, float %a, i32 %n) {
  %v = sitofp i32 %n to float
  %r = fadd float %a, %v
  store float %r, ptr addrspace(1) %y
  ret void
}
"""
GRID, BLOCK = (1, 1, 1), (32, 1, 1)


@pytest.fixture(scope="module", params=["0", "1"], ids=["pm4", "aql"])
def dev(request):
    mp = pytest.MonkeyPatch()
    mp.setenv("AMD_AQL", request.param)
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    yield d
    d.close()
    mp.undo()


def checked(k, args) -> bytes:
    blob, _ = kernargs.pack(k.meta, args, GRID, BLOCK, k.address_of, k.desc.group_segment_fixed_size,
                            k.prg.dev.target.lds_bytes)
    return blob


def compiled(p, args) -> bytes:
    out = bytearray(len(p.blob) + 64)
    p.pack(memoryview(out), 0, args)
    return bytes(out[:len(p.blob)])


def same(k, p, args) -> None:
    """Both packers give the same bytes, or both raise the same error."""
    try:
        want = checked(k, args)
    except Exception as e:
        with pytest.raises(type(e)):
            compiled(p, args)
        return
    assert compiled(p, args) == want


def test_typed_arguments_pack_as_the_checked_packer(dev):
    k = dev.load(amdq.compile(TYPED, arch=dev.arch, lang="opencl"))["f"]
    a, raw = dev.array(np.zeros(4, np.float32)), dev.alloc(64)
    p = dev.queue.plan(k, (a, 1, 2.0, 3.0, 4, raw), GRID, BLOCK)
    for args in [(a, 1, 2.0, 3.0, 4, raw), (a.addr, -5, 7, 1e300, -3, raw.addr), (a, np.int32(3), np.float32(.5),
                 np.float64(2), np.int16(9), raw), (a, 1 << 31, 2.0, 3.0, 0xFFFF, raw), (a, True, False, 1, 2, raw),
                 (dev.alloc(16), 1, 2.0, 3.0, 4, dev.array(np.zeros(4, np.int64))), (a, 1.5, 2.0, 3.0, 4, raw),
                 (a, 1 << 40, 2.0, 3.0, 4, raw), (a, 1, 1e39, 3.0, 4, raw), (a, 1, "x", 3.0, 4, raw),
                 (dev.array(np.zeros(4, np.float64)), 1, 2.0, 3.0, 4, raw), (True, 1, 2.0, 3.0, 4, raw),
                 (-1, 1, 2.0, 3.0, 4, raw), (np.int64(4096), 1, 2.0, 3.0, 4, raw), (a, 1, 2.0, 3.0, 4),
                 (a, 1, 2.0, 3.0, 4, raw, 5), (a, amdq.LDS(16), 2.0, 3.0, 4, raw), (1.5, 1, 2.0, 3.0, 4, raw)]:
        same(k, p, args)


def test_untyped_arguments_take_their_python_type(dev):
    """LLVM IR names no types: a float packs a float's bits, an int an integer's, whichever the plan was made with."""
    k = dev.load(amdq.compile(UNTYPED, dev.arch))["g"]
    y = dev.alloc(64)
    for first in [(y, 2.0, 3), (y, 2, 3)]:
        p = dev.queue.plan(k, first, GRID, BLOCK)
        for args in [(y, 2.0, 3), (y, 2, 3), (y, 2.5, 3.0), (y, np.float32(2), 3), (y, 2.0, True), (y, 2.0, 1 << 33)]:
            same(k, p, args)


def test_wrong_arguments_of_a_cached_shape_raise_before_submission(dev):
    k = dev.load(amdq.compile(TYPED, arch=dev.arch, lang="opencl"))["f"]
    a, raw = dev.array(np.zeros(4, np.float32)), dev.alloc(64)
    k(a, 1, 2.0, 3.0, 4, raw, grid=1, block=32, wait=True)        # the plan of this shape exists
    other = amdq.open_device("SIMKFD+AMD:gfx1100")
    try:
        theirs = other.alloc(64)
        freed = dev.alloc(64)
        freed.free()
        before = dev.timeline.value
        for args, err, match in [((dev.array(np.zeros(4, np.int32)), 1, 2.0, 3.0, 4, raw), DTypeMismatch, "float"),
                                 ((a, 1, 2.0, 3.0, 4, theirs), InvalidArgument, "belongs to"),
                                 ((a, 1, 2.0, 3.0, 4, freed), InvalidArgument, "freed buffer"),
                                 ((True, 1, 2.0, 3.0, 4, raw), InvalidArgument, "global pointer"),
                                 ((a, 1, 2.0, 3.0, raw), InvalidArgument, "takes 6 arguments"),
                                 ((a, 1.5, 2.0, 3.0, 4, raw), InvalidArgument, "not an integer")]:
            with pytest.raises(err, match=match):
                k(*args, grid=1, block=32)
        assert dev.timeline.value == before                       # nothing was submitted
        k(a, 5, 0.5, 0.25, -1, raw, grid=1, block=32, wait=True)
        assert a.numpy()[0] == 5 + 0.5 + 0.25 - 1                 # raw[0] is 0
    finally:
        other.close()
