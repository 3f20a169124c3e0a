"""Scalar ALU and program control: SOP1, SOP2, SOPK, SOPC and SOPP.

Semantics from the AMD RDNA3 ISA guide ("Scalar ALU Operations", "Scalar Program Flow Control"):
every scalar value is one entry per wave; SCC is written where the guide says it is.
"""
from __future__ import annotations

import numpy as np

from ...hw import isa
from ...hw.isa.decode import Inst
from .ops import (I32, I64, M32, U32, U64, Table, sread, sread64, swrite, swrite64, unsupported)
from .wave import BARRIER, DONE, EXEC

TABLE = Table(name="salu")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

HWREG = isa.tables().NAMES["HWREG"]
HW_MODE, HW_STATUS, HW_HW_ID1 = HWREG.get("HW_REG_MODE", 1), HWREG.get("HW_REG_STATUS", 2), HWREG.get("HW_REG_HW_ID1", 23)
S64 = np.uint64(63)
S32 = np.uint32(31)


def _ops32(inst: Inst):
    s = [sread(o) for o in inst.src]
    d = swrite(inst.dst[0]) if inst.dst else None
    return s, d


def _ops64(inst: Inst):
    s = [sread64(o) if o.n == 2 or o.bits == 64 else sread(o) for o in inst.src]
    d = swrite64(inst.dst[0]) if inst.dst else None
    return s, d


def _scc(w, sel, cond) -> None:
    w.scc[sel] = np.asarray(cond).astype(U32)


def _sx(x):
    return np.asarray(x).astype(U32).view(I32) if np.ndim(x) else np.asarray(x, U32).astype(I64).astype(I32)


def i32(x):
    """Reinterpret uint32 values as int32 (works for 0-d constants too)."""
    return np.asarray(x, U32).view(I32)


# ---------------------------------------------------------------- SOP2

def _binary(fn, scc=None, wide=False):
    """A two-source scalar op; scc(d, a, b) gives the SCC result or None to leave SCC alone."""
    def build(inst: Inst):
        (a, b), d = (_ops64 if wide else _ops32)(inst)

        def step(w, sel):
            x, y = a(w, sel), b(w, sel)
            r = fn(x, y)
            d(w, sel, r)
            if scc is not None:
                _scc(w, sel, scc(r, x, y))
        return step
    return build


nz = lambda r, a, b: r != 0  # noqa: E731

