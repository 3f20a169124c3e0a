"""VFIO for the PCI interface against a fake VFIO kernel (tests/fake_vfio.py) on a fake sysfs tree
(tests/fake_sysfs.py): the ioctl numbers and layouts, opening a vfio-pci function through its group and
container, config space and BARs through the device fd, the interrupt on an eventfd that a waiting thread
sleeps on, and the refusals (no VFIO, a group that is not viable, no-IOMMU groups, permissions)."""
from __future__ import annotations

import os
import threading
import time

import pytest

from amdq.errors import DeviceError
from amdq.hw import vfio as V
from amdq.iface import pci
from amdq.iface.os_seam import OSSeam
from amdq.iface.vfio import VFIODevice
from fake_sysfs import fake_function
from fake_vfio import (INTX, MSI, MSIX, NOIOMMU, S_EVENTFD, S_NONE, S_TRIGGER, S_UNMASK, TYPE1v2, FakeDevice,
                       FakeVFIOKernel)

ADDR = "0000:03:00.0"
GROUP = 7


def _tree(tmp_path, group=GROUP, audio_driver="vfio-pci", link=True):
    """A GPU function bound to vfio-pci and its HDMI audio function in the same IOMMU group."""
    root = tmp_path / "bus" / "pci" / "devices"
    fake_function(root, ADDR, driver="vfio-pci", iommu_group=group if link else None)
    fake_function(root, "0000:03:00.1", cls="0x040300", driver=audio_driver, iommu_group=group if link else None)
    return root


def _open(tmp_path, **kernel):
    root = _tree(tmp_path)
    k = FakeVFIOKernel(root, **kernel)
    (info,) = [f for f in pci.list_functions(str(root)) if f.address == ADDR]
    return k, pci.SysfsFunction(info, seam=k)


def test_ioctl_numbers_and_layouts():
    # _IO(';', 100 + n) = 0x3b64 + n: the numbers VFIO users hard-code
    assert [V.REQUEST[n] for n in ("VFIO_GET_API_VERSION", "VFIO_CHECK_EXTENSION", "VFIO_SET_IOMMU",
                                   "VFIO_GROUP_GET_STATUS", "VFIO_GROUP_SET_CONTAINER", "VFIO_GROUP_GET_DEVICE_FD",
                                   "VFIO_DEVICE_GET_INFO", "VFIO_DEVICE_GET_REGION_INFO", "VFIO_DEVICE_GET_IRQ_INFO",
                                   "VFIO_DEVICE_SET_IRQS", "VFIO_DEVICE_RESET")] == \
        [0x3B64, 0x3B65, 0x3B66, 0x3B67, 0x3B68, 0x3B6A, 0x3B6B, 0x3B6C, 0x3B6D, 0x3B6E, 0x3B6F]
    assert (V.vfio_group_status.size, V.vfio_device_info.size, V.vfio_region_info.size, V.vfio_irq_info.size,
            V.vfio_irq_set.size) == (8, 24, 32, 16, 20)
    assert V.vfio_region_info.offsetof("size") == 16 and V.vfio_region_info.offsetof("offset") == 24
    buf = V.irq_set(V.VFIO_IRQ_SET_DATA_EVENTFD | V.VFIO_IRQ_SET_ACTION_TRIGGER, V.VFIO_PCI_MSI_IRQ_INDEX, 0, 1, [9])
    assert bytes(buf) == bytes.fromhex("18000000" "24000000" "01000000" "00000000" "01000000" "09000000")
    st = V.irq_set_layout(V.VFIO_IRQ_SET_DATA_EVENTFD | V.VFIO_IRQ_SET_ACTION_TRIGGER, 1)
    assert st.unpack(buf)["data"] == [9]
    assert len(V.irq_set(S_NONE | S_TRIGGER, MSI, 0, 0)) == 20
    with pytest.raises(ValueError):
        V.irq_set(S_NONE | S_EVENTFD | S_TRIGGER, MSI, 0, 1)


