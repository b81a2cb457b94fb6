// A cached append  about @upper_left; wita fix-upper-left-appends=true it rewrites it.

func.func @upper_left(%q: tensor<1x1x2x1xf32>, %k_cache: tensor<1x1x5x1xf32>,
                      %v_cache: tensor<1x1x5x1xf32>, %k_new: tensor<1x1x2x1xf32>,
                      %v_new: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>)
    -> tensor<1x1x2x1xf32> {
  %k = kvattn.append %k_new into %k_cache at %pos
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %v = kvattn.append %v_new into %v_cache at %pos
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %out = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32>
      -> tensor<1x1x2x1xf32>
  return %out : tensor<1x1x2x1xf32>
}

func.func @lower_right(%q: tensor<1x1x2x1xf32>, %k_cache: tensor<1x1x5x1xf32>,
                       %v_cache: tensor<1x1x5x1xf32>, %k_new: tensor<1x1x2x1xf32>,
                       %v_new: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>)
    -> tensor<1x1x2x1xf32> {
  %k = kvattn.append %k_new into %k_cache at %pos
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %v = kvattn.append %v_new into %v_cache at %pos
      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %out = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32>
      -> tensor<1x1x2x1xf32>
  return %out : tensor<1x1x2x1xf32>
}
