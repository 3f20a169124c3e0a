"""IP discovery, driver side: find the binary at the top of VRAM, parse it, and turn it into the register
layout and IP versions the rest of the AM driver uses.

The binary format (one decoder, one encoder) is amdq.hw.discovery, shared with the simulated GPU that
places the same binary in its VRAM. The sequence follows Linux amdgpu_discovery.c: wait for IFWI init
(MP0_SMN_C2PMSG_33 bit 31, up to ~1 s), read RCC_CONFIG_MEMSIZE (MiB), read TMR_SIZE bytes at
VRAM size - TMR_OFFSET, check signatures and checksums. Both registers are read at fixed absolute
addresses: no base address is known before the table is read.

    d = discovery.read(bar.read32, vram_read)          # Discovery: d.versions["GC"], d.register_bases("GC")
    regs = Registers(discovery.layout(d), bar)         # register maps at the bases the GPU reported
"""
from __future__ import annotations

import time
from typing import Callable

from ..errors import DiscoveryError, UnsupportedTarget
from ..hw import discovery as D
from ..hw.discovery import Discovery, decode, encode
from ..hw.regmap import Layout
from ..hw.targets import TARGETS, Target

__all__ = ["Discovery", "decode", "encode", "wait_ifwi", "vram_size", "read", "layout", "target_of"]

Read32 = Callable[[int], int]
ReadVram = Callable[[int, int], bytes]           # (byte offset, size) -> bytes


def wait_ifwi(read32: Read32, timeout_ms: int = D.IFWI_POLL_MS, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Poll MP0_SMN_C2PMSG_33 until IFWI init reports done (bit 31); False if it did not within timeout_ms
    (the driver then reads the table anyway, as amdgpu does)."""
    for _ in range(max(1, timeout_ms)):
        if read32(D.REG_MP0_SMN_C2PMSG_33) & D.IFWI_INIT_DONE:
            return True
        sleep(0.001)
    return False


def vram_size(read32: Read32) -> int:
    """VRAM bytes from RCC_CONFIG_MEMSIZE (MiB)."""
    mib = read32(D.REG_RCC_CONFIG_MEMSIZE)
    if mib == 0xFFFFFFFF:
        raise DiscoveryError("RCC_CONFIG_MEMSIZE reads 0xffffffff: the GPU does not answer on its register BAR")
    if mib == 0:
        raise DiscoveryError("RCC_CONFIG_MEMSIZE is 0: the discovery binary is in system memory (ACPI), "
                             "which amdq does not read")
    return mib << 20


def read(read32: Read32, read_vram: ReadVram, timeout_ms: int = D.IFWI_POLL_MS,
         sleep: Callable[[float], None] = time.sleep) -> Discovery:
    """Locate, read and parse the IP discovery binary of a GPU."""
    ready = wait_ifwi(read32, timeout_ms, sleep)
    off = D.vram_offset(vram_size(read32))
    blob = read_vram(off, D.TMR_SIZE)
    try:
        return decode(blob)
    except DiscoveryError as e:
        if not ready:
            raise DiscoveryError(f"{e} (IFWI init had not finished: MP0_SMN_C2PMSG_33 bit 31 clear after "
                                 f"{timeout_ms} ms)") from None
        raise


def layout(d: Discovery) -> Layout:
    """The register layout of the discovered IP blocks (the blocks amdq has register tables for get maps)."""
    return Layout(d.blocks())


def target_of(d: Discovery) -> Target:
    """The supported target whose GC version the table reports."""
    gc = d.version("GC")
    for t in TARGETS.values():
        if t.ip["GC"] == gc:
            return t
    raise UnsupportedTarget(f"the GPU reports GC {'.'.join(map(str, gc))}, which is no supported target: "
                            + ", ".join(f"{t.arch} (GC {'.'.join(map(str, t.ip['GC']))})" for t in TARGETS.values()))
