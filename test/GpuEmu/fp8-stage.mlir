// FP8 staging on the emulated GPU's tensor-core kernels. sm_80's (no FP8
// conversions: dequantizeFp8Packed, Fp8.h) decodes packed codes in 32-bit
// work — into the f16 stage of a per-head scale by one mul.rn.f16x2 per two
// e4m3 codes (decodeFp8ToF16Packed) — and branches to separate products
// for a chunk with an e4m3 NaN, which the packed form would read as 480. Decode rows over per-head
// scales, with a NaN code in a valid K slot of KV head 0 (key 10) and in a
// valid V slot of KV head 1 (key 1, column 40): every row of heads 0 and 1
// and column 40 of heads 2 and 3 are NaN, as in the reference (the
// comparison requires NaN where the reference has one); the random codes
// include subnormals. e5m2's codes are their f16's upper bytes: an
// infinity in a valid K slot makes its rows NaN there too.
//
// REQUIRES: libdevice
// The emulator is built without sanitizers, so under ASan the emulated
// kernels run exactly as in the normal build, which runs this file (with
// memcheck and racecheck): the sanitizer run would only repeat it, slower.
// UNSUPPORTED: sanitizers
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=e4m3 --target=gpu-emu --check --input 3=0.5,3 --input 4=0.25,3 --fill=1=700:1:nan --fill=2=4200:1:nan | FileCheck %s
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=e4m3_f16 --target=gpu-emu --check --input 3=0.5,3 --input 4=0.25,3 --fill=1=700:1:nan --fill=2=4200:1:nan | FileCheck %s
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=e5m2 --target=gpu-emu --check --input 3=0.5,3 --input 4=0.25,3 --fill=1=700:1:inf --fill=2=4200:1:nan | FileCheck %s
// CHECK: check out0: {{.*}} PASS
// CHECK: {{^PASS$}}
// A per-KV-head scale is applied to the scores and the probabilities, the
// stages holding the exact codes: with k_scale 100 and 1000 on KV head 1
// (scores in the hundreds) the kernels agree with the f32-dequantising
// reference; staging code * scale rounded to bf16 moved the softmax by
// up to 3.3x the tolerance (max_rel_err 2.44 and 3.26 before). sm_80 and
// the hardware conversion (the emulator's default sm_90):
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=e4m3 --target=gpu-emu --check --input 3=0.5,100 --input 4=0.25,3 | FileCheck %s
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=e4m3 --target=gpu-emu --check --input 3=0.5,1000 --input 4=0.25,30 | FileCheck %s
// RUN: kvattn-run %s --entry=e4m3 --target=gpu-emu --check --input 3=0.5,100 --input 4=0.25,3 | FileCheck %s
// RUN: kvattn-run %s --entry=e4m3_f16 --target=gpu-emu --check --input 3=0.5,100 --input 4=0.25,3 | FileCheck %s
// The NaNs are there (2 x 64 + 2 in the e4m3 case):
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=e4m3 --target=gpu-emu --input 3=0.5,3 --input 4=0.25,3 --fill=1=700:1:nan --fill=2=4200:1:nan --print-outputs | tr ' ,' '\n\n' | grep -c nan | FileCheck %s --check-prefix=NANS
// NANS: {{^130$}}

func.func @e4m3(%q: tensor<1x4x1x64xbf16>, %k: tensor<1x2x64x64xf8E4M3FN>, %v: tensor<1x2x64x64xf8E4M3FN>, %ks: tensor<2xf32>, %vs: tensor<2xf32>) -> tensor<1x4x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<2xf32>) v_scale(%vs : tensor<2xf32>) : tensor<1x4x1x64xbf16>, tensor<1x2x64x64xf8E4M3FN>, tensor<1x2x64x64xf8E4M3FN> -> tensor<1x4x1x64xbf16>
  return %o : tensor<1x4x1x64xbf16>
}

func.func @e4m3_f16(%q: tensor<1x4x1x64xf16>, %k: tensor<1x2x64x64xf8E4M3FN>, %v: tensor<1x2x64x64xf8E4M3FN>, %ks: tensor<2xf32>, %vs: tensor<2xf32>) -> tensor<1x4x1x64xf16> {
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<2xf32>) v_scale(%vs : tensor<2xf32>) : tensor<1x4x1x64xf16>, tensor<1x2x64x64xf8E4M3FN>, tensor<1x2x64x64xf8E4M3FN> -> tensor<1x4x1x64xf16>
  return %o : tensor<1x4x1x64xf16>
}

func.func @e5m2(%q: tensor<1x4x1x64xbf16>, %k: tensor<1x2x64x64xf8E5M2>, %v: tensor<1x2x64x64xf8E5M2>, %ks: tensor<2xf32>, %vs: tensor<2xf32>) -> tensor<1x4x1x64xbf16> {
  %o = kvattn.attention %q, %k, %v k_scale(%ks : tensor<2xf32>) v_scale(%vs : tensor<2xf32>) : tensor<1x4x1x64xbf16>, tensor<1x2x64x64xf8E5M2>, tensor<1x2x64x64xf8E5M2> -> tensor<1x4x1x64xbf16>
  return %o : tensor<1x4x1x64xbf16>
}
