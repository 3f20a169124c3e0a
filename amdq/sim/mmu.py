"""The GPU's MMU: walks the page tables the driver wrote (4 levels, 48-bit VA, 4 KiB pages) and turns
per-lane virtual addresses into locations in VRAM or system memory.

PTE/PDE format: amdq.hw.vm (Linux amdgpu_vm.h): VALID, SYSTEM, READABLE, WRITEABLE, the page frame in
bits 47:12; a PDE with the PDE-as-PTE bit (54 on gfx9-11, 63 on gfx12) maps a 2 MiB (PDB0) or 1 GiB
(PDB1) page. Translations are cached as contiguous runs; the driver's TLB flush
(`invalidate`) drops them, as on hardware.

FRAG (bits 11:7): a PTE with FRAG f says that the naturally aligned 2**f-page run holding it is mapped
contiguously with the same flags, so the TLB caches the whole run from that one PTE (amdgpu_vm_pt.c's
description of the fragment field): the walk of one page of a fragment makes the translation of every
page of it, whatever their own PTEs now say, until an invalidate.

gfx9 translate further (the form amdgpu uses on gfx9: depth 2, block size 9; amdq.hw.vm): the PDE
pointing at the last level carries a block fragment size b (BFS), so each entry of that table covers
2**b pages: without TF it is a PTE of a 2**b-page (2 MiB for b = 9) page, with TF (bit 56) it points at a
further table of 2**b 4 KiB PTEs. A BFS of 0 (every PDE the KFD path writes) leaves the plain walk.

A context's shape comes from its VM_CONTEXT registers when the simulated GMC drives it (sim/pci/gmc.py,
`configure`): PAGE_TABLE_DEPTH (levels below the root: 0 is one flat table, 3 the four levels of the
48-bit layout), PAGE_TABLE_BLOCK_SIZE (the last level indexes 9 + block_size bits), and the
PAGE_TABLE_START/END range: addresses outside it do not translate, and the walk indexes by the offset from
START (VM context 0 of the driver's own addresses starts above the framebuffer). The defaults (depth 3,
start 0, no end) are the layout of the user VMs the KFD path builds.

Physical addresses (what PDEs, PTEs and the root name) resolve through the context's `space`: one with the SYSTEM
bit is a bus address (`space.system`: host RAM or a peer's BAR on the simulated PCIe bus, sim/host.py; the
GPU's own system memory on SIMKFD), one without it a VRAM address (`space.local`: this GPU's VRAM, or with XGMI
any node's of the hive, sim/xgmi.py). Without a space, both are offsets of `sysmem` and `vram` (`Flat`).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..errors import GPUFault
from ..hw import vm
from .memory import Arena

_PTE = vm.PTE[10]                         # these bits are the same in every generation
VALID, SYSTEM, READABLE, WRITEABLE = (_PTE[f].mask for f in ("VALID", "SYSTEM", "READABLE", "WRITEABLE"))
ADDR_MASK = _PTE["ADDR"].mask
FRAG = _PTE["FRAG"]
TF = vm.PTE[9]["TF"].mask                 # gfx9 only
BFS9 = vm.PTE[9]["BFS"]


@dataclass
class Fault:
    address: int
    write: bool
    client: str
    reason: str
    vmid: int = 0


@dataclass
class Run:
    va: int
    end: int
    arena: Arena
    pa: int
    writable: bool


JIT_AHEAD = 1 << 20         # bytes of translations jit_span reads ahead


def _unique(x: np.ndarray) -> np.ndarray:
    """np.unique of a 1-d array, sorted (np.unique's first call imports numpy.ma: ~20 ms inside a dispatch)."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if len(x) else x


def _joins(a: Run, b: Run) -> bool:
    """Run b starts where run a ends, in the same memory right after it, with the same access."""
    return a.end == b.va and a.arena is b.arena and a.pa + (a.end - a.va) == b.pa and a.writable == b.writable


class Space(Protocol):
    """Where the GPU's physical addresses lead: (memory, offset in it) of `n` bytes, or None if nothing answers."""
    def system(self, addr: int, n: int) -> tuple[Arena, int] | None: ...
    def local(self, addr: int, n: int) -> tuple[Arena, int] | None: ...


def _within(arena: Arena, addr: int, n: int) -> tuple[Arena, int] | None:
    return (arena, addr) if 0 <= addr and addr + n <= arena.size else None


@dataclass
class Flat:
    """System memory and VRAM each at physical address 0 (the SIMKFD GPU; tests)."""
    vram: Arena
    sysmem: Arena

    def system(self, addr: int, n: int) -> tuple[Arena, int] | None:
        return _within(self.sysmem, addr, n)

    def local(self, addr: int, n: int) -> tuple[Arena, int] | None:
        return _within(self.vram, addr, n)


@dataclass
class MMU:
    """One VM context (VMID): its page-directory base and a cache of translations."""
    vram: Arena
    sysmem: Arena
    gfx: int = 11
    root: int | None = None              # physical (VRAM) address of the top-level page directory
    vmid: int = 0
    faults: list[Fault] = field(default_factory=list)
    depth: int = 3                       # VM_CONTEXTn_CNTL.PAGE_TABLE_DEPTH
    block_size: int = 0                  # VM_CONTEXTn_CNTL.PAGE_TABLE_BLOCK_SIZE
    start: int = 0                       # first address of the context (PAGE_TABLE_START_ADDR << 12)
    end: int | None = None               # last address (PAGE_TABLE_END_ADDR << 12 | 0xFFF); None: 48 bits
    space: Space | None = None           # where physical addresses lead (None: Flat over vram and sysmem)

    def __post_init__(self):
        if self.space is None:
            self.space = Flat(self.vram, self.sysmem)
        self.pde_pte = vm.PTE[vm.generation(self.gfx)]["PDE_PTE"].mask
        # the TLB: (run starts, runs), sorted; replaced whole by an invalidation (another thread's) and read once
        # per lookup, so a lookup in flight finishes on the translations it began with
        self._tlb: tuple[list[int], list[Run]] = ([], [])
        self._levels = self._shape()

    def _shape(self) -> tuple[tuple[int, int], ...]:
        """(shift, index mask) per level, root first; the root's index is not masked (its table holds
        as many entries as the range needs)."""
        if not 0 <= self.depth <= 3 or not 0 <= self.block_size <= 15:
            raise ValueError(f"page-table depth {self.depth} / block size {self.block_size} out of range")
        shifts = [12] + [12 + 9 + self.block_size + 9 * i for i in range(self.depth)]
        widths = [9 + self.block_size] + [9] * self.depth
        levels = [(sh, (1 << w) - 1) for sh, w in zip(shifts, widths)][::-1]
        levels[0] = (levels[0][0], -1)
        return tuple(levels)

    def configure(self, *, root: int | None, depth: int, block_size: int, start: int, end: int | None) -> None:
        """The context as its VM_CONTEXT registers now describe it. Like the hardware, this does not drop
        cached translations: only an invalidate request does."""
        self.root, self.depth, self.block_size, self.start, self.end = root, depth, block_size, start, end
        self._levels = self._shape()

    def set_root(self, pa: int) -> None:
        self.root = pa
        self.invalidate()

    def invalidate(self, last: int | None = None) -> None:
        """Drop cached translations (those starting at or below address `last`, all when None)."""
        if last is None:
            self._tlb = ([], [])
            return
        starts, runs = self._tlb
        keep = [(s, r) for s, r in zip(starts, runs) if s > last]
        self._tlb = ([s for s, _ in keep], [r for _, r in keep])

    # -- walking -------------------------------------------------------------------------------
    def walk(self, va: int) -> tuple[Arena, int, int, int] | None:
        """(arena, physical address of the page, page size, PTE) for `va`, or None if unmapped."""
        return self._walk(va)[0]

    def _walk(self, va: int) -> tuple[tuple[Arena, int, int, int] | None, tuple[int, int] | None]:
        """walk(va), and (page table, index) of the PTE when it is a 4 KiB entry of a page table (else None)."""
        if self.root is None or va >> 48 or va < self.start or (self.end is not None and va > self.end):
            return None, None
        table, off, bfs = self.root, va - self.start, 0
        for shift, mask in self._levels:
            if shift == 12 and bfs:                  # gfx9 translate further: entries of 2**bfs pages
                e = self._entry(table, (off >> (12 + bfs)) & (mask >> bfs))
                if e is None:
                    return None, None
                if not e & TF:
                    return self._page(e, 12 + bfs), None
                table, idx = e & ADDR_MASK, (off >> 12) & ((1 << bfs) - 1)
                e = self._entry(table, idx)
                return (None, None) if e is None else (self._page(e, 12), (table, idx))
            idx = (off >> shift) & mask
            e = self._entry(table, idx)
            if e is None:
                return None, None
            if shift == 12:
                return self._page(e, shift), (table, idx)
            if e & self.pde_pte and self.block_size == 0 and shift in (21, 30):
                return self._page(e, shift), None
            table = e & ADDR_MASK
            bfs = BFS9.get(e) if self.gfx < 10 else 0
        return None, None

    def _entry(self, table: int, idx: int) -> int | None:
        """The valid entry `idx` of the table at physical address `table` (a VRAM address), or None."""
        hit = self.space.local(table + 8 * idx, 8)
        if hit is None:
            return None
        e = hit[0].u64(hit[1])
        return e if e & VALID else None

    def _target(self, e: int, pa: int, n: int) -> tuple[Arena, int] | None:
        """(memory, offset) of the `n` bytes at physical address `pa` as entry `e` names them (SYSTEM: the bus)."""
        return self.space.system(pa, n) if e & SYSTEM else self.space.local(pa, n)

    def _page(self, e: int, shift: int) -> tuple[Arena, int, int, int] | None:
        size = 1 << shift
        if self.start & (size - 1):                  # a huge page must start on its own alignment in the context
            return None
        hit = self._target(e, (e & ADDR_MASK) & ~(size - 1), size)
        return None if hit is None else (hit[0], hit[1], size, e)

    def _run_for(self, va: int, tlb: tuple[list[int], list[Run]] | None = None) -> Run | None:
        """The cached run holding `va`, else a walk's (cached in `tlb`, the TLB as the lookup found it)."""
        starts, runs = tlb or self._tlb
        i = bisect.bisect_right(starts, va) - 1
        if i >= 0 and va < runs[i].end:
            return runs[i]
        hit, leaf = self._walk(va)
        if hit is None:
            return None
        arena, pa, size, pte = hit
        start = va & ~(size - 1)
        frag = 1 << (12 + FRAG.get(pte))
        if frag > size and not self.start & (frag - 1):     # the PTE vouches for its whole fragment
            fstart = va & ~(frag - 1)
            fphys = ((pte & ADDR_MASK) & ~(size - 1)) - (start - fstart)
            whole = self._target(pte, fphys, frag) if fphys >= 0 else None
            if whole is not None and whole[0] is arena:      # all of it in the one memory
                start, pa, size = fstart, whole[1], frag
        elif leaf is not None:
            size = self._line(leaf, pte, arena, pa, start)
        i = bisect.bisect_right(starts, va)
        lo = runs[i - 1].end if i > 0 else 0                # never over a run already cached
        hi = starts[i] if i < len(starts) else 1 << 64
        if start < lo:
            pa, size, start = pa + (lo - start), size - (lo - start), lo
        size = min(size, hi - start)
        run = Run(start, start + size, arena, pa, bool(pte & WRITEABLE))
        # merge with physically contiguous neighbours so large buffers become one run, whatever order their pages
        # were first touched in (dies or workgroups striding through a buffer touch every other page first)
        i = bisect.bisect_right(starts, start)
        prev = runs[i - 1] if i > 0 else None
        if prev and _joins(prev, run):
            prev.end = run.end
            run, i = prev, i - 1
        else:
            starts.insert(i, start)
            runs.insert(i, run)
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        if nxt and _joins(run, nxt):
            run.end = nxt.end
            del starts[i + 1], runs[i + 1]
        return run

    def _line(self, leaf: tuple[int, int], pte: int, arena: Arena, pa: int, start: int) -> int:
        """The bytes from `start` that the PTE at leaf and the ones after it in its 64-byte line (the 8 PTEs one
        read of the walker fetches) map alike: valid, the same flags, pages physically contiguous in one memory."""
        table, idx = leaf
        k = 7 - (idx & 7)
        if not k or (self.end is not None and start + 4096 * (k + 1) - 1 > self.end):
            return 4096
        hit = self.space.local(table + 8 * (idx + 1), 8 * k)
        if hit is None:
            return 4096
        ents = hit[0].buf[hit[1]:hit[1] + 8 * k].view(np.uint64)
        flags, want, n = pte & ~ADDR_MASK, (pte & ADDR_MASK) + 4096, 1
        for e in ents.tolist():
            if e & ~ADDR_MASK != flags or e & ADDR_MASK != want:
                break
            want += 4096
            n += 1
        if n > 1:
            whole = self._target(pte, pte & ADDR_MASK, 4096 * n)
            if whole is None or whole[0] is not arena or whole[1] != pa:
                return 4096
        return 4096 * n

    def fault(self, va: int, write: bool, client: str, reason: str = "not mapped") -> GPUFault:
        f = Fault(va, write, client, reason, self.vmid)
        self.faults.append(f)
        return GPUFault(f"GPU page fault: {'write' if write else 'read'} at {va:#x} by {client} ({reason})",
                        address=va, write=write, client=client, vmid=self.vmid, reason=reason)

    # -- the shader core's memory protocol ------------------------------------------------------
    def jit_span(self, addr: int, nbytes: int, write: bool) -> tuple[int, int, int] | None:
        """(lo, hi, host address of lo): the translated run holding [addr, addr + nbytes) (writable for a write),
        which translate maps linearly; None when translate would fault or split the access (the shader JIT's
        translated-range table, sim/shader/jit/runtime.py; the interpreter then runs the access and faults)."""
        r = self._run_for(addr)
        if r is None or addr + nbytes > r.end or (write and not r.writable):
            return None
        # read ahead: the pages after it that join the run (mapped, physically contiguous, alike) are walked now, up
        # to JIT_AHEAD bytes past addr, as a TLB prefetches: a first pass over a buffer then misses once, not once
        # a page (each miss stops a compiled block and runs its memory instruction again from the first wave)
        while r.end < addr + JIT_AHEAD and not r.end >> 48 and self._run_for(r.end) is r:
            pass
        return r.va, r.end, r.arena.buf.ctypes.data + r.pa
    def translate_one(self, va: int, nbytes: int, write: bool) -> tuple[np.ndarray, int] | None:
        """(backing bytes, offset) of [va, va + nbytes) when one cached or walked run maps it all (and allows the
        write): what translate gives for one lane, without its arrays; None otherwise (translate then faults
        or splits the access)."""
        r = self._run_for(va)
        if r is None or va + nbytes > r.end or (write and not r.writable):
            return None
        return r.arena.buf, va - r.va + r.pa

    def translate(self, addr: np.ndarray, nbytes: int, write: bool, client: str = "shader") -> list:
        addr = np.asarray(addr, np.uint64)
        lo, hi = int(addr.min()), int(addr.max()) + nbytes - 1
        r = self._run_for(lo)
        if r is not None and hi < r.end:
            if write and not r.writable:
                raise self.fault(lo, write, client, "page is read-only")
            return [(r.arena.buf, None, (addr - np.uint64(r.va - r.pa)).astype(np.int64))]
        return self._translate_slow(addr, nbytes, write, client)

    def _translate_slow(self, addr: np.ndarray, nbytes: int, write: bool, client: str) -> list:
        first, last = addr >> np.uint64(12), (addr + np.uint64(nbytes - 1)) >> np.uint64(12)
        if nbytes <= 4096:
            pages = _unique(np.concatenate([first, last]))
        else:                                   # few lanes, long accesses (rings, indirect buffers)
            pages = _unique(np.concatenate([np.arange(int(f), int(l) + 1, dtype=np.uint64)
                                            for f, l in zip(first.tolist(), last.tolist())]))
        tlb = self._tlb
        pages = pages.tolist()
        i = 0
        while i < len(pages):                   # one lookup per run: the pages it holds are skipped
            p = pages[i]
            r = self._run_for(p << 12, tlb)
            if r is None:
                bad = addr[((addr >> np.uint64(12)) == p) | (((addr + np.uint64(nbytes - 1)) >> np.uint64(12)) == p)]
                raise self.fault(int(bad.min()) if len(bad) else p << 12, write, client)
            if write and not r.writable:
                raise self.fault(p << 12, write, client, "page is read-only")
            i = bisect.bisect_right(pages, (r.end - 1) >> 12, i + 1)
        starts = np.array(tlb[0], np.uint64)
        ends = np.array([r.end for r in tlb[1]], np.uint64)
        j = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
        if (addr + np.uint64(nbytes) > ends[j]).any():
            bad = int(addr[np.argmax(addr + np.uint64(nbytes) > ends[j])])
            raise self.fault(bad, write, client, "access crosses into physically discontiguous memory")
        out = []
        cached = tlb[1]
        for arena_id in {id(r.arena) for r in cached}:
            runs = [k for k, r in enumerate(cached) if id(r.arena) == arena_id]
            sel = np.isin(j, runs)
            if not sel.any():
                continue
            delta = np.array([r.va - r.pa for r in cached], np.int64)
            idx = np.flatnonzero(sel)
            off = addr[idx].astype(np.int64) - delta[j[idx]]
            out.append((cached[runs[0]].arena.buf, idx, off))
        if len(out) == 1 and len(out[0][1]) == len(addr):
            out = [(out[0][0], None, out[0][2])]
        return out
