"""The shader core's view of memory: GPU virtual addresses to bytes, per lane, vectorised.

A memory model (the simulated device's MMU, or `FlatMemory` for running a kernel on its own)
implements `translate`; the load/store/atomic helpers here do the rest. A lane touching an address
the model does not map raises GPUFault naming the first such address.

The byte-array helpers (`gather`, `scatter`, `rmw`) also serve LDS and scratch, which live in plain
uint8 arrays. Atomics are applied lane by lane in lane order (waves in batch order, lanes in
ascending order): lanes on distinct addresses in one numpy pass; lanes sharing an address by a
segmented scan for associative operations, else in rounds (the k-th lane of every address in round k).
"""
from __future__ import annotations

import bisect
from typing import Callable, NamedTuple, Protocol

import numpy as np

from ...errors import GPUFault, OutOfMemory

Chunk = tuple[np.ndarray, "np.ndarray | None", np.ndarray]   # (backing uint8 array, lane indices or None=all, offsets)
U32, U64 = np.uint32, np.uint64


class GPUMemory(Protocol):
    def translate(self, addr: np.ndarray, nbytes: int, write: bool) -> list[Chunk]:
        """Split lanes by backing store; every lane's [addr, addr+nbytes) must be mapped, else GPUFault.

        Lane indices of a chunk are ascending (lane order is kept within a backing store)."""


PAGE = 4096


class FlatMemory:
    """A bump-allocated arena of GPU virtual memory: what a kernel sees when run without a device."""

    def __init__(self, size: int = 1 << 30, base: int = 0x1000_0000_0000):
        self.base, self.size = base, size
        self.buf = np.zeros(size, np.uint8)            # zero pages are not touched until written
        self.top = 0
        self.starts: list[int] = []                     # allocation starts and ends (virtual), sorted
        self.ends: list[int] = []

    def alloc(self, nbytes: int, align: int = 256) -> int:
        off = (self.top + align - 1) & -align
        if off + nbytes > self.size:
            raise OutOfMemory(f"flat memory: {nbytes} bytes requested, {self.size - off} free of {self.size}")
        self.top = off + max(nbytes, 1)
        self.starts.append(self.base + off)
        self.ends.append(self.base + off + nbytes)
        return self.base + off

    def upload(self, data: bytes | np.ndarray, align: int = 256) -> int:
        raw = np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), np.uint8)
        addr = self.alloc(len(raw), align)
        self.write(addr, raw)
        return addr

    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        raw = np.frombuffer(data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes(),
                            np.uint8)
        self.buf[addr - self.base:addr - self.base + len(raw)] = raw

    def read(self, addr: int, nbytes: int) -> bytes:
        return self.buf[addr - self.base:addr - self.base + nbytes].tobytes()

    @property
    def jit_key(self) -> np.ndarray:
        """What a range jit_span returned depends on: the arena (an allocation never moves or shrinks), so the
        shader JIT keeps its translated-range tables from one batch to the next while this stays the same."""
        return self.buf

    def jit_span(self, addr: int, nbytes: int, write: bool) -> tuple[int, int, int] | None:
        """(lo, hi, host address of lo): the allocation holding [addr, addr + nbytes), which translate maps
        linearly; None when translate would fault (the shader JIT's translated-range table, jit/runtime.py)."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr + nbytes > self.ends[i]:
            return None
        lo = self.starts[i]
        return lo, self.ends[i], self.buf.ctypes.data + (lo - self.base)

    def translate_one(self, va: int, nbytes: int, write: bool) -> tuple[np.ndarray, int] | None:
        """(backing bytes, offset) of [va, va + nbytes) inside one allocation, else None (translate faults)."""
        i = bisect.bisect_right(self.starts, va) - 1
        if i < 0 or va + nbytes > self.ends[i]:
            return None
        return self.buf, va - self.base

    def translate(self, addr: np.ndarray, nbytes: int, write: bool) -> list[Chunk]:
        addr = np.asarray(addr, U64)
        lo, hi = int(addr.min()), int(addr.max()) + nbytes
        i = bisect.bisect_right(self.starts, lo) - 1
        if i >= 0 and hi <= self.ends[i]:               # every lane inside one allocation
            return [(self.buf, None, (addr - U64(self.base)).view(np.int64))]
        starts = np.array(self.starts, U64)
        ends = np.array(self.ends, U64)
        j = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
        ok = (j >= 0) & (addr + U64(nbytes) <= ends[np.maximum(j, 0)]) & (addr + U64(nbytes) > addr)
        if not ok.all():
            bad = int(addr[np.argmin(ok)])
            raise GPUFault(f"GPU page fault: {'write' if write else 'read'} of {nbytes} bytes at {bad:#x} "
                           f"(not mapped)", address=bad, write=write)
        return [(self.buf, None, (addr - U64(self.base)).view(np.int64))]


# ---------------------------------------------------------------- byte arrays

def _view(buf: np.ndarray, dt) -> np.ndarray:
    size = np.dtype(dt).itemsize
    return buf[:buf.size - buf.size % size].view(dt)


def _misaligned(off: np.ndarray, mask: int) -> bool:
    return bool(np.bitwise_or.reduce(off) & mask) if len(off) else False


def gather(buf: np.ndarray, off: np.ndarray, nbytes: int) -> np.ndarray:
    """Bytes at byte offsets `off` of `buf`: uint32 (n, max(1, nbytes/4)); 1- and 2-byte reads zero-extend."""
    words = max(1, nbytes // 4)
    if nbytes >= 4:
        if not _misaligned(off, 3):
            w = _view(buf, U32)
            return w.take(off >> 2, mode="clip")[:, None] if words == 1 else w[(off >> 2)[:, None] + np.arange(words)]
        return np.ascontiguousarray(buf[off[:, None] + np.arange(nbytes)]).view(U32).reshape(-1, words)
    if nbytes == 2:
        if not _misaligned(off, 1):
            return _view(buf, np.uint16)[off >> 1].astype(U32)[:, None]
        b = buf[off[:, None] + np.arange(2)].astype(U32)
        return (b[:, 0] | b[:, 1] << 8)[:, None]
    return buf[off].astype(U32)[:, None]


def scatter(buf: np.ndarray, off: np.ndarray, data: np.ndarray, nbytes: int) -> None:
    """Write each lane's low `nbytes` of data (uint32 (n, words) or (n,)) at byte offsets `off` (later lanes win)."""
    data = np.asarray(data, U32).reshape(len(off), -1)
    if nbytes >= 4 and not _misaligned(off, 3):
        words = nbytes // 4
        w = _view(buf, U32)
        if words == 1:
            w[off >> 2] = data[:, 0]
        else:
            w[(off >> 2)[:, None] + np.arange(words)] = data[:, :words]
    elif nbytes == 2 and not _misaligned(off, 1):
        _view(buf, np.uint16)[off >> 1] = data[:, 0].astype(np.uint16)
    elif nbytes == 1:
        buf[off] = data[:, 0].astype(np.uint8)
    else:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(len(off), -1)[:, :nbytes]
        buf[off[:, None] + np.arange(nbytes)] = raw


