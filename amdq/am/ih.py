"""The IH block: the interrupt ring in the boot region, and reading the interrupt vectors from it.

The hardware sequence (Linux amdgpu ih_v6_0.c / ih_v7_0.c / vega20_ih.c init_register_ring): the ring
disabled, its base (memory-controller address >> 8, >> 40 in BASE_HI), size and control (RB_SIZE = log2 of
dwords, write-pointer overflow on and cleared, write-pointer write-back on, snooped), the write-back address,
read and write pointers 0, then RB_ENABLE and ENABLE_INTR. Reading (`read`): the write pointer from the
write-back dword; on RB_OVERFLOW the ring is read from the entry after the write pointer (the oldest one not
overwritten) and the flag is cleared with WPTR_OVERFLOW_CLEAR; the entries up to the write pointer are
decoded (amdq.hw.ih) and IH_RB_RPTR moves past them.
"""
from __future__ import annotations

import struct

from ..errors import DeviceError
from ..hw import ih as H
from .ip import AMContext, IPBlock

RING_BYTES = 256 << 10             # amdgpu's IH ring 0 size


class IH(IPBlock):
    name = "ih"

    def __init__(self, am: AMContext, ring_bytes: int = RING_BYTES):
        super().__init__(am)
        self.ring_bytes = ring_bytes
        try:
            H.rb_size_field(ring_bytes)           # a size the hardware can take, or an error now
        except ValueError as e:
            raise DeviceError(f"IH ring: {e}") from None
        self.rptr = 0
        self.overflows = 0

    @property
    def _o(self):
        return self.am.regs.OSSSYS

    def init_sw(self) -> None:
        self.ring = self.am.boot.reserve("ih_ring", self.ring_bytes, align=1 << 12)
        self.wb = self.am.boot.reserve("ih_wptr_writeback", 4096)

    def init_hw(self) -> None:
        o = self._o
        o.regIH_RB_CNTL.update(RB_ENABLE=0, ENABLE_INTR=0)
        o.regIH_RB_BASE.write((self.ring.mc >> H.RB_BASE_SHIFT) & 0xFFFFFFFF)
        o.regIH_RB_BASE_HI.write((self.ring.mc >> H.RB_BASE_HI_SHIFT) & 0xFF)
        o.regIH_RB_CNTL.write(RB_SIZE=H.rb_size_field(self.ring_bytes), WPTR_OVERFLOW_ENABLE=1, WPTR_OVERFLOW_CLEAR=1,
                              WPTR_WRITEBACK_ENABLE=1, MC_SNOOP=1, MC_VMID=0)
        o.regIH_RB_WPTR_ADDR_LO.write(self.wb.mc & 0xFFFFFFFC)
        o.regIH_RB_WPTR_ADDR_HI.write((self.wb.mc >> 32) & 0xFFFF)
        self.am.vram.write(self.wb.offset, bytes(4))
        o.regIH_RB_RPTR.write(0)
        o.regIH_RB_WPTR.write(0)
        self.rptr = 0
        o.regIH_RB_CNTL.update(WPTR_OVERFLOW_CLEAR=0, RB_ENABLE=1, ENABLE_INTR=1)
        self.am.log(2, f"ih: ring of {self.ring_bytes} bytes at {self.ring.mc:#x}, write-back at {self.wb.mc:#x}")

    def fini_hw(self) -> None:
        self._o.regIH_RB_CNTL.update(RB_ENABLE=0, ENABLE_INTR=0)

    def wptr(self) -> tuple[int, bool]:
        """(write pointer in bytes, overflow flag) from the write-back dword."""
        v = struct.unpack("<I", self.am.vram.read(self.wb.offset, 4))[0]
        f = self._o.regIH_RB_WPTR.decode(v)
        return (f["OFFSET"] << 2) % self.ring_bytes, bool(f["RB_OVERFLOW"])

    def read(self) -> list[H.IVEntry]:
        """The interrupt vectors posted since the last read, oldest first; the read pointer moves past them."""
        wptr, overflow = self.wptr()
        if overflow:
            self.overflows += 1
            self.am.log(1, f"ih: ring overflow (wptr {wptr:#x}, rptr {self.rptr:#x}); restarting after the write "
                           "pointer")
            self.rptr = (wptr + H.ENTRY_BYTES) % self.ring_bytes
            cntl = self._o.regIH_RB_CNTL
            cntl.update(WPTR_OVERFLOW_CLEAR=1)
            cntl.update(WPTR_OVERFLOW_CLEAR=0)
        out = []
        while self.rptr != wptr:
            raw = self.am.vram.read(self.ring.offset + self.rptr, H.ENTRY_BYTES)
            out.append(H.IVEntry.decode(raw))
            self.rptr = (self.rptr + H.ENTRY_BYTES) % self.ring_bytes
            if len(out) > self.ring_bytes // H.ENTRY_BYTES:
                raise DeviceError("IH: the write pointer is not on an entry boundary of the ring")
        self._o.regIH_RB_RPTR.write(self.rptr)
        return out
