"""Programs loaded on a device, and kernels called like functions."""
from __future__ import annotations

import struct
import time

import numpy as np
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..codeobj.image import KernelInfo, ProgramImage
from ..errors import InvalidArgument
from ..hw.kd import LDS_GRANULE
from . import kernargs

if TYPE_CHECKING:
    from .device import Device

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
    if type(v) is int and v >= 1:
        return (v, 1, 1)
    if type(v) is tuple and len(v) == 3 and type(v[0]) is int and type(v[1]) is int and type(v[2]) is int \
            and v[0] >= 1 and v[1] >= 1 and v[2] >= 1:
        return v
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
        self._plans: dict[tuple, Plan] = {}
        self._has_lds = any(a.value_kind == "dynamic_shared_pointer" for a in self.meta.args)
        self._untyped = [i for i, a in enumerate(self.meta.explicit_args)
                         if a.value_kind == "by_value" and not a.type_name.strip()]

    def __repr__(self) -> str:
        return f"<Kernel {self.name} of {self.prg}>"

    def __call__(self, *args, grid=(1, 1, 1), block=(1, 1, 1), wait: bool = False, timeout_ms: int | None = None):
        return self.prg.dev.launch(self, args, _dims(grid, "grid"), _dims(block, "block"), wait, timeout_ms)

    def plan(self, args: tuple, grid, block, wait: bool) -> Plan:
        """The cached launch plan for this shape (grid, block, dynamic LDS sizes, scratch buffer)."""
        dyn = tuple(a.nbytes for a in args if isinstance(a, kernargs.LDS)) if self._has_lds else ()
        scratch = self.prg.dev.scratch_for(self.desc.private_segment_fixed_size, self.desc.wave_size).base \
            if self.desc.uses_scratch else 0
        key = (grid, block, wait, dyn, scratch, len(args),
               tuple(type(args[i]) for i in self._untyped if i < len(args)) if self._untyped else ())
        p = self._plans.get(key)
        if p is None:
            p = self._plans[key] = Plan(self, args, grid, block, wait)
        return p

    def bind(self, *args, grid=(1, 1, 1), block=(1, 1, 1)) -> "BoundLaunch":
        """This launch recorded into an indirect buffer (on an AQL queue: a ready dispatch packet); `.submit()`
        resubmits it and returns its timeline value."""
        q = self.prg.dev.queue
        if hasattr(q, "bind"):
            return q.bind(self, args, _dims(grid, "grid"), _dims(block, "block"))
        return BoundLaunch(self, args, _dims(grid, "grid"), _dims(block, "block"))

    def pack_into(self, p: Plan, args: tuple, mv, off: int) -> None:
        """Write this call's kernel arguments (validated) at mv[off:]."""
        mv[off:off + len(p.blob)] = p.blob
        if p.fmt is not None and len(args) == len(self.meta.explicit_args):
            try:
                vals = list(args)
                for i in p.ptr:
                    v = vals[i]
                    if not isinstance(v, int):
                        vals[i] = v.addr
                p.fmt.pack_into(mv, off, *vals)
                return
            except (struct.error, AttributeError, TypeError):
                pass                                        # the slow path packs it or says what is wrong
        blob, _ = kernargs.pack(self.meta, args, p.grid, p.block, lambda b: b.addr, self.desc.group_segment_fixed_size,
                                self.prg.dev.target.lds_bytes)
        mv[off:off + len(blob)] = blob

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
            first = len(cmds.dw) - len(user)
            pos = 0
            for name, _first, count in d.user_sgprs:
                if name in ("kernarg_segment_ptr", "dispatch_ptr"):
                    cmds.patches[name] = first + pos
                pos += count
        ini = sh.map.regCOMPUTE_DISPATCH_INITIATOR
        flags = {"COMPUTE_SHADER_EN": 1, "FORCE_START_AT_000": 1}
        if "CS_W32_EN" in ini.fields and d.wave32:
            flags["CS_W32_EN"] = 1
        cmds.packet("DISPATCH_DIRECT", DIM_X=grid[0], DIM_Y=grid[1], DIM_Z=grid[2], DISPATCH_INITIATOR=ini.encode(**flags))
        return {"kernarg": ka, "blob": blob, "packet": pkt_addr - ka if d.properties["ENABLE_SGPR_DISPATCH_PTR"] else None}


_SCALAR_FMT = {("float", 4): "f", ("double", 8): "d", ("half", 2): "e"}


def arg_format(kernel: "Kernel", args: tuple) -> tuple[struct.Struct | None, list[int]]:
    """One struct for all explicit arguments (None if they do not fit one) and the indices of the pointers,
    which take Buffer.addr."""
    fmt, ptr = "<", []
    pos = 0
    for i, a in enumerate(kernel.meta.explicit_args):
        if a.offset < pos:
            fmt = None
            break
        fmt += "x" * (a.offset - pos)
        if a.value_kind == "global_buffer":
            fmt += "Q"
            ptr.append(i)
        elif a.value_kind == "by_value" and (a.type_name.strip(), a.size) in _SCALAR_FMT:
            fmt += _SCALAR_FMT[(a.type_name.strip(), a.size)]
        elif a.value_kind == "by_value" and a.size in (1, 2, 4, 8) and a.type_name.strip() not in ("", "bool"):
            fmt += {1: "b", 2: "h", 4: "i", 8: "q"}[a.size]
        elif a.value_kind == "by_value" and not a.type_name.strip() and a.size in (2, 4, 8):
            # untyped (LLVM IR): the plan is keyed by the Python types of these arguments
            fmt += ({2: "e", 4: "f", 8: "d"} if isinstance(args[i], float) else {2: "h", 4: "i", 8: "q"})[a.size]
        else:
            fmt = None
            break
        pos = a.offset + a.size
    return (struct.Struct(fmt) if fmt else None), ptr


