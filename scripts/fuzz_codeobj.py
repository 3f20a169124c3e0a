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
import contextlib
import copy
import gc
import io
import os
import json
import random
import signal
import struct
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import msgpack

ROOT = Path(__file__).resolve().parent.parent
BASE = 0x7F12_3456_0000                  # GPU address images are relocated to
CASE_LIMIT_S = 1.0                       # a case taking more CPU seconds than this is a failure

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


_GC = {"cpu": 0.0, "at": None, "thread": None}     # the collector's CPU seconds on the case's thread (_gc_clock)


def _gc_clock(phase: str, info: dict) -> None:
    """gc.callbacks: adds the CPU time of each collection the case's thread runs to _GC["cpu"] (a pass over every
    older object of a long-lived process, a pytest worker's, is not the case's work)."""
    if threading.get_ident() != _GC["thread"]:
        return
    if phase == "start":
        _GC["at"] = time.thread_time()
    elif _GC["at"] is not None:
        _GC["cpu"] += time.thread_time() - _GC["at"]
        _GC["at"] = None


def run_case(data: bytes, limit: float = CASE_LIMIT_S) -> Result:
    """Exercise one code object under a time limit and classify what happened."""
    from amdq.errors import AmdqError
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 5 * limit)
    _GC.update(cpu=0.0, at=None, thread=threading.get_ident())
    if _gc_clock not in gc.callbacks:
        gc.callbacks.append(_gc_clock)
    t0, c0 = time.perf_counter(), time.thread_time()
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
    # the work the case did: on a shared machine wall time also counts waiting, the process's CPU time the other
    # threads' (a JIT compile an earlier test left running in this process), and the thread's the garbage collector's
    # passes over the process's older objects (each took a case past the limit in a pytest worker)
    cpu = time.thread_time() - c0 - _GC["cpu"]
    _GC["thread"] = None
    if res.outcome == "ok" or res.outcome.startswith("rejected:"):
        if cpu > limit:
            res = Result("slow", res.seconds, f"{res.outcome} after {cpu:.2f} s of CPU: {res.detail[:100]}", "slow")
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


# -- launch stage: mutated code objects that load are launched on one simulated device -----------------
#
# Each case is a gfx1100 code object mutated in its machine code, its kernel descriptor or its metadata.
# If it loads, every kernel (up to LAUNCH_KERNELS) is launched with arguments built from its metadata;
# the launch must complete or raise an AmdqError, within the wait timeout plus a margin, without the
# simulator reporting an internal error. After every launch a known-good kernel runs on the same device
# and its result is checked exactly: a wrong or failing check means the device was poisoned.

LAUNCH_SEEDS = [                         # (name, source under tests/kernels or tests/codeobj, link with ld.lld)
    ("vadd.o", "vadd.cl", False), ("vadd.hsaco", "vadd.cl", True), ("scalar_args.hsaco", "scalar_args.cl", True),
    ("dyn_lds.o", "dyn_lds.cl", False), ("scratch_array.hsaco", "scratch_array.cl", True),
    ("lds_reduce.o", "lds_reduce.cl", False), ("divergent_loop.hsaco", "divergent_loop.cl", True),
    ("globals.o", "codeobj/globals.cl", False),
]
GOOD_SRC = "__kernel void put(__global int *out, int v) { out[get_global_id(0)] = v; }"
LAUNCH_KERNELS = 3                       # kernels launched per case
ARG_BYTES = 1 << 20                      # each global-pointer argument gets a buffer of this size
HANG_MARGIN_S = 2.0                      # a launch slower than 3 wait timeouts plus this is a hang

