"""Vector ALU unit tests: single instructions assembled by llvm-mc-19, decoded and executed on a small WaveState,
compared with numpy or exact rational references.

Instructions whose semantics RDNA3, RDNA3.5 and RDNA4 share run once per -mcpu in MCPUS, through that target's
decoder and front end (amdq.sim.shader.isa.for_isa); a test whose encoding or semantics belong to one family
names its targets with @targets(...) (RDNA4-only ones live in test_rdna4.py), and tests of the fp helpers alone
run once."""
from __future__ import annotations

import re
import subprocess
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from amdq.errors import UnsupportedInstruction
from amdq.hw.targets import get_target
from amdq.sim.shader import fp
from amdq.sim.shader.wave import WaveState
from amdq.sim.shader.isa import for_isa
from clang import tool

U16, U32, U64, F16, F32, F64 = np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64
VCC, EXEC = 106, 126

MCPUS = ("gfx1100", "gfx1151", "gfx1200", "gfx1201")      # RDNA3, RDNA3.5, RDNA4 (two boards)
RDNA3 = ("gfx1100", "gfx1151")
_target = {"mcpu": "gfx1100"}                             # the -mcpu of the running test (fixture `mcpu`)


def targets(*mcpus: str):
    """Run a test only for these -mcpu values (default: every one of MCPUS)."""
    def mark(fn):
        fn.mcpus = mcpus
        return fn
    return mark


def pytest_generate_tests(metafunc) -> None:
    if "mcpu" in metafunc.fixturenames:
        metafunc.parametrize("mcpu", getattr(metafunc.function, "mcpus", MCPUS), indirect=True)


@pytest.fixture(autouse=True)
def mcpu(request) -> str:
    """The target whose assembler, decoder and front end the test's instructions go through."""
    _target["mcpu"] = request.param
    yield request.param
    _target["mcpu"] = "gfx1100"


def front():
    """The running target's ISA front end (decoder and handler table)."""
    return for_isa(get_target(_target["mcpu"]).isa)


@lru_cache(maxsize=None)
def _assemble(text: str, attrs: str, mcpu: str) -> bytes:
    args = [tool("llvm-mc"), "-triple=amdgcn", f"-mcpu={mcpu}", "--show-encoding"] + ([f"-mattr={attrs}"] if attrs else [])
    r = subprocess.run(args, input=text, capture_output=True, text=True)
    m = re.search(r"encoding: \[(.*)\]", r.stdout)
    assert m, r.stderr
    return bytes(int(x, 16) for x in m.group(1).split(","))


def assemble(text: str, attrs: str = "") -> bytes:
    """llvm-mc-19's encoding of one instruction for the running target."""
    return _assemble(text, attrs, _target["mcpu"])


def inst(text: str, attrs: str = "", wave64: bool = False):
    a = attrs + (",+wavefrontsize64" if wave64 else "")
    return front().decode(assemble(text, a.strip(",")) + bytes(8), 0, 0, wave64)


def build(i):
    """The running target's handler for a decoded instruction."""
    return front().build(i)


def wave(n: int = 1, lanes: int = 32, nv: int = 32, mode: int = 0xF0 | 1 << 9) -> WaveState:
    w = WaveState(n, lanes, nv)
    w.s[EXEC] = 0xFFFFFFFF
    if lanes == 64:
        w.s[EXEC + 1] = 0xFFFFFFFF
    w.refresh_exec(slice(None))
    w.mode[:] = mode
    return w


def run(text: str, w: WaveState | None = None, attrs: str = "", **regs) -> WaveState:
    """Execute one instruction; keyword regs v<N>=array/scalar, s<N>=value set registers first."""
    w = w or wave()
    for k, v in regs.items():
        r = int(k[1:])
        if k[0] == "v":
            w.v[r] = np.asarray(v).view(U32) if np.asarray(v).dtype.itemsize == 4 else np.asarray(v, U32)
        else:
            w.s[r] = np.asarray(v).view(U32) if np.asarray(v).dtype.itemsize == 4 else np.asarray(v, U32)
    w.refresh_exec(slice(None))
    build(inst(text, attrs, w.lanes == 64))(w, slice(None))
    return w


def f32bits(x) -> np.ndarray:
    return np.asarray(x, F32).view(U32)


def lane_bits(w: WaveState, reg: int = VCC) -> int:
    return int(w.s[reg][0]) | (int(w.s[reg + 1][0]) << 32 if w.lanes == 64 else 0)


def exact_round(q: Fraction, dt) -> float:
    """Round a rational to dt (nearest even) by bracketing candidates."""
    try:
        r = dt(float(q))
    except OverflowError:
        return dt(np.inf if q > 0 else -np.inf)
    if not np.isfinite(r):
        return r
    cands = [r, np.nextafter(r, dt(np.inf)), np.nextafter(r, dt(-np.inf))]
    ut = {2: U16, 4: U32, 8: U64}[np.dtype(dt).itemsize]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - q) if np.isfinite(v) else Fraction(10**400),
                                     int(np.array(v, dt).view(ut)) & 1))


def fma_ref(a, b, c, dt):
    out = []
    for x, y, z in zip(np.ravel(a).tolist(), np.ravel(b).tolist(), np.ravel(c).tolist()):
        if not all(np.isfinite([x, y, z])):
            out.append(dt(F64(x) * F64(y) + F64(z)))
            continue
        q = Fraction(x) * Fraction(y) + Fraction(z)
        out.append(dt(F64(x) * F64(y) + F64(z)) if q == 0 else exact_round(q, dt))
    return np.array(out, dt)


