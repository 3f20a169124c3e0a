/* Never ends unless flag[0] becomes nonzero (nobody sets it): a hung kernel. */
__kernel void spin(volatile __global int *flag, __global int *out) {
  int n = 0;
  while (flag[0] == 0) n++;
  out[0] = n;
}
