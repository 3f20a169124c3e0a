"""Basic blocks -> one LLVM module: the phases of each block, the wave loops around them, memory and branches.

See ir.py for the function's contract. A phase is a run of ALU instructions (executed wave by wave), or one
memory instruction (its own loops over the waves), or the block's closing branch; a block that stores nothing
runs all its phases for one wave, then the next (fusable).
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ....hw.isa.decode import Half, Inst, Operand
from ..wave import SGPR_SPECIAL
from .ir import (CTX, DS_2, DS_LOAD, DS_STORE, EXEC, GWIDTH, LANE_OPS, NULL, VCC, WORK, Emitter, Fn, fuse, halves,
                 helpers, is_float, lanes_per_op)

CTX_SPARE = 22       # a context slot that stores of inactive lanes go to
_FIELDS = re.compile(r"%(?:vp|sp|sccp|emp|fullp|pcp|n|ldsp|lds_basep|lds_size|rtabp|rcount|wtabp|wcount|base_pc|statusp|"
                     r"modep)(?![\w.])")      # the context fields a block's prologue may load (ModuleGen.add)
_LDS_FIELDS = (("lds", "%ldsp", "ptr"), ("lds_base", "%lds_basep", "ptr"), ("lds_size", "%lds_size", "i64"))
GM_CHECK, GM_ACCESS = 1, 2   # a global access's shared function (ModuleGen._gm): check its lanes, make the access
SPLIT_LINES = 1000   # a region's IR is split for parallel compiles from this many lines of blocks on (ModuleGen;
                     # with the shared access functions and constant splats: vec_fma 38-51 -> 25-27 ms, vadd
                     # 30-37 -> 22-26 ms against 3000)
VERSION = 48          # bump when the generated code changes meaning or what translates (part of every cache key and record)


def code_version() -> str:
    """What the generated code depends on besides the instructions: VERSION and the lanes per vector operation."""
    return f"{VERSION}.w{lanes_per_op()}"


@dataclass
class Block:
    """Translatable instructions from `pc` on; `kinds[i]` as ir.kind_of says."""
    pc: int
    insts: list[Inst]
    kinds: list[str]
    pcs: list[int] = field(default_factory=list)
    floats: bool = False         # some instruction needs MODE: f32 denormals kept, round to nearest even
    gstores: bool = False        # writes global memory
    lstores: bool = False        # writes LDS
    max_vgpr: int = 0            # highest VGPR touched + 1 (a wave's allocation must hold it)
    max_sgpr: int = 0            # highest SGPR below VCC an operand names + 1 (WaveState.dirty_s; VCC on: always)
    barriers: list[int] = field(default_factory=list)   # indices of its s_barrier instructions
    work: list[int] = field(default_factory=list)       # ALU and LDS instructions before each index (and in all)
    fused: bool = False          # its phases run wave by wave inside one loop over the waves (fusable)
    name: str = ""

    def __post_init__(self):
        self.pcs = [i.pc for i in self.insts]

    @property
    def end_pc(self) -> int:
        """The PC after its last instruction (where a wave goes on when the block ends without a branch)."""
        return self.insts[-1].pc + self.insts[-1].size


def _vregs(inst: Inst) -> int:
    if inst.key == "v_dual":
        return max(_vregs(h) for h in halves(inst))
    top = 0
    ops = list(inst.dst) + list(inst.src)
    for o in (inst.addr, inst.data):
        if isinstance(o, Operand):
            ops.append(o)
        elif isinstance(o, tuple):
            ops.extend(x for x in o if isinstance(x, Operand))
    for o in ops:
        if isinstance(o, Operand) and o.kind == "v":
            top = max(top, o.reg + max(o.n, 1))
    if inst.key == "v_fmac_f32":
        top = max(top, inst.dst[0].reg + 1)
    k = inst.key
    if k.startswith("global_store_") and isinstance(inst.data, Operand):      # the data registers the store reads
        top = max(top, inst.data.reg + GWIDTH[k[13:]])
    elif k in DS_STORE:
        top = max(top, inst.data[0].reg + DS_STORE[k])
    elif k in DS_2 and "store" in k:
        top = max(top, *(d.reg + (2 if k.endswith("b64") else 1) for d in inst.data[:2]))
    return top


def _sregs(inst) -> int:
    """1 + the highest SGPR below VCC that an instruction's operands name (0: none): every field of it (or of a VOPD
    half) that holds an operand or a tuple of them. (The search calls it for every instruction: one loop over the
    fields, not a call per field.)"""
    return _sregs_of(getattr(inst, name, None) for name in type(inst).__slots__)


def _sregs_of(fields) -> int:
    """_sregs over values that are operands, (nested) tuples of them, VOPD halves, or anything else (no SGPR)."""
    top = 0
    for o in fields:
        c = o.__class__
        if c is Operand:
            if o.kind == "s" and o.reg < SGPR_SPECIAL:
                top = max(top, o.reg + max(o.n, 1))
        elif c is tuple or c is list:
            top = max(top, _sregs_of(o))
        elif c is Half:
            top = max(top, _sregs(o))
    return top


def finish(b: Block) -> Block:
    b.floats = any(k == "alu" and is_float(i) for i, k in zip(b.insts, b.kinds))
    b.max_vgpr = max((_vregs(i) for i in b.insts), default=0)
    b.max_sgpr = max((_sregs(i) for i in b.insts), default=0)
    b.gstores = "gstore" in b.kinds
    b.barriers = [j for j, k in enumerate(b.kinds) if k == "barrier"]
    b.lstores = any(k == "ds" and i.key.startswith("ds_store") for i, k in zip(b.insts, b.kinds))
    return shape(b)


def shape(b: Block) -> Block:
    """What follows from its kinds and flags alone (a block a record describes has no decoded instructions yet):
    its work counts and whether it is fused (the same for every block of those kinds and flags: _SHAPES)."""
    key = (tuple(b.kinds), b.gstores, b.lstores)
    got = _SHAPES.get(key) if not b.lstores else None      # (LDS stores: the phases read the instructions)
    if got is None:
        got = (list(itertools.accumulate((k == "alu" or k == "ds" for k in b.kinds), initial=0)), fusable(b))
        if not b.lstores:
            if len(_SHAPES) >= 4096:
                _SHAPES.clear()
            _SHAPES[key] = got
    b.work, b.fused = list(got[0]), got[1]
    return b


_SHAPES: dict[tuple, tuple[list[int], bool]] = {}


def _store(inst: Inst, kind: str) -> bool:
    return kind == "gstore" or kind == "ds" and inst.key.startswith("ds_store")


def splits_before(insts: list[Inst], kinds: list[str], inst: Inst, kind: str) -> bool:
    """A block ends before this instruction (runtime._discover): a block holds stores (global or LDS) only, or none
    (with the no-ops, waits and barriers among them), so the work between the stores makes fusable blocks."""
    if kind not in WORK:
        return False
    for i, k in zip(reversed(insts), reversed(kinds)):     # (the block so far is of one sort: its last worker says)
        if k in WORK:
            return _store(i, k) != _store(inst, kind)
    return False


def _phases(b: Block) -> list[tuple[str, list[int]]]:
    """The block's phases: (kind, instruction indices), a run of ALU instructions (with the no-ops, waits and
    barriers among them) or one memory instruction, branch or s_endpgm (a ds_store_2addr is two: one per address)."""
    phases: list[tuple[str, list[int]]] = []
    for i, k in enumerate(b.kinds):
        if k in ("alu", "nop", "wait", "barrier"):
            if phases and phases[-1][0] == "alu":
                phases[-1][1].append(i)
            else:
                phases.append(("alu", [i]))
        elif k == "ds" and b.lstores and b.insts[i].key.startswith("ds_store_2addr"):
            phases.append(("ds0", [i]))
            phases.append(("ds1", [i]))
        else:
            phases.append((k, [i]))
    return [(kind, idx) for kind, idx in phases if kind != "alu" or any(b.kinds[i] == "alu" for i in idx)]


def fusable(b: Block) -> bool:
    """Its phases can run wave by wave (each wave the whole block, then the next) instead of phase by phase (each
    phase for every wave): it stores nothing, to global memory or LDS, so no wave reads what another writes in it
    (the interpreter's order differs from the wave order only between waves' loads and ALU work, which commute; an
    s_barrier in it is a no-op, runtime.step). A wave whose access misses the table stops it there: the waves
    before it finished the block, the ones after it did not start (tiles of one wave). Worth it from two phases on
    (one wave loop instead of one per phase)."""
    return not b.gstores and not b.lstores and len(b.kinds) >= 2 and len(_phases(b)) >= 2


# The exported function: the block for tiles of ctx[tile] waves (all waves when 0), from wave ctx[tile_from] on; the
# first tile from instruction `start`, the others from ctx[start0] = the index the call began at. A tile that stops
# before a memory instruction leaves its first wave's index in ctx[miss_tile] (a fused block's: the wave that
# stopped, ctx[miss_sub] waves into the tile).
TILES = """define i32 @{name}(ptr %ctx, ptr %waves, i64 %nw, i32 %start, i32 %end) {{
entry:
  %pt = getelementptr i64, ptr %ctx, i64 {tile}
  %t0 = load i64, ptr %pt
  %z = icmp eq i64 %t0, 0
  %T = select i1 %z, i64 %nw, i64 %t0
  %pf = getelementptr i64, ptr %ctx, i64 {tile_from}
  %from = load i64, ptr %pf
  %ps = getelementptr i64, ptr %ctx, i64 {miss_tile}
  %psub = getelementptr i64, ptr %ctx, i64 {miss_sub}
  store i64 0, ptr %psub
  %pst = getelementptr i64, ptr %ctx, i64 {start0}
  br label %loop
loop:
  %tb = phi i64 [%from, %entry], [%tb1, %next]
  %st = phi i32 [%start, %entry], [%st0, %next]
  %res = phi i32 [-1, %entry], [%r, %next]
  %more = icmp ult i64 %tb, %nw
  br i1 %more, label %body, label %done
body:
  %left = sub i64 %nw, %tb
  %lt = icmp ult i64 %left, %T
  %cnt = select i1 %lt, i64 %left, i64 %T
  %wp = getelementptr i64, ptr %waves, i64 %tb
  %s0 = load i32, ptr %pst
{call}  %miss = icmp sge i32 %r, 0
  br i1 %miss, label %stop, label %next
stop:
  %sub = load i64, ptr %psub
  %tw = add i64 %tb, %sub
  store i64 %tw, ptr %ps
  ret i32 %r
next:
  %tb1 = add i64 %tb, %cnt
  %st0 = load i32, ptr %pst
  br label %loop
done:
  ret i32 %res
}}
"""


# How TILES calls the block: as it was asked, or (WHOLE_CALL, the second tier) through a copy of the block for the
# common call, every wave from the block's first instruction to its end, whose checks of where each instruction lies
# against the call's range fold away (the inliner prunes them: vadd's blocks take ~10% less CPU time, lds_reduce's
# ~8%, for about twice the -O2 compile time; measured on bench/shader.py's kernels).
CALL = """  %r = call i32 @{name}_b(ptr %ctx, ptr %wp, i64 %cnt, i32 %st, i32 %end, i32 %s0)
"""
_TILE_SLOTS = {k: CTX[k] for k in ("tile", "tile_from", "miss_tile", "miss_sub", "start0")}
# The fast tier's blocks share one tile loop, which calls the block it is given (a block's own copy of TILES is ~40
# lines of IR: ~7% of the compile of a region of many small blocks, such as the atomics kernels'); each exported
# block function passes its body.
SHARED_TILES = TILES.replace("define i32 @{name}(ptr %ctx", "define internal i32 @tiles(ptr %fn, ptr %ctx").format(
    name="tiles", **_TILE_SLOTS, call=CALL.replace("@{name}_b", "%fn").format(name=""))
THUNK = """define i32 @{name}(ptr %ctx, ptr %waves, i64 %nw, i32 %start, i32 %end) {{
  %r = call i32 @tiles(ptr @{name}_b, ptr %ctx, ptr %waves, i64 %nw, i32 %start, i32 %end)
  ret i32 %r
}}
"""
WHOLE_CALL = """  %f1 = icmp eq i32 %st, 0
  %f2 = icmp eq i32 %end, {n}
  %f3 = icmp eq i32 %s0, 0
  %fa = and i1 %f1, %f2
  %whole = and i1 %fa, %f3
  br i1 %whole, label %all, label %some
