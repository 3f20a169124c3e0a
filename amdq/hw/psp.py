"""PSP (MP0) facts shared by the AM driver (am/psp.py) and the simulated PSP (sim/pci/psp.py). Data only.

Sources (facts, not code):
* Linux amdgpu `psp_v13_0.c` (MP0 13.0.0 / 13.0.6) and `psp_v14_0.c` (MP0 14.0.2 / 14.0.3): which C2PMSG
  mailbox does what (bootloader 35/36, sOS sign of life 81, sOS version 58, VMBX ready 33, ring control
  64/69/70/71, ring write pointer 67), the 1 MiB-aligned buffer whose MC address >> 20 goes to C2PMSG_36,
  the handshake values (ready = bit 31; on 13.0.6 and newer bits 7:0 report a bootloader error), which
  bootloader loaders each version has (v14 adds IPKEYMGR_DRV and calls DBG_DRV "HAD_DRV", same command).
* `amdgpu_psp.c`: psp_hw_start order (KDB, SPL, SYS_DRV, SOC_DRV, INTF_DRV, DBG_DRV, RAS_DRV, IPKEYMGR_DRV,
  SOS; each skipped once the sOS is alive), psp_early_init (autoload_supported, boot_time_tmr per MP0
  version), psp_check_pmfw_centralized_cstate_management, psp_tmr_init / psp_tmr_load (PSP_TMR_SIZE
  default 4 MiB, LOAD_TOC answers the size when a TOC exists, TMR aligned to PSP_TMR_ALIGNMENT, SETUP_TMR
  with size 0 when the boot firmware reserved the TMR), psp_ring_cmd_submit (frame index and write
  pointer in dwords, modulo the ring size), psp_cmd_submit_buf (response status at resp.status, fence
  value written to the fence address), psp_load_non_psp_fw (order by AMDGPU_UCODE_ID, SMU first when
  PMFW C-state management is not centralised, AUTOLOAD_RLC after RLC_G), psp_load_fw (RL after the IP
  firmware; TAs last).
* `psp_gfx_if.h` (via amdq.hw.am): command ids, ring control ids, the command buffer and ring frame
  layouts, GFX_FW_TYPE_*, TEE_SUCCESS / TEE_ERROR_NOT_SUPPORTED / PSP_ERR_UNKNOWN_COMMAND.
* GlobalPlatform TEE Client API specification (TEEC_ERROR_* = TEE_ERROR_*): the rest of the status family
  psp_gfx_if.h draws from (it names TEE_ERROR_NOT_SUPPORTED 0xFFFF000A, and amdgpu_psp.c TEE_ERROR_CANCEL).
* coreboot `util/amdfwtool/amdfwtool.h` struct amd_fw_header: the 256-byte header signed PSP images start
  with ("$PS1" at 0x10, fw_size_signed, sig_opt / sig_id, fw_id at 0x58, version at 0x60, size_total).
* Measured, not documented: the header's fw_id of each image kind and the signature length per sig_id,
  over Debian's firmware-amd-graphics 20250410 files of gfx1100/gfx1201/gfx942 (see FW_IDS below).
"""
from __future__ import annotations

from . import am
from .layout import Struct

