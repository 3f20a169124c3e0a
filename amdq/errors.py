"""The exceptions amdq raises. Every one derives from AmdqError."""
from __future__ import annotations


class AmdqError(Exception):
    """Base class of every amdq error."""


class UnsupportedTarget(AmdqError):
    """A GPU target amdq does not support (the message lists the supported ones)."""


class CodeObjectError(AmdqError):
    """A malformed, truncated or unsupported AMDGPU code object."""


class CompileError(AmdqError):
    """LLVM refused the input; the message carries LLVM's diagnostic."""


class OutOfMemory(AmdqError):
    """An allocation did not fit; the message names the sizes involved."""


class DeviceError(AmdqError):
    """A device could not be opened or used."""


class DeviceLost(DeviceError):
    """The device went away (reset, unplugged, off the bus)."""


class GPUFault(AmdqError):
    """The GPU faulted (page fault, illegal instruction, bad packet)."""

    def __init__(self, msg: str, address: int | None = None, **info):
        super().__init__(msg)
        self.address = address
        self.info = info


class GPUTimeout(AmdqError):
    """A wait did not complete in time; carries what the driver knows of the stuck queue."""

    def __init__(self, msg: str, **info):
        super().__init__(msg)
        self.info = info


class UnsupportedInstruction(GPUFault):
    """The simulated shader core met an instruction it does not implement."""


class InvalidArgument(AmdqError, TypeError):
    """A kernel argument that does not fit its declared kind (also a TypeError)."""


class TargetMismatch(CodeObjectError):
    """A code object built for another target than the device's."""


class UnsupportedCodeObjectTarget(UnsupportedTarget, CodeObjectError):
    """A code object whose ELF machine is not a target amdq supports."""


class LDSLimitExceeded(AmdqError):
    """A dispatch asks for more LDS than a workgroup may have on the target."""


class KernelLDSTooLarge(CodeObjectError, LDSLimitExceeded):
    """A kernel's static LDS alone exceeds the target's limit (raised at load)."""
