"""Memory instructions of the shader core (vmem.py, lds.py, memory.py) on small hand-built wave states:
encodings made with amdq.hw.isa, decoded, built and stepped; atomics against a sequential reference."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from amdq.errors import GPUFault, UnsupportedInstruction
from amdq.hw import isa
from amdq.hw.isa import decode
from amdq.sim.shader import vmem
from amdq.sim.shader.isa import for_isa
from amdq.sim.shader.memory import ATOMICS, FlatMemory, rmw

build = for_isa("rdna3").build
from amdq.sim.shader.wave import EXEC, M0, PRIVATE_APERTURE_HI, SHARED_APERTURE_HI, WaveState

OFF = 124           # SADDR "off" (NULL)
M32 = 0xFFFFFFFF


def ins(enc: str, name: str, **f):
    """Encode and decode one instruction; returns its step function."""
    op = isa.opnums(enc + "Op")[name.upper()]
    return build(decode.decode(isa.encodings()[enc].encode(op=op, **f), 0))


def wstate(waves: int = 2, lanes: int = 32, nv: int = 24, mem_bytes: int = 1 << 20, lds_bytes: int = 0,
           wpg: int = 1) -> WaveState:
    w = WaveState(waves, lanes, nv)
    w.s[EXEC] = M32
    if lanes == 64:
        w.s[EXEC + 1] = M32
    w.refresh_exec(slice(None))
    w.mem = FlatMemory(mem_bytes)
    w.wg = np.arange(waves) // wpg
    w.lds_size = lds_bytes
    w.lds = np.zeros(max(4, lds_bytes * (waves // wpg)), np.uint8)
    w.lds_base = w.wg * lds_bytes
    return w


def set_exec(w: WaveState, wave: int, mask: int) -> None:
    w.s[EXEC][wave] = mask
    w.refresh_exec(slice(None))


def setv64(w: WaveState, r: int, vals) -> None:
    v = np.asarray(vals, np.uint64)
    w.v[r] = (v & np.uint64(M32)).astype(np.uint32)
    w.v[r + 1] = (v >> np.uint64(32)).astype(np.uint32)


def sets64(w: WaveState, r: int, val: int) -> None:
    w.s[r], w.s[r + 1] = val & M32, val >> 32


# ---------------------------------------------------------------- GLOBAL

def test_global_dword_forms_and_exec():
    w = wstate()
    base = w.mem.alloc(4096)
    w.mem.write(base, np.arange(1024, dtype=np.uint32))
    sets64(w, 4, base)
    w.v[1] = np.arange(64, dtype=np.uint32).reshape(2, 32) * 4        # 32-bit offsets
    w.v[2] = 0xDEAD
    set_exec(w, 1, 0x0000FFFF)
    ins("GLOBAL", "global_load_b32", addr=1, saddr=4, vdst=2, offset=8)(w, slice(None))
    want = np.arange(64).reshape(2, 32) + 2
    assert (w.v[2][0] == want[0]).all()
    assert (w.v[2][1][:16] == want[1][:16]).all() and (w.v[2][1][16:] == 0xDEAD).all()
    # 64-bit VADDR form, negative offset, only wave 1 (index selection)
    setv64(w, 6, base + 400 + 4 * np.arange(64).reshape(2, 32))
    w.v[3] = 0
    ins("GLOBAL", "global_load_b32", addr=6, saddr=OFF, vdst=3, offset=-4)(w, np.array([1]))
    assert (w.v[3][0] == 0).all() and (w.v[3][1][:16] == np.arange(32, 48) + 99).all()
    # store: inactive lanes write nothing
    w.v[8] = 7
    ins("GLOBAL", "global_store_b32", addr=1, saddr=4, data=8)(w, slice(None))
    got = np.frombuffer(w.mem.read(base, 256), np.uint32)
    assert (got[:48] == 7).all() and (got[48:64] == np.arange(48, 64)).all()


def test_global_wide_and_subdword():
    w = wstate(1)
    base = w.mem.alloc(4096)
    raw = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    w.mem.write(base, raw)
    setv64(w, 0, base + 16 * np.arange(32))
    for name, n in (("global_load_b64", 2), ("global_load_b96", 3), ("global_load_b128", 4)):
        ins("GLOBAL", name, addr=0, saddr=OFF, vdst=4)(w, slice(None))
        want = raw[:512].view(np.uint32).reshape(32, 4)[:, :n]
        assert (w.v[4:4 + n, 0].T == want).all(), name
    setv64(w, 0, base + 0x7F + np.arange(32))                      # odd addresses, bytes 0x7f.. (signed wrap)
    cases = {"global_load_u8": lambda b: b,
             "global_load_i8": lambda b: b.astype(np.int8).astype(np.int32).view(np.uint32)}
    for name, f in cases.items():
        ins("GLOBAL", name, addr=0, saddr=OFF, vdst=8)(w, slice(None))
        assert (w.v[8, 0] == f(raw[0x7F:0x9F])).all(), name
    setv64(w, 0, base + 0xFE + 2 * np.arange(32))
    h = raw[0xFE:0x13E].view(np.uint16)
    ins("GLOBAL", "global_load_i16", addr=0, saddr=OFF, vdst=8)(w, slice(None))
    assert (w.v[8, 0] == h.astype(np.int16).astype(np.int32).view(np.uint32)).all()
    w.v[9] = 0xAAAABBBB
    ins("GLOBAL", "global_load_d16_b16", addr=0, saddr=OFF, vdst=9)(w, slice(None))
    assert (w.v[9, 0] == (0xAAAA0000 | h.astype(np.uint32))).all()
    ins("GLOBAL", "global_load_d16_hi_i8", addr=0, saddr=OFF, vdst=9)(w, slice(None))
    b = raw[0xFE:0x13E:2].astype(np.int8).astype(np.int32) & 0xFFFF
    assert (w.v[9, 0] == (b.astype(np.uint32) << 16 | h.astype(np.uint32))).all()
    # stores: b8, b16 at odd addresses, d16_hi
    dst = w.mem.alloc(256)
    w.v[10] = 0x11223344 + np.arange(32, dtype=np.uint32)
    setv64(w, 0, dst + 1 + 3 * np.arange(32))
    ins("GLOBAL", "global_store_b16", addr=0, saddr=OFF, data=10)(w, slice(None))
    ins("GLOBAL", "global_store_d16_hi_b8", addr=0, saddr=OFF, data=10, offset=2)(w, slice(None))
    m = np.frombuffer(w.mem.read(dst, 256), np.uint8)
    assert (m[1::3][:32] == (w.v[10, 0] & 0xFF)).all() and (m[2::3][:32] == (w.v[10, 0] >> 8 & 0xFF)).all()
    assert (m[3::3][:32] == 0x22).all()


def test_global_fault_names_address_and_inactive_lanes_touch_nothing():
    w = wstate(1)
    base = w.mem.alloc(128)
    setv64(w, 0, base + 4 * np.arange(32))
    w.v[0, 0, 31] = 0x1234                                          # lane 31 points at nothing
    set_exec(w, 0, 0x7FFFFFFF)
    ins("GLOBAL", "global_load_b32", addr=0, saddr=OFF, vdst=4)(w, slice(None))
    set_exec(w, 0, M32)
    with pytest.raises(GPUFault) as e:
        ins("GLOBAL", "global_load_b32", addr=0, saddr=OFF, vdst=4)(w, slice(None))
    bad = (base >> 32 << 32) | 0x1234
    assert e.value.address == bad and f"{bad:#x}" in str(e.value)
    with pytest.raises(GPUFault):                                   # last dword crosses the end
        setv64(w, 0, base + 4 * np.arange(32))
        ins("GLOBAL", "global_load_b64", addr=0, saddr=OFF, vdst=4)(w, slice(None))


# ---------------------------------------------------------------- atomics against a sequential reference

def seq_ref(op: str, mem: dict, addrs, src, cmp, bits: int):
    m = (1 << bits) - 1
    sg = lambda v: v - (1 << bits) if v >> (bits - 1) else v  # noqa: E731
    olds = []
    for a, s, c in zip(addrs, src, cmp):
        o = mem[a]
        olds.append(o)
        n = {"add": (o + s) & m, "sub": (o - s) & m, "rsub": (s - o) & m, "and": o & s, "or": o | s, "xor": o ^ s,
             "min_u": min(o, s), "max_u": max(o, s), "min_i": o if sg(o) <= sg(s) else s,
             "max_i": o if sg(o) >= sg(s) else s, "inc": 0 if o >= s else o + 1,
             "dec": s if o == 0 or o > s else o - 1, "swap": s, "cmpswap": s if o == c else o,
             "mskor": (o & ~s & m) | c, "csub": 0 if s > o else o - s, "wrap": o - s if o >= s else (o + c) & m}[op]
        mem[a] = n
    return olds


INT_OPS = ["add", "sub", "rsub", "and", "or", "xor", "min_u", "max_u", "min_i", "max_i", "inc", "dec", "swap",
           "cmpswap",
           "mskor", "csub", "wrap"]


@settings(max_examples=150, deadline=None)
@given(op=st.sampled_from(INT_OPS), bits=st.sampled_from([32, 64]), n=st.integers(1, 300), naddr=st.integers(1, 6),
       seed=st.integers(0, 2**32 - 1), uniform=st.booleans(), edge=st.booleans())
def test_rmw_matches_sequential(op, bits, n, naddr, seed, uniform, edge):
    """memory.rmw (distinct, scan, vectorised-sequential and round paths) against a Python loop."""
    r = np.random.default_rng(seed)
    dt = np.uint32 if bits == 32 else np.uint64
    size = bits // 8
    small = r.random() < 0.5
    hi = 20 if small else 1 << bits
    slots = r.integers(0, naddr, n)
    src = r.integers(0, hi, n, dtype=np.uint64).astype(dt)
    cmp = r.integers(0, hi, n, dtype=np.uint64).astype(dt)
    if uniform:                                   # one threshold for every lane (INC/DEC closed form)
        src[:] = (1 << bits) - 1 if edge else src[0]
    if op == "cmpswap" and edge:                  # chains of successes
        cmp = np.r_[0, src[:-1]].astype(dt)
    buf = np.zeros(64, np.uint8)
    init = r.integers(0, hi, naddr, dtype=np.uint64).astype(dt)
    buf[:naddr * size] = init.view(np.uint8)
    mem = {i: int(init[i]) for i in range(naddr)}
    want = seq_ref(op, mem, slots.tolist(), [int(x) for x in src], [int(x) for x in cmp], bits)
    got = rmw(buf, (slots * size).astype(np.int64), ATOMICS[op], src, cmp)
    assert [int(x) for x in got] == want
    assert [int(x) for x in buf[:naddr * size].view(dt)] == [mem[i] for i in range(naddr)]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), naddr=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_rmw_float_add_and_cas(n, naddr, seed):
    r = np.random.default_rng(seed)
    slots = r.integers(0, naddr, n)
    x = r.standard_normal(n).astype(np.float32)
    buf = np.zeros(16, np.uint8)
    got = rmw(buf, (slots * 4).astype(np.int64), ATOMICS["add_f"], x.view(np.uint32)).view(np.float32)
    acc, want = [np.float32(0)] * naddr, []
    for s_, v in zip(slots, x):
        want.append(acc[s_])
        acc[s_] = np.float32(acc[s_] + v)
    assert got.tolist() == [float(v) for v in want]
    assert buf[:4 * naddr].view(np.float32).tolist() == [float(v) for v in acc]
    # float CAS: -0.0 matches 0.0, NaN never matches
    cmpv = np.where(r.random(n) < 0.5, np.float32(-0.0), np.float32(np.nan)).astype(np.float32)
    buf[:] = 0
    got = rmw(buf, np.zeros(n, np.int64), ATOMICS["cmpswap_f"], x.view(np.uint32), cmpv.view(np.uint32))
    cur, olds = np.float32(0), []
    for v, c in zip(x, cmpv):
        olds.append(cur.view(np.uint32))
        cur = v if cur == c else cur
    assert got.tolist() == [int(o) for o in olds]


def test_rmw_deep_conflicts_scan_and_fold():
    """Thousands of lanes on one address: add/min/swap by scan, f32 add by a sequential fold, inc by rounds."""
    r = np.random.default_rng(1)
    n = 5000
    off = np.zeros(n, np.int64)
    off[::3] = 8
    for op in ("add", "min_i", "swap", "xor", "inc"):
        src = r.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        if op == "inc":
            src[:] = 1000
        buf = np.zeros(16, np.uint8)
        mem = {0: 0, 8: 0}
        want = seq_ref(op, mem, off.tolist(), [int(x) for x in src], [0] * n, 32)
        got = rmw(buf, off, ATOMICS[op], src)
        assert got.tolist() == want, op
    x = r.standard_normal(n).astype(np.float32)
    buf = np.zeros(16, np.uint8)
    got = rmw(buf, off, ATOMICS["add_f"], x.view(np.uint32)).view(np.float32)
    acc = {0: np.float32(0), 8: np.float32(0)}
    olds = []
    for o, v in zip(off.tolist(), x):
        olds.append(acc[o])
        acc[o] = np.float32(acc[o] + v)
    assert (got == np.array(olds, np.float32)).all()
    assert buf[:4].view(np.float32)[0] == acc[0] and buf[8:12].view(np.float32)[0] == acc[8]


def test_global_atomics_rtn_and_cmpswap_order():
    """GLOBAL atomics: old values with GLC; CMPSWAP data is (new, cmp); 64-bit forms; inactive lanes skip."""
    w = wstate(2)
    base = w.mem.alloc(64)
    w.mem.write(base, np.array([5, 0, 0, 0], np.uint32))
    sets64(w, 4, base)
    w.v[0] = 0
    w.v[1] = 1
    ins("GLOBAL", "global_atomic_add_u32", addr=0, saddr=4, data=1, vdst=2, glc=1)(w, slice(None))
    assert w.v[2].ravel().tolist() == list(range(5, 69))
    set_exec(w, 1, 0)
    w.v[6] = np.arange(64, dtype=np.uint32).reshape(2, 32) + 100     # new value
    w.v[7] = np.arange(64, dtype=np.uint32).reshape(2, 32) + 99      # compare: lane i expects 99+i
    w.mem.write(base + 4, np.array([99], np.uint32))
    ins("GLOBAL", "global_atomic_cmpswap_b32", addr=0, saddr=4, data=6, vdst=8, glc=1, offset=4)(w, slice(None))
    assert w.v[8][0].tolist() == list(range(99, 131))                 # every lane found what it expected
    assert np.frombuffer(w.mem.read(base + 4, 4), np.uint32)[0] == 131
    set_exec(w, 1, M32)
    w.v[10], w.v[11] = 1, 0                                          # 64-bit add of 1 from 64 lanes (no return)
    ins("GLOBAL", "global_atomic_add_u64", addr=0, saddr=4, data=10, offset=8)(w, slice(None))
    assert np.frombuffer(w.mem.read(base + 8, 8), np.uint64)[0] == 64


# ---------------------------------------------------------------- LDS

def test_ds_per_workgroup_2addr_and_out_of_range():
    w = wstate(2, lds_bytes=256)                                     # two workgroups, one wave each
    w.v[0] = (np.arange(32, dtype=np.uint32) * 4)[None, :]
    w.v[1] = np.arange(64, dtype=np.uint32).reshape(2, 32)
    ins("DS", "ds_store_b32", addr=0, data0=1, offset0=0)(w, slice(None))
    ins("DS", "ds_store_b32", addr=0, data0=1, offset0=128)(w, slice(None))   # lanes >= 0: 128+4l; lane 32.. n/a
    assert (w.lds[:128].view(np.uint32) == np.arange(32)).all()
    assert (w.lds[256:384].view(np.uint32) == np.arange(32, 64)).all()
    ins("DS", "ds_load_2addr_b32", addr=0, vdst=4, offset0=0, offset1=1)(w, slice(None))
    assert (w.v[4] == w.v[1]).all()
    assert (w.v[5][:, :31] == w.v[1][:, 1:]).all()
    # out of range: address 252 + 4 ok, 256 -> read 0, store dropped
    w.v[2] = 240 + 4 * np.arange(32, dtype=np.uint32)[None, :]
    w.v[3] = 0xFFFF
    ins("DS", "ds_store_b32", addr=2, data0=3)(w, slice(None))
    assert (w.lds[240:256].view(np.uint32) == 0xFFFF).all() and (w.lds[256:260].view(np.uint32) == 32).all()
    ins("DS", "ds_load_b64", addr=2, vdst=6)(w, slice(None))
    assert w.v[6][0, :4].tolist() == [0xFFFF] * 4 and w.v[7][0, :4].tolist() == [0xFFFF] * 3 + [0]
    assert (w.v[6][0, 4:] == 0).all()
    # stride64 b64 forms
    w.v[8], w.v[9] = 0x01020304, 0x05060708
    w.v[2] = 0
    ins("DS", "ds_store_2addr_stride64_b64", addr=2, data0=8, data1=8, offset0=0, offset1=0)(w, slice(0, 1))
    ins("DS", "ds_load_2addr_stride64_b32", addr=2, vdst=10, offset0=0, offset1=1)(w, slice(0, 1))
    assert w.v[10][0, 0] == 0x01020304 and w.v[11][0, 0] == 0


def test_ds_subdword_and_d16():
    w = wstate(1, lds_bytes=64)
    w.lds[:64] = np.arange(0x80, 0xC0, dtype=np.uint8)
    w.v[0] = np.arange(32, dtype=np.uint32)
    ins("DS", "ds_load_i8", addr=0, vdst=1)(w, slice(None))
    assert (w.v[1, 0] == np.arange(0x80, 0xA0).astype(np.uint8).astype(np.int8).astype(np.int32).view(np.uint32)).all()
    w.v[2] = 0x12345678
    ins("DS", "ds_load_u8_d16_hi", addr=0, vdst=2)(w, slice(None))
    assert (w.v[2, 0] == (np.arange(0x80, 0xA0, dtype=np.uint32) << 16 | 0x5678)).all()
    w.v[3] = 0xAABBCCDD
    ins("DS", "ds_store_b16_d16_hi", addr=0, data0=3, offset0=32)(w, slice(0, 1))   # overlapping lanes, later wins
    assert w.lds[62] == 0xBB and w.lds[63] == 0xAA                  # lane 31 (bytes 63, 64) is out of range


def test_ds_atomics_rtn_and_cmpstore_order():
    w = wstate(2, lds_bytes=16, wpg=2)                               # one workgroup of two waves
    w.v[0] = 4
    w.v[1] = 1
    ins("DS", "ds_add_rtn_u32", addr=0, data0=1, vdst=2)(w, slice(None))
    assert w.v[2].ravel().tolist() == list(range(64))
    w.v[3] = np.arange(64, dtype=np.uint32).reshape(2, 32) + 1       # DATA0: new value
    w.v[4] = np.arange(64, dtype=np.uint32).reshape(2, 32)           # DATA1: compare value
    ins("DS", "ds_cmpstore_rtn_b32", addr=0, data0=3, data1=4, vdst=5, offset0=4)(w, slice(None))
    assert w.v[5].ravel().tolist() == list(range(64))                # lane i finds i, stores i+1
    assert w.lds[8:12].view(np.uint32)[0] == 64
    ins("DS", "ds_inc_rtn_u32", addr=0, data0=4, vdst=6, offset0=4)(w, slice(0, 1))   # wraps at lane id
    assert w.v[6][0].tolist() == [64] + list(range(31))             # lane j: j-1 >= j? no -> j
    w.v[7] = 12
    w.v[8] = np.float32(0.5).view(np.uint32)
    ins("DS", "ds_add_f32", addr=7, data0=8)(w, slice(None))
    assert w.lds[12:16].view(np.float32)[0] == 32.0


def test_ds_crosslane():
    w = wstate(1)
    w.v[1] = np.arange(100, 132, dtype=np.uint32)
    w.v[0] = ((np.arange(32) + 3) % 32 * 4).astype(np.uint32)
    set_exec(w, 0, 0xFFFFFFFE)                                       # lane 0 off
    w.v[2] = 7
    ins("DS", "ds_bpermute_b32", addr=0, data0=1, vdst=2)(w, slice(None))
    want = np.where((np.arange(32) + 3) % 32 == 0, 0, 100 + (np.arange(32) + 3) % 32)
    assert w.v[2, 0, 0] == 7 and (w.v[2, 0, 1:] == want[1:]).all()
    ins("DS", "ds_permute_b32", addr=0, data0=1, vdst=3)(w, slice(None))
    # lane i sends to lane (i+3)%32; lane 0 is off, so lane 3 gets 0
    want = np.array([100 + (j - 3) % 32 if (j - 3) % 32 != 0 else 0 for j in range(32)])
    assert (w.v[3, 0, 1:] == want[1:]).all()
    set_exec(w, 0, M32)
    off = (0x1F) | (0 << 5) | (1 << 10)                              # bitmask mode: xor 1
    ins("DS", "ds_swizzle_b32", addr=1, vdst=4, offset0=off & 0xFF, offset1=off >> 8)(w, slice(None))
    assert (w.v[4, 0] == 100 + (np.arange(32) ^ 1)).all()
    w64 = wstate(1, lanes=64)                                        # wave64: each 32-lane half on its own
    w64.v[1] = np.arange(100, 164, dtype=np.uint32)
    w64.v[0] = ((np.arange(64) + 1) * 4).astype(np.uint32)
    ins("DS", "ds_bpermute_b32", addr=0, data0=1, vdst=2)(w64, slice(None))
    assert (w64.v[2, 0] == 100 + np.roll(np.arange(64).reshape(2, 32), -1, axis=1).ravel()).all()
    off = 0x8000 | 0b00011011                                        # quad perm [3,2,1,0]
    ins("DS", "ds_swizzle_b32", addr=1, vdst=4, offset0=off & 0xFF, offset1=off >> 8)(w, slice(None))
    assert (w.v[4, 0] == 100 + (np.arange(32) ^ 3)).all()


# ---------------------------------------------------------------- scratch and flat

def scratch_state(lanes: int = 32, per_lane: int = 64):
    w = wstate(2, lanes=lanes, lds_bytes=64)
    w.scratch_wave_bytes = per_lane * lanes
    base = w.mem.alloc(2 * per_lane * lanes)
    w.scratch_base = np.uint64(base) + np.arange(2, dtype=np.uint64) * np.uint64(per_lane * lanes)
    return w, base


def test_scratch_swizzle_forms_and_fault():
    w, base = scratch_state()
    w.v[1] = np.arange(64, dtype=np.uint32).reshape(2, 32) + 1000
    w.v[0] = 8
    w.s[3] = 4
    ins("SCRATCH", "scratch_store_b32", addr=0, data=1, saddr=3, sve=1, offset=4)(w, slice(None))   # a = 16
    phys = np.frombuffer(w.mem.read(base, 2 * 64 * 32), np.uint32).reshape(2, 16, 32)   # [wave, dword, lane]
    assert (phys[:, 4, :] == w.v[1]).all()
    w.v[2] = np.arange(64, dtype=np.uint32).reshape(2, 32)
    ins("SCRATCH", "scratch_store_b64", data=1, saddr=OFF, sve=0, offset=24)(w, slice(None))       # a = 24, 28
    phys = np.frombuffer(w.mem.read(base, 2 * 64 * 32), np.uint32).reshape(2, 16, 32)
    assert (phys[:, 6, :] == w.v[1]).all() and (phys[:, 7, :] == w.v[2]).all()
    ins("SCRATCH", "scratch_load_b64", vdst=10, saddr=3, sve=0, offset=20)(w, slice(None))
    assert (w.v[10] == w.v[1]).all() and (w.v[11] == w.v[2]).all()
    w.v[0] = 26                                                                                   # unaligned b32
    ins("SCRATCH", "scratch_load_b32", addr=0, vdst=12, saddr=OFF, sve=1)(w, slice(None))
    assert (w.v[12] == (w.v[1] >> 16) | (w.v[2] << 16)).all()
    with pytest.raises(GPUFault) as e:
        ins("SCRATCH", "scratch_load_b32", vdst=12, saddr=OFF, sve=0, offset=62)(w, slice(None))
    assert e.value.address == 62


def test_flat_apertures():
    w, base = scratch_state()
    g = w.mem.alloc(256)
    w.lds[:64] = np.arange(64, dtype=np.uint8)
    lane = np.arange(32)
    addr = np.where(lane % 3 == 0, SHARED_APERTURE_HI << 32 | 4 * (lane // 3),
                    np.where(lane % 3 == 1, PRIVATE_APERTURE_HI << 32 | 8, g + 4 * lane)).astype(np.uint64)
    setv64(w, 0, addr + np.where(lane % 3 == 2, 128, 0).astype(np.uint64) * np.arange(2, dtype=np.uint64)[:, None])
    w.v[4] = np.arange(64, dtype=np.uint32).reshape(2, 32) + 500
    ins("FLAT", "flat_store_b32", addr=0, data=4, saddr=OFF)(w, slice(None))
    ins("FLAT", "flat_load_b32", addr=0, vdst=5, saddr=OFF)(w, slice(None))
    assert (w.v[5] == w.v[4]).all()
    assert np.frombuffer(w.mem.read(g + 8, 4), np.uint32)[0] == 502
    assert w.lds[4:8].view(np.uint32)[0] == 503                                         # workgroup 0's LDS
    assert w.lds[64 + 4:64 + 8].view(np.uint32)[0] == 535                               # workgroup 1's LDS
    phys = np.frombuffer(w.mem.read(base, 2 * 64 * 32), np.uint32).reshape(2, 16, 32)
    assert phys[0, 2, 1] == 501 and phys[1, 2, 4] == 536
    w.v[6] = 1
    ins("FLAT", "flat_atomic_add_u32", addr=0, data=6, vdst=7, saddr=OFF, glc=1)(w, slice(0, 1))
    assert (w.v[7][0] == w.v[4][0]).all()


# ---------------------------------------------------------------- MUBUF

def vsharp(w: WaveState, r: int, base: int, stride: int = 0, num_records: int = 0, oob: int = 3, add_tid: int = 0):
    w.s[r] = base & M32
    w.s[r + 1] = (base >> 32) & 0xFFFF | stride << 16
    w.s[r + 2] = num_records
    w.s[r + 3] = oob << 28 | add_tid << 23


def test_buffer_raw_range_checks():
    w = wstate(1)
    base = w.mem.alloc(1024)
    w.mem.write(base, np.arange(256, dtype=np.uint32))
    vsharp(w, 8, base, num_records=100)                    # 25 dwords in range
    w.v[0] = np.arange(32, dtype=np.uint32) * 4
    w.s[2] = 0
    ins("MUBUF", "buffer_load_b64", vaddr=0, vdata=4, srsrc=2, soffset=2, offen=1, offset=4)(w, slice(None))
    d0 = np.where(np.arange(32) + 1 < 25, np.arange(32) + 1, 0)
    d1 = np.where(np.arange(32) + 2 < 25, np.arange(32) + 2, 0)
    assert (w.v[4, 0] == d0).all() and (w.v[5, 0] == d1).all()
    w.v[6] = 0xEE
    ins("MUBUF", "buffer_store_b32", vaddr=0, vdata=6, srsrc=2, soffset=2, offen=1)(w, slice(None))
    m = np.frombuffer(w.mem.read(base, 128), np.uint32)
    assert (m[:25] == 0xEE).all() and (m[25:32] == np.arange(25, 32)).all()
    # structured: index with stride 16, num_records in elements; atomic all-or-nothing
    vsharp(w, 8, base, stride=16, num_records=10, oob=1)
    w.v[1] = 1
    w.v[0] = np.arange(32, dtype=np.uint32)
    ins("MUBUF", "buffer_atomic_add_u32", vaddr=0, vdata=1, srsrc=2, soffset=2, idxen=1, offset=512,
        glc=1)(w, slice(None))
    m = np.frombuffer(w.mem.read(base + 512, 16 * 32), np.uint32).reshape(32, 4)
    assert (m[:10, 0] == np.arange(128, 128 + 40, 4) + 1).all() and (m[10:, 0] == np.arange(168, 256, 4)).all()
    assert (w.v[1, 0, 10:] == 0).all() and (w.v[1, 0, :10] == np.arange(128, 168, 4)).all()
    ins("MUBUF", "buffer_gl0_inv")(w, slice(None))


def test_unimplemented_is_clear():
    with pytest.raises(UnsupportedInstruction, match="ds_gws_init"):
        ins("DS", "ds_gws_init", addr=0, data0=0)


# ---------------------------------------------------------------- speed

def test_speed_global_dword_2_20_lanes():
    """A 2^20-lane aligned dword load and store (one allocation) take a few numpy passes."""
    waves = (1 << 20) // 32
    w = WaveState(waves, 32, 4)
    w.s[EXEC] = M32
    w.refresh_exec(slice(None))
    w.mem = FlatMemory(8 << 20)
    base = w.mem.alloc(4 << 20)
    sets64(w, 4, base)
    w.v[0] = (np.arange(1 << 20, dtype=np.uint32) * 4).reshape(waves, 32)
    w.v[1] = 3
    load, store = (ins("GLOBAL", "global_load_b32", addr=0, saddr=4, vdst=2),
                   ins("GLOBAL", "global_store_b32", addr=0, saddr=4, data=1))
    best = [1e9, 1e9]
    for _ in range(3):
        for i, f in enumerate((store, load)):
            t = time.perf_counter()
            f(w, slice(None))
            best[i] = min(best[i], time.perf_counter() - t)
    assert (w.v[2] == 3).all()
    print(f"2^20 lanes: global_store_b32 {best[0] * 1e3:.1f} ms, global_load_b32 {best[1] * 1e3:.1f} ms")
    assert max(best) < 0.5


GLOBAL_ATOMICS = {"add_u32": "add", "sub_u32": "sub", "min_i32": "min_i", "max_u32": "max_u", "xor_b32": "xor",
                  "inc_u32": "inc", "dec_u32": "dec", "swap_b32": "swap", "cmpswap_b32": "cmpswap", "csub_u32": "csub"}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(GLOBAL_ATOMICS)), lanes=st.sampled_from([32, 64]), waves=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1), use_lds=st.booleans(), index_sel=st.booleans())
def test_atomic_instructions_lane_order(name, lanes, waves, seed, use_lds, index_sel):
    """GLOBAL and DS atomics with random EXEC masks and wave subsets: the result of applying them one lane at
    a time, waves in order and lanes ascending; inactive lanes and unselected waves change nothing."""
    r = np.random.default_rng(seed)
    w = wstate(waves, lanes=lanes, lds_bytes=64, wpg=waves)       # one workgroup
    base = w.mem.alloc(64)
    init = r.integers(0, 30, 16).astype(np.uint32)
    w.mem.write(base, init)
    w.lds[:64] = init.view(np.uint8)
    sets64(w, 4, base)
    w.v[0] = r.integers(0, 4, (waves, lanes)).astype(np.uint32) * 4
    w.v[1] = r.integers(0, 30, (waves, lanes)).astype(np.uint32)
    w.v[2] = r.integers(0, 30, (waves, lanes)).astype(np.uint32)
    w.v[3] = 0xABCD
    for i in range(waves):
        m = int(r.integers(0, 1 << lanes, dtype=np.uint64))
        w.s[EXEC][i], w.s[EXEC + 1][i] = m & M32, m >> 32
    w.refresh_exec(slice(None))
    sel = np.flatnonzero(r.random(waves) < 0.7) if index_sel else slice(None)
    op = GLOBAL_ATOMICS[name]
    if use_lds:
        kind, typ = name.split("_")
        special = {"csub": None, "swap": "ds_storexchg_rtn_b32", "cmpswap": "ds_cmpstore_rtn_b32"}
        ds = special.get(op, f"ds_{kind}_rtn_{typ}")
        if ds is None:
            return
        extra = {"data1": 2} if op == "cmpswap" else {}
        ins("DS", ds, addr=0, data0=1, vdst=3, **extra)(w, sel)
    else:
        ins("GLOBAL", f"global_atomic_{name}", addr=0, saddr=4, data=1, vdst=3, glc=1)(w, sel)
    mem = {4 * i: int(init[i]) for i in range(16)}
    want = np.full((waves, lanes), 0xABCD, np.uint32)
    for i in np.arange(waves)[sel]:
        act = np.flatnonzero(w.em[i])
        olds = seq_ref(op, mem, w.v[0][i, act].tolist(), w.v[1][i, act].tolist(), w.v[2][i, act].tolist(), 32)
        want[i, act] = olds
    assert (w.v[3] == want).all()
    final = w.lds[:64].view(np.uint32) if use_lds else np.frombuffer(w.mem.read(base, 64), np.uint32)
    assert final.tolist() == [mem[4 * i] for i in range(16)]


def test_addtid_and_append():
    w = wstate(1, lds_bytes=256)
    base = w.mem.alloc(256)
    w.mem.write(base, np.arange(64, dtype=np.uint32))
    sets64(w, 4, base)
    ins("GLOBAL", "global_load_addtid_b32", saddr=4, vdst=1, offset=8)(w, slice(None))
    assert (w.v[1, 0] == np.arange(2, 34)).all()
    w.s[M0] = 0x10000 | 16                                          # only M0[15:0] counts
    ins("DS", "ds_store_addtid_b32", data0=1, offset0=4)(w, slice(None))
    assert (w.lds[20:148].view(np.uint32) == np.arange(2, 34)).all()
    set_exec(w, 0, 0x00FF00FF)
    w.s[M0] = 20
    ins("DS", "ds_append", vdst=2)(w, slice(None))
    assert (w.v[2, 0][w.em[0]] == 2).all() and w.lds[20:24].view(np.uint32)[0] == 18
    ins("DS", "ds_consume", vdst=2)(w, slice(None))
    assert (w.v[2, 0][w.em[0]] == 18).all() and w.lds[20:24].view(np.uint32)[0] == 2


def test_scratch_subdword_straddling_dwords():
    w, base = scratch_state(lanes=64)
    w.v[1] = np.arange(128, dtype=np.uint32).reshape(2, 64) * 0x01010101 + 0x00030201
    w.v[0] = 7                                                       # bytes 7, 8: two different swizzled dwords
    ins("SCRATCH", "scratch_store_b16", addr=0, data=1, saddr=OFF, sve=1)(w, slice(None))
    ins("SCRATCH", "scratch_load_u16", addr=0, vdst=2, saddr=OFF, sve=1)(w, slice(None))
    assert (w.v[2] == w.v[1] & 0xFFFF).all()
    phys = np.frombuffer(w.mem.read(base, 2 * 64 * 64), np.uint8).reshape(2, 16, 64, 4)   # [wave, dword, lane, byte]
    assert (phys[:, 1, :, 3] == (w.v[1] & 0xFF)).all() and (phys[:, 2, :, 0] == (w.v[1] >> 8 & 0xFF)).all()
    ins("SCRATCH", "scratch_store_d16_hi_b8", addr=0, data=1, saddr=OFF, sve=1, offset=-6)(w, slice(None))   # byte 1
    phys = np.frombuffer(w.mem.read(base, 2 * 64 * 64), np.uint8).reshape(2, 16, 64, 4)
    assert (phys[:, 0, :, 1] == (w.v[1] >> 16 & 0xFF)).all()
    ins("SCRATCH", "scratch_load_i8", addr=0, vdst=3, saddr=OFF, sve=1, offset=-6)(w, slice(None))
    assert (w.v[3] == (w.v[1] >> 16 & 0xFF).astype(np.uint8).astype(np.int8).astype(np.int32).view(np.uint32)).all()


def test_lds_blocks_not_dword_multiple():
    """An LDS allocation of 10 bytes: the second workgroup's block starts at an odd dword boundary."""
    w = wstate(2, lds_bytes=10)
    w.v[0] = 4
    w.v[1] = np.array([[0x11111111], [0x22222222]], np.uint32)
    ins("DS", "ds_store_b32", addr=0, data0=1)(w, slice(None))
    ins("DS", "ds_load_b64", addr=0, vdst=2)(w, slice(None))           # second dword (8..12) is out of range
    assert (w.v[2] == w.v[1]).all() and (w.v[3] == 0).all()
    assert w.lds[4:8].tolist() == [0x11] * 4 and w.lds[14:18].tolist() == [0x22] * 4
    w.v[4] = 1
    ins("DS", "ds_add_rtn_u32", addr=0, data0=4, vdst=5)(w, slice(None))
    assert (w.v[5] == w.v[1][:, :1] + np.arange(32, dtype=np.uint32)).all()


