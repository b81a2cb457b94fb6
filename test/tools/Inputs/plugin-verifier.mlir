// kvattn's verifier inside upstream mlir-opt (test/tools/mlir-opt-plugin.mlir).

func.func @verifier(%q: tensor<1x8x4x64xf32>, %k: tensor<1x3x16x64xf32>, %v: tensor<1x3x16x64xf32>) {
  // expected-error @+1 {{query heads Hq = 8 must be a multiple of kv heads Hkv = 3}}
  %o = kvattn.sdpa %q, %k, %v : tensor<1x8x4x64xf32>, tensor<1x3x16x64xf32>, tensor<1x3x16x64xf32> -> tensor<1x8x4x64xf32>
  return
}
