// RUN: kvattn-opt %s -split-input-file | FileCheck %s
// RUN: kvattn-opt %s -split-input-file --mlir-print-op-generic | kvattn-opt -split-input-file | FileCheck %s
// Ragged keys (k_start, FlashAttention's cu_seqlens_k) and a batch-to-cache
// map (cache_batch_idx, FlashAttention's kvcache API) round-trip; their
// verifier rules are in key-rows-invalid.mlir.

// Ragged keys next to ragged queries: three sequences' keys packed into one
// [1, Hkv, 40, D] buffer, their query rows into one [1, Hq, 19, D] query.
// CHECK-LABEL: func @ragged_keys
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_start(%{{.*}} : tensor<4xi32>) k_start(%{{.*}} : tensor<4xi32>) q_offset(%{{.*}} : tensor<3xi32>) causal : tensor<1x8x19x64xf16>, tensor<1x2x40x64xf16>, tensor<1x2x40x64xf16> -> tensor<1x8x19x64xf16>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} k_start(%{{.*}} : tensor<?xi64>) kv_len(%{{.*}} : tensor<?xi64>) : tensor<?x8x1x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<?x8x1x64xbf16>
func.func @ragged_keys(%q: tensor<1x8x19x64xf16>, %k: tensor<1x2x40x64xf16>, %cu: tensor<4xi32>, %ck: tensor<4xi32>, %pos: tensor<3xi32>,
                       %dq: tensor<?x8x1x64xbf16>, %dk: tensor<1x2x?x64xbf16>, %dck: tensor<?xi64>, %dlen: tensor<?xi64>) {
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<4xi32>) k_start(%ck : tensor<4xi32>) q_offset(%pos : tensor<3xi32>) causal
      : tensor<1x8x19x64xf16>, tensor<1x2x40x64xf16>, tensor<1x2x40x64xf16> -> tensor<1x8x19x64xf16>
  %d = kvattn.attention %dq, %dk, %dk k_start(%dck : tensor<?xi64>) kv_len(%dlen : tensor<?xi64>)
      : tensor<?x8x1x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<?x8x1x64xbf16>
  return
}

// -----

// Three batch rows over a cache of five rows; two batches may read the same
// row.
// CHECK-LABEL: func @cache_batch_idx
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} cache_batch_idx(%{{.*}} : tensor<3xi32>) q_offset(%{{.*}} : tensor<3xi32>) kv_len(%{{.*}} : tensor<3xi32>) causal : tensor<3x8x1x64xf16>, tensor<5x2x32x64xf16>, tensor<5x2x32x64xf16> -> tensor<3x8x1x64xf16>
func.func @cache_batch_idx(%q: tensor<3x8x1x64xf16>, %k: tensor<5x2x32x64xf16>, %pos: tensor<3xi32>, %len: tensor<3xi32>) {
  %idx = arith.constant dense<[4, 0, 4]> : tensor<3xi32>
  %o = kvattn.attention %q, %k, %k cache_batch_idx(%idx : tensor<3xi32>) q_offset(%pos : tensor<3xi32>) kv_len(%len : tensor<3xi32>) causal
      : tensor<3x8x1x64xf16>, tensor<5x2x32x64xf16>, tensor<5x2x32x64xf16> -> tensor<3x8x1x64xf16>
  return
}
