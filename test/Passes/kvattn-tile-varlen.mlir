// RUN: kvattn-opt %s -split-input-file -kvattn-tile -cse | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=16 split-kv=4" -cse | FileCheck %s --check-prefix=BM16 --enable-var-scope
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="split-kv=0" -cse | FileCheck %s --check-prefix=RT --enable-var-scope

// A ragged batch: 3 sequences, T = 19 packed rows, GQA 8/2 packed (G = 4),
// paged. Sequence b owns the query blocks [P(b), P(b+1)) with
// P(b) = floor(4 * q_start[b] / 64) + b, so the grid is (Hkv = 2,
// floor(4 * 19 / 64) + 3 = 4). Each program finds its sequence by binary
// search over q_start, reads the query and writes the results at batch 0
// and packed row 4 * q_start[b] + its block start, and runs the K/V loop of
// its sequence (batch b of the pages, kv_len, q_offset).
// CHECK-LABEL: func @varlen_paged_gqa
// CHECK-DAG: %[[Q:.*]] = bufferization.to_buffer %arg0 read_only {kvattn.role = #kvattn.role<query>}
// CHECK-DAG: %[[CU:.*]] = bufferization.to_buffer %arg2 read_only {kvattn.role = #kvattn.role<q_start>}
// CHECK: scf.forall (%[[H:.*]], %[[QB:.*]]) in (2, 4)
// CHECK: %[[SEQ:.*]]:2 = scf.while
// CHECK: memref.load %[[CU]]
// CHECK: arith.floordivsi
// CHECK: arith.cmpi sle, %{{.*}}, %[[QB]]
// CHECK: scf.yield
// CHECK: memref.load %[[CU]][%[[SEQ]]#0]
// CHECK: kvattn.tile.load_q %[[Q]][%c0, %{{.*}}, %[[ROW:.*]]] rows(%[[ROWS:.*]]) group = 4
// CHECK: kvattn.tile.qk %{{.*}}, %{{.*}}[%[[SEQ]]#0, %[[H]], %{{.*}}] pages(
// CHECK: kvattn.tile.mask %{{.*}}[%[[SEQ]]#0, {{.*}}] size(%[[ROWS]], %{{.*}}) kv_len(%{{.*}}) offsets({{.*}}) causal group = 4
// CHECK: kvattn.tile.store {{.*}} [%c0, %{{.*}}, %[[ROW]]] rows(%[[ROWS]]) group = 4
// CHECK: #kvattn.tile_config<kind = attention_varlen, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, group = 4>
// Split (docs/tile-program.md, "Split-KV of a ragged batch"): the grid's
// third dimension is the chunk; the parts [4, 1, Hq, T] are indexed like
// out, at batch 0 and the packed row; the merge runs over the packed rows
// (Hq = 8 x ceil(19 / 16) = 2, B = 1) and is marked kvattn.varlen_merge.
// BM16-LABEL: func @varlen_paged_gqa
// BM16: %[[OUTP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out_parts>} : memref<4x1x8x19x64xf32>
// BM16: %[[LSEP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<lse_parts>} : memref<4x1x8x19xf32>
// BM16: scf.forall ({{.*}}, %[[CHUNK:.*]]) in (2, 7, 4)
// BM16: memref.subview %[[OUTP]][%[[CHUNK]], 0, 0, 0, 0]
// BM16: memref.subview %[[LSEP]][%[[CHUNK]], 0, 0, 0]
// BM16: kvattn.tile.store {{.*}} [%c0, %{{.*}}, %{{.*}}] rows(%{{.*}}) group = 4
// BM16: #kvattn.tile_config<kind = attention_varlen, block_m = 16, block_n = 64, num_warps = 1, num_stages = 2, split_kv = 4, group = 4>
// BM16: scf.forall ({{.*}}) in (8, 2)
// BM16: kvattn.tile.merge %[[OUTP]], %[[LSEP]][%{{.*}}] rows(%{{.*}}) into %{{.*}} : memref<4x1x8x19x64xf32>, memref<4x1x8x19xf32>, memref<1x8x19x64xf16>
// BM16: kind = merge, {{.*}}kvattn.varlen_merge
func.func @varlen_paged_gqa(%q: tensor<1x8x19x64xf16>, %pages: tensor<64x16x2x64xf16>, %cu: tensor<4xi32>, %pos: tensor<3xi32>, %len: tensor<3xi32>, %bt: tensor<3x8xi32>) -> tensor<1x8x19x64xf16> {
  %o = kvattn.attention %q, %pages, %pages q_start(%cu : tensor<4xi32>) q_offset(%pos : tensor<3xi32>) kv_len(%len : tensor<3xi32>) block_table(%bt : tensor<3x8xi32>) causal
      : tensor<1x8x19x64xf16>, tensor<64x16x2x64xf16>, tensor<64x16x2x64xf16> -> tensor<1x8x19x64xf16>
  return %o : tensor<1x8x19x64xf16>
}

// -----

