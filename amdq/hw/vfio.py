"""VFIO facts: ioctl request numbers, argument structs, flags and the vfio-pci region and interrupt indices.

Sources:
* Linux `include/uapi/linux/vfio.h` (VFIO_API_VERSION 0): VFIO_TYPE ';', VFIO_BASE 100, every ioctl is
  `_IO(VFIO_TYPE, VFIO_BASE + n)` (no size or direction in the number: the structs carry `argsz`), the
  IOMMU-type extensions, the struct layouts and flag bits, the fixed vfio-pci region and IRQ indices.
* Linux `include/uapi/asm-generic/ioctl.h` (x86-64, arm64): `_IOC(dir, type, nr, size)` = dir << 30 |
  size << 16 | type << 8 | nr, `_IOC_NONE` 0, so `_IO(type, nr)` = type << 8 | nr.

How each ioctl takes its argument (vfio.h's comments): a struct (the buffer is read and written back), a
plain integer passed as the argument itself, a pointer to an s32, or a NUL-terminated device name. The
integer ioctls and GET_DEVICE_FD answer in the ioctl's return value.
"""
from __future__ import annotations

from .layout import Array, Struct

VFIO_API_VERSION = 0
VFIO_TYPE = ord(";")
VFIO_BASE = 100
IOC_NRSHIFT, IOC_TYPESHIFT, IOC_SIZESHIFT, IOC_DIRSHIFT = 0, 8, 16, 30       # asm-generic/ioctl.h
IOC_NONE = 0


def _io(type_: int, nr: int) -> int:
    """`_IO(type, nr)`: direction none, size 0."""
    return IOC_NONE << IOC_DIRSHIFT | type_ << IOC_TYPESHIFT | nr << IOC_NRSHIFT


# --- argument structs -------------------------------------------------------------------------
vfio_group_status = Struct("vfio_group_status", 8, [
    ("argsz", 0, "u32"),
    ("flags", 4, "u32"),
])

vfio_device_info = Struct("vfio_device_info", 24, [
    ("argsz", 0, "u32"),
    ("flags", 4, "u32"),
    ("num_regions", 8, "u32"),        # max region index + 1
    ("num_irqs", 12, "u32"),          # max IRQ index + 1
    ("cap_offset", 16, "u32"),
    ("pad", 20, "u32"),
])

vfio_region_info = Struct("vfio_region_info", 32, [
    ("argsz", 0, "u32"),
    ("flags", 4, "u32"),
    ("index", 8, "u32"),
    ("cap_offset", 12, "u32"),
    ("size", 16, "u64"),              # __aligned_u64
    ("offset", 24, "u64"),            # from the start of the device fd
])

vfio_irq_info = Struct("vfio_irq_info", 16, [
    ("argsz", 0, "u32"),
    ("flags", 4, "u32"),
    ("index", 8, "u32"),
    ("count", 12, "u32"),             # IRQs within this index
])

vfio_irq_set = Struct("vfio_irq_set", 20, [   # followed by `count` data elements (flexible __u8 data[])
    ("argsz", 0, "u32"),
    ("flags", 4, "u32"),
    ("index", 8, "u32"),
    ("start", 12, "u32"),
    ("count", 16, "u32"),
])

# How an ioctl's argument travels: a Struct (buffer in and out), "int" (the value is the argument),
# "s32*" (a pointer to one s32), "name" (a NUL-terminated string), None (no argument).
IOCTLS: dict[str, tuple[int, Struct | str | None]] = {
    "VFIO_GET_API_VERSION": (_io(VFIO_TYPE, VFIO_BASE + 0), None),            # returns VFIO_API_VERSION
    "VFIO_CHECK_EXTENSION": (_io(VFIO_TYPE, VFIO_BASE + 1), "int"),           # returns > 0 if supported
    "VFIO_SET_IOMMU": (_io(VFIO_TYPE, VFIO_BASE + 2), "int"),                 # on the container
    "VFIO_GROUP_GET_STATUS": (_io(VFIO_TYPE, VFIO_BASE + 3), vfio_group_status),
    "VFIO_GROUP_SET_CONTAINER": (_io(VFIO_TYPE, VFIO_BASE + 4), "s32*"),      # the container's fd
    "VFIO_GROUP_UNSET_CONTAINER": (_io(VFIO_TYPE, VFIO_BASE + 5), None),
    "VFIO_GROUP_GET_DEVICE_FD": (_io(VFIO_TYPE, VFIO_BASE + 6), "name"),      # returns the device fd
    "VFIO_DEVICE_GET_INFO": (_io(VFIO_TYPE, VFIO_BASE + 7), vfio_device_info),
    "VFIO_DEVICE_GET_REGION_INFO": (_io(VFIO_TYPE, VFIO_BASE + 8), vfio_region_info),
    "VFIO_DEVICE_GET_IRQ_INFO": (_io(VFIO_TYPE, VFIO_BASE + 9), vfio_irq_info),
    "VFIO_DEVICE_SET_IRQS": (_io(VFIO_TYPE, VFIO_BASE + 10), vfio_irq_set),
    "VFIO_DEVICE_RESET": (_io(VFIO_TYPE, VFIO_BASE + 11), None),
}
REQUEST = {name: nr for name, (nr, _) in IOCTLS.items()}

