"""Host copies over the USB bridge through its SRAM (facts: shared/facts/usb_asm24.json amd_over_usb.copy_in /
copy_out, memory_windows; amdq.hw.usb_asm24).

The bridge's SRAM (512 KiB at bus address 0x200000), sys_buf (0x820000) and cq_buf (0x822000) are mapped into the
GPU's VM context 0 as uncached, unsnooped system pages. The handshake is a protocol of its own, apart from the
runtime's timeline signals:

- copy-in: two 256 KiB SRAM windows take turns. Chunk `seq` (counted over the bridge's lifetime) carries up to
  256 KiB - 4 bytes; its wire image (padded to 512-byte sectors) ends with the sentinel 0x51000000 | (seq &
  0xFFFFFF). One SDMA program is queued first (one doorbell) for a group of chunks: per chunk POLL_REGMEM (equal)
  on the sentinel, COPY_LINEAR to the destination, a 64-bit WRITE of seq + 1 to the drain fence (sys_buf + 0x800,
  XDATA 0xA800). Then the host streams the chunks: before reusing a window it reads the fence until the window's
  previous chunk (seq - 2) is drained, so the next chunk crosses USB while the GPU copies the previous one (with
  asynchronous transfers, as on libusb: the F2 arm and the fence read go out together and a chunk's bulk OUT stays
  on the wire while the host prepares the next; at most one transfer per window). At the
  end the host waits for the fence to reach the last chunk (the drain fence). The GPU never reads a half-written
  chunk (the sentinel is the wire image's last dword); the host never overwrites a window the GPU still reads.
- copy-out: per chunk of up to 512 KiB, an F2 read arm, then SDMA: COPY_LINEAR VRAM -> SRAM and a 32-bit write of 0
  to cq_buf + 12 (bus 0x82200C), which releases the bridge's bulk IN of the SRAM.

Measured apart (`stats`): chunks, bytes, the host's time streaming and the time waiting on the drain fence.

The drain fence is read only when no earlier read already showed the window drained (`seen`), with the F2 arm when
it is; a wait for it reads again after a pause doubling from FENCE_POLL_S to FENCE_POLL_MAX_S. What a chunk costs
on the link: its F2 arm (a control round trip on endpoint 0) and its bulk OUT on 0x02, plus a fence read where the
GPU is behind. The endpoints run side by side (the simulated link models each pipe and the wire, as USB schedules
them), so the arm of the next chunk is taken while this one streams and the wire's bandwidth is the bound;
bench/usb.py measures what the pipeline reaches (0.90 of the modelled 900 MB/s at 16 MiB).

This module's choices (not facts): GROUP_CHUNKS, the chunks one SDMA program covers (the program must fit the ring
before any data is sent: the polls block the engine until the data arrives); FENCE_POLL_S, FENCE_POLL_MAX_S.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError
from ..hw import usb_asm24 as U

FUNC_EQUAL = 3                      # POLL_REGMEM function 3: equal (amd_over_usb.copy_in.gpu_program)
POLL_INTERVAL, POLL_RETRIES = 4, 0xFFF
FENCE_OFFSET = U.COPYIN_FENCE_BUS - U.SYS_BUF_BUS          # 0x800
RELEASE_OFFSET = U.BUS_COPYOUT_RELEASE - U.CQ_BUF_BUS      # 12
GROUP_CHUNKS = 256
FENCE_POLL_S, FENCE_POLL_MAX_S = 50e-6, 1e-3


@dataclass
class CopyStats:
    """What the bridge copies did, by stage."""
    chunks_in: int = 0
    bytes_in: int = 0
    chunks_out: int = 0
    bytes_out: int = 0
    stream_s: float = 0.0           # host time sending chunk images (F2 arm + bulk OUT), fence waits apart
    drain_wait_s: float = 0.0       # host time reading the drain fence
    fence_reads: int = 0


class BridgeCopier:
    """Copies through the bridge SRAM for one USB interface (`ctrl`: its Controller; `vm`: the AM VM context 0;
    `va`: the process-wide GPU VA allocator)."""

    def __init__(self, ctrl: Any, vm: Any, va_alloc: Any):
        from ..am.vm import MapFlags
        self.ctrl, self.vm, self.va = ctrl, vm, va_alloc
        flags = MapFlags(system=True, snooped=False, mtype="UC")
        self.maps: dict[str, tuple[int, int]] = {}
        for name, (_x, _span, bus, size) in U.WINDOWS.items():
            size = max(size, 4096)
            v = va_alloc.alloc(size)
            try:
                vm.map(v, bus, size, flags)
            except BaseException:               # a transfer failed part-way: what was mapped goes again
                self.maps[name] = (v, size)
                self._abandon()
                raise
            self.maps[name] = (v, size)
        self.sram_va = self.maps["sram"][0]
        self.fence_va = self.maps["sys_buf"][0] + FENCE_OFFSET
        self.release_va = self.maps["cq_buf"][0] + RELEASE_OFFSET
        self.seq = 0
        self.seen = 0                   # the highest drain fence read (it only grows until the next reset below)
        self.stats = CopyStats()
        # one-time init: the fence at 0, both windows zeroed so stale bytes cannot match a sentinel
        try:
            ctrl.xdata_write(U.XDATA_COPYIN_FENCE, bytes(U.COPYIN_FENCE_WIDTH))
            self.seen = 0
            for slot in U.COPYIN_WINDOW_SLOTS:
                ctrl.sram_write(slot * U.F2_SLOT, bytes(U.COPYIN_WINDOW))
        except BaseException:                   # a transfer failed: the next copy starts over from nothing
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Unmap what was mapped after a failed transfer (while the link lives); the link's error is the one to report."""
        if self.ctrl.lost is None:
            try:
                self.close()
            except Exception:
                pass

    def close(self) -> None:
        """The windows unmapped from the GPU's VM (also a partly made mapping) and their addresses given back."""
        maps, self.maps = list(self.maps.values()), {}
        err = None
        runs = [(va, n) for va, _pa, n, _fl in self.vm.mappings()]
        for v, size in maps:
            try:
                for va, n in runs:              # what is mapped of the window (all of it, unless its map failed)
                    lo, hi = max(va, v), min(va + n, v + size)
                    if lo < hi:
                        self.vm.unmap(lo, hi - lo)
            except Exception as e:              # the others still go; the first error is raised
                err = err or e
            finally:
                self.va.free(v)
        if err is not None:
            raise err

    def fence(self) -> int:
        self.stats.fence_reads += 1
        v = struct.unpack("<Q", self.ctrl.xdata_read(U.XDATA_COPYIN_FENCE, U.COPYIN_FENCE_WIDTH))[0]
        self.seen = max(self.seen, v)
        return v

    def _wait_fence(self, value: int, what: str) -> None:
        """Until the drain fence reaches `value`: read again after a pause that doubles from FENCE_POLL_S to
        FENCE_POLL_MAX_S (every read is a control round trip the link could have spent on data)."""
        if self.seen >= value:
            return
        t0 = time.perf_counter()
        limit = U.TIMEOUTS_MS["copyin_drain"] / 1000
        pause = FENCE_POLL_S
        try:
            while self.fence() < value:
                if time.perf_counter() - t0 > limit:
                    raise DeviceError(f"{self.ctrl.name}: copy-in: the drain fence (XDATA {U.XDATA_COPYIN_FENCE:#06x}) "
                                      f"stayed at {self.fence()} for {limit:g} s waiting for {value} ({what}): the "
                                      f"copy engine does not consume the bridge's SRAM")
                time.sleep(pause)
                pause = min(2 * pause, FENCE_POLL_MAX_S)
        finally:
            self.stats.drain_wait_s += time.perf_counter() - t0

    def copy_in(self, q: Any, dst: int, data: bytes) -> int:
        """`data` to GPU address `dst` through the SRAM windows on the SDMA queue `q` (the runtime's SDMAQueue:
        its encoders and `run`); returns once the drain fence says every chunk reached VRAM; the last timeline
        value `q.run` gave."""
        step = U.COPYIN_CHUNK
        chunks = [(o, data[o:o + step]) for o in range(0, len(data), step)]
        value = q.timeline.value
        for g in range(0, len(chunks), GROUP_CHUNKS):
            group = chunks[g:g + GROUP_CHUNKS]
            base = self.seq
            packets: list = []
            for c, (o, piece) in enumerate(group):
                seq = base + c
                win = U.COPYIN_WINDOW_BUS[seq & 1] - U.SRAM_BUS
                wire = (len(piece) + 4 + U.F2_SECTOR - 1) // U.F2_SECTOR * U.F2_SECTOR
                packets += q.poll(self.sram_va + win + wire - 4, U.COPYIN_SENTINEL | (seq & 0xFFFFFF), 0xFFFFFFFF,
                                  FUNC_EQUAL)
                if piece:
                    packets += q.copy(dst + o, self.sram_va + win, len(piece))
                packets += q.write(self.fence_va, [(seq + 1) & 0xFFFFFFFF, (seq + 1) >> 32])
            sent = 0
            inflight: dict[int, tuple[int, Any]] = {}   # window -> (seq, its bulk OUT still on the wire)
            try:
                value = q.run(packets)                   # one doorbell for the group
                with self.ctrl.lock:                     # the group's arms and bulk transfers go out in order
                    for c, (o, piece) in enumerate(group):
                        self._send(base + c, piece, inflight)
                        sent += 1
                        self.stats.chunks_in += 1
                        self.stats.bytes_in += len(piece)
                    for w in sorted(inflight, key=lambda w: inflight[w][0]):
                        self.ctrl.wait(inflight[w][1])
                        del inflight[w]
            except BaseException:
                first = base + sent                      # the first chunk not known to have landed
                for seq, p in sorted(inflight.values(), key=lambda x: x[0]):
                    try:
                        self.ctrl.wait(p)                # what is on the wire lands (or fails) first
                    except Exception:                    # its error is the same link's: the first one is raised
                        first = min(first, seq)
                self._release(q, base, group, first - base)
                raise
            self.seq = base + len(group)
            self._wait_fence(self.seq, "the copy's last chunk")      # the drain fence
        return value

    def _send(self, seq: int, piece: bytes, inflight: dict | None = None) -> None:
        """Chunk `seq`'s wire image into its window, once the window's previous chunk (seq - 2) is drained. With
        `inflight` (and a controller that can) the bulk OUT is left on the wire (facts: amd_over_usb.copy_in.
        host_stream_per_chunk): the window's previous transfer is waited for, the F2 arm and the fence read go
        out together, and the next chunk is prepared while this one crosses USB."""
        wire = (len(piece) + 4 + U.F2_SECTOR - 1) // U.F2_SECTOR * U.F2_SECTOR
        img = bytearray(wire)
        img[:len(piece)] = piece
        struct.pack_into("<I", img, wire - 4, U.COPYIN_SENTINEL | (seq & 0xFFFFFF))
        win = seq & 1
        t0, d0 = time.perf_counter(), self.stats.drain_wait_s
        if inflight is None or not self.ctrl.can_async:
            if seq >= 2:
                self._wait_fence(seq - 1, f"window {win} free of chunk {seq - 2}")
            self.ctrl.sram_write(U.COPYIN_WINDOW_SLOTS[win] * U.F2_SLOT, bytes(img))
        else:
            if win in inflight:
                self.ctrl.wait(inflight[win][1])        # (stays listed until it landed: a failure is resent)
                del inflight[win]
            # the fence is read with the arm unless an earlier read already showed the window drained
            need = seq >= 2 and self.seen < seq - 1
            fence_read = (U.REQ_XDATA_READ, U.XDATA_COPYIN_FENCE, 0, U.COPYIN_FENCE_WIDTH) if need else None
            # the arm moves no data, so it may go before the window is known to be drained (facts: copy_in.why);
            # the bulk OUT waits for the fence
            arm_reply = self._arm_async(win, img, fence_read)
            if need:
                self.stats.fence_reads += 1
                self.seen = max(self.seen, struct.unpack("<Q", arm_reply)[0])
                self._wait_fence(seq - 1, f"window {win} free of chunk {seq - 2}")
            inflight[win] = (seq, self.ctrl.submit("bulk_out", f"copy-in chunk {seq}", U.TIMEOUTS_MS["bulk_out_async"],
                                                   bytes(img)))
        self.stats.stream_s += time.perf_counter() - t0 - (self.stats.drain_wait_s - d0)   # fence waits apart

    def _arm_async(self, win: int, img: bytearray, also: tuple | None) -> bytes | None:
        """The F2 arm of a window (and the control IN `also`, sent with it), both waited for; also's reply."""
        wire = len(img)
        slot = U.COPYIN_WINDOW_SLOTS[win]
        c = self.ctrl
        arm = c.submit("control_out", f"F2 arm of window {win}", U.TIMEOUTS_MS["control_async"], U.REQ_SRAM_DMA,
                       wire // U.F2_SECTOR, slot | (-(-wire // U.F2_SLOT)) << U.F2_SLOTS_SHIFT, b"")
        extra = c.submit("control_in", "drain fence read", U.TIMEOUTS_MS["control_async"], *also) if also else None
        c.wait(arm)
        return c.wait(extra) if extra is not None else None

    def _release(self, q: Any, base: int, group: list, sent: int) -> None:
        """A copy-in that failed part-way: the program is rung again (its ring push or doorbell may be what
        failed) and the chunks not sent get their sentinels (zero payload), so it runs to its end now instead of
        blocking the copy engine, then or later; the sequence moves past the group. Best effort: with the link
        gone nothing can be released (the queue's reset recovers it)."""
        self.seq = base + len(group)
        if self.ctrl.lost is not None:
            return
        try:
            q.submit([])
            for c in range(sent, len(group)):
                self._send(base + c, bytes(len(group[c][1])))
        except Exception:                   # the link fails again: the original error is the one to report
            pass

    def copy_out(self, q: Any, src: int, n: int) -> bytes:
        """n bytes from GPU address `src` through the SRAM on the SDMA queue `q` (the GPU idle)."""
        out = []
        for o in range(0, n, U.COPYOUT_CHUNK):
            k = min(U.COPYOUT_CHUNK, n - o)
            self.ctrl.sram_read_arm(k)
            q.run(q.copy(self.sram_va, src + o, k) + q.write(self.release_va, [U.COPYOUT_RELEASE_VALUE]))
            try:
                out.append(self.ctrl.sram_read_data(k))
            except DeviceError as e:
                if getattr(e, "libusb_code", None) != U.LIBUSB_ERROR_TIMEOUT:
                    raise
                err = DeviceError(f"{self.ctrl.name}: copy-out of {k} bytes from {src + o:#x}: the SRAM read timed "
                                  f"out (libusb {U.LIBUSB_ERROR_TIMEOUT}): the bridge did not stream the SRAM, because "
                                  f"the copy engine did not write the release dword (cq_buf + {RELEASE_OFFSET}) or the "
                                  f"link failed; copy queue: {q.describe().get('stuck', 'idle')}")
                err.libusb_code = U.LIBUSB_ERROR_TIMEOUT
                err.in_flight = getattr(e, "in_flight", None)
                raise err from None
            self.stats.chunks_out += 1
            self.stats.bytes_out += k
        return b"".join(out)
