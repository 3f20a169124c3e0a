"""The launch API: dynamic LDS through shared_mem= (PM4 and AQL; called, bound and in graphs; SIMKFD and SIMPCI),
block required and grid as an int, launch handles (done, wait, record), memory statistics and scratch growth
in stage records, and use after free."""
from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.errors import AmdqError, GPUFault, InvalidArgument, LDSLimitExceeded, OutOfMemory
from amdq.hw.kd import LDS_GRANULE
from clang import compile_cl
from sims import open_sim

RT = Path(__file__).parent / "kernels_rt"
IMPLICIT_DYN_LDS = 120          # hidden_dynamic_lds_size: its offset from the implicit-argument pointer (v5)

# out[g*n + l] = dyn[n-1-l] where dyn[l] = in[g*n + l]: a workgroup reversal through an external (dynamic) LDS
# array; lanes 0..7 then write the kernel's static LDS array, which clobbers dyn[0..7] if dynamic LDS overlaps
# it. Work-item 0 stores hidden_dynamic_lds_size to info[0].
REV = f"""
@stat = internal addrspace(3) global [8 x i32] poison, align 16
@dyn = external addrspace(3) global [0 x float], align 16

define amdgpu_kernel void @rev(ptr addrspace(1) %out, ptr addrspace(1) %in, ptr addrspace(1) %info) {{
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %ip = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %gsp = getelementptr i8, ptr addrspace(4) %ip, i64 12
  %gs16 = load i16, ptr addrspace(4) %gsp
  %n = zext i16 %gs16 to i32
  %base = mul i32 %g, %n
  %gid = add i32 %base, %l
  %xp = getelementptr float, ptr addrspace(1) %in, i32 %gid
  %x = load float, ptr addrspace(1) %xp
  %sp = getelementptr [0 x float], ptr addrspace(3) @dyn, i32 0, i32 %l
  store volatile float %x, ptr addrspace(3) %sp
  %low = icmp ult i32 %l, 8
  br i1 %low, label %st, label %sync
st:
  %tp = getelementptr [8 x i32], ptr addrspace(3) @stat, i32 0, i32 %l
  store volatile i32 1000, ptr addrspace(3) %tp
  br label %sync
sync:
  call void @llvm.amdgcn.s.barrier()
  %nm1 = sub i32 %n, 1
  %r = sub i32 %nm1, %l
  %rp = getelementptr [0 x float], ptr addrspace(3) @dyn, i32 0, i32 %r
  %v = load volatile float, ptr addrspace(3) %rp
  %l7 = and i32 %l, 7
  %tq = getelementptr [8 x i32], ptr addrspace(3) @stat, i32 0, i32 %l7
  %t = load volatile i32, ptr addrspace(3) %tq
  %tf = sitofp i32 %t to float
  %v2 = fadd float %v, %tf
  %v3 = fsub float %v2, 1000.0
  %op = getelementptr float, ptr addrspace(1) %out, i32 %gid
  store float %v3, ptr addrspace(1) %op
  %first = icmp eq i32 %gid, 0
  br i1 %first, label %wr, label %done
wr:
  %dp = getelementptr i8, ptr addrspace(4) %ip, i64 {IMPLICIT_DYN_LDS}
  %dl = load i32, ptr addrspace(4) %dp
  store i32 %dl, ptr addrspace(1) %info
  br label %done
done:
  ret void
}}
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare void @llvm.amdgcn.s.barrier()
"""

# The same external array next to a __local pointer argument (amdq.LDS): dyn[l] = x, buf[l] = 2x, then
# out = dyn[n-1-l] + buf[n-1-l]; 3x where the two lie apart, 4x where they overlap.
BOTH = """
@dyn = external addrspace(3) global [0 x float], align 4

define amdgpu_kernel void @both(ptr addrspace(1) %out, ptr addrspace(1) %in, ptr addrspace(3) %buf) {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 64
  %gid = add i32 %base, %l
  %xp = getelementptr float, ptr addrspace(1) %in, i32 %gid
  %x = load float, ptr addrspace(1) %xp
  %sp = getelementptr [0 x float], ptr addrspace(3) @dyn, i32 0, i32 %l
  store volatile float %x, ptr addrspace(3) %sp
  %x2 = fmul float %x, 2.0
  %bp = getelementptr float, ptr addrspace(3) %buf, i32 %l
  store volatile float %x2, ptr addrspace(3) %bp
  call void @llvm.amdgcn.s.barrier()
  %r = sub i32 63, %l
  %rp = getelementptr [0 x float], ptr addrspace(3) @dyn, i32 0, i32 %r
  %v = load volatile float, ptr addrspace(3) %rp
  %rb = getelementptr float, ptr addrspace(3) %buf, i32 %r
  %w = load volatile float, ptr addrspace(3) %rb
  %s = fadd float %v, %w
  %op = getelementptr float, ptr addrspace(1) %out, i32 %gid
  store float %s, ptr addrspace(1) %op
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
"""

