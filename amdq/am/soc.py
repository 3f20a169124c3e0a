"""The SOC block of the AM driver: the bus interface (NBIO) and the HDP, and how the driver reaches
registers and VRAM through the BARs before and after IP discovery.

Sources (facts, not code): Linux amdgpu `amdgpu_device.c` (registers past the MMIO BAR through the
PCIE index/data pair, byte address in the index; VRAM through MM_INDEX/MM_INDEX_HI/MM_DATA, bit 31 of
MM_INDEX selecting memory, when the CPU cannot see it through BAR0), `amdgpu_discovery.c` (MM_INDEX 0x0,
MM_DATA 0x1, MM_INDEX_HI 0x6), `nbio_v4_3.c` / `nbio_v7_9.c` (PCIE_INDEX2/DATA2, doorbell aperture enable,
HDP flush request/done per client), `soc21.c` / `soc24.c` / `soc15.c` (common init: doorbell aperture,
HDP flush), `nbio_v4_3.c` / `nbif_v6_3_1.c` / `nbio_v7_9.c` `sdma_doorbell_range` (amdq.hw.sdma_regs).
"""
from __future__ import annotations

import struct
from typing import Any

from ..errors import AMBootError, DeviceError, RegisterError
from ..hw import sdma_regs
from ..hw.regmap import Backend, Registers
from .ip import IPBlock

MM_INDEX, MM_DATA, MM_INDEX_HI = 0x0, 0x1, 0x6
MM_APERTURE = 1 << 31


class MMIO:
    """BAR5 as a register backend: dwords inside the BAR directly, the others through BIF_BX0_PCIE_INDEX2 /
    PCIE_DATA2 (known once the register layout is, see `use_indirect`)."""

    def __init__(self, bar: Backend, size: int):
        self.bar, self.size = bar, size
        self.index = self.data = None

    def use_indirect(self, regs: Registers) -> None:
        nb = regs.NBIO
        self.index, self.data = nb.regBIF_BX0_PCIE_INDEX2.addr, nb.regBIF_BX0_PCIE_DATA2.addr

    def _far(self, addr: int) -> bool:
        if addr * 4 + 4 <= self.size:
            return False
        if self.index is None:
            raise RegisterError(f"register {addr:#x} is past the {self.size:#x}-byte register BAR and the "
                                f"indirect pair is not known before IP discovery")
        return True

    def read32(self, addr: int) -> int:
        if self._far(addr):
            self.bar.write32(self.index, addr * 4)
            return self.bar.read32(self.data)
        return self.bar.read32(addr)

    def write32(self, addr: int, value: int) -> None:
        if self._far(addr):
            self.bar.write32(self.index, addr * 4)
            self.bar.write32(self.data, value)
        else:
            self.bar.write32(addr, value)


class VRAMAccess:
    """VRAM as the CPU reaches it: through BAR0 where it is visible, through the MM window elsewhere (a
    small BAR0 does not show the top of VRAM, where the discovery table and the boot memory are). BAR0 is a
    mapped buffer, or a window object with `read(off, n)`, `write(off, data)` and `len()` (a BAR reached over a
    bus bridge, iface/usb.py)."""

    def __init__(self, bar0: Any, mmio: Backend, size: int = 0):
        self.window = bar0 if hasattr(bar0, "read") and hasattr(bar0, "write") else None
        self.mv = memoryview(bar0).cast("B") if bar0 is not None and self.window is None else memoryview(b"")
        self.visible = len(self.window) if self.window is not None else len(self.mv)
        self.mmio, self.size = mmio, size

    def _mm_read32(self, off: int) -> int:
        self.mmio.write32(MM_INDEX, (off & 0x7FFFFFFF) | MM_APERTURE)
        self.mmio.write32(MM_INDEX_HI, off >> 31)
        return self.mmio.read32(MM_DATA)

    def _mm_write32(self, off: int, v: int) -> None:
        self.mmio.write32(MM_INDEX, (off & 0x7FFFFFFF) | MM_APERTURE)
        self.mmio.write32(MM_INDEX_HI, off >> 31)
        self.mmio.write32(MM_DATA, v)

    def _check(self, off: int, n: int) -> None:
        if self.size and not 0 <= off <= self.size - n:
            raise RegisterError(f"VRAM access of {n} bytes at {off:#x} is past the {self.size:#x}-byte VRAM")

    def read(self, off: int, n: int) -> bytes:
        self._check(off, n)
        if off + n <= self.visible:
            return self.window.read(off, n) if self.window is not None else bytes(self.mv[off:off + n])
        lo, hi = off & ~3, (off + n + 3) & ~3
        words = b"".join(struct.pack("<I", self._mm_read32(a)) for a in range(lo, hi, 4))
        return words[off - lo:off - lo + n]

    def write(self, off: int, data: bytes) -> None:
        n = len(data)
        self._check(off, n)
        if off + n <= self.visible:
            if self.window is not None:
                self.window.write(off, bytes(data))
            else:
                self.mv[off:off + n] = data
            return
        lo, hi = off & ~3, (off + n + 3) & ~3
        buf = bytearray(hi - lo)
        if lo != off:
            buf[0:4] = struct.pack("<I", self._mm_read32(lo))
        if hi != off + n and hi - 4 >= lo:
            buf[-4:] = struct.pack("<I", self._mm_read32(hi - 4))
        buf[off - lo:off - lo + n] = data
        for i in range(0, len(buf), 4):
            self._mm_write32(lo + i, struct.unpack_from("<I", buf, i)[0])


