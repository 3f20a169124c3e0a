"""The 64-byte AMDHSA kernel descriptor and its register images, per generation.

Source: LLVM `llvm/Support/AMDHSAKernelDescriptor.h` and AMDGPUUsage "Kernel Descriptor"
(COMPUTE_PGM_RSRC1/2/3 and kernel_code_properties bit positions for GFX9, GFX10/11 and GFX12).
"""
from __future__ import annotations

from .layout import Bits, Struct

KERNEL_DESCRIPTOR = Struct("kernel_descriptor", 64, [
    ("group_segment_fixed_size", 0, "u32"),
    ("private_segment_fixed_size", 4, "u32"),
    ("kernarg_size", 8, "u32"),
    ("reserved0", 12, "4b"),
    ("kernel_code_entry_byte_offset", 16, "i64"),
    ("reserved1", 24, "20b"),
    ("compute_pgm_rsrc3", 44, "u32"),
    ("compute_pgm_rsrc1", 48, "u32"),
    ("compute_pgm_rsrc2", 52, "u32"),
    ("kernel_code_properties", 56, "u16"),
    ("kernarg_preload", 58, "u16"),
    ("reserved3", 60, "4b"),
])

_RSRC1_COMMON = {
    "GRANULATED_WORKITEM_VGPR_COUNT": (0, 5), "GRANULATED_WAVEFRONT_SGPR_COUNT": (6, 9),
    "PRIORITY": (10, 11), "FLOAT_ROUND_MODE_32": (12, 13), "FLOAT_ROUND_MODE_16_64": (14, 15),
    "FLOAT_DENORM_MODE_32": (16, 17), "FLOAT_DENORM_MODE_16_64": (18, 19), "PRIV": (20, 20),
    "DEBUG_MODE": (22, 22), "BULKY": (24, 24), "CDBG_USER": (25, 25), "FP16_OVFL": (26, 26),
}
_RSRC2_COMMON = {
    "ENABLE_PRIVATE_SEGMENT": (0, 0), "USER_SGPR_COUNT": (1, 5),
    "ENABLE_SGPR_WORKGROUP_ID_X": (7, 7), "ENABLE_SGPR_WORKGROUP_ID_Y": (8, 8),
    "ENABLE_SGPR_WORKGROUP_ID_Z": (9, 9), "ENABLE_SGPR_WORKGROUP_INFO": (10, 10),
    "ENABLE_VGPR_WORKITEM_ID": (11, 12), "ENABLE_EXCEPTION_ADDRESS_WATCH": (13, 13),
    "ENABLE_EXCEPTION_MEMORY": (14, 14), "GRANULATED_LDS_SIZE": (15, 23),
    "ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION": (24, 24),
    "ENABLE_EXCEPTION_FP_DENORMAL_SOURCE": (25, 25),
    "ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO": (26, 26),
    "ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW": (27, 27),
    "ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW": (28, 28),
    "ENABLE_EXCEPTION_IEEE_754_FP_INEXACT": (29, 29),
    "ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO": (30, 30),
}