SOP2_32 = {
    "s_and_b32": (lambda a, b: a & b, nz), "s_or_b32": (lambda a, b: a | b, nz), "s_xor_b32": (lambda a, b: a ^ b, nz),
    "s_nand_b32": (lambda a, b: ~(a & b), nz), "s_nor_b32": (lambda a, b: ~(a | b), nz),
    "s_xnor_b32": (lambda a, b: ~(a ^ b), nz), "s_and_not1_b32": (lambda a, b: a & ~b, nz),
    "s_or_not1_b32": (lambda a, b: a | ~b, nz),
    "s_lshl_b32": (lambda a, b: a << (b & S32), nz), "s_lshr_b32": (lambda a, b: a >> (b & S32), nz),
    "s_ashr_i32": (lambda a, b: (i32(a) >> (b & S32).astype(I32)).view(U32), nz),
    "s_mul_i32": (lambda a, b: a * b, None),
    "s_mul_hi_u32": (lambda a, b: ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32), None),
    "s_mul_hi_i32": (lambda a, b: ((i32(a).astype(I64) * i32(b).astype(I64)) >> 32).astype(U32), None),
    "s_min_i32": (lambda a, b: np.minimum(i32(a), i32(b)).view(U32), lambda r, a, b: i32(a) < i32(b)),
    "s_min_u32": (lambda a, b: np.minimum(a, b), lambda r, a, b: a < b),
    "s_max_i32": (lambda a, b: np.maximum(i32(a), i32(b)).view(U32), lambda r, a, b: i32(a) > i32(b)),
    "s_max_u32": (lambda a, b: np.maximum(a, b), lambda r, a, b: a > b),
    "s_bfm_b32": (lambda a, b: ((U32(1) << (a & S32)) - U32(1)) << (b & S32), None),
    "s_bfe_u32": (lambda a, b: _bfe_u(a, b & S32, (b >> U32(16)) & U32(0x7F), 32), nz),
    "s_bfe_i32": (lambda a, b: _bfe_i(a, b & S32, (b >> U32(16)) & U32(0x7F)), nz),
    "s_absdiff_i32": (lambda a, b: np.abs(i32(a).astype(I64) - i32(b).astype(I64)).astype(U32), nz),
    "s_pack_ll_b32_b16": (lambda a, b: (a & U32(0xFFFF)) | (b << U32(16)), None),
    "s_pack_lh_b32_b16": (lambda a, b: (a & U32(0xFFFF)) | (b & U32(0xFFFF0000)), None),
    "s_pack_hh_b32_b16": (lambda a, b: (a >> U32(16)) | (b & U32(0xFFFF0000)), None),
    "s_pack_hl_b32_b16": (lambda a, b: (a >> U32(16)) | (b << U32(16)), None),
}
SOP2_64 = {
    "s_and_b64": (lambda a, b: a & b, nz), "s_or_b64": (lambda a, b: a | b, nz), "s_xor_b64": (lambda a, b: a ^ b, nz),
    "s_nand_b64": (lambda a, b: ~(a & b), nz), "s_nor_b64": (lambda a, b: ~(a | b), nz),
    "s_xnor_b64": (lambda a, b: ~(a ^ b), nz), "s_and_not1_b64": (lambda a, b: a & ~b, nz),
    "s_or_not1_b64": (lambda a, b: a | ~b, nz),
    "s_lshl_b64": (lambda a, b: a << (np.asarray(b).astype(U64) & S64), nz),
    "s_lshr_b64": (lambda a, b: a >> (np.asarray(b).astype(U64) & S64), nz),
    "s_ashr_i64": (lambda a, b: (a.view(I64) >> (np.asarray(b).astype(I64) & 63)).view(U64), nz),
    "s_bfm_b64": (lambda a, b: ((U64(1) << (np.asarray(a).astype(U64) & S64)) - U64(1)) << (np.asarray(b).astype(U64) & S64), None),
    "s_bfe_u64": (lambda a, b: _bfe_u(a, np.asarray(b).astype(U64) & S64, (np.asarray(b).astype(U64) >> U64(16)) & U64(0x7F), 64), nz),
    "s_bfe_i64": (lambda a, b: _bfe_i64(a, np.asarray(b).astype(U64) & S64, (np.asarray(b).astype(U64) >> U64(16)) & U64(0x7F)), nz),
}


def _bfe_u(a, off, width, bits):
    t = type(a.flat[0]) if np.ndim(a) else (U64 if bits == 64 else U32)
    t = U64 if bits == 64 else U32
    a, off, width = np.asarray(a, t), np.asarray(off, t), np.asarray(width, t)
    mask = np.where(width >= bits, t(~t(0)), (t(1) << np.minimum(width, t(bits - 1))) - t(1))
    return (a >> off) & mask


def _bfe_i(a, off, width):
    v = _bfe_u(a, off, width, 32).astype(I64)
    width = np.asarray(width, I64)
    sign = np.where(width > 0, (v >> np.maximum(width - 1, 0)) & 1, 0)
    return np.where((width > 0) & (width < 32) & (sign == 1), v - (np.int64(1) << np.minimum(width, 62)), v).astype(U32)


def _bfe_i64(a, off, width):
    v = _bfe_u(a, off, width, 64)
    width = np.asarray(width, U64)
    w1 = np.maximum(width, U64(1)) - U64(1)
    neg = (width > 0) & (width < 64) & (((v >> w1) & U64(1)) == 1)
    return np.where(neg, v | ~((U64(1) << np.minimum(width, U64(63))) - U64(1)), v)


for k, (f, c) in SOP2_32.items():
    handler(k)(_binary(f, c))
for k, (f, c) in SOP2_64.items():
    handler(k)(_binary(f, c, wide=True))


