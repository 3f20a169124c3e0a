"""Generated hardware tables (pm4, sdma, regs, kfd, vm, aql, am).

Two kinds of checks: numbers written here from the public headers (kfd_ioctl.h, nvd.h, amdgpu_vm.h,
hsa.h, discovery.h, psp_gfx_if.h, v11_structs.h) that hold without the facts, and a cross-check of
every generated table against the facts JSON when ../shared/facts is present. Encoders and decoders
are exercised with random packets (hypothesis).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amdq.errors import UnsupportedTarget
from amdq.hw import am, aql, kfd, pm4, regs, sdma, vm
from amdq.hw.layout import Array, BitField, Bits, Struct, Words
from amdq.hw.targets import TARGETS

FACTS = Path(__file__).resolve().parents[2] / "shared" / "facts"


def facts(name: str) -> dict:
    p = FACTS / name
    if not p.exists():
        pytest.skip("shared facts not present")
    return json.loads(p.read_text())


# ---------------------------------------------------------------------------------------------
# Facts from the public headers (no JSON needed)

def test_pm4_opcodes_and_ranges():
    for t in (pm4.GFX9, pm4.GFX10):
        o = t.opcodes
        assert (o["NOP"], o["SET_BASE"], o["DISPATCH_DIRECT"], o["WRITE_DATA"], o["WAIT_REG_MEM"]) == (0x10, 0x11, 0x15, 0x37, 0x3C)
        assert (o["INDIRECT_BUFFER"], o["COPY_DATA"], o["EVENT_WRITE"], o["RELEASE_MEM"], o["ACQUIRE_MEM"]) == (0x3F, 0x40, 0x46, 0x49, 0x58)
        assert (o["SET_SH_REG"], o["SET_UCONFIG_REG"], o["SET_RESOURCES"], o["MAP_QUEUES"], o["UNMAP_QUEUES"]) == (0x76, 0x79, 0xA0, 0xA2, 0xA3)
        assert t.names[0x3F] == "INDIRECT_BUFFER"       # not its alias COND_INDIRECT_BUFFER
    assert pm4.GFX10.opcodes["SET_SH_REG_INDEX"] == 0x9B and pm4.GFX10.opcodes["INVALIDATE_TLBS"] == 0x98
    assert (pm4.SET_SH_REG_START, pm4.SET_SH_REG_END, pm4.SET_UCONFIG_REG_START) == (0x2C00, 0x3000, 0xC000)
    assert pm4.SET_CONTEXT_REG_START == 0xA000


def test_pm4_header_and_known_packets():
    assert pm4.header(0x76, 4) == 0xC0027600                  # PACKET3(SET_SH_REG, 2)
    assert pm4.header(0x15, 5, shader_type=1) == 0xC0031502   # PACKET3_COMPUTE(DISPATCH_DIRECT, 3)
    p = pm4.encode("SET_SH_REG", REG=0x2E0C, VALUES=[0x1234, 0x5])   # COMPUTE_PGM_LO/HI
    assert p == [0xC0027600, 0x20C, 0x1234, 0x5]
    assert pm4.encode("NOP") == [0xFFFF1000] and pm4.decode([0xFFFF1000]).size == 1
    rm = pm4.encode("RELEASE_MEM", EVENT_TYPE=pm4.CACHE_FLUSH_AND_INV_TS_EVENT, EVENT_INDEX=5, GCR_GL2_WB=1, GCR_SEQ=1,
                    DATA_SEL=1, INT_SEL=0, ADDR=0x1_2345_6780, DATA=9)
    assert rm == [0xC0064900, 0x14 | 5 << 8 | 1 << 21 | 1 << 22, 1 << 29, 0x23456780, 1, 9, 0, 0]
    wrm = pm4.encode("WAIT_REG_MEM", FUNCTION=3, MEM_SPACE=1, ADDR=0x1000, REFERENCE=7, MASK=0xFFFFFFFF, POLL_INTERVAL=4)
    assert wrm == [0xC0053C00, 0x13, 0x1000, 0, 7, 0xFFFFFFFF, 4]
    ib = pm4.encode("INDIRECT_BUFFER", IB_BASE=0x8000_1000, IB_SIZE=16, VALID=1, VMID=3)
    assert ib == [0xC0023F00, 0x80001000, 0, 16 | 1 << 23 | 3 << 24]
    am10 = pm4.encode("ACQUIRE_MEM", COHER_SIZE=0xFFFFFFFF, COHER_SIZE_HI=0xFFFFFF, POLL_INTERVAL=10, GL2_INV=1, GLV_INV=1, GLK_INV=1, GLI_INV=1)
    assert len(am10) == 8 and am10[7] == 1 | 1 << 7 | 1 << 8 | 1 << 14
    assert len(pm4.encode("ACQUIRE_MEM", gen=9, TC_ACTION_ENA=1)) == 7
    assert pm4.encode("EVENT_WRITE", EVENT_TYPE=pm4.CS_PARTIAL_FLUSH, EVENT_INDEX=4) == [0xC0004600, 0x407]
    d = pm4.decode([0xC0023F00, 0x80001000, 0, 16 | 1 << 23], 0)
    assert d.name == "INDIRECT_BUFFER" and d.fields["IB_BASE"] == 0x80001000 and d.fields["IB_SIZE"] == 16


def test_pm4_events():
    for g in (9, 11, 12):
        e = pm4.EVENT_TYPES[g]
        assert (e["CS_PARTIAL_FLUSH"], e["CACHE_FLUSH_AND_INV_TS_EVENT"], e["BOTTOM_OF_PIPE_TS"], e["CACHE_FLUSH_TS"]) == (7, 0x14, 0x28, 4)
        assert "MTYPE_UC" not in e


def test_pm4_bad_streams():
    for bad, idx in (([], 0), ([0x00000000], 0), ([0x40000000], 0), ([0xC0FF0000], 0), ([0xC0054900, 0, 0], 0),
                     ([0xFFFF1000, 0xC0004900, 0], 1), ([0xC0EEEE00], 0)):
        with pytest.raises(pm4.BadPacket) as e:
            list(pm4.GFX10.walk(bad)) if bad else pm4.decode(bad, 0)
        assert e.value.index == idx
    with pytest.raises(pm4.BadPacket):      # RELEASE_MEM must be 8 dwords
        pm4.decode([0xC0004900, 0])
    with pytest.raises(ValueError):
        pm4.encode("SET_SH_REG", REG=0xC000, VALUES=[1])
    with pytest.raises(KeyError):
        pm4.encode("RELEASE_MEM", NOT_A_FIELD=1)


def test_kfd_create_queue_args():
    s = kfd.STRUCTS["kfd_ioctl_create_queue_args"]
    want = {"ring_base_address": 0, "write_pointer_address": 8, "read_pointer_address": 16, "doorbell_offset": 24,
            "ring_size": 32, "gpu_id": 36, "queue_type": 40, "queue_percentage": 44, "queue_priority": 48, "queue_id": 52,
            "eop_buffer_address": 56, "eop_buffer_size": 64, "ctx_save_restore_address": 72, "ctx_save_restore_size": 80,
            "ctl_stack_size": 84}
    assert {k: s.offsetof(k) for k in want} == want
    # KFD 1.17 appended sdma_engine_id + pad (88 bytes before); the kernel accepts either size.
    assert s.size == 96 and s.offsetof("sdma_engine_id") == 88
    assert kfd.IOCTLS["AMDKFD_IOC_CREATE_QUEUE"] == (0xC0604B02, s) == (kfd.AMDKFD_IOC_CREATE_QUEUE, s)
    assert kfd.AMDKFD_IOC_GET_VERSION == 0x80084B01 and kfd.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU == 0xC0284B16
    assert kfd.AMDKFD_IOC_MAP_MEMORY_TO_GPU == 0xC0184B18 and kfd.AMDKFD_IOC_WAIT_EVENTS == 0xC0184B0C
    assert (kfd.KFD_IOC_ALLOC_MEM_FLAGS_VRAM, kfd.KFD_IOC_ALLOC_MEM_FLAGS_GTT, kfd.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR,
            kfd.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) == (1, 2, 4, 8)
    assert kfd.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE == 1 << 31 and kfd.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE == 1 << 30
    assert (kfd.KFD_IOC_QUEUE_TYPE_COMPUTE, kfd.KFD_IOC_QUEUE_TYPE_SDMA, kfd.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL) == (0, 1, 2)
    assert (kfd.KFD_IOC_EVENT_SIGNAL, kfd.KFD_IOC_EVENT_MEMORY) == (0, 8)
    raw = s.pack(ring_base_address=0x1000, ring_size=4096, queue_type=2, gpu_id=7)
    assert s.unpack(raw)["ring_size"] == 4096 and len(raw) == 96


def test_aql_layouts():
    k = aql.KERNEL_DISPATCH
    assert k.size == 64 and {n: k.offsetof(n) for n in ("header", "setup", "workgroup_size_x", "grid_size_x", "private_segment_size",
                                                        "group_segment_size", "kernel_object", "kernarg_address", "completion_signal")} == \
        {"header": 0, "setup": 2, "workgroup_size_x": 4, "grid_size_x": 12, "private_segment_size": 24, "group_segment_size": 28,
         "kernel_object": 32, "kernarg_address": 40, "completion_signal": 56}
    assert aql.BARRIER_AND.offsetof("dep_signal") == 8 and aql.BARRIER_VALUE.offsetof("mask") == 24
    q, s = aql.AMD_QUEUE, aql.AMD_SIGNAL
    assert q.size == 256 and q.offsetof("compute_tmpring_size") == 140 and q.offsetof("scratch_resource_descriptor") == 144
    assert q.fields["hsa_queue"][1].offsetof("base_address") == 8 and q.fields["hsa_queue"][1].offsetof("id") == 32
    assert s.size == 64 and (s.offsetof("value"), s.offsetof("event_mailbox_ptr"), s.offsetof("event_id"), s.offsetof("start_ts")) == (8, 16, 24, 32)
    assert aql.header(aql.HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, aql.HSA_FENCE_SCOPE_SYSTEM, aql.HSA_FENCE_SCOPE_SYSTEM) == 2 | 1 << 8 | 2 << 9 | 2 << 11
    assert (aql.HSA_PACKET_TYPE_VENDOR_SPECIFIC, aql.HSA_PACKET_TYPE_INVALID, aql.HSA_PACKET_TYPE_BARRIER_AND) == (0, 1, 3)
    t11 = aql.bits_for(aql.COMPUTE_TMPRING_SIZE, 11)
    assert (t11["WAVES"].lo, t11["WAVES"].hi, t11["WAVESIZE"].lo, t11["WAVESIZE"].hi) == (0, 11, 12, 26)
    assert aql.bits_for(aql.COMPUTE_TMPRING_SIZE, 12)["WAVESIZE"].hi == 29 and aql.bits_for(aql.COMPUTE_TMPRING_SIZE, 9)["WAVESIZE"].hi == 24
    w3 = aql.bits_for(aql.SQ_BUF_RSRC_WORD3, 11)
    assert (w3["DST_SEL_X"].lo, w3["FORMAT"].lo, w3["FORMAT"].hi, w3["OOB_SELECT"].lo, w3["TYPE"].lo) == (0, 12, 17, 28, 30)
    buf = bytearray(64)
    k.pack_into(buf, 0, header=aql.header(2), setup=3, grid_size_x=256, completion_signal={"handle": 0xABC})
    assert aql.packet_struct(buf) is k and k.unpack(buf)["completion_signal"] == {"handle": 0xABC}
    aql.VENDOR_HEADER.pack_into(buf, 0, header=aql.header(0), AmdFormat=aql.HSA_AMD_PACKET_TYPE_BARRIER_VALUE)
    assert aql.packet_struct(buf) is aql.BARRIER_VALUE


def test_vm_bits():
    g11, g12 = vm.PTE[10], vm.PTE[12]
    for name, bit in (("VALID", 0), ("SYSTEM", 1), ("SNOOPED", 2), ("TMZ", 3), ("EXECUTABLE", 4), ("READABLE", 5), ("WRITEABLE", 6)):
        assert g11[name].lo == g11[name].hi == bit == g12[name].lo
    assert (g11["FRAG"].lo, g11["FRAG"].hi, g11["PRT"].lo, g11["PDE_PTE"].lo, g11["MTYPE"].lo, g11["MTYPE"].hi) == (7, 11, 51, 54, 48, 50)
    assert (g12["MTYPE"].lo, g12["MTYPE"].hi, g12["PRT"].lo, g12["PDE_PTE"].lo, g12["BFS"].lo, g12["BFS"].hi) == (54, 55, 56, 63, 58, 62)
    assert vm.generation(11) == 10 and vm.generation(9) == 9 and vm.generation(12) == 12
    assert vm.pte(11, 0x1234000) == 0x1234000 | 0b1100001
    assert vm.indices(0x0000_7F80_4020_3000) == (0xFF, 1, 1, 3)
    assert (vm.AMDGPU_VM_PDB2, vm.AMDGPU_VM_PTB) == (0, 3)
    with pytest.raises(ValueError):
        vm.pte(11, 0x1001)


@given(gen=st.sampled_from([9, 10, 11, 12]), page=st.integers(0, (1 << 36) - 1), flags=st.integers(0, 127),
       mtype=st.integers(0, 3), frag=st.integers(0, 31))
def test_pte_roundtrip(gen, page, flags, mtype, frag):
    names = ("valid", "system", "snooped", "tmz", "executable", "readable", "writeable")
    kw = {n: bool(flags >> i & 1) for i, n in enumerate(names)}
    e = vm.pte(gen, page << 12, mtype=mtype, frag=frag, **kw)
    d = vm.decode(gen, e)
    assert d["address"] == page << 12 and d["MTYPE"] == mtype and d["FRAG"] == frag
    assert all(d[n.upper()] == kw[n] for n in names)


def test_am_layouts():
    rb = am.psp_gfx_rb_frame
    assert rb.size == 64 and (rb.offsetof("fence_addr_lo"), rb.offsetof("fence_value"), rb.offsetof("vmid"), rb.offsetof("frame_type")) == (12, 20, 32, 33)
    assert am.psp_gfx_cmd_resp.size == 1024 and am.psp_gfx_cmd_resp.offsetof("resp") == 864 and am.psp_gfx_cmd_resp.offsetof("cmd") == 28
    assert am.common_firmware_header.size == 32 and am.common_firmware_header.offsetof("ucode_array_offset_bytes") == 24
    assert am.binary_header.size == 60 and am.ip_discovery_header.size == 80 and am.ip_v4.size == 8
    mqd = am.v11_compute_mqd
    assert mqd.size == 2048 and {n: mqd.offsetof(n) for n in ("cp_mqd_base_addr_lo", "cp_hqd_active", "cp_hqd_pq_base_lo",
                                                                "cp_hqd_pq_control", "cp_hqd_eop_base_addr_lo", "cp_hqd_pq_wptr_hi")} == \
        {"cp_mqd_base_addr_lo": 0x200, "cp_hqd_active": 0x208, "cp_hqd_pq_base_lo": 0x220, "cp_hqd_pq_control": 0x244,
         "cp_hqd_eop_base_addr_lo": 0x294, "cp_hqd_pq_wptr_hi": 0x2DC}
    assert (am.BINARY_SIGNATURE, am.DISCOVERY_TABLE_SIGNATURE, am.HARVEST_TABLE_SIGNATURE) == (0x28211407, 0x53445049, 0x56524148)
    assert (am.GC_HWID, am.MMHUB_HWID, am.MP0_HWID, am.MP1_HWID, am.SDMA0_HWID, am.NBIF_HWID, am.OSSSYS_HWID, am.HDP_HWID) == \
        (11, 34, 255, 1, 42, 108, 40, 41)
    assert (am.GFX_CMD_ID_LOAD_IP_FW, am.GFX_CMD_ID_SETUP_TMR, am.GFX_CMD_ID_LOAD_TOC, am.GFX_CMD_ID_AUTOLOAD_RLC) == (6, 5, 0x20, 0x21)
    assert (am.PSP_BL__LOAD_SYSDRV, am.PSP_BL__LOAD_SOSDRV, am.GFX_CTRL_CMD_ID_DESTROY_RINGS) == (0x10000, 0x20000, 0x30000)
    raw = bytearray(am.ip_v4.pack(hw_id=11, major=11, sub_revision=3, variant=5))
    assert raw[7] == 0x53 and am.ip_v4.unpack(raw)["variant"] == 5


def test_sdma_tables():
    for t in (sdma.SDMA4, sdma.SDMA5, sdma.SDMA6):
        ops = {n: t.ops[n][0] for n in t.ops}
        assert (ops["COPY_LINEAR"], ops["WRITE_UNTILED"], ops["INDIRECT"], ops["FENCE"], ops["TRAP"], ops["POLL_REGMEM"],
                ops["CONSTANT_FILL"], ops["TIMESTAMP_GET_GLOBAL"]) == (1, 2, 4, 5, 6, 8, 11, 13)
        pr = t.layouts["POLL_REGMEM"].where
        assert (pr["hdp_flush"][1].lo, pr["func"][1].lo, pr["func"][1].hi, pr["mem_poll"][1].lo) == (26, 28, 30, 31)
        assert t.layouts["TRAP"].where["int_context"][1].hi == 27 and len(t.layouts["COPY_LINEAR"].words) == 7
    assert sdma.SDMA4.layouts["COPY_LINEAR"].where["count"][1].hi == 21 and sdma.SDMA6.layouts["COPY_LINEAR"].where["count"][1].hi == 29
    assert sdma.SDMA6.ops["GCR_REQ"] == (17, 1) and "GCR_REQ" not in sdma.SDMA4.ops
    assert sdma.encode("FENCE", addr=0x1000, data=5) == [5, 0x1000, 0, 5]
    assert sdma.encode("COPY_LINEAR", count=0xFF, src_addr=0x2000, dst_addr=0x1_0000_3000) == [1, 0xFF, 0, 0x2000, 0, 0x3000, 1]
    assert sdma.decode(sdma.encode("NOP", data=[0, 0])).size == 3
    with pytest.raises(sdma.BadPacket):
        sdma.decode([0xFF])
    with pytest.raises(sdma.BadPacket):
        sdma.decode([2, 0, 0, 5])          # WRITE of 6 data dwords cut short
    with pytest.raises(ValueError):
        sdma.encode("TIMESTAMP_GET_GLOBAL", write_addr=0x1004)   # bits 2:0 are not carried


def test_regs():
    gc = regs.load("GC", (11, 0, 0))
    r = gc.regCP_HQD_PQ_CONTROL
    f = r.fields
    assert (f["QUEUE_SIZE"].lo, f["QUEUE_SIZE"].hi, f["RPTR_BLOCK_SIZE"].lo, f["UNORD_DISPATCH"].lo, f["KMD_QUEUE"].lo) == (0, 5, 8, 28, 31)
    assert r.decode(r.encode(QUEUE_SIZE=9, PRIV_STATE=1))["QUEUE_SIZE"] == 9
    navi, vega = regs.bases("navi"), regs.bases("vega")
    assert gc.regCOMPUTE_PGM_LO.address(navi["GC"]) == 0x2E0C == gc["COMPUTE_PGM_LO"].address(navi["GC"][0])
    assert regs.load("GC", (9, 4, 3)).regCOMPUTE_PGM_LO.address(vega["GC"]) == 0x2E0C
    assert regs.address(gc.regCOMPUTE_PGM_LO, navi["GC"]) - pm4.SET_SH_REG_START == 0x20C
    assert regs.load("GC", (11, 0, 2)).facts_version == (11, 0, 0) and "regCP_HQD_ACTIVE" in gc
    assert regs.load("MP1", (13, 0, 0)).regMP1_SMN_C2PMSG_66.offset == 0x282
    with pytest.raises(UnsupportedTarget):
        regs.load("GC", (10, 3, 0))
    with pytest.raises(AttributeError):
        gc.regNO_SUCH_REGISTER


def test_every_target_has_register_maps():
    for t in TARGETS.values():
        for ip in ("GC", "MMHUB", "MP1", "OSSSYS", "HDP", "NBIO"):
            assert len(regs.load(ip, t.ip["MP1" if ip == "MP1" else ip])) > 0, (t.arch, ip)


def test_layout_extensions():
    inner = Struct("in", 8, [("a", 0, "u32"), ("b", 4, BitField("u32", 4, 8)), ("c", 4, BitField("u32", 12, 4))])
    s = Struct("out", 28, [("x", 0, "u16"), ("f", 2, "i16"), ("n", 4, inner), ("arr", 12, Array("u32", 2)),
                           ("sa", 20, Array(inner, 1)), ("flex", 28, Array("u32", 0))])
    raw = s.pack(x=1, f=-2, n={"a": 5, "b": 0xAB, "c": 3}, arr=[7, 8], sa=[{"b": 1}])
    u = s.unpack(raw)
    assert u["f"] == -2 and u["n"] == {"a": 5, "b": 0xAB, "c": 3} and u["arr"] == [7, 8] and u["sa"][0]["b"] == 1 and u["flex"] == []
    with pytest.raises(ValueError):
        s.pack(n={"b": 256})
    w = Words("P", [Bits("P.0", {"A": (0, 3)}), Bits("P.1", {"X_LO": (0, 31)}), Bits("P.2", {"X_HI": (0, 15)})],
              wide={"X": (("X_LO", 0), ("X_HI", 32))}, tail="T")
    assert w.decode(w.encode(A=3, X=0x1234_5678_9ABC, T=[1])) == {"A": 3, "X": 0x1234_5678_9ABC, "T": [1]}
    with pytest.raises(ValueError):
        w.encode(X=1 << 48)


# ---------------------------------------------------------------------------------------------
# Random round trips: every PM4 and SDMA layout, and garbage that must fail cleanly

def _random_words(lay: Words, rnd: random.Random, n: int) -> list[int]:
    out = []
    for k in range(n):
        mask = 0
        for f in lay.words[k].fields.values():
            mask |= f.mask
        out.append(rnd.getrandbits(32) & mask)
    return out


PM4_CASES = [(t, name) for t in (pm4.GFX9, pm4.GFX10) for name in t.layouts]


@pytest.mark.parametrize("table,name", PM4_CASES, ids=[f"gfx{t.gen}-{n}" for t, n in PM4_CASES])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_pm4_roundtrip(table, name, seed):
    rnd = random.Random(seed)
    lay = table.layouts[name]
    nfixed = rnd.choice([lay.min_words, len(lay.words)])
    body = _random_words(lay, rnd, nfixed)
    ntail = rnd.randrange(0 if name != "NOP" else 1, 6) if lay.tail else 0
    body += [rnd.getrandbits(32) for _ in range(ntail)]
    if name in pm4.REG_RANGES:
        start, end = pm4.REG_RANGES[name]
        body[0] = (body[0] & ~0xFFFF) | rnd.randrange(0, end - start - max(ntail, 1) + 1)
    pkt = [pm4.header(table.opcodes[name], len(body) + 1, shader_type=rnd.getrandbits(1))] + body
    d = table.decode(pkt, 0)
    assert d.name == name and d.size == len(pkt)
    again = table.encode(name, shader_type=d.shader_type, **d.fields)
    assert again == pkt
    assert table.decode(again).fields == d.fields


@pytest.mark.parametrize("table,name", PM4_CASES, ids=[f"gfx{t.gen}-{n}" for t, n in PM4_CASES])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_pm4_compiled_decode_is_the_layouts(table, name, seed):
    """A packet of exactly its fixed words decodes through the layout's compiled decoder (what the CP runs for
    every packet it has not seen): the same fields as the layout's field-by-field decode."""
    rnd = random.Random(seed)
    lay = table.layouts[name]
    if lay.tail or lay.optional or name in pm4.REG_RANGES:
        return
    body = _random_words(lay, rnd, len(lay.words))
    got = table.decode([pm4.header(table.opcodes[name], len(body) + 1)] + body, 0).fields
    assert got == lay.decode(body) and list(got) == list(lay.decode(body))


