// RUN: kvattn-opt %s -split-input-file -kvattn-tile -cse | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=16 block-n=32 num-warps=8 num-stages=3 stats=true" -cse | FileCheck %s --check-prefix=OPTS
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="split-kv=4" -cse | FileCheck %s --check-prefix=SPLIT
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="split-kv=0" -cse | FileCheck %s --check-prefix=AUTO
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0" -cse | FileCheck %s --check-prefix=AUTOTILE
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0 split-kv=0 split-warps-per-sm=8 split-min-keys=512" -cse | FileCheck %s --check-prefix=GPUSPLIT
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=8 split-kv=0 split-warps-per-sm=8" -cse | FileCheck %s --check-prefix=SMALLBM
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0 max-warp-rows=32" -cse | FileCheck %s --check-prefix=WIDE
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0 max-warp-rows=32 shared-memory-per-sm=65000" -cse | FileCheck %s --check-prefix=NARROW
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0 wgmma=true" -cse | FileCheck %s --check-prefix=WGMMA
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0 max-warp-rows=32 tensor-cores=true shared-memory-per-sm=167936" -cse | FileCheck %s --check-prefix=TC80
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 block-n=0 max-warp-rows=32 tensor-cores=true shared-memory-per-sm=102400" -cse | FileCheck %s --check-prefix=TC89

// Offset form, causal, GQA 8/2: one program per (batch x head, query
// block); the visible range comes from the block's last query position and
// the full range from its first; partial blocks alone are masked.

// CHECK-LABEL: func @offsets_causal_gqa
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x8x100x64xf16>
// CHECK-DAG:     %[[QB:.*]] = bufferization.to_buffer %[[Q]] read_only
// CHECK-DAG:     %[[QO:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<q_offset>} : tensor<2xi32> to memref<2xi32>
// CHECK-DAG:     %[[OUT:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out>} : memref<2x8x100x64xf16>
// CHECK:         scf.forall (%[[BH:.*]], %[[QBLK:.*]]) in (16, 2) {
// CHECK-NEXT:      memref.alloca_scope
// CHECK-DAG:         %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:         %[[C4:.*]] = arith.constant 4 : index
// CHECK:             %[[B:.*]] = arith.divui %[[BH]], %[[C8]]
// CHECK:             %[[H:.*]] = arith.remui %[[BH]], %[[C8]]
// CHECK:             %[[G:.*]] = arith.divui %[[H]], %[[C4]]
// CHECK:             %[[QSTART:.*]] = arith.muli %[[QBLK]], %{{.*}}
// CHECK:             %[[ROWS:.*]] = arith.minsi
// CHECK:             %[[OFF:.*]] = memref.load %[[QO]][%[[B]]]
// CHECK:             %[[QOFF:.*]] = arith.index_cast %[[OFF]] : i32 to index
// CHECK:             %[[QFIRST:.*]] = arith.addi %[[QOFF]], %[[QSTART]]
// CHECK:             %[[FULLHI:.*]] = arith.floordivsi
// CHECK:             %[[NHI:.*]] = arith.maxsi
// CHECK:             kvattn.tile.init
// CHECK:             kvattn.tile.load_q %[[QB]][%[[B]], %[[H]], %[[QSTART]]] rows(%[[ROWS]])
// num-stages = 2: the first block is announced before the loop, each next
// one after the current block's scores (size 0 past the last block).
// CHECK:             kvattn.tile.prefetch %{{.*}}[%[[B]], %[[G]], %{{.*}}] size(%{{.*}})
// CHECK:             scf.for %[[KB:.*]] = %{{.*}} to %[[NHI]]
// CHECK:               %[[KSTART:.*]] = arith.muli %[[KB]]
// CHECK:               kvattn.tile.qk %{{.*}}, %{{.*}}[%[[B]], %[[G]], %[[KSTART]]] size(%[[ROWS]], %{{.*}}) into %{{.*}} scale = 1.250000e-01 :
// CHECK:               %[[NEXT:.*]] = arith.addi %[[KB]], %c1
// CHECK:               %[[HAS:.*]] = arith.cmpi slt, %[[NEXT]], %[[NHI]]
// CHECK:               %[[NCOLS:.*]] = arith.select %[[HAS]]
// CHECK:               kvattn.tile.prefetch %{{.*}}[%[[B]], %[[G]], %{{.*}}] size(%[[NCOLS]])
// CHECK:               %[[BELOW:.*]] = arith.cmpi slt, %[[KB]], %[[FULLHI]]
// CHECK:               %[[FULL:.*]] = arith.andi %{{.*}}, %[[BELOW]]
// CHECK:               %[[PARTIAL:.*]] = arith.xori %[[FULL]]
// CHECK:               scf.if %[[PARTIAL]] {
// CHECK:                 kvattn.tile.mask %{{.*}}[%[[B]], %[[H]], %[[QSTART]], %[[KSTART]]] size(%[[ROWS]], %{{.*}}) kv_len(%{{.*}}) offsets(%[[QFIRST]], %{{.*}}) causal :
// CHECK:               }
// The update is told which blocks are full (it may then skip its p != 0
// tests).
// CHECK:               kvattn.tile.softmax_update %{{.*}}, %{{.*}}[%[[B]], %[[G]], %[[KSTART]]] all_allowed(%[[FULL]])
// CHECK:             kvattn.tile.store state({{.*}}) into %[[OUT]] [%[[B]], %[[H]], %[[QSTART]]] rows(%[[ROWS]])
// CHECK:         } {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>}
// CHECK:         %[[RES:.*]] = bufferization.to_tensor %[[OUT]] restrict writable
// CHECK:         return %[[RES]]

