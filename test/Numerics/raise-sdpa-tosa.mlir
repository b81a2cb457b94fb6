// Numerics of -kvattn-raise-sdpa on TOSA input: each function is run as
// written by upstream MLIR alone (tosa-to-linalg{-named}, tosa-to-arith,
// tosa-to-tensor, then bufferization and loops to LLVM; mlir-runner) and,
// raised, by kvattn-run --target=cpu; atol = rtol = 2e-5 (f32).
// tosa_causal_constant's constant mask is the lower-right triangle of
// L = 2 rows over S = 5 keys; raised, it is `causal = lower_right`, and the
// inputs vary per key so an upper-left triangle would not match.
//
// RUN: %raise-compare %s --tosa --entry=tosa_additive | FileCheck %s
// RUN: %raise-compare %s --tosa --entry=tosa_causal_constant | FileCheck %s
// RUN: %raise-compare %s --tosa --entry=tosa_alibi | FileCheck %s
// RUN: kvattn-opt %s -kvattn-raise-sdpa | FileCheck %s --check-prefix=IR

// CHECK: raise_compare: @{{.*}} 16 elements {{.*}} PASS
// IR-LABEL: func.func @tosa_additive
// IR: kvattn.sdpa {{.*}} mask(
// IR-LABEL: func.func @tosa_causal_constant
// IR: kvattn.sdpa {{.*}} causal = lower_right scale = 5.000000e-01
// tosa_alibi's constant mask is an ALiBi bias, -slope_h * |i + 3 - j| per
// head (slopes 0.5, 0.25) with the lower-right causal part:
// IR-LABEL: func.func @tosa_alibi
// IR: kvattn.attention {{.*}} q_offset({{.*}}) alibi_slopes({{.*}} : tensor<2xf32>) causal scale = 5.000000e-01

func.func @tosa_additive(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<1x2x5xf32>) -> tensor<2x2x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %ss = tosa.mul %s, %c, %sh : (tensor<2x2x5xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %sm = tosa.add %ss, %mask : (tensor<2x2x5xf32>, tensor<1x2x5xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %sm {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %sm, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %r = tosa.reciprocal %su : (tensor<2x2x1xf32>) -> tensor<2x2x1xf32>
  %p = tosa.mul %x, %r, %sh : (tensor<2x2x5xf32>, tensor<2x2x1xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}

func.func @tosa_causal_constant(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %mask = "tosa.const"() <{values = dense<[[[0.0, 0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0, 0.0]]]> : tensor<1x2x5xf32>}> : () -> tensor<1x2x5xf32>
  %qs = tosa.mul %q, %c, %sh : (tensor<2x2x4xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<2x2x4xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %qs, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %sm = tosa.add %s, %mask : (tensor<2x2x5xf32>, tensor<1x2x5xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %sm {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %sm, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %r = tosa.reciprocal %su : (tensor<2x2x1xf32>) -> tensor<2x2x1xf32>
  %p = tosa.mul %r, %x, %sh : (tensor<2x2x1xf32>, tensor<2x2x5xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}

func.func @tosa_alibi(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %mask = "tosa.const"() <{values = dense<[[[-1.5, -1.0, -0.5, -0.0, 0xFF800000], [-2.0, -1.5, -1.0, -0.5, -0.0]], [[-0.75, -0.5, -0.25, -0.0, 0xFF800000], [-1.0, -0.75, -0.5, -0.25, -0.0]]]> : tensor<2x2x5xf32>}> : () -> tensor<2x2x5xf32>
  %qs = tosa.mul %q, %c, %sh : (tensor<2x2x4xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<2x2x4xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %qs, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %sm = tosa.add %s, %mask : (tensor<2x2x5xf32>, tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %sm {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %sm, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %r = tosa.reciprocal %su : (tensor<2x2x1xf32>) -> tensor<2x2x1xf32>
  %p = tosa.mul %r, %x, %sh : (tensor<2x2x1xf32>, tensor<2x2x5xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}
