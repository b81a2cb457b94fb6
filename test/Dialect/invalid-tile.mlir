// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// Verifier rules of the tile ops.

func.func @state_rows(%m: memref<16xf32>, %l: memref<8xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{tile rows BM mismatch: sum dim 0 is 8 but max dim 0 is 16}}
  kvattn.tile.init %m, %l, %acc : memref<16xf32>, memref<8xf32>, memref<16x8xf32>
  return
}

// -----

func.func @dynamic_tile(%m: memref<?xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{max tile must have a static shape, got 'memref<?xf32>'}}
  kvattn.tile.init %m, %l, %acc : memref<?xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @q_tile_head_dim(%q: memref<1x1x4x16xf32>, %t: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{head dim D mismatch: q_tile dim 1 is 8 but query dim 3 is 16}}
  kvattn.tile.load_q %q[%i, %i, %i] rows(%i) into %t : memref<1x1x4x16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @qk_rows(%t: memref<16x8xf32>, %k: memref<1x1x4x8xf32>, %s: memref<32x32xf32>, %i: index) {
  // expected-error @+1 {{tile rows BM mismatch: scores dim 0 is 32 but q_tile dim 0 is 16}}
  kvattn.tile.qk %t, %k[%i, %i, %i] size(%i, %i) into %s scale = 1.0 : memref<16x8xf32>, memref<1x1x4x8xf32>, memref<32x32xf32>
  return
}

// -----

func.func @mask_positions(%s: memref<16x32xf32>, %i: index) {
  // expected-error @+1 {{causal and window masks need positions}}
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%i, %i) kv_len(%i) causal : memref<16x32xf32>
  return
}

// -----

func.func @mask_window(%s: memref<16x32xf32>, %i: index) {
  // expected-error @+1 {{window must be positive, got -3}}
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%i, %i) kv_len(%i) offsets(%i, %i) window = -3 : memref<16x32xf32>
  return
}

// -----

func.func @softmax_dv(%s: memref<16x32xf32>, %v: memref<1x1x4x16xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{value head dim Dv mismatch: acc dim 1 is 8 but value dim 3 is 16}}
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] size(%i, %i) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x1x4x16xf32>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @softmax_all_allowed_key_valid(%s: memref<16x32xf32>, %v: memref<1x1x4x16xf32>, %valid: memref<1x4xi1>, %full: i1, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x16xf32>, %i: index) {
  // expected-error @+1 {{all_allowed cannot be combined with key_valid: the values of invalid keys must never be read}}
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] key_valid(%valid : memref<1x4xi1>) all_allowed(%full) size(%i, %i) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x1x4x16xf32>, memref<16xf32>, memref<16xf32>, memref<16x16xf32>
  return
}

// -----

func.func @store_dv(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x1x4x16xf32>, %i: index) {
  // expected-error @+1 {{value head dim Dv mismatch: acc dim 1 is 8 but out dim 3 is 16}}
  kvattn.tile.store state(%m, %l, %acc) into %out [%i, %i, %i] rows(%i)
      : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x1x4x16xf32>
  return
}

// -----

func.func @merge_dv(%op: memref<4x2x8x?x64xf32>, %lp: memref<4x2x8x?xf32>, %out: memref<2x8x?x32xbf16>, %i: index, %n: index) {
  // expected-error @+1 {{value head dim Dv mismatch: out dim 3 is 32 but out_parts dim 4 is 64}}
  kvattn.tile.merge %op, %lp[%i, %i, %i] rows(%n) into %out : memref<4x2x8x?x64xf32>, memref<4x2x8x?xf32>, memref<2x8x?x32xbf16>
  return
}

// -----

func.func @merge_parts(%op: memref<4x2x8x?x64xf32>, %lp: memref<3x2x8x?xf32>, %out: memref<2x8x?x64xbf16>, %i: index, %n: index) {
  // expected-error @+1 {{parts N mismatch: lse_parts dim 0 is 3 but out_parts dim 0 is 4}}
  kvattn.tile.merge %op, %lp[%i, %i, %i] rows(%n) into %out : memref<4x2x8x?x64xf32>, memref<3x2x8x?xf32>, memref<2x8x?x64xbf16>
  return
}

