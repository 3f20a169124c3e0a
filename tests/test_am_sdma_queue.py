"""SDMA queue 0 of engine 0 bound through its registers by the AM driver (amdq/am/sdma.py) on the simulated
PCI function (amdq/sim/pci/sdma.py, nbio.py): packets in a ring in VRAM mapped into VM context 0, the doorbell
rung through BAR2, memory checked; the read pointer written back where RB_RPTR_ADDR says; destroy and re-create;
the doorbell gates (the queue's offset and enable, the NBIO route); the ring size the registers give; a halted
or firmware-less engine; a hung engine's destroy timing out."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pytest

from amdq.errors import AMTimeout, DeviceError
from amdq.hw import am as A
from amdq.hw import sdma as hw_sdma
from amdq.hw import sdma_regs as S
from amdq.iface.pci import PCI
from amdq.sim.pci.device import SimPCIDevice
from sims import am_env

ARCHS = ("gfx1100", "gfx1201", "gfx942")
RING = 4096
DATA = 64 << 10
SRC, DST, FILL, FENCE = 0, 16 << 10, 32 << 10, 60 << 10       # offsets in the data buffer
RPTR_AT, WPTR_AT = 0x40, 0x80                                  # write-back slots in the pointer page


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    am_env(monkeypatch, tmp_path)


@dataclass
class Buf:
    offset: int                       # VRAM offset
    va: int                           # GPU address in VM context 0
    size: int


class Rig:
    """A booted simulated function, a ring, a pointer page and a data buffer in boot memory mapped into VM0."""

    def __init__(self, arch: str, state: str):
        self.dev = SimPCIDevice(arch, state=state, mode="sync")
        self.iface = PCI(self.dev, arch, standin=True)
        drv = self.iface.driver
        self.am, self.regs, self.gmc, self.sdma = drv.am, drv.regs, drv.blocks["gmc"], drv.blocks["sdma"]
        self.t = hw_sdma.table(self.sdma.major)
        self.ring, self.ptrs, self.data = (self._buf(f"test_sdma_{n}", size) for n, size in
                                           (("ring", RING), ("ptrs", 4096), ("data", DATA)))
        self.doorbell = S.default_doorbell(self.am.target.gfx_version, 0)
        self.wptr = 0
        self.q = None

    def _buf(self, name: str, size: int) -> Buf:
        r = self.am.boot.reserve(name, size)
        self.am.vram.write(r.offset, bytes(size))
        return Buf(r.offset, self.gmc.map(r.offset, size), size)

    def reg(self, suffix: str):
        return S.queue_reg(self.regs, self.sdma.major, 0, suffix)

    def bind(self, ring_bytes: int = RING):
        self.q = self.sdma.create_queue(self.ring.va, ring_bytes, self.ptrs.va + RPTR_AT, self.ptrs.va + WPTR_AT,
                                        self.doorbell)
        self.wptr = 0
        return self.q

    def put(self, *packets: list[int]) -> None:
        dws = [d for p in packets for d in p]
        pos = self.wptr % RING
        assert pos + 4 * len(dws) <= RING
        self.am.vram.write(self.ring.offset + pos, struct.pack(f"<{len(dws)}I", *dws))
        self.wptr += 4 * len(dws)

    def kick(self, index: int | None = None) -> None:
        """The write pointer in the poll slot, then in the 64-bit doorbell (as amdgpu's ring_set_wptr)."""
        self.am.vram.write(self.ptrs.offset + WPTR_AT, struct.pack("<Q", self.wptr))
        self.dev.bar(2).write64((self.doorbell if index is None else index) * 4, self.wptr)

    def fence(self, value: int) -> list[int]:
        return self.t.encode("FENCE", addr=self.data.va + FENCE, data=value)

    def read(self, off: int, n: int) -> bytes:
        return self.am.vram.read(self.data.offset + off, n)

    def fence_value(self) -> int:
        return struct.unpack("<I", self.read(FENCE, 4))[0]

    def rptr_written(self, at: int = RPTR_AT) -> int:
        return struct.unpack("<Q", self.am.vram.read(self.ptrs.offset + at, 8))[0]

    def close(self) -> None:
        self.iface.close()
        self.dev.close()


@pytest.fixture(params=ARCHS)
def rig(request, tmp_path):
    r = Rig(request.param, str(tmp_path / "state"))
    yield r
    r.close()


def test_bind_programs_queue_registers_and_nbio_route(rig):
    q = rig.bind()
    cntl = rig.reg("RB_CNTL").read_fields()
    assert (cntl["RB_ENABLE"], cntl["RB_SIZE"], cntl["RPTR_WRITEBACK_ENABLE"], cntl["RB_VMID"]) == (1, 10, 1, 0)
    if rig.sdma.major != 4:
        assert cntl["RB_PRIV"] == 1 and cntl[S.FW_WPTR_POLL[rig.sdma.major]] == 1
    assert rig.reg("RB_BASE").read() | rig.reg("RB_BASE_HI").read() << 32 == q.ring_va >> 8
    assert rig.reg("RB_RPTR_ADDR_HI").read() << 32 | rig.reg("RB_RPTR_ADDR_LO").read() == q.rptr_va
    assert rig.reg("RB_WPTR_POLL_ADDR_HI").read() << 32 | rig.reg("RB_WPTR_POLL_ADDR_LO").read() == q.wptr_va
    assert rig.reg("DOORBELL").read_fields()["ENABLE"] == 1
    assert rig.reg("DOORBELL_OFFSET").read_fields()["OFFSET"] == rig.doorbell
    assert rig.reg("IB_CNTL").read_fields()["IB_ENABLE"] == 1
    nb = rig.regs.NBIO
    rt = S.routing(nb.version)
    route = rt.route(0)
    assert nb[route.enable[0]].read_fields()[route.enable[1]] == 1
    assert nb[route.offset[0]].read_fields()[route.offset[1]] == rig.doorbell
    engines = 2 if rt.shared else 1
    for reg, fld in route.size:
        assert nb[reg].read_fields()[fld] == S.DOORBELL_RANGE_DWORDS * engines
    with pytest.raises(DeviceError, match="bound already"):
        rig.bind()


def test_copy_fill_fence_through_the_doorbell(rig):
    src = np.arange(4096, dtype=np.uint32)
    rig.am.vram.write(rig.data.offset + SRC, src.tobytes())
    rig.bind()
    t, va = rig.t, rig.data.va
    rig.put(t.encode("COPY_LINEAR", count=src.nbytes - 1, src_addr=va + SRC, dst_addr=va + DST),
            t.encode("CONSTANT_FILL", fillsize=2, dst_addr=va + FILL, src_data_31_0=0xA5A5A5A5, count=8192 - 4),
            rig.fence(0x1111))
    assert rig.fence_value() == 0                               # nothing happens before the doorbell
    rig.kick()
    assert rig.read(DST, src.nbytes) == src.tobytes()
    assert rig.read(FILL, 8192) == b"\xa5" * 8192 and rig.read(FILL + 8192, 4) == bytes(4)
    assert rig.fence_value() == 0x1111
    assert rig.rptr_written() == rig.wptr                       # where RB_RPTR_ADDR says, 64 bits
    assert rig.rptr_written(0) == 0                             # and nowhere else
    assert rig.reg("RB_RPTR").read() == rig.wptr and rig.reg("CONTEXT_STATUS").read_fields()["IDLE"] == 1
    first = rig.wptr
    rig.put(rig.fence(0x2222))                                  # a second submission goes on from there
    rig.kick()
    assert rig.fence_value() == 0x2222 and rig.rptr_written() == rig.wptr == first + 16


def test_destroy_and_recreate(rig):
    q = rig.bind()
    rig.put(rig.fence(1))
    rig.kick()
    assert rig.fence_value() == 1
    rig.sdma.destroy_queue(q)
    assert rig.reg("RB_CNTL").read_fields()["RB_ENABLE"] == 0 and rig.reg("IB_CNTL").read_fields()["IB_ENABLE"] == 0
    assert not rig.dev.sdma.queues
    rig.put(rig.fence(2))                                       # a destroyed queue consumes nothing
    rig.kick()
    assert rig.fence_value() == 1
    with pytest.raises(DeviceError, match="not bound"):
        rig.sdma.destroy_queue(q)
    rig.bind()                                                  # pointers start again at 0
    rig.put(rig.fence(3))
    rig.kick()
    assert rig.fence_value() == 3 and rig.rptr_written() == 16


def test_wrong_doorbell_index_is_not_rung(rig):
    rig.bind()
    rig.put(rig.fence(7))
    rig.kick(rig.doorbell + 2)                                  # the next 64-bit doorbell, inside the SDMA range
    rig.kick(rig.doorbell - 2)                                  # just below the range
    rig.kick(0x10)
    assert rig.fence_value() == 0 and rig.rptr_written() == 0
    rig.kick()
    assert rig.fence_value() == 7


def test_doorbell_needs_its_enable_and_the_nbio_route(rig):
    rig.bind()
    rig.put(rig.fence(5))
    rig.reg("DOORBELL").update(ENABLE=0)
    rig.kick()
    assert rig.fence_value() == 0 and rig.dev.sdma.dropped == 1
    rig.reg("DOORBELL").update(ENABLE=1)
    nb, route = rig.regs.NBIO, S.routing(rig.regs.NBIO.version).route(0)
    nb[route.offset[0]].update(**{route.offset[1]: rig.doorbell + 2 * S.DOORBELL_RANGE_DWORDS})  # range moved away
    rig.kick()
    assert rig.fence_value() == 0 and rig.dev.sdma.dropped == 2
    nb[route.offset[0]].update(**{route.offset[1]: rig.doorbell})
    nb[route.enable[0]].update(**{route.enable[1]: 0})                                           # entry off
    rig.kick()
    assert rig.fence_value() == 0 and rig.dev.sdma.dropped == 3
    rig.iface.driver.blocks["soc"].sdma_doorbell_range(0, rig.doorbell, S.DOORBELL_RANGE_DWORDS)
    rig.kick()
    assert rig.fence_value() == 5


@pytest.mark.parametrize("told", [RING, RING // 2])
def test_ring_size_is_what_rb_size_says(rig, told):
    """A ring of RING bytes, the driver told `told`: NOPs up to RING/2, then a FENCE. With the right size the
    engine reaches the fence; told half, it wraps at RING/2 and reads the NOPs at 0 again."""
    rig.bind(ring_bytes=told)
    assert rig.reg("RB_CNTL").read_fields()["RB_SIZE"] == (told // 4).bit_length() - 1
    rig.put([0] * (RING // 8))                                  # zero dwords are one-dword NOPs
    rig.put(rig.fence(9))
    rig.kick()
    assert rig.rptr_written() == rig.wptr
    assert rig.fence_value() == (9 if told == RING else 0)


def test_bad_arguments_are_refused(rig):
    va, p = rig.ring.va, rig.ptrs.va
    for kw, msg in ((dict(ring_bytes=3000), "power of two"), (dict(ring_bytes=128), "power of two"),
                    (dict(ring_va=va + 64), "256-byte"), (dict(rptr_va=p + 4), "8-byte"),
                    (dict(queue=1), "only queue 0"), (dict(engine=2), "engines 0..1")):
        args = {**dict(ring_va=va, ring_bytes=RING, rptr_va=p, wptr_va=p + 8, doorbell_index=rig.doorbell), **kw}
        with pytest.raises(DeviceError, match=msg):
            rig.sdma.create_queue(**args)
    assert rig.reg("RB_CNTL").read_fields()["RB_ENABLE"] == 0 and not rig.dev.sdma.queues


def test_halted_engine_does_not_run(rig):
    major = rig.sdma.major
    if major == 4:
        pytest.skip("SDMA 4.4.2's register map has no halt bit (the firmware case is tested below)")
    rig.bind()
    halt, fld = S.halt_reg(rig.regs, major, 0)
    halt.update(**{fld: 1})
    assert not rig.dev.sdma.queues                              # RB_ENABLE stays 1; the engine does not run
    rig.put(rig.fence(4))
    rig.kick()
    assert rig.fence_value() == 0
    halt.update(**{fld: 0})                                     # out of halt: on from its registers' pointers
    assert rig.dev.sdma.queues
    rig.kick()
    assert rig.fence_value() == 4 and rig.rptr_written() == rig.wptr


def test_engine_without_firmware_does_not_start(rig):
    rig.dev.sdma.loaded.clear()                                 # as if the PSP had not loaded the SDMA code
    if rig.sdma.major == 4:
        rig.bind()                                              # no halt bit to read back: the ring just never runs
        rig.put(rig.fence(6))
        rig.kick()
        assert rig.fence_value() == 0 and not rig.dev.sdma.queues
        rig.dev.firmware_loaded(A.GFX_FW_TYPE_SDMA0, b"")      # its firmware arrives: the enabled ring starts
        rig.kick()
        assert rig.fence_value() == 6
    else:
        with pytest.raises(DeviceError, match="HALT reads 1"):
            rig.bind()
        assert not rig.dev.sdma.queues


def test_destroy_of_a_hung_engine_times_out_naming_the_register(rig):
    q = rig.bind()
    rig.dev.inject("hang_sdma")
    rig.put(rig.fence(8))
    rig.kick()
    assert rig.fence_value() == 0
    rig.sdma.idle_timeout_ms = 20
    with pytest.raises(AMTimeout, match=r"QUEUE0_CONTEXT_STATUS\.IDLE|GFX_CONTEXT_STATUS\.IDLE"):
        rig.sdma.destroy_queue(q)
    rig.dev.gpu.clear("hang_sdma")
    rig.bind()                                                  # a new queue on the same engine works
    rig.put(rig.fence(10))
    rig.kick()
    assert rig.fence_value() == 10


def test_fini_stops_the_ring(rig):
    rig.bind()
    rig.iface.close()
    cntl = S.queue_reg(rig.dev.raw, rig.sdma.major, 0, "RB_CNTL")
    assert not rig.dev.sdma.queues and cntl.read_fields()["RB_ENABLE"] == 0


def test_engine1_rides_on_engine0s_doorbell_range(rig):
    if not S.routing(rig.regs.NBIO.version).shared:
        pytest.skip("NBIO 7.9 has an entry per engine, and this driver's PSP block loads SDMA0's firmware only")
    ring, ptrs = rig._buf("test_sdma_ring1", RING), rig._buf("test_sdma_ptrs1", 4096)
    db1 = S.default_doorbell(rig.am.target.gfx_version, 1)
    assert db1 == rig.doorbell + S.DOORBELL_RANGE_DWORDS
    with pytest.raises(DeviceError, match="outside the SDMA doorbell range"):
        rig.sdma.create_queue(ring.va, RING, ptrs.va, ptrs.va + 8, db1, engine=1)
    rig.bind()                                                  # engine 0's queue routes both engines' doorbells
    q1 = rig.sdma.create_queue(ring.va, RING, ptrs.va, ptrs.va + 8, db1, engine=1)
    pk = rig.t.encode("FENCE", addr=rig.data.va + FENCE + 4, data=0x77)
    rig.am.vram.write(ring.offset, struct.pack(f"<{len(pk)}I", *pk))
    rig.dev.bar(2).write64(db1 * 4, 4 * len(pk))
    assert struct.unpack("<I", rig.read(FENCE + 4, 4))[0] == 0x77 and rig.fence_value() == 0
    assert struct.unpack("<Q", rig.am.vram.read(ptrs.offset, 8))[0] == 4 * len(pk)
    rig.sdma.destroy_queue(q1)
    assert set(rig.dev.sdma.queues) == {0}
