// RUN: kvattn-opt %s -split-input-file | kvattn-opt -split-input-file | FileCheck %s
// The latent form of kvattn.attention (DeepSeek MLA, absorbed): no value
// operand, `value_dim = Dv`, V the first Dv columns of the one key cache
// (D = 576 = 512 latent + 64 rotary, Dv = 512); paged, ragged, GQA with one
// KV head, lse, an FP8 latent cache; and the tile op that reads V from the
// key cache.

// CHECK-LABEL: func @mla_decode_paged
// CHECK: kvattn.attention %{{.*}}, %{{.*}} value_dim = 512 kv_len(%{{.*}} : tensor<4xi32>) block_table(%{{.*}} : tensor<4x8xi32>) scale = 0.0416666679 : tensor<4x128x1x576xbf16>, tensor<64x64x1x576xbf16> -> tensor<4x128x1x512xbf16>, tensor<4x128x1xf32>
func.func @mla_decode_paged(%q: tensor<4x128x1x576xbf16>, %ckv: tensor<64x64x1x576xbf16>, %len: tensor<4xi32>, %bt: tensor<4x8xi32>) -> (tensor<4x128x1x512xbf16>, tensor<4x128x1xf32>) {
  %o, %lse = kvattn.attention %q, %ckv value_dim = 512 kv_len(%len : tensor<4xi32>) block_table(%bt : tensor<4x8xi32>) scale = 0.0416666679 : tensor<4x128x1x576xbf16>, tensor<64x64x1x576xbf16> -> tensor<4x128x1x512xbf16>, tensor<4x128x1xf32>
  return %o, %lse : tensor<4x128x1x512xbf16>, tensor<4x128x1xf32>
}

// -----

// Causal short appends with positions, a dynamic batch and Dv = D.
// CHECK-LABEL: func @mla_append_causal
// CHECK: kvattn.attention %{{.*}}, %{{.*}} value_dim = 64 q_offset(%{{.*}} : tensor<?xi64>) kv_len(%{{.*}} : tensor<?xi32>) causal : tensor<?x16x3x64xf32>, tensor<?x1x40x64xf32> -> tensor<?x16x3x64xf32>
func.func @mla_append_causal(%q: tensor<?x16x3x64xf32>, %ckv: tensor<?x1x40x64xf32>, %pos: tensor<?xi64>, %len: tensor<?xi32>) -> tensor<?x16x3x64xf32> {
  %o = kvattn.attention %q, %ckv value_dim = 64 q_offset(%pos : tensor<?xi64>) kv_len(%len : tensor<?xi32>) causal : tensor<?x16x3x64xf32>, tensor<?x1x40x64xf32> -> tensor<?x16x3x64xf32>
  return %o : tensor<?x16x3x64xf32>
}

// -----

// An FP8 latent cache: k_scale alone dequantises it (the scores' K and the
// value columns inside it), per token here ([num_pages, page_size, Hkv]).
// CHECK-LABEL: func @mla_decode_fp8
// CHECK: kvattn.attention %{{.*}}, %{{.*}} value_dim = 512 kv_len(%{{.*}} : tensor<4xi32>) block_table(%{{.*}} : tensor<4x8xi32>) k_scale(%{{.*}} : tensor<64x64x1xf32>) scale = 0.0721687824 : tensor<4x16x1x576xbf16>, tensor<64x64x1x576xf8E4M3FN> -> tensor<4x16x1x512xbf16>
func.func @mla_decode_fp8(%q: tensor<4x16x1x576xbf16>, %ckv: tensor<64x64x1x576xf8E4M3FN>, %len: tensor<4xi32>, %bt: tensor<4x8xi32>, %s: tensor<64x64x1xf32>) -> tensor<4x16x1x512xbf16> {
  %o = kvattn.attention %q, %ckv value_dim = 512 kv_len(%len : tensor<4xi32>) block_table(%bt : tensor<4x8xi32>) k_scale(%s : tensor<64x64x1xf32>) scale = 0.0721687824 : tensor<4x16x1x576xbf16>, tensor<64x64x1x576xf8E4M3FN> -> tensor<4x16x1x512xbf16>
  return %o : tensor<4x16x1x512xbf16>
}

// -----

// CHECK-LABEL: func @tile_softmax_latent
// CHECK: kvattn.tile.softmax_update %{{.*}}, %[[K:.*]][%{{.*}}, %{{.*}}, %{{.*}}] latent size(%{{.*}}, %{{.*}}) state(%{{.*}}, %{{.*}}, %{{.*}}) : memref<16x32xf32>, memref<2x1x128x576xbf16>, memref<16xf32>, memref<16xf32>, memref<16x512xf32>
func.func @tile_softmax_latent(%s: memref<16x32xf32>, %k: memref<2x1x128x576xbf16>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x512xf32>, %i: index) {
  kvattn.tile.softmax_update %s, %k[%i, %i, %i] latent size(%i, %i) state(%m, %l, %acc) : memref<16x32xf32>, memref<2x1x128x576xbf16>, memref<16xf32>, memref<16xf32>, memref<16x512xf32>
  return
}
