"""Interrupts on a booted SIMPCI device: the simulated GPU's engines (a real RELEASE_MEM on a compute queue, a
real SDMA TRAP, a page fault of a queue) and the simulated GMC's fault path become IH ring entries with the
fields hardware writes; the driver waits for them asleep, drains and decodes them (client, source, ring id,
VMID, payload), acknowledges the read pointer, survives wrap-around and overflow, and decodes VM faults from
the hub's registers, which it then clears."""
from __future__ import annotations

import struct
import threading
import time

import pytest

from amdq.am.ih import IH
from amdq.errors import GPUFault
from amdq.hw import am as A
from amdq.hw import ih as H
from amdq.hw import ih_ids as I
from amdq.hw import sdma
from amdq.iface.pci import PCI
from amdq.runtime.pm4_queue import Commands, SHRegs
from amdq.sim.cp import PM4Queue
from amdq.sim.pci.device import SimPCIDevice
from amdq.sim.sdma import SDMAQueue

ARCHS = ("gfx1100", "gfx1201", "gfx942")
PAGE = 4096
# the UTCL2 client a CPC (MEC) access names on the GFX hub; gfx1201: amdgpu's gfxhub_v12_0 table is empty
CPC = {"gfx1100": "CPC", "gfx1201": "unknown", "gfx942": "CPC"}
OSSSYS = {"gfx1100": "OSSSYS", "gfx1201": "OSSSYS", "gfx942": "OSS"}      # the IH's own writes on the MMHUB


class Booted:
    """A booted SIMPCI device, its interface, and memory for queues in VM context 0."""

    def __init__(self, arch: str, state: str):
        self.arch = arch
        self.dev = SimPCIDevice(arch, state=state, mode="sync")
        self.iface = PCI(self.dev, arch, standin=True)
        self.drv = self.iface.driver
        self.target = self.drv.target
        self.ih: IH = self.drv.blocks["ih"]
        self.gmc = self.drv.blocks["gmc"]
        self.sim_ih = self.dev.parts["ih"]
        self._doorbell = 0x40
        self.va = None

    def _memory(self) -> None:
        if self.va is None:                           # mapped when a queue needs it (a partial boot has no VM0 map)
            self.region = self.drv.am.boot.reserve("test_interrupts", 4 * PAGE)
            self.va = self.gmc.map(self.region.offset, self.region.size)
            self.ring, self.rptr, self.fence = self.va, self.va + PAGE, self.va + 2 * PAGE

    def __getattr__(self, name: str):
        if name in ("region", "ring", "rptr", "fence"):
            self._memory()
            return self.__dict__[name]
        raise AttributeError(name)

    def write_ring(self, dwords: list[int]) -> None:
        self.drv.vram.write(self.region.offset, struct.pack(f"<{len(dwords)}I", *dwords))

    def compute_queue(self, **where) -> PM4Queue:
        q = PM4Queue(self.dev.gpu, 0, self.ring, PAGE, self.rptr, self.rptr + 8)
        if where:
            self.sim_ih.bind_queue(q, **where)
        return q

    def run(self, engine, wptr: int) -> None:
        """Attach `engine` to a doorbell and ring it (sync mode: the engine runs now)."""
        self._doorbell += 2
        self.dev.gpu.attach(self._doorbell, engine)
        self.dev.doorbells.write64(self._doorbell * 4, wptr)

    def release_mem(self, addr: int, ctxid: int, **where) -> PM4Queue:
        cmds = Commands(self.target.gfx_version, SHRegs(self.target.ip["GC"]))
        cmds.release(addr, 0x1234_5678, interrupt=ctxid)
        self.write_ring(cmds.dw)
        q = self.compute_queue(**where)
        self.run(q, len(cmds.dw))
        return q

    def hub_status(self, hub: str, inst: int = 0) -> int:
        r = self.drv.regs.block(hub, inst)
        p = "regGCVM_" if hub == "GC" else "regMMVM_"
        name = p + "L2_PROTECTION_FAULT_STATUS"
        return (r[name] if name in r else r[name + "_LO32"]).read()

    def close(self) -> None:
        self.iface.close()
        self.dev.close()


