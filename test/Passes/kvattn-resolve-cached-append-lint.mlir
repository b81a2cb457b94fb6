// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-resolve-cached-append | FileCheck %s --enable-var-scope
// The lint: an upper-left causal SDPA over keys that come from a cache write
// keeps its torch meaning (q_offset = 0) and warns.

// CHECK-LABEL: func @upper_left_over_append
// CHECK:         %[[LEN:.*]] = arith.addi
// CHECK:         %[[ZERO:.*]] = arith.constant dense<0> : tensor<2xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[ZERO]] : tensor<2xi64>) kv_len(%[[LEN]] : tensor<2xi32>) causal
func.func @upper_left_over_append(%q: tensor<2x8x4x64xf16>, %kc: tensor<2x2x16x64xf16>,
    %vc: tensor<2x2x16x64xf16>, %kn: tensor<2x2x4x64xf16>, %vn: tensor<2x2x4x64xf16>,
    %pos: tensor<2xi32>) -> tensor<2x8x4x64xf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  // expected-warning @+1 {{upper-left causal attention over a KV-cache write (kvattn.append) whose cache may already hold keys: query row i sees only keys 0..i, so the appended rows miss the cached context. The torch is_causal=True meaning is kept; if the queries are the appended tokens, use a lower-right causal mask (causal = lower_right, torch's causal_lower_right) or run -kvattn-resolve-cached-append with fix-upper-left-appends=true}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  return %o : tensor<2x8x4x64xf16>
}

// -----

// Single-token decode with is_causal=True is the same bug: the one query
// row sees key 0 only.

// CHECK-LABEL: func @upper_left_decode_over_concat
// CHECK:         kvattn.attention {{.*}} q_offset(%{{.*}} : tensor<1xi64>) causal
func.func @upper_left_decode_over_concat(%q: tensor<1x4x1x64xf32>, %kc: tensor<1x4x?x64xf32>,
    %kn: tensor<1x4x1x64xf32>, %v: tensor<1x4x?x64xf32>) -> tensor<1x4x1x64xf32> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<1x4x?x64xf32>, tensor<1x4x1x64xf32>) -> tensor<1x4x?x64xf32>
  // expected-warning @+1 {{upper-left causal attention over a KV-cache write (tensor.concat) whose cache may already hold keys}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x4x1x64xf32>, tensor<1x4x?x64xf32>, tensor<1x4x?x64xf32> -> tensor<1x4x1x64xf32>
  return %o : tensor<1x4x1x64xf32>
}

// -----

// CHECK-LABEL: func @upper_left_over_insert_slice
func.func @upper_left_over_insert_slice(%q: tensor<1x4x4x32xf32>, %buf: tensor<1x4x16x32xf32>,
    %kn: tensor<1x4x4x32xf32>, %v: tensor<1x4x16x32xf32>, %p: index) -> tensor<1x4x4x32xf32> {
  %k = tensor.insert_slice %kn into %buf[0, 0, %p, 0] [1, 4, 4, 32] [1, 1, 1, 1]
      : tensor<1x4x4x32xf32> into tensor<1x4x16x32xf32>
  // expected-warning @+1 {{upper-left causal attention over a KV-cache write (tensor.insert_slice)}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x4x4x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x4x32xf32>
  return %o : tensor<1x4x4x32xf32>
}

// -----

// No warning when the cache is provably empty (an append at position 0 or
// a concat after zero rows), nor without a cache relation, nor for
// lower-right.

// CHECK-LABEL: func @no_lint
// CHECK-COUNT-4: kvattn.attention
func.func @no_lint(%q: tensor<1x1x4x8xf32>, %kc0: tensor<1x1x0x8xf32>, %kn: tensor<1x1x4x8xf32>,
    %v4: tensor<1x1x4x8xf32>, %cache: tensor<1x1x16x8xf32>, %v16: tensor<1x1x16x8xf32>)
    -> (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) {
  %k4 = tensor.concat dim(2) %kc0, %kn : (tensor<1x1x0x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %a = kvattn.sdpa %q, %k4, %v4 causal = upper_left
      : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
  %zero = arith.constant dense<0> : tensor<1xi32>
  %k16 = kvattn.append %kn into %cache at %zero : tensor<1x1x4x8xf32> into tensor<1x1x16x8xf32>, tensor<1xi32>
  %b = kvattn.sdpa %q, %k16, %v16 causal = upper_left
      : tensor<1x1x4x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32> -> tensor<1x1x4x8xf32>
  %c = kvattn.sdpa %q, %cache, %v16 causal = upper_left
      : tensor<1x1x4x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32> -> tensor<1x1x4x8xf32>
  %d = kvattn.sdpa %q, %k16, %v16 causal = lower_right
      : tensor<1x1x4x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32> -> tensor<1x1x4x8xf32>
  return %a, %b, %c, %d : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
}

// -----

// SDPA over a paged append: the pages would be read as a [B, H, S, D]
// cache. Rejected, pointing at the paged form of kvattn.attention.
func.func @sdpa_over_pages(%q: tensor<2x16x1x64xf16>, %pages: tensor<2x16x2x64xf16>,
                           %new: tensor<2x2x1x64xf16>, %pos: tensor<2xi32>, %bt: tensor<2x1xi32>) -> tensor<2x16x1x64xf16> {
  %k = kvattn.append %new into %pages at %pos block_table(%bt : tensor<2x1xi32>) : tensor<2x2x1x64xf16> into tensor<2x16x2x64xf16>, tensor<2xi32>
  // expected-error @+1 {{reads a paged cache (a kvattn.append with block_table): kvattn.sdpa has no paged form; use kvattn.attention with block_table, q_offset = pos and kv_len = pos + L (docs/semantics.md, Paged KV)}}
  %o = kvattn.sdpa %q, %k, %k causal = lower_right
      : tensor<2x16x1x64xf16>, tensor<2x16x2x64xf16>, tensor<2x16x2x64xf16> -> tensor<2x16x1x64xf16>
  return %o : tensor<2x16x1x64xf16>
}
