// RUN: kvattn-opt %s -split-input-file -kvattn-append-to-gpu -cse | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file -kvattn-append-to-gpu -kvattn-tile -kvattn-outline-tile-programs -cse | FileCheck %s --check-prefix=STEP --enable-var-scope

// A plain append: one warp per new token (B * L = 2 tokens, 4 per block:
// one block of 128 threads), each lane copying 16-byte chunks (8 x f16) of
// its token's H * D row; the result is the cache buffer itself.
// CHECK-LABEL: func.func @plain_f16(
// CHECK-SAME: %[[U:.*]]: tensor<2x2x1x64xf16>, %[[C:.*]]: tensor<2x2x16x64xf16>, %[[P:.*]]: tensor<2xi32>
// CHECK: %[[CB:.*]] = bufferization.to_buffer %[[C]] {kvattn.role = #kvattn.role<cache>}
// CHECK: gpu.launch_func @kvattn_kernels::@plain_f16_kvattn_append_0 blocks in (%[[ONE:.*]], %[[ONE]], %[[ONE]]) threads in (%c128, %[[ONE]], %[[ONE]]) dynamic_shared_memory_size %c0_i32
// CHECK-SAME: args({{.*}} : memref<1xf16>, {{.*}} : memref<1xf16>, {{.*}} : memref<1xi32>, %c2 : index, %c2 : index, %c1 : index, %c16 : index)
// CHECK: %[[R:.*]] = bufferization.to_tensor %[[CB]] restrict writable
// CHECK: return %[[R]]
// CHECK: gpu.func @plain_f16_kvattn_append_0(
// CHECK-SAME: kvattn.params = [#kvattn.param<name = "update", kind = pointer, element_type = f16, shape = [2, 2, 1, 64]>, #kvattn.param<name = "cache", kind = pointer, element_type = f16, shape = [2, 2, 16, 64], access = write>, #kvattn.param<name = "pos", kind = pointer, element_type = i32, shape = [2]>, #kvattn.param<name = "B", kind = scalar, element_type = i64>, #kvattn.param<name = "Hkv", kind = scalar, element_type = i64>, #kvattn.param<name = "L", kind = scalar, element_type = i64>, #kvattn.param<name = "S", kind = scalar, element_type = i64>]
// CHECK-SAME: kvattn.tile_config = #kvattn.tile_config<kind = append, block_m = 4, block_n = 0, num_warps = 4, num_stages = 1, vector_width = 8>
// CHECK-DAG: %[[TID:.*]] = gpu.thread_id x
// CHECK-DAG: %[[BID:.*]] = gpu.block_id x
// CHECK: %[[WARP:.*]] = arith.divui %[[TID]], %c32
// CHECK: %[[LANE:.*]] = arith.remui %[[TID]], %c32
// CHECK: %[[BASE:.*]] = arith.muli %[[BID]], %c4
// CHECK: %[[TOKEN:.*]] = arith.addi %[[BASE]], %[[WARP]]
// CHECK: scf.if
// CHECK: %[[B:.*]] = arith.divui %[[TOKEN]], %[[L:.*]] : index
// CHECK: %[[T:.*]] = arith.remui %[[TOKEN]], %[[L]] : index
// CHECK: %[[P0:.*]] = memref.load {{.*}}[%[[B]]] : memref<2xi32>
// CHECK: %[[P0I:.*]] = arith.index_cast %[[P0]] : i32 to index
// CHECK: %[[ROW:.*]] = arith.addi %[[P0I]], %[[T]]
// Rows outside [0, S) are skipped.
// CHECK: arith.cmpi slt, %[[ROW]], %[[S:.*]] : index
// CHECK: arith.cmpi sge, %[[ROW]], %c0
// CHECK: scf.if
// CHECK: scf.for %[[I:.*]] = %[[LANE]] to %{{.*}} step %c32 {
// CHECK: %[[H:.*]] = arith.divui %[[I]], %c8
// CHECK: %[[CH:.*]] = arith.remui %[[I]], %c8
// CHECK: %[[D:.*]] = arith.muli %[[CH]], %c8
// CHECK: %[[V:.*]] = vector.load %{{.*}}[%[[B]], %[[H]], %[[T]], %[[D]]] {alignment = 16 : i64} : memref<2x2x1x64xf16>, vector<8xf16>
// CHECK: vector.store %[[V]], %{{.*}}[%[[B]], %[[H]], %[[ROW]], %[[D]]] {alignment = 16 : i64} : memref<2x2x16x64xf16>, vector<8xf16>
func.func @plain_f16(%u: tensor<2x2x1x64xf16>, %c: tensor<2x2x16x64xf16>, %pos: tensor<2xi32>) -> tensor<2x2x16x64xf16> {
  %r = kvattn.append %u into %c at %pos : tensor<2x2x1x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  return %r : tensor<2x2x16x64xf16>
}

