"""The NT_AMDGPU_METADATA note: a msgpack map describing kernels and their arguments (code object v4-v6).

Source: LLVM AMDGPUUsage "Code Object V3 Metadata" and its V4/V5/V6 additions.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ..errors import CodeObjectError
from ..hw import elf as E


@dataclass(frozen=True)
class ArgMeta:
    offset: int
    size: int
    value_kind: str
    name: str = ""
    type_name: str = ""
    address_space: str | None = None
    access: str | None = None
    pointee_align: int | None = None
    is_const: bool = False

    @property
    def hidden(self) -> bool:
        return self.value_kind.startswith("hidden_")


@dataclass
class KernelMeta:
    name: str
    symbol: str
    args: list[ArgMeta]
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    wavefront_size: int
    sgpr_count: int
    vgpr_count: int
    agpr_count: int = 0
    max_flat_workgroup_size: int = 1024
    sgpr_spill_count: int = 0
    vgpr_spill_count: int = 0
    uses_dynamic_stack: bool = False
    reqd_workgroup_size: tuple[int, int, int] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def explicit_args(self) -> list[ArgMeta]:
        return [a for a in self.args if not a.hidden]

    def hidden_arg(self, kind: str) -> ArgMeta | None:
        for a in self.args:
            if a.value_kind == kind:
                return a
        return None


@dataclass
class Metadata:
    version: tuple[int, ...]
    target: str
    kernels: list[KernelMeta]
    raw: dict[str, Any] = field(repr=False)


# Bounds the loader enforces on the metadata, so that a malformed note is refused at load instead of
# failing (or allocating gigabytes) when arguments are packed for a dispatch.
#
# MAX_KERNARG_SEGMENT: the kernel descriptor's kernarg_size is a u32 (LLVM AMDHSAKernelDescriptor.h),
# so the format allows up to 4 GiB, but no runtime gets near it: ROCclr advertises 1024 bytes of
# explicit parameters (`info_.maxParameterSize_ = 1024`, CL_DEVICE_MAX_PARAMETER_SIZE in its ROCm and
# PAL devices) and code object v5 adds 256 bytes of hidden arguments (AMDGPUUsage "Code Object V5
# Metadata"; LLVM's default "amdgpu-implicitarg-num-bytes" for CoV5). amdq allows 64 KiB: 50x what
# LLVM produces for any OpenCL/HIP kernel, and small enough that one dispatch cannot eat the 4 MiB
# kernarg ring (runtime.device.Kernargs).
MAX_KERNARG_SEGMENT = 64 << 10
MAX_U32 = (1 << 32) - 1
MAX_ALIGN = 1 << 32                 # LLVM's largest alignment (Value::MaxAlignmentExponent = 32)
# A kernel's argument count: ROCclr's 1024 parameter bytes allow at most 1024 explicit (1-byte) arguments,
# and code object v5 adds about twenty hidden ones; 4096 leaves room and keeps a bad note cheap to refuse.
MAX_ARGS = 4096
# The msgpack note itself: LLVM writes a few hundred bytes per kernel argument, so even a library of
# thousands of kernels stays within a few MiB; a larger note is refused before it is decoded.
MAX_METADATA = 16 << 20
MAX_FLAT_WORKGROUP = 1024           # "amdgpu-flat-work-group-size" is at most 1024 (AMDGPUUsage)
_POINTER_KINDS = {"global_buffer": (8,), "dynamic_shared_pointer": (4, 8)}    # sizes the runtime writes


def _need(m: dict, key: str, typ: type | tuple, where: str):
    if key not in m:
        raise CodeObjectError(f"metadata of {where} lacks {key}")
    v = m[key]
    if not isinstance(v, typ) or isinstance(v, bool) and typ is int:
        raise CodeObjectError(f"metadata of {where}: {key} is {type(v).__name__} {_show(v)}, expected "
                              f"{getattr(typ, '__name__', typ)}")
    return v


def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _int(m: dict, key: str, where: str, lo: int, hi: int, default: int | None = None) -> int:
    """An integer field in [lo, hi] (required unless a default is given)."""
    if key not in m and default is not None:
        return default
    v = _need(m, key, int, where)
    if not lo <= v <= hi:
        raise CodeObjectError(f"metadata of {where}: {key} = {v} is out of range (allowed {lo}..{hi})")
    return v


def _opt_str(m: dict, key: str, where: str) -> str | None:
    v = m.get(key)
    if v is not None and not isinstance(v, str):
        raise CodeObjectError(f"metadata of {where}: {key} is {type(v).__name__} {_show(v)}, expected str")
    return v


def _pow2(v: int) -> bool:
    return v > 0 and not v & (v - 1)


def _arg(a: Any, where: str, kss: int) -> ArgMeta:
    """One .args entry, checked against the kernel's kernarg segment of `kss` bytes."""
    if not isinstance(a, dict):
        raise CodeObjectError(f"metadata of {where} is a {type(a).__name__}, not a map")
    kind = _need(a, ".value_kind", str, where)
    off = _int(a, ".offset", where, 0, MAX_KERNARG_SEGMENT)
    size = _int(a, ".size", where, 0, MAX_KERNARG_SEGMENT)
    if off + size > kss:
        raise CodeObjectError(f"metadata of {where}: .offset {off} + .size {size} = {off + size} runs past "
                              f"the {kss}-byte kernarg segment (.kernarg_segment_size)")
    addr_space = _opt_str(a, ".address_space", where)
    sizes = _POINTER_KINDS.get(kind) or ((8,) if kind == "by_value" and addr_space == "global" else None)
    if sizes and size not in sizes:
        raise CodeObjectError(f"metadata of {where}: .size is {size}, but a {kind} argument"
                              f"{' in the global address space' if kind == 'by_value' else ''} is "
                              f"{' or '.join(map(str, sizes))} bytes")
    align = a.get(".pointee_align")
    if align is not None:
        align = _int(a, ".pointee_align", where, 1, MAX_ALIGN)
        if not _pow2(align):
            raise CodeObjectError(f"metadata of {where}: .pointee_align = {align} is not a power of two")
    return ArgMeta(off, size, kind, _opt_str(a, ".name", where) or "", _opt_str(a, ".type_name", where) or "",
                   addr_space, _opt_str(a, ".access", where), align, bool(a.get(".is_const", False)))


