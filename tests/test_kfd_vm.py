"""The simulated KFD driver's page tables: VRAM in naturally aligned blocks whose PTEs carry FRAG (as amdgpu's VRAM
manager and amdgpu_vm_pte_fragment make them), system memory without fragments."""
from __future__ import annotations

import numpy as np
import pytest

import amdq
from amdq.hw import vm as hw
from amdq.sim.kfd import MAX_FRAG, _block_align, _fragments


def test_fragments_follow_the_common_alignment():
    assert _fragments(16, 16, 20).tolist() == [4] * 16 + [2] * 4
    assert _fragments(1, 3, 5).tolist() == [0, 1, 1, 1, 1]            # VA and PA aligned alike only from page 1
    assert _fragments(0, 1, 8).tolist() == [0] * 8                    # never aligned alike: no fragment
    assert _fragments(0, 0, 512).tolist() == [MAX_FRAG] * 512
    assert [_block_align(n) for n in (4096, 5000, 64 << 10, (256 << 10) + 4096, 16 << 20)] == \
        [4096, 4096, 64 << 10, 256 << 10, 2 << 20]


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_vram_ptes_carry_fragments_and_one_walk_covers_them(arch):
    dev = amdq.open_device(f"SIMKFD+AMD:{arch}")
    try:
        buf, host = dev.alloc(256 << 10), dev.alloc(64 << 10, kind="gtt")
        gpu = dev.sim
        (mmu,) = gpu.vms.values()                                                    # the process's VM
        arena, pa, size, pte = mmu.walk(buf.addr)
        f = hw.decode(gpu.target.gfx_version, pte)
        assert arena is gpu.vram and f["FRAG"] == 6 and pa % (256 << 10) == 0      # 64 pages: 2**6
        mmu.invalidate()
        mmu._run_for(buf.addr + 8)
        run = next(r for r in mmu._tlb[1] if r.va <= buf.addr < r.end)
        assert (run.va, run.end) == (buf.addr, buf.addr + (256 << 10))               # one walk: the fragment
        assert hw.decode(gpu.target.gfx_version, mmu.walk(host.addr)[3])["FRAG"] == 0     # system pages: none
        x = np.arange(64 << 10, dtype=np.uint32)
        buf.write(x)
        assert np.array_equal(buf.numpy(np.uint32), x)
    finally:
        dev.close()

