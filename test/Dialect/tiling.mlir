// RUN: kvattn-opt %s -split-input-file -transform-interpreter -canonicalize -verify-diagnostics | FileCheck %s
// kvattn.attention's TilingInterface through upstream
// transform.structured.tile_using_forall: tiles over [B, Hq, L] read their
// slices, the kv heads of their query heads and the whole key range, and
// move their query positions.

// GQA 8/2 (groups of 4 query heads), tiles of 1 batch x 4 heads x 16 rows:
// each tile holds one whole group, so it reads one kv head, h / 4, and its
// rows start at q_offset + 16 * j.

// CHECK-DAG:   #[[HEADS:.*]] = affine_map<(d0) -> (d0 * 4)>
// CHECK-DAG:   #[[ROWS:.*]] = affine_map<(d0) -> (d0 * 16)>
// CHECK-LABEL: func @gqa_offsets
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x8x32x64xf16>, %[[K:[^:]+]]: tensor<2x2x128x64xf16>, %[[V:[^:]+]]: tensor<2x2x128x64xf16>, %[[OFF:[^:]+]]: tensor<2xi32>, %[[LEN:[^:]+]]: tensor<2xi32>
// CHECK:         scf.forall (%[[B:.*]], %[[G:.*]], %[[J:.*]]) in (2, 2, 2) shared_outs(%[[OUT:.*]] = %{{.*}})
// CHECK:           %[[H:.*]] = affine.apply #[[HEADS]](%[[G]])
// CHECK:           %[[I:.*]] = affine.apply #[[ROWS]](%[[J]])
// CHECK:           %[[QS:.*]] = tensor.extract_slice %[[Q]][%[[B]], %[[H]], %[[I]], 0] [1, 4, 16, 64] [1, 1, 1, 1]
// The kv head of tile g is (4 g) floordiv 4 = g:
// CHECK:           %[[KS:.*]] = tensor.extract_slice %[[K]][%[[B]], %[[G]], 0, 0] [1, 1, 128, 64] [1, 1, 1, 1]
// CHECK:           %[[VS:.*]] = tensor.extract_slice %[[V]][%[[B]], %[[G]], 0, 0] [1, 1, 128, 64] [1, 1, 1, 1]
// CHECK:           %[[LS:.*]] = tensor.extract_slice %[[LEN]][%[[B]]] [1] [1]
// CHECK:           %[[OS:.*]] = tensor.extract_slice %[[OFF]][%[[B]]] [1] [1]
// CHECK:           %[[R:.*]] = arith.index_cast %[[I]] : index to i32
// CHECK:           %[[SPLAT:.*]] = tensor.splat %[[R]] : tensor<1xi32>
// CHECK:           %[[SHIFTED:.*]] = arith.addi %[[OS]], %[[SPLAT]] : tensor<1xi32>
// CHECK:           %[[T:.*]] = kvattn.attention %[[QS]], %[[KS]], %[[VS]] q_offset(%[[SHIFTED]] : tensor<1xi32>) kv_len(%[[LS]] : tensor<1xi32>) causal : tensor<1x4x16x64xf16>, tensor<1x1x128x64xf16>, tensor<1x1x128x64xf16> -> tensor<1x4x16x64xf16>
// CHECK:           tensor.parallel_insert_slice %[[T]] into %[[OUT]][%[[B]], %[[H]], %[[I]], 0] [1, 4, 16, 64] [1, 1, 1, 1]
func.func @gqa_offsets(%q: tensor<2x8x32x64xf16>, %k: tensor<2x2x128x64xf16>,
    %v: tensor<2x2x128x64xf16>, %off: tensor<2xi32>, %len: tensor<2xi32>)
    -> tensor<2x8x32x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%off : tensor<2xi32>) kv_len(%len : tensor<2xi32>) causal
      : tensor<2x8x32x64xf16>, tensor<2x2x128x64xf16>, tensor<2x2x128x64xf16> -> tensor<2x8x32x64xf16>
  return %o : tensor<2x8x32x64xf16>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 4, 16]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Tiles of 2 query heads inside groups of 4 read one kv head each; the lse
// result is tiled with the output. Untiled rows keep q_offset as it is.

