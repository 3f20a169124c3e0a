"""Instructions CDNA4 (gfx950) adds to CDNA3 (gfx942), by opcode enum: the CDNA4 table rows that gfx942 does
not have, i.e. gfx942.ABSENT (the one list of that fact, each entry checked against llvm-mc-19 -mcpu=gfx942,
which knows gfx942 and predates gfx950), named as the CDNA4 tables spell them.

The rows include BITOP3, the scaled and stochastic-rounding FP8/FP6/FP4/F16/BF16 conversions,
PERMLANE16/32_SWAP, PRNG, MINIMUM3/MAXIMUM3, ASHR_PK, the doubled-K MFMA shapes, F8F6F4 MFMAs and new SMFMACs,
DS_READ_B*_TR_*, GLOBAL_LOAD_LDS_DWORDX3/X4, BUFFER_ATOMIC_PK_ADD_BF16, the BF16 dot/convert forms and the VOP3
encodings gfx942 lacks for a few VOP1/VOP2 operations (scripts/probe_gfx942_opcodes.py re-derives the list).
"""
from __future__ import annotations

from . import tables
from .gfx942 import ABSENT


def _name(row) -> str:
    return row[0] if isinstance(row, tuple) else row


_OPS = tables("cdna3").OPCODES
GFX950_ONLY: dict[str, frozenset[str]] = {enum: frozenset(_name(_OPS[enum][op]) for op in ops if op in _OPS[enum])
                                          for enum, ops in ABSENT.items()}
ALL: frozenset[str] = frozenset().union(*GFX950_ONLY.values())
# mnemonics gfx942 has in some other encoding (e.g. V_READFIRSTLANE_B32 as VOP1): refused only in the absent form
ON_GFX942: frozenset[str] = frozenset(_name(row) for enum, rows in _OPS.items() for op, row in rows.items()
                                      if op not in ABSENT.get(enum, ()))


def gfx950_only(name: str) -> bool:
    """True for a mnemonic (CDNA4 table spelling, e.g. "V_BITOP3_B16") gfx942 has in no encoding."""
    return name in ALL and name not in ON_GFX942
