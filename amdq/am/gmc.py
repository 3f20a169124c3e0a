"""The GMC block: the memory hubs, the system aperture, and VM context 0 for the driver's own GPU addresses.

The hardware sequence, per hub the generation has (GFXHUB of every XCC, MMHUB), after Linux amdgpu
gmc_v9_0.c / gmc_v11_0.c / gmc_v12_0.c with gfxhub_v1_2.c / gfxhub_v3_0.c and mmhub_v1_8.c / mmhub_v3_0.c /
mmhub_v4_1_0.c:

1. the framebuffer location is read from the hardware (MMHUB MC_VM_FB_LOCATION_BASE/TOP, >> 24; the VRAM
   physical base from MC_VM_FB_OFFSET, plus, on a node of an XGMI hive, its node id times the node segment size:
   gmc_v9_0.c vram_gtt_location, am/peer.py), never assumed;
2. system aperture over the framebuffer (LOW/HIGH >> 18), AGP off (BOT above TOP), the default page for
   unmapped system-aperture accesses and for protection faults (a dummy page in the boot region);
3. L1 TLB (MX_L1_TLB_CNTL: enabled, system access mode 3, advanced driver model) and L2 (VM_L2_CNTL*);
4. VM context 0, the one VM of this driver (one VMID, one page directory per device): the multi-level page
   tables of am/vm.py (the generation's walk: 4 levels from PDB2 on gfx10-12, gfx9's translate-further
   form), covering the process-wide GPU address window of am/va.py (START/END in pages, the walk indexes
   va - START), BASE = the root PDE (its table in the boot region, so a partial boot finds it); faults
   redirected to the dummy page and reported; contexts 1-15 disabled;
5. every invalidate engine's address range to the whole space, then a TLB flush.

Buffers are mapped with `vm.map` / `vm.unmap` (the runtime's memory, iface/pci.py); every change ends with
an HDP flush (the CPU's page-table writes through the BAR reach VRAM) and a TLB flush of every hub. A
session's end unmaps everything (and flushes), so the next process's partial boot finds an empty root and
clean TLBs and programs nothing: VM context 0 stays as the full boot set it.

TLB flush (`flush_tlb`): on engine 17 (amdgpu keeps it for the kernel/GART), the MMHUB semaphore taken
first (its SEM reads 1), the request word (the VMID's bit, L2 PTEs/PDEs and L1 PTEs), a dummy read on the
GFXHUB, then a poll of the ACK register for the VMID's bit, the semaphore released. The HDP flush that
amdgpu does first belongs to the NBIO/HDP block and is not done here.
"""
from __future__ import annotations

from ..errors import DeviceError
from ..hw import vm
from . import va as VA
from .ip import AMContext, IPBlock
from .peer import XGMI, read_xgmi
from .tlsf import VRAMPools
from .vm import VM, MapFlags

INV_ENG = 17                       # the invalidate engine of the kernel's own flushes
NUM_ENGINES, NUM_VMID = 18, 16
PAGE = vm.PAGE_SIZE
DEFAULT_TIMEOUT_MS = 100.0         # amdgpu: usec_timeout polls of 1 us


