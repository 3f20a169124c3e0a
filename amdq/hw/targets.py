"""Supported GPU targets and the per-target facts the runtime and the simulator need.

Sources: LLVM AMDGPUUsage (processor table, EF_AMDGPU_MACH values, wavefront sizes, LDS sizes),
Linux amdgpu IP discovery (IP versions seen on the reference boards: amdgpu_discovery.c), the board
table amdq.hw.boards (the reference board, its CU and shader-engine counts and VRAM size, with its sources), Linux
`*_sdma_pkt_open.h` (COPY_LINEAR count width).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UnsupportedCodeObjectTarget, UnsupportedTarget
from .boards import BOARDS
from .aql_tables import BUF_DATA_FORMAT_32, BUF_FORMAT_32_UINT, BUF_NUM_FORMAT_UINT

IPVersion = tuple[int, int, int]


@dataclass(frozen=True)
class Generation:
    """What varies by GPU generation (GC major version), in one place for the driver and the simulator.

    Sources: LLVM AMDGPUUsage (scratch and VGPR granules, wave32, kernel-descriptor layouts), Linux
    amdgpu `soc15d.h`/`nvd.h` (PM4 forms: ACQUIRE_MEM and RELEASE_MEM cache fields), `gfx_v9_4_3.c` /
    `gfx_v11_0.c` (COMPUTE_TMPRING_SIZE.WAVESIZE units), the register headers (SQ_BUF_RSRC_WORD3).
    """
    gfx: int                       # 9 (GFX9/CDNA), 11 (GFX11/RDNA3), 12 (GFX12/RDNA4)
    isa: str                       # the generation's first ISA family ("cdna3", "rdna3", "rdna4"); a target's own is Target.isa
    bases: str                     # register-base table of amdq.hw.regs: "vega" or "navi"
    scratch_unit: int              # bytes per COMPUTE_TMPRING_SIZE.WAVESIZE step
    wave32: bool                   # DISPATCH_INITIATOR.CS_W32_EN exists (wave32 dispatches)
    kd: int                        # key of the kernel-descriptor bit tables in amdq.hw.kd
    arrays_per_se: int             # shader arrays per shader engine
    acquire: dict                  # ACQUIRE_MEM cache actions of a full invalidate
    release: dict                  # RELEASE_MEM cache actions of an end-of-pipe write-back
    scratch_srd: dict              # SQ_BUF_RSRC_WORD3 format fields of the scratch buffer descriptor

    def vgpr_granule(self, wave32: bool, family: str) -> int:
        """VGPRs per GRANULATED_WORKITEM_VGPR_COUNT step: GFX10+ 8 in wave32 and 4 in wave64; GFX90A and
        GFX942/950 (CDNA3/4) 8; other GFX9 4."""
        if self.gfx >= 10:
            return 8 if wave32 else 4
        return 8 if family in ("CDNA3", "CDNA4") else 4


_GFX10_ACQUIRE = dict(COHER_SIZE=0xFFFFFFFF, COHER_SIZE_HI=0xFFFFFF, POLL_INTERVAL=10, GLI_INV=1, GLK_INV=1, GLV_INV=1,
                      GL1_INV=1, GL2_INV=1, GL2_WB=1)
_GFX10_RELEASE = {"GCR_GL2_WB": 1, "GCR_GLM_INV": 1, "GCR_GLM_WB": 1, "GCR_SEQ": 1}
GENERATIONS: dict[int, Generation] = {
    9: Generation(9, "cdna3", "vega", 1024, False, 9, 1,
                  dict(COHER_SIZE=0xFFFFFFFF, COHER_SIZE_HI=0xFF, POLL_INTERVAL=10, SH_ICACHE_ACTION_ENA=1,
                       SH_KCACHE_ACTION_ENA=1, TC_ACTION_ENA=1, TCL1_ACTION_ENA=1, TC_WB_ACTION_ENA=1),
                  {"TC_WB_ACTION_ENA": 1, "TC_ACTION_ENA": 1},
                  {"DATA_FORMAT": BUF_DATA_FORMAT_32, "NUM_FORMAT": BUF_NUM_FORMAT_UINT, "ELEMENT_SIZE": 1}),
    11: Generation(11, "rdna3", "navi", 256, True, 11, 2, _GFX10_ACQUIRE, _GFX10_RELEASE,
                   {"FORMAT": BUF_FORMAT_32_UINT, "OOB_SELECT": 2}),
    12: Generation(12, "rdna4", "navi", 256, True, 12, 2, _GFX10_ACQUIRE, _GFX10_RELEASE,
                   {"FORMAT": BUF_FORMAT_32_UINT, "OOB_SELECT": 2}),
}


@dataclass(frozen=True)
class Target:
    arch: str                      # LLVM processor name, e.g. "gfx1100"
    family: str                    # RDNA3 | RDNA4 | CDNA3 | CDNA4
    mach: int                      # ELF e_flags EF_AMDGPU_MACH value
    board: str                     # reference board the counts below describe
    wave_size: int                 # default wavefront size
    lds_bytes: int                 # LDS available to one workgroup
    cus: int                       # compute units of the reference board
    ses: int                       # shader engines
    simds_per_cu: int
    max_waves_per_simd: int
    vram_bytes: int
    ip: dict[str, IPVersion] = field(default_factory=dict)   # GC, SDMA, NBIO, MMHUB, MP0, MP1, OSSSYS, HDP
    xcc: int = 1                   # compute dies (XCCs) visible as one device

    @property
    def gfx_version(self) -> int:
        """Generation number: 9 (CDNA), 11 (RDNA3), 12 (RDNA4)."""
        return self.ip["GC"][0]

    @property
    def gen(self) -> Generation:
        """The generation profile (everything generation-dependent)."""
        return GENERATIONS[self.gfx_version]

    @property
    def isa(self) -> str:
        """ISA family of the target's shader code: "rdna3", "rdna4", "cdna3" (gfx942) or "cdna4" (gfx950)."""
        return FAMILY_ISA[self.family]

    @property
    def max_waves_per_cu(self) -> int:
        return self.simds_per_cu * self.max_waves_per_simd

    @property
    def scratch_wave_align(self) -> int:
        """Granule of per-wave scratch (TMPRING_SIZE.WAVESIZE unit) in bytes."""
        return self.gen.scratch_unit

    @property
    def sdma_max_copy(self) -> int:
        """Largest byte count one COPY_LINEAR moves (count field is 22 bits on SDMA 4, 30 on 5+)."""
        return 0x3FFFE0 if self.ip["SDMA"][0] < 5 else 0x3FFFFFE0

    @property
    def vgpr_alloc_granule(self) -> int:
        """VGPRs per GRANULATED_WORKITEM_VGPR_COUNT step for the default wave size."""
        return self.gen.vgpr_granule(self.wave_size == 32, self.family)