all:
  %ra = call i32 @{name}_b(ptr %ctx, ptr %wp, i64 %cnt, i32 0, i32 {n}, i32 0)
  br label %ran
some:
  %rs = call i32 @{name}_b(ptr %ctx, ptr %wp, i64 %cnt, i32 %st, i32 %end, i32 %s0)
  br label %ran
ran:
  %r = phi i32 [%ra, %all], [%rs, %some]
"""


# The exported chain function of a region: block ctx[cur_blk] over [start, end) (its TILES function), then, while
# every wave of the call is at one PC of a block of the region (a fall-through or a branch target), the rest of
# that block, as long as
#  - the block lies below ctx[limit] (the lowest PC of the other runnable waves: they still merge where the
#    interpreter merges them), holds no s_barrier unless ctx[every] (every wave of the batch in the call), needs no
#    MODE the waves lack (ctx[mode_ok]) and no more VGPRs than the waves have (ctx[vgprs]),
#  - fewer than ctx[budget] instructions ran (the scheduler's max_steps: a long loop still returns to the host),
#  - it is not a block runtime._parallel would split over threads (no memory access that can miss, tiles, at least
#    ctx[par_insts] ALU and LDS instructions): those return to the scheduler, whose next call runs them in parallel.
# It returns what a block returns (a miss index, -2 diverged after a branch, -4 s_endpgm) or -1: every wave is at
# the end of block ctx[cur_blk] (its instruction ctx[cur_end] when the block was cut short), -3: every wave is at
# ctx[next_pc] after a branch. ctx[steps] counts the instructions of the blocks finished (per wave), ctx[start0]
# is where the current block began, ctx[branched] whether a branch wrote the PCs, ctx[chained] the blocks entered.
CHAIN = """define i32 @chain(ptr %ctx, ptr %waves, i64 %nw, i32 %start, i32 %end) {{
entry:
  %pb = getelementptr i64, ptr %ctx, i64 {cur_blk}
  %b64 = load i64, ptr %pb
  %b0 = trunc i64 %b64 to i32
  %plim = getelementptr i64, ptr %ctx, i64 {limit}
  %limit = load i64, ptr %plim
  %pbud = getelementptr i64, ptr %ctx, i64 {budget}
  %budget = load i64, ptr %pbud
  %pev = getelementptr i64, ptr %ctx, i64 {every}
  %every = load i64, ptr %pev
  %pvg = getelementptr i64, ptr %ctx, i64 {vgprs}
  %vgprs = load i64, ptr %pvg
  %pmo = getelementptr i64, ptr %ctx, i64 {mode_ok}
  %modeok = load i64, ptr %pmo
  %pta = getelementptr i64, ptr %ctx, i64 {tile_all}
  %tileall = load i64, ptr %pta
  %ppar = getelementptr i64, ptr %ctx, i64 {par_insts}
  %parins = load i64, ptr %ppar
  %ppc = getelementptr i64, ptr %ctx, i64 {pc}
  %pcs = load ptr, ptr %ppc
  %pbase = getelementptr i64, ptr %ctx, i64 {base_pc}
  %base = load i64, ptr %pbase
  %pst0 = getelementptr i64, ptr %ctx, i64 {start0}
  %pend = getelementptr i64, ptr %ctx, i64 {cur_end}
  %psteps = getelementptr i64, ptr %ctx, i64 {steps}
  %steps0 = load i64, ptr %psteps
  %pnext = getelementptr i64, ptr %ctx, i64 {next_pc}
  %pbr = getelementptr i64, ptr %ctx, i64 {branched}
  %pch = getelementptr i64, ptr %ctx, i64 {chained}
  %ptile = getelementptr i64, ptr %ctx, i64 {tile}
  %pfrom = getelementptr i64, ptr %ctx, i64 {tile_from}
  br label %loop
loop:
  %b = phi i32 [%b0, %entry], [%nb, %go]
  %st = phi i32 [%start, %entry], [%nx, %go]
  %en = phi i32 [%end, %entry], [%nn, %go]
  %steps = phi i64 [%steps0, %entry], [%steps2, %go]
  %bz = zext i32 %b to i64
  store i64 %bz, ptr %pb
  %enz = zext i32 %en to i64
  store i64 %enz, ptr %pend
  switch i32 %b, label %c0 [{cases}]
{calls}
after:
  %r = phi i32 {phis}
  %miss = icmp sge i32 %r, 0
  br i1 %miss, label %out, label %ran
out:
  ret i32 %r
ran:
  %s0 = load i64, ptr %pst0
  %did = sub i64 %enz, %s0
  %steps2 = add i64 %steps, %did
  store i64 %steps2, ptr %psteps
  %ended = icmp eq i32 %r, -4
  br i1 %ended, label %out, label %alive
alive:
  %pn = getelementptr [0 x i32], ptr @ch_n, i64 0, i64 %bz
  %n = load i32, ptr %pn
  %cut = icmp ult i32 %en, %n
  br i1 %cut, label %fell_out, label %whole
fell_out:
  ret i32 -1
whole:
  %isbr = icmp eq i32 %r, -2
  br i1 %isbr, label %branched, label %fell
fell:
  %peo = getelementptr [0 x i64], ptr @ch_endoff, i64 0, i64 %bz
  %eo = load i64, ptr %peo
  %qf = add i64 %base, %eo
  br label %where
branched:
  store i64 1, ptr %pbr
  %w0 = load i64, ptr %waves
  %pq = getelementptr i64, ptr %pcs, i64 %w0
  %qb = load i64, ptr %pq
  br label %uni
uni:
  %i = phi i64 [1, %branched], [%i1, %same]
  %more = icmp ult i64 %i, %nw
  br i1 %more, label %uni_body, label %uniform
uni_body:
  %pwi = getelementptr i64, ptr %waves, i64 %i
  %wi = load i64, ptr %pwi
  %ppi = getelementptr i64, ptr %pcs, i64 %wi
  %pci = load i64, ptr %ppi
  %i1 = add i64 %i, 1
  %eq = icmp eq i64 %pci, %qb
  br i1 %eq, label %same, label %diverged
same:
  br label %uni
diverged:
  ret i32 -2
uniform:
  store i64 %qb, ptr %pnext
  br label %where
where:
  %q = phi i64 [%qf, %fell], [%qb, %uniform]
  %code = phi i32 [-1, %fell], [-3, %uniform]
  %spent = icmp sge i64 %steps2, %budget
  br i1 %spent, label %stop, label %find
find:
  %off = sub i64 %q, %base
  switch i64 %off, label %stop [{targets}]
{tcases}
check:
  %nb = phi i32 {tphis}
  %nx = phi i32 {xphis}
  %nbz = zext i32 %nb to i64
  %plo = getelementptr [0 x i64], ptr @ch_lastoff, i64 0, i64 %nbz
  %lo = load i64, ptr %plo
  %last = add i64 %base, %lo
  %below = icmp slt i64 %last, %limit
  %pfl = getelementptr [0 x i32], ptr @ch_flags, i64 0, i64 %nbz
  %fl = load i32, ptr %pfl
  %fl_f = and i32 %fl, 1
  %fl_b = and i32 %fl, 2
  %fl_g = and i32 %fl, 4
  %fl_l = and i32 %fl, 8
  %needmode = icmp ne i32 %fl_f, 0
  %nomode = icmp eq i64 %modeok, 0
  %badmode = and i1 %needmode, %nomode
  %hasbar = icmp ne i32 %fl_b, 0
  %some = icmp eq i64 %every, 0
  %badbar = and i1 %hasbar, %some
  %pvb = getelementptr [0 x i64], ptr @ch_vgprs, i64 0, i64 %nbz
  %vb = load i64, ptr %pvb
  %badv = icmp ugt i64 %vb, %vgprs
  %bad1 = or i1 %badmode, %badbar
  %bad2 = or i1 %bad1, %badv
  %notbelow = xor i1 %below, true
  %bad3 = or i1 %bad2, %notbelow
  %gst = icmp ne i32 %fl_g, 0
  %lst = icmp ne i32 %fl_l, 0
  %lsome = and i1 %lst, %some
  %notile = or i1 %gst, %lsome
  %tile = select i1 %notile, i64 0, i64 %tileall
  %fl_m = and i32 %fl, 16
  %memfree = icmp ne i32 %fl_m, 0
  %tiled = icmp ne i64 %tile, 0
  %pwk = getelementptr [0 x i32], ptr @ch_work, i64 0, i64 %nbz
  %wk = load i32, ptr %pwk
  %wk64 = zext i32 %wk to i64
  %heavy = icmp uge i64 %wk64, %parins
  %par1 = and i1 %memfree, %tiled
  %par = and i1 %par1, %heavy
  %bad = or i1 %bad3, %par
  br i1 %bad, label %stop, label %enter
enter:
  store i64 %tile, ptr %ptile
  store i64 0, ptr %pfrom
  %nxz = zext i32 %nx to i64
  store i64 %nxz, ptr %pst0
  %nch = load i64, ptr %pch
  %nch1 = add i64 %nch, 1
  store i64 %nch1, ptr %pch
  %pnn = getelementptr [0 x i32], ptr @ch_n, i64 0, i64 %nbz
  %nn = load i32, ptr %pnn
  br label %go
go:
  br label %loop
stop:
  ret i32 %code
}}

attributes #0 = {{ noinline }}
"""


_DEFINED = re.compile(r"^define [^@]*@([\w.]+)\(", re.M)


def _functions(text: str) -> dict[str, str]:
    """The functions text defines, by name: each one's text (up to the next definition)."""
    at = [m.start() for m in _DEFINED.finditer(text)]
    return {_DEFINED.match(text, i).group(1): text[i:j] for i, j in zip(at, at[1:] + [len(text)])}


