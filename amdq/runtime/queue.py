"""The PM4 compute queue: command encoding (with amdq.hw.pm4), ring writes with wrap-around, doorbell.

A `Commands` list is the unit of encoding. It can be submitted to the ring as is, or bound into an
indirect buffer so that a resubmission writes a 4-dword INDIRECT_BUFFER packet and rings the doorbell.
"""
from __future__ import annotations

import struct
import time

import numpy as np

from ..errors import GPUTimeout
from ..hw import pm4, regs

_RM, _WRM = pm4.ENUMS["RELEASE_MEM"], pm4.ENUMS["WAIT_REG_MEM"]
EOP_EVENT, BOTTOM_OF_PIPE_TS = pm4.CACHE_FLUSH_AND_INV_TS_EVENT, pm4.BOTTOM_OF_PIPE_TS
END_OF_PIPE = _RM["EVENT_INDEX"]["END_OF_PIPE"]
DATA_SEL_32, DATA_SEL_64, DATA_SEL_CLOCK = (_RM["DATA_SEL"][k] for k in (
    "SEND_32_BIT_LOW", "SEND_64_BIT_DATA", "SEND_GPU_CLOCK_COUNTER"))
INT_AFTER_WRITE = _RM["INT_SEL"]["SEND_INTERRUPT_AFTER_WRITE_CONFIRM"]
WAIT_GEQ = _WRM["FUNCTION"]["GREATER_THAN_OR_EQUAL_REFERENCE_VALUE"]
MEMORY_SPACE = _WRM["MEM_SPACE"]["MEMORY_SPACE"]


class SHRegs:
    """Absolute dword addresses of the compute SH registers for one GC version (driver side)."""

    def __init__(self, gc_version):
        self.map = regs.load("GC", gc_version)
        self.bases = regs.bases("vega" if gc_version[0] < 10 else "navi")["GC"]

    def __getitem__(self, name: str) -> int:
        return self.map[name].address(self.bases)


def stuck_report(queue: str, rptr: int, wptr: int, where: str, packet, stopper: str | None) -> dict:
    """What a queue reports for timeouts and faults: its pointers, the decoded packet at its read pointer
    (`packet()` decodes it), where that is, and (if `stopper` names who stops) the fault wording."""
    info = {"queue": queue, "rptr": rptr, "wptr": wptr}
    if rptr >= wptr:
        info["stuck"] = "the queue is idle: everything submitted was consumed"
        return info
    info["packet"] = packet()
    info["stuck"] = f"stuck at {where}: {info['packet']}"
    if stopper:
        info["fault"] = f"{stopper} stopped at {where}: {info['packet']}"
    return info


