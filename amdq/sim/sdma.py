"""The SDMA engine's user queues: packets from a ring (and indirect buffers) turned into copies, fills,
memory writes, polls, timestamps and interrupts.

Packets are decoded with amdq.hw.sdma, the tables the driver encodes with (SDMA 7 uses the 6
layouts). Read and write pointers count bytes, as KFD SDMA queues do; the ring position is the pointer
modulo the ring size, and a packet never wraps (the driver pads the tail with NOPs). The read pointer
moves past a packet only when it has finished (an INDIRECT when its whole buffer has), so the pointer
of a stuck queue names the stuck packet. Every memory access goes through the MMU of the queue's VM
context; a large COPY_LINEAR is one numpy slice copy per physically contiguous run.

Slices. A step runs packets until its budget of work units is spent; a bulk transfer (COPY_LINEAR, CONSTANT_FILL:
1 unit plus 1 per MiB) counts against the budget only for its packet, and a step makes at most one: the packets
after it (its fence and trap) run in the same step, the next bulk transfer in the next step.

Counts (amdq/hw/sdma.py, NOTES 3.5): COPY_LINEAR moves count + 1 bytes; CONSTANT_FILL fills count +
element bytes (element = 1 << FILLSIZE bytes of DATA, repeated); WRITE_UNTILED writes count + 1 data
dwords. POLL_REGMEM compares (memory & mask) with value as unsigned 32-bit numbers and is re-polled on
later steps until true (the retry count is modelled as "forever"); a register poll with HDP_FLUSH is
the HDP flush idiom and passes at once (the model has no HDP cache). TRAP raises the end-of-pipe
interrupt with its INT_CONTEXT as context id. Fault injection: `gpu.inject["hang_sdma"]` stops every
SDMA queue from consuming (a hung engine).
"""
from __future__ import annotations

import numpy as np

from ..errors import AmdqError, GPUFault
from ..hw import sdma
from .engine import QueueEngine
from .memory import HUGE

FUNCS = {0: lambda v, r: True, 1: lambda v, r: v < r, 2: lambda v, r: v <= r, 3: lambda v, r: v == r,
         4: lambda v, r: v != r, 5: lambda v, r: v >= r, 6: lambda v, r: v > r}
CLIENT = "SDMA"
BULK = ("COPY_LINEAR", "CONSTANT_FILL")       # packets whose cost grows with their bytes (1 + MiB moved)


def _overlap(a: list[tuple[np.ndarray, int, int]], b: list[tuple[np.ndarray, int, int]]) -> bool:
    """Whether any piece (memory, offset, length) of `a` shares bytes with one of `b` (sorted sweep per memory)."""
    for buf in {id(x[0]): x[0] for x in a}.values():
        xs = sorted((o, o + k) for m, o, k in a if m is buf)
        ys = sorted((o, o + k) for m, o, k in b if m is buf)
        i = j = 0
        while i < len(xs) and j < len(ys):
            if xs[i][0] < ys[j][1] and ys[j][0] < xs[i][1]:
                return True
            if xs[i][1] <= ys[j][1]:
                i += 1
            else:
                j += 1
    return False


