"""Clang offload bundles (fat binaries): the plain `__CLANG_OFFLOAD_BUNDLE__` container, the compressed
`CCOB` wrapper (versions 1-3, zlib or zstd) and host ELF files (shared libraries, objects) that embed them in
`.hip_fatbin` or in `__CLANG_OFFLOAD_BUNDLE__<id>` sections. `code_object_for(data, arch)` turns any of them
(or a plain AMDGPU ELF) into the one code object a device of `arch` runs (`code_objects_for`: one per bundle, for
a library linked from several translation units). Layouts: amdq.hw.bundle; target ids: amdq.codeobj.targetid.
"""
from __future__ import annotations

import hashlib
import io
import struct
import zlib
from dataclasses import dataclass

from ..errors import CodeObjectError, TargetMismatch
from ..hw import bundle as B
from ..hw import elf as E
from .elf import MAX_FILE
from .targetid import BundleId, device_target, incompatibility, match_score, parse_bundle_id

MAX_ENTRIES = 4096             # more entries than this in one bundle is refused as malformed
ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class BundleEntry:
    id: BundleId
    data: bytes
    offset: int                # offset of the entry's bytes in its (uncompressed) bundle
    container: str             # where it came from, e.g. "CCOB v2 (zstd)" or ".hip_fatbin of a host ELF"
    bundle: int = 0            # which bundle of the file (a linked .hip_fatbin holds one per translation unit)

    @property
    def format(self) -> str:
        """What the entry holds: "elf" (an AMDGPU code object), "host-elf", "bitcode", "empty" or "data"."""
        d = self.data
        if not d or d == b"\0":
            return "empty"
        if d[:4] == B.LLVM_BITCODE_MAGIC:
            return "bitcode"
        if d[:4] == ELF_MAGIC:
            return "elf" if len(d) >= 20 and struct.unpack_from("<H", d, 18)[0] == E.EM_AMDGPU else "host-elf"
        return "data"


def is_bundle(data: bytes) -> bool:
    """True for a plain or compressed offload bundle (or the first bytes of one: a truncated bundle)."""
    head = bytes(data[:24])
    return (len(head) >= 4 and B.BUNDLE_MAGIC.startswith(head)) or head[:4] == B.CCOB_MAGIC


def is_host_elf(data: bytes) -> bool:
    """True for an ELF file that is not an AMDGPU code object (a host library or object that may embed one)."""
    return bytes(data[:4]) == ELF_MAGIC and len(data) >= 20 and struct.unpack_from("<H", data, 18)[0] != E.EM_AMDGPU


def _plain(data: bytes, base: int, container: str) -> tuple[list[BundleEntry], int]:
    """The entries of the plain bundle at data[base:], and the offset where the bundle ends."""
    hsize = struct.calcsize(B.BUNDLE_HEADER)
    esize = struct.calcsize(B.BUNDLE_ENTRY)
    if len(data) - base < hsize:
        raise CodeObjectError(f"offload bundle ({container}) is truncated: {len(data) - base} bytes, shorter than its "
                              f"{hsize}-byte header")
    magic, count = struct.unpack_from(B.BUNDLE_HEADER, data, base)
    if magic != B.BUNDLE_MAGIC:
        raise CodeObjectError(f"not an offload bundle ({container}): no {B.BUNDLE_MAGIC.decode()} magic")
    if count > MAX_ENTRIES:
        raise CodeObjectError(f"offload bundle ({container}) claims {count} entries, more than {MAX_ENTRIES}: corrupt")
    pos, end, out = base + hsize, base + hsize, []
    for i in range(count):
        if pos + esize > len(data):
            raise CodeObjectError(f"offload bundle ({container}) is truncated in the header of entry {i} of {count}")
        off, size, idlen = struct.unpack_from(B.BUNDLE_ENTRY, data, pos)
        pos += esize
        if idlen > 4096 or pos + idlen > len(data):
            raise CodeObjectError(f"offload bundle ({container}): entry {i} has an id of {idlen} bytes past the end "
                                  f"of the file: corrupt or truncated")
        try:
            text = data[pos:pos + idlen].decode("ascii")
        except UnicodeDecodeError:
            raise CodeObjectError(f"offload bundle ({container}): entry {i} id is not ASCII: corrupt") from None
        pos += idlen
        start = base + off
        if start > len(data) or size > len(data) - start:
            raise CodeObjectError(f"offload bundle ({container}): entry {text!r} ({size} bytes at offset {off}) runs "
                                  f"past the end of the {len(data) - base}-byte bundle: truncated or corrupt")
        end = max(end, start + size)
        out.append(BundleEntry(parse_bundle_id(text), bytes(data[start:start + size]), off, container))
    return out, max(end, pos)


