// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs -cse | FileCheck %s --enable-var-scope
// With `wgmma` (the sm_90a pipeline) the same 64-row program of 4 warps, D = 64,
// fits the wgmma lowering and is marked for it too, and its contiguous K/V
// arrive by TMA (kvattn.tma): the kernel takes the tensor maps (an !llvm.ptr
// after the pointers, k_load and v_load, boxes of 64 x block-n) and the
// shared memory of the ring (Q 8 KB, K 2 x 8 KB, V 8 KB, 8 mbarriers); with
// 16 rows (block-m 16, one warp: less than a warpgroup) it is not.
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true" | FileCheck %s --check-prefix=WGMMA
// WGMMA: gpu.launch_func @kvattn_kernels::@f_kvattn_0 {{.*}} args({{.*}} : memref<1xf16>, %{{.*}} : !llvm.ptr, %{{.*}} : index
// WGMMA: gpu.func @f_kvattn_0({{.*}}: memref<1xf16>, %{{.*}}: !llvm.ptr, %{{.*}}: index
// WGMMA-SAME: kvattn.dynamic_smem_bytes = 32832 : i64
// WGMMA-SAME: #kvattn.param<name = "tensor_maps", kind = tensor_maps, element_type = i64, maps = [{box = [64, 64, 1, 1], buffer = "key", dims = [3, 2, 1, 0], element_type = f16, name = "k_load", oob_fill = "zero", swizzle = "128B"}, {box = [64, 64, 1, 1], buffer = "value", dims = [3, 2, 1, 0], element_type = f16, name = "v_load", oob_fill = "zero", swizzle = "128B"}]>
// WGMMA-SAME: kvattn.tensor_cores, kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, group = 4>, kvattn.tma, kvattn.wgmma}
// Its query blocks from the last (heaviest-first, the default): program y
// is gridDim.y - 1 - blockIdx.y.
// WGMMA:      %[[WBY:.*]] = gpu.block_id  y
// WGMMA-NEXT: %[[WNY:.*]] = gpu.grid_dim  y
// WGMMA-NEXT: %[[WONE:.*]] = arith.constant 1 : index
// WGMMA-NEXT: %[[WLAST:.*]] = arith.subi %[[WNY]], %[[WONE]]
// WGMMA-NEXT: arith.subi %[[WLAST]], %[[WBY]]
// RUN: kvattn-opt %s -kvattn-tile="block-m=16" -kvattn-outline-tile-programs="wgmma=true" | FileCheck %s --check-prefix=ONEWARP
// Without heaviest-first the program ids are the block ids.
// RUN: kvattn-opt %s -kvattn-tile -kvattn-outline-tile-programs="wgmma=true heaviest-first=false" | FileCheck %s --check-prefix=INORDER
// INORDER: gpu.block_id  y
// INORDER-NOT: gpu.grid_dim
// INORDER: gpu.return
// ONEWARP: gpu.func @f_kvattn_0
// ONEWARP-SAME: kvattn.tensor_cores
// ONEWARP-NOT: kvattn.wgmma

// The tiled forall becomes a launch of one thread block per program and a
// kernel with the bare-pointer ABI; the program body moves unchanged.

// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @f
// CHECK-DAG:     %[[Q:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<query>}
// CHECK-DAG:     %[[K:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<key>}
// CHECK-DAG:     %[[OUT:.*]] = memref.alloc(%{{.*}}) {kvattn.role = #kvattn.role<out>}
// CHECK-DAG:     %[[QP:.*]] = memref.reinterpret_cast %[[Q]] to offset: [0], sizes: [1], strides: [1] : memref<?x8x?x64xf16> to memref<1xf16>
// CHECK-DAG:     %[[B:.*]] = memref.dim %[[Q]], %c0
// CHECK-DAG:     %[[L:.*]] = memref.dim %[[Q]], %c2
// CHECK-DAG:     %[[S:.*]] = memref.dim %[[K]], %c2
// CHECK:         %[[SMEM:.*]] = arith.constant {{[0-9]+}} : i32
// CHECK:         gpu.launch_func @kvattn_kernels::@f_kvattn_0 blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%c128, %{{.*}}, %{{.*}}) dynamic_shared_memory_size %[[SMEM]] args(%[[QP]] : memref<1xf16>, {{.*}}, %[[B]] : index, %c8 : index, %c2 : index, %[[L]] : index, %[[S]] : index)
// CHECK-NOT:     scf.forall
// CHECK:         bufferization.to_tensor %[[OUT]]

// CHECK:       gpu.module @kvattn_kernels
// CHECK:         gpu.func @f_kvattn_0(%[[AQ:.*]]: memref<1xf16>, %{{.*}}: memref<1xf16>, %{{.*}}: memref<1xf16>, %{{.*}}: memref<1xi32>, %{{.*}}: memref<1xf16>, %[[AB:.*]]: index, %{{.*}}: index, %{{.*}}: index, %[[AL:.*]]: index, %{{.*}}: index) kernel
// CHECK-SAME:      known_block_size = array<i32: 128, 1, 1>
// CHECK-SAME:      kvattn.dynamic_smem_bytes = {{[0-9]+}} : i64
// CHECK-SAME:      kvattn.params = [#kvattn.param<name = "query", kind = pointer, element_type = f16, shape = ["B", 8, "L", 64]>,
// CHECK-SAME:      #kvattn.param<name = "out", kind = pointer, element_type = f16, shape = ["B", 8, "L", 64], access = write>,
// CHECK-SAME:      #kvattn.param<name = "S", kind = scalar, element_type = i64>]
// CHECK-SAME:      kvattn.tensor_cores, kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 2, group = 4>}
// CHECK:           %[[VQ:.*]] = memref.reinterpret_cast %[[AQ]] to offset: [0], sizes: [%[[AB]], 8, %[[AL]], 64], strides: [%{{.*}}, %{{.*}}, 64, 1] : memref<1xf16> to memref<?x8x?x64xf16>
// (An mma.sync kernel's program ids are its block ids: heaviest-first is
// for the wgmma kernels, WGMMA below.)
// CHECK:           %[[BX:.*]] = gpu.block_id  x
// CHECK:           %[[BY:.*]] = gpu.block_id  y
// CHECK-NOT:       gpu.grid_dim
// CHECK:           memref.alloca_scope
// CHECK:             kvattn.tile.load_q %[[VQ]]
// CHECK:             scf.for
// CHECK:               kvattn.tile.qk
// CHECK:               kvattn.tile.softmax_update
// CHECK:             kvattn.tile.store
// CHECK:           gpu.return
func.func @f(%q: tensor<?x8x?x64xf16>, %k: tensor<?x2x?x64xf16>, %v: tensor<?x2x?x64xf16>,
             %pos: tensor<?xi32>) -> tensor<?x8x?x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) causal
      : tensor<?x8x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x8x?x64xf16>
  return %o : tensor<?x8x?x64xf16>
}
