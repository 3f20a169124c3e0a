/* check (C semantics, truncating; b[i] != 0): q = a/b, r = a%b for int32, uint32, int64 and uint64. */
__kernel void intdiv(__global const int *a, __global const int *b, __global int *q, __global int *r,
                     __global uint *uq, __global uint *ur, __global const long *a64, __global const long *b64, __global long *q64,
                     __global ulong *uq64) {
  int i = get_global_id(0);
  q[i] = a[i] / b[i];
  r[i] = a[i] % b[i];
  uq[i] = (uint)a[i] / (uint)b[i];
  ur[i] = (uint)a[i] % (uint)b[i];
  q64[2 * i] = a64[i] / b64[i];
  q64[2 * i + 1] = a64[i] % b64[i];
  uq64[2 * i] = (ulong)a64[i] / (ulong)b64[i];
  uq64[2 * i + 1] = (ulong)a64[i] % (ulong)b64[i];
}
