"""No leaks: programs can be freed (and the program cache frees what it evicts), the simulated process's
address space is reused, and an out-of-memory leaves the device as it was."""
from __future__ import annotations

import errno
import gc
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.codeobj import cache as cocache
from amdq.errors import InvalidArgument, OutOfMemory
from amdq.sim.kfd import AddressSpace

VADD = (Path(amdq.__file__).parent / "examples" / "vadd.ll").read_text()
PAGE = 4096


@pytest.fixture(scope="module")
def vadd_co() -> bytes:
    return amdq.compile(VADD, arch="gfx1100")


def variant(co: bytes, i: int) -> bytes:
    """A distinct code object (another sha256) with the same contents: bytes after the ELF's last section."""
    return co + i.to_bytes(8, "little")


@pytest.fixture
def dev():
    d = amdq.open_device("SIMKFD+AMD:gfx1100")
    yield d
    d.close()


@pytest.fixture
def small_cache(monkeypatch):
    monkeypatch.setattr(cocache.programs, "capacity", 8)
    return 8


def state(d) -> dict:
    """Everything an allocation could leak into: allocator (live bytes less the SDMA queue's bounded upload
    staging), simulated VA space, VRAM/system memory, BOs."""
    d._reclaim()
    seam = d.iface.seam
    staged = d.copyq._staged_bytes if d.copyq is not None else 0    # upload staging, recycled lazily
    return {"live": d.allocator.live - staged, "staged": staged, "cached": d.allocator.cached, "va_used": seam.address_space.used,
            "va_free": list(seam.address_space.free_ranges), "vram": d.sim.vram.used, "sysmem": d.sim.sysmem.used,
            "bos": len(seam.bos)}


