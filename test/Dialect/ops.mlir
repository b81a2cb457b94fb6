// RUN: kvattn-opt %s | kvattn-opt | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s --mlir-print-op-generic | kvattn-opt | FileCheck %s --enable-var-scope
// Round trip of every op and every optional group, pretty and generic.

// CHECK-LABEL: func @attention_offsets
func.func @attention_offsets(%q: tensor<2x8x4x64xf16>, %k: tensor<2x2x16x64xf16>,
                             %v: tensor<2x2x16x64xf16>, %qo: tensor<2xi32>,
                             %ko: tensor<2xi32>, %len: tensor<2xi32>)
    -> tensor<2x8x4x64xf16> {
  // CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%{{.*}} : tensor<2xi32>) k_offset(%{{.*}} : tensor<2xi32>) kv_len(%{{.*}} : tensor<2xi32>) causal window = 128 softcap = 3.000000e+01 scale = 1.250000e-01 : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) k_offset(%ko : tensor<2xi32>)
      kv_len(%len : tensor<2xi32>) causal window = 128 softcap = 30.0 scale = 0.125
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  return %o : tensor<2x8x4x64xf16>
}

// CHECK-LABEL: func @attention_two_sided_window
func.func @attention_two_sided_window(%q: tensor<2x8x4x64xf16>, %k: tensor<2x2x16x64xf16>,
                                      %v: tensor<2x2x16x64xf16>, %qo: tensor<2xi32>)
    -> tensor<2x8x4x64xf16> {
  // CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%{{.*}} : tensor<2xi32>) window = 1 window_right = 0 : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) window = 1 window_right = 0
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  return %o : tensor<2x8x4x64xf16>
}

// Attention sinks and ALiBi slopes: f32 [Hq] per query head.
// CHECK-LABEL: func @attention_sinks_alibi
func.func @attention_sinks_alibi(%q: tensor<2x8x4x64xf16>, %k: tensor<2x2x16x64xf16>,
                                 %v: tensor<2x2x16x64xf16>, %qo: tensor<2xi32>,
                                 %z: tensor<8xf32>, %m: tensor<8xf32>)
    -> tensor<2x8x4x64xf16> {
  // CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%{{.*}} : tensor<2xi32>) sinks(%{{.*}} : tensor<8xf32>) alibi_slopes(%{{.*}} : tensor<8xf32>) causal window = 128 : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) sinks(%z : tensor<8xf32>)
      alibi_slopes(%m : tensor<8xf32>) causal window = 128
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  return %o : tensor<2x8x4x64xf16>
}

// CHECK-LABEL: func @attention_explicit_lse
func.func @attention_explicit_lse(%q: tensor<?x4x?x128xbf16>, %k: tensor<?x1x?x128xbf16>,
                                  %v: tensor<?x1x?x96xbf16>, %qp: tensor<?x?xi64>,
                                  %kp: tensor<?x?xi64>, %valid: tensor<?x?xi1>)
    -> (tensor<?x4x?x96xbf16>, tensor<?x4x?xf32>) {
  // CHECK: %[[OUT:.*]], %[[LSE:.*]] = kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_pos(%{{.*}} : tensor<?x?xi64>) k_pos(%{{.*}} : tensor<?x?xi64>) key_valid(%{{.*}} : tensor<?x?xi1>) causal : tensor<?x4x?x128xbf16>, tensor<?x1x?x128xbf16>, tensor<?x1x?x96xbf16> -> tensor<?x4x?x96xbf16>, tensor<?x4x?xf32>
  // CHECK: return %[[OUT]], %[[LSE]]
  %o, %lse = kvattn.attention %q, %k, %v q_pos(%qp : tensor<?x?xi64>) k_pos(%kp : tensor<?x?xi64>)
      key_valid(%valid : tensor<?x?xi1>) causal
      : tensor<?x4x?x128xbf16>, tensor<?x1x?x128xbf16>, tensor<?x1x?x96xbf16>
      -> tensor<?x4x?x96xbf16>, tensor<?x4x?xf32>
  return %o, %lse : tensor<?x4x?x96xbf16>, tensor<?x4x?xf32>
}

