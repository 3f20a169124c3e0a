"""The IH block: the interrupt ring in the boot region, and reading the interrupt vectors from it.

The hardware sequence (Linux amdgpu ih_v6_0.c / ih_v7_0.c / vega20_ih.c init_register_ring): the ring
disabled, its base (memory-controller address >> 8, >> 40 in BASE_HI), size and control (RB_SIZE = log2 of
dwords, write-pointer overflow on and cleared, write-pointer write-back on, snooped), the write-back address,
read and write pointers 0, then RB_ENABLE and ENABLE_INTR. Reading (`read`): the write pointer from the
write-back dword; on RB_OVERFLOW the ring is read from the entry after the write pointer (the oldest one not
overwritten) and the flag is cleared with WPTR_OVERFLOW_CLEAR; the entries up to the write pointer are
decoded (amdq.hw.ih) and IH_RB_RPTR moves past them.

Waiting (`wait`): until the write pointer moves past the read pointer. The interface gives the block a
`sleep(timeout_ms) -> count` that returns when the function interrupts (the VFIO eventfd on hardware, the
simulated IH's signal on SIMPCI); between sleeps the write-back dword is looked at, so an interrupt another
waiter took costs at most one slice. Without one the write-back dword is polled (backing off to POLL_MAX_S).
`drain` is `read` with every entry decoded into an `amdq.am.irq.Interrupt` (client and source named, the ring
id and payload decoded) and, for a VM fault, the hub's fault registers decoded and cleared (amdq.am.vmfault).
"""
from __future__ import annotations

import struct
import time
from typing import Callable

from ..errors import DeviceError
from ..hw import ih as H
from ..hw import ih_ids as I
from . import irq
from .ip import AMContext, IPBlock
from .vmfault import VMFaults

RING_BYTES = 256 << 10             # amdgpu's IH ring 0 size
SLEEP_SLICE_MS = 100               # the longest interrupt sleep before the write-back dword is looked at again
POLL_MIN_S, POLL_MAX_S = 20e-6, 2e-3


