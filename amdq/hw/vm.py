"""GPU page-table entries: the one encoder and decoder of PTE/PDE words, over the generated tables in
amdq.hw.vm_tables (bit fields per generation, the 4-level 48-bit layout, amdgpu_vm.h constants, MTYPE
values). Everything in vm_tables is available from here too.

How a generation's page tables are shaped (`CONTEXT_SHAPE`, `TRANSLATE_FURTHER`) is not in the facts pack;
from Linux amdgpu:
  * amdgpu_vm.c amdgpu_vm_adjust_size(adev, 256 * 1024, 9, 3, 48), called by gmc_v9_0.c, gmc_v11_0.c and
    gmc_v12_0.c sw_init: a 256 TiB (48-bit) VM, 3 levels of directories above the PTB (root PDB2), a 9-bit
    block size, fragment size 9 (2 MiB);
  * gmc_v9_0.c sw_init: translate_further = num_level > 1 on gfx9 (none of gmc_v10/11/12 sets it);
  * gfxhub_v1_2.c setup_vmid_config: VM_CONTEXTn_CNTL.PAGE_TABLE_DEPTH = num_level - 1 and
    PAGE_TABLE_BLOCK_SIZE = block_size when translate_further, else num_level and block_size - 9, which
    is what gfxhub_v3_0.c / gfxhub_v12_0.c program (depth num_level = 3);
  * gmc_v9_0.c get_vm_pde with translate_further: a PDB1 entry pointing at a PDB0 carries BFS 9 (block
    fragment size: each entry of that PDB0 covers 2**9 pages), a PDB0 entry pointing at a PTB carries TF
    (translate further), and a PDB0 entry used as a 2 MiB page drops PDE_PTE (it is a PTE of that block);
  * gmc_v12_0.c (PTE format "63 P") and amdgpu's gart_pte_flags / KFD SVM flags on gfx12: every leaf PTE
    carries AMDGPU_PTE_IS_PTE (bit 63, the bit a PDB0 entry used as a page sets as AMDGPU_PDE_PTE_GFX12).
"""
from __future__ import annotations

from .vm_tables import *  # noqa: F401,F403
from .vm_tables import ENTRIES_PER_TABLE, LEVEL_SHIFT, LEVELS, MTYPE, PAGE_SHIFT, PAGE_SIZE, PTE, VA_BITS

# generation -> translate further (gfx9's BFS/TF page-table form); see the module doc
TRANSLATE_FURTHER = {9: True, 10: False, 12: False}
# generation -> (VM_CONTEXTn_CNTL.PAGE_TABLE_DEPTH, PAGE_TABLE_BLOCK_SIZE) of a 4-level, 48-bit VM
CONTEXT_SHAPE = {9: (2, 9), 10: (3, 0), 12: (3, 0)}
TF_BFS = 9                         # the BFS gfx9 puts in PDB1 entries when translating further


def generation(gfx: int) -> int:
    """Key of PTE for a GFX major version: 9, 10 (gfx10/11) or 12."""
    return 9 if gfx < 10 else 10 if gfx < 12 else 12


def _bits(gen: int):
    return PTE[generation(gen) if gen not in PTE else gen]


def pte(gen: int, addr: int, *, valid: bool = True, system: bool = False, snooped: bool = False, tmz: bool = False,
        readable: bool = True, writeable: bool = True, executable: bool = False, mtype: int = 0, frag: int = 0,
        prt: bool = False, pde: bool = False, is_pte: bool = False) -> int:
    """A page-table entry mapping the 4 KiB-aligned `addr` (physical or system address). `pde=True` sets the
    PDE_PTE bit (an entry of a PDB0 that maps a huge page directly); `is_pte=True` the gfx12 IS_PTE bit of a
    leaf PTE (an error on generations without it)."""
    if addr & (PAGE_SIZE - 1) or not 0 <= addr < 1 << 48:
        raise ValueError(f"page address {addr:#x} is not 4 KiB-aligned below 2**48")
    b = _bits(gen)
    kw = {"IS_PTE": 1} if is_pte else {}
    return b.encode(ADDR=addr >> PAGE_SHIFT, VALID=valid, SYSTEM=system, SNOOPED=snooped, TMZ=tmz, READABLE=readable,
                    WRITEABLE=writeable, EXECUTABLE=executable, MTYPE=mtype, FRAG=frag, PRT=prt, PDE_PTE=pde, **kw)


def pde(gen: int, addr: int, *, valid: bool = True, system: bool = False, bfs: int = 0, tf: bool = False) -> int:
    """A page-directory entry pointing at the next-level table at `addr` (4 KiB-aligned). `tf=True` sets gfx9's
    translate-further bit (a PDB0 entry pointing at a PTB; an error on generations without it)."""
    if addr & (PAGE_SIZE - 1) or not 0 <= addr < 1 << 48:
        raise ValueError(f"table address {addr:#x} is not 4 KiB-aligned below 2**48")
    b = _bits(gen)
    kw = {"TF": 1} if tf else {}
    return b.encode(ADDR=addr >> PAGE_SHIFT, VALID=valid, SYSTEM=system, BFS=bfs, **kw)


def decode(gen: int, entry: int) -> dict[str, int]:
    """Fields of a PTE/PDE word, plus 'address' (ADDR << 12)."""
    f = _bits(gen).decode(entry)
    f["address"] = f["ADDR"] << PAGE_SHIFT
    return f


def mtype(gen: int, name: str | int) -> int:
    """The MTYPE field value of a memory type name ('NC', 'UC', ...) on a generation (an int passes through
    if it fits the field)."""
    g = generation(gen) if gen not in PTE else gen
    if isinstance(name, int):
        width = PTE[g]["MTYPE"].hi - PTE[g]["MTYPE"].lo + 1
        if not 0 <= name < 1 << width:
            raise ValueError(f"MTYPE {name} does not fit the {width}-bit field of generation {g}")
        return name
    try:
        return MTYPE[g][name.upper()]
    except KeyError:
        raise ValueError(f"no MTYPE {name!r} on generation {g} (known: {', '.join(MTYPE[g])})") from None


def indices(va: int) -> tuple[int, int, int, int]:
    """Table indices (PDB2, PDB1, PDB0, PTB) of a 48-bit GPU virtual address."""
    if not 0 <= va < 1 << VA_BITS:
        raise ValueError(f"GPU virtual address {va:#x} is outside 48 bits")
    return tuple((va >> LEVEL_SHIFT[lv]) & (ENTRIES_PER_TABLE - 1) for lv in LEVELS)  # type: ignore[return-value]
