// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// The FP8 rules of kvattn.attention and of the tile ops: an FP8 cache needs
// its scales, a scale needs an FP8 cache, K and V share one format, scales
// are f32 of one of three shapes, constant scales positive and finite, the
// query stays f32/f16/bf16, and kvattn.sdpa takes no FP8.

func.func @fp8_without_scale(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>, %vs: tensor<1xf32>) {
  // expected-error @+1 {{an FP8 KV cache ('f8E4M3FN') needs k_scale (f32, per tensor [1], per KV head [Hkv] or per token and head: the cache's shape without its last dimension)}}
  %o = kvattn.attention %q, %k, %v v_scale(%vs : tensor<1xf32>) : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @scale_without_fp8(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x2x8x16xbf16>, %ks: tensor<1xf32>) {
  // expected-error @+1 {{k_scale dequantises an FP8 cache, but key and value are 'bf16': drop it, or store K and V as f8E4M3FN or f8E5M2}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<1xf32>) : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @mixed_formats(%q: tensor<1x2x1x16xf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E5M2>, %s: tensor<1xf32>) {
  // expected-error @+1 {{an FP8 KV cache stores key and value in one FP8 format: key element type 'f8E4M3FN', value element type 'f8E5M2'}}
  %o = kvattn.attention %q, %k, %v k_scale(%s : tensor<1xf32>) v_scale(%s : tensor<1xf32>) : tensor<1x2x1x16xf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E5M2> -> tensor<1x2x1x16xf16>
  return
}

// -----

func.func @fp8_key_only(%q: tensor<1x2x1x16xf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf16>, %s: tensor<1xf32>) {
  // expected-error @+1 {{an FP8 KV cache stores key and value in one FP8 format: key element type 'f8E4M3FN', value element type 'f16'}}
  %o = kvattn.attention %q, %k, %v k_scale(%s : tensor<1xf32>) : tensor<1x2x1x16xf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf16> -> tensor<1x2x1x16xf16>
  return
}

// -----

func.func @fp8_query(%q: tensor<1x2x1x16xf8E4M3FN>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>, %s: tensor<1xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %o = kvattn.attention %q, %k, %v k_scale(%s : tensor<1xf32>) v_scale(%s : tensor<1xf32>) : tensor<1x2x1x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN> -> tensor<1x2x1x16xf8E4M3FN>
  return
}

// -----

func.func @scale_shape(%q: tensor<2x4x1x16xbf16>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>, %ks: tensor<3xf32>, %vs: tensor<1xf32>) {
  // expected-error @+1 {{k_scale has shape 'tensor<3xf32>': a KV scale is per tensor [1], per KV head [Hkv = 2] or per token and head [2, 2, 8] (the cache's shape without its last dimension)}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<3xf32>) v_scale(%vs : tensor<1xf32>) : tensor<2x4x1x16xbf16>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x1x16xbf16>
  return
}

// -----

func.func @token_scale_shape(%q: tensor<2x4x1x16xbf16>, %k: tensor<2x2x8x16xf8E4M3FN>, %v: tensor<2x2x8x16xf8E4M3FN>, %ks: tensor<1xf32>, %vs: tensor<2x8x2xf32>) {
  // expected-error @+1 {{v_scale has shape 'tensor<2x8x2xf32>': a KV scale is per tensor [1], per KV head [Hkv = 2] or per token and head [2, 2, 8]}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<1xf32>) v_scale(%vs : tensor<2x8x2xf32>) : tensor<2x4x1x16xbf16>, tensor<2x2x8x16xf8E4M3FN>, tensor<2x2x8x16xf8E4M3FN> -> tensor<2x4x1x16xbf16>
  return
}

// -----

func.func @scale_type(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xf8E5M2>, %v: tensor<1x2x8x16xf8E5M2>, %ks: tensor<1xf16>, %vs: tensor<1xf32>) {
  // expected-error @+1 {{k_scale must be an f32 tensor, got 'tensor<1xf16>'}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<1xf16>) v_scale(%vs : tensor<1xf32>) : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xf8E5M2>, tensor<1x2x8x16xf8E5M2> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @zero_scale(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>) {
  %ks = arith.constant dense<[0.5, 0.0]> : tensor<2xf32>
  %vs = arith.constant dense<1.0> : tensor<1xf32>
  // expected-error @+1 {{k_scale[1] = 0 must be positive and finite (a KV scale divides the values it quantises)}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<2xf32>) v_scale(%vs : tensor<1xf32>) : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @negative_scale(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>) {
  %ks = arith.constant dense<1.0> : tensor<1xf32>
  %vs = arith.constant dense<-2.0> : tensor<1xf32>
  // expected-error @+1 {{v_scale[0] = -2 must be positive and finite}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<1xf32>) v_scale(%vs : tensor<1xf32>) : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @nan_scale(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>) {
  %ks = arith.constant dense<0x7FC00000> : tensor<1xf32>
  // expected-error @+1 {{k_scale[0] = nan must be positive and finite}}
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<1xf32>) v_scale(%ks : tensor<1xf32>) : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @sdpa_fp8(%q: tensor<1x2x1x16xbf16>, %k: tensor<1x2x8x16xf8E4M3FN>, %v: tensor<1x2x8x16xf8E4M3FN>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %o = kvattn.sdpa %q, %k, %v : tensor<1x2x1x16xbf16>, tensor<1x2x8x16xf8E4M3FN>, tensor<1x2x8x16xf8E4M3FN> -> tensor<1x2x1x16xbf16>
  return
}

// -----

func.func @tile_fp8_without_scale(%q: memref<16x64xf32>, %k: memref<2x2x128x64xf8E4M3FN>, %s: memref<16x32xf32>, %i: index) {
  // expected-error @+1 {{an FP8 key ('f8E4M3FN') is read with kv_scale}}
  kvattn.tile.qk %q, %k[%i, %i, %i] size(%i, %i) into %s scale = 1.250000e-01 : memref<16x64xf32>, memref<2x2x128x64xf8E4M3FN>, memref<16x32xf32>
  return
}

// -----

func.func @tile_scale_without_fp8(%s: memref<16x32xf32>, %v: memref<2x2x128x64xf16>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x64xf32>, %vs: memref<1xf32>, %i: index) {
  // expected-error @+1 {{kv_scale dequantises an FP8 value, not 'f16'}}
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] kv_scale(%vs : memref<1xf32>) size(%i, %i) state(%m, %l, %acc) : memref<16x32xf32>, memref<2x2x128x64xf16>, memref<16xf32>, memref<16xf32>, memref<16x64xf32>
  return
}

