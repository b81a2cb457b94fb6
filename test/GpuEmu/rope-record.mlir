// RoPE's record checked on the GPU path (docs/semantics.md, "The RoPE
// record"): a prefill chunk and then an append, both written by
// kvattn.append with rope on the emulated GPU (each key row rotated at its
// slot, the record rope_pos[b, slot] = slot written in place on the device),
// then an attention with k_rope_pos over that record. The attention kernel
// takes the record as a parameter it never reads: its check runs before the
// launch (the reference's checks and the runtime's, here; a plan's
// validation kernel, test/CAPI/plan-validation.test). --check compares the
// output, the whole cache and the whole record with the reference; the
// emulator's memcheck and racecheck fail any run that reports.
//
// REQUIRES: libdevice

// Arguments: 0 q, 1 prefill K, 2 prefill V, 3 new K, 4 new V, 5 K cache,
// 6 V cache, 7 prefill positions (0), 8 pos, 9 the record (-1: nothing
// written yet), 10 kv_len, 11 k_offset. Batch 1's append at 29 rewrites
// slots 29..31 of its prefill; its slots 32..39 (written, rotated at their
// slots) lie past kv_len = 32 and are no keys.
// DEFINE: %{good} = --input 7=0,0 --input 8=40,29 --input 9=-1 --input 10=43,32 --input 11=0,0
// f32 (the scalar lowering), halves, partial rotary (24 of 32).
// RUN: kvattn-run %s --entry=record_f32 --target=gpu-emu --check %{good} | FileCheck %s
// bf16 (tensor cores), interleaved pairs, D = 64.
// RUN: kvattn-run %s --entry=record_bf16 --target=gpu-emu --check %{good} | FileCheck %s
// CHECK: check out0: {{.*}} PASS
// CHECK: check out1: {{.*}} PASS
// CHECK: check out2: {{.*}} PASS
// CHECK: {{^PASS$}}

// Batch 1's keys attended one position later (k_offset[1] = 1) than the
// appends rotated them: refused by name before anything runs, the same
// text on the GPU target and on the CPU.
// DEFINE: %{shifted} = --input 7=0,0 --input 8=40,29 --input 9=-1 --input 10=43,32 --input 11=0,1
// RUN: not kvattn-run %s --entry=record_f32 --target=gpu-emu %{shifted} 2>&1 | FileCheck %s --check-prefix=SHIFTED
// RUN: not kvattn-run %s --entry=record_bf16 --target=gpu-emu %{shifted} 2>&1 | FileCheck %s --check-prefix=SHIFTED
// RUN: not kvattn-run %s --entry=record_bf16 --target=cpu %{shifted} 2>&1 | FileCheck %s --check-prefix=SHIFTED
// SHIFTED: k_rope_pos: the key of batch 1, slot 0 was rotated at position 0 but is attended at position 1
// A kv_len that takes batch 0's slot 43, which no append wrote (-1).
// RUN: not kvattn-run %s --entry=record_f32 --target=gpu-emu --input 7=0,0 --input 8=40,29 --input 9=-1 --input 10=44,32 --input 11=0,0 2>&1 | FileCheck %s --check-prefix=UNWRITTEN
// UNWRITTEN: k_rope_pos: the key of batch 0, slot 43 was rotated at position -1 but is attended at position 43

func.func @record_f32(%q: tensor<2x4x3x32xf32>, %kp: tensor<2x2x40x32xf32>,
                      %vp: tensor<2x2x40x32xf32>, %kn: tensor<2x2x3x32xf32>,
                      %vn: tensor<2x2x3x32xf32>, %kc: tensor<2x2x64x32xf32>,
                      %vc: tensor<2x2x64x32xf32>, %zero: tensor<2xi32>,
                      %pos: tensor<2xi32>, %rec: tensor<2x64xi32>,
                      %kl: tensor<2xi32>, %ko: tensor<2xi32>)
    -> (tensor<2x4x3x32xf32>, tensor<2x2x64x32xf32>, tensor<2x64xi32>) {
  %k1, %r1 = kvattn.append %kp into %kc at %zero rope = <rotary_dim = 24, theta = 10000.0>
      rope_pos(%rec : tensor<2x64xi32>) : tensor<2x2x40x32xf32> into tensor<2x2x64x32xf32>, tensor<2xi32>
  %v1 = kvattn.append %vp into %vc at %zero : tensor<2x2x40x32xf32> into tensor<2x2x64x32xf32>, tensor<2xi32>
  %k2, %r2 = kvattn.append %kn into %k1 at %pos rope = <rotary_dim = 24, theta = 10000.0>
      rope_pos(%r1 : tensor<2x64xi32>) : tensor<2x2x3x32xf32> into tensor<2x2x64x32xf32>, tensor<2xi32>
  %v2 = kvattn.append %vn into %v1 at %pos : tensor<2x2x3x32xf32> into tensor<2x2x64x32xf32>, tensor<2xi32>
  %o = kvattn.attention %q, %k2, %v2 q_offset(%pos : tensor<2xi32>) k_offset(%ko : tensor<2xi32>)
      kv_len(%kl : tensor<2xi32>) k_rope_pos(%r2 : tensor<2x64xi32>)
      causal rope = <rotary_dim = 24, theta = 10000.0>
      : tensor<2x4x3x32xf32>, tensor<2x2x64x32xf32>, tensor<2x2x64x32xf32> -> tensor<2x4x3x32xf32>
  return %o, %k2, %r2 : tensor<2x4x3x32xf32>, tensor<2x2x64x32xf32>, tensor<2x64xi32>
}

func.func @record_bf16(%q: tensor<2x4x3x64xbf16>, %kp: tensor<2x1x40x64xbf16>,
                       %vp: tensor<2x1x40x64xbf16>, %kn: tensor<2x1x3x64xbf16>,
                       %vn: tensor<2x1x3x64xbf16>, %kc: tensor<2x1x64x64xbf16>,
                       %vc: tensor<2x1x64x64xbf16>, %zero: tensor<2xi32>,
                       %pos: tensor<2xi32>, %rec: tensor<2x64xi64>,
                       %kl: tensor<2xi32>, %ko: tensor<2xi32>)
    -> (tensor<2x4x3x64xbf16>, tensor<2x1x64x64xbf16>, tensor<2x64xi64>) {
  %k1, %r1 = kvattn.append %kp into %kc at %zero rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      rope_pos(%rec : tensor<2x64xi64>) : tensor<2x1x40x64xbf16> into tensor<2x1x64x64xbf16>, tensor<2xi32>
  %v1 = kvattn.append %vp into %vc at %zero : tensor<2x1x40x64xbf16> into tensor<2x1x64x64xbf16>, tensor<2xi32>
  %k2, %r2 = kvattn.append %kn into %k1 at %pos rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      rope_pos(%r1 : tensor<2x64xi64>) : tensor<2x1x3x64xbf16> into tensor<2x1x64x64xbf16>, tensor<2xi32>
  %v2 = kvattn.append %vn into %v1 at %pos : tensor<2x1x3x64xbf16> into tensor<2x1x64x64xbf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k2, %v2 q_offset(%pos : tensor<2xi32>) k_offset(%ko : tensor<2xi32>)
      kv_len(%kl : tensor<2xi32>) k_rope_pos(%r2 : tensor<2x64xi64>)
      causal rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      : tensor<2x4x3x64xbf16>, tensor<2x1x64x64xbf16>, tensor<2x1x64x64xbf16> -> tensor<2x4x3x64xbf16>
  return %o, %k2, %r2 : tensor<2x4x3x64xbf16>, tensor<2x1x64x64xbf16>, tensor<2x64xi64>
}
