"""SDMA queue 0 as registers: where the ring registers of an engine are per SDMA generation, and which NBIO
entry routes doorbells to the SDMA engines per NBIO version. Declarative facts shared by the AM driver
(am/sdma.py, am/soc.py) and the simulated PCI function (sim/pci/sdma.py, sim/pci/nbio.py).

Sources (facts, not code):
* Register names: Linux amdgpu `sdma_v6_0.c` / `sdma_v7_0.c` (queue 0 of engine n is `SDMAn_QUEUE0_*` in the GC
  block, engine 1 at the SDMA1_ names of gc_11_0_0/gc_12_0_0_offset.h), `sdma_v4_4_2.c` (the GFX ring of
  instance n is `SDMA_GFX_*` of the SDMAn block).
* Doorbell routing: `nbio_v4_3.c` / `nbif_v6_3_1.c` `sdma_doorbell_range` (one S2A entry, 2, for every SDMA
  engine: ENABLE=1, AWID=0xe, RANGE_OFFSET = first doorbell, RANGE_SIZE, AWADDR_31_28_VALUE=3; programmed
  for instance 0 only with size sdma_doorbell_range * num_instances), `nbio_v7_9.c` `sdma_doorbell_range`
  (per instance of AID 0: DOORBELL0_CTRL_ENTRY_{1,2} RANGE_OFFSET/RANGE_SIZE and S2A_DOORBELL_ENTRY_{1,2}_CTRL
  ENABLE=1, AWID = RANGE_OFFSET = 0xe / 0x8, RANGE_SIZE, AWADDR_31_28_VALUE = 1 / 2; called for every instance
  from soc15.c `soc15_doorbell_range_init`). Offsets and sizes count dword doorbells (amdgpu passes
  `ring->doorbell_index`, a dword index).
* `sdma_doorbell_range = 20` dwords per engine (soc21.c, soc24.c, aqua_vanjaram.c `*_doorbell_index_init`).
* Doorbell layout: engine n's queue 0 rings 64-bit doorbell `sDMA_ENGINE0 + n * (20 >> 1)`, dword index twice
  that (amdgpu_doorbell.h AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0, AMDGPU_DOORBELL_LAYOUT1_sDMA_ENGINE_START;
  sdma_v*_sw_init `ring->doorbell_index = sdma_engine[i] << 1`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import am

if TYPE_CHECKING:
    from .regmap import Register, Registers

# --- queue 0 registers -----------------------------------------------------------------------------------
# SDMA major -> (block, register prefix) of engine {e}'s queue 0; the suffixes (RB_CNTL, RB_BASE, ...) are the same
QUEUE0: dict[int, tuple[str, str]] = {
    4: ("SDMA{e}", "regSDMA_GFX_"),          # sdma_v4_4_2.c: the GFX ring of instance e
    6: ("GC", "regSDMA{e}_QUEUE0_"),         # sdma_v6_0.c
    7: ("GC", "regSDMA{e}_QUEUE0_"),         # sdma_v7_0.c
}
# SDMA major -> (register, field) that halts engine {e}'s microcontroller (none in SDMA 4.4.2's map)
HALT: dict[int, tuple[str, str]] = {6: ("regSDMA{e}_F32_CNTL", "HALT"), 7: ("regSDMA{e}_MCU_CNTL", "HALT")}
# SDMA major -> the RB_CNTL field that lets the engine's firmware poll the write pointer
FW_WPTR_POLL: dict[int, str] = {6: "F32_WPTR_POLL_ENABLE", 7: "MCU_WPTR_POLL_ENABLE"}


def queue_reg(regs: "Registers", major: int, engine: int, suffix: str) -> "Register":
    """Register `suffix` (RB_CNTL, RB_BASE, DOORBELL, ...) of queue 0 of SDMA engine `engine`."""
    block, prefix = QUEUE0[major]
    return regs.block(block.format(e=engine))[prefix.format(e=engine) + suffix]


def halt_reg(regs: "Registers", major: int, engine: int) -> "tuple[Register, str] | None":
    """(register, field) of the engine's halt bit, or None where the register map has none."""
    if major not in HALT:
        return None
    name, fld = HALT[major]
    return regs.GC[name.format(e=engine)], fld