// With split-kv = 4 the grid gets a chunk dimension, each chunk loops over
// its share of the visible blocks and stores a partial state; a second
// program (kind = merge, one instance per (batch x head, query block))
// merges the parts in chunk order into out.
// SPLIT-LABEL: func @offsets_causal_gqa
// SPLIT-DAG:     %[[OUT:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out>} : memref<2x8x100x64xf16>
// SPLIT-DAG:     %[[OP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<out_parts>} : memref<4x2x8x100x64xf32>
// SPLIT-DAG:     %[[LP:.*]] = memref.alloc() {kvattn.role = #kvattn.role<lse_parts>} : memref<4x2x8x100xf32>
// SPLIT:         scf.forall (%{{.*}}, %{{.*}}, %[[C:.*]]) in (16, 2, 4)
// SPLIT:           %[[CHUNK:.*]] = arith.ceildivsi %{{.*}}, %c4
// SPLIT:           arith.muli %[[C]], %[[CHUNK]]
// SPLIT:           scf.for
// SPLIT-DAG:       %[[OV:.*]] = memref.subview %[[OP]][%[[C]], 0, 0, 0, 0] [1, 2, 8, 100, 64] [1, 1, 1, 1, 1]
// SPLIT-DAG:       %[[LV:.*]] = memref.subview %[[LP]][%[[C]], 0, 0, 0] [1, 2, 8, 100] [1, 1, 1, 1]
// SPLIT:           kvattn.tile.store state({{.*}}) into %[[OV]] lse(%[[LV]] : {{.*}})
// SPLIT:         #kvattn.tile_config<kind = attention, {{.*}} split_kv = 4>
// SPLIT:         scf.forall (%[[BH:.*]], %[[QB:.*]]) in (16, 2) {
// SPLIT:           %[[B:.*]] = arith.divui %[[BH]]
// SPLIT:           %[[H:.*]] = arith.remui %[[BH]]
// SPLIT:           %[[START:.*]] = arith.muli %[[QB]]
// SPLIT:           kvattn.tile.merge %[[OP]], %[[LP]][%[[B]], %[[H]], %[[START]]] rows(%{{.*}}) into %[[OUT]] :
// SPLIT:         #kvattn.tile_config<kind = merge, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>
// SPLIT:         memref.dealloc %[[OP]]
// SPLIT:         memref.dealloc %[[LP]]
// SPLIT:         %[[RES:.*]] = bufferization.to_tensor %[[OUT]]
// SPLIT:         return %[[RES]]

// split-kv = 0 chooses: 2 x 8 heads x 2 query blocks = 32 programs want
// ceil(2 x 132 / 32) = 9 chunks for the default 132 multiprocessors, but
// S = 356 has only 6 blocks of 64: 6 chunks. Dynamic shapes split at run
// time (split_kv = 0 and the rule the runtime computes the count from).
// AUTO-LABEL: func @offsets_causal_gqa
// AUTO:         scf.forall ({{.*}}) in (16, 2, 6)
// AUTO:         #kvattn.tile_config<kind = attention, {{.*}}, split_kv = 6>
// AUTO-LABEL: func @explicit_window_softcap_lse
// AUTO:         #kvattn.tile_config<kind = attention, {{.*}}, split_kv = 0, group = 4, split_rule = <max = 64, {{.*}}>>

// OPTS-LABEL: func @offsets_causal_gqa
// OPTS:         scf.forall ({{.*}}) in (16, 7)
// OPTS:           memref.get_global @kvattn_tile_stats : memref<4xi64>
// OPTS-COUNT-4:   memref.atomic_rmw addi
// OPTS:           memref.alloca() : memref<16x32xf32>
// OPTS:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 8, num_stages = 3>}
func.func @offsets_causal_gqa(%q: tensor<2x8x100x64xf16>, %k: tensor<2x2x356x64xf16>,
    %v: tensor<2x2x356x64xf16>, %pos: tensor<2xi32>, %len: tensor<2xi32>) -> tensor<2x8x100x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) causal
      : tensor<2x8x100x64xf16>, tensor<2x2x356x64xf16>, tensor<2x2x356x64xf16> -> tensor<2x8x100x64xf16>
  return %o : tensor<2x8x100x64xf16>
}

// -----

// Explicit positions with a window, softcap and lse: no full blocks (the
// full range is empty), every block below kv_len = S is loaded and masked by
// comparing the position buffers.

