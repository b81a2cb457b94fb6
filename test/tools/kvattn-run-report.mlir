// kvattn-run --check reports the distribution of the drift, not only its
// maximum: max, mean, p95 and p99 of |result - reference| per result, named
// by what it is (out, lse), in text and (--report FILE) as JSON. The JSON's
// figures are recomputed with numpy from the dumped results and reference
// (and by kvattn.drift, the Python side), so a wrong percentile fails.
// The f32 results differ from the double-precision reference in most
// elements (NUMPY checks that the drift is not all zero).
// RUN: rm -rf %t && mkdir -p %t
// RUN: kvattn-run %s --target=reference --input 3=5,11 --dump-outputs %t/ref
// RUN: kvattn-run %s --target=cpu --input 3=5,11 --dump-outputs %t/cpu --check --report %t/report.json | FileCheck %s
// RUN: %python %S/Inputs/check_drift_report.py %t/report.json %t/cpu %t/ref | FileCheck %s --check-prefix=NUMPY
// RUN: FileCheck %s --check-prefix=JSON --input-file=%t/report.json
// RUN: not kvattn-run %s --target=cpu --input 3=5,11 --report %t/r.json 2>&1 | FileCheck %s --check-prefix=NOCHECK
// RUN: not kvattn-run %s --target=cpu --input 3=5,11 --check --report %t/missing/dir/r.json 2>&1 | FileCheck %s --check-prefix=OPEN

// CHECK: check out0: {{.*}} PASS
// CHECK-NEXT: drift out0 (out, 1024 elements): max={{[0-9.e-]+}} mean={{[0-9.e-]+}} p95={{[0-9.e-]+}} p99={{[0-9.e-]+}}
// CHECK-NEXT: check out1: {{.*}} PASS
// CHECK-NEXT: drift out1 (lse, 64 elements): max=
// CHECK-NEXT: PASS

// NUMPY: out0 out f32: max={{.*}} nonzero={{[1-9][0-9]*}}
// NUMPY: out1 lse f32:
// NUMPY: OK

// JSON: "entry": "f32_append",
// JSON: "name": "out",
// JSON: "p99_abs":
// JSON: "name": "lse",
// JSON: "pass": true
// JSON: "target": "cpu"

// NOCHECK: kvattn-run: error: --report writes the comparison of --check: add --check
// OPEN: kvattn-run: error: --report: cannot open '{{.*}}missing/dir/r.json':

func.func @f32_append(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x24x16xf32>,
    %v: tensor<2x2x24x16xf32>, %pos: tensor<2xi32>)
    -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>) {
  %c8 = arith.constant dense<8> : tensor<2xi32>
  %len = arith.addi %pos, %c8 : tensor<2xi32>
  %o, %lse = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) causal
      : tensor<2x4x8x16xf32>, tensor<2x2x24x16xf32>, tensor<2x2x24x16xf32>
      -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return %o, %lse : tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
}
