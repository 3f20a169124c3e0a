"""The AQL compute queue (AMD_AQL=1): the shader-kernel suite through it, then packet-level behaviour of the
simulated packet processor (barrier bit, INVALID headers, completion signals, barrier packets, vendor PM4
packets, ring wrap, scratch in amd_queue_t, hung dispatches) and a multi-die gfx942 device, where AQL is
the default."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import amdq
import device_harness
import test_shader_kernels as suite
from amdq.errors import GPUTimeout
from amdq.hw import aql as A
from amdq.runtime.aql_queue import AQLQueue
from clang import compile_cl
from sims import DEVICES, device_id, open_sim
from test_shader_kernels import *  # noqa: F401,F403  (the suite's test functions, collected here again)


@pytest.fixture(autouse=True)
def _through_aql(monkeypatch):
    monkeypatch.setenv("AMD_AQL", "1")
    monkeypatch.setattr(suite, "run_cl", lambda *a, **k: device_harness.run_cl(*a, spec_suffix="aql", **k))


SRC = """
__kernel void busy(__global int *out, int n) {
  int s = 0;
  for (int k = 0; k < n; k++) s = s * 3 + k;
  out[get_global_id(0)] = s;
}
__kernel void put(__global int *out, int v) { out[get_global_id(0)] = v; }
__kernel void add(__global int *out, int v) { out[get_global_id(0)] += v; }
__kernel void wait_flag(__global volatile int *flag, __global int *out) {
  while (flag[0] == 0) {}
  out[get_global_id(0)] = 1;
}
__kernel void priv_small(__global const int *idx, __global int *out) {
  volatile int t[16];
  int i = get_global_id(0);
  for (int k = 0; k < 16; k++) t[k] = i + k;
  out[i] = t[idx[i] & 15];
}
__kernel void priv_big(__global const int *idx, __global int *out) {
  volatile int t[300];
  int i = get_global_id(0);
  for (int k = 0; k < 300; k++) t[k] = i * k;
  out[i] = t[idx[i] % 300];
}
"""


def open_aql(monkeypatch, arch: str = "gfx1100", ring_bytes: int | None = None, interface: str = "SIMKFD",
             tmp_path=None) -> amdq.Device:
    monkeypatch.setenv("AMDQ_SIM_MODE", "sync")
    if ring_bytes:
        monkeypatch.setenv("AMDQ_RING_BYTES", str(ring_bytes))
    dev = open_sim(monkeypatch, tmp_path, interface, arch)
    assert isinstance(dev.queue, AQLQueue)
    return dev


@pytest.fixture(params=DEVICES, ids=device_id)
def dev(request, monkeypatch, tmp_path):
    iface, arch = request.param
    d = open_aql(monkeypatch, arch, interface=iface, tmp_path=tmp_path)
    yield d
    d.close()


def queue_engine(dev, q):
    """The simulated engine behind the queue's doorbell (on several XCCs: XCC 0's)."""
    bell = q.q.extra.get("doorbell", q.q.doorbell_off // 8)      # SIMPCI: the dword index; KFD: 8-byte slots
    eng = dev.sim.engines[bell]
    return getattr(eng, "xccs", [eng])[0]


def program(dev):
    return dev.load(compile_cl(SRC, dev.arch).read_bytes())


def signals(dev, *values: int, mailbox: bool = False):
    """amd_signal_t objects (64 bytes each) with these values; with `mailbox`, the device's event mailbox."""
    a = dev.allocator.alloc(4096, "gtt", uncached=True)
    a.cpu.mv[:] = bytes(len(a.cpu.mv))
    for k, v in enumerate(values):
        f = {"kind": A.AMD_SIGNAL_KIND_USER, "value": v}
        if mailbox:
            f.update(event_mailbox_ptr=dev.iface.mailbox_va, event_id=dev.iface.signal_event)
        A.AMD_SIGNAL.pack_into(a.cpu.mv, 64 * k, **f)
    return a, [a.va + 64 * k for k in range(len(values))]


def sig(a, k: int, field: str = "value") -> int:
    return A.AMD_SIGNAL.unpack(a.cpu.mv, 64 * k)[field]


