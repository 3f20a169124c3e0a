/* check (uint64 wraparound): o[4i..4i+3] = a*b + c, (a>>s arith) ^ (b<<s), (ulong)a>>s, umulhi(a,b) + (a<b) + 7*(a==c); s = i & 63. */
static inline ulong umulhi64(ulong a, ulong b) {
  ulong al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  ulong m = ah * bl + ((al * bl) >> 32), n = al * bh + (m & 0xffffffffu);
  return ah * bh + (m >> 32) + (n >> 32);
}
__kernel void int64(__global const long *a, __global const long *b, __global const long *c, __global long *o) {
  int i = get_global_id(0);
  long x = a[i], y = b[i], z = c[i];
  int s = i & 63;
  o[4 * i + 0] = x * y + z;
  o[4 * i + 1] = (x >> s) ^ (y << s);
  o[4 * i + 2] = (long)((ulong)x >> s);
  o[4 * i + 3] = (long)umulhi64((ulong)x, (ulong)y) + (x < y ? 1 : 0) + (x == z ? 7 : 0);
}
