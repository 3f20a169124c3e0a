"""Target ids: parse every spelling LLVM and ROCm write, and decide whether a code object runs on a device.

A target id is a processor (`gfx1100`, or a generic target such as `gfx11-generic`) and the features the
code was built with (`xnack`, `sramecc`: on, off, or absent = any). It appears bare (`gfx942:xnack-`), in an
ISA name (`amdgcn-amd-amdhsa--gfx1100`, `amdgcn-amd-amdhsa-unknown-gfx1100`,
`amdgpu11.00-amd-amdhsa-unknown-gfx1100`) and in a bundle entry id (`hipv4-amdgcn-amd-amdhsa--gfx1100`).
The facts (generic members, feature encodings, device modes) are in amdq.hw.target_id.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CodeObjectError, UnsupportedCodeObjectTarget
from ..hw import target_id as F
from ..hw.targets import MACH_TO_ARCH, TARGETS, Target

_PROCESSOR = re.compile(r"gfx[0-9a-f]+(-[0-9]+)*(-generic)?\Z")


@dataclass(frozen=True)
class TargetId:
    processor: str
    features: tuple[tuple[str, bool], ...] = ()     # (name, on) in canonical (alphabetical) order

    @property
    def generic(self) -> F.GenericTarget | None:
        return F.GENERIC_TARGETS.get(self.processor)

    def feature(self, name: str) -> bool | None:
        """True (on), False (off) or None (any / not given)."""
        return dict(self.features).get(name)

    def __str__(self) -> str:
        return self.processor + "".join(f":{n}{'+' if on else '-'}" for n, on in self.features)


def _features(parts: list[str], text: str) -> tuple[tuple[str, bool], ...]:
    out: dict[str, bool] = {}
    for p in parts:
        name, sign = p[:-1], p[-1:]
        if sign not in ("+", "-") or name not in F.FEATURES:
            raise CodeObjectError(f"malformed target id {text!r}: feature {p!r} is not one of "
                                  f"{', '.join(f + s for f in F.FEATURES for s in '+-')}")
        if name in out:
            raise CodeObjectError(f"malformed target id {text!r}: feature {name} is given twice")
        out[name] = sign == "+"
    return tuple(sorted(out.items()))


def parse_target_id(text: str) -> TargetId:
    """A bare target id: `gfx1100`, `gfx942:sramecc+:xnack-`, `gfx11-generic` (features in any order)."""
    if not isinstance(text, str):
        raise CodeObjectError(f"a target id is a string, not {type(text).__name__}")
    proc, *feats = text.split(":")
    proc = proc.strip().lower()
    if not _PROCESSOR.match(proc):
        raise CodeObjectError(f"malformed target id {text!r}: {proc!r} is not an AMDGPU processor name "
                              f"(gfxNNNN or a generic target such as gfx11-generic)")
    return TargetId(proc, _features(feats, text))


def subarch_processors(subarch: str) -> tuple[str | None, frozenset[str]]:
    """What a new-style triple architecture `amdgpu<subarch>` names: (the one processor it names or None,
    the processors it admits). `amdgpu11.00` -> gfx1100; `amdgpu11` -> gfx11-generic and its members."""
    rest = subarch[len(F.TRIPLE_ARCH_PREFIX):]
    m = re.fullmatch(r"([0-9]+)\.([0-9a-f]{2})", rest)
    if m:
        proc = f"gfx{m.group(1)}{m.group(2)}"
        return proc, frozenset((proc,))
    for g in F.GENERIC_TARGETS.values():
        if g.subarch == subarch:
            return None, frozenset((g.name, *g.members))
    families = ", ".join(g.subarch for g in F.GENERIC_TARGETS.values())
    raise CodeObjectError(f"unknown AMDGPU triple architecture {subarch!r}: expected amdgcn or amdgpu<major>.<minor>"
                          f"<stepping> (amdgpu11.00) or a family ({families})")


@dataclass(frozen=True)
class IsaName:
    arch: str                  # "amdgcn" or "amdgpu<subarch>"
    vendor: str
    os: str
    environment: str           # "" (the usual empty field), "unknown", "llvm", ...
    target: TargetId


def parse_isa_name(text: str) -> IsaName:
    """An AMDGPU ISA name `<arch>-<vendor>-<os>-<environment>-<target id>`; the environment may be empty or
    absent, the arch `amdgcn` or `amdgpu<subarch>` (whose processor may then be omitted)."""
    if not isinstance(text, str):
        raise CodeObjectError(f"an ISA name is a string, not {type(text).__name__}")
    parts = text.split("-", 3)
    if len(parts) < 4:
        raise CodeObjectError(f"malformed ISA name {text!r}: expected <arch>-amd-amdhsa-<environment>-<target id>")
    arch, vendor, os_, rest = parts
    if rest.startswith("-"):
        env, tid = "", rest[1:]
    elif rest.startswith("gfx") or rest.startswith(":"):
        env, tid = "", rest                      # the bundler's three-field triple
    else:
        env, _, tid = rest.partition("-")
    if vendor != F.TRIPLE_VENDOR or os_ != F.TRIPLE_OS:
        raise CodeObjectError(f"ISA name {text!r} is not for {F.TRIPLE_VENDOR}-{F.TRIPLE_OS} (got {vendor}-{os_})")
    if arch == F.TRIPLE_ARCH_LEGACY:
        if not tid or tid.startswith(":"):
            raise CodeObjectError(f"ISA name {text!r} names no processor")
        target = parse_target_id(tid)
    elif arch.startswith(F.TRIPLE_ARCH_PREFIX):
        named, admits = subarch_processors(arch)
        if not tid or tid.startswith(":"):
            if named is None:
                raise CodeObjectError(f"ISA name {text!r} names no processor and {arch} is a family")
            tid = named + tid
        target = parse_target_id(tid)
        if target.processor not in admits:
            raise CodeObjectError(f"ISA name {text!r}: processor {target.processor} does not belong to {arch}")
    else:
        raise CodeObjectError(f"ISA name {text!r} is not for an AMDGPU (architecture {arch!r}, expected amdgcn or "
                              f"amdgpu<subarch>)")
    return IsaName(arch, vendor, os_, env, target)


def parse_any(text: str) -> TargetId:
    """A target id given either bare (`gfx1100:xnack-`) or as an ISA name."""
    return parse_isa_name(text).target if "-amd-" in text else parse_target_id(text)


@dataclass(frozen=True)
class BundleId:
    text: str
    kind: str                  # hip, hipv4, openmp, host, ...
    isa: IsaName | None        # None for the host's entry and for entries of other targets
    note: str = ""             # why isa is None

    @property
    def target(self) -> TargetId | None:
        return self.isa.target if self.isa else None


def parse_bundle_id(text: str) -> BundleId:
    """A bundle entry id `<kind>-<triple>[-<target id>]`; host entries and other targets' entries parse with
    isa None (they are listed, never loaded)."""
    kind, sep, rest = text.partition("-")
    if not sep or not kind:
        raise CodeObjectError(f"malformed bundle entry id {text!r}: expected <kind>-<triple>[-<target id>]")
    if kind == F.HOST_KIND:
        return BundleId(text, kind, None, "host code")
    arch = rest.split("-", 1)[0]
    if arch != F.TRIPLE_ARCH_LEGACY and not arch.startswith(F.TRIPLE_ARCH_PREFIX):
        return BundleId(text, kind, None, f"not an AMDGPU entry ({arch})")
    if kind not in F.DEVICE_KINDS:
        return BundleId(text, kind, None, f"offload kind {kind!r} is not one amdq loads ({', '.join(F.DEVICE_KINDS)})")
    try:
        return BundleId(text, kind, parse_isa_name(rest))
    except CodeObjectError as e:         # an entry for a target this table does not know: listed, not loaded
        return BundleId(text, kind, None, str(e))


def device_target(arch: str) -> TargetId:
    """The target id of a device of `arch` (`gfx942`, or `gfx942:xnack+` to name its mode): every feature the
    processor supports set, from the arch string or else the device's default mode."""
    t = parse_target_id(arch)
    given = dict(t.features)
    supported = F.PROCESSOR_FEATURES.get(t.processor, ())
    for name in given:
        if name not in supported:
            raise CodeObjectError(f"device {arch!r}: {t.processor} has no {name} mode")
    modes = F.DEVICE_MODES.get(t.processor, {})
    return TargetId(t.processor, tuple(sorted((n, given.get(n, modes.get(n, False))) for n in supported)))


