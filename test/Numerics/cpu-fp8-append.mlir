// kvattn.append into an FP8 cache on the CPU path (-kvattn-lower-append)
// against the reference (docs/semantics.md, "FP8 KV caches"): every new
// value becomes RN_satfinite(f32(x) / scale) with the scale of the cache row
// it is written to, every other code is kept. --check compares the written
// caches with the reference code by code (FP8 results are compared exactly:
// tolerance 0 on the decoded values, which tell every code apart but NaN's)
// and the attention that reads them.
//
// Saturation edge, rounding ties, NaN / Inf in, per tensor scale 1 (the
// printed row 1 is the written token; row 0 was zero). e4m3: 464 ties to
// 448 (even), 465 rounds beyond 448 and saturates, 1e6 and +-inf saturate to
// +-448, NaN becomes NaN, -0 stays -0, 2^-10 ties to 0, 3 * 2^-10 and
// 5 * 2^-10 tie to 2 * 2^-9, 0.1 -> 0.1015625, -300 -> -288, 17 -> 16,
// 1.0625 -> 1 (ties to even).
// RUN: kvattn-run %s --entry=edge_e4m3 --target=reference --print-outputs --input 0=448,464,465,1e6,inf,-inf,nan,-0.0,0.0009765625,0.0029296875,0.0048828125,0.1,-300,240,17,1.0625 --input 1=0 --input 2=1 --input 3=1 | FileCheck %s --check-prefix=E4M3
// RUN: kvattn-run %s --entry=edge_e4m3 --target=cpu --check --print-outputs --input 0=448,464,465,1e6,inf,-inf,nan,-0.0,0.0009765625,0.0029296875,0.0048828125,0.1,-300,240,17,1.0625 --input 1=0 --input 2=1 --input 3=1 | FileCheck %s --check-prefixes=E4M3,OK
// E4M3: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 448, 448, 448, 448, 448, -448, nan, -0, 0, 0.00390625, 0.00390625, 0.101562, -288, 240, 16, 1]
// The same values divided by a scale of 0.5 first (x / 0.5 = 2x): 464 ->
// 928 saturates, 0.1 -> 0.2 -> 0.203125, 17 -> 34 -> 32 (a tie), 1.0625 ->
// 2.125 -> 2 (a tie), 2^-10 -> 2^-9 (printed with 6 digits).
// RUN: kvattn-run %s --entry=edge_e4m3 --target=cpu --check --print-outputs --input 0=448,464,465,1e6,inf,-inf,nan,-0.0,0.0009765625,0.0029296875,0.0048828125,0.1,-300,240,17,1.0625 --input 1=0 --input 2=1 --input 3=0.5 | FileCheck %s --check-prefixes=HALF,OK
// HALF: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 448, 448, 448, 448, 448, -448, nan, -0, 0.00195312, 0.00585938, 0.00976562, 0.203125, -448, 448, 32, 2]
// e5m2: 57344 is the largest finite value, 61440 ties away from it (to
// 65536, which is infinity) and saturates, as 1e6 and +-inf do; 2^-17 ties
// to 0, 3 * 2^-17 to 2 * 2^-16; 0.1 -> 0.09375, -300 -> -320, 240 ties to
// 256, 17 -> 16, 1.125 ties to 1, 5 exact.
// RUN: kvattn-run %s --entry=edge_e5m2 --target=reference --print-outputs --input 0=57344,61440,1e6,inf,-inf,nan,-0.0,7.62939453125e-06,2.288818359375e-05,0.1,-300,240,17,1.125,5,-1 --input 1=0 --input 2=1 --input 3=1 | FileCheck %s --check-prefix=E5M2
// RUN: kvattn-run %s --entry=edge_e5m2 --target=cpu --check --print-outputs --input 0=57344,61440,1e6,inf,-inf,nan,-0.0,7.62939453125e-06,2.288818359375e-05,0.1,-300,240,17,1.125,5,-1 --input 1=0 --input 2=1 --input 3=1 | FileCheck %s --check-prefixes=E5M2,OK
// E5M2: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 57344, 57344, 57344, 57344, -57344, nan, -0, 0, 3.05176e-05, 0.09375, -320, 256, 16, 1, 5, -1]
//
// Decode steps that append K and V (bf16) into FP8 caches, then attend
// over them: every granularity, both formats; the scales distinct and not
// 1, so a scale ignored or taken from the wrong row fails. The caches hold
// seeded codes everywhere else (checked unchanged).
// RUN: kvattn-run %s --entry=decode_tensor --target=cpu --check --input 5=13,39 --input 6=0.37 --input 7=1.9 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=decode_head --target=cpu --check --input 5=0,21 --input 6=0.25,3.5 --input 7=1.5,0.125 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=append_token --target=cpu --check --input 5=5,17 | FileCheck %s --check-prefix=OK
// Paged (per-token scales [num_pages, page_size, H]), the write of batch 0
// crossing a page boundary:
// RUN: kvattn-run %s --entry=paged_token --target=cpu --check --input 5=7,13 --input 6=7,2,5,-1,0,8,3,6 | FileCheck %s --check-prefix=OK
// RoPE and FP8 together: the f32 rotation quantised, the record written.
// RUN: kvattn-run %s --entry=rope_fp8 --target=cpu --check --input 2=0 --input 3=4,30 --input 4=0.75,1.25 | FileCheck %s --check-prefix=OK
// OK: {{^PASS$}}
//
// Bad scales and writes are refused by name before anything runs.
// RUN: not kvattn-run %s --entry=decode_tensor --target=cpu --input 5=13,39 --input 6=0 --input 7=1.9 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: 'kvattn.append': kv_scale[0] = 0 must be positive and finite (a KV scale divides the values it quantises)
// RUN: not kvattn-run %s --entry=decode_head --target=cpu --input 5=0,21 --input 6=0.25,nan --input 7=1.5,0.125 2>&1 | FileCheck %s --check-prefix=NAN
// NAN: 'kvattn.append': kv_scale[1] = nan must be positive and finite (a KV scale divides the values it quantises)
// RUN: not kvattn-run %s --entry=decode_tensor --target=cpu --input 5=13,40 --input 6=0.37 --input 7=1.9 2>&1 | FileCheck %s --check-prefix=CAPACITY
// CAPACITY: 'kvattn.append': pos[1] = 40 writes rows [40, 41) outside the cache capacity C = 40 (batch 1)

