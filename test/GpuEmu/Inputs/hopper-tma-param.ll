; A kernel that takes its TMA tensor maps as one parameter, as the sm_90a
; lowering does (docs/kernel-abi.md, "Tensor maps"): `maps` points at two
; 128-byte maps the runtime encoded from the launch manifest
; (test/unit/TensorMapTest.cpp; test/GpuEmu/hopper-ptxas.test assembles it
; with ptxas -arch=sm_90a):
;   map 0: `query` [B, Hq, L, 32] f32 as {D, Hq, L, B}, box {32, 1, 16, 1},
;          128B swizzle;
;   map 1: `out`, the same view and box, no swizzle.
; CTA (x = b * Hq + h, y) of 512 threads: thread 0 loads the box at
; (0, h, 16 y, b) through map 0 into shared offset 0 (completing the
; mbarrier at 4096); thread t un-swizzles element t of the box (bits 4-6 of
; its byte offset ^= bits 7-9) and writes 2 v + 1 to offset 2048 + 4 t; the
; box goes out through map 1 at the same coordinates (rows past L are not
; written). `status` (a plan's status word, docs/kernel-abi.md) is not read.
target triple = "nvptx64-nvidia-cuda"

@smem = external addrspace(3) global [0 x i8], align 1024

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
declare void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3), i32)
declare i64 @llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta(ptr addrspace(3), i32)
declare i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3), i32)
declare void @llvm.nvvm.cp.async.bulk.tensor.g2s.tile.4d(ptr addrspace(7), ptr addrspace(3), ptr, i32, i32, i32, i32, i16, i64, i1 immarg, i1 immarg, i32 immarg)
declare void @llvm.nvvm.cp.async.bulk.tensor.s2g.tile.4d(ptr addrspace(3), ptr, i32, i32, i32, i32, i64, i1 immarg)
declare void @llvm.nvvm.cp.async.bulk.commit.group()
declare void @llvm.nvvm.cp.async.bulk.wait.group.read(i32 immarg)
declare void @llvm.nvvm.cp.async.bulk.wait.group(i32 immarg)
declare void @llvm.nvvm.fence.proxy.async.shared_cta()

define ptx_kernel void @tma_maps_kvattn_0(ptr %query, ptr %out, ptr %status, ptr %maps, i64 %B, i64 %Hq, i64 %Hkv, i64 %L, i64 %S) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
  %hq = trunc i64 %Hq to i32
  %b = udiv i32 %bx, %hq
  %h = urem i32 %bx, %hq
  %l0 = shl i32 %by, 4
  %map1 = getelementptr i8, ptr %maps, i64 128
  %bar = getelementptr i8, ptr addrspace(3) @smem, i32 4096
  %is0 = icmp eq i32 %tid, 0
  br i1 %is0, label %init, label %synced
init:
  call void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3) %bar, i32 1)
  br label %synced
synced:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br i1 %is0, label %load, label %wait
load:
  %st = call i64 @llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta(ptr addrspace(3) %bar, i32 2048)
  %dst = addrspacecast ptr addrspace(3) @smem to ptr addrspace(7)
  call void @llvm.nvvm.cp.async.bulk.tensor.g2s.tile.4d(ptr addrspace(7) %dst, ptr addrspace(3) %bar, ptr %maps, i32 0, i32 %h, i32 %l0, i32 %b, i16 0, i64 0, i1 false, i1 false, i32 0)
  br label %wait
wait:
  %ok = call i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3) %bar, i32 0)
  br i1 %ok, label %compute, label %wait
compute:
  %off = shl i32 %tid, 2
  %row = lshr i32 %off, 7
  %rm = and i32 %row, 7
  %x = shl i32 %rm, 4
  %phys = xor i32 %off, %x
  %p = getelementptr i8, ptr addrspace(3) @smem, i32 %phys
  %v = load float, ptr addrspace(3) %p, align 4
  %v2 = fmul float %v, 2.0
  %v3 = fadd float %v2, 1.0
  %o = add i32 %off, 2048
  %q = getelementptr i8, ptr addrspace(3) @smem, i32 %o
  store float %v3, ptr addrspace(3) %q, align 4
  call void @llvm.nvvm.fence.proxy.async.shared_cta()
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br i1 %is0, label %store, label %done
store:
  %src = getelementptr i8, ptr addrspace(3) @smem, i32 2048
  call void @llvm.nvvm.cp.async.bulk.tensor.s2g.tile.4d(ptr addrspace(3) %src, ptr %map1, i32 0, i32 %h, i32 %l0, i32 %b, i64 0, i1 false)
  call void @llvm.nvvm.cp.async.bulk.commit.group()
  call void @llvm.nvvm.cp.async.bulk.wait.group.read(i32 0)
  call void @llvm.nvvm.cp.async.bulk.wait.group(i32 0)
  br label %done
done:
  ret void
}
