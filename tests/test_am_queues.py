"""Compute queues bound directly to MEC 1 by the AM driver (GFX.create_queue / destroy_queue) on the simulated
PCI function: PM4 and AQL queues run from the HQD registers the driver programmed, rung through BAR2; the
HQD registers are banked per GRBM_GFX_CNTL slot; dequeue and re-create on the same slot; the doorbell decode
(range, DOORBELL_EN); a halted MEC or a pipe reset runs no queue; a wrong register encoding shows."""
from __future__ import annotations

import struct
import time

import pytest

from amdq.am import mqd as M
from amdq.am.gfx import HQD
from amdq.errors import AMTimeout, DeviceError, InvalidArgument
from amdq.hw import aql as A
from amdq.hw import pm4
from amdq.hw import regs as R
from amdq.hw.aql_pm4 import AMD_AQL_FORMAT_PM4_IB, PM4_IB, PM4_IB_DW_COUNT_REMAIN
from amdq.iface.pci import PCI
from amdq.runtime.pm4_queue import Commands, SHRegs
from amdq.sim.aql import AQLQueue
from amdq.sim.cp import PM4Queue
from amdq.sim.pci.device import SimPCIDevice
from amdq.sim.pci.mec import XCCGroup
from sims import am_env

ARCHS = ("gfx1100", "gfx1201", "gfx942")
RING = 4096
MEM = 1 << 20
MEMORY = pm4.ENUMS["WRITE_DATA"]["DST_SEL"]["MEMORY"]


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    am_env(monkeypatch, tmp_path)


