"""Bad code objects: every malformed input is a CodeObjectError with a message that says what is wrong."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amdq.codeobj import load_code_object
from amdq.errors import (CodeObjectError, KernelLDSTooLarge, LDSLimitExceeded, TargetMismatch,
                         UnsupportedCodeObjectTarget, UnsupportedTarget)
from oracle import BASE, compile_cl, readelf_sections, readelf_symbols

CORPUS_SPECS = [("vadd.cl", "gfx1100", True), ("vadd.cl", "gfx1100", False), ("lds_reduce.cl", "gfx942", True),
                ("globals", "gfx1201", False), ("globals", "gfx942", True)]


def _path(src, arch, link):
    from pathlib import Path
    if src == "globals":
        src = str(Path(__file__).parent / "codeobj" / "globals.cl")
    return compile_cl(src, arch, link=link)


@pytest.fixture(scope="module")
def corpus() -> list[bytes]:
    return [_path(*c).read_bytes() for c in CORPUS_SPECS]


def load_or_codeobject_error(data: bytes) -> None:
    """Loading either succeeds (the damage hit bytes the loader does not depend on) or raises CodeObjectError."""
    try:
        img = load_code_object(data)
        img.at(BASE)
    except CodeObjectError as e:
        assert str(e), "a CodeObjectError must say what is wrong"


FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.timeout(300)
@FUZZ
@given(which=st.integers(0, len(CORPUS_SPECS) - 1), cut=st.floats(0, 1, exclude_max=True))
def test_truncated(corpus, which, cut):
    data = corpus[which]
    load_or_codeobject_error(data[:int(len(data) * cut)])


@pytest.mark.timeout(300)
@FUZZ
@given(which=st.integers(0, len(CORPUS_SPECS) - 1),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7), st.booleans()),
                      min_size=1, max_size=8))
def test_bit_flips(corpus, which, flips):
    data = bytearray(corpus[which])
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    for where, bit, in_tables in flips:
        # half of the flips land in the ELF header or the section header table, where the structure lives
        pos = (int(where * 64) if where < 0.25 else shoff + int(where * (len(data) - shoff))) if in_tables \
            else int(where * len(data))
        data[min(pos, len(data) - 1)] ^= 1 << bit
    load_or_codeobject_error(bytes(data))


HEADER_FIELDS = [(4, "B"), (5, "B"), (7, "B"), (8, "B"), (0x10, "H"), (0x12, "H"), (0x20, "Q"), (0x28, "Q"),
                 (0x30, "I"), (0x36, "H"), (0x38, "H"), (0x3A, "H"), (0x3C, "H"), (0x3E, "H")]
SECTION_FIELDS = [(4, "I"), (8, "Q"), (0x10, "Q"), (0x18, "Q"), (0x20, "Q"), (0x28, "I"), (0x2C, "I"), (0x30, "Q"),
                  (0x38, "Q")]


@pytest.mark.timeout(300)
@FUZZ
@given(which=st.integers(0, len(CORPUS_SPECS) - 1), header=st.booleans(), field=st.integers(0, 100),
       section=st.integers(0, 30), value=st.one_of(st.integers(0, 0xFF), st.integers(0, 2**64 - 1)))
def test_wrong_header_fields(corpus, which, header, field, section, value):
    data = bytearray(corpus[which])
    if header:
        off, fmt = HEADER_FIELDS[field % len(HEADER_FIELDS)]
    else:
        shoff, shnum = struct.unpack_from("<Q", data, 0x28)[0], struct.unpack_from("<H", data, 0x3C)[0]
        foff, fmt = SECTION_FIELDS[field % len(SECTION_FIELDS)]
        off = shoff + 64 * (section % shnum) + foff
    struct.pack_into("<" + fmt, data, off, value % (1 << (8 * struct.calcsize(fmt))))
    load_or_codeobject_error(bytes(data))


def test_not_bytes_and_not_elf():
    with pytest.raises(CodeObjectError, match="not an ELF"):
        load_code_object(b"\x7fELF")
    with pytest.raises(CodeObjectError, match="not an ELF"):
        load_code_object(b"MZ" + bytes(200))


def _rela_entry(path, data: bytes, section: str) -> int:
    return readelf_sections(path)[section]["offset"]


def test_unknown_relocation_named():
    path = compile_cl("vadd.cl", "gfx1100", link=False)
    data = bytearray(path.read_bytes())
    off = _rela_entry(path, data, ".rela.rodata")
    info = struct.unpack_from("<Q", data, off + 8)[0]
    for typ, name in ((7, "R_AMDGPU_GOTPCREL"), (99, "unknown relocation type 99")):
        struct.pack_into("<Q", data, off + 8, (info & ~0xFFFFFFFF) | typ)
        with pytest.raises(CodeObjectError, match=name) as e:
            load_code_object(bytes(data))
        assert ".rela.rodata" in str(e.value)


def test_wrong_machine():
    data = bytearray(compile_cl("vadd.cl", "gfx1100").read_bytes())
    struct.pack_into("<H", data, 0x12, 62)                     # EM_X86_64
    with pytest.raises(CodeObjectError, match="not EM_AMDGPU"):
        load_code_object(bytes(data))


def test_unsupported_gpu_in_code_object():
    data = bytearray(compile_cl("vadd.cl", "gfx1100").read_bytes())
    flags = struct.unpack_from("<I", data, 0x30)[0]
    struct.pack_into("<I", data, 0x30, (flags & ~0xFF) | 0x36)  # EF_AMDGPU_MACH_AMDGCN_GFX1030
    with pytest.raises(UnsupportedCodeObjectTarget, match="gfx1100, gfx1101") as e:
        load_code_object(bytes(data))
    assert isinstance(e.value, UnsupportedTarget) and isinstance(e.value, CodeObjectError)


def test_code_object_for_another_target():
    data = compile_cl("vadd.cl", "gfx942").read_bytes()
    with pytest.raises(TargetMismatch, match="for gfx942, the device is gfx1100"):
        load_code_object(data, "gfx1100")
    assert load_code_object(data, "gfx942").arch == "gfx942"


def test_missing_descriptor_symbol():
    path = compile_cl("vadd.cl", "gfx1100")
    data = path.read_bytes()
    assert data.count(b"vadd.kd\0") >= 1
    bad = data.replace(b"vadd.kd\0", b"vadd.kx\0")
    with pytest.raises(CodeObjectError, match=r"descriptor symbol 'vadd.kd' is missing"):
        load_code_object(bad)


@pytest.mark.parametrize("link", [True, False])
def test_lds_over_limit(link):
    path = compile_cl("lds_reduce.cl", "gfx1100", link=link)
    data = bytearray(path.read_bytes())
    secs, syms = readelf_sections(path), readelf_symbols(path)
    kd = next(s for n, s in syms.items() if n.endswith(".kd"))
    sec = secs[kd["section"]]
    off = sec["offset"] + kd["value"] - sec["addr"]
    struct.pack_into("<I", data, off, 65536 + 4)
    with pytest.raises(KernelLDSTooLarge, match="65540 bytes of static LDS; gfx1100 allows 65536") as e:
        load_code_object(bytes(data))
    assert isinstance(e.value, LDSLimitExceeded) and isinstance(e.value, CodeObjectError)
