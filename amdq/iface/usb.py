"""The USB interface: the AM driver over an ASM24xx USB-to-PCIe bridge running the vendor-request firmware.

Layers, each only calling the one below (facts: shared/facts/usb_asm24.json, NOTES.md section 4):

1. usb_bridge.py `Controller`: the bridge's requests (XDATA, TLPs, memory streams, SRAM DMA, power), posted
   register writes batched, libusb errors as amdq errors, unplug as DeviceLost.
2. usb_pcie.py `bring_up`: link, the switch ports behind the bridge, the GPU's BARs sized and placed.
3. Here, backends: `Registers` (BAR5 dwords over TLPs), `VRAMWindow` (BAR0 byte reads and writes), `Doorbells`
   (BAR2 64-bit doorbells), `Shadows` (the runtime's CPU views of VRAM), gathered in `USBFunction`, which speaks
   the PCI function protocol of iface/pci.py, so the AM driver boots the GPU through it unchanged.
4. Here, `USB`: the interface (the PCI interface over a `USBFunction`), with host copies through the bridge SRAM
   (usb_copy.py: sentinels, SDMA polls, the drain fence).

The fast path. No CPU mapping of VRAM exists over the bridge, so the runtime's CPU views are host copies; the
runtime says what it wrote and what it will read through the coherence hints of its views (base.Mapping `wrote`,
`watch`, `refresh`: no-ops on the other interfaces), so nothing is compared or read back wholesale. What each
operation costs, counted by the simulated bridge, and the host's round trips (its waits for the bridge, counted
by the controller; tests/test_usb_counts.py asserts these; bench/usb.py measures):
- a launch (PM4 queue): 4 transfers, 1 round trip: the ring dwords as one stream (F0 arm + bulk OUT; two where
  the ring wraps), the kernel arguments among them (the interface asks for them in the ring, `kernargs_in_ring`:
  a NOP's body in front of the dispatch, see runtime/pm4_queue.py), the queue's write pointer and the doorbell
  as one single posted TLP each (one control transfer: their upper halves are unchanged). A stream's arm and data
  go out together and the host waits once, for the data: the next request replaces the TLP engine's stream, and
  the doorbell must not reach the GPU before the ring dwords it announces. Posted TLPs are not waited for
  (endpoint 0 keeps them in order; an error surfaces at the next request). The write pointer's copy in VRAM is
  kept because the facts' doorbell path writes it and an engine that polls it (the SDMA's firmware write-pointer
  poll, which the AM driver enables) reads it; it costs a transfer but no wait.
- an AQL launch: 6 transfers, 2 round trips: its kernel arguments are a stream of their own (an AQL packet has no
  room for them), then the packet (its signal's vendor packet runs PM4 placed right after the kernel arguments);
  a bound resubmission: 4 transfers, 1 round trip on the PM4 queue (ring stream, write pointer, doorbell), 6 and 2
  on the AQL queue (its signal's PM4 in the slot's own IB: one more stream); a graph replay as a bound launch.
- the wait for a finished launch: 2 transfers, 1 round trip (the device's signal words, one stream read: arm and
  bulk IN together); timed: 4 and 2 (its timestamps too). A wait that must sleep polls the signal words and the
  IH write pointer (faults), one stream each a round.
- a register write: queued; a run of consecutive registers is one stream (2 transfers), a lone one one TLP.
"""
from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
from typing import Any, Callable

from ..errors import AMBootError, AMTimeout, DeviceError, DeviceLost, FirmwareRefused, PSPError, SMUError
from .base import Mapping
from .pci import PCI
from .usb_bridge import (ALT_SETTING, CMD_MASTER, CMD_MEMORY, CONFIGURATION, GPU_BUS, INTERFACE,
                         LIBUSB_ERROR_NO_DEVICE, LTSSM_L0, PRODUCT_PREFIXES, SPEED_HIGH, USB_IDS,
                         XDATA_READ_MAX_HIGH_SPEED, Controller,
                         TLPError, _libusb_code, _usb_errors)
from .usb_pcie import BAR, Port, Topology, bring_up, size_bars

log = logging.getLogger(__name__)

__all__ = ["USB", "USBFunction", "Registers", "VRAMWindow", "Doorbells", "Shadows", "Controller", "TLPError", "BAR",
           "Port", "Topology", "bring_up", "size_bars", "open_handle", "open_function", "open_usb", "open_real", "present"]


# --- backends: BAR5 registers, BAR0 VRAM, BAR2 doorbells -----------------------------------------------------
class Registers:
    """BAR5 as a dword register backend: a read is one 4-byte stream read, a write a queued posted write (queued
    writes to consecutive registers go as one stream, all of them before the next read)."""

    def __init__(self, ctrl: Controller, base: int, size: int):
        self.ctrl, self.base, self.size = ctrl, base, size

    def _addr(self, addr: int) -> int:
        if not 0 <= addr * 4 <= self.size - 4:
            raise DeviceError(f"register address {addr:#x} is outside the {self.size:#x}-byte register BAR")
        return self.base + addr * 4

    def read32(self, addr: int) -> int:
        return struct.unpack("<I", self.ctrl.mem_read(self._addr(addr), 4))[0]

    def write32(self, addr: int, value: int) -> None:
        self.ctrl.post(self._addr(addr), struct.pack("<I", value & 0xFFFFFFFF))


