"""Engine recovery of the AM driver: a compute queue the MEC will not let go of, or an SDMA queue that does not go
idle, is taken off by resetting its engine; the queues the reset took down with it are bound again.

The interface escalates (iface/pci.py `destroy_queue`): a compute queue is dequeued with a drain, then with a wave
reset (GFX.destroy_queue); when even that does not drop CP_HQD_ACTIVE (the CP itself is hung) `Recovery.compute`
soft-resets the CP. An SDMA queue that does not reach CONTEXT_STATUS.IDLE after RB_ENABLE=0 gets its engine reset
(`Recovery.sdma`). A reset that does not bring the engine back raises DeviceLost naming what did not come back;
the interface then refuses further work and the session stays unclean, so the next open boots fully.

SCRATCH_REG6 reads 0 while a recovery runs (written at its start, put back after; a session in progress already
holds 0 there, am/driver.py), so a process that dies half way through leaves an unclean session behind.

Compute, GFX11 (Linux amdgpu `gfx_v11_0.c` gfx_v11_0_soft_reset; `gfx_v12_0.c` has no soft reset of its own, and
GFX12 has the same registers and fields: the GFX11 sequence is used):
  1. RLC safe mode: RLC_SAFE_MODE CMD=1 MESSAGE=1, wait for the RLC to clear CMD (amdgpu goes on if it does not);
  2. CP_INT_CNTL: CMP_BUSY, CNTX_BUSY, CNTX_EMPTY, GFX_IDLE interrupts off;
  3. every bound HQD, under GRBM_GFX_CNTL: CP_HQD_DEQUEUE_REQUEST = 2 (reset waves), SPI_COMPUTE_QUEUE_RESET = 1;
     the select back to 0; their CP_HQD_ACTIVE waited for;
  4. GRBM_SOFT_RESET: SOFT_RESET_CP, _GFX, _CPF, _CPC, _CPG = 1, read back, = 0, read back;
  5. CP_MEC_RS64_CNTL = 0; CP_INT_CNTL as it was; RLC safe mode off (RLC_SAFE_MODE CMD=1 MESSAGE=0);
  6. the MEC started again (GFX.mec_start: program counter, every pipe active) and the queues rebound.
Compute, GFX9 (`gfx_v9_4_3.c` gfx_v9_4_3_soft_reset), on every XCC: the bits from GRBM_STATUS / GRBM_STATUS2
(SOFT_RESET_CP, with SOFT_RESET_GFX when a shader block is busy, SOFT_RESET_RLC when the RLC is); the HQDs dequeued
as in 3; the RLC stopped (RLC_CNTL.RLC_ENABLE_F32 = 0), the MEC halted (CP_MEC_CNTL MEC_ME1_HALT, MEC_ME2_HALT);
GRBM_SOFT_RESET set, read back, cleared, read back; then the RLC started (RLC_ENABLE_F32 = 1), the MEC out of halt
and the queues rebound.
SDMA 6 / 7 (`sdma_v6_0.c` / `sdma_v7_0.c` soft_reset), one engine: its ring stopped (gfx_stop: RB_ENABLE=0,
IB_ENABLE=0), F32_CNTL HALT + TH1_RESET (7: MCU_CNTL HALT + RESET), QUEUE0_PREEMPT = 0, GRBM_SOFT_RESET =
SOFT_RESET_SDMA<n> alone, read back, = 0, read back; then out of halt (sdma_v*_start). SDMA 4.4.2
(`sdma_v4_4_2.c` reset_queue, `amdgpu_sdma.c` amdgpu_sdma_reset_engine, `smu_v13_0_6_ppt.c` reset_sdma): ring
stopped, SDMA_GFX_PREEMPT.IB_PREEMPT = 0, the SMU's ResetSDMA with the instance mask. Either way CONTEXT_STATUS.IDLE
must read 1 after; the interface binds a new queue.

What "came back" means, checked after every reset (else DeviceLost): every bit written 1 to GRBM_SOFT_RESET reads
back 1 (a reset bit that does not take); every HQD the reset was for reads CP_HQD_ACTIVE 0; the MEC leaves halt;
each rebound queue becomes active; the SDMA engine leaves halt and its queue reads idle.

AM choices (not amdgpu's): amdgpu waits for the HQDs to go inactive before the GRBM reset and, when they do not,
gives the soft reset up for a full GPU reset; this driver's full reset is the next open's (mode1) boot, so it
tries the GRBM reset on the HQDs still active and checks afterwards. Only the HQD slots this driver bound are
dequeued (amdgpu walks every MEC pipe and queue; no other agent binds queues to MEC 1 here). The GFX9 sequence
runs on every XCC of the partition (amdgpu's resets XCC 0), as an AQL queue runs on all of them. A rebound queue
starts where its ring was consumed to (the read pointer the MEC last reported), with its MQD's other fields.
Not done: CP_VMID_RESET = 0xfffffffe and the CP_GFX_INDEX_MUTEX around it (the mask spares VMID 0, where every
queue of this driver runs), CP_SOFT_RESET_CNTL.CMP_HQD_REG_RESET (its bit is not in the facts pack; the rebind
writes every HQD register a queue uses), CP_ME_CNTL = 0 (the graphics ME, which this driver never starts), the
graphics HQDs' dequeue, SDMA0_FREEZE (not in the facts pack), amdgpu's ring and IB tests.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

from ..errors import AMTimeout, DeviceError, DeviceLost
from .gfx import DEQUEUE_RESET, HQD



class Driver(Protocol):
    """What recovery uses of the driver core (am/driver.py AMDriver): its blocks, registers, context, and
    where a lost GPU is recorded."""
    blocks: dict
    regs: Any
    am: Any
    lost: "DeviceLost | None"

GFX11_CP_RESET = ("SOFT_RESET_CP", "SOFT_RESET_GFX", "SOFT_RESET_CPF", "SOFT_RESET_CPC", "SOFT_RESET_CPG")
GFX9_SHADER_BUSY = ("PA_BUSY", "SC_BUSY", "BCI_BUSY", "SX_BUSY", "TA_BUSY", "VGT_BUSY", "DB_BUSY", "CB_BUSY",
                    "GDS_BUSY", "SPI_BUSY", "IA_BUSY", "IA_BUSY_NO_DMA")
GFX9_CP_BUSY = ("CP_BUSY", "CP_COHERENCY_BUSY")
CP_INT_OFF = dict(CMP_BUSY_INT_ENABLE=0, CNTX_BUSY_INT_ENABLE=0, CNTX_EMPTY_INT_ENABLE=0, GFX_IDLE_INT_ENABLE=0)
SAFE_MODE_MS = 100.0                # amdgpu usec_timeout
GRBM_SETTLE_S = 50e-6               # amdgpu: udelay(50) after setting and after clearing the reset bits (GFX9)
SDMA_SETTLE_S = 100e-6              # udelay(100) around the SDMA engine's reset


@dataclass
class Reset:
    """One recovery: the engine reset, why, how long it took, the queues bound again after it."""
    engine: str                     # "compute" or "SDMA<n>"
    reason: str
    seconds: float = 0.0
    rebound: int = 0


class Recovery:
    """The engine resets of one booted GPU (`driver`: the AMDriver). `history` lists every reset done."""

    def __init__(self, driver: Driver):
        self.drv = driver
        self.am = driver.am
        self.history: list[Reset] = []

    # -- compute ------------------------------------------------------------------------------------
    def compute(self, drop: HQD | None, why: str, resume: Callable[[HQD], int] | None = None) -> list[HQD]:
        """Soft-reset the CP of every XCC: every bound queue comes off (`drop`, the one that would not, stays off),
        the MEC starts again and the other queues are bound again from their MQDs with their pointers at
        `resume(q)` (dwords; 0 when not given). The rebound queues are returned (ring their doorbells with the
        write pointer to let them go on). DeviceLost when the CP does not come back."""
        gfx = self.drv.blocks["gfx"]
        rec = Reset("compute", why)
        t0 = time.perf_counter()
        bound = gfx.queues()
        keep = [q for q in bound if q is not drop]
        self.am.log(1, f"recovery: CP soft reset ({why}); {len(keep)} other queue(s) to bind again")
        with self._unclean(), self._lost("the compute engine (CP/MEC)"):
            for x, gc in enumerate(gfx._xccs()):
                mine = [q for q in bound if x in q.xccs]
                if gfx.gfx == 9:
                    self._cp_reset_gfx9(gfx, x, gc, mine, drop)
                else:
                    self._cp_reset_gfx11(gfx, x, gc, mine, drop)
            gfx.hqds.clear()
            gfx.mec_start()
            self._check_off(gfx, bound)
            for q in keep:
                gfx.reload(q, resume(q) if resume is not None else 0)
        rec.seconds, rec.rebound = time.perf_counter() - t0, len(keep)
        self.history.append(rec)
        return keep

    def _cp_reset_gfx11(self, gfx, x: int, gc, mine: Sequence[HQD], drop: HQD | None) -> None:
        """gfx_v11_0_soft_reset on one XCC (steps 1-5 of the module doc)."""
        self._safe_mode(gc, x, True)
        int_cntl = gc.regCP_INT_CNTL.read()
        gc.regCP_INT_CNTL.update(**CP_INT_OFF)
        self._dequeue(gfx, x, gc, mine, drop)
        self._grbm_pulse(gc, f"XCC {x} CP", GFX11_CP_RESET)
        gc.regCP_MEC_RS64_CNTL.write(0)
        gc.regCP_INT_CNTL.write(int_cntl)
        self._safe_mode(gc, x, False)

    def _cp_reset_gfx9(self, gfx, x: int, gc, mine: Sequence[HQD], drop: HQD | None) -> None:
        """gfx_v9_4_3_soft_reset on one XCC: the RLC and the MEC stopped around the GRBM reset, then started."""
        status, status2 = gc.regGRBM_STATUS.read_fields(), gc.regGRBM_STATUS2.read_fields()
        bits = ["SOFT_RESET_CP"]                        # the CP did not let go of a queue: it is reset in any case
        if any(status[b] for b in GFX9_SHADER_BUSY):
            bits.append("SOFT_RESET_GFX")
        if status2["RLC_BUSY"]:
            bits.append("SOFT_RESET_RLC")
        self._dequeue(gfx, x, gc, mine, drop)
        gc.regRLC_CNTL.update(RLC_ENABLE_F32=0)
        gc.regCP_MEC_CNTL.update(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
        self._grbm_pulse(gc, f"XCC {x} CP", bits, settle=GRBM_SETTLE_S)
        time.sleep(GRBM_SETTLE_S)                       # "Wait a little for things to settle down"
        gc.regRLC_CNTL.update(RLC_ENABLE_F32=1)
        if not gc.regRLC_CNTL.read_fields()["RLC_ENABLE_F32"]:
            raise DeviceLost(f"XCC {x}: the RLC did not start again after the CP soft reset "
                             f"({gc.regRLC_CNTL.qualname}.RLC_ENABLE_F32 reads 0)")

    def _dequeue(self, gfx, x: int, gc, mine: Sequence[HQD], drop: HQD | None) -> None:
        """Every HQD of `mine` on XCC `x`: DEQUEUE_REQUEST = reset waves, SPI_COMPUTE_QUEUE_RESET; then a bounded
        wait for their CP_HQD_ACTIVE (but `drop`'s, which did not take a wave reset already); the GRBM reset
        follows either way."""
        for q in mine:
            with gfx._select(gc, q.pipe, q.queue):
                gc.regCP_HQD_DEQUEUE_REQUEST.write(DEQUEUE_REQ=DEQUEUE_RESET)
                gc.regSPI_COMPUTE_QUEUE_RESET.write(RESET=1)
        others = [q for q in mine if q is not drop]
        if not others:
            return
        try:
            self.am.wait(lambda: not self._active(gfx, gc, x, others), gfx.dequeue_ms,
                         f"the HQDs of XCC {x} to drop CP_HQD_ACTIVE after a wave-reset dequeue")
        except AMTimeout as e:
            self.am.log(1, f"recovery: {e}; the GRBM soft reset takes them off")

    def _active(self, gfx, gc, x: int, queues: Sequence[HQD]) -> list[HQD]:
        out = []
        for q in queues:
            with gfx._select(gc, q.pipe, q.queue):
                if gc.regCP_HQD_ACTIVE.read() & 1:
                    out.append(q)
        return out

    def _check_off(self, gfx, bound: Sequence[HQD]) -> None:
        for x, gc in enumerate(gfx._xccs()):
            left = self._active(gfx, gc, x, [q for q in bound if x in q.xccs])
            if left:
                q = left[0]
                raise DeviceLost(f"XCC {x}: MEC 1 pipe {q.pipe} queue {q.queue} still reads "
                                 f"{gc.regCP_HQD_ACTIVE.qualname} = 1 after the GRBM soft reset: the queue did not come off")

    def _safe_mode(self, gc, x: int, on: bool) -> None:
        """RLC safe mode on (CMD=1 MESSAGE=1, then wait for CMD to clear) or off (CMD=1 MESSAGE=0)."""
        reg = gc.regRLC_SAFE_MODE
        reg.write(CMD=1, MESSAGE=1 if on else 0)
        if not on:
            return
        try:
            self.am.wait(lambda: not reg.read_fields()["CMD"], SAFE_MODE_MS, f"{reg.qualname}.CMD to clear (XCC {x})")
        except AMTimeout as e:
            self.am.log(1, f"recovery: {e}; going on (as amdgpu does)")

    # -- SDMA -----------------------------------------------------------------------------------------
    def sdma(self, engine: int, why: str) -> None:
        """Reset SDMA engine `engine` (its queue 0 is gone after; bind a new one). DeviceLost when the engine does
        not come back."""
        blk = self.drv.blocks["sdma"]
        rec = Reset(f"SDMA{engine}", why)
        t0 = time.perf_counter()
        self.am.log(1, f"recovery: SDMA{engine} reset ({why})")
        with self._unclean(), self._lost(f"SDMA{engine}"):
            blk._stop(engine)
            if blk.major == 4:
                self._sdma_reset_smu(blk, engine)
            else:
                self._sdma_reset_grbm(blk, engine)
            status = blk._q(engine, "CONTEXT_STATUS")
            self.am.wait(lambda: status.read_fields()["IDLE"] == 1, blk.idle_timeout_ms,
                         f"{status.qualname}.IDLE after the engine's reset")
            blk.queues.pop((engine, 0), None)
        rec.seconds = time.perf_counter() - t0
        self.history.append(rec)

    def _sdma_reset_grbm(self, blk, e: int) -> None:
        """sdma_v6_0 / sdma_v7_0 soft_reset for engine `e`."""
        gc = self.drv.regs.GC
        if blk.major == 6:
            ctl, held = gc[f"regSDMA{e}_F32_CNTL"], {"HALT": 1, "TH1_RESET": 1}
        else:
            ctl, held = gc[f"regSDMA{e}_MCU_CNTL"], {"HALT": 1, "RESET": 1}
        ctl.update(**held)
        blk._q(e, "PREEMPT").write(0)
        time.sleep(SDMA_SETTLE_S)
        self._grbm_pulse(gc, f"SDMA{e}", (f"SOFT_RESET_SDMA{e}",), alone=True, settle=SDMA_SETTLE_S)
        time.sleep(SDMA_SETTLE_S)
        ctl.update(**{k: 0 for k in held})
        if ctl.read_fields()["HALT"]:
            raise DeviceLost(f"SDMA{e} stayed halted after its soft reset ({ctl.qualname}.HALT reads 1)")

    def _sdma_reset_smu(self, blk, e: int) -> None:
        """SDMA 4.4.2: the PMFW resets the instance (amdgpu_dpm_reset_sdma)."""
        smu = self.drv.blocks["smu"]
        if "ResetSDMA" not in smu.table.msg:
            raise DeviceLost(f"SDMA{e} is hung and the SMU {'.'.join(map(str, smu.table.version))} has no ResetSDMA "
                             f"message to reset it")
        blk._q(e, "PREEMPT").update(IB_PREEMPT=0)
        smu.send("ResetSDMA", 1 << e)
        time.sleep(GRBM_SETTLE_S)

    # -- shared -----------------------------------------------------------------------------------------
    def _grbm_pulse(self, gc, what: str, bits: Sequence[str], alone: bool = False, settle: float = 0.0) -> None:
        """GRBM_SOFT_RESET: `bits` set (with the others kept, or `alone`), read back, cleared, read back.
        DeviceLost if a bit does not read back set: the reset did not take."""
        reg = gc.regGRBM_SOFT_RESET
        if alone:
            reg.write(**{b: 1 for b in bits})
        else:
            reg.update(**{b: 1 for b in bits})
        got = reg.read_fields()
        missed = [b for b in bits if not got[b]]
        if missed:
            raise DeviceLost(f"{what}: the soft reset did not take ({reg.qualname} reads {', '.join(missed)} = 0 "
                             f"after writing 1)")
        if settle:
            time.sleep(settle)
        if alone:
            reg.write(0)
        else:
            reg.update(**{b: 0 for b in bits})
        reg.read()

    @contextmanager
    def _unclean(self) -> Iterator[None]:
        """SCRATCH_REG6 = 0 for the recovery; its value back once the engine is back (not when it is lost)."""
        reg = self.drv.regs.GC.regSCRATCH_REG6
        before = reg.read()
        reg.write(0)
        yield
        reg.write(before)

    @contextmanager
    def _lost(self, engine: str) -> Iterator[None]:
        """A reset that fails in any way is a lost device, named after `engine`; the driver is marked lost."""
        try:
            yield
        except (AMTimeout, DeviceError) as e:           # DeviceLost (a DeviceError) too: named after the engine
            self.drv.lost = DeviceLost(f"{engine} did not come back from its reset: {e}")
            raise self.drv.lost from e


__all__ = ["Recovery", "Reset"]