// STEP-LABEL: func.func @plain_f16(
// STEP: gpu.launch_func @kvattn_kernels::@plain_f16_kvattn_append_0

// -----

// Paged with dynamic B and L: the warp reads block_table[b, p / page_size]
// once (nothing when p is outside the table), writes row p % page_size of
// that page, and skips a page id outside [0, num_pages) (-1 included).
// The grid is ceil(B * L / 4).
// CHECK-LABEL: func.func @paged_bf16(
// CHECK: %[[TB:.*]] = bufferization.to_buffer %{{.*}} read_only {kvattn.role = #kvattn.role<block_table>}
// CHECK: %[[TOKENS:.*]] = arith.muli
// CHECK: %[[GRID:.*]] = arith.ceildivui %[[TOKENS]], %c4
// CHECK: gpu.launch_func @kvattn_kernels::@paged_bf16_kvattn_append_0 blocks in (%[[GRID]], %c1, %c1) threads in (%c128, %c1, %c1)
// CHECK-SAME: : memref<1xi32>, %{{.*}} : memref<1xi32>, %[[DB:.*]] : index, %c2 : index, %[[DL:.*]] : index, %c128 : index, %[[NP:.*]] : index, %c16 : index, %c8 : index)
// CHECK: gpu.func @paged_bf16_kvattn_append_0(
// CHECK-SAME: #kvattn.param<name = "block_table", kind = pointer, element_type = i32, shape = ["B", 8]>
// CHECK-SAME: #kvattn.param<name = "num_pages", kind = scalar, element_type = i64>, #kvattn.param<name = "page_size", kind = scalar, element_type = i64>, #kvattn.param<name = "max_pages", kind = scalar, element_type = i64>]
// CHECK: memref.load %{{.*}} : memref<?xi32>
// CHECK: arith.index_cast
// CHECK: %[[ROW:.*]] = arith.addi
// CHECK: %[[INSIDE:.*]] = arith.andi
// CHECK: %[[SLOT:.*]] = arith.divui %[[ROW]], %[[PS:.*]] : index
// CHECK: %[[PROW:.*]] = arith.remui %[[ROW]], %[[PS]] : index
// CHECK: %[[PAGE:.*]] = scf.if %[[INSIDE]] -> (index) {
// CHECK:   %[[E:.*]] = memref.load %{{.*}}[%{{.*}}, %[[SLOT]]] : memref<?x8xi32>
// CHECK:   %[[EI:.*]] = arith.index_cast %[[E]] : i32 to index
// CHECK:   scf.yield %[[EI]]
// CHECK: } else {
// CHECK:   scf.yield %c-1
// CHECK: arith.cmpi slt, %[[PAGE]], %[[NPAGES:.*]] : index
// CHECK: arith.cmpi sge, %[[PAGE]], %c0
// CHECK: scf.for
// CHECK: %[[V:.*]] = vector.load {{.*}} : memref<?x2x?x64xbf16>, vector<8xbf16>
// CHECK: vector.store %[[V]], %{{.*}}[%[[PAGE]], %[[PROW]], %{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<?x16x2x64xbf16>, vector<8xbf16>
func.func @paged_bf16(%u: tensor<?x2x?x64xbf16>, %c: tensor<?x16x2x64xbf16>, %pos: tensor<?xi32>, %bt: tensor<?x8xi32>) -> tensor<?x16x2x64xbf16> {
  %r = kvattn.append %u into %c at %pos block_table(%bt : tensor<?x8xi32>) : tensor<?x2x?x64xbf16> into tensor<?x16x2x64xbf16>, tensor<?xi32>
  return %r : tensor<?x16x2x64xbf16>
}

// -----

