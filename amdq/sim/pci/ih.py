"""The simulated IH (interrupt handler, OSSSYS): interrupt vectors written into the driver's ring.

The ring is where IH_RB_BASE/BASE_HI say (a memory-controller address >> 8, through the MMHUB like every
OSSSYS access: `dev.mc_write`), of the size IH_RB_CNTL.RB_SIZE encodes (log2 of dwords). Each interrupt is
one 32-byte IV entry (amdq.hw.ih) at the write pointer; the pointer advances and, with
WPTR_WRITEBACK_ENABLE, the IH_RB_WPTR value is written to IH_RB_WPTR_ADDR_LO/HI. Nothing is written while
RB_ENABLE is 0.

A full ring (the next entry would reach the read pointer the driver wrote to IH_RB_RPTR): with
WPTR_OVERFLOW_ENABLE the IH writes on over the oldest entries and sets RB_OVERFLOW in IH_RB_WPTR (the
driver restarts after the write pointer, the oldest entry not overwritten: amdgpu ih_v6_0/vega20_ih
get_wptr); without it the vector is dropped and IH_RB_STATUS (where the block has it) says the ring is full.
IH_RB_CNTL.WPTR_OVERFLOW_CLEAR clears the flag. Timestamps are the GPU clock (100 MHz).

Sources: Linux amdgpu ih_v6_0.c, ih_v6_1.c, ih_v7_0.c, vega20_ih.c (register use), the OSSSYS register
headers (fields, amdq.hw.regs), amdgpu_ih.c (entry layout, amdq.hw.ih).
"""
from __future__ import annotations

import struct

from ...hw import ih as H
from .part import SimPart

NS_PER_TICK = 10                   # the 100 MHz GPU clock


class SimIH(SimPart):
    name = "ih"

    def __init__(self, dev):
        super().__init__(dev)
        self.wptr = 0
        self.overflow = False
        self.dropped = 0
        self.posted = 0

    def _r(self, name: str):
        return self.dev.raw.OSSSYS["reg" + name]

    def reset(self) -> None:
        for n in ("IH_RB_CNTL", "IH_RB_BASE", "IH_RB_BASE_HI", "IH_RB_RPTR", "IH_RB_WPTR", "IH_RB_WPTR_ADDR_LO",
                  "IH_RB_WPTR_ADDR_HI"):
            self._r(n).write(0)
        self.wptr, self.overflow, self.dropped, self.posted = 0, False, 0, 0

    # -- registers -----------------------------------------------------------------------------------
    def on_write_regIH_RB_WPTR(self, value: int) -> None:
        self.wptr = self._r("IH_RB_WPTR").decode(value)["OFFSET"] << 2
        self.overflow = bool(self._r("IH_RB_WPTR").decode(value)["RB_OVERFLOW"])

    def on_write_regIH_RB_CNTL(self, value: int) -> None:
        if self._r("IH_RB_CNTL").decode(value)["WPTR_OVERFLOW_CLEAR"]:
            self.overflow = False
            self._publish()

    def _size(self) -> int:
        return H.ring_bytes(self._r("IH_RB_CNTL").read_fields()["RB_SIZE"])

    def _publish(self) -> None:
        w = self._r("IH_RB_WPTR")
        w.write(OFFSET=self.wptr >> 2, RB_OVERFLOW=int(self.overflow))
        cntl = self._r("IH_RB_CNTL").read_fields()
        if cntl["WPTR_WRITEBACK_ENABLE"] and cntl["RB_ENABLE"]:
            addr = (self._r("IH_RB_WPTR_ADDR_HI").read() & 0xFFFF) << 32 | self._r("IH_RB_WPTR_ADDR_LO").read() & ~3
            self.dev.mc_write(addr, struct.pack("<I", w.read()))

    # -- interrupts ----------------------------------------------------------------------------------
    def post(self, client_id: int, src_id: int, src_data: tuple[int, ...] = (), ring_id: int = 0, vmid: int = 0,
             pasid: int = 0, node_id: int = 0) -> bool:
        """Write one interrupt vector; False when the IH dropped it (ring disabled or full)."""
        cntl = self._r("IH_RB_CNTL").read_fields()
        if not cntl["RB_ENABLE"]:
            self.dropped += 1
            return False
        size = self._size()
        rptr = (self._r("IH_RB_RPTR").read_fields()["OFFSET"] << 2) % size
        self.wptr %= size
        full = (self.wptr + H.ENTRY_BYTES) % size == rptr
        if full and not cntl["WPTR_OVERFLOW_ENABLE"]:
            self.dropped += 1
            self._status(full=True)
            return False
        entry = H.IVEntry(client_id, src_id, tuple(src_data) + (0,) * (H.SRC_DATA_DWORDS - len(src_data)),
                          ring_id, vmid, 0, self.dev.clock_ns() // NS_PER_TICK, 0, pasid, node_id)
        base = ((self._r("IH_RB_BASE_HI").read() & 0xFF) << 32 | self._r("IH_RB_BASE").read()) << H.RB_BASE_SHIFT
        self.dev.mc_write(base + self.wptr, entry.encode())
        self.wptr = (self.wptr + H.ENTRY_BYTES) % size
        if full:
            self.overflow = True
            self._status(full=True, overflow=True)
        self.posted += 1
        self._publish()
        return True

    def _status(self, full: bool = False, overflow: bool = False) -> None:
        if "regIH_RB_STATUS" in self.dev.raw.OSSSYS:
            self._r("IH_RB_STATUS").update(RB_FULL=int(full), RB_OVERFLOW=int(overflow))

    def save(self) -> dict:
        return {"wptr": self.wptr, "overflow": self.overflow}

    def load(self, state: dict) -> None:
        self.wptr, self.overflow = state["wptr"], state["overflow"]
