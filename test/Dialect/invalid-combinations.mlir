// RUN: kvattn-opt %s -split-input-file -verify-diagnostics
// Operand groups that do not combine (yet) on kvattn.attention, each refused
// by name rather than computed wrong: a tree's draft keys are the last rows
// of its sequence's own cache (not packed keys or a mapped cache row), its
// rows sit at their depth (not where rope would rotate them), and the RoPE
// record is indexed [B, S] like a static cache.

func.func @tree_with_k_start(%q: tensor<1x4x5x16xf32>, %k: tensor<1x2x40x16xf32>, %cu: tensor<3xi32>, %ck: tensor<3xi32>, %qo: tensor<2xi32>, %p: tensor<5xi32>) {
  // expected-error @+1 {{tree_parents does not combine with k_start yet: a tree's draft keys are the last rows of its sequence's own cache}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) k_start(%ck : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) tree_parents(%p : tensor<5xi32>) causal : tensor<1x4x5x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @tree_with_cache_batch_idx(%q: tensor<1x4x5x16xf32>, %k: tensor<3x2x32x16xf32>, %cu: tensor<3xi32>, %idx: tensor<2xi32>, %qo: tensor<2xi32>, %p: tensor<5xi32>) {
  // expected-error @+1 {{tree_parents does not combine with cache_batch_idx yet}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) cache_batch_idx(%idx : tensor<2xi32>) q_offset(%qo : tensor<2xi32>) tree_parents(%p : tensor<5xi32>) causal : tensor<1x4x5x16xf32>, tensor<3x2x32x16xf32>, tensor<3x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @rope_with_tree(%q: tensor<1x4x5x16xf32>, %k: tensor<2x2x32x16xf32>, %cu: tensor<3xi32>, %qo: tensor<2xi32>, %p: tensor<5xi32>) {
  // expected-error @+1 {{rope does not combine with tree_parents yet: a draft token's position is its depth in the tree}}
  %o = kvattn.attention %q, %k, %k q_start(%cu : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) tree_parents(%p : tensor<5xi32>) causal rope = <rotary_dim = 16, theta = 10000.0> : tensor<1x4x5x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<1x4x5x16xf32>
  return
}

// -----

func.func @rope_record_with_k_start(%q: tensor<2x4x1x16xf32>, %k: tensor<1x2x40x16xf32>, %ck: tensor<3xi32>, %qo: tensor<2xi32>, %rec: tensor<2x40xi32>) {
  // expected-error @+1 {{k_rope_pos is not taken with k_start yet: the record is indexed [B, S] like a static cache}}
  %o = kvattn.attention %q, %k, %k k_start(%ck : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) k_rope_pos(%rec : tensor<2x40xi32>) causal rope = <rotary_dim = 16, theta = 10000.0> : tensor<2x4x1x16xf32>, tensor<1x2x40x16xf32>, tensor<1x2x40x16xf32> -> tensor<2x4x1x16xf32>
  return
}

// -----

func.func @rope_record_with_cache_batch_idx(%q: tensor<2x4x1x16xf32>, %k: tensor<3x2x32x16xf32>, %idx: tensor<2xi32>, %qo: tensor<2xi32>, %rec: tensor<2x32xi32>) {
  // expected-error @+1 {{k_rope_pos is not taken with cache_batch_idx yet}}
  %o = kvattn.attention %q, %k, %k cache_batch_idx(%idx : tensor<2xi32>) q_offset(%qo : tensor<2xi32>) k_rope_pos(%rec : tensor<2x32xi32>) causal rope = <rotary_dim = 16, theta = 10000.0> : tensor<2x4x1x16xf32>, tensor<3x2x32x16xf32>, tensor<3x2x32x16xf32> -> tensor<2x4x1x16xf32>
  return
}
