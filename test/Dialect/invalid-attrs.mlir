// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// One case per verifier rule of the typed metadata (#kvattn.role,
// #kvattn.tile_config, #kvattn.split_rule, #kvattn.param) and of the
// discardable attributes kvattn.role, kvattn.tile_config, kvattn.params.

func.func @unknown_role() {
  // expected-error @+2 {{expected ::mlir::kvattn::BufferRole to be one of: query, key, value}}
  // expected-error @+1 {{failed to parse KVAttn_BufferRoleAttr parameter 'value'}}
  %0 = memref.alloc() {kvattn.role = #kvattn.role<queries>} : memref<4xf32>
  return
}

// -----

func.func @role_not_typed() {
  // expected-error @+1 {{'kvattn.role' is not a #kvattn.role: "query"}}
  %0 = memref.alloc() {kvattn.role = "query"} : memref<4xf32>
  return
}

// -----

func.func @role_not_on_a_buffer(%i: index) {
  // expected-error @+1 {{'kvattn.role' belongs on an op defining one buffer}}
  %0 = arith.addi %i, %i {kvattn.role = #kvattn.role<kv_len>} : index
  return
}

// -----

func.func @tile_config_not_typed() {
  // expected-error @+1 {{'kvattn.tile_config' is not a #kvattn.tile_config: {block_m = 64 : i64}}}
  scf.forall (%i) in (4) {
  } {kvattn.tile_config = {block_m = 64 : i64}}
  return
}

// -----

// expected-error @+1 {{tile_config: block_m = 0 is outside [1, 256]}}
func.func @block_m_zero() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 0, block_n = 64, num_warps = 4, num_stages = 2>} {
  return
}

// -----

// expected-error @+1 {{tile_config: block_n = 512 is outside [0, 256]}}
func.func @block_n_large() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 512, num_warps = 4, num_stages = 2>} {
  return
}

// -----

// expected-error @+1 {{tile_config: num_warps = 64 is outside [0, 16]}}
func.func @num_warps_large() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 64, num_stages = 2>} {
  return
}

// -----

// expected-error @+1 {{tile_config: num_stages = 0 is outside [1, 8]}}
func.func @num_stages_zero() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 0>} {
  return
}

// -----

// expected-error @+1 {{tile_config: group = 0 must be at least 1}}
func.func @group_zero() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, group = 0>} {
  return
}

// -----

// expected-error @+1 {{tile_config: split_kv = -1 is negative (0: chosen at run time)}}
func.func @split_negative() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, split_kv = -1>} {
  return
}

// -----

// A split chosen at run time needs the rule the runtime computes it from.
// expected-error @+1 {{tile_config: split_kv = 0 (chosen at run time) needs a split_rule}}
func.func @runtime_split_without_rule() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, split_kv = 0>} {
  return
}

// -----

// expected-error @+1 {{tile_config: a split_rule goes with split_kv = 0, not 4}}
func.func @rule_with_static_split() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, split_kv = 4, split_rule = <max = 4, block_m = 64, block_n = 64, group = 1, programs_per_sm = 2, min_keys = 0, num_sms = 132>>} {
  return
}

// -----

// expected-error @+1 {{tile_config: a append kernel has no split_rule}}
func.func @rule_on_append() attributes {kvattn.tile_config = #kvattn.tile_config<kind = append, block_m = 4, block_n = 0, num_warps = 4, num_stages = 1, split_rule = <max = 4, block_m = 64, block_n = 64, group = 1, programs_per_sm = 2, min_keys = 0, num_sms = 132>>} {
  return
}

// -----

// expected-error @+1 {{tile_config: vector_width = 8 belongs to an append kernel}}
func.func @vector_width_on_attention() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, vector_width = 8>} {
  return
}

// -----

// expected-error @+1 {{tile_config: a validate kernel names the kernel it validates}}
func.func @validate_without_kernel() attributes {kvattn.tile_config = #kvattn.tile_config<kind = validate, block_m = 1, block_n = 0, num_warps = 4, num_stages = 1>} {
  return
}

// -----

// expected-error @+1 {{tile_config: only a validate kernel names the kernel it validates}}
func.func @validates_on_attention() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, validates = @other>} {
  return
}