@handler("s_add_u32", "s_addc_u32", "s_sub_u32", "s_subb_u32", "s_add_i32", "s_sub_i32")
def _addsub(inst: Inst):
    (a, b), d = _ops32(inst)
    sub, carry_in, signed = "sub" in inst.key, inst.key in ("s_addc_u32", "s_subb_u32"), inst.key.endswith("i32")

    def step(w, sel):
        x, y = a(w, sel).astype(I64), b(w, sel).astype(I64)
        c = w.scc[sel].astype(I64) if carry_in else 0
        r = x - y - c if sub else x + y + c
        d(w, sel, (r & M32).astype(U32))
        if signed:
            sx, sy, sr = (x >= 1 << 31), (y >= 1 << 31), ((r & M32) >= 1 << 31)
            ovf = (sx == (sy if not sub else ~sy)) & (sr != sx)
            _scc(w, sel, ovf)
        else:
            _scc(w, sel, (r < 0) if sub else (r > M32))
    return step


@handler("s_lshl1_add_u32", "s_lshl2_add_u32", "s_lshl3_add_u32", "s_lshl4_add_u32")
def _lshl_add(inst: Inst):
    (a, b), d = _ops32(inst)
    n = int(inst.key[6])

    def step(w, sel):
        r = (a(w, sel).astype(I64) << n) + b(w, sel).astype(I64)
        d(w, sel, (r & M32).astype(U32))
        _scc(w, sel, r > M32)
    return step


@handler("s_cselect_b32", "s_cselect_b64")
def _cselect(inst: Inst):
    (a, b), d = (_ops64 if inst.key.endswith("64") else _ops32)(inst)
    return lambda w, sel: d(w, sel, np.where(w.scc[sel] != 0, a(w, sel), b(w, sel)))


# ---------------------------------------------------------------- SOP1

def _unary(fn, scc=None, wide=False, wide_dst=None):
    def build(inst: Inst):
        s = (sread64 if wide else sread)(inst.src[0])
        d = (swrite64 if (wide if wide_dst is None else wide_dst) else swrite)(inst.dst[0])

        def step(w, sel):
            x = s(w, sel)
            r = fn(x)
            d(w, sel, np.broadcast_to(r, np.shape(w.scc[sel])) if np.ndim(r) == 0 else r)
            if scc is not None:
                _scc(w, sel, r != 0)
        return step
    return build


def _popcount(x, bits):
    x = np.asarray(x).astype(U64)
    c = np.zeros(np.shape(x), U32)
    for i in range(bits):
        c += ((x >> U64(i)) & U64(1)).astype(U32)
    return c


def _ctz(x, bits):
    x = np.asarray(x).astype(U64)
    lsb = x & (~x + U64(1))
    r = np.where(x == 0, M32, np.log2(np.maximum(lsb, U64(1)).astype(np.float64)).astype(I64))
    return np.asarray(r).astype(I64).astype(U32)


def _clz(x, bits):
    x = np.asarray(x).astype(U64)
    r = np.full(np.shape(x), M32, I64)
    for i in range(bits):
        r = np.where(((x >> U64(bits - 1 - i)) & U64(1)) == 1, np.minimum(np.where(r == M32, i, r), i), r)
    return r.astype(U32)


def _brev(x, bits):
    t = U64 if bits == 64 else U32
    x = np.asarray(x, t)
    r = np.zeros(np.shape(x), t)
    for i in range(bits):
        r |= ((x >> t(i)) & t(1)) << t(bits - 1 - i)
    return r


SOP1 = {
    "s_mov_b32": (lambda x: x, None, False), "s_mov_b64": (lambda x: x, None, True),
    "s_not_b32": (lambda x: ~x, nz, False), "s_not_b64": (lambda x: ~x, nz, True),
    "s_brev_b32": (lambda x: _brev(x, 32), None, False), "s_brev_b64": (lambda x: _brev(x, 64), None, True),
    "s_sext_i32_i8": (lambda x: (x.astype(U32) & U32(0xFF)).astype(np.uint8).view(np.int8).astype(I32).view(U32) if np.ndim(x) else np.asarray(np.int8(np.uint8(int(x) & 0xFF))).astype(I32).view(U32), None, False),
    "s_sext_i32_i16": (lambda x: np.asarray(x, U32).astype(np.uint16).view(np.int16).astype(I32).view(U32), None, False),
    "s_abs_i32": (lambda x: np.abs(i32(x).astype(I64)).astype(U32), nz, False),
}
for k, (f, c, wide) in SOP1.items():
    handler(k)(_unary(f, c, wide))