// CHECK-LABEL: func @attention_mask_no_positions
func.func @attention_mask_no_positions(%q: tensor<1x2x3x8xf32>, %k: tensor<1x2x5x8xf32>,
                                       %v: tensor<1x2x5x8xf32>, %m: tensor<3x5xf32>)
    -> tensor<1x2x3x8xf32> {
  // CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<3x5xf32>) : tensor<1x2x3x8xf32>
  %o = kvattn.attention %q, %k, %v mask(%m : tensor<3x5xf32>)
      : tensor<1x2x3x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x3x8xf32>
  return %o : tensor<1x2x3x8xf32>
}

// CHECK-LABEL: func @sdpa_forms
func.func @sdpa_forms(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>,
                      %v: tensor<2x2x16x64xf32>, %m: tensor<2x1x4x16xi1>)
    -> (tensor<2x8x4x64xf32>, tensor<2x8x4x64xf32>, tensor<2x8x4x64xf32>) {
  // CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = upper_left : tensor<2x8x4x64xf32>
  %a = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  // CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = lower_right scale = 5.000000e-01 : tensor<2x8x4x64xf32>
  %b = kvattn.sdpa %q, %k, %v causal = lower_right scale = 0.5
      : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  // CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<2x1x4x16xi1>) : tensor<2x8x4x64xf32>
  %c = kvattn.sdpa %q, %k, %v mask(%m : tensor<2x1x4x16xi1>)
      : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return %a, %b, %c : tensor<2x8x4x64xf32>, tensor<2x8x4x64xf32>, tensor<2x8x4x64xf32>
}

// CHECK-LABEL: func @sdpa_window_softcap_lse
func.func @sdpa_window_softcap_lse(%q: tensor<2x8x4x64xbf16>, %k: tensor<2x2x16x64xbf16>,
                                   %v: tensor<2x2x16x64xbf16>)
    -> (tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>) {
  // CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = lower_right window = 8 softcap = 3.000000e+01 : tensor<2x8x4x64xbf16>, tensor<2x2x16x64xbf16>, tensor<2x2x16x64xbf16> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
  %o, %lse = kvattn.sdpa %q, %k, %v causal = lower_right window = 8 softcap = 30.0
      : tensor<2x8x4x64xbf16>, tensor<2x2x16x64xbf16>, tensor<2x2x16x64xbf16>
      -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
  return %o, %lse : tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
}

// CHECK-LABEL: func @append
func.func @append(%new: tensor<2x2x?x64xf16>, %cache: tensor<2x2x1024x64xf16>,
                  %pos: tensor<2xi64>) -> tensor<2x2x1024x64xf16> {
  // CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} : tensor<2x2x?x64xf16> into tensor<2x2x1024x64xf16>, tensor<2xi64>
  %c = kvattn.append %new into %cache at %pos
      : tensor<2x2x?x64xf16> into tensor<2x2x1024x64xf16>, tensor<2xi64>
  return %c : tensor<2x2x1024x64xf16>
}

// The paged form: a cache of pages written through a block table.
// CHECK-LABEL: func @append_paged
func.func @append_paged(%new: tensor<2x2x1x64xf16>, %pages: tensor<64x16x2x64xf16>,
                        %pos: tensor<2xi32>, %bt: tensor<2x8xi32>,
                        %dyn: tensor<?x2x?x64xf32>, %dpages: tensor<?x?x2x64xf32>,
                        %dpos: tensor<?xi64>, %dbt: tensor<?x?xi64>)
    -> (tensor<64x16x2x64xf16>, tensor<?x?x2x64xf32>) {
  // CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} block_table(%{{.*}} : tensor<2x8xi32>) : tensor<2x2x1x64xf16> into tensor<64x16x2x64xf16>, tensor<2xi32>
  %a = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x8xi32>)
      : tensor<2x2x1x64xf16> into tensor<64x16x2x64xf16>, tensor<2xi32>
  // CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} block_table(%{{.*}} : tensor<?x?xi64>) : tensor<?x2x?x64xf32> into tensor<?x?x2x64xf32>, tensor<?xi64>
  %b = kvattn.append %dyn into %dpages at %dpos block_table(%dbt : tensor<?x?xi64>)
      : tensor<?x2x?x64xf32> into tensor<?x?x2x64xf32>, tensor<?xi64>
  return %a, %b : tensor<64x16x2x64xf16>, tensor<?x?x2x64xf32>
}