func.func @edge_e4m3(%u: tensor<1x1x1x16xf32>, %c: tensor<1x1x2x16xf8E4M3FN>,
                     %pos: tensor<1xi32>, %s: tensor<1xf32>)
    -> tensor<1x1x2x16xf8E4M3FN> {
  %r = kvattn.append %u into %c at %pos kv_scale(%s : tensor<1xf32>) : tensor<1x1x1x16xf32> into tensor<1x1x2x16xf8E4M3FN>, tensor<1xi32>
  return %r : tensor<1x1x2x16xf8E4M3FN>
}

func.func @edge_e5m2(%u: tensor<1x1x1x16xf32>, %c: tensor<1x1x2x16xf8E5M2>,
                     %pos: tensor<1xi32>, %s: tensor<1xf32>)
    -> tensor<1x1x2x16xf8E5M2> {
  %r = kvattn.append %u into %c at %pos kv_scale(%s : tensor<1xf32>) : tensor<1x1x1x16xf32> into tensor<1x1x2x16xf8E5M2>, tensor<1xi32>
  return %r : tensor<1x1x2x16xf8E5M2>
}

// Per tensor, e4m3, GQA 8/2, D = 64, decode at run-time positions.
func.func @decode_tensor(%q: tensor<2x8x1x64xbf16>, %kc: tensor<2x2x40x64xf8E4M3FN>,
                         %vc: tensor<2x2x40x64xf8E4M3FN>, %kn: tensor<2x2x1x64xbf16>,
                         %vn: tensor<2x2x1x64xbf16>, %pos: tensor<2xi32>,
                         %ks: tensor<1xf32>, %vs: tensor<1xf32>)
    -> (tensor<2x8x1x64xbf16>, tensor<2x2x40x64xf8E4M3FN>, tensor<2x2x40x64xf8E4M3FN>) {
  %k = kvattn.append %kn into %kc at %pos kv_scale(%ks : tensor<1xf32>) : tensor<2x2x1x64xbf16> into tensor<2x2x40x64xf8E4M3FN>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos kv_scale(%vs : tensor<1xf32>) : tensor<2x2x1x64xbf16> into tensor<2x2x40x64xf8E4M3FN>, tensor<2xi32>
  %c1 = arith.constant dense<1> : tensor<2xi32>
  %len = arith.addi %pos, %c1 : tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) k_scale(%ks : tensor<1xf32>) v_scale(%vs : tensor<1xf32>) causal : tensor<2x8x1x64xbf16>, tensor<2x2x40x64xf8E4M3FN>, tensor<2x2x40x64xf8E4M3FN> -> tensor<2x8x1x64xbf16>
  return %o, %k, %v : tensor<2x8x1x64xbf16>, tensor<2x2x40x64xf8E4M3FN>, tensor<2x2x40x64xf8E4M3FN>
}

