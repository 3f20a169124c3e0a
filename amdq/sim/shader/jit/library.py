"""The fast tier's shared functions, compiled once per wave size and host, and called by every region.

A region's first-tier module calls functions every region needs alike: the tile loop (`tiles`), the translated-range
search (`lookup`), the NaN fix-ups, the lane-by-lane loads and stores, and the global and LDS accesses' functions
(block.ModuleGen: `gm_*`, `dsl_*`, `dss`). They used to be compiled into each region's module, ~1,500 lines of IR
(~11 ms of instruction selection) in a region that uses the global accesses. Here they are one module per wave size,
compiled once (LLVM, as a region; cached on disk like one, under its own key) and placed once per process; a region
declares what it calls, under the library's names (`<name>_l<lanes>w<width>`: the wave size and the lanes per vector
operation a function was made for are in its name, so a linked region's imports say which library binds them), and
loader.py binds those calls when the region is placed (this module registers `address` with compiled.py, which
imports nothing of it: compiled.importable). The second tier keeps its own
copies: it inlines them.
"""
from __future__ import annotations

import re
import threading
import time

from . import compiled
from .block import _DEFINED, VERSION, ModuleGen, _decls, _functions
from .ir import lanes_per_op

HELPERS = ("lookup", "tiles", "nan2_fix", "nanfma_fix", "gather_lanes", "scatter_lanes")     # block.ModuleGen.header
GLOBAL = tuple((f"gm_{'w' if write else 'r'}{words}{'s' if sb else 'v'}", words, write, sb)
               for write in (False, True) for words in (1, 2, 3, 4) for sb in (False, True))    # ModuleGen._gm
DS_LOADS = tuple((f"dsl_{nw}_{n}", nw, n) for nw, n in ((1, 1), (2, 1), (3, 1), (4, 1), (1, 2), (2, 2)))   # _ds
NAMES = (*HELPERS, *(g[0] for g in GLOBAL), *(d[0] for d in DS_LOADS), "dss")
_CALLED = re.compile(r"@(" + "|".join(NAMES) + r")(?=\()")
_SYMBOL = re.compile(r"^(\w+)_l(32|64)w(8|16)$")
WIDTHS = (8, 16)                                       # ir.lanes_per_op's choices

_lock = threading.RLock()
_made: dict[tuple, tuple[str, dict[str, str]]] = {}   # flavor -> (the module's text, each symbol's declaration)
_placed: dict[tuple, dict[str, int]] = {}             # flavor -> each symbol's address (this process)
_failed: dict[tuple, str] = {}                        # flavor -> why it could not be made (until forget())
stats = {"compiled": 0, "compile_seconds": 0.0, "loaded": 0}


def flavor(lanes: int) -> tuple[int, int]:
    """(wave size, lanes per vector operation now): what a library's code depends on besides the JIT's version."""
    return lanes, min(lanes_per_op(), lanes)


def symbol(name: str, lanes: int, width: int | None = None) -> str:
    """The library's name of shared function `name` made for waves of `lanes` (`width` lanes per vector operation:
    now's by default)."""
    return f"{name}_l{lanes}w{width or flavor(lanes)[1]}"


def rename(text: str, lanes: int) -> str:
    """IR text with its calls of (and definitions of) the shared functions under the library's names (now's width)."""
    suffix = symbol("", lanes)
    return _CALLED.sub(lambda m: f"@{m.group(1)}{suffix}", text)


def symbols(lanes: int, width: int | None = None) -> list[str]:
    return [symbol(n, lanes, width) for n in NAMES]


def imports() -> frozenset[str]:
    """Every name a region may leave for the library to bind (loader.link's imports)."""
    return _IMPORTS


_IMPORTS = frozenset(symbol(n, lanes, min(w, lanes)) for n in NAMES for lanes in (32, 64) for w in WIDTHS)


def _make(lanes: int) -> tuple[str, dict[str, str]]:
    """The library's module for waves of `lanes` at now's width (every function exported, under its library name),
    and the declaration of each of its functions (what a region that calls it says)."""
    fl = flavor(lanes)
    got = _made.get(fl)
    if got is None:
        gen = ModuleGen(lanes, 0)                   # (no library: it makes the shared functions' texts)
        head = gen.header()
        for name, words, write, sb in GLOBAL:
            gen._use(name, lambda name=name, words=words, write=write, sb=sb: gen._gm_text(name, words, write, sb))
        for name, nw, n in DS_LOADS:
            gen._use(name, lambda name=name, nw=nw, n=n: gen._dsl_text(name, nw, n))
        gen._use("dss", gen._dss_text)
        text = head.rstrip("\n") + "\n" + "".join(t.rstrip("\n") + "\n" for t in gen.shared.values())
        text = rename(text.replace("define internal ", "define "), lanes)
        decls = {}
        for m in _DEFINED.finditer(text):
            line = text[m.start():text.index("\n", m.start())]
            decls[m.group(1)] = "declare" + line[len("define"):line.rindex(")") + 1]
        if set(decls) != set(symbols(lanes)):
            raise RuntimeError(f"the JIT library defines {sorted(decls)}, not {sorted(symbols(lanes))}")
        got = _made[fl] = text, decls
    return got