class Rig:
    """A booted simulated function with 1 MiB of VRAM mapped into VM context 0 for rings, MQDs and data."""

    def __init__(self, arch: str, mode: str = "sync"):
        self.dev = SimPCIDevice(arch, mode=mode)
        self.iface = PCI(self.dev, arch, standin=True)
        drv = self.iface.driver
        self.drv, self.am, self.gfx, self.gen = drv, drv.am, drv.blocks["gfx"], drv.target.gfx_version
        self.mem = self.am.boot.reserve("test_am_queues", MEM)
        self.va = drv.blocks["gmc"].map(self.mem.offset, MEM)
        self.am.vram.write(self.mem.offset, bytes(MEM))
        self._next = 0
        self.sim = self.dev.gfx.mec
        self.lo, self.hi = self.gfx.doorbell_range

    def alloc(self, size: int, align: int = 4096) -> tuple[int, int]:
        """(VRAM offset, GPU address) of `size` fresh bytes."""
        self._next = -(-self._next // align) * align
        off, self._next = self._next, self._next + size
        assert self._next <= MEM
        return self.mem.offset + off, self.va + off

    def off(self, va: int) -> int:
        return self.mem.offset + va - self.va

    def read(self, va: int, n: int) -> bytes:
        return self.am.vram.read(self.off(va), n)

    def write(self, va: int, data: bytes) -> None:
        self.am.vram.write(self.off(va), data)

    def u64(self, va: int) -> int:
        return struct.unpack("<Q", self.read(va, 8))[0]

    def ring_bell(self, bell: int, value: int) -> None:
        self.dev.bar(2).write64(bell * 4, value)

    def commands(self) -> Commands:
        return Commands(self.gen, SHRegs(self.drv.target.ip["GC"]))

    def queue(self, aql: bool = False, bell: int | None = None, **kw) -> tuple[HQD, dict]:
        """A bound queue and its buffers (ring, rptr, wptr, and for AQL the amd_queue_t)."""
        ring = self.alloc(RING)[1]
        mqd = self.alloc(self.gfx.mqd_bytes(aql))
        eop = self.alloc(self.gfx.eop_bytes(aql))[1]
        if aql:
            qva = self.alloc(A.AMD_QUEUE.size)[1]
            rd, wr = qva + A.AMD_QUEUE.offsetof("read_dispatch_id"), qva + A.AMD_QUEUE.offsetof("write_dispatch_id")
            self.write(qva, A.AMD_QUEUE.pack(read_dispatch_id_field_base_byte_offset=A.AMD_QUEUE.offsetof(
                "read_dispatch_id")))
        else:
            qva, rd = None, self.alloc(16)[1]
            wr = rd + 8
        bell = self.lo + 6 if bell is None else bell
        q = self.gfx.create_queue(ring, RING, rd, wr, bell, eop, mqd, aql=aql, **kw)
        return q, {"ring": ring, "rptr": rd, "wptr": wr, "queue": qva, "bell": bell, "wp": 0}

    def submit(self, b: dict, dws: list[int]) -> None:
        """Copy PM4 dwords into the ring at the write pointer (wrapping) and ring the doorbell."""
        for d in dws:
            self.write(b["ring"] + (b["wp"] % (RING // 4)) * 4, struct.pack("<I", d))
            b["wp"] += 1
        self.ring_bell(b["bell"], b["wp"])

    def write_and_fence(self, data: int, fence: int, value: int) -> list[int]:
        c = self.commands()
        c.dw += pm4.table(self.gen).encode("WRITE_DATA", shader_type=1, DST_SEL=MEMORY, ADDR=data,
                                           DATA=[value & 0xFFFFFFFF, value >> 32])
        c.release(fence, value)
        return c.dw

    def hqd(self, q: HQD, x: int | None = None) -> dict[str, int]:
        """The HQD registers of the queue's slot on XCC `x` (its first by default), as the simulated MEC holds them."""
        return self.sim.registers(q.xccs[0] if x is None else x, 1, q.pipe, q.queue)

    def close(self) -> None:
        self.iface.close()
        self.dev.close()


@pytest.fixture(params=ARCHS)
def rig(request):
    r = Rig(request.param)
    yield r
    r.close()


def test_pm4_queue_runs_from_the_doorbell(rig):
    q, b = rig.queue()
    eng = rig.dev.gpu.engines[b["bell"]]
    assert isinstance(eng, PM4Queue) and (eng.ring_va, eng.ring_dw * 4) == (b["ring"], RING)
    assert (eng.rptr_va, eng.wptr_va, eng.vmid) == (b["rptr"], b["wptr"], 0)
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    for n in (1, 2):
        rig.submit(b, rig.write_and_fence(data, fence, 0x1111_0000_2222_0000 + n))
        assert rig.u64(data) == rig.u64(fence) == 0x1111_0000_2222_0000 + n
        assert rig.u64(b["rptr"]) == b["wp"]                      # the read pointer reported to RPTR_REPORT_ADDR
    assert rig.hqd(q)["regCP_HQD_ACTIVE"] & 1
    rig.gfx.destroy_queue(q)
    assert b["bell"] not in rig.dev.gpu.engines and not rig.hqd(q)["regCP_HQD_ACTIVE"] & 1
    assert rig.drv.regs.GC.regGRBM_GFX_CNTL.read() == 0           # the select is back at (0, 0, 0)


def test_the_gpu_worker_runs_a_bound_queue():
    """Async mode: the doorbell write returns at once and the GPU's worker thread runs the queue."""
    rig = Rig("gfx1100", mode="async")
    try:
        q, b = rig.queue()
        data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
        for n in range(1, 4):
            rig.submit(b, rig.write_and_fence(data, fence, n))
        end = time.monotonic() + 10
        while rig.u64(fence) != 3 and time.monotonic() < end:
            time.sleep(0.001)
        assert rig.u64(fence) == rig.u64(data) == 3
        rig.gfx.destroy_queue(q)
    finally:
        rig.close()


def _barrier(signal: int, deps: tuple[int, ...] = ()) -> bytes:
    return A.BARRIER_AND.pack(header=A.header(A.HSA_PACKET_TYPE_BARRIER_AND, barrier=1),
                              dep_signal=[{"handle": d} for d in deps], completion_signal={"handle": signal})


def _signal(rig: Rig, value: int) -> int:
    va = rig.alloc(A.AMD_SIGNAL.size, 64)[1]
    rig.write(va, A.AMD_SIGNAL.pack(kind=1, value=value))
    return va


def _signal_value(rig: Rig, va: int) -> int:
    return struct.unpack("<q", rig.read(va + A.AMD_SIGNAL.offsetof("value"), 8))[0]


def test_aql_queue_barriers_and_a_pm4_ib(rig):
    q, b = rig.queue(aql=True)
    n = rig.drv.target.xcc
    assert q.xccs == tuple(range(n))
    eng = rig.dev.gpu.engines[b["bell"]]
    if n == 1:
        assert isinstance(eng, AQLQueue) and eng.slots == RING // A.PACKET_SIZE
    else:                                                         # one HQD per XCC, one queue behind the doorbell
        assert isinstance(eng, XCCGroup) and [e.xcc for e in eng.xccs] == list(range(n))
        assert [e.master for e in eng.xccs] == [True] + [False] * (n - 1)
        assert sorted(e.logical for e in eng.xccs) == list(range(n)) and {e.chunk for e in eng.xccs} == {1}
        assert all(rig.hqd(q, x)["regCP_HQD_ACTIVE"] & 1 for x in range(n))
    done, dep = _signal(rig, 1), _signal(rig, 1)
    rig.write(b["ring"], _barrier(done))
    rig.ring_bell(b["bell"], 0)                                   # AQL doorbell: the index of the last packet
    assert _signal_value(rig, done) == 0 and rig.u64(b["rptr"]) == 1
    assert A.HEADER.decode(struct.unpack("<H", rig.read(b["ring"], 2))[0])["TYPE"] == A.HSA_PACKET_TYPE_INVALID
    # a barrier on a signal not yet satisfied waits; then a PM4 IB (WRITE_DATA) runs after it
    done2, done3 = _signal(rig, 1), _signal(rig, 1)
    rig.write(b["ring"] + 64, _barrier(done2, (dep,)))
    data, ib = rig.alloc(64)[1], rig.alloc(256)[1]
    t = pm4.table(rig.gen)
    body = t.encode("WRITE_DATA", shader_type=1, DST_SEL=MEMORY, ADDR=data, DATA=[0xA11CE])
    rig.write(ib, struct.pack(f"<{len(body)}I", *body))
    cmd = t.encode("INDIRECT_BUFFER", shader_type=1, IB_BASE=ib, IB_SIZE=len(body), VALID=1)
    hdr = A.header(A.HSA_PACKET_TYPE_VENDOR_SPECIFIC, barrier=1) | AMD_AQL_FORMAT_PM4_IB << 16
    pkt = bytearray(PM4_IB.pack(pm4_ib_format=AMD_AQL_FORMAT_PM4_IB, pm4_ib_command=cmd,
                                dw_count_remain=PM4_IB_DW_COUNT_REMAIN, completion_signal={"handle": done3}))
    struct.pack_into("<I", pkt, 0, hdr)
    rig.write(b["ring"] + 128, bytes(pkt))
    rig.ring_bell(b["bell"], 2)
    assert _signal_value(rig, done2) == 1 and rig.u64(b["rptr"]) == 1 and rig.u64(data) == 0
    rig.write(dep + A.AMD_SIGNAL.offsetof("value"), struct.pack("<q", 0))
    rig.dev.gpu.pump()
    assert _signal_value(rig, done2) == 0 and _signal_value(rig, done3) == 0 and rig.u64(b["rptr"]) == 3
    assert struct.unpack("<I", rig.read(data, 4))[0] == 0xA11CE
    rig.gfx.destroy_queue(q)
    assert b["bell"] not in rig.dev.gpu.engines and not any(rig.hqd(q, x)["regCP_HQD_ACTIVE"] & 1 for x in q.xccs)


def test_dequeue_then_recreate_on_the_same_slot(rig):
    q, b = rig.queue()
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    rig.submit(b, rig.write_and_fence(data, fence, 1))
    rig.gfx.destroy_queue(q)
    regs = rig.hqd(q)
    assert not regs["regCP_HQD_ACTIVE"] & 1 and regs["regCP_HQD_PQ_DOORBELL_CONTROL"] == 0
    rig.submit(b, rig.write_and_fence(data, fence, 2))              # nobody behind the doorbell now
    assert rig.u64(fence) == 1
    q2, b2 = rig.queue(queue=q.queue, pipe=q.pipe)                  # the same slot, a new ring
    assert (q2.pipe, q2.queue) == (q.pipe, q.queue) and b2["ring"] != b["ring"]
    rig.submit(b2, rig.write_and_fence(data, fence, 3))
    assert rig.u64(fence) == rig.u64(data) == 3
    with pytest.raises(InvalidArgument, match="not a free slot"):
        rig.queue(queue=q.queue, pipe=q.pipe)
    rig.gfx.destroy_queue(q2)


def test_hqd_registers_are_banked_per_slot_and_equal_the_mqd(rig):
    q0, b0 = rig.queue()
    q1, b1 = rig.queue(bell=rig.lo + 8)
    assert (q0.queue, q1.queue) == (0, 1)
    r0, r1 = rig.hqd(q0), rig.hqd(q1)
    assert r0["regCP_HQD_PQ_BASE"] == (b0["ring"] >> 8) & 0xFFFFFFFF and r1["regCP_HQD_PQ_BASE"] == (b1["ring"] >> 8) & 0xFFFFFFFF
    assert r0["regCP_HQD_PQ_BASE_HI"] == b0["ring"] >> 40
    for q, regs in ((q0, r0), (q1, r1)):                            # the registers the sim runs from = the MQD
        mqd = M.unpack(rig.gen, rig.am.vram.read(q.mqds[0][0], M.recipe(rig.gen).mqd.size))
        assert {reg: regs[reg] for _, reg in M.HQD_IMAGE} == {reg: mqd[f] for f, reg in M.HQD_IMAGE}
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    rig.submit(b1, rig.write_and_fence(data, fence, 11))
    rig.submit(b0, rig.write_and_fence(data + 8, fence + 8, 10))
    assert (rig.u64(fence), rig.u64(fence + 8)) == (11, 10)
    rig.gfx.destroy_queue(q0)
    rig.submit(b1, rig.write_and_fence(data, fence, 12))            # slot 1 is untouched by slot 0's dequeue
    assert rig.u64(fence) == 12


@pytest.mark.parametrize("gfx,gc", [(11, (11, 0, 0)), (12, (12, 0, 0)), (9, (9, 4, 3))])
def test_mqd_register_image_is_in_register_order(gfx, gc):
    """Each HQD_IMAGE field sits as far from cp_mqd_base_addr_lo in the MQD as its register from CP_MQD_BASE_ADDR."""
    t, s = R.load("GC", gc), M.recipe(gfx).mqd
    base_f, base_r = s.offsetof("cp_mqd_base_addr_lo"), t["regCP_MQD_BASE_ADDR"].offset
    for f, reg in M.HQD_IMAGE:
        assert (s.offsetof(f) - base_f) // 4 == t[reg].offset - base_r, (f, reg)


def test_doorbell_outside_the_range_or_disabled_is_not_rung(rig):
    with pytest.raises(InvalidArgument, match="outside MEC 1's doorbell range"):
        rig.queue(bell=rig.hi + 2)
    q, b = rig.queue()
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    gc = rig.drv.regs.GC
    gc.regCP_MEC_DOORBELL_RANGE_UPPER.write(DOORBELL_RANGE_UPPER=b["bell"] - 2)   # the index now outside
    rig.submit(b, rig.write_and_fence(data, fence, 1))
    assert rig.u64(fence) == 0 and rig.u64(b["rptr"]) == 0
    gc.regCP_MEC_DOORBELL_RANGE_UPPER.write(DOORBELL_RANGE_UPPER=rig.hi)
    rig.ring_bell(b["bell"] + 2, b["wp"])                                          # another doorbell: nothing
    assert rig.u64(fence) == 0
    rig.ring_bell(b["bell"], b["wp"])
    assert rig.u64(fence) == 1
    ctl = gc.regGRBM_GFX_CNTL                                                      # DOORBELL_EN off in the slot
    ctl.write(MEID=1, PIPEID=q.pipe, QUEUEID=q.queue)
    gc.regCP_HQD_PQ_DOORBELL_CONTROL.update(DOORBELL_EN=0)
    ctl.write(0)
    rig.submit(b, rig.write_and_fence(data, fence, 2))
    assert rig.u64(fence) == 1
    rig.gfx.destroy_queue(q)


def test_a_halted_mec_runs_no_queue(rig):
    q, b = rig.queue()
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    rig.gfx.fini_hw()                                               # MEC halt: the queue on it is gone
    assert b["bell"] not in rig.dev.gpu.engines and not rig.hqd(q)["regCP_HQD_ACTIVE"] & 1
    rig.submit(b, rig.write_and_fence(data, fence, 1))
    assert rig.u64(fence) == 0
    with pytest.raises(DeviceError, match="regCP_HQD_ACTIVE reads 0"):             # a halted MEC takes no queue
        rig.queue()
    assert not rig.dev.gpu.engines
    rig.gfx.mec_start()
    q2, b2 = rig.queue()
    rig.submit(b2, rig.write_and_fence(data, fence, 2))
    assert rig.u64(fence) == 2
    resets = rig.dev.gfx.mec_resets
    rig.gfx.resume_hw()                                             # MEC pipe reset: the queues are gone
    assert rig.dev.gfx.mec_resets > resets and not rig.dev.gpu.engines and not rig.gfx.hqds
    assert not rig.hqd(q2)["regCP_HQD_ACTIVE"] & 1


def test_wrong_queue_size_encoding_fails(rig, monkeypatch):
    """Packets that wrap around the end of the ring run only if the sim takes the ring size from QUEUE_SIZE."""
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    t = pm4.table(rig.gen)

    def run(b):
        pad = RING // 4 - 3 - b["wp"]                               # a NOP up to 3 dwords before the end
        rig.submit(b, t.encode("NOP", shader_type=1, DATA=[0] * (pad - 1)))
        rig.submit(b, rig.write_and_fence(data, fence, 7))         # this one wraps around
        return rig.u64(fence) == 7

    q, b = rig.queue()
    assert run(b)
    rig.gfx.destroy_queue(q)
    rig.write(fence, bytes(8))
    real = M.compute_mqd

    def wrong(gc, gfx, **kw):                                      # QUEUE_SIZE = log2(dwords), one too many
        v = real(gc, gfx, **kw)
        f = gc["regCP_HQD_PQ_CONTROL"].decode(v["cp_hqd_pq_control"])
        f["QUEUE_SIZE"] += 1
        v["cp_hqd_pq_control"] = gc["regCP_HQD_PQ_CONTROL"].encode(**f)
        return v
    monkeypatch.setattr(M, "compute_mqd", wrong)
    q, b = rig.queue()
    assert rig.dev.gpu.engines[b["bell"]].ring_dw * 4 == 2 * RING
    assert not run(b)
    rig.gfx.destroy_queue(q)


def test_a_hung_queue_does_not_drain(rig):
    """A hung CP takes no dequeue, neither a drain nor a wave reset; the CP's soft reset takes the queue off (and the
    hang with it: a new queue runs)."""
    rig.dev.inject("hang_cp")
    q, b = rig.queue()
    data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
    rig.submit(b, rig.write_and_fence(data, fence, 1))
    assert rig.u64(fence) == 0
    with pytest.raises(AMTimeout, match="regCP_HQD_ACTIVE to drop"):
        rig.gfx.destroy_queue(q)
    assert rig.hqd(q)["regCP_HQD_ACTIVE"] & 1 and rig.drv.regs.GC.regGRBM_GFX_CNTL.read() == 0
    with pytest.raises(AMTimeout, match="regCP_HQD_ACTIVE to drop after regCP_HQD_DEQUEUE_REQUEST=reset waves"):
        rig.gfx.destroy_queue(q, reset=True)
    assert rig.drv.recovery.compute(q, "the test's hang") == []
    assert not rig.hqd(q)["regCP_HQD_ACTIVE"] & 1 and not rig.dev.gpu.engines and not rig.gfx.hqds
    q2, b2 = rig.queue()
    rig.submit(b2, rig.write_and_fence(data, fence, 2))
    assert rig.u64(fence) == 2
    rig.gfx.destroy_queue(q2)
