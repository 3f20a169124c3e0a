"""Register maps bound to backends (amdq.hw.regmap) and the simulated register file (amdq.sim.regfile)."""
from __future__ import annotations

import io

import pytest

from amdq.errors import FieldOverflow, RegisterError, UnknownField, UnknownRegister
from amdq.hw import pm4, regs
from amdq.hw.regmap import (SIM_XCC_STRIDE, AccessPrinter, BufferBackend, IPBlock, Layout, MemoryBackend, Registers,
                            target_blocks)
from amdq.hw.targets import get_target
from amdq.sim.regfile import RegisterFile


def gfx(arch="gfx1100", tracer=None):
    return Registers(Layout.for_target(get_target(arch)), MemoryBackend(), tracer)


def test_fields_encode_decode_and_rmw():
    r = gfx()
    pq = r.GC.regCP_HQD_PQ_CONTROL
    pq.write(QUEUE_SIZE=5, UNORD_DISPATCH=1)
    assert r.backend.values[pq.addr] == 5 | 1 << 28
    assert pq.read_fields()["QUEUE_SIZE"] == 5
    pq.update(QUEUE_SIZE=9, RPTR_BLOCK_SIZE=3)          # keeps UNORD_DISPATCH
    assert pq.read() == 9 | 3 << 8 | 1 << 28
    pq.write(0x80000000)
    assert pq.read_fields()["KMD_QUEUE"] == 1 and pq.read_fields()["QUEUE_SIZE"] == 0
    assert pq.decode(pq.encode(PRIV_STATE=1, QUEUE_SIZE=63)) == {**{k: 0 for k in pq.fields}, "PRIV_STATE": 1, "QUEUE_SIZE": 63}


def test_addresses_match_static_tables_and_kernel_constants():
    r = gfx()
    navi = regs.bases("navi")
    assert r.GC.regCOMPUTE_PGM_LO.addr == regs.load("GC", (11, 0, 0)).regCOMPUTE_PGM_LO.address(navi["GC"]) == 0x2E0C
    assert r.GC.regCOMPUTE_PGM_LO.addr - pm4.SET_SH_REG_START == 0x20C
    # amdgpu_discovery.c reads the IFWI-init mailbox at the absolute dword 0x16061 before it knows any base
    assert r.MP0.regMP0_SMN_C2PMSG_33.addr == 0x16061
    # SH_MEM_CONFIG sits in GC segment 1 (base_index 1): base[1] + offset
    assert r.GC.regSH_MEM_CONFIG.addr == navi["GC"][0][1] + 0x9E4


def test_field_enums_by_name():
    r = gfx("gfx1201")
    sh = r.GC.regSH_MEM_CONFIG
    assert sh.enum("ALIGNMENT_MODE") == {"DWORD": 0, "DWORD_STRICT": 1, "STRICT": 2, "UNALIGNED": 3}
    sh.write(ALIGNMENT_MODE="UNALIGNED", ADDRESS_MODE="64")
    assert sh.read_fields()["ALIGNMENT_MODE"] == 3
    assert sh.read_fields(names=True)["ALIGNMENT_MODE"] == "UNALIGNED"
    with pytest.raises(UnknownField, match="no value named 'SIDEWAYS'.*UNALIGNED"):
        sh.update(ALIGNMENT_MODE="SIDEWAYS")
    with pytest.raises(UnknownField, match="no named values"):
        r.GC.regCP_HQD_PQ_CONTROL.write(QUEUE_SIZE="BIG")


def test_unknown_register_field_and_overflow():
    r = gfx()
    with pytest.raises(UnknownRegister, match="GC 11.0.0 has no register regNO_SUCH"):
        r.GC.regNO_SUCH
    assert not hasattr(r.GC, "regNO_SUCH")                  # also an AttributeError
    with pytest.raises(UnknownField, match="regCP_HQD_PQ_CONTROL has no field QUEUESIZE"):
        r.GC.regCP_HQD_PQ_CONTROL.write(QUEUESIZE=1)
    with pytest.raises(FieldOverflow, match="QUEUE_SIZE=64 does not fit bits 5:0"):
        r.GC.regCP_HQD_PQ_CONTROL.update(QUEUE_SIZE=64)
    with pytest.raises(FieldOverflow):
        r.GC.regCP_HQD_PQ_CONTROL.write(1 << 32)
    with pytest.raises(RegisterError, match="not both"):
        r.GC.regCP_HQD_PQ_CONTROL.write(1, QUEUE_SIZE=1)
    with pytest.raises(UnknownRegister, match="no IP block 'VCN'"):
        r.VCN
    with pytest.raises(UnknownRegister, match="no register table for SDMA0 6.0.0"):
        r.SDMA0.regSDMA_GFX_RB_CNTL
    with pytest.raises(UnknownRegister, match="no register at dword address 0x7"):
        r.name_of(7)


