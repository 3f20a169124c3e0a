#!/usr/bin/env python3
"""Structure-aware fuzzing of the AMDGPU code-object loader.

Every mutated code object must either load cleanly (and then lay out, relocate, describe itself and
pack kernel arguments consistently) or raise an `amdq.errors.AmdqError` subclass, within a second.

The seeds are real code objects (clang-19 OpenCL objects for gfx1100/gfx1201/gfx942, ld.lld-19
shared objects, llvmlite objects from `amdq.compile`). Each seed is parsed once to find its ELF
header, section and program headers, symbol and relocation tables, the metadata note and its
msgpack, and the kernel descriptors; the mutators aim at those regions, and the metadata mutators
change decoded msgpack *values* and re-encode them so the checks behind the msgpack decode are reached.

    PYTHONPATH=. python3 scripts/fuzz_codeobj.py --count 10000 --seed 1
    PYTHONPATH=. python3 scripts/fuzz_codeobj.py --seed 1 --case 1234 -v    # replay one case

The last line of the output is JSON: {"cases": N, "outcomes": {...}, "escapes": N, ...}.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import random
import signal
import struct
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import msgpack

ROOT = Path(__file__).resolve().parent.parent
BASE = 0x7F12_3456_0000                  # GPU address images are relocated to
CASE_LIMIT_S = 1.0                       # a case slower than this is a failure

# -- seeds ----------------------------------------------------------------------------------------

LLVM_IR = """
define amdgpu_kernel void @scale(ptr addrspace(1) %out, ptr addrspace(1) %in, float %k, i32 %n) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %v = load float, ptr addrspace(1) %p
  %m = fmul float %v, %k
  %q = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %m, ptr addrspace(1) %q
  ret void
}

define amdgpu_kernel void @lds_sum(ptr addrspace(1) %out, i64 %x, i16 %y) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %s = getelementptr [64 x i32], ptr addrspace(3) @lds, i32 0, i32 %i
  store i32 %i, ptr addrspace(3) %s
  call void @llvm.amdgcn.s.barrier()
  %j = xor i32 %i, 1
  %t = getelementptr [64 x i32], ptr addrspace(3) @lds, i32 0, i32 %j
  %v = load i32, ptr addrspace(3) %t
  %q = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %v, ptr addrspace(1) %q
  ret void
}
@lds = internal addrspace(3) global [64 x i32] poison, align 4

declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
"""

# (name, source under tests/kernels or tests/codeobj, arch, link with ld.lld)
CLANG_SEEDS = [
    ("vadd-gfx1100.o", "vadd.cl", "gfx1100", False),
    ("vadd-gfx1100.hsaco", "vadd.cl", "gfx1100", True),
    ("scalar_args-gfx1201.o", "scalar_args.cl", "gfx1201", False),
    ("scalar_args-gfx942.hsaco", "scalar_args.cl", "gfx942", True),
    ("dyn_lds-gfx942.o", "dyn_lds.cl", "gfx942", False),
    ("dyn_lds-gfx1201.hsaco", "dyn_lds.cl", "gfx1201", True),
    ("globals-gfx942.hsaco", "codeobj/globals.cl", "gfx942", True),
    ("globals-gfx1100.o", "codeobj/globals.cl", "gfx1100", False),
]
LLVMLITE_SEEDS = [("llvmlite-gfx1100.o", "gfx1100"), ("llvmlite-gfx942.o", "gfx942"), ("llvmlite-gfx1201.o", "gfx1201")]


def build_seeds() -> list[tuple[str, bytes]]:
    """The seed corpus: clang-19 (+ ld.lld-19) objects and llvmlite objects, compiled once (cached on disk)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from clang import compile_cl  # noqa: E402  (tests/clang.py: the cached clang-19 driver)

    import amdq
    out = []
    for name, src, arch, link in CLANG_SEEDS:
        path = ROOT / "tests" / src if src.startswith("codeobj/") else src
        out.append((name, compile_cl(path, arch, link=link).read_bytes()))
    for name, arch in LLVMLITE_SEEDS:
        out.append((name, amdq.compile(LLVM_IR, arch)))
    return out


# -- where things are in a seed -------------------------------------------------------------------

EHDR_FIELDS = [(4, "B"), (5, "B"), (6, "B"), (7, "B"), (8, "B"), (0x10, "H"), (0x12, "H"), (0x14, "I"),
               (0x18, "Q"), (0x20, "Q"), (0x28, "Q"), (0x30, "I"), (0x34, "H"), (0x36, "H"), (0x38, "H"),
               (0x3A, "H"), (0x3C, "H"), (0x3E, "H")]