def same(a, b) -> bool:
    """Bitwise equality, any NaN matching any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    return bool(np.all((a.view({2: U16, 4: U32, 8: U64}[a.dtype.itemsize]) ==
                        b.view({2: U16, 4: U32, 8: U64}[b.dtype.itemsize])) | (np.isnan(a) & np.isnan(b))))


# ---------------------------------------------------------------- exact FMA

def _hard_fma_cases(dt, n, seed):
    rng = np.random.default_rng(seed)
    bits = {F16: 11, F32: 24, F64: 53}[dt]
    emax = {F16: 6, F32: 40, F64: 200}[dt]
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-emax, emax, n))).astype(dt)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-emax, emax, n))).astype(dt)
    p = a.astype(F64) * b.astype(F64)
    k = rng.integers(0, 4, n)
    # exact cancellation, near-cancellation, halfway points of the product, and independent addends
    half = np.exp2(np.floor(np.log2(np.abs(p) + 1e-300)) - bits)
    c = np.where(k == 0, -p, np.where(k == 1, -p * (1 + rng.standard_normal(n) * 2.0 ** -bits),
                 np.where(k == 2, half * rng.choice([-1, 1], n), rng.standard_normal(n) * np.exp2(rng.integers(-emax, emax, n)))))
    with np.errstate(all="ignore"):
        return a, b, c.astype(dt)


@targets("gfx1100")          # the fp helpers alone: no instruction
@pytest.mark.parametrize("dt,fn", [(F32, fp.fma32), (F16, fp.fma16), (F64, fp.fma64)])
def test_fma_exact_against_rationals(dt, fn):
    a, b, c = _hard_fma_cases(dt, 3000, 1)
    with np.errstate(all="ignore"):
        assert same(fn(a, b, c), fma_ref(a, b, c, dt))


@targets("gfx1100")          # the fp helpers alone: no instruction
def test_fma32_double_rounding_case():
    # a*b+c lies just above an f32 halfway point; rounding through f64 first would land on it and round to even
    a, b = F32(1 + 2.0 ** -23), F32(1 + 2.0 ** -23)     # a*b = 1 + 2^-22 + 2^-46
    c = F32(2.0 ** -24)                                 # sum = 1 + 2^-22 + 2^-24 + 2^-46
    r = fp.fma32(np.array([a]), np.array([b]), np.array([c]))[0]
    assert r == fma_ref([a], [b], [c], F32)[0] == F32(1 + 2.0 ** -22 + 2.0 ** -23)


@targets("gfx1100")          # the fp helpers alone: no instruction
@settings(max_examples=300, deadline=None)
@given(st.floats(width=32), st.floats(width=32), st.floats(width=32))
def test_fma32_hypothesis(x, y, z):
    a, b, c = (np.array([v], F32) for v in (x, y, z))
    with np.errstate(all="ignore"):
        assert same(fp.fma32(a, b, c), fma_ref(a, b, c, F32))


@targets("gfx1100")          # the fp helpers alone: no instruction
@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False), st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_fma64_hypothesis(x, y, z):
    a, b, c = (np.array([v], F64) for v in (x, y, z))
    with np.errstate(all="ignore"):
        assert same(fp.fma64(a, b, c), fma_ref(a, b, c, F64))


def test_v_fma_f32_instruction_and_modifiers():
    rng = np.random.default_rng(2)
    a, b, c = (rng.standard_normal(32).astype(F32) for _ in range(3))
    w = run("v_fma_f32 v3, -v0, |v1|, v2", v0=a, v1=b, v2=c)
    assert same(w.v[3][0].view(F32), fma_ref(-a, np.abs(b), c, F32))
    w = run("v_fmac_f32_e32 v2, v0, v1", v0=a, v1=b, v2=c)
    assert same(w.v[2][0].view(F32), fma_ref(a, b, c, F32))
    w = run("v_fma_f32 v3, v0, v1, v2 clamp", v0=a, v1=b, v2=c)
    assert same(w.v[3][0].view(F32), np.clip(np.nan_to_num(fma_ref(a, b, c, F32)), 0, 1))
    w = run("v_mul_f32_e64 v3, v0, v1 mul:2", v0=a, v1=b)
    assert same(w.v[3][0].view(F32), (a * b) * F32(2))


# ---------------------------------------------------------------- integer

def _u32(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(U32)
    x[:4] = [0, 1, 0xFFFFFFFF, 0x80000000]
    return x


INT_CASES = [
    ("v_add_nc_u32_e32 v3, v0, v1", lambda a, b, c: a + b),
    ("v_sub_nc_u32_e32 v3, v0, v1", lambda a, b, c: a - b),
    ("v_mul_lo_u32 v3, v0, v1", lambda a, b, c: a * b),
    ("v_mul_hi_u32 v3, v0, v1", lambda a, b, c: ((a.astype(U64) * b) >> U64(32)).astype(U32)),
    ("v_mul_hi_i32 v3, v0, v1", lambda a, b, c: ((a.view(np.int32).astype(np.int64) * b.view(np.int32)) >> 32).astype(U32)),
    ("v_mul_u32_u24_e32 v3, v0, v1", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF)),
    ("v_mul_hi_u32_u24_e32 v3, v0, v1", lambda a, b, c: (((a & 0xFFFFFF).astype(U64) * (b & 0xFFFFFF)) >> U64(32)).astype(U32)),
    ("v_mul_i32_i24_e32 v3, v0, v1", lambda a, b, c: ((a << 8).view(np.int32) >> 8) * ((b << 8).view(np.int32) >> 8)),
    ("v_mad_u32_u24 v3, v0, v1, v2", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c),
    ("v_lshlrev_b32_e32 v3, v0, v1", lambda a, b, c: b << (a & 31)),
    ("v_ashrrev_i32_e32 v3, v0, v1", lambda a, b, c: (b.view(np.int32) >> (a & 31).astype(np.int32)).view(U32)),
    ("v_bfe_u32 v3, v0, v1, v2", lambda a, b, c: np.array([(int(x) >> (int(y) & 31)) & ((1 << (int(z) & 31)) - 1)
                                                             for x, y, z in zip(a, b, c)], U32)),
    ("v_bfe_i32 v3, v0, v1, v2", lambda a, b, c: np.array([_bfe_i32(int(x), int(y) & 31, int(z) & 31) for x, y, z in zip(a, b, c)], U32)),
    ("v_bfi_b32 v3, v0, v1, v2", lambda a, b, c: (a & b) | (~a & c)),
    ("v_bfm_b32 v3, v0, v1", lambda a, b, c: ((U32(1) << (a & 31)) - U32(1)) << (b & 31)),
    ("v_alignbit_b32 v3, v0, v1, v2", lambda a, b, c: (((a.astype(U64) << U64(32)) | b) >> (c & 31).astype(U64)).astype(U32)),
    ("v_alignbyte_b32 v3, v0, v1, v2", lambda a, b, c: (((a.astype(U64) << U64(32)) | b) >> (8 * (c & 3)).astype(U64)).astype(U32)),
    ("v_bcnt_u32_b32 v3, v0, v1", lambda a, b, c: np.array([bin(int(x)).count("1") for x in a], U32) + b),
    ("v_clz_i32_u32_e32 v3, v0", lambda a, b, c: np.array([32 - int(x).bit_length() if x else 0xFFFFFFFF for x in a], U32)),
    ("v_ctz_i32_b32_e32 v3, v0", lambda a, b, c: np.array([(int(x) & -int(x)).bit_length() - 1 if x else 0xFFFFFFFF for x in a], U32)),
    ("v_cls_i32_e32 v3, v0", lambda a, b, c: np.array([_cls(int(x)) for x in a], U32)),
    ("v_bfrev_b32_e32 v3, v0", lambda a, b, c: np.array([int(f"{int(x):032b}"[::-1], 2) for x in a], U32)),
    ("v_med3_i32 v3, v0, v1, v2", lambda a, b, c: np.median(np.stack([a.view(np.int32), b.view(np.int32), c.view(np.int32)]).astype(np.int64), 0).astype(np.int32).view(U32)),
    ("v_med3_u32 v3, v0, v1, v2", lambda a, b, c: np.median(np.stack([a, b, c]).astype(np.int64), 0).astype(U32)),
    ("v_min3_u32 v3, v0, v1, v2", lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    ("v_max3_i32 v3, v0, v1, v2", lambda a, b, c: np.maximum(np.maximum(a.view(np.int32), b.view(np.int32)), c.view(np.int32)).view(U32)),
    ("v_sad_u8 v3, v0, v1, v2", lambda a, b, c: np.array([sum(abs((int(x) >> s & 255) - (int(y) >> s & 255)) for s in (0, 8, 16, 24)) for x, y in zip(a, b)], U32) + c),
    ("v_sad_u32 v3, v0, v1, v2", lambda a, b, c: np.array([abs(int(x) - int(y)) for x, y in zip(a, b)], U64).astype(U32) + c),
    ("v_xad_u32 v3, v0, v1, v2", lambda a, b, c: (a ^ b) + c),
    ("v_lshl_add_u32 v3, v0, v1, v2", lambda a, b, c: (a << (b & 31)) + c),
    ("v_add_nc_u32_e64 v3, v0, v1 clamp", lambda a, b, c: np.minimum(a.astype(U64) + b, 0xFFFFFFFF).astype(U32)),
    ("v_add_nc_i32 v3, v0, v1 clamp", lambda a, b, c: np.clip(a.view(np.int32).astype(np.int64) + b.view(np.int32), -2**31, 2**31 - 1).astype(np.int32).view(U32)),
    ("v_cvt_pk_u16_u32 v3, v0, v1", lambda a, b, c: np.minimum(a, 0xFFFF) | np.minimum(b, 0xFFFF) << U32(16)),
]


def _bfe_i32(x, o, n):
    if n == 0:
        return 0
    v = (x >> o) & ((1 << n) - 1) if o + n <= 32 else x >> o
    width = n if o + n <= 32 else 32 - o
    if v >> (width - 1) & 1:
        v -= 1 << width
    return v & 0xFFFFFFFF


def _cls(x):
    s = x >> 31
    for i in range(1, 32):
        if (x >> (31 - i)) & 1 != s:
            return i
    return 0xFFFFFFFF


@pytest.mark.parametrize("text,ref", INT_CASES, ids=[c[0].split()[0] for c in INT_CASES])
def test_integer_ops(text, ref):
    a, b, c = _u32(32, 3), _u32(32, 4), _u32(32, 5)
    if "bfe" in text:
        b, c = b & 63, c & 63
    w = run(text, v0=a, v1=b, v2=c)
    with np.errstate(all="ignore"):
        assert np.array_equal(w.v[3][0], np.asarray(ref(a, b, c)).astype(U32))


def test_perm_b32():
    a, b = _u32(32, 6), _u32(32, 7)
    sel = np.array([0x0C0D0809, 0x07060504, 0x03020100, 0x0A0B0E0F] * 8, U32)
    w = run("v_perm_b32 v3, v0, v1, v2", v0=a, v1=b, v2=sel)
    for x, y, s, got in zip(a, b, sel, w.v[3][0]):
        data = int(x) << 32 | int(y)
        exp = 0
        for i in range(4):
            k = int(s) >> 8 * i & 255
            byte = (data >> 8 * k & 255 if k < 8 else 255 * (data >> (15, 31, 47, 63)[k - 8] & 1) if k < 12
                    else 0 if k == 12 else 255)
            exp |= byte << 8 * i
        assert int(got) == exp


def test_mad_u64_u32_and_i64_i32():
    a, b = _u32(32, 8), _u32(32, 9)
    c = np.random.default_rng(10).integers(0, 2**64, 32, dtype=np.uint64)
    w = run("v_mad_u64_u32 v[4:5], s10, v0, v1, v[2:3]", v0=a, v1=b, v2=(c & U64(0xFFFFFFFF)).astype(U32),
            v3=(c >> U64(32)).astype(U32))
    full = [int(x) * int(y) + int(z) for x, y, z in zip(a, b, c)]
    got = w.v[4][0].astype(U64) | w.v[5][0].astype(U64) << U64(32)
    assert [int(g) for g in got] == [f & (2**64 - 1) for f in full]
    assert int(w.s[10][0]) == sum(1 << i for i, f in enumerate(full) if f >> 64)
    w = run("v_mad_i64_i32 v[4:5], s10, v0, v1, v[2:3]", v0=a, v1=b, v2=(c & U64(0xFFFFFFFF)).astype(U32),
            v3=(c >> U64(32)).astype(U32))
    sx = lambda v, n: v - (1 << n) if v >> (n - 1) else v  # noqa: E731
    full = [sx(int(x), 32) * sx(int(y), 32) + sx(int(z), 64) for x, y, z in zip(a, b, c)]
    got = w.v[4][0].astype(U64) | w.v[5][0].astype(U64) << U64(32)
    assert [int(g) for g in got] == [f & (2**64 - 1) for f in full]


def test_carry_chain():
    a, b = _u32(32, 11), _u32(32, 12)
    w = run("v_add_co_u32 v2, vcc_lo, v0, v1", v0=a, v1=b)
    carry = [(int(x) + int(y)) >> 32 for x, y in zip(a, b)]
    assert lane_bits(w) == sum(c << i for i, c in enumerate(carry))
    w = run("v_add_co_ci_u32_e32 v3, vcc_lo, v0, v1, vcc_lo", w, v0=a, v1=b)
    assert [int(x) for x in w.v[3][0]] == [(int(x) + int(y) + c) & 0xFFFFFFFF for x, y, c in zip(a, b, carry)]
    w = run("v_sub_co_u32 v2, s5, v0, v1", v0=a, v1=b)
    assert int(w.s[5][0]) == sum(1 << i for i, (x, y) in enumerate(zip(a, b)) if x < y)
    w = run("v_subrev_co_ci_u32_e64 v3, s6, v0, v1, s5", w)
    bor = [int(x) < int(y) for x, y in zip(a, b)]
    assert [int(v) for v in w.v[3][0]] == [(int(y) - int(x) - c) & 0xFFFFFFFF for x, y, c in zip(a, b, bor)]


def test_mbcnt_and_lane_ops():
    w = run("v_mbcnt_lo_u32_b32 v1, -1, 0")
    assert list(w.v[1][0]) == list(range(32))
    w = wave(1, 64)
    w = run("v_mbcnt_lo_u32_b32 v1, -1, 0", w)
    w = run("v_mbcnt_hi_u32_b32 v1, -1, v1", w)
    assert list(w.v[1][0]) == list(range(64))
    w = run("v_readlane_b32 s3, v0, 5", v0=np.arange(32, dtype=U32) * 3)
    assert w.s[3][0] == 15
    w = run("v_writelane_b32 v0, s4, 7", w, s4=99)
    assert w.v[0][0][7] == 99 and w.v[0][0][6] == 18
    w = wave()
    w.s[EXEC] = 0b11000
    w.refresh_exec(slice(None))
    build(inst("v_readfirstlane_b32 s2, v0"))(w, slice(None)) if False else None
    w.v[0][0] = np.arange(32) + 100
    build(inst("v_readfirstlane_b32 s2, v0"))(w, slice(None))
    assert w.s[2][0] == 103


# ---------------------------------------------------------------- compares, class, EXEC

def test_cmp_and_cmpx_write_exec():
    a = np.arange(32, dtype=np.int32) - 16
    w = run("v_cmp_gt_i32_e32 vcc_lo, 0, v0", v0=a)
    assert lane_bits(w) == sum(1 << i for i in range(16))
    w = run("v_cmpx_gt_i32_e32 0, v0", v0=a)
    assert lane_bits(w, EXEC) == sum(1 << i for i in range(16)) and w.em[0].sum() == 16
    assert lane_bits(w) == 0                                  # gfx10+: v_cmpx writes EXEC only
    w = run("v_cmpx_lt_i32_e64 v0, 0", v0=a)
    assert lane_bits(w, EXEC) == sum(1 << i for i in range(16))
    # inactive lanes compare as 0
    w = run("v_cmp_eq_u32_e64 s8, v0, v0", w, v0=a)
    assert int(w.s[8][0]) == sum(1 << i for i in range(16))


def test_float_compares_nan():
    a = np.array([1, np.nan, 2, -0.0] * 8, F32)
    b = np.array([np.nan, 1, 2, 0.0] * 8, F32)
    for op, fn in (("lt", lambda x, y: x < y), ("neq", lambda x, y: ~(x == y)), ("u", lambda x, y: np.isnan(x) | np.isnan(y)),
                   ("nge", lambda x, y: ~(x >= y)), ("eq", lambda x, y: x == y), ("lg", lambda x, y: (x < y) | (x > y))):
        w = run(f"v_cmp_{op}_f32_e64 s4, v0, v1", v0=a, v1=b)
        assert int(w.s[4][0]) == sum(1 << i for i, t in enumerate(fn(a, b)) if t), op


CLASS_VALUES = [(0x7F800001, 0), (0x7FC00000, 1), (0xFF800000, 2), (0xBF800000, 3), (0x80000001, 4), (0x80000000, 5),
                (0x00000000, 6), (0x00000001, 7), (0x3F800000, 8), (0x7F800000, 9)]


@pytest.mark.parametrize("bit", range(10))
def test_cmp_class_f32_every_bit(bit):
    vals = np.array([v for v, _ in CLASS_VALUES] * 4, U32)[:32]
    w = run("v_cmp_class_f32_e64 s4, v0, v1", wave(mode=0), v0=vals, v1=np.full(32, 1 << bit, U32))
    exp = sum(1 << i for i, v in enumerate(vals.tolist()) if dict(CLASS_VALUES)[v] == bit)
    assert int(w.s[4][0]) == exp


def test_cmp_class_f64_f16():
    d = np.array([np.inf, -np.inf, 5e-324, -1.0, 0.0, -0.0, np.nan, 1.0] * 4, F64)
    lo, hi = d.view(U64) & U64(0xFFFFFFFF), d.view(U64) >> U64(32)
    w = run("v_cmp_class_f64_e64 s4, v[0:1], v2", v0=lo.astype(U32), v1=hi.astype(U32), v2=np.full(32, 0x3FF, U32))
    assert int(w.s[4][0]) == 0xFFFFFFFF
    w = run("v_cmp_class_f64_e64 s4, v[0:1], v2", v0=lo.astype(U32), v1=hi.astype(U32), v2=np.full(32, 1 << 7, U32))
    assert int(w.s[4][0]) == sum(1 << i for i in range(2, 32, 8))
    h = np.array([0x0001, 0x8001, 0x7C00, 0x3C00] * 8, U32)
    w = run("v_cmp_class_f16_e64 s4, v0, v1", v0=h, v1=np.full(32, (1 << 7) | (1 << 4), U32))
    assert int(w.s[4][0]) == sum(3 << i for i in range(0, 32, 4))


# ---------------------------------------------------------------- float semantics

def test_min_max_zero_and_nan():
    a = np.array([-0.0, 0.0, np.nan, 1.0, np.nan, -np.inf] * 6, F32)[:32]
    b = np.array([0.0, -0.0, 2.0, np.nan, np.nan, 3.0] * 6, F32)[:32]
    w = run("v_max_f32_e32 v2, v0, v1", v0=a, v1=b)
    got = w.v[2][0].view(F32)
    assert same(got[:6], np.array([0.0, 0.0, 2.0, 1.0, np.nan, 3.0], F32))
    w = run("v_min_f32_e32 v2, v0, v1", v0=a, v1=b)
    got = w.v[2][0].view(F32)
    assert same(got[:6], np.array([-0.0, -0.0, 2.0, 1.0, np.nan, -np.inf], F32))


@targets(*RDNA3)
def test_min_max_snan_ieee_mode():
    """RDNA3's MODE.IEEE quiets a signaling NaN operand into the result (gfx12 has no IEEE bit and returns the
    number: test_rdna4.test_signaling_nan_differs_from_rdna3_ieee_mode)."""
    snan = np.full(32, 0x7F800001, U32).view(F32)
    w = run("v_max_f32_e32 v2, v0, v1", v0=snan, v1=np.ones(32, F32))
    assert w.v[2][0][0] == 0x7FC00001
    w = run("v_max_f32_e32 v2, v0, v1", wave(mode=0xF0), v0=snan, v1=np.ones(32, F32))
    assert w.v[2][0][0] == 0x3F800000


def test_med3_f32():
    rng = np.random.default_rng(13)
    a, b, c = (rng.standard_normal(32).astype(F32) for _ in range(3))
    w = run("v_med3_f32 v3, v0, v1, v2", v0=a, v1=b, v2=c)
    assert same(w.v[3][0].view(F32), np.median(np.stack([a, b, c]), 0).astype(F32))
    a[0] = np.nan
    w = run("v_med3_f32 v3, v0, v1, v2", v0=a, v1=b, v2=c)
    assert w.v[3][0].view(F32)[0] == min(b[0], c[0])


def test_conversions():
    x = np.array([1.5, -1.5, 2.5, -2.7, 3e9, -3e9, np.nan, np.inf, -np.inf, 0.49999997, 1e-40, -0.0] * 3, F32)[:32]
    w = run("v_cvt_i32_f32_e32 v1, v0", v0=x)
    exp = [0 if np.isnan(v) else int(np.clip(np.trunc(v), -2**31, 2**31 - 1)) for v in x.astype(F64)]
    assert list(w.v[1][0].view(np.int32)) == exp
    w = run("v_cvt_u32_f32_e32 v1, v0", v0=x)
    assert list(w.v[1][0]) == [0 if np.isnan(v) else int(np.clip(np.trunc(v), 0, 2**32 - 1)) for v in x.astype(F64)]
    w = run("v_cvt_nearest_i32_f32_e32 v1, v0", v0=x)
    assert list(w.v[1][0].view(np.int32)[:4]) == [2, -1, 3, -3]
    assert w.v[1][0].view(np.int32)[9] == 1                  # 0.49999997 + 0.5 rounds to 1.0 in f32
    w = run("v_cvt_floor_i32_f32_e32 v1, v0", v0=x)
    assert list(w.v[1][0].view(np.int32)[:4]) == [1, -2, 2, -3]
    y = np.random.default_rng(14).standard_normal(32).astype(F32) * F32(1000)
    y[:4] = [65520.0, 65519.99, 1e-8, -6e-8]
    w = run("v_cvt_f16_f32_e32 v1, v0", v0=y)
    assert same((w.v[1][0] & U32(0xFFFF)).astype(U16).view(F16), y.astype(F16))
    w = run("v_cvt_pk_rtz_f16_f32_e32 v1, v0, v2", v0=y, v2=np.full(32, 70000.0, F32))
    lo = (w.v[1][0] & U32(0xFFFF)).astype(U16).view(F16).astype(F64)
    assert np.all(np.abs(lo) <= np.abs(y.astype(F64))) and np.all((w.v[1][0] >> U32(16)) == 0x7BFF)
    w = run("v_cvt_f32_f64_e32 v2, v[0:1]", v0=(np.full(32, 1 / 3).view(U64) & U64(0xFFFFFFFF)).astype(U32),
            v1=(np.full(32, 1 / 3).view(U64) >> U64(32)).astype(U32))
    assert w.v[2][0].view(F32)[0] == F32(1 / 3)


def test_f16_preserves_high_half_and_opsel():
    a = np.full(32, 0xABCD3C00, U32)                         # low half 1.0
    b = np.full(32, 0x40000000, U32)                         # high half 2.0
    w = run("v_add_f16_e32 v2, v0, v0", v0=a, v2=np.full(32, 0x12340000, U32))
    assert w.v[2][0][0] == 0x12344000                        # 2.0 in the low half, high half kept
    w = run("v_fma_f16 v2, v0, v1, v3 op_sel:[0,1,0,1]", v0=a, v1=b, v3=np.full(32, 0x3800, U32),
            v2=np.full(32, 0x00005555, U32))
    assert w.v[2][0][0] == 0x41005555                        # 1.0 * 2.0 + 0.5 = 2.5 into the high half
    # VOP1/VOP2 true16 encodings reach the high half through bit 7 of the register number
    w = run("v_add_f16_e32 v2.h, v0.l, v1.h", attrs="+real-true16", v0=a, v1=b, v2=np.full(32, 0x00005555, U32))
    assert w.v[2][0][0] == 0x42005555


def test_denormal_mode_flushes():
    tiny = np.full(32, 1e-40, F32)
    w = run("v_add_f32_e32 v2, v0, v1", wave(mode=0xF0), v0=tiny, v1=np.zeros(32, F32))
    assert w.v[2][0].view(F32)[0] == F32(1e-40)
    w = run("v_add_f32_e32 v2, v0, v1", wave(mode=0x00), v0=tiny, v1=np.zeros(32, F32))
    assert w.v[2][0][0] == 0
    w = run("v_mul_f32_e32 v2, v0, v1", wave(mode=0x10), v0=np.full(32, 1e-20, F32), v1=np.full(32, 1e-20, F32))
    assert w.v[2][0][0] == 0                                 # inputs allowed, denormal output flushed
    w = run("v_cmp_class_f32_e64 s4, v0, 0x80", wave(mode=0x00), v0=tiny)
    assert int(w.s[4][0]) == 0xFFFFFFFF                      # the class test sees the denormal


def test_setreg_reads_the_sgpr_its_sdst_field_names():
    """s_setreg_b32 takes its value from the SGPR in its SOPK "sdst" field (it writes no SGPR)."""
    w = run("s_setreg_b32 hwreg(HW_REG_MODE, 4, 4), s2", wave(mode=0xF0), s2=0x3, s3=0xFF)
    assert int(w.mode[0]) == 0x30 and int(w.s[2][0]) == 0x3
    w = run("s_getreg_b32 s5, hwreg(HW_REG_MODE, 4, 4)", w)
    assert int(w.s[5][0]) == 0x3
    w = run("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 4), 0xf", w)
    assert int(w.mode[0]) == 0xF0
    w = run("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 28, 8), 0xff", w)    # bits past 31 are cut
    assert int(w.mode[0]) == 0xF00000F0


def test_frexp_ldexp_fract_rounding():
    x = np.array([1.0, -3.5, 1e-40, 0.0, np.inf, np.nan, -0.25, 1e30] * 4, F32)
    w = run("v_frexp_mant_f32_e32 v1, v0", v0=x)
    m, e = np.frexp(x)
    assert same(w.v[1][0].view(F32), np.where(np.isfinite(x), m, x))
    w = run("v_frexp_exp_i32_f32_e32 v1, v0", v0=x)
    assert list(w.v[1][0].view(np.int32)) == list(np.where(np.isfinite(x), e, 0))
    w = run("v_ldexp_f32 v1, v0, v2", v0=np.full(32, 1.5, F32), v2=np.arange(32, dtype=np.int32) * 10 - 160)
    assert same(w.v[1][0].view(F32), np.ldexp(np.full(32, 1.5), np.arange(32) * 10 - 160).astype(F32))
    w = run("v_fract_f32_e32 v1, v0", v0=np.array([-1e-10, 2.75, -2.25, 5.0] * 8, F32))
    assert same(w.v[1][0].view(F32)[:4], np.array([np.nextafter(F32(1), F32(0)), 0.75, 0.75, 0.0], F32))
    r = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999998] * 5 + [0, 0], F32)
    w = run("v_rndne_f32_e32 v1, v0", v0=r)
    assert same(w.v[1][0].view(F32), np.rint(r))


def test_f64_arith_and_ldexp():
    rng = np.random.default_rng(15)
    a, b = rng.standard_normal(32), rng.standard_normal(32)
    regs = dict(v0=(a.view(U64) & U64(M)).astype(U32), v1=(a.view(U64) >> U64(32)).astype(U32),
                v2=(b.view(U64) & U64(M)).astype(U32), v3=(b.view(U64) >> U64(32)).astype(U32))
    w = run("v_mul_f64 v[4:5], v[0:1], -v[2:3]", **regs)
    got = (w.v[4][0].astype(U64) | w.v[5][0].astype(U64) << U64(32)).view(F64)
    assert same(got, a * -b)
    w = run("v_ldexp_f64 v[4:5], v[0:1], -1074", **regs)
    got = (w.v[4][0].astype(U64) | w.v[5][0].astype(U64) << U64(32)).view(F64)
    assert same(got, np.ldexp(a, -1074))


M = 0xFFFFFFFF


# ---------------------------------------------------------------- division sequence

def _fdiv32(w, a, b):
    """LLVM's correctly rounded f32 division sequence, executed instruction by instruction."""
    prog = ["v_div_scale_f32 v2, null, v1, v1, v0", "v_div_scale_f32 v3, vcc_lo, v0, v1, v0", "v_rcp_f32_e32 v4, v2",
            "v_fma_f32 v5, -v2, v4, 1.0", "v_fmac_f32_e32 v4, v5, v4", "v_mul_f32_e32 v5, v3, v4",
            "v_fma_f32 v6, -v2, v5, v3", "v_fmac_f32_e32 v5, v6, v4", "v_fma_f32 v2, -v2, v5, v3",
            "v_div_fmas_f32 v2, v2, v4, v5", "v_div_fixup_f32 v2, v2, v1, v0"]
    w.v[0], w.v[1] = f32bits(a), f32bits(b)
    for t in prog:
        build(inst(t))(w, slice(None))
    return w.v[2][0].view(F32)


