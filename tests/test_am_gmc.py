"""The AM driver's GMC block against the simulated hubs: the framebuffer read from the hardware, the system
aperture, VM context 0 mapping pages through the multi-level tables rooted in the boot region, the TLB that keeps a changed PTE
until the invalidate request/ack handshake, the MMHUB semaphore, faults of a wrong context setup."""
from __future__ import annotations

import pytest

from amdq.am.gmc import GMC, INV_ENG
from amdq.errors import AMTimeout, DeviceError, GPUFault, VMError
from amdq.sim.pci.gmc import FB_BASE

from am_bench import Bench

ARCHS = ("gfx1100", "gfx1201", "gfx942")
PAGE = 4096


def booted(arch="gfx1100", parts=("gmc",)):
    b = Bench(arch, parts=parts)
    drv = GMC(b.am)
    drv.init_sw()
    drv.init_hw()
    return b, drv


def page_with(b, tag: bytes) -> int:
    off = b.gpu.vram.alloc(PAGE)
    b.gpu.vram.write(off, tag * (PAGE // len(tag)))
    return off


@pytest.mark.parametrize("arch", ARCHS)
def test_vm0_maps_a_page_on_every_hub(arch):
    b, drv = booted(arch)
    assert drv.fb_start == FB_BASE and drv.fb_end == FB_BASE + b.gpu.vram.size - 1
    off = page_with(b, b"amdq")
    va = drv.map(off, PAGE)
    assert drv.vm0_start <= va <= drv.vm0_end and va > drv.fb_end
    assert b.gmc.read("MM", va + 8, 8) == b"amdqamdq"
    for inst in range(b.target.xcc):
        assert b.gmc.read("GC", va, 4, inst=inst) == b"amdq"
    # the GFXHUB's VMID 0 is the simulated GPU's own context: the engines see the same mapping
    assert b.gpu.vm(0).walk(va)[1] == off
    # the root table lives in the boot region, the others in the page-table pool
    assert drv.am.boot.start <= drv.root.offset < drv.am.boot.end
    assert drv.pools.pt.owns(drv.vm.entry_offset(va))
    b.gmc.write("MM", va + 4, b"WXYZ")
    assert b.gpu.vram.read(off, 8) == b"amdqWXYZ"


@pytest.mark.parametrize("arch", ARCHS)
def test_changed_pte_is_stale_until_invalidated(arch):
    b, drv = booted(arch)
    a, c = page_with(b, b"AAAA"), page_with(b, b"CCCC")
    va = drv.map(a, PAGE)
    assert b.gmc.read("MM", va, 4) == b"AAAA" and b.gmc.read("GC", va, 4, inst=b.target.xcc - 1) == b"AAAA"
    # the driver rewrites the PTE in memory but does not invalidate: the TLBs keep the old translation
    slot = drv.vm.entry_offset(va)
    old = b.gpu.vram.read(slot, 8)
    pte = int.from_bytes(old, "little") & ~((1 << 48) - 1 & ~0xFFF) | c
    b.gpu.vram.write(slot, pte.to_bytes(8, "little"))
    assert b.gmc.read("MM", va, 4) == b"AAAA"
    assert b.gmc.read("GC", va, 4, inst=b.target.xcc - 1) == b"AAAA"
    # the MMHUB handshake alone: the GFXHUB stays stale
    drv.flush_hub("MMHUB", 0)
    assert b.gmc.read("MM", va, 4) == b"CCCC"
    assert b.gmc.read("GC", va, 4, inst=b.target.xcc - 1) == b"AAAA"
    drv.flush_tlb(0)
    assert b.gmc.read("GC", va, 4, inst=b.target.xcc - 1) == b"CCCC"


def test_request_without_invalidate_bits_is_never_acknowledged():
    b, drv = booted()
    a, c = page_with(b, b"AAAA"), page_with(b, b"CCCC")
    va = drv.map(a, PAGE)
    assert b.gmc.read("GC", va, 4) == b"AAAA"
    slot = drv.vm.entry_offset(va)
    pte = int.from_bytes(b.gpu.vram.read(slot, 8), "little")
    b.gpu.vram.write(slot, (pte - a + c).to_bytes(8, "little"))
    gc = drv.am.regs.GC
    gc[f"regGCVM_INVALIDATE_ENG{INV_ENG}_REQ"].write(PER_VMID_INVALIDATE_REQ=1)     # no L2/L1 PTE bits
    assert gc[f"regGCVM_INVALIDATE_ENG{INV_ENG}_ACK"].read() == 0
    assert b.gmc.read("GC", va, 4) == b"AAAA"
    with pytest.raises(AMTimeout, match=r"GC regGCVM_INVALIDATE_ENG3_ACK \(VMID 0 TLB invalidate acknowledge\)"):
        gc.regGCVM_INVALIDATE_ENG3_ADDR_RANGE_LO32.write(0xFFFFFFFF)
        drv._set = lambda reg, **f: reg.write(PER_VMID_INVALIDATE_REQ=1)        # a driver that forgets the bits
        drv.flush_hub("GC", 0, eng=3)


def test_invalidate_range_of_the_engine():
    b, drv = booted()
    a, c = page_with(b, b"AAAA"), page_with(b, b"CCCC")
    va = drv.map(a, PAGE)
    assert b.gmc.read("GC", va, 4) == b"AAAA"
    slot = drv.vm.entry_offset(va)
    pte = int.from_bytes(b.gpu.vram.read(slot, 8), "little")
    b.gpu.vram.write(slot, (pte - a + c).to_bytes(8, "little"))
    gc = drv.am.regs.GC
    gc.regGCVM_INVALIDATE_ENG5_ADDR_RANGE_LO32.write(0)           # an engine whose range was never programmed
    gc.regGCVM_INVALIDATE_ENG5_ADDR_RANGE_HI32.write(0)
    drv.flush_hub("GC", 0, eng=5)                                 # acknowledged, but covers page 0 only
    assert b.gmc.read("GC", va, 4) == b"AAAA"
    drv.flush_hub("GC", 0)
    assert b.gmc.read("GC", va, 4) == b"CCCC"


def test_mmhub_semaphore():
    b, drv = booted()
    sem = drv.am.regs.MMHUB[f"regMMVM_INVALIDATE_ENG{INV_ENG}_SEM"]
    assert sem.read() == 1 and sem.read() == 0          # taken: the next reader waits
    drv.timeout_ms = 20
    with pytest.raises(AMTimeout, match=r"MMHUB regMMVM_INVALIDATE_ENG17_SEM \(invalidate semaphore\)"):
        drv.flush_tlb(0)
    sem.write(0)
    drv.flush_tlb(0)
    assert sem.read() == 1                              # the flush released it


@pytest.mark.parametrize("arch", ARCHS)
def test_system_aperture(arch):
    b = Bench(arch, parts=("gmc",))
    off = page_with(b, b"fbfb")
    with pytest.raises(GPUFault, match=r"read at 0x80000"):          # power-on: no aperture yet
        b.gmc.read("MM", FB_BASE + off, 4)
    drv = GMC(b.am)
    drv.init_sw()
    drv.init_hw()
    assert b.gmc.read("MM", drv.mc(off), 4) == b"fbfb"
    assert b.gmc.read("GC", drv.mc(off), 4) == b"fbfb"


def test_wrong_context_setup_faults():
    b, drv = booted(parts=("gmc", "ih"))
    off = page_with(b, b"good")
    va = drv.map(off, PAGE)
    mm = drv.am.regs.MMHUB
    lo = mm.regMMVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32
    lo.write(lo.read() & ~1)                              # the PDE without VALID
    drv.flush_hub("MMHUB", 0)
    # the fault goes to the dummy page (the driver enabled the defaults) and is recorded
    assert b.gmc.read("MM", va, 4) == b"\0\0\0\0"
    st = mm.regMMVM_L2_PROTECTION_FAULT_STATUS.read_fields()
    assert st["VMID"] == 0 and st["RW"] == 0 and st["MAPPING_ERROR"] == 1
    assert mm.regMMVM_L2_PROTECTION_FAULT_ADDR_LO32.read() == (va >> 12) & 0xFFFFFFFF
    # without the defaults the access fails, naming the address
    mm.regMMVM_CONTEXT0_CNTL.update(VALID_PROTECTION_FAULT_ENABLE_DEFAULT=0)
    with pytest.raises(GPUFault, match=f"write at {va:#x} on MMHUB VMID 0 \\(no valid PTE\\)") as e:
        b.gmc.write("MM", va, b"x")
    assert e.value.address == va
    st = mm.regMMVM_L2_PROTECTION_FAULT_STATUS.read_fields()
    assert st["MORE_FAULTS"] == 1
    mm.regMMVM_L2_PROTECTION_FAULT_CNTL.update(CLEAR_PROTECTION_FAULT_STATUS_ADDR=1)
    assert mm.regMMVM_L2_PROTECTION_FAULT_STATUS.read() == 0


def test_disabled_context_and_outside_range():
    b, drv = booted()
    off = page_with(b, b"good")
    va = drv.map(off, PAGE)
    gc = drv.am.regs.GC
    gc.regGCVM_CONTEXT0_CNTL.write(0)                       # context off: its addresses are in no aperture
    with pytest.raises(GPUFault, match="outside every aperture"):
        b.gmc.read("GC", va, 4)
    # past the end of VM0 on the MMHUB: a range fault, sent to the default page as the driver asked
    assert b.gmc.read("MM", drv.vm0_end + 1, 4) == bytes(4)
    assert drv.am.regs.MMHUB.regMMVM_L2_PROTECTION_FAULT_ADDR_LO32.read() == ((drv.vm0_end + 1) >> 12) & 0xFFFFFFFF
    with pytest.raises(VMError, match="not a non-empty range of the context's"):
        drv.map(off, PAGE, va=drv.vm0_end + 1)


def test_l1_tlb_off_faults():
    b, drv = booted()
    off = page_with(b, b"good")
    va = drv.map(off, PAGE)
    drv.am.regs.MMHUB.regMMMC_VM_MX_L1_TLB_CNTL.update(ENABLE_L1_TLB=0)
    drv.am.regs.MMHUB.regMMVM_CONTEXT0_CNTL.update(VALID_PROTECTION_FAULT_ENABLE_DEFAULT=0)
    with pytest.raises(GPUFault, match="L1 TLB or L2 is disabled"):
        b.gmc.read("MM", va, 4)


def test_fb_location_comes_from_the_hardware():
    b = Bench(parts=("gmc",))
    b.raw.MMHUB.regMMMC_VM_FB_LOCATION_BASE.write(0x123)
    b.raw.MMHUB.regMMMC_VM_FB_LOCATION_TOP.write(0x123 + (b.gpu.vram.size >> 24) - 1)
    drv = GMC(b.am)
    drv.init_sw()
    drv.init_hw()
    assert drv.fb_start == 0x123 << 24
    b.raw.MMHUB.regMMMC_VM_FB_LOCATION_TOP.write(0)
    with pytest.raises(DeviceError, match="empty framebuffer"):
        drv.init_hw()


def test_mode1_reset_forgets_the_context():
    b, drv = booted()
    off = page_with(b, b"good")
    va = drv.map(off, PAGE)
    assert b.gmc.read("MM", va, 4) == b"good"
    b.mode1_reset()
    with pytest.raises(GPUFault):
        b.gmc.read("MM", va, 4)
