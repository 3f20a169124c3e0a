"""The command processor's AQL compute queue: HSA packets in a ring of 64-byte slots, executed as the packet
processor of a KFD_IOC_QUEUE_TYPE_COMPUTE_AQL queue does (HSA spec "Architected Queuing Language";
ROCr amd_hsa_queue.h / amd_hsa_signal.h; LLVM AMDGPUUsage "Initial Kernel Execution State").

What it reads:
- From CREATE_QUEUE (the MQD): ring base and size, read-pointer report address, write-pointer address.
  The runtime points the two pointers at `amd_queue_t.read_dispatch_id` and `.write_dispatch_id`; the CP
  finds the amd_queue_t itself at the read-pointer address minus `read_dispatch_id_field_base_byte_offset`
  (the u32 that follows read_dispatch_id, and must say 128).
- The doorbell: the index of the last packet written. It bounds the fetch; write_dispatch_id is not polled.
- From amd_queue_t, when a dispatch starts: `compute_tmpring_size` (scratch wave slots, bytes per wave),
  `scratch_backing_memory_location` (scratch base), `scratch_resource_descriptor` (the four
  private-segment-buffer user SGPRs) and `queue_properties` (ENABLE_PROFILING: start/end timestamps into
  the completion signal). It writes `read_dispatch_id`.
- Per packet, the header: INVALID = not yet written, wait at this slot; BARRIER = wait until every earlier
  packet has completed; an acquire scope invalidates the instruction cache. KERNEL_DISPATCH reads the 64-byte
  kernel descriptor at kernel_object (entry offset, RSRC1/2/3, enabled user SGPRs) and becomes the dispatch
  register state; BARRIER_AND/OR wait on their dependent signals' values; VENDOR_SPECIFIC runs the PM4
  INDIRECT_BUFFER a PM4-IB packet carries (with the PM4 executor of sim/cp.py) or waits like an AMD
  barrier-value packet.
- Completion: the completion signal's amd_signal_t.value is decremented atomically; a signal with an event
  mailbox gets its event id written there and the interrupt raised. Then, in order, the slot's header is set
  back to INVALID and read_dispatch_id advances: a stuck packet stays at the read index.

Packets without the barrier bit may start while earlier ones still run (up to WINDOW in flight).

Several XCCs (multi-die CDNA, amdq.hw.xcc): the kernel driver loads the queue's MQD on every XCC of the
partition, so one packet processor per XCC reads the same ring after the same doorbell, each with its
compute_current_logic_xcc_id and compute_tg_chunk_size. Every XCC processes every packet: of a dispatch
it runs the workgroups whose flat id falls to its logical id (round-robin in chunks), its waves' scratch
being its own share (XCC x at scratch_backing_memory_location + x * WAVES * wave bytes, the V# base moved
alike); barrier and PM4-IB packets each XCC executes itself. A packet is complete once every XCC has
finished its part (the barrier bit waits for that); then only the master XCC (the one whose MQD lets it
update the read pointer) decrements the completion signal, sets the slot's header INVALID and advances
read_dispatch_id. `MultiXCCQueue` is the one hardware queue the driver sees: a doorbell reaches every
XCC, an exception on any XCC stops the queue, destroying it stops them all.
"""
from __future__ import annotations

import struct

import numpy as np

from ..errors import AmdqError, GPUFault
from ..hw import aql as A
from ..hw import faults as F
from ..hw import kd as KD
from ..hw import xcc as XCC
from ..hw.aql_pm4 import AMD_AQL_FORMAT_PM4_IB, PM4_IB_DW_COUNT_REMAIN
from .cp import LDS_GRANULE, PM4Executor
from .shader.core import DispatchRegs

WINDOW = 8
SLOT = A.PACKET_SIZE
TYPES = {A.HSA_PACKET_TYPE_VENDOR_SPECIFIC: "VENDOR_SPECIFIC", A.HSA_PACKET_TYPE_INVALID: "INVALID",
         A.HSA_PACKET_TYPE_KERNEL_DISPATCH: "KERNEL_DISPATCH", A.HSA_PACKET_TYPE_BARRIER_AND: "BARRIER_AND",
         A.HSA_PACKET_TYPE_AGENT_DISPATCH: "AGENT_DISPATCH", A.HSA_PACKET_TYPE_BARRIER_OR: "BARRIER_OR"}
RD = A.AMD_QUEUE.offsetof("read_dispatch_id")
QSTATE = A.AMD_QUEUE.reader("read_dispatch_id", "read_dispatch_id_field_base_byte_offset", "compute_tmpring_size",
                            "scratch_resource_descriptor", "scratch_backing_memory_location",
                            "scratch_wave64_lane_byte_size", "queue_properties")
