// Sizes, integers and magnitudes beyond what kvattn computes are named
// errors before anything is allocated or run (docs/robustness.md, limits).
// RUN: not kvattn-run %S/Inputs/huge-shapes.mlir --entry=long_query 2>&1 | FileCheck %s --check-prefix=ELEMENTS
// RUN: not kvattn-run %S/Inputs/huge-shapes.mlir --entry=many_heads 2>&1 | FileCheck %s --check-prefix=MEMORY
// RUN: not kvattn-run %s --entry=lengths --input 3=4294967298 2>&1 | FileCheck %s --check-prefix=WRAP
// RUN: not kvattn-run %s --entry=lengths --input 3=-2147483649 2>&1 | FileCheck %s --check-prefix=WRAPNEG
// RUN: not kvattn-run %s --entry=offsets --input 3=4611686018427387905 --target=cpu 2>&1 | FileCheck %s --check-prefix=POSITION
// RUN: kvattn-run %s --entry=offsets --input 3=4611686018427387904 --target=cpu --check | FileCheck %s --check-prefix=EDGE
// RUN: not kvattn-run %s --entry=lengths --input 0=2e19 --input 1=2e19 --input 3=4 --target=cpu 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: not kvattn-run %s --entry=lengths --input 2=1e38 --input 3=4 --target=cpu 2>&1 | FileCheck %s --check-prefix=VALUES
// Only keys below kv_len count: the same huge values past it are never read.
// RUN: kvattn-run %s --entry=lengths --input 3=2 --fill 1=16:16:2e19 --fill 2=16:16:1e38 --target=cpu --check | FileCheck %s --check-prefix=EDGE
// An f16 cache bounds its values (65,504): where the rule holds for any of
// them the per-call validation does not read the cache; where it does not
// (a scale of 1.5e33, 1.5e31), it reads it and decides as the reference:
// RUN: not %attention-case --dtype f16 --B 1 --Hq 2 --L 2 --S 8 --D 8 --q-offset 6 --causal --scale 1.5e33 -- --target=reference --magnitude 1000 2>&1 | FileCheck %s --check-prefix=F16SCALE
// RUN: not %attention-case --dtype f16 --B 1 --Hq 2 --L 2 --S 8 --D 8 --q-offset 6 --causal --scale 1.5e33 -- --target=cpu --magnitude 1000 2>&1 | FileCheck %s --check-prefix=F16SCALE
// F16SCALE: scores may overflow f32: max|q| = 954, max|k| = 987, D = 8, scale = 1.5e+33 bound them by 1.63e+40 > 3.4e38
// RUN: %attention-case --dtype f16 --B 1 --Hq 2 --L 2 --S 8 --D 8 --q-offset 6 --causal --scale 1.5e31 -- --target=cpu --magnitude 1000 | FileCheck %s --check-prefix=F16OK
// F16OK: out0: 1x2x2x8xf16
// 1e18 is within range: computed, and equal to the reference.
// RUN: kvattn-run %s --entry=lengths --input 0=1e18 --input 1=1e18 --input 3=4 --target=cpu --check | FileCheck %s --check-prefix=EDGE

// ELEMENTS: kvattn-run: error: argument 0 (tensor<1x1x4611686018427387904x8xf32>): a 1x1x4611686018427387904x8xf32 tensor cannot be made: more than 2^48 elements
// MEMORY: kvattn-run: error: argument 0 (tensor<1x1099511627776x4x8xf32>): a 1x1099511627776x4x8xf32 tensor needs 140737488355328 bytes, more than this machine's memory
// WRAP: kvattn-run: error: argument 3 (tensor<1xi32>): 4294967298 does not fit in i32
// WRAPNEG: kvattn-run: error: argument 3 (tensor<1xi32>): -2147483649 does not fit in i32
// POSITION: 'kvattn.attention': q_offset[0] = 4611686018427387905 is out of range (above 2^62, batch 0)
// EDGE: PASS
// SCORES: 'kvattn.attention': scores may overflow f32: max|q| = 2e+19, max|k| = 2e+19, D = 8, scale = 0.354 bound them by 4.62e+39 > 3.4e38
// VALUES: 'kvattn.attention': the weighted sum of values may overflow f32: max|v| = 1e+38 over 4 keys is above 3.4e38

func.func @lengths(%q: tensor<1x1x2x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %n: tensor<1xi32>) -> tensor<1x1x2x8xf32> {
  %o = kvattn.attention %q, %k, %v kv_len(%n : tensor<1xi32>) : tensor<1x1x2x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x2x8xf32>
  return %o : tensor<1x1x2x8xf32>
}

func.func @offsets(%q: tensor<1x1x2x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %qo: tensor<1xi64>) -> tensor<1x1x2x8xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi64>) causal : tensor<1x1x2x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x2x8xf32>
  return %o : tensor<1x1x2x8xf32>
}
