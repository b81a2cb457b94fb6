// RUN: kvattn-opt %s -split-input-file -kvattn-expand-cascade | FileCheck %s --enable-var-scope

// A paged cascade: (a) the prefix attention reads the pool through the
// one-sequence block table [1, prefix_max_pages] (prefix_pages expanded)
// with kv_len = prefix_len, (b) the suffix attention through the block
// table, (c) the merge as without pages.
// CHECK-LABEL: func.func @paged
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x5x16xf32>, %[[K:.*]]: tensor<32x16x2x16xf32>, %[[V:.*]]: tensor<32x16x2x8xf32>, %[[QS:.*]]: tensor<4xi32>, %[[QO:.*]]: tensor<3xi32>, %[[KL:.*]]: tensor<3xi32>, %[[PP:.*]]: tensor<6xi32>, %[[PLEN:.*]]: tensor<1xi32>, %[[BT:.*]]: tensor<3x2xi32>)
// CHECK: %[[T:.*]] = tensor.expand_shape %[[PP]] {{\[\[}}0, 1]] output_shape [1, 6] : tensor<6xi32> into tensor<1x6xi32>
// CHECK: %[[PO:.*]], %[[PL:.*]] = kvattn.attention %[[Q]], %[[K]], %[[V]] kv_len(%[[PLEN]] : tensor<1xi32>) block_table(%[[T]] : tensor<1x6xi32>) : tensor<1x4x5x16xf32>, tensor<32x16x2x16xf32>, tensor<32x16x2x8xf32> -> tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
// CHECK: %[[SO:.*]], %[[SL:.*]] = kvattn.attention %[[Q]], %[[K]], %[[V]] q_start(%[[QS]] : tensor<4xi32>) q_offset(%[[QO]] : tensor<3xi32>) kv_len(%[[KL]] : tensor<3xi32>) block_table(%[[BT]] : tensor<3x2xi32>) causal
// CHECK: kvattn.merge
func.func @paged(%q: tensor<1x4x5x16xf32>, %k: tensor<32x16x2x16xf32>, %v: tensor<32x16x2x8xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %pp: tensor<6xi32>, %pl: tensor<1xi32>, %bt: tensor<3x2xi32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) prefix_pages(%pp : tensor<6xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<3x2xi32>) causal : tensor<1x4x5x16xf32>, tensor<32x16x2x16xf32>, tensor<32x16x2x8xf32>, tensor<32x16x2x16xf32>, tensor<32x16x2x8xf32> -> tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
  return %o, %lse : tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
}

// -----

// A dynamic list of pages: its length is read at run time.
// CHECK-LABEL: func.func @dynamic_pages
// CHECK: %[[N:.*]] = tensor.dim %{{.*}}, %c0 : tensor<?xi64>
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0, 1]] output_shape [1, %[[N]]] : tensor<?xi64> into tensor<1x?xi64>
// CHECK: kvattn.attention {{.*}} kv_len(%{{.*}} : tensor<1xi64>) block_table(%{{.*}} : tensor<1x?xi64>)
// CHECK: kvattn.attention {{.*}} q_start(
func.func @dynamic_pages(%q: tensor<1x4x5x16xf32>, %pk: tensor<?x16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %pp: tensor<?xi64>, %pl: tensor<1xi64>) -> tensor<1x4x5x16xf32> {
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<?xi64>) prefix_len(%pl : tensor<1xi64>) : tensor<1x4x5x16xf32>, tensor<?x16x2x16xf32>, tensor<?x16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return %o : tensor<1x4x5x16xf32>
}