def load(mem: GPUMemory, addr: np.ndarray, nbytes: int) -> np.ndarray:
    """Bytes at each lane's address: uint32 array (n, max(1, nbytes/4)); 1- and 2-byte loads zero-extend."""
    chunks = mem.translate(addr, nbytes, False)
    if len(chunks) == 1 and chunks[0][1] is None:
        return gather(chunks[0][0], chunks[0][2], nbytes)
    out = np.empty((addr.shape[0], max(1, nbytes // 4)), U32)
    for buf, idx, off in chunks:
        out[idx] = gather(buf, off, nbytes)
    return out


def store(mem: GPUMemory, addr: np.ndarray, data: np.ndarray, nbytes: int) -> None:
    """Write each lane's data (uint32 (n, words), or (n,) for sub-dword stores) in lane order."""
    data = np.asarray(data, U32).reshape(addr.shape[0], -1)
    for buf, idx, off in mem.translate(addr, nbytes, True):
        scatter(buf, off, data if idx is None else data[idx], nbytes)


_gather = gather      # older name


# ---------------------------------------------------------------- atomics

class AtomicOp(NamedTuple):
    """new = fn(old, src, cmp) on uint32/uint64 values.

    scan: an associative operation with fn(m, scan(a, b)) == fn(fn(m, a), b), which lets many lanes on one
    address be folded by a prefix scan. seq(init, src, cmp) -> (old values, final value, or None when it
    does not apply): the sequential result for one address with many lanes, vectorised."""
    fn: Callable
    scan: Callable | None = None
    seq: Callable | None = None


def _s(dt):
    return np.int32 if dt == U32 else np.int64


def _f(dt):
    return np.float32 if dt == U32 else np.float64


def _minmax(pick, signed: bool):
    def fn(a, b, c=None):
        if signed:
            t = _s(a.dtype)
            return np.where(pick(a.view(t), b.view(t)), a, b)
        return np.where(pick(a, b), a, b)
    return fn


def _fbin(f):
    def fn(m, s, c=None):
        t = _f(m.dtype)
        return f(m.view(t), s.view(t)).astype(t).view(m.dtype)
    return fn


def _inc(m, s, c=None):
    return np.where(m >= s, m.dtype.type(0), m + m.dtype.type(1))


def _dec(m, s, c=None):
    return np.where((m == 0) | (m > s), s, m - m.dtype.type(1))


def _fcmp(m, s, c):
    t = _f(m.dtype)
    return np.where(m.view(t) == c.view(t), s, m)


def _seq_fadd(init, src, cmp):
    t = _f(src.dtype)
    acc = np.add.accumulate(np.concatenate([init[:1], src]).view(t), dtype=t).view(src.dtype)
    return acc[:-1], acc[-1]


def _seq_cas(floats: bool):
    """Compare-and-swap by many lanes on one address: jump from one successful lane to the next."""
    def seq(init, src, cmp):
        cur, n, pos = init[0], len(src), 0
        old = np.empty(n, src.dtype)
        c = cmp.view(_f(src.dtype)) if floats else cmp
        while pos < n:
            key = cur.view(_f(src.dtype)) if floats else cur
            hit = np.flatnonzero(c[pos:] == key)
            k = n - 1 if not len(hit) else pos + int(hit[0])
            old[pos:k + 1] = cur
            if len(hit):
                cur = src[k]
            pos = k + 1
        return old, cur
    return seq


def _seq_incdec(dec: bool):
    """INC/DEC by lanes sharing one threshold s: a counter modulo s + 1 once inside [0, s] (closed form)."""
    def seq(init, src, cmp):
        s = src[0]
        if (src != s).any():
            return None, None
        dt = src.dtype.type
        m0 = init[0]
        k = np.arange(len(src) + 1, dtype=dt)                  # old values of every lane, then the final value
        p = dt((int(s) + 1) % (1 << (8 * src.dtype.itemsize)))
        with np.errstate(over="ignore"):
            if p == 0:                                         # threshold = max: plain wrapping count
                return ((m0 - k) if dec else (m0 + k))[:-1], ((m0 - k) if dec else (m0 + k))[-1]
            start, r = (m0, k % p) if m0 <= s else ((s if dec else dt(0)), (k - dt(1)) % p)
            if dec:
                v = np.where(r <= start, start - r, start + (p - r))
            else:
                v = np.where(r < p - start, start + r, r - (p - start))
        v = v.astype(dt)
        if m0 > s:
            v[0] = m0
        return v[:-1], v[-1]
    return seq


_sub = lambda m, s, c=None: m - s                      # noqa: E731
_add = lambda m, s, c=None: m + s                      # noqa: E731
_swap = lambda m, s, c=None: s                         # noqa: E731

ATOMICS: dict[str, AtomicOp] = {
    "add": AtomicOp(_add, _add),
    "sub": AtomicOp(_sub, _add),
    "rsub": AtomicOp(lambda m, s, c=None: s - m),
    "csub": AtomicOp(lambda m, s, c=None: np.where(s > m, m.dtype.type(0), m - s)),
    "min_i": AtomicOp(_minmax(np.less, True), _minmax(np.less, True)),
    "max_i": AtomicOp(_minmax(np.greater, True), _minmax(np.greater, True)),
    "min_u": AtomicOp(_minmax(np.less, False), _minmax(np.less, False)),
    "max_u": AtomicOp(_minmax(np.greater, False), _minmax(np.greater, False)),
    "and": AtomicOp(lambda m, s, c=None: m & s, lambda a, b: a & b),
    "or": AtomicOp(lambda m, s, c=None: m | s, lambda a, b: a | b),
    "xor": AtomicOp(lambda m, s, c=None: m ^ s, lambda a, b: a ^ b),
    "inc": AtomicOp(_inc, seq=_seq_incdec(False)),
    "dec": AtomicOp(_dec, seq=_seq_incdec(True)),
    "swap": AtomicOp(_swap, lambda a, b: b),
    "cmpswap": AtomicOp(lambda m, s, c: np.where(m == c, s, m), seq=_seq_cas(False)),
    "cmpswap_f": AtomicOp(_fcmp, seq=_seq_cas(True)),
    "mskor": AtomicOp(lambda m, s, c: (m & ~s) | c),
    "wrap": AtomicOp(lambda m, s, c: np.where(m >= s, m - s, m + c)),
    "add_f": AtomicOp(_fbin(np.add), seq=_seq_fadd),
    "min_f": AtomicOp(_fbin(np.fmin)),
    "max_f": AtomicOp(_fbin(np.fmax)),
    "min_f_ds": AtomicOp(_fbin(lambda m, s: np.where(s < m, s, m))),
    "max_f_ds": AtomicOp(_fbin(lambda m, s: np.where(s > m, s, m))),
}

ROUNDS_BEFORE_SCAN = 4     # conflicts up to this depth go by rounds even when a scan exists
SEQ_GROUP = 32             # address groups larger than this go by the op's vectorised sequential form, if any


def _read(buf: np.ndarray, off: np.ndarray, dt) -> np.ndarray:
    size = np.dtype(dt).itemsize
    if not _misaligned(off, size - 1):
        return _view(buf, dt)[off // size]
    return np.ascontiguousarray(buf[off[:, None] + np.arange(size)]).view(dt).reshape(-1)


def _write(buf: np.ndarray, off: np.ndarray, val: np.ndarray, dt) -> None:
    size = np.dtype(dt).itemsize
    val = np.ascontiguousarray(val, dt)
    if not _misaligned(off, size - 1):
        _view(buf, dt)[off // size] = val
    else:
        buf[off[:, None] + np.arange(size)] = val.view(np.uint8).reshape(-1, size)


def rmw(buf: np.ndarray, off: np.ndarray, op: AtomicOp, src: np.ndarray, cmp: np.ndarray | None = None) -> np.ndarray:
    """Apply an atomic to byte offsets `off` of `buf` in lane order; returns each lane's old value.

    src/cmp: (n,) uint32 or uint64 (the width of the access)."""
    dt = src.dtype.type
    n = len(off)
    if cmp is None:
        cmp = src
    if n <= 1 or (off[1:] > off[:-1]).all():            # distinct addresses (the usual layout)
        old = _read(buf, off, dt)
        _write(buf, off, op.fn(old, src, cmp), dt)
        return old
    order = np.argsort(off, kind="stable")
    so = off[order]
    first = np.empty(n, bool)
    first[0] = True
    np.not_equal(so[1:], so[:-1], out=first[1:])
    if first.all():
        old = _read(buf, off, dt)
        _write(buf, off, op.fn(old, src, cmp), dt)
        return old
    starts = np.flatnonzero(first)
    gid = np.cumsum(first) - 1
    rank = np.arange(n) - starts[gid]
    depth = int(rank.max()) + 1
    old = np.empty(n, dt)
    if op.scan is not None and depth > ROUNDS_BEFORE_SCAN:
        x = src[order]
        d = 1
        while d < depth:                                 # segmented inclusive scan (Hillis-Steele)
            same = rank[d:] >= d
            x[d:] = np.where(same, op.scan(x[:-d], x[d:]), x[d:])
            d *= 2
        init = _read(buf, so[starts], dt)
        old_s = init[gid]
        k = np.flatnonzero(rank > 0)
        old_s[k] = op.fn(old_s[k], x[k - 1], cmp[order][k])
        last = np.r_[starts[1:], n] - 1
        _write(buf, so[starts], op.fn(init, x[last], cmp[order][last]), dt)
        old[order] = old_s
        return old
    sizes = np.diff(np.r_[starts, n])
    done = np.zeros(n, bool)                             # by sorted position
    if op.seq is not None and sizes.max() > SEQ_GROUP:
        for g in np.flatnonzero(sizes > SEQ_GROUP):
            a, b = starts[g], starts[g] + sizes[g]
            idx = order[a:b]
            o, fin = op.seq(_read(buf, so[a:a + 1], dt), src[idx], cmp[idx])
            if o is None:
                continue
            old[idx] = o
            _write(buf, so[a:a + 1], np.array([fin], dt), dt)
            done[a:b] = True
    keep = ~done
    pos = np.flatnonzero(keep)
    r = rank[pos]
    by_rank = pos[np.argsort(r, kind="stable")]
    bounds = np.searchsorted(np.sort(r), np.arange(int(r.max()) + 2 if len(r) else 1))
    for i in range(len(bounds) - 1):
        p = order[by_rank[bounds[i]:bounds[i + 1]]]
        if not len(p):
            continue
        o = _read(buf, off[p], dt)
        old[p] = o
        _write(buf, off[p], op.fn(o, src[p], cmp[p]), dt)
    return old


def atomic(mem: GPUMemory, addr: np.ndarray, op: AtomicOp, src: np.ndarray,
           cmp: np.ndarray | None = None) -> np.ndarray:
    """An atomic read-modify-write at each lane's virtual address (lane order); returns the old values."""
    width = src.dtype.itemsize
    old = np.empty(len(addr), src.dtype)
    for buf, idx, off in mem.translate(addr, width, True):
        if idx is None:
            return rmw(buf, off, op, src, cmp)
        old[idx] = rmw(buf, off, op, src[idx], None if cmp is None else cmp[idx])
    return old
