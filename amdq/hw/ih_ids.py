"""What an interrupt vector's ids mean, per generation: client and source names, the ring id of an end-of-pipe
or an SDMA trap, the node id of a multi-die part, and the VM-fault payload.

Sources (Linux amdgpu; the numbers are the constants of amdq.hw.am, taken from these headers):
* client ids: `soc15_ih_clientid.h` (GFX9, gfx942; where it gives one id two names, the one a CDNA3 part
  has: `_SOC15_ALIAS`), `soc21_ih_clientid.h` (GFX11, GFX12);
* source ids: `ivsrcid/gfx/irqsrcs_gfx_9_0.h`, `irqsrcs_gfx_11_0_0.h`, `irqsrcs_gfx_12_0_0.h`,
  `ivsrcid/sdma0/irqsrcs_sdma0_4_0.h` (clients SDMAn of GFX9), `ivsrcid/vmc/irqsrcs_vmc_1_0.h`
  (VMC_1_0__SRCID__VM_FAULT 0, UTCL2_1_0__SRCID__FAULT 0);
* end of pipe: client GRBM_CP, source CP_EOP_INTERRUPT, ring id me [3:2], pipe [1:0], queue [6:4]
  (`gfx_v9_4_3.c`, `gfx_v11_0.c`, `gfx_v12_0.c` `*_eop_irq`);
* SDMA trap, GFX11/12: client GFX, source SDMA_TRAP (GFX_11_0_0 numbering), ring id queue [3:0], instance
  [7:4] (`sdma_v6_0.c`, `sdma_v7_0.c` sw_init / process_trap_irq); GFX9: client SDMA0..3 = the instance within
  its AID, source SDMA0_4_0 SDMA_TRAP, ring id 0 the ring / 1 the page queue, the AID from the node id
  (`sdma_v4_4_2.c` seq_to_irq_id / process_trap_irq);
* node ids: AIDn = 4n, XCDs 1, 2, 5, 6, 9, 10, 13, 14; node -> XCC: node // 2 with every XCC present
  (`amdgpu_irq.h` interrupt_node_id_per_aid, `gfx_v9_4_3.c` ih_to_xcc_inst);
* VM fault payload: src_data[0] = VA[43:12], src_data[1][3:0] = VA[47:44], src_data[1] RETRY 0x80, READ
  0x40, WRITE 0x20, EXE 0x10 (`gmc_v9_0.c` / `gmc_v11_0.c` / `gmc_v12_0.c` process_interrupt, `amdgpu_gmc.h`
  AMDGPU_GMC9_FAULT_SOURCE_DATA_*); its ring id: protection bits 0x08 not valid, 0x10 read, 0x20 write
  (`kfd_int_process_v9.c`, `kfd_int_process_v11.c` prot_valid/read/write);
* the hub of a fault: client VMC the MMHUB (GFX9: of node // 4), else the GFX hub (GFX9: of the node's XCC);
  VMID_TYPE (vmid_src) 1 for the MMHUB (`gmc_v9_0.c`, `gmc_v11_0.c` process_interrupt).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import am as A
from .layout import Bits


def _named(prefix: str) -> dict[int, str]:
    """id -> name of the header constants `prefix*` (amdq.hw.am holds them as the headers name them)."""
    return {v: k[len(prefix):] for k, v in vars(A).items() if k.startswith(prefix) and not k.endswith("_MAX")}


# soc15_ih_clientid.h gives some ids two names (blocks no part has both of): the CDNA3 one here
_SOC15_ALIAS = {A.SOC15_IH_CLIENTID_SDMA2: "SDMA2", A.SOC15_IH_CLIENTID_SDMA3: "SDMA3",
                A.SOC15_IH_CLIENTID_SDMA4: "SDMA4", A.SOC15_IH_CLIENTID_SDMA5: "SDMA5",
                A.SOC15_IH_CLIENTID_SDMA6: "SDMA6", A.SOC15_IH_CLIENTID_SDMA7: "SDMA7",
                A.SOC15_IH_CLIENTID_VMC1: "VMC1", A.SOC15_IH_CLIENTID_VCN: "VCN", A.SOC15_IH_CLIENTID_VCN1: "VCN1"}
SOC15_CLIENTS: dict[int, str] = {**{v: n for v, n in _named("SOC15_IH_CLIENTID_").items()
                                    if n != "SDMA3_Sienna_Cichlid"}, **_SOC15_ALIAS}
SOC21_CLIENTS: dict[int, str] = _named("SOC21_IH_CLIENTID_")

GFX9_SOURCES = _named("GFX_9_0__SRCID__")
GFX11_SOURCES = _named("GFX_11_0_0__SRCID__")
GFX12_SOURCES = _named("GFX_12_0_0__SRCID__")
SDMA4_SOURCES = _named("SDMA0_4_0__SRCID__")
VMC_SOURCES = {0: "VM_FAULT"}              # VMC_1_0__SRCID__VM_FAULT
UTCL2_SOURCES = {0: "UTCL2_FAULT"}         # UTCL2_1_0__SRCID__FAULT

# the ring id of an end-of-pipe interrupt and of an SDMA trap (GFX11/12)
EOP_RING = Bits("EOP_RING_ID", {"PIPE": (0, 1), "ME": (2, 3), "QUEUE": (4, 6)}, width=8)
SDMA_RING = Bits("SDMA_RING_ID", {"QUEUE": (0, 3), "INSTANCE": (4, 7)}, width=8)
# a VM fault's ring id (protection bits) and src_data[1]
FAULT_RING = Bits("FAULT_RING_ID", {"PROT_VALID": (3, 3), "PROT_READ": (4, 4), "PROT_WRITE": (5, 5)}, width=8)
FAULT_DATA1 = Bits("FAULT_SRC_DATA1", {"ADDR_47_44": (0, 3), "EXE": (4, 4), "WRITE": (5, 5), "READ": (6, 6),
                                       "RETRY": (7, 7)})

AID_NODES = (0, 4, 8, 12)                  # AID0..3_NODEID
XCD_NODES = (1, 2, 5, 6, 9, 10, 13, 14)    # XCD0..7_NODEID
SDMA_PER_AID = 4                           # gfx942: SDMA0..3 of each AID (client SDMA0..3)
VMID_TYPE_MMHUB = 1


@dataclass(frozen=True)
class Family:
    """The IH ids of one SoC family."""
    name: str                                  # "soc15" (GFX9) or "soc21" (GFX11, GFX12)
    clients: dict[int, str]
    sources: dict[str, dict[int, str]]         # client name -> source id -> name
    eop: tuple[int, int]                       # (client, source) of an end of pipe
    bad_opcode: tuple[int, int]
    sq: tuple[int, int]
    gfxhub_fault: tuple[int, int]              # the GC hub's UTCL2 fault
    mmhub_fault: tuple[int, int]               # the MMHUB's VMC fault

    def client_name(self, client_id: int) -> str:
        return self.clients.get(client_id, f"client {client_id:#x}")

    def source_name(self, client_id: int, src_id: int) -> str:
        return self.sources.get(self.client_name(client_id), {}).get(src_id, f"source {src_id:#x}")

    def sdma_trap(self, instance: int) -> tuple[int, int]:
        """(client, source) of SDMA `instance`'s trap."""
        if self.name == "soc21":
            return A.SOC21_IH_CLIENTID_GFX, A.GFX_11_0_0__SRCID__SDMA_TRAP
        return _SOC15_SDMA[instance % SDMA_PER_AID], A.SDMA0_4_0__SRCID__SDMA_TRAP

    def is_sdma(self, client_id: int) -> bool:
        return self.name == "soc15" and client_id in _SOC15_SDMA