def test_f32_division_sequence_is_correctly_rounded():
    rng = np.random.default_rng(16)
    a = (rng.standard_normal(32 * 16) * np.exp2(rng.integers(-150, 128, 32 * 16))).astype(F32)
    b = (rng.standard_normal(32 * 16) * np.exp2(rng.integers(-150, 128, 32 * 16))).astype(F32)
    a[:10] = [0, 1, np.inf, np.nan, 1, -0.0, 3e38, 1e-45, 1, 1e-38]
    b[:10] = [0, 0, np.inf, 1, np.inf, 5, 1e-30, 3e38, 3, 1e30]
    for i in range(0, len(a), 32):
        got = _fdiv32(wave(), a[i:i + 32], b[i:i + 32])
        with np.errstate(all="ignore"):
            assert same(got, a[i:i + 32] / b[i:i + 32]), (a[i:i + 32], b[i:i + 32])


def test_div_scale_vcc():
    w = run("v_div_scale_f32 v2, vcc_lo, v0, v1, v0", v0=np.full(32, 1e38, F32), v1=np.full(32, 1e-10, F32))
    assert lane_bits(w) == M                                  # numerator far above the denominator: VCC set
    w = run("v_div_scale_f32 v2, vcc_lo, v0, v1, v0", v0=np.full(32, 3.0, F32), v1=np.full(32, 7.0, F32))
    assert lane_bits(w) == 0 and w.v[2][0].view(F32)[0] == 3.0


