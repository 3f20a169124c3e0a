/* check: out[i] = sum_k t[(idx[i] + k) % 37] where t[k] = in[i] * k + k*k (a private array indexed at run time). */
__kernel void scratch_array(__global const int *in, __global const int *idx, __global int *out) {
  int i = get_global_id(0);
  volatile int t[37];
  for (int k = 0; k < 37; k++) t[k] = in[i] * k + k * k;
  int s = 0, j = idx[i];
  for (int k = 0; k < 37; k++) s += t[(j + k) % 37];
  out[i] = s;
}