# --- mailboxes ------------------------------------------------------------------------------------------
# MP0 register names by major version (mp_13_0_*_offset.h name them MP0_SMN_*, mp_14_0_2_offset.h MPASP_SMN_*).
REG_PREFIX = {13: "regMP0_SMN_C2PMSG_", 14: "regMPASP_SMN_C2PMSG_"}
C2PMSG_VMBX = 33          # 13.0.6: bit 31 once the bootloader's mailbox is up (IFWI init done on all)
C2PMSG_BL_CMD = 35        # bootloader command / status: bit 31 ready; bits 7:0 error (13.0.6 and newer)
C2PMSG_BL_ADDR = 36       # bootloader buffer MC address >> 20
C2PMSG_SOS_VERSION = 58   # sOS firmware version once it runs (psp_v13_0_init_sos_version)
C2PMSG_CTRL = 64          # psp_gfx_ctrl.cmd_resp: ring control command, bit 31 response, bits 15:0 status
C2PMSG_RBI_WPTR = 65
C2PMSG_RBI_RPTR = 66
C2PMSG_GPCOM_WPTR = 67    # KM ring write pointer (dwords)
C2PMSG_GPCOM_RPTR = 68    # KM ring read pointer (dwords), the sOS's side
C2PMSG_RING_LO = 69
C2PMSG_RING_HI = 70
C2PMSG_RING_SIZE = 71     # bytes
C2PMSG_SOS_ALIVE = 81     # sOS sign of life: non-zero once the sOS runs

BL_READY = 0x80000000
BL_ERROR_MASK = 0xFF
CTRL_RESPONSE = am.GFX_CMD_RESPONSE_MASK
CTRL_STATUS_MASK = am.GFX_CMD_STATUS_MASK
BL_ADDR_SHIFT = 20
BL_BUFFER_SIZE = am.PSP_1_MEG


def reg(mp0: tuple[int, int, int], n: int) -> str:
    """The register name of mailbox C2PMSG_n on an MP0 version."""
    try:
        return f"{REG_PREFIX[mp0[0]]}{n}"
    except KeyError:
        raise KeyError(f"MP0 {'.'.join(map(str, mp0))}: no PSP mailbox table (known majors: "
                       f"{', '.join(map(str, REG_PREFIX))})") from None


# --- bootloader -----------------------------------------------------------------------------------------
# (component name as amdq.am.firmware names SOS bundle parts, bootloader command), in psp_hw_start order.
BL_ORDER = (("kdb", am.PSP_BL__LOAD_KEY_DATABASE), ("spl", am.PSP_BL__LOAD_TOS_SPL_TABLE),
            ("sys_drv", am.PSP_BL__LOAD_SYSDRV), ("soc_drv", am.PSP_BL__LOAD_SOCDRV),
            ("intf_drv", am.PSP_BL__LOAD_INTFDRV), ("dbg_drv", am.PSP_BL__LOAD_DBGDRV),
            ("ras_drv", am.PSP_BL__LOAD_RASDRV), ("ipkeymgr_drv", am.PSP_BL__LOAD_IPKEYMGRDRV),
            ("sos", am.PSP_BL__LOAD_SOSDRV))
BL_COMMANDS = {cmd: name for name, cmd in BL_ORDER}
BL_NAMES = {am.PSP_BL__LOAD_KEY_DATABASE: "LOAD_KEY_DATABASE", am.PSP_BL__LOAD_TOS_SPL_TABLE: "LOAD_TOS_SPL_TABLE",
            am.PSP_BL__LOAD_SYSDRV: "LOAD_SYSDRV", am.PSP_BL__LOAD_SOCDRV: "LOAD_SOCDRV",
            am.PSP_BL__LOAD_INTFDRV: "LOAD_INTFDRV", am.PSP_BL__LOAD_DBGDRV: "LOAD_DBGDRV",
            am.PSP_BL__LOAD_RASDRV: "LOAD_RASDRV", am.PSP_BL__LOAD_IPKEYMGRDRV: "LOAD_IPKEYMGRDRV",
            am.PSP_BL__LOAD_SOSDRV: "LOAD_SOSDRV"}


