"""Clang offload bundles as HIP compilers and ROCm libraries ship them, built here by clang-19 (plain, compressed,
in a shared library, in a host object, for generic targets and xnack modes), loaded on simulated devices and run;
the compressed versions and methods clang-19 cannot write are built from the documented layout; corrupt,
truncated and foreign bundles raise amdq.errors exceptions."""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import zstandard

import amdq
from amdq.codeobj import bundle as B
from amdq.codeobj import load_code_object
from amdq.errors import CodeObjectError, TargetMismatch
from clang import run, tool
from sims import am_env

# A HIP kernel compiled without the HIP headers (-nogpuinc): the host side needs only the launch API's
# declarations, so the same file builds device-only bundles, host objects and shared libraries.
HIP = r"""
#define __global__ __attribute__((global))
struct dim3 { unsigned x, y, z; };
extern "C" int hipLaunchKernel(const void*, dim3, dim3, void**, unsigned long, void*);
extern "C" int __hipPushCallConfiguration(dim3, dim3, unsigned long, void*);
extern "C" int __hipPopCallConfiguration(dim3*, dim3*, unsigned long*, void*);
extern "C" __global__ void axpb(const float* x, float* y, float a, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
ARCHS = ("--offload-arch=gfx1100", "--offload-arch=gfx1201")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """build(name, *flags) -> bytes: HIP compiled by clang-19 with -nogpulib -nogpuinc (cached per module)."""
    d = tmp_path_factory.mktemp("hip")
    src = d / "axpb.hip"
    src.write_text(HIP)
    made: dict[tuple, bytes] = {}

    def go(name: str, *flags: str) -> bytes:
        if (name, flags) not in made:
            out = d / name
            run(tool("clang"), "-x", "hip", "-nogpulib", "-nogpuinc", "-O2", *flags, str(src), "-o", str(out))
            made[(name, flags)] = out.read_bytes()
        return made[(name, flags)]
    go.dir = d
    return go


@pytest.fixture(scope="module")
def kfd():
    dev = amdq.open_device("SIMKFD+AMD:gfx1100")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def pci(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        am_env(mp, tmp_path_factory.mktemp("am"))
        dev = amdq.open_device("SIMPCI+AMD:gfx1201")
        yield dev
        dev.close()


def check_runs(dev, prg, n: int = 300) -> None:
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 1.5, np.float32)
    bx, by = dev.upload(x), dev.upload(y)
    prg["axpb"](bx, by, 2.0, n, grid=((n + 127) // 128, 1, 1), block=(128, 1, 1), wait=True)
    assert np.array_equal(by.numpy(np.float32)[:n], np.float32(2.0) * x + y)


def device_bundle(build) -> bytes:
    return build("plain.fatbin", *ARCHS, "--offload-device-only")


def test_plain_bundle_from_clang_runs_on_both_devices(build, kfd, pci):
    data = device_bundle(build)
    assert data[:24] == b"__CLANG_OFFLOAD_BUNDLE__"
    ids = [e.id.text for e in B.unpack(data)]
    assert "hipv4-amdgcn-amd-amdhsa--gfx1100" in ids and "hipv4-amdgcn-amd-amdhsa--gfx1201" in ids
    assert any(i.startswith("host-") for i in ids)
    check_runs(kfd, kfd.load(data))
    check_runs(pci, pci.load(data))
    # the entry loaded is the device's: its ELF machine is the device's arch
    assert load_code_object(B.code_object_for(data, "gfx1201")).arch == "gfx1201"
    assert load_code_object(B.code_object_for(data, "gfx1100")).arch == "gfx1100"


def test_load_takes_a_path(build, kfd):
    device_bundle(build)
    check_runs(kfd, kfd.load(build.dir / "plain.fatbin"))
    check_runs(kfd, kfd.load(str(build.dir / "plain.fatbin")))


def test_compressed_bundle_from_clang(build, kfd, pci):
    """clang-19 --offload-compress writes CCOB version 2 with zstd (method 1)."""
    data = build("comp.fatbin", *ARCHS, "--offload-device-only", "--offload-compress")
    magic, version, method, total, usize = struct.unpack_from("<4sHHII", data)
    assert (magic, version, method, total) == (b"CCOB", 2, 1, len(data))
    assert usize > len(data)
    check_runs(kfd, kfd.load(data))
    check_runs(pci, pci.load(data))


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compressed"])
def test_shared_library_hip_fatbin(build, kfd, pci, compress):
    """A HIP shared library (-fPIC -shared; -no-hip-rt since no HIP runtime is installed) carries the fat binary
    in its .hip_fatbin section."""
    so = build(f"lib{int(compress)}.so", *ARCHS, "-fPIC", "-shared", "-no-hip-rt",
               *(("--offload-compress",) if compress else ()))
    assert so[:4] == b"\x7fELF" and B.is_host_elf(so)
    entries = B.unpack(so)
    assert all(".hip_fatbin" in e.container for e in entries)
    assert ("CCOB" in entries[0].container) == compress
    check_runs(kfd, kfd.load(so))
    check_runs(pci, pci.load(so))


def test_host_object_and_rdc_object(build, kfd):
    """A host object (-c) embeds the fat binary too; an -fgpu-rdc object embeds bitcode, which is refused."""
    obj = build("host.o", "--offload-arch=gfx1100", "-c")
    check_runs(kfd, kfd.load(obj))
    rdc = build("rdc.o", *ARCHS, "-c", "-fgpu-rdc")
    assert {e.format for e in B.unpack(rdc) if e.id.target} == {"bitcode"}
    with pytest.raises(CodeObjectError, match="LLVM bitcode.*-fgpu-rdc"):
        kfd.load(rdc)


def test_library_of_two_translation_units(build, kfd):
    """A shared library linked from two HIP files holds two bundles in .hip_fatbin (one per translation unit):
    each has its own code object for the device; dev.load of the whole file says to load them one by one."""
    second = build.dir / "second.hip"
    second.write_text(HIP.replace("axpb", "scale2").replace("a * x[i] + y[i]", "2.0f * x[i]"))
    lib = build.dir / "libtwo.so"
    run(tool("clang"), "-x", "hip", "-nogpulib", "-nogpuinc", "-O2", "--offload-arch=gfx1100", "-fPIC", "-shared",
        "-no-hip-rt", str(build.dir / "axpb.hip"), str(second), "-o", str(lib))
    data = lib.read_bytes()
    assert sorted({e.bundle for e in B.unpack(data)}) == [0, 1]
    prgs = [kfd.load(co) for co in B.code_objects_for(data, kfd.arch)]
    assert [p.kernels for p in prgs] == [["axpb"], ["scale2"]]
    check_runs(kfd, prgs[0])
    with pytest.raises(CodeObjectError, match="2 offload bundles.*code_objects_for"):
        kfd.load(data)
    with pytest.raises(TargetMismatch, match="gfx1201.*hipv4-amdgcn-amd-amdhsa--gfx1100"):
        B.code_objects_for(data, "gfx1201")


def ccob(plain: bytes, version: int, method: int, payload: bytes | None = None) -> bytes:
    """A compressed bundle built from the documented header layout (amdq.hw.bundle): clang-19 writes only v2 with
    zstd, so versions 1 and 3 and zlib are made here."""
    if payload is None:
        payload = zstandard.ZstdCompressor(level=3).compress(plain) if method == 1 else zlib.compress(plain, 6)
    h = int.from_bytes(hashlib.md5(plain).digest()[:8], "little")
    if version == 1:
        head = struct.pack("<4sHHIQ", b"CCOB", 1, method, len(plain), h)
    elif version == 2:
        head = struct.pack("<4sHHIIQ", b"CCOB", 2, method, 24 + len(payload), len(plain), h)
    else:
        head = struct.pack("<4sHHQQQ", b"CCOB", version, method, 32 + len(payload), len(plain), h)
    return head + payload


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("method", [0, 1], ids=["zlib", "zstd"])
def test_constructed_ccob_versions(build, kfd, version, method):
    """CCOB versions 1-3 with zlib and zstd, built in the test from the documented layout (clang-19 writes only
    v2/zstd), wrapping clang-19's plain bundle."""
    data = ccob(device_bundle(build), version, method)
    entries = B.unpack(data)
    assert entries[0].container == f"CCOB v{version} ({'zlib' if method == 0 else 'zstd'})"
    check_runs(kfd, kfd.load(data))