class GMC(IPBlock):
    name = "gmc"

    def __init__(self, am: AMContext):
        super().__init__(am)
        self.gen = vm.generation(am.target.gfx_version)
        self.fb_start = self.fb_end = self.vram_base = 0
        self.vm0_start, self.vm0_end = VA.VA_BASE, VA.VA_BASE + VA.VA_SIZE - 1
        self.timeout_ms = DEFAULT_TIMEOUT_MS
        self.vm: VM | None = None
        self.xgmi: XGMI | None = None                  # the node's place in its XGMI hive (None: not in one)
        self._own_va: set[int] = set()                  # addresses map() took from the shared allocator

    # -- the hubs ------------------------------------------------------------------------------------
    def hubs(self) -> list[tuple[str, int, str, str]]:
        """(hub, instance, VM register prefix, MC register prefix) of every hub: GFXHUB per XCC, MMHUB."""
        n = max(self.am.regs.num_xcc, 1)
        return [("GC", i, "regGCVM_", "regGCMC_VM_") for i in range(n)] + [("MMHUB", 0, "regMMVM_", "regMMMC_VM_")]

    def _set(self, reg, **fields) -> None:
        """Write the fields of `fields` this generation's register has (the others 0)."""
        reg.write(**{k: v for k, v in fields.items() if k in reg.fields})

    # -- lifecycle -----------------------------------------------------------------------------------
    def init_sw(self) -> None:
        self.root = self.am.boot.reserve("gmc_vm0_root", PAGE)
        self.dummy = self.am.boot.reserve("gmc_dummy_page", PAGE)
        self.pools = VRAMPools.for_context(self.am)

    def _new_vm(self) -> None:
        """The page tables of VM context 0: an empty root at its boot-region place, tables from the pool."""
        self.vm = VM(self.am.target.gfx_version, self.am.vram, self.pools.pt, vram_base=self.vram_base,
                     vram_size=self.am.vram.size, flush=self._flush, start=self.vm0_start, span=VA.VA_SIZE,
                     root=self.root.offset)

    def init_hw(self) -> None:
        mm = self.am.regs.MMHUB
        self.fb_start = (mm.regMMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24
        self.fb_end = (mm.regMMMC_VM_FB_LOCATION_TOP.read() & 0xFFFFFF) << 24 | 0xFFFFFF
        self._vram_base()
        if self.fb_end <= self.fb_start:
            raise DeviceError(f"GMC: MMMC_VM_FB_LOCATION_BASE/TOP give an empty framebuffer "
                              f"({self.fb_start:#x}..{self.fb_end:#x}); the IFWI has not set up memory")
        if self.fb_start <= self.vm0_end and self.vm0_start <= self.fb_end:
            raise DeviceError(f"GMC: the framebuffer {self.fb_start:#x}..{self.fb_end:#x} overlaps the GPU address "
                              f"window {self.vm0_start:#x}..{self.vm0_end:#x}")
        self.am.vram.write(self.dummy.offset, bytes(PAGE))
        self._new_vm()
        for hub, inst, vmp, mcp in self.hubs():
            self._init_hub(self.am.regs.block(hub, inst), vmp, mcp)
        self.am.log(2, f"gmc: FB {self.fb_start:#x}..{self.fb_end:#x}, VM0 {self.vm0_start:#x}..{self.vm0_end:#x} "
                       f"(root table at VRAM {self.root.offset:#x})")
        self.flush_tlb(0)

    def resume_hw(self) -> None:
        """Partial boot: VM context 0 is as the full boot left it, its root empty (the last session unmapped
        everything); only the VRAM base is read back, for the page-table entries."""
        self.fb_start = self.am.fb_base
        self.fb_end = self.fb_start + self.am.vram.size - 1
        self._vram_base()
        self._new_vm()
        if self.xgmi is not None:                       # an XGMI node's id may differ from the last session's
            self._retarget()

    def _retarget(self) -> None:
        """Where the hubs hold physical VRAM addresses (the root PDE, the default pages), make them this
        session's: a node of a hive may have another id (and so another VRAM base) than when they were written."""
        base, dummy = self.vm.context().base, self.vram_base + self.dummy.offset
        changed = False
        for hub, inst, vmp, mcp in self.hubs():
            r = self.am.regs.block(hub, inst)
            if r[vmp + "CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32"].read() << 32 | \
                    r[vmp + "CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32"].read() == base:
                continue
            changed = True
            for reg, value in ((mcp + "SYSTEM_APERTURE_DEFAULT_ADDR_LSB", (dummy >> 12) & 0xFFFFFFFF),
                               (mcp + "SYSTEM_APERTURE_DEFAULT_ADDR_MSB", dummy >> 44),
                               (vmp + "L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32", (dummy >> 12) & 0xFFFFFFFF),
                               (vmp + "L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32", dummy >> 44),
                               (vmp + "CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32", base & 0xFFFFFFFF),
                               (vmp + "CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32", base >> 32)):
                r[reg].write(value)
        if changed:
            self.flush_tlb(0)

    def _vram_base(self) -> None:
        """The physical address of VRAM offset 0 in page-table entries: MC_VM_FB_OFFSET, plus the XGMI node's base."""
        self.xgmi = read_xgmi(self.am.regs)
        self.vram_base = ((self.am.regs.MMHUB.regMMMC_VM_FB_OFFSET.read() & 0xFFFFFF) << 24) + \
            (self.xgmi.base if self.xgmi is not None else 0)

    def _init_hub(self, r, vmp: str, mcp: str) -> None:
        # system aperture over the framebuffer, AGP disabled (BOT > TOP), default page
        r[mcp + "AGP_BASE"].write(0)
        r[mcp + "AGP_BOT"].write(0xFFFFFF)
        r[mcp + "AGP_TOP"].write(0)
        r[mcp + "SYSTEM_APERTURE_LOW_ADDR"].write(self.fb_start >> 18)
        r[mcp + "SYSTEM_APERTURE_HIGH_ADDR"].write(self.fb_end >> 18)
        dummy = self.vram_base + self.dummy.offset
        r[mcp + "SYSTEM_APERTURE_DEFAULT_ADDR_LSB"].write((dummy >> 12) & 0xFFFFFFFF)
        r[mcp + "SYSTEM_APERTURE_DEFAULT_ADDR_MSB"].write(dummy >> 44)
        r[vmp + "L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32"].write((dummy >> 12) & 0xFFFFFFFF)
        r[vmp + "L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32"].write(dummy >> 44)
        # L1 TLB and L2
        self._set(r[mcp + "MX_L1_TLB_CNTL"], ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3, ENABLE_ADVANCED_DRIVER_MODEL=1,
                  SYSTEM_APERTURE_UNMAPPED_ACCESS=0, MTYPE=0)
        self._set(r[vmp + "L2_CNTL"], ENABLE_L2_CACHE=1, ENABLE_L2_FRAGMENT_PROCESSING=1,
                  ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY=1, L2_PDE0_CACHE_TAG_GENERATION_MODE=0,
                  PDE_FAULT_CLASSIFICATION=0, CONTEXT1_IDENTITY_ACCESS_MODE=1, IDENTITY_MODE_FRAGMENT_SIZE=0)
        self._set(r[vmp + "L2_PROTECTION_FAULT_CNTL"], CLEAR_PROTECTION_FAULT_STATUS_ADDR=1)
        self._set(r[vmp + "L2_PROTECTION_FAULT_CNTL"], ALLOW_SUBSEQUENT_PROTECTION_FAULT_STATUS_ADDR_UPDATES=0,
                  RANGE_PROTECTION_FAULT_ENABLE_DEFAULT=1, PDE0_PROTECTION_FAULT_ENABLE_DEFAULT=1,
                  VALID_PROTECTION_FAULT_ENABLE_DEFAULT=1, READ_PROTECTION_FAULT_ENABLE_DEFAULT=1,
                  WRITE_PROTECTION_FAULT_ENABLE_DEFAULT=1, EXECUTE_PROTECTION_FAULT_ENABLE_DEFAULT=1)
        # VM context 0: the multi-level tables of am/vm.py, rooted in the boot region
        ctx = self.vm.context()
        r[vmp + "CONTEXT0_PAGE_TABLE_START_ADDR_LO32"].write((ctx.start >> 12) & 0xFFFFFFFF)
        r[vmp + "CONTEXT0_PAGE_TABLE_START_ADDR_HI32"].write(ctx.start >> 44)
        r[vmp + "CONTEXT0_PAGE_TABLE_END_ADDR_LO32"].write((ctx.end >> 12) & 0xFFFFFFFF)
        r[vmp + "CONTEXT0_PAGE_TABLE_END_ADDR_HI32"].write(ctx.end >> 44)
        r[vmp + "CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32"].write(ctx.base & 0xFFFFFFFF)     # the root PDE
        r[vmp + "CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32"].write(ctx.base >> 32)
        faults = {f"{k}_PROTECTION_FAULT_ENABLE_{m}": 1 for k in ("RANGE", "DUMMY_PAGE", "PDE0", "VALID", "READ",
                                                                    "WRITE", "EXECUTE") for m in ("INTERRUPT", "DEFAULT")}
        self._set(r[vmp + "CONTEXT0_CNTL"], ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=ctx.depth,
                  PAGE_TABLE_BLOCK_SIZE=ctx.block_size,
                  RETRY_PERMISSION_OR_INVALID_PAGE_FAULT=0, **faults)
        for v in range(1, NUM_VMID):
            r[f"{vmp}CONTEXT{v}_CNTL"].write(0)
        for e in range(NUM_ENGINES):
            r[f"{vmp}INVALIDATE_ENG{e}_ADDR_RANGE_LO32"].write(0xFFFFFFFF)
            r[f"{vmp}INVALIDATE_ENG{e}_ADDR_RANGE_HI32"].write(0x1F)

    def fini_hw(self) -> None:
        """Every mapping gone (and flushed): the next partial boot starts from an empty root and clean TLBs."""
        if self.vm is not None:
            self.vm.close()
            self.vm = None
        for va in self._own_va:
            VA.shared().free(va)
        self._own_va.clear()

    # -- VM context 0 --------------------------------------------------------------------------------
    def mc(self, vram_offset: int) -> int:
        """The memory-controller address of a VRAM offset (through the system aperture)."""
        return self.fb_start + vram_offset

    def map(self, vram_offset: int, size: int, writable: bool = True, va: int | None = None) -> int:
        """Map `size` bytes of VRAM at `vram_offset` into VM context 0 (at `va`, else at an address of the
        process-wide allocator); the GPU address. Visible to the GPU once this returns (HDP + TLB flushed)."""
        if vram_offset % PAGE or size <= 0:
            raise DeviceError(f"GMC map: VRAM offset {vram_offset:#x} / size {size:#x} is not page-aligned")
        size = (size + PAGE - 1) & -PAGE
        own = va is None
        if own:
            va = VA.shared().alloc(size)
        try:
            self.vm.map(va, self.vm.vram_pa(vram_offset), size, MapFlags(writeable=writable, executable=True))
        except BaseException:
            if own:
                VA.shared().free(va)
            raise
        if own:
            self._own_va.add(va)
        return va

    def unmap(self, va: int, size: int) -> None:
        self.vm.unmap(va, (size + PAGE - 1) & -PAGE)
        if va in self._own_va:
            self._own_va.discard(va)
            VA.shared().free(va)

    def _flush(self, va: int, size: int) -> None:
        """After a page-table change: the HDP (the BAR writes reach VRAM), then the TLBs of every hub."""
        soc = self.am.block("soc")
        if soc is not None:
            soc.hdp_flush()
        self.flush_tlb(0)

    # -- TLB flush -----------------------------------------------------------------------------------
    def flush_tlb(self, vmid: int = 0, eng: int = INV_ENG) -> None:
        for hub, inst, vmp, _ in self.hubs():
            self.flush_hub(hub, inst, vmid, eng)

    def flush_hub(self, hub: str, inst: int, vmid: int = 0, eng: int = INV_ENG) -> None:
        r = self.am.regs.block(hub, inst)
        vmp = "regGCVM_" if hub == "GC" else "regMMVM_"
        req, ack, sem = (r[f"{vmp}INVALIDATE_ENG{eng}_{x}"] for x in ("REQ", "ACK", "SEM"))
        where = f"{hub}{f'[{inst}]' if hub == 'GC' and self.am.regs.num_xcc > 1 else ''}"
        use_sem = hub == "MMHUB"
        if use_sem:
            self.am.wait(lambda: sem.read() & 1, self.timeout_ms, f"{where} {sem.name} (invalidate semaphore)")
        self._set(req, PER_VMID_INVALIDATE_REQ=1 << vmid, FLUSH_TYPE=0, INVALIDATE_L2_PTES=1, INVALIDATE_L2_PDE0=1,
                  INVALIDATE_L2_PDE1=1, INVALIDATE_L2_PDE2=1, INVALIDATE_L1_PTES=1, CLEAR_PROTECTION_FAULT_STATUS_ADDR=0)
        if hub == "GC":
            req.read()                     # the dummy read before the ACK poll (amdgpu: no false ACK)
        try:
            self.am.wait(lambda: ack.read() >> vmid & 1, self.timeout_ms,
                         f"{where} {ack.name} (VMID {vmid} TLB invalidate acknowledge)")
        finally:
            if use_sem:
                sem.write(0)
