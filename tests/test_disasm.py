"""The gfx11 decoder and disassembler against LLVM 19 (llvm-objdump / llvm-mc as oracles)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from amdq.errors import IllegalInstruction
from amdq.hw import isa
from amdq.hw.isa.decode import DPP8, DPP16, decode, decode_program
from amdq.hw.isa.text import text
from amdq.tools.disasm import disassemble, disassemble_elf, kernels
from clang import KERNELS, compile_cl, tool

CL = sorted(p.name for p in KERNELS.glob("*.cl"))
LINE = re.compile(r"^\s+(\S.*?)\s*//\s*([0-9A-Fa-f]+):")


def cl_flags(name: str) -> tuple[str, ...]:
    m = re.search(r"^// flags: (.*)$", (KERNELS / name).read_text(), re.M)
    return tuple(m.group(1).split()) if m else ()


def objdump(path: Path, mcpu: str = "gfx1100") -> dict[int, str]:
    """pc -> instruction text (before the // comment) from llvm-objdump-19."""
    out = subprocess.run([tool("llvm-objdump"), "-d", f"--mcpu={mcpu}", str(path)], capture_output=True, text=True,
                         check=True).stdout
    res = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            res[int(m.group(2), 16)] = " ".join(m.group(1).split())
    return res


def norm(s: str) -> str:
    return " ".join(s.split())


def compare(path: Path, mcpu: str = "gfx1100") -> tuple[int, list[str]]:
    ref = objdump(path, mcpu)
    ours = {}
    for name, listing in disassemble_elf(path.read_bytes()).items():
        ours.update({pc: t for pc, _, t in listing})
    # s_code_end (gfx9: s_nop 0) words pad the code section after and between functions; they belong to no symbol
    ref = {pc: t for pc, t in ref.items() if not (t in ("s_code_end", "s_nop 0") and pc not in ours)}
    bad = [f"{pc:#x}: llvm '{t}' ours '{norm(ours.get(pc, '<missing>'))}'" for pc, t in ref.items() if norm(ours.get(pc, "")) != t]
    return len(ref), bad


@pytest.mark.parametrize("name", CL)
def test_kernel_matches_objdump(name: str) -> None:
    path = compile_cl(name, "gfx1100", flags=cl_flags(name))
    total, bad = compare(path)
    assert total > 0
    assert not bad, f"{len(bad)}/{total} differ:\n" + "\n".join(bad[:40])


@pytest.mark.parametrize("name", CL + ["mfma"])
def test_kernel_matches_objdump_gfx942(name: str) -> None:
    """The suite (and the MFMA kernels) compiled for gfx942: every instruction as llvm-objdump --mcpu=gfx942."""
    src = str(KERNELS.parent / "kernels_cdna" / "mfma.cl") if name == "mfma" else name
    flags = tuple(f for f in cl_flags(name) if "wavefrontsize" not in f) if name != "mfma" else ()
    total, bad = compare(compile_cl(src, "gfx942", flags=flags), "gfx942")
    assert total > 0
    assert not bad, f"{len(bad)}/{total} differ:\n" + "\n".join(bad[:40])


def test_disasm_cli_gfx942() -> None:
    """`amdq disasm` on a clang-19 gfx942 code object prints the listing llvm-objdump does."""
    import sys
    path = compile_cl("matmul_tiled.cl", "gfx942")
    r = subprocess.run([sys.executable, "-m", "amdq.cli", "disasm", "--no-labels", str(path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line.split(None, 1) for line in r.stdout.splitlines() if line.startswith("  ")]
    ours = {int(pc, 16): norm(t) for pc, t in rows}
    ref = {pc: t for pc, t in objdump(path, "gfx942").items() if not (t == "s_nop 0" and pc not in ours)}
    assert r.stdout.splitlines()[0].endswith(":") and len(ref) > 20
    assert ours == ref, [(hex(pc), ours.get(pc), t) for pc, t in ref.items() if ours.get(pc) != t][:20]
    assert any(t.startswith("global_load_dword") for t in ours.values()) and "s_endpgm" in ours.values()


def test_kernel_symbols() -> None:
    ks = kernels(compile_cl("vadd.cl", "gfx1100").read_bytes())
    assert list(ks) == ["vadd"]
    addr, code, wave64 = ks["vadd"]
    assert not wave64
    prog = decode_program(code, addr)
    assert prog[addr].key == "s_clause" or prog[addr].enc in ("SMEM", "SOPP")
    assert any(i.key == "s_endpgm" for i in prog.values())


# ---------------------------------------------------------------- single instructions against llvm-mc

def mc_disasm(words: bytes) -> str:
    arg = ",".join(f"0x{b:02x}" for b in words)
    out = subprocess.run([tool("llvm-mc"), "-triple=amdgcn", "-mcpu=gfx1100", "--disassemble"], input=arg,
                         capture_output=True, text=True).stdout
    lines = [l.strip() for l in out.splitlines() if l.strip() and not l.strip().startswith(".")]
    return norm(lines[0]) if lines else ""


def asm(src: str) -> bytes:
    out = subprocess.run([tool("llvm-mc"), "-triple=amdgcn", "-mcpu=gfx1100", "--show-encoding"], input=src,
                         capture_output=True, text=True).stdout
    m = re.search(r"encoding: \[([^\]]*)\]", out)
    assert m, f"llvm-mc could not assemble {src!r}"
    return bytes(int(b, 16) for b in m.group(1).split(","))


TRICKY = [
    "v_add_f32_e64 v0, -|v1|, v2 clamp mul:2",
    "v_fma_f32 v0, v1, 0x40490fdb, v3",
    "v_fma_f64 v[0:1], 0x40080000, v[2:3], v[4:5]",
    "v_fma_f16 v0, v1, v2, v3 op_sel:[1,0,1,1]",
    "v_add_nc_u16 v1, 0x1234, v2",
    "v_pk_fma_f16 v0, v1, v2, v3 op_sel:[1,0,0] op_sel_hi:[0,1,1] neg_lo:[1,0,0] neg_hi:[0,0,1] clamp",
    "v_pk_add_f16 v0, v1, v2 op_sel_hi:[0,0]",
    "v_mov_b32_dpp v0, v1 row_shl:1 row_mask:0x3 bank_mask:0x1 bound_ctrl:1 fi:1",
    "v_mov_b32_dpp v0, v1 dpp8:[7,6,5,4,3,2,1,0] fi:1",
    "v_add_f32_dpp v0, -v1, |v2| row_mirror row_mask:0xf bank_mask:0xf",
    "v_add_f32_e64_dpp v0, v1, v2 row_half_mirror row_mask:0xf bank_mask:0xf",
    "v_add_f32_e64_dpp v0, v1, v2 dpp8:[1,1,1,1,1,1,1,1]",
    "v_mov_b32_dpp v0, v1 row_share:3 row_mask:0xf bank_mask:0xf",
    "v_dual_fmaak_f32 v1, v2, v3, 0x40400000 :: v_dual_mov_b32 v2, 0x40400000",
    "v_dual_fmamk_f32 v2, v8, 0x32a5705f, v4 :: v_dual_sub_f32 v3, v3, v5",
    "v_dual_cndmask_b32 v10, v12, v8 :: v_dual_cndmask_b32 v11, v13, v7",
    "v_cmp_class_f32_e64 s0, -v1, v2",
    "v_cmp_gt_f32_e64 vcc_lo, 0x7f800000, |v6|",
    "v_cmpx_gt_i32_e64 s1, v2",
    "v_cmp_lt_u64_e32 vcc_lo, s[0:1], v[2:3]",
    "v_cndmask_b32_e64 v0, v1, v2, s4",
    "v_add_co_ci_u32_e64 v0, s0, v1, v2, s3",
    "v_mad_u64_u32 v[1:2], null, s15, s4, v[0:1]",
    "v_readlane_b32 s1, v2, 3",
    "v_writelane_b32 v1, s2, m0",
    "v_fmamk_f32 v0, v1, 0x40000000, v2",
    "v_frexp_exp_i32_f32_e64 v0, 0x3fc00000",
    "v_frexp_mant_f32_e64 v0, -|v1| clamp",
    "v_cvt_off_f32_i4_e64 v1, 5",
    "v_cvt_f32_f16_e64 v0, -|s1|",
    "v_sat_pk_u8_i16_e64 v1, 0x12345",
    "v_movrels_b32_e64 v1, v3",
    "v_mov_b32_e64 v0, 0.5",
    "v_fmaak_f16 v0, v1, v2, 0x4000",
    "v_mov_b32_e32 v0, src_scc",
    "s_mov_b64 exec, vcc",
    "s_mov_b32 s0, ttmp5",
    "s_and_b32 s4, s4, 0xffff",
    "s_getreg_b32 s0, hwreg(HW_REG_MODE, 0, 4)",
    "s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 4), 0x1234",
    "s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)",
    "s_sendmsg_rtn_b32 s0, sendmsg(MSG_RTN_GET_DOORBELL)",
    "s_waitcnt vmcnt(1) lgkmcnt(2)",
    "s_waitcnt_depctr depctr_va_vdst(0)",
    "s_delay_alu instid0(TRANS32_DEP_2) | instskip(SKIP_4) | instid1(FMA_ACCUM_CYCLE_1)",
    "s_cbranch_scc0 -3",
    "s_load_b32 s4, s[0:1], s5 offset:0x10",
    "s_buffer_load_b64 s[2:3], s[4:7], 0x10 glc dlc",
    "ds_store_2addr_b64 v1, v[2:3], v[4:5] offset0:1 offset1:255",
    "ds_load_b32 v1, v2 offset:65535 gds",
    "ds_cmpstore_rtn_b32 v0, v1, v2, v3 offset:8",
    "global_load_b32 v0, v1, s[0:1] offset:-4096",
    "global_atomic_cmpswap_b64 v[0:1], v2, v[4:7], s[0:1] glc",
    "global_atomic_add_f32 v1, v2, s[2:3]",
    "scratch_load_b32 v1, off, s0 offset:16",
    "scratch_store_b64 v2, v[4:5], off offset:-8",
    "flat_atomic_cmpswap_b32 v0, v[1:2], v[3:4] glc slc dlc",
    "buffer_load_b32 v1, v2, s[4:7], s0 offen offset:16",
    "buffer_store_b64 v[1:2], off, s[4:7], 0 offset:4 glc",
    "buffer_gl0_inv",
]


@pytest.mark.parametrize("src", TRICKY)
def test_tricky_words(src: str) -> None:
    words = asm(src)
    ref = mc_disasm(words)
    inst = decode(words, 0)
    assert inst.size == len(words)
    assert text(inst) == ref


def test_decoded_fields() -> None:
    i = decode(asm("v_fma_f32 v0, -v1, 0x40490fdb, |v3| clamp"), 0)
    assert (i.enc, i.key, i.size, i.clamp) == ("VOP3", "v_fma_f32", 12, 1)
    assert [s.kind for s in i.src] == ["v", "c", "v"] and i.src[0].neg and i.src[2].abs
    assert i.src[1].value == 0x40490FDB and i.src[1].literal and i.literal == 0x40490FDB
    i = decode(asm("v_add_f64 v[0:1], 0.5, v[2:3]"), 0)
    assert i.src[0].value == 0x3FE0000000000000 and i.dst[0].n == 2
    i = decode(asm("v_add_f16_e32 v0, 0.5, v1"), 0)
    assert i.src[0].value == 0x3800 and i.key == "v_add_f16"
    i = decode(asm("v_cmp_gt_i32_e32 vcc_lo, s3, v1"), 0)
    assert i.dst[0].reg == 106 and i.key == "v_cmp_gt_i32"
    i = decode(asm("v_cmp_gt_i32_e64 s5, -4, v1"), 0)
    assert i.e64 and i.dst[0].reg == 5 and i.src[0].value == 0xFFFFFFFC
    i = decode(asm("v_mov_b32_dpp v0, v1 row_shr:1 row_mask:0xf bank_mask:0x3"), 0)
    assert isinstance(i.dpp, DPP16) and i.dpp.ctrl == 0x111 and i.dpp.bank_mask == 3 and i.src[0].reg == 1
    i = decode(asm("v_mov_b32_dpp v0, v1 dpp8:[1,0,3,2,5,4,7,6]"), 0)
    assert isinstance(i.dpp, DPP8) and i.dpp.sel == (1, 0, 3, 2, 5, 4, 7, 6)
    i = decode(asm("v_dual_fmaak_f32 v1, v2, v3, 0x40400000 :: v_dual_mov_b32 v6, s3"), 0)
    assert i.x.key == "v_fmaak_f32" and i.y.key == "v_mov_b32" and i.y.dst.reg == 6 and i.x.src[2].value == 0x40400000
    i = decode(asm("s_cbranch_scc0 -3"), 0x100, 0x100)
    assert i.simm16 == -3 and i.target == 0x100 + 4 - 12
    i = decode(asm("global_load_b64 v[0:1], v2, s[4:5] offset:-8"), 0)
    assert i.offset == -8 and i.addr.n == 1 and i.saddr.reg == 4 and i.dst[0].n == 2
    i = decode(asm("ds_load_2addr_b32 v[0:1], v2 offset0:1 offset1:9"), 0)
    assert (i.offset0, i.offset1, i.addr.reg) == (1, 9, 2)
    i = decode(asm("v_frexp_exp_i32_f32_e64 v0, 0x3fc00000"), 0)      # VOP3 form of an operand the table calls vsrc0
    assert (i.size, i.literal, len(i.src), i.src[0].value, i.src[0].literal) == (12, 0x3FC00000, 1, 0x3FC00000, True)
    i = decode(asm("v_cvt_f32_f16_e64 v0, -|v1|"), 0)
    assert i.src[0].reg == 1 and i.src[0].kind == "v" and i.src[0].neg and i.src[0].abs and i.src[0].bits == 16
    i = decode(asm("s_load_b64 s[2:3], s[0:1], 0x18"), 0)
    assert i.sbase.reg == 0 and i.offset == 0x18 and i.dst[0].n == 2 and i.soffset is None


def test_undefined_opcode_raises() -> None:
    e = isa.encodings()["VOP1"]
    word = e.encode(op=0x7F, vdst=0, src0=256)            # VOP1 opcode 127 is not defined
    assert isa.opcode("VOP1Op", 0x7F) is None
    with pytest.raises(IllegalInstruction, match="undefined VOP1 opcode 127 at pc 0x40"):
        decode(word, 0x40, 0x40)
    free = next(n for n in range(0x60) if isa.opcode("SOP2Op", n) is None)
    with pytest.raises(IllegalInstruction, match=f"undefined SOP2 opcode {free}"):
        decode(isa.encode("SOP2", op=free, sdst=0, ssrc0=0, ssrc1=0), 0)
    assert disassemble(word, "gfx1100")[0][2].startswith(".long")


def test_encode_roundtrip() -> None:
    w = isa.encode("VOP2", op="V_ADD_F32_E32", vdst=3, src0=256 + 1, vsrc1=2)
    assert text(decode(w, 0)) == "v_add_f32_e32 v3, v1, v2"
    assert isa.encodings()["VOP2"].unpack(int.from_bytes(w, "little"))["vdst"] == 3


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx942"])
def test_kernels_compile_for_every_target(arch: str) -> None:
    for name in CL:
        assert compile_cl(name, arch, flags=cl_flags(name)).stat().st_size > 0


FUZZ = ["SOP1", "SOP2", "SOPK", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOPD", "DS", "GLOBAL", "SCRATCH", "MUBUF"]


def _random_words(fam: str, rng) -> bytes:
    e = isa.encodings()[fam]
    vals = {}
    for f, (lo, hi, kind, _) in e.fields.items():
        w = hi - lo + 1
        if kind == "op":
            vals[f] = rng.choice([n for n in isa.tables().OPCODES[e.enum] if n < 1 << w])
        elif kind == "src":
            vals[f] = rng.choice([256 + rng.randrange(256), rng.randrange(106), rng.randrange(128, 209), 240, 248, 255, 106])
        elif kind == "ssrc":
            vals[f] = rng.choice([rng.randrange(106), 106, 124, 126, rng.randrange(128, 209), 242, 255])
        elif kind == "sgpr":
            vals[f] = rng.choice([rng.randrange(100), 106, 124, 126]) & ((1 << w) - 1)
        elif kind != "fixed":
            vals[f] = rng.randrange(1 << w)
    return e.encode(**vals) + rng.randrange(1 << 64).to_bytes(8, "little")


@pytest.mark.parametrize("fam", FUZZ)
def test_random_words_match_llvm_mc(fam: str) -> None:
    """Random valid-opcode words of each encoding decode to the text and size llvm-mc gives them."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    rng = random.Random(fam)
    cases = [_random_words(fam, rng) for _ in range(24)]

    def ref(words: bytes) -> tuple[str, int] | None:
        arg = ",".join(f"0x{b:02x}" for b in words)
        p = subprocess.run([tool("llvm-mc"), "-triple=amdgcn", "-mcpu=gfx1100", "--disassemble", "-show-encoding"],
                           input=arg, capture_output=True, text=True)
        lines = [l.strip() for l in p.stdout.splitlines() if l.strip() and not l.strip().startswith(".")]
        if not lines or p.stderr.startswith("<stdin>:1:1:") or "/*" in lines[0]:
            return None   # LLVM rejects the word (or an operand of it): nothing to compare
        t, _, enc = lines[0].partition("; encoding:")
        return norm(t), enc.count("0x")

    with ThreadPoolExecutor(8) as ex:
        refs = list(ex.map(ref, cases))
    bad = []
    for words, r in zip(cases, refs):
        if r is None or r[0].startswith("v_mov_b16"):   # true16 register names (v1.l) are not printed
            continue
        i = decode(words, 0)
        if r[1] != i.size and any(o.bits == 16 and o.kind == "c" and 240 <= o.code <= 248 for o in i.src):
            continue   # LLVM reads a float inline constant of a 16-bit integer operand as a literal; hardware does not
        if (text(i), i.size) != r:
            bad.append(f"{words[:i.size].hex()}: llvm {r} ours {(text(i), i.size)}")
    assert not bad, "\n".join(bad)


def test_mask_dead_lookahead() -> None:
    """A carry or compare mask is dead only when straight-line code overwrites it before any read."""
    from amdq.hw.isa.decode import mask_dead

    def prog(*lines: str) -> tuple[bytes, list[int]]:
        code, pcs = b"", []
        for line in lines:
            pcs.append(len(code))
            code += asm(line)
        return code, pcs

    code, pcs = prog("v_add_co_u32 v0, vcc_lo, v1, v2", "v_add_co_ci_u32_e32 v3, vcc_lo, v4, v5, vcc_lo",
                     "s_waitcnt vmcnt(0)", "v_add_co_u32 v6, vcc_lo, v1, v2", "v_cndmask_b32_e32 v7, v1, v2, vcc_lo",
                     "v_cmp_gt_i32_e32 vcc_lo, v1, v2", "s_cbranch_vccz 2", "v_cmp_lt_i32_e32 vcc_lo, v1, v2",
                     "s_endpgm")
    dead = [mask_dead(code, 0, False, decode(code, pc)) for pc in pcs]
    assert dead[:2] == [False, True]          # read by the carry-in / overwritten by the next carry out
    assert dead[3] is False                   # read by v_cndmask
    assert dead[5] is False                   # read by the branch (control flow ends the look-ahead anyway)
    assert dead[7] is True                    # nothing after it but s_endpgm
    code, pcs = prog("v_cmp_gt_i32_e32 vcc_lo, v1, v2", "s_and_saveexec_b32 s0, vcc_lo", "s_endpgm")
    assert mask_dead(code, 0, False, decode(code, 0)) is False
    code, pcs = prog("v_add_co_u32 v0, s4, v1, v2", "v_add_co_u32 v3, s5, v1, v2", "v_add_co_u32 v3, s4, v1, v2")
    assert mask_dead(code, 0, False, decode(code, 0)) is True
    assert mask_dead(code, 0, False, decode(code, pcs[1])) is False     # runs out of code: unsure


def test_public_disassemble_contract() -> None:
    """disassemble(code, arch, base, wave64): (address, size, text) rows, .long for a word it cannot decode,
    UnsupportedTarget only for an arch without a decoder; the default wave size is the target's."""
    from amdq.errors import UnsupportedTarget
    code = bytes.fromhex("01050406") + bytes.fromhex("ffffffff") + bytes.fromhex("ff0084be78563412")
    rows = disassemble(code, "gfx1100", base=0x100)
    assert [(a, n) for a, n, _ in rows] == [(0x100, 4), (0x104, 4), (0x108, 8)]
    assert rows[0][2] == "v_add_f32_e32 v2, v1, v2" and rows[1][2] == ".long 0xffffffff"
    assert rows[2][2] == "s_mov_b32 s4, 0x12345678"
    assert disassemble(code, "rdna3") == disassemble(code, "gfx1100") and rows == disassemble(code, "gfx1100:xnack-", 0x100)
    vcmp = bytes.fromhex("0105227c")                       # v_cmp_lt_f32: the wave size decides vcc vs vcc_lo
    assert disassemble(vcmp, "gfx1100")[0][2] != disassemble(vcmp, "gfx1100", wave64=True)[0][2]
    with pytest.raises(UnsupportedTarget):
        disassemble(code, "gfx8000")


def test_tools_do_not_import_the_simulator() -> None:
    """The decoder and the text formatting live with the ISA facts: the disassembler runs without amdq.sim."""
    import subprocess
    import sys
    code = ("import sys, amdq.tools.disasm as d; d.disassemble(bytes(8), 'gfx1100'); d.disassemble(bytes(8), 'gfx1200');"
            "print(sorted(m for m in sys.modules if m.startswith('amdq.sim')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
