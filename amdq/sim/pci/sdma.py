"""The simulated SDMA engines of a simulated PCI function: an engine leaves halt only when the PSP loaded its
firmware; queue 0 of an engine runs the simulated SDMA engine (amdq.sim.sdma) from its registers.

Hardware behaviour modelled (sources: Linux amdgpu `sdma_v6_0.c` (SDMA0/1_F32_CNTL HALT / TH1_RESET,
firmware SDMA_UCODE_TH0/TH1 by the PSP), `sdma_v7_0.c` (SDMA0/1_MCU_CNTL HALT, one RS64 image), `sdma_v4_4_2.c`
(per-instance SDMA<n> firmware, SDMA_GFX_* ring registers), `psp_gfx_if.h` (GFX_FW_TYPE_*); the register
meanings of the `gfx_resume` sequences, see amdq/am/sdma.py):
- queue 0 runs while RB_CNTL.RB_ENABLE=1 and its engine runs (out of halt with firmware; SDMA 4.4.2's map has
  no halt register: the instance's own firmware, GFX_FW_TYPE_SDMA<n>, only). It starts from its registers
  alone: ring at RB_BASE/RB_BASE_HI << 8 of 4 << RB_SIZE bytes, VM context RB_VMID, read/write pointers (bytes)
  from RB_RPTR/RB_WPTR(_HI), read pointer written back (64 bits) at RB_RPTR_ADDR_HI/LO when
  RPTR_WRITEBACK_ENABLE, the WPTR poll address kept, and it answers the doorbell DOORBELL_OFFSET.OFFSET (a dword
  index of BAR2; the doorbell's value is the write pointer). RB_ENABLE=0 (or a halt) stops it; its pointers
  stay in RB_RPTR/RB_WPTR, so it goes on from there when started again without new pointers;
- a doorbell write reaches the queue only while its DOORBELL.ENABLE=1 and the NBIO routes that doorbell to the
  engine (sim/pci/nbio.py `routes_sdma`); others are counted in `dropped` and do nothing;
- RB_RPTR/RB_RPTR_HI read the queue's read pointer; CONTEXT_STATUS.IDLE reads 1 unless the queue has work it
  has not finished, or it was hung (injection `hang_sdma`) when it was stopped: a hung engine never goes idle;
- an engine reset (GRBM_SOFT_RESET.SOFT_RESET_SDMA<n> on SDMA 6/7, the SMU's ResetSDMA on SDMA 4.4.2: `engine_reset`)
  stops its queue, puts the queue's ring registers back at 0 (RB_ENABLE, pointers, doorbell) and clears the hang:
  the engine reads idle again (not with the injection `reset_fails`).
Not modelled: the write-pointer poll (the doorbell carries the pointer), IB_CNTL, queues 1 and up.
"""
from __future__ import annotations

from ...hw import am
from ...hw import sdma_regs as S
from ..sdma import SDMAQueue
from .part import SimPart, place

SDMA_FW = {4: (am.GFX_FW_TYPE_SDMA0, am.GFX_FW_TYPE_SDMA1), 6: (am.GFX_FW_TYPE_SDMA_UCODE_TH0, am.GFX_FW_TYPE_SDMA_UCODE_TH1),
           7: (am.GFX_FW_TYPE_SDMA_UCODE_TH0,)}


class RingQueue(SDMAQueue):
    """Queue 0 of an engine, started from its registers; a doorbell passes the engine's gate first."""

    def __init__(self, part: "SimSDMA", engine: int, doorbell: int, vmid: int, args: dict):
        super().__init__(part.dev.gpu, vmid, args)
        self.part, self.engine, self.doorbell_index = part, engine, doorbell
        self.name = f"SDMA{engine} queue 0"

    def doorbell(self, value: int) -> None:
        if self.part.accepts(self.engine, self.doorbell_index):
            super().doorbell(value)
        else:
            self.part.dropped += 1

    @property
    def idle(self) -> bool:
        return self.exception is not None or (self.rptr == self.wptr and self.ib is None)


