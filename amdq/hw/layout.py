"""Declarative layouts: bit fields within a word, fields within a byte struct, and dword packets.

Every hardware table in `amdq.hw` is data built from these classes, and each has exactly one
encoder and one decoder:

* `Bits`   -- named bit fields in one word (a register, one packet dword, a PTE).
* `Struct` -- a little-endian byte struct; field types are scalars (u8..u64, i8..i64, f32, f64,
  ptr), raw bytes ('Nb'), nested `Struct`s, `Array`s of either, and `BitField`s inside a storage unit.
* `Words`  -- a packet made of consecutive 32-bit words (PM4, SDMA), each word a `Bits`, with
  values split over several words ("wide" fields such as 64-bit addresses) and an optional
  variable-length tail of raw words.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence


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
        self._plan = tuple((n, f.mask, f.lo) for n, f in self.fields.items())     # what decode extracts

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
        return {n: (word & m) >> lo for n, m, lo in self._plan}

    def __repr__(self) -> str:
        return f"Bits({self.name}, {list(self.fields)})"


_FMT = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "i8": "b", "i16": "h", "i32": "i", "i64": "q",
        "f32": "f", "f64": "d", "ptr": "Q"}


@dataclass(frozen=True)
class Array:
    """`count` consecutive elements of a scalar type name or a `Struct` (count 0: flexible array member)."""
    elem: Any
    count: int

    @property
    def stride(self) -> int:
        return Struct.field_size(self.elem)

    @property
    def size(self) -> int:
        return self.stride * self.count


@dataclass(frozen=True)
class BitField:
    """Bits lo..lo+width-1 of a scalar storage unit (`base`, e.g. 'u8' or 'u32') at the field's offset."""
    base: str
    lo: int
    width: int

    @property
    def size(self) -> int:
        return struct.calcsize(_FMT[self.base])

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lo


class Struct:
    """A little-endian byte struct: named fields at fixed offsets.

    A field type is a scalar name (u8..u64, i8..i64, f32, f64, ptr), 'Nb' (N raw bytes), a nested
    `Struct` (value: dict), an `Array` (value: list) or a `BitField` (value: int). Fields may overlap
    (unions); `pack` writes only the fields it is given.
    """

    def __init__(self, name: str, size: int, fields: Iterable[tuple[str, int, Any]]):
        self.name, self.size = name, size
        self.fields = {n: (off, typ) for n, off, typ in fields}
        for n, (off, typ) in self.fields.items():
            if off + self.field_size(typ) > size:
                raise ValueError(f"{name}.{n} runs past the struct's {size} bytes")
        # per field: (name, offset, the compiled struct of a scalar or None, type): what unpack and pack_into run
        self._plan = tuple((n, off, _scalar(typ), typ) for n, (off, typ) in self.fields.items())
        self._by_name = {n: (off, sc, typ) for n, off, sc, typ in self._plan}

    @staticmethod
    def field_size(typ: Any) -> int:
        """Size in bytes of a field type (a BitField counts its storage unit)."""
        if isinstance(typ, str):
            return int(typ[:-1]) if typ.endswith("b") else struct.calcsize(_FMT[typ])
        return typ.size

    def offsetof(self, name: str) -> int:
        return self.fields[name][0]

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    def __repr__(self) -> str:
        return f"Struct({self.name}, {self.size})"

    def reader(self, *names: str) -> struct.Struct:
        """A compiled reader of scalar fields (or arrays of scalars, one value per element), in the order
        given (ascending offsets, gaps skipped): the fast path of a hot decoder, from the same layout as
        `unpack`."""
        fmt, pos = "<", 0
        for n in names:
            off, typ = self.fields[n]
            count = 1
            if isinstance(typ, Array) and isinstance(typ.elem, str):
                typ, count = typ.elem, typ.count
            if not isinstance(typ, str) or typ.endswith("b") or off < pos:
                raise ValueError(f"{self.name}.{n}: a reader takes scalar fields in ascending order")
            fmt += f"{off - pos}x" * (off > pos) + _FMT[typ] * count
            pos = off + self.field_size(typ) * count
        return struct.Struct(fmt)

    def unpack(self, buf: bytes | bytearray | memoryview, offset: int = 0) -> dict[str, Any]:
        if len(buf) - offset < self.size:
            raise ValueError(f"{self.name} needs {self.size} bytes, {len(buf) - offset} available")
        return {n: sc.unpack_from(buf, offset + off)[0] if sc is not None else _get(buf, offset + off, typ)
                for n, off, sc, typ in self._plan}

    def pack(self, **values: Any) -> bytes:
        buf = bytearray(self.size)
        self.pack_into(buf, 0, **values)
        return bytes(buf)

    def pack_into(self, buf: bytearray | memoryview, offset: int, /, **values: Any) -> None:
        if len(buf) - offset < self.size:
            raise ValueError(f"{self.name} needs {self.size} bytes, {len(buf) - offset} available")
        by_name = self._by_name
        for n, v in values.items():
            f = by_name.get(n)
            if f is None:
                raise KeyError(f"{self.name} has no field {n}")
            off, sc, typ = f
            if sc is not None:
                try:
                    sc.pack_into(buf, offset + off, v)
                    continue
                except struct.error:
                    pass                        # (the general path says what does not fit)
            _put(buf, offset + off, typ, v, f"{self.name}.{n}")


