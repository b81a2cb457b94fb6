// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="tensor-cores=false" -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu -cse | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu -cse | FileCheck %s --enable-var-scope --check-prefix=TC
// RUN: kvattn-opt %s -kvattn-tile="num-stages=1" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu -cse | FileCheck %s --check-prefix=STAGES1
// RUN: not kvattn-opt %s -kvattn-tile="block-m=32 num-warps=4" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=MAPPING
// RUN: kvattn-opt %s -kvattn-tile="block-m=128 num-warps=4" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu -cse | FileCheck %s --check-prefix=WIDE
// RUN: not kvattn-opt %s -kvattn-tile="block-m=128 num-warps=4" -kvattn-outline-tile-programs="tensor-cores=false" -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=WIDESCALAR
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu -cse | FileCheck %s --check-prefix=WGMMA
// RUN: not kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=UNASSIGNED
// The lowering reads the kernel's schedule and the tiles' roles and
// layouts; without -kvattn-assign-tile-layouts it refuses the kernel by name.
// UNASSIGNED: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the kernel needs a kvattn.gpu_schedule (run -kvattn-assign-tile-layouts before the lowering)
// A tensor-core kernel whose query tile is f32 again (the assignment gave
// it the query's f16):
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed 's/memref<64x64xf16>/memref<64x64xf32>/g' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=F32QUERY
// F32QUERY: error: 'gpu.func' op kvattn-lower-tile-to-gpu: a tensor-core kernel's query tile holds the query in its 16-bit type, this one is f32 (run -kvattn-assign-tile-layouts before the lowering)
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts="value-prefetch=false key-prefetch=false query-in-registers=false lazy-rescale=false" -kvattn-lower-tile-to-gpu -cse | FileCheck %s --check-prefix=OBEY
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -e 's/scores_in_registers = true, //' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=DISAGREE
// The lowering obeys the schedule where it is a free choice: without the
// pairings each tile.qk loads its own K block (no cp.async before the KV
// loop) and each softmax its V block; without query fragments in
// registers Q.K^T reads the query tile per k step (no [4][4] fragment
// array). Where the outlining's shared memory fixed a decision, a schedule
// that disagrees is refused.
// OBEY-LABEL: gpu.func @f_kvattn_0
// OBEY-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 1, scores_in_registers = true>
// OBEY-NOT:     memref<4x4xvector<2xf16>>
// OBEY-NOT:     llvm.nvvm.vote.any.sync
// OBEY-NOT:     nvgpu.device_async_copy
// OBEY:         scf.for
// OBEY:           nvgpu.device_async_copy
// OBEY:           nvvm.cp.async.wait.group 0
// OBEY:           gpu.barrier
// OBEY:           nvvm.mma.sync
// OBEY:           nvgpu.device_async_copy
// OBEY:           nvvm.cp.async.wait.group 0
// OBEY:           gpu.barrier
// DISAGREE: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the schedule keeps the scores in shared memory, the kernel's shared memory layout the other way
// Where an op waits for its cp.async stage is its kvattn.stage_sync
// (-kvattn-assign-tile-layouts' analysis): the lowering emits what it says
// (here a tile.qk told to leave one group in flight and to meet the other
// threads before its own copies too), and refuses an op without one.
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts="value-prefetch=false key-prefetch=false" | sed -E '/kvattn.tile.qk/s/#kvattn.stage_sync<[^>]*>/#kvattn.stage_sync<barrier_before_copies = true, wait_copies = 1, barrier = true>/' | kvattn-opt -kvattn-lower-tile-to-gpu -cse | FileCheck %s --check-prefix=SYNC
// SYNC-LABEL: gpu.func @f_kvattn_0
// SYNC:         scf.for %{{.*}} = %c0 to
// SYNC-NOT:       nvgpu.device_async_copy
// SYNC:           gpu.barrier
// SYNC-NOT:       nvvm.cp.async.wait.group
// SYNC:           nvgpu.device_async_copy
// SYNC:           nvvm.cp.async.commit.group
// SYNC-NEXT:      nvvm.cp.async.wait.group 1
// SYNC-NEXT:      gpu.barrier
// SYNC:           nvvm.mma.sync
// SYNC:           nvvm.cp.async.wait.group 0
// SYNC-NEXT:      gpu.barrier
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -E 's/kvattn\.stage_sync = #kvattn\.stage_sync<[^>]*>, //' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=NOSYNC
// NOSYNC: error: 'kvattn.tile.qk' op kvattn-lower-tile-to-gpu: the K/V blocks of this kernel arrive by cp.async, and every tile.qk and tile.softmax_update needs its kvattn.stage_sync (run -kvattn-assign-tile-layouts before the lowering)
// The sm_90a lowering (kvattn.wgmma; WgmmaTiles.cpp) with the TMA ring
// (kvattn.tma: a contiguous cache): thread 0 initialises the mbarriers,
// then per KV block the producer's empty-barrier wait, arrive.expect_tx and
// TMA box, every thread's full-barrier wait (voted), Q.K^T as D / 16 = 4
// wgmma SS m64n64k16 on zero accumulators (scale-d 1), committed and waited
// for, the K stage released (arrive on its empty barrier); P.V after the V
// stage's full-barrier wait as block-n / 16 = 4 wgmma RS m64n64k16 on the
// rescaled accumulator (imm-trans-b 1), then the V stage released. No
// cp.async.
// The producer warpgroup: 128 threads after the program's 4 warps; after
// the ring's initialisation (all threads) the threads from 128 on run the
// producer (its first thread alone issues K and V, each after the stage's
// empty-barrier wait), the others the consumers' program, which issues no
// copy. One consumer warpgroup: no setmaxnreg.
// WGMMA-LABEL: gpu.func @f_kvattn_0
// WGMMA-SAME: known_block_size = array<i32: 256, 1, 1>
// WGMMA-SAME: kvattn.tma, kvattn.wgmma
// WGMMA-NOT: nvvm.cp.async.wait.group
// WGMMA: llvm.call_intrinsic "llvm.nvvm.mbarrier.init.shared"
// WGMMA: gpu.barrier
// WGMMA: %[[PRODUCER:.*]] = arith.cmpi uge, %thread_id_x, %c128 : index
// WGMMA-NEXT: scf.if %[[PRODUCER]] {
// WGMMA-NOT: nvvm.setmaxnreg
// WGMMA-NEXT: %[[ISSUER:.*]] = arith.cmpi eq, %thread_id_x, %c128 : index
// WGMMA-NEXT: scf.if %[[ISSUER]] {
// WGMMA: llvm.call_intrinsic "llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta"
// WGMMA: llvm.call_intrinsic "llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta"
// WGMMA: llvm.call_intrinsic "llvm.nvvm.cp.async.bulk.tensor.g2s.tile.4d"
// WGMMA-NOT: nvvm.wgmma
// WGMMA: } else {
// WGMMA-NOT: llvm.nvvm.mbarrier.arrive.expect.tx
// WGMMA-NOT: llvm.nvvm.cp.async.bulk.tensor
// WGMMA: llvm.call_intrinsic "llvm.nvvm.vote.all.sync"
// WGMMA: nvvm.wgmma.fence.aligned
// WGMMA-COUNT-4: llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $66, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, $64, $65, p, 1, 1, 0, 0;
// WGMMA: nvvm.wgmma.commit.group.sync.aligned
// WGMMA-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA: llvm.call_intrinsic "llvm.nvvm.mbarrier.arrive.scope.cta.space.cta"
// WGMMA: llvm.call_intrinsic "llvm.nvvm.vote.all.sync"
// WGMMA: nvvm.wgmma.fence.aligned
// WGMMA-COUNT-4: llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// WGMMA: nvvm.wgmma.commit.group.sync.aligned
// WGMMA-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA: llvm.call_intrinsic "llvm.nvvm.mbarrier.arrive.scope.cta.space.cta"
// WGMMA-NOT: llvm.nvvm.mbarrier.arrive.expect.tx
// WGMMA-NOT: llvm.nvvm.cp.async.bulk.tensor
// WGMMA-NOT: gpu.barrier
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | sed -e 's/known_block_size = array<i32: 256/known_block_size = array<i32: 160/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=BLOCK
// A block that is neither the program's warps nor those and a producer
// warpgroup is refused by name.
// BLOCK: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the kernel's block (160 threads) is not its 4 warps, nor (with the TMA rings) those and a producer warpgroup of 4 warps
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | sed -e 's/producer_warps = 4, //' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=UNRECORDED
// A block with a producer warpgroup that the schedule does not record is
// refused by name (the schedule says how the kernel is built).
// UNRECORDED: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the kernel's block (256 threads) has 4 warps past its num_warps = 4, its schedule producer_warps = 0
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | sed -e 's/lazy_rescale = true>/lazy_rescale = true, ping_pong = true>/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=PINGPONG
// Ping-pong on one consumer warpgroup (whose turns nobody would pass) is
// refused by name.
// PINGPONG: error: 'gpu.func' op kvattn-lower-tile-to-gpu: ping_pong alternates two consumer warpgroups of their own rows fed by TMA rings (got 4 warps)
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | sed -e 's/kvattn.value_prefetch = 0 : i64} : memref<64x64xf16>/kvattn.pending_pv, kvattn.value_prefetch = 0 : i64} : memref<64x64xf16>/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=PENDING
// A tile.qk that would issue a pending P.V in a kernel whose schedule
// defers none is refused by name.
// PENDING: error: 'gpu.func' op kvattn-lower-tile-to-gpu: a tile.qk issues a pending P.V (kvattn.pending_pv) in a kernel whose schedule defers none (intra_warpgroup_overlap)
// An intra_warpgroup_overlap schedule whose program was not peeled (no
// tile.qk issues the pending P.V) would drop every block's P.V but the
// last: refused by name.
// RUN: kvattn-opt %S/Inputs/overlap-attention.mlir -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | sed -e 's/kvattn.pending_pv, //' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=UNPEELED
// UNPEELED: error: 'kvattn.tile.softmax_update' op kvattn-lower-tile-to-gpu: with intra_warpgroup_overlap every tile.softmax_update but the program's first follows a tile.qk that issues the pending P.V (kvattn.pending_pv) and the first does not; this one's tile.qk issues none (run -kvattn-assign-tile-layouts, which peels the KV loop's first block)
// RUN: kvattn-opt %S/Inputs/overlap-attention.mlir -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts="intra-warpgroup-overlap=false" | sed -e 's/ping_pong = true>/ping_pong = true, intra_warpgroup_overlap = true>/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=UNPEELED2
// UNPEELED2: error: 'kvattn.tile.softmax_update' op kvattn-lower-tile-to-gpu: with intra_warpgroup_overlap {{.*}}; the first one runs in a loop, or its tile.qk issues one
// Two stages of a TMA ring in the same bytes (value_stage1 = value_stage
// with two V stages) are refused by name.
// RUN: kvattn-opt %S/Inputs/overlap-attention.mlir -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | sed -e 's/value_stage1 = 131072/value_stage1 = 65536/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=RING
// RING: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the TMA ring's two V stages share bytes in its kvattn.shared_memory
// The same kernel as assigned lowers.
// RUN: kvattn-opt %S/Inputs/overlap-attention.mlir -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu | FileCheck %s --check-prefix=PEELED
// PEELED: nvvm.wgmma.wait.group.sync.aligned 1
// The shared memory is the allocation -kvattn-assign-tile-layouts recorded:
// without it, without a tile's offset, with a region out of place or bytes
// other than the launch's, the kernel is refused by name.
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -e 's/kvattn.shared_memory = #kvattn.shared_memory<[^>]*>, //' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=NOSMEM
// NOSMEM: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the kernel needs its kvattn.shared_memory (run -kvattn-assign-tile-layouts before the lowering)
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -e 's/kvattn.shared_offset = 0 : i64, //' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=NOOFFSET
// NOOFFSET: error: 'memref.alloca' op kvattn-lower-tile-to-gpu: a scratch tile in shared memory needs its kvattn.shared_offset (run -kvattn-assign-tile-layouts before the lowering)
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -e 's/value_stage = 16384/value_stage = 16392/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=MISALIGNED
// MISALIGNED: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the V stage at byte 16392 (8192 bytes) is not a 16-byte aligned region of the kernel's 24576 bytes of shared memory
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -e 's/value_stage = 16384/value_stage = 20480/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=OUTSIDE
// OUTSIDE: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the V stage at byte 20480 (8192 bytes) is not a 16-byte aligned region of the kernel's 24576 bytes of shared memory
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | sed -e 's/shared_memory<bytes = 24576/shared_memory<bytes = 32768/' | not kvattn-opt -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=BYTES
// BYTES: error: 'gpu.func' op kvattn-lower-tile-to-gpu: the kernel launches with 24576 bytes of dynamic shared memory, its kvattn.shared_memory has 32768

