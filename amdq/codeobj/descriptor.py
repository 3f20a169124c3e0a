"""Decoding the 64-byte kernel descriptor into named fields and the state it implies."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CodeObjectError
from ..hw import kd as KD
from ..hw.targets import Target


@dataclass
class KernelDescriptor:
    raw: bytes
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    compute_pgm_rsrc3: int
    kernel_code_properties: int
    kernarg_preload: int
    rsrc1: dict[str, int] = field(default_factory=dict)
    rsrc2: dict[str, int] = field(default_factory=dict)
    rsrc3: dict[str, int] = field(default_factory=dict)
    properties: dict[str, int] = field(default_factory=dict)
    gen: int = 11
    vgpr_granule: int = 8

    @classmethod
    def decode(cls, raw: bytes, target: Target) -> "KernelDescriptor":
        if len(raw) < 64:
            raise CodeObjectError(f"kernel descriptor is {len(raw)} bytes, not 64")
        f = KD.KERNEL_DESCRIPTOR.unpack(raw)
        gen = KD.generation(target.gfx_version)
        kd = cls(bytes(raw[:64]), f["group_segment_fixed_size"], f["private_segment_fixed_size"], f["kernarg_size"],
                 f["kernel_code_entry_byte_offset"], f["compute_pgm_rsrc1"], f["compute_pgm_rsrc2"],
                 f["compute_pgm_rsrc3"], f["kernel_code_properties"], f["kernarg_preload"], gen=gen)
        kd.rsrc1 = KD.RSRC1[gen].decode(kd.compute_pgm_rsrc1)
        kd.rsrc2 = KD.RSRC2[gen].decode(kd.compute_pgm_rsrc2)
        kd.rsrc3 = KD.RSRC3[gen].decode(kd.compute_pgm_rsrc3)
        kd.properties = KD.CODE_PROPERTIES.decode(kd.kernel_code_properties)
        # VGPR encoding granule (AMDGPUUsage, GRANULATED_WORKITEM_VGPR_COUNT): GFX90A/GFX942 8;
        # GFX10+ 8 in wave32 and 4 in wave64; older GFX9 4.
        if gen >= 11:
            kd.vgpr_granule = 8 if kd.wave32 else 4
        else:
            kd.vgpr_granule = 8 if target.family in ("CDNA3", "CDNA4") else 4
        return kd

    @property
    def wave32(self) -> bool:
        return bool(self.properties["ENABLE_WAVEFRONT_SIZE32"])

    @property
    def wave_size(self) -> int:
        return 32 if self.wave32 else 64

    @property
    def user_sgpr_count(self) -> int:
        return self.rsrc2["USER_SGPR_COUNT"]

    @property
    def vgpr_alloc(self) -> int:
        """VGPRs allocated per work-item, from the granulated count."""
        return (self.rsrc1["GRANULATED_WORKITEM_VGPR_COUNT"] + 1) * self.vgpr_granule

    @property
    def user_sgprs(self) -> list[tuple[str, int, int]]:
        """Enabled user SGPRs as (name, first SGPR, count), in hardware load order."""
        out, n = [], 0
        for flag, name, size in KD.USER_SGPRS:
            if self.properties[flag]:
                out.append((name, n, size))
                n += size
        return out

    @property
    def system_sgprs(self) -> list[tuple[str, int]]:
        """Enabled system SGPRs as (name, SGPR index), following the user SGPRs."""
        out, n = [], self.user_sgpr_count
        for flag, name in KD.SYSTEM_SGPRS:
            if self.rsrc2[flag]:
                out.append((name, n))
                n += 1
        return out

    @property
    def workitem_id_dims(self) -> int:
        """How many work-item id VGPRs (or packed fields) the wave starts with: 1, 2 or 3."""
        return self.rsrc2["ENABLE_VGPR_WORKITEM_ID"] + 1

    @property
    def uses_scratch(self) -> bool:
        return bool(self.rsrc2["ENABLE_PRIVATE_SEGMENT"]) or self.private_segment_fixed_size > 0

    def as_dict(self) -> dict:
        return {"group_segment_fixed_size": self.group_segment_fixed_size,
                "private_segment_fixed_size": self.private_segment_fixed_size, "kernarg_size": self.kernarg_size,
                "kernel_code_entry_byte_offset": self.kernel_code_entry_byte_offset,
                "compute_pgm_rsrc1": self.rsrc1, "compute_pgm_rsrc2": self.rsrc2, "compute_pgm_rsrc3": self.rsrc3,
                "kernel_code_properties": self.properties, "kernarg_preload": KD.KERNARG_PRELOAD.decode(self.kernarg_preload),
                "wave32": self.wave32, "vgpr_alloc": self.vgpr_alloc, "user_sgprs": self.user_sgprs,
                "system_sgprs": self.system_sgprs}
