"""The kernel suite: every OpenCL kernel in tests/kernels, compiled by clang-19 for gfx1100, runs on the
shader core (tests.harness.run_cl) and its outputs are checked against numpy.

Exact where hardware is exact (integers, IEEE add/mul/div/sqrt, FMA: clang contracts a*b+c into a fused
multiply-add, so references are fused too); transcendental approximations within a stated bound.
Atomics: the shader core applies them lane by lane in lane order (waves in order), so the reference is
the sequential result in that order.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from amdq.sim.shader import fp
from harness import LDS, run_cl

F16, F32, F64 = np.float16, np.float32, np.float64


def _fused(f, dt):
    def fma(a, b, c):
        a, b, c = np.broadcast_arrays(np.asarray(a, dt), np.asarray(b, dt), np.asarray(c, dt))
        return np.asarray(f(a.copy(), b.copy(), c.copy()), dt)
    return fma


fma16, fma32, fma64 = _fused(fp.fma16, F16), _fused(fp.fma32, F32), _fused(fp.fma64, F64)   # correctly rounded FMA


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


WAVES = pytest.mark.parametrize("wave", [32, 64], ids=["wave32", "wave64"])


def wf(wave: int) -> tuple[str, ...]:
    """clang flags selecting the wave size (gfx1100 defaults to wave32)."""
    return ("-mwavefrontsize64",) if wave == 64 else ()


def bits(x: np.ndarray) -> np.ndarray:
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def assert_bits(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Bit-exact comparison of float arrays (NaNs compare by being NaN)."""
    want = np.asarray(want, got.dtype)
    nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    bad = (bits(got) != bits(want)) & ~(nan & np.isnan(got))
    assert not bad.any(), f"{what}: {bad.sum()} lanes differ, first at {np.flatnonzero(bad.ravel())[:5]}: " \
                          f"{got.ravel()[bad.ravel()][:5]} vs {want.ravel()[bad.ravel()][:5]}"


# ---------------------------------------------------------------- grids and work-item ids

@WAVES
def test_vadd_partial(wave):
    """1-D, several workgroups, n not a multiple of the block (the kernel bounds-checks)."""
    n, r = 1000, rng(1)
    a, b = r.standard_normal(n).astype(F32), r.standard_normal(n).astype(F32)
    c = np.full(1024, 7, F32)
    (_, _, out), stats = run_cl("vadd.cl", "vadd", [a, np.r_[b, np.zeros(24, F32)], c, 1.5, n],
                                grid=(4, 1, 1), block=(256, 1, 1), flags=wf(wave))
    assert_bits(out[:n], fma32(F32(1.5), b, a), "c")
    assert (out[n:] == 7).all()
    assert stats.workgroups == 4


def test_grid2d():
    gx, gy, bx, by = 3, 5, 16, 4
    w, h = gx * bx, gy * by
    (out,), _ = run_cl("grid2d.cl", "grid2d", [np.zeros(w * h, np.int32)], grid=(gx, gy, 1), block=(bx, by, 1))
    y, x = np.mgrid[0:h, 0:w]
    assert (out.reshape(h, w) == x * 1000 + y).all()


def test_grid3d():
    grid, block = (2, 3, 2), (4, 2, 3)
    w, h, d = (g * b for g, b in zip(grid, block))
    (out, loc), _ = run_cl("grid3d.cl", "grid3d", [np.zeros(w * h * d, np.uint32), np.zeros(w * h * d, np.uint32)],
                           grid=grid, block=block)
    z, y, x = np.mgrid[0:d, 0:h, 0:w]
    assert (out.reshape(d, h, w) == (z << 20) | (y << 10) | x).all()
    lz, ly, lx = z % block[2], y % block[1], x % block[0]
    assert (loc.reshape(d, h, w) == (lz << 20) | (ly << 10) | lx).all()


def test_grid_size():
    """__builtin_amdgcn_grid_size_x reads the AQL dispatch packet through dispatch_ptr."""
    g, b = 5, 64
    (out, groups), _ = run_cl("grid_size.cl", "grid_size", [np.zeros(g * b, np.uint32), np.zeros(g * b, np.uint32)],
                              grid=(g, 1, 1), block=(b, 1, 1))
    assert (out == g * b).all() and (groups == g).all()