@pytest.fixture
def booted(tmp_path, monkeypatch):
    monkeypatch.delenv("AMDQ_SIM_INJECT", raising=False)
    monkeypatch.delenv("AM_RESET", raising=False)
    made = []

    def boot(arch: str) -> Booted:
        b = Booted(arch, str(tmp_path / f"state-{arch}-{len(made)}"))
        made.append(b)
        return b
    yield boot
    for b in made:
        b.close()


def ring_entry(b: Booted, index: int) -> H.IVEntry:
    return H.IVEntry.decode(b.drv.vram.read(b.ih.ring.offset + index * H.ENTRY_BYTES, H.ENTRY_BYTES))


# -- end of pipe, SDMA trap: real packets through real (simulated) queues ----------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_release_mem_end_of_pipe(booted, arch):
    b = booted(arch)
    xcc = 5 if arch == "gfx942" else 0
    q = b.release_mem(b.fence, 0x5A, me=1, pipe=2, queue=3, xcc=xcc)
    assert q.exception is None
    assert b.drv.vram.read(b.region.offset + 2 * PAGE, 4) == struct.pack("<I", 0x1234_5678)
    raw = ring_entry(b, 0)                           # as the IH wrote it
    fam = I.family(b.target.gfx_version)
    assert (raw.client_id, raw.src_id) == fam.eop == (
        A.SOC15_IH_CLIENTID_GRBM_CP if arch == "gfx942" else A.SOC21_IH_CLIENTID_GRBM_CP, 0xB5)
    assert raw.ring_id == (3 << 4 | 1 << 2 | 2) and raw.src_data[0] == 0x5A and raw.vmid == 0
    assert raw.node_id == (I.XCD_NODES[5] if arch == "gfx942" else 0) and raw.timestamp > 0
    (rec,) = b.ih.drain()
    assert (rec.kind, rec.client, rec.source, rec.context_id, rec.vmid) == \
        ("eop", "GRBM_CP", "CP_EOP_INTERRUPT", 0x5A, 0)
    assert rec.where == ({"me": 1, "pipe": 2, "queue": 3, "xcc": 5} if arch == "gfx942" else
                         {"me": 1, "pipe": 2, "queue": 3})
    o = b.drv.regs.OSSSYS
    assert o.regIH_RB_RPTR.read() == o.regIH_RB_WPTR.read() == H.ENTRY_BYTES       # acknowledged
    assert b.ih.drain() == [] and not b.ih.pending()


@pytest.mark.parametrize("arch", ARCHS)
def test_sdma_trap(booted, arch):
    b = booted(arch)
    dw = sdma.encode("TRAP", b.target.ip["SDMA"][0], int_context=0x66)
    b.write_ring(dw)
    s = SDMAQueue(b.dev.gpu, 0, dict(ring_base_address=b.ring, ring_size=PAGE, read_pointer_address=b.rptr,
                                     write_pointer_address=b.rptr + 8))
    inst = 5 if arch == "gfx942" else 1              # gfx942: SDMA1 of AID 1
    b.sim_ih.bind_queue(s, instance=inst, queue=1)
    b.run(s, 4 * len(dw))
    assert s.exception is None
    raw = ring_entry(b, 0)
    (rec,) = b.ih.drain()
    assert (rec.kind, rec.source, rec.context_id) == ("sdma_trap", "SDMA_TRAP", 0x66)
    assert rec.where == {"instance": inst, "queue": 1}
    if arch == "gfx942":
        assert (rec.client, raw.client_id, raw.src_id, raw.ring_id, raw.node_id) == \
            ("SDMA1", A.SOC15_IH_CLIENTID_SDMA1, A.SDMA0_4_0__SRCID__SDMA_TRAP, 1, I.AID_NODES[1])
    else:
        assert (rec.client, raw.client_id, raw.src_id, raw.ring_id) == \
            ("GFX", A.SOC21_IH_CLIENTID_GFX, A.GFX_11_0_0__SRCID__SDMA_TRAP, 0x11)


