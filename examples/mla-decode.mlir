// One DeepSeek MLA decode step in the absorbed (latent) form, as FlashMLA
// runs it: the new token's latent vector (c_kv, 512, then its rotary key
// k_pe, 64: one row of D = 576) is written into the paged latent cache
// (kvattn.append, page size 64), then 16 query heads of 576 attend over the
// one latent KV head, whose first 512 columns are also V (`value_dim = 512`,
// no value operand; docs/semantics.md, "Latent KV"). The softmax scale is
// DeepSeek's 1/sqrt(192); out is the 512-wide latent output (the caller
// applies W_UV). It runs on the CPU and the GPU targets (the GPU's latent
// kernel: docs/gpu-lowering.md, "The latent form"):
//
//   kvattn-run mla-decode.mlir --target=cpu --check \
//       --input 3=130,20 --input 4=131,21 --input 5=5,0,3,-1,1,2,-1,-1
//   kvattn-run mla-decode.mlir --target=gpu-emu --check (the same inputs)

func.func @mla_decode_step(%q: tensor<2x16x1x576xbf16>,
                           %ckv_pages: tensor<8x64x1x576xbf16>,
                           %ckv_new: tensor<2x1x1x576xbf16>,
                           %pos: tensor<2xi32>, %kv_len: tensor<2xi32>,
                           %block_table: tensor<2x4xi32>)
    -> (tensor<2x16x1x512xbf16>, tensor<2x16x1xf32>,
        tensor<8x64x1x576xbf16>) {
  %ckv = kvattn.append %ckv_new into %ckv_pages at %pos
      block_table(%block_table : tensor<2x4xi32>)
      : tensor<2x1x1x576xbf16> into tensor<8x64x1x576xbf16>, tensor<2xi32>
  %out, %lse = kvattn.attention %q, %ckv value_dim = 512
      q_offset(%pos : tensor<2xi32>) kv_len(%kv_len : tensor<2xi32>)
      block_table(%block_table : tensor<2x4xi32>) causal scale = 0.0721687836
      : tensor<2x16x1x576xbf16>, tensor<8x64x1x576xbf16>
      -> tensor<2x16x1x512xbf16>, tensor<2x16x1xf32>
  return %out, %lse, %ckv : tensor<2x16x1x512xbf16>, tensor<2x16x1xf32>,
                            tensor<8x64x1x576xbf16>
}