def incompatibility(code: TargetId, device: TargetId, generic_version: int | None = None) -> str | None:
    """Why code built for `code` cannot run on `device` (None if it can). Rules: the processor is the device's
    or a generic target covering it (at a high enough generic version); a feature on needs the device's mode
    on, off needs it off, absent (any) runs on either (a device without the feature has it off)."""
    if code.processor != device.processor:
        g = code.generic
        if g is None:
            return f"it is for {code.processor}"
        if device.processor not in g.members:
            return f"{g.name} covers {', '.join(g.members)}, not {device.processor}"
        need = g.members[device.processor]
        if generic_version is not None and generic_version < need:
            return f"its {g.name} generic version is {generic_version}; {device.processor} needs {need} or later"
    for name, on in code.features:
        mode = bool(device.feature(name))
        if mode != on:
            return f"it needs {name}{'+' if on else '-'} and the device runs {name}{'+' if mode else '-'}"
    return None


def match_score(code: TargetId) -> tuple[int, int]:
    """Preference among compatible code objects: a specific processor over a generic one, then the more
    features pinned to the device's mode."""
    return (0 if code.generic else 1, len(code.features))


def elf_target(flags: int, cov: int) -> tuple[TargetId, int | None]:
    """The target id an ELF header records (e_flags), and the generic version of a generic code object. Code
    object v3 headers carry no any/on/off feature settings: their features read as any."""
    mach = flags & 0xFF
    g = F.GENERIC_BY_MACH.get(mach)
    if g is not None:
        proc, gver = g.name, (flags & F.EF_GENERIC_VERSION) >> F.EF_GENERIC_VERSION_SHIFT
    elif mach in MACH_TO_ARCH:
        proc, gver = MACH_TO_ARCH[mach], None
    else:
        raise UnsupportedCodeObjectTarget(f"code object machine 0x{mach:02x} is not a supported target: amdq supports "
                                          f"{', '.join(TARGETS)} and the generic targets that cover them")
    feats = []
    if cov >= 4:
        for name, (mask, values) in F.EF_FEATURE_V4.items():
            v = values[flags & mask]
            if v in ("on", "off"):
                feats.append((name, v == "on"))
    return TargetId(proc, tuple(sorted(feats))), gver


def representative(t: TargetId) -> Target:
    """The supported Target whose facts (descriptor layout, LDS size) a code object for `t` is read with: the
    processor itself, or a generic target's first member that amdq supports."""
    if t.processor in TARGETS:
        return TARGETS[t.processor]
    g = t.generic
    for arch in TARGETS:
        if g is not None and arch in g.members:
            return TARGETS[arch]
    raise UnsupportedCodeObjectTarget(f"code object target {t.processor} covers no target amdq supports "
                                      f"({', '.join(TARGETS)})")
