"""The glue between the scheduler and compiled blocks: find the block at a PC, call it, handle its misses.

`step(batch, icache, sel, pc, k, limit, budget)` is the scheduler's one hook (core.Batch.run): it runs the compiled
block holding `pc` for the waves `sel` (k of them), at most up to `limit` (the lowest PC of the other runnable
waves, so waves still merge where the interpreter would merge them), then goes on in compiled code from block to
block of the region (block.CHAIN) while every wave of the call is at one PC there, below `limit`, and fewer than
`budget` instructions (the scheduler's remaining max_steps) ran; it returns (instructions executed, bytes the PC
advanced, whether the PCs were set per wave, wave-instructions), or None when the interpreter must take this PC.

Regions: the first time a PC is asked for, the blocks reachable from it (straight-line code, fall-through and
branch targets, up to MAX_BLOCKS) are found by fetching through the ICache (so code comes through the memory
model as the interpreter's does) and compiled together, keyed by their bytes (compiled.py). A region
remembers the ICache lines it was decoded from; after an instruction-cache invalidate it is revalidated line
by line, the ICache's rule, and thrown away when any byte changed.

Instructions are translated only where the family's handler is RDNA3's own (the same builder object, so the
same semantics); anything else ends the block and runs in the interpreter.

Global memory goes through a table of translated ranges per batch (the memory model's `jit_span`: an
allocation of FlatMemory, a run of the GPU MMU). A lane outside the table stops the block before that
instruction (nothing of it done yet); the range is translated and the block resumes there, or, when the memory
model would fault, the interpreter runs the instruction and raises the same fault.
"""
from __future__ import annotations

import bisect
import ctypes
import os

import numpy as np

from ..core import PAGE
from .block import VERSION, Block, ModuleGen, finish
from .compiled import Compiled, get, region_key, submit
from .ir import CTX, CTX_SLOTS, ENDS, GFX9_KEYS, RDNA4_KEYS, WAITS, WORK, kind_of

MAX_BLOCKS = 128
MAX_INSTS = 512          # per block
RANGES = 64              # translated ranges per table
FULL_F32 = 0x30          # MODE.FP_DENORM f32 field: denormals kept
ROUND_F32 = 0x3          # MODE.FP_ROUND f32 field (0: round to nearest even)
counts = {"parallel_calls": 0, "calls": 0, "chained": 0, "wave_instructions": 0, "misses": 0, "fallbacks": 0}   # this process's (tests, benchmarks)


# Off unless asked for (AMDQ_SIM_JIT=1 or sync), for now: a kernel's cold compile costs ~0.4-1.4 s of CPU and
# the compiled code runs 1-6x the interpreter's speed, so for the short kernels most runs are made of (the test
# suite, the demo) the background compiles cost more than they save, and on a 2-core machine they compete with the
# simulated GPU itself (bench/shader.py and bench/kernels.py measure both). The default turns on once the JIT wins.
DEFAULT = "0"


def enabled() -> bool:
    """AMDQ_SIM_JIT=1 (or sync) runs basic blocks as compiled code; unset or 0 (off/no/false): the interpreter."""
    return os.environ.get("AMDQ_SIM_JIT", DEFAULT).strip().lower() not in ("0", "off", "no", "false", "")


def synchronous() -> bool:
    """AMDQ_SIM_JIT=sync: a region is compiled before its first use (tests, benchmarks); otherwise it is compiled
    on the JIT's worker thread while the interpreter runs it, and used from the first lookup after it is ready."""
    return os.environ.get("AMDQ_SIM_JIT", DEFAULT).strip().lower() == "sync"


class Region:
    def __init__(self, root: int, blocks: list[Block], compiled: Compiled, deps: tuple, gen: int, key: str):
        self.root, self.blocks, self.compiled, self.deps, self.gen, self.key = root, blocks, compiled, deps, gen, key
        self.fns = {b.pc: compiled.fns[b.name] for b in blocks}
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
    """Per ICache (one ISA family of one shader core): regions and where each PC sits in them."""

    def __init__(self):
        self.at: dict[tuple[int, bool], tuple[Region, Block, int]] = {}
        # PCs known not to start a block: (ICache generation, the lines the search read, None if it could not tell)
        self.none: dict[tuple[int, bool], tuple[int, tuple | None]] = {}
        self.regions: list[Region] = []
        self.pending: dict[tuple[int, bool], object] = {}   # PC -> the region being compiled for it (see _region)
        self.jobs: list = []

    def drop(self, region: Region) -> None:
        self.regions.remove(region)
        self.none.clear()               # a search that stopped at the region's PCs may find a block now
        for key in [k for k, v in self.at.items() if v[0] is region]:
            del self.at[key]


