"""A fake VFIO kernel under the OS seam, for tests/test_vfio.py.

It answers the VFIO ioctls on fake `/dev/vfio` nodes for the functions of a fake sysfs tree
(tests/fake_sysfs.py) and keeps one fake device: BARs as bytearrays, a config space, interrupt indices.
It checks every argument the driver sends -- request number, argument kind, struct size, argsz, flags,
indices -- against its own transcription of Linux `include/uapi/linux/vfio.h` (struct formats and request
numbers written out here, not taken from amdq.hw.vfio), so a wrong number or layout there fails a test.
Eventfds, poll and the sysfs files are the real ones (OSSeam); "raising an interrupt" writes the eventfd
the driver bound with VFIO_DEVICE_SET_IRQS.
"""
from __future__ import annotations

import errno
import os
import struct
import threading
from pathlib import Path

from amdq.iface.base import Mapping
from amdq.iface.os_seam import OSSeam

from fake_sysfs import CONFIG, groups_dir


def _io(n: int) -> int:                 # _IO(';', 100 + n): type << 8 | nr, no size, no direction
    return ord(";") << 8 | (100 + n)


REQUESTS = {_io(n): name for n, name in enumerate((
    "GET_API_VERSION", "CHECK_EXTENSION", "SET_IOMMU", "GROUP_GET_STATUS", "GROUP_SET_CONTAINER",
    "GROUP_UNSET_CONTAINER", "GROUP_GET_DEVICE_FD", "DEVICE_GET_INFO", "DEVICE_GET_REGION_INFO",
    "DEVICE_GET_IRQ_INFO", "DEVICE_SET_IRQS", "DEVICE_RESET"))}
# struct layouts of vfio.h as little-endian formats (all __u32 but size/offset __aligned_u64)
GROUP_STATUS = struct.Struct("<II")                   # argsz flags
DEVICE_INFO = struct.Struct("<IIIIII")                # argsz flags num_regions num_irqs cap_offset pad
REGION_INFO = struct.Struct("<IIIIQQ")                # argsz flags index cap_offset size offset
IRQ_INFO = struct.Struct("<IIII")                     # argsz flags index count
IRQ_SET = struct.Struct("<IIIII")                     # argsz flags index start count, then data[]
TYPE1v2, NOIOMMU = 3, 8
VIABLE, CONTAINER_SET = 1, 2
DEV_RESET, DEV_PCI = 1, 2
R_READ, R_WRITE, R_MMAP = 1, 2, 4
I_EVENTFD, I_MASKABLE, I_AUTOMASKED, I_NORESIZE = 1, 2, 4, 8
S_NONE, S_BOOL, S_EVENTFD, S_MASK, S_UNMASK, S_TRIGGER = 1, 2, 4, 8, 16, 32
CONFIG_INDEX, INTX, MSI, MSIX = 7, 0, 1, 2
NUM_REGIONS, NUM_IRQS = 9, 5


class FakeDevice:
    """The function behind VFIO. Region n lives at (n + 1) << 36 of the device fd (not vfio-pci's n << 40:
    the driver must use the offset it is told)."""

    def __init__(self, bar_sizes: dict[int, int] | None = None, irqs: dict[int, int] | None = None,
                 reset: bool = True):
        sizes = bar_sizes or {0: 1 << 20, 2: 1 << 16, 5: 1 << 16}
        self.bars = {i: bytearray(sizes.get(i, 0)) for i in range(6)}
        self.config = bytearray(CONFIG)
        self.irq_counts = {INTX: 1, MSI: 1, MSIX: 0} if irqs is None else irqs
        self.reset_supported, self.resets = reset, 0

    @staticmethod
    def offset(index: int) -> int:
        return (index + 1) << 36

    def region(self, index: int) -> tuple[int, int]:
        """(flags, size) of region `index`."""
        if index == CONFIG_INDEX:
            return R_READ | R_WRITE, len(self.config)
        if index < 6 and self.bars[index]:
            return R_READ | R_WRITE | R_MMAP, len(self.bars[index])
        return 0, 0


