"""Data-parallel primitives (DPP16 and DPP8): src0 of a VALU instruction read from another lane.

Semantics from the RDNA3 ISA guide ("DPP"): lanes form rows of 16 (DPP16) or groups of 8 (DPP8). A lane's
source is *invalid* when the control names a lane outside its row (row_shl/row_shr past the edge) or, with
fetch-inactive clear, a lane that EXEC disables. An invalid source reads 0 when BOUND_CTRL is set; otherwise
the lane is not written at all. ROW_MASK/BANK_MASK (DPP16) disable writes of whole rows / 4-lane banks.

The permutation is static per instruction: `plan(inst, lanes)` gives, per lane, the source lane, whether it is
in bounds and whether the lane may be written at all. The reader applies it; `write_mask` gives the extra lane
mask an instruction's writer ANDs with EXEC.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from ...hw.isa.decode import DPP8, DPP16, Inst, Operand

U32, U64 = np.uint32, np.uint64


def _row_source(ctrl: int, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """(source lane, in bounds) of every lane for a DPP16 control word."""
    lane = np.arange(lanes)
    row, i = lane & ~15, lane & 15
    valid = np.ones(lanes, bool)
    if ctrl <= 0xFF:                                     # quad_perm
        q = lane & 3
        src = (lane & ~3) + ((ctrl >> (2 * q)) & 3)
    elif 0x101 <= ctrl <= 0x10F:                         # row_shl: read lane i + n
        j = i + (ctrl & 15)
        valid, src = j < 16, row + np.minimum(j, 15)
    elif 0x111 <= ctrl <= 0x11F:                         # row_shr: read lane i - n
        j = i - (ctrl & 15)
        valid, src = j >= 0, row + np.maximum(j, 0)
    elif 0x121 <= ctrl <= 0x12F:                         # row_ror
        src = row + ((i - (ctrl & 15)) & 15)
    elif ctrl == 0x140:                                  # row_mirror
        src = row + 15 - i
    elif ctrl == 0x141:                                  # row_half_mirror
        src = row + (i & 8) + 7 - (i & 7)
    elif 0x150 <= ctrl <= 0x15F:                         # row_share: every lane reads lane n of its row
        src = row + (ctrl & 15)
    elif 0x160 <= ctrl <= 0x16F:                         # row_xmask: lane i reads lane i ^ n
        src = row + (i ^ (ctrl & 15))
    else:
        raise ValueError(f"DPP16 control {ctrl:#x} is not defined for gfx11")
    return src.astype(np.intp), valid


@lru_cache(maxsize=None)
def _plan16(ctrl: int, row_mask: int, bank_mask: int, lanes: int):
    src, valid = _row_source(ctrl, lanes)
    lane = np.arange(lanes)
    writable = ((row_mask >> (lane >> 4)) & 1).astype(bool) & ((bank_mask >> ((lane >> 2) & 3)) & 1).astype(bool)
    for a in (src, valid, writable):
        a.setflags(write=False)
    return src, valid, writable


@lru_cache(maxsize=None)
def _plan8(sel: tuple[int, ...], lanes: int):
    lane = np.arange(lanes)
    src = ((lane & ~7) + np.array(sel)[lane & 7]).astype(np.intp)
    valid = np.ones(lanes, bool)
    src.setflags(write=False)
    return src, valid, valid


def plan(inst: Inst, lanes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source lane, source in bounds, lane writable) arrays of `lanes` entries for the instruction's DPP."""
    d = inst.dpp
    if hasattr(d, "plan"):          # a family's own controls (gfx9 wave shifts and row broadcasts)
        return d.plan(lanes)
    if isinstance(d, DPP16):
        return _plan16(d.ctrl, d.row_mask, d.bank_mask, lanes)
    if isinstance(d, DPP8):
        return _plan8(tuple(d.sel), lanes)
    raise ValueError("instruction has no DPP")


def _check(inst: Inst) -> None:
    """A family's refusal of DPP controls the core does not model (UnsupportedInstruction when building)."""
    check = getattr(inst.dpp, "check", None)
    if check is not None:
        check()


def _bound_zero(inst: Inst) -> bool:
    """Invalid sources read 0 (DPP16 BOUND_CTRL; DPP8 always, since its lanes never leave the group)."""
    return isinstance(inst.dpp, DPP8) or bool(inst.dpp.bound_ctrl)


def _source_ok(w, sel, inst: Inst, src: np.ndarray, valid: np.ndarray) -> np.ndarray | None:
    """(k, lanes) validity of each lane's source, or None when every source is valid."""
    if inst.dpp.fi or w.all_on(sel):
        return None if valid.all() else valid[None, :]
    return valid[None, :] & w.em[sel][:, src]


def dpp_reader(op: Operand, inst: Inst, wide: bool = False) -> Callable:
    """Reader of src0 through the DPP permutation: (k, lanes) uint32 (uint64 for a register pair)."""
    r = op.reg
    zero = _bound_zero(inst)
    _check(inst)

    def rd(w, sel):
        src, valid, _ = plan(inst, w.lanes)
        x = w.v[r][sel][:, src]
        if wide:
            x = x.astype(U64) | w.v[r + 1][sel][:, src].astype(U64) << U64(32)
        if zero:
            ok = _source_ok(w, sel, inst, src, valid)
            if ok is not None:
                x = np.where(ok, x, x.dtype.type(0))
        return x
    return rd


def write_mask(inst: Inst) -> Callable | None:
    """Extra write mask of a DPP instruction: (w, sel) -> (k, lanes) bool or None (all lanes written)."""
    if inst.dpp is None:
        return None
    zero = _bound_zero(inst)
    _check(inst)

    def mask(w, sel):
        src, valid, writable = plan(inst, w.lanes)
        m = None if writable.all() else writable[None, :]
        if not zero:
            ok = _source_ok(w, sel, inst, src, valid)
            if ok is not None:
                m = ok if m is None else m & ok
        return m
    return mask