handler("s_bcnt1_i32_b32")(lambda inst: _unary(lambda x: _popcount(x, 32), nz)(inst))
handler("s_bcnt0_i32_b32")(lambda inst: _unary(lambda x: U32(32) - _popcount(x, 32), nz)(inst))
handler("s_bcnt1_i32_b64")(lambda inst: _unary(lambda x: _popcount(x, 64), nz, True, False)(inst))
handler("s_bcnt0_i32_b64")(lambda inst: _unary(lambda x: U32(64) - _popcount(x, 64), nz, True, False)(inst))
handler("s_ctz_i32_b32")(lambda inst: _unary(lambda x: _ctz(x, 32))(inst))
handler("s_ctz_i32_b64")(lambda inst: _unary(lambda x: _ctz(x, 64), None, True, False)(inst))
handler("s_clz_i32_u32")(lambda inst: _unary(lambda x: _clz(x, 32))(inst))
handler("s_clz_i32_u64")(lambda inst: _unary(lambda x: _clz(x, 64), None, True, False)(inst))


@handler("s_cls_i32")
def _cls(inst: Inst):
    def f(x):
        x = np.asarray(x, U32)
        y = np.where(x >> U32(31) == 1, ~x, x)
        r = _clz(y, 32).astype(I64)
        return np.where(r == M32, M32, r).astype(U32)
    return _unary(f)(inst)


@handler("s_cmov_b32", "s_cmov_b64")
def _cmov(inst: Inst):
    wide = inst.key.endswith("64")
    s = (sread64 if wide else sread)(inst.src[0])
    cur = (sread64 if wide else sread)(inst.dst[0])
    d = (swrite64 if wide else swrite)(inst.dst[0])
    return lambda w, sel: d(w, sel, np.where(w.scc[sel] != 0, s(w, sel), cur(w, sel)))


@handler("s_bitset0_b32", "s_bitset1_b32")
def _bitset(inst: Inst):
    s, cur, d = sread(inst.src[0]), sread(inst.dst[0]), swrite(inst.dst[0])
    one = inst.key.startswith("s_bitset1")
    return lambda w, sel: d(w, sel, (cur(w, sel) | (U32(1) << (s(w, sel) & S32))) if one
                            else (cur(w, sel) & ~(U32(1) << (s(w, sel) & S32))))


SAVEEXEC = {
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e, "nand": lambda s, e: ~(s & e),
    "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e), "and_not0": lambda s, e: ~s & e,
    "or_not0": lambda s, e: ~s | e, "and_not1": lambda s, e: s & ~e, "or_not1": lambda s, e: s | ~e,
}


def _saveexec(op: str, wide: bool, wrexec: bool):
    def build(inst: Inst):
        s = (sread64 if wide else sread)(inst.src[0])
        d = (swrite64 if wide else swrite)(inst.dst[0])
        fn = SAVEEXEC[op]
        t = U64 if wide else U32

        def step(w, sel):
            e = w.exec_bits(sel).astype(t)
            new = fn(s(w, sel), e).astype(t)
            if not wrexec:
                d(w, sel, e)
            w.s[EXEC][sel] = (new & t(M32)).astype(U32)
            if wide:
                w.s[EXEC + 1][sel] = (new >> t(32)).astype(U32)
            w.refresh_exec(sel)
            if wrexec:
                d(w, sel, new)
            _scc(w, sel, new != 0)
        return step
    return build


for op in SAVEEXEC:
    for wide in (False, True):
        handler(f"s_{op}_saveexec_b{64 if wide else 32}")(_saveexec(op, wide, False))
for op in ("and_not0", "and_not1"):
    for wide in (False, True):
        handler(f"s_{op}_wrexec_b{64 if wide else 32}")(_saveexec(op, wide, True))


@handler("s_getpc_b64")
def _getpc(inst: Inst):
    d = swrite64(inst.dst[0])
    return lambda w, sel: d(w, sel, (w.pc[sel] + inst.size).astype(U64))


@handler("s_setpc_b64", control=True)
def _setpc(inst: Inst):
    s = sread64(inst.src[0])

    def step(w, sel):
        w.pc[sel] = np.broadcast_to(s(w, sel), np.shape(w.pc[sel])).astype(I64)
    return step