def _check_overlaps(args: list[ArgMeta], w: str) -> None:
    """No two arguments (of non-zero size) may share kernarg bytes."""
    spans = sorted((a.offset, a.offset + a.size, j, a) for j, a in enumerate(args) if a.size)
    for (_, end0, j0, a0), (off1, _, j1, a1) in zip(spans, spans[1:]):
        if off1 < end0:
            name = lambda j, a: f".args[{j}] ({a.name or a.value_kind})"  # noqa: E731
            raise CodeObjectError(f"metadata of {w}: {name(j1, a1)} at .offset {off1} overlaps {name(j0, a0)} "
                                  f"at bytes {a0.offset}..{end0 - 1}")


def _label(a: Any) -> str:
    """' (name)' of an argument for messages, else ' (value kind)'."""
    if isinstance(a, dict):
        for key in (".name", ".value_kind"):
            if isinstance(a.get(key), str) and a[key]:
                return f" ({a[key]})"
    return ""


def _kernel(k: Any, i: int) -> KernelMeta:
    if not isinstance(k, dict):
        raise CodeObjectError(f"metadata amdhsa.kernels[{i}] is a {type(k).__name__}, not a map")
    name = _need(k, ".name", str, f"amdhsa.kernels[{i}]")
    w = f"kernel {name}"
    args = k.get(".args", [])
    if not isinstance(args, list):
        raise CodeObjectError(f"metadata of {w}: .args is {type(args).__name__}, not a list")
    if len(args) > MAX_ARGS:
        raise CodeObjectError(f"metadata of {w}: {len(args)} arguments, more than the {MAX_ARGS} amdq accepts")
    kss = _int(k, ".kernarg_segment_size", w, 0, MAX_KERNARG_SEGMENT)
    align = _int(k, ".kernarg_segment_align", w, 1, MAX_ALIGN)
    if not _pow2(align):
        raise CodeObjectError(f"metadata of {w}: .kernarg_segment_align = {align} is not a power of two")
    parsed = [_arg(a, f"{w} .args[{j}]{_label(a)}", kss) for j, a in enumerate(args)]
    _check_overlaps(parsed, w)
    wave = _int(k, ".wavefront_size", w, 32, 64)
    if wave not in (32, 64):
        raise CodeObjectError(f"metadata of {w}: .wavefront_size = {wave}, expected 32 or 64")
    rw = k.get(".reqd_workgroup_size")
    if rw is not None:
        if not (isinstance(rw, list) and len(rw) == 3 and all(type(x) is int and x >= 1 for x in rw)) \
                or rw[0] * rw[1] * rw[2] > MAX_FLAT_WORKGROUP:
            raise CodeObjectError(f"metadata of {w}: .reqd_workgroup_size is {_show(rw)}, expected 3 positive "
                                  f"integers whose product is at most {MAX_FLAT_WORKGROUP}")
        rw = tuple(rw)
    g = lambda key, dflt=0: _int(k, key, w, 0, MAX_U32, dflt)  # noqa: E731
    return KernelMeta(
        name=name, symbol=_need(k, ".symbol", str, w), args=parsed,
        kernarg_segment_size=kss, kernarg_segment_align=align,
        group_segment_fixed_size=_int(k, ".group_segment_fixed_size", w, 0, MAX_U32),
        private_segment_fixed_size=_int(k, ".private_segment_fixed_size", w, 0, MAX_U32),
        wavefront_size=wave, sgpr_count=_int(k, ".sgpr_count", w, 0, MAX_U32),
        vgpr_count=_int(k, ".vgpr_count", w, 0, MAX_U32), agpr_count=g(".agpr_count"),
        max_flat_workgroup_size=_int(k, ".max_flat_workgroup_size", w, 1, MAX_FLAT_WORKGROUP, MAX_FLAT_WORKGROUP),
        sgpr_spill_count=g(".sgpr_spill_count"), vgpr_spill_count=g(".vgpr_spill_count"),
        uses_dynamic_stack=bool(k.get(".uses_dynamic_stack", False)), reqd_workgroup_size=rw, raw=k)


