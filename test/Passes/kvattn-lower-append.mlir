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

// -----

// The paged form: one token at a time, its page read from the block table,
// the [H, D] row of update inserted rank-reduced into one row of one page;
// both loops carry the pages so that the writes bufferize in place.

// CHECK-LABEL: func @append_paged
// CHECK-SAME:    %[[NEW:[^:]+]]: tensor<2x4x3x64xf16>
// CHECK-SAME:    %[[PAGES:[^:]+]]: tensor<40x16x4x64xf16>
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<2xi32>
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<2x8xi64>
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:     %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG:     %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG:     %[[C16:.*]] = arith.constant 16 : index
// CHECK:         %[[RES:.*]] = scf.for %[[B:.*]] = %[[C0]] to %[[C2]] step %[[C1]] iter_args(%[[ACC:.*]] = %[[PAGES]])
// CHECK:           %[[P0:.*]] = tensor.extract %[[POS]][%[[B]]] : tensor<2xi32>
// CHECK:           %[[P0I:.*]] = arith.index_cast %[[P0]] : i32 to index
// CHECK:           %[[INNER:.*]] = scf.for %[[T:.*]] = %[[C0]] to %[[C3]] step %[[C1]] iter_args(%[[ACC2:.*]] = %[[ACC]])
// CHECK:             %[[P:.*]] = arith.addi %[[P0I]], %[[T]] : index
// CHECK:             %[[SLOT:.*]] = arith.divui %[[P]], %[[C16]] : index
// CHECK:             %[[ROW:.*]] = arith.remui %[[P]], %[[C16]] : index
// CHECK:             %[[PG:.*]] = tensor.extract %[[BT]][%[[B]], %[[SLOT]]] : tensor<2x8xi64>
// CHECK:             %[[PGI:.*]] = arith.index_cast %[[PG]] : i64 to index
// CHECK:             %[[TOK:.*]] = tensor.extract_slice %[[NEW]][%[[B]], 0, %[[T]], 0] [1, 4, 1, 64] [1, 1, 1, 1] : tensor<2x4x3x64xf16> to tensor<4x64xf16>
// CHECK:             %[[INS:.*]] = tensor.insert_slice %[[TOK]] into %[[ACC2]][%[[PGI]], %[[ROW]], 0, 0] [1, 1, 4, 64] [1, 1, 1, 1] : tensor<4x64xf16> into tensor<40x16x4x64xf16>
// CHECK:             scf.yield %[[INS]]
// CHECK:           scf.yield %[[INNER]]
// CHECK:         return %[[RES]]
func.func @append_paged(%new: tensor<2x4x3x64xf16>, %pages: tensor<40x16x4x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x8xi64>)
    -> tensor<40x16x4x64xf16> {
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x8xi64>) : tensor<2x4x3x64xf16> into tensor<40x16x4x64xf16>, tensor<2xi32>
  return %c : tensor<40x16x4x64xf16>
}

// -----

// Paged with dynamic sizes: the batch from the table, L from update, the
// page size from the pages.

// CHECK-LABEL: func @append_paged_dynamic
// CHECK-SAME:    %[[NEW:[^:]+]]: tensor<?x4x?x64xf32>
// CHECK-SAME:    %[[PAGES:[^:]+]]: tensor<?x?x4x64xf32>
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<?xi64>
// CHECK-SAME:    %[[BT:[^:]+]]: tensor<?x?xi32>
// CHECK-DAG:     %[[B:.*]] = tensor.dim %[[BT]], %{{.*}}
// CHECK-DAG:     %[[L:.*]] = tensor.dim %[[NEW]], %{{.*}}
// CHECK-DAG:     %[[PS:.*]] = tensor.dim %[[PAGES]], %{{.*}}
// CHECK:         scf.for %{{.*}} = %{{.*}} to %[[B]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[L]]
// CHECK:             arith.divui %{{.*}}, %[[PS]]
// CHECK:             tensor.insert_slice %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}, 0, 0] [1, 1, 4, 64] [1, 1, 1, 1] : tensor<4x64xf32> into tensor<?x?x4x64xf32>
func.func @append_paged_dynamic(%new: tensor<?x4x?x64xf32>, %pages: tensor<?x?x4x64xf32>, %pos: tensor<?xi64>, %bt: tensor<?x?xi32>)
    -> tensor<?x?x4x64xf32> {
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<?x?xi32>) : tensor<?x4x?x64xf32> into tensor<?x?x4x64xf32>, tensor<?xi64>
  return %c : tensor<?x?x4x64xf32>
}

// -----

// RoPE: the update rotated element by element (f32, cast to the cache's
// type) before the write; the record written token by token.
// CHECK-LABEL: func.func @rope
// CHECK:         %[[ROT:.*]] = tensor.generate
// CHECK:           math.cos
// CHECK:           math.sin
// CHECK:           arith.truncf %{{.*}} : f32 to f16
// CHECK:         %[[REC:.*]] = scf.for
// CHECK:           tensor.insert
// CHECK:         %[[K:.*]] = scf.for
// CHECK:           tensor.extract_slice %[[ROT]]
// CHECK:         return %[[K]], %[[REC]]
func.func @rope(%u: tensor<2x2x3x64xf16>, %c: tensor<2x2x16x64xf16>, %p: tensor<2xi32>, %r: tensor<2x16xi32>)
    -> (tensor<2x2x16x64xf16>, tensor<2x16xi32>) {
  %k, %rec = kvattn.append %u into %c at %p rope = <rotary_dim = 32, theta = 10000.0> rope_pos(%r : tensor<2x16xi32>)
      : tensor<2x2x3x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return %k, %rec : tensor<2x2x16x64xf16>, tensor<2x16xi32>
}

// -----

// skip_padding: the token's page is read as before, and a -1 page (a
// padding token) yields the pages unchanged instead of inserting its row.
// CHECK-LABEL: func @append_skip_padding
// CHECK-SAME:    %[[NEW:[^:]+]]: tensor<?x1x1x8xf32>
// CHECK-SAME:    %[[PAGES:[^:]+]]: tensor<?x4x1x8xf32>
// CHECK:         scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[PAGES]])
// CHECK:           scf.for {{.*}} iter_args(%[[ACC2:.*]] = %[[ACC]])
// CHECK:             %[[PG:.*]] = tensor.extract %{{.*}} : tensor<?x1xi32>
// CHECK:             %[[PAGE:.*]] = arith.index_cast %[[PG]] : i32 to index
// CHECK:             %[[IS:.*]] = arith.cmpi sge, %[[PAGE]], %{{.*}} : index
// CHECK:             %[[W:.*]] = scf.if %[[IS]]
// CHECK:               %[[ROW:.*]] = tensor.extract_slice %[[NEW]]
// CHECK:               %[[INS:.*]] = tensor.insert_slice %[[ROW]] into %[[ACC2]][%[[PAGE]],
// CHECK:               scf.yield %[[INS]]
// CHECK:             } else {
// CHECK:               scf.yield %[[ACC2]]
// CHECK:             scf.yield %[[W]]
func.func @append_skip_padding(%new: tensor<?x1x1x8xf32>, %pages: tensor<?x4x1x8xf32>,
                               %pos: tensor<?xi64>, %bt: tensor<?x1xi32>) -> tensor<?x4x1x8xf32> {
  %c = kvattn.append %new into %pages at %pos block_table(%bt : tensor<?x1xi32>) skip_padding : tensor<?x1x1x8xf32> into tensor<?x4x1x8xf32>, tensor<?xi64>
  return %c : tensor<?x4x1x8xf32>
}
