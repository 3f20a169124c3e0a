"""Registers as live objects: register maps bound to a backend, with field access, reverse lookup and tracing.

A register's dword address is `bases[ip][instance][base_index] + offset` (shared/facts README; Linux
amdgpu `soc15_common.h` SOC15_REG_OFFSET). The offsets and fields come from the generated tables of
`amdq.hw.regs`; the segment bases per IP instance from IP discovery (`amdq.hw.discovery`) or, for the
simulated GPU, from the usual base tables (`regs.bases`). One `Layout` places every IP block instance
of a device; `Registers` binds a layout to a backend:

    regs = Registers(Layout.for_target(get_target("gfx1100")), MemoryBackend())
    r = regs.GC.regCP_HQD_PQ_CONTROL
    r.write(QUEUE_SIZE=5, UNORD_DISPATCH=1); r.update(QUEUE_SIZE=9); r.read_fields()["QUEUE_SIZE"]
    regs.xcc(3).GC.regCP_HQD_ACTIVE.read()        # GC instance of XCC 3 (gfx942 has 8)
    regs.name_of(0x1fba + 0x1260)                 # 'GC.regCP_HQD_PQ_CONTROL'
    regs.tracer = print_access                    # sees every read and write (AM_DEBUG=4 installs it)

A backend is anything with `read32(addr)` / `write32(addr, value)` on dword MMIO addresses: a mapped
BAR (`BufferBackend` over an mmap of resource5), the simulated register file (`amdq.sim.regfile`),
later the USB bridge. Field values may be given by name where the enum headers name them
(`regs.FIELD_ENUMS`: SH_MEM_CONFIG.ALIGNMENT_MODE="UNALIGNED").
"""
from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, TextIO

from ..errors import FieldOverflow, RegisterError, UnknownField, UnknownRegister, UnsupportedTarget
from . import regs as R
from .regs.enums import FIELD_ENUMS

IPVersion = tuple[int, int, int]

# Block name -> register-table name of amdq.hw.regs where they differ (SDMA0/1 share the SDMA table; the
# discovery name of NBIO is NBIF).
TABLE_OF = {"SDMA0": "SDMA", "SDMA1": "SDMA", "SDMA2": "SDMA", "SDMA3": "SDMA", "NBIF": "NBIO"}
# IP blocks replicated per compute die (XCC): one GC instance per XCC (Linux amdgpu GET_INST(GC, xcc)).
XCC_BLOCKS = ("GC",)
# The simulated GPU's choice, not a hardware fact: XCC k's GC segments sit at the family base + k * stride
# (dwords). Real boards report their own bases in the IP discovery table, which is what the driver uses.
SIM_XCC_STRIDE = 0x40000
# The simulated GPU's choice, not a hardware fact: segments an IP version's registers use that its generation's
# base table leaves empty (vega20_ip_offset.h gives NBIO segments 0-3; NBIO 7.9's headers put the S2A doorbell
# entries in segment 5 and DOORBELL0_CTRL_ENTRY_* in segment 8). Above every other register of the layout, past
# BAR5 (reached through PCIE_INDEX2/DATA2). Real boards report their own bases in IP discovery.
SIM_SEGMENTS: dict[tuple[str, int, int], dict[int, int]] = {("NBIO", 7, 9): {5: 0x2400000, 8: 0x2500000}}


class Backend(Protocol):
    """32-bit MMIO at dword addresses."""

    def read32(self, addr: int) -> int: ...
    def write32(self, addr: int, value: int) -> None: ...


class MemoryBackend:
    """Registers as a dict of dwords (0 until written): for tests and offline decoding."""

    def __init__(self, values: Mapping[int, int] | None = None):
        self.values: dict[int, int] = dict(values or {})

    def read32(self, addr: int) -> int:
        return self.values.get(addr, 0)

    def write32(self, addr: int, value: int) -> None:
        self.values[addr] = value & 0xFFFFFFFF


