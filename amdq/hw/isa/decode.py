"""The RDNA instruction decoder: code bytes + PC -> Inst, once per PC, for one family's tables (a `Decoder`);
the module-level functions are gfx11's (RDNA3). RDNA4 reuses it with its own tables (decode_rdna4.py).

Operands come out resolved: register indices as ints, inline constants and literals as their bit patterns at
the operand's width, implicit operands (VCC of v_cndmask/v_add_co_ci/VOPC, EXEC of v_cmpx) made explicit.
`Inst.key` is the mnemonic without encoding suffix (v_add_f32 for VOP2, VOP3 and DPP alike) so an execution
engine can dispatch on it. Bit layouts and opcode tables come from amdq.hw.isa (generated from AMD's
machine-readable ISA).
"""
from __future__ import annotations

import struct

from amdq.errors import IllegalInstruction, UnsupportedInstruction
from amdq.hw import isa

ARCH = "rdna3"
ENC = isa.encodings(ARCH)
OPS = isa.tables(ARCH).OPCODES

# scalar operand codes (SSRC/SRC space)
VCC_LO, VCC_HI, NULL, M0, EXEC_LO, EXEC_HI = 106, 107, 124, 125, 126, 127
DPP8_SRC, DPP8FI_SRC, DPP16_SRC, LITERAL = 233, 234, 250, 255
SPECIAL = {235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit",
           239: "src_pops_exiting_wave_id", 251: "src_vccz", 252: "src_execz", 253: "src_scc", 254: "src_lds_direct"}
# inline float constants: code -> (f16, f32, f64) bit patterns
FLOAT_CONST = {
    240: (0x3800, 0x3F000000, 0x3FE0000000000000), 241: (0xB800, 0xBF000000, 0xBFE0000000000000),
    242: (0x3C00, 0x3F800000, 0x3FF0000000000000), 243: (0xBC00, 0xBF800000, 0xBFF0000000000000),
    244: (0x4000, 0x40000000, 0x4000000000000000), 245: (0xC000, 0xC0000000, 0xC000000000000000),
    246: (0x4400, 0x40800000, 0x4010000000000000), 247: (0xC400, 0xC0800000, 0xC010000000000000),
    248: (0x3118, 0x3E22F983, 0x3FC45F306DC9C882),
}
VOPC_IMPLICIT = ("V_CNDMASK_B32", "V_ADD_CO_CI_U32", "V_SUB_CO_CI_U32", "V_SUBREV_CO_CI_U32")


class Operand:
    """One operand. kind: 's' SGPR space (incl. vcc/exec/m0/null/ttmp), 'v' VGPR, 'c' constant, 'x' special source.

    reg: register index (SGPR 0..127, VGPR 0..255) or special code; n: dwords; value: constant bit pattern
    (for 'c'); code: the 9-bit source code as encoded (VGPRs 256+); neg/abs: VOP3 input modifiers;
    literal: the constant came from a literal dword; bits: operand width in bits; fmt: the operand's data format
    from the ISA tables (e.g. 'NUM_F32', 'NUM_I16', 'NUM_PK2_F16', 'ANY').
    """

    __slots__ = ("kind", "reg", "n", "value", "code", "neg", "abs", "literal", "bits", "fmt")

    def __init__(self, kind: str, reg: int, n: int = 1, value: int | None = None, code: int | None = None,
                 bits: int = 32, literal: bool = False):
        self.kind, self.reg, self.n, self.value, self.bits, self.literal = kind, reg, n, value, bits, literal
        self.code = code if code is not None else (reg + 256 if kind == "v" else reg)
        self.neg = self.abs = False
        self.fmt = ""

    def __repr__(self) -> str:
        if self.kind == "c":
            return f"#{self.value:#x}"
        return f"{self.kind}{self.reg}" + (f"x{self.n}" if self.n > 1 else "")

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Operand) and (self.kind, self.reg, self.n, self.value, self.neg, self.abs) == \
            (o.kind, o.reg, o.n, o.value, o.neg, o.abs)

    __hash__ = None


class DPP16:
    """DPP16 controls: ctrl (quad_perm 0x00-0xff, row_shl 0x101.., row_shr 0x111.., row_ror 0x121.., mirrors
    0x140/0x141, row_share 0x15x, row_xmask 0x16x), row/bank masks, bound_ctrl, fetch-inactive."""

    __slots__ = ("ctrl", "row_mask", "bank_mask", "bound_ctrl", "fi")

    def __init__(self, ctrl: int, row_mask: int, bank_mask: int, bound_ctrl: int, fi: int):
        self.ctrl, self.row_mask, self.bank_mask, self.bound_ctrl, self.fi = ctrl, row_mask, bank_mask, bound_ctrl, fi

    def __repr__(self) -> str:
        return f"DPP16(ctrl={self.ctrl:#x}, row_mask={self.row_mask:#x}, bank_mask={self.bank_mask:#x}, bc={self.bound_ctrl}, fi={self.fi})"


