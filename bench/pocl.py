"""The limit a simulator cannot beat: the same OpenCL C kernels compiled natively for this CPU by PoCL
(Debian's `pocl-opencl-icd`), driven through the `pyopencl` package, in the benchmark's own process.

`PoCL.open()` returns None and says why (no pyopencl, no PoCL platform) so a benchmark can skip the column
with a note. Kernel time is the OpenCL profiling interval of the NDRange command (COMMAND_START..END: the
kernel's execution, not the host's enqueue), best of several runs after a warm-up; the outputs of the last run
are returned so the caller checks them like amdq's. Work sizes follow amdq's convention: grid in workgroups,
block in work-items (OpenCL's global size is grid * block).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

KERNELS = Path(__file__).resolve().parents[1] / "tests" / "kernels"
PLATFORM = "Portable Computing Language"          # the PoCL ICD's CL_PLATFORM_NAME


class PoCL:
    """One PoCL CPU device, a profiling queue and the programs built for it (by source)."""

    def __init__(self, cl, device):
        self.cl, self.device = cl, device
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.programs: dict[str, object] = {}
        self.kernels: dict[tuple[int, str], object] = {}

    @classmethod
    def open(cls) -> tuple["PoCL | None", str]:
        """(PoCL, description) or (None, why it is not available)."""
        try:
            import pyopencl as cl
        except ImportError:
            return None, "pyopencl is not installed (pip install pyopencl; apt-get install pocl-opencl-icd)"
        try:
            plats = [p for p in cl.get_platforms() if PLATFORM in p.name]
        except cl.Error as e:                                   # no ICD at all
            return None, f"no OpenCL platform ({e}); apt-get install pocl-opencl-icd"
        devs = [d for p in plats for d in p.get_devices(device_type=cl.device_type.CPU)]
        if not devs:
            return None, "no PoCL CPU device (apt-get install pocl-opencl-icd)"
        d = devs[0]
        ver = re.search(r"PoCL (\S+)", d.platform.version or "")
        return cls(cl, d), f"PoCL {ver.group(1) if ver else '?'} on {d.name} ({d.max_compute_units} threads)"

    @property
    def threads(self) -> int:
        return int(self.device.max_compute_units)

    def program(self, src: str, options: tuple[str, ...] = ()):
        """The program built from `src` (OpenCL C text or a file name under tests/kernels)."""
        text = (KERNELS / src).read_text() if src.endswith(".cl") and "\n" not in src else src
        key = text + "\0" + " ".join(options)
        prg = self.programs.get(key)
        if prg is None:
            prg = self.programs[key] = self.cl.Program(self.ctx, text).build(options=list(options))
        return prg

    def run(self, src: str, kernel: str, args: list, grid, block, repeat: int = 5,
            options: tuple[str, ...] = ()) -> tuple[list[np.ndarray], float]:
        """Run `kernel` once to warm up, then `repeat` times; (outputs of the arrays in args, best seconds).
        Python floats are passed as float, ints as int (the kernels' scalar types)."""
        cl = self.cl
        prg = self.program(src, options)
        k = self.kernels.get((id(prg), kernel))
        if k is None:
            k = self.kernels[(id(prg), kernel)] = cl.Kernel(prg, kernel)
        grid = tuple(grid) + (1,) * (3 - len(tuple(grid))) if not isinstance(grid, int) else (grid, 1, 1)
        block = tuple(block) + (1,) * (3 - len(tuple(block))) if not isinstance(block, int) else (block, 1, 1)
        mf = cl.mem_flags
        bufs, cargs = [], []
        for a in args:
            if isinstance(a, np.ndarray):
                b = cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(a))
                bufs.append((a, b))
                cargs.append(b)
            elif isinstance(a, float):
                cargs.append(np.float32(a))
            else:
                cargs.append(np.int32(a))
        k.set_args(*cargs)
        gsize = tuple(g * b for g, b in zip(grid, block))
        best = float("inf")
        for i in range(repeat + 1):
            for a, b in bufs:                                  # every run starts from the same inputs
                cl.enqueue_copy(self.queue, b, np.ascontiguousarray(a))
            ev = cl.enqueue_nd_range_kernel(self.queue, k, gsize, block)
            ev.wait()
            if i:
                best = min(best, (ev.profile.end - ev.profile.start) * 1e-9)
        outs = []
        for a, b in bufs:
            o = np.empty_like(np.ascontiguousarray(a))
            cl.enqueue_copy(self.queue, o, b)
            outs.append(o)
        self.queue.finish()
        return outs, best


__all__ = ["PoCL"]
