/* check: out[group] = sum of in[group*256 .. group*256+255] (float, tree order), block=256. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void lds_reduce(__global const float *in, __global float *out) {
  __local float tmp[256];
  uint l = get_local_id(0);
  tmp[l] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = 128; s > 0; s >>= 1) {
    if (l < s) tmp[l] += tmp[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) out[get_group_id(0)] = tmp[0];
}