# --- doorbells --------------------------------------------------------------------------------------------
DOORBELL_RANGE_DWORDS = 20                    # adev->doorbell_index.sdma_doorbell_range
# GC major -> first 64-bit doorbell of the SDMA engines (engine n: + n * DOORBELL_RANGE_DWORDS // 2)
SDMA_ENGINE0_DOORBELL64: dict[int, int] = {
    9: am.AMDGPU_DOORBELL_LAYOUT1_sDMA_ENGINE_START,      # aqua_vanjaram.c (gfx942)
    11: am.AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0,           # soc21.c
    12: am.AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0,           # soc24.c
}


def default_doorbell(gfx: int, engine: int) -> int:
    """The dword doorbell index amdgpu gives queue 0 of SDMA engine `engine` on GC generation `gfx`."""
    return (SDMA_ENGINE0_DOORBELL64[gfx] + engine * (DOORBELL_RANGE_DWORDS >> 1)) << 1


@dataclass(frozen=True)
class DoorbellRoute:
    """One NBIO entry that passes the doorbells of a range (dword indices) to an SDMA engine."""
    offset: tuple[str, str]                          # (register, field): the first doorbell of the range
    size: tuple[tuple[str, str], ...]                # (register, field)s holding its length (dwords)
    enable: tuple[str, str]                          # (register, field) that turns the entry on
    fixed: dict[str, dict[str, int]] = field(default_factory=dict)   # the other fields amdgpu sets, per register

    def registers(self) -> list[str]:
        """Every register the entry is made of, in the order amdgpu writes them."""
        names = [self.offset[0], *(r for r, _ in self.size), self.enable[0], *self.fixed]
        return list(dict.fromkeys(names))


def _s2a(reg: str, port: int, **fixed: int) -> tuple[str, dict[str, int]]:
    return reg, {f"S2A_DOORBELL_PORT{port}_{k}": v for k, v in fixed.items()}


def _s2a_route(reg: str, port: int) -> DoorbellRoute:
    """nbio_v4_3 / nbif_v6_3_1: the range lives in the S2A entry itself."""
    p = f"S2A_DOORBELL_PORT{port}_"
    return DoorbellRoute(offset=(reg, p + "RANGE_OFFSET"), size=((reg, p + "RANGE_SIZE"),), enable=(reg, p + "ENABLE"),
                         fixed=dict([_s2a(reg, port, AWID=0xE, AWADDR_31_28_VALUE=0x3)]))


def _bif_route(entry: int, s2a: int, awid: int, awaddr: int) -> DoorbellRoute:
    """nbio_v7_9: the range in DOORBELL0_CTRL_ENTRY_<entry>, the routing in S2A_DOORBELL_ENTRY_<s2a>_CTRL."""
    bif, reg, p = f"regDOORBELL0_CTRL_ENTRY_{entry}", f"regS2A_DOORBELL_ENTRY_{s2a}_CTRL", f"S2A_DOORBELL_PORT{s2a}_"
    return DoorbellRoute(offset=(bif, f"BIF_DOORBELL{entry}_RANGE_OFFSET_ENTRY"),
                         size=((bif, f"BIF_DOORBELL{entry}_RANGE_SIZE_ENTRY"), (reg, p + "RANGE_SIZE")),
                         enable=(reg, p + "ENABLE"),
                         fixed=dict([_s2a(reg, s2a, AWID=awid, RANGE_OFFSET=awid, AWADDR_31_28_VALUE=awaddr)]))


@dataclass(frozen=True)
class DoorbellRouting:
    """The SDMA doorbell entries of one NBIO version: per engine, or one for all engines (`shared`)."""
    routes: dict[int, DoorbellRoute]
    shared: bool                                     # routes[0] covers every engine; only engine 0 programs it

    def route(self, engine: int) -> DoorbellRoute:
        return self.routes[0 if self.shared else engine]


# NBIO (major, minor) -> the SDMA doorbell entries (see the module's sources)
DOORBELL_ROUTING: dict[tuple[int, int], DoorbellRouting] = {
    (4, 3): DoorbellRouting({0: _s2a_route("regS2A_DOORBELL_ENTRY_2_CTRL", 2)}, shared=True),
    (6, 3): DoorbellRouting({0: _s2a_route("regGDC_S2A0_S2A_DOORBELL_ENTRY_2_CTRL", 2)}, shared=True),
    (7, 9): DoorbellRouting({0: _bif_route(1, 1, 0xE, 0x1), 1: _bif_route(2, 2, 0x8, 0x2)}, shared=False),
}


def routing(nbio_version: tuple[int, ...]) -> DoorbellRouting | None:
    """The SDMA doorbell entries of an NBIO version, None when these facts do not cover it."""
    return DOORBELL_ROUTING.get(tuple(nbio_version[:2]))  # type: ignore[arg-type]
