"""A fake sysfs tree for the PCI interface's tests: `bus/pci/devices/<address>` directories (vendor, device,
class, resource files, config, enable, the driver link) and, for VFIO, `kernel/iommu_groups/<n>/devices`
with the functions' `iommu_group` links."""
from __future__ import annotations

from pathlib import Path

BAR_SIZES = {0: 1 << 20, 2: 1 << 16, 5: 1 << 16}
CONFIG = bytes.fromhex("0210" "4c74") + bytes(252)           # vendor 0x1002, device 0x744c


def fake_function(root: Path, name: str = "0000:03:00.0", vendor: str = "0x1002", cls: str = "0x030000",
                  driver: str | None = None, iommu_group: int | None = None) -> Path:
    """One function under `root` (a `bus/pci/devices` directory); `iommu_group` puts it in that group."""
    p = root / name
    p.mkdir(parents=True)
    (p / "vendor").write_text(vendor + "\n")
    (p / "device").write_text("0x744c\n")
    (p / "class").write_text(cls + "\n")
    lines = []
    for i in range(6):
        s = BAR_SIZES.get(i, 0)
        lines.append(f"0x{0xe0000000 + i * 0x1000000:016x} 0x{0xe0000000 + i * 0x1000000 + s - 1 if s else 0:016x} 0x0")
        if s:
            (p / f"resource{i}").write_bytes(bytes(s))
    (p / "resource").write_text("\n".join(lines) + "\n")
    (p / "config").write_bytes(CONFIG)
    (p / "enable").write_text("0")
    if driver:
        (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (p / "driver").symlink_to(root / "drivers" / driver)
    if iommu_group is not None:
        group = groups_dir(root) / str(iommu_group)
        (group / "devices").mkdir(parents=True, exist_ok=True)
        (group / "devices" / name).symlink_to(p)
        (p / "iommu_group").symlink_to(group)
    return p


def groups_dir(root: Path) -> Path:
    """The fake `kernel/iommu_groups` beside a fake `bus/pci/devices` root."""
    return root.parent / "kernel" / "iommu_groups"
