"""The Triton kernels of the suite and how they are compiled for AMD targets (imported only where triton is
installed: by tests/test_triton.py's live tests and by scripts/gen_triton_kernels.py)."""
from __future__ import annotations

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


KERNELS = {
    "add_kernel": (add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                "BLOCK": "constexpr"}, {"BLOCK": 256}, {}),
    "matmul_kernel": (matmul_kernel, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
                                      "K": "i32", "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32",
                                      "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
                      {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, {"num_warps": 4}),
}


def compile_for(name: str, arch: str):
    """(Triton's compiled kernel, the launch facts recorded beside its hsaco) for target hip/`arch`."""
    fn, sig, consts, opts = KERNELS[name]
    k = triton.compile(ASTSource(fn, sig, constexprs=consts), target=GPUTarget("hip", arch, 32), options=opts)
    md = k.metadata
    meta = {"name": md.name, "arch": arch, "triton_version": triton.__version__, "num_warps": md.num_warps,
            "warp_size": md.warp_size, "shared": md.shared, "global_scratch_size": md.global_scratch_size,
            "global_scratch_align": md.global_scratch_align, "profile_scratch_size": md.profile_scratch_size,
            "profile_scratch_align": md.profile_scratch_align, "signature": sig, "constexprs": consts,
            "args": [a for a, t in sig.items() if t != "constexpr"]}
    return k, meta
