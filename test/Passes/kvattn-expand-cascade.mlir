// RUN: kvattn-opt %s -split-input-file -kvattn-expand-cascade | FileCheck %s --enable-var-scope

// Shared-prefix attention as two attentions and a merge: (a) every packed
// row over the prefix as ONE batch, without positions or causality (the
// prefix lies before every query), (b) the ragged attention over the
// suffixes with the cascade's q_start, q_offset, kv_len and causal, (c)
// kvattn.merge of the two states, prefix first.
// CHECK-LABEL: func.func @cascade
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x5x16xf32>, %[[PK:.*]]: tensor<1x2x64x16xf32>, %[[PV:.*]]: tensor<1x2x64x8xf32>, %[[K:.*]]: tensor<3x2x10x16xf32>, %[[V:.*]]: tensor<3x2x10x8xf32>, %[[QS:.*]]: tensor<4xi32>, %[[QO:.*]]: tensor<3xi32>, %[[KL:.*]]: tensor<3xi32>)
// CHECK: %[[PO:.*]], %[[PL:.*]] = kvattn.attention %[[Q]], %[[PK]], %[[PV]] scale = 2.500000e-01 : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x8xf32> -> tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
// CHECK: %[[SO:.*]], %[[SL:.*]] = kvattn.attention %[[Q]], %[[K]], %[[V]] q_start(%[[QS]] : tensor<4xi32>) q_offset(%[[QO]] : tensor<3xi32>) kv_len(%[[KL]] : tensor<3xi32>) causal scale = 2.500000e-01
// CHECK-DAG: %[[PO1:.*]] = tensor.expand_shape %[[PO]] {{\[\[}}0, 1], [2], [3], [4]] output_shape [1, 1, 4, 5, 8]
// CHECK-DAG: %[[SO1:.*]] = tensor.expand_shape %[[SO]] {{\[\[}}0, 1], [2], [3], [4]]
// CHECK-DAG: %[[PL1:.*]] = tensor.expand_shape %[[PL]] {{\[\[}}0, 1], [2], [3]]
// CHECK-DAG: %[[SL1:.*]] = tensor.expand_shape %[[SL]] {{\[\[}}0, 1], [2], [3]]
// CHECK: %[[OP:.*]] = tensor.concat dim(0) %[[PO1]], %[[SO1]] : (tensor<1x1x4x5x8xf32>, tensor<1x1x4x5x8xf32>) -> tensor<2x1x4x5x8xf32>
// CHECK: %[[LP:.*]] = tensor.concat dim(0) %[[PL1]], %[[SL1]] : (tensor<1x1x4x5xf32>, tensor<1x1x4x5xf32>) -> tensor<2x1x4x5xf32>
// CHECK: %[[M:.*]], %[[ML:.*]] = kvattn.merge %[[OP]], %[[LP]] : tensor<2x1x4x5x8xf32>, tensor<2x1x4x5xf32> -> tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
// CHECK: return %[[M]], %[[ML]]
func.func @cascade(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %pv: tensor<1x2x64x8xf32>, %k: tensor<3x2x10x16xf32>, %v: tensor<3x2x10x8xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) causal scale = 0.25 : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x8xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x8xf32> -> tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
  return %o, %lse : tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
}

// -----

// 16-bit outputs are widened (exactly) into the merge's f32 parts; without
// an lse result the merge's lse goes unused.
// CHECK-LABEL: func.func @bf16
// CHECK: %[[PO:.*]], %{{.*}} = kvattn.attention {{.*}} -> tensor<1x2x3x16xbf16>, tensor<1x2x3xf32>
// CHECK: %[[SO:.*]], %{{.*}} = kvattn.attention {{.*}} q_start
// CHECK: arith.extf %[[PO]] : tensor<1x2x3x16xbf16> to tensor<1x2x3x16xf32>
// CHECK: arith.extf %[[SO]] : tensor<1x2x3x16xbf16> to tensor<1x2x3x16xf32>
// CHECK: %[[M:.*]], %{{.*}} = kvattn.merge {{.*}} -> tensor<1x2x3x16xbf16>, tensor<1x2x3xf32>
// CHECK: return %[[M]] : tensor<1x2x3x16xbf16>
func.func @bf16(%q: tensor<1x2x3x16xbf16>, %pk: tensor<1x1x32x16xbf16>, %pv: tensor<1x1x32x16xbf16>, %k: tensor<2x1x8x16xbf16>, %v: tensor<2x1x8x16xbf16>, %qs: tensor<3xi64>, %qo: tensor<2xi64>, %kl: tensor<2xi64>) -> tensor<1x2x3x16xbf16> {
  %o = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<3xi64>) q_offset(%qo : tensor<2xi64>) kv_len(%kl : tensor<2xi64>) causal : tensor<1x2x3x16xbf16>, tensor<1x1x32x16xbf16>, tensor<1x1x32x16xbf16>, tensor<2x1x8x16xbf16>, tensor<2x1x8x16xbf16> -> tensor<1x2x3x16xbf16>
  return %o : tensor<1x2x3x16xbf16>
}
