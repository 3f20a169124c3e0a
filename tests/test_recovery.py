"""Faults are named for what they are and never poison the device: after every kind of failure the failed
queue is reset and the next launch and the next copy on the same device are correct.

The scenarios that hold on every interface are functions of a device (`each_failure_is_named_and_recovered`,
`lost_work_fails_every_dependent_wait`, `ring_space_timeout_keeps_the_timeline`): the tests here run them on
SIMKFD, tests/test_am_recovery.py on SIMPCI."""
from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.errors import DeviceClosed, GPUFault, GPUTimeout, InvalidArgument
from clang import compile_cl
from failures import SRC, Bench

MODES = [("pm4", "sync"), ("pm4", "async"), ("aql", "sync"), ("aql", "async")]


def load() -> float:
    """How oversubscribed the machine is (runnable processes per core, at least 1): the liveness bounds and
    the no-progress timeouts below scale with it, so a shared machine does not fail them by starvation."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def open_dev(monkeypatch, queue: str, mode: str, timeout_ms: int = 150, spec: str = "SIMKFD+AMD:gfx1100",
             **env) -> amdq.Device:
    monkeypatch.setenv("AMD_AQL", "1" if queue == "aql" else "0")
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", str(round(timeout_ms * load())))
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    return amdq.open_device(spec)


def each_failure_is_named_and_recovered(dev: amdq.Device, skip: tuple[str, ...] = (), bound_s: float = 1.0) -> None:
    """Every kind of failure of failures.Bench raises its named error within the timeout plus `bound_s`, and the
    next launch and copy are correct (`skip`: kinds left out)."""
    b = Bench(dev)
    b.check()
    for name, (cls, pattern, action) in b.failures().items():
        if name in skip:
            continue
        t = time.monotonic()
        with pytest.raises(cls, match=pattern) as e:
            action()
        took = time.monotonic() - t
        assert not isinstance(e.value, GPUFault) or e.value.address is not None, name
        # a hang is reported within the timeout plus a margin (a bound on liveness, not a benchmark: a host
        # thread starved of the interpreter lock by the simulated GPU took seconds here)
        assert took < (0.15 + bound_s) * load(), (name, took)
        b.check()


@pytest.mark.parametrize("queue,mode", MODES)
def test_each_failure_is_named_and_recovered(monkeypatch, queue, mode):
    dev = open_dev(monkeypatch, queue, mode)
    try:
        each_failure_is_named_and_recovered(dev)
    finally:
        dev.close()


@pytest.mark.parametrize("queue,mode", MODES)
def test_100_failures_in_a_row(monkeypatch, queue, mode):
    """100 injected failures of every kind on one device, each followed by a correct launch and copy; the
    total time is bounded by the timeouts (hangs cost one wait timeout each)."""
    dev = open_dev(monkeypatch, queue, mode, timeout_ms=60)
    try:
        b = Bench(dev)
        kinds = list(b.failures().items())
        t0 = time.monotonic()
        hangs = 0
        for i, (name, (cls, pattern, action)) in zip(range(100), itertools.cycle(kinds)):
            with pytest.raises(cls, match=pattern):
                action()
            hangs += cls is GPUTimeout
            b.check()
        elapsed = time.monotonic() - t0
        print(f"100 failures ({hangs} hangs) in {elapsed:.1f} s")
        assert elapsed < (hangs * 0.06 * 4 + 100 * 1.0) * load()     # timeouts plus a generous second each
    finally:
        dev.close()


def test_fault_message_names_the_nearest_allocation(monkeypatch):
    dev = open_dev(monkeypatch, "pm4", "sync")
    try:
        b = Bench(dev)
        buf = dev.alloc(4096, "gtt")                        # a page of its own; the next page is not mapped
        past = buf.addr + 4096 + 12
        with pytest.raises(GPUFault) as e:
            b.prg["rd"](past - 4 * 0, b.out, grid=1, block=1, wait=True)
        assert e.value.address == past and "12 bytes past the end of a 4096-byte buffer" in str(e.value), e.value
        assert e.value.info["kernel"] == "rd" and e.value.info["record"].write is False
        b.check()
    finally:
        dev.close()


def lost_work_fails_every_dependent_wait(dev: amdq.Device) -> None:
    """Work queued behind a fault fails with the fault's error, on its own queue and (through the GPU-side
    ordering) on the copy queue; work submitted after recovery runs."""
    b = Bench(dev)
    dev.sim.inject("hang_cp")
    prg = b.prg
    prg["put"](0, 1, grid=1, block=64)                  # will fault (NULL) once the CP runs again
    v2 = dev.queue.timeline.value
    prg["put"](b.out, 3, grid=1, block=64)               # queued behind it
    v3 = dev.queue.timeline.value
    src, dst = dev.upload(np.arange(4, dtype=np.int32)), dev.alloc(16)
    copy = dev.copy(dst, src, 16)                        # ordered after the compute work, on the GPU
    cv = dev.copyq.timeline.value
    dev.sim.clear("hang_cp")
    with pytest.raises(GPUFault) as e:
        dev.wait(v3)
    assert e.value.address == 0 and copy is None
    for v, q in ((v2, dev.queue), (v3, dev.queue), (cv, dev.copyq)):
        with pytest.raises(GPUFault) as e2:
            dev.wait(v, queue=q)
        assert e2.value is e.value
    b.check()
    dev.synchronize()                                     # the new work is what the device waits for now


@pytest.mark.parametrize("queue", ["pm4", "aql"])
def test_lost_work_fails_every_dependent_wait(monkeypatch, queue):
    dev = open_dev(monkeypatch, queue, "async")
    try:
        lost_work_fails_every_dependent_wait(dev)
    finally:
        dev.close()


def test_long_kernel_is_not_a_hang(monkeypatch):
    """A finite kernel running longer than the wait timeout, while its waves retire, completes. (The
    simulated GPU runs a dispatch as batches of up to 4,096 workgroups of 64; waves retire batch by batch.) The
    interpreter runs it: compiled, the kernel ends before the timeout could restart."""
    monkeypatch.setenv("AMDQ_SIM_JIT", "0")
    dev = open_dev(monkeypatch, "pm4", "async", timeout_ms=400)      # a batch takes ~20-60 ms here
    try:
        b = Bench(dev)
        n = 150
        out = dev.alloc(64 * 4 * 64 * 4096)
        b.prg["steps"](out, n, grid=4096, block=64, wait=True)       # (decoded once)
        t = time.monotonic()
        b.prg["steps"](out, n, grid=4 * 4096, block=64, wait=True)   # four batches: how long one takes here
        batch = (time.monotonic() - t) / 4
        groups = 4096 * min(64, max(16, math.ceil(1.6 / batch)))   # the dispatch: ~4 timeouts of batches
        t = time.monotonic()
        b.prg["steps"](out, n, grid=groups, block=64, wait=True)
        took = time.monotonic() - t
        x = 0
        for k in range(n):
            x = (x * 3 + k) & 0xFFFFFFFF
        assert (out.numpy(np.uint32)[:64 * groups] == x).all()
        print(f"steps kernel: {took:.2f} s with a 0.4 s timeout")
        if took < 0.6:
            pytest.skip(f"the kernel ran in {took:.2f} s, too fast to show the timeout restarting")
    finally:
        dev.close()


def ring_space_timeout_keeps_the_timeline(dev: amdq.Device) -> None:
    """A hung CP fills a small ring: the wait for ring space obeys the timeout, nothing handed out is left pending,
    and the device works after."""
    b = Bench(dev)
    dev.sim.inject("hang_cp")
    t = time.monotonic()
    with pytest.raises(GPUTimeout, match="no ring space"):
        for _ in range(1000):
            b.prg["put"](b.out, 1, grid=1, block=64)
    assert time.monotonic() - t < 5 * load()
    q = dev.queue
    assert q.timeline.completed == q.timeline.value     # nothing handed out is left pending
    b.check()
    dev.synchronize(timeout_ms=2000)


def test_ring_space_timeout_obeys_the_timeout_and_keeps_the_timeline(monkeypatch):
    dev = open_dev(monkeypatch, "pm4", "async", timeout_ms=200, AMDQ_RING_BYTES=4096)
    try:
        ring_space_timeout_keeps_the_timeline(dev)
    finally:
        dev.close()


def test_host_calls_do_not_wait_for_a_spinning_kernel(monkeypatch):
    """While a kernel spins, allocation, upload, load and close go on (they get the GPU between slices)."""
    dev = open_dev(monkeypatch, "pm4", "async", timeout_ms=60_000)
    b = Bench(dev)
    b.prg["spin"](b.flag, b.out, grid=4, block=64)
    time.sleep(0.2)
    t = time.monotonic()
    bufs = [dev.alloc(1 << 20) for _ in range(5)] + [dev.upload(np.ones(1000, np.float32))]
    dev.load(compile_cl(SRC.replace("put", "put2"), dev.arch).read_bytes())
    busy = time.monotonic() - t
    t = time.monotonic()
    dev.close()
    closing = time.monotonic() - t
    print(f"alloc/upload/load while spinning: {busy * 1000:.0f} ms, close: {closing * 1000:.0f} ms")
    assert busy < 10 and closing < 10 and bufs                  # liveness bounds, not performance
    with pytest.raises(DeviceClosed):
        b.prg["put"](b.out, 1, grid=1, block=64)


@pytest.mark.parametrize("queue", ["pm4", "aql"])
def test_threads_share_a_device(monkeypatch, queue):
    """4 threads x 1,000 launches on one device: every launch runs exactly once, no packet is torn."""
    dev = open_dev(monkeypatch, queue, "async", timeout_ms=30_000)
    try:
        b = Bench(dev)
        outs = [dev.upload(np.zeros(64, np.int32)) for _ in range(4)]
        errors = []

        def work(i: int) -> None:
            try:
                k = b.prg["add"]
                for n in range(1000):
                    k(outs[i], i + 1, grid=1, block=64, wait=n % 250 == 249)
                dev.synchronize()
            except Exception as e:                          # noqa: BLE001  reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        for i, o in enumerate(outs):
            assert (o.numpy(np.int32) == 1000 * (i + 1)).all()
        b.check()
    finally:
        dev.close()


@pytest.mark.parametrize("queue,mode", MODES)
def test_bound_resubmit_after_a_recovered_hang(monkeypatch, queue, mode):
    """A launch bound before a hang: its submission lost in the hang fails (wait, done, error) with the hang's
    GPUTimeout, and after the queue's reset the same bound launch runs again, in timeline order with fresh
    launches."""
    dev = open_dev(monkeypatch, queue, mode)
    try:
        b = Bench(dev)
        out = dev.upload(np.zeros(64, np.int32))
        add = b.prg["add"].bind(out, 1, grid=1, block=64)
        add.submit().wait()
        dev.sim.inject("hang_cp")
        lost = add.submit()
        with pytest.raises(GPUTimeout) as e:
            lost.wait()
        assert lost.done and lost.error is e.value and lost.record is not None
        with pytest.raises(GPUTimeout) as again:
            lost.wait()                                  # every wait raises the same error
        assert again.value is e.value
        dev.sim.clear("hang_cp")
        hs = [add.submit() for _ in range(3)]
        f = b.prg["add"](out, 10, grid=1, block=64)
        hs.append(add.submit())
        vals = [h.value for h in hs[:3]] + [f.value, hs[3].value]
        assert vals == sorted(vals) and len(set(vals)) == 5 and vals[0] > lost.value
        for h in hs:
            rec = h.wait()
            assert h.error is None and rec.kernel == "add" and rec.submit >= 0
        assert (out.numpy(np.int32) == 1 + 4 + 10).all()   # the lost submission never ran
        b.check()
    finally:
        dev.close()


@pytest.mark.parametrize("queue", ["pm4", "aql"])
def test_bound_resubmits_from_two_threads(monkeypatch, queue):
    """Two threads resubmit their own bound launches (and a third launches afresh) on one device: every
    submission gets its own timeline value, each thread's values increase, and every one runs exactly once."""
    dev = open_dev(monkeypatch, queue, "async", timeout_ms=30_000)
    try:
        b = Bench(dev)
        outs = [dev.upload(np.zeros(64, np.int32)) for _ in range(3)]
        bound = [b.prg["add"].bind(outs[i], i + 1, grid=1, block=64) for i in range(2)]
        values: list[list[int]] = [[], [], []]
        errors = []

        def work(i: int) -> None:
            try:
                for n in range(600):
                    h = bound[i].submit() if i < 2 else b.prg["add"](outs[2], 3, grid=1, block=64)
                    values[i].append(h.value)
                    if n % 200 == 199:
                        h.wait()
            except Exception as e:                          # noqa: BLE001  reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        dev.synchronize()
        for v in values:
            assert v == sorted(v) and len(v) == 600
        every = [x for v in values for x in v]
        assert len(set(every)) == len(every)              # no value handed out twice
        for i, o in enumerate(outs):
            assert (o.numpy(np.int32) == 600 * (i + 1)).all()
        b.check()
    finally:
        dev.close()


