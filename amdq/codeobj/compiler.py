"""LLVM IR text -> AMDGPU code object (ET_REL, code object v5) through llvmlite's AMDGPU backend."""
from __future__ import annotations

import functools
import re
import threading

from ..errors import CompileError
from ..hw.targets import get_target

TRIPLE = "amdgcn-amd-amdhsa"
_COV_FLAG = '!{i32 1, !"amdhsa_code_object_version", i32 500}'
_lock = threading.Lock()      # LLVM's context is not safe to use from two threads at once


@functools.cache
def _target_machine(arch: str, opt: int):
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    t = llvm.Target.from_triple(TRIPLE)
    return t.create_target_machine(cpu=arch, features="", opt=opt, reloc="pic", codemodel="default")


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


def _bind_locally(mod) -> None:
    """Give defined globals with default visibility protected visibility: a code object is loaded on
    its own, so nothing can preempt them, and their addresses need no GOT (no GOTPCREL relocations)."""
    for v in list(mod.global_variables) + list(mod.functions):
        if not v.is_declaration and v.visibility.name == "default" and v.linkage.name not in ("internal", "private"):
            v.visibility = "protected"


def compile(llvm_ir: str, arch: str = "gfx1100", opt: int = 2) -> bytes:
    """Compile LLVM IR for `arch`; returns a relocatable AMDGPU ELF code object (load it with Device.load)."""
    import llvmlite.binding as llvm
    tgt = get_target(arch)
    if not isinstance(llvm_ir, str):
        raise TypeError(f"compile takes LLVM IR text, not {type(llvm_ir).__name__}")
    with _lock:
        tm = _target_machine(tgt.arch, opt)
        try:
            mod = llvm.parse_assembly(_with_defaults(llvm_ir))
            mod.verify()
        except RuntimeError as e:
            raise CompileError(f"LLVM rejected the IR for {tgt.arch}: {str(e).strip()}") from None
        mod.triple = TRIPLE
        _bind_locally(mod)
        try:
            if opt:
                pto = llvm.create_pipeline_tuning_options(speed_level=opt)
                pb = llvm.create_pass_builder(tm, pto)
                pb.getModulePassManager().run(mod, pb)
            return bytes(tm.emit_object(mod))
        except RuntimeError as e:
            raise CompileError(f"LLVM failed to generate code for {tgt.arch}: {str(e).strip()}") from None