def test_ds_wide_xchg2_mskor_and_64bit():
    w = wstate(1, lds_bytes=1024)
    w.v[0] = np.arange(32, dtype=np.uint32) * 16
    for i in range(4):
        w.v[1 + i] = np.arange(32, dtype=np.uint32) * 10 + i
    ins("DS", "ds_store_b128", addr=0, data0=1)(w, slice(None))
    ins("DS", "ds_load_b96", addr=0, vdst=8, offset0=4)(w, slice(None))
    assert (w.v[8:11, 0] == w.v[2:5, 0]).all()
    assert (w.lds[:512].view(np.uint32).reshape(32, 4).T == w.v[1:5, 0]).all()
    # storexchg 2addr: two swaps, old values into vdst[0:1]
    ins("DS", "ds_storexchg_2addr_rtn_b32", addr=0, data0=3, data1=4, vdst=12, offset0=0, offset1=2)(w, slice(None))
    assert (w.v[12, 0] == w.v[1, 0]).all() and (w.v[13, 0] == w.v[3, 0]).all()
    assert (w.lds[:512].view(np.uint32).reshape(32, 4)[:, 0] == w.v[3, 0]).all()
    # mskor: (m & ~data0) | data1 ; wrap: m >= d0 ? m - d0 : m + d1
    w.v[5], w.v[6] = 0xF0, 0x5
    ins("DS", "ds_mskor_rtn_b32", addr=0, data0=5, data1=6, vdst=14, offset0=12)(w, slice(None))
    assert (w.lds[:512].view(np.uint32).reshape(32, 4)[:, 3] == ((w.v[4, 0] & ~np.uint32(0xF0)) | 5)).all()
    w.v[5], w.v[6] = 100, 7
    ins("DS", "ds_wrap_rtn_b32", addr=0, data0=5, data1=6, vdst=14, offset0=4)(w, slice(None))
    m = w.v[2, 0]
    assert (w.lds[:512].view(np.uint32).reshape(32, 4)[:, 1] == np.where(m >= 100, m - 100, m + 7)).all()
    # 64-bit: cmpstore (new in data0 pair, compare in data1 pair) and max_i64 on one address from every lane
    w.lds[512:520] = np.array([-5], np.int64).view(np.uint8)
    w.v[0] = 512
    setv64(w, 16, np.arange(32, dtype=np.int64) - 3)
    ins("DS", "ds_max_rtn_i64", addr=0, data0=16, vdst=18)(w, slice(None))
    olds = (w.v[18, 0].astype(np.uint64) | w.v[19, 0].astype(np.uint64) << np.uint64(32)).view(np.int64)
    assert olds.tolist() == [max(-5, *(np.arange(k) - 3)) if k else -5 for k in range(32)]
    setv64(w, 16, np.full(32, 77))
    setv64(w, 20, np.full(32, 28))
    ins("DS", "ds_cmpstore_rtn_b64", addr=0, data0=16, data1=20, vdst=18)(w, slice(None))
    assert w.lds[512:520].view(np.int64)[0] == 77 and w.v[18, 0, 0] == 28 and (w.v[18, 0, 1:] == 77).all()


