"""The shader core's pool of large register arrays (sim/shader/wave.py Pool)."""
import mmap

import numpy as np
import pytest

from amdq.sim.shader import wave as W


def test_register_pool_clears_only_written_pages():
    """A pooled register array comes back zeroed where it was written, and its pages never written are left
    unmapped (writing zeros there would cost a page fault each); the same with dirty ranges."""
    if W._MINCORE is None:
        pytest.skip("no mincore (or swap is on): pooled arrays are cleared whole")
    pool = W.Pool()
    n = max(W.POOLED, 64 * mmap.PAGESIZE)                # (pooled from W.POOLED bytes on)

    def resident(a):
        vec = np.zeros(n // mmap.PAGESIZE, np.uint8)
        assert W._MINCORE(a.ctypes.data, n, vec.ctypes.data) == 0
        return np.flatnonzero(vec & 1).tolist()
    a = pool.zeros((n,), np.uint8)
    assert resident(a) == []
    a[5 * mmap.PAGESIZE + 7] = 1
    a[40 * mmap.PAGESIZE:42 * mmap.PAGESIZE] = 3
    for dirty in (None, ([(0, n)],)):
        pool.give(a, dirty=dirty)
        b = pool.zeros((n,), np.uint8)
        assert b.ctypes.data == a.ctypes.data and resident(b) == [5, 40, 41]
        P = mmap.PAGESIZE                                   # (reading a page never written would map it)
        assert not b[5 * P:6 * P].any() and not b[40 * P:42 * P].any()
        a = b
        a[5 * mmap.PAGESIZE + 7] = 1
        a[40 * mmap.PAGESIZE:42 * mmap.PAGESIZE] = 3
    assert a[5 * mmap.PAGESIZE + 7] == 1 and not a[:5 * mmap.PAGESIZE].any()      # (the rest reads as zero)


def test_prefaulted_reserve():
    """Pool.prefault maps and faults in memory on a background thread; fresh arrays then come from it, zeroed,
    already mapped (no page fault on first touch), page-aligned and apart; past its end they are mapped fresh."""
    import time
    if W._MINCORE is None:
        pytest.skip("no mincore (or swap is on)")
    pool = W.Pool()
    n = 1 << 20
    pool.prefault(3 * n)
    pool.prefault(3 * n)                                  # (once)
    deadline = time.monotonic() + 30
    while pool.reserve is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.reserve is not None and len(pool.reserve) == 3 * n

    def resident(a):
        vec = np.zeros(len(a) // mmap.PAGESIZE, np.uint8)
        assert W._MINCORE(a.ctypes.data, len(a), vec.ctypes.data) == 0
        return int((vec & 1).sum())
    got = [pool.zeros((n // 4 + 1,), np.uint32) for _ in range(2)]       # (not a whole number of pages)
    for a in got:
        b = a.view(np.uint8)
        assert not b.any() and b.ctypes.data % mmap.PAGESIZE == 0 and resident(b[:n]) == n // mmap.PAGESIZE
    assert got[1].ctypes.data - got[0].ctypes.data >= got[0].nbytes
    fresh = pool.zeros((n,), np.uint8)                    # (the reserve has less than n left)
    assert resident(fresh) == 0 and not fresh.any()
