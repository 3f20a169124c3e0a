/* check: out[i] = collatz steps of n[i] (n[i] >= 1, capped at 1000), and acc[i] = sum_{k<n[i]%97} k*k ^ k (per-lane trip counts). */
__kernel void divergent_loop(__global const uint *n, __global uint *out, __global uint *acc) {
  int i = get_global_id(0);
  uint x = n[i], steps = 0;
  while (x != 1 && steps < 1000) {
    x = (x & 1) ? 3 * x + 1 : x >> 1;
    steps++;
  }
  out[i] = steps;
  uint s = 0, m = n[i] % 97;
  for (uint k = 0; k < m; k++) {
    if (k & 1) s += k * k; else s ^= k;
  }
  acc[i] = s;
}
