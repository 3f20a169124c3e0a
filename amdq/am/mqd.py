"""Compute MQDs (memory queue descriptors) of the MEC's hardware queues, and the HQD registers they image.

Sources (facts, not code):
- Linux amdgpu `gfx_v11_0.c` gfx_v11_0_compute_mqd_init, `gfx_v12_0.c` gfx_v12_0_compute_mqd_init,
  `gfx_v9_4_3.c` gfx_v9_4_3_xcc_mqd_init (the constants of RECIPES: header, misc_reserved, PRELOAD_SIZE,
  GFXn_MEC_HPD_SIZE, the CP_HQD_PQ_CONTROL fields; RPTR_BLOCK_SIZE = log2(AMDGPU_GPU_PAGE_SIZE / 4) - 1);
- amdkfd `kfd_mqd_manager_v11.c` / `_v12.c` / `_v9.c` init_mqd and update_mqd (an AQL queue: CP_HQD_AQL_CONTROL
  CONTROL0 = 1, CP_HQD_PQ_CONTROL NO_UPDATE_RPTR, SLOT_BASED_WPTR = 2, QUEUE_FULL_EN (+ WPP_CLAMP_EN on GFX9),
  DOORBELL_BIF_DROP; CP_MQD_CONTROL PRIV_STATE), init_mqd_v9_4_3 / update_mqd_v9_4_3 (one MQD per XCC,
  cp_mqd_stride_size apart: compute_tg_chunk_size 1 and compute_current_logic_xcc_id for AQL, NO_UPDATE_RPTR
  cleared on the master XCC only; a PM4 queue gets chunk 0, logical id 0 and pm4_target_xcc_in_xcp);
- amdgpu `amdgpu_doorbell.h` (DOORBELL_RANGE: KIQ .. USERQUEUE_END in 64-bit doorbells, x2 for the dword
  index CP_MEC_DOORBELL_RANGE_LOWER/UPPER take, as kiq_init_register writes them);
- `v11_structs.h` / `v12_structs.h` / `v9_structs.h` (amdq.hw.am): the MQD from cp_mqd_base_addr_lo to
  cp_hqd_pq_wptr_hi is the image of the HQD registers CP_MQD_BASE_ADDR .. CP_HQD_PQ_WPTR_HI, in register
  order (HQD_IMAGE pairs each field with its register; tests check the two orders agree).

Register fields are encoded with the device's register maps (amdq.hw.regs), never by hand.
Not from amdgpu: gfx_v9_4_3.c shifts RPTR_BLOCK_SIZE left by 8 before REG_SET_FIELD, which the mask then
drops (it programs 0); the value here is the intended log2(page / 4) - 1 of gfx_v11/v12.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument
from ..hw import am
from ..hw.layout import Struct

MQD_HEADER = 0xC0310800            # PM4 SET_... header the MEC expects at the MQD's start (all three generations)
PAGE = 4096                        # AMDGPU_GPU_PAGE_SIZE


@dataclass(frozen=True)
class Recipe:
    """What one generation's compute MQD init sets."""
    mqd: Struct                    # the MQD struct
    alloc: Struct                  # what is allocated per XCC (GFX9: v9_mqd_allocation, with the dynamic masks)
    source: str
    hpd_bytes: int                 # EOP buffer per queue (GFXn_MEC_HPD_SIZE)
    misc_reserved: int             # compute_misc_reserved
    preload_size: int              # CP_HQD_PERSISTENT_STATE.PRELOAD_SIZE
    pq_control: dict               # CP_HQD_PQ_CONTROL fields besides QUEUE_SIZE / RPTR_BLOCK_SIZE
    aql_pq_control: dict           # ... added for an AQL queue
    doorbell_range: tuple[int, int]    # CP_MEC_DOORBELL_RANGE_LOWER/UPPER (dword doorbell indices, inclusive)


RECIPES: dict[int, Recipe] = {
    11: Recipe(am.v11_compute_mqd, am.v11_compute_mqd, "gfx_v11_0.c gfx_v11_0_compute_mqd_init", 2048, 7, 0x55,
               dict(UNORD_DISPATCH=1, TUNNEL_DISPATCH=0, PRIV_STATE=1, KMD_QUEUE=1),
               dict(NO_UPDATE_RPTR=1, SLOT_BASED_WPTR=2, QUEUE_FULL_EN=1),
               (am.AMDGPU_NAVI10_DOORBELL_KIQ * 2, am.AMDGPU_NAVI10_DOORBELL_USERQUEUE_END * 2)),
    12: Recipe(am.v12_compute_mqd, am.v12_compute_mqd, "gfx_v12_0.c gfx_v12_0_compute_mqd_init", 2048, 7, 0x55,
               dict(UNORD_DISPATCH=1, TUNNEL_DISPATCH=0, PRIV_STATE=1, KMD_QUEUE=1),
               dict(NO_UPDATE_RPTR=1, SLOT_BASED_WPTR=2, QUEUE_FULL_EN=1),
               (am.AMDGPU_NAVI10_DOORBELL_KIQ * 2, am.AMDGPU_NAVI10_DOORBELL_USERQUEUE_END * 2)),
    9: Recipe(am.v9_mqd, am.v9_mqd_allocation, "gfx_v9_4_3.c gfx_v9_4_3_xcc_mqd_init", 4096, 3, 0x53,
              dict(UNORD_DISPATCH=0, ROQ_PQ_IB_FLIP=0, PRIV_STATE=1, KMD_QUEUE=1),
              dict(NO_UPDATE_RPTR=1, SLOT_BASED_WPTR=2, QUEUE_FULL_EN=1, WPP_CLAMP_EN=1),
              (am.AMDGPU_DOORBELL_LAYOUT1_KIQ_START * 2, am.AMDGPU_DOORBELL_LAYOUT1_USERQUEUE_END * 2)),
}