SHDR_FIELDS = [(0, "I"), (4, "I"), (8, "Q"), (0x10, "Q"), (0x18, "Q"), (0x20, "Q"), (0x28, "I"), (0x2C, "I"),
               (0x30, "Q"), (0x38, "Q")]
PHDR_FIELDS = [(0, "I"), (4, "I"), (8, "Q"), (0x10, "Q"), (0x18, "Q"), (0x20, "Q"), (0x28, "Q"), (0x30, "Q")]
SYM_FIELDS = [(0, "I"), (4, "B"), (5, "B"), (6, "H"), (8, "Q"), (0x10, "Q")]
RELA_FIELDS = [(0, "Q"), (8, "Q"), (8, "I"), (12, "I"), (0x10, "q")]
KD_FIELDS = [(0, "I"), (4, "I"), (8, "I"), (12, "I"), (16, "q"), (24, "Q"), (44, "I"), (48, "I"), (52, "I"),
             (56, "H"), (58, "H"), (60, "I")]


@dataclass
class Sec:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    entsize: int
    hdr: int                 # file offset of its section header


@dataclass
class Layout:
    """Where the structures of one (valid) code object lie in the file."""
    data: bytes
    shoff: int
    shnum: int
    phoff: int
    phnum: int
    sections: list[Sec]
    note: Sec | None = None
    meta_off: int = 0         # file offset of the metadata msgpack
    meta_len: int = 0
    note_rec: int = 0         # file offset of the metadata note's record header
    kds: list[int] = field(default_factory=list)          # file offsets of kernel descriptors
    kernel_syms: list[int] = field(default_factory=list)  # file offsets of .kd / kernel symbol entries
    symtabs: list[Sec] = field(default_factory=list)
    relas: list[Sec] = field(default_factory=list)
    strtabs: list[Sec] = field(default_factory=list)

    @property
    def meta(self) -> dict:
        return msgpack.unpackb(self.data[self.meta_off:self.meta_off + self.meta_len], raw=False, strict_map_key=False)


