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