_shared_cache: dict[str, set] = {}
# regions of every ICache in the process, by (family, wave64, PC of each of their instructions): a new shader core
# (one per dispatch in standalone runs) reuses them once the code lines' bytes are checked equal
KNOWN: dict[tuple[str, bool, int], list[tuple[tuple, list[Block], Compiled, int, str]]] = {}


def _shared(isa) -> set:
    """Handler keys whose semantics in this family are RDNA3's: RDNA3's own builders; for RDNA4 every common key
    it does not override (rdna4.OVERRIDES; its VALU builders are made again from the same code), plus its wait
    instructions (no-ops in the simulator, as RDNA3's s_waitcnt); for CDNA3 the RDNA3 builders it takes over
    unchanged (cdna.table: not the gfx9 ones, v_cmpx, buffers, MODE access), which its 16-bit-destination
    and SDWA wrapper leaves alone for the 32-bit, non-SDWA forms the JIT translates (ir.kind_of)."""
    s = _shared_cache.get(isa.name)
    if s is None:
        from ..isa import for_isa
        base = for_isa("rdna3").handlers
        if isa.name == "rdna4":
            from .. import rdna4
            s = {k for k in isa.handlers if k in base and k not in rdna4.OVERRIDES}
            s |= {k for k in isa.handlers if k in WAITS or k in rdna4.WAITS}
            s |= {k for k in RDNA4_KEYS if k in isa.handlers}     # RDNA4 operations the emitter knows (ir.py)
        elif isa.name == "cdna3":
            from .. import cdna
            s = {k for k in isa.handlers if k in base and k not in cdna.H9 and
                 not k.startswith(("buffer_", "v_cmpx_", "s_getreg", "s_setreg"))}
            s |= {k for k in GFX9_KEYS if k in isa.handlers}       # gfx9 operations the emitter knows (ir.py)
        else:
            s = {k for k, b in isa.handlers.items() if base.get(k) is b}
        _shared_cache[isa.name] = s
    return s


def _discover(icache, root: int, wave64: bool, covered: dict, read: list | None = None) -> list[Block]:
    """The blocks reachable from root that are not covered yet; `read` collects the PCs whose instructions were
    looked at (None appended for one that did not decode)."""
    shared = _shared(icache.isa)
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
            try:
                st = icache.get(p, wave64)
            except Exception:           # an instruction that does not decode or build: the interpreter says so
                if read is not None:
                    read.append(None)
                break
            inst, control = st[1], st[2]
            if read is not None:
                read.append(p)
            k = kind_of(inst) if inst.key in shared else None
            if k is None:
                if not control:
                    work.append(p + inst.size)
                elif inst.target is not None:
                    work += [inst.target, p + inst.size]
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


def _region(cache: Cache, icache, pc: int, wave64: bool, read: list) -> bool:
    covered = {k: True for k in (*cache.at, *cache.pending)}
    blocks = _discover(icache, pc, wave64, covered, read)
    if not blocks:
        return False
    root = min(b.pc for b in blocks)
    insts = [i for b in blocks for i in b.insts]
    family = icache.isa.name
    key = region_key(family, wave64, root, sorted(insts, key=lambda i: i.pc), VERSION)
    gen = ModuleGen(64 if wave64 else 32, root)
    for b in blocks:
        b.name = f"blk_{b.pc - root:x}"

    def make_ir() -> str:
        for b in blocks:
            gen.add(b)
        return gen.text()
    deps = tuple({d for i in insts for d in icache.deps.get((i.pc, wave64), ())})
    lines = tuple((line, icache.lines[line][0]) for line, _ in deps)
    names = [b.name for b in blocks]
    job = get(key, names, make_ir) if synchronous() else submit(key, names, make_ir)
    if not synchronous() and not job.done():
        job = (job, lines, blocks, root, key, deps, family, insts, icache.gen)
        cache.jobs.append(job)
        for i in insts:
            cache.pending[(i.pc, wave64)] = job
        return True
    _finish(cache, icache, job if synchronous() else job.result(), lines, blocks, root, key, deps, family, insts, wave64)
    return True


def _finish(cache, icache, compiled, lines, blocks, root, key, deps, family, insts, wave64) -> None:
    entry = (lines, blocks, compiled, root, key)
    for i in insts:
        known = KNOWN.setdefault((family, wave64, i.pc), [])
        if len(known) >= 8:
            del known[0]
        known.append(entry)
    _install(cache, icache, entry, deps, wave64)


