"""The AQL compute queue: HSA kernel-dispatch packets in a ring of 64-byte slots, with the amd_queue_t the
command processor reads; PM4 work (timestamps, timeline signal, waits) goes in vendor-specific PM4-IB packets.

A producer fills a slot's 60 body bytes first and its header (with the setup word) last, so the packet
processor never sees a half-written packet: until then the header says INVALID and it waits there. Each
ring slot owns a 64-byte indirect buffer for the PM4 of a vendor packet in it, reusable exactly when the
slot is (the command processor releases a slot after its IB has run).
"""
from __future__ import annotations

import struct
import time

import numpy as np

from ..errors import GPUTimeout, InvalidArgument
from ..hw import aql as A
from ..hw import pm4
from ..hw.aql_pm4 import AMD_AQL_FORMAT_PM4_IB, PM4_IB, PM4_IB_DW_COUNT_REMAIN
from ..iface.base import hint_of, writer64
from . import kernargs
from .hwqueue import HWQueue, stuck_report
from .pm4_queue import Commands, PM4Queue, SHRegs
from .program import Launch, _clock, _new

SLOT = A.PACKET_SIZE
IB_DW = SLOT // 4                       # PM4 dwords that fit a slot's own indirect buffer
Q = A.AMD_QUEUE
RD, WR = Q.offsetof("read_dispatch_id"), Q.offsetof("write_dispatch_id")
SYSTEM = A.HSA_FENCE_SCOPE_SYSTEM
TS_AT = A.AMD_SIGNAL.offsetof("start_ts")       # a timestamp slot's two values are an amd_signal_t's start_ts, end_ts
DISPATCH_HDR = A.header(A.HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, SYSTEM, SYSTEM)
VENDOR_HDR = A.header(A.HSA_PACKET_TYPE_VENDOR_SPECIFIC, 1, A.HSA_FENCE_SCOPE_NONE, SYSTEM)
INVALID = A.header(A.HSA_PACKET_TYPE_INVALID)
VENDOR_WORD = VENDOR_HDR | AMD_AQL_FORMAT_PM4_IB << 16     # a PM4-IB vendor packet's header and format
U16, U32, U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
IB_ADDR_SIZE = struct.Struct("<QI")
KA = A.KERNARG_ADDRESS
# two slots in one write, both headers INVALID: a dispatch packet's body around its kernarg address, then a PM4-IB
# vendor packet's body around its INDIRECT_BUFFER's address and size dword (bytes 8-20); the headers follow
TWO_SLOTS = struct.Struct(f"<I{KA - 4}sQ{SLOT - KA - 8}sI4sQI{SLOT - 20}s")


class AQLPlan:
    """One kernel's dispatch packet for one grid/block/dynamic-LDS shape, built once; per call only the
    kernel arguments and the kernarg address are written."""

    def __init__(self, kernel, args: tuple, grid, block, shared_mem: int = 0, extra: int = 0):
        d = kernel.desc
        blob, dyn = kernel.kernargs(args, grid, block, shared_mem)
        self.grid, self.block, self.blob, self.shared_mem = grid, block, bytearray(blob), shared_mem
        self.size = max(64, (len(blob) + 63) & ~63)
        # an untimed launch's kernel-argument space: the arguments and `extra` bytes after them (the signal's PM4),
        # and what that takes of the kernel-argument ring
        self.asize = self.size + extra
        self.aksize = (self.asize + 63) & ~63
        self.pack = kernel.packer(self, args, self.blob)      # pack(mv, off, args): a launch's kernel arguments
        self.scratch = d.uses_scratch
        self.pkt = A.dispatch_packet(block, grid, d.private_segment_fixed_size, d.group_segment_fixed_size + dyn,
                                     kernel.kd_addr)
        self.hdr = DISPATCH_HDR | U16.unpack_from(self.pkt, 2)[0] << 16   # header and setup: written last
        self.head, self.tail = bytes(self.pkt[4:KA]), bytes(self.pkt[KA + 8:SLOT])   # the body around the kernarg address


