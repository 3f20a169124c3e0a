"""The kernel side of /dev/kfd for the simulated GPU: the ioctls a runtime uses, the mmap offsets they
hand out, and the sysfs topology, with the struct layouts of Linux's kfd_ioctl.h (amdq.hw.kfd).

Like the real driver it owns the process's GPU virtual memory: it writes the page tables (4 levels,
in VRAM, in the documented PTE format) that the simulated MMU walks, creates the hardware queues a
CREATE_QUEUE asks for, and turns end-of-pipe interrupts and GPU faults into events.

USERPTR buffers (kfd_ioctl.h: mmap_offset carries the CPU address of the user's pages) map the process's own
pages: the driver places them in a DMA window of the GPU (sim/iommu.py) and writes SYSTEM PTEs to it; the
runtime keeps the pages alive until it frees the buffer (on a real kernel get_user_pages pins them).
"""
from __future__ import annotations

import bisect
import ctypes
import errno
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..hw.boards import BOARDS
from ..hw import kfd as K
from ..hw import xcc as XCC
from ..iface.base import Mapping
from ..iface.os_seam import PROT_NONE
from .gpu import SimGPU
from ..hw import vm as VM
from .mmu import ADDR_MASK, FRAG, SYSTEM, VALID

MMAP_DOORBELL = 3 << 62
HOST_USER_VA_BITS = 47          # what an x86-64 Linux process gets below the canonical hole (TASK_SIZE = 2**47 - 4 KiB)
PAGE = 4096
HUGE = 1 << 21
TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
IP_DISCOVERY = "/sys/class/drm/renderD128/device/ip_discovery/die/0"
GFX_TARGET_VERSION = {"gfx1100": 110000, "gfx1101": 110001, "gfx1102": 110002, "gfx1151": 110501,
                      "gfx1200": 120000, "gfx1201": 120001, "gfx942": 90402, "gfx950": 90500}
MAX_FRAG = 9            # amdgpu's fragment size on gfx9 and later (amdgpu_vm_adjust_size(adev, 256 * 1024, 9, ...))


def _block_align(size: int) -> int:
    """The alignment of a VRAM block of `size` bytes: the largest power of two not above it, 4 KiB to 2 MiB (amdgpu's
    VRAM manager hands out drm_buddy blocks, naturally aligned to their power-of-two size), so the PTEs of a buffer
    at an equally aligned VA carry large fragments."""
    return min(max(1 << (size.bit_length() - 1), 4096), 2 << 20)


def _fragments(vpage: int, ppage: int, n: int) -> np.ndarray:
    """FRAG of each of n PTEs mapping pages vpage.. to ppage..: each page gets the k of the largest block of 2**k
    pages (k <= MAX_FRAG) aligned in VA and PA alike that the run covers (amdgpu_vm_pte_fragment's scheme)."""
    out = np.zeros(n, np.uint64)
    i = 0
    while i < n:
        both = (vpage + i) | (ppage + i)
        k = min(MAX_FRAG, (both & -both).bit_length() - 1) if both else MAX_FRAG    # their common alignment
        while i + (1 << k) > n:
            k -= 1
        out[i:i + (1 << k)] = k
        i += 1 << k
    return out


@dataclass
class Bo:
    handle: int
    va: int
    size: int
    arena: object
    pa: int
    flags: int
    mapped: bool = False


