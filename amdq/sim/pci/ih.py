"""The simulated IH (interrupt handler, OSSSYS): interrupt vectors written into the driver's ring, and the
simulated GPU's interrupts turned into the vectors hardware writes for them.

The ring is where IH_RB_BASE/BASE_HI say (a memory-controller address >> 8, through the MMHUB like every
OSSSYS access: `dev.mc_write`), of the size IH_RB_CNTL.RB_SIZE encodes (log2 of dwords). Each interrupt is
one 32-byte IV entry (amdq.hw.ih) at the write pointer; the pointer advances and, with
WPTR_WRITEBACK_ENABLE, the IH_RB_WPTR value is written to IH_RB_WPTR_ADDR_LO/HI. Nothing is written while
RB_ENABLE is 0. The PASID of an entry is the one the driver put in IH_VMID_<vmid>_LUT (the MMHUB's: _LUT_MM)
unless the poster names one. With IH_RB_CNTL.ENABLE_INTR the IH then signals the host (the MSI of a real
function): `wait(timeout_ms)` sleeps until it does and returns the signals since the last wait, as an eventfd.

A full ring (the next entry would reach the read pointer the driver wrote to IH_RB_RPTR): with
WPTR_OVERFLOW_ENABLE the IH writes on over the oldest entries and sets RB_OVERFLOW in IH_RB_WPTR (the
driver restarts after the write pointer, the oldest entry not overwritten: amdgpu ih_v6_0/vega20_ih
get_wptr); without it the vector is dropped and IH_RB_STATUS (where the block has it) says the ring is full.
IH_RB_CNTL.WPTR_OVERFLOW_CLEAR clears the flag. Timestamps are the GPU clock (100 MHz).

The simulated GPU's engines raise `gpu.interrupt(source, ctxid, vmid, **info)`; on a simulated PCI function
this part is one of `gpu.irq_handlers` and writes the vector the hardware block would (ids: amdq.hw.ih_ids):
* CP_EOP of a compute queue (RELEASE_MEM with INT_SEL, an AQL completion signal's event): client GRBM_CP,
  source CP_EOP_INTERRUPT, ring id me/pipe/queue of the HQD the queue is on, src_data[0] the context id;
  on gfx942 the node id of the queue's XCC;
* CP_EOP of an SDMA queue (TRAP): GFX11/12 client GFX, source SDMA_TRAP, ring id instance/queue; GFX9 client
  SDMA0..3, ring id the queue, the node of the engine's AID; src_data[0] the trap's context;
* VM_FAULT: recorded by the simulated GMC in the GFX hub's fault registers (the MMHUB's for a GFX9 SDMA
  engine), which posts the UTCL2/VMC vector when the VM context enables it;
* CP_BAD_OPCODE / SQ_INTERRUPT of a compute queue: GRBM_CP, CP_BAD_OPCODE_ERROR / SQ_INTERRUPT_ID.
Where a queue sits (HQD me/pipe/queue and XCC; SDMA instance and queue) is told by whoever creates the
engine: `bind_queue(engine, me=, pipe=, queue=, xcc=)` or `bind_queue(engine, instance=, queue=)` (found by
the interrupt's `engine`, else by the queue name the engines give); an
unbound compute queue is me 1 pipe 0 queue 0 of XCC 0, an unbound SDMA queue queue 0 of instance 0. What has
no hardware vector here goes to `dev.lost_interrupts` (when the device keeps that list).

Sources: Linux amdgpu ih_v6_0.c, ih_v6_1.c, ih_v7_0.c, vega20_ih.c (register use), the OSSSYS register
headers (fields, amdq.hw.regs), amdgpu_ih.c (entry layout, amdq.hw.ih), gmc_v11_0.c emit_pasid_mapping
(IH_VMID_n_LUT / _LUT_MM), the ids and ring-id layouts of amdq.hw.ih_ids.
"""
from __future__ import annotations

import struct
import threading
import weakref

from ...hw import ih as H
from ...hw import ih_ids as I
from .gmc import Access
from .part import SimPart, place

NS_PER_TICK = 10                   # the 100 MHz GPU clock
GFXHUB_CLIENT = {"CP": "CPC", "shader": "TCP"}   # an engine's client name -> the GFX hub's UTCL2 client


