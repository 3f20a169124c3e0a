/* Writes through a pointer argument; pass an unmapped address to make the GPU fault. */
__kernel void poke(__global int *p) { p[get_global_id(0)] = 1; }