def dispatch(q: AQLQueue, kernel, args, grid=(1, 1, 1), block=(64, 1, 1), signal: int = 0, barrier: bool = True,
             header: bool = True) -> int:
    """Write one kernel-dispatch packet by hand (no doorbell); returns its index."""
    p = q.plan(kernel, args, grid, block)
    ka, off = q.dev.kernargs.take(p.size)
    kernel.pack_into(p, args, q.dev.kernargs.mv, off)
    pkt = bytearray(p.pkt)
    struct.pack_into("<Q", pkt, 40, ka)
    struct.pack_into("<Q", pkt, 56, signal)
    i = q.reserve(1)
    q.write(i, pkt, p.hdr if barrier else p.hdr & ~(1 << A.HSA_PACKET_HEADER_BARRIER))
    if not header:
        q.write(i, pkt, A.header(A.HSA_PACKET_TYPE_INVALID))
    return i


def barrier_packet(q: AQLQueue, kind: int, deps: list[int], signal: int = 0) -> int:
    raw = bytearray(A.BARRIER_AND.pack(dep_signal=[{"handle": h} for h in deps], completion_signal={"handle": signal}))
    i = q.reserve(1)
    q.write(i, raw, A.header(kind, 1))
    return i


def idle(dev) -> None:
    assert dev.sim.wait_idle(20)


# ---------------------------------------------------------------- packet processor

def test_queue_descriptor(dev):
    """amd_queue_t: the KFD queue's pointers are its dispatch ids, and the CP finds it from the read pointer."""
    q = dev.queue
    f = A.AMD_QUEUE.unpack(q.qmv)
    assert f["read_dispatch_id_field_base_byte_offset"] == A.AMD_QUEUE.offsetof("read_dispatch_id")
    assert f["hsa_queue"]["base_address"] == q.q.ring.va and f["hsa_queue"]["size"] == q.slots
    eng = queue_engine(dev, q)
    assert eng.rptr_va == q.qmem.va + 128 and eng.wptr_va == q.qmem.va + 56
    k = program(dev)["put"]
    out = dev.upload(np.zeros(64, np.int32))
    k(out, 5, grid=1, block=64, wait=True)
    assert eng.queue_va == q.qmem.va and (out.numpy(np.int32) == 5).all()
    f = A.AMD_QUEUE.unpack(q.qmv)
    # the dispatch (its completion signal the timestamp slot: profiling is on), the timeline signal's vendor packet
    assert f["queue_properties"] & A.AMD_QUEUE_PROPERTIES_ENABLE_PROFILING
    assert f["read_dispatch_id"] == f["write_dispatch_id"] == q.wid == 2
    hdrs = np.frombuffer(q.mv, np.uint16)[::32]
    assert (hdrs == A.header(A.HSA_PACKET_TYPE_INVALID)).all()                # released slots are INVALID again


def test_timed_launch_is_timed_by_its_dispatch_signal(dev):
    """A timed launch names its timestamp slot as the dispatch's completion signal: the packet processor writes its
    start_ts/end_ts because the queue has profiling enabled (with the bit cleared nothing is written there)."""
    q, k = dev.queue, program(dev)["busy"]
    out = dev.upload(np.zeros(64, np.int32))
    rec = k(out, 300, grid=1, block=64, wait=True).record
    first = out.numpy(np.int32).copy()
    assert rec.gpu is not None and rec.gpu > 0
    ts = rec.extra["ts"]
    start, end = struct.unpack_from("<QQ", dev.ts_alloc.cpu.mv, dev.ts_addr(ts) - dev.ts_alloc.va)
    assert 0 < start < end
    q.qmv[A.AMD_QUEUE.offsetof("queue_properties")] &= ~A.AMD_QUEUE_PROPERTIES_ENABLE_PROFILING
    q.qmem.cpu.wrote(0, A.AMD_QUEUE.size)
    rec = k(out, 300, grid=1, block=64, wait=True).record
    assert rec.gpu == 0.0                                  # (a slot of the zeroed table: nothing wrote it)
    assert (out.numpy(np.int32) == first).all()