class AQLBound:
    """A launch bound to its own kernel-argument memory: `submit()` writes its ready dispatch packet and the
    timeline signal packet."""

    def __init__(self, queue: "AQLQueue", kernel, args: tuple, grid, block, shared_mem: int = 0):
        self.queue, self.grid, self.block = queue, grid, block
        p = queue.plan(kernel, args, grid, block, shared_mem)
        self.kalloc = queue.dev.allocator.alloc(p.size, "gtt")
        kernel.pack_into(p, args, self.kalloc.cpu.mv, 0)
        self.kalloc.cpu.wrote(0, p.size)
        self.pkt, self.hdr, self.scratch, self.kernel = bytearray(p.pkt), p.hdr, p.scratch, kernel
        U64.pack_into(self.pkt, A.KERNARG_ADDRESS, self.kalloc.va)
        self.head, self.ka, self.tail = p.head, self.kalloc.va, p.tail
        self._prg, self._dev, self._lock = kernel.prg, queue.dev, queue.dev.lock

    def submit(self) -> "Launch":
        """Run it again; returns its Launch handle (`.value` is the timeline value that marks its completion).
        Writes its ready dispatch packet and the signal's vendor packet (its PM4 in the slot's own IB, the value
        patched there) and rings the doorbell once."""
        prg = self._prg
        if self.kalloc is None or prg._freed or prg.code.alloc is None:
            self._refuse()
        t0 = _clock()
        q, dev = self.queue, self._dev
        lock = self._lock                       # what Device.submitting does, inline: a hot path
        lock.acquire()
        try:
            if dev.closed:
                dev._check()
            t = q.timeline
            v = t.value                         # (the mark a failed submission gives back)
            if self.scratch:                    # (its growth may wait for the GPU, and a reset may come of that)
                q.scratch_for(self.kernel)
                v = t.value
            i = q.wid                           # (AQLQueue._take2, inline)
            if i + 2 > q._limit:
                q.room(2)
            if t.moves[0] - v != t.ordered or not (v + 1) & 0xFFFFFFFF:
                value = t.next()                # the ordering hook (Timeline.next)
                if q.wid != i:                  # it queued waits in front: room again
                    q.room(2)
                    i = q.wid
            else:                               # nothing to order (Timeline.next without its hook, inline)
                t.moves[0] += 1
                t.value = value = v + 1
            o = (i % q.slots) * SLOT            # the dispatch's slot; the vendor packet's follows it (or is slot 0)
            io = o + SLOT if o <= q._pair_end else 0
            q._put_rel(q.ibmv, io, q._rel_head, value, q._rel_tail)   # the signal's PM4 in the vendor slot's IB
            if q._ib_hint is not None:
                q._ib_hint(io, len(q._rel))
            if io:                              # (AQLQueue._put2, inline: both slots before the ring's end)
                mv = q.mv
                TWO_SLOTS.pack_into(mv, o, INVALID, self.head, self.ka, self.tail, INVALID, q._vhead, q._ibs_va + io,
                                    q._vdw3, q._vtail)
                U32.pack_into(mv, o, self.hdr)
                U32.pack_into(mv, io, VENDOR_WORD)
                if q._ring_hint is not None:
                    q._ring_hint(o, 2 * SLOT)
                q.wid = w = i + 2
                q._set_wid(w)                   # write_dispatch_id, then the doorbell
                q._ring_bell(i + 1)
            else:
                q._put2(i, self.head, self.ka, self.tail, q._ibs_va, self.hdr)
            grew = dev.take_growth() if dev._grew is not None else None
        except GPUTimeout as e:
            dev._submit_failed(q, v, e)
            raise
        finally:
            lock.release()
        h = _new(Launch)                        # (Launch(q, value, info) without its __init__ call)
        h.queue, h.value, h._rec = q, value, None
        h._info = (self, t0, _clock()) if grew is None else (self, t0, _clock(), grew)
        return h

    def _refuse(self) -> None:
        """Raise why this bound launch cannot be submitted (its program or itself freed)."""
        if self._prg.freed:
            raise InvalidArgument(f"kernel {self.kernel.name}: its program was freed; bind a loaded one")
        raise InvalidArgument(f"kernel {self.kernel.name}: this bound launch was freed; bind it again")

    def free(self) -> None:
        """Give the bound launch's memory back (after the GPU finished with it); idempotent."""
        if self.kalloc is None:
            return
        self.queue.dev.wait(self.queue.timeline.value, queue=self.queue, errors=False)
        self.queue.dev.allocator.free(self.kalloc)
        self.kalloc = None


