"""A PCI function bound to vfio-pci, opened through VFIO's group/container protocol (Linux
Documentation/driver-api/vfio.rst; numbers and structs in amdq.hw.vfio).

The function's IOMMU group comes from its sysfs `iommu_group` link; the group's node is `/dev/vfio/<group>`
(`/dev/vfio/noiommu-<group>` when VFIO runs without an IOMMU). Opening: the container `/dev/vfio/vfio`,
its API version, the IOMMU type's extension (TYPE1v2, or NOIOMMU for a no-IOMMU group), the group, viable,
attached to the container, the container's IOMMU set, the device fd by PCI address. Then the regions
(BAR0..5 and config space: config through pread/pwrite at the config region's offset, BARs mapped from the
device fd at their offsets) and one interrupt (MSI, else MSI-X, else INTx, as GET_IRQ_INFO offers them)
signalling an eventfd that `wait` sleeps on.

Every OS call goes through the seam (amdq.iface.os_seam.OSSeam), so a test can put a fake kernel under it.
"""
from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

from ..errors import DeviceError
from ..hw import vfio as V
from ..hw.layout import Struct
from .base import Mapping

VFIO_DEV = "/dev/vfio"
# The interrupt preference: MSI (what amdgpu asks for too), MSI-X, INTx (level-triggered: unmasked after each).
IRQ_ORDER = (V.VFIO_PCI_MSI_IRQ_INDEX, V.VFIO_PCI_MSIX_IRQ_INDEX, V.VFIO_PCI_INTX_IRQ_INDEX)
REGIONS = (0, 1, 2, 3, 4, 5, V.VFIO_PCI_CONFIG_REGION_INDEX)
TRIGGER_EVENTFD = V.VFIO_IRQ_SET_DATA_EVENTFD | V.VFIO_IRQ_SET_ACTION_TRIGGER
TRIGGER_OFF = V.VFIO_IRQ_SET_DATA_NONE | V.VFIO_IRQ_SET_ACTION_TRIGGER
UNMASK = V.VFIO_IRQ_SET_DATA_NONE | V.VFIO_IRQ_SET_ACTION_UNMASK

# What to do when an ioctl fails with an errno (vfio.h documents the calls; the advice is ours).
HINTS: dict[tuple[str, int], str] = {
    ("VFIO_GROUP_GET_DEVICE_FD", errno.EBUSY): "the function is in use (another process or a VM has it open)",
    ("VFIO_GROUP_GET_DEVICE_FD", errno.EPERM): "no-IOMMU devices need CAP_SYS_RAWIO: run as root",
    ("VFIO_GROUP_SET_CONTAINER", errno.EPERM): "no-IOMMU groups need CAP_SYS_RAWIO: run as root",
    ("VFIO_SET_IOMMU", errno.EPERM): "no-IOMMU mode needs CAP_SYS_RAWIO: run as root",
    ("VFIO_SET_IOMMU", errno.EINVAL): "the container does not offer this IOMMU type",
}


@dataclass(frozen=True)
class Region:
    """One device region as VFIO_DEVICE_GET_REGION_INFO describes it."""
    index: int
    flags: int
    size: int
    offset: int

    @property
    def mappable(self) -> bool:
        return bool(self.flags & V.VFIO_REGION_INFO_FLAG_MMAP)


def _driver(seam, dev_path: str) -> str | None:
    try:
        return os.path.basename(seam.readlink(os.path.join(dev_path, "driver")))
    except OSError:
        return None


def iommu_group(seam, sysfs_path: str) -> int:
    """The IOMMU group number of the function at `sysfs_path` (its `iommu_group` link)."""
    link = os.path.join(sysfs_path, "iommu_group")
    try:
        return int(os.path.basename(seam.readlink(link)))
    except (OSError, ValueError):
        raise DeviceError(f"{os.path.basename(sysfs_path)} has no IOMMU group ({link} is missing): turn the IOMMU "
                          f"on (amd_iommu=on or intel_iommu=on on the kernel command line), or let VFIO run without "
                          f"one (`modprobe vfio enable_unsafe_noiommu_mode=1`) before binding vfio-pci") from None