// The tiles move to dynamic shared memory; each tile op becomes the
// thread-mapped code of docs/gpu-lowering.md. Prefix CHECK is the scalar
// lowering (tensor-cores=false), prefix TC f16 on tensor cores.

// Shared memory: the f16 query tile (64 x 64 x 2 bytes, not an f32 tile's
// 4), the K and V stages; no [64] f32 max and sum tiles (the lanes' row
// statistics are registers).
// TC-LABEL: gpu.func @f_kvattn_0
// TC-SAME:    kvattn.dynamic_smem_bytes = 24576
// TC:         %[[SMEM:.*]] = gpu.dynamic_shared_memory
// TC:         %[[Q16:.*]] = memref.view %[[SMEM]][%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xf16, #gpu.address_space<workgroup>>
// The accumulator and (64-key blocks, Dv = 64: small enough) the scores:
// each lane's [2 rows][8 slices][2] entries, private (registers); the row
// statistics too ([max, sum][2 rows]).
// TC:         memref.alloca() : memref<2x8x2xf32>
// TC:         memref.alloca() : memref<2x8x2xf32>
// The K and V stages (at elements 4096 and 8192) are addressed through one
// flat f16 view of the shared memory, at thread-constant bases computed at
// the entry (docs/gpu-lowering.md, "Address arithmetic").
// TC-DAG:     %[[FLAT:.*]] = memref.view %[[SMEM]][%c0][%{{.*}}] : memref<?xi8, #gpu.address_space<workgroup>> to memref<?xf16, #gpu.address_space<workgroup>>
// The warp's query fragments, [D / 16 steps][4 registers], private.
// TC-DAG:     %[[QF:.*]] = memref.alloca() : memref<4x4xvector<2xf16>>
// TC-DAG:     memref.alloca() : memref<2x2xf32>
// The query tile is written in f16, then each warp reads its A fragments
// of every k step once (ldmatrix.x4 at the swizzled column: the 16-byte
// chunks of each 16-bit tile row are XOR-swizzled with the row) and keeps
// them for the whole KV loop. The reads go through the flat view from one
// thread-constant base, the k step's swizzled column bits XORed in.
// TC:         vector.store %{{.*}}, %[[Q16]][
// TC:         gpu.barrier
// TC:         nvgpu.ldmatrix %[[FLAT]]{{\[}}[[QBASE:%[0-9]+]]] {numTiles = 4 : i32, transpose = false}
// TC:         %[[Q1:.*]] = arith.xori [[QBASE]], %c16 : index
// TC-NEXT:    nvgpu.ldmatrix %[[FLAT]][%[[Q1]]] {numTiles = 4 : i32, transpose = false}
// TC:         %[[Q2:.*]] = arith.xori [[QBASE]], %c32 : index
// TC-NEXT:    nvgpu.ldmatrix %[[FLAT]][%[[Q2]]] {numTiles = 4 : i32, transpose = false}
// TC:         %[[Q3:.*]] = arith.xori [[QBASE]], %c48 : index
// TC-NEXT:    nvgpu.ldmatrix %[[FLAT]][%[[Q3]]] {numTiles = 4 : i32, transpose = false}
// TC:         memref.store %{{.*}}, %[[QF]][%c3, %c3] : memref<4x4xvector<2xf16>>
// num-stages = 2 (the default): the first K block starts loading before the
// KV loop (tile.prefetch), each next one after the softmax's barrier of the
// current.
// TC:         scf.if
// Copy k of the thread: destination base + 4096 (the K stage) + k * 1024 (16
// rows of 64), source a per-block base + k * 1024; rows past the block read
// nothing (src-size 0).
// TC:           %[[K1024:.*]] = arith.muli %{{.*}}, %c1024 overflow<nsw, nuw> : index
// TC:           %[[KDST0:.*]] = arith.addi %{{.*}}, %c4096 overflow<nsw, nuw> : index
// TC:           %[[KDST:.*]] = arith.addi %[[KDST0]], %[[K1024]] overflow<nsw, nuw> : index
// TC:           %[[NREAD:.*]] = arith.select %{{.*}}, %c8, %c0 : index
// TC:           %[[KSRC:.*]] = arith.addi %{{.*}}, %[[K1024]] overflow<nsw, nuw> : index
// TC:           nvgpu.device_async_copy %{{.*}}[%[[KSRC]]], %[[FLAT]][%[[KDST]]], 8, %[[NREAD]] :
// TC:         nvvm.cp.async.commit.group
// TC:         scf.for %[[KB:.*]] =
// K, issued one step earlier, is waited for (the only group in flight);
// after the barrier (K visible, every warp past the previous P.V) V of the
// block starts loading (16 bytes per copy, zero fill past the keys).
// TC:           nvvm.cp.async.wait.group 0
// TC-NEXT:      gpu.barrier
// TC:           nvgpu.device_async_copy %{{.*}}, %[[FLAT]][%{{.*}}], 8, %{{.*}} :
// TC:           nvvm.cp.async.commit.group
// Q.K^T: the D / 16 steps unrolled, all 8 score fragments carried; per
// step the query fragment from registers, then per two 8-key slices one
// ldmatrix.x4 of K (swizzled like Q) and two mmas. No shared-memory read of
// Q.
// TC-NOT:       scf.for
// TC-NOT:       arith.xori [[QBASE]],
// TC:           memref.load %[[QF]][%c0, %c0]
// TC:           %[[KAT:.*]] = arith.addi %{{.*}}, %c4096 overflow<nsw, nuw> : index
// TC-NEXT:      nvgpu.ldmatrix %[[FLAT]][%[[KAT]]] {numTiles = 4 : i32, transpose = false}
// TC:           nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 16>
// TC-NEXT:      llvm.extractvalue
// TC-COUNT-3:   llvm.extractvalue
// TC-NEXT:      nvvm.mma.sync
// TC-NOT:       arith.xori [[QBASE]],
// TC:           memref.load %[[QF]][%c3, %c3]
// The scores stay bare dot products (no multiply by the scale after the
// mma); only a block shorter than block-n sets -inf past its keys, under
// one uniform branch.
// TC:           }
// TC-NOT:       arith.mulf
// TC:           %[[SHORT:.*]] = arith.cmpi ult, %{{.*}}, %c64
// TC:           scf.if %[[SHORT]] {
// TC:             arith.select %{{.*}}, %{{.*}}, %cst{{.*}} : f32
// No barrier after Q.K^T: the scores are the lane's own.
// TC-NOT:       gpu.barrier
// Softmax statistics, in FMA form: the maximum of the bare scores, the
// row's old and new offsets round(max * scale * log2(e)) (mul.rn: never
// contracted; the offset is 0 while the maximum is -inf), each probability
// exp2(s * scale * log2(e) - offset) as one fma and one ex2.approx.ftz
// (scale 1/8 here: 0.125 * log2(e) = 0.180336878), the rescale factor
// exp2(old offset - offset). A warp with a row whose offset reaches 2^30
// (vote.any) first rounds its scores, round(s * f), and the same fma
// runs with a multiplier of 1 (the exact form). Lazy rescaling (this
// kernel's data fit the register budget): the row keeps its old maximum
// while the block raises its offset by at most 8, and its rescale factor
// is then exp2(0) = 1.
// TC:           %[[F:.*]] = arith.constant 0.180336878 : f32
// TC:           gpu.shuffle  xor
// TC:           %[[NONE:.*]] = arith.cmpf oeq, %[[NEW:.*]], %cst{{.*}} : f32
// TC-NEXT:      %[[OLDOFF:.*]] = llvm.call_intrinsic "llvm.nvvm.mul.rn.f"(%[[OLD:.*]], %[[F]])
// TC-NEXT:      %[[NEWOFF:.*]] = llvm.call_intrinsic "llvm.nvvm.mul.rn.f"(%[[NEW]], %[[F]])
// TC:           %[[SIZE:.*]] = math.absf %[[NEWOFF]] : f32
// TC:           arith.cmpf oge, %[[SIZE]], %{{.*}} : f32
// TC:           %[[EXACT:.*]] = llvm.call_intrinsic "llvm.nvvm.vote.any.sync"
// TC-NEXT:      scf.if %[[EXACT]] {
// TC:             llvm.call_intrinsic "llvm.nvvm.mul.rn.f"(%{{.*}}, %[[F]])
// TC:           }
// TC:           %[[UNIT:.*]] = arith.select %[[EXACT]], %{{.*}}, %[[F]] : f32
// TC:           %[[GROW:.*]] = arith.subf %[[NEWOFF]], %[[OLDOFF]] : f32
// TC:           %[[SMALL:.*]] = arith.cmpf ole, %[[GROW]], %{{.*}} : f32
// TC:           %[[SAME:.*]] = arith.cmpf oeq, %[[NEW]], %[[OLD]] : f32
// TC:           %[[KEEP:.*]] = arith.ori %[[SMALL]], %[[SAME]] : i1
// TC:           arith.select %[[KEEP]], %[[OLD]], %[[NEW]] : f32
// TC:           %[[KEPT:.*]] = arith.select %[[KEEP]], %[[OLDOFF]], %[[NEWOFF]] : f32
// TC:           %[[OFF:.*]] = arith.select %[[NONE]], %{{.*}}, %[[KEPT]] : f32
// TC:           %[[NEG:.*]] = arith.negf %[[OFF]] : f32
// TC:           %[[RESCALE:.*]] = arith.addf %[[OLDOFF]], %[[NEG]] : f32
// TC:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[RESCALE]]) : (f32) -> f32
// TC:           %[[ARG:.*]] = math.fma %{{.*}}, %[[UNIT]], %[[NEG]] : f32
// TC-NEXT:      llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[ARG]]) : (f32) -> f32
// TC:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// Then V waited for (it is the newest group), one barrier, and only then
// the next K block, if any, into the K stage every warp's Q.K^T has
// finished reading.
// TC:           nvvm.cp.async.wait.group 0
// TC-NEXT:      gpu.barrier
// TC:           scf.if
// TC:             nvgpu.device_async_copy %{{.*}}, %[[FLAT]][%{{.*}}], 8, %{{.*}} :
// TC:           nvvm.cp.async.commit.group
// The accumulator is rescaled only when a row of the warp took a new
// maximum (vote.any: a warp-uniform branch).
// TC:           %[[ANY:.*]] = llvm.call_intrinsic "llvm.nvvm.vote.any.sync"
// TC:           scf.if %[[ANY]] {
// TC:             arith.mulf
// P.V, unrolled: per 16-key step the lane's own probabilities (the C
// fragment of Q.K^T is the A fragment of P.V) rounded to f16 pairs, then
// per two 8-column slices of V an ldmatrix.x4.trans and two mmas; no loop,
// no shared score tile.
// TC-NOT:       scf.for
// TC:           arith.truncf %{{.*}} : f32 to f16
// TC:           nvgpu.ldmatrix %[[FLAT]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// TC:           nvvm.mma.sync
// No barrier at the end of the block: two per KV block in all.
// TC-NOT:       gpu.barrier
// TC:         }
// TC-NOT:     kvattn.tile
// TC:         gpu.return

