"""A TLSF (two-level segregated fit) allocator over a range of addresses, and the VRAM pools built on it.

TLSF keeps every free block in one of a grid of free lists: the first level is the power of two of the
block's size (in granules), the second level splits each power of two into 2**SL_BITS equal steps. Two
bitmaps (one word for the first level, one word per first level for the second) say which lists are not
empty, so a fitting list is found with a couple of bit scans: allocation and free are O(1). A request is
rounded up to the next list boundary before the search, so any block of the list found fits it ("good
fit"). Free merges a block with its free physical neighbours at once, so the free blocks are always
maximal: k live allocations leave at most k + 1 free blocks.

An alignment above the granule is met by the block the plain search finds when it happens to hold an
aligned placement, else by searching for size + align - granule; the unaligned head goes back to the
free lists as a block of its own. When the search finds nothing (the rounding up skips blocks that would just fit,
and the alignment slack may be more than a block needs), a scan of the free blocks looks for one that holds
the request anyway (a rare, O(free blocks) path), so an allocation fails only when no free block can hold
it; the error names size, alignment, free bytes and the largest free block.

The allocator only does arithmetic on offsets: it never touches the memory it manages, so the same class
serves VRAM (tlsf.TLSF, VRAMPools) and GPU virtual addresses (am/va.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidFree, OutOfMemory

SL_BITS = 4                        # second-level lists per power of two: 16
SL_COUNT = 1 << SL_BITS
MiB = 1 << 20


def _mapping(n: int) -> tuple[int, int]:
    """(first, second) level list of a block of n granules (n >= 1)."""
    if n < SL_COUNT:
        return 0, n
    fl = n.bit_length() - 1
    return fl - SL_BITS + 1, (n >> (fl - SL_BITS)) - SL_COUNT


def _round_up_to_list(n: int) -> int:
    """n rounded up to the smallest block size of the next list, so every block of the list found fits."""
    if n < SL_COUNT:
        return n
    step = 1 << (n.bit_length() - 1 - SL_BITS)
    return (n + step - 1) & ~(step - 1)


def _lowest(bits: int) -> int:
    return (bits & -bits).bit_length() - 1


class TLSF:
    """Allocations of whole granules from [base, base + size). Offsets are absolute (base included)."""

    def __init__(self, base: int, size: int, granule: int = 4096, name: str = "pool"):
        if granule <= 0 or granule & (granule - 1):
            raise ValueError(f"{name}: granule {granule:#x} is not a power of two")
        if base % granule or size % granule or size <= 0:
            raise ValueError(f"{name}: range {base:#x}+{size:#x} is not a positive multiple of the {granule:#x} granule")
        self.base, self.size, self.granule, self.name = base, size, granule, name
        self._shift = granule.bit_length() - 1
        n = size >> self._shift
        fl_max = _mapping(n)[0] + 1
        self._fl_bitmap = 0
        self._sl_bitmap = [0] * fl_max
        self._lists: list[list[dict[int, None]]] = [[{} for _ in range(SL_COUNT)] for _ in range(fl_max)]
        self._size: dict[int, int] = {}          # block start (granules from base) -> size (granules), every block
        self._prev: dict[int, int | None] = {}   # block start -> start of the block physically before it
        self._free: set[int] = set()             # starts of the free blocks
        self._end = n
        self.free_bytes = 0
        self._add_block(0, n, None)
        self._insert_free(0)

    # -- block bookkeeping ----------------------------------------------------------------------------
    def _add_block(self, start: int, n: int, prev: int | None) -> None:
        self._size[start] = n
        self._prev[start] = prev
        nxt = start + n
        if nxt < self._end:
            self._prev[nxt] = start

    def _insert_free(self, start: int) -> None:
        n = self._size[start]
        fl, sl = _mapping(n)
        self._lists[fl][sl][start] = None
        self._fl_bitmap |= 1 << fl
        self._sl_bitmap[fl] |= 1 << sl
        self._free.add(start)
        self.free_bytes += n << self._shift

    def _remove_free(self, start: int) -> None:
        n = self._size[start]
        fl, sl = _mapping(n)
        lst = self._lists[fl][sl]
        del lst[start]
        if not lst:
            self._sl_bitmap[fl] &= ~(1 << sl)
            if not self._sl_bitmap[fl]:
                self._fl_bitmap &= ~(1 << fl)
        self._free.discard(start)
        self.free_bytes -= n << self._shift

    def _split(self, start: int, n: int) -> None:
        """Cut the (not free-listed) block at `start` to n granules; the rest becomes a free block."""
        rest = self._size[start] - n
        if rest <= 0:
            return
        self._size[start] = n
        self._add_block(start + n, rest, start)
        self._insert_free(start + n)

    def _find(self, n: int) -> int | None:
        """Start of a free block from a list whose every block holds n granules, or None."""
        n = _round_up_to_list(n)
        if n > self._end:
            return None
        fl, sl = _mapping(n)
        if fl >= len(self._sl_bitmap):
            return None
        sl_map = self._sl_bitmap[fl] & (~0 << sl)
        if not sl_map:
            fl_map = self._fl_bitmap & (~0 << (fl + 1))
            if not fl_map:
                return None
            fl = _lowest(fl_map)
            sl_map = self._sl_bitmap[fl]
        return next(iter(self._lists[fl][_lowest(sl_map)]))

    def _scan_aligned(self, n: int, align: int) -> tuple[int, int] | None:
        """(block start, aligned start) of any free block holding n granules at an `align`-granule boundary."""
        for start in sorted(self._free):
            size = self._size[start]
            if size < n:
                continue
            a = self._aligned(start, align)
            if a + n <= start + size:
                return start, a
        return None

    def _aligned(self, start: int, align: int) -> int:
        """The first granule at or after `start` whose absolute address is `align`-granule aligned."""
        b = self.base >> self._shift
        return ((b + start + align - 1) & ~(align - 1)) - b

    # -- the allocator ----------------------------------------------------------------------------------
    def alloc(self, size: int, align: int | None = None) -> int:
        """Offset of `size` bytes (rounded up to the granule) at a multiple of `align` (a power of two; the
        granule when None or smaller)."""
        if size <= 0:
            raise ValueError(f"{self.name}: allocation of {size} bytes")
        align = self.granule if align is None else align
        if align <= 0 or align & (align - 1):
            raise ValueError(f"{self.name}: alignment {align:#x} is not a power of two")
        g = self._shift
        n = (size + self.granule - 1) >> g
        ag = max(align >> g, 1)
        start = self._find(n)
        if start is not None and ag > 1 and self._aligned(start, ag) + n > start + self._size[start]:
            start = self._find(n + ag - 1)            # the first fit is not aligned enough: search with slack
        if start is not None:
            a = self._aligned(start, ag)
        else:
            hit = self._scan_aligned(n, ag)
            if hit is None:
                raise OutOfMemory(f"{self.name}: cannot allocate {size:#x} bytes aligned to {align:#x}: "
                                  f"{self.free_bytes:#x} bytes free of {self.size:#x}, the largest free block is "
                                  f"{self.largest_free():#x} bytes")
            start, a = hit
        self._remove_free(start)
        if a > start:                                   # the unaligned head goes back to the free lists
            head = a - start
            self._size[a] = self._size[start] - head
            self._size[start] = head
            self._add_block(a, self._size[a], start)
            self._insert_free(start)
        self._split(a, n)
        return self.base + (a << g)

    def free(self, offset: int) -> None:
        """Give back the allocation at `offset`, merging it with free neighbours."""
        rel = offset - self.base
        start = rel >> self._shift
        if rel < 0 or rel & (self.granule - 1) or start not in self._size:
            where = "outside" if not 0 <= rel < self.size else "inside"
            raise InvalidFree(f"{self.name}: free of {offset:#x}, which is not an allocation of this pool "
                              f"({where} its range {self.base:#x}..{self.base + self.size - 1:#x})")
        if start in self._free:
            raise InvalidFree(f"{self.name}: double free of {offset:#x} ({self._size[start] << self._shift:#x} bytes)")
        nxt = start + self._size[start]
        if nxt < self._end and nxt in self._free:      # merge with the block after
            self._remove_free(nxt)
            self._merge(start, nxt)
        prev = self._prev[start]
        if prev is not None and prev in self._free:    # and with the one before
            self._remove_free(prev)
            self._merge(prev, start)
            start = prev
        self._insert_free(start)

    def _merge(self, a: int, b: int) -> None:
        """Join block b into the block a just before it."""
        self._size[a] += self._size.pop(b)
        del self._prev[b]
        nxt = a + self._size[a]
        if nxt < self._end:
            self._prev[nxt] = a

    def size_of(self, offset: int) -> int:
        """Bytes of the live allocation at `offset` (InvalidFree if there is none)."""
        start = (offset - self.base) >> self._shift
        if offset < self.base or (offset - self.base) % self.granule or start not in self._size or start in self._free:
            raise InvalidFree(f"{self.name}: {offset:#x} is not a live allocation")
        return self._size[start] << self._shift

    def owns(self, offset: int) -> bool:
        return self.base <= offset < self.base + self.size

    def largest_free(self) -> int:
        """Bytes of the largest free block (scans the top non-empty list only)."""
        if not self._fl_bitmap:
            return 0
        fl = self._fl_bitmap.bit_length() - 1
        sl = self._sl_bitmap[fl].bit_length() - 1
        return max(self._size[s] for s in self._lists[fl][sl]) << self._shift

    @property
    def used_bytes(self) -> int:
        return self.size - self.free_bytes

    def free_blocks(self) -> list[tuple[int, int]]:
        """(offset, bytes) of every free block, by address."""
        return [(self.base + (s << self._shift), self._size[s] << self._shift) for s in sorted(self._free)]

    def verify(self) -> None:
        """Check the invariants (blocks tile the range, free blocks maximal and listed, bitmaps agree);
        AssertionError naming the broken one. For tests and debugging: O(blocks)."""
        pos, prev, free = 0, None, 0
        for s in sorted(self._size):
            assert s == pos, f"{self.name}: block at granule {s}, expected {pos}"
            assert self._prev[s] == prev, f"{self.name}: block {s} has prev {self._prev[s]}, expected {prev}"
            if s in self._free:
                assert prev is None or prev not in self._free, f"{self.name}: free blocks {prev} and {s} not merged"
                fl, sl = _mapping(self._size[s])
                assert s in self._lists[fl][sl], f"{self.name}: free block {s} not in list ({fl}, {sl})"
                free += self._size[s]
            prev, pos = s, s + self._size[s]
        assert pos == self._end, f"{self.name}: blocks end at {pos}, the range at {self._end}"
        assert free << self._shift == self.free_bytes, f"{self.name}: free_bytes {self.free_bytes} != {free << self._shift}"
        for fl, row in enumerate(self._lists):
            for sl, lst in enumerate(row):
                assert bool(lst) == bool(self._sl_bitmap[fl] >> sl & 1), f"{self.name}: bitmap ({fl}, {sl})"
                assert all(x in self._free for x in lst)
            assert bool(self._sl_bitmap[fl]) == bool(self._fl_bitmap >> fl & 1), f"{self.name}: first-level bit {fl}"

    def __repr__(self) -> str:
        return (f"TLSF({self.name}: {self.base:#x}+{self.size:#x}, {self.free_bytes:#x} free, "
                f"largest {self.largest_free():#x})")


@dataclass(frozen=True)
class Described:
    """A VRAM region with an owner outside these pools (the boot region: amdq/am/driver.py BootMemory)."""
    name: str
    offset: int
    size: int
    owner: str


def default_pt_bytes(vram_size: int) -> int:
    """Page-table pool size for a VRAM size: 1/256 of it (a 4 KiB PTB maps 2 MiB with 4 KiB pages, so this maps
    half of VRAM at the smallest page size), clamped to 16..256 MiB, in 2 MiB steps."""
    return max(16 * MiB, min(256 * MiB, (vram_size >> 8) & ~(2 * MiB - 1)))


class VRAMPools:
    """VRAM divided for the AM driver: "heap" (buffers) from `reserved_low` up to the page tables, "pt" (page
    tables, just below the boot region) and "boot", the reserved region of driver.py's BootMemory, only
    described here: its placements are kept by name in the region's own directory so a partial boot finds
    them, so it is not a TLSF pool. Every pool is a TLSF with a 4 KiB granule.

    `visible` (a small BAR0: the bytes of VRAM the CPU sees) moves the page tables to the bottom, where the
    CPU writes them through the BAR, and splits the rest into "heap" (CPU-visible, up to `visible`) and
    "hidden" (above it: GPU-only buffers)."""

    def __init__(self, vram_size: int, boot_start: int, boot_end: int, *, pt_bytes: int | None = None,
                 reserved_low: int = 0, visible: int | None = None):
        pt_bytes = default_pt_bytes(vram_size) if pt_bytes is None else pt_bytes
        small = visible is not None and visible < boot_start
        pt_start = reserved_low if small else boot_start - pt_bytes
        if not 0 <= reserved_low <= pt_start < pt_start + pt_bytes <= boot_start <= boot_end <= vram_size or \
                (small and not pt_start + pt_bytes < visible):
            raise ValueError(f"VRAM pools: {vram_size:#x} bytes of VRAM cannot hold a heap from {reserved_low:#x}, "
                             f"{pt_bytes:#x} bytes of page tables and the boot region {boot_start:#x}..{boot_end:#x}"
                             + (f" with {visible:#x} bytes CPU-visible" if small else ""))
        self.vram_size = vram_size
        self.pt = TLSF(pt_start, pt_bytes, name="VRAM page tables")
        if small:
            self.heap = TLSF(pt_start + pt_bytes, visible - pt_start - pt_bytes, name="VRAM heap (CPU-visible)")
            self.hidden: TLSF | None = TLSF(visible, boot_start - visible, name="VRAM heap (GPU-only)")
        else:
            self.heap = TLSF(reserved_low, pt_start - reserved_low, name="VRAM heap")
            self.hidden = None
        self.boot = Described("boot", boot_start, boot_end - boot_start, "amdq.am.driver.BootMemory")
        self.pools = {"heap": self.heap, "pt": self.pt, **({"hidden": self.hidden} if self.hidden else {})}

    @classmethod
    def for_context(cls, am, **kw) -> "VRAMPools":
        """The pools of a booting device: its VRAM size, boot region and CPU-visible VRAM (am: the driver's
        Context)."""
        visible = getattr(am.vram, "visible", None)
        return cls(am.vram.size, am.boot.start, am.boot.end, visible=visible, **kw)

    def pool_of(self, offset: int) -> TLSF:
        for p in self.pools.values():
            if p.owns(offset):
                return p
        where = "the boot region (BootMemory owns it)" if self.boot.offset <= offset < self.boot.offset + self.boot.size \
            else "no pool"
        raise InvalidFree(f"VRAM offset {offset:#x} is in {where}")

    def alloc(self, size: int, align: int | None = None, pool: str = "heap") -> int:
        return self.pools[pool].alloc(size, align)

    def free(self, offset: int) -> None:
        self.pool_of(offset).free(offset)

    def layout(self) -> list[tuple[str, int, int]]:
        """(name, offset, bytes) of every region, by address."""
        rows = [(n, p.base, p.size) for n, p in self.pools.items()] + [(self.boot.name, self.boot.offset, self.boot.size)]
        return sorted(rows, key=lambda r: r[1])
