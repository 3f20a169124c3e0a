/* check (uint32 wraparound): o[8i+k] = a+b, a*b, mul_hi(a,b) signed, popcount(a), clz(a) (32 for 0), a>>(b&31) arith, rotate left(a,b&31), (a<b ? min : max)(a,b) ^ (a&~b). */
__kernel void int_ops(__global const int *a, __global const int *b, __global int *o) {
  int i = get_global_id(0);
  int x = a[i], y = b[i];
  o[8 * i + 0] = x + y;
  o[8 * i + 1] = x * y;
  o[8 * i + 2] = (int)(((long)x * (long)y) >> 32);
  o[8 * i + 3] = __builtin_popcount(x);
  o[8 * i + 4] = x ? __builtin_clz(x) : 32;
  o[8 * i + 5] = x >> (y & 31);
  o[8 * i + 6] = (int)(((uint)x << (y & 31)) | ((uint)x >> ((32 - (y & 31)) & 31)));
  o[8 * i + 7] = (x < y ? (x < y ? x : y) : (x > y ? x : y)) ^ (x & ~y);
}