class DPP8:
    """DPP8 controls: sel[i] is the lane (within each group of 8) lane i reads; fi = fetch inactive."""

    __slots__ = ("sel", "fi")

    def __init__(self, sel: tuple[int, ...], fi: int):
        self.sel, self.fi = sel, fi

    def __repr__(self) -> str:
        return f"DPP8({list(self.sel)}, fi={self.fi})"


class Half:
    """One half (X or Y) of a VOPD dual instruction: a VOP2-style operation."""

    __slots__ = ("name", "key", "op", "dst", "src")

    def __init__(self, name: str, op: int, dst: Operand, src: tuple[Operand, ...]):
        self.name, self.op, self.dst, self.src = name, op, dst, src
        self.key = "v_" + name.lower()[len("v_dual_"):]

    def __repr__(self) -> str:
        return f"{self.name.lower()} {self.dst}, {', '.join(map(repr, self.src))}"


class Inst:
    """A decoded instruction at one PC.

    enc: encoding family ('SOP1' 'SOP2' 'SOPK' 'SOPC' 'SOPP' 'SMEM' 'VOP1' 'VOP2' 'VOPC' 'VOP3' 'VOP3SD' 'VOP3P'
    'VOPD' 'DS' 'FLAT' 'GLOBAL' 'SCRATCH' 'MUBUF'); op: opcode number in the family's table; name: table
    mnemonic (e.g. 'V_ADD_F32_E32'); key: handler key (lower-case mnemonic without _e32/_e64); e64: a VOP1/VOP2/
    VOPC operation promoted to VOP3; size: bytes; dst/src: operands (see Operand); literal: the literal dword
    or None. Modifiers: clamp, omod, opsel, opsel_hi, neg_hi (VOP3P), dpp (DPP16/DPP8/None). Scalar: simm16
    (sign-extended), target (branch destination PC). Memory: offset, offset0/offset1 (DS), glc, slc, dlc, gds,
    sve, offen, idxen, and the named address operands addr, saddr (None = off), sbase, soffset, srsrc, data;
    image operations: vaddr (the address VGPR groups, one Operand per address slot), ssamp (sampler).
    VOPD: x, y (Half). family: the ISA family ('rdna3', 'rdna4'); RDNA4 memory keeps scope/th in fields.
    """

    __slots__ = ("pc", "size", "raw", "enc", "op", "name", "key", "e64", "dst", "src", "literal", "clamp", "omod",
                 "opsel", "opsel_hi", "neg_hi", "dpp", "simm16", "target", "offset", "offset0", "offset1", "glc",
                 "slc", "dlc", "gds", "sve", "offen", "idxen", "addr", "saddr", "sbase", "soffset", "srsrc", "data",
                 "vaddr", "ssamp", "x", "y", "fields", "mask_bits", "dead_sdst", "family")

    def __init__(self, pc: int, enc: str, op: int, name: str):
        self.pc, self.enc, self.op, self.name = pc, enc, op, name
        self.key = _key(name)
        self.size, self.raw, self.e64 = 4, b"", False
        self.dst: tuple[Operand, ...] = ()
        self.src: tuple[Operand, ...] = ()
        self.literal = self.dpp = self.simm16 = self.target = None
        self.clamp = self.omod = self.opsel = self.neg_hi = 0
        self.opsel_hi = 0
        self.offset = self.offset0 = self.offset1 = self.glc = self.slc = self.dlc = self.gds = self.sve = 0
        self.offen = self.idxen = 0
        self.addr = self.saddr = self.sbase = self.soffset = self.srsrc = self.data = self.ssamp = None
        self.vaddr: tuple[Operand, ...] = ()
        self.x = self.y = None
        self.fields: dict[str, int] = {}
        self.mask_bits = 32
        self.dead_sdst = False      # set by mask_dead(): the lane mask this writes to SGPRs is never read
        self.family = ARCH          # the ISA family whose decoder made it

    @property
    def mnemonic(self) -> str:
        return self.name.lower()

    def __repr__(self) -> str:
        return f"<{self.pc:#x} {self.enc} {self.key} dst={list(self.dst)} src={list(self.src)}>"


def _key(name: str) -> str:
    n = name.lower()
    for suf in ("_e32", "_e64"):
        if n.endswith(suf):
            return n[:-4]
    return n


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


