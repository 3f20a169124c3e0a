/* check: a[i] = in[] of lane i-1 within its row of 16 (row_shr:1, lane 0 of a row keeps old=-1); b[i] = in[] of the lane with its id xor 1 inside each quad (quad_perm [1,0,3,2]); c[i] = row_ror:4 of in. */
__kernel void dpp(__global const int *in, __global int *a, __global int *b, __global int *c) {
  int i = get_global_id(0);
  int v = in[i];
  a[i] = __builtin_amdgcn_update_dpp(-1, v, 0x111, 0xf, 0xf, false);
  b[i] = __builtin_amdgcn_mov_dpp(v, 0xb1, 0xf, 0xf, false);
  c[i] = __builtin_amdgcn_update_dpp(0, v, 0x124, 0xf, 0xf, true);
}
