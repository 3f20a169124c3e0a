"""Recovery over PCI (the AM driver on the simulated PCI function, gfx1100 / gfx1201 / gfx942): faults and hangs are
named and recovered and the next launch on the same device is correct; a queue the CP will not let go of is taken
off by the CP's soft reset (GRBM_SOFT_RESET) and the other compute queues are bound again where their rings stand;
a hung SDMA engine is reset; SCRATCH_REG6 reads 0 while a reset runs; a reset that does not take is DeviceLost,
after which the interface refuses work and the next open boots fully, naming the unclean session.

The scenarios of tests/test_recovery.py run here on SIMPCI; a fixed-seed slice of the 100-failure mix runs here,
the full 100 in scripts/am_recovery_soak.py."""
from __future__ import annotations

import time

import numpy as np
import pytest

import amdq
import test_recovery as R
from amdq.am.driver import SESSION_CLEAN
from amdq.errors import AMTimeout, DeviceLost, GPUTimeout
from amdq.hw import pm4
from amdq.hw import smu as S
from failures import Bench, mix, run_mix
from test_am_queues import Rig, _barrier, _signal, _signal_value
from test_recovery import load
from sims import am_env

ARCHS = ("gfx1100", "gfx1201", "gfx942")
SPEC = "SIMPCI+AMD:{}"
SLICE, SEED = 20, 7                  # the suite's slice of the mix (scripts/am_recovery_soak.py runs 100)
RING = 1 << 16                       # small compute rings: a queue's teardown unmaps its ring page by page
MEMORY = pm4.ENUMS["WRITE_DATA"]["DST_SEL"]["MEMORY"]


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    am_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AMDQ_RING_BYTES", str(RING))


def open_pci(monkeypatch, arch: str, queue: str | None = None, mode: str = "sync", timeout_ms: int = 60,
             **env) -> amdq.Device:
    queue = queue or ("aql" if arch == "gfx942" else "pm4")
    return R.open_dev(monkeypatch, queue, mode, timeout_ms, spec=SPEC.format(arch), **env)


def resets(dev) -> list:
    return dev.iface.driver.recovery.history


# -- tests/test_recovery.py's scenarios, on SIMPCI ------------------------------------------------------------------
@pytest.mark.parametrize("arch,queue,mode", [("gfx1100", "pm4", "sync"), ("gfx1100", "aql", "async"),
                                             ("gfx1201", "pm4", "async"), ("gfx942", "aql", "sync")])
def test_each_failure_is_named_and_recovered(monkeypatch, arch, queue, mode):
    dev = open_pci(monkeypatch, arch, queue, mode, timeout_ms=150)
    try:
        # gfx942: the simulated CDNA core decodes the patched word as an encoding it does not implement
        # (UnsupportedInstruction), not as an illegal one; the kind is covered on the RDNA targets
        R.each_failure_is_named_and_recovered(dev, skip=("illegal instruction",) if arch == "gfx942" else (),
                                          bound_s=2.0)
        kinds = [r.engine for r in resets(dev)]
        assert kinds.count("compute") == 1 and kinds.count("SDMA0") == 1, kinds     # hang_cp, hang_sdma only
    finally:
        dev.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_lost_work_fails_every_dependent_wait(monkeypatch, arch):
    dev = open_pci(monkeypatch, arch, mode="async", timeout_ms=150)
    try:
        R.lost_work_fails_every_dependent_wait(dev)
    finally:
        dev.close()


def test_ring_space_timeout_keeps_the_timeline(monkeypatch):
    dev = open_pci(monkeypatch, "gfx1100", "pm4", "async", timeout_ms=200, AMDQ_RING_BYTES=4096)
    try:
        R.ring_space_timeout_keeps_the_timeline(dev)
        assert [r.engine for r in resets(dev)] == ["compute"]
    finally:
        dev.close()


