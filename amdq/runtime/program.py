"""Programs loaded on a device, and kernels called like functions."""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..codeobj.image import KernelInfo, ProgramImage
from ..errors import InvalidArgument
from . import kernargs

if TYPE_CHECKING:
    from .device import Device

LDS_GRANULE = 512          # COMPUTE_PGM_RSRC2.LDS_SIZE unit
AQL_DISPATCH = struct.Struct("<HHHHHHIIIIIQQQQ")   # hsa_kernel_dispatch_packet_t


@dataclass
class LaunchRecord:
    """Where one launch spent its time (seconds; GPU times converted to the host clock)."""
    kernel: str
    encode: float = 0.0
    submit: float = 0.0
    wait: float = 0.0
    gpu_start: float | None = None
    gpu_end: float | None = None
    value: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def gpu(self) -> float | None:
        return None if self.gpu_start is None else self.gpu_end - self.gpu_start


def _dims(v, name: str) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, int) else tuple(v)
    if not 1 <= len(t) <= 3 or not all(isinstance(x, int) and x >= 1 for x in t):
        raise InvalidArgument(f"{name} must be 1 to 3 positive integers, got {v!r}")
    return t + (1,) * (3 - len(t))


class Kernel:
    def __init__(self, prg: "Program", info: KernelInfo):
        self.prg, self.info, self.name = prg, info, info.name
        self.meta, self.desc = info.meta, info.descriptor
        self.addr = prg.base + info.entry_offset
        self.kd_addr = prg.base + info.kd_offset

    def __repr__(self) -> str:
        return f"<Kernel {self.name} of {self.prg}>"

    def __call__(self, *args, grid=(1, 1, 1), block=(1, 1, 1), wait: bool = False, timeout_ms: int | None = None):
        return self.prg.dev.launch(self, args, _dims(grid, "grid"), _dims(block, "block"), wait, timeout_ms)

    def encode(self, cmds, args: tuple, grid, block) -> dict:
        """Append the dispatch of this kernel to `cmds`; returns what the device must keep alive."""
        dev = self.prg.dev
        d, t = self.desc, dev.target
        threads = block[0] * block[1] * block[2]
        if threads > self.meta.max_flat_workgroup_size:
            raise InvalidArgument(f"kernel {self.name}: block of {threads} work-items exceeds its maximum of "
                                  f"{self.meta.max_flat_workgroup_size}")
        blob, dyn = kernargs.pack(self.meta, args, grid, block, lambda b: b.addr, d.group_segment_fixed_size,
                                  t.lds_bytes)
        lds = d.group_segment_fixed_size + dyn
        ka = dev.kernargs.push(blob, 64 + AQL_DISPATCH.size)
        user, pkt_addr = [], ka + ((len(blob) + 63) & ~63)
        if d.properties["ENABLE_SGPR_DISPATCH_PTR"]:
            gsize = [g * b for g, b in zip(grid, block)]
            dev.kernargs.write(pkt_addr, AQL_DISPATCH.pack(
                2 | 1 << 8, 3 if grid[2] * block[2] > 1 else 2 if grid[1] * block[1] > 1 else 1, *block, 0, *gsize,
                d.private_segment_fixed_size, lds, self.kd_addr, ka, 0, 0))
        scratch = dev.scratch_for(d.private_segment_fixed_size, d.wave_size) if d.uses_scratch else None
        for name, _first, count in d.user_sgprs:
            val = {"kernarg_segment_ptr": ka, "dispatch_ptr": pkt_addr, "queue_ptr": 0, "dispatch_id": 0,
                   "private_segment_size": d.private_segment_fixed_size,
                   "flat_scratch_init": scratch.base if scratch else 0,
                   "private_segment_buffer": 0}[name]
            user += ([val & 0xFFFFFFFF, val >> 32] + [0, 0])[:count]
        sh = cmds.sh
        rsrc2 = (d.compute_pgm_rsrc2 & ~(0x1FF << 15)) | ((lds + LDS_GRANULE - 1) // LDS_GRANULE) << 15
        cmds.set_sh("regCOMPUTE_PGM_LO", self.addr >> 8, self.addr >> 40)
        cmds.set_sh("regCOMPUTE_PGM_RSRC1", d.compute_pgm_rsrc1, rsrc2)
        cmds.set_sh("regCOMPUTE_PGM_RSRC3", d.compute_pgm_rsrc3)
        cmds.set_sh("regCOMPUTE_TMPRING_SIZE", scratch.tmpring if scratch else 0)
        if scratch:
            cmds.set_sh("regCOMPUTE_DISPATCH_SCRATCH_BASE_LO", scratch.base >> 8, scratch.base >> 40)
        cmds.set_sh("regCOMPUTE_RESOURCE_LIMITS", 0)
        cmds.set_sh("regCOMPUTE_START_X", 0, 0, 0)
        cmds.set_sh("regCOMPUTE_NUM_THREAD_X", *block)
        if user:
            cmds.set_sh("regCOMPUTE_USER_DATA_0", *user)
        ini = sh.map.regCOMPUTE_DISPATCH_INITIATOR
        flags = {"COMPUTE_SHADER_EN": 1, "FORCE_START_AT_000": 1}
        if "CS_W32_EN" in ini.fields and d.wave32:
            flags["CS_W32_EN"] = 1
        cmds.packet("DISPATCH_DIRECT", DIM_X=grid[0], DIM_Y=grid[1], DIM_Z=grid[2], DISPATCH_INITIATOR=ini.encode(**flags))
        return {"kernarg": ka}


class Program:
    """A code object loaded on one device."""

    def __init__(self, dev: "Device", img: ProgramImage):
        self.dev, self.img = dev, img
        t0 = time.perf_counter()
        self.alloc = dev.allocator.alloc(img.size, "vram", executable=True)
        self.base = self.alloc.va
        self.alloc.cpu.mv[:img.size] = bytes(img.at(self.base))
        self.load_time = time.perf_counter() - t0
        self.kernels = list(img.kernels)
        self._k = {n: Kernel(self, k) for n, k in img.kernels.items()}

    def __getitem__(self, name: str) -> Kernel:
        if name not in self._k:
            raise KeyError(f"no kernel {name!r} in the program (kernels: {', '.join(self.kernels)})")
        return self._k[name]

    def __repr__(self) -> str:
        return f"<Program {self.img.arch} {', '.join(self.kernels)} at {self.base:#x}>"
