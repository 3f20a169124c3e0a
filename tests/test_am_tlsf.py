"""The TLSF allocator of the AM driver (amdq/am/tlsf.py) against a brute-force model, and the VRAM pools.

What each test proves:
  * random alloc/free sequences (fixed seeds, mixed sizes and alignments) agree with a brute-force model of
    the range: every offset is aligned and inside the range, no two live allocations overlap, free_bytes and
    the free blocks are exactly the model's holes (so free blocks are maximal: coalescing is complete), and
    the allocator refuses a request only when no hole of the model can hold it;
  * alignment up to 16 MiB is honoured, also when the range's base is not aligned;
  * freeing everything, in any order, gives back one block of the whole range;
  * fragmentation: filling the pool, then a churn of random sizes reports largest free block / free bytes,
    and with k allocations left the ratio is at least 1/(k+1) (k allocations cut the free space into at most
    k+1 holes); the same workload with the neighbour merge switched off falls far below that bound, so the
    bound tests coalescing;
  * errors: OutOfMemory names size, alignment, free bytes and the largest block; a double free and a foreign
    offset are InvalidFree naming the offset;
  * VRAMPools: heap, page tables and the described boot region tile VRAM without overlap, frees go to the
    pool that owns the offset, the boot region is not a pool.
"""
from __future__ import annotations

import random

import pytest

from amdq.am import tlsf as T
from amdq.am.tlsf import TLSF, VRAMPools
from amdq.errors import InvalidFree, OutOfMemory

G = 4096
MiB = 1 << 20


class Model:
    """The range as a sorted list of live (start, end) intervals; holes are what is between them."""

    def __init__(self, base: int, size: int):
        self.base, self.end = base, base + size
        self.live: dict[int, int] = {}

    def holes(self) -> list[tuple[int, int]]:
        out, pos = [], self.base
        for s in sorted(self.live):
            if s > pos:
                out.append((pos, s - pos))
            pos = s + self.live[s]
        if pos < self.end:
            out.append((pos, self.end - pos))
        return out

    def fits(self, size: int, align: int) -> bool:
        for s, n in self.holes():
            a = (s + align - 1) & -align
            if a + size <= s + n:
                return True
        return False

    def add(self, off: int, size: int) -> None:
        end = off + size
        assert self.base <= off and end <= self.end, f"{off:#x}+{size:#x} outside the range"
        for s, n in self.live.items():
            assert end <= s or s + n <= off, f"{off:#x}+{size:#x} overlaps {s:#x}+{n:#x}"
        self.live[off] = size


