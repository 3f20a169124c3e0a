"""Interrupt records: an IH ring entry decoded by what its ids mean on the device's generation (amdq.hw.ih_ids).

`decode(entry, target, num_xcc)` names the client and the source and says what the entry is about:
* "eop"        an end of pipe (RELEASE_MEM with INT_SEL, an AQL signal's event): me, pipe, queue, xcc (gfx942);
               `context_id` is RELEASE_MEM's INT_CTXID;
* "sdma_trap"  an SDMA TRAP: instance, queue; `context_id` is the trap's INT_CONTEXT;
* "vm_fault"   a VM fault: va, write, retry, the hub and the ring id's protection bits; `IH.drain` adds the
               decoded registers (`fault`, amdq.am.vmfault.VMFault);
* "bad_opcode", "sq" the CP's bad-opcode and the SQ's interrupt; "other" anything else (named, not decoded).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..hw import ih as H
from ..hw import ih_ids as I
from ..hw.targets import Target

if TYPE_CHECKING:
    from .vmfault import VMFault


@dataclass(frozen=True)
class Interrupt:
    """One decoded interrupt vector."""
    client: str
    source: str
    kind: str                        # eop, sdma_trap, vm_fault, bad_opcode, sq, other
    ring_id: int
    vmid: int
    src_data: tuple[int, ...]
    where: dict = field(default_factory=dict)   # the kind's decoded fields (see the module doc)
    client_id: int = 0
    src_id: int = 0
    vmid_src: int = 0
    pasid: int = 0
    node_id: int = 0
    timestamp: int = 0
    fault: "VMFault | None" = None

    @property
    def context_id(self) -> int:
        """The payload's first dword: RELEASE_MEM's INT_CTXID, an SDMA trap's context."""
        return self.src_data[0]

    def with_fault(self, fault: "VMFault") -> "Interrupt":
        return replace(self, fault=fault)

    def text(self) -> str:
        w = " ".join(f"{k}={v:#x}" if k == "va" else f"{k}={v}" for k, v in self.where.items())
        return f"{self.client}/{self.source} ring {self.ring_id:#x} vmid {self.vmid}{' ' + w if w else ''}"


def kind_of(fam: I.Family, client_id: int, src_id: int) -> str:
    """What an entry with these ids is about on `fam` (see the module doc): the one classifier `decode` and
    `IH.drain(kinds=...)` share."""
    ids = (client_id, src_id)
    if ids == fam.eop:
        return "eop"
    trap = fam.sdma_trap(0)
    if ids == trap or (fam.is_sdma(client_id) and src_id == trap[1]):
        return "sdma_trap"
    if ids in (fam.gfxhub_fault, fam.mmhub_fault):
        return "vm_fault"
    if ids == fam.bad_opcode:
        return "bad_opcode"
    return "sq" if ids == fam.sq else "other"


def decode(entry: H.IVEntry, target: Target, num_xcc: int = 1) -> Interrupt:
    """The record of one IV entry on `target` (num_xcc: the XCCs present, for gfx942's node ids)."""
    fam = I.family(target.gfx_version)
    kind = kind_of(fam, entry.client_id, entry.src_id)
    where: dict = {}
    if kind == "eop":
        where = {k.lower(): v for k, v in I.EOP_RING.decode(entry.ring_id).items()}
        if fam.name == "soc15":
            where["xcc"] = I.xcc_of_node(entry.node_id, num_xcc)
    elif kind == "sdma_trap":
        if fam.name == "soc21":
            where = {k.lower(): v for k, v in I.SDMA_RING.decode(entry.ring_id).items()}
        else:
            aid = I.AID_NODES.index(entry.node_id) if entry.node_id in I.AID_NODES else 0
            client = I.SOC15_CLIENTS[entry.client_id]
            where = {"instance": aid * I.SDMA_PER_AID + int(client[len("SDMA"):]), "queue": entry.ring_id}
    elif kind == "vm_fault":
        d1 = I.FAULT_DATA1.decode(entry.src_data[1])
        prot = I.FAULT_RING.decode(entry.ring_id)
        where = {"va": I.fault_va(entry.src_data), "write": bool(d1["WRITE"]), "retry": bool(d1["RETRY"]),
                 "hub": "MMHUB" if (entry.client_id, entry.src_id) == fam.mmhub_fault else "GC",
                 "prot": tuple(k[len("PROT_"):] for k, v in prot.items() if v)}
    elif kind == "bad_opcode":
        where = {k.lower(): v for k, v in I.EOP_RING.decode(entry.ring_id & 0xFF).items()}
    return Interrupt(fam.client_name(entry.client_id), fam.source_name(entry.client_id, entry.src_id), kind,
                     entry.ring_id, entry.vmid, tuple(entry.src_data), where, entry.client_id, entry.src_id,
                     entry.vmid_src, entry.pasid, entry.node_id, entry.timestamp)
