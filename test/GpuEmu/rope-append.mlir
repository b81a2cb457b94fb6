// The rotating cache write on the emulated GPU (docs/semantics.md, "Rotary
// embedding"): kvattn.append with rope rotates each new key row at its
// position pos[b] + t in f32 (cos/sin by the attention kernels' f64-reduced
// polynomial), rounds it to the cache's type at the write, and writes the
// RoPE record rope_pos[b, pos[b] + t] = pos[b] + t in place; the attention
// after it rotates its query at the same positions (positions in the
// thousands). --check compares the attention output, the whole written
// cache and the whole record with the reference (test/Numerics/cpu-rope.mlir
// runs the same functions on the CPU; python/tests/test_rope.py compares
// with a NumPy float64 reference of the formula). The emulator's memcheck
// and racecheck fail any run that reports.
//
// REQUIRES: libdevice

// f32, GPT-NeoX halves with partial rotary (24 of 32), GQA 4/2, L = 3.
// RUN: kvattn-run %s --entry=halves_f32 --target=gpu-emu --check --input 5=2040,1500 --input 6=-1 --input 7=2043,1503 | FileCheck %s
// bf16 (tensor cores for the attention), interleaved pairs, L = 2.
// RUN: kvattn-run %s --entry=pairs_bf16 --target=gpu-emu --check --input 5=3000,77 --input 6=-1 --input 7=3002,79 | FileCheck %s
// Paged (page_size 256; no record: the record of a paged cache is not
// there yet, the verifier refuses it), f16, halves: batch 0's tokens cross
// a page boundary (2046, 2047 in slot 7, 2048 in slot 8), pages out of
// order.
// RUN: kvattn-run %s --entry=paged_f16 --target=gpu-emu --check --input 5=2046,700 --input 6=2049,703 --input 7=7,2,5,0,8,3,6,9,1,10,11,12,13,14,15,16,17,18 | FileCheck %s
// The CPU path on the same case: the reference once wrote a paged append's
// keys unrotated (the evaluator's paged branch skipped the rotation).
// RUN: kvattn-run %s --entry=paged_f16 --target=cpu --check --input 5=2046,700 --input 6=2049,703 --input 7=7,2,5,0,8,3,6,9,1,10,11,12,13,14,15,16,17,18 | FileCheck %s
// CHECK: check out0: {{.*}} PASS
// CHECK: check out1: {{.*}} PASS
// CHECK: check out2: {{.*}} PASS
// CHECK: {{^PASS$}}

func.func @halves_f32(%q: tensor<2x4x3x32xf32>, %kn: tensor<2x2x3x32xf32>,
                      %vn: tensor<2x2x3x32xf32>, %kc: tensor<2x2x2100x32xf32>,
                      %vc: tensor<2x2x2100x32xf32>, %pos: tensor<2xi32>,
                      %rec: tensor<2x2100xi32>, %kl: tensor<2xi32>)
    -> (tensor<2x4x3x32xf32>, tensor<2x2x2100x32xf32>, tensor<2x2100xi32>) {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 24, theta = 10000.0>
      rope_pos(%rec : tensor<2x2100xi32>) : tensor<2x2x3x32xf32> into tensor<2x2x2100x32xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x3x32xf32> into tensor<2x2x2100x32xf32>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      causal rope = <rotary_dim = 24, theta = 10000.0>
      : tensor<2x4x3x32xf32>, tensor<2x2x2100x32xf32>, tensor<2x2x2100x32xf32> -> tensor<2x4x3x32xf32>
  return %o, %k, %k_rec : tensor<2x4x3x32xf32>, tensor<2x2x2100x32xf32>, tensor<2x2100xi32>
}

func.func @pairs_bf16(%q: tensor<2x4x2x64xbf16>, %kn: tensor<2x1x2x64xbf16>,
                      %vn: tensor<2x1x2x64xbf16>, %kc: tensor<2x1x3100x64xbf16>,
                      %vc: tensor<2x1x3100x64xbf16>, %pos: tensor<2xi32>,
                      %rec: tensor<2x3100xi64>, %kl: tensor<2xi32>)
    -> (tensor<2x4x2x64xbf16>, tensor<2x1x3100x64xbf16>, tensor<2x3100xi64>) {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      rope_pos(%rec : tensor<2x3100xi64>) : tensor<2x1x2x64xbf16> into tensor<2x1x3100x64xbf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x1x2x64xbf16> into tensor<2x1x3100x64xbf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      causal rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      : tensor<2x4x2x64xbf16>, tensor<2x1x3100x64xbf16>, tensor<2x1x3100x64xbf16> -> tensor<2x4x2x64xbf16>
  return %o, %k, %k_rec : tensor<2x4x2x64xbf16>, tensor<2x1x3100x64xbf16>, tensor<2x3100xi64>
}

func.func @paged_f16(%q: tensor<2x2x3x32xf16>, %kn: tensor<2x1x3x32xf16>,
                     %vn: tensor<2x1x3x32xf16>, %kc: tensor<20x256x1x32xf16>,
                     %vc: tensor<20x256x1x32xf16>, %pos: tensor<2xi32>,
                     %kl: tensor<2xi32>, %bt: tensor<2x9xi32>)
    -> (tensor<2x2x3x32xf16>, tensor<20x256x1x32xf16>, tensor<20x256x1x32xf16>) {
  %k = kvattn.append %kn into %kc at %pos block_table(%bt : tensor<2x9xi32>)
      rope = <rotary_dim = 32, theta = 10000.0>
      : tensor<2x1x3x32xf16> into tensor<20x256x1x32xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos block_table(%bt : tensor<2x9xi32>)
      : tensor<2x1x3x32xf16> into tensor<20x256x1x32xf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      block_table(%bt : tensor<2x9xi32>) causal rope = <rotary_dim = 32, theta = 10000.0>
      : tensor<2x2x3x32xf16>, tensor<20x256x1x32xf16>, tensor<20x256x1x32xf16> -> tensor<2x2x3x32xf16>
  return %o, %k, %v : tensor<2x2x3x32xf16>, tensor<20x256x1x32xf16>, tensor<20x256x1x32xf16>
}