# ---------------------------------------------------------------- transcendental bounds

@pytest.mark.parametrize("op,ref,lo,hi", [("v_rcp_f32", lambda x: 1 / x, -1e30, 1e30), ("v_rsq_f32", lambda x: 1 / np.sqrt(x), 1e-30, 1e30),
                                          ("v_sqrt_f32", np.sqrt, 0, 1e30), ("v_exp_f32", np.exp2, -120, 120),
                                          ("v_log_f32", np.log2, 1e-30, 1e30), ("v_sin_f32", lambda x: np.sin(2 * np.pi * x), -200, 200),
                                          ("v_cos_f32", lambda x: np.cos(2 * np.pi * x), -200, 200)])
def test_transcendental_within_one_ulp(op, ref, lo, hi):
    rng = np.random.default_rng(17)
    x = (rng.uniform(lo, hi, 32) if hi - lo < 1000 else np.exp(rng.uniform(np.log(max(lo, 1e-30)), np.log(hi), 32))).astype(F32)
    w = run(f"{op}_e32 v1, v0", v0=x)
    got, exact = w.v[1][0].view(F32).astype(F64), ref(x.astype(F64))
    ulp = np.spacing(np.abs(exact).astype(F32)).astype(F64)
    assert np.all(np.abs(got - exact) <= ulp * 0.5 + np.abs(exact) * 2.0 ** -40 + 1e-45)