class SimIH(SimPart):
    name = "ih"

    def __init__(self, dev):
        super().__init__(dev)
        self.wptr = 0
        self.overflow = False
        self.dropped = 0
        self.posted = 0
        self.lock = threading.RLock()
        self.cond = threading.Condition(threading.Lock())
        self.signalled = 0
        self.family = I.family(dev.target.gfx_version)
        self.queues: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._at: tuple | None = None               # the ring registers' addresses and fields (`_places`)
        self._cfg: tuple | None = None              # what the block latched of them (`_latch`)
        self._luts: dict[tuple[int, int], int | None] = {}   # (vmid, vmid_src) -> IH_VMID_n_LUT(_MM) address
        self._by_name: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()   # queue name -> engine
        self._ring_ids: dict[tuple, int] = {}       # (Bits name, field values) -> ring id
        gpu = getattr(dev, "gpu", None)
        if gpu is not None:
            gpu.irq_handlers.append(self.on_gpu_interrupt)

    def _r(self, name: str):
        return self.dev.raw.OSSSYS["reg" + name]

    def _places(self) -> tuple:
        """Where the registers every vector reads are: addresses and (shift, mask) of their fields, looked up once
        (the values are read from the register file at each vector, so a write takes effect at the next one)."""
        if self._at is None:
            c, r, w = self._r("IH_RB_CNTL"), self._r("IH_RB_RPTR"), self._r("IH_RB_WPTR")
            f = lambda reg, name: place(reg, name)[1:]      # noqa: E731
            self._at = (c.addr, f(c, "RB_ENABLE"), f(c, "RB_SIZE"), f(c, "WPTR_OVERFLOW_ENABLE"), f(c, "ENABLE_INTR"),
                        f(c, "WPTR_WRITEBACK_ENABLE"), r.addr, f(r, "OFFSET"), w.addr, f(w, "OFFSET"),
                        f(w, "RB_OVERFLOW"), self._r("IH_RB_BASE").addr, self._r("IH_RB_BASE_HI").addr,
                        self._r("IH_RB_WPTR_ADDR_LO").addr, self._r("IH_RB_WPTR_ADDR_HI").addr)
        return self._at

    def reset(self) -> None:
        for n in ("IH_RB_CNTL", "IH_RB_BASE", "IH_RB_BASE_HI", "IH_RB_RPTR", "IH_RB_WPTR", "IH_RB_WPTR_ADDR_LO",
                  "IH_RB_WPTR_ADDR_HI"):
            self._r(n).write(0)
        self.wptr, self.overflow, self.dropped, self.posted = 0, False, 0, 0
        self._cfg = None

    # -- registers -----------------------------------------------------------------------------------
    def on_write_regIH_RB_WPTR(self, value: int) -> None:
        with self.lock:
            self.wptr = self._r("IH_RB_WPTR").decode(value)["OFFSET"] << 2
            self.overflow = bool(self._r("IH_RB_WPTR").decode(value)["RB_OVERFLOW"])

    def on_write_regIH_RB_CNTL(self, value: int) -> None:
        self._cfg = None
        if self._r("IH_RB_CNTL").decode(value)["WPTR_OVERFLOW_CLEAR"]:
            with self.lock:
                self.overflow = False
                self._publish()

    def _relatch(self, value: int) -> None:
        self._cfg = None

    # the block latches its ring's place and control: a write of one of them is seen at the next vector
    on_write_regIH_RB_BASE = on_write_regIH_RB_BASE_HI = _relatch
    on_write_regIH_RB_WPTR_ADDR_LO = on_write_regIH_RB_WPTR_ADDR_HI = _relatch

    def _latch(self) -> tuple:
        """(enabled, ring bytes, overflow enabled, interrupt enabled, write-back on, ring base, write-back
        address) from the registers, kept until one of them is written."""
        (cntl_a, en, rb_size, ovf_en, intr, wb, _, _, _, _, _, base_a, base_hi_a, wb_lo, wb_hi) = self._places()
        peek = self.dev.regfile.peek
        cntl = peek(cntl_a)
        bit = lambda f: bool((cntl >> f[0]) & f[1])         # noqa: E731
        self._cfg = (bit(en), H.ring_bytes((cntl >> rb_size[0]) & rb_size[1]), bit(ovf_en), bit(intr), bit(wb),
                     ((peek(base_hi_a) & 0xFF) << 32 | peek(base_a)) << H.RB_BASE_SHIFT,
                     (peek(wb_hi) & 0xFFFF) << 32 | peek(wb_lo) & ~3)
        return self._cfg

    def _size(self) -> int:
        return H.ring_bytes(self._r("IH_RB_CNTL").read_fields()["RB_SIZE"])

    def _publish(self) -> None:
        wptr_a, w_off, w_ovf = self._places()[8:11]
        enabled, _, _, _, wb_on, _, wb_addr = self._cfg or self._latch()
        off = self.wptr >> 2
        if off > w_off[1]:                           # does not fit OFFSET: the register's own error
            self._r("IH_RB_WPTR").write(OFFSET=off, RB_OVERFLOW=int(self.overflow))
        value = off << w_off[0] | int(self.overflow) << w_ovf[0]
        self.dev.regfile.poke(wptr_a, value)
        if wb_on and enabled:
            self.dev.mc_write(wb_addr, struct.pack("<I", value))

    # -- interrupts ----------------------------------------------------------------------------------
    def post(self, client_id: int, src_id: int, src_data: tuple[int, ...] = (), ring_id: int = 0, vmid: int = 0,
             pasid: int | None = None, node_id: int = 0, vmid_src: int = 0) -> bool:
        """Write one interrupt vector and signal the host; False when the IH dropped it (ring disabled or full)."""
        rptr_a, r_off = self._places()[6:8]
        with self.lock:
            enabled, size, ovf_on, signal, _, base, _ = self._cfg or self._latch()
            if not enabled:
                self.dropped += 1
                return False
            rptr = (((self.dev.regfile.peek(rptr_a) >> r_off[0]) & r_off[1]) << 2) % size
            self.wptr %= size
            full = (self.wptr + H.ENTRY_BYTES) % size == rptr
            if full and not ovf_on:
                self.dropped += 1
                self._status(full=True)
                return False
            if pasid is None:
                pasid = self._pasid(vmid, vmid_src)
            entry = H.pack(client_id, src_id, src_data, ring_id, vmid, vmid_src, self.dev.clock_ns() // NS_PER_TICK,
                           0, pasid, node_id)
            self.dev.mc_write(base + self.wptr, entry)
            self.wptr = (self.wptr + H.ENTRY_BYTES) % size
            if full:
                self.overflow = True
                self._status(full=True, overflow=True)
            self.posted += 1
            self._publish()
        if signal:
            with self.cond:
                self.signalled += 1
                self.cond.notify_all()
        return True

    def _pasid(self, vmid: int, vmid_src: int) -> int:
        key = (vmid, vmid_src)
        if key not in self._luts:                    # the LUT register's address, looked up once
            name = f"regIH_VMID_{vmid}_LUT{'_MM' if vmid_src == I.VMID_TYPE_MMHUB else ''}"
            o = self.dev.raw.OSSSYS
            self._luts[key] = o[name].addr if name in o else None
        addr = self._luts[key]
        return self.dev.regfile.peek(addr) & 0xFFFF if addr is not None else 0

    def wait(self, timeout_ms: float | None) -> int:
        """Sleep until the IH signals the host or `timeout_ms` passes (None: no limit); the signals since the last
        wait (0: timed out), as a VFIO interrupt eventfd counts them."""
        with self.cond:
            if not self.signalled:
                self.cond.wait(None if timeout_ms is None else max(0.0, timeout_ms) / 1000)
            n, self.signalled = self.signalled, 0
        return n

    def _status(self, full: bool = False, overflow: bool = False) -> None:
        if "regIH_RB_STATUS" in self.dev.raw.OSSSYS:
            self._r("IH_RB_STATUS").update(RB_FULL=int(full), RB_OVERFLOW=int(overflow))

    # -- the simulated GPU's interrupts ----------------------------------------------------------------
    def bind_queue(self, engine, **where: int) -> None:
        """Say where `engine` sits: a compute queue's me, pipe, queue (and xcc); an SDMA queue's instance, queue."""
        self.queues[engine] = dict(where)
        self._by_name.clear()

    def _named(self, name: str | None):
        """The bound engine called `name` (looked up once per name; an engine gone or rebound is looked up again)."""
        eng = self._by_name.get(name)
        if eng is None or eng not in self.queues:
            eng = next((e for e in list(self.queues) if getattr(e, "name", None) == name), None)
            if eng is not None:
                self._by_name[name] = eng
        return eng

    def _ring_id(self, bits, **fields: int) -> int:
        key = (bits.name, *fields.values())
        v = self._ring_ids.get(key)
        if v is None:
            v = self._ring_ids[key] = bits.encode(**fields)
        return v

    def on_gpu_interrupt(self, source: str, ctxid: int, vmid: int, info: dict) -> None:
        """One of gpu.irq_handlers: the vector hardware writes for an engine's interrupt (see the module doc)."""
        engine = info.get("engine")
        if engine is None:                          # the engines name themselves ("queue") in an end of pipe
            engine = self._named(info.get("queue"))
        sdma = getattr(engine, "kind", None) == "sdma" if engine is not None else \
            str(info.get("queue", "")).startswith("SDMA")
        where = self.queues.get(engine, {}) if engine is not None else {}
        fam = self.family
        if source == "CP_EOP" and sdma:
            inst, queue = where.get("instance", 0), where.get("queue", 0)
            client, src = fam.sdma_trap(inst)
            if fam.name == "soc21":
                self.post(client, src, (ctxid,), ring_id=self._ring_id(I.SDMA_RING, INSTANCE=inst, QUEUE=queue),
                          vmid=vmid)
            else:
                self.post(client, src, (ctxid,), ring_id=queue, vmid=vmid,
                          node_id=I.AID_NODES[inst // I.SDMA_PER_AID % len(I.AID_NODES)])
        elif source in ("CP_EOP", "CP_BAD_OPCODE", "SQ_INTERRUPT") and not sdma:
            client, src = {"CP_EOP": fam.eop, "CP_BAD_OPCODE": fam.bad_opcode, "SQ_INTERRUPT": fam.sq}[source]
            ring = self._ring_id(I.EOP_RING, ME=where.get("me", 1), PIPE=where.get("pipe", 0),
                                 QUEUE=where.get("queue", 0))
            node = I.XCD_NODES[where.get("xcc", 0)] if fam.name == "soc15" else 0
            self.post(client, src, (ctxid & 0xFFFFFFFF,), ring_id=ring, vmid=vmid, node_id=node)
        elif not (source == "VM_FAULT" and self._vm_fault(vmid, info, sdma, where)):
            lost = getattr(self.dev, "lost_interrupts", None)
            if lost is not None:
                lost.append((source, ctxid, vmid))

    def _vm_fault(self, vmid: int, info: dict, sdma: bool, where: dict) -> bool:
        """Record an engine's page fault in the hub's registers (the simulated GMC posts the vector)."""
        gmc = getattr(self.dev, "parts", {}).get("gmc")
        record = getattr(info.get("exception"), "record", None)
        va = info.get("address", getattr(record, "va", None))
        if gmc is None or va is None:
            return False
        write = bool(getattr(record, "write", False))
        inst = where.get("instance", 0)
        hub = "MM" if sdma and self.family.name == "soc15" else "GC"
        name = str(getattr(record, "client", "shader")).split()[0]
        exc = info.get("exception")
        if name == "shader" and getattr(record, "pc", None) is None and getattr(exc, "kernel_pc", None) is None:
            name = "CP"                             # the CP's own accesses (RELEASE_MEM ...) are recorded as "shader"
        client = f"SDMA{inst}" if sdma else GFXHUB_CLIENT.get(name, "TCP")
        try:
            cid = gmc.cid(hub, client, write)
        except ValueError:                          # a client the hub's table does not name
            cid = 0
        kind = "WRITE" if "read-only" in str(getattr(record, "reason", "")) else "VALID"
        gmc.record_fault(Access(hub, 0 if hub == "MM" else where.get("xcc", 0), vmid, write, cid), int(va), kind)
        return True

    def save(self) -> dict:
        return {"wptr": self.wptr, "overflow": self.overflow}

    def load(self, state: dict) -> None:
        self.wptr, self.overflow = state["wptr"], state["overflow"]
        self._cfg = None                            # the registers were restored behind the handlers