@pytest.mark.parametrize("arch", ARCHS)
def test_engine_interrupt_path_and_pasid_lut(booted, arch):
    """gpu.interrupt as the CP raises it, for a queue nobody bound: HQD me 1 pipe 0 queue 0; the PASID from the
    IH's VMID lookup table the driver filled (IH_VMID_n_LUT)."""
    b = booted(arch)
    b.drv.regs.OSSSYS.regIH_VMID_9_LUT.write(PASID=0x8042)
    b.dev.gpu.interrupt("CP_EOP", 0x77, 9, queue="compute queue @ 0x1000")
    b.dev.gpu.interrupt("SOMETHING_ELSE", 1, 9)      # no hardware vector for it: kept aside, not written
    (rec,) = b.ih.drain()
    assert (rec.kind, rec.vmid, rec.pasid, rec.context_id, rec.where["me"], rec.where["queue"]) == \
        ("eop", 9, 0x8042, 0x77, 1, 0)
    assert b.dev.lost_interrupts == [("SOMETHING_ELSE", 1, 9)]


# -- waiting -------------------------------------------------------------------------------------------------
def _waiter(ih: IH, timeout_ms: float, out: dict) -> threading.Thread:
    def run():
        c0, t0 = time.thread_time(), time.monotonic()
        out["woke"] = ih.wait(timeout_ms)
        out["cpu"], out["at"] = time.thread_time() - c0, time.monotonic()
        out["wall"] = out["at"] - t0
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("arch", ARCHS)
def test_waiter_sleeps_until_the_gpu_posts(booted, arch):
    b = booted(arch)
    assert b.ih.sleep == b.dev.wait_interrupt         # the interface gave the IH the function's interrupt wait
    out: dict = {}
    t = _waiter(b.ih, 10_000, out)
    clock = time.pthread_getcpuclockid(t.ident)       # the waiter thread's own CPU clock
    time.sleep(0.05)
    c0 = time.clock_gettime(clock)                    # (its start-up and first checks are not the wait)
    time.sleep(0.4)
    asleep = time.clock_gettime(clock) - c0           # CPU it used while nothing was posted
    assert t.is_alive() and "woke" not in out         # nothing posted yet: still waiting
    posted = time.monotonic()
    b.release_mem(b.fence, 1)                         # a real end of pipe wakes it
    t.join(5)
    assert out["woke"] is True and out["at"] - posted < 0.5
    assert asleep < 0.05, f"the waiter burnt {asleep:.3f} s of CPU in 0.4 s with nothing posted"
    assert [r.kind for r in b.ih.drain()] == ["eop"]


def test_wait_times_out_asleep_and_polls_without_an_interrupt(booted):
    b = booted("gfx1100")
    c0, t0 = time.thread_time(), time.monotonic()
    assert b.ih.wait(300) is False
    assert 0.29 <= time.monotonic() - t0 < 1.0 and time.thread_time() - c0 < 0.05
    b.ih.sleep = None                                 # no interrupt (no VFIO): the write-back dword is polled
    out: dict = {}
    t = _waiter(b.ih, 10_000, out)
    time.sleep(0.3)
    b.dev.gpu.interrupt("CP_EOP", 2, 0, queue="q")
    t.join(5)
    assert out["woke"] is True and out["cpu"] < 0.15
    assert b.ih.wait(0) is True and [r.context_id for r in b.ih.drain()] == [2]


def test_pci_wait_events_wakes_on_the_simulated_interrupt(booted):
    b = booted("gfx1201")
    b.iface.wait_events(0)                            # what the boot signalled
    res: list = []
    t = threading.Thread(target=lambda: res.append(b.iface.wait_events(10_000)))
    t.start()
    time.sleep(0.1)
    woke = time.monotonic()
    b.dev.gpu.interrupt("CP_EOP", 3, 0, queue="q")
    t.join(5)
    assert res == [None] and time.monotonic() - woke < 2     # woken by the end of pipe: no queue stopped
    assert b.iface.info()["interrupts"] == "msi"