# --- per MP0 version ------------------------------------------------------------------------------------
class PSPVersion:
    """What differs between the PSP generations the AM driver boots (psp_v13_0.c, psp_v14_0.c,
    amdgpu_psp.c psp_early_init and psp_check_pmfw_centralized_cstate_management)."""

    def __init__(self, mp0, loaders, autoload, boot_time_tmr, pmfw_centralized, vmbx, bl_error_bits,
                 sos_version_reg=True):
        self.mp0 = mp0
        self.loaders = frozenset(loaders)          # bootloader components this version's driver loads
        self.autoload = autoload                   # RLC autoload after the GFX firmware (AUTOLOAD_RLC)
        self.boot_time_tmr = boot_time_tmr         # the boot firmware reserved the TMR: SETUP_TMR size 0
        self.pmfw_centralized = pmfw_centralized   # SMU firmware before SETUP_TMR
        self.vmbx = vmbx                           # wait for C2PMSG_33 before the bootloader
        self.bl_error_bits = bl_error_bits         # C2PMSG_35 bits 7:0 carry a bootloader error
        self.sos_version_reg = sos_version_reg     # the sOS reports its version in C2PMSG_58 (psp_v13_0 only)

    def __repr__(self) -> str:
        return f"PSPVersion({'.'.join(map(str, self.mp0))})"


_V13 = ("kdb", "spl", "sys_drv", "soc_drv", "intf_drv", "dbg_drv", "ras_drv", "sos")
VERSIONS = {
    (13, 0, 0): PSPVersion((13, 0, 0), _V13, autoload=True, boot_time_tmr=False, pmfw_centralized=True,
                           vmbx=False, bl_error_bits=False),
    (13, 0, 6): PSPVersion((13, 0, 6), _V13, autoload=False, boot_time_tmr=True, pmfw_centralized=False,
                           vmbx=True, bl_error_bits=True),
    (14, 0, 2): PSPVersion((14, 0, 2), _V13 + ("ipkeymgr_drv",), autoload=True, boot_time_tmr=True,
                           pmfw_centralized=False, vmbx=False, bl_error_bits=True, sos_version_reg=False),
    (14, 0, 3): PSPVersion((14, 0, 3), _V13 + ("ipkeymgr_drv",), autoload=True, boot_time_tmr=True,
                           pmfw_centralized=False, vmbx=False, bl_error_bits=True, sos_version_reg=False),
}
PSP_TMR_SIZE = 0x400000          # amdgpu_psp.h PSP_TMR_SIZE(adev) (8 MiB only on Aldebaran, MP0 13.0.2)
PSP_TMR_ALIGNMENT = am.PSP_TMR_ALIGNMENT
KM_RING_SIZE = 0x1000            # psp_ring_init: one 4 KiB page
FRAME_SIZE = am.psp_gfx_rb_frame.size
CMD_BUF_SIZE = am.PSP_CMD_BUFFER_SIZE
FENCE_BUF_SIZE = am.PSP_FENCE_BUFFER_SIZE
RESP_OFFSET = am.psp_gfx_cmd_resp.offsetof("resp")


def version(mp0: tuple[int, int, int]) -> PSPVersion:
    v = VERSIONS.get(tuple(mp0))
    if v is None:
        raise KeyError(f"MP0 {'.'.join(map(str, mp0))} is not a PSP version amdq boots "
                       f"({', '.join('.'.join(map(str, k)) for k in VERSIONS)})")
    return v


# --- GFX commands ---------------------------------------------------------------------------------------
CMD_NAMES = {am.GFX_CMD_ID_LOAD_TA: "LOAD_TA", am.GFX_CMD_ID_UNLOAD_TA: "UNLOAD_TA",
             am.GFX_CMD_ID_INVOKE_CMD: "INVOKE_CMD", am.GFX_CMD_ID_LOAD_ASD: "LOAD_ASD",
             am.GFX_CMD_ID_SETUP_TMR: "SETUP_TMR", am.GFX_CMD_ID_LOAD_IP_FW: "LOAD_IP_FW",
             am.GFX_CMD_ID_DESTROY_TMR: "DESTROY_TMR", am.GFX_CMD_ID_SAVE_RESTORE: "SAVE_RESTORE_IP_FW",
             am.GFX_CMD_ID_SETUP_VMR: "SETUP_VMR", am.GFX_CMD_ID_DESTROY_VMR: "DESTROY_VMR",
             am.GFX_CMD_ID_PROG_REG: "PROG_REG", am.GFX_CMD_ID_GET_FW_ATTESTATION: "GET_FW_ATTESTATION",
             am.GFX_CMD_ID_LOAD_TOC: "LOAD_TOC", am.GFX_CMD_ID_AUTOLOAD_RLC: "AUTOLOAD_RLC",
             am.GFX_CMD_ID_BOOT_CFG: "BOOT_CFG"}
