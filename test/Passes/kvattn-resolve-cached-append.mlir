// RUN: kvattn-opt %s -split-input-file -kvattn-resolve-cached-append | FileCheck %s --enable-var-scope

// Keys and values written by kvattn.append at per-batch positions: the
// queries are the appended rows, so q_offset = pos, and the slots past
// pos + L are no keys (kv_len = pos + L). GQA 8/2, batch 2, lower-right.

// CHECK-LABEL: func @append_lower_right
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<2x8x4x64xf16>
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<2xi32>
// CHECK:         %[[K:.*]] = kvattn.append
// CHECK:         %[[V:.*]] = kvattn.append
// CHECK:         %[[L:.*]] = arith.constant dense<4> : tensor<2xi32>
// CHECK:         %[[LEN:.*]] = arith.addi %[[POS]], %[[L]] : tensor<2xi32>
// CHECK:         kvattn.attention %[[Q]], %[[K]], %[[V]] q_offset(%[[POS]] : tensor<2xi32>) kv_len(%[[LEN]] : tensor<2xi32>) causal :
// CHECK-NOT:     kvattn.sdpa
func.func @append_lower_right(%q: tensor<2x8x4x64xf16>, %kc: tensor<2x2x16x64xf16>,
    %vc: tensor<2x2x16x64xf16>, %kn: tensor<2x2x4x64xf16>, %vn: tensor<2x2x4x64xf16>,
    %pos: tensor<2xi32>) -> tensor<2x8x4x64xf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  return %o : tensor<2x8x4x64xf16>
}

// -----

// Single-token decode over a cache: no causal rule is needed (every logical
// key is in the past), but the unused slots still are no keys: kv_len only.

// CHECK-LABEL: func @append_decode_no_causal
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<2xi64>
// CHECK:         %[[ONE:.*]] = arith.constant dense<1> : tensor<2xi64>
// CHECK:         %[[LEN:.*]] = arith.addi %[[POS]], %[[ONE]] : tensor<2xi64>
// CHECK:         kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} kv_len(%[[LEN]] : tensor<2xi64>) : tensor<2x4x1x128xbf16>
func.func @append_decode_no_causal(%q: tensor<2x4x1x128xbf16>, %kc: tensor<2x4x4096x128xbf16>,
    %vc: tensor<2x4x4096x128xbf16>, %kn: tensor<2x4x1x128xbf16>, %vn: tensor<2x4x1x128xbf16>,
    %pos: tensor<2xi64>) -> tensor<2x4x1x128xbf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x4x1x128xbf16> into tensor<2x4x4096x128xbf16>, tensor<2xi64>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x4x1x128xbf16> into tensor<2x4x4096x128xbf16>, tensor<2xi64>
  %o = kvattn.sdpa %q, %k, %v
      : tensor<2x4x1x128xbf16>, tensor<2x4x4096x128xbf16>, tensor<2x4x4096x128xbf16> -> tensor<2x4x1x128xbf16>
  return %o : tensor<2x4x1x128xbf16>
}

// -----

// Append with a dynamic number of new rows: L of the queries and of the
// write cannot be proven equal, so q_offset = max(kv_len - L, 0) (and the
// excess, if any, goes to k_offset) -- the lower-right meaning over the
// logical cache, whatever the sizes turn out to be.

// CHECK-LABEL: func @append_dynamic_rows
// CHECK:         %[[LEN:.*]] = arith.addi %{{.*}}, %{{.*}} : tensor<1xi32>
// CHECK:         %[[QO:.*]] = arith.maxsi %{{.*}}, %{{.*}} : tensor<1xi32>
// CHECK:         %[[KO:.*]] = arith.maxsi %{{.*}}, %{{.*}} : tensor<1xi32>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<1xi32>) k_offset(%[[KO]] : tensor<1xi32>) kv_len(%[[LEN]] : tensor<1xi32>) causal
func.func @append_dynamic_rows(%q: tensor<1x2x?x32xf32>, %kc: tensor<1x2x64x32xf32>,
    %v: tensor<1x2x64x32xf32>, %kn: tensor<1x2x?x32xf32>, %pos: tensor<1xi32>)
    -> tensor<1x2x?x32xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x2x?x32xf32> into tensor<1x2x64x32xf32>, tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x?x32xf32>, tensor<1x2x64x32xf32>, tensor<1x2x64x32xf32> -> tensor<1x2x?x32xf32>
  return %o : tensor<1x2x?x32xf32>
}