# gfx11 instruction words that make interesting faults (encodings from llvm-mc-19 -mcpu=gfx1100)
GFX11_WORDS = {
    "s_endpgm": [0xBFB00000], "s_branch -1": [0xBFA0FFFF], "s_barrier": [0xBFBD0000], "s_trap 2": [0xBF900002],
    "s_sleep 1": [0xBF830001], "s_cbranch_execz -1": [0xBFA5FFFF], "s_setpc_b64 s[0:1]": [0xBE804800],
    "s_mov_b64 exec, 0": [0xBEFE0180], "s_sethalt 1": [0xBF820001], "s_icache_inv": [0xBFBC0000],
    "s_mov_b32 m0, -1": [0xBEFD00C1], "v_mov_b32 v255, 0": [0x7FFE0280], "s_mov_b32 s105, 0": [0xBEE90080],
    "global_store_b32 v0, v1, s[0:1]": [0xDC6A0000, 0x00000100],
    "scratch_store_b32 v0, v1, off": [0xDC690000, 0x00FC0100], "ds_store_b32 v0, v1": [0xD8340000, 0x00000100],
    "s_load_b64 s[0:1], s[0:1], 0": [0xF4040000, 0xF8000000], "invalid": [0xFFFFFFFF], "zero": [0x00000000],
}

# kernel-descriptor bit fields the mutators aim at: (descriptor byte offset, width in bits, Bits table)
def _kd_fields() -> list[tuple[str, int, int, int]]:
    """(name, descriptor byte offset of its word, low bit, high bit) of every RSRC1/2/3 and property field."""
    from amdq.hw import kd as KD
    out = []
    for off, bits in ((48, KD.RSRC1[11]), (52, KD.RSRC2[11]), (44, KD.RSRC3[11]), (56, KD.CODE_PROPERTIES)):
        out += [(f"{bits.name}.{n}", off, f.lo, f.hi) for n, f in bits.fields.items()]
    return out


