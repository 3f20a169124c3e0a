"""Source -> AMDGPU code object (code object v5): LLVM IR through llvmlite's AMDGPU backend (ET_REL), OpenCL C
and HIP through a clang 19 or newer found on the machine (`clang.py`; ET_REL and ET_DYN). Every result goes
through the on-disk compile cache (`compile_cache.py`).

LLVM runs in a child process (`_llvm_worker.py`, started once and reused): on some inputs it aborts
the whole process (`LLVM ERROR: Cannot select`, inline assembly, unknown processors), and here that
becomes a CompileError instead of killing the caller.

llvmlite's AMDGPU backend has no assembler, so a module with inline assembly is compiled by LLVM's
own `llc` (19 or newer: AMDQ_LLC, else llc-22 ... llc-19 or llc on PATH) in a child process, without
llvmlite's mid-level optimisation pipeline; with no llc it is refused with a CompileError.
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import pickle
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from functools import lru_cache

from . import clang as _clang
from . import compile_cache
from ._llvm_worker import INLINE_ASM
from ..errors import CompileError, InvalidArgument
from ..hw.targets import get_target

TRIPLE = "amdgcn-amd-amdhsa"
_COV_FLAG = '!{i32 1, !"amdhsa_code_object_version", i32 500}'
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_llvm_worker.py")
TIMEOUT_S = 600.0             # one compilation longer than this is treated as hung
_lock = threading.Lock()      # one request at a time to the worker
LANGS = ("llvm", "opencl", "hip")
LANG_NAMES = {"llvm": "LLVM IR", **_clang.LANG_NAMES}

stats = {"llvmlite": 0, "llc": 0, "clang": 0}    # compilations this process ran, by compiler (cache hits not counted)


def _with_defaults(ir: str) -> tuple[str, int]:
    """Add the triple and the code-object-version module flag when the IR lacks them; returns the IR and
    how many lines were put before the user's first line (what LLVM's line numbers are off by)."""
    shift = 0
    if "target triple" not in ir:
        ir = f'target triple = "{TRIPLE}"\n' + ir
        shift = 1
    if "amdhsa_code_object_version" not in ir:
        m = re.search(r"^!llvm\.module\.flags\s*=\s*!\{([^}]*)\}", ir, re.M)
        ids = [int(x) for x in re.findall(r"^!(\d+)\s*=", ir, re.M)]
        n = max(ids, default=-1) + 1
        if m:
            ir = ir[:m.start(1)] + (m.group(1) + ", " if m.group(1).strip() else "") + f"!{n}" + ir[m.end(1):]
            ir += f"\n!{n} = {_COV_FLAG}\n"
        else:
            ir += f"\n!llvm.module.flags = !{{!{n}}}\n!{n} = {_COV_FLAG}\n"
    return ir, shift


_LLVM_POS = re.compile(r"<string>:(\d+):(\d+):")


def _user_lines(msg: str, shift: int, nlines: int) -> tuple[str, list[int]]:
    """LLVM's diagnostic with its `<string>:LINE:COL:` positions turned into the user's (`<source>:LINE:COL:`),
    and the user's lines the errors are at; a position in what amdq appended is said to be so."""
    lines: list[int] = []

    def fix(m: re.Match) -> str:
        n = int(m[1]) - shift
        if 1 <= n <= nlines:
            if n not in lines:
                lines.append(n)
            return f"<source>:{n}:{m[2]}:"
        return f"<line {int(m[1])} of what amdq added to the source (triple, module flags)>:{m[2]}:"
    return _LLVM_POS.sub(fix, msg), lines


