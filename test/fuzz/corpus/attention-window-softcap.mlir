func.func @main(%q: tensor<2x8x4x64xbf16>, %k: tensor<2x2x40x64xbf16>, %v: tensor<2x2x40x64xbf16>) -> (tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>) {
  %q_offset = arith.constant dense<[16, 33]> : tensor<2xi32>
  %kv_len = arith.constant dense<[20, 37]> : tensor<2xi32>
  %out, %lse = kvattn.attention %q, %k, %v q_offset(%q_offset : tensor<2xi32>) kv_len(%kv_len : tensor<2xi32>) causal window = 16 softcap = 30.0 : tensor<2x8x4x64xbf16>, tensor<2x2x40x64xbf16>, tensor<2x2x40x64xbf16> -> tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
  return %out, %lse : tensor<2x8x4x64xbf16>, tensor<2x8x4xf32>
}
