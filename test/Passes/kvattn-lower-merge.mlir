// RUN: kvattn-opt %s -split-input-file -kvattn-lower-merge | FileCheck %s --enable-var-scope

// kvattn.merge becomes loops over buffers (the numerics are tested in
// test/Numerics/cpu-merge.mlir). Per row (b, h, i): the running maximum of
// the parts' lse in part order, the sum of exp(lse_n - max) that skips
// parts with lse = -inf, lse = max + log(sum) unless every part is empty,
// then per column the rescaled outputs (again skipping empty parts) divided
// by the sum, 0 for an empty row, cast to the result type.
// CHECK-LABEL: func.func @merge_bf16
// CHECK-SAME: (%[[OP:.*]]: tensor<2x1x2x3x4xf32>, %[[LP:.*]]: tensor<2x1x2x3xf32>)
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-DAG: %[[NPARTS:.*]] = arith.constant 2 : index
// CHECK: %[[OPB:.*]] = bufferization.to_buffer %[[OP]] read_only
// CHECK: %[[LPB:.*]] = bufferization.to_buffer %[[LP]] read_only
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<1x2x3x4xbf16>
// CHECK: %[[LSE:.*]] = memref.alloc() : memref<1x2x3xf32>
// CHECK: %[[MAX:.*]] = scf.for %[[N:.*]] = %{{.*}} to %[[NPARTS]] {{.*}} iter_args(%[[M:.*]] = %[[NEGINF]])
// CHECK:   %[[L:.*]] = memref.load %[[LPB]][%[[N]],
// CHECK:   arith.maximumf %[[M]], %[[L]]
// CHECK: %[[SUM:.*]] = scf.for {{.*}} iter_args(%[[S:.*]] = %[[ZERO]])
// CHECK:   %[[D:.*]] = arith.subf %{{.*}}, %[[MAX]]
// CHECK:   %[[E:.*]] = math.exp %[[D]]
// CHECK:   %[[ADD:.*]] = arith.addf %[[S]], %[[E]]
// CHECK:   %[[EMPTY:.*]] = arith.cmpf oeq, %{{.*}}, %[[NEGINF]]
// CHECK:   arith.select %[[EMPTY]], %[[S]], %[[ADD]]
// CHECK: %[[LOG:.*]] = math.log %[[SUM]]
// CHECK: %[[LSEV:.*]] = arith.addf %[[MAX]], %[[LOG]]
// CHECK: %[[NONE:.*]] = arith.cmpf oeq, %[[MAX]], %[[NEGINF]]
// CHECK: %[[LSER:.*]] = arith.select %[[NONE]], %[[NEGINF]], %[[LSEV]]
// CHECK: memref.store %[[LSER]], %[[LSE]]
// CHECK: memref.load %[[OPB]]
// CHECK: arith.divf %{{.*}}, %[[SUM]]
// CHECK: %[[V:.*]] = arith.select %{{.*}}, %[[ZERO]], %{{.*}} : f32
// CHECK: %[[T:.*]] = arith.truncf %[[V]] : f32 to bf16
// CHECK: memref.store %[[T]], %[[OUT]]
// CHECK: %[[OUTT:.*]] = bufferization.to_tensor %[[OUT]]
// CHECK: %[[LSET:.*]] = bufferization.to_tensor %[[LSE]]
// CHECK: return %[[OUTT]], %[[LSET]]
// CHECK-NOT: kvattn.merge
func.func @merge_bf16(%op: tensor<2x1x2x3x4xf32>, %lp: tensor<2x1x2x3xf32>) -> (tensor<1x2x3x4xbf16>, tensor<1x2x3xf32>) {
  %o, %l = kvattn.merge %op, %lp : tensor<2x1x2x3x4xf32>, tensor<2x1x2x3xf32> -> tensor<1x2x3x4xbf16>, tensor<1x2x3xf32>
  return %o, %l : tensor<1x2x3x4xbf16>, tensor<1x2x3xf32>
}

// -----

// f32 results need no cast; dynamic sizes are read from the operands.
// CHECK-LABEL: func.func @merge_dynamic_f32
// CHECK: %[[OPB:.*]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x?x4x?x8xf32>
// CHECK: %[[LPB:.*]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x?x4x?xf32>
// CHECK: %[[B:.*]] = memref.dim %[[OPB]], %{{.*}} : memref<?x?x4x?x8xf32>
// CHECK: %[[L:.*]] = memref.dim %[[OPB]], %{{.*}} : memref<?x?x4x?x8xf32>
// CHECK: memref.alloc(%[[B]], %[[L]]) : memref<?x4x?x8xf32>
// CHECK: %[[NPARTS:.*]] = memref.dim %[[LPB]], %{{.*}} : memref<?x?x4x?xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[NPARTS]]
// CHECK-NOT: arith.truncf
// CHECK-NOT: kvattn.merge
func.func @merge_dynamic_f32(%op: tensor<?x?x4x?x8xf32>, %lp: tensor<?x?x4x?xf32>) -> (tensor<?x4x?x8xf32>, tensor<?x4x?xf32>) {
  %o, %l = kvattn.merge %op, %lp : tensor<?x?x4x?x8xf32>, tensor<?x?x4x?xf32> -> tensor<?x4x?x8xf32>, tensor<?x4x?xf32>
  return %o, %l : tensor<?x4x?x8xf32>, tensor<?x4x?xf32>
}
