"""The KFD interface: the amdgpu kernel driver's compute device /dev/kfd, as ROCm's thunk uses it.

Everything goes through a seam (open/ioctl/mmap/sysfs): `OSSeam` on a real machine, the simulated
GPU's kernel-driver model otherwise. Struct layouts and ioctl numbers are those of Linux's
`include/uapi/linux/kfd_ioctl.h` (amdq.hw.kfd).
"""
from __future__ import annotations

import ctypes
import errno
import struct
import threading
from dataclasses import dataclass

from ..errors import DeviceError, OutOfMemory
from ..hw import faults as F
from ..hw import kfd as K
from ..hw import xcc as XCC
from .base import Allocation, Mapping, QueueInfo
from .os_seam import MAP_ANONYMOUS, MAP_FIXED, MAP_NORESERVE, MAP_PRIVATE, MAP_SHARED, PROT_NONE, PROT_READ, PROT_WRITE

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
KFD_PATH = "/dev/kfd"
PAGE = 4096
_U32 = struct.Struct("<I")
_WAIT_EVENTS = K.IOCTLS["AMDKFD_IOC_WAIT_EVENTS"][0]
_WAIT_TIMEOUT = K.kfd_ioctl_wait_events_args.offsetof("timeout")
_MEMORY_DATA = struct.Struct("<III")     # kfd_hsa_memory_exception_data.failure: NotPresent, ReadOnly, NoExecute


def parse_properties(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def gfx_name(version: int) -> str:
    """KFD's gfx_target_version (e.g. 110000, 90402) -> LLVM processor name (gfx1100, gfx942)."""
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}" if major < 10 else f"gfx{major}{minor}{step:x}"


@dataclass
class Node:
    index: int
    gpu_id: int
    props: dict[str, int]

    @property
    def arch(self) -> str:
        return gfx_name(self.props.get("gfx_target_version", 0))


def list_gpus(seam) -> list[Node]:
    """GPU nodes of the KFD topology (CPU-only nodes have gpu_id 0)."""
    if not seam.exists(TOPOLOGY):
        return []
    nodes = []
    for name in sorted(seam.listdir(TOPOLOGY), key=lambda s: int(s) if s.isdigit() else 1 << 30):
        try:
            gid = int(seam.read_text(f"{TOPOLOGY}/{name}/gpu_id").strip() or 0)
        except (OSError, ValueError):
            continue
        if gid:
            nodes.append(Node(int(name), gid, parse_properties(seam.read_text(f"{TOPOLOGY}/{name}/properties"))))
    return nodes


