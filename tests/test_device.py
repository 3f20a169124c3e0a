"""The runtime on the simulated GPU behind KFD: device selection, ring wrap, scratch, argument checks,
LDS limits, timeouts and faults."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.errors import (DeviceError, GPUFault, GPUTimeout, LDSLimitExceeded, TargetMismatch, UnsupportedTarget)
from clang import compile_cl

RT = Path(__file__).parent / "kernels_rt"


def co(name: str, arch: str = "gfx1100", flags=()) -> bytes:
    return compile_cl(str(RT / name), arch, flags=tuple(flags)).read_bytes()


@pytest.fixture
def dev():
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    yield d
    d.close()


def test_device_spec_grammar(monkeypatch, capsys):
    d = amdq.open_device("SIM:gfx1201")
    assert d.arch == "gfx1201" and d.name == "SIMKFD+AMD:gfx1201"
    d.close()
    monkeypatch.setenv("DEV", "SIMKFD+AMD:gfx942")
    d = amdq.open_device()
    assert d.arch == "gfx942" and d.target.wave_size == 64
    d.close()
    for bad in ("NVIDIA", "FOO+AMD", "KFD+PCI+AMD"):
        with pytest.raises(DeviceError):
            amdq.open_device(bad)
    with pytest.raises(UnsupportedTarget, match="gfx1100, gfx1101"):
        amdq.open_device("SIM:gfx90a")


def test_plain_amd_falls_back_to_simulator_once(capsys):
    import amdq.runtime.device as D
    if Path("/dev/kfd").exists():
        pytest.skip("a real GPU is present")
    D._said_sim = False
    a, b = amdq.open_device("AMD"), amdq.open_device("AMD:gfx1100")
    err = capsys.readouterr().err
    assert err.count("simulated GPU") == 1
    assert a.sim is not None and b.arch == "gfx1100"
    a.close(), b.close()


def test_ring_wrap_thousands_of_launches(monkeypatch):
    monkeypatch.setenv("AMDQ_RING_BYTES", "4096")
    d = amdq.open_device("SIM:gfx1100")
    k = d.load(co("count.cl"))["count"]
    c = d.upload(np.zeros(1, np.int32))
    n = 2000
    for i in range(n):
        k(c, 1 + (i % 3), grid=1, block=32)
    d.synchronize()
    assert c.numpy(np.int32)[0] == sum(1 + (i % 3) for i in range(n))
    assert d.queue.wptr > 20 * d.queue.ring_dw          # the ring wrapped many times
    d.close()


def test_cp_decodes_the_new_values_of_packets_it_saw(monkeypatch):
    """Packets the CP saw before with other value dwords (a RELEASE_MEM's address and data, a SET_SH_REG's values)
    are decoded from their own dwords: each write lands where and as its packet says, round after round, also when
    a control dword (INT_SEL) differs from the packet seen, and a run of register packets seen together before is
    taken whole only when all its dwords are the same."""
    monkeypatch.setenv("AMDQ_SIM_MODE", "sync")
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    try:
        buf = d.alloc(4096)
        eng = next(e for e in d.sim.engines.values() if hasattr(e, "_reg_packets"))
        q, u0 = d.queue, d.queue.commands().sh["regCOMPUTE_USER_DATA_0"]
        for rnd in range(4):
            c = q.commands()
            for i in range(4):
                c.release(buf.addr + 8 * (4 * (rnd % 2) + i), (rnd + 1) << 40 | rnd << 8 | i,
                          interrupt=7 if rnd == 3 and i == 0 else None)
            c.set_sh("regCOMPUTE_USER_DATA_0", rnd, 2 * rnd, 3 * rnd)
            c.set_sh("regCOMPUTE_START_X", 7, 8, 9)                 # a run of register packets seen before whose
            c.set_sh("regCOMPUTE_PGM_RSRC1", rnd % 2, 5)            # second one differs every other round
            c.set_sh("regCOMPUTE_TMPRING_SIZE", 11)
            q.submit(c.dw)
            got = np.frombuffer(buf.read(), np.uint64)[4 * (rnd % 2):4 * (rnd % 2) + 4]
            assert got.tolist() == [(rnd + 1) << 40 | rnd << 8 | i for i in range(4)]
            assert [eng.regs[u0 + k] for k in range(3)] == [rnd, 2 * rnd, 3 * rnd]
            sh = c.sh
            assert [eng.regs[sh["regCOMPUTE_PGM_RSRC1"] + k] for k in range(2)] == [rnd % 2, 5]
            assert eng.regs[sh["regCOMPUTE_TMPRING_SIZE"]] == 11
    finally:
        d.close()


def test_scratch_grows_across_programs(dev):
    small = dev.load(co("private.cl", flags=("-DN=8",)))["priv"]
    big = dev.load(co("private.cl", flags=("-DN=200",)))["priv"]
    n = 256
    idx = np.random.default_rng(0).integers(0, 1000, n).astype(np.int32)
    ib = dev.upload(idx)
    for k, N in ((small, 8), (big, 200), (small, 8)):
        out = dev.alloc(4 * n)
        k(ib, out, grid=n // 64, block=64, wait=True)
        i = np.arange(n)
        want = np.array([sum(((idx[j] + kk) % N) * j for kk in range(N)) for j in i], np.int64).astype(np.int32)
        assert (out.numpy(np.int32) == want).all()
        if N == 200:
            big_scratch = dev.scratch.wave_bytes
    assert dev.scratch.wave_bytes == big_scratch >= 200 * 4 * 32        # never shrinks


def test_wrong_arguments_raise_before_submission(dev):
    k = dev.load(co("count.cl", flags=("-cl-kernel-arg-info",)))["count"]
    c = dev.alloc(4)
    before = dev.timeline.value
    with pytest.raises(TypeError, match=r"argument #1 \(int\)"):       # without argument names: position and type
        dev.load(co("count.cl"))["count"](c, c, grid=1, block=32)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        k(c, grid=1, block=32)
    with pytest.raises(TypeError, match="argument c .*global pointer"):
        k(1.5, 1, grid=1, block=32)
    with pytest.raises(TypeError, match="argument inc"):
        k(c, c, grid=1, block=32)
    with pytest.raises(TypeError, match="argument inc .*does not fit"):
        k(c, 1 << 40, grid=1, block=32)
    with pytest.raises(TypeError, match="argument inc"):
        k(c, amdq.LDS(16), grid=1, block=32)
    with pytest.raises(TypeError, match="grid"):
        k(c, 1, grid=(0, 1, 1), block=32)
    with pytest.raises(TypeError, match="exceeds its maximum"):
        k(c, 1, grid=1, block=(1024, 2, 1))
    assert dev.timeline.value == before                  # nothing was submitted


def test_lds_over_the_limit(dev):
    k = dev.load(compile_cl("dyn_lds.cl").read_bytes())
    name = k.kernels[0]
    kern = k[name]
    nargs = len(kern.meta.explicit_args)
    before = dev.timeline.value
    args = [amdq.LDS(70000) if a.value_kind == "dynamic_shared_pointer" else
            (dev.alloc(1024) if a.value_kind == "global_buffer" else 1) for a in kern.meta.explicit_args]
    assert nargs == len(args)
    with pytest.raises(LDSLimitExceeded, match="65536"):
        kern(*args, grid=1, block=64)
    assert dev.timeline.value == before


def test_code_object_for_another_target(dev):
    with pytest.raises(TargetMismatch):
        dev.load(co("count.cl", "gfx942"))


def test_hung_kernel_times_out_naming_the_packet(dev):
    k = dev.load(co("spin.cl"))["spin"]
    flag, out = dev.upload(np.zeros(1, np.int32)), dev.alloc(4)
    t = time.monotonic()
    with pytest.raises(GPUTimeout) as e:
        k(flag, out, grid=1, block=32, wait=True, timeout_ms=400)
    assert time.monotonic() - t < 3.0
    msg = str(e.value)
    assert "DISPATCH_DIRECT" in msg and "timeline value" in msg and "last value seen 0" in msg
    assert e.value.info["awaited"] == dev.timeline.value


def test_queue_waiting_on_a_value_never_written(dev, monkeypatch):
    flag = dev.upload(np.zeros(1, np.int32))
    cmds = dev.queue.commands()
    cmds.wait(flag.addr, 1)
    value = dev.timeline.next()
    cmds.release(dev.timeline.addr, value)
    dev.queue.submit(cmds.dw)
    monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", "300")
    t = time.monotonic()
    with pytest.raises(GPUTimeout, match=r"WAIT_REG_MEM\(FUNCTION=0x5.*REFERENCE=0x1") as e:
        dev.synchronize()
    assert 0.25 < time.monotonic() - t < 3.0
    assert e.value.info["last"] == 0


def test_gpu_page_fault_names_the_address(dev):
    k = dev.load(co("fault.cl"))["poke"]
    bad = 0x7A00_0000_0000
    with pytest.raises(GPUFault) as e:
        k(bad, grid=1, block=32, wait=True, timeout_ms=2000)
    assert e.value.address == bad and f"{bad:#x}" in str(e.value)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bound_resubmission(monkeypatch, mode):
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    d = amdq.open_device("SIM:gfx1100")
    k = d.load(co("count.cl"))["count"]
    c = d.upload(np.zeros(1, np.int32))
    b = k.bind(c, 3, grid=1, block=32)
    values = [b.submit().value for _ in range(50)]
    assert values == list(range(values[0], values[0] + 50))
    d.wait(values[-1])
    assert c.numpy(np.int32)[0] == 150
    d.close()


def test_a_waiting_host_thread_runs_the_gpu_while_the_worker_sleeps(monkeypatch):
    """Asynchronous mode, simulated KFD: a thread that waits for the GPU runs its slices itself when no other thread
    is in one (SimGPU.assist), so work completes even while the worker thread sleeps (here: it never wakes)."""
    import threading

    from amdq.sim.gpu import SimGPU
    monkeypatch.setenv("AMDQ_SIM_MODE", "async")
    asleep = threading.Event()
    monkeypatch.setattr(SimGPU, "_run_worker", lambda self: asleep.wait())
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    try:
        k = d.load(co("count.cl"))["count"]
        c = d.upload(np.zeros(1, np.int32))
        k(c, 3, grid=1, block=32, wait=True, timeout_ms=5000)
        h = d.alloc(4)
        d.copy(h, c, 4, wait=True, timeout_ms=5000)
        assert h.numpy(np.int32)[0] == 3
    finally:
        asleep.set()
        d.close()


@pytest.mark.parametrize("interface", ["SIMKFD", "SIMPCI"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_deferred_gpu_runs_nothing_until_released(monkeypatch, tmp_path, interface, mode):
    """SimGPU.defer (what bench/launch.py times host work under): doorbells only record; no engine runs, not the
    worker thread, not a sync-mode doorbell; cleared, the GPU runs what was rung."""
    from sims import open_sim
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    d = open_sim(monkeypatch, tmp_path, interface)
    try:
        k = d.load(co("count.cl"))["count"]
        c = d.upload(np.zeros(1, np.int32))
        d.synchronize()
        d.sim.defer = True
        first = d.queue.timeline.value + 1
        for _ in range(5):
            k(c, 3, grid=1, block=32)
        last = d.queue.timeline.value
        time.sleep(0.05)                                   # many worker wake-ups (0.5 ms apart while busy)
        assert last == first + 4 and d.queue.timeline.completed < first    # (reading c would wait on the GPU)
        d.sim.defer = False
        q = d.queue.q
        q.doorbell.write64(q.doorbell_off, d.queue.wptr)  # a doorbell while released: the recorded work runs
        d.wait(last)
        assert c.numpy(np.int32)[0] == 15
    finally:
        d.sim.defer = False
        d.close()


def test_out_of_memory_names_the_sizes(dev):
    with pytest.raises(amdq.errors.OutOfMemory, match=r"\d+ bytes"):
        dev.alloc(dev.target.vram_bytes * 4)
    b = dev.alloc(1 << 20)                                     # the device still works afterwards
    b.write(np.arange(256, dtype=np.uint32))
    assert (b.numpy(np.uint32, (-1,))[:256] == np.arange(256)).all()


@pytest.mark.parametrize("start", [(1 << 31) - 3, (1 << 32) - 3])
def test_timeline_rolls_over(monkeypatch, start):
    monkeypatch.setenv("AMDQ_TIMELINE_START", str(start))
    d = amdq.open_device("SIM:gfx1100")
    k = d.load(co("count.cl"))["count"]
    c = d.upload(np.zeros(1, np.int32))
    for _ in range(8):
        k(c, 1, grid=1, block=32)
    d.synchronize()
    assert d.timeline.completed == start + 8 and c.numpy(np.int32)[0] == 8
    rec = k(c, 1, grid=1, block=32, wait=True)
    assert rec.value == start + 9
    d.close()


def test_kfd_topology_and_ip_versions():
    d = amdq.open_device("SIM:gfx942")
    p = d.iface.props
    assert p["gfx_target_version"] == 90402 and p["wave_front_size"] == 64 and p["num_xcc"] == 8
    assert p["local_mem_size"] == d.target.vram_bytes
    assert d.iface.ip_versions() == d.target.ip
    d.close()
