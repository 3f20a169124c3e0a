"""The command processor's compute queues: PM4 packets from a ring (and indirect buffers) turned into
register writes, dispatches, memory writes, waits and interrupts.

Packets are decoded with amdq.hw.pm4, the same tables the driver encodes with. The queue's read
pointer counts dwords consumed and is reported to the address the driver gave; it moves past a
packet only when the packet has finished, so a hung queue's read pointer names the stuck packet.

The fixed cost per packet is kept small the way a real CP keeps it: the packet's size comes from its
header, so only that many dwords are read; a packet whose dwords were seen before is not decoded again
(decoding is a pure function of the dwords), nor are the control dwords of one that differs only in its value
dwords (a launch's timestamp address, its kernel-argument pointer); a run of register writes seen before retires
in one loop; the ring, the read-pointer report and other small CP
accesses keep their translation until the VM context's TLB is invalidated (as the CP's UTCL2 does),
so a remapped or unmapped ring still faults after the driver's invalidate.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..errors import AmdqError, GPUFault
from ..hw import faults as F
from ..hw import pm4, regs
from ..hw.kd import LDS_GRANULE
from ..hw.targets import GENERATIONS
from .engine import QueueEngine
from .shader.core import DispatchRegs
from .shader.memory import load, store

# the packets the compute CP executes: name -> its handler method (bound per queue, so a subclass may override one)
HANDLERS = {"NOP": "_nothing", "TYPE2": "_nothing", "EVENT_WRITE": "_nothing", "SET_SH_REG": "_set_regs",
            "SET_UCONFIG_REG": "_set_regs", "SET_SH_REG_INDEX": "_set_regs", "DISPATCH_DIRECT": "_dispatch_direct",
            "ACQUIRE_MEM": "_acquire_mem", "RELEASE_MEM": "_release_mem", "WAIT_REG_MEM": "_wait_reg_mem",
            "WRITE_DATA": "_write_data", "INDIRECT_BUFFER": "_indirect_buffer"}
PACKET_MEMO = 1 << 12          # decoded packets remembered per queue (by their dwords)
MEMO_DWORDS = 64               # longer packets are decoded every time (large IBs of data, WRITE_DATA blobs)
RUNS = 256                     # runs of register packets remembered per ring (PM4Queue._write_registers)
_TYPE, _COUNT = pm4.HEADER["TYPE"], pm4.HEADER["COUNT"]
_TYPE_MASK, _TYPE_LO, _COUNT_MASK, _COUNT_LO = _TYPE.mask, _TYPE.lo, _COUNT.mask, _COUNT.lo
_NOP1 = pm4.NOP_ONE_DWORD_COUNT
_OP_MASK, _OP_LO = pm4.HEADER["IT_OPCODE"].mask, pm4.HEADER["IT_OPCODE"].lo


def packet_size(h: int) -> int | None:
    """Dwords of the packet whose header is `h` (the type-3 COUNT + 2, a type-2 filler or a one-dword NOP: 1);
    None for a header the decoder will refuse."""
    t = (h & _TYPE_MASK) >> _TYPE_LO
    if t == 2:
        return 1
    if t != 3:
        return None
    c = (h & _COUNT_MASK) >> _COUNT_LO
    return 1 if c == _NOP1 else c + 2


def _reg_writes(f: dict):
    """(register, value) of each write of a register packet's fields (REG, VALUES): SET_SH_REG & co."""
    return zip(range(f["REG"], f["REG"] + len(f["VALUES"])), f["VALUES"])


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
        self.at = SimpleNamespace(**{n[len("COMPUTE_"):]: self.map[n].address(bases) for n in self.NAMES})
        self.initiator = self.map.regCOMPUTE_DISPATCH_INITIATOR
        self.tmpring = self.map.regCOMPUTE_TMPRING_SIZE
        self.rsrc2 = self.map.regCOMPUTE_PGM_RSRC2
        self.num_thread = self.map.regCOMPUTE_NUM_THREAD_X


