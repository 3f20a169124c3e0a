"""The page tables of one GPU VM context, written into VRAM by the AM driver (one `VM` per device, for its
VMID 0 context; the GMC programs VM_CONTEXT0 from `VM.context()`).

Layout (amdq.hw.vm): 48-bit VAs, 4 KiB pages, PDB2 -> PDB1 -> PDB0 -> PTB, 512 entries of 8 bytes per
table, each table one 4 KiB page from the page-table allocator (a TLSF pool, am/tlsf.py). Per generation:
  * gfx10/11 (generation 10) and gfx12: a plain 4-level walk from PDB2 (VM_CONTEXT depth 3, block size 0);
    a PDB0 entry with PDE_PTE maps a 2 MiB page (PDB1: 1 GiB, when `huge_1g`); gfx12 leaf PTEs carry
    IS_PTE (bit 63, the same bit as its PDE_PTE);
  * gfx9 (gfx942, gfx950): amdgpu's translate-further form (depth 2, block size 9): PDB1 entries carry
    BFS 9, so each PDB0 entry is a 2 MiB PTE of the last level, or, with TF, a pointer to a PTB of 512
    4 KiB PTEs. A 2 MiB page is such a PDB0 PTE, without PDE_PTE.
Every PTE carries FRAG: the mapping is cut into naturally aligned power-of-two blocks (aligned in VA and
PA alike), and each page of a block of 2**k pages gets FRAG min(k, max_frag), telling the TLB that the
whole aligned 2**FRAG-page run is contiguous with the same flags (amdgpu_vm_pt.c's fragment scheme; the
default max_frag 9 is amdgpu's fragment size, 2 MiB). Blocks of 2 MiB and more become huge pages.

Addresses in entries are the GPU's physical addresses: `vram_base` (MC_VM_FB_OFFSET << 24 on hardware; 0
in the simulator) + the VRAM offset for VRAM and the page tables, the bus address for system memory
(SYSTEM, and SNOOPED unless asked otherwise). `map`'s `pa` is such an address; `vram_pa` makes one.

A Python shadow of every table is kept, so nothing is read back through the BAR. The entries are written
(`Memory.write` at VRAM offsets) deepest table first, so a GPU walking concurrently never follows a pointer
to a table not yet written. Each `map` and `unmap` returns the `Flush` (VA range) the TLBs need and calls
the `flush(va, size)` callback if one was given (the GMC's invalidate engine); page-table pages freed by an
unmap go back to the allocator only once that flush has happened (the callback returned, or `flushed()`
was called), since until then the GPU may still walk them.

A map fails, changing nothing, on an unaligned address or size, on a range that overlaps a mapping, or
when the page tables it needs cannot be allocated (all are allocated before anything is written). An
unmap must cover mapped pages only; it may cut a huge page or a fragment, whose remaining pages are mapped
again with fragments that fit them (the flush then covers the whole former fragment).
"""
from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

from ..errors import OutOfMemory, VMError
from ..hw import vm as hw

PAGE = hw.PAGE_SIZE
N = hw.ENTRIES_PER_TABLE
SHIFT = tuple(hw.LEVEL_SHIFT[lv] for lv in hw.LEVELS)     # (39, 30, 21, 12)
PDB2, PDB1, PDB0, PTB = range(4)
VA_LIMIT = 1 << hw.VA_BITS
ADDR_MASK = hw.PTE[10]["ADDR"].mask                       # bits 47:12 in every generation
HUGE_2M, HUGE_1G = 1 << SHIFT[PDB0], 1 << SHIFT[PDB1]


class Memory(Protocol):
    """VRAM as the driver reaches it (am/ip.py VRAM; a sim Arena in tests)."""
    def read(self, offset: int, n: int) -> bytes: ...
    def write(self, offset: int, data: bytes) -> None: ...


