"""The GFX block of the AM driver, compute only: the RLC (started by the PSP's autoload on GFX11/12, by the
driver on GFX9) and the MEC (compute micro-engine) out of halt; on a partial boot a MEC reset; compute queues
bound directly to MEC 1 (no MES, no KIQ): `create_queue` / `destroy_queue`.

Sources (facts, not code): Linux amdgpu `gfx_v11_0.c` / `gfx_v12_0.c` (wait for RLC_RLCS_BOOTLOAD_STATUS
BOOTLOAD_COMPLETE after the PSP autoload; RS64 MEC program counter start from the firmware's
ucode_start_addr, CP_MEC_RS64_CNTL halt / pipe reset / pipe active), `gfx_v9_4_3.c` (per XCC: RLC_CNTL
RLC_ENABLE_F32 to start the RLC, CP_MEC_CNTL ME1/ME2 halt and pipe resets), NOTES 2.6.

Binding a queue is the KIQ's own recipe (`gfx_v11_0_kiq_init_register`, `gfx_v12_0_kiq_init_register`,
`gfx_v9_4_3_xcc_kiq_init_register` per XCC) applied to our queue, under GRBM_GFX_CNTL selecting (me 1, pipe,
queue), the select restored to 0 after (`soc21_grbm_select` / `soc24_grbm_select` / `soc15_grbm_select`):
WPTR polling off; EOP base and control; doorbell control; a queue still active dequeued first; MQD base and
control; PQ base and control; read-pointer report and write-pointer poll addresses; the MEC doorbell range;
doorbell control again; write pointer; VMID; persistent state; then what the KIQ recipe leaves at reset values
and kfd's `hqd_load_v11` copies from the MQD too (IB control, priorities, quantum, AQL control); CP_HQD_ACTIVE;
CP_PQ_STATUS.DOORBELL_ENABLE. Every value written comes from the MQD (amdq.am.mqd), so the MQD in memory and
the HQD registers agree. Dequeue (`hqd_destroy_v11`, `gfx_v9_4_3_xcc_q_fini_register`): CP_HQD_DEQUEUE_REQUEST
(1 drain, 2 reset waves), wait for CP_HQD_ACTIVE to drop (amdgpu's 100 ms, or AMDQ_WAIT_TIMEOUT_MS if shorter),
DEQUEUE_REQUEST back to 0, the pointers and doorbell control cleared. A queue that takes neither dequeue is for
the CP's soft reset (am/recovery.py), after which `reload` binds the other queues again from their MQDs.

AM choices (not amdgpu's): on a multi-XCC GPU an AQL queue is loaded on every XCC of the partition (as kfd's
init_mqd_v9_4_3 does), each XCC with its own MQD (`mqd.stride` apart) and EOP buffer (`hpd_bytes` apart), and
each XCC's MEC doorbell range is the same window (amdgpu gives each XCC its own window for its kernel rings; a
queue on several XCCs needs its one doorbell inside every XCC's window). A PM4 queue runs on one XCC.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ..errors import AMBootError, DeviceError, InvalidArgument
from . import mqd as M
from .ip import IPBlock

RLC_AUTOLOAD_MS = 1000
MEC_ME = 1                         # GRBM_GFX_CNTL.MEID of MEC 1 (0 is the graphics ME)
QUEUES_PER_PIPE = 8                # HQD slots per MEC pipe (amdgpu num_queue_per_pipe)
DEQUEUE_MS = 100.0                 # amdgpu: usec_timeout polls of 1 us
DEQUEUE_DRAIN, DEQUEUE_RESET = 1, 2    # CP_HQD_DEQUEUE_REQUEST.DEQUEUE_REQ: drain the pipe / reset the waves
ALIGN = {"ring_va": 256, "eop_va": 256, "mqd": 256, "rptr_va": 8, "wptr_va": 8}


@dataclass
class HQD:
    """A compute queue bound to MEC 1 pipe `pipe` queue `queue` on XCCs `xccs`."""
    aql: bool
    pipe: int
    queue: int
    xccs: tuple[int, ...]
    doorbell: int                  # dword index in the doorbell BAR
    ring_va: int
    ring_bytes: int
    rptr_va: int
    wptr_va: int
    eop_va: int
    mqds: tuple[tuple[int, int], ...]      # (VRAM offset, GPU address) of each XCC's MQD
    values: list[dict[str, int]] = field(default_factory=list)    # each XCC's MQD fields

    @property
    def me(self) -> int:
        return MEC_ME


class GFX(IPBlock):
    """RLC and MEC; queues come later (part 2)."""
    name = "gfx"

    def init_sw(self) -> None:
        t = self.am.target
        self.gfx = t.gfx_version
        self.hqds: dict[tuple[int, int, int], HQD] = {}     # (xcc, pipe, queue) -> the queue bound there
        self._logical_start = 0                               # kfd's current_logical_xcc_start
        self.dequeue_ms = min(DEQUEUE_MS, float(os.environ.get("AMDQ_WAIT_TIMEOUT_MS") or DEQUEUE_MS))
        gc = "gc_{}_{}_{}".format(*t.ip["GC"])
        self.mec = self.am.firmware(f"{gc}_mec.bin")
        self.am.firmware(f"{gc}_rlc.bin")

    def _xccs(self):
        return [self.am.regs.xcc(i).GC for i in range(max(1, self.am.regs.num_xcc))]

    # -- full boot --------------------------------------------------------------------------------------
    def init_hw(self) -> None:
        if self.gfx == 9:
            for i, gc in enumerate(self._xccs()):
                gc.regRLC_CNTL.update(RLC_ENABLE_F32=1)
                if not gc.regRLC_CNTL.read_fields()["RLC_ENABLE_F32"]:
                    raise AMBootError(f"XCC {i}: the RLC did not start (GC.regRLC_CNTL.RLC_ENABLE_F32 reads 0): "
                                      f"the PSP has not loaded RLC_G")
        else:
            st = self.am.regs.GC.regRLC_RLCS_BOOTLOAD_STATUS
            self.am.wait(lambda: st.read_fields()["BOOTLOAD_COMPLETE"] == 1, RLC_AUTOLOAD_MS,
                         "the RLC autoload (GC.regRLC_RLCS_BOOTLOAD_STATUS.BOOTLOAD_COMPLETE) after the PSP loaded "
                         "the RLC and IMU firmware")
        self.mec_start()

    def mec_start(self) -> None:
        """Program counter from the MEC firmware (RS64), every pipe out of reset, the MEC out of halt."""
        for i, gc in enumerate(self._xccs()):
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(0)
                halted = gc.regCP_MEC_CNTL.read_fields()
                if halted["MEC_ME1_HALT"] or halted["MEC_ME2_HALT"]:
                    raise AMBootError(f"XCC {i}: the MEC stayed halted (GC.regCP_MEC_CNTL): the PSP has not loaded "
                                      f"its firmware (CP_MEC)")
                continue
            start = self.mec.ucode_start_addr
            if start is not None:
                gc.regCP_MEC_RS64_PRGRM_CNTR_START.write(start >> 2 & 0xFFFFFFFF)
            gc.regCP_MEC_RS64_CNTL.write(MEC_PIPE0_ACTIVE=1, MEC_PIPE1_ACTIVE=1, MEC_PIPE2_ACTIVE=1,
                                         MEC_PIPE3_ACTIVE=1)
            if gc.regCP_MEC_RS64_CNTL.read_fields()["MEC_HALT"]:
                raise AMBootError("the MEC stayed halted (GC.regCP_MEC_RS64_CNTL.MEC_HALT reads 1): the RLC autoload "
                                  "did not bring up its firmware (RS64_MEC)")

    # -- the GPU clock ----------------------------------------------------------------------------------
    def gpu_clock(self) -> int:
        """The RLC's 64-bit reference clock counter (100 MHz): captured, then read (gfx_v9_4_3 / gfx_v11_0
        get_gpu_clock_counter's RLC capture form)."""
        gc = self.am.regs.GC
        gc.regRLC_CAPTURE_GPU_CLOCK_COUNT.write(1)
        return gc.regRLC_GPU_CLOCK_COUNT_LSB.read() | gc.regRLC_GPU_CLOCK_COUNT_MSB.read() << 32

    # -- partial boot -------------------------------------------------------------------------------------
    def resume_hw(self) -> None:
        """MEC reset: halt, every pipe in reset (the queues of the last session are gone), then start again."""
        self.hqds.clear()
        for gc in self._xccs():
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1, MEC_ME1_PIPE0_RESET=1, MEC_ME1_PIPE1_RESET=1,
                                        MEC_ME1_PIPE2_RESET=1, MEC_ME1_PIPE3_RESET=1)
            else:
                gc.regCP_MEC_RS64_CNTL.write(MEC_HALT=1, MEC_PIPE0_RESET=1, MEC_PIPE1_RESET=1, MEC_PIPE2_RESET=1,
                                             MEC_PIPE3_RESET=1)
        self.mec_start()

    def fini_hw(self) -> None:
        self.hqds.clear()                                   # a halted MEC runs no queue
        for gc in self._xccs():
            if self.gfx == 9:
                gc.regCP_MEC_CNTL.write(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
            else:
                gc.regCP_MEC_RS64_CNTL.write(MEC_HALT=1)

    # -- compute queues bound directly to MEC 1 ---------------------------------------------------------
    @property
    def doorbell_range(self) -> tuple[int, int]:
        """(lowest, highest) doorbell dword index MEC 1 accepts (CP_MEC_DOORBELL_RANGE_LOWER/UPPER)."""
        return M.recipe(self.gfx).doorbell_range

    def mqd_bytes(self, aql: bool = False) -> int:
        """Bytes of MQD memory a queue needs (one page-aligned MQD per XCC it is loaded on)."""
        return M.stride(self.gfx) * len(self._queue_xccs(aql, None))

    def eop_bytes(self, aql: bool = False) -> int:
        """Bytes of EOP buffer a queue needs (GFXn_MEC_HPD_SIZE per XCC it is loaded on)."""
        return M.recipe(self.gfx).hpd_bytes * len(self._queue_xccs(aql, None))

    def _queue_xccs(self, aql: bool, xccs: Sequence[int] | None) -> tuple[int, ...]:
        n = max(1, self.am.regs.num_xcc)
        if xccs is None:
            return tuple(range(n)) if aql else (0,)
        xccs = tuple(sorted(set(xccs)))
        if not xccs or not all(0 <= x < n for x in xccs):
            raise InvalidArgument(f"xccs {xccs}: this GPU has XCCs 0..{n - 1}")
        if aql and n > 1 and len(xccs) != n:
            raise InvalidArgument(f"an AQL queue runs on every XCC of the partition ({n}), not on {xccs}: each XCC "
                                  f"runs its share of every dispatch")
        if not aql and len(xccs) != 1:
            raise InvalidArgument(f"a PM4 queue runs on one XCC, not on {xccs}")
        return xccs

    def create_queue(self, ring_va: int, ring_bytes: int, rptr_va: int, wptr_va: int, doorbell: int, eop_va: int,
                     mqd: tuple[int, int], *, aql: bool = False, pipe: int = 0, queue: int | None = None,
                     xccs: Sequence[int] | None = None, vmid: int = 0) -> HQD:
        """Bind a compute queue to MEC 1 `pipe` / `queue` (the first free slot of the pipe when None).

        ring_va / ring_bytes: the ring (GPU address, 256-byte aligned; a power of two of at least 256 bytes);
        rptr_va / wptr_va: where the MEC reports the read pointer and polls the write pointer (AQL: the
        amd_queue_t's read_dispatch_id / write_dispatch_id); doorbell: the dword index in the doorbell BAR,
        inside `doorbell_range` (a PM4 queue is rung with the write pointer in dwords, an AQL queue with the
        index of the last packet written); eop_va: the EOP buffer (`eop_bytes(aql)`); mqd: (VRAM offset, GPU
        address) of `mqd_bytes(aql)` bytes for the MQD(s); xccs: where the queue runs (default: XCC 0 for PM4,
        every XCC for AQL); vmid: the queue's VM context. Every address is one the MEC uses in `vmid` (the MQD
        in VMID 0). Raises InvalidArgument for a bad argument or a busy slot, DeviceError when the MEC does not
        take the queue (it is halted or its firmware is not running)."""
        xccs = self._queue_xccs(aql, xccs)
        self._check(ring_va=ring_va, eop_va=eop_va, mqd=mqd[1], rptr_va=rptr_va, wptr_va=wptr_va)
        if ring_bytes < 256 or ring_bytes & (ring_bytes - 1):
            raise InvalidArgument(f"ring size {ring_bytes:#x}: a queue's ring is a power of two of at least 256 bytes")
        lo, hi = self.doorbell_range
        if not lo <= doorbell <= hi:
            raise InvalidArgument(f"doorbell {doorbell:#x} is outside MEC 1's doorbell range {lo:#x}..{hi:#x} "
                                  f"(CP_MEC_DOORBELL_RANGE_LOWER/UPPER): the MEC would not see it")
        if not 0 <= pipe < 4:
            raise InvalidArgument(f"MEC pipe {pipe}: MEC 1 has pipes 0..3")
        queue = self._free_queue(pipe, xccs) if queue is None else queue
        if not 0 <= queue < QUEUES_PER_PIPE or any((x, pipe, queue) in self.hqds for x in xccs):
            raise InvalidArgument(f"MEC 1 pipe {pipe} queue {queue} is not a free slot (0..{QUEUES_PER_PIPE - 1})")
        r = M.recipe(self.gfx)
        step, multi = M.stride(self.gfx), len(xccs) > 1
        q = HQD(aql, pipe, queue, xccs, doorbell, ring_va, ring_bytes, rptr_va, wptr_va, eop_va,
                tuple((mqd[0] + i * step, mqd[1] + i * step) for i in range(len(xccs))))
        for i, x in enumerate(xccs):
            gc = self.am.regs.xcc(x).GC
            v = M.compute_mqd(gc, self.gfx, mqd_va=q.mqds[i][1], ring_va=ring_va, ring_bytes=ring_bytes,
                              rptr_va=rptr_va, wptr_va=wptr_va, eop_va=eop_va + i * r.hpd_bytes, doorbell=doorbell,
                              aql=aql, vmid=vmid, logical_xcc=(self._logical_start + i) % len(xccs),
                              tg_chunk=1 if aql and multi else 0, master=(i == 0) if aql and multi else None,
                              pm4_xcc=x, mqd_stride=step if multi else 0)
            self.am.vram.write(q.mqds[i][0], M.pack(self.gfx, v))
            q.values.append(v)
        try:
            for i, x in enumerate(xccs):
                self.hqds[(x, pipe, queue)] = q
                self._load(x, q, q.values[i])
        except BaseException:
            self.destroy_queue(q, reset=True)           # no half-bound queue: the XCCs already loaded let go
            raise
        if aql:
            self._logical_start += 1
        self.am.log(2, f"gfx: {'AQL' if aql else 'PM4'} queue on MEC 1 pipe {pipe} queue {queue} (XCC "
                       f"{','.join(map(str, xccs))}), ring {ring_va:#x}+{ring_bytes:#x}, doorbell {doorbell:#x}")
        return q

    def destroy_queue(self, q: HQD, reset: bool = False) -> None:
        """Dequeue `q` on every XCC (drain its pipe, or reset its waves when `reset`), then clear its HQD
        registers. AMTimeout, naming the register, if CP_HQD_ACTIVE does not drop in time (a hung queue does not
        drain: destroy it again with reset=True)."""
        for x in q.xccs:
            if self.hqds.get((x, q.pipe, q.queue)) is not q:
                continue
            gc = self.am.regs.xcc(x).GC
            with self._select(gc, q.pipe, q.queue):
                self._dequeue(gc, x, DEQUEUE_RESET if reset else DEQUEUE_DRAIN)
                for reg in ("regCP_HQD_IQ_TIMER", "regCP_HQD_IB_CONTROL", "regCP_HQD_PQ_DOORBELL_CONTROL",
                            "regCP_HQD_PQ_RPTR", "regCP_HQD_PQ_WPTR_HI", "regCP_HQD_PQ_WPTR_LO"):
                    gc[reg].write(0)
            del self.hqds[(x, q.pipe, q.queue)]

    def queues(self) -> list[HQD]:
        """The queues bound now (a queue on several XCCs once)."""
        return list({id(q): q for q in self.hqds.values()}.values())

    def reload(self, q: HQD, resume: int) -> None:
        """Bind `q` again, after a reset took it off its slots, from its MQD with the read and write pointers at
        `resume` (dwords: where its ring was consumed to), as kfd's hqd_load restores a queue (\"WPTR==RPTR before
        starting the poll so the CP starts fetching new commands from the right place\"); its doorbell then
        makes it fetch the rest."""
        ring_dw = q.ring_bytes // 4
        for i, x in enumerate(q.xccs):
            if (x, q.pipe, q.queue) in self.hqds:
                raise InvalidArgument(f"MEC 1 pipe {q.pipe} queue {q.queue} (XCC {x}) is bound already")
            v = q.values[i]
            v.update(cp_hqd_pq_rptr=resume % ring_dw, cp_hqd_pq_wptr_lo=resume & 0xFFFFFFFF,
                     cp_hqd_pq_wptr_hi=resume >> 32 & 0xFFFFFFFF)
            self.am.vram.write(q.mqds[i][0], M.pack(self.gfx, v))
        for i, x in enumerate(q.xccs):
            self.hqds[(x, q.pipe, q.queue)] = q
            self._load(x, q, q.values[i])

    # the hardware sequences
    @contextmanager
    def _select(self, gc, pipe: int, queue: int) -> Iterator[None]:
        """GRBM_GFX_CNTL selects MEC 1 `pipe` `queue` (its HQD registers) for the block; back to 0 after."""
        gc.regGRBM_GFX_CNTL.write(MEID=MEC_ME, PIPEID=pipe, QUEUEID=queue, VMID=0)
        try:
            yield
        finally:
            gc.regGRBM_GFX_CNTL.write(0)

    def _load(self, x: int, q: HQD, v: dict[str, int]) -> None:
        """The KIQ register recipe for one XCC's HQD, from its MQD fields `v`."""
        gc = self.am.regs.xcc(x).GC
        w = lambda *fields: [gc[M.REGISTER_OF[f]].write(v[f]) for f in fields]       # noqa: E731
        lo, hi = self.doorbell_range
        with self._select(gc, q.pipe, q.queue):
            if "regCP_PQ_WPTR_POLL_CNTL" in gc:
                gc.regCP_PQ_WPTR_POLL_CNTL.update(EN=0)
            w("cp_hqd_eop_base_addr_lo", "cp_hqd_eop_base_addr_hi", "cp_hqd_eop_control")
            w("cp_hqd_pq_doorbell_control")
            if gc.regCP_HQD_ACTIVE.read() & 1:
                self._dequeue(gc, x, DEQUEUE_DRAIN)
                w("cp_hqd_dequeue_request", "cp_hqd_pq_rptr", "cp_hqd_pq_wptr_lo", "cp_hqd_pq_wptr_hi")
            w("cp_mqd_base_addr_lo", "cp_mqd_base_addr_hi", "cp_mqd_control")
            w("cp_hqd_pq_base_lo", "cp_hqd_pq_base_hi", "cp_hqd_pq_control")
            w("cp_hqd_pq_rptr_report_addr_lo", "cp_hqd_pq_rptr_report_addr_hi")
            w("cp_hqd_pq_wptr_poll_addr_lo", "cp_hqd_pq_wptr_poll_addr_hi")
            gc.regCP_MEC_DOORBELL_RANGE_LOWER.write(DOORBELL_RANGE_LOWER=lo)
            gc.regCP_MEC_DOORBELL_RANGE_UPPER.write(DOORBELL_RANGE_UPPER=hi)
            w("cp_hqd_pq_doorbell_control")
            w("cp_hqd_pq_wptr_lo", "cp_hqd_pq_wptr_hi")
            w("cp_hqd_vmid", "cp_hqd_persistent_state")
            w("cp_hqd_ib_control", "cp_hqd_pipe_priority", "cp_hqd_queue_priority", "cp_hqd_quantum",
              "cp_hqd_aql_control")
            w("cp_hqd_active")
            if not gc.regCP_HQD_ACTIVE.read() & 1:
                raise DeviceError(f"XCC {x}: MEC 1 pipe {q.pipe} queue {q.queue} did not become active "
                                  f"({gc.regCP_HQD_ACTIVE.qualname} reads 0 after writing 1): the MEC is halted or "
                                  f"its pipe is in reset")
            if "regCP_PQ_STATUS" in gc:
                gc.regCP_PQ_STATUS.update(DOORBELL_ENABLE=1)

    def _dequeue(self, gc, x: int, kind: int) -> None:
        """Dequeue the selected HQD if active: DEQUEUE_REQUEST, wait for CP_HQD_ACTIVE to drop, request back to 0."""
        active = gc.regCP_HQD_ACTIVE
        if not active.read() & 1:
            return
        gc.regCP_HQD_DEQUEUE_REQUEST.write(DEQUEUE_REQ=kind)
        try:
            self.am.wait(lambda: not active.read() & 1, self.dequeue_ms,
                         f"{active.qualname} to drop after {gc.regCP_HQD_DEQUEUE_REQUEST.name}="
                         f"{'reset waves' if kind == DEQUEUE_RESET else 'drain'} (XCC {x})")
        finally:
            gc.regCP_HQD_DEQUEUE_REQUEST.write(0)

    def _free_queue(self, pipe: int, xccs: tuple[int, ...]) -> int:
        for n in range(QUEUES_PER_PIPE):
            if not any((x, pipe, n) in self.hqds for x in xccs):
                return n
        raise InvalidArgument(f"MEC 1 pipe {pipe} has no free queue slot (all {QUEUES_PER_PIPE} are bound)")

    @staticmethod
    def _check(**addrs: int) -> None:
        for name, va in addrs.items():
            if va % ALIGN[name]:
                raise InvalidArgument(f"{name} {va:#x} is not {ALIGN[name]}-byte aligned")