B = 256                     # work-items per workgroup
G = 4                       # workgroups
STATIC = 32                 # REV's static LDS


def co(name: str, flags=()) -> bytes:
    return compile_cl(str(RT / name), "gfx1100", flags=tuple(flags)).read_bytes()


def reversed_groups(x: np.ndarray, b: int = B) -> np.ndarray:
    return x.reshape(-1, b)[:, ::-1].reshape(-1)


def rev_expected(x: np.ndarray, shared_mem: int) -> np.ndarray:
    """What REV computes with `shared_mem` bytes of dynamic LDS: the workgroup's LDS is allocated in granules,
    and a lane whose dyn[] element lies outside the allocation reads 0."""
    alloc = -(-(STATIC + shared_mem) // LDS_GRANULE) * LDS_GRANULE
    fits = (alloc - STATIC) // 4                                   # dyn elements inside the allocation
    r = x.reshape(-1, B)[:, ::-1].copy()
    r[:, (B - 1 - np.arange(B)) >= fits] = 0
    return r.reshape(-1)


@pytest.fixture(scope="module", params=[("SIMKFD", "0"), ("SIMKFD", "1"), ("SIMPCI", "0"), ("SIMPCI", "1")],
                ids=lambda p: f"{p[0]}-{'aql' if p[1] == '1' else 'pm4'}")
def qdev(request, tmp_path_factory):
    """A device per interface and compute-queue kind (AMD_AQL=0: PM4, 1: AQL)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AMD_AQL", request.param[1])
    d = open_sim(mp, tmp_path_factory.mktemp("launch"), request.param[0], "gfx1100")
    assert d.queue.kind == ("aql" if request.param[1] == "1" else "compute")
    yield d
    d.close()
    mp.undo()


@pytest.fixture
def dev():
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    yield d
    d.close()


def rev_kernel(dev):
    k = dev.load(amdq.compile(REV, dev.arch))["rev"]
    m = k.meta
    dyn = m.hidden_arg("hidden_dynamic_lds_size")
    assert dyn is not None and dyn.offset - m.hidden_arg("hidden_block_count_x").offset == IMPLICIT_DYN_LDS
    assert k.desc.group_segment_fixed_size == STATIC            # the static array; the external one is dynamic
    return k


def rev_io(dev):
    x = np.arange(G * B, dtype=np.float32) + 1
    return x, dev.upload(x), dev.upload(np.full(G * B, -7, np.float32)), dev.upload(np.full(4, -1, np.int32))


@pytest.mark.parametrize("how", ["call", "bind", "graph"])
def test_shared_mem_gives_dynamic_lds(qdev, how):
    k = rev_kernel(qdev)
    x, X, OUT, INFO = rev_io(qdev)
    if how == "call":
        h = k(OUT, X, INFO, grid=G, block=B, shared_mem=4 * B)
        assert isinstance(h, amdq.Launch)
        h.wait()
    elif how == "bind":
        b = k.bind(OUT, X, INFO, grid=G, block=B, shared_mem=4 * B)
        b.submit().wait()
        b.free()
    else:
        with qdev.capture() as g:
            k(OUT, X, INFO, grid=G, block=B, shared_mem=4 * B)
        g.replay()
        g.wait()
        g.free()
    assert np.array_equal(OUT.numpy(np.float32), reversed_groups(x))
    assert INFO.numpy(np.int32)[0] == 4 * B                       # hidden_dynamic_lds_size


@pytest.mark.parametrize("how", ["call", "bind", "graph"])
def test_without_shared_mem_the_external_array_has_no_lds(qdev, how):
    """The failure shared_mem= exists for: LDS outside the allocation reads 0, so the result is wrong."""
    k = rev_kernel(qdev)
    x, X, OUT, INFO = rev_io(qdev)
    if how == "call":
        k(OUT, X, INFO, grid=G, block=B, wait=True)
    elif how == "bind":
        k.bind(OUT, X, INFO, grid=G, block=B).submit().wait()
    else:
        with qdev.capture() as g:
            k(OUT, X, INFO, grid=G, block=B)
        g.replay()
        g.wait()
    got = OUT.numpy(np.float32)
    assert not np.array_equal(got, reversed_groups(x)) and np.array_equal(got, rev_expected(x, 0))
    assert (got == 0).sum() >= G * B // 2
    assert INFO.numpy(np.int32)[0] == 0


def test_shared_mem_plans_per_size(dev):
    """One kernel launched with two shared_mem sizes and one too small: each launch gets its own LDS size."""
    k = rev_kernel(dev)
    x, X, OUT, INFO = rev_io(dev)
    for nbytes in (4 * B, 8 * B, 4 * B):
        k(OUT, X, INFO, grid=G, block=B, shared_mem=nbytes, wait=True)
        assert np.array_equal(OUT.numpy(np.float32), reversed_groups(x))
        assert INFO.numpy(np.int32)[0] == nbytes
    k(OUT, X, INFO, grid=G, block=B, shared_mem=4 * (B // 4), wait=True)      # most lanes' LDS is missing
    got = OUT.numpy(np.float32)
    assert np.array_equal(got, rev_expected(x, 4 * (B // 4))) and not np.array_equal(got, reversed_groups(x))


@pytest.mark.parametrize("aql", ["0", "1"])
def test_shared_mem_and_lds_arguments_agree(monkeypatch, aql):
    """shared_mem is laid out right after the static LDS (where the external array is), LDS(n) arguments after
    it; hidden_dynamic_lds_size and the group segment count both."""
    monkeypatch.setenv("AMD_AQL", aql)
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    try:
        k = d.load(amdq.compile(BOTH, d.arch))["both"]
        assert k.meta.explicit_args[2].value_kind == "dynamic_shared_pointer"
        b = 64
        x = np.arange(G * b, dtype=np.float32) + 1
        X, OUT = d.upload(x), d.alloc(4 * G * b)
        k(OUT, X, amdq.LDS(4 * b), grid=G, block=b, shared_mem=4 * b, wait=True)
        assert np.array_equal(OUT.numpy(np.float32), 3 * reversed_groups(x, b))
        blob, dyn = k.kernargs((OUT, X, amdq.LDS(4 * b)), (G, 1, 1), (b, 1, 1), 4 * b)
        assert dyn == 8 * b
        assert struct.unpack_from("<I", blob, k.meta.explicit_args[2].offset)[0] == 4 * b     # after shared_mem
        k(OUT, X, amdq.LDS(4 * b), grid=G, block=b, wait=True)        # no shared_mem: both at LDS byte 0
        assert np.array_equal(OUT.numpy(np.float32), 4 * reversed_groups(x, b))
    finally:
        d.close()


def test_shared_mem_checked_against_the_lds_limit(dev):
    k = rev_kernel(dev)
    _, X, OUT, INFO = rev_io(dev)
    before = dev.timeline.value
    limit = dev.target.lds_bytes
    with pytest.raises(LDSLimitExceeded, match=rf"{STATIC} bytes of static LDS \+ {limit} dynamic \(shared_mem={limit}"):
        k(OUT, X, INFO, grid=G, block=B, shared_mem=limit)
    with pytest.raises(LDSLimitExceeded):
        k.bind(OUT, X, INFO, grid=G, block=B, shared_mem=limit)
    with pytest.raises(LDSLimitExceeded):
        with dev.capture():
            k(OUT, X, INFO, grid=G, block=B, shared_mem=limit)
    for bad in (-1, 1.5, "64", None):
        with pytest.raises(InvalidArgument, match="shared_mem"):
            k(OUT, X, INFO, grid=G, block=B, shared_mem=bad)
    assert dev.timeline.value == before
    k(OUT, X, INFO, grid=G, block=B, shared_mem=limit - STATIC, wait=True)      # exactly the limit fits
    assert INFO.numpy(np.int32)[0] == limit - STATIC


# -- block and grid ------------------------------------------------------------------------------------

def test_block_is_required(dev):
    k = dev.load(co("count.cl"))["count"]
    c = dev.upload(np.zeros(1, np.int32))
    before = dev.timeline.value
    with pytest.raises(InvalidArgument, match="block= is required") as e:
        k(c, 1, grid=16)
    assert isinstance(e.value, TypeError) and isinstance(e.value, AmdqError)
    with pytest.raises(InvalidArgument, match="block= is required"):
        k.bind(c, 1, grid=16)
    with pytest.raises(InvalidArgument, match="block= is required"):
        with dev.capture():
            k(c, 1, grid=16)
    assert dev.timeline.value == before


def test_grid_counts_workgroups_and_takes_an_int(dev):
    """4096 elements: grid=16 workgroups of block=256 work-items write every one of them."""
    k = dev.load(compile_cl("vadd.cl", dev.arch).read_bytes())["vadd"]
    n = 4096
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    A, Bb = dev.upload(a), dev.upload(b)
    for grid, block in ((16, 256), ((16,), (256,)), ((16, 1, 1), (256, 1, 1)), (np.int64(16), np.int32(256))):
        C = dev.upload(np.zeros(n, np.float32))
        k(A, Bb, C, 2.0, n, grid=grid, block=block, wait=True)
        assert np.array_equal(C.numpy(np.float32), a + 2.0 * b)
    C = dev.upload(np.zeros(n, np.float32))
    k(A, Bb, C, 2.0, n, grid=16, block=16, wait=True)               # 16 workgroups of 16: 256 elements
    assert np.count_nonzero(C.numpy(np.float32)) == 256
    assert "workgroups" in amdq.Kernel.__call__.__doc__ and "grid=16, block=256" in amdq.Kernel.__call__.__doc__


# -- launch handles ------------------------------------------------------------------------------------

def test_every_launch_returns_a_handle(dev):
    k = dev.load(co("count.cl"))["count"]
    c = dev.upload(np.zeros(1, np.int32))
    h = k(c, 5, grid=1, block=32)
    assert isinstance(h, amdq.Launch) and h.value == dev.timeline.value
    rec = h.wait()
    assert h.done and isinstance(rec, amdq.LaunchRecord) and h.record is rec
    assert rec.kernel == "count" and rec.encode > 0 and rec.submit > 0 and rec.wait >= 0
    assert rec.simulated and rec.gpu is None                          # not timed: no GPU timestamps
    assert set(rec.stages()) == {"encode", "submit", "gpu", "wait"}
    t = k(c, 5, grid=1, block=32, timed=True)
    rt = t.wait()
    assert rt.gpu is not None and rt.gpu > 0 and rt.gpu_start >= rt.extra["host_start"] - 0.005
    w = k(c, 5, grid=1, block=32, wait=True)
    assert w.done and w.record.gpu is not None and w.record.wait > 0
    assert c.numpy(np.int32)[0] == 15
    assert h.wait() is rec and h.wait(timeout_ms=10) is rec            # waiting again: at once, same record


@pytest.mark.parametrize("interface", ["SIMKFD", "SIMPCI"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_handle_of_a_running_launch(monkeypatch, tmp_path, mode, interface):
    """A spinning kernel: not done, no record; released, done becomes true by polling alone (in sync mode too,
    where the simulated GPU runs on the threads that wait: a zero-timeout poll of its events runs a slice)."""
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    d = open_sim(monkeypatch, tmp_path, interface)
    try:
        k = d.load(co("spin.cl"))["spin"]
        flag = d.alloc(4, "gtt")
        flag.write(np.zeros(1, np.int32))
        out = d.upload(np.zeros(1, np.int32))
        h = k(flag, out, grid=1, block=32)
        time.sleep(0.05)
        assert not h.done and h.record is None and h.error is None
        assert "running" in repr(h)
        struct.pack_into("<i", flag.alloc.cpu.mv, 0, 1)
        t = time.monotonic()
        while not h.done:
            assert time.monotonic() - t < 20
            time.sleep(0.001)
        assert h.record is not None and h.wait().kernel == "spin"
        assert out.numpy(np.int32)[0] > 0
    finally:
        d.close()


def test_handle_of_a_faulting_launch_raises_on_wait(dev):
    k = dev.load(co("fault.cl"))["poke"]
    bad = 0x7F00_0000_0000
    h = k(bad, grid=1, block=32)
    with pytest.raises(GPUFault) as e:
        h.wait(timeout_ms=5000)
    assert e.value.address is not None
    assert h.done and h.error is e.value
    with pytest.raises(GPUFault):
        h.wait()                                                      # every wait raises the same error
    assert h.record is not None and h.record.gpu is None
    ok = dev.upload(np.zeros(32, np.int32))
    k(ok, grid=1, block=32).wait()                                    # the next launch runs
    assert (ok.numpy(np.int32) == 1).all()


def test_bound_submit_returns_a_handle(qdev):
    k = qdev.load(co("count.cl"))["count"]
    c = qdev.upload(np.zeros(1, np.int32))
    b = k.bind(c, 2, grid=1, block=32)
    hs = [b.submit() for _ in range(5)]
    assert [h.value for h in hs] == list(range(hs[0].value, hs[0].value + 5))
    qdev.wait(hs[-1])                                                 # dev.wait takes a handle
    rec = hs[-1].wait()
    assert all(h.done for h in hs) and rec.kernel == "count" and rec.submit > 0 and rec.encode == 0
    assert c.numpy(np.int32)[0] == 10
    b.free()
    b.free()                                                          # idempotent
    with pytest.raises(InvalidArgument, match="bound launch was freed"):
        b.submit()


def test_profile_records_handles(dev):
    k = dev.load(co("count.cl"))["count"]
    c = dev.upload(np.zeros(1, np.int32))
    with dev.profile() as p:
        hs = [k(c, 1, grid=1, block=32) for _ in range(3)]
    assert [h.record for h in hs] == p.records and all(r.gpu is not None for r in p.records)
    assert all(r.simulated for r in p.records)
    assert p.summary()["count"]["calls"] == 3


# -- memory ------------------------------------------------------------------------------------------

def test_memory_stats_per_kind(dev):
    s0 = dev.memory_stats()
    assert {"vram", "gtt"} <= set(s0) and all(set(v) == {"live", "cached", "peak"} for v in s0.values())
    assert s0["gtt"]["live"] > 0                                      # rings, signals, kernel arguments
    b = dev.alloc(1 << 20)
    s1 = dev.memory_stats()
    assert s1["vram"]["live"] == s0["vram"]["live"] + (1 << 20)
    assert s1["vram"]["peak"] >= s1["vram"]["live"]
    g = dev.alloc(3 * 4096 + 1, "gtt")
    assert dev.memory_stats()["gtt"]["live"] == s0["gtt"]["live"] + 4 * 4096
    b.free()
    g.free()
    s2 = dev.memory_stats()
    assert s2["vram"]["live"] == s0["vram"]["live"] and s2["vram"]["cached"] >= s0["vram"]["cached"] + (1 << 20)
    assert s2["vram"]["peak"] == s1["vram"]["peak"]
    dev.reset_peak_memory()
    s3 = dev.memory_stats()
    assert all(v["peak"] == v["live"] for v in s3.values())
    c = dev.alloc(1 << 20)                                           # served from the cache: live and peak again
    s4 = dev.memory_stats()
    assert s4["vram"]["live"] == s4["vram"]["peak"] == s3["vram"]["live"] + (1 << 20)
    assert s4["vram"]["cached"] == s3["vram"]["cached"] - (1 << 20)
    c.free()


@pytest.mark.parametrize("aql", ["0", "1"])
def test_scratch_growth_in_the_record_and_profile(monkeypatch, aql):
    monkeypatch.setenv("AMD_AQL", aql)
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    try:
        small = d.load(co("private.cl", flags=("-DN=8",)))["priv"]
        big = d.load(co("private.cl", flags=("-DN=200",)))["priv"]
        n = 64
        idx, out = d.upload(np.arange(n, dtype=np.int32)), d.alloc(4 * n)
        vram0 = d.memory_stats()["vram"]["live"]
        r1 = small(idx, out, grid=1, block=n).wait()
        assert r1.alloc_bytes > 0 and r1.alloc > 0 and r1.sync == 0 and r1.encode >= r1.alloc
        assert r1.alloc_bytes == d.scratch.alloc.size
        assert d.memory_stats()["vram"]["live"] == vram0 + r1.alloc_bytes
        r2 = small(idx, out, grid=1, block=n).wait()
        assert r2.alloc_bytes == 0 and r2.alloc == 0                 # big enough already
        with d.profile() as p:
            small(idx, out, grid=1, block=n)
            big(idx, out, grid=1, block=n)
            big(idx, out, grid=1, block=n)
        grew = p.memory()
        assert [r.kernel for r in grew] == ["priv"] and grew[0] is p.records[1]
        assert grew[0].alloc_bytes == d.scratch.alloc.size > r1.alloc_bytes
        assert p.summary()["priv"]["alloc_bytes"] == grew[0].alloc_bytes
        ev = [e for e in p.trace()["traceEvents"] if e.get("cat") == "memory"]
        assert len(ev) == 1 and ev[0]["args"]["bytes"] == grew[0].alloc_bytes
    finally:
        d.close()


def test_scratch_growth_while_capturing_is_the_nodes(dev):
    k = dev.load(co("private.cl", flags=("-DN=8",)))["priv"]
    n = 64
    idx, out = dev.upload(np.arange(n, dtype=np.int32)), dev.alloc(4 * n)
    with dev.capture() as g:
        node = k(idx, out, grid=1, block=n)
    assert node.grew is not None and node.grew[0] == dev.scratch.alloc.size
    g.replay()
    g.wait()
    assert k(idx, out, grid=1, block=n).wait().alloc_bytes == 0        # not reported twice
    g.free()


def test_scratch_growth_that_waits_for_freed_memory(dev):
    """Scratch that does not fit until memory the GPU still uses is given back: the launch waits for it and its
    record says how long (sync)."""
    small = dev.load(co("private.cl", flags=("-DN=8",)))["priv"]
    big = dev.load(co("private.cl", flags=("-DN=200",)))["priv"]
    spin = dev.load(co("spin.cl"))["spin"]
    n = 64
    idx, out = dev.upload(np.arange(n, dtype=np.int32)), dev.alloc(4 * n)
    small(idx, out, grid=1, block=n).wait()
    flag = dev.alloc(4, "gtt")
    flag.write(np.zeros(1, np.int32))
    spun = dev.alloc(4)
    spin(flag, spun, grid=1, block=32)                                 # keeps the freed scratch pending
    real = dev.allocator.alloc
    calls = []

    def alloc(size, kind="vram", **kw):
        calls.append(size)
        if len(calls) == 1:
            struct.pack_into("<i", flag.alloc.cpu.mv, 0, 1)           # the spinning kernel may end now
            raise OutOfMemory(f"cannot allocate {size} bytes (test)")
        return real(size, kind, **kw)
    dev.allocator.alloc = alloc
    try:
        rec = big(idx, out, grid=1, block=n).wait()
    finally:
        dev.allocator.alloc = real
    assert len(calls) == 2 and rec.alloc_bytes == calls[1] and rec.sync > 0


# -- use after free --------------------------------------------------------------------------------------

def test_use_after_free_names_the_buffer(dev):
    k = dev.load(co("count.cl"))["count"]
    c = dev.upload(np.zeros(1, np.int32))
    other = dev.alloc(64)
    k(c, 1, grid=1, block=32).wait()                                   # the fast path has a plan for it
    addr = c.addr
    b = k.bind(c, 1, grid=1, block=32)
    c.free()
    assert c.freed and "freed" in repr(c)
    named = rf"freed buffer: the 4-byte buffer that was at {addr:#x}"
    for use in (lambda: k(c, 1, grid=1, block=32), lambda: k.bind(c, 1, grid=1, block=32), c.read,
                lambda: c.write(b"\0" * 4), lambda: c.numpy(np.int32), lambda: dev.copy(other, c, 4),
                lambda: dev.copy(c, other, 4), c.free, lambda: c.addr):
        with pytest.raises(InvalidArgument, match=named):
            use()
    with pytest.raises(InvalidArgument, match=named):
        with dev.capture():
            k(c, 1, grid=1, block=32)
    b.free()


def test_handles_after_close():
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    k = d.load(co("count.cl"))["count"]
    c = d.upload(np.zeros(1, np.int32))
    done = k(c, 1, grid=1, block=32)
    rec = done.wait()
    other = k(c, 1, grid=1, block=32)
    d.close()
    assert done.wait() is rec and done.record is rec and "device closed" in repr(done)
    with pytest.raises(amdq.errors.DeviceClosed):
        other.wait()
    with pytest.raises(amdq.errors.DeviceClosed):
        other.done