class VRAMWindow:
    """BAR0 as byte reads and writes (a VRAM window the AM driver's VRAMAccess takes in place of a mapped BAR):
    unaligned ends are read, merged and written back as whole dwords."""

    def __init__(self, ctrl: Controller, base: int, size: int):
        self.ctrl, self.base, self.size = ctrl, base, size

    def __len__(self) -> int:
        return self.size

    def _check(self, off: int, n: int) -> None:
        if not 0 <= off <= off + n <= self.size:
            raise DeviceError(f"VRAM access of {n} bytes at {off:#x} leaves the {self.size:#x}-byte BAR0")

    def read(self, off: int, n: int) -> bytes:
        self._check(off, n)
        if n == 0:
            return b""
        lo, hi = off & ~3, (off + n + 3) & ~3
        return self.ctrl.mem_read(self.base + lo, hi - lo)[off - lo:off - lo + n]

    def write(self, off: int, data: bytes) -> None:
        n = len(data)
        self._check(off, n)
        if n == 0:
            return
        lo, hi = off & ~3, (off + n + 3) & ~3
        if lo == off and hi == off + n:
            self.ctrl.mem_write(self.base + off, bytes(data))
            return
        with self.ctrl.lock:
            buf = bytearray(hi - lo)
            if lo != off:
                buf[0:4] = self.ctrl.mem_read(self.base + lo, 4)
            if hi != off + n:
                buf[-4:] = self.ctrl.mem_read(self.base + hi - 4, 4)
            buf[off - lo:off - lo + n] = data
            self.ctrl.mem_write(self.base + lo, bytes(buf))


class Doorbells:
    """BAR2 as the interface protocol's doorbell Mapping, after `before()` (the interface pushes what the GPU is to
    read). A 64-bit doorbell is an 8-byte stream write (facts: amd_over_usb.doorbell_path: an F0 arm and a bulk OUT)
    the first time and whenever its upper half changes; otherwise only its lower dword is written, as one single
    posted TLP: one control transfer. (This module's choice: the upper half the doorbell holds is the one written
    last; a queue made anew at a doorbell starts with the full write, `forget`.)"""

    def __init__(self, ctrl: Controller, base: int, size: int, before: Callable[[], None] | None = None):
        self.ctrl, self.base, self.size, self.before = ctrl, base, size, before
        self.addr, self.mv = 0, None
        self.rings = 0
        self.high: dict[int, int] = {}          # doorbell offset -> the upper half it holds (written by us)

    def forget(self, off: int) -> None:
        """The next write to the doorbell at `off` writes all 64 bits (a new queue there)."""
        self.high.pop(off, None)

    def _check(self, off: int, n: int) -> int:
        if off & (n - 1) or not 0 <= off <= self.size - n:
            raise DeviceError(f"doorbell write at {off:#x} is not an aligned {n}-byte slot of the "
                              f"{self.size:#x}-byte doorbell BAR")
        return self.base + off

    def write64(self, off: int, v: int) -> None:
        a = self._check(off, 8)
        v &= 0xFFFFFFFFFFFFFFFF
        with self.ctrl.doing(f"submitting work (doorbell {off // 8} to {v:#x})"):
            if self.before is not None:
                self.before()
            if self.high.get(off) == v >> 32:
                self.ctrl.mem_write(a, struct.pack("<I", v & 0xFFFFFFFF))      # one single TLP
            else:
                self.ctrl.mem_write(a, struct.pack("<Q", v))
                self.high[off] = v >> 32
        self.rings += 1

    def write32(self, off: int, v: int) -> None:
        a = self._check(off, 4)
        with self.ctrl.doing(f"submitting work (doorbell dword {off // 4} to {v:#x})"):
            if self.before is not None:
                self.before()
            self.ctrl.mem_write(a, struct.pack("<I", v & 0xFFFFFFFF))
        self.rings += 1

    def read32(self, off: int) -> int:
        return struct.unpack("<I", self.ctrl.mem_read(self._check(off, 4), 4))[0]

    def read64(self, off: int) -> int:
        return struct.unpack("<Q", self.ctrl.mem_read(self._check(off, 8), 8))[0]


