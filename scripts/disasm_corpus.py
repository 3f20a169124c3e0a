"""amdq's disassembler against llvm-mc-19 over LLVM 19's own AMDGPU disassembler test corpus.

The corpus (llvm/test/MC/Disassembler/AMDGPU/*.txt) is fetched by scripts/fetch_llvm_corpus.sh; it is data
read at run time, never committed. For each target, files are selected by their RUN lines (-mcpu, -mattr
wavefront size); every byte line goes to llvm-mc-19 as its own [...] group (many lines per invocation,
separated by a sentinel instruction so outputs map back to lines) and to amdq.tools.disasm.disassemble.
Lines llvm-mc rejects ("invalid instruction encoding") leave the denominator. Texts are compared after
normalizing whitespace and comments only.

    python scripts/disasm_corpus.py [--target gfx1100-w32 ...] [--corpus DIR] [--examples N]

Prints a report per target, then one JSON line with the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amdq.hw import isa  # noqa: E402


@dataclass(frozen=True)
class Target:
    """One llvm-mc configuration: the -mcpu it runs with, the RUN-line CPUs it selects, wavefront size."""
    name: str
    mcpu: str
    family: re.Pattern
    wave64: bool
    isa: str       # gfx major in amdq.hw.isa.ARCHS terms; amdq disassembles the target only if it is there


# CPU families per LLVM's AMDGPU processor table (llvm/docs/AMDGPUUsage.rst, "Processors").
TARGETS = {t.name: t for t in [
    Target("gfx1100-w32", "gfx1100", re.compile(r"gfx110[0-3]$"), False, "gfx11"),
    Target("gfx1100-w64", "gfx1100", re.compile(r"gfx110[0-3]$"), True, "gfx11"),
    Target("gfx1150", "gfx1150", re.compile(r"gfx115[0-2]$"), False, "gfx11"),
    Target("gfx1200", "gfx1200", re.compile(r"gfx120[01]$"), False, "gfx12"),
    Target("gfx942", "gfx942", re.compile(r"gfx9\d[0-9a-c]$"), True, "gfx9"),
]}
SENTINEL = "s_mov_b32 s101, 0x5eed1e55"     # separates lines in one llvm-mc run; valid on every target
BATCH = 4000
BYTE = re.compile(r"0x[0-9a-fA-F]{1,2}$")


def corpus_dir(path: str | os.PathLike | None = None) -> Path:
    """The corpus directory: `path`, else $AMDQ_LLVM_CORPUS/AMDGPU, else ~/.cache/amdq/llvm-corpus/AMDGPU."""
    if path:
        return Path(path)
    root = os.environ.get("AMDQ_LLVM_CORPUS") or Path.home() / ".cache" / "amdq" / "llvm-corpus"
    return Path(root) / "AMDGPU"


def llvm_mc() -> str | None:
    for cand in ("llvm-mc-19", "/usr/lib/llvm-19/bin/llvm-mc"):
        p = shutil.which(cand) or (cand if os.path.exists(cand) else None)
        if p:
            return p
    return None


# ---------------------------------------------------------------- corpus files

def strip_comment(line: str) -> str:
    for mark in ("#", "//", ";"):
        line = line.split(mark, 1)[0]
    return line


def byte_line(line: str) -> bytes | None:
    """The bytes of a corpus data line ('0x01,0x02 ...', optionally in [...], trailing comment), else None."""
    s = strip_comment(line).strip()
    if s.startswith("[") and s.endswith("]"):
        s = s[1:-1]
    toks = [t for t in re.split(r"[,\s]+", s) if t]
    if not toks or not all(BYTE.match(t) for t in toks):
        return None
    return bytes(int(t, 16) for t in toks)


def run_configs(text: str) -> list[tuple[str, bool | None]]:
    """(mcpu, wave64) of each llvm-mc RUN line; wave64 None when -mattr does not set the wavefront size."""
    runs, cur = [], ""
    for line in text.splitlines():
        m = re.match(r"\s*(?:#|//|;)\s*RUN:(.*)$", line)
        if not m:
            continue
        cur += m.group(1)
        if cur.rstrip().endswith("\\"):
            cur = cur.rstrip()[:-1]
            continue
        if "llvm-mc" in cur:
            cpu = re.search(r"-?-mcpu[= ](\S+)", cur)
            attrs = ",".join(re.findall(r"-?-mattr[= ](\S+)", cur)).lower()
            wave64 = True if "+wavefrontsize64" in attrs else False if "+wavefrontsize32" in attrs else None
            if cpu:
                runs.append((cpu.group(1), wave64))
        cur = ""
    return runs


@dataclass
class Line:
    file: str
    lineno: int
    data: bytes


def selects(runs: list[tuple[str, bool | None]], t: Target) -> bool:
    default64 = t.mcpu.startswith("gfx9")      # gfx9 is wave64 only; gfx10+ default to wave32
    return any(t.family.match(cpu) and (default64 if w is None else w) == t.wave64 for cpu, w in runs)


def load(corpus: Path, t: Target) -> list[Line]:
    """Byte lines of the corpus files whose RUN lines run the target's CPU family at its wavefront size."""
    out = []
    for path in sorted(corpus.glob("*.txt")):
        text = path.read_text(errors="replace")
        if not selects(run_configs(text), t):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            data = byte_line(line)
            if data:
                out.append(Line(path.name, n, data))
    return out