// Padding tokens: a -1 table entry skips the token (vLLM's slot -1).
// CHECK-LABEL: func @append_skip_padding
func.func @append_skip_padding(%new: tensor<?x1x1x576xbf16>, %pages: tensor<?x64x1x576xbf16>,
                               %pos: tensor<?xi64>, %bt: tensor<?x1xi32>)
    -> tensor<?x64x1x576xbf16> {
  // CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} block_table(%{{.*}} : tensor<?x1xi32>) skip_padding : tensor<?x1x1x576xbf16> into tensor<?x64x1x576xbf16>, tensor<?xi64>
  %a = kvattn.append %new into %pages at %pos block_table(%bt : tensor<?x1xi32>) skip_padding
      : tensor<?x1x1x576xbf16> into tensor<?x64x1x576xbf16>, tensor<?xi64>
  return %a : tensor<?x64x1x576xbf16>
}

// The tile ops of the tile program.
// CHECK-LABEL: func @tile_ops
// CHECK: kvattn.tile.init %{{.*}}, %{{.*}}, %{{.*}} : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
// CHECK: kvattn.tile.load_q %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) into %{{.*}} : memref<1x2x?x8xf16>, memref<16x8xf32>
// CHECK: kvattn.tile.qk %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] size(%{{.*}}, %{{.*}}) into %{{.*}} scale = 5.000000e-01 softcap = 2.000000e+01 :
// CHECK: kvattn.tile.mask %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] size(%{{.*}}, %{{.*}}) kv_len(%{{.*}}) offsets(%{{.*}}, %{{.*}}) key_valid(%{{.*}} : memref<1x?xi1>) causal window = 8 : memref<16x32xf32>
// CHECK: kvattn.tile.mask %{{.*}} positions(%{{.*}}, %{{.*}} : memref<1x?xi64>, memref<1x?xi64>) mask(%{{.*}} : memref<1x1x?x?xf32>) causal :
// CHECK: kvattn.tile.softmax_update %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] size(%{{.*}}, %{{.*}}) state(%{{.*}}, %{{.*}}, %{{.*}}) :
// CHECK: kvattn.tile.store state(%{{.*}}, %{{.*}}, %{{.*}}) into %{{.*}} lse(%{{.*}} : memref<1x2x?xf32>) [%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) :
func.func @tile_ops(%q: memref<1x2x?x8xf16>, %k: memref<1x2x?x8xf16>, %v: memref<1x2x?x8xf16>,
                    %out: memref<1x2x?x8xf16>, %lse: memref<1x2x?xf32>, %valid: memref<1x?xi1>,
                    %qp: memref<1x?xi64>, %kp: memref<1x?xi64>, %bias: memref<1x1x?x?xf32>,
                    %i: index, %n: index) {
  %qt = memref.alloca() : memref<16x8xf32>
  %s = memref.alloca() : memref<16x32xf32>
  %m = memref.alloca() : memref<16xf32>
  %l = memref.alloca() : memref<16xf32>
  %acc = memref.alloca() : memref<16x8xf32>
  kvattn.tile.init %m, %l, %acc : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  kvattn.tile.load_q %q[%i, %i, %i] rows(%n) into %qt : memref<1x2x?x8xf16>, memref<16x8xf32>
  kvattn.tile.qk %qt, %k[%i, %i, %i] size(%n, %n) into %s scale = 0.5 softcap = 20.0
      : memref<16x8xf32>, memref<1x2x?x8xf16>, memref<16x32xf32>
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%n, %n) kv_len(%n) offsets(%i, %i)
      key_valid(%valid : memref<1x?xi1>) causal window = 8 : memref<16x32xf32>
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%n, %n) kv_len(%n)
      positions(%qp, %kp : memref<1x?xi64>, memref<1x?xi64>) mask(%bias : memref<1x1x?x?xf32>) causal : memref<16x32xf32>
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] size(%n, %n) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x?x8xf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  kvattn.tile.store state(%m, %l, %acc) into %out lse(%lse : memref<1x2x?xf32>) [%i, %i, %i] rows(%n)
      : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x2x?x8xf16>
  return
}