// -----

// A concat of a cache of P = 3 rows and L = 2 new ones (the 2x5 example):
// q_offset = 3 for every batch.

// CHECK-LABEL: func @concat_static
// CHECK:         %[[P:.*]] = arith.constant dense<3> : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[P]] : tensor<1xi64>) causal : tensor<1x1x2x8xf32>
func.func @concat_static(%q: tensor<1x1x2x8xf32>, %kc: tensor<1x1x3x8xf32>, %kn: tensor<1x1x2x8xf32>,
    %vc: tensor<1x1x3x8xf32>, %vn: tensor<1x1x2x8xf32>) -> tensor<1x1x2x8xf32> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<1x1x3x8xf32>, tensor<1x1x2x8xf32>) -> tensor<1x1x5x8xf32>
  %v = tensor.concat dim(2) %vc, %vn : (tensor<1x1x3x8xf32>, tensor<1x1x2x8xf32>) -> tensor<1x1x5x8xf32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x2x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32> -> tensor<1x1x2x8xf32>
  return %o : tensor<1x1x2x8xf32>
}

// -----

// A cache of dynamic length P and L = 4 new rows: q_offset = P at run time.

// CHECK-LABEL: func @concat_dynamic_prefix
// CHECK-SAME:    %[[KC:[^:]+]]: tensor<?x2x?x64xf16>
// CHECK:         %[[C2:.*]] = arith.constant 2 : index
// CHECK:         %[[P:.*]] = tensor.dim %[[KC]], %[[C2]]
// CHECK:         %[[P64:.*]] = arith.index_cast %[[P]] : index to i64
// CHECK:         %[[QO:.*]] = tensor.splat %[[P64]][%{{.*}}] : tensor<?xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<?xi64>) causal
func.func @concat_dynamic_prefix(%q: tensor<?x8x4x64xf16>, %kc: tensor<?x2x?x64xf16>,
    %kn: tensor<?x2x4x64xf16>, %v: tensor<?x2x?x64xf16>) -> tensor<?x8x4x64xf16> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<?x2x?x64xf16>, tensor<?x2x4x64xf16>) -> tensor<?x2x?x64xf16>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<?x8x4x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x8x4x64xf16>
  return %o : tensor<?x8x4x64xf16>
}

// -----

// tensor.insert_slice of the new rows at offset P that ends the buffer:
// q_offset = P.

// CHECK-LABEL: func @insert_slice_suffix
// CHECK:         %[[P:.*]] = arith.constant dense<12> : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[P]] : tensor<1xi64>) causal
// CHECK-NOT:     kv_len
func.func @insert_slice_suffix(%q: tensor<1x4x4x32xf32>, %buf: tensor<1x4x16x32xf32>,
    %kn: tensor<1x4x4x32xf32>, %v: tensor<1x4x16x32xf32>) -> tensor<1x4x4x32xf32> {
  %k = tensor.insert_slice %kn into %buf[0, 0, 12, 0] [1, 4, 4, 32] [1, 1, 1, 1]
      : tensor<1x4x4x32xf32> into tensor<1x4x16x32xf32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x4x4x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x4x32xf32>
  return %o : tensor<1x4x4x32xf32>
}

// -----

// An insert that does not end the buffer says nothing about the rows after
// it: torch's lower-right over the whole buffer is kept (q_offset = S - L).

// CHECK-LABEL: func @insert_slice_middle
// CHECK:         %[[QO:.*]] = arith.constant dense<12> : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<1xi64>) causal
// CHECK-NOT:     kv_len
func.func @insert_slice_middle(%q: tensor<1x4x4x32xf32>, %buf: tensor<1x4x16x32xf32>,
    %kn: tensor<1x4x4x32xf32>, %v: tensor<1x4x16x32xf32>, %p: index) -> tensor<1x4x4x32xf32> {
  %k = tensor.insert_slice %kn into %buf[0, 0, %p, 0] [1, 4, 4, 32] [1, 1, 1, 1]
      : tensor<1x4x4x32xf32> into tensor<1x4x16x32xf32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x4x4x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x4x32xf32>
  return %o : tensor<1x4x4x32xf32>
}

