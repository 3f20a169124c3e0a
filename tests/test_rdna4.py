"""The RDNA4 (gfx12) front end: its decoder and disassembly against llvm-objdump-19 for every instruction of
the kernel suite compiled for gfx1201, the renamed-mnemonic aliases against both ISA tables, IEEE-754-2019
min/max and SALU float semantics, the gfx12 MODE, and UnsupportedInstruction for what it does not model.
(The suite itself runs on gfx1201/gfx1200, core and device, in test_targets_suite.py.)"""
from __future__ import annotations

import math
import re
import struct
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from amdq.errors import UnsupportedInstruction
from amdq.hw import isa
from amdq.hw.isa.decode_rdna4 import ALIASES, decode
from amdq.sim.shader.isa import for_gfx
from amdq.tools.disasm import disassemble_elf
from clang import KERNELS, compile_cl, tool
from harness import run_cl

U32, F32 = np.uint32, np.float32
RDNA4 = for_gfx(12)
RDNA3 = for_gfx(11)


@lru_cache(maxsize=None)
def assemble(text: str, mcpu: str = "gfx1201") -> bytes:
    r = subprocess.run([tool("llvm-mc"), "-triple=amdgcn", f"-mcpu={mcpu}", "--show-encoding"], input=text,
                       capture_output=True, text=True)
    m = re.search(r"encoding: \[(.*)\]", r.stdout)
    assert m, r.stderr
    return bytes(int(x, 16) for x in m.group(1).split(","))


def objdump(path: Path, wave64: bool, mcpu: str) -> dict[int, str]:
    args = [tool("llvm-objdump"), "-d", f"--mcpu={mcpu}"] + (["--mattr=+wavefrontsize64"] if wave64 else [])
    out = subprocess.run(args + [str(path)], capture_output=True, text=True, check=True).stdout
    return {int(m.group(2), 16): m.group(1) for m in re.finditer(r"^\s+(\S.*?)\s*// ([0-9A-F]{12}):", out, re.M)}


@pytest.mark.parametrize("wave64", [False, True], ids=["wave32", "wave64"])
@pytest.mark.parametrize("src", sorted(p.name for p in KERNELS.glob("*.cl")))
def test_suite_disassembly_matches_llvm(src, wave64):
    """Every instruction of a suite kernel built for gfx1201: our text == llvm-objdump-19's (the s_code_end
    padding after the last function is outside every symbol)."""
    o = compile_cl(src, "gfx1201", flags=("-mwavefrontsize64",) if wave64 else ())
    want = objdump(o, wave64, "gfx1201")
    got = {pc: t for listing in disassemble_elf(o.read_bytes()).values() for pc, _, t in listing}
    assert got and set(got) <= set(want)
    assert {pc for pc, t in want.items() if not t.startswith("s_code_end")} <= set(got)
    diffs = [(hex(pc), want[pc], t) for pc, t in sorted(got.items()) if want[pc] != t]
    assert not diffs, diffs[:10]


def test_gfx1200_disassembly():
    o = compile_cl("atomics_global.cl", "gfx1200")
    want = objdump(o, False, "gfx1200")
    got = {pc: t for listing in disassemble_elf(o.read_bytes()).values() for pc, _, t in listing}
    assert got and all(want[pc] == t for pc, t in got.items())


def test_aliases_name_rdna4_mnemonics_with_rdna3_handlers():
    """Each alias maps an RDNA4-only mnemonic to an RDNA3 one with the same operand formats."""
    def forms(arch):
        out = {}
        for enum, rows in isa.tables(arch).OPCODES.items():
            for name, ops in rows.values():
                out.setdefault(name.lower().removesuffix("_e32").removesuffix("_e64"), set()).add(
                    tuple(sorted((f, fmt, bits) for f, fmt, bits, _ in ops)))
        return out
    r3, r4 = forms("rdna3"), forms("rdna4")
    for new, old in ALIASES.items():
        assert new in r4 and new not in r3 and old in r3 and old in RDNA3.handlers, (new, old)
        assert r4[new] & r3[old], (new, r4[new], r3[old])


# ---------------------------------------------------------------- semantics on one wave

def wave(mode: int = 0xF0):
    from amdq.sim.shader.wave import WaveState
    w = WaveState(1, 32, 16)
    w.s[126] = 0xFFFFFFFF
    w.refresh_exec(slice(None))
    w.mode[:] = mode
    return w


