/* check: ballot[i] = mask of lanes in i's wave with in[i] > 0 (uint, or ulong on wave64); first[i] = in[] of the wave's first active lane; perm[i] = in[] of lane (i+1)%32 within its 32-lane half (ds_bpermute takes a 5-bit lane index; wave64 halves permute separately). */
/* gfx942 is wave64 only: __builtin_amdgcn_ballot_w32 does not exist there, ballot_w64 is used instead. */
#if __AMDGCN_WAVEFRONT_SIZE == 64
typedef ulong wmask_t;
#define BALLOT(c) __builtin_amdgcn_ballot_w64(c)
#else
typedef uint wmask_t;
#define BALLOT(c) __builtin_amdgcn_ballot_w32(c)
#endif
__kernel void wave_ops(__global const int *in, __global wmask_t *ballot, __global int *first, __global int *perm) {
  int i = get_global_id(0);
  int v = in[i];
  uint lane = __builtin_amdgcn_mbcnt_lo(~0u, 0u);
#if __AMDGCN_WAVEFRONT_SIZE == 64
  lane = __builtin_amdgcn_mbcnt_hi(~0u, lane);
#endif
  ballot[i] = BALLOT(v > 0);
  first[i] = __builtin_amdgcn_readfirstlane(v);
  perm[i] = __builtin_amdgcn_ds_bpermute((int)(((lane + 1) % __AMDGCN_WAVEFRONT_SIZE) * 4), v);
}
