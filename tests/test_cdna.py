"""The CDNA3 (gfx942) front end: the gfx9 decoder against LLVM 19's disassembler, gfx9 semantics that differ
from RDNA3 (one instruction at a time, assembled by llvm-mc), and MFMA against numpy matmul. (The OpenCL kernel
suite runs on gfx942, core and device, in test_targets_suite.py.)"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import harness
from amdq.errors import UnsupportedInstruction
from amdq.hw.isa import decode_cdna as D
from amdq.sim.shader.isa import for_gfx
from amdq.sim.shader.wave import EXEC, M0, VCC, WaveState
from clang import KERNELS, compile_cl, tool

U32 = np.uint32
MFMA_CL = str(KERNELS.parent / "kernels_cdna" / "mfma.cl")     # gfx9-only kernels (not in the gfx11 suite's glob)


def asm9(text: str) -> bytes:
    r = subprocess.run([tool("llvm-mc"), "-triple=amdgcn", "-mcpu=gfx942", "--show-encoding"], input=text,
                       capture_output=True, text=True)
    m = re.search(r"encoding: \[(.*)\]", r.stdout)
    assert m, r.stderr
    return bytes(int(x, 16) for x in m.group(1).split(","))


def dec(text: str):
    return D.decode(asm9(text) + bytes(8), 0)


def run1(text: str, nv: int = 512, **regs) -> WaveState:
    """Execute one gfx942 instruction on one wave64 with all lanes on; v<N>/s<N> keyword registers first."""
    w = WaveState(1, 64, nv)
    w.s[EXEC] = w.s[EXEC + 1] = 0xFFFFFFFF
    for k, v in regs.items():
        (w.v if k[0] == "v" else w.s)[int(k[1:])] = np.asarray(v).astype(np.int64).astype(U32)
    w.refresh_exec(slice(None))
    w.mode[:] = 0xF0
    for_gfx(9).build(dec(text))(w, slice(None))
    return w


# ---------------------------------------------------------------- decoder vs llvm-objdump

def _objdump_rows(path):
    out = subprocess.run([tool("llvm-objdump"), "-d", "--mcpu=gfx942", str(path)], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s+(\S+).*// [0-9A-F]{12}: ((?:[0-9A-F]{8} ?)+)", line)
        if m:
            yield m.group(1), m.group(2).split()


LLVM_NAMES = {"v_accvgpr_read": "v_accvgpr_read_b32", "v_accvgpr_write": "v_accvgpr_write_b32"}


def test_decoder_matches_llvm():
    """Every instruction clang emits for the suite (and the MFMA kernels) on gfx942 decodes to LLVM's
    mnemonic and size, and has a handler."""
    isa9 = for_gfx(9)
    seen, missing = set(), set()
    for src in sorted(KERNELS.glob("*.cl")) + [MFMA_CL]:
        for mn, words in _objdump_rows(compile_cl(str(src), "gfx942")):
            code = b"".join(int(w, 16).to_bytes(4, "little") for w in words) + bytes(8)
            inst = D.decode(code, 0)
            name = D._key(inst.name)
            assert LLVM_NAMES.get(name, name) == re.sub(r"_(e32|e64|sdwa|dpp)$", "", mn), (mn, words, inst.name)
            assert inst.size == 4 * len(words), (mn, words, inst.size)
            seen.add(mn)
            if inst.key not in isa9.handlers:
                missing.add(mn)
    assert len(seen) > 150 and not missing, sorted(missing)


def test_operand_space():
    """gfx9 M0 is code 124 (the core's M0 register), VCC 106, EXEC 126; saddr 0x7F is "off"; AccVGPRs are
    rows ACC_BASE+."""
    i = dec("s_mov_b32 m0, s3")
    assert i.dst[0].reg == M0 and i.src[0].reg == 3
    i = dec("global_load_dword v6, v[4:5], off")
    assert i.saddr is None and i.addr.reg == 4 and i.addr.n == 2 and i.key == "global_load_b32"
    i = dec("global_load_dword v6, v4, s[2:3] offset:-8")
    assert i.saddr.reg == 2 and i.addr.n == 1 and i.offset == -8
    i = dec("v_accvgpr_read_b32 v1, a7")
    assert i.src[0].reg == D.ACC_BASE + 7 and i.dst[0].reg == 1
    i = dec("global_store_dwordx4 v[0:1], a[4:7], off")
    assert i.data.reg == D.ACC_BASE + 4 and i.data.n == 4
    i = dec("ds_cmpst_rtn_b32 v1, v2, v3, v4")      # gfx9: DATA = compare, DATA2 = new value
    assert i.key == "ds_cmpstore_rtn_b32" and [d.reg for d in i.data] == [4, 3]


def test_smem_offsets():
    """gfx9 SMEM: IMM=0 names an SGPR offset in OFFSET[6:0], SOFFSET_EN adds SOFFSET, IMM offsets are signed."""
    i = dec("s_load_dword s0, s[0:1], s2")
    assert i.soffset.reg == 2 and i.offset == 0 and i.key == "s_load_b32"
    i = dec("s_load_dword s0, s[0:1], s2 offset:0x10")
    assert i.soffset.reg == 2 and i.offset == 0x10
    i = dec("s_load_dwordx2 s[4:5], s[6:7], -0x8")
    assert i.soffset is None and i.offset == -8 and i.sbase.reg == 6 and i.dst[0].n == 2
    i = dec("s_load_dword s0, s[0:1], m0")
    assert i.soffset.reg == M0


def test_vop2_carry_uses_vcc():
    lanes = np.arange(64)
    a = np.where(lanes % 2, 0xFFFFFFFF, 5)
    w = run1("v_add_co_u32_e32 v2, vcc, v0, v1", v0=a, v1=lanes)
    want = (a + lanes) & 0xFFFFFFFF
    assert (w.v[2][0] == want).all()
    carry = sum(1 << i for i in range(64) if a[i] + i > 0xFFFFFFFF)
    assert int(w.s[VCC][0]) | int(w.s[VCC + 1][0]) << 32 == carry
    w2 = run1("v_addc_co_u32_e32 v3, vcc, 0, v1, vcc", v1=lanes, s106=carry & 0xFFFFFFFF, s107=carry >> 32)
    assert (w2.v[3][0] == lanes + (a + lanes > 0xFFFFFFFF)).all()


def test_cmpx_writes_exec_and_vcc():
    lanes = np.arange(64)
    w = run1("v_cmpx_gt_u32_e32 vcc, 20, v0", v0=lanes)
    m = (1 << 20) - 1
    assert int(w.s[VCC][0]) == m and int(w.s[VCC + 1][0]) == 0
    assert int(w.s[EXEC][0]) == m and int(w.s[EXEC + 1][0]) == 0 and w.em[0].sum() == 20


def test_16bit_result_zeroes_high_half():
    """gfx9 16-bit VOP2 results clear the destination's high half (RDNA3 keeps it)."""
    w = run1("v_add_u16_e32 v2, v0, v1", v0=np.full(64, 0x1234_0003), v1=np.full(64, 4), v2=np.full(64, 0xABCD_0000))
    assert (w.v[2][0] == 7).all()
    one, two = np.full(64, 0x3C00), np.full(64, 0x4000)
    w = run1("v_fma_f16 v3, v0, v1, v2", v0=one | 0x5555_0000, v1=two, v2=one, v3=np.full(64, 0xFFFF_FFFF))
    assert (w.v[3][0] == 0x4200).all()              # 1 * 2 + 1 = 3.0, high half cleared
    with pytest.raises(UnsupportedInstruction):     # a destination OP_SEL: which half survives is not modelled
        for_gfx(9).build(dec("v_fma_f16 v3, v0, v1, v2 op_sel:[0,0,0,1]"))


def test_sdwa_or_and_lshl_add_u64():
    w = run1("v_or_b32_sdwa v2, v0, v1 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_1 src1_sel:WORD_0",
             v0=np.full(64, 0x0000_AB00), v1=np.full(64, 0x0000_0F0F), v2=np.full(64, 0x1111_2222))
    assert (w.v[2][0] == (0x0FAF << 16 | 0x2222)).all()
    lanes = np.arange(64)
    w = run1("v_lshl_add_u64 v[4:5], v[0:1], 3, v[2:3]", v0=lanes, v1=np.ones(64), v2=np.full(64, 0xFFFFFFFF), v3=0)
    r = (w.v[4][0].astype(object) | w.v[5][0].astype(object) << 32)
    assert (r == [((1 << 32 | i) << 3) + 0xFFFFFFFF for i in range(64)]).all()


M32 = 0xFFFFFFFF


@pytest.mark.parametrize("shift, addend", [("0", "v[2:3]"), ("v6", "v[2:3]"), ("2", "s[8:9]"), ("1", "-1"), ("7", "0x40")])
def test_lshl_add_u64_against_uint64(shift, addend):
    """D = (S0.u64 << S1[2:0]) + S2.u64 against numpy's uint64 arithmetic: VGPR, SGPR and constant addends,
    shift amounts from a constant or per lane (only bits 2:0 count), carries out of the low dword."""
    rng = np.random.default_rng(7)
    a, c = rng.integers(0, 1 << 63, 64, dtype=np.uint64) * np.uint64(2) + np.uint64(1), rng.integers(0, 1 << 63, 64, dtype=np.uint64)
    sh = rng.integers(0, 64, 64).astype(np.uint32)
    regs = dict(v0=a & np.uint64(M32), v1=a >> np.uint64(32), v2=c & np.uint64(M32), v3=c >> np.uint64(32), v6=sh,
                s8=int(c[0]) & M32, s9=int(c[0]) >> 32)
    w = run1(f"v_lshl_add_u64 v[4:5], v[0:1], {shift}, {addend}", **regs)
    n = (sh & 7).astype(np.uint64) if shift == "v6" else np.uint64(int(shift))
    add = {"v[2:3]": c, "s[8:9]": c[0], "-1": np.uint64(2**64 - 1), "0x40": np.uint64(0x40)}[addend]
    with np.errstate(over="ignore"):
        want = (a << n) + add
    got = w.v[4][0].astype(np.uint64) | w.v[5][0].astype(np.uint64) << np.uint64(32)
    assert (got == want).all()


def test_refused_not_guessed():
    """Forms the core does not model raise UnsupportedInstruction rather than computing something."""
    isa9 = for_gfx(9)
    with pytest.raises(UnsupportedInstruction):
        isa9.build(dec("v_mfma_f32_32x32x1_2b_f32 a[0:31], v0, v1, a[0:31]"))
    with pytest.raises(UnsupportedInstruction):
        isa9.build(dec("v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3] cbsz:1 abid:1"))
    with pytest.raises(UnsupportedInstruction):       # decodes (the disassembler prints it); the core refuses
        isa9.build(dec("v_mov_b32_dpp v0, v1 row_bcast:15 row_mask:0xf"))
    with pytest.raises(UnsupportedInstruction):
        isa9.build(dec("buffer_load_dword v1, v2, s[4:7], 0 offen"))
    assert dec("buffer_load_dword v1, v2, s[4:7], 0 offen").key == "buffer_load_b32"


@pytest.mark.parametrize("ctrl, bc", [("wave_shl:1", 0), ("wave_shr:1", 1), ("wave_rol:1", 0), ("wave_ror:1", 0),
                                      ("row_bcast:15 row_mask:0xa", 0), ("row_bcast:31 row_mask:0xc", 0),
                                      ("row_shr:3", 1), ("quad_perm:[3,2,1,0]", 0), ("row_newbcast:5", 0)])
def test_gfx9_dpp(ctrl, bc):
    """gfx9 DPP controls: wave shifts/rotates by one lane, row broadcasts, and the gfx9 encodings of the
    controls RDNA3 shares; out-of-range sources leave the lane alone (or read 0 with bound_ctrl)."""
    lanes = np.arange(64)
    w = run1(f"v_mov_b32_dpp v2, v0 {ctrl}" + (" bound_ctrl:0" if bc else ""), v0=lanes + 100, v2=np.full(64, 7))
    rows = int(re.search(r"row_mask:0x(\w)", ctrl).group(1), 16) if "row_mask" in ctrl else 0xF
    want = []
    for i in lanes:
        n = {"wave_shl:1": i + 1, "wave_shr:1": i - 1, "wave_rol:1": (i + 1) % 64, "wave_ror:1": (i - 1) % 64,
             "row_bcast:15 row_mask:0xa": i // 16 * 16 - 1, "row_bcast:31 row_mask:0xc": 31,
             "row_shr:3": i - 3 if i % 16 >= 3 else -1, "quad_perm:[3,2,1,0]": i // 4 * 4 + 3 - i % 4,
             "row_newbcast:5": i // 16 * 16 + 5}[ctrl]
        if not rows >> (i // 16) & 1:
            want.append(7)
        elif 0 <= n < 64:
            want.append(n + 100)
        else:
            want.append(0 if bc else 7)
    assert w.v[2][0].tolist() == want


# ---------------------------------------------------------------- MFMA

MFMA = {  # kernel: (M, K, input dtype, output dtype)
    "mfma_f32_16x16x4_f32": (16, 4, np.float32, np.float32), "mfma_f32_32x32x2_f32": (32, 2, np.float32, np.float32),
    "mfma_f32_16x16x16_f16": (16, 16, np.float16, np.float32), "mfma_f32_32x32x8_f16": (32, 8, np.float16, np.float32),
    "mfma_f32_16x16x16_bf16": (16, 16, "bf16", np.float32), "mfma_f32_32x32x8_bf16": (32, 8, "bf16", np.float32),
    "mfma_i32_16x16x32_i8": (16, 32, np.int8, np.int32), "mfma_i32_32x32x16_i8": (32, 16, np.int8, np.int32),
}


@pytest.mark.parametrize("kernel", sorted(MFMA))
def test_mfma(kernel):
    """D = A B + C by one MFMA per wave, the operands placed per the documented layouts; integer-valued data
    so every summation order gives the same f32 result."""
    m, k, tin, tout = MFMA[kernel]
    r = np.random.default_rng(len(kernel) * k)
    lo, hi = (-128, 128) if tin is np.int8 else (-8, 9)
    a, b = r.integers(lo, hi, (m, k)), r.integers(lo, hi, (k, m))
    c = r.integers(-1000, 1000, (m, m))
    if tin == "bf16":       # bf16 bit patterns: the top half of the f32 (small integers are exact)
        ta, tb = ((x.astype(np.float32).view(U32) >> 16).astype(np.int16) for x in (a, b))
    else:
        ta, tb = a.astype(tin), b.astype(tin)
    (_, _, _, d), _ = harness.run_cl(MFMA_CL, kernel, [ta, tb, c.astype(tout), np.zeros((m, m), tout)],
                                     arch="gfx942")
    want = a.astype(np.int64) @ b.astype(np.int64) + c
    assert d.dtype == tout and (d.astype(np.int64) == want).all()


def test_scoped_fences_and_mode_register():
    """Agent/system-scope acquire and release (buffer_inv, buffer_wbl2: no caches to maintain) run; s_getreg
    reads MODE, and gfx9 hardware registers the core does not model are refused."""
    src = """__kernel void f(__global int *p, __global int *q) {
      int v = __scoped_atomic_load_n(p, __ATOMIC_ACQUIRE, __MEMORY_SCOPE_DEVICE);
      __scoped_atomic_store_n(q + 1, v + 1, __ATOMIC_RELEASE, __MEMORY_SCOPE_SYSTEM); }"""
    (_, q), _ = harness.run_cl(src, "f", [np.array([41], np.int32), np.zeros(2, np.int32)], arch="gfx942")
    assert q.tolist() == [0, 42]
    w = run1("s_getreg_b32 s5, hwreg(HW_REG_MODE, 4, 4)")
    assert int(w.s[5][0]) == 0xF
    with pytest.raises(UnsupportedInstruction):
        for_gfx(9).build(dec("s_getreg_b32 s5, hwreg(HW_REG_HW_ID)"))


def test_mfma_chain_through_lds():
    """MFMAs accumulating in AccVGPRs across a loop, operands staged through LDS."""
    k = 80
    r = np.random.default_rng(5)
    a, b = r.integers(-6, 7, (16, k)), r.integers(-6, 7, (k, 16))
    (_, _, d), stats = harness.run_cl(MFMA_CL, "mfma_chain_f16", [a.astype(np.float16), b.astype(np.float16),
                                                                   np.zeros((16, 16), np.float32), k], arch="gfx942")
    assert (d == a @ b).all()


def test_sdwa_byte_short_vectors():
    """uchar4/short2/char4 arithmetic, which gfx9 code does with SDWA selects, against numpy."""
    n, r = 128, np.random.default_rng(9)
    a, b = (r.integers(0, 256, (n, 4)).astype(np.uint8) for _ in range(2))
    c, d = (r.integers(-2**15, 2**15, (n, 2)).astype(np.int16) for _ in range(2))
    e = r.integers(-128, 128, (n, 4)).astype(np.int8)
    e[:4, 0] = [-128, 0, 127, -1]
    (ga, gb, gc, gd, ge), _ = harness.run_cl(str(KERNELS.parent / "kernels_cdna" / "sdwa.cl"), "sdwa",
                                             [a, b, c, d, e], grid=(2, 1, 1), arch="gfx942")
    wa = a + b
    wb = (np.maximum(wa, b).astype(np.uint16) * 3).astype(np.uint8)
    wc = (c.astype(np.int32) * d + c).astype(np.int16)
    wd = np.stack([wc[:, 1] >> 3, (d[:, 0].astype(np.int32) << 2).astype(np.int16)], 1).astype(np.int16)
    we = np.where(e > 0, e, (-e.astype(np.int16)).astype(np.int8))
    for got, want, what in ((ga, wa, "a"), (gb, wb, "b"), (gc, wc, "c"), (gd, wd, "d"), (ge, we, "e")):
        assert (got == want).all(), (what, np.flatnonzero((got != want).any(-1))[:5])


@pytest.mark.parametrize("aql", ["1", "0"], ids=["aql", "pm4"])
def test_mfma_on_device(aql, monkeypatch):
    """An MFMA chain through the simulated gfx942 device (AQL and PM4 queues): AccVGPRs and ACCUM_OFFSET
    reach the shader core through the dispatch state."""
    import device_harness
    monkeypatch.setenv("AMD_AQL", aql)
    k = 48
    r = np.random.default_rng(6)
    a, b = r.integers(-6, 7, (16, k)), r.integers(-6, 7, (k, 16))
    (_, _, d), _ = device_harness.run_cl(MFMA_CL, "mfma_chain_f16", [a.astype(np.float16), b.astype(np.float16),
                                                                   np.zeros((16, 16), np.float32), k],
                                         arch="gfx942", spec="SIMKFD+AMD:gfx942", spec_suffix=f"cdna-aql{aql}")
    assert (d == a @ b).all()


def test_atomic_add_f64():
    """global_atomic_add_f64: lanes apply in lane order (waves in order), the old values returned."""
    n, r = 256, np.random.default_rng(11)
    x = r.standard_normal(n)
    sum0 = np.array([1.0, -2.0, 0.5, 1e-300])
    (_, s, old), _ = harness.run_cl(str(KERNELS.parent / "kernels_cdna" / "atomic_f64.cl"), "atomic_f64",
                                    [x, sum0.copy(), np.zeros(n)], grid=(4, 1, 1), arch="gfx942",
                                    flags=("-munsafe-fp-atomics",))
    want, acc = np.zeros(n), sum0.copy()
    for i in range(n):
        want[i] = acc[i % 4]
        acc[i % 4] = acc[i % 4] + x[i]
    assert (old == want).all() and (s == acc).all()


def test_setreg_reads_its_sdst_field():
    """s_setreg_b32's SOPK sdst field is the SGPR it reads (llvm-mc-19: s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s3)."""
    from amdq.hw.isa import decode_cdna
    i = decode_cdna.decode(bytes([0x01, 0x18, 0x03, 0xB9]) + bytes(8), 0, 0, True)
    assert i.mnemonic == "s_setreg_b32" and not i.dst and [(o.kind, o.reg) for o in i.src] == [("s", 3)]
