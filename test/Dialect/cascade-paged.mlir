// RUN: kvattn-opt %s -split-input-file | FileCheck %s
// RUN: kvattn-opt %s -split-input-file --mlir-print-op-generic | kvattn-opt -split-input-file | FileCheck %s
// A paged kvattn.cascade round-trips: the shared prefix as a list of pages
// of a pool (prefix_pages, prefix_len), the suffixes through a block table
// per sequence, each level on its own (the verifier rules are in
// cascade-paged-invalid.mlir).

// Both levels in one pool of 64 pages of 16 tokens.
// CHECK-LABEL: func.func @paged
// CHECK: kvattn.cascade %{{.*}}, %[[K:.*]], %[[V:.*]], %[[K]], %[[V]] q_start(%{{.*}} : tensor<17xi32>) q_offset(%{{.*}} : tensor<16xi32>) kv_len(%{{.*}} : tensor<16xi32>) prefix_pages(%{{.*}} : tensor<8xi32>) prefix_len(%{{.*}} : tensor<1xi32>) block_table(%{{.*}} : tensor<16x4xi32>) causal
func.func @paged(%q: tensor<1x8x26x64xbf16>, %k: tensor<64x16x2x64xbf16>, %v: tensor<64x16x2x64xbf16>, %qs: tensor<17xi32>, %qo: tensor<16xi32>, %kl: tensor<16xi32>, %pp: tensor<8xi32>, %pl: tensor<1xi32>, %bt: tensor<16x4xi32>) -> (tensor<1x8x26x64xbf16>, tensor<1x8x26xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<17xi32>) q_offset(%qo : tensor<16xi32>) kv_len(%kl : tensor<16xi32>) prefix_pages(%pp : tensor<8xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<16x4xi32>) causal : tensor<1x8x26x64xbf16>, tensor<64x16x2x64xbf16>, tensor<64x16x2x64xbf16>, tensor<64x16x2x64xbf16>, tensor<64x16x2x64xbf16> -> tensor<1x8x26x64xbf16>, tensor<1x8x26xf32>
  return %o, %lse : tensor<1x8x26x64xbf16>, tensor<1x8x26xf32>
}

// -----

// A paged prefix over contiguous suffixes, i64 tables, dynamic sizes.
// CHECK-LABEL: func.func @paged_prefix
// CHECK: kvattn.cascade {{.*}} kv_len(%{{.*}} : tensor<?xi64>) prefix_pages(%{{.*}} : tensor<?xi64>) prefix_len(%{{.*}} : tensor<1xi64>) :
func.func @paged_prefix(%q: tensor<1x4x?x16xf32>, %pk: tensor<?x32x2x16xf32>, %k: tensor<?x2x?x16xf32>, %qs: tensor<?xi64>, %b: tensor<?xi64>, %pp: tensor<?xi64>, %pl: tensor<1xi64>) -> tensor<1x4x?x16xf32> {
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<?xi64>) q_offset(%b : tensor<?xi64>) kv_len(%b : tensor<?xi64>) prefix_pages(%pp : tensor<?xi64>) prefix_len(%pl : tensor<1xi64>) : tensor<1x4x?x16xf32>, tensor<?x32x2x16xf32>, tensor<?x32x2x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// Paged suffixes under a contiguous prefix; constant tables that keep the
// rules (checked by the verifier).
// CHECK-LABEL: func.func @paged_suffix
// CHECK: kvattn.cascade {{.*}} block_table(%{{.*}} : tensor<2x3xi32>) :
func.func @paged_suffix(%q: tensor<1x4x3x16xf32>, %pk: tensor<1x2x40x16xf32>, %k: tensor<8x16x2x16xf32>, %qs: tensor<3xi32>, %qo: tensor<2xi32>) -> tensor<1x4x3x16xf32> {
  %bt = arith.constant dense<[[3, 0, -1], [7, 1, 5]]> : tensor<2x3xi32>
  %kl = arith.constant dense<[20, 48]> : tensor<2xi32>
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) kv_len(%kl : tensor<2xi32>) block_table(%bt : tensor<2x3xi32>) : tensor<1x4x3x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32> -> tensor<1x4x3x16xf32>
  return %o : tensor<1x4x3x16xf32>
}
