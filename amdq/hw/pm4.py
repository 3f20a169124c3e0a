"""PM4 type-3 packets: the one encoder and the one decoder, over the generated tables in
amdq.hw.pm4_tables (opcodes, register ranges, body layouts and event types, from Linux nvd.h and
soc15d.h). Everything in pm4_tables is available from here too."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from .layout import Words
from .pm4_tables import *  # noqa: F401,F403
from .pm4_tables import (HEADER, LAYOUTS_GFX9, LAYOUTS_GFX10, NOP_ONE_DWORD_COUNT, OPCODES_GFX9, OPCODES_GFX10,
                         REG_RANGES)

class BadPacket(ValueError):
    """A PM4 stream that does not decode; `index` is the dword where the bad packet starts."""

    def __init__(self, msg: str, index: int):
        super().__init__(f"PM4 dword {index}: {msg}")
        self.index = index


@dataclass
class Packet:
    """One decoded type-3 packet (or a type-2 filler: name 'TYPE2', opcode -1)."""
    name: str
    opcode: int
    fields: dict[str, Any]
    size: int                     # dwords, header included
    shader_type: int = 0
    predicate: int = 0


class PM4Set:
    """Opcodes and body layouts of one generation, with the one encoder and decoder of its packets."""

    def __init__(self, gen: int, opcodes: dict[str, int], layouts: dict[str, Words]):
        self.gen, self.opcodes, self.layouts = gen, opcodes, layouts
        self._compiled: dict[str, Any] = {}        # name -> Words.decoder() of its fixed layout (None: has a tail)
        self._headers: dict[int, dict[str, int]] = {}   # header dword -> its fields (read-only dicts)
        self._plans: dict[int, tuple | None] = {}      # header dword -> fixed(header)
        self._split: dict[str, tuple | None] = {}      # name -> (key, values) of its fixed layout (see head)
        self._heads: dict[int, tuple | None] = {}      # header dword -> head(header)
        self.names: dict[int, str] = {}
        for name, op in sorted(opcodes.items(), key=lambda kv: (kv[0] not in layouts, len(kv[0]), kv[0])):
            self.names.setdefault(op, name)

    def encode(self, name: str, *, shader_type: int = 0, predicate: int = 0, **fields: Any) -> list[int]:
        """Whole packet (header included). Register writes take REG (absolute dword address) and VALUES;
        packets without a layout take BODY (list of dwords)."""
        if name not in self.opcodes:
            raise KeyError(f"unknown PM4 packet {name!r}")
        lay = self.layouts.get(name)
        if lay is None:
            body = [int(x) for x in fields.pop("BODY", [])]
            if fields:
                raise KeyError(f"{name} has no layout; give BODY=[dwords]")
        else:
            if name in REG_RANGES and "REG" in fields:
                start, end = REG_RANGES[name]
                reg, n = int(fields.pop("REG")), len(fields.get("VALUES", ()))
                if not (start <= reg and reg + max(n, 1) <= end):
                    raise ValueError(f"{name}: register {reg:#x} (+{n}) is outside [{start:#x}, {end:#x})")
                fields["REG_OFFSET"] = reg - start
            body = lay.encode(**fields)
        if name == "NOP" and not body:
            return [header(self.opcodes["NOP"], 1, shader_type, predicate, count=NOP_ONE_DWORD_COUNT)]
        return [header(self.opcodes[name], len(body) + 1, shader_type, predicate)] + body

    def fixed(self, h: int) -> tuple | None:
        """(name, opcode, size in dwords, compiled decoder of the body, shader_type, predicate) of the packet
        whose header is `h` when its layout is all fixed words and the header's COUNT says exactly that many (what
        decode does for it: the compiled decoder over the body); None for any other header."""
        plan = self._plans.get(h, False)
        if plan is False:
            hd, plan = HEADER.decode(h), None
            name = self.names.get(hd["IT_OPCODE"]) if hd["TYPE"] == 3 else None
            lay = self.layouts.get(name) if name is not None else None
            if lay is not None and name not in REG_RANGES and hd["COUNT"] != NOP_ONE_DWORD_COUNT and \
                    hd["COUNT"] + 1 == len(lay.words):
                fast = self._compiled.get(name, False)
                if fast is False:
                    fast = self._compiled[name] = lay.decoder()
                if fast is not None:
                    plan = (name, hd["IT_OPCODE"], hd["COUNT"] + 2, fast, hd["SHADER_TYPE"], hd["PREDICATE"])
            if len(self._plans) >= 4096:
                self._plans.clear()
            self._plans[h] = plan
        return plan

    def prepare(self, names) -> None:
        """Compile the decoders of these packets now (each is otherwise compiled when its first packet comes): an
        engine made ready decodes its first packets at the cost of every later one."""
        for name in names:
            lay = self.layouts.get(name)
            if lay is None or name in REG_RANGES or lay.tail or lay.optional:
                continue
            if name not in self._compiled:
                self._compiled[name] = lay.decoder()
            if name not in self._split:
                self._split[name] = self._make_split(lay)

    @staticmethod
    def _make_split(lay: Words) -> tuple | None:
        split = lay.value_decoder()
        if split is None:
            return None
        ctrl, values = split
        return eval("lambda m, i: (m[i], " + "".join(f"m[i + {k + 1}], " for k in ctrl) + ")"), values

    def head(self, h: int) -> tuple | None:
        """(key, values) of the fixed packet whose header is `h` (see fixed) when its layout has value words
        (Words.value_decoder): key(m, i) is the header and control dwords of the packet at m[i], all its decoded
        control fields depend on; values(m, i + 1) its value words' fields. None for any other header."""
        hp = self._heads.get(h, False)
        if hp is False:
            plan = self.fixed(h)
            hp = None
            if plan is not None:
                name = plan[0]
                hp = self._split.get(name, False)
                if hp is False:
                    hp = self._split[name] = self._make_split(self.layouts[name])
            if len(self._heads) >= 4096:
                self._heads.clear()
            self._heads[h] = hp
        return hp

    def decode(self, dwords: Sequence[int], i: int = 0) -> Packet:
        """The packet starting at dwords[i]. Raises BadPacket (never anything else) on a malformed stream."""
        if not 0 <= i < len(dwords):
            raise BadPacket("read past the end of the stream", i)
        h = int(dwords[i]) & 0xFFFFFFFF
        plan = self.fixed(h)
        if plan is not None and i + plan[2] <= len(dwords):
            name, op, size, fast, st, pred = plan
            return Packet(name, op, fast([int(x) & 0xFFFFFFFF for x in dwords[i + 1:i + size]]), size, st, pred)
        hd = self._headers.get(h)
        if hd is None:                              # (a stream repeats a few headers: each is decoded once)
            if len(self._headers) >= 4096:
                self._headers.clear()
            hd = self._headers[h] = HEADER.decode(h)
        if hd["TYPE"] == 2:
            return Packet("TYPE2", -1, {}, 1)
        if hd["TYPE"] != 3:
            raise BadPacket(f"type-{hd['TYPE']} packet (header {h:#010x}); only type 3 and type-2 fillers are valid", i)
        op = hd["IT_OPCODE"]
        name = self.names.get(op)
        if name is None:
            raise BadPacket(f"unknown IT_OPCODE {op:#04x} (header {h:#010x})", i)
        if name == "NOP" and hd["COUNT"] == NOP_ONE_DWORD_COUNT:
            return Packet("NOP", op, {"DATA": []}, 1, hd["SHADER_TYPE"], hd["PREDICATE"])
        size = hd["COUNT"] + 2
        if i + size > len(dwords):
            raise BadPacket(f"{name} needs {size} dwords, the stream has {len(dwords) - i}", i)
        body = [int(x) & 0xFFFFFFFF for x in dwords[i + 1:i + size]]
        lay = self.layouts.get(name)
        if lay is None:
            fields: dict[str, Any] = {"BODY": body}
        else:
            try:
                fields = lay.decode(body)
            except ValueError as e:
                raise BadPacket(str(e), i) from None
            if name in REG_RANGES:
                fields["REG"] = REG_RANGES[name][0] + fields.pop("REG_OFFSET")
        return Packet(name, op, fields, size, hd["SHADER_TYPE"], hd["PREDICATE"])

    def walk(self, dwords: Sequence[int], start: int = 0, end: int | None = None) -> Iterator[tuple[int, Packet]]:
        """(index, packet) for every packet in dwords[start:end]."""
        i, end = start, len(dwords) if end is None else end
        while i < end:
            p = self.decode(dwords[:end], i)
            yield i, p
            i += p.size