class SimSDMA(SimPart):
    """SDMA halt state (HALT=0 is taken once the engine's firmware is loaded) and queue 0 of each engine."""
    name = "sdma"

    def __init__(self, dev):
        super().__init__(dev)
        self.major = dev.target.ip["SDMA"][0]
        self.engines = sum(1 for n in ("SDMA0", "SDMA1") if n in dev.layout.blocks)
        self.queues: dict[int, RingQueue] = {}
        self._doorbell_en: dict[int, tuple[int, int, int]] = {}   # engine -> DOORBELL.ENABLE's place (`accepts`)
        self.reset()

    def reset(self) -> None:
        self.loaded: set[int] = set()
        for e in list(self.queues):
            self._stop(e, keep=False)
        self.hung: set[int] = set()                # engines whose queue was hung when stopped
        self.dropped = 0                           # doorbells the gate refused
        self.resets: list[int] = []                # engines reset (engine_reset), in order

    def save(self) -> dict:
        return {"loaded": sorted(self.loaded)}

    def load(self, state: dict) -> None:
        self.loaded = set(state.get("loaded", ()))

    def on_firmware(self, fw_type: int, image: bytes) -> None:
        self.loaded.add(fw_type)
        self._sync_all()

    def ready(self) -> bool:
        return all(t in self.loaded for t in SDMA_FW.get(self.major, ()))

    def _gate(self, value: int, reg) -> None:
        if not value & 1 and not self.ready():      # HALT is bit 0 of both F32_CNTL and MCU_CNTL
            reg.write(value | 1)

    # -- queue 0 -----------------------------------------------------------------------------------------
    def _r(self, engine: int, suffix: str):
        return S.queue_reg(self.dev.raw, self.major, engine, suffix)

    def _f(self, engine: int, suffix: str) -> dict:
        return self._r(engine, suffix).read_fields()

    def _pair(self, engine: int, lo: str, hi: str) -> int:
        return self._r(engine, hi).read() << 32 | self._r(engine, lo).read()

    def running(self, engine: int) -> bool:
        """The engine executes: its firmware loaded (SDMA 4.4.2: GFX_FW_TYPE_SDMA<n> for instance n; SDMA 6/7: the
        images every engine shares) and, where the map has one, the halt bit clear."""
        hr = S.halt_reg(self.dev.raw, self.major, engine)
        if self.major == 4:
            fw = SDMA_FW[4]
            ok = engine < len(fw) and fw[engine] in self.loaded
        else:
            ok = self.ready()
        return ok and (hr is None or not hr[0].read_fields()[hr[1]])

    def accepts(self, engine: int, index: int) -> bool:
        """A doorbell at dword `index` reaches engine `engine`'s queue 0: DOORBELL.ENABLE and the NBIO route."""
        at = self._doorbell_en.get(engine)
        if at is None:                               # looked up once; the register is read at every doorbell
            at = self._doorbell_en[engine] = place(self._r(engine, "DOORBELL"), "ENABLE")
        return bool((self.dev.regfile.peek(at[0]) >> at[1]) & at[2]) and self.dev.nbio.routes_sdma(engine, index)

    def _sync(self, engine: int) -> None:
        want = bool(self._f(engine, "RB_CNTL")["RB_ENABLE"]) and self.running(engine)
        if want and engine not in self.queues:
            self._start(engine)
        elif not want and engine in self.queues:
            self._stop(engine)

    def _sync_all(self) -> None:
        if not hasattr(self.dev, "regfile"):
            return                                   # the register file is being built
        for e in range(self.engines):
            self._sync(e)

    def _start(self, engine: int) -> None:
        cntl = self._f(engine, "RB_CNTL")
        base = self._pair(engine, "RB_BASE", "RB_BASE_HI") << 8
        rptr_va = self._pair(engine, "RB_RPTR_ADDR_LO", "RB_RPTR_ADDR_HI") & ~3
        args = {"ring_base_address": base, "ring_size": 4 << cntl["RB_SIZE"],
                "read_pointer_address": rptr_va if cntl["RPTR_WRITEBACK_ENABLE"] else None,
                "write_pointer_address": self._pair(engine, "RB_WPTR_POLL_ADDR_LO", "RB_WPTR_POLL_ADDR_HI") & ~3}
        index = self._f(engine, "DOORBELL_OFFSET")["OFFSET"]
        q = RingQueue(self, engine, index, cntl["RB_VMID"], args)
        q.rptr = self._pair(engine, "RB_RPTR", "RB_RPTR_HI")
        q.wptr = self._pair(engine, "RB_WPTR", "RB_WPTR_HI")
        self.hung.discard(engine)
        self.queues[engine] = q
        self.dev.gpu.attach(index, q)
        ih = getattr(self.dev, "parts", {}).get("ih")
        if ih is not None:                           # the IH names the instance and queue in its trap vectors
            ih.bind_queue(q, instance=engine, queue=0)

    def _stop(self, engine: int, keep: bool = True) -> None:
        with self.dev.gpu.host_access():             # between two engine slices
            q = self.queues.pop(engine)
            if q.stopped and q.exception is None and not q.idle:
                self.hung.add(engine)                # hung with work: it never reaches idle
            self.dev.gpu.detach(q.doorbell_index)
        if keep:                                     # the pointers stay in the queue's registers
            for lo, hi, v in (("RB_RPTR", "RB_RPTR_HI", q.rptr), ("RB_WPTR", "RB_WPTR_HI", q.wptr)):
                self._r(engine, lo).write(v & 0xFFFFFFFF)
                self._r(engine, hi).write(v >> 32 & 0xFFFFFFFF)

    def engine_reset(self, engine: int) -> None:
        """Engine `engine` reset: its queue gone, the queue's ring registers at 0, a hang cleared."""
        if "reset_fails" in self.dev.inject or not 0 <= engine < self.engines:
            return
        if engine in self.queues:
            self._stop(engine, keep=False)
        self.hung.discard(engine)
        for suffix in ("RB_CNTL", "RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI", "DOORBELL"):
            self._r(engine, suffix).write(0)
        self.dev.gpu.clear("hang_sdma")
        self.resets.append(engine)

    # register side effects (engine from the accessed register: SDMA<n>_... on GC, or the SDMA<n> block)
    def _rb_cntl(self, reg) -> None:
        self._sync(_engine(reg))

    def _rptr(self, reg, high: bool) -> int | None:
        q = self.queues.get(_engine(reg))
        return None if q is None else (q.rptr >> 32 if high else q.rptr) & 0xFFFFFFFF

    def _status(self, reg) -> int:
        e = _engine(reg)
        q = self.queues.get(e)
        idle = e not in self.hung if q is None else q.idle
        return reg.fields["IDLE"].put(reg.read(), int(idle))


