// kvattn.attention tiled by upstream transform.structured.tile_using_forall
// (its TilingInterface) computes what the untiled op computes: the
// reference evaluation of the tiled program (scf.forall over slices) is
// bit-identical to the untiled one, and the tiled program compiled for the
// CPU matches the reference. Seeded inputs with distinct values: a tile
// reading the wrong kv head, keeping the untiled q_offset or slicing the
// mask on the wrong axis changes the result.
//
// DEFINE: %{tile} = kvattn-opt %s --transform-preload-library=transform-library-paths=%S/Inputs/tile-attention.mlir
// RUN: rm -rf %t && mkdir -p %t
//
// GQA 8/2, causal over an append at positions 3 and 9 (q_offset moves
// with each row tile):
// RUN: %{tile} --transform-interpreter=entry-point=tile_groups -o %t/groups.mlir
// RUN: FileCheck %s --check-prefix=FORALL --input-file=%t/groups.mlir
// RUN: kvattn-run %s --entry=gqa_causal --input 3=3,9 --dump-outputs %t/a0
// RUN: kvattn-run %t/groups.mlir --entry=gqa_causal --input 3=3,9 --dump-outputs %t/a1
// RUN: cmp %t/a0/out0.npy %t/a1/out0.npy
// RUN: cmp %t/a0/out1.npy %t/a1/out1.npy
// RUN: kvattn-run %t/groups.mlir --entry=gqa_causal --input 3=3,9 --target=cpu --check | FileCheck %s
// FORALL: scf.forall
// FORALL: kvattn.attention {{.*}} -> tensor<1x4x4x16xf32>, tensor<1x4x4xf32>
//
// Heads inside a group, partial row tiles, a sliding window and a float
// [L, S] mask sliced along the rows:
// RUN: %{tile} --transform-interpreter=entry-point=tile_inside_group -o %t/inside.mlir
// RUN: kvattn-run %s --entry=window_mask --dump-outputs %t/b0
// RUN: kvattn-run %t/inside.mlir --entry=window_mask --dump-outputs %t/b1
// RUN: cmp %t/b0/out0.npy %t/b1/out0.npy
// RUN: kvattn-run %t/inside.mlir --entry=window_mask --target=cpu --check | FileCheck %s
//
// Paged: one sequence per tile, each through its rows of the block table.
// RUN: %{tile} --transform-interpreter=entry-point=tile_batch -o %t/paged.mlir
// RUN: kvattn-run %s --entry=paged --dump-outputs %t/c0
// RUN: kvattn-run %t/paged.mlir --entry=paged --dump-outputs %t/c1
// RUN: cmp %t/c0/out0.npy %t/c1/out0.npy
// RUN: kvattn-run %t/paged.mlir --entry=paged --target=cpu --check | FileCheck %s
// CHECK: {{^PASS$}}

func.func @gqa_causal(%q: tensor<2x8x8x16xf32>, %k: tensor<2x2x20x16xf32>,
    %v: tensor<2x2x20x16xf32>, %pos: tensor<2xi32>)
    -> (tensor<2x8x8x16xf32>, tensor<2x8x8xf32>) {
  %c8 = arith.constant dense<8> : tensor<2xi32>
  %len = arith.addi %pos, %c8 : tensor<2xi32>
  %o, %lse = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) causal
      : tensor<2x8x8x16xf32>, tensor<2x2x20x16xf32>, tensor<2x2x20x16xf32>
      -> tensor<2x8x8x16xf32>, tensor<2x8x8xf32>
  return %o, %lse : tensor<2x8x8x16xf32>, tensor<2x8x8xf32>
}

func.func @window_mask(%q: tensor<1x8x7x16xf32>, %k: tensor<1x2x12x16xf32>,
    %v: tensor<1x2x12x16xf32>, %m: tensor<7x12xf32>) -> tensor<1x8x7x16xf32> {
  %off = arith.constant dense<5> : tensor<1xi64>
  %o = kvattn.attention %q, %k, %v q_offset(%off : tensor<1xi64>) mask(%m : tensor<7x12xf32>) causal window = 4
      : tensor<1x8x7x16xf32>, tensor<1x2x12x16xf32>, tensor<1x2x12x16xf32> -> tensor<1x8x7x16xf32>
  return %o : tensor<1x8x7x16xf32>
}

func.func @paged(%q: tensor<3x4x2x16xf32>, %kp: tensor<8x4x2x16xf32>,
    %vp: tensor<8x4x2x16xf32>) -> tensor<3x4x2x16xf32> {
  %bt = arith.constant dense<[[5, 2, -1], [0, 7, 3], [6, -1, -1]]> : tensor<3x3xi32>
  %len = arith.constant dense<[7, 12, 3]> : tensor<3xi32>
  %pos = arith.constant dense<[5, 10, 1]> : tensor<3xi32>
  %o = kvattn.attention %q, %kp, %vp q_offset(%pos : tensor<3xi32>) kv_len(%len : tensor<3xi32>)
      block_table(%bt : tensor<3x3xi32>) causal
      : tensor<3x4x2x16xf32>, tensor<8x4x2x16xf32>, tensor<8x4x2x16xf32> -> tensor<3x4x2x16xf32>
  return %o : tensor<3x4x2x16xf32>
}
