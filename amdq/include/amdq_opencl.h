/* amdq's OpenCL C prelude: amdq.compile(src, lang="opencl") force-includes it (clang -include, so the
   user's line numbers are unchanged). Work-item functions, barrier and atomics for OpenCL C built with
   -nogpulib: clang's AMDGPU builtins, no device library. The builtins are clang's (clang's
   BuiltinsAMDGPU.def); the index arithmetic is OpenCL's (OpenCL C 2.0, 6.13.1). */
#ifndef AMDQ_OPENCL_H
#define AMDQ_OPENCL_H
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
static inline uint amdq_lid(uint d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z();
}
static inline uint amdq_gid(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z();
}
static inline uint amdq_lsz(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x() : d == 1 ? __builtin_amdgcn_workgroup_size_y() : __builtin_amdgcn_workgroup_size_z();
}
static inline uint amdq_gsz(uint d) {
  return d == 0 ? __builtin_amdgcn_grid_size_x() : d == 1 ? __builtin_amdgcn_grid_size_y() : __builtin_amdgcn_grid_size_z();
}
#define get_local_id(d) amdq_lid(d)
#define get_group_id(d) amdq_gid(d)
#define get_local_size(d) amdq_lsz(d)
#define get_global_size(d) amdq_gsz(d)
#define get_num_groups(d) (amdq_gsz(d) / amdq_lsz(d))
#define get_global_id(d) (amdq_gid(d) * amdq_lsz(d) + amdq_lid(d))
/* A work-group barrier that also orders LDS/global memory, as OpenCL's barrier() does. */
#define barrier(f) do { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); \
                        __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"); } while (0)
/* Relaxed device-scope atomics on plain pointers (global or local). */
#define atom_add(p, v) __scoped_atomic_fetch_add((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_sub(p, v) __scoped_atomic_fetch_sub((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_min(p, v) __scoped_atomic_fetch_min((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_max(p, v) __scoped_atomic_fetch_max((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_and(p, v) __scoped_atomic_fetch_and((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_or(p, v) __scoped_atomic_fetch_or((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_xor(p, v) __scoped_atomic_fetch_xor((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#define atom_xchg(p, v) __scoped_atomic_exchange_n((p), (v), __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE)
#endif