@pytest.mark.parametrize("table,name", PM4_CASES, ids=[f"gfx{t.gen}-{n}" for t, n in PM4_CASES])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_pm4_value_words_decode_apart(table, name, seed):
    """A packet seen before with other value words (an address, a fence value) is its first decode's control fields
    updated with its own value words' fields (what the CP does for a launch's timestamps): the full decode's
    fields, for two packets that share their control words and differ in every value word."""
    rnd = random.Random(seed)
    lay = table.layouts[name]
    split = lay.value_decoder()
    if split is None:
        return
    ctrl, values = split
    first = _random_words(lay, rnd, len(lay.words))
    other = _random_words(lay, rnd, len(lay.words))
    for k in ctrl:
        other[k] = first[k]
    got = values([0xDEAD] + other, 1)
    assert got == values(other, 0)
    assert {**lay.decode(first), **got} == lay.decode(other)
    for f in got:                                   # only value words' fields (and wide values with a part there)
        parts = [p for p, _ in lay.wide[f]] if f in lay.wide else [f]
        assert any(lay.where[p][0] not in ctrl for p in parts)
    h = pm4.header(table.opcodes[name], len(first) + 1)
    key, vals = table.head(h)
    assert key([h] + first, 0) == key([h] + other, 0) == (h, *(first[k] for k in ctrl))
    assert vals([h] + other, 1) == values(other, 0)