def test_open_through_group_and_container(tmp_path):
    k, fn = _open(tmp_path)
    v = fn._vdev
    assert fn.vfio and v.group == GROUP and not v.noiommu and fn.irq == "msi"
    names = [c[0] for c in k.calls]
    assert names[:6] == ["GET_API_VERSION", "CHECK_EXTENSION", "GROUP_GET_STATUS", "GROUP_SET_CONTAINER",
                         "SET_IOMMU", "GROUP_GET_DEVICE_FD"]
    assert k.calls[1] == ("CHECK_EXTENSION", TYPE1v2) and k.calls[4] == ("SET_IOMMU", TYPE1v2)
    assert k.calls[5] == ("GROUP_GET_DEVICE_FD", ADDR)
    assert [c[1] for c in k.calls if c[0] == "DEVICE_GET_REGION_INFO"] == [0, 1, 2, 3, 4, 5, 7]
    assert [c[1] for c in k.calls if c[0] == "DEVICE_GET_IRQ_INFO"] == [MSI]       # MSI offered: taken first
    (irqs,) = [c[1] for c in k.calls if c[0] == "DEVICE_SET_IRQS"]
    assert irqs == (S_EVENTFD | S_TRIGGER, MSI, 0, 1, [v.eventfd]) and k.trigger == {MSI: v.eventfd}
    assert fn.bar_sizes == {0: 1 << 20, 1: 0, 2: 1 << 16, 3: 0, 4: 0, 5: 1 << 16}
    assert v.regions[7].offset == FakeDevice.offset(7) and v.regions[7].size == 256
    assert sorted(k.open_fds()) == ["container", "device", "group"]
    fn.close()
    assert k.open_fds() == [] and k.eventfds == set() and k.trigger == {}
    assert k.calls[-1] == ("DEVICE_SET_IRQS", (S_NONE | S_TRIGGER, MSI, 0, 0, []))
    fn.close()                                         # twice is harmless


def test_config_space_and_bars_through_the_device_fd(tmp_path):
    k, fn = _open(tmp_path)
    fn.enable()
    enable_file = tmp_path / "bus" / "pci" / "devices" / ADDR / "enable"
    assert enable_file.read_text() == "0"            # vfio-pci enabled it; sysfs `enable` is left alone
    assert fn.config_read(0, 2) == 0x1002 and fn.config_read(2, 2) == 0x744c
    assert k.device.config[4] & (pci.CMD_MEMORY | pci.CMD_MASTER) == 6
    fn.config_write(0x40, 4, 0x12345678)
    assert k.device.config[0x40:0x44] == (0x12345678).to_bytes(4, "little") and fn.config_read(0x41, 1) == 0x56
    with pytest.raises(DeviceError, match="outside its 0x100-byte config space"):
        fn.config_read(0xFE, 4)
    fn.bar(5).write32(0x10, 0xDEADBEEF)               # dword address 0x10: byte 0x40 of the register BAR
    assert k.device.bars[5][0x40:0x44] == (0xDEADBEEF).to_bytes(4, "little")
    fn.bar(2).write64(8, 0x1122334455667788)
    assert k.device.bars[2][8:16] == (0x1122334455667788).to_bytes(8, "little")
    vram = fn.bar(0)
    vram[0x1000:0x1004] = b"AMDQ"
    assert k.device.bars[0][0x1000:0x1004] == b"AMDQ" and len(vram) == 1 << 20
    assert sorted(k.mapped) == [0, 2, 5]
    with pytest.raises(DeviceError, match="region 1 is not implemented"):
        fn._vdev.map(1)
    fn._vdev.reset()
    assert k.device.resets == 1
    fn.close()
    assert k.mapped == {}
    with pytest.raises(DeviceError, match="was closed"):
        fn.config_read(0, 2)


def test_a_waiting_thread_wakes_on_the_interrupt(tmp_path):
    k, fn = _open(tmp_path)
    t0 = time.monotonic()
    assert fn.wait_interrupt(60) == 0 and time.monotonic() - t0 >= 0.05      # no interrupt: sleeps the timeout
    out: list = []
    waiter = threading.Thread(target=lambda: out.append((fn.wait_interrupt(10_000), time.monotonic())))
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive() and not out                # asleep in poll on the eventfd
    raised = time.monotonic()
    assert k.raise_interrupt()
    waiter.join(5)
    assert not waiter.is_alive()
    (count, woke), = out
    assert count == 1 and woke - raised < 2
    k.raise_interrupt()
    k.raise_interrupt()
    assert fn.wait_interrupt(0) == 2                                        # counted since the last wait
    assert fn.wait_interrupt(0) == 0
    fn.close()