def parse_layout(data: bytes) -> Layout:
    """Locate the structures of a well-formed ELF64 code object (the seeds, or a re-encoded seed)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phnum, shnum, shstrndx = struct.unpack_from("<H", data, 0x38)[0], *struct.unpack_from("<HH", data, 0x3C)
    raw = []
    for i in range(shnum):
        h = shoff + 64 * i
        name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from("<IIQQQQIIQQ", data, h)
        raw.append((name, typ, flags, addr, off, size, entsize, h))
    stro = raw[shstrndx][4]
    secs = []
    for i, (name, typ, flags, addr, off, size, entsize, h) in enumerate(raw):
        end = data.index(b"\0", stro + name)
        secs.append(Sec(i, data[stro + name:end].decode(), typ, flags, addr, off, size, entsize, h))
    lay = Layout(data, shoff, shnum, phoff, phnum, secs)
    for s in secs:
        if s.type == 7:                                    # SHT_NOTE: find the NT_AMDGPU_METADATA record
            off = s.offset
            while off + 12 <= s.offset + s.size:
                namesz, descsz, ntype = struct.unpack_from("<III", data, off)
                desc = off + 12 + ((namesz + 3) & ~3)
                if ntype == 32 and data[off + 12:off + 12 + namesz].rstrip(b"\0") == b"AMDGPU":
                    lay.note, lay.note_rec, lay.meta_off, lay.meta_len = s, off, desc, descsz
                off = (desc + descsz + 3) & ~3
        elif s.type in (2, 11):
            lay.symtabs.append(s)
        elif s.type == 4:
            lay.relas.append(s)
        elif s.type == 3:
            lay.strtabs.append(s)
    for st in lay.symtabs:
        strtab = secs[struct.unpack_from("<I", data, st.hdr + 0x28)[0]]
        for e in range(st.offset, st.offset + st.size, 24):
            name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, e)
            nm = data[strtab.offset + name:data.index(b"\0", strtab.offset + name)]
            if nm.endswith(b".kd") or (info & 0xF) == 2 and shndx:
                lay.kernel_syms.append(e)
            if nm.endswith(b".kd") and 0 < shndx < len(secs):
                sec = secs[shndx]
                lay.kds.append(sec.offset + value - (sec.addr if sec.addr else 0))
    lay.kds = sorted(set(lay.kds))
    if lay.note is None:
        raise ValueError("seed has no metadata note")
    return lay


# -- value pools ----------------------------------------------------------------------------------

def interesting_ints(rng: random.Random, bits: int, orig: int, n: int) -> int:
    """An integer of `bits` bits aimed at boundaries: 0, -1, powers of two, the file size, orig +- 1..."""
    m = (1 << bits) - 1
    pool = [0, 1, 2, 3, 4, 7, 8, 15, 16, 63, 64, 255, 256, 4095, 4096, 65535, 65536, (1 << 31) - 1, 1 << 31,
            (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63, m, n, n - 1, n + 1, n - 12, orig + 1,
            orig - 1, orig * 2, orig + 64, orig + 256, orig ^ (1 << rng.randrange(bits)), rng.getrandbits(bits)]
    return rng.choice(pool) & m


def weird_values(rng: random.Random, near: int = 0) -> object:
    """A metadata value of a wrong type or an out-of-range number (msgpack-encodable)."""
    pool = [1 << 40, 1 << 32, (1 << 32) - 1, 1 << 31, (1 << 63) - 1, (1 << 64) - 1, -1, -(1 << 63), -4096, 0, 1, 3,
            7, 65536, 65537, 1 << 20, near, near - 1, near + 1, near + 8, near * 2, 1.5, -0.0, float("nan"),
            float("inf"), "8", "", "x" * 300, None, True, False, [], [1, 2], {}, {"a": 1}, b"\xff\xfe",
            [[[[[]]]]], {1: 2}, {None: 1}]
    return rng.choice(pool)


def deep(n: int) -> object:
    v: object = 0
    for _ in range(n):
        v = [v]
    return v


# -- metadata (msgpack) mutators: change a decoded value, re-encode -------------------------------

ARG_INT_FIELDS = [".offset", ".size", ".pointee_align"]
ARG_STR_FIELDS = [".value_kind", ".address_space", ".access", ".actual_access", ".name", ".type_name"]
KERNEL_INT_FIELDS = [".kernarg_segment_size", ".kernarg_segment_align", ".group_segment_fixed_size",
                     ".private_segment_fixed_size", ".wavefront_size", ".sgpr_count", ".vgpr_count", ".agpr_count",
                     ".max_flat_workgroup_size", ".sgpr_spill_count", ".vgpr_spill_count", ".uniform_work_group_size"]
KERNEL_OTHER_FIELDS = [".name", ".symbol", ".args", ".reqd_workgroup_size", ".workgroup_size_hint",
                       ".uses_dynamic_stack", ".language", ".language_version", ".kernarg_segment_size"]
VALUE_KINDS = ["by_value", "global_buffer", "dynamic_shared_pointer", "hidden_block_count_x", "hidden_group_size_y",
               "hidden_remainder_z", "hidden_global_offset_x", "hidden_grid_dims", "hidden_dynamic_lds_size",
               "hidden_private_base", "hidden_shared_base", "hidden_heap_v1", "hidden_none", "image", "sampler",
               "pipe", "queue", "hidden_", "bogus", ""]


def _kernels(m: dict) -> list:
    ks = m.get("amdhsa.kernels")
    return ks if isinstance(ks, list) else []


def _pick_arg(rng: random.Random, m: dict) -> tuple[dict, dict] | None:
    ks = [k for k in _kernels(m) if isinstance(k, dict) and isinstance(k.get(".args"), list)
          and any(isinstance(a, dict) for a in k[".args"])]
    if not ks:
        return None
    k = rng.choice(ks)
    return k, rng.choice([a for a in k[".args"] if isinstance(a, dict)])


def mm_arg_int(rng, m):
    """An argument's .offset/.size/.pointee_align set to a huge, negative, wrong-typed or boundary value."""
    p = _pick_arg(rng, m)
    if p:
        k, a = p
        kss = k.get(".kernarg_segment_size", 0) if isinstance(k.get(".kernarg_segment_size"), int) else 0
        f = rng.choice(ARG_INT_FIELDS)
        a[f] = rng.choice([weird_values(rng, kss), kss, kss - a.get(".size", 0) + 1 if isinstance(a.get(".size"), int)
                           else kss, 1 << 40, -1, (1 << 64) - 1])


def mm_arg_str(rng, m):
    """An argument's value kind, address space, name... replaced by another kind or a wrong type."""
    p = _pick_arg(rng, m)
    if p:
        f = rng.choice(ARG_STR_FIELDS)
        p[1][f] = rng.choice(VALUE_KINDS) if f == ".value_kind" and rng.random() < 0.7 else weird_values(rng)


