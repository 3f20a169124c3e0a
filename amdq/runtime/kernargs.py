"""Kernel arguments laid out as the code object's metadata says (explicit, then code object v5 hidden ones).

Source: LLVM AMDGPUUsage, "Code Object V5 Metadata" (.args value kinds) and "Kernel Argument
Layout"; the hidden argument offsets come from each argument's `.offset` in the metadata.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..codeobj.metadata import ArgMeta, KernelMeta
from ..errors import DTypeMismatch, InvalidArgument, LDSLimitExceeded
from .memory import Buffer

SHARED_APERTURE_HI = 0x0001_0000       # what src_shared_base reads: high half of the LDS aperture
PRIVATE_APERTURE_HI = 0x0002_0000


@dataclass(frozen=True)
class LDS:
    """A `__local` pointer argument: `nbytes` of LDS added to the dispatch's group segment."""
    nbytes: int


# the element types a pointer's `.type_name` (OpenCL and HIP metadata, e.g. "float*", "const uint*") names:
# (kind, bytes per scalar); kind "f" float, "i" integer of either signedness. Vector types (float4) take
# arrays of their scalar. Byte pointers (char, uchar, void) and unknown names take any array.
_POINTEE = {"float": ("f", 4), "double": ("f", 8), "half": ("f", 2), "_Float16": ("f", 2), "__fp16": ("f", 2),
            "__half": ("f", 2), "__bf16": ("f", 2), "bfloat16": ("f", 2), "__hip_bfloat16": ("f", 2),
            "short": ("i", 2), "ushort": ("i", 2), "int": ("i", 4), "uint": ("i", 4), "long": ("i", 8),
            "ulong": ("i", 8), "unsigned": ("i", 4), "unsigned short": ("i", 2), "unsigned int": ("i", 4),
            "unsigned long": ("i", 8), "long long": ("i", 8), "unsigned long long": ("i", 8),
            "int16_t": ("i", 2), "uint16_t": ("i", 2), "int32_t": ("i", 4), "uint32_t": ("i", 4),
            "int64_t": ("i", 8), "uint64_t": ("i", 8), "size_t": ("i", 8), "ptrdiff_t": ("i", 8)}
_VECTOR = ("16", "8", "4", "3", "2")
_QUALIFIERS = ("const", "volatile", "restrict", "__restrict__", "__restrict", "struct", "__global", "global")


def _pointee(type_name: str) -> tuple[str, int] | None:
    tn = type_name.strip()
    if not tn.endswith("*") or tn.count("*") != 1:
        return None                                      # not a plain pointer (or a pointer to pointers)
    words = [w for w in tn[:-1].replace("*", " ").split() if w not in _QUALIFIERS]
    base = " ".join(words)
    if base in _POINTEE:
        return _POINTEE[base]
    for n in _VECTOR:                                    # float4, uint2, double16 ...
        if base.endswith(n) and base[:-len(n)] in _POINTEE:
            return _POINTEE[base[:-len(n)]]
    return None


def pointee_check(a: ArgMeta) -> Callable[[np.dtype], bool] | None:
    """For a global pointer argument whose metadata names its element type: a test of whether an array of a
    dtype fits it (same kind, float or integer, and scalar size; complex fits pairs of its float); else None."""
    if a.value_kind != "global_buffer" or not a.type_name:
        return None
    p = _pointee(a.type_name)
    if p is None:
        return None
    kind, size = p

    def fits(dt) -> bool:
        k = dt.kind
        if k == "f":
            return kind == "f" and dt.itemsize == size
        if k in "iu":
            return kind == "i" and dt.itemsize == size
        if k == "b":
            return kind == "i" and size == 1
        if k == "c":
            return kind == "f" and dt.itemsize == 2 * size
        return False
    return fits


def pointee_dtype(a: ArgMeta) -> str:
    """The numpy dtype(s) a typed pointer argument takes, in words."""
    p = _pointee(a.type_name)
    if p is None:
        return "any dtype"
    kind, size = p
    return {"f": f"float{8 * size}", "i": f"int{8 * size} or uint{8 * size}"}[kind]