@pytest.mark.parametrize("queue", ["pm4", "aql"])
def test_bound_resubmit_waits_for_a_copy(monkeypatch, queue):
    """A bound launch submitted right after a copy on the copy queue sees the copy's data (the ordering hook of
    the compute timeline queues the GPU-side wait first), and a copy after it sees its result."""
    dev = open_dev(monkeypatch, queue, "async", timeout_ms=30_000)
    try:
        b = Bench(dev)
        out = dev.upload(np.zeros(64, np.int32))
        add = b.prg["add"].bind(out, 1, grid=1, block=64)
        add.submit().wait()
        for n in range(1, 6):
            src = dev.upload(np.full(64, 100 * n, np.int32))
            dev.copy(out, src, 256)                        # not waited for
            add.submit()
            dst = dev.alloc(256)
            dev.copy(dst, out, 256)
            dev.synchronize()
            assert (dst.numpy(np.int32) == 100 * n + 1).all(), n
    finally:
        dev.close()


@pytest.mark.parametrize("queue", ["pm4", "aql"])
def test_launches_across_the_end_of_the_kernel_argument_ring(monkeypatch, queue):
    """A fresh launch whose kernel arguments do not fit before the end of the kernel-argument ring starts it
    over (after the GPU finished what it held); launches on both sides of the turn are right."""
    dev = open_dev(monkeypatch, queue, "sync", timeout_ms=30_000)
    try:
        b = Bench(dev)
        outs = [dev.upload(np.zeros(64, np.int32)) for _ in range(4)]
        kv = dev.kernargs
        kv.head = kv.size - 64                              # one 64-byte block left: no launch fits
        hs = [b.prg["add"](outs[i], i + 1, grid=1, block=64) for i in range(4)]
        assert kv.head < kv.size // 2                       # it started over
        for h in hs:
            h.wait()
        for i, o in enumerate(outs):
            assert (o.numpy(np.int32) == i + 1).all()
        b.check()
    finally:
        dev.close()