// skip_padding: the same kernel (its page guard already writes nothing for
// a -1 page), marked kvattn.skip_padding so that its validation and the
// manifest treat a -1 entry as padding, not as an error.
// CHECK-LABEL: func.func @paged_skip_padding(
// CHECK: gpu.func @paged_skip_padding_kvattn_append_0(
// CHECK-SAME: kvattn.skip_padding
// CHECK: arith.cmpi slt, %{{.*}}, %{{.*}} : index
// CHECK: arith.cmpi sge, %{{.*}}, %c0
func.func @paged_skip_padding(%u: tensor<?x1x1x576xbf16>, %c: tensor<?x64x1x576xbf16>, %pos: tensor<?xi64>, %bt: tensor<?x1xi32>) -> tensor<?x64x1x576xbf16> {
  %r = kvattn.append %u into %c at %pos block_table(%bt : tensor<?x1xi32>) skip_padding : tensor<?x1x1x576xbf16> into tensor<?x64x1x576xbf16>, tensor<?xi64>
  return %r : tensor<?x64x1x576xbf16>
}

// -----

// f32: 4 elements (16 bytes) per copy; D = 6 in f16: 2 (4 bytes, the
// widest that divides D).
// CHECK-LABEL: func.func @widths(
// CHECK: gpu.func @widths_kvattn_append_0(
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<1x1x3x36xf32>, vector<4xf32>
// CHECK: gpu.func @widths_kvattn_append_1(
// CHECK: vector.load {{.*}} {alignment = 4 : i64} : memref<1x2x1x6xf16>, vector<2xf16>
func.func @widths(%u: tensor<1x1x3x36xf32>, %c: tensor<1x1x8x36xf32>, %u2: tensor<1x2x1x6xf16>, %c2: tensor<1x2x4x6xf16>, %pos: tensor<1xi64>) -> (tensor<1x1x8x36xf32>, tensor<1x2x4x6xf16>) {
  %r = kvattn.append %u into %c at %pos : tensor<1x1x3x36xf32> into tensor<1x1x8x36xf32>, tensor<1xi64>
  %r2 = kvattn.append %u2 into %c2 at %pos : tensor<1x2x1x6xf16> into tensor<1x2x4x6xf16>, tensor<1xi64>
  return %r, %r2 : tensor<1x1x8x36xf32>, tensor<1x2x4x6xf16>
}

// -----

// A decode step: the attention kernel is launched after the two cache
// writes, and its key and value pointers are the cache buffers the append
// kernels wrote (the appends' results alias their caches).
// STEP-LABEL: func.func @step(
// STEP-SAME: %[[Q:.*]]: tensor<1x4x1x64xbf16>, %[[KC:.*]]: tensor<1x2x32x64xbf16>, %[[VC:.*]]: tensor<1x2x32x64xbf16>
// STEP: %[[KB:.*]] = bufferization.to_buffer %[[KC]] {kvattn.role = #kvattn.role<cache>}
// STEP: gpu.launch_func @kvattn_kernels::@step_kvattn_append_0
// STEP: %[[K:.*]] = bufferization.to_tensor %[[KB]] restrict writable
// STEP: %[[VB:.*]] = bufferization.to_buffer %[[VC]] {kvattn.role = #kvattn.role<cache>}
// STEP: gpu.launch_func @kvattn_kernels::@step_kvattn_append_1
// STEP: %[[V:.*]] = bufferization.to_tensor %[[VB]] restrict writable
// STEP-DAG: bufferization.to_buffer %[[K]] read_only {kvattn.role = #kvattn.role<key>}
// STEP-DAG: bufferization.to_buffer %[[V]] read_only {kvattn.role = #kvattn.role<value>}
// STEP: gpu.launch_func @kvattn_kernels::@step_kvattn_0
func.func @step(%q: tensor<1x4x1x64xbf16>, %kc: tensor<1x2x32x64xbf16>, %vc: tensor<1x2x32x64xbf16>,
                %kn: tensor<1x2x1x64xbf16>, %vn: tensor<1x2x1x64xbf16>, %pos: tensor<1xi32>, %len: tensor<1xi32>) -> tensor<1x4x1x64xbf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x2x1x64xbf16> into tensor<1x2x32x64xbf16>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x2x1x64xbf16> into tensor<1x2x32x64xbf16>, tensor<1xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) kv_len(%len : tensor<1xi32>) causal : tensor<1x4x1x64xbf16>, tensor<1x2x32x64xbf16>, tensor<1x2x32x64xbf16> -> tensor<1x4x1x64xbf16>
  return %o : tensor<1x4x1x64xbf16>
}