SDMA_CASES = [(t, name) for t in (sdma.SDMA4, sdma.SDMA5, sdma.SDMA6) for name in t.layouts]


@pytest.mark.parametrize("table,name", SDMA_CASES, ids=[f"v{t.version}-{n}" for t, n in SDMA_CASES])
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_sdma_roundtrip(table, name, seed):
    rnd = random.Random(seed)
    lay = table.layouts[name]
    words = _random_words(lay, rnd, len(lay.words))
    op, sub = table.ops[name]
    hdr = lay.words[0]
    words[0] = hdr["op"].put(words[0], op)
    if "sub_op" in hdr:
        words[0] = hdr["sub_op"].put(words[0], sub or 0)
    if lay.tail:
        n = rnd.randrange(1, 6)
        field, bias = lay.tail_count
        k, f = lay.where[field]
        words[k] = f.put(words[k], n - bias)
        words += [rnd.getrandbits(32) for _ in range(n)]
    d = table.decode(words)
    assert d.name == name and d.size == len(words)
    assert table.encode(name, **d.fields) == words


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=12), st.sampled_from([9, 11]))
def test_decoders_never_crash_on_garbage(words, gen):
    for walk, bad in ((pm4.table(gen).walk, pm4.BadPacket), (sdma.table(6 if gen > 9 else 4).walk, sdma.BadPacket)):
        try:
            for _i, _p in walk(words):
                pass
        except bad as e:
            assert 0 <= e.index <= len(words)


