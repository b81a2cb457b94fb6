// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// One case per rule of RoPE's tables (rotary_cos / rotary_sin [P, R/2]) on
// kvattn.attention and kvattn.append: both or neither, exactly with a rope
// without theta, rank 2 f32/f16/bf16 of one type, R/2 columns, constant
// positions inside the P rows.

func.func @cos_without_sin(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                           %qo: tensor<1xi32>, %c: tensor<16x32xf32>) {
  // expected-error @+1 {{rotary_cos and rotary_sin come together: rotary_sin is missing}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      rotary_cos(%c : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @sin_without_cos(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                           %qo: tensor<1xi32>, %s: tensor<16x32xf32>) {
  // expected-error @+1 {{rotary_cos and rotary_sin come together: rotary_cos is missing}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      rotary_sin(%s : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @no_theta_no_tables(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                              %qo: tensor<1xi32>) {
  // expected-error @+1 {{rope = #kvattn.rope<rotary_dim = 64> has no theta: its cosines and sines come from the tables rotary_cos and rotary_sin, which are missing}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @tables_without_rope(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                               %qo: tensor<1xi32>, %c: tensor<16x32xf32>, %s: tensor<16x32xf32>) {
  // expected-error @+1 {{rotary_cos and rotary_sin are RoPE's tables: they need rope (#kvattn.rope without theta)}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>)
      rotary_cos(%c : tensor<16x32xf32>) rotary_sin(%s : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @tables_with_theta(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                             %qo: tensor<1xi32>, %c: tensor<16x32xf32>, %s: tensor<16x32xf32>) {
  // expected-error @+1 {{has a theta, but rotary_cos and rotary_sin replace the formula: drop theta}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64, theta = 10000.0>
      rotary_cos(%c : tensor<16x32xf32>) rotary_sin(%s : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @table_rank(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                      %qo: tensor<1xi32>, %c: tensor<16x1x32xf32>, %s: tensor<16x1x32xf32>) {
  // expected-error @+1 {{rotary_cos must have rank 2 [P, rotary_dim / 2] (row = position), got rank 3}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      rotary_cos(%c : tensor<16x1x32xf32>) rotary_sin(%s : tensor<16x1x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @table_element_type(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                              %qo: tensor<1xi32>, %c: tensor<16x32xf64>, %s: tensor<16x32xf64>) {
  // expected-error @+1 {{rotary_cos must hold f32, f16 or bf16, got 'f64'}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      rotary_cos(%c : tensor<16x32xf64>) rotary_sin(%s : tensor<16x32xf64>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @tables_differ(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                         %qo: tensor<1xi32>, %c: tensor<16x32xf32>, %s: tensor<16x32xbf16>) {
  // expected-error @+1 {{rotary_sin has type 'tensor<16x32xbf16>' but rotary_cos has type 'tensor<16x32xf32>': the tables have one type}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      rotary_cos(%c : tensor<16x32xf32>) rotary_sin(%s : tensor<16x32xbf16>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @table_columns(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                         %qo: tensor<1xi32>, %c: tensor<16x32xf32>, %s: tensor<16x32xf32>) {
  // expected-error @+1 {{rotary_cos has 32 columns but rope's rotary_dim / 2 = 16}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 32>
      rotary_cos(%c : tensor<16x32xf32>) rotary_sin(%s : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

// q_offset 13 and L = 4: rows 0..2 at positions 13..15 are in the 16 rows,
// row 3 (position 16) is not.
func.func @offset_outside_table(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>,
                                %c: tensor<16x32xf32>, %s: tensor<16x32xf32>) {
  %qo = arith.constant dense<[13]> : tensor<1xi32>
  // expected-error @+1 {{rotary_cos: position 16 of batch 0, row 3 is outside the table's 16 rows}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 64>
      rotary_cos(%c : tensor<16x32xf32>) rotary_sin(%s : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @position_outside_table(%q: tensor<2x1x2x64xf32>, %k: tensor<2x1x8x64xf32>, %v: tensor<2x1x8x64xf32>,
                                  %kp: tensor<2x8xi64>, %c: tensor<16x32xbf16>, %s: tensor<16x32xbf16>) {
  %qp = arith.constant dense<[[0, 1], [15, 40]]> : tensor<2x2xi64>
  // expected-error @+1 {{rotary_cos: position 40 of batch 1, row 1 is outside the table's 16 rows}}
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x2xi64>) k_pos(%kp : tensor<2x8xi64>)
      rope = <rotary_dim = 64, interleaved>
      rotary_cos(%c : tensor<16x32xbf16>) rotary_sin(%s : tensor<16x32xbf16>)
      : tensor<2x1x2x64xf32>, tensor<2x1x8x64xf32>, tensor<2x1x8x64xf32> -> tensor<2x1x2x64xf32>
  return
}

// -----

// A ragged batch: sequence 1 owns rows 1..3 at q_offset 14 + i: its row 2
// is position 16.
func.func @varlen_outside_table(%q: tensor<1x1x4x64xf32>, %k: tensor<2x1x8x64xf32>, %v: tensor<2x1x8x64xf32>,
                                %c: tensor<16x32xf32>, %s: tensor<16x32xf32>) {
  %qs = arith.constant dense<[0, 1, 4]> : tensor<3xi32>
  %qo = arith.constant dense<[15, 14]> : tensor<2xi32>
  // expected-error @+1 {{rotary_cos: position 16 of batch 1, row 2 is outside the table's 16 rows}}
  %o = kvattn.attention %q, %k, %v q_start(%qs : tensor<3xi32>) q_offset(%qo : tensor<2xi32>)
      rope = <rotary_dim = 64>
      rotary_cos(%c : tensor<16x32xf32>) rotary_sin(%s : tensor<16x32xf32>)
      : tensor<1x1x4x64xf32>, tensor<2x1x8x64xf32>, tensor<2x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

// Keys rotated by one pair of tables, the query by another.
func.func @other_tables(%q: tensor<1x2x4x16xf32>, %kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>,
                        %v: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>,
                        %c: tensor<64x8xf32>, %s: tensor<64x8xf32>, %c2: tensor<64x8xf32>) {
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      rotary_cos(%c : tensor<64x8xf32>) rotary_sin(%s : tensor<64x8xf32>)
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  // expected-error @+1 {{rotary_cos and rotary_sin must be the tables kvattn.append rotated the keys with (the same values)}}
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal rope = <rotary_dim = 16>
      rotary_cos(%c2 : tensor<64x8xf32>) rotary_sin(%s : tensor<64x8xf32>)
      : tensor<1x2x4x16xf32>, tensor<1x1x12x16xf32>, tensor<1x1x12x16xf32> -> tensor<1x2x4x16xf32>
  return
}

// -----

// Keys rotated by tables, the query by a theta.
func.func @tables_then_theta(%q: tensor<1x2x4x16xf32>, %kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>,
                             %v: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>,
                             %c: tensor<64x8xf32>, %s: tensor<64x8xf32>) {
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      rotary_cos(%c : tensor<64x8xf32>) rotary_sin(%s : tensor<64x8xf32>)
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  // expected-error @+1 {{rope = #kvattn.rope<rotary_dim = 16, theta = 1.000000e+04> differs from the keys' rotation (rope = #kvattn.rope<rotary_dim = 16> in kvattn.append)}}
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal rope = <rotary_dim = 16, theta = 10000.0>
      : tensor<1x2x4x16xf32>, tensor<1x1x12x16xf32>, tensor<1x1x12x16xf32> -> tensor<1x2x4x16xf32>
  return
}

// -----

func.func @append_tables_with_theta(%kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>,
                                    %c: tensor<64x8xf32>, %s: tensor<64x8xf32>) {
  // expected-error @+1 {{has a theta, but rotary_cos and rotary_sin replace the formula: drop theta}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16, theta = 10000.0>
      rotary_cos(%c : tensor<64x8xf32>) rotary_sin(%s : tensor<64x8xf32>)
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  return
}

// -----

func.func @append_no_tables(%kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>) {
  // expected-error @+1 {{has no theta: its cosines and sines come from the tables rotary_cos and rotary_sin, which are missing}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  return
}

// -----

func.func @append_tables_without_rope(%kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>,
                                      %c: tensor<64x8xf32>, %s: tensor<64x8xf32>) {
  // expected-error @+1 {{rotary_cos and rotary_sin are RoPE's tables: they need rope (#kvattn.rope without theta)}}
  %k = kvattn.append %kn into %kc at %pos
      rotary_cos(%c : tensor<64x8xf32>) rotary_sin(%s : tensor<64x8xf32>)
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  return
}

// -----

func.func @append_sin_missing(%kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>,
                              %c: tensor<64x8xf32>) {
  // expected-error @+1 {{rotary_cos and rotary_sin come together: rotary_sin is missing}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      rotary_cos(%c : tensor<64x8xf32>)
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  return
}

// -----

func.func @append_table_columns(%kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>,
                                %c: tensor<64x4xf16>, %s: tensor<64x4xf16>) {
  // expected-error @+1 {{rotary_cos has 4 columns but rope's rotary_dim / 2 = 8}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      rotary_cos(%c : tensor<64x4xf16>) rotary_sin(%s : tensor<64x4xf16>)
      : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  return
}

// -----

// Batch 1 writes tokens 0..3 at 7..10: token 1 (position 8) is past the
// 8 rows.
func.func @append_outside_table(%kn: tensor<2x1x4x16xf32>, %kc: tensor<2x1x12x16xf32>,
                                %c: tensor<8x8xf32>, %s: tensor<8x8xf32>) {
  %pos = arith.constant dense<[0, 7]> : tensor<2xi32>
  // expected-error @+1 {{rotary_cos: position 8 of batch 1, row 1 is outside the table's 8 rows}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      rotary_cos(%c : tensor<8x8xf32>) rotary_sin(%s : tensor<8x8xf32>)
      : tensor<2x1x4x16xf32> into tensor<2x1x12x16xf32>, tensor<2xi32>
  return
}

// -----

func.func @theta_after_keyword(%q: tensor<1x1x4x64xf32>, %k: tensor<1x1x8x64xf32>, %v: tensor<1x1x8x64xf32>, %qo: tensor<1xi32>) {
  // expected-error @+1 {{rope: expected 'theta' (right after rotary_dim), 'interleaved' or 'f32_query', got 'theta'}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) rope = <rotary_dim = 32, interleaved, theta = 10000.0>
      : tensor<1x1x4x64xf32>, tensor<1x1x8x64xf32>, tensor<1x1x8x64xf32> -> tensor<1x1x4x64xf32>
  return
}

// -----

func.func @tile_load_q_tables_without_rope(%q: memref<1x1x4x16xf32>, %t: memref<4x16xf32>, %c: memref<8x8xf32>, %s: memref<8x8xf32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  // expected-error @+1 {{rotary_cos and rotary_sin are RoPE's tables: they need rope}}
  kvattn.tile.load_q %q[%c0, %c0, %c0] rows(%c4) rotary_cos(%c : memref<8x8xf32>) rotary_sin(%s : memref<8x8xf32>)
      into %t : memref<1x1x4x16xf32>, memref<4x16xf32>
  return
}

// -----

func.func @tile_load_q_rope_without_tables(%q: memref<1x1x4x16xf32>, %t: memref<4x16xf32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  // expected-error @+1 {{a rope without theta reads rotary_cos and rotary_sin, one with theta neither}}
  kvattn.tile.load_q %q[%c0, %c0, %c0] rows(%c4) rope = <rotary_dim = 16> pos_row(%c0) q_base(%c0)
      into %t : memref<1x1x4x16xf32>, memref<4x16xf32>
  return
}