def test_ccob_v2_from_clang_matches_constructed_layout(build):
    """Our reading of the v2 header agrees with what clang writes: same fields, same MD5 truncation."""
    clang_ccob = build("comp.fatbin", *ARCHS, "--offload-device-only", "--offload-compress")
    inner, desc, size = B.decompress(clang_ccob)
    assert inner[:24] == b"__CLANG_OFFLOAD_BUNDLE__" and desc == "CCOB v2 (zstd)" and size == len(clang_ccob)
    ours = ccob(inner, 2, 1)
    assert clang_ccob[:8] == ours[:8]                                   # magic, version 2, method 1 (zstd)
    assert struct.unpack_from("<I", clang_ccob, 12)[0] == len(inner)   # uncompressed size
    assert clang_ccob[16:24] == ours[16:24]                             # hash: the MD5's first 8 bytes


def test_clang_offload_bundler(build, kfd, tmp_path):
    """clang-offload-bundler-19 bundles separately linked code objects (plain and --compress)."""
    if not shutil.which("clang-offload-bundler-19"):
        pytest.skip("clang-offload-bundler-19 not installed")
    plain = device_bundle(build)
    co = tmp_path / "g1100.hsaco"
    co.write_bytes(B.code_object_for(plain, "gfx1100"))
    out = tmp_path / "b.bin"
    for extra in ((), ("--compress",)):
        run("clang-offload-bundler-19", "--type=o", *extra,
            "--targets=host-x86_64-unknown-linux-gnu,hip-amdgcn-amd-amdhsa-unknown-gfx1100",
            "--input=/dev/null", f"--input={co}", f"--output={out}")
        data = out.read_bytes()
        assert data[:4] == (b"CCOB" if extra else b"__CL")
        ids = [e.id.text for e in B.unpack(data)]
        assert any(i.endswith("gfx1100") for i in ids)
        check_runs(kfd, kfd.load(data))


