"""The gfx12 decoder's image, interpolation, LDS-direct and export encodings, and RDNA4 text details, against
llvm-mc-19 (it assembles the text; amdq must decode the bytes back to operands and to the same text)."""
from __future__ import annotations

import re
import subprocess

import pytest

from amdq.errors import IllegalInstruction, UnsupportedInstruction
from amdq.hw.isa.decode_rdna4 import decode, image_addr_words
from amdq.hw.isa.text import text
from amdq.sim.shader.isa import for_gfx
from amdq.tools.disasm import disassemble
from clang import tool

RDNA4 = for_gfx(12)


def assemble(src: str, mcpu: str = "gfx1200") -> bytes:
    r = subprocess.run([tool("llvm-mc"), "-triple=amdgcn", f"-mcpu={mcpu}", "--show-encoding"], input=src,
                       capture_output=True, text=True)
    m = re.search(r"encoding: \[(.*)\]", r.stdout)
    assert m, r.stderr
    return bytes(int(x, 16) for x in m.group(1).split(","))


# LLVM-syntax lines whose round trip (llvm-mc assembles, amdq disassembles) must give the same text back
ROUND_TRIP = [
    "image_load v[1:4], [v2, v3], s[4:11] dmask:0xf dim:SQ_RSRC_IMG_2D",
    "image_load v[0:1], v0, s[0:7] dmask:0xf dim:SQ_RSRC_IMG_1D d16",
    "image_load v[1:5], [v0, v1], s[16:23] dmask:0xf dim:SQ_RSRC_IMG_2D tfe",
    "image_store v[0:3], [v4, v5], s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D_MSAA a16",
    "image_atomic_cmpswap v[4:5], [v6, v7], s[8:15] dmask:0x3 dim:SQ_RSRC_IMG_2D th:TH_ATOMIC_RETURN",
    "image_get_resinfo v[4:7], v32, s[96:103] dmask:0xf dim:SQ_RSRC_IMG_2D_MSAA_ARRAY",
    "image_sample_d v[64:65], [v32, v33, v34, v[35:40]], s[4:11], s[4:7] dmask:0x3 dim:SQ_RSRC_IMG_3D",
    "image_sample_c_d_o_g16 v[64:65], [v32, v33, v34, v[35:39]], s[4:11], s[4:7] dmask:0x3 dim:SQ_RSRC_IMG_3D a16",
    "image_sample v[38:39], [v40, v41], s[40:47], s[60:63] dmask:0xc dim:SQ_RSRC_IMG_CUBE unorm th:TH_LOAD_HT "
    "scope:SCOPE_DEV r128 a16 tfe lwe d16",
    "image_gather4_c_lz_o v[64:67], [v32, v33, v34, v35], s[4:11], s[4:7] dmask:0x4 dim:SQ_RSRC_IMG_2D_ARRAY a16",
    "image_msaa_load v[1:4], [v8, v6, v5, v7], s[8:15] dmask:0x4 dim:SQ_RSRC_IMG_2D_MSAA_ARRAY unorm",
    "image_bvh64_intersect_ray v[4:7], [v[9:10], v11, v[12:14], v[15:17], v[18:20]], s[4:7]",
    "image_bvh_intersect_ray v[4:7], [v9, v10, v[11:13], v[14:16]], s[4:7] a16",
    "v_interp_p10_f32 v0, -v1, v2, v3 clamp wait_exp:7",
    "v_interp_p2_f16_f32 v0, v1, v2, v3 op_sel:[1,0,1,1] wait_exp:2",
    "ds_param_load v11, attr22.y wait_va_vdst:5 wait_vm_vsrc:1",
    "ds_direct_load v10 wait_va_vdst:6 wait_vm_vsrc:0",
    "export pos4 v1, off, v3, off done",
    "export mrtz v4, v3, v2, v1 row_en",
    "tbuffer_load_format_xyz v[4:6], off, ttmp[4:7], s3 format:[BUF_FMT_10_10_10_2_SINT] offset:8388607 "
    "th:TH_LOAD_BYPASS scope:SCOPE_SYS",
    "tbuffer_store_format_x v1, v0, s[8:11], s2 format:[BUF_FMT_32_FLOAT] offen offset:16",
    "tbuffer_load_format_x v1, v0, s[8:11], s2 offen",                 # format 1 (BUF_FMT_8_UNORM) is implied
    # OPSEL that is no half select
    "v_cvt_sr_fp8_f32 v1, v2, v3 byte_sel:3",
    "v_cvt_f32_bf8_e64 v1, v3 byte_sel:1",
    "v_cvt_f32_fp8_e64_dpp v1, v2 byte_sel:2 quad_perm:[0,1,2,3] row_mask:0xf bank_mask:0xf",
    "v_swmmac_f32_16x16x32_f16 v[12:19], v[0:3], v[4:11], v20 index_key:1",
    "v_permlanex16_var_b32 v5, v1, v100 op_sel:[1,0]",
    # scalar specials
    "s_prefetch_inst s[14:15], -0x1, m0, 7",
    "s_buffer_prefetch_data s[20:23], 0x64, null, 7",
    "s_prefetch_data_pc_rel 0x64, s10, 31",
    "s_getreg_b32 s0, hwreg(HW_REG_EXCP_FLAG_PRIV, 7, 25)",
    "s_setreg_b32 hwreg(HW_REG_SCRATCH_BASE_HI), s3",
    "s_getreg_b32 s0, hwreg(HW_REG_DVGPR_ALLOC_LO)",
    "s_sendmsg_rtn_b32 s0, sendmsg(MSG_RTN_GET_SE_AID_ID)",
    "s_sendmsg sendmsg(5, 0, 0)",                 # gfx11's MSG_STALL_WAVE_GEN has no RDNA4 name
    "s_version UC_VERSION_GFX12|UC_VERSION_W32_BIT",
    "s_version ((128|UC_VERSION_W64_BIT)|UC_VERSION_W32_BIT)|UC_VERSION_MDP_BIT",
    "s_version 0x1009",
    "s_wait_alu depctr_va_vdst(0) depctr_va_sdst(3)",
    "s_wait_alu 0xfffe",
    "s_barrier_init m0",
    "s_get_barrier_state s3, -2",
    "s_wakeup_barrier 1",
    "s_barrier_leave",
    "s_singleuse_vdst 0x1234",
    "s_cmp_lt_f16 0x3c00, s1",                    # SOPC f16: an inline 1.0 prints as its bit pattern
    "global_atomic_add_u32 v1, v2, s[0:1] th:TH_ATOMIC_CASCADE_NT scope:SCOPE_DEV",
    "v_div_fmas_f32 v114, neg(0.5), -|0.15915494|, neg(1.0)",
    "v_maxmin_num_f16 v210, |v1|, v2, v3 clamp",
    "v_med3_num_f16 v2, v1, v2, v3 op_sel:[1,1,1,1]",
    "v_fma_mix_f32 v0, 0x5678, 0.15915494, v1",
    "v_fma_mixlo_f16 v0, 1.0, 0.15915494, v1",
]


