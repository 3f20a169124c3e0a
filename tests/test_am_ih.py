"""The AM driver's IH block against the simulated IH: the ring in the boot region, entries posted and decoded
in order with the write-pointer write-back, the read pointer, overflow as the hardware flags it, and the
GMC's fault interrupts arriving through it."""
from __future__ import annotations

import pytest

from amdq.am.gmc import GMC
from amdq.am.ih import IH
from amdq.errors import DeviceError, GPUFault
from amdq.hw import am as A
from amdq.hw import ih as H

from am_bench import Bench

ARCHS = ("gfx1100", "gfx1201", "gfx942")


def booted(arch="gfx1100", ring_bytes=64 << 10, gmc=True):
    b = Bench(arch, parts=("gmc", "ih"))
    g = GMC(b.am)
    g.init_sw()
    if gmc:
        g.init_hw()
    ih = IH(b.am, ring_bytes)
    ih.init_sw()
    ih.init_hw()
    return b, g, ih


@pytest.mark.parametrize("arch", ARCHS)
def test_entries_posted_and_decoded_in_order(arch):
    b, _, ih = booted(arch)
    o = b.raw.OSSSYS
    assert (o.regIH_RB_BASE_HI.read() << 32 | o.regIH_RB_BASE.read()) << 8 == ih.ring.mc
    assert o.regIH_RB_CNTL.read_fields()["RB_SIZE"] == 14          # 64 KiB = 2**14 dwords
    assert ih.read() == []
    for i in range(5):
        b.interrupt(A.SOC15_IH_CLIENTID_GRBM_CP, A.SOC15_INTSRC_CP_END_OF_PIPE, (i, 0x1000 + i))
    got = ih.read()
    assert [(e.client_id, e.src_id, e.src_data[:2]) for e in got] == \
        [(A.SOC15_IH_CLIENTID_GRBM_CP, A.SOC15_INTSRC_CP_END_OF_PIPE, (i, 0x1000 + i)) for i in range(5)]
    assert [e.timestamp for e in got] == sorted(e.timestamp for e in got) and got[0].timestamp > 0
    # the write-back dword is the IH_RB_WPTR value; the driver's read pointer is in IH_RB_RPTR
    wb = int.from_bytes(b.gpu.vram.read(ih.wb.offset, 4), "little")
    assert wb == o.regIH_RB_WPTR.read() == 5 * H.ENTRY_BYTES
    assert o.regIH_RB_RPTR.read() == 5 * H.ENTRY_BYTES
    # the entries are in the ring, in VRAM of the boot region
    raw = b.gpu.vram.read(ih.ring.offset + 32, 32)
    assert H.IVEntry.decode(raw).src_data[0] == 1
    assert ih.read() == []


def test_ring_wraps():
    b, _, ih = booted(ring_bytes=8 * H.ENTRY_BYTES)
    seq = []
    for i in range(20):
        b.interrupt(7, 9, (i,))
        if i % 3 == 2:
            seq += [e.src_data[0] for e in ih.read()]
    seq += [e.src_data[0] for e in ih.read()]
    assert seq == list(range(20)) and ih.overflows == 0


def test_overflow_flag_and_restart_after_the_write_pointer():
    b, _, ih = booted(ring_bytes=8 * H.ENTRY_BYTES)
    for i in range(10):                        # 8 slots, nothing read: the last ones overwrite the oldest
        b.interrupt(7, 9, (i,))
    wptr = b.raw.OSSSYS.regIH_RB_WPTR.read_fields()
    assert wptr["RB_OVERFLOW"] == 1
    got = [e.src_data[0] for e in ih.read()]
    assert got == [3, 4, 5, 6, 7, 8, 9]        # from the entry after the write pointer, oldest first
    assert ih.overflows == 1 and any("overflow" in m for _, m in b.am.logs)
    assert b.raw.OSSSYS.regIH_RB_WPTR.read_fields()["RB_OVERFLOW"] == 0       # cleared by WPTR_OVERFLOW_CLEAR
    b.interrupt(7, 9, (42,))
    assert [e.src_data[0] for e in ih.read()] == [42]


def test_full_ring_drops_without_overflow_enable():
    b, _, ih = booted(ring_bytes=4 * H.ENTRY_BYTES)
    b.am.regs.OSSSYS.regIH_RB_CNTL.update(WPTR_OVERFLOW_ENABLE=0)   # the driver's write: the IH latches it
    for i in range(6):
        b.interrupt(7, 9, (i,))
    assert b.ih.dropped == 3 and b.raw.OSSSYS.regIH_RB_STATUS.read_fields()["RB_FULL"] == 1
    assert [e.src_data[0] for e in ih.read()] == [0, 1, 2]


def test_disabled_ring_writes_nothing():
    b, _, ih = booted()
    ih.fini_hw()
    b.interrupt(7, 9, (1,))
    assert b.ih.dropped == 1 and ih.read() == []


