// RUN: kvattn-opt %s -split-input-file -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=MMA
// RUN: kvattn-opt %s -split-input-file -kvattn-tile -kvattn-outline-tile-programs="tensor-cores=false" -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=SCALAR
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=128 num-warps=4" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=WIDE
// RUN: kvattn-opt %s -split-input-file -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=WGMMA
// RUN: kvattn-opt %s -split-input-file -kvattn-tile -kvattn-outline-tile-programs="wgmma=true producer-warpgroup=false" -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=NOPRODUCER
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=128 num-warps=8" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=PINGPONG
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=128 num-warps=8" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts="ping-pong=false" | FileCheck %s --check-prefix=NOPINGPONG
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=OVERLAP
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts -kvattn-assign-tile-layouts="intra-warpgroup-overlap=false" | FileCheck %s --check-prefix=OVERLAP
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=128 block-n=128 num-warps=8 pack-gqa=false" -kvattn-outline-tile-programs="wgmma=true" -kvattn-assign-tile-layouts="intra-warpgroup-overlap=false" | FileCheck %s --check-prefix=NOOVERLAP
// RUN: kvattn-opt %s -split-input-file -kvattn-tile -kvattn-outline-tile-programs -kvattn-assign-tile-layouts="value-prefetch=false key-prefetch=false query-in-registers=false lazy-rescale=false" | FileCheck %s --check-prefix=OPTS

// Every scratch tile of an outlined attention program gets its role; the
// accumulator and the scores the accumulator fragment they live in, the
// query on mma.sync kernels the A operand's. On tensor cores the query tile
// holds the query in its own 16-bit type (f16 here), not f32. The kernel
// gets its schedule and its shared memory (kvattn.shared_memory: the K and V
// staging blocks, TMA's second stages and barriers; each tile the
// allocation places there its kvattn.shared_offset: the scores and row
// statistics that live in registers get none), the tile ops the pairings of
// their copies: the tile.qk issues the V block
// of its block's tile.softmax_update (value_prefetch), which issues the
// next K block announced by the tile.prefetch in the loop (key_prefetch);
// the tile.prefetch before the loop is issued where it stands.

// mma.sync (f16, 64 x 64 blocks: 16-row warps, one m16 tile each).
// MMA-LABEL: gpu.func @prefill_kvattn_0
// MMA-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 2, scores_in_registers = true, query_in_registers = true, lazy_rescale = true>
// MMA-SAME:    kvattn.shared_memory = #kvattn.shared_memory<bytes = 24576, key_stage = 8192, value_stage = 16384>
// MMA-SAME:    kvattn.tensor_cores
// MMA:         memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 2, tiles_per_warp = 1, a_operand>, kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf16>
// MMA-NEXT:    memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 2, tiles_per_warp = 1, accumulator>, kvattn.tile_role = #kvattn.tile_role<scores>} : memref<64x64xf32>
// MMA-NEXT:    memref.alloca() {kvattn.tile_role = #kvattn.tile_role<row_stats>} : memref<64xf32>
// MMA-NEXT:    memref.alloca() {kvattn.tile_role = #kvattn.tile_role<row_stats>} : memref<64xf32>
// MMA-NEXT:    memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 2, tiles_per_warp = 1, accumulator>, kvattn.tile_role = #kvattn.tile_role<accumulator>} : memref<64x64xf32>
// MMA-NEXT:    kvattn.tile.init
// MMA:         kvattn.tile.prefetch
// MMA-NOT:       kvattn.key_prefetch
// MMA-SAME:      : memref<1x2x300x64xf16>
// MMA:         scf.for
// MMA:           kvattn.tile.qk {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<wait_copies = 0, barrier = true>, kvattn.value_prefetch = 0 : i64}
// MMA:           kvattn.tile.prefetch {{.*}}{kvattn.key_prefetch = 0 : i64}
// MMA:           kvattn.tile.softmax_update {{.*}}{kvattn.key_prefetch = 0 : i64, kvattn.stage_sync = #kvattn.stage_sync<wait_copies = 0, barrier = true>, kvattn.value_prefetch = 0 : i64}