class BufferBackend:
    """MMIO through a writable buffer (an mmap of the register BAR, PCI resource5): dword addr -> byte addr*4."""

    def __init__(self, buf: Any):
        self.mv = memoryview(buf).cast("B")

    def _check(self, addr: int) -> int:
        pos = addr * 4
        if not 0 <= pos <= len(self.mv) - 4:
            raise RegisterError(f"register address {addr:#x} is outside the {len(self.mv):#x}-byte register BAR")
        return pos

    def read32(self, addr: int) -> int:
        return struct.unpack_from("<I", self.mv, self._check(addr))[0]

    def write32(self, addr: int, value: int) -> None:
        struct.pack_into("<I", self.mv, self._check(addr), value & 0xFFFFFFFF)


# --- layout: where every register of a device is ------------------------------------------------------
@dataclass(frozen=True)
class IPBlock:
    """One IP block of a device: its name (GC, MMHUB, MP0, ...), version and segment bases per instance."""
    name: str
    version: IPVersion
    bases: tuple[tuple[int, ...], ...]

    @property
    def instances(self) -> int:
        return len(self.bases)


def _table(name: str, version: IPVersion) -> R.RegMap | None:
    try:
        return R.load(TABLE_OF.get(name, name), version)
    except UnsupportedTarget:
        return None


class Layout:
    """Every IP block instance of a device and the register tables that fit their versions."""

    def __init__(self, blocks: Sequence[IPBlock] | Mapping[str, IPBlock], gfx: int | None = None):
        items = blocks.values() if isinstance(blocks, Mapping) else blocks
        self.blocks: dict[str, IPBlock] = {}
        for b in items:
            if b.name in self.blocks:
                raise RegisterError(f"IP block {b.name} appears twice in the layout")
            self.blocks[b.name] = b
        self.tables: dict[str, R.RegMap] = {}
        for b in self.blocks.values():
            t = _table(b.name, b.version)
            if t is not None:
                self.tables[b.name] = t
        gc = self.blocks.get("GC")
        self.gfx = gfx if gfx is not None else (gc.version[0] if gc else None)
        self._index: dict[int, list[tuple[str, int, str]]] | None = None

    @classmethod
    def for_target(cls, target: Any) -> "Layout":
        """The layout of a supported target as the simulated GPU has it (see `target_blocks`)."""
        return cls(target_blocks(target))

    def table(self, block: str) -> R.RegMap:
        b = self._block(block)
        if b.name not in self.tables:
            raise UnknownRegister(f"no register table for {b.name} {'.'.join(map(str, b.version))}")
        return self.tables[b.name]

    def _block(self, block: str) -> IPBlock:
        b = self.blocks.get(block.upper())
        if b is None:
            raise UnknownRegister(f"no IP block {block!r} in this layout; it has {', '.join(self.blocks)}")
        return b

    def reg(self, block: str, name: str) -> R.Reg:
        t = self.table(block)
        try:
            return t[name]
        except KeyError:
            raise UnknownRegister(f"{block.upper()} {'.'.join(map(str, t.version))} has no register {name}") from None

    def address(self, block: str, name: str, inst: int = 0) -> int:
        """Absolute dword address of register `name` of instance `inst` of `block`."""
        b, reg = self._block(block), self.reg(block, name)
        if not 0 <= inst < b.instances:
            raise UnknownRegister(f"{b.name} has {b.instances} instance(s); there is no instance {inst}")
        segs = b.bases[inst]
        if reg.base_index >= len(segs):
            raise RegisterError(f"{b.name}[{inst}].{reg.name}: segment {reg.base_index} has no base ({len(segs)} given)")
        return segs[reg.base_index] + reg.offset

    def lookup(self, addr: int) -> list[tuple[str, int, str]]:
        """Every (block, instance, register name) at dword address `addr` (empty if none)."""
        if self._index is None:
            idx: dict[int, list[tuple[str, int, str]]] = {}
            for name, t in self.tables.items():
                b = self.blocks[name]
                for rname in t:
                    reg = t[rname]
                    for inst, segs in enumerate(b.bases):
                        if reg.base_index < len(segs):
                            idx.setdefault(segs[reg.base_index] + reg.offset, []).append((name, inst, reg.name))
            self._index = idx
        return self._index.get(addr, [])

    def enums(self, reg: str) -> dict[str, dict[str, int]]:
        """Named field values of register `reg` (GC generation's enum header), {} if none."""
        key = reg[3:] if reg.startswith("reg") else reg[2:] if reg.startswith("mm") else reg
        return FIELD_ENUMS.get(self.gfx, {}).get(key, {}) if self.gfx is not None else {}