def _nregs(bits: int) -> int:
    return max(1, (bits + 31) // 32)


class _Ctx:
    """Per-instruction decode state: the instruction bits and its literal."""

    __slots__ = ("bits", "lit_pos", "lit_used", "wave64", "code", "off", "pc", "fam")

    def __init__(self, code: bytes, off: int, pc: int, wave64: bool, fam: "Decoder"):
        self.fam = fam
        chunk = code[off:off + 12]
        self.bits = int.from_bytes(chunk + b"\0" * (12 - len(chunk)), "little")
        self.code, self.off, self.pc, self.wave64 = code, off, pc, wave64
        self.lit_pos = 32
        self.lit_used = False

    def literal(self) -> int:
        self.lit_used = True
        if self.off + self.lit_pos // 8 + 4 > len(self.code):
            raise _fail(self, "literal constant past the end of the code")
        return (self.bits >> self.lit_pos) & 0xFFFFFFFF


def _fail(ctx: _Ctx, why: str, cls=IllegalInstruction) -> IllegalInstruction | UnsupportedInstruction:
    """Words that are no instruction of this ISA (IllegalInstruction), or a known encoding the decoder does
    not model (UnsupportedInstruction)."""
    words = tuple((ctx.bits >> (32 * i)) & 0xFFFFFFFF for i in range(2))
    text = " ".join(f"{w:08X}" for w in words)
    return cls(f"{why} at pc {ctx.pc:#x} (words {text})", address=ctx.pc, pc=ctx.pc, words=words)


def _float_const(code: int, fmt: str, bits: int) -> int:
    """An inline float constant's bit pattern for its operand's format: a BF16 operand reads the bf16 value (the
    f32 pattern's high half; 1/(2pi) truncated, 0x3E22: LLVM 19 encodes literal 0x3F80 there as inline 1.0 and
    keeps 0x3C00 a literal), other 16-bit ones the f16 value, 64-bit ones the f64 value."""
    f16, f32, f64 = FLOAT_CONST[code]
    if "BF16" in fmt:
        return f32 >> 16
    if "F16" in fmt or bits == 16:
        return f16
    return f64 if bits == 64 else f32


def _src(ctx: _Ctx, code: int, opinfo: tuple | None, mask_bits: int = 32, salu: bool = False) -> Operand:
    """A 9-bit (VALU) or 8-bit (SALU) source operand, resolved against its format."""
    fmt, bits, typ = opinfo if opinfo else ("NUM_B32", 32, "SRC")
    if fmt == "NUM_M64":
        bits = mask_bits
    op = _src_op(ctx, code, fmt, bits, salu)
    op.fmt = fmt
    return op


def _src_op(ctx: _Ctx, code: int, fmt: str, bits: int, salu: bool) -> Operand:
    n = _nregs(bits)
    if code >= 256:
        return Operand("v", code - 256, n, bits=bits)
    if code < 128:
        return _sreg(code, bits)
    if code <= 208:
        v = code - 128 if code <= 192 else 192 - code
        return Operand("c", code, n, v & ((1 << max(bits, 32)) - 1), bits=bits)
    if code in FLOAT_CONST:
        return Operand("c", code, n, _float_const(code, fmt, bits), bits=bits)
    if code == LITERAL:
        lit = ctx.literal()
        if bits == 64 and "F64" in fmt:
            v = lit << 32
        elif bits == 64:
            v = lit | (0xFFFFFFFF00000000 if lit >> 31 and fmt.startswith("NUM_I") else 0)
        else:
            v = lit & 0xFFFF if bits == 16 and not salu else lit    # SALU 16-bit operands keep the dword
        return Operand("c", code, n, v, bits=bits, literal=True)
    if code in SPECIAL:
        return Operand("x", code, 1, bits=bits)
    raise _fail(ctx, f"invalid source operand code {code}")


def _sreg(code: int, bits: int) -> Operand:
    """An SGPR-space register (tuple); 64-bit tuples are even-aligned and wider ones 4-aligned, as hardware reads them."""
    n = _nregs(bits)
    if n > 1:
        code &= ~1 if n == 2 else ~3
    return Operand("s", code, n, bits=bits)


def _vreg(idx: int, bits: int) -> Operand:
    return Operand("v", idx, _nregs(bits), bits=bits)


def _flat_vaddr(enc: str, code: int, has_saddr: bool, sve: int, vreg=_vreg) -> Operand | None:
    """The VGPR address of a FLAT / GLOBAL / SCRATCH operation (RDNA3, RDNA4 and gfx9 alike): a 64-bit address,
    a 32-bit offset beside an SADDR base (GLOBAL), or for SCRATCH a 32-bit offset only when SVE says a VGPR
    takes part. `vreg` builds the operand in the family's register space."""
    if enc == "GLOBAL":
        return vreg(code, 32 if has_saddr else 64)
    if enc == "SCRATCH":
        return vreg(code, 32) if sve else None
    return vreg(code, 64)


def _lookup(ctx: _Ctx, enum: str, num: int, enc: str) -> tuple[str, dict]:
    row = ctx.fam.ops.get(enum, {}).get(num)
    if row is None:
        raise _fail(ctx, f"undefined {enc} opcode {num}")
    return row[0], {f: (fmt, bits, typ) for f, fmt, bits, typ in row[1]}


def _get(ctx: _Ctx, lo: int, hi: int) -> int:
    return (ctx.bits >> lo) & ((1 << (hi - lo + 1)) - 1)


def _fields(ctx: _Ctx, enc: str) -> dict[str, int]:
    return ctx.fam.enc[enc].unpack(ctx.bits)


# ---------------------------------------------------------------- scalar

def _sop(ctx: _Ctx, enc: str) -> Inst:
    """SOP1/SOP2/SOPK/SOPC/SOPP of any family: its Inst class and source/SGPR operand decoding come from the
    family's Decoder (ctx.fam)."""
    fam = ctx.fam
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc + "Op", f["op"], enc)
    inst = fam.inst(ctx.pc, enc, f["op"], name)
    inst.fields = f
    srcs = []
    for fld in ("ssrc0", "ssrc1"):
        if fld in opr and opr[fld][2] == "SENDMSG_RTN":      # a message id, not an operand code
            srcs.append(Operand("c", f[fld], 1, f[fld]))
        elif fld in opr:
            srcs.append(fam.src(ctx, f[fld], opr[fld], salu=True))
    if name in ("S_FMAAK_F32", "S_FMAMK_F32"):
        srcs.append(Operand("c", LITERAL, 1, ctx.literal(), literal=True))
    if name == "S_SETREG_B32":                           # its "sdst" field names the SGPR it reads
        srcs.append(fam.src(ctx, f["sdst"], opr["sdst"], salu=True))
    elif "sdst" in opr:
        inst.dst = (fam.sreg(f["sdst"], opr["sdst"][1]),)
    if enc in ("SOPK", "SOPP"):
        inst.simm16 = _sext(f["simm16"], 16)
        if opr.get("simm16", ("", 0, ""))[2] == "LABEL":
            inst.target = ctx.pc + 4 + inst.simm16 * 4
        if name == "S_SETREG_IMM32_B32":
            srcs.append(Operand("c", LITERAL, 1, ctx.literal(), literal=True))
    inst.src = tuple(srcs)
    return inst