def test_reverse_lookup_every_block():
    r = gfx()
    n = 0
    for block in ("GC", "MMHUB", "OSSSYS", "HDP", "NBIO", "MP1"):
        m, segs = r.block(block), r.layout.blocks[block].bases[0]
        for name in m:
            if r.layout.table(block)[name].base_index >= len(segs):
                continue                     # segment not in the base table (see test below)
            a = m[name].addr
            hits = r.layout.lookup(a)
            assert (block, 0, name) in hits, (block, name)
            assert r.lookup(a).addr == a
            n += 1
    assert n > 1500
    assert r.name_of(r.GC.regCP_HQD_PQ_CONTROL.addr) == "GC.regCP_HQD_PQ_CONTROL"
    assert r.lookup(0x7FFFFFF) is None


def test_register_in_a_segment_without_base_is_a_clear_error():
    # NBIO 4.3.0 puts some BIF registers in segment 5; the usual navi base table has segments 0-4 only
    r = gfx()
    name = next(n for n in r.layout.table("NBIO") if r.layout.table("NBIO")[n].base_index == 5)
    with pytest.raises(RegisterError, match=f"NBIO\\[0\\].{name}: segment 5 has no base \\(5 given\\)"):
        r.NBIO[name]


def test_xcc_instances_gfx942():
    t = get_target("gfx942")
    r = gfx("gfx942")
    assert r.num_xcc == t.xcc == 8
    vega = regs.bases("vega")["GC"][0]
    for k in (0, 3, 7):
        a = r.xcc(k).GC.regCP_HQD_ACTIVE
        assert a.addr == vega[a.reg.base_index] + k * SIM_XCC_STRIDE + a.reg.offset
        assert r.name_of(a.addr) == f"GC[{k}].regCP_HQD_ACTIVE"
        assert r.xcc(k).MMHUB.regMMVM_CONTEXT0_CNTL.addr == r.MMHUB.regMMVM_CONTEXT0_CNTL.addr   # not per XCC
    r.xcc(3).GC.regCP_HQD_ACTIVE.write(ACTIVE=1)
    assert r.xcc(2).GC.regCP_HQD_ACTIVE.read() == 0 and r.block("GC", 3).regCP_HQD_ACTIVE.read() == 1
    with pytest.raises(UnknownRegister, match="8 XCC"):
        r.xcc(8)
    with pytest.raises(UnknownRegister, match="no instance 8"):
        r.block("GC", 8)


def test_instance_bases_from_a_custom_layout():
    # a layout as IP discovery reports it: two instances with their own segment bases
    lay = Layout([IPBlock("GC", (11, 0, 0), ((0x1000, 0x2000), (0x9000, 0xA000)))])
    r = Registers(lay, MemoryBackend())
    off = regs.load("GC", (11, 0, 0)).regCP_HQD_ACTIVE.offset
    assert r.GC.regCP_HQD_ACTIVE.addr == 0x1000 + off and r.block("GC", 1).regCP_HQD_ACTIVE.addr == 0x9000 + off
    assert r.name_of(0x2000 + 0x9E4) == "GC[0].regSH_MEM_CONFIG" and r.name_of(0xA000 + 0x9E4) == "GC[1].regSH_MEM_CONFIG"
    with pytest.raises(RegisterError, match="appears twice"):
        Layout([IPBlock("GC", (11, 0, 0), ((0,),)), IPBlock("GC", (11, 0, 0), ((0,),))])


def test_tracer_sees_every_access_and_prints():
    out = io.StringIO()
    seen = []
    r = gfx(tracer=lambda a: (seen.append(a), AccessPrinter(out)(a)))
    pq = r.GC.regCP_HQD_PQ_CONTROL
    pq.write(QUEUE_SIZE=5, UNORD_DISPATCH=1)
    pq.update(QUEUE_SIZE=9)
    r.write32(0x7, 0x1234)                                  # raw access to an address no table names
    assert [(a.op, a.value) for a in seen] == [("W", 0x10000005), ("R", 0x10000005), ("W", 0x10000009), ("W", 0x1234)]
    lines = out.getvalue().splitlines()
    assert lines[0] == f"am: W GC.regCP_HQD_PQ_CONTROL @{pq.addr:#x} = 0x10000005 QUEUE_SIZE=5 UNORD_DISPATCH=1"
    assert lines[2].endswith("= 0x10000009 QUEUE_SIZE=9 UNORD_DISPATCH=1")
    assert lines[3] == "am: W ? @0x7 = 0x00001234"