// CHECK-LABEL: func @explicit_window_softcap_lse
// CHECK-DAG:     %[[QP:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<q_pos>} : tensor<2x4xi64> to memref<2x4xi64>
// CHECK-DAG:     %[[KP:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<k_pos>} : tensor<2x?xi64> to memref<2x?xi64>
// CHECK-DAG:     %[[LSE:.*]] = memref.alloc() {kvattn.role = #kvattn.role<lse>} : memref<2x8x4xf32>
// CHECK:         scf.forall
// CHECK:           %[[S:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<2x2x?x64xf16>
// CHECK:           %[[NHI:.*]] = arith.ceildivsi %[[S]]
// CHECK:           scf.for %[[KB:.*]] = %[[C0:.*]] to %{{.*}}
// CHECK:             kvattn.tile.qk {{.*}} scale = 1.250000e-01 softcap = 3.000000e+01
// CHECK:             arith.cmpi slt, %[[KB]], %[[C0]]
// CHECK:             scf.if
// CHECK:               kvattn.tile.mask {{.*}} kv_len(%[[S]]) positions(%[[QP]], %[[KP]] : memref<2x4xi64>, memref<2x?xi64>) causal window = 16
// CHECK:           kvattn.tile.store {{.*}} lse(%[[LSE]] : memref<2x8x4xf32>)
// CHECK:         %[[O:.*]] = bufferization.to_tensor
// CHECK:         %[[L:.*]] = bufferization.to_tensor %[[LSE]]
// CHECK:         return %[[O]], %[[L]]
func.func @explicit_window_softcap_lse(%q: tensor<2x8x4x64xf16>, %k: tensor<2x2x?x64xf16>,
    %v: tensor<2x2x?x32xf16>, %qp: tensor<2x4xi64>, %kp: tensor<2x?xi64>)
    -> (tensor<2x8x4x32xf16>, tensor<2x8x4xf32>) {
  %o, %l = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x4xi64>) k_pos(%kp : tensor<2x?xi64>)
      causal window = 16 softcap = 30.0
      : tensor<2x8x4x64xf16>, tensor<2x2x?x64xf16>, tensor<2x2x?x32xf16> -> tensor<2x8x4x32xf16>, tensor<2x8x4xf32>
  return %o, %l : tensor<2x8x4x32xf16>, tensor<2x8x4xf32>
}

// -----

// A sliding window bounds the range from below (from the first query
// position) and the full range from below (from the last).

// CHECK-LABEL: func @window_offsets
// CHECK:         scf.forall
// CHECK:           %[[W:.*]] = arith.constant 128 : index
// CHECK:           arith.subi %{{.*}}, %[[W]]
// CHECK:           %[[FULLLO:.*]] = arith.ceildivsi
// CHECK:           %[[NLO:.*]] = arith.floordivsi
// CHECK:           scf.for %[[KB:.*]] = %[[NLO]] to
// CHECK:             arith.cmpi sge, %[[KB]], %[[FULLLO]]
// CHECK:             kvattn.tile.mask {{.*}} causal window = 128
func.func @window_offsets(%q: tensor<1x4x16x32xbf16>, %k: tensor<1x4x1024x32xbf16>,
    %v: tensor<1x4x1024x32xbf16>, %pos: tensor<1xi64>) -> tensor<1x4x16x32xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi64>) causal window = 128
      : tensor<1x4x16x32xbf16>, tensor<1x4x1024x32xbf16>, tensor<1x4x1024x32xbf16> -> tensor<1x4x16x32xbf16>
  return %o : tensor<1x4x16x32xbf16>
}

// -----

// Key validity and a general mask make every block partial (the full range
// is empty), and are passed to the mask.

