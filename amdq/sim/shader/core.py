"""The compute units: turn a dispatch (the COMPUTE_* register state) into waves and run them.

Waves of a dispatch are created in batches of whole workgroups. Within a batch the scheduler picks
the lowest program counter among runnable waves and executes that instruction once for every wave
sitting there: one numpy step. Divergent scalar branches split waves across PCs; they merge again
when their PCs meet. `s_barrier` parks a wave until every live wave of its workgroup has arrived.
While every wave runs at one PC the scheduler skips its per-wave bookkeeping; decoded and built steps
are shared process-wide (keyed by the code bytes), and register arrays are reused between batches.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from ...errors import GPUException, GPUFault, InvalidPacket, UnsupportedInstruction
from ...hw import kd as KD
from ...hw.targets import GENERATIONS
from ..progress import Progress
from .isa import Isa, for_isa
from .memory import GPUMemory
from .valu import BLOCK_LANES, whole_step
from .wave import BARRIER, DONE, EXEC, POOL, RUN, SGPR_SPECIAL, StateImage, WaveState, mask_to_bits

TTMP0 = 108      # ttmp0 in the SGPR operand space


@dataclass
class DispatchRegs:
    """What the command processor hands the compute units for one dispatch."""
    pgm_addr: int                       # COMPUTE_PGM_LO/HI << 8: address of the first instruction
    rsrc1: int
    rsrc2: int
    rsrc3: int
    grid: tuple[int, int, int]          # workgroups in x, y, z
    block: tuple[int, int, int]         # work-items per workgroup
    user_data: list[int]                # COMPUTE_USER_DATA_0..15
    wave64: bool = False                # DISPATCH_INITIATOR.CS_W32_EN clear
    lds_bytes: int = 0                  # LDS per workgroup (static + dynamic)
    scratch_base: int = 0               # COMPUTE_DISPATCH_SCRATCH_BASE
    scratch_wave_bytes: int = 0         # from COMPUTE_TMPRING_SIZE.WAVESIZE
    scratch_waves: int = 0              # COMPUTE_TMPRING_SIZE.WAVES: wave slots backed by scratch
    start: tuple[int, int, int] = (0, 0, 0)
    partial: tuple[int, int, int] = (0, 0, 0)   # work-items in the last workgroup per dimension (0 = full)
    gfx: int = 11
    isa: str = ""                       # ISA family of the target (Target.isa); "" is the generation's first family
    xcc: int = 0                        # the die the waves run on (HW_REG_XCC_ID on multi-die CDNA)
    info: dict = field(default_factory=dict)


@dataclass
class Stats:
    steps: int = 0                     # numpy steps (instruction x group of waves)
    wave_instructions: int = 0         # instructions executed, counted per wave
    lane_steps: int = 0                # sum over steps of lanes in the step
    waves: int = 0
    workgroups: int = 0


class ICache:
    """Decoded and built instructions by PC, fetched through the memory model as hardware fetches them.

    An instruction-cache invalidate (ACQUIRE_MEM with GLI_INV) does not throw the work away: the next time
    a PC runs, the 4 KiB page holding it is fetched again; if the page's bytes are what its steps were decoded
    from, every step of that page is valid again at once (one fetch per page, not one check per PC: the fixed
    cost of a dispatch, which invalidates). Otherwise each step is checked line by line and rebuilt only if
    its bytes changed. A page that no longer translates faults at the PC that runs there, as before.

    `decoded` gives the instruction at a PC without building its step (the JIT's search for blocks reads code the
    interpreter may never run): the step is built when the interpreter first runs the PC (`get`), from the same
    decoded instruction.
    """

    LINE = 64

    def __init__(self, mem: GPUMemory, isa: Isa):
        self.mem, self.isa, self.gen = mem, isa, 0
        self.steps: dict[tuple[int, bool], tuple] = {}
        self.seen: dict[tuple[int, bool], tuple] = {}        # decoded, not built: (instruction, is-control, cell)
        self.deps: dict[tuple[int, bool], tuple] = {}        # (line, version) pairs each entry was decoded from
        self.lines: dict[int, tuple[bytes, int, int]] = {}    # line -> (bytes, generation fetched, version)
        self.pages: dict[int, tuple[bytes, int]] = {}
        self.cells: dict[int, list] = {}          # page -> [generation it was last found unchanged in, its bytes]
        self._views: dict[int, np.ndarray] = {}   # page -> its bytes in memory, valid with _views_tlb
        self._views_tlb = None
        self.version = 0

    def invalidate(self) -> None:
        self.gen += 1

    def _page(self, addr: int) -> bytes:
        """The 4 KiB-aligned block holding addr, read once per generation (one translation for all its lines)."""
        page = addr & ~(PAGE - 1)
        hit = self.pages.get(page)
        if hit is not None and hit[1] == self.gen:
            return hit[0]
        # the page's translation is kept while the memory's TLB is (an MMU replaces it whole on every invalidate):
        # the bytes are read again each generation, the page tables walked again only after a TLB invalidate
        tlb = getattr(self.mem, "_tlb", None)
        if tlb is None or tlb is not self._views_tlb:
            self._views, self._views_tlb = {}, tlb
        view = self._views.get(page) if tlb is not None else None
        if view is None:
            chunks = self.mem.translate(np.array([page], np.uint64), PAGE, False)
            buf, _, off = chunks[0]
            view = buf[int(off[0]):int(off[0]) + PAGE]
            if tlb is not None:
                self._views[page] = view
        data = view.tobytes()
        self.pages[page] = (data, self.gen)
        return data

    def _line(self, addr: int) -> tuple[bytes, int]:
        """The line's bytes and version (a new version only when the bytes differ from the last fetch)."""
        hit = self.lines.get(addr)
        if hit is not None and hit[1] == self.gen:
            return hit[0], hit[2]
        o = addr & (PAGE - 1)
        data = self._page(addr)[o:o + self.LINE]
        if hit is not None and hit[0] == data:
            ver = hit[2]
        else:
            self.version += 1
            ver = self.version
        self.lines[addr] = (data, self.gen, ver)
        return data, ver

    def _fetch(self, pc: int, size: int = 12) -> tuple[bytes, int, tuple]:
        line = pc & ~(self.LINE - 1)
        try:
            code, ver = self._line(line)
        except GPUFault:
            raise GPUFault(f"GPU page fault: instruction fetch at {pc:#x} (not mapped)", address=pc, fetch=True,
                           client="shader (instruction fetch)", pc=pc) from None
        deps = ((line, ver),)
        if pc + size > line + self.LINE:
            try:
                more, ver2 = self._line(line + self.LINE)
                code += more
                deps += ((line + self.LINE, ver2),)
            except GPUFault:
                pass                        # the decoder reports an instruction cut short
        return code, line, deps

    def _valid(self, deps: tuple) -> bool:
        try:
            return all(self._line(line)[1] == ver for line, ver in deps)
        except GPUFault:
            return False

    def _page_cell(self, page: int) -> list | None:
        """The validity cell of a page for this generation (None if the page does not translate): the one its
        steps share while its bytes stay those they were decoded from, else a new one."""
        cell = self.cells.get(page)
        if cell is not None and cell[0] == self.gen:
            return cell
        try:
            data = self._page(page)
        except GPUFault:
            return None
        if cell is not None and cell[1] == data:
            cell[0] = self.gen
            return cell
        cell = self.cells[page] = [self.gen, data]
        return cell

    def _cell_for(self, deps: tuple) -> list:
        """The cell a step decoded from `deps` (in this generation) hangs on: its page's, or its own when it
        spans two pages."""
        page = deps[0][0] & ~(PAGE - 1)
        if all(line & ~(PAGE - 1) == page for line, _ in deps):
            cell = self._page_cell(page)
            if cell is not None:
                return cell
        return [self.gen, None]

    def _current(self, key: tuple[int, bool], cell: list) -> list | None:
        """The validity cell, in this generation, of the entry at key decoded with `cell`: that cell while its page
        is unchanged, a new one when its lines are unchanged though its page changed elsewhere, None when its
        bytes changed."""
        if cell[0] == self.gen:
            return cell
        deps = self.deps[key]
        if cell[1] is not None and self._page_cell(deps[0][0] & ~(PAGE - 1)) is cell:
            return cell
        if self._valid(deps):
            return self._cell_for(deps)
        return None

    def get(self, pc: int, wave64: bool):
        """(step function, instruction, is-control, the step for a small batch run under errstate(all="ignore"),
        validity cell) of the instruction at pc."""
        key = (pc, wave64)
        st = self.steps.get(key)
        if st is not None:
            cell = st[4]
            if cell[0] == self.gen:
                return st
            now = self._current(key, cell)
            if now is cell:
                return st                             # its page is unchanged: valid again
            if now is not None:                       # revalidated line by line (its page changed elsewhere)
                st = st[:4] + (now,)
                self.steps[key] = st
                return st
        bkey, deps = self._fetch_key(pc, wave64)
        # decoded and built steps are shared by every core in the process, keyed by the bytes from the PC on
        # (the look-ahead of mask_dead reads the instructions that follow)
        hit = BUILT.get(bkey[:4])
        if hit is None:
            inst, control = self._decode(bkey)
            fn = self.isa.build(inst)
            hit = (fn, inst, control, whole_step(fn) or fn)
            if len(BUILT) >= 1 << 16:
                BUILT.clear()
            BUILT[bkey[:4]] = hit
        self.deps[key] = deps
        self.seen.pop(key, None)
        st = hit + (self._cell_for(deps),)
        self.steps[key] = st
        return st

    def decoded(self, pc: int, wave64: bool) -> tuple:
        """(instruction, is-control) at pc, as `get` would run it, without building its step."""
        key = (pc, wave64)
        st = self.steps.get(key)
        if st is not None and self._current(key, st[4]) is not None:
            return st[1], st[2]                       # (get revalidates the step itself when it runs)
        d = self.seen.get(key)
        if d is not None:
            now = self._current(key, d[2])
            if now is not None:
                if now is not d[2]:
                    self.seen[key] = d[:2] + (now,)
                return d[:2]
        bkey, deps = self._fetch_key(pc, wave64)
        hit = BUILT.get(bkey[:4])
        inst, control = hit[1:3] if hit is not None else self._decode(bkey)
        self.deps[key] = deps
        self.seen[key] = (inst, control, self._cell_for(deps))
        return inst, control

    def _fetch_key(self, pc: int, wave64: bool) -> tuple[tuple, tuple]:
        """(the process-wide key of the instruction at pc: family, pc, wave size, the bytes from pc on; then the
        fetched bytes and their address), and the lines it was fetched from."""
        code, base, deps = self._fetch(pc, self.LINE)
        return (self.isa.name, pc, wave64, code[pc - base:], code, base), deps

    def _decode(self, bkey: tuple) -> tuple:
        """(instruction, is-control) of a fetch key, decoded once per process."""
        k = bkey[:4]
        hit = DECODED.get(k)
        if hit is None:
            isa, (_, pc, wave64, _, code, base) = self.isa, bkey
            inst = isa.decode(code, pc, base, wave64)
            inst.dead_sdst = isa.mask_dead(code, base, wave64, inst)
            hit = (inst, inst.key in isa.control)
            if len(DECODED) >= 1 << 16:
                DECODED.clear()
            DECODED[k] = hit
        return hit