@pytest.mark.parametrize("arch", ARCHS)
def test_interrupts_after_a_partial_boot(booted, tmp_path, arch):
    """fini disables the ring; the partial boot of the next session programs it again (IH.resume_hw)."""
    state = str(tmp_path / f"partial-{arch}")
    first = Booted(arch, state)
    first.dev.gpu.interrupt("CP_EOP", 1, 0, queue="q")
    assert [r.context_id for r in first.ih.drain()] == [1]
    first.close()
    b = Booted(arch, state)
    try:
        assert b.iface.report.kind == "partial"
        assert b.ih.drain() == []                     # nothing of the last session is read again
        b.dev.gpu.interrupt("CP_EOP", 2, 0, queue="q")
        assert b.ih.wait(1000) and [r.context_id for r in b.ih.drain()] == [2]
    finally:
        b.close()


# -- read pointer, wrap-around, overflow -------------------------------------------------------------------
def small_ring(b: Booted, entries: int = 8) -> IH:
    """The device's IH block again, on a ring of `entries` entries (the same boot-region placement)."""
    ih = IH(b.drv.am, entries * H.ENTRY_BYTES)
    ih.init_sw()
    ih.init_hw()
    ih.sleep = b.dev.wait_interrupt
    return ih


@pytest.mark.parametrize("arch", ARCHS)
def test_rptr_acknowledge_and_wrap_around(booted, arch):
    b = booted(arch)
    ih = small_ring(b)
    o = b.drv.regs.OSSSYS
    seen, wrapped = [], False
    for i in range(30):
        b.dev.gpu.interrupt("CP_EOP", i, 0, queue="q")
        if i % 5 == 4:                                # 5 at a time into 8 slots: only the acknowledge makes room
            before = o.regIH_RB_RPTR.read()
            got = ih.drain()
            assert o.regIH_RB_RPTR.read() == ih.rptr == o.regIH_RB_WPTR.read_fields()["OFFSET"] << 2
            wrapped |= ih.rptr < before
            seen += [r.context_id for r in got]
    assert seen == list(range(30)) and wrapped and ih.overflows == 0 and b.sim_ih.dropped == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_overflow(booted, arch):
    b = booted(arch)
    ih = small_ring(b)
    for i in range(11):                               # 8 slots, nothing acknowledged: the oldest are overwritten
        b.dev.gpu.interrupt("CP_EOP", i, 0, queue="q")
    assert ih.wptr()[1] is True                       # RB_OVERFLOW in the write-back dword
    assert [r.context_id for r in ih.drain()] == [4, 5, 6, 7, 8, 9, 10]   # from the oldest one left
    assert ih.overflows == 1 and ih.wptr()[1] is False and not ih.pending()
    b.dev.gpu.interrupt("CP_EOP", 42, 0, queue="q")
    assert [r.context_id for r in ih.drain()] == [42]


# -- VM faults -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_vm_fault_mmhub_vmid0_decoded_and_cleared(booted, arch):
    b = booted(arch)
    va = b.gmc.vm0_end + 1 - 16 * PAGE + 0x123        # inside VM context 0, nothing mapped there
    b.dev.parts["gmc"].write("MM", va, b"\1\2\3\4", client=OSSSYS[arch])    # a real access through the MMHUB
    assert b.hub_status("MMHUB") != 0                 # latched by the hub
    raw = ring_entry(b, 0)
    assert raw.client_id == I.family(b.target.gfx_version).mmhub_fault[0] and raw.vmid_src == I.VMID_TYPE_MMHUB
    (rec,) = b.ih.drain()
    f = rec.fault
    assert (rec.kind, rec.client, rec.source, rec.where["hub"], rec.where["write"]) == \
        ("vm_fault", "VMC", "VM_FAULT", "MMHUB", True)
    assert (f.hub, f.va, f.status_va, f.write, f.vmid, f.client) == \
        ("MMHUB", va & ~(PAGE - 1), va & ~(PAGE - 1), True, 0, OSSSYS[arch])
    assert f.fields["MAPPING_ERROR"] == 1 and f.permissions == () and "no valid mapping" in f.text()
    assert b.hub_status("MMHUB") == 0                 # cleared (CLEAR_PROTECTION_FAULT_STATUS_ADDR)
    assert f.record().va == f.va and isinstance(f.error(), GPUFault)


