// RUN: kvattn-opt %s -split-input-file -kvattn-tile -cse | FileCheck %s --enable-var-scope

// Shared-prefix (cascade) attention tiled whole (the GPU pipeline):
// f32 parts [2, 1, Hq, T, ...]; the prefix program (B = 1, every packed row
// over the prefix K/V, kvattn.cascade = "prefix") stores part 0, the ragged
// suffix program part 1 (no split in either), and a merge program over the
// two parts (kvattn.cascade = "merge", B = 1: Hq x ceil(T / 64)) writes out
// and lse; the parts are freed after it.
// CHECK-LABEL: func @cascade
// CHECK-DAG: %[[OP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out_parts>} : memref<2x1x4x5x8xf32>
// CHECK-DAG: %[[LP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<lse_parts>} : memref<2x1x4x5xf32>
// CHECK: bufferization.to_buffer %arg1 read_only {kvattn.role = #kvattn.role<key>}
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (2, 1)
// CHECK: memref.subview %[[OP]][{{%c0(_[0-9]+)?}}, 0, 0, 0, 0] [1, 1, 4, 5, 8]
// CHECK: kvattn.tile.store
// CHECK: } {kvattn.cascade = "prefix", kvattn.tile_config = #kvattn.tile_config<kind = attention,
// CHECK: bufferization.to_buffer %arg3 read_only {kvattn.role = #kvattn.role<key>}
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (2, 3)
// CHECK: memref.subview %[[OP]][{{%c1(_[0-9]+)?}}, 0, 0, 0, 0] [1, 1, 4, 5, 8]
// CHECK: kvattn.tile.store
// CHECK: } {kvattn.tile_config = #kvattn.tile_config<kind = attention_varlen,
// CHECK-NOT: kvattn.tile.merge
// CHECK: %[[OUT:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out>} : memref<1x4x5x8xf32>
// CHECK: %[[LSE:.*]] = memref.alloc() {kvattn.role = #kvattn.role<lse>} : memref<1x4x5xf32>
// CHECK: scf.forall (%[[H:.*]], %{{.*}}) in (4, 1)
// CHECK: kvattn.tile.merge %[[OP]], %[[LP]][%c0, %[[H]], %{{.*}}] rows(%{{.*}}) into %[[OUT]] lse(%[[LSE]]
// CHECK: } {kvattn.cascade = "merge", kvattn.tile_config = #kvattn.tile_config<kind = merge, block_m = 64
// CHECK: memref.dealloc %[[OP]]
// CHECK: memref.dealloc %[[LP]]
// CHECK-NOT: kvattn.cascade %
func.func @cascade(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %pv: tensor<1x2x64x8xf32>, %k: tensor<3x2x10x16xf32>, %v: tensor<3x2x10x8xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) causal : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x8xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x8xf32> -> tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
  return %o, %lse : tensor<1x4x5x8xf32>, tensor<1x4x5xf32>
}

// -----

// A paged cascade: the prefix program reads the pool through the
// one-sequence table [1, prefix_max_pages] (prefix_pages expanded; role
// block_table) with kv_len = prefix_len, the suffix program through
// block_table; the outlining names the prefix program's table and length
// prefix_pages and prefix_len (test/Target/cascade-paged-manifest.mlir).
// CHECK-LABEL: func @paged
// CHECK: %[[T:.*]] = tensor.expand_shape %arg6 {{\[\[}}0, 1]] output_shape [1, 6] : tensor<6xi32> into tensor<1x6xi32>
// CHECK-DAG: bufferization.to_buffer %arg7 read_only {kvattn.role = #kvattn.role<kv_len>} : tensor<1xi32>
// CHECK-DAG: bufferization.to_buffer %[[T]] read_only {kvattn.role = #kvattn.role<block_table>} : tensor<1x6xi32>
// CHECK: } {kvattn.cascade = "prefix", kvattn.tile_config = #kvattn.tile_config<kind = attention,
// CHECK: bufferization.to_buffer %arg8 read_only {kvattn.role = #kvattn.role<block_table>} : tensor<3x3xi32>
// CHECK: } {kvattn.tile_config = #kvattn.tile_config<kind = attention_varlen,
// CHECK: } {kvattn.cascade = "merge", kvattn.tile_config = #kvattn.tile_config<kind = merge
func.func @paged(%q: tensor<1x4x8x32xbf16>, %k: tensor<16x16x2x32xbf16>, %v: tensor<16x16x2x32xbf16>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %pp: tensor<6xi32>, %pl: tensor<1xi32>, %bt: tensor<3x3xi32>) -> (tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) prefix_pages(%pp : tensor<6xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<3x3xi32>) causal : tensor<1x4x8x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16> -> tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>
}
