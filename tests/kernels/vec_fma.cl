/* check: c[i] = fma(a[i], b[i], c_in[i]) * 2 - a[i] per float4 component; d[i] = a.x*b.y + a.w (separate mul+add), n float4s. */
__kernel void vec_fma(__global const float4 *a, __global const float4 *b, __global float4 *c, __global float *d, int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  float4 x = a[i], y = b[i];
  c[i] = fma(x, y, c[i]) * 2.0f - x;
  d[i] = x.x * y.y + x.w;
}
