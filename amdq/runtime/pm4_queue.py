"""The PM4 compute queue: command encoding (with amdq.hw.pm4), the dispatch of a kernel as PM4 (its launch
plan), ring writes with wrap-around, doorbell.

A `Commands` list is the unit of encoding. It can be submitted to the ring as is, or bound into an
indirect buffer so that a resubmission writes a 4-dword INDIRECT_BUFFER packet and rings the doorbell.

Where the interface asks for it (`kernargs_in_ring`: over USB, where every write is a transfer and a launch's
kernel arguments and ring dwords would be two streams) a launch carries its kernel arguments in the ring, as the
body of a NOP packet in front of its dispatch (64-byte aligned, never across the ring's end: a filler NOP runs
to the end first). The ring's space is reused once the read pointer passed it; a NOP's arguments only once
the launch that reads them has completed too (the kernel may still read them after the command processor moved
on), so writing over them first waits for that launch.
"""
from __future__ import annotations

import struct
import time

import numpy as np

import collections

from ..errors import GPUTimeout, InvalidArgument
from ..hw import aql as A
from ..hw import pm4, regs
from ..hw.kd import LDS_GRANULE
from ..hw.targets import GENERATIONS
from . import kernargs
from ..iface.base import hint_of, writer64
from .hwqueue import HWQueue, stuck_report
from .program import Launch, _clock, _new

_RM, _WRM = pm4.ENUMS["RELEASE_MEM"], pm4.ENUMS["WAIT_REG_MEM"]
EOP_EVENT, BOTTOM_OF_PIPE_TS = pm4.CACHE_FLUSH_AND_INV_TS_EVENT, pm4.BOTTOM_OF_PIPE_TS
END_OF_PIPE = _RM["EVENT_INDEX"]["END_OF_PIPE"]
DATA_SEL_32, DATA_SEL_64, DATA_SEL_CLOCK = (_RM["DATA_SEL"][k] for k in (
    "SEND_32_BIT_LOW", "SEND_64_BIT_DATA", "SEND_GPU_CLOCK_COUNTER"))
INT_AFTER_WRITE = _RM["INT_SEL"]["SEND_INTERRUPT_AFTER_WRITE_CONFIRM"]
WAIT_GEQ = _WRM["FUNCTION"]["GREATER_THAN_OR_EQUAL_REFERENCE_VALUE"]
MEMORY_SPACE = _WRM["MEM_SPACE"]["MEMORY_SPACE"]


DISPATCH_HDR = A.header(A.HSA_PACKET_TYPE_KERNEL_DISPATCH, 1)
U64 = struct.Struct("<Q")


class SHRegs:
    """Absolute dword addresses of the compute SH registers for one GC version (driver side)."""

    def __init__(self, gc_version):
        self.map = regs.load("GC", gc_version)
        self.bases = regs.bases(GENERATIONS[gc_version[0]].bases)["GC"]

    def __getitem__(self, name: str) -> int:
        return self.map[name].address(self.bases)


