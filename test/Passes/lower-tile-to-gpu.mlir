// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -kvattn-lower-tile-to-gpu -cse | FileCheck %s --enable-var-scope
// RUN: not kvattn-opt %s -kvattn-tile="block-m=32 num-warps=4" -kvattn-outline-tile-programs -kvattn-lower-tile-to-gpu 2>&1 | FileCheck %s --check-prefix=MAPPING

// The tiles move to dynamic shared memory; each tile op becomes the
// thread-mapped code of docs/gpu-lowering.md.

// CHECK-LABEL: gpu.func @f_kvattn_0
// CHECK:         %[[SMEM:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK-DAG:     memref.view %[[SMEM]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xf32, #gpu.address_space<workgroup>>
// CHECK-DAG:     %[[STAGE:.*]] = memref.view %[[SMEM]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xf16, #gpu.address_space<workgroup>>
// CHECK-DAG:     %[[TID:.*]] = gpu.thread_id  x
// CHECK-DAG:     %[[WARP:.*]] = arith.divui %[[TID]], %c32
// CHECK-DAG:     %[[LANE:.*]] = arith.remui %[[TID]], %c32
// CHECK-DAG:     %[[QUAD:.*]] = arith.remui %[[LANE]], %c4
// Cooperative loads stride over the tile by the block size.
// CHECK:         scf.for %{{.*}} = %[[TID]] to %{{.*}} step %c128
// CHECK:         gpu.barrier
// The KV-block loop of the tile program, unchanged:
// CHECK:         scf.for %[[KB:.*]] =
// K block staged in shared memory, then scores on the lane's fragment.
// CHECK:           scf.for %{{.*}} = %[[TID]] to %{{.*}} step %c128
// CHECK:             memref.store %{{.*}}, %[[STAGE]]
// CHECK:           gpu.barrier
// Only partial blocks compare positions (inside the scf.if of the tile
// program): kp <= qp for causality.
// CHECK:           scf.if %{{.*}} {
// CHECK:             arith.cmpi sle
// CHECK:           }
// Row maxima and sums reduced across the four lanes of a row.
// CHECK:           gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK:           gpu.shuffle  xor %{{.*}}, %c2_i32, %c32_i32 : f32
// CHECK:           math.exp
// CHECK:           gpu.barrier
// CHECK:           gpu.barrier
// CHECK-NOT:     kvattn.tile
// CHECK:         gpu.return

// MAPPING: error: 'gpu.func' op kvattn-lower-tile-to-gpu maps 16 query rows to each warp and 8-column fragments to lanes: block-m must be 16 x num-warps and block-n a multiple of 8 (got block-m = 32, block-n = 64, num-warps = 4)
func.func @f(%q: tensor<1x8x100x64xf16>, %k: tensor<1x2x300x64xf16>, %v: tensor<1x2x300x64xf16>,
             %pos: tensor<1xi32>) -> tensor<1x8x100x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x8x100x64xf16>, tensor<1x2x300x64xf16>, tensor<1x2x300x64xf16> -> tensor<1x8x100x64xf16>
  return %o : tensor<1x8x100x64xf16>
}
