/* check: o[i] = fma(a,b,c) + a*b - c + min(a,b) + floor(a) + (double)(int)b + trunc(c) (double); f[i] = (float)a[i]; g[i] = (double)(float)c. */
__kernel void f64_math(__global const double *a, __global const double *b, __global const double *c, __global double *o,
                       __global float *f, __global double *g) {
  int i = get_global_id(0);
  double x = a[i], y = b[i], z = c[i];
  o[i] = fma(x, y, z) + x * y - z + fmin(x, y) + floor(x) + (double)(int)y + trunc(z);
  f[i] = (float)x;
  g[i] = (double)(float)z;
}