class FakeVFIOKernel(OSSeam):
    """The OS seam with a VFIO kernel for the functions under `devices` (a fake `bus/pci/devices`)."""

    DEV = "/dev/vfio"

    def __init__(self, devices: Path, device: FakeDevice | None = None, loaded: bool = True,
                 noiommu: bool = False, noiommu_enabled: bool = True, denied: bool = False):
        super().__init__()
        self.devices, self.device = devices, device or FakeDevice()
        self.loaded, self.noiommu, self.noiommu_enabled, self.denied = loaded, noiommu, noiommu_enabled, denied
        self.fds: dict[int, dict] = {}                 # fake fd -> {"kind": ..., state}
        self._next = 1 << 20
        self.eventfds: set[int] = set()
        self.calls: list[tuple[str, object]] = []
        self.trigger: dict[int, int] = {}              # irq index -> eventfd
        self.masked = False                           # INTx: VFIO masks it after each signal
        self.unmasked = 0
        self.mapped: dict[int, Mapping] = {}
        self.lock = threading.Lock()

    # -- /dev/vfio ------------------------------------------------------------------------------
    def _groups(self) -> dict[int, list[str]]:
        root = groups_dir(self.devices)
        if not root.exists():
            return {}
        return {int(g.name): sorted(os.listdir(g / "devices")) for g in root.iterdir()}

    def _driver(self, name: str) -> str | None:
        link = self.devices / name / "driver"
        return os.path.basename(os.readlink(link)) if os.path.lexists(link) else None

    def _nodes(self) -> dict[str, int]:
        """Group nodes: a group whose functions include one bound to vfio-pci has one."""
        if not self.loaded:
            return {}
        prefix = "noiommu-" if self.noiommu else ""
        return {f"{self.DEV}/{prefix}{g}": g for g, names in self._groups().items()
                if any(self._driver(n) == "vfio-pci" for n in names)}

    def exists(self, path: str) -> bool:
        if path.startswith(self.DEV):
            return self.loaded and (path in (self.DEV, f"{self.DEV}/vfio") or path in self._nodes())
        return super().exists(path)

    def open(self, path: str, flags: int = os.O_RDWR | os.O_CLOEXEC) -> int:
        if not path.startswith(self.DEV):
            return super().open(path, flags)
        if not self.exists(path) or path == self.DEV:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if self.denied:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        if path == f"{self.DEV}/vfio":
            return self._new_fd(kind="container", groups=[], iommu=None)
        group = self._nodes()[path]
        if any(f["kind"] == "group" and f["group"] == group for f in self.fds.values()):
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        return self._new_fd(kind="group", group=group, container=None)

    def _new_fd(self, **state) -> int:
        self._next += 1
        self.fds[self._next] = state
        return self._next

    def close(self, fd: int) -> None:
        if fd in self.fds:
            state = self.fds.pop(fd)
            if state["kind"] == "device":
                self.trigger.clear()                  # closing the device turns its interrupts off
            return
        self.eventfds.discard(fd)
        super().close(fd)

    def open_fds(self) -> list[str]:
        return [f["kind"] for f in self.fds.values()]

    # -- ioctls -------------------------------------------------------------------------------
    def ioctl(self, fd: int, request: int, arg: bytearray | int = 0) -> int:
        assert request in REQUESTS, f"ioctl {request:#x} is no VFIO ioctl"
        name = REQUESTS[request]
        state = self.fds.get(fd)
        if state is None:
            raise OSError(errno.EBADF, "Bad file descriptor")
        want = {"GET_API_VERSION": "container", "CHECK_EXTENSION": "container", "SET_IOMMU": "container"}.get(
            name, "group" if name.startswith("GROUP_") else "device")
        assert state["kind"] == want, f"{name} on a {state['kind']} fd"
        return getattr(self, "_" + name.lower())(state, arg)

    @staticmethod
    def _struct(arg, st: struct.Struct) -> tuple:
        assert isinstance(arg, bytearray) and len(arg) == st.size, f"argument of {len(arg)} bytes, want {st.size}"
        v = st.unpack(arg)
        assert v[0] == st.size, f"argsz {v[0]}, want {st.size}"
        return v

    def _get_api_version(self, state, arg) -> int:
        assert arg == 0
        self.calls.append(("GET_API_VERSION", None))
        return 0

    def _check_extension(self, state, arg) -> int:
        assert isinstance(arg, int), "CHECK_EXTENSION takes the extension as the argument itself"
        self.calls.append(("CHECK_EXTENSION", arg))
        return int(self._supports(arg))

    def _supports(self, ext: int) -> bool:
        return ext == TYPE1v2 and not self.noiommu or ext == NOIOMMU and self.noiommu and self.noiommu_enabled

    def _group_get_status(self, state, arg) -> int:
        _, flags = self._struct(arg, GROUP_STATUS)
        assert flags == 0
        viable = all(self._driver(n) in (None, "vfio-pci") for n in self._groups()[state["group"]])
        GROUP_STATUS.pack_into(arg, 0, GROUP_STATUS.size,
                               VIABLE * viable | CONTAINER_SET * (state["container"] is not None))
        self.calls.append(("GROUP_GET_STATUS", state["group"]))
        return 0

    def _group_set_container(self, state, arg) -> int:
        assert isinstance(arg, bytearray) and len(arg) == 4, "SET_CONTAINER takes a pointer to an s32"
        cfd = int.from_bytes(arg, "little", signed=True)
        assert self.fds.get(cfd, {}).get("kind") == "container", f"{cfd} is no container fd"
        if not all(self._driver(n) in (None, "vfio-pci") for n in self._groups()[state["group"]]):
            raise OSError(errno.EPERM, "Operation not permitted")
        state["container"] = cfd
        self.fds[cfd]["groups"].append(state["group"])
        self.calls.append(("GROUP_SET_CONTAINER", cfd))
        return 0

    def _set_iommu(self, state, arg) -> int:
        assert isinstance(arg, int)
        if not state["groups"]:
            raise OSError(errno.EINVAL, "Invalid argument")       # no group attached yet
        if not self._supports(arg):
            raise OSError(errno.EINVAL, "Invalid argument")
        state["iommu"] = arg
        self.calls.append(("SET_IOMMU", arg))
        return 0

    def _group_get_device_fd(self, state, arg) -> int:
        assert isinstance(arg, bytearray) and arg.endswith(b"\0"), "GET_DEVICE_FD takes a NUL-terminated name"
        name = arg[:-1].decode()
        container = self.fds.get(state["container"])
        if container is None or container["iommu"] is None:
            raise OSError(errno.EINVAL, "Invalid argument")
        if name not in self._groups()[state["group"]]:
            raise OSError(errno.ENODEV, "No such device")
        self.calls.append(("GROUP_GET_DEVICE_FD", name))
        return self._new_fd(kind="device", name=name)

    def _device_get_info(self, state, arg) -> int:
        v = self._struct(arg, DEVICE_INFO)
        assert v[1:] == (0, 0, 0, 0, 0)
        flags = DEV_PCI | DEV_RESET * self.device.reset_supported
        DEVICE_INFO.pack_into(arg, 0, DEVICE_INFO.size, flags, NUM_REGIONS, NUM_IRQS, 0, 0)
        self.calls.append(("DEVICE_GET_INFO", None))
        return 0

    def _device_get_region_info(self, state, arg) -> int:
        _, flags, index, cap, size, offset = self._struct(arg, REGION_INFO)
        assert (flags, cap, size, offset) == (0, 0, 0, 0)
        if index >= NUM_REGIONS:
            raise OSError(errno.EINVAL, "Invalid argument")
        rflags, rsize = self.device.region(index)
        REGION_INFO.pack_into(arg, 0, REGION_INFO.size, rflags, index, 0, rsize, self.device.offset(index))
        self.calls.append(("DEVICE_GET_REGION_INFO", index))
        return 0

    def _device_get_irq_info(self, state, arg) -> int:
        _, flags, index, count = self._struct(arg, IRQ_INFO)
        assert (flags, count) == (0, 0)
        if index >= NUM_IRQS:
            raise OSError(errno.EINVAL, "Invalid argument")
        n = self.device.irq_counts.get(index, 0)
        iflags = I_EVENTFD | (I_MASKABLE | I_AUTOMASKED if index == INTX else I_NORESIZE)
        IRQ_INFO.pack_into(arg, 0, IRQ_INFO.size, iflags if n else 0, index, n)
        self.calls.append(("DEVICE_GET_IRQ_INFO", index))
        return 0

    def _device_set_irqs(self, state, arg) -> int:
        assert isinstance(arg, bytearray) and len(arg) >= IRQ_SET.size
        argsz, flags, index, start, count = IRQ_SET.unpack_from(arg)
        data_type, action = flags & 7, flags & (7 << 3)
        assert flags & ~0x3F == 0 and data_type in (S_NONE, S_BOOL, S_EVENTFD), f"flags {flags:#x}"
        assert action in (S_MASK, S_UNMASK, S_TRIGGER), f"flags {flags:#x}"
        elem = {S_NONE: 0, S_BOOL: 1, S_EVENTFD: 4}[data_type]
        assert argsz == len(arg) == IRQ_SET.size + elem * count, f"argsz {argsz} for {count} x {elem}-byte data"
        n = self.device.irq_counts.get(index, 0)
        assert start + count <= n, f"irq index {index} has {n} vectors, asked [{start}, {start + count})"
        data = list(struct.unpack_from(f"<{count}i", arg, IRQ_SET.size)) if data_type == S_EVENTFD else []
        self.calls.append(("DEVICE_SET_IRQS", (flags, index, start, count, data)))
        if action == S_TRIGGER and data_type == S_EVENTFD:
            assert all(fd in self.eventfds for fd in data), f"{data} are no eventfds of this process"
            if any(i != index for i in self.trigger):
                raise OSError(errno.EINVAL, "Invalid argument")   # another index is enabled
            self.trigger[index] = data[0]
        elif action == S_TRIGGER and data_type == S_NONE and count == 0:
            self.trigger.pop(index, None)
        elif action == S_UNMASK and data_type == S_NONE:
            assert index == INTX and count == 1
            with self.lock:
                self.masked = False
                self.unmasked += 1
        else:
            raise AssertionError(f"SET_IRQS flags {flags:#x} not expected")
        return 0

    def _device_reset(self, state, arg) -> int:
        assert arg == 0
        if not self.device.reset_supported:
            raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
        self.device.resets += 1
        self.calls.append(("DEVICE_RESET", None))
        return 0

    def _group_unset_container(self, state, arg) -> int:
        raise AssertionError("the driver closes the group instead")

    # -- the device fd ------------------------------------------------------------------------
    def _config(self, fd: int, size: int, offset: int) -> int:
        assert self.fds.get(fd, {}).get("kind") == "device", "config access on a non-device fd"
        base = self.device.offset(CONFIG_INDEX)
        assert base <= offset and offset + size <= base + len(self.device.config), f"offset {offset:#x} is no config"
        return offset - base

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if fd not in self.fds:
            return super().pread(fd, size, offset)
        off = self._config(fd, size, offset)
        return bytes(self.device.config[off: off + size])

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if fd not in self.fds:
            return super().pwrite(fd, data, offset)
        off = self._config(fd, len(data), offset)
        if off >= 4:                                   # vendor/device are read-only
            self.device.config[off: off + len(data)] = data
        return len(data)

    def map_shared(self, fd: int, size: int, offset: int) -> Mapping:
        assert self.fds.get(fd, {}).get("kind") == "device"
        index = next((i for i in range(6) if self.device.offset(i) == offset), None)
        assert index is not None, f"mmap offset {offset:#x} is no region's offset"
        flags, rsize = self.device.region(index)
        assert flags & R_MMAP and 0 < size <= rsize
        m = Mapping(offset, size, memoryview(self.device.bars[index])[:size])
        self.mapped[index] = m
        return m

    def unmap_shared(self, m: Mapping) -> None:
        self.mapped = {i: v for i, v in self.mapped.items() if v is not m}

    # -- eventfds and the interrupt ------------------------------------------------------------
    def eventfd(self, initval: int = 0) -> int:
        fd = super().eventfd(initval)
        self.eventfds.add(fd)
        return fd

    def raise_interrupt(self) -> bool:
        """The device interrupts: VFIO signals the bound eventfd (INTx: unless masked, then masks it).
        False when nothing is bound or INTx is masked."""
        if not self.trigger:
            return False
        (index, fd), = self.trigger.items()
        with self.lock:
            if index == INTX:
                if self.masked:
                    return False
                self.masked = True
        os.eventfd_write(fd, 1)
        return True
