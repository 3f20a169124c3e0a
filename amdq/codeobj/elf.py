"""Reading AMDGPU ELF files: a thin, validating layer over pyelftools.

Everything that can go wrong with a malformed file becomes a CodeObjectError here, so the layers
above never see a parser's internal exception.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import CodeObjectError
from ..hw import elf as E

SHT_NOBITS, SHT_RELA, SHT_REL, SHT_NOTE, SHT_SYMTAB, SHT_DYNSYM = 8, 4, 9, 7, 2, 11
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
# A code object file larger than this is refused before it is copied or parsed: the loaded image is
# capped at 256 MiB (image.MAX_IMAGE) and the metadata at 16 MiB, so only debug sections could fill
# the rest.
MAX_FILE = 1 << 30


@dataclass
class Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    align: int
    link: int
    info: int
    data: bytes


@dataclass
class Symbol:
    name: str
    value: int
    size: int
    type: str          # STT_FUNC, STT_OBJECT, ...
    bind: str          # STB_GLOBAL, STB_LOCAL, STB_WEAK
    shndx: int | str   # section index, or 'SHN_UNDEF' / 'SHN_ABS' / ...


@dataclass
class Reloc:
    section: str       # name of the relocation section
    target: int        # index of the section it patches (ET_REL) or 0 (dynamic)
    offset: int
    type: int
    sym: Symbol | None
    addend: int


@dataclass
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int
    flags: int


class ElfImage:
    """Headers, sections, symbols, relocations and notes of one AMDGPU ELF file."""

    def __init__(self, data: bytes):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CodeObjectError(f"a code object is bytes, not {type(data).__name__}")
        if len(data) > MAX_FILE:
            raise CodeObjectError(f"code object is {len(data)} bytes, more than the {MAX_FILE >> 20} MiB amdq loads")
        self.data = bytes(data)
        try:
            self._parse()
        except CodeObjectError:
            raise
        except (ELFError, struct.error, ValueError, KeyError, IndexError, AttributeError, TypeError,
                UnicodeDecodeError, AssertionError, OverflowError, MemoryError, RecursionError, EOFError) as e:
            raise CodeObjectError(f"malformed ELF code object: {type(e).__name__}: {e}") from None

    def _parse(self) -> None:
        d = self.data
        if len(d) < 64 or d[:4] != b"\x7fELF":
            raise CodeObjectError("not an ELF file (bad magic or shorter than an ELF header)")
        if d[4] != 2 or d[5] != 1:
            raise CodeObjectError("not a 64-bit little-endian ELF file; AMDGPU code objects are ELF64 LE")
        elf = ELFFile(io.BytesIO(d))
        h = elf.header
        self.machine = h["e_machine"]
        if self.machine not in ("EM_AMDGPU", E.EM_AMDGPU):
            raise CodeObjectError(f"ELF machine is {self.machine}, not EM_AMDGPU (224): not a GPU code object")
        self.osabi, self.abiversion = d[7], d[8]
        if self.osabi != E.ELFOSABI_AMDGPU_HSA:
            raise CodeObjectError(f"ELF OS/ABI is {self.osabi}, not ELFOSABI_AMDGPU_HSA (64)")
        if self.abiversion not in E.ABI_VERSION_TO_COV:
            raise CodeObjectError(f"unsupported code object ABI version {self.abiversion} (want 1-4: v3-v6)")
        self.cov = E.ABI_VERSION_TO_COV[self.abiversion]
        self.type = h["e_type"]
        if self.type not in ("ET_REL", "ET_DYN"):
            raise CodeObjectError(f"ELF type {self.type}: load a relocatable object (ET_REL) or a shared object (ET_DYN)")
        self.flags = h["e_flags"]
        self.mach = self.flags & E.EF_AMDGPU_MACH
        n = len(d)
        if h["e_shoff"] > n or h["e_shoff"] + h["e_shnum"] * h["e_shentsize"] > n or h["e_shentsize"] not in (0, 64):
            raise CodeObjectError("section header table lies outside the file")
        if h["e_phoff"] + h["e_phnum"] * h["e_phentsize"] > n or (h["e_phnum"] and h["e_phentsize"] != 56):
            raise CodeObjectError("program header table lies outside the file")

        self.sections: list[Section] = []
        for i, s in enumerate(elf.iter_sections()):
            t = s["sh_type"]
            ti = t if isinstance(t, int) else _SHT.get(t, -1)
            size, off = s["sh_size"], s["sh_offset"]
            if ti != SHT_NOBITS and i and (off > n or size > n - off):
                raise CodeObjectError(f"section {s.name or i} ({size} bytes at {off:#x}) runs past the end of the file")
            align = s["sh_addralign"]
            if align and align & (align - 1):
                raise CodeObjectError(f"section {s.name} has alignment {align}, not a power of two")
            data = b"" if ti == SHT_NOBITS or not i else d[off:off + size]
            self.sections.append(Section(i, s.name, ti, s["sh_flags"], s["sh_addr"], off, size, align or 1,
                                         s["sh_link"], s["sh_info"], data))
        self.by_name = {s.name: s for s in self.sections}

        self.segments = []
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                if seg["p_offset"] + seg["p_filesz"] > n or seg["p_filesz"] > seg["p_memsz"]:
                    raise CodeObjectError("PT_LOAD segment lies outside the file")
                self.segments.append(Segment(seg["p_vaddr"], seg["p_offset"], seg["p_filesz"], seg["p_memsz"], seg["p_flags"]))

        self.symbols: list[Symbol] = []
        self.dynsymbols: list[Symbol] = []
        self._symtabs: dict[int, list[Symbol]] = {}
        for s in elf.iter_sections():
            if s["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                if s["sh_entsize"] != 24:
                    raise CodeObjectError(f"symbol table {s.name} has entry size {s['sh_entsize']}, not 24")
                syms = [Symbol(x.name, x["st_value"], x["st_size"], x["st_info"]["type"], x["st_info"]["bind"],
                               x["st_shndx"]) for x in s.iter_symbols()]
                self._symtabs[elf.get_section_index(s.name)] = syms
                (self.symbols if s["sh_type"] == "SHT_SYMTAB" else self.dynsymbols).extend(syms)

        self.relocs: list[Reloc] = []
        for i, s in enumerate(self.sections):
            if s.type == SHT_REL:
                raise CodeObjectError(f"section {s.name} holds REL relocations; AMDGPU code objects use RELA")
            if s.type != SHT_RELA:
                continue
            if s.size % 24:
                raise CodeObjectError(f"relocation section {s.name} size {s.size} is not a multiple of 24")
            syms = self._symtabs.get(s.link, [])
            for off in range(0, s.size, 24):
                r_offset, r_info, r_addend = struct.unpack_from("<QQq", s.data, off)
                symi, typ = r_info >> 32, r_info & 0xFFFFFFFF
                if symi and symi >= len(syms):
                    raise CodeObjectError(f"relocation in {s.name} names symbol {symi}, which does not exist")
                self.relocs.append(Reloc(s.name, s.info, r_offset, typ, syms[symi] if symi else None, r_addend))

        self.notes = []
        for s in self.sections:
            if s.type == SHT_NOTE:
                self.notes.extend(parse_notes(s.data, s.name))

    def symbol(self, name: str) -> Symbol | None:
        for s in self.symbols or self.dynsymbols:
            if s.name == name:
                return s
        for s in self.dynsymbols:
            if s.name == name:
                return s
        return None


_SHT = {"SHT_NULL": 0, "SHT_PROGBITS": 1, "SHT_SYMTAB": 2, "SHT_STRTAB": 3, "SHT_RELA": 4, "SHT_HASH": 5,
        "SHT_DYNAMIC": 6, "SHT_NOTE": 7, "SHT_NOBITS": 8, "SHT_REL": 9, "SHT_DYNSYM": 11, "SHT_GNU_HASH": 0x6ffffff6}


def parse_notes(data: bytes, where: str) -> list[tuple[str, int, bytes]]:
    """ELF note records (name, type, descriptor bytes); AMDGPU notes are 4-byte aligned."""
    out, off = [], 0
    while off + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, off)
        off += 12
        name_end = off + namesz
        desc_off = off + ((namesz + 3) & ~3)
        desc_end = desc_off + descsz
        if name_end > len(data) or desc_end > len(data):
            raise CodeObjectError(f"note in {where} runs past the end of its section")
        out.append((data[off:name_end].rstrip(b"\0").decode("latin-1"), ntype, data[desc_off:desc_end]))
        off = (desc_end + 3) & ~3
    return out