@pytest.mark.parametrize("src", ROUND_TRIP)
def test_round_trip_through_llvm_mc(src: str) -> None:
    code = assemble(src)
    [(addr, size, got)] = disassemble(code, "gfx1200")
    assert (addr, size) == (0, len(code))
    assert " ".join(got.split()) == " ".join(src.split())


def test_image_operands() -> None:
    """Address slots, data width, what an image operation writes, and the NSA tail tuple."""
    i = decode(assemble("image_sample_d v[64:65], [v32, v33, v34, v[35:40]], s[4:11], s[4:7] dmask:0x3 "
                        "dim:SQ_RSRC_IMG_3D"), 0)
    assert i.enc == "VSAMPLE" and i.key == "image_sample_d" and i.size == 12
    assert [(a.reg, a.n) for a in i.vaddr] == [(32, 1), (33, 1), (34, 1), (35, 6)]
    assert (i.srsrc.reg, i.srsrc.n, i.ssamp.reg, i.ssamp.n) == (4, 8, 4, 4)
    assert [(d.reg, d.n) for d in i.dst] == [(64, 2)]
    st = decode(assemble("image_store v[0:3], [v4, v5], s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D"), 0)
    assert st.enc == "VIMAGE" and st.dst == () and (st.data.reg, st.data.n) == (0, 4) and st.ssamp is None
    a = decode(assemble("image_atomic_cmpswap v[4:5], v6, s[8:15] dmask:0x3 dim:SQ_RSRC_IMG_1D th:TH_ATOMIC_RETURN"), 0)
    assert [(d.reg, d.n) for d in a.dst] == [(4, 1)] and (a.data.n, a.glc) == (2, 1)
    a0 = decode(assemble("image_atomic_add_uint v4, v6, s[8:15] dmask:0x1 dim:SQ_RSRC_IMG_1D"), 0)
    assert a0.dst == () and a0.glc == 0