# --- extensions (VFIO_CHECK_EXTENSION) and IOMMU types (VFIO_SET_IOMMU) ------------------------
VFIO_TYPE1_IOMMU = 1
VFIO_SPAPR_TCE_IOMMU = 2
VFIO_TYPE1v2_IOMMU = 3
VFIO_DMA_CC_IOMMU = 4
VFIO_EEH = 5
VFIO_SPAPR_TCE_v2_IOMMU = 7
VFIO_NOIOMMU_IOMMU = 8                 # no translation, no isolation; taints the kernel
VFIO_UNMAP_ALL = 9
VFIO_UPDATE_VADDR = 10

# --- flags ------------------------------------------------------------------------------------
VFIO_GROUP_FLAGS_VIABLE = 1 << 0
VFIO_GROUP_FLAGS_CONTAINER_SET = 1 << 1

VFIO_DEVICE_FLAGS_RESET = 1 << 0
VFIO_DEVICE_FLAGS_PCI = 1 << 1
VFIO_DEVICE_FLAGS_PLATFORM = 1 << 2
VFIO_DEVICE_FLAGS_AMBA = 1 << 3
VFIO_DEVICE_FLAGS_CCW = 1 << 4
VFIO_DEVICE_FLAGS_AP = 1 << 5
VFIO_DEVICE_FLAGS_FSL_MC = 1 << 6
VFIO_DEVICE_FLAGS_CAPS = 1 << 7
VFIO_DEVICE_FLAGS_CDX = 1 << 8

VFIO_REGION_INFO_FLAG_READ = 1 << 0
VFIO_REGION_INFO_FLAG_WRITE = 1 << 1
VFIO_REGION_INFO_FLAG_MMAP = 1 << 2
VFIO_REGION_INFO_FLAG_CAPS = 1 << 3

VFIO_IRQ_INFO_EVENTFD = 1 << 0
VFIO_IRQ_INFO_MASKABLE = 1 << 1
VFIO_IRQ_INFO_AUTOMASKED = 1 << 2      # level-triggered (INTx): masked after each signal until unmasked
VFIO_IRQ_INFO_NORESIZE = 1 << 3

VFIO_IRQ_SET_DATA_NONE = 1 << 0
VFIO_IRQ_SET_DATA_BOOL = 1 << 1        # data: one u8 per IRQ
VFIO_IRQ_SET_DATA_EVENTFD = 1 << 2     # data: one s32 eventfd per IRQ (-1: de-assign)
VFIO_IRQ_SET_ACTION_MASK = 1 << 3
VFIO_IRQ_SET_ACTION_UNMASK = 1 << 4
VFIO_IRQ_SET_ACTION_TRIGGER = 1 << 5
VFIO_IRQ_SET_DATA_TYPE_MASK = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_DATA_EVENTFD
VFIO_IRQ_SET_ACTION_TYPE_MASK = VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK | VFIO_IRQ_SET_ACTION_TRIGGER
IRQ_SET_DATA_ELEM = {VFIO_IRQ_SET_DATA_NONE: None, VFIO_IRQ_SET_DATA_BOOL: "u8", VFIO_IRQ_SET_DATA_EVENTFD: "i32"}

# --- vfio-pci's fixed indices -----------------------------------------------------------------
VFIO_PCI_BAR0_REGION_INDEX = 0         # BARn is region n (a 64-bit BAR leaves the next index empty)
VFIO_PCI_BAR5_REGION_INDEX = 5
VFIO_PCI_ROM_REGION_INDEX = 6
VFIO_PCI_CONFIG_REGION_INDEX = 7
VFIO_PCI_VGA_REGION_INDEX = 8
VFIO_PCI_NUM_REGIONS = 9

VFIO_PCI_INTX_IRQ_INDEX = 0
VFIO_PCI_MSI_IRQ_INDEX = 1
VFIO_PCI_MSIX_IRQ_INDEX = 2
VFIO_PCI_ERR_IRQ_INDEX = 3
VFIO_PCI_REQ_IRQ_INDEX = 4
VFIO_PCI_NUM_IRQS = 5
IRQ_NAMES = {VFIO_PCI_INTX_IRQ_INDEX: "intx", VFIO_PCI_MSI_IRQ_INDEX: "msi", VFIO_PCI_MSIX_IRQ_INDEX: "msix",
             VFIO_PCI_ERR_IRQ_INDEX: "err", VFIO_PCI_REQ_IRQ_INDEX: "req"}


def irq_set_layout(flags: int, count: int) -> Struct:
    """`vfio_irq_set` with its data for `count` IRQs of the flags' data type (none, u8 bools, s32 eventfds)."""
    elem = IRQ_SET_DATA_ELEM.get(flags & VFIO_IRQ_SET_DATA_TYPE_MASK, "bad")
    if elem == "bad":
        raise ValueError(f"vfio_irq_set flags {flags:#x} name no single data type")
    if elem is None:
        return vfio_irq_set
    data = Array(elem, count)
    return Struct(f"vfio_irq_set+{elem}[{count}]", vfio_irq_set.size + data.size,
                  [(n, off, typ) for n, (off, typ) in vfio_irq_set.fields.items()]
                  + [("data", vfio_irq_set.size, data)])


def irq_set(flags: int, index: int, start: int, count: int, data: list[int] | None = None) -> bytearray:
    """An encoded `vfio_irq_set` (argsz filled in) with `data` for DATA_BOOL / DATA_EVENTFD."""
    st = irq_set_layout(flags, count)
    values = dict(argsz=st.size, flags=flags, index=index, start=start, count=count)
    if "data" in st:
        values["data"] = list(data or [])
        if len(values["data"]) != count:
            raise ValueError(f"vfio_irq_set: {len(values['data'])} data elements for count {count}")
    return bytearray(st.pack(**values))
