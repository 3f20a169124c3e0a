"""Decoded instructions -> LLVM IR: one function per basic block, executing it for a list of waves.

A block is a run of translatable instructions: ALU instructions are grouped into phases executed wave by
wave (each wave runs the phase's SALU instructions in order, and each run of VALU instructions between them
as one loop over the wave's chunks of W lanes (lanes_per_op: 8 or 16), see fuse() and Emitter.valu_run: per
chunk every VGPR is loaded once and stored once, EXEC and lane masks are <W x i1> values, EXEC applied as a
select); s_barrier is a no-op inside a block (runtime.step stops before it unless every wave of the batch is in
the call); every memory instruction is a phase of its own looping over all the waves, so memory is touched in
the interpreter's order (instruction by instruction, waves in batch order, lanes ascending). A block that
stores nothing is fused (block.fusable): one loop over the waves runs all its phases for each wave in turn (its
loads and ALU work commute between waves). A global access first checks every lane of every wave (of the one
wave, fused) against the translated-range table (nothing is touched yet); a lane outside the table returns the
instruction's index so the caller can translate it and resume there, or let the interpreter run that
instruction (and raise the same fault the same way).

Registers live in the interpreter's own arrays (pointers in a context block, CTX below); the function is

    i32 block(i64 *ctx, i64 *waves, i64 nwaves, i32 start, i32 end)

executing instructions [start, end) of the block; it returns -1 (done), -2 (done, the last one was a branch
that set every wave's PC) or the index of a memory instruction it stopped before.

Semantics follow the interpreter's handlers (salu.py, valu*.py, lds.py, vmem.py): integer ops wrap at 32/64
bits, f32 arithmetic is IEEE with denormals kept and round-to-nearest-even (the block is only run when MODE
says so), FMA is `llvm.fma` (one rounding), a NaN result carries the payload numpy's operand order gives
(the first NaN operand, quieted; an invalid operation gives x86's default NaN 0xFFC00000, as numpy's does).
Anything else is refused by `translatable` and runs in the interpreter.
"""
from __future__ import annotations

import os
import re
import struct

from ....hw.isa.decode import Inst, Operand
from ..valu_fast import is_plain, is_plain_cmp
from ..valu_float import EXP2_LIMIT, EXP2_POLY

VCC, NULL, M0, EXEC, SCC_SRC, EXECZ_SRC, VCCZ_SRC = 106, 124, 125, 126, 253, 252, 251


def _dbl(x: float) -> str:
    """A double constant as LLVM IR writes it exactly (its bits in hex)."""
    return f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"

# context block slots (int64 each): filled by runtime.Context
CTX = {"v": 0, "s": 1, "scc": 2, "em": 3, "full": 4, "pc": 5, "n": 6, "lds": 7, "lds_base": 8, "lds_size": 9,
       "rtab": 10, "rcount": 11, "wtab": 12, "wcount": 13, "miss_addr": 14, "miss_bytes": 15, "miss_write": 16,
       "base_pc": 17, "tile": 18, "tile_from": 19, "miss_tile": 20, "miss_sub": 21,
       "start0": 23, "status": 24, "mode": 37,
       # the region's chain function (block.CHAIN): what runtime.step allows it, and where it stopped
       "limit": 25, "budget": 26, "every": 27, "vgprs": 28, "mode_ok": 29, "tile_all": 30,
       "cur_blk": 31, "cur_end": 32, "steps": 33, "next_pc": 34, "branched": 35, "chained": 36, "par_insts": 38}
CTX_SLOTS = 40

NOPS = frozenset(("s_nop", "s_delay_alu", "s_clause", "buffer_gl0_inv", "buffer_gl1_inv", "s_set_inst_prefetch_distance",
                  "s_inst_prefetch", "global_inv", "global_wb", "global_wbinv",
                  "s_sendmsg"))   # no-ops in the interpreter too (salu._sendmsg: DEALLOC_VGPRS and friends)
WAITS = frozenset(("s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt",
                   "s_waitcnt_depctr", "s_wait_loadcnt", "s_wait_storecnt", "s_wait_dscnt", "s_wait_kmcnt",
                   "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt", "s_wait_samplecnt", "s_wait_bvhcnt",
                   "s_wait_expcnt", "s_wait_alu"))
BRANCHES = frozenset(("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
                      "s_cbranch_execz", "s_cbranch_execnz"))

# ---------------------------------------------------------------- what translates

SOP2 = {  # key: (IR expression over %a %b (i32), scc rule) ; scc 'nz' = result != 0
    "s_and_b32": ("and", "nz"), "s_or_b32": ("or", "nz"), "s_xor_b32": ("xor", "nz"),
    "s_and_not1_b32": ("andn", "nz"), "s_or_not1_b32": ("orn", "nz"), "s_nand_b32": ("nand", "nz"),
    "s_nor_b32": ("nor", "nz"), "s_xnor_b32": ("xnor", "nz"),
    "s_lshl_b32": ("shl", "nz"), "s_lshr_b32": ("lshr", "nz"), "s_ashr_i32": ("ashr", "nz"),
    "s_mul_i32": ("mul", None),
    "s_min_i32": ("smin", "slt"), "s_min_u32": ("umin", "ult"), "s_max_i32": ("smax", "sgt"), "s_max_u32": ("umax", "ugt"),
}
SOP2_64 = {"s_and_b64": "and", "s_or_b64": "or", "s_xor_b64": "xor", "s_and_not1_b64": "andn", "s_or_not1_b64": "orn",
           "s_lshl_b64": "shl", "s_lshr_b64": "lshr"}
ADDSUB = ("s_add_u32", "s_addc_u32", "s_sub_u32", "s_subb_u32", "s_add_i32", "s_sub_i32")
SCMP = {"eq": "eq", "lg": "ne", "gt": "gt", "ge": "ge", "lt": "lt", "le": "le"}
SAVEEXEC = {"and": lambda s, e: ("and", s, e), "or": lambda s, e: ("or", s, e), "xor": lambda s, e: ("xor", s, e),
            "and_not1": lambda s, e: ("andn", s, e), "or_not1": lambda s, e: ("orn", s, e)}

VBIN = {  # key: op over (src0, src1) as IR (vector i32)
    "v_add_nc_u32": "add", "v_sub_nc_u32": "sub", "v_subrev_nc_u32": "subrev", "v_and_b32": "and", "v_or_b32": "or",
    "v_xor_b32": "xor", "v_mul_lo_u32": "mul", "v_lshlrev_b32": "shlrev", "v_lshrrev_b32": "lshrrev",
    "v_ashrrev_i32": "ashrrev", "v_min_u32": "umin", "v_max_u32": "umax", "v_min_i32": "smin", "v_max_i32": "smax",
    "v_mul_u32_u24": "mul24", "v_mul_hi_u32": "mulhi",
}
VTRI = ("v_add3_u32", "v_lshl_add_u32", "v_lshl_or_b32", "v_and_or_b32", "v_or3_b32", "v_xad_u32", "v_bfe_u32",
        "v_mad_u32_u24", "v_add_lshl_u32")
VFLT = {"v_add_f32": "fadd", "v_sub_f32": "fsub", "v_subrev_f32": "fsubrev", "v_mul_f32": "fmul"}
FMA = ("v_fmac_f32", "v_fma_f32", "v_fmaak_f32", "v_fmamk_f32")
CARRY = {"v_add_co_u32": (True, False, False), "v_sub_co_u32": (False, False, False),
         "v_subrev_co_u32": (False, True, False), "v_add_co_ci_u32": (True, False, True),
         "v_sub_co_ci_u32": (False, False, True), "v_subrev_co_ci_u32": (False, True, True)}
ICMP = {"eq": "eq", "ne": "ne", "lg": "ne", "gt": "gt", "ge": "ge", "lt": "lt", "le": "le"}
FCMP = {"eq": "oeq", "lg": "one", "gt": "ogt", "ge": "oge", "lt": "olt", "le": "ole", "neq": "une",   # valu.CMPF
        "nge": "ult", "nlg": "ueq", "ngt": "ule", "nle": "ugt", "nlt": "uge", "o": "ord", "u": "uno", "f": "false",
        "t": "true"}
# one f32 source, one result (valu_float.py): rounding (numpy's rint/trunc/floor/ceil: roundps), saturating
# conversions (_to_int), and the _trans32 units computed in f64 from flushed inputs (no libm: rcp, rsq, sqrt, and
# exp in valu_float.exp2_f64's fixed steps)
FUNARY = {"v_rndne_f32": "roundeven", "v_trunc_f32": "trunc", "v_floor_f32": "floor", "v_ceil_f32": "ceil",
          "v_cvt_i32_f32": "fptosi", "v_cvt_u32_f32": "fptoui", "v_rcp_f32": "rcp", "v_rcp_iflag_f32": "rcp",
          "v_rsq_f32": "rsq", "v_sqrt_f32": "sqrt", "v_exp_f32": "exp"}
MODE_SRC = -1        # an "x" operand reading the wave's MODE register (min/max look at MODE.IEEE)
GFX9_KEYS = frozenset(("v_lshl_add_u64",))    # gfx9 builders (cdna.H9) whose semantics the emitter has too
# RDNA4 builders (rdna4.OVERRIDES) whose semantics the emitter has too: the workgroup barrier (signal -1: a no-op,
# wait: s_barrier's), s_load_b96 (the common s_load builder), the 64-bit scalar arithmetic without SCC
RDNA4_KEYS = frozenset(("s_barrier_signal", "s_barrier_wait", "s_load_b96", "s_add_nc_u64", "s_sub_nc_u64",
                        "s_mul_u64"))
NC64 = {"s_add_nc_u64": "add", "s_sub_nc_u64": "sub", "s_mul_u64": "mul"}
# VALU instructions that read or write one lane (valu_int.py): emitted wave by wave between VALU runs, as SALU
LANE_OPS = frozenset(("v_readfirstlane_b32", "v_readlane_b32", "v_writelane_b32"))
SOP1_32 = frozenset(("s_abs_i32", "s_brev_b32", "s_ctz_i32_b32"))
SHIFT64 = {"v_lshlrev_b64": "shl", "v_lshrrev_b64": "lshr", "v_ashrrev_i64": "ashr"}
GWIDTH = {"b32": 1, "b64": 2, "b96": 3, "b128": 4}
DS_LOAD = {"ds_load_b32": 1, "ds_load_b64": 2, "ds_load_b96": 3, "ds_load_b128": 4}
DS_STORE = {"ds_store_b32": 1, "ds_store_b64": 2, "ds_store_b96": 3, "ds_store_b128": 4}
DS_2 = ("ds_load_2addr_b32", "ds_load_2addr_stride64_b32", "ds_store_2addr_b32", "ds_store_2addr_stride64_b32",
        "ds_load_2addr_b64", "ds_load_2addr_stride64_b64", "ds_store_2addr_b64", "ds_store_2addr_stride64_b64")


def _plain_src(op: Operand, floats: bool = False) -> bool:
    if op.kind == "v":
        return 0 <= op.reg < 256
    if op.kind == "s":
        return 0 <= op.reg < 128 and op.reg not in (EXEC, EXEC + 1) or op.reg in (EXEC, EXEC + 1)
    if op.kind == "c":
        return True
    return op.kind == "x" and op.reg in (SCC_SRC, EXECZ_SRC, VCCZ_SRC)


def _mods_ok(inst: Inst, floats: bool) -> bool:
    if inst.dpp is not None or inst.clamp or inst.omod or inst.opsel or getattr(inst, "neg_hi", 0):
        return False
    if getattr(inst, "sdwa", None) is not None:
        return False
    for s in inst.src:
        if (s.neg or s.abs) and not floats:
            return False
        if s.kind == "c" and floats and s.value is not None:
            bits = s.value & 0xFFFFFFFF
            if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
                return False            # a NaN constant: keep its payload rules in the interpreter
    return True


