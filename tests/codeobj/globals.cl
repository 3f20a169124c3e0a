__global int table[4] = {10, 20, 30, 40};
__global int *ptr = &table[1];
__global long addr_of_table = 0;
__attribute__((noinline)) int twice(int x) { return 2 * x + table[x & 3]; }
__kernel void use_globals(__global int *out) {
  int i = __builtin_amdgcn_workitem_id_x();
  out[i] = twice(i) + ptr[i & 1];
}