// The stage synchronisation (kvattn.stage_sync, docs/gpu-lowering.md
// "Stage synchronisation"): each op waits for the one copy group in
// flight, its stage's (wait_copies = 0: the K block the previous softmax
// issued; the V block its tile.qk issued), then a barrier; the copies it
// issues after that barrier overwrite a stage every thread has finished
// reading. Without the pairings (OPTS, below) each op issues its own
// block first, with the same synchronisation. The scalar lowering's stages
// and the TMA ring have none (the ops stage their own blocks; the ring has
// its mbarriers).

// The options: no pairings, one K block in flight, the query fragments in
// shared memory.
// OPTS-LABEL: gpu.func @prefill_kvattn_0
// OPTS-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 1, scores_in_registers = true>
// (lazy-rescale=false: no lazy_rescale either.)
// OPTS-NOT:     kvattn.value_prefetch
// OPTS-NOT:     kvattn.key_prefetch
// OPTS:         kvattn.tile.qk {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<wait_copies = 0, barrier = true>}
// OPTS-NOT:     kvattn.value_prefetch
// OPTS-NOT:     kvattn.key_prefetch
// OPTS:         kvattn.tile.softmax_update {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<wait_copies = 0, barrier = true>}
// OPTS:         gpu.return

// The scalar lowering owns scores and accumulator as the mma.sync
// accumulator does; its query tile is plain shared memory (no layout).
// SCALAR-LABEL: gpu.func @prefill_kvattn_0
// SCALAR-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1>
// SCALAR-NOT:    kvattn.tensor_cores
// SCALAR:        memref.alloca() {kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf32>
// SCALAR-NEXT:   memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 2, tiles_per_warp = 1, accumulator>, kvattn.shared_offset = 16384 : i64, kvattn.tile_role = #kvattn.tile_role<scores>} : memref<64x64xf32>
// SCALAR-NOT:    kvattn.value_prefetch
// SCALAR-NOT:    kvattn.key_prefetch
// SCALAR-NOT:    kvattn.stage_sync
// SCALAR:        gpu.return

// block-m = 32 x num-warps: two m16 tiles per warp, four rows per lane.
// WIDE-LABEL: gpu.func @prefill_kvattn_0
// WIDE-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 2, scores_in_registers = true, query_in_registers = true, lazy_rescale = true>
// WIDE:         memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 4, tiles_per_warp = 2, a_operand>, kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<128x64xf16>
// WIDE:         memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 4, tiles_per_warp = 2, accumulator>, kvattn.tile_role = #kvattn.tile_role<accumulator>} : memref<128x64xf32>