// CHECK-LABEL: func @validity_and_mask
// CHECK:         kvattn.tile.mask {{.*}} key_valid(%{{.*}} : memref<1x64xi1>) mask(%{{.*}} : memref<1x1x8x64xf32>) :
// CHECK-NOT:     all_allowed
// CHECK:         kvattn.tile.softmax_update {{.*}} key_valid(%{{.*}} : memref<1x64xi1>) size
func.func @validity_and_mask(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x64x16xf32>,
    %v: tensor<1x2x64x16xf32>, %valid: tensor<1x64xi1>, %m: tensor<1x1x8x64xf32>) -> tensor<1x2x8x16xf32> {
  %o = kvattn.attention %q, %k, %v key_valid(%valid : tensor<1x64xi1>) mask(%m : tensor<1x1x8x64xf32>)
      : tensor<1x2x8x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32> -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// GQA packing: decode (L = 2 < block-m) with 8 query heads over 2 kv heads.
// One program per (batch, kv head) takes the 4 heads x 2 rows of its group;
// packed row t is query row t / 4 of head 4 * kv_head + t % 4. The offset
// positions of the mask start at query row 0 (q_base = q_offset[b]).

// CHECK-LABEL: func @decode_packed
// CHECK:         scf.forall (%[[BH:.*]], %[[QBLK:.*]]) in (6, 1) {
// CHECK:           %[[C2:.*]] = arith.constant 2 : index
// CHECK:           %[[B:.*]] = arith.divui %[[BH]], %[[C2]]
// CHECK:           %[[KVH:.*]] = arith.remui %[[BH]], %[[C2]]
// CHECK:           %[[C4:.*]] = arith.constant 4 : index
// CHECK:           %[[H0:.*]] = arith.muli %[[KVH]], %[[C4]]
// CHECK:           %[[OFF:.*]] = memref.load %{{.*}}[%[[B]]]
// CHECK:           %[[QOFF:.*]] = arith.index_cast %[[OFF]]
// CHECK:           kvattn.tile.load_q %{{.*}}[%[[B]], %[[H0]], %{{.*}}] rows(%{{.*}}) group = 4 into
// CHECK:             kvattn.tile.qk %{{.*}}, %{{.*}}[%[[B]], %[[KVH]], %{{.*}}]
// CHECK:               kvattn.tile.mask %{{.*}}[%[[B]], %[[H0]], %{{.*}}, %{{.*}}] size({{.*}}) kv_len(%{{.*}}) offsets(%[[QOFF]], %{{.*}}) causal group = 4 :
// CHECK:           kvattn.tile.store state({{.*}}) into %{{.*}} [%[[B]], %[[H0]], %{{.*}}] rows(%{{.*}}) group = 4 :
// CHECK:         } {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, group = 4>}
// OPTS-LABEL: func @decode_packed
// OPTS:         scf.forall ({{.*}}) in (6, 1)
// SPLIT-LABEL: func @decode_packed
// SPLIT:        scf.forall ({{.*}}) in (6, 1, 4)
// 6 programs want ceil(2 x 132 / 6) = 44 chunks, under the cap of 64 and
// the 64 blocks of 4096 keys.
// AUTO-LABEL: func @decode_packed
// AUTO:         scf.forall ({{.*}}) in (6, 1, 44)
// block-m = 0 takes the fewest 16-row warps that hold a program's rows:
// 4 heads x 2 rows = 8 packed rows -> one warp; L = 100 -> 64 rows.
// AUTOTILE-LABEL: func @offsets_causal_gqa
// AUTOTILE:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>}
// With 32-row warps (max-warp-rows=32, the GPU pipeline on sm_80/sm_90):
// 100 rows of 16-bit K/V at D = 64 take a 128-row program of 4 warps.
// WIDE-LABEL: func @offsets_causal_gqa
// WIDE:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 128, block_n = 64, num_warps = 4, num_stages = 2>}
// Unless two such programs (2 x (32 KB + 1 KB)) do not fit the shared memory
// per multiprocessor.
// NARROW-LABEL: func @offsets_causal_gqa
// NARROW:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>}
// wgmma=true (sm_90a): 100 rows at D = Dv = 64 are two warpgroups (128 rows,
// 8 warps of 16 rows) with 128-key blocks; the 16-row decode program (fewer
// rows than a warpgroup) keeps 64.
// WGMMA-LABEL: func @offsets_causal_gqa
// WGMMA:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 128, block_n = 128, num_warps = 8, num_stages = 2>}
// WGMMA-LABEL: func @decode_packed
// WGMMA:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 64, num_warps = 1, num_stages = 2, group = 4>}
// WIDE-LABEL: func @decode_packed
// WIDE:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 64, num_warps = 1, num_stages = 2, group = 4>}
// AUTOTILE-LABEL: func @decode_packed
// AUTOTILE:         memref.alloca() : memref<16x64xf32>
// AUTOTILE:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 64, num_warps = 1, num_stages = 2, group = 4>}
func.func @decode_packed(%q: tensor<3x8x2x64xbf16>, %k: tensor<3x2x4096x64xbf16>,
                         %v: tensor<3x2x4096x64xbf16>, %pos: tensor<3xi32>) -> tensor<3x8x2x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<3xi32>) causal
      : tensor<3x8x2x64xbf16>, tensor<3x2x4096x64xbf16>, tensor<3x2x4096x64xbf16> -> tensor<3x8x2x64xbf16>
  return %o : tensor<3x8x2x64xbf16>
}

// -----

// Split-KV with a dynamic batch and query length: the f32 part buffers take
// B and L from the query (a regression: building their sizes read a
// dangling list under AddressSanitizer).

// SPLIT-LABEL: func @split_dynamic
// SPLIT:         %[[Q:.*]] = bufferization.to_buffer %{{.*}} {kvattn.role = #kvattn.role<query>}
// SPLIT:         %[[B:.*]] = memref.dim %[[Q]], %c0 : memref<?x4x?x64xf32>
// SPLIT:         %[[L:.*]] = memref.dim %[[Q]], %c2 : memref<?x4x?x64xf32>
// SPLIT:         memref.alloc(%[[B]], %[[L]]) {kvattn.role = #kvattn.role<out_parts>} : memref<4x?x4x?x64xf32>
// SPLIT:         memref.alloc(%[[B]], %[[L]]) {kvattn.role = #kvattn.role<lse_parts>} : memref<4x?x4x?xf32>
// SPLIT:         scf.forall ({{.*}}) in ({{.*}}, {{.*}}, 4)
// f32 K/V (the scalar lowering) keeps 16-row warps: 64 rows for a dynamic L.
// WIDE-LABEL: func @split_dynamic
// WIDE:         #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>
func.func @split_dynamic(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>,
                         %v: tensor<?x4x?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x4x?x64xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) causal
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32> -> tensor<?x4x?x64xf32>
  return %o : tensor<?x4x?x64xf32>
}

// -----

// GQA decode at D = 128 (32/8 heads, L = 1): one-warp packed programs take
// 32-key blocks (8 of them fit a multiprocessor's shared memory). With the
// GPU pipeline's split rule (8 warps per SM, >= 512 keys per chunk) the
// 8 programs want ceil(8 * 132 / 8) = 132 chunks, 4096 keys allow 8.

// AUTOTILE-LABEL: func @decode_d128
// AUTOTILE:         {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, group = 4>}
// GPUSPLIT-LABEL: func @decode_d128
// GPUSPLIT:         scf.forall ({{.*}}) in (8, 1, 8)
// GPUSPLIT:         #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, split_kv = 8, group = 4>
// Programs of fewer than 16 rows record 0 warps; the split counts one.
// SMALLBM-LABEL: func @decode_d128
// SMALLBM:         #kvattn.tile_config<kind = attention, block_m = 8, block_n = 64, num_warps = 0, num_stages = 2, split_kv = 64, group = 4>
func.func @decode_d128(%q: tensor<1x32x1x128xbf16>, %k: tensor<1x8x4096x128xbf16>,
                       %v: tensor<1x8x4096x128xbf16>, %pos: tensor<1xi32>) -> tensor<1x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x32x1x128xbf16>, tensor<1x8x4096x128xbf16>, tensor<1x8x4096x128xbf16> -> tensor<1x32x1x128xbf16>
  return %o : tensor<1x32x1x128xbf16>
}

