"""Write docs/reference.md: every public name of amdq with its signature and the first line of its docstring,
the error classes as a tree, the CLI's commands with their help, and the environment variables the package
reads (each described below; a variable the code reads that this table does not describe is an error, and
tests/test_reference.py checks the committed file is what this script writes).

    python scripts/gen_reference.py [--check]
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import amdq  # noqa: E402
from amdq import errors  # noqa: E402
from amdq.cli import build_parser  # noqa: E402

OUT = ROOT / "docs" / "reference.md"

# What each environment variable the package reads does (the names are found in the code).
ENV = {
    "DEV": "the device `open_device()` opens: `[IFACE+]AMD[:ARCH]` or `SIM[:ARCH]`",
    "AMD_AQL": "1: an AQL compute queue, 0: PM4 (default: AQL on multi-die targets)",
    "AMD_DISABLE_SDMA": "1: no copy engine; device buffers stay CPU-visible and copies use the CPU",
    "AMDQ_WAIT_TIMEOUT_MS": "how long a wait without progress lasts before GPUTimeout (default 30000)",
    "AMDQ_RING_BYTES": "the compute ring's size (default: the interface's)",
    "AMDQ_SDMA_RING_BYTES": "the copy ring's size (default: the interface's)",
    "AMDQ_TIMELINE_START": "the first timeline value (to test rollover)",
    "AMDQ_TRACE": "a Chrome/Perfetto trace of every device the program opens, written at exit",
    "AMDQ_CACHE": "the cache directory (default ~/.cache/amdq): compiled code, simulated state",
    "AMDQ_COMPILE_CACHE": "0: compile every time (no on-disk cache)",
    "AMDQ_CLANG": "the clang for OpenCL C and HIP (default: the newest clang-NN/clang >= 19 on PATH)",
    "AMDQ_LLC": "the llc for LLVM IR with inline assembly (default: llc-NN/llc on PATH)",
    "AMDQ_DEBUG": "the CLI prints tracebacks instead of one-line errors",
    "AMDQ_FIRMWARE_PATH": "directories searched first for GPU firmware (os.pathsep-separated)",
    "AMDQ_FIRMWARE_CACHE": "where scripts/fetch_firmware.sh unpacks firmware (default ~/.cache/amdq)",
    "AMDQ_SYSFS_PCI": "the sysfs PCI device directory the PCI interface scans (default /sys/bus/pci/devices)",
    "AMDQ_SIM_JIT": "unset or `1` (the default): the shader core interprets code first and runs the code that gets hot as host code compiled by llvmlite (in the background); `sync`: every kernel compiled before its first use; `0`: the interpreter only (the reference)",
    "AMDQ_SIM_JIT_HELPER": "`0`: the shader JIT's background compiles run in this process (on its worker thread) "
                           "instead of in the compile helper, a child process (the default where there is a second "
                           "core and a disk cache)",
    "AMDQ_SIM_JIT_PERFMAP": "`1`: name the shader JIT's compiled functions for `perf` in `/tmp/perf-<pid>.map`",
    "AMDQ_SIM_JIT_THREADS": "host threads the shader JIT's compiled blocks may run on (default: up to 2)",
    "AMDQ_SIM_JIT_WIDTH": "lanes per vector operation in the shader JIT's code: `16` (the default on hosts with AVX-512) "
                          "or `8` (the default elsewhere); part of every compiled region's key",
    "AMDQ_SIM_JIT_CACHE": "where the shader JIT keeps compiled code and, per code page, records of what it compiled "
                          "there and one image of the code a process ran there (default $AMDQ_CACHE/jit; `0` keeps it "
                          "in memory only)",
    "AMDQ_SIM_MODE": "`async` (default: the simulated GPU on a worker thread; a host thread waiting on the simulated "
                     "KFD runs slices itself while the worker is not in one) or `sync` (on the host's threads)",
    "AMDQ_SIM_INJECT": "simulator fault injections, `kind[:key=value...],...`",
    "AMDQ_SIM_STATE": "where simulated PCI functions keep their state between processes",
    "AMDQ_SIM_SMALL_BAR": "1: the simulated PCI function has a 256 MiB BAR0",
    "AMDQ_SIM_XGMI": "the XGMI hive simulated gfx942 functions join",
    "AMDQ_SIM_USB_TIMING": "the simulated USB link's latency and bandwidth model",
    "AM_RESET": "1: the AM driver boots fully (no partial boot)",
    "AM_DEBUG": "AM driver logging, 1 (firmware loaded) to 4 (every register access)",
    "AM_POWER_LIMIT": "the power limit (W) the AM driver asks the SMU for",
}

CLASSES = [("Device", amdq.Device), ("Program", amdq.Program), ("Kernel", amdq.Kernel), ("Launch", amdq.Launch),
           ("LaunchRecord", amdq.LaunchRecord), ("Buffer", amdq.Buffer), ("Array", amdq.Array), ("LDS", amdq.LDS)]


def first_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def members(cls) -> list[tuple[str, object]]:
    out = []
    for name in sorted(n for n in dir(cls) if not n.startswith("_")):
        attr = inspect.getattr_static(cls, name)
        out.append((name, attr))
    return out


def env_read() -> set[str]:
    """The environment variables the package's code reads."""
    names = set()
    for p in (ROOT / "amdq").rglob("*.py"):
        for m in re.finditer(r'(?:environ(?:\.get)?\(|environ\[|getenv\()\s*"([A-Z][A-Z0-9_]+)"', p.read_text()):
            names.add(m.group(1))
    return names