// -----

// No cache relation: lower-right gives q_offset = S - L = 12.

// CHECK-LABEL: func @no_relation_lower_right
// CHECK:         %[[QO:.*]] = arith.constant dense<12> : tensor<2xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<2xi64>) causal scale = 1.250000e-01
func.func @no_relation_lower_right(%q: tensor<2x8x4x64xf32>, %k: tensor<2x8x16x64xf32>,
    %v: tensor<2x8x16x64xf32>) -> tensor<2x8x4x64xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right scale = 0.125
      : tensor<2x8x4x64xf32>, tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32> -> tensor<2x8x4x64xf32>
  return %o : tensor<2x8x4x64xf32>
}

// -----

// More queries than keys: the first L - S rows see no key. Offsets stay
// non-negative: q_offset = 0, k_offset = L - S = 2.

// CHECK-LABEL: func @no_relation_more_queries_than_keys
// CHECK-DAG:     %[[QO:.*]] = arith.constant dense<0> : tensor<1xi64>
// CHECK-DAG:     %[[KO:.*]] = arith.constant dense<2> : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<1xi64>) k_offset(%[[KO]] : tensor<1xi64>) causal
func.func @no_relation_more_queries_than_keys(%q: tensor<1x1x6x8xf32>, %k: tensor<1x1x4x8xf32>,
    %v: tensor<1x1x4x8xf32>) -> tensor<1x1x6x8xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x6x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x6x8xf32>
  return %o : tensor<1x1x6x8xf32>
}

// -----

// Upper-left with no cache relation is torch's is_causal: q_offset = 0.

// CHECK-LABEL: func @no_relation_upper_left
// CHECK:         %[[QO:.*]] = arith.constant dense<0> : tensor<2xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<2xi64>) causal
func.func @no_relation_upper_left(%q: tensor<2x8x16x64xf32>, %k: tensor<2x8x16x64xf32>,
    %v: tensor<2x8x16x64xf32>) -> tensor<2x8x16x64xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32> -> tensor<2x8x16x64xf32>
  return %o : tensor<2x8x16x64xf32>
}

// -----

// Dynamic shapes without a relation: q_offset = max(S - L, 0) and
// k_offset = max(L - S, 0), computed at run time.

// CHECK-LABEL: func @no_relation_dynamic
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<?x4x?x64xf32>
// CHECK-SAME:    %[[K:[^:]+]]: tensor<?x4x?x64xf32>
// CHECK-DAG:     %[[S:.*]] = tensor.dim %[[K]], %{{.*}}
// CHECK-DAG:     %[[L:.*]] = tensor.dim %[[Q]], %{{.*}}
// CHECK:         %[[SL:.*]] = arith.subi %[[S]], %[[L]] : index
// CHECK:         arith.maxsi %[[SL]], %{{.*}} : index
// CHECK:         %[[LS:.*]] = arith.subi %[[L]], %[[S]] : index
// CHECK:         arith.maxsi %[[LS]], %{{.*}} : index
// CHECK:         kvattn.attention {{.*}} q_offset(%{{.*}} : tensor<?xi64>) k_offset(%{{.*}} : tensor<?xi64>) causal
func.func @no_relation_dynamic(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>,
    %v: tensor<?x4x?x64xf32>) -> tensor<?x4x?x64xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32> -> tensor<?x4x?x64xf32>
  return %o : tensor<?x4x?x64xf32>
}

// -----

// A boolean mask over keys alone ([B, 1, 1, S]) is key validity.

