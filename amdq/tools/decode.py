"""Ring and indirect-buffer decoder (PM4, SDMA, AQL): what a queue holds, packet by packet.

Every packet is decoded with the tables the driver encodes with (amdq.hw.pm4, amdq.hw.sdma, amdq.hw.aql), register
writes (SET_SH_REG, SET_UCONFIG_REG, WRITE_DATA to a register) are named by the register map's reverse lookup
(amdq.hw.regmap) with their fields, and indirect buffers (PM4 INDIRECT_BUFFER, SDMA INDIRECT, the PM4 IB of an
AQL vendor packet) are followed into the memory they point at.

    dump_queues(dev, path)                      write the device's rings, the IBs they reference and their addresses
    decode_dump(load_dump(path)) -> [lines]     the listing of a dump
    decode_raw(data, kind, arch) -> [lines]     raw dwords (PM4 or SDMA) or 64-byte AQL packets of a binary file

The dump file is one msgpack map: {"format": "amdq-dump", "version": 1, "arch", "device", "kernels": {address:
name}, "queues": [{"kind": "pm4"|"aql"|"sdma", "name", "va", "size", "ring": bytes (the written part of a ring that has not
wrapped, else all of it), "rptr", "wptr"}], "memory": [[va,
bytes], ...]}; rptr/wptr count dwords (PM4), packets (AQL) or bytes (SDMA), as each queue's hardware does.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Iterable

import msgpack
import numpy as np

from ..errors import AmdqError
from ..hw import aql as A
from ..hw import pm4, sdma
from ..hw.aql_pm4 import AMD_AQL_FORMAT_PM4_IB, PM4_IB
from ..hw.regmap import Layout, MemoryBackend, Register, Registers
from ..hw.targets import Target, get_target

FORMAT, VERSION = "amdq-dump", 1
KINDS = ("pm4", "sdma", "aql")
MAX_DEPTH = 4                      # IB nesting followed (hardware chains at most a few levels)
MAX_IB_DWORDS = 1 << 20
ALWAYS = {"DST_SEL", "REFERENCE", "DATA", "data", "VALUE", "value", "count", "IB_SIZE", "ib_size", "DIM_X", "DIM_Y", "DIM_Z"}


class DecodeError(AmdqError):
    """A dump or a raw stream that cannot be decoded as asked."""


Reader = Callable[[int, int], "bytes | None"]          # (va, nbytes) -> bytes, or None if not available


@dataclass
class Decoder:
    """Decodes the streams of one target; `read` gives the memory indirect buffers point at."""
    target: Target
    read: Reader = lambda va, n: None
    kernels: dict[int, str] = field(default_factory=dict)
    out: list[str] = field(default_factory=list)
    state: dict[str, int] = field(default_factory=dict)      # registers written so far (PGM_LO/HI -> kernel)
    nest: int = 0                                               # indirect buffers entered

    def __post_init__(self) -> None:
        self.gen = self.target.gfx_version
        self.pm4 = pm4.table(self.gen)
        self.sdma = sdma.table(self.target.ip["SDMA"][0])
        self.regs = Registers(Layout.for_target(self.target), MemoryBackend(), from_env=False)
        self.events = {v: k for k, v in pm4.EVENT_TYPES.get(max(g for g in pm4.EVENT_TYPES if g <= max(self.gen, 9)),
                                                           {}).items()}

    # -- helpers --------------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.out.append("  " * depth + text)

    def register(self, addr: int) -> Register | None:
        """The register at a dword address, GC's first (the compute state lives there)."""
        hits = self.regs.layout.lookup(addr)
        for block, inst, name in sorted(hits, key=lambda h: (h[0] != "GC", h[1])):
            return self.regs.block(block, inst)[name]
        return None

    def reg_write(self, depth: int, addr: int, value: int) -> None:
        """One register write: the register's name and its non-zero fields (by value name where known)."""
        r = self.register(addr)
        if r is None:
            self.emit(depth, f"reg {addr:#06x} = {value:#010x}")
            return
        whole = len(r.fields) == 1 and next(iter(r.fields.values())).hi - next(iter(r.fields.values())).lo == 31
        fields = "" if whole else " ".join(f"{k}={v:#x}" if isinstance(v, int) and v > 9 else f"{k}={v}"
                                           for k, v in r.decode(value, names=True).items() if v not in (0, "0"))
        self.state[r.name] = value
        note = ""
        if r.name in ("regCOMPUTE_PGM_LO", "regCOMPUTE_PGM_HI") and {"regCOMPUTE_PGM_LO", "regCOMPUTE_PGM_HI"} <= set(self.state):
            pgm = (self.state["regCOMPUTE_PGM_LO"] | self.state["regCOMPUTE_PGM_HI"] << 32) << 8
            if self.kernels.get(pgm):
                note = f"  (kernel {self.kernels[pgm]} at {pgm:#x})"
        self.emit(depth, f"{r.qualname} = {value:#010x}" + (f"  {fields}" if fields else "") + note)

    def kernel_now(self) -> str | None:
        """The kernel the COMPUTE_PGM registers written so far point at."""
        if {"regCOMPUTE_PGM_LO", "regCOMPUTE_PGM_HI"} <= set(self.state):
            return self.kernels.get((self.state["regCOMPUTE_PGM_LO"] | self.state["regCOMPUTE_PGM_HI"] << 32) << 8)
        return None

    @staticmethod
    def fmt(fields: dict, enums: dict | None = None, skip: Iterable[str] = ()) -> str:
        """`NAME=value ...` of a packet's fields: zero fields left out (but values and sizes), enum names used."""
        out = []
        for k, v in fields.items():
            if k in skip or (v == 0 and k not in ALWAYS):
                continue
            if isinstance(v, list):
                out.append(f"{k}=[{', '.join(f'{x:#x}' for x in v[:8])}{', ...' if len(v) > 8 else ''}]")
                continue
            names = {n: x for n, x in (enums or {}).get(k, {}).items()}
            inv = {x: n for n, x in names.items()}
            out.append(f"{k}={inv[v]}" if v in inv else f"{k}={v:#x}" if isinstance(v, int) and v > 9 else f"{k}={v}")
        return " ".join(out)

    def _ib(self, depth: int, what: str, va: int, ndw: int, walk: Callable[[np.ndarray, int, int], None]) -> None:
        if self.nest >= MAX_DEPTH:
            self.emit(depth + 1, f"(not followed: {what} nested deeper than {MAX_DEPTH})")
            return
        if not 0 < ndw <= MAX_IB_DWORDS:
            self.emit(depth + 1, f"(not followed: {what} of {ndw} dwords)")
            return
        data = self.read(va, ndw * 4)
        if data is None or len(data) < ndw * 4:
            self.emit(depth + 1, f"(not followed: {what} at {va:#x} is not in the dump)")
            return
        self.emit(depth + 1, f"{what} @ {va:#x}, {ndw} dwords:")
        self.nest += 1
        try:
            walk(np.frombuffer(bytes(data), np.uint32), depth + 2, va)
        finally:
            self.nest -= 1

    # -- PM4 ------------------------------------------------------------------------------------
    def pm4_stream(self, dws: np.ndarray, depth: int = 0, va: int | None = None, start: int = 0) -> None:
        """Every packet of dws[start:]; a dword that does not decode is shown and skipped."""
        i = start
        while i < len(dws):
            try:
                p = self.pm4.decode(dws, i)
            except pm4.BadPacket as e:
                self.emit(depth, f"[{i:5d}] {int(dws[i]):#010x}  ?? {str(e).split(': ', 1)[-1]}")
                i += 1
                continue
            self.pm4_packet(p, i, depth, va)
            i += p.size

    def pm4_packet(self, p: pm4.Packet, i: int, depth: int, va: int | None) -> None:
        where = f"[{i:5d}]" + (f" {va + 4 * i:#x}" if va is not None else "")
        f = p.fields
        if p.name in pm4.REG_RANGES and "REG" in f:
            vals = f.get("VALUES", [])
            self.emit(depth, f"{where} {p.name} ({len(vals)} register{'s' * (len(vals) != 1)})")
            for k, v in enumerate(vals):
                self.reg_write(depth + 2, f["REG"] + k, v)
            return
        if p.name == "WRITE_DATA":
            enums = pm4.ENUMS["WRITE_DATA"]
            self.emit(depth, f"{where} WRITE_DATA {self.fmt(f, enums, ('DATA',))}")
            data = f.get("DATA", [])
            if f.get("DST_SEL") == enums["DST_SEL"]["MEM_MAPPED_REGISTER"]:
                for k, v in enumerate(data):
                    self.reg_write(depth + 2, f["ADDR"] + (0 if f.get("ADDR_INCR") else k), v)
            else:
                for k in range(0, len(data), 8):
                    self.emit(depth + 2, f"{f['ADDR'] + 4 * k:#x}: " + " ".join(f"{x:08x}" for x in data[k:k + 8]))
            return
        enums = dict(pm4.ENUMS.get(p.name, {}))
        text = self.fmt(f, enums, ("BODY", "DATA"))
        if "EVENT_TYPE" in f and f["EVENT_TYPE"] in self.events:
            text = text.replace(f"EVENT_TYPE={f['EVENT_TYPE']:#x}" if f["EVENT_TYPE"] > 9 else f"EVENT_TYPE={f['EVENT_TYPE']}",
                                f"EVENT_TYPE={self.events[f['EVENT_TYPE']]}")
        if "BODY" in f:
            text += (" " if text else "") + "body " + " ".join(f"{x:#010x}" for x in f["BODY"][:16])
        if p.name in ("DISPATCH_DIRECT", "DISPATCH_INDIRECT") and self.kernel_now():
            text += f"  kernel {self.kernel_now()}"
        self.emit(depth, f"{where} {p.name}" + (f" {text}" if text else ""))
        if p.name == "INDIRECT_BUFFER":
            self._ib(depth, "IB", f["IB_BASE"], f["IB_SIZE"], lambda d, dep, a: self.pm4_stream(d, dep, a))

    # -- SDMA -----------------------------------------------------------------------------------
    def sdma_stream(self, dws: np.ndarray, depth: int = 0, va: int | None = None, start: int = 0) -> None:
        i = start
        while i < len(dws):
            try:
                p = self.sdma.decode(dws, i)
            except sdma.BadPacket as e:
                self.emit(depth, f"[{i:5d}] {int(dws[i]):#010x}  ?? {str(e).split(': ', 1)[-1]}")
                i += 1
                continue
            where = f"[{i:5d}]" + (f" {va + 4 * i:#x}" if va is not None else "")
            skip = ("op", "sub_op") + (("data",) if p.name in ("NOP",) and not p.fields.get("data") else ())
            text = self.fmt(p.fields, None, skip)
            self.emit(depth, f"{where} {p.name}" + (f" {text}" if text else ""))
            if p.name == "INDIRECT":
                self._ib(depth, "IB", p.fields["ib_base"], p.fields["ib_size"],
                         lambda d, dep, a: self.sdma_stream(d, dep, a))
            i += p.size

    # -- AQL ------------------------------------------------------------------------------------
    def aql_packet(self, raw: bytes, index: int, depth: int = 0, va: int | None = None) -> None:
        where = f"[{index:5d}]" + (f" {va:#x}" if va is not None else "")
        hdr = struct.unpack_from("<H", raw, 0)[0]
        h = A.HEADER.decode(hdr)
        flags = f"barrier={h['BARRIER']} acquire={h['ACQUIRE_FENCE_SCOPE']} release={h['RELEASE_FENCE_SCOPE']}"
        t = h["TYPE"]
        if t == A.HSA_PACKET_TYPE_KERNEL_DISPATCH:
            d = A.KERNEL_DISPATCH.unpack(raw)
            name = self.kernels.get(d["kernel_object"])
            self.emit(depth, f"{where} KERNEL_DISPATCH {flags} dims={A.SETUP.decode(d['setup'])['DIMENSIONS']}"
                             + (f"  kernel {name}" if name else ""))
            self.emit(depth + 2, f"workgroup=({d['workgroup_size_x']}, {d['workgroup_size_y']}, {d['workgroup_size_z']}) "
                                 f"grid=({d['grid_size_x']}, {d['grid_size_y']}, {d['grid_size_z']}) work-items "
                                 f"private={d['private_segment_size']} group={d['group_segment_size']}")
            self.emit(depth + 2, f"kernel_object={d['kernel_object']:#x} kernarg_address={d['kernarg_address']:#x} "
                                 f"completion_signal={d['completion_signal']['handle']:#x}")
        elif t in (A.HSA_PACKET_TYPE_BARRIER_AND, A.HSA_PACKET_TYPE_BARRIER_OR):
            d = A.BARRIER_AND.unpack(raw)
            deps = [s["handle"] for s in d["dep_signal"] if s["handle"]]
            kind = "BARRIER_AND" if t == A.HSA_PACKET_TYPE_BARRIER_AND else "BARRIER_OR"
            self.emit(depth, f"{where} {kind} {flags} deps=[{', '.join(f'{x:#x}' for x in deps)}] "
                             f"completion_signal={d['completion_signal']['handle']:#x}")
        elif t == A.HSA_PACKET_TYPE_VENDOR_SPECIFIC:
            fmt = raw[2]
            if fmt == AMD_AQL_FORMAT_PM4_IB:
                d = PM4_IB.unpack(raw)
                self.emit(depth, f"{where} VENDOR PM4_IB {flags} completion_signal={d['completion_signal']['handle']:#x}")
                self.pm4_stream(np.array(d["pm4_ib_command"], np.uint32), depth + 2)
            elif fmt == A.HSA_AMD_PACKET_TYPE_BARRIER_VALUE:
                d = A.BARRIER_VALUE.unpack(raw)
                self.emit(depth, f"{where} VENDOR BARRIER_VALUE {flags} signal={d['signal']['handle']:#x} "
                                 f"value={d['value']:#x} mask={d['mask']:#x} cond={d['cond']}")
            else:
                self.emit(depth, f"{where} VENDOR format {fmt} (not decoded)")
        elif t == A.HSA_PACKET_TYPE_AGENT_DISPATCH:
            d = A.AGENT_DISPATCH.unpack(raw)
            self.emit(depth, f"{where} AGENT_DISPATCH {flags} type={d['type']} args=[{', '.join(hex(x) for x in d['arg'])}]")
        else:
            self.emit(depth, f"{where} {'INVALID' if t == 1 else f'type {t}'} (header {hdr:#06x})")

    def aql_ring(self, ring: bytes, first: int, last: int, depth: int = 0, va: int | None = None) -> None:
        """Packets first..last-1 (indices; slot = index % slots)."""
        slots = len(ring) // A.PACKET_SIZE
        idx = first
        while idx < last:
            off = (idx % slots) * A.PACKET_SIZE
            run = idx
            while run < last and A.HEADER.decode(struct.unpack_from("<H", ring, (run % slots) * A.PACKET_SIZE)[0])[
                    "TYPE"] == A.HSA_PACKET_TYPE_INVALID:
                run += 1
            if run > idx:                  # consumed slots: the packet processor set them INVALID again
                self.emit(depth, f"[{idx:5d}..{run - 1}] {run - idx} INVALID packet(s) (consumed, or never written)")
                idx = run
                continue
            self.aql_packet(ring[off:off + A.PACKET_SIZE], idx, depth, None if va is None else va + off)
            idx += 1


