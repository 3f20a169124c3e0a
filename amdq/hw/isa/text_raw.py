"""LLVM-syntax text of gfx11 encodings the shader decoder does not model (MTBUF, MIMG, VINTERP, LDSDIR, EXP),
formatted straight from the instruction fields (amdq.hw.isa encodings and opcode tables).

    text_raw(code, off, wave64) -> (text, size) or None when the words are no such instruction
"""
from __future__ import annotations

from amdq.hw import isa
from .decode import Operand
from .text import BUF_FMT, FLOAT_TEXT, reg

ENC = isa.encodings("rdna3")
OPS = isa.tables("rdna3").OPCODES

# MIMG dim field: name, coordinates, gradients (AMD RDNA3 ISA guide, "Image instructions": DIM)
DIMS = [("1D", 1, 2), ("2D", 2, 4), ("3D", 3, 6), ("CUBE", 3, 4), ("1D_ARRAY", 2, 2), ("2D_ARRAY", 3, 4),
        ("2D_MSAA", 3, 4), ("2D_MSAA_ARRAY", 4, 4)]
NSA_MAX = 5      # gfx11 NSA address operands (AMD RDNA3 ISA guide, "Image instructions": NSA)
# export targets (AMD RDNA3 ISA guide, "EXP": TARGET)
EXP_TGT = {**{k: f"mrt{k}" for k in range(8)}, 8: "mrtz", 9: "null", **{12 + k: f"pos{k}" for k in range(5)},
           20: "prim", 21: "dual_src_blend0", 22: "dual_src_blend1"}


def _v(r: int, n: int = 1) -> str:
    return reg(Operand("v", r & 0xFF, n))


def _s(r: int, n: int = 1) -> str:
    return reg(Operand("s", r, n))


def _ssrc(code: int) -> str:
    """An SGPR or inline-constant operand code (MUBUF/MTBUF soffset)."""
    if code < 128:
        return _s(code)
    if code <= 208:
        return str(code - 128 if code <= 192 else 192 - code)
    return FLOAT_TEXT.get(code, str(code))


def _cpol(f: dict) -> list[str]:
    return [n for n in ("glc", "slc", "dlc") if f[n]]


