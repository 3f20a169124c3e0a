"""Run a kernel on the shader core alone: the code-object loader, a flat memory and the dispatch
registers a command processor would program. (The device path does the same through real rings.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from amdq.codeobj import load_code_object
from amdq.runtime.kernargs import LDS, pack
from amdq.sim.shader.core import DispatchRegs, ShaderCore
from amdq.sim.shader.memory import FlatMemory
from clang import compile_cl

AQL_DISPATCH = "<HHHHHHIIIIIQQQQ"     # hsa_kernel_dispatch_packet_t (64 bytes)


class Buf:
    def __init__(self, mem: FlatMemory, arr: np.ndarray):
        self.arr = np.ascontiguousarray(arr)
        self.addr = mem.upload(self.arr.tobytes() or b"\0")
        self.mem = mem

    def get(self) -> np.ndarray:
        return np.frombuffer(self.mem.read(self.addr, self.arr.nbytes), self.arr.dtype).reshape(self.arr.shape).copy()


def run(code_object: bytes | Path, kernel: str, args: list, grid=(1, 1, 1), block=(64, 1, 1), mem=None,
        arch="gfx1100", isa: str | None = None):
    """Run `kernel`; numpy arrays in args are uploaded and returned (in order) after the dispatch. `isa` runs
    it with another ISA family's front end than its target's (e.g. gfx950 code on gfx942's)."""
    import struct
    if isinstance(code_object, Path):
        code_object = code_object.read_bytes()
    img = load_code_object(code_object, arch)
    k = img.kernels[kernel]
    mem = mem or FlatMemory(1 << 28)
    base = mem.alloc(-(-img.size // 4096) * 4096, 4096)   # whole pages, as a GPU maps code (fetch reads pages)
    mem.write(base, bytes(img.at(base)))
    bufs = [Buf(mem, a) if isinstance(a, np.ndarray) else a for a in args]
    d = k.descriptor
    blob, dyn = pack(k.meta, tuple(bufs), grid, block, lambda b: b.addr, d.group_segment_fixed_size, img.target.lds_bytes)
    kernarg = mem.upload(blob, 64)
    gsize = [g * b for g, b in zip(grid, block)]
    pkt = struct.pack(AQL_DISPATCH, 2 | 1 << 8, 3, *block, 0, *gsize, d.private_segment_fixed_size,
                      d.group_segment_fixed_size + dyn, base + k.kd_offset, kernarg, 0, 0)
    dispatch_ptr = mem.upload(pkt, 64)
    lanes = d.wave_size
    wpg = -(-(block[0] * block[1] * block[2]) // lanes)
    nwaves = wpg * grid[0] * grid[1] * grid[2]
    wave_bytes = (d.private_segment_fixed_size * lanes + 255) & ~255
    scratch = mem.alloc(max(wave_bytes * nwaves, 4), 256) if wave_bytes else 0
    user = []
    for name, first, count in d.user_sgprs:
        val = {"kernarg_segment_ptr": kernarg, "dispatch_ptr": dispatch_ptr, "queue_ptr": 0, "dispatch_id": 0,
               "private_segment_size": d.private_segment_fixed_size, "flat_scratch_init": scratch}.get(name, 0)
        user += [val & 0xFFFFFFFF, val >> 32][:count] + [0] * max(0, count - 2)
    regs = DispatchRegs(pgm_addr=base + k.entry_offset, rsrc1=d.compute_pgm_rsrc1, rsrc2=d.compute_pgm_rsrc2,
                        rsrc3=d.compute_pgm_rsrc3, grid=grid, block=block, user_data=user, wave64=not d.wave32,
                        lds_bytes=d.group_segment_fixed_size + dyn, scratch_base=scratch,
                        scratch_wave_bytes=wave_bytes, gfx=img.target.gfx_version,
                        isa=isa or img.target.isa)
    stats = ShaderCore(mem).dispatch(regs)
    outs = [b.get() for b in bufs if isinstance(b, Buf)]
    return outs, stats


def run_cl(src: str, kernel: str, args: list, grid=(1, 1, 1), block=(64, 1, 1), arch="gfx1100", flags=()):
    return run(compile_cl(src, arch, flags=tuple(flags)), kernel, args, grid, block, arch=arch)


__all__ = ["run", "run_cl", "LDS"]
