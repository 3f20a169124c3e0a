/* check: out[i] = bf16 bits (round-to-nearest-even of a[i]*b[i] computed in f32 from bf16 inputs); f[i] = float from bf16 in[i] bits. */
static inline float bf16_to_f32(ushort h) { return as_float((uint)h << 16); }
static inline ushort f32_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__kernel void bf16(__global const ushort *a, __global const ushort *b, __global ushort *out, __global float *f) {
  int i = get_global_id(0);
  float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
  out[i] = f32_to_bf16(x * y + 1.0f);
  f[i] = x;
}
