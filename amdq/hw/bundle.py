"""Clang offload bundle layouts: the plain `__CLANG_OFFLOAD_BUNDLE__` container and the compressed `CCOB`
wrapper, as HIP compilers and ROCm libraries ship fat binaries. Declarative data only.

Sources: Clang "Clang Offload Bundler" documentation ("Bundled Binary File Layout", "Bundle Entry ID",
"Compression and Decompression"), `clang/include/clang/Driver/OffloadBundler.h` and
`clang/lib/Driver/OffloadBundler.cpp` (CompressedOffloadBundle: header sizes of versions 1-3, the truncated
MD5 -- the first 8 bytes of the digest, read little-endian), `llvm/include/llvm/Support/Compression.h`
(`compression::Format`: Zlib = 0, Zstd = 1, the method field), Clang's HIP toolchain (a fat binary embedded
in a host object is the `.hip_fatbin` section; with -fgpu-rdc each entry is a `__CLANG_OFFLOAD_BUNDLE__<id>`
section of the host object, holding LLVM bitcode). All integers are little-endian.

Plain bundle (offsets from the bundle's start):

| field | type | bytes |
|---|---|---|
| magic `__CLANG_OFFLOAD_BUNDLE__` | string | 24 |
| number of entries | u64 | 8 |
| per entry: code object offset | u64 | 8 |
| per entry: code object size | u64 | 8 |
| per entry: entry id length | u64 | 8 |
| per entry: entry id (not NUL terminated) | string | id length |
| the code objects | bytes | their sizes |

Compressed bundle (the compressed data is a whole plain bundle):

| field | v1 | v2 | v3 |
|---|---|---|---|
| magic `CCOB` | 4 | 4 | 4 |
| version (u16) | 2 | 2 | 2 |
| method (u16: 0 zlib, 1 zstd) | 2 | 2 | 2 |
| total file size, header included | - | u32 | u64 |
| uncompressed size | u32 | u32 | u64 |
| truncated MD5 of the uncompressed bundle | u64 | u64 | u64 |
| header size | 20 | 24 | 32 |
"""
from __future__ import annotations

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
BUNDLE_HEADER = "<24sQ"                # magic, number of entries
BUNDLE_ENTRY = "<QQQ"                  # offset, size, id length (the id follows)

CCOB_MAGIC = b"CCOB"
CCOB_COMMON = "<4sHH"                  # magic, version, method
# version -> (struct format of the whole header, field names after the common ones)
CCOB_HEADERS: dict[int, tuple[str, tuple[str, ...]]] = {
    1: ("<4sHHIQ", ("uncompressed_size", "hash")),
    2: ("<4sHHIIQ", ("file_size", "uncompressed_size", "hash")),
    3: ("<4sHHQQQ", ("file_size", "uncompressed_size", "hash")),
}
CCOB_METHODS: dict[int, str] = {0: "zlib", 1: "zstd"}

HIP_FATBIN_SECTION = ".hip_fatbin"
BUNDLE_SECTION_PREFIX = "__CLANG_OFFLOAD_BUNDLE__"
LLVM_BITCODE_MAGIC = b"BC\xc0\xde"
