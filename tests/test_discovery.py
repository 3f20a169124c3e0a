"""IP discovery: the binary format (amdq.hw.discovery) and the driver side (amdq.am.discovery)."""
from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from amdq.am import discovery as amd
from amdq.errors import DiscoveryError, UnsupportedTarget
from amdq.hw import am, regs
from amdq.hw import discovery as D
from amdq.hw.regmap import SIM_SEGMENTS, Layout, MemoryBackend, Registers
from amdq.hw.targets import TARGETS, get_target
from amdq.sim.regfile import RegisterFile

FACTS = Path(__file__).resolve().parents[2] / "shared" / "facts"
ARCHS = ("gfx1100", "gfx1201", "gfx942")


def blob_for(arch: str, **kw) -> bytes:
    return D.encode(D.for_target(get_target(arch), **kw))


def resum(b: bytearray) -> bytearray:
    """Recompute the binary checksum (to reach the checks behind it)."""
    size = struct.unpack_from("<H", b, 10)[0]
    struct.pack_into("<H", b, 8, D.checksum(b[D.CHECKSUM_START:size]))
    return b


@pytest.mark.parametrize("arch", ARCHS)
def test_written_table_parses_back_to_the_target(arch):
    t = get_target(arch)
    d = D.decode(blob_for(arch))
    family = regs.bases(t.gen.bases)
    want = {"GC": t.ip["GC"], "SDMA0": t.ip["SDMA"], "SDMA1": t.ip["SDMA"], "NBIF": t.ip["NBIO"], "MMHUB": t.ip["MMHUB"],
            "MP0": t.ip["MP0"], "MP1": t.ip["MP1"], "OSSSYS": t.ip["OSSSYS"], "HDP": t.ip["HDP"]}
    assert d.versions == want
    for name, table in (("MMHUB", "MMHUB"), ("NBIF", "NBIO"), ("MP0", "MP0"), ("OSSSYS", "OSSSYS"), ("SDMA1", "SDMA1")):
        want = family[table]
        extra = SIM_SEGMENTS.get(("NBIO", *t.ip["NBIO"][:2])) if table == "NBIO" else None
        if extra:                               # the simulator's NBIO segments beyond the base table
            want = [[extra.get(i, b) for i, b in enumerate(s + [0] * (max(extra) + 1 - len(s)))] for s in want]
        assert d.register_bases(name) == want
    gc = d.register_bases("GC")
    assert len(gc) == t.xcc and gc[0] == family["GC"][0]
    assert d.ip_version == D.LAYOUTS[t.gfx_version][0] and d.gc_info_version == D.LAYOUTS[t.gfx_version][1]
    g = d.gc_info
    assert (g["gc_num_se"] * t.xcc, g["gc_wave_size"], g["gc_max_waves_per_simd"], g["gc_lds_size"] << 10) == \
        (t.ses, t.wave_size, t.max_waves_per_simd, t.lds_bytes)
    assert amd.target_of(d) is t
    assert d.num_dies == (4 if t.xcc == 8 else 1)
    assert sorted(e.instance for e in d.find("GC") if e.die == 3) == ([6, 7] if t.xcc == 8 else [])


@pytest.mark.parametrize("arch", ARCHS)
def test_register_map_from_discovery_matches_static_tables(arch):
    t = get_target(arch)
    d = D.decode(blob_for(arch))
    found, static = Layout(d.blocks()), Layout.for_target(t)
    assert set(found.tables) == set(static.tables)
    for block, table in static.tables.items():
        segs = static.blocks[block].bases[0]
        for name in list(table)[::7]:
            if table[name].base_index < len(segs):
                for inst in range(static.blocks[block].instances):
                    assert found.address(block, name, inst) == static.address(block, name, inst), (block, name, inst)
    r = Registers(found, MemoryBackend())
    assert r.GC.regCOMPUTE_PGM_LO.addr == 0x2E0C          # the address the runtime's SET_SH_REG packets use
    if t.xcc > 1:
        assert r.name_of(r.xcc(t.xcc - 1).GC.regCP_HQD_ACTIVE.addr) == f"GC[{t.xcc - 1}].regCP_HQD_ACTIVE"


