// Static shapes too large to make: kvattn-run-limits.mlir.

func.func @long_query(%q: tensor<1x1x4611686018427387904x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4611686018427387904x8xf32> {
  %o = kvattn.attention %q, %k, %v : tensor<1x1x4611686018427387904x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4611686018427387904x8xf32>
  return %o : tensor<1x1x4611686018427387904x8xf32>
}

func.func @many_heads(%q: tensor<1x1099511627776x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1099511627776x4x8xf32> {
  %o = kvattn.attention %q, %k, %v : tensor<1x1099511627776x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1099511627776x4x8xf32>
  return %o : tensor<1x1099511627776x4x8xf32>
}