BUILT: dict[tuple[str, int, bool, bytes], tuple] = {}     # (ISA family, pc, wave64, code bytes) -> steps
DECODED: dict[tuple[str, int, bool, bytes], tuple] = {}   # the same keys -> (instruction, is-control)
PAGE = 4096


@functools.lru_cache(maxsize=256)
def _rsrc(gfx: int, rsrc1: int, rsrc2: int) -> tuple[int, dict, dict]:
    gen = KD.generation(gfx)
    return gen, KD.RSRC1[gen].decode(rsrc1), KD.RSRC2[gen].decode(rsrc2)


SMALL = 16            # batches of up to this many waves are scheduled with Python lists


class Layout:
    """What the initial state of a batch of `nwg` whole workgroups of one dispatch shape is, computed once per
    shape: register counts, the system-SGPR positions (AMDGPUUsage "Initial Kernel Execution State"), the
    work-item ids of v0, EXEC, MODE and the LDS and scratch slots. Only the workgroup ids and the user SGPRs
    differ from one batch (or launch) of the shape to the next. The arrays are read-only."""

    def __init__(self, gfx: int, rsrc1: int, rsrc2: int, rsrc3: int, block: tuple[int, int, int], wave64: bool,
                 nwg: int, lds_bytes: int, scratch_wave_bytes: int):
        gen, r1, r2 = _rsrc(gfx, rsrc1, rsrc2)
        self.gen = gen
        lanes = self.lanes = 64 if wave64 else 32
        granule = 8 if (gen >= 11 and lanes == 32) or gen == 9 else 4
        nvgpr = (r1["GRANULATED_WORKITEM_VGPR_COUNT"] + 1) * granule
        if gen == 9:        # unified ArchVGPR+AccVGPR file: a[i] (at v[accum_offset + i]) is row ACC_BASE + i
            from ...hw.isa.decode_cdna import ACC_BASE
            acc = nvgpr - (KD.RSRC3[9].decode(rsrc3)["ACCUM_OFFSET"] + 1) * 4
            nvgpr = ACC_BASE + acc if acc > 0 else nvgpr
        self.nvgpr = nvgpr
        bx, by, bz = block
        self.threads = threads = bx * by * bz
        self.wpg = wpg = -(-threads // lanes)                  # waves per workgroup
        self.nwg, self.n = nwg, nwg * wpg
        self.wg = np.repeat(np.arange(nwg), wpg)
        t = np.arange(wpg * lanes)
        self.tid = (t % bx, (t // bx) % by, t // (bx * by))
        self.valid = t < threads                               # lanes of one workgroup inside its size
        self.whole = threads == wpg * lanes
        # user SGPRs, then system SGPRs: which come, and where
        self.nuser = n = r2["USER_SGPR_COUNT"]
        self.wgid_sgpr: list[tuple[int, int]] = []             # (dimension, SGPR)
        for dim, flag in enumerate(("ENABLE_SGPR_WORKGROUP_ID_X", "ENABLE_SGPR_WORKGROUP_ID_Y",
                                    "ENABLE_SGPR_WORKGROUP_ID_Z")):
            if r2[flag]:
                self.wgid_sgpr.append((dim, n))
                n += 1
        self.info_sgpr = n if r2["ENABLE_SGPR_WORKGROUP_INFO"] else None
        n += self.info_sgpr is not None
        # scratch: one slot (of TMPRING_SIZE.WAVES) per resident wave
        self.scratch_slot = np.arange(nwg * wpg, dtype=np.int64)
        self.private_sgpr = n if r2["ENABLE_PRIVATE_SEGMENT"] else None
        self.sgpr_top = n + (self.private_sgpr is not None)     # the SGPRs below it are the ones a batch sets
        self.scratch_off = (self.scratch_slot * scratch_wave_bytes).astype(np.uint64)
        # gfx12 TTMP8[29:25]: the wave's id within its workgroup (what LLVM's llvm.amdgcn.wave.id reads)
        self.wave_id = (np.tile(np.arange(wpg, dtype=np.uint32), nwg) & 0x1F) << 25 if gen >= 12 else None
        # work-item ids: gfx11+ and gfx90a+ pack x | y << 10 | z << 20 into v0
        dims = r2["ENABLE_VGPR_WORKITEM_ID"]
        tx, ty, tz = self.tid
        ids = tx.astype(np.uint32)
        if dims >= 1:
            ids = ids | ty.astype(np.uint32) << 10
        if dims >= 2:
            ids = ids | tz.astype(np.uint32) << 20
        self.ids = ids
        # MODE: FP_ROUND 3:0, FP_DENORM 7:4, DX10_CLAMP 8, IEEE 9 (the last two exist up to gfx11: gfx12's RSRC1
        # has no such fields, so its MODE has neither bit)
        self.mode = np.uint32(r1["FLOAT_ROUND_MODE_32"] | r1["FLOAT_ROUND_MODE_16_64"] << 2 |
                              r1["FLOAT_DENORM_MODE_32"] << 4 | r1["FLOAT_DENORM_MODE_16_64"] << 6 |
                              r1.get("ENABLE_DX10_CLAMP", 0) << 8 | r1.get("ENABLE_IEEE_MODE", 0) << 9)
        # LDS, one block per workgroup
        self.lds_base = (self.wg * lds_bytes).astype(np.int64)
        self.lds_words = (np.arange(nwg, dtype=np.uint32) * np.uint32(lds_bytes // 4))[:, None] \
            if lds_bytes % 4 == 0 else None
        for a in (self.wg, self.valid, self.ids, self.scratch_slot, self.scratch_off, self.wave_id, self.lds_base,
                  self.lds_words, *self.tid):
            if a is not None:
                a.flags.writeable = False
        self.kept = False                                      # cached by `layout` with an image (a small one)
        self._image: StateImage | None = None
        self.batches = 0                                       # asked for its image (see image())

    def image(self) -> StateImage | None:
        """The registers a batch of this shape starts with (layout_registers, made once), for a kept layout from its
        second batch on (the first sets its registers itself: a shape launched once would pay for the image and its
        copy without using it again)."""
        im = self._image
        if im is None and self.kept:
            self.batches += 1
            if self.batches < 2:
                return None
            w = WaveState(self.n, self.lanes, 1)
            layout_registers(w, self)
            rows = layout_rows(self)
            im = self._image = StateImage(rows, w.s[rows], w.v[0].copy(), w.em.copy(), w.full.copy(),
                                          w.mode.copy())
            rs = w.s.nbytes // w.s.shape[0]                     # its SGPR file back to the pool: only the rows
            POOL.give(w.s, dirty=([(r * rs, (r + 1) * rs) for r in rows],))     # written are cleared again
        return im


_LAYOUTS: dict[tuple, Layout] = {}
LAYOUT_LANES = 1 << 16          # layouts of batches up to this many lanes are kept with their StateImage
_BIG: dict[tuple, Layout] = {}  # layouts of larger batches: kept too (a few; their registers start without an image)
BIG_LAYOUTS = 16


def layout(d: DispatchRegs, nwg: int) -> Layout:
    """The Layout of a batch of `nwg` workgroups of dispatch `d` (cached per shape)."""
    key = (d.gfx, d.rsrc1, d.rsrc2, d.rsrc3, d.block, d.wave64, nwg, d.lds_bytes, d.scratch_wave_bytes)
    lay = _LAYOUTS.get(key) or _BIG.get(key)
    if lay is None:
        lay = Layout(*key)
        small = lay.n * lay.lanes <= LAYOUT_LANES
        kept = _LAYOUTS if small else _BIG
        if len(kept) >= (256 if small else BIG_LAYOUTS):
            kept.clear()
        kept[key] = lay
        lay.kept = small
    return lay


def layout_rows(lay: Layout) -> list[int]:
    """The SGPR rows layout_registers may set (the others it leaves at zero)."""
    rows = [EXEC] + ([EXEC + 1] if lay.lanes == 64 else [])
    if lay.gen >= 12:
        rows.append(TTMP0 + 8)
    rows += [r for r in (lay.info_sgpr, lay.private_sgpr) if r is not None]
    return sorted(set(rows))


def layout_registers(w: WaveState, lay: Layout) -> None:
    """The registers of a new batch that depend on its shape alone (AMDGPUUsage "Initial Kernel Execution State"):
    EXEC (lanes inside the workgroup size), the workgroup-info and private-segment SGPRs, gfx12's wave id in TTMP8,
    the work-item ids in v0 and MODE (SGPRs: the rows layout_rows names). (Layout.image holds them; batches of a
    shape too large to keep start here.)"""
    nwg, wpg, lanes = lay.nwg, lay.wpg, lay.lanes
    if lay.whole:
        w.s[EXEC] = np.uint32(0xFFFFFFFF)
        if lanes == 64:
            w.s[EXEC + 1] = np.uint32(0xFFFFFFFF)
        w.em[:] = True
        w.full[:] = True
    else:
        set_exec(w, np.tile(lay.valid, (nwg, 1)).reshape(nwg * wpg, lanes))
    if lay.gen >= 12:
        w.s[TTMP0 + 8] = lay.wave_id
    if lay.info_sgpr is not None:
        w.s[lay.info_sgpr] = np.uint32(lay.threads)
    if lay.private_sgpr is not None:
        w.s[lay.private_sgpr] = lay.scratch_off.astype(np.uint32)
    w.v[0].reshape(nwg, wpg * lanes)[:] = lay.ids
    w.mode[:] = lay.mode
    w.mode_ok = None


def set_exec(w: WaveState, valid: np.ndarray) -> None:
    """EXEC (and the lane masks made from it) of every wave from its lanes that exist (waves x lanes, bool)."""
    bits = mask_to_bits(valid)
    w.s[EXEC] = bits[:, 0]
    if valid.shape[1] == 64:
        w.s[EXEC + 1] = bits[:, 1]
    w.em[:] = valid
    w.full[:] = (bits == np.uint32(0xFFFFFFFF)).all(1)


_NO_LDS_WORDS = np.zeros((1, 1), np.uint32)
_NO_LDS_WORDS.flags.writeable = False
_NO_LDS = np.zeros(4, np.uint8)         # the LDS of batches without any (every access is outside its 0 bytes)


class Batch:
    """A set of whole workgroups resident together."""

    _jit_ctx = None                     # the shader JIT's context block of this batch (jit/runtime.py Context)

    def __init__(self, d: DispatchRegs, wg_ids: np.ndarray, core: "ShaderCore"):
        self.d, self.core = d, core
        nwg = len(wg_ids)
        lay = layout(d, nwg)
        lanes, wpg, gen = lay.lanes, lay.wpg, lay.gen
        image = lay.image()                             # (None for a shape too large to keep)
        w = self.w = WaveState.fresh(nwg * wpg, lanes, lay.nvgpr, v0_written=True, image=image)
        if image is None:
            layout_registers(w, lay)
        w.wg = lay.wg
        w.pc.fill(d.pgm_addr)
        self.nwg, self.wpg, self.lanes = nwg, wpg, lanes
        gx, gy, _ = d.grid
        one = nwg == 1                                  # one workgroup: its ids as Python ints
        if one:
            i = int(wg_ids[0])
            wgx, wgy, wgz = d.start[0] + i % gx, d.start[1] + (i // gx) % gy, d.start[2] + i // (gx * gy)
        else:
            wgx = d.start[0] + wg_ids % gx
            wgy = d.start[1] + (wg_ids // gx) % gy
            wgz = d.start[2] + wg_ids // (gx * gy)
        # lanes past partial edges of the grid are off too
        edges = [dim for dim in range(3) if d.partial[dim]]
        if edges:
            valid = np.tile(lay.valid, (nwg, 1))
            for dim in edges:
                tid, wgd = lay.tid[dim], np.atleast_1d((wgx, wgy, wgz)[dim])
                last = wgd == d.start[dim] + d.grid[dim] - 1
                valid &= ~(last[:, None] & (tid[None, :] >= d.partial[dim]))
            set_exec(w, valid.reshape(nwg * wpg, lanes))
        # user SGPRs, then system SGPRs (AMDGPUUsage "Initial Kernel Execution State")
        nuser = min(lay.nuser, len(d.user_data))
        if nuser:
            w.s[:nuser] = np.array([u & 0xFFFFFFFF for u in d.user_data[:nuser]], np.uint32)[:, None]
        for dim, n in lay.wgid_sgpr:
            vals = (wgx, wgy, wgz)[dim]
            w.s[n] = vals if wpg == 1 or one else np.repeat(vals, wpg)
        if gen >= 12:     # architected SGPRs (AMDGPUUsage, GFX12): TTMP9 = workgroup id X, TTMP7 = Y | Z << 16
            # (TTMP8[29:25], the wave's id within its workgroup, is the layout's)
            if one:
                w.s[TTMP0 + 9] = wgx
                w.s[TTMP0 + 7] = (wgy & 0xFFFF) | (wgz & 0xFFFF) << 16
            else:
                w.s[TTMP0 + 9] = np.repeat(wgx, wpg).astype(np.uint32)
                w.s[TTMP0 + 7] = np.repeat((wgy & 0xFFFF) | (wgz & 0xFFFF) << 16, wpg).astype(np.uint32)
        self.scratch_slot = lay.scratch_slot
        # LDS, one block per workgroup
        self.lds_bytes = d.lds_bytes
        self.lds = POOL.zeros((nwg * d.lds_bytes,), np.uint8) if d.lds_bytes else _NO_LDS   # (never read: size 0)
        w.lds_base = lay.lds_base
        w.lds_size = d.lds_bytes
        if lay.lds_words is not None:
            w.lds_rows = wpg
            w.lds_words = lay.lds_words
        else:
            w.lds_rows, w.lds_words = 0, _NO_LDS_WORDS
        w.lds = self.lds
        w.mem = core.mem
        w.scratch_base = lay.scratch_off + np.uint64(d.scratch_base) if d.scratch_base else lay.scratch_off
        w.scratch_wave_bytes = d.scratch_wave_bytes
        w.xcc = d.xcc
        w.dispatch = d
        # the registers set so far (v0, the SGPRs below sgpr_top and the special ones): what the JIT's blocks touch
        # is added as they run (jit/runtime.py step), every register once the interpreter runs a step
        w.dirty_v, w.dirty_s = 1, lay.sgpr_top
        self.uniform: int | None = d.pgm_addr     # every wave starts at the first instruction, running
        self.jit = jit_hook()           # (asked once per batch: a sliced run calls run() many times)

    def run(self, stats: Stats, max_steps: int | None = None) -> bool:
        """Execute until every wave ended (True) or max_steps steps were taken (False)."""
        counts = [0, 0, 0]              # steps, wave-instructions, lane steps of this call (added to stats at the end)
        try:
            with np.errstate(all="ignore"):     # IEEE exceptions are results here, not errors: set once per call
                return self._run(counts, max_steps)
        finally:
            stats.steps += counts[0]
            stats.wave_instructions += counts[1]
            stats.lane_steps += counts[2]

    def _run(self, counts: list[int], max_steps: int | None) -> bool:
        w, icache, wave64, n = self.w, self.core.icache_for(self.d), self.lanes == 64, self.w.n
        lanes = self.lanes
        lanes_all = n * lanes
        direct = n <= 2 * max(1, BLOCK_LANES // lanes)     # no step is split into blocks: each runs whole
        limit_steps = max_steps if max_steps is not None else 1 << 62
        steps = wave_insts = lane_steps = 0
        every = slice(None)
        uniform = self.uniform          # the PC every wave is at while all run together, else None
        group = None                    # (waves, PC, lowest PC of the other runnable waves) in straight-line code
        jit = self.jit
        ask = jit.step if jit is not None else None
        limit = None                    # lowest PC of the runnable waves not in this step (None: every wave is in it)
        get = icache.get
        quiet_lo = quiet_hi = 0         # the JIT has nothing compiled in [lo, hi) while the waves run straight on
        skipped = skipped_work = 0      # interpreted steps (wave-instructions) since the JIT was last asked
        try:
            while True:
                if uniform is not None:
                    pc, sel, k, limit = uniform, every, n, None
                elif group is not None:
                    sel, pc, limit = group
                    k = len(sel)
                elif n <= SMALL:
                    st, pcs = w.status.tolist(), w.pc.tolist()
                    live = [i for i in range(n) if st[i] == RUN]
                    if not live:
                        if all(x == DONE for x in st):
                            return True
                        self._release_barriers()
                        if not (w.status == RUN).any():
                            raise GPUException("all live waves wait at a barrier that can never complete")
                        continue
                    pc = min(pcs[i] for i in live)
                    at = [i for i in live if pcs[i] == pc]
                    if len(at) == n:
                        sel, k, uniform, limit = every, n, pc, None
                    else:
                        sel, k = np.array(at, np.intp), len(at)
                        limit = min((pcs[i] for i in live if pcs[i] != pc), default=None)
                else:
                    runnable = w.status == RUN
                    if not runnable.any():
                        if (w.status == DONE).all():
                            return True
                        self._release_barriers()
                        if not (w.status == RUN).any():
                            raise GPUException("all live waves wait at a barrier that can never complete")
                        continue
                    pcs = w.pc[runnable]
                    pc = int(pcs.min())
                    if pcs.max() == pc and runnable.all():
                        sel, k, uniform, limit = every, n, pc, None
                    else:
                        at = w.pc == pc
                        sel = np.flatnonzero(runnable & at)
                        k = len(sel)
                        rest = pcs[pcs != pc]
                        group = (sel, pc, int(rest.min()) if len(rest) else 1 << 64)
                        limit = group[2]
                if ask is None:
                    pass
                elif quiet_lo <= pc < quiet_hi:     # (nothing compiled here: jit/runtime.py lookup)
                    skipped += 1
                    skipped_work += k
                else:                       # ---- JIT hook: the compiled block at pc, if there is one (jit/runtime.py)
                    done = ask(self, icache, sel, pc, k, limit, limit_steps - steps, skipped, skipped_work)
                    skipped = skipped_work = 0
                    if done.__class__ is int:
                        quiet_lo, quiet_hi = pc, done
                    elif done is not None:
                        quiet_hi = 0
                        ninst, nbytes, control, wave_instructions = done
                        if control:
                            uniform = group = None
                        elif uniform is not None:
                            uniform += nbytes
                            w.pc.fill(uniform)
                        else:
                            w.pc[sel] += nbytes
                            if group is not None:
                                group = (sel, pc + nbytes, group[2]) if pc + nbytes < group[2] else None
                        steps += ninst
                        wave_insts += wave_instructions
                        lane_steps += wave_instructions * lanes
                        if w.barrier_pending:   # (compiled s_endpgm)
                            w.barrier_pending = False
                            uniform = group = None
                            self._release_barriers()
                        if steps >= limit_steps:
                            self.uniform = uniform
                            return False
                        continue            # ---- end of the JIT hook
                fn, inst, control, whole, _ = get(pc, wave64)
                if w.dirty_s < SGPR_SPECIAL:    # (an interpreted step may write any register)
                    w.dirty_v, w.dirty_s = w.v.shape[0], SGPR_SPECIAL
                try:
                    (whole if direct else fn)(w, sel)
                except IndexError as e:
                    raise GPUException(f"{inst.mnemonic} at pc {pc:#x}: register out of the wave's allocation ({e})",
                                       pc=pc) from None
                except GPUException as e:
                    e.info.setdefault("pc", pc)
                    e.info.setdefault("instruction", inst.mnemonic)
                    if f"pc {pc:#x}" not in str(e):
                        e.args = (f"{e.args[0]} by {inst.mnemonic} at pc {pc:#x}",)
                    raise
                if control:
                    uniform = group = None
                    quiet_hi = 0
                elif uniform is not None:       # every wave is at this PC: all move on together
                    uniform += inst.size
                    w.pc.fill(uniform)
                else:
                    w.pc[sel] += inst.size
                    if group is not None:       # the same waves go on while they stay below the others
                        group = (sel, pc + inst.size, group[2]) if pc + inst.size < group[2] else None
                steps += 1
                wave_insts += k
                lane_steps += lanes_all if k == n else k * lanes
                if w.barrier_pending:
                    w.barrier_pending = False
                    uniform = group = None
                    quiet_hi = 0
                    self._release_barriers()
                if steps >= limit_steps:
                    self.uniform = uniform
                    return False
        finally:
            counts[0] += steps
            counts[1] += wave_insts
            counts[2] += lane_steps
            if skipped:
                jit.settle(icache, skipped, skipped_work)

    def _release_barriers(self) -> None:
        w = self.w
        if w.n <= SMALL and BARRIER not in w.status.tolist():
            return                      # (no wave waits: a wave ended, as every one-wave dispatch's does)
        at = w.status == BARRIER
        if at.all():                    # every wave arrived: all go on
            w.status[:] = RUN
            return
        if not at.any():
            return
        alive = np.bincount(w.wg[w.status != DONE], minlength=self.nwg)
        waiting = np.bincount(w.wg[at], minlength=self.nwg)
        ready = (waiting == alive) & (alive > 0)
        w.status[at & ready[w.wg]] = RUN


_JIT: list = []                         # the jit package once imported (None: it cannot load)


def jit_hook():
    """The JIT (its hooks: step and settle, jit/runtime.py), or None when AMDQ_SIM_JIT=0 or the JIT cannot load. The
    first call imports the JIT (the simulated GPU makes it when it is made, not in a first dispatch)."""
    if not _JIT:
        try:
            from . import jit
        except ImportError:             # llvmlite missing: the interpreter runs everything
            jit = None
        else:
            jit.prepare()               # (LLVM started in the background when there is compiled code to load)
        _JIT.append(jit)
    jit = _JIT[0]
    return jit if jit is not None and jit.enabled() else None


class ShaderCore:
    """The compute units of one device (or of a standalone run over a flat memory).

    max_lanes bounds a batch: 2^18 lanes keep a batch's registers near the caches, which pays for the extra
    numpy steps (vadd and the LDS reduction run faster than with 2^20-lane batches)."""

    def __init__(self, mem: GPUMemory, max_lanes: int = 1 << 18):
        self.mem, self.max_lanes = mem, max_lanes
        self.icaches: dict[str, ICache] = {}          # by ISA family: each with its family's front end

    def icache_for(self, d: DispatchRegs) -> ICache:
        family = d.isa or (GENERATIONS[d.gfx].isa if d.gfx in GENERATIONS else f"gfx{d.gfx}")
        ic = self.icaches.get(family)
        if ic is None:
            ic = self.icaches[family] = ICache(self.mem, for_isa(family, d.pgm_addr))
        return ic

    @property
    def icache(self) -> ICache:
        """The RDNA3 instruction cache (the one standalone runs use)."""
        return self.icache_for(DispatchRegs(0, 0, 0, 0, (1, 1, 1), (1, 1, 1), [], gfx=11))

    def invalidate_icache(self) -> None:
        """An instruction-cache invalidate (ACQUIRE_MEM GLI_INV, an AQL acquire fence)."""
        for ic in self.icaches.values():
            ic.invalidate()

    def dispatch(self, d: DispatchRegs, max_steps: int | None = None) -> Stats:
        """Run a whole dispatch to completion."""
        run = self.start(d)
        while not run.step(max_steps or 1 << 62):
            pass
        return run.stats

    def start(self, d: DispatchRegs, ids: np.ndarray | None = None) -> "Run":
        """Start a dispatch: every workgroup of the grid, or only the flat workgroup ids `ids` (one die's share)."""
        self.icache_for(d)                  # a family without a front end is refused when the dispatch starts
        return Run(self, d, ids)


class Run:
    """A dispatch in progress (all its workgroups, or one die's share): batches of workgroups executed in
    order, resumable."""

    def __init__(self, core: ShaderCore, d: DispatchRegs, ids: np.ndarray | None = None):
        self.core, self.d, self.stats = core, d, Stats()
        gx, gy, gz = d.grid
        self.ids = None if ids is None else np.asarray(ids, np.int64)
        self.total = gx * gy * gz if ids is None else len(self.ids)
        threads = d.block[0] * d.block[1] * d.block[2]
        if threads == 0 or threads > 1024:
            raise InvalidPacket(f"dispatch workgroup of {threads} work-items (1..1024 allowed)")
        lanes = 64 if d.wave64 else 32
        per_wg = -(-threads // lanes) * lanes
        self.per_batch = max(1, core.max_lanes // per_wg)
        if d.scratch_wave_bytes and d.scratch_waves:
            wpg = per_wg // lanes
            if d.scratch_waves < wpg:
                raise InvalidPacket(f"COMPUTE_TMPRING_SIZE.WAVES={d.scratch_waves} cannot hold one workgroup of {wpg} "
                                    f"waves that need scratch")
            self.per_batch = min(self.per_batch, d.scratch_waves // wpg)
        self.next_wg = 0
        self.batch: Batch | None = None
        self._retired = 0
        self.progress = Progress("dispatch of %#x on XCC %d", d.pgm_addr, d.xcc) if d.xcc else \
            Progress("dispatch of %#x", d.pgm_addr)

    @property
    def waves_retired(self) -> int:
        """Waves that have ended so far (progress a watchdog can see)."""
        b = self.batch
        return self._retired + (int((b.w.status == DONE).sum()) if b is not None else 0)

    @property
    def done(self) -> bool:
        return self.batch is None and self.next_wg >= self.total

    def step(self, max_steps: int) -> bool:
        """Advance by up to max_steps numpy steps; True when the dispatch has finished."""
        while not self.done:
            if self.batch is None:
                end = min(self.total, self.next_wg + self.per_batch)
                ids = np.arange(self.next_wg, end) if self.ids is None else self.ids[self.next_wg:end]
                self.next_wg += len(ids)
                self.batch = Batch(self.d, ids, self.core)
                self.stats.waves += self.batch.w.n
                self.stats.workgroups += len(ids)
            if not self.batch.run(self.stats, max_steps):
                return False
            self._retired += self.batch.w.n
            self.batch.w.release()
            self.batch = None
            self.progress.update(self.next_wg, self.total)
        return True


__all__ = ["ShaderCore", "DispatchRegs", "Stats", "UnsupportedInstruction"]
