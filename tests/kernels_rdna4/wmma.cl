/* D = A (MxK) x B (KxN) + C (MxN), row-major, by gfx12 wave32 WMMAs: one 16x16 tile of D per wave, K in steps
   of 16. The gfx12 layout (RDNA4 ISA guide): lane t holds row (A) / column (B) t%16 at K = 8*(t/16) + e,
   e = 0..7; C/D element e of lane t is D[8*(t/16) + e][t%16]. TA: the A/B element type as stored, VA: the
   8-element operand vector, TC/VC: the accumulator element and vector types, NC: its elements per lane. */
#if __AMDGCN_WAVEFRONT_SIZE__ == 32
#define TILE_LOOP(TA, VA, TC, VC, CALL)                                                              \
  uint t = get_local_id(0) % 32, i = t % 16, g = t / 16;                                          \
  uint wave = get_global_id(0) / 32, tn = wave % (N / 16), tm = wave / (N / 16);                  \
  VC acc;                                                                                          \
  for (uint e = 0; e < 8; e++) acc[e] = c[(16 * tm + 8 * g + e) * N + 16 * tn + i];                \
  for (uint k0 = 0; k0 < K; k0 += 16) {                                                            \
    VA x, y;                                                                                       \
    for (uint e = 0; e < 8; e++) {                                                                 \
      x[e] = a[(16 * tm + i) * K + k0 + 8 * g + e];                                                \
      y[e] = b[(k0 + 8 * g + e) * N + 16 * tn + i];                                                \
    }                                                                                              \
    acc = CALL;                                                                                    \
  }                                                                                                \
  for (uint e = 0; e < 8; e++) d[(16 * tm + 8 * g + e) * N + 16 * tn + i] = acc[e];

#define KERNEL(NAME, TA, VA, TC, VC, CALL)                                                           \
__kernel void NAME(__global const TA *a, __global const TA *b, __global const TC *c, __global TC *d, \
                   uint M, uint N, uint K) { TILE_LOOP(TA, VA, TC, VC, CALL) }

KERNEL(wmma_f32_f16, half, half8, float, float8, __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(x, y, acc))
KERNEL(wmma_f32_bf16, short, short8, float, float8, __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(x, y, acc))
KERNEL(wmma_f16_f16, half, half8, half, half8, __builtin_amdgcn_wmma_f16_16x16x16_f16_w32_gfx12(x, y, acc))
KERNEL(wmma_bf16_bf16, short, short8, short, short8, __builtin_amdgcn_wmma_bf16_16x16x16_bf16_w32_gfx12(x, y, acc))
/* i8: A signed, B unsigned (NEG_LO[0] = 1, NEG_LO[1] = 0), no clamp; 8 bytes per lane in 2 VGPRs */
KERNEL(wmma_i32_iu8, char, char8, int, int8,
       __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, as_int2(x), false, as_int2(y), acc, false))

#else
/* wave64 (LLVM 19 has the _w64_gfx12 forms: 4 elements per lane of A/B and of C/D); its layout is not modelled */
__kernel void wmma_f32_f16_w64(__global const half4 *a, __global const half4 *b, __global float4 *d) {
  uint t = get_local_id(0);
  d[t] = __builtin_amdgcn_wmma_f32_16x16x16_f16_w64_gfx12(a[t], b[t], (float4)(0.0f));
}
#endif