def test_a_killed_process_leaves_the_next_one_working(tmp_path):
    code = compile_cl(SRC, "gfx1100")
    script = tmp_path / "child.py"
    script.write_text(f"""
import numpy as np, amdq, sys
dev = amdq.open_device("SIMKFD+AMD:gfx1100")
prg = dev.load(open({str(code)!r}, "rb").read())
out = dev.upload(np.zeros(64, np.int32))
print("running", flush=True)
while True:
    prg["add"](out, 1, grid=1, block=64)
""")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(amdq.__file__).parents[1])})
    assert p.stdout.readline().strip() == "running"
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert p.returncode == -signal.SIGKILL
    dev = amdq.open_device("SIMKFD+AMD:gfx1100")
    try:
        Bench(dev).check()
    finally:
        dev.close()


# -- bad input gets its named error -------------------------------------------------------------
def test_bad_input_gets_named_errors(monkeypatch):
    dev = open_dev(monkeypatch, "pm4", "sync")
    other = open_dev(monkeypatch, "pm4", "sync")
    try:
        b = Bench(dev)
        put = b.prg["put"]
        freed = dev.alloc(256)
        freed.free()
        with pytest.raises(InvalidArgument, match="freed buffer"):
            put(freed, 1, grid=1, block=64)
        with pytest.raises(InvalidArgument, match="freed buffer"):
            freed.read()
        with pytest.raises(InvalidArgument, match="freed buffer"):
            freed.write(b"x")
        with pytest.raises(InvalidArgument, match="freed buffer"):
            dev.copy(b.out, freed, 4)
        foreign = other.alloc(256)
        with pytest.raises(InvalidArgument, match="belongs to"):
            put(foreign, 1, grid=1, block=64)
        with pytest.raises(InvalidArgument, match="belongs to"):
            dev.copy(b.out, foreign, 4)
        with pytest.raises(InvalidArgument, match="memory kind 'hbm'"):
            dev.alloc(64, kind="hbm")
        with pytest.raises(InvalidArgument, match="object"):
            dev.upload(np.array([object(), 1], dtype=object))
        put(b.out, 9, grid=np.int64(1), block=(np.int32(64),), wait=True)       # numpy integers are integers
        assert (b.out.numpy(np.int32) == 9).all()
        b.check()
        other.close()
        for call in (lambda: other.alloc(64), lambda: other.upload(np.zeros(4)), lambda: foreign.read(),
                     lambda: other.load(compile_cl(SRC, other.arch).read_bytes())):
            with pytest.raises(DeviceClosed):
                call()
    finally:
        dev.close()
        other.close()