class AQLQueue(HWQueue):
    """A KFD AQL queue: amd_queue_t, ring, per-slot indirect buffers; the runtime's producer side."""

    kind = "aql"

    def __init__(self, dev, ring_bytes: int, timeline):
        self.gen = dev.target.gfx_version
        self.sh = SHRegs(dev.target.ip["GC"])
        self.t = pm4.table(self.gen)
        self._kd: dict[int, str] = {}
        super().__init__(dev, ring_bytes, timeline)
        c = self.commands()
        self._rel = np.array(c.release(timeline.addr, 0, interrupt=dev.iface.signal_event).dw, np.uint32).tobytes()
        ib = self.t.encode("INDIRECT_BUFFER", shader_type=1, IB_BASE=0, IB_SIZE=0, VALID=1)
        self._vendor = bytearray(PM4_IB.pack(pm4_ib_format=AMD_AQL_FORMAT_PM4_IB, pm4_ib_command=ib,
                                             dw_count_remain=PM4_IB_DW_COUNT_REMAIN))
        self._ib3 = U32.unpack_from(self._vendor, 16)[0] & ~0xFFFFF      # INDIRECT_BUFFER dw3 without IB_SIZE
        # the launch path's templates: the signal's PM4 with its value patched (dword 5), and the vendor packet
        # that runs it, around its IB address and size
        self._put_rel = struct.Struct(f"<20sQ{len(self._rel) - 28}s").pack_into
        self._rel_head, self._rel_tail = self._rel[:20], self._rel[28:]
        self._vhead, self._vtail, self._vdw3 = bytes(self._vendor[4:8]), bytes(self._vendor[20:]), \
            self._ib3 | len(self._rel) // 4

    def _open(self) -> None:
        dev, ring_bytes = self.dev, self.ring_bytes
        self.qmem = dev.allocator.alloc(4096, "gtt", uncached=True)        # the amd_queue_t
        self.qmv = self.qmem.cpu.mv
        self.qmv[:Q.size] = bytes(Q.size)
        Q.pack_into(self.qmv, 0, read_dispatch_id_field_base_byte_offset=RD,
                    queue_properties=A.AMD_QUEUE_PROPERTIES_IS_PTR64 | A.AMD_QUEUE_PROPERTIES_ENABLE_PROFILING)
        if not dev.ts_signals:                          # timed dispatches' completion signals: the timestamp slots,
            tsa = dev.ts_alloc                          # amd_signal_t with no event mailbox (once per device), then
            tsa.cpu.mv[:tsa.size] = bytes(tsa.size)     # the GPU's: the packet processor writes value, start_ts and
            tsa.cpu.wrote(0, tsa.size)                  # end_ts, the CPU only reads the timestamps (refresh)
            tsa.cpu.reuse()
            dev.ts_signals = True
        self.qmem.cpu.wrote(0, Q.size)
        try:
            self.q = dev.iface.create_queue("aql", ring_bytes, ptrs=self.qmem, wptr_off=WR, rptr_off=RD)
        except BaseException:
            dev.allocator.free(self.qmem)
            raise
        self.name = f"compute queue {self.q.queue_id} (AQL)"
        self.mv = self.q.ring.cpu.mv
        self.slots = self.q.ring.size // SLOT
        np.frombuffer(self.mv, np.uint16)[::SLOT // 2] = INVALID        # every slot's header (the packet processor
                                                                        # reads nothing else of a slot before it)
        self.q.ring.cpu.wrote(0, len(self.mv))
        Q.pack_into(self.qmv, 0, hsa_queue={"features": 1, "base_address": self.q.ring.va, "size": self.slots,
                                            "id": self.q.queue_id})     # features: KERNEL_DISPATCH
        self.qmem.cpu.wrote(0, Q.size)
        self.ibs = dev.allocator.alloc(self.slots * SLOT, "gtt", uncached=True)
        self.ibmv, self._ibs_va = self.ibs.cpu.mv, self.ibs.va
        self.wid = 0                                    # next packet index (write_dispatch_id)
        self._limit = self.slots
        self._ring_bell = writer64(self.q.doorbell, self.q.doorbell_off)     # (bound once: the launch path)
        self._set_wid = writer64(self.qmem.cpu, WR)     # write_dispatch_id (with its coherence hint, if any)
        self._pair_end = len(self.mv) - 2 * SLOT        # the last slot offset where two slots fit unwrapped
        self._ring_hint, self._ib_hint = hint_of(self.q.ring.cpu), hint_of(self.ibs.cpu)    # (qmem's: in _set_wid)
        self._scratch = None                            # the new amd_queue_t has none yet

    def _close_hw(self) -> None:
        try:
            self.dev.iface.destroy_queue(self.q)
        finally:
            self.dev.allocator.free(self.ibs)
            self.dev.allocator.free(self.qmem)

    # -- encoding ------------------------------------------------------------------------------
    def commands(self) -> Commands:
        """A PM4 command list for this queue (it runs inside vendor packets)."""
        return Commands(self.gen, self.sh)

    def plan(self, kernel, args: tuple, grid, block, shared_mem: int = 0) -> AQLPlan:
        """The cached dispatch packet of this launch shape (of a kernel without LDS arguments or scratch found by
        (grid, block, shared_mem) alone: its packer sends other Python types of untyped arguments to the checked
        path)."""
        short = (grid, block, shared_mem) if kernel._plain else None
        if short is not None:
            p = kernel._aql_shapes.get(short)
            if p is not None:
                return p
        dyn = tuple(a.nbytes for a in args if isinstance(a, kernargs.LDS)) if kernel._has_lds else ()
        key = ("aql", grid, block, dyn, shared_mem, len(args),
               tuple(type(args[i]) for i in kernel._untyped if i < len(args)) if kernel._untyped else ())
        p = kernel._plans.get(key)
        if p is None:
            p = kernel._plans[key] = AQLPlan(kernel, args, grid, block, shared_mem, len(self._rel))
            self._kd[kernel.kd_addr] = kernel.name
        if short is not None:
            kernel._aql_shapes[short] = p
        return p

    def launch(self, kernel, args: tuple, grid, block, ts: int | None, shared_mem: int = 0) -> tuple[int, float]:
        """Write the dispatch packet (and timestamp/signal vendor packets) and ring the doorbell; `ts` (if
        given) receives the GPU clock before and after. Returns (timeline value, time encoding finished).

        The vendor packets' PM4 goes right after the kernel arguments (one range of kernel-argument memory
        written); an untimed launch writes its two slots in one put, headers last."""
        p = kernel._aql_shapes.get((grid, block, shared_mem)) if kernel._plain else None
        if p is None:
            p = self.plan(kernel, args, grid, block, shared_mem)
        if ts is not None:
            return self._launch_timed(p, kernel, args, ts)
        kv = self.dev.kernargs
        size = p.asize                                  # the kernel arguments, then the signal's PM4
        off = kv.head                                   # (Kernargs.take, inline, unless the ring of arguments wraps)
        if off + p.aksize > kv.size:
            ka, off = kv.take(size)
        else:
            kv.head = off + p.aksize
            ka = kv.va + off
        p.pack(kv.mv, off, args)                        # checked: bad arguments raise before a value is taken
        if p.scratch:
            self.scratch_for(kernel)
        i = self.wid                                    # (_take2, inline)
        t = self.timeline
        v = t.value
        if i + 2 > self._limit or t.moves[0] - v != t.ordered or not (v + 1) & 0xFFFFFFFF:
            value, i = self._take2()                    # room to wait for, or something to order first
        else:                                           # (Timeline.next without its hook, inline)
            t.moves[0] += 1
            t.value = value = v + 1
        t1 = _clock()
        self._put_rel(kv.mv, off + p.size, self._rel_head, value, self._rel_tail)
        if kv.hint is not None:
            kv.hint(off, size)
        o = (i % self.slots) * SLOT
        if o > self._pair_end:                          # the pair wraps
            self._put2(i, p.head, ka, p.tail, ka + p.size, p.hdr)
            return value, t1
        mv = self.mv                                    # (_put2, inline)
        TWO_SLOTS.pack_into(mv, o, INVALID, p.head, ka, p.tail, INVALID, self._vhead, ka + p.size, self._vdw3,
                            self._vtail)
        U32.pack_into(mv, o, p.hdr)
        U32.pack_into(mv, o + SLOT, VENDOR_WORD)
        if self._ring_hint is not None:
            self._ring_hint(o, 2 * SLOT)
        self.wid = w = i + 2
        self._set_wid(w)
        self._ring_bell(i + 1)
        return value, t1

    def _launch_timed(self, p: AQLPlan, kernel, args: tuple, ts: int) -> tuple[int, float]:
        """`launch` with timestamps, two slots as untimed: the dispatch's completion signal is the timestamp slot at
        `ts` (an amd_signal_t around it: the packet processor of a queue with profiling enabled writes its start_ts
        when the dispatch starts and its end_ts when it completes, as ROCr's dispatch times are read), then the
        timeline signal's vendor packet."""
        kv = self.dev.kernargs
        ka, off = kv.take(p.asize)
        kernel.pack_into(p, args, kv.mv, off)
        if p.scratch:
            self.scratch_for(kernel)
        sig = ts - TS_AT                                # the slot's amd_signal_t (zeroed with the queue: _open)
        pkt = bytearray(p.pkt)
        U64.pack_into(pkt, A.KERNARG_ADDRESS, ka)
        U64.pack_into(pkt, A.KERNEL_DISPATCH.offsetof("completion_signal"), sig)
        self.room(2)                                    # first the ring space: a value once taken is submitted
        value = self.timeline.next()
        t1 = time.perf_counter()
        i = self.reserve(2)
        self.write(i, pkt, p.hdr)
        self.release(i + 1, value, at=(ka + p.size, off + p.size))
        kv.wrote(off, p.asize)
        self.ring_doorbell(i + 1)
        return value, t1

    def _take2(self) -> tuple[int, int]:
        """(the next timeline value, the first of two free slots): ring space first (a value once taken is
        submitted), and again when the value's ordering hook queued waits in front."""
        i = self.wid
        if i + 2 > self._limit:
            self.room(2)
        value = self.timeline.next()
        if self.wid != i:
            self.room(2)
            i = self.wid
        return value, i

    def _put2(self, i: int, head: bytes, ka: int, tail: bytes, ib_va: int, hdr: int) -> None:
        """Slots i and i + 1: the dispatch packet (its body around kernarg address `ka`, header and setup `hdr`)
        and the vendor packet running the signal's PM4 at `ib_va`; bodies first, then each header; then
        write_dispatch_id and the doorbell (index i + 1)."""
        o = (i % self.slots) * SLOT
        if o <= self._pair_end:
            mv = self.mv
            TWO_SLOTS.pack_into(mv, o, INVALID, head, ka, tail, INVALID, self._vhead, ib_va, self._vdw3, self._vtail)
            U32.pack_into(mv, o, hdr)
            U32.pack_into(mv, o + SLOT, VENDOR_WORD)
            if self._ring_hint is not None:
                self._ring_hint(o, 2 * SLOT)
        else:                                           # the pair wraps: one slot at a time
            pkt = bytearray(4) + head + U64.pack(ka) + tail
            self.write(i, pkt, hdr)
            self._vendor_packet(i + 1, ib_va, len(self._rel) // 4)
        self.wid = w = i + 2
        self._set_wid(w)                                # write_dispatch_id, then the doorbell
        self._ring_bell(i + 1)

    def bind(self, kernel, args: tuple, grid, block, shared_mem: int = 0) -> AQLBound:
        """A launch with its own kernel arguments and a ready dispatch packet (Kernel.bind on this queue)."""
        return AQLBound(self, kernel, args, grid, block, shared_mem)

    wait_on = PM4Queue.wait_on          # the same PM4 polls, run from a vendor packet by submit()

    # -- scratch -------------------------------------------------------------------------------
    def scratch_for(self, kernel) -> None:
        """Make the queue descriptor's scratch big enough for `kernel` (the device's scratch grows on demand). The
        descriptor describes one XCC's share (TMPRING WAVES, V# size); each XCC's packet processor finds its own
        share after the others' from scratch_backing_memory_location."""
        d = kernel.desc
        s = self.dev.scratch_for(d.private_segment_fixed_size, d.wave_size)
        if s is self._scratch:
            return
        self._scratch = s
        g = self.gen
        w1 = A.bits_for(A.SQ_BUF_RSRC_WORD1, g)
        w3 = A.bits_for(A.SQ_BUF_RSRC_WORD3, g)
        sel = dict(DST_SEL_X=A.SQ_SEL_X, DST_SEL_Y=A.SQ_SEL_Y, DST_SEL_Z=A.SQ_SEL_Z, DST_SEL_W=A.SQ_SEL_W,
                   INDEX_STRIDE=3 if d.wave_size == 64 else 2, ADD_TID_ENABLE=1, **self.dev.target.gen.scratch_srd)
        srd = [s.base & 0xFFFFFFFF, w1.encode(BASE_ADDRESS_HI=(s.base >> 32) & 0xFFFF, SWIZZLE_ENABLE=1),
               min(s.share, 0xFFFFFFFF), w3.encode(**sel)]       # NUM_RECORDS: one XCC's share
        Q.pack_into(self.qmv, 0, scratch_backing_memory_location=s.base, scratch_resource_descriptor=srd,
                    scratch_wave64_lane_byte_size=s.wave_bytes // 64)
        U32.pack_into(self.qmv, Q.offsetof("compute_tmpring_size"), s.tmpring)    # last: it enables scratch
        self.qmem.cpu.wrote(0, Q.size)

    # -- the ring ------------------------------------------------------------------------------
    @property
    def rptr(self) -> int:
        """The command processor's read_dispatch_id: packets before it have completed and been released."""
        return self.q.rptr.cpu.read64(0)               # (read_dispatch_id of the amd_queue_t)

    @property
    def wptr(self) -> int:
        return self.wid

    def room(self, n: int) -> None:
        """Make sure n more slots are free (waiting for the command processor to release some if needed)."""
        i = self.wid
        if i + n > self._limit:
            if i + n - self.rptr > self.slots:
                self.wait_space(lambda: self.wid + n - self.rptr <= self.slots, f"{n} packets")
            self._limit = self.rptr + self.slots

    def reserve(self, n: int) -> int:
        """Index of the first of n fresh slots (write_dispatch_id moves past them)."""
        self.room(n)
        i = self.wid
        self.wid = i + n
        U64.pack_into(self.qmv, WR, self.wid)
        self.qmem.cpu.wrote(WR, 8)
        return i

    def write(self, i: int, pkt, hdr: int) -> None:
        """Packet body into slot i, then its first dword (header and setup/format) last."""
        o = (i % self.slots) * SLOT
        self.mv[o + 4:o + SLOT] = pkt[4:SLOT]
        U32.pack_into(self.mv, o, hdr)
        self.q.ring.cpu.wrote(o, SLOT)

    def vendor(self, i: int, dws: bytes, patches=(), at: tuple[int, int] | None = None) -> None:
        """A PM4-IB vendor packet in slot i running `dws` (PM4 bytes, at most 16 dwords, patched with
        (dword, u64) pairs) from the slot's own indirect buffer, or from kernel-argument memory `at` (its GPU
        address and offset, which the caller reports written)."""
        n = len(dws)
        if at is None:
            o = (i % self.slots) * SLOT
            mv, va = self.ibmv, self.ibs.va + o
        else:
            va, o = at
            mv = self.dev.kernargs.mv
        mv[o:o + n] = dws
        for k, v in patches:
            U64.pack_into(mv, o + 4 * k, v)
        if at is None:
            self.ibs.cpu.wrote(o, n)
        self._vendor_packet(i, va, n // 4)

    def _vendor_packet(self, i: int, ib_va: int, n: int) -> None:
        v = self._vendor
        IB_ADDR_SIZE.pack_into(v, 8, ib_va, self._ib3 | n)          # INDIRECT_BUFFER dw1-2 (address), dw3
        self.write(i, v, VENDOR_WORD)

    def release(self, i: int, value: int, at: tuple[int, int] | None = None) -> None:
        """Slot i: the timeline signal with its interrupt, once everything before is done (its PM4 from the slot's own
        IB, or from kernel-argument memory `at`, see vendor)."""
        self.vendor(i, self._rel, ((5, value),), at)

    def ring_doorbell(self, last: int | None = None) -> None:
        """Tell the command processor packets up to index `last` (default: all reserved) are written."""
        self._ring_bell(self.wid - 1 if last is None else last)

    def submit(self, dws) -> None:
        """Run PM4 dwords in a vendor packet (the slot's own IB if they fit, else kernel-argument space)."""
        dws = np.asarray(dws, np.uint32)
        i = self.reserve(1)
        if len(dws) <= IB_DW:
            self.vendor(i, dws.tobytes())
        else:
            va, off = self.dev.kernargs.take(4 * len(dws))
            self.dev.kernargs.mv[off:off + 4 * len(dws)] = dws.tobytes()
            self.dev.kernargs.wrote(off, 4 * len(dws))
            self._vendor_packet(i, va, len(dws))
        self.ring_doorbell(i)

    # -- inspection ----------------------------------------------------------------------------
    def _cpu(self, va: int, n: int) -> bytes | None:
        for a in (self.ibs, self.dev.kernargs.alloc):
            if a.va <= va and va + n <= a.va + a.size:
                return bytes(a.cpu.mv[va - a.va:va - a.va + n])
        return None

    def decode(self, raw: bytes) -> str:
        """One AQL packet in words; a PM4-IB vendor packet with the PM4 it runs."""
        hdr = A.HEADER.decode(U32.unpack_from(raw)[0] & 0xFFFF)
        t, bar = hdr["TYPE"], f"barrier={hdr['BARRIER']}"
        if t == A.HSA_PACKET_TYPE_KERNEL_DISPATCH:
            f = A.KERNEL_DISPATCH.unpack(raw)
            name = self._kd.get(f["kernel_object"], "?")
            return (f"KERNEL_DISPATCH({bar}, kernel {name} @ {f['kernel_object']:#x}, grid=("
                    f"{f['grid_size_x']}, {f['grid_size_y']}, {f['grid_size_z']}) work-items, workgroup=("
                    f"{f['workgroup_size_x']}, {f['workgroup_size_y']}, {f['workgroup_size_z']}), "
                    f"kernarg={f['kernarg_address']:#x}, private={f['private_segment_size']}, "
                    f"group={f['group_segment_size']}, signal={f['completion_signal']['handle']:#x})")
        if t in (A.HSA_PACKET_TYPE_BARRIER_AND, A.HSA_PACKET_TYPE_BARRIER_OR):
            f = A.BARRIER_AND.unpack(raw)
            deps = ", ".join(f"{d['handle']:#x}" for d in f["dep_signal"] if d["handle"])
            kind = "AND" if t == A.HSA_PACKET_TYPE_BARRIER_AND else "OR"
            return f"BARRIER_{kind}({bar}, deps=[{deps}], signal={f['completion_signal']['handle']:#x})"
        if t == A.HSA_PACKET_TYPE_VENDOR_SPECIFIC and raw[2] == AMD_AQL_FORMAT_PM4_IB:
            f = PM4_IB.unpack(raw)
            try:
                ib = self.t.decode(f["pm4_ib_command"], 0).fields
                va, n = ib["IB_BASE"], ib["IB_SIZE"]
                body = self._cpu(va, 4 * n)
                pk = [] if body is None else [p for _, p in self.t.walk(np.frombuffer(body, np.uint32))]
                inner = ", ".join(f"{p.name}(" + ", ".join(f"{k}={v:#x}" for k, v in p.fields.items()
                                                           if isinstance(v, int)) + ")" for p in pk)
                return f"VENDOR_SPECIFIC PM4_IB({bar}, IB @ {va:#x}, {n} dwords: {inner or 'not readable'})"
            except pm4.BadPacket as e:
                return f"VENDOR_SPECIFIC PM4_IB({bar}, undecodable PM4: {e})"
        if t == A.HSA_PACKET_TYPE_INVALID:
            return "INVALID (the slot's packet was not written yet)"
        return f"{A.PACKET_TYPES.get(t).name if t in A.PACKET_TYPES else f'type {t}'}({bar})"

    def describe(self) -> dict:
        """Where the queue is: the packet at the command processor's read index, decoded."""
        rp = self.rptr
        o = (rp % self.slots) * SLOT
        return stuck_report(self.name, rp, self.wid, f"AQL packet {rp} (slot {rp % self.slots})",
                            lambda: self.decode(bytes(self.mv[o:o + SLOT])), None)

