// RUN: kvattn-opt %s -kvattn-raise-sdpa -split-input-file -verify-diagnostics | FileCheck %s --enable-var-scope

// -kvattn-raise-sdpa: SDPA in linalg on tensors and in TOSA becomes
// kvattn.sdpa (or kvattn.attention with q_offset when the causal offset is
// neither 0 nor S - L), and near misses stay unchanged with a remark. The
// shapes are those of the seeds' 2x5 example: L = 2 new rows over S = 5
// keys (3 cached), two heads folded into the batch, D = 4. The CHECK-SAME
// and CHECK lines after each label are the expected rewrite; the remark of a
// refused case is on its P·V product.

// batch_matmul with a linalg.transpose of K, a constant scale on the
// scores, linalg.softmax: kvattn.sdpa with scale 0.125 (the product of the
// constants, not 1/sqrt(D)), rank 3 brought to rank 4 and back.
// CHECK-LABEL: func.func @linalg_named
func.func @linalg_named(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4xf32>, %[[K:.*]]: tensor<2x5x4xf32>, %[[V:.*]]: tensor<2x5x4xf32>)
// CHECK-DAG: %[[Q4:.*]] = tensor.expand_shape %[[Q]] {{\[}}[0, 1], [2], [3]] output_shape [1, 2, 2, 4]
// CHECK-DAG: %[[K4:.*]] = tensor.expand_shape %[[K]] {{\[}}[0, 1], [2], [3]] output_shape [1, 2, 5, 4]
// CHECK-DAG: %[[V4:.*]] = tensor.expand_shape %[[V]] {{\[}}[0, 1], [2], [3]] output_shape [1, 2, 5, 4]
// CHECK: %[[O:.*]] = kvattn.sdpa %[[Q4]], %[[K4]], %[[V4]] scale = 1.250000e-01 : tensor<1x2x2x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32> -> tensor<1x2x2x4xf32>
// CHECK: %[[R:.*]] = tensor.collapse_shape %[[O]] {{\[}}[0, 1], [2], [3]] : tensor<1x2x2x4xf32> into tensor<2x2x4xf32>
// CHECK-NOT: linalg.
// CHECK: return %[[R]]
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.125 : f32
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// batch_matmul with indexing_maps reading K as [S, D], a division by a
// constant, the decomposed softmax (as linalg.softmax decomposes) and an
// additive float mask [L, S]: the mask is kept as the general mask.
// CHECK-LABEL: func.func @linalg_maps_decomposed_additive
func.func @linalg_maps_decomposed_additive(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<2x5xf32>) -> tensor<2x2x4xf32> {
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: tensor<2x5xf32>)
// CHECK-NOT: linalg.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]] : tensor<2x5xf32>) scale = 5.000000e-01 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x2x5xf32>
  %t6 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t5 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 2.0 : f32
    %m = arith.divf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t6, %mask : tensor<2x2x5xf32>, tensor<2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = arith.constant 0xFF800000 : f32
  %t10 = tensor.empty() : tensor<2x2xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t12 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t13 = tensor.empty() : tensor<2x2x5xf32>
  %t14 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8, %t12 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t13 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t15 = arith.constant 0.0 : f32
  %t16 = tensor.empty() : tensor<2x2xf32>
  %t17 = linalg.fill ins(%t15 : f32) outs(%t16 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t18 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t14 : tensor<2x2x5xf32>) outs(%t17 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t19 = tensor.empty() : tensor<2x2x5xf32>
  %t20 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t14, %t18 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t19 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t21 = arith.constant 0.0 : f32
  %t22 = tensor.empty() : tensor<2x2x4xf32>
  %t23 = linalg.fill ins(%t21 : f32) outs(%t22 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t24 = linalg.batch_matmul ins(%t20, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t23 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t24 : tensor<2x2x4xf32>
}

// -----

// A linalg.generic contraction, no scale (scale = 1), a boolean mask
// [N, L, S] applied by select(-inf): kept as the general i1 mask.
// CHECK-LABEL: func.func @linalg_generic_bool_mask
func.func @linalg_generic_bool_mask(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<2x2x5xi1>) -> tensor<2x2x4xf32> {
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: tensor<2x2x5xi1>)
// CHECK-NOT: linalg.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]] : tensor<2x2x5xi1>) scale = 1.000000e+00 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.generic {indexing_maps = [affine_map<(b, i, j, d) -> (b, i, d)>, affine_map<(b, i, j, d) -> (b, j, d)>, affine_map<(b, i, j, d) -> (b, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) {
  ^bb0(%qe: f32, %ke: f32, %acc: f32):
    %prod = arith.mulf %qe, %ke : f32
    %sum = arith.addf %acc, %prod : f32
    linalg.yield %sum : f32
  } -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x2x5xf32>
  %t6 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %mask : tensor<2x2x5xf32>, tensor<2x2x5xi1>) outs(%t5 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: i1, %o: f32):
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %mk, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.softmax dimension(2) ins(%t6 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t9 = arith.constant 0.0 : f32
  %t10 = tensor.empty() : tensor<2x2x4xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t12 = linalg.batch_matmul ins(%t8, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t11 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t12 : tensor<2x2x4xf32>
}

// -----

// A causal mask from linalg.index: key j allowed when j <= i + 3, with
// 3 = S - L: lower-right (the L = 2 new rows see the 3 cached keys).
// CHECK-LABEL: func.func @causal_lower_right
func.func @causal_lower_right(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: linalg.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = lower_right scale = 5.000000e-01 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.5 : f32
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %c3 = arith.constant 3 : index
    %lim = arith.addi %i, %c3 : index
    %ok = arith.cmpi sle, %j, %lim : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t11 = tensor.empty() : tensor<2x2x5xf32>
  %t12 = linalg.softmax dimension(2) ins(%t10 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t13 = arith.constant 0.0 : f32
  %t14 = tensor.empty() : tensor<2x2x4xf32>
  %t15 = linalg.fill ins(%t13 : f32) outs(%t14 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t16 = linalg.batch_matmul ins(%t12, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t15 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t16 : tensor<2x2x4xf32>
}

// -----

// j < i + 1 is j <= i: offset 0, upper-left (torch's is_causal=True).
// CHECK-LABEL: func.func @causal_upper_left
func.func @causal_upper_left(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: linalg.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = upper_left scale = 1.000000e+00 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %c1 = arith.constant 1 : index
    %lim = arith.addi %i, %c1 : index
    %ok = arith.cmpi slt, %j, %lim : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// i + 1 >= j in i32: offset 1 is neither 0 nor S - L = 3, so the
// positions are explicit: kvattn.attention with q_offset = 1.
// CHECK-LABEL: func.func @causal_other_offset
func.func @causal_other_offset(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: linalg.
// CHECK: %[[C:.*]] = arith.constant 1 : i64
// CHECK: %[[OFF:.*]] = tensor.splat %[[C]] : tensor<1xi64>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[OFF]] : tensor<1xi64>) causal scale = 1.000000e+00 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %j32 = arith.index_cast %j : index to i32
    %c1 = arith.constant 1 : i32
    %lim = arith.addi %i32, %c1 : i32
    %ok = arith.cmpi sge, %lim, %j32 : i32
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// The mask is tensor.generate of j <= i + pos, pos read from a tensor<i32>
// argument (a cache position): kvattn.attention with q_offset = pos.
// CHECK-LABEL: func.func @causal_dynamic_cache_position
func.func @causal_dynamic_cache_position(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %pos: tensor<i32>) -> tensor<2x2x4xf32> {
// CHECK-SAME: %[[POS:[a-z0-9]+]]: tensor<i32>)
// CHECK-NOT: linalg.
// CHECK: %[[P:.*]] = tensor.extract %[[POS]][] : tensor<i32>
// CHECK: %[[PI:.*]] = arith.index_cast %[[P]] : i32 to index
// CHECK: %[[P64:.*]] = arith.index_cast %[[PI]] : index to i64
// A negative pos is a positive k_offset: q_offset = max(pos, 0), k_offset =
// max(-pos, 0).
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK: %[[QP:.*]] = arith.maxsi %[[P64]], %[[ZERO]] : i64
// CHECK: %[[NEG:.*]] = arith.subi %[[ZERO]], %[[P64]] : i64
// CHECK: %[[KP:.*]] = arith.maxsi %[[NEG]], %[[ZERO]] : i64
// CHECK: %[[OFF:.*]] = tensor.splat %[[QP]] : tensor<1xi64>
// CHECK: %[[KOFF:.*]] = tensor.splat %[[KP]] : tensor<1xi64>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[OFF]] : tensor<1xi64>) k_offset(%[[KOFF]] : tensor<1xi64>) causal scale = 5.000000e-01 :
// CHECK-NOT: tensor.generate
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.5 : f32
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.generate {
  ^bb0(%i: index, %j: index):
    %p = tensor.extract %pos[] : tensor<i32>
    %pi = arith.index_cast %p : i32 to index
    %lim = arith.addi %i, %pi : index
    %ok = arith.cmpi sle, %j, %lim : index
    tensor.yield %ok : i1
  } : tensor<2x5xi1>
  %t10 = tensor.empty() : tensor<2x2x5xf32>
  %t11 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8, %t9 : tensor<2x2x5xf32>, tensor<2x5xi1>) outs(%t10 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: i1, %o: f32):
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %mk, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t12 = arith.constant 0xFF800000 : f32
  %t13 = tensor.empty() : tensor<2x2xf32>
  %t14 = linalg.fill ins(%t12 : f32) outs(%t13 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t15 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t11 : tensor<2x2x5xf32>) outs(%t14 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t16 = tensor.empty() : tensor<2x2x5xf32>
  %t17 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t11, %t15 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t16 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t18 = arith.constant 0.0 : f32
  %t19 = tensor.empty() : tensor<2x2xf32>
  %t20 = linalg.fill ins(%t18 : f32) outs(%t19 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t21 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t17 : tensor<2x2x5xf32>) outs(%t20 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t22 = tensor.empty() : tensor<2x2x5xf32>
  %t23 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t17, %t21 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t22 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t24 = arith.constant 0.0 : f32
  %t25 = tensor.empty() : tensor<2x2x4xf32>
  %t26 = linalg.fill ins(%t24 : f32) outs(%t25 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t27 = linalg.batch_matmul ins(%t23, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t26 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t27 : tensor<2x2x4xf32>
}

// -----

// An additive float mask, select(j <= i + p, 0, -inf), with p an index
// argument: kvattn.attention with q_offset = p.
// CHECK-LABEL: func.func @causal_additive_scalar_position
func.func @causal_additive_scalar_position(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %p: index) -> tensor<2x2x4xf32> {
// CHECK-SAME: %[[POS:[a-z0-9]+]]: index)
// CHECK: %[[P64:.*]] = arith.index_cast %[[POS]] : index to i64
// CHECK: %[[QP:.*]] = arith.maxsi %[[P64]], %{{.*}} : i64
// CHECK: %[[KP:.*]] = arith.maxsi %{{.*}}, %{{.*}} : i64
// CHECK: %[[OFF:.*]] = tensor.splat %[[QP]] : tensor<1xi64>
// CHECK: %[[KOFF:.*]] = tensor.splat %[[KP]] : tensor<1xi64>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[OFF]] : tensor<1xi64>) k_offset(%[[KOFF]] : tensor<1xi64>) causal scale = 1.000000e+00 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.generate {
  ^bb0(%i: index, %j: index):
    %lim = arith.addi %i, %p : index
    %ok = arith.cmpi sle, %j, %lim : index
    %zero = arith.constant 0.0 : f32
    %ninf = arith.constant 0xFF800000 : f32
    %b = arith.select %ok, %zero, %ninf : f32
    tensor.yield %b : f32
  } : tensor<2x5xf32>
  %t6 = tensor.empty() : tensor<2x2x5xf32>
  %t7 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %t5 : tensor<2x2x5xf32>, tensor<2x5xf32>) outs(%t6 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t8 = tensor.empty() : tensor<2x2x5xf32>
  %t9 = linalg.softmax dimension(2) ins(%t7 : tensor<2x2x5xf32>) outs(%t8 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t10 = arith.constant 0.0 : f32
  %t11 = tensor.empty() : tensor<2x2x4xf32>
  %t12 = linalg.fill ins(%t10 : f32) outs(%t11 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t13 = linalg.batch_matmul ins(%t9, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t13 : tensor<2x2x4xf32>
}

// -----

// A constant additive mask that is exactly the lower-right triangle
// (offset S - L = 3): the causal form, not a general mask.
// CHECK-LABEL: func.func @causal_constant_mask
func.func @causal_constant_mask(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: arith.constant dense
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = lower_right scale = 1.000000e+00 :
  %cm = arith.constant dense<[[0.0, 0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<2x5xf32>
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %cm : tensor<2x2x5xf32>, tensor<2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// Softmax over the query dimension is not attention.
// CHECK-LABEL: func.func @wrong_softmax_dim
func.func @wrong_softmax_dim(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK: linalg.batch_matmul
// CHECK-NOT: kvattn.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.softmax dimension(1) ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t9 = arith.constant 0.0 : f32
  %t10 = tensor.empty() : tensor<2x2x4xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the softmax is over dimension 1, not the key dimension 2}}
  %t12 = linalg.batch_matmul ins(%t8, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t11 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t12 : tensor<2x2x4xf32>
}

// -----

// The softmax's sum reduces over the queries.
// CHECK-LABEL: func.func @wrong_reduction_dim
func.func @wrong_reduction_dim(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK: linalg.batch_matmul
// CHECK-NOT: kvattn.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = arith.constant 0xFF800000 : f32
  %t8 = tensor.empty() : tensor<2x2xf32>
  %t9 = linalg.fill ins(%t7 : f32) outs(%t8 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t10 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t11 = tensor.empty() : tensor<2x2x5xf32>
  %t12 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %t10 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t11 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t13 = arith.constant 0.0 : f32
  %t14 = tensor.empty() : tensor<2x5xf32>
  %t15 = linalg.fill ins(%t13 : f32) outs(%t14 : tensor<2x5xf32>) -> tensor<2x5xf32>
  %t16 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, c)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%t12 : tensor<2x2x5xf32>) outs(%t15 : tensor<2x5xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x5xf32>
  %t17 = tensor.empty() : tensor<2x2x5xf32>
  %t18 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t12, %t16 : tensor<2x2x5xf32>, tensor<2x5xf32>) outs(%t17 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t19 = arith.constant 0.0 : f32
  %t20 = tensor.empty() : tensor<2x2x4xf32>
  %t21 = linalg.fill ins(%t19 : f32) outs(%t20 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the softmax's normaliser is broadcast through}}
  %t22 = linalg.batch_matmul ins(%t18, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t21 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t22 : tensor<2x2x4xf32>
}

// -----

// A [N, S] mask broadcast along the queries is read through (a, b, c) ->
// (a, c): its first dimension is the batch, which kvattn's right-aligned
// mask would read as the query row.
// CHECK-LABEL: func.func @mask_wrong_axis
func.func @mask_wrong_axis(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<2x5xf32>) -> tensor<2x2x4xf32> {
// CHECK: linalg.batch_matmul
// CHECK-NOT: kvattn.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %mask : tensor<2x2x5xf32>, tensor<2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the mask is read through}}
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// The scores are multiplied by a run-time tensor.
// CHECK-LABEL: func.func @scale_not_constant
func.func @scale_not_constant(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %w: tensor<2x2x5xf32>) -> tensor<2x2x4xf32> {
// CHECK: linalg.batch_matmul
// CHECK-NOT: kvattn.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %w : tensor<2x2x5xf32>, tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %wv: f32, %o: f32):
    %r = arith.mulf %x, %wv : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the scores are scaled by a value that is not a constant}}
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// The scale multiplies the masked scores (a float mask would be scaled
// too).
// CHECK-LABEL: func.func @scale_after_mask
func.func @scale_after_mask(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<2x5xf32>) -> tensor<2x2x4xf32> {
// CHECK: linalg.batch_matmul
// CHECK-NOT: kvattn.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4, %mask : tensor<2x2x5xf32>, tensor<2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 0.5 : f32
    %m = arith.mulf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t11 = tensor.empty() : tensor<2x2x5xf32>
  %t12 = linalg.softmax dimension(2) ins(%t10 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t13 = arith.constant 0.0 : f32
  %t14 = tensor.empty() : tensor<2x2x4xf32>
  %t15 = linalg.fill ins(%t13 : f32) outs(%t14 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the scores are scaled after the mask is added}}
  %t16 = linalg.batch_matmul ins(%t12, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t15 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t16 : tensor<2x2x4xf32>
}

// -----

// j <= 2 * i is no causal triangle: refused rather than guessed.
// CHECK-LABEL: func.func @mask_not_causal
func.func @mask_not_causal(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK: linalg.batch_matmul
// CHECK-NOT: kvattn.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %c2 = arith.constant 2 : index
    %lim = arith.muli %i, %c2 : index
    %ok = arith.cmpi sle, %j, %lim : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the mask computed in the body is not}}
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}


// -----

// j < i: offset -1 (row i sees the keys before it). A negative q_offset is
// no position (the run refuses it); the same mask is q_offset = 0, k_offset
// = 1 (issue 30 item 9).
// CHECK-LABEL: func.func @causal_strict
func.func @causal_strict(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: linalg.
// CHECK-DAG: %[[Q:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[QOFF:.*]] = tensor.splat %[[Q]] : tensor<1xi64>
// CHECK-DAG: %[[KOFF:.*]] = tensor.splat %[[K]] : tensor<1xi64>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[QOFF]] : tensor<1xi64>) k_offset(%[[KOFF]] : tensor<1xi64>) causal scale = 1.000000e+00 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %ok = arith.cmpi slt, %j, %i : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// j <= i - 1: the same offset, the same raise.
// CHECK-LABEL: func.func @causal_minus_one
func.func @causal_minus_one(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: linalg.
// CHECK-DAG: %[[Q:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[QOFF:.*]] = tensor.splat %[[Q]] : tensor<1xi64>
// CHECK-DAG: %[[KOFF:.*]] = tensor.splat %[[K]] : tensor<1xi64>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[QOFF]] : tensor<1xi64>) k_offset(%[[KOFF]] : tensor<1xi64>) causal scale = 1.000000e+00 :
// CHECK-NOT: linalg.
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %c1 = arith.constant 1 : index
    %lim = arith.subi %i, %c1 : index
    %ok = arith.cmpi sle, %j, %lim : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// j <= i + INT64_MAX wraps in the program for i >= 1 (those rows see no
// key) and no position is that large: left alone, with a remark.
// CHECK-LABEL: func.func @causal_offset_int64_max
func.func @causal_offset_int64_max(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %cmax = arith.constant 9223372036854775807 : index
    %lim = arith.addi %i, %cmax : index
    %ok = arith.cmpi sle, %j, %lim : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the mask computed in the body is `key <= query + offset`, but its offset arithmetic reaches 9223372036854775807, beyond +-2^62 in index}}
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// In i32, i + 2^30 + 1 may wrap (for rows near 2^30): left alone too.
// CHECK-LABEL: func.func @causal_offset_i32_wraps
func.func @causal_offset_i32_wraps(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %i32 = arith.index_cast %i : index to i32
    %j32 = arith.index_cast %j : index to i32
    %cbig = arith.constant 1073741825 : i32
    %lim = arith.addi %i32, %cbig : i32
    %ok = arith.cmpi sle, %j32, %lim : i32
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the mask computed in the body is `key <= query + offset`, but its offset arithmetic reaches 1073741825, beyond +-2^30 in i32}}
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// j < i - INT64_MIN: negating the constant overflows 64 bits: left alone.
// CHECK-LABEL: func.func @causal_offset_min_int
func.func @causal_offset_min_int(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x4x5xf32>
  %t6 = linalg.transpose ins(%k : tensor<2x5x4xf32>) outs(%t5 : tensor<2x4x5xf32>) permutation = [0, 2, 1]
  %t4 = linalg.batch_matmul ins(%q, %t6 : tensor<2x2x4xf32>, tensor<2x4x5xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %cmin = arith.constant -9223372036854775808 : index
    %lim = arith.subi %i, %cmin : index
    %ok = arith.cmpi slt, %j, %lim : index
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %x, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = tensor.empty() : tensor<2x2x5xf32>
  %t10 = linalg.softmax dimension(2) ins(%t8 : tensor<2x2x5xf32>) outs(%t9 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t11 = arith.constant 0.0 : f32
  %t12 = tensor.empty() : tensor<2x2x4xf32>
  %t13 = linalg.fill ins(%t11 : f32) outs(%t12 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the mask computed in the body is `key <= query + offset`, but its offset arithmetic reaches -9223372036854775808}}
  %t14 = linalg.batch_matmul ins(%t10, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t13 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t14 : tensor<2x2x4xf32>
}

// -----

// TOSA as a framework lowers SDPA: Q·Kᵀ by tosa.matmul of a tosa.transpose,
// a constant tosa.mul (shift 0), an additive mask, the softmax as
// reduce_max / sub / exp / reduce_sum / reciprocal / mul, then P·V.
// CHECK-LABEL: func.func @tosa_additive
func.func @tosa_additive(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<1x2x5xf32>) -> tensor<2x2x4xf32> {
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: tensor<1x2x5xf32>)
// CHECK-NOT: tosa.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]] : tensor<1x2x5xf32>) scale = 5.000000e-01 :
// CHECK-NOT: tosa.
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %ss = tosa.mul %s, %c, %sh : (tensor<2x2x5xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %sm = tosa.add %ss, %mask : (tensor<2x2x5xf32>, tensor<1x2x5xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %sm {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %sm, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %r = tosa.reciprocal %su : (tensor<2x2x1xf32>) -> tensor<2x2x1xf32>
  %p = tosa.mul %x, %r, %sh : (tensor<2x2x5xf32>, tensor<2x2x1xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}

// -----

// The scale on Q, and a constant mask that is exactly the lower-right
// triangle (j <= i + 3 = i + S - L): the causal form.
// CHECK-LABEL: func.func @tosa_causal_constant
func.func @tosa_causal_constant(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK-NOT: tosa.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} causal = lower_right scale = 5.000000e-01 :
// CHECK-NOT: tosa.
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %mask = "tosa.const"() <{values = dense<[[[0.0, 0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0, 0.0]]]> : tensor<1x2x5xf32>}> : () -> tensor<1x2x5xf32>
  %qs = tosa.mul %q, %c, %sh : (tensor<2x2x4xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<2x2x4xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %qs, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %sm = tosa.add %s, %mask : (tensor<2x2x5xf32>, tensor<1x2x5xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %sm {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %sm, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %r = tosa.reciprocal %su : (tensor<2x2x1xf32>) -> tensor<2x2x1xf32>
  %p = tosa.mul %r, %x, %sh : (tensor<2x2x1xf32>, tensor<2x2x5xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}

// -----

// A boolean mask by tosa.select with -inf: the general i1 mask.
// CHECK-LABEL: func.func @tosa_select
func.func @tosa_select(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<2x2x5xi1>) -> tensor<2x2x4xf32> {
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: tensor<2x2x5xi1>)
// CHECK-NOT: tosa.
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]] : tensor<2x2x5xi1>) scale = 1.000000e+00 :
// CHECK-NOT: tosa.
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %ninf = "tosa.const"() <{values = dense<0xFF800000> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %sm = tosa.select %mask, %s, %ninf : (tensor<2x2x5xi1>, tensor<2x2x5xf32>, tensor<1x1x1xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %sm {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %sm, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %r = tosa.reciprocal %su : (tensor<2x2x1xf32>) -> tensor<2x2x1xf32>
  %p = tosa.mul %x, %r, %sh : (tensor<2x2x5xf32>, tensor<2x2x1xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}

// -----

// The softmax's sum over axis 1 (the queries): not attention.
// CHECK-LABEL: func.func @tosa_wrong_sum_axis
func.func @tosa_wrong_sum_axis(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
// CHECK: tosa.reduce_sum
// CHECK-NOT: kvattn.
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<2x2x4xf32>, tensor<2x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x5xf32>
  %m = tosa.reduce_max %s {axis = 2 : i32} : (tensor<2x2x5xf32>) -> tensor<2x2x1xf32>
  %d = tosa.sub %s, %m : (tensor<2x2x5xf32>, tensor<2x2x1xf32>) -> tensor<2x2x5xf32>
  %x = tosa.exp %d : (tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %su = tosa.reduce_sum %x {axis = 1 : i32} : (tensor<2x2x5xf32>) -> tensor<2x1x5xf32>
  %r = tosa.reciprocal %su : (tensor<2x1x5xf32>) -> tensor<2x1x5xf32>
  %p = tosa.mul %x, %r, %sh : (tensor<2x2x5xf32>, tensor<2x1x5xf32>, tensor<1xi8>) -> tensor<2x2x5xf32>
  // expected-remark @below {{not raised to kvattn.sdpa: the softmax's tosa.reduce_sum is over axis 1, not the key axis 2}}
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<2x2x5xf32>, tensor<2x5x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x2x4xf32>
  return %o : tensor<2x2x4xf32>
}

// -----

// A constant ALiBi bias (issue 35): -slope_h * |i + 3 - j| per head h (the
// batch dim: slopes 0.5 and 0.25) with -inf past the lower-right causal
// bound becomes kvattn.attention with alibi_slopes, q_offset = 3 and causal,
// without the mask (test/Numerics/raise-sdpa-linalg.mlir compares the
// numerics with upstream MLIR).
// CHECK-LABEL: func.func @alibi_causal
// CHECK: %[[THREE:.*]] = arith.constant 3 : i64
// CHECK: %[[QO:.*]] = tensor.splat %[[THREE]] : tensor<1xi64>
// CHECK: %[[SLOPES:.*]] = arith.constant dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>
// CHECK: kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[QO]] : tensor<1xi64>) alibi_slopes(%[[SLOPES]] : tensor<2xf32>) causal scale = 5.000000e-01
// CHECK-NOT: linalg.generic
func.func @alibi_causal(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %mask = arith.constant dense<[[[-1.5, -1.0, -0.5, -0.0, 0xFF800000], [-2.0, -1.5, -1.0, -0.5, -0.0]], [[-0.75, -0.5, -0.25, -0.0, 0xFF800000], [-1.0, -0.75, -0.5, -0.25, -0.0]]]> : tensor<2x2x5xf32>
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x2x5xf32>
  %t6 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t5 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 2.0 : f32
    %m = arith.divf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t6, %mask : tensor<2x2x5xf32>, tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = arith.constant 0xFF800000 : f32
  %t10 = tensor.empty() : tensor<2x2xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t12 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t13 = tensor.empty() : tensor<2x2x5xf32>
  %t14 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8, %t12 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t13 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t15 = arith.constant 0.0 : f32
  %t16 = tensor.empty() : tensor<2x2xf32>
  %t17 = linalg.fill ins(%t15 : f32) outs(%t16 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t18 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t14 : tensor<2x2x5xf32>) outs(%t17 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t19 = tensor.empty() : tensor<2x2x5xf32>
  %t20 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t14, %t18 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t19 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t21 = arith.constant 0.0 : f32
  %t22 = tensor.empty() : tensor<2x2x4xf32>
  %t23 = linalg.fill ins(%t21 : f32) outs(%t22 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t24 = linalg.batch_matmul ins(%t20, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t23 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t24 : tensor<2x2x4xf32>
}

// -----

// Without the causal part: the two-sided distance, not causal.
// CHECK-LABEL: func.func @alibi_bidirectional
// CHECK: kvattn.attention {{.*}} q_offset(%{{.*}} : tensor<1xi64>) alibi_slopes(%{{.*}} : tensor<2xf32>) scale = 5.000000e-01 : tensor<1x2x2x4xf32>
func.func @alibi_bidirectional(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %mask = arith.constant dense<[[[-1.5, -1.0, -0.5, -0.0, -0.5], [-2.0, -1.5, -1.0, -0.5, -0.0]], [[-0.75, -0.5, -0.25, -0.0, -0.25], [-1.0, -0.75, -0.5, -0.25, -0.0]]]> : tensor<2x2x5xf32>
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x2x5xf32>
  %t6 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t5 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 2.0 : f32
    %m = arith.divf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t6, %mask : tensor<2x2x5xf32>, tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = arith.constant 0xFF800000 : f32
  %t10 = tensor.empty() : tensor<2x2xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t12 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t13 = tensor.empty() : tensor<2x2x5xf32>
  %t14 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8, %t12 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t13 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t15 = arith.constant 0.0 : f32
  %t16 = tensor.empty() : tensor<2x2xf32>
  %t17 = linalg.fill ins(%t15 : f32) outs(%t16 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t18 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t14 : tensor<2x2x5xf32>) outs(%t17 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t19 = tensor.empty() : tensor<2x2x5xf32>
  %t20 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t14, %t18 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t19 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t21 = arith.constant 0.0 : f32
  %t22 = tensor.empty() : tensor<2x2x4xf32>
  %t23 = linalg.fill ins(%t21 : f32) outs(%t22 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t24 = linalg.batch_matmul ins(%t20, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t23 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t24 : tensor<2x2x4xf32>
}

// -----

// One entry off the distance line (-0.4 where ALiBi says -0.5): a general
// additive mask, raised as such.
// CHECK-LABEL: func.func @alibi_not_linear
// CHECK: kvattn.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<2x2x5xf32>)
// CHECK-NOT: alibi_slopes
func.func @alibi_not_linear(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %mask = arith.constant dense<[[[-1.5, -1.0, -0.5, -0.0, -0.5], [-2.0, -1.5, -1.0, -0.5, -0.0]], [[-0.75, -0.4, -0.25, -0.0, -0.25], [-1.0, -0.75, -0.5, -0.25, -0.0]]]> : tensor<2x2x5xf32>
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x2x5xf32>
  %t6 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t5 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 2.0 : f32
    %m = arith.divf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t6, %mask : tensor<2x2x5xf32>, tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = arith.constant 0xFF800000 : f32
  %t10 = tensor.empty() : tensor<2x2xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t12 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t13 = tensor.empty() : tensor<2x2x5xf32>
  %t14 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8, %t12 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t13 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t15 = arith.constant 0.0 : f32
  %t16 = tensor.empty() : tensor<2x2xf32>
  %t17 = linalg.fill ins(%t15 : f32) outs(%t16 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t18 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t14 : tensor<2x2x5xf32>) outs(%t17 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t19 = tensor.empty() : tensor<2x2x5xf32>
  %t20 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t14, %t18 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t19 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t21 = arith.constant 0.0 : f32
  %t22 = tensor.empty() : tensor<2x2x4xf32>
  %t23 = linalg.fill ins(%t21 : f32) outs(%t22 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t24 = linalg.batch_matmul ins(%t20, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t23 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t24 : tensor<2x2x4xf32>
}

// -----

// The ALiBi bias computed from the positions (linalg.index: the distance
// |i + 3 - j|, -inf past the causal bound) times the slopes per head, in
// two linalg.generic ops without run-time inputs: evaluated at compile
// time (raise::evaluateConstantMask), it is the bias above; both generics
// are gone.
// CHECK-LABEL: func.func @alibi_from_positions
// CHECK-NOT: linalg.generic
// CHECK: %[[SLOPES:.*]] = arith.constant dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>
// CHECK-NOT: linalg.generic
// CHECK: kvattn.attention {{.*}} q_offset(%{{.*}} : tensor<1xi64>) alibi_slopes(%[[SLOPES]] : tensor<2xf32>) causal scale = 5.000000e-01
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @alibi_from_positions(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
  %slopes = arith.constant dense<[0.5, 0.25]> : tensor<2xf32>
  %e0 = tensor.empty() : tensor<2x2x5xf32>
  %dist = linalg.generic {indexing_maps = [affine_map<(h, i, j) -> (h, i, j)>], iterator_types = ["parallel", "parallel", "parallel"]} outs(%e0 : tensor<2x2x5xf32>) {
  ^bb0(%o: f32):
    %i = linalg.index 1 : index
    %j = linalg.index 2 : index
    %ii = arith.index_cast %i : index to i64
    %jj = arith.index_cast %j : index to i64
    %three = arith.constant 3 : i64
    %qp = arith.addi %ii, %three : i64
    %d = arith.subi %qp, %jj : i64
    %ad = math.absi %d : i64
    %fd = arith.sitofp %ad : i64 to f32
    %ok = arith.cmpi sle, %jj, %qp : i64
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %ok, %fd, %ninf : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %e1 = tensor.empty() : tensor<2x2x5xf32>
  %mask = linalg.generic {indexing_maps = [affine_map<(h, i, j) -> (h, i, j)>, affine_map<(h, i, j) -> (h)>, affine_map<(h, i, j) -> (h, i, j)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%dist, %slopes : tensor<2x2x5xf32>, tensor<2xf32>) outs(%e1 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sl: f32, %o: f32):
    %neg = arith.negf %sl : f32
    %b = arith.mulf %neg, %x : f32
    %ninf = arith.constant 0xFF800000 : f32
    %isinf = arith.cmpf oeq, %x, %ninf : f32
    %r = arith.select %isinf, %ninf, %b : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t1 = arith.constant 0.0 : f32
  %t2 = tensor.empty() : tensor<2x2x5xf32>
  %t3 = linalg.fill ins(%t1 : f32) outs(%t2 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t4 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%q, %k : tensor<2x2x4xf32>, tensor<2x5x4xf32>) outs(%t3 : tensor<2x2x5xf32>) -> tensor<2x2x5xf32>
  %t5 = tensor.empty() : tensor<2x2x5xf32>
  %t6 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t4 : tensor<2x2x5xf32>) outs(%t5 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = arith.constant 2.0 : f32
    %m = arith.divf %x, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x5xf32>
  %t7 = tensor.empty() : tensor<2x2x5xf32>
  %t8 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t6, %mask : tensor<2x2x5xf32>, tensor<2x2x5xf32>) outs(%t7 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mk: f32, %o: f32):
    %r = arith.addf %x, %mk : f32
    linalg.yield %r : f32
  } -> tensor<2x2x5xf32>
  %t9 = arith.constant 0xFF800000 : f32
  %t10 = tensor.empty() : tensor<2x2xf32>
  %t11 = linalg.fill ins(%t9 : f32) outs(%t10 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t12 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t8 : tensor<2x2x5xf32>) outs(%t11 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.maxnumf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t13 = tensor.empty() : tensor<2x2x5xf32>
  %t14 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t8, %t12 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t13 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<2x2x5xf32>
  %t15 = arith.constant 0.0 : f32
  %t16 = tensor.empty() : tensor<2x2xf32>
  %t17 = linalg.fill ins(%t15 : f32) outs(%t16 : tensor<2x2xf32>) -> tensor<2x2xf32>
  %t18 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t14 : tensor<2x2x5xf32>) outs(%t17 : tensor<2x2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %r = arith.addf %in, %acc : f32
    linalg.yield %r : f32
  } -> tensor<2x2xf32>
  %t19 = tensor.empty() : tensor<2x2x5xf32>
  %t20 = linalg.generic {indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>, affine_map<(a, b, c) -> (a, b)>, affine_map<(a, b, c) -> (a, b, c)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t14, %t18 : tensor<2x2x5xf32>, tensor<2x2xf32>) outs(%t19 : tensor<2x2x5xf32>) {
  ^bb0(%x: f32, %sx: f32, %o: f32):
    %d = arith.divf %x, %sx : f32
    linalg.yield %d : f32
  } -> tensor<2x2x5xf32>
  %t21 = arith.constant 0.0 : f32
  %t22 = tensor.empty() : tensor<2x2x4xf32>
  %t23 = linalg.fill ins(%t21 : f32) outs(%t22 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  %t24 = linalg.batch_matmul ins(%t20, %v : tensor<2x2x5xf32>, tensor<2x5x4xf32>) outs(%t23 : tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
  return %t24 : tensor<2x2x4xf32>
}
