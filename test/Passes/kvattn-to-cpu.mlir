// RUN: kvattn-opt %s -kvattn-to-cpu | FileCheck %s
// RUN: kvattn-opt %s -kvattn-to-cpu="block-m=16 block-n=16 stats=true" | FileCheck %s --check-prefix=STATS
// The registered CPU pipeline takes framework IR all the way to the LLVM
// dialect: no kvattn, tensor, memref or scf op is left.

// CHECK-NOT:     kvattn.
// CHECK-LABEL:   llvm.func @main
// CHECK-DAG:     llvm.intr.tanh
// CHECK-DAG:     llvm.intr.exp
// CHECK-NOT:     kvattn.
// CHECK-NOT:     scf.
// CHECK-NOT:     memref.

// STATS:         llvm.mlir.global external @kvattn_tile_stats
// STATS-LABEL:   llvm.func @main
// STATS:         llvm.atomicrmw add
func.func @main(%q: tensor<1x2x4x16xf16>, %kc: tensor<1x1x64x16xf16>, %vc: tensor<1x1x64x16xf16>,
                %kn: tensor<1x1x4x16xf16>, %vn: tensor<1x1x4x16xf16>, %pos: tensor<1xi32>)
    -> (tensor<1x2x4x16xf16>, tensor<1x2x4x16xf16>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x4x16xf16> into tensor<1x1x64x16xf16>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x4x16xf16> into tensor<1x1x64x16xf16>, tensor<1xi32>
  %qo = arith.constant dense<0> : tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x4x16xf16>, tensor<1x1x64x16xf16>, tensor<1x1x64x16xf16> -> tensor<1x2x4x16xf16>
  %c = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal softcap = 10.0
      : tensor<1x2x4x16xf16>, tensor<1x1x64x16xf16>, tensor<1x1x64x16xf16> -> tensor<1x2x4x16xf16>
  return %o, %c : tensor<1x2x4x16xf16>, tensor<1x2x4x16xf16>
}