_FLOAT_TYPES = {"float": "f", "double": "d", "half": "e", "_Float16": "e", "__fp16": "e"}
_INT_FMT = {1: "b", 2: "h", 4: "i", 8: "q"}


def _scalar_bytes(a: ArgMeta, v: Any, name: str) -> bytes:
    tn = a.type_name.strip()
    base = tn.rstrip("*").strip()
    fl = _FLOAT_TYPES.get(base)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (bytes, bytearray)):
        if len(v) != a.size:
            raise InvalidArgument(f"argument {name}: {len(v)} bytes given, the kernel takes {a.size}")
        return bytes(v)
    if fl is None and not base and isinstance(v, float) and a.size in (2, 4, 8):
        fl = {2: "e", 4: "f", 8: "d"}[a.size]           # untyped metadata (LLVM IR): a float is a float
    if fl and a.size == struct.calcsize(fl):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise InvalidArgument(f"argument {name} ({tn}): expected a number, got {type(v).__name__}")
        return struct.pack("<" + fl, float(v))
    if a.size in _INT_FMT and not fl:
        if isinstance(v, float):
            if not v.is_integer():
                raise InvalidArgument(f"argument {name} ({tn or 'integer'}): {v!r} is not an integer")
            v = int(v)
        if not isinstance(v, int):
            raise InvalidArgument(f"argument {name} ({tn or 'integer'}): expected an integer, got {type(v).__name__}")
        bits = 8 * a.size
        if not -(1 << (bits - 1)) <= v < (1 << bits):      # either signedness, two's complement
            raise InvalidArgument(f"argument {name} ({tn or 'integer'}): {v} does not fit {bits} bits")
        return (v & ((1 << bits) - 1)).to_bytes(a.size, "little")
    raise InvalidArgument(f"argument {name}: cannot pack a {type(v).__name__} into {a.size} bytes of {tn or 'by_value'}")


