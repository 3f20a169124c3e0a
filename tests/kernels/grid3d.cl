/* check: out[(z*h + y)*w + x] = (z<<20)|(y<<10)|x and loc[...] = (lz<<20)|(ly<<10)|lx for a 3-D grid; w, h = global sizes x, y. */
__kernel void grid3d(__global uint *out, __global uint *loc) {
  uint x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  uint w = get_global_size(0), h = get_global_size(1);
  uint idx = (z * h + y) * w + x;
  out[idx] = (z << 20) | (y << 10) | x;
  loc[idx] = (get_local_id(2) << 20) | (get_local_id(1) << 10) | get_local_id(0);
}
