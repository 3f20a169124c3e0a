"""Several compute dies (XCCs) behind one gfx942 device (amdq.hw.xcc): the topology reports them, one AQL queue
runs on all of them with the hardware's round-robin split of workgroups, each XCC addresses its own share of
the scratch, a packet completes (and its completion signal is decremented) once, after every XCC finished,
and a fault or hang on one XCC stops the queue and is recovered. Single-die targets are unchanged."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import amdq
from amdq.errors import GPUFault, GPUTimeout
from amdq.hw import aql as A
from amdq.hw import xcc as XCC
from amdq.hw.targets import TARGETS
from amdq.runtime.aql_queue import AQLQueue
from amdq.runtime.pm4_queue import PM4Queue
from amdq.sim.aql import MultiXCCQueue
from clang import compile_cl
from test_aql import barrier_packet, dispatch, idle, sig, signals

SRC = """
#define XCC_ID() (__builtin_amdgcn_s_getreg(20 | (3 << 11)))   /* hwreg(HW_REG_XCC_ID, 0, 4) */
__kernel void where(__global int *xcc, __global int *seen) {
  int wg = get_group_id(0) + get_num_groups(0) * (get_group_id(1) + get_num_groups(1) * get_group_id(2));
  if (get_local_id(0) == 0 && get_local_id(1) == 0 && get_local_id(2) == 0) {
    xcc[wg] = XCC_ID();
    atom_add(&seen[wg], 1);
  }
}
__kernel void put(__global int *out, int v) { out[get_global_id(0)] = v; }
__kernel void poke_on(__global int *out, __global int *bad, int die) {
  if (XCC_ID() == die) bad[get_global_id(0)] = 1;
  else out[get_global_id(0)] = 1;
}
__kernel void hold(__global volatile int *flag, __global int *out, int wg) {
  if (get_group_id(0) == wg) { while (flag[0] == 0) {} }
  out[get_global_id(0)] = 1;
}
__kernel void priv(__global const int *idx, __global int *out, __global int *dies) {
  int i = get_global_id(0);
  volatile int t[64];
  for (int k = 0; k < 64; k++) t[k] = k * i;
  int s = 0;
  for (int k = 0; k < 64; k++) s += t[(idx[i] + k) % 64];
  out[i] = s;
  if (get_local_id(0) == 0) dies[get_group_id(0)] = XCC_ID();
}
"""


def open_dev(monkeypatch, arch: str = "gfx942", aql: str | None = None, timeout_ms: int | None = None,
             mode: str = "sync") -> amdq.Device:
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    if aql is None:
        monkeypatch.delenv("AMD_AQL", raising=False)
    else:
        monkeypatch.setenv("AMD_AQL", aql)
    if timeout_ms:
        monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", str(timeout_ms))
    return amdq.open_device(f"SIMKFD+AMD:{arch}")


@pytest.fixture
def dev(monkeypatch):
    d = open_dev(monkeypatch)
    yield d
    d.close()


def program(dev):
    return dev.load(compile_cl(SRC, dev.arch).read_bytes())


def engine(dev):
    return dev.sim.engines[dev.queue.q.doorbell_off // 8]


def placement(dev, grid) -> tuple[np.ndarray, np.ndarray]:
    """(XCC id, times seen) of every workgroup of one `where` launch of `grid` workgroups of 64 x 1 x 1."""
    n = int(np.prod(grid))
    xcc, seen = dev.upload(np.full(n, -1, np.int32)), dev.upload(np.zeros(n, np.int32))
    program(dev)["where"](xcc, seen, grid=grid, block=(64, 1, 1), wait=True)
    return xcc.numpy(np.int32), seen.numpy(np.int32)


# ---------------------------------------------------------------- facts and topology

def test_partition_facts_match_the_targets():
    for arch, p in XCC.PARTITIONS.items():
        t = TARGETS[arch]
        assert (t.xcc, t.cus, t.ses) == (p.xccs, p.xccs * p.cus_per_xcc, p.xccs * p.ses_per_xcc), arch
    assert all(t.xcc == 1 for a, t in TARGETS.items() if a not in XCC.PARTITIONS)
    assert XCC.share(10, 3, 8).tolist() == [3] and XCC.share(20, 1, 8).tolist() == [1, 9, 17]
    assert XCC.share(5, 0, 1).tolist() == list(range(5)) and XCC.logical_xcc(5, 4, 8) == 1


@pytest.mark.parametrize("arch,n,cus", [("gfx942", 8, 304), ("gfx950", 8, 256), ("gfx1100", 1, 96)])
def test_topology_reports_the_dies(monkeypatch, arch, n, cus):
    """The KFD node says num_xcc; the device reports it, with the CUs of the partition and per XCC."""
    d = open_dev(monkeypatch, arch)
    try:
        assert d.iface.props["num_xcc"] == n == d.xcc
        info = d.info()
        assert (info["num_xcc"], info["compute_units"], info["cus_per_xcc"]) == (n, cus, cus // n)
        assert info["queue"] == ("aql" if n > 1 else "compute")
        eng = engine(d)
        assert isinstance(eng, MultiXCCQueue) == (n > 1)
        if n > 1:                       # the MQD on every XCC, XCC 0 the one that writes the read pointer
            assert [e.xcc for e in eng.xccs] == list(range(n)) and [e.master for e in eng.xccs] == [True] + [False] * 7
            assert {e.chunk for e in eng.xccs} == {XCC.AQL_TG_CHUNK_SIZE}
    finally:
        d.close()


def test_context_save_area_is_per_xcc(dev):
    """The queue's context-save buffer holds one area per XCC; one sized for a single XCC is refused."""
    kfd, props = dev.iface.seam, dev.iface.props
    per = props["cwsr_size"] + props["ctl_stack_size"]
    cwsr = dev.queue.q.extra["cwsr"]
    assert cwsr.size >= XCC.cwsr_bytes(per, 0, 8)
    small = dev.iface.alloc(XCC.cwsr_bytes(per, 0, 1), "gtt")
    ring = dev.iface.alloc(4096, "gtt")
    from amdq.hw import kfd as K
    with pytest.raises(OSError, match="8 XCC"):
        dev.iface.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=ring.va, ring_size=4096, gpu_id=dev.iface.gpu_id,
                        queue_type=K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL, queue_percentage=100, queue_priority=15,
                        write_pointer_address=ring.va, read_pointer_address=ring.va + 8,
                        ctx_save_restore_address=small.va, ctx_save_restore_size=per)
    assert len(kfd.queues) == 2                     # the compute and the copy queue, nothing half-made
    dev.iface.free(small)
    dev.iface.free(ring)


