"""Run a test kernel through the public API on a simulated device (the same calls as on hardware): SIMKFD
(the KFD interface over the simulated kernel driver) or SIMPCI (the AM driver over the simulated PCI
function; `interface="SIMPCI"`)."""
from __future__ import annotations

import os
import tempfile

import numpy as np

import amdq
from clang import compile_cl

_devices: dict[str, amdq.Device] = {}
_state: str | None = None


def device(spec: str = "SIMKFD+AMD:gfx1100", suffix: str = "") -> amdq.Device:
    """One device per spec (and per simulator mode, named by `suffix`), kept for the test session. A simulated
    PCI function keeps its state in a directory of this process (parallel test workers each boot their own)."""
    global _state
    key = f"{spec}/{suffix}"
    if key not in _devices or _devices[key].closed:
        if spec.upper().startswith("SIMPCI"):
            _state = _state or tempfile.mkdtemp(prefix="amdq-simpci-")
            old = os.environ.get("AMDQ_SIM_STATE")
            os.environ["AMDQ_SIM_STATE"] = os.path.join(_state, suffix or "default")
            try:
                _devices[key] = amdq.open_device(spec)
            finally:
                if old is None:
                    os.environ.pop("AMDQ_SIM_STATE", None)
                else:
                    os.environ["AMDQ_SIM_STATE"] = old
        else:
            _devices[key] = amdq.open_device(spec)
    return _devices[key]


def run_cl(src: str, kernel: str, args: list, grid=(1, 1, 1), block=(64, 1, 1), arch="gfx1100", flags=(),
           spec: str | None = None, spec_suffix: str = "", interface: str = "SIMKFD"):
    """Same contract as tests.harness.run_cl: arrays in args are uploaded and returned after the launch."""
    dev = device(spec or f"{interface}+AMD:{arch}", spec_suffix)
    prg = dev.load(compile_cl(src, arch, flags=tuple(flags)).read_bytes())
    bufs = [dev.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    prg[kernel](*bufs, grid=grid, block=block, wait=True)
    outs = [np.frombuffer(b.read(a.nbytes), a.dtype).reshape(a.shape).copy()
            for a, b in zip(args, bufs) if isinstance(a, np.ndarray)]
    engines = getattr(getattr(dev.sim, "gpu", dev.sim), "engines", {})
    queue = next(iter(engines.values())) if engines else None
    return outs, queue.last_stats if queue is not None else None
