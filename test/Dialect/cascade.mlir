// RUN: kvattn-opt %s -split-input-file | FileCheck %s
// RUN: kvattn-opt %s -split-input-file --mlir-print-op-generic | kvattn-opt -split-input-file | FileCheck %s
// kvattn.cascade (shared-prefix attention) round-trips; its verifier rules
// are in cascade-invalid.mlir.

// CHECK-LABEL: func.func @cascade
// CHECK: kvattn.cascade %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} q_start(%{{.*}} : tensor<17xi32>) q_offset(%{{.*}} : tensor<16xi32>) kv_len(%{{.*}} : tensor<16xi32>) causal softcap = 3.000000e+01 scale = 1.250000e-01
func.func @cascade(%q: tensor<1x8x26x64xbf16>, %pk: tensor<1x2x4096x64xbf16>, %pv: tensor<1x2x4096x64xbf16>, %k: tensor<16x2x300x64xbf16>, %v: tensor<16x2x300x64xbf16>, %qs: tensor<17xi32>, %qo: tensor<16xi32>, %kl: tensor<16xi32>) -> (tensor<1x8x26x64xbf16>, tensor<1x8x26xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<17xi32>) q_offset(%qo : tensor<16xi32>) kv_len(%kl : tensor<16xi32>) causal softcap = 30.0 scale = 0.125 : tensor<1x8x26x64xbf16>, tensor<1x2x4096x64xbf16>, tensor<1x2x4096x64xbf16>, tensor<16x2x300x64xbf16>, tensor<16x2x300x64xbf16> -> tensor<1x8x26x64xbf16>, tensor<1x8x26xf32>
  return %o, %lse : tensor<1x8x26x64xbf16>, tensor<1x8x26xf32>
}
