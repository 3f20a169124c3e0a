"""The glue between the scheduler and compiled blocks: find the block at a PC, call it, handle its misses.

`step(batch, icache, sel, pc, k, limit, budget)` is the scheduler's one hook (core.Batch.run): it runs the compiled
block holding `pc` for the waves `sel` (k of them), at most up to `limit` (the lowest PC of the other runnable
waves, so waves still merge where the interpreter would merge them), then goes on in compiled code from block to
block of the region (block.CHAIN) while every wave of the call is at one PC there, below `limit`, and fewer than
`budget` instructions (the scheduler's remaining max_steps) ran; it returns (instructions executed, bytes the PC
advanced, whether the PCs were set per wave, wave-instructions), or None when the interpreter must take this PC.

Candidates and regions: code is searched for blocks once the interpreter spent long enough in it (the tiering
comment below): the blocks reachable from a PC (straight-line code, fall-through and branch targets, up to
MAX_BLOCKS), fetched and decoded through the ICache (so code comes through the memory model as the interpreter's
does; decoded only, the interpreter builds its steps when it runs them): a candidate. The interpreter goes on
running it and heats it; once hot, the blocks of it that ran are compiled together as a region, keyed by their bytes
(compiled.py), and a region that stays hot is compiled again at -O2. What is on disk is used without compiling, and
what an earlier process compiled is found without a search or heat (records.py, the warm start below). A
candidate remembers the ICache lines its search read; after an instruction-cache invalidate it is revalidated line
by line, the ICache's rule, and thrown away with its regions when any byte changed.

Instructions are translated only where the family's handler has RDNA3's semantics (SHARED: one rule per family,
RDNA3, RDNA4, CDNA3, CDNA4); anything else ends the block and runs in the interpreter.

Global memory goes through a table of translated ranges per batch (the memory model's `jit_span`: an
allocation of FlatMemory, a run of the GPU MMU). A lane outside the table stops the block before that
instruction (nothing of it done yet); the range is translated and the block resumes there, or, when the memory
model would fault, the interpreter runs the instruction and raises the same fault.
"""
from __future__ import annotations

import atexit
import bisect
from concurrent.futures import wait as wait_for
import ctypes
import os
import sys
import threading
from time import perf_counter as _clock

import numpy as np

from . import library, records
from .block import Block, ModuleGen, code_version, finish, shape, splits_before
from .compiled import (FAST, OPT, Compiled, available, compile_threads, get, helper_wanted, region_code, stored,
                       submit, tier_key)
from ..core import PAGE
from .ir import CTX, CTX_SLOTS, ENDS, GFX9_KEYS, RDNA4_KEYS, WAITS, WORK, kind_of

MAX_BLOCKS = 128
MAX_INSTS = 512          # per block
RANGES = 64              # translated ranges per table
FULL_F32 = 0x30          # MODE.FP_DENORM f32 field: denormals kept
ROUND_F32 = 0x3          # MODE.FP_ROUND f32 field (0: round to nearest even)
counts = {"parallel_calls": 0, "calls": 0, "chained": 0, "wave_instructions": 0, "misses": 0, "fallbacks": 0,
          "prefetched": 0}   # this process's (tests, benchmarks)


# On by default: code is interpreted until it gets hot (the tiering below), so the short kernels most runs are made
# of (the test suite, the demo) cost what the interpreter costs plus the lookups (1-3%), and hot code runs compiled
# (bench/kernels.py and bench/shader.py measure both).
DEFAULT = "1"


def enabled() -> bool:
    """Unset, 1 or sync: basic blocks that get hot run as compiled code; 0 (off/no/false): the interpreter only."""
    return os.environ.get("AMDQ_SIM_JIT", DEFAULT).strip().lower() not in ("0", "off", "no", "false", "")


def prepare() -> None:
    """A simulated GPU is being made: when earlier processes left records (records.py) on a host that cannot be
    written down (compiled.host_fingerprint: no /proc/cpuinfo), LLVM starts now on the JIT's worker thread, so a
    first dispatch that loads their code does not wait for the keys; on a known host their code loads without LLVM
    (loader.py), and a host not written down yet has no compiled code on disk (its records hold heat). The
    records of the pages the program's last run looked up are read ahead on a thread of their own (_prefetch), after
    the JIT library the disk cache holds is placed (library.preload)."""
    from . import compiled
    if not enabled() or not records.any_on_disk():
        return
    if not compiled.started() and compiled.host_fingerprint() is None:
        compiled.start()                # (elsewhere a host not written down has no code on disk: nothing to name)
    if not _prefetching:
        _prefetching.append(threading.Thread(target=_prefetch, name="amdq-jit-prefetch", daemon=True))
        _prefetching[0].start()


_prefetching: list = []                 # the prefetch thread, once started
PREFETCH_PAGES = 8                      # pages read ahead at most


def prefetched(timeout: float | None = None) -> None:
    """Wait until the read-ahead of prepare() has finished (if one started)."""
    if _prefetching:
        _prefetching[0].join(timeout)


def _prefetch() -> None:
    """Read ahead the records of the pages the last run of this program looked up (records.recent, in that order)
    and place their images, one page at a time under the lock (PREFETCHED): a program that runs the same kernels
    again finds them ready at its first dispatch of each (a JSON parse and an image load, ~0.5-1.5 ms a page, then
    spent while the host loads and uploads). Only reads: a page never looked up costs its memory, no write."""
    library.preload()                   # (what the images and regions placed below bind)
    folder = records.folder()
    for key in records.recent():
        with _lock:
            if len(PREFETCHED) >= PREFETCH_PAGES:
                return
            if key in SEEN_PAGES or key in PREFETCHED:
                continue
            PREFETCHED[key] = (folder, _read_page(key))


def _read_page(key: str) -> tuple | None:
    """The record of the page `key` (records.read_page) with its image placed (IMAGED: its regions in MEMORY, where
    _load_stored's loads find them); None when it has no record."""
    from . import compiled
    got = records.read_page(key)
    if got is not None:
        IMAGED[key] = compiled.load_image(key)
    return got


def synchronous() -> bool:
    """AMDQ_SIM_JIT=sync: a region is compiled before its first use (tests, benchmarks); otherwise it is compiled
    on the JIT's worker thread while the interpreter runs it, and used from the first lookup after it is ready."""
    return os.environ.get("AMDQ_SIM_JIT", DEFAULT).strip().lower() == "sync"


# ---------------------------------------------------------------- tiering: what is compiled, and when
#
# Interpreted steps heat the code they run: the time from one lookup to the next. Code no candidate holds heats its
# page, which is searched for blocks once it spent what a search costs; the blocks found from a PC (a Candidate) heat
# together: past what compiling the blocks that ran is expected to cost this process (ski rental: never more than twice
# the better of interpreting and compiling; HELPER_SHARE of it when the compile helper compiles), those blocks are
# compiled as one region in the background; the blocks that did not run stay with the interpreter (and are compiled
# the same way if they become hot), except where the helper compiles: then the whole candidate.
# A region is compiled again at -O2 (compiled.TIERS) once its compiled code ran as long as that second compile is
# expected to cost (this process: HELPER_SHARE of it with the helper).
# AMDQ_SIM_JIT=sync searches and compiles every candidate whole before its first use, and promotes at the same
# threshold, synchronously (tests, benchmarks).
GAP_SECONDS = 0.002      # at most this much of the time between two lookups is the interpreter's step (a longer gap
                         # spans a batch's or a dispatch's set-up, or the host between dispatches), per instruction
                         # it ran without asking
# QUIET: where nothing is compiled, a lookup tells the interpreter the PC before which it need not ask again while it
# runs straight on (no branch, taken or not; no barrier; the PC not below the one it asked at): the end of pc's block
# in a candidate, the end of the code page before a search. Code compiled meanwhile is taken at the next block. (The
# demo's first run from an empty cache asked 5,568 times, at every interpreted instruction, for ~2 us each; 464 now.)
COMPILE_SECONDS = (0.015, 0.0006)   # the fast tier's compile: seconds per region and per instruction (measured on
                                    # the suite's kernels, quiet: 18 ms for the smallest, 77 for the matmul's 104
                                    # instructions; scaled by this process's own compiles, see _expected)
SEARCH_SECONDS = 0.03    # a page's code is searched for blocks once the interpreter spent this long in it: a search
                         # decodes what did not run yet (~15 us an instruction, which the interpreter then reuses) and
                         # sorts it into blocks (~5 us), 5-15 ms a suite kernel; the blocks found inherit the page's
                         # heat, so a later search delays no compile. At 10 ms the quick suite (bench/kernels.py,
                         # nothing of it hot enough to compile) searched 13 times for 100-280 ms, at 30 ms 4-7 times
                         # for 16-29 ms
RAN_ONLY = False         # a search follows only the instructions the interpreter decoded (ran): it decodes nothing new,
                         # but a search made early in a kernel's first pass finds little, and the kernel ends up in
                         # small candidates (a 128x128 matmul: six of 1-2 blocks, its 72-instruction loop in none,
                         # 7.5 ms a launch against 4 ms with whole candidates); off until candidates can grow
START_SECONDS = 0.07     # LLVM's start in a process (import, target machine; measured: 50 + 20 ms)
OPT_RATIO = 8.0          # an -O2 compile costs about this many fast ones (bench/shader.py: jit_opt_ms / jit_compile_ms;
                         # 4 before the second tier compiled whole calls separately, block.WHOLE_CALL: 5-9 since)
HOT = 1.0                # compile once the interpreter spent HOT x the compile's expected seconds in the blocks
JUDGE_SECONDS = 0.02     # compiled code is compared with the interpreter after this long (and again after each window)
OPT_HOT = 1.0            # recompile at -O2 once the compiled code ran OPT_HOT x that compile's expected seconds


