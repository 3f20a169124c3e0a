"""VM protection-fault facts: who a fault's CID (the UTCL2 client id in *VM_L2_PROTECTION_FAULT_STATUS) names, per
hub and IP version, and what the status fields mean.

Sources (Linux amdgpu; the tables are those files' client-name arrays, indexed by CID, the MMHUB ones by CID and
RW as amdgpu indexes them, [cid][rw]):

* `GFXHUB_V3_0`: GC 11.x but 11.0.3 and 11.5.x (they have their own gfxhub files): `gfxhub_v3_0.c`
  gfxhub_client_ids;
* GC 12.0.x: amdgpu's `gfxhub_v12_0.c` table is empty ("TODO"), every CID is "unknown";
* `GFXHUB_GFX9`: GC 9.x (gfx942's GFX hubs): `gmc_v9_0.c` gfxhub_client_ids;
* `MMHUB_V3_0_0`: MMHUB 3.0.0, 3.0.1: `mmhub_v3_0.c` mmhub_client_ids_v3_0_0;
* `MMHUB_V4_1_0`: MMHUB 4.1.0: `mmhub_v4_1_0.c` mmhub_client_ids_v4_1_0;
* `MMHUB_ALDEBARAN`: MMHUB 1.8.0 (and 9.4.2): `gmc_v9_0.c` mmhub_client_ids_aldebaran (its IP_VERSION(1, 8, 0)
  case).

Status fields (the register tables, amdq.hw.regs): MORE_FAULTS, WALKER_ERROR, PERMISSION_FAULTS, MAPPING_ERROR,
CID, RW (1 = write), VMID, ATOMIC, PRT, VF/VFID, and on some FED/UCE. Clearing: CLEAR_PROTECTION_FAULT_STATUS_ADDR
(bit 0 of *VM_L2_PROTECTION_FAULT_CNTL, set as amdgpu's `WREG32_P(vm_l2_pro_fault_cntl, 1, ~1)` does). The
fault address registers hold the page: ADDR_LO32 = VA[43:12], ADDR_HI32[3:0] = VA[47:44].

PERMISSION_FAULTS (4 bits) has no bit names in a public header; `PERMISSION_BITS` reads them in the order of the
protection bits KFD takes from the fault's ring id (valid, read, write; `kfd_int_process_v9.c`) and then execute —
this driver's reading, and the simulated GMC's.
"""
from __future__ import annotations

GFXHUB_V3_0 = ("CB/DB", "Reserved", "GE1", "GE2", "CPF", "CPC", "CPG", "RLC", "TCP", "SQC (inst)", "SQC (data)",
               "SQG", "Reserved", "SDMA0", "SDMA1", "GCR", "SDMA2", "SDMA3")
GFXHUB_GFX9 = ("CB", "DB", "IA", "WD", "CPF", "CPC", "CPG", "RLC", "TCP", "SQC (inst)", "SQC (data)", "SQG", "PA")

# MMHUB tables: (CID, RW) -> name
MMHUB_V3_0_0 = {
    **{(c, 0): n for c, n in {0: "VMC", 4: "DCEDMC", 5: "DCEVGA", 6: "MP0", 7: "MP1", 8: "MPIO", 16: "HDP",
                              17: "LSDMA", 18: "JPEG", 19: "VCNU0", 21: "VSCH", 22: "VCNU1", 23: "VCN1",
                              32 + 20: "VCN0"}.items()},
    **{(c, 1): n for c, n in {2: "DBGUNBIO", 3: "DCEDWB", 4: "DCEDMC", 5: "DCEVGA", 6: "MP0", 7: "MP1", 8: "MPIO",
                              10: "DBGU0", 11: "DBGU1", 12: "DBGU2", 13: "DBGU3", 14: "XDP", 15: "OSSSYS", 16: "HDP",
                              17: "LSDMA", 18: "JPEG", 19: "VCNU0", 20: "VCN0", 21: "VSCH", 22: "VCNU1",
                              23: "VCN1"}.items()}}