def test_the_ih_sees_its_ring_reprogrammed_at_the_next_vector():
    """The block latches base, size, control and write-back address; a write of any of them is seen next."""
    b, _, ih = booted()
    o = b.am.regs.OSSSYS                       # the driver's writes (through the register file's handlers)
    b.interrupt(7, 9, (1,))
    assert [e.src_data[0] for e in ih.read()] == [1]
    ih.ring = b.am.boot.reserve("ih_ring_moved", ih.ring_bytes, align=1 << 12)   # base and write-back moved
    ih.wb = b.am.boot.reserve("ih_wptr_moved", 4096)                              # under a running ring
    o.regIH_RB_BASE.write((ih.ring.mc >> H.RB_BASE_SHIFT) & 0xFFFFFFFF)
    o.regIH_RB_BASE_HI.write((ih.ring.mc >> H.RB_BASE_HI_SHIFT) & 0xFF)
    o.regIH_RB_WPTR_ADDR_LO.write(ih.wb.mc & 0xFFFFFFFC)
    o.regIH_RB_WPTR_ADDR_HI.write((ih.wb.mc >> 32) & 0xFFFF)
    b.interrupt(7, 9, (2,))
    assert H.IVEntry.decode(b.gpu.vram.read(ih.ring.offset + H.ENTRY_BYTES, 32)).src_data[0] == 2
    assert int.from_bytes(b.gpu.vram.read(ih.wb.offset, 4), "little") == 2 * H.ENTRY_BYTES
    assert [e.src_data[0] for e in ih.read()] == [2]
    o.regIH_RB_CNTL.update(RB_ENABLE=0)
    b.interrupt(7, 9, (3,))
    assert b.ih.dropped == 1 and ih.read() == []


def test_ring_writes_go_through_the_mmhub():
    b, _, ih = booted(gmc=False)               # no system aperture: the IH's write faults
    with pytest.raises(GPUFault, match="write at .* on MMHUB"):
        b.interrupt(7, 9, (1,))


def test_gmc_fault_arrives_as_an_interrupt():
    b, g, ih = booted("gfx1201")
    va = g.vm0_start + 0x5000                  # nothing mapped there
    assert b.gmc.read("MM", va, 4) == bytes(4)
    (e,) = ih.read()
    assert e.client_id == A.SOC21_IH_CLIENTID_VMC and e.src_id == 0
    assert (e.src_data[0] << 12 | (e.src_data[1] & 0xF) << 44) == va


def test_bad_ring_size():
    b = Bench(parts=("ih",))
    with pytest.raises(DeviceError, match="power of two"):
        IH(b.am, 3000)


def test_iv_entry_round_trip():
    e = H.IVEntry(27, 0, (1, 2, 3, 4), ring_id=5, vmid=3, vmid_src=1, timestamp=(1 << 47) | 12345,
                  timestamp_src=1, pasid=0x8001, node_id=2)
    raw = e.encode()
    assert len(raw) == 32 and H.IVEntry.decode(raw) == e
    assert raw[0] == 27 and raw[3] == 0x83     # dw0: client 27, vmid 3 at bits 27:24, vmid_src bit 31


@pytest.mark.parametrize("arch", ARCHS)
def test_drain_decodes_only_the_kinds_asked_for_and_acknowledges_the_rest(arch):
    from amdq.am import irq
    from amdq.hw import ih_ids as I
    b, g, ih = booted(arch)
    fam = I.family(b.am.target.gfx_version)
    b.interrupt(*fam.eop, (1,))
    b.gmc.read("MM", g.vm0_start + 0x7000, 4)                  # an unmapped read: the MM hub's fault vector
    b.interrupt(*fam.sdma_trap(0), (2,))
    b.interrupt(*fam.bad_opcode, (3,))
    wptr = b.raw.OSSSYS.regIH_RB_WPTR.read()
    got = ih.drain(kinds=("vm_fault", "bad_opcode"))
    assert [i.kind for i in got] == ["vm_fault", "bad_opcode"]
    assert got[0].where["va"] == g.vm0_start + 0x7000 and got[0].where["hub"] == "MMHUB"
    assert b.raw.OSSSYS.regIH_RB_RPTR.read() == wptr == 4 * H.ENTRY_BYTES   # the skipped ones acknowledged too
    assert ih.drain() == [] and ih.read() == []
    b.interrupt(*fam.eop, (4,))
    b.interrupt(*fam.sq, (5,))
    assert [(i.kind, i.context_id) for i in ih.drain()] == [("eop", 4), ("sq", 5)]   # no kinds: every entry
    assert irq.kind_of(fam, 0xEE, 0xEE) == "other"


def test_drain_reads_across_the_end_of_the_ring():
    b, _, ih = booted(ring_bytes=8 * H.ENTRY_BYTES)
    for i in range(6):
        b.interrupt(7, 9, (i,))
    ih.read()
    for i in range(5):                         # entries 6, 7 at the end of the ring, then 0, 1, 2 from its start
        b.interrupt(7, 9, (10 + i,))
    assert [i.src_data[0] for i in ih.drain()] == [10, 11, 12, 13, 14]
