"""The runtime's memory on an AM device (am/memory.py through iface/pci.py) on the simulated PCI function:
VRAM and host buffers at addresses of the process-wide window, mapped into VM context 0 so the simulated
engines (which walk the driver's page tables through the simulated GMC) reach them; a free unmaps and
flushes, so the GPU faults on the address afterwards; small BAR keeps CPU-visible buffers under the BAR."""
from __future__ import annotations

import pytest

from amdq.am import va as VA
from amdq.errors import DeviceError
from amdq.iface.pci import PCI
from amdq.sim.pci.device import SimPCIDevice

ARCHS = ("gfx1100", "gfx1201", "gfx942")


@pytest.fixture
def booted(tmp_path):
    opened = []

    def make(arch="gfx1100", small_bar=False):
        dev = SimPCIDevice(arch, small_bar=small_bar, state=str(tmp_path), mode="sync")
        iface = PCI(dev, arch, standin=True)
        opened.append((dev, iface))
        return dev, iface
    yield make
    for dev, iface in opened:
        iface.close()
        dev.close()


def gpu_read(dev, va: int, n: int) -> bytes:
    """What the GPU reads at `va` (VMID 0, through the simulated GFXHUB)."""
    return dev.parts["gmc"].read("GC", va, n)


@pytest.mark.parametrize("arch", ARCHS)
def test_vram_and_host_buffers_reach_the_gpu(booted, arch):
    dev, iface = booted(arch)
    v = iface.alloc(3 * 4096, "vram")
    h = iface.alloc(4096, "gtt")
    u = iface.alloc(4096, "gtt", uncached=True)
    for a in (v, h, u):
        assert VA.VA_BASE <= a.va < VA.VA_BASE + VA.VA_SIZE
    v.cpu.mv[8192:8200] = b"vram-buf"
    h.cpu.mv[:8] = b"hostbuf!"
    assert gpu_read(dev, v.va + 8192, 8) == b"vram-buf"
    assert gpu_read(dev, h.va, 8) == b"hostbuf!"
    dev.parts["gmc"].write("GC", u.va + 16, b"from-gpu")                # the GPU writes host memory
    assert bytes(u.cpu.mv[16:24]) == b"from-gpu"
    # host pages are mapped as system memory at their bus address
    leaf = iface.memory.vm.lookup(h.va)
    assert leaf.pa == h.meta["bus"] and iface.memory.vm.flags_of(leaf.entry).system


@pytest.mark.parametrize("arch", ARCHS)
def test_free_unmaps_and_the_gpu_faults(booted, arch):
    dev, iface = booted(arch)
    a = iface.alloc(4096, "vram")
    a.cpu.mv[:4] = b"live"
    assert gpu_read(dev, a.va, 4) == b"live"                           # translation now cached in the TLBs
    iface.free(a)
    # the flush dropped the cached translation: the access faults (to the default page, as VM0 asks)
    assert gpu_read(dev, a.va, 4) == bytes(4)
    gc = iface.driver.regs.GC
    assert gc.regGCVM_L2_PROTECTION_FAULT_ADDR_LO32.read() == (a.va >> 12) & 0xFFFFFFFF
    assert dev.gpu.vm(0).walk(a.va) is None
    with pytest.raises(DeviceError, match="not a live allocation"):
        iface.free(a)


def test_large_buffers_are_huge_pages_and_vram_is_accounted(booted):
    dev, iface = booted()
    before = iface.available("vram")
    a = iface.alloc(4 << 20, "vram", cpu=False)
    assert a.va % (2 << 20) == 0 and a.cpu is None
    assert iface.memory.vm.lookup(a.va).size == 2 << 20                 # a PDB0 entry maps 2 MiB
    assert iface.available("vram") == before - (4 << 20)
    iface.free(a)
    assert iface.available("vram") == before


def test_small_bar_keeps_cpu_buffers_visible(booted):
    dev, iface = booted(small_bar=True)
    bar = dev.bar_sizes[0]
    a = iface.alloc(1 << 20, "vram")
    assert a.cpu is not None and a.meta["vram_offset"] + a.size <= bar
    g = iface.alloc(1 << 20, "vram", cpu=False)                         # GPU-only: above the BAR
    assert g.meta["vram_offset"] >= bar and g.cpu is None
    a.cpu.mv[:5] = b"small"
    assert gpu_read(dev, a.va, 5) == b"small"


def test_two_devices_share_the_address_window(booted, tmp_path):
    _, i0 = booted("gfx1100")
    d1 = SimPCIDevice("gfx1201", state=str(tmp_path / "second"), mode="sync")
    i1 = PCI(d1, "gfx1201", standin=True)
    try:
        a, b = i0.alloc(4096), i1.alloc(4096)
        assert a.va != b.va                                              # one allocator for every AM device
    finally:
        i1.close()
        d1.close()


def test_a_partial_boot_starts_from_an_empty_vm(booted):
    dev, iface = booted()
    a = iface.alloc(4096)
    va = a.va
    iface.close()                                                       # unmapped everything, flushed
    dev.close()
    dev2, iface2 = booted()
    assert iface2.report.kind == "partial"
    assert dev2.gpu.vm(0).walk(va) is None and gpu_read(dev2, va, 4) == bytes(4)
    b = iface2.alloc(4096)
    b.cpu.mv[:4] = b"next"
    assert gpu_read(dev2, b.va, 4) == b"next"


def test_a_function_without_dma_gets_visible_vram_for_host_buffers(booted, monkeypatch):
    dev, iface = booted()

    def no_dma(size):
        e = DeviceError("no DMA here")
        e.unsupported = True
        raise e
    monkeypatch.setattr(dev, "dma_alloc", no_dma)
    a = iface.alloc(4096, "gtt", uncached=True)
    assert a.kind == "vram" and a.meta["instead_of"] == "uncached" and a.cpu is not None
    a.cpu.mv[:4] = b"bar0"
    assert gpu_read(dev, a.va, 4) == b"bar0"
    iface.free(a)