# ---------------------------------------------------------------- the workgroup split

@pytest.mark.parametrize("grid", [(37, 1, 1), (5, 3, 2)])
def test_workgroups_cover_the_grid_once_round_robin(dev, grid):
    """Every workgroup runs once; flat id i (x fastest) runs on the XCC whose logical id is i mod 8, which for
    the device's first queue is XCC i mod 8."""
    xcc, seen = placement(dev, grid)
    assert (seen == 1).all()
    assert (xcc == np.arange(len(xcc)) % 8).all(), xcc


def test_pm4_queue_runs_on_one_xcc(monkeypatch):
    d = open_dev(monkeypatch, aql="0")
    try:
        assert isinstance(d.queue, PM4Queue)
        xcc, seen = placement(d, (20, 1, 1))
        assert (seen == 1).all() and (xcc == 0).all()
    finally:
        d.close()


# ---------------------------------------------------------------- completion

def test_completion_signal_once_after_every_xcc(dev):
    """A dispatch whose workgroup 5 (XCC 5) waits: the other XCCs finish, yet the packet does not complete;
    once it is let go the completion signal is decremented exactly once and the slot released once."""
    q, prg = dev.queue, program(dev)
    flag = dev.allocator.alloc(4096, "gtt", uncached=True)
    flag.cpu.mv[:4] = bytes(4)
    out = dev.upload(np.zeros(8 * 64, np.int32))
    a, (s, b) = signals(dev, 1, 1)
    dispatch(q, prg["hold"], (flag.va, out, 5), grid=(8, 1, 1), signal=s)
    barrier_packet(q, A.HSA_PACKET_TYPE_BARRIER_AND, [s], signal=b)     # AND on the dispatch's signal
    q.ring_doorbell()
    for _ in range(6):
        dev.sim.pump(1024)
    eng = engine(dev)
    assert [e.inflight[0].mine for e in eng.xccs] == [x != 5 for x in range(8)]
    assert sig(a, 0) == 1 and sig(a, 1) == 1 and q.rptr == 0
    struct.pack_into("<i", flag.cpu.mv, 0, 1)
    idle(dev)
    assert sig(a, 0) == 0 and sig(a, 1) == 0 and q.rptr == 2      # not 1 - 8: once, by the master XCC
    assert (out.numpy(np.int32) == 1).all()
    assert all(e.rd == 2 for e in eng.xccs) and not eng.link.parts


def test_launches_in_order_across_xccs(dev):
    """Back-to-back launches writing the same buffer: each one starts after the previous one ended on all XCCs."""
    prg = program(dev)
    out = dev.upload(np.zeros(64 * 16, np.int32))
    for v in range(1, 30):
        prg["put"](out, v, grid=16, block=64)
    dev.synchronize()
    assert (out.numpy(np.int32) == 29).all()


# ---------------------------------------------------------------- scratch