class Commands:
    """Encoded PM4 dwords for one queue, with helpers for the packets the runtime uses."""

    def __init__(self, gen: int, sh: SHRegs):
        self.gen, self.sh, self.t = gen, sh, pm4.table(gen)
        self.dw: list[int] = []
        self.patches: dict[str, int] = {}            # name -> dword index (for bound resubmission)

    def packet(self, name: str, **f) -> "Commands":
        self.dw += self.t.encode(name, shader_type=1, **f)
        return self

    def set_sh(self, name: str, *values: int) -> "Commands":
        return self.packet("SET_SH_REG", REG=self.sh[name], VALUES=[v & 0xFFFFFFFF for v in values])

    def acquire(self) -> "Commands":
        """Invalidate the caches (instruction and scalar caches included) before the work that follows."""
        return self.packet("ACQUIRE_MEM", **GENERATIONS[self.gen].acquire)

    def release(self, addr: int, value: int, interrupt: int | None = None, name: str | None = None) -> "Commands":
        """End-of-pipe write of a 64-bit value (and the interrupt with context id `interrupt`)."""
        if name:
            self.patches[name] = len(self.dw) + 5          # DATA_LO dword
        return self.packet("RELEASE_MEM", EVENT_TYPE=EOP_EVENT, EVENT_INDEX=END_OF_PIPE, DATA_SEL=DATA_SEL_64,
                           INT_SEL=INT_AFTER_WRITE if interrupt is not None else 0, ADDR=addr, DATA=value,
                           INT_CTXID=interrupt or 0, **self._gcr())

    def timestamp(self, addr: int) -> "Commands":
        """Write the GPU clock counter to `addr` when everything before has finished."""
        return self.packet("RELEASE_MEM", EVENT_TYPE=BOTTOM_OF_PIPE_TS, EVENT_INDEX=END_OF_PIPE, DATA_SEL=DATA_SEL_CLOCK,
                           ADDR=addr, **self._gcr())

    def wait(self, addr: int, value: int, mask: int = 0xFFFFFFFF) -> "Commands":
        """Block the queue until the 32-bit word at `addr` is >= value."""
        return self.packet("WAIT_REG_MEM", FUNCTION=WAIT_GEQ, MEM_SPACE=MEMORY_SPACE, ADDR=addr, REFERENCE=value & 0xFFFFFFFF,
                           MASK=mask, POLL_INTERVAL=4)

    def _gcr(self) -> dict:
        return GENERATIONS[self.gen].release