def test_versions_and_layout_variants():
    t = get_target("gfx942")
    for kw in (dict(ip_version=4, base64=True), dict(ip_version=3), dict(ip_version=2), dict(binary_version=(2, 0)),
               dict(ip_version=4, base64=True, binary_version=(2, 0))):
        d0 = D.for_target(t, **kw)
        d = D.decode(D.encode(d0))
        assert d.ips == d0.ips and d.base64 == d0.base64 and d.binary_version == d0.binary_version
        assert d.register_bases("GC") == D.decode(blob_for("gfx942")).register_bases("GC")
    with pytest.raises(DiscoveryError, match="64-bit bases need ip_discovery_header.version 4"):
        D.encode(D.for_target(t, ip_version=3, base64=True))


def test_64_bit_bases_truncated_as_the_driver_does():
    t = get_target("gfx1100")
    d0 = D.for_target(t, ip_version=4, base64=True)
    gc = d0.find("GC")[0]
    high = replace(gc, bases=tuple(b | (0x5 << 40) | (0x3 << 30) if b else 0 for b in gc.bases))   # die bits above bit 29
    d = D.decode(D.encode(replace(d0, ips=(high,) + tuple(e for e in d0.ips if e.name != "GC"))))
    assert d.find("GC")[0].bases == high.bases
    assert d.register_bases("GC") == [list(gc.bases)]


def test_sub_revision_variant_and_v1_harvest_bits():
    t = get_target("gfx1100")
    d0 = D.for_target(t)
    e = replace(d0.ips[0], sub_revision=3, variant=5)
    d = D.decode(D.encode(replace(d0, ips=(e,) + d0.ips[1:])))
    assert (d.ips[0].sub_revision, d.ips[0].variant) == (3, 5)
    v1 = replace(D.for_target(t, ip_version=1), ips=(replace(d0.ips[0], harvest=1),) + d0.ips[1:])
    d = D.decode(D.encode(v1))
    assert d.ips[0].harvest == 1 and d.ips[0].variant == 0


def test_harvest_table():
    d = D.with_harvest(D.for_target(get_target("gfx942")), [("VCN", 1), ("UMC", 3)])
    assert D.decode(D.encode(d)).harvest == (("VCN", 1), ("UMC", 3))
    with pytest.raises(DiscoveryError, match="unknown IP names"):
        D.encode(D.with_harvest(d, [("WARP_DRIVE", 0)]))


def test_corrupted_binaries_fail_naming_the_field():
    good = blob_for("gfx1100")
    b = bytearray(good)
    b[0] ^= 1
    with pytest.raises(DiscoveryError, match="binary_header.binary_signature is 0x28211406"):
        D.decode(b)
    b = bytearray(good)
    b[200] ^= 0x40
    with pytest.raises(DiscoveryError, match="binary_header.binary_checksum"):
        D.decode(b)
    b = bytearray(good)
    struct.pack_into("<H", b, 10, len(good) + 4)
    with pytest.raises(DiscoveryError, match="binary_header.binary_size"):
        D.decode(b)
    with pytest.raises(DiscoveryError, match="binary_header: 60 bytes"):
        D.decode(good[:40])
    ioff = am.binary_header.unpack(good)["table_list"][0]["offset"]
    b = bytearray(good)
    b[ioff + 40] ^= 1                                           # inside the IP table: its checksum no longer holds
    with pytest.raises(DiscoveryError, match=r"table_list\[IP_DISCOVERY\].checksum"):
        D.decode(resum(b))
    b = bytearray(good)
    b[ioff] ^= 1
    with pytest.raises(DiscoveryError, match=r"ip_discovery_header.signature is 0x53445048"):
        D.decode(resum(b))
    b = bytearray(good)
    b[am.binary_header.unpack(good)["table_list"][1]["offset"]] ^= 2
    with pytest.raises(DiscoveryError, match=r"gc_info.header.table_id is 0x4345, expected 0x4347"):
        D.decode(resum(b))
    b = bytearray(good)
    b[am.binary_header.unpack(good)["table_list"][2]["offset"] + 3] ^= 1
    with pytest.raises(DiscoveryError, match=r"harvest_info_header.signature is 0x57524148"):
        D.decode(resum(b))
    goff = am.binary_header.unpack(good)["table_list"][1]["offset"]
    b = bytearray(good)
    struct.pack_into("<I", b, goff + 8, 0x4000)                 # gc_info.header.size beyond the binary
    with pytest.raises(DiscoveryError, match=r"table_list\[GC\]: table size"):
        D.decode(resum(b))
    hoff = am.binary_header.unpack(good)["table_list"][2]["offset"]
    b = bytearray(good)
    b[hoff + 12] ^= 1
    with pytest.raises(DiscoveryError, match=r"table_list\[HARVEST_INFO\].checksum"):
        D.decode(resum(b))