// CHECK-DAG:   #[[HEADS:.*]] = affine_map<(d0) -> (d0 * 2)>
// CHECK-DAG:   #[[KV:.*]] = affine_map<(d0) -> (d0 floordiv 2)>
// CHECK-LABEL: func @heads_inside_group_lse
// CHECK:         scf.forall (%[[T:.*]]) in (4) shared_outs(%[[OUT:.*]] = %{{.*}}, %[[LSE:.*]] = %{{.*}})
// CHECK:           %[[H:.*]] = affine.apply #[[HEADS]](%[[T]])
// CHECK:           %[[G:.*]] = affine.apply #[[KV]](%[[T]])
// CHECK:           tensor.extract_slice %{{.*}}[0, %[[H]], 0, 0] [1, 2, 4, 32] [1, 1, 1, 1]
// CHECK:           tensor.extract_slice %{{.*}}[0, %[[G]], 0, 0] [1, 1, 16, 32] [1, 1, 1, 1]
// CHECK-NOT:       arith.addi
// CHECK:           %[[O:.*]], %[[L:.*]] = kvattn.attention {{.*}} q_offset(%{{.*}} : tensor<1xi64>) causal window = 8 : tensor<1x2x4x32xbf16>, tensor<1x1x16x32xbf16>, tensor<1x1x16x32xbf16> -> tensor<1x2x4x32xbf16>, tensor<1x2x4xf32>
// CHECK:           tensor.parallel_insert_slice %[[O]] into %[[OUT]][0, %[[H]], 0, 0] [1, 2, 4, 32]
// CHECK:           tensor.parallel_insert_slice %[[L]] into %[[LSE]][0, %[[H]], 0] [1, 2, 4]
func.func @heads_inside_group_lse(%q: tensor<1x8x4x32xbf16>, %k: tensor<1x2x16x32xbf16>,
    %v: tensor<1x2x16x32xbf16>, %off: tensor<1xi64>)
    -> (tensor<1x8x4x32xbf16>, tensor<1x8x4xf32>) {
  %o, %lse = kvattn.attention %q, %k, %v q_offset(%off : tensor<1xi64>) causal window = 8
      : tensor<1x8x4x32xbf16>, tensor<1x2x16x32xbf16>, tensor<1x2x16x32xbf16>
      -> tensor<1x8x4x32xbf16>, tensor<1x8x4xf32>
  return %o, %lse : tensor<1x8x4x32xbf16>, tensor<1x8x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 2, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Explicit positions, key validity and a [L, S] mask: q_pos and the mask
// are cut along the rows, key validity and k_pos along the batch only.

// CHECK-LABEL: func @explicit_positions_mask
// CHECK:         scf.forall (%[[B:.*]], %[[J:.*]]) in (2, 2)
// CHECK:           %[[I:.*]] = affine.apply #{{.*}}(%[[J]])
// CHECK-DAG:       %[[QP:.*]] = tensor.extract_slice %{{.*}}[%[[B]], %[[I]]] [1, 4] [1, 1] : tensor<2x8xi32> to tensor<1x4xi32>
// CHECK-DAG:       %[[KP:.*]] = tensor.extract_slice %{{.*}}[%[[B]], 0] [1, 12] [1, 1] : tensor<2x12xi32> to tensor<1x12xi32>
// CHECK-DAG:       %[[KV:.*]] = tensor.extract_slice %{{.*}}[%[[B]], 0] [1, 12] [1, 1] : tensor<2x12xi1> to tensor<1x12xi1>
// CHECK-DAG:       %[[M:.*]] = tensor.extract_slice %{{.*}}[%[[I]], 0] [4, 12] [1, 1] : tensor<8x12xf32> to tensor<4x12xf32>
// CHECK:           kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_pos(%[[QP]] : tensor<1x4xi32>) k_pos(%[[KP]] : tensor<1x12xi32>) key_valid(%[[KV]] : tensor<1x12xi1>) mask(%[[M]] : tensor<4x12xf32>) causal : tensor<1x2x4x16xf32>
func.func @explicit_positions_mask(%q: tensor<2x2x8x16xf32>, %k: tensor<2x2x12x16xf32>,
    %v: tensor<2x2x12x16xf32>, %qp: tensor<2x8xi32>, %kp: tensor<2x12xi32>,
    %valid: tensor<2x12xi1>, %m: tensor<8x12xf32>) -> tensor<2x2x8x16xf32> {
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x8xi32>) k_pos(%kp : tensor<2x12xi32>)
      key_valid(%valid : tensor<2x12xi1>) mask(%m : tensor<8x12xf32>) causal
      : tensor<2x2x8x16xf32>, tensor<2x2x12x16xf32>, tensor<2x2x12x16xf32> -> tensor<2x2x8x16xf32>
  return %o : tensor<2x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 0, 4]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Paged caches are shared by every sequence: a batch tile reads the whole
