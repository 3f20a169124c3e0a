"""The child process in which amdq.compile runs LLVM (llvmlite).

LLVM ends the process on some errors instead of reporting them (`LLVM ERROR: Cannot select: ...`,
inline assembly without an asm parser, unknown processors in function attributes), so amdq keeps it
out of the caller's process: `compiler.py` starts this script with the same Python, sends it requests
on stdin and reads replies on stdout, and turns a dead worker into a CompileError.

Protocol: each message is an 8-byte little-endian length and a pickle. A request is
{"ir", "arch", "opt", "triple"}; a reply is ("ok", object bytes), ("rejected", message) for IR that
does not parse or verify, ("codegen", message) for an error LLVM reported, or ("inline_asm", IR text)
for a module the parent must compile with an external llc. This file imports only the standard
library and llvmlite, so that it starts quickly and without amdq on sys.path.
"""
from __future__ import annotations

import os
import pickle
import re
import struct
import sys

# Inline assembly in the printed module: `asm [sideeffect] [alignstack] [inteldialect] [unwind] "..."`
# in a call, or module-level `module asm "..."`. The printer escapes quotes inside strings as \22,
# so string constants cannot match.
INLINE_ASM = re.compile(r'(?m)^module asm "|(?<![\w.$%@"-])asm\s+(?:(?:sideeffect|alignstack|inteldialect|unwind)\s+)*"')

_machines: dict = {}


def _target_machine(llvm, triple: str, arch: str, opt: int):
    key = (triple, arch, opt)
    if key not in _machines:
        t = llvm.Target.from_triple(triple)
        _machines[key] = t.create_target_machine(cpu=arch, features="", opt=opt, reloc="pic", codemodel="default")
    return _machines[key]


def _bind_locally(mod) -> None:
    """Give defined globals with default visibility protected visibility: a code object is loaded on
    its own, so nothing can preempt them, and their addresses need no GOT (no GOTPCREL relocations)."""
    for v in list(mod.global_variables) + list(mod.functions):
        if not v.is_declaration and v.visibility.name == "default" and v.linkage.name not in ("internal", "private"):
            v.visibility = "protected"


def handle(llvm, req: dict) -> tuple:
    """Compile one request; LLVM errors it reports come back as replies, aborts kill the process."""
    try:
        mod = llvm.parse_assembly(req["ir"])
        mod.verify()
    except RuntimeError as e:
        return ("rejected", str(e).strip())
    mod.triple = req["triple"]
    _bind_locally(mod)
    if INLINE_ASM.search(str(mod)):
        return ("inline_asm", str(mod))
    try:
        tm = _target_machine(llvm, req["triple"], req["arch"], req["opt"])
        if req["opt"]:
            pto = llvm.create_pipeline_tuning_options(speed_level=req["opt"])
            pb = llvm.create_pass_builder(tm, pto)
            pb.getModulePassManager().run(mod, pb)
        return ("ok", bytes(tm.emit_object(mod)))
    except RuntimeError as e:
        return ("codegen", str(e).strip())


def _read(f, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def main() -> None:
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                         # anything else printed goes to stderr, not into the replies
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    while True:
        try:
            n, = struct.unpack("<Q", _read(inp, 8))
            req = pickle.loads(_read(inp, n))
        except EOFError:
            return
        reply = pickle.dumps(handle(llvm, req))
        out.write(struct.pack("<Q", len(reply)) + reply)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
