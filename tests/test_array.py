"""Typed device arrays (amdq.Array): dtype, shape and strides kept, host copies, kernel arguments checked
against the pointer types the code object's metadata records, use after free."""
from __future__ import annotations

import numpy as np
import pytest

import amdq
from amdq.errors import AmdqError, DTypeMismatch, InvalidArgument
from clang import compile_cl
from sims import INTERFACES, open_sim

# the same float* kernel as tests/kernels/vadd.cl, with typed integer pointers next to it
TYPED = """
__kernel void typed(__global const float *a, __global int *b, __global const uint *c, __global double *d,
                    __global float4 *v, __global const char *raw, int n) {
  int i = get_global_id(0);
  if (i < n) { b[i] = (int)a[i] + (int)c[i]; d[i] = (double)a[i] * 2.0; }
  if (i == 0) v[0].y = raw[0];
}
"""

AXPY = """
define amdgpu_kernel void @axpy(ptr addrspace(1) %y, ptr addrspace(1) %x, float %a) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %xp = getelementptr float, ptr addrspace(1) %x, i32 %i
  %yp = getelementptr float, ptr addrspace(1) %y, i32 %i
  %xv = load float, ptr addrspace(1) %xp
  %yv = load float, ptr addrspace(1) %yp
  %r = call float @llvm.fma.f32(float %a, float %xv, float %yv)
  store float %r, ptr addrspace(1) %yp
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare float @llvm.fma.f32(float, float, float)
"""


@pytest.fixture(scope="module", params=INTERFACES)
def dev(request, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    d = open_sim(mp, tmp_path_factory.mktemp("array"), request.param)
    yield d
    d.close()
    mp.undo()


@pytest.fixture(scope="module")
def vadd(dev):
    return dev.load(compile_cl("vadd.cl", dev.arch, flags=("-cl-kernel-arg-info",)).read_bytes())["vadd"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.int64, np.complex64, np.bool_])
def test_array_keeps_dtype_shape_and_strides(dev, dtype):
    host = (np.arange(2 * 3 * 5) % 7).astype(dtype).reshape(2, 3, 5)
    a = dev.array(host)
    assert isinstance(a, amdq.Array)
    assert a.shape == (2, 3, 5) and a.dtype == np.dtype(dtype) and a.ndim == 3 and len(a) == 2
    assert a.size == 30 and a.nbytes == host.nbytes and a.itemsize == host.itemsize
    assert a.strides == host.strides
    back = a.numpy()
    assert back.dtype == host.dtype and back.shape == host.shape and np.array_equal(back, host)
    assert back.flags.writeable and back.flags.c_contiguous
    back[0, 0, 0] = 1                                         # a copy: the device array is unchanged
    assert np.array_equal(a.get(), host)


def test_array_from_noncontiguous_and_lists(dev):
    host = np.arange(64, dtype=np.int32).reshape(8, 8)[:, ::2]
    a = dev.array(host)
    assert a.shape == (8, 4) and a.strides == (16, 4) and np.array_equal(a.numpy(), host)
    b = dev.array([[1.5, 2.5], [3.5, 4.5]])
    assert b.dtype == np.float64 and b.shape == (2, 2)
    c = dev.array([1, 2, 3], dtype=np.float32)
    assert c.dtype == np.float32 and np.array_equal(c.numpy(), [1, 2, 3])
    s = dev.array(np.float32(7))
    assert s.shape == () and s.size == 1 and s.numpy() == 7 and s.numpy().shape == ()
    e = dev.array(np.zeros((0, 3), np.float32))
    assert e.shape == (0, 3) and e.size == 0 and e.nbytes == 0 and e.numpy().shape == (0, 3)


def test_empty_zeros_set_and_reshape(dev):
    z = dev.zeros((4, 16), np.int16)
    assert z.dtype == np.int16 and z.shape == (4, 16) and not z.numpy().any()
    e = dev.empty(10, np.float64)
    assert e.shape == (10,) and e.dtype == np.float64 and e.numpy().shape == (10,)
    e.set(np.arange(10.0))
    assert np.array_equal(e.numpy(), np.arange(10.0))
    e.set(np.arange(10, dtype=np.float32))                   # a safe cast within the kind
    r = z.reshape(8, -1)
    assert r.shape == (8, 8) and r.addr == z.addr and r.strides == (16, 2)
    r.set(np.ones((8, 8), np.int16))
    assert (z.numpy() == 1).all()                             # the same memory
    c = dev.empty((4, 16), np.int16)
    c.copy_from(z, wait=True)
    assert (c.numpy() == 1).all()
    for bad in (lambda: e.set(np.arange(9.0)), lambda: e.set(np.array(["x"] * 10)), lambda: z.reshape(7, 9),
                lambda: z.reshape(-1, -1), lambda: dev.empty((-1,)), lambda: dev.empty(3, object),
                lambda: dev.empty(3, "not a dtype"), lambda: c.copy_from(e), lambda: dev.array(np.array([None]))):
        with pytest.raises(InvalidArgument):
            bad()