SIG_VALUE, SIG_MAILBOX, SIG_EVENT = (A.AMD_SIGNAL.offsetof(n) for n in ("value", "event_mailbox_ptr", "event_id"))
SIG_START, SIG_END = A.AMD_SIGNAL.offsetof("start_ts"), A.AMD_SIGNAL.offsetof("end_ts")
INVALID_HEADER = A.header(A.HSA_PACKET_TYPE_INVALID)      # what the master XCC writes over a released slot
_INVALID, _VENDOR, _DISPATCH = A.HSA_PACKET_TYPE_INVALID, A.HSA_PACKET_TYPE_VENDOR_SPECIFIC, A.HSA_PACKET_TYPE_KERNEL_DISPATCH
_BARRIER_BIT, _ACQUIRE_LO = A.HSA_PACKET_HEADER_BARRIER, A.HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE
_SIGNAL = A.COMPLETION_SIGNAL.unpack_from
U16, U64 = struct.Struct("<H"), struct.Struct("<Q")
CONDITIONS = {A.HSA_SIGNAL_CONDITION_EQ: lambda v, r: v == r, A.HSA_SIGNAL_CONDITION_NE: lambda v, r: v != r,
              A.HSA_SIGNAL_CONDITION_LT: lambda v, r: v < r, A.HSA_SIGNAL_CONDITION_GTE: lambda v, r: v >= r}


_SHARES: dict[tuple[int, int, int, int], np.ndarray] = {}


def _share(total: int, logical: int, n: int, chunk: int) -> np.ndarray:
    """XCC.share, remembered for grids of up to 64 K workgroups (read-only arrays: every launch of a shape
    asks for the same split)."""
    key = (total, logical, n, chunk)
    ids = _SHARES.get(key)
    if ids is None:
        ids = XCC.share(total, logical, n, chunk)
        if total <= 1 << 16:
            if len(_SHARES) >= 1024:
                _SHARES.clear()
            ids.flags.writeable = False
            _SHARES[key] = ids
    return ids


class Slot:
    """A packet taken from the ring and not yet released."""
    __slots__ = ("index", "type", "signal", "run", "seen", "wait", "done", "mine", "what", "kobj")

    def __init__(self, index: int, type: int, signal: int):
        self.index, self.type, self.signal = index, type, signal
        self.run = self.wait = self.kobj = None
        self.seen, self.done, self.mine = 0, False, False      # complete (every XCC), this XCC's part done
        self.what = TYPES.get(type) or f"type {type}"


class XCCLink:
    """What the packet processors of one queue's XCCs agree on: which packets every XCC has finished."""

    def __init__(self, n: int):
        self.n = n
        self.acquired = -1                           # the last packet whose acquire fence invalidated the icache
        self.epoch = 0                               # counts the events that may let a waiting XCC go on: a part
        # finished, a doorbell (an XCC that found nothing to do is not stepped again until it changes: AQLQueue.quiet)
        self.parts: dict[int, int] = {}              # packet index -> XCCs that finished their part
        self.released: dict[int, int] = {}           # packet index -> XCCs that let go of it

    def finish(self, index: int) -> bool:
        """An XCC finished its part of packet `index`; True when that was the last part (the packet is complete)."""
        k = self.parts[index] = self.parts.get(index, 0) + 1
        self.epoch += 1
        return k >= self.n

    def complete(self, index: int) -> bool:
        return self.parts.get(index, 0) >= self.n

    def release(self, index: int) -> None:
        k = self.released.get(index, 0) + 1
        if k >= self.n:
            self.released.pop(index, None)
            self.parts.pop(index, None)
        else:
            self.released[index] = k


