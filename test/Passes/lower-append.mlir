// RUN: kvattn-opt %s -split-input-file -kvattn-lower-append | FileCheck %s --enable-var-scope

// One insert per batch at its own position, carried through an scf.for so
// that it bufferizes in place.

// CHECK-LABEL: func @append
// CHECK-SAME:    %[[NEW:[^:]+]]: tensor<2x4x3x64xf16>
// CHECK-SAME:    %[[CACHE:[^:]+]]: tensor<2x4x128x64xf16>
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<2xi32>
// CHECK:         %[[RES:.*]] = scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[CACHE]])
// CHECK:           %[[P:.*]] = tensor.extract %[[POS]][%[[B]]] : tensor<2xi32>
// CHECK:           %[[PI:.*]] = arith.index_cast %[[P]] : i32 to index
// CHECK:           %[[ROWS:.*]] = tensor.extract_slice %[[NEW]][%[[B]], 0, 0, 0] [1, 4, 3, 64] [1, 1, 1, 1]
// CHECK:           %[[INS:.*]] = tensor.insert_slice %[[ROWS]] into %[[ACC]][%[[B]], 0, %[[PI]], 0] [1, 4, 3, 64] [1, 1, 1, 1]
// CHECK:           scf.yield %[[INS]]
// CHECK:         return %[[RES]]
func.func @append(%new: tensor<2x4x3x64xf16>, %cache: tensor<2x4x128x64xf16>, %pos: tensor<2xi32>)
    -> tensor<2x4x128x64xf16> {
  %c = kvattn.append %new into %cache at %pos : tensor<2x4x3x64xf16> into tensor<2x4x128x64xf16>, tensor<2xi32>
  return %c : tensor<2x4x128x64xf16>
}

// -----

// Dynamic sizes come from tensor.dim.

// CHECK-LABEL: func @append_dynamic
// CHECK-SAME:    %[[NEW:[^:]+]]: tensor<?x4x?x64xf32>
// CHECK:         scf.for
// CHECK:           %[[L:.*]] = tensor.dim %[[NEW]], %{{.*}}
// CHECK:           tensor.extract_slice %[[NEW]][%{{.*}}, 0, 0, 0] [1, 4, %[[L]], 64]
func.func @append_dynamic(%new: tensor<?x4x?x64xf32>, %cache: tensor<?x4x?x64xf32>, %pos: tensor<?xi64>)
    -> tensor<?x4x?x64xf32> {
  %c = kvattn.append %new into %cache at %pos : tensor<?x4x?x64xf32> into tensor<?x4x?x64xf32>, tensor<?xi64>
  return %c : tensor<?x4x?x64xf32>
}