// Per KV head, e5m2, f16, L = 3.
func.func @decode_head(%q: tensor<2x4x3x32xf16>, %kc: tensor<2x2x24x32xf8E5M2>,
                       %vc: tensor<2x2x24x32xf8E5M2>, %kn: tensor<2x2x3x32xf16>,
                       %vn: tensor<2x2x3x32xf16>, %pos: tensor<2xi32>,
                       %ks: tensor<2xf32>, %vs: tensor<2xf32>)
    -> (tensor<2x4x3x32xf16>, tensor<2x2x24x32xf8E5M2>, tensor<2x2x24x32xf8E5M2>) {
  %k = kvattn.append %kn into %kc at %pos kv_scale(%ks : tensor<2xf32>) : tensor<2x2x3x32xf16> into tensor<2x2x24x32xf8E5M2>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos kv_scale(%vs : tensor<2xf32>) : tensor<2x2x3x32xf16> into tensor<2x2x24x32xf8E5M2>, tensor<2xi32>
  %c3 = arith.constant dense<3> : tensor<2xi32>
  %len = arith.addi %pos, %c3 : tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) k_scale(%ks : tensor<2xf32>) v_scale(%vs : tensor<2xf32>) causal : tensor<2x4x3x32xf16>, tensor<2x2x24x32xf8E5M2>, tensor<2x2x24x32xf8E5M2> -> tensor<2x4x3x32xf16>
  return %o, %k, %v : tensor<2x4x3x32xf16>, tensor<2x2x24x32xf8E5M2>, tensor<2x2x24x32xf8E5M2>
}

// Per token and head [B, H, C] (constant, distinct per row), f32 update,
// MQA, D = 36 (4-element vectors), L = 2.
func.func @append_token(%q: tensor<2x2x2x36xf32>, %kc: tensor<2x1x20x36xf8E4M3FN>,
                        %vc: tensor<2x1x20x36xf8E4M3FN>, %kn: tensor<2x1x2x36xf32>,
                        %vn: tensor<2x1x2x36xf32>, %pos: tensor<2xi32>)
    -> (tensor<2x2x2x36xf32>, tensor<2x1x20x36xf8E4M3FN>, tensor<2x1x20x36xf8E4M3FN>) {
  %ks = arith.constant dense<[[[0.5, 0.625, 0.75, 0.875, 1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875, 2.0, 2.125, 2.25, 2.375, 2.5, 2.625, 2.75, 2.875]], [[0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2]]]> : tensor<2x1x20xf32>
  %vs = arith.constant dense<[[[2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2]], [[0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0]]]> : tensor<2x1x20xf32>
  %k = kvattn.append %kn into %kc at %pos kv_scale(%ks : tensor<2x1x20xf32>) : tensor<2x1x2x36xf32> into tensor<2x1x20x36xf8E4M3FN>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos kv_scale(%vs : tensor<2x1x20xf32>) : tensor<2x1x2x36xf32> into tensor<2x1x20x36xf8E4M3FN>, tensor<2xi32>
  %c2 = arith.constant dense<2> : tensor<2xi32>
  %len = arith.addi %pos, %c2 : tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) k_scale(%ks : tensor<2x1x20xf32>) v_scale(%vs : tensor<2x1x20xf32>) causal : tensor<2x2x2x36xf32>, tensor<2x1x20x36xf8E4M3FN>, tensor<2x1x20x36xf8E4M3FN> -> tensor<2x2x2x36xf32>
  return %o, %k, %v : tensor<2x2x2x36xf32>, tensor<2x1x20x36xf8E4M3FN>, tensor<2x1x20x36xf8E4M3FN>
}