# The HQD register image inside the MQD: (MQD field, HQD register), in register order.
HQD_IMAGE: tuple[tuple[str, str], ...] = (
    ("cp_mqd_base_addr_lo", "regCP_MQD_BASE_ADDR"),
    ("cp_mqd_base_addr_hi", "regCP_MQD_BASE_ADDR_HI"),
    ("cp_hqd_active", "regCP_HQD_ACTIVE"),
    ("cp_hqd_vmid", "regCP_HQD_VMID"),
    ("cp_hqd_persistent_state", "regCP_HQD_PERSISTENT_STATE"),
    ("cp_hqd_pipe_priority", "regCP_HQD_PIPE_PRIORITY"),
    ("cp_hqd_queue_priority", "regCP_HQD_QUEUE_PRIORITY"),
    ("cp_hqd_quantum", "regCP_HQD_QUANTUM"),
    ("cp_hqd_pq_base_lo", "regCP_HQD_PQ_BASE"),
    ("cp_hqd_pq_base_hi", "regCP_HQD_PQ_BASE_HI"),
    ("cp_hqd_pq_rptr", "regCP_HQD_PQ_RPTR"),
    ("cp_hqd_pq_rptr_report_addr_lo", "regCP_HQD_PQ_RPTR_REPORT_ADDR"),
    ("cp_hqd_pq_rptr_report_addr_hi", "regCP_HQD_PQ_RPTR_REPORT_ADDR_HI"),
    ("cp_hqd_pq_wptr_poll_addr_lo", "regCP_HQD_PQ_WPTR_POLL_ADDR"),
    ("cp_hqd_pq_wptr_poll_addr_hi", "regCP_HQD_PQ_WPTR_POLL_ADDR_HI"),
    ("cp_hqd_pq_doorbell_control", "regCP_HQD_PQ_DOORBELL_CONTROL"),
    ("cp_hqd_pq_control", "regCP_HQD_PQ_CONTROL"),
    ("cp_hqd_ib_control", "regCP_HQD_IB_CONTROL"),
    ("cp_hqd_dequeue_request", "regCP_HQD_DEQUEUE_REQUEST"),
    ("cp_mqd_control", "regCP_MQD_CONTROL"),
    ("cp_hqd_eop_base_addr_lo", "regCP_HQD_EOP_BASE_ADDR"),
    ("cp_hqd_eop_base_addr_hi", "regCP_HQD_EOP_BASE_ADDR_HI"),
    ("cp_hqd_eop_control", "regCP_HQD_EOP_CONTROL"),
    ("cp_hqd_aql_control", "regCP_HQD_AQL_CONTROL"),
    ("cp_hqd_pq_wptr_lo", "regCP_HQD_PQ_WPTR_LO"),
    ("cp_hqd_pq_wptr_hi", "regCP_HQD_PQ_WPTR_HI"),
)
REGISTER_OF = dict(HQD_IMAGE)


def recipe(gfx: int) -> Recipe:
    r = RECIPES.get(gfx)
    if r is None:
        known = ", ".join(f"GFX{g}" for g in sorted(RECIPES))
        raise InvalidArgument(f"no compute MQD recipe for GFX{gfx}; known: {known}")
    return r