// -----

// Over 32768 keys: ceil(8 * 132 / 8) = 132 chunks wanted, 64 chunks of 512
// keys allowed, 64 the cap.

// GPUSPLIT-LABEL: func @decode_long_cache
// GPUSPLIT:         scf.forall ({{.*}}) in (8, 1, 64)
func.func @decode_long_cache(%q: tensor<1x32x1x128xbf16>, %k: tensor<1x8x32768x128xbf16>,
                             %v: tensor<1x8x32768x128xbf16>, %pos: tensor<1xi32>) -> tensor<1x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x32x1x128xbf16>, tensor<1x8x32768x128xbf16>, tensor<1x8x32768x128xbf16> -> tensor<1x32x1x128xbf16>
  return %o : tensor<1x32x1x128xbf16>
}

// -----

// Under 1024 keys no chunk of 512 keys can be split off: one chunk.

// GPUSPLIT-LABEL: func @decode_short_cache
// GPUSPLIT:         #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, group = 4>
func.func @decode_short_cache(%q: tensor<1x32x1x128xbf16>, %k: tensor<1x8x1000x128xbf16>,
                              %v: tensor<1x8x1000x128xbf16>, %pos: tensor<1xi32>) -> tensor<1x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x32x1x128xbf16>, tensor<1x8x1000x128xbf16>, tensor<1x8x1000x128xbf16> -> tensor<1x32x1x128xbf16>
  return %o : tensor<1x32x1x128xbf16>
}

// -----

// Run-time split (split-kv = 0 with dynamic B and S): the chunk count n is
// computed on the host from the run-time sizes with automaticSplit's rule,
// P = B * 8 packed programs, n = clamp(min(ceil(8 * 132 / P),
// ceil(S / 32), floor(S / 512)), 1, 64); n is the grid's third dim and the
// part buffers' leading dim, which each program reads back for its chunk
// size ceil((nHi - nLo) / n); with n = 1 it stores out directly and the
// merge (n parts) is skipped. split-kv = 1 (the default RUN line): no split.

// GPUSPLIT-LABEL: func @runtime_split_decode
// GPUSPLIT-DAG:     %[[Q:.*]] = bufferization.to_buffer %{{.*}} {kvattn.role = #kvattn.role<query>}
// GPUSPLIT-DAG:     %[[K:.*]] = bufferization.to_buffer %{{.*}} {kvattn.role = #kvattn.role<key>}
// GPUSPLIT:         %[[B:.*]] = memref.dim %[[Q]], %{{.*}} : memref<?x32x1x128xbf16>
// GPUSPLIT:         %[[PROGS:.*]] = arith.muli %[[B]], %c8 : index
// GPUSPLIT:         %[[S:.*]] = memref.dim %[[K]], %{{.*}} : memref<?x8x?x128xbf16>
// GPUSPLIT:         %[[P:.*]] = arith.maxsi %[[PROGS]], %c1
// GPUSPLIT:         %[[BLOCKS:.*]] = arith.ceildivsi %[[S]], %c32
// GPUSPLIT:         %[[BYKEYS:.*]] = arith.divsi %[[S]], %c512
// GPUSPLIT:         %[[CHUNKS:.*]] = arith.minsi %[[BLOCKS]], %[[BYKEYS]]
// GPUSPLIT:         %[[WANTED:.*]] = arith.ceildivsi %c1056, %[[P]]
// GPUSPLIT:         %[[M1:.*]] = arith.minsi %[[WANTED]], %[[CHUNKS]]
// GPUSPLIT:         %[[M2:.*]] = arith.minsi %[[M1]], %c64
// GPUSPLIT:         %[[N:.*]] = arith.maxsi %[[M2]], %c1
// GPUSPLIT:         %[[OP:.*]] = memref.alloc(%[[N]], %[[B]]) {kvattn.role = #kvattn.role<out_parts>} : memref<?x?x32x1x128xf32>
// GPUSPLIT:         %[[LP:.*]] = memref.alloc(%[[N]], %[[B]]) {kvattn.role = #kvattn.role<lse_parts>} : memref<?x?x32x1xf32>
// GPUSPLIT:         scf.forall (%{{.*}}, %{{.*}}, %[[CHUNK:.*]]) in (%[[PROGS]], 1, %[[N]])
// GPUSPLIT:           %[[NIN:.*]] = memref.dim %[[OP]], %{{.*}} : memref<?x?x32x1x128xf32>
// GPUSPLIT:           %[[SIZE:.*]] = arith.ceildivsi %{{.*}}, %[[NIN]] : index
// GPUSPLIT:           arith.muli %[[CHUNK]], %[[SIZE]] : index
// GPUSPLIT:           %[[ONE:.*]] = arith.cmpi eq, %[[NIN]], %c1 : index
// GPUSPLIT:           scf.if %[[ONE]] {
// GPUSPLIT:             kvattn.tile.store {{.*}} into %[[OUT:[^ ]*]] [
// GPUSPLIT-SAME:          memref<?x32x1x128xbf16>
// GPUSPLIT:           } else {
// GPUSPLIT:             memref.subview %[[OP]][%[[CHUNK]], 0, 0, 0, 0]
// GPUSPLIT:             kvattn.tile.store
// GPUSPLIT-SAME:          memref<?x32x1x128xf32, strided<[4096, 128, 128, 1], offset: ?>>
// GPUSPLIT:         split_kv = 0, group = 4, split_rule = <max = 64, block_m = 16, block_n = 32, group = 4, programs_per_sm = 8, min_keys = 512, num_sms = 132>>
// GPUSPLIT:         %[[MANY:.*]] = arith.cmpi sgt, %[[N]], %c1 : index
// GPUSPLIT:         scf.if %[[MANY]] {
// GPUSPLIT:           scf.forall
// GPUSPLIT:             kvattn.tile.merge %[[OP]], %[[LP]]{{.*}} into %[[OUT]]
// GPUSPLIT-SAME:        memref<?x?x32x1x128xf32>, memref<?x?x32x1xf32>
// GPUSPLIT:         #kvattn.tile_config<kind = merge, {{.*}}, num_stages = 2, split_rule = <max = 64,