def test_barrier_bit_orders_dispatches(dev):
    """Without the barrier bit a dispatch starts while the one before still runs; with it, after it ended."""
    q, prg = dev.queue, program(dev)
    q.qmv[180] |= A.AMD_QUEUE_PROPERTIES_ENABLE_PROFILING
    out = dev.upload(np.zeros(128, np.int32))
    for barrier in (False, True):
        a, (sa, sb) = signals(dev, 1, 1)
        dispatch(q, prg["busy"], (out, 400), signal=sa)
        dispatch(q, prg["put"], (out, 7), signal=sb, barrier=barrier)
        q.ring_doorbell()
        idle(dev)
        assert sig(a, 0) == 0 and sig(a, 1) == 0
        a_end, b_start, b_end = sig(a, 0, "end_ts"), sig(a, 1, "start_ts"), sig(a, 1, "end_ts")
        assert sig(a, 0, "start_ts") <= b_start
        if barrier:
            assert b_start >= a_end
        else:
            assert b_start < a_end and b_end <= a_end          # the short one overtook the long one
        dev.allocator.free(a)
    assert (out.numpy(np.int32)[:64] == 7).all()


def test_invalid_header_waits(dev):
    """A slot the doorbell covers but whose header is still INVALID stops the packet processor there."""
    q, k = dev.queue, program(dev)["put"]
    out = dev.upload(np.zeros(64, np.int32))
    a, (s,) = signals(dev, 1)
    i = dispatch(q, k, (out, 3), signal=s, header=False)
    q.ring_doorbell()
    dev.sim.pump()
    assert q.rptr == i and sig(a, 0) == 1 and q.describe()["packet"].startswith("INVALID")
    dispatch(q, k, (out, 4))                        # a later packet cannot pass it either
    q.ring_doorbell()
    dev.sim.pump()
    assert q.rptr == i and (out.numpy(np.int32) == 0).all()
    p = q.plan(k, (out, 3), (1, 1, 1), (64, 1, 1))
    q.write(i, bytes(q.mv[(i % q.slots) * 64:(i % q.slots + 1) * 64]), p.hdr)   # now the header
    idle(dev)
    assert q.rptr == i + 2 and sig(a, 0) == 0 and (out.numpy(np.int32) == 4).all()


@pytest.fixture
def kfd_dev(monkeypatch, tmp_path):
    d = open_aql(monkeypatch, tmp_path=tmp_path)
    yield d
    d.close()


def test_completion_signal_and_event(kfd_dev):
    """The completion signal is decremented; one with an event mailbox gets its event id and interrupt (the
    KFD event page and the simulated kernel driver's event)."""
    dev = kfd_dev
    q, k = dev.queue, program(dev)["put"]
    out = dev.upload(np.zeros(64, np.int32))
    a, (s0, s1) = signals(dev, 3, 1, mailbox=True)
    struct.pack_into("<Q", dev.iface.event_page.cpu.mv, 8 * dev.iface.signal_slot, 0)
    dev.iface.wait_events(0)                        # clear a pending event
    dispatch(q, k, (out, 1), signal=s0)
    dispatch(q, k, (out, 2), grid=(1, 1, 1), signal=s1)
    q.ring_doorbell()
    idle(dev)
    assert sig(a, 0) == 2 and sig(a, 1) == 0
    assert struct.unpack_from("<Q", dev.iface.event_page.cpu.mv, 8 * dev.iface.signal_slot)[0] == dev.iface.signal_event
    kfd = dev.iface.seam
    assert kfd.events[dev.iface.signal_event].signaled


def test_barrier_and_or_packets(dev):
    """BARRIER_AND waits for all its signals to reach 0, BARRIER_OR for one; later barrier-bit packets wait too."""
    q, k = dev.queue, program(dev)["put"]
    out = dev.upload(np.zeros(64, np.int32))
    a, (d0, d1, done) = signals(dev, 1, 1, 1)
    barrier_packet(q, A.HSA_PACKET_TYPE_BARRIER_AND, [d0, d1], signal=done)
    dispatch(q, k, (out, 9))
    q.ring_doorbell()
    dev.sim.pump()
    assert "BARRIER_AND" in q.describe()["packet"] and sig(a, 2) == 1
    A.AMD_SIGNAL.pack_into(a.cpu.mv, 0, value=0)
    dev.sim.pump()
    assert sig(a, 2) == 1 and (out.numpy(np.int32) == 0).all()        # one of two is not enough
    A.AMD_SIGNAL.pack_into(a.cpu.mv, 64, value=0)
    idle(dev)
    assert sig(a, 2) == 0 and (out.numpy(np.int32) == 9).all()
    b, (e0, e1) = signals(dev, 1, 1)
    barrier_packet(q, A.HSA_PACKET_TYPE_BARRIER_OR, [e0, e1])
    dispatch(q, k, (out, 10))
    q.ring_doorbell()
    dev.sim.pump()
    assert (out.numpy(np.int32) == 9).all()
    A.AMD_SIGNAL.pack_into(b.cpu.mv, 64, value=0)
    idle(dev)
    assert (out.numpy(np.int32) == 10).all()