class Commands:
    """Encoded PM4 dwords for one queue, with helpers for the packets the runtime uses."""

    def __init__(self, gen: int, sh: SHRegs):
        self.gen, self.sh, self.t = gen, sh, pm4.table(gen)
        self.dw: list[int] = []
        self.patches: dict[str, int] = {}            # name -> dword index (for bound resubmission)

    def packet(self, name: str, **f) -> "Commands":
        self.dw += self.t.encode(name, shader_type=1, **f)
        return self

    def set_sh(self, name: str, *values: int) -> "Commands":
        return self.packet("SET_SH_REG", REG=self.sh[name], VALUES=[v & 0xFFFFFFFF for v in values])

    def acquire(self) -> "Commands":
        if self.gen >= 10:
            return self.packet("ACQUIRE_MEM", COHER_SIZE=0xFFFFFFFF, COHER_SIZE_HI=0xFFFFFF, POLL_INTERVAL=10,
                               GLI_INV=1, GLK_INV=1, GLV_INV=1, GL1_INV=1, GL2_INV=1, GL2_WB=1)
        return self.packet("ACQUIRE_MEM", COHER_SIZE=0xFFFFFFFF, COHER_SIZE_HI=0xFF, POLL_INTERVAL=10,
                           SH_ICACHE_ACTION_ENA=1, SH_KCACHE_ACTION_ENA=1, TC_ACTION_ENA=1, TCL1_ACTION_ENA=1,
                           TC_WB_ACTION_ENA=1)

    def release(self, addr: int, value: int, interrupt: int | None = None, name: str | None = None) -> "Commands":
        """End-of-pipe write of a 64-bit value (and the interrupt with context id `interrupt`)."""
        if name:
            self.patches[name] = len(self.dw) + 5          # DATA_LO dword
        return self.packet("RELEASE_MEM", EVENT_TYPE=EOP_EVENT, EVENT_INDEX=END_OF_PIPE, DATA_SEL=DATA_SEL_64,
                           INT_SEL=INT_AFTER_WRITE if interrupt is not None else 0, ADDR=addr, DATA=value,
                           INT_CTXID=interrupt or 0, **self._gcr())

    def timestamp(self, addr: int) -> "Commands":
        """Write the GPU clock counter to `addr` when everything before has finished."""
        return self.packet("RELEASE_MEM", EVENT_TYPE=BOTTOM_OF_PIPE_TS, EVENT_INDEX=END_OF_PIPE, DATA_SEL=DATA_SEL_CLOCK,
                           ADDR=addr, **self._gcr())

    def wait(self, addr: int, value: int, mask: int = 0xFFFFFFFF) -> "Commands":
        """Block the queue until the 32-bit word at `addr` is >= value."""
        return self.packet("WAIT_REG_MEM", FUNCTION=WAIT_GEQ, MEM_SPACE=MEMORY_SPACE, ADDR=addr, REFERENCE=value & 0xFFFFFFFF,
                           MASK=mask, POLL_INTERVAL=4)

    def _gcr(self) -> dict:
        return {"GCR_GL2_WB": 1, "GCR_GLM_INV": 1, "GCR_GLM_WB": 1, "GCR_SEQ": 1} if self.gen >= 10 else \
            {"TC_WB_ACTION_ENA": 1, "TC_ACTION_ENA": 1}