# ---------------------------------------------------------------------------------------------
# Cross-checks against the facts JSON

def test_pm4_against_facts():
    for t, fn in ((pm4.GFX10, "pm4_nv.json"), (pm4.GFX9, "pm4_soc15.json")):
        d = facts(fn)
        c, m = d["constants"], d["field_macros"]
        for name, op in t.opcodes.items():
            assert c["PACKET3_" + name] == op
        for k in ("SET_SH_REG_START", "SET_SH_REG_END", "SET_UCONFIG_REG_START", "SET_UCONFIG_REG_END",
                  "SET_CONTEXT_REG_START", "SET_CONFIG_REG_START"):
            assert getattr(pm4, k) == c["PACKET3_" + k]
        n = 0
        for name, lay in t.layouts.items():
            for fname, (_k, f) in lay.where.items():
                for mac in (f"PACKET3_{name}_{fname}", f"{name}_{fname}", f"PACKET3_{name}_GCR_CNTL_{fname}"):
                    if mac in m:
                        assert m[mac]["f(1)"] == 1 << f.lo, (name, fname, mac)
                        n += 1
                        break
        assert n >= 25
    for g in (9, 11, 12):
        e = facts(f"soc_{g}.json")["constants"]
        assert all(e[k] == v for k, v in pm4.EVENT_TYPES[g].items())