def _t(arch, family, mach, wave, lds, simds, waves, ip, xcc=1) -> Target:
    """A target; its board, CU and shader-engine counts and VRAM size come from the board table (amdq.hw.boards)."""
    names = ("GC", "SDMA", "NBIO", "MMHUB", "MP0", "MP1", "OSSSYS", "HDP")
    b = BOARDS[arch]
    return Target(arch, family, mach, b.name, wave, lds, b.cus, b.ses, simds, waves, b.vram_gib << 30,
                  dict(zip(names, ip)), xcc)


KiB = 1024
TARGETS: dict[str, Target] = {t.arch: t for t in (
    _t("gfx1100", "RDNA3", 0x41, 32, 64 * KiB, 2, 16,
       ((11, 0, 0), (6, 0, 0), (4, 3, 0), (3, 0, 0), (13, 0, 0), (13, 0, 0), (6, 0, 0), (6, 0, 0))),
    _t("gfx1101", "RDNA3", 0x46, 32, 64 * KiB, 2, 16,
       ((11, 0, 3), (6, 0, 3), (4, 3, 0), (3, 0, 1), (13, 0, 10), (13, 0, 10), (6, 0, 0), (6, 0, 0))),
    _t("gfx1102", "RDNA3", 0x47, 32, 64 * KiB, 2, 16,
       ((11, 0, 2), (6, 0, 2), (4, 3, 0), (3, 0, 2), (13, 0, 7), (13, 0, 7), (6, 0, 0), (6, 0, 0))),
    _t("gfx1151", "RDNA3", 0x4A, 32, 64 * KiB, 2, 16,
       ((11, 5, 1), (6, 1, 1), (7, 11, 3), (3, 3, 1), (14, 0, 4), (14, 0, 4), (6, 1, 0), (6, 1, 0))),
    _t("gfx1200", "RDNA4", 0x48, 32, 64 * KiB, 2, 16,
       ((12, 0, 0), (7, 0, 0), (6, 3, 1), (4, 1, 0), (14, 0, 2), (14, 0, 2), (7, 0, 0), (7, 0, 0))),
    _t("gfx1201", "RDNA4", 0x4E, 32, 64 * KiB, 2, 16,
       ((12, 0, 1), (7, 0, 1), (6, 3, 1), (4, 1, 0), (14, 0, 3), (14, 0, 3), (7, 0, 0), (7, 0, 0))),
    _t("gfx942", "CDNA3", 0x4C, 64, 64 * KiB, 4, 8,
       ((9, 4, 3), (4, 4, 2), (7, 9, 0), (1, 8, 0), (13, 0, 6), (13, 0, 6), (4, 4, 2), (4, 4, 2)), xcc=8),
    _t("gfx950", "CDNA4", 0x4F, 64, 160 * KiB, 4, 8,
       ((9, 5, 0), (4, 4, 5), (7, 9, 1), (1, 8, 1), (13, 0, 14), (13, 0, 12), (4, 4, 5), (4, 4, 5)), xcc=8),
)}

# Product family -> ISA family (the shader core's front end and the instruction tables): CDNA4 (gfx950) is
# CDNA3 plus its additions (AMD "CDNA4 Instruction Set Architecture" reference guide, LLVM AMDGPUUsage processor
# table: gfx950 adds to gfx942's features), so the two share a GC major version but not an instruction set.
FAMILY_ISA: dict[str, str] = {"RDNA3": "rdna3", "RDNA4": "rdna4", "CDNA3": "cdna3", "CDNA4": "cdna4"}

MACH_TO_ARCH: dict[int, str] = {t.mach: t.arch for t in TARGETS.values()}


def supported() -> list[str]:
    return list(TARGETS)


def get_target(arch: str) -> Target:
    """The Target for an LLVM processor name (feature suffixes such as ':xnack-' are ignored)."""
    base = arch.split(":")[0].strip().lower()
    if base not in TARGETS:
        raise UnsupportedTarget(f"unsupported target {arch!r}: amdq supports {', '.join(TARGETS)}")
    return TARGETS[base]


def target_from_mach(mach: int) -> Target:
    """The Target for an ELF EF_AMDGPU_MACH value."""
    if mach not in MACH_TO_ARCH:
        raise UnsupportedCodeObjectTarget(f"code object machine 0x{mach:02x} is not a supported target: "
                                f"amdq supports {', '.join(TARGETS)}")
    return TARGETS[MACH_TO_ARCH[mach]]