def _decls(head: str) -> str:
    """What head says before its first function (the intrinsics' declarations)."""
    m = _DEFINED.search(head)
    return head[:m.start()] if m else head


def _called(head: str, rest: str) -> str:
    """The functions of head that rest calls (or a function called calls): an internal function nothing calls is
    still compiled (the fast tier runs no IR pass), ~1 ms for the NaN fix-ups alone."""
    funcs = _functions(head)
    keep, text = set(), rest
    while True:
        more = {n for n in funcs if n not in keep and f"@{n}(" in text}
        if not more:
            break
        keep |= more
        text = "".join(funcs[n] for n in more)
    return "".join(funcs[n] for n in funcs if n in keep)


def _declared(defined: str, body: str) -> str:
    """Declarations of the functions `defined` holds that body calls (defined in another part of the module)."""
    out = []
    for name, text in _functions(defined).items():
        if f"@{name}(" in body:
            line = text[:text.index("\n")]
            out.append("declare" + line[len("define"):line.rindex(")") + 1] + "\n")
    return "".join(out)


class ModuleGen:
    """Functions of one region (all blocks discovered from a root PC), as IR text."""

    def __init__(self, lanes: int, root: int, whole: bool = False, library=None):
        self.lanes, self.root = lanes, root
        self.whole = whole              # each block's whole call through its own copy (WHOLE_CALL)
        self.funcs: list[str] = []
        self.blocks: list[Block] = []
        self.fused = False              # emitting a fused block's phases (inside its wave loop)
        self.shared: dict[str, str] = {}    # the memory accesses' shared functions (_use): name -> text
        # where the first tier's shared functions are (library.py: its rename and declarations; the second tier
        # inlines its own): None keeps their texts in the module
        self.library = None if whole else library
        self.own_shared = self.library is None

    def header(self) -> str:
        L = self.lanes
        return "\n".join([
            f"declare <{L} x float> @llvm.fma.v{L}f32(<{L} x float>, <{L} x float>, <{L} x float>)",
            f"declare <{L} x float> @llvm.fabs.v{L}f32(<{L} x float>)",
            *(f"declare <{L} x i32> @llvm.{m}.v{L}i32(<{L} x i32>, <{L} x i32>)" for m in ("umin", "umax", "smin", "smax")),
            *(f"declare i32 @llvm.{m}.i32(i32, i32)" for m in ("umin", "umax", "smin", "smax")),
            "",
            "define internal i64 @lookup(ptr %tab, i64 %cnt, i64 %a, i64 %nb, ptr %hint) noinline {",
            "entry:",
            "  %end = add i64 %a, %nb",
            "  %wrap = icmp ult i64 %end, %a",
            "  br i1 %wrap, label %miss, label %loop",
            "loop:",
            "  %i = phi i64 [0, %entry], [%i1, %next]",
            "  %more = icmp ult i64 %i, %cnt",
            "  br i1 %more, label %body, label %miss",
            "body:",
            "  %o = mul i64 %i, 3",
            "  %plo = getelementptr i64, ptr %tab, i64 %o",
            "  %lo = load i64, ptr %plo",
            "  %o1 = add i64 %o, 1",
            "  %phi = getelementptr i64, ptr %tab, i64 %o1",
            "  %hi = load i64, ptr %phi",
            "  %o2 = add i64 %o, 2",
            "  %pd = getelementptr i64, ptr %tab, i64 %o2",
            "  %d = load i64, ptr %pd",
            "  %ge = icmp uge i64 %a, %lo",
            "  %le = icmp ule i64 %end, %hi",
            "  %in = and i1 %ge, %le",
            "  %i1 = add i64 %i, 1",
            "  br i1 %in, label %hit, label %next",
            "next:",
            "  br label %loop",
            "hit:",
            "  %h = add i64 %a, %d",
            "  store i64 %lo, ptr %hint",
            "  %hh = getelementptr i64, ptr %hint, i64 1",
            "  store i64 %hi, ptr %hh",
            "  %hd = getelementptr i64, ptr %hint, i64 2",
            "  store i64 %d, ptr %hd",
            "  ret i64 %h",
            "miss:",
            "  ret i64 0",
            "}",
            "",
            *(() if self.whole else (SHARED_TILES,)),
        ]) + helpers()

    def text_parts(self, parts: int) -> list[str]:
        """The module as up to `parts` modules compiled apart (on as many threads) and linked together
        (loader.link): the blocks, each with its wrapper, shared out by size; the first one holds the chain. The
        functions shared by the blocks (the header's helpers, the memory accesses' functions: _use) are the JIT
        library's when there is one (self.library: declared, under its names), else the first module's (which the
        others declare). One module below SPLIT_LINES lines of blocks (the threads would not pay for the split)."""
        head, chain, funcs, library = self.header(), self.chain(), self.funcs, self.library
        if library is not None:
            funcs = [library.rename(x, self.lanes) for x in funcs]
            chain = library.rename(chain, self.lanes)
        groups = [funcs[i:i + 2] for i in range(0, len(funcs), 2)]       # (a block's body, its wrapper)
        sizes = [sum(x.count("\n") for x in g) for g in groups]
        if library is not None:
            if parts <= 1 or len(groups) < 2 or sum(sizes) < SPLIT_LINES:
                rest = "\n".join(funcs) + "\n" + chain
                return [_decls(head) + library.declarations(rest, self.lanes) + rest]
            shared = ""
            declare = lambda body: library.declarations(body, self.lanes)      # noqa: E731
        else:
            rest = "\n".join([*self.shared.values(), *funcs]) + "\n" + chain
            if parts <= 1 or len(groups) < 2 or sum(sizes) < SPLIT_LINES:
                return [_decls(head) + _called(head, rest) + rest]
            shared = "".join(t.rstrip("\n") + "\n" for t in (_called(head, rest), *self.shared.values()) if t)
            shared = _DEFINED.sub(lambda m: m.group(0).replace("define internal", "define"), shared)   # (linked)
            declare = lambda body: _declared(shared, body)                       # noqa: E731
        load, members = [chain.count("\n") + shared.count("\n")] + [0] * (parts - 1), [[] for _ in range(parts)]
        for j in sorted(range(len(groups)), key=lambda j: -sizes[j]):
            k = min(range(parts), key=load.__getitem__)
            members[k].append(j)
            load[k] += sizes[j]
        out = []
        for k, mine in enumerate(members):
            if k and not mine:
                continue
            body = "\n".join(x for j in sorted(mine) for x in groups[j])
            if k == 0:
                here = {self.blocks[j].name for j in mine}
                decl = "\n".join(f"declare i32 @{b.name}(ptr, ptr, i64, i32, i32)" for b in self.blocks
                                  if b.name not in here)
                own = shared or declare(body + chain)
                out.append(_decls(head) + own + decl + "\n" + body + "\n" + chain)
            else:
                out.append(_decls(head) + declare(body) + body + "\n")
        return out

    # ---------------------------------------------------------------- the region's chain
    def chain(self) -> str:
        """@chain: run block ctx[cur_blk] from `start` to `end`, then, while every wave of the call is at the start
        of another block of the region, that whole block, and so on (see CHAIN)."""
        blocks = self.blocks
        if not blocks:
            return ""
        nb = len(blocks)

        def table(name: str, ty: str, vals) -> str:
            return f"@{name} = internal constant [{nb} x {ty}] [{', '.join(f'{ty} {v}' for v in vals)}]"

        def flags(b: Block) -> int:
            memory_free = not any(k in ("gload", "gstore", "sload") for k in b.kinds)
            return b.floats | bool(b.barriers) << 1 | b.gstores << 2 | b.lstores << 3 | memory_free << 4
        tables = [table("ch_n", "i32", (len(b.insts) for b in blocks)),
                  table("ch_work", "i32", (b.work[-1] for b in blocks)),
                  table("ch_endoff", "i64", (b.end_pc - self.root for b in blocks)),
                  table("ch_lastoff", "i64", (b.insts[-1].pc - self.root for b in blocks)),
                  table("ch_flags", "i32", (flags(b) for b in blocks)),
                  table("ch_vgprs", "i64", (b.max_vgpr for b in blocks))]
        calls = "\n".join(f"c{j}:\n  %r{j} = call i32 @{b.name}(ptr %ctx, ptr %waves, i64 %nw, i32 %st, i32 %en) #0\n"
                          f"  br label %after" for j, b in enumerate(blocks))
        cases = " ".join(f"i32 {j}, label %c{j}" for j in range(nb))
        phis = ", ".join(f"[%r{j}, %c{j}]" for j in range(nb))
        # where a block can go on: its fall-through and branch targets, wherever they sit in the region's blocks
        at = {i.pc: (j, x) for j, b in enumerate(blocks) for x, i in enumerate(b.insts)}
        dests = set()
        for b in blocks:
            last = b.insts[-1]
            dests.add(b.end_pc)
            if b.kinds[-1] == "branch":
                dests.add(last.target)
        dests = sorted(d for d in dests if d in at)
        targets = " ".join(f"i64 {d - self.root}, label %t{t}" for t, d in enumerate(dests))
        tcases = "\n".join(f"t{t}:\n  br label %check" for t in range(len(dests)))
        tphis = ", ".join(f"[{at[d][0]}, %t{t}]" for t, d in enumerate(dests))
        xphis = ", ".join(f"[{at[d][1]}, %t{t}]" for t, d in enumerate(dests))
        slot = {k: CTX[k] for k in ("cur_blk", "start0", "cur_end", "steps", "limit", "budget", "every", "vgprs",
                                    "mode_ok", "tile_all", "tile", "tile_from", "pc", "base_pc", "next_pc", "branched",
                                    "chained", "par_insts")}
        if not dests:                   # (no block goes on inside the region: stop at once)
            targets, tcases, tphis, xphis = "", "t0:\n  br label %check", "[0, %t0]", "[0, %t0]"
        return "\n".join(tables) + "\n" + CHAIN.format(calls=calls, cases=cases, phis=phis, targets=targets,
                                                       tcases=tcases, tphis=tphis, xphis=xphis, **slot)

    # ---------------------------------------------------------------- one block
    def add(self, b: Block) -> str:
        name = f"blk_{b.pc - self.root:x}"
        b.name = name
        self.blocks.append(b)
        f = Fn(self.lanes)
        f.direct = not self.whole               # (the first tier: no IR pass would promote the allocas)
        start = "%start_arg" if b.fused else "%start"
        f.lines.append(f"define internal i32 @{name}_b(ptr %ctx, ptr %waves, i64 %nw, i32 {start}, i32 %end, i32 %s0arg) "
                       "alwaysinline {")
        f.lines.append("entry:")
        prologue = []                   # (a context field's name, its two lines): those the body never names are dropped
        for key, ty in (("v", "ptr"), ("s", "ptr"), ("scc", "ptr"), ("em", "ptr"), ("full", "ptr"), ("pc", "ptr"),
                        ("n", "i64"), ("lds", "ptr"), ("lds_base", "ptr"), ("lds_size", "i64"), ("rtab", "ptr"),
                        ("rcount", "i64"), ("wtab", "ptr"), ("wcount", "i64"), ("base_pc", "i64"), ("status", "ptr"),
                        ("mode", "ptr")):
            p = f.op(f"getelementptr i64, ptr %ctx, i64 {CTX[key]}")
            var = f"%{key}{'p' if ty == 'ptr' else ''}"
            f.e(f"{var} = load {ty}, ptr {p}")
            prologue.append((var, len(f.lines) - 2))
        top = len(f.lines)
        f.e(f"%nl = mul i64 %n, {self.lanes}")
        f.e("%ctl = alloca i32")
        f.e("store i32 0, ptr %ctl")
        phases = _phases(b)
        nxt = f.t("ph")
        if b.fused:                     # one loop over the waves, each running every phase (see fusable)
            self._fused_head(f, nxt)
        else:
            self._span(f)
            f.e(f"br label {nxt}")
        for kind, idx in phases:
            f.label(nxt)
            nxt = f.t("ph")
            lo, hi = idx[0], idx[-1] + 1
            c1 = f.op(f"icmp slt i32 %start, {hi}")
            c2 = f.op(f"icmp sgt i32 %end, {lo}")
            go = f.op(f"and i1 {c1}, {c2}")
            body = f.t("do")
            f.e(f"br i1 {go}, label {body}, label {nxt}")
            f.label(body)
            if kind == "alu":
                self._alu_phase(f, b, idx)
            elif kind == "branch":
                self._wave_loop(f, lambda em, i=idx[0]: self._branch(em, b.insts[i], b))
                f.e("store i32 1, ptr %ctl")
            elif kind in ("gload", "gstore"):
                self._global(f, b, idx[0], kind)
            elif kind == "sload":
                self._sload(f, b, idx[0])
            elif kind == "end":
                self._wave_loop(f, lambda em, i=idx[0]: self._end(em, b.insts[i]))
                f.e("store i32 3, ptr %ctl")
            else:
                part = 1 if kind == "ds1" else 0
                self._wave_loop(f, lambda em, i=idx[0]: self._ds(em, b.insts[i], part))
            f.e(f"br label {nxt}")
        f.label(nxt)
        if b.fused:
            self._fused_tail(f)
        c = f.op("load i32, ptr %ctl")
        f.e(f"%ret = sub i32 -1, {c}")          # -1 fell through, -2 a branch set the PCs, -4 s_endpgm ended the waves
        f.e("ret i32 %ret")
        f.lines.append("}")
        named = set(_FIELDS.findall("\n".join(f.lines[top:])))
        for var, at in reversed(prologue):
            if var not in named:
                del f.lines[at:at + 2]
        f.lines[2:2] = f.allocas
        self.funcs.append("\n".join(f.lines))
        if self.whole:
            self.funcs.append(TILES.format(name=name, **_TILE_SLOTS, call=WHOLE_CALL.format(name=name, n=len(b.insts))))
        else:                           # (the fast tier: the tile loop is the module's one @tiles)
            self.funcs.append(THUNK.format(name=name))
        return name

    def _fused_head(self, f: Fn, first: str) -> None:
        """A fused block's wave loop: wave %fi of the call (%fw in the batch) runs from `start` (the first wave of the
        call) or from ctx[start0] (the others: where the call began), as the TILES function starts its tiles."""
        s0 = "%s0arg"
        f.e("br label %fl")
        f.label("%fl")
        f.e("%fi = phi i64 [0, %entry], [%fi1, %fn]")
        f.e(f"br i1 {f.op('icmp ult i64 %fi, %nw')}, label %fb, label %fd")
        f.label("%fb")
        f.e(f"%start = select i1 {f.op('icmp eq i64 %fi, 0')}, i32 %start_arg, i32 {s0}")
        self._span(f)
        f.e(f"%fw = load i64, ptr {f.op('getelementptr i64, ptr %waves, i64 %fi')}")
        self.fused = True
        f.e(f"br label {first}")

    @staticmethod
    def _span(f: Fn) -> None:
        """%span: the instructions of the call's range (%end - %start, 0 when %end < %start), for Fn.inside."""
        ok = f.op("icmp sle i32 %start, %end")
        f.e(f"%span = select i1 {ok}, i32 {f.op('sub i32 %end, %start')}, i32 0")

    def _fused_tail(self, f: Fn) -> None:
        self.fused = False
        f.e("br label %fn")
        f.label("%fn")
        f.e("%fi1 = add i64 %fi, 1")
        f.e("br label %fl")
        f.label("%fd")

    def _stop(self, f: Fn, i: int) -> None:
        """Return before instruction i (an access not in the table): a fused block says which wave stopped."""
        if self.fused:
            slot = CTX["miss_sub"]
            f.e(f"store i64 %fi, ptr {f.op(f'getelementptr i64, ptr %ctx, i64 {slot}')}")
        f.e(f"ret i32 {i}")

    def _wave_loop(self, f: Fn, body, tail=None) -> None:
        """for i in 0..nw: %w = waves[i]; body(emitter). In a fused block: body(the emitter of the loop's wave)."""
        if self.fused:
            body(_WaveEmitter(f, "%fw", "%fi"))
            return
        head, loop, done = f.t("L"), f.t("B"), f.t("D")
        pre = f.t("P")
        f.e(f"br label {pre}")
        f.label(pre)
        f.e(f"br label {head}")
        f.label(head)
        i = f.t("i")
        i1 = f.t("i")
        f.e(f"{i} = phi i64 [0, {pre}], [{i1}, {loop}_end]")
        c = f.op(f"icmp ult i64 {i}, %nw")
        f.e(f"br i1 {c}, label {loop}, label {done}")
        f.label(loop)
        wp = f.op(f"getelementptr i64, ptr %waves, i64 {i}")
        w = f.op(f"load i64, ptr {wp}")
        em = _WaveEmitter(f, w, i)
        body(em)
        f.e(f"br label {loop}_end")
        f.label(f"{loop}_end")
        f.e(f"{i1} = add i64 {i}, 1")
        f.e(f"br label {head}")
        f.label(done)

    def _alu_phase(self, f: Fn, b: Block, idx: list[int]) -> None:
        """Wave by wave: the SALU instructions one by one, each maximal stretch of VALU ones between them as runs
        (ir.fuse), each run one chunk loop."""
        def body(em: "_WaveEmitter"):
            valu: list[tuple[int, Inst]] = []

            def flush():
                for run in fuse(valu, f.L):
                    em.valu_run(run)
                valu.clear()
            for i in idx:
                inst, k = b.insts[i], b.kinds[i]
                if k != "alu":
                    continue
                if not inst.enc.startswith("SOP") and inst.key not in LANE_OPS:
                    valu.append((i, inst))
                    continue
                flush()
                go = f.inside(i)
                yes, no = f.t("x"), f.t("y")
                f.e(f"br i1 {go}, label {yes}, label {no}")
                f.label(yes)
                em.salu(inst)
                f.e(f"br label {no}")
                f.label(no)
            flush()
            if em.writes_exec:
                em.refresh_exec()
        self._wave_loop(f, body)

    # ---------------------------------------------------------------- branches
    def _branch(self, em: "_WaveEmitter", inst: Inst, b: Block) -> None:
        f, k = em.f, inst.key
        tgt = f.op(f"add i64 %base_pc, {inst.target - self.root}")
        nxt = f.op(f"add i64 %base_pc, {inst.pc + inst.size - self.root}")
        if k == "s_branch":
            pc = tgt
        else:
            if k in ("s_cbranch_scc0", "s_cbranch_scc1"):
                v = em.scc_get()
                z = f.op(f"icmp eq i32 {v}, 0")
            elif k in ("s_cbranch_vccz", "s_cbranch_vccnz"):
                v = em.mask_bits(Operand("s", VCC, 2 if f.L == 64 else 1))
                z = f.op(f"icmp eq {f.IT} {v}, 0")
            else:
                v = em.exec_bits()
                z = f.op(f"icmp eq {f.IT} {v}, 0")
            taken = z if k.endswith(("scc0", "vccz", "execz")) else f.op(f"xor i1 {z}, true")
            pc = f.op(f"select i1 {taken}, i64 {tgt}, i64 {nxt}")
        p = f.op(f"getelementptr i64, ptr %pcp, i64 {em.w}")
        f.e(f"store i64 {pc}, ptr {p}")

    # ---------------------------------------------------------------- global memory
    # ---------------------------------------------------------------- s_endpgm
    def _end(self, em: "_WaveEmitter", inst: Inst) -> None:
        """The wave is done (status DONE, its PC left on the s_endpgm, as the interpreter's handler leaves it)."""
        f = em.f
        f.e(f"store i8 2, ptr {f.op(f'getelementptr i8, ptr %statusp, i64 {em.w}')}, align 1")
        pc = f.op(f"add i64 %base_pc, {inst.pc - self.root}")
        f.e(f"store i64 {pc}, ptr {f.op(f'getelementptr i64, ptr %pcp, i64 {em.w}')}")

    # ---------------------------------------------------------------- scalar memory
    def _find(self, f: Fn, hint: str, tab: str, cnt: str, a: str, nbytes: int) -> str:
        """The host address of [a, a + nbytes) through the translated-range table (0: not in it): the range the
        last access hit (`hint`, an alloca of lo, hi, host - lo) first, else the table's search (which updates it)."""
        def at(j: int) -> str:
            return f.op(f"load i64, ptr {f.op(f'getelementptr i64, ptr {hint}, i64 {j}')}")
        lo, hi = at(0), at(1)
        e = f.op(f"add i64 {a}, {nbytes}")
        c1, c2, c3 = f.op(f"icmp uge i64 {a}, {lo}"), f.op(f"icmp ule i64 {e}, {hi}"), f.op(f"icmp uge i64 {e}, {a}")
        inr = f.op(f"and i1 {f.op(f'and i1 {c1}, {c2}')}, {c3}")
        fast, slow, join = f.t("hf"), f.t("hs"), f.t("hj")
        f.e(f"br i1 {inr}, label {fast}, label {slow}")
        f.label(fast)
        h1 = f.op(f"add i64 {a}, {at(2)}")
        f.e(f"br label {join}")
        f.label(slow)
        h2 = f.op(f"call i64 @lookup(ptr {tab}, i64 {cnt}, i64 {a}, i64 {nbytes}, ptr {hint})")
        f.e(f"br label {join}")
        f.label(join)
        return f.op(f"phi i64 [{h1}, {fast}], [{h2}, {slow}]")

    def _sload(self, f: Fn, b: Block, i: int) -> None:
        """s_load_b32..b512 wave by wave (smem.py): n dwords at (SBASE + offset + SOFFSET) & ~3 into the destination
        SGPRs. A wave whose range is not in the read table stops the block before the instruction (as a global
        load's lane); when the destination overlaps the address registers every wave is checked first (but in a
        fused block)."""
        inst = b.insts[i]
        d, sb, so = inst.dst[0], inst.sbase, inst.soffset
        nbytes = 4 * d.n
        hint = f.alloca("[3 x i64]")
        f.allocas.append(f"  store [3 x i64] [i64 1, i64 0, i64 0], ptr {hint}")
        srcs = {sb.reg, sb.reg + 1} | ({so.reg} if so is not None else set())
        # (a fused block's wave checks, reads and then writes: a stop leaves the wave's registers untouched and the
        # waves before it past the whole block, so the address registers are never read again once overwritten)
        two_pass = bool(srcs & set(range(d.reg, d.reg + d.n))) and not self.fused

        def addr(em: "_WaveEmitter") -> str:
            a = em.sget64(Operand("s", sb.reg, 2))
            if inst.offset:
                a = f.op(f"add i64 {a}, {inst.offset}")       # (signed)
            if so is not None:
                a = f.op(f"add i64 {a}, {f.op(f'zext i32 {em.sget(so)} to i64')}")
            return f.op(f"and i64 {a}, -4")

        def wave(em: "_WaveEmitter", check: bool, access: bool) -> None:
            a = addr(em)
            h = self._find(f, hint, "%rtabp", "%rcount", a, nbytes)
            if check:
                bad, ok = f.t("m"), f.t("k")
                f.e(f"br i1 {f.op(f'icmp eq i64 {h}, 0')}, label {bad}, label {ok}")
                f.label(bad)
                for slot, val in (("miss_addr", a), ("miss_bytes", str(nbytes)), ("miss_write", "0")):
                    f.e(f"store i64 {val}, ptr {f.op(f'getelementptr i64, ptr %ctx, i64 {CTX[slot]}')}")
                self._stop(f, i)
                f.label(ok)
            if access:
                hp = f.op(f"inttoptr i64 {h} to ptr")
                vals = [f.op(f"load i32, ptr {f.op(f'getelementptr i8, ptr {hp}, i64 {4 * j}')}, align 1")
                        for j in range(d.n)]
                for j, v in enumerate(vals):
                    em.sput(d.reg + j, v)
        if two_pass:
            self._wave_loop(f, lambda em: wave(em, True, False))
            self._wave_loop(f, lambda em: wave(em, False, True))
        else:
            self._wave_loop(f, lambda em: wave(em, True, True))

    def _global(self, f: Fn, b: Block, i: int, kind: str) -> None:
        """global_load/store_b32..b128 wave by wave, each wave through the access's shared function (_gm); a lane
        outside the translated ranges stops the block before the instruction. A load whose destination is not its
        address runs in one pass, each lane checked as it goes (a stop part-way leaves registers the resumed or
        interpreted instruction writes again with the same values); any other access checks every lane of the wave
        first, then accesses."""
        inst = b.insts[i]
        words = GWIDTH[inst.key.split("_")[-1]]
        write = kind == "gstore"
        hint = f.alloca("[3 x i64]")           # the range the last lane hit: (lo, hi, host - lo)
        f.allocas.append(f"  store [3 x i64] [i64 1, i64 0, i64 0], ptr {hint}")
        sb = inst.saddr is not None and inst.saddr.reg != NULL
        name = self._gm(words, write, sb)
        data = inst.data.reg if write else inst.dst[0].reg

        def phase(mode: int):
            def wave(em):
                base = em.sget64(Operand("s", inst.saddr.reg, 2)) if sb else "0"
                ok = f.op(f"call i1 @{name}(ptr %ctx, i64 {em.w}, i64 {inst.addr.reg}, i64 {data}, i64 {base}, "
                          f"i64 {inst.offset & (2 ** 64 - 1)}, ptr {hint}, i32 {mode})")
                if mode & GM_CHECK:
                    bad, good = f.t("m"), f.t("k")
                    f.e(f"br i1 {ok}, label {good}, label {bad}")
                    f.label(bad)
                    self._stop(f, i)
                    f.label(good)
            return wave
        an = 1 if sb else 2
        if not write and (data + words <= inst.addr.reg or inst.addr.reg + an <= data):
            self._wave_loop(f, phase(GM_CHECK | GM_ACCESS))
        else:                                   # (in a fused block: both passes for the loop's wave)
            self._wave_loop(f, phase(GM_CHECK))
            self._wave_loop(f, phase(GM_ACCESS))

    def _begin_shared(self, name: str, ret: str, params: str, fields: tuple) -> tuple[Fn, "_WaveEmitter", Callable]:
        """A shared function's start: (its Fn, an emitter bound to its wave %w, row(reg, j): the wave's row of VGPR
        reg + j), with the context fields (key, variable, type) and %nl loaded; noinline in the fast tier, inlined
        at -O2."""
        f = Fn(self.lanes)
        f.lines.append(f"define internal {ret} @{name}(ptr %ctx, i64 %w, {params}) "
                       f"{'alwaysinline' if self.whole else 'noinline'} {{")
        f.lines.append("entry:")
        for key, var, ty in (("v", "%vp", "ptr"), ("s", "%sp", "ptr"), ("n", "%n", "i64"), *fields):
            f.e(f"{var} = load {ty}, ptr {f.op(f'getelementptr i64, ptr %ctx, i64 {CTX[key]}')}")
        f.e(f"%nl = mul i64 %n, {self.lanes}")
        em = _WaveEmitter(f, "%w", "0")

        def row(reg: str, j: int = 0) -> str:
            r = f.op(f"add i64 {reg}, {j}") if j else reg
            off = f.op(f"mul i64 %nl, {r}")
            return f.op(f"getelementptr i32, ptr %vp, i64 {f.op(f'add i64 {off}, {em.wl}')}")
        return f, em, row

    @staticmethod
    def _end_shared(f: Fn, ret: str) -> str:
        """A shared function's end (returning `ret`), as text."""
        f.e(f"ret {ret}")
        f.lines.append("}")
        f.lines[2:2] = f.allocas
        return "\n".join(f.lines)

    def _use(self, name: str, make) -> str:
        """`name`, a shared function of the module: its text made by make() the first time a block calls it (unless
        the JIT library holds it, self.library)."""
        if name not in self.shared:
            self.shared[name] = make() if self.own_shared else ""
        return name

    def _gm(self, words: int, write: bool, sb: bool) -> str:
        """The name of the module's shared function for one kind of global access (_gm_text)."""
        name = f"gm_{'w' if write else 'r'}{words}{'s' if sb else 'v'}"
        return self._use(name, lambda: self._gm_text(name, words, write, sb))

    def _gm_text(self, name: str, words: int, write: bool, sb: bool) -> str:
        """i1 @name(ctx, wave, address VGPR, data VGPR, scalar base, offset, hint, mode): one wave's global access
        of `words` dwords (a store if `write`; the address a VGPR pair, or one VGPR + the scalar base if `sb`). mode
        GM_CHECK: every active lane checked to be in the translated ranges; GM_ACCESS: the access (checked before);
        both: each lane checked, then accessed. false: a lane is outside the table (the context's miss slots say
        where; its access and those of the lanes after it not made). Tiers, the first that fits: a single-dword
        wave on one run of consecutive dwords inside the last-hit range (`hint`, as _find) as vector accesses, or, a
        load, on one address as one read broadcast; then chunk by chunk: a chunk that is one run inside the range as
        one vector access; every active lane inside it, gathered or scattered; else lane by lane through the table.
        (The fast tier calls it; the -O2 tier inlines it, its mode a constant.)"""
        nbytes = 4 * words
        tab, cnt = ("%wtabp", "%wcount") if write else ("%rtabp", "%rcount")
        fields = (("wtab" if write else "rtab", tab, "ptr"), ("wcount" if write else "rcount", cnt, "i64"))
        params = "i64 %ra, i64 %rd, i64 %sbase, i64 %off, ptr %hint, i32 %mode"
        f, em, row = self._begin_shared(name, "i1", params, fields)
        W, VT, MT = f.W, f.VT, f.MT
        V64 = f"<{W} x i64>"
        f.e(f"%chk = icmp ne i32 {f.op(f'and i32 %mode, {GM_CHECK}')}, 0")
        f.e(f"%acc = icmp ne i32 {f.op(f'and i32 %mode, {GM_ACCESS}')}, 0")
        alo = row("%ra", 0)
        ahi = None if sb else row("%ra", 1)
        data = [row("%rd", j) for j in range(words)]
        e = em.exec_bits()

        def at(p: str, j) -> str:
            return f.op(f"getelementptr i32, ptr {p}, i64 {j}")

        def chunk(p: str) -> str:
            return at(p, f.op(f"shl i64 {em.c}, {f.LOGW}"))

        def hint_at(j: int) -> str:
            return f.op(f"load i64, ptr {f.op(f'getelementptr i64, ptr %hint, i64 {j}')}")

        def when(cond: str, then) -> None:
            yes, no = f.t("x"), f.t("y")
            f.e(f"br i1 {cond}, label {yes}, label {no}")
            f.label(yes)
            then()
            f.e(f"br label {no}")
            f.label(no)

        def base(lo0: str, hi0: str | None) -> str:
            """The 64-bit address of the lane whose low address half is lo0 (and high half hi0)."""
            a = f.op(f"zext i32 {lo0} to i64")
            if sb:
                a = f.op(f"add i64 {a}, %sbase")
            else:
                hs = f.op(f"shl i64 {f.op(f'zext i32 {hi0} to i64')}, 32")
                a = f.op(f"or i64 {a}, {hs}")
            return f.op(f"add i64 {a}, %off")

        if words == 1 and f.NC > 1:
            self._gm_wave(f, em, write, alo, ahi, data[0], e, hint_at, base, when)

        def lane(l: str) -> None:
            lo = f.op(f"load i32, ptr {at(alo, l)}, align 4")
            a = base(lo, None if sb else f.op(f"load i32, ptr {at(ahi, l)}, align 4"))
            h = self._find(f, "%hint", tab, cnt, a, nbytes)
            bad, ok = f.t("m"), f.t("k")
            miss = f.op(f"and i1 %chk, {f.op(f'icmp eq i64 {h}, 0')}")
            f.e(f"br i1 {miss}, label {bad}, label {ok}")
            f.label(bad)
            for slot, val in (("miss_addr", a), ("miss_bytes", str(nbytes)), ("miss_write", str(int(write)))):
                f.e(f"store i64 {val}, ptr {f.op(f'getelementptr i64, ptr %ctx, i64 {CTX[slot]}')}")
            f.e("ret i1 false")
            f.label(ok)

            def access():
                hp = f.op(f"inttoptr i64 {h} to ptr")
                lanes = [at(d, l) for d in data]
                if write:
                    vals = [f.op(f"load i32, ptr {q}, align 4") for q in lanes]
                    for j, v in enumerate(vals):
                        f.e(f"store i32 {v}, ptr {f.op(f'getelementptr i8, ptr {hp}, i64 {4 * j}')}, align 1")
                else:
                    vals = [f.op(f"load i32, ptr {f.op(f'getelementptr i8, ptr {hp}, i64 {4 * j}')}, align 1")
                            for j in range(words)]
                    for q, v in zip(lanes, vals):
                        f.e(f"store i32 {v}, ptr {q}, align 4")
            when("%acc", access)

        def body() -> None:
            m = em.mask_vec(e)
            lo = f.op(f"load {VT}, ptr {chunk(alo)}, align 4")
            hi = None if sb else f.op(f"load {VT}, ptr {chunk(ahi)}, align 4")
            after = None
            if words == 1:          # the common chunk: every lane active on consecutive dwords inside the range
                lo0 = f.op(f"extractelement {VT} {lo}, i64 0")
                ramp = "<" + ", ".join(f"i32 {4 * j}" for j in range(W)) + ">"
                same = f.op(f"icmp eq {VT} {lo}, {f.op(f'add {VT} {f.splat(lo0)}, {ramp}')}")
                hi0 = None
                if not sb:
                    hi0 = f.op(f"extractelement {VT} {hi}, i64 0")
                    same = f.op(f"and {MT} {same}, {f.op(f'icmp eq {VT} {hi}, {f.splat(hi0)}')}")
                a0 = base(lo0, hi0)
                same = f.op(f"and {MT} {same}, {m}")
                full = f.op(f"icmp eq {f.MI} {f.op(f'bitcast {MT} {same} to {f.MI}')}, -1")
                nowrap, inside = self._fits(f, lo0, a0, 4 * W, hint_at)
                fast = f.op(f"and i1 {f.op(f'and i1 {full}, {nowrap}')}, {inside}")
                yes, no, after = f.t("qf"), f.t("qs"), f.t("qj")
                f.e(f"br i1 {fast}, label {yes}, label {no}")
                f.label(yes)

                def vector():
                    p = f.op(f"inttoptr i64 {f.op(f'add i64 {a0}, {hint_at(2)}')} to ptr")
                    if write:
                        f.e(f"store {VT} {f.op(f'load {VT}, ptr {chunk(data[0])}, align 4')}, ptr {p}, align 1")
                    else:
                        f.e(f"store {VT} {f.op(f'load {VT}, ptr {p}, align 1')}, ptr {chunk(data[0])}, align 4")
                when("%acc", vector)
                f.e(f"br label {after}")
                f.label(no)
            a = f.op(f"zext {VT} {lo} to {V64}")
            if sb:
                a = f.op(f"add {V64} {a}, {f.splat('%sbase', 'i64')}")
            else:
                hs = f.op(f"shl {V64} {f.op(f'zext {VT} {hi} to {V64}')}, {f.splat('32', 'i64')}")
                a = f.op(f"or {V64} {a}, {hs}")
            a = f.op(f"add {V64} {a}, {f.splat('%off', 'i64')}")
            ae = f.op(f"add {V64} {a}, {f.splat(str(nbytes), 'i64')}")
            c1 = f.op(f"icmp uge {V64} {a}, {f.splat(hint_at(0), 'i64')}")
            c2 = f.op(f"icmp ule {V64} {ae}, {f.splat(hint_at(1), 'i64')}")
            c3 = f.op(f"icmp uge {V64} {ae}, {a}")
            inr = f.op(f"and {MT} {f.op(f'and {MT} {c1}, {c2}')}, {c3}")
            notm = f.op(f"xor {MT} {m}, {f.splat('true', 'i1')}")
            ok = f.op(f"bitcast {MT} {f.op(f'or {MT} {inr}, {notm}')} to {f.MI}")
            allok = f.op(f"icmp eq {f.MI} {ok}, -1")
            if write and words > 1:     # multi-dword stores go lane by lane (the interpreter's order)
                allok = f.op(f"and i1 {allok}, {f.op('xor i1 %acc, true')}")
            fast, slow, join = f.t("gf"), f.t("gs"), f.t("gj")
            f.e(f"br i1 {allok}, label {fast}, label {slow}")
            f.label(fast)

            def gathered():
                hp = f.op(f"add {V64} {a}, {f.splat(hint_at(2), 'i64')}")
                for j in range(words):
                    hj = f.op(f"add {V64} {hp}, {f.splat(str(4 * j), 'i64')}") if j else hp
                    p = chunk(data[j])
                    if write:
                        self._scatter(f, f.op(f"load {VT}, ptr {p}, align 4"), hj, m)
                    else:
                        old = f.op(f"load {VT}, ptr {p}, align 4")
                        f.e(f"store {VT} {self._gather(f, hj, m, old)}, ptr {p}, align 4")
            when("%acc", gathered)
            f.e(f"br label {join}")
            f.label(slow)
            em.chunk_lanes(e, lane)
            f.e(f"br label {join}")
            f.label(join)
            if after is not None:
                f.e(f"br label {after}")
                f.label(after)
        em.chunk_loop(body)
        return self._end_shared(f, "i1 true")

    def _gm_wave(self, f: Fn, em, write: bool, alo: str, ahi: str | None, dst: str, e: str, hint_at, base,
                 when) -> None:
        """_gm_text's first tier: a single-dword access of the whole wave, every lane active, whose addresses are one
        run of consecutive dwords (the high halves equal, or the scalar base; the low ones lane 0's + 4 x the lane
        without a 32-bit wrap) inside the last-hit range, as vector accesses; a load whose lanes all read one
        address (a row's element in a matrix-vector loop) as one read broadcast. Then no lane can miss the table
        or fault, as the chunks' check finds for each chunk. Returns true from the function when it applied."""
        VT, W, L, MT = f.VT, f.W, f.L, f.MT
        lo_first = f.op(f"load i32, ptr {f.op(f'getelementptr i32, ptr {alo}, i64 0')}, align 4")
        lo_last = f.op(f"load i32, ptr {f.op(f'getelementptr i32, ptr {alo}, i64 {L - 1}')}, align 4")
        full = f.op(f"icmp eq {f.IT} {e}, -1")
        # (first the last lane's low address against the first's: a wave whose lanes are not one run, as in a tile
        # of rows, goes to the chunks for a few instructions more)
        for stride in ((4, 0) if not write else (4,)):
            span = f.op(f"icmp eq i32 {f.op(f'sub i32 {lo_last}, {lo_first}')}, {stride * (L - 1)}")
            test, done = f.t("wt"), f.t("wn")
            f.e(f"br i1 {f.op(f'and i1 {full}, {span}')}, label {test}, label {done}")
            f.label(test)
            same, hi0 = None, None
            sp = f.splat(lo_first)
            for c in range(f.NC):
                lo = f.op(f"load {VT}, ptr {f.op(f'getelementptr i32, ptr {alo}, i64 {c * W}')}, align 4")
                ramp = "<" + ", ".join(f"i32 {stride * (c * W + j)}" for j in range(W)) + ">"
                eq = f.op(f"icmp eq {VT} {lo}, {f.op(f'add {VT} {sp}, {ramp}') if stride else sp}")
                same = eq if same is None else f.op(f"and {MT} {same}, {eq}")
            if ahi is not None:
                hi0 = f.op(f"load i32, ptr {ahi}, align 4")
                for c in range(f.NC):
                    hi = f.op(f"load {VT}, ptr {f.op(f'getelementptr i32, ptr {ahi}, i64 {c * W}')}, align 4")
                    same = f.op(f"and {MT} {same}, {f.op(f'icmp eq {VT} {hi}, {f.splat(hi0)}')}")
            a0 = base(lo_first, hi0)
            allsame = f.op(f"icmp eq {f.MI} {f.op(f'bitcast {MT} {same} to {f.MI}')}, -1")
            nowrap, inside = self._fits(f, lo_first, a0, 4 * L if stride else 4, hint_at)
            go, no = f.t("wf"), f.t("ws")
            fits = f.op(f"and i1 {nowrap}, {inside}")
            f.e(f"br i1 {f.op(f'and i1 {allsame}, {fits}')}, label {go}, label {no}")
            f.label(go)

            def access(stride=stride, a0=a0):
                p = f.op(f"inttoptr i64 {f.op(f'add i64 {a0}, {hint_at(2)}')} to ptr")
                if not stride:
                    v = f.splat(f.op(f"load i32, ptr {p}, align 1"))
                for c in range(f.NC):
                    r = f.op(f"getelementptr i32, ptr {dst}, i64 {c * W}")
                    q = f.op(f"getelementptr i8, ptr {p}, i64 {4 * W * c}")
                    if write:
                        f.e(f"store {VT} {f.op(f'load {VT}, ptr {r}, align 4')}, ptr {q}, align 1")
                    elif stride:
                        f.e(f"store {VT} {f.op(f'load {VT}, ptr {q}, align 1')}, ptr {r}, align 4")
                    else:
                        f.e(f"store {VT} {v}, ptr {r}, align 4")
            when("%acc", access)
            f.e("ret i1 true")
            f.label(no)
            f.e(f"br label {done}")
            f.label(done)

    @staticmethod
    def _fits(f: Fn, lo0: str, a0: str, n: int, hint_at) -> tuple[str, str]:
        """(the low address half lo0 + n does not wrap, [a0, a0 + n) lies inside the last-hit range) as i1 values."""
        nowrap = f.op(f"icmp ule i32 {lo0}, {2 ** 32 - n}")
        lo_, hi_ = hint_at(0), hint_at(1)
        span = f.op(f"sub i64 {hi_}, {lo_}")
        big = f.op(f"and i1 {f.op(f'icmp ule i64 {lo_}, {hi_}')}, {f.op(f'icmp uge i64 {span}, {n}')}")
        inr = f.op(f"icmp ule i64 {f.op(f'sub i64 {a0}, {lo_}')}, {f.op(f'sub i64 {span}, {n}')}")
        return nowrap, f.op(f"and i1 {big}, {inr}")

    # ---------------------------------------------------------------- LDS
    def _ds(self, em: "_WaveEmitter", inst: Inst, part: int) -> None:
        f, k = em.f, inst.key
        if k in DS_2:
            size = 8 if k.endswith("b64") else 4
            unit = size * (64 if "stride64" in k else 1)
            offs = (inst.offset0 * unit, inst.offset1 * unit)
            base_off = 0
        else:
            size = 4 * (DS_LOAD.get(k) or DS_STORE[k])
            offs = (0,)
            base_off = inst.offset
        nw = size // 4
        load = "load" in k
        if load:                            # (the module's shared function for this shape of load, _dsl_text)
            name = f"dsl_{nw}_{len(offs)}"
            self._use(name, lambda: self._dsl_text(name, nw, len(offs)))
            o1 = offs[1] if len(offs) > 1 else 0
            f.e(f"call void @{name}(ptr %ctx, i64 {em.w}, i64 {inst.addr.reg}, i64 {inst.dst[0].reg}, "
                f"i32 {base_off & 0xFFFFFFFF}, i32 {offs[0]}, i32 {o1})")
            return
        regs = [d.reg for d in inst.data]
        sel = [(offs[part], regs[part])] if k in DS_2 else [(0, regs[0])]
        if nw == 1:                         # a single-dword store: the module's shared function (_dss_text)
            self._use("dss", self._dss_text)
            (o, r), = sel
            f.e(f"call void @dss(ptr %ctx, i64 {em.w}, i64 {inst.addr.reg}, i64 {r}, i32 {base_off & 0xFFFFFFFF}, "
                f"i32 {o})")
            return
        # a multi-dword store: lane by lane, in the interpreter's order
        wbase = f.op(f"load i64, ptr {f.op(f'getelementptr i64, ptr %lds_basep, i64 {em.w}')}")

        def lane(l):
            a32 = f.op(f"load i32, ptr {em.lane_ptr(inst.addr.reg, l)}, align 4")
            a = f.op(f"zext i32 {a32} to i64")
            if base_off:
                a = self._mask32(f, f.op(f"add i64 {a}, {base_off}"))
            for o, r in sel:
                ao = self._mask32(f, f.op(f"add i64 {a}, {o}")) if o else a
                vals = [f.op(f"load i32, ptr {em.lane_ptr(r + j, l)}, align 4") for j in range(nw)]
                for j, v in enumerate(vals):
                    self._lds_write(f, ao, 4 * j, wbase, v)
        em.lane_loop(lane)

    def _dss_text(self) -> str:
        """void @dss(ctx, wave, address VGPR, data VGPR, base offset, offset): one wave's single-dword DS store
        (ds_store_b32; one half of a 2addr store: its offset, the base 0), chunk by chunk: a chunk of active lanes
        on consecutive dwords as one vector store, any other lane by lane in lane order (a lane outside the LDS
        writes nothing). The fast tier calls it, the -O2 tier inlines it."""
        f, em, row = self._begin_shared("dss", "void", "i64 %ra, i64 %rd, i32 %boff, i32 %o", _LDS_FIELDS)
        VT, MT = f.VT, f.MT
        rows = [row("%ra"), row("%rd")]
        wbase = f.op(f"load i64, ptr {f.op('getelementptr i64, ptr %lds_basep, i64 %w')}")
        lds = f.op(f"getelementptr i8, ptr %ldsp, i64 {wbase}")      # the wave's workgroup's LDS
        x = f.op("sub i64 %lds_size, 3")                               # lanes below: a + 4 <= the LDS size
        x = f.op(f"select i1 {f.op(f'icmp slt i64 {x}, 0')}, i64 0, i64 {x}")
        lim = f.splat(f.op(f"trunc i64 {x} to i32"))
        e = em.exec_bits()

        def body():
            at = f.op(f"shl i64 {em.c}, {f.LOGW}")
            a, v = (f.op(f"load {VT}, ptr {f.op(f'getelementptr i32, ptr {r}, i64 {at}')}, align 4") for r in rows)
            ab = f.op(f"add {VT} {a}, {f.splat('%boff')}")
            ao = f.op(f"add {VT} {ab}, {f.splat('%o')}")                 # (32-bit wrap)
            mm = f.op(f"and {MT} {em.mask_vec(e)}, {f.op(f'icmp ult {VT} {ao}, {lim}')}")
            self._scatter32(f, v, lds, ao, mm)
        em.chunk_loop(body)
        return self._end_shared(f, "void")

    def _dsl_text(self, name: str, nw: int, n_offs: int) -> str:
        """void @name(ctx, wave, address VGPR, destination VGPR, base offset, offset 0, offset 1): one wave's DS load
        of nw dwords at each of n_offs offsets (ds_load_b32..b128: one offset, 0, after the base offset; the 2addr
        forms: two, the base 0), chunk by chunk. The common chunk is checked once for all its dwords and offsets:
        every lane active with lane j at lane 0's address + j x the access size (vector loads, dwords split apart by
        shuffles) or all at lane 0's (one load per dword, broadcast), every byte inside the LDS without a 32-bit
        wrap; any other lane by lane (a lane outside the LDS reads 0). The fast tier calls it, the -O2 tier inlines
        it."""
        f, em, row = self._begin_shared(name, "void", "i64 %ra, i64 %rd, i32 %boff, i32 %o0, i32 %o1", _LDS_FIELDS)
        VT, MT, W = f.VT, f.MT, f.W
        S = 4 * nw
        arow = row("%ra", 0)
        drows = [row("%rd", t) for t in range(n_offs * nw)]
        offs = ["%o0", "%o1"][:n_offs] if n_offs > 1 else ["0"]
        wbase = f.op(f"load i64, ptr {f.op('getelementptr i64, ptr %lds_basep, i64 %w')}")
        lds = f.op(f"getelementptr i8, ptr %ldsp, i64 {wbase}")      # the wave's workgroup's LDS
        lims = {}
        for extra in sorted({4 * j for j in range(nw)}):
            # lanes whose (32-bit) address a is below this have a + extra + 4 <= the LDS size (no 32-bit wrap)
            x = f.op(f"sub i64 %lds_size, {3 + extra}")
            x = f.op(f"select i1 {f.op(f'icmp slt i64 {x}, 0')}, i64 0, i64 {x}")
            lims[extra] = f.splat(f.op(f"trunc i64 {x} to i32"))
        o64 = [o if o == "0" else f.op(f"zext i32 {o} to i64") for o in offs]
        top = o64[0] if n_offs == 1 else f.op(f"select i1 {f.op(f'icmp ugt i64 {o64[0]}, {o64[1]}')}, i64 {o64[0]}, "
                                               f"i64 {o64[1]}")
        e = em.exec_bits()

        def add(v: str, c) -> str:
            return v if c in (0, "0") else f.op(f"add {VT} {v}, {f.splat(str(c))}")

        def chunk(p: str) -> str:
            return f.op(f"getelementptr i32, ptr {p}, i64 {f.op(f'shl i64 {em.c}, {f.LOGW}')}")

        def body():
            m = em.mask_vec(e)
            a = add(f.op(f"load {VT}, ptr {chunk(arow)}, align 4"), "%boff")     # 32-bit wrap, as the interpreter's
            # the common chunks
            a0 = f.op(f"extractelement {VT} {a}, i64 0")
            full = f.op(f"icmp eq {f.MI} {f.op(f'bitcast {MT} {m} to {f.MI}')}, -1")

            def every(c: str) -> str:
                cm = f.op(f"bitcast {MT} {c} to {f.MI}")
                return f.op(f"and i1 {full}, {f.op(f'icmp eq {f.MI} {cm}, -1')}")
            ramp = "<" + ", ".join(f"i32 {S * j}" for j in range(W)) + ">"
            isr = every(f.op(f"icmp eq {VT} {a}, {f.op(f'add {VT} {f.splat(a0)}, {ramp}')}"))
            isb = every(f.op(f"icmp eq {VT} {a}, {f.splat(a0)}"))
            a64 = f.op(f"zext i32 {a0} to i64")
            at = f.op(f"add i64 {a64}, {top}")
            er, eb = f.op(f"add i64 {at}, {S + S * (W - 1)}"), f.op(f"add i64 {at}, {S}")
            okr = f.op(f"and i1 {isr}, {f.op(f'icmp ule i64 {er}, %lds_size')}")
            okb = f.op(f"and i1 {isb}, {f.op(f'icmp ule i64 {eb}, %lds_size')}")
            R, X, B, G, fin = f.t("lr"), f.t("lx"), f.t("lb"), f.t("lg"), f.t("lf")
            f.e(f"br i1 {okr}, label {R}, label {X}")
            f.label(R)
            for k, o in enumerate(o64):
                p = f.op(f"getelementptr i8, ptr {lds}, i64 {f.op(f'add i64 {a64}, {o}')}")
                v = f.op(f"load <{W * nw} x i32>, ptr {p}, align 1")
                for j in range(nw):
                    if nw == 1:
                        x = v
                    else:
                        idx = "<" + ", ".join(f"i32 {j + nw * t}" for t in range(W)) + ">"
                        x = f.op(f"shufflevector <{W * nw} x i32> {v}, <{W * nw} x i32> poison, <{W} x i32> {idx}")
                    f.e(f"store {VT} {x}, ptr {chunk(drows[k * nw + j])}, align 4")
            f.e(f"br label {fin}")
            f.label(X)
            f.e(f"br i1 {okb}, label {B}, label {G}")
            f.label(B)
            for k, o in enumerate(o64):
                ao = f.op(f"add i64 {a64}, {o}")
                for j in range(nw):
                    p = f.op(f"getelementptr i8, ptr {lds}, i64 {f.op(f'add i64 {ao}, {4 * j}')}")
                    x = f.splat(f.op(f"load i32, ptr {p}, align 1"))
                    f.e(f"store {VT} {x}, ptr {chunk(drows[k * nw + j])}, align 4")
            f.e(f"br label {fin}")
            f.label(G)
            # any other: lane by lane
            vals = []
            for o in offs:
                ao = add(a, o)
                for j in range(nw):
                    mm = f.op(f"and {MT} {m}, {f.op(f'icmp ult {VT} {ao}, {lims[4 * j]}')}")
                    vals.append(self._gather32(f, lds, add(ao, 4 * j), mm))
            yes, no, join = f.t("df"), f.t("dp"), f.t("dj")
            f.e(f"br i1 {full}, label {yes}, label {no}")
            f.label(yes)                        # every lane active: plain stores (a masked store is slow on Zen)
            for j, v in enumerate(vals):
                f.e(f"store {VT} {v}, ptr {chunk(drows[j])}, align 4")
            f.e(f"br label {join}")
            f.label(no)
            for j, v in enumerate(vals):
                p = chunk(drows[j])
                old = f.op(f"load {VT}, ptr {p}, align 4")
                f.e(f"store {VT} {f.op(f'select {MT} {m}, {VT} {v}, {VT} {old}')}, ptr {p}, align 4")
            f.e(f"br label {join}")
            f.label(join)
            f.e(f"br label {fin}")
            f.label(fin)
        em.chunk_loop(body)
        return self._end_shared(f, "void")

    def _ramp32(self, f: Fn, offs: str, ok: str, step: int) -> tuple[str, str]:
        """(lane 0's offset, whether every lane is ok and lane j's offset is lane 0's + step * j), on i32 offsets."""
        a0 = f.op(f"extractelement {f.VT} {offs}, i64 0")
        ramp = "<" + ", ".join(f"i32 {step * j}" for j in range(f.W)) + ">"
        want = f.op(f"add {f.VT} {f.splat(a0)}, {ramp}") if step else f.splat(a0)
        same = f.op(f"icmp eq {f.VT} {offs}, {want}")
        both = f.op(f"bitcast {f.MT} {f.op(f'and {f.MT} {same}, {ok}')} to {f.MI}")
        return a0, f.op(f"icmp eq {f.MI} {both}, -1")

    def _gather32(self, f: Fn, base: str, offs: str, ok: str) -> str:
        """Dwords at base + the lanes' i32 byte offsets where ok is set, 0 elsewhere: lane by lane (the chunks a
        vector access covers took _dsl_text's first paths)."""
        return self._lanes_load(f, f.op(f"getelementptr i8, ptr {base}, {f.VT} {offs}"), ok, "zeroinitializer")

    def _scatter32(self, f: Fn, vals: str, base: str, offs: str, ok: str) -> None:
        """Store the lanes where ok is set at base + their i32 byte offsets, in lane order (as _scatter)."""
        a0, contig = self._ramp32(f, offs, ok, 4)
        self._store_runs(f, vals, contig, lambda: f.op(f"getelementptr i8, ptr {base}, i32 {a0}"),
                         lambda: self._lanes_store(f, vals, f.op(f"getelementptr i8, ptr {base}, {f.VT} {offs}"), ok))

    def _store_runs(self, f: Fn, vals: str, contig: str, vec_ptr, lanes) -> None:
        """One vector store of vals at vec_ptr() when `contig` (every lane ok on consecutive dwords), else lanes()."""
        vec, sc, join = f.t("sv"), f.t("ss"), f.t("sj")
        f.e(f"br i1 {contig}, label {vec}, label {sc}")
        f.label(vec)
        f.e(f"store {f.VT} {vals}, ptr {vec_ptr()}, align 1")
        f.e(f"br label {join}")
        f.label(sc)
        lanes()
        f.e(f"br label {join}")
        f.label(join)

    def _ramp(self, f: Fn, addrs: str, ok: str, step: int) -> tuple[str, str]:
        """(first address, whether every lane is ok and lane j's address is the first + step * j)."""
        a0 = f.op(f"extractelement <{f.W} x i64> {addrs}, i64 0")
        ramp = "<" + ", ".join(f"i64 {step * j}" for j in range(f.W)) + ">"
        want = f.op(f"add <{f.W} x i64> {f.splat(a0, 'i64')}, {ramp}")
        same = f.op(f"icmp eq <{f.W} x i64> {addrs}, {want}")
        both = f.op(f"bitcast {f.MT} {f.op(f'and {f.MT} {same}, {ok}')} to {f.MI}")
        return a0, f.op(f"icmp eq {f.MI} {both}, -1")

    def _gather(self, f: Fn, addrs: str, ok: str, other: str) -> str:
        """Dwords at the host addresses of the lanes where ok is set, `other`'s elsewhere. Every lane ok on
        consecutive dwords: one vector load; every lane ok on one dword: one load; else scalar loads."""
        a0, contig = self._ramp(f, addrs, ok, 4)
        _, bcast = self._ramp(f, addrs, ok, 0)
        pre, vec, one, sc, join = f.t("gp"), f.t("gv"), f.t("go"), f.t("gs"), f.t("gj")
        f.e(f"br label {pre}")
        f.label(pre)
        f.e(f"br i1 {contig}, label {vec}, label {one}")
        f.label(vec)
        v1 = f.op(f"load {f.VT}, ptr {f.op(f'inttoptr i64 {a0} to ptr')}, align 1")
        f.e(f"br label {join}")
        f.label(one)
        one_end = f.t("ge")
        f.e(f"br i1 {bcast}, label {one_end}, label {sc}")
        f.label(one_end)
        v2 = f.splat(f.op(f"load i32, ptr {f.op(f'inttoptr i64 {a0} to ptr')}, align 1"))
        f.e(f"br label {join}")
        f.label(sc)
        v3 = self._gather_lanes(f, addrs, ok, other)
        sc_end = f.t("gz")
        f.e(f"br label {sc_end}")
        f.label(sc_end)
        f.e(f"br label {join}")
        f.label(join)
        return f.op(f"phi {f.VT} [{v1}, {vec}], [{v2}, {one_end}], [{v3}, {sc_end}]")

    def _gather_lanes(self, f: Fn, addrs: str, ok: str, other: str) -> str:
        """Scalar loads (ir.helpers' gather_lanes; a lane that is not ok reads the context block, its value dropped)."""
        ptrs = f.op(f"inttoptr <{f.W} x i64> {addrs} to <{f.W} x ptr>")
        return self._lanes_load(f, ptrs, ok, other)

    def _lanes_load(self, f: Fn, ptrs: str, ok: str, other: str) -> str:
        okm = f.op(f"bitcast {f.MT} {ok} to {f.MI}")
        vec = f.op(f"call {f.VT} @gather_lanes(<{f.W} x ptr> {ptrs}, {f.MI} {okm}, ptr %ctx)")
        return f.op(f"select {f.MT} {ok}, {f.VT} {vec}, {f.VT} {other}")

    def _lanes_store(self, f: Fn, vals: str, ptrs: str, ok: str) -> None:
        okm = f.op(f"bitcast {f.MT} {ok} to {f.MI}")
        spare = f.op(f"getelementptr i64, ptr %ctx, i64 {CTX_SPARE}")
        f.e(f"call void @scatter_lanes({f.VT} {vals}, <{f.W} x ptr> {ptrs}, {f.MI} {okm}, ptr {spare})")

    def _scatter(self, f: Fn, vals: str, addrs: str, ok: str) -> None:
        """Store the lanes where ok is set, in lane order (later lanes win): one vector store when every lane is ok
        on consecutive dwords; else lane by lane, the lanes not ok writing a spare context slot."""
        a0, contig = self._ramp(f, addrs, ok, 4)
        self._store_runs(f, vals, contig, lambda: f.op(f"inttoptr i64 {a0} to ptr"),
                         lambda: self._scatter_lanes(f, vals, addrs, ok))

    def _scatter_lanes(self, f: Fn, vals: str, addrs: str, ok: str) -> None:
        self._lanes_store(f, vals, f.op(f"inttoptr <{f.W} x i64> {addrs} to <{f.W} x ptr>"), ok)

    def _vadd(self, f: Fn, v: str, c: int) -> str:
        return f.op(f"add <{f.W} x i64> {v}, {f.splat(str(c), 'i64')}")

    def _mask32(self, f: Fn, x: str) -> str:
        return f.op(f"and i64 {x}, {0xFFFFFFFF}")

    def _lds_write(self, f: Fn, a: str, j: int, wbase: str, v: str) -> None:
        aj = f.op(f"add i64 {a}, {j}") if j else a
        lim = f.op(f"add i64 {aj}, 4")
        ok = f.op(f"icmp ule i64 {lim}, %lds_size")
        yes, join = f.t("r"), f.t("j")
        f.e(f"br i1 {ok}, label {yes}, label {join}")
        f.label(yes)
        off = f.op(f"add i64 {aj}, {wbase}")
        p = f.op(f"getelementptr i8, ptr %ldsp, i64 {off}")
        f.e(f"store i32 {v}, ptr {p}, align 1")
        f.e(f"br label {join}")
        f.label(join)


