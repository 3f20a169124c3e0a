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


def _need(m: dict, key: str, typ: type | tuple, where: str):
    if key not in m:
        raise CodeObjectError(f"metadata of {where} lacks {key}")
    v = m[key]
    if not isinstance(v, typ) or isinstance(v, bool) and typ is int:
        raise CodeObjectError(f"metadata of {where}: {key} is {type(v).__name__}, expected {getattr(typ, '__name__', typ)}")
    return v


def _arg(a: Any, where: str) -> ArgMeta:
    if not isinstance(a, dict):
        raise CodeObjectError(f"metadata of {where} is not a map")
    off, size = _need(a, ".offset", int, where), _need(a, ".size", int, where)
    if off < 0 or size < 0:
        raise CodeObjectError(f"metadata of {where} has a negative offset or size")
    return ArgMeta(off, size, _need(a, ".value_kind", str, where), str(a.get(".name", "")),
                   str(a.get(".type_name", "")), a.get(".address_space"), a.get(".access"),
                   a.get(".pointee_align"), bool(a.get(".is_const", False)))


def _kernel(k: Any, i: int) -> KernelMeta:
    if not isinstance(k, dict):
        raise CodeObjectError(f"metadata amdhsa.kernels[{i}] is not a map")
    name = _need(k, ".name", str, f"amdhsa.kernels[{i}]")
    w = f"kernel {name}"
    args = k.get(".args", [])
    if not isinstance(args, list):
        raise CodeObjectError(f"metadata of {w}: .args is not a list")
    rw = k.get(".reqd_workgroup_size")
    g = lambda key, dflt=0: _need(k, key, int, w) if key in k else dflt  # noqa: E731
    return KernelMeta(
        name=name, symbol=_need(k, ".symbol", str, w),
        args=[_arg(a, f"{w} .args[{j}]") for j, a in enumerate(args)],
        kernarg_segment_size=_need(k, ".kernarg_segment_size", int, w),
        kernarg_segment_align=_need(k, ".kernarg_segment_align", int, w),
        group_segment_fixed_size=_need(k, ".group_segment_fixed_size", int, w),
        private_segment_fixed_size=_need(k, ".private_segment_fixed_size", int, w),
        wavefront_size=_need(k, ".wavefront_size", int, w),
        sgpr_count=_need(k, ".sgpr_count", int, w), vgpr_count=_need(k, ".vgpr_count", int, w),
        agpr_count=g(".agpr_count"), max_flat_workgroup_size=g(".max_flat_workgroup_size", 1024),
        sgpr_spill_count=g(".sgpr_spill_count"), vgpr_spill_count=g(".vgpr_spill_count"),
        uses_dynamic_stack=bool(k.get(".uses_dynamic_stack", False)),
        reqd_workgroup_size=tuple(rw) if isinstance(rw, list) and len(rw) == 3 else None,
        raw=k)


def parse_metadata(desc: bytes) -> Metadata:
    """Decode the msgpack descriptor of an NT_AMDGPU_METADATA note."""
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
    return Metadata(tuple(ver), target if isinstance(target, str) else "", [_kernel(k, i) for i, k in enumerate(kernels)], m)


def find_metadata(notes: list[tuple[str, int, bytes]]) -> Metadata:
    for name, ntype, desc in notes:
        if name == "AMDGPU" and ntype == E.NT_AMDGPU_METADATA:
            return parse_metadata(desc)
    raise CodeObjectError("code object has no NT_AMDGPU_METADATA note (code object v3 or newer is required)")