HELPER_SHARE = 0.2       # of a compile's expected seconds, what this process pays when the compile helper makes it
                         # (helper.py: the IR, LLVM's start and work run in another process, on another core; this one
                         # describes the region and places the result, and shares the machine with the helper). From
                         # an empty cache the demo's code then runs compiled from its third to fifth run (from its
                         # sixth to eighth at 1.0, and several of its candidates never)


def _charged(seconds: float) -> float:
    """What a background compile expected to take `seconds` costs this process."""
    return seconds * HELPER_SHARE if helper_wanted() else seconds


def _expected(insts: int) -> float:
    """Expected seconds of a fast-tier compile of a region of `insts` instructions: COMPILE_SECONDS's model (a part
    per region, a part per instruction), scaled by how this process's compiles compared with it (the prior counting
    as one region of 100 instructions)."""
    base, per = COMPILE_SECONDS
    from . import compiled
    st = compiled.stats
    prior = base + per * 100
    scale = (st["compile_seconds"] + prior) / (base * st["compiled"] + per * st["compiled_instructions"] + prior)
    return scale * (base + per * max(insts, 1))


class Part:
    """A compiled region: some blocks of a Candidate as one module (process-wide: every ICache holding the same
    bytes runs it); `seconds` of compiled code run so far decide its promotion to -O2."""

    def __init__(self, cand: "Candidate", blocks: list[Block], key: str, compiled: Compiled, tier: str):
        self.cand, self.family, self.wave64 = cand, cand.family, cand.wave64
        self.blocks, self.root, self.key = blocks, min(b.pc for b in blocks), key
        self.index = {b.pc: j for j, b in enumerate(blocks)}        # (the chain function numbers them so)
        self.floats = any(b.floats for b in blocks)
        self.insts = sum(len(b.insts) for b in blocks)
        self.vtop = max(b.max_vgpr for b in blocks)      # the registers its code may touch (WaveState.dirty_v, _s)
        self.stop = max(b.max_sgpr for b in blocks)
        self.seconds, self.job = 0.0, None
        self.noted = 0.0                # the seconds its page's record holds (earlier processes' included)
        self.off = False                # its code ran slower than the interpreter had: interpreted again
        self.use(compiled, tier)

    def use(self, compiled: Compiled, tier: str) -> None:
        from .compiled import FN
        self.compiled, self.tier = compiled, tier
        self.fns = {b.pc: compiled.fns[b.name] for b in self.blocks}
        self.chain = FN(compiled.address("chain"))     # block.CHAIN: on from block to block
        self.judged, self.work = self.seconds, 0       # compiled seconds and wave-instructions since this code came
        self.off = False                                # (new code: a new trial)
        self.cost = _charged(OPT_RATIO * _expected(self.insts)) if tier == FAST else float("inf")   # (its -O2 compile)


class Candidate:
    """The blocks found from one PC (_discover), or named by a record of an earlier process (records.py),
    process-wide like its Parts: the interpreter's heat in them, the blocks that ran, the regions compiled from them,
    the one being compiled, the regions a record names that are not loaded yet."""

    def __init__(self, family: str, wave64: bool, blocks: list[Block], lines: tuple, page: tuple[int, bytes]):
        self.family, self.wave64, self.blocks, self.lines = family, wave64, blocks, lines
        self.page = page                                 # (address, bytes) of the code page its search started in
        self.by_pc = {b.pc: b for b in blocks}
        self.heat, self.trigger = 0.0, 0.0               # interpreted seconds; the heat that acts next
        self.noted = 0.0                                 # the heat its page's record holds (records.py)
        self.work = 0                                    # interpreted wave-instructions (for heat / work)
        self.ran: set[int] = set()                       # blocks (their PCs) the interpreter ran
        self.left: set[int] = set(self.by_pc)            # blocks not compiled nor being compiled
        self.parts: list[Part] = []
        self.job = None                                  # (future of (key, Compiled), blocks) being compiled
        self.empty: list[int] = []                       # PCs its search read that hold no block
        self.stored: list[list[int]] = []                # regions (their blocks' PCs) a record names, not loaded yet
        self.carried: dict[tuple, float] = {}            # region (its PCs) -> compiled seconds of earlier processes
        self.loads: list = []                            # (future, blocks, load) of those being loaded on the worker

    def saw(self, blk: Block) -> None:
        self.ran.add(blk.pc)
        self.retrigger()

    def retrigger(self) -> None:
        """The heat at which the blocks that ran and are not compiled get compiled (HOT x the compile's cost, LLVM's
        start the first time: until it runs where the compiles run, in this process or in the compile helper)."""
        ran = self.ran & self.left
        start = 0.0 if _llvm_started() else START_SECONDS
        cost = _charged(_expected(sum(len(self.by_pc[p].insts) for p in ran)) + start)
        self.trigger = HOT * cost if ran else float("inf")


def _llvm_started() -> bool:
    """LLVM runs where this process's next compile runs: in this process, or in the compile helper once it started
    (with the helper LLVM's start was charged to every candidate: 14 ms of heat more each)."""
    from . import compiled
    if compiled.started():
        return True
    helper = sys.modules.get(f"{__package__}.helper")       # (not imported: not started; a warm process that
    return helper is not None and helper_wanted() and helper.started()     # loads everything never imports it)


def _key(family: str, wave64: bool, blocks: list[Block], tier: str = FAST) -> str:
    return tier_key(_code(family, wave64, blocks), code_version(), tier)


def _code(family: str, wave64: bool, blocks: list[Block]) -> str:
    """compiled.region_code of the region of `blocks`."""
    root = min(b.pc for b in blocks)
    insts = sorted((i for b in blocks for i in b.insts), key=lambda i: i.pc)
    return region_code(family, wave64, root, insts, [b.pc for b in blocks])


def _named(blocks: list[Block]) -> list[str]:
    """Name the blocks of a region as its module's functions are named (by offset from the region's root)."""
    root = min(b.pc for b in blocks)
    for b in blocks:
        b.name = f"blk_{b.pc - root:x}"
    return [b.name for b in blocks]


def _make_ir(cand: Candidate, blocks: list[Block]):
    """The region's IR, made when asked (blocks a record named are decoded then, from the candidate's lines)."""
    _named(blocks)
    root = min(b.pc for b in blocks)

    def make_ir(tier: str = FAST, parts: int | None = None) -> list[str]:
        gen = ModuleGen(64 if cand.wave64 else 32, root, whole=tier == OPT, library=library)
        for b in _decoded(cand, blocks):
            gen.add(b)
        return gen.text_parts(parts or (compile_threads() if tier == FAST else 1))
    return make_ir


def describe_region(cand: Candidate, blocks: list[Block]) -> dict:
    """A region as the compile helper rebuilds it (region_ir): its candidate's ISA family, wave size and code lines,
    and its blocks with their instructions' PCs, bytes and dead-SGPR flags, kinds, flags and registers."""
    return {"family": cand.family, "wave64": cand.wave64, "lines": [[line, data] for line, data in cand.lines],
            "blocks": [[b.pc, [[i.pc, bytes(i.raw), bool(i.dead_sdst)] for i in b.insts], b.kinds, b.floats,
                        b.gstores, b.lstores, b.max_vgpr, b.max_sgpr, b.barriers] for b in blocks]}


def region_ir(desc: dict):
    """make_ir(tier, parts) of a region describe_region described (its instructions decoded again from its lines
    and checked against the description, as a record's are)."""
    from types import SimpleNamespace
    blocks = [_stored_block(pc, [Stored(p, raw, dead) for p, raw, dead in insts], *rest)
              for pc, insts, *rest in desc["blocks"]]
    cand = SimpleNamespace(family=desc["family"], wave64=desc["wave64"],
                           lines=tuple((line, data) for line, data in desc["lines"]))
    return _make_ir(cand, blocks)


def _compile(cand: Candidate, blocks: list[Block], now: bool) -> None:
    """Compile `blocks` of cand as one region: at once (now, or when it is on disk) or in the background (the
    compile helper or the worker thread, which also name the key when this process has not named the host: that
    starts LLVM). Blocks holding an instruction the interpreter cannot build (the search only decodes) stay with the
    interpreter."""
    from . import compiled
    blocks = sorted(blocks, key=lambda b: b.pc)
    cand.left -= {b.pc for b in blocks}
    blocks = _buildable(cand, blocks)
    if not blocks:
        return
    make_ir = _make_ir(cand, blocks)
    names = [b.name for b in blocks]
    size = sum(len(b.insts) for b in blocks)
    if not now and not compiled.host_known():
        cand.job = (_submit((_code(cand.family, cand.wave64, blocks), code_version()), names, make_ir, FAST, size,
                            cand, blocks), blocks)
        return
    key = _key(cand.family, cand.wave64, blocks)
    if now or available(key):
        try:
            c = get(key, names, make_ir, FAST, size)
        except Exception:               # a compile failure leaves these blocks to the interpreter
            return
        _adopt(cand, blocks, key, c)
        return
    cand.job = (_submit(key, names, make_ir, FAST, size, cand, blocks), blocks)


def _submit(key, names: list[str], make_ir, tier: str, size: int, cand: Candidate, blocks: list[Block]):
    """The compile of a region of cand in the background: by the compile helper where it is wanted (from the region's
    description), else on the worker thread (compiled.submit)."""
    if helper_wanted():
        from . import helper
        return helper.submit(key, names, make_ir, tier, size, lambda: describe_region(cand, blocks))
    return submit(key, names, make_ir, tier, size)


def _buildable(cand: Candidate, blocks: list[Block]) -> list[Block]:
    """The blocks every instruction of which the interpreter builds a step for (its handler accepts the operands):
    the JIT translates only those, as the interpreter would run them."""
    from ..isa import for_isa
    isa = for_isa(cand.family)
    out = []
    for b in blocks:
        try:
            for i in _decoded(cand, [b])[0].insts:
                isa.build(i)
        except Exception:
            continue
        out.append(b)
    return out