def header(opcode: int, ndwords: int, shader_type: int = 0, predicate: int = 0, count: int | None = None) -> int:
    """Type-3 header of a packet of `ndwords` dwords in total (COUNT = ndwords - 2)."""
    c = ndwords - 2 if count is None else count
    if not 0 <= c < 1 << 14:
        raise ValueError(f"PM4 packet of {ndwords} dwords does not fit the 14-bit COUNT")
    return HEADER.encode(TYPE=3, COUNT=c, IT_OPCODE=opcode, SHADER_TYPE=shader_type, PREDICATE=predicate)


GFX9 = PM4Set(9, OPCODES_GFX9, LAYOUTS_GFX9)
GFX10 = PM4Set(10, OPCODES_GFX10, LAYOUTS_GFX10)


def table(gen: int = 11) -> PM4Set:
    """The packet set of a GFX major version: gfx9/CDNA (soc15d.h) or gfx10+ (nvd.h)."""
    return GFX9 if gen < 10 else GFX10


def encode(name: str, gen: int = 11, **fields: Any) -> list[int]:
    """Encode one packet for GFX generation `gen` (see PM4Set.encode)."""
    return table(gen).encode(name, **fields)


def decode(dwords: Sequence[int], i: int = 0, gen: int = 11) -> Packet:
    """Decode the packet at dwords[i] for GFX generation `gen` (see PM4Set.decode)."""
    return table(gen).decode(dwords, i)
