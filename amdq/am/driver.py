"""The AM driver core: read IP discovery, bind the registers, pick the firmware, and boot the GPU with the
IP blocks of its generation; the boot state machine that decides between a full and a partial boot.

The state a GPU keeps between two processes (as amdgpu never uses them, they are this driver's):
SCRATCH_REG7 = DRIVER_VERSION once this driver booted the GPU, SCRATCH_REG6 = SESSION_CLEAN once its last
session ended (fini), 0 while a session runs, SCRATCH_REG5 = the TMR size of that boot.

    uninitialised (the PSP's sOS is not running)        -> full boot
    initialised by amdgpu / another driver (sOS runs)   -> mode1 reset (SMU), full boot
    initialised by this driver, last session clean      -> partial boot: IH ring, PSP TMR re-init, GFX (MEC reset), SDMA
    initialised by this driver, session not clean       -> full boot (naming why), after a mode1 reset if the
                                                           sOS runs (a boot that failed is such a session too)
    a partial boot that fails (the MEC stays halted ...) -> mode1 reset, full boot ("the partial boot failed (...)")
    a session whose GPU was lost (an engine reset that did not take, am/recovery.py): fini leaves it unclean
                                                        -> full boot
    AM_RESET=1                                          -> full boot (mode1 reset first if the sOS runs)

Boot memory (TMR, rings, the dummy page ...) lives in a reserved region just below the discovery table;
its directory (name -> placement) is kept at the region's start in VRAM, so a partial boot finds what the
full boot placed (VRAM survives the process as the scratch registers do).
"""
from __future__ import annotations

import importlib
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import AMBootError, AMTimeout, DeviceError, DeviceLost, FirmwareError
from ..hw import discovery as D
from ..hw.regmap import Access, AccessPrinter, Registers, debug_level
from . import discovery
from .firmware import Firmware, firmware_for, load_firmware
from .ip import IPBlock, Region
from .soc import MMIO, VRAMAccess, check_bus, sos_alive

DRIVER_VERSION = 0x414D0002            # "AM" 0x0002: the boot protocol of this driver (2: VM0 multi-level)
SESSION_CLEAN = 0x1
BOOT_BYTES = 64 << 20                  # the reserved boot region below the discovery table
DIR_MAGIC = b"AMDQBOOT"
DIR_BYTES = 4096
DIR_ENTRY = struct.Struct("<32sQQ")    # name, VRAM offset, size
DIR_HEAD = struct.Struct("<8sII")      # magic, driver version, entries

# IP blocks in boot order, by module; a module defines one IPBlock subclass.
BLOCK_MODULES = {"soc": "amdq.am.soc", "gmc": "amdq.am.gmc", "ih": "amdq.am.ih", "psp": "amdq.am.psp",
                 "smu": "amdq.am.smu", "gfx": "amdq.am.gfx", "sdma": "amdq.am.sdma"}
FULL_ORDER = ("soc", "gmc", "ih", "psp", "smu", "gfx", "sdma")
PARTIAL_ORDER = ("gmc", "ih", "psp", "gfx", "sdma")
_registered: dict[str, type] = {}


def register_block(name: str, cls: type | None) -> None:
    """Use `cls` for IP block `name` instead of its module (None: back to the module); for tests that stand
    in for a block before its module exists."""
    if cls is None:
        _registered.pop(name, None)
    else:
        _registered[name] = cls


def block_class(name: str) -> type | None:
    """The IPBlock class of `name`, or None when this build has no such module."""
    if name in _registered:
        return _registered[name]
    modname = BLOCK_MODULES[name]
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name != modname:
            raise
        return None
    classes = [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, IPBlock)
               and c is not IPBlock and c.__module__ == modname]
    if len(classes) != 1:
        raise AMBootError(f"{modname}: expected one IPBlock class, found {[c.__name__ for c in classes]}")
    return classes[0]