def _adopt(cand: Candidate, blocks: list[Block], key: str, c: Compiled, tier: str = FAST,
           look: bool = True) -> None:
    """A region of cand is compiled (or loaded): it joins the parts (at -O2 at once when that is on disk already,
    unless `look` is False: it was looked for), and a new one is noted in its page's record for later processes."""
    part = Part(cand, blocks, key, c, tier)
    part.seconds = part.judged = part.noted = cand.carried.pop(tuple(b.pc for b in blocks), 0.0)
    cand.parts.append(part)
    cand.retrigger()
    if c.source == "compiled":
        _record(cand)
    elif tier == FAST and (look and available(_key_of(part)) or part.seconds >= OPT_HOT * part.cost):
        _promote(part)                  # (on disk already, or earlier processes' compiled time paid for it)


def _collect(cand: Candidate) -> None:
    """The candidate's compile finished: its region joins the parts (a failure leaves the blocks interpreted)."""
    fut, blocks = cand.job
    cand.job = None
    try:
        key, c = fut.result()
    except Exception:
        return
    _adopt(cand, blocks, key, c)


# ---------------------------------------------------------------- warm start: records of earlier processes
#
# records.py keeps, per code page, the candidates found there that have compiled regions or heat, and the page's own
# heat. A page's record is read when its code first runs in the process (_take_record: no search; the heat is taken,
# and adds to what this process interprets: save_heat writes it back at exit); its candidates' regions are loaded when
# the interpreter first reaches them (_load_stored, the -O2 code when there is some), so a second process runs
# compiled code from its first dispatch. A candidate's blocks from a record hold Stored instructions (what running
# and keying need); they are decoded from the candidate's lines only to be compiled (_decoded).
SEEN_PAGES: dict[str, None] = {}  # records looked for in this process (by page key, in that order), found or not
PREFETCHED: dict[str, tuple] = {}  # page key -> (the records folder, its record or None) as _prefetch read ahead
IMAGED: dict[str, set[str]] = {}  # page key -> the regions its image held when this process read the page's record


class Stored:
    """An instruction a record names: its PC, size, bytes (from memory) and dead-SGPR flag."""

    __slots__ = ("pc", "size", "raw", "dead_sdst")

    def __init__(self, pc: int, raw: bytes, dead_sdst: bool):
        self.pc, self.size, self.raw, self.dead_sdst = pc, len(raw), raw, dead_sdst


def _page_key(family: str, wave64: bool, data: bytes) -> str:
    return records.page_key(family, wave64, code_version(), data)


def _record(cand: Candidate) -> None:
    """Write the record of cand's page (_record_page)."""
    base, data = cand.page
    _record_page(cand.family, cand.wave64, base, data)


def _record_page(family: str, wave64: bool, base: int, data: bytes) -> None:
    """Write the record of a code page: every candidate of the process found there, from the same page bytes, that
    has regions compiled from it (those turned off for good left out) or heat, and the page's own heat."""
    out = []
    for c in KNOWN.get((family, wave64, base), ()):
        if c.page[1] != data:
            continue
        kept = [p for p in c.parts if not (p.off and p.tier == OPT)]
        regions = [[b.pc - base for b in p.blocks] for p in kept] + [[pc - base for pc in r] for r in c.stored]
        seconds = [p.seconds for p in kept] + [c.carried.get(tuple(sorted(r)), 0.0) for r in c.stored]
        if regions or c.heat > 0:
            out.append(_describe(c, base, regions, seconds))
        c.noted = c.heat
        for p in c.parts:
            p.noted = p.seconds
    page = PAGE_HEAT.get((family, wave64, base, data))
    heat = page.heat if page is not None else 0.0
    if page is not None:
        page.noted = heat
    if out or heat > 0:
        records.write(_page_key(family, wave64, data), out, heat)


def save_heat() -> None:
    """Rewrite the records of the pages whose candidates or own code heated since their record was read or written
    (at the process's exit: what it interpreted counts for the next ones), and the images that changed."""
    if records.folder() is None or not _lock.acquire(timeout=1.0):     # (a thread still simulating: let it be)
        return
    try:
        for c in {id(c): c for cs in KNOWN.values() for c in cs}.values():
            if c.job is not None and c.job[0].done():
                try:
                    _collect(c)         # (a compile that finished since the interpreter last looked: named too)
                except RuntimeError:    # (what it would start next: the worker is gone at exit)
                    pass
        pages = {(c.family, c.wave64, c.page[0], c.page[1]) for cs in KNOWN.values() for c in cs
                 if c.heat > c.noted or any(p.seconds > p.noted for p in c.parts)}
        pages |= {k for k, h in PAGE_HEAT.items() if h.heat > h.noted}
        for family, wave64, base, data in pages:
            _record_page(family, wave64, base, data)
        save_images()
        records.note_recent(list(SEEN_PAGES))
    finally:
        _lock.release()


IMAGE_REGIONS = 64       # regions an image keeps at most (beyond, only those of the process that writes it)


def save_images() -> None:
    """Write the image of each code page where this process ran compiled regions (linked by loader.py, at the tier
    each part runs at) that its image did not hold: those, and the image's own (a process that ran only some of a
    page's kernels keeps the others' code there too)."""
    from . import compiled
    pages: dict[str, dict] = {}
    for c in {id(c): c for cs in KNOWN.values() for c in cs}.values():
        kept = [p for p in c.parts if p.compiled.linked is not None and not (p.off and p.tier == OPT)]
        if kept:
            regions = pages.setdefault(_page_key(c.family, c.wave64, c.page[1]), {})
            for p in kept:
                regions[p.key if p.tier == FAST else _key_of(p)] = p.compiled.linked
    for page, regions in pages.items():
        held = IMAGED.get(page, set())
        if set(regions) <= held:
            continue
        if len(held | set(regions)) <= IMAGE_REGIONS:
            for k in held:
                got = compiled.MEMORY.get(k)
                if got is not None and got.linked is not None:
                    regions.setdefault(k, got.linked)
        compiled.save_image(page, regions)
        IMAGED[page] = set(regions)


atexit.register(save_heat)


def _describe(cand: Candidate, base: int, regions: list, seconds: list) -> dict:
    """A candidate as a record keeps it (offsets from the page at `base`; `seconds`: each region's in compiled code,
    of this process and the earlier ones)."""
    end = base + PAGE
    return {"blocks": [[b.pc - base, [[i.pc - base, i.size, int(bool(i.dead_sdst))] for i in b.insts], b.kinds,
                        int(b.floats), int(b.gstores), int(b.lstores), b.max_vgpr, b.max_sgpr, b.barriers]
                       for b in cand.blocks],
            "lines": [[line - base, records.line_hash(data)] for line, data in cand.lines if not base <= line < end],
            "empty": [p - base for p in cand.empty], "regions": regions,
            "seconds": [round(x, 6) for x in seconds],
            "heat": round(cand.heat, 6), "ran": sorted(p - base for p in cand.ran)}


def _take_record(cache: "Cache", icache, page: int, wave64: bool, pc: int) -> None:
    """Hold the candidates an earlier process recorded for this code page (see above); none when there is no record,
    it is damaged, or it does not fit the bytes here. The regions of the candidate holding pc are loaded when the
    interpreter reaches it, now; the others' when the interpreter first reaches them too (compiled.host_known: their
    keys and code need no LLVM) or, on a host LLVM has to name first, start loading on the worker thread."""
    from ....errors import GPUFault
    from . import compiled
    family = icache.isa.name
    try:
        data = icache._page(page)
    except GPUFault:
        return
    key = _page_key(family, wave64, data)
    if key in SEEN_PAGES:               # (its candidates, if any, are KNOWN: _take_known holds them)
        return
    SEEN_PAGES[key] = None
    ahead = PREFETCHED.pop(key, None)
    if ahead is not None and ahead[0] == records.folder():     # (read ahead from this cache, its image placed)
        got = ahead[1]
        counts["prefetched"] += got is not None
    else:
        got = _read_page(key)
    if got is None:
        return
    cands, heat = got
    page_heat = PAGE_HEAT.get((family, wave64, page, data))
    if page_heat is not None and heat > page_heat.heat:
        page_heat.heat = page_heat.noted = heat
    for rec in cands:
        try:
            cand = _from_record(icache, page, data, wave64, rec)
        except (GPUFault, LookupError, TypeError, ValueError):
            continue                    # (a record that does not fit: as if there were none)
        if cand is None or any((i.pc, wave64) in cache.cold or (i.pc, wave64) in cache.at
                               for b in cand.blocks for i in b.insts):
            continue
        _know(cand)
        if synchronous():
            _load_stored(cand)
            if cand.left:
                _compile(cand, [cand.by_pc[p] for p in cand.left], True)
        elif not any(i.pc == pc for b in cand.blocks for i in b.insts) and not compiled.host_known():
            _load_stored(cand, now=False)   # (on a known host a load is ~0.2 ms without LLVM: when first reached)
        deps = tuple((line, icache._line(line)[1]) for line, _ in cand.lines)
        cache.hold(Held(cand, deps, icache.gen))