def test_exp2_in_fixed_steps():
    """valu_float.exp2_f64 (v_exp_f32's double, the JIT's too) within 2^-52 of 2^x (80-bit reference), so its f32
    rounding is the correctly rounded result; specials: NaN as it is, +-inf (clipped: past f32's range either way), the
    f32 overflow and underflow edges."""
    from amdq.sim.shader.valu_float import exp2_f64
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-150, 128, 100000), rng.uniform(-1, 1, 100000)]).astype(F32).astype(F64)
    exact = np.exp2(x.astype(np.longdouble))
    assert np.max(np.abs((exp2_f64(x) - exact) / exact)) < 2.0 ** -52
    e = exp2_f64(np.array([np.inf, -np.inf, 128.0, -149.0, -150.0, 0.0, -0.0, 1.0]))
    assert list(e[:2]) == [2.0 ** 200, 2.0 ** -200] and e[2] == 2.0 ** 128 and e[3] == 2.0 ** -149 and list(e[5:]) == [1, 1, 2]
    assert np.isnan(exp2_f64(np.array([np.nan]))[0])
    w = run("v_exp_f32_e32 v1, v0", v0=np.array([128.0, -126.0, -127.0, -149.0, 1.0, np.nan] * 5 + [0, 0], F32))
    got = w.v[1][0].view(F32)
    assert got[0] == np.inf and got[1] == 2.0 ** -126 and got[2] == 0 and got[3] == 0 and got[4] == 2 and np.isnan(got[5])


def test_transcendental_specials():
    x = np.array([0.0, -0.0, np.inf, -1.0, np.nan, 1e-40, 300.0, -np.inf] * 4, F32)
    assert same(run("v_rcp_f32_e32 v1, v0", v0=x).v[1][0].view(F32)[:3], np.array([np.inf, -np.inf, 0.0], F32))
    lg = run("v_log_f32_e32 v1, v0", v0=x).v[1][0].view(F32)
    assert lg[0] == -np.inf and lg[1] == -np.inf and lg[2] == np.inf and np.isnan(lg[3]) and lg[5] == -np.inf
    s = run("v_sin_f32_e32 v1, v0", v0=x).v[1][0].view(F32)
    assert s[6] == 0 and np.isnan(s[2]) and s[1] == 0 and np.signbit(s[1])
    big = np.full(32, -3.4028235e38, F32)                     # a whole number of turns
    assert run("v_sin_f32_e32 v1, v0", v0=big).v[1][0][0] == 0
    assert run("v_cos_f32_e32 v1, v0", v0=big).v[1][0].view(F32)[0] == 1
    assert run("v_sin_f32_e32 v1, v0", v0=np.full(32, 0.25, F32)).v[1][0].view(F32)[0] == 1


# ---------------------------------------------------------------- DPP

def _dpp(text, n_lanes=32, bound=False, exec_mask=None, old=0x7777):
    w = wave(1, n_lanes)
    if exec_mask is not None:
        w.s[EXEC] = exec_mask & M
        if n_lanes == 64:
            w.s[EXEC + 1] = exec_mask >> 32
        w.refresh_exec(slice(None))
    w.v[0][0] = np.arange(n_lanes) + 100
    w.v[1][0] = old
    build(inst(text, wave64=n_lanes == 64))(w, slice(None))
    return w.v[1][0].astype(np.int64)


def _expect(src, valid, writable=None, bound=False, old=0x7777, active=None):
    n = len(src)
    out = np.where(valid, np.asarray(src) + 100, 0 if bound else old)
    written = np.asarray(valid) | bound
    if writable is not None:
        written = written & writable
    if active is not None:
        written = written & active
    return np.where(written, out, old)


@pytest.mark.parametrize("ctrl,srcfn", [
    ("quad_perm:[1,0,3,2]", lambda l: (l & ~3) + ([1, 0, 3, 2][l & 3], True)[0]),
    ("row_mirror", lambda l: (l & ~15) + 15 - (l & 15)),
    ("row_half_mirror", lambda l: (l & ~7) + 7 - (l & 7)),
    ("row_ror:5", lambda l: (l & ~15) + (((l & 15) - 5) & 15)),
    ("row_share:3", lambda l: (l & ~15) + 3),
    ("row_xmask:6", lambda l: (l & ~15) + ((l & 15) ^ 6)),
])
def test_dpp16_permutations(ctrl, srcfn):
    lanes = np.arange(32)
    src = np.array([srcfn(int(x)) for x in lanes])
    assert np.array_equal(_dpp(f"v_mov_b32_dpp v1, v0 {ctrl} row_mask:0xf bank_mask:0xf"), src + 100)


@pytest.mark.parametrize("bc", [False, True])
def test_dpp16_shifts_bound_ctrl(bc):
    l = np.arange(32)
    b = " bound_ctrl:1" if bc else ""
    got = _dpp(f"v_mov_b32_dpp v1, v0 row_shl:3 row_mask:0xf bank_mask:0xf{b}")
    assert np.array_equal(got, _expect(np.minimum((l & 15) + 3, 15) + (l & ~15), (l & 15) + 3 < 16, bound=bc))
    got = _dpp(f"v_mov_b32_dpp v1, v0 row_shr:1 row_mask:0xf bank_mask:0xf{b}")
    assert np.array_equal(got, _expect(np.maximum((l & 15) - 1, 0) + (l & ~15), (l & 15) >= 1, bound=bc))


