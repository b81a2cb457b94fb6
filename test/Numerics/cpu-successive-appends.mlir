// Successive appends to one growing cache equal one full forward, on the
// CPU path: each function returns the full forward over the T = 8 new
// tokens of both sequences (out0) and the same rows computed in chunks
// (out1), with GQA 8/2 and batch 2 where sequence 1 already holds 5 more
// tokens than sequence 0 (a different P per batch in every call).
//
// RUN: kvattn-run %s --entry=chunks_3_2_3 --target=cpu --check --expect-same=0,1 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=chunks_1_7 --target=cpu --check --expect-same=0,1 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=chunks_5_1_2 --target=cpu --check --expect-same=0,1 | FileCheck %s --check-prefix=OK
// OK: same out0 out1: {{.*}} PASS
// OK: {{^PASS$}}

func.func @chunks_3_2_3(%q: tensor<2x8x8x16xf32>, %k: tensor<2x2x13x16xf32>, %v: tensor<2x2x13x16xf32>) -> (tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32>) {
  %hist = arith.constant dense<[0, 5]> : tensor<2xi32>
  %full_len = arith.constant dense<[8, 13]> : tensor<2xi32>
  %full = kvattn.attention %q, %k, %v q_offset(%hist : tensor<2xi32>) kv_len(%full_len : tensor<2xi32>) causal : tensor<2x8x8x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x8x16xf32>
  %q0 = tensor.extract_slice %q[0, 0, 0, 0] [2, 8, 3, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x3x16xf32>
  %off0 = arith.constant dense<[0, 5]> : tensor<2xi32>
  %len0 = arith.constant dense<[3, 8]> : tensor<2xi32>
  %o0 = kvattn.attention %q0, %k, %v q_offset(%off0 : tensor<2xi32>) kv_len(%len0 : tensor<2xi32>) causal : tensor<2x8x3x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x3x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 3, 0] [2, 8, 2, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x2x16xf32>
  %off1 = arith.constant dense<[3, 8]> : tensor<2xi32>
  %len1 = arith.constant dense<[5, 10]> : tensor<2xi32>
  %o1 = kvattn.attention %q1, %k, %v q_offset(%off1 : tensor<2xi32>) kv_len(%len1 : tensor<2xi32>) causal : tensor<2x8x2x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x2x16xf32>
  %q2 = tensor.extract_slice %q[0, 0, 5, 0] [2, 8, 3, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x3x16xf32>
  %off2 = arith.constant dense<[5, 10]> : tensor<2xi32>
  %len2 = arith.constant dense<[8, 13]> : tensor<2xi32>
  %o2 = kvattn.attention %q2, %k, %v q_offset(%off2 : tensor<2xi32>) kv_len(%len2 : tensor<2xi32>) causal : tensor<2x8x3x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x3x16xf32>
  %chunked = tensor.concat dim(2) %o0, %o1, %o2 : (tensor<2x8x3x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x3x16xf32>) -> tensor<2x8x8x16xf32>
  return %full, %chunked : tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32>
}

func.func @chunks_1_7(%q: tensor<2x8x8x16xf32>, %k: tensor<2x2x13x16xf32>, %v: tensor<2x2x13x16xf32>) -> (tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32>) {
  %hist = arith.constant dense<[0, 5]> : tensor<2xi32>
  %full_len = arith.constant dense<[8, 13]> : tensor<2xi32>
  %full = kvattn.attention %q, %k, %v q_offset(%hist : tensor<2xi32>) kv_len(%full_len : tensor<2xi32>) causal : tensor<2x8x8x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x8x16xf32>
  %q0 = tensor.extract_slice %q[0, 0, 0, 0] [2, 8, 1, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x1x16xf32>
  %off0 = arith.constant dense<[0, 5]> : tensor<2xi32>
  %len0 = arith.constant dense<[1, 6]> : tensor<2xi32>
  %o0 = kvattn.attention %q0, %k, %v q_offset(%off0 : tensor<2xi32>) kv_len(%len0 : tensor<2xi32>) causal : tensor<2x8x1x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x1x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 1, 0] [2, 8, 7, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x7x16xf32>
  %off1 = arith.constant dense<[1, 6]> : tensor<2xi32>
  %len1 = arith.constant dense<[8, 13]> : tensor<2xi32>
  %o1 = kvattn.attention %q1, %k, %v q_offset(%off1 : tensor<2xi32>) kv_len(%len1 : tensor<2xi32>) causal : tensor<2x8x7x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x7x16xf32>
  %chunked = tensor.concat dim(2) %o0, %o1 : (tensor<2x8x1x16xf32>, tensor<2x8x7x16xf32>) -> tensor<2x8x8x16xf32>
  return %full, %chunked : tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32>
}

func.func @chunks_5_1_2(%q: tensor<2x8x8x16xf32>, %k: tensor<2x2x13x16xf32>, %v: tensor<2x2x13x16xf32>) -> (tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32>) {
  %hist = arith.constant dense<[0, 5]> : tensor<2xi32>
  %full_len = arith.constant dense<[8, 13]> : tensor<2xi32>
  %full = kvattn.attention %q, %k, %v q_offset(%hist : tensor<2xi32>) kv_len(%full_len : tensor<2xi32>) causal : tensor<2x8x8x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x8x16xf32>
  %q0 = tensor.extract_slice %q[0, 0, 0, 0] [2, 8, 5, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x5x16xf32>
  %off0 = arith.constant dense<[0, 5]> : tensor<2xi32>
  %len0 = arith.constant dense<[5, 10]> : tensor<2xi32>
  %o0 = kvattn.attention %q0, %k, %v q_offset(%off0 : tensor<2xi32>) kv_len(%len0 : tensor<2xi32>) causal : tensor<2x8x5x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x5x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 5, 0] [2, 8, 1, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x1x16xf32>
  %off1 = arith.constant dense<[5, 10]> : tensor<2xi32>
  %len1 = arith.constant dense<[6, 11]> : tensor<2xi32>
  %o1 = kvattn.attention %q1, %k, %v q_offset(%off1 : tensor<2xi32>) kv_len(%len1 : tensor<2xi32>) causal : tensor<2x8x1x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x1x16xf32>
  %q2 = tensor.extract_slice %q[0, 0, 6, 0] [2, 8, 2, 16] [1, 1, 1, 1] : tensor<2x8x8x16xf32> to tensor<2x8x2x16xf32>
  %off2 = arith.constant dense<[6, 11]> : tensor<2xi32>
  %len2 = arith.constant dense<[8, 13]> : tensor<2xi32>
  %o2 = kvattn.attention %q2, %k, %v q_offset(%off2 : tensor<2xi32>) kv_len(%len2 : tensor<2xi32>) causal : tensor<2x8x2x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x16xf32> -> tensor<2x8x2x16xf32>
  %chunked = tensor.concat dim(2) %o0, %o1, %o2 : (tensor<2x8x5x16xf32>, tensor<2x8x1x16xf32>, tensor<2x8x2x16xf32>) -> tensor<2x8x8x16xf32>
  return %full, %chunked : tensor<2x8x8x16xf32>, tensor<2x8x8x16xf32>
}