def _vdst_ok(inst: Inst, n: int = 1) -> bool:
    return bool(inst.dst) and inst.dst[0].kind == "v" and inst.dst[0].n == n and inst.dst[0].reg + n <= 256


def _src_ok(inst: Inst, count: int, bits=(32,)) -> bool:
    if len(inst.src) != count:
        return False
    return all(_plain_src(s) for s in inst.src)


# kinds that end a block (nothing after them runs in the same block) and kinds worth a block of their own
ENDS = frozenset(("branch", "end"))
WORK = frozenset(("alu", "gload", "gstore", "ds", "branch", "sload", "end"))
SLOAD = {"s_load_b32": 1, "s_load_b64": 2, "s_load_b96": 3, "s_load_b128": 4, "s_load_b256": 8, "s_load_b512": 16}


def kind_of(inst: Inst) -> str | None:
    """'alu', 'nop', 'wait', 'barrier', 'branch', 'gload', 'gstore', 'ds', 'sload' (scalar load), 'end' (s_endpgm)
    for an instruction the JIT translates, else None."""
    k = inst.key
    if k in NOPS:
        return "nop"
    if k in WAITS:
        return "wait"
    if k in BRANCHES:
        return "branch"
    if k == "s_endpgm":
        return "end"
    if k in SLOAD:
        return "sload" if _sload_ok(inst) else None
    if k in ("s_barrier", "s_barrier_wait"):
        return "barrier"            # a no-op when every wave of the batch is in the call (runtime.step stops before it otherwise)
    if k == "s_barrier_signal":     # the workgroup barrier's (rdna4._barrier_signal refuses any other id)
        x = inst.src[0] if inst.src else None
        return "nop" if x is not None and x.kind == "c" and x.value & 0xFFFFFFFF == 0xFFFFFFFF else None
    enc = inst.enc
    if any(d.bits == 16 for d in inst.dst if isinstance(d, Operand)) or getattr(inst, "sdwa", None) is not None:
        return None                 # 16-bit destinations (gfx9 zeroes or keeps the high half) and SDWA
    if enc in ("SOP1", "SOP2", "SOPC", "SOPK"):
        return "alu" if _salu_ok(inst) else None
    if enc in ("VOP1", "VOP2", "VOP3", "VOPC", "VOP3SD"):
        return "alu" if _valu_ok(inst) else None
    if k == "v_dual":
        return "alu" if all(h.key in DUAL_OK and _valu_ok(h) for h in halves(inst)) else None
    if enc == "GLOBAL":
        return _global_ok(inst)
    if enc == "DS":
        return "ds" if _ds_ok(inst) else None
    return None


# VOPD halves translated: those whose interpreter semantics (valu_pk._vopd_half) are the VOP2 instruction's
DUAL_OK = frozenset(("v_fmac_f32", "v_fmaak_f32", "v_fmamk_f32", "v_mul_f32", "v_add_f32", "v_sub_f32", "v_subrev_f32",
                     "v_mov_b32", "v_add_nc_u32", "v_lshlrev_b32", "v_and_b32", "v_cndmask_b32", "v_max_f32",
                     "v_min_f32"))


def halves(inst: Inst) -> list[Inst]:
    """The X and Y halves of a VOPD instruction as VOP2-style instructions (as the interpreter's handler builds
    them); [inst] for any other instruction."""
    if inst.key != "v_dual":
        return [inst]
    out = []
    for h in (inst.x, inst.y):
        hi = Inst(inst.pc, "VOPD", h.op, h.name)
        hi.key, hi.src, hi.dst, hi.mask_bits = h.key, h.src, (h.dst,), inst.mask_bits
        out.append(hi)
    return out


def is_float(inst: Inst) -> bool:
    """Needs MODE's f32 denormals kept and round to nearest even (an f32 operation, or a VOPD with one)."""
    return any("f32" in h.key for h in halves(inst))


def _sload_ok(inst: Inst) -> bool:
    """s_load_b*: SBASE an SGPR pair, SOFFSET absent or an SGPR, the destination SGPRs below VCC (the width the
    destination tuple gives, as the interpreter's handler reads it)."""
    if not inst.dst or inst.sbase is None or inst.sbase.kind != "s" or inst.sbase.reg + 2 > 128:
        return False
    so = inst.soffset
    if so is not None and not (so.kind == "s" and so.n == 1 and so.reg < 128):
        return False
    d = inst.dst[0]
    return d.kind == "s" and d.n == SLOAD[inst.key] and d.reg + d.n <= VCC


def _sdst_ok(op: Operand, n: int = 1) -> bool:
    return op.kind == "s" and op.reg + n <= 128


def _salu_ok(inst: Inst) -> bool:
    k = inst.key
    if not all(_plain_src(s) for s in inst.src):
        return False
    if k in SOP2 or k in ADDSUB:
        return len(inst.src) == 2 and _sdst_ok(inst.dst[0]) and all(s.n == 1 for s in inst.src)
    if k in NC64:
        return len(inst.src) == 2 and _sdst_ok(inst.dst[0], 2) and all(x.n == 2 or x.kind == "c" for x in inst.src)
    if k in SOP2_64:
        return len(inst.src) == 2 and _sdst_ok(inst.dst[0], 2) and inst.src[0].n == 2 and \
            inst.src[1].n == (1 if k in ("s_lshl_b64", "s_lshr_b64") else 2)
    if k in ("s_mov_b32", "s_cselect_b32", "s_not_b32"):
        n = 2 if k == "s_cselect_b32" else 1
        return len(inst.src) == n and _sdst_ok(inst.dst[0]) and all(s.n == 1 for s in inst.src)
    if k in ("s_mov_b64", "s_cselect_b64"):
        n = 2 if k == "s_cselect_b64" else 1
        return len(inst.src) == n and _sdst_ok(inst.dst[0], 2) and all(s.n == 2 or s.kind == "c" for s in inst.src)
    if k.startswith("s_cmp_") and k[-3:] in ("i32", "u32"):
        return k.split("_")[2] in SCMP and len(inst.src) == 2 and all(s.n == 1 for s in inst.src)
    if k in ("s_movk_i32",):
        return _sdst_ok(inst.dst[0]) and inst.simm16 is not None
    if k in SOP1_32:
        return len(inst.src) == 1 and _sdst_ok(inst.dst[0]) and inst.src[0].n == 1
    if k == "s_ctz_i32_b64":
        return len(inst.src) == 1 and _sdst_ok(inst.dst[0]) and (inst.src[0].n == 2 or inst.src[0].kind == "c")
    if k in ("s_cmp_eq_u64", "s_cmp_lg_u64"):
        return len(inst.src) == 2 and all(x.n == 2 or x.kind == "c" for x in inst.src)
    if k in ("s_bitcmp0_b32", "s_bitcmp1_b32", "s_bitcmp0_b64", "s_bitcmp1_b64"):
        n = 2 if k.endswith("64") else 1
        return len(inst.src) == 2 and (inst.src[0].n == n or inst.src[0].kind == "c") and inst.src[1].n == 1
    if k.startswith("s_cmpk_"):
        a = inst.dst[0] if inst.dst else (inst.src[0] if inst.src else None)
        return a is not None and a.kind == "s" and a.n == 1 and a.reg < 128 and inst.simm16 is not None and \
            k.split("_")[2] in SCMP and k[-3:] in ("i32", "u32")
    if k.endswith("_saveexec_b32") or k.endswith("_saveexec_b64"):
        op = k[2:].rsplit("_saveexec_", 1)[0]
        n = 2 if k.endswith("64") else 1
        return op in SAVEEXEC and len(inst.src) == 1 and _sdst_ok(inst.dst[0], n) and \
            (inst.src[0].n == n or inst.src[0].kind == "c")
    return False


def _valu_ok(inst: Inst) -> bool:
    k = inst.key
    floats = k in VFLT or k in FMA or k.endswith("_f32")
    if not _mods_ok(inst, floats):
        return False
    if not all(_plain_src(s) for s in inst.src):
        return False
    if any(s.kind == "v" and s.reg + s.n > 256 for s in inst.src):
        return False
    if k in VBIN:
        return _vdst_ok(inst) and len(inst.src) == 2 and all(s.n == 1 for s in inst.src)
    if k in VTRI:
        return _vdst_ok(inst) and len(inst.src) == 3 and all(s.n == 1 for s in inst.src)
    if k in ("v_mov_b32", "v_not_b32", "v_cvt_f32_u32", "v_cvt_f32_i32"):
        return _vdst_ok(inst) and len(inst.src) == 1 and inst.src[0].n == 1
    if k in VFLT:
        return _vdst_ok(inst) and len(inst.src) == 2 and all(s.n == 1 for s in inst.src)
    if k in FUNARY:
        return _vdst_ok(inst) and len(inst.src) == 1 and inst.src[0].n == 1
    if k in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        return _vdst_ok(inst) and len(inst.src) == 2 and all(x.n == 1 for x in inst.src)
    if k == "v_readfirstlane_b32":
        return len(inst.src) == 1 and inst.src[0].n == 1 and inst.dst and _sdst_ok(inst.dst[0])
    if k == "v_readlane_b32":
        return len(inst.src) == 2 and all(x.n == 1 for x in inst.src) and inst.src[1].kind in ("s", "c") and \
            inst.dst and _sdst_ok(inst.dst[0])
    if k == "v_writelane_b32":
        return len(inst.src) == 2 and all(x.n == 1 and x.kind in ("s", "c") for x in inst.src) and _vdst_ok(inst)
    if k in ("v_max_f32", "v_min_f32"):
        # not with an SGPR: numpy's fmax of a broadcast (k, 1) operand takes its scalar loop, which returns the
        # second of two NaNs where the vector loop returns the first
        return _vdst_ok(inst) and len(inst.src) == 2 and all(s.n == 1 and s.kind != "s" for s in inst.src)
    if k == "v_ldexp_f32":
        return _vdst_ok(inst) and len(inst.src) == 2 and all(s.n == 1 for s in inst.src)
    if k == "v_div_fixup_f32":
        return _vdst_ok(inst) and len(inst.src) == 3 and all(s.n == 1 for s in inst.src)
    if k == "v_div_fmas_f32":       # (VGPR factors: fp._fma32's operand order, which decides a NaN, is theirs)
        return _vdst_ok(inst) and len(inst.src) == 3 and all(s.n == 1 for s in inst.src) and \
            inst.src[0].kind == inst.src[1].kind == "v"
    if k == "v_div_scale_f32":
        return _vdst_ok(inst) and len(inst.dst) == 2 and _sdst_ok(inst.dst[1], 1) and len(inst.src) == 3 and \
            all(s.n == 1 for s in inst.src)
    if k in FMA:
        n = 2 if k == "v_fmac_f32" else 3
        return _vdst_ok(inst) and len(inst.src) == n and all(s.n == 1 for s in inst.src)
    if k == "v_cndmask_b32":
        return _vdst_ok(inst) and len(inst.src) == 3 and inst.src[2].kind in ("s", "c") and \
            all(s.n == 1 for s in inst.src[:2]) and not (inst.src[0].neg or inst.src[0].abs or inst.src[1].neg or inst.src[1].abs)
    if k in CARRY:
        cin = CARRY[k][2]
        return _vdst_ok(inst) and len(inst.dst) == 2 and _sdst_ok(inst.dst[1], 1) and \
            len(inst.src) == (3 if cin else 2) and all(s.n == 1 for s in inst.src[:2]) and \
            (not cin or inst.src[2].kind in ("s", "c"))
    if k == "v_mad_u64_u32":
        return _vdst_ok(inst, 2) and len(inst.dst) == 2 and _sdst_ok(inst.dst[1], 1) and len(inst.src) == 3 and \
            inst.src[0].n == 1 and inst.src[1].n == 1 and (inst.src[2].n == 2 or inst.src[2].kind == "c")
    if k in SHIFT64:
        return _vdst_ok(inst, 2) and len(inst.src) == 2 and inst.src[0].n == 1 and \
            (inst.src[1].n == 2 or inst.src[1].kind == "c")
    if k == "v_lshl_add_u64":
        return _vdst_ok(inst, 2) and len(inst.src) == 3 and inst.src[1].n == 1 and \
            all(x.n == 2 or x.kind == "c" for x in (inst.src[0], inst.src[2]))
    if k.startswith("v_cmp_") or k.startswith("v_cmpx_"):
        parts = k.split("_")
        if len(parts) != 4 or len(inst.src) != 2 or not inst.dst or not all(s.n == 1 for s in inst.src):
            return False
        op, typ = parts[2], parts[3]
        d = inst.dst[0]
        if d.kind != "s":
            return False
        if typ in ("i32", "u32"):
            return op in ICMP and not any(s.neg or s.abs for s in inst.src)
        if typ == "f32":
            return op in FCMP
    return False