def target_blocks(target: Any) -> list[IPBlock]:
    """The IP blocks of a target (amdq.hw.targets.Target) as the simulated GPU lays them out: versions from
    `Target.ip`, segment bases from the generation's base table (`regs.bases`), SDMA as the SDMA0/SDMA1 of
    that table, GC replicated per XCC at SIM_XCC_STRIDE, the segments of SIM_SEGMENTS added."""
    table = R.bases(target.gen.bases)
    out = []
    for ip, ver in target.ip.items():
        names = [n for n in ("SDMA0", "SDMA1") if n in table] if ip == "SDMA" else [ip]
        for n in names:
            if n not in table:
                raise RegisterError(f"{target.arch}: base table {target.gen.bases!r} has no {n}")
            insts = [tuple(s) for s in table[n]]
            extra = SIM_SEGMENTS.get((n, *ver[:2]))
            if extra:
                insts = [tuple(extra.get(i, b) for i, b in enumerate(s + (0,) * (max(extra) + 1 - len(s))))
                         for s in insts]
            if n in XCC_BLOCKS and target.xcc > 1:
                insts = [tuple(b + k * SIM_XCC_STRIDE if b else 0 for b in insts[0]) for k in range(target.xcc)]
            out.append(IPBlock(n, tuple(ver), tuple(insts)))
    return out


# --- tracing -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Access:
    """One register access: 'R' or 'W', dword address, value read or written, the register if known."""
    op: str
    addr: int
    value: int
    reg: "Register | None"

    def describe(self) -> str:
        """`W GC[0].regCP_HQD_PQ_CONTROL @0x1fba+... = 0x10000105 QUEUE_SIZE=5 ...` (non-zero fields)."""
        if self.reg is None:
            return f"{self.op} ? @{self.addr:#x} = {self.value:#010x}"
        fields = " ".join(f"{k}={v}" for k, v in self.reg.decode(self.value, names=True).items() if v not in (0, "0"))
        return f"{self.op} {self.reg.qualname} @{self.addr:#x} = {self.value:#010x}" + (f" {fields}" if fields else "")


Tracer = Callable[[Access], None]


class AccessPrinter:
    """A tracer printing every access as register name, address, value and decoded fields (AM_DEBUG=4)."""

    def __init__(self, out: TextIO | None = None, prefix: str = "am: "):
        self.out, self.prefix = out, prefix

    def __call__(self, a: Access) -> None:
        print(self.prefix + a.describe(), file=self.out or sys.stderr)


def debug_level() -> int:
    """AM_DEBUG (0-4) from the environment; a value that is not a number is an error."""
    v = os.environ.get("AM_DEBUG", "0").strip() or "0"
    try:
        return int(v)
    except ValueError:
        raise RegisterError(f"AM_DEBUG={v!r} is not a level (0-4)") from None