def _collect(cache: Cache, icache, wave64: bool) -> None:
    """Install the regions whose compilation finished (dropping those whose code changed meanwhile)."""
    for job in [j for j in cache.jobs if j[0].done()]:
        cache.jobs.remove(job)
        fut, lines, blocks, root, key, deps, family, insts, gen = job
        for pc_key in [k for k, v in cache.pending.items() if v is job]:
            del cache.pending[pc_key]
        try:
            compiled = fut.result()
        except Exception:              # a compile failure leaves these PCs to the interpreter
            for i in insts:
                cache.none[(i.pc, wave64)] = (icache.gen, None)
            continue
        if gen != icache.gen and not icache._valid(deps):
            cache.none.clear()          # searches that stopped at its PCs may find a block now
            continue
        _finish(cache, icache, compiled, lines, blocks, root, key, deps, family, insts, wave64)


def _install(cache: Cache, icache, entry, deps: tuple, wave64: bool) -> None:
    lines, blocks, compiled, root, key = entry
    region = Region(root, blocks, compiled, deps, icache.gen, key)
    cache.regions.append(region)
    for b in blocks:
        for j, i in enumerate(b.insts):
            cache.at.setdefault((i.pc, wave64), (region, b, j))


def _known(cache: Cache, icache, pc: int, wave64: bool) -> bool:
    """Install a region another ICache compiled for the same bytes at pc; False if there is none."""
    from ....errors import GPUFault
    for entry in reversed(KNOWN.get((icache.isa.name, wave64, pc), ())):
        deps = []
        try:
            for line, data in entry[0]:
                got, ver = icache._line(line)
                if got != data:
                    break
                deps.append((line, ver))
            else:
                _install(cache, icache, entry, tuple(deps), wave64)
                return True
        except GPUFault:
            continue
    return False


def lookup(icache, pc: int, wave64: bool):
    """(region, block, index) of the compiled code holding pc, compiling its region on first use; or None."""
    cache = getattr(icache, "jit", None)
    if cache is None:
        cache = icache.jit = Cache()
    key = (pc, wave64)
    hit = cache.at.get(key)
    if hit is not None:
        region = hit[0]
        if region.gen != icache.gen:
            if region.valid(icache):
                region.gen = icache.gen
            else:
                cache.drop(region)
                hit = None
        if hit is not None:
            return hit
    if _known_none(cache, icache, key):
        return None
    if cache.jobs:
        _collect(cache, icache, wave64)
        hit = cache.at.get(key)
        if hit is not None:
            return hit
    if key in cache.pending:
        return None
    if _known(cache, icache, pc, wave64):
        hit = cache.at.get(key)
        if hit is not None:
            return hit
    read: list = []
    if not _region(cache, icache, pc, wave64, read):
        _note_none(cache, icache, key, read)
        return None
    hit = cache.at.get(key)
    if hit is None and key not in cache.pending:
        _note_none(cache, icache, key, read)
    return hit


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
    """The core's tables for the memory's current TLB (fresh ones for a memory without a TLB)."""
    tlb = getattr(mem, "_tlb", None)
    if tlb is None:
        return Tables(None)
    t = getattr(batch.core, "_jit_tables", None)
    if t is None or t.tlb is not tlb:
        t = Tables(tlb)
        batch.core._jit_tables = t
    return t


class Context:
    """The context block of one batch: pointers to its register arrays, LDS, the translated-range tables. It is
    kept with the register arrays (WaveState.jit_ctx: a small batch's are reused by the next batch of its shape),
    and only what belongs to the batch is set again (bind)."""

    def __init__(self, batch):
        w = batch.w
        self.ctx = np.zeros(CTX_SLOTS, np.int64)
        self.all = np.arange(w.n, dtype=np.int64)
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
        c = self.ctx
        if w.lds is not self.lds:
            assert w.lds.flags.c_contiguous
            self.lds, c[CTX["lds"]] = w.lds, _addr(w.lds)
        if w.lds_base is not self.lds_base:
            self.lds_base, c[CTX["lds_base"]] = w.lds_base, _addr(w.lds_base)
        c[CTX["lds_size"]] = w.lds_size
        t = _tables(batch, w.mem)
        if t is not self.tables:
            self.tables = t
            c[CTX["rtab"]], c[CTX["wtab"]] = _addr(t.rtab), _addr(t.wtab)
        c[CTX["rcount"]], c[CTX["wcount"]] = t.count["rcount"], t.count["wcount"]
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
    m = w.mode[sel]
    if len(m) <= 16:                    # (a short list is cheaper than two array operations)
        return all(x & (FULL_F32 | ROUND_F32) == FULL_F32 for x in m.tolist())
    return bool(((m & (FULL_F32 | ROUND_F32)) == FULL_F32).all())


TILE_WAVES = 64          # waves per tile: a tile's registers stay in the caches while the block runs over it
PARALLEL_MIN = 1 << 14   # wave-instructions in a call before it is split across threads (below: not worth a hand-off)
_workers = None


CPUS = os.cpu_count() or 1


