#!/usr/bin/env python3
"""List the opcodes of the CDNA tables (amdq.hw.isa, CDNA4) that LLVM 19's gfx942 disassembler does not decode:
the candidates for amdq/hw/isa/gfx942.py's ABSENT, which gfx950.py names (review each: a few need a literal or
another operand form).

    python scripts/probe_gfx942_opcodes.py [--llvm-mc llvm-mc-19]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from amdq.hw import isa  # noqa: E402
from amdq.hw.isa import cdna  # noqa: E402

# operand field -> value: VGPRs v0/v8/v16 for vector sources, VCC for a carry-out, s[0:...] elsewhere
VALUES = {"src0": 256, "src1": 264, "src2": 272, "vsrc1": 8, "vdst": 0, "addr": 0, "data": 8, "data0": 8,
          "data1": 16, "vaddr": 0, "vdata": 8}
ENCODINGS = ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD", "VOP3P", "DS",
             "FLAT", "GLOBAL", "SCRATCH", "MUBUF", "MTBUF")


def probes() -> list[tuple[str, int, str, bytes]]:
    """(encoding, opcode, mnemonic, instruction bytes) for every opcode, with only the operands its row names."""
    enc_tab = isa.encodings("cdna3")
    out = []
    for enc in ENCODINGS:
        e = enc_tab[enc]
        for op, row in cdna.OPCODES[enc + "Op"].items():
            names = {f[0] for f in row[1]}
            f = {k: v for k, v in VALUES.items() if k in names and k in e.fields}
            if enc == "VOP3SD":
                f["sdst"] = 106
            if enc in ("GLOBAL", "SCRATCH"):
                f["saddr"] = 0x7F
            if enc in ("MUBUF", "MTBUF"):
                f["soffset"] = 0x80
            if enc == "MTBUF":
                f.update(dfmt=4, nfmt=4)
            if enc == "SMEM":
                f["imm"] = 1
            if enc == "VOP3P" and not row[0].startswith(("V_MFMA", "V_SMFMAC", "V_ACCVGPR")):
                f.update(opsel_hi=3, opsel_hi2=1)
            out.append((enc, op, row[0], e.encode(op=op, **f)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llvm-mc", default="llvm-mc-19")
    args = ap.parse_args()

    def rejected(p) -> bool:
        text = " ".join(f"0x{b:02x}" for b in p[3])
        r = subprocess.run([args.llvm_mc, "--disassemble", "-triple=amdgcn", "-mcpu=gfx942"], input=text,
                           capture_output=True, text=True)
        return "invalid instruction encoding" in r.stderr

    ps = probes()
    with ThreadPoolExecutor(2) as ex:
        for p, bad in zip(ps, ex.map(rejected, ps)):
            if bad:
                print(f"{p[0]}Op {p[1]:4d} {p[2]}")


if __name__ == "__main__":
    main()