// CHECK-LABEL: func @key_only_bool_mask
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x1x1x16xi1>
// CHECK:         %[[VALID:.*]] = tensor.collapse_shape %[[M]] {{\[}}[0, 1, 2], [3]] : tensor<2x1x1x16xi1> into tensor<2x16xi1>
// CHECK:         kvattn.attention {{.*}} key_valid(%[[VALID]] : tensor<2x16xi1>) :
// CHECK-NOT:     mask(
func.func @key_only_bool_mask(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>,
    %v: tensor<2x2x16x64xf32>, %m: tensor<2x1x1x16xi1>) -> tensor<2x8x4x64xf32> {
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<2x1x1x16xi1>)
      : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return %o : tensor<2x8x4x64xf32>
}

// -----

// A mask that depends on the query row is carried as the general mask.

// CHECK-LABEL: func @general_bool_mask
// CHECK-SAME:    %[[M:[^:]+]]: tensor<2x1x4x16xi1>
// CHECK:         kvattn.attention {{.*}} mask(%[[M]] : tensor<2x1x4x16xi1>) :
func.func @general_bool_mask(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x16x64xf32>,
    %v: tensor<2x2x16x64xf32>, %m: tensor<2x1x4x16xi1>) -> tensor<2x8x4x64xf32> {
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<2x1x4x16xi1>)
      : tensor<2x8x4x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32> -> tensor<2x8x4x64xf32>
  return %o : tensor<2x8x4x64xf32>
}

// -----

// A float mask over keys alone stays additive: its finite values are
// biases, not validity.

// CHECK-LABEL: func @key_only_float_mask
// CHECK-SAME:    %[[M:[^:]+]]: tensor<1x1x1x16xf32>
// CHECK:         kvattn.attention {{.*}} mask(%[[M]] : tensor<1x1x1x16xf32>) :
func.func @key_only_float_mask(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x16x64xf32>,
    %v: tensor<1x2x16x64xf32>, %m: tensor<1x1x1x16xf32>) -> tensor<1x8x4x64xf32> {
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<1x1x1x16xf32>)
      : tensor<1x8x4x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32> -> tensor<1x8x4x64xf32>
  return %o : tensor<1x8x4x64xf32>
}

// -----

// Upper-left over a concat whose cache is provably empty (P = 0) is not the
// bug: no warning (this file runs without -verify-diagnostics; any warning
// would print to stderr, not fail) -- the lint tests cover diagnostics.

// CHECK-LABEL: func @upper_left_empty_cache
// CHECK:         %[[QO:.*]] = arith.constant dense<0> : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<1xi64>) causal
func.func @upper_left_empty_cache(%q: tensor<1x1x4x8xf32>, %kc: tensor<1x1x0x8xf32>,
    %kn: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<1x1x0x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
  return %o : tensor<1x1x4x8xf32>
}

// -----

// A sliding window, a soft cap and the LSE result carry over unchanged: the
// positions put each row at its causal position, so the window is the same.

// CHECK-LABEL: func @append_window_softcap_lse
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<2xi32>
// CHECK:         %[[LEN:.*]] = arith.addi %[[POS]]
// CHECK:         %[[O:.*]], %[[LSE:.*]] = kvattn.attention %{{.*}}, %{{.*}}, %{{.*}} q_offset(%[[POS]] : tensor<2xi32>) kv_len(%[[LEN]] : tensor<2xi32>) causal window = 6 softcap = 5.000000e+01 : {{.*}} -> tensor<2x8x4x64xf16>, tensor<2x8x4xf32>
// CHECK:         return %[[O]], %[[LSE]]
func.func @append_window_softcap_lse(%q: tensor<2x8x4x64xf16>, %kc: tensor<2x2x16x64xf16>,
    %vc: tensor<2x2x16x64xf16>, %kn: tensor<2x2x4x64xf16>, %vn: tensor<2x2x4x64xf16>,
    %pos: tensor<2xi32>) -> (tensor<2x8x4x64xf16>, tensor<2x8x4xf32>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  %o, %lse = kvattn.sdpa %q, %k, %v causal = lower_right window = 6 softcap = 50.0
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16>
      -> tensor<2x8x4x64xf16>, tensor<2x8x4xf32>
  return %o, %lse : tensor<2x8x4x64xf16>, tensor<2x8x4xf32>
}