def threads() -> int:
    """AMDQ_SIM_JIT_THREADS: host threads compiled blocks may run on (default: up to 2, the CPUs there are)."""
    v = os.environ.get("AMDQ_SIM_JIT_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    return max(1, min(2, CPUS))


def _pool(n: int):
    global _workers
    if _workers is None or _workers[0] != n:
        from concurrent.futures import ThreadPoolExecutor
        _workers = (n, ThreadPoolExecutor(max_workers=n - 1, thread_name_prefix="amdq-jit-run"))
    return _workers[1]


def _parallel(batch, ctx, blk: Block, fn, waves: np.ndarray, k: int, i: int, end: int, tile: int) -> bool:
    """Run the call on several threads when that cannot change anything: a block with no global memory access
    (nothing can miss or fault) over tiles of whole workgroups (each thread's LDS is its own), split at tile
    boundaries; ctypes releases the interpreter lock for each part. False when the call does not qualify."""
    if tile == 0 or k * (end - i) < PARALLEL_MIN or any(x in blk.kinds for x in ("gload", "gstore", "sload")):
        return False
    nt = threads()
    if nt < 2:
        return False
    per = -(-k // nt)
    per = -(-per // tile) * tile
    parts = [(lo, min(k, lo + per)) for lo in range(0, k, per)]
    if len(parts) < 2:
        return False
    ctxs = getattr(ctx, "thread_ctx", None)
    if ctxs is None or len(ctxs) < len(parts):
        ctxs = ctx.thread_ctx = [ctx.ctx.copy() for _ in parts]
    for cc in ctxs:
        cc[:] = ctx.ctx
    pool = _pool(nt)
    futs = [pool.submit(fn, ctxs[j].ctypes.data, waves[lo:hi].ctypes.data, hi - lo, i, end)
            for j, (lo, hi) in enumerate(parts[1:], 1)]
    lo, hi = parts[0]
    rs = [fn(ctxs[0].ctypes.data, waves[lo:hi].ctypes.data, hi - lo, i, end)] + [f.result() for f in futs]
    if any(r >= 0 for r in rs):         # cannot happen without global memory instructions
        raise AssertionError(f"a block without global memory access stopped at instruction {rs}")
    counts["parallel_calls"] += 1
    return min(rs)                      # (every part ends the same way: -1, -2 after a branch, -4 s_endpgm)


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


def _chain(region: Region):
    """The region's chain function (block.CHAIN), looked up once."""
    fn = region.__dict__.get("chain")
    if fn is None:
        from .compiled import FN
        fn = region.chain = FN(region.compiled.engine.get_function_address("chain"))
        region.index = {b.pc: j for j, b in enumerate(region.blocks)}
        region.floats = any(b.floats for b in region.blocks)
    return fn


def step(batch, icache, sel, pc: int, k: int, limit: int | None, budget: int = 1 << 62):
    """Run the compiled code at pc for the waves sel (see the module docstring): the block holding pc, then the
    blocks of its region every wave of the call goes on to together (block.CHAIN) while fewer than `budget`
    instructions ran. None: not here. Else (instruction steps, bytes the PC advanced, whether the PCs were set per
    wave, wave-instructions executed)."""
    hit = lookup(icache, pc, batch.lanes == 64)
    if hit is None:
        return None
    region, blk, i = hit
    w = batch.w
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
    c = ctx.ctx
    tile = _tile(batch, blk, sel)
    c[_BASE_PC], c[_TILE], c[_TILE_FROM], c[_START0] = region.root, tile, 0, i
    waves = ctx.all if every else np.ascontiguousarray(sel, np.int64)
    wptr = ctx.all_ptr if every else waves.ctypes.data
    chain = _chain(region)
    par = _parallel(batch, ctx, blk, region.fns[blk.pc], waves, k, i, end, tile)
    if par is not False:               # (one block on several threads: no chaining)
        counts["calls"] += 1
        done = (end - i) * k
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
            start, end = r, int(c[_CUR_END])
            continue
        counts["misses"] += misses
        counts["calls"] += misses + 1 + int(c[_CHAINED])
        counts["chained"] += int(c[_CHAINED])
        return _fallback(batch, ctx, region, sel, waves, pc, k, r, every)
    counts["misses"] += misses
    counts["calls"] += misses + 1 + int(c[_CHAINED])
    counts["chained"] += int(c[_CHAINED])
    steps = int(c[_STEPS])
    done = steps * k
    counts["wave_instructions"] += done
    if r == -2:                        # the waves went apart at a branch (their PCs are set)
        return steps, 0, True, done
    if r == -4:                        # s_endpgm: waves that end no longer hold back their workgroup's barrier
        w.barrier_pending = True
        return steps, 0, True, done
    if r == -3:
        q = int(c[_NEXT_PC])
    else:
        cur = region.blocks[int(c[_CUR_BLK])]
        e = int(c[_CUR_END])
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