class AddressSpace:
    """The simulated process's virtual address space for anonymous reservations, as mmap hands it out.

    A free list of [start, end) ranges between `low` and `high`, sorted by address: a reservation takes the
    highest range that fits (top-down, like Linux's default mmap layout), `release` gives it back and merges
    it with its neighbours, so alloc/free cycles reuse the same addresses and the space never runs out
    while the reservations in use fit. Reservations are 2 MiB aligned and padded to 2 MiB, so every
    buffer may use 2 MiB PDE-as-PTE pages and owns its page-table pages; the padding is part of the
    reservation and freed with it.
    """

    def __init__(self, low: int, high: int, align: int = HUGE):
        if low % align or high <= low:
            raise ValueError(f"bad address space [{low:#x}, {high:#x})")
        self.low, self.high, self.align = low, high, align
        self.free_ranges: list[tuple[int, int]] = [(low, high)]
        self.reserved: dict[int, int] = {}              # start -> padded extent

    @property
    def used(self) -> int:
        """Bytes of address space reserved (padding included)."""
        return sum(self.reserved.values())

    @property
    def largest_free(self) -> int:
        return max((e - s for s, e in self.free_ranges), default=0)

    def reserve(self, size: int) -> int:
        """Start of a fresh reservation of `size` bytes; ENOMEM (as mmap) when no free range fits."""
        extent = (max(size, 1) + self.align - 1) & -self.align
        for i in range(len(self.free_ranges) - 1, -1, -1):
            s, e = self.free_ranges[i]
            start = (e - extent) & -self.align
            if start < s:
                continue
            pieces = [r for r in ((s, start), (start + extent, e)) if r[1] > r[0]]
            self.free_ranges[i:i + 1] = pieces
            self.reserved[start] = extent
            return start
        raise OSError(errno.ENOMEM, f"mmap: no {extent:#x} bytes of free address space (largest free range "
                                    f"{self.largest_free:#x} of {self.high - self.low:#x}, {self.used:#x} reserved)")

    def release(self, start: int) -> bool:
        """Give back the reservation that starts at `start`; False if none does (munmap of other mappings)."""
        extent = self.reserved.pop(start, None)
        if extent is None:
            return False
        end = start + extent
        fr = self.free_ranges
        i = bisect.bisect_left(fr, (start, end))
        if i < len(fr) and fr[i][0] == end:                 # merge with the range above
            end = fr.pop(i)[1]
        if i > 0 and fr[i - 1][1] == start:                 # and with the one below
            i -= 1
            start = fr.pop(i)[0]
        fr.insert(i, (start, end))
        return True


@dataclass
class Event:
    id: int
    type: int
    auto_reset: bool
    signaled: bool = False
    data: dict = field(default_factory=dict)


