"""A small bench for the AM driver's SMU, GMC and IH blocks against their simulated parts, without the device
shell: a register file with the parts under test (sim/regfile.py), the driver's Registers bound to it, a
VRAM arena, and the few things a SimDevice and an AMContext provide (memory-controller access through the
simulated GMC's MMHUB, interrupts into the simulated IH, a clock, mode1 reset, timed waits)."""
from __future__ import annotations

import time

from amdq.am.ip import Region
from amdq.errors import AMTimeout
from amdq.hw.regmap import Layout, Registers
from amdq.hw.targets import get_target
from amdq.sim.gpu import SimGPU

BOOT_TOP_RESERVED = 64 << 10           # the discovery table's 64 KiB at the top of VRAM


class Bench:
    def __init__(self, arch: str = "gfx1100", parts: tuple[str, ...] = ("smu", "gmc", "ih"), vram: int = 128 << 20,
                 **smu_kw):
        from amdq.sim.regfile import RegisterFile
        self.target = get_target(arch)
        self.gpu = SimGPU(arch, vram_bytes=vram, sysmem_bytes=16 << 20, mode="sync")
        self.inject = self.gpu.inject
        self.vram = memoryview(self.gpu.vram.buf)
        self.parts = {}
        if "gmc" in parts:
            from amdq.sim.pci.gmc import SimGMC
            self.parts["gmc"] = SimGMC(self)
        if "ih" in parts:
            from amdq.sim.pci.ih import SimIH
            self.parts["ih"] = SimIH(self)
        if "smu" in parts:
            from amdq.sim.pci.smu import SimSMU
            self.parts["smu"] = SimSMU(self, **smu_kw)
        self.layout = Layout.for_target(self.target)
        self.regfile = RegisterFile(self.layout, *self.parts.values())
        self.raw = self.regfile.raw
        self.resets = 0
        self._ns = 0
        for p in self.parts.values():
            p.reset()
        self.am = AM(self)

    def __getattr__(self, name):
        parts = self.__dict__.get("parts", {})
        if name in parts:
            return parts[name]
        raise AttributeError(name)

    # -- SimDevice -----------------------------------------------------------------------------------
    def mc_read(self, addr: int, n: int) -> bytes:
        return self.parts["gmc"].read("MM", addr, n)

    def mc_write(self, addr: int, data: bytes) -> None:
        self.parts["gmc"].write("MM", addr, data)

    def interrupt(self, client_id: int, src_id: int, src_data: tuple[int, ...] = (), **fields: int) -> None:
        if "ih" in self.parts:
            self.parts["ih"].post(client_id, src_id, src_data, **fields)

    def clock_ns(self) -> int:
        self._ns += 1000
        return self._ns

    def mode1_reset(self) -> None:
        self.resets += 1
        for p in self.parts.values():
            p.reset()



class AM:
    """The AMContext the driver blocks get."""

    def __init__(self, bench: Bench):
        self.bench = bench
        self.target = bench.target
        self.regs = Registers(bench.layout, bench.regfile)
        self.vram = VRAMView(bench)
        self.debug = 0
        self.discovery = None
        self.logs: list[tuple[int, str]] = []
        self._boot_top = bench.gpu.vram.size - BOOT_TOP_RESERVED
        self._regions: dict[str, Region] = {}

    @property
    def boot(self):
        return self

    @property
    def end(self) -> int:                       # the boot region (BootMemory's start/end): 64 MiB under the top
        return self.bench.gpu.vram.size - BOOT_TOP_RESERVED

    @property
    def start(self) -> int:
        return self.end - (64 << 20)

    def block(self, name: str):
        return None

    def reserve(self, name: str, size: int, align: int = 4096) -> Region:
        if name not in self._regions:
            off = (self._boot_top - size) & -align
            self._boot_top = off
            self._regions[name] = Region(name, off, size, self.mc(off))
        return self._regions[name]

    def mc(self, offset: int) -> int:
        return ((self.regs.MMHUB.regMMMC_VM_FB_LOCATION_BASE.read() & 0xFFFFFF) << 24) + offset

    def firmware(self, file: str):
        raise NotImplementedError(file)

    def log(self, level: int, msg: str) -> None:
        self.logs.append((level, msg))

    def wait(self, done, timeout_ms: float, what: str) -> None:
        end = time.monotonic() + timeout_ms / 1000
        while not done():
            if time.monotonic() > end:
                raise AMTimeout(f"timed out after {timeout_ms:g} ms waiting for {what}")


class VRAMView:
    """AMContext.vram over the bench's arena."""

    def __init__(self, bench: Bench):
        self.bench, self.size = bench, bench.gpu.vram.size

    def read(self, offset: int, n: int) -> bytes:
        return self.bench.gpu.vram.read(offset, n)

    def write(self, offset: int, data: bytes) -> None:
        self.bench.gpu.vram.write(offset, data)
