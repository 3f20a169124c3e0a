"""The simulated MMIO register file: stored dwords, with side effects as handlers named after registers.

A side effect is a method named after the register it belongs to, on the register file or on a part
given to it (the simulated PSP, SMU, GMC ...):

    class PSP:
        def on_write_regMP0_SMN_C2PMSG_64(self, value): ...     # after the value is stored
        def on_read_regMP0_SMN_C2PMSG_81(self): return ...       # the value the driver reads

A handler may take one more argument, the `Register` (bound to the raw, handler-free view of the file)
that was accessed, to know the instance or decode the value with the very table the driver encoded
it with. Handler names are checked against the device's layout when the file is built: a handler for
a register the layout does not have is an error, not a silent no-op. `raw` is the register maps bound
to the stored values without side effects, for handlers to update other registers.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import RegisterError
from ..hw.regmap import Layout, MemoryBackend, Registers

READ, WRITE = "on_read_", "on_write_"


@dataclass(frozen=True)
class _Handler:
    fn: Callable
    name: str          # Part.on_write_regX
    with_reg: bool     # takes the accessed Register too
    block: str
    inst: int
    reg: str


class RegisterFile:
    """Stores register values (0 until written) and dispatches accesses to per-register handlers; it is a
    register backend (read32/write32), so the driver's `Registers` bind to it as to a BAR."""

    def __init__(self, layout: Layout, *parts: Any):
        self.layout = layout
        self.store = MemoryBackend()
        self.raw = Registers(layout, self.store, from_env=False)   # no side effects, never traced
        self._on_read: dict[int, _Handler] = {}
        self._on_write: dict[int, _Handler] = {}
        self._bound: tuple[dict[int, Any], dict[int, Any]] = ({}, {})   # addr -> the raw Register its read / write
        #                                                                 handler is given (looked up once)
        names = {n for t in layout.tables.values() for n in t}
        for part in (self, *parts):
            for attr in dir(type(part)):
                for prefix, table in ((READ, self._on_read), (WRITE, self._on_write)):
                    if attr.startswith(prefix):
                        self._bind(part, attr, attr[len(prefix):], names, table)

    def _bind(self, part: Any, attr: str, reg: str, names: set[str], table: dict) -> None:
        if reg not in names:
            raise RegisterError(f"{type(part).__name__}.{attr}: no register {reg} in this device's layout")
        fn = getattr(part, attr)
        with_reg = len(inspect.signature(fn).parameters) >= (1 if attr.startswith(READ) else 2)
        name = f"{type(part).__name__}.{attr}"
        for block, t in self.layout.tables.items():
            if reg not in t:
                continue
            for inst in range(self.layout.blocks[block].instances):
                addr = self.layout.address(block, reg, inst)
                prev = table.get(addr)
                if prev is not None and prev.name != name:
                    raise RegisterError(f"two handlers for {reg} at {addr:#x}: {prev.name} and {name}")
                if prev is None:
                    table[addr] = _Handler(fn, name, with_reg, block, inst, reg)

    def peek(self, addr: int) -> int:
        """The stored value, without side effects."""
        return self.store.read32(addr)

    def poke(self, addr: int, value: int) -> None:
        """Store a value without side effects (what hardware itself changes)."""
        self.store.write32(addr, value)

    def _reg(self, addr: int, h: _Handler, write: int) -> Any:
        bound = self._bound[write]
        r = bound.get(addr)
        if r is None:
            r = bound[addr] = self.raw.block(h.block, h.inst)[h.reg]
        return r

    def read32(self, addr: int) -> int:
        h = self._on_read.get(addr)
        if h is None:
            return self.store.read32(addr)
        v = h.fn(self._reg(addr, h, 0)) if h.with_reg else h.fn()
        return self.store.read32(addr) if v is None else int(v) & 0xFFFFFFFF

    def write32(self, addr: int, value: int) -> None:
        self.store.write32(addr, value)
        h = self._on_write.get(addr)
        if h is not None:
            if h.with_reg:
                h.fn(value & 0xFFFFFFFF, self._reg(addr, h, 1))
            else:
                h.fn(value & 0xFFFFFFFF)

    def handlers(self) -> dict[str, list[str]]:
        """{'read'|'write': [handler names]} (for diagnostics)."""
        return {"read": sorted({h.name for h in self._on_read.values()}),
                "write": sorted({h.name for h in self._on_write.values()})}
