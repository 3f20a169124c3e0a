"""Multi-die (XCC) facts of the CDNA targets: the compute dies of a partition, how the kernel driver
reports them, how one AQL user queue runs on every die, how a dispatch's workgroups are split between
them and how scratch is divided. Declarative data and the arithmetic the facts define, nothing else.

Sources:
- Dies and CUs: ROCm "AMD GPU specifications" (MI300X/MI325X gfx942: 304 CUs, 38 per XCD; MI355X/MI350X
  gfx950: 256 CUs, 32 per XCD); AMD SMI "GPU partitioning" (MI300X 8 XCDs, MI300A 6; SPX, the default
  compute partition, puts every XCC of the GPU in one partition, i.e. one KFD node).
- Topology: Linux amdkfd `kfd_topology.c` (`num_xcc` = NUM_XCC(xcc_mask); `array_count` is the per-XCC
  count times NUM_XCC), `kfd_crat.c` (`simd_count` = simd_per_cu x the node's CUs, all XCCs),
  `kfd_queue.c` kfd_queue_ctx_save_restore_size (`cwsr_size` and `ctl_stack_size` are sized for one
  XCC: cu_num = simd_count / simd_per_cu / NUM_XCC) and kfd_queue_acquire_buffers (the queue's
  context-save buffer must cover (ctx_save_restore_area_size + debug_memory_size) x NUM_XCC).
- Queue mapping: Linux amdkfd `kfd_mqd_manager_v9.c` init_mqd_v9_4_3, load_mqd_v9_4_3,
  destroy_mqd_v9_4_3: one MQD per XCC (mqd_stride apart), loaded on and destroyed from every XCC of
  the partition, all naming the same ring, doorbell and read/write pointers. For an AQL queue
  compute_tg_chunk_size = 1 and compute_current_logic_xcc_id = (start + xcc) % NUM_XCC, where start is
  the device's current_logical_xcc_start, incremented for every compute queue created; only XCC 0 (the
  "master") has CP_HQD_PQ_CONTROL.NO_UPDATE_RPTR clear, so only it writes the read pointer. XCC x saves
  its waves at ctx_save_restore_area_address + x * ctx_save_restore_area_size. A PM4 queue gets
  compute_tg_chunk_size = 0, logical id 0 and pm4_target_xcc_in_xcp: it runs on one XCC.
- Workgroup split: composable_kernel's "Stream-K XCD remapping" (ROCm/composable_kernel #3652:
  "workgroups are typically scheduled round-robin across XCDs"); with the chunk size 1 of the MQD, flat
  workgroup id i goes to the XCC whose logical id is i mod NUM_XCC. A wave reads its die's id from
  hardware register HW_REG_XCC_ID (id 20 on gfx940+, XCC_ID in bits [3:0]; CDNA3 ISA "Hardware ID
  Registers").
- Scratch: ROCr `amd_aql_queue.cpp` FillComputeTmpRingSize (COMPUTE_TMPRING_SIZE.WAVES = (queue
  scratch bytes / NumXcc) / wave bytes: the queue descriptor describes one XCC's share),
  FillBufRsrcWord2 and InitScratchSRD (the scratch V#'s NUM_RECORDS and
  scratch_backing_memory_byte_size "report size per XCC"), `amd_gpu_agent.h` MaxScratchDevice
  (NumXcc x 4 GiB, MAX_SCRATCH_APERTURE_PER_XCC); ROCdbgapi locates a wave's scratch slot from its
  (xcc id, shader engine, slot): the shares lie XCC after XCC from scratch_backing_memory_location.

Not public (firmware-internal), modelled as the facts above require: the XCCs of a queue agree that a
packet is complete only when every XCC has finished its part, the barrier bit waits for that, and the
master XCC alone decrements the completion signal and releases the slot.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Partition:
    """One compute partition of a multi-die target in its default mode."""
    arch: str
    mode: str                  # compute partition mode ("SPX": every XCC in one partition)
    xccs: int                  # XCCs in the partition (KFD num_xcc)
    cus_per_xcc: int           # active compute units per XCC
    ses_per_xcc: int           # shader engines per XCC


PARTITIONS: dict[str, Partition] = {p.arch: p for p in (
    Partition("gfx942", "SPX", 8, 38, 4),       # MI300X / MI325X
    Partition("gfx950", "SPX", 8, 32, 4),       # MI355X / MI350X
)}

AQL_TG_CHUNK_SIZE = 1          # MQD compute_tg_chunk_size of an AQL queue: workgroups per turn of one XCC
PM4_TG_CHUNK_SIZE = 0          # ... of a PM4 queue: no split, one XCC (pm4_target_xcc_in_xcp) runs it all
MASTER_XCC = 0                 # the XCC whose MQD clears NO_UPDATE_RPTR: it writes the read pointer
SCRATCH_APERTURE_PER_XCC = 1 << 32   # most scratch one XCC addresses (ROCr MAX_SCRATCH_APERTURE_PER_XCC)
HW_REG_XCC_ID = 20             # s_getreg id of the die's id (gfx940+)
XCC_ID_BITS = 4                # XCC_ID field width, bits [3:0]


def logical_xcc(start: int, xcc: int, n: int) -> int:
    """compute_current_logic_xcc_id of XCC `xcc` in a queue whose driver counter was `start`."""
    return (start + xcc) % n


def workgroup_xcc(flat_id, n: int, chunk: int = AQL_TG_CHUNK_SIZE):
    """Logical id of the XCC that runs flat workgroup id(s) `flat_id` (x fastest, then y, then z)."""
    return (np.asarray(flat_id) // max(chunk, 1)) % n


def share(total: int, logical: int, n: int, chunk: int = AQL_TG_CHUNK_SIZE) -> np.ndarray:
    """Flat workgroup ids, ascending, that the XCC with logical id `logical` runs of a `total`-workgroup grid."""
    if n <= 1 or chunk == 0:
        return np.arange(total, dtype=np.int64)
    ids = np.arange(total, dtype=np.int64)
    return ids[workgroup_xcc(ids, n, chunk) == logical]


def scratch_offset(xcc: int, waves: int, wave_bytes: int) -> int:
    """Byte offset of XCC `xcc`'s scratch share from scratch_backing_memory_location: the shares of
    COMPUTE_TMPRING_SIZE.WAVES wave slots of `wave_bytes` lie one after another, XCC 0 first."""
    return xcc * waves * wave_bytes


def cwsr_bytes(ctx_save_restore_size: int, debug_memory_size: int, n: int, page: int = 4096) -> int:
    """Context-save buffer a queue needs on an `n`-XCC node (kfd_queue_acquire_buffers), page aligned."""
    return -(-(ctx_save_restore_size + debug_memory_size) * n // page) * page


__all__ = ["Partition", "PARTITIONS", "AQL_TG_CHUNK_SIZE", "PM4_TG_CHUNK_SIZE", "MASTER_XCC",
           "SCRATCH_APERTURE_PER_XCC", "HW_REG_XCC_ID", "XCC_ID_BITS", "logical_xcc", "workgroup_xcc", "share",
           "scratch_offset", "cwsr_bytes"]