def step(front, text: str, w, mcpu: str = "gfx1201"):
    code = assemble(text, mcpu) + bytes(8)
    front.build(front.decode(code, 0, 0, False))(w, slice(None))
    return w


QNAN, SNAN, NSNAN = 0x7FC00000, 0x7FA00000, 0xFFA00001
SPECIAL = [QNAN, SNAN, NSNAN, 0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x00000001]


def _quiet(b: int) -> int:
    return b | 0x00400000


def _num_ref(a: int, b: int, larger: bool) -> int:
    """IEEE-754-2019 maximumNumber/minimumNumber on bit patterns."""
    fa, fb = (struct.unpack("<f", struct.pack("<I", x))[0] for x in (a, b))
    if math.isnan(fa) and math.isnan(fb):
        return _quiet(a)
    if math.isnan(fa):
        return b
    if math.isnan(fb):
        return a
    if fa == fb:                  # equal numbers: the signed zeros order -0 < +0
        return (a & b) if larger else (a | b)
    return a if (fa > fb) == larger else b


@pytest.mark.parametrize("op", ["v_max_num_f32", "v_min_num_f32"])
def test_min_max_num_ieee_2019(op):
    pairs = [(a, b) for a in SPECIAL for b in SPECIAL]
    for k in range(0, len(pairs), 32):
        chunk = pairs[k:k + 32]
        w = wave()
        w.v[1][0, :len(chunk)] = [a for a, _ in chunk]       # v[reg] is (waves, lanes)
        w.v[2][0, :len(chunk)] = [b for _, b in chunk]
        for form in (f"{op}_e32 v0, v1, v2", f"{op}_e64 v0, v1, v2"):
            got = step(RDNA4, form, w).v[0][0, :len(chunk)]
            want = [_num_ref(a, b, "max" in op) for a, b in chunk]
            assert [hex(x) for x in got] == [hex(x) for x in want], form


@pytest.mark.parametrize("op", ["v_pk_max_num_f16", "v_pk_min_num_f16"])
def test_pk_min_max_num(op):
    h = [0x7E00, 0x7D00, 0xFD01, 0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x0001]     # f16 specials
    pairs = [(a, b) for a in h for b in h]

    def ref(a, b):
        fa, fb = (float(np.array(x, np.uint16).view(np.float16)) for x in (a, b))
        if math.isnan(fa) and math.isnan(fb):
            return a | 0x0200
        if math.isnan(fa) or math.isnan(fb):
            return b if math.isnan(fa) else a
        if fa == fb:
            return (a & b) if "max" in op else (a | b)
        return a if (fa > fb) == ("max" in op) else b
    for k in range(0, len(pairs), 16):
        chunk = pairs[k:k + 32:2]
        hi = pairs[k + 1:k + 32:2]
        w = wave()
        n = min(len(chunk), len(hi))
        w.v[1][0, :n] = [a | c << 16 for (a, _), (c, _) in zip(chunk, hi)]
        w.v[2][0, :n] = [b | d << 16 for (_, b), (_, d) in zip(chunk, hi)]
        got = step(RDNA4, f"{op} v0, v1, v2", w).v[0][0, :n]
        want = [ref(a, b) | ref(c, d) << 16 for (a, b), (c, d) in zip(chunk[:n], hi[:n])]
        assert [hex(x) for x in got] == [hex(x) for x in want]


def test_signaling_nan_differs_from_rdna3_ieee_mode():
    """RDNA3 v_max_f32 in IEEE mode quiets a signaling NaN; RDNA4 v_max_num_f32 treats it as missing data."""
    w3 = wave(0xF0 | 1 << 9)
    w3.v[1][:] = SNAN
    w3.v[2][:] = 0x3F800000
    assert step(RDNA3, "v_max_f32_e32 v0, v1, v2", w3, "gfx1100").v[0][0, 0] == _quiet(SNAN)
    w4 = wave()
    w4.v[1][:] = SNAN
    w4.v[2][:] = 0x3F800000
    assert step(RDNA4, "v_max_num_f32_e32 v0, v1, v2", w4).v[0][0, 0] == 0x3F800000