FW_TYPE_NAMES = {v: k[len("GFX_FW_TYPE_"):] for k, v in vars(am).items()
                 if k.startswith("GFX_FW_TYPE_") and isinstance(v, int) and k != "GFX_FW_TYPE_MAX"}

# --- status codes ---------------------------------------------------------------------------------------
TEE_SUCCESS = am.TEE_SUCCESS
TEE_ERROR_GENERIC = 0xFFFF0000
TEE_ERROR_ACCESS_DENIED = 0xFFFF0001
TEE_ERROR_CANCEL = 0xFFFF0002
TEE_ERROR_BAD_FORMAT = 0xFFFF0005
TEE_ERROR_BAD_PARAMETERS = 0xFFFF0006
TEE_ERROR_BAD_STATE = 0xFFFF0007
TEE_ERROR_ITEM_NOT_FOUND = 0xFFFF0008
TEE_ERROR_NOT_SUPPORTED = am.TEE_ERROR_NOT_SUPPORTED
TEE_ERROR_SECURITY = 0xFFFF000F
PSP_ERR_UNKNOWN_COMMAND = am.PSP_ERR_UNKNOWN_COMMAND
STATUS_NAMES = {TEE_SUCCESS: "TEE_SUCCESS", TEE_ERROR_GENERIC: "TEE_ERROR_GENERIC",
                TEE_ERROR_ACCESS_DENIED: "TEE_ERROR_ACCESS_DENIED", TEE_ERROR_CANCEL: "TEE_ERROR_CANCEL",
                TEE_ERROR_BAD_FORMAT: "TEE_ERROR_BAD_FORMAT", TEE_ERROR_BAD_PARAMETERS: "TEE_ERROR_BAD_PARAMETERS",
                TEE_ERROR_BAD_STATE: "TEE_ERROR_BAD_STATE", TEE_ERROR_ITEM_NOT_FOUND: "TEE_ERROR_ITEM_NOT_FOUND",
                TEE_ERROR_NOT_SUPPORTED: "TEE_ERROR_NOT_SUPPORTED", TEE_ERROR_SECURITY: "TEE_ERROR_SECURITY",
                PSP_ERR_UNKNOWN_COMMAND: "PSP_ERR_UNKNOWN_COMMAND"}


def status_name(status: int) -> str:
    return f"{status:#010x} {STATUS_NAMES.get(status, 'unknown status')}"


# The mailboxes carry 16 bits (C2PMSG_64 bits 15:0) or 8 bits (C2PMSG_35 bits 7:0) of status; amdgpu does
# not name their values. The simulated PSP reports the low bits of the TEE code it would answer on the
# ring, and the driver names them back through this table.
def short_status(status: int, bits: int) -> int:
    return status & ((1 << bits) - 1)


def short_status_name(code: int, bits: int) -> str:
    for full, name in STATUS_NAMES.items():
        if full and short_status(full, bits) == code:
            return f"{code:#x} (low {bits} bits of {name})"
    return f"{code:#x}"