class TableAllocator(Protocol):
    """Where page-table pages come from (a TLSF pool: VRAMPools.pt)."""
    def alloc(self, size: int, align: int | None = None) -> int: ...
    def free(self, offset: int) -> None: ...


@dataclass(frozen=True)
class MapFlags:
    """What a mapping allows and how it is cached. `snooped` None: snooped exactly when `system`."""
    readable: bool = True
    writeable: bool = True
    executable: bool = False
    system: bool = False
    snooped: bool | None = None
    mtype: str | int = "NC"

    @classmethod
    def host(cls, **kw) -> "MapFlags":
        """Host-visible system memory: SYSTEM and SNOOPED."""
        return cls(system=True, snooped=True, **kw)


@dataclass(frozen=True)
class Flush:
    """A TLB invalidation the page-table change needs: the VA range [va, va + size)."""
    va: int
    size: int


@dataclass(frozen=True)
class ContextSetup:
    """What VM_CONTEXTn registers take for these tables: PAGE_TABLE_BASE_ADDR (the root PDE), CNTL's
    PAGE_TABLE_DEPTH and PAGE_TABLE_BLOCK_SIZE, START/END in bytes (the registers hold them >> 12)."""
    base: int
    depth: int
    block_size: int
    start: int
    end: int


@dataclass(frozen=True)
class Leaf:
    """A mapped entry: the VA range it maps, the physical address, the level holding it, the entry word."""
    va: int
    size: int
    pa: int
    level: int
    entry: int

    @property
    def fragment(self) -> tuple[int, int]:
        """The aligned VA range [start, end) the entry's FRAG field claims (at least the entry's own size)."""
        span = max(self.size, 1 << (12 + ((self.entry >> 7) & 0x1F)))
        start = self.va & ~(span - 1)
        return start, start + span


class _Table:
    __slots__ = ("offset", "level", "base", "entries", "children", "used", "parent", "index")

    def __init__(self, offset: int, level: int, base: int, parent: "_Table | None", index: int):
        self.offset, self.level, self.base, self.parent, self.index = offset, level, base, parent, index
        self.entries = [0] * N
        self.children: dict[int, _Table] = {}
        self.used = 0

    @property
    def end(self) -> int:
        return self.base + (N << SHIFT[self.level])


def _ctz(x: int) -> int:
    return (x & -x).bit_length() - 1 if x else 64


