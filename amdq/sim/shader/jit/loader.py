"""Relocatable x86-64 objects, as compiled.py's target machine emits them, loaded into executable memory without LLVM.

A warm process (its regions on disk) then never loads LLVM: MCJIT costs ~30 ms to import and start and ~0.4 ms per
object. link() reads the ELF with numpy and applies the relocations at address 0; place() maps the result, adding
its base to the few 8-byte slots that hold an address (the GOT's entries, absolute 64-bit relocations): everything
else the JIT emits is PC- or GOT-relative. The disk cache keeps the linked form (pack/unpack), so a warm load is a
read, a copy and those additions. What the JIT emits is position-independent code (large code model: relocations
against its own sections, its GOT and local functions) that may call functions of another object placed before it
(the imports a link allows: library.py's shared functions), through GOT entries or 8-byte absolute slots that
place() fills with the import's address; anything else (another undefined symbol, a writable section, another
relocation, a 32-bit absolute address, a PC-relative reference to an import) raises Unsupported, and compiled.py
loads that object through MCJIT as before.

Sources: the System V ABI (ELF64 headers, sections, symbols, RELA) and its AMD64 supplement (relocation types and
their calculations: S symbol, A addend, P place, GOT the table's address, G the symbol's entry offset in it).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import re
import struct
import zlib

import msgpack
import numpy as np

# ELF64 (little endian) records: section header, symbol, relocation with addend
SHDR = np.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"), ("offset", "<u8"),
                 ("size", "<u8"), ("link", "<u4"), ("info", "<u4"), ("addralign", "<u8"), ("entsize", "<u8")])
SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                ("size", "<u8")])
RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])

ET_REL, EM_X86_64 = 1, 62
SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL, SHT_X86_64_UNWIND = 2, 4, 8, 9, 0x70000001
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
UNBOUND = np.uint64(2**64 - 1)          # no address (yet)
GOT_SYMBOL = b"_GLOBAL_OFFSET_TABLE_"

# AMD64 relocation types: (name, width in bytes, signed, calculation), the calculation over
#   S the symbol's address, A the addend, P the place, GOT the table's address, G the symbol's entry offset in it
RELOCS = {
    1: ("R_X86_64_64", 8, False, "S+A"),
    2: ("R_X86_64_PC32", 4, True, "S+A-P"),
    4: ("R_X86_64_PLT32", 4, True, "S+A-P"),
    9: ("R_X86_64_GOTPCREL", 4, True, "G+GOT+A-P"),
    10: ("R_X86_64_32", 4, False, "S+A"),
    11: ("R_X86_64_32S", 4, True, "S+A"),
    24: ("R_X86_64_PC64", 8, True, "S+A-P"),
    25: ("R_X86_64_GOTOFF64", 8, True, "S+A-GOT"),
    26: ("R_X86_64_GOTPC32", 4, True, "GOT+A-P"),
    27: ("R_X86_64_GOT64", 8, True, "G+A"),
    29: ("R_X86_64_GOTPC64", 8, True, "GOT+A-P"),
    41: ("R_X86_64_GOTPCRELX", 4, True, "G+GOT+A-P"),
    42: ("R_X86_64_REX_GOTPCRELX", 4, True, "G+GOT+A-P"),
}
_GOT_USERS = np.zeros(max(RELOCS) + 2, bool)            # by type: the calculation needs the symbol's GOT entry
_GOT_USERS[[k for k, r in RELOCS.items() if "G+" in r[3]]] = True

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_KEEP: list = []        # the mappings: never unmapped (the functions in them stay callable for the process's life)


class Unsupported(ValueError):
    """The object needs something this loader does not do (MCJIT loads it instead)."""


def _cstr(table: bytes, at: int) -> bytes:
    return table[at:table.index(b"\0", at)]


class Linked:
    """An object laid out and relocated at address 0: its bytes (`code`), the offsets of the 8-byte slots that hold
    an address (`fixups`: the mapping's base is added to each), its global functions' offsets (`entries`) and the
    slots that hold an imported function's address (`imports`: name -> offsets, the address is added to each).
    What the disk cache keeps: mapping it is a copy and a few additions, no ELF reading."""

    __slots__ = ("code", "fixups", "entries", "imports")

    def __init__(self, code: bytes, fixups: np.ndarray, entries: dict[str, int],
                 imports: dict[str, np.ndarray] | None = None):
        self.code, self.fixups, self.entries, self.imports = code, fixups, entries, imports or {}


def load(obj: bytes, names: list[str]) -> dict[str, int]:
    """Map `obj` executable and relocated: the addresses of its global functions (`names` among them)."""
    return place(link(obj, names))


def link(obj: bytes | list[bytes], names: list[str], imports=frozenset()) -> Linked:
    """`obj` (or several objects, linked together: a symbol one leaves undefined is another's global) laid out and
    relocated at address 0 (raises Unsupported for what this loader does not do); `imports`: the names of functions
    it may leave undefined, bound when it is placed."""
    try:
        return _link(obj if isinstance(obj, list) else [obj], names, imports)
    except (ValueError, IndexError, KeyError, struct.error) as e:
        if isinstance(e, Unsupported):
            raise
        raise Unsupported(f"damaged object: {e}") from None


def place(lk: Linked, resolve=None) -> dict[str, int]:
    """Map a linked object executable at an address of the kernel's choosing: its global functions' addresses.
    resolve(name): the address of an import (LookupError: there is none, Unsupported here)."""
    code = lk.code
    bound = {}
    for name in lk.imports:
        try:
            if resolve is None:
                raise LookupError(name)
            bound[name] = int(resolve(name))
        except LookupError as e:
            raise Unsupported(f"import {name}: {e}") from None
    total = max(-(-len(code) // mmap.PAGESIZE) * mmap.PAGESIZE, mmap.PAGESIZE)
    m = mmap.mmap(-1, total, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    cb = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(cb)
    del cb                                          # (no export left: m can still be closed on a failure)
    m.write(code)
    _add64(m, lk.fixups, addr)                      # (a few: the GOT's entries, absolute addresses)
    for name, slots in lk.imports.items():          # (a few: the GOT entries of the library functions it calls)
        _add64(m, slots, bound[name])
    if _libc.mprotect(addr, total, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        m.close()
        raise Unsupported(f"mprotect: errno {ctypes.get_errno()}")
    _KEEP.append(m)
    if _PERFMAP:
        _perfmap(addr, len(code), lk.entries)
    return {n: addr + off for n, off in lk.entries.items()}


_PERFMAP = os.environ.get("AMDQ_SIM_JIT_PERFMAP", "").strip() not in ("", "0")


def perfmap_path() -> str:
    """Where perf looks for the names of a process's generated code."""
    return f"/tmp/perf-{os.getpid()}.map"


def _perfmap(addr: int, size: int, entries: dict[str, int]) -> None:
    """Name the placed object's global functions for perf (AMDQ_SIM_JIT_PERFMAP=1), one "start size name" line each
    in perf's map file of this process: a function runs to the next one (the internal ones it calls count in it)."""
    ends = sorted(set(entries.values()) | {size})
    try:
        with open(perfmap_path(), "a") as f:
            for name, off in sorted(entries.items(), key=lambda kv: kv[1]):
                f.write(f"{addr + off:x} {ends[ends.index(off) + 1] - off:x} {name}\n")
    except OSError:
        pass


def combine(parts: dict[str, Linked]) -> Linked:
    """Several linked objects as one, laid out one after the other (each from a 64-byte boundary): its entries
    are "<part>/<function>", the address slots of each moved with it. Placing it maps all of them at once."""
    return _combine(parts)[0]


def _combine(parts: dict[str, Linked]) -> tuple[Linked, dict[str, list[int]]]:
    """combine(parts), and where each part lies in it ([start, end))."""
    code, fixups, entries, spans, imports = bytearray(), [], {}, {}, {}
    for tag, lk in parts.items():
        at = -(-len(code) // 64) * 64
        code += bytes(at - len(code)) + lk.code
        spans[tag] = [at, len(code)]
        fx = lk.fixups.astype(np.int64) + at
        _add64(code, fx, at)                        # (a few per part: its GOT's entries, offsets in the part)
        fixups.append(fx)
        entries.update({f"{tag}/{name}": at + off for name, off in lk.entries.items()})
        for name, slots in lk.imports.items():
            imports.setdefault(name, []).append(slots.astype(np.int64) + at)
    fx = np.concatenate(fixups).astype(np.uint32) if fixups else np.zeros(0, np.uint32)
    imports = {n: np.concatenate(v).astype(np.uint32) for n, v in imports.items()}
    return Linked(bytes(code), fx, entries, imports), spans


MAGIC = b"amdq-linked-2\n"                # (2: with imports)
IMAGE_MAGIC = b"amdq-image-1\n"


def _framed(magic: bytes, body: bytes) -> bytes:
    """What the disk cache stores: `magic`, a CRC-32 of the body, the body."""
    return magic + struct.pack("<I", zlib.crc32(body)) + body


def _body(magic: bytes, blob: bytes, what: str) -> memoryview:
    """The body of what _framed wrote; Unsupported for another magic or a CRC that does not match."""
    n = len(magic)
    if blob[:n] != magic or len(blob) < n + 4:
        raise Unsupported(f"not a {what}")
    body = memoryview(blob)[n + 4:]
    if zlib.crc32(body) != struct.unpack_from("<I", blob, n)[0]:
        raise Unsupported(f"damaged {what} (CRC)")
    return body


def pack(lk: Linked) -> bytes:
    """A linked object as the disk cache stores it: MAGIC, a CRC-32 of the rest, msgpack of the fields."""
    return _framed(MAGIC, msgpack.packb({"code": lk.code, "fixups": lk.fixups.astype("<u4").tobytes(),
                                         "entries": lk.entries,
                                         "imports": {n: v.astype("<u4").tobytes() for n, v in lk.imports.items()}}))


def unpack(blob: bytes) -> Linked:
    """What pack() wrote; Unsupported when it is damaged (its CRC, its fields, an offset outside the code)."""
    body = _body(MAGIC, blob, "linked object")
    try:
        f = msgpack.unpackb(body)
        code, fixups, entries = f["code"], np.frombuffer(f["fixups"], "<u4"), f["entries"]
        imports = {n: np.frombuffer(v, "<u4") for n, v in f.get("imports", {}).items()}
        ok = isinstance(code, bytes) and isinstance(entries, dict) and \
            all(isinstance(k, str) and isinstance(v, int) and 0 <= v < len(code) for k, v in entries.items()) and \
            all(isinstance(n, str) for n in imports)
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException):
        ok = False
    if not ok or any(len(x) and int(x.max()) + 8 > len(code) for x in (fixups, *imports.values())):
        raise Unsupported("damaged linked object (fields)")
    return Linked(code, fixups, entries, imports)


def pack_image(parts: dict[str, Linked]) -> bytes:
    """Several linked objects by name (a code page's regions by key) as one file, combined (combine: placing it is one
    copy) with where each lies in it: IMAGE_MAGIC, a CRC-32 of the rest, msgpack of the combined object's pack() and
    each part's [start, end)."""
    lk, spans = _combine(parts)
    return _framed(IMAGE_MAGIC, msgpack.packb({"image": pack(lk), "spans": spans}))


def unpack_image(blob: bytes) -> tuple[Linked, dict[str, tuple[int, int]]]:
    """What pack_image() wrote: (the combined object, each part's [start, end) in it); Unsupported when it is
    damaged."""
    body = _body(IMAGE_MAGIC, blob, "image")
    try:
        got = msgpack.unpackb(body)
        lk, spans = unpack(got["image"]), got["spans"]
        spans = {k: (int(a), int(b)) for k, (a, b) in spans.items() if isinstance(k, str)}
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException):
        raise Unsupported("damaged image (fields)") from None
    if not all(0 <= a <= b <= len(lk.code) for a, b in spans.values()) or \
            any(name.partition("/")[0] not in spans for name in lk.entries):
        raise Unsupported("damaged image (fields)")
    return lk, spans


def split(lk: Linked, tag: str, start: int, end: int) -> Linked:
    """The part `tag` of a combined object, at [start, end) in it, as the linked object it was (combine's inverse)."""
    code = bytearray(lk.code[start:end])
    fx = _within(lk.fixups, start, end)
    _add64(code, fx, -start)
    prefix = tag + "/"
    imports = {name: mine for name, mine in ((n, _within(v, start, end)) for n, v in lk.imports.items()) if len(mine)}
    return Linked(bytes(code), fx,
                  {n[len(prefix):]: off - start for n, off in lk.entries.items() if n.startswith(prefix)}, imports)


def _add64(buf, slots: np.ndarray, delta: int) -> None:
    """Add `delta` (modulo 2^64) to the 8-byte little-endian values at the offsets `slots` of buf."""
    for at in slots.tolist():
        struct.pack_into("<Q", buf, at, (struct.unpack_from("<Q", buf, at)[0] + delta) & 0xFFFFFFFFFFFFFFFF)


def _within(slots: np.ndarray, start: int, end: int) -> np.ndarray:
    """The offsets of `slots` in [start, end), as offsets from start."""
    at = slots.astype(np.int64)
    return (at[(at >= start) & (at < end)] - start).astype(np.uint32)


STT_FUNC, STB_GLOBAL = 2, 1


def _link(objs: list[bytes], names: list[str], imports=frozenset()) -> Linked:
    parts, at = [], 0
    for obj in objs:
        parts.append(_Part(obj, at))
        at = parts[-1].end
    exports: dict[bytes, int] = {}                          # every global function: its offset in the image
    for p in parts:
        for name, j in p.funcs.items():
            if name in exports:
                raise Unsupported(f"function {name.decode()} defined twice")
            exports[name] = int(p.value[j])
    missing = {n.encode() for n in names} - exports.keys()
    if missing:
        raise Unsupported(f"functions missing: {sorted(n.decode() for n in missing)}")
    allowed = {n.encode() for n in imports} - exports.keys()
    image = np.zeros(at, np.uint8)
    fixups, bound = [], {}
    for p in parts:
        fixups.append(p.relocate(image, exports, allowed, bound))
    return Linked(image.tobytes(), np.concatenate(fixups).astype(np.uint32),
                  {n.decode(): off for n, off in exports.items()},
                  {n: np.concatenate(v).astype(np.uint32) for n, v in bound.items()})


class _Part:
    """One object of a link, laid out from image offset `at`: its allocated sections (but the unwind tables: nothing
    unwinds through generated code), then its GOT; `end`: the offset after it. `value`: every symbol's offset in the
    image (UNBOUND for one this object does not define), `moves`: whether that is an address (the mapping's base is
    added to it when stored whole), `funcs`: its global functions."""

    def __init__(self, obj: bytes, at: int):
        if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
            raise Unsupported("not a little-endian ELF64 object")
        e_type, e_machine = struct.unpack_from("<HH", obj, 16)
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
        if e_type != ET_REL or e_machine != EM_X86_64 or shentsize != SHDR.itemsize:
            raise Unsupported("not an x86-64 relocatable object")
        self.obj = obj
        sh = self.sh = np.frombuffer(obj, SHDR, shnum, shoff).tolist()   # (name, type, flags, addr, offset, size, ...)
        shstr = _section(obj, sh[shstrndx])
        base: dict[int, int] = {}
        size = at
        for i, (name, kind, flags, _, _, length, _, _, align, _) in enumerate(sh):
            if not flags & SHF_ALLOC or length == 0 or kind == SHT_X86_64_UNWIND:
                continue
            if flags & SHF_WRITE:
                raise Unsupported(f"writable section {_cstr(shstr, name).decode()}")
            align = max(align, 1)
            size = -(-size // align) * align
            base[i] = size
            size += length
        self.base = base
        if any(s[1] == SHT_REL for s in sh):
            raise Unsupported("REL relocations")
        symtabs = [s for s in sh if s[1] == SHT_SYMTAB]
        if len(symtabs) != 1:
            raise Unsupported("no single symbol table")
        st = symtabs[0]
        syms = self.syms = np.frombuffer(obj, SYM, st[5] // SYM.itemsize, st[4])
        strtab = self.strtab = _section(obj, sh[st[6]])
        funcs = np.flatnonzero((syms["info"] == (STB_GLOBAL << 4 | STT_FUNC)) & (syms["shndx"] != SHN_UNDEF))
        self.funcs = {_cstr(strtab, a): j for j, a in zip(funcs.tolist(), syms["name"][funcs].tolist())}

        # the GOT: an entry per symbol a GOT-using relocation names
        got_entry = self.got_entry = np.full(len(syms), UNBOUND, np.uint64)     # symbol -> its entry's offset
        self.relas = [(base[s[7]], sh[s[7]][5], np.frombuffer(obj, RELA, s[5] // RELA.itemsize, s[4])) for s in sh
                      if s[1] == SHT_RELA and s[7] in base]
        entries = 0
        for _, _, r in self.relas:
            kind = r["info"] & np.uint64(0xFFFFFFFF)
            uses = r["info"][_GOT_USERS[np.minimum(kind, np.uint64(len(_GOT_USERS) - 1))]] >> np.uint64(32)
            for idx in sorted(set(uses.tolist())):
                if got_entry[idx] == UNBOUND:
                    got_entry[idx] = 8 * entries
                    entries += 1
        size = -(-size // 8) * 8
        self.got_off = size
        self.end = size + 8 * entries

        where = np.array([UNBOUND if j not in base else base[j] for j in range(shnum)] + [0], np.uint64)
        shndx = self.shndx = syms["shndx"].astype(np.int64)
        shndx[shndx == SHN_ABS] = shnum                 # absolute: the value alone
        shndx[shndx > shnum] = 0                        # other reserved indices: unbound
        sect = where[shndx]
        self.value = np.where(sect == UNBOUND, UNBOUND, sect + syms["value"])
        self.moves = (sect != UNBOUND) & (shndx != shnum)

    def relocate(self, image: np.ndarray, exports: dict[bytes, int], imports=frozenset(),
                 bound: dict | None = None) -> np.ndarray:
        """Write the sections, the GOT and the relocated values into the image (undefined symbols resolved from
        `exports`, the other objects' functions); the offsets of the 8-byte slots holding an address. A value that
        moves with the mapping is only allowed where it is a whole 8-byte address (R_X86_64_64, a GOT entry); PC-
        and GOT-relative ones do not move. An undefined symbol named in `imports` is bound when the image is placed:
        its GOT entry or R_X86_64_64 slot holds the addend now, and its offset is added to bound[name]."""
        obj, sh, syms, strtab = self.obj, self.sh, self.syms, self.strtab
        value, moves, got_entry, got_off = self.value, self.moves, self.got_entry, self.got_off
        imported = np.zeros(len(syms), bool)
        names: dict[int, bytes] = {}
        for j in np.flatnonzero(self.shndx == SHN_UNDEF).tolist():
            name = _cstr(strtab, int(syms[j]["name"]))
            if name == GOT_SYMBOL:
                value[j], moves[j] = got_off, True
            elif name in exports:
                value[j], moves[j] = exports[name], True
            elif name in imports:
                value[j], moves[j], imported[j], names[j] = 0, False, True, name

        def bind(idx: np.ndarray, at: np.ndarray) -> None:
            for j, a in zip(idx.tolist(), at.tolist()):
                bound.setdefault(names[j].decode(), []).append(np.array([a], np.int64))
        for i, off in self.base.items():
            _, kind, _, _, at, length = sh[i][:6]
            if kind != SHT_NOBITS:
                image[off:off + length] = np.frombuffer(obj, np.uint8, length, at)
        has_entry = np.flatnonzero(got_entry != UNBOUND)
        unbound = has_entry[value[has_entry] == UNBOUND]
        if len(unbound):
            raise Unsupported(f"GOT entry of symbol {_cstr(strtab, int(syms[unbound[0]]['name'])).decode()!r} "
                              "(undefined or in a section not loaded)")
        slots = got_off + got_entry[has_entry].astype(np.int64)
        _put(image, slots, value[has_entry], 8)
        fixups = [slots[moves[has_entry]]]
        bind(has_entry[imported[has_entry]], slots[imported[has_entry]])

        for target, length, r in self.relas:
            kind = (r["info"] & 0xFFFFFFFF).astype(np.int64)
            idx = (r["info"] >> np.uint64(32)).astype(np.int64)
            kinds = set(kind.tolist())
            unknown = kinds - RELOCS.keys()
            if unknown:
                raise Unsupported(f"relocation types {sorted(unknown)}")
            S, G = value[idx], got_entry[idx]
            A, P = r["addend"].view(np.uint64), np.uint64(target) + r["offset"]
            terms = {"S": S, "A": A, "P": P, "G": G, "GOT": np.uint64(got_off)}
            for k in sorted(kinds):
                _, width, signed, calc = RELOCS[k]
                rows = kind == k
                need = np.zeros(int(rows.sum()), bool)
                if "S" in calc:
                    need |= S[rows] == UNBOUND
                if "G+" in calc:
                    need |= G[rows] == UNBOUND
                if need.any():
                    bad = int(idx[rows][need][0])
                    raise Unsupported(f"{RELOCS[k][0]} against symbol "
                                      f"{_cstr(strtab, int(syms[bad]['name'])).decode()!r} (undefined or in a section "
                                      "not loaded)")
                if (r["offset"][rows] + np.uint64(width) > np.uint64(length)).any():
                    raise Unsupported(f"{RELOCS[k][0]} outside its section")
                at = (target + r["offset"][rows]).astype(np.int64)
                if "S" in calc and imported[idx[rows]].any():
                    if calc != "S+A" or width != 8:
                        bad = int(idx[rows][imported[idx[rows]]][0])
                        raise Unsupported(f"{RELOCS[k][0]} against import {names[bad].decode()!r} (only its GOT "
                                          "entry or an 8-byte address is bound when placed)")
                    bind(idx[rows][imported[idx[rows]]], at[imported[idx[rows]]])
                absolute = moves[idx[rows]] if calc == "S+A" else np.zeros(len(at), bool)
                if absolute.any():
                    if width != 8:
                        raise Unsupported(f"{RELOCS[k][0]}: a 32-bit absolute address")
                    fixups.append(at[absolute])
                v = _calc(calc, {t: (x[rows] if isinstance(x, np.ndarray) else x) for t, x in terms.items()})
                if width == 4:
                    iv = v.view(np.int64)
                    if not ((-2**31 <= iv) & (iv < 2**31)).all() if signed else (v < 2**32).all():
                        raise Unsupported(f"{RELOCS[k][0]} out of range")
                _put(image, at, v, width)
        return np.concatenate(fixups)


def _calc(calc: str, terms: dict) -> np.ndarray:
    """The calculation (terms summed left to right, uint64 arithmetic wrapping as the CPU's)."""
    out = np.uint64(0)
    for sign, name in re.findall(r"([+-]?)(GOT|[SAPG])", calc):
        out = out - terms[name] if sign == "-" else out + terms[name]
    return np.asarray(out, np.uint64).reshape(-1) if np.ndim(out) == 0 else out


def _put(image: np.ndarray, at: np.ndarray, v: np.ndarray, width: int) -> None:
    """Little-endian `width`-byte values v written at byte offsets `at`."""
    b = v.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :width]
    image[at[:, None] + np.arange(width)] = b


def _section(obj: bytes, s: tuple) -> bytes:
    return obj[s[4]:s[4] + s[5]]
