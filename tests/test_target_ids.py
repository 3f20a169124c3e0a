"""Target-id spellings (bare, ISA names with empty, absent or non-empty environments, new-style amdgpu<subarch>
architectures, generic targets, feature suffixes), the compatibility rules, and the generic-target table
checked against clang-19's own ELF headers."""
from __future__ import annotations

import pytest

from amdq.codeobj import load_code_object
from amdq.codeobj.targetid import (device_target, elf_target, incompatibility, parse_any, parse_bundle_id,
                                   parse_isa_name, parse_target_id)
from amdq.errors import CodeObjectError, TargetMismatch
from amdq.hw import target_id as F
from clang import run, tool

SPELLINGS = {
    "gfx1100": "gfx1100",
    "gfx942:xnack-": "gfx942:xnack-",
    "gfx942:xnack+:sramecc-": "gfx942:sramecc-:xnack+",          # canonical order is alphabetical
    "gfx11-generic": "gfx11-generic",
    "gfx9-4-generic:sramecc+": "gfx9-4-generic:sramecc+",
    "amdgcn-amd-amdhsa--gfx1100": "gfx1100",
    "amdgcn-amd-amdhsa-unknown-gfx1100": "gfx1100",
    "amdgcn-amd-amdhsa-llvm-gfx1201": "gfx1201",
    "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-": "gfx942:sramecc+:xnack-",
    "amdgcn-amd-amdhsa-unknown-gfx942:xnack+": "gfx942:xnack+",
    "amdgcn-amd-amdhsa--gfx12-generic": "gfx12-generic",
    "amdgcn-amd-amdhsa-gfx1100": "gfx1100",                        # the bundler's three-field triple
    "amdgcn-amd-amdhsa-gfx11-generic": "gfx11-generic",
    "amdgpu11.00-amd-amdhsa-unknown-gfx1100": "gfx1100",           # what Triton's LLVM writes
    "amdgpu11.00-amd-amdhsa--gfx1100": "gfx1100",
    "amdgpu11.00-amd-amdhsa--": "gfx1100",                         # processor derived from the subarch
    "amdgpu9.42-amd-amdhsa--gfx942:sramecc+": "gfx942:sramecc+",
    "amdgpu9.42-amd-amdhsa--:xnack-": "gfx942:xnack-",
    "amdgpu9.50-amd-amdhsa-unknown-gfx950": "gfx950",
    "amdgpu12.01-amd-amdhsa--gfx1201": "gfx1201",
    "amdgpu11-amd-amdhsa--gfx11-generic": "gfx11-generic",         # a family subarch and its generic target
    "amdgpu11-amd-amdhsa--gfx1151": "gfx1151",                     # ... or one of its members
    "amdgpu9.4-amd-amdhsa--gfx9-4-generic:xnack+:sramecc+": "gfx9-4-generic:sramecc+:xnack+",
    "amdgpu12-amd-amdhsa-unknown-gfx1200": "gfx1200",
}


@pytest.mark.parametrize("text", list(SPELLINGS))
def test_spellings_parse(text):
    assert str(parse_any(text)) == SPELLINGS[text]


BAD = [
    "gfx1100:xnack",             # no sign
    "gfx1100:foo+",              # unknown feature
    "gfx942:xnack+:xnack-",      # twice
    "sm_80",
    "amdgcn-amd-amdhsa--",       # no processor
    "amdgcn-amd-amdhsa--sm_80",
    "nvptx64-nvidia-cuda--sm_80",
    "amdgcn-amd-amdpal--gfx1100",
    "amdgpu11.00-amd-amdhsa--gfx1201",     # processor against the subarch
    "amdgpu11-amd-amdhsa--gfx1200",        # not a member of the family
    "amdgpu11-amd-amdhsa--",               # a family names no processor
    "amdgpu-amd-amdhsa--gfx1100",          # bare amdgpu
    "amdgpufoo-amd-amdhsa--gfx1100",
    "amdgcn-amd",
]


@pytest.mark.parametrize("text", BAD)
def test_malformed_spellings_refused(text):
    with pytest.raises(CodeObjectError):
        parse_any(text)


def test_isa_name_fields():
    n = parse_isa_name("amdgpu11.00-amd-amdhsa-unknown-gfx1100")
    assert (n.arch, n.vendor, n.os, n.environment, n.target.processor) == ("amdgpu11.00", "amd", "amdhsa", "unknown",
                                                                             "gfx1100")
    assert parse_isa_name("amdgcn-amd-amdhsa--gfx1100").environment == ""


def test_bundle_ids():
    assert parse_bundle_id("hipv4-amdgcn-amd-amdhsa--gfx1100").target.processor == "gfx1100"
    b = parse_bundle_id("hip-amdgcn-amd-amdhsa-unknown-gfx1100:xnack-")
    assert (b.kind, str(b.target)) == ("hip", "gfx1100:xnack-")
    assert parse_bundle_id("openmp-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack+").target.feature("xnack") is True
    for host in ("host-x86_64-unknown-linux--", "host-x86_64-pc-linux-gnu-", "host-x86_64-unknown-linux-gnu"):
        assert parse_bundle_id(host).target is None
    assert parse_bundle_id("hipv4-nvptx64-nvidia-cuda--sm_80").target is None       # another GPU: listed only
    assert parse_bundle_id("hipv4-amdgpu11.7-amd-amdhsa--gfx1170").target is None   # a family not in the table
    with pytest.raises(CodeObjectError):
        parse_bundle_id("nodash")