def test_sdma_against_facts():
    for t in (sdma.SDMA4, sdma.SDMA5, sdma.SDMA6):
        c = facts(f"sdma_{t.version}_0_0.json")["constants"]
        for name, lay in t.layouts.items():
            op, sub = t.ops[name]
            assert op in [v for k, v in c.items() if k.startswith("SDMA_OP_")]
            for k, w in enumerate(lay.words):
                dwname = w.name.split(".", 1)[1]
                for fname, f in w.fields.items():
                    pre = f"SDMA_PKT_{name}_{dwname}_{fname}"
                    assert (c[pre + "_offset"], c[pre + "_shift"], c[pre + "_mask"]) == (k, f.lo, (1 << (f.hi - f.lo + 1)) - 1)
                    n = sum(1 for key in c if key.startswith(f"SDMA_PKT_{name}_") and key.endswith("_offset")
                            and c[key] == k and key.startswith(f"SDMA_PKT_{name}_{dwname}_"))
                    assert n == len(w.fields)
        for k in ("SDMA_OP_COPY", "SDMA_OP_FENCE", "SDMA_SUBOP_TIMESTAMP_GET_GLOBAL"):
            assert getattr(sdma, k) == c[k]


def _gen_hw():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen_hw", Path(__file__).resolve().parent.parent / "scripts" / "gen_hw.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regs_against_facts():
    if not FACTS.exists():
        pytest.skip("shared facts not present")
    for f in sorted(FACTS.glob("regs_*.json")):
        m = re.match(r"regs_([a-z0-9]+)_(\d+)_(\d+)_(\d+)\.json$", f.name)
        ip = {"nbif": "NBIO"}.get(m.group(1), m.group(1).upper())
        rm = regs.load(ip, tuple(int(x) for x in m.groups()[1:]))
        want = dict(json.loads(f.read_text())["registers"])
        for name, (off, bi, flds) in _gen_hw().REGS_EXTRA.get(f.name, {}).items():   # what the facts subset lacks
            assert name not in want, (f.name, name)
            want[name] = {"offset": off, "base_index": bi, "fields": {k: list(v) for k, v in flds.items()}}
        assert len(rm) == len(want), f.name
        for name, r in want.items():
            got = rm[name]
            assert (got.name, got.offset, got.base_index) == (name, r["offset"], r["base_index"])
            assert {k: (v.lo, v.hi) for k, v in got.fields.items()} == {k.upper(): tuple(v) for k, v in r["fields"].items()}
    for fam, fn in (("navi", "navi_offsets.json"), ("vega", "vega_offsets.json")):
        c = facts(fn)["constants"]
        for ip, insts in regs.bases(fam).items():
            for i, segs in enumerate(insts):
                for s, v in enumerate(segs):
                    assert c[f"{ip}_BASE__INST{i}_SEG{s}"] == v