# --- signed image header (coreboot amdfwtool.h struct amd_fw_header) ----------------------------------
amd_fw_header = Struct("amd_fw_header", 0x100, [
    ("signature", 0x10, "4b"),
    ("fw_size_signed", 0x14, "u32"),
    ("sig_opt", 0x30, "u32"),
    ("sig_id", 0x34, "u32"),
    ("comp_opt", 0x48, "u32"),
    ("uncomp_size", 0x50, "u32"),
    ("comp_size", 0x54, "u32"),
    ("fw_id", 0x58, "u16"),
    ("version", 0x60, "u32"),
    ("size_total", 0x6C, "u32"),
    ("fw_type", 0x7C, "u8"),
])
PS1_SIGNATURE = b"$PS1"
PS1_HEADER_SIZE = am.PSP_HEADER_SIZE          # 0x100, amdgpu_psp.h PSP_HEADER_SIZE
# Signature bytes after the signed body, by sig_id (coreboot: 0 RSA-2048, 2 RSA-4096); measured: every
# file's image is header + fw_size_signed + this, padded.
SIG_LEN = {0: 0x100, 2: 0x200}

# Header fw_id of each image kind (measured over firmware-amd-graphics 20250410: identical on gfx1100,
# gfx1201 and gfx942 where both exist; SDMA thread 0 has two ids, the RS64 engines of SDMA 4.4.2 / 7.0
# using 0x2025 and SDMA 6.0 0x203e).
FW_IDS: dict[int, frozenset[int]] = {
    am.GFX_FW_TYPE_RS64_PFP: frozenset({0x2044}), am.GFX_FW_TYPE_RS64_PFP_P0_STACK: frozenset({0x2045}),
    am.GFX_FW_TYPE_RS64_PFP_P1_STACK: frozenset({0x2045}),
    am.GFX_FW_TYPE_RS64_ME: frozenset({0x2046}), am.GFX_FW_TYPE_RS64_ME_P0_STACK: frozenset({0x2047}),
    am.GFX_FW_TYPE_RS64_ME_P1_STACK: frozenset({0x2047}),
    am.GFX_FW_TYPE_RS64_MEC: frozenset({0x2048}),
    **{t: frozenset({0x2049}) for t in (am.GFX_FW_TYPE_RS64_MEC_P0_STACK, am.GFX_FW_TYPE_RS64_MEC_P1_STACK,
                                        am.GFX_FW_TYPE_RS64_MEC_P2_STACK, am.GFX_FW_TYPE_RS64_MEC_P3_STACK)},
    am.GFX_FW_TYPE_CP_MEC: frozenset({0x2004}), am.GFX_FW_TYPE_CP_MEC_ME1: frozenset({0x2005}),
    am.GFX_FW_TYPE_CP_MES: frozenset({0x2007}), am.GFX_FW_TYPE_MES_STACK: frozenset({0x2008}),
    am.GFX_FW_TYPE_CP_MES_KIQ: frozenset({0x2042}), am.GFX_FW_TYPE_MES_KIQ_STACK: frozenset({0x2043}),
    am.GFX_FW_TYPE_RLC_G: frozenset({0x2009}), am.GFX_FW_TYPE_RLC_V: frozenset({0x200A}),
    am.GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM: frozenset({0x200B}),
    am.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM: frozenset({0x200C}),
    am.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_CNTL: frozenset({0x200D}),
    am.GFX_FW_TYPE_RLC_P: frozenset({0x200F}), am.GFX_FW_TYPE_RLC_IRAM: frozenset({0x2016}),
    am.GFX_FW_TYPE_RLC_DRAM_BOOT: frozenset({0x2017}),
    am.GFX_FW_TYPE_IMU_I: frozenset({0x203B}), am.GFX_FW_TYPE_IMU_D: frozenset({0x203C}),
    am.GFX_FW_TYPE_SDMA_UCODE_TH0: frozenset({0x203E, 0x2025}), am.GFX_FW_TYPE_SDMA_UCODE_TH1: frozenset({0x203F}),
    am.GFX_FW_TYPE_SDMA0: frozenset({0x2025}),
    am.GFX_FW_TYPE_SMU: frozenset({0x1001}), am.GFX_FW_TYPE_TOC: frozenset({0x200E}),
    am.GFX_FW_TYPE_REG_LIST: frozenset({0x0135}),
}
# Bootloader components (same measurement). The 13.0.0 key database carries no $PS1 header at all.
BL_FW_IDS = {"kdb": 0x004F, "spl": 0x0056, "sys_drv": 0x000A, "sos": 0x0009, "soc_drv": 0x014A,
             "intf_drv": 0x014C, "dbg_drv": 0x014B, "ras_drv": 0x0152, "ipkeymgr_drv": 0x01E1}
