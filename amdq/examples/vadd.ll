; c[i] = a[i] + s * b[i] for i < n: the example kernel `amdq demo` compiles with llvmlite.
define amdgpu_kernel void @vadd(ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b,
                                ptr addrspace(1) noalias %c, float %s, i32 %n) {
entry:
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %dp = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %gsp = getelementptr i8, ptr addrspace(4) %dp, i64 12
  %gs16 = load i16, ptr addrspace(4) %gsp, align 4
  %gs = zext i16 %gs16 to i32
  %base = mul i32 %wg, %gs
  %i = add i32 %base, %lid
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %i
  %va = load float, ptr addrspace(1) %pa, align 4
  %vb = load float, ptr addrspace(1) %pb, align 4
  %r = call float @llvm.fma.f32(float %s, float %vb, float %va)
  store float %r, ptr addrspace(1) %pc, align 4
  br label %done
done:
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare float @llvm.fma.f32(float, float, float)