def mm_arg_overlap(rng, m):
    """Two arguments of a kernel made to overlap, or one moved to the end of the kernarg segment."""
    p = _pick_arg(rng, m)
    if p:
        k, a = p
        b = rng.choice([x for x in k[".args"] if isinstance(x, dict)])
        if rng.random() < 0.5 and isinstance(b.get(".offset"), int):
            a[".offset"] = b[".offset"] + rng.choice([0, 1, 4])
        else:
            kss = k.get(".kernarg_segment_size")
            if isinstance(kss, int) and isinstance(a.get(".size"), int):
                a[".offset"] = kss - a[".size"] + rng.choice([0, 1, 8])


def mm_args_list(rng, m):
    """A kernel's .args list made huge, empty, duplicated, shuffled, of non-maps or not a list."""
    ks = [k for k in _kernels(m) if isinstance(k, dict)]
    if not ks:
        return
    k = rng.choice(ks)
    args = k.get(".args") if isinstance(k.get(".args"), list) else []
    c = rng.randrange(6)
    if c == 0 and args:
        k[".args"] = args * rng.choice([2, 50, 3000])
    elif c == 1:
        k[".args"] = []
    elif c == 2:
        k[".args"] = rng.sample(args, len(args))
    elif c == 3:
        k[".args"] = args + [weird_values(rng)]
    elif c == 4:
        k[".args"] = weird_values(rng)
    else:
        k[".args"] = args + [{".offset": rng.choice([0, 8, 1 << 40]), ".size": rng.choice([8, 0, 1 << 40]),
                              ".value_kind": rng.choice(VALUE_KINDS)}]


def mm_arg_delete(rng, m):
    """A required argument key removed."""
    p = _pick_arg(rng, m)
    if p and p[1]:
        del p[1][rng.choice(list(p[1]))]


def mm_kernel_int(rng, m):
    """A kernel's segment sizes, counts or limits set to a huge, negative, wrong-typed or boundary value."""
    ks = [k for k in _kernels(m) if isinstance(k, dict)]
    if ks:
        k = rng.choice(ks)
        f = rng.choice(KERNEL_INT_FIELDS)
        orig = k.get(f, 0) if isinstance(k.get(f), int) else 0
        k[f] = rng.choice([weird_values(rng, orig), 1 << 40, 1 << 31, 65536, 65537, 1 << 20, -1, 0])


def mm_kernel_other(rng, m):
    """A kernel's name, symbol, args, workgroup sizes... of a wrong type or value."""
    ks = [k for k in _kernels(m) if isinstance(k, dict)]
    if ks:
        k = rng.choice(ks)
        f = rng.choice(KERNEL_OTHER_FIELDS)
        choices = [weird_values(rng), [0, 0, 0], [1 << 40, 1, 1], [-1, 1, 1], [1, 2], ["a", "b", "c"], [1.5, 1, 1]]
        if f in (".name", ".symbol"):
            names = [x.get(".name") for x in ks] + [x.get(".symbol") for x in ks]
            choices += names + ["\u2603.kd", "x" * 5000, "a\0b"]
        k[f] = rng.choice(choices)


def mm_kernel_delete(rng, m):
    """A kernel key removed (required ones included)."""
    ks = [k for k in _kernels(m) if isinstance(k, dict) and k]
    if ks:
        k = rng.choice(ks)
        del k[rng.choice(list(k))]


def mm_kernels_list(rng, m):
    """amdhsa.kernels duplicated, emptied, made huge or not a list."""
    ks = _kernels(m)
    c = rng.randrange(5)
    if c == 0 and ks:
        m["amdhsa.kernels"] = ks + [copy.deepcopy(rng.choice(ks))]
    elif c == 1:
        m["amdhsa.kernels"] = []
    elif c == 2 and ks:
        m["amdhsa.kernels"] = ks * 500
    elif c == 3:
        m["amdhsa.kernels"] = weird_values(rng)
    else:
        m["amdhsa.kernels"] = ks + [weird_values(rng)]


def mm_top(rng, m):
    """amdhsa.version/target/printf made wrong, or a top-level key removed."""
    c = rng.randrange(4)
    if c == 0:
        m["amdhsa.version"] = rng.choice([[], [1], ["1", "2"], [1 << 63, 0], [-1, -1], weird_values(rng), deep(100)])
    elif c == 1:
        m["amdhsa.target"] = rng.choice(["amdgcn-amd-amdhsa--gfx90a", "amdgcn-amd-amdhsa--", "--", ":", weird_values(rng)])
    elif c == 2:
        m["amdhsa.printf"] = weird_values(rng)
    elif m:
        del m[rng.choice(list(m))]