def test_injection_from_the_environment(tmp_path):
    """AMDQ_SIM_INJECT rehearses a failure in an unmodified program: the CP hangs at its 4th packet (in the first launch)."""
    code = compile_cl(SRC, "gfx1100")
    script = tmp_path / "prog.py"
    script.write_text(f"""
import numpy as np, amdq
dev = amdq.open_device("SIMKFD+AMD:gfx1100")
prg = dev.load(open({str(code)!r}, "rb").read())
out = dev.upload(np.zeros(64, np.int32))
for n in range(3):
    try:
        prg["put"](out, n, grid=1, block=64, wait=True)
        print("ok", int(out.numpy(np.int32)[0]))
    except amdq.errors.GPUTimeout as e:
        print("timeout", "compute queue" in str(e))
""")
    env = {**os.environ, "PYTHONPATH": str(Path(amdq.__file__).parents[1]), "AMDQ_SIM_INJECT": "hang_cp:after=3",
           "AMDQ_WAIT_TIMEOUT_MS": "200", "AMD_AQL": "0"}
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[:3] == ["timeout True", "ok 1", "ok 2"], r.stdout
    bad = subprocess.run([sys.executable, str(script)], env={**env, "AMDQ_SIM_INJECT": "hang_everything"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown fault injection 'hang_everything'" in bad.stderr