class PM4Queue(HWQueue):
    """A KFD (or AM) PM4 compute queue: the runtime's writer side of the ring."""

    kind = "compute"

    def __init__(self, dev, ring_bytes: int, timeline):
        self.gen = dev.target.gfx_version
        self.sh = SHRegs(dev.target.ip["GC"])
        super().__init__(dev, ring_bytes, timeline)

    def _open(self) -> None:
        self._open_ring("compute")
        self._limit = self.ring_dw              # wptr may grow to this without rereading the read pointer
        self.inline_kernargs = bool(getattr(self.dev.iface, "kernargs_in_ring", False))
        self._inline: collections.deque = collections.deque()     # (end dword of a NOP's arguments, its launch)
        q = self.q                              # what a launch touches, bound once (a reset opens anew)
        self._ringmap, self._rmv = q.ring.cpu, q.ring.cpu.mv
        self._set_wptr, self._ring_bell = writer64(q.wptr.cpu, 0), writer64(q.doorbell, q.doorbell_off)
        # the coherence hint of a ring write (None where the CPU view is the memory: nothing to tell)
        self._ring_wrote = hint_of(q.ring.cpu)
        self._general = self.inline_kernargs or self._ring_wrote is not None    # no plain launches here

    def commands(self) -> Commands:
        return Commands(self.gen, self.sh)

    def plan(self, kernel, args: tuple, grid, block, timed: bool = False, shared_mem: int = 0) -> "Plan":
        """The cached launch plan for this shape (grid, block, dynamic LDS sizes, scratch buffer)."""
        return pm4_plan(self, kernel, args, grid, block, timed, shared_mem)

    def launch(self, kernel, args: tuple, grid, block, ts: int | None, shared_mem: int = 0) -> tuple[int, float]:
        """Encode a dispatch from the kernel's launch plan and submit it; `ts` (if given) receives the GPU
        clock before and after. Returns (timeline value, time when encoding finished).

        The plan's template is copied into the ring where the packets go and patched there in place (kernarg
        address, timeline value, timestamp addresses): no per-launch dword array is built."""
        p = kernel._shapes.get((grid, block, ts is not None, shared_mem)) if kernel._plain else None
        if p is None:                           # (that is pm4_plan's short key, inline: the hottest path)
            p = pm4_plan(self, kernel, args, grid, block, ts is not None, shared_mem)
        if ts is not None or p.plain is None or self._general:
            return self._launch(p, kernel, args, ts)
        # the plain launch: its kernel arguments, ring space and value, the template with its kernarg address and
        # value in one struct pack, the write pointer and the doorbell
        kv = self.dev.kernargs
        off = kv.head                           # (Kernargs.take, inline, unless the ring of arguments wraps)
        if off + p.ksize > kv.size:
            ka, off = kv.take(p.size)
        else:
            kv.head = off + p.ksize
            ka = kv.va + off
        p.pack(kv.mv, off, args)                # checked: bad arguments raise before a value is taken
        if kv.hint is not None:
            kv.hint(off, p.size)
        n = p.n
        w = self.wptr                           # (_take, inline)
        t = self.timeline
        v = t.value
        if w + n > self._limit or t.moves[0] - v != t.ordered or not (v + 1) & 0xFFFFFFFF:
            value, w = self._take(n)            # room to wait for, or something to order first
        else:                                   # (Timeline.next without its hook, inline)
            t.moves[0] += 1
            t.value = value = v + 1
        t1 = _clock()
        i = w % self.ring_dw
        if i + n > self.ring_dw:                # the launch wraps: through a patched copy
            self._write_wrapped(p, ka, value, None)
            return value, t1
        p.plain(self._rmv, 4 * i, p.head, ka, p.mid, value, p.tail)
        self.wptr = w = w + n
        self._set_wptr(w)                       # (_bell, inline)
        self._ring_bell(w)
        return value, t1

    def _launch(self, p: "Plan", kernel, args: tuple, ts: int | None) -> tuple[int, float]:
        """`launch` of any plan: timed (`ts`), with the dispatch packet in the kernel arguments, with coherence
        hints, or with the kernel arguments in the ring."""
        if self.inline_kernargs:
            return self._launch_inline(p, kernel, args, ts)
        kv = self.dev.kernargs
        ka, off = kv.take(p.size)
        p.pack(kv.mv, off, args)                # checked: bad arguments raise before a value is taken
        if p.pkt_off is not None:
            pkt = p.pkt
            U64.pack_into(pkt, 40, ka)
            kv.mv[off + p.pkt_off:off + p.pkt_off + 64] = pkt
        kv.wrote(off, p.size)
        n = p.n
        value, w = self._take(n)
        t1 = _clock()
        i = w % self.ring_dw
        if i + n > self.ring_dw:                # the launch wraps: through a patched copy
            self._write_wrapped(p, ka, value, ts)
            return value, t1
        mv, o = self._rmv, 4 * i
        mv[o:o + p.nbytes] = p.tpl
        self._patch(p, mv, o, ka, value, ts)
        self._ringmap.wrote(o, p.nbytes)
        self.wptr = w = w + n
        self._bell(w)
        return value, t1

    def _write_wrapped(self, p: "Plan", ka: int, value: int, ts: int | None) -> None:
        """A launch across the ring's end: its template patched in a copy, written in two pieces."""
        dw = p.dw.copy()
        self._patch(p, dw.view(np.uint8), 0, ka, value, ts)
        self._write(dw)

    def _launch_inline(self, p: "Plan", kernel, args: tuple, ts: int | None) -> tuple[int, float]:
        """`launch` with the kernel arguments in the ring: [filler NOP] NOP(padding, arguments) dispatch."""
        kd = ((p.size + 63) & ~63) // 4                 # argument dwords (64-byte multiple)
        blob = bytearray(4 * kd)
        kernel.pack_into(p, args, blob, 0)              # (checked first: bad arguments take no timeline value)
        most = 2 * (16 + kd) + len(p.dw)                # the most it can take (a filler NOP to the end included)
        w = self.wptr
        self.room(most)
        value = self.timeline.next()
        if self.wptr != w:                              # the ordering hook queued waits first: room again
            self.room(most)
        i = self.wptr % self.ring_dw
        lead = -(i + 1) % 16                            # header, then padding to 64 bytes (the ring is 256-aligned)
        fill = 0
        if i + 1 + lead + kd > self.ring_dw:            # the arguments would cross the ring's end
            fill, lead = self.ring_dw - i, 15
        body = lead + kd
        n = fill + 1 + body + len(p.dw)
        at = (self.wptr + fill + 1 + lead) % self.ring_dw           # the arguments' first dword
        ka = self.q.ring.va + 4 * at
        dw = p.dw
        if p.ka_idx is not None:
            dw[p.ka_idx], dw[p.ka_idx + 1] = ka & 0xFFFFFFFF, ka >> 32
        if p.pkt_off is not None:
            pa = ka + p.pkt_off
            struct.pack_into("<Q", p.pkt, 40, ka)
            blob[p.pkt_off:p.pkt_off + 64] = p.pkt
            dw[p.pkt_idx], dw[p.pkt_idx + 1] = pa & 0xFFFFFFFF, pa >> 32
        dw[p.value], dw[p.value + 1] = value & 0xFFFFFFFF, value >> 32
        if ts is not None:
            dw[p.ts], dw[p.ts + 1] = ts & 0xFFFFFFFF, ts >> 32
            dw[p.ts2], dw[p.ts2 + 1] = (ts + 8) & 0xFFFFFFFF, (ts + 8) >> 32
        out = np.zeros(n, np.uint32)
        t = pm4.table(self.gen)
        if fill:
            out[0] = t.encode("NOP")[0] if fill == 1 else t.encode("NOP", DATA=[0] * (fill - 1))[0]
        out[fill] = t.encode("NOP", DATA=[0] * body)[0]
        out[fill + 1 + lead:fill + 1 + body] = np.frombuffer(blob, np.uint32)
        out[fill + 1 + body:] = dw
        self.room(n)                                    # (the last lap's arguments it covers: their launches done)
        t1 = time.perf_counter()
        self._write(out)
        end = self.wptr - len(dw)
        if not self._inline:                            # the oldest arguments bound the ring's free space
            self._limit = min(self._limit, end + self.ring_dw)
        self._inline.append((end, value))
        return value, t1

    def _guard(self, n: int) -> None:
        """Before n dwords are written: kernel arguments of the ring's last lap that they cover belong to
        launches that have completed (waited for, if not yet). Every ring write passes `room`, which calls this
        once the write would pass `_limit`; `_limit` stays below the oldest arguments' end plus the ring."""
        reach = self.wptr + n - self.ring_dw            # the last lap's dwords below this are written over
        q = self._inline
        while q and q[0][0] <= reach:
            end, value = q.popleft()
            if self.timeline.completed < value:
                self.dev.wait(value, None, self, errors=False)

    @staticmethod
    def _patch(p: "Plan", mv, o: int, ka: int, value: int, ts: int | None) -> None:
        """Patch one launch's variable dwords into its template copy at mv[o:]."""
        if p.ka_idx is not None:
            U64.pack_into(mv, o + 4 * p.ka_idx, ka)
        if p.pkt_off is not None:
            U64.pack_into(mv, o + 4 * p.pkt_idx, ka + p.pkt_off)
        U64.pack_into(mv, o + 4 * p.value, value)
        if ts is not None:
            U64.pack_into(mv, o + 4 * p.ts, ts)
            U64.pack_into(mv, o + 4 * p.ts2, ts + 8)

    def _bell(self, w: int) -> None:
        """Publish the write pointer `w` and ring the doorbell with it."""
        self._set_wptr(w)
        self._ring_bell(w)

    def _take(self, n: int) -> tuple[int, int]:
        """(the next timeline value, the write pointer) for n dwords: ring space first (a value once taken is
        submitted), and again when the value's ordering hook queued waits in front."""
        w = self.wptr
        if w + n > self._limit:
            self.room(n)
        value = self.timeline.next()
        if self.wptr != w:
            self.room(n)
            w = self.wptr
        return value, w

    def put(self, tpl: bytes, n: int, vo: int) -> int:
        """Submit the n-dword template `tpl` with the next timeline value patched at its byte `vo` (a bound
        launch's or a graph's tail): ring space, value, one template copy into the ring, one doorbell."""
        value, w = self._take(n)
        i = w % self.ring_dw
        if i + n > self.ring_dw:
            self._write_patched(tpl, vo, value)
            return value
        mv, o = self._rmv, 4 * i
        mv[o:o + 4 * n] = tpl
        U64.pack_into(mv, o + vo, value)
        if self._ring_wrote is not None:
            self._ring_wrote(o, 4 * n)
        self.wptr = w = w + n
        self._bell(w)
        return value

    def _write_patched(self, tpl: bytes, vo: int, value: int) -> None:
        """A template that wraps around the ring's end: patched in a copy, written in two pieces."""
        dw = np.frombuffer(tpl, np.uint32).copy()
        U64.pack_into(dw, vo, value)
        self._write(dw)

    def bind(self, kernel, args: tuple, grid, block, shared_mem: int = 0) -> "PM4Bound":
        """This launch recorded into an indirect buffer; `.submit()` resubmits it."""
        return PM4Bound(self, kernel, args, grid, block, shared_mem)

    def wait_on(self, timeline, value: int) -> None:
        """Make the queue wait on the GPU until `timeline` reaches value (two 32-bit polls, see sdma_queue)."""
        c = self.commands()
        c.wait(timeline.addr + 4, value >> 32)
        c.wait(timeline.addr, value & 0xFFFFFFFF)
        self.submit(c.dw)

    @property
    def rptr(self) -> int:
        return self.q.rptr.cpu.read64(0)

    def room(self, n: int) -> None:
        """Make sure n more dwords fit the ring (waiting for the GPU to consume if needed)."""
        if n > self.ring_dw:
            raise ValueError(f"{n} dwords do not fit the {self.ring_dw}-dword ring; bind them into an IB")
        if self.wptr + n > self._limit:
            if self.wptr + n - self.rptr > self.ring_dw:
                self.wait_space(lambda: self.wptr + n - self.rptr <= self.ring_dw, f"{n} dwords")
            self._limit = self.rptr + self.ring_dw
            if self._inline:                    # kernel arguments in the ring: not over those still read
                self._guard(n)
                if self._inline:
                    self._limit = min(self._limit, self._inline[0][0] + self.ring_dw)

    def submit(self, dws: list[int] | np.ndarray) -> None:
        """Copy dwords into the ring (wrapping at its end) and ring the doorbell."""
        self.room(len(dws))
        self._write(dws)

    def _write(self, dws) -> None:
        """Ring write and doorbell of dwords room() was made for."""
        n = len(dws)
        i = self.wptr % self.ring_dw
        first = min(n, self.ring_dw - i)
        arr = np.asarray(dws, np.uint32)
        self.ring[i:i + first] = arr[:first]
        m = self.q.ring.cpu
        m.wrote(4 * i, 4 * first)
        if first < n:
            self.ring[:n - first] = arr[first:]
            m.wrote(0, 4 * (n - first))
        self.wptr += n
        self._bell(self.wptr)

    def describe(self) -> dict:
        """Where the queue is: the packet at the GPU's read pointer, decoded."""
        rp, i = self.rptr, self.rptr % self.ring_dw

        def packet() -> str:
            window = np.take(self.ring, np.arange(i, i + min(self.wptr - rp, 64)) % self.ring_dw)
            try:
                p = pm4.table(self.gen).decode(window, 0)
            except pm4.BadPacket as e:
                return f"undecodable packet: {e}"
            desc = ", ".join(f"{k}={v:#x}" if isinstance(v, int) else f"{k}={v}" for k, v in p.fields.items()
                             if k not in ("VALUES", "DATA", "BODY"))
            return f"{p.name}({desc})"
        return stuck_report(self.name, rp, self.wptr, f"ring dword {i}", packet, "the queue")