# --- bound registers ------------------------------------------------------------------------------------
class Register:
    """One register of one block instance, bound to a backend."""

    __slots__ = ("regs", "block", "inst", "reg", "addr")

    def __init__(self, regs: "Registers", block: str, inst: int, reg: R.Reg, addr: int):
        self.regs, self.block, self.inst, self.reg, self.addr = regs, block, inst, reg, addr

    @property
    def name(self) -> str:
        return self.reg.name

    @property
    def qualname(self) -> str:
        """BLOCK[inst].regNAME (BLOCK.regNAME for a single-instance block)."""
        b = self.regs.layout.blocks[self.block]
        return f"{self.block}{f'[{self.inst}]' if b.instances > 1 else ''}.{self.reg.name}"

    @property
    def fields(self) -> dict:
        return self.reg.fields

    def enum(self, field: str) -> dict[str, int]:
        """Named values of a field ({} when the headers name none)."""
        self._field(field)
        return dict(self.regs.layout.enums(self.reg.name).get(field, {}))

    def _field(self, field: str):
        f = self.reg.fields.get(field)
        if f is None:
            raise UnknownField(f"{self.qualname} has no field {field}; it has {', '.join(self.reg.fields) or 'none'}")
        return f

    def _value(self, field: str, v: int | str) -> int:
        if isinstance(v, str):
            names = self.regs.layout.enums(self.reg.name).get(field, {})
            if v not in names:
                raise UnknownField(f"{self.qualname}.{field} has no value named {v!r}"
                                   + (f"; it has {', '.join(names)}" if names else "; it has no named values"))
            return names[v]
        return int(v)

    def encode(self, **fields: int | str) -> int:
        """The register value with these fields set and the others 0."""
        word = 0
        for k, v in fields.items():
            f = self._field(k)
            try:
                word = f.put(word, self._value(k, v))
            except ValueError:
                raise FieldOverflow(f"{self.qualname}.{k}={v} does not fit bits {f.hi}:{f.lo}") from None
        return word

    def decode(self, value: int, names: bool = False) -> dict[str, int | str]:
        """Field values of a register value (with names=True, a field's value name where one is known)."""
        out: dict[str, int | str] = dict(self.reg.decode(value))
        if names:
            for field, vals in self.regs.layout.enums(self.reg.name).items():
                inv = {v: k for k, v in vals.items()}
                if field in out and out[field] in inv:
                    out[field] = inv[out[field]]  # type: ignore[index]
        return out

    def read(self) -> int:
        return self.regs._read(self.addr, self)

    def read_fields(self, names: bool = False) -> dict[str, int | str]:
        return self.decode(self.read(), names)

    def write(self, value: int | None = None, **fields: int | str) -> None:
        """Write a whole value, or the given fields (the others 0)."""
        if value is not None and fields:
            raise RegisterError(f"{self.qualname}.write: give a value or fields, not both")
        if value is None:
            value = self.encode(**fields)
        elif not 0 <= value <= 0xFFFFFFFF:
            raise FieldOverflow(f"{self.qualname}: {value:#x} is not a 32-bit value")
        self.regs._write(self.addr, value, self)

    def update(self, **fields: int | str) -> int:
        """Read-modify-write: set these fields, keep the others; returns the value written."""
        old = self.read()
        for k, v in fields.items():
            f = self._field(k)
            try:
                old = f.put(old, self._value(k, v))
            except ValueError:
                raise FieldOverflow(f"{self.qualname}.{k}={v} does not fit bits {f.hi}:{f.lo}") from None
        self.regs._write(self.addr, old, self)
        return old

    def __repr__(self) -> str:
        return f"<{self.qualname} @{self.addr:#x}>"


class RegisterMap:
    """The registers of one IP block instance: `regX` attributes (or items) giving bound `Register`s."""

    def __init__(self, regs: "Registers", block: str, inst: int):
        self._regs, self.block, self.inst = regs, block, inst
        self._cache: dict[str, Register] = {}

    @property
    def version(self) -> IPVersion:
        return self._regs.layout.blocks[self.block].version

    @property
    def bases(self) -> tuple[int, ...]:
        return self._regs.layout.blocks[self.block].bases[self.inst]

    def __getitem__(self, name: str) -> Register:
        r = self._cache.get(name)
        if r is None:
            lay = self._regs.layout
            reg = lay.reg(self.block, name)
            r = Register(self._regs, self.block, self.inst, reg, lay.address(self.block, name, self.inst))
            self._cache[name] = r
        return r

    def __getattr__(self, name: str) -> Register:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __contains__(self, name: str) -> bool:
        t = self._regs.layout.tables.get(self.block)
        return t is not None and name in t

    def __iter__(self) -> Iterator[str]:
        return iter(self._regs.layout.table(self.block))

    def __repr__(self) -> str:
        return f"RegisterMap({self.block}[{self.inst}] {'.'.join(map(str, self.version))})"