class SDMAQueue(QueueEngine):
    """One SDMA user queue (ring in host memory, byte read/write pointers, doorbell)."""

    kind = "sdma"

    def __init__(self, gpu, vmid: int, args: dict):
        super().__init__(gpu, vmid, f"SDMA queue @ {args['ring_base_address']:#x}")
        self.mmu = gpu.vm(vmid)
        self.version = gpu.target.ip["SDMA"][0]
        self.t = sdma.table(self.version)
        self.t.prepare()                          # (its decoders compiled with the queue, not in its first copy)
        self.ring_va, self.ring_bytes = args["ring_base_address"], args["ring_size"]
        self.rptr_va, self.wptr_va = args["read_pointer_address"], args["write_pointer_address"]
        self.rptr = self.wptr = 0                  # bytes, monotonic
        self.ib: list | None = None                # [dwords, position, base address] of the running IB
        self._cur = ("ring", 0)
        self.packets = 0
        self.bytes_copied = 0
        self._reported = 0                           # the read pointer last written back to rptr_va

    # -- engine protocol ----------------------------------------------------------------------
    def doorbell(self, value: int) -> None:
        self.wptr = int(value)

    @property
    def busy(self) -> bool:
        return not self.stopped and (self.rptr != self.wptr or self.ib is not None)

    def drop(self) -> None:
        self.ib = None

    def step(self, budget: int) -> int:
        """Run packets until the ring runs dry, a packet blocks, or the budget is spent; the read pointer is
        written back once, at the end of the step (the host sees it between steps, as everything else)."""
        try:
            return self._step(budget)
        finally:
            if self._reported != self.rptr and self.rptr_va is not None:
                try:
                    self._write(self.rptr_va, np.array([self.rptr], np.uint64).view(np.uint8))
                    self._reported = self.rptr
                except AmdqError as e:
                    self.stop_on(e, CLIENT)

    def _step(self, budget: int) -> int:
        if self.stopped:
            return 0
        work = bulk = 0                               # bulk: the cost of the one bulk transfer this step made
        try:
            ring = None
            while work - bulk < budget:
                if self.hang_at is not None and self.stopped:
                    return work                       # an armed hang took hold
                if self.ib is not None:
                    dws, pos, base = self.ib
                    if pos >= len(dws):               # the IB is done: the INDIRECT packet retires
                        self.ib = None
                        self._retire(self._ib_size)
                        work += 1
                        continue
                    p = self._decode(dws, pos, "ib", pos)
                else:
                    if self.rptr == self.wptr:
                        return work
                    if ring is None:
                        ring = self._ring()
                    i = (self.rptr % self.ring_bytes) // 4
                    avail = (self.wptr - self.rptr) // 4
                    p = self._decode(ring[i:i + min(avail, len(ring) - i)], 0, "ring", self.rptr % self.ring_bytes)
                if p is None:
                    return max(work, 1)
                if bulk and p.name in BULK:
                    return work                       # one bulk transfer per step: the next waits for the next slice
                cost = self._execute(p)
                if cost is None or self.exception is not None:      # blocked (POLL_REGMEM) or stopped
                    return work
                self.packets += 1
                if self.ib is not None and p.name != "INDIRECT":
                    self.ib[1] += p.size
                elif p.name != "INDIRECT":
                    self._retire(p.size)
                if p.name in BULK:
                    bulk = cost - 1
                work += cost
        except AmdqError as e:
            self.stop_on(e, CLIENT)
            return max(work, 1)
        return work

    # -- fetching ------------------------------------------------------------------------------
    def _ring(self) -> np.ndarray:
        parts = self._pieces(self.ring_va, self.ring_bytes, False)
        if len(parts) != 1:
            raise GPUFault(f"SDMA ring at {self.ring_va:#x} is not physically contiguous", address=self.ring_va)
        buf, off, n = parts[0]
        return buf[off:off + n].view(np.uint32)

    def _decode(self, dws, pos: int, where: str, offset: int):
        self._cur = (where, offset)
        try:
            return self.t.decode(dws, pos)
        except sdma.BadPacket as e:
            self._bad(f"bad SDMA packet at {self._where()}: {e}")
            return None

    def _retire(self, dwords: int) -> None:
        self.retired += 1
        self.rptr += dwords * 4                      # (written back at the end of the step; rptr_va None: never)

    def _where(self) -> str:
        where, off = self._cur
        return f"ring byte {off}" if where == "ring" else f"IB dword {off}"

    def _bad(self, reason: str) -> None:
        self.bad_packet(reason, self._where())

    # -- memory through the MMU ----------------------------------------------------------------
    def _pieces(self, va: int, n: int, write: bool) -> list[tuple[np.ndarray, int, int]]:
        """(backing array, offset, length) covering [va, va + n), one per physically contiguous run.
        Raises GPUFault naming the first unmapped (or, for a write, read-only) byte."""
        out, end = [], va + n
        while va < end:
            r = self.mmu._run_for(va)
            if r is None:
                raise self.mmu.fault(va, write, CLIENT)
            if write and not r.writable:
                raise self.mmu.fault(va, write, CLIENT, "page is read-only")
            k, off = min(end, r.end) - va, r.pa + va - r.va
            if out and out[-1][0] is r.arena.buf and out[-1][1] + out[-1][2] == off:
                out[-1] = (r.arena.buf, out[-1][1], out[-1][2] + k)     # physically contiguous: one piece
            else:
                out.append((r.arena.buf, off, k))
            va += k
        return out

    def _read(self, va: int, n: int) -> np.ndarray:
        parts = [b[o:o + k] for b, o, k in self._pieces(va, n, False)]
        return parts[0].copy() if len(parts) == 1 else np.concatenate(parts)

    def _write(self, va: int, data: np.ndarray) -> None:
        hit = self.mmu.translate_one(va, len(data), True)
        if hit is not None:                            # one translated run holds it (a fence, a read pointer)
            b, o = hit
            b[o:o + len(data)] = data
            return
        pos = 0
        for b, o, k in self._pieces(va, len(data), True):
            b[o:o + k] = data[pos:pos + k]
            pos += k

    def _copy(self, dst: int, src: int, n: int) -> None:
        """n bytes from src to dst, as a few slice copies (numpy makes overlapping ones behave as memmove)."""
        sp, dp = self._pieces(src, n, False), self._pieces(dst, n, True)
        vram = self.gpu.vram
        for b, o, k in dp:
            if k >= HUGE and b is vram.buf:
                vram.advise_huge(o, k)                 # a large destination in VRAM: on huge pages (sim/memory.py)
        if len(sp) == 1 and len(dp) == 1:
            (sb, so, _), (db, do, _) = sp[0], dp[0]
            db[do:do + n] = sb[so:so + n]
            return
        if _overlap(sp, dp):
            data = self._read(src, n)                  # source and destination bytes overlap: read everything first
            self._write(dst, data)
            return
        si = di = 0
        so, do = sp[0][1], dp[0][1]
        sl, dl = sp[0][2], dp[0][2]
        while n:
            k = min(sl, dl, n)
            dp[di][0][do:do + k] = sp[si][0][so:so + k]
            n, so, do, sl, dl = n - k, so + k, do + k, sl - k, dl - k
            if sl == 0 and n:
                si += 1
                so, sl = sp[si][1], sp[si][2]
            if dl == 0 and n:
                di += 1
                do, dl = dp[di][1], dp[di][2]

    # -- packets -------------------------------------------------------------------------------
    def _execute(self, p) -> int | None:
        """Run one packet: its cost in work units, or None if the queue blocked or faulted."""
        f, name = p.fields, p.name
        if name in ("NOP", "GCR_REQ"):
            return 1
        if name == "COPY_LINEAR":
            n = f["count"] + 1
            self._copy(f["dst_addr"], f["src_addr"], n)
            self.bytes_copied += n
            return 1 + (n >> 20)
        if name == "CONSTANT_FILL":
            return self._fill(f)
        if name == "WRITE_UNTILED":
            data = np.array(f["data"], np.uint32)
            self._write(f["dst_addr"], data.view(np.uint8))
            return 1
        if name == "FENCE":
            self._write(f["addr"], np.array([f["data"]], np.uint32).view(np.uint8))
            return 1
        if name == "TRAP":
            self.gpu.interrupt("CP_EOP", f["int_context"], self.vmid, queue=self.name)
            return 1
        if name == "POLL_REGMEM":
            return self._poll(f)
        if name in ("TIMESTAMP_GET", "TIMESTAMP_GET_GLOBAL"):
            self._write(f["write_addr"], np.array([self.gpu.clock()], np.uint64).view(np.uint8))
            return 1
        if name == "TIMESTAMP_SET":
            return 1
        if name == "INDIRECT":
            if self.ib is not None:
                self._bad(f"INDIRECT inside an indirect buffer (IB @ {self.ib[2]:#x} dword {self.ib[1]})")
                return None
            n, base = f["ib_size"], f["ib_base"]
            dws = self._read(base, 4 * n).view(np.uint32) if n else np.zeros(0, np.uint32)
            self.ib, self._ib_size = [dws, 0, base], p.size
            return 1
        self._bad(f"unsupported SDMA packet {name} (op {p.op}, sub_op {p.sub_op})")
        return None

    def _fill(self, f: dict) -> int | None:
        if f["fillsize"] == 3:
            self._bad("CONSTANT_FILL with reserved FILLSIZE 3")
            return None
        elem = 1 << f["fillsize"]
        n = f["count"] + elem
        pattern = np.array([f["src_data_31_0"]], np.uint32).view(np.uint8)[:elem]
        pos = 0
        for b, o, k in self._pieces(f["dst_addr"], n, True):
            ph = np.roll(pattern, -(pos % elem))
            b[o:o + k] = ph[0] if elem == 1 else np.tile(ph, k // elem + 1)[:k]
            pos += k
        return 1 + (n >> 20)

    def _poll(self, f: dict) -> int | None:
        fn = FUNCS.get(f["func"])
        if fn is None:
            self._bad(f"POLL_REGMEM with reserved FUNC {f['func']}")
            return None
        if not f["mem_poll"]:
            if f["hdp_flush"]:
                return 1
            self._bad("POLL_REGMEM on a register (only memory polls are modelled)")
            return None
        v = int(self._read(f["addr"] & ~3, 4).view(np.uint32)[0])
        return 1 if fn(v & f["mask"], f["value"]) else None
