"""amdq: a userspace driver and runtime for AMD GPUs, with a simulated GPU for machines without one.

The names below are imported when first used (PEP 562): `import amdq.sim.shader.jit` (the compile helper's process)
or `import amdq.errors` does not load the runtime, the code-object tools and numpy's users with them."""
from __future__ import annotations

import importlib
import importlib.util

from . import errors
from .errors import AmdqError

__version__ = "0.1.0"
_LAZY = {"compile": "codeobj", "load_code_object": "codeobj", "TARGETS": "hw.targets", "get_target": "hw.targets",
         "Device": "runtime.device", "open_device": "runtime.device", "Array": "runtime.array",
         "LDS": "runtime.kernargs", "Buffer": "runtime.memory", "Kernel": "runtime.program",
         "Launch": "runtime.program", "LaunchRecord": "runtime.program", "Program": "runtime.program"}
__all__ = ["open_device", "Device", "Buffer", "Array", "Program", "Kernel", "Launch", "LaunchRecord", "LDS", "compile",
           "load_code_object", "errors", "AmdqError", "TARGETS", "get_target"]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is not None:
        value = getattr(importlib.import_module(f".{mod}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)      # a subpackage (amdq.runtime, amdq.sim, ...)
    else:
        raise AttributeError(f"module 'amdq' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
