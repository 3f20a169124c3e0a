"""The CDNA4 (gfx950) front end: the OpenCL kernel suite compiled for gfx950 by LLVM 22 (clang-19 IR retargeted,
tests/clang.py) on the shader core; the gfx950 instructions LLVM 22 emits for intrinsics and ordinary IR, each
run on a wave and checked against numpy (or values worked out from the ISA's pseudocode); gfx942 refusing them;
and MFMA shapes only gfx950 has against numpy matmul."""
from __future__ import annotations

import functools
import inspect
import math
import struct

import numpy as np
import pytest

import amdq
import harness
import test_shader_kernels as suite
from amdq.errors import IllegalInstruction
from amdq.hw.isa import decode_cdna as D
from amdq.hw.isa.gfx950 import ALL as GFX950_ONLY, ON_GFX942
from amdq.hw.targets import get_target
from amdq.sim.shader.isa import for_isa
from amdq.tools.disasm import kernels
from clang import KERNELS, compile_cl, compile_cl_llvm22

U32, F32 = np.uint32, np.float32
N = 256                                 # work-items of the single-instruction kernels (4 waves of 64)


@functools.lru_cache(maxsize=None)
def co950(ir: str) -> bytes:
    return amdq.compile(ir, "gfx950")


def listing(co: bytes) -> list:
    """Decoded instructions of every kernel of a code object (the gfx950 decoder)."""
    out = []
    for _, (addr, code, _) in kernels(co).items():
        pc = addr
        while pc < addr + len(code):
            inst = D.decode(code, pc, addr, True)
            out.append((inst, code, addr))
            pc += inst.size
    return out


def uses(co: bytes, name: str) -> None:
    """The object contains `name` (so the test exercises it), and gfx942's front end refuses that word."""
    hits = [(i, c, a) for i, c, a in listing(co) if i.name == name]
    assert hits, (name, sorted({i.name for i, _, _ in listing(co)}))
    inst, code, addr = hits[0]
    with pytest.raises(IllegalInstruction, match="gfx950"):
        for_isa("cdna3").decode(code, inst.pc, addr, True)
    assert for_isa("cdna4").decode(code, inst.pc, addr, True).key in for_isa("cdna4").handlers


def lane_ir(decls: str, tin: list[str], tout: list[str], body: str) -> str:
    """A kernel k(in0.., out0..): work-item i loads %x<j> = in<j>[i] (type tin[j]), runs body, which defines
    %r<j> of type tout[j], and stores out<j>[i] = %r<j>."""
    params = ", ".join([f"ptr addrspace(1) %in{j}" for j in range(len(tin))] +
                       [f"ptr addrspace(1) %out{j}" for j in range(len(tout))])
    lines = ["  %i = call i32 @llvm.amdgcn.workitem.id.x()"]
    for j, t in enumerate(tin):
        lines += [f"  %p{j} = getelementptr {t}, ptr addrspace(1) %in{j}, i32 %i", f"  %x{j} = load {t}, ptr addrspace(1) %p{j}"]
    lines.append(body)
    for j, t in enumerate(tout):
        lines += [f"  %q{j} = getelementptr {t}, ptr addrspace(1) %out{j}, i32 %i", f"  store {t} %r{j}, ptr addrspace(1) %q{j}"]
    return (f"declare i32 @llvm.amdgcn.workitem.id.x()\n{decls}\n"
            f"define amdgpu_kernel void @k({params}) {{\n" + "\n".join(lines) + "\n  ret void\n}\n")


def run_lanes(ir: str, ins: list[np.ndarray], outs: list[np.dtype]) -> list[np.ndarray]:
    args = [np.ascontiguousarray(x) for x in ins] + [np.zeros(N, t) for t in outs]
    res, _ = harness.run(co950(ir), "k", args, block=(N, 1, 1), arch="gfx950")
    return res[len(ins):]


def rng(seed: int):
    return np.random.default_rng(seed)