class DoorbellPage(Mapping):
    """The doorbell aperture: a write rings the engine bound to that doorbell."""

    def __init__(self, gpu: SimGPU, base_index: int):
        super().__init__(0xD000_0000 + base_index * 8, 0x2000, None)
        self.gpu, self.base = gpu, base_index
        self.values = [0] * (0x2000 // 8)

    def write64(self, off: int, v: int) -> None:
        i = off >> 3
        self.values[i] = v & 0xFFFFFFFFFFFFFFFF
        self.gpu.ring(self.base + i, v)

    def writer64(self, off: int):
        """write64 at `off` as a function of the value (the runtime binds a queue's doorbell once)."""
        return self.gpu.ringer(self.base + (off >> 3), keep=(self.values, off >> 3))

    def write32(self, off: int, v: int) -> None:
        self.write64(off, v)

    def read64(self, off: int) -> int:
        return self.values[off >> 3]

    read32 = read64


class SimKFD:
    GPU_ID = 0x4A21

    def __init__(self, gpu: SimGPU):
        self.gpu = gpu
        self.fds: dict[int, str] = {}
        self._next_fd = 1000
        self.bos: dict[int, Bo] = {}
        self.by_offset: dict[int, Bo] = {}
        self._next_handle = 1
        self.queues: dict[int, tuple[object, int]] = {}
        self._next_queue = 1
        self.events: dict[int, Event] = {}
        self._next_event = 1
        self.exceptions: deque = deque(maxlen=256)     # hardware exception records, oldest first
        self._lock = threading.Lock()                   # ioctls of several host threads (WAIT_EVENTS aside)
        self._woken = threading.Condition()             # WAIT_EVENTS sleepers, notified when an event is signaled
        self.vmid = 8
        self.vm = gpu.vm(self.vmid)
        self.vm.set_root(gpu.vram.alloc(4096))
        # user space of the simulated process: 4 GiB up to the lower of the host's user VA limit and the GPU's VA
        self.address_space = AddressSpace(1 << 32, (min(1 << HOST_USER_VA_BITS, 1 << VM.VA_BITS) - PAGE) & -HUGE)
        self._doorbells = DoorbellPage(gpu, 0)
        self._next_doorbell = 0
        self.vm_acquired = False
        self._logical_xcc_start = 0                     # the device's current_logical_xcc_start
        gpu.irq_handlers.append(self._interrupt)
        self._by_request = {req: (name, st) for name, (req, st) in K.IOCTLS.items()}
        t = gpu.target
        props = {
            "cpu_cores_count": 0, "simd_count": t.cus * t.simds_per_cu, "mem_banks_count": 1, "caches_count": 0,
            "io_links_count": 0, "p2p_links_count": 0, "cpu_core_id_base": 0, "simd_id_base": 0x80000000,
            "max_waves_per_simd": t.max_waves_per_simd, "lds_size_in_kb": t.lds_bytes // 1024,
            "gds_size_in_kb": 0, "num_gws": 0, "wave_front_size": t.wave_size,
            "array_count": t.ses * t.gen.arrays_per_se, "simd_arrays_per_engine": t.gen.arrays_per_se,
            "cu_per_simd_array": max(1, t.cus // (t.ses * t.gen.arrays_per_se)),
            "simd_per_cu": t.simds_per_cu, "max_slots_scratch_cu": 32, "gfx_target_version": GFX_TARGET_VERSION[t.arch],
            "vendor_id": 0x1002, "device_id": 0x744C, "location_id": 0x300, "domain": 0, "drm_render_minor": 128,
            "hive_id": 0, "num_sdma_engines": 2, "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": 6,
            "num_cp_queues": 8, "max_engine_clk_fcompute": BOARDS[t.arch].engine_mhz, "local_mem_size": gpu.vram.size, "fw_version": 2000,
            "capability": 0, "debug_prop": 0, "sdma_fw_version": 20, "unique_id": 0x1234, "num_xcc": t.xcc,
            "max_engine_clk_ccompute": 3000, "cwsr_size": 0x100000, "ctl_stack_size": 0x4000,
        }
        self.sysfs = {
            f"{TOPOLOGY}/0/gpu_id": "0\n", f"{TOPOLOGY}/0/properties": "cpu_cores_count 8\nsimd_count 0\n",
            f"{TOPOLOGY}/1/gpu_id": f"{self.GPU_ID}\n",
            f"{TOPOLOGY}/1/properties": "".join(f"{k} {v}\n" for k, v in props.items()),
            f"{TOPOLOGY}/1/name": f"{t.arch}\n",
        }
        # amdgpu's IP discovery view of the same GPU (/sys/class/drm/renderD128/device/ip_discovery)
        for ip, ver in t.ip.items():
            for field, v in zip(("major", "minor", "revision"), ver):
                self.sysfs[f"{IP_DISCOVERY}/{ip}/0/{field}"] = f"{v}\n"

    # -- the seam: files, ioctl, mmap -----------------------------------------------------------
    def exists(self, path: str) -> bool:
        return path in ("/dev/kfd", TOPOLOGY, IP_DISCOVERY) or path.startswith("/dev/dri/renderD") or path in self.sysfs

    def listdir(self, path: str) -> list[str]:
        if path == TOPOLOGY:
            return ["0", "1"]
        if path == IP_DISCOVERY:
            return list(self.gpu.target.ip)
        raise FileNotFoundError(path)

    def read_text(self, path: str) -> str:
        if path not in self.sysfs:
            raise FileNotFoundError(path)
        return self.sysfs[path]

    def open(self, path: str, flags: int = 0) -> int:
        if not self.exists(path) or path.startswith(TOPOLOGY):
            raise FileNotFoundError(errno.ENOENT, "No such device", path)
        fd = self._next_fd
        self._next_fd += 1
        self.fds[fd] = "kfd" if path == "/dev/kfd" else "drm"
        return fd

    def close(self, fd: int) -> None:
        self.fds.pop(fd, None)

    def read_user(self, ptr: int, size: int) -> bytes:
        return ctypes.string_at(ptr, size)

    def mmap(self, addr: int | None, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> Mapping:
        if fd == -1:                                       # anonymous: reserve address space
            if prot != PROT_NONE:
                raise OSError(errno.EINVAL, "the simulated process only reserves address space anonymously")
            return Mapping(self.address_space.reserve(size), size, None)
        if self.fds.get(fd) == "kfd" and offset & MMAP_DOORBELL == MMAP_DOORBELL:
            return self._doorbells
        bo = self.by_offset.get(offset)
        if bo is None or self.fds.get(fd) != "drm":
            raise OSError(errno.EINVAL, f"mmap offset {offset:#x} names no buffer")
        if addr is not None and addr != bo.va:
            raise OSError(errno.EINVAL, "buffers are mapped at their GPU virtual address")
        return Mapping(bo.va, size, bo.arena.view(bo.pa, size))

    def munmap(self, m: Mapping) -> None:
        """Unmapping a reservation returns its address range; doorbell and buffer views hold no range of
        their own (a buffer's CPU view lies inside its reservation)."""
        self.address_space.release(m.addr)

    def ioctl(self, fd: int, request: int, arg: bytearray) -> None:
        if self.fds.get(fd) != "kfd":
            raise OSError(errno.EBADF, "not a KFD file descriptor")
        if request not in self._by_request:
            raise OSError(errno.ENOTTY, f"unknown KFD ioctl {request:#x}")
        name, st = self._by_request[request]
        if len(arg) != st.size:
            raise OSError(errno.EINVAL, f"{name}: argument of {len(arg)} bytes, expected {st.size}")
        handler = getattr(self, "_" + name[len("AMDKFD_IOC_"):].lower(), None)
        if handler is None:
            raise OSError(errno.EINVAL, f"{name} is not implemented by the simulated driver")
        args = st.unpack(arg)
        if name == "AMDKFD_IOC_WAIT_EVENTS":
            out = handler(args)
        else:
            with self._lock:
                out = handler(args)
        if out:
            st.pack_into(arg, 0, **out)

    # -- ioctls ---------------------------------------------------------------------------------
    def _get_version(self, a):
        return {"major_version": 1, "minor_version": 17}

    def _acquire_vm(self, a):
        if self.fds.get(a["drm_fd"]) != "drm" or a["gpu_id"] != self.GPU_ID:
            raise OSError(errno.EINVAL, "ACQUIRE_VM: bad render node or gpu_id")
        self.vm_acquired = True

    def _get_clock_counters(self, a):
        return {"gpu_clock_counter": self.gpu.clock(), "cpu_clock_counter": time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW),
                "system_clock_counter": time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW),
                "system_clock_freq": 1_000_000_000, "gpu_id": a["gpu_id"]}

    def _alloc_memory_of_gpu(self, a):
        if not self.vm_acquired or a["gpu_id"] != self.GPU_ID:
            raise OSError(errno.EINVAL, "ALLOC_MEMORY_OF_GPU before ACQUIRE_VM or for another GPU")
        flags, size, va = a["flags"], a["size"], a["va_addr"]
        if size == 0 or va % 4096 or size % 4096:
            raise OSError(errno.EINVAL, "allocations are page aligned")
        if va + size > 1 << VM.VA_BITS:
            raise OSError(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: [{va:#x}, {va + size:#x}) is outside the "
                                        f"{VM.VA_BITS}-bit GPU virtual address space")
        if flags & K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR:
            return self._alloc_userptr(va, size, a["mmap_offset"], flags)
        if flags & K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM:
            arena = self.gpu.vram
        elif flags & (K.KFD_IOC_ALLOC_MEM_FLAGS_GTT | K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL):
            arena = self.gpu.sysmem
        else:
            raise OSError(errno.EINVAL, f"allocation flags {flags:#x} not supported by the simulated driver")
        try:
            align = _block_align(size) if arena is self.gpu.vram else 2 << 20 if size >= 2 << 20 else 4096
            pa = arena.alloc(size, align)
        except MemoryError:
            raise OSError(errno.ENOMEM, f"{arena.name} full") from None
        h = self._next_handle
        self._next_handle += 1
        bo = Bo(h, va, size, arena, pa, flags)
        self.bos[h] = bo
        off = h << 12
        self.by_offset[off] = bo
        return {"handle": h, "mmap_offset": off}

    def _alloc_userptr(self, va: int, size: int, user: int, flags: int) -> dict:
        """A buffer of the process's pages at CPU address `user` (page aligned), in a DMA window of the GPU."""
        if user == 0 or user % 4096:
            raise OSError(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: USERPTR address {user:#x} is not a page-aligned "
                                        f"user address")
        try:
            pa = self.gpu.dma.map(user, size)
        except MemoryError as e:
            raise OSError(errno.ENOMEM, f"ALLOC_MEMORY_OF_GPU: {e}") from None
        h = self._next_handle
        self._next_handle += 1
        self.bos[h] = Bo(h, va, size, self.gpu.dma, pa, flags)
        return {"handle": h, "mmap_offset": user}           # (no render-node offset: the CPU has the pages already)

    def _available_memory(self, a):
        if a["gpu_id"] != self.GPU_ID:
            raise OSError(errno.EINVAL, "AVAILABLE_MEMORY: bad gpu_id")
        return {"available": self.gpu.vram.size - self.gpu.vram.used, "gpu_id": a["gpu_id"]}

    def _free_memory_of_gpu(self, a):
        bo = self.bos.pop(a["handle"], None)
        if bo is None:
            raise OSError(errno.EINVAL, "no such buffer")
        if bo.mapped:
            with self.gpu.lock:
                self._unmap(bo)
        self.by_offset.pop(bo.handle << 12, None)
        if bo.arena is self.gpu.dma:
            self.gpu.dma.unmap(bo.pa)                   # the pages go back to the process alone
        else:
            bo.arena.free(bo.pa, bo.size)

    def _map_memory_to_gpu(self, a):
        bo = self.bos.get(a["handle"])
        ids = struct.unpack(f"<{a['n_devices']}I", self.read_user(a["device_ids_array_ptr"], 4 * a["n_devices"]))
        if bo is None or any(i != self.GPU_ID for i in ids):
            raise OSError(errno.EINVAL, "MAP_MEMORY_TO_GPU: bad handle or device id")
        sysmem = bo.arena is self.gpu.sysmem or bo.arena is self.gpu.dma
        flags = VM.pte(self.gpu.target.gfx_version, 0, executable=True, system=sysmem, snooped=sysmem,
                       writeable=bool(bo.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE))
        with self.gpu.lock:                 # no engine walks or caches translations while the tables change
            try:
                self._map_range(bo.va, bo.pa, bo.size, flags)
            except MemoryError:             # no VRAM left for page tables: undo the part that was mapped
                self._unmap(bo)
                raise OSError(errno.ENOMEM, f"MAP_MEMORY_TO_GPU: no VRAM for the page tables of {bo.size} bytes") from None
            bo.mapped = True
            self.vm.invalidate()
        return {"n_success": len(ids)}

    def _unmap_memory_from_gpu(self, a):
        bo = self.bos.get(a["handle"])
        if bo is None:
            raise OSError(errno.EINVAL, "no such buffer")
        with self.gpu.lock:
            self._unmap(bo)
        return {"n_success": a["n_devices"]}

    def _create_queue(self, a):
        from .cp import PM4Queue
        qtype = a["queue_type"]
        if a["ring_size"] & (a["ring_size"] - 1) or a["ring_size"] < 256:
            raise OSError(errno.EINVAL, "ring size must be a power of two of at least 256 bytes")
        n = self.gpu.target.xcc
        compute = qtype in (K.KFD_IOC_QUEUE_TYPE_COMPUTE, K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL)
        if compute:
            self._check_cwsr(a, n)
        index = self._next_doorbell
        self._next_doorbell += 1
        if qtype == K.KFD_IOC_QUEUE_TYPE_COMPUTE:          # a PM4 queue runs on one XCC (pm4_target_xcc_in_xcp)
            eng = PM4Queue(self.gpu, self.vmid, a["ring_base_address"], a["ring_size"], a["read_pointer_address"],
                           a["write_pointer_address"], name=f"compute queue {self._next_queue}")
        elif qtype == K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL and n > 1:    # its MQD on every XCC of the partition
            from .aql import MultiXCCQueue
            eng = MultiXCCQueue(self.gpu, self.vmid, a, n, self._logical_xcc_start)
        else:
            from .queues import make_queue
            eng = make_queue(self.gpu, self.vmid, qtype, a)
        if compute:
            self._logical_xcc_start += 1                   # init_mqd_v9_4_3: current_logical_xcc_start++
        qid = self._next_queue
        self._next_queue += 1
        eng.queue_id = qid
        self.gpu.attach(index, eng)
        self.queues[qid] = (eng, index)
        return {"queue_id": qid, "doorbell_offset": MMAP_DOORBELL | (self.GPU_ID << 46) | index * 8}

    def _check_cwsr(self, a, n: int) -> None:
        """kfd_queue_acquire_buffers: a context-save area, when given, is a buffer of this process covering one
        area per XCC (ctx_save_restore_size each, XCC x's at address + x * size)."""
        va, size = a["ctx_save_restore_address"], a["ctx_save_restore_size"]
        if not va:
            return
        need = XCC.cwsr_bytes(size, 0, n)
        bo = next((b for b in self.bos.values() if b.va <= va < b.va + b.size), None)
        if bo is None or va + need > bo.va + bo.size:
            have = 0 if bo is None else bo.va + bo.size - va
            raise OSError(errno.EINVAL, f"CREATE_QUEUE: the context-save area at {va:#x} holds {have:#x} bytes; "
                                        f"{n} XCC(s) need {need:#x} ({size:#x} each)")

    def _destroy_queue(self, a):
        eng, index = self.queues.pop(a["queue_id"], (None, None))
        if eng is None:
            raise OSError(errno.EINVAL, "no such queue")
        self.gpu.detach(index)

    def _create_event(self, a):
        eid = self._next_event
        self._next_event += 1
        self.events[eid] = Event(eid, a["event_type"], bool(a["auto_reset"]))
        return {"event_id": eid, "event_slot_index": eid, "event_page_offset": a["event_page_offset"],
                "event_trigger_data": eid}

    def _destroy_event(self, a):
        self.events.pop(a["event_id"], None)

    def _set_event(self, a):
        self.events[a["event_id"]].signaled = True
        self._wake()

    def _reset_event(self, a):
        self.events[a["event_id"]].signaled = False

    def _wait_events(self, a):
        n, ptr = a["num_events"], a["events_ptr"]
        raw = bytearray(self.read_user(ptr, 48 * n))
        ids = [struct.unpack_from("<I", raw, 48 * i + 40)[0] for i in range(n)]
        evs = [self.events.get(i) for i in ids]
        if any(e is None for e in evs):
            raise OSError(errno.EINVAL, "WAIT_EVENTS: unknown event id")
        deadline = time.monotonic() + a["timeout"] / 1000
        polled = self.gpu.mode == "async"        # a synchronous GPU runs a slice even for a zero-timeout poll
        ready = (lambda: all(e.signaled for e in evs)) if a["wait_for_all"] else (lambda: any(e.signaled for e in evs))
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0 and polled:
                return {"wait_result": K.KFD_IOC_WAIT_RESULT_TIMEOUT}
            polled = True
            if self.gpu.mode != "async":
                if not self.gpu.pump(64) and left > 0:
                    time.sleep(0.0002)
                continue
            if left > 0 and self.gpu.assist():  # (the work done on this thread, while the worker sleeps)
                continue
            with self._woken:                    # asleep until an interrupt signals an event (or 5 ms pass)
                if not ready() and left > 0:
                    self._woken.wait(min(left, 0.005))
        for i, e in enumerate(evs):
            if e.signaled and e.data:            # kfd_event_data: memory or hardware exception data
                if e.type == K.KFD_IOC_EVENT_MEMORY and e.data["memory"]:
                    ro = e.data["read_only"]
                    struct.pack_into("<IIIIQII", raw, 48 * i, int(not ro), int(ro), 0, 0,
                                     e.data["va"] & (1 << 64) - 1, self.GPU_ID, 0)
                elif e.type == K.KFD_IOC_EVENT_HW_EXCEPTION:
                    struct.pack_into("<IIII", raw, 48 * i, K.KFD_HW_EXCEPTION_PER_ENGINE_RESET,
                                     K.KFD_HW_EXCEPTION_GPU_HANG, 0, self.GPU_ID)
            if e.signaled and e.auto_reset:
                e.signaled = False
                e.data = {}
        ctypes.memmove(ptr, bytes(raw), len(raw))
        return {"wait_result": K.KFD_IOC_WAIT_RESULT_COMPLETE}

    # -- page tables ----------------------------------------------------------------------------
    def _table(self, table: int, idx: int, create: bool) -> int | None:
        vram = self.gpu.vram
        e = vram.u64(table + 8 * idx)
        if e & VALID:
            return e & ADDR_MASK
        if not create:
            return None
        t = vram.alloc(4096)
        pde = VM.pde(self.gpu.target.gfx_version, t)
        vram.buf[table + 8 * idx:table + 8 * idx + 8] = np.frombuffer(struct.pack("<Q", pde), np.uint8)
        return t

    def _map_range(self, va: int, pa: int, size: int, flags: int) -> None:
        """Write PTEs for [va, va+size) -> [pa, ...); 2 MiB-aligned stretches use PDE-as-PTE huge pages, and the
        PTEs of VRAM carry FRAG (the naturally aligned power-of-two runs they fill: _fragments); system pages
        none (amdgpu_vm_pte_fragment: "system pages are non continuously")."""
        vram, huge = self.gpu.vram, 1 << 21
        local = not flags & SYSTEM
        end = va + size
        while va < end:
            pdb1 = self._table(self.vm.root, (va >> 39) & 0x1FF, True)
            pdb0 = self._table(pdb1, (va >> 30) & 0x1FF, True)
            i0 = (va >> 21) & 0x1FF
            if va % huge == 0 and pa % huge == 0 and end - va >= huge:
                vram.buf[pdb0 + 8 * i0:pdb0 + 8 * i0 + 8] = np.frombuffer(
                    struct.pack("<Q", pa | flags | self.vm.pde_pte), np.uint8)
                va, pa = va + huge, pa + huge
                continue
            ptb = self._table(pdb0, i0, True)
            first = (va >> 12) & 0x1FF
            n = min(512 - first, (end - va + 4095) >> 12)
            ptes = (np.arange(n, dtype=np.uint64) << np.uint64(12)) + np.uint64(pa) | np.uint64(flags)
            if local:
                ptes |= _fragments(va >> 12, pa >> 12, n) << np.uint64(FRAG.lo)
            vram.buf[ptb + 8 * first:ptb + 8 * (first + n)] = ptes.view(np.uint8)
            va, pa = va + n * 4096, pa + n * 4096

    def _unmap(self, bo: Bo) -> None:
        """Clear the PTEs of [bo.va, bo.va + bo.size) and free every page table left empty, as amdgpu does
        when a range is unmapped (so mapping cycles do not grow the page tables in VRAM)."""
        vram = self.gpu.vram
        va, end = bo.va, bo.va + bo.size
        while va < end:
            pdb1 = self._table(self.vm.root, (va >> 39) & 0x1FF, False)
            pdb0 = self._table(pdb1, (va >> 30) & 0x1FF, False) if pdb1 is not None else None
            if pdb0 is None:
                va = (va | ((1 << 30) - 1)) + 1
                continue
            i0 = (va >> 21) & 0x1FF
            e = vram.u64(pdb0 + 8 * i0)
            if e & self.vm.pde_pte:
                vram.buf[pdb0 + 8 * i0:pdb0 + 8 * i0 + 8] = 0
                self._prune(va)
                va += 1 << 21
                continue
            ptb = e & ADDR_MASK if e & VALID else None
            first = (va >> 12) & 0x1FF
            n = min(512 - first, (end - va + 4095) >> 12)
            if ptb is not None:
                vram.buf[ptb + 8 * first:ptb + 8 * (first + n)] = 0
                self._prune(va)
            va += n * 4096
        bo.mapped = False
        self.vm.invalidate()

    def _prune(self, va: int) -> None:
        """Free the page tables on the walk to `va` that hold no valid entry any more (bottom up; the root stays)."""
        vram = self.gpu.vram
        path = [(self.vm.root, (va >> 39) & 0x1FF)]
        for shift in (30, 21):
            e = vram.u64(path[-1][0] + 8 * path[-1][1])
            if not e & VALID or e & self.vm.pde_pte:
                break
            path.append((e & ADDR_MASK, (va >> shift) & 0x1FF))
        else:
            e = vram.u64(path[-1][0] + 8 * path[-1][1])
            if e & VALID and not e & self.vm.pde_pte:
                path.append((e & ADDR_MASK, 0))
        for level in range(len(path) - 1, 0, -1):            # path[level] is a table its parent points to
            table = path[level][0]
            if vram.buf[table:table + 4096].view(np.uint64).any():
                break
            vram.free(table, 4096)
            parent, idx = path[level - 1]
            vram.buf[parent + 8 * idx:parent + 8 * idx + 8] = 0

    # -- interrupts -----------------------------------------------------------------------------
    def queue_progress(self, queue_id: int) -> int | None:
        """Packets and waves the queue has retired (what a hang watchdog looks at)."""
        eng, _ = self.queues.get(queue_id, (None, None))
        return eng.progress if eng is not None else None

    def take_exceptions(self) -> list:
        """The hardware exception records since the last call (what the real driver hands a debugger through
        KFD_IOC_DBG_TRAP_QUERY_EXCEPTION_INFO; the simulated one keeps the whole record)."""
        out = []
        while self.exceptions:
            out.append(self.exceptions.popleft())
        return out

    def _interrupt(self, source: str, ctxid: int, vmid: int, info: dict) -> None:
        if source == "CP_EOP":
            ev = self.events.get(ctxid)
            if ev is not None:
                ev.signaled = True
                self._wake()
            return
        exc = info.get("exception")
        if exc is not None:
            self.exceptions.append(exc)
        # a VM fault is a memory exception event (VA, not-present / read-only); everything else stops the
        # queue and is a hardware exception event
        memory = source == "VM_FAULT"
        va = info.get("address") or 0
        read_only = "read-only" in getattr(getattr(exc, "record", None), "reason", "")
        for ev in list(self.events.values()):
            if ev.type == K.KFD_IOC_EVENT_MEMORY or (ev.type == K.KFD_IOC_EVENT_HW_EXCEPTION and not memory):
                ev.signaled = True
                ev.data = {"va": va, "memory": memory, "read_only": read_only}
        self._wake()

    def _wake(self) -> None:
        with self._woken:
            self._woken.notify_all()


__all__ = ["SimKFD"]
