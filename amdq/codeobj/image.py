"""ProgramImage: a code object laid out as the bytes the GPU executes, relocatable to any base."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..errors import CodeObjectError, KernelLDSTooLarge, TargetMismatch
from ..hw.targets import Target, get_target
from . import reloc
from .targetid import TargetId, device_target, elf_target, incompatibility, parse_isa_name, representative
from .descriptor import KernelDescriptor
from .elf import SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE, SHT_NOBITS, SHT_RELA, ElfImage
from .metadata import KernelMeta, Metadata, find_metadata

MAX_IMAGE = 256 << 20          # a code object larger than this is refused as malformed
IMAGE_ALIGN = 4096             # GPU base alignment of an image


@dataclass
class KernelInfo:
    name: str
    meta: KernelMeta
    descriptor: KernelDescriptor
    kd_offset: int             # image offset of the 64-byte descriptor
    entry_offset: int          # image offset of the first instruction
    code_size: int             # size of the entry symbol (0 if unknown)


class ProgramImage:
    """The loadable bytes of one code object, its relocations, kernels and metadata."""

    def __init__(self, data: bytes, arch: str | None = None, placement: dict[str, int] | None = None):
        self.elf = elf = ElfImage(data)
        self.sha256 = hashlib.sha256(elf.data).hexdigest()
        # target_id: what the ELF header says (processor, possibly generic, and xnack/sramecc settings);
        # target: the supported Target its descriptors are read with (a generic target's first member)
        self.target_id: TargetId
        self.target_id, self.generic_version = elf_target(elf.flags, elf.cov)
        self.target: Target = representative(self.target_id)
        if arch is not None:
            self.check_runs_on(arch)
        self.cov = elf.cov
        self.kind = elf.type
        self.metadata: Metadata = find_metadata(elf.notes)
        tgt = self.metadata.target
        if tgt:
            try:
                meta_t = parse_isa_name(tgt).target
            except CodeObjectError as e:
                raise CodeObjectError(f"metadata amdhsa.target {tgt!r} is not an ISA name: {e}") from None
            features_differ = elf.cov >= 4 and meta_t.features != self.target_id.features
            if meta_t.processor != self.target_id.processor or features_differ:
                raise CodeObjectError(f"metadata target {tgt!r} disagrees with the ELF header ({self.target_id})")
        self.section_offsets: dict[int, int] = {}
        self.link_base = 0
        if self.kind == "ET_REL":
            self._layout_relocatable(placement)
        elif placement is not None:
            raise CodeObjectError("placement applies to relocatable objects only")
        else:
            self._layout_shared()
        self._collect_symbols()
        self._collect_fixups()
        self.kernels: dict[str, KernelInfo] = {}
        zero = self.at(0)
        for km in self.metadata.kernels:
            self.kernels[km.name] = self._kernel(km, zero)

    # -- layout ---------------------------------------------------------------------------------
    def _layout_relocatable(self, placement: dict[str, int] | None = None) -> None:
        """Place SHF_ALLOC sections: read-only data, then code, then writable data."""
        secs = [s for s in self.elf.sections if s.flags & SHF_ALLOC and s.index]
        group = lambda s: 1 if s.flags & SHF_EXECINSTR else 2 if s.flags & SHF_WRITE else 0  # noqa: E731
        off = 0
        for s in sorted(secs, key=lambda s: (group(s), s.index)):
            if placement is not None:
                if s.name not in placement:
                    raise CodeObjectError(f"no placement given for section {s.name}")
                off = placement[s.name]
            off = (off + s.align - 1) & -s.align
            if off + s.size > MAX_IMAGE or off < 0:
                raise CodeObjectError(f"section {s.name} ({s.size} bytes) makes the image larger than {MAX_IMAGE >> 20} MiB")
            self.section_offsets[s.index] = off
            off += s.size
        self.size = max([self.section_offsets[s.index] + s.size for s in secs], default=0)
        self._image = bytearray(self.size)
        for s in secs:
            if s.type != SHT_NOBITS:
                o = self.section_offsets[s.index]
                self._image[o:o + s.size] = s.data

    def _layout_shared(self) -> None:
        """Copy PT_LOAD segments; an image linked at a non-zero base is rebased to offset 0."""
        segs = self.elf.segments
        if not segs:
            raise CodeObjectError("shared code object has no PT_LOAD segment")
        self.link_base = lb = min(s.vaddr for s in segs) & ~(IMAGE_ALIGN - 1)
        self.size = max(s.vaddr + s.memsz for s in segs) - lb
        if self.size > MAX_IMAGE:
            raise CodeObjectError(f"PT_LOAD segments span {self.size} bytes, more than {MAX_IMAGE >> 20} MiB")
        self._image = bytearray(self.size)
        for s in segs:
            self._image[s.vaddr - lb:s.vaddr - lb + s.filesz] = self.elf.data[s.offset:s.offset + s.filesz]
        for s in self.elf.sections:
            if s.flags & SHF_ALLOC and s.index and s.addr >= lb:
                self.section_offsets[s.index] = s.addr - lb

    # -- symbols and relocations ----------------------------------------------------------------
    def _sym_offset(self, sym) -> tuple[int, bool]:
        """(image offset, is absolute) of a defined symbol."""
        if sym.shndx == "SHN_ABS":
            return sym.value, True
        if sym.shndx == "SHN_UNDEF":
            if sym.bind == "STB_WEAK":
                return 0, True
            raise CodeObjectError(f"undefined symbol {sym.name!r}: amdq loads self-contained code objects only")
        if not isinstance(sym.shndx, int):
            raise CodeObjectError(f"symbol {sym.name!r} has unsupported section index {sym.shndx}")
        if self.kind == "ET_DYN":
            return sym.value - self.link_base, False
        if sym.shndx not in self.section_offsets:
            raise CodeObjectError(f"symbol {sym.name!r} lies in a section that is not loaded")
        return self.section_offsets[sym.shndx] + sym.value, False

    def _collect_symbols(self) -> None:
        self.symbols: dict[str, tuple[int, int, str]] = {}
        for s in self.elf.symbols or self.elf.dynsymbols:
            if s.name and s.shndx not in ("SHN_UNDEF", "SHN_ABS") and s.type in ("STT_FUNC", "STT_OBJECT"):
                off, _ = self._sym_offset(s)
                self.symbols[s.name] = (off, s.size, s.type)

    def _collect_fixups(self) -> None:
        self.fixups: list[reloc.Fixup] = []
        for r in self.elf.relocs:
            rs = self.elf.by_name[r.section]
            if self.kind == "ET_DYN":
                if not rs.flags & SHF_ALLOC:      # static relocations kept by --emit-relocs: already applied
                    continue
                where = r.offset - self.link_base
            else:
                if r.target not in self.section_offsets:    # relocations of debug or other unloaded sections
                    continue
                where = self.section_offsets[r.target] + r.offset
            if r.type == reloc.NONE:
                continue
            reloc.check_type(r.type, r.section)
            width = 8 if r.type in (reloc.ABS64, reloc.REL64, reloc.RELATIVE64) else 4
            if where < 0 or where + width > self.size:
                raise CodeObjectError(f"relocation in {r.section} patches {where:#x}, outside the {self.size}-byte image")
            if r.type == reloc.RELATIVE64:
                self.fixups.append(reloc.Fixup(where, r.type, None, False, r.addend - self.link_base, r.section))
                continue
            if r.sym is None:
                raise CodeObjectError(f"relocation {r.type} in {r.section} at {r.offset:#x} has no symbol")
            s_off, s_abs = self._sym_offset(r.sym)
            self.fixups.append(reloc.Fixup(where, r.type, s_off, s_abs, r.addend, r.section))

    def at(self, base: int) -> bytearray:
        """The image bytes relocated for GPU address `base`."""
        if base % IMAGE_ALIGN:
            raise CodeObjectError(f"image base {base:#x} is not {IMAGE_ALIGN}-byte aligned")
        img = bytearray(self._image)
        reloc.apply(img, self.fixups, base)
        return img

    # -- kernels --------------------------------------------------------------------------------
    def _kernel(self, km: KernelMeta, img: bytearray) -> KernelInfo:
        if km.symbol not in self.symbols:
            raise CodeObjectError(f"kernel {km.name}: descriptor symbol {km.symbol!r} is missing from the code object")
        kd_off, kd_size, _ = self.symbols[km.symbol]
        if kd_off % 64 or kd_off + 64 > self.size:
            raise CodeObjectError(f"kernel {km.name}: descriptor at {kd_off:#x} is misaligned or outside the image")
        kd = KernelDescriptor.decode(bytes(img[kd_off:kd_off + 64]), self.target)
        entry = kd_off + kd.kernel_code_entry_byte_offset
        if not 0 <= entry < self.size or entry % 256:
            raise CodeObjectError(f"kernel {km.name}: entry at image offset {entry:#x} is outside the image or not "
                                  f"256-byte aligned")
        if kd.wave_size != km.wavefront_size:
            raise CodeObjectError(f"kernel {km.name}: metadata says .wavefront_size {km.wavefront_size}, its descriptor "
                                  f"wave{kd.wave_size} (ENABLE_WAVEFRONT_SIZE32 = {int(kd.wave32)})")
        lds = max(kd.group_segment_fixed_size, km.group_segment_fixed_size)
        if lds > self.target.lds_bytes:
            raise KernelLDSTooLarge(f"kernel {km.name} uses {lds} bytes of static LDS; {self.target.arch} allows "
                                    f"{self.target.lds_bytes} per workgroup")
        fn = self.symbols.get(km.name)
        return KernelInfo(km.name, km, kd, kd_off, entry, fn[1] if fn and fn[0] == entry else 0)

    @property
    def arch(self) -> str:
        return self.target.arch

    @property
    def processor(self) -> str:
        """The processor the code object is built for: an arch, or a generic target such as gfx11-generic."""
        return self.target_id.processor

    def check_runs_on(self, arch: str) -> None:
        """Raise TargetMismatch unless the code object runs on a device of `arch` (e.g. "gfx942:xnack-")."""
        get_target(arch)                   # an arch amdq does not support is UnsupportedTarget
        dev = device_target(arch)
        why = incompatibility(self.target_id, dev, self.generic_version)
        if why:
            raise TargetMismatch(f"code object is for {self.target_id}, the device is {dev}: {why}; recompile with "
                                 f"-mcpu={dev} (or --offload-arch={dev})")


def load_code_object(data: bytes, arch: str | None = None, placement: dict[str, int] | None = None) -> ProgramImage:
    """Parse and lay out an AMDGPU code object (ET_REL or ET_DYN); `arch` checks the target."""
    return ProgramImage(data, arch, placement)