def _check_struct(s: Struct, want: dict, structs: dict):
    assert s.size == want["size"], s.name
    for f in want["fields"]:
        if "bit_width" in f:
            off, typ = s.fields[f["name"]]
            assert isinstance(typ, BitField) and off * 8 + typ.lo == f["offset"] * 8 + f["bit_offset"] and typ.width == f["bit_width"]
            continue
        off, typ = s.fields[f["name"]]
        assert off == f["offset"] and Struct.field_size(typ) == f["size"], (s.name, f["name"])
        t = f["type"]
        if isinstance(t, dict) and "struct" in t and isinstance(typ, Struct) and t["struct"] in structs:
            _check_struct(typ, structs[t["struct"]], structs)


def _by_name(structs: dict) -> dict:
    out = {}
    for k, v in structs.items():
        out.setdefault(re.sub(r"^(struct_|union_)_*", "", k), v)
    return out


def test_kfd_against_facts():
    d = facts("kfd.json")
    by = _by_name(d["structs"])
    assert set(kfd.STRUCTS) == {n for n, v in by.items() if v["size"]}      # none folded away or lost
    for name, s in kfd.STRUCTS.items():
        _check_struct(s, by[name], d["structs"])
    code = {"none": 0, "write": 1, "read": 2, "readwrite": 3}
    for name, io in d["ioctls"].items():
        req, s = kfd.IOCTLS[name]
        assert req == code[io["dir"]] << 30 | d["structs"][io["struct"]]["size"] << 16 | io["type"] << 8 | io["nr"]
        assert s.size == d["structs"][io["struct"]]["size"]
    for k, v in d["constants"].items():
        assert getattr(kfd, k) == v & 0xFFFFFFFF if v < 0 else getattr(kfd, k) == v