def pm4_plan(queue, kernel, args: tuple, grid, block, timed: bool = False, shared_mem: int = 0) -> "Plan":
    """The cached PM4 launch plan of a kernel for one shape on a queue that runs PM4 (a PM4 queue, or an
    AQL queue's vendor packets, as graphs use it)."""
    short = (grid, block, timed, shared_mem) if kernel._plain else None
    if short is not None:
        p = kernel._shapes.get(short)
        if p is not None:
            return p
    dyn = tuple(a.nbytes for a in args if isinstance(a, kernargs.LDS)) if kernel._has_lds else ()
    d = kernel.desc
    scratch = queue.dev.scratch_for(d.private_segment_fixed_size, d.wave_size).base if d.uses_scratch else 0
    key = ("pm4", grid, block, timed, dyn, shared_mem, scratch, len(args),
           tuple(type(args[i]) for i in kernel._untyped if i < len(args)) if kernel._untyped else ())
    p = kernel._plans.get(key)
    if p is None:
        p = kernel._plans[key] = Plan(queue, kernel, args, grid, block, timed, shared_mem)
    if short is not None:
        kernel._shapes[short] = p
    return p


def encode_dispatch(cmds: Commands, kernel, args: tuple, grid, block, shared_mem: int = 0) -> dict:
    """Append the PM4 dispatch of `kernel` to `cmds`: SET_SH_REG of the COMPUTE_* state, DISPATCH_DIRECT.
    Returns what the plan needs (kernarg blob and address, the dispatch packet's offset)."""
    dev = kernel.prg.dev
    d = kernel.desc
    blob, dyn = kernel.kernargs(args, grid, block, shared_mem)
    lds = d.group_segment_fixed_size + dyn
    ka = dev.kernargs.push(blob, 64 + A.PACKET_SIZE)
    user, pkt_addr = [], ka + ((len(blob) + 63) & ~63)
    if d.properties["ENABLE_SGPR_DISPATCH_PTR"]:              # the dispatch packet the kernel may read
        dev.kernargs.write(pkt_addr, bytes(A.dispatch_packet(block, grid, d.private_segment_fixed_size, lds,
                                                             kernel.kd_addr, ka, DISPATCH_HDR)))
    scratch = dev.scratch_for(d.private_segment_fixed_size, d.wave_size) if d.uses_scratch else None
    for name, _first, count in d.user_sgprs:
        val = {"kernarg_segment_ptr": ka, "dispatch_ptr": pkt_addr, "queue_ptr": 0, "dispatch_id": 0,
               "private_segment_size": d.private_segment_fixed_size,
               "flat_scratch_init": scratch.base if scratch else 0,
               "private_segment_buffer": 0}[name]
        user += ([val & 0xFFFFFFFF, val >> 32] + [0, 0])[:count]
    sh = cmds.sh
    rsrc2 = (d.compute_pgm_rsrc2 & ~(0x1FF << 15)) | ((lds + LDS_GRANULE - 1) // LDS_GRANULE) << 15
    cmds.set_sh("regCOMPUTE_PGM_LO", kernel.addr >> 8, kernel.addr >> 40)
    cmds.set_sh("regCOMPUTE_PGM_RSRC1", d.compute_pgm_rsrc1, rsrc2)
    cmds.set_sh("regCOMPUTE_PGM_RSRC3", d.compute_pgm_rsrc3)
    cmds.set_sh("regCOMPUTE_TMPRING_SIZE", scratch.tmpring if scratch else 0)
    if scratch:
        cmds.set_sh("regCOMPUTE_DISPATCH_SCRATCH_BASE_LO", scratch.base >> 8, scratch.base >> 40)
    cmds.set_sh("regCOMPUTE_RESOURCE_LIMITS", 0)
    cmds.set_sh("regCOMPUTE_START_X", 0, 0, 0)
    cmds.set_sh("regCOMPUTE_NUM_THREAD_X", *block)
    if user:
        cmds.set_sh("regCOMPUTE_USER_DATA_0", *user)
        first = len(cmds.dw) - len(user)
        pos = 0
        for name, _first, count in d.user_sgprs:
            if name in ("kernarg_segment_ptr", "dispatch_ptr"):
                cmds.patches[name] = first + pos
            pos += count
    ini = sh.map.regCOMPUTE_DISPATCH_INITIATOR
    flags = {"COMPUTE_SHADER_EN": 1, "FORCE_START_AT_000": 1}
    if "CS_W32_EN" in ini.fields and d.wave32:
        flags["CS_W32_EN"] = 1
    cmds.packet("DISPATCH_DIRECT", DIM_X=grid[0], DIM_Y=grid[1], DIM_Z=grid[2], DISPATCH_INITIATOR=ini.encode(**flags))
    return {"kernarg": ka, "blob": blob, "packet": pkt_addr - ka if d.properties["ENABLE_SGPR_DISPATCH_PTR"] else None}


class Plan:
    """A launch of one kernel with one grid/block/LDS/scratch shape, encoded once: per call only the
    kernel arguments, the kernarg address and the signal value are written."""

    def __init__(self, queue, kernel, args: tuple, grid, block, timed: bool, shared_mem: int = 0):
        dev = queue.dev
        cmds = queue.commands()
        cmds.acquire()
        self.ts = None
        if timed:
            self.ts = len(cmds.dw) + 3                       # ADDR_LO of the first timestamp RELEASE_MEM
            cmds.timestamp(0)
        out = encode_dispatch(cmds, kernel, args, grid, block, shared_mem)
        if timed:
            self.ts2 = len(cmds.dw) + 3
            cmds.timestamp(0)
        self.work = len(cmds.dw)                             # dwords before the completion signal
        self.value = len(cmds.dw) + 5                        # DATA_LO of the timeline RELEASE_MEM
        cmds.release(queue.timeline.addr, 0, interrupt=dev.iface.signal_event)
        self.dw = np.array(cmds.dw, np.uint32)
        self.n, self.nbytes, self.tpl = len(self.dw), 4 * len(self.dw), self.dw.tobytes()   # the launch's template
        self.grid, self.block, self.shared_mem = grid, block, shared_mem
        self.ka_idx = cmds.patches.get("kernarg_segment_ptr")
        self.pkt_idx = cmds.patches.get("dispatch_ptr")
        self.blob = bytearray(out["blob"])
        self.pkt_off = out["packet"]
        self.size = ((len(self.blob) + 63) & ~63) + (64 if self.pkt_off is not None else 0)
        self.ksize = (self.size + 63) & ~63                 # what it takes of the kernel-argument ring
        # the common launch patches two 64-bit words: the kernarg address and the timeline value (byte offsets)
        self.ka_o, self.value_o = 4 * (self.ka_idx or 0), 4 * self.value
        if self.pkt_off is not None:                         # the AQL packet names the kernarg address at 40
            self.pkt = bytearray(dev.kernargs.read(out["kernarg"] + self.pkt_off, 64))
        self.pack = kernel.packer(self, args, self.blob)      # pack(mv, off, args): this launch's kernel arguments
        # a plain launch's ring write: the template with its two patches as one struct pack of (head, kernarg
        # address, mid, value, tail); None if the kernarg address does not come first
        self.plain = None
        if self.ka_idx is not None and self.pkt_off is None and self.ka_o + 8 <= self.value_o:
            a, v, t = self.ka_o, self.value_o, self.tpl
            self.plain = struct.Struct(f"<{a}sQ{v - a - 8}sQ{self.nbytes - v - 8}s").pack_into
            self.head, self.mid, self.tail = t[:a], t[a + 8:v], t[v + 8:]

    def dwords_at(self, ka: int, mv, off: int, kernel, args: tuple) -> np.ndarray:
        """The plan's dwords for a launch whose kernel arguments live at GPU address ka (= mv[off:])."""
        kernel.pack_into(self, args, mv, off)
        dw = self.dw.copy()
        if self.ka_idx is not None:
            dw[self.ka_idx], dw[self.ka_idx + 1] = ka & 0xFFFFFFFF, ka >> 32
        if self.pkt_off is not None:
            pa = ka + self.pkt_off
            pkt = bytearray(self.pkt)
            struct.pack_into("<Q", pkt, 40, ka)
            mv[off + self.pkt_off:off + self.pkt_off + 64] = pkt
            dw[self.pkt_idx], dw[self.pkt_idx + 1] = pa & 0xFFFFFFFF, pa >> 32
        return dw


class PM4Bound:
    """A kernel launch (arguments included) bound into an indirect buffer: resubmitting writes one 4-dword
    INDIRECT_BUFFER packet and the 8-dword completion signal to the ring."""

    def __init__(self, queue: PM4Queue, kernel, args: tuple, grid, block, shared_mem: int = 0):
        dev = queue.dev
        self.queue, self.kernel, self.grid, self.block = queue, kernel, grid, block
        p = queue.plan(kernel, args, grid, block, False, shared_mem)
        self.grew = dev.take_growth()
        self.kalloc = dev.allocator.alloc(p.size, "gtt")         # its own kernargs: the ring moves on
        dw = p.dwords_at(self.kalloc.va, self.kalloc.cpu.mv, 0, kernel, args)
        self.kalloc.cpu.wrote(0, p.size)
        # the work lives in the IB; the completion signal goes to the ring with each submission, because a
        # value patched into a shared IB would be wrong as soon as two submissions are in flight
        self.ib_alloc = dev.allocator.alloc(p.work * 4, "gtt", uncached=True)
        self.ib_alloc.cpu.mv[:p.work * 4] = dw[:p.work].tobytes()
        self.ib_alloc.cpu.wrote(0, p.work * 4)
        ib = pm4.table(queue.gen).encode("INDIRECT_BUFFER", shader_type=1, IB_BASE=self.ib_alloc.va, IB_SIZE=p.work,
                                         VALID=1)
        self.tail = np.concatenate([np.array(ib, np.uint32), dw[p.work:]])
        self.vi = len(ib) + (p.value - p.work)
        self.tpl, self.n, self.nbytes, self.vo = self.tail.tobytes(), len(self.tail), 4 * len(self.tail), 4 * self.vi
        # the tail with its value, as one struct pack of (head, value, rest)
        self._put = struct.Struct(f"<{self.vo}sQ{self.nbytes - self.vo - 8}s").pack_into
        self._head, self._rest = self.tpl[:self.vo], self.tpl[self.vo + 8:]
        self._prg, self._dev, self._lock = kernel.prg, dev, dev.lock

    def submit(self) -> "Launch":
        """Run it again; returns its Launch handle (`.value` is the timeline value that marks its completion).
        Writes the 12-dword tail (INDIRECT_BUFFER, completion signal) from its template, the value patched in
        the ring, and rings the doorbell once."""
        prg = self._prg
        if prg._freed or prg.code.alloc is None or self.ib_alloc is None:
            self._refuse()
        t0 = _clock()
        q = self.queue
        lock = self._lock                       # what Device.submitting does, inline: a hot path
        lock.acquire()
        try:
            if self._dev.closed:
                self._dev._check()
            t = q.timeline
            v = t.value                         # (also the mark a failed submission gives back)
            n = self.n                          # (PM4Queue.put, inline: the hot path)
            w = q.wptr
            if w + n > q._limit:
                q.room(n)
            if t.moves[0] - v != t.ordered or not (v + 1) & 0xFFFFFFFF:
                value = t.next()                # the ordering hook (Timeline.next)
                if q.wptr != w:                 # it queued waits in front: room again
                    q.room(n)
                    w = q.wptr
            else:                               # nothing to order (Timeline.next without its hook, inline)
                t.moves[0] += 1
                t.value = value = v + 1
            i = w % q.ring_dw
            if i + n > q.ring_dw:
                q._write_patched(self.tpl, self.vo, value)
            else:
                self._put(q._rmv, 4 * i, self._head, value, self._rest)
                if q._ring_wrote is not None:
                    q._ring_wrote(4 * i, self.nbytes)
                q.wptr = w = w + n
                q._set_wptr(w)
                q._ring_bell(w)
        except GPUTimeout as e:
            self._dev._submit_failed(q, v, e)
            raise
        finally:
            lock.release()
        h = _new(Launch)                        # (Launch(q, value, info) without its __init__ call)
        h.queue, h.value, h._rec = q, value, None
        if self.grew is None:
            h._info = (self, t0, _clock())
        else:                                   # the first submission carries the bind's growth
            h._info = (self, t0, _clock(), self.grew)
            self.grew = None
        return h

    def _refuse(self) -> None:
        """Raise why this bound launch cannot be submitted (its program or itself freed)."""
        prg = self._prg
        if prg._freed or prg.code.freed:
            raise InvalidArgument(f"kernel {self.kernel.name}: its program was freed; bind a loaded one")
        raise InvalidArgument(f"kernel {self.kernel.name}: this bound launch was freed; bind it again")

    def free(self) -> None:
        """Give the bound launch's memory back (after the GPU finished with it); idempotent."""
        if self.ib_alloc is None:
            return
        q = self.queue
        q.dev.wait(q.timeline.value, queue=q, errors=False)
        q.dev.allocator.free(self.ib_alloc)
        q.dev.allocator.free(self.kalloc)
        self.ib_alloc = self.kalloc = None