@pytest.mark.parametrize("mode", [0xF0, 0x00], ids=["denorm", "flush"])
def test_salu_float(mode):
    vals = np.array([1.5, -2.25, 3e38, 1e-39, -0.0, np.inf, np.nan, 7.0], F32)
    for i, a in enumerate(vals):
        b = vals[(i + 3) % len(vals)]
        w = wave(mode)
        w.s[1], w.s[2] = a.view(U32), b.view(U32)
        fl = (lambda x: np.where((x.view(U32) & 0x7F800000) == 0, (x.view(U32) & U32(0x80000000)).view(F32), x)) \
            if mode == 0 else (lambda x: x)     # flush a denormal to its signed zero
        with np.errstate(all="ignore"):
            for op, fn in (("s_add_f32", np.add), ("s_mul_f32", np.multiply), ("s_sub_f32", np.subtract)):
                want = fl(np.asarray(fn(fl(np.asarray(a)), fl(np.asarray(b))), F32))
                got = step(RDNA4, f"{op} s0, s1, s2", w).s[0][0:1].view(F32)
                assert got.view(U32) == want.view(U32) or (np.isnan(got) and np.isnan(want)), (op, a, b)
            want_u = 0 if np.isnan(a) or a <= 0 else 2**32 - 1 if a >= 2**32 else int(a)
            assert step(RDNA4, "s_cvt_u32_f32 s3, s1", w).s[3][0] == want_u
        w.s[1] = U32(0xFFFFFFFF - i)
        assert step(RDNA4, "s_cvt_f32_u32 s4, s1", w).s[4][0:1].view(F32)[0] == F32(0xFFFFFFFF - i)


@pytest.mark.parametrize("typ", ["f32", "f16"])
def test_salu_float_compares(typ):
    """s_cmp_<op>_f32/f16 against Python's ordered comparisons (NaN: every ordered relation false)."""
    dt, ut = (F32, U32) if typ == "f32" else (np.float16, np.uint16)
    vals = np.array([1.0, -2.0, 0.0, -0.0, np.inf, np.nan], dt)
    rel = {"lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
           "lg": lambda a, b: a < b or a > b, "ge": lambda a, b: a >= b, "o": lambda a, b: a == a and b == b}
    for name, f in list(rel.items()):
        rel["n" + ("eq" if name == "eq" else name)] = lambda a, b, f=f: not f(a, b)
    rel["u"] = rel.pop("no")
    rel["neq"] = rel.pop("neq")
    for a in vals:
        for b in vals:
            w = wave()
            w.s[1], w.s[2] = int(a.view(ut)) | 0xABCD0000 * (typ == "f16"), int(b.view(ut))
            for op, f in rel.items():
                assert step(RDNA4, f"s_cmp_{op}_{typ} s1, s2", w).scc[0] == f(float(a), float(b)), (op, a, b)


def test_add_nc_u64_leaves_scc():
    w = wave()
    w.s[2], w.s[3], w.s[4], w.s[5] = 0xFFFFFFFF, 1, 1, 2
    w.scc[:] = 1
    step(RDNA4, "s_add_nc_u64 s[0:1], s[2:3], s[4:5]", w)
    assert (int(w.s[0][0]), int(w.s[1][0]), int(w.scc[0])) == (0, 4, 1)


def test_mode_has_no_ieee_bit_on_gfx12():
    """MODE as a kernel reads it: RSRC1's round/denorm fields; IEEE (bit 9) and DX10_CLAMP (8) only up to gfx11."""
    src = "__kernel void mode(__global uint *o) { o[get_global_id(0)] = __builtin_amdgcn_s_getreg(1 | 31 << 11); }"
    from amdq.codeobj import load_code_object
    from amdq.hw import kd as KD
    for arch in ("gfx1100", "gfx1201"):
        (out,), _ = run_cl(src, "mode", [np.zeros(32, U32)], block=(32, 1, 1), arch=arch)
        d = load_code_object(compile_cl(src, arch).read_bytes(), arch).kernels["mode"].descriptor
        gen = KD.generation(int(arch[3:-2]))
        r1 = KD.RSRC1[gen].decode(d.compute_pgm_rsrc1)
        want = r1["FLOAT_ROUND_MODE_32"] | r1["FLOAT_ROUND_MODE_16_64"] << 2 | r1["FLOAT_DENORM_MODE_32"] << 4 | \
            r1["FLOAT_DENORM_MODE_16_64"] << 6 | r1.get("ENABLE_DX10_CLAMP", 0) << 8 | r1.get("ENABLE_IEEE_MODE", 0) << 9
        assert (out & 0x3FF == want).all(), (arch, out[0], want)
        assert bool(out[0] >> 9 & 1) == (arch == "gfx1100")