// page pool and its own rows of the block table.

// CHECK-LABEL: func @paged_batch_tiles
// CHECK:         scf.forall (%[[B:.*]]) in (3)
// CHECK:           %[[BT:.*]] = tensor.extract_slice %{{.*}}[%[[B]], 0] [1, 4] [1, 1] : tensor<3x4xi32> to tensor<1x4xi32>
// CHECK:           kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset({{.*}}) kv_len({{.*}}) block_table(%[[BT]] : tensor<1x4xi32>) causal : tensor<1x4x2x64xf16>, tensor<16x8x2x64xf16>, tensor<16x8x2x64xf16> -> tensor<1x4x2x64xf16>
func.func @paged_batch_tiles(%q: tensor<3x4x2x64xf16>, %kp: tensor<16x8x2x64xf16>,
    %vp: tensor<16x8x2x64xf16>, %off: tensor<3xi32>, %len: tensor<3xi32>,
    %bt: tensor<3x4xi32>) -> tensor<3x4x2x64xf16> {
  %o = kvattn.attention %q, %kp, %vp q_offset(%off : tensor<3xi32>) kv_len(%len : tensor<3xi32>)
      block_table(%bt : tensor<3x4xi32>) causal
      : tensor<3x4x2x64xf16>, tensor<16x8x2x64xf16>, tensor<16x8x2x64xf16> -> tensor<3x4x2x64xf16>
  return %o : tensor<3x4x2x64xf16>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A head tile that splits a GQA group across tiles is refused.

func.func @head_tile_splits_group(%q: tensor<1x8x4x32xf16>, %k: tensor<1x2x16x32xf16>,
    %v: tensor<1x2x16x32xf16>) -> tensor<1x8x4x32xf16> {
  // expected-note @+4 {{when applied to this op}}
  // expected-error @+3 {{a tile of query heads must hold whole GQA groups or lie inside one (tile size dividing or a multiple of Hq / Hkv = 4, and dividing Hq = 8)}}
  // expected-error @+2 {{faild to tile operation}}
  // expected-error @+1 {{failed to generate tiling loops}}
  %o = kvattn.attention %q, %k, %v
      : tensor<1x8x4x32xf16>, tensor<1x2x16x32xf16>, tensor<1x2x16x32xf16> -> tensor<1x8x4x32xf16>
  return %o : tensor<1x8x4x32xf16>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    // expected-error @+1 {{failed to apply}}
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 3, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// The latent form (DeepSeek MLA): tiles over batches and query heads read
// the one latent cache (no value slice) and keep value_dim; out's tiles are
// Dv = 512 wide.
// CHECK-LABEL: func @latent_form
// CHECK:         scf.forall (%[[B:.*]], %[[H:.*]]) in (2, 8)
// CHECK:           %[[KS:.*]] = tensor.extract_slice %{{.*}}[%[[B]], %{{.*}}, 0, 0] [1, 1, 64, 576] [1, 1, 1, 1]
// CHECK:           kvattn.attention %{{.*}}, %[[KS]] value_dim = 512 kv_len(%{{.*}} : tensor<1xi32>) : tensor<1x2x1x576xbf16>, tensor<1x1x64x576xbf16> -> tensor<1x2x1x512xbf16>
// CHECK:           tensor.parallel_insert_slice %{{.*}} into %{{.*}}[%[[B]], %{{.*}}, 0, 0] [1, 2, 1, 512] [1, 1, 1, 1]
func.func @latent_form(%q: tensor<2x16x1x576xbf16>, %ckv: tensor<2x1x64x576xbf16>,
    %len: tensor<2xi32>) -> tensor<2x16x1x512xbf16> {
  %o = kvattn.attention %q, %ckv value_dim = 512 kv_len(%len : tensor<2xi32>)
      : tensor<2x16x1x576xbf16>, tensor<2x1x64x576xbf16> -> tensor<2x16x1x512xbf16>
  return %o : tensor<2x16x1x512xbf16>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["kvattn.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 2]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}
