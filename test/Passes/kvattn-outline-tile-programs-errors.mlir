// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-tile -kvattn-outline-tile-programs

// GPU kernels take head dims up to 256 (the CPU path up to 512): refused
// before any GPU lowering, instead of minutes in the NVPTX back end.
func.func @gpu_head_dim(%q: tensor<1x1x4x512xf16>, %k: tensor<1x1x8x512xf16>, %v: tensor<1x1x8x64xf16>) -> tensor<1x1x4x64xf16> {
  // expected-error @+1 {{kvattn-outline-tile-programs: GPU kernels take head dims up to 256, the query has 512 (docs/robustness.md)}}
  %o = kvattn.attention %q, %k, %v : tensor<1x1x4x512xf16>, tensor<1x1x8x512xf16>, tensor<1x1x8x64xf16> -> tensor<1x1x4x64xf16>
  return %o : tensor<1x1x4x64xf16>
}

// -----

func.func @gpu_value_dim(%q: tensor<1x1x4x64xf16>, %k: tensor<1x1x8x64xf16>, %v: tensor<1x1x8x384xf16>) -> tensor<1x1x4x384xf16> {
  // expected-error @+1 {{kvattn-outline-tile-programs: GPU kernels take head dims up to 256, the value has 384 (docs/robustness.md)}}
  %o = kvattn.attention %q, %k, %v : tensor<1x1x4x64xf16>, tensor<1x1x8x64xf16>, tensor<1x1x8x384xf16> -> tensor<1x1x4x384xf16>
  return %o : tensor<1x1x4x384xf16>
}

// -----

// The latent form's limit (576) is its own: a plain attention of the same
// head dims is still refused.
func.func @not_latent_576(%q: tensor<1x16x1x576xbf16>, %k: tensor<1x1x64x576xbf16>, %v: tensor<1x1x64x512xbf16>) -> tensor<1x16x1x512xbf16> {
  // expected-error @+1 {{kvattn-outline-tile-programs: GPU kernels take head dims up to 256, the query has 576 (docs/robustness.md)}}
  %o = kvattn.attention %q, %k, %v : tensor<1x16x1x576xbf16>, tensor<1x1x64x576xbf16>, tensor<1x1x64x512xbf16> -> tensor<1x16x1x512xbf16>
  return %o : tensor<1x16x1x512xbf16>
}

// -----

// The latent form on tensor cores with explicit blocks whose warps would each
// keep all 512 accumulator columns (64 rows on 4 warps: no value split).
func.func @latent_explicit_warps(%q: tensor<1x16x1x576xbf16>, %k: tensor<4x64x1x576xbf16>, %len: tensor<1xi32>, %bt: tensor<1x4xi32>) -> tensor<1x16x1x512xbf16> {
  // expected-error @+1 {{kvattn-outline-tile-programs: the latent form's warps would each keep 512 accumulator columns (Dv = 512, block-m = 64, num-warps = 4), more than the registers hold (256): give num-warps = block-m / 16 x 2 or more, or leave block-m and num-warps automatic}}
  %o = kvattn.attention %q, %k value_dim = 512 kv_len(%len : tensor<1xi32>) block_table(%bt : tensor<1x4xi32>) : tensor<1x16x1x576xbf16>, tensor<4x64x1x576xbf16> -> tensor<1x16x1x512xbf16>
  return %o : tensor<1x16x1x512xbf16>
}
