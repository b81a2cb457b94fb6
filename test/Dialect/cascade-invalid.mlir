// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// The verifier rules of kvattn.cascade (shared-prefix attention).

func.func @prefix_batch(%q: tensor<1x4x5x16xf32>, %pk: tensor<2x2x64x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{prefix_key dim 0 must be 1 (the packed rows share one prefix), got 2}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) : tensor<1x4x5x16xf32>, tensor<2x2x64x16xf32>, tensor<2x2x64x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @element_type(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xbf16>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{prefix_key element type 'bf16' must match the query element type 'f32'}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xbf16>, tensor<1x2x64x16xbf16>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @kv_heads(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<3x1x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{kv heads Hkv mismatch: key dim 1 is 1 but prefix_key dim 1 is 2}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<3x1x10x16xf32>, tensor<3x1x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @q_start_entries(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<3xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{q_start must have B + 1 = 4 entries, got 3}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<3xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @gqa(%q: tensor<1x3x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{query heads Hq = 3 must be a multiple of kv heads Hkv = 2}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) : tensor<1x3x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x3x5x16xf32>
  return
}

// -----

func.func @head_dim(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x8xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{head dim D mismatch: prefix_key dim 3 is 8 but query dim 3 is 16}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x8xf32>, tensor<1x2x64x8xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @softcap(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{softcap must be positive and finite, got -1}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) softcap = -1.0 : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}