// CHECK-LABEL: func @merge
// CHECK: kvattn.merge %{{.*}}, %{{.*}} : tensor<3x2x8x4x64xf32>, tensor<3x2x8x4xf32> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
func.func @merge(%o: tensor<3x2x8x4x64xf32>, %l: tensor<3x2x8x4xf32>) -> (tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>) {
  %out, %lse = kvattn.merge %o, %l : tensor<3x2x8x4x64xf32>, tensor<3x2x8x4xf32> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
  return %out, %lse : tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
}

// CHECK-LABEL: func @paged
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%{{.*}} : tensor<2xi32>) kv_len(%{{.*}} : tensor<2xi32>) block_table(%{{.*}} : tensor<2x8xi32>) causal : tensor<2x8x1x64xbf16>, tensor<40x16x2x64xbf16>, tensor<40x16x2x64xbf16> -> tensor<2x8x1x64xbf16>
func.func @paged(%q: tensor<2x8x1x64xbf16>, %kp: tensor<40x16x2x64xbf16>, %vp: tensor<40x16x2x64xbf16>, %pos: tensor<2xi32>, %len: tensor<2xi32>, %bt: tensor<2x8xi32>) -> tensor<2x8x1x64xbf16> {
  %o = kvattn.attention %q, %kp, %vp q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x8xi32>) causal : tensor<2x8x1x64xbf16>, tensor<40x16x2x64xbf16>, tensor<40x16x2x64xbf16> -> tensor<2x8x1x64xbf16>
  return %o : tensor<2x8x1x64xbf16>
}

// CHECK-LABEL: func @paged_tile_ops
// CHECK: kvattn.tile.qk %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] pages(%{{.*}} : memref<2x?xi32>) size
// CHECK: kvattn.tile.softmax_update %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] pages(%{{.*}} : memref<2x?xi32>) size
func.func @paged_tile_ops(%qt: memref<16x8xf32>, %k: memref<?x16x2x8xf16>, %v: memref<?x16x2x8xf16>, %bt: memref<2x?xi32>, %s: memref<16x32xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %i: index, %n: index) {
  kvattn.tile.qk %qt, %k[%i, %i, %i] pages(%bt : memref<2x?xi32>) size(%n, %n) into %s scale = 0.5
      : memref<16x8xf32>, memref<?x16x2x8xf16>, memref<16x32xf32>
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] pages(%bt : memref<2x?xi32>) size(%n, %n) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<?x16x2x8xf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// CHECK-LABEL: func @softmax_key_valid
// CHECK: kvattn.tile.softmax_update %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] pages(%{{.*}} : memref<2x?xi32>) key_valid(%{{.*}} : memref<2x?xi1>) size
func.func @softmax_key_valid(%v: memref<?x16x2x8xf16>, %bt: memref<2x?xi32>, %valid: memref<2x?xi1>, %s: memref<16x32xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %i: index, %n: index) {
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] pages(%bt : memref<2x?xi32>) key_valid(%valid : memref<2x?xi1>) size(%n, %n) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<?x16x2x8xf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// CHECK-LABEL: func @softmax_all_allowed
// CHECK: kvattn.tile.softmax_update %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] pages(%{{.*}} : memref<2x?xi32>) all_allowed(%{{.*}}) size
func.func @softmax_all_allowed(%v: memref<?x16x2x8xf16>, %bt: memref<2x?xi32>, %full: i1, %s: memref<16x32xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %i: index, %n: index) {
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] pages(%bt : memref<2x?xi32>) all_allowed(%full) size(%n, %n) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<?x16x2x8xf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// CHECK-LABEL: func @tile_merge
// CHECK: kvattn.tile.merge %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) into %{{.*}} lse(%{{.*}} : memref<2x8x?xf32>) : memref<4x2x8x?x64xf32>, memref<4x2x8x?xf32>, memref<2x8x?x64xbf16>
func.func @tile_merge(%op: memref<4x2x8x?x64xf32>, %lp: memref<4x2x8x?xf32>, %out: memref<2x8x?x64xbf16>, %lse: memref<2x8x?xf32>, %i: index, %n: index) {
  kvattn.tile.merge %op, %lp[%i, %i, %i] rows(%n) into %out lse(%lse : memref<2x8x?xf32>) : memref<4x2x8x?x64xf32>, memref<4x2x8x?xf32>, memref<2x8x?x64xbf16>
  return
}