// CHECK-LABEL: func @runtime_split_decode
// CHECK-NOT:     out_parts
// CHECK:         scf.forall ({{.*}}, {{.*}}) in (%{{.*}}, 1) {
// CHECK-NOT:     out_parts
// CHECK:         #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, group = 4>}
// CHECK-NOT:     split_rule
// CHECK:         return
func.func @runtime_split_decode(%q: tensor<?x32x1x128xbf16>, %k: tensor<?x8x?x128xbf16>,
                                %v: tensor<?x8x?x128xbf16>, %len: tensor<?xi32>) -> tensor<?x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<?xi32>)
      : tensor<?x32x1x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}

// -----

// Static S = 2048 bounds the run-time split: N_max = min(64, ceil(2048 /
// 32), floor(2048 / 512)) = 4, folded into the host computation.

// GPUSPLIT-LABEL: func @runtime_split_static_keys
// GPUSPLIT:         %[[WANTED:.*]] = arith.ceildivsi %c1056, %{{.*}}
// GPUSPLIT:         %[[M1:.*]] = arith.minsi %[[WANTED]], %c4
// GPUSPLIT:         %[[M2:.*]] = arith.minsi %[[M1]], %c4
// GPUSPLIT:         %[[N:.*]] = arith.maxsi %[[M2]], %{{.*}}
// GPUSPLIT:         memref.alloc(%[[N]], %{{.*}}) {kvattn.role = #kvattn.role<out_parts>} : memref<?x?x32x1x128xf32>
// GPUSPLIT:         scf.forall ({{.*}}) in (%{{.*}}, 1, %[[N]])
// GPUSPLIT:         split_kv = 0, group = 4, split_rule = <max = 4,
func.func @runtime_split_static_keys(%q: tensor<?x32x1x128xbf16>, %k: tensor<?x8x2048x128xbf16>,
                                     %v: tensor<?x8x2048x128xbf16>, %len: tensor<?xi32>) -> tensor<?x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<?xi32>)
      : tensor<?x32x1x128xbf16>, tensor<?x8x2048x128xbf16>, tensor<?x8x2048x128xbf16> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}

// -----

// Static S = 1000 with dynamic B: floor(1000 / 512) = 1 chunk at most, so
// N_max = 1: no split, no rule.

// GPUSPLIT-LABEL: func @runtime_split_short_keys
// GPUSPLIT-NOT:     out_parts
// GPUSPLIT:         scf.forall ({{.*}}, {{.*}}) in (%{{.*}}, 1) {
// GPUSPLIT-NOT:     split_rule
// GPUSPLIT:         #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, group = 4>}
// GPUSPLIT-NOT:     kvattn.tile.merge
// GPUSPLIT:         return
func.func @runtime_split_short_keys(%q: tensor<?x32x1x128xbf16>, %k: tensor<?x8x1000x128xbf16>,
                                    %v: tensor<?x8x1000x128xbf16>, %len: tensor<?xi32>) -> tensor<?x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<?xi32>)
      : tensor<?x32x1x128xbf16>, tensor<?x8x1000x128xbf16>, tensor<?x8x1000x128xbf16> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}

// -----

// Paged: the rule's S is the logical key count max_pages * page_size.

// GPUSPLIT-LABEL: func @runtime_split_paged
// GPUSPLIT-DAG:     %[[K:.*]] = bufferization.to_buffer %{{.*}} {kvattn.role = #kvattn.role<key>}
// GPUSPLIT-DAG:     %[[T:.*]] = bufferization.to_buffer %{{.*}} {kvattn.role = #kvattn.role<block_table>}
// GPUSPLIT:         %[[PAGES:.*]] = memref.dim %[[T]], %{{.*}} : memref<?x?xi32>
// GPUSPLIT:         %[[S:.*]] = arith.muli %[[PAGES]], %c16 : index
// GPUSPLIT:         arith.ceildivsi %[[S]], %{{.*}}
// GPUSPLIT:         arith.divsi %[[S]], %{{.*}}
// GPUSPLIT:         scf.forall ({{.*}}) in (%{{.*}}, 1, %{{.*}})
// GPUSPLIT:         split_kv = 0, group = 4, split_rule = <max = 64,
func.func @runtime_split_paged(%q: tensor<?x32x1x128xbf16>, %k: tensor<?x16x8x128xbf16>,
                               %v: tensor<?x16x8x128xbf16>, %len: tensor<?xi32>, %table: tensor<?x?xi32>) -> tensor<?x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<?xi32>) block_table(%table : tensor<?x?xi32>)
      : tensor<?x32x1x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}