// sm_90a: wgmma's m64nNk16 accumulator; the query is read from shared
// memory (no register layout).
// sm_90a with the TMA ring (a contiguous cache): the K ring issues each
// block where its tile.prefetch stands (no key_prefetch pairing).
// WGMMA-LABEL: gpu.func @prefill_kvattn_0
// WGMMA-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, scores_in_registers = true, producer_warps = 4, lazy_rescale = true>
// WGMMA-SAME:    kvattn.shared_memory = #kvattn.shared_memory<bytes = 32832, key_stage = 8192, value_stage = 16384, key_stage1 = 24576, value_stage1 = 16384, barriers = 32768>
// WGMMA-SAME:    kvattn.wgmma
// Without the producer warpgroup (producer-warpgroup=false) the block is
// the consumers' 4 warps and the schedule says so (the consumers' thread 0
// issues the boxes).
// NOPRODUCER-LABEL: gpu.func @prefill_kvattn_0
// NOPRODUCER-SAME:    known_block_size = array<i32: 128, 1, 1>
// NOPRODUCER-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, scores_in_registers = true, lazy_rescale = true>
// Two consumer warpgroups (128 rows) with the producer take turns at the
// tensor cores (ping_pong; docs/gpu-lowering.md "Ping-pong"), unless the
// pass is told not to.
// PINGPONG-LABEL: gpu.func @prefill_kvattn_0
// PINGPONG-SAME:    known_block_size = array<i32: 384, 1, 1>
// PINGPONG-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, scores_in_registers = true, producer_warps = 4, lazy_rescale = true, ping_pong = true>
// NOPINGPONG-LABEL: gpu.func @prefill_kvattn_0
// NOPINGPONG-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, scores_in_registers = true, producer_warps = 4, lazy_rescale = true>
// WGMMA:         memref.alloca() {kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf16>
// WGMMA-NEXT:    memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<wgmma_m64nNk16, rows_per_lane = 2, tiles_per_warp = 1, accumulator>, kvattn.tile_role = #kvattn.tile_role<scores>} : memref<64x64xf32>
// WGMMA:         kvattn.tile.qk {{.*}}{kvattn.value_prefetch = 0 : i64}
// WGMMA-NOT:     kvattn.key_prefetch
// WGMMA-NOT:     kvattn.stage_sync
// WGMMA:         kvattn.tile.softmax_update {{.*}}{kvattn.value_prefetch = 0 : i64}
func.func @prefill(%q: tensor<1x8x100x64xf16>, %k: tensor<1x2x300x64xf16>, %v: tensor<1x2x300x64xf16>,
                   %pos: tensor<1xi32>) -> tensor<1x8x100x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x8x100x64xf16>, tensor<1x2x300x64xf16>, tensor<1x2x300x64xf16> -> tensor<1x8x100x64xf16>
  return %o : tensor<1x8x100x64xf16>
}

// -----

// f32: the scalar lowering whatever the options (no tensor cores).
// MMA-LABEL: gpu.func @f32_kvattn_0
// MMA-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1>
// MMA-NOT:     kvattn.tensor_cores
// MMA:         memref.alloca() {kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf32>
// MMA:         kvattn.tile_role = #kvattn.tile_role<accumulator>
func.func @f32(%q: tensor<1x8x100x64xf32>, %k: tensor<1x2x300x64xf32>, %v: tensor<1x2x300x64xf32>,
               %pos: tensor<1xi32>) -> tensor<1x8x100x64xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x8x100x64xf32>, tensor<1x2x300x64xf32>, tensor<1x2x300x64xf32> -> tensor<1x8x100x64xf32>
  return %o : tensor<1x8x100x64xf32>
}

// -----