# What each language looks like, for the hint when a compile fails: (language, pattern); the first that
# matches a source that failed in another language is named in the error.
_LOOKS_LIKE = (
    ("llvm", re.compile(r"(?m)^\s*(?:define|declare)\b[^\n(]*@|^\s*target\s+(?:triple|datalayout)\s*=|"
                        r"^; ModuleID|^\s*attributes\s+#\d|^\s*![\w.]+\s*=\s*!")),
    ("hip", re.compile(r"\b__global__\b|\b(?:threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*[xyz]\b|"
                       r"\b__syncthreads\s*\(|#\s*include\s*[<\"]hip/|\bextern\s+\"C\"")),
    ("opencl", re.compile(r"(?m)\b__kernel\b|^\s*kernel\s+void\b|\b__global\b(?!_)|\bget_(?:global|local|group)_id\s*\(|"
                          r"\b__local\b(?!_)")),
)


def guess_lang(src: str) -> str | None:
    """The language `src` looks like ("llvm", "hip", "opencl"), or None."""
    for lang, pat in _LOOKS_LIKE:
        if pat.search(src):
            return lang
    return None


def _hint(src: str, lang: str) -> str:
    seen = guess_lang(src)
    if seen is None or seen == lang:
        return ""
    return f"\nhint: the source looks like {LANG_NAMES[seen]}, not {LANG_NAMES[lang]}: pass lang={seen!r}"