def pack(meta: KernelMeta, args: tuple, grid: tuple[int, int, int], block: tuple[int, int, int],
         address_of: Callable[[Any], int], static_lds: int, lds_limit: int | None = None,
         extra: dict[str, int] | None = None, shared_mem: int = 0) -> tuple[bytes, int]:
    """(kernarg bytes, dynamic LDS bytes) for a dispatch of `grid` workgroups of `block` work-items.

    `address_of(obj)` gives the device address of a buffer argument (ints pass through). Dynamic LDS is
    laid out after the kernel's static LDS (`static_lds`, where the compiler places an external
    addrspace(3) array): first the launch's `shared_mem` bytes, then each `LDS(nbytes)` argument at its
    pointee alignment. The dynamic LDS bytes (both together) are what hidden_dynamic_lds_size receives and
    what the dispatch adds to its group segment.
    """
    explicit = meta.explicit_args
    if len(args) != len(explicit):
        names = ", ".join(a.name or f"#{i}" for i, a in enumerate(explicit))
        raise InvalidArgument(f"kernel {meta.name} takes {len(explicit)} arguments ({names}), {len(args)} given")
    buf = bytearray(max(meta.kernarg_segment_size, 8))
    dyn_lds = shared_mem
    lds_offset = static_lds + shared_mem
    for i, (a, v) in enumerate(zip(explicit, args)):
        name = a.name or f"#{i}" + (f" ({a.type_name})" if a.type_name else "")
        if a.value_kind == "global_buffer" or (a.value_kind == "by_value" and a.address_space == "global"):
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                addr = int(v)
            else:
                try:
                    addr = address_of(v)
                except InvalidArgument:
                    raise
                except (TypeError, AttributeError):
                    raise InvalidArgument(f"argument {name} of {meta.name} is a global pointer: pass a Buffer or "
                                          f"a device address, not {type(v).__name__}") from None
            if not 0 <= addr < 1 << 64:
                raise InvalidArgument(f"argument {name}: address {addr:#x} is not a 64-bit address")
            dt = None if isinstance(v, (int, np.integer)) else getattr(v, "dtype", None)   # a typed array's
            if dt is not None:
                check = pointee_check(a)
                if check is not None and not check(dt):
                    raise DTypeMismatch(f"argument {name} of {meta.name} is a {a.type_name.strip()} pointer: an array of "
                                        f"{np.dtype(dt)} does not fit it (pass an array of {pointee_dtype(a)}, or a "
                                        f"Buffer for raw bytes)")
            buf[a.offset:a.offset + 8] = addr.to_bytes(8, "little")
        elif a.value_kind == "dynamic_shared_pointer":
            if not isinstance(v, LDS):
                raise InvalidArgument(f"argument {name} of {meta.name} is a __local pointer: pass amdq.LDS(nbytes), "
                                      f"not {type(v).__name__}")
            if not isinstance(v.nbytes, int) or v.nbytes < 0:
                raise InvalidArgument(f"argument {name} of {meta.name}: LDS size must be a non-negative integer, "
                                      f"not {v.nbytes!r}")
            align = max(a.pointee_align or 4, 4)
            lds_offset = (lds_offset + align - 1) & -align
            if lds_offset >= 1 << (8 * a.size):
                raise LDSLimitExceeded(f"kernel {meta.name}: argument {name} would start at LDS byte {lds_offset} "
                                       f"(pointee_align {align}), which its {a.size}-byte pointer cannot hold")
            buf[a.offset:a.offset + a.size] = lds_offset.to_bytes(a.size, "little")
            lds_offset += v.nbytes
            dyn_lds = lds_offset - static_lds
        elif a.value_kind == "by_value":
            if isinstance(v, LDS) or hasattr(v, "addr"):
                raise InvalidArgument(f"argument {name} of {meta.name} is passed by value ({a.type_name}), "
                                      f"not a {type(v).__name__}")
            buf[a.offset:a.offset + a.size] = _scalar_bytes(a, v, name)
        else:
            raise InvalidArgument(f"argument {name} of {meta.name}: value kind {a.value_kind} is not supported")
    if lds_limit is not None and static_lds + dyn_lds > lds_limit:
        parts = f" (shared_mem={shared_mem}, {dyn_lds - shared_mem} in LDS arguments)" if shared_mem else ""
        raise LDSLimitExceeded(f"kernel {meta.name}: {static_lds} bytes of static LDS + {dyn_lds} dynamic{parts} "
                               f"exceed the {lds_limit} bytes a workgroup may use")
    hidden = {
        "hidden_block_count_x": grid[0], "hidden_block_count_y": grid[1], "hidden_block_count_z": grid[2],
        "hidden_group_size_x": block[0], "hidden_group_size_y": block[1], "hidden_group_size_z": block[2],
        "hidden_remainder_x": 0, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
        "hidden_global_offset_x": 0, "hidden_global_offset_y": 0, "hidden_global_offset_z": 0,
        "hidden_grid_dims": 3 if grid[2] * block[2] > 1 else 2 if grid[1] * block[1] > 1 else 1,
        "hidden_dynamic_lds_size": dyn_lds,
        "hidden_private_base": PRIVATE_APERTURE_HI, "hidden_shared_base": SHARED_APERTURE_HI,
        **(extra or {}),
    }
    for a in meta.args:
        if a.hidden and a.value_kind in hidden:
            buf[a.offset:a.offset + a.size] = (hidden[a.value_kind] & ((1 << (8 * a.size)) - 1)).to_bytes(a.size, "little")
    return bytes(buf), dyn_lds


_SCALAR_FMT = {("float", 4): "f", ("double", 8): "d", ("half", 2): "e"}
_UNTYPED_FLOAT = {2: "e", 4: "f", 8: "d"}
_INT = {1: "b", 2: "h", 4: "i", 8: "q"}


