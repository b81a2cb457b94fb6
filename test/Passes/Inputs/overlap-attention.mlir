// A bf16 hd 128 cached-append attention whose 128 x 128 wgmma programs
// (two consumer warpgroups, a producer, two V stages) take the
// intra-warpgroup overlap (kvattn-lower-tile-to-gpu.mlir).
func.func @overlap(%q: tensor<1x4x256x128xbf16>, %k: tensor<1x2x1024x128xbf16>, %v: tensor<1x2x1024x128xbf16>,
                   %pos: tensor<1xi32>) -> tensor<1x4x256x128xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x4x256x128xbf16>, tensor<1x2x1024x128xbf16>, tensor<1x2x1024x128xbf16> -> tensor<1x4x256x128xbf16>
  return %o : tensor<1x4x256x128xbf16>
}
