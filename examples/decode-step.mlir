// One decode step of a serving engine, all of it on the GPU: write the new
// token's K and V into the cache (kvattn.append), then attend over the
// cache (kvattn.attention, GQA 8/2, bf16, D = 128). The positions are
// run-time values: the new token of sequence b sits at pos[b], so it sees
// the keys 0 .. pos[b] (kv_len = pos + 1; causal with q_offset = pos).
//
//   kvattn-compile decode-step.mlir -o out/step          # 3 kernels, in order
//   kvattn-run decode-step.mlir --entry=decode_step --target=gpu-emu --check \
//       --input 5=17,200 --input 6=18,201
//
// The manifest lists the kernels in launch order: the K append, the V
// append (kind "append": they write the caches in place), then the
// attention (kind "attention") that reads them; launch them in that order
// on one stream (docs/kernel-abi.md). @paged_decode_step is the same step
// over a cache of pages [num_pages, page_size, Hkv, D] and a block table.

func.func @decode_step(%q: tensor<2x8x1x128xbf16>,
                       %k_cache: tensor<2x2x256x128xbf16>,
                       %v_cache: tensor<2x2x256x128xbf16>,
                       %k_new: tensor<2x2x1x128xbf16>,
                       %v_new: tensor<2x2x1x128xbf16>,
                       %pos: tensor<2xi32>, %kv_len: tensor<2xi32>)
    -> (tensor<2x8x1x128xbf16>, tensor<2x2x256x128xbf16>,
        tensor<2x2x256x128xbf16>) {
  %k = kvattn.append %k_new into %k_cache at %pos
      : tensor<2x2x1x128xbf16> into tensor<2x2x256x128xbf16>, tensor<2xi32>
  %v = kvattn.append %v_new into %v_cache at %pos
      : tensor<2x2x1x128xbf16> into tensor<2x2x256x128xbf16>, tensor<2xi32>
  %out = kvattn.attention %q, %k, %v
      q_offset(%pos : tensor<2xi32>) kv_len(%kv_len : tensor<2xi32>) causal
      : tensor<2x8x1x128xbf16>, tensor<2x2x256x128xbf16>,
        tensor<2x2x256x128xbf16> -> tensor<2x8x1x128xbf16>
  return %out, %k, %v : tensor<2x8x1x128xbf16>, tensor<2x2x256x128xbf16>,
                        tensor<2x2x256x128xbf16>
}

func.func @paged_decode_step(%q: tensor<2x8x1x128xbf16>,
                             %k_pages: tensor<16x16x2x128xbf16>,
                             %v_pages: tensor<16x16x2x128xbf16>,
                             %k_new: tensor<2x2x1x128xbf16>,
                             %v_new: tensor<2x2x1x128xbf16>,
                             %pos: tensor<2xi32>, %kv_len: tensor<2xi32>,
                             %block_table: tensor<2x8xi32>)
    -> (tensor<2x8x1x128xbf16>, tensor<16x16x2x128xbf16>,
        tensor<16x16x2x128xbf16>) {
  %k = kvattn.append %k_new into %k_pages at %pos
      block_table(%block_table : tensor<2x8xi32>)
      : tensor<2x2x1x128xbf16> into tensor<16x16x2x128xbf16>, tensor<2xi32>
  %v = kvattn.append %v_new into %v_pages at %pos
      block_table(%block_table : tensor<2x8xi32>)
      : tensor<2x2x1x128xbf16> into tensor<16x16x2x128xbf16>, tensor<2xi32>
  %out = kvattn.attention %q, %k, %v
      q_offset(%pos : tensor<2xi32>) kv_len(%kv_len : tensor<2xi32>)
      block_table(%block_table : tensor<2x8xi32>) causal
      : tensor<2x8x1x128xbf16>, tensor<16x16x2x128xbf16>,
        tensor<16x16x2x128xbf16> -> tensor<2x8x1x128xbf16>
  return %out, %k, %v : tensor<2x8x1x128xbf16>, tensor<16x16x2x128xbf16>,
                        tensor<16x16x2x128xbf16>
}