class BootMemory:
    """The reserved boot region and its directory in VRAM (see the module doc)."""

    def __init__(self, am: "Context", vram_size: int):
        self.am = am
        self.end = D.vram_offset(vram_size)
        self.start = self.end - BOOT_BYTES
        self.entries: dict[str, tuple[int, int]] = {}
        self.top = self.start + DIR_BYTES
        self.dirty = False

    def load(self) -> str | None:
        """Read the directory a previous boot left; None if valid, else why not."""
        raw = self.am.vram.read(self.start, DIR_BYTES)
        magic, ver, n = DIR_HEAD.unpack_from(raw)
        if magic != DIR_MAGIC:
            return "the boot memory directory in VRAM is missing"
        if ver != DRIVER_VERSION or DIR_HEAD.size + n * DIR_ENTRY.size > DIR_BYTES:
            return f"the boot memory directory is of driver version {ver:#x}"
        for i in range(n):
            name, off, size = DIR_ENTRY.unpack_from(raw, DIR_HEAD.size + i * DIR_ENTRY.size)
            if not self.start + DIR_BYTES <= off <= off + size <= self.end:
                return f"the boot memory directory places {name.rstrip(bytes(1)).decode()!r} outside the region"
            self.entries[name.rstrip(bytes(1)).decode()] = (off, size)
            self.top = max(self.top, off + size)
        return None

    def reserve(self, name: str, size: int, align: int = 4096) -> Region:
        if len(name.encode()) > 32:
            raise AMBootError(f"boot memory name {name!r} is longer than 32 bytes")
        have = self.entries.get(name)
        if have is not None and have[1] >= size and have[0] % align == 0:
            return Region(name, have[0], size, self.am.mc(have[0]))
        off = (self.top + align - 1) // align * align
        if off + size > self.end:
            raise AMBootError(f"boot memory: {name} ({size:#x} bytes) does not fit the {BOOT_BYTES >> 20} MiB region "
                              f"({self.end - off:#x} bytes left)")
        if (DIR_HEAD.size + (len(self.entries) + 1) * DIR_ENTRY.size) > DIR_BYTES:
            raise AMBootError("boot memory: the directory is full")
        self.entries[name] = (off, size)
        self.top = off + size
        self.dirty = True
        return Region(name, off, size, self.am.mc(off))

    def commit(self) -> None:
        if not self.dirty:
            return
        raw = bytearray(DIR_BYTES)
        DIR_HEAD.pack_into(raw, 0, DIR_MAGIC, DRIVER_VERSION, len(self.entries))
        for i, (n, (off, size)) in enumerate(self.entries.items()):
            DIR_ENTRY.pack_into(raw, DIR_HEAD.size + i * DIR_ENTRY.size, n.encode(), off, size)
        self.am.vram.write(self.start, bytes(raw))
        self.dirty = False

    def clear(self) -> None:
        self.entries.clear()
        self.top = self.start + DIR_BYTES
        self.dirty = True


class Context:
    """The AMContext of am/ip.py, bound to one device (see there)."""

    def __init__(self, drv: "AMDriver"):
        self.drv = drv
        self.target = drv.target
        self.regs = drv.regs
        self.discovery = drv.discovery
        self.vram = drv.vram
        self.debug = drv.debug
        self.fb_base = 0
        self.boot = BootMemory(self, drv.vram.size)
        self.boot_kind = "full"                         # "full" or "partial": what this boot does
        self.tmr_size: int | None = None                # partial: SCRATCH_REG5; full: set by the PSP block

    def firmware(self, file: str) -> Firmware:
        fw = self.drv.firmware.get(file)
        if fw is None:
            fw = self.drv.firmware[file] = load_firmware(file)
        return fw

    def mc(self, vram_offset: int) -> int:
        return self.fb_base + vram_offset

    def log(self, level: int, msg: str) -> None:
        if self.debug >= level:
            print(f"am: {msg}", file=sys.stderr)

    def wait(self, done: Callable[[], bool], timeout_ms: float, what: str) -> None:
        if done():
            return
        end = time.monotonic() + timeout_ms / 1000
        delay = 1e-5
        while True:
            time.sleep(delay)
            if done():
                return
            if time.monotonic() >= end:
                raise AMTimeout(f"timed out after {timeout_ms:g} ms waiting for {what}", what=what)
            delay = min(delay * 2, 1e-3)

    def block(self, name: str) -> IPBlock | None:
        """Another IP block of this boot (None if not in this build)."""
        return self.drv.blocks.get(name)