class ComputeQueue:
    """A KFD (or AM) PM4 compute queue: the runtime's writer side of the ring."""

    def __init__(self, dev, ring_bytes: int, timeline):
        self.dev, self.timeline = dev, timeline
        self.q = dev.iface.create_queue("compute", ring_bytes)
        self.name = f"compute queue {self.q.queue_id}"
        self.ring = np.frombuffer(self.q.ring.cpu.mv, np.uint32)
        self.ring_dw = len(self.ring)
        self.wptr = 0
        self._limit = self.ring_dw              # wptr may grow to this without rereading the read pointer
        self.gen = dev.target.gfx_version
        self.sh = SHRegs(dev.target.ip["GC"])

    def commands(self) -> Commands:
        return Commands(self.gen, self.sh)

    def launch(self, kernel, args: tuple, grid, block, ts: int | None) -> tuple[int, float]:
        """Encode a dispatch from the kernel's launch plan and submit it; `ts` (if given) receives the GPU
        clock before and after. Returns (timeline value, time when encoding finished)."""
        p = kernel.plan(args, grid, block, ts is not None)
        ka, off = self.dev.kernargs.take(p.size)
        kernel.pack_into(p, args, self.dev.kernargs.mv, off)
        dw = p.dw
        if p.ka_idx is not None:
            dw[p.ka_idx], dw[p.ka_idx + 1] = ka & 0xFFFFFFFF, ka >> 32
        if p.pkt_off is not None:
            pa = ka + p.pkt_off
            struct.pack_into("<Q", p.pkt, 40, ka)
            self.dev.kernargs.mv[off + p.pkt_off:off + p.pkt_off + 64] = p.pkt
            dw[p.pkt_idx], dw[p.pkt_idx + 1] = pa & 0xFFFFFFFF, pa >> 32
        value = self.timeline.next()
        dw[p.value], dw[p.value + 1] = value & 0xFFFFFFFF, value >> 32
        if ts is not None:
            dw[p.ts], dw[p.ts + 1], dw[p.ts2], dw[p.ts2 + 1] = ts & 0xFFFFFFFF, ts >> 32, (ts + 8) & 0xFFFFFFFF, (ts + 8) >> 32
        t1 = time.perf_counter()
        self.submit(dw)
        return value, t1

    @property
    def rptr(self) -> int:
        return self.q.rptr.cpu.read64(0)

    def submit(self, dws: list[int] | np.ndarray, timeout_ms: int = 10_000) -> None:
        """Copy dwords into the ring (wrapping at its end) and ring the doorbell."""
        n = len(dws)
        if n > self.ring_dw:
            raise ValueError(f"{n} dwords do not fit the {self.ring_dw}-dword ring; bind them into an IB")
        if self.wptr + n > self._limit:
            if self.wptr + n - self.rptr > self.ring_dw:
                self._wait_space(n, timeout_ms)
            self._limit = self.rptr + self.ring_dw
        i = self.wptr % self.ring_dw
        first = min(n, self.ring_dw - i)
        arr = np.asarray(dws, np.uint32)
        self.ring[i:i + first] = arr[:first]
        if first < n:
            self.ring[:n - first] = arr[first:]
        self.wptr += n
        self.q.wptr.cpu.write64(0, self.wptr)
        self.q.doorbell.write64(self.q.doorbell_off, self.wptr)

    def _wait_space(self, n: int, timeout_ms: int) -> None:
        end = time.monotonic() + timeout_ms / 1000
        while self.wptr + n - self.rptr > self.ring_dw:
            if time.monotonic() > end:
                raise GPUTimeout(f"{self.name}: no ring space for {n} dwords after {timeout_ms} ms "
                                 f"(read pointer stuck at {self.rptr}); {self.describe()['stuck']}", queue=self.name)
            self.dev.iface.wait_events(1)

    def describe(self) -> dict:
        """Where the queue is: the packet at the GPU's read pointer, decoded."""
        rp, i = self.rptr, self.rptr % self.ring_dw

        def packet() -> str:
            window = np.take(self.ring, np.arange(i, i + min(self.wptr - rp, 64)) % self.ring_dw)
            try:
                p = pm4.table(self.gen).decode(window, 0)
            except pm4.BadPacket as e:
                return f"undecodable packet: {e}"
            desc = ", ".join(f"{k}={v:#x}" if isinstance(v, int) else f"{k}={v}" for k, v in p.fields.items()
                             if k not in ("VALUES", "DATA", "BODY"))
            return f"{p.name}({desc})"
        return stuck_report(self.name, rp, self.wptr, f"ring dword {i}", packet, "the queue")

    def close(self) -> None:
        self.dev.iface.destroy_queue(self.q)


class Bound:
    """Commands copied into an indirect buffer: resubmitting patches a few dwords in place and writes
    one 4-dword INDIRECT_BUFFER packet to the ring."""

    def __init__(self, queue: ComputeQueue, dws, patches: dict[str, int]):
        dws = np.asarray(dws, np.uint32)
        self.queue, self.patches = queue, dict(patches)
        self.alloc = queue.dev.allocator.alloc(len(dws) * 4, "gtt", uncached=True)
        self.mv = self.alloc.cpu.mv
        self.mv[:len(dws) * 4] = dws.tobytes()
        self.ib = np.array(pm4.table(queue.gen).encode("INDIRECT_BUFFER", shader_type=1, IB_BASE=self.alloc.va,
                                                       IB_SIZE=len(dws), VALID=1), np.uint32)

    def patch64(self, name: str, value: int) -> None:
        struct.pack_into("<Q", self.mv, self.patches[name] * 4, value)

    def submit(self) -> None:
        self.queue.submit(self.ib)

    def free(self) -> None:
        self.queue.dev.allocator.free(self.alloc)
