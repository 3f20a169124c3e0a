"""AMDGPU ELF constants.

Source: LLVM AMDGPUUsage ("ELF Code Object", "Relocation Records", "Note Records") and
`llvm/include/llvm/BinaryFormat/ELFRelocs/AMDGPU.def`.
"""
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ABI_VERSION_TO_COV = {1: 3, 2: 4, 3: 5, 4: 6}      # EI_ABIVERSION -> code object version
EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
NT_AMDGPU_METADATA = 32

# Relocation types: number -> name.
R_AMDGPU = {
    0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI", 3: "R_AMDGPU_ABS64",
    4: "R_AMDGPU_REL32", 5: "R_AMDGPU_REL64", 6: "R_AMDGPU_ABS32", 7: "R_AMDGPU_GOTPCREL",
    8: "R_AMDGPU_GOTPCREL32_LO", 9: "R_AMDGPU_GOTPCREL32_HI", 10: "R_AMDGPU_REL32_LO",
    11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64", 14: "R_AMDGPU_REL16",
}
R_BY_NAME = {v: k for k, v in R_AMDGPU.items()}
