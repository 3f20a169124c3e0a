/* check: C = A @ B for n x n float matrices (n a multiple of 16), block=(16,16), grid=(n/16, n/16). */
#define TS 16
__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void matmul_tiled(__global const float *A, __global const float *B, __global float *C, int n) {
  __local float As[TS][TS], Bs[TS][TS];
  int tx = get_local_id(0), ty = get_local_id(1);
  int col = get_group_id(0) * TS + tx, row = get_group_id(1) * TS + ty;
  float acc = 0.0f;
  for (int t = 0; t < n; t += TS) {
    As[ty][tx] = A[row * n + t + tx];
    Bs[ty][tx] = B[(t + ty) * n + col];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TS; k++) acc = fma(As[ty][k], Bs[k][tx], acc);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  C[row * n + col] = acc;
}
