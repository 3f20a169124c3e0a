"""The contract between the AM driver's IP blocks and the device they boot.

Every hardware block of the driver (soc.py, gmc.py, ih.py, psp.py, smu.py, gfx.py, sdma.py) is an `IPBlock`
with one lifecycle: `init_sw` (parse firmware, reserve boot memory; no register access), `init_hw` (the
hardware sequence), `fini_hw` (leave the block quiet, as the next boot expects it). A block reaches the
device only through the `AMContext` it is given: registers, VRAM, the boot region, firmware, timed waits.
The same blocks run on a real PCI function (iface/pci.py), on the simulated one (sim/pci/) and later over
USB; only the context's backends differ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from ..hw.discovery import Discovery
    from ..hw.regmap import Registers
    from ..hw.targets import Target
    from .firmware import Firmware


@dataclass(frozen=True)
class Region:
    """A piece of the boot region: VRAM offset, size and the address the GPU's memory controller uses."""
    name: str
    offset: int
    size: int
    mc: int


class VRAM(Protocol):
    size: int

    def read(self, offset: int, n: int) -> bytes: ...
    def write(self, offset: int, data: bytes) -> None: ...


class BootMemory(Protocol):
    start: int                        # the region's VRAM offsets [start, end)
    end: int

    def reserve(self, name: str, size: int, align: int = 4096) -> Region:
        """A named region of the reserved boot memory (near the top of VRAM, below the discovery table). The
        same name gets the same placement on every boot of the same device, so a partial boot reuses what a
        full boot set up (the TMR, the IH ring, the dummy page ...)."""
        ...


class AMContext(Protocol):
    """What an IP block uses from the device it boots."""
    boot_kind: str                    # "full" or "partial" (this boot; see am/driver.py)
    tmr_size: "int | None"            # partial boot: SCRATCH_REG5 of the full boot; a full boot's PSP sets it
    fb_base: int                      # the FB aperture's base (MMMC_VM_FB_LOCATION_BASE << 24)
    target: "Target"
    regs: "Registers"                 # every register map of the device, bound to BAR5 (or the simulated file)
    discovery: "Discovery"
    vram: VRAM
    boot: BootMemory
    debug: int                        # AM_DEBUG level

    def firmware(self, file: str) -> "Firmware":
        """A loaded, checked firmware file (real, or a stand-in image on the simulated device)."""
        ...

    def mc(self, vram_offset: int) -> int:
        """The memory-controller address of a VRAM offset (FB base + offset)."""
        ...

    def log(self, level: int, msg: str) -> None:
        """Print `msg` when AM_DEBUG >= level."""
        ...

    def wait(self, done: Callable[[], bool], timeout_ms: float, what: str) -> None:
        """Poll `done` until true; AMTimeout naming `what` (a register, a PSP command, an SMU message) after
        `timeout_ms`."""
        ...

    def block(self, name: str) -> "IPBlock | None":
        """Another IP block of this boot by name (soc, gmc, ih, psp, smu, gfx, sdma)."""
        ...


class IPBlock:
    """One hardware block of the driver, with one lifecycle."""
    name = ""

    def __init__(self, am: AMContext):
        self.am = am

    def init_sw(self) -> None:
        """Software state: firmware parsed, boot memory reserved. No register access."""

    def init_hw(self) -> None:
        """The block's hardware sequence (full boot)."""

    # Optional: `resume_hw()` is called instead of init_hw on a partial boot for the blocks of
    # driver.PARTIAL_ORDER (gmc: the VM's software state; ih: the ring again; psp: TMR re-init; gfx: MEC reset;
    # sdma); without it init_hw is called.
    # The SMU block has `mode1_reset()` (send the message; the driver then waits for the GPU to come back).

    def fini_hw(self) -> None:
        """Leave the block as the next boot expects to find it."""
