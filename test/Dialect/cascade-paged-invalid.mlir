// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// The verifier rules of a paged kvattn.cascade (prefix_pages, prefix_len,
// block_table).

func.func @prefix_len_missing(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %pp: tensor<4xi32>) {
  // expected-error @+1 {{prefix_pages and prefix_len go together: a paged prefix is the first prefix_len keys of its pages}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<4xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @prefix_pool_rank(%q: tensor<1x4x5x16xf32>, %pk: tensor<16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %pp: tensor<4xi32>, %pl: tensor<1xi32>) {
  // expected-error @+1 {{prefix_key must have rank 4 [num_pages, page_size, Hkv, D], got rank 3}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<4xi32>) prefix_len(%pl : tensor<1xi32>) : tensor<1x4x5x16xf32>, tensor<16x2x16xf32>, tensor<16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @prefix_len_entries(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %pp: tensor<4xi32>, %pl: tensor<2xi32>) {
  // expected-error @+1 {{prefix_len must have 1 entry (the prefix keys), got 2}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<4xi32>) prefix_len(%pl : tensor<2xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @prefix_heads(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x4x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %pp: tensor<4xi32>, %pl: tensor<1xi32>) {
  // expected-error @+1 {{kv heads Hkv mismatch: key dim 1 is 2 but prefix_key dim 2 is 4}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<4xi32>) prefix_len(%pl : tensor<1xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x4x16xf32>, tensor<8x16x4x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @prefix_pools(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x2x16xf32>, %pv: tensor<8x32x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %pp: tensor<4xi32>, %pl: tensor<1xi32>) {
  // expected-error @+1 {{page size page_size mismatch: prefix_value dim 1 is 32 but prefix_key dim 1 is 16}}
  %o = kvattn.cascade %q, %pk, %pv, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<4xi32>) prefix_len(%pl : tensor<1xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x2x16xf32>, tensor<8x32x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @block_table_batch(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<8x16x2x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %bt: tensor<2x4xi32>) {
  // expected-error @+1 {{batch size B mismatch: q_offset dim 0 is 3 but block_table dim 0 is 2}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) block_table(%bt : tensor<2x4xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @zero_page_size(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<8x0x2x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>, %bt: tensor<3x4xi32>) {
  // expected-error @+1 {{key page_size must be positive, got 0}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) block_table(%bt : tensor<3x4xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<8x0x2x16xf32>, tensor<8x0x2x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

// Constant tables: the rules of kvattn/Support/BlockTable.h, the prefix's
// under its own names.
func.func @prefix_page_range(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  %pp = arith.constant dense<[2, 8, -1]> : tensor<3xi32>
  %pl = arith.constant dense<20> : tensor<1xi32>
  // expected-error @+1 {{invalid prefix_pages: prefix_pages[1] = 8: page id out of range [0, 8)}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<3xi32>) prefix_len(%pl : tensor<1xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @prefix_len_fits(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  %pp = arith.constant dense<[2, 5, -1]> : tensor<3xi32>
  %pl = arith.constant dense<33> : tensor<1xi32>
  // expected-error @+1 {{invalid prefix_pages: prefix_len[0] = 33 does not fit the 2 page(s) of prefix_pages (page_size 16, at most 32 tokens)}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<3xi32>) prefix_len(%pl : tensor<1xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @prefix_page_twice(%q: tensor<1x4x5x16xf32>, %pk: tensor<8x16x2x16xf32>, %k: tensor<3x2x10x16xf32>, %qs: tensor<4xi32>, %b: tensor<3xi32>) {
  %pp = arith.constant dense<[2, 5, 2]> : tensor<3xi32>
  %pl = arith.constant dense<40> : tensor<1xi32>
  // expected-error @+1 {{invalid prefix_pages: prefix_pages[2] = 2: page 2 is already used at slot 0 of the same sequence}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%b : tensor<3xi32>) kv_len(%b : tensor<3xi32>) prefix_pages(%pp : tensor<3xi32>) prefix_len(%pl : tensor<1xi32>) : tensor<1x4x5x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32>, tensor<3x2x10x16xf32>, tensor<3x2x10x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @suffix_table(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<8x16x2x16xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>) {
  %bt = arith.constant dense<[[0, -1], [1, 2], [-1, 3]]> : tensor<3x2xi32>
  %kl = arith.constant dense<[4, 20, 0]> : tensor<3xi32>
  // expected-error @+1 {{invalid block table: block_table[2][1] = 3 follows the -1 at slot 0: the -1 tail must be canonical (batch 2)}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) block_table(%bt : tensor<3x2xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @suffix_kv_len_fits(%q: tensor<1x4x5x16xf32>, %pk: tensor<1x2x64x16xf32>, %k: tensor<8x16x2x16xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>) {
  %bt = arith.constant dense<[[0, -1], [1, 2], [3, -1]]> : tensor<3x2xi32>
  %kl = arith.constant dense<[4, 20, 17]> : tensor<3xi32>
  // expected-error @+1 {{invalid block table: kv_len[2] = 17 does not fit the 1 page(s) of block_table[2] (page_size 16, at most 16 tokens) (batch 2)}}
  %o = kvattn.cascade %q, %pk, %pk, %k, %k q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) block_table(%bt : tensor<3x2xi32>) : tensor<1x4x5x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32> -> tensor<1x4x5x16xf32>
  return
}