def test_vendor_pm4_packets(dev):
    """PM4 in vendor-specific packets: WRITE_DATA runs, WAIT_REG_MEM blocks the queue (and describe() shows
    the PM4 inside the packet) until memory says go; a longer PM4 stream goes through kernel-argument space."""
    q = dev.queue
    m = dev.allocator.alloc(4096, "gtt", uncached=True)
    m.cpu.mv[:16] = bytes(16)
    c = q.commands()
    c.packet("WRITE_DATA", DST_SEL=5, ADDR=m.va + 8, DATA=[0x1234, 0x5678])
    q.submit(c.dw)
    idle(dev)
    assert struct.unpack_from("<II", m.cpu.mv, 8) == (0x1234, 0x5678)
    q.submit(q.commands().wait(m.va, 5).dw)
    c = q.commands()
    for k in range(6):                                  # 30 dwords: more than the slot's own IB holds
        c.packet("WRITE_DATA", DST_SEL=5, ADDR=m.va + 16 + 4 * k, DATA=[k + 1])
    q.submit(c.dw)
    dev.sim.pump()
    d = q.describe()
    assert "VENDOR_SPECIFIC PM4_IB" in d["packet"] and "WAIT_REG_MEM" in d["packet"], d
    assert struct.unpack_from("<I", m.cpu.mv, 16)[0] == 0
    struct.pack_into("<I", m.cpu.mv, 0, 5)
    idle(dev)
    assert struct.unpack_from("<6I", m.cpu.mv, 16) == (1, 2, 3, 4, 5, 6)
    dev.allocator.free(m)


def test_bad_vendor_pm4_faults_naming_the_packet(dev):
    """PM4 the executor cannot decode, inside a vendor packet: the queue faults and says which AQL packet."""
    q = dev.queue
    q.submit(q.commands().dw + [0x12345678])            # a type-0 PM4 header
    dev.sim.pump()
    eng = queue_engine(dev, q)
    assert eng.fault is not None and "AQL packet 0" in eng.fault.reason and "PM4_IB" in eng.fault.reason, eng.fault


def test_ring_wraps_in_slots(monkeypatch):
    """Thousands of launches through a 64-slot ring: the write index wraps many times, results stay right."""
    dev = open_aql(monkeypatch, ring_bytes=4096)
    try:
        q, prg = dev.queue, program(dev)
        assert q.slots == 64
        out = dev.upload(np.zeros(32, np.int32))
        k = prg["add"]
        for _ in range(1500):
            k(out, 1, grid=1, block=32)
        k(out, 2, grid=1, block=32, wait=True)          # timed: the dispatch signal carries the timestamps
        assert q.wid > 40 * q.slots and q.rptr == q.wid
        assert (out.numpy(np.int32) == 1502).all()
    finally:
        dev.close()


def test_packet_pairs_across_the_ring_end(monkeypatch):
    """A launch's two packets (dispatch, signal) are written as one pair; a one-packet submission now and then leaves
    the pair straddling the ring's end, where it is written slot by slot: fresh, timed and bound launches, right
    results, every slot released."""
    dev = open_aql(monkeypatch, ring_bytes=4096)
    try:
        q, prg = dev.queue, program(dev)
        out = dev.upload(np.zeros(32, np.int32))
        k = prg["add"]
        bound = k.bind(out, 3, grid=1, block=32)
        straddled = {"timed": 0, "bound": 0, "fresh": 0}
        for n in range(600):
            kind = ("one", "bound", "timed", "fresh")[n % 4]      # seven slots a round: every pair straddles in turn
            if kind in straddled:
                straddled[kind] += q.wid % q.slots == q.slots - 1
            if kind == "one":
                q.submit(q.commands().packet("NOP").dw)            # one vendor packet
            elif kind == "timed":
                k(out, 1, grid=1, block=32, timed=True)
            elif kind == "bound":
                bound.submit()
            else:
                k(out, 1, grid=1, block=32)
        dev.synchronize()
        assert sum(straddled.values()) > 5 and all(straddled.values()), straddled
        assert q.rptr == q.wid
        assert (out.numpy(np.int32) == 150 * (3 + 1 + 1)).all()
        bound.free()
    finally:
        dev.close()


