"""The PCIe side behind the ASM24xx bridge: layer 2 of the USB interface (iface/usb.py). Power and link (the XDATA
LTSSM state, F3), the four type-1 bridges on buses 0..3 (bus numbers, memory windows, command), the GPU on bus 4
(Resizable BAR at its largest, BARs sized with all-ones and placed, memory decode and bus mastering).

Facts: shared/facts/usb_asm24.json `pcie_setup` through amdq.hw.usb_asm24; the type-1 header and BAR layouts and the
natural alignment of BARs are the PCI Local Bus specification's.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import DeviceError
from ..hw import usb_asm24 as U
from .usb_bridge import (BAR_ALIGN, BRIDGE_BUSES, CMD_IO, CMD_MASTER, CMD_MEMORY, CONFIG_OFFSET_MAX, EXT_CAP_REBAR,
                         EXT_CAP_START, GPU_BUS, LTSSM_L0, LTSSM_STATE, MEM_BASE, PREF_BASE, Controller,
                         TLPError)


@dataclass(frozen=True)
class BAR:
    """One GPU BAR as bring-up placed it."""
    index: int
    bus_address: int
    size: int
    prefetchable: bool
    is64: bool


def _resize_bar(ctrl: Controller, bus: int) -> int | None:
    """The Resizable-BAR capability's first BAR set to its largest size (pcie_setup.resizable_bar); that size's
    index (size = 1 MiB << index), None when the GPU has no such capability."""
    off, seen = EXT_CAP_START, set()
    while off and off not in seen and off <= CONFIG_OFFSET_MAX - 8:
        seen.add(off)
        hdr = ctrl.config_read(bus, 0, 0, off)
        if hdr in (0, 0xFFFFFFFF):
            return None
        if hdr & 0xFFFF == EXT_CAP_REBAR:
            cap = ctrl.config_read(bus, 0, 0, off + 4)
            if not cap >> 4:
                return None
            idx = (cap >> 4).bit_length() - 1
            cntl = ctrl.config_read(bus, 0, 0, off + 8)
            ctrl.config_write(bus, 0, 0, off + 8, 4, cntl & ~(0x1F << 8) | idx << 8)
            return idx
        off = (hdr >> 20) & 0xFFC
    return None


def size_bars(ctrl: Controller, bus: int = GPU_BUS) -> dict[int, BAR]:
    """Size every memory BAR of the function at bus:00.0 (all-ones written, read back) and place it: non-prefetchable
    from 0x1000_0000, prefetchable 64-bit ones from 0x8_0000_0000, each class in 2 MiB steps (pcie_setup.
    bar_assignment), each at an address aligned to its size (a BAR's low address bits are hardwired to zero: the
    PCI specification's natural alignment; the facts' 2 MiB steps alone would misplace a BAR larger than the
    distance to the next aligned address). A 32-bit prefetchable BAR is placed with the non-prefetchable ones
    (this module's choice: it cannot sit above 4 GiB)."""
    nxt = {False: MEM_BASE, True: PREF_BASE}
    bars: dict[int, BAR] = {}
    off = 0x10
    while off <= 0x24:
        lo = ctrl.config_read(bus, 0, 0, off)
        if lo & 1:                                      # an I/O BAR
            off += 4
            continue
        pref, is64 = bool(lo & 0x8), (lo & 0x6) == 0x4
        ctrl.config_write(bus, 0, 0, off, 4, 0xFFFFFFFF)
        mask = ctrl.config_read(bus, 0, 0, off) & 0xFFFFFFF0
        if is64:
            ctrl.config_write(bus, 0, 0, off + 4, 4, 0xFFFFFFFF)
            mask |= ctrl.config_read(bus, 0, 0, off + 4) << 32
            size = (~mask + 1) & 0xFFFFFFFFFFFFFFFF
        else:
            size = (~mask + 1) & 0xFFFFFFFF
        cls = pref and is64
        if size:                                        # a BAR decodes naturally aligned addresses (PCI spec)
            align = max(size, BAR_ALIGN)
            addr = (nxt[cls] + align - 1) // align * align
            ctrl.config_write(bus, 0, 0, off, 4, addr & 0xFFFFFFFF)
            if is64:
                ctrl.config_write(bus, 0, 0, off + 4, 4, addr >> 32)
            nxt[cls] = addr + (size + BAR_ALIGN - 1) // BAR_ALIGN * BAR_ALIGN
            bars[(off - 0x10) // 4] = BAR((off - 0x10) // 4, addr, size, pref, is64)
        else:
            ctrl.config_write(bus, 0, 0, off, 4, 0)
            if is64:
                ctrl.config_write(bus, 0, 0, off + 4, 4, 0)
        off += 8 if is64 else 4
    return bars


@dataclass(frozen=True)
class Port:
    """A PCI-to-PCI bridge found behind the bridge chip (a switch or root port)."""
    bus: int
    vendor: int
    device: int


@dataclass(frozen=True)
class Topology:
    """What bring-up found and placed: the bridges in bus order, the GPU's id, its BARs by index."""
    ports: tuple[Port, ...]
    gpu: tuple[int, int]
    bars: dict[int, BAR]


def _port(ctrl: Controller, bus: int) -> Port:
    """The type-1 function at bus:00.0, or a DeviceError naming the bus."""
    try:
        ident = ctrl.config_read(bus, 0, 0, 0)
        header = ctrl.config_read(bus, 0, 0, 0x0E, 1) & 0x7F
    except TLPError as e:
        raise DeviceError(f"{ctrl.name}: no PCIe bridge answers at bus {bus} device 0 ({e}); the board behind the "
                          f"USB bridge is not the expected chain of {len(BRIDGE_BUSES)} bridges") from None
    if header != 1:
        raise DeviceError(f"{ctrl.name}: the function at bus {bus} device 0 ({ident & 0xFFFF:#06x}:{ident >> 16:#06x}) "
                          f"has header type {header}, not a PCI-to-PCI bridge (type 1)")
    return Port(bus, ident & 0xFFFF, ident >> 16)


def bring_up(ctrl: Controller) -> Topology:
    """Power and link, the bridges on buses 0..3 (each identified, then programmed), the GPU's BARs on bus 4 (see
    the module doc): what was found and placed."""
    state = ctrl.link_state()
    if state != LTSSM_L0:
        ctrl.pcie_power(True)
        state = ctrl.link_state()
    if state != LTSSM_L0:
        raise DeviceError(f"{ctrl.name}: the PCIe link did not come up after power-on (LTSSM state {state:#04x} at "
                          f"XDATA {LTSSM_STATE:#06x}, {LTSSM_L0:#04x} is L0): check the GPU's power and seating")
    ports = []
    for bus in BRIDGE_BUSES:                            # in order: each bus is reachable once the one before routes
        ports.append(_port(ctrl, bus))
        cw = lambda off, size, v, b=bus: ctrl.config_write(b, 0, 0, off, size, v)   # noqa: E731
        cw(0x18, 4, U.bus_numbers(bus))     # primary 0, secondary bus+1, subordinate 4: one dword
        cw(0x20, 2, MEM_BASE >> 16)                     # memory window from 0x1000_0000 ...
        cw(0x22, 2, 0xFFFF)                             # ... to all-ones
        cw(0x24, 2, (PREF_BASE >> 16) & 0xFFF0)         # prefetchable window bits 31:20 ...
        cw(0x26, 2, 0xFFFF)
        cw(0x28, 4, PREF_BASE >> 32)                    # ... and 63:32
        cw(0x2C, 4, 0xFFFFFFFF)
        cw(0x04, 1, CMD_IO | CMD_MEMORY | CMD_MASTER)
    try:
        ident = ctrl.config_read(GPU_BUS, 0, 0, 0)
    except TLPError as e:
        raise DeviceError(f"{ctrl.name}: no GPU answers at bus {GPU_BUS} ({e}): check the GPU's power") from None
    if ident & 0xFFFF != 0x1002:
        raise DeviceError(f"{ctrl.name}: the function on bus {GPU_BUS} is {ident & 0xFFFF:#06x}:{ident >> 16:#06x}, "
                          f"not an AMD GPU (vendor 0x1002)")
    _resize_bar(ctrl, GPU_BUS)
    bars = size_bars(ctrl, GPU_BUS)
    for n in (0, 2, 5):
        if n not in bars:
            raise DeviceError(f"{ctrl.name}: the GPU's BAR{n} reads back no size; the AM driver needs BAR0 (VRAM), "
                              f"BAR2 (doorbells) and BAR5 (registers)")
    ctrl.config_write(GPU_BUS, 0, 0, 0x04, 1, CMD_IO | CMD_MEMORY | CMD_MASTER)
    return Topology(tuple(ports), (ident & 0xFFFF, ident >> 16), bars)