MMHUB_V4_1_0 = {
    **{(c, 0): n for c, n in {0: "VMC", 4: "DCEDMC", 6: "MP0", 7: "MP1", 8: "MPIO", 16: "LSDMA", 17: "JPEG",
                              19: "VCNU", 22: "VSCH", 23: "HDP", 32 + 23: "VCNRD"}.items()},
    **{(c, 1): n for c, n in {3: "DCEDWB", 4: "DCEDMC", 6: "MP0", 7: "MP1", 8: "MPIO", 10: "DBGU0", 11: "DBGU1",
                              12: "DBGUNBIO", 14: "XDP", 15: "OSSSYS", 16: "LSDMA", 17: "JPEG", 18: "VCNWR",
                              19: "VCNU", 22: "VSCH", 23: "HDP"}.items()}}
_ALDEBARAN = {2: "MP1", 3: "MP0", 32 + 1: "DBGU_IO0", 32 + 2: "DBGU_IO2", 32 + 4: "MPIO", 96 + 11: "JPEG0",
              96 + 12: "VCN0", 96 + 13: "VCNU0", 128 + 11: "JPEG1", 128 + 12: "VCN1", 128 + 13: "VCNU1",
              160 + 1: "XDP", 160 + 14: "HDP", 256 + 0: "SDMA0", 256 + 1: "SDMA1", 256 + 2: "SDMA2", 256 + 3: "SDMA3",
              256 + 4: "SDMA4", 384 + 0: "OSS"}
MMHUB_ALDEBARAN = {(c, rw): n for c, n in _ALDEBARAN.items() for rw in (0, 1)}    # the same for reads and writes

PERMISSION_BITS = ("VALID", "READ", "WRITE", "EXECUTE")     # PERMISSION_FAULTS bit i (see the module doc)


def gfxhub_table(gc: tuple[int, int, int]) -> tuple[str, ...]:
    """CID -> name of the GFX hub of GC version `gc` (empty: amdgpu names none)."""
    if gc[0] == 9:
        return GFXHUB_GFX9
    if gc[0] == 11 and gc != (11, 0, 3) and gc[:2] != (11, 5):
        return GFXHUB_V3_0
    return ()


def mmhub_table(mmhub: tuple[int, int, int]) -> dict[tuple[int, int], str]:
    """(CID, RW) -> name of MMHUB version `mmhub` (empty: amdgpu names none)."""
    if mmhub in ((3, 0, 0), (3, 0, 1)):
        return MMHUB_V3_0_0
    if mmhub == (4, 1, 0):
        return MMHUB_V4_1_0
    if mmhub in ((1, 8, 0), (9, 4, 2)):
        return MMHUB_ALDEBARAN
    return {}


def client_name(hub: str, ip: tuple[int, int, int], cid: int, write: bool) -> str:
    """The UTCL2 client a CID names on `hub` ("GC" or "MMHUB") of IP version `ip`; "unknown" as amdgpu says."""
    if hub == "GC":
        t = gfxhub_table(ip)
        return t[cid] if cid < len(t) else "unknown"
    return mmhub_table(ip).get((cid, int(write)), "unknown")


def client_id(hub: str, ip: tuple[int, int, int], name: str, write: bool) -> int:
    """The CID of a client name (the inverse of client_name); ValueError if the table has no such client."""
    if hub == "GC":
        t = gfxhub_table(ip)
        if name in t:
            return t.index(name)
    else:
        for (cid, rw), n in sorted(mmhub_table(ip).items()):
            if n == name and rw == int(write):
                return cid
    raise ValueError(f"the {hub} hub of IP version {'.'.join(map(str, ip))} has no UTCL2 client {name!r} "
                     f"({'write' if write else 'read'})")


def permissions(bits: int) -> tuple[str, ...]:
    """The names of the PERMISSION_FAULTS bits set in `bits`."""
    return tuple(n for i, n in enumerate(PERMISSION_BITS) if bits >> i & 1)