class _Worker:
    """The LLVM child process: requests go to its stdin, replies come from its stdout, and its stderr
    (LLVM's last words when it aborts) goes to an unlinked temporary file."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        fd, path = tempfile.mkstemp(prefix="amdq-llvm-", suffix=".err")
        os.unlink(path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)    # truncated per request
        self.err = fd
        self.proc = subprocess.Popen([sys.executable, _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, close_fds=True)

    def request(self, req: dict, timeout: float) -> tuple:
        """Send one request; returns its reply, or ("died", status, stderr) / ("timeout", stderr)."""
        os.ftruncate(self.err, 0)
        msg = pickle.dumps(req)
        try:
            self.proc.stdin.write(struct.pack("<Q", len(msg)) + msg)
            self.proc.stdin.flush()
            n, = struct.unpack("<Q", self._read(8, timeout))
            return pickle.loads(self._read(n, timeout))
        except (BrokenPipeError, EOFError):
            status = self.proc.wait()
            return ("died", status, self._stderr())
        except TimeoutError:
            self.close()
            return ("timeout", self._stderr())

    def _read(self, n: int, timeout: float) -> bytes:
        fd, buf, deadline = self.proc.stdout.fileno(), bytearray(), time.monotonic() + timeout
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _stderr(self) -> str:
        return os.pread(self.err, 1 << 16, 0).decode("utf-8", "replace")

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self.err)
        except OSError:
            pass


_worker: _Worker | None = None


def _shutdown() -> None:
    if _worker is not None:
        _worker.close()


atexit.register(_shutdown)


def _ask(req: dict) -> tuple:
    global _worker
    if _worker is None or not _worker.alive():
        if _worker is not None:
            _worker.close()
        _worker = _Worker()
    reply = _worker.request(req, TIMEOUT_S)
    if reply[0] in ("died", "timeout"):
        _worker.close()
        _worker = None
    return reply


def _llvm_error(stderr: str) -> str:
    """The useful part of what LLVM printed before it aborted."""
    lines = list(dict.fromkeys(ln.strip() for ln in stderr.splitlines() if ln.strip()))
    fatal = [ln for ln in lines if ln.startswith(("LLVM ERROR", "error:")) or ": error:" in ln]
    notes = [ln for ln in lines if ln.startswith("In function:") or "is not a recognized" in ln]
    text = "; ".join(fatal + notes or lines[:3]) or "no diagnostic"
    return text if len(text) < 2000 else text[:2000] + "..."


def find_llc() -> str | None:
    """The llc used for modules with inline assembly: $AMDQ_LLC, else the newest llc-NN (>= 19) on PATH."""
    if os.environ.get("AMDQ_LLC"):
        return os.environ["AMDQ_LLC"]
    for name in [f"llc-{v}" for v in range(30, 18, -1)] + ["llc"]:
        path = shutil.which(name)
        if path:
            return path
    return None


def _compile_with_llc(ir: str, arch: str, opt: int) -> bytes:
    llc = find_llc()
    if llc is None:
        raise CompileError("the IR contains inline assembly, which llvmlite's AMDGPU backend cannot assemble (it has "
                           "no AMDGPU asm parser); amdq compiles such modules with LLVM's llc (19 or newer), but "
                           "found none: install llvm-19 or set AMDQ_LLC to an llc binary")
    cmd = [llc, f"-O{opt}", f"-mtriple={TRIPLE}", f"-mcpu={arch}", "-filetype=obj", "-o", "-", "-"]
    try:
        r = subprocess.run(cmd, input=ir.encode(), capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"could not run {llc} for the inline assembly: {e}") from None
    err = r.stderr.decode("utf-8", "replace")
    if "is not a recognized processor" in err:
        raise CompileError(f"{os.path.basename(llc)} does not know {arch} (needed for the inline assembly): "
                           f"{_llvm_error(err)}")
    if r.returncode or not r.stdout.startswith(b"\x7fELF"):
        raise CompileError(f"{os.path.basename(llc)} rejected the module with inline assembly for {arch} "
                           f"(exit status {r.returncode}): {_llvm_error(err)}")
    return r.stdout


@lru_cache(maxsize=1)
def _pipeline_digest() -> str:
    """sha256 of amdq's own compile code (this module, the worker, the clang driver): part of every cache key,
    so a change to how amdq compiles does not return what the old code made."""
    import hashlib
    h = hashlib.sha256()
    for f in (__file__, _WORKER, _clang.__file__):
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


@lru_cache(maxsize=1)
def llvm_version() -> str:
    """llvmlite's version and the LLVM it is built on, e.g. "llvmlite 0.50.0, LLVM 22.1.0". Asking LLVM means loading
    llvmlite's library (~35 ms); the answer is kept in the compile cache's directory under the library file's identity
    (path, size, mtime), so a process that finds it there compiles from the cache without loading LLVM."""
    import llvmlite
    lib = os.path.join(os.path.dirname(llvmlite.__file__), "binding", "libllvmlite.so")
    try:
        st = os.stat(lib)
        name = "llvm-" + hashlib.sha256(f"{llvmlite.__version__}|{lib}|{st.st_size}|{st.st_mtime_ns}".encode()
                                        ).hexdigest()[:24]
    except OSError:
        name = None
    known = compile_cache.note(name) if name else None
    if known is not None and known.startswith(f"llvmlite {llvmlite.__version__}, LLVM "):
        return known
    import llvmlite.binding as llvm
    out = f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}"
    if name:
        compile_cache.write_note(name, out)
    return out


@lru_cache(maxsize=8)
def _llc_version(path: str, mtime_ns: int) -> str:
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "does not run"
    m = re.search(r"LLVM version \S+", r.stdout)
    return m[0] if m else "unknown version"


def _llc_identity() -> str | None:
    llc = find_llc()
    if llc is None:
        return None
    try:
        mtime = os.stat(shutil.which(llc) or llc).st_mtime_ns
    except OSError:
        return f"{llc} (missing)"
    return f"{llc} {_llc_version(llc, mtime)}"


def _llvm_options(options: list[str], opt: int) -> int:
    """The opt level for LLVM IR: llvmlite takes no clang options, only an -O level (which overrides opt=)."""
    for o in options:
        m = re.fullmatch(r"-O([0-3])", o)
        if not m:
            raise InvalidArgument(f"option {o!r} is a clang option, which LLVM IR (compiled by llvmlite) does not take: "
                                  f"options for lang='llvm' may only be -O0 ... -O3 (or pass opt=)")
        opt = int(m[1])
    return opt


def compile(src: str, arch: str = "gfx1100", opt: int = 2, lang: str = "llvm",
            options: list[str] | tuple[str, ...] | None = None) -> bytes:
    """Compile `src` for `arch` and return an AMDGPU code object (bytes; load it with Device.load).

    lang: "llvm" (LLVM IR text, by llvmlite; a relocatable object), "opencl" (OpenCL C 2.0) or "hip" (HIP device
    code, kernels `__global__`; `extern "C"` keeps their names unmangled), both by clang 19 or newer with
    amdq's prelude force-included (amdq/include/). opt: the optimisation level 0-3. options: a list of strings
    passed to clang after amdq's own (`-O3`, `-DN=4`, `-I...`); for LLVM IR only `-O<n>`. Results are cached on
    disk (see compile_cache). Whatever the compiler does with the source, a failure is a CompileError, with
    `lines` giving the user's line numbers of the errors."""
    tgt = get_target(arch)
    if lang not in LANGS:
        raise InvalidArgument(f"lang is one of {', '.join(map(repr, LANGS))}, not {lang!r}")
    if not isinstance(src, str):
        raise InvalidArgument(f"compile takes {LANG_NAMES[lang]} text, not {type(src).__name__}"
                              + (" (decode it first)" if isinstance(src, (bytes, bytearray)) else ""))
    if type(opt) is not int or not 0 <= opt <= 3:
        raise InvalidArgument(f"opt is an optimisation level 0, 1, 2 or 3, not {opt!r}")
    opts = _clang.check_options(options)
    if lang == "llvm":
        opt = _llvm_options(opts, opt)
        parts = dict(lang=lang, src=src, arch=tgt.arch, opt=opt, options=[], compiler=llvm_version())
        if INLINE_ASM.search(src):
            parts["llc"] = _llc_identity()
        make = lambda: _compile_llvm(src, tgt.arch, opt)          # noqa: E731
    else:
        cl = _clang.find_clang()
        carch = arch.strip().lower()
        parts = dict(lang=lang, src=src, arch=carch, opt=opt, options=opts, compiler=cl.banner,
                     compiler_path=cl.path, prelude=_clang.prelude_digest(lang))

        def make() -> bytes:
            stats["clang"] += 1
            return _clang.compile_source(cl, src, lang, carch, opt, opts, hint=_hint(src, lang))
    k = compile_cache.key(pipeline=_pipeline_digest(), **parts)
    co = compile_cache.load(k)
    if co is None:
        co = make()
        compile_cache.store(k, co)
    return co


