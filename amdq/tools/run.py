"""`amdq run`: one kernel of a code object, its arguments from strings, its buffers written back as .npy.

An argument string is, by the kind the kernel's metadata gives the argument:
- a pointer (global_buffer): `FILE.npy` (uploaded; written back with its dtype and shape), `size:NBYTES` (zeroed
  bytes, written back as uint8) or `zeros:N:DTYPE` (N zeroed elements of a numpy dtype);
- a value (by_value): a number, typed by the metadata's type name (float, int, uint, long, double, half, ...) or,
  where the code object names no type, by its size and spelling (`1.5` is floating point, `3` an integer);
  `TYPE:VALUE` (f16, f32, f64, i8..i64, u8..u64) says the type;
- a `__local` pointer (dynamic_shared_pointer): `lds:NBYTES`.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ..errors import InvalidArgument

TYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32,
         "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}
# OpenCL / HIP scalar type names of the metadata's .type_name
C_TYPES = {"float": "f32", "double": "f64", "half": "f16", "char": "i8", "uchar": "u8", "short": "i16",
           "ushort": "u16", "int": "i32", "uint": "u32", "long": "i64", "ulong": "u64", "bool": "u8",
           "unsigned int": "u32", "unsigned char": "u8", "unsigned short": "u16", "unsigned long": "u64",
           "size_t": "u64", "int32_t": "i32", "uint32_t": "u32", "int64_t": "i64", "uint64_t": "u64"}


def dims(text: str, what: str) -> tuple[int, int, int]:
    """`X[,Y[,Z]]` -> (x, y, z) of positive integers."""
    try:
        t = tuple(int(x, 0) for x in str(text).replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise InvalidArgument(f"--{what} {text!r}: give 1 to 3 positive integers, e.g. 4 or 16,16") from None
    if not 1 <= len(t) <= 3 or min(t) < 1:
        raise InvalidArgument(f"--{what} {text!r}: give 1 to 3 positive integers, e.g. 4 or 16,16")
    return t + (1,) * (3 - len(t))


def scalar(text: str, arg, name: str) -> float | int:
    """A by-value argument from its string: a float, or an int as the argument's bits read signed (what the
    runtime packs into the argument's size)."""
    typ, _, val = text.partition(":") if ":" in text else ("", "", text)
    if typ:
        if typ not in TYPES:
            raise InvalidArgument(f"argument {name}: unknown type {typ!r} (use one of {', '.join(TYPES)})")
    else:
        base = arg.type_name.strip().rstrip("*").strip() if arg.type_name else ""
        typ = C_TYPES.get(base, "")
        if not typ:                               # no type in the metadata: its size and the spelling decide
            floaty = any(c in val.lower() for c in ".en") and not val.lower().startswith(("0x", "-0x"))
            if floaty:
                typ = {2: "f16", 4: "f32", 8: "f64"}.get(arg.size, "")
            else:
                typ = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}.get(arg.size, "")
            if not typ:
                raise InvalidArgument(f"argument {name}: a {arg.size}-byte value needs TYPE:VALUE")
    dt = np.dtype(TYPES[typ])
    if dt.itemsize != arg.size:
        raise InvalidArgument(f"argument {name} is {arg.size} bytes; {typ} is {dt.itemsize}")
    try:
        v = float(val) if dt.kind == "f" else int(val, 0)
    except ValueError:
        raise InvalidArgument(f"argument {name}: {val!r} is not a {typ} number") from None
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= v <= info.max:
            raise InvalidArgument(f"argument {name}: {v} does not fit {typ}")
    if dt.kind == "f":
        return float(dt.type(v))
    bits = 8 * dt.itemsize
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def buffer(dev, text: str, name: str) -> tuple[object, np.dtype, tuple]:
    """(Buffer, dtype, shape) of a pointer argument's string."""
    if text.startswith("size:"):
        n = _count(text[5:], name)
        arr = np.zeros(n, np.uint8)
    elif text.startswith("zeros:"):
        parts = text.split(":")
        if len(parts) != 3:
            raise InvalidArgument(f"argument {name}: zeros:N:DTYPE, e.g. zeros:1024:float32 (got {text!r})")
        try:
            dt = np.dtype(TYPES.get(parts[2], parts[2]))
        except TypeError:
            raise InvalidArgument(f"argument {name}: {parts[2]!r} is not a numpy dtype") from None
        arr = np.zeros(_count(parts[1], name), dt)
    elif text.endswith(".npy"):
        if not os.path.exists(text):
            raise InvalidArgument(f"argument {name}: no file {text}")
        try:
            arr = np.load(text, allow_pickle=False)
        except ValueError as e:
            raise InvalidArgument(f"argument {name}: {text} is not a plain .npy array ({e})") from None
        if arr.size == 0:
            raise InvalidArgument(f"argument {name}: {text} holds an empty array")
        arr = np.ascontiguousarray(arr)
    else:
        raise InvalidArgument(f"argument {name} is a pointer: give FILE.npy, size:NBYTES or zeros:N:DTYPE (got {text!r})")
    return dev.upload(arr), arr.dtype, arr.shape