def _engine(reg) -> int:
    """The SDMA engine a queue register belongs to: SDMA<n>_QUEUE0_... (GC) or a register of block SDMA<n>."""
    name = reg.block if reg.block.startswith("SDMA") else reg.name[len("reg"):]
    return int(name[len("SDMA")])


class SimSDMA4(SimSDMA):
    """SDMA 4.4.2 (GFX9 parts): no halt register in this register map; the firmware state only."""

    def on_write_regSDMA_GFX_RB_CNTL(self, value: int, reg) -> None:
        self._rb_cntl(reg)

    def on_read_regSDMA_GFX_RB_RPTR(self, reg) -> int | None:
        return self._rptr(reg, False)

    def on_read_regSDMA_GFX_RB_RPTR_HI(self, reg) -> int | None:
        return self._rptr(reg, True)

    def on_read_regSDMA_GFX_CONTEXT_STATUS(self, reg) -> int:
        return self._status(reg)


class SimSDMAGC(SimSDMA):
    """SDMA 6 / 7: queue 0 of engine n is SDMAn_QUEUE0_* in the GC block."""

    def on_write_regSDMA0_QUEUE0_RB_CNTL(self, value: int, reg) -> None:
        self._rb_cntl(reg)

    def on_write_regSDMA1_QUEUE0_RB_CNTL(self, value: int, reg) -> None:
        self._rb_cntl(reg)

    def on_read_regSDMA0_QUEUE0_RB_RPTR(self, reg) -> int | None:
        return self._rptr(reg, False)

    def on_read_regSDMA1_QUEUE0_RB_RPTR(self, reg) -> int | None:
        return self._rptr(reg, False)

    def on_read_regSDMA0_QUEUE0_RB_RPTR_HI(self, reg) -> int | None:
        return self._rptr(reg, True)

    def on_read_regSDMA1_QUEUE0_RB_RPTR_HI(self, reg) -> int | None:
        return self._rptr(reg, True)

    def on_read_regSDMA0_QUEUE0_CONTEXT_STATUS(self, reg) -> int:
        return self._status(reg)

    def on_read_regSDMA1_QUEUE0_CONTEXT_STATUS(self, reg) -> int:
        return self._status(reg)

    def _halt_written(self, value: int, reg) -> None:
        self._gate(value, reg)
        self._sync(_engine(reg))


class SimSDMA6(SimSDMAGC):
    """SDMA 6 (GFX11): F32_CNTL.HALT."""

    def on_write_regSDMA0_F32_CNTL(self, value: int, reg) -> None:
        self._halt_written(value, reg)

    def on_write_regSDMA1_F32_CNTL(self, value: int, reg) -> None:
        self._halt_written(value, reg)


class SimSDMA7(SimSDMAGC):
    """SDMA 7 (GFX12): MCU_CNTL.HALT."""

    def on_write_regSDMA0_MCU_CNTL(self, value: int, reg) -> None:
        self._halt_written(value, reg)

    def on_write_regSDMA1_MCU_CNTL(self, value: int, reg) -> None:
        self._halt_written(value, reg)


def for_target(dev) -> SimSDMA:
    """The SDMA part of the device's SDMA generation."""
    return {4: SimSDMA4, 6: SimSDMA6, 7: SimSDMA7}[dev.target.ip["SDMA"][0]](dev)
