"""OpenCL C and HIP source -> AMDGPU code object, through a clang (19 or newer) found on the machine.

amdq ships no clang: `find_clang` looks for $AMDQ_CLANG, else `clang-NN` and `clang` on PATH, asks each
`--version` and takes the newest of at least version 19 (the version the project tests with; it knows every
target amdq supports but gfx950, which came with clang 20). Code object v5 is asked for explicitly
(-mcode-object-version=5), as amdq's LLVM IR path does. Neither language gets a device library (-nogpulib):
the work-item functions, barriers and atomics come from the preludes in amdq/include/, force-included with
-include, which leaves the user's line numbers as they are.

- OpenCL C: `clang -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=ARCH -c` -> a relocatable object (ET_REL).
- HIP: `clang -x hip -nogpuinc --offload-device-only --no-gpu-bundle-output --offload-arch=ARCH -c` -> the
  device code linked by clang with its lld (ET_DYN; clang's HIP toolchain always links device code).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache

from ..errors import CompileError, InvalidArgument

MIN_VERSION = 19
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include")
PRELUDES = {"opencl": os.path.join(INCLUDE_DIR, "amdq_opencl.h"), "hip": os.path.join(INCLUDE_DIR, "amdq_hip.h")}
LANG_NAMES = {"opencl": "OpenCL C", "hip": "HIP"}
SOURCE_NAMES = {"opencl": "kernel.cl", "hip": "kernel.hip"}
TIMEOUT_S = 600.0

# Options amdq sets itself (target, language, output): a user's copy would contradict them.
_RESERVED = {"-c", "-S", "-E", "-emit-llvm", "-fsyntax-only", "-save-temps", "-###", "-target", "--target",
             "--offload-device-only", "--cuda-device-only", "--offload-host-only", "--cuda-host-only",
             "--no-gpu-bundle-output", "--gpu-bundle-output", "-nogpulib", "-nogpuinc"}
_RESERVED_PREFIXES = ("-o", "-x", "-M", "-mcpu=", "-march=", "--offload-arch=", "--cuda-gpu-arch=", "-target=",
                      "--target=")


@dataclass(frozen=True)
class Clang:
    path: str
    version: tuple[int, int, int]
    banner: str                      # the first line of `--version`, e.g. "Debian clang version 19.1.7 (...)"

    @property
    def name(self) -> str:
        return f"{os.path.basename(self.path)} {'.'.join(map(str, self.version))}"


def candidate_names() -> list[str]:
    """The names looked up on PATH, newest first."""
    return [f"clang-{v}" for v in range(40, MIN_VERSION - 1, -1)] + ["clang"]


@lru_cache(maxsize=32)
def _version(path: str, mtime_ns: int, size: int) -> tuple[tuple[int, int, int], str] | None:
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (r.stdout.splitlines() or [""])[0].strip()
    m = re.search(r"clang version (\d+)\.(\d+)\.(\d+)", r.stdout)
    return ((int(m[1]), int(m[2]), int(m[3])), first) if m else None


def probe(path: str) -> Clang | None:
    """The clang at `path` with its version, or None when it does not run or does not say it is clang."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    v = _version(path, st.st_mtime_ns, st.st_size)
    return Clang(path, v[0], v[1]) if v else None


def find_clang() -> Clang:
    """The clang amdq compiles OpenCL C and HIP with; a CompileError naming what was searched if none fits."""
    env = os.environ.get("AMDQ_CLANG")
    if env:
        c = probe(shutil.which(env) or env)
        if c is None:
            raise CompileError(f"AMDQ_CLANG={env} is not a clang that runs (`{env} --version` failed or does not "
                               f"name a clang version)")
        if c.version[0] < MIN_VERSION:
            raise CompileError(f"AMDQ_CLANG={env} is {c.name}; amdq needs clang {MIN_VERSION} or newer")
        return c
    found, seen = [], set()
    for name in candidate_names():
        path = shutil.which(name)
        if path and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            c = probe(path)
            if c is not None:
                found.append(c)
    good = [c for c in found if c.version[0] >= MIN_VERSION]
    if good:
        return max(good, key=lambda c: c.version)
    names = candidate_names()
    searched = f"{names[-2]} ... {names[0]} and {names[-1]}"
    old = f" (found only {', '.join(c.name for c in found)}, too old)" if found else ""
    raise CompileError(f"compiling OpenCL C or HIP needs clang {MIN_VERSION} or newer, and none was found: searched "
                       f"AMDQ_CLANG (unset) and {searched} on PATH{old}; install one (apt-get install "
                       f"clang-{MIN_VERSION} lld-{MIN_VERSION}) or set AMDQ_CLANG to a clang binary")