# ---------------------------------------------------------------- the two disassemblers

def norm(s: str) -> str:
    """Whitespace collapsed, comments ('//' or ';' to end of line, '/* ... */') dropped."""
    s = re.sub(r"/\*.*?\*/", "", re.split(r"\s(?://|;)", " " + s, maxsplit=1)[0])
    return " ".join(s.split())


def mc_args(t: Target) -> list[str]:
    args = [llvm_mc() or "llvm-mc-19", "--disassemble", "-triple=amdgcn", f"-mcpu={t.mcpu}"]
    return args + (["-mattr=+wavefrontsize64"] if t.wave64 and not t.mcpu.startswith("gfx9") else [])


def sentinel_bytes(t: Target) -> tuple[str, str]:
    """(group text, disassembled text) of the sentinel instruction for the target."""
    out = subprocess.run([mc_args(t)[0], "-triple=amdgcn", f"-mcpu={t.mcpu}", "--show-encoding"], input=SENTINEL,
                         capture_output=True, text=True, check=True).stdout
    enc = re.search(r"encoding: (\[[^\]]*\])", out).group(1)
    return enc, norm(SENTINEL)


def llvm_texts(t: Target, lines: list[Line]) -> list[tuple[list[str] | None, bool]]:
    """Per line: llvm-mc's instruction texts (None: llvm-mc rejects the line) and whether its text carries a
    /* ... */ comment (LLVM flags an operand as invalid for its register class or an immediate as invalid)."""
    sent, sent_text = sentinel_bytes(t)
    res: list[tuple[list[str] | None, bool]] = []
    for lo in range(0, len(lines), BATCH):
        chunk = lines[lo:lo + BATCH]
        src = "".join("[" + ",".join(f"0x{b:02x}" for b in ln.data) + "]\n" + sent + "\n" for ln in chunk)
        p = subprocess.run(mc_args(t), input=src, capture_output=True, text=True)
        bad = {int(m.group(1)) for m in re.finditer(r"^<stdin>:(\d+):\d+: (?:warning|error): ", p.stderr, re.M)}
        groups, flags, cur, flag = [], [], [], False
        for raw in p.stdout.splitlines():
            s = norm(raw)
            if not s or s.startswith(".text"):
                continue
            if s == sent_text:
                groups.append(cur)
                flags.append(flag)
                cur, flag = [], False
            else:
                cur.append(s)
                flag |= "/*" in raw
        if len(groups) != len(chunk) or any(2 * k + 2 in bad for k in range(len(chunk))):
            raise RuntimeError(f"llvm-mc output does not map back to lines ({len(groups)} groups for {len(chunk)} lines)"
                               f"\n{p.stderr[:2000]}")
        res += [(None if 2 * k + 1 in bad else g, f) for k, (g, f) in enumerate(zip(groups, flags))]
    return res


