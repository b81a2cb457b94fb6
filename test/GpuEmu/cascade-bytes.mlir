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
// DEFINE: %{pagedmeta} = --input 3=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64 --input 4=0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 --input 5=1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1 --input 6=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117,118,119,120,121,122,123,124,125,126,127,128,129,130,131,132,133,134,135,136,137,138,139,140,141,142,143,144,145,146,147,148,149,150,151,152,153,154,155,156,157,158,159,160,161,162,163,164,165,166,167,168,169,170,171,172,173,174,175,176,177,178,179,180,181,182,183,184,185,186,187,188,189,190,191,192,193,194,195,196,197,198,199,200,201,202,203,204,205,206,207,208,209,210,211,212,213,214,215,216,217,218,219,220,221,222,223,224,225,226,227,228,229,230,231,232,233,234,235,236,237,238,239,240,241,242,243,244,245,246,247,248,249,250,251,252,253,254,255 --input 7=4096 --input 8=256,257,258,259,260,261,262,263,264,265,266,267,268,269,270,271,272,273,274,275,276,277,278,279,280,281,282,283,284,285,286,287,288,289,290,291,292,293,294,295,296,297,298,299,300,301,302,303,304,305,306,307,308,309,310,311,312,313,314,315,316,317,318,319
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
//
// paged: the same cascade over one pool of 16-token pages (the prefix in
// pages 0 .. 255 through prefix_pages, sequence b's one key in page 256 + b
// through block_table). The prefix kernel reads the prefix's K + V once as
// before; its table adds 8,208 bytes (each KV block's 4 entries for the K and
// the V stage of each warp, and prefix_len): 1,081,616 bytes. The suffix
// kernel adds the 64 tables' reads (8,192 bytes).
// RUN: kvattn-run %s --entry=paged --target=gpu-emu --stats --check %{pagedmeta} | FileCheck %s --check-prefix=PAGED
// 1,081,616 + 59,808 + 41,472 = 1,182,896 bytes, 1.13 x the prefix's K + V.
// PAGED: emu: kernel=kvattn_gpu_kvattn_0 grid=1x1x1 {{.*}} global_bytes=1081616
// PAGED: emu: kernel=kvattn_gpu_kvattn_1 grid=1x65x1 {{.*}} global_bytes=59808
// PAGED: emu: kernel=kvattn_gpu_kvattn_2 grid=1x1x1 {{.*}} global_bytes=41472
// PAGED: {{^PASS$}}

func.func @plain(%q: tensor<1x1x64x64xbf16>, %k: tensor<64x1x4097x64xbf16>, %v: tensor<64x1x4097x64xbf16>, %qs: tensor<65xi32>, %qo: tensor<64xi32>, %kl: tensor<64xi32>) -> tensor<1x1x64x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_start(%qs : tensor<65xi32>) q_offset(%qo : tensor<64xi32>) kv_len(%kl : tensor<64xi32>) causal : tensor<1x1x64x64xbf16>, tensor<64x1x4097x64xbf16>, tensor<64x1x4097x64xbf16> -> tensor<1x1x64x64xbf16>
  return %o : tensor<1x1x64x64xbf16>
}

func.func @cascade(%q: tensor<1x1x64x64xbf16>, %pk: tensor<1x1x4096x64xbf16>, %pv: tensor<1x1x4096x64xbf16>, %k: tensor<64x1x1x64xbf16>, %v: tensor<64x1x1x64xbf16>, %qs: tensor<65xi32>, %qo: tensor<64xi32>, %kl: tensor<64xi32>) -> tensor<1x1x64x64xbf16> {
  %o = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<65xi32>) q_offset(%qo : tensor<64xi32>) kv_len(%kl : tensor<64xi32>) causal : tensor<1x1x64x64xbf16>, tensor<1x1x4096x64xbf16>, tensor<1x1x4096x64xbf16>, tensor<64x1x1x64xbf16>, tensor<64x1x1x64xbf16> -> tensor<1x1x64x64xbf16>
  return %o : tensor<1x1x64x64xbf16>
}

func.func @paged(%q: tensor<1x1x64x64xbf16>, %k: tensor<320x16x1x64xbf16>, %v: tensor<320x16x1x64xbf16>, %qs: tensor<65xi32>, %qo: tensor<64xi32>, %kl: tensor<64xi32>, %pp: tensor<256xi32>, %pl: tensor<1xi32>, %bt: tensor<64x1xi32>) -> tensor<1x1x64x64xbf16> {
  %o = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<65xi32>) q_offset(%qo : tensor<64xi32>) kv_len(%kl : tensor<64xi32>) prefix_pages(%pp : tensor<256xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<64x1xi32>) causal : tensor<1x1x64x64xbf16>, tensor<320x16x1x64xbf16>, tensor<320x16x1x64xbf16>, tensor<320x16x1x64xbf16>, tensor<320x16x1x64xbf16> -> tensor<1x1x64x64xbf16>
  return %o : tensor<1x1x64x64xbf16>
}