def build_launch_seeds() -> list[tuple[str, bytes]]:
    """gfx1100 seeds for the launch stage (clang-19 objects, ld.lld-19 shared objects, an llvmlite object)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from clang import compile_cl  # noqa: E402

    import amdq
    out = [(name, compile_cl(ROOT / "tests" / src if src.startswith("codeobj/") else src, "gfx1100",
                             link=link).read_bytes()) for name, src, link in LAUNCH_SEEDS]
    out.append(("llvmlite.o", amdq.compile(LLVM_IR, "gfx1100")))
    return out


def _text(lay: Layout) -> list[tuple[int, int]]:
    return [(s.offset, s.size) for s in lay.sections if s.flags & 4 and s.type != 8 and s.size >= 8]


def lm_code_word(rng, lay, d):
    """An instruction word of a kernel's machine code replaced (an interesting gfx11 word, random, or another)."""
    off, size = rng.choice(_text(lay))
    p = off + 4 * rng.randrange(size // 4)
    words = rng.choice(list(GFX11_WORDS.values()) + [[rng.getrandbits(32)]] * 4 +
                       [[struct.unpack_from("<I", d, off + 4 * rng.randrange(size // 4))[0]]] * 2)
    for k, w in enumerate(words):
        if p + 4 * k + 4 <= off + size:
            struct.pack_into("<I", d, p + 4 * k, w)
    return d


def lm_code_encoding(rng, lay, d):
    """An instruction replaced by random bits inside one gfx11 encoding (its fixed bits kept), with random
    second and literal dwords: every encoding and opcode the decoder knows is reached."""
    from amdq.hw import isa
    off, size = rng.choice(_text(lay))
    p = off + 4 * rng.randrange(size // 4)
    e = rng.choice(list(isa.encodings("rdna3").values()))
    words = [e.value | rng.getrandbits(32) & ~e.mask & 0xFFFFFFFF, rng.getrandbits(32), rng.getrandbits(32)]
    for k, w in enumerate(words):
        if p + 4 * k + 4 <= off + size:
            struct.pack_into("<I", d, p + 4 * k, w)
    return d


def lm_code_flip(rng, lay, d):
    """1-3 bits flipped in one instruction word (opcodes, register numbers, offsets, immediates)."""
    off, size = rng.choice(_text(lay))
    p = off + 4 * rng.randrange(size // 4)
    for _ in range(rng.randint(1, 3)):
        d[p + rng.randrange(4)] ^= 1 << rng.randrange(8)
    return d


def lm_code_swap(rng, lay, d):
    """Two instruction words of the machine code swapped, or a run of words shifted by one word."""
    off, size = rng.choice(_text(lay))
    n = size // 4
    i, j = rng.randrange(n), rng.randrange(n)
    a, b = off + 4 * min(i, j), off + 4 * max(i, j)
    if rng.random() < 0.5:
        d[a:a + 4], d[b:b + 4] = d[b:b + 4], d[a:a + 4]
    elif b > a:
        d[a:b] = d[a + 4:b + 4] if b + 4 <= off + size else d[a:b]
    return d


def lm_kd_field(rng, lay, d):
    """One RSRC1/RSRC2/RSRC3 or kernel_code_properties field of a descriptor set to 0, its maximum, +-1 or random."""
    if not lay.kds:
        return lm_code_word(rng, lay, d)
    name, off, lo, hi = rng.choice(_kd_fields())
    base = rng.choice(lay.kds) + off
    fmt = "<H" if off == 56 else "<I"
    word = struct.unpack_from(fmt, d, base)[0]
    width, cur = hi - lo + 1, (word >> lo) & ((1 << (hi - lo + 1)) - 1)
    v = rng.choice([0, (1 << width) - 1, cur + 1, cur - 1, cur ^ 1, rng.getrandbits(width)]) & ((1 << width) - 1)
    word = word & ~(((1 << width) - 1) << lo) | v << lo
    struct.pack_into(fmt, d, base, word)
    return d


def lm_kd_word(rng, lay, d):
    """A descriptor's entry offset, segment sizes or a whole RSRC word set to a boundary value."""
    if not lay.kds:
        return lm_code_word(rng, lay, d)
    base = rng.choice(lay.kds)
    f = rng.choice(["entry", "entry", "group", "private", "kernarg", "rsrc"])
    if f == "entry":
        cur = struct.unpack_from("<q", d, base + 16)[0]
        v = rng.choice([0, 4, -64, 1 << 40, -(1 << 40), cur + 4, cur - 4, cur + 2, cur + 256, cur - 256,
                        cur + rng.randrange(-64, 64) * 4, cur + 1 << 20, -cur])
        struct.pack_into("<q", d, base + 16, v)
    elif f in ("group", "private", "kernarg"):
        off = {"group": 0, "private": 4, "kernarg": 8}[f]
        cur = struct.unpack_from("<I", d, base + off)[0]
        struct.pack_into("<I", d, base + off, rng.choice([0, 4, 64, 1024, 65536, 65540, 1 << 20, cur * 2, cur + 4,
                                                          (1 << 32) - 1, 1 << 31]) & 0xFFFFFFFF)
    else:
        struct.pack_into("<I", d, base + rng.choice([44, 48, 52]), rng.choice([0, 0xFFFFFFFF, rng.getrandbits(32)]))
    return d


def endless(lay: Layout) -> bytes:
    """The seed with every word of its machine code made `s_branch -1`: whatever instruction a kernel starts at
    branches to itself, so each kernel runs until the wait times out (the hang the random mutations reach only by
    chance, and then often as a long but finite loop whose outcome depends on the machine's speed)."""
    d = bytearray(lay.data)
    for off, size in _text(lay):
        for p in range(off, off + size - 3, 4):
            struct.pack_into("<I", d, p, GFX11_WORDS["s_branch -1"][0])
    return bytes(d)


LAUNCH_MUTATORS: list[Callable] = [lm_code_word, lm_code_encoding, lm_code_encoding, lm_code_flip, lm_code_flip, lm_code_swap, lm_kd_field,
                                   lm_kd_field, lm_kd_field, lm_kd_word, lm_kd_word]
LAUNCH_META = [mm_kernel_int, mm_arg_str, mm_arg_int, mm_kernel_other]


def mutate_for_launch(rng: random.Random, lay: Layout) -> tuple[str, bytes]:
    """A mutation aimed at what runs: machine code and descriptor (90%), sometimes with a metadata change."""
    names, d = [], bytearray(lay.data)
    if rng.random() < 0.15:
        m = lay.meta
        f = rng.choice(LAUNCH_META)
        f(rng, m)
        names.append(f.__name__)
        try:
            d = bytearray(with_metadata(lay, msgpack.packb(m, use_bin_type=True)))
        except (ValueError, OverflowError, TypeError):
            pass
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
        f = rng.choice(LAUNCH_MUTATORS)
        d = f(rng, lay, d)
        names.append(f.__name__)
    return "+".join(names), bytes(d)


def launch_case(seeds: list[tuple[str, Layout]], seed: int, i: int) -> tuple[str, str, bytes]:
    """Launch case `i` of run `seed`: (seed name, mutator names, bytes); the same on every machine."""
    rng = random.Random(f"launch:{seed}:{i}")
    name, lay = seeds[i % len(seeds)]
    how, data = mutate_for_launch(rng, lay)
    return name, how, data


@contextlib.contextmanager
def environ(**env: str):
    """Environment variables set for the duration of a block."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class StderrTap(io.TextIOBase):
    """sys.stderr that also keeps what is written (the simulator reports internal errors there)."""

    def __init__(self, under):
        self.under, self.text = under, []

    def write(self, s: str) -> int:
        self.text.append(s)
        return self.under.write(s) if self.under is not None else len(s)

    def flush(self) -> None:
        if self.under is not None:
            self.under.flush()

    def take(self) -> str:
        out, self.text = "".join(self.text), []
        return out


def launch_args(dev, kernel, pool: list) -> tuple:
    """Arguments from a kernel's metadata: buffers for global pointers, small numbers by value, LDS(n)."""
    from amdq.runtime.kernargs import LDS
    out, nbuf = [], 0
    for a in kernel.meta.explicit_args:
        tn = (a.type_name or "").strip()
        if a.value_kind == "global_buffer" or (a.value_kind == "by_value" and a.address_space == "global"):
            if nbuf == len(pool):
                pool.append(dev.alloc(ARG_BYTES))
            out.append(pool[nbuf])
            nbuf += 1
        elif a.value_kind == "dynamic_shared_pointer":
            out.append(LDS(256))
        elif tn.rstrip("*").strip() in ("float", "double", "half") or (not tn and a.size in (4, 8)):
            out.append(1.5)
        elif a.size in (1, 2, 4, 8):
            out.append(16)
        else:
            out.append(bytes(a.size) if 0 <= a.size <= 4096 else 0)
    return tuple(out)


def launch_shape(kernel) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A small grid and a block within the kernel's maximum workgroup size (and its required size)."""
    m = kernel.meta
    req = m.reqd_workgroup_size
    if isinstance(req, (list, tuple)) and len(req) == 3 and all(isinstance(x, int) and 1 <= x <= 1024 for x in req):
        return (2, 1, 1), tuple(req)
    mx = m.max_flat_workgroup_size if isinstance(m.max_flat_workgroup_size, int) else 64
    return (2, 1, 1), (max(1, min(64, mx)), 1, 1)


@dataclass
class LaunchOutcome:
    outcome: str                 # completed | error:<AmdqError class> | failure kinds (see is_launch_failure)
    seconds: float
    kernel: str = ""
    detail: str = ""
    where: str = ""
    submitted: bool = False      # the launch reached the GPU (its timeline value was taken)


def is_launch_failure(outcome: str) -> bool:
    return not (outcome == "completed" or outcome.startswith("error:"))


class Launcher:
    """One simulated gfx1100 device that launches fuzzed kernels and checks a known-good kernel after each."""

    def __init__(self, queue: str = "pm4", timeout_ms: int = 300, mode: str | None = None):
        self.queue, self.timeout_ms, self.mode = queue, timeout_ms, mode
        self.recreated = self.lost_resets = 0
        self.n = 0
        self.good_code = self._good_code()
        self._open()

    @staticmethod
    def _good_code() -> bytes:
        sys.path.insert(0, str(ROOT / "tests"))
        from clang import compile_cl  # noqa: E402
        return compile_cl(GOOD_SRC, "gfx1100").read_bytes()

    def _open(self) -> None:
        import amdq
        env = {"AMD_AQL": "1" if self.queue == "aql" else "0"}
        if self.mode:
            env["AMDQ_SIM_MODE"] = self.mode
        with environ(**env):
            self.dev = amdq.open_device("SIMKFD+AMD:gfx1100")
        self.good = self.dev.load(self.good_code)["put"]
        self.out = self.dev.alloc(4 * 128)
        self.pool: list = []

    def recreate(self) -> None:
        """Close the device and open a new one (counted: the point is that this is never needed)."""
        try:
            self.dev.close()
        except Exception:  # noqa: BLE001
            pass
        self.recreated += 1
        self.lost_resets += self.resets
        self._open()

    @property
    def resets(self) -> int:
        """Queue recoveries of the current device."""
        return sum(q.resets for q in self.dev.queues)

    def check(self) -> str | None:
        """A known-good launch on the same device; None if its result is exact, else what went wrong."""
        import numpy as np
        self.n += 1
        try:
            self.good(self.out, self.n, grid=2, block=64, wait=True)
            got = self.out.numpy(np.int32)
        except Exception as e:  # noqa: BLE001
            return f"known-good launch raised {type(e).__name__}: {str(e)[:200]}"
        if not (got == self.n).all():
            bad = np.flatnonzero(got != self.n)
            return f"known-good launch wrote {got[bad[0]]} at [{bad[0]}] ({len(bad)} of 128 wrong), expected {self.n}"
        return None

    def launch(self, kernel) -> LaunchOutcome:
        """One launch of a fuzzed kernel, classified."""
        from amdq.errors import AmdqError, GPUException
        from amdq.hw import faults as F
        t0 = time.perf_counter()
        q = self.dev.queue
        before = q.timeline.value
        try:
            args = launch_args(self.dev, kernel, self.pool)
            grid, block = launch_shape(kernel)
            kernel(*args, grid=grid, block=block, wait=True)
            res = LaunchOutcome("completed", 0.0)
        except AmdqError as e:
            res = LaunchOutcome(f"error:{type(e).__name__}", 0.0, detail=str(e)[:300])
            if not str(e):
                res = LaunchOutcome("escape:empty-message", 0.0, detail=type(e).__name__)
            elif isinstance(e, GPUException) and isinstance(e.info.get("record"), F.EngineError):
                res = LaunchOutcome("internal", 0.0, detail=str(e)[:300], where="EngineError record")
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, (KeyboardInterrupt, CaseTimeout)):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb[-3:]))
            res = LaunchOutcome(f"escape:{type(e).__name__}", 0.0, detail=str(e)[:300], where=where)
        res.seconds = time.perf_counter() - t0
        res.kernel = kernel.name
        res.submitted = self.dev.queue is not q or q.timeline.value != before
        if not is_launch_failure(res.outcome) and res.seconds > 3 * self.timeout_ms / 1000 + HANG_MARGIN_S:
            res = LaunchOutcome("hang", res.seconds, kernel.name, f"{res.outcome} after {res.seconds:.1f} s", "hang",
                                res.submitted)
        return res


def run_launch_case(launcher: Launcher, data: bytes, tap: StderrTap, limit_s: float = 60.0) -> tuple[str, list]:
    """Load one mutated code object and launch its kernels, each followed by the known-good check.
    Returns (load outcome, [LaunchOutcome...])."""
    from amdq.errors import AmdqError
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    outs: list[LaunchOutcome] = []
    try:
        try:
            prg = launcher.dev.load(data)
        except AmdqError as e:
            return f"rejected:{type(e).__name__}", outs
        except CaseTimeout:
            raise
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            return f"escape:{type(e).__name__}: {str(e)[:120]}", outs
        for name in prg.kernels[:LAUNCH_KERNELS]:
            tap.take()
            r = launcher.launch(prg[name])
            poisoned = launcher.check()
            err = tap.take()
            if "internal error" in err and not is_launch_failure(r.outcome):
                r = LaunchOutcome("internal", r.seconds, r.kernel, err.strip().splitlines()[-1][:300], "stderr",
                                  r.submitted)
            if poisoned:
                if not is_launch_failure(r.outcome):
                    r = LaunchOutcome("poisoned", r.seconds, r.kernel, f"after {r.outcome}: {poisoned}", "check",
                                      r.submitted)
                launcher.recreate()
                outs.append(r)
                break
            outs.append(r)
        return "ok", outs
    except CaseTimeout:
        outs.append(LaunchOutcome("hang", limit_s, detail=f"host still busy after {limit_s:.0f} s", where="alarm"))
        launcher.recreate()
        return "ok", outs
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_launch(launches: int, seed: int, seeds: list[tuple[str, bytes]] | None = None, queues=("pm4", "aql"),
               timeout_ms: int = 300, mode: str | None = None, verbose: bool = False,
               progress: Callable[[str], None] | None = None, max_cases: int | None = None) -> dict:
    """Mutate and load cases until `launches` kernels have been launched; cases alternate between one
    device per queue kind. Returns counts per outcome, timings, recoveries and the failures."""
    with environ(AMDQ_WAIT_TIMEOUT_MS=str(timeout_ms)):
        return _run_launch(launches, seed, seeds, queues, timeout_ms, mode, verbose, progress, max_cases)


def _run_launch(launches, seed, seeds, queues, timeout_ms, mode, verbose, progress, max_cases) -> dict:
    layouts = [(n, parse_layout(d)) for n, d in (seeds if seeds is not None else build_launch_seeds())]
    launchers = [Launcher(q, timeout_ms, mode) for q in queues]
    tap = StderrTap(sys.stderr)
    loads: Counter = Counter()
    outcomes: Counter = Counter()
    by_mut: dict[str, Counter] = {}
    failures, times = [], []
    examples: dict[str, str] = {}            # the first launch of each outcome
    submitted = 0
    t0 = time.perf_counter()
    i = 0
    resets0 = [lc.resets for lc in launchers]
    old_stderr, sys.stderr = sys.stderr, tap
    try:
        while sum(outcomes.values()) < launches and (max_cases is None or i < max_cases):
            lc = launchers[i % len(launchers)]
            name, how, data = launch_case(layouts, seed, i)
            load, outs = run_launch_case(lc, data, tap)
            loads[load.split(":")[0] if load.startswith("escape") else load] += 1
            if load.startswith("escape"):
                failures.append({"case": i, "seed_file": name, "mutators": how, "queue": lc.queue, "outcome": "load-escape",
                                 "detail": load, "where": "load"})
            for r in outs:
                outcomes[r.outcome] += 1
                examples.setdefault(r.outcome, f"case {i} ({name}, {how}, {lc.queue}): {r.detail[:240]}")
                times.append(r.seconds)
                submitted += r.submitted
                for mname in how.split("+"):
                    by_mut.setdefault(mname, Counter())["failed" if is_launch_failure(r.outcome)
                                                        else r.outcome.split(":")[-1]] += 1
                if is_launch_failure(r.outcome):
                    failures.append({"case": i, "seed_file": name, "mutators": how, "queue": lc.queue,
                                     "kernel": r.kernel, "outcome": r.outcome, "detail": r.detail, "where": r.where})
                    if verbose and progress:
                        progress(f"case {i} ({name}, {how}, {lc.queue}): {r.outcome}: {r.detail}")
            i += 1
            if progress and i % 50 == 0:
                progress(f"{i} cases, {sum(outcomes.values())} launches, {len(failures)} failures, "
                         f"{time.perf_counter() - t0:.0f} s")
    finally:
        sys.stderr = old_stderr
        resets = sum(lc.resets + lc.lost_resets for lc in launchers) - sum(resets0)
        recreated = sum(lc.recreated for lc in launchers)
        for lc in launchers:
            lc.dev.close()
    times.sort()
    n = len(times)
    return {"cases": i, "seed": seed, "launches": n, "submitted": submitted, "queues": list(queues),
            "timeout_ms": timeout_ms, "loads": dict(loads), "outcomes": dict(outcomes), "failures_count": len(failures),
            "recoveries": resets, "devices_recreated": recreated, "seconds": round(time.perf_counter() - t0, 1),
            "launch_seconds": {"mean": round(sum(times) / n, 4) if n else 0, "median": round(times[n // 2], 4) if n else 0,
                               "max": round(times[-1], 3) if n else 0},
            "by_mutator": {k: dict(v) for k, v in sorted(by_mut.items())}, "examples": examples, "failures": failures}


def launch_main(a) -> int:
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    seeds = build_launch_seeds()
    queues = ("pm4", "aql") if a.queue == "both" else (a.queue,)
    if a.case is not None:
        layouts = [(n, parse_layout(d)) for n, d in seeds]
        name, how, data = launch_case(layouts, a.seed, a.case)
        q = queues[a.case % len(queues)]
        print(f"launch case {a.case} of seed {a.seed}: {name}, {how}, {q} queue, {len(data)} bytes")
        with environ(AMDQ_WAIT_TIMEOUT_MS=str(a.timeout_ms)):
            lc = Launcher(q, a.timeout_ms, a.mode)
            load, outs = run_launch_case(lc, data, StderrTap(None))
        print(f"load: {load}")
        for r in outs:
            print(f"  {r.kernel}: {r.outcome} in {r.seconds:.3f} s: {r.detail} {r.where}")
        lc.dev.close()
        return 1 if load.startswith("escape") or any(is_launch_failure(r.outcome) for r in outs) else 0
    rep = run_launch(a.launch, a.seed, seeds, queues, a.timeout_ms, a.mode, a.verbose, say)
    print(f"{rep['launches']} launches ({rep['submitted']} reached the GPU) from {rep['cases']} mutated code objects "
          f"in {rep['seconds']} s; {rep['recoveries']} queue recoveries, {rep['devices_recreated']} devices recreated")
    print(f"  loads: {rep['loads']}")
    for k, v in sorted(rep["outcomes"].items(), key=lambda kv: -kv[1]):
        print(f"  {v:6d}  {k}" + (f"   e.g. {rep['examples'][k]}" if a.verbose else ""))
    kinds = Counter((f["outcome"], f["where"]) for f in rep["failures"])
    for (o, where), n in kinds.most_common(40):
        ex = next(f for f in rep["failures"] if (f["outcome"], f["where"]) == (o, where))
        print(f"  FAIL x{n}: {o} [{where}], e.g. case {ex['case']} ({ex['seed_file']}, {ex['mutators']}, "
              f"{ex['queue']}): {ex['detail'][:200]}")
    if a.save:
        a.save.mkdir(parents=True, exist_ok=True)
        layouts = [(n, parse_layout(d)) for n, d in seeds]
        for f in rep["failures"]:
            (a.save / f"launch{f['case']}.bin").write_bytes(launch_case(layouts, a.seed, f["case"])[2])
    for k in ("failures", "by_mutator", "examples"):
        rep.pop(k)
    print(json.dumps(rep))
    return 1 if rep["failures_count"] else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10000, help="number of mutated code objects")
    ap.add_argument("--seed", type=int, default=0, help="run seed (case i of seed S is always the same bytes)")
    ap.add_argument("--case", type=int, help="replay only this case and print its traceback")
    ap.add_argument("--save", type=Path, help="write the bytes of each failing case into this directory")
    ap.add_argument("--mem-limit-gib", type=float, default=8.0,
                    help="address-space limit, so a huge allocation fails fast instead of swapping (0: none)")
    ap.add_argument("--launch", type=int, metavar="N",
                    help="launch stage: mutate gfx1100 code objects until N kernels were launched on a simulated device")
    ap.add_argument("--queue", choices=("pm4", "aql", "both"), default="both", help="launch stage: compute queue kind")
    ap.add_argument("--timeout-ms", type=int, default=300, help="launch stage: AMDQ_WAIT_TIMEOUT_MS of the device")
    ap.add_argument("--mode", choices=("sync", "async"), help="launch stage: AMDQ_SIM_MODE (default: async)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    if a.launch is not None:
        return launch_main(a)      # no address-space limit: the simulated GPU reserves its VRAM as address space
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