def test_gfx950_is_cdna4_and_gfx942_cdna3():
    """The target profile names the ISA family; the two CDNA front ends differ exactly by gfx950's additions."""
    assert get_target("gfx950").isa == "cdna4" and get_target("gfx942").isa == "cdna3"
    assert get_target("gfx950").gfx_version == get_target("gfx942").gfx_version == 9
    c3, c4 = for_isa("cdna3").handlers, for_isa("cdna4").handlers
    assert set(c3) < set(c4)
    new = set(c4) - set(c3)
    assert {"v_bitop3_b16", "v_bitop3_b32", "v_prng_b32", "v_permlane16_swap_b32", "v_permlane32_swap_b32",
            "v_minimum3_f32", "v_maximum3_f32", "v_cvt_pk_f16_f32", "v_cvt_pk_bf16_f32", "v_dot2c_f32_bf16",
            "v_mfma_f32_16x16x32_f16", "v_mfma_f32_32x32x16_bf16"} <= new
    keys = {D._canon(D._key(n)) for n in GFX950_ONLY} - {D._canon(D._key(n)) for n in ON_GFX942}
    assert new <= keys and not keys & set(c3)


# ---------------------------------------------------------------- bitwise

def bitop3_ref(a, b, c, table: int, bits: int) -> np.ndarray:
    """Bit k of the result is bit (a_k*4 + b_k*2 + c_k) of the table."""
    out = np.zeros(a.shape, np.uint64)
    for k in range(bits):
        idx = ((a >> k) & 1) * 4 + ((b >> k) & 1) * 2 + ((c >> k) & 1)
        out |= ((np.uint64(table) >> idx.astype(np.uint64)) & np.uint64(1)) << np.uint64(k)
    return out


def test_gfx942_dispatch_refuses_gfx950_code():
    """gfx950 code dispatched with gfx942's front end stops at its first gfx950-only instruction as an illegal
    instruction; the same code runs on gfx950's."""
    ir = lane_ir("declare i32 @llvm.amdgcn.prng.b32(i32)", ["i32"], ["i32"],
                 "  %r0 = call i32 @llvm.amdgcn.prng.b32(i32 %x0)")
    args = [np.arange(N, dtype=U32), np.zeros(N, U32)]
    with pytest.raises(IllegalInstruction, match="v_prng_b32.*gfx950"):
        harness.run(co950(ir), "k", args, block=(N, 1, 1), arch="gfx950", isa="cdna3")
    (_, out), _ = harness.run(co950(ir), "k", args, block=(N, 1, 1), arch="gfx950")
    assert out[3] == 6


@pytest.mark.parametrize("table", [0x01, 0x80, 0x96, 0x6C, 0x48, 0xE8, 0xCA, 0x3C, 0x5B])
@pytest.mark.parametrize("width", [32, 16])
def test_bitop3(table, width):
    """v_bitop3_b32/b16 with the truth table LLVM encodes in the modifier fields, for several tables."""
    t = f"i{width}"
    ir = lane_ir(f"declare {t} @llvm.amdgcn.bitop3.{t}({t}, {t}, {t}, i32 immarg)", [t] * 3, [t],
                 f"  %r0 = call {t} @llvm.amdgcn.bitop3.{t}({t} %x0, {t} %x1, {t} %x2, i32 {table})")
    dt = np.uint32 if width == 32 else np.uint16
    xs = [rng(table + i).integers(0, 1 << width, N, dtype=np.uint64).astype(dt) for i in range(3)]
    uses(co950(ir), f"V_BITOP3_B{width}")
    got, = run_lanes(ir, xs, [dt])
    want = bitop3_ref(*(x.astype(np.uint64) for x in xs), table, width).astype(dt)
    assert (got == want).all()


def test_prng():
    """v_prng_b32: (x << 1) ^ (x[31] ? 0xC5 : 0), the ISA's LFSR step."""
    ir = lane_ir("declare i32 @llvm.amdgcn.prng.b32(i32)", ["i32"], ["i32"],
                 "  %r0 = call i32 @llvm.amdgcn.prng.b32(i32 %x0)")
    x = rng(1).integers(0, 1 << 32, N, dtype=np.uint64).astype(U32)
    x[:4] = [0, 1, 0x80000000, 0xFFFFFFFF]
    uses(co950(ir), "V_PRNG_B32_E32")
    got, = run_lanes(ir, [x], [U32])
    want = [((v << 1) & 0xFFFFFFFF) ^ (0xC5 if v >> 31 else 0) for v in x.tolist()]
    assert got.tolist() == want


