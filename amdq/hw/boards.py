"""The reference board of every supported target: what `amdq info` reports and the simulated GPU is built as.

Sources (public product specifications):
- AMD product pages / launch specifications of the Radeon RX 7900 XTX, RX 7800 XT, RX 7600, RX 9060 XT and
  RX 9070 XT (compute units, boost and game clocks, memory type, speed and interface, memory size), as
  reported at launch (e.g. AMD's RX 9070 XT specification: 64 CUs, 2400 MHz game / 2970 MHz boost, 16 GB GDDR6 at
  20 Gbps on 256 bits; RX 7600: 32 CUs, 2250 / 2655 MHz, 8 GB GDDR6 at 18 Gbps on 128 bits).
- AMD Instinct MI300X data sheet (304 CUs, peak engine clock 2100 MHz, 192 GB HBM3, 5.3 TB/s over 8 stacks)
  and the MI350-series presentation at Hot Chips 2025 (MI355X: 256 CUs, peak engine clock 2400 MHz, 288 GB
  HBM3E, 8 TB/s).
- AMD Ryzen AI Max+ 395 specification (Radeon 8060S: 40 CUs, graphics clock up to 2900 MHz, LPDDR5X-8000 on a
  256-bit interface; its "VRAM" is a carve-out of system memory set by the firmware: the 32 GiB here is this
  project's choice, not a product figure).
- ROCm "AMD GPU specifications" table (rocm.docs.amd.com reference/gpu-specs: CUs, VRAM, LDS per target).
- Shader engines: AMD's architecture disclosures (Navi 31: 6, Navi 32: 3, Navi 33: 2, Navi 48: 4, Navi 44: 2,
  Strix Halo: 2; MI300X/MI355X: 4 per XCD, 8 XCDs).
Memory speed is the per-pin data rate AMD publishes ("memory speed" / "memory clock", Gbps effective); the
bandwidth is that rate times the interface width.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Board:
    name: str
    cus: int                        # compute units enabled on the board
    ses: int                        # shader engines (all dies)
    engine_mhz: int                 # peak (boost) engine clock
    game_mhz: int | None            # AMD's "game clock" (Radeon boards), None where not published
    memory: str                     # memory type
    memory_gbps: float              # per-pin data rate
    bus_bits: int                   # memory interface width
    vram_gib: int

    @property
    def bandwidth_gbs(self) -> float:
        """Peak memory bandwidth in GB/s (data rate x interface width)."""
        return self.memory_gbps * self.bus_bits / 8


BOARDS: dict[str, Board] = {
    "gfx1100": Board("Radeon RX 7900 XTX", 96, 6, 2500, 2300, "GDDR6", 20.0, 384, 24),
    "gfx1101": Board("Radeon RX 7800 XT", 60, 3, 2430, 2124, "GDDR6", 19.5, 256, 16),
    "gfx1102": Board("Radeon RX 7600", 32, 2, 2655, 2250, "GDDR6", 18.0, 128, 8),
    "gfx1151": Board("Radeon 8060S (Ryzen AI Max+ 395)", 40, 2, 2900, None, "LPDDR5X", 8.0, 256, 32),
    "gfx1200": Board("Radeon RX 9060 XT", 32, 2, 3130, 2530, "GDDR6", 20.0, 128, 16),
    "gfx1201": Board("Radeon RX 9070 XT", 64, 4, 2970, 2400, "GDDR6", 20.0, 256, 16),
    "gfx942": Board("Instinct MI300X", 304, 32, 2100, None, "HBM3", 5.2, 8192, 192),
    "gfx950": Board("Instinct MI355X", 256, 32, 2400, None, "HBM3E", 8.0, 8192, 288),
}
