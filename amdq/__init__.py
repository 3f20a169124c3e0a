"""amdq: a userspace driver and runtime for AMD GPUs, with a simulated GPU for machines without one."""
from . import errors
from .codeobj import compile, load_code_object
from .errors import AmdqError
from .hw.targets import TARGETS, get_target
from .runtime.device import Device, open_device
from .runtime.array import Array
from .runtime.kernargs import LDS
from .runtime.memory import Buffer
from .runtime.program import Kernel, Launch, LaunchRecord, Program

__version__ = "0.1.0"
__all__ = ["open_device", "Device", "Buffer", "Array", "Program", "Kernel", "Launch", "LaunchRecord", "LDS", "compile",
           "load_code_object", "errors", "AmdqError", "TARGETS", "get_target"]