def _window(n_ring: int, wptr: int) -> tuple[int, int]:
    """(first, count) of the units written and still in a ring of n_ring units."""
    first = max(0, wptr - n_ring)
    return first, wptr - first


def decode_queue(dec: Decoder, q: dict) -> None:
    """The listing of one dumped queue into dec.out."""
    ring, kind, va = bytes(q["ring"]), q["kind"], q.get("va")
    size = int(q.get("size", len(ring)))
    if size < len(ring) or size > 1 << 30:
        raise DecodeError(f"dumped queue {q.get('name', kind)}: ring size {size} does not fit its {len(ring)} bytes")
    ring = ring.ljust(size, b"\0")                  # the part never written (a dump keeps only the written part)
    dec.emit(0, f"{q.get('name', kind)} ({kind}) ring @ {va:#x}, {len(ring)} bytes, rptr {q['rptr']} wptr {q['wptr']}"
             if va is not None else f"{q.get('name', kind)} ({kind})")
    if kind == "aql":
        first, n = _window(len(ring) // A.PACKET_SIZE, q["wptr"])
        dec.aql_ring(ring, first, first + n, 1, va)
        return
    dws = np.frombuffer(ring[:len(ring) // 4 * 4], np.uint32)
    wptr_dw = q["wptr"] // 4 if kind == "sdma" else q["wptr"]
    first, n = _window(len(dws), wptr_dw)
    idx = (np.arange(first, first + n) % len(dws)) if len(dws) else np.arange(0)
    stream = dws[idx] if n else dws[:0]
    (dec.sdma_stream if kind == "sdma" else dec.pm4_stream)(stream, 1, None)


# -- dumps ----------------------------------------------------------------------------------------
class _DeviceMemory:
    """Reads CPU-visible memory of a device's live allocations (and records what was read)."""

    def __init__(self, dev):
        self.allocs = sorted((a for a in dev.allocator.live_allocs.values() if getattr(a, "cpu", None) is not None),
                             key=lambda a: a.va)
        self.extra = []
        self.regions: dict[int, bytes] = {}

    def add(self, alloc) -> None:
        if getattr(alloc, "cpu", None) is not None:
            self.extra.append(alloc)

    def __call__(self, va: int, n: int) -> bytes | None:
        for a in self.allocs + self.extra:
            if a.va <= va and va + n <= a.va + a.size:
                data = bytes(a.cpu.mv[va - a.va:va - a.va + n])
                self.regions[va] = data
                return data
        return None


def _queue_record(q) -> dict | None:
    kind = {"compute": "pm4", "aql": "aql", "sdma": "sdma"}.get(q.kind)
    if kind is None or q.q is None:
        return None
    ring = q.q.ring
    wptr = q.wid if kind == "aql" else q.wptr
    try:
        rptr = int(q.rptr)
    except (AmdqError, OSError, AttributeError):
        rptr = -1
    unit = {"pm4": 4, "aql": A.PACKET_SIZE, "sdma": 1}[kind]
    used = int(wptr) * unit
    keep = used if used <= ring.size else ring.size        # a ring that has not wrapped: only what was written
    return {"kind": kind, "name": q.name, "va": int(ring.va), "size": int(ring.size),
            "ring": bytes(ring.cpu.mv[:keep]), "rptr": rptr, "wptr": int(wptr)}


def dump_queues(dev, path: str | None = None) -> dict:
    """Snapshot every queue of `dev`: its ring, base address and pointers, plus the memory of every indirect buffer
    reached from it (followed as the decoder follows them). Written to `path` as msgpack when given; returned."""
    if getattr(dev, "queue", None) is None:
        raise DecodeError(f"{dev.name} has no queues to dump")
    mem = _DeviceMemory(dev)
    queues = []
    with dev.lock:
        for q in dev.queues:
            rec = _queue_record(q)
            if rec is not None:
                queues.append(rec)
    kernels = {int(k): v for k, v in getattr(dev, "_kernel_names", {}).items()}
    dec = Decoder(dev.target, mem, kernels)
    for rec in queues:
        decode_queue(dec, rec)                  # follows the IBs: `mem` records every region it read
    doc = {"format": FORMAT, "version": VERSION, "arch": dev.arch, "device": dev.name, "kernels": kernels,
           "queues": queues, "memory": [[va, data] for va, data in sorted(mem.regions.items())]}
    if path is not None:
        save_dump(doc, path)
    return doc


def save_dump(doc: dict, path: str) -> None:
    """Write a dump (as dump_queues returns it) to a file."""
    with open(path, "wb") as f:
        f.write(msgpack.packb(doc, use_bin_type=True))


def run_and_dump(script: str, argv: list[str] | None = None) -> list[dict]:
    """Run a Python script in this process and dump the queues of every device it opens: when it closes one, and at
    the script's end for the ones left open. The script's own exceptions propagate."""
    import runpy
    import sys
    from ..runtime.device import Device
    docs: list[dict] = []
    opened: list = []
    init, close = Device.__init__, Device.close

    def init_(self, *a, **kw):
        init(self, *a, **kw)
        opened.append(self)

    def close_(self):
        if not self.closed and getattr(self, "queue", None) is not None and not getattr(self, "_dumped", False):
            self._dumped = True
            try:
                self.synchronize()
            except AmdqError:
                pass
            docs.append(dump_queues(self))
        close(self)
    old_argv = sys.argv
    Device.__init__, Device.close = init_, close_
    try:
        sys.argv = [script, *(argv or [])]
        runpy.run_path(script, run_name="__main__")
        for dev in opened:
            if not dev.closed:
                dev.close()
    finally:
        Device.__init__, Device.close = init, close
        sys.argv = old_argv
    return docs


def load_dump(path: str) -> dict:
    """Read a dump written by dump_queues; DecodeError if the file is not one."""
    with open(path, "rb") as f:
        data = f.read()
    doc = parse_dump(data)
    if doc is None:
        raise DecodeError(f"{path} is not an amdq dump (write one with amdq.tools.decode.dump_queues(dev, path), or "
                          f"decode raw dwords with --kind pm4|sdma|aql --arch ARCH)")
    return doc


def parse_dump(data: bytes) -> dict | None:
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    if doc.get("version") != VERSION:
        raise DecodeError(f"dump version {doc.get('version')!r}; this amdq reads version {VERSION}")
    for key in ("arch", "queues", "memory"):
        if key not in doc:
            raise DecodeError(f"the dump has no {key!r}")
    for k, q in enumerate(doc["queues"]):
        if not isinstance(q, dict) or any(x not in q for x in ("kind", "ring", "rptr", "wptr")) \
                or not isinstance(q["ring"], bytes) or not isinstance(q["wptr"], int):
            raise DecodeError(f"dumped queue {k} is malformed (needs kind, ring bytes, rptr, wptr)")
    for r in doc["memory"]:
        if not (isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], bytes)):
            raise DecodeError("a dumped memory region is not [address, bytes]")
    return doc


def _memory_reader(regions: list) -> Reader:
    rs = sorted((int(va), bytes(d)) for va, d in regions)

    def read(va: int, n: int) -> bytes | None:
        for base, d in rs:
            if base <= va and va + n <= base + len(d):
                return d[va - base:va - base + n]
        return None
    return read


def decode_dump(doc: dict) -> list[str]:
    """The listing of every queue in a dump, IBs followed into the dumped memory."""
    dec = Decoder(get_target(doc["arch"]), _memory_reader(doc["memory"]),
                  {int(k): v for k, v in (doc.get("kernels") or {}).items()})
    dec.emit(0, f"{doc.get('device', doc['arch'])}: {len(doc['queues'])} queue(s), "
                f"{len(doc['memory'])} memory region(s)")
    for q in doc["queues"]:
        if q.get("kind") not in KINDS:
            raise DecodeError(f"dumped queue of unknown kind {q.get('kind')!r}")
        decode_queue(dec, q)
    return dec.out


def decode_raw(data: bytes, kind: str, arch: str) -> list[str]:
    """Raw PM4 or SDMA dwords, or 64-byte AQL packets, of a target (no memory: IBs are named, not followed)."""
    if kind not in KINDS:
        raise DecodeError(f"unknown stream kind {kind!r}: use one of {', '.join(KINDS)}")
    dec = Decoder(get_target(arch))
    if kind == "aql":
        if len(data) % A.PACKET_SIZE:
            raise DecodeError(f"{len(data)} bytes are not whole 64-byte AQL packets")
        dec.aql_ring(data, 0, len(data) // A.PACKET_SIZE)
        return dec.out
    if len(data) % 4:
        raise DecodeError(f"{len(data)} bytes are not whole dwords")
    dws = np.frombuffer(data, np.uint32)
    (dec.sdma_stream if kind == "sdma" else dec.pm4_stream)(dws)
    return dec.out
