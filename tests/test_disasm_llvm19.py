"""Disassembler spellings found by the LLVM corpus comparison (scripts/disasm_corpus.py), one case per fix:
each case's text is what llvm-mc-19 prints for the bytes, checked against llvm-mc-19 as well."""
from __future__ import annotations

import subprocess

import pytest

from amdq.tools.disasm import disassemble
from clang import tool

# (wave64, bytes, LLVM 19 text); bytes from llvm-mc-19 -show-encoding of that text
CASES = [
    # VOP3-only and VOP3P operations with DPP take _e64_dpp like promoted ones
    (False, "050055d6fa040e04011b00ff", "v_add3_u32_e64_dpp v5, v1, v2, v3 quad_perm:[3,2,1,0] row_mask:0xf bank_mask:0xf"),
    (False, "050c00d7fa040200011b00ff", "v_add_co_u32_e64_dpp v5, s12, v1, v2 quad_perm:[3,2,1,0] row_mask:0xf bank_mask:0xf"),
    (False, "004013ccfa040e1c017a0cff", "v_dot2_f32_f16_e64_dpp v0, v1, v2, v3 quad_perm:[2,2,3,1] row_mask:0xf bank_mask:0xf bound_ctrl:1 fi:1"),
    # inline float constants of 16-bit integer VALU operands are f16 bit patterns, printed in hex
    (False, "05000dd77de00100", "v_add_nc_i16 v5, m0, 0x3800"),
    (False, "f004647c", "v_cmp_eq_i16_e32 vcc_lo, 0x3800, v2"),
    (False, "f0a20a7e", "v_cvt_f16_i16_e32 v5, 0x3800"),
    # ... but SALU 16-bit operands keep the float spelling, and their literals are dwords
    (False, "f0028099", "s_pack_lh_b32_b16 s0, 0.5, s2"),
    (False, "f00f80be", "s_sext_i32_i16 s0, 0.5"),
    # no op_sel on DPP forms of VOP1 operations; only 16-bit operands show op_sel bits
    (False, "0548dcd5fa000008015f0101", "v_ceil_f16_e64_dpp v5, v1 mul:2 row_share:15 row_mask:0x0 bank_mask:0x1"),
    (False, "007866d6fa040e0401e40400", "v_dot2_f16_f16_e64_dpp v0, v1, v2, v3 op_sel:[0,0,1,1] quad_perm:[0,1,2,3] row_mask:0x0 bank_mask:0x0 fi:1"),
    # v_permlane16 op_sel bits are fetch-inactive and bound_ctrl
    (False, "05185bd601050c00", "v_permlane16_b32 v5, v1, s2, s3 op_sel:[1,1]"),
    (False, "05085bd601050c00", "v_permlane16_b32 v5, v1, s2, s3 op_sel:[1,0]"),
    # VOP3 encodings of v_nop / v_pipeflush take no suffix
    (False, "000080d500000000", "v_nop"),
    (False, "00009bd500000000", "v_pipeflush"),
    # ds_swizzle offset macros
    (False, "ffffd4d8010000ff", "ds_swizzle_b32 v255, v1 offset:65535"),
    (False, "e480d4d802000008", "ds_swizzle_b32 v8, v2 offset:swizzle(QUAD_PERM,0,1,2,3)"),
    (False, "1f3cd4d802000008", "ds_swizzle_b32 v8, v2 offset:swizzle(REVERSE,16)"),
    (False, "1f10d4d802000008", "ds_swizzle_b32 v8, v2 offset:swizzle(SWAP,4)"),
    (False, "2000d4d802000008", "ds_swizzle_b32 v8, v2 offset:swizzle(BROADCAST,32,1)"),
    (False, "0400d4d801000005", 'ds_swizzle_b32 v5, v1 offset:swizzle(BITMASK_PERM,"00p00")'),
    # s_delay_alu fields out of range
    (False, "ff0787bf", "s_delay_alu instid0(/* invalid instid value */) | instskip(/* invalid instskip value */) | instid1(/* invalid instid value */)"),
    # encodings the decoder does not model, formatted from their fields (amdq.hw.isa.text_raw)
    (False, "ff0f0ce8000402 03".replace(" ", ""), "tbuffer_load_d16_format_x v4, off, s[8:11], s3 offset:4095"),
    (False, "0803 85f0 0105 020c".replace(" ", ""), "image_sample_c_d v[5:6], v[1:9], s[8:15], s[12:15] dmask:0x3 dim:SQ_RSRC_IMG_3D a16"),
    (False, "050870f020400104 10080024", "image_sample_d v64, [v32, v16, v8, v0, v[36:37]], s[4:11], s[4:7] dmask:0x8 dim:SQ_RSRC_IMG_2D"),
    (False, "008100f0ff000000", "image_load v0, v255, s[0:7] dmask:0x1 dim:SQ_RSRC_IMG_1D r128"),
    (False, "00cd02cd01050ee4", "v_interp_p10_f16_f32 v0, -v1, -v2, -v3 clamp op_sel:[1,0,0,1] wait_exp:5"),
    (False, "0a0016ce", "lds_direct_load v10 wait_vdst:6"),
    (False, "0b5905ce", "lds_param_load v11, attr22.y wait_vdst:5"),
    (False, "8328 00f8 0403 0000".replace(" ", ""), "exp mrtz v4, v3, off, off done row_en"),
    # wave64 WMMA keeps C/D in half the VGPRs
    (True, "104040cc0011421c", "v_wmma_f32_16x16x16_f16 v[16:19], v[0:7], v[8:15], v[16:19]"),
    (False, "104040cc0011421c", "v_wmma_f32_16x16x16_f16 v[16:23], v[0:7], v[8:15], v[16:23]"),
]


def llvm(data: bytes, wave64: bool) -> str:
    args = [tool("llvm-mc"), "--disassemble", "-triple=amdgcn", "-mcpu=gfx1100"] + (["-mattr=+wavefrontsize64"] if wave64 else [])
    out = subprocess.run(args, input="[" + ",".join(f"0x{b:02x}" for b in data) + "]", capture_output=True, text=True).stdout
    return " ".join(" ".join(l.split()) for l in out.splitlines() if l.strip() and not l.strip().startswith("."))


@pytest.mark.parametrize("wave64,hexbytes,want", CASES, ids=[f"{c[2][:40]}-w{64 if c[0] else 32}" for c in CASES])
def test_spelling(wave64: bool, hexbytes: str, want: str) -> None:
    data = bytes.fromhex(hexbytes.replace(" ", ""))
    assert llvm(data, wave64) == want
    assert [" ".join(t.split()) for _, _, t in disassemble(data, "gfx1100", 0, wave64)] == [want]


def test_flat_rows_of_other_segments_are_words() -> None:
    """FLAT-segment words of GLOBAL-only operations (here csub) come out as .long, not an exception."""
    assert disassemble(bytes.fromhex("0010dcdc01027d00"), "gfx1100") == [(0, 4, ".long 0xdcdc1000"), (4, 4, ".long 0x007d0201")]