class IH(IPBlock):
    name = "ih"

    def __init__(self, am: AMContext, ring_bytes: int = RING_BYTES):
        super().__init__(am)
        self.ring_bytes = ring_bytes
        try:
            H.rb_size_field(ring_bytes)           # a size the hardware can take, or an error now
        except ValueError as e:
            raise DeviceError(f"IH ring: {e}") from None
        self.rptr: int | None = None                     # None until init_hw (then read from IH_RB_RPTR)
        self._wptr_fields: tuple[int, int, int] | None = None
        self._rptr_reg = None                            # IH_RB_RPTR of am.regs (every read writes it)
        self.overflows = 0
        self.sleep: Callable[[int], int] | None = None   # the interface's interrupt wait (see the module doc)
        self._faults: VMFaults | None = None
        self._kinds: dict[tuple[int, int], str] = {}     # (client id, source id) -> kind (amdq.am.irq.kind_of)

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

    def resume_hw(self) -> None:
        """A partial boot: the ring is programmed where the full boot put it (base, size, write-back survive) and
        fini_hw only disabled it. What the last session left is acknowledged unread (the read pointer to the
        write pointer of the write-back word), then the ring and its interrupt are on again."""
        wptr, _ = self.wptr()
        self._o.regIH_RB_RPTR.write(OFFSET=wptr >> 2)
        self.rptr = wptr
        self._o.regIH_RB_CNTL.update(RB_ENABLE=1, ENABLE_INTR=1)

    def fini_hw(self) -> None:
        self._o.regIH_RB_CNTL.update(RB_ENABLE=0, ENABLE_INTR=0)

    def wptr(self) -> tuple[int, bool]:
        """(write pointer in bytes, overflow flag) from the write-back dword (the fields' places looked up once:
        every wait asks)."""
        if self._wptr_fields is None:
            f = self._o.regIH_RB_WPTR.fields
            self._wptr_fields = (f["OFFSET"].lo, f["OFFSET"].mask, f["RB_OVERFLOW"].mask)
        lo, off_mask, ovf_mask = self._wptr_fields
        v = struct.unpack("<I", self.am.vram.read(self.wb.offset, 4))[0]
        return (((v & off_mask) >> lo) << 2) % self.ring_bytes, bool(v & ovf_mask)

    def _rptr(self) -> int:
        if self.rptr is None:                           # a partial boot left the ring as the last session had it
            self.rptr = (self._o.regIH_RB_RPTR.read_fields()["OFFSET"] << 2) % self.ring_bytes
        return self.rptr

    def pending(self) -> bool:
        """Whether entries wait between the read and the write pointer (or the ring overflowed)."""
        wptr, overflow = self.wptr()
        return overflow or wptr != self._rptr()

    def wait(self, timeout_ms: float) -> bool:
        """Sleep until an entry is pending or `timeout_ms` passes; whether one is."""
        end = time.monotonic() + max(0.0, timeout_ms) / 1000
        delay = POLL_MIN_S
        looked = self.sleep is None
        while True:
            if self.pending():
                return True
            left = end - time.monotonic()
            if left <= 0:
                if looked:
                    return False
                looked = True                   # a zero-timeout poll asks the interrupt once, without sleeping
                self.sleep(0)                   # (a synchronous simulated function runs a slice of work in it)
                continue
            if self.sleep is not None:
                self.sleep(max(1, min(SLEEP_SLICE_MS, int(left * 1000 + 0.999))))
            else:
                time.sleep(min(delay, left))
                delay = min(delay * 2, POLL_MAX_S)

    def drain(self, kinds: tuple[str, ...] | None = None) -> list[irq.Interrupt]:
        """Every entry posted since the last read, decoded (VM faults with the hub's registers, which are then
        cleared); IH_RB_RPTR acknowledges them. With `kinds`, only the entries of those kinds (amdq.am.irq) are
        decoded: the others are classified by their ids and acknowledged unread (a waiter looking for faults
        does not decode every end of pipe)."""
        if self._faults is None:
            self._faults = VMFaults(self.am.regs, self.am.target)
        fam = I.family(self.am.target.gfx_version)
        out = []
        for raw in self._take():
            if kinds is not None:
                ids = H.ids(struct.unpack_from("<I", raw)[0])
                kind = self._kinds.get(ids)
                if kind is None:
                    kind = self._kinds[ids] = irq.kind_of(fam, *ids)
                if kind not in kinds:
                    continue
            e = H.IVEntry.decode(raw)
            rec = irq.decode(e, self.am.target, self._faults.num_xcc)
            if rec.kind == "vm_fault":
                rec = rec.with_fault(self._faults.decode(e))
            out.append(rec)
        return out

    def read(self) -> list[H.IVEntry]:
        """The interrupt vectors posted since the last read, oldest first; the read pointer moves past them."""
        return [H.IVEntry.decode(raw) for raw in self._take()]

    def _take(self) -> list[bytes]:
        """The raw entries since the last read (the ring read at once, in two pieces where it wraps); the read
        pointer moves past them."""
        self._rptr()
        wptr, overflow = self.wptr()
        if overflow:
            self.overflows += 1
            self.am.log(1, f"ih: ring overflow (wptr {wptr:#x}, rptr {self.rptr:#x}); restarting after the write "
                           "pointer")
            self.rptr = (wptr + H.ENTRY_BYTES) % self.ring_bytes
            cntl = self._o.regIH_RB_CNTL
            cntl.update(WPTR_OVERFLOW_CLEAR=1)
            cntl.update(WPTR_OVERFLOW_CLEAR=0)
        if self.rptr == wptr:
            return []
        if wptr % H.ENTRY_BYTES != self.rptr % H.ENTRY_BYTES:
            raise DeviceError("IH: the write pointer is not on an entry boundary of the ring")
        base = self.ring.offset
        if wptr > self.rptr:
            span = self.am.vram.read(base + self.rptr, wptr - self.rptr)
        else:
            span = self.am.vram.read(base + self.rptr, self.ring_bytes - self.rptr) + self.am.vram.read(base, wptr)
        out = [span[i:i + H.ENTRY_BYTES] for i in range(0, len(span), H.ENTRY_BYTES)]
        self.rptr = wptr
        r = self._rptr_reg
        if r is None or r.regs is not self.am.regs:
            r = self._rptr_reg = self._o.regIH_RB_RPTR
        r.write(self.rptr)
        return out