def test_scalar_args():
    n = 64
    args = dict(c=-5, s=-300, iv=70000, l=-(1 << 40) + 3, f=0.25, d=1e10 + 0.5, h=1.5, uc=200, us=60000)
    (out, out_l), _ = run_cl("scalar_args.cl", "scalar_args", [np.zeros(n, F64), np.zeros(n, np.int64), *args.values()],
                             grid=(1, 1, 1), block=(n, 1, 1))
    acc = F64(0)
    for v in args.values():
        acc = acc + F64(v)
    want = acc + np.arange(n, dtype=F64)
    assert_bits(out, want, "out")
    assert (out_l == args["l"] * (np.arange(n) + 1)).all()


# ---------------------------------------------------------------- LDS

@WAVES
@pytest.mark.parametrize("b", [128, 48])
def test_dyn_lds(wave, b):
    """A dynamic __local buffer (LDS(nbytes)) reversed within each workgroup (48: a partly filled wave)."""
    g = 3
    x = rng(2).standard_normal(g * b).astype(F32)
    (_, out), _ = run_cl("dyn_lds.cl", "dyn_lds", [x, np.zeros_like(x), LDS(4 * b)], grid=(g, 1, 1), block=(b, 1, 1),
                         flags=wf(wave))
    assert_bits(out, x.reshape(g, b)[:, ::-1].ravel(), "out")


@WAVES
def test_lds_reduce(wave):
    g = 8
    x = rng(3).standard_normal(g * 256).astype(F32)
    (_, out), _ = run_cl("lds_reduce.cl", "lds_reduce", [x, np.zeros(g, F32)], grid=(g, 1, 1), block=(256, 1, 1),
                         flags=wf(wave))
    t = x.reshape(g, 256).copy()
    s = 128
    while s:
        t[:, :s] = t[:, :s] + t[:, s:2 * s]
        s //= 2
    assert_bits(out, t[:, 0], "sum")


