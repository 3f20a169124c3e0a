"""The command processor's compute queues: PM4 packets from a ring (and indirect buffers) turned into
register writes, dispatches, memory writes, waits and interrupts.

Packets are decoded with amdq.hw.pm4, the same tables the driver encodes with. The queue's read
pointer counts dwords consumed and is reported to the address the driver gave; it moves past a
packet only when the packet has finished, so a hung queue's read pointer names the stuck packet.
"""
from __future__ import annotations

import numpy as np

from ..errors import AmdqError
from ..hw import faults as F
from ..hw import pm4, regs
from ..hw.kd import LDS_GRANULE
from ..hw.targets import GENERATIONS
from .engine import QueueEngine
from .shader.core import DispatchRegs
from .shader.memory import load, store

COMPARE = {0: lambda v, r: True, 1: lambda v, r: v < r, 2: lambda v, r: v <= r, 3: lambda v, r: v == r,
           4: lambda v, r: v != r, 5: lambda v, r: v >= r, 6: lambda v, r: v > r}


class ComputeRegs:
    """Dword addresses of the COMPUTE_* registers of one GC version."""

    NAMES = ("COMPUTE_PGM_LO", "COMPUTE_PGM_HI", "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2", "COMPUTE_PGM_RSRC3",
             "COMPUTE_TMPRING_SIZE", "COMPUTE_DISPATCH_SCRATCH_BASE_LO", "COMPUTE_DISPATCH_SCRATCH_BASE_HI",
             "COMPUTE_NUM_THREAD_X", "COMPUTE_NUM_THREAD_Y", "COMPUTE_NUM_THREAD_Z", "COMPUTE_START_X",
             "COMPUTE_START_Y", "COMPUTE_START_Z", "COMPUTE_RESOURCE_LIMITS", "COMPUTE_USER_DATA_0",
             "COMPUTE_DISPATCH_INITIATOR")

    def __init__(self, gc_version: tuple[int, int, int]):
        self.map = regs.load("GC", gc_version)
        bases = regs.bases(GENERATIONS[gc_version[0]].bases)["GC"]
        self.addr = {n: self.map[n].address(bases) for n in self.NAMES}
        self.initiator = self.map.regCOMPUTE_DISPATCH_INITIATOR
        self.tmpring = self.map.regCOMPUTE_TMPRING_SIZE
        self.rsrc2 = self.map.regCOMPUTE_PGM_RSRC2
        self.num_thread = self.map.regCOMPUTE_NUM_THREAD_X


