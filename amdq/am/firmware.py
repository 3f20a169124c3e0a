"""GPU firmware: which files a target needs, finding and loading them (plain, .zst or .xz), parsing and
checking their headers per kind, and generated stand-in images for the simulated device.

Sources (facts, not code):
* header layouts: Linux amdgpu `amdgpu_ucode.h` (generated into `amdq.hw.am`);
* `amdgpu_ucode.c`: a file is valid when `size_bytes` equals its size (amdgpu_ucode_validate); where
  each loadable part lies (amdgpu_ucode_init_single_fw: RS64 code at `ucode_array_offset_bytes`, stack
  data at `data_offset_bytes`; MEC code = ucode minus the jump table at `jt_offset` dwords; IMU DRAM right
  after IMU IRAM; SDMA TH1 at `ctl_ucode_offset`; SDMA RS64 code at the array offset);
* `amdgpu_rlc.c` (RLC v2.1-v2.4 parts, offsets from the start of the file), `smu_v13_0.c`/`smu_v14_0.c`
  (SMC v2.0 ppt range, v2.1 soft-pptable entries, offsets from the start of the file);
* `amdgpu_psp.c`: SOS/TA v2 descriptors (start = ucode array + `offset_bytes`; count below
  UCODE_MAX_PSP_PACKAGING; v2.1 `psp_aux_fw_bin_index` splits the normal from the auxiliary set), TOC
  and ASD via `psp_firmware_header_v1_0`, psp_get_fw_type (the LOAD_IP_FW type of each part);
* file names requested: `gfx_v9_4_3.c`, `gfx_v11_0.c`, `gfx_v12_0.c`, `imu_v11_0.c`, `imu_v12_0.c`,
  `mes_v11_0.c`, `mes_v12_0.c`, `psp_v13_0.c`, `psp_v14_0.c`, `smu_v13_0.c`, `smu_v14_0.c`,
  `sdma_v4_4_2.c`, `sdma_v6_0.c`, `sdma_v7_0.c` (MODULE_FIRMWARE lists and *_init_microcode).

Environment: AMDQ_FIRMWARE_PATH (directories, os.pathsep-separated) is searched first, then
/lib/firmware/updates/amdgpu, /lib/firmware/amdgpu, then the cache scripts/fetch_firmware.sh fills
($AMDQ_FIRMWARE_CACHE or ~/.cache/amdq, + /firmware/amdgpu). AM_DEBUG>=1 logs each file loaded with its
SHA256 on stderr.
"""
from __future__ import annotations

import hashlib
import lzma
import os
import re
import struct
import sys
import zlib
from dataclasses import dataclass, field
from typing import Iterable

from ..errors import FirmwareError, FirmwareMissing
from ..hw import am
from ..hw.layout import Struct
from ..hw.targets import get_target

PACKAGE_HINT = ("install Debian's firmware-amd-graphics (component non-free-firmware) or your distribution's "
                "linux-firmware package, run scripts/fetch_firmware.sh, or set AMDQ_FIRMWARE_PATH to a "
                "directory holding the file")
SYSTEM_DIRS = ("/lib/firmware/updates/amdgpu", "/lib/firmware/amdgpu")     # the kernel firmware loader's
SUFFIXES = ("", ".zst", ".xz")          # the kernel's firmware loader accepts the same compressed forms

# ---------------------------------------------------------------------------------------------------------
# Which files each target needs.
# GC: per GC major version, (suffix, kind, required, who requests it). MES and TOC files are requested by
# the kernel only with MES enabled / RLC backdoor autoload; `sjt_mec` only under SR-IOV: optional here.
GC_FILES: dict[int, tuple[tuple[str, str, bool, str], ...]] = {
    9: (("mec", "cp", True, "gfx_v9_4_3.c"), ("rlc", "rlc", True, "gfx_v9_4_3.c"),
        ("sjt_mec", "cp", False, "gfx_v9_4_3.c (SR-IOV)")),
    11: (("pfp", "cp", True, "gfx_v11_0.c"), ("me", "cp", True, "gfx_v11_0.c"), ("mec", "cp", True, "gfx_v11_0.c"),
         ("rlc", "rlc", True, "gfx_v11_0.c"), ("imu", "imu", True, "imu_v11_0.c"),
         ("mes_2", "mes", False, "mes_v11_0.c (scheduler pipe; falls back to _mes)"),
         ("mes1", "mes", False, "mes_v11_0.c (KIQ pipe)"), ("toc", "toc", False, "gfx_v11_0.c (backdoor autoload)")),
    12: (("pfp", "cp", True, "gfx_v12_0.c"), ("me", "cp", True, "gfx_v12_0.c"), ("mec", "cp", True, "gfx_v12_0.c"),
         ("rlc", "rlc", True, "gfx_v12_0.c"), ("imu", "imu", True, "imu_v12_0.c"),
         ("uni_mes", "mes", False, "mes_v12_0.c (unified MES)"), ("mes", "mes", False, "mes_v12_0.c (scheduler pipe)"),
         ("mes1", "mes", False, "mes_v12_0.c (KIQ pipe)"), ("toc", "toc", False, "gfx_v12_0.c (backdoor autoload)")),
}
GC_FALLBACK = {"mes_2": ("mes",)}
# PSP (MP0): APUs take a TOC and a TA, discrete parts an SOS bundle and a TA (psp_v13_0.c, psp_v14_0.c).
PSP_APU_VERSIONS = frozenset({(13, 0, 4), (13, 0, 5), (13, 0, 8), (13, 0, 11), (14, 0, 0), (14, 0, 1), (14, 0, 4)})
# SMU (MP1): discrete parts whose PMFW the driver hands to PSP (smu_v13_0.c, smu_v14_0.c); smu_13_0_6.bin
# carries only soft PPTables (ucode size 0), so it is optional.
SMU_REQUIRED = frozenset({(13, 0, 0), (13, 0, 7), (13, 0, 10), (14, 0, 2), (14, 0, 3)})
SMU_OPTIONAL = frozenset({(13, 0, 6)})


@dataclass(frozen=True)
class FirmwareSpec:
    """One file a target needs: `file` ("gc_11_0_0_pfp.bin"), its kind, whether the boot needs it."""
    file: str
    kind: str
    required: bool
    source: str
    fallback: tuple[str, ...] = ()


def _prefix(ip: str, v: tuple[int, int, int]) -> str:
    return f"{ip}_{v[0]}_{v[1]}_{v[2]}"


