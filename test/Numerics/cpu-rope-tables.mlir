// RoPE from tables (FlashAttention's rotary_cos / rotary_sin) on the CPU
// path against the reference (kvattn-run --check): a #kvattn.rope without
// theta takes each rotated row's cosines and sines from row `position` of
// the tables [P, R/2] (generated values in [-1, 1): no theta could give
// them, so a path that ignored the tables fails the comparison). The query
// rotated in tile.load_q at positions in the thousands (scalar and vector
// lowerings), GPT-NeoX halves with partial rotary, interleaved pairs with
// bf16 tables, then a cache write that rotates its keys from the same
// tables. python/tests/test_rope_tables.py compares the same paths with a
// NumPy float64 reference built from Llama 3 scaled frequencies.
//
// RUN: kvattn-run %s --entry=halves --target=cpu --check --input 3=2990 --input 4=2980 --input 5=16 | FileCheck %s
// RUN: kvattn-run %s --entry=halves --target=cpu --check --vectorize=false --block-m=2 --block-n=4 --input 3=2990 --input 4=2980 --input 5=16 | FileCheck %s
// RUN: kvattn-run %s --entry=pairs_bf16 --target=cpu --check --input 3=2990 --input 4=2980 --input 5=13 | FileCheck %s
// RUN: kvattn-run %s --entry=append --target=cpu --check --input 4=3001 --input 5=-1 --input 6=3005 | FileCheck %s
// CHECK: {{^PASS$}}
//
// A position outside the tables is refused by name before anything runs:
// the query row 3 of the halves case (q_offset 2997, 3000 rows), the
// append's token 2 (pos 3006, 3008 rows).
// RUN: not kvattn-run %s --entry=halves --target=cpu --input 3=2997 --input 4=2980 --input 5=16 2>&1 | FileCheck %s --check-prefix=QUERY
// QUERY: rotary_cos: position 3000 of batch 0, row 3 is outside the table's 3000 rows
// RUN: not kvattn-run %s --entry=append --target=cpu --input 4=3006 --input 5=-1 --input 6=3010 2>&1 | FileCheck %s --check-prefix=KEY
// KEY: rotary_cos: position 3008 of batch 0, row 2 is outside the table's 3008 rows

func.func @halves(%q: tensor<1x4x5x32xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x32xf32>,
                  %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>,
                  %cos: tensor<3000x10xf32>, %sin: tensor<3000x10xf32>) -> tensor<1x4x5x32xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) causal rope = <rotary_dim = 20>
      rotary_cos(%cos : tensor<3000x10xf32>) rotary_sin(%sin : tensor<3000x10xf32>)
      : tensor<1x4x5x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32> -> tensor<1x4x5x32xf32>
  return %o : tensor<1x4x5x32xf32>
}

func.func @pairs_bf16(%q: tensor<1x2x3x24xbf16>, %k: tensor<1x1x16x24xbf16>, %v: tensor<1x1x16x24xbf16>,
                      %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>,
                      %cos: tensor<3000x12xbf16>, %sin: tensor<3000x12xbf16>) -> tensor<1x2x3x24xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) causal rope = <rotary_dim = 24, interleaved>
      rotary_cos(%cos : tensor<3000x12xbf16>) rotary_sin(%sin : tensor<3000x12xbf16>)
      : tensor<1x2x3x24xbf16>, tensor<1x1x16x24xbf16>, tensor<1x1x16x24xbf16> -> tensor<1x2x3x24xbf16>
  return %o : tensor<1x2x3x24xbf16>
}

// The cache holds 3001 keys; the 4 new ones are rotated at 3001..3004 from
// the tables, and the query rows at the same positions (kv_len 3005), with
// the record.
func.func @append(%q: tensor<1x2x4x16xf32>, %kn: tensor<1x1x4x16xf32>, %kc: tensor<1x1x3100x16xf32>,
                  %v: tensor<1x1x3100x16xf32>, %pos: tensor<1xi32>, %rec: tensor<1x3100xi32>,
                  %kl: tensor<1xi32>, %cos: tensor<3008x8xf16>, %sin: tensor<3008x8xf16>)
    -> (tensor<1x2x4x16xf32>, tensor<1x1x3100x16xf32>, tensor<1x3100xi32>) {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16>
      rotary_cos(%cos : tensor<3008x8xf16>) rotary_sin(%sin : tensor<3008x8xf16>)
      rope_pos(%rec : tensor<1x3100xi32>) : tensor<1x1x4x16xf32> into tensor<1x1x3100x16xf32>, tensor<1xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) kv_len(%kl : tensor<1xi32>)
      causal rope = <rotary_dim = 16>
      rotary_cos(%cos : tensor<3008x8xf16>) rotary_sin(%sin : tensor<3008x8xf16>)
      : tensor<1x2x4x16xf32>, tensor<1x1x3100x16xf32>, tensor<1x1x3100x16xf32> -> tensor<1x2x4x16xf32>
  return %o, %k, %k_rec : tensor<1x2x4x16xf32>, tensor<1x1x3100x16xf32>, tensor<1x3100xi32>
}
