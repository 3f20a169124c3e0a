"""The SDMA block of the AM driver: the engines out of halt once the PSP loaded their firmware, the UTCL1 set
up; on a partial boot halted and started again; queue 0 of an engine bound through its registers.

    sdma = driver.blocks["sdma"]
    q = sdma.create_queue(ring_va, ring_bytes, rptr_va, wptr_va, doorbell_index)   # engine 0, queue 0
    ...  # packets in the ring, the write pointer (bytes) in the 64-bit doorbell `doorbell_index` of BAR2
    sdma.destroy_queue(q)

Addresses are GPU virtual addresses of VM context 0 (RB_VMID 0; GMC.map gives them). Pointers count bytes
and only grow; the engine writes its read pointer (64 bits) back at `rptr_va` after every packet.

The binding sequences (sources: Linux amdgpu, facts only):
* SDMA 6 (gfx11) / 7 (gfx12), `sdma_v6_0.c` / `sdma_v7_0.c` `gfx_resume_instance`: RB_CNTL {RB_SIZE =
  log2(ring_bytes / 4), RB_PRIV}; RB_RPTR/RB_RPTR_HI/RB_WPTR/RB_WPTR_HI = 0; RB_WPTR_POLL_ADDR_LO/HI;
  RB_RPTR_ADDR_HI/LO; RB_CNTL {RPTR_WRITEBACK_ENABLE, WPTR_POLL_ENABLE=0, F32/MCU_WPTR_POLL_ENABLE=1} (kept for
  the enable write); RB_BASE = va >> 8, RB_BASE_HI = va >> 40; MINOR_PTR_UPDATE=1; RB_WPTR/_HI = 0;
  DOORBELL.ENABLE=1, DOORBELL_OFFSET.OFFSET = doorbell; engine 0 only: the NBIO SDMA doorbell range (all
  engines' doorbells); MINOR_PTR_UPDATE=0; WATCHDOG_CNTL.QUEUE_HANG_COUNT (100 ms units); UTCL1_CNTL {RESP_MODE=3,
  REDO_DELAY=9}; UTCL1_PAGE L2 policies (sdma_common.h defaults), LLC_NOALLOC (SDMA 6); the engine out of halt;
  RB_CNTL.RB_ENABLE=1; IB_CNTL.IB_ENABLE=1. Not done: SEM_WAIT_FAIL_TIMER_CNTL=0 (SDMA 6; the register is not
  in the facts pack), amdgpu's ring test.
* SDMA 4.4.2 (gfx942), `sdma_v4_4_2.c` `gfx_resume` + `soc15.c` `soc15_doorbell_range_init`: RB_CNTL.RB_SIZE;
  RB_RPTR_ADDR_HI/LO; RB_BASE/_HI; MINOR_PTR_UPDATE=1; pointers 0; DOORBELL.ENABLE, DOORBELL_OFFSET; the write
  pointer (registers: this block has no doorbell BAR); MINOR_PTR_UPDATE=0; RB_WPTR_POLL_ADDR_LO/HI;
  RB_WPTR_POLL_CNTL.F32_POLL_ENABLE=0; the engine's NBIO doorbell entry (amdgpu programs it at SOC init);
  RB_CNTL {RPTR_WRITEBACK_ENABLE, RB_ENABLE}; IB_CNTL.IB_ENABLE=1.
* Stop (`gfx_stop`): RB_CNTL.RB_ENABLE=0, IB_CNTL.IB_ENABLE=0 (4.4.2 also DOORBELL.ENABLE=0, OFFSET=0). amdgpu
  does not wait there (its IP wait_for_idle polls SDMA0_STATUS_REG.IDLE, not in the facts pack); this driver
  then polls the queue's CONTEXT_STATUS.IDLE (100 ms, or AMDQ_WAIT_TIMEOUT_MS if shorter) so that a destroyed queue
  is known to touch memory no more; an engine that does not get there is reset (am/recovery.py).
* Halt (`sdma_v*_enable(false)`): the rings stopped first, then SDMA{0,1}_F32_CNTL HALT / MCU_CNTL HALT (4.4.2:
  RB_ENABLE=0 and SDMA_CNTL.UTC_L1_ENABLE=0; its map has no halt register).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import AMBootError, DeviceError
from ..hw import sdma_regs as S
from .ip import IPBlock

QUEUE_HANG_COUNT = 1                # amdgpu: max(usec_timeout / 100000, 1) with the default 100 ms timeout
L2_POLICY = {"RD_L2_POLICY": 2, "WR_L2_POLICY": 3}   # sdma_common.h CACHE_{READ,WRITE}_POLICY_L2__DEFAULT (NOA, BYPASS)
IDLE_TIMEOUT_MS = 100.0             # amdgpu usec_timeout
MIN_RING_BYTES = 256


@dataclass(frozen=True)
class SDMARing:
    """A bound SDMA queue: what create_queue programmed."""
    engine: int
    queue: int
    ring_va: int
    ring_bytes: int
    rptr_va: int
    wptr_va: int
    doorbell_index: int             # dword index in BAR2 (a 64-bit doorbell: the write pointer in bytes)


class SDMA(IPBlock):
    """The SDMA engines of the device (two on these targets) and their queue 0."""
    name = "sdma"

    def init_sw(self) -> None:
        self.major = self.am.target.ip["SDMA"][0]
        self.engines = sum(1 for n in ("SDMA0", "SDMA1") if n in self.am.regs.layout.blocks)
        self.queues: dict[tuple[int, int], SDMARing] = {}
        self.idle_timeout_ms = min(IDLE_TIMEOUT_MS, float(os.environ.get("AMDQ_WAIT_TIMEOUT_MS") or IDLE_TIMEOUT_MS))
        self.am.firmware("sdma_{}_{}_{}.bin".format(*self.am.target.ip["SDMA"]))

    # -- engines -------------------------------------------------------------------------------------
    def _q(self, engine: int, suffix: str):
        return S.queue_reg(self.am.regs, self.major, engine, suffix)

    def _halt(self, halt: int) -> None:
        regs = self.am.regs
        if halt:
            for n in range(self.engines):
                self._stop(n)
            self.queues.clear()
        for n in range(self.engines):
            if self.major == 6:
                regs.GC[f"regSDMA{n}_F32_CNTL"].update(HALT=halt, TH1_RESET=halt)
            elif self.major == 7:
                regs.GC[f"regSDMA{n}_MCU_CNTL"].update(HALT=halt)
            else:
                if not halt:                        # (halting stopped the rings above)
                    regs.block(f"SDMA{n}").regSDMA_GFX_RB_CNTL.update(RB_ENABLE=0)  # off until a queue is bound
                regs.block(f"SDMA{n}").regSDMA_CNTL.update(UTC_L1_ENABLE=1 - halt)
        if halt:
            return
        for n in range(self.engines):
            if self.major in (6, 7):
                regs.GC[f"regSDMA{n}_UTCL1_CNTL"].update(RESP_MODE=3, REDO_DELAY=9)
                self._check_running(n, AMBootError)

    def _check_running(self, engine: int, error: type = DeviceError) -> None:
        hr = S.halt_reg(self.am.regs, self.major, engine)
        if hr is not None and hr[0].read_fields()[hr[1]]:
            raise error(f"SDMA{engine} stayed halted ({hr[0].qualname}.{hr[1]} reads 1): the PSP has not loaded "
                        f"its firmware")

    def init_hw(self) -> None:
        self._halt(0)

    def resume_hw(self) -> None:
        """Partial boot: the last session's fini halted the engines with their rings stopped (a session that did
        not end cleanly gets a full boot); out of halt again, as init_hw."""
        self._halt(0)

    def fini_hw(self) -> None:
        self._halt(1)

    # -- queue 0 -------------------------------------------------------------------------------------
    def create_queue(self, ring_va: int, ring_bytes: int, rptr_va: int, wptr_va: int, doorbell_index: int,
                     engine: int = 0, queue: int = 0) -> SDMARing:
        """Bind queue `queue` (only 0) of SDMA engine `engine` to a ring: ring_bytes a power of two (>= 256) at
        a 256-byte aligned GPU address, the read-pointer write-back and write-pointer poll slots (8 bytes each,
        8-byte aligned), the dword doorbell index the engine answers to. The engine starts at once; ring the
        doorbell with the write pointer (bytes) to make it consume."""
        q = SDMARing(engine, queue, ring_va, ring_bytes, rptr_va, wptr_va, doorbell_index)
        self._check_args(q)
        if self.major == 4:
            self._bind_v4(q)
        else:
            self._bind_v6(q)
        self.queues[(engine, queue)] = q
        self.am.log(2, f"sdma: SDMA{engine} queue {queue}: ring {ring_va:#x}+{ring_bytes:#x}, rptr {rptr_va:#x}, "
                       f"wptr {wptr_va:#x}, doorbell {doorbell_index:#x}")
        return q

    def destroy_queue(self, q: SDMARing) -> None:
        """Stop the queue (RB_ENABLE=0, IB_ENABLE=0) and wait until it is idle; AMTimeout naming the register
        when it does not get there (a hung engine)."""
        if self.queues.get((q.engine, q.queue)) is not q:
            raise DeviceError(f"SDMA{q.engine} queue {q.queue} is not bound to this ring (destroyed already?)")
        del self.queues[(q.engine, q.queue)]
        self._stop(q.engine)
        status = self._q(q.engine, "CONTEXT_STATUS")
        self.am.wait(lambda: status.read_fields()["IDLE"] == 1, self.idle_timeout_ms,
                     f"{status.qualname}.IDLE (SDMA{q.engine} queue {q.queue} going idle after RB_ENABLE=0)")

    def _check_args(self, q: SDMARing) -> None:
        where = f"SDMA{q.engine} queue {q.queue}"
        if not 0 <= q.engine < self.engines:
            raise DeviceError(f"{where}: this device has SDMA engines 0..{self.engines - 1}")
        if q.queue != 0:
            raise DeviceError(f"{where}: only queue 0 (the kernel ring) is bound through registers")
        if (q.engine, q.queue) in self.queues:
            raise DeviceError(f"{where} is bound already; destroy_queue it first")
        top = _field_max(self._q(q.engine, "RB_CNTL"), "RB_SIZE")
        if q.ring_bytes < MIN_RING_BYTES or q.ring_bytes & (q.ring_bytes - 1) or _log2(q.ring_bytes // 4) > top:
            raise DeviceError(f"{where}: ring of {q.ring_bytes:#x} bytes; RB_CNTL.RB_SIZE takes a power of two of at "
                              f"least {MIN_RING_BYTES} bytes up to {4 << top:#x}")
        if q.ring_va % 256:
            raise DeviceError(f"{where}: ring address {q.ring_va:#x} is not 256-byte aligned (RB_BASE holds va >> 8)")
        for what, va in (("read-pointer write-back", q.rptr_va), ("write-pointer poll", q.wptr_va)):
            if va % 8:
                raise DeviceError(f"{where}: {what} address {va:#x} is not 8-byte aligned")
        limits = [(self._q(q.engine, "DOORBELL_OFFSET"), "OFFSET")]
        rt = S.routing(self.am.regs.NBIO.version)
        if rt is not None and (not rt.shared or q.engine == 0):    # this queue programs the NBIO entry too
            reg, fld = rt.route(q.engine).offset
            limits.append((self.am.regs.NBIO[reg], fld))
        for reg, fld in limits:
            if not 0 <= q.doorbell_index <= _field_max(reg, fld):
                raise DeviceError(f"{where}: doorbell {q.doorbell_index:#x} does not fit {reg.qualname}.{fld}")

    def _doorbell_range(self, q: SDMARing) -> None:
        """The engine's NBIO doorbell entry: per engine (NBIO 7.9), or one entry for every engine programmed by
        engine 0's queue (NBIO 4.3, NBIF 6.3.1), covering DOORBELL_RANGE_DWORDS per engine."""
        soc = self.am.block("soc")
        rt = S.routing(self.am.regs.NBIO.version)
        if soc is None or rt is None:
            raise DeviceError(f"SDMA{q.engine}: no NBIO doorbell-range facts for NBIO "
                              f"{'.'.join(map(str, self.am.regs.NBIO.version))}")
        if not rt.shared:
            soc.sdma_doorbell_range(q.engine, q.doorbell_index, S.DOORBELL_RANGE_DWORDS)
        elif q.engine == 0:
            soc.sdma_doorbell_range(0, q.doorbell_index, S.DOORBELL_RANGE_DWORDS * self.engines)
        else:                                       # the shared entry is engine 0's: it must cover this doorbell
            nb, route = self.am.regs.NBIO, rt.route(0)
            first = nb[route.offset[0]].read_fields()[route.offset[1]]
            n = nb[route.size[0][0]].read_fields()[route.size[0][1]]
            if not first <= q.doorbell_index < first + n:
                raise DeviceError(f"SDMA{q.engine}: doorbell {q.doorbell_index:#x} is outside the SDMA doorbell range "
                                  f"{first:#x}+{n} that NBIO.{route.offset[0]} routes (engine 0's queue sets it)")

    def _bind_v6(self, q: SDMARing) -> None:
        """SDMA 6 / 7: gfx_resume_instance (see the module docstring)."""
        e, r = q.engine, lambda suffix: self._q(q.engine, suffix)
        rb_cntl = r("RB_CNTL")
        rb = dict(RB_SIZE=_log2(q.ring_bytes // 4), RB_PRIV=1)
        rb_cntl.update(**rb)
        for p in ("RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI"):
            r(p).write(0)
        r("RB_WPTR_POLL_ADDR_LO").write(q.wptr_va & 0xFFFFFFFF)
        r("RB_WPTR_POLL_ADDR_HI").write(q.wptr_va >> 32)
        r("RB_RPTR_ADDR_HI").write(q.rptr_va >> 32)
        r("RB_RPTR_ADDR_LO").write(q.rptr_va & 0xFFFFFFFC)
        rb.update({"RPTR_WRITEBACK_ENABLE": 1, "WPTR_POLL_ENABLE": 0, S.FW_WPTR_POLL[self.major]: 1})
        r("RB_BASE").write((q.ring_va >> 8) & 0xFFFFFFFF)
        r("RB_BASE_HI").write(q.ring_va >> 40)
        r("MINOR_PTR_UPDATE").write(ENABLE=1)
        r("RB_WPTR").write(0)
        r("RB_WPTR_HI").write(0)
        r("DOORBELL").update(ENABLE=1)
        r("DOORBELL_OFFSET").update(OFFSET=q.doorbell_index)
        self._doorbell_range(q)
        r("MINOR_PTR_UPDATE").write(ENABLE=0)
        gc = self.am.regs.GC
        gc[f"regSDMA{e}_WATCHDOG_CNTL"].update(QUEUE_HANG_COUNT=QUEUE_HANG_COUNT)
        gc[f"regSDMA{e}_UTCL1_CNTL"].update(RESP_MODE=3, REDO_DELAY=9)
        page = gc[f"regSDMA{e}_UTCL1_PAGE"]
        page.update(**L2_POLICY, **({"LLC_NOALLOC": 1} if "LLC_NOALLOC" in page.fields else {}))
        if self.major == 6:
            gc[f"regSDMA{e}_F32_CNTL"].update(HALT=0, TH1_RESET=0)
        else:
            gc[f"regSDMA{e}_MCU_CNTL"].update(HALT=0, RESET=0)
        self._check_running(e)
        rb_cntl.update(**rb, RB_ENABLE=1)
        r("IB_CNTL").update(IB_ENABLE=1)

    def _bind_v4(self, q: SDMARing) -> None:
        """SDMA 4.4.2: gfx_resume plus the SOC's doorbell range (see the module docstring)."""
        r = lambda suffix: self._q(q.engine, suffix)
        rb_cntl = r("RB_CNTL")
        rb = dict(RB_SIZE=_log2(q.ring_bytes // 4))
        rb_cntl.update(**rb)
        r("RB_RPTR_ADDR_HI").write(q.rptr_va >> 32)
        r("RB_RPTR_ADDR_LO").write(q.rptr_va & 0xFFFFFFFC)
        rb["RPTR_WRITEBACK_ENABLE"] = 1
        r("RB_BASE").write((q.ring_va >> 8) & 0xFFFFFFFF)
        r("RB_BASE_HI").write(q.ring_va >> 40)
        r("MINOR_PTR_UPDATE").write(ENABLE=1)
        for p in ("RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI"):
            r(p).write(0)
        r("DOORBELL").update(ENABLE=1)
        r("DOORBELL_OFFSET").update(OFFSET=q.doorbell_index)
        r("RB_WPTR").write(0)                       # ring_set_wptr: the write pointer, 0 (bytes)
        r("RB_WPTR_HI").write(0)
        r("MINOR_PTR_UPDATE").write(ENABLE=0)
        r("RB_WPTR_POLL_ADDR_LO").write(q.wptr_va & 0xFFFFFFFF)
        r("RB_WPTR_POLL_ADDR_HI").write(q.wptr_va >> 32)
        r("RB_WPTR_POLL_CNTL").update(F32_POLL_ENABLE=0)
        self._doorbell_range(q)
        rb_cntl.update(**rb, RB_ENABLE=1)
        r("IB_CNTL").update(IB_ENABLE=1)

    def _stop(self, engine: int) -> None:
        """gfx_stop for one engine: ring and IBs off (4.4.2: the doorbell too)."""
        self._q(engine, "RB_CNTL").update(RB_ENABLE=0)
        self._q(engine, "IB_CNTL").update(IB_ENABLE=0)
        if self.major == 4:
            self._q(engine, "DOORBELL").update(ENABLE=0)
            self._q(engine, "DOORBELL_OFFSET").update(OFFSET=0)


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _field_max(reg, field: str) -> int:
    f = reg.fields[field]
    return (1 << (f.hi - f.lo + 1)) - 1
