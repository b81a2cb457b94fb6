// kvattn loaded into upstream mlir-opt as a dialect plugin and a pass
// plugin (lib/Plugin): the dialect parses and verifies, the passes and the
// pipelines run, in Debian's mlir-opt-22 with nothing of kvattn linked in.
// An instrumented plugin cannot be loaded into the uninstrumented mlir-opt:
// UNSUPPORTED: sanitizers
//
// DEFINE: %{mlir-opt} = mlir-opt --load-dialect-plugin=%kvattn_plugin --load-pass-plugin=%kvattn_plugin
// Passes loaded by a plugin are named in --pass-pipeline (mlir-opt builds
// its per-pass flags before it loads plugins).
// RUN: %{mlir-opt} %s --pass-pipeline='builtin.module(kvattn-resolve-cached-append)' | FileCheck %s
// RUN: %{mlir-opt} %s --pass-pipeline='builtin.module(kvattn-to-cpu)' | FileCheck %s --check-prefix=CPU
// RUN: %{mlir-opt} %S/Inputs/plugin-verifier.mlir -verify-diagnostics -o /dev/null
// Without the plugins mlir-opt does not know the dialect:
// RUN: not mlir-opt %s 2>&1 | FileCheck %s --check-prefix=PLAIN

// CHECK-LABEL: func @lower_right
// CHECK:         kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%{{.*}} : tensor<1xi64>) causal
// CPU-LABEL:   llvm.func @lower_right
// CPU-NOT:       kvattn.
// PLAIN: Dialect `kvattn' not found for custom op 'kvattn.sdpa'
func.func @lower_right(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x5x8xf32>,
                       %v: tensor<1x2x5x8xf32>) -> tensor<1x2x2x8xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