def _mtbuf(bits: int) -> tuple[str, int] | None:
    f = ENC["MTBUF"].unpack(bits)
    row = OPS["MTBUFOp"].get(f["op"])
    if row is None:
        return None
    name, opr = row[0].lower(), {k: b for k, _, b, _ in row[1]}
    nv = f["offen"] + f["idxen"]
    ops = [_v(f["vdata"], opr["vdata"] // 32 + f["tfe"]), _v(f["vaddr"], nv) if nv else "off",
           _s(f["srsrc"] * 4, 4), _ssrc(f["soffset"])]
    mods = [] if f["format"] == 1 else [f"format:[BUF_FMT_{BUF_FMT[f['format']]}]" if f["format"] < 64 else
                                        f"format:{f['format']}"]
    mods += [n for n in ("idxen", "offen") if f[n]] + ([f"offset:{f['offset']}"] if f["offset"] else [])
    return " ".join([name + " " + ", ".join(ops)] + mods + _cpol(f) + (["tfe"] if f["tfe"] else [])), 8


def _mimg_addr(name: str, dim: int, a16: bool) -> list[int]:
    """Address VGPR groups of an image operation: one entry per NSA slot, its size in VGPRs."""
    if "bvh" in name:   # node pointer, ray extent, origin, direction, inverse direction (a16: dir/inv packed)
        node = 2 if "bvh64" in name else 1
        return [node, 1, 3, 3] if a16 else [node, 1, 3, 3, 3]
    parts = name.split("_")[1:]
    _, coords, grads = DIMS[dim]
    if "get_resinfo" in name:
        return [1]
    extra = sum(p in ("c", "o", "b") for p in parts)
    lod = any(p in ("l", "cl", "mip") for p in parts)
    comps = coords + lod
    words = extra + ((comps + 1) // 2 if a16 else comps)
    if "d" in parts:
        words += 2 * ((grads // 2 + 1) // 2) if "g16" in parts else grads    # gfx11 has G16: a16 leaves them 32-bit
    return [1] * words


def _mimg(code: bytes, off: int, bits: int) -> tuple[str, int] | None:
    f = ENC["MIMG"].unpack(bits)
    row = OPS["MIMGOp"].get(f["op"])
    if row is None:
        return None
    name = row[0].lower()
    groups = _mimg_addr(name, f["dim"], bool(f["a16"]))
    size = 8
    if f["nsa"]:
        if len(groups) > NSA_MAX:      # the last address operand holds the rest as one tuple
            groups = groups[:NSA_MAX - 1] + [sum(groups[NSA_MAX - 1:])]
        extra = len(groups) - 1
        size += 4 * ((extra + 3) // 4)
        if off + size > len(code):
            return None
        regs = [f["vaddr"]] + list(code[off + 8:off + 8 + extra])
        addr = "[" + ", ".join(_v(r, n) for r, n in zip(regs, groups)) + "]"
    else:
        n = sum(groups)
        n = n if n <= 5 or n in (6, 7, 8, 9, 10, 11, 12) else 16
        addr = _v(f["vaddr"], n)
    if "bvh" in name:
        return " ".join([f"{name} {_v(f['vdata'], 4)}, {addr}, {_s(f['srsrc'] * 4, 4)}"] + (["a16"] if f["a16"] else [])), size
    dmask = f["dmask"]
    n = 4 if "gather4" in name or "msaa_load" in name else bin(dmask).count("1") or 1
    if f["d16"]:
        n = (n + 1) // 2
    n += f["tfe"]
    ops = [_v(f["vdata"], n), addr, _s(f["srsrc"] * 4, 8)]      # LLVM shows 8 SGPRs with r128 too
    if "sample" in name or "gather" in name or "get_lod" in name:
        ops.append(_s(f["ssamp"] * 4, 4))
    mods = [f"dmask:{dmask:#x}" if dmask else "", f"dim:SQ_RSRC_IMG_{DIMS[f['dim']][0]}",
            "unorm" if f["unrm"] else ""] + _cpol(f)
    mods += [n for n, b in (("r128", f["r128"]), ("a16", f["a16"]), ("tfe", f["tfe"]), ("lwe", f["lwe"]),
                            ("d16", f["d16"])) if b]
    return " ".join([f"{name} {', '.join(ops)}"] + [m for m in mods if m]), size


def _vinterp(bits: int) -> tuple[str, int] | None:
    f = ENC["VINTERP"].unpack(bits)
    row = OPS["VINTERPOp"].get(f["op"])
    if row is None or min(f["src0"], f["src1"], f["src2"]) < 256:
        return None
    name = row[0].lower()
    srcs = [("-" if f["neg"] >> k & 1 else "") + _v(f[s] - 256) for k, s in enumerate(("src0", "src1", "src2"))]
    mods = ["clamp"] if f["clmp"] else []
    if f["opsel"] and "f16" in name:
        mods.append("op_sel:[" + ",".join(str(f["opsel"] >> k & 1) for k in range(4)) + "]")
    mods.append(f"wait_exp:{f['waitexp']}")
    return " ".join([f"{name} {_v(f['vdst'])}, {', '.join(srcs)}"] + mods), 8


def _ldsdir(bits: int) -> tuple[str, int] | None:
    f = ENC["LDSDIR"].unpack(bits)
    row = OPS["LDSDIROp"].get(f["op"])
    if row is None:
        return None
    name = row[0].lower()
    ops = [_v(f["vdst"])] + ([f"attr{f['attr']}.{'xyzw'[f['attr_chan']]}"] if name == "lds_param_load" else [])
    return f"{name} {', '.join(ops)} wait_vdst:{f['wait_vdst']}", 4


def _exp(bits: int) -> tuple[str, int] | None:
    f = ENC["EXP"].unpack(bits)
    tgt = EXP_TGT.get(f["target"])
    if tgt is None:
        return None
    srcs = [_v(f[f"vsrc{k}"]) if f["en"] >> k & 1 else "off" for k in range(4)]
    return " ".join([f"exp {tgt} {', '.join(srcs)}"] + (["done"] if f["done"] else []) + (["row_en"] if f["row"] else [])), 8


def text_raw(code: bytes, off: int, wave64: bool = False) -> tuple[str, int] | None:
    """(text, size) of an MTBUF/MIMG/VINTERP/LDSDIR/EXP instruction at byte offset `off`, else None."""
    if off + 4 > len(code):
        return None
    e = isa.match(int.from_bytes(code[off:off + 4], "little"))
    if e is None or e.name not in ("MTBUF", "MIMG", "VINTERP", "LDSDIR", "EXP") or off + e.size > len(code):
        return None
    bits = int.from_bytes(code[off:off + e.size], "little")
    if e.name == "MIMG":
        return _mimg(code, off, bits)
    return {"MTBUF": _mtbuf, "VINTERP": _vinterp, "LDSDIR": _ldsdir, "EXP": _exp}[e.name](bits)
