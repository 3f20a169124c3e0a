"""Declarative layouts: bit fields within a word, and fields within a byte struct.

Every hardware table in `amdq.hw` is data built from these two classes, and each has exactly one
encoder and one decoder.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class Field:
    name: str
    lo: int
    hi: int

    @property
    def mask(self) -> int:
        return ((1 << (self.hi - self.lo + 1)) - 1) << self.lo

    def get(self, word: int) -> int:
        return (word & self.mask) >> self.lo

    def put(self, word: int, value: int) -> int:
        width = self.hi - self.lo + 1
        if not 0 <= value < (1 << width):
            raise ValueError(f"{self.name}={value} does not fit {width} bits")
        return (word & ~self.mask) | (value << self.lo)


class Bits:
    """A word made of named bit fields, e.g. a register or a packet dword."""

    def __init__(self, name: str, fields: Mapping[str, tuple[int, int]] | Iterable[Field], width: int = 32):
        self.name, self.width = name, width
        items = fields.items() if isinstance(fields, Mapping) else ((f.name, (f.lo, f.hi)) for f in fields)
        self.fields: dict[str, Field] = {n: Field(n, lo, hi) for n, (lo, hi) in items}

    def __getitem__(self, name: str) -> Field:
        return self.fields[name]

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    def encode(self, **values: int) -> int:
        word = 0
        for k, v in values.items():
            if k not in self.fields:
                raise KeyError(f"{self.name} has no field {k}")
            word = self.fields[k].put(word, int(v))
        return word

    def decode(self, word: int) -> dict[str, int]:
        return {n: f.get(word) for n, f in self.fields.items()}

    def __repr__(self) -> str:
        return f"Bits({self.name}, {list(self.fields)})"


_FMT = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "i8": "b", "i16": "h", "i32": "i", "i64": "q"}


class Struct:
    """A little-endian byte struct: named fields at fixed offsets (types u8..u64, i8..i64, or 'Nb' bytes)."""

    def __init__(self, name: str, size: int, fields: Iterable[tuple[str, int, str]]):
        self.name, self.size = name, size
        self.fields = {n: (off, typ) for n, off, typ in fields}
        for n, (off, typ) in self.fields.items():
            if off + self.field_size(typ) > size:
                raise ValueError(f"{name}.{n} runs past the struct's {size} bytes")

    @staticmethod
    def field_size(typ: str) -> int:
        return int(typ[:-1]) if typ.endswith("b") else struct.calcsize(_FMT[typ])

    def unpack(self, buf: bytes | bytearray | memoryview, offset: int = 0) -> dict[str, Any]:
        if len(buf) - offset < self.size:
            raise ValueError(f"{self.name} needs {self.size} bytes, {len(buf) - offset} available")
        out: dict[str, Any] = {}
        for n, (off, typ) in self.fields.items():
            if typ.endswith("b"):
                out[n] = bytes(buf[offset + off: offset + off + int(typ[:-1])])
            else:
                out[n] = struct.unpack_from("<" + _FMT[typ], buf, offset + off)[0]
        return out

    def pack(self, **values: Any) -> bytes:
        buf = bytearray(self.size)
        self.pack_into(buf, 0, **values)
        return bytes(buf)

    def pack_into(self, buf: bytearray | memoryview, offset: int, **values: Any) -> None:
        for n, v in values.items():
            if n not in self.fields:
                raise KeyError(f"{self.name} has no field {n}")
            off, typ = self.fields[n]
            if typ.endswith("b"):
                buf[offset + off: offset + off + int(typ[:-1])] = bytes(v).ljust(int(typ[:-1]), b"\0")
            else:
                struct.pack_into("<" + _FMT[typ], buf, offset + off, v)