// -----

// expected-error @+2 {{expected ::mlir::kvattn::KernelKind to be one of: attention, attention_varlen, merge, append, validate}}
// expected-error @+1 {{failed to parse KVAttn_TileConfigAttr parameter 'kind'}}
func.func @unknown_kind() attributes {kvattn.tile_config = #kvattn.tile_config<kind = prefill, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>} {
  return
}

// -----

// expected-error @+1 {{struct is missing required parameter: num_stages}}
func.func @missing_parameter() attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4>} {
  return
}

// -----

// expected-error @+1 {{split_rule: max = 0 is outside [1, 65535]}}
func.func @rule_max_zero() attributes {rule = #kvattn.split_rule<max = 0, block_m = 64, block_n = 64, group = 1, programs_per_sm = 2, min_keys = 0, num_sms = 132>} {
  return
}

// -----

// expected-error @+1 {{split_rule: programs_per_sm = 0 must be at least 1}}
func.func @rule_programs_zero() attributes {rule = #kvattn.split_rule<max = 4, block_m = 64, block_n = 64, group = 1, programs_per_sm = 0, min_keys = 0, num_sms = 132>} {
  return
}

// -----

// expected-error @+1 {{split_rule: min_keys = -1 is negative}}
func.func @rule_min_keys() attributes {rule = #kvattn.split_rule<max = 4, block_m = 64, block_n = 64, group = 1, programs_per_sm = 2, min_keys = -1, num_sms = 132>} {
  return
}

// -----

// expected-error @+1 {{split_rule: num_sms = -2 is negative}}
func.func @rule_num_sms() attributes {rule = #kvattn.split_rule<max = 4, block_m = 64, block_n = 64, group = 1, programs_per_sm = 2, min_keys = 0, num_sms = -2>} {
  return
}

// -----

// expected-error @+1 {{param: the name is empty}}
func.func @param_unnamed() attributes {p = #kvattn.param<name = "", kind = scalar, element_type = i64>} {
  return
}

// -----

// expected-error @+1 {{param 'B': a scalar is an i64, not 'i32'}}
func.func @scalar_i32() attributes {p = #kvattn.param<name = "B", kind = scalar, element_type = i32>} {
  return
}

// -----

// expected-error @+1 {{param 'B': a scalar has no shape}}
func.func @scalar_shape() attributes {p = #kvattn.param<name = "B", kind = scalar, element_type = i64, shape = [2]>} {
  return
}

// -----

// expected-error @+1 {{param 'B': a scalar is not written}}
func.func @scalar_written() attributes {p = #kvattn.param<name = "B", kind = scalar, element_type = i64, access = write>} {
  return
}

// -----

// expected-error @+1 {{param 'query': a pointer needs a shape}}
func.func @pointer_without_shape() attributes {p = #kvattn.param<name = "query", kind = pointer, element_type = f16>} {
  return
}

// -----

// expected-error @+1 {{param 'query': dim -1 : i64 is neither a size name nor a non-negative integer}}
func.func @pointer_negative_dim() attributes {p = #kvattn.param<name = "query", kind = pointer, element_type = f16, shape = ["B", -1]>} {
  return
}

// -----

// expected-error @+1 {{param 'query': element type 'index' is not an integer or float}}
func.func @pointer_index() attributes {p = #kvattn.param<name = "query", kind = pointer, element_type = index, shape = [4]>} {
  return
}

// -----

// expected-error @+1 {{param 'tensor_maps': tensor_maps needs maps}}
func.func @tensor_maps_without_maps() attributes {p = #kvattn.param<name = "tensor_maps", kind = tensor_maps, element_type = i64>} {
  return
}

// -----

// expected-error @+1 {{param 'tensor_maps': map {name = "k_load"} needs name, buffer, dims and box (1 to 5, as many), swizzle, element_type, oob_fill}}
func.func @tensor_map_fields() attributes {p = #kvattn.param<name = "tensor_maps", kind = tensor_maps, element_type = i64, maps = [{name = "k_load"}]>} {
  return
}

// -----

