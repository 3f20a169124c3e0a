"""Run a test kernel through the public API on a simulated device (the same calls as on hardware)."""
from __future__ import annotations

import numpy as np

import amdq
from clang import compile_cl

_devices: dict[str, amdq.Device] = {}


def device(spec: str = "SIMKFD+AMD:gfx1100") -> amdq.Device:
    if spec not in _devices or _devices[spec].closed:
        _devices[spec] = amdq.open_device(spec)
    return _devices[spec]


def run_cl(src: str, kernel: str, args: list, grid=(1, 1, 1), block=(64, 1, 1), arch="gfx1100", flags=(),
           spec: str | None = None):
    """Same contract as tests.harness.run_cl: arrays in args are uploaded and returned after the launch."""
    dev = device(spec or f"SIMKFD+AMD:{arch}")
    prg = dev.load(compile_cl(src, arch, flags=tuple(flags)).read_bytes())
    bufs = [dev.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    prg[kernel](*bufs, grid=grid, block=block, wait=True)
    outs = [np.frombuffer(b.read(a.nbytes), a.dtype).reshape(a.shape).copy()
            for a, b in zip(args, bufs) if isinstance(a, np.ndarray)]
    queue = next(iter(dev.sim.engines.values())) if dev.sim else None
    return outs, queue.last_stats if queue is not None else None