def target_firmware(arch: str) -> tuple[FirmwareSpec, ...]:
    """The firmware files `arch` needs (and may use), derived from its IP versions."""
    t = get_target(arch)
    gc = _prefix("gc", t.ip["GC"])
    out = [FirmwareSpec(f"{gc}_{sfx}.bin", kind, req, src, tuple(f"{gc}_{f}.bin" for f in GC_FALLBACK.get(sfx, ())))
           for sfx, kind, req, src in GC_FILES[t.ip["GC"][0]]]
    mp0, mp1 = t.ip["MP0"], t.ip["MP1"]
    psp, src = _prefix("psp", mp0), f"psp_v{mp0[0]}_0.c"
    if mp0 in PSP_APU_VERSIONS:
        out.append(FirmwareSpec(f"{psp}_toc.bin", "toc", True, src))
    else:
        out.append(FirmwareSpec(f"{psp}_sos.bin", "psp_sos", True, src))
    out.append(FirmwareSpec(f"{psp}_ta.bin", "psp_ta", True, src))
    if mp1 in SMU_REQUIRED or mp1 in SMU_OPTIONAL:
        out.append(FirmwareSpec(f"{_prefix('smu', mp1)}.bin", "smu", mp1 in SMU_REQUIRED, f"smu_v{mp1[0]}_0.c"))
    sd = t.ip["SDMA"]
    out.append(FirmwareSpec(f"{_prefix('sdma', sd)}.bin", "sdma", True,
                            "sdma_v4_4_2.c" if sd[0] == 4 else f"sdma_v{sd[0]}_0.c"))
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------
# Header versions each kind accepts, and the structs they select (amdgpu_ucode.h).
HEADERS: dict[str, dict[tuple[int, int], Struct]] = {
    "cp": {(1, 0): am.gfx_firmware_header_v1_0, (2, 0): am.gfx_firmware_header_v2_0},
    "rlc": {(2, 0): am.rlc_firmware_header_v2_0, (2, 1): am.rlc_firmware_header_v2_1,
            (2, 2): am.rlc_firmware_header_v2_2, (2, 3): am.rlc_firmware_header_v2_3,
            (2, 4): am.rlc_firmware_header_v2_4},
    "imu": {(1, 0): am.imu_firmware_header_v1_0},
    "mes": {(1, 0): am.mes_firmware_header_v1_0},
    "psp_sos": {(2, 0): am.psp_firmware_header_v2_0, (2, 1): am.psp_firmware_header_v2_1},
    "psp_ta": {(2, 0): am.ta_firmware_header_v2_0},
    "toc": {(1, 0): am.psp_firmware_header_v1_0},
    "smu": {(1, 0): am.smc_firmware_header_v1_0, (2, 0): am.smc_firmware_header_v2_0,
            (2, 1): am.smc_firmware_header_v2_1},
    "sdma": {(1, 0): am.sdma_firmware_header_v1_0, (1, 1): am.sdma_firmware_header_v1_1,
             (2, 0): am.sdma_firmware_header_v2_0, (3, 0): am.sdma_firmware_header_v3_0},
}
# The common header's crc32 is CRC-32 (zlib) of bytes 32..size_bytes. Measured over Debian's
# firmware-amd-graphics 20250410: it holds for every file of these (kind, header version) pairs that a
# supported target uses (CP, IMU, MES, SDMA, SOS/TA v2, RLC v2.0), and for no RLC v2.1-v2.4, SMC/SMU or TOC
# file (their field covers something else), which are therefore not checked. The kernel never checks it.
CRC_CHECKED = frozenset({("cp", (1, 0)), ("cp", (2, 0)), ("imu", (1, 0)), ("mes", (1, 0)), ("rlc", (2, 0)),
                         ("sdma", (1, 0)), ("sdma", (1, 1)), ("sdma", (2, 0)), ("sdma", (3, 0)),
                         ("psp_sos", (2, 0)), ("psp_sos", (2, 1)), ("psp_ta", (2, 0))})
