/* check: o[i] = half(fma(a,b,c) + a*b - c/2, max(a,b)); f[i] = float(a)*float(b); h2[i] = packed (a+b, a*b) as half2; i16[i] = (short)a. */
__kernel void half_math(__global const half *a, __global const half *b, __global const half *c, __global half *o,
                        __global float *f, __global half2 *h2, __global short *i16, __global half *fromf, __global const float *src) {
  int i = get_global_id(0);
  half x = a[i], y = b[i], z = c[i];
  half r = fma(x, y, z) + x * y - z * (half)0.5f;
  o[i] = r > x ? r : (x > y ? x : y);
  f[i] = (float)x * (float)y;
  half2 p = (half2)(x, y), q = (half2)(y, z);
  h2[i] = p * q + p;
  i16[i] = (short)x;
  fromf[i] = (half)src[i];
}