def mm_any_node(rng, m):
    """Some node anywhere in the metadata tree replaced by a value of another type (or deep nesting)."""
    nodes: list[tuple[object, object]] = []

    def walk(v):
        if isinstance(v, dict):
            for key, x in v.items():
                nodes.append((v, key))
                walk(x)
        elif isinstance(v, list):
            for i, x in enumerate(v[:64]):
                nodes.append((v, i))
                walk(x)
    walk(m)
    if nodes:
        parent, key = rng.choice(nodes)
        parent[key] = deep(rng.choice([50, 400])) if rng.random() < 0.1 else weird_values(rng)


META_MUTATORS: list[Callable] = [mm_arg_int, mm_arg_int, mm_arg_int, mm_arg_str, mm_arg_overlap, mm_args_list,
                                 mm_arg_delete, mm_kernel_int, mm_kernel_int, mm_kernel_other, mm_kernel_delete,
                                 mm_kernels_list, mm_top, mm_any_node]


def with_metadata(lay: Layout, desc: bytes) -> bytes:
    """The code object with its metadata note's descriptor replaced by `desc`: the note section is
    rewritten at the end of the file and its section header pointed there."""
    d, note = lay.data, lay.note
    body = bytearray(d[note.offset:lay.note_rec])
    namesz, _, ntype = struct.unpack_from("<III", d, lay.note_rec)
    name = d[lay.note_rec + 12:lay.note_rec + 12 + ((namesz + 3) & ~3)]
    body += struct.pack("<III", namesz, len(desc), ntype) + name + desc + bytes(-len(desc) % 4)
    body += d[(lay.meta_off + lay.meta_len + 3) & ~3:note.offset + note.size]
    out = bytearray(d) + bytes(-len(d) % 8)
    new_off = len(out)
    out += body
    struct.pack_into("<QQ", out, note.hdr + 0x18, new_off, len(body))
    return bytes(out)


def mutate_metadata(rng: random.Random, lay: Layout) -> tuple[str, bytes]:
    m = lay.meta
    names = []
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 4)):
        f = rng.choice(META_MUTATORS)
        f(rng, m)
        names.append(f.__name__)
    try:
        desc = msgpack.packb(m, use_bin_type=True)
    except (ValueError, OverflowError, TypeError):
        desc = msgpack.packb(lay.meta, use_bin_type=True)
    return "+".join(names), with_metadata(lay, desc)


# -- byte-level mutators: aim at a region, or set a field to a boundary value ---------------------

def _regions(lay: Layout) -> dict[str, list[tuple[int, int]]]:
    r = {"ehdr": [(0, 64)], "shdrs": [(lay.shoff, 64 * lay.shnum)], "phdrs": [(lay.phoff, 56 * lay.phnum)] if lay.phnum else [],
         "note": [(lay.note.offset, lay.note.size)], "msgpack": [(lay.meta_off, lay.meta_len)],
         "kd": [(k, 64) for k in lay.kds], "symtab": [(s.offset, s.size) for s in lay.symtabs],
         "rela": [(s.offset, s.size) for s in lay.relas], "strtab": [(s.offset, s.size) for s in lay.strtabs],
         "text": [(s.offset, s.size) for s in lay.sections if s.flags & 4 and s.type != 8],
         "anywhere": [(0, len(lay.data))]}
    return {k: [x for x in v if x[1] > 0] for k, v in r.items() if any(x[1] > 0 for x in v)}


def m_truncate(rng, lay, d):
    """The file cut short: anywhere, or a few bytes around a structure boundary."""
    if rng.random() < 0.5:
        cut = rng.randrange(len(d))
    else:
        bounds = [0, 64, lay.shoff, lay.phoff, lay.note.offset, lay.meta_off, lay.meta_off + lay.meta_len]
        bounds += [s.offset for s in lay.sections] + [s.offset + s.size for s in lay.sections] + lay.kds
        cut = max(0, min(len(d) - 1, rng.choice(bounds) + rng.randint(-8, 8)))
    return d[:cut]


def m_flip(rng, lay, d):
    """1-8 bits flipped in one structure (header, section headers, note, msgpack, descriptor, tables)."""
    regs = _regions(lay)
    name = rng.choice(list(regs))
    off, size = rng.choice(regs[name])
    for _ in range(rng.randint(1, 8)):
        p = off + rng.randrange(size)
        if p < len(d):
            d[p] ^= 1 << rng.randrange(8)
    return d