@pytest.mark.parametrize("span", [16, 32])
def test_permlane_swap(span):
    """permlane16_swap: odd rows of the first operand trade places with even rows of the second;
    permlane32_swap: rows 2-3 of the first with rows 0-1 of the second (rows of 16 lanes, per wave)."""
    ir = lane_ir(f"declare {{i32, i32}} @llvm.amdgcn.permlane{span}.swap(i32, i32, i1 immarg, i1 immarg)",
                 ["i32", "i32"], ["i32", "i32"],
                 f"  %s = call {{i32, i32}} @llvm.amdgcn.permlane{span}.swap(i32 %x0, i32 %x1, i1 false, i1 false)\n"
                 "  %r0 = extractvalue {i32, i32} %s, 0\n  %r1 = extractvalue {i32, i32} %s, 1")
    a, b = np.arange(N, dtype=U32) + 1000, np.arange(N, dtype=U32) + 5000
    uses(co950(ir), f"V_PERMLANE{span}_SWAP_B32_E32")
    r0, r1 = run_lanes(ir, [a, b], [U32, U32])
    want0, want1 = a.copy(), b.copy()
    for i in range(N):
        lane = i % 64
        if (lane // span) % 2:                  # a moving lane of the first operand ...
            want0[i], want1[i - span] = b[i - span], a[i]     # ... trades with the second's lane one block down
    assert (r0 == want0).all() and (r1 == want1).all()


# ---------------------------------------------------------------- floating point

def ieee_minmax(x: float, y: float, is_max: bool) -> float:
    """IEEE 754-2019 minimum/maximum: NaN if either is NaN; -0 < +0."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y == 0:
        neg = (math.copysign(1, x) < 0, math.copysign(1, y) < 0)
        return -0.0 if (all(neg) if is_max else any(neg)) else 0.0
    return max(x, y) if is_max else min(x, y)


@pytest.mark.parametrize("op", ["minimum", "maximum"])
def test_minimum3_maximum3(op):
    """llvm.minimum/maximum of three floats becomes v_minimum3/v_maximum3_f32: NaN-propagating, signed zeros."""
    ir = lane_ir(f"declare float @llvm.{op}.f32(float, float)", ["float"] * 3, ["float"],
                 f"  %m = call float @llvm.{op}.f32(float %x0, float %x1)\n"
                 f"  %r0 = call float @llvm.{op}.f32(float %m, float %x2)")
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.5, -2.0, 1e-40], F32)
    r = rng(3)
    xs = [r.choice(special, N).astype(F32) for _ in range(3)]
    xs[0][128:] = r.normal(size=128).astype(F32)
    uses(co950(ir), f"V_{op.upper()}3_F32")
    got, = run_lanes(ir, xs, [F32])
    for i in range(N):
        w = ieee_minmax(ieee_minmax(float(xs[0][i]), float(xs[1][i]), op == "maximum"), float(xs[2][i]), op == "maximum")
        g = float(got[i])
        assert (math.isnan(w) and math.isnan(g)) or (g == w and math.copysign(1, g) == math.copysign(1, w)), \
            (i, xs[0][i], xs[1][i], xs[2][i], g, w)


def bf16_rne(x: float) -> int:
    """bfloat16 bits of x rounded to nearest, ties to even (worked from the values of the two neighbours, not
    the bit trick the simulator uses); a value past the largest finite bf16 by half an ulp or more is inf."""
    if math.isnan(x):
        return 0x7FC0
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    lo = b >> 16
    if math.isinf(x):
        return lo
    vlo = struct.unpack("<f", struct.pack("<I", lo << 16))[0]
    hi = lo + 1
    vhi = struct.unpack("<f", struct.pack("<I", hi << 16))[0] if (hi & 0x7FFF) != 0x7F80 else math.copysign(2.0 ** 128, x)
    dlo, dhi = abs(x - vlo), abs(vhi - x)
    return lo if dlo < dhi or (dlo == dhi and lo % 2 == 0) else hi


@pytest.mark.parametrize("kind", ["half", "bfloat"])
def test_cvt_pk_f32(kind):
    """fptrunc <2 x float> -> v_cvt_pk_f16_f32 / v_cvt_pk_bf16_f32 (round to nearest even)."""
    ir = lane_ir("", ["float", "float"], ["i32"],
                 "  %v = insertelement <2 x float> poison, float %x0, i32 0\n"
                 "  %w = insertelement <2 x float> %v, float %x1, i32 1\n"
                 f"  %h = fptrunc <2 x float> %w to <2 x {kind}>\n  %r0 = bitcast <2 x {kind}> %h to i32")
    r = rng(4)
    xs = [(r.normal(size=N) * 10.0 ** r.integers(-3, 4, N)).astype(F32) for _ in range(2)]
    xs[0][:6] = [65520.0, 65519.0, 1e-7, -0.0, np.inf, 3.0e38]
    uses(co950(ir), "V_CVT_PK_F16_F32" if kind == "half" else "V_CVT_PK_BF16_F32")
    got, = run_lanes(ir, xs, [U32])
    if kind == "half":
        with np.errstate(over="ignore"):
            want = xs[0].astype(np.float16).view(np.uint16).astype(U32) | \
                xs[1].astype(np.float16).view(np.uint16).astype(U32) << U32(16)
    else:
        want = np.array([bf16_rne(float(a)) | bf16_rne(float(b)) << 16 for a, b in zip(*xs)], U32)
    assert (got == want).all(), np.flatnonzero(got != want)[:5]


def test_dot2_f32_bf16():
    """llvm.amdgcn.fdot2.f32.bf16 -> v_dot2c_f32_bf16 (VOP2, accumulating into its destination):
    a.lo*b.lo + a.hi*b.hi + c (small integers: exact)."""
    ir = lane_ir("declare float @llvm.amdgcn.fdot2.f32.bf16(<2 x bfloat>, <2 x bfloat>, float, i1 immarg)",
                 ["i32", "i32", "float"], ["float"],
                 "  %a = bitcast i32 %x0 to <2 x bfloat>\n  %b = bitcast i32 %x1 to <2 x bfloat>\n"
                 "  %r0 = call float @llvm.amdgcn.fdot2.f32.bf16(<2 x bfloat> %a, <2 x bfloat> %b, float %x2, i1 false)")
    r = rng(5)
    v = r.integers(-50, 50, (4, N)).astype(F32)
    bits = (v.view(U32) >> U32(16)).astype(U32)
    a, b = bits[0] | bits[1] << U32(16), bits[2] | bits[3] << U32(16)
    c = r.integers(-1000, 1000, N).astype(F32)
    uses(co950(ir), "V_DOT2C_F32_BF16_E32")
    got, = run_lanes(ir, [a, b, c], [F32])
    assert (got == v[0] * v[2] + v[1] * v[3] + c).all()


# ---------------------------------------------------------------- MFMA shapes gfx950 adds

MFMA950 = {  # intrinsic: (M, K, element IR type, numpy element, accumulator IR type)
    "mfma.f32.16x16x32.f16": (16, 32, "half", np.float16, "float"),
    "mfma.f32.32x32x16.f16": (32, 16, "half", np.float16, "float"),
    "mfma.f32.16x16x32.bf16": (16, 32, "bfloat", "bf16", "float"),
    "mfma.f32.32x32x16.bf16": (32, 16, "bfloat", "bf16", "float"),
    "mfma.i32.16x16x64.i8": (16, 64, "i8", np.int8, "i32"),
    "mfma.i32.32x32x32.i8": (32, 32, "i8", np.int8, "i32"),
}


def mfma_ir(name: str) -> str:
    """One MFMA per wave64: lane l loads A[l%M][E*(l/M)+j] and B[E*(l/M)+j][l%M] (j < E = K/(64/M)) and the
    C/D elements [4G(r/4) + 4(l/M) + r%4][l%M] of its registers r (the documented MFMA operand layout)."""
    m, k, et, _, at = MFMA950[name]
    g, e, nr = 64 // m, k // (64 // m), m * m // 64
    raw = "i16" if et == "bfloat" else et
    vec = f"<{e} x {et}>"
    src = f"<{e * 8 // 32} x i32>" if et == "i8" else vec
    lines = ["  %l = call i32 @llvm.amdgcn.workitem.id.x()", f"  %row = urem i32 %l, {m}", f"  %grp = udiv i32 %l, {m}",
             f"  %ka = mul i32 %grp, {e}", f"  %ra = mul i32 %row, {k}", "  %va0 = insertelement " + vec + " poison, "
             f"{et} poison, i32 0", "  %vb0 = insertelement " + vec + f" poison, {et} poison, i32 0"]
    for j in range(e):
        lines += [f"  %kj{j} = add i32 %ka, {j}", f"  %ia{j} = add i32 %ra, %kj{j}", f"  %ib0{j} = mul i32 %kj{j}, {m}",
                  f"  %ib{j} = add i32 %ib0{j}, %row",
                  f"  %pa{j} = getelementptr {raw}, ptr addrspace(1) %a, i32 %ia{j}",
                  f"  %pb{j} = getelementptr {raw}, ptr addrspace(1) %b, i32 %ib{j}",
                  f"  %xa{j} = load {raw}, ptr addrspace(1) %pa{j}", f"  %xb{j} = load {raw}, ptr addrspace(1) %pb{j}"]
        if et == "bfloat":
            lines += [f"  %ya{j} = bitcast i16 %xa{j} to bfloat", f"  %yb{j} = bitcast i16 %xb{j} to bfloat"]
        else:
            lines += [f"  %ya{j} = bitcast {et} %xa{j} to {et}", f"  %yb{j} = bitcast {et} %xb{j} to {et}"]
        lines += [f"  %va{j + 1} = insertelement {vec} %va{j}, {et} %ya{j}, i32 {j}",
                  f"  %vb{j + 1} = insertelement {vec} %vb{j}, {et} %yb{j}, i32 {j}"]
    lines += [f"  %sa = bitcast {vec} %va{e} to {src}", f"  %sb = bitcast {vec} %vb{e} to {src}"]
    acc = f"<{nr} x {at}>"
    lines.append(f"  %c0 = insertelement {acc} poison, {at} poison, i32 0")
    for r in range(nr):
        row = f"{4 * g * (r // 4) + r % 4}"
        lines += [f"  %cr{r} = mul i32 %grp, 4", f"  %cs{r} = add i32 %cr{r}, {row}", f"  %ct{r} = mul i32 %cs{r}, {m}",
                  f"  %ci{r} = add i32 %ct{r}, %row", f"  %pc{r} = getelementptr {at}, ptr addrspace(1) %c, i32 %ci{r}",
                  f"  %xc{r} = load {at}, ptr addrspace(1) %pc{r}",
                  f"  %c{r + 1} = insertelement {acc} %c{r}, {at} %xc{r}, i32 {r}"]
    lines.append(f"  %dv = call {acc} @llvm.amdgcn.{name}({src} %sa, {src} %sb, {acc} %c{nr}, i32 0, i32 0, i32 0)")
    for r in range(nr):
        lines += [f"  %xd{r} = extractelement {acc} %dv, i32 {r}",
                  f"  %pd{r} = getelementptr {at}, ptr addrspace(1) %d, i32 %ci{r}", f"  store {at} %xd{r}, ptr addrspace(1) %pd{r}"]
    return (f"declare i32 @llvm.amdgcn.workitem.id.x()\ndeclare {acc} @llvm.amdgcn.{name}({src}, {src}, {acc}, i32 immarg, "
            f"i32 immarg, i32 immarg)\ndefine amdgpu_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b, "
            f"ptr addrspace(1) %c, ptr addrspace(1) %d) {{\n" + "\n".join(lines) + "\n  ret void\n}\n")


@pytest.mark.parametrize("name", sorted(MFMA950))
def test_mfma_gfx950_shapes(name):
    """D = A B + C for the MFMA shapes only gfx950 has, one per wave64, against numpy matmul (integer-valued
    data, so every summation order gives the same result)."""
    m, k, _, tin, at = MFMA950[name]
    r = rng(m * k)
    lo, hi = (-128, 128) if tin is np.int8 else (-8, 9)
    a, b, c = r.integers(lo, hi, (m, k)), r.integers(lo, hi, (k, m)), r.integers(-1000, 1000, (m, m))
    if tin == "bf16":
        ta, tb = ((x.astype(F32).view(U32) >> 16).astype(np.int16) for x in (a, b))
    else:
        ta, tb = a.astype(tin), b.astype(tin)
    tout = np.int32 if at == "i32" else F32
    co = co950(mfma_ir(name))
    uses(co, "V_" + name.replace(".", "_").upper())
    (_, _, _, d), _ = harness.run(co, "k", [ta, tb, c.astype(tout), np.zeros((m, m), tout)], arch="gfx950")
    assert (d.astype(np.int64) == a.astype(np.int64) @ b.astype(np.int64) + c).all()


# ---------------------------------------------------------------- the kernel suite on gfx950

SUITE = sorted(n for n in dir(suite) if n.startswith("test_"))


@pytest.mark.parametrize("name", SUITE)
def test_suite_kernel_gfx950(name, monkeypatch):
    """A suite kernel compiled for gfx950 (LLVM 22, wave64) on the shader core, checked as the suite checks it."""
    def run_cl(*a, **k):
        k = {**k, "arch": "gfx950", "flags": tuple(f for f in k.get("flags", ()) if "wavefrontsize" not in f)}
        return harness.run_cl(*a, **k)
    monkeypatch.setattr(suite, "run_cl", run_cl)
    fn = getattr(suite, name)
    params = inspect.signature(fn).parameters
    fn(**{p: {"wave": 64, "b": 128}[p] for p in params})


# ---------------------------------------------------------------- AccVGPR spills (gfx942 and gfx950)

SPILL_CL = str(KERNELS.parent / "kernels_cdna" / "spill_agpr.cl")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_agpr_spill_restore(arch):
    """A kernel under register pressure (amdgpu_num_vgpr(40), 48 live accumulators) that LLVM spills to AccVGPRs:
    the object holds v_accvgpr_write/read and no scratch traffic, and the result matches numpy (integer-valued
    data, exact in f32 under any contraction)."""
    if arch == "gfx942":          # clang-19 (LLVM 19), an AGPR operand in inline asm lets it use AccVGPRs
        co = compile_cl(SPILL_CL, arch, flags=("-DAMDQ_AGPR_ASM",)).read_bytes()
    else:                         # LLVM 22 through llvmlite, told it may allocate 32 AccVGPRs
        co = compile_cl_llvm22(SPILL_CL, arch, agpr_alloc=32).read_bytes()
    names = [i.name for i, _, _ in listing(co)]
    assert names.count("V_ACCVGPR_WRITE") >= 20 and names.count("V_ACCVGPR_READ") >= 20, sorted(set(names))
    assert not any(n.startswith(("SCRATCH_", "BUFFER_")) for n in names)
    nacc, n, items = 48, 3, 128
    x = rng(7).integers(-4, 5, items * nacc).astype(F32)
    (_, out), _ = harness.run(co, "spill_agpr", [x, np.zeros(items * nacc, F32), n], grid=(2, 1, 1),
                                 block=(64, 1, 1), arch=arch)
    acc = x.reshape(items, nacc).astype(np.float64)
    for t in range(n):
        s = x[(np.arange(items) + t) % 64].astype(np.float64)
        for j in range(nacc):
            acc[:, j] = acc[:, j] * s + acc[:, (j + 1) % nacc]
    assert np.abs(acc).max() < 2 ** 24 and (out.reshape(items, nacc) == acc).all()
