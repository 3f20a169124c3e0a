"""VM protection faults decoded from a hub's registers and the interrupt that reported them.

A fault interrupt (client VMC: the MMHUB; UTCL2 / GFX: the GFX hub, of the XCC its node names on gfx942) carries
the page address; the hub latched the first fault in *VM_L2_PROTECTION_FAULT_STATUS (or _STATUS_LO32/HI32) and
*_FAULT_ADDR_LO32/HI32. As amdgpu's gmc_v9_0.c / gmc_v11_0.c / gmc_v12_0.c process_interrupt: a dummy read of
the GFX hub's status first (GFX10 and later: the status may not be updated yet), the status read, then
CLEAR_PROTECTION_FAULT_STATUS_ADDR set in *VM_L2_PROTECTION_FAULT_CNTL so the hub latches the next fault.
The record names the VA, read or write, the VMID, the UTCL2 client (the CID through the hub's client table,
amdq.hw.vmfault) and the status bits. Field names come from the generated register tables.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import GPUFault
from ..hw import faults as F
from ..hw import ih as H
from ..hw import ih_ids as I
from ..hw import vmfault as VF
from ..hw.regmap import Registers
from ..hw.targets import Target

HUB_PREFIX = {"GC": "regGCVM_", "MMHUB": "regMMVM_"}


@dataclass(frozen=True)
class VMFault:
    """One decoded VM fault."""
    hub: str                        # "GC" or "MMHUB"
    inst: int                       # the hub's instance (the XCC of a GFX hub on gfx942)
    va: int                         # the page address the interrupt carried
    write: bool
    vmid: int
    client: str                     # the UTCL2 client ("CPC", "OSSSYS", ...; "unknown" when the table has none)
    cid: int
    status: int                     # the raw status register (0: the hub had latched nothing)
    fields: dict                    # the status fields by name
    status_va: int | None = None    # the page address in the fault address registers (None without a status)
    retry: bool = False
    ih_client: str = ""             # the IH client that reported it (VMC, UTCL2, GFX)

    @property
    def permissions(self) -> tuple[str, ...]:
        """The PERMISSION_FAULTS bits by name (VALID, READ, WRITE, EXECUTE)."""
        return VF.permissions(self.fields.get("PERMISSION_FAULTS", 0))

    @property
    def reason(self) -> str:
        f = self.fields
        if self.permissions:
            return "permission fault (" + ", ".join(self.permissions) + ")"
        if f.get("MAPPING_ERROR"):
            return "no valid mapping"
        if f.get("WALKER_ERROR"):
            return f"page walk error {f['WALKER_ERROR']}"
        return "not latched in the status register" if not self.status else "fault"

    def text(self) -> str:
        where = f"{self.hub}{f'[{self.inst}]' if self.inst else ''}"
        return (f"VM fault: {'write' if self.write else 'read'} at {self.va:#x} by {self.client} (CID {self.cid:#x}) "
                f"on {where} VMID {self.vmid}: {self.reason}"
                f"{'; more faults followed' if self.fields.get('MORE_FAULTS') else ''}")

    def record(self) -> F.MemoryFault:
        """The hardware exception record of amdq.hw.faults."""
        return F.MemoryFault(self.va, self.write, self.client, self.vmid, self.reason)

    def error(self) -> GPUFault:
        return GPUFault(self.text(), address=self.va, write=self.write, client=self.client, vmid=self.vmid)


class VMFaults:
    """The fault decoder of one device: its register maps and target."""

    def __init__(self, regs: Registers, target: Target):
        self.regs, self.target = regs, target
        self.family = I.family(target.gfx_version)
        self.num_xcc = max(regs.num_xcc, 1)

    def hub_of(self, entry: H.IVEntry) -> tuple[str, int]:
        """(hub, instance) that reported a fault interrupt: VMC the MMHUB (gfx942: of the node's AID), else the GFX
        hub (gfx942: of the node's XCC)."""
        gfx9 = self.family.name == "soc15"
        if entry.client_id == self.family.mmhub_fault[0]:
            aid = entry.node_id // 4 if gfx9 else 0
            return "MMHUB", aid if aid < self.regs.layout.blocks["MMHUB"].instances else 0
        return "GC", I.xcc_of_node(entry.node_id, self.num_xcc) if gfx9 and self.num_xcc > 1 else 0

    def is_fault(self, entry: H.IVEntry) -> bool:
        """Whether an interrupt reports a VM fault (the GFX hub's UTCL2 fault or the MMHUB's VMC fault)."""
        return (entry.client_id, entry.src_id) in (self.family.gfxhub_fault, self.family.mmhub_fault)

    def _reg(self, hub: str, inst: int, name: str):
        r = self.regs.block(hub, inst)
        return r[HUB_PREFIX[hub] + name]

    def _status_reg(self, hub: str, inst: int):
        r = self.regs.block(hub, inst)
        base = HUB_PREFIX[hub] + "L2_PROTECTION_FAULT_STATUS"
        return r[base] if base in r else r[base + "_LO32"]

    def read(self, hub: str, inst: int = 0) -> tuple[int, dict, int | None]:
        """(status, its fields, the latched page address or None) of a hub, without clearing."""
        st = self._status_reg(hub, inst)
        if hub == "GC" and self.target.gfx_version >= 10:
            st.read()                           # the dummy read before the real one (gmc_v11_0 / gmc_v12_0)
        raw = st.read()
        fields = st.decode(raw)
        va = None
        if raw:
            lo = self._reg(hub, inst, "L2_PROTECTION_FAULT_ADDR_LO32").read()
            hi = self._reg(hub, inst, "L2_PROTECTION_FAULT_ADDR_HI32").read()
            va = (lo & 0xFFFFFFFF) << 12 | (hi & 0xF) << 44
        return raw, fields, va

    def clear(self, hub: str, inst: int = 0) -> None:
        """CLEAR_PROTECTION_FAULT_STATUS_ADDR: the hub forgets the latched fault and latches the next one."""
        self._reg(hub, inst, "L2_PROTECTION_FAULT_CNTL").update(CLEAR_PROTECTION_FAULT_STATUS_ADDR=1)

    def decode(self, entry: H.IVEntry, clear: bool = True) -> VMFault:
        """The fault an interrupt reports: its payload and the hub's registers (then cleared, as amdgpu does)."""
        hub, inst = self.hub_of(entry)
        raw, fields, status_va = self.read(hub, inst)
        if clear:
            self.clear(hub, inst)
        d1 = I.FAULT_DATA1.decode(entry.src_data[1])
        write = bool(fields.get("RW")) if raw else bool(d1["WRITE"])
        cid = fields.get("CID", 0)
        ip = self.target.ip["GC" if hub == "GC" else "MMHUB"]
        client = VF.client_name(hub, ip, cid, write) if raw else "unknown"
        return VMFault(hub, inst, I.fault_va(entry.src_data), write, fields.get("VMID", entry.vmid) if raw else
                       entry.vmid, client, cid, raw, dict(fields), status_va, bool(d1["RETRY"]),
                       self.family.client_name(entry.client_id))