def _smem(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "SMEM")
    name, opr = _lookup(ctx, "SMEMOp", f["op"], "SMEM")
    inst = Inst(ctx.pc, "SMEM", f["op"], name)
    inst.fields, inst.size = f, 8
    inst.glc, inst.dlc = f["glc"], f["dlc"]
    inst.offset = _sext(f["offset"], 21)
    if "sbase" in opr:
        inst.sbase = _sreg(f["sbase"] * 2, opr["sbase"][1])
    if "sdata" in opr:
        inst.dst = (_sreg(f["sdata"], opr["sdata"][1]),)
    inst.soffset = None if f["soffset"] == NULL else _sreg(f["soffset"], 32)
    inst.src = tuple(x for x in (inst.sbase, inst.soffset) if x is not None)
    return inst


# ---------------------------------------------------------------- vector ALU

def _dpp(ctx: _Ctx, inst: Inst, code: int, base: int) -> Operand | None:
    """DPP extension dword at bit `base`; returns the real src0 (a VGPR) or None."""
    if code == DPP16_SRC:
        inst.dpp = DPP16(_get(ctx, base + 8, base + 16), _get(ctx, base + 28, base + 31), _get(ctx, base + 24, base + 27),
                         _get(ctx, base + 19, base + 19), _get(ctx, base + 18, base + 18))
    elif code in (DPP8_SRC, DPP8FI_SRC):
        inst.dpp = DPP8(tuple(_get(ctx, base + 8 + 3 * i, base + 10 + 3 * i) for i in range(8)), int(code == DPP8FI_SRC))
    else:
        return None
    ctx.lit_pos = base + 32    # the DPP dword takes the literal's place (and there is no literal)
    return Operand("v", _get(ctx, base, base + 7))


def _dpp_mods(ctx: _Ctx, inst: Inst, src: list[Operand], base: int) -> None:
    """VOP1/VOP2/VOPC DPP16 carries src0/src1 neg/abs in its extension dword."""
    if isinstance(inst.dpp, DPP16):
        for i, s in enumerate(src[:2]):
            s.neg = bool(_get(ctx, base + 20 + 2 * i, base + 20 + 2 * i))
            s.abs = bool(_get(ctx, base + 21 + 2 * i, base + 21 + 2 * i))


def _src0(ctx: _Ctx, inst: Inst, code: int, info: tuple | None, base: int) -> Operand:
    s = _dpp(ctx, inst, code, base)
    if s is None:
        return _src(ctx, code, info, ctx.wave64 and 64 or 32)
    fmt, bits, _ = info if info else ("", 32, "")
    s.n, s.bits = _nregs(bits), bits
    return s


