"""The on-disk cache of amdq.compile: code objects by what made them, so that a second process does not
compile the same source again.

Where: $AMDQ_CACHE/compile, default ~/.cache/amdq/compile (the directory the simulated GPU keeps its state
under). AMDQ_COMPILE_CACHE=0 turns it off. The key is a sha256 over everything the output depends on: source,
language, options, arch, opt level, the compiler's identity (llvmlite's LLVM version, clang's `--version`
line, llc's for inline assembly) and the shipped prelude. An entry is a header (magic, payload length, sha256
of the payload) and the code object; it is written to a temporary file and renamed into place, so a reader
sees a whole entry or none, and one that is truncated or corrupted does not match its header and is
compiled again and replaced. Failures to read or write the cache never fail a compile.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

MAGIC = b"AMDQCO1\n"
_HEADER = struct.Struct("<8sQ32s")         # magic, payload length, sha256(payload)
MAX_ENTRIES = 4096                         # beyond this the oldest quarter is removed on the next store

stats = {"hits": 0, "misses": 0, "stores": 0, "corrupt": 0}     # this process's counts (tests, debugging)


def enabled() -> bool:
    return os.environ.get("AMDQ_COMPILE_CACHE", "1").strip().lower() not in ("0", "off", "no", "false", "")


def directory() -> str:
    root = os.environ.get("AMDQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "amdq")
    return os.path.join(root, "compile")


def key(**parts) -> str:
    """The entry name for a compilation described by `parts` (strings, numbers, lists of strings)."""
    blob = json.dumps({"format": 1, **parts}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def path_of(k: str) -> str:
    return os.path.join(directory(), k + ".co")


def load(k: str) -> bytes | None:
    """The cached code object of key `k`, or None (missing, disabled, truncated or corrupted)."""
    if not enabled():
        return None
    try:
        with open(path_of(k), "rb") as f:
            data = f.read()
    except OSError:
        stats["misses"] += 1
        return None
    if len(data) >= _HEADER.size:
        magic, n, digest = _HEADER.unpack_from(data)
        body = data[_HEADER.size:]
        if magic == MAGIC and n == len(body) and hashlib.sha256(body).digest() == digest and body[:4] == b"\x7fELF":
            stats["hits"] += 1
            try:
                os.utime(path_of(k))          # recently used: the last to go when the cache is trimmed
            except OSError:
                pass
            return body
    stats["corrupt"] += 1
    stats["misses"] += 1
    return None


def store(k: str, code_object: bytes) -> None:
    """Write the entry of key `k` atomically (a temporary file renamed into place); errors are ignored."""
    if not enabled():
        return
    try:
        _write(path_of(k), _HEADER.pack(MAGIC, len(code_object), hashlib.sha256(code_object).digest()) + code_object)
        stats["stores"] += 1
        _trim(directory())
    except OSError:
        pass


def note(name: str) -> str | None:
    """The text kept under `name` beside the entries (a fact about this machine: see compiler.llvm_version), or None
    (read with the cache turned off too: only writing is turned off)."""
    try:
        with open(os.path.join(directory(), name), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def write_note(name: str, text: str) -> None:
    """Keep `text` under `name` (atomically; errors are ignored)."""
    if not enabled():
        return
    try:
        _write(os.path.join(directory(), name), text.encode("utf-8"))
    except OSError:
        pass


def _write(path: str, data: bytes) -> None:
    """`data` at `path`: written to a temporary file in its directory and renamed into place."""
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=os.path.basename(path)[:16] + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _trim(d: str) -> None:
    entries = [e for e in os.scandir(d) if e.name.endswith(".co")]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat().st_mtime_ns)
    for e in entries[: len(entries) // 4]:
        try:
            os.unlink(e.path)
        except OSError:
            pass