// Sinks join the epilogue and the split merge; ALiBi the mask.
// CHECK-LABEL: func @tile_sinks_alibi
// CHECK: kvattn.tile.mask %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] size(%{{.*}}, %{{.*}}) kv_len(%{{.*}}) offsets(%{{.*}}, %{{.*}}) alibi(%{{.*}}, %{{.*}} : memref<8xf32>) causal : memref<16x32xf32>
// CHECK: kvattn.tile.store state({{.*}}) into %{{.*}} sinks(%{{.*}} : memref<8xf32>) alibi(%{{.*}}, %{{.*}} : memref<8xf32>) [%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) :
// CHECK: kvattn.tile.merge %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) into %{{.*}} sinks(%{{.*}} : memref<8xf32>) alibi(%{{.*}}, %{{.*}} : memref<8xf32>) :
func.func @tile_sinks_alibi(%s: memref<16x32xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x8x?x8xf16>, %op: memref<4x1x8x?x8xf32>, %lp: memref<4x1x8x?xf32>, %z: memref<8xf32>, %a: memref<8xf32>, %i: index, %n: index) {
  kvattn.tile.mask %s[%i, %i, %i, %i] size(%n, %n) kv_len(%n) offsets(%i, %i) alibi(%a, %n : memref<8xf32>) causal : memref<16x32xf32>
  kvattn.tile.store state(%m, %l, %acc) into %out sinks(%z : memref<8xf32>) alibi(%a, %n : memref<8xf32>) [%i, %i, %i] rows(%n) : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x8x?x8xf16>
  kvattn.tile.merge %op, %lp[%i, %i, %i] rows(%n) into %out sinks(%z : memref<8xf32>) alibi(%a, %n : memref<8xf32>) : memref<4x1x8x?x8xf32>, memref<4x1x8x?xf32>, memref<1x8x?x8xf16>
  return
}

// CHECK-LABEL: func @tile_group
// CHECK: kvattn.tile.load_q %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) group = 4 into
// CHECK: kvattn.tile.store state({{.*}}) into %{{.*}} [%{{.*}}, %{{.*}}, %{{.*}}] rows(%{{.*}}) group = 4 :
func.func @tile_group(%q: memref<1x8x?x8xf16>, %qt: memref<16x8xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x8x?x8xf16>, %i: index, %n: index) {
  kvattn.tile.load_q %q[%i, %i, %i] rows(%n) group = 4 into %qt : memref<1x8x?x8xf16>, memref<16x8xf32>
  kvattn.tile.store state(%m, %l, %acc) into %out [%i, %i, %i] rows(%n) group = 4 : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x8x?x8xf16>
  return
}

// A bf16 query into an f16 tile (an FP8 cache's f16 stage on tensor cores).
// CHECK-LABEL: func @tile_load_q_converted
// CHECK: kvattn.tile.load_q %{{.*}} into %{{.*}} : memref<1x8x?x64xbf16>, memref<64x64xf16>
func.func @tile_load_q_converted(%q: memref<1x8x?x64xbf16>, %qt: memref<64x64xf16>, %i: index, %n: index) {
  kvattn.tile.load_q %q[%i, %i, %i] rows(%n) into %qt : memref<1x8x?x64xbf16>, memref<64x64xf16>
  return
}

// CHECK-LABEL: func @tile_prefetch
// CHECK: kvattn.tile.prefetch %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] size(%{{.*}}) : memref<1x2x?x8xf16>
// CHECK: kvattn.tile.prefetch %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] pages(%{{.*}} : memref<2x?xi32>) size(%{{.*}}) : memref<?x16x2x8xf16>
func.func @tile_prefetch(%k: memref<1x2x?x8xf16>, %kp: memref<?x16x2x8xf16>, %bt: memref<2x?xi32>, %i: index, %n: index) {
  kvattn.tile.prefetch %k[%i, %i, %i] size(%n) : memref<1x2x?x8xf16>
  kvattn.tile.prefetch %kp[%i, %i, %i] pages(%bt : memref<2x?xi32>) size(%n) : memref<?x16x2x8xf16>
  return
}

