// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-resolve-cached-append=fix-upper-left-appends=true | FileCheck %s --enable-var-scope
// With fix-upper-left-appends=true the lint rewrites an upper-left SDPA
// over a cache write to lower-right positions and says so in a remark.

// CHECK-LABEL: func @fix_append
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<2xi32>
// CHECK:         %[[LEN:.*]] = arith.addi %[[POS]], %{{.*}} : tensor<2xi32>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[POS]] : tensor<2xi32>) kv_len(%[[LEN]] : tensor<2xi32>) causal
func.func @fix_append(%q: tensor<2x8x4x64xf16>, %kc: tensor<2x2x16x64xf16>,
    %vc: tensor<2x2x16x64xf16>, %kn: tensor<2x2x4x64xf16>, %vn: tensor<2x2x4x64xf16>,
    %pos: tensor<2xi32>) -> tensor<2x8x4x64xf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x4x64xf16> into tensor<2x2x16x64xf16>, tensor<2xi32>
  // expected-remark @+1 {{rewrote upper-left causal attention over a KV-cache write (kvattn.append) to lower-right positions: the queries now sit after the cached keys (fix-upper-left-appends=true)}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<2x8x4x64xf16>, tensor<2x2x16x64xf16>, tensor<2x2x16x64xf16> -> tensor<2x8x4x64xf16>
  return %o : tensor<2x8x4x64xf16>
}

// -----

// CHECK-LABEL: func @fix_concat
// CHECK:         %[[P:.*]] = arith.constant dense<3> : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[P]] : tensor<1xi64>) causal
func.func @fix_concat(%q: tensor<1x1x2x8xf32>, %kc: tensor<1x1x3x8xf32>, %kn: tensor<1x1x2x8xf32>,
    %v: tensor<1x1x5x8xf32>) -> tensor<1x1x2x8xf32> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<1x1x3x8xf32>, tensor<1x1x2x8xf32>) -> tensor<1x1x5x8xf32>
  // expected-remark @+1 {{rewrote upper-left causal attention over a KV-cache write (tensor.concat) to lower-right positions}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x1x2x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32> -> tensor<1x1x2x8xf32>
  return %o : tensor<1x1x2x8xf32>
}

// -----

// An insert in the middle of a buffer: the rows after P + L are no keys of
// this sequence, so the fix adds kv_len = P + L.

// CHECK-LABEL: func @fix_insert_slice_middle
// CHECK-SAME:    %[[P:[^:]+]]: index
// CHECK:         %[[P64:.*]] = arith.index_cast %[[P]] : index to i64
// CHECK:         %[[QO:.*]] = tensor.splat %[[P64]] : tensor<1xi64>
// CHECK:         %[[END:.*]] = arith.addi %[[P]], %{{.*}} : index
// CHECK:         %[[END64:.*]] = arith.index_cast %[[END]] : index to i64
// CHECK:         %[[LEN:.*]] = tensor.splat %[[END64]] : tensor<1xi64>
// CHECK:         kvattn.attention {{.*}} q_offset(%[[QO]] : tensor<1xi64>) kv_len(%[[LEN]] : tensor<1xi64>) causal
func.func @fix_insert_slice_middle(%q: tensor<1x4x4x32xf32>, %buf: tensor<1x4x16x32xf32>,
    %kn: tensor<1x4x4x32xf32>, %v: tensor<1x4x16x32xf32>, %p: index) -> tensor<1x4x4x32xf32> {
  %k = tensor.insert_slice %kn into %buf[0, 0, %p, 0] [1, 4, 4, 32] [1, 1, 1, 1]
      : tensor<1x4x4x32xf32> into tensor<1x4x16x32xf32>
  // expected-remark @+1 {{rewrote upper-left causal attention over a KV-cache write (tensor.insert_slice)}}
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x4x4x32xf32>, tensor<1x4x16x32xf32>, tensor<1x4x16x32xf32> -> tensor<1x4x4x32xf32>
  return %o : tensor<1x4x4x32xf32>
}
