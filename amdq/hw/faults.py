"""Hardware exception records: what a GPU records when it stops a queue, one record per kind.

Sources (what the hardware reports, not code): Linux amdgpu `gmc_v11_0.c`/`gmc_v9_0.c` and
`amdgpu_gmc.c` (a VM fault: faulting address, read or write, the UTCL2 client, the VMID, from
GCVM_L2_PROTECTION_FAULT_STATUS/ADDR), `gfx_v11_0.c` SQ interrupts (an illegal instruction or a trap:
the wave's PC and the instruction words), CP_INT_STATUS / SDMA interrupt sources (a bad opcode: the
queue and the packet at its read pointer), `kfd_ioctl.h` (`kfd_hsa_memory_exception_data`: VA,
NotPresent/ReadOnly/NoExecute). The simulated GPU writes these records; the interface turns each into
its `amdq.errors` class (`amdq.iface.exceptions`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import errors as E


@dataclass(frozen=True)
class MemoryFault:
    """A VM fault: an access to an address the page tables do not map (or map read-only)."""
    va: int
    write: bool
    client: str                             # UTCL2 client: "shader", "CP", "SDMA", ...
    vmid: int = 0
    reason: str = "not mapped"
    pc: int | None = None                   # the instruction, when a shader made the access
    instruction: str | None = None
    kind = "memory fault"

    def text(self) -> str:
        by = f"{self.instruction} at pc {self.pc:#x} ({self.client})" if self.instruction and self.pc is not None \
            else self.client
        return f"{'write' if self.write else 'read'} at {self.va:#x} by {by}: {self.reason}"


@dataclass(frozen=True)
class IllegalInstruction:
    """A wave met instruction words it cannot execute: `implemented` False means valid in the ISA but not
    modelled by the simulated shader core."""
    pc: int
    reason: str
    words: tuple[int, ...] = ()
    mnemonic: str | None = None
    encoding: str | None = None
    implemented: bool = True
    kind = "illegal instruction"

    def text(self) -> str:
        return self.reason if f"{self.pc:#x}" in self.reason else f"{self.reason} at pc {self.pc:#x}"


@dataclass(frozen=True)
class BadPacket:
    """A command processor or SDMA engine met a packet it cannot execute."""
    where: str                              # "ring dword 12", "IB @ 0x... dword 3", "AQL packet 5", ...
    reason: str
    packet: str | None = None
    kind = "bad packet"

    def text(self) -> str:
        return self.reason


@dataclass(frozen=True)
class WaveException:
    """The waves of a dispatch stopped for another reason: a trap without handler, a barrier that can
    never complete, a register outside the wave's allocation, or waves killed (by a reset or injection)."""
    reason: str
    pc: int | None = None
    killed: bool = False
    kind = "wave exception"

    def text(self) -> str:
        return self.reason


@dataclass(frozen=True)
class EngineError:
    """The simulated engine itself failed (a simulator bug): reported so waiters do not hang."""
    reason: str
    kind = "engine error"

    def text(self) -> str:
        return self.reason


Record = MemoryFault | IllegalInstruction | BadPacket | WaveException | EngineError


@dataclass(frozen=True)
class QueueException:
    """One exception as the engine that stopped reports it: the record and where it happened."""
    queue: str                              # the engine's name for the queue
    record: Record
    queue_id: int | None = None             # the interface's queue id, when the interface knows it
    kernel_pc: int | None = None            # entry address of the running dispatch's program
    kernel_object: int | None = None        # its kernel descriptor (AQL dispatches)
    packet: str | None = None               # the packet at the read pointer, decoded
    extra: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return self.record.text()


VA_MASK = (1 << 64) - 1                  # a fault address register pair holds 64 bits


def record_of(e: Exception, client: str = "shader", vmid: int = 0) -> Record:
    """The record of an exception raised inside the simulated GPU (its engines and shader core raise
    amdq.errors classes with structured `info`)."""
    info = getattr(e, "info", {}) or {}
    msg = str(e)
    if isinstance(e, E.GPUFault) and getattr(e, "address", None) is not None:
        return MemoryFault(int(e.address) & VA_MASK, bool(info.get("write", False)), info.get("client", client),
                           info.get("vmid", vmid), info.get("reason", "not mapped"), info.get("pc"),
                           info.get("instruction"))
    if isinstance(e, (E.IllegalInstruction, E.UnsupportedInstruction)):
        pc = e.address if e.address is not None else info.get("pc", 0)
        return IllegalInstruction(int(pc), msg, tuple(info.get("words", ())), info.get("mnemonic"),
                                  info.get("encoding"), isinstance(e, E.IllegalInstruction))
    if isinstance(e, E.InvalidPacket):
        return BadPacket(info.get("where", "?"), msg, info.get("packet"))
    if isinstance(e, E.GPUException):
        return WaveException(msg, info.get("pc"), bool(info.get("killed")))
    return EngineError(f"simulator internal error: {type(e).__name__}: {e}")
