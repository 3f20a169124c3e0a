"""The simulated SDMA engines of a simulated PCI function, as far as the boot reaches them: an engine
leaves halt only when the PSP loaded its firmware.

Sources: Linux amdgpu `sdma_v6_0.c` (SDMA0/1_F32_CNTL HALT / TH1_RESET, firmware SDMA_UCODE_TH0/TH1 by the
PSP), `sdma_v7_0.c` (SDMA0/1_MCU_CNTL HALT, one RS64 image), `sdma_v4_4_2.c` (per-instance SDMA<n> firmware),
`psp_gfx_if.h` (GFX_FW_TYPE_*).
"""
from __future__ import annotations

from ...hw import am
from .part import SimPart

SDMA_FW = {4: (am.GFX_FW_TYPE_SDMA0, am.GFX_FW_TYPE_SDMA1), 6: (am.GFX_FW_TYPE_SDMA_UCODE_TH0, am.GFX_FW_TYPE_SDMA_UCODE_TH1),
           7: (am.GFX_FW_TYPE_SDMA_UCODE_TH0,)}


class SimSDMA(SimPart):
    """SDMA halt state: HALT=0 is taken once the engine's firmware is loaded."""
    name = "sdma"

    def __init__(self, dev):
        super().__init__(dev)
        self.major = dev.target.ip["SDMA"][0]
        self.reset()

    def reset(self) -> None:
        self.loaded: set[int] = set()

    def save(self) -> dict:
        return {"loaded": sorted(self.loaded)}

    def load(self, state: dict) -> None:
        self.loaded = set(state.get("loaded", ()))

    def on_firmware(self, fw_type: int, image: bytes) -> None:
        self.loaded.add(fw_type)

    def ready(self) -> bool:
        return all(t in self.loaded for t in SDMA_FW.get(self.major, ()))

    def _gate(self, value: int, reg) -> None:
        if not value & 1 and not self.ready():      # HALT is bit 0 of both F32_CNTL and MCU_CNTL
            reg.write(value | 1)



class SimSDMA4(SimSDMA):
    """SDMA 4.4.2 (GFX9 parts): no halt register in this register map; the firmware state only."""


class SimSDMA6(SimSDMA):
    """SDMA 6 (GFX11): F32_CNTL.HALT."""

    def on_write_regSDMA0_F32_CNTL(self, value: int, reg) -> None:
        self._gate(value, reg)

    def on_write_regSDMA1_F32_CNTL(self, value: int, reg) -> None:
        self._gate(value, reg)


class SimSDMA7(SimSDMA):
    """SDMA 7 (GFX12): MCU_CNTL.HALT."""

    def on_write_regSDMA0_MCU_CNTL(self, value: int, reg) -> None:
        self._gate(value, reg)

    def on_write_regSDMA1_MCU_CNTL(self, value: int, reg) -> None:
        self._gate(value, reg)


def for_target(dev) -> SimSDMA:
    """The SDMA part of the device's SDMA generation."""
    return {4: SimSDMA4, 6: SimSDMA6, 7: SimSDMA7}[dev.target.ip["SDMA"][0]](dev)