# --- CPU views of VRAM: host shadows kept in step with VRAM -------------------------------------------------
class Shadows:
    """The runtime reads and writes its CPU-visible memory (rings, queue pointers, signals, kernel arguments,
    code) through memoryviews; over the bridge no such view of VRAM exists, so each CPU-visible allocation gets a
    host copy (its shadow), made when the CPU first touches it, and kept in step with VRAM where the other side
    looks. A shadow is *tracked* once the runtime gives its coherence hints for it (base.Mapping `wrote`, `watch`,
    `refresh`: the runtime's hot memory, the fast path) and *compared* until then:
    - `flush` (before every doorbell): tracked shadows send the ranges the runtime said it wrote, nothing else,
      merged into as few TLP streams as the memory allows (host-only memory: ranges up to GAP_DW dwords apart go
      as one stream, the gap's bytes being the host's; GPU-written memory: exactly the changed dwords, so a
      GPU-written read pointer beside a host-written write pointer is never overwritten); a run of one dword is
      one single TLP. Compared shadows send the dwords that differ from their last synced copy (a numpy compare
      of the whole shadow: the slow path, for memory written rarely, e.g. code and bound launches).
    - `pull` (every wait): the watched words of tracked shadows are read back (the runtime's signal words: one
      stream for the device's signal page); compared shadows the GPU writes (`pull` set) are read back whole.
    - `refresh`: a range read back now, for a read the runtime is about to make (a read pointer, a timestamp).
    `window` is BAR0 (VRAMWindow); entries are keyed by GPU address."""

    GAP_DW = 64                  # host-only memory: changed runs this close are sent as one stream
    WATCH_GAP = 64               # watched ranges this many bytes apart are read as one stream

    # an entry: [vram offset, shadow, clean copy (u32), pull, tracked, dirty ranges, watched ranges]
    OFF, DATA, CLEAN, PULL, TRACKED, DIRTY, WATCHED = range(7)

    def __init__(self, window: VRAMWindow):
        self.window = window
        self.lock = threading.RLock()
        self.entries: dict[int, list] = {}          # va -> entry once touched
        self.pulls: dict[int, bool] = {}

    def add(self, va: int, off: int, size: int) -> "ShadowMapping":
        """A new CPU view of VRAM [off, off + size), for the interface protocol. Its shadow is made (VRAM's current
        contents read) when the CPU first touches it: memory the runtime never touches from the CPU (scratch) is
        neither copied nor compared."""
        return ShadowMapping(self, va, off, size)

    def _entry(self, va: int, off: int, size: int) -> list:
        import numpy as np
        e = self.entries.get(va)
        if e is None:
            ctrl = getattr(self.window, "ctrl", None)
            with ctrl.doing(f"reading VRAM {off:#x}+{size:#x} for the CPU view at {va:#x}") if ctrl is not None \
                    else contextlib.nullcontext():
                data = bytearray(self.window.read(off, size))
            e = self.entries[va] = [off, data, np.frombuffer(bytes(data), np.uint32).copy(),
                                    self.pulls.get(va, False), False, [], []]
        return e

    def materialize(self, va: int, off: int, size: int) -> memoryview:
        """The shadow of the view at `va`, made now if it was not."""
        with self.lock:
            return memoryview(self._entry(va, off, size)[self.DATA])

    def set_pull(self, va: int, pull: bool) -> None:
        """Whether the GPU writes the view at `va` (then `pull` reads it back while it is compared)."""
        with self.lock:
            self.pulls[va] = pull
            if va in self.entries:
                self.entries[va][self.PULL] = pull

    def drop(self, va: int) -> None:
        with self.lock:
            self.entries.pop(va, None)
            self.pulls.pop(va, None)

    # -- the coherence hints (ShadowMapping's) ---------------------------------------------------------------
    def _track(self, e: list) -> None:
        """Tracked from now on: what the host changed before the first hint is to send with the next flush."""
        import numpy as np
        if e[self.TRACKED]:
            return
        e[self.TRACKED] = True
        idx = np.flatnonzero(np.frombuffer(e[self.DATA], np.uint32) != e[self.CLEAN])
        if len(idx):
            breaks = np.flatnonzero(np.diff(idx) > 1)
            starts = np.concatenate(([idx[0]], idx[breaks + 1]))
            ends = np.concatenate((idx[breaks], [idx[-1]])) + 1
            e[self.DIRTY] += [(4 * int(a), 4 * int(b)) for a, b in zip(starts, ends)]

    def untrack(self, va: int) -> None:
        """A shadow whose memory changes hands: what its last user wrote and said is sent, then it is compared
        again (its new user's writes are found without hints until it gives its own) and nothing is watched."""
        with self.lock:
            e = self.entries.get(va)
            if e is None:
                return
            if e[self.TRACKED]:
                self._send(e)
            e[self.TRACKED], e[self.DIRTY], e[self.WATCHED] = False, [], []

    def wrote(self, va: int, off: int, size: int, rel: int, n: int) -> None:
        if n <= 0:
            return
        with self.lock:
            e = self._entry(va, off, size)
            if not e[self.TRACKED]:
                self._track(e)                                      # (its changes, this write's among them)
                return
            d = e[self.DIRTY]
            lo, hi = rel & ~3, (rel + n + 3) & ~3
            if d and d[-1][1] == lo:                                # the common case: appending to a ring
                d[-1] = (d[-1][0], hi)
            else:
                d.append((lo, hi))

    def watch(self, va: int, off: int, size: int, rel: int, n: int) -> None:
        with self.lock:
            e = self._entry(va, off, size)
            self._track(e)
            e[self.WATCHED] = sorted(set(e[self.WATCHED]) | {(rel & ~3, (rel + n + 3) & ~3)})

    def refresh(self, va: int, off: int, size: int, rel: int, n: int) -> None:
        with self.lock:
            e = self._entry(va, off, size)
            self._track(e)
            self._read(e, rel & ~3, (rel + n + 3) & ~3)             # (the host's unsent dwords are kept)

    # -- host to VRAM ------------------------------------------------------------------------------------------
    def _push(self, e: list, gap: int) -> None:
        """A compared shadow's changed dwords to VRAM (runs `gap` dwords apart as one stream)."""
        import numpy as np
        off, data, clean = e[0], e[1], e[2]
        cur = np.frombuffer(data, np.uint32)
        idx = np.flatnonzero(cur != clean)
        if not len(idx):
            return
        breaks = np.flatnonzero(np.diff(idx) > gap + 1)
        starts = np.concatenate(([idx[0]], idx[breaks + 1]))
        ends = np.concatenate((idx[breaks], [idx[-1]])) + 1
        for s, t in zip(starts.tolist(), ends.tolist()):
            self.window.write(off + 4 * s, bytes(data[4 * s:4 * t]))
            clean[s:t] = cur[s:t]

    def _send(self, e: list) -> None:
        """A tracked shadow's dirty ranges to VRAM (see the class doc)."""
        import numpy as np
        dirty = e[self.DIRTY]
        if not dirty:
            return
        off, data, clean, gpu = e[0], e[1], e[2], e[self.PULL]
        e[self.DIRTY] = []
        runs: list[list[int]] = []
        gap = 0 if gpu else 4 * self.GAP_DW
        for lo, hi in sorted(dirty):
            if runs and lo <= runs[-1][1] + gap:
                runs[-1][1] = max(runs[-1][1], hi)
            else:
                runs.append([lo, hi])
        cur = np.frombuffer(data, np.uint32)
        try:
            for i, (lo, hi) in enumerate(runs):
                s, t = lo // 4, hi // 4
                if gpu:                                           # exactly the dwords that changed
                    idx = np.flatnonzero(cur[s:t] != clean[s:t]) + s
                    pieces, k = [], 0
                    while k < len(idx):
                        j = k
                        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
                            j += 1
                        pieces.append((int(idx[k]), int(idx[j]) + 1))
                        k = j + 1
                else:
                    pieces = [(s, t)]
                for a, b in pieces:
                    self.window.write(off + 4 * a, bytes(data[4 * a:4 * b]))
                    clean[a:b] = cur[a:b]
        except BaseException:
            e[self.DIRTY] = [tuple(r) for r in runs[i:]] + e[self.DIRTY]   # not sent: still to send
            raise

    def flush(self) -> None:
        """Host changes of every shadow to VRAM: host-only memory first, then GPU-written memory (a queue's write
        pointer after the ring it points into)."""
        with self.lock:
            for gpu in (False, True):
                for e in self.entries.values():
                    if e[self.PULL] != gpu:
                        continue
                    if e[self.TRACKED]:
                        self._send(e)
                    else:
                        self._push(e, 0 if gpu else self.GAP_DW)

    # -- VRAM to host ------------------------------------------------------------------------------------------
    def _read(self, e: list, lo: int, hi: int) -> bool:
        """[lo, hi) of the shadow read back from VRAM (dwords the host changed and has not sent are kept); whether
        anything changed."""
        import numpy as np
        off, data, clean = e[0], e[1], e[2]
        s, t = lo // 4, hi // 4
        fresh = np.frombuffer(self.window.read(off + lo, hi - lo), np.uint32).copy()
        cur = np.frombuffer(data, np.uint32)
        changed = bool((fresh != clean[s:t]).any())
        late = cur[s:t] != clean[s:t]
        clean[s:t] = fresh
        fresh[late] = cur[s:t][late]
        cur[s:t] = fresh
        return changed

    def pull(self) -> bool:
        """The watched words read back (after the host's changes went out), and the compared GPU-written shadows
        whole; whether a watched word changed. In the order the CPU first touched them: the device's signal page
        before the timestamps a completed signal vouches for."""
        with self.lock:
            changed = False
            for e in self.entries.values():
                if e[self.TRACKED]:
                    w = e[self.WATCHED]
                    if not w:
                        continue
                    self._send(e)
                    lo, hi = w[0]
                    for a, b in w[1:]:
                        if a <= hi + self.WATCH_GAP:
                            hi = max(hi, b)
                        else:
                            changed |= self._read(e, lo, hi)
                            lo, hi = a, b
                    changed |= self._read(e, lo, hi)
                elif e[self.PULL]:
                    self._push(e, 0)
                    self._read(e, 0, len(e[self.DATA]))
            return changed

    def write_through(self, va: int, rel: int, raw: bytes) -> bool:
        """Bytes written to VRAM at `rel` of the allocation at `va`: its shadow takes them too (False: none)."""
        import numpy as np
        with self.lock:
            e = self.entries.get(va)
            if e is None:
                return False
            off, data, clean = e[0], e[1], e[2]
            data[rel:rel + len(raw)] = raw
            lo, hi = rel // 4, (rel + len(raw) + 3) // 4
            clean[lo:hi] = np.frombuffer(bytes(data[4 * lo:4 * hi]), np.uint32)
            return True


