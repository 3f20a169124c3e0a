"""The shader core's instruction cache (amdq/sim/shader/core.py ICache) against what the hardware does: code
rewritten in memory is not seen until an instruction-cache invalidate (ACQUIRE_MEM GLI_INV / an AQL acquire
fence); after one, a page whose bytes are unchanged keeps its decoded steps, a page whose bytes changed runs the
new code, and a page that no longer translates faults at the PC that runs there."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from amdq.codeobj import load_code_object
from amdq.errors import GPUFault
from amdq.runtime.kernargs import pack
from amdq.sim.shader.core import DispatchRegs, ShaderCore
from amdq.sim.shader.memory import FlatMemory
from clang import compile_cl

SRC = "__kernel void f(__global int *a) { a[get_global_id(0)] = VALUE; }"
AQL_DISPATCH = "<HHHHHHIIIIIQQQQ"


def _code(value: int):
    return load_code_object(compile_cl(SRC.replace("VALUE", str(value))).read_bytes(), "gfx1100")


class Runner:
    """One flat memory and one shader core; the kernel's code at a fixed address, its output buffer reused."""

    def __init__(self, img):
        self.mem = FlatMemory(1 << 24)
        self.core = ShaderCore(self.mem)
        self.pages = -(-img.size // 4096) * 4096
        self.base = self.mem.alloc(self.pages, 4096)
        self.out = self.mem.alloc(4096, 256)
        self.load(img)

    def load(self, img) -> None:
        """Write the code object's image at the same address (as a loader that reuses the memory would)."""
        self.img = img
        self.mem.write(self.base, bytes(img.at(self.base)))

    def run(self) -> np.ndarray:
        k = self.img.kernels["f"]
        d = k.descriptor
        blob, _ = pack(k.meta, (self.out,), (1, 1, 1), (32, 1, 1), lambda b: b, d.group_segment_fixed_size,
                       self.img.target.lds_bytes)
        kernarg = self.mem.upload(blob, 64)
        pkt = self.mem.upload(struct.pack(AQL_DISPATCH, 2 | 1 << 8, 3, 32, 1, 1, 0, 32, 1, 1, 0, 0,
                                          self.base + k.kd_offset, kernarg, 0, 0), 64)
        user = []
        for name, _, count in d.user_sgprs:
            v = {"kernarg_segment_ptr": kernarg, "dispatch_ptr": pkt}.get(name, 0)
            user += [v & 0xFFFFFFFF, v >> 32][:count] + [0] * max(0, count - 2)
        self.mem.write(self.out, bytes(128))
        self.core.dispatch(DispatchRegs(pgm_addr=self.base + k.entry_offset, rsrc1=d.compute_pgm_rsrc1,
                                        rsrc2=d.compute_pgm_rsrc2, rsrc3=d.compute_pgm_rsrc3, grid=(1, 1, 1),
                                        block=(32, 1, 1), user_data=user, wave64=not d.wave32, gfx=11))
        return np.frombuffer(self.mem.read(self.out, 128), np.int32)


@pytest.fixture(scope="module")
def images():
    a, b = _code(7), _code(9)
    assert a.size == b.size and bytes(a.at(0)) != bytes(b.at(0))     # same layout, different constant
    return a, b


def test_rewritten_code_runs_only_after_an_invalidate(images):
    r = Runner(images[0])
    assert (r.run() == 7).all()
    r.load(images[1])
    assert (r.run() == 7).all()                 # the instruction cache still holds the old code
    r.core.invalidate_icache()
    assert (r.run() == 9).all()                 # refetched: the new bytes run
    r.core.invalidate_icache()
    assert (r.run() == 9).all()                 # unchanged since: kept


def test_unchanged_code_survives_invalidates(images):
    r = Runner(images[0])
    r.run()
    ic = r.core.icache
    steps = dict(ic.steps)
    for _ in range(3):
        r.core.invalidate_icache()
        assert (r.run() == 7).all()
    assert all(ic.steps[k][0] is steps[k][0] for k in steps)     # the same built steps: nothing was rebuilt


def test_code_page_gone_after_an_invalidate_faults_at_its_pc(images):
    r = Runner(images[0])
    r.run()
    k = r.img.kernels["f"]

    def unmapped(addr, nbytes, write, client="shader"):
        if int(np.min(addr)) < r.base + r.pages and int(np.max(addr)) + nbytes > r.base:
            raise GPUFault(f"GPU page fault at {int(np.min(addr)):#x}", address=int(np.min(addr)))
        return orig(addr, nbytes, write)
    orig = r.mem.translate
    r.mem.translate = unmapped
    assert (r.run() == 7).all()                 # not invalidated: the cached code still runs
    r.core.invalidate_icache()
    with pytest.raises(GPUFault) as e:
        r.run()
    assert e.value.info.get("pc") == r.base + k.entry_offset