def _global_ok(inst: Inst) -> str | None:
    k = inst.key
    if inst.addr is None or inst.addr.kind != "v" or getattr(inst, "sve", 0):
        return None
    if inst.saddr is not None and (inst.saddr.kind != "s" or inst.saddr.reg == NULL):
        if not (inst.saddr.kind == "s" and inst.saddr.reg == NULL):
            return None
    if k.startswith("global_load_") and k[12:] in GWIDTH:
        return "gload" if _vdst_ok(inst, GWIDTH[k[12:]]) else None
    if k.startswith("global_store_") and k[13:] in GWIDTH:
        return "gstore" if inst.data is not None and inst.data.kind == "v" and inst.data.reg + GWIDTH[k[13:]] <= 256 else None
    return None


def _ds_ok(inst: Inst) -> bool:
    k = inst.key
    if inst.gds or inst.addr is None or inst.addr.kind != "v":
        return False
    if k in DS_LOAD:
        return _vdst_ok(inst, DS_LOAD[k])
    if k in DS_STORE:
        return inst.data is not None and len(inst.data) >= 1 and inst.data[0].kind == "v"
    if k in DS_2:
        if "load" in k:
            return _vdst_ok(inst, 2 * (2 if k.endswith("b64") else 1))
        return inst.data is not None and len(inst.data) >= 2 and all(d.kind == "v" for d in inst.data[:2])
    return False


def _fast_carry(inst: Inst, cin: bool) -> bool:
    """The interpreter's carry fast path runs this instruction (and leaves a carry nothing reads unwritten)."""
    return is_plain(inst, 3 if cin else 2) and inst.dst[1].kind == "s"


def mask_dsts(inst: Inst) -> tuple[int, ...]:
    """The SGPR (pair) a VALU instruction may write a lane mask to (a superset: a run keeps it either way)."""
    k = inst.key
    if k in CARRY or k in ("v_mad_u64_u32", "v_div_scale_f32"):
        r = inst.dst[1].reg
    elif k.startswith("v_cmp"):
        r = inst.dst[0].reg
    else:
        return ()
    return () if r == NULL else (r,)


def _vgprs(inst: Inst) -> tuple[set[int], set[int]]:
    """(VGPRs a VALU instruction reads, VGPRs it writes)."""
    if inst.key == "v_dual":
        rx, wx = _vgprs(halves(inst)[0])
        ry, wy = _vgprs(halves(inst)[1])
        return rx | ry, wx | wy
    rd = {s.reg + j for s in inst.src if s.kind == "v" for j in range(max(1, s.n))}
    d = inst.dst[0]
    wr = {d.reg + j for j in range(max(1, d.n))} if d.kind == "v" else set()
    if inst.key == "v_fmac_f32":
        rd |= wr
    return rd, wr


def _lane_srcs(inst: Inst) -> tuple[int, ...]:
    """Sources read as lane masks (the rest of the SGPR sources are scalars)."""
    return (2,) if inst.key == "v_cndmask_b32" or (inst.key in CARRY and CARRY[inst.key][2]) else ()


def _implicit_masks(inst: Inst) -> tuple[int, ...]:
    """SGPRs read as lane masks without being a source operand (v_div_fmas reads VCC)."""
    return (VCC,) if inst.key == "v_div_fmas_f32" else ()


def fuse(items: list[tuple[int, Inst]], lanes: int) -> list[list[tuple[int, Inst]]]:
    """Consecutive VALU instructions split into runs one chunk loop can execute: a run ends before an instruction
    reading as a scalar (or as VCCZ/EXECZ) an SGPR a lane mask of the run was written to, or reading/writing a lane
    mask that overlaps one of the run's without being the same SGPR (pair)."""
    nm = 2 if lanes == 64 else 1

    def span(r: int) -> set[int]:
        return {r + t for t in range(nm)}
    out: list[list[tuple[int, Inst]]] = []
    cur: list[tuple[int, Inst]] = []
    W: set[int] = set()
    K = {EXEC}
    for i, inst in items:
        scal, lane = set(), []
        lane += list(_implicit_masks(inst))
        for h in halves(inst):
            ls = _lane_srcs(h)
            for j, s in enumerate(h.src):
                if s.kind == "s" and s.reg != NULL:
                    if j in ls:
                        lane.append(s.reg)
                    else:
                        scal |= {s.reg + t for t in range(max(1, s.n))}
                elif s.kind == "x" and s.reg == EXECZ_SRC:
                    scal |= {EXEC, EXEC + 1}
                elif s.kind == "x" and s.reg == VCCZ_SRC:
                    scal |= {VCC, VCC + 1}
        kspan = set().union(*(span(k) for k in K))
        ok = not scal & W and all(r in K or not span(r) & W for r in lane) and \
            all(r in K or not span(r) & kspan for r in mask_dsts(inst))
        if not ok and cur:
            out.append(cur)
            cur, W, K = [], set(), {EXEC}
        cur.append((i, inst))
        for r in mask_dsts(inst):
            K.add(r)
            W |= span(r)
    if cur:
        out.append(cur)
    return out


# ---------------------------------------------------------------- the emitter

def lanes_per_op() -> int:
    """Lanes of one vector operation in generated code (a wave is lanes / W chunks): 16 (one 512-bit register of
    i32) on a host with AVX-512, else 8 (one AVX2 register); AMDQ_SIM_JIT_WIDTH=8 or 16 chooses (tests run both).
    Part of every compiled region's key (block.code_version)."""
    v = os.environ.get("AMDQ_SIM_JIT_WIDTH", "").strip()
    if v in ("8", "16"):
        return int(v)
    if not _WIDTH:
        from .compiled import cpu_flags, host_features, host_known
        flags = None if host_known() else cpu_flags()   # (the kernel's flags until LLVM named the host: they agree,
        wide = "+avx512f" in host_features() if flags is None else "avx512f" in flags   # and naming a page of code
        _WIDTH.append(16 if wide else 8)                # does not start LLVM)
    return _WIDTH[0]


_WIDTH: list[int] = []          # the host's width, once known


_LITERAL = re.compile(r"-?[0-9]+|true|false")      # an integer or i1 constant (Fn.splat)


class Fn:
    """Lines of one function, with fresh SSA names; W lanes per vector operation (lanes_per_op)."""

    def __init__(self, lanes: int):
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.k = 0
        self.L = lanes
        self.W = W = min(lanes_per_op(), lanes)
        self.LOGW = W.bit_length() - 1
        self.MI = f"i{W}"             # a chunk's lane mask as an integer
        self.NC = lanes // W
        self.VT = f"<{self.W} x i32>"
        self.FT = f"<{self.W} x float>"
        self.MT = f"<{self.W} x i1>"
        self.IT = f"i{lanes}"
        self.direct = False           # a VALU run works on the VGPR rows themselves, not on allocas (valu_run)

    def inside(self, i: int) -> str:
        """i1: instruction i of the block lies in the call's [%start, %end) (one unsigned compare against %span,
        end - start or 0: ModuleGen.add defines it)."""
        return self.op(f"icmp ult i32 {self.op(f'sub i32 {i}, %start')}, %span")

    def alloca(self, ty: str) -> str:
        r = self.t("a")
        self.allocas.append(f"  {r} = alloca {ty}")
        return r

    def t(self, p: str = "t") -> str:
        self.k += 1
        return f"%{p}{self.k}"

    def e(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, name: str) -> None:
        self.lines.append(f"{name[1:]}:")

    def op(self, text: str, p: str = "t") -> str:
        r = self.t(p)
        self.e(f"{r} = {text}")
        return r

    def splat(self, scalar: str, ty: str = "i32") -> str:
        """A vector of W copies of `scalar`: a constant written as one (`splat (i32 4)`, no instructions to select)."""
        n = self.W
        if _LITERAL.fullmatch(scalar):
            return f"splat ({ty} {scalar})"
        v = self.op(f"insertelement <{n} x {ty}> poison, {ty} {scalar}, i64 0")
        return self.op(f"shufflevector <{n} x {ty}> {v}, <{n} x {ty}> poison, <{n} x i32> zeroinitializer")