def _compile_llvm(llvm_ir: str, arch: str, opt: int) -> bytes:
    """LLVM IR -> ET_REL through the llvmlite worker (or llc, for inline assembly)."""
    ir, shift = _with_defaults(llvm_ir)
    nlines = llvm_ir.count("\n") + (0 if llvm_ir.endswith("\n") else 1)
    req = {"ir": ir, "arch": arch, "opt": opt, "triple": TRIPLE}
    stats["llvmlite"] += 1
    with _lock:
        reply = _ask(req)
    kind = reply[0]
    if kind == "ok":
        return reply[1]
    if kind == "rejected":
        msg, lines = _user_lines(reply[1], shift, nlines)
        at = f" at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}" if lines else ""
        raise CompileError(f"LLVM rejected the IR for {arch}{at}: {msg}{_hint(llvm_ir, 'llvm')}", lines=lines,
                           log=msg)
    if kind == "codegen":
        raise CompileError(f"LLVM failed to generate code for {arch}: {reply[1]}", log=reply[1])
    if kind == "inline_asm":
        stats["llc"] += 1
        return _compile_with_llc(reply[1], arch, opt)
    if kind == "died":
        status = reply[1]
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        raise CompileError(f"LLVM aborted while compiling for {arch} ({how}; it ran in a child process): "
                           f"{_llvm_error(reply[2])}", log=reply[2])
    raise CompileError(f"LLVM did not finish compiling for {arch} within {TIMEOUT_S:.0f} s: "
                       f"{_llvm_error(reply[1])}", log=reply[1])
