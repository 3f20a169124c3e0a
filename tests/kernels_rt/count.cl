/* Each launch adds `inc` to c[0] (one work-item); used to count launches through the ring. */
__kernel void count(__global int *c, int inc) { if (get_global_id(0) == 0) c[0] += inc; }
