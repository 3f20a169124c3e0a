/* check: acc[0] += sum(x) via __opencl_atomic_fetch_add, acc[1] += sum(x) via the global fadd builtin, acc[2] += per-group LDS float sums; old[i] = value before lane i's add on acc[0]. */
__kernel void atomics_float(__global atomic_float *acc, __global const float *x, __global float *old) {
  __local float s;
  int i = get_global_id(0);
  if (get_local_id(0) == 0) s = 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  old[i] = __opencl_atomic_fetch_add(&acc[0], x[i], __ATOMIC_RELAXED, __OPENCL_MEMORY_SCOPE_DEVICE);
  __builtin_amdgcn_global_atomic_fadd_f32((__global float *)&acc[1], x[i]);
  __scoped_atomic_fetch_add(&s, x[i], __ATOMIC_RELAXED, __MEMORY_SCOPE_WRKGRP);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (get_local_id(0) == 0) __opencl_atomic_fetch_add(&acc[2], s, __ATOMIC_RELAXED, __OPENCL_MEMORY_SCOPE_DEVICE);
}