def _scalar(typ: Any) -> struct.Struct | None:
    """The compiled little-endian struct of a scalar field type (u8..u64, i8..i64, f32, f64, ptr), else None."""
    return struct.Struct("<" + _FMT[typ]) if isinstance(typ, str) and not typ.endswith("b") else None


def _get(buf: Any, pos: int, typ: Any) -> Any:
    if isinstance(typ, str):
        if typ.endswith("b"):
            return bytes(buf[pos: pos + int(typ[:-1])])
        return struct.unpack_from("<" + _FMT[typ], buf, pos)[0]
    if isinstance(typ, Struct):
        return typ.unpack(buf, pos)
    if isinstance(typ, Array):
        return [_get(buf, pos + k * typ.stride, typ.elem) for k in range(typ.count)]
    if isinstance(typ, BitField):
        return (struct.unpack_from("<" + _FMT[typ.base], buf, pos)[0] & typ.mask) >> typ.lo
    raise TypeError(f"unknown field type {typ!r}")


def _put(buf: Any, pos: int, typ: Any, v: Any, what: str) -> None:
    if isinstance(typ, str):
        if typ.endswith("b"):
            n = int(typ[:-1])
            raw = bytes(v)
            if len(raw) > n:
                raise ValueError(f"{what}: {len(raw)} bytes do not fit {n}")
            buf[pos: pos + n] = raw.ljust(n, b"\0")
        else:
            try:
                struct.pack_into("<" + _FMT[typ], buf, pos, v)
            except struct.error as e:
                raise ValueError(f"{what}={v!r} does not fit {typ}") from e
    elif isinstance(typ, Struct):
        typ.pack_into(buf, pos, **v)
    elif isinstance(typ, Array):
        if len(v) > typ.count:
            raise ValueError(f"{what}: {len(v)} elements do not fit {typ.count}")
        for k, e in enumerate(v):
            _put(buf, pos + k * typ.stride, typ.elem, e, f"{what}[{k}]")
    elif isinstance(typ, BitField):
        if not 0 <= v < (1 << typ.width):
            raise ValueError(f"{what}={v} does not fit {typ.width} bits")
        fmt = "<" + _FMT[typ.base]
        word = struct.unpack_from(fmt, buf, pos)[0] & ((1 << (8 * typ.size)) - 1)
        word = (word & ~typ.mask) | (v << typ.lo)
        struct.pack_into(fmt, buf, pos, word if typ.base.startswith("u") else _signed(word, 8 * typ.size))
    else:
        raise TypeError(f"unknown field type {typ!r}")


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