def _count(text: str, name: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        n = 0
    if n < 1:
        raise InvalidArgument(f"argument {name}: {text!r} is not a positive count")
    return n


def run_kernel(path: str, kernel: str | None, arg_texts: list[str], grid: str, block: str,
               device: str | None = None, out: str | None = None) -> dict:
    """Load `path`, launch `kernel` once with the given arguments and wait; write buffers to `out`. Returns the
    launch record as a dict (stages in seconds, outputs written)."""
    import amdq
    from ..runtime.kernargs import LDS
    g, b = dims(grid, "grid"), dims(block, "block")
    data = Path(path).read_bytes()
    dev = amdq.open_device(device)
    try:
        co = amdq.compile(data.decode(), dev.arch) if path.endswith(".ll") else data
        prg = dev.load(co)
        if kernel is None:
            if len(prg.kernels) != 1:
                raise InvalidArgument(f"{path} has {len(prg.kernels)} kernels ({', '.join(prg.kernels)}): give --kernel")
            kernel = prg.kernels[0]
        if kernel not in prg.kernels:
            raise InvalidArgument(f"no kernel {kernel!r} in {path} (have: {', '.join(prg.kernels)})")
        k = prg[kernel]
        explicit = k.meta.explicit_args
        if len(arg_texts) != len(explicit):
            sig = ", ".join(f"{a.name or '?'}: {a.value_kind}" for a in explicit)
            raise InvalidArgument(f"kernel {kernel} takes {len(explicit)} arguments ({sig}), {len(arg_texts)} given")
        args, bufs = [], []
        for i, (a, text) in enumerate(zip(explicit, arg_texts)):
            name = a.name or f"#{i}"
            if a.value_kind == "global_buffer":
                buf, dt, shape = buffer(dev, text, name)
                args.append(buf)
                bufs.append((i, name, buf, dt, shape))
            elif a.value_kind == "dynamic_shared_pointer":
                if not text.startswith("lds:"):
                    raise InvalidArgument(f"argument {name} is a __local pointer: give lds:NBYTES")
                args.append(LDS(_count(text[4:], name)))
            elif a.value_kind == "by_value":
                args.append(scalar(text, a, name))
            else:
                raise InvalidArgument(f"argument {name} is a {a.value_kind}, which amdq run cannot pass")
        h = k(*args, grid=g, block=b, wait=True)
        rec = h if hasattr(h, "encode") else getattr(h, "record", None)
        if rec is None:
            raise InvalidArgument(f"the launch of {kernel} gave no record")
        t0 = time.perf_counter()
        outputs = []
        results = [(i, name, buf.numpy(dt, shape), ) for i, name, buf, dt, shape in bufs]
        download = time.perf_counter() - t0
        if out is not None:
            os.makedirs(out, exist_ok=True)
            for i, name, arr in results:
                p = os.path.join(out, f"{i}_{name}.npy")
                np.save(p, arr)
                outputs.append({"arg": i, "name": name, "path": p, "dtype": str(arr.dtype), "shape": list(arr.shape)})
        return {"kernel": kernel, "device": dev.name, "grid": list(g), "block": list(b),
                "stages": {"encode": rec.encode, "submit": rec.submit, "gpu": rec.gpu, "wait": rec.wait,
                           "download": download},
                "gpu_start": rec.gpu_start, "gpu_end": rec.gpu_end, "value": rec.value,
                "queue": rec.extra.get("queue"), "outputs": outputs}
    finally:
        dev.close()
