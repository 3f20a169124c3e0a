"""The AM driver's page tables (amdq/am/vm.py) against the simulated MMU (amdq/sim/mmu.py), which walks them in
VRAM as the GPU does, for gfx11 (generation 10), gfx12 and gfx9 (gfx942's translate-further form).

What each test proves:
  * test_entry_words: the words come from the one encoder (amdq.hw.vm): gfx12 leaves carry IS_PTE, gfx9 PDB1
    entries BFS 9 and PDB0 pointers TF, a gfx9 2 MiB page has no PDE_PTE, gfx10/11/12 2 MiB pages do; MTYPE
    names by generation;
  * test_every_pte_form_translates: 4 KiB pages, a 64 KiB fragment run, 2 MiB huge pages, host pages (SYSTEM,
    SNOOPED) and a read-only page each translate through the simulated MMU to the right memory with the right
    page size and flags; data written at the physical address reads back through the VA;
  * test_1g_pages: with huge_1g, a 1 GiB-aligned GiB is one PDB1 entry the MMU walks as a 1 GiB page;
  * test_fragment_field_is_what_the_tlb_caches: one walk of a FRAG-4 page makes the MMU translate all 16
    pages, even after their PTEs are zeroed behind its back, while the same done to FRAG-0 pages faults: the
    writer sets FRAG and the MMU honours it;
  * test_unmapped_addresses_fault: unmapped VAs (never mapped, just past a mapping, unmapped again) fault
    with their address;
  * test_the_flush_matters: after an unmap WITHOUT the flush the MMU still uses the stale translation; WITH
    the flush the access faults; freed page-table pages wait for the flush before going back to the pool;
  * test_cutting_a_huge_page / test_cutting_a_fragment: an unmap inside a 2 MiB page or a fragment maps the
    rest again with fragments that fit it (and flushes the whole former range), so the rest translates
    right through the MMU's cache and the cut page faults;
  * test_unmap_frees_page_tables: unmapping everything leaves only the root table allocated;
  * test_errors: overlapping maps, unaligned input, unmapping what is not mapped (also partly), PA outside
    VRAM, a closed VM: VMError, and nothing changed;
  * test_out_of_page_tables_changes_nothing: a map whose tables do not fit the pool is OutOfMemory and leaves
    the tables and the pool as they were;
  * test_random_maps_and_unmaps_against_a_model: random maps (mixed alignments, so 4 KiB, fragments and huge
    pages mix) and partial unmaps over a window crossing PDB0 and PDB1 boundaries agree with a page model,
    through the MMU's TLB after each operation's flush, and every FRAG claims only a run that is really
    contiguous and alike, aligned in PA as in VA;
  * test_through_the_simulated_hub: the context the VM describes, programmed into VM_CONTEXT1 of the
    simulated GMC's hubs, translates through their registers, and the GMC block's invalidate-engine flush is
    the flush callback that makes an unmap visible.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from amdq.am.tlsf import TLSF
from amdq.am.vm import VM, Flush, MapFlags
from amdq.errors import GPUFault, OutOfMemory, VMError
from amdq.hw import vm as hw
from amdq.sim.memory import Arena
from amdq.sim.mmu import MMU

GFX = (11, 12, 9)
BASE = 0x2000_0000_0000
PAGE = 4096
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
VRAM_BYTES = 2 * GiB + 64 * MiB                    # lazily backed: only written pages cost
PT_BASE = 2 * GiB


class Rig:
    """A VM over a simulated VRAM, its page-table pool and the simulated MMU walking it."""

    def __init__(self, gfx: int, flush: bool = True, pt_bytes: int = 32 * MiB, **kw):
        self.vram, self.sysmem = Arena("VRAM", VRAM_BYTES), Arena("sysmem", 64 * MiB)
        self.pt = TLSF(PT_BASE, pt_bytes, name="page tables")
        self.mmu = MMU(self.vram, self.sysmem, gfx)
        self.flushes: list[tuple[int, int]] = []
        self.vm = VM(gfx, self.vram, self.pt, vram_size=PT_BASE, flush=self.flush if flush else None, **kw)
        c = self.vm.context()
        self.mmu.configure(root=c.base & hw.PTE[10]["ADDR"].mask, depth=c.depth, block_size=c.block_size,
                           start=c.start, end=c.end)

    def flush(self, va: int, size: int) -> None:
        self.flushes.append((va, size))
        self.mmu.invalidate(va + size - 1)

    def do_flush(self, f: Flush) -> None:
        """The caller's flush when the VM has no callback."""
        self.flush(f.va, f.size)
        self.vm.flushed()

    def access(self, va: int, n: int = 8, write: bool = False, data: bytes | None = None) -> bytes:
        """An n-byte GPU access at va through the MMU (its TLB included)."""
        (buf, _, off), = self.mmu.translate(np.array([va], np.uint64), n, write, "test")
        o = int(off[0])
        if data is not None:
            buf[o:o + len(data)] = np.frombuffer(data, np.uint8)
        return bytes(buf[o:o + n])

    def walk(self, va: int):
        """(arena name, physical address of va, page size, decoded PTE) from a fresh walk."""
        hit = self.mmu.walk(va)
        if hit is None:
            return None
        arena, pa, size, e = hit
        return arena.name, pa + (va & (size - 1)), size, hw.decode(self.vm.gen, e)

    def entry(self, va: int, level: int) -> int:
        """The entry word for va at `level` (0 PDB2 .. 3 PTB), read from VRAM as the GPU would."""
        table = self.vm.root.offset
        for lv in range(level):
            e = self.vram.u64(table + 8 * ((va >> (39 - 9 * lv)) & 511))
            table = e & hw.PTE[10]["ADDR"].mask
        return self.vram.u64(table + 8 * ((va >> (39 - 9 * level)) & 511))


