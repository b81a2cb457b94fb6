// Numerics of -kvattn-raise-sdpa on linalg input: each function is run as
// written by upstream MLIR alone (mlir-opt: one-shot-bufferize, linalg to
// loops, to LLVM; mlir-runner) and, raised, by kvattn-run --target=cpu; the
// results must agree within atol = rtol = 2e-5 (f32; raise_compare.py).
// The inputs vary along every axis, keys included, so a causal triangle
// aligned one key off changes the output (the negative RUN lines show it).
// L = 2 new rows over S = 5 keys: lower-right is offset 3, upper-left 0.
//
// RUN: %raise-compare %s --entry=additive | FileCheck %s
// RUN: %raise-compare %s --entry=causal_lower_right | FileCheck %s
// RUN: %raise-compare %s --entry=causal_other_offset | FileCheck %s
//
// A cache position given at run time: 3 (lower-right: the appended rows see
// the 3 cached keys), 0 (upper-left) and 1.
// RUN: %raise-compare %s --entry=causal_cache_position --int 3=3 | FileCheck %s
// RUN: %raise-compare %s --entry=causal_cache_position --int 3=0 | FileCheck %s
// RUN: %raise-compare %s --entry=causal_cache_position --int 3=1 | FileCheck %s
//
// The check is sharp: kvattn run with the upper-left position (0) where the
// program means 3, or one key off (2), disagrees with upstream.
// RUN: not %raise-compare %s --entry=causal_cache_position --int 3=3 --kvattn-int 3=0 \
// RUN:   | FileCheck %s --check-prefix=WRONG
// RUN: not %raise-compare %s --entry=causal_cache_position --int 3=3 --kvattn-int 3=2 \
// RUN:   | FileCheck %s --check-prefix=WRONG

// Negative offsets (issue 30 item 9): j < i, and a cache position of -1
// (j <= i - 1), raised to q_offset = 0, k_offset = 1 (a negative q_offset
// is refused at run time). Row 0 sees no key: upstream NaN, kvattn 0.
// RUN: %raise-compare %s --entry=causal_strict --empty-rows-zero | FileCheck %s --check-prefixes=EMPTY,CHECK
// RUN: %raise-compare %s --entry=causal_cache_position --int 3=-1 --empty-rows-zero | FileCheck %s --check-prefixes=EMPTY,CHECK
// EMPTY: raise_compare: 8 elements in rows with no allowed key

// RUN: %raise-compare %s --entry=alibi_causal | FileCheck %s
// RUN: %raise-compare %s --entry=alibi_bidirectional | FileCheck %s
// RUN: %raise-compare %s --entry=alibi_from_positions | FileCheck %s

// CHECK: raise_compare: @{{.*}} 16 elements {{.*}} PASS
// WRONG: raise_compare: @{{.*}} FAIL

func.func @additive(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %mask: tensor<2x5xf32>) -> tensor<2x2x4xf32> {
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

func.func @causal_lower_right(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
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

func.func @causal_other_offset(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
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

func.func @causal_cache_position(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %pos: tensor<i32>) -> tensor<2x2x4xf32> {
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

func.func @causal_strict(%q: tensor<2x2x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x2x4xf32> {
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

// ALiBi as a constant bias (issue 35): per head h (the batch dim here)
// -slope_h * |i + 3 - j| with slopes 0.5 and 0.25, the causal part -inf
// (lower-right over the 3 cached keys), and the same without it (a
// two-sided distance): raised to kvattn.attention with alibi_slopes and
// q_offset = 3 (test/Passes/kvattn-raise-sdpa.mlir shows the op).
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

// The same bias computed from the positions (linalg.index), the distance
// times the slopes per head: evaluated at compile time, it is ALiBi.
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