def test_dpp16_masks_and_inactive_sources():
    l = np.arange(64)
    got = _dpp("v_mov_b32_dpp v1, v0 quad_perm:[0,1,2,3] row_mask:0x5 bank_mask:0x3", 64)
    writable = (np.array([1, 0, 1, 0])[l >> 4] == 1) & (((l >> 2) & 3) < 2)
    assert np.array_equal(got, _expect(l, np.ones(64, bool), writable))
    # an inactive source lane is invalid unless fetch-inactive is set: not written, or 0 with bound_ctrl
    ex = 0xFFFF_FFFF_FFFF_FFFF & ~(1 << 4)
    got = _dpp("v_mov_b32_dpp v1, v0 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf", 64, exec_mask=ex)
    active = np.ones(64, bool)
    active[4] = False
    assert np.array_equal(got, _expect(l ^ 1, (l ^ 1) != 4, active=active))
    got = _dpp("v_mov_b32_dpp v1, v0 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf bound_ctrl:1", 64, exec_mask=ex)
    assert np.array_equal(got, _expect(l ^ 1, (l ^ 1) != 4, bound=True, active=active))
    got = _dpp("v_mov_b32_dpp v1, v0 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf fi:1", 64, exec_mask=ex)
    assert np.array_equal(got, _expect(l ^ 1, np.ones(64, bool), active=active))


def test_dpp8_and_dpp_arith_with_modifiers():
    sel = [7, 6, 5, 4, 3, 2, 1, 0]
    got = _dpp(f"v_mov_b32_dpp v1, v0 dpp8:[{','.join(map(str, sel))}]")
    l = np.arange(32)
    assert np.array_equal(got, (l & ~7) + np.array(sel)[l & 7] + 100)
    w = wave()
    x = np.arange(32, dtype=F32)
    w.v[0][0], w.v[2][0] = f32bits(x), f32bits(np.full(32, 0.5, F32))
    build(inst("v_add_f32_dpp v1, -v0, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1"))(w, slice(None))
    exp = np.where((l & 15) >= 1, -x[np.maximum(l - 1, 0)], -0.0) + F32(0.5)
    assert same(w.v[1][0].view(F32), exp.astype(F32))


# ---------------------------------------------------------------- VOP3P and VOPD

def _pk(lo, hi):
    return np.asarray(lo, F16).view(U16).astype(U32) | np.asarray(hi, F16).view(U16).astype(U32) << U32(16)


def _unpk(u):
    return (u & U32(0xFFFF)).astype(U16).view(F16), (u >> U32(16)).astype(U16).view(F16)


def test_pk_fma_f16_opsel_neg():
    rng = np.random.default_rng(18)
    a, b, c, d, e, f = (rng.standard_normal(32).astype(F16) for _ in range(6))
    w = run("v_pk_fma_f16 v3, v0, v1, v2", v0=_pk(a, b), v1=_pk(c, d), v2=_pk(e, f))
    lo, hi = _unpk(w.v[3][0])
    assert same(lo, fma_ref(a, c, e, F16)) and same(hi, fma_ref(b, d, f, F16))
    w = run("v_pk_fma_f16 v3, v0, v1, v2 op_sel:[1,0,0] op_sel_hi:[0,1,1] neg_lo:[0,1,0] neg_hi:[0,0,1]",
            v0=_pk(a, b), v1=_pk(c, d), v2=_pk(e, f))
    lo, hi = _unpk(w.v[3][0])
    assert same(lo, fma_ref(b, -c, e, F16)) and same(hi, fma_ref(a, d, -f, F16))
    w = run("v_pk_add_f16 v3, v0, v1", v0=_pk(a, b), v1=_pk(c, d))
    lo, hi = _unpk(w.v[3][0])
    assert same(lo, (a.astype(F64) + c).astype(F16)) and same(hi, (b.astype(F64) + d).astype(F16))


def test_pk_integer_and_dot():
    rng = np.random.default_rng(19)
    a, b = (rng.integers(0, 2**32, 32, dtype=np.uint64).astype(U32) for _ in range(2))
    w = run("v_pk_add_u16 v3, v0, v1", v0=a, v1=b)
    assert np.array_equal(w.v[3][0], ((a & 0xFFFF) + (b & 0xFFFF)) & 0xFFFF | (((a >> 16) + (b >> 16)) & 0xFFFF) << 16)
    w = run("v_pk_add_u16 v3, v0, v1 clamp", v0=a, v1=b)
    assert np.array_equal(w.v[3][0], np.minimum((a & 0xFFFF) + (b & 0xFFFF), 0xFFFF) | np.minimum((a >> 16) + (b >> 16), 0xFFFF) << 16)
    w = run("v_dot4_u32_u8 v3, v0, v1, v2", v0=a, v1=b, v2=np.full(32, 7, U32))
    exp = [7 + sum((int(x) >> s & 255) * (int(y) >> s & 255) for s in (0, 8, 16, 24)) for x, y in zip(a, b)]
    assert list(w.v[3][0]) == exp
    w = run("v_dot4_i32_iu8 v3, v0, v1, v2 neg_lo:[1,1,0]", v0=a, v1=b, v2=np.full(32, 7, U32))
    sb = lambda v: v - 256 if v > 127 else v  # noqa: E731
    exp = [(7 + sum(sb(int(x) >> s & 255) * sb(int(y) >> s & 255) for s in (0, 8, 16, 24))) & M for x, y in zip(a, b)]
    assert list(w.v[3][0]) == exp
    h = rng.standard_normal((4, 32)).astype(F16)
    w = run("v_dot2_f32_f16 v3, v0, v1, v2", v0=_pk(h[0], h[1]), v1=_pk(h[2], h[3]), v2=np.full(32, 0.25, F32))
    exp = (h[0].astype(F64) * h[2] + h[1].astype(F64) * h[3] + 0.25).astype(F32)
    assert same(w.v[3][0].view(F32), exp)


def test_bf16_inline_constants():
    """Inline float constants in a BF16 operand are bf16 values (LLVM 19 encodes 0x3F80 there as inline 1.0 and
    0x3E22 as 1/(2pi)): v_dot2_bf16_bf16 with C = 1.0, then 1/(2pi), against the bf16 sums."""
    a = np.full(32, 0x4000_3F80, U32)             # (1.0, 2.0) in bf16
    b = np.full(32, 0x3F00_4040, U32)             # (3.0, 0.5)
    w = run("v_dot2_bf16_bf16 v3, v0, v1, 1.0", v0=a, v1=b)
    assert (w.v[3][0] & 0xFFFF == 0x40A0).all()   # 1*3 + 2*0.5 + 1 = 5.0
    i = inst("v_dot2_bf16_bf16 v3, v0, v1, 0x3e22")
    assert i.src[2].kind == "c" and not i.src[2].literal and i.src[2].value == 0x3E22


def test_fma_mix():
    rng = np.random.default_rng(20)
    h = rng.standard_normal(32).astype(F16)
    f = rng.standard_normal(32).astype(F32)
    w = run("v_fma_mix_f32 v3, v0, v1, v2 op_sel_hi:[1,0,0]", v0=_pk(h, h), v1=f, v2=f)
    assert same(w.v[3][0].view(F32), fma_ref(h.astype(F32), f, f, F32))
    w = run("v_fma_mixlo_f16 v3, v0, v1, v2 op_sel_hi:[1,0,0]", v0=_pk(h, h), v1=f, v2=f, v3=np.full(32, 0xAAAA0000, U32))
    exact = [exact_round(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(y)), F16) for x, y in zip(h, f)]
    assert same((w.v[3][0] & U32(0xFFFF)).astype(U16).view(F16), np.array(exact, F16)) and np.all(w.v[3][0] >> 16 == 0xAAAA)


def test_vopd_reads_before_writes():
    a, b = np.arange(32, dtype=U32), np.arange(32, dtype=U32) + 1000
    w = run("v_dual_mov_b32 v0, v1 :: v_dual_mov_b32 v1, v0", v0=a, v1=b)
    assert np.array_equal(w.v[0][0], b) and np.array_equal(w.v[1][0], a)
    x, y = np.full(32, 2.0, F32), np.full(32, 3.0, F32)
    w = run("v_dual_mul_f32 v0, v0, v1 :: v_dual_add_f32 v1, v1, v0", v0=x, v1=y)
    assert w.v[0][0].view(F32)[0] == 6.0 and w.v[1][0].view(F32)[0] == 5.0
    w = run("v_dual_fmac_f32 v2, v0, v1 :: v_dual_cndmask_b32 v3, v1, v0", v0=x, v1=y, v2=np.ones(32, F32), s106=0x0F)
    assert w.v[2][0].view(F32)[0] == 7.0 and list(w.v[3][0].view(F32)[:5]) == [2, 2, 2, 2, 3]