class PM4Executor(QueueEngine):
    """PM4 packet execution: register writes, dispatches, memory writes, waits, interrupts and indirect
    buffers. PM4Queue feeds it from a ring; the AQL queue (sim/aql.py) feeds it the IBs of vendor packets."""

    def __init__(self, gpu, vmid: int, name: str):
        super().__init__(gpu, vmid, name)
        self.mmu = gpu.vm(vmid)
        self.gen = gpu.target.gfx_version
        self.pm4 = pm4.table(self.gen)
        self.cregs = ComputeRegs(gpu.target.ip["GC"])
        self.regs: dict[int, int] = {}
        self.ibs: list[list] = []                 # stack of [dwords, position, base address]
        self.running = None                       # shader Run of the current dispatch
        self.dispatches = 0
        self.last_stats = None
        self.last_index = -1                      # AQL index of the dispatch last_stats describes
        self._waves = 0                           # waves of finished dispatches
        self._cur = None

    @property
    def pm4_active(self) -> bool:
        """PM4 work in progress: an indirect buffer not yet consumed or a dispatch still running."""
        return bool(self.ibs) or self.running is not None

    def push_ib(self, dws, base: int) -> None:
        """Execute these dwords (found at GPU address `base`) next, as an indirect buffer."""
        self.ibs.append([np.asarray(dws, np.uint32), 0, base])

    def waves_retired(self) -> int:
        return self._waves + (self.running.waves_retired if self.running is not None else 0)

    def context(self) -> dict:
        return {"kernel_pc": self.running.d.pgm_addr} if self.running is not None else {}

    def drop(self) -> None:
        self.running = None
        self.ibs = []

    def step(self, budget: int) -> int:
        if self.stopped:
            return 0
        work = 0
        try:
            while work < budget:
                if self.hang_at is not None and self.stopped:
                    return work             # an armed hang took hold
                if self.running is not None:
                    done = self.running.step(max(1, budget - work))
                    work += self.running.stats.steps - self._steps_seen
                    self._steps_seen = self.running.stats.steps
                    if not done:
                        return max(work, 1)
                    self.last_stats = self.running.stats
                    self._waves += self.running.waves_retired
                    self.running = None
                    self._finish_packet()
                    work += 1
                    continue
                pkt = self._next_packet()
                if pkt is None:
                    return work
                if not self._execute(pkt) or self.exception is not None:
                    return work             # blocked (WAIT_REG_MEM not yet satisfied) or stopped
                if self.running is None:
                    self._finish_packet()
                work += 1
        except AmdqError as e:
            self.stop_on(e, "CP")
        return max(work, 1)

    # -- fetching ------------------------------------------------------------------------------
    def _next_packet(self):
        while self.ibs:
            dws, pos, base = self.ibs[-1]
            if pos < len(dws):
                self._cur = ("ib", pos, base)
                return self._decode(dws, pos, f"IB @ {base:#x} dword {pos}")
            self.ibs.pop()
            self._cur = None
        return self._ring_packet()

    def _ring_packet(self):
        return None                               # no ring of its own: IBs only

    def _decode(self, dws, pos: int, where: str):
        try:
            return self.pm4.decode(dws, pos)
        except pm4.BadPacket as e:
            self._bad(f"bad PM4 packet at {where}: {e}")
            return None

    def _finish_packet(self) -> None:
        self.retired += 1
        kind, pos, _ = self._cur
        if kind == "ib":
            self.ibs[-1][1] = pos + self._size if self.ibs and self.ibs[-1][1] == pos else self.ibs[-1][1] if self.ibs else 0
        else:
            self._advance(self._size)

    def _advance(self, size: int) -> None:
        raise NotImplementedError

    def _where(self) -> str:
        kind, pos, base = self._cur or ("ib", 0, 0)
        return f"IB @ {base:#x} dword {pos}" if kind == "ib" else f"ring dword {pos}"

    def _bad(self, reason: str) -> None:
        self.bad_packet(reason, self._where())

    # -- packets -------------------------------------------------------------------------------
    def _execute(self, p) -> bool:
        if p is None:
            return False
        self._size = p.size
        f, name = p.fields, p.name
        if name in ("NOP", "TYPE2", "EVENT_WRITE"):
            return True
        if name in ("SET_SH_REG", "SET_UCONFIG_REG", "SET_SH_REG_INDEX"):
            for k, v in enumerate(f["VALUES"]):
                self.regs[f["REG"] + k] = v
            return True
        if name == "DISPATCH_DIRECT":
            self._dispatch(f["DIM_X"], f["DIM_Y"], f["DIM_Z"], f["DISPATCH_INITIATOR"])
            return True
        if name == "ACQUIRE_MEM":
            if f.get("GLI_INV") or f.get("SH_ICACHE_ACTION_ENA"):
                self.gpu.core(self.vmid).invalidate_icache()
            return True
        if name == "RELEASE_MEM":
            self._release_mem(f)
            return True
        if name == "WAIT_REG_MEM":
            return self._wait_reg_mem(f)
        if name == "WRITE_DATA":
            self._write_data(f)
            return True
        if name == "INDIRECT_BUFFER":
            n = f["IB_SIZE"]
            addr = np.arange(n, dtype=np.uint64) * np.uint64(4) + np.uint64(f["IB_BASE"] if "IB_BASE" in f else
                                                                               f["IB_BASE_LO"] | f["IB_BASE_HI"] << 32)
            dws = load(self.mmu, addr, 4)[:, 0] if n else np.zeros(0, np.uint32)
            self._finish_packet()                 # the IB packet itself is consumed now
            self._size = 0
            self.ibs.append([dws, 0, int(addr[0]) if n else 0])
            return True
        self._bad(f"unsupported PM4 packet {name} (opcode {p.opcode:#x})")
        return False

    def _release_mem(self, f: dict) -> None:
        addr = f["ADDR"] if "ADDR" in f else f["ADDR_LO"] | f["ADDR_HI"] << 32
        sel = f["DATA_SEL"]
        if sel in (1, 2, 3, 4):
            data = f["DATA"] if "DATA" in f else f["DATA_LO"] | f["DATA_HI"] << 32
            if sel >= 3:
                data = self.gpu.clock()
            n = 4 if sel == 1 else 8
            store(self.mmu, np.array([addr], np.uint64), np.array([[data & 0xFFFFFFFF, data >> 32]], np.uint32)[:, :n // 4], n)
        if f["INT_SEL"]:
            self.gpu.interrupt("CP_EOP", f["INT_CTXID"], self.vmid, queue=self.name)

    def _wait_reg_mem(self, f: dict) -> bool:
        addr = f["ADDR"] if "ADDR" in f else f["ADDR_LO"] | f["ADDR_HI"] << 32
        if f["MEM_SPACE"] == 1:
            v = int(load(self.mmu, np.array([addr & ~3], np.uint64), 4)[0, 0])
        else:
            v = self.regs.get(addr & 0xFFFF, 0)
        fn = COMPARE.get(f["FUNCTION"])
        if fn is None:
            self._bad(f"WAIT_REG_MEM with reserved FUNCTION {f['FUNCTION']}")
            return False
        return bool(fn(v & f["MASK"], f["REFERENCE"]))

    def _write_data(self, f: dict) -> None:
        data = list(f.get("DATA", []))
        addr = f["ADDR"] if "ADDR" in f else f["ADDR_LO"] | f["ADDR_HI"] << 32
        if f["DST_SEL"] == 0:
            for k, v in enumerate(data):
                self.regs[(addr if not f["ADDR_INCR"] else addr) + (0 if f["ADDR_INCR"] else k)] = v
            return
        if data:
            if f["ADDR_INCR"]:                    # one address: every dword lands on it in turn
                store(self.mmu, np.array([addr], np.uint64), np.array([[data[-1]]], np.uint32), 4)
            else:
                a = np.uint64(addr) + np.arange(len(data), dtype=np.uint64) * np.uint64(4)
                store(self.mmu, a, np.array(data, np.uint32)[:, None], 4)

    def _reg(self, name: str, i: int = 0) -> int:
        return self.regs.get(self.cregs.addr[name] + i, 0)

    def _dispatch(self, gx: int, gy: int, gz: int, initiator: int) -> None:
        c = self.cregs
        ini = c.initiator.decode(initiator)
        nt = [c.num_thread.decode(self._reg(f"COMPUTE_NUM_THREAD_{d}")) for d in "XYZ"]
        block = tuple(max(1, t["NUM_THREAD_FULL"]) for t in nt)
        partial = tuple(t["NUM_THREAD_PARTIAL"] if ini.get("PARTIAL_TG_EN") else 0 for t in nt)
        rsrc2 = self._reg("COMPUTE_PGM_RSRC2")
        tmp = c.tmpring.decode(self._reg("COMPUTE_TMPRING_SIZE"))
        gen = self.gpu.target.gen
        unit = gen.scratch_unit
        pgm = (self._reg("COMPUTE_PGM_LO") | self._reg("COMPUTE_PGM_HI") << 32) << 8
        scratch = (self._reg("COMPUTE_DISPATCH_SCRATCH_BASE_LO") | self._reg("COMPUTE_DISPATCH_SCRATCH_BASE_HI") << 32) << 8
        d = DispatchRegs(
            pgm_addr=pgm, rsrc1=self._reg("COMPUTE_PGM_RSRC1"), rsrc2=rsrc2, rsrc3=self._reg("COMPUTE_PGM_RSRC3"),
            grid=(gx, gy, gz), block=block, user_data=[self._reg("COMPUTE_USER_DATA_0", i) for i in range(16)],
            wave64=not ini.get("CS_W32_EN", 0) if gen.wave32 else True,
            lds_bytes=c.rsrc2.decode(rsrc2)["LDS_SIZE"] * LDS_GRANULE,
            scratch_base=scratch, scratch_wave_bytes=tmp["WAVESIZE"] * unit, scratch_waves=tmp["WAVES"],
            start=tuple(self._reg(f"COMPUTE_START_{d}") for d in "XYZ"), partial=partial, gfx=self.gen,
            isa=self.gpu.target.isa)
        if gx * gy * gz == 0:
            return
        if self.gpu.inject.take("kill_wave") is not None:
            self.stop(F.WaveException("waves killed (injected kill_wave)", killed=True), kernel_pc=pgm)
            return
        self.running = self.gpu.core(self.vmid).start(d)
        self._steps_seen = 0
        self.dispatches += 1


class PM4Queue(PM4Executor):
    """One compute hardware queue (HQD) fed by a user-mode ring."""

    def __init__(self, gpu, vmid: int, ring_va: int, ring_bytes: int, rptr_va: int, wptr_va: int, name: str = ""):
        super().__init__(gpu, vmid, name or f"compute queue @ {ring_va:#x}")
        self.ring_va, self.ring_dw = ring_va, ring_bytes // 4
        self.rptr_va, self.wptr_va = rptr_va, wptr_va
        self.rptr = self.wptr = 0

    # -- engine protocol ----------------------------------------------------------------------
    def doorbell(self, value: int) -> None:
        self.wptr = int(value)

    @property
    def busy(self) -> bool:
        return not self.stopped and (self.rptr != self.wptr or bool(self.ibs) or self.running is not None)

    # -- fetching ------------------------------------------------------------------------------
    def _ring(self) -> np.ndarray:
        chunks = self.mmu.translate(np.array([self.ring_va], np.uint64), self.ring_dw * 4, False, "CP")
        buf, _, off = chunks[0]
        return buf[int(off[0]):int(off[0]) + self.ring_dw * 4].view(np.uint32)

    def _ring_packet(self):
        if self.rptr == self.wptr:
            return None
        ring = self._ring()
        i = self.rptr % self.ring_dw
        n = min(self.wptr - self.rptr, 1 << 14)
        window = np.take(ring, np.arange(i, i + n) % self.ring_dw)
        self._cur = ("ring", self.rptr, None)
        return self._decode(window, 0, f"ring dword {i}")

    def _advance(self, size: int) -> None:
        self.rptr += size
        self._report_rptr()

    def _report_rptr(self) -> None:
        store(self.mmu, np.array([self.rptr_va], np.uint64),
              np.array([[self.rptr & 0xFFFFFFFF, self.rptr >> 32]], np.uint32), 8)

    def _where(self) -> str:
        if self._cur is None:
            return f"ring dword {self.rptr % self.ring_dw}"
        return super()._where()
