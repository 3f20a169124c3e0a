"""Register state of a batch of waves, laid out so one numpy operation executes one instruction for
every wave that shares a program counter.

VGPRs are `v[reg, wave, lane]`, SGPRs `s[reg, wave]` (the whole 0..127 operand space: VCC at 106/107,
NULL 124, M0 125, EXEC 126/127), SCC and PC one entry per wave. The EXEC lane mask is kept unpacked
(`em`) beside its SGPR image, with a per-wave "all lanes on" flag for the common fast path.
"""
from __future__ import annotations

import numpy as np

RUN, BARRIER, DONE = 0, 1, 2
VCC, NULL, M0, EXEC = 106, 124, 125, 126

# Flat-address apertures (high 32 bits), as src_shared_base / src_private_base report them.
SHARED_APERTURE_HI = 0x0001_0000
PRIVATE_APERTURE_HI = 0x0002_0000


def bits_to_mask(lo: np.ndarray, hi: np.ndarray | None, lanes: int) -> np.ndarray:
    """(k,) uint32 words (and the high words for wave64) -> (k, lanes) bool."""
    words = lo.astype(np.uint32)[:, None] if hi is None else np.stack([lo, hi], 1).astype(np.uint32)
    return np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :lanes].astype(bool)


def mask_to_bits(m: np.ndarray) -> np.ndarray:
    """(k, lanes) bool -> (k, lanes // 32) uint32."""
    return np.packbits(m, axis=1, bitorder="little").view(np.uint32).reshape(m.shape[0], -1)


class WaveState:
    def __init__(self, n_waves: int, wave_size: int, n_vgprs: int):
        self.n, self.lanes = n_waves, wave_size
        self.v = np.zeros((max(n_vgprs, 1), n_waves, wave_size), np.uint32)
        self.s = np.zeros((128, n_waves), np.uint32)
        self.scc = np.zeros(n_waves, np.uint32)
        self.pc = np.zeros(n_waves, np.int64)
        self.status = np.full(n_waves, RUN, np.int8)
        self.em = np.zeros((n_waves, wave_size), bool)
        self.full = np.zeros(n_waves, bool)
        self.mode = np.zeros(n_waves, np.uint32)          # MODE register (round and denorm fields)
        self.wg = np.zeros(n_waves, np.int64)             # workgroup of each wave (index in the batch)
        self.lane_ids = np.arange(wave_size, dtype=np.uint32)
        self.barrier_pending = False
        # set by the dispatch: memory model, LDS bytes and per-wave base, scratch per wave
        self.mem = None
        self.lds = np.zeros(4, np.uint8)
        self.lds_base = np.zeros(n_waves, np.int64)
        self.lds_size = 0
        self.scratch_base = np.zeros(n_waves, np.uint64)
        self.scratch_wave_bytes = 0
        self.dispatch = None

    def exec_bits(self, sel) -> np.ndarray:
        lo = self.s[EXEC][sel]
        if self.lanes == 32:
            return lo
        return lo.astype(np.uint64) | self.s[EXEC + 1][sel].astype(np.uint64) << np.uint64(32)

    def refresh_exec(self, sel) -> None:
        """Recompute the unpacked EXEC mask of the selected waves from their SGPR image."""
        hi = self.s[EXEC + 1][sel] if self.lanes == 64 else None
        m = bits_to_mask(np.atleast_1d(self.s[EXEC][sel]), None if hi is None else np.atleast_1d(hi), self.lanes)
        self.em[sel] = m
        self.full[sel] = m.all(axis=1)

    def all_on(self, sel) -> bool:
        f = self.full[sel]
        return bool(f.all()) if f.ndim else bool(f)

    def write_v(self, reg: int, sel, val) -> None:
        """EXEC-masked write of one VGPR for the selected waves."""
        dst = self.v[reg]
        if self.all_on(sel):
            dst[sel] = val
        else:
            dst[sel] = np.where(self.em[sel], val, dst[sel])