def check(t: TLSF, m: Model) -> None:
    t.verify()
    holes = m.holes()
    assert t.free_blocks() == holes
    assert t.free_bytes == sum(n for _, n in holes)
    assert t.largest_free() == max((n for _, n in holes), default=0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sequences_against_the_model(seed):
    rng = random.Random(seed)
    base, size = 0x30000, 48 * MiB                  # a base aligned only to 64 KiB
    t, m = TLSF(base, size, G), Model(base, size)
    refused = 0
    for step in range(1500):
        if m.live and (rng.random() < 0.45 or len(m.live) > 200):
            off = rng.choice(list(m.live))
            t.free(off)
            del m.live[off]
        else:
            n = rng.choice([rng.randint(1, 16) * G, rng.randint(1, 512) * G, rng.randint(1, 2048) * G, rng.randint(1, 5000)])
            align = rng.choice([G, G, 2 * G, 64 << 10, 2 * MiB])
            rounded = (n + G - 1) // G * G
            try:
                off = t.alloc(n, align)
            except OutOfMemory:
                refused += 1
                assert not m.fits(rounded, align), f"step {step}: refused {rounded:#x}/{align:#x} that fits a hole"
            else:
                assert off % align == 0
                assert t.size_of(off) == rounded
                m.add(off, rounded)
        if step % 25 == 0:
            check(t, m)
    check(t, m)
    assert refused > 0, "the sequence never filled the pool: it does not test the refusals"


def test_alignment_is_honoured():
    t = TLSF(0x1000, 256 * MiB - 0x1000, G)          # base aligned to 4 KiB only
    offs = []
    for k in range(12, 25):
        for _ in range(3):
            off = t.alloc(G, 1 << k)
            assert off % (1 << k) == 0 and t.owns(off)
            offs.append(off)
    t.verify()
    for off in offs:
        t.free(off)
    assert t.free_blocks() == [(0x1000, 256 * MiB - 0x1000)]


def test_freeing_everything_coalesces_into_one_block():
    rng = random.Random(7)
    t = TLSF(0, 64 * MiB, G)
    offs = []
    while True:
        try:
            offs.append(t.alloc(rng.randint(1, 64) * G, rng.choice([G, 16 * G])))
        except OutOfMemory:
            break
    assert t.free_bytes < 64 * MiB // 8
    rng.shuffle(offs)
    for off in offs:
        t.free(off)
    t.verify()
    assert t.free_blocks() == [(0, 64 * MiB)] and t.largest_free() == t.free_bytes == 64 * MiB


def fragmentation_run(t: TLSF, seed: int, keep: int) -> tuple[float, list[float]]:
    """Fill the pool with random sizes, churn (free and allocate random sizes), then free all but `keep`
    allocations; the ratio largest free / free bytes at the end, and sampled during the churn."""
    rng = random.Random(seed)
    live, samples = [], []
    size = lambda: rng.choice([rng.randint(1, 8), rng.randint(1, 64), rng.randint(1, 512)]) * G
    while True:
        try:
            live.append(t.alloc(size()))
        except OutOfMemory:
            break
    for step in range(3000):
        if live and (rng.random() < 0.5 or t.free_bytes < t.size // 4):
            t.free(live.pop(rng.randrange(len(live))))
        else:
            try:
                live.append(t.alloc(size()))
            except OutOfMemory:
                pass
        if step % 300 == 299:
            samples.append(t.largest_free() / t.free_bytes)
    rng.shuffle(live)
    for off in live[keep:]:
        t.free(off)
    return t.largest_free() / t.free_bytes, samples


def test_fragmentation_bound_and_that_it_needs_coalescing(monkeypatch):
    keep = 16
    ratio, samples = fragmentation_run(TLSF(0, 128 * MiB, G), seed=11, keep=keep)
    print(f"\nTLSF fragmentation: largest free / free bytes during churn "
          f"{', '.join(f'{s:.2f}' for s in samples)}; with {keep} allocations left {ratio:.3f}")
    assert ratio >= 1 / (keep + 1)

    # the same workload with the neighbour merge switched off: free blocks stay cut, the bound fails
    def no_merge(self, offset):
        start = (offset - self.base) >> self._shift
        self._insert_free(start)
    monkeypatch.setattr(TLSF, "free", no_merge)
    broken, _ = fragmentation_run(TLSF(0, 128 * MiB, G), seed=11, keep=keep)
    print(f"without coalescing: {broken:.4f}")
    assert broken < 1 / (keep + 1) / 2                 # fails the bound above by far


def test_errors_name_what_went_wrong():
    t = TLSF(0x100000, 4 * MiB, G, name="test pool")
    a = t.alloc(3 * MiB)
    with pytest.raises(OutOfMemory) as e:
        t.alloc(2 * MiB, 2 * MiB)
    msg = str(e.value)
    assert "test pool" in msg and "0x200000 bytes aligned to 0x200000" in msg and "0x100000 bytes free" in msg \
        and "largest free block is 0x100000" in msg
    t.free(a)
    with pytest.raises(InvalidFree, match="double free of 0x100000"):
        t.free(a)
    b = t.alloc(2 * G)
    with pytest.raises(InvalidFree, match=f"{b + G:#x}.*inside"):
        t.free(b + G)                                  # inside an allocation, not its start
    with pytest.raises(InvalidFree, match="0x10.*outside"):
        t.free(0x10)
    with pytest.raises(InvalidFree):
        t.free(b + 1)
    with pytest.raises(ValueError):
        t.alloc(0)
    with pytest.raises(ValueError):
        t.alloc(G, 3 * G)
    t.verify()


def test_second_level_lists():
    # sizes in granules map to (first, second) lists with 16 steps per power of two; a search rounds up
    assert T._mapping(1) == (0, 1) and T._mapping(15) == (0, 15) and T._mapping(16) == (1, 0)
    assert T._mapping(31) == (1, 15) and T._mapping(32) == (2, 0) and T._mapping(33) == (2, 0)
    assert T._round_up_to_list(33) == 34 and T._round_up_to_list(34) == 34 and T._round_up_to_list(15) == 15
    t = TLSF(0, 33 * G, G)                             # one free block of 33 granules: the rounded search misses it
    assert t.alloc(33 * G) == 0 and t.free_bytes == 0


def test_vram_pools():
    vram = 1 << 30
    boot_end = vram - (64 << 10)
    boot_start = boot_end - 64 * MiB
    p = VRAMPools(vram, boot_start, boot_end)
    rows = p.layout()
    assert [r[0] for r in rows] == ["heap", "pt", "boot"]
    for (_, o1, s1), (_, o2, _) in zip(rows, rows[1:]):
        assert o1 + s1 == o2                           # they tile VRAM below the discovery table
    assert rows[0][1] == 0 and rows[-1][1] + rows[-1][2] == boot_end
    assert p.pt.size == T.default_pt_bytes(vram) == 16 * MiB
    a, b = p.alloc(MiB), p.alloc(G, pool="pt")
    assert p.pool_of(a) is p.heap and p.pool_of(b) is p.pt
    p.free(a)
    p.free(b)
    assert p.heap.free_bytes == p.heap.size and p.pt.free_bytes == p.pt.size
    with pytest.raises(InvalidFree, match="boot region"):
        p.free(boot_start)
    with pytest.raises(OutOfMemory, match="VRAM page tables"):
        p.alloc(32 * MiB, pool="pt")
    assert T.default_pt_bytes(24 << 30) == 96 * MiB and T.default_pt_bytes(256 << 30) == 256 * MiB
    with pytest.raises(ValueError):
        VRAMPools(64 * MiB, 8 * MiB, 16 * MiB, pt_bytes=16 * MiB)