def test_am_debug_4_installs_the_printer(monkeypatch, capsys):
    monkeypatch.setenv("AM_DEBUG", "4")
    r = gfx()
    r.MP0.regMP0_SMN_C2PMSG_33.read()
    assert "am: R MP0.regMP0_SMN_C2PMSG_33 @0x16061 = 0x00000000" in capsys.readouterr().err
    f = RegisterFile(r.layout)
    assert f.raw.tracer is None                              # the simulator's own view is never traced
    Registers(r.layout, f).GC.regCP_HQD_ACTIVE.write(1)
    assert capsys.readouterr().err.count("regCP_HQD_ACTIVE") == 1
    monkeypatch.setenv("AM_DEBUG", "3")
    assert gfx().tracer is None
    monkeypatch.setenv("AM_DEBUG", "loud")
    with pytest.raises(RegisterError, match="AM_DEBUG='loud'"):
        gfx()


def test_buffer_backend_is_little_endian_dwords():
    bar = bytearray(0x80000)
    lay = Layout.for_target(get_target("gfx1100"))
    r = Registers(lay, BufferBackend(bar))
    r.GC.regCP_HQD_PQ_CONTROL.write(0x11223344)
    a = r.GC.regCP_HQD_PQ_CONTROL.addr * 4
    assert bar[a:a + 4] == bytes([0x44, 0x33, 0x22, 0x11])
    with pytest.raises(RegisterError, match="outside the 0x80000-byte register BAR"):
        r.write32(0x20000, 1)


class PSP:
    """A stand-in part with side effects (what the simulated PSP will look like)."""

    def __init__(self):
        self.commands = []

    def on_write_regMP0_SMN_C2PMSG_64(self, value, reg):
        self.commands.append(reg.decode(value)["CONTENT"])
        reg.regs.MP0.regMP0_SMN_C2PMSG_64.write(value | 0x80000000)    # raw view: response bit, no recursion

    def on_read_regMP0_SMN_C2PMSG_33(self):
        return 0x80000000                                                # IFWI init done


class Hqd(RegisterFile):
    def on_write_regCP_HQD_ACTIVE(self, value, reg):
        self.last = (reg.inst, reg.decode(value)["ACTIVE"])


def test_register_file_dispatches_handlers_by_name():
    lay = Layout.for_target(get_target("gfx1100"))
    psp = PSP()
    f = RegisterFile(lay, psp)
    drv = Registers(lay, f)                                  # the driver binds to the file as to a BAR
    assert drv.MP0.regMP0_SMN_C2PMSG_33.read() == 0x80000000
    drv.MP0.regMP0_SMN_C2PMSG_64.write(0x00020000)
    assert psp.commands == [0x20000] and drv.MP0.regMP0_SMN_C2PMSG_64.read() == 0x80020000
    drv.GC.regCP_HQD_ACTIVE.write(1)                         # no handler: stored only
    assert f.peek(drv.GC.regCP_HQD_ACTIVE.addr) == 1
    assert f.handlers() == {"read": ["PSP.on_read_regMP0_SMN_C2PMSG_33"], "write": ["PSP.on_write_regMP0_SMN_C2PMSG_64"]}


def test_register_file_handlers_see_the_instance():
    lay = Layout.for_target(get_target("gfx942"))
    f = Hqd(lay)
    Registers(lay, f).xcc(5).GC.regCP_HQD_ACTIVE.write(1)
    assert f.last == (5, 1)


def test_register_file_rejects_handlers_for_unknown_registers():
    class Typo(RegisterFile):
        def on_write_regMP0_SMN_C2PMSG_640(self, value):
            pass

    with pytest.raises(RegisterError, match="on_write_regMP0_SMN_C2PMSG_640: no register regMP0_SMN_C2PMSG_640"):
        Typo(Layout.for_target(get_target("gfx1100")))

    class Other:
        def on_write_regMP0_SMN_C2PMSG_64(self, value):
            pass

    with pytest.raises(RegisterError, match="two handlers for regMP0_SMN_C2PMSG_64"):
        RegisterFile(Layout.for_target(get_target("gfx1100")), PSP(), Other())


def test_target_blocks_cover_every_target():
    from amdq.hw.targets import TARGETS
    for t in TARGETS.values():
        blocks = {b.name: b for b in target_blocks(t)}
        assert blocks["GC"].version == t.ip["GC"] and blocks["GC"].instances == t.xcc
        assert {"GC", "MMHUB", "MP0", "MP1", "NBIO", "OSSSYS", "HDP"} <= set(Layout(blocks.values()).tables), t.arch
