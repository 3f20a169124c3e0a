"""Failures to provoke on a device, one of each kind the GPU reports, and a check that the device still
works: shared by tests/test_recovery.py and bench/recovery.py."""
from __future__ import annotations

import numpy as np

import amdq
from amdq.errors import GPUFault, GPUTimeout, IllegalInstruction, InvalidPacket, WaveKilled
from clang import compile_cl

SRC = r"""
__kernel void put(__global int *out, int v) { out[get_global_id(0)] = v; }
__kernel void add(__global int *out, int v) { out[get_global_id(0)] += v; }
__kernel void rd(__global const int *p, __global int *out) { out[get_global_id(0)] = p[get_global_id(0)]; }
__kernel void spin(__global volatile int *flag, __global int *out) {
  while (flag[0] == 0) {}
  out[get_global_id(0)] = 1;
}
__kernel void steps(__global int *out, int n) {
  int s = 0;
  for (int k = 0; k < n; k++) s = s * 3 + k;
  out[get_global_id(0)] = s;
}
"""
BAD = r"""__kernel void bad(__global int *out) { out[get_global_id(0)] = 5; }"""


class Bench:
    """A device with the test kernels, a patched-illegal kernel and buffers to check results with."""

    def __init__(self, dev: amdq.Device):
        self.dev = dev
        self.prg = dev.load(compile_cl(SRC, dev.arch).read_bytes())
        self.bad = dev.load(compile_cl(BAD, dev.arch).read_bytes())
        k = self.bad["bad"]
        off = k.addr - self.bad.base                         # its first instruction: a word of no encoding
        self.bad.alloc.cpu.mv[off:off + 4] = b"\xff\xff\xff\xff"
        self.out = dev.upload(np.zeros(64, np.int32))
        self.flag = dev.upload(np.zeros(1, np.int32))
        self.n = 0

    def check(self) -> None:
        """A correct launch and a correct copy."""
        self.n += 1
        self.prg["put"](self.out, self.n, grid=1, block=64, wait=True)
        assert (self.out.numpy(np.int32) == self.n).all()
        src = self.dev.upload(np.arange(64, dtype=np.int32) + self.n)
        dst = self.dev.alloc(256)
        self.dev.copy(dst, src, 256, wait=True)
        assert (dst.numpy(np.int32) == np.arange(64) + self.n).all()

    # each failure: (expected error class, regex its message must match, the action)
    def failures(self):
        dev, prg, out = self.dev, self.prg, self.out
        sdma_bad = lambda: dev.wait(dev.copyq.run([[0xFF]]), queue=dev.copyq)     # noqa: E731
        return {
            "null write": (GPUFault, r"in kernel put: write at 0x0 .*NULL pointer",
                           lambda: prg["put"](0, 1, grid=1, block=64, wait=True)),
            "null read": (GPUFault, r"in kernel rd: read at 0x10 .*NULL pointer plus 0x10",
                          lambda: prg["rd"](16, out, grid=1, block=64, wait=True)),
            "unmapped read": (GPUFault, r"in kernel rd: read at 0x7a0000000000 .*not mapped",
                              lambda: prg["rd"](0x7A00_0000_0000, out, grid=1, block=64, wait=True)),
            "unmapped write": (GPUFault, r"in kernel put: write at 0x7a0000001000",
                               lambda: prg["put"](0x7A00_0000_1000, 1, grid=1, block=64, wait=True)),
            "endless kernel": (GPUTimeout, r"kernel spin.*DISPATCH|KERNEL_DISPATCH.*spin",
                               lambda: prg["spin"](self.flag, out, grid=1, block=64, wait=True)),
            "illegal instruction": (IllegalInstruction, r"in kernel bad: no encoding matches at pc",
                                    lambda: self.bad["bad"](out, grid=1, block=64, wait=True)),
            "hang_cp": (GPUTimeout, r"compute queue", lambda: (dev.sim.inject("hang_cp"),
                                                               prg["put"](out, 1, grid=1, block=64, wait=True))),
            "hang_sdma": (GPUTimeout, r"sdma queue.*copy of 4 bytes",
                          lambda: (dev.sim.inject("hang_sdma"), dev.copy(self.out, self.flag, 4, wait=True))),
            "bad PM4 packet": (InvalidPacket, r"compute queue .*stopped at .*type-0 packet",
                               lambda: (dev.queue.submit(dev.queue.commands().dw + [0x12345678]),
                                        prg["put"](out, 1, grid=1, block=64, wait=True))),
            "bad SDMA packet": (InvalidPacket, r"sdma queue .*unknown op 255", sdma_bad),
            "kill_wave": (WaveKilled, r"waves killed",
                          lambda: (dev.sim.inject("kill_wave"), prg["put"](out, 1, grid=1, block=64, wait=True))),
        }


# -- a fixed-seed mix of hangs and faults (tests/test_am_recovery.py, scripts/am_recovery_soak.py) ---------------
MIX = ("endless kernel", "page fault", "hang_cp", "hang_sdma")
PAGE_FAULTS = ("null write", "unmapped read")


def mix(n: int, seed: int) -> list[str]:
    """`n` failure kinds of MIX, as evenly spread as `n` allows, in an order fixed by `seed`; a page fault is one
    of PAGE_FAULTS (also by `seed`)."""
    import random
    rng = random.Random(seed)
    kinds = [MIX[i % len(MIX)] for i in range(n)]
    rng.shuffle(kinds)
    return [rng.choice(PAGE_FAULTS) if k == "page fault" else k for k in kinds]


def run_mix(bench: Bench, kinds: list[str], after=None) -> list[dict]:
    """Provoke each failure of `kinds` on the bench's device and check a correct launch and copy after it; per
    failure: its kind, the error, `detect_s` (the failing call to its error), `recover_s` (the check after it).
    `after(kind, record)` is called once the check passed. AssertionError if a failure raised anything else."""
    import re
    import time
    table = bench.failures()
    out = []
    for i, kind in enumerate(kinds):
        cls, pattern, action = table[kind]
        t0 = time.perf_counter()
        try:
            action()
        except cls as e:
            if not re.search(pattern, str(e)):
                raise AssertionError(f"failure {i} ({kind}): {type(e).__name__} does not match {pattern!r}: {e}")
            err = e
        else:
            raise AssertionError(f"failure {i} ({kind}) raised nothing")
        t1 = time.perf_counter()
        bench.check()
        rec = {"kind": kind, "error": type(err).__name__, "detect_s": t1 - t0, "recover_s": time.perf_counter() - t1}
        out.append(rec)
        if after is not None:
            after(kind, rec)
    return out
