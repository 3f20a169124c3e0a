/* Work-item functions for OpenCL C built with -nogpulib: clang's AMDGPU builtins, no device library. */
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
#define get_local_id(d) amdq_lid(d)
#define get_group_id(d) amdq_gid(d)
#define get_local_size(d) amdq_lsz(d)
#define get_global_id(d) (amdq_gid(d) * amdq_lsz(d) + amdq_lid(d))
#define barrier(f) __builtin_amdgcn_s_barrier()
