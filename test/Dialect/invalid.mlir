// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// One case per verifier rule of kvattn.attention, kvattn.sdpa, kvattn.append.

func.func @query_rank(%q: tensor<8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{query must have rank 4 [B, Hq, L, D], got rank 3}}
  %o = kvattn.attention %q, %k, %v : tensor<8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @key_rank(%q: tensor<1x8x4x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{key must have rank 4 [B, Hkv, S, D], got rank 3}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @value_rank(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x1x2x16x64xf32>) {
  // expected-error @+1 {{value must have rank 4 [B, Hkv, S, Dv], got rank 5}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @element_type_unsupported(%q: tensor<1x8x4x64xi8>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xi8>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @element_type_mismatch(%q: tensor<1x8x4x64xf16>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf16>) {
  // expected-error @+1 {{key element type 'f32' must match the query element type 'f16'}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf16>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf16> -> tensor<1x8x4x64xf16>
  return
}

// -----

func.func @out_element_type(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x2x16x64xbf16>, %v: tensor<1x2x16x64xbf16>) {
  // expected-error @+1 {{out element type 'f32' must match the query element type 'bf16'}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xbf16>, tensor<1x2x16x64xbf16>, tensor<1x2x16x64xbf16> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @head_dim_mismatch(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{head dim D mismatch: key dim 3 is 32 but query dim 3 is 64}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @batch_mismatch(%q: tensor<2x8x4x64xf32>, %k: tensor<3x2x16x64xf32>, %v: tensor<3x2x16x64xf32>) {
  // expected-error @+1 {{batch size B mismatch: key dim 0 is 3 but query dim 0 is 2}}
  %o = kvattn.attention %q, %k, %v : tensor<2x8x4x64xf32>, tensor<3x2x16x64xf32>, tensor<3x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @key_length_mismatch(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x12x64xf32>) {
  // expected-error @+1 {{key length S mismatch: value dim 2 is 12 but key dim 2 is 16}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x12x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kv_heads_mismatch(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x4x16x64xf32>) {
  // expected-error @+1 {{kv heads Hkv mismatch: value dim 1 is 4 but key dim 1 is 2}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x4x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @out_dv_mismatch(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x32xf32>) {
  // expected-error @+1 {{value head dim Dv mismatch: out dim 3 is 64 but value dim 3 is 32}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x32xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @out_length_mismatch(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{query length L mismatch: out dim 2 is 5 but query dim 2 is 4}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x5x64xf32>
  return
}

// -----

func.func @gqa_ratio(%q: tensor<1x6x4x64xf32>, %k: tensor<1x4x16x64xf32>, %v: tensor<1x4x16x64xf32>) {
  // expected-error @+1 {{query heads Hq = 6 must be a multiple of kv heads Hkv = 4}}
  %o = kvattn.attention %q, %k, %v : tensor<1x6x4x64xf32>, tensor<1x4x16x64xf32>, tensor<1x4x16x64xf32> -> tensor<1x6x4x64xf32>
  return
}

// -----

func.func @zero_head_dim(%q: tensor<1x8x4x0xf32>, %k: tensor<1x2x16x0xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{head dim D must be positive, got 0}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x0xf32>, tensor<1x2x16x0xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

// Dv = 0 divided by zero in -kvattn-to-cpu (issue 30 item 11): refused here.
func.func @zero_value_head_dim(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x0xf32>) {
  // expected-error @+1 {{value head dim Dv must be positive, got 0}}
  %o = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x0xf32> -> tensor<1x8x4x0xf32>
  return
}

// -----

func.func @zero_value_head_dim_sdpa(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x0xf32>) {
  // expected-error @+1 {{value head dim Dv must be positive, got 0}}
  %o = kvattn.sdpa %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x0xf32> -> tensor<1x8x4x0xf32>
  return
}

// -----

func.func @zero_head_dim_append(%new: tensor<2x2x4x0xf16>, %cache: tensor<2x2x16x0xf16>, %pos: tensor<2xi32>) {
  // expected-error @+1 {{head dim D must be positive, got 0}}
  %c = kvattn.append %new into %cache at %pos : tensor<2x2x4x0xf16> into tensor<2x2x16x0xf16>, tensor<2xi32>
  return
}

// -----

func.func @lse_type(%q: tensor<1x8x4x64xf16>, %k: tensor<1x2x16x64xf16>, %v: tensor<1x2x16x64xf16>) {
  // expected-error @+1 {{result #1 must be ranked tensor of 32-bit float values}}
  %o, %l = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf16>, tensor<1x2x16x64xf16>, tensor<1x2x16x64xf16> -> tensor<1x8x4x64xf16>, tensor<1x8x4xf16>
  return
}

// -----

func.func @lse_shape(%q: tensor<1x8x4x64xf16>, %k: tensor<1x2x16x64xf16>, %v: tensor<1x2x16x64xf16>) {
  // expected-error @+1 {{lse must have shape [B, Hq, L]: dim 1 is 2 but Hq is 8}}
  %o, %l = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf16>, tensor<1x2x16x64xf16>, tensor<1x2x16x64xf16> -> tensor<1x8x4x64xf16>, tensor<1x2x4xf32>
  return
}

// -----

func.func @lse_rank(%q: tensor<1x8x4x64xf16>, %k: tensor<1x2x16x64xf16>, %v: tensor<1x2x16x64xf16>) {
  // expected-error @+1 {{lse must have shape [B, Hq, L] (rank 3), got rank 4}}
  %o, %l = kvattn.attention %q, %k, %v : tensor<1x8x4x64xf16>, tensor<1x2x16x64xf16>, tensor<1x2x16x64xf16> -> tensor<1x8x4x64xf16>, tensor<1x8x4x1xf32>
  return
}

// -----

func.func @both_forms(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>,
                      %qo: tensor<1xi32>, %qp: tensor<1x4xi32>, %kp: tensor<1x16xi32>) {
  // expected-error @+1 {{positions are given both in offset form (q_offset/k_offset) and in explicit form (q_pos/k_pos); use one form}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) q_pos(%qp : tensor<1x4xi32>) k_pos(%kp : tensor<1x16xi32>) causal : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @k_offset_alone(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %ko: tensor<1xi32>) {
  // expected-error @+1 {{k_offset requires q_offset}}
  %o = kvattn.attention %q, %k, %v k_offset(%ko : tensor<1xi32>) : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @q_pos_alone(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %qp: tensor<1x4xi32>) {
  // expected-error @+1 {{the explicit form needs both q_pos and k_pos, got only q_pos}}
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<1x4xi32>) causal : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @causal_without_positions(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{causal attention needs query and key positions: give q_offset (and optionally k_offset) or q_pos and k_pos}}
  %o = kvattn.attention %q, %k, %v causal : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @window_without_positions(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{window attention needs query and key positions}}
  %o = kvattn.attention %q, %k, %v window = 4 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @q_offset_shape(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %qo: tensor<3xi32>) {
  // expected-error @+1 {{q_offset must have shape [B]: dim 0 is 3 but B is 2}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<3xi32>) causal : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @q_offset_rank(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %qo: tensor<2x1xi32>) {
  // expected-error @+1 {{q_offset must have shape [B] (rank 1), got rank 2}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2x1xi32>) causal : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @k_offset_shape(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %qo: tensor<2xi32>, %ko: tensor<1xi32>) {
  // expected-error @+1 {{k_offset must have shape [B]: dim 0 is 1 but B is 2}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) k_offset(%ko : tensor<1xi32>) causal : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @q_pos_shape(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %qp: tensor<2x5xi32>, %kp: tensor<2x16xi32>) {
  // expected-error @+1 {{q_pos must have shape [B, L]: dim 1 is 5 but L is 4}}
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x5xi32>) k_pos(%kp : tensor<2x16xi32>) causal : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @k_pos_shape(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %qp: tensor<2x4xi32>, %kp: tensor<2x15xi32>) {
  // expected-error @+1 {{k_pos must have shape [B, S]: dim 1 is 15 but S is 16}}
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x4xi32>) k_pos(%kp : tensor<2x15xi32>) causal : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @kv_len_shape(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %len: tensor<4xi64>) {
  // expected-error @+1 {{kv_len must have shape [B]: dim 0 is 4 but B is 2}}
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<4xi64>) : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @kv_len_type(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %len: tensor<2xf32>) {
  // expected-error @+1 {{operand #3 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<2xf32>) : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @key_valid_shape(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %valid: tensor<2x4xi1>) {
  // expected-error @+1 {{key_valid must have shape [B, S]: dim 1 is 4 but S is 16}}
  %o = kvattn.attention %q, %k, %v key_valid(%valid : tensor<2x4xi1>) : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @key_valid_type(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %valid: tensor<2x16xi32>) {
  // expected-error @+1 {{must be ranked tensor of 1-bit signless integer values}}
  %o = kvattn.attention %q, %k, %v key_valid(%valid : tensor<2x16xi32>) : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @mask_broadcast(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %m: tensor<2x8x3x16xi1>) {
  // expected-error @+1 {{mask dim 2 is 3, which does not broadcast to L = 4 (must be 1 or 4)}}
  %o = kvattn.attention %q, %k, %v mask(%m : tensor<2x8x3x16xi1>) : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @mask_rank(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>, %m: tensor<16xi1>) {
  // expected-error @+1 {{mask must have rank 2 to 4 (broadcastable to [B, Hq, L, S]), got rank 1}}
  %o = kvattn.attention %q, %k, %v mask(%m : tensor<16xi1>) : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return
}

// -----

func.func @window_range(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{window must be positive, got 0}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal window = 0 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @softcap_range(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{softcap must be positive and finite, got -5}}
  %o = kvattn.attention %q, %k, %v softcap = -5.0 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @softcap_zero(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{softcap must be positive and finite, got 0}}
  %o = kvattn.attention %q, %k, %v softcap = 0.0 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @scale_finite(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{scale must be finite, got INF}}
  %o = kvattn.attention %q, %k, %v scale = 0x7F800000 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_mask_and_causal(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %m: tensor<4x16xi1>) {
  // expected-error @+1 {{mask and causal are exclusive (as in torch SDPA): fold the causal rule into the mask, or drop the mask}}
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<4x16xi1>) causal = lower_right : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_mask_broadcast(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %m: tensor<4x15xf32>) {
  // expected-error @+1 {{mask dim 1 is 15, which does not broadcast to S = 16 (must be 1 or 16)}}
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<4x15xf32>) : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_window_needs_causal(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{window needs causal (the window is measured back from each row's causal position)}}
  %o = kvattn.sdpa %q, %k, %v window = 4 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_window_positive(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{window must be positive, got 0}}
  %o = kvattn.sdpa %q, %k, %v causal = lower_right window = 0 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_softcap(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{softcap must be positive and finite, got -2}}
  %o = kvattn.sdpa %q, %k, %v softcap = -2.0 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_lse_shape(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{lse must have shape [B, Hq, L]: dim 2 is 5 but L is 4}}
  %o, %l = kvattn.sdpa %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>, tensor<1x8x5xf32>
  return
}

// -----

func.func @sdpa_gqa(%q: tensor<1x8x4x64xf32>, %k: tensor<1x3x16x64xf32>, %v: tensor<1x3x16x64xf32>) {
  // expected-error @+1 {{query heads Hq = 8 must be a multiple of kv heads Hkv = 3}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left : tensor<1x8x4x64xf32>, tensor<1x3x16x64xf32>, tensor<1x3x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_head_dim(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{head dim D mismatch: key dim 3 is 32 but query dim 3 is 64}}
  %o = kvattn.sdpa %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sdpa_causal_keyword(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'causal' [upper_left, lower_right]}}
  %o = kvattn.sdpa %q, %k, %v causal = diagonal : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @append_rank(%new: tensor<2x4x64xf16>, %cache: tensor<2x2x16x64xf16>, %pos: tensor<2xi32>) {
  // expected-error @+1 {{update must have rank 4 [B, H, L, D], got rank 3}}
  %c = kvattn.append %new into %cache at %pos : tensor<2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_element_type(%new: tensor<2x2x4x64xf32>, %cache: tensor<2x2x16x64xf16>, %pos: tensor<2xi32>) {
  // expected-error @+1 {{update element type 'f32' must match the cache element type 'f16'}}
  %c = kvattn.append %new into %cache at %pos : tensor<2x2x4x64xf32> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_heads(%new: tensor<2x1x4x64xf16>, %cache: tensor<2x2x16x64xf16>, %pos: tensor<2xi32>) {
  // expected-error @+1 {{heads H mismatch: update dim 1 is 1 but cache dim 1 is 2}}
  %c = kvattn.append %new into %cache at %pos : tensor<2x1x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_pos_shape(%new: tensor<2x2x4x64xf16>, %cache: tensor<2x2x16x64xf16>, %pos: tensor<3xi32>) {
  // expected-error @+1 {{pos must have shape [B]: dim 0 is 3 but B is 2}}
  %c = kvattn.append %new into %cache at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<3xi32>
  return
}

// -----

func.func @append_capacity(%new: tensor<2x2x32x64xf16>, %cache: tensor<2x2x16x64xf16>, %pos: tensor<2xi32>) {
  // expected-error @+1 {{update writes L = 32 rows but the cache capacity is C = 16}}
  %c = kvattn.append %new into %cache at %pos : tensor<2x2x32x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_cache_rank(%new: tensor<2x2x4x64xf16>, %pages: tensor<8x16x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{cache must have rank 4 [num_pages, page_size, H, D], got rank 3}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x4x64xf16> into tensor<8x16x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_table_rank(%new: tensor<2x2x4x64xf16>, %pages: tensor<8x16x2x64xf16>, %pos: tensor<2xi32>, %bt: tensor<8xi32>) {
  // expected-error @+1 {{block_table must have rank 2 [B, max_pages], got rank 1}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<8xi32>) : tensor<2x2x4x64xf16> into tensor<8x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_element_type(%new: tensor<2x2x4x64xf32>, %pages: tensor<8x16x2x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{update element type 'f32' must match the cache element type 'f16'}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x4x64xf32> into tensor<8x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_batch(%new: tensor<2x2x4x64xf16>, %pages: tensor<8x16x2x64xf16>, %pos: tensor<2xi32>, %bt: tensor<3x4xi32>) {
  // expected-error @+1 {{batch size B mismatch: update dim 0 is 2 but block_table dim 0 is 3}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<3x4xi32>) : tensor<2x2x4x64xf16> into tensor<8x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_heads(%new: tensor<2x2x4x64xf16>, %pages: tensor<8x16x4x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{heads H mismatch: update dim 1 is 2 but cache dim 2 is 4}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x4x64xf16> into tensor<8x16x4x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_head_dim(%new: tensor<2x2x4x32xf16>, %pages: tensor<8x16x2x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{head dim D mismatch: update dim 3 is 32 but cache dim 3 is 64}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x4x32xf16> into tensor<8x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_pos_shape(%new: tensor<2x2x4x64xf16>, %pages: tensor<8x16x2x64xf16>, %pos: tensor<3xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{pos must have shape [B]: dim 0 is 3 but B is 2}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x4x64xf16> into tensor<8x16x2x64xf16>, tensor<3xi32>
  return
}

// -----

func.func @append_paged_page_size(%new: tensor<2x2x4x64xf16>, %pages: tensor<8x0x2x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{page size must be positive, got 0}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x4x64xf16> into tensor<8x0x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_capacity(%new: tensor<2x2x80x64xf16>, %pages: tensor<8x16x2x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{update writes L = 80 rows but a sequence holds at most max_pages * page_size = 4 * 16 = 64 tokens}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x80x64xf16> into tensor<8x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_table_out_of_range(%new: tensor<2x2x1x64xf16>, %pages: tensor<4x16x2x64xf16>, %pos: tensor<2xi32>) {
  %bt = arith.constant dense<[[0, -1], [4, -1]]> : tensor<2x2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][0] = 4: page id out of range [0, 4) (batch 1)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x1x64xf16> into tensor<4x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_table_tail(%new: tensor<2x2x1x64xf16>, %pages: tensor<4x16x2x64xf16>, %pos: tensor<2xi32>) {
  %bt = arith.constant dense<[[0, -1], [-1, 2]]> : tensor<2x2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][1] = 2 follows the -1 at slot 0: the -1 tail must be canonical (batch 1)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x1x64xf16> into tensor<4x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_table_page_twice(%new: tensor<2x2x1x64xf16>, %pages: tensor<4x16x2x64xf16>, %pos: tensor<2xi32>) {
  %bt = arith.constant dense<[[0, -1], [2, 2]]> : tensor<2x2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][1] = 2: page 2 is already used at slot 0 of the same sequence (batch 1)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x1x64xf16> into tensor<4x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_write_fits(%new: tensor<2x2x4x64xf16>, %pages: tensor<4x16x2x64xf16>) {
  %bt = arith.constant dense<[[0, 1], [2, -1]]> : tensor<2x2xi32>
  %pos = arith.constant dense<[28, 14]> : tensor<2xi32>
  // expected-error @+1 {{invalid paged write: pos[1] = 14 with L = 4 does not fit the 1 page(s) of block_table[1] (page_size 16, at most 16 tokens): token 16 falls in slot 1 (batch 1)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x4x64xf16> into tensor<4x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_negative_pos(%new: tensor<2x2x4x64xf16>, %pages: tensor<4x16x2x64xf16>) {
  %bt = arith.constant dense<[[0, 1], [2, -1]]> : tensor<2x2xi32>
  %pos = arith.constant dense<[-1, 0]> : tensor<2xi32>
  // expected-error @+1 {{invalid paged write: pos[0] = -1 is negative (batch 0)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x4x64xf16> into tensor<4x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_skip_padding_needs_pages(%new: tensor<2x2x4x64xf16>, %cache: tensor<2x2x16x64xf16>, %pos: tensor<2xi32>) {
  // expected-error @+1 {{skip_padding skips the tokens whose block-table entry is -1: it needs block_table (a paged cache)}}
  %c = kvattn.append %new into %cache at %pos skip_padding : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return
}

// -----

// With skip_padding the tokens on -1 entries are padding (no error), but
// the tokens must still lie in the table's slots.
func.func @append_skip_padding_past_table(%new: tensor<3x1x1x64xf16>, %pages: tensor<4x16x1x64xf16>) {
  %bt = arith.constant dense<[[0], [-1], [-1]]> : tensor<3x1xi32>
  %pos = arith.constant dense<[3, 15, 16]> : tensor<3xi32>
  // expected-error @+1 {{invalid paged write: pos[2] = 16 with L = 1 does not fit the 1 page(s) of block_table[2] (page_size 16, at most 16 tokens): token 16 falls in slot 1 (batch 2)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<3x1xi32>) skip_padding : tensor<3x1x1x64xf16> into tensor<4x16x1x64xf16>, tensor<3xi32>
  return
}

// -----

// Only -1 is padding: -2 stays a page id out of range.
func.func @append_skip_padding_minus_two(%new: tensor<2x1x1x64xf16>, %pages: tensor<4x16x1x64xf16>) {
  %bt = arith.constant dense<[[0], [-2]]> : tensor<2x1xi32>
  %pos = arith.constant dense<[3, 0]> : tensor<2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][0] = -2: page id out of range [0, 4) (batch 1)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x1xi32>) skip_padding : tensor<2x1x1x64xf16> into tensor<4x16x1x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @append_paged_shared_row(%new: tensor<2x2x4x64xf16>, %pages: tensor<4x16x2x64xf16>) {
  // Sequences 0 and 1 share page 1 (a shared prefix) and both write row 3.
  %bt = arith.constant dense<[[1, -1], [1, 2]]> : tensor<2x2xi32>
  %pos = arith.constant dense<[0, 3]> : tensor<2xi32>
  // expected-error @+1 {{invalid paged write: block_table[1][0] = 1: token 3 writes row 3 of page 1, which batch 0 also writes (batch 1)}}
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x4x64xf16> into tensor<4x16x2x64xf16>, tensor<2xi32>
  return
}

// -----

func.func @merge_rank(%o: tensor<2x8x4x64xf32>, %l: tensor<3x2x8x4xf32>) {
  // expected-error @+1 {{out_parts must have rank 5 [N, B, Hq, L, Dv], got rank 4}}
  %out, %lse = kvattn.merge %o, %l : tensor<2x8x4x64xf32>, tensor<3x2x8x4xf32> -> tensor<2x8x4x64xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @merge_parts(%o: tensor<3x2x8x4x64xf32>, %l: tensor<2x2x8x4xf32>) {
  // expected-error @+1 {{parts N mismatch: lse_parts dim 0 is 2 but out_parts dim 0 is 3}}
  %out, %lse = kvattn.merge %o, %l : tensor<3x2x8x4x64xf32>, tensor<2x2x8x4xf32> -> tensor<2x8x4x64xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @merge_dv(%o: tensor<3x2x8x4x64xf32>, %l: tensor<3x2x8x4xf32>) {
  // expected-error @+1 {{value head dim Dv mismatch: out dim 3 is 32 but out_parts dim 4 is 64}}
  %out, %lse = kvattn.merge %o, %l : tensor<3x2x8x4x64xf32>, tensor<3x2x8x4xf32> -> tensor<2x8x4x32xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @merge_part_type(%o: tensor<3x2x8x4x64xf16>, %l: tensor<3x2x8x4xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float values}}
  %out, %lse = kvattn.merge %o, %l : tensor<3x2x8x4x64xf16>, tensor<3x2x8x4xf32> -> tensor<2x8x4x64xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @paged_needs_kv_len(%q: tensor<2x8x1x64xf16>, %kp: tensor<40x16x2x64xf16>, %vp: tensor<40x16x2x64xf16>, %bt: tensor<2x8xi32>) {
  // expected-error @+1 {{paged attention (block_table) needs kv_len: the sequence lengths bound the pages read}}
  %o = kvattn.attention %q, %kp, %vp block_table(%bt : tensor<2x8xi32>) : tensor<2x8x1x64xf16>, tensor<40x16x2x64xf16>, tensor<40x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_key_layout(%q: tensor<2x8x1x64xf16>, %kp: tensor<40x16x64xf16>, %vp: tensor<40x16x2x64xf16>, %len: tensor<2xi32>, %bt: tensor<2x8xi32>) {
  // expected-error @+1 {{key must have rank 4 [num_pages, page_size, Hkv, D], got rank 3}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x8xi32>) : tensor<2x8x1x64xf16>, tensor<40x16x64xf16>, tensor<40x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_page_size(%q: tensor<2x8x1x64xf16>, %kp: tensor<40x16x2x64xf16>, %vp: tensor<40x32x2x64xf16>, %len: tensor<2xi32>, %bt: tensor<2x8xi32>) {
  // expected-error @+1 {{page size mismatch: value dim 1 is 32 but key dim 1 is 16}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x8xi32>) : tensor<2x8x1x64xf16>, tensor<40x16x2x64xf16>, tensor<40x32x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_table_batch(%q: tensor<2x8x1x64xf16>, %kp: tensor<40x16x2x64xf16>, %vp: tensor<40x16x2x64xf16>, %len: tensor<2xi32>, %bt: tensor<3x8xi32>) {
  // expected-error @+1 {{batch size B mismatch: block_table dim 0 is 3 but query dim 0 is 2}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<3x8xi32>) : tensor<2x8x1x64xf16>, tensor<40x16x2x64xf16>, tensor<40x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_key_valid_is_logical(%q: tensor<2x8x1x64xf16>, %kp: tensor<40x16x2x64xf16>, %vp: tensor<40x16x2x64xf16>, %len: tensor<2xi32>, %bt: tensor<2x8xi32>, %valid: tensor<2x16xi1>) {
  // expected-error @+1 {{key_valid must have shape [B, S]: dim 1 is 16 but S is 128}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) key_valid(%valid : tensor<2x16xi1>) block_table(%bt : tensor<2x8xi32>) : tensor<2x8x1x64xf16>, tensor<40x16x2x64xf16>, tensor<40x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_table_out_of_range(%q: tensor<2x8x1x64xf16>, %kp: tensor<4x16x2x64xf16>, %vp: tensor<4x16x2x64xf16>, %len: tensor<2xi32>) {
  %bt = arith.constant dense<[[0, 1], [4, -1]]> : tensor<2x2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][0] = 4: page id out of range [0, 4) (batch 1)}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x2xi32>) : tensor<2x8x1x64xf16>, tensor<4x16x2x64xf16>, tensor<4x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_table_tail(%q: tensor<2x8x1x64xf16>, %kp: tensor<4x16x2x64xf16>, %vp: tensor<4x16x2x64xf16>, %len: tensor<2xi32>) {
  %bt = arith.constant dense<[[0, 1], [-1, 2]]> : tensor<2x2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][1] = 2 follows the -1 at slot 0: the -1 tail must be canonical (batch 1)}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x2xi32>) : tensor<2x8x1x64xf16>, tensor<4x16x2x64xf16>, tensor<4x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_table_page_twice(%q: tensor<2x8x1x64xf16>, %kp: tensor<4x16x2x64xf16>, %vp: tensor<4x16x2x64xf16>, %len: tensor<2xi32>) {
  %bt = arith.constant dense<[[0, 1], [2, 2]]> : tensor<2x2xi32>
  // expected-error @+1 {{invalid block table: block_table[1][1] = 2: page 2 is already used at slot 0 of the same sequence (batch 1)}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x2xi32>) : tensor<2x8x1x64xf16>, tensor<4x16x2x64xf16>, tensor<4x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_kv_len_fits(%q: tensor<2x8x1x64xf16>, %kp: tensor<4x16x2x64xf16>, %vp: tensor<4x16x2x64xf16>) {
  %bt = arith.constant dense<[[0, 1], [2, -1]]> : tensor<2x2xi32>
  %len = arith.constant dense<[32, 17]> : tensor<2xi32>
  // expected-error @+1 {{invalid block table: kv_len[1] = 17 does not fit the 1 page(s) of block_table[1] (page_size 16, at most 16 tokens) (batch 1)}}
  %o = kvattn.attention %q, %kp, %vp kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x2xi32>) : tensor<2x8x1x64xf16>, tensor<4x16x2x64xf16>, tensor<4x16x2x64xf16> -> tensor<2x8x1x64xf16>
  return
}

// -----

func.func @paged_tile_table_rank(%qt: memref<16x8xf32>, %k: memref<?x16x2x8xf16>, %bt: memref<?xi32>, %s: memref<16x32xf32>, %i: index, %n: index) {
  // expected-error @+1 {{block_table must have rank 2 [B, max_pages], got rank 1}}
  kvattn.tile.qk %qt, %k[%i, %i, %i] pages(%bt : memref<?xi32>) size(%n, %n) into %s scale = 0.5
      : memref<16x8xf32>, memref<?x16x2x8xf16>, memref<16x32xf32>
  return
}

// -----

// Varlen (q_start): the query is packed, its dim 0 must be 1.
func.func @varlen_query_batch(%q: tensor<2x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{with q_start the query is packed ([1, Hq, T, D]): its dim 0 must be 1, got 2}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) : tensor<2x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x5x64xf16>
  return
}

// -----

func.func @varlen_sequences(%q: tensor<1x8x5x64xf16>, %k: tensor<3x2x16x64xf16>, %v: tensor<3x2x16x64xf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{batch size B mismatch: key dim 0 is 3 but q_start has 3 entries (B + 1 = 3)}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) : tensor<1x8x5x64xf16>, tensor<3x2x16x64xf16>, tensor<3x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_rank(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>, %cu: tensor<3x1xi32>) {
  // expected-error @+1 {{q_start must have rank 1 [B + 1], got rank 2}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3x1xi32>) : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_empty(%q: tensor<1x8x5x64xf16>, %k: tensor<?x2x16x64xf16>, %v: tensor<?x2x16x64xf16>, %cu: tensor<0xi32>) {
  // expected-error @+1 {{q_start must have B + 1 entries (at least 1), got 0}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<0xi32>) : tensor<1x8x5x64xf16>, tensor<?x2x16x64xf16>, tensor<?x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_q_offset_batch(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>, %cu: tensor<3xi32>, %off: tensor<3xi32>) {
  // expected-error @+1 {{q_offset must have shape [B]: dim 0 is 3 but B is 2}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) q_offset(%off : tensor<3xi32>) causal : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_explicit(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>, %cu: tensor<3xi32>, %qp: tensor<2x5xi32>, %kp: tensor<2x16xi32>) {
  // expected-error @+1 {{q_start (packed rows) does not combine with explicit positions (q_pos/k_pos): give each sequence's first position as q_offset}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) q_pos(%qp : tensor<2x5xi32>) k_pos(%kp : tensor<2x16xi32>) causal : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_mask(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>, %cu: tensor<3xi32>, %m: tensor<5x16xi1>) {
  // expected-error @+1 {{q_start (packed rows) does not combine with a mask: use causal, window, kv_len and key_valid [B, S]}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) mask(%m : tensor<5x16xi1>) : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_lse(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{lse must have shape [1, Hq, T]: dim 0 is 2 but 1 is 1}}
  %o, %l = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>, tensor<2x8x5xf32>
  return
}

// -----

func.func @varlen_first_start(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>) {
  %cu = arith.constant dense<[1, 2, 5]> : tensor<3xi32>
  // expected-error @+1 {{invalid q_start: q_start[0] = 1 must be 0: the first sequence starts the packed query (batch 0)}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_not_monotone(%q: tensor<1x8x5x64xf16>, %k: tensor<3x2x16x64xf16>, %v: tensor<3x2x16x64xf16>) {
  %cu = arith.constant dense<[0, 4, 2, 5]> : tensor<4xi32>
  // expected-error @+1 {{invalid q_start: q_start[2] = 2 is below q_start[1] = 4: sequence starts must not decrease (batch 1)}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<4xi32>) : tensor<1x8x5x64xf16>, tensor<3x2x16x64xf16>, tensor<3x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_last_start(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>) {
  %cu = arith.constant dense<[0, 2, 4]> : tensor<3xi32>
  // expected-error @+1 {{invalid q_start: q_start[2] = 4 must equal the packed query rows T = 5: the last entry closes batch 1 (batch 1)}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @varlen_rows_past_cache(%q: tensor<1x8x5x64xf16>, %k: tensor<2x2x16x64xf16>, %v: tensor<2x2x16x64xf16>) {
  %cu = arith.constant dense<[0, 1, 5]> : tensor<3xi32>
  %off = arith.constant dense<[9, 6]> : tensor<2xi32>
  %len = arith.constant dense<[10, 9]> : tensor<2xi32>
  // expected-error @+1 {{invalid q_start: q_offset[1] = 6 with L = 4 row(s) (q_start[1] = 1 .. q_start[2] = 5) puts the last query at position 9, past the last cached key at position 8 (kv_len[1] = 9): the rows of a sequence must be tokens of its cache (batch 1)}}
  %o = kvattn.attention %q, %k, %v q_start(%cu : tensor<3xi32>) q_offset(%off : tensor<2xi32>) kv_len(%len : tensor<2xi32>) causal : tensor<1x8x5x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<1x8x5x64xf16>
  return
}

// -----

func.func @window_right_negative(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{window_right must be non-negative, got -1}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) window_right = -1 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @window_right_with_causal(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{window_right = 3 with causal: causal allows no key after the query (drop window_right, or drop causal for a two-sided window)}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal window_right = 3 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @window_right_without_positions(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+1 {{window_right attention needs query and key positions}}
  %o = kvattn.attention %q, %k, %v window_right = 2 : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sinks_shape(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %z: tensor<2xf32>) {
  // expected-error @+1 {{sinks must have shape [Hq]: dim 0 is 2 but Hq is 8}}
  %o = kvattn.attention %q, %k, %v sinks(%z : tensor<2xf32>) : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @sinks_type(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %z: tensor<8xf16>) {
  // expected-error @+1 {{sinks must be an f32 tensor [Hq] (one value per query head), got 'tensor<8xf16>'}}
  %o = kvattn.attention %q, %k, %v sinks(%z : tensor<8xf16>) : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @alibi_without_positions(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %m: tensor<8xf32>) {
  // expected-error @+1 {{alibi_slopes (ALiBi) attention needs query and key positions: give q_offset (and optionally k_offset) or q_pos and k_pos}}
  %o = kvattn.attention %q, %k, %v alibi_slopes(%m : tensor<8xf32>) : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @alibi_rank(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x64xf32>, %qo: tensor<1xi32>, %m: tensor<1x8xf32>) {
  // expected-error @+1 {{alibi_slopes must have shape [Hq] (rank 1), got rank 2}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) alibi_slopes(%m : tensor<1x8xf32>) : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

// Tree masks (tree_parents): one tree per sequence of a ragged batch.
func.func @tree_without_q_start(%q: tensor<1x4x5x16xf32>, %k: tensor<1x2x32x16xf32>, %qo: tensor<1xi32>, %p: tensor<5xi32>) {
  // expected-error @+1 {{tree_parents needs q_start: each sequence's draft tokens are the packed rows of a ragged batch, one tree per sequence}}
  %o = kvattn.attention %q, %k, %k q_offset(%qo : tensor<1xi32>) tree_parents(%p : tensor<5xi32>) causal : tensor<1x4x5x16xf32>, tensor<1x2x32x16xf32>, tensor<1x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @tree_without_q_offset(%q: tensor<1x4x5x16xf32>, %k: tensor<2x2x32x16xf32>, %cu: tensor<3xi32>, %p: tensor<5xi32>) {
  // expected-error @+1 {{tree_parents needs q_offset: a draft token's position is q_offset[b] + its depth in the tree}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) tree_parents(%p : tensor<5xi32>) : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @tree_shape(%q: tensor<1x4x5x16xf32>, %k: tensor<2x2x32x16xf32>, %cu: tensor<3xi32>, %qo: tensor<2xi32>, %p: tensor<4xi32>) {
  // expected-error @+1 {{tree_parents must have shape [T]: dim 0 is 4 but T is 5}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) tree_parents(%p : tensor<4xi32>) : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @tree_parent_after_its_row(%q: tensor<1x4x5x16xf32>, %k: tensor<2x2x32x16xf32>, %qo: tensor<2xi32>) {
  %cu = arith.constant dense<[0, 1, 5]> : tensor<3xi32>
  %p = arith.constant dense<[-1, -1, 0, 3, 1]> : tensor<5xi32>
  // expected-error @+1 {{invalid tree_parents: tree_parents[3] = 3 is not a row before local row 2 of its sequence: a draft token's parent is -1 (the cache) or one of its rows 0 .. 1 (batch 1)}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) tree_parents(%p : tensor<5xi32>) causal : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @tree_root_not_after_cache(%q: tensor<1x4x5x16xf32>, %k: tensor<2x2x32x16xf32>) {
  %cu = arith.constant dense<[0, 1, 5]> : tensor<3xi32>
  %p = arith.constant dense<[-1, -1, 0, 0, 1]> : tensor<5xi32>
  %qo = arith.constant dense<[9, 20]> : tensor<2xi32>
  %len = arith.constant dense<[10, 25]> : tensor<2xi32>
  // expected-error @+1 {{invalid tree_parents: q_offset[1] = 20 must be k_offset + kv_len - L = 0 + 25 - 4 = 21: the tree's roots sit right after the cached prefix, its draft tokens are the last L keys (batch 1)}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) kv_len(%len : tensor<2xi32>) tree_parents(%p : tensor<5xi32>) causal : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}