// -----

// RoPE: tile.load_q rotates the rows it loads, at their positions: the
// sequence's q_offset and the program's first row (GQA packing: the
// lowering divides the packed row by the group).
// CHECK-LABEL: func.func @rope_on_load
// CHECK:         %[[QOFF:.*]] = arith.index_cast %{{.*}} : i32 to index
// CHECK:         kvattn.tile.load_q %{{.*}} group = 4 rope = <rotary_dim = 32, theta = 1.000000e+04, interleaved> pos_row(%{{.*}}) q_base(%[[QOFF]]) into
func.func @rope_on_load(%q: tensor<1x8x1x64xbf16>, %k: tensor<1x2x256x64xbf16>, %v: tensor<1x2x256x64xbf16>,
                        %qo: tensor<1xi32>) -> tensor<1x8x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal
      rope = <rotary_dim = 32, theta = 10000.0, interleaved>
      : tensor<1x8x1x64xbf16>, tensor<1x2x256x64xbf16>, tensor<1x2x256x64xbf16> -> tensor<1x8x1x64xbf16>
  return %o : tensor<1x8x1x64xbf16>
}

// -----

// RoPE from tables: buffers of roles rotary_cos / rotary_sin that
// tile.load_q reads (at row q_offset + the row's sequence row).
// CHECK-LABEL: func.func @rope_tables_on_load
// CHECK-DAG:     %[[COS:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<rotary_cos>} : tensor<4096x16xbf16> to memref<4096x16xbf16>
// CHECK-DAG:     %[[SIN:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<rotary_sin>} : tensor<4096x16xbf16> to memref<4096x16xbf16>
// CHECK:         kvattn.tile.load_q %{{.*}} group = 4 rope = <rotary_dim = 32> rotary_cos(%[[COS]] : memref<4096x16xbf16>) rotary_sin(%[[SIN]] : memref<4096x16xbf16>) pos_row(%{{.*}}) q_base(%{{.*}}) into
func.func @rope_tables_on_load(%q: tensor<1x8x1x64xbf16>, %k: tensor<1x2x256x64xbf16>, %v: tensor<1x2x256x64xbf16>,
                               %qo: tensor<1xi32>, %c: tensor<4096x16xbf16>, %s: tensor<4096x16xbf16>) -> tensor<1x8x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal
      rope = <rotary_dim = 32> rotary_cos(%c : tensor<4096x16xbf16>) rotary_sin(%s : tensor<4096x16xbf16>)
      : tensor<1x8x1x64xbf16>, tensor<1x2x256x64xbf16>, tensor<1x2x256x64xbf16> -> tensor<1x8x1x64xbf16>
  return %o : tensor<1x8x1x64xbf16>
}

// -----

// The GPU pipeline's automatic blocks per chip (tensor-cores=true; the
// shared memory per SM of sm_80 and of sm_86/sm_89): D = 128 with 100 rows
// takes 128 x 64 on four 32-row warps on sm_80 and 128 x 32 on the 100 KB
// chips (two 48 KB programs per SM); D = 256 takes 64-key blocks, 128 rows
// on 8 warps on sm_80 (128 KB) and 64 on sm_89 (96 KB); a D = 256 decode
// keeps 32 keys.
// TC80-LABEL: func @chip_blocks_d128
// TC80:         #kvattn.tile_config<kind = attention, block_m = 128, block_n = 64, num_warps = 4, num_stages = 2>
// TC89-LABEL: func @chip_blocks_d128
// TC89:         #kvattn.tile_config<kind = attention, block_m = 128, block_n = 32, num_warps = 4, num_stages = 2>
func.func @chip_blocks_d128(%q: tensor<1x4x100x128xbf16>, %k: tensor<1x4x300x128xbf16>,
                            %v: tensor<1x4x300x128xbf16>, %pos: tensor<1xi32>) -> tensor<1x4x100x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x4x100x128xbf16>, tensor<1x4x300x128xbf16>, tensor<1x4x300x128xbf16> -> tensor<1x4x100x128xbf16>
  return %o : tensor<1x4x100x128xbf16>
}

// -----

// TC80-LABEL: func @chip_blocks_d256
// TC80:         #kvattn.tile_config<kind = attention, block_m = 128, block_n = 64, num_warps = 8, num_stages = 2>
// TC89-LABEL: func @chip_blocks_d256
// TC89:         #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2>
// AUTOTILE-LABEL: func @chip_blocks_d256
// AUTOTILE:         #kvattn.tile_config<kind = attention, block_m = 64, block_n = 32, num_warps = 4, num_stages = 2>
func.func @chip_blocks_d256(%q: tensor<1x4x100x256xf16>, %k: tensor<1x4x300x256xf16>,
                            %v: tensor<1x4x300x256xf16>, %pos: tensor<1xi32>) -> tensor<1x4x100x256xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x4x100x256xf16>, tensor<1x4x300x256xf16>, tensor<1x4x300x256xf16> -> tensor<1x4x100x256xf16>
  return %o : tensor<1x4x100x256xf16>
}