def _ib(dws: np.ndarray, base: int) -> list:
    """An indirect buffer on the CP's stack: [dwords, position, base address, the dwords as a memoryview (Python
    ints), their bytes (memo keys)]."""
    ints = memoryview(dws)
    return [dws, 0, base, ints, ints.cast("B")]


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
        self.ibs: list[list] = []                 # stack of _ib(): [dwords, position, base address, ...]
        self.running = None                       # shader Run of the current dispatch
        self.dispatches = 0
        self.last_stats = None
        self.last_index = -1                      # AQL index of the dispatch last_stats describes
        self._waves = 0                           # waves of finished dispatches
        self._cur = None
        self._memo: dict[bytes, pm4.Packet] = {}  # decoded packets by their dwords
        self._tails: dict[tuple[bytes, int], pm4.Packet] = {}   # packets with a tail by their head dwords and size
        self._heads: dict[tuple, pm4.Packet] = {}  # packets of value words by their header and control dwords
        self._nfixed: dict[int, int | None] = {}  # IT_OPCODE -> dwords before the tail (None: no tail)
        self._views: dict[tuple[int, int, bool], np.ndarray] = {}   # (va, bytes, write) -> host view
        self._views_tlb = None                    # the MMU's TLB the views were translated with
        self._dispatch_memo: dict[tuple, tuple] = {}
        self._handlers = {name: getattr(self, m) for name, m in HANDLERS.items()}
        self.pm4.prepare(HANDLERS)                # (its decoders compiled with the queue, not in its first dispatch)
        # the packets that only write registers, retired in runs from a ring (PM4Queue._write_registers)
        # (each a header, one word naming the register, the values)
        self._reg_packets = frozenset(n for n, m in HANDLERS.items() if m == "_set_regs" and n in self.pm4.layouts
                                      and len(self.pm4.layouts[n].words) == 1) \
            if type(self)._set_regs is PM4Executor._set_regs else frozenset()

    @property
    def pm4_active(self) -> bool:
        """PM4 work in progress: an indirect buffer not yet consumed or a dispatch still running."""
        return bool(self.ibs) or self.running is not None

    def push_ib(self, dws, base: int) -> None:
        """Execute these dwords (found at GPU address `base`) next, as an indirect buffer."""
        dws = np.ascontiguousarray(dws, np.uint32)
        self.ibs.append(_ib(dws, base))

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
        handlers = self._handlers
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
                self._size = pkt.size       # its handler by name: True when it finished
                h = handlers.get(pkt.name)
                if h is None:
                    self._bad(f"unsupported PM4 packet {pkt.name} (opcode {pkt.opcode:#x})")
                    return work
                if not h(pkt.fields) or self.exception is not None:
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
            dws, pos, base, ints, raw = self.ibs[-1]
            if pos < len(dws):
                self._cur = ("ib", pos, base)
                p = self._seen(ints, raw, pos, len(dws))
                return p if p is not None else self._decode(dws, pos, ("IB", base, pos))
            self.ibs.pop()
            self._cur = None
        return self._ring_packet()

    def _ring_packet(self):
        return None                               # no ring of its own: IBs only

    def _seen(self, ints: memoryview, raw: memoryview, pos: int, end: int):
        """The packet at dword `pos` of these dwords (as Python ints, and their bytes) when it was decoded before,
        else None: its header sizes it, and only those dwords (below `end`) are read, as one bytes key. A packet of
        value words (an address, a fence value) whose header and control dwords were seen before costs only the
        decode of its value words: the timestamp and fence of each launch do not fill the memo."""
        h = ints[pos]                           # (packet_size, inline: every packet passes here)
        t = (h & _TYPE_MASK) >> _TYPE_LO
        if t == 3:
            c = (h & _COUNT_MASK) >> _COUNT_LO
            size = 1 if c == _NOP1 else c + 2
        else:
            size = 1 if t == 2 else MEMO_DWORDS + 1
        if size <= MEMO_DWORDS and pos + size <= end:
            key = raw[4 * pos:4 * (pos + size)].tobytes()
            p = self._memo.get(key)
            if p is None:
                hp = self.pm4.head(h)
                if hp is not None:
                    seen = self._heads.get(hp[0](ints, pos))
                    if seen is not None:
                        p = pm4.Packet(seen.name, seen.opcode, {**seen.fields, **hp[1](ints, pos + 1)}, seen.size,
                                       seen.shader_type, seen.predicate)
                        self._remember(key, p)
            return p
        return None

    def _decode(self, dws, pos: int, where: tuple):
        """The packet at dws[pos] (None after a bad packet stopped the queue); `where` names the place for a
        report: ("ring dword", index) or ("IB", base address, dword)."""
        size = packet_size(int(dws[pos])) if 0 <= pos < len(dws) else None
        key = None
        if size is not None and size <= MEMO_DWORDS and pos + size <= len(dws):
            key = dws[pos:pos + size].tobytes()
            p = self._memo.get(key)
            if p is not None:
                return p
        if key is not None:                     # a packet of fixed words: its compiled decoder over the body
            plan = self.pm4.fixed(int(dws[pos]))
            if plan is not None:
                name, op, n, fast, st, pred = plan
                w = dws[pos:pos + n].tolist()
                p = pm4.Packet(name, op, fast(w[1:]), n, st, pred)
                self._remember(key, p)
                hp = self.pm4.head(w[0])
                if hp is not None:
                    self._remember_head(hp[0](w, 0), p)
                return p
        nf = self._fixed_words(int(dws[pos])) if key is not None else None
        if nf is not None and size > 1 + nf:
            p = self._with_tail(dws, pos, size, nf)
            if p is not None:
                self._remember(key, p)
                return p
        try:                                    # a packet of known size: its dwords as Python ints, read once
            p = self.pm4.decode(dws[pos:pos + size].tolist()) if key is not None else None
        except pm4.BadPacket:
            p = None
        if p is None:                           # else (or a bad one) in its stream: a BadPacket names the dword there
            try:
                p = self.pm4.decode(dws, pos)
            except pm4.BadPacket as e:
                at = f"ring dword {where[1]}" if where[0] != "IB" else f"IB @ {where[1]:#x} dword {where[2]}"
                self._bad(f"bad PM4 packet at {at}: {e}")
                return None
        if nf is not None and size > 1 + nf:
            self._tails[(dws[pos:pos + 1 + nf].tobytes(), size)] = p
        if key is not None:
            self._remember(key, p)
        return p

    def _remember(self, key: bytes, p) -> None:
        if len(self._memo) >= PACKET_MEMO:
            self._memo.clear()
            self._tails.clear()
        self._memo[key] = p

    def _remember_head(self, key: tuple, p) -> None:
        if len(self._heads) >= PACKET_MEMO:
            self._heads.clear()
        self._heads[key] = p

    def _fixed_words(self, h: int) -> int | None:
        """Body dwords before the tail (SET_SH_REG's VALUES, WRITE_DATA's DATA) of a type-3 packet with header h
        whose layout ends in one; None for any other."""
        op = (h & _OP_MASK) >> _OP_LO
        nf = self._nfixed.get(op, -1)
        if nf == -1:
            lay = self.pm4.layouts.get(self.pm4.names.get(op, ""))
            nf = self._nfixed[op] = len(lay.words) if lay is not None and lay.tail else None
        return nf if (h & _TYPE_MASK) >> _TYPE_LO == 3 else None

    def _with_tail(self, dws, pos: int, size: int, nf: int):
        """The packet whose header and fixed dwords were decoded before, with these tail dwords (decoding is a pure
        function of the dwords and a tail's values are not read by any other field: the kernel-argument address
        of each launch costs no decode). None when that head was not seen."""
        t = self._tails.get((dws[pos:pos + 1 + nf].tobytes(), size))
        if t is None:
            return None
        tail = self.pm4.layouts[t.name].tail
        return pm4.Packet(t.name, t.opcode, {**t.fields, tail: [int(x) & 0xFFFFFFFF for x in dws[pos + 1 + nf:pos + size]]},
                          t.size, t.shader_type, t.predicate)

    def _view(self, va: int, nbytes: int, write: bool = False) -> np.ndarray:
        """The host bytes behind [va, va + nbytes) for a CP access, translated once per TLB generation (a
        translation is kept until the driver invalidates the context's TLB, as the CP's own TLB keeps it).
        Raises the GPU page fault of the MMU for an unmapped or read-only range."""
        tlb = self.mmu._tlb                       # replaced whole by every invalidate
        if tlb is not self._views_tlb:
            self._views, self._views_tlb = {}, tlb
        o = va & 4095
        if o + nbytes <= 4096:                    # within one page (the unit of mapping): the page's view
            page = self._views.get((va - o, write))
            if page is None:
                try:
                    page = self._translated(va - o, 4096, write)
                except GPUFault:
                    self._translated(va, nbytes, write)     # the fault names the address accessed
                    raise
                self._views[(va - o, write)] = page
            return page[o:o + nbytes]
        key = (va, nbytes, write)
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = self._translated(va, nbytes, write)
        return v

    def _translated(self, va: int, nbytes: int, write: bool) -> np.ndarray:
        """A host view of [va, va + nbytes), through the MMU (its fault when it does not translate)."""
        chunks = self.mmu.translate(np.array([va], np.uint64), nbytes, write, "CP")
        if len(chunks) != 1:                      # split over memories: no single view
            raise GPUFault(f"CP access at {va:#x} spans discontiguous memory", address=va, client="CP")
        buf, _, off = chunks[0]
        return buf[int(off[0]):int(off[0]) + nbytes]

    def _store64(self, va: int, value: int) -> None:
        """An aligned 64-bit CP write (read-pointer report, timestamp, fence value)."""
        if va & 7:
            store(self.mmu, np.array([va], np.uint64), np.array([[value & 0xFFFFFFFF, value >> 32]], np.uint32), 8)
            return
        self._view(va, 8, True).view(np.uint64)[0] = value & 0xFFFFFFFFFFFFFFFF

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
    def _nothing(self, f: dict) -> bool:
        return True

    def _set_regs(self, f: dict) -> bool:
        self.regs.update(_reg_writes(f))
        return True

    def _dispatch_direct(self, f: dict) -> bool:
        self._dispatch(f["DIM_X"], f["DIM_Y"], f["DIM_Z"], f["DISPATCH_INITIATOR"])
        return True

    def _acquire_mem(self, f: dict) -> bool:
        if f.get("GLI_INV") or f.get("SH_ICACHE_ACTION_ENA"):
            self.gpu.core(self.vmid).invalidate_icache()
        return True

    def _indirect_buffer(self, f: dict) -> bool:
        n = f["IB_SIZE"]
        base = f["IB_BASE"] if "IB_BASE" in f else f["IB_BASE_LO"] | f["IB_BASE_HI"] << 32
        dws = self._fetch_ib(base, n)
        self._finish_packet()                     # the IB packet itself is consumed now
        self._size = 0
        self.ibs.append(_ib(dws, base if n else 0))
        return True

    def _fetch_ib(self, base: int, n: int) -> np.ndarray:
        """The n dwords of an indirect buffer at `base`, as the CP's fetcher reads them (a copy): one translation
        when one mapped run holds them all, else through the MMU lane by lane (which faults where they are not
        mapped)."""
        if not n:
            return np.zeros(0, np.uint32)
        one = self.mmu.translate_one(base, 4 * n, False) if not base & 3 else None
        if one is not None:
            buf, o = one
            return buf[o:o + 4 * n].view(np.uint32).copy()
        return np.ascontiguousarray(load(self.mmu, np.arange(n, dtype=np.uint64) * np.uint64(4) + np.uint64(base), 4)[:, 0])

    def _release_mem(self, f: dict) -> bool:
        addr = f["ADDR"] if "ADDR" in f else f["ADDR_LO"] | f["ADDR_HI"] << 32
        sel = f["DATA_SEL"]
        if sel in (1, 2, 3, 4):
            data = f["DATA"] if "DATA" in f else f["DATA_LO"] | f["DATA_HI"] << 32
            if sel >= 3:
                data = self.gpu.clock()
            n = 4 if sel == 1 else 8
            if n == 8 and not addr & 7:
                self._store64(addr, data)
            else:
                store(self.mmu, np.array([addr], np.uint64),
                      np.array([[data & 0xFFFFFFFF, data >> 32]], np.uint32)[:, :n // 4], n)
        if f["INT_SEL"]:
            self.gpu.interrupt("CP_EOP", f["INT_CTXID"], self.vmid, queue=self.name)
        return True

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

    def _write_data(self, f: dict) -> bool:
        data = list(f.get("DATA", []))
        addr = f["ADDR"] if "ADDR" in f else f["ADDR_LO"] | f["ADDR_HI"] << 32
        if f["DST_SEL"] == 0:
            for k, v in enumerate(data):
                self.regs[(addr if not f["ADDR_INCR"] else addr) + (0 if f["ADDR_INCR"] else k)] = v
            return True
        if data:
            if f["ADDR_INCR"]:                    # one address: every dword lands on it in turn
                store(self.mmu, np.array([addr], np.uint64), np.array([[data[-1]]], np.uint32), 4)
            else:
                a = np.uint64(addr) + np.arange(len(data), dtype=np.uint64) * np.uint64(4)
                store(self.mmu, a, np.array(data, np.uint32)[:, None], 4)
        return True

    def _dispatch(self, gx: int, gy: int, gz: int, initiator: int) -> None:
        r = self.regs.get
        a = self.cregs.at
        key = (initiator, r(a.NUM_THREAD_X, 0), r(a.NUM_THREAD_Y, 0), r(a.NUM_THREAD_Z, 0), r(a.PGM_RSRC2, 0),
               r(a.TMPRING_SIZE, 0))
        fixed = self._dispatch_memo.get(key)
        if fixed is None:                       # the register fields, decoded once per distinct register state
            c = self.cregs
            ini = c.initiator.decode(initiator)
            nt = [c.num_thread.decode(v) for v in key[1:4]]
            block = tuple(max(1, t["NUM_THREAD_FULL"]) for t in nt)
            partial = tuple(t["NUM_THREAD_PARTIAL"] if ini.get("PARTIAL_TG_EN") else 0 for t in nt)
            tmp = c.tmpring.decode(key[5])
            rsrc2 = c.rsrc2.decode(key[4])
            gen = self.gpu.target.gen
            fixed = (block, partial, not ini.get("CS_W32_EN", 0) if gen.wave32 else True,
                     rsrc2["LDS_SIZE"] * LDS_GRANULE, tmp["WAVESIZE"] * gen.scratch_unit, tmp["WAVES"],
                     min(rsrc2["USER_SGPR"], 16))
            if len(self._dispatch_memo) >= 256:
                self._dispatch_memo.clear()
            self._dispatch_memo[key] = fixed
        block, partial, wave64, lds_bytes, wave_bytes, waves, nuser = fixed
        pgm = (r(a.PGM_LO, 0) | r(a.PGM_HI, 0) << 32) << 8
        scratch = (r(a.DISPATCH_SCRATCH_BASE_LO, 0) | r(a.DISPATCH_SCRATCH_BASE_HI, 0) << 32) << 8
        u0 = a.USER_DATA_0                      # (the SPI loads the USER_SGPR count RSRC2 names, no more)
        d = DispatchRegs(
            pgm_addr=pgm, rsrc1=r(a.PGM_RSRC1, 0), rsrc2=key[4], rsrc3=r(a.PGM_RSRC3, 0),
            grid=(gx, gy, gz), block=block, user_data=[r(u0 + i, 0) for i in range(nuser)], wave64=wave64,
            lds_bytes=lds_bytes, scratch_base=scratch, scratch_wave_bytes=wave_bytes, scratch_waves=waves,
            start=(r(a.START_X, 0), r(a.START_Y, 0), r(a.START_Z, 0)), partial=partial, gfx=self.gen,
            isa=self.gpu.target.isa)
        if gx * gy * gz == 0:
            return
        if self.gpu.inject.armed and self.gpu.inject.take("kill_wave") is not None:
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
        self._reported = 0                           # the read pointer last written to rptr_va
        self._ring_dws: np.ndarray | None = None     # the ring as dwords (valid with _views_tlb)
        self._ring_mv = self._ring_b = None           # the same as a memoryview of dwords, and of bytes
        self._runs: dict[bytes, tuple] = {}          # first packet's dwords -> (dwords, their bytes, writes, packets)

    # -- engine protocol ----------------------------------------------------------------------
    def doorbell(self, value: int) -> None:
        self.wptr = int(value)

    def step(self, budget: int) -> int:
        """PM4Executor.step, with the read pointer reported once at the end of the slice (and so also where the
        queue stopped or blocked) rather than after every packet: the host sees it between slices, as it sees
        everything else the slice did."""
        try:
            return super().step(budget)
        finally:
            if self._reported != self.rptr:
                try:
                    self._report_rptr()
                except AmdqError as e:
                    self.stop_on(e, "CP")

    @property
    def busy(self) -> bool:
        return not self.stopped and (self.rptr != self.wptr or bool(self.ibs) or self.running is not None)

    # -- fetching ------------------------------------------------------------------------------
    def _ring(self) -> np.ndarray:
        if self._views_tlb is self.mmu._tlb and self._ring_dws is not None:
            return self._ring_dws
        self._ring_dws = self._view(self.ring_va, self.ring_dw * 4).view(np.uint32)
        self._ring_mv = memoryview(self._ring_dws)              # the same bytes: dwords as Python ints, and bytes
        self._ring_b = self._ring_mv.cast("B")
        return self._ring_dws

    def _ring_packet(self):
        r, wptr = self.rptr, self.wptr
        if r == wptr:
            return None
        if self._views_tlb is not self.mmu._tlb or self._ring_dws is None:
            self._ring()
        if self.hang_at is None and self._reg_packets:
            r = self._write_registers(r, wptr)
            if r == wptr:
                self._cur = None
                return None
        i = r % self.ring_dw
        self._cur = ("ring", r, None)
        p = self._seen(self._ring_mv, self._ring_b, i, min(self.ring_dw, i + self.wptr - r))
        if p is not None:
            return p
        ring = self._ring_dws
        # the header says how many dwords the packet has: only those are read (a malformed header: up to 16 K)
        n = min(self.wptr - r, packet_size(self._ring_mv[i]) or 1 << 14, 1 << 14)
        window = ring[i:i + n] if i + n <= self.ring_dw else np.take(ring, np.arange(i, i + n) % self.ring_dw)
        return self._decode(window, 0, ("ring dword", i))

    def _write_registers(self, r: int, wptr: int) -> int:
        """Retire the register-write packets (SET_SH_REG & co.) decoded before that start at ring dword r, one after
        another, as the CP runs a launch's run of them; returns the read pointer after them. Each costs its memo
        lookup and its writes, with no pass through step and its handler table (what _seen and _set_regs do); a run
        of such packets whose dwords were all seen together before (a launch's fixed COMPUTE_* state) costs one
        lookup, one comparison of its dwords and one update of the registers."""
        ring_dw, mv, raw, memo, tails, regs = self.ring_dw, self._ring_mv, self._ring_b, self._memo, self._tails, self.regs
        names, runs = self._reg_packets, self._runs
        n = 0
        first = None                            # the packets seen before since: (bytes of the first, its r, writes)
        while r != wptr:
            i = r % ring_dw
            h = mv[i]
            if (h & _TYPE_MASK) >> _TYPE_LO != 3:
                break
            size = ((h & _COUNT_MASK) >> _COUNT_LO) + 2
            if size > MEMO_DWORDS or i + size > ring_dw or r + size > wptr:
                break
            key = raw[4 * i:4 * (i + size)].tobytes()
            run = runs.get(key)
            if run is not None:
                nd, blob, writes, count = run
                if i + nd <= ring_dw and r + nd <= wptr and raw[4 * i:4 * (i + nd)].tobytes() == blob:
                    self._close_run(first, r)
                    first = None
                    regs.update(writes)
                    r += nd
                    n += count
                    continue
            p = memo.get(key)
            if p is not None:
                if p.name not in names:
                    break
                regs.update(_reg_writes(p.fields))
                if first is None:
                    first = (key, r, [])
                first[2].append(p.fields)
            else:                               # new values (a launch's kernel-argument address): the packet's
                t = tails.get((raw[4 * i:4 * (i + 2)].tobytes(), size))     # header and register, seen before
                if t is None or t.name not in names:
                    break
                base = t.fields["REG"]
                regs.update(zip(range(base, base + size - 2), mv[i + 2:i + size]))
                self._close_run(first, r)
                first = None
            r += size
            n += 1
        self._close_run(first, r)
        self.retired += n
        self.rptr = r
        return r

    def _close_run(self, first, end: int) -> None:
        """Remember a run of two or more register packets seen before (from `first` up to ring dword `end`)."""
        if first is None or len(first[2]) < 2:
            return
        key, start, fields = first
        i = start % self.ring_dw
        if i + end - start > self.ring_dw:
            return
        writes = {}
        for f in fields:
            writes.update(_reg_writes(f))
        if len(self._runs) >= RUNS:
            self._runs.clear()
        self._runs[key] = (end - start, self._ring_b[4 * i:4 * (i + end - start)].tobytes(), writes, len(fields))

    def _advance(self, size: int) -> None:
        self.rptr += size

    def _report_rptr(self) -> None:
        self._store64(self.rptr_va, self.rptr)
        self._reported = self.rptr

    def _where(self) -> str:
        if self._cur is None:
            return f"ring dword {self.rptr % self.ring_dw}"
        return super()._where()
