"""Graph capture and replay: nothing runs while capturing, replays run everything, arguments change between."""
from __future__ import annotations

import numpy as np
import pytest

import amdq
from amdq.errors import InvalidArgument
from clang import compile_cl
from sims import RUNTIME_DEVICES as DEVICES, open_sim

AXPY = """
define amdgpu_kernel void @axpy(ptr addrspace(1) %y, ptr addrspace(1) %x, float %a) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %wg, 64
  %j = add i32 %b, %i
  %xp = getelementptr float, ptr addrspace(1) %x, i32 %j
  %yp = getelementptr float, ptr addrspace(1) %y, i32 %j
  %xv = load float, ptr addrspace(1) %xp
  %yv = load float, ptr addrspace(1) %yp
  %r = call float @llvm.fma.f32(float %a, float %xv, float %yv)
  store float %r, ptr addrspace(1) %yp
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare float @llvm.fma.f32(float, float, float)
"""


@pytest.fixture(params=[("sync", "SIMKFD", "gfx1100"), ("async", "SIMKFD", "gfx942")] + [("async", *d) for d in DEVICES],
                ids=lambda p: "-".join(p))
def dev(request, monkeypatch, tmp_path):
    mode, iface, arch = request.param
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    monkeypatch.delenv("AMD_DISABLE_SDMA", raising=False)
    d = open_sim(monkeypatch, tmp_path, iface, arch)
    yield d
    d.close()


def test_capture_replay_update(dev):
    k = dev.load(amdq.compile(AXPY, dev.arch))["axpy"]
    n = 256
    x1, x2 = np.arange(n, dtype=np.float32), np.full(n, 10, np.float32)
    Y, X1, X2 = dev.upload(np.zeros(n, np.float32)), dev.upload(x1), dev.upload(x2)
    with dev.capture() as g:
        n1 = k(Y, X1, 1.0, grid=n // 64, block=64)
        k(Y, X1, 2.0, grid=n // 64, block=64)
        k(Y, X2, 0.5, grid=n // 64, block=64)
    assert len(g.nodes) == 3 and (Y.numpy(np.float32) == 0).all()        # nothing ran while capturing
    g.replay()
    dev.synchronize()
    y = 3 * x1 + 0.5 * x2
    assert np.array_equal(Y.numpy(np.float32), y)
    for _ in range(10):
        g.replay()
    dev.synchronize()
    y += 10 * (3 * x1 + 0.5 * x2)
    assert np.array_equal(Y.numpy(np.float32), y)
    n1.update(Y, X1, -1.0)                                               # a scalar argument
    assert g.replace(X2, X1) == 1                                        # a buffer argument
    g.replay()
    dev.synchronize()
    y += (-1 + 2) * x1 + 0.5 * x1
    assert np.array_equal(Y.numpy(np.float32), y)
    with pytest.raises(InvalidArgument):
        n1.update(Y, X1)                                                 # wrong argument count
    g.free()


def test_wait_inside_capture_is_an_error(dev):
    k = dev.load(amdq.compile(AXPY, dev.arch))["axpy"]
    Y = dev.alloc(256)
    with pytest.raises(RuntimeError, match="capture"):
        with dev.capture():
            k(Y, Y, 1.0, grid=1, block=64, wait=True)


def test_graph_of_cl_kernels(dev):
    k = dev.load(compile_cl("vadd.cl", dev.arch).read_bytes())["vadd"]
    n = 1024
    a, b = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
    A, B, C = dev.upload(a), dev.upload(b), dev.alloc(4 * n)
    with dev.capture() as g:
        node = k(A, B, C, 2.0, n, grid=n // 256, block=256)
    g.replay()
    dev.synchronize()
    from amdq.sim.shader.fp import fma32
    assert np.array_equal(C.numpy(np.float32), fma32(np.float32(2.0), b, a))
    node.update(B, A, C, 3.0, n)
    g.replay()
    dev.synchronize()
    assert np.array_equal(C.numpy(np.float32), fma32(np.float32(3.0), a, b))


def test_graph_with_copies_across_queues(dev):
    """copy in -> kernel -> copy out, one buffer per queue, cross-queue waits inside each replay (on gfx942 the
    PM4 of the replay runs on one die: every die running the whole grid added twice when some waited)."""
    assert dev.copyq is not None
    k = dev.load(amdq.compile(AXPY, dev.arch))["axpy"]
    n = 256
    src, x, y, out = (dev.upload(np.zeros(n, np.float32)) for _ in range(4))
    with dev.capture() as g:
        dev.copy(x, src, 4 * n)                               # copy queue
        k(y, x, 2.0, grid=n // 64, block=64)                  # compute queue, after the copy
        dev.copy(out, y, 4 * n)                               # copy queue, after the kernel
    assert g.copies == 2 and len(g.segments) == 3 and set(g.ibs) == {"compute", "copy"}
    total = np.zeros(n, np.float32)
    for r in range(1, 6):
        src.write(np.full(n, r, np.float32))
        g.replay()
        total += 2.0 * r
        assert np.array_equal(out.numpy(np.float32), total), r
    with pytest.raises(RuntimeError, match="capture"):
        with dev.capture():
            src.write(np.zeros(n, np.float32))
    g.free()


def test_copy_record_and_profile(dev):
    n = 1 << 20
    a, b = dev.upload(np.arange(n, dtype=np.uint8)), dev.alloc(n)
    rec = dev.copy(b, a, n, wait=True)
    assert rec.kernel == "copy" and rec.extra["bytes"] == n and rec.gpu is not None and rec.gpu >= 0
    assert np.array_equal(b.numpy(np.uint8), np.arange(n, dtype=np.uint8))
    with dev.profile() as p:
        dev.copy(a, b, n)
        dev.copy(b, a, 1000)
    assert [r.kernel for r in p.records] == ["copy", "copy"] and all(r.gpu is not None for r in p.records)
    t = p.trace()
    assert any(e["args"]["name"].startswith("GPU sdma") for e in t["traceEvents"] if e["ph"] == "M" and "tid" in e)


def test_replays_after_host_writes_through_the_copy_queue(dev):
    """A host write (through the copy queue when there is one) right before each replay: the replay waits for it
    and runs the kernel once (gfx942: a PM4 dispatch inside the replay runs on one die, not on all eight)."""
    k = dev.load(amdq.compile(AXPY, dev.arch))["axpy"]
    n = 256
    x, y = dev.upload(np.zeros(n, np.float32)), dev.upload(np.zeros(n, np.float32))
    with dev.capture() as g:
        k(y, x, 2.0, grid=n // 64, block=64)
    total = 0.0
    for r in range(1, 5):
        x.write(np.full(n, r, np.float32))
        g.replay()
        dev.synchronize()
        total += 2.0 * r
        assert np.array_equal(y.numpy(np.float32), np.full(n, total, np.float32)), r