# ---------------------------------------------------------------- what the front end does not model

@pytest.mark.parametrize("text, what", [
    ("v_minimum_f32 v0, v1, v2", "v_minimum_f32"),
    ("s_barrier_signal 3", "s_barrier_signal"),
])
def test_unsupported_names_the_instruction(text, what):
    code = assemble(text) + bytes(8)
    with pytest.raises(UnsupportedInstruction, match=what):
        RDNA4.build(decode(code, 0))


def test_sub_dword_scalar_loads():
    """s_load_u8/i8/u16/i16 (clang emits them for uniform narrow loads on gfx12): byte addresses, extension."""
    src = """__kernel void sub(__constant uchar *p, __constant char *q, __constant ushort *r, __constant short *t,
                          __global int *o) { o[get_global_id(0)] = p[3] + q[5] * 3 + r[1] * 7 + t[2] * 11; }"""
    rng = np.random.default_rng(5)
    p, q = rng.integers(0, 256, 8).astype(np.uint8), rng.integers(-128, 128, 8).astype(np.int8)
    r, t = rng.integers(0, 65536, 4).astype(np.uint16), rng.integers(-32768, 32768, 4).astype(np.int16)
    q[5], t[2] = -100, -30000          # negative values: sign extension matters
    (_, _, _, _, out), _ = run_cl(src, "sub", [p, q, r, t, np.zeros(32, np.int32)], block=(32, 1, 1), arch="gfx1201")
    assert (out == int(p[3]) + int(q[5]) * 3 + int(r[1]) * 7 + int(t[2]) * 11).all()
    o = compile_cl(src, "gfx1201")
    assert {"s_load_u8", "s_load_i8", "s_load_u16", "s_load_i16"} <= {t.split()[0] for t in objdump(o, False, "gfx1201").values()}


# (gfx1100 text, gfx1201 text): untyped buffer accesses mean the same on both (same descriptor layout)
BUFFER_PAIRS = [
    ("buffer_load_b64 v[4:5], v0, s[8:11], s2 offen offset:4",) * 2,
    ("buffer_load_b32 v4, v1, s[8:11], s3 idxen offset:8",) * 2,
    ("buffer_load_b128 v[4:7], v[0:1], s[8:11], s2 idxen offen offset:12",) * 2,
    ("buffer_store_b32 v6, v0, s[8:11], s2 offen offset:16",) * 2,
    ("buffer_load_u16 v4, v0, s[8:11], s3 offen offset:2",) * 2,
    ("buffer_atomic_add_u32 v6, v1, s[8:11], s2 idxen offset:512 glc",
     "buffer_atomic_add_u32 v6, v1, s[8:11], s2 idxen offset:512 th:TH_ATOMIC_RETURN"),
    ("buffer_atomic_add_u32 v6, v1, s[8:11], s2 idxen offset:16",) * 2,
]


@pytest.mark.parametrize("t3, t4", BUFFER_PAIRS)
@pytest.mark.parametrize("oob, stride, nrec", [(3, 0, 100), (1, 16, 10), (0, 16, 20)])
def test_buffer_accesses_match_rdna3(t3, t4, oob, stride, nrec):
    from amdq.sim.shader.memory import FlatMemory
    from amdq.sim.shader.wave import WaveState

    def state():
        w = WaveState(1, 32, 16)
        w.s[126] = 0xFFFFFFFF
        w.refresh_exec(slice(None))
        w.mem = FlatMemory(1 << 20)
        base = w.mem.alloc(4096)
        w.mem.write(base, (np.arange(1024, dtype=np.uint32) * 0x10003).tobytes())
        w.s[8], w.s[9] = base & 0xFFFFFFFF, base >> 32 | stride << 16
        w.s[10], w.s[11] = nrec, oob << 28
        w.s[2], w.s[3] = 4, 0
        w.v[0] = np.arange(32, dtype=np.uint32) * 4
        w.v[1] = np.arange(32, dtype=np.uint32)[::-1].copy()
        w.v[6] = np.arange(32, dtype=np.uint32) + 0x1000
        return w, base
    (w3, b3), (w4, b4) = state(), state()
    step(RDNA3, t3, w3, "gfx1100")
    step(RDNA4, t4, w4)
    assert (w3.v == w4.v).all() and w3.mem.read(b3, 4096) == w4.mem.read(b4, 4096)
    if oob == 3:        # raw buffer with 100 bytes in range: every form touches some lanes (not a vacuous match)
        w0, b0 = state()
        assert (w3.v != w0.v).any() or w3.mem.read(b3, 4096) != w0.mem.read(b0, 4096)


