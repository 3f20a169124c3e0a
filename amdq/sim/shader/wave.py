"""Register state of a batch of waves, laid out so one numpy operation executes one instruction for
every wave that shares a program counter.

VGPRs are `v[reg, wave, lane]`, SGPRs `s[reg, wave]` (the whole 0..127 operand space: VCC at 106/107,
NULL 124, M0 125, EXEC 126/127), SCC and PC one entry per wave. The EXEC lane mask is kept unpacked
(`em`) beside its SGPR image, with a per-wave "all lanes on" flag for the common fast path.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import sys
import threading

import numpy as np

RUN, BARRIER, DONE = 0, 1, 2
VCC, NULL, M0, EXEC = 106, 124, 125, 126
SGPR_SPECIAL = VCC          # SGPR operand space from here on: VCC, TTMP0-15, NULL, M0, EXEC

# Flat-address apertures (high 32 bits), as src_shared_base / src_private_base report them.
SHARED_APERTURE_HI = 0x0001_0000
PRIVATE_APERTURE_HI = 0x0002_0000


def bits_to_mask(lo: np.ndarray, hi: np.ndarray | None, lanes: int) -> np.ndarray:
    """(k,) uint32 words (and the high words for wave64) -> (k, lanes) bool."""
    words = np.asarray(lo, np.uint32) if hi is None else np.stack([lo, hi], 1).astype(np.uint32)
    words = np.ascontiguousarray(words).reshape(-1)
    m = np.unpackbits(words.view(np.uint8), bitorder="little").view(bool)   # flat: many times faster than axis=1
    n = len(words) // (1 if hi is None else 2)
    return m.reshape(n, -1)[:, :lanes]


def mask_to_bits(m: np.ndarray) -> np.ndarray:
    """(k, lanes) bool -> (k, lanes // 32) uint32."""
    return np.packbits(np.ascontiguousarray(m).reshape(-1), bitorder="little").view(np.uint32).reshape(m.shape[0], -1)


POOLED = 128 << 10      # arrays from this many bytes on are pooled (smaller ones come from malloc's heap, whose
                        # memory is mapped already; larger ones malloc maps fresh, a page fault per page)
RESERVE = 8 << 20       # bytes the pool maps and faults in ahead (Pool.prefault): the register files of a first
                        # batch of a few thousand waves


def _libc_memset():
    try:
        f = ctypes.CDLL(None).memset
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t), ctypes.c_void_p
    return f


_memset = _libc_memset()