class AQLQueue(PM4Executor):
    """One AQL hardware queue; `args` are the fields of kfd_ioctl_create_queue_args."""

    def __init__(self, gpu, vmid: int, args: dict, xcc: int = 0, logical: int = 0, chunk: int = XCC.PM4_TG_CHUNK_SIZE,
                 link: XCCLink | None = None, master: bool | None = None):
        super().__init__(gpu, vmid, f"AQL queue @ {args['ring_base_address']:#x}" + (f" (XCC {xcc})" if link else ""))
        # this XCC's MQD: its index in the partition, compute_current_logic_xcc_id, compute_tg_chunk_size
        self.xcc, self.logical, self.chunk, self.link = xcc, logical, chunk, link
        self.n_xcc = link.n if link is not None else 1
        self.lds_limit, self.isa = gpu.target.lds_bytes, gpu.target.isa
        f = self.cregs.rsrc2.fields["LDS_SIZE"]        # COMPUTE_PGM_RSRC2.LDS_SIZE: the packet's group segment
        self._lds_lo, self._lds_keep = f.lo, ~(((1 << (f.hi - f.lo + 1)) - 1) << f.lo)
        # CP_HQD_PQ_CONTROL.NO_UPDATE_RPTR clear: it owns the read pointer (`master` given: read from that register)
        self.master = xcc == XCC.MASTER_XCC if master is None else master
        # the flat id of its first workgroup of any grid (workgroups go round-robin in chunks), on a die other than the
        # master XCC (which always sets a dispatch up); a grid of no more workgroups has none for it
        self.first_wg = (logical * chunk if chunk and self.n_xcc > 1 else 0) if link is not None and not self.master \
            else None
        self.ring_va, self.slots = args["ring_base_address"], args["ring_size"] // SLOT
        self.rptr_va, self.wptr_va = args["read_pointer_address"], args["write_pointer_address"]
        self.queue_va: int | None = None
        self.rd = self.fetch = self.wr = 0           # released, fetched, doorbell + 1
        self.inflight: list[Slot] = []
        self.vendor: Slot | None = None               # the packet whose PM4 the executor is running
        self.at: Slot | None = None                   # the packet being worked on (named by faults)
        self.tmpring = A.bits_for(A.COMPUTE_TMPRING_SIZE, self.gen)
        self.scratch_unit = gpu.target.gen.scratch_unit
        self._kd: dict[bytes, tuple] = {}
        self._tmpring: dict[int, dict] = {}          # COMPUTE_TMPRING_SIZE value -> its fields
        # (index, bytes, barrier bit, is a vendor packet) of a packet read but held back (by its barrier bit, or a
        # vendor packet waiting for the one running)
        self._held: tuple[int, bytes, int, bool] | None = None
        self._undone = 0                             # packets in flight not yet complete
        self.quiet: int | None = None                # the link's epoch when this XCC last had nothing to do
        self._synced = -1                            # the link's epoch when it last looked for complete packets
        self._started = False                        # the last fetch started work (a dispatch, PM4, a wait)
        self._runs = 0                               # packets in flight with a dispatch running
        self._ring: np.ndarray | None = None          # the ring's bytes (valid while the MMU's TLB is _ring_tlb)
        self._ring_tlb = None

    # -- engine protocol ----------------------------------------------------------------------
    def doorbell(self, value: int) -> None:
        v = int(value) + 1                          # (not max(): on every launch's path)
        if v > self.wr:
            self.wr = v

    @property
    def busy(self) -> bool:
        return not self.stopped and (self.rd != self.wr or bool(self.inflight) or self.pm4_active)

    def waves_retired(self) -> int:
        return self._waves + sum(s.run.waves_retired for s in self.inflight if s.run is not None)

    @property
    def consuming(self) -> bool:
        """Has work of its own to do now: packets to fetch, a dispatch or PM4 to run (not only packets it finished
        its part of, waiting for the other XCCs, or a packet held back by its barrier bit)."""
        if self.fetch < self.wr and (self._held is None or self._held[0] != self.fetch) or self.vendor is not None \
                or self.pm4_active or any(s.run is not None or s.wait is not None for s in self.inflight):
            return not self.stopped
        return False

    def context(self) -> dict:
        s = self.at
        out = {"xcc": self.xcc} if self.link is not None else {}      # which die stopped, on a multi-XCC queue
        if s is None:
            return out
        if s.kobj is not None:
            out["kernel_object"] = s.kobj
        if s.run is not None:
            out["kernel_pc"] = s.run.d.pgm_addr
        return out

    def drop(self) -> None:
        super().drop()
        for s in self.inflight:
            s.run = None
        self._runs = 0

    def _where(self) -> str:
        s = self.at
        return f"AQL packet {s.index} (slot {s.index % self.slots}, {s.what})" if s else f"AQL read index {self.rd}"

    def _bad(self, reason: str) -> None:
        where = self._where()
        self.bad_packet(reason if "AQL packet" in reason else f"{reason}; at {where}", where)

    def step(self, budget: int) -> int:
        if self.exception is not None or self.hung or (self.hang_at is not None and self.stopped):
            return 0                                    # (stopped, without the property's call when nothing is armed)
        inflight = self.inflight
        if self.fetch >= self.wr and not inflight and self.vendor is None and not self.pm4_active:
            return 0                                    # idle: nothing rung, nothing in flight
        work = 0
        linked = self.link is not None
        try:
            while work < budget and self.exception is None and not (self.hang_at is not None and self.stopped):
                n = 0
                if self.vendor is not None:             # (PM4 of this queue runs only inside a vendor packet)
                    if self.pm4_active:
                        self.at = self.vendor
                        n += PM4Executor.step(self, budget - work)
                    if not self.pm4_active and self.exception is None:
                        self._complete(self.vendor)
                        self.vendor = None
                        n += 1
                run = poll = False
                if inflight:
                    # one look at the packets in flight says which of the stages below have anything to do
                    sync = False
                    for s in inflight:
                        if s.run is not None:
                            run = True
                        elif s.wait is not None:
                            poll = True
                        elif s.mine and not s.done:
                            sync = True
                    if run:
                        k = self._run(budget - work)
                        n += k
                        sync = sync or (linked and k > 0)
                    if poll:
                        k = self._poll()
                        n += k
                        sync = sync or (linked and k > 0)
                    if sync and self._synced != self.link.epoch:    # (another die finished a part since)
                        n += self._sync()
                    if inflight and inflight[0].done:
                        n += self._retire()
                held = self._held
                if self.fetch < self.wr and (held is None or held[0] != self.fetch or not (
                        (held[2] and self._undone) or (held[3] and self.vendor is not None))):
                    self._started = False               # (not while the packet read last time still waits)
                    k = self._fetch()
                    n += k
                    if k and not (self._started or run or poll or inflight[0].done or self.vendor is not None):
                        return work + n                 # (all it has is what it finished its part of)
                if not n:
                    break
                work += n
        except AmdqError as e:
            self.stop_on(e, "CP")
            return max(work, 1)
        return work

    # -- memory --------------------------------------------------------------------------------
    def _mem(self, va: int, n: int, write: bool = False) -> tuple[np.ndarray, int]:
        """(backing buffer, offset) of n bytes at GPU address va, through the MMU (the translation is kept
        until the context's TLB is invalidated: PM4Executor._view)."""
        return self._view(va, n, write), 0

    def _read(self, va: int, n: int) -> bytes:
        buf, o = self._mem(va, n)
        return buf[o:o + n].tobytes()

    def _queue(self) -> int:
        if self.queue_va is None:
            buf, o = self._mem(self.rptr_va + 8, 4)
            off = struct.unpack_from("<I", buf, o)[0]
            if off != RD:
                raise GPUFault(f"read_dispatch_id_field_base_byte_offset is {off}, not {RD}: the read pointer "
                               f"{self.rptr_va:#x} does not point into an amd_queue_t", address=self.rptr_va + 8)
            self.queue_va = self.rptr_va - off
        return self.queue_va

    # -- the packet processor ------------------------------------------------------------------
    def _fetch(self) -> int:
        inflight, slots, link = self.inflight, self.slots, self.link
        n, i = 0, self.fetch
        while i < self.wr and len(inflight) < WINDOW and self.exception is None:
            if self.wr - self.rd > slots:
                self._bad(f"doorbell index {self.wr - 1} is more than the ring's {slots} slots ahead of "
                            f"the read index {self.rd}")
                return n
            o = (i % slots) * SLOT
            held = self._held
            if held is not None and held[0] == i:
                raw = held[1]                           # read before and held back: not read again
            else:
                ring = self._ring if self._ring_tlb is self.mmu._tlb else self._ring_view()
                raw = ring[o:o + SLOT].tobytes() if ring is not None else self._view(self.ring_va + o, SLOT).tobytes()
            hdr = raw[0] | raw[1] << 8
            typ = hdr & 0xFF
            if typ == _INVALID:
                break                                   # reserved but not yet written: wait at this slot
            # the barrier bit waits for every earlier packet to complete; a vendor packet for the one before it
            barrier, vendor = hdr >> _BARRIER_BIT & 1, typ == _VENDOR
            if (barrier and self._undone) or (vendor and self.vendor is not None):
                self._held = (i, raw, barrier, vendor)  # a valid packet waits: kept as read
                break
            self._held = None
            if hdr >> _ACQUIRE_LO & 3 and (link is None or link.acquired < i):
                self._acquire(i)
            s = self.at = Slot(i, typ, _SIGNAL(raw)[0])
            inflight.append(s)
            self._undone += 1
            i = self.fetch = i + 1
            n += 1
            self._start(s, raw, self.ring_va + o)
        return n

    def _ring_view(self) -> np.ndarray | None:
        """The ring's bytes, translated once per TLB generation (None when part of it does not translate: each slot
        is then read on its own, and the one that does not faults with its own address)."""
        self._ring_tlb = self.mmu._tlb
        try:
            self._ring = self._translated(self.ring_va, self.slots * SLOT, False)
        except GPUFault:
            self._ring = None
        return self._ring

    def _acquire(self, index: int) -> None:
        """An acquire fence at packet `index`: the instruction cache is invalidated. The compute units' decoded
        instructions are one cache shared by the XCCs of a queue here, so the first XCC to reach the packet
        invalidates it for all: an XCC that reaches the packet later fetches no instruction older than that (what
        runs between is the packet's other parts, concurrent on hardware, and packets ordered after it)."""
        link = self.link
        if link is not None:
            if link.acquired >= index:
                return
            link.acquired = index
        self.gpu.core(self.vmid).invalidate_icache()

    def _start(self, s: Slot, raw: bytes, va: int) -> None:
        t = s.type
        if t == _DISPATCH:
            self._dispatch_packet(s, raw, va)
        elif t in (A.HSA_PACKET_TYPE_BARRIER_AND, A.HSA_PACKET_TYPE_BARRIER_OR):
            deps = [h for h in A.BARRIER_DEPS.unpack_from(raw) if h]
            s.wait = (t, deps)
            self._started = True
            self._poll_one(s)
        elif t == A.HSA_PACKET_TYPE_VENDOR_SPECIFIC:
            fmt = raw[2]
            if fmt == AMD_AQL_FORMAT_PM4_IB:
                dws = struct.unpack_from("<5I", raw, 4)
                if dws[4] != PM4_IB_DW_COUNT_REMAIN:
                    self._bad(f"PM4-IB packet with dw_count_remain {dws[4]} (expected {PM4_IB_DW_COUNT_REMAIN})")
                    return
                s.what = "VENDOR_SPECIFIC PM4_IB"
                if self.link is not None and not self.master:
                    self._complete(s)                  # PM4 runs on one die (the master), as amdgpu runs a PM4
                    return                             # queue on one XCC: the others only let go of the slot
                self.vendor = s
                self._started = True
                self.push_ib(dws[:4], va + 4)          # the slot's PM4 dwords: one INDIRECT_BUFFER
            elif fmt == A.HSA_AMD_PACKET_TYPE_BARRIER_VALUE:
                s.what = "VENDOR_SPECIFIC BARRIER_VALUE"
                f = A.BARRIER_VALUE.unpack(raw)
                s.wait = ("value", f["signal"]["handle"], f["value"], f["mask"], f["cond"])
                self._started = True
                self._poll_one(s)
            else:
                self._bad(f"vendor-specific packet with unknown AmdFormat {fmt}")
        elif t == A.HSA_PACKET_TYPE_AGENT_DISPATCH:
            self._bad("AGENT_DISPATCH packets are for agents other than this GPU")
        else:
            self._bad(f"AQL packet type {t} is reserved")

    def _dispatch_packet(self, s: Slot, raw: bytes, va: int) -> None:
        hs, wx, wy, wz, gx, gy, gz, priv, group, kobj, karg = A.DISPATCH_READ.unpack_from(raw)
        s.kobj = kobj
        if not (wx and wy and wz):
            return self._bad(f"workgroup size {(wx, wy, wz)} has a zero dimension")
        if group > self.lds_limit:
            return self._bad(f"group_segment_size {group} exceeds the {self.lds_limit} bytes of LDS")
        if self.first_wg is not None:                   # a die with no workgroup of this grid has nothing to set up
            total = -(-gx // wx) * -(-gy // wy) * -(-gz // wz)          # (the master XCC reads and checks the rest)
            if self.first_wg >= total:
                return self._complete(s)
        kd = self._read(kobj, 64)
        k = self._kd.get(kd)
        if k is None:
            f = KD.KERNEL_DESCRIPTOR.unpack(kd)
            props = KD.CODE_PROPERTIES.decode(f["kernel_code_properties"])
            k = self._kd[kd] = (f["kernel_code_entry_byte_offset"], f["compute_pgm_rsrc1"], f["compute_pgm_rsrc2"],
                                f["compute_pgm_rsrc3"], [(n, c) for flag, n, c in KD.USER_SGPRS if props[flag]],
                                bool(props["ENABLE_WAVEFRONT_SIZE32"]) and self.gpu.target.gen.wave32)
        entry, rsrc1, rsrc2, rsrc3, user_sgprs, wave32 = k
        queue = self._queue()
        _, _, tmpring, *srd, scratch, _, props = QSTATE.unpack(self._read(queue, QSTATE.size))
        tmp = self._tmpring.get(tmpring)
        if tmp is None:
            tmp = self._tmpring[tmpring] = self.tmpring.decode(tmpring)
        wave_bytes = tmp["WAVESIZE"] * self.scratch_unit
        need = priv * (32 if wave32 else 64)
        if need > wave_bytes:
            return self._bad(f"private_segment_size {priv} needs {need} scratch bytes per wave; the queue's "
                               f"compute_tmpring_size backs {wave_bytes}")
        if self.xcc:                                    # this XCC's share of the scratch, and its V#
            off = XCC.scratch_offset(self.xcc, tmp["WAVES"], wave_bytes)
            scratch += off
            base = (srd[0] | (srd[1] & 0xFFFF) << 32) + off
            srd = [base & 0xFFFFFFFF, (srd[1] & ~0xFFFF) | (base >> 32) & 0xFFFF, srd[2], srd[3]]
        vals = {"private_segment_buffer": srd, "dispatch_ptr": va, "queue_ptr": queue,
                "kernarg_segment_ptr": karg, "dispatch_id": s.index, "flat_scratch_init": scratch,
                "private_segment_size": priv}
        user = []
        for name, count in user_sgprs:
            v = vals[name]
            user += v if isinstance(v, list) else [v & 0xFFFFFFFF, v >> 32][:count]
        lds = -(-group // LDS_GRANULE)
        grid = (-(-gx // wx), -(-gy // wy), -(-gz // wz))
        d = DispatchRegs(pgm_addr=kobj + entry, rsrc1=rsrc1, rsrc2=rsrc2 & self._lds_keep | lds << self._lds_lo,
                         rsrc3=rsrc3, grid=grid, block=(wx, wy, wz), user_data=user[:16], wave64=not wave32,
                         lds_bytes=lds * LDS_GRANULE, scratch_base=scratch, scratch_wave_bytes=wave_bytes,
                         scratch_waves=tmp["WAVES"], partial=(gx % wx, gy % wy, gz % wz), gfx=self.gen, xcc=self.xcc,
                         isa=self.isa, info={"aql_index": s.index})
        if props & A.AMD_QUEUE_PROPERTIES_ENABLE_PROFILING and s.signal and self.master:
            self._signal_ts(s.signal, SIG_START)
        ids = None
        if self.link is not None:                       # this XCC's workgroups of the grid
            ids = _share(grid[0] * grid[1] * grid[2], self.logical, self.n_xcc, self.chunk)
        if 0 in grid or (ids is not None and not len(ids)):
            return self._complete(s)
        if self.gpu.inject.take("kill_wave") is not None:
            return self.stop(F.WaveException(f"waves killed (injected kill_wave){self._on()}", killed=True),
                             kernel_pc=d.pgm_addr)
        s.run = self.gpu.core(self.vmid).start(d, ids)
        self._runs += 1
        self._started = True
        self.dispatches += 1

    def _on(self) -> str:
        return f" on XCC {self.xcc}" if self.link is not None else ""

    def _run(self, budget: int) -> int:
        runs = [s for s in self.inflight if s.run is not None]
        if not runs:
            return 0
        share, work = max(1, budget // len(runs)), 0
        for s in runs:
            self.at = s
            done = s.run.step(share)
            work += s.run.stats.steps - s.seen
            s.seen = s.run.stats.steps
            if done:
                self.last_stats, self.last_index = s.run.stats, s.index
                self._waves += s.run.waves_retired
                s.run = None
                self._runs -= 1
                self._complete(s)
                work += 1
        return work

    def _poll(self) -> int:
        return sum(self._poll_one(s) for s in self.inflight if s.wait is not None and not s.done)

    def _poll_one(self, s: Slot) -> int:
        w = s.wait
        if w[0] == "value":
            _, h, ref, mask, cond = w
            fn = CONDITIONS.get(cond)
            if fn is None:
                self._bad(f"barrier-value packet with unknown condition {cond}")
                return 0
            ok = fn(self._value(h) & mask, ref)
        else:
            vals = [self._value(h) == 0 for h in w[1]]
            ok = all(vals) if w[0] == A.HSA_PACKET_TYPE_BARRIER_AND else (any(vals) or not vals)
        if not ok:
            return 0
        s.wait = None
        self._complete(s)
        return 1

    def _value(self, handle: int) -> int:
        buf, o = self._mem(handle + SIG_VALUE, 8)
        return struct.unpack_from("<q", buf, o)[0]

    def _signal_ts(self, handle: int, off: int) -> None:
        buf, o = self._mem(handle + off, 8, True)
        struct.pack_into("<Q", buf, o, self.gpu.clock())

    def _complete(self, s: Slot) -> None:
        """This XCC has finished its part of the packet. With one XCC the packet is complete: its completion
        signal (decrement, event), then it may be released; with several, it is complete once every XCC has
        finished its part: at once if this XCC's part was the last, else in `_sync` when it sees the others'."""
        if self.link is None:
            self._signal(s)
            s.done = True
            self._undone -= 1
            return
        s.mine = True
        link = self.link
        current = self._synced == link.epoch            # (nothing finished elsewhere since its last look)
        if link.finish(s.index):
            self._done(s)
        if current:
            self._synced = link.epoch

    def _sync(self) -> int:
        """Packets every XCC has finished become complete; the master XCC writes their completion signals."""
        link = self.link
        if link is None:
            return 0
        n = 0
        for s in self.inflight:
            if s.mine and not s.done and link.complete(s.index):
                self._done(s)
                n += 1
        self._synced = link.epoch
        return n

    def _done(self, s: Slot) -> None:
        """A packet of a multi-XCC queue is complete (every XCC finished its part): the master XCC writes its
        completion signal."""
        if self.master:
            self._signal(s)
        s.done = True
        self._undone -= 1

    def _signal(self, s: Slot) -> None:
        """The completion signal of a complete packet: end timestamp, decrement, event mailbox and interrupt."""
        h = s.signal
        if h:
            props = QSTATE.unpack(self._read(self._queue(), QSTATE.size))[-1]
            if props & A.AMD_QUEUE_PROPERTIES_ENABLE_PROFILING:
                self._signal_ts(h, SIG_END)
            buf, o = self._mem(h, A.AMD_SIGNAL.size, True)
            v = struct.unpack_from("<q", buf, o + SIG_VALUE)[0]
            struct.pack_into("<q", buf, o + SIG_VALUE, v - 1)
            mailbox, event = struct.unpack_from("<QI", buf, o + SIG_MAILBOX)
            if mailbox:
                mb, mo = self._mem(mailbox, 8, True)
                struct.pack_into("<Q", mb, mo, event)
                self.gpu.interrupt("CP_EOP", event, self.vmid, queue=self.name)

    def _retire(self) -> int:
        n, inflight, link, master = 0, self.inflight, self.link, self.master
        while inflight and inflight[0].done:
            s = inflight.pop(0)
            if master:                                  # the other XCCs let go of the slot without a write
                buf, o = self._mem(self.ring_va + (s.index % self.slots) * SLOT, 2, True)
                U16.pack_into(buf, o, INVALID_HEADER)
            if link is not None:
                link.release(s.index)
            n += 1
        self.rd += n
        self.retired += n
        if n and master:
            buf, o = self._mem(self.rptr_va, 8, True)
            U64.pack_into(buf, o, self.rd)
        return n



class MultiXCCQueue:
    """One AQL user queue mapped on every XCC of a partition (an MQD per XCC, all naming the same ring,
    doorbell and pointers): the engine the GPU and the kernel driver see, with one packet processor per XCC.

    `start` is the driver's logical-XCC counter at creation: XCC x gets compute_current_logic_xcc_id
    (start + x) % n. The first hardware exception on any XCC stops the whole queue (no later packet could
    complete without the stopped XCC's part); destroying the queue stops every XCC.

    A step makes passes over the dies (each keeps its own state and reads and decodes every packet itself) until
    none moves: the master XCC last in a pass (_pass_order), and a die that found nothing to do is not stepped again
    until a die finishes a part of a packet or the doorbell rings (XCCLink.epoch)."""

    kind = "cp"

    def __init__(self, gpu, vmid: int, args: dict, n: int, start: int = 0,
                 chunk: int = XCC.AQL_TG_CHUNK_SIZE):
        self.gpu, self.vmid = gpu, vmid
        self.link = XCCLink(n)
        self.xccs = [AQLQueue(gpu, vmid, args, x, XCC.logical_xcc(start, x, n), chunk, self.link) for x in range(n)]
        self.name = f"AQL queue @ {args['ring_base_address']:#x} on {n} XCCs"
        self._queue_id: int | None = None
        self._order: list[AQLQueue] | None = None      # the dies in the order of a pass (see _pass_order)

    @classmethod
    def joined(cls, gpu, vmid: int, n: int, name: str) -> "MultiXCCQueue":
        """A queue whose XCCs join one by one, as the driver activates each XCC's HQD (amdq.sim.pci.mec): the
        packet processors are appended to `xccs`; every one of the partition's `n` XCCs must have finished its
        part of a packet for the packet to complete."""
        q = cls.__new__(cls)
        q.gpu, q.vmid, q.link, q.xccs, q.name, q._queue_id, q._order = gpu, vmid, XCCLink(n), [], name, None, None
        return q

    # -- engine protocol ----------------------------------------------------------------------
    def doorbell(self, value: int) -> None:
        for e in self.xccs:                   # the doorbell write reaches every XCC's packet processor
            e.doorbell(value)
        self.link.epoch += 1

    def step(self, budget: int) -> int:
        xccs, link = self._pass_order(), self.link
        # the slice is shared by the XCCs running a dispatch or PM4 (fetching packets or waiting for the others to
        # finish their parts costs next to nothing): one die running a small grid gets the whole slice
        busy = 0
        for e in xccs:
            if e.exception is not None or e.hung or (e.hang_at is not None and e.stopped):
                return 0                      # (the queue stopped: `stopped`, without its calls when nothing is armed)
            if e._runs or e.vendor is not None:
                busy += 1
        if not xccs:
            return 0
        share, work = max(1, budget // (busy or 1)), 0
        while True:                           # passes over the dies until none moves (or the slice is spent)
            moved = 0
            for e in xccs:
                if e.quiet == link.epoch:     # found nothing to do, and no die finished a part or rang since
                    continue
                k = e.step(share)
                if e.exception is not None:   # a fault on one XCC stops the queue at once
                    return work + k
                if not k and not e.consuming:
                    e.quiet = link.epoch
                moved += k
            work += moved
            if not moved or work >= budget:
                return work

    def _pass_order(self) -> list[AQLQueue]:
        """The dies in the order a pass steps them (they run concurrently on hardware; here one after the other):
        the master XCC last, so that a packet whose last part another die finishes in a pass is completed, released
        and its completion signal written by the master in that same pass, and the master goes on to the next packet
        at once (stepped first, it finished its part before the others and found the packet complete only in the
        next pass)."""
        order = self._order
        if order is None or len(order) != len(self.xccs):
            order = self._order = sorted(self.xccs, key=lambda e: e.master)
        return order

    @property
    def busy(self) -> bool:
        return not self.stopped and any(e.busy for e in self.xccs)

    # -- what the driver and the fault machinery ask of a queue --------------------------------------
    @property
    def exception(self):
        return next((e.exception for e in self.xccs if e.exception is not None), None)

    fault = exception

    @property
    def stopped(self) -> bool:
        return any(e.stopped for e in self.xccs)

    def _master(self) -> "AQLQueue | None":
        """The packet processor that owns the read pointer (the first XCC's if none claims it)."""
        return next((e for e in self.xccs if e.master), self.xccs[0] if self.xccs else None)

    @property
    def queue_id(self) -> int | None:
        return self._queue_id

    @queue_id.setter
    def queue_id(self, v: int | None) -> None:
        self._queue_id = v
        for e in self.xccs:
            e.queue_id = v

    @property
    def retired(self) -> int:
        """Packets released (the master XCC's count: it releases them)."""
        m = self._master()
        return m.retired if m is not None else 0

    @property
    def progress(self) -> int:
        """Packets retired plus the waves every XCC retired."""
        return self.retired + sum(e.waves_retired() for e in self.xccs)

    @property
    def dispatches(self) -> int:
        """Dispatch packets started (on the master XCC; the others count the ones they had workgroups of)."""
        return max(e.dispatches for e in self.xccs)

    @property
    def last_stats(self):
        """Shader statistics of the last dispatch that finished, summed over the XCCs that ran part of it."""
        from dataclasses import fields
        from .shader.core import Stats
        parts = [e for e in self.xccs if e.last_stats is not None]
        if not parts:
            return None
        last = max(e.last_index for e in parts)
        out = Stats()
        for e in parts:
            if e.last_index == last:
                for f in fields(Stats):
                    setattr(out, f.name, getattr(out, f.name) + getattr(e.last_stats, f.name))
        return out

    @property
    def hang_at(self) -> int | None:
        m = self._master()
        return m.hang_at if m is not None else None

    @hang_at.setter
    def hang_at(self, v: int | None) -> None:
        for e in self.xccs:
            e.hang_at = v
        self.link.epoch += 1

    @property
    def hung(self) -> bool:
        return any(e.hung for e in self.xccs)

    @hung.setter
    def hung(self, v: bool) -> None:
        for e in self.xccs:
            e.hung = v
        self.link.epoch += 1

    def stop(self, record, **where) -> None:
        """Stop the queue on an exception not tied to one XCC (a simulator error): the master XCC records it."""
        m = self._master()
        if m is not None:
            m.stop(record, **where)

    def kill(self) -> None:
        """The queue is destroyed: its MQD is unloaded from every XCC, their waves are killed."""
        for e in self.xccs:
            e.kill()
