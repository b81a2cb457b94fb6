// The cache write on the emulated GPU (docs/gpu-lowering.md, "The cache
// write"): kvattn.append (plain and paged) runs as a kernel of its own, in
// place in the cache's device buffer, and the attention after it reads the
// written cache on the device. Each function returns its attention output
// and the written caches; --check compares all of them with the reference,
// every slot of every cache (so a row written at a wrong position, or a
// slot written that should not be, fails). kvattn-run fills every float
// argument with seeded values, different per element and per argument.
// The emulator's memcheck and racecheck fail any run that reports.
//
// REQUIRES: libdevice

// Plain cache, bf16, GQA 8/2, decode (L = 1) at run-time positions.
// RUN: kvattn-run %s --entry=decode_bf16 --target=gpu-emu --check --input 5=13,39 | FileCheck %s --check-prefix=OK
// A small append (L = 3), f16, GQA 4/2, at the end of the capacity.
// RUN: kvattn-run %s --entry=append_f16 --target=gpu-emu --check --input 5=5,21 | FileCheck %s --check-prefix=OK
// f32, MQA (Hkv = 1), D = 36 (4-element copies: 36 is not a multiple of 8),
// L = 2.
// RUN: kvattn-run %s --entry=append_f32 --target=gpu-emu --check --input 5=0,9 | FileCheck %s --check-prefix=OK
// D = 6 in f16: 2-element copies.
// RUN: kvattn-run %s --entry=narrow_f16 --target=gpu-emu --check --input 5=3,0 | FileCheck %s --check-prefix=OK
// Paged, bf16, GQA 8/2, L = 2, pages out of order, batch 0's write crossing
// a page boundary (tokens 7 and 8: page 2 row 3, page 5 row 0).
// RUN: kvattn-run %s --entry=paged_bf16 --target=gpu-emu --check --input 5=7,13 --input 6=7,2,5,-1,0,8,3,6 --input 7=9,15 | FileCheck %s --check-prefix=OK
// Paged decode, f16; paged append L = 3, f32.
// RUN: kvattn-run %s --entry=paged_f16 --target=gpu-emu --check --input 5=4,11 --input 6=7,2,5,-1,0,8,3,6 --input 7=5,12 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=paged_f32 --target=gpu-emu --check --input 5=5,1 --input 6=7,2,-1,-1,0,8,3,6 --input 7=8,4 | FileCheck %s --check-prefix=OK
// Successive steps (test/Numerics/cpu-paged-append.mlir: a prefill of 6,
// then L = 4 and L = 1 at ragged positions, paged and plain, a concat on
// the host): each append writes the previous one's result in place, or a
// device copy of it where the attention in between still reads it.
// RUN: kvattn-run %S/../Numerics/cpu-paged-append.mlir --entry=steps --target=gpu-emu --check --expect-same=0,1 | FileCheck %s --check-prefix=STEPS
// STEPS: same out0 out1: {{.*}} PASS
// STEPS: check out2: {{.*}} PASS
// STEPS: {{^PASS$}}
// OK: check out0: {{.*}} PASS
// OK: check out1: {{.*}} PASS
// OK: check out2: {{.*}} PASS
// OK: {{^PASS$}}

// Bad metadata: refused with the reference's named error before anything
// is launched (the runtime checks the append kernel's arguments again, with
// the same messages, and the kernel skips a row outside the cache).
// RUN: not kvattn-run %s --entry=decode_bf16 --target=gpu-emu --input 5=13,40 2>&1 | FileCheck %s --check-prefix=CAPACITY
// CAPACITY: 'kvattn.append': pos[1] = 40 writes rows [40, 41) outside the cache capacity C = 40 (batch 1)
// RUN: not kvattn-run %s --entry=paged_bf16 --target=gpu-emu --input 5=7,13 --input 6=7,2,5,-1,0,9,3,6 --input 7=9,15 2>&1 | FileCheck %s --check-prefix=PAGE
// PAGE: 'kvattn.append': block_table[1][1] = 9: page id out of range [0, 9) (batch 1)
// RUN: not kvattn-run %s --entry=paged_bf16 --target=gpu-emu --input 5=11,13 --input 6=7,2,5,-1,0,8,3,6 --input 7=13,15 2>&1 | FileCheck %s --check-prefix=PAST
// PAST: 'kvattn.append': pos[0] = 11 with L = 2 does not fit the 3 page(s) of block_table[0] (page_size 4, at most 12 tokens): token 12 falls in slot 3 (batch 0)

func.func @decode_bf16(%q: tensor<2x8x1x64xbf16>, %kc: tensor<2x2x40x64xbf16>,
                       %vc: tensor<2x2x40x64xbf16>, %kn: tensor<2x2x1x64xbf16>,
                       %vn: tensor<2x2x1x64xbf16>, %pos: tensor<2xi32>)
    -> (tensor<2x8x1x64xbf16>, tensor<2x2x40x64xbf16>, tensor<2x2x40x64xbf16>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x1x64xbf16> into tensor<2x2x40x64xbf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x1x64xbf16> into tensor<2x2x40x64xbf16>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right : tensor<2x8x1x64xbf16>, tensor<2x2x40x64xbf16>, tensor<2x2x40x64xbf16> -> tensor<2x8x1x64xbf16>
  return %o, %k, %v : tensor<2x8x1x64xbf16>, tensor<2x2x40x64xbf16>, tensor<2x2x40x64xbf16>
}

