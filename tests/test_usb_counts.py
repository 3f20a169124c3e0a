"""What each operation costs over the USB bridge, counted exactly by the simulated bridge (amdq/sim/usb/timing.py
counters): a launch on the fast path, the wait for a finished launch (untimed and timed), a bound resubmission, a
register write batch, a 1 MiB upload and download. A change that adds a transfer to any of them fails here. Also:
every range the runtime writes to its hot memory is reported through the coherence hints (base.Mapping), checked by
comparing the tracked shadows with VRAM after a flush."""
from __future__ import annotations

import pathlib
import time

import numpy as np
import pytest

import amdq
from amdq.hw import usb_asm24 as H
from amdq.iface import usb as U

VADD = (pathlib.Path(amdq.__file__).parent / "examples" / "vadd.ll").read_text()
KEYS = ("control_in", "control_out", "bulk_in", "bulk_out", "round_trips")
N = 1 << 12


@pytest.fixture(scope="module")
def rig():
    mp = pytest.MonkeyPatch()
    mp.setenv("AMD_AQL", "0")                                  # the PM4 queue
    mp.delenv("AMDQ_SIM_MODE", raising=False)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        k = d.load(amdq.compile(VADD, arch="gfx1100"))["vadd"]
        x = d.upload(np.arange(N, dtype=np.float32))
        y = d.upload(np.ones(N, np.float32))
        z = d.alloc(4 * N)
        k(x, y, z, 2.0, N, grid=N // 256, block=256).wait()        # the plans made (a first one pushes its
        k(x, y, z, 2.0, N, grid=N // 256, block=256, timed=True).wait()     # arguments once), the doorbells
        #                                                             written whole, the timestamps' view made
        yield d, k, x, y, z
    finally:
        d.close()
        mp.undo()


def counts(dev, before: dict | None = None) -> dict:
    """The simulated bridge's counters, and the host's round trips (its controller's: each wait for the bridge)."""
    s = dict(dev.sim.stats(), round_trips=dev.iface.fn.ctrl.round_trips)
    now = {k: s[k] for k in KEYS} | {f"req_{k}": v for k, v in s["requests"].items()}
    if before is None:
        return now
    return {k: now.get(k, 0) - before.get(k, 0) for k in set(now) | set(before) if now.get(k, 0) - before.get(k, 0)}


def settle(dev) -> None:
    """The simulated GPU done with what it was given (the link untouched meanwhile)."""
    end = time.monotonic() + 30
    while dev.sim.fn.gpu.busy and time.monotonic() < end:
        time.sleep(0.0005)


def test_a_launch_costs_four_transfers_and_one_round_trip(rig):
    dev, k, x, y, z = rig
    dev.synchronize()
    for i in range(3):
        c0 = counts(dev)
        h = k(x, y, z, float(i), N, grid=N // 256, block=256)
        # the ring dwords, the kernel arguments among them (a NOP's body): one stream (F0 arm + bulk OUT, sent
        # together, the host waits once, for the data); write pointer and doorbell: one single posted TLP each
        # (their upper halves unchanged), not waited for
        assert counts(dev, c0) == {"control_out": 3, "bulk_out": 1, "round_trips": 1, "req_0xf0": 3}
        settle(dev)
        c1 = counts(dev)
        h.wait()
        # the wait for finished work: the signal words read back, one stream read (F0 arm + bulk IN, sent together:
        # one round trip), nothing else
        assert counts(dev, c1) == {"control_out": 1, "bulk_in": 1, "round_trips": 1, "req_0xf0": 1}
    assert np.array_equal(z.numpy(np.float32), np.arange(N, dtype=np.float32) + 2.0)


def test_a_timed_wait_reads_its_timestamps_and_nothing_more(rig):
    dev, k, x, y, z = rig
    dev.synchronize()
    h = k(x, y, z, 1.0, N, grid=N // 256, block=256, timed=True)
    settle(dev)
    c0 = counts(dev)
    rec = h.wait()
    assert counts(dev, c0) == {"control_out": 2, "bulk_in": 2, "round_trips": 2, "req_0xf0": 2}
    assert rec.gpu_start is not None and rec.gpu_end > rec.gpu_start          # read back from VRAM, not stale


def test_a_bound_resubmission_costs_four_transfers(rig):
    dev, k, x, y, z = rig
    b = k.bind(z, y, x, 1.0, N, grid=N // 256, block=256)
    try:
        b.submit().wait()
        dev.synchronize()
        c0 = counts(dev)
        for _ in range(3):
            b.submit()
        # per submission: the ring's INDIRECT_BUFFER and signal (one stream: the one round trip), write pointer,
        # doorbell (posted TLPs, not waited for)
        assert counts(dev, c0) == {"control_out": 9, "bulk_out": 3, "round_trips": 3, "req_0xf0": 9}
        dev.synchronize()
    finally:
        b.free()


def test_a_register_write_batch(rig):
    dev, *_ = rig
    regs, ctrl = dev.iface.fn.regs, dev.iface.fn.ctrl           # BAR5, the AM driver's register backend
    first = dev.iface.driver.regs.GC.regSCRATCH_REG5.addr       # SCRATCH_REG5..7: three consecutive registers
    keep = [regs.read32(first + i) for i in range(3)]
    try:
        c0 = counts(dev)
        for i in range(3):
            regs.write32(first + i, 0x1000 + i)                 # queued ...
        assert counts(dev, c0) == {}
        ctrl.flush()                                            # ... and sent as one stream: F0 arm + bulk OUT
        assert counts(dev, c0) == {"control_out": 1, "bulk_out": 1, "round_trips": 1, "req_0xf0": 1}
        c1 = counts(dev)
        regs.write32(first + 1, 0xABC)                          # a lone register: one single TLP
        regs.write32(first + 2, 0xDEF)                          # (and the next one joins it: one stream)
        regs.write32(first, 0x123)                              # not after the last one: its own single TLP
        ctrl.flush()
        assert counts(dev, c1) == {"control_out": 2, "bulk_out": 1, "round_trips": 1, "req_0xf0": 2}
        c2 = counts(dev)
        assert [regs.read32(first + i) for i in range(3)] == [0x123, 0xABC, 0xDEF]
        assert counts(dev, c2) == {"control_out": 3, "bulk_in": 3, "round_trips": 3, "req_0xf0": 3}
    finally:
        for i, v in enumerate(keep):
            regs.write32(first + i, v)
        ctrl.flush()


def test_a_1mib_upload_and_download(rig):
    dev, *_ = rig
    size = 1 << 20
    data = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
    buf = dev.alloc(size)
    try:
        buf.write(bytes(16))                                     # the copier made (its one-time init) before counting
        dev.synchronize()
        c0 = counts(dev)
        t0 = time.monotonic()
        buf.write(data)
        took = time.monotonic() - t0
        c = counts(dev, c0)
        chunks = -(-size // H.COPYIN_CHUNK)                      # 5: a chunk carries 256 KiB - 4 bytes
        fence_reads = c.pop("req_0xe4")                          # the drain fence: as often as the GPU is behind,
        #                                                          at most one a pause (doubling up to 1 ms)
        from amdq.iface.usb_copy import FENCE_POLL_MAX_S
        assert 1 <= fence_reads <= 2 * chunks + 40 + took / FENCE_POLL_MAX_S
        assert c.pop("control_in") == fence_reads
        # per chunk one F2 arm and one bulk OUT; the SDMA program once: its ring stream, write pointer, doorbell.
        # Round trips: the program's stream, each chunk's arm, each fence read; a chunk's bulk OUT where the host
        # must wait for its window (the wire is the bound: most are still streaming when the next arm is taken)
        trips = c.pop("round_trips")
        assert fence_reads + chunks + 1 <= trips <= fence_reads + 2 * chunks + 1
        assert c == {"req_0xf2": chunks, "bulk_out": chunks + 1, "req_0xf0": 3, "control_out": chunks + 3}
        dev.synchronize()
        c1 = counts(dev)
        assert buf.read() == data.tobytes()
        out = -(-size // H.COPYOUT_CHUNK)                        # 2 chunks of 512 KiB
        # per chunk: the F2 read arm, the SDMA copy (ring stream, write pointer, doorbell) and the bulk IN; round
        # trips: the arm, the program's stream, the bulk IN
        assert counts(dev, c1) == {"req_0xf2": out, "req_0xf0": 3 * out, "control_out": 4 * out,
                                   "bulk_out": out, "bulk_in": out, "round_trips": 3 * out}
    finally:
        buf.free()


def test_an_aql_launch_costs_six_transfers(monkeypatch):
    monkeypatch.setenv("AMD_AQL", "1")
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        assert d.queue.kind == "aql"
        k = d.load(amdq.compile(VADD, arch="gfx1100"))["vadd"]
        x = d.upload(np.arange(N, dtype=np.float32))
        z = d.alloc(4 * N)
        k(x, x, z, 1.0, N, grid=N // 256, block=256, wait=True)
        d.synchronize()
        for timed in (False, True):
            c0 = counts(d)
            h = k(x, x, z, 3.0, N, grid=N // 256, block=256, timed=timed)
            # kernel arguments with the vendor packets' PM4 after them: one stream; the packets in the ring: one
            # stream; write_dispatch_id and the doorbell: one single TLP each
            assert counts(d, c0) == {"control_out": 4, "bulk_out": 2, "round_trips": 2, "req_0xf0": 4}
            h.wait()
        assert np.array_equal(z.numpy(np.float32), np.arange(N, dtype=np.float32) * 4.0)
    finally:
        d.close()


@pytest.mark.parametrize("aql", ["0", "1"])
def test_the_runtime_reports_every_write_to_its_tracked_memory(monkeypatch, aql):
    """After launches (plain, timed, bound), copies and a graph, every tracked host-written shadow equals VRAM once
    flushed: a write the runtime made without telling the interface would show here as a difference."""
    monkeypatch.setenv("AMD_AQL", aql)
    d = amdq.open_device("SIMUSB+AMD:gfx1100")
    try:
        k = d.load(amdq.compile(VADD, arch="gfx1100"))["vadd"]
        x = d.upload(np.arange(N, dtype=np.float32))
        y = d.upload(np.ones(N, np.float32))
        z, w = d.alloc(4 * N), d.alloc(4 * N)
        for i in range(3):
            k(x, y, z, float(i), N, grid=N // 256, block=256, timed=bool(i & 1))
        b = k.bind(x, y, w, 1.0, N, grid=N // 256, block=256)
        b.submit()
        with d.capture() as g:
            k(x, y, z, 5.0, N, grid=N // 256, block=256)
        g.replay()
        d.synchronize()
        assert np.array_equal(z.numpy(np.float32), np.arange(N, dtype=np.float32) + 5.0)
        assert np.array_equal(w.numpy(np.float32), np.arange(N, dtype=np.float32) + 1.0)
        sh = d.iface.fn.shadows
        sh.flush()
        tracked = 0
        with sh.lock:
            for va, e in sh.entries.items():
                if not e[U.Shadows.TRACKED]:
                    continue
                tracked += 1
                vram = np.frombuffer(d.iface.fn.vram.read(e[0], len(e[1])), np.uint32)
                mine = np.frombuffer(bytes(e[1]), np.uint32)
                diff = np.flatnonzero(vram != mine)
                if e[U.Shadows.PULL]:                       # GPU-written pages: the host's words must have gone
                    diff = diff[mine[diff] != e[U.Shadows.CLEAN][diff]]
                if va == d.queue.q.ring.va and aql == "1":  # the packet processor marks consumed slots INVALID
                    diff = diff[diff % 16 != 0]
                assert not len(diff), f"shadow at {va:#x}: dwords {diff[:8].tolist()} not sent to VRAM"
        assert tracked >= 5                                  # rings, kernel arguments, pointers, signals ...
        b.free()
    finally:
        d.close()