def family(t: Target) -> str:
    """The ISA family amdq disassembles a target's lines with (amdq.tools.disasm reads rdna3, rdna4, cdna3)."""
    return {"gfx11": "rdna3", "gfx12": "rdna4", "gfx9": "cdna3"}.get(t.isa, "rdna3")


def amdq_texts(data: bytes, wave64: bool, arch: str = "rdna3") -> tuple[list[str], str | None]:
    """amdq's instruction texts for a line, or the exception the disassembler raised."""
    from amdq.tools.disasm import disassemble
    try:
        return [norm(t) for _, _, t in disassemble(data, arch, 0, wave64)], None
    except Exception as e:  # noqa: BLE001 - any exception is a finding
        return [], f"{type(e).__name__}: {e}"


def encoding_of(data: bytes, off: int, wave64: bool, arch: str = "rdna3") -> str:
    """Encoding family of the instruction at `off` as amdq decodes it, or '<name> (undecoded)'."""
    from amdq.hw.isa.syntax import decoder
    try:
        i = decoder(arch)(data, off, 0, wave64)
        return i.enc + ("_DPP" if i.dpp is not None else "")
    except Exception:  # noqa: BLE001
        if off + 4 > len(data):
            return "? (undecoded)"
        e = isa.match(int.from_bytes(data[off:off + 4], "little"), arch)
        return f"{e.name if e else '?'} (undecoded)"


def _shape(tok: str) -> str:
    return re.sub(r"\d+", "N", re.sub(r"0x[0-9a-fA-F]+", "X", tok))


def diff_kind(ours: str, ref: str) -> str:
    """A generalized description of the first difference between two instruction texts."""
    om, _, orest = ours.partition(" ")
    rm, _, rrest = ref.partition(" ")
    if om != rm:
        k = 0
        while k < min(len(om), len(rm)) and om[k] == rm[k]:
            k += 1
        k = max(om.rfind("_", 0, k + 1), 0)
        return f"mnemonic '{om[k:]}' vs '{rm[k:]}'"
    ot, rt = re.split(r",\s*|\s+", orest), re.split(r",\s*|\s+", rrest)
    for a, b in zip(ot, rt):
        if a != b:
            return f"operand '{_shape(a)}' vs '{_shape(b)}'"
    return f"operand count {len(ot)} vs {len(rt)}"


@dataclass
class Report:
    target: str
    lines: int = 0
    accepted: int = 0
    identical: int = 0
    different: int = 0
    exceptions: int = 0
    flagged: int = 0          # accepted lines whose LLVM text has a /* invalid ... */ comment
    supported: bool = True
    note: str = ""
    by_encoding: Counter = field(default_factory=Counter)
    by_kind: Counter = field(default_factory=Counter)
    by_mnemonic: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)
    exception_examples: list = field(default_factory=list)

    def summary(self) -> dict:
        d = {k: getattr(self, k) for k in ("lines", "accepted", "flagged", "identical", "different",
                                              "exceptions")}
        d["identical_pct"] = round(100 * self.identical / self.accepted, 2) if self.accepted and self.supported else None
        if not self.supported:
            d.update(identical=None, different=None, exceptions=None, note=self.note)
        return d