# -- the mix: endless kernels, page faults, CP hangs, SDMA hangs -----------------------------------------------------
def check_mix(dev, n: int, seed: int) -> list[dict]:
    """`n` failures of the fixed-seed mix, each followed by a correct launch and copy; a CP hang costs exactly one
    CP soft reset and an SDMA hang one SDMA reset, the others none (a dequeue takes their queue off)."""
    b = Bench(dev)
    b.check()
    history = resets(dev)

    def after(kind: str, rec: dict) -> None:
        want = {"hang_cp": ["compute"], "hang_sdma": ["SDMA0"]}.get(kind, [])
        got = [r.engine for r in history[after.seen:]]
        assert got == want, (kind, got)
        rec["reset_s"] = sum(r.seconds for r in history[after.seen:])
        after.seen = len(history)
    after.seen = len(history)
    t0 = time.monotonic()
    out = run_mix(b, mix(n, seed), after)
    elapsed = time.monotonic() - t0
    hangs = sum(r["error"] == "GPUTimeout" for r in out)
    timeout = dev.iface.driver.blocks["gfx"].dequeue_ms / 1000
    print(f"{dev.arch}: {n} failures ({hangs} hangs) in {elapsed:.1f} s; CP soft reset "
          f"{1000 * max(r.get('reset_s', 0) for r in out):.1f} ms at most")
    # each hang waits for a timeout or three (the wait, a drain, a wave reset); a generous second each on top
    assert elapsed < (hangs * 4 * timeout + n * 1.5) * load()
    assert dev.iface.driver.lost is None and dev.iface.driver.regs.GC.regSCRATCH_REG6.read() == 0
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_a_slice_of_the_mix(monkeypatch, arch):
    dev = open_pci(monkeypatch, arch, mode="async")      # (sync mode spends its waits simulating the endless kernel)
    try:
        out = check_mix(dev, SLICE, SEED)
        assert {r["kind"] for r in out} >= {"endless kernel", "hang_cp", "hang_sdma"}
    finally:
        dev.close()


# -- the CP soft reset: other queues bound again where their rings stand -------------------------------------------
def _fence(rig: Rig, b: dict, data: int, fence: int, value: int) -> None:
    rig.submit(b, rig.write_and_fence(data, fence, value))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_cp_reset_rebinds_the_other_queues(arch, tmp_path):
    """Three queues on MEC 1: A hangs (the CP takes no dequeue of it), B (PM4) and C (AQL; on gfx942 on every
    XCC) have work queued behind the hang. The CP's soft reset takes all three off; B and C are bound again at
    the read pointers the MEC reported, rung with their write pointers, and finish exactly their pending work."""
    rig = Rig(arch)
    try:
        qa, a = rig.queue()
        qb, b = rig.queue(bell=rig.lo + 8)
        qc, c = rig.queue(aql=True, bell=rig.lo + 10)
        data, fence = rig.alloc(64)[1], rig.alloc(64)[1]
        _fence(rig, b, data, fence, 1)
        s1 = _signal(rig, 1)
        rig.write(c["ring"], _barrier(s1))
        rig.ring_bell(c["bell"], 0)
        assert rig.u64(fence) == 1 and _signal_value(rig, s1) == 0 and rig.u64(c["rptr"]) == 1
        rig.dev.inject("hang_cp")
        _fence(rig, a, data, fence, 7)
        _fence(rig, b, data, fence, 2)                                 # pending behind the hang
        s2 = _signal(rig, 1)
        rig.write(c["ring"] + 64, _barrier(s2))
        rig.ring_bell(c["bell"], 1)
        assert rig.u64(fence) == 1 and _signal_value(rig, s2) == 1
        for reset in (False, True):
            with pytest.raises(AMTimeout):
                rig.gfx.destroy_queue(qa, reset=reset)
        points = {id(qb): rig.u64(b["rptr"]), id(qc): 16 * rig.u64(c["rptr"])}
        back = rig.drv.recovery.compute(qa, "A hung", lambda q: points[id(q)])
        assert {id(q) for q in back} == {id(qb), id(qc)} and all(q is not qa for q in rig.gfx.queues())
        assert rig.u64(fence) == 1                                     # nothing runs before its doorbell
        rig.ring_bell(b["bell"], b["wp"])
        rig.ring_bell(c["bell"], 1)
        assert rig.u64(fence) == 2 and rig.u64(b["rptr"]) == b["wp"]   # B: its pending packets, once
        assert _signal_value(rig, s2) == 0 and rig.u64(c["rptr"]) == 2     # C: from packet 1, not from 0
        _fence(rig, b, data, fence, 3)
        assert rig.u64(fence) == 3
        rig.gfx.destroy_queue(qb)
        rig.gfx.destroy_queue(qc)
    finally:
        rig.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_the_interface_rebinds_a_queue_the_reset_killed(monkeypatch, arch):
    """Through the interface: the runtime's compute queue hangs and is recovered (a CP soft reset); a second compute
    queue with work behind the hang is bound again by the interface and runs its pending work."""
    dev = open_pci(monkeypatch, arch)
    try:
        b = Bench(dev)
        iface = dev.iface
        extra = iface.create_queue("compute", 4096)
        mem = iface.alloc(4096, "gtt", uncached=True)
        ring = np.frombuffer(extra.ring.cpu.mv, np.uint32)
        gen = dev.target.gfx_version
        t = pm4.table(gen)
        wp = [0]

        def submit(value: int) -> None:
            for d in t.encode("WRITE_DATA", shader_type=1, DST_SEL=MEMORY, ADDR=mem.va, DATA=[value]):
                ring[wp[0] % len(ring)] = d
                wp[0] += 1
            extra.wptr.cpu.write64(0, wp[0])
            extra.doorbell.write64(extra.doorbell_off, wp[0])
        submit(1)
        assert mem.cpu.read32(0) == 1
        dev.sim.inject("hang_cp")
        submit(2)                                                      # behind the hang
        with pytest.raises(GPUTimeout, match="compute queue"):
            b.prg["put"](b.out, 1, grid=1, block=64, wait=True)
        assert [r.engine for r in resets(dev)] == ["compute"] and resets(dev)[0].rebound == 1
        end = time.monotonic() + 5 * load()
        while mem.cpu.read32(0) != 2 and time.monotonic() < end:
            time.sleep(0.001)
        assert mem.cpu.read32(0) == 2 and extra.rptr.cpu.read64(0) == wp[0]
        b.check()
        submit(3)
        assert mem.cpu.read32(0) == 3
        iface.destroy_queue(extra)
        iface.free(mem)
    finally:
        dev.close()


