"""Instruction-set tables (generated per architecture by scripts/gen_isa.py) and small encode/decode helpers."""
from __future__ import annotations

import importlib
from functools import lru_cache
from types import ModuleType

# ISA family (and gfx major) -> generated table module. CDNA tables are CDNA4's (gfx950), a superset of gfx942's.
ARCHS = {"gfx11": "rdna3", "rdna3": "rdna3", "gfx12": "rdna4", "rdna4": "rdna4", "gfx9": "cdna", "cdna3": "cdna",
         "cdna4": "cdna", "cdna": "cdna"}


@lru_cache(maxsize=None)
def tables(arch: str = "rdna3") -> ModuleType:
    """The generated table module of an ISA family ("rdna3", "rdna4", "cdna3", or a gfx major such as "gfx11")."""
    mod = ARCHS.get(arch)
    if mod is None:
        from ...errors import UnsupportedTarget
        raise UnsupportedTarget(f"no instruction tables for {arch!r}: amdq has {', '.join(sorted(set(ARCHS)))}")
    return importlib.import_module(f"{__name__}.{mod}")


class Encoding:
    """One instruction encoding: its named bit fields over the little-endian instruction bits."""

    __slots__ = ("name", "size", "base", "enum", "fields", "mask", "value", "_plan")

    def __init__(self, name: str, row: tuple):
        self.name = name
        self.size, self.base, self.enum, fields, self.mask, self.value = row
        self.fields = {f[0]: f[1:] for f in fields}   # name -> (lo, hi, kind, fixed value)
        self._plan = [(f, lo, (1 << (hi - lo + 1)) - 1) for f, (lo, hi, *_) in self.fields.items()]

    def get(self, bits: int, field: str) -> int:
        """The unsigned value of a field."""
        lo, hi = self.fields[field][:2]
        return (bits >> lo) & ((1 << (hi - lo + 1)) - 1)

    def unpack(self, bits: int) -> dict[str, int]:
        """All fields of an instruction as unsigned ints."""
        return {f: (bits >> lo) & m for f, lo, m in self._plan}

    def pack(self, **values: int) -> int:
        """Instruction bits from field values (fixed fields are filled in; a missing field is 0)."""
        bits = 0
        for f, (lo, hi, kind, fixed) in self.fields.items():
            v = fixed if kind == "fixed" else values.pop(f, 0)
            width = hi - lo + 1
            if not 0 <= v < (1 << width) and not -(1 << (width - 1)) <= v < 0:
                raise ValueError(f"{self.name}.{f}={v} does not fit {width} bits")
            bits |= (v & ((1 << width) - 1)) << lo
        if values:
            raise ValueError(f"{self.name} has no field(s) {sorted(values)}")
        return bits

    def encode(self, **values: int) -> bytes:
        """Instruction bytes (little endian) from field values."""
        return self.pack(**values).to_bytes(self.size, "little")

    def __repr__(self) -> str:
        return f"Encoding({self.name}, {self.size} bytes)"


@lru_cache(maxsize=None)
def encodings(arch: str = "rdna3") -> dict[str, Encoding]:
    """name -> Encoding for an ISA family."""
    return {name: Encoding(name, row) for name, row in tables(arch).ENCODINGS.items()}


@lru_cache(maxsize=None)
def base_order(arch: str = "rdna3") -> tuple[Encoding, ...]:
    """Base encodings (no literal/DPP variants), most fixed bits first: the order to match a first dword."""
    bases = [e for e in encodings(arch).values() if e.base is None]
    return tuple(sorted(bases, key=lambda e: (-bin(e.mask).count("1"), e.name)))


def match(dword0: int, arch: str = "rdna3") -> Encoding | None:
    """The base encoding whose fixed bits match the first dword, or None."""
    for e in base_order(arch):
        if dword0 & e.mask == e.value:
            return e
    return None


@lru_cache(maxsize=None)
def opnums(enum: str, arch: str = "rdna3") -> dict[str, int]:
    """MNEMONIC -> opcode number within an opcode enum (e.g. "VOP2Op")."""
    return {row[0]: num for num, row in tables(arch).OPCODES[enum].items()}


def opcode(enum: str, num: int, arch: str = "rdna3") -> tuple[str, dict[str, tuple[str, int, str]]] | None:
    """(MNEMONIC, {operand field: (format, bits, operand type)}) of an opcode number, or None if undefined."""
    row = tables(arch).OPCODES.get(enum, {}).get(num)
    if row is None:
        return None
    return row[0], {f: (fmt, bits, typ) for f, fmt, bits, typ in row[1]}


def encode(enc: str, arch: str = "rdna3", **fields: int | str) -> bytes:
    """Instruction bytes; `op` may be given as a mnemonic (e.g. op="V_ADD_F32_E32")."""
    e = encodings(arch)[enc]
    if isinstance(fields.get("op"), str):
        fields["op"] = opnums(e.enum, arch)[fields["op"]]
    for k in ("opx", "opy"):
        if isinstance(fields.get(k), str):
            fields[k] = opnums("VOPDOp", arch)[fields[k]]
    return e.encode(**fields)
