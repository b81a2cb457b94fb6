; A TMA + mbarrier producer/consumer ring (test/unit/GpuEmuHopperTest.cpp,
; test/GpuEmu/hopper-ptxas.test). 384 threads: warpgroup 0 is the producer
; (setmaxnreg.dec 24; thread 0 issues the loads), warpgroups 1 and 2 the
; consumers (setmaxnreg.inc 240). Tile i (8 rows x 32 f32, box origin
; (x0, y0 + 8i)) goes through stage i % 2: the producer waits empty[s]
; (parity flipped: the first lap passes), arrives on full[s] with
; expect_tx(1024) and issues the 2D TMA load; each of the 256 consumer
; threads waits full[s], reads its element (un-swizzling with `mask`: 7 for
; 128B, 0 for none), writes it to out[256 i + c], and one elected lane per
; warp releases the stage (empty[s] counts 8 warps). At the end the
; consumers exchange values through shared memory across named barrier 1
; (256 threads): out[256 tiles + c] = 255 - c.
target triple = "nvptx64-nvidia-cuda"

@smem = external addrspace(3) global [0 x i8], align 1024

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
declare void @llvm.nvvm.barrier.cta.sync.aligned.count(i32, i32)
declare void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3), i32)
declare i64 @llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta(ptr addrspace(3), i32)
declare i64 @llvm.nvvm.mbarrier.arrive.scope.cta.space.cta(ptr addrspace(3), i32)
declare i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3), i32)
declare void @llvm.nvvm.cp.async.bulk.tensor.g2s.tile.2d(ptr addrspace(7), ptr addrspace(3), ptr, i32, i32, i16, i64, i1 immarg, i1 immarg, i32 immarg)
declare void @llvm.nvvm.setmaxnreg.inc.sync.aligned.u32(i32 immarg)
declare void @llvm.nvvm.setmaxnreg.dec.sync.aligned.u32(i32 immarg)
declare { i32, i1 } @llvm.nvvm.elect.sync(i32)
declare void @llvm.nvvm.bar.warp.sync(i32)

define ptx_kernel void @tma_ring(ptr %tmap, ptr %out, i32 %tiles, i32 %x0, i32 %y0, i32 %mask) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %full0 = getelementptr i8, ptr addrspace(3) @smem, i32 2048
  %empty0 = getelementptr i8, ptr addrspace(3) @smem, i32 2064
  %is0 = icmp eq i32 %tid, 0
  br i1 %is0, label %init, label %initdone
init:
  %f1 = getelementptr i8, ptr addrspace(3) @smem, i32 2056
  %e1 = getelementptr i8, ptr addrspace(3) @smem, i32 2072
  call void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3) %full0, i32 1)
  call void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3) %f1, i32 1)
  call void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3) %empty0, i32 8)
  call void @llvm.nvvm.mbarrier.init.shared(ptr addrspace(3) %e1, i32 8)
  br label %initdone
initdone:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  %producer = icmp ult i32 %tid, 128
  br i1 %producer, label %prod, label %cons

prod:
  call void @llvm.nvvm.setmaxnreg.dec.sync.aligned.u32(i32 24)
  br i1 %is0, label %ploop, label %done
ploop:
  %i = phi i32 [ 0, %prod ], [ %inext, %pissue ]
  %pmore = icmp slt i32 %i, %tiles
  br i1 %pmore, label %pwait, label %done
pwait:
  %s = and i32 %i, 1
  %lap = lshr i32 %i, 1
  %lapbit = and i32 %lap, 1
  %eparity = xor i32 %lapbit, 1
  %s8 = shl i32 %s, 3
  %eb = getelementptr i8, ptr addrspace(3) %empty0, i32 %s8
  %fb = getelementptr i8, ptr addrspace(3) %full0, i32 %s8
  %ok = call i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3) %eb, i32 %eparity)
  br i1 %ok, label %pissue, label %pwait
