// The front-end path of paged KV (docs/semantics.md, "Paged KV"), on the
// CPU path against the reference: per step, kvattn.append of the new K and
// V into the page caches through the block table, then kvattn.attention
// over the appended pages with block_table, q_offset = pos,
// kv_len = pos + L and causal. The same steps over a plain [B, H, C, D]
// cache (kvattn.append, kvattn.attention with q_offset and kv_len) must
// give the same outputs.
//
// B = 2, GQA 4/2, D = 8, page_size 4, pages in a permuted order with two
// pages no sequence uses. A prefill writes 6 tokens to both sequences;
// sequence 0 then keeps 3 of them (the others were, say, rejected draft
// tokens) and sequence 1 all 6, so the steps run at ragged positions:
// L = 4 at pos [3, 6] (crossing page boundaries), then L = 1 at [7, 10].
// Every input is distinct (kvattn-run's default), so a token written to a
// wrong page or row, or read from one, fails; out2 (the final K pages) is
// checked against the reference row by row, the pages no write touches
// included.
//
// RUN: kvattn-run %s --entry=steps --target=cpu --check --expect-same=0,1 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=steps --target=cpu --check --expect-same=0,1 --block-m=1 --block-n=2 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=steps --target=cpu --check --expect-same=0,1 --split-kv=3 | FileCheck %s --check-prefix=OK
// OK: same out0 out1: {{.*}} PASS
// OK: check out2: {{.*}} PASS
// OK: {{^PASS$}}
//
// One decode step with run-time positions and table: valid, then rejected
// by the reference before any compiled code runs, each error naming the
// batch, the slot and the value.
// RUN: kvattn-run %s --entry=decode --target=cpu --check --input 2=7,10 --input 3=5,2,-1,0,6,3 | FileCheck %s --check-prefix=DECODE
// DECODE: {{^PASS$}}
// A write past the pages: sequence 1 holds 12 tokens in 3 pages of 4.
// RUN: not kvattn-run %s --entry=decode --target=cpu --input 2=7,12 --input 3=5,2,-1,0,6,3 2>&1 | FileCheck %s --check-prefix=PAST
// PAST: 'kvattn.append': pos[1] = 12 with L = 1 does not fit the 3 page(s) of block_table[1] (page_size 4, at most 12 tokens): token 12 falls in slot 3 (batch 1)
// A write into a -1 slot: sequence 0 has 2 pages.
// RUN: not kvattn-run %s --entry=decode --target=cpu --input 2=8,10 --input 3=5,2,-1,0,6,3 2>&1 | FileCheck %s --check-prefix=SLOT
// SLOT: 'kvattn.append': pos[0] = 8 with L = 1 does not fit the 2 page(s) of block_table[0] (page_size 4, at most 8 tokens): token 8 falls in slot 2 (batch 0)
// RUN: not kvattn-run %s --entry=decode --target=cpu --input 2=7,10 --input 3=5,2,-1,0,7,3 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: 'kvattn.append': block_table[1][1] = 7: page id out of range [0, 7) (batch 1)
// RUN: not kvattn-run %s --entry=decode --target=cpu --input 2=7,10 --input 3=5,2,-1,0,3,3 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: 'kvattn.append': block_table[1][2] = 3: page 3 is already used at slot 1 of the same sequence (batch 1)
// RUN: not kvattn-run %s --entry=decode --target=cpu --input 2=-1,10 --input 3=5,2,-1,0,6,3 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: 'kvattn.append': pos[0] = -1 is negative (batch 0)
// Two sequences sharing page 5 may both read it, but not both write one row.
// RUN: not kvattn-run %s --entry=decode --target=cpu --input 2=1,1 --input 3=5,2,-1,5,6,3 2>&1 | FileCheck %s --check-prefix=SHARED
// SHARED: 'kvattn.append': block_table[1][0] = 5: token 1 writes row 1 of page 5, which batch 0 also writes (batch 1)