// num-stages = 1: each tile.qk issues its K block itself and waits for it,
// then issues V after its barrier; softmax_update waits for V.
// STAGES1:     scf.for
// STAGES1-NOT: kvattn.tile.prefetch
// STAGES1:       nvgpu.device_async_copy
// STAGES1:       nvvm.cp.async.commit.group
// STAGES1:       nvvm.cp.async.wait.group 0
// STAGES1:       gpu.barrier
// STAGES1:       nvgpu.device_async_copy
// STAGES1:       nvvm.cp.async.commit.group
// STAGES1:       nvvm.mma.sync
// STAGES1:       nvvm.cp.async.wait.group 0

// CHECK-LABEL: gpu.func @f_kvattn_0
// CHECK:         %[[SMEM:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK-DAG:     memref.view %[[SMEM]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xf32, #gpu.address_space<workgroup>>
// CHECK-DAG:     %[[STAGE:.*]] = memref.view %[[SMEM]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xf16, #gpu.address_space<workgroup>>
// CHECK-DAG:     memref.alloca() : memref<2x8x2xf32>
// CHECK-DAG:     %[[TID:.*]] = gpu.thread_id  x
// CHECK-DAG:     %[[WARP:.*]] = arith.divui %[[TID]], %c32
// CHECK-DAG:     %[[LANE:.*]] = arith.remui %[[TID]], %c32
// CHECK-DAG:     %[[QUAD:.*]] = arith.remui %[[LANE]], %c4
// Cooperative loads stride over the tile by the block size.
// CHECK:         scf.for %{{.*}} = %[[TID]] to %{{.*}} step %c128
// CHECK:         gpu.barrier
// The KV-block loop of the tile program, unchanged:
// CHECK:         scf.for %[[KB:.*]] =
// K block staged in shared memory, then scores on the lane's fragment.
// CHECK:           scf.for %{{.*}} = %[[TID]] to %{{.*}} step %c128
// CHECK:             memref.store %{{.*}}, %[[STAGE]]
// CHECK:           gpu.barrier
// Only partial blocks compare positions (inside the scf.if of the tile
// program): kp <= qp for causality.
// CHECK:           scf.if %{{.*}} {
// CHECK:             arith.cmpi sle
// CHECK:           }
// Row maxima and sums reduced across the four lanes of a row.
// CHECK:           gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK:           gpu.shuffle  xor %{{.*}}, %c2_i32, %c32_i32 : f32
// The probabilities exp2(s - max) as one fma (the scalar lowering's scores
// are already in base-2 units: the factor is 1) and one ex2.approx.ftz.
// CHECK:           math.fma
// CHECK:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK:           gpu.barrier
// CHECK:           gpu.barrier
// CHECK-NOT:     kvattn.tile
// CHECK:         gpu.return