# -- generic targets and features -------------------------------------------------------------------------------

def test_generic_targets_run_on_members(build, kfd, pci):
    """gfx11-generic and gfx12-generic (code object v6) run on gfx1100 and gfx1201; elsewhere TargetMismatch."""
    data = build("generic.fatbin", "--offload-arch=gfx11-generic", "--offload-arch=gfx12-generic",
                 "-mcode-object-version=6", "--offload-device-only")
    ids = {e.id.text for e in B.unpack(data)}
    assert {"hipv4-amdgcn-amd-amdhsa--gfx11-generic", "hipv4-amdgcn-amd-amdhsa--gfx12-generic"} <= ids
    check_runs(kfd, kfd.load(data))
    check_runs(pci, pci.load(data))
    apu = amdq.open_device("SIMKFD+AMD:gfx1151")       # another member, another gfx11 ISA variant
    try:
        check_runs(apu, apu.load(data))
    finally:
        apu.close()
    g11 = B.code_object_for(data, "gfx1151")
    img = load_code_object(g11)
    assert img.processor == "gfx11-generic" and img.generic_version >= 1 and img.arch == "gfx1100"
    img.check_runs_on("gfx1101")
    with pytest.raises(TargetMismatch, match="gfx11-generic.*gfx942"):
        img.check_runs_on("gfx942")
    with pytest.raises(TargetMismatch, match="gfx11-generic.*gfx1201"):
        load_code_object(g11, "gfx1201")
    # a generic version below the one a member was added in is refused (e_flags bits 31:24 set to 0)
    old = bytearray(g11)
    old[48 + 3] = 0
    with pytest.raises(TargetMismatch, match="generic version is 0"):
        load_code_object(bytes(old), "gfx1100")