def render() -> str:
    lines = ["# amdq reference", "",
             "Every public name, generated by `scripts/gen_reference.py` from the code's signatures and docstrings "
             "(`tests/test_reference.py` keeps it current). The README shows them in use.", "",
             "## The package", ""]
    for name in amdq.__all__:
        obj = getattr(amdq, name)
        if inspect.ismodule(obj):
            continue
        if inspect.isclass(obj):
            lines.append(f"- `amdq.{name}` (class, below): {first_line(obj)}")
        elif callable(obj):
            lines.append(f"- `amdq.{name}{signature(obj)}`: {first_line(obj)}")
        else:
            lines.append(f"- `amdq.{name}`: {type(obj).__name__} of {len(obj)} entries" if hasattr(obj, "__len__")
                         else f"- `amdq.{name}`")
    lines += ["- `amdq.errors`: the exceptions (below)", f"- `amdq.__version__`: `{amdq.__version__}`", ""]
    for cname, cls in CLASSES:
        lines += [f"## `amdq.{cname}`", "", first_line(cls), ""]
        for name, attr in members(cls):
            if isinstance(attr, property):
                lines.append(f"- `.{name}` (property): {first_line(attr.fget) or 'see the class'}")
            elif isinstance(attr, (staticmethod, classmethod)):
                fn = attr.__func__
                lines.append(f"- `.{name}{signature(fn)}`: {first_line(fn)}")
            elif callable(attr):
                lines.append(f"- `.{name}{signature(attr)}`: {first_line(attr)}")
            else:
                lines.append(f"- `.{name}`")
        lines.append("")
    lines += ["## Errors (`amdq.errors`)", "", "Every error derives from `AmdqError`; a class named under another "
              "derives from it.", ""]
    classes = [c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, errors.AmdqError)]

    def tree(base, depth):
        for c in sorted((c for c in classes if base in c.__bases__), key=lambda c: c.__name__):
            extra = [b.__name__ for b in c.__bases__ if b is not base and b.__module__ == "builtins"]
            also = f" (also a {', '.join(extra)})" if extra else ""
            lines.append(f"{'  ' * depth}- `{c.__name__}`{also}: {first_line(c)}")
            tree(c, depth + 1)
    lines.append(f"- `AmdqError`: {first_line(errors.AmdqError)}")
    tree(errors.AmdqError, 1)
    lines += ["", "## The command line (`amdq`)", ""]
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for choice in sub._choices_actions:
        p = sub.choices[choice.dest]
        usage = " ".join(p.format_usage().split())[len("usage: "):]
        lines.append(f"- `{usage}`: {choice.help}")
    lines += ["", "## Environment variables", "", "| variable | what it does |", "|---|---|"]
    for k in sorted(ENV):
        lines.append(f"| `{k}` | {ENV[k]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/reference.md is not what this writes")
    a = ap.parse_args()
    missing = sorted(env_read() - set(ENV))
    if missing:
        print(f"gen_reference: describe {', '.join(missing)} in ENV", file=sys.stderr)
        return 1
    text = render()
    if a.check:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