def test_typed_buffer_access_is_unsupported():
    code = assemble("tbuffer_load_format_x v4, v0, s[8:11], s2 format:[BUF_FMT_32_FLOAT] offen") + bytes(8)
    with pytest.raises(UnsupportedInstruction, match="tbuffer_load_format_x"):
        RDNA4.build(decode(code, 0))


def test_vop1_opcode_is_seven_bits():
    """RDNA4's VOP1 opcode is bits 9-15: bit 16 set is no instruction (llvm-mc-19 agrees), not op | 128."""
    from amdq.errors import IllegalInstruction
    good, bad = bytes([1, 3, 0, 0x7E]), bytes([1, 3, 1, 0x7E])
    assert decode(good, 0).key == "v_mov_b32"
    with pytest.raises(IllegalInstruction):
        decode(bad, 0)
    r = subprocess.run([tool("llvm-mc"), "--disassemble", "-triple=amdgcn", "-mcpu=gfx1201"], capture_output=True,
                       text=True, input="[0x01,0x03,0x01,0x7e]")
    assert "invalid instruction encoding" in r.stderr


def test_clamp_kernel_med3_and_maxmin_num():
    """clang-19 turns fmin(fmax(x, lo), hi) into v_maxmin_num_f32 / v_med3_num_f16 (after a v_max_num canonicalize)
    on gfx12: results equal numpy's fmin(fmax(...)) bit for bit, NaN, infinities and signed zeros included."""
    src = """#pragma OPENCL EXTENSION cl_khr_fp16 : enable
    __kernel void med(__global float *x, __global half *h, __global float *o, __global half *oh) {
      uint i = get_global_id(0);
      o[i] = __builtin_fminf(__builtin_fmaxf(x[i], -1.5f), 2.0f);
      oh[i] = __builtin_fminf16(__builtin_fmaxf16(h[i], (half)-0.5f), (half)1.0f);
    }"""
    ops = {t.split()[0] for t in objdump(compile_cl(src, "gfx1201"), False, "gfx1201").values()}
    assert {"v_maxmin_num_f32", "v_med3_num_f16"} <= ops
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 2, 54), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.75, -1.5, 2.0, 2.5, -3.0]].astype(F32)
    x[-3] = np.frombuffer(struct.pack("<I", SNAN), F32)[0]
    h = x.astype(np.float16)
    (_, _, o, oh), _ = run_cl(src, "med", [x, h, np.zeros_like(x), np.zeros_like(h)], block=(64, 1, 1), arch="gfx1201")
    with np.errstate(invalid="ignore"):
        want = np.fmin(np.fmax(x, F32(-1.5)), F32(2.0))
        want_h = np.fmin(np.fmax(h, np.float16(-0.5)), np.float16(1.0))
    assert (o.view(U32) == want.view(U32)).all() and (oh.view(np.uint16) == want_h.view(np.uint16)).all()


def test_front_end_tables_are_explicit_compositions():
    """Each family's handler table is the common table with that family's overrides laid over it: a key two
    families define is refused, an override replaces only its keys, and building a front end changes no other."""
    from amdq.sim.shader import isa as I
    from amdq.sim.shader import rdna4, salu
    from amdq.sim.shader.ops import Table
    with pytest.raises(ValueError, match="two families"):
        Table(salu.TABLE, Table({"s_mov_b32": None}, name="dup"))
    r3, r4, c3 = I.for_isa("rdna3"), I.for_isa("rdna4"), I.for_isa("cdna3")
    assert r4.handlers["s_barrier_wait"] is salu.TABLE["s_barrier"] and "s_barrier_wait" not in r3.handlers
    assert all(r4.handlers[k] is v for k, v in rdna4.OVERRIDES.items() if not k.startswith("v_"))
    shared = [k for k in r3.handlers if k.startswith("s_") and k not in rdna4.OVERRIDES and k in r4.handlers]
    assert shared and all(r3.handlers[k] is r4.handlers[k] for k in shared)
    assert r3.control == r4.control and "s_branch" in c3.control
    with pytest.raises(UnsupportedInstruction, match="no gfx8 front end"):
        I.for_isa("gfx8")
