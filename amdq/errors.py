"""The exceptions amdq raises. Every one derives from AmdqError."""
from __future__ import annotations


class AmdqError(Exception):
    """Base class of every amdq error."""


class UnsupportedTarget(AmdqError):
    """A GPU target amdq does not support (the message lists the supported ones)."""


class CodeObjectError(AmdqError):
    """A malformed, truncated or unsupported AMDGPU code object."""


class FirmwareError(AmdqError):
    """A firmware file that is malformed (the message names the file and the field) or cannot be found."""


class FirmwareMissing(FirmwareError, FileNotFoundError):
    """A firmware file found in none of the searched directories (the message names them and the package)."""


class CompileError(AmdqError):
    """The compiler (LLVM, clang) refused the input; the message carries its diagnostic. `lines` lists the
    lines of the user's source the errors are at (as the user counts them, 1-based), `log` is the compiler's
    whole output."""

    def __init__(self, msg: str, lines: list[int] | tuple[int, ...] = (), log: str = ""):
        super().__init__(msg)
        self.lines = list(lines)
        self.log = log


class OutOfMemory(AmdqError):
    """An allocation did not fit; the message names the sizes involved."""


class InvalidFree(AmdqError, ValueError):
    """A free of an offset or address that is not a live allocation of that allocator (a double free, or one
    it never handed out); also a ValueError."""


class VMError(AmdqError, ValueError):
    """A GPU page-table operation that cannot be done: an overlapping map, an unaligned address or size,
    unmapping what is not mapped; also a ValueError."""


class DeviceError(AmdqError):
    """A device could not be opened or used."""


class PSPError(DeviceError):
    """The PSP (MP0) refused a command; `status` is the code it answered (see amdq.hw.psp.STATUS_NAMES)."""

    def __init__(self, msg: str, status: int | None = None):
        super().__init__(msg)
        self.status = status


class FirmwareRefused(FirmwareError):
    """The PSP refused a firmware image (bootloader component, IP firmware or TA); the message names the
    file, the part and the status; `status` is the code."""

    def __init__(self, msg: str, status: int | None = None):
        super().__init__(msg)
        self.status = status


class DeviceLost(DeviceError):
    """The device went away (reset, unplugged, off the bus)."""


class DeviceClosed(DeviceError):
    """The device was closed; open a new one."""


class GPUException(AmdqError):
    """The GPU stopped a queue: the base of the hardware exceptions below. `info` carries what the driver
    knows (queue, kernel, packet, the hardware record in `info["record"]`)."""

    def __init__(self, msg: str, address: int | None = None, **info):
        super().__init__(msg)
        self.address = address
        self.info = info


class GPUFault(GPUException):
    """A GPU memory fault: an access to an address that is not mapped (or not writable); `address` names it."""


class IllegalInstruction(GPUException):
    """A wave met an instruction word that is not a valid instruction; `address` is its PC."""


class UnsupportedInstruction(GPUException):
    """The simulated shader core met a valid instruction it does not implement; `address` is its PC."""


class InvalidPacket(GPUException):
    """A command processor or SDMA engine met a packet it cannot execute (undecodable, reserved field)."""


class WaveKilled(GPUException):
    """The GPU killed the waves of a dispatch (for example on a queue reset)."""


class GPUTimeout(AmdqError):
    """A wait did not complete in time; carries what the driver knows of the stuck queue."""

    def __init__(self, msg: str, **info):
        super().__init__(msg)
        self.info = info


class InvalidArgument(AmdqError, TypeError):
    """A kernel argument that does not fit its declared kind (also a TypeError)."""


class DTypeMismatch(InvalidArgument):
    """A typed device array passed for a pointer argument whose element type (the kernel metadata's `.type_name`,
    e.g. "float*") is another one (also a TypeError)."""


class TargetMismatch(CodeObjectError):
    """A code object built for another target than the device's."""


class UnsupportedCodeObjectTarget(UnsupportedTarget, CodeObjectError):
    """A code object whose ELF machine is not a target amdq supports."""


class LDSLimitExceeded(AmdqError):
    """A dispatch asks for more LDS than a workgroup may have on the target."""


class KernelLDSTooLarge(CodeObjectError, LDSLimitExceeded):
    """A kernel's static LDS alone exceeds the target's limit (raised at load)."""


class RegisterError(AmdqError):
    """A register access that cannot be made: unknown register, field or address, or a value that does not fit."""


class UnknownRegister(RegisterError, AttributeError):
    """No register of that name (or at that address) in the register map (also an AttributeError)."""


class UnknownField(RegisterError, KeyError):
    """A register has no field of that name, or a field no value of that name (also a KeyError)."""

    def __str__(self) -> str:          # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class FieldOverflow(RegisterError, ValueError):
    """A value does not fit its register field (also a ValueError)."""


class DiscoveryError(AmdqError):
    """A malformed IP discovery binary; the message names the field that is wrong."""


class AMTimeout(GPUTimeout):
    """The AM driver waited for the GPU (a register, a PSP command, an SMU message) in vain; the message names it."""


class AMBootError(DeviceError):
    """The AM driver could not boot the GPU; the message names the step and what to do."""


class SMUError(DeviceError):
    """The SMU (power-management firmware) answered a message with a failure code; `message`, `argument` and
    `response` say which message, with which argument, and what the firmware answered."""

    def __init__(self, msg: str, message: str = "", argument: int = 0, response: int = 0):
        super().__init__(msg)
        self.message, self.argument, self.response = message, argument, response
