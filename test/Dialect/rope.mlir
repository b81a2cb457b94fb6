// RUN: kvattn-opt %s | kvattn-opt | FileCheck %s
// RoPE on kvattn.attention (the query, at its positions) and kvattn.append
// (the written keys, and their record), round-tripped.

// CHECK-LABEL: func.func @attention_rope
// CHECK: kvattn.attention {{.*}} k_rope_pos(%{{.*}} : tensor<2x64xi32>) causal rope = <rotary_dim = 32, theta = 1.000000e+04>
func.func @attention_rope(%q: tensor<2x8x4x64xbf16>, %k: tensor<2x2x64x64xbf16>, %v: tensor<2x2x64x64xbf16>,
                          %qo: tensor<2xi32>, %kl: tensor<2xi32>, %rec: tensor<2x64xi32>) -> tensor<2x8x4x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      k_rope_pos(%rec : tensor<2x64xi32>) causal rope = <rotary_dim = 32, theta = 10000.0>
      : tensor<2x8x4x64xbf16>, tensor<2x2x64x64xbf16>, tensor<2x2x64x64xbf16> -> tensor<2x8x4x64xbf16>
  return %o : tensor<2x8x4x64xbf16>
}

// CHECK-LABEL: func.func @interleaved_f32_query
// CHECK: rope = <rotary_dim = 64, theta = 5.000000e+05, interleaved, f32_query>
func.func @interleaved_f32_query(%q: tensor<1x1x4x64xf16>, %k: tensor<1x1x8x64xf16>, %v: tensor<1x1x8x64xf16>,
                                 %qp: tensor<1x4xi64>, %kp: tensor<1x8xi64>) -> tensor<1x1x4x64xf16> {
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<1x4xi64>) k_pos(%kp : tensor<1x8xi64>)
      rope = <rotary_dim = 64, theta = 500000.0, interleaved, f32_query>
      : tensor<1x1x4x64xf16>, tensor<1x1x8x64xf16>, tensor<1x1x8x64xf16> -> tensor<1x1x4x64xf16>
  return %o : tensor<1x1x4x64xf16>
}

// CHECK-LABEL: func.func @query_rotated
// CHECK: kvattn.attention {{.*}} causal query_rotated
func.func @query_rotated(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                         %qo: tensor<1xi32>) -> tensor<1x1x4x64xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal query_rotated
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return %o : tensor<1x1x4x64xf32>
}

// The keys rotated by the append and the query by the attention, alike;
// the record goes from one to the other.
// CHECK-LABEL: func.func @append_rope
// CHECK: %[[K:.*]], %[[REC:.*]] = kvattn.append {{.*}} rope = <rotary_dim = 64, theta = 1.000000e+04> rope_pos(%{{.*}} : tensor<2x128xi32>)
// CHECK: kvattn.attention %{{.*}}, %[[K]], {{.*}} k_rope_pos(%[[REC]] : tensor<2x128xi32>)
func.func @append_rope(%q: tensor<2x4x3x64xf16>, %kn: tensor<2x2x3x64xf16>, %kc: tensor<2x2x128x64xf16>,
                       %v: tensor<2x2x128x64xf16>, %pos: tensor<2xi32>, %rec: tensor<2x128xi32>,
                       %kl: tensor<2xi32>) -> tensor<2x4x3x64xf16> {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, theta = 10000.0>
      rope_pos(%rec : tensor<2x128xi32>)
      : tensor<2x2x3x64xf16> into tensor<2x2x128x64xf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      k_rope_pos(%k_rec : tensor<2x128xi32>) causal rope = <rotary_dim = 64, theta = 10000.0>
      : tensor<2x4x3x64xf16>, tensor<2x2x128x64xf16>, tensor<2x2x128x64xf16> -> tensor<2x4x3x64xf16>
  return %o : tensor<2x4x3x64xf16>
}

// RoPE from tables (FlashAttention's rotary_cos / rotary_sin): a rope
// without theta and the two tables, on the append and the attention that
// reads its keys (the same tables).
// CHECK-LABEL: func.func @tables
// CHECK: kvattn.append {{.*}} rope = <rotary_dim = 16, interleaved> rotary_cos(%{{.*}} : tensor<?x8xbf16>) rotary_sin(%{{.*}} : tensor<?x8xbf16>) rope_pos(
// CHECK: kvattn.attention {{.*}} causal rope = <rotary_dim = 16, interleaved> rotary_cos(%{{.*}} : tensor<?x8xbf16>) rotary_sin(%{{.*}} : tensor<?x8xbf16>) :
func.func @tables(%q: tensor<1x2x4x32xf32>, %kn: tensor<1x1x4x32xf32>, %kc: tensor<1x1x12x32xf32>,
                  %v: tensor<1x1x12x32xf32>, %pos: tensor<1xi32>, %rec: tensor<1x12xi32>,
                  %c: tensor<?x8xbf16>, %s: tensor<?x8xbf16>) -> tensor<1x2x4x32xf32> {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16, interleaved>
      rotary_cos(%c : tensor<?x8xbf16>) rotary_sin(%s : tensor<?x8xbf16>)
      rope_pos(%rec : tensor<1x12xi32>) : tensor<1x1x4x32xf32> into tensor<1x1x12x32xf32>, tensor<1xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal rope = <rotary_dim = 16, interleaved>
      rotary_cos(%c : tensor<?x8xbf16>) rotary_sin(%s : tensor<?x8xbf16>)
      : tensor<1x2x4x32xf32>, tensor<1x1x12x32xf32>, tensor<1x1x12x32xf32> -> tensor<1x2x4x32xf32>
  return %o : tensor<1x2x4x32xf32>
}