@handler("s_swappc_b64", control=True)
def _swappc(inst: Inst):
    s, d = sread64(inst.src[0]), swrite64(inst.dst[0])

    def step(w, sel):
        target = np.broadcast_to(s(w, sel), np.shape(w.pc[sel])).astype(I64)
        d(w, sel, (w.pc[sel] + inst.size).astype(U64))
        w.pc[sel] = target
    return step


@handler("s_call_b64", control=True)
def _call(inst: Inst):
    d = swrite64(inst.dst[0])

    def step(w, sel):
        d(w, sel, (w.pc[sel] + inst.size).astype(U64))
        w.pc[sel] = inst.target
    return step


# ---------------------------------------------------------------- SOPC

CMP = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}


def _cmp(op: str, signed: bool, wide: bool):
    def build(inst: Inst):
        a, b = ((sread64 if wide else sread)(o) for o in inst.src)
        f = CMP[op]
        if signed:
            return lambda w, sel: _scc(w, sel, f(i32(a(w, sel)), i32(b(w, sel))))
        return lambda w, sel: _scc(w, sel, f(a(w, sel), b(w, sel)))
    return build


for op in CMP:
    handler(f"s_cmp_{op}_i32")(_cmp(op, True, False))
    handler(f"s_cmp_{op}_u32")(_cmp(op, False, False))
for op in ("eq", "lg"):
    handler(f"s_cmp_{op}_u64")(_cmp(op, False, True))


@handler("s_bitcmp0_b32", "s_bitcmp1_b32", "s_bitcmp0_b64", "s_bitcmp1_b64")
def _bitcmp(inst: Inst):
    wide = inst.key.endswith("64")
    a, b = (sread64 if wide else sread)(inst.src[0]), sread(inst.src[1])
    want, t = int(inst.key[8]), (U64 if wide else U32)
    m = t(63 if wide else 31)
    return lambda w, sel: _scc(w, sel, ((a(w, sel) >> (np.asarray(b(w, sel)).astype(t) & m)) & t(1)) == want)


# ---------------------------------------------------------------- SOPK

def _simm(inst: Inst, signed: bool = True) -> int:
    return inst.simm16 & M32 if signed else inst.simm16 & 0xFFFF


@handler("s_movk_i32")
def _movk(inst: Inst):
    d, v = swrite(inst.dst[0]), U32(_simm(inst))
    return lambda w, sel: d(w, sel, np.full(np.shape(w.scc[sel]), v, U32))


@handler("s_cmovk_i32")
def _cmovk(inst: Inst):
    cur, d, v = sread(inst.dst[0]), swrite(inst.dst[0]), U32(_simm(inst))
    return lambda w, sel: d(w, sel, np.where(w.scc[sel] != 0, v, cur(w, sel)))


@handler("s_addk_i32")
def _addk(inst: Inst):
    cur, d, k = sread(inst.dst[0]), swrite(inst.dst[0]), inst.simm16

    def step(w, sel):
        x = i32(cur(w, sel)).astype(I64)
        r = x + k
        d(w, sel, (r & M32).astype(U32))
        _scc(w, sel, (r > 0x7FFFFFFF) | (r < -0x80000000))
    return step


@handler("s_mulk_i32")
def _mulk(inst: Inst):
    cur, d, k = sread(inst.dst[0]), swrite(inst.dst[0]), U32(_simm(inst))
    return lambda w, sel: d(w, sel, cur(w, sel) * k)


def _cmpk(op: str, signed: bool):
    def build(inst: Inst):
        a = sread(inst.dst[0] if inst.dst else inst.src[0])
        f = CMP[op]
        if signed:
            k = np.int32(inst.simm16)
            return lambda w, sel: _scc(w, sel, f(i32(a(w, sel)), k))
        k = U32(inst.simm16 & 0xFFFF)
        return lambda w, sel: _scc(w, sel, f(a(w, sel), k))
    return build


for op in CMP:
    handler(f"s_cmpk_{op}_i32")(_cmpk(op, True))
    handler(f"s_cmpk_{op}_u32")(_cmpk(op, False))


def _hwreg(inst: Inst) -> tuple[int, int, int]:
    v = inst.simm16 & 0xFFFF
    return v & 0x3F, (v >> 6) & 0x1F, ((v >> 11) & 0x1F) + 1