def _patched_ip_table(good: bytes, patch) -> bytes:
    """Change the IP table, then fix its checksum and the binary's, to reach the structural checks."""
    b = bytearray(good)
    h = am.binary_header.unpack(b)
    t = h["table_list"][0]
    patch(b, t["offset"])
    size = am.ip_discovery_header.unpack(b, t["offset"])["size"]
    am.table_info.pack_into(b, 12, offset=t["offset"], checksum=D.checksum(b[t["offset"]:t["offset"] + size]), size=size)
    return bytes(resum(b))


def test_malformed_ip_table_fails_naming_the_field():
    good = blob_for("gfx942")
    ihdr = am.ip_discovery_header

    def sig(b, o):
        struct.pack_into("<I", b, o, 0x12345678)
    with pytest.raises(DiscoveryError, match="ip_discovery_header.signature is 0x12345678"):
        D.decode(_patched_ip_table(good, sig))

    def dies(b, o):
        struct.pack_into("<H", b, o + ihdr.offsetof("num_dies"), 17)
    with pytest.raises(DiscoveryError, match="ip_discovery_header.num_dies is 17"):
        D.decode(_patched_ip_table(good, dies))

    def die_id(b, o):
        d1 = ihdr.unpack(b, o)["die_info"][1]["die_offset"]
        struct.pack_into("<H", b, d1, 7)
    with pytest.raises(DiscoveryError, match="die_header.die_id of die 1 is 7, expected 1"):
        D.decode(_patched_ip_table(good, die_id))

    def nbases(b, o):
        d0 = ihdr.unpack(b, o)["die_info"][0]["die_offset"]
        b[d0 + 4 + 3] = 200                                     # first record's num_base_address
    with pytest.raises(DiscoveryError, match="die 0 IP record 0 \\(GC\\): num_base_address=200"):
        D.decode(_patched_ip_table(good, nbases))

    def hwid(b, o):
        d0 = ihdr.unpack(b, o)["die_info"][0]["die_offset"]
        struct.pack_into("<H", b, d0 + 4, 0xFFFF)
    with pytest.raises(DiscoveryError, match="hw_id 65535 is not below HW_ID_MAX"):
        D.decode(_patched_ip_table(good, hwid))

    def inst(b, o):
        d0 = ihdr.unpack(b, o)["die_info"][0]["die_offset"]
        b[d0 + 4 + 2] = 200
    with pytest.raises(DiscoveryError, match="instance_number 200 is not below HWIP_MAX_INSTANCE"):
        D.decode(_patched_ip_table(good, inst))


def test_gc_info_version_and_missing_instances():
    d = D.for_target(get_target("gfx1100"))
    b = bytearray(D.encode(d))
    goff = am.binary_header.unpack(b)["table_list"][1]["offset"]
    struct.pack_into("<H", b, goff + 4, 7)                      # gc_info.header.version_major
    t = am.binary_header.unpack(b)["table_list"][1]
    am.table_info.pack_into(b, 12 + 8, offset=goff, checksum=D.checksum(b[goff:goff + t["size"]]), size=t["size"])
    with pytest.raises(DiscoveryError, match="gc_info.header.version 7.2 is not a GC info version"):
        D.decode(resum(b))
    gap = replace(d, ips=tuple(replace(e, instance=2) if e.name == "GC" else e for e in d.ips))
    with pytest.raises(DiscoveryError, match=r"GC: instances \[0, 1\] are missing"):
        D.decode(D.encode(gap)).blocks()
    with pytest.raises(DiscoveryError, match="no VCN instance 0"):
        D.decode(D.encode(d)).version("VCN")