_SOC15_SDMA = (A.SOC15_IH_CLIENTID_SDMA0, A.SOC15_IH_CLIENTID_SDMA1, A.SOC15_IH_CLIENTID_SDMA2,
               A.SOC15_IH_CLIENTID_SDMA3)

SOC15 = Family("soc15", SOC15_CLIENTS,
               {"GRBM_CP": GFX9_SOURCES, "UTCL2": UTCL2_SOURCES, "VMC": VMC_SOURCES, "VMC1": VMC_SOURCES,
                **{SOC15_CLIENTS[c]: SDMA4_SOURCES for c in _SOC15_SDMA}},
               eop=(A.SOC15_IH_CLIENTID_GRBM_CP, A.GFX_9_0__SRCID__CP_EOP_INTERRUPT),
               bad_opcode=(A.SOC15_IH_CLIENTID_GRBM_CP, A.GFX_9_0__SRCID__CP_BAD_OPCODE_ERROR),
               sq=(A.SOC15_IH_CLIENTID_GRBM_CP, A.GFX_9_0__SRCID__SQ_INTERRUPT_ID),
               gfxhub_fault=(A.SOC15_IH_CLIENTID_UTCL2, 0), mmhub_fault=(A.SOC15_IH_CLIENTID_VMC, 0))


def _soc21(gc: dict[int, str], sfx: str) -> Family:
    src = lambda n: getattr(A, f"GFX_{sfx}__SRCID__{n}")
    return Family("soc21", SOC21_CLIENTS, {"GRBM_CP": gc, "GFX": gc, "VMC": VMC_SOURCES},
                  eop=(A.SOC21_IH_CLIENTID_GRBM_CP, src("CP_EOP_INTERRUPT")),
                  bad_opcode=(A.SOC21_IH_CLIENTID_GRBM_CP, src("CP_BAD_OPCODE_ERROR")),
                  sq=(A.SOC21_IH_CLIENTID_GRBM_CP, src("SQ_INTERRUPT_ID")),
                  gfxhub_fault=(A.SOC21_IH_CLIENTID_GFX, src("UTCL2_FAULT")), mmhub_fault=(A.SOC21_IH_CLIENTID_VMC, 0))


FAMILIES = {9: SOC15, 11: _soc21(GFX11_SOURCES, "11_0_0"), 12: _soc21(GFX12_SOURCES, "12_0_0")}


def family(gfx_version: int) -> Family:
    """The IH ids of a GC major version (9, 11, 12)."""
    try:
        return FAMILIES[gfx_version]
    except KeyError:
        raise ValueError(f"no IH client/source table for GC major version {gfx_version}") from None


def fault_va(src_data: tuple[int, ...]) -> int:
    """The page address a VM fault's payload carries."""
    return (src_data[0] & 0xFFFFFFFF) << 12 | (src_data[1] & 0xF) << 44


def fault_payload(va: int, write: bool, retry: bool = False) -> tuple[int, int]:
    """src_data[0:2] of a VM fault at `va`."""
    return ((va >> 12) & 0xFFFFFFFF,
            FAULT_DATA1.encode(ADDR_47_44=(va >> 44) & 0xF, WRITE=int(write), READ=int(not write), RETRY=int(retry)))


def xcc_of_node(node_id: int, num_xcc: int) -> int:
    """The logical XCC of an IH node id (gfx_v9_4_3 ih_to_xcc_inst with the first `num_xcc` XCCs present)."""
    mask = (1 << max(num_xcc, 1)) - 1
    n = bin(mask & ((1 << (node_id // 2 + 1)) - 1)).count("1")
    return max(n - 1, 0)
