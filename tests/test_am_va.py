"""The process-wide GPU virtual-address allocator of the AM driver (amdq/am/va.py).

What each test proves:
  * the window is 16 TiB at 0x2000_0000_0000 inside the 48-bit space, and there is one shared allocator
    per process (every caller, hence every AM device, gets the same object);
  * default alignment: 2 MiB for buffers of 2 MiB and more, 64 KiB from 64 KiB, else 4 KiB; an explicit
    alignment is honoured; free gives the range back for reuse;
  * threads allocating and freeing at once get distinct, non-overlapping ranges;
  * exhaustion is OutOfMemory naming the window, a bad free is InvalidFree.
"""
from __future__ import annotations

import threading

import pytest

from amdq.am import va as V
from amdq.errors import InvalidFree, OutOfMemory
from amdq.hw import vm as hw

MiB = 1 << 20


def test_window_and_one_shared_allocator():
    assert V.VA_BASE == 0x2000_0000_0000 and V.VA_SIZE == 16 << 40
    assert V.VA_BASE + V.VA_SIZE <= 1 << hw.VA_BITS
    a = V.shared()
    import importlib
    assert importlib.import_module("amdq.am.va").shared() is a
    x = a.alloc(3 * MiB)
    try:
        assert x in a and x % (2 * MiB) == 0
    finally:
        a.free(x)


def test_alignment_and_reuse():
    a = V.VAAllocator(V.VA_BASE, 1 << 30)
    big, mid, small = a.alloc(5 * MiB), a.alloc(100 << 10), a.alloc(5000)
    assert big % (2 * MiB) == 0 and mid % (64 << 10) == 0 and small % 4096 == 0
    one = a.alloc(MiB)
    assert one % MiB == 0 and V.default_alignment(3 * MiB // 2) == MiB   # the largest fragment it fills
    a.free(one)
    assert a.size_of(small) == 8192 and a.size_of(big) == 5 * MiB
    odd = a.alloc(4096, align=1 << 24)
    assert odd % (1 << 24) == 0
    a.free(big)
    assert a.alloc(5 * MiB) == big                    # the range comes back
    for x in (mid, small, odd, big):
        a.free(x)
    assert a.free_bytes == 1 << 30 and a.largest_free() == 1 << 30


def test_threads_get_distinct_ranges():
    a = V.VAAllocator(V.VA_BASE, 1 << 34)
    got: list[list[tuple[int, int]]] = [[] for _ in range(8)]

    def work(k: int) -> None:
        mine = []
        for i in range(300):
            n = (1 + (i * 7 + k) % 40) * 64 << 10
            mine.append((a.alloc(n), n))
            if i % 3 == 2:
                got[k].append(mine.pop(0))            # keep some, free others
                a.free(mine.pop(0)[0])
        got[k].extend(mine)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    spans = sorted(r for rs in got for r in rs)
    for (s1, n1), (s2, _) in zip(spans, spans[1:]):
        assert s1 + n1 <= s2, f"{s1:#x}+{n1:#x} overlaps {s2:#x}"
    assert a.free_bytes == (1 << 34) - sum((n + 4095) // 4096 * 4096 for _, n in spans)


def test_exhaustion_and_bad_free():
    a = V.VAAllocator(V.VA_BASE, 8 * MiB, name="small window")
    a.alloc(6 * MiB)
    with pytest.raises(OutOfMemory, match="small window 0x200000000000..0x2000007fffff.*0x400000 bytes aligned to 0x200000"):
        a.alloc(4 * MiB)
    with pytest.raises(InvalidFree):
        a.free(V.VA_BASE + 4096)