@pytest.mark.parametrize("irqs, expect", [({MSI: 0, MSIX: 4, INTX: 1}, "msix"), ({INTX: 1}, "intx")])
def test_msix_and_intx_fallback(tmp_path, irqs, expect):
    k, fn = _open(tmp_path, device=FakeDevice(irqs=irqs))
    assert fn.irq == expect
    index = {"msix": MSIX, "intx": INTX}[expect]
    order = [MSI, MSIX, INTX]                          # asked in preference order until one is offered
    assert [c[1] for c in k.calls if c[0] == "DEVICE_GET_IRQ_INFO"] == order[:order.index(index) + 1]
    assert k.trigger == {index: fn._vdev.eventfd}
    assert k.raise_interrupt() and fn.wait_interrupt(1000) == 1
    if expect == "intx":                               # level-triggered: unmasked after the wait
        assert k.unmasked == 1 and k.calls[-1] == ("DEVICE_SET_IRQS", (S_NONE | S_UNMASK, INTX, 0, 1, []))
        assert k.raise_interrupt() and not k.raise_interrupt()            # masked again until the next wait
        assert fn.wait_interrupt(1000) == 1 and k.unmasked == 2
    fn.close()


def test_no_interrupt_offered_polls(tmp_path):
    k, fn = _open(tmp_path, device=FakeDevice(irqs={}))
    assert fn.irq is None and fn._vdev.eventfd == -1 and not k.trigger
    t0 = time.monotonic()
    assert fn.wait_interrupt(30) == 0 and time.monotonic() - t0 >= 0.025
    fn.close()


def test_noiommu_group(tmp_path):
    k, fn = _open(tmp_path, noiommu=True)
    assert fn._vdev.noiommu and ("CHECK_EXTENSION", NOIOMMU) in k.calls and ("SET_IOMMU", NOIOMMU) in k.calls
    fn.close()
    with pytest.raises(DeviceError, match="enable_unsafe_noiommu_mode=1"):
        _open(tmp_path / "b", noiommu=True, noiommu_enabled=False)


def test_refusals(tmp_path):
    with pytest.raises(DeviceError, match=r"/dev/vfio/vfio does not exist: load vfio-pci"):
        _open(tmp_path / "a", loaded=False)
    with pytest.raises(DeviceError, match=r"no access to /dev/vfio/vfio: run as root .*chown"):
        _open(tmp_path / "b", denied=True)
    root = _tree(tmp_path / "c", link=False)
    with pytest.raises(DeviceError, match="has no IOMMU group .*enable_unsafe_noiommu_mode"):
        VFIODevice(FakeVFIOKernel(root), str(root / ADDR))
    k, fn = _open(tmp_path / "d")
    with pytest.raises(DeviceError, match="/dev/vfio/7 is in use by another process"):
        VFIODevice(k, str(tmp_path / "d" / "bus" / "pci" / "devices" / ADDR))
    fn.close()


def test_group_not_viable(tmp_path):
    root = _tree(tmp_path, audio_driver="snd_hda_intel")
    k = FakeVFIOKernel(root)
    (info,) = [f for f in pci.list_functions(str(root)) if f.address == ADDR]
    with pytest.raises(DeviceError, match=r"bind every function of IOMMU group 7 to vfio-pci "
                                          r"\(bound elsewhere: 0000:03:00.1 \(snd_hda_intel\)\)"):
        pci.SysfsFunction(info, seam=k)
    assert k.open_fds() == [] and "GROUP_SET_CONTAINER" not in [c[0] for c in k.calls]


def test_the_real_seam_calls_vfio_uses(tmp_path):
    """OSSeam's own eventfd, poll, pread/pwrite and shared file mappings (the fake kernel overrides them)."""
    seam = OSSeam()
    f = tmp_path / "region"
    f.write_bytes(bytes(2 * 4096))
    fd = seam.open(str(f))
    try:
        m = seam.map_shared(fd, 4096, 4096)           # the second page, as a region at an offset
        m.mv[0:4] = b"VFIO"
        keep = pci.BufferBackend(m.mv)                # an exported view: unmapping leaves it to the process
        seam.unmap_shared(m)
        keep.write32(1, 7)
        assert f.read_bytes()[4096:4104] == b"VFIO" + (7).to_bytes(4, "little")
        assert seam.pwrite(fd, b"cfg!", 16) == 4 and seam.pread(fd, 4, 16) == b"cfg!"
    finally:
        seam.close(fd)
    efd = seam.eventfd()
    try:
        assert seam.poll([efd], 0) == [] and seam.eventfd_read(efd) == 0
        os.eventfd_write(efd, 3)
        assert seam.poll([efd], 1000) == [efd] and seam.eventfd_read(efd) == 3 and seam.poll([efd], 0) == []
    finally:
        seam.close(efd)
