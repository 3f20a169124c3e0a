"""The SDMA copy queue end to end on the simulated GPU: packets (encoded by the runtime, decoded by the
engine), ring wrap with NOP padding, copy splitting, faults and hangs, the same copy workload with and
without SDMA, compute/copy pipelines ordered on the GPU in both simulator modes, timeline rollover."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.errors import GPUFault, GPUTimeout, InvalidPacket
from amdq.hw import sdma
from amdq.sim.sdma import SDMAQueue
from sims import DEVICES, device_id, open_sim

VADD = (Path(amdq.__file__).parent / "examples" / "vadd.ll").read_text()
_code: dict[str, bytes] = {}


def open_dev(monkeypatch, mode: str = "sync", arch: str = "gfx1100", **env) -> amdq.Device:
    monkeypatch.setenv("AMDQ_SIM_MODE", mode)
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    return amdq.open_device(f"SIM:{arch}")


def engine(dev) -> SDMAQueue:
    return next(e for e in dev.sim.engines.values() if isinstance(e, SDMAQueue))


def vadd(dev):
    if dev.arch not in _code:
        _code[dev.arch] = amdq.compile(VADD, arch=dev.arch)
    return dev.load(_code[dev.arch])["vadd"]


@pytest.fixture(params=DEVICES, ids=device_id)
def dev(request, monkeypatch, tmp_path):
    monkeypatch.setenv("AMDQ_SIM_MODE", "sync")
    d = open_sim(monkeypatch, tmp_path, *request.param)
    yield d
    d.close()


# -- packets --------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["gfx1100", "gfx1200", "gfx942"])
def test_every_packet_decodes_to_the_encoded_fields(monkeypatch, arch):
    d = open_dev(monkeypatch, arch=arch)
    q, eng = d.copyq, engine(d)
    assert q.t is eng.t and eng.t.version == (4 if arch == "gfx942" else 6)    # SDMA 7 uses the 6 layouts
    a, b = 0x7F12_3456_7000, 0x0000_7ABC_DEF0_1238
    cases = [
        (q.copy(a, b, 1000), "COPY_LINEAR", {"count": 999, "src_addr": b, "dst_addr": a}),
        (q.fence(a + 4, 0xDEADBEEF), "FENCE", {"addr": a + 4, "data": 0xDEADBEEF}),
        (q.trap(0x123456), "TRAP", {"int_context": 0x123456}),
        (q.poll(a, 0x8000_0001, mask=0xFFFF_FF00), "POLL_REGMEM",
         {"mem_poll": 1, "func": 5, "addr": a, "value": 0x8000_0001, "mask": 0xFFFF_FF00, "retry_count": 0xFFF}),
        (q.timestamp(a + 8), "TIMESTAMP_GET_GLOBAL", {"write_addr": a + 8}),
        (q.write(a, [1, 2, 0xFFFFFFFF]), "WRITE_UNTILED", {"dst_addr": a, "count": 2, "data": [1, 2, 0xFFFFFFFF]}),
        (q.fill(a, 0xA5A5_0001, 64), "CONSTANT_FILL", {"dst_addr": a, "src_data_31_0": 0xA5A5_0001, "fillsize": 2,
                                                       "count": 60}),
        (q.indirect(b & ~31, 77), "INDIRECT", {"ib_base": b & ~31, "ib_size": 77}),
        ([[0]], "NOP", {"count": 0}),
    ]
    for pkts, name, want in cases:
        assert len(pkts) == 1
        p = eng.t.decode(pkts[0], 0)
        assert (p.name, p.size) == (name, len(pkts[0]))
        assert {k: p.fields[k] for k in want} == want, name
    sig = q.signal(a, (5 << 32) | 7)
    assert [eng.t.decode(p).name for p in sig] == ["FENCE", "FENCE", "TRAP"]
    assert [eng.t.decode(p).fields.get("data") for p in sig[:2]] == [7, 5]
    w = q.wait_packets(a, (5 << 32) | 7)
    assert [(eng.t.decode(p).fields["addr"], eng.t.decode(p).fields["value"]) for p in w] == [(a + 4, 5), (a, 7)]
    d.close()


def test_every_packet_runs(dev):
    q = dev.copyq
    buf = dev.alloc(1 << 16, "gtt")                    # host-visible, to look at what the engine wrote
    mv = np.frombuffer(buf.alloc.cpu.mv, np.uint8)
    a = buf.addr
    mv[:] = 0
    mv[0x100:0x200] = np.arange(256, dtype=np.uint8)
    ib = dev.alloc(4096, "gtt")
    ibw = q.write(a + 0x3000, [11, 22, 33]) + q.copy(a + 0x3100, a + 0x100, 5)
    flat = [x for p in ibw for x in p]
    np.frombuffer(ib.alloc.cpu.mv, np.uint32)[:len(flat)] = flat
    t0 = dev.sim.clock()
    q.run(q.copy(a + 0x1003, a + 0x100, 200) + q.fill(a + 0x2000, 0x04030201, 64) + q.write(a + 0x2800, [7, 8, 9])
          + q.fence(a + 0x2900, 0xCAFEF00D) + q.timestamp(a + 0x2A00) + q.indirect(ib.addr, len(flat))
          + [[0], [0]])
    dev.synchronize()
    t1 = dev.sim.clock()
    assert (mv[0x1003:0x1003 + 200] == np.arange(200)).all() and mv[0x1002] == 0 and mv[0x1003 + 200] == 0
    assert (mv[0x2000:0x2040] == np.tile([1, 2, 3, 4], 16)).all() and mv[0x2040] == 0
    assert list(mv[0x2800:0x280C].view(np.uint32)) == [7, 8, 9]
    assert mv[0x2900:0x2904].view(np.uint32)[0] == 0xCAFEF00D
    assert t0 <= int(mv[0x2A00:0x2A08].view(np.uint64)[0]) <= t1
    assert list(mv[0x3000:0x300C].view(np.uint32)) == [11, 22, 33] and (mv[0x3100:0x3105] == np.arange(5)).all()
    eng = engine(dev)
    assert eng.rptr == q.wptr == q.rptr and eng.fault is None


def test_trap_signals_the_kfd_event(dev):
    q = dev.copyq
    dev.iface.wait_events(0)                           # consume anything pending
    q.submit(q.trap())
    dev.sim.wait_idle()
    t = time.monotonic()
    assert dev.iface.wait_events(2000) is None and time.monotonic() - t < 1.0


def test_poll_blocks_until_the_value_and_compares_64_bits(dev):
    q = dev.copyq
    word = dev.alloc(4096, "gtt")
    m = word.alloc.cpu
    m.write64(0, 0xFFFF_FFFF)                          # low word above the target's low word, high word below
    v = q.run(q.wait_packets(word.addr, (1 << 32) | 2) + q.fence(word.addr + 64, 1))
    for now in (0xFFFF_FFFF, (1 << 32) | 1):
        m.write64(0, now)
        dev.sim.pump()
        time.sleep(0.01)
        assert m.read32(64) == 0 and q.timeline.completed < v and "POLL_REGMEM" in q.describe()["stuck"]
    m.write64(0, (1 << 32) | 2)
    dev.wait(v, queue=q)
    assert m.read32(64) == 1


# -- the ring -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ring_wrap_with_mixed_packet_sizes(monkeypatch, mode):
    d = open_dev(monkeypatch, mode, AMDQ_SDMA_RING_BYTES=4096)      # 1024 dwords (rings are whole pages)
    q = d.copyq
    assert q.ring_dw == 1024
    buf = d.alloc(1 << 16, "gtt")
    mv = np.frombuffer(buf.alloc.cpu.mv, np.uint32)
    rng = np.random.default_rng(1)
    want = np.zeros_like(mv)
    pads = 0
    for i in range(600):
        n = int(rng.integers(1, 100))                  # WRITE of 5..104 dwords, then a 3-packet signal
        data = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        at = int(rng.integers(0, len(mv) - n))
        before = q.wptr
        q.run(q.write(buf.addr + 4 * at, data))
        want[at:at + n] = data
        pads += (q.wptr - before) // 4 > n + 4 + 10     # grew by more than the packets: a NOP-filled tail
    d.synchronize()
    assert (mv == want).all()
    assert q.wptr > 20 * 4096 and pads > 10 and engine(d).fault is None
    d.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_copy_in_one_ring_write_is_the_general_encoding(monkeypatch, mode):
    """copy_run writes a one-packet copy and its signal as one write of the words run(copy()) writes (the engine
    decodes the same packets), takes the general path at the ring's end (NOP padding) and for split copies, and the
    bytes arrive either way."""
    d = open_dev(monkeypatch, mode, AMDQ_SDMA_RING_BYTES=4096)
    q = d.copyq
    src = d.upload(np.arange(1 << 14, dtype=np.uint32))
    dst = d.alloc(1 << 16)
    d.synchronize()
    d.sim.defer = True                                  # nothing consumed: the ring keeps what was written
    w = q.wptr
    v = q.copy_run(dst.addr, src.addr, 4096)
    fast = q.ring[(w >> 2) % q.ring_dw:][:(q.wptr - w) >> 2].copy()
    want = np.array(sum(q.copy(dst.addr, src.addr, 4096) + q.signal(q.timeline.addr, v), []), np.uint32)
    assert (fast == want).all()
    d.sim.defer = False
    d.synchronize()
    rng = np.random.default_rng(2)
    got, want = d.alloc(1 << 16), np.zeros(1 << 16, np.uint8)
    got.write(bytes(1 << 16))
    data = np.frombuffer(src.read(), np.uint8)
    for i in range(300):                               # the ring wraps a few times; some copies are split
        n, at = 4 * int(rng.integers(1, 1 << 10)), 4 * int(rng.integers(0, 1 << 12))
        q.max_copy = 1 << 20 if i % 7 else 1024
        q.copy_run(got.addr + at, src.addr + at, n)
        want[at:at + n] = data[at:at + n]
    d.synchronize()
    assert np.array_equal(np.frombuffer(got.read(), np.uint8), want)
    assert q.wptr > 4 * 4096 and engine(d).fault is None
    d.close()


def test_submission_waits_for_ring_space_with_a_timeout(monkeypatch):
    d = open_dev(monkeypatch, AMDQ_SDMA_RING_BYTES=1 << 16)         # a small ring: it fills in a few thousand
    q = d.copyq
    b = d.alloc(4096, "gtt")
    d.sim.inject("hang_sdma")
    monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", "300")          # the ring-space wait obeys the wait timeout
    t = time.monotonic()
    with pytest.raises(GPUTimeout, match=r"no ring space.*COPY_LINEAR"):
        for _ in range(q.ring_dw // 7 + 1):
            q.submit(q.copy(b.addr, b.addr + 8, 8))
    assert time.monotonic() - t < 3
    d.sim.clear("hang_sdma")
    d.close()


def test_copy_is_split_at_the_max_copy_size(dev):
    q = dev.copyq
    q.max_copy = 4096                                     # the real limit is 1 GiB (SDMA 5+) or 4 MiB (SDMA 4)
    pk = q.copy(0x10000, 0x20000, 3 * 4096 + 123)
    f = [sdma.decode(p, 0, q.version).fields for p in pk]
    assert [x["count"] + 1 for x in f] == [4096] * 3 + [123]
    assert [x["src_addr"] for x in f] == [0x20000 + 4096 * i for i in range(4)]
    data = np.random.default_rng(2).integers(0, 256, 50_001, dtype=np.uint8)
    a, b = dev.upload(data), dev.alloc(50_001)
    eng = engine(dev)
    n0 = eng.packets
    dev.copy(b, a, 50_001 - 9, 4, 9)
    assert bytes(b.read(50_001 - 9, 4)) == data[9:].tobytes()
    assert eng.packets - n0 >= 13 + 13                     # the copy alone was 13 packets (plus 13 staged ones)
    assert dev.target.sdma_max_copy == (0x3FFFE0 if dev.target.gfx_version == 9 else 0x3FFFFFE0)   # SDMA 4 / 5+


# -- faults and hangs -----------------------------------------------------------------------------
def test_sdma_page_fault_names_the_address(monkeypatch):
    d = open_dev(monkeypatch, "async")
    src = d.upload(np.arange(64, dtype=np.uint8))
    bad = 0x7A00_0000_1230
    d.copyq.copy_async(bad, src.addr, 64)
    with pytest.raises(GPUFault) as e:
        d.synchronize(timeout_ms=3000)
    assert e.value.address == bad and f"{bad:#x}" in str(e.value) and "sdma" in str(e.value)
    r = e.value.info["record"]                              # the hardware record the engine wrote
    assert r.va == bad and r.write and r.client == "SDMA" and "write" in str(e.value)
    assert (d.upload(np.arange(8, dtype=np.uint8)).numpy(np.uint8) == np.arange(8)).all()   # recovered
    d.close()


def test_hung_sdma_times_out_naming_the_packet(monkeypatch):
    d = open_dev(monkeypatch, "async")
    b = d.alloc(4096)
    d.sim.inject("hang_sdma")
    b.write(b"x" * 100)
    with pytest.raises(GPUTimeout, match=r"sdma queue.*COPY_LINEAR\(.*count=0x63"):
        d.synchronize(timeout_ms=300)
    with pytest.raises(GPUTimeout):                         # the lost upload stays failed for its waiters
        d.synchronize(timeout_ms=300)
    b.write(b"y" * 100)                                     # the reset queue runs (the injected hang is gone)
    assert b.read(100) == b"y" * 100
    d.close()


def test_bad_packet_stops_the_queue(dev, monkeypatch):
    q = dev.copyq
    q.submit([[0xFF]])
    v = q.run([])
    monkeypatch.setenv("AMDQ_WAIT_TIMEOUT_MS", "300")
    with pytest.raises(InvalidPacket, match=r"sdma queue.*stopped at ring byte 0: bad SDMA packet.*unknown op 255") as e:
        dev.wait(v, queue=q)
    assert e.value.info["record"].where == "ring byte 0"
    assert dev.upload(np.arange(4, dtype=np.int32)).numpy(np.int32).tolist() == [0, 1, 2, 3]    # recovered


# -- the same copies with and without SDMA --------------------------------------------------------
SIZES = [1, 3, 4, 4095, 4097, (1 << 20) + 13, (40 << 20) + 5]


def workload(d) -> list[bytes]:
    """Host->device, device->host and device->device copies of every size at unaligned offsets."""
    out = []
    rng = np.random.default_rng(3)
    for n in SIZES:
        data = rng.integers(0, 256, n + 64, dtype=np.uint8)
        a, b = d.alloc(n + 64), d.alloc(n + 64)
        a.write(data)
        a.write(data[:n][::-1].copy(), offset=7)           # partial overwrite at an odd offset, queued behind
        d.copy(b, a, n, dst_offset=5, src_offset=3)
        b.write(b"\xEE", offset=0)
        out += [a.read(n, 1), b.read(), b.read(n // 2 + 1, 5)]
    return out


def expected() -> list[bytes]:
    out = []
    rng = np.random.default_rng(3)
    for n in SIZES:
        data = rng.integers(0, 256, n + 64, dtype=np.uint8)
        a = data.copy()
        a[7:7 + n] = data[:n][::-1]
        b = np.zeros(n + 64, np.uint8)
        b[5:5 + n] = a[3:3 + n]
        b[0] = 0xEE
        out += [a[1:1 + n].tobytes(), None, b[5:5 + n // 2 + 1].tobytes()]
    return out


def test_same_copies_with_and_without_sdma(monkeypatch):
    with_sdma = open_dev(monkeypatch, "async")
    assert with_sdma.copyq is not None and with_sdma.alloc(8).alloc.cpu is None
    got = workload(with_sdma)
    with_sdma.close()
    monkeypatch.setenv("AMD_DISABLE_SDMA", "1")
    without = open_dev(monkeypatch, "async")
    assert without.copyq is None and len(without.queues) == 1 and without.alloc(8).alloc.cpu is not None
    ref = workload(without)
    without.close()
    assert len(got) == len(ref) and all(g == r for g, r in zip(got, ref))
    for g, e in zip(got, expected()):
        if e is not None:
            assert g == e


@pytest.mark.parametrize("err", ["EBUSY", "ENOMEM"])
def test_queue_creation_failure_falls_back_to_the_cpu(monkeypatch, err):
    import errno

    import amdq.sim.queues as Q
    from amdq.hw import kfd as K
    real = Q.make_queue

    def refuse(gpu, vmid, qtype, args):
        if qtype != K.KFD_IOC_QUEUE_TYPE_SDMA:
            return real(gpu, vmid, qtype, args)
        raise OSError(getattr(errno, err), "no SDMA queue for you")
    monkeypatch.setattr(Q, "make_queue", refuse)
    d = open_dev(monkeypatch)
    assert d.copyq is None and d.queues == [d.queue]
    monkeypatch.setenv("AMD_DISABLE_SDMA", "1")
    ref = open_dev(monkeypatch)
    assert len(d.iface.seam.bos) == len(ref.iface.seam.bos)      # the refused queue's ring and pointers were freed
    ref.close()
    b = d.upload(np.arange(10, dtype=np.uint8))
    c = d.alloc(10)
    d.copy(c, b, 8, 2, 1)
    assert c.read(8, 2) == bytes(range(1, 9))
    d.close()


# -- compute and copy queues ordered on the GPU -----------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_upload_compute_download_without_host_sync(monkeypatch, mode):
    d = open_dev(monkeypatch, mode)
    k = vadd(d)
    n = 4096
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    A, B, C, D = d.upload(a), d.upload(b), d.alloc(4 * n), d.alloc(4 * n)
    d.sim.inject("hang_cp")                      # hold compute: the copy behind it must wait on the GPU
    k(A, B, C, 2.0, n, grid=n // 256, block=256)
    d.copy(D, C, 4 * n)
    end = time.monotonic() + 10
    while "POLL_REGMEM" not in d.copyq.describe().get("stuck", "") and time.monotonic() < end:
        d.sim.pump()                                    # (sync mode; the worker runs it in async mode)
        time.sleep(0.002)
    assert "POLL_REGMEM" in d.copyq.describe()["stuck"]
    time.sleep(0.02)
    assert d.copyq.timeline.completed < d.copyq.timeline.value and "POLL_REGMEM" in d.copyq.describe()["stuck"]
    d.sim.clear("hang_cp")
    for i in range(3):                                  # upload, compute, download: the host never waits between
        A.write(a + i)
        k(A, B, C, 2.0, n, grid=n // 256, block=256)
        d.copy(D, C, 4 * n)
        got = np.frombuffer(D.read(), np.float32)
        assert np.array_equal(got, np.float32(2.0) * b + (a + np.float32(i)))
    d.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pipeline_never_waits_on_the_host(monkeypatch, mode):
    d = open_dev(monkeypatch, mode)
    k = vadd(d)
    n = 1024
    x = np.arange(n, dtype=np.float32)
    A, B, C = d.upload(x), d.upload(np.ones(n, np.float32)), d.alloc(4 * n)
    host_waits = []
    real = d.wait
    monkeypatch.setattr(d, "wait", lambda v, t=None, queue=None: (host_waits.append(queue), real(v, t, queue))[1])
    for i in range(5):
        A.write(x * (i + 1))                            # SDMA (waits on the GPU for the previous kernel)
        k(A, B, C, 1.0, n, grid=n // 256, block=256)    # compute (waits on the GPU for the upload)
        d.copy(B, C, 4 * n)                             # SDMA (waits for the kernel): B = A + B
    assert host_waits == []
    want = 1 + sum(i + 1 for i in range(5)) * x
    assert np.array_equal(np.frombuffer(B.read(), np.float32), want.astype(np.float32))
    d.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("start", [(1 << 31) - 4, (1 << 32) - 4])
def test_timeline_rollover_across_queues(monkeypatch, mode, start):
    d = open_dev(monkeypatch, mode, AMDQ_TIMELINE_START=start)
    k = vadd(d)
    n = 256
    x = np.arange(n, dtype=np.float32)
    A, B, C = d.upload(x), d.upload(np.zeros(n, np.float32)), d.alloc(4 * n)
    for i in range(6):
        k(A, B, C, 1.0, n, grid=1, block=n)             # C = A + B
        d.copy(B, C, 4 * n)                             # B = C
        A.write(x + i)
    a, b = x.copy(), np.zeros(n, np.float32)
    for i in range(6):
        b = a + b
        a = x + i
    assert np.array_equal(np.frombuffer(B.read(), np.float32), b)
    for q in d.queues:
        assert q.timeline.completed == q.timeline.value > start + 4
    d.close()


def test_copies_through_physically_scattered_pages(monkeypatch):
    """A COPY_LINEAR over pages mapped out of order is one slice copy per run (no temporary unless the source and
    destination bytes overlap) and, overlapping within the same pages, behaves as memmove."""
    from amdq.hw import vm as VM
    monkeypatch.setenv("AMDQ_SIM_MODE", "sync")
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    kfd, gpu = d.iface.seam, d.sim
    pages = [gpu.vram.alloc(4096) for _ in range(8)]
    va = kfd.address_space.reserve(8 * 4096)
    flags = VM.pte(gpu.target.gfx_version, 0, writeable=True)
    with gpu.lock:
        for i, pa in enumerate(reversed(pages)):
            kfd._map_range(va + i * 4096, pa, 4096, flags)
        kfd.vm.invalidate()
    ref = np.random.default_rng(3).integers(0, 256, 8 * 4096, dtype=np.uint8)
    for i, pa in enumerate(reversed(pages)):
        gpu.vram.buf[pa:pa + 4096] = ref[i * 4096:(i + 1) * 4096]
    assert len(engine(d)._pieces(va, 8 * 4096, False)) == 8
    b = d.alloc(8 * 4096)
    d.copyq.copy_async(b.addr, va + 3, 8 * 4096 - 3)         # scattered -> contiguous
    d.synchronize()
    assert b.read(8 * 4096 - 3) == ref[3:].tobytes()
    d.copyq.copy_async(va + 100, va, 5 * 4096)              # overlapping, within the scattered pages
    d.synchronize()
    want = ref.copy()
    want[100:100 + 5 * 4096] = ref[:5 * 4096]
    d.copyq.copy_async(b.addr, va, 8 * 4096)
    d.synchronize()
    assert b.read() == want.tobytes()
    d.close()
