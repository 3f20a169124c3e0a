"""What every simulated hardware queue shares: how it stops on an exception (and says so with an
interrupt carrying the hardware record), hang and kill injection, and the progress it has made.

A queue that stopped consumes nothing more until the driver destroys it (KFD) or resets it (AM); its
read pointer stays at the packet it stopped on, as on hardware.
"""
from __future__ import annotations

from ..hw import faults as F

# interrupt source of each record kind (the IH source a real GPU raises for it)
SOURCES = {"memory fault": "VM_FAULT", "illegal instruction": "SQ_INTERRUPT", "wave exception": "SQ_INTERRUPT",
           "bad packet": "CP_BAD_OPCODE", "engine error": "CP_BAD_OPCODE"}


class QueueEngine:
    """Base of the command processor's queues (PM4, AQL) and of the SDMA engine's queues."""

    kind = "cp"                               # which injections reach it: "cp" or "sdma"

    def __init__(self, gpu, vmid: int, name: str):
        self.gpu, self.vmid, self.name = gpu, vmid, name
        self.exception: F.QueueException | None = None
        self.hung = False                       # injected hang: consumes nothing until reset
        self.retired = 0                        # packets retired (progress)
        self.queue_id: int | None = None        # set by the kernel driver that created it
        self.hang_at: int | None = None         # an armed hang: the packet count at which it takes hold

    @property
    def fault(self) -> F.QueueException | None:
        return self.exception

    @property
    def stopped(self) -> bool:
        """Stopped by an exception or hung: it consumes nothing (a hang armed by injection takes hold here)."""
        if self.hang_at is not None and self.retired >= self.hang_at:
            self.hung = True
        return self.exception is not None or self.hung

    @property
    def progress(self) -> int:
        """A number that grows while the queue does work: packets retired plus waves retired."""
        return self.retired + self.waves_retired()

    def waves_retired(self) -> int:
        return 0

    def context(self) -> dict:
        """Where the queue is, for an exception record: kernel_pc, kernel_object, packet."""
        return {}

    def stop(self, record: F.Record, **where) -> None:
        """Stop on a hardware exception: record it, drop running work, raise the interrupt."""
        if self.exception is not None:
            return
        ctx = {**self.context(), **where}
        self.exception = F.QueueException(self.name, record, self.queue_id, ctx.get("kernel_pc"),
                                          ctx.get("kernel_object"), ctx.get("packet"),
                                          {"xcc": ctx["xcc"]} if "xcc" in ctx else {})
        self.drop()
        self.gpu.interrupt(SOURCES[record.kind], 0, self.vmid, exception=self.exception, engine=self,
                           address=getattr(record, "va", None), queue=self.name, reason=record.text())

    def stop_on(self, e: Exception, client: str) -> None:
        """Stop on an exception raised while executing (memory fault, illegal instruction, ...)."""
        self.stop(F.record_of(e, client, self.vmid))

    def bad_packet(self, reason: str, where: str, packet: str | None = None) -> None:
        self.stop(F.BadPacket(where, reason, packet))

    def drop(self) -> None:
        """Forget work in progress (running dispatches are killed)."""

    def kill(self) -> None:
        """The queue is being destroyed: its waves are killed, nothing runs any more."""
        self.drop()
        self.hung = True
