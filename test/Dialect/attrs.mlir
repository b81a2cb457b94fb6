// RUN: kvattn-opt %s -split-input-file | kvattn-opt -split-input-file | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file --mlir-print-op-generic | kvattn-opt -split-input-file | FileCheck %s --enable-var-scope
// Round trip of the typed metadata (kvattn.role, kvattn.tile_config with and
// without a split rule, kvattn.params), pretty and generic. Parameters at
// their defaults (split_kv = 1, group = 1, vector_width = 0, access = read)
// are not printed.

// CHECK-LABEL: func @roles
// CHECK: bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<query>}
// CHECK: memref.alloc() {kvattn.role = #kvattn.role<out_parts>} : memref<2x1x8x4x64xf32>
func.func @roles(%q: tensor<1x8x4x64xf16>) {
  %0 = bufferization.to_buffer %q read_only {kvattn.role = #kvattn.role<query>} : tensor<1x8x4x64xf16> to memref<1x8x4x64xf16>
  %1 = memref.alloc() {kvattn.role = #kvattn.role<out_parts>} : memref<2x1x8x4x64xf32>
  return
}

// -----

// A run-time split: split_kv = 0 on the attention program with its rule;
// the defaults written out are dropped.
// CHECK-LABEL: func @tile_configs
// CHECK: } {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, split_kv = 0, group = 4, split_rule = <max = 64, block_m = 16, block_n = 32, group = 4, programs_per_sm = 8, min_keys = 512, num_sms = 132>>}
// CHECK: } {kvattn.tile_config = #kvattn.tile_config<kind = merge, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>}
func.func @tile_configs() {
  scf.forall (%i) in (4) {
  } {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, split_kv = 0, group = 4, split_rule = #kvattn.split_rule<max = 64, block_m = 16, block_n = 32, group = 4, programs_per_sm = 8, min_keys = 512, num_sms = 132>>}
  scf.forall (%i) in (4) {
  } {kvattn.tile_config = #kvattn.tile_config<kind = merge, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, split_kv = 1, group = 1, vector_width = 0>}
  return
}

// -----

// A kernel's parameters: pointers with symbolic and static dims (read by
// default, or written), then the sizes; the validation kernel names the
// kernel it validates.
// CHECK-LABEL: gpu.module @kernels
// CHECK: gpu.func @append(%{{.*}}: memref<1xf16>, %{{.*}}: memref<1xi32>, %{{.*}}: index) kernel
// CHECK-SAME: kvattn.params = [#kvattn.param<name = "cache", kind = pointer, element_type = f16, shape = ["B", 2, 16, 64], access = write>, #kvattn.param<name = "pos", kind = pointer, element_type = i32, shape = ["B"]>, #kvattn.param<name = "B", kind = scalar, element_type = i64>]
// CHECK-SAME: kvattn.tile_config = #kvattn.tile_config<kind = append, block_m = 4, block_n = 0, num_warps = 4, num_stages = 1, vector_width = 8>
// CHECK: gpu.func @append_validate
// CHECK-SAME: kvattn.tile_config = #kvattn.tile_config<kind = validate, block_m = 1, block_n = 0, num_warps = 4, num_stages = 1, validates = @append>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @append(%cache: memref<1xf16>, %pos: memref<1xi32>, %b: index) kernel attributes {
        kvattn.params = [#kvattn.param<name = "cache", kind = pointer, element_type = f16, shape = ["B", 2, 16, 64], access = write>,
                         #kvattn.param<name = "pos", kind = pointer, element_type = i32, shape = ["B"], access = read>,
                         #kvattn.param<name = "B", kind = scalar, element_type = i64>],
        kvattn.tile_config = #kvattn.tile_config<kind = append, block_m = 4, block_n = 0, num_warps = 4, num_stages = 1, vector_width = 8>} {
      gpu.return
    }
    gpu.func @append_validate() kernel attributes {
        kvattn.tile_config = #kvattn.tile_config<kind = validate, block_m = 1, block_n = 0, num_warps = 4, num_stages = 1, validates = @append>} {
      gpu.return
    }
  }
}

// -----

// A TMA kernel's tensor maps: one tensor_maps parameter (an !llvm.ptr
// argument) with its maps.
// CHECK-LABEL: gpu.module @tma
// CHECK: kvattn.params = [#kvattn.param<name = "key", kind = pointer, element_type = bf16, shape = ["B", 2, "S", 64]>, #kvattn.param<name = "tensor_maps", kind = tensor_maps, element_type = i64, maps = [{box = [64, 64, 1, 1], buffer = "key", dims = [3, 2, 1, 0], element_type = bf16, name = "k_load", oob_fill = "zero", swizzle = "128B"}]>]
module attributes {gpu.container_module} {
  gpu.module @tma {
    gpu.func @attention(%key: memref<1xbf16>, %maps: !llvm.ptr) kernel attributes {
        kvattn.params = [#kvattn.param<name = "key", kind = pointer, element_type = bf16, shape = ["B", 2, "S", 64]>,
                         #kvattn.param<name = "tensor_maps", kind = tensor_maps, element_type = i64, maps = [{name = "k_load", buffer = "key", dims = [3, 2, 1, 0], box = [64, 64, 1, 1], swizzle = "128B", element_type = bf16, oob_fill = "zero"}]>]} {
      gpu.return
    }
  }
}

// -----

// The tile roles and fragment layouts of -kvattn-assign-tile-layouts.
// CHECK-LABEL: func @tile_layouts
// CHECK: memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 4, tiles_per_warp = 2, accumulator>, kvattn.tile_role = #kvattn.tile_role<accumulator>} : memref<128x64xf32>
// CHECK: memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<wgmma_m64nNk16, rows_per_lane = 2, tiles_per_warp = 1, a_operand>, kvattn.tile_role = #kvattn.tile_role<query>} : memref<64x64xf32>
// CHECK: memref.alloca() {kvattn.tile_role = #kvattn.tile_role<row_stats>} : memref<64xf32>
func.func @tile_layouts() {
  %0 = memref.alloca() {kvattn.tile_role = #kvattn.tile_role<accumulator>, kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 4, tiles_per_warp = 2, accumulator>} : memref<128x64xf32>
  %1 = memref.alloca() {kvattn.tile_role = #kvattn.tile_role<query>, kvattn.fragment_layout = #kvattn.fragment_layout<wgmma_m64nNk16, rows_per_lane = 2, tiles_per_warp = 1, a_operand>} : memref<64x64xf32>
  %2 = memref.alloca() {kvattn.tile_role = #kvattn.tile_role<row_stats>} : memref<64xf32>
  return
}

// -----

// The CPU vector layouts of -kvattn-assign-vector-layouts, on a scratch
// tile and on a tile argument; few_rows = 0 is not printed.
// CHECK-LABEL: func @vector_layouts
// CHECK-SAME: memref<16x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 8>}
// CHECK: memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<64x32xf32>
// CHECK: memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 4>} : memref<64xf32>
func.func @vector_layouts(%acc: memref<16x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 8, few_rows = 0>}) {
  %0 = memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<64x32xf32>
  %1 = memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 4>} : memref<64xf32>
  return
}

// -----

// A GPU kernel's schedule; the stages and flags at their defaults (0,
// false) are not printed.
// CHECK-LABEL: func @schedules
// CHECK-SAME: kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, scores_in_registers = true, producer_warps = 4, lazy_rescale = true, ping_pong = true>
// CHECK-LABEL: func @overlap_schedule
// CHECK-SAME: kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2, scores_in_registers = true, producer_warps = 4, intra_warpgroup_overlap = true>
// CHECK-LABEL: func @scalar_schedule
// CHECK-SAME: kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1>
func.func @schedules() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, scores_in_registers = true, query_in_registers = false, producer_warps = 4, lazy_rescale = true, ping_pong = true>} {
  return
}
func.func @overlap_schedule() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2, scores_in_registers = true, producer_warps = 4, intra_warpgroup_overlap = true>} {
  return
}
func.func @scalar_schedule() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1>} {
  return
}
// A kernel's shared memory: absent offsets (-1) are not printed; a tile's
// byte offset on its alloca.
// CHECK-LABEL: func @shared_memory
// CHECK-SAME: kvattn.shared_memory = #kvattn.shared_memory<bytes = 32832, key_stage = 8192, value_stage = 16384, key_stage1 = 24576, value_stage1 = 16384, barriers = 32768>
// CHECK: memref.alloca() {kvattn.shared_offset = 0 : i64} : memref<64x64xf16>
func.func @shared_memory() attributes {kvattn.shared_memory = #kvattn.shared_memory<bytes = 32832, key_stage = 8192, value_stage = 16384, key_stage1 = 24576, value_stage1 = 16384, barriers = 32768, exchange = -1>} {
  %q = memref.alloca() {kvattn.shared_offset = 0 : i64} : memref<64x64xf16>
  return
}
// Where a tile op waits for its cp.async stage: absent fields (false, -1)
// are not printed, in any order when parsed; an op that needs nothing has
// an empty one.
// CHECK-LABEL: func @stage_sync
// CHECK: kvattn.tile.qk {{.*}} {kvattn.stage_sync = #kvattn.stage_sync<barrier_before_copies = true, wait_copies = 0, barrier = true>}
// CHECK: kvattn.tile.qk {{.*}} {kvattn.stage_sync = #kvattn.stage_sync<wait_copies = 1, proxy_fence = true, barrier = true>}
// CHECK: kvattn.tile.softmax_update {{.*}} {kvattn.stage_sync = #kvattn.stage_sync<>}
func.func @stage_sync(%qt: memref<16x8xf16>, %k: memref<1x2x?x8xf16>, %v: memref<1x2x?x8xf16>,
                      %s: memref<16x32xf32>, %m: memref<16xf32>, %l: memref<16xf32>,
                      %acc: memref<16x8xf32>, %i: index, %n: index) {
  kvattn.tile.qk %qt, %k[%i, %i, %i] size(%n, %n) into %s scale = 0.5
      {kvattn.stage_sync = #kvattn.stage_sync<barrier_before_copies = true, wait_copies = 0, barrier = true>}
      : memref<16x8xf16>, memref<1x2x?x8xf16>, memref<16x32xf32>
  kvattn.tile.qk %qt, %k[%i, %i, %i] size(%n, %n) into %s scale = 0.5
      {kvattn.stage_sync = #kvattn.stage_sync<proxy_fence = true, wait_copies = 1, barrier = true, barrier_before_copies = false>}
      : memref<16x8xf16>, memref<1x2x?x8xf16>, memref<16x32xf32>
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] size(%n, %n) state(%m, %l, %acc)
      {kvattn.stage_sync = #kvattn.stage_sync<wait_copies = -1>}
      : memref<16x32xf32>, memref<1x2x?x8xf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}
