"""LLVM IR text -> AMDGPU code object (ET_REL, code object v5) through llvmlite's AMDGPU backend.

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

from ..errors import CompileError, InvalidArgument
from ..hw.targets import get_target

TRIPLE = "amdgcn-amd-amdhsa"
_COV_FLAG = '!{i32 1, !"amdhsa_code_object_version", i32 500}'
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_llvm_worker.py")
TIMEOUT_S = 600.0             # one compilation longer than this is treated as hung
_lock = threading.Lock()      # one request at a time to the worker


def _with_defaults(ir: str) -> str:
    """Add the triple and the code-object-version module flag when the IR lacks them."""
    if "target triple" not in ir:
        ir = f'target triple = "{TRIPLE}"\n' + ir
    if "amdhsa_code_object_version" not in ir:
        m = re.search(r"^!llvm\.module\.flags\s*=\s*!\{([^}]*)\}", ir, re.M)
        ids = [int(x) for x in re.findall(r"^!(\d+)\s*=", ir, re.M)]
        n = max(ids, default=-1) + 1
        if m:
            ir = ir[:m.start(1)] + (m.group(1) + ", " if m.group(1).strip() else "") + f"!{n}" + ir[m.end(1):]
            ir += f"\n!{n} = {_COV_FLAG}\n"
        else:
            ir += f"\n!llvm.module.flags = !{{!{n}}}\n!{n} = {_COV_FLAG}\n"
    return ir


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


def compile(llvm_ir: str, arch: str = "gfx1100", opt: int = 2) -> bytes:
    """Compile LLVM IR for `arch` (opt level 0-3); returns a relocatable AMDGPU ELF code object (load it
    with Device.load). Whatever LLVM does with the IR, a failure is a CompileError."""
    tgt = get_target(arch)
    if not isinstance(llvm_ir, str):
        raise InvalidArgument(f"compile takes LLVM IR text, not {type(llvm_ir).__name__}")
    if type(opt) is not int or not 0 <= opt <= 3:
        raise InvalidArgument(f"opt is an optimisation level 0, 1, 2 or 3, not {opt!r}")
    req = {"ir": _with_defaults(llvm_ir), "arch": tgt.arch, "opt": opt, "triple": TRIPLE}
    with _lock:
        reply = _ask(req)
    kind = reply[0]
    if kind == "ok":
        return reply[1]
    if kind == "rejected":
        raise CompileError(f"LLVM rejected the IR for {tgt.arch}: {reply[1]}")
    if kind == "codegen":
        raise CompileError(f"LLVM failed to generate code for {tgt.arch}: {reply[1]}")
    if kind == "inline_asm":
        return _compile_with_llc(reply[1], tgt.arch, opt)
    if kind == "died":
        status = reply[1]
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        raise CompileError(f"LLVM aborted while compiling for {tgt.arch} ({how}; it ran in a child process): "
                           f"{_llvm_error(reply[2])}")
    raise CompileError(f"LLVM did not finish compiling for {tgt.arch} within {TIMEOUT_S:.0f} s: "
                       f"{_llvm_error(reply[1])}")
