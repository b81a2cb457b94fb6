// Writes to a full disk are errors that name the file and the reason, never
// "LLVM ERROR: IO failure" (an abort) nor a success that leaves an empty
// file (issue 30 item 8). /dev/full fails every write with ENOSPC: a dump
// directory whose file links to it stands for a full disk.
//
// kvattn-run --dump-outputs:
// RUN: rm -rf %t && mkdir -p %t/dump && ln -s /dev/full %t/dump/out0.npy
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --dump-outputs %t/dump 2>&1 | FileCheck %s --check-prefix=NPY
// NPY: kvattn-run: error: writing '{{.*}}dump/out0.npy' failed: No space left on device
//
// Results printed to a full standard output:
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --print-outputs > /dev/full 2> %t/stdout.err
// RUN: FileCheck %s --check-prefix=STDOUT < %t/stdout.err
// STDOUT: kvattn-run: error: writing the standard output failed: No space left on device
// STDOUT-NOT: LLVM ERROR

func.func @attention(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x5x4xf32>, %v: tensor<1x1x5x4xf32>,
    %qo: tensor<1xi32>, %len: tensor<1xi32>) -> tensor<1x1x2x4xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) kv_len(%len : tensor<1xi32>) causal
      : tensor<1x1x2x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x4xf32> -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}
