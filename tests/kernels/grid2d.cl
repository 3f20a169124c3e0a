/* check: out[y*w + x] = x * 1000 + y for the global (x, y) id of every work-item of a 2-D grid (w = global size x). */
__kernel void grid2d(__global int *out) {
  uint x = get_global_id(0), y = get_global_id(1);
  out[y * get_global_size(0) + x] = x * 1000 + y;
}
