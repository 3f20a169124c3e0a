"""Host<->device copies from and into the caller's pinned pages (amdq/runtime/hostmem.py): one SDMA pass through a
KFD USERPTR buffer (SIMKFD) or an AM IOMMU mapping (SIMPCI), page-aligned or not, pins reused for a reused host
buffer and dropped when the caller lets go (never a stale mapping), faults where the hardware would."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from amdq.errors import GPUFault
from amdq.runtime.hostmem import PIN_MIN, host_address
from sims import DEVICES, device_id, open_sim

N = PIN_MIN + 3 * 4096 + 123                       # above the pinning threshold, not a whole number of pages


@pytest.fixture(params=DEVICES[:2], ids=device_id)           # SIMKFD and SIMPCI (gfx1100)
def dev(request, monkeypatch, tmp_path):
    monkeypatch.setenv("AMDQ_SIM_MODE", "async")
    d = open_sim(monkeypatch, tmp_path, *request.param)
    yield d
    d.close()


def no_staging(dev, monkeypatch):
    """Fail the test if a copy goes through staging buffers."""
    def refuse(*a, **k):
        raise AssertionError("the copy went through staging")
    monkeypatch.setattr(dev.copyq, "upload", refuse)
    monkeypatch.setattr(dev.copyq, "download", refuse)


def pin_of(dev, arr: np.ndarray):
    addr = host_address(memoryview(arr).cast("B"))
    return next((p for p in dev.pins.pins if p.start <= addr and addr + arr.nbytes <= p.end), None)


@pytest.mark.parametrize("offset", [0, 1, 4095, 4097])
def test_pinned_copies_aligned_and_unaligned(dev, monkeypatch, offset):
    no_staging(dev, monkeypatch)
    rng = np.random.default_rng(offset)
    host = rng.integers(0, 256, N + offset + 8192, dtype=np.uint8)
    src = host[offset:offset + N]
    buf = dev.alloc(N + 64)
    buf.write(src, offset=32)
    assert pin_of(dev, src) is not None                     # the bytes came straight from these pages
    src_copy = src.copy()
    src[:] = 0                                              # write has finished with the pages when it returns
    out = np.full(N + offset + 8192, 0xA5, np.uint8)
    buf.read_into(out[offset:offset + N], offset=32)
    assert (out[offset:offset + N] == src_copy).all()
    assert (out[:offset] == 0xA5).all() and (out[offset + N:] == 0xA5).all()   # the rest of the pages untouched
    back = np.empty(N + 64, np.uint8)
    buf.read_into(back)
    assert (back[32:32 + N] == src_copy).all()


def test_reused_host_buffer_keeps_its_pin(dev, monkeypatch):
    no_staging(dev, monkeypatch)
    a = np.arange(N, dtype=np.uint8)
    buf = dev.alloc(N)
    buf.write(a)
    pin = pin_of(dev, a)
    a[::7] = 3                                              # changed between uses: copied as it is now
    buf.write(a)
    assert pin_of(dev, a) is pin and len(dev.pins.pins) == 1
    out = np.zeros(N, np.uint8)
    for _ in range(3):
        buf.read_into(out)
        assert (out == a).all()
    assert len(dev.pins.pins) == 2


def dma_windows(dev):
    """The simulator's DMA windows onto user pages: the GPU's own (SIMKFD), the host bus IOMMU's (SIMPCI)."""
    return dev.sim.gpu.bus.iommu if hasattr(dev.sim, "gpu") else dev.sim.dma


def test_freed_and_reallocated_arrays_are_not_copied_from_stale_mappings(dev):
    buf = dev.alloc(N)
    windows = len(dma_windows(dev))
    for i in range(6):
        a = np.full(N, i, np.uint8)                         # likely at the address of the last one, freed
        buf.write(a)
        assert buf.read(16, offset=N - 16) == bytes([i]) * 16
        out = np.empty(N, np.uint8)
        buf.read_into(out)
        assert (out == i).all()
        del a, out
        gc.collect()
    dev.pins.trim()
    assert dev.pins.pins == []                              # nothing kept once the caller let go ...
    assert len(dma_windows(dev)) == windows                 # ... and nothing left mapped in the simulator


def test_a_bytearray_is_unpinned_after_the_copy(dev):
    buf = dev.alloc(N)
    buf.write(bytes(range(256)) * (N // 256) + bytes(N % 256))
    ba = bytearray(N)
    buf.read_into(ba)
    assert ba[:256] == bytes(range(256))
    ba.extend(b"more")                                      # no export left behind: it may be resized
    assert dev.pins.pins == [] or all(not isinstance(p.mv.obj, bytearray) for p in dev.pins.pins)


def test_small_copies_stage(dev):
    buf = dev.alloc(4096)
    buf.write(np.ones(4096, np.uint8))
    assert dev.pins.pins == [] and buf.read() == b"\x01" * 4096


def test_released_pin_faults_and_read_only_pin_refuses_writes(dev):
    buf = dev.upload(np.arange(N, dtype=np.uint8))
    out = np.empty(N, np.uint8)
    buf.read_into(out)
    va = pin_of(dev, out).gpu(host_address(memoryview(out)))
    del out
    dev.pins.trim()                                         # unmapped: the GPU address leads nowhere now
    assert dev.pins.pins == []
    dev.copyq.copy_async(va, buf.addr, 4096)
    with pytest.raises(GPUFault) as e:
        dev.synchronize(timeout_ms=5000)
    assert e.value.address == va and f"{va:#x}" in str(e.value)

    src = bytes(N)                                          # a read-only source: pinned read-only
    buf.write(src)
    pin = next(p for p in dev.pins.pins if p.mv.obj is src)
    ro = pin.gpu(host_address(memoryview(src)))
    dev.copyq.copy_async(ro, buf.addr, 64)
    with pytest.raises(GPUFault) as e:
        dev.synchronize(timeout_ms=5000)
    assert e.value.address == ro and "read-only" in str(e.value) and "mapping of the host pages" in str(e.value)
    assert buf.read(8) == b"\0" * 8                         # the recovered queue copies again