def test_image_address_words() -> None:
    """Derivatives are 32-bit unless G16 (or A16 packs them); offsets, bias and z-compare take a VGPR each."""
    assert image_addr_words("image_sample", 1, False) == [1, 1]
    assert image_addr_words("image_sample", 2, True) == [1, 1]                  # 3 coordinates -> 2 VGPRs
    assert len(image_addr_words("image_sample_c_d_cl_o", 2, False)) == 1 + 1 + 6 + 3 + 1
    assert len(image_addr_words("image_sample_d_g16", 2, False)) == 4 + 3
    assert image_addr_words("image_bvh64_intersect_ray", 0, False) == [2, 1, 3, 3, 3]


@pytest.mark.parametrize("src", [
    "image_load v[0:3], v0, s[0:7] dmask:0xf dim:SQ_RSRC_IMG_1D",
    "image_sample v64, v32, s[4:11], s[100:103] dmask:0x1 dim:SQ_RSRC_IMG_1D",
    "v_interp_p10_f32 v0, v1, v2, v3 wait_exp:0",
    "ds_param_load v10, attr11.x wait_va_vdst:6 wait_vm_vsrc:0",
    "export mrt0 v1, v2, v3, v4 done",
    "s_barrier_init m0",
    "s_wakeup_barrier -1",
])
def test_shader_core_refuses_what_it_does_not_model(src: str) -> None:
    inst = decode(assemble(src) + bytes(8), 0)
    with pytest.raises(UnsupportedInstruction, match=src.split()[0]):
        RDNA4.build(inst)


def test_vinterp_sources_must_be_vgprs() -> None:
    """VINTERP's 9-bit source fields name VGPRs only; an SGPR code is no instruction (llvm-mc flags it invalid)."""
    good = bytearray(assemble("v_interp_p10_f32 v0, v1, v2, v3 wait_exp:0"))
    bad = bytes(good[:4]) + bytes([1, good[5] & 0xFE]) + bytes(good[6:])       # src0 = s1
    assert decode(bytes(good), 0).src[0].reg == 1
    with pytest.raises(IllegalInstruction, match="src0"):
        decode(bad, 0)
    r = subprocess.run([tool("llvm-mc"), "--disassemble", "-triple=amdgcn", "-mcpu=gfx1200"], capture_output=True,
                       text=True, input="[" + ",".join(f"{b:#x}" for b in bad) + "]")
    assert "Invalid register" in r.stdout + r.stderr


def _mc_words(words: list[bytes], mcpu: str) -> list[str | None]:
    """llvm-mc-19's text of each instruction word group (None where it rejects or flags the words)."""
    out = []
    for w in words:
        r = subprocess.run([tool("llvm-mc"), "--disassemble", "-triple=amdgcn", f"-mcpu={mcpu}"], capture_output=True,
                           text=True, input="[" + ",".join(f"{b:#x}" for b in w) + "]")
        lines = [x.strip() for x in r.stdout.splitlines() if x.strip() and not x.strip().startswith(".")]
        out.append(None if r.stderr or len(lines) != 1 or "/*" in lines[0] else " ".join(lines[0].split()))
    return out


@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1200"])
def test_words_llvm_prints_in_its_own_way(mcpu: str) -> None:
    """Shared RDNA text rules found by encoding fields llvm-mc-19 treats specially: s_delay_alu ignores bits 11-15,
    a named message ignores the bits above its id, every BITMASK_PERM (and, or, xor) bit combination, the OPSEL
    bits of v_mad_u32_u16 (src2's too) and v_alignbit_b32 (none)."""
    words = [bytes([0xD4, 0xF3, 0x87, 0xBF]), bytes([0x01, 0x5C, 0xB7, 0xBF]), bytes([0x03, 0x10, 0xB6, 0xBF]),
             bytes([0x00, 0x01, 0xB6, 0xBF])]
    for a, o, x in [(1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1), (0, 0, 1), (0, 1, 1)]:
        v = (a | o << 5 | x << 10) * 0b100001 & 0x7FFF          # bits 0 and 5 of each mask
        words.append(bytes([v & 0xFF, v >> 8, 0xD4, 0xD8, 0x43, 0, 0, 0]))
    from amdq.hw import isa
    arch = "rdna4" if mcpu == "gfx1200" else "rdna3"
    for name in ("V_MAD_U32_U16", "V_ALIGNBIT_B32"):
        for sel in (1, 4, 8):
            words.append(isa.encode("VOP3", arch, op=name, src0=257, src1=258, src2=259, vdst=2, opsel=sel))
    refs = _mc_words(words, mcpu)
    assert sum(r is not None for r in refs) >= len(words) - 1
    bad = [(w.hex(), got, r) for w, r in zip(words, refs) if r is not None
           for got in [" ".join(disassemble(w, mcpu)[0][2].split())] if got != r]
    assert not bad, bad


