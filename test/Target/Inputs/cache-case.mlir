// The kernel of test/Target/kernel-cache.test: bf16 GQA decode over a
// dynamic batch and cache length.
func.func @decode(%q: tensor<?x8x1x64xbf16>, %k: tensor<?x2x?x64xbf16>,
                  %v: tensor<?x2x?x64xbf16>, %pos: tensor<?xi32>) -> tensor<?x8x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) causal
      : tensor<?x8x1x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x1x64xbf16>
  return %o : tensor<?x8x1x64xbf16>
}