def tag(arena: Arena, pa: int, n: int) -> None:
    """Give every 8 bytes of [pa, pa + n) its own address as content."""
    arena.write(pa, np.arange(pa, pa + n, 8, dtype=np.uint64).tobytes())


def test_entry_words():
    r12, r9, r11 = Rig(12), Rig(9), Rig(11)
    for r in (r12, r9, r11):
        r.vm.map(BASE, 4 * MiB, 2 * MiB)                # one 2 MiB page
        r.vm.map(BASE + 4 * MiB, 8 * MiB, PAGE)         # one 4 KiB page
    leaf12 = r12.entry(BASE + 4 * MiB, 3)
    assert leaf12 >> 63 == 1 and hw.decode(12, leaf12)["IS_PTE"] == 1
    assert hw.decode(12, r12.entry(BASE, 2))["PDE_PTE"] == 1
    assert hw.decode(10, r11.entry(BASE, 2))["PDE_PTE"] == 1 and r11.entry(BASE + 4 * MiB, 3) >> 54 == 0
    d9 = {lv: hw.decode(9, r9.entry(BASE + 4 * MiB, lv)) for lv in range(4)}
    assert d9[0]["BFS"] == 0 and d9[1]["BFS"] == 9 and d9[2]["TF"] == 1 and d9[3]["TF"] == 0
    huge9 = hw.decode(9, r9.entry(BASE, 2))
    assert huge9["PDE_PTE"] == 0 and huge9["TF"] == 0 and huge9["VALID"] == 1 and huge9["FRAG"] == 9
    assert r9.vm.context().depth == 2 and r9.vm.context().block_size == 9
    assert r12.vm.context().depth == 3 and r12.vm.context().block_size == 0
    assert r12.vm.context().base == r12.vm.root.offset | 1
    assert hw.mtype(9, "rw") == 1 and hw.mtype(11, "UC") == 3 and hw.mtype(12, "NC") == 0 and hw.mtype(12, 3) == 3
    with pytest.raises(ValueError, match="no MTYPE 'RW' on generation 12"):
        hw.mtype(12, "RW")
    with pytest.raises(ValueError):
        hw.mtype(12, 4)                                 # 2 bits on gfx12


