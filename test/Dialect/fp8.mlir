// RUN: kvattn-opt %s -split-input-file | kvattn-opt -split-input-file | FileCheck %s
// FP8 KV caches: kvattn.attention over f8E4M3FN / f8E5M2 K and V with f32
// k_scale / v_scale per tensor, per KV head and per token and head (the
// cache's shape without D: [B, Hkv, S], paged [num_pages, page_size, Hkv],
// cache rows [C, Hkv, S]); the tile ops read them with kv_scale.

// CHECK-LABEL: func @per_tensor
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%{{.*}} : tensor<2xi32>) k_scale(%{{.*}} : tensor<1xf32>) v_scale(%{{.*}} : tensor<1xf32>) causal : tensor<2x8x1x64xbf16>, tensor<2x2x128x64xf8E4M3FN>, tensor<2x2x128x64xf8E4M3FN> -> tensor<2x8x1x64xbf16>
func.func @per_tensor(%q: tensor<2x8x1x64xbf16>, %k: tensor<2x2x128x64xf8E4M3FN>, %v: tensor<2x2x128x64xf8E4M3FN>, %pos: tensor<2xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<2x8x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) k_scale(%ks : tensor<1xf32>) v_scale(%vs : tensor<1xf32>) causal : tensor<2x8x1x64xbf16>, tensor<2x2x128x64xf8E4M3FN>, tensor<2x2x128x64xf8E4M3FN> -> tensor<2x8x1x64xbf16>
  return %o : tensor<2x8x1x64xbf16>
}

// -----

// CHECK-LABEL: func @per_head_rank0
// CHECK: k_scale(%{{.*}} : tensor<2xf32>) v_scale(%{{.*}} : tensor<f32>)
func.func @per_head_rank0(%q: tensor<1x4x3x16xf16>, %k: tensor<1x2x8x16xf8E5M2>, %v: tensor<1x2x8x16xf8E5M2>, %ks: tensor<2xf32>, %vs: tensor<f32>) -> tensor<1x4x3x16xf16> {
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<2xf32>) v_scale(%vs : tensor<f32>) : tensor<1x4x3x16xf16>, tensor<1x2x8x16xf8E5M2>, tensor<1x2x8x16xf8E5M2> -> tensor<1x4x3x16xf16>
  return %o : tensor<1x4x3x16xf16>
}

// -----

// CHECK-LABEL: func @per_token_paged
// CHECK: k_scale(%{{.*}} : tensor<64x16x2xf32>) v_scale(%{{.*}} : tensor<64x16x2xf32>)
func.func @per_token_paged(%q: tensor<2x4x1x64xf32>, %k: tensor<64x16x2x64xf8E4M3FN>, %v: tensor<64x16x2x64xf8E4M3FN>, %bt: tensor<2x8xi32>, %len: tensor<2xi32>, %ks: tensor<64x16x2xf32>, %vs: tensor<64x16x2xf32>) -> tensor<2x4x1x64xf32> {
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x8xi32>) k_scale(%ks : tensor<64x16x2xf32>) v_scale(%vs : tensor<64x16x2xf32>) : tensor<2x4x1x64xf32>, tensor<64x16x2x64xf8E4M3FN>, tensor<64x16x2x64xf8E4M3FN> -> tensor<2x4x1x64xf32>
  return %o : tensor<2x4x1x64xf32>
}

// -----

// CHECK-LABEL: func @tile_ops
// CHECK: kvattn.tile.qk %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] kv_scale(%{{.*}} : memref<2x2x128xf32>) size
// CHECK: kvattn.tile.softmax_update %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] kv_scale(%{{.*}} : memref<1xf32>) size
func.func @tile_ops(%q: memref<16x64xf32>, %k: memref<2x2x128x64xf8E4M3FN>, %v: memref<2x2x128x64xf8E4M3FN>, %s: memref<16x32xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x64xf32>, %ks: memref<2x2x128xf32>, %vs: memref<1xf32>, %i: index) {
  kvattn.tile.qk %q, %k[%i, %i, %i] kv_scale(%ks : memref<2x2x128xf32>) size(%i, %i) into %s scale = 1.250000e-01 : memref<16x64xf32>, memref<2x2x128x64xf8E4M3FN>, memref<16x32xf32>
  kvattn.tile.softmax_update %s, %v[%i, %i, %i] kv_scale(%vs : memref<1xf32>) size(%i, %i) state(%m, %l, %acc) : memref<16x32xf32>, memref<2x2x128x64xf8E4M3FN>, memref<16xf32>, memref<16xf32>, memref<16x64xf32>
  return
}

// -----

// kvattn.append into an FP8 cache: the update quantised with kv_scale (per
// tensor, per head, per token and head; paged; with RoPE).
// CHECK-LABEL: func @append_quantised
// CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} kv_scale(%{{.*}} : tensor<1xf32>) : tensor<2x2x1x64xbf16> into tensor<2x2x128x64xf8E4M3FN>, tensor<2xi32>
// CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} kv_scale(%{{.*}} : tensor<2xf32>) : tensor<2x2x1x64xf32> into tensor<2x2x128x64xf8E5M2>, tensor<2xi32>
// CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} block_table(%{{.*}} : tensor<2x8xi32>) kv_scale(%{{.*}} : tensor<64x16x2xf32>) : tensor<2x2x1x64xf16> into tensor<64x16x2x64xf8E4M3FN>, tensor<2xi32>
// CHECK: kvattn.append %{{.*}} into %{{.*}} at %{{.*}} rope = <rotary_dim = 64, theta = 1.000000e+04> rope_pos(%{{.*}} : tensor<2x128xi32>) kv_scale(%{{.*}} : tensor<2x2x128xf32>) : tensor<2x2x1x64xbf16> into tensor<2x2x128x64xf8E4M3FN>, tensor<2xi32>
func.func @append_quantised(%u: tensor<2x2x1x64xbf16>, %u32: tensor<2x2x1x64xf32>, %u16: tensor<2x2x1x64xf16>, %c: tensor<2x2x128x64xf8E4M3FN>, %c5: tensor<2x2x128x64xf8E5M2>, %pages: tensor<64x16x2x64xf8E4M3FN>, %pos: tensor<2xi32>, %bt: tensor<2x8xi32>, %rec: tensor<2x128xi32>, %s1: tensor<1xf32>, %sh: tensor<2xf32>, %sp: tensor<64x16x2xf32>, %st: tensor<2x2x128xf32>) {
  %a = kvattn.append %u into %c at %pos kv_scale(%s1 : tensor<1xf32>) : tensor<2x2x1x64xbf16> into tensor<2x2x128x64xf8E4M3FN>, tensor<2xi32>
  %b = kvattn.append %u32 into %c5 at %pos kv_scale(%sh : tensor<2xf32>) : tensor<2x2x1x64xf32> into tensor<2x2x128x64xf8E5M2>, tensor<2xi32>
  %p = kvattn.append %u16 into %pages at %pos block_table(%bt : tensor<2x8xi32>) kv_scale(%sp : tensor<64x16x2xf32>) : tensor<2x2x1x64xf16> into tensor<64x16x2x64xf8E4M3FN>, tensor<2xi32>
  %r, %rp = kvattn.append %u into %c at %pos rope = #kvattn.rope<rotary_dim = 64, theta = 10000.0> rope_pos(%rec : tensor<2x128xi32>) kv_scale(%st : tensor<2x2x128xf32>) : tensor<2x2x1x64xbf16> into tensor<2x2x128x64xf8E4M3FN>, tensor<2xi32>
  return
}
