// -kvattn-tile{max-position}: a window wider than every position difference
// is emitted as max-position + 1 (so a 32-bit kernel's index arithmetic
// holds it: a 2^31 window truncated to -2^31 admitted no key); narrower
// windows are unchanged. The default is 2^62 (kvattn's positions).
// RUN: kvattn-opt %s -split-input-file -kvattn-tile="max-position=2147483646" | FileCheck %s --check-prefix=I32
// RUN: kvattn-opt %s -split-input-file -kvattn-tile | FileCheck %s --check-prefix=DEFAULT
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="max-position=0" 2>&1 | FileCheck %s --check-prefix=BAD

// I32-LABEL: func @wide
// I32: kvattn.tile.mask {{.*}} causal window = 2147483647
// DEFAULT-LABEL: func @wide
// DEFAULT: kvattn.tile.mask {{.*}} causal window = 4294967298
// BAD: kvattn-tile: max-position must be 1 to 2^62, got 0
func.func @wide(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>,
    %qo: tensor<1xi32>) -> tensor<1x2x2x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal window = 4294967298
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// I32-LABEL: func @narrow
// I32: kvattn.tile.mask {{.*}} causal window = 16
func.func @narrow(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>,
    %qo: tensor<1xi32>) -> tensor<1x2x2x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal window = 16
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}