@pytest.mark.parametrize("arch", ARCHS)
def test_vm_fault_gfxhub_read_and_more_faults(booted, arch):
    b = booted(arch)
    va1, va2 = b.gmc.vm0_end + 1 - 8 * PAGE, b.gmc.vm0_end + 1 - 4 * PAGE
    cpc = 5                                          # the CPC's CID on gfxhub_v3_0 and gfx9 (CPF, CPC, ...)
    b.dev.parts["gmc"].read("GC", va1, 4, client=cpc)
    b.dev.parts["gmc"].read("GC", va2, 4, client=cpc)  # a second fault before the driver looked
    first, second = b.ih.drain()
    assert (first.fault.hub, first.fault.va, first.fault.write, first.fault.client, first.fault.cid) == \
        ("GC", va1, False, CPC[arch], cpc)
    assert first.fault.fields["MORE_FAULTS"] == 1 and first.where["prot"] == ("VALID",)
    # the hub kept the first fault only; it was cleared by the first decode, so the second reads no status
    assert second.fault.va == va2 and second.fault.status == 0 and second.fault.client == "unknown"
    b.dev.parts["gmc"].read("GC", va2, 4, client=cpc)  # after the clear the hub latches again
    (third,) = b.ih.drain()
    assert third.fault.status_va == va2 and third.fault.client == CPC[arch]
    if arch == "gfx942":                              # the GFX hub of XCC 3: its node id names it, its status clears
        b.dev.parts["gmc"].read("GC", va1, 4, inst=3, client=cpc)
        assert b.hub_status("GC", 3) != 0 and b.hub_status("GC", 0) == 0
        (fourth,) = b.ih.drain()
        assert (fourth.node_id, fourth.fault.hub, fourth.fault.inst, fourth.fault.va) == (I.XCD_NODES[3], "GC", 3, va1)
        assert b.hub_status("GC", 3) == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_vm_fault_write_to_read_only_page(booted, arch):
    b = booted(arch)
    off = b.drv.am.boot.reserve("test_read_only", PAGE).offset
    va = b.gmc.map(off, PAGE, writable=False)
    b.dev.parts["gmc"].write("GC", va + 8, b"\0" * 4, client=cpc_of(arch))
    (rec,) = b.ih.drain()
    assert rec.where["prot"] == ("WRITE",) and rec.fault.write and rec.fault.va == va
    assert rec.fault.permissions == ("WRITE",) and "permission fault (WRITE)" in rec.fault.text()


def cpc_of(arch: str):
    return "CPC" if CPC[arch] == "CPC" else 5


@pytest.mark.parametrize("arch", ARCHS)
def test_queue_page_fault_becomes_a_gfxhub_fault(booted, arch):
    """A RELEASE_MEM to an unmapped address: the queue stops on the fault, the GFX hub records it (client CPC),
    the UTCL2/GFX vector arrives and decodes to the address."""
    b = booted(arch)
    bad = b.gmc.vm0_end + 1 - 2 * PAGE + 0x40
    q = b.release_mem(bad, 9)
    assert q.exception is not None and q.exception.record.va == bad
    (rec,) = b.ih.drain()
    fam = I.family(b.target.gfx_version)
    assert (rec.client_id, rec.src_id) == fam.gfxhub_fault and rec.kind == "vm_fault"
    assert (rec.fault.hub, rec.fault.va, rec.fault.write, rec.fault.client) == \
        ("GC", bad & ~(PAGE - 1), True, CPC[arch])
    assert b.hub_status("GC") == 0


def test_ih_ids_tables():
    """The generation tables name what the headers name."""
    assert I.family(11).client_name(0x14) == "GRBM_CP" and I.family(9).client_name(1) == "SDMA2"
    assert I.family(9).source_name(A.SOC15_IH_CLIENTID_SDMA0, 0xE0) == "SDMA_TRAP"
    assert I.family(12).source_name(A.SOC21_IH_CLIENTID_GFX, 0x31) == "SDMA_TRAP"
    assert I.fault_va(I.fault_payload(0xABCD_1234_5000, True)) == 0xABCD_1234_5000
    assert [I.xcc_of_node(n, 8) for n in I.XCD_NODES] == list(range(8))
