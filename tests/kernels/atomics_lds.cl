/* check: per work-group, LDS counters start at init[k], each lane applies op k with v[i]; old[k*N+i] = old value, final[group*13+k] = final LDS value. */
__kernel void atomics_lds(__global const int *init, __global const int *v, __global int *old, __global int *final, int N) {
  __local int s[13];
  __local uint *su = (__local uint *)s;
  int i = get_global_id(0), l = get_local_id(0);
  if (l < 13) s[l] = init[l];
  barrier(CLK_LOCAL_MEM_FENCE);
  int x = v[i];
  old[0 * N + i] = atom_add(&s[0], x);
  old[1 * N + i] = atom_sub(&s[1], x);
  old[2 * N + i] = atom_min(&s[2], x);
  old[3 * N + i] = atom_max(&s[3], x);
  old[4 * N + i] = (int)atom_min(&su[4], (uint)x);
  old[5 * N + i] = (int)atom_max(&su[5], (uint)x);
  old[6 * N + i] = atom_and(&s[6], x);
  old[7 * N + i] = atom_or(&s[7], x);
  old[8 * N + i] = atom_xor(&s[8], x);
  old[9 * N + i] = (int)__builtin_amdgcn_atomic_inc32(&su[9], 17u, __ATOMIC_RELAXED, "workgroup");
  old[10 * N + i] = (int)__builtin_amdgcn_atomic_dec32(&su[10], 17u, __ATOMIC_RELAXED, "workgroup");
  old[11 * N + i] = atom_xchg(&s[11], x);
  int e = l;
  __scoped_atomic_compare_exchange_n(&s[12], &e, x, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  old[12 * N + i] = e;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l < 13) final[get_group_id(0) * 13 + l] = s[l];
}