def arg_formats(meta: KernelMeta, args: tuple) -> list[tuple[str, str]] | None:
    """Per explicit argument, its struct code and what it is: "ptr" (a global pointer, 8 bytes), "float" (an
    untyped argument packed as a float because `args` passes a float there: it must stay a float), "value".
    Padding before an argument is a code of its own ("x" * n, "pad"). None if they do not fit one struct."""
    out, pos = [], 0
    for i, a in enumerate(meta.explicit_args):
        if a.offset < pos:
            return None
        if a.offset > pos:
            out.append(("x" * (a.offset - pos), "pad"))
        tn = a.type_name.strip()
        if a.value_kind == "global_buffer":
            out.append(("Q", "ptr"))
        elif a.value_kind == "by_value" and (tn, a.size) in _SCALAR_FMT:
            out.append((_SCALAR_FMT[(tn, a.size)], "value"))
        elif a.value_kind == "by_value" and a.size in _INT and tn not in ("", "bool"):
            out.append((_INT[a.size], "value"))
        elif a.value_kind == "by_value" and not tn and a.size in (2, 4, 8):
            # untyped (LLVM IR): the Python type of the argument decides, a float's bits or an integer's
            out.append((_UNTYPED_FLOAT[a.size], "float") if isinstance(args[i], float) else (_INT[a.size], "value"))
        else:
            return None
        pos = a.offset + a.size
    return out


# what makes a compiled packer give way to the checked path (which packs the launch or says what is wrong)
SLOW = (struct.error, AttributeError, TypeError, ValueError, OverflowError)


def compile_packer(meta: KernelMeta, args: tuple, blob: bytes, dev: Any, pointee: dict[int, Callable],
                   checked: Callable[[Any, int, tuple], None]) -> Callable[[Any, int, tuple], None]:
    """`pack(mv, off, args)`: one launch's kernel arguments written at mv[off:], for one signature, as one struct
    pack of the explicit arguments and the plan's constant rest (`blob` past them: the hidden arguments).

    It checks what the general packer checks, in line: a pointer takes an int address or a buffer of `dev`
    (its `.addr`) whose dtype, if typed, fits the pointee (`pointee[i]`); an untyped argument packed as a float
    must be a float; a typed float takes any number but a bool. Anything else (a wrong count, a value struct
    refuses, another device's buffer) goes to `checked(mv, off, args)`, the general packer, which packs it or
    raises the error that names the argument. (Generated source, like a namedtuple's: one function per plan.)"""
    f = arg_formats(meta, args)
    if f is None:
        return checked
    end = struct.calcsize("<" + "".join(c for c, _ in f))
    st = struct.Struct("<" + "".join(c for c, _ in f) + f"{len(blob) - end}s")
    fields = [(f"a{i}", code, kind) for i, (code, kind) in enumerate(x for x in f if x[1] != "pad")]
    env = {"pack_into": st.pack_into, "rest": bytes(blob[end:]), "dev": dev, "checked": checked, "SLOW": SLOW,
           "Buffer": Buffer}
    names = "".join(n + ", " for n, _, _ in fields)
    lines = [f"{names} = args" if fields else "if args: raise TypeError"]
    for i, (n, code, kind) in enumerate(fields):
        if kind == "ptr":                                # an int is the address itself; else a buffer of ours
            lines += [f"if type({n}) is Buffer:",          # (raw bytes fit any pointee; freed: None.va raises)
                      f"    if {n}.dev is not dev: raise TypeError",
                      f"    {n} = {n}.alloc.va",
                      f"elif type({n}) is not int:",
                      f"    if {n}.dev is not dev: raise TypeError"]
            if i in pointee:
                env[f"fits{i}"] = pointee[i]
                lines += [f"    if {n}.dtype is not None and not fits{i}({n}.dtype): raise TypeError"]
            lines += [f"    {n} = {n}.addr"]
        elif kind == "float":
            lines += [f"if type({n}) is not float: raise TypeError"]
        elif code in "efd":
            lines += [f"if type({n}) is bool: raise TypeError"]
    lines += [f"pack_into(mv, off, {names}rest)"]
    src = "def pack(mv, off, args):\n    try:\n" + "".join(f"        {line}\n" for line in lines) + \
          "    except SLOW:\n        checked(mv, off, args)\n"
    code = _PACKERS.get((meta.name, src))
    if code is None:                                     # (compiling the source costs ~0.3 ms: once per source)
        if len(_PACKERS) >= 512:
            _PACKERS.clear()
        code = _PACKERS[meta.name, src] = compile(src, f"<kernel arguments of {meta.name}>", "exec")
    exec(code, env)
    return env["pack"]


_PACKERS: dict[tuple[str, str], Any] = {}   # (kernel, packer source) -> its code object: another plan of that signature
