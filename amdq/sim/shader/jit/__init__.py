"""A JIT for the shader core: basic blocks of real AMDGPU code translated to host machine code (llvmlite).

- ir.py: which instructions translate and the IR of each; runs of VALU instructions fused into one loop over a
  wave's 8-lane chunks (registers and lane masks kept in SSA values across the run).
- block.py: a block's phases, wave and lane loops, memory and branches; a region's module, with its chain function
  (compiled code goes on from block to block, loop back-edges included, while every wave of the call stays at one
  PC of the region).
- compiled.py: IR -> machine code, cached in memory and on disk (keyed by the code bytes).
- library.py: the first tier's shared functions (tile loop, range lookup, memory accesses), compiled once per wave
  size and imported by every region (loader.py binds the calls when it places the region).
- loader.py: relocatable objects placed in executable memory without LLVM (what a warm process loads).
- runtime.py: the scheduler's hook (core.Batch.run asks for the block at a PC, falls back to the interpreter), and
  what gets compiled when: code is interpreted first, and compiled once it is hot (two tiers, compiled.py).

The interpreter stays the reference: the JIT's results are the interpreter's, bit for bit (tests/test_jit.py).
The JIT is on by default; AMDQ_SIM_JIT=0 forces the interpreter.
"""
from __future__ import annotations

from .runtime import enabled, prepare, settle, step

__all__ = ["enabled", "prepare", "settle", "step"]