def declarations(text: str, lanes: int) -> str:
    """The declarations of the library functions `text` (renamed) calls."""
    decls = _make(lanes)[1]
    called = set(_RENAMED.findall(text))
    return "".join(decls[s] + "\n" for s in decls if s in called)


_RENAMED = re.compile(r"@(\w+_l(?:32|64)w(?:8|16))\(")


def text_parts(lanes: int, parts: int) -> list[str]:
    """The library's module in up to `parts` modules (its functions shared out by size; one calls another's
    through its declaration), compiled on as many threads and linked together."""
    text, decls = _make(lanes)
    if parts <= 1:
        return [text]
    funcs = _functions(text)
    out, load = [[] for _ in range(parts)], [0] * parts
    for name in sorted(funcs, key=lambda n: -funcs[n].count("\n")):
        k = min(range(parts), key=load.__getitem__)
        out[k].append(name)
        load[k] += funcs[name].count("\n")
    head = _decls(text)
    texts = []
    for mine in out:
        if not mine:
            continue
        body = "".join(funcs[n] for n in mine)
        called = set(_RENAMED.findall(body)) - set(mine)
        texts.append(head + "".join(decls[s] + "\n" for s in decls if s in called) + body)
    return texts


def key(lanes: int, width: int | None = None) -> str:
    """The library's key (compiled.py's cache: memory and disk) for waves of `lanes` at `width` lanes per vector
    operation (now's by default) on this host and JIT version."""
    return compiled.tier_key(f"library|{lanes}|w{width or flavor(lanes)[1]}", str(VERSION), compiled.FAST)


def address(name: str) -> int:
    """The address of library function `name` (a symbol() name) in this process: its library placed from memory,
    from the disk cache or compiled now (at now's width only). LookupError: not a library function, or its library
    cannot be made."""
    m = _SYMBOL.match(name)
    if m is None or m.group(1) not in NAMES:
        raise LookupError(f"{name} is not a JIT library function")
    fl = int(m.group(2)), int(m.group(3))
    placed = _placed.get(fl)
    if placed is None:
        placed = _place(*fl)
    return placed[name]


def _place(lanes: int, width: int) -> dict[str, int]:
    with _lock:
        placed = _placed.get((lanes, width))
        if placed is not None:
            return placed
        why = _failed.get((lanes, width))
        if why is not None:             # (made once and failed: every region needing it is interpreted, no retry)
            raise LookupError(why)
        names = symbols(lanes, width)

        def make(parts: int | None = None) -> list[str]:
            if flavor(lanes)[1] != width:
                raise LookupError(f"made at {width} lanes per operation, {flavor(lanes)[1]} now")
            return text_parts(lanes, parts or compiled.compile_threads())
        try:
            t = time.perf_counter()
            c, made = compiled.get_library(key(lanes, width), names, make)
        except Exception as e:          # (LLVM failed, or a library that does not load: its regions cannot either)
            why = _failed[(lanes, width)] = f"the JIT library for wave{lanes} ({width} lanes an operation): {e}"
            raise LookupError(why) from None
        if made:
            stats["compiled"] += 1
            stats["compile_seconds"] += time.perf_counter() - t
        else:
            stats["loaded"] += 1
        placed = _placed[(lanes, width)] = {n: c.address(n) for n in names}
        return placed


def ready(lanes=(32, 64)) -> float:
    """Place the libraries of these wave sizes now (from disk, or compiled): the seconds their compiles took (0 when
    they were placed already or loaded), what a machine's first JIT compile pays once."""
    before = stats["compile_seconds"]
    for n in lanes:
        address(symbol("lookup", n))
    return stats["compile_seconds"] - before


def preload() -> None:
    """Place the libraries the disk cache holds (no compile, no LLVM): what a warm process's first region or image
    binds (prepare()'s read-ahead does it in the background)."""
    if not compiled.host_known():       # (its key needs LLVM then: the first region's load starts it anyway)
        return
    for n in (32, 64):
        if flavor(n) not in _placed and compiled.available(key(n)):
            try:
                address(symbol("lookup", n))
            except LookupError:
                pass


def forget() -> None:
    """Nothing placed (what a new process starts with; compiled.MEMORY is cleared with it)."""
    with _lock:
        _placed.clear()
        _failed.clear()


compiled.importable(_IMPORTS, address)     # (what compiled.py lets a region call, and how it binds the calls)
