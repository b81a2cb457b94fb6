// kvattn-run --plan refuses, by name, a step a plan cannot run: an append
// whose tokens are not the attention's query rows (a plan runs all its
// kernels with one set of sizes; here 2 new tokens under 1 query row).
//
// REQUIRES: libdevice
// RUN: not kvattn-run %s --entry=two_tokens_one_row --target=gpu-emu --plan=device --input 5=3 --input 6=5 2>&1 | FileCheck %s --check-prefix=SIZES
// SIZES: planning @two_tokens_one_row: an append writes B = 1, L = 2 tokens of Hkv = 1 heads into S = 8 slots, the attention reads B = 1, L = 1, Hkv = 1, S = 8: a plan runs with one set of sizes

// The same step launched op by op (no plan) runs:
// RUN: kvattn-run %s --entry=two_tokens_one_row --target=gpu-emu --check --input 5=3 --input 6=5 | FileCheck %s --check-prefix=OK
// OK: {{^PASS$}}

func.func @two_tokens_one_row(%q: tensor<1x1x1x8xf32>, %k: tensor<1x1x8x8xf32>, %v: tensor<1x1x8x8xf32>, %k_new: tensor<1x1x2x8xf32>, %v_new: tensor<1x1x2x8xf32>, %pos: tensor<1xi32>, %kv_len: tensor<1xi32>) -> tensor<1x1x1x8xf32> {
  %k2 = kvattn.append %k_new into %k at %pos : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf32>, tensor<1xi32>
  %v2 = kvattn.append %v_new into %v at %pos : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf32>, tensor<1xi32>
  %o = kvattn.attention %q, %k2, %v2 kv_len(%kv_len : tensor<1xi32>) : tensor<1x1x1x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32> -> tensor<1x1x1x8xf32>
  return %o : tensor<1x1x1x8xf32>
}
