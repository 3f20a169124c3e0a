"""The simulated ASM24xx USB-to-PCIe bridge with a simulated GPU behind it (SIMUSB+AMD): bridge.py the bridge's
8051 side (XDATA, SRAM, TLP engine, F2 DMA, link state, faults), pcie.py the PCIe hierarchy behind it, timing.py
the link's counters and timing model, handle.py the libusb1-like context, device and handle the driver opens.

    from amdq.sim.usb import SimUSBContext
    ctx = SimUSBContext(arch="gfx1100")                 # one bridge, a simulated gfx1100 behind it
    h = ctx.openByVendorIDAndProductID(0xADD1, 0x0001)  # as usb1.USBContext
    h.controlRead(0xC0, 0xE4, 0xB450, 0, 1)             # XDATA read of the link state
"""
from .bridge import INJECT_KINDS, SimASM24Bridge
from .handle import SimUSBContext, SimUSBDevice, SimUSBDeviceHandle, SimUSBTransfer, plug
from .timing import LinkModel, LinkTiming

__all__ = ["INJECT_KINDS", "LinkModel", "LinkTiming", "SimASM24Bridge", "SimUSBContext", "SimUSBDevice",
           "SimUSBDeviceHandle", "SimUSBTransfer", "plug"]