class Pool:
    """Large zeroed arrays reused from one batch to the next. Fresh anonymous memory costs a page fault per
    4 KiB on first touch (several microseconds each on a VM: far more than writing the page); clearing a
    buffer that is already mapped costs one pass."""

    def __init__(self, cap: int = 1 << 29):
        self.cap, self.held, self.free = cap, 0, {}
        self.lock = threading.Lock()
        self.reserve: np.ndarray | None = None          # zeroed memory already mapped (prefault), handed out once
        self.reserve_at = 0
        self.prefaulting = False

    def prefault(self, nbytes: int = RESERVE) -> None:
        """Map nbytes of zeroed memory and fault its pages in on a background thread (memset in C: the interpreter
        lock is free meanwhile); new buffers come from it once it is ready, their page faults paid off the
        dispatch's path. Once per process (a device opening calls it)."""
        with self.lock:
            if self.prefaulting or nbytes <= 0 or _memset is None:
                return
            self.prefaulting = True

        def fill():
            try:
                a = np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)
                _memset(a.ctypes.data, 0, nbytes)
            except (OSError, ValueError, AttributeError):
                return
            with self.lock:
                self.reserve, self.reserve_at = a, 0
        threading.Thread(target=fill, name="amdq-pool-prefault", daemon=True).start()

    def _from_reserve(self, nbytes: int) -> np.ndarray | None:
        with self.lock:
            r = self.reserve
            if r is None or self.reserve_at + nbytes > len(r):
                return None
            at = self.reserve_at
            self.reserve_at += -(-nbytes // PAGE) * PAGE
        return r[at:at + nbytes]

    def zeros(self, shape: tuple[int, ...], dtype, skip: int = 0) -> np.ndarray:
        """A zeroed array, except that the first `skip` bytes may hold stale data (the caller overwrites them)."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes < POOLED:
            return np.empty(shape, dtype) if skip >= nbytes else np.zeros(shape, dtype)
        with self.lock:
            bufs = self.free.get(nbytes)
            buf, dirty = bufs.pop() if bufs else (None, None)
            if buf is not None:
                self.held -= nbytes
        if buf is None:                                 # fresh memory, zero already: the reserve's (faulted in
            buf = self._from_reserve(nbytes)            # ahead) or zero pages, mapped on first touch
            if buf is None:
                buf = np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)
        elif dirty is None:
            _clear(buf, skip)
        else:
            for lo, hi in dirty:
                lo = max(lo, skip)
                if hi > lo:
                    _clear_range(buf, lo, hi)
        return buf.view(dtype).reshape(shape)

    def give(self, *arrays: np.ndarray, dirty: tuple | None = None) -> None:
        """Return arrays from zeros() (no longer used by anyone). dirty: for each array, the byte ranges (lo, hi)
        outside which it still holds only zeros (None: anywhere), so that only those are cleared again."""
        for j, a in enumerate(arrays):
            if a.nbytes < POOLED or not a.flags.c_contiguous:
                continue
            base = a.reshape(-1).view(np.uint8)
            with self.lock:
                if self.held + a.nbytes <= self.cap:
                    self.free.setdefault(a.nbytes, []).append((base, dirty[j] if dirty is not None else None))
                    self.held += a.nbytes


PAGE = mmap.PAGESIZE
POOL = Pool()


def _mincore():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        f = libc.mincore
    except (OSError, AttributeError):
        return None
    f.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    f.restype = ctypes.c_int
    return f


def _swap() -> bool:
    """Swap is on: a written page may then be out of core, and mincore would call it never written."""
    try:
        with open("/proc/swaps") as f:
            return len(f.read().strip().splitlines()) > 1
    except OSError:
        return True


_MINCORE = _mincore() if sys.platform.startswith("linux") and not _swap() else None


def _clear_range(buf: np.ndarray, lo: int, hi: int) -> None:
    """Zero buf[lo:hi] (buf page-aligned, its mapping whole pages), writing only the pages that are mapped: a page
    never written still reads as zero, and writing it would cost a page fault (several microseconds on a VM)."""
    if hi - lo < 4 * PAGE:
        buf[lo:hi] = 0
        return
    p0, p1 = lo // PAGE, -(-hi // PAGE)
    vec = np.zeros(p1 - p0, np.uint8)
    if _MINCORE is None or _MINCORE(buf.ctypes.data + p0 * PAGE, (p1 - p0) * PAGE, vec.ctypes.data) != 0:
        buf[lo:hi] = 0
        return
    edges = np.flatnonzero(np.diff(np.concatenate(([0], vec & 1, [0])).astype(np.int8)))
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
        buf[max(lo, (p0 + a) * PAGE):min(hi, (p0 + b) * PAGE)] = 0


def _clear(buf: np.ndarray, skip: int = 0) -> None:
    """Zero a page-aligned buffer from byte `skip` on (rounded down to a page), writing only the pages that are
    mapped (the others still read as zero)."""
    _clear_range(buf, skip // PAGE * PAGE, buf.nbytes)


_LANES: dict[int, np.ndarray] = {}


def _lane_ids(n: int) -> np.ndarray:
    """0..n-1 as uint32 (one read-only array per wave size)."""
    a = _LANES.get(n)
    if a is None:
        a = _LANES[n] = np.arange(n, dtype=np.uint32)
        a.flags.writeable = False
    return a


SMALL_STATE = 1 << 20       # register files below this many bytes are kept for the next batch of their shape
FREE_BYTES = 1 << 26        # in all, at most
_FREE: dict[tuple[int, int, int], list] = {}
_held = [0]


ARENA_BYTES = 1 << 17      # states up to this size hold all their register arrays in one buffer (see _carve)
_FIELDS = (("v", np.uint32), ("s", np.uint32), ("em", np.bool_), ("full", np.bool_), ("mode", np.uint32),
           ("scc", np.uint32), ("pc", np.int64), ("status", np.int8))
_CARVED: dict[tuple[int, int, int], tuple[int, tuple]] = {}


def _shapes(n: int, lanes: int, nv: int) -> tuple:
    return ((nv, n, lanes), (128, n), (n, lanes), (n,), (n,), (n,), (n,), (n,))


def _plan(n: int, lanes: int, nv: int) -> tuple[int, tuple]:
    """(bytes, ((name, dtype, shape, offset, bytes), ...)) of a small state's arena: each array 64-byte aligned."""
    key = (n, lanes, nv)
    plan = _CARVED.get(key)
    if plan is None:
        at, parts = 0, []
        for (name, dt), shape in zip(_FIELDS, _shapes(n, lanes, nv)):
            nbytes = math.prod(shape) * np.dtype(dt).itemsize
            parts.append((name, dt, shape, at, nbytes))
            at += -(-nbytes // 64) * 64
        if len(_CARVED) >= 256:
            _CARVED.clear()
        plan = _CARVED[key] = (at, tuple(parts))
    return plan


def _carve(buf: np.ndarray, n: int, lanes: int, nv: int) -> dict[str, np.ndarray]:
    """The register arrays of a state of this shape, as views into its arena `buf` (uint8)."""
    return {name: buf[at:at + nbytes].view(dt).reshape(shape) for name, dt, shape, at, nbytes in _plan(n, lanes, nv)[1]}


class StateImage:
    """The initial contents of a batch's registers that do not change from one batch of a dispatch shape to the
    next (read-only arrays): the SGPR rows `rows` that are set (n waves as columns; every other row starts at zero),
    v0 (work-item ids), the unpacked EXEC and its all-on flags, MODE. (Only the rows set are kept and written: a new
    batch's SGPR file is fresh zeroed memory, whose pages cost a fault each when first written.)"""

    def __init__(self, rows: list[int], s: np.ndarray, v0: np.ndarray, em: np.ndarray, full: np.ndarray,
                 mode: np.ndarray):
        self.rows, self.s, self.v0, self.em, self.full, self.mode = rows, s, v0, em, full, mode
        for a in (s, v0, em, full, mode):
            a.flags.writeable = False
        self._arenas: dict[int, np.ndarray] = {}      # VGPR rows -> a small state's whole arena as it starts

    def arena(self, n: int, lanes: int, nv: int) -> np.ndarray:
        """The bytes of a small state's arena (_carve) holding exactly what a batch starts with: one copy resets
        every register array of a reused state (v1 and up, SCC and PC zero, status RUN)."""
        a = self._arenas.get(nv)
        if a is None:
            a = np.zeros(_plan(n, lanes, nv)[0], np.uint8)
            r = _carve(a, n, lanes, nv)
            r["v"][0] = self.v0
            r["s"][self.rows] = self.s
            r["em"][:] = self.em
            r["full"][:] = self.full
            r["mode"][:] = self.mode
            r["status"][:] = RUN
            a.flags.writeable = False
            if len(self._arenas) >= 8:
                self._arenas.clear()
            self._arenas[nv] = a
        return a


class WaveState:
    jit_ctx = None              # the shader JIT's context block over these arrays (jit/runtime.py), kept with them

    @classmethod
    def fresh(cls, n_waves: int, wave_size: int, n_vgprs: int, v0_written: bool = False,
              image: "StateImage | None" = None) -> "WaveState":
        """A zeroed state: a released small one of the same shape when there is one (its arrays cleared in place:
        a one-wave dispatch costs no allocations, and what points at them stays valid), else a new one. With an
        `image`, its registers start as the image says (one copy per array instead of a clear and the writes)."""
        free = _FREE.get((n_waves, wave_size, max(n_vgprs, 1)))
        if free:
            try:
                w = free.pop()
            except IndexError:          # (another thread took it)
                w = None
            if w is not None:
                _held[0] -= w._bytes()
                if image is None:
                    w._clear(v0_written)
                elif w._arena is not None:      # every array as the image says, in one copy
                    np.copyto(w._arena, image.arena(n_waves, wave_size, w.v.shape[0]))
                    w.mode_ok, w.barrier_pending = None, False
                else:
                    w.v[1:].fill(0)
                    w._load(image, zeroed=False)
                return w
        w = cls(n_waves, wave_size, n_vgprs, v0_written or image is not None)
        if image is not None:
            w._load(image, zeroed=True)
        return w

    def _load(self, im: "StateImage", zeroed: bool) -> None:
        """Registers other than v1 and up as the image says (the SGPRs it does not set: zero, as they are already
        when `zeroed`); SCC, PC and status as a new state has them."""
        self.v[0] = im.v0
        if not zeroed:
            self.s.fill(0)
        self.s[im.rows] = im.s
        np.copyto(self.em, im.em)
        np.copyto(self.full, im.full)
        np.copyto(self.mode, im.mode)
        self.mode_ok = None
        self.scc.fill(0)
        self.pc.fill(0)
        self.status.fill(RUN)
        self.lane_ids = _lane_ids(self.lanes)
        self.barrier_pending = False
        # (the memory, LDS, scratch and workgroup fields are the caller's to set: a batch sets every one)

    def _bytes(self) -> int:
        return self.v.nbytes + self.s.nbytes + self.em.nbytes

    def __init__(self, n_waves: int, wave_size: int, n_vgprs: int, v0_written: bool = False):
        """v0_written: the caller sets the initial state itself (a batch: v0 of every wave, the unpacked EXEC and its
        all-on flags, MODE, and the workgroup, LDS and scratch fields), which is not cleared first."""
        self.n, self.lanes = n_waves, wave_size
        nv = max(n_vgprs, 1)
        size = _plan(n_waves, wave_size, nv)[0]
        if size <= ARENA_BYTES:                 # a small state: every array in one zeroed buffer (reset by one copy)
            self._arena = np.zeros(size, np.uint8)
            r = _carve(self._arena, n_waves, wave_size, nv)
            self.v, self.s, self.em, self.full, self.mode = r["v"], r["s"], r["em"], r["full"], r["mode"]
            self.scc, self.pc, self.status = r["scc"], r["pc"], r["status"]
            if RUN:
                self.status.fill(RUN)
        else:
            self._arena = None
            self.v = POOL.zeros((nv, n_waves, wave_size), np.uint32, n_waves * wave_size * 4 if v0_written else 0)
            self.s = POOL.zeros((128, n_waves), np.uint32)
            self.scc = np.zeros(n_waves, np.uint32)
            self.pc = np.zeros(n_waves, np.int64)
            self.status = np.zeros(n_waves, np.int8) if RUN == 0 else np.full(n_waves, RUN, np.int8)
            self.em = POOL.zeros((n_waves, wave_size), bool, n_waves * wave_size if v0_written else 0)
            self.full = (np.empty if v0_written else np.zeros)(n_waves, bool)
            self.mode = (np.empty if v0_written else np.zeros)(n_waves, np.uint32)   # MODE (round, denorm fields)
        # the registers that may be nonzero, for release to clear only those: VGPR rows below dirty_v, SGPR rows
        # below dirty_s and from SGPR_SPECIAL on (VCC, TTMP, M0, EXEC); a batch that knows better lowers them
        self.dirty_v, self.dirty_s = self.v.shape[0], SGPR_SPECIAL
        self._rest(v0_written)

    def _clear(self, v0_written: bool) -> None:
        """Back to the state __init__ makes, in the same arrays."""
        (self.v[1:] if v0_written else self.v).fill(0)
        for a in (self.s, self.scc, self.pc, self.em, self.full, self.mode):
            a.fill(0)
        self.status.fill(RUN)
        self._rest(v0_written)

    def _rest(self, caller_sets: bool = False) -> None:
        n_waves = self.n
        self.lane_ids = _lane_ids(self.lanes)             # read-only, shared
        self.barrier_pending = False
        self.mode_ok = None     # every wave's MODE as compiled float code needs it (jit/runtime.py _mode_ok); None:
                                # not known (a state's MODE changes only where this is reset: set up, s_setreg & co.)
        # set by the dispatch (a batch sets every one: caller_sets): the workgroup of each wave (index in the batch),
        # memory model, LDS bytes and per-wave base, scratch per wave
        self.wg = None if caller_sets else np.zeros(n_waves, np.int64)
        self.mem = None
        self.lds = np.zeros(4, np.uint8)
        self.lds_base = None if caller_sets else np.zeros(n_waves, np.int64)
        self.lds_size = 0
        self.lds_rows = 0                                  # waves per workgroup (0: unknown)
        self.lds_words = np.zeros((1, 1), np.uint32)      # dword offset of each workgroup's block, (nwg, 1)
        self.scratch_base = None if caller_sets else np.zeros(n_waves, np.uint64)
        self.scratch_wave_bytes = 0
        self.xcc = 0                                       # die of the dispatch (HW_REG_XCC_ID)
        self.dispatch = None

    def release(self) -> None:
        """Hand the register arrays back for the next batch (the state is unusable afterwards): a small state whole
        (WaveState.fresh), the large arrays of others to POOL."""
        size = self._bytes()
        if size < SMALL_STATE and _held[0] + size <= FREE_BYTES:
            key = (self.n, self.lanes, self.v.shape[0])
            free = _FREE.get(key)
            if free is None:
                if len(_FREE) >= 64:
                    _FREE.clear()
                    _held[0] = 0
                free = _FREE[key] = []
            if len(free) < 4:
                self.mem = self.dispatch = None
                self.lds = self.lds_base = self.scratch_base = None
                free.append(self)
                _held[0] += size
                return
        if self._arena is not None:             # (its arrays are views of one small buffer: nothing to pool)
            self.v = self.s = self.em = self.lds = self._arena = None
            return
        rv, rs = self.v.nbytes // self.v.shape[0], self.s.nbytes // self.s.shape[0]
        dirty = ([(0, min(self.dirty_v, self.v.shape[0]) * rv)],
                 [(0, min(self.dirty_s, SGPR_SPECIAL) * rs), (SGPR_SPECIAL * rs, self.s.nbytes)], None, None)
        POOL.give(self.v, self.s, self.em, self.lds, dirty=dirty)
        self.v = self.s = self.em = self.lds = None

    def exec_bits(self, sel) -> np.ndarray:
        lo = self.s[EXEC][sel]
        if self.lanes == 32:
            return lo
        return lo.astype(np.uint64) | self.s[EXEC + 1][sel].astype(np.uint64) << np.uint64(32)

    def refresh_exec(self, sel) -> None:
        """Recompute the unpacked EXEC mask of the selected waves from their SGPR image."""
        lo = np.atleast_1d(self.s[EXEC][sel])
        hi = np.atleast_1d(self.s[EXEC + 1][sel]) if self.lanes == 64 else None
        full = lo == np.uint32(0xFFFFFFFF)
        if hi is not None:
            full &= hi == np.uint32(0xFFFFFFFF)
        self.full[sel] = full
        if full.all():
            self.em[sel] = True
        else:
            self.em[sel] = bits_to_mask(lo, hi, self.lanes)

    def exec_any(self, sel) -> np.ndarray:
        """Per selected wave: some lane of EXEC is on."""
        lo = self.s[EXEC][sel]
        return lo != 0 if self.lanes == 32 else (lo | self.s[EXEC + 1][sel]) != 0

    def all_on(self, sel) -> bool:
        """Every lane of EXEC is on in each selected wave."""
        f = self.full[sel]
        if not f.ndim:
            return bool(f)
        return all(f.tolist()) if len(f) <= 64 else bool(f.all())     # (a short list is cheaper than a reduce)

    def write_v(self, reg: int, sel, val) -> None:
        """EXEC-masked write of one VGPR for the selected waves."""
        dst = self.v[reg]
        if self.all_on(sel):
            dst[sel] = val
        elif isinstance(sel, slice):
            np.copyto(dst[sel], val, where=self.em[sel], casting="unsafe")
        else:
            dst[sel] = np.where(self.em[sel], val, dst[sel])
