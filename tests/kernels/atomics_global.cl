/* check: each lane i applies op k (k = 0..12) to g[k] with value v[i] (+ cmpxchg expecting i) and writes the old value to old[k*N+i]; final g and the multiset of old values must be consistent with some order. */
__kernel void atomics_global(__global int *g, __global uint *gu, __global long *g64, __global const int *v, __global int *old, int N) {
  int i = get_global_id(0);
  int x = v[i];
  old[0 * N + i] = atom_add(&g[0], x);
  old[1 * N + i] = atom_sub(&g[1], x);
  old[2 * N + i] = atom_min(&g[2], x);
  old[3 * N + i] = atom_max(&g[3], x);
  old[4 * N + i] = (int)atom_min(&gu[4], (uint)x);
  old[5 * N + i] = (int)atom_max(&gu[5], (uint)x);
  old[6 * N + i] = atom_and(&g[6], x);
  old[7 * N + i] = atom_or(&g[7], x);
  old[8 * N + i] = atom_xor(&g[8], x);
  old[9 * N + i] = (int)__builtin_amdgcn_atomic_inc32(&gu[9], 17u, __ATOMIC_RELAXED, "agent");
  old[10 * N + i] = (int)__builtin_amdgcn_atomic_dec32(&gu[10], 17u, __ATOMIC_RELAXED, "agent");
  old[11 * N + i] = atom_xchg(&g[11], x);
  int e = i;
  __scoped_atomic_compare_exchange_n(&g[12], &e, x, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  old[12 * N + i] = e;
  /* 64-bit: add, max, cmpxchg */
  g64[i + 3] = atom_add(&g64[0], (long)x << 33) + atom_max(&g64[1], (long)x);
  long e64 = 0;
  __scoped_atomic_compare_exchange_n(&g64[2], &e64, (long)i + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
}
