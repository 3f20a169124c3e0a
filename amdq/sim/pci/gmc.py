"""The simulated GMC: the memory hubs (GFXHUB per XCC, MMHUB) as their registers make them.

Each hub has its framebuffer location (MC_VM_FB_LOCATION_BASE/TOP, >> 24, set at power-on as the IFWI
does), its system and AGP apertures, 16 VM contexts and 18 invalidate engines. A VM context is the
simulated MMU (sim/mmu.py) shaped by the VM_CONTEXTn registers the driver writes: PAGE_TABLE_BASE_ADDR
(a PDE: address | VALID), START/END (in 4 KiB pages), CNTL (ENABLE_CONTEXT, PAGE_TABLE_DEPTH, BLOCK_SIZE,
the fault enables). GFXHUB instance 0's contexts are the simulated GPU's own (`dev.gpu.vm(vmid)`), so the
engines translate through what the driver configured; the other hubs have their own over the same memory.

A memory-controller address on a hub (`read` / `write`, the IH's and the other MMHUB clients' path):
inside an enabled context's range it walks the page tables (VMID 0 for the driver's own addresses);
otherwise, for VMID 0, the system aperture passes framebuffer addresses to VRAM (address - FB base +
FB_OFFSET) and the AGP aperture to system memory; anything else is a fault. Translations are cached (the
L2/L1 TLBs): a changed PTE is not seen until an invalidate request on an engine of that hub
(VM_INVALIDATE_ENGn_REQ with the VMID's bit and INVALIDATE_L2_PTES or INVALIDATE_L1_PTES) drops them, up
to the engine's ADDR_RANGE; the engine then sets the VMID's bit in its ACK register (cleared by the next
request). Each engine's SEM reads 1 to the one who takes it and 0 until it is written 0.

A fault is recorded as the hub records it (VM_L2_PROTECTION_FAULT_STATUS: VMID, RW, CID (the UTCL2 client of
the access, amdq.hw.vmfault), MORE_FAULTS; FAULT_ADDR_LO32/HI32 in pages), posts an interrupt when the context's
CNTL enables it for that kind (client VMC for MMHUB, the GFX/UTCL2 client for GFXHUB, source 0, the VMID, VMID_TYPE
1 for the MMHUB, the node of the hub's XCC, src_data the page address with the access's READ/WRITE bits, the ring
id's protection bits: amdq.hw.ih_ids) and, when
CNTL's ..._ENABLE_DEFAULT for the kind is set, the access goes to the default page
(PROTECTION_FAULT_DEFAULT_ADDR); otherwise the access is a GPUFault naming the address. Translation needs
the L1 TLB (MC_VM_MX_L1_TLB_CNTL.ENABLE_L1_TLB) and the L2 (VM_L2_CNTL.ENABLE_L2_CACHE) on.

Sources: Linux amdgpu gmc_v9_0.c / gmc_v11_0.c / gmc_v12_0.c, gfxhub_v1_2.c / gfxhub_v3_0.c, mmhub_v1_8.c /
mmhub_v3_0.c / mmhub_v4_1_0.c (register use and meaning), the register headers (fields, amdq.hw.regs),
soc15_ih_clientid.h / soc21_ih_clientid.h (client ids, amdq.hw.am). The FB base is this simulator's choice.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import GPUFault
from ...hw import ih_ids as I
from ...hw import vmfault as VF
from ...sim.mmu import MMU
from .part import SimPart

NUM_VMID, NUM_ENGINES = 16, 18
FB_BASE = 0x80_0000_0000           # where the simulated IFWI puts the framebuffer in the MC address space
PAGE = 4096
HUBS = {"GC": ("GC", "GCVM_", "GCMC_VM_"), "MM": ("MMHUB", "MMVM_", "MMMC_VM_")}
CONTEXT_REGS = ("CNTL", "PAGE_TABLE_BASE_ADDR_LO32", "PAGE_TABLE_BASE_ADDR_HI32", "PAGE_TABLE_START_ADDR_LO32",
                "PAGE_TABLE_START_ADDR_HI32", "PAGE_TABLE_END_ADDR_LO32", "PAGE_TABLE_END_ADDR_HI32")
PDE_VALID, PDE_SYSTEM = 1, 2
ADDR_47_12 = ((1 << 48) - 1) & ~(PAGE - 1)


@dataclass
class Access:
    """One access through a hub: which hub instance, VMID, direction and UTCL2 client id (CID)."""
    hub: str
    inst: int
    vmid: int
    write: bool
    cid: int = 0


class SimGMC(SimPart):
    name = "gmc"

    def __init__(self, dev):
        super().__init__(dev)
        gpu = dev.gpu
        self.vram, self.sysmem, self.gfx = gpu.vram, gpu.sysmem, dev.target.gfx_version
        self.space = gpu.space                      # where physical addresses lead (the bus, the XGMI hive)
        insts = {"GC": max(dev.target.xcc, 1), "MM": 1}
        self.ctx: dict[tuple[str, int], list[MMU]] = {}
        for hub, n in insts.items():
            for inst in range(n):
                self.ctx[(hub, inst)] = [gpu.vm(v) if (hub, inst) == ("GC", 0) else
                                         MMU(self.vram, self.sysmem, self.gfx, vmid=v, space=gpu.space)
                                         for v in range(NUM_VMID)]
        self.sem: dict[tuple[str, int, int], bool] = {}
        fam = I.family(self.gfx)
        self.fault_iv = {"MM": fam.mmhub_fault, "GC": fam.gfxhub_fault}
        self.ip = {"GC": dev.target.ip["GC"], "MM": dev.target.ip["MMHUB"]}

    # -- registers of a hub --------------------------------------------------------------------------
    def _regs(self, hub: str, inst: int):
        return self.dev.raw.block(HUBS[hub][0], inst)

    def _r(self, hub: str, inst: int, name: str):
        _, vm, mc = HUBS[hub]
        return self._regs(hub, inst)["reg" + (mc + name[3:] if name.startswith("MC_") else vm + name)]

    def reset(self) -> None:
        size = self.vram.size
        for (hub, inst), ctxs in self.ctx.items():
            regs = self._regs(hub, inst)
            for name in regs:
                if name.startswith(("reg" + HUBS[hub][1], "reg" + HUBS[hub][2])):     # this block's registers only
                    regs[name].write(0)
            self._r(hub, inst, "MC_FB_LOCATION_BASE").write(FB_BASE >> 24)
            self._r(hub, inst, "MC_FB_LOCATION_TOP").write((FB_BASE + size - 1) >> 24)
            for m in ctxs:
                m.configure(root=None, depth=3, block_size=0, start=0, end=None)
                m.invalidate()
        self.sem.clear()

    def load(self, state: dict) -> None:
        """A new process: the hub registers are as the last one left them (the device keeps every register),
        so every context walks what they say again; the TLBs start empty."""
        for (hub, inst), ctxs in self.ctx.items():
            for vmid, m in enumerate(ctxs):
                self._context_changed(hub, inst, vmid)
                m.invalidate()

    # -- VM contexts ---------------------------------------------------------------------------------
    def _context_changed(self, hub: str, inst: int, vmid: int) -> None:
        r = lambda x: self._r(hub, inst, f"CONTEXT{vmid}_{x}").read()
        cntl = self._r(hub, inst, f"CONTEXT{vmid}_CNTL").read_fields()
        base = r("PAGE_TABLE_BASE_ADDR_HI32") << 32 | r("PAGE_TABLE_BASE_ADDR_LO32")
        start = (r("PAGE_TABLE_START_ADDR_HI32") << 32 | r("PAGE_TABLE_START_ADDR_LO32")) << 12
        end = (r("PAGE_TABLE_END_ADDR_HI32") << 32 | r("PAGE_TABLE_END_ADDR_LO32")) << 12 | 0xFFF
        # the root is a PDE: without VALID (or in system memory, which this model does not walk) nothing translates
        root = base & ADDR_47_12 if base & PDE_VALID and not base & PDE_SYSTEM else None
        self.ctx[(hub, inst)][vmid].configure(root=root, depth=cntl["PAGE_TABLE_DEPTH"],
                                              block_size=cntl["PAGE_TABLE_BLOCK_SIZE"], start=start, end=end)

    def _enabled(self, hub: str, inst: int, vmid: int) -> dict:
        return self._r(hub, inst, f"CONTEXT{vmid}_CNTL").read_fields()

    # -- invalidate engines --------------------------------------------------------------------------
    def _invalidate(self, hub: str, inst: int, eng: int, value: int, reg) -> None:
        req = reg.decode(value)
        ack = self._r(hub, inst, f"INVALIDATE_ENG{eng}_ACK")
        ack.write(0)
        if not (req.get("INVALIDATE_L2_PTES") or req.get("INVALIDATE_L1_PTES")):
            return                                  # a request that invalidates nothing is never acknowledged
        lo = self._r(hub, inst, f"INVALIDATE_ENG{eng}_ADDR_RANGE_LO32").read()
        hi = self._r(hub, inst, f"INVALIDATE_ENG{eng}_ADDR_RANGE_HI32").read() & 0x1F
        last = ((hi << 32 | lo) << 12) | 0xFFF
        vmids = req["PER_VMID_INVALIDATE_REQ"]
        for v in range(NUM_VMID):
            if vmids >> v & 1:
                self.ctx[(hub, inst)][v].invalidate(last)
        ack.write(PER_VMID_INVALIDATE_ACK=vmids)

    def _sem_read(self, hub: str, inst: int, eng: int) -> int:
        key = (hub, inst, eng)
        if self.sem.get(key):
            return 0
        self.sem[key] = True
        return 1

    def _sem_write(self, hub: str, inst: int, eng: int, value: int) -> None:
        if not value & 1:
            self.sem[(hub, inst, eng)] = False

    def _fault_cntl(self, hub: str, inst: int, value: int, reg) -> None:
        if reg.decode(value).get("CLEAR_PROTECTION_FAULT_STATUS_ADDR"):
            for n in self._status_regs(hub, inst) + ["L2_PROTECTION_FAULT_ADDR_LO32", "L2_PROTECTION_FAULT_ADDR_HI32"]:
                self._r(hub, inst, n).write(0)

    def _status_regs(self, hub: str, inst: int) -> list[str]:
        regs = self._regs(hub, inst)
        name = "L2_PROTECTION_FAULT_STATUS"
        return [name] if "reg" + HUBS[hub][1] + name in regs else [name + "_LO32"]

    # -- memory-controller accesses ------------------------------------------------------------------
    def cid(self, hub: str, client: str | int | None, write: bool) -> int:
        """The CID of a UTCL2 client given by name (amdq.hw.vmfault's tables) or number; None: 0."""
        if client is None or isinstance(client, int):
            return client or 0
        return VF.client_id("GC" if hub == "GC" else "MMHUB", self.ip[hub], client, write)

    def read(self, hub: str, addr: int, n: int, vmid: int = 0, inst: int = 0, client: str | int | None = None) -> bytes:
        """`n` bytes at memory-controller address `addr` through `hub`, by UTCL2 `client` (a name or CID)."""
        out = bytearray()
        for arena, pa, k in self._spans(Access(hub, inst, vmid, False, self.cid(hub, client, False)), addr, n):
            out += arena.read(pa, k)
        return bytes(out)

    def write(self, hub: str, addr: int, data: bytes, vmid: int = 0, inst: int = 0,
              client: str | int | None = None) -> None:
        """Write `data` at `addr` through `hub`, by UTCL2 `client` (a name or CID)."""
        pos = 0
        for arena, pa, k in self._spans(Access(hub, inst, vmid, True, self.cid(hub, client, True)), addr, len(data)):
            arena.write(pa, bytes(data[pos:pos + k]))
            pos += k

    def _spans(self, acc: Access, addr: int, n: int):
        end = addr + n
        while addr < end:
            arena, pa, left = self._translate(acc, addr)
            k = min(left, end - addr, PAGE - (addr & (PAGE - 1)))
            yield arena, pa, k
            addr += k

    def _translate(self, acc: Access, addr: int):
        hub, inst, vmid = acc.hub, acc.inst, acc.vmid
        cntl = self._enabled(hub, inst, vmid)
        m = self.ctx[(hub, inst)][vmid]
        if cntl["ENABLE_CONTEXT"] and m.start <= addr <= (m.end if m.end is not None else (1 << 48) - 1):
            if not self._r(hub, inst, "MC_MX_L1_TLB_CNTL").read_fields()["ENABLE_L1_TLB"] or \
                    not self._r(hub, inst, "L2_CNTL").read_fields()["ENABLE_L2_CACHE"]:
                return self._fault(acc, addr, cntl, "VALID", "the VM L1 TLB or L2 is disabled")
            run = m._run_for(addr)
            if run is None:
                return self._fault(acc, addr, cntl, "VALID", "no valid PTE")
            if acc.write and not run.writable:
                return self._fault(acc, addr, cntl, "WRITE", "page is read-only")
            return run.arena, run.pa + (addr - run.va), run.end - addr
        if vmid == 0:
            r = lambda x: self._r(hub, inst, x).read()
            low, high = r("MC_SYSTEM_APERTURE_LOW_ADDR") << 18, r("MC_SYSTEM_APERTURE_HIGH_ADDR") << 18 | 0x3FFFF
            fb_lo, fb_hi = r("MC_FB_LOCATION_BASE") << 24, r("MC_FB_LOCATION_TOP") << 24 | 0xFFFFFF
            if low <= addr <= high and fb_lo <= addr <= fb_hi:
                pa = addr - fb_lo + (r("MC_FB_OFFSET") << 24)
                if pa < self.vram.size:
                    return self.vram, pa, min(fb_hi + 1 - addr, self.vram.size - pa)
            agp_lo, agp_hi = r("MC_AGP_BOT") << 24, r("MC_AGP_TOP") << 24 | 0xFFFFFF
            if agp_lo <= agp_hi and low <= addr <= high and agp_lo <= addr <= agp_hi:
                pa = addr - agp_lo + (r("MC_AGP_BASE") << 24)       # a bus address
                hit = self.space.system(pa, 1)
                if hit is not None:
                    return hit[0], hit[1], min(agp_hi + 1 - addr, PAGE - (pa & (PAGE - 1)))
        return self._fault(acc, addr, cntl, "RANGE", "outside every aperture and VM context range")

    def _fault(self, acc: Access, addr: int, cntl: dict, kind: str, why: str):
        self.record_fault(acc, addr, kind, cntl)
        hub, inst = acc.hub, acc.inst
        if cntl.get(f"{kind}_PROTECTION_FAULT_ENABLE_DEFAULT"):
            page = (self._r(hub, inst, "L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32").read() << 32
                    | self._r(hub, inst, "L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32").read()) << 12
            hit = self.space.local(page, PAGE)             # a VRAM physical address (XGMI: of the hive)
            if hit is not None:
                return hit[0], hit[1] + (addr & (PAGE - 1)), PAGE - (addr & (PAGE - 1))
        raise GPUFault(f"GPU page fault: {'write' if acc.write else 'read'} at {addr:#x} on "
                       f"{HUBS[hub][0]}{f'[{inst}]' if hub == 'GC' and len(self._gc()) > 1 else ''} VMID {acc.vmid} "
                       f"({why})", address=addr, write=acc.write, client=HUBS[hub][0], vmid=acc.vmid)

    def record_fault(self, acc: Access, addr: int, kind: str = "VALID", cntl: dict | None = None) -> None:
        """Record a fault of `acc` at `addr` as the hub does (status and address registers) and post its interrupt
        when the VM context's CNTL enables interrupts for `kind` (VALID, WRITE, RANGE, ...). Also the path of the
        faults the engines meet in their own translation (sim/pci/ih.py)."""
        hub, inst = acc.hub, acc.inst
        if cntl is None:
            cntl = self._enabled(hub, inst, acc.vmid)
        st = self._r(hub, inst, self._status_regs(hub, inst)[0])
        old = st.read()
        fields = {"VMID": acc.vmid, "RW": int(acc.write), "CID": acc.cid, "MORE_FAULTS": int(old != 0)}
        if kind == "WRITE":
            fields["PERMISSION_FAULTS"] = 1 << VF.PERMISSION_BITS.index("WRITE")
        else:
            fields["MAPPING_ERROR"] = 1
        if old == 0 or self._r(hub, inst, "L2_PROTECTION_FAULT_CNTL").read_fields().get(
                "ALLOW_SUBSEQUENT_PROTECTION_FAULT_STATUS_ADDR_UPDATES"):
            st.write(**{k: v for k, v in fields.items() if k in st.fields})
            self._r(hub, inst, "L2_PROTECTION_FAULT_ADDR_LO32").write((addr >> 12) & 0xFFFFFFFF)
            self._r(hub, inst, "L2_PROTECTION_FAULT_ADDR_HI32").write((addr >> 44) & 0xF)
        else:
            st.update(MORE_FAULTS=1)
        if cntl.get(f"{kind}_PROTECTION_FAULT_ENABLE_INTERRUPT"):
            client, src = self.fault_iv[hub]
            prot = I.FAULT_RING.encode(PROT_WRITE=1) if kind == "WRITE" else I.FAULT_RING.encode(PROT_VALID=1)
            node = (I.XCD_NODES[inst] if hub == "GC" else I.AID_NODES[inst]) if self.gfx == 9 else 0
            self.dev.interrupt(client, src, I.fault_payload(addr, acc.write) + (0, 0), ring_id=prot, vmid=acc.vmid,
                               vmid_src=I.VMID_TYPE_MMHUB if hub == "MM" else 0, node_id=node)

    def _gc(self) -> list:
        return [k for k in self.ctx if k[0] == "GC"]


def _handlers() -> None:
    """One handler per VM-context, invalidate-engine and fault-control register of both hubs."""
    for hub, (_, vm, _) in HUBS.items():
        for v in range(NUM_VMID):
            for x in CONTEXT_REGS:
                def ctx(self, value, reg, hub=hub, v=v):
                    self._context_changed(hub, reg.inst, v)
                setattr(SimGMC, f"on_write_reg{vm}CONTEXT{v}_{x}", ctx)
        for e in range(NUM_ENGINES):
            def req(self, value, reg, hub=hub, e=e):
                self._invalidate(hub, reg.inst, e, value, reg)

            def sem_r(self, reg, hub=hub, e=e):
                return self._sem_read(hub, reg.inst, e)

            def sem_w(self, value, reg, hub=hub, e=e):
                self._sem_write(hub, reg.inst, e, value)
            setattr(SimGMC, f"on_write_reg{vm}INVALIDATE_ENG{e}_REQ", req)
            setattr(SimGMC, f"on_read_reg{vm}INVALIDATE_ENG{e}_SEM", sem_r)
            setattr(SimGMC, f"on_write_reg{vm}INVALIDATE_ENG{e}_SEM", sem_w)

        def fault_cntl(self, value, reg, hub=hub):
            self._fault_cntl(hub, reg.inst, value, reg)
        setattr(SimGMC, f"on_write_reg{vm}L2_PROTECTION_FAULT_CNTL", fault_cntl)


_handlers()