def decompress(data: bytes) -> tuple[bytes, str, int]:
    """The plain bundle inside a CCOB wrapper at the start of `data`, its description and the wrapper's size."""
    csize = struct.calcsize(B.CCOB_COMMON)
    if len(data) < csize:
        raise CodeObjectError(f"compressed offload bundle is truncated: {len(data)} bytes")
    _, version, method = struct.unpack_from(B.CCOB_COMMON, data)
    if version not in B.CCOB_HEADERS:
        raise CodeObjectError(f"compressed offload bundle (CCOB) version {version} is not one amdq reads "
                              f"({', '.join(map(str, B.CCOB_HEADERS))})")
    fmt, names = B.CCOB_HEADERS[version]
    hsize = struct.calcsize(fmt)
    if len(data) < hsize:
        raise CodeObjectError(f"compressed offload bundle v{version} is truncated: {len(data)} bytes, shorter than "
                              f"its {hsize}-byte header")
    h = dict(zip(names, struct.unpack_from(fmt, data)[3:]))
    if method not in B.CCOB_METHODS:
        raise CodeObjectError(f"compressed offload bundle v{version} uses compression method {method}; amdq knows "
                              f"{', '.join(f'{k} ({v})' for k, v in B.CCOB_METHODS.items())}")
    how = B.CCOB_METHODS[method]
    total = h.get("file_size", len(data))
    if total < hsize or total > len(data):
        raise CodeObjectError(f"compressed offload bundle v{version} says it is {total} bytes, the data has "
                              f"{len(data)}: truncated or corrupt")
    usize = h["uncompressed_size"]
    if usize > MAX_FILE:
        raise CodeObjectError(f"compressed offload bundle claims {usize} uncompressed bytes, more than the "
                              f"{MAX_FILE >> 20} MiB amdq loads")
    payload = bytes(data[hsize:total])
    try:
        if how == "zstd":
            import zstandard
            out = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(payload)).read(usize + 1)
        else:
            out = zlib.decompressobj().decompress(payload, usize + 1)
    except Exception as e:     # zstandard.ZstdError, zlib.error: the compressed data is corrupt
        raise CodeObjectError(f"compressed offload bundle v{version} ({how}) does not decompress: "
                              f"{type(e).__name__}: {e}") from None
    if len(out) != usize:
        more = "+" if len(out) > usize else ""
        raise CodeObjectError(f"compressed offload bundle v{version} ({how}) holds {len(out)}{more} bytes, its header "
                              f"says {usize}: truncated or corrupt")
    digest = int.from_bytes(hashlib.md5(out).digest()[:8], "little")
    if digest != h["hash"]:
        raise CodeObjectError(f"compressed offload bundle v{version} ({how}): the MD5 of its contents "
                              f"({digest:#018x}) is not the header's ({h['hash']:#018x}): corrupt")
    return out, f"CCOB v{version} ({how})", total


def _bundles(data: bytes, where: str) -> list[BundleEntry]:
    """The entries of one or more bundles (plain or compressed) laid one after another, zero-padded between."""
    out: list[BundleEntry] = []
    pos = count = 0
    while True:
        if data[pos:pos + 4] == B.CCOB_MAGIC:
            inner, desc, size = decompress(data[pos:])
            entries, _ = _plain(inner, 0, f"{desc}{where}")
            end = pos + size
        elif is_bundle(data[pos:pos + 24]) and data[pos:pos + 4] != B.CCOB_MAGIC:
            entries, end = _plain(data, pos, f"bundle{where}")
        else:
            raise CodeObjectError(f"not an offload bundle{where}: it starts with neither {B.BUNDLE_MAGIC.decode()} "
                                  f"nor CCOB")
        out.extend(BundleEntry(e.id, e.data, e.offset, e.container, count) for e in entries)
        count += 1
        nxt = [i for i in (data.find(B.BUNDLE_MAGIC, end), data.find(B.CCOB_MAGIC, end)) if i >= 0]
        if not nxt:
            if data[end:].strip(b"\0"):
                raise CodeObjectError(f"{len(data) - end} bytes after the last offload bundle{where} are not padding")
            return out
        pos = min(nxt)
        if data[end:pos].strip(b"\0"):
            raise CodeObjectError(f"bytes between offload bundles{where} at {end:#x} are not padding")


def _host_elf(data: bytes) -> list[BundleEntry]:
    """Entries embedded in a host ELF: its .hip_fatbin section, or the per-entry sections of an -fgpu-rdc object."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(data))
        sections = [(s.name, s) for s in elf.iter_sections()]
        fat = [s for n, s in sections if n == B.HIP_FATBIN_SECTION]
        if fat:
            s = fat[0]
            if s["sh_type"] == "SHT_NOBITS" or s["sh_offset"] + s["sh_size"] > len(data):
                raise CodeObjectError(f"{B.HIP_FATBIN_SECTION} section runs past the end of the file: truncated")
            return _bundles(s.data(), f" in the {B.HIP_FATBIN_SECTION} section of a host ELF")
        out = []
        for n, s in sections:
            if n.startswith(B.BUNDLE_SECTION_PREFIX):
                if s["sh_offset"] + s["sh_size"] > len(data):
                    raise CodeObjectError(f"section {n} runs past the end of the file: truncated")
                out.append(BundleEntry(parse_bundle_id(n[len(B.BUNDLE_SECTION_PREFIX):]), s.data(), s["sh_offset"],
                                       "section of a host object"))
        return out
    except CodeObjectError:
        raise
    except (ELFError, struct.error, ValueError, KeyError, IndexError, AttributeError, TypeError, UnicodeDecodeError,
            AssertionError, OverflowError, EOFError) as e:
        raise CodeObjectError(f"malformed host ELF file: {type(e).__name__}: {e}") from None


def unpack(data: bytes) -> list[BundleEntry]:
    """Every entry of a bundle, a compressed bundle, or a host ELF that embeds bundles."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodeObjectError(f"a bundle is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_FILE:
        raise CodeObjectError(f"file is {len(data)} bytes, more than the {MAX_FILE >> 20} MiB amdq loads")
    if is_host_elf(data):
        entries = _host_elf(data)
        if not entries:
            raise CodeObjectError(f"host ELF file embeds no GPU code: no {B.HIP_FATBIN_SECTION} section and no "
                                  f"{B.BUNDLE_SECTION_PREFIX}* sections (was it built with --offload-arch?)")
        return entries
    return _bundles(data, "")


