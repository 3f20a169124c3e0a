"""The PCI interface: an AMD GPU reached through its PCI function with amdq's own driver (AM, amdq/am/),
without the amdgpu kernel module.

Real hardware: the function is found in sysfs (`/sys/bus/pci/devices/*`: vendor 0x1002, class display
0x03xxxx or processing accelerator 0x12xxxx), refused while amdgpu is bound to it, enabled (sysfs
`enable`, then memory space and bus mastering in the config-space command register), and its BARs are
mapped through the sysfs resource files: BAR0 VRAM (large-BAR: all of it; small-BAR: the first part,
the rest through the MM window), BAR2 doorbells (64-bit), BAR5 registers. Config space through the
sysfs `config` file. A function bound to vfio-pci is reached through VFIO instead (amdq.iface.vfio):
config space, BARs and one interrupt (MSI, MSI-X or INTx on an eventfd) from the VFIO device;
`PCI.wait_events` sleeps on that eventfd. Without VFIO the driver polls (wait_events only sleeps).

The simulated function (SIMPCI, amdq.sim.pci.device) offers the same function protocol (config_read /
config_write, bar(n), bar_sizes, bar_bus_address(n), close), so the code from here down is the code that runs
on hardware. `bar_bus_address` is where a BAR sits on the bus (sysfs `resource` on hardware): `PCI.map_peer` maps
another AM device's buffer through its BAR0 there (or over XGMI, am/peer.py).

Opening boots the GPU (am/driver.py); then the interface protocol of iface/base.py: memory in VM context 0
(am/memory.py), queues bound to MEC 1 and SDMA engine 0 (am/gfx.py, am/sdma.py) with doorbells in BAR2,
waits that sleep on the IH ring (am/ih.py) and the exceptions of stopped queues.

Recovery: a queue that will not let go when destroyed is taken off by resetting its engine (the AM driver's
am/recovery.py: the CP's soft reset, after which the other compute queues are bound again where their rings stand
and rung with their write pointers; an SDMA engine's reset). A reset that does not bring the engine back is
DeviceLost; from then on the interface refuses queues, memory and waits with DeviceLost, and its close leaves the
session unclean so that the next open boots the GPU fully.
"""
from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..errors import AMTimeout, DeviceError, DeviceLost
from ..hw import faults as F
from ..hw import sdma_regs as SDMA
from ..hw.regmap import BufferBackend
from .base import Allocation, DMABuffer, Mapping, QueueInfo
from .os_seam import OSSeam

SYSFS_PCI = "/sys/bus/pci/devices"
VENDOR_AMD = 0x1002
GPU_CLASSES = (0x03, 0x12)                   # PCI base class: display controller, processing accelerator
CMD_MEMORY, CMD_MASTER = 1 << 1, 1 << 2          # config-space command register (offset 4)
GPU_CLOCK_HZ = 100_000_000                   # the reference clock of RLC_GPU_CLOCK_COUNT (amdgpu: 100 MHz)
STOP_KINDS = ("vm_fault", "bad_opcode", "sq")  # the interrupts that say a queue stopped (amdq.am.irq kinds)
NOT_YET = "this interface has no queues (a device booted without them); use KFD or SIMKFD to run kernels"


class Function(Protocol):
    """A PCI function as the interface uses it (real: SysfsFunction; simulated: amdq.sim.pci.device)."""
    name: str
    bar_sizes: dict[int, int]

    def config_read(self, off: int, size: int = 4) -> int: ...
    def config_write(self, off: int, size: int, value: int) -> None: ...
    def bar(self, n: int) -> Any: ...
    def dma_alloc(self, size: int) -> DMABuffer:
        """Host memory pinned for the GPU (its CPU view and bus address)."""
        ...
    def dma_free(self, buf: DMABuffer) -> None: ...
    def dma_map(self, addr: int, size: int) -> DMABuffer:
        """The process's own pages [addr, addr + size) mapped for the GPU's DMA (their bus address; no CPU view)."""
        ...
    def dma_unmap(self, buf: DMABuffer) -> None: ...
    def bar_bus_address(self, n: int) -> int:
        """Where BAR `n` sits on the bus (0: not assigned); a peer's DMA reaches its BAR0 there."""
        ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class PCIFunctionInfo:
    """One AMD function found in sysfs."""
    address: str             # 0000:03:00.0
    path: str
    vendor: int
    device: int
    cls: int
    driver: str | None       # the bound kernel driver, None if none


