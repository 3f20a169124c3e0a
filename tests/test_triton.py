"""Kernels from Triton's AMD backend load and run unmodified, launched as Triton's HIP launcher launches them.

Triton's launcher (triton/backends/amd/driver.py and driver.c, HIPLauncher and _launch) passes the kernel's
non-constexpr arguments, then two pointers: the global scratch (grid size x metadata.global_scratch_size bytes,
NULL when that is 0) and the profile scratch (likewise); the block is warp_size x num_warps work-items in x, and
metadata.shared bytes of dynamic LDS go in hipModuleLaunchKernel's sharedMemBytes. The committed code objects in
tests/fixtures/triton were made by scripts/gen_triton_kernels.py (the triton version is in each .json); the live
tests compile the same kernels when triton is importable.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import amdq
from amdq.codeobj import load_code_object
from sims import am_env

FIXTURES = Path(__file__).parent / "fixtures" / "triton"


@pytest.fixture(scope="module")
def devices(tmp_path_factory):
    """arch -> device: gfx1100 behind SIMKFD, gfx1201 behind SIMPCI (the AM driver)."""
    with pytest.MonkeyPatch.context() as mp:
        am_env(mp, tmp_path_factory.mktemp("am"))
        devs = {"gfx1100": amdq.open_device("SIMKFD+AMD:gfx1100"), "gfx1201": amdq.open_device("SIMPCI+AMD:gfx1201")}
        yield devs
        for d in devs.values():
            d.close()


def fixture(name: str, arch: str) -> tuple[bytes, dict]:
    return (FIXTURES / f"{name}.{arch}.hsaco").read_bytes(), json.loads((FIXTURES / f"{name}.{arch}.json").read_text())


def launch(dev, kernel, meta: dict, args: list, grid: tuple[int, int, int], **extra):
    """One launch as Triton's HIP launcher makes it (see the module docstring)."""
    n = grid[0] * grid[1] * grid[2]
    scratch = []
    for kind in ("global", "profile"):
        size = meta[f"{kind}_scratch_size"]
        scratch.append(dev.alloc(n * size) if size else 0)
    return kernel(*args, *scratch, grid=grid, block=(meta["warp_size"] * meta["num_warps"], 1, 1), wait=True, **extra)


def check_abi(code: bytes, meta: dict, arch: str) -> None:
    """The code object's own metadata agrees with the launcher ABI above."""
    img = load_code_object(code, arch)
    k = img.kernels[meta["name"]]
    explicit = [a for a in k.meta.args if not a.hidden]
    assert len(explicit) == len(meta["args"]) + 2
    assert [a.value_kind for a in explicit[-2:]] == ["global_buffer", "global_buffer"]
    assert k.meta.group_segment_fixed_size == 0 and k.descriptor.wave_size == meta["warp_size"]


def run_add(dev, code: bytes, meta: dict, arch: str) -> None:
    check_abi(code, meta, arch)
    prg = dev.load(code)
    n = 1000
    x = np.linspace(-3, 3, n, dtype=np.float32)
    y = np.arange(n, dtype=np.float32)
    bx, by, out = dev.upload(x), dev.upload(y), dev.alloc(4 * n)
    block = meta["constexprs"]["BLOCK"]
    launch(dev, prg["add_kernel"], meta, [bx, by, out, n], ((n + block - 1) // block, 1, 1))
    assert np.array_equal(out.numpy(np.float32)[:n], x + y)


def run_matmul(dev, code: bytes, meta: dict, arch: str) -> None:
    check_abi(code, meta, arch)
    assert meta["shared"] > 0                       # Triton's shared memory is dynamic LDS
    prg = dev.load(code)
    M, N, K = 64, 32, 48
    rng = np.random.default_rng(12)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    ba, bb, bc = dev.upload(a), dev.upload(b), dev.alloc(4 * M * N)
    c = meta["constexprs"]
    grid = ((M + c["BLOCK_M"] - 1) // c["BLOCK_M"], (N + c["BLOCK_N"] - 1) // c["BLOCK_N"], 1)
    launch(dev, prg["matmul_kernel"], meta, [ba, bb, bc, M, N, K, K, N, N], grid, shared_mem=meta["shared"])
    ref = a.astype(np.float32) @ b.astype(np.float32)
    assert np.allclose(bc.numpy(np.float32).reshape(M, N), ref, rtol=1e-3, atol=1e-3)


# -- committed code objects (no triton needed) ------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_committed_add_kernel(devices, arch):
    code, meta = fixture("add_kernel", arch)
    assert load_code_object(code).metadata.target == f"amdgpu{arch[3:-2]}.{arch[-2:]}-amd-amdhsa-unknown-{arch}"
    run_add(devices[arch], code, meta, arch)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_committed_matmul(devices, arch):
    code, meta = fixture("matmul_kernel", arch)
    run_matmul(devices[arch], code, meta, arch)


def test_committed_fixtures_are_recorded():
    """Every committed code object has its launch facts and the triton version that made it."""
    names = sorted(p.name for p in FIXTURES.glob("*.hsaco"))
    assert names == ["add_kernel.gfx1100.hsaco", "add_kernel.gfx1201.hsaco", "matmul_kernel.gfx1100.hsaco",
                     "matmul_kernel.gfx1201.hsaco"]
    for p in FIXTURES.glob("*.json"):
        meta = json.loads(p.read_text())
        assert meta["triton_version"] and meta["name"] == p.name.split(".")[0] and meta["arch"] == p.name.split(".")[1]


# -- live compile (triton installed) ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tk():
    pytest.importorskip("triton", reason="triton is not installed (pip install triton): the committed code objects "
                                         "above cover its kernels")
    import triton_kernels
    return triton_kernels


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_live_add_kernel(devices, tk, arch):
    k, meta = tk.compile_for("add_kernel", arch)
    run_add(devices[arch], k.asm["hsaco"], meta, arch)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_live_matmul(devices, tk, arch):
    k, meta = tk.compile_for("matmul_kernel", arch)
    run_matmul(devices[arch], k.asm["hsaco"], meta, arch)