pissue:
  %st = call i64 @llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta(ptr addrspace(3) %fb, i32 1024)
  %soff = shl i32 %s, 10
  %stage = getelementptr i8, ptr addrspace(3) @smem, i32 %soff
  %i8 = shl i32 %i, 3
  %y = add i32 %y0, %i8
  %dst = addrspacecast ptr addrspace(3) %stage to ptr addrspace(7)
  call void @llvm.nvvm.cp.async.bulk.tensor.g2s.tile.2d(ptr addrspace(7) %dst, ptr addrspace(3) %fb, ptr %tmap, i32 %x0, i32 %y, i16 0, i64 0, i1 false, i1 false, i32 0)
  %inext = add i32 %i, 1
  br label %ploop

cons:
  call void @llvm.nvvm.setmaxnreg.inc.sync.aligned.u32(i32 240)
  %c = sub i32 %tid, 128
  %row = lshr i32 %c, 5
  %col = and i32 %c, 31
  %rowb = shl i32 %row, 7
  %colb = shl i32 %col, 2
  %inoff = or i32 %rowb, %colb
  br label %cloop
cloop:
  %j = phi i32 [ 0, %cons ], [ %jnext, %crelease ]
  %cmore = icmp slt i32 %j, %tiles
  br i1 %cmore, label %cwait, label %cend
cwait:
  %cs = and i32 %j, 1
  %clap = lshr i32 %j, 1
  %fparity = and i32 %clap, 1
  %cs8 = shl i32 %cs, 3
  %cfb = getelementptr i8, ptr addrspace(3) %full0, i32 %cs8
  %ceb = getelementptr i8, ptr addrspace(3) %empty0, i32 %cs8
  %cok = call i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3) %cfb, i32 %fparity)
  br i1 %cok, label %cread, label %cwait
cread:
  %csoff = shl i32 %cs, 10
  %off = or i32 %csoff, %inoff
  %hi = lshr i32 %off, 7
  %hm = and i32 %hi, %mask
  %x = shl i32 %hm, 4
  %phys = xor i32 %off, %x
  %p = getelementptr i8, ptr addrspace(3) @smem, i32 %phys
  %v = load float, ptr addrspace(3) %p, align 4
  %j256 = shl i32 %j, 8
  %oi = add i32 %j256, %c
  %oi64 = sext i32 %oi to i64
  %op = getelementptr float, ptr %out, i64 %oi64
  store float %v, ptr %op, align 4
  call void @llvm.nvvm.bar.warp.sync(i32 -1)
  %el = call { i32, i1 } @llvm.nvvm.elect.sync(i32 -1)
  %leader = extractvalue { i32, i1 } %el, 1
  br i1 %leader, label %carrive, label %crelease
carrive:
  %ca = call i64 @llvm.nvvm.mbarrier.arrive.scope.cta.space.cta(ptr addrspace(3) %ceb, i32 1)
  br label %crelease
crelease:
  %jnext = add i32 %j, 1
  br label %cloop
cend:
  %c4 = shl i32 %c, 2
  %so = add i32 %c4, 2304
  %sp = getelementptr i8, ptr addrspace(3) @smem, i32 %so
  %cf = uitofp i32 %c to float
  store float %cf, ptr addrspace(3) %sp, align 4
  call void @llvm.nvvm.barrier.cta.sync.aligned.count(i32 1, i32 256)
  %rc = sub i32 255, %c
  %rc4 = shl i32 %rc, 2
  %ro = add i32 %rc4, 2304
  %rp = getelementptr i8, ptr addrspace(3) @smem, i32 %ro
  %rv = load float, ptr addrspace(3) %rp, align 4
  %t256 = shl i32 %tiles, 8
  %oe = add i32 %t256, %c
  %oe64 = sext i32 %oe to i64
  %oep = getelementptr float, ptr %out, i64 %oe64
  store float %rv, ptr %oep, align 4
  br label %done
done:
  ret void
}
