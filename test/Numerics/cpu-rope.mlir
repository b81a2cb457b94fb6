// RoPE on the CPU path against the reference (kvattn-run --check): the
// query rotated in tile.load_q at positions in the thousands (q_offset
// 2990, keys from k_offset 2980), GPT-NeoX halves with partial rotary and
// interleaved pairs, scalar and vector lowerings, bf16 with the rotated
// query rounded; then a cache write that rotates the keys and records their
// positions, read back by an attention that checks the record.
// python/tests/test_rope.py compares the same paths with a NumPy float64
// reference of the formula.
//
// RUN: kvattn-run %s --entry=halves --target=cpu --check --input 3=2990 --input 4=2980 --input 5=16 | FileCheck %s
// RUN: kvattn-run %s --entry=halves --target=cpu --check --vectorize=false --block-m=2 --block-n=4 --input 3=2990 --input 4=2980 --input 5=16 | FileCheck %s
// RUN: kvattn-run %s --entry=pairs_bf16 --target=cpu --check --input 3=2990 --input 4=2980 --input 5=13 | FileCheck %s
// RUN: kvattn-run %s --entry=append --target=cpu --check --input 4=5 --input 5=-1 --input 6=9 | FileCheck %s
// The record says the cache's keys were rotated at their slots 0..15, but
// the attention reads them from position 2980 on:
// RUN: not kvattn-run %s --entry=recorded --target=cpu --input 3=2990 --input 4=2980 --input 5=16 --input 6=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 2>&1 | FileCheck %s --check-prefix=MISMATCH
// CHECK: {{^PASS$}}
// MISMATCH: k_rope_pos: the key of batch 0, slot 0 was rotated at position 0 but is attended at position 2980

func.func @halves(%q: tensor<1x4x5x32xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x32xf32>,
                  %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>) -> tensor<1x4x5x32xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) causal rope = <rotary_dim = 20, theta = 10000.0>
      : tensor<1x4x5x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32> -> tensor<1x4x5x32xf32>
  return %o : tensor<1x4x5x32xf32>
}

func.func @pairs_bf16(%q: tensor<1x2x3x24xbf16>, %k: tensor<1x1x16x24xbf16>, %v: tensor<1x1x16x24xbf16>,
                      %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>) -> tensor<1x2x3x24xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) causal rope = <rotary_dim = 24, theta = 500000.0, interleaved>
      : tensor<1x2x3x24xbf16>, tensor<1x1x16x24xbf16>, tensor<1x1x16x24xbf16> -> tensor<1x2x3x24xbf16>
  return %o : tensor<1x2x3x24xbf16>
}

func.func @append(%q: tensor<1x2x4x16xf32>, %kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x12x16xf32>,
                  %v: tensor<1x1x12x16xf32>, %pos: tensor<1xi32>, %rec: tensor<1x12xi32>,
                  %kl: tensor<1xi32>) -> (tensor<1x2x4x16xf32>, tensor<1x1x12x16xf32>, tensor<1x12xi32>) {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16, theta = 10000.0>
      rope_pos(%rec : tensor<1x12xi32>) : tensor<1x1x4x16xf32> into tensor<1x1x12x16xf32>, tensor<1xi32>
  // The cache holds 5 keys; the 4 new ones are rotated at 5..8, and the
  // query rows at the same positions (kv_len 9).
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) kv_len(%kl : tensor<1xi32>)
      causal rope = <rotary_dim = 16, theta = 10000.0>
      : tensor<1x2x4x16xf32>, tensor<1x1x12x16xf32>, tensor<1x1x12x16xf32> -> tensor<1x2x4x16xf32>
  return %o, %k, %k_rec : tensor<1x2x4x16xf32>, tensor<1x1x12x16xf32>, tensor<1x12xi32>
}

func.func @recorded(%q: tensor<1x2x3x16xf32>, %k: tensor<1x1x16x16xf32>, %v: tensor<1x1x16x16xf32>,
                    %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>, %rec: tensor<1x16xi32>) -> tensor<1x2x3x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) k_rope_pos(%rec : tensor<1x16xi32>) causal rope = <rotary_dim = 16, theta = 10000.0>
      : tensor<1x2x3x16xf32>, tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32> -> tensor<1x2x3x16xf32>
  return %o : tensor<1x2x3x16xf32>
}