// MAPPING: error: 'gpu.func' op kvattn-lower-tile-to-gpu maps 16 or 32 query rows to each warp and 8-column fragments to lanes: block-m must be 16 x num-warps (or 32 x num-warps on tensor cores) and block-n a multiple of 8 (got block-m = 32, block-n = 64, num-warps = 4)

// 32-row warps (block-m = 32 x num-warps): two m16 tiles per warp. The
// lane's scores and accumulator are [4 rows][8 slices][2], the query
// fragments of both tiles [2 x 4 k steps][4] registers, the row statistics
// [2][4]; no shared max/sum tiles: the query tile (128 x 64 f16) and the
// K and V stages (64 x 64 f16 each) are all of the 32 KB. Each K fragment
// (one ldmatrix.x4: two 8-key slices) feeds the mma of both tiles.
// WIDE-LABEL: gpu.func @f_kvattn_0
// WIDE-SAME:    known_block_size = array<i32: 128, 1, 1>
// WIDE-SAME:    kvattn.dynamic_smem_bytes = 32768 : i64
// WIDE:         memref.alloca() : memref<4x8x2xf32>
// WIDE:         memref.alloca() : memref<4x8x2xf32>
// WIDE:         memref.alloca() : memref<8x4xvector<2xf16>>
// WIDE:         memref.alloca() : memref<2x4xf32>
// WIDE:         scf.for
// WIDE:           %[[KB:.*]] = nvgpu.ldmatrix %{{.*}} {numTiles = 4 : i32, transpose = false} : memref<?xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
// WIDE-COUNT-4:   nvvm.mma.sync A
// WIDE:           nvgpu.ldmatrix %{{.*}} {numTiles = 4 : i32, transpose = false} : memref<?xf16, #gpu.address_space<workgroup>>
// V fragments: one ldmatrix.x4.trans feeds four mma as well.
// WIDE:           nvgpu.ldmatrix %{{.*}} {numTiles = 4 : i32, transpose = true}
// WIDE-COUNT-4:   nvvm.mma.sync A
// WIDESCALAR: error: 'gpu.func' op kvattn-lower-tile-to-gpu: 32 query rows per warp (block-m = 128, num-warps = 4) need the tensor-core lowering with the scores in registers
func.func @f(%q: tensor<1x8x100x64xf16>, %k: tensor<1x2x300x64xf16>, %v: tensor<1x2x300x64xf16>,
             %pos: tensor<1xi32>) -> tensor<1x8x100x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x8x100x64xf16>, tensor<1x2x300x64xf16>, tensor<1x2x300x64xf16> -> tensor<1x8x100x64xf16>
  return %o : tensor<1x8x100x64xf16>
}
