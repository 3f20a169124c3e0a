/* out[i] = sum over a private array of N ints indexed at run time (scratch of 4*N bytes per lane). */
#ifndef N
#define N 16
#endif
__kernel void priv(__global const int *idx, __global int *out) {
  int i = get_global_id(0);
  volatile int t[N];
  for (int k = 0; k < N; k++) t[k] = k * i;
  int s = 0;
  for (int k = 0; k < N; k++) s += t[(idx[i] + k) % N];
  out[i] = s;
}
