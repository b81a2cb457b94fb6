// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-tile
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="block-m=-16 block-n=32" 2>&1 | FileCheck %s --check-prefix=BADOPT
// BADOPT: error: kvattn-tile: block-m, block-n and num-warps must be positive or 0 (automatic; num-warps automatic with block-m), num-stages positive (got -16, 32, 0, 2)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="block-m=0 num-warps=4" 2>&1 | FileCheck %s --check-prefix=AUTOWARPS
// AUTOWARPS: error: kvattn-tile: block-m, block-n and num-warps must be positive or 0 (automatic; num-warps automatic with block-m), num-stages positive (got 0, 64, 4, 2)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="block-m=65536" 2>&1 | FileCheck %s --check-prefix=BLOCKM
// BLOCKM: error: kvattn-tile: block-m = 65536 is above the limit 256 (docs/robustness.md)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="block-n=1000000" 2>&1 | FileCheck %s --check-prefix=BLOCKN
// BLOCKN: error: kvattn-tile: block-n = 1000000 is above the limit 256 (docs/robustness.md)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="block-m=64 num-warps=65536" 2>&1 | FileCheck %s --check-prefix=WARPS
// WARPS: error: kvattn-tile: num-warps = 65536 is above the limit 16 (docs/robustness.md)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="num-stages=9" 2>&1 | FileCheck %s --check-prefix=STAGES
// STAGES: error: kvattn-tile: num-stages = 9 is above the limit 8 (docs/robustness.md)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="split-kv=257" 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT: error: kvattn-tile: split-kv = 257 is above the limit 256 (docs/robustness.md)
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="split-min-keys=-1" 2>&1 | FileCheck %s --check-prefix=SPLITRULE
// SPLITRULE: error: kvattn-tile: split-min-keys and split-warps-per-sm must not be negative, got -1 and 0
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="max-warp-rows=24" 2>&1 | FileCheck %s --check-prefix=WARPROWS
// WARPROWS: error: kvattn-tile: max-warp-rows must be 16 or 32, got 24
// RUN: not kvattn-opt %s -split-input-file -kvattn-tile="shared-memory-per-sm=-1" 2>&1 | FileCheck %s --check-prefix=SMEMSM
// SMEMSM: error: kvattn-tile: shared-memory-per-sm must not be negative, got -1

func.func @dynamic_head_dim(%q: tensor<1x1x4x?xf32>, %k: tensor<1x1x8x?xf32>, %v: tensor<1x1x8x16xf32>) -> tensor<1x1x4x16xf32> {
  // expected-error @+1 {{kvattn-tile needs static head dims D and Dv (they size the per-program tiles), got D = ?, Dv = 16}}
  %o = kvattn.attention %q, %k, %v scale = 0.25 : tensor<1x1x4x?xf32>, tensor<1x1x8x?xf32>, tensor<1x1x8x16xf32> -> tensor<1x1x4x16xf32>
  return %o : tensor<1x1x4x16xf32>
}

// -----

func.func @sdpa_left(%q: tensor<1x1x4x16xf32>, %k: tensor<1x1x8x16xf32>, %v: tensor<1x1x8x16xf32>) -> tensor<1x1x4x16xf32> {
  // expected-error @+1 {{kvattn-tile takes kvattn.attention; run -kvattn-resolve-cached-append first}}
  %o = kvattn.sdpa %q, %k, %v : tensor<1x1x4x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<1x1x4x16xf32>
  return %o : tensor<1x1x4x16xf32>
}

// -----

func.func @head_dim_above_limit(%q: tensor<1x1x4x1024xf32>, %k: tensor<1x1x8x1024xf32>, %v: tensor<1x1x8x16xf32>) -> tensor<1x1x4x16xf32> {
  // expected-error @+1 {{kvattn-tile: head dims above 576 are not compiled (D = 1024, Dv = 16; docs/robustness.md)}}
  %o = kvattn.attention %q, %k, %v : tensor<1x1x4x1024xf32>, tensor<1x1x8x1024xf32>, tensor<1x1x8x16xf32> -> tensor<1x1x4x16xf32>
  return %o : tensor<1x1x4x16xf32>
}

// -----

func.func @too_many_elements(%q: tensor<1x1x4611686018427387904x8xf32>, %k: tensor<1x1x8x8xf32>, %v: tensor<1x1x8x8xf32>) -> tensor<1x1x4611686018427387904x8xf32> {
  // expected-error @+1 {{kvattn-tile: operand 0 ('tensor<1x1x4611686018427387904x8xf32>') has more than 2^48 elements}}
  %o = kvattn.attention %q, %k, %v : tensor<1x1x4611686018427387904x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32> -> tensor<1x1x4611686018427387904x8xf32>
  return %o : tensor<1x1x4611686018427387904x8xf32>
}

// -----

// Empty (B = 0), but the strides of the other dims overflow int64: found
// by kvattn-fuzz-capi (UBSan in the kernel ABI's stride product).
func.func @empty_with_huge_dims(%q: tensor<0x6x9223372036854775807x8xf32>, %k: tensor<0x6x3x8xf32>, %v: tensor<0x6x3x8xf32>) -> tensor<0x6x9223372036854775807x8xf32> {
  // expected-error @+1 {{kvattn-tile: operand 0 ('tensor<0x6x9223372036854775807x8xf32>') has more than 2^48 elements (counting its non-zero dims)}}
  %o = kvattn.attention %q, %k, %v : tensor<0x6x9223372036854775807x8xf32>, tensor<0x6x3x8xf32>, tensor<0x6x3x8xf32> -> tensor<0x6x9223372036854775807x8xf32>
  return %o : tensor<0x6x9223372036854775807x8xf32>
}
