"""Run a test kernel through the public API on a simulated device (the same calls as on hardware)."""
from __future__ import annotations

import numpy as np

import amdq
from clang import compile_cl

_devices: dict[str, amdq.Device] = {}


def device(spec: str = "SIMKFD+AMD:gfx1100", suffix: str = "") -> amdq.Device:
    """One device per spec (and per simulator mode, named by `suffix`), kept for the test session."""
    key = f"{spec}/{suffix}"
    if key not in _devices or _devices[key].closed:
        _devices[key] = amdq.open_device(spec)
    return _devices[key]


def run_cl(src: str, kernel: str, args: list, grid=(1, 1, 1), block=(64, 1, 1), arch="gfx1100", flags=(),
           spec: str | None = None, spec_suffix: str = ""):
    """Same contract as tests.harness.run_cl: arrays in args are uploaded and returned after the launch."""
    dev = device(spec or f"SIMKFD+AMD:{arch}", spec_suffix)
    prg = dev.load(compile_cl(src, arch, flags=tuple(flags)).read_bytes())
    bufs = [dev.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    prg[kernel](*bufs, grid=grid, block=block, wait=True)
    outs = [np.frombuffer(b.read(a.nbytes), a.dtype).reshape(a.shape).copy()
            for a, b in zip(args, bufs) if isinstance(a, np.ndarray)]
    queue = next(iter(dev.sim.engines.values())) if dev.sim else None
    return outs, queue.last_stats if queue is not None else None