# UCODE_MAX_PSP_PACKAGING: ((sizeof(union amdgpu_firmware_header) - common header - 4) / descriptor) * 2.
MAX_PSP_PACKAGING = ((am.amdgpu_firmware_header.size - am.common_firmware_header.size - 4)
                     // am.psp_fw_bin_desc.size) * 2

# PSP SOS bundle components (enum psp_fw_type) -> (name, bootloader command that loads it, if any).
PSP_COMPONENTS: dict[int, tuple[str, int | None]] = {
    am.PSP_FW_TYPE_PSP_SOS: ("sos", am.PSP_BL__LOAD_SOSDRV),
    am.PSP_FW_TYPE_PSP_SYS_DRV: ("sys_drv", am.PSP_BL__LOAD_SYSDRV),
    am.PSP_FW_TYPE_PSP_KDB: ("kdb", am.PSP_BL__LOAD_KEY_DATABASE),
    am.PSP_FW_TYPE_PSP_TOC: ("toc", None),
    am.PSP_FW_TYPE_PSP_SPL: ("spl", am.PSP_BL__LOAD_TOS_SPL_TABLE),
    am.PSP_FW_TYPE_PSP_RL: ("rl", None),
    am.PSP_FW_TYPE_PSP_SOC_DRV: ("soc_drv", am.PSP_BL__LOAD_SOCDRV),
    am.PSP_FW_TYPE_PSP_INTF_DRV: ("intf_drv", am.PSP_BL__LOAD_INTFDRV),
    am.PSP_FW_TYPE_PSP_DBG_DRV: ("dbg_drv", am.PSP_BL__LOAD_DBGDRV),
    am.PSP_FW_TYPE_PSP_RAS_DRV: ("ras_drv", am.PSP_BL__LOAD_RASDRV),
    am.PSP_FW_TYPE_PSP_IPKEYMGR_DRV: ("ipkeymgr_drv", am.PSP_BL__LOAD_IPKEYMGRDRV),
}
# TA bundle components (enum ta_fw_type). XGMI_AUX (8) is newer than the header the facts were taken
# from (which ends the enum at MAX_INDEX = 8): amdgpu_psp.c is_ta_fw_applicable reads it from 13.0.6 TA files.
TA_FW_TYPE_PSP_XGMI_AUX = 8
TA_COMPONENTS: dict[int, str] = {
    am.TA_FW_TYPE_PSP_ASD: "asd", am.TA_FW_TYPE_PSP_XGMI: "xgmi", am.TA_FW_TYPE_PSP_RAS: "ras",
    am.TA_FW_TYPE_PSP_HDCP: "hdcp", am.TA_FW_TYPE_PSP_DTM: "dtm", am.TA_FW_TYPE_PSP_RAP: "rap",
    am.TA_FW_TYPE_PSP_SECUREDISPLAY: "securedisplay", TA_FW_TYPE_PSP_XGMI_AUX: "xgmi_aux",
}

# The kind of a file from its name.
_KIND_RE = [
    (re.compile(r"^gc_\d+_\d+_\d+_(?:pfp|me|mec|mec2|ce|sjt_mec)$"), "cp"),
    (re.compile(r"^gc_\d+_\d+_\d+_rlc(?:_\d+)?$"), "rlc"),
    (re.compile(r"^gc_\d+_\d+_\d+_imu$"), "imu"),
    (re.compile(r"^gc_\d+_\d+_\d+_(?:mes\w*|uni_mes)$"), "mes"),
    (re.compile(r"^psp_\d+_\d+_\d+_sos$"), "psp_sos"),
    (re.compile(r"^psp_\d+_\d+_\d+_ta$"), "psp_ta"),
    (re.compile(r"^(?:gc|psp)_\d+_\d+_\d+_toc$"), "toc"),
    (re.compile(r"^smu_\d+_\d+_\d+$"), "smu"),
    (re.compile(r"^sdma_\d+_\d+_\d+$"), "sdma"),
]


def kind_of(file: str) -> str:
    """The header kind of a firmware file from its name ("gc_11_0_0_pfp.bin" -> "cp")."""
    base = os.path.basename(file)
    for ext in (".zst", ".xz"):
        base = base.removesuffix(ext)
    base = base.removesuffix(".bin")
    for rx, kind in _KIND_RE:
        if rx.match(base):
            return kind
    raise FirmwareError(f"{file}: not a firmware file amdq knows the kind of (expected gc_*_{{pfp,me,mec,rlc,imu,"
                        f"mes*,toc}}, psp_*_{{sos,ta,toc}}, smu_*, sdma_*)")


# ---------------------------------------------------------------------------------------------------------
# Parsed objects.
@dataclass(frozen=True)
class Part:
    """A byte range of a firmware file the driver hands on: `fw_type` is its GFX_FW_TYPE for PSP LOAD_IP_FW
    (or, in an SOS/TA bundle, the psp_fw_type / ta_fw_type of the component)."""
    name: str
    offset: int
    size: int
    data: bytes = field(repr=False)
    fw_type: int | None = None
    version: int | None = None


@dataclass(frozen=True)
class Firmware:
    """A parsed, checked firmware file. `parts` are the loadable pieces by name."""
    file: str
    kind: str
    header_version: tuple[int, int]
    ip_version: tuple[int, int]
    ucode_version: int
    feature_version: int | None           # ucode_feature_version (the TOC/legacy header: sos.fw_version)
    size: int
    sha256: str
    header: dict = field(repr=False)
    parts: dict[str, Part] = field(repr=False)
    raw: bytes = field(repr=False)
    path: str | None = None                # where it was read from (None: bytes given, or generated)
    crc_checked: bool = False              # whether the header's crc32 was verified

    @property
    def standin(self) -> bool:
        """True for an image amdq generated (its payload carries the stand-in marker)."""
        off = self.header["ucode_array_offset_bytes"]
        return self.raw[off: off + len(STANDIN_MAGIC)] == STANDIN_MAGIC


@dataclass(frozen=True)
class CPFirmware(Firmware):
    """PFP/ME/MEC: v1 (`ucode` + jump table `jt`) or RS64 v2 (`ucode` instructions + `data` stack)."""
    rs64: bool = False
    ucode_start_addr: int | None = None


@dataclass(frozen=True)
class RLCFirmware(Firmware):
    """RLC: `rlc_g` plus, by header version, restore lists, IRAM/DRAM boot, RLC_P/RLC_V, tap delays."""


@dataclass(frozen=True)
class IMUFirmware(Firmware):
    """IMU: `iram` and `dram` images."""


@dataclass(frozen=True)
class MESFirmware(Firmware):
    """MES: `ucode` and `data`, with their start addresses."""
    uc_start_addr: int = 0
    data_start_addr: int = 0


@dataclass(frozen=True)
class SDMAFirmware(Firmware):
    """SDMA: v1 `ucode` (+ jump table), v2 `th0`/`th1` threads, v3 one RS64 `ucode`."""


@dataclass(frozen=True)
class SMUFirmware(Firmware):
    """SMC/PMFW: `ucode` (may be empty) and its PPTables (`pptable` for v2.0, `pptable_<id>` for v2.1)."""
    ucode_start_addr: int = 0
    pptables: dict[int, Part] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class PSPFirmware(Firmware):
    """SOS or TA bundle: `components` in file order (each a Part named by its type, `fw_type` the
    psp_fw_type / ta_fw_type); v2.1 SOS files add an auxiliary set (`aux_components`)."""
    components: tuple[Part, ...] = ()
    aux_components: tuple[Part, ...] = ()


@dataclass(frozen=True)
class TOCFirmware(Firmware):
    """A table of contents for PSP LOAD_TOC / RLC backdoor autoload: one `toc` part."""


_CLASSES = {"cp": CPFirmware, "rlc": RLCFirmware, "imu": IMUFirmware, "mes": MESFirmware, "sdma": SDMAFirmware,
            "smu": SMUFirmware, "psp_sos": PSPFirmware, "psp_ta": PSPFirmware, "toc": TOCFirmware}


# ---------------------------------------------------------------------------------------------------------
# Parsing and checking.
_BASE_RE = re.compile(r"^(?:header|v\d+_\d+)$")   # struct members that are the base header (inheritance)


def _flat(d: dict) -> dict:
    """A header dict with its base headers (v2_3 -> v2_2 -> ... -> header) flattened into one level; other
    nested structs (the legacy `sos` descriptor of a TOC header) stay dicts."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict) and _BASE_RE.match(k):
            out.update(_flat(v))
        else:
            out[k] = v
    return out


def _fixed_size(st: Struct) -> int:
    """Bytes of a header struct without its flexible descriptor array (SOS/TA v2)."""
    for name in ("psp_fw_bin", "ta_fw_bin"):
        if name in st:
            return st.offsetof(name)
    return st.size


class _Checker:
    def __init__(self, file: str, raw: bytes):
        self.file, self.raw, self.parts = file, raw, {}

    def fail(self, field: str, what: str) -> FirmwareError:
        return FirmwareError(f"firmware {self.file}: {field} {what}")

    def range(self, field: str, off: int, size: int) -> None:
        if off < 0 or size < 0 or off + size > len(self.raw):
            raise self.fail(field, f"range {off:#x}+{size:#x} runs past the end of the file ({len(self.raw)} bytes)")

    def part(self, name: str, field: str, off: int, size: int, fw_type: int | None = None,
             version: int | None = None) -> Part:
        self.range(field, off, size)
        p = Part(name, off, size, self.raw[off: off + size], fw_type, version)
        self.parts[name] = p
        return p


def parse_firmware(raw: bytes, file: str, kind: str | None = None, path: str | None = None) -> Firmware:
    """Parse and check one firmware image. Raises FirmwareError naming the file and the bad field."""
    raw = bytes(raw)
    kind = kind or kind_of(file)
    if kind not in HEADERS:
        raise FirmwareError(f"firmware {file}: unknown kind {kind!r} (known: {', '.join(HEADERS)})")
    c = _Checker(file, raw)
    if len(raw) < am.common_firmware_header.size:
        raise c.fail("common_firmware_header", f"needs {am.common_firmware_header.size} bytes, the file has {len(raw)}")
    h = am.common_firmware_header.unpack(raw)
    if h["size_bytes"] != len(raw):
        raise c.fail("size_bytes", f"is {h['size_bytes']} but the file has {len(raw)} bytes")
    hv = (h["header_version_major"], h["header_version_minor"])
    st = HEADERS[kind].get(hv)
    if st is None:
        known = ", ".join(f"{a}.{b}" for a, b in HEADERS[kind])
        raise c.fail("header_version_major/minor", f"{hv[0]}.{hv[1]} is not a {kind} header version amdq reads ({known})")
    aoff, usize = h["ucode_array_offset_bytes"], h["ucode_size_bytes"]
    fixed = _fixed_size(st)
    if h["header_size_bytes"] < fixed:
        raise c.fail("header_size_bytes", f"is {h['header_size_bytes']}, less than the {fixed} bytes of a "
                                          f"{kind} v{hv[0]}.{hv[1]} header")
    if h["header_size_bytes"] > aoff:
        raise c.fail("ucode_array_offset_bytes", f"{aoff:#x} points inside the header ({h['header_size_bytes']} bytes)")
    c.range("ucode_array_offset_bytes/ucode_size_bytes", aoff, usize)
    if len(raw) < st.size:
        raise c.fail(st.name, f"needs {st.size} bytes, the file has {len(raw)}")
    f = _flat(st.unpack(raw))
    crc = (kind, hv) in CRC_CHECKED
    if crc and zlib.crc32(raw[32:]) != h["crc32"]:
        raise c.fail("crc32", f"is {h['crc32']:#010x} but bytes 32..{len(raw)} give {zlib.crc32(raw[32:]):#010x}")
    extra = _PARSERS[kind](c, f, hv, file)
    return _CLASSES[kind](
        file=os.path.basename(file), kind=kind, header_version=hv,
        ip_version=(h["ip_version_major"], h["ip_version_minor"]), ucode_version=h["ucode_version"],
        feature_version=f["ucode_feature_version"] if "ucode_feature_version" in f else
        (f["sos"]["fw_version"] if "sos" in f else None), size=len(raw), sha256=hashlib.sha256(raw).hexdigest(),
        header=f, parts=dict(c.parts), raw=raw, path=path, crc_checked=crc, **extra)


def _parse_cp(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    aoff, usize = f["ucode_array_offset_bytes"], f["ucode_size_bytes"]
    engine = re.sub(r"^gc_\d+_\d+_\d+_", "", os.path.basename(file).split(".")[0]).removeprefix("sjt_")
    if hv == (2, 0):
        if f["ucode_offset_bytes"] != aoff:
            raise c.fail("ucode_offset_bytes", f"{f['ucode_offset_bytes']:#x} differs from ucode_array_offset_bytes {aoff:#x}")
        types = {"pfp": (am.GFX_FW_TYPE_RS64_PFP, am.GFX_FW_TYPE_RS64_PFP_P0_STACK),
                 "me": (am.GFX_FW_TYPE_RS64_ME, am.GFX_FW_TYPE_RS64_ME_P0_STACK),
                 "mec": (am.GFX_FW_TYPE_RS64_MEC, am.GFX_FW_TYPE_RS64_MEC_P0_STACK)}.get(engine, (None, None))
        u = c.part("ucode", "ucode_size_bytes (v2)", aoff, f["ucode_size_bytes"], types[0])
        d = c.part("data", "data_offset_bytes/data_size_bytes", f["data_offset_bytes"], f["data_size_bytes"], types[1])
        if u.offset < d.offset < u.offset + u.size:
            raise c.fail("data_offset_bytes", f"{d.offset:#x} overlaps the instructions ({u.offset:#x}+{u.size:#x})")
        return {"rs64": True, "ucode_start_addr": f["ucode_start_addr_lo"] | f["ucode_start_addr_hi"] << 32}
    jt_off, jt_size = f["jt_offset"] * 4, f["jt_size"] * 4
    if jt_size and jt_off + jt_size > usize:
        raise c.fail("jt_offset/jt_size", f"jump table {jt_off:#x}+{jt_size:#x} runs past the ucode ({usize:#x} bytes)")
    t = {"pfp": am.GFX_FW_TYPE_CP_PFP, "me": am.GFX_FW_TYPE_CP_ME, "mec": am.GFX_FW_TYPE_CP_MEC,
         "mec2": am.GFX_FW_TYPE_CP_MEC, "ce": am.GFX_FW_TYPE_CP_CE}.get(engine)
    if engine.startswith("mec"):     # MEC: the jump table is loaded on its own (CP_MEC1 / CP_MEC1_JT)
        c.part("ucode", "ucode_size_bytes - jt_size", aoff, usize - jt_size, t)
        if jt_size:
            c.part("jt", "jt_offset/jt_size", aoff + jt_off, jt_size, am.GFX_FW_TYPE_CP_MEC_ME1)
    else:                            # PFP/ME/CE: the whole ucode, jump table included
        c.part("ucode", "ucode_size_bytes", aoff, usize, t)
    return {"rs64": False}


# RLC parts after rlc_g: (name, size field, offset field, GFX_FW_TYPE, minimum header minor version).
RLC_PARTS = (
    ("restore_list_cntl", "save_restore_list_cntl_size_bytes", "save_restore_list_cntl_offset_bytes",
     am.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_CNTL, 1),
    ("restore_list_gpm", "save_restore_list_gpm_size_bytes", "save_restore_list_gpm_offset_bytes",
     am.GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM, 1),
    ("restore_list_srm", "save_restore_list_srm_size_bytes", "save_restore_list_srm_offset_bytes",
     am.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM, 1),
    ("iram", "rlc_iram_ucode_size_bytes", "rlc_iram_ucode_offset_bytes", am.GFX_FW_TYPE_RLC_IRAM, 2),
    ("dram", "rlc_dram_ucode_size_bytes", "rlc_dram_ucode_offset_bytes", am.GFX_FW_TYPE_RLC_DRAM_BOOT, 2),
    ("rlcp", "rlcp_ucode_size_bytes", "rlcp_ucode_offset_bytes", am.GFX_FW_TYPE_RLC_P, 3),
    ("rlcv", "rlcv_ucode_size_bytes", "rlcv_ucode_offset_bytes", am.GFX_FW_TYPE_RLC_V, 3),
    ("global_tap_delays", "global_tap_delays_ucode_size_bytes", "global_tap_delays_ucode_offset_bytes",
     am.GFX_FW_TYPE_GLOBAL_TAP_DELAYS, 4),
    ("se0_tap_delays", "se0_tap_delays_ucode_size_bytes", "se0_tap_delays_ucode_offset_bytes", am.GFX_FW_TYPE_SE0_TAP_DELAYS, 4),
    ("se1_tap_delays", "se1_tap_delays_ucode_size_bytes", "se1_tap_delays_ucode_offset_bytes", am.GFX_FW_TYPE_SE1_TAP_DELAYS, 4),
    ("se2_tap_delays", "se2_tap_delays_ucode_size_bytes", "se2_tap_delays_ucode_offset_bytes", am.GFX_FW_TYPE_SE2_TAP_DELAYS, 4),
    ("se3_tap_delays", "se3_tap_delays_ucode_size_bytes", "se3_tap_delays_ucode_offset_bytes", am.GFX_FW_TYPE_SE3_TAP_DELAYS, 4),
)


def _parse_rlc(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    c.part("rlc_g", "ucode_size_bytes", f["ucode_array_offset_bytes"], f["ucode_size_bytes"], am.GFX_FW_TYPE_RLC_G,
           f["ucode_version"])
    c.range("reg_list_format_array_offset_bytes/size", f["reg_list_format_array_offset_bytes"], f["reg_list_format_size_bytes"])
    c.range("reg_list_array_offset_bytes/size", f["reg_list_array_offset_bytes"], f["reg_list_size_bytes"])
    for name, sz, off, t, minor in RLC_PARTS:
        if hv[1] >= minor and f[sz]:
            c.part(name, f"{off}/{sz}", f[off], f[sz], t)
    return {}


def _parse_imu(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    aoff, isz, dsz = f["ucode_array_offset_bytes"], f["imu_iram_ucode_size_bytes"], f["imu_dram_ucode_size_bytes"]
    if f["imu_dram_ucode_offset_bytes"] != f["imu_iram_ucode_offset_bytes"] + isz:
        raise c.fail("imu_dram_ucode_offset_bytes", f"{f['imu_dram_ucode_offset_bytes']:#x} does not follow the IRAM "
                                                    f"image ({f['imu_iram_ucode_offset_bytes']:#x}+{isz:#x})")
    if isz + dsz > f["ucode_size_bytes"]:
        raise c.fail("imu_iram/dram_ucode_size_bytes", f"{isz:#x}+{dsz:#x} exceed ucode_size_bytes {f['ucode_size_bytes']:#x}")
    c.part("iram", "imu_iram_ucode_size_bytes", aoff + f["imu_iram_ucode_offset_bytes"], isz, am.GFX_FW_TYPE_IMU_I)
    c.part("dram", "imu_dram_ucode_size_bytes", aoff + f["imu_dram_ucode_offset_bytes"], dsz, am.GFX_FW_TYPE_IMU_D)
    return {}


def _parse_mes(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    kiq = os.path.basename(file).split(".")[0].endswith("mes1")
    c.part("ucode", "mes_ucode_offset_bytes/size", f["mes_ucode_offset_bytes"], f["mes_ucode_size_bytes"],
           am.GFX_FW_TYPE_CP_MES_KIQ if kiq else am.GFX_FW_TYPE_CP_MES, f["mes_ucode_version"])
    c.part("data", "mes_ucode_data_offset_bytes/size", f["mes_ucode_data_offset_bytes"], f["mes_ucode_data_size_bytes"],
           am.GFX_FW_TYPE_MES_KIQ_STACK if kiq else am.GFX_FW_TYPE_MES_STACK, f["mes_ucode_data_version"])
    return {"uc_start_addr": f["mes_uc_start_addr_lo"] | f["mes_uc_start_addr_hi"] << 32,
            "data_start_addr": f["mes_data_start_addr_lo"] | f["mes_data_start_addr_hi"] << 32}


def _parse_sdma(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    aoff, usize = f["ucode_array_offset_bytes"], f["ucode_size_bytes"]
    if hv[0] == 1:
        u = c.part("ucode", "ucode_size_bytes", aoff, usize, am.GFX_FW_TYPE_SDMA0)
        if f["jt_offset"] * 4 + f["jt_size"] * 4 > u.size:
            raise c.fail("jt_offset/jt_size", f"jump table runs past the ucode ({u.size:#x} bytes)")
    elif hv[0] == 2:
        th0 = c.part("th0", "ctx_ucode_size_bytes", aoff, f["ctx_ucode_size_bytes"], am.GFX_FW_TYPE_SDMA_UCODE_TH0)
        th1 = c.part("th1", "ctl_ucode_offset/ctl_ucode_size_bytes", f["ctl_ucode_offset"], f["ctl_ucode_size_bytes"],
                     am.GFX_FW_TYPE_SDMA_UCODE_TH1)
        for p, jo, js in ((th0, "ctx_jt_offset", "ctx_jt_size"), (th1, "ctl_jt_offset", "ctl_jt_size")):
            if f[js] and (f[jo] + f[js]) * 4 > p.size:
                raise c.fail(f"{jo}/{js}", f"jump table runs past the {p.name} ucode ({p.size:#x} bytes)")
        if th0.offset + th0.size > th1.offset and th1.size:
            raise c.fail("ctl_ucode_offset", f"{th1.offset:#x} overlaps thread 0 ({th0.offset:#x}+{th0.size:#x})")
    else:
        if f["ucode_offset_bytes"] != aoff:
            raise c.fail("ucode_offset_bytes", f"{f['ucode_offset_bytes']:#x} differs from ucode_array_offset_bytes {aoff:#x}")
        c.part("ucode", "ucode_size_bytes (v3)", aoff, f["ucode_size_bytes"], am.GFX_FW_TYPE_SDMA_UCODE_TH0)
    return {}


def _parse_smu(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    c.part("ucode", "ucode_size_bytes", f["ucode_array_offset_bytes"], f["ucode_size_bytes"], am.GFX_FW_TYPE_SMU,
           f["ucode_version"])
    tables: dict[int, Part] = {}
    if hv == (2, 0) and f["ppt_size_bytes"]:
        tables[0] = c.part("pptable", "ppt_offset_bytes/ppt_size_bytes", f["ppt_offset_bytes"], f["ppt_size_bytes"],
                           am.GFX_FW_TYPE_PPTABLE)
    elif hv == (2, 1):
        n, eoff = f["pptable_count"], f["pptable_entry_offset"]
        es = am.smc_soft_pptable_entry.size
        c.range("pptable_entry_offset/pptable_count", eoff, n * es)
        for i in range(n):
            e = am.smc_soft_pptable_entry.unpack(c.raw, eoff + i * es)
            if e["id"] in tables:
                raise c.fail(f"pptable entry {i} id", f"{e['id']} appears twice")
            tables[e["id"]] = c.part(f"pptable_{e['id']}", f"pptable entry {i} ppt_offset_bytes/ppt_size_bytes",
                                     e["ppt_offset_bytes"], e["ppt_size_bytes"], am.GFX_FW_TYPE_PPTABLE)
    return {"ucode_start_addr": f["ucode_start_addr"], "pptables": tables}


def _parse_psp(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    sos = "psp_fw_bin_count" in f
    count = f["psp_fw_bin_count"] if sos else f["ta_fw_bin_count"]
    cname = "psp_fw_bin_count" if sos else "ta_fw_bin_count"
    if count >= MAX_PSP_PACKAGING:
        raise c.fail(cname, f"{count} reaches the limit of {MAX_PSP_PACKAGING} packed binaries")
    base = 40 if hv == (2, 1) else 36
    aoff, usize = f["ucode_array_offset_bytes"], f["ucode_size_bytes"]
    if base + count * am.psp_fw_bin_desc.size > aoff:
        raise c.fail(cname, f"{count} descriptors from {base:#x} run into the payload at {aoff:#x}")
    names = {t: n for t, (n, _) in PSP_COMPONENTS.items()} if sos else TA_COMPONENTS
    parts = []
    for i in range(count):
        d = am.psp_fw_bin_desc.unpack(c.raw, base + i * am.psp_fw_bin_desc.size)
        if d["offset_bytes"] + d["size_bytes"] > usize:
            raise c.fail(f"descriptor {i} offset_bytes/size_bytes",
                         f"{d['offset_bytes']:#x}+{d['size_bytes']:#x} runs past the payload ({usize:#x} bytes)")
        name = names.get(d["fw_type"], f"unknown_{d['fw_type']}")
        c.range(f"descriptor {i}", aoff + d["offset_bytes"], d["size_bytes"])
        parts.append(Part(name, aoff + d["offset_bytes"], d["size_bytes"],
                          c.raw[aoff + d["offset_bytes"]: aoff + d["offset_bytes"] + d["size_bytes"]],
                          d["fw_type"], d["fw_version"]))
    aux = f.get("psp_aux_fw_bin_index", count) if hv == (2, 1) else count
    if aux > count:
        raise c.fail("psp_aux_fw_bin_index", f"{aux} is past the {count} descriptors")
    for p in parts[:aux]:
        c.parts.setdefault(p.name, p)
    return {"components": tuple(parts[:aux]), "aux_components": tuple(parts[aux:])}


def _parse_toc(c: _Checker, f: dict, hv: tuple[int, int], file: str) -> dict:
    c.part("toc", "ucode_size_bytes", f["ucode_array_offset_bytes"], f["ucode_size_bytes"], am.GFX_FW_TYPE_TOC,
           f["ucode_version"])
    return {}


_PARSERS = {"cp": _parse_cp, "rlc": _parse_rlc, "imu": _parse_imu, "mes": _parse_mes, "sdma": _parse_sdma,
            "smu": _parse_smu, "psp_sos": _parse_psp, "psp_ta": _parse_psp, "toc": _parse_toc}


# ---------------------------------------------------------------------------------------------------------
# Finding and loading files.
def search_dirs() -> list[str]:
    """Directories searched for firmware, in order."""
    dirs = [d for d in os.environ.get("AMDQ_FIRMWARE_PATH", "").split(os.pathsep) if d]
    cache = os.environ.get("AMDQ_FIRMWARE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "amdq")
    dirs += [*SYSTEM_DIRS, os.path.join(cache, "firmware", "amdgpu")]
    return dirs


def find_firmware(file: str, dirs: Iterable[str] | None = None) -> str | None:
    """The path of `file` (plain, .zst or .xz) in the first directory holding it, or None."""
    for d in (search_dirs() if dirs is None else dirs):
        for ext in SUFFIXES:
            p = os.path.join(d, file + ext)
            if os.path.isfile(p):
                return p
    return None


def _decompress(path: str, data: bytes) -> bytes:
    try:
        if path.endswith(".zst"):
            try:
                import zstandard
            except ImportError as e:
                raise FirmwareError(f"firmware {path}: reading .zst files needs the zstandard package "
                                    f"(pip install zstandard)") from e
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        if path.endswith(".xz"):
            return lzma.decompress(data)
    except FirmwareError:
        raise
    except Exception as e:   # the codecs raise their own error types on a damaged stream
        raise FirmwareError(f"firmware {path}: not a valid {path.rsplit('.', 1)[1]} stream ({e})") from e
    return data


def _debug_level() -> int:
    try:
        return int(os.environ.get("AM_DEBUG", "0") or 0)
    except ValueError:
        return 0


def _log_loaded(fw: Firmware, origin: str) -> None:
    if _debug_level() >= 1:
        print(f"am: firmware {fw.file}: {origin} ({fw.size} bytes, {fw.kind} v{fw.header_version[0]}."
              f"{fw.header_version[1]}) sha256 {fw.sha256}", file=sys.stderr)


def load_firmware(file: str, dirs: Iterable[str] | None = None, fallback: Iterable[str] = ()) -> Firmware:
    """Find, read, decompress, parse and check one firmware file (trying `fallback` names next).

    Raises FirmwareMissing naming the searched directories and the package, FirmwareError when malformed."""
    dirs = list(search_dirs() if dirs is None else dirs)
    for name in (file, *fallback):
        path = find_firmware(name, dirs)
        if path is None:
            continue
        with open(path, "rb") as fh:
            raw = _decompress(path, fh.read())
        fw = parse_firmware(raw, name, path=path)
        _log_loaded(fw, path)
        return fw
    names = " or ".join((file, *fallback))
    raise FirmwareMissing(f"firmware {names} not found in {', '.join(dirs) or '(no directory)'} (plain, .zst or .xz): "
                          f"{PACKAGE_HINT}")


# ---------------------------------------------------------------------------------------------------------
# Generated stand-in images: valid headers of the right kind, payloads filled with a marker naming the file
# and the part. The simulated device accepts them by header; real hardware would reject them (unsigned).
STANDIN_MAGIC = b"AMDQ STAND-IN "
STANDIN_UCODE_VERSION = 0x414D4451         # "AMDQ" as a little-endian u32
_ALIGN = 256                               # payload alignment of the shipped files
_PART = 2048                               # bytes of each generated part


def _marker(file: str, part: str, size: int) -> bytes:
    unit = STANDIN_MAGIC + f"{file} {part} ".encode()
    return (unit * (size // len(unit) + 1))[:size]


def _ip_of(file: str) -> tuple[int, int, int]:
    m = re.match(r"^[a-z]+_(\d+)_(\d+)_(\d+)", os.path.basename(file))
    if not m:
        raise FirmwareError(f"{file}: no IP version in the name")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


# Header version of each stand-in kind: as the shipped files of that generation (major IP version).
def _standin_version(kind: str, ip: tuple[int, int, int]) -> tuple[int, int]:
    if kind == "cp":
        return (1, 0) if ip[0] == 9 or ip[:2] == (11, 5) else (2, 0)   # GC 11.5 APUs ship F32 (v1) CP files
    if kind == "rlc":
        return {9: (2, 1), 11: (2, 3), 12: (2, 2)}.get(ip[0], (2, 1))
    if kind == "sdma":
        return {4: (1, 0), 5: (2, 0), 6: (2, 0), 7: (3, 0)}[ip[0]]
    if kind == "smu":
        return (2, 0) if ip[0] >= 14 else (2, 1)
    if kind == "psp_sos":
        return (2, 0)
    return next(iter(HEADERS[kind]))


_SOS_STANDIN = (am.PSP_FW_TYPE_PSP_KDB, am.PSP_FW_TYPE_PSP_SPL, am.PSP_FW_TYPE_PSP_SYS_DRV,
                am.PSP_FW_TYPE_PSP_SOC_DRV, am.PSP_FW_TYPE_PSP_INTF_DRV, am.PSP_FW_TYPE_PSP_DBG_DRV,
                am.PSP_FW_TYPE_PSP_RAS_DRV, am.PSP_FW_TYPE_PSP_SOS)
# The components of the shipped SOS bundles (firmware-amd-graphics 20250410), so that a stand-in boots the
# way the real file does (a TOC where the PSP sizes the TMR from it, the register list, no driver the
# bundle lacks); other MP0 versions get _SOS_STANDIN.
_SOS_STANDIN_BY_IP = {
    (13, 0, 0): (am.PSP_FW_TYPE_PSP_SYS_DRV, am.PSP_FW_TYPE_PSP_SOS, am.PSP_FW_TYPE_PSP_TOC, am.PSP_FW_TYPE_PSP_KDB,
                 am.PSP_FW_TYPE_PSP_SPL, am.PSP_FW_TYPE_PSP_RL),
    (13, 0, 6): (am.PSP_FW_TYPE_PSP_SYS_DRV, am.PSP_FW_TYPE_PSP_SOS, am.PSP_FW_TYPE_PSP_KDB,
                 am.PSP_FW_TYPE_PSP_SOC_DRV, am.PSP_FW_TYPE_PSP_INTF_DRV, am.PSP_FW_TYPE_PSP_DBG_DRV,
                 am.PSP_FW_TYPE_PSP_RAS_DRV, am.PSP_FW_TYPE_PSP_RL),
    (14, 0, 3): (am.PSP_FW_TYPE_PSP_KDB, am.PSP_FW_TYPE_PSP_SYS_DRV, am.PSP_FW_TYPE_PSP_SOS,
                 am.PSP_FW_TYPE_PSP_SOC_DRV, am.PSP_FW_TYPE_PSP_INTF_DRV, am.PSP_FW_TYPE_PSP_DBG_DRV,
                 am.PSP_FW_TYPE_PSP_TOC, am.PSP_FW_TYPE_PSP_IPKEYMGR_DRV, am.PSP_FW_TYPE_PSP_SPL,
                 am.PSP_FW_TYPE_PSP_RAS_DRV, am.PSP_FW_TYPE_PSP_RL),
}
_TA_STANDIN = (am.TA_FW_TYPE_PSP_XGMI, am.TA_FW_TYPE_PSP_RAS, am.TA_FW_TYPE_PSP_HDCP, am.TA_FW_TYPE_PSP_DTM)


def standin_image(file: str, kind: str | None = None) -> bytes:
    """A generated image for `file` with a valid header of its kind and marked payloads (see STANDIN_MAGIC)."""
    kind = kind or kind_of(file)
    ip = _ip_of(file)
    hv = _standin_version(kind, ip)
    st = HEADERS[kind][hv]
    name = os.path.basename(file)
    buf = bytearray(_ALIGN)
    laid: dict[str, tuple[int, int]] = {}

    def put(part: str, size: int = _PART, align: bool = True) -> tuple[int, int]:
        if align and len(buf) % _ALIGN:
            buf.extend(bytes(_ALIGN - len(buf) % _ALIGN))
        off = len(buf)
        buf.extend(_marker(name, part, size))
        laid[part] = (off, size)
        return off, size

    hf: dict = {"ucode_feature_version": 1} if "ucode_feature_version" in _flat_fields(st) else {}
    aoff = _ALIGN
    if kind == "cp" and hv == (2, 0):
        u, d = put("ucode"), put("data")
        hf.update(ucode_size_bytes=u[1], ucode_offset_bytes=u[0], data_size_bytes=d[1], data_offset_bytes=d[0],
                  ucode_start_addr_lo=0x3000, ucode_start_addr_hi=0x70000)
        usize = len(buf) - aoff
    elif kind == "cp":
        u, j = put("ucode"), put("jt", 256, align=False)
        hf.update(jt_offset=(j[0] - aoff) // 4, jt_size=j[1] // 4)
        usize = u[1] + j[1]
    elif kind == "rlc":
        g = put("rlc_g")
        usize = g[1]
        for pname, sz, off, _, minor in RLC_PARTS:
            if hv[1] >= minor and not pname.endswith("tap_delays"):
                o, s = put(pname, 512)
                hf[sz], hf[off] = s, o
        hf.update(reg_list_format_array_offset_bytes=len(buf), reg_list_array_offset_bytes=len(buf))
    elif kind == "imu":
        i, d = put("iram"), put("dram", align=False)
        hf.update(imu_iram_ucode_size_bytes=i[1], imu_iram_ucode_offset_bytes=0,
                  imu_dram_ucode_size_bytes=d[1], imu_dram_ucode_offset_bytes=i[1])
        usize = i[1] + d[1]
    elif kind == "mes":
        u, d = put("ucode"), put("data")
        hf.update(mes_ucode_version=1, mes_ucode_size_bytes=u[1], mes_ucode_offset_bytes=u[0], mes_ucode_data_version=1,
                  mes_ucode_data_size_bytes=d[1], mes_ucode_data_offset_bytes=d[0])
        usize = len(buf) - aoff
    elif kind == "sdma" and hv[0] == 1:
        u = put("ucode")
        hf.update(jt_offset=(u[1] - 256) // 4, jt_size=64)
        usize = u[1]
    elif kind == "sdma" and hv[0] == 2:
        t0, t1 = put("th0"), put("th1")
        hf.update(ctx_ucode_size_bytes=t0[1], ctx_jt_offset=(t0[1] - 256) // 4, ctx_jt_size=64,
                  ctl_ucode_offset=t1[0], ctl_ucode_size_bytes=t1[1], ctl_jt_offset=(t1[1] - 256) // 4, ctl_jt_size=0)
        usize = len(buf) - aoff
    elif kind == "sdma":
        u = put("ucode")
        hf.update(ucode_offset_bytes=u[0], ucode_size_bytes=u[1])
        usize = u[1]
    elif kind == "smu":
        u = put("ucode")
        usize = u[1]
        hf["ucode_start_addr"] = 0x20000
        if hv == (2, 0):
            p = put("pptable", 1024)
            hf.update(ppt_offset_bytes=p[0], ppt_size_bytes=p[1])
        else:
            ids = (1, 2)
            eoff = len(buf)
            buf.extend(bytes(am.smc_soft_pptable_entry.size * len(ids)))
            entries = [(i, *put(f"pptable_{i}", 1024)) for i in ids]
            for k, (i, o, s) in enumerate(entries):
                am.smc_soft_pptable_entry.pack_into(buf, eoff + k * am.smc_soft_pptable_entry.size,
                                                    id=i, ppt_offset_bytes=o, ppt_size_bytes=s)
            hf.update(pptable_count=len(ids), pptable_entry_offset=eoff)
    elif kind in ("psp_sos", "psp_ta"):
        types = _SOS_STANDIN_BY_IP.get(ip, _SOS_STANDIN) if kind == "psp_sos" else _TA_STANDIN
        names = {t: n for t, (n, _) in PSP_COMPONENTS.items()} if kind == "psp_sos" else TA_COMPONENTS
        descs = []
        for t in types:
            o, s = put(names[t], 1024, align=False)
            descs.append(dict(fw_type=t, fw_version=STANDIN_UCODE_VERSION, offset_bytes=o - aoff, size_bytes=s))
        for k, d in enumerate(descs):
            am.psp_fw_bin_desc.pack_into(buf, 36 + 16 * k, **d)
        hf["psp_fw_bin_count" if kind == "psp_sos" else "ta_fw_bin_count"] = len(descs)
        usize = len(buf) - aoff
    else:   # toc
        u = put("toc", 1024)
        usize = u[1]
    common = dict(size_bytes=len(buf), header_size_bytes=_fixed_size(st), header_version_major=hv[0],
                  header_version_minor=hv[1], ip_version_major=ip[0], ip_version_minor=ip[1],
                  ucode_version=STANDIN_UCODE_VERSION, ucode_size_bytes=usize, ucode_array_offset_bytes=aoff)
    _pack_header(buf, st, {**common, **hf})
    struct.pack_into("<I", buf, 28, zlib.crc32(bytes(buf[32:])))
    return bytes(buf)


def _flat_fields(st: Struct) -> set[str]:
    out: set[str] = set()
    for n, (_, typ) in st.fields.items():
        out |= _flat_fields(typ) if isinstance(typ, Struct) and _BASE_RE.match(n) else {n}
    return out


def _pack_header(buf: bytearray, st: Struct, values: dict, base: int = 0) -> None:
    """Write flat field values into a nested header struct (the inverse of _flat for the fields given)."""
    for n, (off, typ) in st.fields.items():
        if isinstance(typ, Struct) and _BASE_RE.match(n):
            _pack_header(buf, typ, values, base + off)
        elif n in values:
            st.pack_into(buf, base, **{n: values[n]})


def standin_firmware(file: str) -> Firmware:
    """The parsed stand-in image for `file` (logged like a loaded file at AM_DEBUG>=1)."""
    fw = parse_firmware(standin_image(file), file)
    _log_loaded(fw, "generated stand-in")
    return fw


_announced: set[str] = set()


def firmware_for(arch: str, standin: bool | None = None, dirs: Iterable[str] | None = None) -> dict[str, Firmware]:
    """The firmware of `arch` by file name.

    standin=False: the real files only (a missing required one raises FirmwareMissing; real hardware);
    standin=None: the real files where present, generated stand-ins for the missing required ones, said
    once per target on stderr (the simulated device); standin=True: stand-ins for all required files.
    Optional files are included when present."""
    dirs = list(search_dirs() if dirs is None else dirs)
    out: dict[str, Firmware] = {}
    missing: list[str] = []
    for spec in target_firmware(arch):
        if standin is not True:
            try:
                out[spec.file] = load_firmware(spec.file, dirs, spec.fallback)
                continue
            except FirmwareMissing:
                if standin is False and spec.required:
                    raise
        if spec.required:
            missing.append(spec.file)
            out[spec.file] = standin_firmware(spec.file)
    if missing and standin is None and arch not in _announced:
        _announced.add(arch)
        print(f"amdq: {len(missing)} firmware file(s) for {arch} not found in {', '.join(dirs)} "
              f"({', '.join(missing)}); the simulated device uses generated stand-in images for them "
              f"(real files: {PACKAGE_HINT})", file=sys.stderr)
    return out