// CHECK-LABEL: func @tile_key_record
// CHECK: kvattn.tile.key_record %{{.*}} : memref<2x?xi32>
// CHECK: kvattn.tile.key_record %{{.*}} : memref<4x64xi64>
func.func @tile_key_record(%r: memref<2x?xi32>, %r64: memref<4x64xi64>) {
  kvattn.tile.key_record %r : memref<2x?xi32>
  kvattn.tile.key_record %r64 : memref<4x64xi64>
  return
}

// A ragged batch: three sequences' rows packed into one query (T = 19), the
// cache paged, positions and lengths per sequence.
// CHECK-LABEL: func @attention_varlen
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_start(%{{.*}} : tensor<4xi32>) q_offset(%{{.*}} : tensor<3xi32>) kv_len(%{{.*}} : tensor<3xi32>) block_table(%{{.*}} : tensor<3x8xi32>) causal : tensor<1x8x19x64xf16>, tensor<64x16x2x64xf16>, tensor<64x16x2x64xf16> -> tensor<1x8x19x64xf16>, tensor<1x8x19xf32>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_start(%{{.*}} : tensor<?xi64>) q_offset(%{{.*}} : tensor<?xi64>) kv_len(%{{.*}} : tensor<?xi64>) key_valid(%{{.*}} : tensor<?x?xi1>) causal window = 128 : tensor<1x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<1x8x?x64xbf16>
func.func @attention_varlen(%q: tensor<1x8x19x64xf16>, %pages: tensor<64x16x2x64xf16>, %cu: tensor<4xi32>, %pos: tensor<3xi32>, %len: tensor<3xi32>, %bt: tensor<3x8xi32>,
                            %dq: tensor<1x8x?x64xbf16>, %dk: tensor<?x2x?x64xbf16>, %dcu: tensor<?xi64>, %dpos: tensor<?xi64>, %dlen: tensor<?xi64>, %valid: tensor<?x?xi1>) {
  %o, %l = kvattn.attention %q, %pages, %pages q_start(%cu : tensor<4xi32>) q_offset(%pos : tensor<3xi32>) kv_len(%len : tensor<3xi32>) block_table(%bt : tensor<3x8xi32>) causal
      : tensor<1x8x19x64xf16>, tensor<64x16x2x64xf16>, tensor<64x16x2x64xf16> -> tensor<1x8x19x64xf16>, tensor<1x8x19xf32>
  %d = kvattn.attention %dq, %dk, %dk q_start(%dcu : tensor<?xi64>) q_offset(%dpos : tensor<?xi64>) kv_len(%dlen : tensor<?xi64>) key_valid(%valid : tensor<?x?xi1>) causal window = 128
      : tensor<1x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<1x8x?x64xbf16>
  return
}

// Tree masks (speculative decoding): per packed row its parent's local row.
// CHECK-LABEL: func.func @attention_tree
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_start(%{{.*}} : tensor<3xi32>) q_offset(%{{.*}} : tensor<2xi32>) kv_len(%{{.*}} : tensor<2xi32>) tree_parents(%{{.*}} : tensor<5xi32>) causal : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_start(%{{.*}} : tensor<?xi64>) q_offset(%{{.*}} : tensor<?xi64>) sinks(%{{.*}} : tensor<4xf32>) tree_parents(%{{.*}} : tensor<?xi64>) causal window = 8
func.func @attention_tree(%q: tensor<1x4x5x16xf32>, %k: tensor<2x2x32x16xf32>, %pos: tensor<2xi32>, %len: tensor<2xi32>,
                          %dq: tensor<1x4x?x16xf32>, %dk: tensor<?x2x?x16xf32>, %dcu: tensor<?xi64>, %dpos: tensor<?xi64>, %dp: tensor<?xi64>, %z: tensor<4xf32>) {
  %cu = arith.constant dense<[0, 1, 5]> : tensor<3xi32>
  %p = arith.constant dense<[-1, -1, 0, 0, 1]> : tensor<5xi32>
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) tree_parents(%p : tensor<5xi32>) causal
      : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
  %d = kvattn.attention %dq, %dk, %dk q_start(%dcu : tensor<?xi64>) q_offset(%dpos : tensor<?xi64>) sinks(%z : tensor<4xf32>) tree_parents(%dp : tensor<?xi64>) causal window = 8
      : tensor<1x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return
}
