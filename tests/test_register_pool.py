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
    n = max(1 << 20, 64 * mmap.PAGESIZE)                 # (pooled from 1 MiB on)

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
