// kvattn-opt is mlir-opt with kvattn: its passes are listed in --help, the
// dialects the pipelines lower through are registered, and upstream passes
// are available.
// RUN: kvattn-opt --help | FileCheck %s --check-prefix=HELP
// RUN: kvattn-opt --show-dialects | FileCheck %s --check-prefix=DIALECTS
// RUN: kvattn-opt %s --kvattn-resolve-cached-append --canonicalize --mlir-print-ir-after-all 2>&1 | FileCheck %s --check-prefix=PIPE

// HELP: --kvattn-resolve-cached-append
// HELP:   --fix-upper-left-appends
// HELP: --pass-pipeline

// DIALECTS: arith
// DIALECTS: gpu
// DIALECTS: kvattn
// DIALECTS: llvm
// DIALECTS: nvvm
// DIALECTS: scf
// DIALECTS: tensor
// DIALECTS: vector

// PIPE: IR Dump After ResolveCachedAppendPass (kvattn-resolve-cached-append)
// PIPE: IR Dump After Canonicalizer (canonicalize)
// PIPE: func.func @f
// PIPE: kvattn.attention
func.func @f(%q: tensor<1x1x2x8xf32>, %k: tensor<1x1x5x8xf32>, %v: tensor<1x1x5x8xf32>)
    -> tensor<1x1x2x8xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x2x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32> -> tensor<1x1x2x8xf32>
  return %o : tensor<1x1x2x8xf32>
}