class VFIODevice:
    """One vfio-pci function: config space, regions, one interrupt on an eventfd."""

    def __init__(self, seam, sysfs_path: str, dev_root: str = VFIO_DEV):
        self.seam, self.path, self.dev_root = seam, sysfs_path, dev_root
        self.address = os.path.basename(sysfs_path)
        self.container = self.group_fd = self.device_fd = self.eventfd = -1
        self.irq_index: int | None = None
        self.irq_flags = 0
        self.regions: dict[int, Region] = {}
        self._maps: dict[int, Mapping] = {}
        self.closed = False
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------
    def _open(self) -> None:
        self.group = iommu_group(self.seam, self.path)
        node = f"{self.dev_root}/{self.group}"
        noiommu_node = f"{self.dev_root}/noiommu-{self.group}"
        self.noiommu = not self.seam.exists(node) and self.seam.exists(noiommu_node)
        container = f"{self.dev_root}/vfio"
        if not self.seam.exists(container):
            raise DeviceError(f"{self.address}: {container} does not exist: load vfio-pci (`sudo modprobe vfio-pci`) "
                              f"and bind the function to it")
        self.container = self._open_node(container)
        version = self._ioctl(self.container, "VFIO_GET_API_VERSION")
        if version != V.VFIO_API_VERSION:
            raise DeviceError(f"{container} speaks VFIO API version {version}; amdq speaks {V.VFIO_API_VERSION}")
        self.iommu_type = V.VFIO_NOIOMMU_IOMMU if self.noiommu else V.VFIO_TYPE1v2_IOMMU
        if self._ioctl(self.container, "VFIO_CHECK_EXTENSION", self.iommu_type) <= 0:
            raise DeviceError(
                f"{container} does not offer the no-IOMMU mode that group {self.group} needs: load vfio with "
                f"`enable_unsafe_noiommu_mode=1`" if self.noiommu else
                f"{container} does not offer the TYPE1v2 IOMMU: load vfio_iommu_type1 "
                f"(`sudo modprobe vfio_iommu_type1`)")
        group_path = noiommu_node if self.noiommu else node
        if not self.seam.exists(group_path):
            raise DeviceError(f"{self.address}: {node} does not exist: bind the function to vfio-pci "
                              f"(`echo {self.address} > /sys/bus/pci/drivers/vfio-pci/bind`, after `driver_override`)")
        self.group_fd = self._open_node(group_path)
        status = self._ioctl(self.group_fd, "VFIO_GROUP_GET_STATUS")
        if not status["flags"] & V.VFIO_GROUP_FLAGS_VIABLE:
            raise DeviceError(self._not_viable())
        self._ioctl(self.group_fd, "VFIO_GROUP_SET_CONTAINER", self.container)
        self._ioctl(self.container, "VFIO_SET_IOMMU", self.iommu_type)
        self.device_fd = self._ioctl(self.group_fd, "VFIO_GROUP_GET_DEVICE_FD", self.address)
        info = self._ioctl(self.device_fd, "VFIO_DEVICE_GET_INFO")
        if not info["flags"] & V.VFIO_DEVICE_FLAGS_PCI or info["num_regions"] <= V.VFIO_PCI_CONFIG_REGION_INDEX:
            raise DeviceError(f"{self.address}: VFIO describes no PCI device (flags {info['flags']:#x}, "
                              f"{info['num_regions']} regions)")
        self.device_flags = info["flags"]
        for i in REGIONS:
            r = self._ioctl(self.device_fd, "VFIO_DEVICE_GET_REGION_INFO", index=i)
            self.regions[i] = Region(i, r["flags"], r["size"], r["offset"])
        self.bar_sizes = {i: self.regions[i].size for i in range(6)}
        self._bind_irq(info["num_irqs"])

    def _open_node(self, path: str) -> int:
        try:
            return self.seam.open(path)
        except PermissionError:
            raise DeviceError(f"no access to {path}: run as root or give this user the node "
                              f"(`sudo chown $USER {path}`)") from None
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise DeviceError(f"{path} is in use by another process (a VM or another amdq)") from None
            raise DeviceError(f"opening {path} failed: {e.strerror}") from None

    def _not_viable(self) -> str:
        devices = os.path.join(self.path, "iommu_group", "devices")
        try:
            members = sorted(self.seam.listdir(devices))
        except OSError:
            members = []
        others = [f"{m} ({d})" for m in members if (d := _driver(self.seam, os.path.join(devices, m)))
                  not in (None, "vfio-pci")]
        return (f"IOMMU group {self.group} of {self.address} is not viable: bind every function of IOMMU group "
                f"{self.group} to vfio-pci" + (f" (bound elsewhere: {', '.join(others)})" if others else "")
                + f"; its members are in {devices}")

    def _bind_irq(self, num_irqs: int) -> None:
        for index in IRQ_ORDER:
            if index >= num_irqs:
                continue
            info = self._ioctl(self.device_fd, "VFIO_DEVICE_GET_IRQ_INFO", index=index)
            if info["count"] > 0 and info["flags"] & V.VFIO_IRQ_INFO_EVENTFD:
                break
        else:
            return                                   # no interrupt: the driver polls
        self.eventfd = self.seam.eventfd()
        self._ioctl(self.device_fd, "VFIO_DEVICE_SET_IRQS", V.irq_set(TRIGGER_EVENTFD, index, 0, 1, [self.eventfd]))
        self.irq_index, self.irq_flags = index, info["flags"]

    def _ioctl(self, fd: int, name: str, arg: int | str | bytearray | None = None, **fields) -> int | dict:
        """One VFIO ioctl by name; a struct argument comes back decoded, the others give the return value."""
        request, kind = V.IOCTLS[name]
        buf: bytearray | int
        decode = None
        if isinstance(arg, bytearray):                 # already encoded (vfio_irq_set with its data)
            buf = arg
        elif isinstance(kind, Struct):
            buf, decode = bytearray(kind.pack(argsz=kind.size, **fields)), kind
        elif kind == "s32*":
            buf = bytearray(int(arg).to_bytes(4, "little", signed=True))
        elif kind == "name":
            buf = bytearray(str(arg).encode() + b"\0")
        else:
            buf = int(arg or 0)
        try:
            ret = self.seam.ioctl(fd, request, buf)
        except OSError as e:
            hint = HINTS.get((name, e.errno))
            raise DeviceError(f"{self.address}: {name} failed: {e.strerror or e}"
                              + (f" ({hint})" if hint else "")) from e
        return decode.unpack(buf) if decode is not None else ret

    # -- the function --------------------------------------------------------------------------
    @property
    def irq(self) -> str | None:
        """The interrupt bound to the eventfd ("msi", "msix", "intx"), None if the function offers none."""
        return V.IRQ_NAMES[self.irq_index] if self.irq_index is not None else None

    def _check_open(self) -> None:
        if self.closed:
            raise DeviceError(f"{self.address}: the VFIO device was closed")

    def _config_range(self, off: int, size: int) -> int:
        self._check_open()
        cfg = self.regions[V.VFIO_PCI_CONFIG_REGION_INDEX]
        if off < 0 or size not in (1, 2, 4) or off + size > cfg.size:
            raise DeviceError(f"{self.address}: config access of {size} bytes at {off:#x} is outside its "
                              f"{cfg.size:#x}-byte config space")
        return cfg.offset + off

    def config_read(self, off: int, size: int = 4) -> int:
        data = self.seam.pread(self.device_fd, size, self._config_range(off, size))
        if len(data) != size:
            raise DeviceError(f"{self.address}: config read at {off:#x} returned {len(data)} of {size} bytes")
        return int.from_bytes(data, "little")

    def config_write(self, off: int, size: int, value: int) -> None:
        if self.seam.pwrite(self.device_fd, value.to_bytes(size, "little"), self._config_range(off, size)) != size:
            raise DeviceError(f"{self.address}: config write of {size} bytes at {off:#x} was cut short")

    def map(self, index: int) -> Mapping:
        """Region `index` (a BAR) mapped read/write from the device fd, once."""
        self._check_open()
        if index in self._maps:
            return self._maps[index]
        r = self.regions.get(index)
        if r is None or not r.size:
            raise DeviceError(f"{self.address}: region {index} is not implemented (VFIO reports size 0)")
        if not r.mappable:
            raise DeviceError(f"{self.address}: region {index} cannot be mapped (VFIO region flags {r.flags:#x})")
        try:
            m = self.seam.map_shared(self.device_fd, r.size, r.offset)
        except OSError as e:
            raise DeviceError(f"{self.address}: mapping region {index} ({r.size:#x} bytes) failed: {e}") from e
        self._maps[index] = m
        return m

    def wait(self, timeout_ms: int | None) -> int:
        """Sleep until the function interrupts or `timeout_ms` passes (None: no limit); returns how many
        interrupts arrived since the last wait (0: timed out). Without an interrupt it only sleeps."""
        self._check_open()
        if self.eventfd < 0:
            time.sleep(max(0, timeout_ms or 0) / 1000)
            return 0
        if not self.seam.poll([self.eventfd], timeout_ms):
            return 0
        n = self.seam.eventfd_read(self.eventfd)
        if n and self.irq_flags & V.VFIO_IRQ_INFO_AUTOMASKED:      # INTx: masked by VFIO until we unmask
            self._ioctl(self.device_fd, "VFIO_DEVICE_SET_IRQS", V.irq_set(UNMASK, self.irq_index, 0, 1))
        return n

    def reset(self) -> None:
        """A function-level reset through VFIO (VFIO_DEVICE_RESET)."""
        self._check_open()
        if not self.device_flags & V.VFIO_DEVICE_FLAGS_RESET:
            raise DeviceError(f"{self.address}: VFIO offers no reset for this function")
        self._ioctl(self.device_fd, "VFIO_DEVICE_RESET")

    def close(self) -> None:
        """Interrupt off, mappings, eventfd, device, group and container released (twice is harmless)."""
        if self.closed:
            return
        self.closed = True
        if self.irq_index is not None:
            try:
                self._ioctl(self.device_fd, "VFIO_DEVICE_SET_IRQS", V.irq_set(TRIGGER_OFF, self.irq_index, 0, 0))
            except DeviceError:
                pass                                  # closing the device fd turns it off too
        for m in self._maps.values():
            self.seam.unmap_shared(m)
        self._maps.clear()
        for name in ("eventfd", "device_fd", "group_fd", "container"):
            fd = getattr(self, name)
            if fd >= 0:
                self.seam.close(fd)
                setattr(self, name, -1)