// Intra-warpgroup overlap (docs/gpu-lowering.md): two consumer warpgroups,
// the producer, two V stages (hd 128, 128 x 128) and the deferred
// probabilities (32 registers) beside the scores and accumulator (64 + 64):
// the schedule says intra_warpgroup_overlap, the KV loop's first block runs
// before it under `lb < ub` (its tile.qk issues no pending P.V), the loop
// starts one block later and its tile.qk issues the previous block's
// (kvattn.pending_pv); each copy has its own V pairing. Unless the pass is
// told not to. Run again (whatever its option), the pass keeps a peeled
// program as it is, and its schedule.
// OVERLAP-LABEL: gpu.func @overlap_kvattn_0
// OVERLAP-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2, scores_in_registers = true, producer_warps = 4, lazy_rescale = true, ping_pong = true, intra_warpgroup_overlap = true>
// OVERLAP:         kvattn.tile.load_q
// OVERLAP:         %[[ANY:.*]] = arith.cmpi slt, %[[LB:.*]], %[[UB:.*]] : index
// OVERLAP-NEXT:    scf.if %[[ANY]] {
// OVERLAP:           kvattn.tile.qk
// OVERLAP-NOT:         kvattn.pending_pv
// OVERLAP-SAME:        {kvattn.value_prefetch = 0 : i64}
// OVERLAP:           kvattn.tile.softmax_update {{.*}}{kvattn.value_prefetch = 0 : i64}
// OVERLAP-NEXT:    }
// OVERLAP-NEXT:    %[[NEXT:.*]] = arith.addi %[[LB]], %{{.*}} : index
// OVERLAP-NEXT:    scf.for %{{.*}} = %[[NEXT]] to %[[UB]]
// OVERLAP:           kvattn.tile.qk {{.*}}{kvattn.pending_pv, kvattn.value_prefetch = 1 : i64}
// OVERLAP:           kvattn.tile.softmax_update {{.*}}{kvattn.value_prefetch = 1 : i64}
// OVERLAP-NEXT:    }
// OVERLAP-NEXT:    kvattn.tile.store
// NOOVERLAP-LABEL: gpu.func @overlap_kvattn_0
// NOOVERLAP-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2, scores_in_registers = true, producer_warps = 4, lazy_rescale = true, ping_pong = true>
// NOOVERLAP:         kvattn.tile.load_q
// NOOVERLAP-NOT:     kvattn.tile.qk
// NOOVERLAP:         scf.for
// NOOVERLAP-NOT:       kvattn.pending_pv
// NOOVERLAP:           kvattn.tile.qk
// NOOVERLAP-NOT:     kvattn.tile.qk
// NOOVERLAP:         gpu.return
func.func @overlap(%q: tensor<1x4x256x128xbf16>, %k: tensor<1x2x1024x128xbf16>, %v: tensor<1x2x1024x128xbf16>,
                   %pos: tensor<1xi32>) -> tensor<1x4x256x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x4x256x128xbf16>, tensor<1x2x1024x128xbf16>, tensor<1x2x1024x128xbf16> -> tensor<1x4x256x128xbf16>
  return %o : tensor<1x4x256x128xbf16>
}

// -----

// An FP8 cache on sm_90a: converted into the 16-bit stages by plain loads
// and stores (no TMA ring; pipeline_depth = 1: each tile.qk stages its K
// block, and V as paired), landed for the thread that wrote them: no copy
// group to wait for (no wait_copies); wgmma reads the stages through the
// async proxy, so each sync point fences this thread's stores before the
// barrier. With
// per-tensor scales the stages hold the exact codes in f16, and the bf16
// query's tile is retyped to f16 (tile.load_q converts it), on mma.sync
// (its A operand) as on wgmma.
// MMA-LABEL: gpu.func @fp8_kvattn_0
// MMA:         memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 2, tiles_per_warp = 1, a_operand>, kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf16>
// MMA:         kvattn.tile.load_q {{.*}} : memref<1x8x100x64xbf16>, memref<64x64xf16>
// WGMMA-LABEL: gpu.func @fp8_kvattn_0
// WGMMA-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 1, scores_in_registers = true, lazy_rescale = true>
// WGMMA:         memref.alloca() {kvattn.shared_offset = 0 : i64, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf16>
// WGMMA:         kvattn.tile.load_q {{.*}} : memref<1x8x100x64xbf16>, memref<64x64xf16>
// WGMMA:         kvattn.tile.qk {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<proxy_fence = true, barrier = true>, kvattn.value_prefetch = 0 : i64}
// WGMMA:         kvattn.tile.softmax_update {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<proxy_fence = true, barrier = true>, kvattn.value_prefetch = 0 : i64}
func.func @fp8(%q: tensor<1x8x100x64xbf16>, %k: tensor<1x2x300x64xf8E4M3FN>, %v: tensor<1x2x300x64xf8E4M3FN>,
               %pos: tensor<1xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<1x8x100x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) k_scale(%ks : tensor<1xf32>) v_scale(%vs : tensor<1xf32>) causal
      : tensor<1x8x100x64xbf16>, tensor<1x2x300x64xf8E4M3FN>, tensor<1x2x300x64xf8E4M3FN> -> tensor<1x8x100x64xbf16>
  return %o : tensor<1x8x100x64xbf16>
}
