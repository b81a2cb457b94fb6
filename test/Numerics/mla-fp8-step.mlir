// One DeepSeek MLA decode step over an FP8 latent cache (docs/semantics.md,
// "Latent KV"): the new token's latent row (c_kv 512 + k_pe 64, bf16) is
// quantised into the paged e4m3 cache by kvattn.append with per-token
// scales (RN_satfinite(x / scale), the written row's scale), then 16 query
// heads attend over the cache with k_scale alone: the scores read
// f32(code) * k_scale over all 576 columns, V the first 512 of the same
// row. kvattn-run --check compares each target with the reference, which
// quantises, dequantises and attends in float64; the written cache codes
// must equal the reference's byte for byte (--check compares every
// output). The per-token scales differ by pair of pages (0.25, 0.5, 0.75,
// 0.375; the sequences' pages are 5, 0, 3 and 1, 2), so a target that read
// V undequantised or with another page's scale fails the bf16 tolerance.
//
// DEFINE: %{scales} = --fill 6=0:128:0.25 --fill 6=128:128:0.5 --fill 6=256:128:0.75 --fill 6=384:128:0.375
// RUN: kvattn-run %s --target=cpu --check --input 3=130,20 --input 4=131,21 --input 5=5,0,3,-1,1,2,-1,-1 %{scales} | FileCheck %s
// RUN: kvattn-run %s --target=cpu --check --vectorize=false --input 3=130,20 --input 4=131,21 --input 5=5,0,3,-1,1,2,-1,-1 %{scales} | FileCheck %s
// The emulated GPU (the append kernel, then the latent kernel over the FP8
// cache), when libdevice is there (not under the sanitizers: the emulator is
// not instrumented, test/GpuEmu skips it there too):
// RUN: %if libdevice && !sanitizers %{ kvattn-run %s --target=gpu-emu --check --input 3=130,20 --input 4=131,21 --input 5=5,0,3,-1,1,2,-1,-1 %{scales} | FileCheck %s %}
// CHECK-COUNT-3: PASS
// CHECK: {{^PASS$}}

func.func @mla_fp8_decode_step(%q: tensor<2x16x1x576xbf16>,
                               %ckv_pages: tensor<8x64x1x576xf8E4M3FN>,
                               %ckv_new: tensor<2x1x1x576xbf16>,
                               %pos: tensor<2xi32>, %kv_len: tensor<2xi32>,
                               %block_table: tensor<2x4xi32>,
                               %scale: tensor<8x64x1xf32>)
    -> (tensor<2x16x1x512xbf16>, tensor<2x16x1xf32>,
        tensor<8x64x1x576xf8E4M3FN>) {
  %ckv = kvattn.append %ckv_new into %ckv_pages at %pos
      block_table(%block_table : tensor<2x4xi32>)
      kv_scale(%scale : tensor<8x64x1xf32>)
      : tensor<2x1x1x576xbf16> into tensor<8x64x1x576xf8E4M3FN>, tensor<2xi32>
  %out, %lse = kvattn.attention %q, %ckv value_dim = 512
      q_offset(%pos : tensor<2xi32>) kv_len(%kv_len : tensor<2xi32>)
      block_table(%block_table : tensor<2x4xi32>)
      k_scale(%scale : tensor<8x64x1xf32>) causal scale = 0.0721687836
      : tensor<2x16x1x576xbf16>, tensor<8x64x1x576xf8E4M3FN>
      -> tensor<2x16x1x512xbf16>, tensor<2x16x1xf32>
  return %out, %lse, %ckv : tensor<2x16x1x512xbf16>, tensor<2x16x1xf32>,
                            tensor<8x64x1x576xf8E4M3FN>
}