def test_specific_entry_preferred_over_generic(build):
    data = build("mixed.fatbin", "--offload-arch=gfx11-generic", "--offload-arch=gfx1100",
                 "-mcode-object-version=6", "--offload-device-only")
    assert load_code_object(B.code_object_for(data, "gfx1100")).processor == "gfx1100"
    assert load_code_object(B.code_object_for(data, "gfx1102")).processor == "gfx11-generic"


def test_xnack_entries_pick_the_device_mode(build):
    """gfx942 runs with xnack off and sramecc on unless the arch names another mode; an entry built for the other
    xnack setting is never picked, an any-entry is."""
    data = build("xnack.fatbin", "--offload-arch=gfx942:xnack+", "--offload-arch=gfx942:xnack-",
                 "--offload-device-only")
    pick = lambda arch: load_code_object(B.code_object_for(data, arch)).target_id  # noqa: E731
    assert str(pick("gfx942")) == "gfx942:xnack-"
    assert str(pick("gfx942:xnack+")) == "gfx942:xnack+"
    on = build("xnack_on.fatbin", "--offload-arch=gfx942:xnack+:sramecc-", "--offload-device-only")
    with pytest.raises(TargetMismatch) as ei:
        B.code_object_for(on, "gfx942")
    msg = str(ei.value)
    assert "gfx942:sramecc+:xnack-" in msg and "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc-:xnack+" in msg
    img = load_code_object(B.code_object_for(on, "gfx942:xnack+:sramecc-"))
    with pytest.raises(TargetMismatch, match="needs sramecc-"):
        img.check_runs_on("gfx942:xnack+")
    anyb = build("xnack_any.fatbin", "--offload-arch=gfx942", "--offload-device-only")
    assert str(load_code_object(B.code_object_for(anyb, "gfx942:xnack+")).target_id) == "gfx942"


# -- errors -----------------------------------------------------------------------------------------------------

def test_bundle_without_the_device_arch_lists_entries(build, kfd):
    data = build("only1201.fatbin", "--offload-arch=gfx1201", "--offload-device-only")
    with pytest.raises(TargetMismatch) as ei:
        kfd.load(data)
    msg = str(ei.value)
    assert "gfx1100" in msg and "hipv4-amdgcn-amd-amdhsa--gfx1201" in msg and "host-" in msg


