// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// The latent form's rules: value_dim <=> no value operand, 1 <= value_dim
// <= D, out's Dv is value_dim, no v_scale (an FP8 latent cache is read
// with k_scale alone, which it needs); the tile op reads at most the key's
// D columns.

func.func @value_with_value_dim(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>, %v: tensor<1x1x64x512xbf16>) {
  // expected-error @+1 {{value_dim = 512 declares the latent form (V is the first value_dim columns of key), but a value operand is given: drop the value, or drop value_dim}}
  %o = kvattn.attention %q, %k, %v value_dim = 512 : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16>, tensor<1x1x64x512xbf16> -> tensor<1x16x1x512xbf16>
  return
}

// -----

func.func @no_value(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>) {
  // expected-error @+1 {{needs a value operand, or value_dim for the latent form (V is the first value_dim columns of key)}}
  %o = kvattn.attention %q, %k : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x16x1x576xbf16>
  return
}

// -----

func.func @value_dim_above_d(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>) {
  // expected-error @+1 {{value_dim = 640 exceeds the key's head dim D = 576: the latent form's V is the first value_dim columns of key (Dv <= D)}}
  %o = kvattn.attention %q, %k value_dim = 640 : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x16x1x640xbf16>
  return
}

// -----

func.func @value_dim_zero(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>) {
  // expected-error @+1 {{value_dim must be positive, got 0}}
  %o = kvattn.attention %q, %k value_dim = 0 : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x16x1x0xbf16>
  return
}

// -----

func.func @out_not_value_dim(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>) {
  // expected-error @+1 {{value head dim Dv mismatch: out dim 3 is 576 but value_dim dim 0 is 512}}
  %o = kvattn.attention %q, %k value_dim = 512 : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x16x1x576xbf16>
  return
}

// -----

func.func @latent_v_scale(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>, %s: tensor<1xf32>) {
  // expected-error @+1 {{v_scale with the latent form: V is read from the key cache, dequantised with k_scale (drop v_scale)}}
  %o = kvattn.attention %q, %k value_dim = 512 v_scale(%s : tensor<1xf32>) : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x16x1x512xbf16>
  return
}

// -----

// An FP8 latent cache is read with k_scale alone (V is inside the key):
// without it the cache cannot be decoded.
func.func @latent_fp8_without_k_scale(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xf8E4M3FN>) {
  // expected-error @+1 {{an FP8 KV cache ('f8E4M3FN') needs k_scale (f32, per tensor [1], per KV head [Hkv] or per token and head: the cache's shape without its last dimension)}}
  %o = kvattn.attention %q, %k value_dim = 512 : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xf8E4M3FN> -> tensor<1x16x1x512xbf16>
  return
}

// -----

func.func @latent_fp8_v_scale(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xf8E5M2>, %s: tensor<1xf32>) {
  // expected-error @+1 {{v_scale with the latent form: V is read from the key cache, dequantised with k_scale (drop v_scale)}}
  %o = kvattn.attention %q, %k value_dim = 512 k_scale(%s : tensor<1xf32>) v_scale(%s : tensor<1xf32>) : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xf8E5M2> -> tensor<1x16x1x512xbf16>
  return
}

// -----

func.func @latent_fp8_token_scale_shape(%q: tensor<2x16x1x576xbf16>, %k: tensor<4x64x1x576xf8E4M3FN>, %t: tensor<2x2xi32>, %qo: tensor<2xi32>, %kl: tensor<2xi32>, %s: tensor<4x64x2xf32>) {
  // expected-error @+1 {{k_scale has shape}}
  %o = kvattn.attention %q, %k value_dim = 512 q_offset(%qo : tensor<2xi32>) kv_len(%kl : tensor<2xi32>) block_table(%t : tensor<2x2xi32>) k_scale(%s : tensor<4x64x2xf32>) : tensor<2x16x1x576xbf16>, tensor<4x64x1x576xf8E4M3FN> -> tensor<2x16x1x512xbf16>
  return
}

// -----

func.func @latent_query_dim(%q: tensor<1x16x1x512xbf16>, %k: tensor<1x1x64x576xbf16>) {
  // expected-error @+1 {{head dim D mismatch: key dim 3 is 576 but query dim 3 is 512}}
  %o = kvattn.attention %q, %k value_dim = 512 : tensor<1x16x1x512xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x16x1x512xbf16>
  return
}

// -----

func.func @tile_latent_wider_acc(%s: memref<16x32xf32>, %k: memref<2x1x128x64xbf16>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x128xf32>, %i: index) {
  // expected-error @+1 {{latent: the value rows are the first Dv = 128 columns of the key cache, which has only 64}}
  kvattn.tile.softmax_update %s, %k[%i, %i, %i] latent size(%i, %i) state(%m, %l, %acc) : memref<16x32xf32>, memref<2x1x128x64xbf16>, memref<16xf32>, memref<16xf32>, memref<16x128xf32>
  return
}

// -----

func.func @tile_not_latent(%s: memref<16x32xf32>, %k: memref<2x1x128x576xbf16>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x512xf32>, %i: index) {
  // expected-error @+1 {{value head dim Dv mismatch: acc dim 1 is 512 but value dim 3 is 576}}
  kvattn.tile.softmax_update %s, %k[%i, %i, %i] size(%i, %i) state(%m, %l, %acc) : memref<16x32xf32>, memref<2x1x128x576xbf16>, memref<16xf32>, memref<16xf32>, memref<16x512xf32>
  return
}