def test_consecutive_lane_fast_path_agrees_with_lanes():
    """Global dword loads/stores over consecutive addresses take a slice copy; near misses (one lane off, a
    high word that changes, a low word that wraps) must give exactly what the per-lane path gives."""
    waves = 2200 if vmem.RUN_CHUNK > 32768 else 1100          # more lanes than one check block
    n = waves * 32
    for case in ("ramp", "one_off", "hi_changes", "wraps", "saddr"):
        w = wstate(waves, nv=8, mem_bytes=1 << 22)
        base = w.mem.alloc(8 * n + 8192)
        w.mem.write(base, np.arange(2 * n + 2048, dtype=np.uint32))
        a = base + 4 * np.arange(n, dtype=np.uint64)
        if case == "one_off":
            a[n - 40] += 8
        elif case == "hi_changes":                     # same low words, another (mapped) high word: a lane faults
            a[70000 % n] += 1 << 32
        setv64(w, 2, a.reshape(waves, 32))
        if case == "wraps":
            w.v[2] = (np.arange(n, dtype=np.uint64) * 4 + (1 << 32) - 64).astype(np.uint32).reshape(waves, 32)
        if case == "saddr":
            sets64(w, 4, base)
            w.v[1] = (np.arange(n, dtype=np.uint32) * 4).reshape(waves, 32)
            load = ins("GLOBAL", "global_load_b32", addr=1, saddr=4, vdst=5, offset=4)
        else:
            load = ins("GLOBAL", "global_load_b32", addr=2, saddr=OFF, vdst=5, offset=4)
        want_addr = (w.v[2].astype(np.uint64) | w.v[3].astype(np.uint64) << np.uint64(32)) + 4 if case != "saddr" \
            else np.uint64(base) + w.v[1].astype(np.uint64) + 4
        if case in ("hi_changes", "wraps"):
            with pytest.raises(GPUFault):
                load(w, slice(None))
            continue
        load(w, slice(None))
        want = ((want_addr - np.uint64(base)) // np.uint64(4)).astype(np.uint32)
        assert (w.v[5] == want).all(), case
        store = ins("GLOBAL", "global_store_b32", addr=1 if case == "saddr" else 2, saddr=4 if case == "saddr" else OFF,
                    data=6, offset=4)
        w.v[6] = np.arange(n, dtype=np.uint32).reshape(waves, 32) + 7
        store(w, slice(None))
        got = np.frombuffer(w.mem.read(base, 8 * n + 8192), np.uint32)
        exp = np.zeros_like(got)
        exp[want.reshape(-1)] = w.v[6].reshape(-1)                     # later lanes win, as in lane order
        assert (got[want.reshape(-1)] == exp[want.reshape(-1)]).all(), case


def test_gather_within_one_run_agrees_with_lanes():
    """Dword loads/stores whose lanes share the high address word go by one take/put over the run they span;
    duplicates keep lane order, a misaligned lane or a lane outside the allocation goes lane by lane."""
    r = np.random.default_rng(5)
    for case in ("perm", "dups", "misaligned", "outside"):
        w = wstate(64, nv=8, mem_bytes=1 << 22)
        base = w.mem.alloc(1 << 16)
        w.mem.write(base, np.arange(1 << 14, dtype=np.uint32))
        off = r.integers(0, 1 << 14, (64, 32)).astype(np.uint64) * 4
        if case == "dups":
            off[:, ::2] = off[:, 1::2]
        if case == "misaligned":
            off[3, 5] += 2
        if case == "outside":
            off[7, 9] = 1 << 20
        setv64(w, 2, np.uint64(base) + off)
        if case == "outside":
            with pytest.raises(GPUFault):
                ins("GLOBAL", "global_load_b32", addr=2, saddr=OFF, vdst=5)(w, slice(None))
            continue
        ins("GLOBAL", "global_load_b32", addr=2, saddr=OFF, vdst=5)(w, slice(None))
        mem = np.frombuffer(w.mem.read(base, 1 << 16), np.uint8)
        want = np.array([int.from_bytes(mem[o:o + 4].tobytes(), "little") for o in off.reshape(-1).tolist()], np.uint32)
        assert (w.v[5].reshape(-1) == want).all(), case
        w.v[6] = np.arange(64 * 32, dtype=np.uint32).reshape(64, 32) + 1
        before = mem.copy()
        ins("GLOBAL", "global_store_b32", addr=2, saddr=OFF, data=6)(w, slice(None))
        exp = before.copy()
        for o, v in zip(off.reshape(-1).tolist(), w.v[6].reshape(-1).tolist()):    # lane order
            exp[o:o + 4] = np.frombuffer(int(v).to_bytes(4, "little"), np.uint8)
        assert (np.frombuffer(w.mem.read(base, 1 << 16), np.uint8) == exp).all(), case