// -----

// kvattn.append into an FP8 cache quantises with kv_scale: a bf16 update
// into an FP8 cache without it is refused by name.
func.func @append_into_fp8_without_scale(%u: tensor<1x2x1x16xbf16>, %c: tensor<1x2x8x16xf8E4M3FN>, %p: tensor<1xi32>) {
  // expected-error @+1 {{an FP8 cache ('f8E4M3FN') takes a 'bf16' update only with kv_scale, the f32 scales it quantises with (per tensor [1], per head [H] or per token and head: the cache's shape without its last dimension)}}
  %r = kvattn.append %u into %c at %p : tensor<1x2x1x16xbf16> into tensor<1x2x8x16xf8E4M3FN>, tensor<1xi32>
  return
}

// -----

func.func @append_scale_without_fp8(%u: tensor<1x2x1x16xbf16>, %c: tensor<1x2x8x16xbf16>, %p: tensor<1xi32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{kv_scale quantises the update into an FP8 cache, but the cache is 'bf16': drop it, or store the cache as f8E4M3FN or f8E5M2}}
  %r = kvattn.append %u into %c at %p kv_scale(%s : tensor<1xf32>) : tensor<1x2x1x16xbf16> into tensor<1x2x8x16xbf16>, tensor<1xi32>
  return
}

// -----

func.func @append_scale_shape(%u: tensor<1x2x1x16xbf16>, %c: tensor<1x2x8x16xf8E5M2>, %p: tensor<1xi32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{kv_scale has shape 'tensor<3xf32>': a KV scale is per tensor [1], per head [H = 2] or per token and head [1, 2, 8] (the cache's shape without its last dimension)}}
  %r = kvattn.append %u into %c at %p kv_scale(%s : tensor<3xf32>) : tensor<1x2x1x16xbf16> into tensor<1x2x8x16xf8E5M2>, tensor<1xi32>
  return
}

// -----

func.func @append_scale_paged_shape(%u: tensor<2x2x1x16xf16>, %c: tensor<8x4x2x16xf8E4M3FN>, %p: tensor<2xi32>, %bt: tensor<2x4xi32>, %s: tensor<2x2x8xf32>) {
  // expected-error @+1 {{kv_scale has shape 'tensor<2x2x8xf32>': a KV scale is per tensor [1], per head [H = 2] or per token and head [8, 4, 2] (the cache's shape without its last dimension)}}
  %r = kvattn.append %u into %c at %p block_table(%bt : tensor<2x4xi32>) kv_scale(%s : tensor<2x2x8xf32>) : tensor<2x2x1x16xf16> into tensor<8x4x2x16xf8E4M3FN>, tensor<2xi32>
  return
}

// -----

func.func @append_scale_type(%u: tensor<1x2x1x16xbf16>, %c: tensor<1x2x8x16xf8E4M3FN>, %p: tensor<1xi32>, %s: tensor<1xf16>) {
  // expected-error @+1 {{kv_scale must be an f32 tensor, got 'tensor<1xf16>'}}
  %r = kvattn.append %u into %c at %p kv_scale(%s : tensor<1xf16>) : tensor<1x2x1x16xbf16> into tensor<1x2x8x16xf8E4M3FN>, tensor<1xi32>
  return
}

// -----

func.func @append_scale_zero(%u: tensor<1x2x1x16xf32>, %c: tensor<1x2x8x16xf8E4M3FN>, %p: tensor<1xi32>) {
  %s = arith.constant dense<[0.5, 0.0]> : tensor<2xf32>
  // expected-error @+1 {{kv_scale[1] = 0 must be positive and finite (a KV scale divides the values it quantises)}}
  %r = kvattn.append %u into %c at %p kv_scale(%s : tensor<2xf32>) : tensor<1x2x1x16xf32> into tensor<1x2x8x16xf8E4M3FN>, tensor<1xi32>
  return
}

// -----

// The update is f32, f16 or bf16: FP8 codes are not appended as they are.
func.func @append_fp8_update(%u: tensor<1x2x1x16xf8E4M3FN>, %c: tensor<1x2x8x16xf8E4M3FN>, %p: tensor<1xi32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %r = kvattn.append %u into %c at %p kv_scale(%s : tensor<1xf32>) : tensor<1x2x1x16xf8E4M3FN> into tensor<1x2x8x16xf8E4M3FN>, tensor<1xi32>
  return
}