class ShadowMapping(Mapping):
    """A CPU view of VRAM over the bridge (the base.Mapping protocol): `mv` is its shadow, made on first use; the
    coherence hints go to the Shadows."""

    def __init__(self, shadows: Shadows, va: int, off: int, size: int):
        self.addr, self.size = va, size
        self._shadows, self._off, self._mv = shadows, off, None

    @property
    def mv(self) -> memoryview:
        if self._mv is None:
            self._mv = self._shadows.materialize(self.addr, self._off, self.size)
        return self._mv

    def wrote(self, off: int, n: int) -> None:
        self._shadows.wrote(self.addr, self._off, self.size, off, n)

    def watch(self, off: int, n: int) -> None:
        self._shadows.watch(self.addr, self._off, self.size, off, n)

    def refresh(self, off: int, n: int) -> None:
        self._shadows.refresh(self.addr, self._off, self.size, off, n)

    def reuse(self) -> None:
        self._shadows.untrack(self.addr)

    def sub(self, off: int, n: int, through: bool = False) -> "ShadowView":
        """A view of [off, off + n) of this one (a queue's read or write pointer inside its pointer page)."""
        return ShadowView(self, off, n, through)


class ShadowView(Mapping):
    """Part of a ShadowMapping (its hints go to the whole one, offset); `through`: a word the GPU writes, read
    from VRAM on every read32/read64 (a queue's read pointer: read where the runtime needs it now)."""

    def __init__(self, parent: ShadowMapping, off: int, n: int, through: bool = False):
        self.addr, self.size, self._parent, self._at, self.through = parent.addr + off, n, parent, off, through

    def read32(self, off: int) -> int:
        if self.through:
            self.refresh(off, 4)
        return super().read32(off)

    def read64(self, off: int) -> int:
        if self.through:
            self.refresh(off, 8)
        return super().read64(off)

    @property
    def mv(self) -> memoryview:
        return self._parent.mv[self._at:self._at + self.size]

    def wrote(self, off: int, n: int) -> None:
        self._parent.wrote(self._at + off, n)

    def watch(self, off: int, n: int) -> None:
        self._parent.watch(self._at + off, n)

    def refresh(self, off: int, n: int) -> None:
        self._parent.refresh(self._at + off, n)


