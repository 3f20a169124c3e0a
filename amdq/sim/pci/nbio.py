"""The simulated NBIO (the PCIe bus interface) and HDP of a simulated PCI function.

Hardware behaviour modelled (sources: Linux amdgpu `amdgpu_device.c` / `amdgpu_discovery.c` for the
MM_INDEX/MM_DATA window and the registers read before discovery, `nbio_v4_3.c` / `nbio_v7_9.c` for the
indirect PCIE_INDEX2/DATA2 pair and the HDP flush request/done handshake):
- MM_INDEX (dword 0x0, bit 31 = memory aperture), MM_INDEX_HI (0x6), MM_DATA (0x1): a dword of VRAM
  through the register BAR, how a driver reads VRAM the CPU cannot see through a small BAR0.
- BIF_BX0_PCIE_INDEX2 / PCIE_DATA2: a register beyond the register BAR, by byte address.
- BIF_BX_PF0_GPU_HDP_FLUSH_REQ: a request bit per client; the HDP completes the flush at once (this
  VRAM has no write-combining cache in front of it) and reports it in GPU_HDP_FLUSH_DONE.
- SDMA doorbell routing (`nbio_v4_3.c` / `nbif_v6_3_1.c` / `nbio_v7_9.c` `sdma_doorbell_range`, the entries of
  amdq.hw.sdma_regs): a doorbell reaches an SDMA engine only when the engine's entry is enabled and its range
  (first doorbell, length; dword indices) holds it. Other doorbells are not checked here.
"""
from __future__ import annotations

from ...errors import RegisterError
from ...hw import sdma_regs
from .part import SimPart, place

# Absolute dword addresses decoded by the bus interface itself (amdgpu_device.c / amdgpu_discovery.c).
MM_INDEX, MM_DATA, MM_INDEX_HI = 0x0, 0x1, 0x6
MM_APERTURE = 1 << 31                  # MM_INDEX bit 31: the address is in VRAM (not a register)


class SimNBIO(SimPart):
    """Bus interface: the MM window onto VRAM, the indirect register pair, the HDP flush handshake."""
    name = "nbio"

    def __init__(self, dev):
        super().__init__(dev)
        self._routes: dict[int, tuple | None] = {}   # engine -> the places of its route's fields (`routes_sdma`)
        self.reset()

    def reset(self) -> None:
        self.mm_index = self.mm_index_hi = 0
        self.flushes = 0

    # -- the MM window (fixed addresses, before any IP base is known) --------------------------------
    def fixed(self, addr: int) -> bool:
        return addr in (MM_INDEX, MM_DATA, MM_INDEX_HI)

    def _mm_addr(self) -> int:
        if not self.mm_index & MM_APERTURE:
            raise RegisterError(f"MM_DATA with MM_INDEX={self.mm_index:#x}: bit 31 (the memory aperture) is "
                                f"clear; register access through the MM window is not decoded")
        off = (self.mm_index_hi << 31) | (self.mm_index & 0x7FFFFFFF)
        if off + 4 > len(self.dev.vram):
            raise RegisterError(f"MM window: VRAM offset {off:#x} is past the {len(self.dev.vram):#x}-byte VRAM")
        return off

    def read_fixed(self, addr: int) -> int:
        if addr == MM_INDEX:
            return self.mm_index
        if addr == MM_INDEX_HI:
            return self.mm_index_hi
        off = self._mm_addr()
        return int.from_bytes(self.dev.vram[off:off + 4], "little")

    def write_fixed(self, addr: int, value: int) -> None:
        if addr == MM_INDEX:
            self.mm_index = value
        elif addr == MM_INDEX_HI:
            self.mm_index_hi = value
        else:
            off = self._mm_addr()
            self.dev.vram[off:off + 4] = value.to_bytes(4, "little")

    # -- the indirect register pair ---------------------------------------------------------------
    def on_read_regBIF_BX0_PCIE_DATA2(self) -> int:
        return self.dev.mmio_read32(self.dev.raw.NBIO.regBIF_BX0_PCIE_INDEX2.read() >> 2)

    def on_write_regBIF_BX0_PCIE_DATA2(self, value: int) -> None:
        self.dev.mmio_write32(self.dev.raw.NBIO.regBIF_BX0_PCIE_INDEX2.read() >> 2, value)

    # -- HDP flush --------------------------------------------------------------------------------
    def on_write_regBIF_BX_PF0_GPU_HDP_FLUSH_REQ(self, value: int) -> None:
        self.flushes += 1
        done = self.dev.raw.NBIO.regBIF_BX_PF0_GPU_HDP_FLUSH_DONE
        done.write(done.read() | value)

    # -- SDMA doorbell routing ----------------------------------------------------------------------------
    def routes_sdma(self, engine: int, index: int) -> bool:
        """The bus interface passes a doorbell write at dword `index` to SDMA engine `engine`."""
        if engine not in self._routes:               # where the entry's fields are, looked up once
            nb = self.dev.raw.NBIO
            rt = sdma_regs.routing(nb.version)
            if rt is None:
                self._routes[engine] = None
            else:
                route = rt.route(engine)
                self._routes[engine] = (place(nb[route.enable[0]], route.enable[1]),
                                        place(nb[route.offset[0]], route.offset[1]),
                                        place(nb[route.size[0][0]], route.size[0][1]))
        places = self._routes[engine]
        if places is None:
            return False
        (en_a, en_s, en_m), (off_a, off_s, off_m), (size_a, size_s, size_m) = places
        peek = self.dev.regfile.peek                 # the registers as they are now
        if not (peek(en_a) >> en_s) & en_m:
            return False
        first = (peek(off_a) >> off_s) & off_m
        size = (peek(size_a) >> size_s) & size_m
        return first <= index < first + size
