/* check: sum[i % 4] += x[i] in f64 by device-scope atomics (global_atomic_add_f64 with -munsafe-fp-atomics). */
__kernel void atomic_f64(__global const double *x, __global double *sum, __global double *old) {
  uint i = get_global_id(0);
  old[i] = __scoped_atomic_fetch_add(&sum[i % 4], x[i], __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
}
