/* check: out[i] = total work-items in x (grid_size_x) for every i; groups[i] = number of work-groups in x. */
__kernel void grid_size(__global uint *out, __global uint *groups) {
  uint i = get_global_id(0);
  out[i] = __builtin_amdgcn_grid_size_x();
  groups[i] = get_num_groups(0);
}
