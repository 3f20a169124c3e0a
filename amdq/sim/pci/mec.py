"""The MEC's hardware queue descriptors (HQDs) of a simulated PCI function: the HQD registers banked per
(me, pipe, queue) slot behind GRBM_GFX_CNTL, per XCC, and the queues they start.

Hardware behaviour modelled (sources: Linux amdgpu `soc21.c` / `soc24.c` / `soc15.c` grbm_select (GRBM_GFX_CNTL
MEID/PIPEID/QUEUEID select which HQD the CP_HQD_* / CP_MQD_* registers reach), `gfx_v11_0.c` / `gfx_v12_0.c` /
`gfx_v9_4_3.c` kiq_init_register (what a queue is made of), amdkfd `kfd_mqd_manager_v11.c` / `_v9.c` (the AQL
bits), `amdgpu_amdkfd_gfx_v11.c` hqd_load / hqd_destroy (CP_HQD_ACTIVE starts the queue, CP_HQD_DEQUEUE_REQUEST
stops it and drops CP_HQD_ACTIVE)):
- the HQD registers hold one value per slot: selecting another slot saves the registers of the old one and
  brings back those of the new one (0 for a slot never written);
- CP_HQD_ACTIVE = 1 starts the queue from the slot's registers only: ring at CP_HQD_PQ_BASE << 8 of
  4 << (QUEUE_SIZE + 1) bytes, read pointer reported to CP_HQD_PQ_RPTR_REPORT_ADDR, write pointer at
  CP_HQD_PQ_WPTR_POLL_ADDR, the doorbell of CP_HQD_PQ_DOORBELL_CONTROL.DOORBELL_OFFSET, AQL when
  CP_HQD_AQL_CONTROL.CONTROL0 is set (PM4 otherwise), in the VM context of CP_HQD_VMID;
- a doorbell write reaches the queue only while DOORBELL_EN is set, the index lies inside the XCC's
  CP_MEC_DOORBELL_RANGE_LOWER..UPPER and (where the register exists) CP_PQ_STATUS.DOORBELL_ENABLE is set;
- a queue does not start on a MEC without running firmware, halted, or with its pipe in reset (CP_HQD_ACTIVE
  reads back 0); halting the MEC or resetting a pipe kills the queues on it (CP_HQD_ACTIVE drops);
- CP_HQD_DEQUEUE_REQUEST (1 drain, 2 reset waves) stops the queue and drops CP_HQD_ACTIVE; a queue hung by the
  injection `hang_cp` (a hung CP) takes neither: only a soft reset of the CP (GRBM_SOFT_RESET, sim/pci/gfx.py), a MEC
  halt or a pipe reset takes it off;
- a soft reset of the CP (`reset_cp`) kills every queue of the XCC and puts every HQD register back at 0 (the
  select at slot 0); the MEC is halted until the driver starts it again;
- a queue starts where CP_HQD_PQ_WPTR (dwords) says, as kfd's hqd_load loads a restored queue with WPTR == RPTR: a
  PM4 queue's read and write pointers are that value, an AQL queue's read, fetch and doorbell indices that value
  over 16 (dwords per packet); a new queue has 0 there.
Not public (firmware-internal), modelled as the MQD facts require: an AQL queue on a multi-XCC GPU takes its
compute_current_logic_xcc_id and compute_tg_chunk_size from the MQD at CP_MQD_BASE_ADDR when activated, and
XCCs activated with the same doorbell form one queue (each XCC's packet processor reads the same ring; the XCC
whose CP_HQD_PQ_CONTROL.NO_UPDATE_RPTR is clear reports the read pointer).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...hw import am
from ...hw import aql as A
from ..aql import AQLQueue, MultiXCCQueue
from ..cp import PM4Queue

MEC_ME = 1
AQL_PACKET_DW = A.PACKET_SIZE // 4
LOGIC_XCC = struct.Struct(f"<{am.v9_mqd.offsetof('compute_current_logic_xcc_id')}xI")
TG_CHUNK = struct.Struct(f"<{am.v9_mqd.offsetof('compute_tg_chunk_size')}xI")


def hung(eng) -> bool:
    """An engine stuck by a hang (an armed hang takes hold when `stopped` is asked)."""
    return bool(eng.stopped and eng.hung)


def banked(name: str) -> bool:
    """A register with one value per HQD slot (the compute HQD and MQD registers, not the gfx queue's)."""
    return (name.startswith("regCP_HQD_") or name.startswith("regCP_MQD_")) and not name.startswith("regCP_HQD_GFX_")


class XCCGroup(MultiXCCQueue):
    """The HQDs of several XCCs sharing one doorbell: one AQL queue; each XCC sees the doorbell through its own
    doorbell decode."""

    @classmethod
    def joined(cls, gpu, vmid: int, n: int, name: str) -> "XCCGroup":
        q = super().joined(gpu, vmid, n, name)
        q.gates = {}
        return q

    def add(self, eng: AQLQueue, gate: Callable[[], bool]) -> None:
        self.link.acquired = -1                 # (a die joining may start the ring over: its acquires are its own)
        self.xccs.append(eng)
        self.xccs.sort(key=lambda e: e.xcc)
        self._order = None
        self.gates[eng] = gate

    def remove(self, eng: AQLQueue) -> None:
        self.xccs.remove(eng)
        self._order = None
        self.gates.pop(eng, None)
        eng.kill()

    def sees(self) -> bool:
        return any(g() for g in self.gates.values())

    def doorbell(self, value: int) -> None:
        for e in self.xccs:
            if self.gates[e]():
                e.doorbell(value)
        self.link.epoch += 1


@dataclass
class Active:
    """A started HQD: its engine, doorbell and (AQL on several XCCs) the group it belongs to."""
    engine: object
    doorbell: int
    group: XCCGroup | None = None


class SimMEC:
    """HQD slots and queues of MEC 1 on every XCC; driven by the GFX part's register handlers."""

    def __init__(self, part):
        self.part, self.dev = part, part.dev
        self.active: dict[tuple, Active] = {}
        self._addrs: dict[int, list[int]] = {}
        self.sel: dict[int, tuple[int, int, int]] = {}
        self.bank: dict[tuple, dict[int, int]] = {}
        self.reset()

    def reset(self) -> None:
        """Power-on: no queue, every slot's registers at 0, slot (0, 0, 0) selected."""
        for key in list(self.active):
            self._stop(key)
        self.sel, self.bank = {}, {}
        self.groups: dict[int, XCCGroup] = {}
        self._decode: dict[int, tuple] = {}
        self._seen: dict[tuple, bool] = {}

    # -- banking ---------------------------------------------------------------------------------------
    def _banked(self, xcc: int) -> list[int]:
        if xcc not in self._addrs:
            lay = self.dev.layout
            self._addrs[xcc] = [lay.address("GC", n, xcc) for n in lay.tables["GC"] if banked(n)]
        return self._addrs[xcc]

    def select(self, xcc: int, value: int, reg) -> None:
        """GRBM_GFX_CNTL written: bank the old slot's HQD registers out and the new slot's in."""
        self._forget()
        f = reg.decode(value)
        new, old = (f["MEID"], f["PIPEID"], f["QUEUEID"]), self.sel.get(xcc, (0, 0, 0))
        if new == old:
            return
        raw = self.dev.raw
        addrs = self._banked(xcc)
        self.bank[(xcc, *old)] = {a: raw.read32(a) for a in addrs}
        saved = self.bank.pop((xcc, *new), {})
        for a in addrs:
            raw.write32(a, saved.get(a, 0))
        self.sel[xcc] = new

    def value(self, xcc: int, slot: tuple[int, int, int], name: str) -> int:
        """A slot's HQD register, selected or not."""
        addr = self.dev.layout.address("GC", name, xcc)
        if self.sel.get(xcc, (0, 0, 0)) == slot:
            return self.dev.raw.read32(addr)
        return self.bank.get((xcc, *slot), {}).get(addr, 0)

    def _set(self, xcc: int, slot: tuple[int, int, int], name: str, v: int) -> None:
        addr = self.dev.layout.address("GC", name, xcc)
        if self.sel.get(xcc, (0, 0, 0)) == slot:
            self.dev.raw.write32(addr, v)
        else:
            self.bank.setdefault((xcc, *slot), {})[addr] = v

    def registers(self, xcc: int, me: int, pipe: int, queue: int) -> dict[str, int]:
        """Every HQD register of a slot (for tests and diagnostics)."""
        return {n: self.value(xcc, (me, pipe, queue), n) for n in self.dev.layout.tables["GC"] if banked(n)}

    # -- the queues ------------------------------------------------------------------------------------
    def on_active(self, xcc: int, value: int) -> None:
        slot = self.sel.get(xcc, (0, 0, 0))
        key = (xcc, *slot)
        if not value & 1:
            self._stop(key)
            return
        if key in self.active:
            return
        if slot[0] != MEC_ME or not self.part.pipe_runs(xcc, slot[1]):
            self._set(xcc, slot, "regCP_HQD_ACTIVE", value & ~1)        # not taken: nothing runs the queue
            return
        self._start(xcc, slot)

    def on_dequeue(self, xcc: int, value: int, reg) -> None:
        req = reg.decode(value)["DEQUEUE_REQ"]
        key = (xcc, *self.sel.get(xcc, (0, 0, 0)))
        a = self.active.get(key)
        if not req or a is None:
            return
        if hung(a.engine):
            return                                          # a hung CP takes no dequeue: CP_HQD_ACTIVE stays 1
        self._stop(key)

    def kill(self, xcc: int, pipe: int | None = None) -> None:
        """MEC halt (pipe None) or pipe reset: the queues there are gone."""
        for key in [k for k in self.active if k[0] == xcc and k[1] == MEC_ME and pipe in (None, k[2])]:
            self._stop(key)

    def reset_cp(self, xcc: int) -> None:
        """A soft reset of XCC `xcc`'s CP: its queues are gone, every HQD register back at 0, slot 0 selected."""
        self.kill(xcc)
        raw = self.dev.raw
        for key in [k for k in self.bank if k[0] == xcc]:
            del self.bank[key]
        for a in self._banked(xcc):
            raw.write32(a, 0)
        self.sel[xcc] = (0, 0, 0)

    def _start(self, xcc: int, slot: tuple[int, int, int]) -> None:
        self._forget()
        gc, gpu = self.dev.raw.xcc(xcc).GC, self.dev.gpu
        rd = lambda n: gc[n].read()                                 # noqa: E731
        fields = lambda n: gc[n].read_fields()                      # noqa: E731
        ring = (rd("regCP_HQD_PQ_BASE") | rd("regCP_HQD_PQ_BASE_HI") << 32) << 8
        ring_bytes = 4 << (fields("regCP_HQD_PQ_CONTROL")["QUEUE_SIZE"] + 1)
        rptr = rd("regCP_HQD_PQ_RPTR_REPORT_ADDR") & ~3 | (rd("regCP_HQD_PQ_RPTR_REPORT_ADDR_HI") & 0xFFFF) << 32
        wptr = rd("regCP_HQD_PQ_WPTR_POLL_ADDR") & ~7 | (rd("regCP_HQD_PQ_WPTR_POLL_ADDR_HI") & 0xFFFF) << 32
        bell = fields("regCP_HQD_PQ_DOORBELL_CONTROL")["DOORBELL_OFFSET"]
        vmid = fields("regCP_HQD_VMID")["VMID"]
        aql = fields("regCP_HQD_AQL_CONTROL")["CONTROL0"] != 0
        n = gpu.target.xcc
        where = f"MEC1 pipe {slot[1]} queue {slot[2]}" + (f" XCC {xcc}" if n > 1 else "")
        key = (xcc, *slot)
        seen_key = (xcc, slot, bell)

        def gate() -> bool:                                         # sees(), its kept decision read inline
            s = self._seen.get(seen_key)                            # (every doorbell of the queue asks)
            return self.sees(xcc, slot, bell) if s is None else s
        at = rd("regCP_HQD_PQ_WPTR_LO") | rd("regCP_HQD_PQ_WPTR_HI") << 32     # where the queue starts (dwords)
        if not aql:
            eng = PM4Queue(gpu, vmid, ring, ring_bytes, rptr, wptr, name=f"compute queue {where}")
            eng.rptr = eng.wptr = at
        else:
            args = {"ring_base_address": ring, "ring_size": ring_bytes, "read_pointer_address": rptr,
                    "write_pointer_address": wptr}
            if n == 1:
                eng = AQLQueue(gpu, vmid, args)
                eng.rd = eng.fetch = eng.wr = at // AQL_PACKET_DW
            else:
                group = self.groups.get(bell)
                if group is None:
                    group = self.groups[bell] = XCCGroup.joined(gpu, vmid, n, f"AQL queue @ {ring:#x} ({where})")
                    gpu.attach(bell, group, gate=group.sees)
                logical, chunk = self._mqd_xcc(gc)
                eng = AQLQueue(gpu, vmid, args, xcc=xcc, logical=logical, chunk=chunk, link=group.link,
                               master=fields("regCP_HQD_PQ_CONTROL")["NO_UPDATE_RPTR"] == 0)
                eng.queue_id = group.queue_id
                eng.rd = eng.fetch = eng.wr = at // AQL_PACKET_DW
                with gpu.host_access():                         # between two slices of the GPU's worker
                    group.add(eng, gate)
                self._bind_irq(eng, xcc, slot)
                self.active[key] = Active(eng, bell, group)
                return
        gpu.attach(bell, eng, gate=gate, kept=True)          # (its decision kept in _seen until _forget)
        self._bind_irq(eng, xcc, slot)
        self.active[key] = Active(eng, bell)

    def _bind_irq(self, eng, xcc: int, slot: tuple[int, int, int]) -> None:
        """The IH writes this queue's me/pipe/queue (and XCC) into its end-of-pipe vectors' ring id."""
        ih = getattr(self.dev, "parts", {}).get("ih")
        if ih is not None:
            ih.bind_queue(eng, me=slot[0], pipe=slot[1], queue=slot[2], xcc=xcc)

    def _mqd_xcc(self, gc) -> tuple[int, int]:
        """compute_current_logic_xcc_id and compute_tg_chunk_size of the MQD the HQD was loaded from."""
        va = gc.regCP_MQD_BASE_ADDR.read() & ~3 | gc.regCP_MQD_BASE_ADDR_HI.read() << 32
        mmu = self.dev.gpu.vm(gc.regCP_MQD_CONTROL.read_fields()["VMID"])
        buf, _, off = mmu.translate(np.array([va], np.uint64), am.v9_mqd.size, False, "CP")[0]
        raw = buf[int(off[0]):int(off[0]) + am.v9_mqd.size].tobytes()
        return LOGIC_XCC.unpack_from(raw)[0], TG_CHUNK.unpack_from(raw)[0]

    def _stop(self, key: tuple) -> None:
        """The HQD stops: its engine is destroyed (waves killed), CP_HQD_ACTIVE reads 0."""
        self._forget()
        a = self.active.pop(key, None)
        if a is not None:
            with self.dev.gpu.host_access():                # between two slices of the GPU's worker
                self._destroy(a)
        xcc, slot = key[0], key[1:]
        self._set(xcc, slot, "regCP_HQD_ACTIVE", self.value(xcc, slot, "regCP_HQD_ACTIVE") & ~1)

    def _destroy(self, a: Active) -> None:
        gpu = self.dev.gpu
        if a.group is not None:
            a.group.remove(a.engine)
            if not a.group.xccs:
                gpu.detach(a.doorbell)
                self.groups.pop(a.doorbell, None)
        elif gpu.engines.get(a.doorbell) is a.engine:
            gpu.detach(a.doorbell)
        else:
            a.engine.kill()

    def decode_changed(self) -> None:
        """A register of the doorbell decode was written: every decision is taken again at the next doorbell."""
        self._forget()

    def _forget(self) -> None:
        """Forget the doorbell decisions kept so far (ours, and the GPU's of the gates that ask us)."""
        self._seen.clear()
        self.dev.gpu.gates_changed()

    def sees(self, xcc: int, slot: tuple[int, int, int], bell: int) -> bool:
        """The XCC's doorbell decode: does a write to doorbell `bell` reach the HQD of `slot` now. Decided from
        the registers as they are, and kept until one of them is written (decode_changed)."""
        key = (xcc, slot, bell)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen[key] = self._sees(xcc, slot, bell)
        return seen

    def _sees(self, xcc: int, slot: tuple[int, int, int], bell: int) -> bool:
        d = self._decode.get(xcc)
        if d is None:
            d = self._decode[xcc] = self._doorbell_decode(xcc)
        ctl_addr, en, off, lo_addr, lo_f, hi_addr, hi_f, st_addr, st_f = d
        read = self.dev.regfile.peek
        ctl = read(ctl_addr) if self.sel.get(xcc, (0, 0, 0)) == slot else \
            self.bank.get((xcc, *slot), {}).get(ctl_addr, 0)
        get = lambda v, f: (v >> f[0]) & f[1]                       # noqa: E731
        return bool(get(ctl, en) and get(ctl, off) == bell and get(read(lo_addr), lo_f) <= bell <= get(read(hi_addr), hi_f)
                    and (st_addr is None or get(read(st_addr), st_f)))

    def _doorbell_decode(self, xcc: int) -> tuple:
        gc, layout = self.dev.raw.xcc(xcc).GC, self.dev.layout
        def field(reg: str, f: str) -> tuple[int, int]:            # (shift, mask) of a register field
            x = gc[reg].fields[f]
            return x.lo, (1 << (x.hi - x.lo + 1)) - 1
        addr = lambda reg: layout.address("GC", reg, xcc)           # noqa: E731
        st = "regCP_PQ_STATUS" in gc
        return (addr("regCP_HQD_PQ_DOORBELL_CONTROL"), field("regCP_HQD_PQ_DOORBELL_CONTROL", "DOORBELL_EN"),
                field("regCP_HQD_PQ_DOORBELL_CONTROL", "DOORBELL_OFFSET"),
                addr("regCP_MEC_DOORBELL_RANGE_LOWER"), field("regCP_MEC_DOORBELL_RANGE_LOWER", "DOORBELL_RANGE_LOWER"),
                addr("regCP_MEC_DOORBELL_RANGE_UPPER"), field("regCP_MEC_DOORBELL_RANGE_UPPER", "DOORBELL_RANGE_UPPER"),
                addr("regCP_PQ_STATUS") if st else None, field("regCP_PQ_STATUS", "DOORBELL_ENABLE") if st else None)
