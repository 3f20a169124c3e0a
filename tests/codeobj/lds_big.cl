/* 40 KiB of static LDS: fits every supported target. */
__kernel void lds_big(__global float *out) {
  __local float buf[10240];
  uint i = __builtin_amdgcn_workitem_id_x();
  buf[i] = (float)i;
  __builtin_amdgcn_s_barrier();
  out[i] = buf[10239 - i];
}