def test_am_against_facts():
    d = facts("am.json")
    by = _by_name(d["structs"])
    kernel_only = {n for n, v in by.items() if not v["size"] or any(f["type"] == "ptr" for f in v["fields"])}
    assert set(am.STRUCTS) == set(by) - kernel_only
    for name, s in am.STRUCTS.items():
        if name in ("ip_v4",):                     # restored byte 7, see gen_hw.py
            assert by[name]["size"] == 7 and s.size == 8
            continue
        _check_struct(s, by[name], {k: v for k, v in d["structs"].items() if "ip_v4" not in k})
    for k, v in d["constants"].items():
        assert getattr(am, k) == v


def test_aql_against_facts():
    d = facts("hsa.json")
    for name in ("hsa_kernel_dispatch_packet_t", "hsa_agent_dispatch_packet_t", "hsa_barrier_and_packet_t",
                 "hsa_barrier_or_packet_t", "amd_signal_t", "amd_queue_t", "amd_queue_v2_t", "amd_kernel_code_t"):
        _check_struct(aql.STRUCTS[name], d["structs"][name], {})
    for table, per in (("COMPUTE_TMPRING_SIZE", {9: "", 11: "_GFX11", 12: "_GFX12"}),
                       ("SQ_BUF_RSRC_WORD1", {9: "", 11: "_GFX11"}),
                       ("SQ_BUF_RSRC_WORD3", {9: "", 10: "_GFX10", 11: "_GFX11", 12: "_GFX12"})):
        for g, suf in per.items():
            fl = d["structs"][f"union_{table}{suf}_bitfields"]["fields"]
            b = getattr(aql, table)[g]
            assert {f["name"]: (f["offset"] * 8 + f["bit_offset"], f["bit_width"]) for f in fl} == \
                {n: (x.lo, x.hi - x.lo + 1) for n, x in b.fields.items()}
    c = d["constants"]
    assert all(getattr(aql, k) == v for k, v in c.items() if k.startswith("HSA_"))
    assert aql.HEADER["RELEASE_FENCE_SCOPE"].lo == c["HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE"]


