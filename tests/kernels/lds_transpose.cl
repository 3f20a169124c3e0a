/* check: out = in.T for a (h, w) uint matrix, both multiples of 16; block=(16,16), grid=(w/16, h/16). */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void lds_transpose(__global const uint *in, __global uint *out, int w, int h) {
  __local uint tile[16][17];
  int tx = get_local_id(0), ty = get_local_id(1);
  int bx = get_group_id(0) * 16, by = get_group_id(1) * 16;
  tile[ty][tx] = in[(by + ty) * w + bx + tx];
  barrier(CLK_LOCAL_MEM_FENCE);
  out[(bx + ty) * h + by + tx] = tile[tx][ty];
}