def stride(gfx: int) -> int:
    """Bytes between the MQDs of consecutive XCCs (one page-aligned allocation each, kfd's mqd_stride)."""
    return -(-recipe(gfx).alloc.size // PAGE) * PAGE


def log2_exact(n: int, what: str) -> int:
    if n <= 0 or n & (n - 1):
        raise InvalidArgument(f"{what} {n:#x} is not a power of two")
    return n.bit_length() - 1


def compute_mqd(gc, gfx: int, *, mqd_va: int, ring_va: int, ring_bytes: int, rptr_va: int, wptr_va: int,
                eop_va: int, doorbell: int, aql: bool, vmid: int = 0, logical_xcc: int = 0, tg_chunk: int = 0,
                master: bool | None = None, pm4_xcc: int = 0, mqd_stride: int = 0) -> dict[str, int]:
    """The MQD fields (by name) of one compute queue on one XCC. `gc` is that XCC's GC register map (used to
    encode register fields only). `master`: None for a queue on one XCC; True / False for the master / another
    XCC of a queue loaded on several."""
    r = recipe(gfx)
    enc = lambda reg, **f: gc[reg].encode(**f)                                  # noqa: E731
    pq = dict(r.pq_control, QUEUE_SIZE=log2_exact(ring_bytes // 4, "ring dwords") - 1,
              RPTR_BLOCK_SIZE=log2_exact(PAGE // 4, "page dwords") - 1)
    bell = dict(DOORBELL_OFFSET=doorbell, DOORBELL_EN=1, DOORBELL_SOURCE=0, DOORBELL_HIT=0)
    if aql:
        pq.update(r.aql_pq_control)
        bell["DOORBELL_BIF_DROP"] = 1
        if master:                                 # the master XCC of a multi-XCC queue reports the read pointer
            pq["NO_UPDATE_RPTR"] = 0
    v = {
        "header": MQD_HEADER,
        "compute_pipelinestat_enable": 1,
        "compute_static_thread_mgmt_se0": 0xFFFFFFFF, "compute_static_thread_mgmt_se1": 0xFFFFFFFF,
        "compute_static_thread_mgmt_se2": 0xFFFFFFFF, "compute_static_thread_mgmt_se3": 0xFFFFFFFF,
        "compute_misc_reserved": r.misc_reserved,
        "cp_hqd_eop_base_addr_lo": eop_va >> 8 & 0xFFFFFFFF, "cp_hqd_eop_base_addr_hi": eop_va >> 40,
        "cp_hqd_eop_control": enc("regCP_HQD_EOP_CONTROL", EOP_SIZE=log2_exact(r.hpd_bytes // 4, "EOP dwords") - 1),
        "cp_hqd_pq_doorbell_control": enc("regCP_HQD_PQ_DOORBELL_CONTROL", **bell),
        "cp_hqd_dequeue_request": 0, "cp_hqd_pq_rptr": 0, "cp_hqd_pq_wptr_lo": 0, "cp_hqd_pq_wptr_hi": 0,
        "cp_mqd_base_addr_lo": mqd_va & 0xFFFFFFFC, "cp_mqd_base_addr_hi": mqd_va >> 32,
        "cp_mqd_control": enc("regCP_MQD_CONTROL", VMID=0, PRIV_STATE=1),
        "cp_hqd_pq_base_lo": ring_va >> 8 & 0xFFFFFFFF, "cp_hqd_pq_base_hi": ring_va >> 40,
        "cp_hqd_pq_control": enc("regCP_HQD_PQ_CONTROL", **pq),
        "cp_hqd_pq_rptr_report_addr_lo": rptr_va & 0xFFFFFFFC, "cp_hqd_pq_rptr_report_addr_hi": rptr_va >> 32 & 0xFFFF,
        "cp_hqd_pq_wptr_poll_addr_lo": wptr_va & 0xFFFFFFFC, "cp_hqd_pq_wptr_poll_addr_hi": wptr_va >> 32 & 0xFFFF,
        "cp_hqd_vmid": enc("regCP_HQD_VMID", VMID=vmid),
        "cp_hqd_persistent_state": enc("regCP_HQD_PERSISTENT_STATE", PRELOAD_SIZE=r.preload_size),
        "cp_hqd_ib_control": enc("regCP_HQD_IB_CONTROL", MIN_IB_AVAIL_SIZE=3),
        "cp_hqd_pipe_priority": 0, "cp_hqd_queue_priority": 0, "cp_hqd_quantum": 0,
        "cp_hqd_aql_control": enc("regCP_HQD_AQL_CONTROL", CONTROL0=1) if aql else 0,
        "cp_hqd_active": 1,
    }
    if gfx == 9:                                   # multi-XCC fields and the dynamic CU/RB masks of the allocation
        cu = mqd_va + am.v9_mqd_allocation.offsetof("dynamic_cu_mask")
        v.update(dynamic_cu_mask_addr_lo=cu & 0xFFFFFFFF, dynamic_cu_mask_addr_hi=cu >> 32,
                 compute_tg_chunk_size=tg_chunk, compute_current_logic_xcc_id=logical_xcc,
                 pm4_target_xcc_in_xcp=0 if aql else pm4_xcc, cp_mqd_stride_size=mqd_stride)
    return v


def pack(gfx: int, values: dict[str, int]) -> bytes:
    """The MQD allocation of one XCC (GFX9: v9_mqd_allocation with dynamic_cu_mask / dynamic_rb_mask all ones)."""
    r = recipe(gfx)
    buf = bytearray(r.alloc.size)
    r.mqd.pack_into(buf, 0, **values)
    if r.alloc is not r.mqd:
        r.alloc.pack_into(buf, 0, dynamic_cu_mask=0xFFFFFFFF, dynamic_rb_mask=0xFFFFFFFF)
    return bytes(buf)


def unpack(gfx: int, raw: bytes) -> dict[str, int]:
    """The MQD fields of one XCC's MQD as read back from memory."""
    return recipe(gfx).mqd.unpack(raw)


__all__ = ["MQD_HEADER", "Recipe", "RECIPES", "HQD_IMAGE", "REGISTER_OF", "recipe", "stride", "compute_mqd",
           "pack", "unpack"]
