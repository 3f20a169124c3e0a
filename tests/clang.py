"""Compile OpenCL C test kernels with Debian's clang-19 (the LLVM oracle), cached on disk."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from amdq.codeobj.clang import PRELUDES

KERNELS = Path(__file__).parent / "kernels"
PRELUDE = Path(PRELUDES["opencl"])      # the package's OpenCL C prelude, as amdq.compile(lang="opencl") uses it
CACHE = Path(os.environ.get("AMDQ_TEST_CACHE", Path.home() / ".cache" / "amdq-tests"))


NEWER_THAN_CLANG19 = {"gfx950"}     # targets of amdq that Debian's clang-19 cannot compile for


def tool(name: str) -> str:
    """Path of an LLVM 19 tool, or skip the test when the toolchain is missing."""
    for cand in (f"{name}-19", f"/usr/lib/llvm-19/bin/{name}"):
        p = shutil.which(cand) or (cand if os.path.exists(cand) else None)
        if p:
            return p
    msg = f"{name}-19 not installed (apt-get install clang-19 llvm-19 lld-19)"
    if os.environ.get("CI") or os.environ.get("AMDQ_REQUIRE_LLVM"):
        pytest.fail(msg)       # in CI the oracle must be present: a skip would hide every oracle test
    pytest.skip(msg)


def run(*args: str) -> str:
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def compile_cl(src: str | Path, arch: str = "gfx1100", link: bool = True, flags: tuple[str, ...] = ()) -> Path:
    """OpenCL C (text or a file under tests/kernels) -> ET_REL .o or, with link, an ET_DYN .hsaco. A target
    clang-19 does not know (NEWER_THAN_CLANG19) goes through compile_cl_llvm22 (always an ET_REL .o)."""
    if arch.split(":")[0] in NEWER_THAN_CLANG19:
        return compile_cl_llvm22(src, arch, flags)
    if isinstance(src, Path) or (isinstance(src, str) and src.endswith(".cl") and "\n" not in src):
        src = (KERNELS / src).read_text() if not Path(src).is_absolute() else Path(src).read_text()
    prelude = PRELUDE.read_text()
    key = hashlib.sha256(f"{arch}|{link}|{flags}|{prelude}|{src}".encode()).hexdigest()[:20]
    CACHE.mkdir(parents=True, exist_ok=True)
    obj = CACHE / f"{key}.o"
    out = CACHE / (f"{key}.hsaco" if link else f"{key}.o")
    if not out.exists():
        cl = CACHE / f"{key}.{os.getpid()}.cl"
        cl.write_text(src)
        run(tool("clang"), "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", f"-mcpu={arch}",
            "-nogpulib", "-O2", "-include", str(PRELUDE), *flags, "-c", str(cl), "-o", str(obj) + f".{os.getpid()}.tmp")
        os.replace(str(obj) + f".{os.getpid()}.tmp", obj)
        if link:
            run(tool("ld.lld"), "-shared", str(obj), "-o", str(out) + f".{os.getpid()}.tmp")
            os.replace(str(out) + f".{os.getpid()}.tmp", out)
    return out


def compile_cl_llvm22(src: str | Path, arch: str = "gfx950", flags: tuple[str, ...] = (),
                      agpr_alloc: int | None = None) -> Path:
    """OpenCL C -> ET_REL .o for a target clang-19 does not know (gfx950): clang-19 emits LLVM IR for gfx942
    (its nearest target), the IR is retargeted (target-cpu; gfx942's explicit feature list dropped so the
    target's own apply) and compiled by amdq.compile (llvmlite's LLVM 22). Cached on disk like compile_cl.
    agpr_alloc: give the kernels LLVM 22's "amdgpu-agpr-alloc" (AccVGPRs the allocator may use, e.g. for
    spills) in place of the "amdgpu-no-agpr" clang-19 infers for code without AGPR operands."""
    import re
    import amdq
    import llvmlite
    if isinstance(src, Path) or (isinstance(src, str) and src.endswith(".cl") and "\n" not in src):
        src = (KERNELS / src).read_text() if not Path(src).is_absolute() else Path(src).read_text()
    prelude = PRELUDE.read_text()
    key = hashlib.sha256(f"llvm22|{llvmlite.__version__}|{arch}|{flags}|{agpr_alloc}|{prelude}|{src}".encode()).hexdigest()[:20]
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"{key}.l22.o"
    if not out.exists():
        cl = CACHE / f"{key}.{os.getpid()}.cl"
        cl.write_text(src)
        ir = run(tool("clang"), "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942",
                 "-nogpulib", "-O2", "-include", str(PRELUDE), *flags, "-emit-llvm", "-S", "-o", "-",
                 str(cl))
        cl.unlink()
        ir = re.sub(r'"target-features"="[^"]*"', "", ir.replace('"target-cpu"="gfx942"', f'"target-cpu"="{arch}"'))
        if agpr_alloc is not None:
            assert '"amdgpu-no-agpr"' in ir, "clang-19 no longer marks the kernel amdgpu-no-agpr"
            ir = ir.replace('"amdgpu-no-agpr"', f'"amdgpu-agpr-alloc"="{agpr_alloc}"')
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(amdq.compile(ir, arch))
        os.replace(tmp, out)
    return out