class _WaveEmitter(Emitter):
    """Emitter bound to the wave loop's current wave."""

    def __init__(self, f: Fn, w: str, i: str):
        super().__init__(f, None)
        self.w, self.i = w, i                   # (the base class's register access, bound to this wave)
        self.wl = f.op(f"mul i64 {w}, {f.L}")

    def lane_ptr(self, r: int, lane: str) -> str:
        f = self.f
        row = self.vrow(r)
        return f.op(f"getelementptr i32, ptr {row}, i64 {lane}")

    def lane_loop(self, body) -> None:
        """for lane in 0..L: if EXEC bit: body(lane) (EXEC read once, before the first lane)."""
        f = self.f
        e = self.exec_bits()
        pre, head, lb, skip, done = f.t("lp"), f.t("lh"), f.t("lb"), f.t("ls"), f.t("ld")
        f.e(f"br label {pre}")
        f.label(pre)
        f.e(f"br label {head}")
        f.label(head)
        l, l1 = f.t("l"), f.t("l")
        f.e(f"{l} = phi i64 [0, {pre}], [{l1}, {skip}]")
        lt = f.op(f"trunc i64 {l} to {f.IT}") if f.L == 32 else l
        bit = f.op(f"lshr {f.IT} {e}, {lt}")
        b1 = f.op(f"trunc {f.IT} {bit} to i1")
        f.e(f"br i1 {b1}, label {lb}, label {skip}")
        f.label(lb)
        body(l)
        f.e(f"br label {skip}")
        f.label(skip)
        f.e(f"{l1} = add i64 {l}, 1")
        c = f.op(f"icmp ult i64 {l1}, {f.L}")
        f.e(f"br i1 {c}, label {head}, label {done}")
        f.label(done)

    def chunk_loop(self, body) -> None:
        """for chunk in 0..L/W: body() with self.c the chunk index."""
        f = self.f
        pre, head, tail, done = f.t("kp"), f.t("kh"), f.t("kt"), f.t("kd")
        f.e(f"br label {pre}")
        f.label(pre)
        f.e(f"br label {head}")
        f.label(head)
        c, c1 = f.t("c"), f.t("c")
        f.e(f"{c} = phi i64 [0, {pre}], [{c1}, {tail}]")
        self.c = c
        body()
        f.e(f"br label {tail}")
        f.label(tail)
        f.e(f"{c1} = add i64 {c}, 1")
        more = f.op(f"icmp ult i64 {c1}, {f.NC}")
        f.e(f"br i1 {more}, label {head}, label {done}")
        f.label(done)
        self.c = None

    def chunk_lanes(self, e: str, body) -> None:
        """for the W lanes of the current chunk whose EXEC bit (in e) is set: body(lane)."""
        f = self.f
        c = self.c
        pre, head, lb, skip, done = f.t("jp"), f.t("jh"), f.t("jb"), f.t("js"), f.t("jd")
        base = f.op(f"shl i64 {c}, {f.LOGW}")
        f.e(f"br label {pre}")
        f.label(pre)
        f.e(f"br label {head}")
        f.label(head)
        j, j1 = f.t("j"), f.t("j")
        f.e(f"{j} = phi i64 [0, {pre}], [{j1}, {skip}]")
        lane = f.op(f"add i64 {base}, {j}")
        lt = f.op(f"trunc i64 {lane} to {f.IT}") if f.L == 32 else lane
        bit = f.op(f"trunc {f.IT} {f.op(f'lshr {f.IT} {e}, {lt}')} to i1")
        f.e(f"br i1 {bit}, label {lb}, label {skip}")
        f.label(lb)
        saved = self.c
        body(lane)
        self.c = saved
        f.e(f"br label {skip}")
        f.label(skip)
        f.e(f"{j1} = add i64 {j}, 1")
        more = f.op(f"icmp ult i64 {j1}, {f.W}")
        f.e(f"br i1 {more}, label {head}, label {done}")
        f.label(done)

    def refresh_exec(self) -> None:
        """em[wave] and full[wave] from the EXEC SGPR image (what WaveState.refresh_exec does)."""
        f = self.f
        e = self.exec_bits()
        off = f.op(f"mul i64 {self.w}, {f.L}")
        for c in range(f.NC):
            self.c = str(c)
            m = self.mask_vec(e)
            m8 = f.op(f"zext {f.MT} {m} to <{f.W} x i8>")
            p = f.op(f"getelementptr i8, ptr %emp, i64 {f.op(f'add i64 {off}, {c * f.W}')}")
            f.e(f"store <{f.W} x i8> {m8}, ptr {p}, align 1")
        self.c = None
        full = f.op(f"icmp eq {f.IT} {e}, -1")
        fz = f.op(f"zext i1 {full} to i8")
        q = f.op(f"getelementptr i8, ptr %fullp, i64 {self.w}")
        f.e(f"store i8 {fz}, ptr {q}, align 1")
