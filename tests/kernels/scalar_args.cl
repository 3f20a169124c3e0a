/* check: out[i] (double) = c + s + i + l + f + d + h + i(lane) for every lane; out_l[i] = l * (i+1) exactly as int64. */
__kernel void scalar_args(__global double *out, __global long *out_l, char c, short s, int iv, long l, float f, double d, half h,
                          uchar uc, ushort us) {
  int i = get_global_id(0);
  out[i] = (double)c + (double)s + (double)iv + (double)l + (double)f + d + (double)h + (double)uc + (double)us + (double)i;
  out_l[i] = l * (long)(i + 1);
}
