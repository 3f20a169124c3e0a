"""What earlier processes found and compiled, per code page, on disk: the JIT's warm start.

A record is named by a sha256 over its format, the JIT's version, the ISA family, the wave size and the bytes of one
4 KiB code page; it lists the candidates whose search started in that page (runtime.py), each as offsets from the
page: its blocks (every instruction's offset, size and dead-SGPR flag, the kinds and properties the search gave
them), the PCs its search read that hold no block, the lines outside the page it was found from (with a sha256 of
their bytes), the regions compiled from it (their blocks, and the seconds all processes together ran each in compiled code: a
region at the first tier is compiled at -O2 once those paid for it, as within one process), the blocks that ran and the interpreted seconds spent in
them (its heat); the record also keeps the page's own heat (interpreted seconds in code of it no candidate holds).
A process looks for a page's record the first time it runs code there: the candidates whose lines hold the same
bytes are taken as found, without a search, with their heat, and their regions are loaded when the interpreter
first reaches them; the page's heat is taken as well. Heat so adds up over processes (a record is rewritten when
a region is compiled and, for what heated since, when the process exits): code that every process runs a little
of is compiled once its time in all of them paid for the compile, and later processes load it. What is loaded is
still keyed by the bytes in memory (compiled.region_key over each instruction's bytes there), so an object file is
never used for other bytes; a record only spares the search and says which keys to try.

Beside pages/, `recent` holds per program (its command line) the keys of the pages its last run looked up, in that
order: a new run of it reads their records (and places their images) ahead, while its host is busy loading and
uploading (runtime._prefetch).

Records live in $AMDQ_SIM_JIT_CACHE/pages (compiled.directory), written to a temporary file and renamed into place,
one line of JSON after a sha256 of it: a record that is damaged, of another format, or that does not parse is
ignored (the page is searched as without one). Failures to read or write never fail a dispatch.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

from .compiled import directory

FORMAT = 4


def page_key(family: str, wave64: bool, version: str, data: bytes) -> str:
    """The name of the record of a code page holding `data` (its 4 KiB)."""
    h = hashlib.sha256(f"amdq-jit-page|{FORMAT}|{version}|{family}|{int(wave64)}|".encode())
    h.update(data)
    return h.hexdigest()


def line_hash(data: bytes) -> str:
    """What a record keeps of a line outside its page: a sha256 of its bytes (hex, 128 bits)."""
    return hashlib.sha256(data).hexdigest()[:32]


def folder() -> str | None:
    """The directory records live in (None: the disk cache is off)."""
    d = directory()
    return os.path.join(d, "pages") if d else None


def read(key: str) -> list | None:
    """The candidates of the record `key` (as written), or None: no record, or one that is damaged."""
    rec = read_page(key)
    return None if rec is None else rec[0]


def read_page(key: str) -> tuple[list, float] | None:
    """(candidates, the page's heat) of the record `key`, or None: no record, or one that is damaged."""
    d = folder()
    body = _get(os.path.join(d, key)) if d is not None else None
    if body is None:
        return None
    try:
        rec = json.loads(body)
        if rec.get("format") != FORMAT or not isinstance(rec.get("cands"), list):
            return None
        heat = rec.get("heat", 0.0)
        return rec["cands"], float(heat) if isinstance(heat, (int, float)) and heat >= 0 else 0.0
    except (ValueError, AttributeError):
        return None


def write(key: str, cands: list, heat: float = 0.0) -> None:
    """Replace the record `key` with these candidates (JSON-able) and the page's heat (interpreted seconds in code
    of it no candidate holds)."""
    d = folder()
    if d is not None:
        _put(d, key, json.dumps({"format": FORMAT, "cands": cands, "heat": round(heat, 6)},
                                separators=(",", ":")).encode())


def _get(path: str) -> bytes | None:
    """The body of a file _put wrote, or None: none there, or its sha256 line does not match."""
    try:
        with open(path, "rb") as f:
            digest, _, body = f.read().partition(b"\n")
    except OSError:
        return None
    return body if hashlib.sha256(body).hexdigest().encode() == digest else None


def _put(d: str, name: str, body: bytes) -> None:
    """d/name := a sha256 line, then body (through a temporary file renamed into place; failures pass)."""
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        os.replace(tmp, os.path.join(d, name))
    except OSError:
        pass


RECENT = "recent"           # the index of the pages programs looked up, beside pages/ in the cache
RECENT_PAGES = 16           # keys it keeps per program: the first ones the program looked up
RECENT_PROGRAMS = 32        # programs it keeps, the latest last


def program() -> str:
    """What names this process's program in the index: a sha256 of its command line (the same command, the same
    kernels: as an operating system's prefetcher keeps one trace per executable)."""
    return hashlib.sha256("\0".join(sys.argv).encode()).hexdigest()[:32]


def _index() -> dict[str, list[str]]:
    d = directory()
    body = _get(os.path.join(d, RECENT)) if d is not None else None
    try:
        index = json.loads(body) if body is not None else None
    except ValueError:
        return {}
    if not isinstance(index, dict):
        return {}
    return {p: [k for k in keys if isinstance(k, str) and len(k) == 64][:RECENT_PAGES]
            for p, keys in index.items() if isinstance(p, str) and isinstance(keys, list)}


def recent(prog: str | None = None) -> list[str]:
    """The page keys the last run of this program (`prog`, default: this process's) looked records up for, in the
    order it did: what a new run of it reads ahead."""
    return _index().get(prog or program(), [])


def note_recent(keys: list[str], prog: str | None = None) -> None:
    """Keep these page keys (this process's, in the order it first looked them up) as its program's in the index."""
    d = directory()
    if d is None or not keys:
        return
    prog = prog or program()
    index = _index()
    index.pop(prog, None)
    index[prog] = keys[:RECENT_PAGES]
    _put(d, RECENT, json.dumps(dict(list(index.items())[-RECENT_PROGRAMS:])).encode())


def any_on_disk() -> bool:
    """Some record exists (an earlier process compiled code): worth starting LLVM before the first dispatch."""
    d = folder()
    if d is None:
        return False
    try:
        with os.scandir(d) as it:
            return any(e.name[:1] != "." and not e.name.endswith(".tmp") for e in it)
    except OSError:
        return False