def _from_record(icache, base: int, data: bytes, wave64: bool, rec: dict) -> Candidate | None:
    """The candidate a record describes, or None when it does not fit the bytes here: each instruction lies in lines
    of the page or in lines outside it that hold the recorded bytes (with the line after it, which the ICache's
    decode reads too)."""
    size_line, end = icache.LINE, base + PAGE
    outside = {base + off: h for off, h in rec["lines"]}
    lines: dict[int, bytes] = {}

    def line_at(line: int) -> bytes:
        got = lines.get(line)
        if got is None:
            if base <= line < end:                              # (the page's own bytes, read already)
                got = data[line - base:line - base + size_line]
            elif line not in outside:
                raise LookupError(line)
            else:
                got = icache._line(line)[0]
                if records.line_hash(got) != outside[line]:
                    raise LookupError(line)
            lines[line] = got
        return got

    for line in outside:
        line_at(line)
    blocks = []
    for pc, insts, kinds, floats, gstores, lstores, max_vgpr, max_sgpr, barriers in rec["blocks"]:
        if not insts or len(kinds) != len(insts):
            return None
        # the block's instructions follow each other: its bytes are read once, from the lines they lie in (and the
        # line after the last one, when it does not start a line)
        first, last = base + insts[0][0], base + insts[-1][0]
        at = insts[0][0]
        for off, size, _ in insts:
            if off != at or not 0 < size <= 16:
                return None
            at += size
        lo = first & ~(size_line - 1)
        hi = (last & ~(size_line - 1)) + (size_line if last & (size_line - 1) else 0)
        code = b"".join(line_at(line) for line in range(lo, hi + size_line, size_line))
        skip = base - lo
        stored = [Stored(base + off, code[skip + off:skip + off + size], bool(dead)) for off, size, dead in insts]
        if stored[-1].size != insts[-1][1]:
            return None
        blocks.append(_stored_block(base + pc, stored, kinds, floats, gstores, lstores, max_vgpr, max_sgpr,
                                    barriers))
    empty = [base + p for p in rec["empty"]]
    for p in empty:
        line_at(p & ~(size_line - 1))
    cand = Candidate(icache.isa.name, wave64, blocks, tuple(sorted(lines.items())), (base, data))
    cand.empty = empty
    seconds = rec.get("seconds", ())
    for j, r in enumerate(rec["regions"]):
        pcs = [base + p for p in r]
        if pcs and all(p in cand.by_pc for p in pcs):
            cand.stored.append(pcs)
            x = seconds[j] if j < len(seconds) else 0.0
            if isinstance(x, (int, float)) and x > 0:
                cand.carried[tuple(sorted(pcs))] = float(x)
    heat = rec.get("heat", 0.0)
    cand.heat = cand.noted = float(heat) if isinstance(heat, (int, float)) and heat > 0 else 0.0
    cand.ran = {base + p for p in rec.get("ran", ()) if base + p in cand.by_pc}
    cand.retrigger()
    return cand


def _stored_block(pc: int, stored: list, kinds, floats, gstores, lstores, max_vgpr, max_sgpr, barriers) -> Block:
    """A block of Stored instructions with the kinds, flags and registers a record (or a region's description) gives
    it, shaped."""
    b = Block(pc, stored, list(kinds))
    b.floats, b.gstores, b.lstores = bool(floats), bool(gstores), bool(lstores)
    b.max_vgpr, b.max_sgpr, b.barriers = int(max_vgpr), int(max_sgpr), [int(x) for x in barriers]
    return shape(b)


def _load_stored(cand: Candidate, now: bool = True) -> None:
    """Load the regions a record names for cand, at -O2 when an earlier process compiled that (never compiling:
    a region with neither object on disk stays with the interpreter until it is hot, as without a record): now, or
    on the worker thread (cand.loads; _warm takes them as they come)."""
    from . import compiled
    stored, cand.stored = cand.stored, []
    for pcs in stored:
        if not set(pcs) <= cand.left:
            continue
        cand.left -= set(pcs)
        blocks = sorted((cand.by_pc[p] for p in pcs), key=lambda b: b.pc)
        load = _loader(cand, blocks)
        if now:
            _loaded(cand, blocks, load())
        else:
            cand.loads.append((compiled.submit_call(load), blocks, load))


def _loader(cand: Candidate, blocks: list[Block]):
    """A function loading the region of `blocks`: from memory (a page's image placed it) at either tier, -O2 first,
    else from the disk cache, -O2 first (an image holds each region at the tier it last ran at): (key, tier,
    Compiled) or None."""
    from . import compiled
    names = _named(blocks)

    def load():
        code = _code(cand.family, cand.wave64, blocks)
        keys = [(tier_key(code, code_version(), tier), tier) for tier in (OPT, FAST)]
        for key, tier in keys:          # (in memory first: a page's image placed it, no file to look for)
            c = compiled.in_memory(key)
            if c is not None:
                return key, tier, c
        for key, tier in keys:
            try:
                c = stored(key, names)
            except Exception:
                continue
            if c is not None:
                return key, tier, c
        return None
    return load


def _loaded(cand: Candidate, blocks: list[Block], got) -> None:
    """A region of a record is loaded (got: from _loader): it joins the parts; if it is not, its blocks are left to
    the interpreter as any (compiled once hot)."""
    if got is None:
        cand.left |= {b.pc for b in blocks}
        cand.retrigger()
        return
    key, tier, c = got
    _adopt(cand, blocks, key, c, tier, look=False)


def _take_loads(cand: Candidate, pc: int) -> None:
    """The regions loaded on the worker thread so far join the parts. The one holding pc (the interpreter is there)
    is waited for when the worker is loading it, and loaded here when the worker has not started it (a load takes
    ~0.5 ms and waits for no compile the worker may be running)."""
    for job in list(cand.loads):
        fut, blocks, load = job
        here = False                                    # loaded on this thread
        if not fut.done() and any(b.pc == pc for b in blocks):
            if fut.running():
                wait_for([fut])
            else:
                here = fut.cancel()                     # (a load takes no lock a compile holds: compiled.get)
        if not here and not fut.done():
            continue
        cand.loads.remove(job)
        try:
            got = load() if here else fut.result()
        except Exception:
            got = None
        _loaded(cand, blocks, got)


def _decoded(cand: Candidate, blocks: list[Block]) -> list[Block]:
    """The blocks with decoded instructions: as they are, or, for blocks a record named, decoded now from the
    candidate's lines (and checked against the record: sizes, dead-SGPR flags and kinds)."""
    if all(not isinstance(b.insts[0], Stored) for b in blocks):
        return blocks
    from ..isa import for_isa
    isa = for_isa(cand.family)
    shared = _shared(isa)
    lines = dict(cand.lines)
    line_size = 64
    out = []
    for b in blocks:
        if not isinstance(b.insts[0], Stored):
            out.append(b)
            continue
        insts = []
        for s in b.insts:
            line = s.pc & ~(line_size - 1)
            code = lines[line] + (lines.get(line + line_size, b"") if s.pc != line else b"")
            inst = isa.decode(code, s.pc, line, cand.wave64)
            inst.dead_sdst = isa.mask_dead(code, line, cand.wave64, inst)
            if inst.size != s.size or bool(inst.dead_sdst) != s.dead_sdst or inst.raw != s.raw:
                raise ValueError(f"the record does not fit the code at {s.pc:#x}")
            insts.append(inst)
        kinds = [kind_of(i) if i.key in shared else None for i in insts]
        if kinds != b.kinds:
            raise ValueError(f"the record does not fit the code of the block at {b.pc:#x}")
        d = finish(Block(b.pc, insts, kinds))
        if (d.max_vgpr, d.max_sgpr) != (b.max_vgpr, b.max_sgpr):
            raise ValueError(f"the record does not fit the registers of the block at {b.pc:#x}")
        d.name = b.name
        out.append(d)
    return out


def _promote(part: Part) -> None:
    """Compile the part again at -O2 (at once in sync mode or when it is on disk; else on the worker thread)."""
    key = _key_of(part)
    make_ir = _make_ir(part.cand, part.blocks)
    names = [b.name for b in part.blocks]
    if synchronous() or available(key):
        try:
            part.use(get(key, names, make_ir, OPT), OPT)
        except Exception:
            part.cost = float("inf")
        return
    part.job = _submit(key, names, make_ir, OPT, part.insts, part.cand, part.blocks)


def _key_of(part: Part) -> str:
    """The key of the part's -O2 code."""
    return _key(part.family, part.wave64, part.blocks, OPT)


def _charge(part: Part, seconds: float, work: int) -> None:
    """Compiled code of the part ran `work` wave-instructions in `seconds`: promote it once that pays (see the
    tiering comment above); turn it off if it runs slower than the interpreter did (JUDGE_SECONDS)."""
    part.seconds += seconds
    part.work += work
    if part.seconds - part.judged >= JUDGE_SECONDS:
        _judge(part)
    if part.job is None and part.seconds < OPT_HOT * part.cost:
        return
    with _lock:
        job = part.job
        if job is not None:
            if job.done():
                part.job = None
                try:
                    part.use(job.result()[1], OPT)
                except Exception:
                    part.cost = float("inf")
        elif part.seconds >= OPT_HOT * part.cost:
            _promote(part)


def _judge(part: Part) -> None:
    """After JUDGE_SECONDS of its compiled code: seconds per wave-instruction against the interpreter's in the same
    candidate before it was compiled (when that measured at least JUDGE_SECONDS). Slower: the part is off, the
    interpreter runs it (e.g. scalar code over many waves: one numpy step for all of them against a wave loop), at
    the first tier until its -O2 code comes (a new trial, compiled now), at -O2 for good. The interpreter is the
    yardstick: compiled code never loses to it by more than a window."""
    cand = part.cand
    mine = (part.seconds - part.judged) / max(part.work, 1)
    part.judged, part.work = part.seconds, 0
    if cand.heat < JUDGE_SECONDS or not cand.work or mine <= cand.heat / cand.work:
        return
    with _lock:
        part.off = True
        if part.tier == FAST and part.job is None and part.cost != float("inf"):
            _promote(part)


class Region:
    """A Part as one ICache holds it, valid while its candidate is (held: the ICache generation and lines)."""

    def __init__(self, part: Part, held: "Held"):
        self.part, self.held = part, held
        self.root, self.blocks, self.index, self.floats = part.root, part.blocks, part.index, part.floats

    @property
    def fns(self) -> dict:
        return self.part.fns

    @property
    def chain(self):
        return self.part.chain


