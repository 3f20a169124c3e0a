"""Local data share: DS instructions over each workgroup's LDS block.

Source: AMD RDNA3 ISA guide, "Data Share Operations" and the DS opcode descriptions. A wave's LDS is
`w.lds[w.lds_base[wave] : + w.lds_size]`; address = VGPR[ADDR] + OFFSET (2ADDR forms: + OFFSET0/1 in
units of the element size, x64 for STRIDE64). Out-of-range accesses (address + size beyond the
workgroup's allocation) do what RDNA hardware does with LDS outside the allocation: reads return 0,
writes and atomics are dropped (atomics return 0). Multi-dword loads and stores are range checked
per dword. Atomics go lane by lane in lane order (memory.rmw). DS_CMPSTORE takes (DATA0 = new value,
DATA1 = compare value). DS_SWIZZLE (bitmask and quad-permute modes), DS_PERMUTE and DS_BPERMUTE move
data between lanes of a wave without touching LDS; a source lane that is inactive reads as 0; their lane
index is (address / 4) mod 32, so in wave64 each 32-lane half permutes within itself (v_permlane64 crosses).
GDS, GWS, ordered count, BVH stack and DS_CONDXCHG32 are not implemented.
Speed: dword loads and stores (plain and 2ADDR) whose lanes are all dword aligned and in range are one
take/put per dword over the batch's LDS viewed as dwords; anything else goes lane by lane.
"""
from __future__ import annotations

import numpy as np

from . import vmem as V        # lane helpers (vmem imports this module too; used at call time only)
from ...hw.isa.decode import OPS, Inst
from .memory import ATOMICS, AtomicOp, gather, rmw, scatter
from .ops import U32, Table, unsupported
from .wave import M0

TABLE = Table(name="lds")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

WIDTH = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "b16": 2, "b8": 1}


# ---------------------------------------------------------------- LDS access (also used by FLAT)

def _in_range(a: np.ndarray, nbytes: int, size: int) -> bool:
    return not len(a) or int(a.max()) + nbytes <= size