# --- the function: what the PCI interface and the AM driver see ----------------------------------------------
class USBFunction:
    """The GPU behind the bridge as a PCI function (the protocol of iface/pci.py `Function`): config space through
    config TLPs to bus 4, BAR5 registers, BAR0 VRAM (a window object), BAR2 doorbells, CPU views of VRAM as
    shadows. No host memory is reachable by the GPU (`dma_alloc` says so: the AM memory uses VRAM instead), and
    the bus addresses behind the bridge are not the host's (`bar_bus_address` is 0: no peer-to-peer)."""

    vfio = False
    irq = None

    def __init__(self, ctrl: Controller, topology: Topology, name: str, on_close: Callable[[], None] | None = None):
        self.ctrl, self.topology, self.name = ctrl, topology, f"USB {name}"
        self.bars = bars = topology.bars
        self.bar_sizes = {n: b.size for n, b in bars.items()}
        self.regs = Registers(ctrl, bars[5].bus_address, bars[5].size)
        self.vram = VRAMWindow(ctrl, bars[0].bus_address, bars[0].size)
        self.shadows = Shadows(self.vram)
        self.doorbells = Doorbells(ctrl, bars[2].bus_address, bars[2].size, before=self.shadows.flush)
        self._on_close = on_close
        self.closed = False

    def power_cycle(self) -> None:
        """The PCIe side powered off and on (F3: the GPU starts cold) and brought up again; the BARs land where they
        were (the same sizes, placed the same way), the CPU views are made again from VRAM on first use."""
        with self.ctrl.doing("power-cycling the PCIe side (F3)"):
            self.ctrl.pcie_power(False)
            topology = bring_up(self.ctrl)
        if {n: (b.bus_address, b.size) for n, b in topology.bars.items()} != \
                {n: (b.bus_address, b.size) for n, b in self.bars.items()}:
            raise DeviceError(f"{self.name}: after a PCIe power cycle the GPU's BARs differ ({topology.bars} vs "
                              f"{self.bars})")
        self.topology = topology
        with self.shadows.lock:
            self.shadows.entries.clear()

    def config_read(self, off: int, size: int = 4) -> int:
        return self.ctrl.config_read(GPU_BUS, 0, 0, off, size)

    def config_write(self, off: int, size: int, value: int) -> None:
        self.ctrl.config_write(GPU_BUS, 0, 0, off, size, value)

    def enable(self) -> None:
        """Memory decoding and bus mastering on (bring-up set them; a reset may have cleared them)."""
        cmd = self.config_read(4, 2)
        if cmd & (CMD_MEMORY | CMD_MASTER) != CMD_MEMORY | CMD_MASTER:
            self.config_write(4, 2, cmd | CMD_MEMORY | CMD_MASTER)

    def bar(self, n: int) -> Any:
        """BAR5: the register backend; BAR0: the VRAM window; BAR2: the doorbells."""
        try:
            return {5: self.regs, 0: self.vram, 2: self.doorbells}[n]
        except KeyError:
            raise DeviceError(f"{self.name}: BAR{n} is not one the driver uses (0, 2, 5)") from None

    def vram_mapping(self, va: int, off: int, size: int) -> Any:
        """The CPU view of VRAM [off, off + size) mapped at `va`: a shadow (see Shadows)."""
        return self.shadows.add(va, off, size)

    def dma_alloc(self, size: int) -> Any:
        e = DeviceError(f"{self.name}: the GPU reaches no host memory through the bridge (only its SRAM); "
                        f"CPU-visible VRAM is used instead")
        e.unsupported = True
        raise e

    def dma_free(self, buf: Any) -> None:
        raise DeviceError(f"{self.name}: no DMA buffers behind the bridge")

    def bar_bus_address(self, n: int) -> int:
        """0: the BARs sit on the bridge's own bus, which no other device reaches (no peer-to-peer)."""
        return 0

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.ctrl.lost is None:
                self.ctrl.flush()
        finally:
            if self._on_close is not None:
                self._on_close()


ASMEDIA = 0x1B21                # PCI vendor id of ASMedia, the bridge chip's own ports (PCI-SIG vendor list)