def listing(entries: list[BundleEntry]) -> str:
    """The entries' ids and sizes, for error messages."""
    return ", ".join(f"{e.id.text} ({len(e.data)} bytes)" for e in entries) or "no entries"


def select(entries: list[BundleEntry], arch: str) -> BundleEntry:
    """The entry a device of `arch` runs among the entries of one bundle: compatible by processor (or a covering
    generic target) and features, a specific processor preferred over a generic one, then the more features
    pinned to the device's mode."""
    dev = device_target(arch)
    ok = [e for e in entries if e.id.target is not None and incompatibility(e.id.target, dev) is None]
    if not ok:
        raise TargetMismatch(f"no entry of the offload bundle runs on the device ({dev}); it holds {listing(entries)}: "
                             f"rebuild with --offload-arch={dev.processor}")
    best = max(ok, key=lambda e: match_score(e.id.target))
    fmt = best.format
    if fmt == "bitcode":
        raise CodeObjectError(f"bundle entry {best.id.text} holds LLVM bitcode (an -fgpu-rdc object): link it into a "
                              f"code object first (clang -fgpu-rdc --hip-link, or -shared)")
    if fmt != "elf":
        raise CodeObjectError(f"bundle entry {best.id.text} holds no AMDGPU code object ({fmt}, "
                              f"{len(best.data)} bytes)")
    return best


def code_objects_for(data: bytes, arch: str) -> list[bytes]:
    """The AMDGPU code objects in `data` for a device of `arch`, one per bundle it holds (a shared library linked
    from several HIP translation units has one bundle each); `data` itself if it is a code object."""
    if bytes(data[:4]) == ELF_MAGIC and not is_host_elf(data):
        return [bytes(data)]
    if not (is_bundle(data) or is_host_elf(data)):
        return [bytes(data)]       # not a bundle: the ELF loader says what is wrong with it
    entries = unpack(data)
    groups: dict[int, list[BundleEntry]] = {}
    for e in entries:
        groups.setdefault(e.bundle, []).append(e)
    return [select(g, arch).data for g in groups.values() if any(e.id.kind != "host" for e in g)] or \
        [select(entries, arch).data]


def code_object_for(data: bytes, arch: str) -> bytes:
    """The AMDGPU code object in `data` for a device of `arch`: `data` itself if it is one, else the best entry
    of the bundle (plain, compressed, or embedded in a host ELF) it holds."""
    cos = code_objects_for(data, arch)
    if len(cos) > 1:
        raise CodeObjectError(f"the file holds {len(cos)} offload bundles with code for {arch} (one per translation "
                              f"unit): load each, [dev.load(co) for co in amdq.codeobj.bundle.code_objects_for(data, "
                              f"dev.arch)]")
    return cos[0]


def entry_summary(e: BundleEntry) -> dict:
    """One `amdq inspect` record of a bundle entry: id, kind, target, what it holds, its kernels."""
    out = {"id": e.id.text, "bundle": e.bundle, "kind": e.id.kind, "target": str(e.id.target) if e.id.target else None,
           "format": e.format, "size": len(e.data), "offset": e.offset, "container": e.container}
    if e.id.note:
        out["note"] = e.id.note
    if out["format"] == "elf":
        from .image import ProgramImage
        try:
            img = ProgramImage(e.data)
            out["kernels"] = list(img.kernels)
            out["code_object_version"] = img.cov
        except CodeObjectError as err:
            out["note"] = str(err)
    return out


def print_entries(entries: list[BundleEntry], out=None) -> None:
    """The entries of a bundle, one line each (and their kernels)."""
    import sys
    out = out or sys.stdout
    print(f"offload bundle, {len(entries)} entries", file=out)
    for s in map(entry_summary, entries):
        kern = f"  kernels: {', '.join(s['kernels'])}" if s.get("kernels") else ""
        note = f"  ({s['note']})" if s.get("note") else ""
        print(f"  {s['bundle']:2d} {s['id']:48s} {s['format']:8s} {s['size']:8d} B  {s['container']}{kern}{note}",
              file=out)