def run_target(t: Target, corpus: Path, examples: int = 3) -> Report:
    """Compare amdq with llvm-mc over the target's byte lines."""
    rep = Report(t.name)
    lines = load(corpus, t)
    rep.lines = len(lines)
    ref = llvm_texts(t, lines)
    rep.accepted = sum(r is not None for r, _ in ref)
    rep.flagged = sum(r is not None and f for r, f in ref)
    if t.isa not in isa.ARCHS:
        rep.supported, rep.note = False, f"amdq has no {t.isa} decoder (amdq.hw.isa.ARCHS = {sorted(isa.ARCHS)})"
        return rep
    for ln, (r, _) in zip(lines, ref):
        if r is None:
            continue
        ours, exc = amdq_texts(ln.data, t.wave64, family(t))
        where = f"{ln.file}:{ln.lineno}"
        if exc:
            rep.exceptions += 1
            if len(rep.exception_examples) < 20:
                rep.exception_examples.append(f"{where}: {exc}")
            continue
        if ours == r:
            rep.identical += 1
            continue
        rep.different += 1
        k, off = 0, 0
        while k < min(len(ours), len(r)) and ours[k] == r[k]:
            off += _size(ln.data, off, t.wave64, family(t))
            k += 1
        o, f = (ours[k] if k < len(ours) else "<none>"), (r[k] if k < len(r) else "<none>")
        enc = encoding_of(ln.data, off, t.wave64, family(t))
        kind = f"{enc}: {diff_kind(o, f)}" if not o.startswith(".long") else f"{enc}: not decoded"
        rep.by_encoding[enc] += 1
        rep.by_kind[kind] += 1
        rep.by_mnemonic[f.split(" ")[0]] += 1
        ex = rep.examples.setdefault(kind, [])
        if len(ex) < examples:
            ex.append(f"{where}: [{','.join(f'0x{b:02x}' for b in ln.data)}] amdq '{o}' llvm '{f}'")
    return rep


def _size(data: bytes, off: int, wave64: bool, arch: str = "rdna3") -> int:
    from amdq.hw.isa.syntax import decoder
    try:
        return decoder(arch)(data, off, 0, wave64).size
    except Exception:  # noqa: BLE001
        return 4


def print_report(rep: Report, top: int) -> None:
    s = rep.summary()
    print(f"== {rep.target}: {s['lines']} lines, {s['accepted']} accepted by llvm-mc", end="")
    if not rep.supported:
        print(f"; not compared: {rep.note}")
        return
    print(f", {s['identical']} identical ({s['identical_pct']}%), {s['different']} different, "
          f"{s['exceptions']} amdq exceptions; {s['flagged']} accepted lines carry an LLVM /* invalid */ comment")
    for e in rep.exception_examples[:top]:
        print(f"   EXCEPTION {e}")
    if rep.by_encoding:
        print("   by encoding: " + ", ".join(f"{k} {v}" for k, v in rep.by_encoding.most_common(top)))
        print("   by mnemonic: " + ", ".join(f"{k} {v}" for k, v in rep.by_mnemonic.most_common(top)))
    for kind, n in rep.by_kind.most_common(top):
        print(f"   {n:6d}  {kind}")
        for e in rep.examples[kind]:
            print(f"              {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: all")
    ap.add_argument("--corpus", help="corpus directory (default: $AMDQ_LLVM_CORPUS/AMDGPU)")
    ap.add_argument("--top", type=int, default=15, help="difference categories shown per target")
    ap.add_argument("--examples", type=int, default=2, help="examples shown per category")
    a = ap.parse_args(argv)
    corpus = corpus_dir(a.corpus)
    if not any(corpus.glob("*.txt")):
        print(f"no corpus in {corpus}: run scripts/fetch_llvm_corpus.sh", file=sys.stderr)
        return 2
    if not llvm_mc():
        print("llvm-mc-19 not installed (apt-get install llvm-19)", file=sys.stderr)
        return 2
    res = {}
    for name in a.target or list(TARGETS):
        t0 = time.perf_counter()
        rep = run_target(TARGETS[name], corpus, a.examples)
        print_report(rep, a.top)
        res[name] = rep.summary() | {"seconds": round(time.perf_counter() - t0, 1),
                                     "top": [[k, n] for k, n in rep.by_kind.most_common(5)]}
    print(json.dumps({"corpus": str(corpus), "targets": res}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