@pytest.mark.parametrize("gfx", GFX)
def test_every_pte_form_translates(gfx):
    r = Rig(gfx)
    forms = [  # (va, pa, size, flags, page size, FRAG, arena)
        (BASE + 0x1000, 0x0100_3000, 3 * PAGE, MapFlags(), PAGE, (0, 1, 1), "VRAM"),     # a page, then 2 aligned
        (BASE + 1 * MiB, 0x0200_0000, 64 * KiB, MapFlags(executable=True), PAGE, 4, "VRAM"),
        (BASE + 4 * MiB, 0x0400_0000, 4 * MiB, MapFlags(), 2 * MiB, 9, "VRAM"),
        (BASE + 16 * MiB, 0x0010_0000, 2 * PAGE, MapFlags.host(mtype="UC"), PAGE, 1, "sysmem"),
        (BASE + 20 * MiB, 0x0300_0000, PAGE, MapFlags(writeable=False), PAGE, 0, "VRAM"),
    ]
    for va, pa, size, fl, _, _, arena in forms:
        r.vm.map(va, pa, size, fl)
        tag(r.sysmem if arena == "sysmem" else r.vram, pa, size)
    for va, pa, size, fl, psize, frag, arena in forms:
        for off in sorted({0, 8, size // 2, size - 8}):
            name, got, page, d = r.walk(va + off)
            assert (name, got, page) == (arena, pa + off, psize), f"{va + off:#x}"
            assert d["FRAG"] == (frag[off // PAGE] if isinstance(frag, tuple) else frag) and d["VALID"] == 1
            assert (d["READABLE"], d["WRITEABLE"], d["EXECUTABLE"]) == (fl.readable, fl.writeable, fl.executable)
            assert d["SYSTEM"] == d["SNOOPED"] == int(fl.system)
            assert d["MTYPE"] == hw.mtype(gfx, fl.mtype)
            assert r.access(va + off) == (pa + off).to_bytes(8, "little")
            assert r.vm.translate(va + off) == pa + off
    ro = BASE + 20 * MiB
    with pytest.raises(GPUFault, match="read-only"):
        r.access(ro, write=True, data=b"x" * 8)
    r.access(BASE + 0x1000, write=True, data=b"written!")
    assert r.vram.read(0x0100_3000, 8) == b"written!"
    assert list(r.vm.mappings())[0] == (BASE + 0x1000, 0x0100_3000, 3 * PAGE, MapFlags(snooped=False, mtype=0))


@pytest.mark.parametrize("gfx", (11, 12))
def test_1g_pages(gfx):
    r = Rig(gfx, huge_1g=True)
    r.vm.map(BASE + GiB, 0, GiB + 2 * MiB)
    assert r.walk(BASE + GiB + 5)[:3] == ("VRAM", 5, GiB)
    assert r.walk(BASE + 2 * GiB + 8)[:3] == ("VRAM", GiB + 8, 2 * MiB)
    with pytest.raises(ValueError):
        Rig(9, huge_1g=True)


@pytest.mark.parametrize("gfx", GFX)
def test_fragment_field_is_what_the_tlb_caches(gfx):
    r = Rig(gfx)
    frag_va, plain_va = BASE, BASE + 1 * MiB
    r.vm.map(frag_va, 0x0200_0000, 64 * KiB)            # VA and PA 64 KiB-aligned: FRAG 4
    r.vm.map(plain_va, 0x0300_1000, 64 * KiB)           # PA 4 KiB-aligned only: FRAG 0
    assert r.walk(frag_va)[3]["FRAG"] == 4 and r.walk(plain_va)[3]["FRAG"] == 0
    for va in (frag_va, plain_va):
        r.access(va)                                     # one walk, of the first page
        table = r.vm.root                                # then zero the other 15 PTEs behind the MMU's back
        for lv in range(3):
            table = table.children[(va >> (39 - 9 * lv)) & 511]
        r.vram.write(table.offset + 8 * (((va >> 12) & 511) + 1), bytes(8 * 15))
        assert r.walk(va + 9 * PAGE) is None
    # the fragment's one cached translation covers page 9; the plain mapping's page 9 is walked and faults
    r.vram.write(0x0200_0000 + 9 * PAGE, b"fragment")
    assert r.access(frag_va + 9 * PAGE) == b"fragment"
    with pytest.raises(GPUFault):
        r.access(plain_va + 9 * PAGE)
    r.mmu.invalidate()                                   # and after a flush the zeroed PTE is what counts
    with pytest.raises(GPUFault):
        r.access(frag_va + 9 * PAGE)


@pytest.mark.parametrize("gfx", GFX)
def test_tlb_runs_join_whatever_order_pages_are_touched(gfx):
    """Pages of one physically contiguous mapping touched every other page first (dies striding through a buffer)
    end as one cached run once the gaps are walked: the shader JIT's range table then needs one row, not one per
    pair of pages. A run never joins a physically discontiguous or differently writable neighbour."""
    r = Rig(gfx)
    lo = BASE + 4 * MiB
    r.vm.map(lo, 0x0300_1000, 16 * PAGE)                # 4 KiB-aligned PA: FRAG 0, each page walked alone
    r.vm.map(lo + 16 * PAGE, 0x0500_0000, 4 * PAGE)     # right after in VA, elsewhere in VRAM
    for i in list(range(0, 16, 2)) + list(range(1, 16, 2)) + [16, 17]:
        r.access(lo + i * PAGE)
    starts, runs = r.mmu._tlb
    mine = [(x.va, x.end, x.pa) for x in runs if lo <= x.va < lo + 20 * PAGE]
    assert mine[0] == (lo, lo + 16 * PAGE, 0x0300_1000)            # one run...
    assert mine[1][0] == lo + 16 * PAGE and mine[1][2] == 0x0500_0000  # ...not joined to the other memory
    assert starts == sorted(starts) and len(starts) == len(runs)
    assert r.mmu.jit_span(lo + 3, 8, False) == (lo, lo + 16 * PAGE, r.vram.buf.ctypes.data + 0x0300_1000)


@pytest.mark.parametrize("gfx", GFX)
def test_unmapped_addresses_fault(gfx):
    r = Rig(gfx)
    r.vm.map(BASE + 2 * MiB, 0x0400_0000, 2 * MiB)
    r.vm.map(BASE + 8 * MiB, 0x0100_0000, 3 * PAGE)
    for va in (BASE, BASE + 4 * MiB, BASE + 8 * MiB + 3 * PAGE, BASE + GiB, 0x10_0000):
        assert r.walk(va) is None and r.vm.translate(va) is None
        with pytest.raises(GPUFault) as e:
            r.access(va)
        assert e.value.address == va
    r.vm.unmap(BASE + 8 * MiB + PAGE, PAGE)
    with pytest.raises(GPUFault):
        r.access(BASE + 8 * MiB + PAGE)
    assert r.access(BASE + 8 * MiB + 2 * PAGE) is not None
    assert [f.address for f in r.mmu.faults][-1] == BASE + 8 * MiB + PAGE


@pytest.mark.parametrize("gfx", GFX)
def test_the_flush_matters(gfx):
    r = Rig(gfx, flush=False)
    va, pa = BASE + 6 * MiB, 0x0500_0000
    f = r.vm.map(va, pa, 2 * PAGE)
    assert f == Flush(va, 2 * PAGE) and r.vm.pending == [f]
    r.do_flush(f)
    r.vram.write(pa, b"old data")
    assert r.access(va) == b"old data"                  # walked and cached
    before = r.pt.free_bytes
    f = r.vm.unmap(va, 2 * PAGE)
    assert f == Flush(va, 2 * PAGE) and r.vm.pending == [f]
    assert r.walk(va) is None                           # the tables say unmapped ...
    assert r.access(va) == b"old data"                  # ... but the TLB still translates: stale
    assert r.pt.free_bytes == before                    # the emptied tables are not reused before the flush
    r.do_flush(f)
    with pytest.raises(GPUFault):
        r.access(va)
    assert r.pt.free_bytes == before + 3 * PAGE and r.vm.pending == []    # PDB1, PDB0 and PTB came back


@pytest.mark.parametrize("gfx", GFX)
def test_cutting_a_huge_page(gfx):
    r = Rig(gfx)
    va, pa = BASE + 2 * MiB, 0x0600_0000
    r.vm.map(va, pa, 2 * MiB)
    tag(r.vram, pa, 2 * MiB)
    r.access(va + 8)                                    # the TLB holds the 2 MiB page
    r.flushes.clear()
    r.vm.unmap(va + 256 * PAGE, PAGE)
    assert r.flushes == [(va, 2 * MiB)]
    with pytest.raises(GPUFault):
        r.access(va + 256 * PAGE)
    for i in list(range(0, 256, 7)) + list(range(257, 512, 5)) + [255, 257, 511]:
        assert r.access(va + i * PAGE + 16) == (pa + i * PAGE + 16).to_bytes(8, "little"), i
    assert r.walk(va)[2] == PAGE and r.walk(va)[3]["FRAG"] == 8       # [0, 256) pages: one 1 MiB fragment
    # [257, 512): 257 alone, then runs of 2, 4 ... 128 pages, each aligned to its size
    assert [r.walk(va + i * PAGE)[3]["FRAG"] for i in (257, 258, 260, 264, 272, 288, 320, 384, 511)] == \
        [0, 1, 2, 3, 4, 5, 6, 7, 7]


@pytest.mark.parametrize("gfx", GFX)
def test_cutting_a_fragment(gfx):
    r = Rig(gfx)
    va, pa = BASE + 64 * KiB, 0x0201_0000
    r.vm.map(va, pa, 64 * KiB)
    tag(r.vram, pa, 64 * KiB)
    r.access(va)                                        # the TLB holds the 64 KiB fragment
    r.flushes.clear()
    r.vm.unmap(va + 8 * PAGE, PAGE)
    assert r.flushes == [(va, 64 * KiB)]                # the whole former fragment
    with pytest.raises(GPUFault):
        r.access(va + 8 * PAGE)
    for i in (0, 7, 9, 10, 12, 15):
        assert r.access(va + i * PAGE) == (pa + i * PAGE).to_bytes(8, "little"), i
    assert [r.walk(va + i * PAGE)[3]["FRAG"] for i in (0, 7, 9, 10, 12)] == [3, 3, 0, 1, 2]


@pytest.mark.parametrize("gfx", GFX)
def test_unmap_frees_page_tables(gfx):
    r = Rig(gfx)
    spots = [BASE, BASE + 3 * GiB + 5 * MiB, BASE + (1 << 40), BASE - 6 * MiB]
    for i, va in enumerate(spots):
        r.vm.map(va, 0x0100_0000 + i * 4 * MiB, 4 * MiB + PAGE)
    assert r.vm.table_count > 8
    for va in spots:
        r.vm.unmap(va, 4 * MiB + PAGE)
    assert r.vm.table_count == 1 and r.pt.free_bytes == r.pt.size - PAGE and r.pt.size_of(r.vm.root.offset) == PAGE
    r.vm.close()
    assert r.pt.free_bytes == r.pt.size
    with pytest.raises(VMError, match="closed"):
        r.vm.map(BASE, 0, PAGE)


def test_errors():
    r = Rig(11)
    r.vm.map(BASE + 2 * MiB, 0x0400_0000, 2 * MiB)
    r.vm.map(BASE + 8 * MiB, 0x0100_0000, 4 * PAGE)
    state = (list(r.vm.mappings()), r.vm.table_count, r.pt.free_bytes)
    cases = [
        (lambda: r.vm.map(BASE + 8 * MiB + 3 * PAGE, 0, 2 * PAGE),
         f"overlaps the mapping of {BASE + 8 * MiB + 3 * PAGE:#x}"),
        (lambda: r.vm.map(BASE + 3 * MiB, 0, PAGE), f"overlaps the mapping of {BASE + 2 * MiB:#x}"),
        (lambda: r.vm.map(BASE + 1, 0, PAGE), "VA .* not 4 KiB-aligned"),
        (lambda: r.vm.map(BASE, 0x123, PAGE), "PA 0x123 not 4 KiB-aligned"),
        (lambda: r.vm.map(BASE, 0, 100), "size 0x64 not 4 KiB-aligned"),
        (lambda: r.vm.map(BASE, 0, 0), "non-empty range"),
        (lambda: r.vm.map((1 << 48) - PAGE, 0, 2 * PAGE), "48-bit"),
        (lambda: r.vm.map(BASE, PT_BASE, PAGE), "outside VRAM"),
        (lambda: r.vm.unmap(BASE, PAGE), f"{BASE:#x} is not mapped"),
        (lambda: r.vm.unmap(BASE + 8 * MiB, 5 * PAGE), f"{BASE + 8 * MiB + 4 * PAGE:#x} is not mapped"),
        (lambda: r.vm.unmap(BASE + 2 * MiB - PAGE, 2 * PAGE), f"{BASE + 2 * MiB - PAGE:#x} is not mapped"),
        (lambda: r.vm.unmap(BASE + 8 * MiB + 2, PAGE), "not 4 KiB-aligned"),
    ]
    for fn, msg in cases:
        with pytest.raises(VMError, match=msg):
            fn()
        assert (list(r.vm.mappings()), r.vm.table_count, r.pt.free_bytes) == state
    r.vm.map(BASE, PT_BASE, PAGE, MapFlags.host())      # a host address may lie anywhere


@pytest.mark.parametrize("gfx", GFX)
def test_out_of_page_tables_changes_nothing(gfx):
    r = Rig(gfx, pt_bytes=3 * PAGE)                      # the root and two more
    r.vm.map(BASE, 0, 2 * MiB)                           # PDB1 + PDB0: fits
    before = (list(r.vm.mappings()), r.vm.table_count, r.pt.free_bytes)
    with pytest.raises(OutOfMemory, match="page tables: 2 new table page"):
        r.vm.map(BASE + GiB, 0x0100_0000, PAGE)          # another PDB0 and a PTB
    assert (list(r.vm.mappings()), r.vm.table_count, r.pt.free_bytes) == before
    with pytest.raises(OutOfMemory):
        r.vm.unmap(BASE + 4 * PAGE, PAGE)                # cutting the 2 MiB page needs a PTB
    assert (list(r.vm.mappings()), r.vm.table_count, r.pt.free_bytes) == before
    assert r.walk(BASE + 4 * PAGE)[1] == 4 * PAGE


@pytest.mark.parametrize("gfx", GFX)
def test_random_maps_and_unmaps_against_a_model(gfx):
    rng = random.Random(100 + gfx)
    r = Rig(gfx)
    lo = BASE + GiB - 6 * MiB                           # crosses a PDB1 (1 GiB) boundary and PDB0 boundaries
    pages = (12 * MiB) // PAGE
    model: dict[int, tuple[int, MapFlags]] = {}         # page index -> (pa, flags)
    flag_choices = [MapFlags(), MapFlags(writeable=False), MapFlags.host(), MapFlags(executable=True, mtype="UC")]
    for step in range(70):
        free = [i for i in range(pages) if i not in model]
        if model and (rng.random() < 0.4 or len(free) < pages // 4):
            # unmap a random piece of a random mapped run
            i = rng.choice(list(model))
            j = i
            while j + 1 in model and model[j + 1][0] == model[j][0] + PAGE and j - i < 600:
                j += 1
            a = rng.randint(i, j)
            b = rng.randint(a, j)
            r.vm.unmap(lo + a * PAGE, (b - a + 1) * PAGE)
            for k in range(a, b + 1):
                del model[k]
        else:
            huge = [k for k in free if (lo // PAGE + k) % 512 == 0]
            big = huge and rng.random() < 0.5             # now and then a 2 MiB-aligned start, for huge pages
            i = rng.choice(huge if big else free)
            n = 1
            limit = 1100 if big else rng.choice([8, 64, 700])
            while i + n < pages and i + n not in model and n < limit:
                n += 1
            fl = rng.choice(flag_choices)
            arena_pages = (60 * MiB if fl.system else PT_BASE) // PAGE
            align = 512 if big else rng.choice([1, 16, 512])
            # a PA congruent with the VA modulo `align` pages, so fragments and huge pages happen
            pa = (rng.randrange(0, arena_pages - n - 1024) // 1024 * 1024 + ((lo // PAGE + i) % align)) * PAGE
            r.vm.map(lo + i * PAGE, pa, n * PAGE, fl)
            for k in range(n):
                model[k + i] = (pa + k * PAGE, fl)
        check_against_model(r, lo, pages, model, rng)
    for i in sorted(model):
        if i in model:
            j = i
            while j + 1 in model and model[j + 1][0] == model[j][0] + PAGE:
                j += 1
            r.vm.unmap(lo + i * PAGE, (j - i + 1) * PAGE)
            for k in range(i, j + 1):
                del model[k]
    check_against_model(r, lo, pages, model, rng)
    assert r.vm.table_count == 1


def check_against_model(r: Rig, lo: int, pages: int, model: dict, rng: random.Random) -> None:
    mmu = r.mmu
    for i in range(pages):
        va = lo + i * PAGE
        run = mmu._run_for(va)                          # the TLB first, a walk when it misses
        want = model.get(i)
        if want is None:
            assert run is None, f"page {i} ({va:#x}) is unmapped but translates"
            continue
        assert run is not None, f"page {i} ({va:#x}) is mapped but does not translate"
        assert run.pa + (va - run.va) == want[0], f"page {i} ({va:#x}): {run.pa + va - run.va:#x} != {want[0]:#x}"
        assert (run.arena is r.sysmem) == want[1].system and run.writable == want[1].writeable
    for i in rng.sample(sorted(model), min(40, len(model))):
        leaf = r.vm.lookup(lo + i * PAGE)
        start, end = leaf.fragment                      # FRAG claims only what is really contiguous and alike
        base_pa, fl = model[i]
        # and its PA is aligned like its VA: right whether the TLB takes the fragment's base from the PTE's
        # address masked to the fragment or from the page's offset in it (the simulator does the latter)
        assert (base_pa - (lo + i * PAGE - start)) % (end - start) == 0, f"page {i}: fragment PA not aligned"
        for k in range((start - lo) // PAGE, (end - lo) // PAGE):
            got = model.get(k)
            assert got is not None and got[1] == fl and got[0] - base_pa == (k - i) * PAGE, \
                f"page {i}'s FRAG claims {start:#x}..{end:#x}, page {k} does not fit it"


@pytest.mark.parametrize("arch", ("gfx1100", "gfx1201", "gfx942"))
def test_through_the_simulated_hub(arch):
    from am_bench import Bench
    from amdq.am.gmc import GMC
    b = Bench(arch, parts=("gmc",))
    gmc = GMC(b.am)
    gmc.init_sw()
    gmc.init_hw()
    pt = TLSF(64 * MiB, 16 * MiB, name="page tables")
    vm = VM(b.target.gfx_version, b.am.vram, pt, vram_base=gmc.vram_base, vram_size=b.gpu.vram.size,
            flush=lambda va, size: gmc.flush_tlb(1))
    c = vm.context()
    for hub, inst, vmp, _ in gmc.hubs():              # VMID 1 of every hub takes the VM's context
        regs = b.am.regs.block(hub, inst)
        regs[vmp + "CONTEXT1_PAGE_TABLE_START_ADDR_LO32"].write((c.start >> 12) & 0xFFFFFFFF)
        regs[vmp + "CONTEXT1_PAGE_TABLE_START_ADDR_HI32"].write(c.start >> 44)
        regs[vmp + "CONTEXT1_PAGE_TABLE_END_ADDR_LO32"].write((c.end >> 12) & 0xFFFFFFFF)
        regs[vmp + "CONTEXT1_PAGE_TABLE_END_ADDR_HI32"].write(c.end >> 44)
        regs[vmp + "CONTEXT1_PAGE_TABLE_BASE_ADDR_LO32"].write(c.base & 0xFFFFFFFF)
        regs[vmp + "CONTEXT1_PAGE_TABLE_BASE_ADDR_HI32"].write(c.base >> 32)
        regs[vmp + "CONTEXT1_CNTL"].write(ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=c.depth, PAGE_TABLE_BLOCK_SIZE=c.block_size)
    va, data = BASE + 2 * MiB, 32 * MiB
    vm.map(va, gmc.vram_base + data, 2 * MiB + 64 * KiB)   # a 2 MiB page and a 64 KiB fragment
    b.gpu.vram.write(data + 5, b"hub!")
    b.gpu.vram.write(data + 2 * MiB + 8 * PAGE, b"frag")
    assert b.gmc.read("MM", va + 5, 4, vmid=1) == b"hub!"
    assert b.gmc.read("GC", va + 2 * MiB + 8 * PAGE, 4, vmid=1, inst=b.target.xcc - 1) == b"frag"
    vm.unmap(va + 2 * MiB, 64 * KiB)                    # the callback flushes VMID 1 on every hub
    with pytest.raises(GPUFault):
        b.gmc.read("MM", va + 2 * MiB + 8 * PAGE, 4, vmid=1)
    with pytest.raises(GPUFault):
        b.gmc.read("GC", va + 2 * MiB, 4, vmid=1)


@pytest.mark.parametrize("gfx", GFX)
def test_a_walk_caches_the_ptes_of_its_line_that_map_alike(gfx):
    """A walk reads the 64-byte line of PTEs its entry is in (8 PTEs, one read of the walker): the entries after it
    in that line that map the next physical pages with the same flags join its cached run, the line's end or the
    first that differs (other memory, other flags, invalid) ends it. Pages of the next line are walked when used."""
    r = Rig(gfx)
    lo = BASE + 6 * MiB                                 # PTE index a multiple of 8: the start of a line
    r.vm.map(lo, 0x0300_1000, 5 * PAGE)                 # 4 KiB-aligned PA: FRAG 0
    r.vm.map(lo + 5 * PAGE, 0x0600_0000, 11 * PAGE)     # the rest of the line and the next elsewhere in VRAM
    r.access(lo + PAGE)
    run = next(x for x in r.mmu._tlb[1] if x.va <= lo + PAGE < x.end)
    assert (run.va, run.end, run.pa) == (lo + PAGE, lo + 5 * PAGE, 0x0300_2000)  # to the first that differs
    r.access(lo + 5 * PAGE)
    run = next(x for x in r.mmu._tlb[1] if x.va <= lo + 5 * PAGE < x.end)
    assert (run.va, run.end) == (lo + 5 * PAGE, lo + 8 * PAGE)                 # to the line's end
    table = r.vm.root                                   # zero pages 6..15's PTEs behind the MMU's back
    for lv in range(3):
        table = table.children[(lo >> (39 - 9 * lv)) & 511]
    r.vram.write(table.offset + 8 * (((lo >> 12) & 511) + 6), bytes(8 * 10))
    assert r.access(lo + 7 * PAGE) is not None          # in the line read: cached
    with pytest.raises(GPUFault):
        r.access(lo + 9 * PAGE)                         # the next line: walked, and no longer mapped
    r.mmu.invalidate()
    with pytest.raises(GPUFault):
        r.access(lo + 7 * PAGE)
