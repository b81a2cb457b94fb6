// kvattn-run names what is wrong and exits non-zero; it never crashes.
// RUN: not kvattn-run %s --entry=append 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not kvattn-run %s --entry=append --input 5=14 2>&1 | FileCheck %s --check-prefix=CAPACITY
// RUN: not kvattn-run %s --entry=append --input 5=1,2 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not kvattn-run %s --entry=append --input 5=%t.missing.npy 2>&1 | FileCheck %s --check-prefix=NOFILE
// RUN: not kvattn-run %s --entry=attention --input 3=3 --input 4=7 2>&1 | FileCheck %s --check-prefix=KVLEN
// RUN: not kvattn-run %s --entry=attention --input 3=-1 --input 4=2 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not kvattn-run %s --entry=nope 2>&1 | FileCheck %s --check-prefix=ENTRY
// RUN: not kvattn-run %s 2>&1 | FileCheck %s --check-prefix=AMBIGUOUS
// RUN: not kvattn-run %s --entry=append --input 9=1 2>&1 | FileCheck %s --check-prefix=ARGNUM
// RUN: not kvattn-run %s --entry=append --input 5=0 --stats 2>&1 | FileCheck %s --check-prefix=TARGET

// MISSING: kvattn-run: error: argument 5 (tensor<1xi32>) holds positions, lengths or a mask and is not generated: give it with --input 5=FILE.npy or --input 5=v0,v1,...
// CAPACITY: kvattn-run: error: {{.*}}kvattn-run-errors.mlir:{{[0-9]+}}:{{[0-9]+}}: 'kvattn.append': pos[0] = 14 writes rows [14, 16) outside the cache capacity C = 8 (batch 0)
// COUNT: kvattn-run: error: argument 5 (tensor<1xi32>): 2 values given, 1 needed (or one to fill it)
// NOFILE: kvattn-run: error: cannot open '{{.*}}.missing.npy'
// KVLEN: kvattn-run: error: {{.*}}'kvattn.attention': kv_len[0] = 7 is outside [0, S = 5] (batch 0)
// NEGATIVE: kvattn-run: error: {{.*}}'kvattn.attention': q_offset[0] = -1 is negative (batch 0)
// ENTRY: kvattn-run: error: no function 'nope'
// AMBIGUOUS: kvattn-run: error: several public functions in '{{.*}}': choose one with --entry
// ARGNUM: kvattn-run: error: --input '9=1': the function has 6 arguments
// TARGET: kvattn-run: error: --stats reports the compiled schedule: use it with --target=cpu

func.func @append(%q: tensor<1x1x2x4xf32>, %kc: tensor<1x1x8x4xf32>, %vc: tensor<1x1x8x4xf32>,
    %kn: tensor<1x1x2x4xf32>, %vn: tensor<1x1x2x4xf32>, %pos: tensor<1xi32>) -> tensor<1x1x2x4xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x2x4xf32> into tensor<1x1x8x4xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x2x4xf32> into tensor<1x1x8x4xf32>, tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x2x4xf32>, tensor<1x1x8x4xf32>, tensor<1x1x8x4xf32> -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}

func.func @attention(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x5x4xf32>, %v: tensor<1x1x5x4xf32>,
    %qo: tensor<1xi32>, %len: tensor<1xi32>) -> tensor<1x1x2x4xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) kv_len(%len : tensor<1xi32>) causal
      : tensor<1x1x2x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x4xf32> -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}