def m_bytes(rng, lay, d):
    """A run of bytes in one structure overwritten with 0x00, 0xff or random bytes."""
    regs = _regions(lay)
    off, size = rng.choice(regs[rng.choice(list(regs))])
    p = off + rng.randrange(size)
    if p >= len(d):
        return d
    n = min(rng.choice([1, 2, 4, 8, 16]), len(d) - p)
    d[p:p + n] = rng.choice([bytes(n), b"\xff" * n, rng.randbytes(n)])
    return d


def _set(rng, d, off, fmt, n):
    if off + struct.calcsize(fmt) > len(d):
        return
    orig = struct.unpack_from("<" + fmt, d, off)[0]
    bits = 8 * struct.calcsize(fmt)
    v = interesting_ints(rng, bits, orig, n)
    if fmt.islower() and v >= 1 << (bits - 1):
        v -= 1 << bits
    struct.pack_into("<" + fmt, d, off, v)


def m_ehdr(rng, lay, d):
    """An ELF header field (type, machine, flags, table offsets, counts, entry sizes) set to a boundary value."""
    off, fmt = rng.choice(EHDR_FIELDS)
    _set(rng, d, off, fmt, len(d))
    return d


def m_shdr(rng, lay, d):
    """A section header field set to a boundary value (offsets out of the file, huge sizes, bad links)."""
    s = rng.choice(lay.sections[1:] + [lay.note] * 3 + lay.symtabs + lay.relas + lay.strtabs)
    off, fmt = rng.choice(SHDR_FIELDS)
    _set(rng, d, s.hdr + off, fmt, len(d))
    return d


def m_phdr(rng, lay, d):
    """A program header field set to a boundary value."""
    if not lay.phnum:
        return m_shdr(rng, lay, d)
    off, fmt = rng.choice(PHDR_FIELDS)
    _set(rng, d, lay.phoff + 56 * rng.randrange(lay.phnum) + off, fmt, len(d))
    return d


def m_note_header(rng, lay, d):
    """The metadata note's namesz/descsz/type set to a boundary value."""
    _set(rng, d, lay.note_rec + 4 * rng.randrange(3), "I", lay.note.size)
    return d


def m_kd(rng, lay, d):
    """A kernel descriptor field (LDS/scratch/kernarg size, entry offset, rsrc words) set to a boundary value."""
    if not lay.kds:
        return m_flip(rng, lay, d)
    off, fmt = rng.choice(KD_FIELDS)
    _set(rng, d, rng.choice(lay.kds) + off, fmt, 1 << 16)
    return d


def m_symbol(rng, lay, d):
    """A symbol (preferably a kernel or descriptor symbol) with a field set to a boundary value."""
    entries = lay.kernel_syms or [s.offset + 24 for s in lay.symtabs]
    off, fmt = rng.choice(SYM_FIELDS)
    _set(rng, d, rng.choice(entries) + off, fmt, len(d))
    return d