class Held:
    """A Candidate as one ICache holds it (the generation and lines it is valid in, the parts installed so far)."""

    def __init__(self, cand: Candidate, deps: tuple, gen: int):
        self.cand, self.deps, self.gen, self.parts = cand, deps, gen, 0
        self.cells: dict[int, list] | None = None      # page -> the ICache's validity cell its lines were valid in

    def valid(self, icache) -> bool:
        """Its code bytes are unchanged in the ICache's current generation: every page it was decoded from still
        has the cell it had (one page fetch per page and generation, shared with the interpreter's steps), else
        line by line (a page that changed elsewhere)."""
        cells = self.cells
        if cells is not None and all(icache._page_cell(p) is c for p, c in cells.items()):
            return True
        if not icache._valid(self.deps):
            return False
        pages = {line & ~(PAGE - 1) for line, _ in self.deps}
        cells = {p: icache._page_cell(p) for p in pages}
        self.cells = cells if all(c is not None for c in cells.values()) else None
        return True


class Cache:
    """Per ICache (one ISA family of one shader core): where each PC sits, in compiled regions or in candidates."""

    def __init__(self):
        self.at: dict[tuple[int, bool], tuple[Region, Block, int]] = {}
        self.cold: dict[tuple[int, bool], tuple[Held, Block]] = {}
        # PCs known not to be in a block: (ICache generation, the lines the search read, None if it could not tell)
        self.none: dict[tuple[int, bool], tuple[int, tuple | None]] = {}
        self.held: dict[int, Held] = {}                  # id(candidate) -> how this ICache holds it
        self.pages: dict[tuple[int, bool], Heat] = {}    # code pages not searched yet: their interpreted time
        self.warming = None                              # what the interpreter runs until the next lookup (heat)
        self.t = 0.0                                     # the last lookup's time

    def drop(self, held: Held) -> None:
        """Forget a candidate and its regions here (its code changed)."""
        self.held.pop(id(held.cand), None)
        w64 = held.cand.wave64
        for b in held.cand.blocks:
            for i in b.insts:
                k = (i.pc, w64)
                v = self.cold.get(k)
                if v is not None and v[0] is held:
                    del self.cold[k]
                v = self.at.get(k)
                if v is not None and v[0].held is held:
                    del self.at[k]
        self.none.clear()               # a search that stopped at its PCs may find a block now

    def hold(self, held: Held) -> None:
        cand, w64 = held.cand, held.cand.wave64
        self.held[id(cand)] = held
        for b in cand.blocks:
            for i in b.insts:
                self.cold.setdefault((i.pc, w64), (held, b))
        for p in cand.empty:
            self.none.setdefault((p, w64), (held.gen, held.deps))
        self.install(held)

    def install(self, held: Held) -> None:
        """The candidate's parts compiled since this ICache last looked, in place of its cold blocks."""
        cand, w64 = held.cand, held.cand.wave64
        for part in cand.parts[held.parts:]:
            region = Region(part, held)
            for b in part.blocks:
                for j, i in enumerate(b.insts):
                    k = (i.pc, w64)
                    v = self.cold.get(k)
                    if v is not None and v[0] is held:
                        del self.cold[k]
                        self.at[k] = (region, b, j)
        held.parts = len(cand.parts)


# candidates of every ICache in the process, by (family, wave64, the code page their search started in): a new shader
# core (one per dispatch in standalone runs) takes them (their heat, their compiled regions) when it first runs code
# of that page, once all their code lines' bytes are checked equal
KNOWN: dict[tuple[str, bool, int], list[Candidate]] = {}
KNOWN_PER_PAGE = 16
# the interpreted time of code pages not searched yet, process-wide too, by (family, wave64, page, its bytes): a page
# whose every dispatch runs shorter than SEARCH_SECONDS on a new shader core still gets searched once the process
# spent that long in it
PAGE_HEAT: dict[tuple[str, bool, int, bytes], "Heat"] = {}
PAGE_HEAT_MAX = 1024
_shared_cache: dict[str, frozenset] = {}
# candidates and parts are shared by the shader cores of the process, which may run on several threads (one
# simulated GPU's worker each): what changes them (searches, compiles, promotions) holds this lock
_lock = threading.RLock()


def _rdna3_own(isa, rdna3: dict) -> set:
    """RDNA3: its own builders."""
    return {k for k, b in isa.handlers.items() if rdna3.get(k) is b}


def _rdna4(isa, rdna3: dict) -> set:
    """RDNA4: every common key it does not override (rdna4.OVERRIDES; its VALU builders are made again from the
    same code), plus its wait instructions (no-ops in the simulator, as RDNA3's s_waitcnt)."""
    from .. import rdna4
    s = {k for k in isa.handlers if k in rdna3 and k not in rdna4.OVERRIDES}
    s |= {k for k in RDNA4_KEYS if k in isa.handlers}        # RDNA4 operations the emitter knows (ir.py)
    return s | {k for k in isa.handlers if k in WAITS or k in rdna4.WAITS}


def _cdna3(isa, rdna3: dict) -> set:
    """CDNA3: the RDNA3 builders it takes over unchanged (cdna.table: not the gfx9 ones, v_cmpx, buffers, MODE
    access), which its 16-bit-destination and SDWA wrapper leaves alone for the 32-bit, non-SDWA forms the JIT
    translates (ir.kind_of)."""
    from .. import cdna
    s = {k for k in isa.handlers if k in rdna3 and k not in cdna.H9 and
         not k.startswith(("buffer_", "v_cmpx_", "s_getreg", "s_setreg"))}
    return s | {k for k in GFX9_KEYS if k in isa.handlers}   # gfx9 operations the emitter knows (ir.py)


def _cdna4(isa, rdna3: dict) -> set:
    """CDNA4: CDNA3's keys where its builder is CDNA3's own (cdna4.table adds gfx950's operations and overrides
    nothing else; its decoder gives the same instruction for the encodings both have)."""
    from ..isa import for_isa
    cdna3 = for_isa("cdna3")
    return {k for k in _shared(cdna3) if isa.handlers.get(k) is cdna3.handlers[k]}


SHARED = {"rdna3": _rdna3_own, "rdna4": _rdna4, "cdna3": _cdna3, "cdna4": _cdna4}   # family -> its rule


def _shared(isa) -> frozenset:
    """Handler keys whose semantics in this family are RDNA3's (SHARED: one rule per family; none for a family
    without a rule)."""
    s = _shared_cache.get(isa.name)
    if s is None:
        from ..isa import for_isa
        rule = SHARED.get(isa.name)
        s = _shared_cache[isa.name] = frozenset(rule(isa, for_isa("rdna3").handlers) if rule else ())
    return s


def _discover(icache, root: int, wave64: bool, covered, read: list | None = None,
              refused: list | None = None, ran_only: bool = False) -> list[Block]:
    """The blocks reachable from root that are not covered yet (found ones are added to `covered`); `read` collects
    the PCs whose instructions were looked at (None appended for one that did not decode), `refused` those that do
    not translate. ran_only: past root, only instructions the ICache decoded already (those the interpreter ran): a
    block ends before the first other one, and the search decodes nothing the interpreter would not."""
    shared, handlers = _shared(icache.isa), icache.isa.handlers
    blocks: list[Block] = []
    work, seen = [root], set()
    while work and len(blocks) < MAX_BLOCKS:
        pc = work.pop(0)
        if pc in seen or (pc, wave64) in covered:
            continue
        seen.add(pc)
        insts, kinds, p = [], [], pc
        while len(insts) < MAX_INSTS:
            if insts and (p in seen or (p, wave64) in covered):
                work.append(p)
                break
            if ran_only and p != root and (p, wave64) not in icache.steps:
                break
            try:                        # (decoded only: the interpreter builds a step when it runs one)
                inst, control = icache.decoded(p, wave64)
                if inst.key not in handlers:
                    raise KeyError(inst.key)
            except Exception:           # an instruction that does not decode or has no handler: the interpreter says so
                if read is not None:
                    read.append(None)
                break
            if read is not None:
                read.append(p)
            k = kind_of(inst) if inst.key in shared else None
            if k is None:
                if refused is not None:
                    refused.append(p)
                if not control:
                    work.append(p + inst.size)
                elif inst.target is not None:
                    work += [inst.target, p + inst.size]
                break
            if insts and splits_before(insts, kinds, inst, k):
                work.append(p)
                break
            insts.append(inst)
            kinds.append(k)
            p += inst.size
            if k == "branch":
                work.append(inst.target)
                if inst.key != "s_branch":
                    work.append(p)
                break
            if k in ENDS:
                break
        if insts and any(k in WORK for k in kinds):
            blocks.append(finish(Block(pc, insts, kinds)))
            for i in insts:
                covered[(i.pc, wave64)] = True
    return blocks


def _take_known(cache: Cache, icache, page: int, wave64: bool) -> None:
    """Hold the candidates other ICaches of the process found in this code page, those whose lines hold the same
    bytes here (with their heat and compiled regions; compiled whole at once in sync mode)."""
    from ....errors import GPUFault
    for cand in reversed(KNOWN.get((icache.isa.name, wave64, page), ())):
        if id(cand) in cache.held:
            continue
        deps = []
        try:
            for line, data in cand.lines:
                got, ver = icache._line(line)
                if got != data:
                    break
                deps.append((line, ver))
            else:
                if synchronous() and cand.left and cand.job is None:
                    _compile(cand, [cand.by_pc[p] for p in cand.left], True)
                cache.hold(Held(cand, tuple(deps), icache.gen))
        except GPUFault:
            continue


def _know(cand: Candidate) -> None:
    """Make cand one of KNOWN's for the page its search started in (the oldest of a full page's dropped)."""
    known = KNOWN.setdefault((cand.family, cand.wave64, cand.page[0]), [])
    if len(known) >= KNOWN_PER_PAGE:
        del known[0]
    known.append(cand)