def test_atomic_cache_policy_at_every_scope() -> None:
    """TH 4-7 of an atomic are CASCADE_RT/NT at SCOPE_DEV and SCOPE_SYS only; llvm-mc-19 prints every TH/SCOPE."""
    base = int.from_bytes(assemble("global_atomic_add_u32 v1, v2, s[0:1]"), "little")
    words = [(base & ~(0x1F << 50) | (sc << 50) | (th << 52)).to_bytes(12, "little") for sc in range(4) for th in range(8)]
    refs = _mc_words(words, "gfx1200")
    assert all(refs)
    assert {r for r in refs if "CASCADE" in r} and {r for r in refs if "TH_ATOMIC_0x" in r}
    assert [" ".join(disassemble(w, "gfx1200")[0][2].split()) for w in words] == refs


FUZZ = ["SOP1", "SOP2", "SOPK", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD", "DS", "VFLAT",
        "VGLOBAL", "VSCRATCH", "VDSDIR", "VEXPORT"]


def _random_words(fam: str, rng) -> bytes:
    from amdq.hw import isa
    e = isa.encodings("rdna4")[fam]
    vals = {}
    for f, (lo, hi, kind, _) in e.fields.items():
        w = hi - lo + 1
        if kind == "op":
            vals[f] = rng.choice([n for n in isa.tables("rdna4").OPCODES[e.enum] if n < 1 << w])
        elif kind == "src":
            vals[f] = rng.choice([256 + rng.randrange(256), rng.randrange(106), rng.randrange(128, 209), 240, 248, 255, 106])
        elif kind == "ssrc":
            vals[f] = rng.choice([rng.randrange(106), 106, 124, 126, rng.randrange(128, 209), 242, 255])
        elif kind == "sgpr":
            vals[f] = rng.choice([rng.randrange(100), 106, 124, 126]) & ((1 << w) - 1)
        elif kind != "fixed":
            vals[f] = rng.randrange(1 << w) if rng.random() < 0.7 else 0
    return e.encode(**vals) + rng.randrange(1 << 64).to_bytes(8, "little")


def _mc_first(words: bytes) -> tuple[str, int] | None:
    """(text, size) of the first instruction llvm-mc-19 reads from the words, None if it rejects or flags it."""
    r = subprocess.run([tool("llvm-mc"), "--disassemble", "-show-encoding", "-triple=amdgcn", "-mcpu=gfx1200"],
                       capture_output=True, text=True, input=",".join(f"{b:#x}" for b in words))
    lines = [x.strip() for x in r.stdout.splitlines() if x.strip() and not x.strip().startswith(".")]
    if not lines or r.stderr.startswith("<stdin>:1:1:") or "/*" in lines[0]:
        return None
    t, _, enc = lines[0].partition("; encoding:")
    return " ".join(t.split()), enc.count("0x")


@pytest.mark.parametrize("fam", FUZZ)
def test_random_words_match_llvm_mc(fam: str) -> None:
    """Random valid-opcode words of each gfx12 encoding disassemble to llvm-mc-19's text and size (where it accepts
    them without an /* invalid */ remark)."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    rng = random.Random("rdna4" + fam)
    cases = [_random_words(fam, rng) for _ in range(48 if fam.startswith("VOP3") else 24)]
    with ThreadPoolExecutor(4) as ex:
        refs = list(ex.map(_mc_first, cases))
    assert sum(r is not None for r in refs) >= 4, refs
    bad = []
    for words, r in zip(cases, refs):
        if r is None or r[0].startswith("v_mov_b16"):      # true16 register names (v1.l) are not printed
            continue
        got = disassemble(words, "gfx1200")[0]
        if got[1] != r[1] and any(o.bits == 16 and o.kind == "c" and 240 <= o.code <= 248 for o in decode(words, 0).src):
            continue   # LLVM reads a float inline constant of a 16-bit integer operand as a literal; hardware does not
        if (" ".join(got[2].split()), got[1]) != r:
            bad.append(f"{words.hex()}: llvm {r} ours {got[2]!r}, {got[1]}")
    assert not bad, "\n".join(bad)