def check_vadd(d, k, n: int = 256, s: float = 2.5) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ba, bb, bc = d.upload(a), d.upload(b), d.alloc(4 * n)
    k(ba, bb, bc, s, n, grid=n // 64, block=64, wait=True)
    np.testing.assert_allclose(bc.numpy(np.float32), np.float32(s) * b + a, rtol=1e-6, atol=1e-6)


# -- programs ------------------------------------------------------------------------------------------
def test_freed_program_refuses_launches_and_other_handles_keep_working(dev, vadd_co):
    p1, p2 = dev.load(vadd_co), dev.load(vadd_co)
    assert p1 is not p2 and p1.code is p2.code               # two handles on one upload
    k1, k2 = p1["vadd"], p2["vadd"]
    check_vadd(dev, k1)
    p1.free()
    p1.free()                                                # idempotent
    assert p1.freed and not p2.freed and p1.alloc is None
    with pytest.raises(InvalidArgument, match="was freed"):
        check_vadd(dev, k1)
    check_vadd(dev, k2)                                      # the other handle still owns the code


def test_code_memory_outlives_the_gpu_work_that_uses_it(monkeypatch, vadd_co):
    monkeypatch.setenv("AMDQ_SIM_MODE", "sync")
    d = amdq.open_device("SIM:gfx1100")
    try:
        cocache.programs.purge(lambda k: True)
        p = d.load(variant(vadd_co, 1))
        n, s = 64, 3.0
        a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
        ba, bb, bc = d.upload(a), d.upload(b), d.alloc(4 * n)
        d.synchronize()
        d.sim.defer = True                                   # doorbells only record: the GPU has not started
        p["vadd"](ba, bb, bc, s, n, grid=1, block=64)
        live, size = d.allocator.live, p.code.alloc.size
        p.free()
        cocache.programs.purge(lambda k: True)               # no owner left but the queued launch
        assert d.allocator.live == live and d._pending_free   # not freed while the GPU may still run it
        q = d.load(variant(vadd_co, 2))                       # same size: would reuse freed code memory
        assert q.base != p.base and d.allocator.live == live + size
        d.sim.defer = False
        d.synchronize()
        np.testing.assert_array_equal(bc.numpy(np.float32), a + s * b)
        assert d.allocator.live == live and not d._pending_free      # freed once the launch completed
    finally:
        d.close()


def test_load_free_cycles_do_not_grow(dev, vadd_co, small_cache):
    """1,000 load/free cycles, distinct and identical code objects, with launches in between: after the
    program cache filled up, live bytes, VRAM use and VA space stay exactly the same."""
    cocache.programs.purge(lambda k: True)
    base = state(dev)
    seen = []
    for i in range(1000):
        p = dev.load(variant(vadd_co, i) if i % 2 else vadd_co)
        if i % 100 == 99:
            check_vadd(dev, p["vadd"])
        p.free()
        if i % 100 == 99:
            s = state(dev)
            seen.append((s["live"], s["vram"], s["va_used"], s["bos"]))
    assert len(set(seen)) == 1, seen
    code = PAGE * -(-len(vadd_co) // PAGE)
    assert seen[0][0] - base["live"] <= small_cache * code   # what the cache keeps, no more
    assert len(cocache.programs) == small_cache


def test_eviction_frees_unless_a_handle_holds_it(dev, vadd_co, small_cache):
    cocache.programs.purge(lambda k: True)
    base = state(dev)["live"]
    held = dev.load(variant(vadd_co, 10_000))
    k = held["vadd"]
    for i in range(400):                                     # handles dropped, not freed: collected
        dev.load(variant(vadd_co, i))
    gc.collect()
    size = held.code.alloc.size
    assert held.code.refs == 1 and not held.freed            # evicted long ago; the handle still owns it
    assert state(dev)["live"] == base + (small_cache + 1) * size
    check_vadd(dev, k)
    held.free()
    assert state(dev)["live"] == base + small_cache * size
    cocache.programs.purge(lambda k: True)                   # eviction of the rest frees them
    assert state(dev)["live"] == base


def test_close_gives_back_programs_and_device_memory(vadd_co):
    d = amdq.open_device("SIM:gfx1100")
    seam, sim = d.iface.seam, d.sim
    held = d.load(vadd_co)
    check_vadd(d, held["vadd"])
    d.load(variant(vadd_co, 7)).free()                      # only the program cache holds this one
    d.alloc(1 << 20).free()
    d.close()
    assert held.freed and d.allocator.live == 0 and d.allocator.cached == 0
    # nothing left but the root page directory (the driver's, allocated with the VM)
    assert not seam.bos and not seam.events and not seam.fds
    assert sim.vram.used == PAGE and sim.sysmem.used == 0
    assert seam.address_space.used == 0
    held.free()


# -- the simulated process's address space -------------------------------------------------------------
def test_address_space_reuses_merges_and_refuses():
    va = AddressSpace(1 << 32, 1 << 40)
    total = va.high - va.low
    a = [va.reserve(PAGE) for _ in range(4)] + [va.reserve(3 << 21)]
    assert len(set(a)) == 5 and all(x % (1 << 21) == 0 and va.low <= x < va.high for x in a)
    for x in (a[1], a[3], a[2], a[0], a[4]):
        assert va.release(x)
    assert va.free_ranges == [(va.low, va.high)] and va.used == 0
    assert not va.release(a[0])                              # not a reservation any more
    assert va.reserve(PAGE) == a[0]                          # the same top-down address again
    with pytest.raises(OSError) as e:
        va.reserve(total)
    assert e.value.errno == errno.ENOMEM
    for _ in range(1000):                                    # 1,000 TiB through a 1 TiB space
        x = va.reserve(total - (2 << 21))
        va.release(x)


def test_process_address_space_is_the_user_va_limit(dev):
    space = dev.iface.seam.address_space
    assert space.high <= 1 << 47
    with pytest.raises(OutOfMemory, match="virtual address space"):
        dev.alloc(1 << 47)                                   # more than user space: ENOMEM from mmap
    bufs = [dev.alloc(PAGE) for _ in range(8)]
    assert all(b.addr + b.size <= 1 << 47 for b in bufs)


def test_failed_allocations_do_not_use_up_address_space(dev, vadd_co):
    """Each failed 1 TiB allocation reserved 1 TiB of VA first: 200 of them exceed the 128 TiB of user space."""
    before = state(dev)
    for _ in range(200):
        with pytest.raises(OutOfMemory):
            dev.alloc(1 << 40)
    assert state(dev) == before
    check_vadd(dev, dev.load(vadd_co)["vadd"])


def test_alloc_free_cycles_reuse_va(dev):
    big = dev.allocator.cache_bytes + (1 << 20)              # too big for the allocator's cache: really freed
    dev.alloc(big).free()
    before = state(dev)
    addrs = set()
    for _ in range(50):
        b = dev.alloc(big)
        addrs.add(b.addr)
        b.free()
        dev._reclaim()
    assert state(dev) == before and len(addrs) == 1


# -- out of memory ---------------------------------------------------------------------------------------
def _busy_device(d) -> list:
    """Some live buffers and some freed ones in the allocator's cache."""
    keep = [d.alloc(1 << 20) for _ in range(3)]
    for _ in range(2):
        d.alloc(3 << 20).free()
    d._reclaim()
    assert d.allocator.cached_bytes("vram") > 0
    return keep


@pytest.mark.parametrize("how", ["1 TiB", "above free VRAM and cache"])
def test_out_of_memory_leaves_the_device_exactly_as_it_was(dev, vadd_co, how):
    keep = _busy_device(dev)
    before = state(dev)
    avail = dev.iface.available("vram")
    size = 1 << 40 if how == "1 TiB" else avail + dev.allocator.cached_bytes("vram") + PAGE
    with pytest.raises(OutOfMemory, match=rf"{size} bytes of vram memory \({avail} bytes available"):
        dev.alloc(size)
    assert state(dev) == before                              # cached bytes too: trimming could not help
    check_vadd(dev, dev.load(vadd_co)["vadd"])
    keep[0].write(np.arange(16, dtype=np.uint32))
    assert (keep[0].numpy(np.uint32)[:16] == np.arange(16)).all()


def test_allocation_that_fits_after_trimming_the_cache(dev):
    keep = _busy_device(dev)
    cached = dev.allocator.cached_bytes("vram")
    size = dev.iface.available("vram") + cached - (1 << 20)   # fits only once the cache is given back
    live = dev.allocator.live
    b = dev.alloc(size)
    assert dev.allocator.cached_bytes("vram") == 0 and dev.allocator.live == live + size
    b.free()
    assert keep[0].read(4) == bytes(4)


@pytest.mark.parametrize("where", ["MAP_MEMORY_TO_GPU", "CPU mmap"])
def test_failure_after_alloc_frees_the_buffer(dev, monkeypatch, where):
    seam = dev.iface.seam
    before = state(dev)
    if where == "MAP_MEMORY_TO_GPU":
        def refuse(a):
            raise OSError(errno.ENOMEM, "no room in the page tables")
        monkeypatch.setattr(seam, "_map_memory_to_gpu", refuse)
    else:
        real = seam.mmap

        def refuse(addr, size, prot, flags, fd=-1, offset=0):
            if fd != -1:
                raise OSError(errno.EINVAL, "mmap of the buffer refused")
            return real(addr, size, prot, flags, fd, offset)
        monkeypatch.setattr(seam, "mmap", refuse)
    with pytest.raises(OutOfMemory, match=r"\d+ bytes"):
        dev.alloc(1 << 20, "gtt")
    monkeypatch.undo()
    assert state(dev) == before
    b = dev.alloc(1 << 20, "gtt")
    b.write(b"\x01" * 16)
    assert b.read(16) == b"\x01" * 16


def test_bound_launches_and_graphs_of_a_freed_program_refuse(vadd_co, monkeypatch):
    for aql in ("0", "1"):
        monkeypatch.setenv("AMD_AQL", aql)
        d = amdq.open_device("SIM:gfx1100")
        try:
            prg = d.load(variant(vadd_co, 11))
            k = prg["vadd"]
            a, b, c = (d.upload(np.ones(64, np.float32)) for _ in range(3))
            bound = k.bind(a, b, c, 1.0, 64, grid=1, block=64)
            with d.capture() as g:
                k(a, b, c, 1.0, 64, grid=1, block=64)
            prg.free()
            with pytest.raises(amdq.errors.InvalidArgument, match="freed"):
                bound.submit()
            with pytest.raises(amdq.errors.InvalidArgument, match="freed"):
                g.replay()
        finally:
            d.close()


def test_a_finalizer_never_waits_for_the_device_lock(dev):
    """A buffer dropped on a thread while another holds the device lock is queued for freeing at once (garbage
    collection runs finalizers on whatever thread allocates, the simulated GPU's worker among them, which a reset
    holding the device lock waits for: a finalizer taking the lock there would deadlock), and is freed later."""
    import threading
    box = [dev.alloc(1 << 16)]
    live = dev.allocator.live
    dropped = threading.Event()

    def drop():
        box.clear()                                          # the last reference: Buffer.__del__ runs here
        dropped.set()
    with dev.lock:
        t = threading.Thread(target=drop)
        t.start()
        assert dropped.wait(5), "a finalizer waited for the device lock"
    t.join()
    assert len(dev._pending_free) == 1
    dev.synchronize()
    assert not dev._pending_free and dev.allocator.live == live - (1 << 16)