// expected-error @+1 {{param 'key': only a tensor_maps parameter has maps}}
func.func @pointer_with_maps() attributes {p = #kvattn.param<name = "key", kind = pointer, element_type = f16, shape = [4], maps = [{name = "k_load"}]>} {
  return
}

// -----

// expected-error @+1 {{'kvattn.params' entry 0 is not a #kvattn.param: {name = "B"}}}
func.func @params_untyped(%b: index) attributes {kvattn.params = [{name = "B"}]} {
  return
}

// -----

// expected-error @+1 {{'kvattn.params' names parameter 'B' twice}}
func.func @params_twice(%a: index, %b: index) attributes {kvattn.params = [#kvattn.param<name = "B", kind = scalar, element_type = i64>, #kvattn.param<name = "B", kind = scalar, element_type = i64>]} {
  return
}

// -----

// expected-error @+1 {{'kvattn.params' has 1 entries, the kernel takes 2 arguments}}
func.func @params_count(%a: memref<1xf16>, %b: index) attributes {kvattn.params = [#kvattn.param<name = "B", kind = scalar, element_type = i64>]} {
  return
}

// -----

// expected-error @+1 {{'kvattn.params': parameter 'query' is a pointer, the argument a 'index'}}
func.func @params_kind(%a: index) attributes {kvattn.params = [#kvattn.param<name = "query", kind = pointer, element_type = f16, shape = [4]>]} {
  return
}

// -----

func.func @params_not_on_function() {
  // expected-error @+1 {{'kvattn.params' belongs on a kernel function}}
  scf.forall (%i) in (4) {
  } {kvattn.params = []}
  return
}

// -----

func.func @fragment_layout_rows() {
  // expected-error @+1 {{mma_m16n8k16 gives a lane 2 rows per m16 tile: rows_per_lane must be 2, got 4}}
  %0 = memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 4, tiles_per_warp = 1, accumulator>} : memref<64x64xf32>
  return
}

// -----

func.func @fragment_layout_tiles() {
  // expected-error @+1 {{mma_m16n8k16 layouts stack 1 or 2 m16 tiles in a warp, got tiles_per_warp = 3}}
  %0 = memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 6, tiles_per_warp = 3, accumulator>} : memref<64x64xf32>
  return
}

// -----

func.func @fragment_layout_wgmma_tiles() {
  // expected-error @+1 {{wgmma_m64nNk16 gives each warp of a warpgroup 16 rows, 2 per lane: rows_per_lane = 2 and tiles_per_warp = 1, got 4 and 2}}
  %0 = memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<wgmma_m64nNk16, rows_per_lane = 4, tiles_per_warp = 2, accumulator>} : memref<64x64xf32>
  return
}

// -----

func.func @fragment_layout_wgmma_b() {
  // expected-error @+1 {{wgmma_m64nNk16 reads its B operand from shared memory: it has no b_operand register fragment}}
  %0 = memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<wgmma_m64nNk16, rows_per_lane = 2, tiles_per_warp = 1, b_operand>} : memref<64x64xf32>
  return
}

// -----

func.func @fragment_layout_shape() {
  // expected-error @+2 {{expected ::mlir::kvattn::MmaShape to be one of: mma_m16n8k16, wgmma_m64nNk16}}
  // expected-error @+1 {{failed to parse KVAttn_FragmentLayoutAttr parameter 'shape'}}
  %0 = memref.alloca() {kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k8, rows_per_lane = 2, tiles_per_warp = 1, accumulator>} : memref<64x64xf32>
  return
}

// -----

func.func @tile_role_not_typed() {
  // expected-error @+1 {{'kvattn.tile_role' is not a #kvattn.tile_role: "scores"}}
  %0 = memref.alloca() {kvattn.tile_role = "scores"} : memref<64x64xf32>
  return
}

// -----

func.func @tile_role_not_on_a_tile(%i: index) {
  // expected-error @+1 {{'kvattn.tile_role' belongs on an op defining one statically shaped tile}}
  %0 = arith.addi %i, %i {kvattn.tile_role = #kvattn.tile_role<scores>} : index
  return
}

// -----

// expected-error @+1 {{pipeline_depth is 1 (each tile.qk loads its K block) or 2 (one block ahead), got 3}}
func.func @schedule_depth() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 3>} {
  return
}

