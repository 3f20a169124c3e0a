"""Peer memory: how one AM device's page tables name a VRAM buffer of another (am/memory.py `map_peer`).

Routes, after Linux amdgpu:
* PCIe peer-to-peer, every generation: the peer's VRAM through its BAR0. amdgpu hands a VRAM buffer to another
  device as bus addresses in the BAR (amdgpu_vram_mgr_alloc_sgt: aper_base + offset, with aper_base =
  pci_resource_start(pdev, 0)), and the importer maps them as system pages: SYSTEM set, SNOOPED only for pages
  the CPU caches (amdgpu_ttm_tt_pde_flags), which a BAR is not: SNOOPED off. So the peer's VRAM offset must lie
  under its BAR (a large BAR, or the CPU-visible part of a small one). MTYPE UC is this driver's choice (nothing
  keeps two GPUs' caches coherent over PCIe).
* XGMI, gfx9 nodes of one hive: the peer's VRAM at its physical address in the hive, the peer's vram_base_offset
  (its FB offset + physical_node_id * node_segment_size, gmc_v9_0.c vram_gtt_location) plus the offset, without
  SYSTEM; MTYPE NC and SNOOPED (gmc_v9_0.c get_coherence_flags, GC 9.4.x dGPU: remote VRAM NC, snooped within
  the hive).

XGMI facts (gfxhub_v1_2.c get_xgmi_info, GC instance 0): MC_VM_XGMI_LFB_CNTL.PF_MAX_REGION is the hive's last node
id (0: XGMI off), PF_LFB_REGION this node's id; MC_VM_XGMI_LFB_SIZE.PF_LFB_SIZE << 24 the node segment size.
Which devices share a hive amdgpu learns from the PSP's XGMI TA (psp_xgmi_get_hive_id); this driver loads no
XGMI TA and takes two devices for one hive when both have XGMI on with the same node count and segment size and
different node ids (`via="pcie"` forces the BAR route).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError
from .vm import MapFlags

LFB_SIZE_SHIFT = 24                                     # PF_LFB_SIZE << 24 = node_segment_size
# PTE flags of a peer's VRAM per route (module doc: amdgpu_ttm_tt_pde_flags; gmc_v9_0.c get_coherence_flags)
ROUTE_FLAGS: dict[str, MapFlags] = {
    "pcie": MapFlags(system=True, snooped=False, mtype="UC"),
    "xgmi": MapFlags(system=False, snooped=True, mtype="NC"),
}


@dataclass(frozen=True)
class XGMI:
    """A device's place in its XGMI hive."""
    node: int
    nodes: int
    segment: int

    @property
    def base(self) -> int:
        """Where the node's VRAM starts in the hive's physical address space."""
        return self.node * self.segment


def read_xgmi(regs: Any) -> XGMI | None:
    """The XGMI_LFB registers of GC instance 0 (None: the generation has none, or XGMI is off)."""
    gc = regs.block("GC", 0)
    if "regGCMC_VM_XGMI_LFB_CNTL" not in gc:
        return None
    cntl = gc.regGCMC_VM_XGMI_LFB_CNTL.read_fields()
    if not cntl["PF_MAX_REGION"]:
        return None
    seg = gc.regGCMC_VM_XGMI_LFB_SIZE.read_fields()["PF_LFB_SIZE"] << LFB_SIZE_SHIFT
    if cntl["PF_LFB_REGION"] > cntl["PF_MAX_REGION"] or not seg:
        raise DeviceError(f"GMC: MC_VM_XGMI_LFB_CNTL names node {cntl['PF_LFB_REGION']} of {cntl['PF_MAX_REGION'] + 1} "
                          f"with a segment of {seg:#x} bytes: the IFWI has not set up XGMI")
    return XGMI(cntl["PF_LFB_REGION"], cntl["PF_MAX_REGION"] + 1, seg)


def same_hive(a: XGMI | None, b: XGMI | None) -> bool:
    return a is not None and b is not None and a.nodes == b.nodes and a.segment == b.segment and a.node != b.node


@dataclass(frozen=True)
class Route:
    """How this device reaches a peer's buffer: "pcie" or "xgmi", the physical address the PTEs hold, their flags."""
    via: str
    pa: int
    flags: MapFlags


def route(local: XGMI | None, peer: XGMI | None, peer_vram_base: int, offset: int, size: int,
          bar0: int | None, bar0_size: int, via: str | None = None) -> Route:
    """The route to `size` bytes at VRAM `offset` of a peer (its vram_base, XGMI place, BAR0 bus address and size):
    XGMI within a hive unless `via` says "pcie", else the peer's BAR0."""
    if via not in (None, "xgmi", "pcie"):
        raise DeviceError(f"peer route {via!r}: xgmi or pcie")
    hive = same_hive(local, peer)
    if via == "xgmi" and not hive:
        raise DeviceError("peer route xgmi: the two devices are not nodes of one XGMI hive "
                          f"(this one: {local}, the peer: {peer})")
    if hive and via != "pcie":
        return Route("xgmi", peer_vram_base + offset, ROUTE_FLAGS["xgmi"])
    if not bar0:
        raise DeviceError("the peer's BAR0 has no bus address (its function cannot tell, or it is not assigned): "
                          "no peer-to-peer over PCIe")
    if offset + size > bar0_size:
        raise DeviceError(f"the peer buffer (VRAM {offset:#x}+{size:#x}) lies beyond the peer's {bar0_size:#x}-byte "
                          f"BAR0: peer-to-peer over PCIe reaches only VRAM under the BAR (a large BAR, or a CPU-visible "
                          f"buffer)")
    return Route("pcie", bar0 + offset, ROUTE_FLAGS["pcie"])


# Config-space BAR registers (PCI Local Bus specification, type 0 header): BAR n at 0x10 + 4n; bit 0 set: an I/O
# BAR; bits 2:1 = 2: a 64-bit memory BAR whose upper half is the next dword; bits 3:0 are flags, not address.
BAR_REG, BAR_IO, BAR_TYPE_MASK, BAR_TYPE_64, BAR_FLAGS = 0x10, 0x1, 0x6, 0x4, 0xF


def bar_bus_address(fn: Any, n: int) -> int | None:
    """The bus address of BAR `n` of a PCI function (None: not assigned): the function's own `bar_bus_address`
    when it has one (sysfs `resource` on hardware, the simulated function's config space), else its BAR register."""
    own = getattr(fn, "bar_bus_address", None)
    if own is not None:
        return own(n) or None
    lo = fn.config_read(BAR_REG + 4 * n, 4)
    if lo & BAR_IO:
        return None
    hi = fn.config_read(BAR_REG + 4 * n + 4, 4) if lo & BAR_TYPE_MASK == BAR_TYPE_64 else 0
    return (hi << 32 | lo & ~BAR_FLAGS) or None
