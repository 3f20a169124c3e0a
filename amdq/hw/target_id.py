"""Target-id facts: how LLVM and ROCm spell an AMDGPU target, which processors a generic target covers,
and how a code object's ELF header records its target features. Declarative data only (hand-written, not
generated: the facts are tables of prose documents); `amdq.codeobj.targetid` parses and compares with it.

Sources:
- LLVM AMDGPUUsage, "Processors" (the processor table: target features each processor supports; gfx942 and
  gfx950 support xnack and sramecc, RDNA3/RDNA4 processors neither), "AMDGPU Generic Processors" table (which
  processors each generic target covers; generic targets need code object v6), "Generic Processor
  Versioning" (EF_AMDGPU_GENERIC_VERSION, 1..255; a generic code object runs on a member processor if its
  version is at least the version that member was added in), "ELF Header" (EF_AMDGPU_MACH values,
  EF_AMDGPU_FEATURE_XNACK_V4 / _SRAMECC_V4 encodings, EF_AMDGPU_GENERIC_VERSION at bits 31:24), "Target ID"
  and "Target Features" (a feature omitted is *any*, `+` on, `-` off).
- The version each member joined its generic target: every member listed in the generic table is supported
  from version 1 (the AMDGPU_GENERIC_MAP of the KFD-side loaders that check it; LLVM's GenericVersion values
  are all 1 so far).
- Clang "Clang Offload Bundler" documentation (bundle entry id `<kind>-<triple>[-<target-id>]`; the triple
  with or without its environment field; `hip` and `hipv4` compatible; `host` entries are the host's).
- LLVM `llvm/lib/TargetParser/Triple.cpp` (the architecture field: `amdgcn`, the legacy name, or
  `amdgpu<subarch>`: `amdgpu<major>.<minor><stepping>` names one processor, e.g. `amdgpu11.00` = gfx1100,
  `amdgpu9.42` = gfx942, `amdgpu9.0a` = gfx90a; a major-only or major.minor-family subarch names a family,
  e.g. `amdgpu11`, `amdgpu9.4`, `amdgpu12`), and the Comgr `parse-isa-name` tests (an ISA name may carry a
  non-empty environment such as `unknown` or `llvm`; a processor must agree with the subarch; a family
  subarch accepts its generic target and each member; the processor may be omitted after a processor
  subarch).
- Device modes: ROCm documentation ("Unified memory / XNACK": XNACK replay is off unless the process asks
  for it with HSA_XNACK=1) and the ISA names rocminfo reports on MI300X / MI355X
  (`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`, `...--gfx950:sramecc+:xnack-`: ECC on by default).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GenericTarget:
    name: str                          # LLVM processor name, e.g. "gfx11-generic"
    mach: int                          # EF_AMDGPU_MACH value
    subarch: str                       # the family subarch of the new-style triple architecture
    members: dict[str, int]            # processor -> lowest EF_AMDGPU_GENERIC_VERSION that runs on it
    features: tuple[str, ...]          # target-id features it supports (xnack, sramecc)


def _g(name: str, mach: int, subarch: str, members: str, features: tuple[str, ...] = ()) -> GenericTarget:
    return GenericTarget(name, mach, subarch, {m: 1 for m in members.split()}, features)


# AMDGPUUsage "AMDGPU Generic Processors" and the EF_AMDGPU_MACH table (gfx12-5-generic: EF_AMDGPU_MACH 0x05b,
# LLVM ELF.h). gfx940 and gfx941 were members of gfx9-4-generic until LLVM removed those processors.
GENERIC_TARGETS: dict[str, GenericTarget] = {g.name: g for g in (
    _g("gfx9-generic", 0x051, "amdgpu9", "gfx900 gfx902 gfx904 gfx906 gfx909 gfx90c", ("xnack",)),
    _g("gfx9-4-generic", 0x05F, "amdgpu9.4", "gfx940 gfx941 gfx942 gfx950", ("sramecc", "xnack")),
    _g("gfx10-1-generic", 0x052, "amdgpu10.1", "gfx1010 gfx1011 gfx1012 gfx1013", ("xnack",)),
    _g("gfx10-3-generic", 0x053, "amdgpu10.3", "gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 gfx1035 gfx1036"),
    _g("gfx11-generic", 0x054, "amdgpu11", "gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1153"),
    _g("gfx12-generic", 0x059, "amdgpu12", "gfx1200 gfx1201"),
    _g("gfx12-5-generic", 0x05B, "amdgpu12.5", "gfx1250 gfx1251", ("xnack",)),
)}
GENERIC_BY_MACH: dict[int, GenericTarget] = {g.mach: g for g in GENERIC_TARGETS.values()}

# Target-id features each supported processor accepts (AMDGPUUsage processor table, "Target Features" column,
# those controlled by -mcpu / --offload-arch). A processor not listed supports none.
PROCESSOR_FEATURES: dict[str, tuple[str, ...]] = {
    "gfx942": ("sramecc", "xnack"),
    "gfx950": ("sramecc", "xnack"),
}
FEATURES = ("sramecc", "xnack")        # the target-id features; canonical order is alphabetical

# The mode a device runs in when nothing asks otherwise: feature -> enabled (ROCm: XNACK off by default,
# SRAM ECC on on the Instinct parts). A feature the processor lacks is off.
DEVICE_MODES: dict[str, dict[str, bool]] = {
    "gfx942": {"sramecc": True, "xnack": False},
    "gfx950": {"sramecc": True, "xnack": False},
}

# e_flags (code object v4 and later): mask and value -> setting ("unsupported", "any", "off", "on").
EF_XNACK_V4 = 0x300
EF_SRAMECC_V4 = 0xC00
EF_FEATURE_V4: dict[str, tuple[int, dict[int, str]]] = {
    "xnack": (EF_XNACK_V4, {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"}),
    "sramecc": (EF_SRAMECC_V4, {0x000: "unsupported", 0x400: "any", 0x800: "off", 0xC00: "on"}),
}
EF_GENERIC_VERSION = 0xFF000000
EF_GENERIC_VERSION_SHIFT = 24

# Triple fields of AMDGPU code objects run under HSA.
TRIPLE_ARCH_LEGACY = "amdgcn"
TRIPLE_ARCH_PREFIX = "amdgpu"          # amdgpu<subarch>
TRIPLE_VENDOR = "amd"
TRIPLE_OS = "amdhsa"

# Offload kinds of bundle entries that hold AMDGPU code objects (hip and hipv4 are compatible), and the
# kind of the host's entry.
DEVICE_KINDS = ("hip", "hipv4", "openmp")
HOST_KIND = "host"