// -----

// TC89-LABEL: func @chip_blocks_d256_decode
// TC89:         #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 1, num_stages = 2, group = 4>
func.func @chip_blocks_d256_decode(%q: tensor<2x8x1x256xbf16>, %k: tensor<2x2x4096x256xbf16>,
                                   %v: tensor<2x2x4096x256xbf16>, %pos: tensor<2xi32>) -> tensor<2x8x1x256xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) causal
      : tensor<2x8x1x256xbf16>, tensor<2x2x4096x256xbf16>, tensor<2x2x4096x256xbf16> -> tensor<2x8x1x256xbf16>
  return %o : tensor<2x8x1x256xbf16>
}

// -----

// The latent form (DeepSeek MLA): one cache buffer, read by tile.qk as K
// (all D = 576 columns) and by tile.softmax_update as V (`latent`: its
// first 512 columns); the accumulator and out are Dv = 512 wide. Decode
// packs the 16 query heads of the one KV head into the M tile.
// On tensor cores (schedule::latentBlocks) the 16 heads are one 16-row
// program of 4 warps, each owning 128 of the 512 output columns, with
// 32-key blocks, on every chip:
// TC80-LABEL: func @latent_mla_decode
// TC80:         #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 4, num_stages = 2, group = 16>
// TC89-LABEL: func @latent_mla_decode
// TC89:         #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 4, num_stages = 2, group = 16>
// CHECK-LABEL: func.func @latent_mla_decode
// CHECK:         %[[K:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<key>} : tensor<8x64x1x576xbf16> to memref<8x64x1x576xbf16>
// CHECK-NOT:     kvattn.role<value>
// CHECK:         memref.alloc() {kvattn.role = #kvattn.role<out>} : memref<2x16x1x512xbf16>
// CHECK:         kvattn.tile.qk %{{.*}}, %[[K]][{{.*}}] pages(
// CHECK:         kvattn.tile.softmax_update %{{.*}}, %[[K]][{{.*}}] latent pages(
// CHECK-SAME:      memref<8x64x1x576xbf16>, memref<{{[0-9]+}}xf32>, memref<{{[0-9]+}}xf32>, memref<{{[0-9]+}}x512xf32>
func.func @latent_mla_decode(%q: tensor<2x16x1x576xbf16>, %ckv: tensor<8x64x1x576xbf16>,
                             %len: tensor<2xi32>, %bt: tensor<2x4xi32>) -> tensor<2x16x1x512xbf16> {
  %o = kvattn.attention %q, %ckv value_dim = 512 kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>)
      scale = 0.0416666679
      : tensor<2x16x1x576xbf16>, tensor<8x64x1x576xbf16> -> tensor<2x16x1x512xbf16>
  return %o : tensor<2x16x1x512xbf16>
}

// -----

// RoPE's record (k_rope_pos): a buffer of role k_rope_pos that the program
// names once, at its start (tile.key_record), and no tile op reads: its
// check runs before the program.
// CHECK-LABEL: func.func @rope_record
// CHECK:         %[[REC:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<k_rope_pos>} : tensor<2x40xi64> to memref<2x40xi64>
// CHECK:         scf.forall
// CHECK:         kvattn.tile.init
// CHECK-NEXT:    kvattn.tile.key_record %[[REC]] : memref<2x40xi64>
// CHECK-NOT:     %[[REC]]
// CHECK:         return
func.func @rope_record(%q: tensor<2x2x3x16xf32>, %k: tensor<2x2x40x16xf32>, %v: tensor<2x2x40x16xf32>,
                       %qo: tensor<2xi32>, %n: tensor<2xi32>, %rec: tensor<2x40xi64>) -> tensor<2x2x3x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) kv_len(%n : tensor<2xi32>)
      k_rope_pos(%rec : tensor<2x40xi64>) causal rope = <rotary_dim = 16, theta = 10000.0>
      : tensor<2x2x3x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32> -> tensor<2x2x3x16xf32>
  return %o : tensor<2x2x3x16xf32>
}

// -----

// 128 heads: 64-row programs of 8 warps (2 per 16 rows, 256 columns each;
// 16 warps would leave a thread 128 registers) where one fits (116 KB:
// sm_80's 164 KB), 32-row programs of 8 warps (4 per 16 rows) in 100 KB
// (sm_86/sm_89).
// TC80-LABEL: func @latent_mla_decode_128_heads
// TC80:         #kvattn.tile_config<kind = attention, block_m = 64, block_n = 32, num_warps = 8, num_stages = 2, group = 128>
// TC89-LABEL: func @latent_mla_decode_128_heads
// TC89:         #kvattn.tile_config<kind = attention, block_m = 32, block_n = 32, num_warps = 8, num_stages = 2, group = 128>
func.func @latent_mla_decode_128_heads(%q: tensor<2x128x1x576xbf16>, %ckv: tensor<8x64x1x576xbf16>,
                                       %len: tensor<2xi32>, %bt: tensor<2x4xi32>) -> tensor<2x128x1x512xbf16> {
  %o = kvattn.attention %q, %ckv value_dim = 512 kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>)
      scale = 0.0416666679
      : tensor<2x128x1x576xbf16>, tensor<8x64x1x576xbf16> -> tensor<2x128x1x512xbf16>
  return %o : tensor<2x128x1x512xbf16>
}
