/* check: o[i] = (a > b ? a : b) * (isnan(a) ? 0 : 1) + (a == b) + |b| + copysign(a, b) as float; m[i] = count of (a<b, a<=b, a>=b, isinf(a), isfinite(b)). */
__kernel void select_cmp(__global const float *a, __global const float *b, __global float *o, __global int *m) {
  int i = get_global_id(0);
  float x = a[i], y = b[i];
  o[i] = (x > y ? x : y) * (__builtin_isnan(x) ? 0.0f : 1.0f) + (x == y ? 1.0f : 0.0f) + fabs(y) + __builtin_copysignf(x, y);
  m[i] = (x < y) + (x <= y) + (x >= y) + __builtin_isinf(x) + __builtin_isfinite(y);
}
