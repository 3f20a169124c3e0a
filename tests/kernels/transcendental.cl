/* check (relative error <= 2^-20): e[i] = exp(x), l[i] = log(|x|+1), r[i] = rsqrt(|x|+1), n[i] = exp2(x)*log2(|x|+1) via the v_exp_f32/v_log_f32 approximations. */
__kernel void transcendental(__global const float *x, __global float *e, __global float *l, __global float *r, __global float *n) {
  int i = get_global_id(0);
  float v = x[i], p = fabs(v) + 1.0f;
  e[i] = __builtin_expf(v);
  l[i] = __builtin_logf(p);
  r[i] = __builtin_amdgcn_rsqf(p);
  n[i] = __builtin_amdgcn_exp2f(v) * __builtin_amdgcn_logf(p);
}
