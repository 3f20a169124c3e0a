"""What LLVM's own tools say about a code object: the oracle the loader is checked against."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from clang import CACHE, KERNELS, PRELUDE, compile_cl, run, tool

BASE = 0x7F12_3456_0000      # the GPU address images are relocated to in the tests


def readelf_metadata(path: Path) -> dict:
    """The NT_AMDGPU_METADATA note as llvm-readelf prints it (YAML), parsed."""
    out = run(tool("llvm-readelf"), "--notes", str(path))
    doc = out[out.index("---"):out.index("...", out.index("---"))]
    return yaml.load(doc, Loader=_MetaLoader)


class _MetaLoader(yaml.SafeLoader):
    """LLVM tags some metadata strings explicitly (`!str`)."""


_MetaLoader.add_constructor("!str", lambda loader, node: loader.construct_scalar(node))


def readelf_json(path: Path, *flags: str) -> dict:
    out = run(tool("llvm-readelf"), "--elf-output-style=JSON", *flags, str(path))
    return json.loads(out)[0]


def readelf_symbols(path: Path) -> dict[str, dict]:
    """name -> {value, size, type, section} from .symtab."""
    syms = {}
    for e in readelf_json(path, "--symbols")["Symbols"]:
        s = e["Symbol"]
        syms[s["Name"]["Name"]] = {"value": s["Value"], "size": s["Size"], "type": s["Type"]["Name"],
                                   "section": s["Section"]["Name"]}
    return syms


def readelf_relocs(path: Path) -> list[tuple[str, int, str, str, int]]:
    """(relocation section, offset, type name, symbol, addend) for every relocation."""
    out = []
    for sec in readelf_json(path, "--relocs")["Relocations"]:
        for r in sec["Relocs"]:
            r = r["Relocation"]
            out.append((sec["SectionIndex"] if "SectionIndex" in sec else sec.get("Section", {}).get("Name"),
                        r["Offset"], r["Type"]["Name"], r["Symbol"]["Name"], r["Addend"]))
    return out


def readelf_sections(path: Path) -> dict[str, dict]:
    secs = {}
    for e in readelf_json(path, "--sections")["Sections"]:
        s = e["Section"]
        secs[s["Name"]["Name"]] = {"addr": s["Address"], "offset": s["Offset"], "size": s["Size"],
                                   "type": s["Type"]["Name"], "flags": [f["Name"] for f in s["Flags"]["Flags"]]}
    return secs


def readelf_header(path: Path) -> dict:
    return readelf_json(path, "--file-header")["ElfHeader"]


def asm_directives(src: str, arch: str, flags: tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
    """kernel -> {.amdhsa_* directive: value} from clang's own assembly for the same source."""
    text = src if "\n" in src else (KERNELS / src).read_text() if not os.path.isabs(src) else Path(src).read_text()
    import hashlib
    key = hashlib.sha256(f"S|{arch}|{flags}|{PRELUDE.read_text()}|{text}".encode()).hexdigest()[:20]
    out = CACHE / f"{key}.s"
    if not out.exists():
        cl = CACHE / f"{key}.{os.getpid()}.cl"
        cl.write_text(text)
        run(tool("clang"), "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", f"-mcpu={arch}", "-nogpulib",
            "-O2", "-include", str(PRELUDE), *flags, "-S", str(cl), "-o", str(out) + f".{os.getpid()}.tmp")
        os.replace(str(out) + f".{os.getpid()}.tmp", out)
    kernels, cur = {}, None
    for line in out.read_text().splitlines():
        line = line.strip()
        if m := re.match(r"\.amdhsa_kernel\s+(\S+)", line):
            cur = kernels.setdefault(m.group(1), {})
        elif line.startswith(".end_amdhsa_kernel"):
            cur = None
        elif cur is not None and (m := re.match(r"(\.amdhsa_\w+)\s+(-?\d+)\s*$", line)):
            cur[m.group(1)] = int(m.group(2))
    return kernels


def link_at(obj: Path, base: int) -> Path:
    """ld.lld-19 -shared with the image based at `base` and dynamic relocations applied in the file."""
    out = obj.with_suffix(f".{base:x}.so")
    if not out.exists():
        run(tool("ld.lld"), "-shared", f"--image-base={base:#x}", "--apply-dynamic-relocs", str(obj), "-o", str(out) + f".{os.getpid()}.tmp")
        os.replace(str(out) + f".{os.getpid()}.tmp", out)
    return out


__all__ = ["BASE", "compile_cl", "readelf_metadata", "readelf_symbols", "readelf_relocs", "readelf_sections",
           "readelf_header", "asm_directives", "link_at"]