@handler("s_getreg_b32")
def _getreg(inst: Inst):
    rid, off, size = _hwreg(inst)
    d = swrite(inst.dst[0])
    mask = (1 << size) - 1

    def step(w, sel):
        if rid == HW_MODE:
            v = w.mode[sel]
        elif rid == HW_HW_ID1:
            v = w.wg[sel].astype(U32) & U32(0x3FF)
        else:
            v = np.zeros(np.shape(w.scc[sel]), U32)
        d(w, sel, (v >> U32(off)) & U32(mask))
    return step


@handler("s_setreg_b32", "s_setreg_imm32_b32")
def _setreg(inst: Inst):
    rid, off, size = _hwreg(inst)
    s = sread(inst.src[0])
    mask = U32(((1 << size) - 1) << off & 0xFFFFFFFF)        # a field past bit 31 is cut at the word

    def step(w, sel):
        if rid == HW_MODE:
            _set_mode(w, sel, mask, (s(w, sel) << U32(off)) & mask)
    return step


# ---------------------------------------------------------------- SOPP

NOPS = ("s_nop", "s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt",
        "s_waitcnt_depctr", "s_delay_alu", "s_clause", "s_sleep", "s_setprio", "s_icache_inv", "s_inst_prefetch",
        "s_code_end", "s_ttracedata", "s_ttracedata_imm", "s_version", "s_wait_idle", "s_sethalt", "s_set_inst_prefetch_distance")
for k in NOPS:
    handler(k)(lambda inst: (lambda w, sel: None))


@handler("s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done", control=True)
def _endpgm(inst: Inst):
    def step(w, sel):
        w.status[sel] = DONE
        w.barrier_pending = True          # waves that end no longer hold back their workgroup's barrier
    return step


@handler("s_barrier")
def _barrier(inst: Inst):
    def step(w, sel):
        w.status[sel] = BARRIER
        w.barrier_pending = True
    return step


@handler("s_sendmsg", "s_sendmsghalt")
def _sendmsg(inst: Inst):
    return lambda w, sel: None         # DEALLOC_VGPRS and friends: no effect on results in this model


@handler("s_denorm_mode")
def _denorm_mode(inst: Inst):
    v = U32((inst.simm16 & 0xF) << 4)
    return lambda w, sel: _set_mode(w, sel, U32(0xF0), v)


@handler("s_round_mode")
def _round_mode(inst: Inst):
    v = U32(inst.simm16 & 0xF)
    return lambda w, sel: _set_mode(w, sel, U32(0xF), v)


def _set_mode(w, sel, mask, v) -> None:
    """MODE's bits `mask` set to v in the waves sel."""
    w.mode[sel] = (w.mode[sel] & ~mask) | v
    w.mode_ok = None


@handler("s_trap")
def _trap(inst: Inst):
    from ...errors import GPUException

    def step(w, sel):
        raise GPUException(f"s_trap {inst.simm16 & 0xFF} at pc {inst.pc:#x} (no trap handler installed)", pc=inst.pc)
    return step


def _branch(cond):
    def build(inst: Inst):
        tgt, nxt = inst.target, inst.pc + inst.size
        if cond is None:
            return lambda w, sel: w.pc.__setitem__(sel, tgt)

        def step(w, sel):
            w.pc[sel] = np.where(cond(w, sel), tgt, nxt)
        return step
    return build


def _vcc_bits(w, sel):
    v = w.s[106][sel]
    return v if w.lanes == 32 else v | w.s[107][sel]


handler("s_branch", control=True)(_branch(None))
handler("s_cbranch_scc0", control=True)(_branch(lambda w, sel: w.scc[sel] == 0))
handler("s_cbranch_scc1", control=True)(_branch(lambda w, sel: w.scc[sel] != 0))
handler("s_cbranch_vccz", control=True)(_branch(lambda w, sel: _vcc_bits(w, sel) == 0))
handler("s_cbranch_vccnz", control=True)(_branch(lambda w, sel: _vcc_bits(w, sel) != 0))
handler("s_cbranch_execz", control=True)(_branch(lambda w, sel: ~w.exec_any(sel)))
handler("s_cbranch_execnz", control=True)(_branch(lambda w, sel: w.exec_any(sel)))

__all__ = ["i32", "unsupported"]