def test_each_xcc_uses_its_own_scratch_share(dev, monkeypatch):
    """A kernel with a private array on all 8 XCCs: correct results; the runtime allocated 8 shares of WAVES
    slots and each XCC's waves addressed its own share."""
    prg = program(dev)
    core = dev.sim.core(dev.iface.seam.vmid)
    bases, start = {}, core.start
    monkeypatch.setattr(core, "start", lambda regs, ids=None: (bases.__setitem__(regs.xcc, regs.scratch_base),
                                                                start(regs, ids))[1])
    n = 64 * 24
    idx = dev.upload(np.arange(n, dtype=np.int32) * 5)
    out, dies = dev.upload(np.zeros(n, np.int32)), dev.upload(np.full(24, -1, np.int32))
    prg["priv"](idx, out, dies, grid=24, block=64, wait=True)
    i = np.arange(n)
    assert (out.numpy(np.int32) == i * (64 * 63 // 2)).all()
    assert (dies.numpy(np.int32) == np.arange(24) % 8).all()
    s = dev.scratch
    tm = A.bits_for(A.COMPUTE_TMPRING_SIZE, 9).decode(A.AMD_QUEUE.unpack(dev.queue.qmv)["compute_tmpring_size"])
    assert s.xcc == 8 and s.waves == tm["WAVES"] == 38 * 32 and s.alloc.size >= 8 * s.share
    assert A.AMD_QUEUE.unpack(dev.queue.qmv)["scratch_resource_descriptor"][2] == s.share
    assert bases == {x: s.base + x * s.share for x in range(8)}


def test_scratch_for_one_xcc_faults_on_the_next(dev, monkeypatch):
    """A runtime that believed the device had one XCC allocates one share: XCC 1's waves address past it, which
    is a GPU fault naming the address (as on hardware), and the queue recovers."""
    from amdq.runtime.device import Device
    monkeypatch.setattr(Device, "xcc", property(lambda self: 1))
    prg = program(dev)
    idx, out, dies = dev.upload(np.zeros(64 * 8, np.int32)), dev.upload(np.zeros(64 * 8, np.int32)), dev.upload(np.zeros(8, np.int32))
    with pytest.raises(GPUFault) as e:
        prg["priv"](idx, out, dies, grid=8, block=64, wait=True)
    s = dev.scratch
    x = e.value.info["xcc"]                 # the XCC that got to its (missing) share first
    assert s.xcc == 1 and x >= 1 and f"on XCC {x}" in str(e.value), str(e.value)
    assert s.alloc.size <= x * s.share <= e.value.address - s.base < (x + 1) * s.share, \
        (hex(e.value.address), hex(s.base), x)
    res = dev.upload(np.zeros(64 * 8, np.int32))
    prg["put"](res, 4, grid=8, block=64, wait=True)       # the reset queue runs the next launch
    assert (res.numpy(np.int32) == 4).all()


# ---------------------------------------------------------------- faults and recovery

@pytest.mark.parametrize("mode", ["sync", "async"])
def test_fault_on_one_xcc_stops_the_queue_and_recovers(monkeypatch, mode):
    """Only XCC 3's waves touch an unmapped page: the launch fails with that fault, every XCC of the queue is
    stopped, and the recreated queue (whose logical XCC ids moved on by one) runs the next launches."""
    dev = open_dev(monkeypatch, mode=mode)
    try:
        _fault_on_one_xcc(dev)
    finally:
        dev.close()


def _fault_on_one_xcc(dev):
    prg = program(dev)
    out = dev.upload(np.zeros(16 * 64, np.int32))
    old = engine(dev)
    with pytest.raises(GPUFault) as e:
        prg["poke_on"](out, 0x7F0000000000, 3, grid=16, block=64, wait=True)
    assert e.value.address is not None and e.value.info["xcc"] == 3 and "on XCC 3" in str(e.value), str(e.value)
    assert old.stopped and all(e.hung for e in old.xccs)          # destroyed: unloaded from every XCC
    new = engine(dev)
    assert new is not old and [e.logical for e in new.xccs] == [(x + 1) % 8 for x in range(8)]
    xcc, seen = placement(dev, (16, 1, 1))
    assert (seen == 1).all() and (xcc == (np.arange(16) - 1) % 8).all(), xcc
    prg["put"](out, 9, grid=16, block=64, wait=True)
    assert (out.numpy(np.int32) == 9).all()


def test_hang_on_gfx942_times_out_and_recovers(monkeypatch):
    d = open_dev(monkeypatch, timeout_ms=150)
    try:
        prg = program(d)
        out = d.upload(np.zeros(64, np.int32))
        d.sim.inject("hang_cp")
        assert all(e.hang_at is not None for e in engine(d).xccs)
        with pytest.raises(GPUTimeout):
            prg["put"](out, 1, grid=1, block=64, wait=True)
        d.sim.clear("hang_cp")
        prg["put"](out, 2, grid=1, block=64, wait=True)
        assert (out.numpy(np.int32) == 2).all()
    finally:
        d.close()


def test_kill_wave_on_gfx942_recovers(dev):
    prg = program(dev)
    out = dev.upload(np.zeros(8 * 64, np.int32))
    dev.sim.inject("kill_wave")
    with pytest.raises(amdq.errors.AmdqError, match="kill"):
        prg["put"](out, 1, grid=8, block=64, wait=True)
    prg["put"](out, 3, grid=8, block=64, wait=True)
    assert (out.numpy(np.int32) == 3).all()
