"""The IP discovery binary: the table a GPU keeps near the top of its VRAM naming its IP blocks, their
versions and register bases. One encoder (`encode`, for the simulated GPU) and one decoder (`decode`).

Sources: Linux amdgpu `include/discovery.h` (the structs, in amdq.hw.am from shared/facts/am.json;
binary_header_v2 below), `amdgpu/amdgpu_discovery.h` and `amdgpu_discovery.c` (location, checksums,
which record layout each header version uses, 64-bit base truncation, the registers read before
discovery), NOTES 2.1.

Layout: binary_header (signature, 16-bit byte-sum checksum of everything after the checksum field up to
binary_size, table_list) -> tables at byte offsets, each with its own byte-sum checksum:
IP_DISCOVERY (ip_discovery_header, then per die a die_header and its IP records), GC (gc_info_vX_Y),
HARVEST_INFO (harvest_table). IP records are `ip` (header version < 3: byte 7 = harvest) or
`ip_v3`/`ip_v4` (byte 7 = sub_revision:4 | variant:4), followed by num_base_address bases of 4 bytes, or
8 bytes when a version-4 header sets base_addr_64_bit. Die offsets are offsets in the whole binary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable

from ..errors import DiscoveryError
from . import am
from .layout import Array, Struct
from .regmap import IPBlock, target_blocks

IPVersion = tuple[int, int, int]

# --- where the binary is (amdgpu_discovery.h / amdgpu_discovery.c) -------------------------------------
TMR_OFFSET = 64 << 10                  # DISCOVERY_TMR_OFFSET: the binary starts this far below the top of VRAM
TMR_SIZE = 10 << 10                    # DISCOVERY_TMR_SIZE: bytes the driver reads (grew 4 -> 8 -> 10 KiB)
REG_RCC_CONFIG_MEMSIZE = 0xDE3         # absolute dword: VRAM size in MiB (0: the binary is in system memory)
REG_MP0_SMN_C2PMSG_33 = 0x16061        # absolute dword: bit 31 set once IFWI init is done
IFWI_INIT_DONE = 1 << 31
IFWI_POLL_MS = 1000                    # the driver polls C2PMSG_33 up to ~1 s (1 ms steps) before reading
REG_IP_DISCOVERY_VERSION = 0x16A00     # absolute dword read by newer kernels (2 and 4 seen)
REG_DRIVER_SCRATCH = (0x94, 0x95, 0x96)  # newest kernels: binary offset lo/hi and size from PSP
HWIP_MAX_INSTANCE = am.HWIP_MAX_INSTANCE
HW_ID_MAX = am.HW_ID_MAX
BASE64_MASK = 0x3FFFFFFF               # a 64-bit base keeps its low 32 bits less the top 2 (dword address)


def vram_offset(vram_bytes: int) -> int:
    """Byte offset of the binary in VRAM of `vram_bytes` (RCC_CONFIG_MEMSIZE MiB << 20)."""
    if vram_bytes < TMR_OFFSET:
        raise DiscoveryError(f"VRAM size {vram_bytes:#x} is below the discovery offset {TMR_OFFSET:#x} from its top")
    return vram_bytes - TMR_OFFSET


# binary_header_v2 (discovery.h; not in the facts): num_tables and a flexible table_list.
binary_header_v2 = Struct("binary_header_v2", 16, [
    ("binary_signature", 0, "u32"), ("version_major", 4, "u16"), ("version_minor", 6, "u16"),
    ("binary_checksum", 8, "u16"), ("binary_size", 10, "u16"), ("num_tables", 12, "u16"), ("padding", 14, "u16"),
    ("table_list", 16, Array(am.table_info, 0)),
])
CHECKSUM_START = am.binary_header.offsetof("binary_checksum") + 2     # the binary checksum covers bytes from here

TABLES = ("IP_DISCOVERY", "GC", "HARVEST_INFO", "VCN_INFO", "MALL_INFO", "NPS_INFO")   # table_list indices
GC_INFO = {(1, 0): am.gc_info_v1_0, (1, 1): am.gc_info_v1_1, (1, 2): am.gc_info_v1_2, (1, 3): am.gc_info_v1_3,
           (2, 0): am.gc_info_v2_0, (2, 1): am.gc_info_v2_1}

# hardware id <-> name (soc15_hw_ip.h *_HWID). Where two names share an id the first in this order wins.
HW_IDS: dict[str, int] = {k[:-5]: v for k, v in sorted(vars(am).items()) if k.endswith("_HWID")}
HW_NAMES: dict[int, str] = {}
for _n, _v in HW_IDS.items():
    HW_NAMES.setdefault(_v, _n)
HW_NAMES[am.VCN_HWID] = "VCN"          # UVD and VCN share 0xc; the targets amdq supports have VCN
# register-map block names that differ from the hardware-id name (the kernel maps NBIO to NBIF_HWID)
BLOCK_OF = {"NBIF": "NBIO"}
HWID_OF_BLOCK = {"NBIO": "NBIF"}

# What the simulated GPU's table carries per GC generation: (ip_discovery_header.version, GC info version).
# The GC-info major follows from the kernel's parser: v1 counts WGPs per shader array (RDNA), v2 CUs per
# shader array (GFX9), with v2.1 fields "per XCD" (GC 9.4.3). The header version and the GC-info minor
# are this simulator's choices: the driver reads both from the table, and decodes every version here.
LAYOUTS: dict[int, tuple[int, tuple[int, int]]] = {9: (4, (2, 1)), 11: (3, (1, 2)), 12: (4, (1, 3))}
# Compute dies per IO die on the multi-XCC targets (MI300X/MI355X: 8 XCDs on 4 IO dies); the simulated
# table puts XCC pairs on dies 0..3 and the other IPs on die 0.
XCC_PER_DIE = 2


@dataclass(frozen=True)
class IPEntry:
    """One IP record: hardware-id name, instance, version, register bases (dwords; as stored, 64-bit ones
    untruncated), the die it is on."""
    name: str
    instance: int
    version: IPVersion
    bases: tuple[int, ...]
    die: int = 0
    sub_revision: int = 0
    variant: int = 0
    harvest: int = 0

    @property
    def hw_id(self) -> int:
        if self.name not in HW_IDS:
            raise DiscoveryError(f"unknown IP name {self.name!r}: not a hardware id of soc15_hw_ip.h")
        return HW_IDS[self.name]


@dataclass(frozen=True)
class Discovery:
    """The content of an IP discovery binary."""
    ips: tuple[IPEntry, ...]
    ip_version: int = 4                         # ip_discovery_header.version
    base64: bool = False                        # base_addr_64_bit (version 4 only)
    binary_version: tuple[int, int] = (1, 0)    # binary_header version (2: v2 header with num_tables)
    gc_info: dict[str, int] | None = None       # gc_info fields without header
    gc_info_version: tuple[int, int] | None = None
    harvest: tuple[tuple[str, int], ...] = ()   # harvested (IP name, instance)
    table_id: int = 0                           # ip_discovery_header.id
    num_dies: int = 1

    def find(self, name: str) -> list[IPEntry]:
        """The records of an IP by hardware-id name (GC, MMHUB, NBIF, MP0, ...), by instance."""
        return sorted((e for e in self.ips if e.name == name.upper()), key=lambda e: e.instance)

    def version(self, name: str, instance: int = 0) -> IPVersion:
        for e in self.find(name):
            if e.instance == instance:
                return e.version
        raise DiscoveryError(f"the discovery table has no {name.upper()} instance {instance}")

    @property
    def versions(self) -> dict[str, IPVersion]:
        """{IP name: version of its instance 0 (or its lowest instance)}."""
        out: dict[str, IPVersion] = {}
        for e in sorted(self.ips, key=lambda e: e.instance):
            out.setdefault(e.name, e.version)
        return out

    def register_bases(self, name: str) -> list[list[int]]:
        """Segment bases per instance as the driver uses them (64-bit bases truncated to dword addresses)."""
        recs = self.find(name)
        if not recs:
            raise DiscoveryError(f"the discovery table has no {name.upper()}")
        out: list[list[int]] = [[] for _ in range(recs[-1].instance + 1)]
        for e in recs:
            out[e.instance] = [(b & 0xFFFFFFFF) & BASE64_MASK if self.base64 else b for b in e.bases]
        return out

    def blocks(self) -> list[IPBlock]:
        """The IP blocks for a register layout (amdq.hw.regmap.Layout): names as the register maps call them."""
        out = []
        for name in dict.fromkeys(e.name for e in self.ips):
            bases = self.register_bases(name)
            if any(not b for b in bases):
                missing = [i for i, b in enumerate(bases) if not b]
                raise DiscoveryError(f"{name}: instances {missing} are missing (instances must be numbered 0..n-1)")
            out.append(IPBlock(BLOCK_OF.get(name, name), self.version(name, self.find(name)[0].instance),
                               tuple(tuple(b) for b in bases)))
        return out


# --- decoding -----------------------------------------------------------------------------------------
def checksum(data: bytes | memoryview) -> int:
    """The 16-bit byte sum the binary and its tables are checked with."""
    return sum(data) & 0xFFFF


def _need(blob: bytes, off: int, size: int, what: str, limit: int | None = None) -> None:
    end = len(blob) if limit is None else limit
    if off < 0 or off + size > end:
        raise DiscoveryError(f"{what}: {size} bytes at offset {off:#x} run past the {end:#x}-byte binary")


def decode(blob: bytes | bytearray | memoryview) -> Discovery:
    """Parse an IP discovery binary; every check the driver makes, failing with the field at fault."""
    blob = bytes(blob)
    _need(blob, 0, am.binary_header.size, "binary_header")
    h = am.binary_header.unpack(blob)
    if h["binary_signature"] != am.BINARY_SIGNATURE:
        raise DiscoveryError(f"binary_header.binary_signature is {h['binary_signature']:#010x}, "
                             f"expected {am.BINARY_SIGNATURE:#010x}: not an IP discovery binary")
    size = h["binary_size"]
    if not am.binary_header.size <= size <= len(blob):
        raise DiscoveryError(f"binary_header.binary_size {size:#x} does not fit the {len(blob):#x} bytes read "
                             f"(at least {am.binary_header.size:#x})")
    got = checksum(blob[CHECKSUM_START:size])
    if got != h["binary_checksum"]:
        raise DiscoveryError(f"binary_header.binary_checksum is {h['binary_checksum']:#06x}, the bytes sum to {got:#06x}")
    if h["version_major"] == 2:
        h2 = binary_header_v2.unpack(blob)
        n = h2["num_tables"]
        _need(blob, 16, 8 * n, "binary_header_v2.table_list (num_tables)", size)
        tables = [am.table_info.unpack(blob, 16 + 8 * i) for i in range(n)]
    else:
        tables = h["table_list"]
    tables = tables + [{"offset": 0, "checksum": 0, "size": 0}] * (len(TABLES) - len(tables))

    def table(i: int, header: Struct, length_of: Any, check: Any) -> tuple[int, dict] | None:
        t = tables[i]
        off = t["offset"]
        if not off:
            return None
        what = f"table_list[{TABLES[i]}]"
        _need(blob, off, header.size, f"{what}.offset", size)
        hdr = header.unpack(blob, off)
        check(hdr)                                   # signature / table id first, as the driver does
        n = length_of(hdr)
        _need(blob, off, n, f"{what}: table size", size)
        got = checksum(blob[off:off + n])
        if got != t["checksum"]:
            raise DiscoveryError(f"{what}.checksum is {t['checksum']:#06x}, the table's {n} bytes sum to {got:#06x}")
        return off, hdr

    def ip_sig(d: dict) -> None:
        if d["signature"] != am.DISCOVERY_TABLE_SIGNATURE:
            raise DiscoveryError(f"ip_discovery_header.signature is {d['signature']:#010x}, "
                                 f"expected {am.DISCOVERY_TABLE_SIGNATURE:#010x}")

    def gc_id(d: dict) -> None:
        if d["table_id"] != am.GC_TABLE_ID:
            raise DiscoveryError(f"gc_info.header.table_id is {d['table_id']:#x}, expected {am.GC_TABLE_ID:#x}")

    def harvest_sig(d: dict) -> None:
        if d["signature"] != am.HARVEST_TABLE_SIGNATURE:
            raise DiscoveryError(f"harvest_info_header.signature is {d['signature']:#010x}, "
                                 f"expected {am.HARVEST_TABLE_SIGNATURE:#010x}")

    ip = table(0, am.ip_discovery_header, lambda d: d["size"], ip_sig)
    if ip is None:
        raise DiscoveryError("table_list[IP_DISCOVERY].offset is 0: the binary has no IP discovery table")
    ioff, ihdr = ip
    ver, end = ihdr["version"], ioff + ihdr["size"]
    base64 = ver >= 4 and bool(ihdr["base_addr_64_bit"])
    if not 1 <= ihdr["num_dies"] <= 16:
        raise DiscoveryError(f"ip_discovery_header.num_dies is {ihdr['num_dies']}, expected 1..16")
    rec = am.ip if ver < 3 else am.ip_v4
    ips = []
    for d in range(ihdr["num_dies"]):
        doff = ihdr["die_info"][d]["die_offset"]
        _need(blob, doff, am.die_header.size, f"ip_discovery_header.die_info[{d}].die_offset", end)
        dh = am.die_header.unpack(blob, doff)
        if dh["die_id"] != d:
            raise DiscoveryError(f"die_header.die_id of die {d} is {dh['die_id']}, expected {d}")
        pos = doff + am.die_header.size
        for k in range(dh["num_ips"]):
            what = f"die {d} IP record {k}"
            _need(blob, pos, rec.size, what, end)
            r = rec.unpack(blob, pos)
            inst = r["number_instance"] if ver < 3 else r["instance_number"]
            if r["hw_id"] >= HW_ID_MAX:
                raise DiscoveryError(f"{what}: hw_id {r['hw_id']} is not below HW_ID_MAX ({HW_ID_MAX})")
            if inst >= HWIP_MAX_INSTANCE:
                raise DiscoveryError(f"{what}: instance_number {inst} is not below HWIP_MAX_INSTANCE ({HWIP_MAX_INSTANCE})")
            width = 8 if base64 else 4
            n = r["num_base_address"]
            _need(blob, pos + rec.size, width * n, f"{what} ({HW_NAMES.get(r['hw_id'], r['hw_id'])}): "
                                                   f"num_base_address={n}", end)
            bases = Struct("b", width * n, [("b", 0, Array("u64" if base64 else "u32", n))]).unpack(blob, pos + rec.size)["b"]
            name = HW_NAMES.get(r["hw_id"], f"HWID_{r['hw_id']}")
            ips.append(IPEntry(name, inst, (r["major"], r["minor"], r["revision"]), tuple(bases), d,
                               0 if ver < 3 else r["sub_revision"], 0 if ver < 3 else r["variant"],
                               r["harvest"] if ver < 3 else 0))
            pos += rec.size + width * n

    gc_info = gc_ver = None
    gc = table(1, am.gpu_info_header, lambda d: d["size"], gc_id)
    if gc is not None:
        goff, ghdr = gc
        gc_ver = (ghdr["version_major"], ghdr["version_minor"])
        st = GC_INFO.get(gc_ver)
        if st is None:
            raise DiscoveryError(f"gc_info.header.version {gc_ver[0]}.{gc_ver[1]} is not a GC info version "
                                 f"({', '.join(f'{a}.{b}' for a, b in GC_INFO)})")
        if ghdr["size"] < st.size:
            raise DiscoveryError(f"gc_info.header.size {ghdr['size']} is below the {st.size} bytes of gc_info_v{gc_ver[0]}_{gc_ver[1]}")
        gc_info = {k: v for k, v in st.unpack(blob, goff).items() if k != "header"}

    harvest: list[tuple[str, int]] = []
    hv = table(2, am.harvest_info_header, lambda d: am.harvest_table.size, harvest_sig)
    if hv is not None:
        hoff, _ = hv
        for e in am.harvest_table.unpack(blob, hoff)["list"]:
            if e["hw_id"] == 0:
                break
            harvest.append((HW_NAMES.get(e["hw_id"], f"HWID_{e['hw_id']}"), e["number_instance"]))

    return Discovery(tuple(ips), ver, base64, (h["version_major"], h["version_minor"]), gc_info, gc_ver,
                     tuple(harvest), ihdr["id"], ihdr["num_dies"])


# --- encoding -----------------------------------------------------------------------------------------
def _align(n: int, a: int = 8) -> int:
    return (n + a - 1) // a * a


def encode(d: Discovery) -> bytes:
    """The binary for a Discovery (the inverse of `decode`); it must fit TMR_SIZE."""
    if d.base64 and d.ip_version < 4:
        raise DiscoveryError(f"64-bit bases need ip_discovery_header.version 4, not {d.ip_version}")
    if d.gc_info is not None and d.gc_info_version not in GC_INFO:
        raise DiscoveryError(f"gc_info version {d.gc_info_version} is not one of {list(GC_INFO)}")
    ndies = max([d.num_dies] + [e.die + 1 for e in d.ips])
    if ndies > 16:
        raise DiscoveryError(f"{ndies} dies do not fit the 16 of ip_discovery_header.die_info")
    hdr_size = am.binary_header.size if d.binary_version[0] != 2 else binary_header_v2.size + 8 * len(TABLES)
    out = bytearray(TMR_SIZE)
    ioff = _align(hdr_size)
    pos = ioff + am.ip_discovery_header.size
    rec = am.ip if d.ip_version < 3 else am.ip_v4
    width = 8 if d.base64 else 4
    die_info = []
    for die in range(ndies):
        recs = [e for e in d.ips if e.die == die]
        die_info.append({"die_id": die, "die_offset": pos})
        _fit(pos + am.die_header.size, "die header")
        am.die_header.pack_into(out, pos, die_id=die, num_ips=len(recs))
        pos += am.die_header.size
        for e in recs:
            if not 0 <= e.instance < HWIP_MAX_INSTANCE:
                raise DiscoveryError(f"{e.name} instance {e.instance} is not below HWIP_MAX_INSTANCE ({HWIP_MAX_INSTANCE})")
            _fit(pos + rec.size + width * len(e.bases), f"{e.name} record")
            f: dict[str, Any] = dict(hw_id=e.hw_id, num_base_address=len(e.bases), major=e.version[0],
                                     minor=e.version[1], revision=e.version[2])
            if d.ip_version < 3:
                f.update(number_instance=e.instance, harvest=e.harvest)
            else:
                f.update(instance_number=e.instance, sub_revision=e.sub_revision, variant=e.variant)
            try:
                rec.pack_into(out, pos, **f)
                Struct("b", width * len(e.bases), [("b", 0, Array("u64" if d.base64 else "u32", len(e.bases)))]
                       ).pack_into(out, pos + rec.size, b=list(e.bases))
            except ValueError as err:
                raise DiscoveryError(f"{e.name} instance {e.instance}: {err}") from None
            pos += rec.size + width * len(e.bases)
    isize = pos - ioff
    ih: dict[str, Any] = dict(signature=am.DISCOVERY_TABLE_SIGNATURE, version=d.ip_version, size=isize, id=d.table_id,
                              num_dies=ndies, die_info=die_info)
    if d.ip_version >= 4:
        ih["base_addr_64_bit"] = int(d.base64)
    am.ip_discovery_header.pack_into(out, ioff, **ih)
    tables = [{"offset": ioff, "checksum": checksum(out[ioff:pos]), "size": isize}]

    pos = _align(pos)
    if d.gc_info is not None:
        st = GC_INFO[d.gc_info_version]  # type: ignore[index]
        _fit(pos + st.size, "gc_info")
        try:
            st.pack_into(out, pos, header=dict(table_id=am.GC_TABLE_ID, version_major=d.gc_info_version[0],  # type: ignore[index]
                                               version_minor=d.gc_info_version[1], size=st.size), **d.gc_info)  # type: ignore[index]
        except (KeyError, ValueError) as err:
            raise DiscoveryError(f"gc_info_v{d.gc_info_version[0]}_{d.gc_info_version[1]}: {err}") from None  # type: ignore[index]
        tables.append({"offset": pos, "checksum": checksum(out[pos:pos + st.size]), "size": st.size})
        pos = _align(pos + st.size)
    else:
        tables.append({"offset": 0, "checksum": 0, "size": 0})

    hsize = am.harvest_table.size
    if len(d.harvest) > 32:
        raise DiscoveryError(f"{len(d.harvest)} harvested IPs do not fit the harvest table's 32")
    _fit(pos + hsize, "harvest table")
    unknown = [n for n, _ in d.harvest if n not in HW_IDS]
    if unknown:
        raise DiscoveryError(f"harvest: unknown IP names {unknown}")
    am.harvest_table.pack_into(out, pos, header=dict(signature=am.HARVEST_TABLE_SIGNATURE, version=1),
                               list=[dict(hw_id=HW_IDS[n], number_instance=i) for n, i in d.harvest])
    tables.append({"offset": pos, "checksum": checksum(out[pos:pos + hsize]), "size": hsize})
    pos += hsize

    size = pos
    tables += [{"offset": 0, "checksum": 0, "size": 0}] * (len(TABLES) - len(tables))
    hv = dict(binary_signature=am.BINARY_SIGNATURE, version_major=d.binary_version[0],
              version_minor=d.binary_version[1], binary_size=size)
    if d.binary_version[0] == 2:
        binary_header_v2.pack_into(out, 0, num_tables=len(TABLES), **hv)
        for i, t in enumerate(tables):
            am.table_info.pack_into(out, binary_header_v2.size + 8 * i, **t)
    else:
        am.binary_header.pack_into(out, 0, table_list=tables, **hv)
    am.binary_header.pack_into(out, 0, binary_checksum=checksum(out[CHECKSUM_START:size]))
    return bytes(out[:size])


def _fit(end: int, what: str) -> None:
    if end > TMR_SIZE:
        raise DiscoveryError(f"the discovery binary does not fit its {TMR_SIZE}-byte region ({what} ends at {end:#x})")


# --- a target's table (for the simulated GPU) ------------------------------------------------------------
def for_target(target: Any, ip_version: int | None = None, base64: bool = False,
               binary_version: tuple[int, int] = (1, 0)) -> Discovery:
    """The discovery content of a supported target as the simulated GPU carries it: the IP blocks of
    `regmap.target_blocks` (versions from Target.ip, bases from the generation's base table, GC per XCC),
    the generation's LAYOUTS (or the header version given) and a GC info table from the target's counts."""
    ipver, gcver = LAYOUTS[target.gfx_version]
    ipver = ip_version if ip_version is not None else ipver
    gen = target.gen
    per_die = XCC_PER_DIE if target.xcc > 1 else target.xcc
    ips = []
    for b in target_blocks(target):
        name = HWID_OF_BLOCK.get(b.name, b.name)
        for inst, segs in enumerate(b.bases):
            die = inst // per_die if b.name == "GC" else 0
            ips.append(IPEntry(name, inst, b.version, segs, die))
    ips.sort(key=lambda e: e.die)                            # the order of the binary: die by die
    xcc = max(target.xcc, 1)
    ses = target.ses // xcc                                  # GC info describes one XCC
    cu_per_sa = math.ceil(target.cus / (target.ses * gen.arrays_per_se))
    common = dict(gc_num_se=ses, gc_wave_size=target.wave_size, gc_max_waves_per_simd=target.max_waves_per_simd,
                  gc_lds_size=target.lds_bytes >> 10)        # KiB
    if gcver[0] == 1:
        info = dict(common, gc_num_wgp0_per_sa=math.ceil(cu_per_sa / 2), gc_num_wgp1_per_sa=0,
                    gc_num_sa_per_se=gen.arrays_per_se)
    else:
        info = dict(common, gc_num_cu_per_sh=cu_per_sa, gc_num_sh_per_se=gen.arrays_per_se)
    return Discovery(tuple(ips), ipver, base64, binary_version, info, gcver,
                     num_dies=max(e.die for e in ips) + 1)


def with_harvest(d: Discovery, harvested: Iterable[tuple[str, int]]) -> Discovery:
    """The same content with these (IP name, instance) marked harvested."""
    return replace(d, harvest=tuple(harvested))