// -----

func.func @group_positive(%q: memref<1x8x?x8xf16>, %qt: memref<16x8xf32>, %i: index, %n: index) {
  // expected-error @+1 {{group must be positive, got 0}}
  kvattn.tile.load_q %q[%i, %i, %i] rows(%n) group = 0 into %qt : memref<1x8x?x8xf16>, memref<16x8xf32>
  return
}

// -----

func.func @prefetch_table_rank(%kp: memref<?x16x2x8xf16>, %bt: memref<?xi32>, %i: index, %n: index) {
  // expected-error @+1 {{block_table must have rank 2 [B, max_pages], got rank 1}}
  kvattn.tile.prefetch %kp[%i, %i, %i] pages(%bt : memref<?xi32>) size(%n) : memref<?x16x2x8xf16>
  return
}

// -----

func.func @mask_window_right_negative(%s: memref<16x32xf32>, %i: index) {
  // expected-error @+1 {{window_right must be non-negative, got -2}}
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%i, %i) kv_len(%i) offsets(%i, %i) window_right = -2 : memref<16x32xf32>
  return
}

// -----

func.func @mask_alibi_without_positions(%s: memref<16x32xf32>, %m: memref<8xf32>, %i: index) {
  // expected-error @+1 {{an ALiBi bias needs positions}}
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%i, %i) kv_len(%i) alibi(%m, %i : memref<8xf32>) : memref<16x32xf32>
  return
}

// -----

func.func @mask_tree_positions(%s: memref<16x32xf32>, %i: index, %p: memref<?xi32>) {
  // expected-error @+1 {{a tree mask needs the offset form (q_base, k_base)}}
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%i, %i) kv_len(%i) tree(%p, %i, %i : memref<?xi32>) : memref<16x32xf32>
  return
}

// -----

// A 16-bit query tile (the tensor-core kernels') holds the query in its own
// type, or a bf16 query converted into f16 (an FP8 cache's f16 stage).
func.func @load_q_tile_type(%q: memref<1x1x64x64xf16>, %t: memref<64x64xbf16>, %i: index) {
  // expected-error @+1 {{a 16-bit q_tile holds the query in its own type (or a bf16 query without rope in f16): the query is 'f16', the tile 'bf16'}}
  kvattn.tile.load_q %q[%i, %i, %i] rows(%i) into %t : memref<1x1x64x64xf16>, memref<64x64xbf16>
  return
}

// -----

// The conversion into f16 is not the rotation's (element by element).
func.func @load_q_tile_converted_rope(%q: memref<1x1x64x64xbf16>, %t: memref<64x64xf16>, %i: index) {
  // expected-error @+1 {{a 16-bit q_tile holds the query in its own type (or a bf16 query without rope in f16): the query is 'bf16', the tile 'f16'}}
  kvattn.tile.load_q %q[%i, %i, %i] rows(%i) rope = <rotary_dim = 64, theta = 1.000000e+04> pos_row(%i) q_base(%i)
      into %t : memref<1x1x64x64xbf16>, memref<64x64xf16>
  return
}

// -----

func.func @load_q_tile_f32_query(%q: memref<1x1x64x64xbf16>, %t: memref<64x64xbf16>, %i: index) {
  // expected-error @+1 {{rope with f32_query keeps the rotated query in f32: the q_tile must be f32, got 'bf16'}}
  kvattn.tile.load_q %q[%i, %i, %i] rows(%i) rope = <rotary_dim = 64, theta = 1.000000e+04, f32_query> pos_row(%i) q_base(%i)
      into %t : memref<1x1x64x64xbf16>, memref<64x64xbf16>
  return
}

// -----

func.func @qk_tile_type(%q: memref<64x64xbf16>, %k: memref<1x1x64x64xf16>, %s: memref<64x64xf32>, %i: index) {
  // expected-error @+1 {{a 16-bit q_tile ('bf16') multiplies a key of its own type or an FP8 one, got 'f16'}}
  kvattn.tile.qk %q, %k[%i, %i, %i] size(%i, %i) into %s scale = 0.125
      : memref<64x64xbf16>, memref<1x1x64x64xf16>, memref<64x64xf32>
  return
}