class KFD:
    """One GPU reached through /dev/kfd."""

    name = "KFD"

    def __init__(self, seam, arch: str | None = None, index: int = 0):
        self.seam = seam
        gpus = [n for n in list_gpus(seam) if arch is None or n.arch == arch]
        if len(gpus) <= index:
            raise DeviceError(f"no KFD GPU{' ' + arch if arch else ''} at index {index} "
                              f"(found: {', '.join(n.arch for n in list_gpus(seam)) or 'none'})")
        self.node = gpus[index]
        self.gpu_id, self.props = self.node.gpu_id, self.node.props
        self.arch = self.node.arch
        self.fd = seam.open(KFD_PATH)
        ver = self.ioctl("AMDKFD_IOC_GET_VERSION")
        if ver["major_version"] != 1:
            raise DeviceError(f"KFD interface version {ver['major_version']}.{ver['minor_version']}; amdq speaks 1.x")
        self.version = (ver["major_version"], ver["minor_version"])
        self.drm_fd = seam.open(f"/dev/dri/renderD{self.props.get('drm_render_minor', 128)}")
        self.ioctl("AMDKFD_IOC_ACQUIRE_VM", drm_fd=self.drm_fd, gpu_id=self.gpu_id)
        self._gpu_ids = (ctypes.c_uint32 * 1)(self.gpu_id)
        self.event_page = self.alloc(0x8000, "gtt", uncached=True)
        ev = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_page_offset=self.event_page.handle, auto_reset=1)
        self.signal_event, self.signal_slot = ev["event_id"], ev["event_slot_index"]
        self.memory_event = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_type=K.KFD_IOC_EVENT_MEMORY,
                                       auto_reset=1)["event_id"]
        self.hw_event = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_type=K.KFD_IOC_EVENT_HW_EXCEPTION,
                                   auto_reset=1)["event_id"]
        self.doorbell_pages: dict[int, Mapping] = {}
        events = bytearray(48 * 3)                      # kfd_event_data[3] of a wait: the event ids, no data
        for i, eid in enumerate((self.signal_event, self.memory_event, self.hw_event)):
            _U32.pack_into(events, 48 * i + 40, eid)
        self._events = bytes(events)
        self._waits = threading.local()                # each thread's event buffer and WAIT_EVENTS argument

    @property
    def num_xcc(self) -> int:
        """Compute dies (XCCs) of this node's partition (topology num_xcc; 1 where the kernel does not say)."""
        return max(1, self.props.get("num_xcc", 1))

    def ip_versions(self) -> dict[str, tuple[int, int, int]]:
        """IP block versions from amdgpu's IP discovery in sysfs (empty if the kernel does not export it)."""
        base = f"/sys/class/drm/renderD{self.props.get('drm_render_minor', 128)}/device/ip_discovery/die/0"
        out = {}
        if not self.seam.exists(base):
            return out
        for ip in self.seam.listdir(base):
            try:
                out[ip] = tuple(int(self.seam.read_text(f"{base}/{ip}/0/{f}").strip()) for f in ("major", "minor", "revision"))
            except (OSError, ValueError):
                continue
        return out

    # -- plumbing ------------------------------------------------------------------------------
    def ioctl(self, name: str, **fields) -> dict:
        request, st = K.IOCTLS[name]
        buf = bytearray(st.pack(**fields))
        try:
            self.seam.ioctl(self.fd, request, buf)
        except OSError as e:
            if e.errno == errno.ENOMEM:
                raise OutOfMemory(f"{name}: the kernel driver is out of memory ({fields.get('size', '?')} bytes)") from e
            raise
        return st.unpack(buf)

    @property
    def mailbox_va(self) -> int:
        """Where RELEASE_MEM writes the event id before raising the EOP interrupt."""
        return self.event_page.va + 8 * self.signal_slot

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, size: int, kind: str = "vram", uncached: bool = False, cpu: bool = True,
              executable: bool = False) -> Allocation:
        size = (size + PAGE - 1) & -PAGE
        flags = K.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | K.KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE
        flags |= {"vram": K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM, "gtt": K.KFD_IOC_ALLOC_MEM_FLAGS_GTT,
                  "doorbell": K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL}[kind]
        if uncached:
            flags |= K.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED | K.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT
        if executable:
            flags |= K.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE
        if kind == "vram" and cpu:
            flags |= K.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC
        try:
            reserve = self.seam.mmap(None, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)
        except OSError as e:
            if e.errno == errno.ENOMEM:
                raise OutOfMemory(f"cannot reserve {size} bytes of virtual address space for {kind} memory: "
                                  f"{e.strerror}") from e
            raise
        handle, mapped = None, False
        try:                                           # any failure from here gives back what was taken
            r = self.ioctl("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=reserve.addr, size=size, gpu_id=self.gpu_id,
                           flags=flags)
            handle = r["handle"]
            mapping = None
            if cpu and kind != "doorbell":
                mapping = self.seam.mmap(reserve.addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                                         self.drm_fd, r["mmap_offset"])
            m = self.ioctl("AMDKFD_IOC_MAP_MEMORY_TO_GPU", handle=handle,
                           device_ids_array_ptr=ctypes.addressof(self._gpu_ids), n_devices=1)
            mapped = True                              # (perhaps partly: unmapping is harmless then)
            if m["n_success"] != 1:
                raise DeviceError(f"mapping {size} bytes at {reserve.addr:#x} to GPU {self.gpu_id} failed")
        except BaseException:
            self._undo_alloc(reserve, handle, mapped)
            raise
        return Allocation(reserve.addr, size, "uncached" if uncached else kind, handle, mapping,
                          {"reserve": reserve})

    def register_host(self, addr: int, size: int, writable: bool = True) -> Allocation:
        """The process's own pages [addr, addr + size) (page aligned) mapped for the GPU at a GPU address of their
        own: a USERPTR buffer (kfd_ioctl.h: mmap_offset carries the CPU address). The pages must stay mapped
        until `free` of the allocation; the GPU's writes land in them directly."""
        if addr % PAGE or size % PAGE or size <= 0:
            raise DeviceError(f"register_host of {size:#x} bytes at {addr:#x}: page-aligned ranges only")
        flags = K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | K.KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE
        if writable:
            flags |= K.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
        reserve = self.seam.mmap(None, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)
        handle, mapped = None, False
        try:
            handle = self.ioctl("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=reserve.addr, size=size, gpu_id=self.gpu_id,
                                flags=flags, mmap_offset=addr)["handle"]
            m = self.ioctl("AMDKFD_IOC_MAP_MEMORY_TO_GPU", handle=handle,
                           device_ids_array_ptr=ctypes.addressof(self._gpu_ids), n_devices=1)
            mapped = True
            if m["n_success"] != 1:
                raise DeviceError(f"mapping {size} bytes of user memory at {addr:#x} to GPU {self.gpu_id} failed")
        except BaseException:
            self._undo_alloc(reserve, handle, mapped)
            raise
        return Allocation(reserve.addr, size, "userptr", handle, None, {"reserve": reserve, "host": addr})

    def _undo_alloc(self, reserve: Mapping, handle: int | None, mapped: bool) -> None:
        """Release a half-made allocation (GPU mapping, buffer, address range), keeping the first error."""
        try:
            if mapped:
                self.ioctl("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", handle=handle,
                           device_ids_array_ptr=ctypes.addressof(self._gpu_ids), n_devices=1)
            if handle is not None:
                self.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=handle)
        except (OSError, OutOfMemory):
            return                                     # the buffer may still sit at that address: keep the range
        self.seam.munmap(reserve)

    def available(self, kind: str = "vram") -> int | None:
        """Bytes of `kind` memory the kernel driver could still give this process (AMDKFD_IOC_AVAILABLE_MEMORY,
        VRAM only; None when unknown: other kinds, or a kernel without the ioctl)."""
        if kind != "vram" or self.version < (1, 9):
            return None
        try:
            return self.ioctl("AMDKFD_IOC_AVAILABLE_MEMORY", gpu_id=self.gpu_id)["available"]
        except OSError:
            return None

    def free(self, a: Allocation) -> None:
        self.ioctl("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", handle=a.handle,
                   device_ids_array_ptr=ctypes.addressof(self._gpu_ids), n_devices=1)
        self.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=a.handle)
        self.seam.munmap(a.meta["reserve"])

    # -- queues --------------------------------------------------------------------------------
    def create_queue(self, kind: str, ring_bytes: int, ptrs: Allocation | None = None, wptr_off: int = 0,
                     rptr_off: int = 8) -> QueueInfo:
        """A user-mode queue: ring in host memory, pointers in uncached memory, doorbell mapped. `ptrs` puts the
        write/read pointers at those offsets of caller memory (an AQL queue's amd_queue_t dispatch ids)."""
        qtype = {"compute": K.KFD_IOC_QUEUE_TYPE_COMPUTE, "aql": K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
                 "sdma": K.KFD_IOC_QUEUE_TYPE_SDMA}[kind]
        ring = self.alloc(ring_bytes, "gtt", uncached=True)
        own = ptrs is None
        ptrs = ptrs or self.alloc(PAGE, "gtt", uncached=True)
        extra = {}
        eop_va = eop_size = cwsr_va = cwsr_size = ctl = 0
        if kind != "sdma":
            eop = self.alloc(0x1000, "vram", cpu=False)
            ctl = self.props.get("ctl_stack_size", 0)
            cwsr_size = self.props.get("cwsr_size", 0) + ctl    # one XCC's area; the buffer holds one per XCC
            total = XCC.cwsr_bytes(cwsr_size, self.props.get("debug_memory_size", 0), self.num_xcc)
            cwsr = self.alloc(max(total, PAGE), "gtt") if cwsr_size else None
            eop_va, eop_size = eop.va, eop.size
            cwsr_va = cwsr.va if cwsr else 0
            extra = {"eop": eop, "cwsr": cwsr}
        try:
            r = self.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=ring.va, ring_size=ring.size,
                           gpu_id=self.gpu_id, queue_type=qtype, queue_percentage=K.KFD_MAX_QUEUE_PERCENTAGE,
                           queue_priority=K.KFD_MAX_QUEUE_PRIORITY, write_pointer_address=ptrs.va + wptr_off,
                           read_pointer_address=ptrs.va + rptr_off, eop_buffer_address=eop_va,
                           eop_buffer_size=eop_size, ctx_save_restore_address=cwsr_va,
                           ctx_save_restore_size=cwsr_size, ctl_stack_size=ctl)
        except BaseException:                          # the kernel refused: give the queue's memory back
            for a in (ring, ptrs if own else None, extra.get("eop"), extra.get("cwsr")):
                if a is not None:
                    self.free(a)
            raise
        page_off = r["doorbell_offset"] & ~(0x2000 - 1)
        if page_off not in self.doorbell_pages:
            self.doorbell_pages[page_off] = self.seam.mmap(None, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, self.fd,
                                                           page_off)
        r8, w8 = ptrs.va + rptr_off, ptrs.va + wptr_off
        rptr = Allocation(r8, 8, "uncached", None, Mapping(r8, 8, ptrs.cpu.mv[rptr_off:rptr_off + 8]))
        wptr = Allocation(w8, 8, "uncached", None, Mapping(w8, 8, ptrs.cpu.mv[wptr_off:wptr_off + 8]))
        if own:
            extra["ptrs"] = ptrs
        return QueueInfo(kind, r["queue_id"], self.doorbell_pages[page_off], r["doorbell_offset"] & 0x1FFF, ring, rptr,
                         wptr, extra)

    def destroy_queue(self, q: QueueInfo) -> None:
        self.ioctl("AMDKFD_IOC_DESTROY_QUEUE", queue_id=q.queue_id)
        for a in (q.ring, q.extra.get("ptrs"), q.extra.get("eop"), q.extra.get("cwsr")):
            if a is not None:
                self.free(a)

    # -- events and clocks ---------------------------------------------------------------------
    def wait_events(self, timeout_ms: int) -> list[F.QueueException] | None:
        """Sleep until the EOP interrupt, a GPU exception or the timeout. Returns the exceptions that stopped
        queues (None if there were none): the full records where the kernel driver keeps them (the simulated
        one does), else what the event data says (a memory fault's VA and kind; a hang)."""
        ev = getattr(self._waits, "ev", None)           # kfd_event_data[3]: one buffer per thread
        if ev is None:
            ev = self._waits.ev = (ctypes.c_uint8 * (48 * 3))()
            self._waits.args = bytearray(K.IOCTLS["AMDKFD_IOC_WAIT_EVENTS"][1].pack(
                events_ptr=ctypes.addressof(ev), num_events=3, wait_for_all=0, timeout=0))
        ctypes.memmove(ev, self._events, len(self._events))         # the three event ids, no data
        args = self._waits.args
        _U32.pack_into(args, _WAIT_TIMEOUT, max(0, int(timeout_ms)))
        self.seam.ioctl(self.fd, _WAIT_EVENTS, args)
        not_present, read_only, no_exec = _MEMORY_DATA.unpack_from(ev, 48)
        hw = _U32.unpack_from(ev, 96 + 12)[0]                        # hw_exception_data.gpu_id: signaled
        if not (not_present or read_only or no_exec or hw):
            return None
        take = getattr(self.seam, "take_exceptions", None)
        found = take() if take is not None else []
        if found:
            return found
        if not_present or read_only or no_exec:
            va = ctypes.c_uint64.from_buffer(ev, 48 + 16).value
            why = "page is read-only" if read_only else "not executable" if no_exec else "not mapped"
            return [F.QueueException("a queue of this process", F.MemoryFault(va, bool(read_only), "unknown", 0, why))]
        return [F.QueueException("a queue of this process", F.WaveException("the GPU reset an engine (hang)"))]

    def queue_progress(self, q: QueueInfo) -> int | None:
        """Work the queue has done (packets and waves retired) where the kernel driver can tell, else None."""
        f = getattr(self.seam, "queue_progress", None)
        return f(q.queue_id) if f is not None else None

    def clock_counters(self) -> tuple[int, int, int]:
        """(GPU clock counter, CPU clock in ns (CLOCK_MONOTONIC_RAW), system clock frequency)."""
        r = self.ioctl("AMDKFD_IOC_GET_CLOCK_COUNTERS", gpu_id=self.gpu_id)
        return r["gpu_clock_counter"], r["cpu_clock_counter"], r["system_clock_freq"]

    def close(self) -> None:
        """Give back the interface's own events, event page and doorbell mappings, then the files (queues and
        the runtime's memory must be gone already)."""
        try:
            for ev in (self.signal_event, self.memory_event, self.hw_event):
                self.ioctl("AMDKFD_IOC_DESTROY_EVENT", event_id=ev)
            self.free(self.event_page)
        except (OSError, OutOfMemory):
            pass                                       # closing the files below releases them in the kernel
        for m in self.doorbell_pages.values():
            self.seam.munmap(m)
        self.doorbell_pages.clear()
        self.seam.close(self.drm_fd)
        self.seam.close(self.fd)
