#!/usr/bin/env python3
"""Compile the Triton test kernels (tests/triton_kernels.py) offline for AMD targets and commit the results, so the
suite runs Triton's code objects unmodified even where triton is not installed.

    pip install triton && python scripts/gen_triton_kernels.py [--arch gfx1100 ...] [--out tests/fixtures/triton]

Writes <kernel>.<arch>.hsaco (Triton's `hsaco`, byte for byte) and <kernel>.<arch>.json: what Triton's HIP
launcher needs to launch it (num_warps, warp_size, shared, global/profile scratch sizes), the signature and
constexprs it was compiled with, and the triton version. Compiling needs no GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

DEFAULT_ARCHS = ("gfx1100", "gfx1201")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", help=f"target (repeatable; default {', '.join(DEFAULT_ARCHS)})")
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "triton"))
    args = ap.parse_args(argv)
    import triton
    import triton_kernels as tk
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for arch in args.arch or DEFAULT_ARCHS:
        for name in tk.KERNELS:
            k, meta = tk.compile_for(name, arch)
            stem = out / f"{name}.{arch}"
            Path(f"{stem}.hsaco").write_bytes(k.asm["hsaco"])
            Path(f"{stem}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
            print(f"wrote {stem}.hsaco ({len(k.asm['hsaco'])} bytes, shared {meta['shared']}) with triton "
                  f"{triton.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