# --- opening the bridge ---------------------------------------------------------------------------------------
def _guard(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """A libusb call outside a controller (opening): its error as an amdq error."""
    try:
        return fn(*args)
    except _usb_errors() as e:
        code = _libusb_code(e)
        if code == LIBUSB_ERROR_NO_DEVICE:
            err: DeviceError = DeviceLost(f"USB bridge is gone (unplugged?) during {what}: {e} (libusb {code}); "
                                          f"open it again once it is back")
            err.in_flight = what
        else:
            err = DeviceError(f"USB bridge: {what} failed: {e} (libusb {code})")
        err.libusb_code = code
        raise err from None


def open_handle(context: Any, ids: tuple[tuple[int, int], ...] = USB_IDS) -> tuple[Any, str]:
    """The first bridge with the custom firmware on `context` (a usb1.USBContext or the simulated bridge's), opened
    as the facts' open sequence says (usb.open_sequence): product string checked, a kernel driver detached (and
    the device reset), configuration 1, interface 0 claimed, alternate setting 0. (handle, "usb:BUS-ADDRESS")."""
    h = None
    for vid, pid in ids:
        h = _guard(f"opening {vid:04x}:{pid:04x}", context.openByVendorIDAndProductID, vid, pid)
        if h is not None:
            break
    if h is None:
        raise DeviceError("no ASM24xx USB bridge with the vendor-request firmware found ("
                          + ", ".join(f"{v:04x}:{p:04x}" for v, p in ids) + "); check the cable and its power, and "
                          "that this user may open the device (udev rule)")
    try:
        get_product = getattr(h, "getProduct", None)
        product = (_guard("reading the product string", get_product) if get_product else None) or ""
        if get_product is not None and not product.startswith(PRODUCT_PREFIXES):
            raise DeviceError(f"the USB device's product string {product!r} starts with none of "
                              f"{', '.join(PRODUCT_PREFIXES)}: not the bridge firmware this driver speaks to")
        active = getattr(h, "kernelDriverActive", None)
        if active is not None and _guard("asking for a kernel driver", active, INTERFACE):
            _guard("detaching the kernel driver", h.detachKernelDriver, INTERFACE)
            _guard("resetting the device", h.resetDevice)
        if hasattr(h, "setConfiguration"):
            _guard("setting configuration 1", h.setConfiguration, CONFIGURATION)
        _guard("claiming interface 0", h.claimInterface, INTERFACE)
        if hasattr(h, "setInterfaceAltSetting"):
            _guard("selecting alternate setting 0", h.setInterfaceAltSetting, INTERFACE, ALT_SETTING)
        d = h.getDevice()
        name = f"usb:{d.getBusNumber()}-{d.getDeviceAddress()}"
    except BaseException:
        try:
            h.close()
        except Exception:               # closing a handle that failed to open: its own error says nothing more
            pass
        raise
    return h, name


def open_function(context: Any) -> USBFunction:
    """The bridge opened and the PCIe side brought up: the GPU as a function for the AM driver."""
    h, name = open_handle(context)
    ctrl = Controller(h, f"USB bridge {name}", context)
    ident = describe(h)
    ctrl.identity = ident
    if ident.get("usb_speed_code") == SPEED_HIGH:
        ctrl.xdata_read_max = XDATA_READ_MAX_HIGH_SPEED  # the firmware manages one EP0 packet per E4 there

    def release() -> None:
        try:
            if ctrl.lost is None and hasattr(h, "releaseInterface"):
                _guard("releasing interface 0", h.releaseInterface, INTERFACE)
        finally:
            try:
                h.close()
            except _usb_errors():       # closing a vanished device: nothing left to release
                pass
    try:
        with ctrl.doing("bringing up the PCIe side (link, switch ports, BARs)"):
            topology = bring_up(ctrl)
    except BaseException:
        release()
        raise
    return USBFunction(ctrl, topology, name, release)


# libusb_speed values (libusb 1.0 API documentation) and what they are called
SPEED_NAMES = {1: "low speed (1.5 Mbit/s)", 2: "full speed (12 Mbit/s)", 3: "high speed (USB 2.0, 480 Mbit/s)",
               4: "SuperSpeed (USB 3.2 Gen 1, 5 Gbit/s)", 5: "SuperSpeed+ (USB 3.2 Gen 2, 10 Gbit/s)"}


def describe(h: Any) -> dict:
    """What the USB side says of the bridge, from its descriptors (no vendor request): product and manufacturer
    strings, the firmware version (bcdDevice), the USB version and the link speed libusb negotiated. Fields a
    handle cannot tell are left out."""
    d = h.getDevice()
    out: dict = {}
    for key, obj, name in (("product", h, "getProduct"), ("manufacturer", h, "getManufacturer"),
                           ("bcd_device", d, "getbcdDevice"), ("bcd_usb", d, "getbcdUSB"),
                           ("usb_speed_code", d, "getDeviceSpeed"), ("vid", d, "getVendorID"),
                           ("pid", d, "getProductID")):
        f = getattr(obj, name, None)
        if f is not None:
            try:
                out[key] = _guard(f"reading the {key.replace('_', ' ')}", f)
            except DeviceError:
                pass                            # a field the device does not give: left out
    if "bcd_device" in out:
        out["firmware"] = f"{out['bcd_device'] >> 8:x}.{out['bcd_device'] & 0xFF:02x}"
    if "bcd_usb" in out:
        out["usb_version"] = f"{out['bcd_usb'] >> 8:x}.{(out['bcd_usb'] >> 4) & 0xF:x}"
    if "usb_speed_code" in out:
        out["usb_speed"] = SPEED_NAMES.get(out["usb_speed_code"], f"libusb speed {out['usb_speed_code']}")
    return out


# --- the interface ----------------------------------------------------------------------------------------------
# Which CPU views the GPU writes (read back on every wait, once the CPU has touched them): uncached allocations up
# to PULL_MAX (signals, queue pointers, timestamps) and CPU-visible device buffers (without a copy queue the
# runtime copies between them through their CPU views; scratch is never touched, so never read).
PULL_MAX = 64 << 10
POLL_MIN_S, POLL_MAX_S = 50e-6, 1e-3   # a wait's polling interval, doubling from the first to the last


class USB(PCI):
    """The AM driver over the bridge: the PCI interface on a USBFunction, with the USB runtime parameters (ring sizes
    of base.USB_RING_BYTES), shadows of CPU-visible VRAM kept in step (see Shadows), host copies through the bridge
    SRAM on the runtime's copy queue (usb_copy.py) or, without one, through BAR0, and an unplugged bridge as the
    AM driver's lost GPU. `standin`: the firmware policy, as for PCI."""
    name = "USB"

    def __init__(self, fn: USBFunction, arch: str | None = None, standin: bool | None = False):
        from .base import USB_RING_BYTES
        self.RING_BYTES = dict(USB_RING_BYTES)
        # a PM4 launch carries its kernel arguments in its ring dwords (a NOP's body): one stream, one round trip
        self.kernargs_in_ring = True
        self.copier = None
        self.driver = None
        fn.ctrl.on_lost = self._lost
        with fn.ctrl.doing("booting the GPU (the AM driver)"):
            try:
                super().__init__(fn, arch, standin)
            except (AMBootError, AMTimeout, FirmwareRefused, PSPError, SMUError) as e:
                d = self.driver.decision if self.driver is not None else None
                if fn.ctrl.lost is not None or d is None or d[2] or "did not end cleanly" not in d[1]:
                    raise
                # a session that ended unplugged, mid-boot (the PSP's sOS not yet running): the AM driver has no
                # reset to reach the PSP's bootloader, the bridge has one: PCIe power off and on, a cold boot
                self.driver.am.log(1, f"boot: {e}; the PCIe side is power-cycled through the bridge (F3)")
                fn.power_cycle()
                self.driver = None
                super().__init__(fn, arch, standin)
                self.report.reason += f" (after a PCIe power cycle: a boot over the unclean session failed: {e})"

    def _lost(self, e: DeviceLost) -> None:
        """The bridge vanished: the AM driver's GPU is lost (it refuses work, skips fini, leaves the session
        unclean: the next open boots fully)."""
        if self.driver is not None and self.driver.lost is None:
            self.driver.lost = e

    # memory: every buffer in VRAM; CPU views are shadows
    def alloc(self, size: int, kind: str = "vram", uncached: bool = False, cpu: bool = True,
              executable: bool = False) -> Any:
        self._check_link()
        with self.fn.ctrl.doing(f"allocating {size} bytes of {kind} (page tables, TLB flush)"):
            a = super().alloc(size, kind, uncached, cpu, executable)
        if a.cpu is not None:                           # GPU-written: signals, queue pointers, timestamps; buffers
            self.fn.shadows.set_pull(a.va, uncached and a.size <= PULL_MAX or kind == "vram" and not executable)
        return a

    def free(self, a: Any) -> None:
        self.fn.shadows.drop(a.va)
        if self.fn.ctrl.lost is not None:               # nothing reaches the page tables: only the address goes
            from ..am import va as VA
            if self.memory.live.pop(a.va, None) is not None:
                VA.shared().free(a.va)
            return
        super().free(a)

    def refresh(self, a: Any, off: int, n: int) -> None:
        """The CPU view of `a` at [off, off + n) read back from VRAM (the runtime asks before reading GPU-written
        memory the waits do not read back: timestamps)."""
        self._check_link()
        if isinstance(a.cpu, Mapping):
            a.cpu.refresh(off, n)

    def check_alive(self) -> None:
        """DeviceLost if the bridge is gone or the GPU lost."""
        self._check_link()
        super().check_alive()

    def _check_link(self) -> None:
        if self.fn.ctrl.lost is not None:
            raise self.fn.ctrl.lost

    # queues: a signal asks for no interrupt (none crosses the bridge; waits poll the signal words instead), so the
    # IH ring carries only what stops a queue and a wait need not drain end-of-pipe entries
    signal_event = None

    def create_queue(self, kind: str, ring_bytes: int, ptrs: Any = None, wptr_off: int = 0,
                     rptr_off: int = 8) -> Any:
        """The PCI interface's queue (named in a DeviceLost while it is made), its read and write pointers as parts
        of the pointer page's shadow (so the runtime's hints reach it) and its doorbell written whole the first
        time."""
        self._check_link()
        with self.fn.ctrl.doing(f"creating a {kind} queue"):
            q = super().create_queue(kind, ring_bytes, ptrs, wptr_off, rptr_off)
        page = ptrs if ptrs is not None else q.extra["ptrs"]
        if isinstance(page.cpu, ShadowMapping):
            q.rptr.cpu, q.wptr.cpu = page.cpu.sub(rptr_off, 8, through=True), page.cpu.sub(wptr_off, 8)
        self.fn.doorbells.forget(q.doorbell_off)
        return q

    def wait_events(self, timeout_ms: int) -> list | None:
        """Until a watched word (a signal) changes, a queue stops (the IH ring in VRAM, polled: no interrupts cross
        the bridge) or `timeout_ms` passes: each round reads the signal words (one stream) and the IH write
        pointer (one stream); the exceptions that stopped queues (None if none did)."""
        self._check_link()
        with self.fn.ctrl.doing("waiting for the GPU (the signal words and its interrupt ring)"):
            sh = self.fn.shadows
            ih = self.driver.blocks["ih"]
            end = time.monotonic() + max(0, timeout_ms) / 1000
            delay = POLL_MIN_S
            while True:
                if sh.pull():
                    return None
                if ih.pending():
                    found = super().wait_events(0)
                    sh.pull()
                    return found
                left = end - time.monotonic()
                if left <= 0:
                    return None
                time.sleep(min(delay, left))
                delay = min(2 * delay, POLL_MAX_S)

    def _vram_range(self, a: Any, off: int, n: int, what: str) -> int:
        vo = a.meta.get("vram_offset")
        if vo is None or not 0 <= off <= off + n <= a.size:
            raise DeviceError(f"{what} of {n} bytes at offset {off} of the allocation at {a.va:#x}: not inside a "
                              f"VRAM allocation of this device")
        if vo + off + n > self.fn.vram.size:
            raise DeviceError(f"{what}: VRAM {vo + off:#x}+{n:#x} lies past the {self.fn.vram.size:#x}-byte BAR0, "
                              f"which is all the host reaches over the bridge")
        return vo + off

    def _copier(self) -> Any:
        if self.copier is None:
            from ..am import va as VA
            from .usb_copy import BridgeCopier
            self.copier = BridgeCopier(self.fn.ctrl, self.driver.blocks["gmc"].vm, VA.shared())   # (made again if
            # it failed: its windows unmapped)
        return self.copier

    def copy_in(self, a: Any, off: int, raw: Any, queue: Any = None) -> None:
        """Host bytes into the allocation at offset `off`, the GPU idle (the caller drained it): through the bridge
        SRAM on the SDMA queue `queue` (the runtime's copy queue; see usb_copy), else through BAR0. A shadow of
        the allocation takes them too."""
        self._check_link()
        data = bytes(memoryview(raw).cast("B"))
        if not data:
            return
        with self.fn.ctrl.doing(f"copying {len(data)} bytes in to {a.va + off:#x}"):
            if queue is not None and a.meta.get("vram_offset") is not None and 0 <= off <= off + len(data) <= a.size:
                self._copier().copy_in(queue, a.va + off, data)
            else:
                self.fn.vram.write(self._vram_range(a, off, len(data), "copy in"), data)
        self.fn.shadows.write_through(a.va, off, data)

    def copy_out(self, a: Any, off: int, n: int, queue: Any = None) -> bytes:
        """n bytes of the allocation from offset `off`, the GPU idle: through the bridge SRAM on `queue`, else
        through BAR0."""
        self._check_link()
        if n <= 0:
            return b""
        with self.fn.ctrl.doing(f"copying {n} bytes out from {a.va + off:#x}"):
            self.fn.shadows.flush()
            if queue is not None and a.meta.get("vram_offset") is not None and 0 <= off <= off + n <= a.size:
                out = self._copier().copy_out(queue, a.va + off, n)
            else:
                out = self.fn.vram.read(self._vram_range(a, off, n, "copy out"), n)
        if len(out) != n:                               # never a short copy reported as a whole one
            raise DeviceError(f"{self.fn.ctrl.name}: copy out of {n} bytes from {a.va + off:#x} gave {len(out)}")
        return out

    def close(self) -> None:
        """The PCI interface's close (queues, memory, fini), the SRAM mappings first; a bridge that is gone is only
        released (nothing can reach the GPU: its session stays unclean, so the next open boots it fully)."""
        if self.closed:
            return
        if self.fn.ctrl.lost is not None:
            self.closed = True
            self.fn.close()
            return
        if self.copier is not None:
            try:
                self.copier.close()
            except DeviceError:
                pass
            self.copier = None
        try:
            super().close()
        except DeviceLost as e:                         # the cable went during the close: released, nothing more
            log.debug("closing %s: %s", self.fn.name, e)
            self.closed = True

    def info(self) -> dict:
        d = super().info()
        st = self.copier.stats if self.copier is not None else None
        d["bridge"] = self.bridge_info()
        d["bridge"]["copies"] = dict(vars(st)) if st is not None else None
        return d

    # -- interface events (amdq/runtime/profile.py asks for them): every transfer, timed by the controller --------
    def record_events(self, on: bool) -> bool:
        """Switch the controller's transfer log on or off; whether it was on."""
        was = self.fn.ctrl.events is not None
        if on != was:
            self.fn.ctrl.record(on)
        return was

    def interface_events(self, since: int = 0) -> list[tuple[float, float, str, str, dict]]:
        """The transfers logged from index `since`: (start s, end s, "USB control" / "USB bulk", what, args: kind,
        bytes, the bridge) in host perf_counter seconds."""
        ev = self.fn.ctrl.events or []
        name = self.fn.name.split()[-1]
        return [(t0 / 1e9, t1 / 1e9, f"USB {kind.split()[0]}", f"{kind}: {what}",
                 {"kind": kind, "bytes": n, "bridge": name})
                for t0, t1, kind, what, n in ev[since:]]

    def bridge_info(self) -> dict:
        """The bridge as the host finds it: chip (its own PCIe port's id), product, firmware version (bcdDevice), USB
        version and speed (descriptors), the PCIe link's training state (XDATA, read now), the GPU behind it, the
        ports and BARs bring-up placed, the transfers made so far."""
        c, topo = self.fn.ctrl, self.fn.topology
        ident = c.identity
        first = topo.ports[0] if topo.ports else None
        chip = None
        if first is not None:
            chip = f"ASMedia ASM{first.device:04X}" if first.vendor == ASMEDIA else \
                f"{first.vendor:04x}:{first.device:04x}"
        state = None
        if c.lost is None:
            try:
                state = c.link_state()
            except DeviceError:                 # the link is what is asked about: its failure is the answer
                state = None
        link = "unknown (the bridge does not answer)" if state is None else \
            ("L0, up" if state == LTSSM_L0 else f"not up (LTSSM state {state:#04x}; {LTSSM_L0:#04x} is L0)")
        return {"name": self.fn.name, "chip": chip, "product": ident.get("product"),
                "firmware": ident.get("firmware"), "usb_version": ident.get("usb_version"),
                "usb_speed": ident.get("usb_speed"), "pcie_link": link, "ltssm": state,
                "gpu": f"{topo.gpu[0]:04x}:{topo.gpu[1]:04x} {self.arch}", "lost": str(c.lost) if c.lost else None,
                "transfers": c.transfers, "stalls_cleared": c.stalls_cleared,
                "bars": {f"BAR{n}": f"{b.bus_address:#x}+{b.size:#x}" for n, b in sorted(self.fn.bars.items())},
                "ports": [f"bus {p.bus}: {p.vendor:04x}:{p.device:04x}" for p in topo.ports]}


def open_usb(context: Any, arch: str | None = None, standin: bool | None = False) -> USB:
    """The first bridge on `context` (usb1.USBContext, or the simulated bridge's), its GPU booted."""
    fn = open_function(context)
    try:
        return USB(fn, arch, standin=standin)
    except BaseException:
        fn.close()
        raise


def open_real(arch: str | None = None) -> USB:
    """The first bridge on the machine's USB, its GPU booted."""
    try:
        import usb1
    except ImportError:
        raise DeviceError("the USB interface needs the libusb1 package (pip install libusb1) and libusb-1.0") from None
    try:
        ctx = _guard("initialising libusb", lambda: usb1.USBContext().open())
    except OSError as e:                        # the package is there, the C library is not
        raise DeviceError(f"the USB interface needs the libusb-1.0 library (Debian: apt install libusb-1.0-0): "
                          f"{e}") from None
    return open_usb(ctx, arch, standin=False)


def present() -> bool:
    """Whether a bridge with the vendor-request firmware is on USB (for the default interface order)."""
    try:
        import usb1
        with usb1.USBContext() as ctx:
            return any(ctx.getByVendorIDAndProductID(v, p) is not None for v, p in USB_IDS)
    except Exception:                   # no libusb, no permission to enumerate: no bridge to use
        return False
