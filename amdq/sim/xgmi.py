"""XGMI hives of simulated gfx9 GPUs (MI300: gfx942): GPUs whose memory controllers reach each other's VRAM over
XGMI links, in one physical address space.

Hardware facts (Linux amdgpu):
* gfxhub_v1_2.c get_xgmi_info (GC instance 0; the MMHUB has the same registers): MC_VM_XGMI_LFB_CNTL.PF_LFB_REGION
  is the node's physical id, PF_MAX_REGION the hive's last node id (0: XGMI off), MC_VM_XGMI_LFB_SIZE.PF_LFB_SIZE
  the node segment size in 16 MiB units (<< 24); at most 8 nodes (ids 0..7);
* gmc_v9_0.c vram_gtt_location: the physical address of a node's VRAM pages is its FB offset plus
  physical_node_id * node_segment_size (vm_manager.vram_base_offset), for the node's own mappings and for those of
  peers in the hive (amdgpu_vm_bo_update takes the BO's device's vram_base_offset): a PTE without SYSTEM names
  VRAM of any node, node k's offset o at k * segment + o.

Simulator choices (not facts): a hive has a fixed number of nodes, given when it is first named (the board's
topology); GPUs take the lowest free node id in the order they are created; the segment is 256 GiB (above
MI300X's 192 GiB of HBM). The FB aperture's memory-controller addresses stay local to each node (this model
places only VM physical addresses in the hive's space).
"""
from __future__ import annotations

import threading

from ..errors import DeviceError
from .memory import Arena

MAX_NODES = 8                        # gfxhub_v1_2.c: max_num_physical_nodes
LFB_SIZE_SHIFT = 24                  # PF_LFB_SIZE << 24 = node_segment_size
SEGMENT = 256 << 30
_lock = threading.Lock()
_hives: dict[str, "Hive"] = {}


class Hive:
    """One XGMI hive: `nodes` node slots of `segment` bytes of physical address space each."""

    def __init__(self, name: str, nodes: int = 2, segment: int = SEGMENT):
        if not 2 <= nodes <= MAX_NODES:
            raise DeviceError(f"XGMI hive {name!r}: {nodes} nodes (a hive has 2..{MAX_NODES})")
        if segment % (1 << LFB_SIZE_SHIFT):
            raise DeviceError(f"XGMI hive {name!r}: a segment of {segment:#x} bytes is not in 16 MiB units")
        self.name, self.nodes, self.segment = name, nodes, segment
        self._vram: dict[int, Arena] = {}
        self._lock = threading.Lock()

    def join(self, vram: Arena) -> int:
        """Put a GPU's VRAM at the lowest free node id; the id."""
        if vram.size > self.segment:
            raise DeviceError(f"XGMI hive {self.name!r}: {vram.size:#x} bytes of VRAM exceed the "
                              f"{self.segment:#x}-byte node segment")
        with self._lock:
            free = [k for k in range(self.nodes) if k not in self._vram]
            if not free:
                raise DeviceError(f"XGMI hive {self.name!r} has all its {self.nodes} nodes")
            self._vram[free[0]] = vram
            return free[0]

    def leave(self, node: int) -> None:
        with self._lock:
            self._vram.pop(node, None)

    def resolve(self, addr: int, n: int) -> tuple[Arena, int] | None:
        """(VRAM, offset) behind the `n` bytes at hive physical address `addr`, None where no node's VRAM is."""
        node, off = divmod(addr, self.segment)
        vram = self._vram.get(node)
        if vram is None or off + n > vram.size or addr < 0:
            return None
        return vram, off

    def registers(self, node: int) -> dict[str, dict[str, int]]:
        """The XGMI_LFB register fields a node's IFWI sets (suffixes of MC_VM_ on every hub)."""
        return {"XGMI_LFB_CNTL": {"PF_LFB_REGION": node, "PF_MAX_REGION": self.nodes - 1},
                "XGMI_LFB_SIZE": {"PF_LFB_SIZE": self.segment >> LFB_SIZE_SHIFT}}


def hive(name: str, nodes: int = 2, segment: int = SEGMENT) -> Hive:
    """The process's hive called `name` (made with `nodes` and `segment` the first time it is named)."""
    with _lock:
        h = _hives.get(name)
        if h is None:
            h = _hives[name] = Hive(name, nodes, segment)
        return h