def test_array_as_a_kernel_argument(dev, vadd):
    n = 1024
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2, np.float32)
    A, B, C = dev.array(a), dev.array(b), dev.empty(n, np.float32)
    vadd(A, B, C, 0.5, n, grid=n // 256, block=256, wait=True)
    assert np.array_equal(C.numpy(), a + 0.5 * b)
    raw = dev.upload(np.zeros(n, np.float32))                 # a Buffer is raw bytes: any pointer takes it
    vadd(A, B, raw, 0.5, n, grid=n // 256, block=256, wait=True)
    assert np.array_equal(raw.numpy(np.float32), a + 0.5 * b)
    C2 = dev.empty(n, np.float32)                             # an address as a numpy integer is an address
    vadd(A, B, np.uint64(C2.addr), 0.5, n, grid=n // 256, block=256, wait=True)
    assert np.array_equal(C2.numpy(), a + 0.5 * b)
    k = dev.load(amdq.compile(AXPY, dev.arch))["axpy"]        # LLVM IR records no pointee types: no check
    Y, X = dev.zeros(64, np.int32), dev.array(np.ones(64, np.float64))
    k(Y, X, 1.0, grid=1, block=64, wait=True)


def test_dtype_mismatch_names_the_argument(dev, vadd):
    n = 256
    A, B = dev.array(np.ones(n, np.float32)), dev.array(np.ones(n, np.float32))
    vadd(A, B, dev.empty(n, np.float32), 1.0, n, grid=1, block=256).wait()      # the fast path has a plan
    before, plans = dev.timeline.value, dict(vadd._plans)
    for bad, dt in ((dev.zeros(n, np.float64), "float64"), (dev.zeros(n, np.int32), "int32"),
                    (dev.zeros(n, np.float16), "float16")):
        with pytest.raises(DTypeMismatch, match=rf"argument c of vadd is a float\* pointer: an array of {dt} ") as e:
            vadd(A, B, bad, 1.0, n, grid=1, block=256)
        assert isinstance(e.value, TypeError) and isinstance(e.value, AmdqError)
        assert "float32" in str(e.value)
    with pytest.raises(DTypeMismatch, match="argument a of vadd"):
        vadd(dev.zeros(n, np.float64), B, A, 1.0, n, grid=1, block=256)
    with pytest.raises(DTypeMismatch, match="argument c"):
        vadd.bind(A, B, dev.zeros(n, np.float64), 1.0, n, grid=1, block=256)
    wrong = dev.zeros(n, np.float64)
    with pytest.raises(DTypeMismatch, match="argument c"):
        with dev.capture():
            vadd(A, B, wrong, 1.0, n, grid=1, block=256)
    assert dev.timeline.value == before
    assert vadd._plans == plans                                # the checks ran on the cached plan's path


def test_typed_pointers_of_many_kinds(dev):
    k = dev.load(compile_cl(TYPED, dev.arch, flags=("-cl-kernel-arg-info",)).read_bytes())["typed"]
    assert [a.type_name for a in k.meta.explicit_args[:6]] == ["float*", "int*", "uint*", "double*", "float4*",
                                                               "char*"]
    n = 64
    a = np.arange(n, dtype=np.float32)
    A, Bi, C, D = dev.array(a), dev.zeros(n, np.int32), dev.array(np.full(n, 3, np.uint32)), dev.zeros(n, np.float64)
    V, R = dev.zeros((4, 4), np.float32), dev.array(np.array([9], np.int8))
    k(A, Bi, C, D, V, R, n, grid=1, block=n, wait=True)
    assert np.array_equal(Bi.numpy(), a.astype(np.int32) + 3) and np.array_equal(D.numpy(), 2.0 * a)
    assert V.numpy()[0, 1] == 9
    # signedness is free, sizes and kinds are not; char* (bytes) takes any array; complex64 fits float pairs
    k(A, dev.zeros(n, np.uint32), dev.zeros(n, np.int32), D, dev.zeros(8, np.complex64), dev.zeros(2, np.float64), n,
      grid=1, block=n, wait=True)
    with pytest.raises(DTypeMismatch, match=r"argument b of typed is a int\* pointer: an array of int64 .*int32 or "
                                            r"uint32"):
        k(A, dev.zeros(n, np.int64), C, D, V, R, n, grid=1, block=n)
    with pytest.raises(DTypeMismatch, match=r"argument d of typed is a double\* pointer: an array of float32"):
        k(A, Bi, C, dev.zeros(n, np.float32), V, R, n, grid=1, block=n)
    with pytest.raises(DTypeMismatch, match=r"argument v of typed is a float4\* pointer"):
        k(A, Bi, C, D, dev.zeros(16, np.int32), R, n, grid=1, block=n)


def test_array_use_after_free(dev, vadd):
    n = 256
    A, B, C = dev.array(np.ones(n, np.float32)), dev.array(np.ones(n, np.float32)), dev.empty(n, np.float32)
    vadd(A, B, C, 1.0, n, grid=1, block=256).wait()                 # the fast path has a plan
    view = C.reshape(16, 16)
    addr = C.addr
    C.free()
    assert C.freed and view.freed and "freed" in repr(C)
    for use in (C.numpy, lambda: C.set(np.ones(n, np.float32)), C.free, view.free, lambda: C.reshape(-1),
                lambda: A.copy_from(C), lambda: C.copy_from(A), lambda: dev.copy(A, C, 4)):
        with pytest.raises(InvalidArgument, match="freed"):
            use()
    with pytest.raises(InvalidArgument, match=f"{addr:#x}"):
        vadd(A, B, C, 1.0, n, grid=1, block=256)
    with pytest.raises(InvalidArgument, match=f"{addr:#x}"):
        vadd(A, B, view, 1.0, n, grid=1, block=256)


def test_array_memory_is_counted(dev):
    before = dev.memory_stats()["vram"]["live"]
    a = dev.zeros((1024, 256), np.float32)
    assert dev.memory_stats()["vram"]["live"] == before + a.nbytes
    a.free()
    dev.synchronize()                                         # (a free waits for the GPU's work on it)
    assert dev.memory_stats()["vram"]["live"] == before
