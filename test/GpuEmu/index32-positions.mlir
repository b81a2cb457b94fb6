// REQUIRES: libdevice
// The emulated GPU is built without sanitizers (its fibers switch stacks
// under them) and its kernels run exactly as in the normal build, which runs
// this test:
// UNSUPPORTED: sanitizers
// A 32-bit kernel (the default index width) at the top of its positions, on
// the emulated GPU (issue 30 item 1). The kernels form the last query
// position plus one in i32: with a last position of 2^31 - 1 it wrapped and
// the rows saw no key (0, no error). Now 2^31 - 2 computes, compared with
// the reference, and 2^31 - 1 is refused by name; 64-bit kernels take both.
// L = 2 rows at q_offset, S = 8 keys at k_offset = 0: every row sees all 8
// (qLast - k_offset + 1 is the value that wrapped).
//
// Last query at 2^31 - 2: computes and matches the reference.
// RUN: kvattn-run %s --entry=main --target=gpu-emu --check --input 3=2147483645 --input 4=0 | FileCheck %s --check-prefix=OK
// Last query at 2^31 - 1: refused (it computed 0 before: 64 mismatches).
// RUN: not kvattn-run %s --entry=main --target=gpu-emu --check --input 3=2147483646 --input 4=0 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: kvattn-run %s --entry=main --target=gpu-emu --check --index-bitwidth=64 --input 3=2147483646 --input 4=0 | FileCheck %s --check-prefix=OK
// The key side, at one rule: k_offset + S - 1 = 2^31 - 1 is refused, 2^31 - 2
// computes.
// RUN: not kvattn-run %s --entry=main --target=gpu-emu --check --input 3=2147483646 --input 4=2147483640 2>&1 | FileCheck %s --check-prefix=KREFUSED
// RUN: kvattn-run %s --entry=main --target=gpu-emu --check --input 3=2147483645 --input 4=2147483639 | FileCheck %s --check-prefix=OK
//
// A sibling: a sliding window of 2^31 or more was a constant truncated in
// 32-bit index arithmetic (2^31 admitted no key, 2^32 + 2 only 2): every
// earlier key is within such a window, which the tiling now emits as
// 2^31 - 1 for 32-bit kernels (-kvattn-tile{max-position}).
// RUN: kvattn-run %s --entry=window_2_31 --target=gpu-emu --check --input 3=6 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=window_2_32 --target=gpu-emu --check --input 3=6 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=window_2_32 --target=gpu-emu --check --index-bitwidth=64 --input 3=6 | FileCheck %s --check-prefix=OK
// RUN: kvattn-run %s --entry=window_2_32 --target=cpu --check --input 3=6 | FileCheck %s --check-prefix=OK
//
// OK: {{^PASS$}}
// REFUSED: q_offset[0] = 2147483646 gives positions of 2^31 - 1 or more (batch 0): the kernel was compiled with 32-bit index arithmetic
// KREFUSED: k_offset[0] = 2147483640 gives positions of 2^31 - 1 or more (batch 0)

func.func @main(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>,
    %qo: tensor<1xi32>, %ko: tensor<1xi32>) -> tensor<1x2x2x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>) causal
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

func.func @window_2_31(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>,
    %qo: tensor<1xi32>) -> tensor<1x2x2x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal window = 2147483648
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

func.func @window_2_32(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>,
    %qo: tensor<1xi32>) -> tensor<1x2x2x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal window = 4294967298
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}