class XCC:
    """The register maps seen from one compute die: XCC-replicated blocks (GC) select instance `index`."""

    def __init__(self, regs: "Registers", index: int):
        self._regs, self.index = regs, index

    def __getattr__(self, name: str) -> RegisterMap:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._regs.block(name, self.index if name.upper() in XCC_BLOCKS else 0)


class Registers:
    """All register maps of a device bound to one backend, with reverse lookup and one tracer hook.

    `regs.GC` is instance 0 of GC, `regs.block("SDMA0", 1)` another instance, `regs.xcc(i)` the view
    of compute die i. `tracer` (a callable taking an `Access`) sees every read and write made through
    this object; AM_DEBUG=4 installs `AccessPrinter` when none is given (unless from_env is False, as
    for the simulator's own side-effect-free view)."""

    def __init__(self, layout: Layout, backend: Backend, tracer: Tracer | None = None, from_env: bool = True):
        self.layout, self.backend = layout, backend
        if tracer is None and from_env and debug_level() >= 4:
            tracer = AccessPrinter()
        self.tracer: Tracer | None = tracer
        self._maps: dict[tuple[str, int], RegisterMap] = {}

    def block(self, name: str, inst: int = 0) -> RegisterMap:
        b = self.layout._block(name)
        if not 0 <= inst < b.instances:
            raise UnknownRegister(f"{b.name} has {b.instances} instance(s); there is no instance {inst}")
        m = self._maps.get((b.name, inst))
        if m is None:
            m = self._maps[(b.name, inst)] = RegisterMap(self, b.name, inst)
        return m

    def __getattr__(self, name: str) -> RegisterMap:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.block(name)

    @property
    def num_xcc(self) -> int:
        gc = self.layout.blocks.get("GC")
        return gc.instances if gc else 0

    def xcc(self, index: int) -> XCC:
        if not 0 <= index < max(self.num_xcc, 1):
            raise UnknownRegister(f"this device has {self.num_xcc} XCC(s); there is no XCC {index}")
        return XCC(self, index)

    # reverse lookup
    def lookup(self, addr: int) -> Register | None:
        """The register at dword address `addr` (the first block registered there), or None."""
        hits = self.layout.lookup(addr)
        if not hits:
            return None
        block, inst, name = hits[0]
        return self.block(block, inst)[name]

    def name_of(self, addr: int) -> str:
        """`BLOCK[inst].regNAME` of an address; an unknown address is an UnknownRegister error."""
        r = self.lookup(addr)
        if r is None:
            raise UnknownRegister(f"no register at dword address {addr:#x} in this device's layout")
        return r.qualname

    # raw access (traced, named when known)
    def read32(self, addr: int) -> int:
        return self._read(addr, None)

    def write32(self, addr: int, value: int) -> None:
        self._write(addr, value, None)

    def _read(self, addr: int, reg: Register | None) -> int:
        v = self.backend.read32(addr) & 0xFFFFFFFF
        if self.tracer is not None:
            self.tracer(Access("R", addr, v, reg if reg is not None else self.lookup(addr)))
        return v

    def _write(self, addr: int, value: int, reg: Register | None) -> None:
        if self.tracer is not None:
            self.tracer(Access("W", addr, value, reg if reg is not None else self.lookup(addr)))
        self.backend.write32(addr, value)