class Plan:
    """A launch of one kernel with one grid/block/LDS/scratch shape, encoded once: per call only the
    kernel arguments, the kernarg address and the signal value are written."""

    def __init__(self, kernel: "Kernel", args: tuple, grid, block, wait: bool):
        dev = kernel.prg.dev
        cmds = dev.queue.commands()
        cmds.acquire()
        self.ts = None
        if wait:
            self.ts = len(cmds.dw) + 3                       # ADDR_LO of the first timestamp RELEASE_MEM
            cmds.timestamp(0)
        out = kernel.encode(cmds, args, grid, block)
        if wait:
            self.ts2 = len(cmds.dw) + 3
            cmds.timestamp(0)
        self.work = len(cmds.dw)                             # dwords before the completion signal
        self.value = len(cmds.dw) + 5                        # DATA_LO of the timeline RELEASE_MEM
        cmds.release(dev.queue.timeline.addr, 0, interrupt=dev.iface.signal_event)
        self.dw = np.array(cmds.dw, np.uint32)
        self.grid, self.block = grid, block
        self.ka_idx = cmds.patches.get("kernarg_segment_ptr")
        self.pkt_idx = cmds.patches.get("dispatch_ptr")
        self.blob = bytearray(out["blob"])
        self.pkt_off = out["packet"]
        self.size = ((len(self.blob) + 63) & ~63) + (64 if self.pkt_off is not None else 0)
        if self.pkt_off is not None:                         # the AQL packet names the kernarg address at 40
            self.pkt = bytearray(dev.kernargs.read(out["kernarg"] + self.pkt_off, 64))
        self.fmt, self.ptr = arg_format(kernel, args)


class BoundLaunch:
    """A kernel launch (arguments included) bound into an indirect buffer."""

    def __init__(self, kernel: Kernel, args: tuple, grid, block):
        from .queue import Bound
        dev = self.dev = kernel.prg.dev
        p = kernel.plan(args, grid, block, False)
        self.kalloc = dev.allocator.alloc(p.size, "gtt")         # its own kernargs: the ring moves on
        self.ka, off, mv = self.kalloc.va, 0, self.kalloc.cpu.mv
        kernel.pack_into(p, args, mv, off)
        dw = p.dw.copy()
        if p.ka_idx is not None:
            dw[p.ka_idx], dw[p.ka_idx + 1] = self.ka & 0xFFFFFFFF, self.ka >> 32
        if p.pkt_off is not None:
            pa = self.ka + p.pkt_off
            struct.pack_into("<Q", p.pkt, 40, self.ka)
            mv[off + p.pkt_off:off + p.pkt_off + 64] = p.pkt
            dw[p.pkt_idx], dw[p.pkt_idx + 1] = pa & 0xFFFFFFFF, pa >> 32
        # the work lives in the IB; the completion signal goes to the ring with each submission, because a
        # value patched into a shared IB would be wrong as soon as two submissions are in flight
        self.bound = Bound(dev.queue, dw[:p.work], {})
        self.tail = np.concatenate([self.bound.ib, dw[p.work:]])
        self.vi = len(self.bound.ib) + (p.value - p.work)

    def submit(self) -> int:
        """Run it again (a 4-dword IB packet and the 8-dword completion signal); returns the timeline value."""
        value = self.dev.queue.timeline.next()
        t = self.tail
        t[self.vi], t[self.vi + 1] = value & 0xFFFFFFFF, value >> 32
        self.dev.queue.submit(t)
        return value


class Program:
    """A code object loaded on one device: a handle on its code memory (shared with the other handles of
    the same code object on the device, see amdq.runtime.codemem for who owns what).

    `free()` gives this handle's share back; the memory is freed once no handle and not the program
    cache hold it, after the GPU finished the work submitted so far. Afterwards launches of this
    handle's kernels raise InvalidArgument. A handle nothing references any more is freed when it is
    garbage collected; one still referenced is never freed under its user by a cache eviction.
    """

    def __init__(self, dev: "Device", img: ProgramImage, code: "LoadedCode | None" = None):
        import weakref
        from .codemem import LoadedCode
        self.dev, self.img = dev, img
        t0 = time.perf_counter()
        self.code = code if code is not None else LoadedCode(dev, img)   # we own one reference to it
        self.base = self.code.base
        self.load_time = time.perf_counter() - t0
        self._freed = False
        self._release = weakref.finalize(self, self.code.release)      # at most once: free() or collection
        self._release.atexit = False
        self.kernels = list(img.kernels)
        self._k = {n: Kernel(self, k) for n, k in img.kernels.items()}

    @property
    def alloc(self):
        """The code memory (None once freed)."""
        return None if self._freed else self.code.alloc

    @property
    def freed(self) -> bool:
        return self._freed or self.code.freed

    def free(self) -> None:
        """Give this handle's code memory back (idempotent); see the class docstring."""
        if self._freed:
            return
        self._freed = True
        self._release()
        if not self.dev.closed:
            self.dev._reclaim()

    def __getitem__(self, name: str) -> Kernel:
        if name not in self._k:
            raise KeyError(f"no kernel {name!r} in the program (kernels: {', '.join(self.kernels)})")
        return self._k[name]

    def __repr__(self) -> str:
        state = " (freed)" if self.freed else ""
        return f"<Program {self.img.arch} {', '.join(self.kernels)} at {self.base:#x}{state}>"
