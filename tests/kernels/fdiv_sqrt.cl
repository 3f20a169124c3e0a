/* check (bit-exact, IEEE round-to-nearest): q[i] = a/b, s[i] = sqrt(a), d[i] = (double)a / b, ds[i] = sqrt((double)a). */
// flags: -cl-fp32-correctly-rounded-divide-sqrt
__kernel void fdiv_sqrt(__global const float *a, __global const float *b, __global float *q, __global float *s,
                        __global double *d, __global double *ds) {
  int i = get_global_id(0);
  q[i] = a[i] / b[i];
  s[i] = sqrt(a[i]);
  d[i] = (double)a[i] / (double)b[i];
  ds[i] = sqrt((double)a[i]);
}
