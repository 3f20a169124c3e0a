/* D = A x B + C with one MFMA per wave64; operands placed per the documented CDNA3 layouts (mfma.py):
   A[i][k] in lane i + M*(k/E) element k%E; B[k][j] in lane j + N*(k/E) element k%E;
   C/D[i][j] in lane j + N*((i/4)%G) register 4*(i/(4G)) + i%4 (G = 64/M lane groups, E = K/G). */
#define BODY(NAME, TA, TC, CT, M, K, NR, ARG, CALL)                                                  \
__kernel void NAME(__global const TA *a, __global const TA *b, __global const TC *c, __global TC *d) { \
  uint l = get_local_id(0), G = 64 / M, E = K / G;                                                  \
  TA xs[8], ys[8];                                                                                  \
  for (uint j = 0; j < E; j++) {                                                                    \
    xs[j] = a[(l % M) * K + E * (l / M) + j];                                                       \
    ys[j] = b[(E * (l / M) + j) * M + l % M];                                                       \
  }                                                                                                 \
  CT acc; TC *pc = (TC *)&acc;                                                                      \
  for (uint r = 0; r < NR; r++) pc[r] = c[(4 * G * (r / 4) + 4 * (l / M) + r % 4) * M + l % M];     \
  acc = CALL(ARG(xs), ARG(ys), acc, 0, 0, 0);                                                       \
  for (uint r = 0; r < NR; r++) d[(4 * G * (r / 4) + 4 * (l / M) + r % 4) * M + l % M] = pc[r];     \
}
#define S1(v) v[0]
#define H4(v) (half4)(v[0], v[1], v[2], v[3])
#define B4(v) (short4)(v[0], v[1], v[2], v[3])
#define C8(v) as_long((char8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]))
BODY(mfma_f32_16x16x4_f32, float, float, float4, 16, 4, 4, S1, __builtin_amdgcn_mfma_f32_16x16x4f32)
BODY(mfma_f32_32x32x2_f32, float, float, float16, 32, 2, 16, S1, __builtin_amdgcn_mfma_f32_32x32x2f32)
BODY(mfma_f32_16x16x16_f16, half, float, float4, 16, 16, 4, H4, __builtin_amdgcn_mfma_f32_16x16x16f16)
BODY(mfma_f32_32x32x8_f16, half, float, float16, 32, 8, 16, H4, __builtin_amdgcn_mfma_f32_32x32x8f16)
BODY(mfma_f32_16x16x16_bf16, short, float, float4, 16, 16, 4, B4, __builtin_amdgcn_mfma_f32_16x16x16bf16_1k)
BODY(mfma_f32_32x32x8_bf16, short, float, float16, 32, 8, 16, B4, __builtin_amdgcn_mfma_f32_32x32x8bf16_1k)
BODY(mfma_i32_16x16x32_i8, char, int, int4, 16, 32, 4, C8, __builtin_amdgcn_mfma_i32_16x16x32_i8)
BODY(mfma_i32_32x32x16_i8, char, int, int16, 32, 16, 16, C8, __builtin_amdgcn_mfma_i32_32x32x16_i8)

/* A chain of MFMAs: D (16x16) = A (16xK) B (Kx16) over K/16 steps, A and B staged through LDS. */
__kernel void mfma_chain_f16(__global const half *a, __global const half *b, __global float *d, uint k) {
  __local half ta[16 * 16], tb[16 * 16];
  uint l = get_local_id(0);
  float4 acc = (float4)(0.0f);
  for (uint k0 = 0; k0 < k; k0 += 16) {
    for (uint e = l; e < 256; e += 64) {
      ta[e] = a[(e / 16) * k + k0 + e % 16];
      tb[e] = b[(k0 + e / 16) * 16 + e % 16];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    half4 x, y;
    for (uint j = 0; j < 4; j++) {
      x[j] = ta[(l % 16) * 16 + 4 * (l / 16) + j];
      y[j] = tb[(4 * (l / 16) + j) * 16 + l % 16];
    }
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, acc, 0, 0, 0);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint r = 0; r < 4; r++) d[(4 * (l / 16) + r) * 16 + l % 16] = acc[r];
}