def test_compatibility_rules():
    d1100, d942 = device_target("gfx1100"), device_target("gfx942")
    assert str(d1100) == "gfx1100" and str(d942) == "gfx942:sramecc+:xnack-"
    assert str(device_target("gfx942:xnack+")) == "gfx942:sramecc+:xnack+"
    with pytest.raises(CodeObjectError, match="no xnack mode"):
        device_target("gfx1100:xnack+")
    ok = lambda code, dev, v=None: incompatibility(parse_any(code), dev, v) is None  # noqa: E731
    assert ok("gfx1100", d1100) and not ok("gfx1101", d1100)
    assert ok("gfx11-generic", d1100) and ok("gfx11-generic", device_target("gfx1151"))
    assert not ok("gfx11-generic", device_target("gfx1201")) and ok("gfx12-generic", device_target("gfx1201"))
    assert ok("gfx9-4-generic", d942) and ok("gfx9-4-generic", device_target("gfx950"))
    assert not ok("gfx11-generic", d1100, 0) and ok("gfx11-generic", d1100, 1)
    assert ok("gfx942", d942) and ok("gfx942:xnack-", d942) and ok("gfx942:sramecc+", d942)
    assert not ok("gfx942:xnack+", d942) and not ok("gfx942:sramecc-", d942)
    assert ok("gfx942:xnack+", device_target("gfx942:xnack+"))
    assert ok("gfx1100:xnack-", d1100) and not ok("gfx1100:xnack+", d1100)   # a device without xnack runs it off


def test_e_flags_settings():
    t, v = elf_target(0x41, 5)
    assert (str(t), v) == ("gfx1100", None)
    assert str(elf_target(0x4C | 0x200 | 0xC00, 5)[0]) == "gfx942:sramecc+:xnack-"
    assert str(elf_target(0x4C | 0x100 | 0x400, 5)[0]) == "gfx942"                 # any, any
    assert elf_target(0x54 | (3 << 24), 6) == (parse_target_id("gfx11-generic"), 3)
    with pytest.raises(CodeObjectError, match="0x2f is not a supported target"):
        elf_target(0x2F, 5)                                                         # gfx906


# clang-19 writes the EF_AMDGPU_MACH of each generic target it knows; the table must agree.
CLANG19_GENERICS = ["gfx9-generic", "gfx10-1-generic", "gfx10-3-generic", "gfx11-generic", "gfx12-generic"]


@pytest.mark.parametrize("name", CLANG19_GENERICS)
def test_generic_table_matches_clang(name, tmp_path):
    src = tmp_path / "k.cl"
    src.write_text("__kernel void k(__global int* p) { p[__builtin_amdgcn_workitem_id_x()] = 1; }\n")
    out = tmp_path / "k.o"
    run(tool("clang"), "-x", "cl", "-target", "amdgcn-amd-amdhsa", f"-mcpu={name}", "-mcode-object-version=6",
        "-nogpulib", "-c", str(src), "-o", str(out))
    data = out.read_bytes()
    flags = int.from_bytes(data[48:52], "little")
    assert flags & 0xFF == F.GENERIC_TARGETS[name].mach
    assert flags >> 24 >= 1                                   # a generic version, at least every member's
    header = run(tool("llvm-readelf"), "-h", str(out))
    assert name in header
    g = F.GENERIC_TARGETS[name]
    if any(m in ("gfx1100", "gfx1201", "gfx942") for m in g.members):
        img = load_code_object(data)
        assert img.processor == name
        for m in g.members:
            if m in ("gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201", "gfx942", "gfx950"):
                img.check_runs_on(m)
        with pytest.raises(TargetMismatch, match=f"{name}.*gfx942"):
            img.check_runs_on("gfx942")
    else:
        with pytest.raises(CodeObjectError, match="covers no target amdq supports"):
            load_code_object(data)


def test_triton_spelling_in_metadata_is_accepted():
    """The loader took the processor as the text after '--'; Triton's LLVM writes a non-empty environment and a
    new-style architecture, which must now load (the committed Triton code objects are the real file)."""
    from pathlib import Path
    hsaco = Path(__file__).parent / "fixtures" / "triton" / "add_kernel.gfx1100.hsaco"
    img = load_code_object(hsaco.read_bytes(), "gfx1100")
    assert img.metadata.target == "amdgpu11.00-amd-amdhsa-unknown-gfx1100"
    assert list(img.kernels) == ["add_kernel"]


def test_loader_checks_the_device_arch():
    from pathlib import Path
    from amdq.errors import UnsupportedTarget
    code = (Path(__file__).parent / "fixtures" / "triton" / "add_kernel.gfx1201.hsaco").read_bytes()
    with pytest.raises(UnsupportedTarget, match="gfx906"):
        load_code_object(code, "gfx906")
    with pytest.raises(TargetMismatch, match="code object is for gfx1201, the device is gfx1200: it is for gfx1201"):
        load_code_object(code, "gfx1200")