class Emitter:
    """Per-wave code of one block: register access for the wave `w` (its index in the batch; `%w` unless a
    subclass binds another) whose VGPR rows start at lane `wl` (`w` times the wave size)."""

    w, wl = "%w", "%wl"

    def __init__(self, f: Fn, inst_pc):
        self.f = f
        self.inst_pc = inst_pc     # pc -> offset from the region's root (for branch targets)
        self.writes_exec = False
        self.c = None              # the chunk index (i64) inside a VALU run's chunk loop
        self.regs: dict[int, str] | None = None    # inside a run: VGPR -> alloca of its chunk (or the chunk itself)
        self.ra = ""                               # those pointers' alignment (", align 4": the rows')
        self.masks: dict[int, str] | None = None   # inside a run: SGPR (pair) -> alloca of its lane mask's chunk
        self.pre: list[str] | None = None          # inside a run: lines hoisted before the chunk loop
        self.scache: dict = {}
        self.defer: list | None = None             # a VOPD's writes, made once both halves have read
        self.exec_now: str | None = None           # inside a run that leaves EXEC alone: the chunk's EXEC lanes

    # -- addresses
    def vrow(self, r: int) -> str:
        f = self.f
        off = f.op(f"mul i64 %nl, {r}")
        idx = f.op(f"add i64 {off}, {self.wl}")
        return f.op(f"getelementptr i32, ptr %vp, i64 {idx}")

    def srow(self, r: int) -> str:
        f = self.f
        off = f.op(f"mul i64 %n, {r}")
        idx = f.op(f"add i64 {off}, {self.w}")
        return f.op(f"getelementptr i32, ptr %sp, i64 {idx}")

    # -- scalar operands
    def sget(self, op: Operand) -> str:
        f = self.f
        if op.kind == "c":
            return str(op.value & 0xFFFFFFFF)
        if self.pre is not None:           # inside a run: scalars are loop-invariant (fuse() checks), read once before it
            key = (op.kind, op.reg)
            if key not in self.scache:
                body, f.lines, pre = f.lines, self.pre, self.pre
                self.pre = None
                try:
                    self.scache[key] = self.sget(op)
                finally:
                    f.lines, self.pre = body, pre
            return self.scache[key]
        if op.kind == "x":
            if op.reg == MODE_SRC:
                p = f.op(f"getelementptr i32, ptr %modep, i64 {self.w}")
                return f.op(f"load i32, ptr {p}, align 4")
            if op.reg == SCC_SRC:
                p = f.op(f"getelementptr i32, ptr %sccp, i64 {self.w}")
                return f.op(f"load i32, ptr {p}, align 4")
            if op.reg == EXECZ_SRC:
                e = self.exec_bits()
                z = f.op(f"icmp eq {f.IT} {e}, 0")
                return f.op(f"zext i1 {z} to i32")
            if op.reg == VCCZ_SRC:
                e = self.mask_bits(Operand("s", VCC, 2 if f.L == 64 else 1))
                z = f.op(f"icmp eq {f.IT} {e}, 0")
                return f.op(f"zext i1 {z} to i32")
            raise AssertionError(op)
        if op.reg == NULL:
            return "0"
        return f.op(f"load i32, ptr {self.srow(op.reg)}, align 4")

    def sget64(self, op: Operand) -> str:
        f = self.f
        if op.kind == "c":
            return str(op.value & (2 ** 64 - 1))
        if op.kind == "s" and op.reg == NULL:
            return "0"
        if op.kind == "s" and op.n == 2:
            lo = f.op(f"zext i32 {self.sget(op)} to i64")
            hi = f.op(f"zext i32 {self.sget(Operand('s', op.reg + 1))} to i64")
            hs = f.op(f"shl i64 {hi}, 32")
            return f.op(f"or i64 {lo}, {hs}")
        return f.op(f"zext i32 {self.sget(op)} to i64")

    def sput(self, r: int, val: str) -> None:
        if r == NULL:
            return
        if r in (EXEC, EXEC + 1):
            self.writes_exec = True
        self.f.e(f"store i32 {val}, ptr {self.srow(r)}, align 4")

    def sput64(self, r: int, val: str) -> None:
        f = self.f
        if r == NULL:
            return
        lo = f.op(f"trunc i64 {val} to i32")
        sh = f.op(f"lshr i64 {val}, 32")
        hi = f.op(f"trunc i64 {sh} to i32")
        self.sput(r, lo)
        self.sput(r + 1, hi)

    def scc_put(self, bit: str) -> None:
        f = self.f
        z = f.op(f"zext i1 {bit} to i32")
        p = f.op(f"getelementptr i32, ptr %sccp, i64 {self.w}")
        f.e(f"store i32 {z}, ptr {p}, align 4")

    def scc_get(self) -> str:
        return self.sget(Operand("x", SCC_SRC))

    # -- masks (iL)
    def exec_bits(self) -> str:
        return self.mask_bits(Operand("s", EXEC, 2 if self.f.L == 64 else 1))

    def mask_bits(self, op: Operand) -> str:
        f = self.f
        if op.kind == "c":
            return str(op.value & ((1 << f.L) - 1))
        if f.L == 32:
            return self.sget(Operand("s", op.reg))
        return self.sget64(Operand("s", op.reg, 2))

    def mask_vec(self, bits: str) -> str:
        """The current chunk's lanes of an iL lane mask, as <W x i1>."""
        f = self.f
        sh = f.op(f"shl {f.IT} {f.op(f'trunc i64 {self.c} to {f.IT}') if f.L == 32 else self.c}, {f.LOGW}")
        part = f.op(f"lshr {f.IT} {bits}, {sh}")
        p32 = f.op(f"trunc {f.IT} {part} to i32") if f.L == 64 else part
        sp = f.splat(p32)
        bitsv = "<" + ", ".join(f"i32 {1 << j}" for j in range(f.W)) + ">"
        a = f.op(f"and {f.VT} {sp}, {bitsv}")
        return f.op(f"icmp ne {f.VT} {a}, zeroinitializer")

    def mask_put(self, r: int, m: str) -> None:
        """Inside a run: the chunk's lanes of the lane mask of SGPR (pair) r (written to the SGPR after the run)."""
        self.f.e(f"store {self.f.MT} {m}, ptr {self.masks[r]}")

    def exec_vec(self) -> str:
        """The current chunk's EXEC lanes (<W x i1>): read once per chunk in a run that does not write EXEC."""
        if self.exec_now is not None:
            return self.exec_now
        if self.masks is not None:
            return self.f.op(f"load {self.f.MT}, ptr {self.masks[EXEC]}")
        return self.mask_vec(self.exec_bits())

    def lane_mask(self, op: Operand) -> str:
        """The current chunk's lanes of a lane-mask operand (<W x i1>): a mask written earlier in the run directly."""
        if self.masks is not None and op.kind == "s" and op.reg in self.masks:
            return self.f.op(f"load {self.f.MT}, ptr {self.masks[op.reg]}")
        return self.mask_vec(self.mask_bits(op))

    def chunk_ptr(self, r: int) -> str:
        f = self.f
        off = f.op(f"shl i64 {self.c}, {f.LOGW}")
        return f.op(f"getelementptr i32, ptr {self.vrow(r)}, i64 {off}")

    # -- vector operands
    def vget(self, op: Operand) -> str:
        f = self.f
        if op.kind == "v":
            if self.regs is not None:
                return f.op(f"load {f.VT}, ptr {self.regs[op.reg]}{self.ra}")
            return f.op(f"load {f.VT}, ptr {self.chunk_ptr(op.reg)}, align 4")
        return f.splat(self.sget(op))

    def vget64(self, op: Operand) -> str:
        f = self.f
        VT64 = f"<{f.W} x i64>"
        if op.kind == "v":
            lo = f.op(f"zext {f.VT} {self.vget(op)} to {VT64}")
            hi = f.op(f"zext {f.VT} {self.vget(Operand('v', op.reg + 1))} to {VT64}")
            hs = f.op(f"shl {VT64} {hi}, {f.splat('32', 'i64')}")
            return f.op(f"or {VT64} {lo}, {hs}")
        return f.splat(self.sget64(op), "i64")

    def fget(self, op: Operand) -> str:
        """f32 source as the bits (vector i32) with NEG/ABS applied (sign bit operations)."""
        f = self.f
        v = self.vget(op)
        if op.abs:
            v = f.op(f"and {f.VT} {v}, {f.splat(str(0x7FFFFFFF))}")
        if op.neg:
            v = f.op(f"xor {f.VT} {v}, {f.splat(str(0x80000000))}")
        return v

    def vput(self, r: int, val: str) -> None:
        """EXEC-masked write of VGPR r."""
        if self.defer is not None:
            self.defer.append((r, val))
            return
        f = self.f
        p = self.regs[r]
        old = f.op(f"load {f.VT}, ptr {p}{self.ra}")
        new = f.op(f"select {f.MT} {self.exec_vec()}, {f.VT} {val}, {f.VT} {old}")
        f.e(f"store {f.VT} {new}, ptr {p}{self.ra}")

    def vput64(self, r: int, val: str) -> None:
        f = self.f
        VT64 = f"<{f.W} x i64>"
        lo = f.op(f"trunc {VT64} {val} to {f.VT}")
        sh = f.op(f"lshr {VT64} {val}, {f.splat('32', 'i64')}")
        hi = f.op(f"trunc {VT64} {sh} to {f.VT}")
        self.vput(r, lo)
        self.vput(r + 1, hi)

    # ---------------------------------------------------------------- SALU
    def salu(self, inst: Inst) -> None:
        f, k = self.f, inst.key
        d = inst.dst[0] if inst.dst else None
        if k in SOP2:
            opn, scc = SOP2[k]
            a, b = self.sget(inst.src[0]), self.sget(inst.src[1])
            r = self._int_op(opn, a, b, "i32")
            self.sput(d.reg, r)
            if scc == "nz":
                self.scc_put(f.op(f"icmp ne i32 {r}, 0"))
            elif scc:
                self.scc_put(f.op(f"icmp {scc} i32 {a}, {b}"))
            return
        if k in NC64:
            self.sput64(d.reg, f.op(f"{NC64[k]} i64 {self.sget64(inst.src[0])}, {self.sget64(inst.src[1])}"))
            return
        if k in SOP2_64:
            opn = SOP2_64[k]
            a = self.sget64(inst.src[0])
            if opn in ("shl", "lshr"):
                b = f.op(f"zext i32 {self.sget(inst.src[1])} to i64")
                b = f.op(f"and i64 {b}, 63")
                r = f.op(f"{opn} i64 {a}, {b}")
            else:
                r = self._int_op(opn, a, self.sget64(inst.src[1]), "i64")
            self.sput64(d.reg, r)
            self.scc_put(f.op(f"icmp ne i64 {r}, 0"))
            return
        if k in ADDSUB:
            sub, cin, signed = "sub" in k, k in ("s_addc_u32", "s_subb_u32"), k.endswith("i32")
            a = f.op(f"zext i32 {self.sget(inst.src[0])} to i64")
            b = f.op(f"zext i32 {self.sget(inst.src[1])} to i64")
            r = f.op(f"{'sub' if sub else 'add'} i64 {a}, {b}")
            if cin:
                c = f.op(f"zext i32 {self.scc_get()} to i64")
                r = f.op(f"{'sub' if sub else 'add'} i64 {r}, {c}")
            r32 = f.op(f"trunc i64 {r} to i32")
            self.sput(d.reg, r32)
            if signed:
                a32, b32 = f.op(f"trunc i64 {a} to i32"), f.op(f"trunc i64 {b} to i32")
                sa, sb = f.op(f"icmp slt i32 {a32}, 0"), f.op(f"icmp slt i32 {b32}, 0")
                sr = f.op(f"icmp slt i32 {r32}, 0")
                same = f.op(f"icmp {'ne' if sub else 'eq'} i1 {sa}, {sb}")
                flip = f.op(f"icmp ne i1 {sr}, {sa}")
                self.scc_put(f.op(f"and i1 {same}, {flip}"))
            else:
                self.scc_put(f.op(f"icmp {'slt' if sub else 'ugt'} i64 {r}, {'0' if sub else str(0xFFFFFFFF)}"))
            return
        if k == "s_mov_b32":
            self.sput(d.reg, self.sget(inst.src[0]))
            return
        if k == "s_movk_i32":
            self.sput(d.reg, str(inst.simm16 & 0xFFFFFFFF))
            return
        if k == "s_not_b32":
            r = f.op(f"xor i32 {self.sget(inst.src[0])}, -1")
            self.sput(d.reg, r)
            self.scc_put(f.op(f"icmp ne i32 {r}, 0"))
            return
        if k == "s_mov_b64":
            self.sput64(d.reg, self.sget64(inst.src[0]))
            return
        if k in ("s_cselect_b32", "s_cselect_b64"):
            w64 = k.endswith("64")
            a = (self.sget64 if w64 else self.sget)(inst.src[0])
            b = (self.sget64 if w64 else self.sget)(inst.src[1])
            c = f.op(f"icmp ne i32 {self.scc_get()}, 0")
            ty = "i64" if w64 else "i32"
            r = f.op(f"select i1 {c}, {ty} {a}, {ty} {b}")
            (self.sput64 if w64 else self.sput)(d.reg, r)
            return
        if k in SOP1_32 or k == "s_ctz_i32_b64":
            if k == "s_ctz_i32_b64":       # salu._ctz: the lowest set bit, -1 for none
                x = self.sget64(inst.src[0])
                z = f.op(f"trunc i64 {f.op(f'call i64 @llvm.cttz.i64(i64 {x}, i1 false)')} to i32")
                r = f.op(f"select i1 {f.op(f'icmp eq i64 {x}, 0')}, i32 -1, i32 {z}")
            else:
                x = self.sget(inst.src[0])
                if k == "s_ctz_i32_b32":
                    z = f.op(f"call i32 @llvm.cttz.i32(i32 {x}, i1 false)")
                    r = f.op(f"select i1 {f.op(f'icmp eq i32 {x}, 0')}, i32 -1, i32 {z}")
                elif k == "s_brev_b32":
                    r = f.op(f"call i32 @llvm.bitreverse.i32(i32 {x})")
                else:                       # s_abs_i32: |x| as int64, wrapped (|INT_MIN| = 0x80000000), SCC = r != 0
                    r = f.op(f"call i32 @llvm.abs.i32(i32 {x}, i1 false)")
                    self.scc_put(f.op(f"icmp ne i32 {r}, 0"))
            self.sput(d.reg, r)
            return
        if k in ("s_cmp_eq_u64", "s_cmp_lg_u64"):
            a, b = self.sget64(inst.src[0]), self.sget64(inst.src[1])
            self.scc_put(f.op(f"icmp {'eq' if k == 's_cmp_eq_u64' else 'ne'} i64 {a}, {b}"))
            return
        if k.startswith("s_bitcmp"):
            w64 = k.endswith("64")
            ty = "i64" if w64 else "i32"
            a = (self.sget64 if w64 else self.sget)(inst.src[0])
            b = self.sget(inst.src[1])
            if w64:
                b = f.op(f"zext i32 {b} to i64")
            sh = f.op(f"and {ty} {b}, {63 if w64 else 31}")
            bit = f.op(f"and {ty} {f.op(f'lshr {ty} {a}, {sh}')}, 1")
            self.scc_put(f.op(f"icmp eq {ty} {bit}, {k[8]}"))
            return
        if k.startswith("s_cmpk_"):            # salu._cmpk: the SGPR against simm16 (sign- or zero-extended)
            _, _, op, typ = k.split("_")
            a = self.sget(inst.dst[0] if inst.dst else inst.src[0])
            kv = inst.simm16 & 0xFFFFFFFF if typ == "i32" else inst.simm16 & 0xFFFF
            pred = SCMP[op]
            if pred not in ("eq", "ne"):
                pred = ("s" if typ == "i32" else "u") + pred
            self.scc_put(f.op(f"icmp {pred} i32 {a}, {kv}"))
            return
        if k in LANE_OPS:
            self._lane_op(inst)
            return
        if k.startswith("s_cmp_"):
            _, _, op, typ = k.split("_")
            a, b = self.sget(inst.src[0]), self.sget(inst.src[1])
            pred = SCMP[op]
            if pred not in ("eq", "ne"):
                pred = ("s" if typ == "i32" else "u") + pred
            self.scc_put(f.op(f"icmp {pred} i32 {a}, {b}"))
            return
        if "_saveexec_" in k:
            w64 = k.endswith("64")
            ty = "i64" if w64 else "i32"
            opn = SAVEEXEC[k[2:].rsplit("_saveexec_", 1)[0]]("s", "e")[0]
            s = (self.sget64 if w64 else self.sget)(inst.src[0])
            e = self.sget64(Operand("s", EXEC, 2)) if w64 else self.sget(Operand("s", EXEC))
            (self.sput64 if w64 else self.sput)(d.reg, e)
            new = self._int_op(opn, s, e, ty)
            if w64:
                self.sput64(EXEC, new)
            else:
                self.sput(EXEC, new)
            self.scc_put(f.op(f"icmp ne {ty} {new}, 0"))
            return
        raise AssertionError(k)

    def _lane_op(self, inst: Inst) -> None:
        """v_readfirstlane/v_readlane/v_writelane_b32 for the current wave (valu_int.py): one lane of a VGPR row
        to an SGPR (the first lane of EXEC, lane 0 when none), or an SGPR to one lane whatever EXEC says."""
        f, k = self.f, inst.key
        src = inst.src[0]
        if k == "v_writelane_b32":
            lane = f.op(f"and i32 {self.sget(inst.src[1])}, {f.L - 1}")
            p = self.lane_ptr(inst.dst[0].reg, f.op(f"zext i32 {lane} to i64"))
            f.e(f"store i32 {self.sget(src)}, ptr {p}, align 4")
            return
        if src.kind != "v":                 # the same in every lane
            self.sput(inst.dst[0].reg, self.sget(src))
            return
        if k == "v_readfirstlane_b32":
            e = self.exec_bits()
            lane = f.op(f"call {f.IT} @llvm.cttz.{f.IT}({f.IT} {e}, i1 false)")
            lane = f.op(f"select i1 {f.op(f'icmp eq {f.IT} {e}, 0')}, {f.IT} 0, {f.IT} {lane}")
            lane = f.op(f"zext {f.IT} {lane} to i64") if f.L == 32 else lane
        else:
            lane = f.op(f"zext i32 {f.op(f'and i32 {self.sget(inst.src[1])}, {f.L - 1}')} to i64")
        self.sput(inst.dst[0].reg, f.op(f"load i32, ptr {self.lane_ptr(src.reg, lane)}, align 4"))

    def _mbcnt(self, inst: Inst) -> str:
        """valu_int._mbcnt for the current chunk: popcount of S0's bits below the lane (lo: lanes 0-31, hi: 32-63)
        plus S1."""
        f = self.f
        VT = f.VT
        first = f.op(f"trunc i64 {f.op(f'shl i64 {self.c}, {f.LOGW}')} to i32")
        ramp = "<" + ", ".join(f"i32 {j}" for j in range(f.W)) + ">"
        lane = f.op(f"add {VT} {f.splat(first)}, {ramp}")
        c32, c31, one, ones = f.splat("32"), f.splat("31"), f.splat("1"), f.splat("-1")
        if inst.key.endswith("hi_u32_b32"):
            if f.L == 64:
                ge = f.op(f"icmp uge {VT} {lane}, {c32}")
                above = f.op(f"sub {VT} {lane}, {c32}")
                n = f.op(f"select {f.MT} {ge}, {VT} {above}, {VT} zeroinitializer")
            else:
                n = "zeroinitializer"
            full = f.op(f"icmp uge {VT} {lane}, {f.splat('64')}")
        else:
            n = f.op(f"call {VT} @llvm.umin.v{f.W}i32({VT} {lane}, {VT} {c32})")
            full = f.op(f"icmp uge {VT} {lane}, {c32}")
        n31 = f.op(f"call {VT} @llvm.umin.v{f.W}i32({VT} {n}, {VT} {c31})")
        mask = f.op(f"sub {VT} {f.op(f'shl {VT} {one}, {n31}')}, {one}")
        mask = f.op(f"select {f.MT} {full}, {VT} {ones}, {VT} {mask}")
        bits = f.op(f"and {VT} {self.vget(inst.src[0])}, {mask}")
        cnt = f.op(f"call {VT} @llvm.ctpop.v{f.W}i32({VT} {bits})")
        return f.op(f"add {VT} {cnt}, {self.vget(inst.src[1])}")

    def _int_op(self, opn: str, a: str, b: str, ty: str) -> str:
        f = self.f
        bits = 64 if ty.endswith("i64") else 32
        scal = ty in ("i32", "i64")
        ones = "-1" if scal else f.splat("-1", "i64" if bits == 64 else "i32")
        if opn in ("and", "or", "xor", "mul"):
            return f.op(f"{opn} {ty} {a}, {b}")
        if opn == "andn":
            nb = f.op(f"xor {ty} {b}, {ones}")
            return f.op(f"and {ty} {a}, {nb}")
        if opn == "orn":
            nb = f.op(f"xor {ty} {b}, {ones}")
            return f.op(f"or {ty} {a}, {nb}")
        if opn in ("nand", "nor", "xnor"):
            r = f.op(f"{opn[1:] if opn != 'xnor' else 'xor'} {ty} {a}, {b}")
            return f.op(f"xor {ty} {r}, {ones}")
        if opn in ("shl", "lshr", "ashr"):
            m = str(bits - 1) if scal else f.splat(str(bits - 1))
            sb = f.op(f"and {ty} {b}, {m}")
            return f.op(f"{opn} {ty} {a}, {sb}")
        if opn in ("smin", "umin", "smax", "umax"):
            return f.op(f"call {ty} @llvm.{opn}.{self._suffix(ty)}({ty} {a}, {ty} {b})")
        raise AssertionError(opn)

    def _suffix(self, ty: str) -> str:
        if ty.startswith("<"):
            n, t = ty[1:-1].split(" x ")
            return f"v{n}{t}"
        return ty

    # ---------------------------------------------------------------- VALU
    def valu_run(self, run: list[tuple[int, Inst]]) -> None:
        """A run of VALU instructions (fuse() made it; (index in the block, instruction) each) as one loop over the
        wave's chunks of W lanes: per chunk every VGPR it touches is loaded once, the instructions work on allocas
        (SSA values once promoted), the VGPRs written are stored back once; EXEC and the lane masks written are
        <W x i1> chunks the later instructions read, written to their SGPRs after the loop. Each instruction keeps
        its own start/end guard (loop-invariant). In the fast tier (f.direct) the instructions load and store the
        VGPR rows' chunks themselves: without the IR passes the allocas would be memory too, and their copies in and
        out cost instruction selection (~10-15% of a region's IR)."""
        f = self.f
        nm = 2 if f.L == 64 else 1
        touched, written = set(), set()
        for _, inst in run:
            rd, wr = _vgprs(inst)
            touched |= rd | wr
            written |= wr
        wkeys = sorted({r for _, inst in run for r in mask_dsts(inst)})
        mkeys = sorted({EXEC, *wkeys})
        pre, head, tail, done = f.t("rp"), f.t("rh"), f.t("rt"), f.t("rd")
        f.e(f"br label {pre}")
        f.label(pre)
        at = len(f.lines)
        self.pre, self.scache = [], {}
        go = []
        for i, _ in run:
            go.append(f.inside(i))
        bits0 = {r: self.mask_bits(Operand("s", r, nm)) for r in mkeys}
        rows = {r: self.vrow(r) for r in sorted(touched)}
        self.regs = None if f.direct else {r: f.alloca(f.VT) for r in rows}
        self.masks = {r: f.alloca(f.MT) for r in mkeys}
        acc = {r: f.alloca(f.IT) for r in wkeys}
        for r in wkeys:
            f.e(f"store {f.IT} 0, ptr {acc[r]}")
        f.e(f"br label {head}")
        f.label(head)
        c, c1 = f.t("c"), f.t("c")
        f.e(f"{c} = phi i64 [0, {pre}], [{c1}, {tail}]")
        self.c = c
        off = f.op(f"shl i64 {c}, {f.LOGW}")
        ptr = {r: f.op(f"getelementptr i32, ptr {row}, i64 {off}") for r, row in rows.items()}
        if f.direct:
            self.regs, self.ra = ptr, ", align 4"
        else:
            for r, p in ptr.items():
                f.e(f"store {f.VT} {f.op(f'load {f.VT}, ptr {p}, align 4')}, ptr {self.regs[r]}")
        for r in mkeys:
            f.e(f"store {f.MT} {self.mask_vec(bits0[r])}, ptr {self.masks[r]}")
        if EXEC not in wkeys:
            self.exec_now = f.op(f"load {f.MT}, ptr {self.masks[EXEC]}")
        for g, (_, inst) in zip(go, run):
            yes, no = f.t("x"), f.t("y")
            f.e(f"br i1 {g}, label {yes}, label {no}")
            f.label(yes)
            self._valu(inst)
            f.e(f"br label {no}")
            f.label(no)
        f.e(f"br label {tail}")
        f.label(tail)
        for r in sorted(written) if not f.direct else ():
            f.e(f"store {f.VT} {f.op(f'load {f.VT}, ptr {self.regs[r]}')}, ptr {ptr[r]}, align 4")
        sh = f.op(f"trunc i64 {off} to {f.IT}") if f.L == 32 else off
        for r in wkeys:
            m = f.op(f"load {f.MT}, ptr {self.masks[r]}")
            z = f.op(f"zext {f.MI} {f.op(f'bitcast {f.MT} {m} to {f.MI}')} to {f.IT}")
            z = f.op(f"shl {f.IT} {z}, {sh}")
            old = f.op(f"load {f.IT}, ptr {acc[r]}")
            f.e(f"store {f.IT} {f.op(f'or {f.IT} {old}, {z}')}, ptr {acc[r]}")
        f.e(f"{c1} = add i64 {c}, 1")
        more = f.op(f"icmp ult i64 {c1}, {f.NC}")
        f.e(f"br i1 {more}, label {head}, label {done}")
        f.label(done)
        f.lines[at:at] = self.pre
        self.c = self.regs = self.masks = self.pre = self.exec_now = None
        self.ra = ""
        self.scache = {}
        for r in wkeys:
            bits = f.op(f"load {f.IT}, ptr {acc[r]}")
            (self.sput if f.L == 32 else self.sput64)(r, bits)

    def _valu(self, inst: Inst, dual: bool = False) -> None:
        f, k = self.f, inst.key
        VT = f.VT
        if k == "v_dual":               # both halves read before either writes (valu_pk._vopd)
            self.defer = []
            for h in halves(inst):
                self._valu(h, dual=True)
            writes, self.defer = self.defer, None
            for r, v in writes:
                self.vput(r, v)
            return
        d = inst.dst[0]
        if k in VBIN:
            a, b = self.vget(inst.src[0]), self.vget(inst.src[1])
            opn = VBIN[k]
            if opn == "subrev":
                r = f.op(f"sub {VT} {b}, {a}")
            elif opn == "sub" or opn == "add":
                r = f.op(f"{opn} {VT} {a}, {b}")
            elif opn in ("shlrev", "lshrrev", "ashrrev"):
                r = self._int_op(opn[:-3], b, a, VT)
            elif opn == "mul24":
                m = f.splat(str(0xFFFFFF))
                am, bm = f.op(f"and {VT} {a}, {m}"), f.op(f"and {VT} {b}, {m}")
                r = f.op(f"mul {VT} {am}, {bm}")
            elif opn == "mulhi":
                V64 = f"<{f.W} x i64>"
                a64, b64 = f.op(f"zext {VT} {a} to {V64}"), f.op(f"zext {VT} {b} to {V64}")
                p = f.op(f"mul {V64} {a64}, {b64}")
                s32 = f.splat("32", "i64")
                hi = f.op(f"lshr {V64} {p}, {s32}")
                r = f.op(f"trunc {V64} {hi} to {VT}")
            else:
                r = self._int_op(opn, a, b, VT)
            self.vput(d.reg, r)
            return
        if k in VTRI:
            a, b, c = (self.vget(s) for s in inst.src)
            m31 = f.splat("31")
            B = lambda o, x, y: f.op(f"{o} {VT} {x}, {y}")  # noqa: E731
            if k == "v_add3_u32":
                r = B("add", B("add", a, b), c)
            elif k == "v_lshl_add_u32":
                r = B("add", B("shl", a, B("and", b, m31)), c)
            elif k == "v_add_lshl_u32":
                r = B("shl", B("add", a, b), B("and", c, m31))
            elif k == "v_lshl_or_b32":
                r = B("or", B("shl", a, B("and", b, m31)), c)
            elif k == "v_and_or_b32":
                r = B("or", B("and", a, b), c)
            elif k == "v_or3_b32":
                r = B("or", B("or", a, b), c)
            elif k == "v_xad_u32":
                r = B("add", B("xor", a, b), c)
            elif k == "v_mad_u32_u24":
                m = f.splat(str(0xFFFFFF))
                r = B("add", B("mul", B("and", a, m), B("and", b, m)), c)
            elif k == "v_bfe_u32":
                o = B("and", b, m31)
                n = B("and", c, m31)
                one = f.splat("1")
                nn = f.op(f"call {VT} @llvm.umax.{self._suffix(VT)}({VT} {n}, {VT} {one})")
                sh = B("sub", f.splat("32"), nn)
                msk = B("lshr", f.splat("-1"), sh)
                z = f.op(f"icmp eq {VT} {n}, zeroinitializer")
                msk = f.op(f"select {f.MT} {z}, {VT} zeroinitializer, {VT} {msk}")
                r = B("and", B("lshr", a, o), msk)
            else:
                raise AssertionError(k)
            self.vput(d.reg, r)
            return
        if k == "v_mov_b32":
            self.vput(d.reg, self.vget(inst.src[0]))
            return
        if k == "v_not_b32":
            self.vput(d.reg, f.op(f"xor {VT} {self.vget(inst.src[0])}, {f.splat('-1')}"))
            return
        if k in ("v_cvt_f32_u32", "v_cvt_f32_i32"):
            x = f.op(f"{'uitofp' if k.endswith('u32') else 'sitofp'} {VT} {self.vget(inst.src[0])} to {f.FT}")
            self.vput(d.reg, f.op(f"bitcast {f.FT} {x} to {VT}"))
            return
        if k in FUNARY:
            self.vput(d.reg, self._funary(FUNARY[k], self.fget(inst.src[0])))
            return
        if k in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
            self.vput(d.reg, self._mbcnt(inst))
            return
        if k in ("v_max_f32", "v_min_f32"):
            a, b = self.fget(inst.src[0]), self.fget(inst.src[1])
            self.vput(d.reg, self._minmax(a, b, k == "v_max_f32"))
            return
        if k == "v_ldexp_f32":
            x = self._f64(self.fget(inst.src[0]))
            p = self._pow2(self.vget(inst.src[1]), 400)
            self.vput(d.reg, self._to_f32(f.op(f"fmul <{f.W} x double> {x}, {p}")))
            return
        if k == "v_div_fixup_f32":
            self.vput(d.reg, self._div_fixup(*(self.fget(x) for x in inst.src)))
            return
        if k == "v_div_scale_f32":
            r, vcc = self._div_scale(*(self.fget(x) for x in inst.src))
            self.vput(d.reg, r)
            if inst.dst[1].reg != NULL:
                self.mask_put(inst.dst[1].reg, f.op(f"and {f.MT} {vcc}, {self.exec_vec()}"))
            return
        if k == "v_div_fmas_f32":
            self.vput(d.reg, self._div_fmas(inst, *(self.fget(x) for x in inst.src)))
            return
        if k in VFLT:
            a, b = self.fget(inst.src[0]), self.fget(inst.src[1])
            opn = VFLT[k]
            if opn == "fsubrev":
                opn, a, b = "fsub", b, a
            fa, fb = f.op(f"bitcast {VT} {a} to {f.FT}"), f.op(f"bitcast {VT} {b} to {f.FT}")
            r = f.op(f"{opn} {f.FT} {fa}, {fb}")
            self.vput(d.reg, self._nan2(a, fa, b, fb, f.op(f"bitcast {f.FT} {r} to {VT}")))
            return
        if k in FMA:
            if k == "v_fmac_f32":
                a, b = inst.src
                c = Operand("v", d.reg)
            else:
                a, b, c = inst.src
            x, y = a, b          # the interpreter's NaN order: src0, src1, then the addend (tests/test_jit.py)
            if dual and k != "v_fmamk_f32" and a.kind != "v":
                x, y = b, a      # fp.fma32 multiplies the wider operand first: a VOPD's VGPR vsrc1 before src0
            xa, yb, cc = self.fget(x), self.fget(y), self.fget(c)
            fx, fy, fc = (f.op(f"bitcast {VT} {v} to {f.FT}") for v in (xa, yb, cc))
            r = f.op(f"call {f.FT} @llvm.fma.{self._suffix(f.FT)}({f.FT} {fx}, {f.FT} {fy}, {f.FT} {fc})")
            rb = f.op(f"bitcast {f.FT} {r} to {VT}")
            self.vput(d.reg, self._nan_fma(xa, fx, yb, fy, cc, fc, r, rb))
            return
        if k == "v_cndmask_b32":
            a, b = self.vget(inst.src[0]), self.vget(inst.src[1])
            m = self.lane_mask(inst.src[2])
            self.vput(d.reg, f.op(f"select {f.MT} {m}, {VT} {b}, {VT} {a}"))
            return
        if k in CARRY:
            add, rev, cin = CARRY[k]
            a, b = self.vget(inst.src[0]), self.vget(inst.src[1])
            if rev:
                a, b = b, a
            # in 32 bits (a 64-bit lane vector costs instruction selection ~4x as much): the carry out of a + b is
            # a + b < a, the borrow of a - b is a < b; a carry (borrow) in adds one more when the first step gave
            # 0xFFFFFFFF (0)
            op = "add" if add else "sub"
            r = f.op(f"{op} {VT} {a}, {b}")
            out = f.op(f"icmp ult {VT} {r}, {a}") if add else f.op(f"icmp ult {VT} {a}, {b}")
            if cin:
                ci = f.op(f"zext {f.MT} {self.lane_mask(inst.src[2])} to {VT}")
                r1, r = r, f.op(f"{op} {VT} {r}, {ci}")
                more = f.op(f"icmp ult {VT} {r}, {r1}") if add else f.op(f"icmp ult {VT} {r1}, {ci}")
                out = f.op(f"or {f.MT} {out}, {more}")
            if not (inst.dead_sdst and _fast_carry(inst, cin)) and inst.dst[1].reg != NULL:
                em = self.exec_vec()
                carry = f.op(f"and {f.MT} {out}, {em}")
            else:
                carry = None
            self.vput(d.reg, r)
            if carry is not None:
                self.mask_put(inst.dst[1].reg, carry)
            return
        if k == "v_mad_u64_u32":
            V64 = f"<{f.W} x i64>"
            a = f.op(f"zext {VT} {self.vget(inst.src[0])} to {V64}")
            b = f.op(f"zext {VT} {self.vget(inst.src[1])} to {V64}")
            c = self.vget64(inst.src[2])
            p = f.op(f"mul {V64} {a}, {b}")
            r = f.op(f"add {V64} {p}, {c}")
            carry = None
            if inst.dst[1].reg != NULL:      # the interpreter writes it even when nothing reads it
                ov = f.op(f"icmp ult {V64} {r}, {c}")
                carry = f.op(f"and {f.MT} {ov}, {self.exec_vec()}")
            self.vput64(d.reg, r)
            if carry is not None:
                self.mask_put(inst.dst[1].reg, carry)
            return
        if k == "v_lshl_add_u64":           # cdna._lshl_add_u64: (S0 << (S1 & 7)) + S2, 64-bit
            V64 = f"<{f.W} x i64>"
            sh = f.op(f"and {V64} {f.op(f'zext {VT} {self.vget(inst.src[1])} to {V64}')}, {f.splat('7', 'i64')}")
            shifted = f.op(f"shl {V64} {self.vget64(inst.src[0])}, {sh}")
            self.vput64(d.reg, f.op(f"add {V64} {shifted}, {self.vget64(inst.src[2])}"))
            return
        if k in SHIFT64:
            V64 = f"<{f.W} x i64>"
            s = f.op(f"zext {VT} {self.vget(inst.src[0])} to {V64}")
            s = f.op(f"and {V64} {s}, {f.splat('63', 'i64')}")
            v = self.vget64(inst.src[1])
            self.vput64(d.reg, f.op(f"{SHIFT64[k]} {V64} {v}, {s}"))
            return
        if k.startswith("v_cmp"):
            _, cx, op, typ = k.split("_")
            if inst.dead_sdst and cx == "cmp" and is_plain_cmp(inst):
                return                  # as the interpreter's fast path: nothing reads the mask
            if typ == "f32":
                a = f.op(f"bitcast {VT} {self.fget(inst.src[0])} to {f.FT}")
                b = f.op(f"bitcast {VT} {self.fget(inst.src[1])} to {f.FT}")
                m = f.op(f"fcmp {FCMP[op]} {f.FT} {a}, {b}")
            else:
                a, b = self.vget(inst.src[0]), self.vget(inst.src[1])
                pred = ICMP[op]
                if pred not in ("eq", "ne"):
                    pred = ("s" if typ == "i32" else "u") + pred
                m = f.op(f"icmp {pred} {VT} {a}, {b}")
            m = f.op(f"and {f.MT} {m}, {self.exec_vec()}")
            if d.reg != NULL:
                self.mask_put(d.reg, m)
            return
        raise AssertionError(k)

    # -- f32 helpers (bits as <W x i32>; the interpreter's valu_float.py)
    def _vconst(self, v: int) -> str:
        return self.f.splat(str(v & 0xFFFFFFFF if v >= 0 else v))

    def _exp_field(self, bits: str) -> str:
        f = self.f
        return f.op(f"lshr {f.VT} {f.op(f'and {f.VT} {bits}, {self._vconst(0x7F800000)}')}, {self._vconst(23)}")

    def _ftz(self, bits: str) -> str:
        """Denormals to signed zero (valu.ftz_bits)."""
        f = self.f
        z = f.op(f"icmp eq {f.VT} {f.op(f'and {f.VT} {bits}, {self._vconst(0x7F800000)}')}, zeroinitializer")
        sign = f.op(f"and {f.VT} {bits}, {self._vconst(0x80000000)}")
        return f.op(f"select {f.MT} {z}, {f.VT} {sign}, {f.VT} {bits}")

    def _fv(self, bits: str) -> str:
        return self.f.op(f"bitcast {self.f.VT} {bits} to {self.f.FT}")

    def _bits(self, fv: str) -> str:
        return self.f.op(f"bitcast {self.f.FT} {fv} to {self.f.VT}")

    def _f64(self, bits: str) -> str:
        return self.f.op(f"fpext {self.f.FT} {self._fv(bits)} to <{self.f.W} x double>")

    def _to_f32(self, d: str) -> str:
        """An f64 vector rounded to f32 (round to nearest even), as bits."""
        return self._bits(self.f.op(f"fptrunc <{self.f.W} x double> {d} to {self.f.FT}"))

    def _pow2(self, n: str, lim: int) -> str:
        """2.0 ** clip(n, -lim, lim) as <W x double> (n: i32 lanes; exact: |lim| < 1023)."""
        f = self.f
        V64 = f"<{f.W} x i64>"
        n64 = f.op(f"sext {f.VT} {n} to {V64}")
        lo, hi = f.splat(str(-lim), "i64"), f.splat(str(lim), "i64")
        n64 = f.op(f"select <{f.W} x i1> {f.op(f'icmp slt {V64} {n64}, {lo}')}, {V64} {lo}, {V64} {n64}")
        n64 = f.op(f"select <{f.W} x i1> {f.op(f'icmp sgt {V64} {n64}, {hi}')}, {V64} {hi}, {V64} {n64}")
        biased = f.op(f"add {V64} {n64}, {f.splat('1023', 'i64')}")
        e = f.op(f"shl {V64} {biased}, {f.splat('52', 'i64')}")
        return f.op(f"bitcast {V64} {e} to <{f.W} x double>")

    def _funary(self, op: str, x: str) -> str:
        f = self.f
        D = f"<{f.W} x double>"
        if op in ("roundeven", "trunc", "floor", "ceil"):
            return self._bits(f.op(f"call {f.FT} @llvm.{op}.v{f.W}f32({f.FT} {self._fv(x)})"))
        if op in ("fptosi", "fptoui"):       # saturating, NaN -> 0 (valu_float._to_int)
            return f.op(f"call {f.VT} @llvm.{op}.sat.v{f.W}i32.v{f.W}f32({f.FT} {self._fv(x)})")
        x = self._ftz(x)                     # _trans32: denormal inputs read as zero
        if op == "sqrt":                     # (correctly rounded in f32; not flushed after)
            return self._bits(f.op(f"call {f.FT} @llvm.sqrt.v{f.W}f32({f.FT} {self._fv(x)})"))
        if op == "exp":
            return self._exp2(x)
        d = self._f64(x)
        if op == "rsq":
            d = f.op(f"call {D} @llvm.sqrt.v{f.W}f64({D} {d})")
        one = f.splat("1.0", "double")
        return self._ftz(self._to_f32(f.op(f"fdiv {D} {one}, {d}")))

    def _exp2(self, x: str) -> str:
        """v_exp_f32 of flushed input bits: valu_float.exp2_f64's steps (the same doubles), rounded to f32 and
        flushed; a NaN input gives it quieted."""
        f = self.f
        D, M = f"<{f.W} x double>", f"<{f.W} x i1>"
        d = self._f64(x)
        nan = f.op(f"fcmp uno {D} {d}, {d}")
        lim = EXP2_LIMIT
        lo, hi = f.splat(_dbl(-lim), "double"), f.splat(_dbl(lim), "double")
        c = f.op(f"select {M} {f.op(f'fcmp olt {D} {d}, {lo}')}, {D} {lo}, {D} {d}")
        c = f.op(f"select {M} {f.op(f'fcmp ogt {D} {c}, {hi}')}, {D} {hi}, {D} {c}")
        c = f.op(f"select {M} {nan}, {D} zeroinitializer, {D} {c}")
        n = f.op(f"call {D} @llvm.roundeven.v{f.W}f64({D} {c})")
        t = f.op(f"fsub {D} {c}, {n}")
        p = f.splat(_dbl(EXP2_POLY[-1]), "double")
        for k in EXP2_POLY[-2::-1]:
            p = f.op(f"fadd {D} {f.op(f'fmul {D} {p}, {t}')}, {f.splat(_dbl(k), 'double')}")
        r = f.op(f"fmul {D} {p}, {self._pow2(f.op(f'fptosi {D} {n} to {f.VT}'), int(lim))}")
        out = self._ftz(self._to_f32(r))
        return f.op(f"select {f.MT} {self._isnan(self._fv(x))}, {f.VT} {self._quiet(x)}, {f.VT} {out}")

    def _minmax(self, a: str, b: str, is_max: bool) -> str:
        """valu_float.fmax/fmin: equal operands combine their bits (+0 above -0), a NaN is missing data (two NaNs:
        the first, as numpy's vector loop gives it), in IEEE mode a signaling NaN operand gives it quieted."""
        f = self.f
        VT, MT = f.VT, f.MT
        fa, fb = self._fv(a), self._fv(b)
        eq = f.op(f"fcmp oeq {f.FT} {fa}, {fb}")
        comb = f.op(f"{'and' if is_max else 'or'} {VT} {a}, {b}")
        an, bn = self._isnan(fa), self._isnan(fb)
        pred = "ogt" if is_max else "olt"
        pick = f.op(f"select {MT} {f.op(f'fcmp {pred} {f.FT} {fa}, {fb}')}, {VT} {a}, {VT} {b}")
        r = f.op(f"select {MT} {bn}, {VT} {a}, {VT} {f.op(f'select {MT} {an}, {VT} {b}, {VT} {pick}')}")
        r = f.op(f"select {MT} {eq}, {VT} {comb}, {VT} {r}")
        qbit = self._vconst(0x400000)

        def snan(x: str, isn: str) -> str:
            quiet = f.op(f"icmp ne {VT} {f.op(f'and {VT} {x}, {qbit}')}, zeroinitializer")
            true = f.splat("true", "i1")
            return f.op(f"and {MT} {isn}, {f.op(f'xor {MT} {quiet}, {true}')}")
        ri = f.op(f"select {MT} {snan(b, bn)}, {VT} {self._quiet(b)}, {VT} {r}")
        ri = f.op(f"select {MT} {snan(a, an)}, {VT} {self._quiet(a)}, {VT} {ri}")
        mode = self.sget(Operand("x", MODE_SRC))
        ieee = f.op(f"icmp ne i32 {f.op(f'and i32 {mode}, 512')}, 0")       # MODE.IEEE (bit 9)
        return f.op(f"select i1 {ieee}, {VT} {ri}, {VT} {r}")

    def _is_denorm(self, bits: str) -> str:
        f = self.f
        e0 = f.op(f"icmp eq {f.VT} {self._exp_field(bits)}, zeroinitializer")
        nz = f.op(f"fcmp une {f.FT} {self._fv(bits)}, zeroinitializer")
        return f.op(f"and {f.MT} {e0}, {nz}")

    def _div_scale(self, s0: str, s1: str, s2: str) -> tuple[str, str]:
        """valu_float.div_scale for f32 (1/s1 is never an f64 denormal: those cases drop out): (D, VCC)."""
        f = self.f
        VT, MT, FT = f.VT, f.MT, f.FT
        e1, e2 = self._exp_field(s1), self._exp_field(s2)
        f0, f1, f2 = self._fv(s0), self._fv(s1), self._fv(s2)
        up = self._to_f32(f.op(f"fmul <{f.W} x double> {self._f64(s0)}, {self._pow2(self._vconst(64), 64)}"))
        q = self._bits(f.op(f"fdiv {FT} {f2}, {f1}"))
        zero = "zeroinitializer"
        true = f.splat("true", "i1")
        NOT = lambda m: f.op(f"xor {MT} {m}, {true}")  # noqa: E731
        AND = lambda *ms: ms[0] if len(ms) == 1 else f.op(f"and {MT} {ms[0]}, {AND(*ms[1:])}")  # noqa: E731
        c0 = f.op(f"or {MT} {f.op(f'fcmp oeq {FT} {f2}, {zero}')}, {f.op(f'fcmp oeq {FT} {f1}, {zero}')}")
        n0 = NOT(c0)
        gap = f.op(f"sub {VT} {e2}, {e1}")
        c1 = AND(n0, f.op(f"icmp sge {VT} {gap}, {self._vconst(96)}"))
        n1 = NOT(c1)
        c2 = AND(n0, n1, self._is_denorm(s1))
        n2 = NOT(c2)
        c5 = AND(n0, n1, n2, self._is_denorm(q))
        c6 = AND(n0, n1, n2, NOT(c5), f.op(f"icmp sle {VT} {e2}, {self._vconst(23)}"))
        s01 = f.op(f"fcmp oeq {FT} {f0}, {f1}")
        s02 = f.op(f"fcmp oeq {FT} {f0}, {f2}")
        u1, u2 = AND(c1, s01), AND(c5, s02)
        use_up = f.op(f"or {MT} {f.op(f'or {MT} {u1}, {c2}')}, {f.op(f'or {MT} {u2}, {c6}')}")
        d = f.op(f"select {MT} {c0}, {VT} {self._vconst(0x7FC00000)}, {VT} {s0}")
        d = f.op(f"select {MT} {use_up}, {VT} {up}, {VT} {d}")
        return d, f.op(f"or {MT} {c1}, {c5}")

    def _div_fixup(self, q: str, den: str, num: str) -> str:
        """valu_float.div_fixup for f32."""
        f = self.f
        VT, MT, FT = f.VT, f.MT, f.FT
        fq, fd, fn = self._fv(q), self._fv(den), self._fv(num)
        sign = self._vconst(0x80000000)
        x = f.op(f"xor {VT} {den}, {num}")
        neg = f.op(f"icmp ne {VT} {f.op(f'and {VT} {x}, {sign}')}, zeroinitializer")
        inf = f.op(f"select {MT} {neg}, {VT} {self._vconst(0xFF800000)}, {VT} {self._vconst(0x7F800000)}")
        zero = f.op(f"select {MT} {neg}, {VT} {sign}, {VT} zeroinitializer")
        mag = f.op(f"and {VT} {q}, {self._vconst(0x7FFFFFFF)}")
        r = f.op(f"select {MT} {neg}, {VT} {f.op(f'or {VT} {mag}, {sign}')}, {VT} {mag}")
        r = f.op(f"select {MT} {self._isnan(fq)}, {VT} {inf}, {VT} {r}")
        en, ed = self._exp_field(num), self._exp_field(den)
        under = f.op(f"icmp slt {VT} {f.op(f'sub {VT} {en}, {ed}')}, {self._vconst(-150)}")
        r = f.op(f"select {MT} {under}, {VT} {zero}, {VT} {r}")
        finf = f.splat("0x7FF0000000000000", "float")
        def absinf(fv: str) -> str:
            return f.op(f"fcmp oeq {FT} {f.op(f'call {FT} @llvm.fabs.v{f.W}f32({FT} {fv})')}, {finf}")
        dinf, ninf = absinf(fd), absinf(fn)
        zf = "zeroinitializer"
        dz, nz = f.op(f"fcmp oeq {FT} {fd}, {zf}"), f.op(f"fcmp oeq {FT} {fn}, {zf}")
        r = f.op(f"select {MT} {f.op(f'or {MT} {dinf}, {nz}')}, {VT} {zero}, {VT} {r}")
        r = f.op(f"select {MT} {f.op(f'or {MT} {dz}, {ninf}')}, {VT} {inf}, {VT} {r}")
        both = f.op(f"or {MT} {f.op(f'and {MT} {dz}, {nz}')}, {f.op(f'and {MT} {dinf}, {ninf}')}")
        r = f.op(f"select {MT} {both}, {VT} {self._vconst(0xFFC00000)}, {VT} {r}")
        r = f.op(f"select {MT} {self._isnan(fd)}, {VT} {self._quiet(den)}, {VT} {r}")
        return f.op(f"select {MT} {self._isnan(fn)}, {VT} {self._quiet(num)}, {VT} {r}")

    def _div_fmas(self, inst: Inst, a: str, b: str, c: str) -> str:
        """valu_float._div_fmas for f32: fp.fma32_odd(a, b, c) (the f64 sum, rounded to odd where fp._fma32 finds
        it may matter), times 2**64 or 2**-64 where VCC is set (by c's exponent), rounded once to f32."""
        f = self.f
        VT, MT = f.VT, f.MT
        D, V64 = f"<{f.W} x double>", f"<{f.W} x i64>"
        p = f.op(f"fmul {D} {self._f64(a)}, {self._f64(b)}")                # exact
        cd = self._f64(c)
        s = f.op(f"fadd {D} {p}, {cd}")
        sb = f.op(f"bitcast {D} {s} to {V64}")
        low = f.op(f"and {V64} {sb}, {f.splat(str(0x1FFFFFFF), 'i64')}")
        tie = f.op(f"icmp eq {V64} {low}, {f.splat(str(0x10000000), 'i64')}")
        r32 = self._to_f32(s)
        cand = f.op(f"or {MT} {tie}, {f.op(f'icmp eq {VT} {self._exp_field(r32)}, zeroinitializer')}")
        # fp.two_sum and fp.to_odd on the candidates
        bb = f.op(f"fsub {D} {s}, {p}")
        sbb = f.op(f"fsub {D} {s}, {bb}")
        err = f.op(f"fadd {D} {f.op(f'fsub {D} {p}, {sbb}')}, {f.op(f'fsub {D} {cd}, {bb}')}")
        zero = "zeroinitializer"
        lsb = f.op(f"and {V64} {sb}, {f.splat('1', 'i64')}")
        even = f.op(f"icmp eq {V64} {lsb}, zeroinitializer")
        mag = f.op(f"call {D} @llvm.fabs.v{f.W}f64({D} {s})")
        finite = f.op(f"fcmp one {D} {mag}, {f.splat('0x7FF0000000000000', 'double')}")
        inexact = f.op(f"fcmp une {D} {err}, {zero}")
        fix = f.op(f"and {MT} {f.op(f'and {MT} {inexact}, {even}')}, {finite}")
        fix = f.op(f"and {MT} {fix}, {cand}")
        up = f.op(f"icmp eq <{f.W} x i1> {f.op(f'fcmp ogt {D} {err}, {zero}')}, {f.op(f'fcmp ogt {D} {s}, {zero}')}")
        step = f.op(f"select {MT} {up}, {V64} {f.splat('1', 'i64')}, {V64} {f.splat('-1', 'i64')}")
        sb = f.op(f"add {V64} {sb}, {f.op(f'select {MT} {fix}, {V64} {step}, {V64} zeroinitializer')}")
        s = f.op(f"bitcast {V64} {sb} to {D}")
        vcc = self.lane_mask(Operand("s", VCC, 2 if f.L == 64 else 1))
        bigc = f.op(f"icmp sgt {VT} {self._exp_field(c)}, {self._vconst(127)}")
        k = f.op(f"select {MT} {bigc}, {VT} {self._vconst(64)}, {VT} {self._vconst(-64)}")
        k = f.op(f"select {MT} {vcc}, {VT} {k}, {VT} zeroinitializer")
        r = self._to_f32(f.op(f"fmul {D} {s}, {self._pow2(k, 64)}"))
        # a NaN result: the one the f64 operations give in their order (a, b, an invalid product, c, an invalid
        # sum), not whichever operand order the host instructions were given
        return self._cold(r, lambda: f.op(f"call {VT} @nanfma_fix({VT} {a}, {VT} {b}, {VT} {c}, {VT} {r})"))

    def _quiet(self, bits: str) -> str:
        return self.f.op(f"or {self.f.VT} {bits}, {self.f.splat(str(0x400000))}")

    def _isnan(self, fv: str) -> str:
        return self.f.op(f"fcmp uno {self.f.FT} {fv}, {fv}")

    def _cold(self, result_bits: str, fix) -> str:
        """result_bits, or fix() where some lane of it is a NaN (computed only then: a branch around it)."""
        f = self.f
        rf = f.op(f"bitcast {f.VT} {result_bits} to {f.FT}")
        anyn = f.op(f"bitcast {f.MT} {self._isnan(rf)} to {f.MI}")
        c = f.op(f"icmp ne {f.MI} {anyn}, 0")
        pre, cold, join = f.t("np"), f.t("nc"), f.t("nj")
        f.e(f"br label {pre}")
        f.label(pre)
        f.e(f"br i1 {c}, label {cold}, label {join}")
        f.label(cold)
        fixed = fix()
        last = f.t("nl")
        f.e(f"br label {last}")
        f.label(last)
        f.e(f"br label {join}")
        f.label(join)
        return f.op(f"phi {f.VT} [{result_bits}, {pre}], [{fixed}, {last}]")

    def _nan2(self, a, fa, b, fb, r) -> str:
        """A binary op's result with numpy's NaN: the first NaN operand quieted (an invalid op keeps x86's)."""
        f = self.f
        return self._cold(r, lambda: f.op(f"call {f.VT} @nan2_fix({f.VT} {a}, {f.VT} {b}, {f.VT} {r})"))

    def _nan2_fix(self, a, fa, b, fb, r) -> str:
        f = self.f
        t = f.op(f"select {f.MT} {self._isnan(fb)}, {f.VT} {self._quiet(b)}, {f.VT} {r}")
        return f.op(f"select {f.MT} {self._isnan(fa)}, {f.VT} {self._quiet(a)}, {f.VT} {t}")

    def _nan_fma(self, x, fx, y, fy, c, fc, r, rb) -> str:
        """fma's NaN as the interpreter's f64 (x*y)+c gives it: x, y NaN quieted in that order; an invalid
        product is the default NaN; then c quieted; an invalid sum the default NaN."""
        f = self.f
        return self._cold(rb, lambda: f.op(f"call {f.VT} @nanfma_fix({f.VT} {x}, {f.VT} {y}, {f.VT} {c}, {f.VT} {rb})"))

    def _nan_fma_fix(self, x, fx, y, fy, c, fc, r, rb) -> str:
        f = self.f
        VT, MT = f.VT, f.MT
        dflt = f.splat(str(0xFFC00000))
        t = f.op(f"select {MT} {self._isnan(fc)}, {VT} {self._quiet(c)}, {VT} {dflt}")
        zero = f"{f.FT} zeroinitializer"
        inf = f.splat("0x7FF0000000000000", "float")
        ax = f.op(f"call {f.FT} @llvm.fabs.{self._suffix(f.FT)}({f.FT} {fx})")
        ay = f.op(f"call {f.FT} @llvm.fabs.{self._suffix(f.FT)}({f.FT} {fy})")
        xi, yi = f.op(f"fcmp oeq {f.FT} {ax}, {inf}"), f.op(f"fcmp oeq {f.FT} {ay}, {inf}")
        xz, yz = f.op(f"fcmp oeq {zero}, {fx}"), f.op(f"fcmp oeq {zero}, {fy}")
        i1, i2 = f.op(f"and {MT} {xi}, {yz}"), f.op(f"and {MT} {xz}, {yi}")
        inv = f.op(f"or {MT} {i1}, {i2}")
        t = f.op(f"select {MT} {inv}, {VT} {dflt}, {VT} {t}")
        t = f.op(f"select {MT} {self._isnan(fy)}, {VT} {self._quiet(y)}, {VT} {t}")
        t = f.op(f"select {MT} {self._isnan(fx)}, {VT} {self._quiet(x)}, {VT} {t}")
        return f.op(f"select {MT} {self._isnan(r)}, {VT} {t}, {VT} {rb}")