def m_rela(rng, lay, d):
    """A relocation's offset, symbol, type or addend set to a boundary value."""
    relas = [s for s in lay.relas if s.size >= 24]
    if not relas:
        return m_symbol(rng, lay, d)
    s = rng.choice(relas)
    off, fmt = rng.choice(RELA_FIELDS)
    _set(rng, d, s.offset + 24 * rng.randrange(s.size // 24) + off, fmt, len(d))
    return d


BYTE_MUTATORS: list[Callable] = [m_truncate, m_flip, m_flip, m_bytes, m_ehdr, m_shdr, m_shdr, m_phdr, m_note_header,
                                 m_kd, m_kd, m_symbol, m_rela]


def mutate(rng: random.Random, lay: Layout) -> tuple[str, bytes]:
    """One mutated code object from a seed: metadata values (45%), structure bytes (45%), or both."""
    r = rng.random()
    if r < 0.45:
        return mutate_metadata(rng, lay)
    names, d = [], bytearray(lay.data)
    if r >= 0.9:
        name, data = mutate_metadata(rng, lay)
        names.append(name)
        d = bytearray(data)
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
        f = rng.choice(BYTE_MUTATORS)
        d = f(rng, lay, d)
        names.append(f.__name__)
    return "+".join(names), bytes(d)


# -- running one case -----------------------------------------------------------------------------

class CaseTimeout(BaseException):
    """A case ran past the time limit (BaseException so that no `except Exception` swallows it)."""


class Inconsistent(Exception):
    """A code object loaded, but what the loader says about it is impossible (a silent wrong answer)."""

    def __init__(self, kind: str, msg: str):
        super().__init__(f"{kind}: {msg}")
        self.kind = kind


def _on_alarm(signum, frame):
    raise CaseTimeout()


def synthetic_args(meta) -> tuple:
    """Arguments for every explicit argument of a kernel: an address, LDS(16), or a zero of the right size."""
    from amdq.runtime.kernargs import LDS
    out = []
    for a in meta.explicit_args:
        if a.value_kind == "global_buffer" or a.address_space == "global":
            out.append(0x1000)
        elif a.value_kind == "dynamic_shared_pointer":
            out.append(LDS(16))
        elif a.size in (1, 2, 4, 8):
            out.append(0)
        else:
            out.append(bytes(a.size) if 0 <= a.size <= 4096 else 0)
    return tuple(out)


def exercise(data: bytes) -> None:
    """Load, relocate, describe and pack arguments for every kernel; raise Inconsistent on an impossible result."""
    from amdq.cli import inspect_json, print_inspect
    from amdq.codeobj import load_code_object
    from amdq.errors import InvalidArgument, LDSLimitExceeded
    from amdq.runtime import kernargs

    img = load_code_object(data)
    img.at(BASE)
    json.dumps(inspect_json(img))
    print_inspect(img, io.StringIO())
    for k in img.kernels.values():
        m = k.meta
        if not (0 <= k.kd_offset and k.kd_offset + 64 <= img.size):
            raise Inconsistent("descriptor outside image", f"kernel {k.name}: descriptor at {k.kd_offset:#x} outside the {img.size}-byte image")
        if not 0 <= k.entry_offset < img.size:
            raise Inconsistent("entry outside image", f"kernel {k.name}: entry {k.entry_offset:#x} outside the {img.size}-byte image")
        for a in m.args:
            if not (isinstance(a.offset, int) and isinstance(a.size, int) and 0 <= a.offset
                    and a.offset + a.size <= m.kernarg_segment_size):
                raise Inconsistent("argument outside kernarg segment", f"kernel {k.name}: argument {a.name or a.value_kind} at {a.offset}+{a.size} "
                                   f"lies outside the {m.kernarg_segment_size}-byte kernarg segment")
        try:
            blob, _ = kernargs.pack(m, synthetic_args(m), (2, 1, 1), (32, 1, 1), lambda b: 0x2000,
                                    k.descriptor.group_segment_fixed_size, img.target.lds_bytes)
        except (InvalidArgument, LDSLimitExceeded):
            continue                          # our synthetic arguments do not fit: a clean refusal
        if len(blob) != max(m.kernarg_segment_size, 8):
            raise Inconsistent("kernarg blob size", f"kernel {k.name}: kernarg blob is {len(blob)} bytes, the segment "
                               f"{m.kernarg_segment_size}")


@dataclass
class Result:
    outcome: str                 # ok | rejected:<AmdqError class> | escape:<exception> | wrong | timeout | slow
    seconds: float
    detail: str = ""
    where: str = ""              # what to group failures by: the raising code location, or the inconsistency


def run_case(data: bytes, limit: float = CASE_LIMIT_S) -> Result:
    """Exercise one code object under a time limit and classify what happened."""
    from amdq.errors import AmdqError
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 5 * limit)
    t0 = time.perf_counter()
    try:
        exercise(data)
        res = Result("ok", 0.0)
    except CaseTimeout:
        res = Result("timeout", 0.0, f"still running after {5 * limit:.0f} s")
    except Inconsistent as e:
        res = Result("wrong", 0.0, str(e), e.kind)
    except AmdqError as e:
        res = Result(f"rejected:{type(e).__name__}", 0.0, str(e))
        if not str(e):
            res = Result("escape:empty-message", 0.0, type(e).__name__)
    except BaseException as e:  # noqa: BLE001  (anything else is what the fuzzer is looking for)
        if isinstance(e, KeyboardInterrupt):
            raise
        tb = traceback.extract_tb(e.__traceback__)
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb[-3:]))
        res = Result(f"escape:{type(e).__name__}", 0.0, str(e)[:200], where)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    res.seconds = time.perf_counter() - t0
    if res.outcome == "ok" or res.outcome.startswith("rejected:"):
        if res.seconds > limit:
            res = Result("slow", res.seconds, f"{res.outcome} after {res.seconds:.2f} s: {res.detail[:100]}", "slow")
    return res


def is_failure(outcome: str) -> bool:
    return not (outcome == "ok" or outcome.startswith("rejected:"))


def case(seeds: list[tuple[str, Layout]], seed: int, i: int) -> tuple[str, str, bytes]:
    """Case `i` of run `seed`: (seed name, mutator names, bytes); the same on every machine."""
    rng = random.Random(f"{seed}:{i}")
    name, lay = seeds[i % len(seeds)]
    how, data = mutate(rng, lay)
    return name, how, data


