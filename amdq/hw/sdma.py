"""SDMA packets: the one encoder and the one decoder, over the generated per-version layouts in
amdq.hw.sdma_tables (from Linux *_sdma_pkt_open.h). Everything in sdma_tables is available from here too."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .layout import Words
from .sdma_tables import *  # noqa: F401,F403
from .sdma_tables import LAYOUTS_4, LAYOUTS_5, LAYOUTS_6, OPS_4, OPS_5, OPS_6

class BadPacket(ValueError):
    """An SDMA stream that does not decode; `index` is the dword where the bad packet starts."""

    def __init__(self, msg: str, index: int):
        super().__init__(f"SDMA dword {index}: {msg}")
        self.index = index


@dataclass
class Packet:
    name: str
    op: int
    sub_op: int
    fields: dict[str, Any]
    size: int                     # dwords


class SDMASet:
    """Packet layouts of one SDMA major version (4: gfx9/CDNA, 5: gfx10, 6: gfx11 and gfx12's SDMA 7 use
    the 6.x layouts here), with the one encoder and decoder of its packets."""

    def __init__(self, version: int, layouts: dict[str, Words], ops: dict[str, tuple[int, int | None]]):
        self.version, self.layouts, self.ops = version, layouts, ops
        self.by_op: dict[tuple[int, int | None], str] = {}
        for name, (op, sub) in ops.items():
            self.by_op.setdefault((op, sub if "sub_op" in layouts[name].where else None), name)
        # (name, length, compiled decoder) of the fixed-length packets by their header's low 16 bits (op, sub_op),
        # filled as they are first decoded; the compiled decoders by packet name (prepare, or that first decode)
        self._fixed: dict[int, tuple[str, int, Callable]] = {}
        self._decoders: dict[str, Callable] = {}

    def prepare(self) -> None:
        """Compile the decoder of every fixed-length packet now (an engine made ready decodes its first packets at
        the cost of every later one)."""
        for name, lay in self.layouts.items():
            if not lay.tail and not lay.optional:
                self._decoder(name)

    def _decoder(self, name: str) -> Callable:
        """The compiled decoder of the fixed-length packet `name` (compiled once)."""
        dec = self._decoders.get(name)
        if dec is None:
            dec = self._decoders[name] = self.layouts[name].decoder()
        return dec

    def encode(self, name: str, **fields: Any) -> list[int]:
        """Whole packet; op/sub_op are filled in. 64-bit values go by their base name (src_addr, dst_addr, ...)."""
        if name not in self.layouts:
            raise KeyError(f"SDMA {self.version}: unknown packet {name!r}")
        op, sub = self.ops[name]
        fields.setdefault("op", op)
        if "sub_op" in self.layouts[name].where:
            fields.setdefault("sub_op", sub or 0)
        return self.layouts[name].encode(**fields)

    def encoder(self, name: str, *fields: str, **fixed: Any) -> Callable[..., list[int]]:
        """A fast `encode(name, **fixed, **dict(zip(fields, values)))` taking the values in order (Words.encoder)."""
        op, sub = self.ops[name]
        fixed.setdefault("op", op)
        if "sub_op" in self.layouts[name].where:
            fixed.setdefault("sub_op", sub or 0)
        return self.layouts[name].encoder(fields, **fixed)

    def decode(self, dwords: Sequence[int], i: int = 0) -> Packet:
        """The packet starting at dwords[i]. Raises BadPacket (never anything else) on a malformed stream."""
        if not 0 <= i < len(dwords):
            raise BadPacket("read past the end of the stream", i)
        h = int(dwords[i]) & 0xFFFFFFFF
        op, sub = h & 0xFF, (h >> 8) & 0xFF
        fixed = self._fixed.get(h & 0xFFFF)
        if fixed is not None and i + fixed[1] <= len(dwords):
            name, n, dec = fixed
            return Packet(name, op, sub, dec(_words(dwords, i, n)), n)
        name = self.by_op.get((op, sub)) or self.by_op.get((op, None))
        if name is None:
            raise BadPacket(f"unknown op {op} sub_op {sub} (header {h:#010x})", i)
        lay = self.layouts[name]
        n = lay.length(_words(dwords, i, len(lay.words)))
        if n is None or i + n > len(dwords):
            raise BadPacket(f"{name} runs past the end of the stream", i)
        try:
            fields = lay.decode(_words(dwords, i, n))
        except ValueError as e:
            raise BadPacket(str(e), i) from None
        if fixed is None and not lay.tail and not lay.optional:
            self._fixed[h & 0xFFFF] = (name, n, self._decoder(name))
        return Packet(name, op, sub, fields, n)

    def walk(self, dwords: Sequence[int], start: int = 0, end: int | None = None) -> Iterator[tuple[int, Packet]]:
        """(index, packet) for every packet in dwords[start:end]."""
        i, end = start, len(dwords) if end is None else end
        while i < end:
            p = self.decode(dwords[:end], i)
            yield i, p
            i += p.size


def _words(dwords: Sequence[int], i: int, n: int) -> list[int]:
    """dwords[i:i + n] as unsigned 32-bit Python ints (a numpy ring converts in one call)."""
    part = dwords[i:i + n]
    if isinstance(part, np.ndarray) and part.dtype == np.uint32:
        return part.tolist()
    return [int(x) & 0xFFFFFFFF for x in part]


SDMA4 = SDMASet(4, LAYOUTS_4, OPS_4)
SDMA5 = SDMASet(5, LAYOUTS_5, OPS_5)
SDMA6 = SDMASet(6, LAYOUTS_6, OPS_6)


def table(version: int = 6) -> SDMASet:
    """The packet set of an SDMA IP major version (7 uses 6's layouts; the facts stop at 6.0)."""
    return SDMA4 if version < 5 else SDMA5 if version == 5 else SDMA6


def encode(name: str, version: int = 6, **fields: Any) -> list[int]:
    """Encode one packet for SDMA IP major `version` (see SDMASet.encode)."""
    return table(version).encode(name, **fields)


def decode(dwords: Sequence[int], i: int = 0, version: int = 6) -> Packet:
    """Decode the packet at dwords[i] for SDMA IP major `version` (see SDMASet.decode)."""
    return table(version).decode(dwords, i)
