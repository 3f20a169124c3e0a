/* Byte and short vectors: on gfx9 clang selects SDWA forms (v_add_u16_sdwa, v_max_u16_sdwa, v_cmp_lt_i16_sdwa,
   v_or_b32_sdwa...). check: a += b; b = max(a, b) * 3; c = c * d + c; d = (c.y >> 3, d.x << 2); e = |e|. */
__kernel void sdwa(__global uchar4 *a, __global uchar4 *b, __global short2 *c, __global short2 *d, __global char4 *e) {
  int i = get_global_id(0);
  a[i] = a[i] + b[i];
  uchar4 m = a[i] > b[i] ? a[i] : b[i];
  b[i] = m * (uchar4)(3);
  c[i] = c[i] * d[i] + c[i];
  d[i] = (short2)(c[i].y >> 3, d[i].x << 2);
  e[i] = e[i] > (char4)(0) ? e[i] : -e[i];
}