# -- SCRATCH_REG6 while recovering ------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,hang", [("gfx1100", "hang_cp"), ("gfx1201", "hang_sdma"), ("gfx942", "hang_cp"),
                                       ("gfx942", "hang_sdma")])
def test_reg6_reads_0_while_recovering(monkeypatch, arch, hang):
    """SCRATCH_REG6 is 0 at every register write of the reset (GRBM_SOFT_RESET, or the SMU's ResetSDMA message on
    gfx942's SDMA) and back at its value after. (A session keeps 0 there until fini; the test puts the clean value
    in first so that the write of 0 shows.)"""
    dev = open_pci(monkeypatch, arch)
    try:
        b = Bench(dev)
        drv, sim = dev.iface.driver, dev.sim
        reg6 = drv.regs.GC.regSCRATCH_REG6
        watch = {drv.regs.GC.regGRBM_SOFT_RESET.addr}
        if hang == "hang_sdma" and arch == "gfx942":
            watch = {drv.regs.MP1[S.MSG_REG].addr}
        seen, write32 = [], sim.regfile.write32

        def spy(addr: int, value: int) -> None:
            if addr in watch:
                seen.append(sim.regfile.peek(reg6.addr))
            write32(addr, value)
        monkeypatch.setattr(sim.regfile, "write32", spy)
        reg6.write(SESSION_CLEAN)
        cls, pattern, action = b.failures()[hang]
        with pytest.raises(cls, match=pattern):
            action()
        assert seen and set(seen) == {0}, seen
        assert reg6.read() == SESSION_CLEAN and len(resets(dev)) == 1
        b.check()
    finally:
        dev.close()


# -- a reset that does not take ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,hang", [("gfx1100", "hang_cp"), ("gfx1201", "hang_cp"), ("gfx942", "hang_cp"),
                                       ("gfx1100", "hang_sdma"), ("gfx942", "hang_sdma")])
def test_a_reset_that_fails_is_device_lost_and_the_next_open_boots_fully(monkeypatch, arch, hang):
    dev = open_pci(monkeypatch, arch)
    closed = False
    try:
        b = Bench(dev)
        b.check()
        dev.sim.inject("reset_fails")
        _, _, action = b.failures()[hang]
        engine = r"the compute engine \(CP/MEC\)" if hang == "hang_cp" else "SDMA0"
        with pytest.raises(DeviceLost, match=f"{engine} did not come back from its reset") as e:
            action()
        assert "GRBM_SOFT_RESET" in str(e.value) or "IDLE" in str(e.value)
        assert dev.iface.driver.lost is not None and dev.iface.driver.regs.GC.regSCRATCH_REG6.read() == 0
        for work in (lambda: b.prg["put"](b.out, 1, grid=1, block=64, wait=True), lambda: dev.alloc(5 << 20),
                     lambda: dev.synchronize()):
            with pytest.raises(DeviceLost, match="the GPU is lost"):
                work()
        dev.close()
        closed = True
        again = amdq.open_device(SPEC.format(arch))                   # a new simulated function, the same state
        try:
            r = again.iface.report
            assert (r.kind, r.reason) == ("full", "the previous session did not end cleanly (SCRATCH_REG6=0x0)")
            Bench(again).check()
        finally:
            again.close()
    finally:
        if not closed:
            dev.close()
