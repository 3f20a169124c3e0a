"""GPU page-table entries: the one encoder and decoder of PTE/PDE words, over the generated tables in
amdq.hw.vm_tables (bit fields per generation, the 4-level 48-bit layout, amdgpu_vm.h constants).
Everything in vm_tables is available from here too."""
from __future__ import annotations

from .vm_tables import *  # noqa: F401,F403
from .vm_tables import ENTRIES_PER_TABLE, LEVEL_SHIFT, LEVELS, PAGE_SHIFT, PAGE_SIZE, PTE, VA_BITS


def generation(gfx: int) -> int:
    """Key of PTE for a GFX major version: 9, 10 (gfx10/11) or 12."""
    return 9 if gfx < 10 else 10 if gfx < 12 else 12


def pte(gen: int, addr: int, *, valid: bool = True, system: bool = False, snooped: bool = False, tmz: bool = False,
        readable: bool = True, writeable: bool = True, executable: bool = False, mtype: int = 0, frag: int = 0,
        prt: bool = False, pde: bool = False) -> int:
    """A page-table entry mapping the 4 KiB-aligned `addr` (physical or system address). `pde=True` sets the
    PDE_PTE bit (an entry of a PDB0 that maps a huge page directly)."""
    if addr & (PAGE_SIZE - 1) or not 0 <= addr < 1 << 48:
        raise ValueError(f"page address {addr:#x} is not 4 KiB-aligned below 2**48")
    b = PTE[generation(gen) if gen not in PTE else gen]
    return b.encode(ADDR=addr >> PAGE_SHIFT, VALID=valid, SYSTEM=system, SNOOPED=snooped, TMZ=tmz, READABLE=readable,
                    WRITEABLE=writeable, EXECUTABLE=executable, MTYPE=mtype, FRAG=frag, PRT=prt, PDE_PTE=pde)


def pde(gen: int, addr: int, *, valid: bool = True, system: bool = False, bfs: int = 0) -> int:
    """A page-directory entry pointing at the next-level table at `addr` (4 KiB-aligned)."""
    if addr & (PAGE_SIZE - 1) or not 0 <= addr < 1 << 48:
        raise ValueError(f"table address {addr:#x} is not 4 KiB-aligned below 2**48")
    b = PTE[generation(gen) if gen not in PTE else gen]
    return b.encode(ADDR=addr >> PAGE_SHIFT, VALID=valid, SYSTEM=system, BFS=bfs)


def decode(gen: int, entry: int) -> dict[str, int]:
    """Fields of a PTE/PDE word, plus 'address' (ADDR << 12)."""
    f = PTE[generation(gen) if gen not in PTE else gen].decode(entry)
    f["address"] = f["ADDR"] << PAGE_SHIFT
    return f


def indices(va: int) -> tuple[int, int, int, int]:
    """Table indices (PDB2, PDB1, PDB0, PTB) of a 48-bit GPU virtual address."""
    if not 0 <= va < 1 << VA_BITS:
        raise ValueError(f"GPU virtual address {va:#x} is outside 48 bits")
    return tuple((va >> LEVEL_SHIFT[lv]) & (ENTRIES_PER_TABLE - 1) for lv in LEVELS)  # type: ignore[return-value]
