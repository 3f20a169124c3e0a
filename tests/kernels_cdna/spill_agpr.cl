/* Register pressure: 48 accumulators live across a loop in a kernel allowed 40 VGPRs. On gfx90a and later
   (unified VGPR file) LLVM spills the excess to AccVGPRs (v_accvgpr_write / v_accvgpr_read) before scratch,
   if the kernel may use AccVGPRs at all: LLVM 19 infers it may not unless an AGPR operand appears (the inline
   asm under AMDQ_AGPR_ASM); for LLVM 22 tests/clang.py sets "amdgpu-agpr-alloc" instead (no inline asm there). */
#define NACC 48
__attribute__((amdgpu_num_vgpr(40)))
__kernel void spill_agpr(__global const float *x, __global float *out, int n) {
  int i = get_global_id(0);
#ifdef AMDQ_AGPR_ASM
  __asm__ volatile("; an AGPR operand: this kernel may use AccVGPRs" : : "a"(0));
#endif
  float acc[NACC];
  for (int j = 0; j < NACC; j++) acc[j] = x[i * NACC + j];
  for (int t = 0; t < n; t++) {
    float s = x[(i + t) % 64];
    for (int j = 0; j < NACC; j++) acc[j] = acc[j] * s + acc[(j + 1) % NACC];
  }
  for (int j = 0; j < NACC; j++) out[i * NACC + j] = acc[j];
}