class Words:
    """A packet of consecutive 32-bit words: word k is `words[k]` (a `Bits`), field names unique.

    * `wide` maps a value name to its parts ((field, value_shift), ...): e.g. a 64-bit address held
      in ADDR_LO (bits 31:0) and ADDR_HI (bits 63:32) is {"ADDR": (("ADDR_LO", 0), ("ADDR_HI", 32))}.
      `decode` reports the wide value instead of its parts; `encode` takes either.
    * `tail` names a variable-length list of raw words after the fixed words. Its length is free
      (bounded by the packet size the caller knows), or given by a field: `tail_count=(field, bias)`
      means len(tail) == field + bias (the field is filled in by `encode` when not given).
    * `optional` is the number of trailing fixed words that may be absent as a group.
    """

    def __init__(self, name: str, words: Sequence[Bits], wide: Mapping[str, Sequence[tuple[str, int]]] | None = None,
                 tail: str | None = None, tail_count: tuple[str, int] | None = None, optional: int = 0):
        self.name, self.words = name, tuple(words)
        self.wide = {k: tuple(v) for k, v in (wide or {}).items()}
        self.tail, self.tail_count, self.optional = tail, tail_count, optional
        self.where: dict[str, tuple[int, Field]] = {}
        for k, w in enumerate(self.words):
            for fname, f in w.fields.items():
                if fname in self.where:
                    raise ValueError(f"{name}: field {fname} appears twice")
                self.where[fname] = (k, f)
        self._part_of = {p: k for k, parts in self.wide.items() for p, _ in parts}
        for k, parts in self.wide.items():
            for p, _ in parts:
                if p not in self.where:
                    raise ValueError(f"{name}: wide value {k} names unknown field {p}")

    @property
    def min_words(self) -> int:
        return len(self.words) - self.optional

    def field_names(self) -> list[str]:
        """The names `decode` reports (wide values replace their parts)."""
        out = [n for n in self.where if n not in self._part_of]
        out += list(self.wide)
        return out + ([self.tail] if self.tail else [])

    def encode(self, **values: Any) -> list[int]:
        """The packet words; absent fields are 0. Raises KeyError/ValueError on an unknown or oversized field."""
        vals: dict[str, int] = {}
        tail: list[int] = []
        for k, v in values.items():
            if k == self.tail and self.tail:
                tail = [int(x) for x in v]
            elif k in self.wide:
                v = int(v)
                rebuilt = 0
                for part, shift in self.wide[k]:
                    f = self.where[part][1]
                    pv = (v >> shift) & ((1 << (f.hi - f.lo + 1)) - 1)
                    vals[part] = pv
                    rebuilt |= pv << shift
                if rebuilt != v:
                    raise ValueError(f"{self.name}.{k}={v:#x} does not fit its fields")
            elif k in self.where:
                vals[k] = int(v)
            else:
                raise KeyError(f"{self.name} has no field {k}")
        if self.tail_count:
            field, bias = self.tail_count
            if field not in values:
                vals[field] = len(tail) - bias
            elif vals[field] + bias != len(tail):
                raise ValueError(f"{self.name}: {field}={vals[field]} does not match {len(tail)} {self.tail} words")
        n = len(self.words)
        if self.optional and not any(self.where[k][0] >= self.min_words for k in vals):
            n = self.min_words
        out = [0] * n
        for k, v in vals.items():
            idx, f = self.where[k]
            if idx >= n:
                continue
            out[idx] = f.put(out[idx], v)
        for w in tail:
            if not 0 <= w < 1 << 32:
                raise ValueError(f"{self.name}.{self.tail}: {w} is not a 32-bit word")
        return out + tail

    def encoder(self, names: Sequence[str], **fixed: Any) -> Callable[..., list[int]]:
        """A function of the values of `names` (in that order) giving what `encode(**fixed, **those)` gives, with
        the same checks, for a packet without a tail: the fixed fields are encoded once, each value's bits are
        placed by a precomputed plan (for the packets a queue writes on every submission)."""
        if self.tail:
            raise ValueError(f"{self.name}: a packet with a tail has no fixed encoder")
        base = self.encode(**fixed, **{k: 0 for k in names})
        plan = []
        for k in names:
            parts = self.wide.get(k, ((k, 0),)) if k in self.wide or k in self.where else None
            if parts is None:
                raise KeyError(f"{self.name} has no field {k}")
            spots = [(self.where[p][0], self.where[p][1].lo, self.where[p][1].hi - self.where[p][1].lo + 1, sh)
                     for p, sh in parts]
            covered = sum(((1 << w) - 1) << sh for _, _, w, sh in spots)
            plan.append((k, covered, [(i, lo, (1 << w) - 1, sh) for i, lo, w, sh in spots if i < len(base)]))
        name = self.name

        def encode(*values: int) -> list[int]:
            out = list(base)
            for (k, covered, spots), v in zip(plan, values):
                v = int(v)
                if v < 0 or v & ~covered:
                    raise ValueError(f"{name}.{k}={v:#x} does not fit its fields")
                for i, lo, m, sh in spots:
                    out[i] |= ((v >> sh) & m) << lo
            return out
        return encode

    def length(self, words: Sequence[int]) -> int | None:
        """Words the packet occupies, from its fixed words, or None when only the caller knows it."""
        if self.tail is None:
            return len(self.words) if not self.optional else None
        if self.tail_count is None:
            return None
        idx, f = self.where[self.tail_count[0]]
        if idx >= len(words):
            return None
        return len(self.words) + f.get(words[idx]) + self.tail_count[1]

    def decode(self, words: Sequence[int]) -> dict[str, Any]:
        """Field values of exactly one packet's words. Raises ValueError if the length does not fit."""
        n = len(words)
        nfixed = len(self.words)
        if n < self.min_words or (n < nfixed and n != self.min_words) or (n > nfixed and not self.tail):
            raise ValueError(f"{self.name}: {n} words do not fit its layout")
        out: dict[str, Any] = {}
        for k in range(min(n, nfixed)):
            w = words[k]
            for fname, m, lo in self.words[k]._plan:
                out[fname] = (w & m) >> lo
        for k, parts in self.wide.items():
            if all(p in out for p, _ in parts):
                out[k] = sum(out.pop(p) << s for p, s in parts)
        if self.tail:
            tail = list(words[nfixed:])
            if self.tail_count:
                field, bias = self.tail_count
                if out[field] + bias != len(tail):
                    raise ValueError(f"{self.name}: {field}={out[field]} does not match {len(tail)} tail words")
            out[self.tail] = tail
        return out

    def decoder(self) -> Callable[[Sequence[int]], dict[str, Any]] | None:
        """`decode` of exactly len(self.words) words as one compiled expression (what an engine runs for every
        packet it fetches), or None for a layout with a tail or optional words. The same fields in the same
        order: the parts of a wide value are not reported, the wide values come last."""
        if self.tail or self.optional:
            return None
        return self._compiled_fields(range(len(self.words)), "decode(w)", "w[{}]", "decoder")

    def value_decoder(self) -> tuple[tuple[int, ...], Callable[[Sequence[int], int], dict[str, Any]]] | None:
        """For a layout without a tail: the indices of its control words (those holding several fields, or none)
        and a compiled function of (words, offset of word 0) giving the fields of its value words (one field each:
        an address half, a data dword) and every wide value with a part there. decoder()'s fields are the
        control words' fields updated with these, so a packet seen before with other values costs only these.
        None when every word is a control word (or the layout has a tail)."""
        if self.tail or self.optional:
            return None
        values = [k for k, w in enumerate(self.words) if len(w._plan) == 1]
        if not values:
            return None
        return (tuple(k for k in range(len(self.words)) if k not in values),
                self._compiled_fields(values, "values(m, o)", "m[o + {}]", "values"))

    def _compiled_fields(self, words, signature: str, word: str, what: str) -> Callable:
        """A compiled function `signature` returning the fields of the words at indices `words` (the parts of a wide
        value not reported) and, last, every wide value with a part there; `word` spells word k (a format)."""
        words = set(words)
        items = [f"{fname!r}: ({word.format(k)} & {m:#x}) >> {lo}" for k in sorted(words)
                 for fname, m, lo in self.words[k]._plan if fname not in self._part_of]
        for k, parts in self.wide.items():
            if any(self.where[p][0] in words for p, _ in parts):
                items.append(f"{k!r}: " + " | ".join(
                    f"(({word.format(self.where[p][0])} & {self.where[p][1].mask:#x}) >> {self.where[p][1].lo}) << {sh}"
                    for p, sh in parts))
        scope: dict[str, Any] = {}
        exec(compile(f"def {signature}:\n    return {{" + ", ".join(items) + "}\n", f"<{what} of {self.name}>", "exec"),
             scope)
        return scope[signature.partition("(")[0]]

    def __repr__(self) -> str:
        return f"Words({self.name}, {len(self.words)}{'+' + self.tail if self.tail else ''})"