def _read_hex(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip(), 16)


def list_functions(root: str | None = None) -> list[PCIFunctionInfo]:
    """AMD display/compute functions in sysfs (root: a sysfs `bus/pci/devices` directory; tests give a fake)."""
    root = root or os.environ.get("AMDQ_SYSFS_PCI", SYSFS_PCI)
    out: list[PCIFunctionInfo] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for name in names:
        p = os.path.join(root, name)
        try:
            vendor, device, cls = (_read_hex(os.path.join(p, f)) for f in ("vendor", "device", "class"))
        except (OSError, ValueError):
            continue
        if vendor != VENDOR_AMD or cls >> 16 not in GPU_CLASSES:
            continue
        drv = os.path.join(p, "driver")
        driver = os.path.basename(os.path.realpath(drv)) if os.path.lexists(drv) else None
        out.append(PCIFunctionInfo(name, p, vendor, device, cls, driver))
    return out


def usable(fns: list[PCIFunctionInfo]) -> list[PCIFunctionInfo]:
    """The functions AM may take: no kernel driver, or vfio-pci."""
    return [f for f in fns if f.driver in (None, "vfio-pci")]


class SysfsFunction:
    """A real PCI function: through VFIO when bound to vfio-pci (`seam`: the OS under it), else through sysfs
    (config file, enable, resource files mapped)."""

    def __init__(self, info: PCIFunctionInfo, seam: OSSeam | None = None):
        if info.driver == "amdgpu":
            raise DeviceError(f"{info.address} is bound to the amdgpu kernel driver: unload it first "
                              f"(`sudo modprobe -r amdgpu`) to use it over PCI, or use KFD+AMD to go through amdgpu")
        if info.driver not in (None, "vfio-pci"):
            raise DeviceError(f"{info.address} is bound to the kernel driver {info.driver}; unbind it first")
        self.info = info
        self.name = f"PCI {info.address}"
        self.vfio = info.driver == "vfio-pci"
        self._cfg: int | None = None
        self._maps: dict[int, mmap.mmap] = {}
        self._fds: list[int] = []
        self._vdev = None
        if self.vfio:
            from .vfio import VFIODevice
            self._vdev = VFIODevice(seam or OSSeam(), info.path)
            self.bar_sizes = dict(self._vdev.bar_sizes)
        else:
            self.bar_sizes = self._resources()
        for n in (0, 2, 5):
            if not self.bar_sizes.get(n):
                self.close()
                raise DeviceError(f"{info.address}: BAR{n} is not assigned ("
                                  f"{'VFIO reports a size of 0' if self.vfio else 'sysfs resource lists no range'} "
                                  f"for it)")
        if self._vdev is not None:
            return
        try:
            self._cfg = os.open(os.path.join(info.path, "config"), os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            raise DeviceError(f"{info.address}: no write access to its sysfs config space (run as root or give "
                              f"this user the device)") from None

    def _resources(self) -> dict[int, int]:
        return {i: end - start + 1 if end > start else 0 for i, (start, end) in self._resource_ranges().items()}

    def _resource_ranges(self) -> dict[int, tuple[int, int]]:
        """(start, end) of each resource line of sysfs `resource` (Documentation/PCI/sysfs-pci.rst: start, end and
        flags, in hex, one line per BAR)."""
        out: dict[int, tuple[int, int]] = {}
        with open(os.path.join(self.info.path, "resource")) as f:
            for i, line in enumerate(f):
                parts = line.split()
                if len(parts) >= 2:
                    out[i] = (int(parts[0], 16), int(parts[1], 16))
        return out

    def bar_bus_address(self, n: int) -> int:
        """Where BAR `n` starts in the host's physical address space (sysfs `resource`: what the kernel assigned, and
        what amdgpu uses as a peer's address, pci_resource_start; 0: not assigned). On x86 without an IOMMU that
        is its bus address; behind an IOMMU a peer's DMA needs the range mapped for it too (not done here)."""
        start, end = self._resource_ranges().get(n, (0, 0))
        return start if end > start else 0

    @property
    def irq(self) -> str | None:
        """The interrupt VFIO signals ("msi", "msix", "intx"); None: none, the driver polls."""
        return self._vdev.irq if self._vdev is not None else None

    def wait_interrupt(self, timeout_ms: int) -> int:
        """Sleep until the function interrupts or the timeout; the interrupts counted (0: timed out)."""
        if self._vdev is None:
            time.sleep(timeout_ms / 1000)
            return 0
        return self._vdev.wait(timeout_ms)

    def enable(self) -> None:
        """Enable the function (sysfs `enable`; vfio-pci enabled it when the device was opened, and sysfs
        refuses a function with a driver), memory decoding and bus mastering."""
        if self._vdev is not None:
            self.config_write(4, 2, self.config_read(4, 2) | CMD_MEMORY | CMD_MASTER)
            return
        try:
            with open(os.path.join(self.info.path, "enable"), "w") as f:
                f.write("1")
        except OSError as e:
            raise DeviceError(f"{self.info.address}: enabling the function failed: {e}") from None
        self.config_write(4, 2, self.config_read(4, 2) | CMD_MEMORY | CMD_MASTER)

    def config_read(self, off: int, size: int = 4) -> int:
        if self._vdev is not None:
            return self._vdev.config_read(off, size)
        return int.from_bytes(os.pread(self._cfg, size, off), "little")

    def config_write(self, off: int, size: int, value: int) -> None:
        if self._vdev is not None:
            return self._vdev.config_write(off, size, value)
        os.pwrite(self._cfg, value.to_bytes(size, "little"), off)

    def _map(self, n: int) -> Any:
        if self._vdev is not None:
            return self._vdev.map(n).mv
        if n not in self._maps:
            path = os.path.join(self.info.path, f"resource{n}")
            fd = os.open(path, os.O_RDWR | os.O_SYNC | os.O_CLOEXEC)
            self._fds.append(fd)
            self._maps[n] = mmap.mmap(fd, self.bar_sizes[n], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        return self._maps[n]

    def bar(self, n: int) -> Any:
        """BAR0: VRAM as a buffer; BAR2: doorbells as a Mapping; BAR5: registers as a dword backend."""
        m = self._map(n)
        if n == 5:
            return BufferBackend(m)
        if n == 2:
            return Mapping(0, len(m), memoryview(m))
        return memoryview(m)

    def _unsupported(self, why: str) -> DeviceError:
        """A DeviceError the caller falls back from (`unsupported`): a path real hardware lacks in this build."""
        e = DeviceError(f"{self.info.address}: {why}")
        e.unsupported = True
        return e

    def dma_alloc(self, size: int) -> DMABuffer:
        raise self._unsupported("host memory for the GPU needs its bus addresses: this build maps none yet on real "
                                "hardware (VFIO_IOMMU_MAP_DMA); CPU-visible VRAM is used instead")

    def dma_free(self, buf: DMABuffer) -> None:
        raise DeviceError(f"{self.info.address}: no DMA buffers on real hardware in this build")

    def dma_map(self, addr: int, size: int) -> DMABuffer:
        raise self._unsupported("mapping user pages for the GPU needs VFIO_IOMMU_MAP_DMA, which this build does not "
                                "do on real hardware; host copies go through staging buffers")

    def dma_unmap(self, buf: DMABuffer) -> None:
        raise DeviceError(f"{self.info.address}: no user-page DMA mappings on real hardware in this build")

    def close(self) -> None:
        if self._vdev is not None:
            self._vdev.close()
            return
        for m in self._maps.values():
            try:
                m.close()
            except BufferError:
                pass                              # a view still exported: the mapping goes with the process
        for fd in self._fds:
            os.close(fd)
        if self._cfg is not None:
            os.close(self._cfg)
            self._cfg = None
        self._maps.clear()
        self._fds.clear()


class PCI:
    """The interface: one GPU function booted by the AM driver. `standin`: the firmware policy (False on
    hardware: real files only; None on the simulated device: stand-ins for missing files)."""
    name = "PCI"
    has_queues = True

    def __init__(self, fn: Function, arch: str | None = None, standin: bool | None = False):
        from ..am.driver import AMDriver
        self.fn = fn
        enable = getattr(fn, "enable", None)
        if enable is not None:
            enable()
        else:
            fn.config_write(4, 2, fn.config_read(4, 2) | CMD_MEMORY | CMD_MASTER)
        self.driver = AMDriver(fn.bar(5), fn.bar(0), fn.bar_sizes[5], standin=standin)
        self.arch = self.driver.target.arch
        if arch and arch != self.arch:
            raise DeviceError(f"asked for {arch}, the GPU at {fn.name} is {self.arch}")
        self.report = self.driver.boot()
        ih = self.driver.blocks.get("ih")
        if ih is not None and getattr(fn, "irq", None) and hasattr(fn, "wait_interrupt"):
            ih.sleep = fn.wait_interrupt                # IH.wait sleeps on the function's interrupt
        self.props = self._props()
        self.closed = False
        from ..am.memory import Memory
        self.memory = Memory(self.driver.blocks["gmc"], fn)
        self.queues: dict[int, QueueInfo] = {}
        self._next_queue = 1
        self.doorbells = fn.bar(2)

    def _props(self) -> dict:
        """KFD-topology-like properties from IP discovery's GC info (per XCC on multi-die parts)."""
        gc, n = self.driver.discovery.gc_info or {}, self.num_xcc
        se, wave = gc.get("gc_num_se", 0), gc.get("gc_wave_size", self.driver.target.wave_size)
        if "gc_num_cu_per_sh" in gc:                       # GFX9: SEs x SHs x CUs per SH, 4 SIMDs a CU
            sa, per_cu = gc.get("gc_num_sh_per_se", 1), 4
            cus = se * sa * gc["gc_num_cu_per_sh"] * n
        else:                                              # GFX10+: SEs x SAs x WGPs (2 CUs), 2 SIMDs a CU
            sa, per_cu = gc.get("gc_num_sa_per_se", 1), 2
            cus = se * sa * (gc.get("gc_num_wgp0_per_sa", 0) + gc.get("gc_num_wgp1_per_sa", 0)) * 2
        if not cus:
            return {"num_xcc": n, "local_mem_size": self.driver.vram.size}
        return {"simd_count": cus * per_cu, "simd_per_cu": per_cu, "array_count": se * sa * n,
                "simd_arrays_per_engine": sa, "wave_front_size": wave, "lds_size_in_kb": gc.get("gc_lds_size", 64),
                "max_waves_per_simd": gc.get("gc_max_waves_per_simd"), "local_mem_size": self.driver.vram.size,
                "num_xcc": n}

    @property
    def num_xcc(self) -> int:
        return max(1, self.driver.regs.num_xcc)

    def info(self) -> dict:
        """What `amdq info` prints for an AM device."""
        d, t = self.driver.discovery, self.driver.target
        gc = d.gc_info or {}
        r = self.report
        return {"ip_versions": {k: ".".join(map(str, v)) for k, v in d.versions.items()},
                "gc_info": gc, "vram_bytes": self.driver.vram.size,
                "bars": {f"BAR{n}": s for n, s in sorted(self.fn.bar_sizes.items()) if n in (0, 2, 5)},
                "small_bar": self.fn.bar_sizes[0] < self.driver.vram.size,
                "vendor": f"{self.fn.config_read(0, 2):#06x}", "device_id": f"{self.fn.config_read(2, 2):#06x}",
                "boot": r.kind, "boot_reason": f"{r.kind}: {r.reason}", "mode1_reset": r.mode1_reset,
                "mode1_reset_via": r.reset_via,
                "boot_seconds": round(r.seconds, 6), "firmware": self.driver.firmware_list(),
                **(self.driver.clock_report() if self.driver.booted else   # closed: the GPU is not asked
                   {"clocks": None, "clock_levels": None, "power_limit_w": None}),
                "target_board": t.board, "vfio": bool(getattr(self.fn, "vfio", False)),
                "interrupts": getattr(self.fn, "irq", None) or "polling"}

    # -- the interface protocol: part 2 -----------------------------------------------------------------
    # -- queues: bound to the MEC (am/gfx.py) and to SDMA engine 0 (am/sdma.py) ------------------------------
    signal_event = 0                  # RELEASE_MEM's INT_CTXID: any value wakes the IH; the runtime's timelines say what

    def create_queue(self, kind: str, ring_bytes: int, ptrs: Allocation | None = None, wptr_off: int = 0,
                     rptr_off: int = 8) -> QueueInfo:
        """A hardware queue of `kind` ("compute" PM4, "aql", "sdma"): ring and pointers in host memory (the
        pointers at those offsets of `ptrs` when given: an AQL queue's amd_queue_t), bound by the driver."""
        if kind not in ("compute", "aql", "sdma"):
            raise DeviceError(f"queue kind {kind!r}: compute, aql or sdma")
        self._check_lost()
        gfx, sdma = self.driver.blocks["gfx"], self.driver.blocks["sdma"]
        ring = self.alloc(ring_bytes, "gtt", uncached=True)
        own = ptrs is None
        made = [ring] + ([] if not own else [])
        try:
            if own:
                ptrs = self.alloc(4096, "gtt", uncached=True)
                made.append(ptrs)
            rptr_va, wptr_va = ptrs.va + rptr_off, ptrs.va + wptr_off
            extra: dict = {"ptrs": ptrs} if own else {}
            if kind == "sdma":
                bell = self._free_doorbell(SDMA.default_doorbell(self.driver.target.gfx_version, 0), kind)
                hw = sdma.create_queue(ring.va, ring.size, rptr_va, wptr_va, bell)
            else:
                aql = kind == "aql"
                eop = self.alloc(gfx.eop_bytes(aql), "vram", cpu=False)
                made.append(eop)
                mqd = self.alloc(gfx.mqd_bytes(aql), "vram")
                made.append(mqd)
                lo, hi = gfx.doorbell_range
                bell = self._free_doorbell(lo, kind, hi)
                hw = gfx.create_queue(ring.va, ring.size, rptr_va, wptr_va, bell, eop.va,
                                      (mqd.meta["vram_offset"], mqd.va), aql=aql)
                extra.update(eop=eop, mqd=mqd)
        except BaseException:
            for a in made:
                self.free(a)
            raise
        qid = self._next_queue
        self._next_queue += 1
        r8 = Allocation(rptr_va, 8, "uncached", None, Mapping(rptr_va, 8, ptrs.cpu.mv[rptr_off:rptr_off + 8]))
        w8 = Allocation(wptr_va, 8, "uncached", None, Mapping(wptr_va, 8, ptrs.cpu.mv[wptr_off:wptr_off + 8]))
        q = QueueInfo(kind, qid, self.doorbells, bell * 4, ring, r8, w8, {**extra, "hw": hw, "doorbell": bell})
        self.queues[qid] = q
        return q

    def _free_doorbell(self, first: int, kind: str, last: int | None = None) -> int:
        """The first doorbell index from `first` no queue of this interface uses (64-bit doorbells: even)."""
        used = {q.extra["doorbell"] for q in self.queues.values()}
        bell = first
        while bell in used:
            bell += 2
        if last is not None and bell > last or kind == "sdma" and bell != first:
            raise DeviceError(f"no free doorbell for another {kind} queue (this driver binds one SDMA queue and "
                              f"MEC 1's range {first:#x}..{last if last is not None else first:#x})")
        return bell

    def destroy_queue(self, q: QueueInfo) -> None:
        """Unbind the queue and give back its memory. A compute queue that does not drain is dequeued with a wave
        reset, and if that does not take either the CP is soft-reset (am/recovery.py) and the other compute
        queues are bound again where their rings stand; an SDMA queue that does not go idle gets its engine reset.
        DeviceLost when a reset does not bring the engine back (the interface refuses further work then)."""
        if self.queues.pop(q.queue_id, None) is None:
            raise DeviceError(f"queue {q.queue_id} is not a queue of this interface")
        hw = q.extra["hw"]
        try:
            if self.driver.lost is None:
                if q.kind == "sdma":
                    self._unbind_sdma(hw)
                else:
                    self._unbind_compute(hw)
        finally:
            for name in ("eop", "mqd", "ptrs"):
                a = q.extra.get(name)
                if a is not None:
                    self.free(a)
            self.free(q.ring)

    def _unbind_sdma(self, hw) -> None:
        try:
            self.driver.blocks["sdma"].destroy_queue(hw)
        except AMTimeout as e:                          # hung: the engine is reset
            self.driver.recovery.sdma(hw.engine, f"SDMA{hw.engine} queue {hw.queue} did not go idle: {e}")

    def _unbind_compute(self, hw) -> None:
        gfx = self.driver.blocks["gfx"]
        try:
            gfx.destroy_queue(hw)
        except AMTimeout:
            try:
                gfx.destroy_queue(hw, reset=True)       # it does not drain (hung): its waves are reset
            except AMTimeout as e:                      # the CP does not let go of it: the CP is reset
                mine = {id(c.extra["hw"]): c for c in self.queues.values() if c.kind != "sdma"}
                back = self.driver.recovery.compute(hw, str(e), lambda h: self._resume(mine[id(h)]))
                for h in back:
                    self._kick(mine[id(h)])

    @staticmethod
    def _resume(q: QueueInfo) -> int:
        """Where a compute queue's ring was consumed to, in dwords: the read pointer the MEC reported (PM4: dwords;
        AQL: read_dispatch_id, packets of 16 dwords)."""
        done = q.rptr.cpu.read64(0)
        return done * 16 if q.kind == "aql" else done

    @staticmethod
    def _kick(q: QueueInfo) -> None:
        """Ring a rebound compute queue's doorbell with the write pointer its writer published, if ahead of where
        it resumed (PM4: the write pointer in dwords; AQL: the index of the last packet written)."""
        done, written = q.rptr.cpu.read64(0), q.wptr.cpu.read64(0)
        if written > done:
            q.doorbell.write64(q.doorbell_off, written - 1 if q.kind == "aql" else written)

    def check_alive(self) -> None:
        """DeviceLost if the GPU is lost (the runtime asks before a synchronize that has nothing to wait for)."""
        self._check_lost()

    def _check_lost(self) -> None:
        if self.driver.lost is not None:
            raise DeviceLost(f"{self.fn.name}: the GPU is lost ({self.driver.lost}); close it and open it again: "
                             f"the next open boots it fully")

    def queue_progress(self, q: QueueInfo) -> int | None:
        """Work the queue has retired, where the function can tell (the simulated one can), else None."""
        f = getattr(self.fn, "queue_progress", None)
        return f(q.extra["doorbell"]) if f is not None else None

    # -- interrupts --------------------------------------------------------------------------------------
    def wait_events(self, timeout_ms: int) -> list | None:
        """Sleep until the IH ring has entries (an interrupt) or `timeout_ms` passes; the exceptions that
        stopped queues (None if none did): the full records where the function keeps them (the simulated one
        does), else what the IH and the hub's fault registers say (a VM fault's VA, direction and client)."""
        self._check_lost()
        ih = self.driver.blocks["ih"]
        if not ih.pending():
            ih.wait(timeout_ms)
        found: list = []
        faults = ih.drain(kinds=STOP_KINDS)
        hub = {f.va >> 12: f for f in (i.fault for i in faults if i.kind == "vm_fault") if f is not None}
        take = getattr(self.fn, "take_exceptions", None)
        records = take() if take is not None else []
        if records:
            by_bell = {q.extra["doorbell"]: q.queue_id for q in self.queues.values()}
            if any(isinstance(e.record, F.MemoryFault) and e.record.va >> 12 not in hub for _, e in records):
                more = ih.drain(kinds=STOP_KINDS)                   # its vector, just behind the record
                faults += more
                hub.update({f.va >> 12: f for f in (i.fault for i in more if i.kind == "vm_fault") if f is not None})
            found = [self._with_hub(replace(exc, queue_id=by_bell.get(bell)), hub) for bell, exc in records]
        if not found:
            found = [self._exception_of(i) for i in faults]
        return found or None

    @staticmethod
    def _with_hub(exc: F.QueueException, hub: dict) -> F.QueueException:
        """A memory fault as the hub's fault registers name it: its UTCL2 client (the engine's record keeps the
        instruction and PC the registers do not have)."""
        r = exc.record
        f = hub.get(r.va >> 12) if isinstance(r, F.MemoryFault) else None
        if f is None:
            return exc
        client = f"{f.client if f.client != 'unknown' else f'UTCL2 client {f.cid:#x}'} ({r.client})"
        return replace(exc, record=replace(r, client=client, write=f.write))

    def _exception_of(self, irq) -> F.QueueException:
        """What an interrupt alone says of a stopped queue (hardware without the simulator's records)."""
        kinds = {"sdma": [q for q in self.queues.values() if q.kind == "sdma"],
                 "cp": [q for q in self.queues.values() if q.kind != "sdma"]}
        if irq.kind == "vm_fault":
            f = irq.fault
            rec = f.record() if f is not None else F.MemoryFault(irq.where.get("va", 0), bool(irq.where.get("write")),
                                                                  irq.client)
            mine = kinds["sdma" if rec.client.upper().startswith("SDMA") else "cp"]
        elif irq.kind == "bad_opcode":
            rec, mine = F.BadPacket("the command processor", f"bad opcode ({irq.text()})"), kinds["cp"]
        else:
            rec, mine = F.WaveException(f"shader interrupt ({irq.text()})"), kinds["cp"]
        qid = mine[0].queue_id if len(mine) == 1 else None
        return F.QueueException("a queue of this device" if qid is None else mine[0].kind + " queue", rec, qid)

    # -- memory: am/memory.py ---------------------------------------------------------------------------
    def alloc(self, size: int, kind: str = "vram", uncached: bool = False, cpu: bool = True,
              executable: bool = False) -> Allocation:
        self._check_lost()
        return self.memory.alloc(size, kind, uncached, cpu, executable)

    def register_host(self, addr: int, size: int, writable: bool = True) -> Allocation:
        """The process's pages [addr, addr + size) (page aligned) mapped for the GPU (am/memory.py register_host)."""
        self._check_lost()
        return self.memory.register_host(addr, size, writable)

    def free(self, a: Allocation) -> None:
        self.memory.free(a)

    def available(self, kind: str = "vram") -> int | None:
        return self.memory.available(kind)

    def clock_counters(self) -> tuple[int, int, int]:
        """(GPU clock counter, CPU clock in ns, its frequency): the RLC's captured 100 MHz reference counter."""
        return self.driver.blocks["gfx"].gpu_clock(), time.perf_counter_ns(), GPU_CLOCK_HZ

    def close(self) -> None:
        """fini: the blocks left quiet and the session marked clean; then the function released."""
        if self.closed:
            return
        self.closed = True
        try:
            for q in list(self.queues.values()):
                try:
                    self.destroy_queue(q)
                except (DeviceError, AMTimeout):
                    pass
            self.memory.close()
            self.driver.fini()
        finally:
            self.fn.close()


    # -- peers: am/memory.py map_peer -------------------------------------------------------------------
    def map_peer(self, other: "PCI", a: Allocation, via: str | None = None, writable: bool = True) -> Allocation:
        """Map `a`, a live buffer of the AM device `other`, into this device's VM context 0 at `a.va`: VRAM through
        `other`'s BAR0 bus address (PCIe peer-to-peer) or over XGMI (nodes of one hive; `via` forces "pcie" or
        "xgmi"), host memory at its bus address. The mapping (kind "peer"), for `unmap_peer`."""
        if not isinstance(other, PCI):
            raise DeviceError(f"map_peer: the peer must be an AM (PCI) device, not {type(other).__name__}")
        return self.memory.map_peer(other.memory, a, via, writable)

    def unmap_peer(self, m: Allocation) -> None:
        """Take down a mapping of `map_peer` (the TLBs flushed: an access then faults on this device)."""
        self.memory.unmap_peer(m)


def open_real(arch: str | None = None, root: str | None = None) -> PCI:
    """The first usable AMD function in sysfs, booted."""
    fns = list_functions(root)
    if not fns:
        raise DeviceError("PCI requested but sysfs lists no AMD display or compute function")
    ok = usable(fns)
    if not ok:
        SysfsFunction(fns[0])                    # raises the reason (bound to amdgpu, ...)
    return PCI(SysfsFunction(ok[0]), arch, standin=False)