def _find(cache: Cache, icache, pc: int, wave64: bool, entry: int | None = None, others=()) -> None:
    """Search for the blocks reachable from pc and hold them as a new candidate (compiled whole at once in sync mode,
    from the disk cache where it is there). PCs the search found that no block can hold are noted as such. The
    search starts at the kernel's `entry` too when no candidate holds it yet: a search started where the interpreter
    happens to be when the page got hot (inside a loop, past a prologue) would leave the code before that PC to
    another, later candidate, and the kernel in pieces that chain no further than their ends. It starts at the
    `others` too, the entries of the other kernels whose interpreted time heated the page, those in the first root's
    page (whose record names the candidate): the heat that pays for the search was theirs as well, and a kernel
    left out waited for the page to get hot again (the demo's third kernel on its page: two more runs)."""
    family = icache.isa.name
    key = (pc, wave64)
    read: list = []
    refused: list = []
    covered = {k: True for k in (*cache.at, *cache.cold)}
    sync = synchronous()
    roots = [pc] if entry is None or entry == pc or (entry, wave64) in covered else [entry, pc]
    home = roots[0] & ~(PAGE - 1)
    roots += sorted(e for e in others if e & ~(PAGE - 1) == home and e not in roots and (e, wave64) not in covered)
    blocks = []
    for root in roots:                  # (the entry's search first, whole: pc, reached from it, starts no block there)
        blocks += _discover(icache, root, wave64, covered, read, refused, ran_only=RAN_ONLY and not sync)
    for p in refused:
        cache.none[(p, wave64)] = (icache.gen, icache.deps.get((p, wave64)))
    if not blocks:
        _note_none(cache, icache, key, read)
        return
    # the candidate depends on every line its search read (the same bytes give the same blocks)
    deps = tuple({d for p in read if p is not None for d in icache.deps.get((p, wave64), ())})
    lines = tuple((line, icache.lines[line][0]) for line, _ in deps)
    page = roots[0] & ~(PAGE - 1)       # (the page whose record names it: the one the kernel starts in)
    cand = Candidate(family, wave64, blocks, lines, (page, icache._page(page)))
    cand.empty = sorted({p for p in read if p is not None} - {i.pc for b in blocks for i in b.insts})
    _know(cand)
    if sync and cand.left:
        _compile(cand, [cand.by_pc[p] for p in cand.left], True)
    cache.hold(Held(cand, deps, icache.gen))
    if key not in cache.cold and key not in cache.at:
        _note_none(cache, icache, key, read)


def lookup(icache, pc: int, wave64: bool, waves: int = 1, entry: int | None = None, skipped: int = 0,
           skipped_work: int = 0):
    """(region, block, index) of the compiled code holding pc; else the interpreter runs it for `waves` waves (the
    time until the next lookup heats the candidate holding pc, or its page: see the tiering comment above), and the
    result is None, or a PC before which the interpreter need not ask again while it runs straight on (QUIET).
    `entry`: where the waves' kernel starts (a search from pc starts there too); `skipped`, `skipped_work`: the
    instructions and wave-instructions the interpreter ran since the last lookup without asking."""
    try:
        cache = icache.jit
    except AttributeError:
        cache = icache.jit = Cache()
    _tick(cache, skipped, skipped_work)
    key = (pc, wave64)
    hit = cache.at.get(key)
    if hit is not None:
        region = hit[0]
        if region.part.off:             # slower than the interpreter here (_judge): interpreted
            if region.part.job is not None:
                _charge(region.part, 0.0, 0)            # (its -O2 code may have come: a new trial)
            return None
        if region.held.gen == icache.gen or _revalidate(cache, icache, region.held):
            return hit
    cold = cache.cold.get(key)
    if cold is not None:
        held, blk = cold
        if held.gen == icache.gen or _revalidate(cache, icache, held):
            cand = cache.warming = held.cand
            cand.work += waves
            if cand.heat < cand.trigger and blk.pc in cand.ran and cand.job is None and held.parts == len(cand.parts) \
                    and not cand.loads and not cand.stored:
                return blk.end_pc       # (the common case: interpreted, not hot yet)
            hit = _warm(cache, held, blk, key)
            return blk.end_pc if hit is None else hit
    else:
        no = cache.none.get(key)
        if no is not None and (no[0] == icache.gen or _known_none(cache, icache, key)):
            return None
    # code no candidate holds yet: its page heats up, and is searched once it spent what a search costs
    pk = (pc & ~(PAGE - 1), wave64)
    page = cache.pages.get(pk)
    if page is None:
        page = cache.pages[pk] = _page_heat(icache, pk[0], wave64)
        with _lock:
            _take_known(cache, icache, pk[0], wave64)
            _take_record(cache, icache, pk[0], wave64, pc)
        if key in cache.cold or key in cache.at or key in cache.none:
            return lookup(icache, pc, wave64, waves)
    if entry is not None:
        page.entries.add(entry)
    if page.heat < page.trigger:
        cache.warming = page
        page.work += waves
        return pk[0] + PAGE             # (no candidate holds code of this page before a search)
    heat, page.heat = page.heat, 0.0
    with _lock:
        _find(cache, icache, pc, wave64, entry, tuple(page.entries))     # (a copy: other threads add to it)
    cold = cache.cold.get(key)
    if cold is None:
        return cache.at.get(key)
    cand = cache.warming = cold[0].cand
    if not cand.heat:                   # a new candidate: the page's heat was spent in it (mostly: at most the
        cand.heat = heat                # search's threshold of it in code elsewhere in the page)
    cand.work += waves
    hit = _warm(cache, cold[0], cold[1], key)
    return cold[1].end_pc if hit is None else hit


def _tick(cache: Cache, skipped: int, skipped_work: int) -> None:
    """What the interpreter ran since the last lookup heats what that lookup warmed: the time since (at most
    GAP_SECONDS for each instruction it ran meanwhile, `skipped` of them without asking) and `skipped_work`."""
    now = _clock()
    warming = cache.warming
    if warming is not None:
        gap, cap = now - cache.t, GAP_SECONDS * (1 + skipped)
        warming.heat += gap if gap < cap else cap
        warming.work += skipped_work
        cache.warming = None
    cache.t = now


def settle(icache, skipped: int, skipped_work: int) -> None:
    """The interpreter leaves a batch (it ended, or its slice did) after `skipped` instructions (`skipped_work`
    wave-instructions) it ran without asking (QUIET): their time heats what the last lookup warmed."""
    cache = getattr(icache, "jit", None)
    if cache is not None:
        _tick(cache, skipped, skipped_work)


def _page_heat(icache, page: int, wave64: bool) -> "Heat":
    """The heat of a code page no candidate holds yet: the process's, for these bytes there."""
    from ....errors import GPUFault
    trigger = 0.0 if synchronous() else SEARCH_SECONDS
    try:
        key = (icache.isa.name, wave64, page, icache._page(page))
    except GPUFault:
        return Heat(trigger)
    heat = PAGE_HEAT.get(key)
    if heat is None:
        if len(PAGE_HEAT) >= PAGE_HEAT_MAX:
            del PAGE_HEAT[next(iter(PAGE_HEAT))]
        heat = PAGE_HEAT[key] = Heat(trigger)
    heat.trigger = trigger              # (the mode of the shader core asking: a page's heat outlives it)
    return heat


class Heat:
    """Interpreted seconds in code no candidate holds yet (one code page's bytes, process-wide: PAGE_HEAT), and the
    search's threshold."""

    def __init__(self, trigger: float):
        self.heat, self.trigger = 0.0, trigger
        self.noted = 0.0                # the heat the page's record holds (records.py)
        self.work = 0                   # interpreted wave-instructions (as a Candidate's)
        self.entries: set[int] = set()  # the kernels (their entry PCs) whose interpreted code heated it


def _warm(cache: Cache, held: Held, blk: Block, key: tuple[int, bool]):
    """The interpreter is at blk of a candidate: note that it ran, start compiling what ran once it is hot, take
    the regions compiled meanwhile; the hit if pc's block is compiled now."""
    with _lock:
        return _warm_locked(cache, held, blk, key)


def _warm_locked(cache: Cache, held: Held, blk: Block, key: tuple[int, bool]):
    cand = held.cand
    if cand.loads:
        _take_loads(cand, blk.pc)
    if cand.stored:                     # (a record's regions: loaded when the interpreter first reaches them)
        _load_stored(cand)
    if blk.pc not in cand.ran:
        cand.saw(blk)
    if cand.job is not None:
        if cand.job[0].done():
            _collect(cand)
    elif cand.heat >= cand.trigger and blk.pc in cand.left:
        # the whole candidate when the helper compiles it (it costs this process a description of it): one region
        # the size of the kernel chains through it, where pieces compiled as they first ran (earlier processes' runs
        # included: cand.ran is in the record) end the chain at each piece's end
        _compile(cand, [cand.by_pc[p] for p in (cand.left if helper_wanted() else cand.ran & cand.left)], False)
    if held.parts != len(cand.parts):
        cache.install(held)
        return cache.at.get(key)
    return None


def forget() -> None:
    """Forget what this process compiled and found (compiled.MEMORY, KNOWN; shader cores made from now on start
    afresh): what a new process starts with (tests, benchmarks of cold and disk-cached compiles)."""
    from . import compiled
    prefetched()                        # (what it reads ahead belongs to the process before)
    compiled.MEMORY.clear()
    library.forget()
    KNOWN.clear()
    SEEN_PAGES.clear()
    PREFETCHED.clear()
    IMAGED.clear()
    PAGE_HEAT.clear()


def _revalidate(cache: Cache, icache, held: Held) -> bool:
    """A new ICache generation: the candidate's lines unchanged (valid again, with its regions), or it is dropped."""
    if held.valid(icache):
        held.gen = icache.gen
        return True
    cache.drop(held)
    return False


def _note_none(cache: Cache, icache, key: tuple[int, bool], read: list) -> None:
    """Remember that no block starts at key's PC, with the ICache lines the search read (what it depends on)."""
    deps = None
    if None not in read:
        deps = tuple({d for p in read for d in icache.deps.get((p, key[1]), ())})
    cache.none[key] = (icache.gen, deps)