def test_scratch_growth_updates_queue_descriptor(dev):
    """A kernel with more private memory grows scratch: amd_queue_t gets the new base, TMPRING and V#."""
    q, prg = dev.queue, program(dev)
    f = A.AMD_QUEUE.unpack(q.qmv)
    assert f["compute_tmpring_size"] == 0 and f["scratch_backing_memory_location"] == 0
    idx = dev.upload(np.arange(64, dtype=np.int32) * 7)
    out = dev.upload(np.zeros(64, np.int32))
    prg["priv_small"](idx, out, grid=1, block=64, wait=True)
    i = np.arange(64)
    assert (out.numpy(np.int32) == i + (i * 7) % 16).all()
    f1 = A.AMD_QUEUE.unpack(q.qmv)
    assert f1["scratch_backing_memory_location"] == dev.scratch.base
    assert f1["compute_tmpring_size"] == dev.scratch.tmpring
    assert f1["scratch_resource_descriptor"][0] == dev.scratch.base & 0xFFFFFFFF
    prg["priv_big"](idx, out, grid=1, block=64, wait=True)
    assert (out.numpy(np.int32) == i * ((i * 7) % 300)).all()
    f2 = A.AMD_QUEUE.unpack(q.qmv)
    tm = A.bits_for(A.COMPUTE_TMPRING_SIZE, dev.target.gfx_version)
    assert f2["scratch_backing_memory_location"] == dev.scratch.base != f1["scratch_backing_memory_location"]
    assert tm.decode(f2["compute_tmpring_size"])["WAVESIZE"] > tm.decode(f1["compute_tmpring_size"])["WAVESIZE"]
    assert f2["scratch_wave64_lane_byte_size"] * 64 == dev.scratch.wave_bytes


def test_scratch_shortfall_faults(dev):
    """The CP checks private_segment_size against the queue's scratch: too little is a fault naming the packet."""
    q, k = dev.queue, program(dev)["priv_small"]
    idx, out = dev.upload(np.zeros(64, np.int32)), dev.upload(np.zeros(64, np.int32))
    dispatch(q, k, (idx, out))                          # no scratch_for: the descriptor still says 0 bytes
    q.ring_doorbell()
    dev.sim.pump()
    eng = queue_engine(dev, q)
    assert eng.fault is not None and "scratch" in eng.fault.reason and "AQL packet 0" in eng.fault.reason


def test_hung_kernel_times_out_naming_the_packet(dev):
    q, prg = dev.queue, program(dev)
    flag, out = dev.allocator.alloc(4096, "gtt", uncached=True), dev.upload(np.zeros(64, np.int32))
    flag.cpu.mv[:4] = bytes(4)
    with pytest.raises(GPUTimeout) as e:
        prg["wait_flag"](flag.va, out, grid=1, block=64, wait=True, timeout_ms=200)
    msg = str(e.value)
    assert "AQL packet 0" in msg and "KERNEL_DISPATCH" in msg and "wait_flag" in msg, msg
    struct.pack_into("<i", flag.cpu.mv, 0, 1)             # too late: the reset killed its waves
    with pytest.raises(GPUTimeout):                        # waits on the lost work keep its error
        dev.synchronize()
    assert (out.numpy(np.int32) == 0).all()
    prg["wait_flag"](flag.va, out, grid=1, block=64, wait=True)    # the reset queue runs the next launch
    assert (out.numpy(np.int32) == 1).all()