// -----

// expected-error @+1 {{the TMA rings are a wgmma kernel's, 2 K stages and 0 (the latent form), 1 or 2 V stages: got 2 and 2 with mode mma_sync}}
func.func @schedule_tma_mode() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2>} {
  return
}

// -----

// expected-error @+1 {{a TMA ring has K stages, and V stages only beside them: got 0 and 2}}
func.func @schedule_tma_half() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_value_stages = 2>} {
  return
}

// -----

// expected-error @+1 {{the TMA rings are a wgmma kernel's, 2 K stages and 0 (the latent form), 1 or 2 V stages: got 2 and 3 with mode wgmma}}
func.func @schedule_tma_value_stages() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 1, tma_key_stages = 2, tma_value_stages = 3>} {
  return
}

// -----

// expected-error @+1 {{scores_in_registers needs tensor cores (the scalar lowering reads the shared score tile)}}
func.func @schedule_scalar_scores() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1, scores_in_registers = true>} {
  return
}

// -----

// expected-error @+1 {{query_in_registers holds mma.sync A fragments: mode wgmma has none}}
func.func @schedule_wgmma_query() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, query_in_registers = true>} {
  return
}

// -----

// expected-error @+1 {{producer_warps is 0 or, on a kernel with TMA rings, one warpgroup (4): got 4 with no TMA rings}}
func.func @schedule_producer_without_tma() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, producer_warps = 4>} {
  return
}

// -----

// expected-error @+1 {{producer_warps is 0 or, on a kernel with TMA rings, one warpgroup (4): got 2 with TMA rings}}
func.func @schedule_producer_two_warps() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2, producer_warps = 2>} {
  return
}

// -----

// expected-error @+1 {{ping_pong alternates the consumer warpgroups of a kernel with a producer warpgroup: producer_warps is 0}}
func.func @schedule_ping_pong_without_producer() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, ping_pong = true>} {
  return
}

// -----

// expected-error @+1 {{intra_warpgroup_overlap defers each P.V past the next Q.K^T of a wgmma kernel with a producer warpgroup and two TMA V stages: got producer_warps 4 and 1 V stages}}
func.func @schedule_overlap_one_value_stage() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 1, producer_warps = 4, intra_warpgroup_overlap = true>} {
  return
}

// -----

// expected-error @+1 {{intra_warpgroup_overlap defers each P.V past the next Q.K^T of a wgmma kernel with a producer warpgroup and two TMA V stages: got producer_warps 0 and 2 V stages}}
func.func @schedule_overlap_without_producer() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = wgmma, pipeline_depth = 2, tma_key_stages = 2, tma_value_stages = 2, intra_warpgroup_overlap = true>} {
  return
}

// -----

// expected-error @+1 {{lazy_rescale needs tensor cores (the scalar lowering rescales every block)}}
func.func @schedule_scalar_lazy() attributes {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1, lazy_rescale = true>} {
  return
}

// -----

func.func @schedule_not_on_a_function(%i: index) {
  // expected-error @+1 {{'kvattn.gpu_schedule' belongs on a kernel function}}
  %0 = arith.addi %i, %i {kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = scalar, pipeline_depth = 1>} : index
  return
}

// -----

func.func @prefetch_id_type(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{'kvattn.value_prefetch' is a non-negative i64 pairing id, got -1 : i64}}
  kvattn.tile.init %m, %l, %acc {kvattn.value_prefetch = -1 : i64} : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @pending_pv_op(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{'kvattn.pending_pv' is a unit attribute of a kvattn.tile.qk}}
  kvattn.tile.init %m, %l, %acc {kvattn.pending_pv} : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @prefetch_id_op(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{'kvattn.key_prefetch' belongs on a kvattn.tile.prefetch or a kvattn.tile.softmax_update}}
  kvattn.tile.init %m, %l, %acc {kvattn.key_prefetch = 0 : i64} : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @vector_layout_width() {
  // expected-error @+1 {{vector_layout width is a power of two from 1 to 16 (f32 lanes), got 12}}
  %0 = memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 12>} : memref<48x8xf32>
  return
}