RSRC1 = {
    9: Bits("COMPUTE_PGM_RSRC1", {**_RSRC1_COMMON, "ENABLE_DX10_CLAMP": (21, 21), "ENABLE_IEEE_MODE": (23, 23)}),
    11: Bits("COMPUTE_PGM_RSRC1", {**_RSRC1_COMMON, "ENABLE_DX10_CLAMP": (21, 21), "ENABLE_IEEE_MODE": (23, 23),
                                   "WGP_MODE": (29, 29), "MEM_ORDERED": (30, 30), "FWD_PROGRESS": (31, 31)}),
    12: Bits("COMPUTE_PGM_RSRC1", {**_RSRC1_COMMON, "ENABLE_WG_RR_EN": (21, 21), "DISABLE_PERF": (23, 23),
                                   "WGP_MODE": (29, 29), "MEM_ORDERED": (30, 30), "FWD_PROGRESS": (31, 31)}),
}
RSRC2 = {
    9: Bits("COMPUTE_PGM_RSRC2", {**_RSRC2_COMMON, "ENABLE_TRAP_HANDLER": (6, 6)}),
    11: Bits("COMPUTE_PGM_RSRC2", {**_RSRC2_COMMON, "ENABLE_TRAP_HANDLER": (6, 6)}),
    12: Bits("COMPUTE_PGM_RSRC2", _RSRC2_COMMON),      # bit 6 is reserved on GFX12 (LLVM 19 header)
}
RSRC3 = {
    # GFX90A/GFX942: ACCUM_OFFSET is (AGPR base / 4) - 1, TG_SPLIT places waves of a group on any CU.
    9: Bits("COMPUTE_PGM_RSRC3", {"ACCUM_OFFSET": (0, 5), "TG_SPLIT": (16, 16)}),
    11: Bits("COMPUTE_PGM_RSRC3", {"SHARED_VGPR_COUNT": (0, 3), "INST_PREF_SIZE": (4, 9),
                                   "TRAP_ON_START": (10, 10), "TRAP_ON_END": (11, 11), "IMAGE_OP": (31, 31)}),
    12: Bits("COMPUTE_PGM_RSRC3", {"INST_PREF_SIZE": (4, 11), "GLG_EN": (13, 13), "IMAGE_OP": (31, 31)}),
}
CODE_PROPERTIES = Bits("kernel_code_properties", {
    "ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER": (0, 0), "ENABLE_SGPR_DISPATCH_PTR": (1, 1),
    "ENABLE_SGPR_QUEUE_PTR": (2, 2), "ENABLE_SGPR_KERNARG_SEGMENT_PTR": (3, 3),
    "ENABLE_SGPR_DISPATCH_ID": (4, 4), "ENABLE_SGPR_FLAT_SCRATCH_INIT": (5, 5),
    "ENABLE_SGPR_PRIVATE_SEGMENT_SIZE": (6, 6), "ENABLE_WAVEFRONT_SIZE32": (10, 10),
    "USES_DYNAMIC_STACK": (11, 11),
}, width=16)
KERNARG_PRELOAD = Bits("kernarg_preload", {"LENGTH": (0, 6), "OFFSET": (7, 15)}, width=16)

# User SGPRs in the order hardware loads them, with their size in SGPRs (AMDGPUUsage "Initial Kernel
# Execution State"). The private segment buffer is a 4-SGPR V# (absent with architected flat scratch).
USER_SGPRS = (
    ("ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER", "private_segment_buffer", 4),
    ("ENABLE_SGPR_DISPATCH_PTR", "dispatch_ptr", 2),
    ("ENABLE_SGPR_QUEUE_PTR", "queue_ptr", 2),
    ("ENABLE_SGPR_KERNARG_SEGMENT_PTR", "kernarg_segment_ptr", 2),
    ("ENABLE_SGPR_DISPATCH_ID", "dispatch_id", 2),
    ("ENABLE_SGPR_FLAT_SCRATCH_INIT", "flat_scratch_init", 2),
    ("ENABLE_SGPR_PRIVATE_SEGMENT_SIZE", "private_segment_size", 1),
)
SYSTEM_SGPRS = (
    ("ENABLE_SGPR_WORKGROUP_ID_X", "workgroup_id_x"),
    ("ENABLE_SGPR_WORKGROUP_ID_Y", "workgroup_id_y"),
    ("ENABLE_SGPR_WORKGROUP_ID_Z", "workgroup_id_z"),
    ("ENABLE_SGPR_WORKGROUP_INFO", "workgroup_info"),
    ("ENABLE_PRIVATE_SEGMENT", "private_segment_wave_offset"),
)


# COMPUTE_PGM_RSRC2.LDS_SIZE (GRANULATED_LDS_SIZE) unit: 128 dwords on GFX7 to GFX12 (AMDGPUUsage).
LDS_GRANULE = 512


def generation(gfx_version: int) -> int:
    """Key of the bit-field tables above: 9 (GFX9/CDNA), 11 (GFX10/11) or 12 (GFX12)."""
    return 9 if gfx_version < 10 else 11 if gfx_version < 12 else 12
