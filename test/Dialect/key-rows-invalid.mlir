// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// The verifier rules of k_start (ragged keys) and cache_batch_idx (a
// batch-to-cache map) on kvattn.attention; the value rules are stated once
// in include/kvattn/Support/KeyRows.h (the reference and the runtime give
// the same messages).

func.func @k_start_key_batch(%q: tensor<2x4x1x16xf32>, %k: tensor<2x2x40x16xf32>, %ck: tensor<3xi32>) {
  // expected-error @+1 {{with k_start the key is packed ([1, Hkv, N, D]): its dim 0 must be 1, got 2}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) : tensor<2x4x1x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_entries(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<4xi32>) {
  // expected-error @+1 {{batch size B mismatch: k_start (entries - 1) dim 0 is 3 but query dim 0 is 2}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<4xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_rank(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<3x1xi32>) {
  // expected-error @+1 {{k_start must have rank 1 [B + 1], got rank 2}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3x1xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_empty(%q: tensor<?x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<0xi32>) {
  // expected-error @+1 {{k_start must have B + 1 entries (at least 1), got 0}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<0xi32>) : tensor<?x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<?x4x1x16xf32>
  return
}

// -----

func.func @k_start_with_cache_batch_idx(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<3xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{k_start (packed keys) does not combine with cache_batch_idx (a batch-to-cache map): the packed keys have one cache row}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) cache_batch_idx(%idx : tensor<2xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_paged(%q: tensor<1x4x3x16xf32>, %pages: tensor<1x4x2x16xf32>, %cu: tensor<3xi32>, %ck: tensor<3xi32>, %len: tensor<2xi32>, %bt: tensor<2x2xi32>) {
  // expected-error @+1 {{k_start does not combine with block_table: a paged cache maps each sequence to its pages already}}
  %o = kvattn.attention %q, %pages, %pages q_start(%cu : tensor<3xi32>) k_start(%ck : tensor<3xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x2xi32>) : tensor<1x4x3x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32> -> tensor<1x4x3x16xf32>
  return
}

// -----

func.func @k_start_key_valid(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<3xi32>, %valid: tensor<2x40xi1>) {
  // expected-error @+1 {{k_start does not combine with key_valid: give each sequence's keys as rows of the packed buffer and its length as kv_len}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) key_valid(%valid : tensor<2x40xi1>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_explicit(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<3xi32>, %qp: tensor<2x1xi64>, %kp: tensor<2x40xi64>) {
  // expected-error @+1 {{k_start (packed keys) does not combine with explicit positions (q_pos/k_pos): give each sequence's first key position as k_offset}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) q_pos(%qp : tensor<2x1xi64>) k_pos(%kp : tensor<2x40xi64>) causal : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_mask(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<3xi32>, %m: tensor<1x40xi1>) {
  // expected-error @+1 {{k_start (packed keys) does not combine with a mask: use causal, window and kv_len}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) mask(%m : tensor<1x40xi1>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_decreasing(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>) {
  %ck = arith.constant dense<[0, 9, 4]> : tensor<3xi32>
  // expected-error @+1 {{invalid k_start: k_start[2] = 4 is below k_start[1] = 9: key starts must not decrease (batch 1)}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_negative(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>) {
  %ck = arith.constant dense<[-1, 9, 14]> : tensor<3xi32>
  // expected-error @+1 {{invalid k_start: k_start[0] = -1 is negative: key rows start at row 0 or later (batch 0)}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_past_rows(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>) {
  %ck = arith.constant dense<[0, 9, 41]> : tensor<3xi32>
  // expected-error @+1 {{invalid k_start: k_start[2] = 41 is past the packed key rows N = 40 (batch 1)}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @k_start_kv_len(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>) {
  %ck = arith.constant dense<[0, 9, 14]> : tensor<3xi32>
  %len = arith.constant dense<[9, 6]> : tensor<2xi32>
  // expected-error @+1 {{invalid k_start: kv_len[1] = 6 exceeds the 5 key row(s) of the sequence (k_start[1] = 9 .. k_start[2] = 14): a sequence reads only its own rows (batch 1)}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) kv_len(%len : tensor<2xi32>) : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @cache_batch_idx_shape(%q: tensor<2x4x1x16xf32>, %k: tensor<5x2x40x16xf32>, %idx: tensor<3xi32>) {
  // expected-error @+1 {{batch size B mismatch: cache_batch_idx dim 0 is 3 but query dim 0 is 2}}
  %o = kvattn.attention %q, %k, %k cache_batch_idx(%idx : tensor<3xi32>) : tensor<2x4x1x16xf32>, tensor<5x2x40x16xf32>, tensor<5x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @cache_batch_idx_value_rows(%q: tensor<2x4x1x16xf32>, %k: tensor<5x2x40x16xf32>, %v: tensor<4x2x40x16xf32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{batch size B mismatch: value dim 0 is 4 but key dim 0 is 5}}
  %o = kvattn.attention %q, %k, %v cache_batch_idx(%idx : tensor<2xi32>) : tensor<2x4x1x16xf32>, tensor<5x2x40x16xf32>, tensor<4x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @cache_batch_idx_range(%q: tensor<2x4x1x16xf32>, %k: tensor<5x2x40x16xf32>) {
  %idx = arith.constant dense<[3, 5]> : tensor<2xi32>
  // expected-error @+1 {{invalid cache_batch_idx: cache_batch_idx[1] = 5 is outside [0, C = 5): the cache has 5 row(s) (batch 1)}}
  %o = kvattn.attention %q, %k, %k cache_batch_idx(%idx : tensor<2xi32>) : tensor<2x4x1x16xf32>, tensor<5x2x40x16xf32>, tensor<5x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @cache_batch_idx_negative(%q: tensor<2x4x1x16xf32>, %k: tensor<?x2x40x16xf32>) {
  %idx = arith.constant dense<[-2, 0]> : tensor<2xi32>
  // expected-error @+1 {{invalid cache_batch_idx: cache_batch_idx[0] = -2 is negative (batch 0)}}
  %o = kvattn.attention %q, %k, %k cache_batch_idx(%idx : tensor<2xi32>) : tensor<2x4x1x16xf32>, tensor<?x2x40x16xf32>, tensor<?x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @cache_batch_idx_key_valid(%q: tensor<2x4x1x16xf32>, %k: tensor<5x2x40x16xf32>, %idx: tensor<2xi32>, %valid: tensor<2x40xi1>) {
  // expected-error @+1 {{cache_batch_idx does not combine with key_valid: bound each batch's keys with kv_len}}
  %o = kvattn.attention %q, %k, %k cache_batch_idx(%idx : tensor<2xi32>) key_valid(%valid : tensor<2x40xi1>) : tensor<2x4x1x16xf32>, tensor<5x2x40x16xf32>, tensor<5x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}