func.func @steps(%q1: tensor<2x4x4x8xf32>, %q2: tensor<2x4x1x8xf32>,
                 %k0: tensor<2x2x6x8xf32>, %v0: tensor<2x2x6x8xf32>,
                 %k1: tensor<2x2x4x8xf32>, %v1: tensor<2x2x4x8xf32>,
                 %k2: tensor<2x2x1x8xf32>, %v2: tensor<2x2x1x8xf32>,
                 %kp: tensor<7x4x2x8xf32>, %vp: tensor<7x4x2x8xf32>,
                 %kc: tensor<2x2x12x8xf32>, %vc: tensor<2x2x12x8xf32>)
    -> (tensor<2x4x5x8xf32>, tensor<2x4x5x8xf32>, tensor<7x4x2x8xf32>) {
  // Sequence 0: pages 5, 2; sequence 1: pages 0, 6, 3. Pages 1 and 4 unused.
  %bt = arith.constant dense<[[5, 2, -1], [0, 6, 3]]> : tensor<2x3xi32>
  %pos0 = arith.constant dense<[0, 0]> : tensor<2xi32>
  %pos1 = arith.constant dense<[3, 6]> : tensor<2xi32>
  %len1 = arith.constant dense<[7, 10]> : tensor<2xi32>
  %pos2 = arith.constant dense<[7, 10]> : tensor<2xi32>
  %len2 = arith.constant dense<[8, 11]> : tensor<2xi32>

  // Paged.
  %kpa = kvattn.append %k0 into %kp at %pos0 block_table(%bt : tensor<2x3xi32>) : tensor<2x2x6x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %vpa = kvattn.append %v0 into %vp at %pos0 block_table(%bt : tensor<2x3xi32>) : tensor<2x2x6x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %kpb = kvattn.append %k1 into %kpa at %pos1 block_table(%bt : tensor<2x3xi32>) : tensor<2x2x4x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %vpb = kvattn.append %v1 into %vpa at %pos1 block_table(%bt : tensor<2x3xi32>) : tensor<2x2x4x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %po1 = kvattn.attention %q1, %kpb, %vpb q_offset(%pos1 : tensor<2xi32>) kv_len(%len1 : tensor<2xi32>) block_table(%bt : tensor<2x3xi32>) causal : tensor<2x4x4x8xf32>, tensor<7x4x2x8xf32>, tensor<7x4x2x8xf32> -> tensor<2x4x4x8xf32>
  %kpc = kvattn.append %k2 into %kpb at %pos2 block_table(%bt : tensor<2x3xi32>) : tensor<2x2x1x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %vpc = kvattn.append %v2 into %vpb at %pos2 block_table(%bt : tensor<2x3xi32>) : tensor<2x2x1x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %po2 = kvattn.attention %q2, %kpc, %vpc q_offset(%pos2 : tensor<2xi32>) kv_len(%len2 : tensor<2xi32>) block_table(%bt : tensor<2x3xi32>) causal : tensor<2x4x1x8xf32>, tensor<7x4x2x8xf32>, tensor<7x4x2x8xf32> -> tensor<2x4x1x8xf32>
  %paged = tensor.concat dim(2) %po1, %po2 : (tensor<2x4x4x8xf32>, tensor<2x4x1x8xf32>) -> tensor<2x4x5x8xf32>

  // Plain [B, H, C, D] caches, C = max_pages * page_size.
  %kca = kvattn.append %k0 into %kc at %pos0 : tensor<2x2x6x8xf32> into tensor<2x2x12x8xf32>, tensor<2xi32>
  %vca = kvattn.append %v0 into %vc at %pos0 : tensor<2x2x6x8xf32> into tensor<2x2x12x8xf32>, tensor<2xi32>
  %kcb = kvattn.append %k1 into %kca at %pos1 : tensor<2x2x4x8xf32> into tensor<2x2x12x8xf32>, tensor<2xi32>
  %vcb = kvattn.append %v1 into %vca at %pos1 : tensor<2x2x4x8xf32> into tensor<2x2x12x8xf32>, tensor<2xi32>
  %co1 = kvattn.attention %q1, %kcb, %vcb q_offset(%pos1 : tensor<2xi32>) kv_len(%len1 : tensor<2xi32>) causal : tensor<2x4x4x8xf32>, tensor<2x2x12x8xf32>, tensor<2x2x12x8xf32> -> tensor<2x4x4x8xf32>
  %kcc = kvattn.append %k2 into %kcb at %pos2 : tensor<2x2x1x8xf32> into tensor<2x2x12x8xf32>, tensor<2xi32>
  %vcc = kvattn.append %v2 into %vcb at %pos2 : tensor<2x2x1x8xf32> into tensor<2x2x12x8xf32>, tensor<2xi32>
  %co2 = kvattn.attention %q2, %kcc, %vcc q_offset(%pos2 : tensor<2xi32>) kv_len(%len2 : tensor<2xi32>) causal : tensor<2x4x1x8xf32>, tensor<2x2x12x8xf32>, tensor<2x2x12x8xf32> -> tensor<2x4x1x8xf32>
  %plain = tensor.concat dim(2) %co1, %co2 : (tensor<2x4x4x8xf32>, tensor<2x4x1x8xf32>) -> tensor<2x4x5x8xf32>

  return %paged, %plain, %kpc : tensor<2x4x5x8xf32>, tensor<2x4x5x8xf32>, tensor<7x4x2x8xf32>
}

// One decode step over run-time positions and block table.
func.func @decode(%q: tensor<2x4x1x8xf32>, %knew: tensor<2x2x1x8xf32>,
                  %pos: tensor<2xi32>, %bt: tensor<2x3xi32>,
                  %kp: tensor<7x4x2x8xf32>, %vp: tensor<7x4x2x8xf32>, %vnew: tensor<2x2x1x8xf32>)
    -> (tensor<2x4x1x8xf32>, tensor<7x4x2x8xf32>) {
  %kp2 = kvattn.append %knew into %kp at %pos block_table(%bt : tensor<2x3xi32>) : tensor<2x2x1x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %vp2 = kvattn.append %vnew into %vp at %pos block_table(%bt : tensor<2x3xi32>) : tensor<2x2x1x8xf32> into tensor<7x4x2x8xf32>, tensor<2xi32>
  %c1 = arith.constant dense<1> : tensor<2xi32>
  %len = arith.addi %pos, %c1 : tensor<2xi32>
  %o = kvattn.attention %q, %kp2, %vp2 q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x3xi32>) causal : tensor<2x4x1x8xf32>, tensor<7x4x2x8xf32>, tensor<7x4x2x8xf32> -> tensor<2x4x1x8xf32>
  return %o, %kp2 : tensor<2x4x1x8xf32>, tensor<7x4x2x8xf32>
}