def helpers() -> str:
    """Shared cold paths, called (not inlined) from every block: the NaN fix-ups of a result chunk holding a NaN,
    and the lane-by-lane loads and stores of chunks no vector access covers (a lane not ok uses `safe`)."""
    out = []
    for name, args in (("nan2_fix", "abr"), ("nanfma_fix", "xycr")):
        f = Fn(32)
        em = Emitter(f, None)
        fl = {a: f.op(f"bitcast {f.VT} %{a} to {f.FT}") for a in args}
        if name == "nan2_fix":
            res = em._nan2_fix("%a", fl["a"], "%b", fl["b"], "%r")
        else:
            res = em._nan_fma_fix("%x", fl["x"], "%y", fl["y"], "%c", fl["c"], fl["r"], "%r")
        params = ", ".join(f"{f.VT} %{a}" for a in args)
        out += [f"define internal {f.VT} @{name}({params}) noinline {{", "entry:", *f.lines, f"  ret {f.VT} {res}", "}"]
    W = lanes_per_op()
    lines = []
    vec = "poison"
    for j in range(W):
        lines += [f"  %b{j} = lshr i{W} %ok, {j}", f"  %o{j} = trunc i{W} %b{j} to i1", f"  %p{j} = extractelement <{W} x ptr> %p, i64 {j}",
                  f"  %q{j} = select i1 %o{j}, ptr %p{j}, ptr %safe", f"  %v{j} = load i32, ptr %q{j}, align 1",
                  f"  %g{j} = insertelement <{W} x i32> {vec}, i32 %v{j}, i64 {j}"]
        vec = f"%g{j}"
    out += [f"define internal <{W} x i32> @gather_lanes(<{W} x ptr> %p, i{W} %ok, ptr %safe) noinline {{", "entry:", *lines,
            f"  ret <{W} x i32> {vec}", "}"]
    lines = []
    for j in range(W):           # in lane order: later lanes win
        lines += [f"  %b{j} = lshr i{W} %ok, {j}", f"  %o{j} = trunc i{W} %b{j} to i1", f"  %p{j} = extractelement <{W} x ptr> %p, i64 {j}",
                  f"  %q{j} = select i1 %o{j}, ptr %p{j}, ptr %safe", f"  %v{j} = extractelement <{W} x i32> %v, i64 {j}",
                  f"  store i32 %v{j}, ptr %q{j}, align 1"]
    out += [f"define internal void @scatter_lanes(<{W} x i32> %v, <{W} x ptr> %p, i{W} %ok, ptr %safe) noinline {{", "entry:",
            *lines, "  ret void", "}"]
    return "\n".join(out) + "\n"