@dataclass
class BlockStats:
    reads: int = 0
    writes: int = 0
    seconds: float = 0.0


@dataclass
class BootReport:
    """What a boot did: its kind and why, the mode1 reset, per-block register accesses and time."""
    kind: str
    reason: str
    mode1_reset: bool
    seconds: float
    blocks: dict[str, BlockStats] = field(default_factory=dict)
    reset_via: str | None = None            # "smu" or "psp": who took the mode1 reset

    @property
    def reads(self) -> int:
        return sum(b.reads for b in self.blocks.values())

    @property
    def writes(self) -> int:
        return sum(b.writes for b in self.blocks.values())

    def as_dict(self) -> dict:
        return {"boot": self.kind, "boot_reason": f"{self.kind}: {self.reason}", "mode1_reset": self.mode1_reset,
                "mode1_reset_via": self.reset_via,
                "seconds": self.seconds, "reads": self.reads, "writes": self.writes,
                "blocks": {n: vars(b) for n, b in self.blocks.items()}}


def _env_reset() -> bool:
    return os.environ.get("AM_RESET", "0").strip() not in ("", "0")


class AMDriver:
    """Boots one GPU through its BARs: `mmio` (BAR5, a dword register backend), `bar0` (the CPU-visible VRAM,
    a buffer), `mmio_size` (BAR5 bytes). `standin`: firmware stand-ins policy of firmware_for (None on the
    simulated device: real files where present; False on hardware)."""

    def __init__(self, mmio: Any, bar0: Any, mmio_size: int, standin: bool | None = False):
        self.debug = debug_level()
        self.standin = standin
        self.mmio = MMIO(mmio, mmio_size)
        self._counting = "discovery"
        self.stats: dict[str, BlockStats] = {}
        self.blocks: dict[str, IPBlock] = {}
        self.report: BootReport | None = None
        self.reset_via: str | None = None
        self.booted = False
        self.lost: DeviceLost | None = None    # set when a recovery did not bring an engine back (am/recovery.py)
        self.decision: tuple[str, str, bool] | None = None     # what `decide` said at the last boot
        self._recovery = None
        printer = AccessPrinter() if self.debug >= 4 else None

        def trace(a: Access) -> None:
            s = self.stats.get(self._counting)
            if s is None:
                s = self.stats[self._counting] = BlockStats()
            if a.op == "R":
                s.reads += 1
            else:
                s.writes += 1
            if printer is not None:
                printer(a)
        self._trace = trace
        raw = _Traced(self.mmio, trace)                 # pre-discovery reads are counted and printed too
        self.vram = VRAMAccess(bar0, raw)
        t0 = time.perf_counter()
        check_bus(raw.read32(D.REG_RCC_CONFIG_MEMSIZE), "RCC_CONFIG_MEMSIZE")
        self.discovery = discovery.read(raw.read32, self.vram.read)
        self.vram.size = discovery.vram_size(raw.read32)
        self.target = discovery.target_of(self.discovery)
        self.regs = Registers(discovery.layout(self.discovery), self.mmio, tracer=trace)
        self.mmio.use_indirect(self.regs)
        self.vram.mmio = self.regs                      # the MM window through the traced maps
        self.stats["discovery"].seconds = time.perf_counter() - t0
        self.firmware: dict[str, Firmware] = {}
        self.am = Context(self)

    # -- the boot state machine ---------------------------------------------------------------------------
    def _scratch(self, n: int):
        return self.regs.GC[f"regSCRATCH_REG{n}"]

    def decide(self) -> tuple[str, str, bool]:
        """(kind, reason, mode1 reset first) from the GPU's state."""
        version, clean = self._scratch(7).read(), self._scratch(6).read()
        alive = sos_alive(self.regs)
        if _env_reset():
            return "full", "AM_RESET=1", alive
        if version == DRIVER_VERSION:
            if clean != SESSION_CLEAN:       # a mode1 reset only if the sOS runs: else the PSP is in its bootloader
                return "full", f"the previous session did not end cleanly (SCRATCH_REG6={clean:#x})", alive
            if not alive:
                return "full", "SCRATCH_REG7 names this driver but the PSP's sOS is not running", False
            why = self.am.boot.load()
            if why is not None:
                return "full", why, True
            return "partial", "initialised by this driver", False
        if alive:
            who = "amdgpu" if version == 0 or (version >> 16) != DRIVER_VERSION >> 16 else \
                f"another version of this driver ({version:#x})"
            return "full", f"initialised by {who}", True
        return "full", "uninitialised" + (f" (SCRATCH_REG7={version:#x} is not this driver's)" if version else ""), False

    def _phase(self, name: str, fn: Callable[[], Any]) -> Any:
        prev, self._counting = self._counting, name
        s = self.stats.setdefault(name, BlockStats())
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            s.seconds += time.perf_counter() - t0
            self._counting = prev

    def boot(self) -> BootReport:
        """Boot the GPU: full or partial (see the module doc)."""
        t0 = time.perf_counter()
        self.am.fb_base = (self.regs.MMHUB.regMMMC_VM_FB_LOCATION_BASE.read_fields()["FB_BASE"]) << 24
        missing = [n for n in FULL_ORDER if block_class(n) is None]
        if missing:
            raise AMBootError(f"this build cannot boot a GPU over PCI yet: the IP blocks {', '.join(missing)} "
                              f"(amdq/am/{{{','.join(missing)}}}.py) are not in it")
        self.firmware = firmware_for(self.target.arch, standin=self.standin)
        kind, reason, reset = self.decision = self._phase("boot", self.decide)
        try:
            self._run(kind, reason, reset)
        except (AMTimeout, DeviceError) as e:
            if kind != "partial" or isinstance(e, DeviceLost):
                raise
            # what the last session left does not resume (the MEC stays halted, the sOS lost the TMR ...): start
            # over, from a mode1 reset, as for a session that did not end cleanly
            kind, reason, reset = "full", f"the partial boot failed ({e})", True
            self.am.log(1, f"boot: {reason}; mode1 reset and full boot")
            self._run(kind, reason, reset)

        def mark() -> None:                 # (SCRATCH_REG7 names this driver since the session began)
            self.am.boot.commit()
            if kind == "full":              # a partial boot read SCRATCH_REG5 and kept the TMR it names
                self._scratch(5).write((self.am.tmr_size or 0) & 0xFFFFFFFF)
        self._phase("boot", mark)
        self.booted = True
        self.report = BootReport(kind, reason, reset, time.perf_counter() - t0, dict(self.stats), self.reset_via)
        return self.report

    def _run(self, kind: str, reason: str, reset: bool) -> None:
        """One boot of `kind`: every block's software state, the mode1 reset if asked, the hardware steps."""
        self.am.log(2, f"boot: {kind} ({reason}){'; mode1 reset first' if reset else ''}")
        self.am.boot_kind = kind
        if kind == "partial":
            self.am.tmr_size = self._scratch(5).read()
        else:
            self.am.tmr_size = None
        for n in FULL_ORDER:
            self.blocks[n] = block_class(n)(self.am)
        if reset:                           # before any boot memory is reserved: the reset clears the region
            self._phase("smu", self.mode1_reset)
        for n in FULL_ORDER:
            self._phase(n, self.blocks[n].init_sw)
        def session() -> None:              # a session of this driver runs, not clean until fini: a boot that
            self._scratch(6).write(0)       # fails from here on is this driver's unclean session, not amdgpu's
            self._scratch(7).write(DRIVER_VERSION)
        self._phase("boot", session)
        order = PARTIAL_ORDER if kind == "partial" else FULL_ORDER
        for n in order:
            blk = self.blocks[n]
            step = getattr(blk, "resume_hw", blk.init_hw) if kind == "partial" else blk.init_hw
            self.am.log(2, f"{n}: {'resume' if kind == 'partial' else 'init'}")
            self._phase(n, step)

    def mode1_reset(self) -> None:
        """Mode1 reset through the SMU, or through the PSP's sOS when the PMFW does not answer (a PMFW the PSP
        refused or never loaded, one that hung: amdgpu_device_mode1_reset's fallback); then wait for the GPU to
        be back (bus, IFWI) with the sOS gone."""
        smu = self.blocks["smu"]
        why = smu.unresponsive()
        if why is None:
            self.am.log(2, "mode1 reset through the SMU")
            smu.mode1_reset()
            self.reset_via = "smu"
        else:
            self.am.log(1, f"mode1 reset through the PSP: the PMFW does not take messages ({why})")
            self.blocks["psp"].mode1_reset()
            self.reset_via = "psp"
        self.am.wait(lambda: self.mmio.read32(D.REG_RCC_CONFIG_MEMSIZE) not in (0, 0xFFFFFFFF), 1000,
                     "the GPU back on the bus after mode1 reset (RCC_CONFIG_MEMSIZE)")
        self.am.wait(lambda: self.mmio.read32(D.REG_MP0_SMN_C2PMSG_33) & D.IFWI_INIT_DONE, 2000,
                     "IFWI init after mode1 reset (MP0_SMN_C2PMSG_33 bit 31)")
        self.am.wait(lambda: not sos_alive(self.regs), 1000, "the PSP's sOS to stop after mode1 reset (C2PMSG_81)")
        smu.fresh = True                    # a new PMFW: its first answer is not one to wait for
        self.am.boot.clear()

    @property
    def recovery(self):
        """The engine resets of this GPU (am/recovery.py)."""
        if self._recovery is None:
            from .recovery import Recovery
            self._recovery = Recovery(self)
        return self._recovery

    def fini(self) -> None:
        """Leave the GPU quiet, blocks in reverse order, and mark the session clean (SCRATCH_REG6). A lost GPU (a
        reset that did not take) is left as it is, its session unclean: the next boot is a full one."""
        if not self.booted:
            return
        if self.lost is not None:
            self.am.log(1, f"fini: the GPU was lost ({self.lost}); the session stays unclean")
            self.booted = False
            return
        for n in reversed(FULL_ORDER):
            self._phase(n, self.blocks[n].fini_hw)
        self._phase("boot", lambda: self._scratch(6).write(SESSION_CLEAN))
        self.booted = False

    # -- what the device reports ----------------------------------------------------------------------------
    def clock_report(self) -> dict:
        """Clocks, DPM levels and power limit from the SMU (through its mailbox; see SMU.clock_report)."""
        if not self.booted:
            raise AMBootError("the clocks of a GPU this driver has not booted (or has finished with) are not known")
        return self._phase("info", self.blocks["smu"].clock_report)   # not counted in the boot's report

    def firmware_list(self) -> list[dict]:
        return [{"file": f.file, "sha256": f.sha256, "version": f.ucode_version, "standin": f.standin}
                for f in self.firmware.values()]


class _Traced:
    """A raw backend whose accesses reach the tracer (before the register maps exist)."""

    def __init__(self, backend: Any, trace: Callable[[Access], None]):
        self.backend, self.trace = backend, trace

    def read32(self, addr: int) -> int:
        v = self.backend.read32(addr)
        self.trace(Access("R", addr, v, None))
        return v

    def write32(self, addr: int, value: int) -> None:
        self.trace(Access("W", addr, value, None))
        self.backend.write32(addr, value)


__all__ = ["AMDriver", "BootReport", "DRIVER_VERSION", "SESSION_CLEAN", "register_block", "FirmwareError"]