def test_unsupported_names_mnemonic_and_pc():
    with pytest.raises(UnsupportedInstruction, match=r"v_mullit_f32 .*VOP3.* pc 0x0"):
        build(inst("v_mullit_f32 v0, v1, v2, v3"))


@targets(*RDNA3)          # the gfx11 register layout (gfx12 WMMA: test_wmma.py)
@pytest.mark.parametrize("kind", ["f16", "iu8"])
def test_wmma_wave32(kind):
    rng = np.random.default_rng(24)
    w = wave(2, 32, 40)
    if kind == "f16":
        A = rng.standard_normal((2, 16, 16)).astype(F16)
        B = rng.standard_normal((2, 16, 16)).astype(F16)
        packA = np.ascontiguousarray(A).view(U32)                 # (2, 16 rows, 8 regs)
        packB = np.ascontiguousarray(B.transpose(0, 2, 1)).view(U32)
    else:
        A = rng.integers(-128, 128, (2, 16, 16)).astype(np.int8)
        B = rng.integers(0, 256, (2, 16, 16)).astype(np.uint8)
        packA = np.ascontiguousarray(A).view(U32)                 # (2, 16, 4)
        packB = np.ascontiguousarray(B.transpose(0, 2, 1)).view(U32)
    C = rng.standard_normal((2, 16, 16)).astype(F32) if kind == "f16" else rng.integers(-1000, 1000, (2, 16, 16)).astype(np.int32)
    for j in range(packA.shape[-1]):
        w.v[j] = np.tile(packA[..., j], (1, 2))
        w.v[8 + j] = np.tile(packB[..., j], (1, 2))
    lane = np.arange(32)
    for v in range(8):
        w.v[16 + v] = C[:, 2 * v + lane // 16, lane % 16].view(U32)
    text = ("v_wmma_f32_16x16x16_f16 v[24:31], v[0:7], v[8:15], v[16:23]" if kind == "f16" else
            "v_wmma_i32_16x16x16_iu8 v[24:31], v[0:3], v[8:11], v[16:23] neg_lo:[1,0,0]")
    build(inst(text))(w, slice(None))
    exp = (A.astype(F64) @ B.astype(F64) + C).astype(F32) if kind == "f16" else \
        (A.astype(np.int64) @ B.astype(np.int64) + C).astype(np.int32)
    for v in range(8):
        got = w.v[24 + v].view(F32 if kind == "f16" else np.int32)
        assert np.array_equal(got, exp[:, 2 * v + lane // 16, lane % 16])


@targets(*RDNA3)
def test_wmma_wave64_accumulator_is_four_registers_and_refused():
    """wave64 holds C/D in 4 VGPRs (llvm-mc's v[16:19]); the core refuses to run it rather than guess its layout."""
    i = inst("v_wmma_f32_16x16x16_f16 v[16:19], v[0:7], v[8:15], v[16:19]", wave64=True)
    assert (i.dst[0].n, i.src[2].n, i.src[0].n) == (4, 4, 8)
    with pytest.raises(UnsupportedInstruction, match="v_wmma_f32_16x16x16_f16.*wave32 only"):
        build(i)


def test_wmma_float_neg_is_refused():
    """NEG_LO/NEG_HI on a float WMMA (negating A/B/C) are not modelled: refused by name, not ignored."""
    text = "v_wmma_f32_16x16x16_f16 v[24:31], v[0:7], v[8:15], v[16:23] neg_lo:[1,0,0]" if _target["mcpu"] in RDNA3 \
        else "v_wmma_f32_16x16x16_f16 v[24:31], v[0:3], v[8:11], v[16:23] neg_lo:[1,0,0]"
    with pytest.raises(UnsupportedInstruction, match="v_wmma_f32_16x16x16_f16.*NEG"):
        build(inst(text))


def test_large_batch_is_blocked_and_exact():
    n = 8192
    w = wave(n, 32, 8)
    rng = np.random.default_rng(21)
    a, b = rng.standard_normal((n, 32)).astype(F32), rng.standard_normal((n, 32)).astype(F32)
    w.v[0], w.v[1], w.v[2] = a.view(U32), b.view(U32), a.view(U32)
    build(inst("v_fmac_f32_e32 v2, v0, v1"))(w, slice(None))
    assert same(w.v[2].view(F32), fp.fma32(a, b, a))
    sel = np.arange(0, n, 2)
    build(inst("v_add_nc_u32_e32 v3, 1, v3"))(w, sel)
    assert w.v[3][::2].min() == 1 and w.v[3][1::2].max() == 0


def _set64(w, reg, x):
    u = np.asarray(x, F64).view(U64)
    w.v[reg][0], w.v[reg + 1][0] = (u & U64(M)).astype(U32), (u >> U64(32)).astype(U32)


def _get64(w, reg):
    return (w.v[reg][0].astype(U64) | w.v[reg + 1][0].astype(U64) << U64(32)).view(F64)


def test_f64_division_sequence_is_correctly_rounded():
    prog = ["v_div_scale_f64 v[4:5], null, v[2:3], v[2:3], v[0:1]", "v_div_scale_f64 v[10:11], vcc_lo, v[0:1], v[2:3], v[0:1]",
            "v_rcp_f64_e32 v[6:7], v[4:5]", "v_fma_f64 v[8:9], -v[4:5], v[6:7], 1.0", "v_fma_f64 v[6:7], v[6:7], v[8:9], v[6:7]",
            "v_fma_f64 v[8:9], -v[4:5], v[6:7], 1.0", "v_fma_f64 v[6:7], v[6:7], v[8:9], v[6:7]",
            "v_mul_f64 v[8:9], v[10:11], v[6:7]", "v_fma_f64 v[4:5], -v[4:5], v[8:9], v[10:11]",
            "v_div_fmas_f64 v[4:5], v[4:5], v[6:7], v[8:9]", "v_div_fixup_f64 v[4:5], v[4:5], v[2:3], v[0:1]"]
    rng = np.random.default_rng(22)
    n = 32 * 8
    a = rng.standard_normal(n) * np.exp2(rng.integers(-1070, 1020, n))
    b = rng.standard_normal(n) * np.exp2(rng.integers(-1070, 1020, n))
    a[:10] = [0, 1, np.inf, np.nan, 1, -0.0, 1e308, 5e-324, 1, 2.2e-308]
    b[:10] = [0, 0, np.inf, 1, np.inf, 5, 1e-300, 1e300, 3, 1e10]
    for i in range(0, n, 32):
        w = wave()
        _set64(w, 0, a[i:i + 32])
        _set64(w, 2, b[i:i + 32])
        for t in prog:
            build(inst(t))(w, slice(None))
        with np.errstate(all="ignore"):
            assert same(_get64(w, 4), a[i:i + 32] / b[i:i + 32])


def test_div_fixup_special_cases():
    num = np.array([0, 1, np.inf, np.inf, 1, -1, np.nan, 1] * 4, F32)
    den = np.array([0, 0, np.inf, 2, np.inf, 0, 1, np.nan] * 4, F32)
    w = run("v_div_fixup_f32 v3, v2, v1, v0", v0=num, v1=den, v2=np.full(32, 0.25, F32))
    got = w.v[3][0].view(F32)[:8]
    assert w.v[3][0][0] == 0xFFC00000 and got[1] == np.inf and np.isnan(got[2]) and got[3] == np.inf
    assert got[4] == 0 and got[5] == -np.inf and np.isnan(got[6]) and np.isnan(got[7])
    h = np.array([0x3C00, 0x0000, 0x7C00] * 10 + [0, 0], U32)
    w = run("v_div_fixup_f16 v3, v2, v1, v0", v0=h, v1=np.full(32, 0x4000, U32), v2=np.full(32, 0x3800, U32))
    assert list(w.v[3][0][:3] & 0xFFFF) == [0x3800, 0x0000, 0x7C00]


def test_wave64_compare_dpp_and_readlane():
    w = wave(2, 64)
    a = np.arange(64, dtype=np.int32) - 20
    w.v[0][:] = a.view(U32)
    build(inst("v_cmp_gt_i32_e64 s[4:5], v0, 0", wave64=True))(w, slice(None))
    assert lane_bits(w, 4) == ((1 << 64) - 1) ^ ((1 << 21) - 1)
    build(inst("v_readlane_b32 s6, v0, 63", wave64=True))(w, slice(None))
    assert list(w.s[6]) == [43, 43]
    build(inst("v_mov_b32_dpp v1, v0 row_share:15 row_mask:0xf bank_mask:0xf", wave64=True))(w, slice(None))
    assert np.array_equal(w.v[1][1].view(np.int32), a[(np.arange(64) & ~15) + 15])
    build(inst("v_permlane64_b32 v2, v0", wave64=True))(w, slice(None))
    assert np.array_equal(w.v[2][0].view(np.int32), np.roll(a, 32))


def test_permlane16_and_x16():
    w = wave()
    w.v[0][0] = np.arange(32) + 100
    w.s[2], w.s[3] = 0x76543210, 0xFEDCBA98          # identity selection
    build(inst("v_permlane16_b32 v1, v0, s2, s3"))(w, slice(None))
    assert np.array_equal(w.v[1][0], np.arange(32) + 100)
    build(inst("v_permlanex16_b32 v1, v0, s2, s3"))(w, slice(None))
    assert np.array_equal(w.v[1][0], (np.arange(32) ^ 16) + 100)
    w.s[2], w.s[3] = 0x89ABCDEF, 0x01234567          # reversed
    build(inst("v_permlane16_b32 v1, v0, s2, s3"))(w, slice(None))
    assert np.array_equal(w.v[1][0], (np.arange(32) & ~15) + 15 - (np.arange(32) & 15) + 100)


def test_f16_ops_exact():
    rng = np.random.default_rng(23)
    a, b = (rng.standard_normal(32) * 8).astype(F16), (rng.standard_normal(32) * 8).astype(F16)
    lo = lambda u: (u & U32(0xFFFF)).astype(U16).view(F16)  # noqa: E731
    for op, fn in (("v_add_f16", lambda x, y: x + y), ("v_sub_f16", lambda x, y: x - y), ("v_mul_f16", lambda x, y: x * y),
                   ("v_max_f16", np.fmax), ("v_min_f16", np.fmin)):
        w = run(f"{op}_e32 v2, v0, v1", v0=a.view(U16).astype(U32), v1=b.view(U16).astype(U32))
        assert same(lo(w.v[2][0]), fn(a.astype(F64), b.astype(F64)).astype(F16)), op
    w = run("v_cvt_f32_f16_e32 v2, v0", v0=a.view(U16).astype(U32))
    assert same(w.v[2][0].view(F32), a.astype(F32))
    w = run("v_cvt_i16_f16_e32 v2, v0", v0=np.array([0x7C00, 0xFC00, 0x7E00, 0x4B00] * 8, U32))
    assert list(w.v[2][0][:4] & 0xFFFF) == [0x7FFF, 0x8000, 0, 14]
    w = run("v_ldexp_f16_e32 v2, v0, v1", v0=np.full(32, 0x3C00, U32), v1=np.arange(32, dtype=U32) - 26)
    assert same(lo(w.v[2][0]), np.ldexp(np.ones(32), np.arange(32) - 26).astype(F16))
    w = run("v_fract_f16_e32 v2, v0", v0=np.full(32, 0xC100, U32))          # -2.5 -> 0.5
    assert lo(w.v[2][0])[0] == 0.5


def test_cvt_norm_and_pk():
    x = np.array([1.0, -1.0, 0.5, 2.0, np.nan, -0.25] * 5 + [0, 0], F32)
    w = run("v_cvt_pk_norm_i16_f32 v2, v0, v1", v0=x, v1=-x)
    lo = (w.v[2][0] & U32(0xFFFF)).astype(U16).view(np.int16)
    assert list(lo[:6]) == [32767, -32767, 16384, 32767, 0, -8192]
    w = run("v_cvt_pk_u16_f32 v2, v0, v1", v0=np.array([70000.0, -3.0, 2.9] * 10 + [0, 0], F32), v1=np.zeros(32, F32))
    assert list(w.v[2][0][:3]) == [0xFFFF, 0, 2]
    w = run("v_cvt_f32_ubyte2_e32 v2, v0", v0=np.full(32, 0x00AB0000, U32))
    assert w.v[2][0].view(F32)[0] == 0xAB
    w = run("v_cvt_off_f32_i4_e32 v2, v0", v0=np.arange(32, dtype=U32))
    assert list(w.v[2][0].view(F32)[:16]) == [i / 16 for i in range(8)] + [(i - 16) / 16 for i in range(8, 16)]


def test_vop3_forms_of_vsrc0_operations():
    x = np.array([-3.5, 1e-40, np.inf, 6.0] * 8, F32)
    w = run("v_frexp_mant_f32_e64 v1, -|v0| clamp", v0=x)
    assert same(w.v[1][0].view(F32)[:4], np.array([0, 0, 0, 0], F32))     # negative mantissas clamp to 0
    w = run("v_frexp_exp_i32_f32_e64 v1, v0", v0=x)
    assert list(w.v[1][0].view(np.int32)[:4]) == [2, -132, 0, 3]
    w = run("v_movrels_b32_e64 v1, v3", v3=np.full(32, 5, U32), s125=0)
    assert w.v[1][0][0] == 5
    w = run("v_frexp_exp_i32_f32_e64 v1, 0x45800000")                    # literal operand (4096.0 = 0.5 * 2^13)
    assert (w.v[1][0] == 13).all()
    w = run("v_cvt_off_f32_i4_e64 v1, 0x1234b")                           # low 4 bits 0xb = -5 -> -5/16
    assert (w.v[1][0].view(F32) == -5 / 16).all()
    w = run("v_mov_b32_e64 v1, 0x12345678")
    assert (w.v[1][0] == 0x12345678).all()


def test_trig_preop_pieces_sum_to_two_over_pi():
    w = wave()
    for i in range(3):
        w.v[0][0], w.v[1][0] = 0, 0x3FF00000                   # S0 = 1.0
        w.v[2][0] = i
        build(inst("v_trig_preop_f64 v[4:5], v[0:1], v2"))(w, slice(None))
        w.v[10 + 2 * i], w.v[11 + 2 * i] = w.v[4].copy(), w.v[5].copy()
    parts = [Fraction(float(_get64(w, 10 + 2 * i)[0])) for i in range(3)]
    assert int(_get64(w, 10).view(U64)[0]) == 0x3FE45F306DC9C882          # 2/pi truncated to 53 bits
    # 2/pi to 200 bits from Machin's formula, independently of the implementation
    one = 1 << 260
    def atan_inv(n):
        s, t, k, sign = 0, one // n, 1, 1
        while t:
            s, t, k, sign = s + sign * (t // k), t // (n * n), k + 2, -sign
        return s
    two_over_pi = Fraction(2 * one, 4 * (4 * atan_inv(5) - atan_inv(239)))
    assert 0 <= two_over_pi - sum(parts) < Fraction(1, 2 ** 158)


@targets("gfx1100", "gfx1201")   # one per front end: drawing the examples costs ~10 s a target
@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32), min_size=32, max_size=32), st.lists(st.floats(width=32), min_size=32, max_size=32))
def test_f32_binary_ops_match_numpy(xs, ys):
    a, b = np.array(xs, F32), np.array(ys, F32)
    with np.errstate(all="ignore"):
        for op, fn in (("v_add_f32", np.add), ("v_sub_f32", np.subtract), ("v_mul_f32", np.multiply),
                       ("v_subrev_f32", lambda x, y: y - x)):
            w = run(f"{op}_e32 v2, v0, v1", v0=a, v1=b)
            assert same(w.v[2][0].view(F32), fn(a, b)), op
        w = run("v_max_f32_e32 v2, v0, v1", v0=a, v1=b)
        exp = np.where(a == b, (a.view(U32) & b.view(U32)).view(F32), np.fmax(a, b))
        snan = lambda v: np.isnan(v) & ((v.view(U32) & U32(0x00400000)) == 0)  # noqa: E731
        ok = ~(snan(a) | snan(b))
        assert same(w.v[2][0].view(F32)[ok], exp[ok])


def test_released_wave_state_comes_back_clean():
    """A small register file released after a batch is the next batch's of its shape, every field as a new one's."""
    from amdq.sim.shader.wave import WaveState
    w = WaveState.fresh(3, 32, 5)
    for name in ("v", "s", "scc", "pc", "status", "em", "full", "mode", "wg", "lds_base", "scratch_base"):
        a = getattr(w, name)
        a.reshape(-1).view(np.uint8)[:] = 0xA5
    w.barrier_pending, w.lds_size, w.lds_rows, w.xcc = True, 64, 2, 3
    arrays = (w.v, w.s, w.pc)
    w.release()
    again = WaveState.fresh(3, 32, 5)
    assert again is w and all(x is y for x, y in zip(arrays, (again.v, again.s, again.pc)))     # the same arrays...
    ref = WaveState(3, 32, 5)
    for name, val in vars(ref).items():                                                     # ...as a new state's
        got = getattr(again, name)
        if isinstance(val, np.ndarray):
            assert got.dtype == val.dtype and np.array_equal(got, val), name
        else:
            assert got == val or got is val, name
    v0 = WaveState.fresh(3, 32, 5, v0_written=True)       # (a new one: `again` is still out)
    assert v0 is not again
