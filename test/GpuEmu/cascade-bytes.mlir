// Shared-prefix (cascade) attention reads the prefix's K/V once (issue 35):
// 64 decode sequences share a 4096-token prefix, each with one suffix key
// (its new token), bf16, D 64, Hq = Hkv = 1. The emulator counts every
// global load and store (global_bytes, cp.async included), exactly.
//
// The prefix's K + V: 2 x 4096 x 64 x 2 bytes = 1,048,576 bytes.
//
// plain: one ragged launch whose caches each hold the prefix (kv_len 4097):
// every sequence reads the whole prefix, 64 x 1,048,576 bytes and more.
// cascade: kvattn-to-ptx's three kernels. The prefix kernel (B = 1, the 64
// rows in one program) reads query 64 x 64 x 2 = 8,192 bytes and the
// prefix K + V once, 1,048,576 bytes, and writes its f32 part (out 64 x 64
// x 4 = 16,384, lse 256): 1,073,408 bytes. The suffix kernel reads each
// sequence's one key and value; the merge kernel reads both parts and
// writes out.
//
// REQUIRES: libdevice
// DEFINE: %{plainmeta} = --input 3=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64 --input 4=4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096,4096 --input 5=4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097,4097
// DEFINE: %{cascademeta} = --input 5=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64 --input 6=0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 --input 7=1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1
// RUN: kvattn-run %s --entry=plain --target=gpu-emu --stats --check --split-kv 1 %{plainmeta} | FileCheck %s --check-prefix=PLAIN
// RUN: kvattn-run %s --entry=cascade --target=gpu-emu --stats --check %{cascademeta} | FileCheck %s --check-prefix=CASCADE
//
// plain: 67,152,032 bytes, 64.04 x the prefix's K + V.
// PLAIN: emu: kernel=kvattn_gpu_kvattn_0 grid=1x65x1 {{.*}} global_bytes=67152032
// PLAIN: {{^PASS$}}
//
// cascade: 1,073,408 + 51,616 + 41,472 = 1,166,496 bytes, 1.11 x the
// prefix's K + V (57.6 x fewer than plain): the prefix is read once.
// CASCADE: emu: kernel=kvattn_gpu_kvattn_0 grid=1x1x1 {{.*}} global_bytes=1073408
// CASCADE: emu: kernel=kvattn_gpu_kvattn_1 grid=1x65x1 {{.*}} global_bytes=51616
// CASCADE: emu: kernel=kvattn_gpu_kvattn_2 grid=1x1x1 {{.*}} global_bytes=41472
// CASCADE: {{^PASS$}}

func.func @plain(%q: tensor<1x1x64x64xbf16>, %k: tensor<64x1x4097x64xbf16>, %v: tensor<64x1x4097x64xbf16>, %qs: tensor<65xi32>, %qo: tensor<64xi32>, %kl: tensor<64xi32>) -> tensor<1x1x64x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_start(%qs : tensor<65xi32>) q_offset(%qo : tensor<64xi32>) kv_len(%kl : tensor<64xi32>) causal : tensor<1x1x64x64xbf16>, tensor<64x1x4097x64xbf16>, tensor<64x1x4097x64xbf16> -> tensor<1x1x64x64xbf16>
  return %o : tensor<1x1x64x64xbf16>
}

func.func @cascade(%q: tensor<1x1x64x64xbf16>, %pk: tensor<1x1x4096x64xbf16>, %pv: tensor<1x1x4096x64xbf16>, %k: tensor<64x1x1x64xbf16>, %v: tensor<64x1x1x64xbf16>, %qs: tensor<65xi32>, %qo: tensor<64xi32>, %kl: tensor<64xi32>) -> tensor<1x1x64x64xbf16> {
  %o = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<65xi32>) q_offset(%qo : tensor<64xi32>) kv_len(%kl : tensor<64xi32>) causal : tensor<1x1x64x64xbf16>, tensor<1x1x4096x64xbf16>, tensor<1x1x4096x64xbf16>, tensor<64x1x1x64xbf16>, tensor<64x1x1x64xbf16> -> tensor<1x1x64x64xbf16>
  return %o : tensor<1x1x64x64xbf16>
}
