; A 3D TMA load and store through one CTA of 128 threads
; (test/unit/GpuEmuHopperTest.cpp, test/GpuEmu/hopper-ptxas.test): thread 0
; loads the box {16, 4, 2} at (c0, c1, c2) of `in` (f32, 64B swizzle) into
; shared offset 0, completing mbarrier 1024; every thread waits, reads
; element `tid` of the box (un-swizzling: bits 4-5 ^= bits 7-8), writes
; 2 v + 1 to the same place of the box at shared offset 512, publishes it
; with fence.proxy.async and a barrier; thread 0 stores that box to `out`
; at the same coordinates (out-of-bounds elements are not written) and
; waits for the bulk group (.read, then complete).
target triple = "nvptx64-nvidia-cuda"

@smem = external addrspace(3) global [0 x i8], align 1024

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
declare void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3), i32)
declare i64 @llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta(ptr addrspace(3), i32)
declare i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3), i32)
declare void @llvm.nvvm.cp.async.bulk.tensor.g2s.tile.3d(ptr addrspace(7), ptr addrspace(3), ptr, i32, i32, i32, i16, i64, i1 immarg, i1 immarg, i32 immarg)
declare void @llvm.nvvm.cp.async.bulk.tensor.s2g.tile.3d(ptr addrspace(3), ptr, i32, i32, i32, i64, i1 immarg)
declare void @llvm.nvvm.cp.async.bulk.commit.group()
declare void @llvm.nvvm.cp.async.bulk.wait.group.read(i32 immarg)
declare void @llvm.nvvm.cp.async.bulk.wait.group(i32 immarg)
declare void @llvm.nvvm.fence.proxy.async.shared_cta()

define ptx_kernel void @tma_3d(ptr %in, ptr %out, i32 %c0, i32 %c1, i32 %c2) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bar = getelementptr i8, ptr addrspace(3) @smem, i32 1024
  %is0 = icmp eq i32 %tid, 0
  br i1 %is0, label %init, label %synced
init:
  call void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3) %bar, i32 1)
  br label %synced
synced:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br i1 %is0, label %load, label %wait
load:
  %st = call i64 @llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta(ptr addrspace(3) %bar, i32 512)
  %dst = addrspacecast ptr addrspace(3) @smem to ptr addrspace(7)
  call void @llvm.nvvm.cp.async.bulk.tensor.g2s.tile.3d(ptr addrspace(7) %dst, ptr addrspace(3) %bar, ptr %in, i32 %c0, i32 %c1, i32 %c2, i16 0, i64 0, i1 false, i1 false, i32 0)
  br label %wait
wait:
  %ok = call i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3) %bar, i32 0)
  br i1 %ok, label %compute, label %wait
compute:
  %off = shl i32 %tid, 2
  %hi = lshr i32 %off, 7
  %hm = and i32 %hi, 3
  %x = shl i32 %hm, 4
  %phys = xor i32 %off, %x
  %p = getelementptr i8, ptr addrspace(3) @smem, i32 %phys
  %v = load float, ptr addrspace(3) %p, align 4
  %v2 = fmul float %v, 2.0
  %v3 = fadd float %v2, 1.0
  %q = getelementptr i8, ptr addrspace(3) %p, i32 512
  store float %v3, ptr addrspace(3) %q, align 4
  call void @llvm.nvvm.fence.proxy.async.shared_cta()
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br i1 %is0, label %store, label %done
store:
  %src = getelementptr i8, ptr addrspace(3) @smem, i32 512
  call void @llvm.nvvm.cp.async.bulk.tensor.s2g.tile.3d(ptr addrspace(3) %src, ptr %out, i32 %c0, i32 %c1, i32 %c2, i64 0, i1 false)
  call void @llvm.nvvm.cp.async.bulk.commit.group()
  call void @llvm.nvvm.cp.async.bulk.wait.group.read(i32 0)
  call void @llvm.nvvm.cp.async.bulk.wait.group(i32 0)
  br label %done
done:
  ret void
}
