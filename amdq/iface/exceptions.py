"""Hardware exception records (amdq.hw.faults) turned into `amdq.errors` exceptions, named for what they
are and with what the runtime knows: the kernel that ran and the allocation nearest a faulting address."""
from __future__ import annotations

from typing import Callable

from .. import errors as E
from ..hw import faults as F


def to_error(exc: F.QueueException, kernel_name: Callable[[int | None, int | None], str | None],
             where: Callable[[int], str | None], queue: str | None = None) -> E.GPUException:
    """The amdq.errors exception for one queue exception. `kernel_name(pc, kernel_object)` names the kernel
    of the dispatch, `where(va)` places an address among the device's allocations."""
    r = exc.record
    q = queue or exc.queue
    if "xcc" in exc.extra:                         # the die whose packet processor or waves stopped the queue
        q = f"{q} on XCC {exc.extra['xcc']}"
    kernel = kernel_name(exc.kernel_pc, exc.kernel_object)
    in_kernel = f" in kernel {kernel}" if kernel else ""
    info = {"queue": q, "kernel": kernel, "record": r, "packet": exc.packet, **exc.extra}
    if isinstance(r, F.MemoryFault):
        place = where(r.va)
        near = f" ({place})" if place else ""
        return E.GPUFault(f"GPU page fault on {q}{in_kernel}: {r.text()}{near}", address=r.va, write=r.write,
                          client=r.client, near=place, pc=r.pc, **info)
    if isinstance(r, F.IllegalInstruction):
        cls = E.IllegalInstruction if r.implemented else E.UnsupportedInstruction
        what = "illegal instruction" if r.implemented else "instruction the simulated shader core does not implement"
        return cls(f"{what} on {q}{in_kernel}: {r.text()}", address=r.pc, pc=r.pc, mnemonic=r.mnemonic,
                   encoding=r.encoding, words=r.words, **info)
    if isinstance(r, F.BadPacket):
        return E.InvalidPacket(f"{q} stopped at {r.where}{in_kernel}: {r.text()}", where=r.where, **info)
    if isinstance(r, F.WaveException):
        cls = E.WaveKilled if r.killed else E.GPUException
        return cls(f"wave exception on {q}{in_kernel}: {r.text()}", address=r.pc, pc=r.pc, **info)
    return E.GPUException(f"{q} stopped{in_kernel}: {r.text()}", **info)