// MHA (no packing), plain K/V, run-time T and B: the grid is
// (Hq, floor(T / 64) + B) with B = dim(q_start) - 1.
// CHECK-LABEL: func @varlen_dynamic
// CHECK: %[[T:.*]] = memref.dim %{{.*}}, %c2 : memref<1x2x?x16xf32>
// CHECK: %[[N:.*]] = memref.dim %{{.*}}, %c0 : memref<?xi64>
// CHECK: %[[B:.*]] = arith.subi %[[N]], %c1
// CHECK: %[[FB:.*]] = arith.floordivsi %[[T]], %c64
// CHECK: %[[Y:.*]] = arith.addi %[[FB]], %[[B]]
// CHECK: scf.forall ({{.*}}) in (2, %[[Y]])
// CHECK: scf.while
// CHECK: #kvattn.tile_config<kind = attention_varlen,
// A run-time split: n from the ragged grid, P = 2 x (floor(T / 64) + B),
// n = clamp(min(ceil(2 x 132 / P), ceil(S / 64)), 1, 64); the parts
// [n, 1, Hq, T] and the grid's third dimension.
// RT-LABEL: func @varlen_dynamic
// RT: %[[T:.*]] = memref.dim %{{.*}}, %c2 : memref<1x2x?x16xf32>
// RT: %[[Y:.*]] = arith.addi
// RT: %[[P:.*]] = arith.muli %[[Y]], %c2
// RT: %[[PP:.*]] = arith.maxsi %[[P]], %c1
// RT: %[[WANT:.*]] = arith.ceildivsi %c264, %[[PP]]
// RT: %[[N:.*]] = arith.maxsi
// RT: memref.alloc(%[[N]], %[[T]]) {kvattn.role = #kvattn.role<out_parts>} : memref<?x1x2x?x16xf32>
// RT: scf.forall ({{.*}}) in (2, %[[Y]], %[[N]])
// RT: kind = attention_varlen, {{.*}}split_kv = 0, split_rule = <max = 64
// RT: scf.if
// RT: scf.forall ({{.*}}) in (2, %{{.*}})
// RT: kvattn.tile.merge
// RT: kvattn.varlen_merge
func.func @varlen_dynamic(%q: tensor<1x2x?x16xf32>, %k: tensor<?x2x?x16xf32>, %cu: tensor<?xi64>, %len: tensor<?xi64>) -> tensor<1x2x?x16xf32> {
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<?xi64>) kv_len(%len : tensor<?xi64>)
      : tensor<1x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32> -> tensor<1x2x?x16xf32>
  return %o : tensor<1x2x?x16xf32>
}

// -----

// ALiBi in a ragged split: each chunk knows its sequence, so it stores its
// part with the sequence's ALiBi constant added to the lse (tile.store with
// alibi(slopes, that sequence's reference distance)); the merge over the
// packed rows, which does not look a row's sequence up, takes the parts as
// they are (no alibi).
// BM16-LABEL: func @varlen_alibi
// BM16: %[[SLOPES:.*]] = bufferization.to_buffer %arg5 read_only {kvattn.role = #kvattn.role<alibi_slopes>}
// BM16: %[[OUTP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out_parts>} : memref<4x1x4x19x64xf32>
// BM16: %[[LSEP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<lse_parts>} : memref<4x1x4x19xf32>
// BM16: scf.forall ({{.*}}, %[[CHUNK:.*]]) in (2, 5, 4)
// BM16: %[[SEQ:.*]]:2 = scf.while
// BM16: kvattn.tile.mask %{{.*}}[%[[SEQ]]#0, {{.*}}] size({{.*}}) kv_len({{.*}}) offsets({{.*}}) alibi(%[[SLOPES]], %[[REF:.*]] : memref<4xf32>) causal group = 2
// BM16: %[[OPART:.*]] = memref.subview %[[OUTP]][%[[CHUNK]], 0, 0, 0, 0]
// BM16: %[[LPART:.*]] = memref.subview %[[LSEP]][%[[CHUNK]], 0, 0, 0]
// BM16: kvattn.tile.store state({{.*}}) into %[[OPART]] lse(%[[LPART]] : {{.*}}) alibi(%[[SLOPES]], %[[REF]] : memref<4xf32>) [%c0, {{.*}}] rows({{.*}}) group = 2
// BM16: #kvattn.tile_config<kind = attention_varlen, block_m = 16, block_n = 64, num_warps = 1, num_stages = 2, split_kv = 4, group = 2>
// BM16: scf.forall ({{.*}}) in (4, 2)
// BM16: kvattn.tile.merge %[[OUTP]], %[[LSEP]][%{{.*}}] rows(%{{.*}}) into %{{.*}} lse(%{{.*}} : memref<1x4x19xf32>) : memref<4x1x4x19x64xf32>, memref<4x1x4x19xf32>, memref<1x4x19x64xf16>
// BM16-NOT: alibi
// BM16: kind = merge, {{.*}}kvattn.varlen_merge
func.func @varlen_alibi(%q: tensor<1x4x19x64xf16>, %k: tensor<3x2x512x64xf16>, %cu: tensor<4xi32>, %pos: tensor<3xi32>, %len: tensor<3xi32>, %slopes: tensor<4xf32>) -> (tensor<1x4x19x64xf16>, tensor<1x4x19xf32>) {
  %o, %lse = kvattn.attention %q, %k, %k q_start(%cu : tensor<4xi32>) q_offset(%pos : tensor<3xi32>) kv_len(%len : tensor<3xi32>) alibi_slopes(%slopes : tensor<4xf32>) causal
      : tensor<1x4x19x64xf16>, tensor<3x2x512x64xf16>, tensor<3x2x512x64xf16> -> tensor<1x4x19x64xf16>, tensor<1x4x19xf32>
  return %o, %lse : tensor<1x4x19x64xf16>, tensor<1x4x19xf32>
}