def test_truncated_and_corrupt_bundles(build, kfd):
    plain = device_bundle(build)
    for cut in (10, 30, 60, len(plain) - 100):
        with pytest.raises(CodeObjectError, match="truncated"):
            kfd.load(plain[:cut])
    bad = bytearray(plain)
    struct.pack_into("<Q", bad, 24, 1 << 40)                  # absurd entry count
    with pytest.raises(CodeObjectError, match="entries"):
        kfd.load(bytes(bad))
    comp = build("comp.fatbin", *ARCHS, "--offload-device-only", "--offload-compress")
    with pytest.raises(CodeObjectError, match="truncated"):
        kfd.load(comp[:-40])
    with pytest.raises(CodeObjectError, match="truncated"):
        kfd.load(comp[:20])
    flipped = bytearray(comp)
    flipped[len(comp) // 2] ^= 0xFF
    with pytest.raises(CodeObjectError, match="decompress|MD5|corrupt"):
        kfd.load(bytes(flipped))
    wrong_hash = bytearray(comp)
    wrong_hash[16] ^= 1
    with pytest.raises(CodeObjectError, match="MD5"):
        kfd.load(bytes(wrong_hash))
    wrong_size = bytearray(comp)
    struct.pack_into("<I", wrong_size, 12, struct.unpack_from("<I", comp, 12)[0] - 1)
    with pytest.raises(CodeObjectError, match="header says"):
        kfd.load(bytes(wrong_size))
    with pytest.raises(CodeObjectError, match="not an offload bundle"):
        B.unpack(b"\0" * 64)


def test_unknown_compression_and_version(build, kfd):
    plain = device_bundle(build)
    with pytest.raises(CodeObjectError, match="compression method 7.*0 \\(zlib\\), 1 \\(zstd\\)"):
        kfd.load(ccob(plain, 2, 7, payload=zlib.compress(plain)))
    with pytest.raises(CodeObjectError, match="CCOB\\) version 9"):
        kfd.load(ccob(plain, 9, 1))
    inner = ccob(b"not a bundle at all; " * 4, 2, 0)
    with pytest.raises(CodeObjectError, match="no __CLANG_OFFLOAD_BUNDLE__ magic"):
        kfd.load(inner)


def test_host_elf_without_gpu_code(tmp_path):
    c = tmp_path / "x.c"
    c.write_text("int f(void) { return 1; }\n")
    run(tool("clang"), "-c", str(c), "-o", str(tmp_path / "x.o"))
    with pytest.raises(CodeObjectError, match="embeds no GPU code"):
        B.unpack((tmp_path / "x.o").read_bytes())


def test_inspect_lists_entries(build):
    so = build("lib1.so", *ARCHS, "-fPIC", "-shared", "-no-hip-rt", "--offload-compress")
    path = build.dir / "lib1.so"
    r = subprocess.run([sys.executable, "-m", "amdq.cli", "inspect", str(path), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = {e["id"]: e for e in json.loads(r.stdout)["bundle"]}
    assert got["hipv4-amdgcn-amd-amdhsa--gfx1201"]["kernels"] == ["axpb"]
    assert got["hipv4-amdgcn-amd-amdhsa--gfx1100"]["format"] == "elf"
    assert so
    r = subprocess.run([sys.executable, "-m", "amdq.cli", "inspect", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "hipv4-amdgcn-amd-amdhsa--gfx1100" in r.stdout and "CCOB v2 (zstd)" in r.stdout


# -- structure-aware damage: any truncation or bit flip of a real bundle is a CodeObjectError or loads ----------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DAMAGE = settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def code_object_or_error(data: bytes, arch: str = "gfx1100") -> None:
    try:
        load_code_object(B.code_object_for(data, arch), arch)
    except CodeObjectError as e:            # TargetMismatch included
        assert str(e)


@pytest.fixture(scope="module")
def damaged_corpus(build):
    plain = device_bundle(build)
    return [plain, build("comp.fatbin", *ARCHS, "--offload-device-only", "--offload-compress"), ccob(plain, 3, 0),
            build("lib1.so", *ARCHS, "-fPIC", "-shared", "-no-hip-rt", "--offload-compress")]


@pytest.mark.timeout(300)
@DAMAGE
@given(which=st.integers(0, 3), cut=st.floats(0, 1, exclude_max=True))
def test_truncated_anywhere(damaged_corpus, which, cut):
    data = damaged_corpus[which]
    code_object_or_error(data[:int(len(data) * cut)])


@pytest.mark.timeout(300)
@DAMAGE
@given(which=st.integers(0, 3),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7), st.booleans()),
                      min_size=1, max_size=6))
def test_bit_flips_anywhere(damaged_corpus, which, flips):
    data = bytearray(damaged_corpus[which])
    for where, bit, header in flips:         # half of the flips land in the first 96 bytes: the headers
        pos = int(where * min(96, len(data))) if header else int(where * len(data))
        data[pos] ^= 1 << bit
    code_object_or_error(bytes(data))


def test_disasm_lists_every_entry_of_a_bundle_or_the_targets(build, capsys):
    from amdq.cli import main
    data = build("comp.fatbin", *ARCHS, "--offload-device-only", "--offload-compress")
    path = build.dir / "comp.fatbin"
    assert path.read_bytes() == data
    assert main(["disasm", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[hipv4-amdgcn-amd-amdhsa--gfx1100] axpb:" in out and "[hipv4-amdgcn-amd-amdhsa--gfx1201] axpb:" in out
    assert "s_endpgm" in out
    assert main(["disasm", str(path), "--target", "gfx1201", "--kernel", "axpb"]) == 0
    one = capsys.readouterr().out
    assert one.startswith("[gfx1201] axpb:") and "gfx1100" not in one
