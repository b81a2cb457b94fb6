func.func @main(%q: tensor<1x1x3x16xf32>, %k: tensor<1x1x8x16xf32>, %v: tensor<1x1x8x16xf32>, %mask: tensor<1x1x3x8xi1>) -> (tensor<1x1x3x16xf32>) {
  %q_pos = arith.constant dense<[9, 12, 14]> : tensor<3xi64>
  %q_pos_r = tensor.expand_shape %q_pos [[0, 1]] output_shape [1, 3] : tensor<3xi64> into tensor<1x3xi64>
  %k_pos = arith.constant dense<[0, 2, 5, 7, 9, 11, 12, 13]> : tensor<8xi64>
  %k_pos_r = tensor.expand_shape %k_pos [[0, 1]] output_shape [1, 8] : tensor<8xi64> into tensor<1x8xi64>
  %out = kvattn.attention %q, %k, %v q_pos(%q_pos_r : tensor<1x3xi64>) k_pos(%k_pos_r : tensor<1x8xi64>) mask(%mask : tensor<1x1x3x8xi1>) causal : tensor<1x1x3x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<1x1x3x16xf32>
  return %out : tensor<1x1x3x16xf32>
}