def test_vm_against_facts():
    c = facts("am.json")["constants"]
    for g, b in vm.PTE.items():
        for n in ("VALID", "SYSTEM", "SNOOPED", "TMZ", "EXECUTABLE", "READABLE", "WRITEABLE"):
            assert b[n].mask == c[f"AMDGPU_PTE_{n}"]
    assert vm.PTE[10]["MTYPE"].mask == c["AMDGPU_PTE_MTYPE_NV10_MASK"] and vm.PTE[9]["MTYPE"].mask == c["AMDGPU_PTE_MTYPE_VG10_MASK"]
    assert vm.PTE[12]["MTYPE"].mask == c["AMDGPU_PTE_MTYPE_GFX12_MASK"] and vm.PTE[12]["PRT"].mask == c["AMDGPU_PTE_PRT_GFX12"]
    assert vm.PTE[12]["PDE_PTE"].mask == c["AMDGPU_PDE_PTE_GFX12"] and vm.PTE[10]["PDE_PTE"].mask == c["AMDGPU_PDE_PTE"]
    assert vm.PTE[10]["PRT"].mask == c["AMDGPU_PTE_PRT"]


def test_isa_tables_per_family():
    """Every family has its generated tables; a family without any is UnsupportedTarget."""
    from amdq.hw import isa
    assert isa.tables("gfx12") is isa.tables("rdna4") and isa.tables("gfx9") is isa.tables("cdna3")
    assert "VBUFFER" in isa.encodings("rdna4") and "SDWA" not in isa.encodings("rdna4")
    assert "MUBUF" in isa.encodings("cdna3") and "V_MFMA_F32_16X16X16_F16" in isa.opnums("VOP3POp", "cdna3")
    with pytest.raises(UnsupportedTarget, match="gfx10"):
        isa.tables("gfx10")