def check_options(options) -> list[str]:
    """The options as a list of strings; InvalidArgument for anything else or for one amdq sets itself."""
    if options is None:
        return []
    if isinstance(options, (str, bytes)) or not isinstance(options, (list, tuple)):
        raise InvalidArgument(f"options is a list of strings (e.g. ['-O3', '-DN=4']), not {type(options).__name__}"
                              + (f" {options!r}: split it into separate options" if isinstance(options, str) else ""))
    out = []
    for o in options:
        if not isinstance(o, str):
            raise InvalidArgument(f"options must be strings, not {type(o).__name__} {o!r}")
        if not o or "\0" in o:
            raise InvalidArgument(f"option {o!r} is empty or holds a NUL byte")
        if o in _RESERVED or o.startswith(_RESERVED_PREFIXES):
            raise InvalidArgument(f"option {o!r} is set by amdq.compile itself (the target comes from arch=, the "
                                  f"language from lang=, the output is a code object); remove it")
        out.append(o)
    return out


def prelude_digest(lang: str) -> str:
    """sha256 of the prelude force-included for `lang` (part of the compile cache key)."""
    with open(PRELUDES[lang], "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def command(clang: Clang, lang: str, arch: str, opt: int, options: list[str], src_path: str, out_path: str) -> list[str]:
    """The clang command line for one compilation."""
    common = ["-nogpulib", "-mcode-object-version=5", f"-O{opt}", "-include", PRELUDES[lang], "-fno-color-diagnostics",
              "-fmessage-length=0"]
    if lang == "opencl":
        return [clang.path, "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", f"-mcpu={arch}", *common,
                *options, "-c", src_path, "-o", out_path]
    return [clang.path, "-x", "hip", "-nogpuinc", "--offload-device-only", "--no-gpu-bundle-output",
            f"--offload-arch={arch}", *common, *options, "-c", src_path, "-o", out_path]


_DIAG = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$")


def _tidy(text: str, tmpdir: str, lang: str) -> str:
    """clang's diagnostics with amdq's temporary paths replaced by `<source>` and the prelude's name."""
    text = text.replace(os.path.join(tmpdir, SOURCE_NAMES[lang]), "<source>")
    text = text.replace(INCLUDE_DIR + os.sep, "amdq/include/")
    return text.replace(tmpdir + os.sep, "")


def error_lines(text: str) -> list[int]:
    """The user's line numbers clang reported errors at (in `<source>`), in order, without repeats."""
    lines = []
    for ln in text.splitlines():
        m = _DIAG.match(ln)
        if m and m["file"] == "<source>" and m["sev"] in ("error", "fatal error") and int(m["line"]) not in lines:
            lines.append(int(m["line"]))
    return lines


def compile_source(clang: Clang, src: str, lang: str, arch: str, opt: int, options: list[str],
                   hint: str = "") -> bytes:
    """Run clang on `src`; the code object's bytes, or a CompileError carrying clang's diagnostics with the
    user's line numbers (and `hint`, when the source looks like another language)."""
    what = f"{clang.name} ({clang.path})"
    with tempfile.TemporaryDirectory(prefix="amdq-clang-") as tmp:
        src_path, out_path = os.path.join(tmp, SOURCE_NAMES[lang]), os.path.join(tmp, "out.o")
        with open(src_path, "w", encoding="utf-8") as f:
            f.write(src)
        cmd = command(clang, lang, arch, opt, options, src_path, out_path)
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{what} did not finish compiling the {LANG_NAMES[lang]} source for {arch} within "
                               f"{TIMEOUT_S:.0f} s") from None
        except OSError as e:
            raise CompileError(f"could not run {what}: {e}") from None
        log = _tidy(r.stderr.decode("utf-8", "replace"), tmp, lang)
        obj = b""
        if r.returncode == 0 and os.path.exists(out_path):
            with open(out_path, "rb") as f:
                obj = f.read()
    if r.returncode == 0 and obj.startswith(b"\x7fELF"):
        return obj
    if re.search(r"unknown target CPU|invalid offload arch|invalid target ID|unsupported CUDA gpu architecture", log):
        raise CompileError(f"{what} does not know {arch}; a newer clang does (set AMDQ_CLANG to one): "
                           f"{_short(log)}", log=log)
    if re.search(r'Executable "[^"]*lld" doesn.t exist|unable to execute command.*lld|ld\.lld.*not found', log):
        raise CompileError(f"{what} links HIP device code with lld, which is missing: install lld-"
                           f"{clang.version[0]} (apt-get install lld-{clang.version[0]}): {_short(log)}", log=log)
    if r.returncode == 0:
        raise CompileError(f"{what} succeeded on the {LANG_NAMES[lang]} source for {arch} but wrote no ELF code "
                           f"object ({len(obj)} bytes{', starting ' + repr(obj[:8]) if obj else ''})"
                           + (f": {_short(log)}" if log.strip() else ""), log=log)
    lines = error_lines(log)
    at = f" at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}" if lines else ""
    status = f"exit status {r.returncode}"
    raise CompileError(f"{what} rejected the {LANG_NAMES[lang]} source for {arch}{at} ({status}):\n"
                       f"{_short(log) or 'no diagnostic'}{hint}", lines=lines, log=log)


def _short(log: str, limit: int = 4000) -> str:
    log = log.strip()
    return log if len(log) <= limit else log[:limit] + "\n..."
