// kvattn.append with skip_padding (docs/semantics.md, "Padding tokens"):
// a token whose block-table entry is -1 writes nothing. This is how
// kvattn.torch.concat_and_cache_mla writes a batch that vLLM padded with
// slot -1: T tokens as T one-row sequences through a one-column table.
//
// @padded writes T = 4 tokens, two of them padding, with skip_padding;
// @unpadded writes only the two real tokens (the same rows, positions and
// pages) without it. The two caches must be equal element for element
// (--expect-same, exact): a padding token that wrote anywhere (page -1
// wrapping to the last page, or row 0 of page 0) changes one of them.
// Every input is distinct (kvattn-run's default), and --check compares
// each cache with the reference too. On the CPU path and on the emulated
// GPU (the append kernel, memcheck on: a padding token's -1 page is never
// dereferenced).
//
// RUN: kvattn-run %s --entry=both --target=cpu --check --expect-same=0,1 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=both --target=gpu-emu --check --expect-same=0,1 | FileCheck %s --check-prefix=OK
// OK: same out0 out1: {{.*}} PASS
// OK: {{^PASS$}}
//
// Run-time positions and table: the padding rows [-1] pass, every other
// rule still holds, each error naming the token (batch), slot and value.
// RUN: kvattn-run %s --entry=write --target=cpu --check --input 2=3,0,1,0 --input 3=0,-1,2,-1 | FileCheck %s --check-prefix=WRITE
// RUN: kvattn-run %s --entry=write --target=gpu-emu --check --input 2=3,0,1,0 --input 3=0,-1,2,-1 | FileCheck %s --check-prefix=WRITE
// WRITE: {{^PASS$}}
// A padding-only batch writes nothing (and is no error).
// RUN: kvattn-run %s --entry=write --target=cpu --check --input 2=0,0,0,0 --input 3=-1,-1,-1,-1 | FileCheck %s --check-prefix=WRITE
// A negative position (what concat_and_cache_mla makes of a slot -2).
// RUN: not kvattn-run %s --entry=write --target=cpu --input 2=3,-2,1,0 --input 3=0,-1,2,-1 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: 'kvattn.append': pos[1] = -2 is negative (batch 1)
// A page past the pool is still out of range (only -1 is padding).
// RUN: not kvattn-run %s --entry=write --target=cpu --input 2=3,0,1,0 --input 3=0,-1,3,-1 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: 'kvattn.append': block_table[2][0] = 3: page id out of range [0, 3) (batch 2)
// RUN: not kvattn-run %s --entry=write --target=cpu --input 2=3,0,1,0 --input 3=0,-2,2,-1 2>&1 | FileCheck %s --check-prefix=MINUS2
// MINUS2: 'kvattn.append': block_table[1][0] = -2: page id out of range [0, 3) (batch 1)
// A token past the table's slots (one page of 4 rows) is still refused.
// RUN: not kvattn-run %s --entry=write --target=cpu --input 2=3,4,1,0 --input 3=0,-1,2,-1 2>&1 | FileCheck %s --check-prefix=PAST
// PAST: 'kvattn.append': pos[1] = 4 with L = 1 does not fit the 1 page(s) of block_table[1] (page_size 4, at most 4 tokens): token 4 falls in slot 1 (batch 1)
// Padding tokens take no part in the shared-row rule; real ones do.
// RUN: not kvattn-run %s --entry=write --target=cpu --input 2=3,0,3,0 --input 3=0,-1,0,-1 2>&1 | FileCheck %s --check-prefix=SHARED
// SHARED: 'kvattn.append': block_table[2][0] = 0: token 3 writes row 3 of page 0, which batch 0 also writes (batch 2)

func.func @both(%u: tensor<4x1x1x8xf32>, %c: tensor<3x4x1x8xf32>)
    -> (tensor<3x4x1x8xf32>, tensor<3x4x1x8xf32>) {
  // Tokens 0 and 2 go to row 3 of page 0 and row 1 of page 2 (slots 3 and
  // 9); tokens 1 and 3 are padding.
  %pos = arith.constant dense<[3, 0, 1, 0]> : tensor<4xi64>
  %bt = arith.constant dense<[[0], [-1], [2], [-1]]> : tensor<4x1xi32>
  %padded = kvattn.append %u into %c at %pos block_table(%bt : tensor<4x1xi32>) skip_padding : tensor<4x1x1x8xf32> into tensor<3x4x1x8xf32>, tensor<4xi64>
  %u0 = tensor.extract_slice %u[0, 0, 0, 0] [1, 1, 1, 8] [1, 1, 1, 1] : tensor<4x1x1x8xf32> to tensor<1x1x1x8xf32>
  %u2 = tensor.extract_slice %u[2, 0, 0, 0] [1, 1, 1, 8] [1, 1, 1, 1] : tensor<4x1x1x8xf32> to tensor<1x1x1x8xf32>
  %real = tensor.concat dim(0) %u0, %u2 : (tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>) -> tensor<2x1x1x8xf32>
  %rpos = arith.constant dense<[3, 1]> : tensor<2xi64>
  %rbt = arith.constant dense<[[0], [2]]> : tensor<2x1xi32>
  %unpadded = kvattn.append %real into %c at %rpos block_table(%rbt : tensor<2x1xi32>) : tensor<2x1x1x8xf32> into tensor<3x4x1x8xf32>, tensor<2xi64>
  return %padded, %unpadded : tensor<3x4x1x8xf32>, tensor<3x4x1x8xf32>
}

func.func @write(%u: tensor<4x1x1x8xf32>, %c: tensor<3x4x1x8xf32>,
                 %pos: tensor<4xi64>, %bt: tensor<4x1xi32>)
    -> tensor<3x4x1x8xf32> {
  %r = kvattn.append %u into %c at %pos block_table(%bt : tensor<4x1xi32>) skip_padding : tensor<4x1x1x8xf32> into tensor<3x4x1x8xf32>, tensor<4xi64>
  return %r : tensor<3x4x1x8xf32>
}
