/* amdq's HIP device prelude: amdq.compile(src, lang="hip") force-includes it (clang -include, so the
   user's line numbers are unchanged) when it compiles HIP without ROCm's headers (-nogpuinc -nogpulib).
   It gives the execution-space and memory-space keywords (clang's CUDA/HIP attributes), the built-in
   index variables threadIdx, blockIdx, blockDim, gridDim and warpSize, __syncthreads, fences and the
   integer and float atomics, on clang's AMDGPU builtins (clang's BuiltinsAMDGPU.def) and its
   __hip_atomic_* builtins. Names and meanings are those of the HIP programming guide. */
#ifndef AMDQ_HIP_H
#define AMDQ_HIP_H

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

struct dim3 {
  unsigned int x, y, z;
  __host__ __device__ constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
      : x(x_), y(y_), z(z_) {}
};

/* Each index variable is an empty object whose fields are properties: reading threadIdx.x calls the
   static getter, which is the builtin, so only the axes a kernel reads are asked of the hardware. */
#define AMDQ_AXIS(F, EXPR)                                                                 \
  static __device__ __forceinline__ unsigned int __amdq_get_##F() { return (EXPR); }     \
  __declspec(property(get = __amdq_get_##F)) unsigned int F;
#define AMDQ_INDEX(TYPE, XE, YE, ZE)                                                       \
  struct TYPE {                                                                            \
    AMDQ_AXIS(x, XE) AMDQ_AXIS(y, YE) AMDQ_AXIS(z, ZE)                                     \
    __device__ operator dim3() const { return dim3(x, y, z); }                             \
  };

#define AMDQ_CEIL_DIV(a, b) (((a) + (b) - 1u) / (b))
AMDQ_INDEX(__amdq_thread_idx_t, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
           __builtin_amdgcn_workitem_id_z())
AMDQ_INDEX(__amdq_block_idx_t, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
           __builtin_amdgcn_workgroup_id_z())
AMDQ_INDEX(__amdq_block_dim_t, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
           __builtin_amdgcn_workgroup_size_z())
AMDQ_INDEX(__amdq_grid_dim_t,
           AMDQ_CEIL_DIV(__builtin_amdgcn_grid_size_x(), (unsigned int)__builtin_amdgcn_workgroup_size_x()),
           AMDQ_CEIL_DIV(__builtin_amdgcn_grid_size_y(), (unsigned int)__builtin_amdgcn_workgroup_size_y()),
           AMDQ_CEIL_DIV(__builtin_amdgcn_grid_size_z(), (unsigned int)__builtin_amdgcn_workgroup_size_z()))
#undef AMDQ_INDEX
#undef AMDQ_AXIS

static __device__ const __amdq_thread_idx_t threadIdx = {};
static __device__ const __amdq_block_idx_t blockIdx = {};
static __device__ const __amdq_block_dim_t blockDim = {};
static __device__ const __amdq_grid_dim_t gridDim = {};
#define warpSize (__builtin_amdgcn_wavefrontsize())

/* Barriers and fences: a work-group barrier orders the work-group's memory accesses around it. */
static __device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
static __device__ __forceinline__ void __threadfence_block() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup"); }
static __device__ __forceinline__ void __threadfence() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
static __device__ __forceinline__ void __threadfence_system() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); }

/* Atomics: relaxed, device (agent) scope, returning the old value, on global or shared pointers. */
#define AMDQ_ATOMIC(NAME, BUILTIN)                                                          \
  template <class T> static __device__ __forceinline__ T NAME(T *p, T v) {                 \
    return BUILTIN(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);                      \
  }
AMDQ_ATOMIC(atomicAdd, __hip_atomic_fetch_add)
AMDQ_ATOMIC(atomicMin, __hip_atomic_fetch_min)
AMDQ_ATOMIC(atomicMax, __hip_atomic_fetch_max)
AMDQ_ATOMIC(atomicAnd, __hip_atomic_fetch_and)
AMDQ_ATOMIC(atomicOr, __hip_atomic_fetch_or)
AMDQ_ATOMIC(atomicXor, __hip_atomic_fetch_xor)
AMDQ_ATOMIC(atomicExch, __hip_atomic_exchange)
#undef AMDQ_ATOMIC
template <class T> static __device__ __forceinline__ T atomicSub(T *p, T v) {
  return __hip_atomic_fetch_add(p, (T)0 - v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
template <class T> static __device__ __forceinline__ T atomicCAS(T *p, T expected, T desired) {
  __hip_atomic_compare_exchange_strong(p, &expected, desired, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                       __HIP_MEMORY_SCOPE_AGENT);
  return expected;
}

#endif
