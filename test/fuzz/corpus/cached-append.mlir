// A cached append as a framework emits it: a static KV cache of capacity 5
// holds 3 tokens per sequence; 2 new tokens are appended (kvattn.append)
// and attend over the cache with SDPA.
//
// @upper_left uses torch's is_causal=True: the triangle starts at key 0,
// so the appended tokens see only keys 0 and 0..1 -- the cached-append bug.
// @lower_right uses torch's causal_lower_right: the appended tokens sit
// after the cache and see keys 0..3 and 0..4.
//
//   kvattn-opt cached-append.mlir -kvattn-resolve-cached-append
//
// makes the positions explicit (q_offset = pos, kv_len = pos + 2) and warns
// about @upper_left; with fix-upper-left-appends=true it rewrites it.

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