def run(count: int, seed: int, seeds: list[tuple[str, bytes]] | None = None, verbose: bool = False,
        progress: Callable[[str], None] | None = None) -> dict:
    """Run `count` cases; returns {"cases", "outcomes", "by_mutator", "failures", "seconds", ...}."""
    layouts = [(n, parse_layout(d)) for n, d in (seeds if seeds is not None else build_seeds())]
    outcomes: Counter = Counter()
    by_mut: dict[str, Counter] = {}
    failures, slowest = [], (0.0, -1)
    t0 = time.perf_counter()
    for i in range(count):
        name, how, data = case(layouts, seed, i)
        r = run_case(data)
        outcomes[r.outcome] += 1
        for mname in how.split("+"):
            by_mut.setdefault(mname, Counter())["failed" if is_failure(r.outcome) else r.outcome.split(":")[0]] += 1
        slowest = max(slowest, (r.seconds, i))
        if is_failure(r.outcome):
            failures.append({"case": i, "seed_file": name, "mutators": how, "outcome": r.outcome, "detail": r.detail,
                             "where": r.where})
            if verbose and progress:
                progress(f"case {i} ({name}, {how}): {r.outcome}: {r.detail}")
        if progress and (i + 1) % 1000 == 0:
            progress(f"{i + 1}/{count} cases, {sum(v for k, v in outcomes.items() if is_failure(k))} failures, "
                     f"{time.perf_counter() - t0:.0f} s")
    return {"cases": count, "seed": seed, "seed_files": [n for n, _ in layouts], "outcomes": dict(outcomes),
            "escapes": len(failures), "seconds": round(time.perf_counter() - t0, 1),
            "slowest_case": {"case": slowest[1], "seconds": round(slowest[0], 3)},
            "by_mutator": {k: dict(v) for k, v in sorted(by_mut.items())}, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10000, help="number of mutated code objects")
    ap.add_argument("--seed", type=int, default=0, help="run seed (case i of seed S is always the same bytes)")
    ap.add_argument("--case", type=int, help="replay only this case and print its traceback")
    ap.add_argument("--save", type=Path, help="write the bytes of each failing case into this directory")
    ap.add_argument("--mem-limit-gib", type=float, default=8.0,
                    help="address-space limit, so a huge allocation fails fast instead of swapping (0: none)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    if a.mem_limit_gib:
        import resource
        lim = int(a.mem_limit_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (lim, resource.getrlimit(resource.RLIMIT_AS)[1]))
    seeds = build_seeds()
    if a.case is not None:
        layouts = [(n, parse_layout(d)) for n, d in seeds]
        name, how, data = case(layouts, a.seed, a.case)
        print(f"case {a.case} of seed {a.seed}: {name}, {how}, {len(data)} bytes")
        r = run_case(data)
        print(f"{r.outcome} in {r.seconds:.3f} s: {r.detail} {r.where}")
        if a.verbose and is_failure(r.outcome):
            exercise(data)
        return 1 if is_failure(r.outcome) else 0
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    rep = run(a.count, a.seed, seeds, a.verbose, say)
    print(f"{rep['cases']} cases from {len(rep['seed_files'])} seeds in {rep['seconds']} s "
          f"(slowest case {rep['slowest_case']['case']}: {rep['slowest_case']['seconds']} s)")
    for k, v in sorted(rep["outcomes"].items(), key=lambda kv: -kv[1]):
        print(f"  {v:6d}  {k}")
    kinds = Counter((f["outcome"], f["where"]) for f in rep["failures"])
    for (o, where), n in kinds.most_common(40):
        ex = next(f for f in rep["failures"] if (f["outcome"], f["where"]) == (o, where))
        print(f"  FAIL x{n}: {o} [{where}], e.g. case {ex['case']} ({ex['seed_file']}, {ex['mutators']}): "
              f"{ex['detail'][:160]}")
    if a.save:
        a.save.mkdir(parents=True, exist_ok=True)
        layouts = [(n, parse_layout(d)) for n, d in seeds]
        for f in rep["failures"]:
            (a.save / f"case{f['case']}.bin").write_bytes(case(layouts, a.seed, f["case"])[2])
    rep.pop("failures")
    print(json.dumps({k: rep[k] for k in ("cases", "seed", "outcomes", "escapes", "seconds", "slowest_case")}))
    return 1 if rep["escapes"] else 0


if __name__ == "__main__":
    sys.exit(main())