def parse_metadata(desc: bytes) -> Metadata:
    """Decode the msgpack descriptor of an NT_AMDGPU_METADATA note."""
    if len(desc) > MAX_METADATA:
        raise CodeObjectError(f"AMDGPU metadata note is {len(desc)} bytes, more than the {MAX_METADATA >> 20} MiB "
                              f"amdq accepts")
    try:
        m = msgpack.unpackb(desc, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types on bad input
        raise CodeObjectError(f"AMDGPU metadata note is not valid msgpack: {type(e).__name__}: {e}") from None
    if not isinstance(m, dict):
        raise CodeObjectError("AMDGPU metadata is not a msgpack map")
    ver = m.get("amdhsa.version")
    if not isinstance(ver, list) or not ver or not all(isinstance(x, int) for x in ver):
        raise CodeObjectError("AMDGPU metadata lacks amdhsa.version")
    kernels = m.get("amdhsa.kernels", [])
    if not isinstance(kernels, list):
        raise CodeObjectError("metadata amdhsa.kernels is not a list")
    target = m.get("amdhsa.target", "")
    parsed = [_kernel(k, i) for i, k in enumerate(kernels)]
    seen: set[str] = set()
    for km in parsed:
        if km.name in seen:
            raise CodeObjectError(f"metadata lists kernel {km.name} twice")
        seen.add(km.name)
    return Metadata(tuple(ver), target if isinstance(target, str) else "", parsed, m)


def find_metadata(notes: list[tuple[str, int, bytes]]) -> Metadata:
    """The parsed NT_AMDGPU_METADATA note among a code object's notes."""
    for name, ntype, desc in notes:
        if name == "AMDGPU" and ntype == E.NT_AMDGPU_METADATA:
            return parse_metadata(desc)
    raise CodeObjectError("code object has no NT_AMDGPU_METADATA note (code object v3 or newer is required)")
