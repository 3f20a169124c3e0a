; Kernels of `amdq demo`: a dense layer (matmul + bias, optional ReLU), a row softmax, and a
; workgroup sum reduction. Work-item i = workgroup id * workgroup size + local id.

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare float @llvm.fma.f32(float, float, float)
declare float @llvm.maxnum.f32(float, float)
declare float @llvm.exp.f32(float)
declare void @llvm.amdgcn.s.barrier()

define internal i32 @global_id() alwaysinline {
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %ia = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %gsp = getelementptr i8, ptr addrspace(4) %ia, i64 12          ; hidden_group_size_x
  %gs16 = load i16, ptr addrspace(4) %gsp, align 4
  %gs = zext i16 %gs16 to i32
  %base = mul i32 %wg, %gs
  %i = add i32 %base, %lid
  ret i32 %i
}

; y[m, n] = act(sum_k x[m, k] * w[k, n] + b[n]), one work-item per output
define amdgpu_kernel void @linear(ptr addrspace(1) noalias %x, ptr addrspace(1) noalias %w,
                                  ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %y,
                                  i32 %M, i32 %K, i32 %N, i32 %relu) {
entry:
  %i = call i32 @global_id()
  %total = mul i32 %M, %N
  %in = icmp slt i32 %i, %total
  br i1 %in, label %body, label %exit
body:
  %m = sdiv i32 %i, %N
  %n = srem i32 %i, %N
  %xrow = mul i32 %m, %K
  br label %loop
loop:
  %k = phi i32 [ 0, %body ], [ %k1, %loop ]
  %acc = phi float [ 0.0, %body ], [ %acc1, %loop ]
  %xi = add i32 %xrow, %k
  %xp = getelementptr float, ptr addrspace(1) %x, i32 %xi
  %xv = load float, ptr addrspace(1) %xp, align 4
  %wr = mul i32 %k, %N
  %wi = add i32 %wr, %n
  %wp = getelementptr float, ptr addrspace(1) %w, i32 %wi
  %wv = load float, ptr addrspace(1) %wp, align 4
  %acc1 = call float @llvm.fma.f32(float %xv, float %wv, float %acc)
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, %K
  br i1 %more, label %loop, label %tail
tail:
  %bp = getelementptr float, ptr addrspace(1) %b, i32 %n
  %bv = load float, ptr addrspace(1) %bp, align 4
  %s = fadd float %acc1, %bv
  %r = icmp ne i32 %relu, 0
  %pos = call float @llvm.maxnum.f32(float %s, float 0.0)
  %o = select i1 %r, float %pos, float %s
  %yp = getelementptr float, ptr addrspace(1) %y, i32 %i
  store float %o, ptr addrspace(1) %yp, align 4
  br label %exit
exit:
  ret void
}

; p[m, :] = softmax(y[m, :]), one work-item per row
define amdgpu_kernel void @softmax(ptr addrspace(1) noalias %y, ptr addrspace(1) noalias %p, i32 %M, i32 %N) {
entry:
  %row = call i32 @global_id()
  %in = icmp slt i32 %row, %M
  br i1 %in, label %start, label %exit
start:
  %base = mul i32 %row, %N
  br label %maxloop
maxloop:
  %j = phi i32 [ 0, %start ], [ %j1, %maxloop ]
  %mx = phi float [ 0xFFF0000000000000, %start ], [ %mx1, %maxloop ]
  %yi = add i32 %base, %j
  %yp = getelementptr float, ptr addrspace(1) %y, i32 %yi
  %yv = load float, ptr addrspace(1) %yp, align 4
  %mx1 = call float @llvm.maxnum.f32(float %mx, float %yv)
  %j1 = add i32 %j, 1
  %m1 = icmp slt i32 %j1, %N
  br i1 %m1, label %maxloop, label %exploop
exploop:
  %e_j = phi i32 [ 0, %maxloop ], [ %e_j1, %exploop ]
  %sum = phi float [ 0.0, %maxloop ], [ %sum1, %exploop ]
  %ei = add i32 %base, %e_j
  %ep = getelementptr float, ptr addrspace(1) %y, i32 %ei
  %ev = load float, ptr addrspace(1) %ep, align 4
  %d = fsub float %ev, %mx1
  %ex = call float @llvm.exp.f32(float %d)
  %pp = getelementptr float, ptr addrspace(1) %p, i32 %ei
  store float %ex, ptr addrspace(1) %pp, align 4
  %sum1 = fadd float %sum, %ex
  %e_j1 = add i32 %e_j, 1
  %m2 = icmp slt i32 %e_j1, %N
  br i1 %m2, label %exploop, label %normloop
normloop:
  %n_j = phi i32 [ 0, %exploop ], [ %n_j1, %normloop ]
  %ni = add i32 %base, %n_j
  %np = getelementptr float, ptr addrspace(1) %p, i32 %ni
  %nv = load float, ptr addrspace(1) %np, align 4
  %q = fdiv float %nv, %sum1
  store float %q, ptr addrspace(1) %np, align 4
  %n_j1 = add i32 %n_j, 1
  %m3 = icmp slt i32 %n_j1, %N
  br i1 %m3, label %normloop, label %exit
exit:
  ret void
}

@partial = internal addrspace(3) global [256 x float] poison, align 4

; out[workgroup] = sum of the workgroup's 256 inputs (0 past n), by a tree in LDS
define amdgpu_kernel void @reduce_sum(ptr addrspace(1) noalias %in, ptr addrspace(1) noalias %out, i32 %n)
    "amdgpu-flat-work-group-size"="256,256" {
entry:
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %i = call i32 @global_id()
  %ok = icmp slt i32 %i, %n
  %ip = getelementptr float, ptr addrspace(1) %in, i32 %i
  br i1 %ok, label %ld, label %st
ld:
  %lv = load float, ptr addrspace(1) %ip, align 4
  br label %st
st:
  %v = phi float [ %lv, %ld ], [ 0.0, %entry ]
  %slot = getelementptr [256 x float], ptr addrspace(3) @partial, i32 0, i32 %lid
  store float %v, ptr addrspace(3) %slot, align 4
  br label %tree
tree:
  %s = phi i32 [ 128, %st ], [ %s1, %step_done ]
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %act = icmp ult i32 %lid, %s
  br i1 %act, label %add, label %step_done
add:
  %other = add i32 %lid, %s
  %op = getelementptr [256 x float], ptr addrspace(3) @partial, i32 0, i32 %other
  %a = load float, ptr addrspace(3) %slot, align 4
  %b = load float, ptr addrspace(3) %op, align 4
  %c = fadd float %a, %b
  store float %c, ptr addrspace(3) %slot, align 4
  br label %step_done
step_done:
  %s1 = lshr i32 %s, 1
  %more = icmp ne i32 %s1, 0
  br i1 %more, label %tree, label %fin
fin:
  %first = icmp eq i32 %lid, 0
  br i1 %first, label %write, label %exit
write:
  fence syncscope("workgroup") acquire
  %r = load float, ptr addrspace(3) @partial, align 4
  %outp = getelementptr float, ptr addrspace(1) %out, i32 %wg
  store float %r, ptr addrspace(1) %outp, align 4
  br label %exit
exit:
  ret void
}