// -----

func.func @vector_layout_few_rows() {
  // expected-error @+1 {{vector_layout few_rows is 0 to 64, got 65}}
  %0 = memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 65>} : memref<64x8xf32>
  return
}

// -----

func.func @vector_layout_columns_few_rows() {
  // expected-error @+1 {{vector_layout few_rows belongs on a rows layout (a columns tile has no few-rows form), got 8}}
  %0 = memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 16, few_rows = 8>} : memref<64x16xf32>
  return
}

// -----

func.func @vector_layout_not_a_layout() {
  // expected-error @+1 {{'kvattn.vector_layout' is not a #kvattn.vector_layout: 16 : i64}}
  %0 = memref.alloca() {kvattn.vector_layout = 16 : i64} : memref<64x16xf32>
  return
}

// -----

func.func @vector_layout_not_a_tile(%a: index) -> index {
  // expected-error @+1 {{'kvattn.vector_layout' belongs on an op defining one tile}}
  %0 = arith.addi %a, %a {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>} : index
  return %0 : index
}

// -----

// expected-error @+1 {{'kvattn.vector_layout' belongs on a memref argument}}
func.func @vector_layout_scalar_argument(%a: index {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>}) {
  return
}

// -----

// expected-error @+1 {{'kvattn.tile_role' is not a kvattn argument attribute (only 'kvattn.vector_layout' is)}}
func.func @unknown_argument_attribute(%a: memref<16x8xf32> {kvattn.tile_role = #kvattn.tile_role<query>}) {
  return
}

// -----

// expected-error @+1 {{value_stage = 40000 is not a byte offset in the kernel's 32768 bytes}}
func.func @shared_memory_outside() attributes {kvattn.shared_memory = #kvattn.shared_memory<bytes = 32768, key_stage = 8192, value_stage = 40000>} {
  return
}

// -----

// expected-error @+1 {{a TMA ring has key_stage1, value_stage1 and barriers, or none of them}}
func.func @shared_memory_half_ring() attributes {kvattn.shared_memory = #kvattn.shared_memory<bytes = 32768, key_stage = 8192, key_stage1 = 16384, barriers = 32000>} {
  return
}

// -----

// expected-error @+1 {{a share exchange has exchange and exchange_probs, or neither}}
func.func @shared_memory_half_exchange() attributes {kvattn.shared_memory = #kvattn.shared_memory<bytes = 32768, key_stage = 8192, exchange = 0>} {
  return
}

// -----

func.func @shared_memory_not_on_a_function(%i: index) {
  // expected-error @+1 {{'kvattn.shared_memory' belongs on a kernel function}}
  %0 = arith.addi %i, %i {kvattn.shared_memory = #kvattn.shared_memory<bytes = 32768, key_stage = 0>} : index
  return
}

// -----

func.func @shared_offset_negative() {
  // expected-error @+1 {{'kvattn.shared_offset' is a non-negative i64 byte offset, got -16 : i64}}
  %q = memref.alloca() {kvattn.shared_offset = -16 : i64} : memref<64x64xf16>
  return
}


// -----

func.func @stage_sync_op(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{'kvattn.stage_sync' belongs on a kvattn.tile.qk or a kvattn.tile.softmax_update}}
  kvattn.tile.init %m, %l, %acc {kvattn.stage_sync = #kvattn.stage_sync<barrier = true>} : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// expected-error @+1 {{wait_copies is a count of copy groups left in flight (or absent): got -2}}
func.func @stage_sync_wait() attributes {kvattn.x = #kvattn.stage_sync<wait_copies = -2>} {
  return
}

// -----

// expected-error @+1 {{proxy_fence orders the copies a wait retired: it needs wait_copies}}
func.func @stage_sync_fence() attributes {kvattn.x = #kvattn.stage_sync<proxy_fence = true, barrier = true>} {
  return
}

// -----

func.func @stage_sync_not_a_sync(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{'kvattn.stage_sync' is not a #kvattn.stage_sync: 0 : i64}}
  kvattn.tile.init %m, %l, %acc {kvattn.stage_sync = 0 : i64} : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}