func.func @append_f16(%q: tensor<2x4x3x64xf16>, %kc: tensor<2x2x24x64xf16>,
                      %vc: tensor<2x2x24x64xf16>, %kn: tensor<2x2x3x64xf16>,
                      %vn: tensor<2x2x3x64xf16>, %pos: tensor<2xi32>)
    -> (tensor<2x4x3x64xf16>, tensor<2x2x24x64xf16>, tensor<2x2x24x64xf16>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x3x64xf16> into tensor<2x2x24x64xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x3x64xf16> into tensor<2x2x24x64xf16>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right : tensor<2x4x3x64xf16>, tensor<2x2x24x64xf16>, tensor<2x2x24x64xf16> -> tensor<2x4x3x64xf16>
  return %o, %k, %v : tensor<2x4x3x64xf16>, tensor<2x2x24x64xf16>, tensor<2x2x24x64xf16>
}

func.func @append_f32(%q: tensor<2x4x2x36xf32>, %kc: tensor<2x1x11x36xf32>,
                      %vc: tensor<2x1x11x36xf32>, %kn: tensor<2x1x2x36xf32>,
                      %vn: tensor<2x1x2x36xf32>, %pos: tensor<2xi32>)
    -> (tensor<2x4x2x36xf32>, tensor<2x1x11x36xf32>, tensor<2x1x11x36xf32>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x1x2x36xf32> into tensor<2x1x11x36xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x1x2x36xf32> into tensor<2x1x11x36xf32>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right : tensor<2x4x2x36xf32>, tensor<2x1x11x36xf32>, tensor<2x1x11x36xf32> -> tensor<2x4x2x36xf32>
  return %o, %k, %v : tensor<2x4x2x36xf32>, tensor<2x1x11x36xf32>, tensor<2x1x11x36xf32>
}

func.func @narrow_f16(%q: tensor<2x2x1x6xf16>, %kc: tensor<2x2x4x6xf16>,
                      %vc: tensor<2x2x4x6xf16>, %kn: tensor<2x2x1x6xf16>,
                      %vn: tensor<2x2x1x6xf16>, %pos: tensor<2xi32>)
    -> (tensor<2x2x1x6xf16>, tensor<2x2x4x6xf16>, tensor<2x2x4x6xf16>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x1x6xf16> into tensor<2x2x4x6xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x1x6xf16> into tensor<2x2x4x6xf16>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right : tensor<2x2x1x6xf16>, tensor<2x2x4x6xf16>, tensor<2x2x4x6xf16> -> tensor<2x2x1x6xf16>
  return %o, %k, %v : tensor<2x2x1x6xf16>, tensor<2x2x4x6xf16>, tensor<2x2x4x6xf16>
}

// Pages [9, 4, Hkv, D]; the table (argument 6) and kv_len = pos + L
// (argument 7) are run-time values.
func.func @paged_bf16(%q: tensor<2x8x2x64xbf16>, %kp: tensor<9x4x2x64xbf16>,
                      %vp: tensor<9x4x2x64xbf16>, %kn: tensor<2x2x2x64xbf16>,
                      %vn: tensor<2x2x2x64xbf16>, %pos: tensor<2xi32>,
                      %bt: tensor<2x4xi32>, %len: tensor<2xi32>)
    -> (tensor<2x8x2x64xbf16>, tensor<9x4x2x64xbf16>, tensor<9x4x2x64xbf16>) {
  %k = kvattn.append %kn into %kp at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x2x64xbf16> into tensor<9x4x2x64xbf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vp at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x2x64xbf16> into tensor<9x4x2x64xbf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>) causal : tensor<2x8x2x64xbf16>, tensor<9x4x2x64xbf16>, tensor<9x4x2x64xbf16> -> tensor<2x8x2x64xbf16>
  return %o, %k, %v : tensor<2x8x2x64xbf16>, tensor<9x4x2x64xbf16>, tensor<9x4x2x64xbf16>
}

func.func @paged_f16(%q: tensor<2x4x1x64xf16>, %kp: tensor<9x4x2x64xf16>,
                     %vp: tensor<9x4x2x64xf16>, %kn: tensor<2x2x1x64xf16>,
                     %vn: tensor<2x2x1x64xf16>, %pos: tensor<2xi32>,
                     %bt: tensor<2x4xi32>, %len: tensor<2xi32>)
    -> (tensor<2x4x1x64xf16>, tensor<9x4x2x64xf16>, tensor<9x4x2x64xf16>) {
  %k = kvattn.append %kn into %kp at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x1x64xf16> into tensor<9x4x2x64xf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vp at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x2x1x64xf16> into tensor<9x4x2x64xf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>) causal : tensor<2x4x1x64xf16>, tensor<9x4x2x64xf16>, tensor<9x4x2x64xf16> -> tensor<2x4x1x64xf16>
  return %o, %k, %v : tensor<2x4x1x64xf16>, tensor<9x4x2x64xf16>, tensor<9x4x2x64xf16>
}

func.func @paged_f32(%q: tensor<2x2x3x32xf32>, %kp: tensor<9x4x1x32xf32>,
                     %vp: tensor<9x4x1x32xf32>, %kn: tensor<2x1x3x32xf32>,
                     %vn: tensor<2x1x3x32xf32>, %pos: tensor<2xi32>,
                     %bt: tensor<2x4xi32>, %len: tensor<2xi32>)
    -> (tensor<2x2x3x32xf32>, tensor<9x4x1x32xf32>, tensor<9x4x1x32xf32>) {
  %k = kvattn.append %kn into %kp at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x1x3x32xf32> into tensor<9x4x1x32xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vp at %pos block_table(%bt : tensor<2x4xi32>) : tensor<2x1x3x32xf32> into tensor<9x4x1x32xf32>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>) causal : tensor<2x2x3x32xf32>, tensor<9x4x1x32xf32>, tensor<9x4x1x32xf32> -> tensor<2x2x3x32xf32>
  return %o, %k, %v : tensor<2x2x3x32xf32>, tensor<9x4x1x32xf32>, tensor<9x4x1x32xf32>
}