class VM:
    """The page tables of one VM context on one device (see the module doc)."""

    def __init__(self, gfx: int, mem: Memory, tables: TableAllocator, *, vram_base: int = 0,
                 vram_size: int | None = None, flush: Callable[[int, int], None] | None = None, huge: bool = True,
                 huge_1g: bool = False, max_frag: int = 9, start: int = 0, span: int = VA_LIMIT,
                 root: int | None = None):
        self.gen = hw.generation(gfx)
        if start % HUGE_1G or not 0 < span <= VA_LIMIT or start + span > VA_LIMIT:
            raise ValueError(f"VM context range {start:#x}+{span:#x}: START must be 1 GiB-aligned, the range inside 48 bits")
        self.start, self.span = start, span            # VM_CONTEXT START/END: the walk indexes va - START
        self.translate_further = hw.TRANSLATE_FURTHER[self.gen]
        if huge_1g and self.translate_further:
            raise ValueError("1 GiB pages are not used in gfx9's translate-further page tables")
        if not 0 <= max_frag <= 31:
            raise ValueError(f"fragment size {max_frag} does not fit the 5-bit FRAG field")
        self.mem, self.tables, self.vram_base, self.vram_size = mem, tables, vram_base, vram_size
        self.flush, self.huge, self.huge_1g, self.max_frag = flush, huge, huge_1g, max_frag
        self.pending: list[Flush] = []                 # flushes asked for and not yet done (no callback)
        self.table_count = 0
        self._lock = threading.RLock()
        self._dirty: dict[_Table, tuple[int, int]] = {}   # table -> changed entries [lo, hi)
        self._spare: list[int] = []
        self._deferred: list[int] = []                 # table pages to free after the next flush
        self._templates: dict[tuple, int] = {}
        self.closed = False
        self.own_root = root is None                   # `root`: the root table's page is the caller's (kept)
        if root is None:
            self._reserve_count(1)
        else:
            self.mem.write(root, bytes(PAGE))
            self._spare.append(root)
        self.root = self._new_table(PDB2, 0, None, 0)
        self._commit()

    # -- addresses and the context -----------------------------------------------------------------------
    def vram_pa(self, offset: int) -> int:
        """The physical address an entry holds for a VRAM offset."""
        return self.vram_base + offset

    def context(self) -> ContextSetup:
        depth, block = hw.CONTEXT_SHAPE[self.gen]
        return ContextSetup(hw.pde(self.gen, self.vram_pa(self.root.offset)), depth, block, self.start,
                            self.start + self.span - 1)

    # -- entry words -------------------------------------------------------------------------------------
    def _pde_word(self, level: int, child: _Table) -> int:
        """The entry of a table at `level` pointing at `child`."""
        tf = self.translate_further
        return hw.pde(self.gen, self.vram_pa(child.offset), bfs=hw.TF_BFS if tf and level == PDB1 else 0,
                      tf=tf and level == PDB0)

    def _template(self, flags: MapFlags, level: int, frag: int) -> int:
        key = (flags, level, frag)
        t = self._templates.get(key)
        if t is None:
            kw = dict(readable=flags.readable, writeable=flags.writeable, executable=flags.executable,
                      system=flags.system, snooped=flags.system if flags.snooped is None else flags.snooped,
                      mtype=hw.mtype(self.gen, flags.mtype), frag=frag)
            if level == PTB:
                t = hw.pte(self.gen, 0, is_pte=self.gen == 12, **kw)
            else:                                      # a directory entry used as a page
                t = hw.pte(self.gen, 0, pde=not self.translate_further, **kw)
            self._templates[key] = t
        return t

    def flags_of(self, entry: int) -> MapFlags:
        """The MapFlags an entry word was written with."""
        d = hw.decode(self.gen, entry)
        return MapFlags(bool(d["READABLE"]), bool(d["WRITEABLE"]), bool(d["EXECUTABLE"]), bool(d["SYSTEM"]),
                        bool(d["SNOOPED"]), d["MTYPE"])

    # -- tables ------------------------------------------------------------------------------------------
    def _reserve_count(self, n: int) -> None:
        """Allocate n zeroed table pages into the spares; on failure give them back (nothing changes)."""
        got = []
        try:
            for _ in range(n):
                got.append(self.tables.alloc(PAGE, PAGE))
        except OutOfMemory as e:
            for off in got:
                self.tables.free(off)
            raise OutOfMemory(f"GPU page tables: {n} new table page(s) needed, {len(got)} could be allocated "
                              f"({e})") from None
        for off in got:
            self.mem.write(off, bytes(PAGE))
        self._spare.extend(got)

    def _new_table(self, level: int, base: int, parent: _Table | None, index: int) -> _Table:
        t = _Table(self._spare.pop(), level, base, parent, index)
        self.table_count += 1
        return t

    def _mark(self, t: _Table, lo: int, hi: int) -> None:
        d = self._dirty.get(t)
        self._dirty[t] = (lo, hi) if d is None else (min(d[0], lo), max(d[1], hi))

    def _commit(self) -> None:
        """Write the changed entries, deepest tables first."""
        for t, (lo, hi) in sorted(self._dirty.items(), key=lambda d: -d[0].level):
            self.mem.write(t.offset + 8 * lo, struct.pack(f"<{hi - lo}Q", *t.entries[lo:hi]))
        self._dirty.clear()

    def _table_at(self, va: int, level: int) -> _Table:
        """The table of `level` covering va, creating the missing ones on the way (from the spares)."""
        t = self.root
        for lv in range(level):
            i = (va >> SHIFT[lv]) & (N - 1)
            c = t.children.get(i)
            if c is None:
                assert t.entries[i] == 0, "a page-table slot holds a page where a table is needed"
                c = t.children[i] = self._new_table(lv + 1, va & ~((1 << SHIFT[lv]) - 1), t, i)
                t.entries[i] = self._pde_word(lv, c)
                t.used += 1
                self._mark(t, i, i + 1)
            t = c
        return t

    def _tables_needed(self, plan: list[tuple[int, int, int, int, int]]) -> int:
        need = set()
        for v, _, n, level, _ in plan:
            step = N << SHIFT[level]                    # VA a table of the leaf level covers
            pos = v
            while pos < v + n:
                t = self.root
                for lv in range(level):
                    c = t.children.get((pos >> SHIFT[lv]) & (N - 1)) if t is not None else None
                    if c is None:
                        need.add((lv + 1, pos >> SHIFT[lv]))
                    t = c
                pos = (pos & ~(step - 1)) + step
        return len(need)

    # -- planning ----------------------------------------------------------------------------------------
    def _plan(self, va: int, pa: int, size: int, flags: MapFlags) -> list[tuple[int, int, int, int, int]]:
        """(va, pa, bytes, leaf level, template) per naturally aligned power-of-two block of the mapping."""
        out, end = [], va + size
        while va < end:
            k = min(_ctz(va), _ctz(pa), (end - va).bit_length() - 1)
            n = 1 << k
            if self.huge_1g and n >= HUGE_1G:
                level = PDB1
            elif self.huge and n >= HUGE_2M:
                level = PDB0
            else:
                level = PTB
            out.append((va, pa, n, level, self._template(flags, level, min(k - 12, self.max_frag))))
            va, pa = va + n, pa + n
        return out

    def _put(self, va: int, pa: int, n: int, level: int, template: int) -> None:
        step, end = 1 << SHIFT[level], va + n
        while va < end:
            t = self._table_at(va, level)
            i = (va >> SHIFT[level]) & (N - 1)
            cnt = min(N - i, (end - va) >> SHIFT[level])
            old = t.entries[i:i + cnt]
            t.entries[i:i + cnt] = [template | (pa + j * step) for j in range(cnt)]
            t.used += cnt - sum(1 for e in old if e)
            self._mark(t, i, i + cnt)
            va, pa = va + cnt * step, pa + cnt * step

    def _apply(self, plan: list, clear: list[tuple[_Table, int, Leaf]] = ()) -> None:
        """Reserve the tables `plan` needs, clear the entries of `clear`, write `plan`, free empty tables."""
        self._reserve_count(self._tables_needed(plan))
        try:
            for t, i, _ in clear:
                t.entries[i] = 0
                t.used -= 1
                self._mark(t, i, i + 1)
            for blk in plan:
                self._put(*blk)
            self._prune({id(t): t for t, _, _ in clear}.values())
            self._commit()
        finally:
            while self._spare:                          # spares left over (none when nothing failed)
                self.tables.free(self._spare.pop())

    def _prune(self, tables) -> None:
        """Unlink and retire every table of `tables` (and then its ancestors) left without entries."""
        todo = sorted(tables, key=lambda t: -t.level)
        while todo:
            t = todo.pop(0)
            if t.used or t.parent is None or t.parent.children.get(t.index) is not t:
                continue
            p = t.parent
            del p.children[t.index]
            p.entries[t.index] = 0
            p.used -= 1
            self._mark(p, t.index, t.index + 1)
            self._dirty.pop(t, None)
            self._deferred.append(t.offset)
            self.table_count -= 1
            todo.append(p)
            todo.sort(key=lambda x: -x.level)

    # -- walking the shadow ------------------------------------------------------------------------------
    def _leaves(self, a: int, b: int) -> list[tuple[_Table, int, Leaf]]:
        """Every mapped entry overlapping [a, b), by address."""
        out: list[tuple[_Table, int, Leaf]] = []

        def rec(t: _Table) -> None:
            sh = SHIFT[t.level]
            lo, hi = max(a, t.base), min(b, t.end)
            if lo >= hi:
                return
            for i in range((lo - t.base) >> sh, ((hi - 1 - t.base) >> sh) + 1):
                e = t.entries[i]
                if not e:
                    continue
                c = t.children.get(i)
                if c is not None:
                    rec(c)
                else:
                    out.append((t, i, Leaf(t.base + (i << sh), 1 << sh, e & ADDR_MASK, t.level, e)))
        rec(self.root)
        return out

    def lookup(self, va: int) -> Leaf | None:
        """The entry mapping `va`, from the shadow tables (None if unmapped)."""
        if not self.start <= va < self.start + self.span:
            return None
        leaf = self._lookup(va - self.start)
        return None if leaf is None else Leaf(leaf.va + self.start, leaf.size, leaf.pa, leaf.level, leaf.entry)

    def entry_offset(self, va: int) -> int | None:
        """The VRAM offset of the entry word that maps `va` (None if unmapped): for tools and tests."""
        if not self.start <= va < self.start + self.span:
            return None
        with self._lock:
            t, i = self._slot(va - self.start)
            return t.offset + 8 * i if t.entries[i] else None

    def _slot(self, va: int) -> tuple[_Table, int]:
        """The table and entry index where the walk of `va` (relative to START) ends in the shadow tables."""
        with self._lock:
            t = self.root
            while True:
                i = (va >> SHIFT[t.level]) & (N - 1)
                c = t.children.get(i)
                if c is None:
                    return t, i
                t = c

    def _lookup(self, va: int) -> Leaf | None:
        with self._lock:
            t, i = self._slot(va)
            e = t.entries[i]
        return Leaf(t.base + (i << SHIFT[t.level]), 1 << SHIFT[t.level], e & ADDR_MASK, t.level, e) if e else None

    def translate(self, va: int) -> int | None:
        """The physical address of `va` (None if unmapped)."""
        leaf = self.lookup(va)
        return None if leaf is None else leaf.pa + (va - leaf.va)

    def mappings(self) -> Iterator[tuple[int, int, int, MapFlags]]:
        """(va, pa, bytes, flags) runs of contiguous mappings with the same flags, by address."""
        with self._lock:
            leaves = self._leaves(0, VA_LIMIT)
        run = None
        for _, _, leaf in leaves:
            fl = self.flags_of(leaf.entry)
            va = leaf.va + self.start
            if run and run[0] + run[2] == va and run[1] + run[2] == leaf.pa and run[3] == fl:
                run[2] += leaf.size
                continue
            if run:
                yield tuple(run)                       # type: ignore[misc]
            run = [va, leaf.pa, leaf.size, fl]
        if run:
            yield tuple(run)                           # type: ignore[misc]

    # -- the operations ----------------------------------------------------------------------------------
    def _check(self, what: str, va: int, size: int, pa: int | None = None) -> None:
        if self.closed:
            raise VMError(f"{what} {va:#x}+{size:#x}: the VM was closed")
        bad = [f"{n} {v:#x}" for n, v in (("VA", va), ("size", size), ("PA", pa)) if v is not None and v % PAGE]
        if bad:
            raise VMError(f"{what} {va:#x}+{size:#x}: {', '.join(bad)} not 4 KiB-aligned")
        if size <= 0 or va < self.start or va + size > self.start + self.span:
            raise VMError(f"{what} {va:#x}+{size:#x}: not a non-empty range of the context's (48-bit) GPU addresses "
                          f"{self.start:#x}..{self.start + self.span - 1:#x}")
        if pa is not None and (pa < 0 or pa + size > VA_LIMIT):
            raise VMError(f"{what} {va:#x}+{size:#x}: physical range {pa:#x}+{size:#x} is outside 48 bits")

    def map(self, va: int, pa: int, size: int, flags: MapFlags = MapFlags(), peer: bool = False) -> Flush:
        """Map [va, va + size) to the physical range at `pa` (see the module doc); `peer`: `pa` is another
        device's VRAM (an XGMI physical address of the hive), not this device's."""
        with self._lock:
            self._check("map", va, size, pa)
            va -= self.start
            if not flags.system and not peer and self.vram_size is not None and \
                    not self.vram_base <= pa <= pa + size <= self.vram_base + self.vram_size:
                raise VMError(f"map {va + self.start:#x}+{size:#x}: {pa:#x}+{size:#x} is outside VRAM "
                              f"({self.vram_base:#x}+{self.vram_size:#x}); host memory needs MapFlags(system=True)")
            there = self._leaves(va, va + size)
            if there:
                leaf = there[0][2]
                raise VMError(f"map {va + self.start:#x}+{size:#x} overlaps the mapping of {leaf.va + self.start:#x}+{leaf.size:#x} "
                              f"(to {leaf.pa:#x}); unmap it first")
            self._apply(self._plan(va, pa, size, flags))
            return self._flushed(va, size)

    def unmap(self, va: int, size: int) -> Flush:
        """Unmap [va, va + size), every page of which must be mapped (see the module doc)."""
        with self._lock:
            self._check("unmap", va, size)
            va -= self.start
            end = va + size
            leaves = self._leaves(va, end)
            pos = va
            for _, _, leaf in leaves:
                if leaf.va > pos:
                    break
                pos = leaf.va + leaf.size
            if pos < end:
                raise VMError(f"unmap {va + self.start:#x}+{size:#x}: {pos + self.start:#x} is not mapped")
            lo, hi = min(va, leaves[0][2].fragment[0]), max(end, leaves[-1][2].fragment[1])
            every = self._leaves(lo, hi)
            keep: list[list] = []                       # what stays of the entries cut, as contiguous runs
            for _, _, leaf in every:
                fl = self.flags_of(leaf.entry)
                for s, e in ((leaf.va, min(leaf.va + leaf.size, va)), (max(leaf.va, end), leaf.va + leaf.size)):
                    if s >= e:
                        continue
                    p = leaf.pa + (s - leaf.va)
                    if keep and keep[-1][0] + keep[-1][2] == s and keep[-1][1] + keep[-1][2] == p and keep[-1][3] == fl:
                        keep[-1][2] += e - s
                    else:
                        keep.append([s, p, e - s, fl])
            plan = [blk for s, p, n, fl in keep for blk in self._plan(s, p, n, fl)]
            self._apply(plan, every)
            return self._flushed(lo, hi - lo)

    def close(self) -> Flush:
        """Unmap everything and give back every table, the root too (after the flush)."""
        with self._lock:
            if self.closed:
                return Flush(0, 0)
            self._apply([], self._leaves(0, VA_LIMIT))
            if self.own_root:
                self._deferred.append(self.root.offset)
            self.table_count -= 1
            self.closed = True
            return self._flushed(0, VA_LIMIT)

    # -- TLB flushes ----------------------------------------------------------------------------------------
    def _flushed(self, va: int, size: int) -> Flush:
        va += self.start                               # the flush names the GPU addresses, START included
        f = Flush(va, size)
        if self.flush is not None:
            self.flush(va, size)
            self._release()
        else:
            self.pending.append(f)
        return f

    def flushed(self) -> None:
        """The caller has flushed the TLBs for every pending Flush: retired table pages can be reused."""
        with self._lock:
            self.pending.clear()
            self._release()

    def _release(self) -> None:
        while self._deferred:
            self.tables.free(self._deferred.pop())