def test_bound_launch_and_describe(dev):
    q, k = dev.queue, program(dev)["add"]
    out = dev.upload(np.zeros(64, np.int32))
    b = k.bind(out, 2, grid=1, block=64)
    for _ in range(5):
        v = b.submit()
    dev.wait(v)
    assert (out.numpy(np.int32) == 10).all()
    b.free()
    assert "idle" in q.describe()["stuck"]
    i = q.reserve(1)
    q.release(i, q.timeline.value)                      # not rung: still readable at the read index
    d = q.describe()["packet"]
    assert d.startswith("VENDOR_SPECIFIC PM4_IB(barrier=1") and "RELEASE_MEM" in d, d
    q.ring_doorbell()
    idle(dev)


# ---------------------------------------------------------------- gfx942: wave64, multi-die, AQL by default

@pytest.mark.parametrize("env,aql", [(None, True), ("0", False), ("1", True)])
def test_queue_choice(env, aql, monkeypatch):
    """AQL is the default on multi-die targets; AMD_AQL=0 forces PM4 there, AMD_AQL=1 picks AQL anywhere."""
    from amdq.runtime.device import use_aql
    from amdq.hw.targets import get_target
    if env is None:
        monkeypatch.delenv("AMD_AQL")
    else:
        monkeypatch.setenv("AMD_AQL", env)
    assert use_aql(get_target("gfx942")) is aql and use_aql(get_target("gfx950")) is aql
    assert use_aql(get_target("gfx1100")) is (env == "1")


def test_gfx942_dispatch_state(monkeypatch):
    """On gfx942 the packet processor turns a dispatch packet into wave64 dispatch state: workgroups from a
    grid in work-items (a partial last one), user SGPRs from the descriptor, LDS from group_segment_size."""
    monkeypatch.delenv("AMD_AQL")
    d = open_aql(monkeypatch, "gfx942")
    try:
        k = d.load(compile_cl("vadd.cl", "gfx942").read_bytes())["vadd"]
        seen = []
        core = d.sim.core(d.iface.seam.vmid)
        start = core.start
        monkeypatch.setattr(core, "start", lambda regs, ids=None: (seen.append((regs, ids)), start(regs, ids))[1])
        q = d.queue
        bufs = [d.upload(np.zeros(1024, np.float32)) for _ in range(3)]
        dispatch(q, k, (*bufs, 1.5, 1000), grid=(4, 1, 1), block=(256, 1, 1))
        o = (q.wid - 1) % q.slots * 64
        struct.pack_into("<I", q.mv, o + 12, 1000)     # grid_size_x in work-items: the last workgroup is partial
        q.ring_doorbell()
        d.sim.pump(64)
        r = seen[0][0]
        # every XCC that has a workgroup got the same grid state, and the four workgroups once between them
        assert sorted(int(i) for _, ids in seen for i in ids) == [0, 1, 2, 3]
        assert len({x.xcc for x, _ in seen}) == 4 and all(x.grid == r.grid for x, _ in seen)
        ka = struct.unpack_from("<Q", q.mv, o + 40)[0]
        assert r.wave64 and r.gfx == 9 and r.grid == (4, 1, 1) and r.block == (256, 1, 1) and r.partial == (232, 0, 0)
        assert r.user_data[:2] == [ka & 0xFFFFFFFF, ka >> 32] and r.pgm_addr == k.addr
        assert r.lds_bytes == 0 and r.rsrc1 == k.desc.compute_pgm_rsrc1
    finally:
        d.close()


GFX942 = ["test_vadd_partial", "test_grid3d", "test_lds_reduce", "test_scratch_array", "test_atomics_global"]


@pytest.mark.parametrize("name", GFX942)
def test_gfx942_kernels(name, monkeypatch):
    """A few suite kernels on gfx942 through its default (AQL) queue."""
    import inspect
    monkeypatch.delenv("AMD_AQL")
    spec = "SIMKFD+AMD:gfx942"

    def run(*a, **k):
        dev = device_harness.device(spec, "gfx942")
        assert isinstance(dev.queue, AQLQueue)
        return device_harness.run_cl(*a, spec=spec, spec_suffix="gfx942", **{**k, "arch": "gfx942", "flags": ()})
    monkeypatch.setattr(suite, "run_cl", run)
    fn = getattr(suite, name)
    fn(**{p: {"wave": 64}[p] for p in inspect.signature(fn).parameters})
