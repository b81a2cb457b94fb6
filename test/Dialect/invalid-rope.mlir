// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// One case per RoPE rule of #kvattn.rope, kvattn.attention and kvattn.append.

func.func @odd_rotary_dim(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{rope: rotary_dim = 31 must be even and at least 2}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 31, theta = 10000.0>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @bad_theta(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{rope: theta = 1.000000e+00 must be a finite value above 1}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 32, theta = 1.0>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @unknown_keyword(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{rope: expected 'theta' (right after rotary_dim), 'interleaved' or 'f32_query', got 'gptj'}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 32, theta = 10000.0, gptj>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @rotary_dim_above_head_dim(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{rope: rotary_dim = 128 exceeds the head dim D = 64}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 128, theta = 10000.0>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @double_rotation(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{the query is declared rotated (query_rotated) and rope would rotate it again}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64, theta = 10000.0> query_rotated
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @rope_without_positions(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>) {
  // expected-error @+1 {{rope rotates the query at its positions: give q_offset or q_pos and k_pos}}
  %o = kvattn.attention %q, %k, %v rope = <rotary_dim = 64, theta = 10000.0>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

// Keys rotated by the append, a query nobody rotates.
func.func @keys_rotated_query_not(%q: tensor<1x1x2x64xf32>, %kn: tensor<1x1x2x64xf32>, %kc: tensor<1x1x8x64xf32>,
                                  %v: tensor<1x1x8x64xf32>, %pos: tensor<1xi32>) {
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, theta = 10000.0>
      : tensor<1x1x2x64xf32> into tensor<1x1x8x64xf32>, tensor<1xi32>
  // expected-error @+1 {{the keys were rotated by kvattn.append (rope = #kvattn.rope<rotary_dim = 64, theta = 1.000000e+04>) but the query is not: give rope (the same) or declare query_rotated}}
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x1x2x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x2x64xf32>
  return
}

// -----

func.func @different_rotations(%q: tensor<1x1x2x64xf32>, %kn: tensor<1x1x2x64xf32>, %kc: tensor<1x1x8x64xf32>,
                               %v: tensor<1x1x8x64xf32>, %pos: tensor<1xi32>) {
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, theta = 10000.0>
      : tensor<1x1x2x64xf32> into tensor<1x1x8x64xf32>, tensor<1xi32>
  // expected-error @+1 {{differs from the keys' rotation}}
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal rope = <rotary_dim = 64, theta = 10000.0, interleaved>
      : tensor<1x1x2x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x2x64xf32>
  return
}

// -----

// The record says slot 2 of batch 1 was rotated at 2; with k_offset = 5
// the attention reads it at position 7.
func.func @mismatched_recorded_positions(%q: tensor<2x1x1x8xf32>, %k: tensor<2x1x4x8xf32>, %v: tensor<2x1x4x8xf32>) {
  %qo = arith.constant dense<[3, 8]> : tensor<2xi32>
  %ko = arith.constant dense<[0, 5]> : tensor<2xi32>
  %rec = arith.constant dense<[[0, 1, 2, 3], [5, 6, 2, 8]]> : tensor<2x4xi32>
  // expected-error @+1 {{k_rope_pos: the key of batch 1, slot 2 was rotated at position 2 but is attended at position 7}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) k_offset(%ko : tensor<2xi32>)
      k_rope_pos(%rec : tensor<2x4xi32>) causal query_rotated
      : tensor<2x1x1x8xf32>, tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32> -> tensor<2x1x1x8xf32>
  return
}

// -----

// Past kv_len a slot holds no key: its record does not matter.
func.func @record_past_kv_len(%q: tensor<1x1x1x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) {
  %qo = arith.constant dense<1> : tensor<1xi32>
  %kl = arith.constant dense<2> : tensor<1xi32>
  %rec = arith.constant dense<[[0, 1, -1, -1]]> : tensor<1x4xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) kv_len(%kl : tensor<1xi32>)
      k_rope_pos(%rec : tensor<1x4xi32>) causal query_rotated
      : tensor<1x1x1x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x1x8xf32>
  return
}

// -----

func.func @record_without_positions(%q: tensor<1x1x1x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %rec: tensor<1x4xi32>) {
  // expected-error @+1 {{k_rope_pos binds the keys to their positions: give q_offset (and k_offset) or q_pos and k_pos}}
  %o = kvattn.attention %q, %k, %v k_rope_pos(%rec : tensor<1x4xi32>) query_rotated
      : tensor<1x1x1x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x1x8xf32>
  return
}

// -----

func.func @record_shape(%q: tensor<1x1x1x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %qo: tensor<1xi32>, %rec: tensor<1x5xi32>) {
  // expected-error @+1 {{k_rope_pos must have shape [B, S]: dim 1 is 5 but S is 4}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_rope_pos(%rec : tensor<1x5xi32>) query_rotated
      : tensor<1x1x1x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x1x8xf32>
  return
}

// -----

func.func @append_rotary_dim(%kn: tensor<1x1x2x64xf32>, %kc: tensor<1x1x8x64xf32>, %pos: tensor<1xi32>) {
  // expected-error @+1 {{rope: rotary_dim = 66 exceeds the head dim D = 64}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 66, theta = 10000.0>
      : tensor<1x1x2x64xf32> into tensor<1x1x8x64xf32>, tensor<1xi32>
  return
}

// -----

func.func @append_record_without_rope(%kn: tensor<1x1x2x64xf32>, %kc: tensor<1x1x8x64xf32>, %pos: tensor<1xi32>, %rec: tensor<1x8xi32>) {
  // expected-error @+1 {{rope_pos records the positions the keys were rotated at: it needs rope}}
  %k, %r = kvattn.append %kn into %kc at %pos rope_pos(%rec : tensor<1x8xi32>)
      : tensor<1x1x2x64xf32> into tensor<1x1x8x64xf32>, tensor<1xi32>
  return
}

// -----

func.func @append_record_shape(%kn: tensor<1x1x2x64xf32>, %kc: tensor<1x1x8x64xf32>, %pos: tensor<1xi32>, %rec: tensor<1x9xi32>) {
  // expected-error @+1 {{rope_pos must have shape [B, C]: dim 1 is 9 but C is 8}}
  %k, %r = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, theta = 10000.0> rope_pos(%rec : tensor<1x9xi32>)
      : tensor<1x1x2x64xf32> into tensor<1x1x8x64xf32>, tensor<1xi32>
  return
}