def _vcc(ctx: _Ctx) -> Operand:
    return Operand("s", VCC_LO, 2 if ctx.wave64 else 1, bits=64 if ctx.wave64 else 32)


def _exec(ctx: _Ctx) -> Operand:
    return Operand("s", EXEC_LO, 2 if ctx.wave64 else 1, bits=64 if ctx.wave64 else 32)


def _vop1(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOP1")
    name, opr = _lookup(ctx, "VOP1Op", f["op"], "VOP1")
    inst = Inst(ctx.pc, "VOP1", f["op"], name)
    inst.fields = f
    srcs = []
    if "src0" in opr:
        srcs.append(_src0(ctx, inst, f["src0"], opr["src0"], 32))
    _dpp_mods(ctx, inst, srcs, 32)
    if "vdst" in opr:
        fmt, bits, typ = opr["vdst"]
        inst.dst = (_sreg(f["vdst"], bits) if typ in ("SREG", "SDST") else _vreg(f["vdst"], bits),)
    inst.src = tuple(srcs)
    return inst


def _vop2(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOP2")
    name, opr = _lookup(ctx, "VOP2Op", f["op"], "VOP2")
    inst = Inst(ctx.pc, "VOP2", f["op"], name)
    inst.fields = f
    srcs = [_src0(ctx, inst, f["src0"], opr.get("src0"), 32), _vreg(f["vsrc1"], opr.get("vsrc1", ("", 32, ""))[1])]
    _dpp_mods(ctx, inst, srcs, 32)
    inst.dst = (_vreg(f["vdst"], opr.get("vdst", ("", 32, ""))[1]),)
    base = inst.key.upper()
    if base in ("V_FMAMK_F32", "V_FMAMK_F16"):
        srcs.insert(1, Operand("c", LITERAL, 1, ctx.literal(), literal=True, bits=16 if "F16" in base else 32))
    elif base in ("V_FMAAK_F32", "V_FMAAK_F16"):
        srcs.append(Operand("c", LITERAL, 1, ctx.literal(), literal=True, bits=16 if "F16" in base else 32))
    elif base in VOPC_IMPLICIT:
        srcs.append(_vcc(ctx))
        if base != "V_CNDMASK_B32":
            inst.dst += (_vcc(ctx),)
    inst.src = tuple(srcs)
    return inst


def _vopc(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOPC")
    name, opr = _lookup(ctx, "VOPCOp", f["op"], "VOPC")
    inst = Inst(ctx.pc, "VOPC", f["op"], name)
    inst.fields = f
    srcs = [_src0(ctx, inst, f["src0"], opr.get("src0"), 32), _vreg(f["vsrc1"], opr.get("vsrc1", ("", 32, ""))[1])]
    _dpp_mods(ctx, inst, srcs, 32)
    inst.dst = (_exec(ctx) if name.startswith("V_CMPX") else _vcc(ctx),)
    inst.src = tuple(srcs)
    return inst


def _vop3(ctx: _Ctx) -> Inst:
    op = _get(ctx, 16, 25)
    sd = op in ctx.fam.ops["VOP3SDOp"]
    enc = "VOP3SD" if sd else "VOP3"
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc + "Op", op, enc)
    inst = Inst(ctx.pc, enc, op, name)
    inst.fields, inst.size = f, 8
    inst.e64 = op < 512
    ctx.lit_pos = 64
    mb = 64 if ctx.wave64 else 32
    if "vsrc0" in opr:          # VOP1 operations promoted to VOP3 name their (any-source) operand vsrc0
        opr["src0"] = opr.pop("vsrc0")
    srcs = []
    for i, fld in enumerate(("src0", "src1", "src2")):
        if fld not in opr:
            break
        s = _src0(ctx, inst, f[fld], opr[fld], 64) if i == 0 else _src(ctx, f[fld], opr[fld], mb)
        s.neg = bool(f["neg"] >> i & 1)
        if not sd:
            s.abs = bool(f["abs"] >> i & 1)
        srcs.append(s)
    inst.clamp, inst.omod = f["clmp"], f["omod"]
    if not sd:
        inst.opsel = f["opsel"]
    if "vdst" in opr:
        fmt, bits, typ = opr["vdst"]
        if typ == "EXEC":
            inst.dst = (_exec(ctx),)
        elif typ in ("SREG", "SDST"):
            inst.dst = (_sreg(f["vdst"], mb if fmt == "NUM_M64" else bits),)
        else:
            inst.dst = (_vreg(f["vdst"], bits),)
    if sd:
        inst.dst += (_sreg(f["sdst"], mb),)
    inst.src = tuple(srcs)
    if isinstance(inst.dpp, DPP16):
        b = 64
        for i, s in enumerate(srcs[:2]):
            s.neg |= bool(_get(ctx, b + 20 + 2 * i, b + 20 + 2 * i))
            s.abs |= bool(_get(ctx, b + 21 + 2 * i, b + 21 + 2 * i))
    return inst


def _vop3p(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOP3P")
    name, opr = _lookup(ctx, "VOP3POp", f["op"], "VOP3P")
    inst = Inst(ctx.pc, "VOP3P", f["op"], name)
    inst.fields, inst.size = f, 8
    ctx.lit_pos = 64
    if "vsrc0" in opr:          # RDNA4's tables name a VGPR-only first source vsrc0 (v_dot2_f32_f16, v_fma_mix*)
        opr["src0"] = opr.pop("vsrc0")
    srcs = []
    for i, fld in enumerate(("src0", "src1", "src2")):
        if fld not in opr:
            break
        s = _src0(ctx, inst, f[fld], opr[fld], 64) if i == 0 else _src(ctx, f[fld], opr[fld])
        s.neg = bool(f["neg"] >> i & 1)
        srcs.append(s)
    inst.clamp, inst.opsel, inst.neg_hi = f["clmp"], f["opsel"], f["neg_hi"]
    inst.opsel_hi = f["opsel_hi"] | f["opsel_hi2"] << 2
    inst.dst = (_vreg(f["vdst"], opr.get("vdst", ("", 32, ""))[1]),)
    if ctx.wave64 and name.startswith("V_WMMA"):    # wave64 holds the C/D matrices in half the VGPRs per lane
        for o in (inst.dst[0], srcs[2]):
            o.n, o.bits = max(1, o.n // 2), o.bits // 2
    inst.src = tuple(srcs)
    return inst


def _vopd(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOPD")
    ctx.lit_pos = 64
    nx, ox = _lookup(ctx, "VOPDOp", f["opx"], "VOPD X")
    ny, oy = _lookup(ctx, "VOPDOp", f["opy"], "VOPD Y")
    inst = Inst(ctx.pc, "VOPD", f["opx"] << 8 | f["opy"], "V_DUAL")
    inst.key, inst.fields, inst.size = "v_dual", f, 8
    vdsty = (f["vdsty"] << 1) | ((f["vdstx"] & 1) ^ 1)

    def half(name: str, opr: dict, s0: int, v1: int, vd: int) -> Half:
        src = [_src(ctx, s0, opr.get("srcy0"))]
        if "vsrcy1" in opr:
            src.append(_vreg(v1, 32))
        if name == "V_DUAL_FMAMK_F32":
            src.insert(1, Operand("c", LITERAL, 1, ctx.literal(), literal=True))
        elif name == "V_DUAL_FMAAK_F32":
            src.append(Operand("c", LITERAL, 1, ctx.literal(), literal=True))
        elif name == "V_DUAL_CNDMASK_B32":
            src.append(_vcc(ctx))
        return Half(name, 0, _vreg(vd, 32), tuple(src))

    inst.x = half(nx, ox, f["srcx0"], f["vsrcx1"], f["vdstx"])
    inst.x.op = f["opx"]
    inst.y = half(ny, oy, f["srcy0"], f["vsrcy1"], vdsty)
    inst.y.op = f["opy"]
    inst.dst = (inst.x.dst, inst.y.dst)
    inst.src = inst.x.src + inst.y.src
    return inst


# ---------------------------------------------------------------- memory

def _ds(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "DS")
    name, opr = _lookup(ctx, "DSOp", f["op"], "DS")
    inst = Inst(ctx.pc, "DS", f["op"], name)
    inst.fields, inst.size = f, 8
    inst.offset0, inst.offset1, inst.gds = f["offset0"], f["offset1"], f.get("gds", 0)    # RDNA4 DS has no GDS
    inst.offset = f["offset1"] << 8 | f["offset0"]
    if "addr" in opr:
        inst.addr = _vreg(f["addr"], 32)
    srcs = [inst.addr] if inst.addr else []
    for fld in ("data0", "data1"):
        if fld in opr:
            srcs.append(_vreg(f[fld], opr[fld][1]))
    inst.data = tuple(srcs[1:] if inst.addr else srcs)
    if "vdst" in opr:
        inst.dst = (_vreg(f["vdst"], opr["vdst"][1]),)
    inst.src = tuple(srcs)
    return inst


def _flat(ctx: _Ctx) -> Inst:
    seg = _get(ctx, 16, 17)
    enc = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}.get(seg)
    if enc is None:
        raise _fail(ctx, f"invalid FLAT segment {seg}")
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc + "Op", f["op"], enc)
    if not opr:     # a row the tables carry for an operation of another segment (e.g. FLAT_ATOMIC_CSUB_U32)
        raise _fail(ctx, f"{name} has no {enc} form")
    inst = Inst(ctx.pc, enc, f["op"], name)
    inst.fields, inst.size = f, 8
    inst.glc, inst.slc, inst.dlc, inst.sve = f["glc"], f["slc"], f["dlc"], f["sve"]
    inst.offset = f["offset"] if enc == "FLAT" else _sext(f["offset"], 13)
    has_saddr = f["saddr"] != NULL and "saddr" in opr
    if has_saddr:
        inst.saddr = _sreg(f["saddr"], opr["saddr"][1])
    if "addr" in opr:
        inst.addr = _flat_vaddr(enc, f["addr"], has_saddr, f["sve"])
    if "data" in opr:
        inst.data = _vreg(f["data"], opr["data"][1])
    if "vdst" in opr:
        bits = opr["vdst"][1]
        if "CMPSWAP" in name:   # the returned old value is half the (cmp, new) data pair
            bits = opr["data"][1] // 2
        if "ATOMIC" not in name or inst.glc:
            inst.dst = (_vreg(f["vdst"], bits),)
    inst.src = tuple(x for x in (inst.addr, inst.saddr, inst.data) if x is not None)
    return inst


def _mubuf(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "MUBUF")
    name, opr = _lookup(ctx, "MUBUFOp", f["op"], "MUBUF")
    inst = Inst(ctx.pc, "MUBUF", f["op"], name)
    inst.fields, inst.size = f, 8
    inst.glc, inst.slc, inst.dlc, inst.offen, inst.idxen = f["glc"], f["slc"], f["dlc"], f["offen"], f["idxen"]
    inst.offset = f["offset"]
    if opr:
        nv = f["offen"] + f["idxen"]
        inst.addr = _vreg(f["vaddr"], 32 * nv) if nv else None
        inst.srsrc = _sreg(f["srsrc"] * 4, 128)
        inst.soffset = _src(ctx, f["soffset"], ("NUM_B32", 32, "SSRC"))
        bits = (opr["vdata"][1] if "vdata" in opr else 32) + 32 * f["tfe"]
        inst.data = _vreg(f["vdata"], bits)
        if "LOAD" in name or ("ATOMIC" in name and inst.glc):
            inst.dst = (_vreg(f["vdata"], bits // 2 if "CMPSWAP" in name else bits),)
        inst.src = tuple(x for x in (inst.addr, inst.srsrc, inst.soffset, inst.data) if x is not None)
    return inst


DECODERS = {
    "SOP1": lambda c: _sop(c, "SOP1"), "SOP2": lambda c: _sop(c, "SOP2"), "SOPK": lambda c: _sop(c, "SOPK"),
    "SOPC": lambda c: _sop(c, "SOPC"), "SOPP": lambda c: _sop(c, "SOPP"), "SMEM": _smem, "VOP1": _vop1,
    "VOP2": _vop2, "VOPC": _vopc, "VOP3": _vop3, "VOP3SD": _vop3, "VOP3P": _vop3p, "VOPD": _vopd, "DS": _ds,
    "FLAT": _flat, "GLOBAL": _flat, "SCRATCH": _flat, "MUBUF": _mubuf,
}
SAFE_ENC = ("SOP1", "SOP2", "SOPK", "SOPC", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD", "VOP3P", "VOPD", "DS",
            "FLAT", "GLOBAL", "SCRATCH", "MUBUF")
QUIET_SOPP = ("s_nop", "s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt",
              "s_waitcnt_depctr", "s_delay_alu", "s_clause", "s_barrier", "s_sendmsg", "s_set_inst_prefetch_distance")
LOOKAHEAD = 24


class Decoder:
    """One family's decoder: its encoding and opcode tables (amdq.hw.isa), a decoder per encoding name, the
    handler-key aliases of its renamed mnemonics, and the instructions the dead-mask look-ahead may step over
    (SAFE_ENC encodings that only read what their operands say, QUIET_SOPP keys that read nothing)."""

    def __init__(self, arch: str, decoders: dict, aliases: dict | None = None, safe_enc=SAFE_ENC,
                 quiet_sopp=QUIET_SOPP, ops: dict | None = None, inst: type = Inst, src=None, sreg=None):
        self.arch, self.decoders, self.aliases = arch, decoders, aliases or {}
        self.enc, self.ops = isa.encodings(arch), ops if ops is not None else isa.tables(arch).OPCODES
        self.safe_enc, self.quiet_sopp = frozenset(safe_enc), frozenset(quiet_sopp)
        # the family's Inst class and its source / SGPR operand decoding (the shared _sop reads them)
        self.inst, self.src, self.sreg = inst, src or _src, sreg or _sreg

    def decode(self, code: bytes, pc: int, base: int = 0, wave64: bool = False) -> Inst:
        """Decode the instruction at `pc` of a code region that starts at address `base`."""
        off = pc - base
        if off < 0 or off + 4 > len(code):
            raise IllegalInstruction(f"pc {pc:#x} outside the code region [{base:#x}, {base + len(code):#x})",
                                     address=pc)
        ctx = _Ctx(code, off, pc, wave64, self)
        e = isa.match(ctx.bits & 0xFFFFFFFF, self.arch)
        if e is None or e.name not in self.decoders:
            raise _fail(ctx, f"unsupported encoding {e.name}", UnsupportedInstruction) if e else \
                _fail(ctx, "no encoding matches")
        ctx.lit_pos = e.size * 8
        inst = self.decoders[e.name](ctx)
        inst.mask_bits = 64 if wave64 else 32
        if inst.dpp is not None or getattr(inst, "sdwa", None) is not None:      # the extension dword
            inst.size = max(inst.size, ctx.lit_pos // 8)
        if ctx.lit_used:
            inst.literal = (ctx.bits >> ctx.lit_pos) & 0xFFFFFFFF
            inst.size = ctx.lit_pos // 8 + 4
        if off + inst.size > len(code):
            raise _fail(ctx, "instruction runs past the end of the code")
        inst.raw = bytes(code[off:off + inst.size])
        inst.family = self.arch
        if self.aliases:
            inst.key = self.aliases.get(inst.key, inst.key)
            for h in (inst.x, inst.y):
                if h is not None:
                    h.key = self.aliases.get(h.key, h.key)
        return inst

    def mask_dead(self, code: bytes, base: int, wave64: bool, inst: Inst) -> bool:
        """True when the lane mask `inst` writes to SGPRs is overwritten, in the straight-line code that follows
        (within the bytes at hand), before any instruction could read it; False when unsure."""
        d = mask_sgpr(inst)
        if d is None or inst.key.startswith("v_cmpx"):     # gfx9 v_cmpx: EXEC is copied from the mask
            return False
        regs = set(range(d.reg, d.reg + d.n))
        pc = inst.pc + inst.size
        for _ in range(LOOKAHEAD):
            try:
                nxt = self.decode(code, pc, base, wave64)
            except (IllegalInstruction, UnsupportedInstruction):
                return False
            k = nxt.key
            if k == "s_endpgm":
                return True
            if nxt.enc not in self.safe_enc and k not in self.quiet_sopp or "div_fmas" in k or \
                    getattr(nxt, "sdwa", None) is not None:
                return False
            for o in _operands(nxt):
                if o is None:
                    continue
                if o.kind == "s" and regs & set(range(o.reg, o.reg + o.n)):
                    return False
                if o.kind == "x" and o.reg == 251 and regs & {VCC_LO, VCC_HI}:
                    return False
            for o in nxt.dst:
                if o.kind == "s":
                    regs -= set(range(o.reg, o.reg + o.n))
            if not regs:
                return True
            pc += nxt.size
        return False

    def decode_program(self, code: bytes, base: int = 0, wave64: bool = False) -> dict[int, Inst]:
        """Decode a whole code region linearly: {pc: Inst}; an undecodable word raises IllegalInstruction
        (or UnsupportedInstruction for an encoding the decoder does not model)."""
        out: dict[int, Inst] = {}
        pc, end = base, base + len(code)
        while pc + 4 <= end:
            inst = self.decode(code, pc, base, wave64)
            out[pc] = inst
            pc += inst.size
        return out


def mask_sgpr(inst: Inst) -> Operand | None:
    """The SGPR destination a VALU instruction writes as a lane mask (carry out, compare result), if any."""
    for d in inst.dst:
        if d.kind == "s" and d.reg not in (NULL, EXEC_LO, EXEC_HI) and inst.enc in ("VOP2", "VOP3", "VOP3SD", "VOPC"):
            return d
    return None


def _operands(i: Inst):
    yield from i.src
    yield from (i.addr, i.saddr, i.sbase, i.soffset, i.srsrc)
    if isinstance(i.data, tuple):
        yield from i.data
    else:
        yield i.data
    for h in (i.x, i.y):
        if h is not None:
            yield from h.src


RDNA3 = Decoder(ARCH, DECODERS)
decode, mask_dead, decode_program = RDNA3.decode, RDNA3.mask_dead, RDNA3.decode_program


class Program:
    """Lazy per-PC decode cache over one code region (decodes each PC at most once)."""

    def __init__(self, code: bytes, base: int = 0, wave64: bool = False, decoder: Decoder = RDNA3):
        self.code, self.base, self.wave64, self.decoder = bytes(code), base, wave64, decoder
        self.cache: dict[int, Inst] = {}

    def __getitem__(self, pc: int) -> Inst:
        inst = self.cache.get(pc)
        if inst is None:
            inst = self.cache[pc] = self.decoder.decode(self.code, pc, self.base, self.wave64)
        return inst


def f32_bits(x: float) -> int:
    """IEEE single bit pattern of a Python float (helper for tests and handlers)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]
