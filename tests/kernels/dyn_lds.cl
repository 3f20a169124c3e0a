/* check: with a dynamic __local buffer of block floats, out[i] = in[group*block + block-1-l] (reverse within the work-group). */
__kernel void dyn_lds(__global const float *in, __global float *out, __local float *buf) {
  uint l = get_local_id(0), n = get_local_size(0);
  buf[l] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  out[get_global_id(0)] = buf[n - 1 - l];
}