def test_struct_layouts_follow_discovery_h():
    # the sizes and offsets the format relies on (discovery.h, #pragma pack(1))
    assert (am.binary_header.size, am.table_info.size, am.ip_discovery_header.size, am.die_header.size) == (60, 8, 80, 4)
    assert am.binary_header.offsetof("table_list") == 12 and D.CHECKSUM_START == 10
    assert am.ip_discovery_header.offsetof("die_info") == 14 and am.ip_discovery_header.offsetof("base_addr_64_bit") == 78
    assert am.ip_v4.size == am.ip_v3.size == am.ip.size == 8 and am.harvest_table.size == 136
    for f in ("binary_signature", "version_major", "version_minor", "binary_checksum", "binary_size"):
        assert D.binary_header_v2.offsetof(f) == am.binary_header.offsetof(f)
    assert D.binary_header_v2.offsetof("table_list") == 16
    if not FACTS.exists():
        pytest.skip("shared facts not present")
    facts = json.loads((FACTS / "am.json").read_text())["structs"]
    for name in ("binary_header", "table_info", "ip_discovery_header", "die_header", "die_info", "ip", "ip_v3",
                 "harvest_table", "harvest_info", "gpu_info_header", *(s.name for s in D.GC_INFO.values())):
        want, got = facts.get(name) or facts["struct_" + name], getattr(am, name)
        assert want["size"] == got.size, name
        for f in want["fields"]:
            assert got.offsetof(f["name"]) == f["offset"], (name, f["name"])
    v4 = facts["ip_v4"]                                            # the facts lost byte 7 (see gen_hw.py)
    assert [(f["name"], f["offset"]) for f in v4["fields"] if f["offset"] < 7] == \
        [(f["name"], f["offset"]) for f in facts["ip_v3"]["fields"] if f["offset"] < 7]


def test_location_facts_agree_with_the_register_tables():
    # amdgpu_discovery.c reads MP0_SMN_C2PMSG_33 at a fixed dword; the MP tables with the usual bases agree
    navi = regs.bases("navi")["MP0"][0]
    assert navi[0] + regs.load("MP0", (13, 0, 0)).regMP0_SMN_C2PMSG_33.offset == D.REG_MP0_SMN_C2PMSG_33
    assert D.vram_offset(24 << 30) == (24 << 30) - 0x10000 and D.TMR_SIZE == 10240
    with pytest.raises(DiscoveryError, match="below the discovery offset"):
        D.vram_offset(4096)
    for t in TARGETS.values():
        assert len(D.encode(D.for_target(t))) <= D.TMR_SIZE


class FakeGPU:
    """VRAM with the table at the top and a register file whose PSP mailbox reports IFWI init."""

    def __init__(self, arch: str, ifwi_after: int = 3, blob: bytes | None = None):
        t = get_target(arch)
        self.vram_mib = 256
        self.vram = bytearray(self.vram_mib << 20)
        blob = blob if blob is not None else blob_for(arch)
        off = D.vram_offset(len(self.vram))
        self.vram[off:off + len(blob)] = blob
        self.polls, self.ifwi_after = 0, ifwi_after
        gpu = self

        class Mailbox(RegisterFile):
            def on_read_regMP0_SMN_C2PMSG_33(self):
                gpu.polls += 1
                return D.IFWI_INIT_DONE if gpu.polls > gpu.ifwi_after else 0

        self.regs = Mailbox(Layout.for_target(t))
        self.regs.poke(D.REG_RCC_CONFIG_MEMSIZE, self.vram_mib)

    def read_vram(self, off: int, size: int) -> bytes:
        return bytes(self.vram[off:off + size])


def test_driver_reads_the_table_from_vram():
    g = FakeGPU("gfx942")
    d = amd.read(g.regs.read32, g.read_vram, sleep=lambda s: None)
    assert g.polls == 4 and amd.target_of(d).arch == "gfx942"
    regs_ = Registers(amd.layout(d), g.regs)
    regs_.xcc(7).GC.regCP_HQD_ACTIVE.write(1)
    assert g.regs.raw.xcc(7).GC.regCP_HQD_ACTIVE.read() == 1


def test_driver_errors_on_bad_location_or_table():
    g = FakeGPU("gfx1100", ifwi_after=10 ** 9, blob=b"\0" * 64)
    with pytest.raises(DiscoveryError, match="binary_signature.*IFWI init had not finished"):
        amd.read(g.regs.read32, g.read_vram, timeout_ms=5, sleep=lambda s: None)
    g = FakeGPU("gfx1100")
    g.regs.poke(D.REG_RCC_CONFIG_MEMSIZE, 0)
    with pytest.raises(DiscoveryError, match="RCC_CONFIG_MEMSIZE is 0"):
        amd.read(g.regs.read32, g.read_vram, sleep=lambda s: None)
    g.regs.poke(D.REG_RCC_CONFIG_MEMSIZE, 0xFFFFFFFF)
    with pytest.raises(DiscoveryError, match="does not answer"):
        amd.read(g.regs.read32, g.read_vram, sleep=lambda s: None)
    odd = D.for_target(get_target("gfx1100"))
    odd = replace(odd, ips=tuple(replace(e, version=(10, 3, 0)) if e.name == "GC" else e for e in odd.ips))
    with pytest.raises(UnsupportedTarget, match="GC 10.3.0"):
        amd.target_of(D.decode(D.encode(odd)))