def test_lds_transpose():
    h, w = 32, 48
    a = rng(4).integers(0, 2**32, (h, w), dtype=np.uint32)
    (_, out), _ = run_cl("lds_transpose.cl", "lds_transpose", [a, np.zeros(w * h, np.uint32), w, h],
                         grid=(w // 16, h // 16, 1), block=(16, 16, 1))
    assert (out.reshape(w, h) == a.T).all()


def test_matmul_tiled():
    n = 48
    r = rng(5)
    A, B = r.standard_normal((n, n)).astype(F32), r.standard_normal((n, n)).astype(F32)
    (_, _, C), _ = run_cl("matmul_tiled.cl", "matmul_tiled", [A, B, np.zeros(n * n, F32), n],
                          grid=(n // 16, n // 16, 1), block=(16, 16, 1))
    acc = np.zeros((n, n), F32)
    for k in range(n):
        acc = fma32(A[:, k][:, None], B[k, :][None, :], acc)
    assert_bits(C.reshape(n, n), acc, "C")


@WAVES
def test_wave_ops(wave):
    """ballot, readfirstlane, ds_bpermute (whose 5-bit lane index keeps wave64 lanes in their 32-lane half)."""
    n = 256
    x = rng(6).integers(-5, 5, n).astype(np.int32)
    mt = np.uint32 if wave == 32 else np.uint64
    (_, ballot, first, perm), _ = run_cl("wave_ops.cl", "wave_ops",
                                         [x, np.zeros(n, mt), np.zeros(n, np.int32), np.zeros(n, np.int32)],
                                         grid=(2, 1, 1), block=(128, 1, 1), flags=wf(wave))
    waves = x.reshape(-1, wave)
    mask = ((waves > 0).astype(np.uint64) << np.arange(wave, dtype=np.uint64)).sum(1, dtype=np.uint64).astype(mt)
    assert (ballot == np.repeat(mask, wave)).all()
    assert (first == np.repeat(waves[:, 0], wave)).all()
    # ds_bpermute takes a 5-bit lane index: in wave64 each half of 32 lanes permutes within itself
    halves = x.reshape(-1, 32)
    assert (perm == np.roll(halves, -1, axis=1).ravel()).all()


# ---------------------------------------------------------------- atomics

def _seq_int(op: str, init: int, vals: np.ndarray, bits_: int = 32, extra=None):
    """Sequential reference: (old values, final) of applying op lane by lane."""
    m = (1 << bits_) - 1
    sgn = lambda v: v - (1 << bits_) if v >> (bits_ - 1) else v  # noqa: E731
    cur, olds = init & m, []
    for i, v in enumerate(int(x) & m for x in vals):
        olds.append(cur)
        if op == "add":
            cur = (cur + v) & m
        elif op == "sub":
            cur = (cur - v) & m
        elif op == "min":
            cur = cur if sgn(cur) <= sgn(v) else v
        elif op == "max":
            cur = cur if sgn(cur) >= sgn(v) else v
        elif op == "umin":
            cur = min(cur, v)
        elif op == "umax":
            cur = max(cur, v)
        elif op == "and":
            cur &= v
        elif op == "or":
            cur |= v
        elif op == "xor":
            cur ^= v
        elif op == "inc":
            cur = 0 if cur >= 17 else cur + 1
        elif op == "dec":
            cur = 17 if cur == 0 or cur > 17 else cur - 1
        elif op == "xchg":
            cur = v
        elif op == "cmpxchg":
            cur = v if cur == int(extra[i]) & m else cur
    return np.array(olds, np.uint64).astype(np.uint32).view(np.int32), cur


OPS13 = ["add", "sub", "min", "max", "umin", "umax", "and", "or", "xor", "inc", "dec", "xchg", "cmpxchg"]


@WAVES
def test_atomics_global(wave):
    """13 32-bit atomics and 64-bit add/max/cmpxchg, every lane on one address, old values returned."""
    n = 256                                      # 4 workgroups
    r = rng(7)
    v = r.integers(-1000, 1000, n).astype(np.int32)
    v[0], v[1] = 1, 2                            # cmpxchg expecting i succeeds for lanes 0, 1, 2
    init = r.integers(-50, 50, 13).astype(np.int32)
    init[[9, 10, 12]] = [5, 2, 0]
    g64 = np.zeros(n + 3, np.int64)
    g64[:3] = [1 << 50, -7, 0]
    (g, gu, g64, _, old), _ = run_cl("atomics_global.cl", "atomics_global",
                                     [init.copy(), init.view(np.uint32).copy(), g64, v, np.zeros(13 * n, np.int32), n],
                                     grid=(4, 1, 1), block=(64, 1, 1), flags=wf(wave))
    # the waves of different workgroups may take one address in any order (several XCCs run at once); within a
    # wave the lanes go in order: the old values must be those of some order of the waves' blocks of lanes
    blocks = [np.arange(b, min(b + wave, n)) for b in range(0, n, wave)]
    for k, op in enumerate(OPS13):
        mem = gu if op in ("umin", "umax", "inc", "dec") else g
        order = _block_order(op, int(init[k]), v, old[k * n:(k + 1) * n], int(mem[k]) & 0xFFFFFFFF, blocks)
        assert order is not None, f"{op}: no order of the waves gives these old values and final value"
    M = (1 << 64) - 1
    a64, m64 = (v.astype(np.int64) << 33).tolist(), v.tolist()
    sums = [int(x) & M for x in g64[3:]]
    assert int(g64[0]) & M == _seq64(1 << 50, a64, "add")[-1] and int(g64[1]) & M == _seq64(-7, m64, "max")[-1]
    if len(blocks) <= 4:                         # (24 x 24 orders at most)
        assert any(sums == [(p + q) & M for p, q in zip(_seq64_order(1 << 50, a64, "add", oa, n),
                                                        _seq64_order(-7, m64, "max", om, n))]
                   for oa in itertools.permutations(blocks) for om in itertools.permutations(blocks))
    assert int(g64[2]) in {int(b[0]) + 1 for b in blocks}   # only the first lane of the first wave finds its 0


def _block_order(op: str, init: int, v: np.ndarray, olds: np.ndarray, fin: int, blocks: list) -> list | None:
    """An order of the blocks (lane index arrays, each applied lane by lane) giving `olds` and `fin`, or None
    (depth-first, blocks in index order first: the sequential order is found at once)."""
    def go(cur: int, left: list) -> list | None:
        if not left:
            return [] if cur == fin else None
        for j, b in enumerate(left):
            o, nxt = _seq_int(op, cur, v[b], extra=b)
            if (olds[b] == o).all():
                rest = go(nxt, left[:j] + left[j + 1:])
                if rest is not None:
                    return [b] + rest
        return None
    return go(init & 0xFFFFFFFF, list(blocks))


def _seq64_order(init: int, vals: list, op: str, order, n: int) -> list[int]:
    """The old value of each lane of a 64-bit add/max applied block by block in `order`."""
    lanes = [int(i) for b in order for i in b]
    olds = _seq64(init, [vals[i] for i in lanes], op)[:-1]
    out = [0] * n
    for i, o in zip(lanes, olds):
        out[i] = o
    return out


def _seq64(init: int, vals: list, op: str) -> list[int]:
    """Old values of a 64-bit add/max applied in order, then the final value (all mod 2^64)."""
    cur, out = init, []
    for x in vals:
        out.append(cur % (1 << 64))
        cur = cur + int(x) if op == "add" else max(cur, int(x))
    return out + [cur % (1 << 64)]


@WAVES
def test_atomics_lds(wave):
    """The same 13 atomics on LDS, per workgroup, with old values."""
    groups, b = 3, 128
    n = groups * b
    r = rng(8)
    v = r.integers(-1000, 1000, n).astype(np.int32)
    v[::b] = 1                                  # lane 0 of each group swaps 0 -> 1, then lane 1 matches 1
    v[1::b] = 2
    init = r.integers(-50, 50, 13).astype(np.int32)
    init[[9, 10, 12]] = [5, 2, 0]
    (_, _, old, final), _ = run_cl("atomics_lds.cl", "atomics_lds",
                                   [init, v, np.zeros(13 * n, np.int32), np.zeros(13 * groups, np.int32), n],
                                   grid=(groups, 1, 1), block=(b, 1, 1), flags=wf(wave))
    final = final.reshape(groups, 13)
    for k, op in enumerate(OPS13):
        for gi in range(groups):
            vals = v[gi * b:(gi + 1) * b]
            olds, fin = _seq_int(op, int(init[k]), vals, extra=np.arange(b))
            assert int(final[gi, k]) & 0xFFFFFFFF == fin, (op, gi)
            assert (old[k * n + gi * b:k * n + (gi + 1) * b] == olds).all(), (op, gi)


@WAVES
def test_atomics_float(wave):
    """f32 atomic add on global (a CAS loop and the native instruction) and on LDS; old values of acc[0]
    must chain: sorted by old value, each is the previous plus the previous lane's x."""
    g, b = 2, 64
    n = g * b
    x = rng(9).integers(1, 16, n).astype(F32)    # integer-valued: every partial sum is exact in f32
    (acc, _, old), _ = run_cl("atomics_float.cl", "atomics_float", [np.zeros(3, F32), x, np.zeros(n, F32)],
                              grid=(g, 1, 1), block=(b, 1, 1), flags=wf(wave))
    total = x.sum(dtype=F64)
    assert acc.tolist() == [total] * 3
    order = np.argsort(old, kind="stable")
    chain = np.r_[0, np.cumsum(x[order].astype(F64))]
    assert (old[order].astype(F64) == chain[:-1]).all() and chain[-1] == total


# ---------------------------------------------------------------- scratch, control flow

@WAVES
def test_scratch_array(wave):
    """A private array indexed at run time: scratch loads/stores through the swizzled per-lane layout."""
    n = 120                                      # blocks of 40: partly filled waves
    r = rng(10)
    a = r.integers(-1000, 1000, n).astype(np.int32)
    idx = r.integers(0, 1000, n).astype(np.int32)
    (_, _, out), _ = run_cl("scratch_array.cl", "scratch_array", [a, idx, np.zeros(n, np.int32)],
                            grid=(3, 1, 1), block=(40, 1, 1), flags=wf(wave))
    k = np.arange(37)
    t = a[:, None].astype(np.int64) * k + k * k
    want = np.array([t[i, (idx[i] + k) % 37].sum() for i in range(n)]).astype(np.int32)
    assert (out == want).all()


def test_divergent_loop():
    n = 256
    nn = rng(11).integers(1, 5000, n).astype(np.uint32)
    (_, out, acc), _ = run_cl("divergent_loop.cl", "divergent_loop",
                              [nn, np.zeros(n, np.uint32), np.zeros(n, np.uint32)], grid=(4, 1, 1), block=(64, 1, 1))
    for i in range(n):
        x, steps = int(nn[i]), 0
        while x != 1 and steps < 1000:
            x = 3 * x + 1 if x & 1 else x >> 1
            steps += 1
        s = 0
        for k in range(int(nn[i]) % 97):
            s = (s + k * k) & 0xFFFFFFFF if k & 1 else s ^ k
        assert out[i] == steps and acc[i] == s, i


# ---------------------------------------------------------------- integer ALU

def test_int_ops():
    n = 128
    r = rng(12)
    a = r.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = r.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    a[:4] = [0, -1, 1, -2**31]
    (_, _, o), _ = run_cl("int_ops.cl", "int_ops", [a, b, np.zeros(8 * n, np.int32)], grid=(2, 1, 1), block=(64, 1, 1))
    o = o.reshape(n, 8)
    A, B = a.astype(np.int64), b.astype(np.int64)
    ua = a.view(np.uint32).astype(np.int64)
    sh = b & 31
    want = np.stack([
        (A + B), (A * B), (A * B) >> 32, [bin(int(u)).count("1") for u in ua],
        [32 - int(u).bit_length() for u in ua], A >> sh,
        ((ua << sh) | (ua >> ((32 - sh) & 31))) & 0xFFFFFFFF,
        np.where(A < B, np.minimum(A, B), np.maximum(A, B)) ^ (A & ~B)], 1)
    assert (o == (want & 0xFFFFFFFF).astype(np.uint32).view(np.int32)).all()


def test_int64():
    n = 128
    r = rng(13)
    a = r.integers(-2**63, 2**63, n, dtype=np.int64)
    b = r.integers(-2**63, 2**63, n, dtype=np.int64)
    c = r.integers(-2**63, 2**63, n, dtype=np.int64)
    c[::7] = a[::7]
    (_, _, _, o), _ = run_cl("int64.cl", "int64", [a, b, c, np.zeros(4 * n, np.int64)], grid=(2, 1, 1),
                             block=(64, 1, 1))
    M = (1 << 64) - 1
    for i in range(n):
        x, y, z, s = int(a[i]), int(b[i]), int(c[i]), i & 63
        want = [(x * y + z) & M, ((x >> s) ^ (y << s)) & M, (x & M) >> s,
                (((x & M) * (y & M) >> 64) + (x < y) + 7 * (x == z)) & M]
        assert [int(v) & M for v in o[4 * i:4 * i + 4]] == want, i


def test_intdiv():
    n = 128
    r = rng(14)
    a = r.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = r.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b[:8] = [1, -1, 7, -7, 3, 2**31 - 1, -2**31, 65536]
    b[b == 0] = 5
    a64 = r.integers(-2**63, 2**63, n, dtype=np.int64)
    b64 = r.integers(-2**40, 2**40, n, dtype=np.int64)
    b64[b64 == 0] = 3
    b64[:4] = [1, -1, 2**62, -3]
    a[0], b[0] = -2**31, 1
    outs, _ = run_cl("intdiv.cl", "intdiv", [a, b, *(np.zeros(n, np.int32),) * 2, *(np.zeros(n, np.uint32),) * 2,
                                             a64, b64,
                                             np.zeros(2 * n, np.int64), np.zeros(2 * n, np.uint64)],
                     grid=(2, 1, 1), block=(64, 1, 1))
    q, rr, uq, ur, q64, uq64 = outs[2], outs[3], outs[4], outs[5], outs[8], outs[9]
    tq = np.trunc(a.astype(F64) / b).astype(np.int64)
    assert (q == tq.astype(np.int32)).all() and (rr == (a - tq * b).astype(np.int32)).all()
    ua, ub = a.view(np.uint32), b.view(np.uint32)
    assert (uq == ua // ub).all() and (ur == ua % ub).all()
    for i in range(n):
        x, y = int(a64[i]), int(b64[i])
        qq = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        assert (int(q64[2 * i]), int(q64[2 * i + 1])) == (qq, x - qq * y), i
        ux, uy = x % (1 << 64), y % (1 << 64)
        assert (int(uq64[2 * i]), int(uq64[2 * i + 1])) == (ux // uy, ux % uy), i


# ---------------------------------------------------------------- floating point

def test_vec_fma():
    n = 100
    r = rng(15)
    a, b, c = (r.standard_normal((128, 4)).astype(F32) for _ in range(3))
    (_, _, cout, d), _ = run_cl("vec_fma.cl", "vec_fma", [a, b, c, np.zeros(128, F32), n], grid=(2, 1, 1),
                                block=(64, 1, 1))
    want = fma32(fma32(a, b, c), F32(2), -a)
    assert_bits(cout[:n], want[:n], "c")
    assert (cout[n:] == c[n:]).all()
    assert_bits(d[:n], fma32(a[:n, 0], b[:n, 1], a[:n, 3]), "d")


def test_select_cmp():
    n = 128
    r = rng(16)
    a, b = r.standard_normal(n).astype(F32), r.standard_normal(n).astype(F32)
    b[:8] = [np.nan, 1.0, -0.0, np.inf, 2.0, -np.inf, 0.0, 5.0]
    a[:8] = [1.0, np.nan, 0.0, np.inf, 2.0, 3.0, -0.0, -np.inf]
    (_, _, o, m), _ = run_cl("select_cmp.cl", "select_cmp", [a, b, np.zeros(n, F32), np.zeros(n, np.int32)],
                             grid=(2, 1, 1), block=(64, 1, 1))
    with np.errstate(invalid="ignore"):
        sel = np.where(a > b, a, b)
        t = fma32(sel, np.where(np.isnan(a), F32(0), F32(1)), np.where(a == b, F32(1), F32(0)))
        want = (t + np.abs(b)).astype(F32) + np.copysign(a, b)
        cnt = (a < b).astype(int) + (a <= b) + (a >= b) + np.isinf(a) + np.isfinite(b)
    assert_bits(o, want.astype(F32), "o")
    assert (m == cnt).all()


def test_fdiv_sqrt():
    n = 128
    r = rng(17)
    a = np.abs(r.standard_normal(n)).astype(F32) * F32(1e3)
    b = r.standard_normal(n).astype(F32)
    a[:4] = [1.0, 2.0, 1e-38, 3e38]
    (_, _, q, s, d, ds), _ = run_cl("fdiv_sqrt.cl", "fdiv_sqrt", [a, b, np.zeros(n, F32), np.zeros(n, F32),
                                                                 np.zeros(n, F64), np.zeros(n, F64)],
                                    grid=(2, 1, 1), block=(64, 1, 1), flags=("-cl-fp32-correctly-rounded-divide-sqrt",))
    with np.errstate(over="ignore"):
        assert_bits(q, a / b, "a/b")
    assert_bits(s, np.sqrt(a), "sqrt")
    assert_bits(d, a.astype(F64) / b.astype(F64), "f64 div")
    assert_bits(ds, np.sqrt(a.astype(F64)), "f64 sqrt")


def test_f64_math():
    n = 128
    r = rng(18)
    a, b, c = (r.standard_normal(n) * 100 for _ in range(3))
    (_, _, _, o, f, g), _ = run_cl("f64_math.cl", "f64_math",
                                   [a, b, c, np.zeros(n, F64), np.zeros(n, F32), np.zeros(n, F64)],
                                   grid=(2, 1, 1), block=(64, 1, 1))
    t = fma64(a, b, fma64(a, b, c)) - c
    t = np.fmin(a, b) + t
    t = np.floor(a) + t
    t = t + np.trunc(b).astype(np.int32).astype(F64)
    t = np.trunc(c) + t
    assert_bits(o, t, "o")
    assert_bits(f, a.astype(F32), "f")
    assert_bits(g, c.astype(F32).astype(F64), "g")


def test_half_math():
    n = 128
    r = rng(19)
    a, b, c = (r.uniform(-8, 8, n).astype(F16) for _ in range(3))
    src = (r.standard_normal(n) * 100).astype(F32)
    outs, _ = run_cl("half_math.cl", "half_math", [a, b, c, np.zeros(n, F16), np.zeros(n, F32), np.zeros(2 * n, F16),
                                                   np.zeros(n, np.int16), np.zeros(n, F16), src],
                     grid=(2, 1, 1), block=(64, 1, 1))
    o, f, h2, i16, fromf = outs[3], outs[4], outs[5].reshape(n, 2), outs[6], outs[7]
    rr = fma16(-c, F16(0.5), fma16(a, b, fma16(a, b, c)))
    assert_bits(o, np.where(rr > a, rr, np.where(a > b, a, b)), "o")
    assert_bits(f, a.astype(F32) * b.astype(F32), "f")
    p, q = np.stack([a, b], 1), np.stack([b, c], 1)
    assert_bits(h2, fma16(p, q, p), "h2")
    assert (i16 == np.trunc(a.astype(F32)).astype(np.int16)).all()
    assert_bits(fromf, src.astype(F16), "fromf")


def test_bf16():
    n = 128
    r = rng(20)
    xs = (r.standard_normal(n) * 10).astype(F32)
    ys = (r.standard_normal(n) * 10).astype(F32)
    a, b = (xs.view(np.uint32) >> 16).astype(np.uint16), (ys.view(np.uint32) >> 16).astype(np.uint16)
    (_, _, out, f), _ = run_cl("bf16.cl", "bf16", [a, b, np.zeros(n, np.uint16), np.zeros(n, F32)],
                               grid=(2, 1, 1), block=(64, 1, 1))
    x, y = (a.astype(np.uint32) << 16).view(F32), (b.astype(np.uint32) << 16).view(F32)
    p = fma32(x, y, F32(1)).view(np.uint32).astype(np.uint64)
    want = ((p + 0x7FFF + ((p >> 16) & 1)) >> 16).astype(np.uint16)
    assert (out == want).all()
    assert_bits(f, x, "f")


def test_transcendental():
    """exp/log/rsqrt/exp2*log2 within a relative error of 2^-20 (the approximations' bound)."""
    n = 128
    x = rng(21).uniform(-10, 10, n).astype(F32)
    (_, e, lg, rs, nn), _ = run_cl("transcendental.cl", "transcendental", [x, *(np.zeros(n, F32),) * 4],
                                   grid=(2, 1, 1), block=(64, 1, 1))
    p = np.abs(x.astype(F64)) + 1
    x64 = x.astype(F64)
    for got, want in ((e, np.exp(x64)), (lg, np.log(p)), (rs, 1 / np.sqrt(p)), (nn, np.exp2(x64) * np.log2(p))):
        rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-30)
        assert rel.max() <= 2.0**-20, rel.max()


def test_dpp():
    n = 64
    x = rng(22).integers(-1000, 1000, n).astype(np.int32)
    (_, a, b, c), _ = run_cl("dpp.cl", "dpp", [x, *(np.zeros(n, np.int32),) * 3], grid=(1, 1, 1), block=(n, 1, 1))
    rows = x.reshape(-1, 16)
    want_a = np.concatenate([np.full((rows.shape[0], 1), -1), rows[:, :-1]], 1).ravel()
    assert (a == want_a).all()
    assert (b == x.reshape(-1, 4)[:, [1, 0, 3, 2]].ravel()).all()
    assert (c == np.roll(rows, 4, axis=1).ravel()).all()