def _known_none(cache: Cache, icache, key: tuple[int, bool]) -> bool:
    """No block starts at key's PC: found so in this ICache generation, or in an earlier one from lines whose
    bytes are unchanged (each dispatch invalidates the ICache: the search is not made again per dispatch)."""
    hit = cache.none.get(key)
    if hit is None:
        return False
    gen, deps = hit
    if gen == icache.gen:
        return True
    if deps is not None and icache._valid(deps):
        cache.none[key] = (icache.gen, deps)
        return True
    return False


def _addr(a: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte (through ctypes' buffer protocol: a fraction of the cost
    of ndarray.ctypes.data, which a read-only array still takes)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


class Tables:
    """Translated-range tables (read, write: RANGES rows of lo, hi, host - lo) and their fill. Each entry is a run
    of the memory model's TLB, so the tables serve every batch of a shader core until that TLB is replaced (an
    MMU replaces it whole on every invalidate): as hardware keeps translations until the driver invalidates."""

    def __init__(self, tlb):
        self.tlb = tlb
        self.rtab = np.zeros(3 * RANGES, np.int64)
        self.wtab = np.zeros(3 * RANGES, np.int64)
        self.count = {"rcount": 0, "wcount": 0}


def _tables(batch, mem) -> Tables:
    """The core's tables for the memory's current TLB, or for what its ranges depend on (`jit_key`: FlatMemory's
    arena, whose allocations never move); fresh ones for a memory with neither."""
    tlb = getattr(mem, "_tlb", None)
    if tlb is None:
        tlb = getattr(mem, "jit_key", None)
    if tlb is None:
        return Tables(None)
    t = getattr(batch.core, "_jit_tables", None)
    if t is None or t.tlb is not tlb:
        t = Tables(tlb)
        batch.core._jit_tables = t
    return t


_ALL_WAVES: dict[int, np.ndarray] = {}


def _every(n: int) -> np.ndarray:
    """0..n-1 as int64, read-only, one per n (every wave of a batch as a call's wave list)."""
    a = _ALL_WAVES.get(n)
    if a is None:
        if len(_ALL_WAVES) >= 64:
            _ALL_WAVES.clear()
        a = _ALL_WAVES[n] = np.arange(n, dtype=np.int64)
        a.flags.writeable = False
    return a


_LDS, _LDS_BASE, _LDS_SIZE, _RTAB, _WTAB, _RCOUNT, _WCOUNT = (CTX[k] for k in ("lds", "lds_base", "lds_size", "rtab",
                                                                               "wtab", "rcount", "wcount"))


class Context:
    """The context block of one batch: pointers to its register arrays, LDS, the translated-range tables. It is
    kept with the register arrays (WaveState.jit_ctx: a small batch's are reused by the next batch of its shape),
    and only what belongs to the batch is set again (bind)."""

    def __init__(self, batch):
        w = batch.w
        self.ctx = np.zeros(CTX_SLOTS, np.int64)
        self.mv = memoryview(self.ctx)      # the same slots as Python ints (a step sets and reads ~20 of them)
        self.all = _every(w.n)
        c = self.ctx
        for name, arr in (("v", w.v), ("s", w.s), ("scc", w.scc), ("em", w.em), ("full", w.full), ("pc", w.pc),
                          ("status", w.status), ("mode", w.mode)):
            assert arr.flags.c_contiguous
            c[CTX[name]] = _addr(arr)
        c[CTX["n"]] = w.n
        self.ptr, self.all_ptr = _addr(c), _addr(self.all)     # what every call passes
        self.tables = self.lds = self.lds_base = None
        self.bind(batch)

    @classmethod
    def of(cls, batch) -> "Context":
        """The batch's context: the one its register arrays keep, bound to it, or a new one."""
        w = batch.w
        ctx = w.jit_ctx
        if ctx is None:
            ctx = w.jit_ctx = cls(batch)
        else:
            ctx.bind(batch)
        batch._jit_ctx = ctx
        return ctx

    def bind(self, batch) -> None:
        """Point at this batch's LDS, memory and translated-range tables."""
        w = batch.w
        self.mem = w.mem                # (not the WaveState: it keeps this context, and a cycle waits for the GC)
        c = self.mv
        if w.lds is not self.lds:
            assert w.lds.flags.c_contiguous
            self.lds, c[_LDS] = w.lds, _addr(w.lds)
        if w.lds_base is not self.lds_base:
            self.lds_base, c[_LDS_BASE] = w.lds_base, _addr(w.lds_base)
        c[_LDS_SIZE] = w.lds_size
        t = _tables(batch, w.mem)
        if t is not self.tables:
            self.tables = t
            c[_RTAB], c[_WTAB] = _addr(t.rtab), _addr(t.wtab)
        count = t.count
        c[_RCOUNT], c[_WCOUNT] = count["rcount"], count["wcount"]
        self.span = getattr(self.mem, "jit_span", None)

    def resolve(self) -> bool:
        """Add the range of the last miss to its table; False when the memory model would fault there."""
        c = self.ctx
        if self.span is None:
            return False
        addr, nbytes, write = int(c[CTX["miss_addr"]]) & (2 ** 64 - 1), int(c[CTX["miss_bytes"]]), bool(c[CTX["miss_write"]])
        sp = self.span(addr, nbytes, write)
        if sp is None:
            return False
        lo, hi, host = sp
        t = self.tables
        tab, slot = (t.wtab, "wcount") if write else (t.rtab, "rcount")
        # (another batch of the core may have filled the table further: every entry is valid, so either count is)
        n = max(int(c[CTX[slot]]), t.count[slot])
        if n >= RANGES:                 # full: start again (the ranges in use come back on their next miss)
            n = 0
        tab[3 * n:3 * n + 3] = (np.int64(lo - (1 << 64) if lo >= 1 << 63 else lo),
                                np.int64(hi - (1 << 64) if hi >= 1 << 63 else hi),
                                np.int64(((host - lo + (1 << 63)) % (1 << 64)) - (1 << 63)))
        c[CTX[slot]] = t.count[slot] = n + 1
        return True


def _mode_ok(w, sel) -> bool:
    """The waves sel keep f32 denormals and round to nearest even (what compiled float code assumes). Known for
    the whole state until its MODE is written (w.mode_ok: True when every wave's is)."""
    if w.mode_ok:
        return True
    m = w.mode[sel]
    if len(m) <= 16:                    # (a short list is cheaper than two array operations)
        ok = all(x & (FULL_F32 | ROUND_F32) == FULL_F32 for x in m.tolist())
    else:
        ok = bool(((m & (FULL_F32 | ROUND_F32)) == FULL_F32).all())
    if isinstance(sel, slice) and sel == slice(None):
        w.mode_ok = ok
    return ok


TILE_WAVES = 64          # waves per tile: a tile's registers stay in the caches while the block runs over it
PARTS_PER_THREAD = 8     # a call split over threads is cut into this many parts per thread, taken as threads come free
PARALLEL_MIN = 1 << 14   # ALU and LDS wave-instructions in a call before it is split across threads (below: not worth
                         # a hand-off; an s_endpgm or a branch over many waves is not worth one)
_workers = None


CPUS = os.cpu_count() or 1


def threads() -> int:
    """AMDQ_SIM_JIT_THREADS: host threads compiled blocks may run on (default: up to 2, the CPUs there are, but 1 for
    STARVED_SECONDS after a split call whose other threads got next to no CPU: _run_parts)."""
    v = os.environ.get("AMDQ_SIM_JIT_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    if _starved[0] and _clock() < _starved[0]:
        return 1
    return max(1, min(2, CPUS))


# A split call waits for the parts its other threads took; when another process keeps their CPU busy, that wait is a
# scheduler's time slice, and the call is slower than on one thread (measured with another benchmark running on this
# 2-CPU machine: vadd 2^20 5.7 -> 7.1 ms, lds_reduce 12 -> 16, matmul 256 11 -> 15). So split calls stop for a while
# when the others took under STARVED_SHARE of the parts of a call (their fair share is 1 - 1 / threads).
STARVED_SHARE = 0.25
STARVED_SECONDS = 1.0
_starved = [0.0]                # until when (perf_counter) threads() is 1


def _pool(n: int):
    global _workers
    if _workers is None or _workers[0] != n:
        from concurrent.futures import ThreadPoolExecutor
        _workers = (n, ThreadPoolExecutor(max_workers=n - 1, thread_name_prefix="amdq-jit-run"))
    return _workers[1]


def _parallel(batch, ctx, blk: Block, fn, waves: np.ndarray, k: int, i: int, end: int, tile: int) -> bool:
    """Run the call on several threads when that cannot change anything: a block with no global memory access
    (nothing can miss or fault) over tiles of whole workgroups (each thread's LDS is its own), split at tile
    boundaries into parts the threads take as they come free (_run_parts); ctypes releases the interpreter lock for
    each part. False when the call does not qualify.

    (Fused blocks with loads, whose waves may run in any order too, were split the same way, their misses resolved
    after the parts: vadd 2^20 ran slower on two threads even when the second got 41% of the parts, 4.4-4.7 ->
    4.9-6.4 ms, the parts' CPU time 45% above one thread's: not kept.)"""
    if tile == 0 or k * (blk.work[end] - blk.work[i]) < PARALLEL_MIN or \
            any(x in blk.kinds for x in ("gload", "gstore", "sload")):
        return False
    nt = threads()
    if nt < 2:
        return False
    tiles = -(-k // tile)
    per = -(-tiles // min(tiles, PARTS_PER_THREAD * nt)) * tile
    parts = [(lo, min(k, lo + per)) for lo in range(0, k, per)]
    if len(parts) < 2:
        return False
    ctxs = getattr(ctx, "thread_ctx", None)
    if ctxs is None or len(ctxs) < len(parts):
        ctxs = ctx.thread_ctx = [ctx.ctx.copy() for _ in range(max(len(parts), PARTS_PER_THREAD * nt))]
        ctx.thread_ptr = [_addr(cc) for cc in ctxs]
    for cc in ctxs[:len(parts)]:
        cc[:] = ctx.ctx
    rs = [-1] * len(parts)
    _run_parts(_pool(nt), nt, fn, ctx.thread_ptr, waves.ctypes.data, parts, [(j, i) for j in range(len(parts))], rs,
               end)
    if any(r >= 0 for r in rs):         # cannot happen without global memory instructions
        raise AssertionError(f"a block without global memory access stopped at instruction {rs}")
    counts["parallel_calls"] += 1
    return min(rs)                      # (every part ends the same way: -1, -2 after a branch, -4 s_endpgm)


def _run_parts(pool, nt: int, fn, ptrs: list, wptr: int, parts: list, jobs: list, rs: list, end: int) -> None:
    """rs[j] = the block function over part j from its start, for each (j, start) of jobs, on nt threads: each
    takes the next job as it comes free (a busy CPU's share goes to another), and this one waits only for the jobs
    others took."""
    take = iter(jobs).__next__
    left, lock, finished = [len(jobs)], threading.Lock(), threading.Event()

    def run() -> int:
        did = 0
        while True:
            try:
                j, st = take()
            except StopIteration:
                return did
            lo, hi = parts[j]
            rs[j] = fn(ptrs[j], wptr + 8 * lo, hi - lo, st, end)
            did += 1
            with lock:
                left[0] -= 1
                if not left[0]:
                    finished.set()
    for _ in range(min(nt, len(jobs)) - 1):
        pool.submit(run)
    mine = run()
    finished.wait()
    if len(jobs) >= 4 and len(jobs) - mine < STARVED_SHARE * len(jobs):
        _starved[0] = _clock() + STARVED_SECONDS


def _tile(batch, blk: Block, sel) -> int:
    """Waves per tile for this call (0: all waves as one). A tile runs the whole block before the next starts, which
    differs from running every instruction for every wave only through memory other tiles write: so tiles are used
    for blocks without global stores, and blocks storing to LDS only when tiles are whole workgroups (every wave of
    the batch in the step: LDS belongs to one workgroup)."""
    if blk.gstores:
        return 0
    if blk.lstores and not isinstance(sel, slice):
        return 0
    wpg = batch.wpg
    return max(wpg, TILE_WAVES // wpg * wpg)


_BASE_PC, _TILE, _TILE_FROM, _START0, _MISS_TILE = (CTX[k] for k in ("base_pc", "tile", "tile_from", "start0",
                                                                       "miss_tile"))
(_LIMIT, _BUDGET, _EVERY, _VGPRS, _MODE_OK, _TILE_ALL, _CUR_BLK, _CUR_END, _STEPS, _NEXT_PC, _BRANCHED, _CHAINED,
 _PAR_INSTS) = (CTX[k] for k in ("limit", "budget", "every", "vgprs", "mode_ok", "tile_all", "cur_blk", "cur_end",
                                 "steps", "next_pc", "branched", "chained", "par_insts"))
NO_LIMIT = (1 << 63) - 1
CHAIN_WAVE_INSTRUCTIONS = 1 << 21   # per call at most (about 10-20 ms of compiled code): a host call stays short


def step(batch, icache, sel, pc: int, k: int, limit: int | None, budget: int = 1 << 62, skipped: int = 0,
         skipped_work: int = 0):
    """Run the compiled code at pc for the waves sel (see the module docstring): the block holding pc, then the
    blocks of its region every wave of the call goes on to together (block.CHAIN) while fewer than `budget`
    instructions ran. None: not here; an int: not here, nor before that PC while the interpreter runs straight on
    (lookup). Else (instruction steps, bytes the PC advanced, whether the PCs were set per wave, wave-instructions
    executed). `skipped`, `skipped_work`: as lookup's."""
    hit = lookup(icache, pc, batch.lanes == 64, k, batch.d.pgm_addr, skipped, skipped_work)
    if hit is None or hit.__class__ is int:
        return hit
    region, blk, i = hit
    w = batch.w
    part = region.part
    if part.vtop > w.dirty_v:           # (the registers its code may touch: what release clears)
        w.dirty_v = part.vtop
    if part.stop > w.dirty_s:
        w.dirty_s = part.stop
    every = isinstance(sel, slice)
    mode_ok = None
    if blk.floats:
        mode_ok = _mode_ok(w, sel)
        if not mode_ok:
            return None
    if blk.max_vgpr > w.v.shape[0]:
        return None
    n = len(blk.insts)
    end = n if limit is None else bisect.bisect_left(blk.pcs, limit, i)   # (the block's PCs ascend)
    if blk.barriers and not every:     # s_barrier passes only with every wave of the batch in the call
        end = min([end] + [b for b in blk.barriers if b >= i])
    if end == i:
        return None
    ctx = batch._jit_ctx
    if ctx is None:
        ctx = Context.of(batch)
    c = ctx.mv
    tile = _tile(batch, blk, sel)
    c[_BASE_PC], c[_TILE], c[_TILE_FROM], c[_START0] = region.root, tile, 0, i
    waves = ctx.all if every else np.ascontiguousarray(sel, np.int64)
    wptr = ctx.all_ptr if every else waves.ctypes.data
    chain = region.chain
    t0 = _clock()
    par = _parallel(batch, ctx, blk, region.fns[blk.pc], waves, k, i, end, tile)
    if par is not False:               # (one block on several threads: no chaining)
        counts["calls"] += 1
        done = (end - i) * k
        _charge(region.part, _clock() - t0, done)
        counts["wave_instructions"] += done
        if par == -4:
            w.barrier_pending = True
        if par != -1:
            return end - i, 0, True, done
        return end - i, (blk.pcs[end] if end < n else blk.end_pc) - pc, False, done
    if mode_ok is None and region.floats:
        mode_ok = _mode_ok(w, sel)
    c[_LIMIT] = NO_LIMIT if limit is None else min(limit, NO_LIMIT)
    c[_BUDGET] = max(1, min(budget, CHAIN_WAVE_INSTRUCTIONS // max(k, 1)))
    c[_EVERY], c[_VGPRS], c[_MODE_OK] = every, w.v.shape[0], bool(mode_ok)
    c[_TILE_ALL] = tile_all = _tile_all(batch)
    # blocks worth splitting over threads end the chain: the next call runs them in parallel (_parallel)
    c[_PAR_INSTS] = -(-PARALLEL_MIN // k) if k > tile_all and threads() > 1 else NO_LIMIT
    c[_CUR_BLK], c[_STEPS], c[_BRANCHED], c[_CHAINED] = region.index[blk.pc], 0, 0, 0
    start = i
    misses = 0
    while True:
        r = chain(ctx.ptr, wptr, k, start, end)
        if r < 0:
            break
        misses += 1
        if ctx.resolve():              # the range is in the table now: the same block resumes at r
            c[_TILE_FROM] = c[_MISS_TILE]
            start, end = r, c[_CUR_END]
            continue
        counts["misses"] += misses
        counts["calls"] += misses + 1 + c[_CHAINED]
        counts["chained"] += c[_CHAINED]
        _charge(region.part, _clock() - t0, 0)
        return _fallback(batch, ctx, region, sel, waves, pc, k, r, every)
    counts["misses"] += misses
    counts["calls"] += misses + 1 + c[_CHAINED]
    counts["chained"] += c[_CHAINED]
    steps = c[_STEPS]
    done = steps * k
    _charge(region.part, _clock() - t0, done)
    counts["wave_instructions"] += done
    if r == -2:                        # the waves went apart at a branch (their PCs are set)
        return steps, 0, True, done
    if r == -4:                        # s_endpgm: waves that end no longer hold back their workgroup's barrier
        w.barrier_pending = True
        return steps, 0, True, done
    if r == -3:
        q = c[_NEXT_PC]
    else:
        cur = region.blocks[c[_CUR_BLK]]
        e = c[_CUR_END]
        q = cur.pcs[e] if e < len(cur.insts) else cur.end_pc
    return _moved(w, sel, waves, every, bool(c[_BRANCHED]), pc, q, steps, done)


def _moved(w, sel, waves, every: bool, written: bool, pc: int, q: int, steps: int, done: int):
    """The step's result when every wave of the call is at q: the scheduler moves the PCs by q - pc, unless a
    branch already wrote some of them (then they are set to q here)."""
    if every or not written:
        return steps, q - pc, False, done
    w.pc[waves] = q
    return steps, 0, True, done


def _tile_all(batch) -> int:
    """Waves per tile for blocks that may run in tiles (_tile)."""
    wpg = batch.wpg
    return max(wpg, TILE_WAVES // wpg * wpg)


def _fallback(batch, ctx, region: Region, sel, waves, pc: int, k: int, r: int, every: bool):
    """The memory model would fault (or split the access) at instruction r of the current block: the interpreter
    runs it. Waves of earlier tiles finished the block, this tile's waves stopped before r, later tiles did not
    start it."""
    counts["fallbacks"] += 1
    c = ctx.ctx
    blk = region.blocks[int(c[_CUR_BLK])]
    i, end, tile, before = int(c[_START0]), int(c[_CUR_END]), int(c[_TILE]), int(c[_STEPS])
    if blk.fused:                       # (wave by wave: the tile that stopped is the one wave)
        tile = 1
    tb = int(c[_MISS_TILE])
    if tb == 0 and r == i and before == 0:
        return None
    t_end = min(k, tb + (tile or k))
    done = before * k + tb * (end - i) + (t_end - tb) * (r - i)
    counts["wave_instructions"] += done
    w = batch.w
    if tile == 0 or tb == 0 and t_end >= k:
        return _moved(w, sel, waves, every, bool(c[_BRANCHED]), pc, blk.pcs[r], before + r - i, done)
    n = len(blk.insts)
    stop = blk.pcs[end] if end < n else blk.end_pc
    idx = waves
    if blk.kinds[end - 1] != "branch" or end < n:
        w.pc[idx[:tb]] = stop
    w.pc[idx[tb:t_end]] = blk.pcs[r]
    w.pc[idx[t_end:]] = blk.pcs[i]
    return before + end - i, 0, True, done