UNSIGNED_OK = frozenset({"kdb"})

# --- amdq's own stand-in images -------------------------------------------------------------------------
# Not a hardware fact: amdq.am.firmware generates images for missing files whose every part starts with
# this marker, the file name and the part name ("AMDQ STAND-IN gc_11_0_0_rlc.bin rlc_g ..."). The simulated
# PSP accepts them where a real one would check a signature, and checks that the part is the one named.
STANDIN_MAGIC = b"AMDQ STAND-IN "
# GFX_FW_TYPE -> (file name suffix, part name) of the stand-in part that carries it.
STANDIN_PARTS: dict[int, tuple[tuple[str, str], ...]] = {
    am.GFX_FW_TYPE_RS64_PFP: (("_pfp.bin", "ucode"),), am.GFX_FW_TYPE_RS64_PFP_P0_STACK: (("_pfp.bin", "data"),),
    am.GFX_FW_TYPE_RS64_PFP_P1_STACK: (("_pfp.bin", "data"),),
    am.GFX_FW_TYPE_RS64_ME: (("_me.bin", "ucode"),), am.GFX_FW_TYPE_RS64_ME_P0_STACK: (("_me.bin", "data"),),
    am.GFX_FW_TYPE_RS64_ME_P1_STACK: (("_me.bin", "data"),),
    am.GFX_FW_TYPE_RS64_MEC: (("_mec.bin", "ucode"),),
    **{t: (("_mec.bin", "data"),) for t in (am.GFX_FW_TYPE_RS64_MEC_P0_STACK, am.GFX_FW_TYPE_RS64_MEC_P1_STACK,
                                            am.GFX_FW_TYPE_RS64_MEC_P2_STACK, am.GFX_FW_TYPE_RS64_MEC_P3_STACK)},
    am.GFX_FW_TYPE_CP_MEC: (("_mec.bin", "ucode"),), am.GFX_FW_TYPE_CP_MEC_ME1: (("_mec.bin", "jt"),),
    am.GFX_FW_TYPE_RLC_G: (("_rlc.bin", "rlc_g"),), am.GFX_FW_TYPE_RLC_V: (("_rlc.bin", "rlcv"),),
    am.GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM: (("_rlc.bin", "restore_list_gpm"),),
    am.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM: (("_rlc.bin", "restore_list_srm"),),
    am.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_CNTL: (("_rlc.bin", "restore_list_cntl"),),
    am.GFX_FW_TYPE_RLC_P: (("_rlc.bin", "rlcp"),), am.GFX_FW_TYPE_RLC_IRAM: (("_rlc.bin", "iram"),),
    am.GFX_FW_TYPE_RLC_DRAM_BOOT: (("_rlc.bin", "dram"),),
    am.GFX_FW_TYPE_IMU_I: (("_imu.bin", "iram"),), am.GFX_FW_TYPE_IMU_D: (("_imu.bin", "dram"),),
    am.GFX_FW_TYPE_SDMA_UCODE_TH0: (("sdma_", "th0"), ("sdma_", "ucode")),
    am.GFX_FW_TYPE_SDMA_UCODE_TH1: (("sdma_", "th1"),), am.GFX_FW_TYPE_SDMA0: (("sdma_", "ucode"),),
    am.GFX_FW_TYPE_SMU: (("smu_", "ucode"),), am.GFX_FW_TYPE_TOC: (("_sos.bin", "toc"), ("_toc.bin", "toc")),
    am.GFX_FW_TYPE_REG_LIST: (("_sos.bin", "rl"),),
}