def lds_read(w, a: np.ndarray, phys: np.ndarray, nbytes: int) -> np.ndarray:
    """LDS bytes at address a (>= 0; phys = a + the lane's workgroup base in w.lds) of each lane:
    uint32 (n, max(1, nbytes/4)); out of range reads 0 (per dword)."""
    size = w.lds_size
    if _in_range(a, nbytes, size):
        return gather(w.lds, phys, nbytes)
    words = max(1, nbytes // 4)
    out = np.zeros((len(a), words), U32)
    for j in range(words):
        sz = min(4, nbytes)
        m = np.flatnonzero(a + 4 * j + sz <= size)
        if len(m):
            out[m, j] = gather(w.lds, phys[m] + 4 * j, sz)[:, 0]
    return out


def lds_write(w, a: np.ndarray, phys: np.ndarray, data: np.ndarray, nbytes: int) -> None:
    """Write each lane's low nbytes of data (uint32 (n, words)) to LDS; out of range (per dword) is dropped."""
    data = np.asarray(data, U32).reshape(len(a), -1)
    size = w.lds_size
    if _in_range(a, nbytes, size):
        scatter(w.lds, phys, data, nbytes)
        return
    for j in range(max(1, nbytes // 4)):
        sz = min(4, nbytes)
        m = np.flatnonzero(a + 4 * j + sz <= size)
        if len(m):
            scatter(w.lds, phys[m] + 4 * j, data[m, j], sz)


def lds_rmw(w, a: np.ndarray, phys: np.ndarray, op: AtomicOp, src: np.ndarray, cmp: np.ndarray | None) -> np.ndarray:
    """LDS atomic in lane order; out-of-range lanes change nothing and return 0."""
    size = w.lds_size
    if _in_range(a, src.dtype.itemsize, size):
        return rmw(w.lds, phys, op, src, cmp)
    old = np.zeros(len(a), src.dtype)
    m = np.flatnonzero(a + src.dtype.itemsize <= size)
    if len(m):
        old[m] = rmw(w.lds, phys[m], op, src[m], None if cmp is None else cmp[m])
    return old


def lds_addr(st: "V.Lanes", r: int, off: int) -> tuple[np.ndarray, np.ndarray]:
    """(LDS address, its offset in w.lds) of the active lanes: VGPR r + off, in the lane's workgroup block."""
    w, sel = st.w, st.sel
    a = w.v[r][sel].astype(np.int64)
    if off:
        a = (a + off) & 0xFFFFFFFF          # a 32-bit sum: LLVM folds `C - x` into (0 - x) with OFFSET C
    return st.pick(a), st.pick(a + w.lds_base[sel][:, None])


def _plus(a: np.ndarray, p: np.ndarray, off: int) -> tuple[np.ndarray, np.ndarray]:
    """(address, offset in w.lds) of lds_addr's lanes moved by a 2ADDR offset (a 32-bit sum, as lds_addr's)."""
    b = (a + off) & 0xFFFFFFFF
    return b, p + (b - a)


# ---------------------------------------------------------------- dword-aligned, in-range steps

def fast_index(w, sel, r: int, off: int, span: int) -> np.ndarray | None:
    """uint32 word index into w.lds (as dwords) of VGPR r + off for every lane of the waves `sel`, when every
    active lane is dword aligned and [address, address + span) lies inside the workgroup's block; else None (the
    per-lane path decides what each lane does). Inactive lanes get an index too (whatever their VGPR holds,
    clipped by the gather); their results are never written."""
    size = w.lds_size
    if size & 3 or off & 3:
        return None
    a = w.v[r][sel]
    if not a.size:
        return None
    if int(a.max()) + off + span > size or int(np.bitwise_or.reduce(a, axis=None)) & 3:
        act = a[w.em[sel]]                             # only the active lanes' addresses must qualify
        if not act.size or int(act.max()) + off + span > size or int(np.bitwise_or.reduce(act)) & 3:
            return None
    rows = w.lds_rows
    if rows and isinstance(sel, slice) and sel.start is None and sel.stop is None:
        src, base = a.reshape(w.n // rows, -1), w.lds_words          # whole workgroups: one base per row
    else:
        base = (w.lds_base[sel] >> 2).astype(U32)
        g = max(rows, 1)
        while g > 1 and (len(base) % g or (base.reshape(-1, g) != base[::g, None]).any()):
            g //= 2                                    # waves sharing a block, g to a row (fewer, longer rows)
        src, base = a.reshape(len(base) // g, -1), base[::g, None]
    idx = np.empty(src.shape, np.intp)                # intp: what take wants, no conversion pass
    np.right_shift(src, U32(2), out=idx)
    idx += base
    if off:
        idx += off >> 2
    return idx.reshape(a.shape)


def _dwords(w) -> np.ndarray:
    return w.lds[:w.lds.size & ~3].view(U32)


def _take(w, sel, r: int, idx: np.ndarray) -> None:
    """VGPR r of the waves sel = LDS dwords at idx (EXEC-masked)."""
    if isinstance(sel, slice) and w.all_on(sel):
        np.take(_dwords(w), idx, out=w.v[r][sel], mode="clip")
    else:
        w.write_v(r, sel, np.take(_dwords(w), idx, mode="clip"))


def _put(w, sel, idx: np.ndarray, data: np.ndarray) -> bool:
    """LDS dwords at idx = data for the active lanes, in lane order (later lanes win)."""
    if w.all_on(sel):
        _dwords(w)[idx.reshape(-1)] = data.reshape(-1)
    else:
        m = w.em[sel]
        _dwords(w)[idx.reshape(m.shape)[m]] = data[m]
    return True


# ---------------------------------------------------------------- helpers

def _step(w, sel) -> "V.Lanes":
    return V.Lanes(w, sel)


def _addr(st, inst: Inst) -> tuple[np.ndarray, np.ndarray]:
    return lds_addr(st, inst.addr.reg, inst.offset)


def _check(inst: Inst) -> None:
    if inst.gds:
        raise unsupported(inst, "GDS is not implemented")


def _load_kind(key: str) -> tuple[str, str]:
    """'ds_load_u8_d16_hi' -> ('hi', 'u8'); 'ds_load_b64' -> ('', 'b64')."""
    rest = key[len("ds_load_"):]
    if rest.endswith("_d16_hi"):
        return "hi", rest[:-7]
    if rest.endswith("_d16"):
        return "lo", rest[:-4]
    return "", rest


def _load(inst: Inst):
    _check(inst)
    d16, kind = _load_kind(inst.key)
    nbytes = WIDTH[kind]
    r = inst.dst[0].reg
    words = nbytes // 4 if nbytes >= 4 and not d16 else 0

    def step(w, sel):
        if words:
            idx = fast_index(w, sel, inst.addr.reg, inst.offset, nbytes)
            if idx is not None:
                for i in range(words):
                    if i:
                        idx += 1
                    _take(w, sel, r + i, idx)
                return
        st = _step(w, sel)
        if st.n == 0:
            return
        raw = lds_read(w, *_addr(st, inst), nbytes)
        V.write_regs(st, r, V.finish_load(d16, kind, raw, st.reg(r) if d16 else None))
    return step


def _store(inst: Inst):
    _check(inst)
    rest = inst.key[len("ds_store_"):]
    d16 = "hi" if rest.endswith("_d16_hi") else ""
    nbytes = WIDTH[rest[:-7] if d16 else rest]
    r = inst.data[0].reg
    fast = nbytes == 4 and not d16

    def step(w, sel):
        if fast:
            idx = fast_index(w, sel, inst.addr.reg, inst.offset, 4)
            if idx is not None and _put(w, sel, idx, w.v[r][sel]):
                return
        st = _step(w, sel)
        if st.n == 0:
            return
        lds_write(w, *_addr(st, inst), V.store_data(st, r, d16, nbytes), nbytes)
    return step


def _two(inst: Inst) -> tuple[int, int, int]:
    """(element bytes, offset0 bytes, offset1 bytes) of a 2ADDR instruction."""
    size = 8 if inst.key.endswith("_b64") else 4
    unit = size * (64 if "stride64" in inst.key else 1)
    return size, inst.offset0 * unit, inst.offset1 * unit


def _load2(inst: Inst):
    _check(inst)
    size, o0, o1 = _two(inst)
    r = inst.dst[0].reg
    nw = size // 4

    def step(w, sel):
        idx = fast_index(w, sel, inst.addr.reg, 0, max(o0, o1) + size)
        if idx is not None:
            at = 0
            for j, o in enumerate((o0, o1)):
                for i in range(nw):
                    idx += o // 4 + i - at                # step the index in place to the next dword
                    at = o // 4 + i
                    _take(w, sel, r + j * nw + i, idx)
            return
        st = _step(w, sel)
        if st.n == 0:
            return
        a, p = lds_addr(st, inst.addr.reg, 0)
        V.write_regs(st, r, np.concatenate([lds_read(w, *_plus(a, p, o0), size), lds_read(w, *_plus(a, p, o1), size)], 1))
    return step


def _store2(inst: Inst):
    _check(inst)
    size, o0, o1 = _two(inst)
    r0, r1 = inst.data[0].reg, inst.data[1].reg
    nw = size // 4

    def step(w, sel):
        if nw == 1:
            idx = fast_index(w, sel, inst.addr.reg, 0, max(o0, o1) + size)
            if idx is not None:
                idx += o0 // 4
                _put(w, sel, idx, w.v[r0][sel])
                idx += (o1 - o0) // 4
                _put(w, sel, idx, w.v[r1][sel])
                return
        st = _step(w, sel)
        if st.n == 0:
            return
        a, p = lds_addr(st, inst.addr.reg, 0)
        lds_write(w, *_plus(a, p, o0), V.read_regs(st, r0, nw), size)
        lds_write(w, *_plus(a, p, o1), V.read_regs(st, r1, nw), size)
    return step


def _atomic_kind(key: str) -> tuple[AtomicOp, int, int]:
    """-> (op, width bytes, data operands used)."""
    body = key[3:].replace("_rtn", "")
    name, typ = body.rsplit("_", 1)
    width = 8 if typ.endswith("64") else 4
    f = typ[0] == "f"
    table = {"storexchg": ("swap", 1), "cmpstore": ("cmpswap_f" if f else "cmpswap", 2), "mskor": ("mskor", 2),
             "wrap": ("wrap", 2), "min": ("min_f_ds" if f else "min_" + typ[0], 1),
             "max": ("max_f_ds" if f else "max_" + typ[0], 1), "add": ("add_f" if f else "add", 1)}
    op, nd = table.get(name, (name, 1))
    return ATOMICS[op], width, nd


def _atomic(inst: Inst):
    _check(inst)
    op, width, nd = _atomic_kind(inst.key)
    nw = width // 4
    dregs = [d.reg for d in inst.data[:nd]]
    dst = inst.dst[0].reg if inst.dst else None

    def val(st, r):
        d = V.read_regs(st, r, nw)
        return d[:, 0].copy() if nw == 1 else V.to64(d)

    def step(w, sel):
        st = _step(w, sel)
        if st.n == 0:
            return
        src = val(st, dregs[0])
        cmp = val(st, dregs[1]) if nd == 2 else None
        old = lds_rmw(w, *_addr(st, inst), op, src, cmp)
        if dst is not None:
            V.write_regs(st, dst, V.atomic_result(old))
    return step


def _xchg2(inst: Inst):
    _check(inst)
    size, o0, o1 = _two(inst)
    nw = size // 4
    r0, r1, dst = inst.data[0].reg, inst.data[1].reg, inst.dst[0].reg

    def step(w, sel):
        st = _step(w, sel)
        if st.n == 0:
            return
        a, p = lds_addr(st, inst.addr.reg, 0)
        out = []
        for r, o in ((r0, o0), (r1, o1)):
            d = V.read_regs(st, r, nw)
            src = d[:, 0].copy() if nw == 1 else V.to64(d)
            out.append(V.atomic_result(lds_rmw(w, a + o, p + o, ATOMICS["swap"], src, None)))
        V.write_regs(st, dst, np.concatenate(out, 1))
    return step


def _addtid(inst: Inst):
    _check(inst)
    load = "load" in inst.key

    def step(w, sel):
        st = _step(w, sel)
        if st.n == 0:
            return
        m0 = st.pick((w.s[M0][sel] & U32(0xFFFF)).astype(np.int64)[:, None])
        a = m0 + inst.offset + st.lanes.astype(np.int64) * 4
        p = a + w.lds_base[st.waves]
        if load:
            V.write_regs(st, inst.dst[0].reg, lds_read(w, a, p, 4))
        else:
            lds_write(w, a, p, st.reg(inst.data[0].reg)[:, None], 4)
    return step


def _append(inst: Inst):
    """DS_APPEND / DS_CONSUME: LDS[M0[15:0] + OFFSET] +/-= active lanes; every active lane gets the old value."""
    _check(inst)
    sign = 1 if inst.key == "ds_append" else -1
    r = inst.dst[0].reg

    def step(w, sel):
        st = _step(w, sel)
        if st.n == 0:
            return
        waves = np.arange(w.n)[sel]
        cnt = w.em[sel].sum(1).astype(U32)
        act = cnt > 0
        a = (w.s[M0][sel] & U32(0xFFFF)).astype(np.int64) + inst.offset
        delta = cnt if sign > 0 else (U32(0) - cnt)
        old = np.zeros(len(waves), U32)
        idx = np.flatnonzero(act)
        old[idx] = lds_rmw(w, a[idx], a[idx] + w.lds_base[waves[idx]], ATOMICS["add"], delta[idx].astype(U32), None)
        w.write_v(r, sel, old[:, None])
    return step


def _swizzle_src(offset: int, lanes: int) -> np.ndarray:
    i = np.arange(lanes)
    if offset >= 0xC000:
        return None
    if offset & 0x8000:                                  # quad permute
        return (i & ~3) | ((offset >> (2 * (i & 3))) & 3)
    and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return ((((i & 0x1F) & and_m) | or_m) ^ xor_m) | (i & 0x20)


def _crosslane(inst: Inst):
    _check(inst)
    kind = inst.key
    r = inst.dst[0].reg
    d0 = inst.addr.reg if kind == "ds_swizzle_b32" else inst.data[0].reg     # swizzle takes its data in ADDR

    def step(w, sel):
        data, em = w.v[d0][sel], w.em[sel]
        if kind == "ds_swizzle_b32":
            src = _swizzle_src(inst.offset, w.lanes)
            if src is None:
                raise unsupported(inst, f"swizzle offset {inst.offset:#x} (FFT/rotate modes) not implemented")
            out = np.where(em[:, src], data[:, src], U32(0))
        else:
            # the lane index is 5 bits: in wave64 each 32-lane half permutes within itself
            lane = ((((w.v[inst.addr.reg][sel].astype(np.int64) + inst.offset) >> 2) & 31)
                    | (np.arange(w.lanes) & ~31)[None, :])
            if kind == "ds_bpermute_b32":
                out = np.where(np.take_along_axis(em, lane, 1), np.take_along_axis(data, lane, 1), U32(0))
            else:                                        # ds_permute_b32: forward, later lanes win
                out = np.zeros_like(data)
                rows, cols = np.nonzero(em)
                out[rows, lane[rows, cols]] = data[rows, cols]
        w.write_v(r, sel, out)
    return step


@handler("ds_nop")
def _nop(inst: Inst):
    return lambda w, sel: None


def _register() -> None:
    for name, _ in OPS["DSOp"].values():
        key = name.lower()
        if key in ("ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32"):
            handler(key)(_crosslane)
        elif key in ("ds_append", "ds_consume"):
            handler(key)(_append)
        elif "addtid" in key:
            handler(key)(_addtid)
        elif key.startswith("ds_load_2addr"):
            handler(key)(_load2)
        elif key.startswith("ds_store_2addr"):
            handler(key)(_store2)
        elif key.startswith("ds_storexchg_2addr"):
            handler(key)(_xchg2)
        elif key.startswith("ds_load_"):
            handler(key)(_load)
        elif key.startswith("ds_store_"):
            handler(key)(_store)
        elif any(key.startswith(f"ds_{p}_") for p in ("add", "sub", "rsub", "inc", "dec", "min", "max", "and", "or",
                                                       "xor", "mskor", "storexchg", "cmpstore", "wrap")) \
                and "gs_reg" not in key:
            handler(key)(_atomic)


_register()