// Paged, per token and head [num_pages, page_size, H] = [9, 4, 2], bf16,
// L = 2, pages out of order.
func.func @paged_token(%q: tensor<2x8x2x64xbf16>, %kp: tensor<9x4x2x64xf8E5M2>,
                       %vp: tensor<9x4x2x64xf8E5M2>, %kn: tensor<2x2x2x64xbf16>,
                       %vn: tensor<2x2x2x64xbf16>, %pos: tensor<2xi32>,
                       %bt: tensor<2x4xi32>)
    -> (tensor<2x8x2x64xbf16>, tensor<9x4x2x64xf8E5M2>, tensor<9x4x2x64xf8E5M2>) {
  // Distinct per page row and head: 0.5, 0.6, ..., 7.6.
  %ks = arith.constant dense<[[[0.5, 0.6], [0.7, 0.8], [0.9, 1.0], [1.1, 1.2]], [[1.3, 1.4], [1.5, 1.6], [1.7, 1.8], [1.9, 2.0]], [[2.1, 2.2], [2.3, 2.4], [2.5, 2.6], [2.7, 2.8]], [[2.9, 3.0], [3.1, 3.2], [3.3, 3.4], [3.5, 3.6]], [[3.7, 3.8], [3.9, 4.0], [4.1, 4.2], [4.3, 4.4]], [[4.5, 4.6], [4.7, 4.8], [4.9, 5.0], [5.1, 5.2]], [[5.3, 5.4], [5.5, 5.6], [5.7, 5.8], [5.9, 6.0]], [[6.1, 6.2], [6.3, 6.4], [6.5, 6.6], [6.7, 6.8]], [[6.9, 7.0], [7.1, 7.2], [7.3, 7.4], [7.5, 7.6]]]> : tensor<9x4x2xf32>
  %vs = arith.constant dense<0.75> : tensor<9x4x2xf32>
  %k = kvattn.append %kn into %kp at %pos block_table(%bt : tensor<2x4xi32>) kv_scale(%ks : tensor<9x4x2xf32>) : tensor<2x2x2x64xbf16> into tensor<9x4x2x64xf8E5M2>, tensor<2xi32>
  %v = kvattn.append %vn into %vp at %pos block_table(%bt : tensor<2x4xi32>) kv_scale(%vs : tensor<9x4x2xf32>) : tensor<2x2x2x64xbf16> into tensor<9x4x2x64xf8E5M2>, tensor<2xi32>
  %c2 = arith.constant dense<2> : tensor<2xi32>
  %len = arith.addi %pos, %c2 : tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>) k_scale(%ks : tensor<9x4x2xf32>) v_scale(%vs : tensor<9x4x2xf32>) causal : tensor<2x8x2x64xbf16>, tensor<9x4x2x64xf8E5M2>, tensor<9x4x2x64xf8E5M2> -> tensor<2x8x2x64xbf16>
  return %o, %k, %v : tensor<2x8x2x64xbf16>, tensor<9x4x2x64xf8E5M2>, tensor<9x4x2x64xf8E5M2>
}

// RoPE on the keys written into an FP8 cache, with the record; per-head
// scales.
func.func @rope_fp8(%kc: tensor<2x2x32x64xf8E4M3FN>, %kn: tensor<2x2x2x64xbf16>,
                    %rec: tensor<2x32xi32>, %pos: tensor<2xi32>,
                    %ks: tensor<2xf32>)
    -> (tensor<2x2x32x64xf8E4M3FN>, tensor<2x32xi32>) {
  %k, %r = kvattn.append %kn into %kc at %pos rope = #kvattn.rope<rotary_dim = 64, theta = 10000.0> rope_pos(%rec : tensor<2x32xi32>) kv_scale(%ks : tensor<2xf32>) : tensor<2x2x2x64xbf16> into tensor<2x2x32x64xf8E4M3FN>, tensor<2xi32>
  return %k, %r : tensor<2x2x32x64xf8E4M3FN>, tensor<2x32xi32>
}