def psp_reg(regs: Registers, n: int):
    """MP0 C2PMSG_n, as the MP0 version names it (MP0_SMN_ on MP 13, MPASP_SMN_ on MP 14)."""
    mp0 = regs.MP0
    for name in (f"regMP0_SMN_C2PMSG_{n}", f"regMPASP_SMN_C2PMSG_{n}"):
        if name in mp0:
            return mp0[name]
    raise RegisterError(f"MP0 {'.'.join(map(str, mp0.version))} has no C2PMSG_{n}")


def sos_alive(regs: Registers) -> bool:
    """The PSP's secure OS runs (C2PMSG_81 != 0): some driver loaded it since the last reset."""
    return psp_reg(regs, 81).read() != 0


class SOC(IPBlock):
    """NBIO and HDP: doorbell aperture on, an HDP flush to check the handshake."""
    name = "soc"

    def init_hw(self) -> None:
        nb = self.am.regs.NBIO
        nb.regRCC_DEV0_EPF0_RCC_DOORBELL_APER_EN.write(BIF_DOORBELL_APER_EN=1)
        self.hdp_flush()

    def hdp_flush(self) -> None:
        """Flush the HDP (the host path into VRAM) and wait for it: request bit CP0, poll the done bit."""
        nb = self.am.regs.NBIO
        done = nb.regBIF_BX_PF0_GPU_HDP_FLUSH_DONE
        nb.regBIF_BX_PF0_GPU_HDP_FLUSH_REQ.write(CP0=1)
        self.am.wait(lambda: done.read_fields()["CP0"] == 1, 100, "HDP flush (NBIO.regBIF_BX_PF0_GPU_HDP_FLUSH_DONE.CP0)")

    def fini_hw(self) -> None:
        self.hdp_flush()

    def sdma_doorbell_range(self, engine: int, first: int, size: int) -> None:
        """Route the doorbells first .. first+size-1 (dword indices) to SDMA engine `engine`: its NBIO entry
        (amdq.hw.sdma_regs.DOORBELL_ROUTING) enabled with that range, the other fields as amdgpu sets them."""
        nb = self.am.regs.NBIO
        rt = sdma_regs.routing(nb.version)
        if rt is None:
            raise DeviceError(f"NBIO {'.'.join(map(str, nb.version))}: no SDMA doorbell-range facts for this version")
        route = rt.route(engine)
        fields: dict[str, dict[str, int]] = {r: dict(route.fixed.get(r, {})) for r in route.registers()}
        fields[route.offset[0]][route.offset[1]] = first
        for reg, fld in route.size:
            fields[reg][fld] = size
        fields[route.enable[0]][route.enable[1]] = 1
        for reg, values in fields.items():
            nb[reg].update(**values)


def check_bus(value: int, what: str) -> None:
    """A register reading all ones: the function is off the bus or its memory space is disabled."""
    if value == 0xFFFFFFFF:
        raise AMBootError(f"{what} reads 0xffffffff: the GPU does not answer on its register BAR (memory space "
                          f"disabled, or the device fell off the bus)")
