//===- ScheduleTest.cpp - the tile schedule's arithmetic -----------------===//
//
// kvattn/Support/Schedule.h: the block sizes, GQA packing and split-KV chunk
// counts -kvattn-tile chooses and the runtime recomputes per launch. Each
// expected value is worked out from the rule in the comment beside it.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Support/Schedule.h"

#include "gtest/gtest.h"

#include <cstdint>

using namespace mlir::kvattn::schedule;

namespace {

TEST(Schedule, AutomaticBlockM) {
  // The fewest 16-row warps holding the rows, at most 64.
  EXPECT_EQ(automaticBlockM(1), 16);
  EXPECT_EQ(automaticBlockM(16), 16);
  EXPECT_EQ(automaticBlockM(17), 32);
  EXPECT_EQ(automaticBlockM(32), 32);
  EXPECT_EQ(automaticBlockM(33), 64);
  EXPECT_EQ(automaticBlockM(4096), 64);
  EXPECT_EQ(automaticBlockM(kDynamic), kMaxAutoBlockM);
}

TEST(Schedule, AutomaticBlockN) {
  EXPECT_EQ(automaticBlockN(64, 16), 64);  // one warp, D = 64: 64 keys
  EXPECT_EQ(automaticBlockN(128, 16), 32); // one warp, D = 128: 32 keys
  EXPECT_EQ(automaticBlockN(128, 64), 64); // four warps, D = 128
  EXPECT_EQ(automaticBlockN(256, 64), 32); // D > 128: always 32
  EXPECT_EQ(automaticBlockN(100, 32), 64); // two warps, D <= 128
}

TEST(Schedule, ProgramsPerSm) {
  EXPECT_EQ(programsPerSm(4, 0), 2);  // 0: two programs
  EXPECT_EQ(programsPerSm(4, 16), 4); // 16 warps / 4 per program
  EXPECT_EQ(programsPerSm(3, 8), 3);  // ceil(8 / 3)
  EXPECT_EQ(programsPerSm(0, 8), 8);  // block-m < 16 counts one warp
}

TEST(Schedule, SplitRule) {
  // 8 programs, 32768 keys in blocks of 32 (1024 chunks), 2 per SM on 132
  // SMs: ceil(264 / 8) = 33 chunks.
  EXPECT_EQ(splitRule(8, 32768, 32, 2, 132, 0, 64), 33);
  // At least 4096 keys a chunk: at most 8 chunks.
  EXPECT_EQ(splitRule(8, 32768, 32, 2, 132, 4096, 64), 8);
  // Capped at maxSplits.
  EXPECT_EQ(splitRule(1, 32768, 32, 2, 132, 0, 64), 64);
  // Enough programs already: 1.
  EXPECT_EQ(splitRule(10000, 32768, 32, 2, 132, 0, 64), 1);
  // Fewer keys than a block, or none: 1, never 0.
  EXPECT_EQ(splitRule(8, 10, 64, 2, 132, 0, 64), 1);
  EXPECT_EQ(splitRule(8, 0, 64, 2, 132, 0, 64), 1);
  // minKeys above the keys: 1.
  EXPECT_EQ(splitRule(8, 100, 32, 2, 132, 4096, 64), 1);
  // No program (B = 0) counts as one.
  EXPECT_EQ(splitRule(0, 4096, 64, 2, 16, 0, 64), 32);
  // Sizes near 2^63 (a run-time launch before the grid limits refuse it):
  // no intermediate overflows.
  const int64_t huge = INT64_MAX;
  EXPECT_EQ(splitRule(1, huge, 32, huge, 132, 0, 64), 64);
  EXPECT_EQ(splitRule(huge, huge, 1, 2, 132, 0, 64), 1);
  EXPECT_EQ(saturatingMul(huge, 2), huge);
  EXPECT_EQ(saturatingMul(1 << 20, 1 << 20), int64_t(1) << 40);
}

TEST(Schedule, RunTimeSplitMax) {
  EXPECT_EQ(runTimeSplitMax(kDynamic, 64, 0), kMaxAutomaticSplit);
  EXPECT_EQ(runTimeSplitMax(100, 64, 0), 2);      // ceil(100 / 64)
  EXPECT_EQ(runTimeSplitMax(32768, 64, 0), 64);   // 512 blocks, capped
  EXPECT_EQ(runTimeSplitMax(32768, 64, 8192), 4); // 32768 / 8192
  EXPECT_EQ(runTimeSplitMax(10, 64, 100), 1);     // never below 1
}

Problem gqaDecode() {
  Problem p;
  p.batch = 1;
  p.qHeads = 32;
  p.kvHeads = 8;
  p.qLen = 1;
  p.logicalKeys = 32768;
  p.headDim = 128;
  return p;
}

TEST(Schedule, ChooseStaticDecode) {
  // GQA 32/8 decode: 4 heads packed into one 16-row warp, 32-key blocks
  // (one warp, D = 128); B * Hkv = 8 programs, so 33 chunks on 132 SMs.
  Options o;
  o.splitKv = 0;
  o.numSms = 132;
  Blocks s = choose(gqaDecode(), o);
  EXPECT_EQ(s.group, 4);
  EXPECT_EQ(s.bm, 16);
  EXPECT_EQ(s.bn, 32);
  EXPECT_EQ(s.numWarps, 1);
  EXPECT_EQ(s.splits, 33);
  EXPECT_FALSE(s.runTimeSplit);
  // Without packing: 32 programs of one row; 264 / 32 -> 9 chunks would
  // make 288 programs on 264 slots, two waves of ninths: 8 chunks make one
  // wave of eighths.
  o.packGqa = false;
  s = choose(gqaDecode(), o);
  EXPECT_EQ(s.group, 1);
  EXPECT_EQ(s.splits, 8);
}

TEST(Schedule, SplitRuleWaves) {
  // DeepSeek MLA decode, 64 sequences at 16 heads: 64 programs of one per
  // SM on 132 SMs, 4096 keys in 64-key blocks, chunks of >= 512 keys.
  // ceil(132 / 64) = 3 chunks run two waves of thirds (the second 45 %
  // busy); 2 chunks run one wave of halves.
  EXPECT_EQ(splitRule(64, 4096, 64, 1, 132, 512, 64), 2);
  // At 128 heads (128 programs): 2 chunks, 256 programs, two waves of
  // halves; 1 chunk is one wave of wholes, the same time: the fewer.
  EXPECT_EQ(splitRule(128, 4096, 64, 1, 132, 512, 64), 1);
  // A whole number of waves keeps the fill count: 528 one-warp decode
  // programs on 8 x 132 slots take 2 chunks.
  EXPECT_EQ(splitRule(528, 4096, 32, 8, 132, 512, 64), 2);
  // Less than one wave even at the cap: the cap (8 programs, 8 chunks of
  // 512 keys).
  EXPECT_EQ(splitRule(8, 4096, 32, 8, 132, 512, 64), 8);
  // Enough programs: no split.
  EXPECT_EQ(splitRule(2000, 4096, 64, 2, 132, 0, 64), 1);
  // More programs than slots, fewer than two waves' worth: 128 MLA
  // programs (128 heads, one per SM) on an A100's 108 SMs run a second wave
  // 19 % busy; 2 chunks run three waves of halves (1.5 against 2).
  EXPECT_EQ(splitRule(128, 4096, 64, 1, 108, 512, 64), 2);
  // ... but only where the keys allow two chunks of 512.
  EXPECT_EQ(splitRule(128, 1000, 64, 1, 108, 512, 64), 1);
  // Two whole waves stay unsplit (2 chunks: four waves of halves), and so
  // do more: a causal prefill of 2048 programs on 284 slots (7.2 waves;
  // halves would make 7.5 of 8, at the merge's cost).
  EXPECT_EQ(splitRule(216, 4096, 64, 1, 108, 512, 64), 1);
  EXPECT_EQ(splitRule(2048, 8192, 64, 2, 142, 512, 64), 1);
}

TEST(Schedule, ChoosePackedAppend) {
  // GQA 32/8 append of 64 rows over 4096 keys at hd 128 on sm_80 (128-row
  // programs of 32-row warps fit): 4 heads' rows packed into 128-row
  // programs, 16 of them x 8 chunks of 512 keys = 128 >= 108 SMs.
  Problem p = gqaDecode();
  p.qLen = 64;
  p.logicalKeys = 4160;
  p.kvElementBits = 16;
  Options o;
  o.splitKv = 0;
  o.splitMinKeys = 512;
  o.splitWarpsPerSm = 8;
  o.maxWarpRows = 32;
  o.tensorCores = true;
  o.sharedMemoryPerSm = 167936;
  o.numSms = 108;
  Blocks s = choose(p, o);
  EXPECT_EQ(s.group, 4);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.splits, 8);
  // 142 SMs (an L40S's count; 100 KB chips take 128 x 32 programs): the
  // 128 packed chunks would leave SMs idle, 32 unpacked 64-row programs
  // do not.
  o.numSms = 142;
  o.sharedMemoryPerSm = 102400;
  s = choose(p, o);
  EXPECT_EQ(s.group, 1);
  EXPECT_EQ(s.bm, 64);
  // Two sequences: packed again.
  p.batch = 2;
  s = choose(p, o);
  EXPECT_EQ(s.group, 4);
  EXPECT_EQ(s.bm, 128);
  // 128 rows: one full program a head either way, not packed.
  p.qLen = 128;
  s = choose(p, o);
  EXPECT_EQ(s.group, 1);
  // 16-row warps only (no 128-row program): the 64-row rule as before.
  p.qLen = 64;
  o.maxWarpRows = 16;
  s = choose(p, o);
  EXPECT_EQ(s.group, 1);
}

TEST(Schedule, ChooseRunTimeSplit) {
  // A dynamic batch: the split is chosen per launch, bounded by 64 (1024
  // KV blocks), two programs per SM.
  Options o;
  o.splitKv = 0;
  Problem p = gqaDecode();
  p.batch = kDynamic;
  Blocks s = choose(p, o);
  EXPECT_TRUE(s.runTimeSplit);
  EXPECT_EQ(s.splits, 64);
  EXPECT_EQ(s.splitPerSm, 2);
  // Dynamic keys with a static bound of one block: no split at all.
  p.logicalKeys = 20;
  s = choose(p, o);
  EXPECT_FALSE(s.runTimeSplit);
  EXPECT_EQ(s.splits, 1);
}

TEST(Schedule, ChoosePrefillAndOptions) {
  // A 4096-row prefill is not packed: 64-row programs of 4 warps, 64 keys.
  Problem p = gqaDecode();
  p.qLen = 4096;
  p.logicalKeys = 4096;
  Options o;
  Blocks s = choose(p, o);
  EXPECT_EQ(s.group, 1);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 64);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.splits, 1); // split-kv = 1 (the option's default)
  // Explicit options win.
  o.blockM = 32;
  o.blockN = 16;
  o.numWarps = 1;
  o.numStages = 3;
  o.splitKv = 5;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 32);
  EXPECT_EQ(s.bn, 16);
  EXPECT_EQ(s.numWarps, 1);
  EXPECT_EQ(s.numStages, 3);
  EXPECT_EQ(s.splits, 5);
}

TEST(Schedule, WideWarps) {
  // 32-row warps fit 16-bit K/V up to D = Dv = 128: 2 (32 + Dv / 2) score
  // and accumulator registers, plus the query fragments when they take at
  // most 32 (D <= 64), within 192.
  Problem p;
  p.kvElementBits = 16;
  p.headDim = 128;
  EXPECT_TRUE(wideWarpsFit(p)); // 2 (32 + 64) = 192
  p.headDim = 64;
  EXPECT_TRUE(wideWarpsFit(p)); // 2 (32 + 32) + 32 = 160
  p.valueHeadDim = 128;
  EXPECT_FALSE(wideWarpsFit(p)); // 2 (32 + 64) + 32 = 224
  p.valueHeadDim = 0;
  p.headDim = 256;
  EXPECT_FALSE(wideWarpsFit(p)); // beyond 128
  p.headDim = 40;
  EXPECT_FALSE(wideWarpsFit(p)); // not a multiple of 16
  p.headDim = 128;
  p.kvElementBits = 32;
  EXPECT_FALSE(wideWarpsFit(p)); // f32: the scalar lowering
  // Draft-token trees keep 32 registers for the mask's walks: hd64 fits,
  // hd128 takes 16-row warps.
  p.kvElementBits = 16;
  p.tree = true;
  EXPECT_FALSE(wideWarpsFit(p)); // 192 > 160
  p.headDim = 64;
  EXPECT_TRUE(wideWarpsFit(p)); // 160
  p.tree = false;
  // So does ALiBi's bias (the hd128 128-row program kept a stack frame).
  p.alibi = true;
  EXPECT_TRUE(wideWarpsFit(p)); // 160
  p.headDim = 128;
  EXPECT_FALSE(wideWarpsFit(p)); // 192 > 160
  p.headDim = 64;
  p.alibi = false;
  // A 4096-row bf16 prefill with max-warp-rows = 32: 128 rows on 4 warps,
  // 64 keys; with 16 (the default, and the 100 KB chips) 64 rows on 4.
  Problem prefill;
  prefill.qHeads = prefill.kvHeads = 8;
  prefill.qLen = 4096;
  prefill.logicalKeys = 4096;
  prefill.headDim = 128;
  prefill.kvElementBits = 16;
  Options o;
  o.maxWarpRows = 32;
  Blocks s = choose(prefill, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.bn, 64);
  // 64 rows or fewer keep 16-row warps (more warps for fewer rows).
  prefill.qLen = 64;
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.numWarps, 4);
  // An explicit block-m or num-warps is taken as given.
  prefill.qLen = 4096;
  o.blockM = 128;
  s = choose(prefill, o);
  EXPECT_EQ(s.numWarps, 8);
  o.blockM = 0;
  // Two 128-row programs must fit the multiprocessor's shared memory (1 KB
  // reserved each): at D = 128 with 64-key blocks they take 2 x (64 KB +
  // 1 KB), more than an sm_86/sm_89's 100 KB and less than an sm_80's
  // 164 KB; with 32-key blocks 2 x (48 KB + 1 KB) fit the 100 KB chips
  // (128 x 32 there); at D = 64 2 x (32 KB + 1 KB) fit both with 64 keys.
  EXPECT_EQ(wideProgramSharedBytes(prefill), 65536);
  EXPECT_EQ(wideProgramSharedBytes(prefill, 32), 49152);
  o.sharedMemoryPerSm = 100 * 1024;
  EXPECT_EQ(wideBlockN(prefill, o.sharedMemoryPerSm), 32);
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.bn, 32);
  // 64 rows or fewer keep 16-row warps and 64 keys there.
  prefill.qLen = 64;
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 64);
  prefill.qLen = 4096;
  // Less than two 48 KB programs: 64 x 64 on 16-row warps.
  o.sharedMemoryPerSm = 2 * (48 + 1) * 1024 - 1;
  EXPECT_EQ(wideBlockN(prefill, o.sharedMemoryPerSm), 0);
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.bn, 64);
  o.sharedMemoryPerSm = 164 * 1024;
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.bn, 64);
  prefill.headDim = 64;
  o.sharedMemoryPerSm = 100 * 1024;
  EXPECT_EQ(wideProgramSharedBytes(prefill), 32768);
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.bn, 64);
  // Registers decide before shared memory: a tree's hd128 program keeps
  // 16-row warps even where 32-key blocks would fit.
  prefill.headDim = 128;
  prefill.tree = true;
  EXPECT_EQ(wideBlockN(prefill, 100 * 1024), 0);
  EXPECT_EQ(choose(prefill, o).bm, 64);
  prefill.tree = false;
  // ALiBi's hd128 program: 64-row programs where 128 x 64 would fit the
  // shared memory (sm_80, sm_90), 128 x 32 on the 100 KB chips (32 score
  // registers fewer per lane).
  prefill.alibi = true;
  EXPECT_EQ(wideBlockN(prefill, 100 * 1024), 32);
  EXPECT_EQ(choose(prefill, o).bm, 128);
  EXPECT_EQ(wideBlockN(prefill, 164 * 1024), 0);
  prefill.alibi = false;
  o.maxWarpRows = 16;
  s = choose(prefill, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.numWarps, 4);
}

// sm_90a (Options::wgmma): whole-warpgroup programs at D = Dv = 64 with
// 16-bit K/V in Q's type take 128-key blocks; anything else keeps the
// automatic choice.
// D = 129 ... 256 on tensor cores (Options::tensorCores): 64-key blocks
// (scores in registers), 128 rows on 8 warps where one 128 KB program fits
// the multiprocessor (sm_80, sm_90), 64 rows on the 100 KB chips; decode
// and few-row programs, f32 K/V and the CPU path keep 32 keys.
TEST(Schedule, LatentBlocks) {
  // DeepSeek MLA decode: D = 576, Dv = 512, one KV head.
  Problem p;
  p.latent = true;
  p.headDim = 576;
  p.valueHeadDim = 512;
  p.kvElementBits = 16;
  // 16 heads: 16 rows, 32 keys, 4 warps sharing Dv (split 4).
  LatentBlocks b = latentBlocks(p, 16, 228 * 1024);
  EXPECT_EQ(b.bm, 16);
  EXPECT_EQ(b.bn, 32);
  EXPECT_EQ(b.numWarps, 4);
  // 128 heads: 64 rows on 8 warps (split 2: at most 8 warps).
  b = latentBlocks(p, 128, 228 * 1024);
  EXPECT_EQ(b.bm, 64);
  EXPECT_EQ(b.numWarps, 8);
  // sm_90a (wgmma): the two warpgroups of the 64 rows exchange maxima and
  // 16-bit probabilities instead of f32 scores, which leaves room for two
  // 64-key K stages: 72 KB query tile + 9 KB exchange + 2 x 72 KB stages +
  // the ring's barriers = 230,464 bytes (the kernel's dynamic shared
  // memory, test/Target/ptxas-mla.test) within 227 KB. 16 heads (16 rows)
  // are padded to the same 64-row tile (FlashMLA's).
  EXPECT_EQ(latentWgmmaSharedBytes(p, 64, 64), 230464);
  b = latentBlocks(p, 128, 228 * 1024, /*wgmma=*/true);
  EXPECT_EQ(b.bm, 64);
  EXPECT_EQ(b.bn, 64);
  EXPECT_EQ(b.numWarps, 8);
  b = latentBlocks(p, 16, 228 * 1024, /*wgmma=*/true);
  EXPECT_EQ(b.bm, 64);
  EXPECT_EQ(b.bn, 64);
  EXPECT_EQ(b.numWarps, 8);
  // Without a value split (Dv <= 128) the mma.sync tiles stay.
  Problem small = p;
  small.headDim = 128;
  small.valueHeadDim = 64;
  b = latentBlocks(small, 16, 228 * 1024, /*wgmma=*/true);
  EXPECT_EQ(b.bm, 16);
  EXPECT_EQ(b.bn, 32);
  // 128-key blocks would not fit: 64 stay.
  EXPECT_GT(latentWgmmaSharedBytes(p, 64, 128), kWgmmaSharedMemoryBytes);
  // An FP8 cache is staged in the query's type: a 16-bit query gives the
  // same 16-bit K stage and the same tiles; an f32 query none (no tensor
  // cores), nor an unknown one.
  p.kvElementBits = 8;
  p.queryElementBits = 16;
  b = latentBlocks(p, 128, 228 * 1024);
  EXPECT_EQ(b.bm, 64);
  EXPECT_EQ(b.bn, 32);
  EXPECT_EQ(b.numWarps, 8);
  EXPECT_EQ(latentBlocks(p, 128, 228 * 1024, /*wgmma=*/true).bn, 64);
  p.queryElementBits = 32;
  EXPECT_EQ(latentBlocks(p, 128, 228 * 1024).bm, 0);
  p.queryElementBits = 0;
  EXPECT_EQ(latentBlocks(p, 128, 228 * 1024).bm, 0);
  // Not latent: none.
  p.latent = false;
  p.queryElementBits = 16;
  EXPECT_EQ(latentBlocks(p, 128, 228 * 1024).bm, 0);
}

TEST(Schedule, LargeHeadDim) {
  Problem p;
  p.qHeads = p.kvHeads = 8;
  p.qLen = 4096;
  p.logicalKeys = 4096;
  p.headDim = 256;
  p.kvElementBits = 16;
  EXPECT_EQ(tensorCoreProgramSharedBytes(p, 64, 64), 98304);
  EXPECT_EQ(tensorCoreProgramSharedBytes(p, 128, 64), 131072);
  Options o;
  // The CPU path (no tensor cores): 64 x 32 as before.
  Blocks s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 32);
  o.tensorCores = true;
  o.maxWarpRows = 32;
  o.sharedMemoryPerSm = 164 * 1024; // sm_80
  s = choose(p, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.numWarps, 8);
  EXPECT_EQ(s.bn, 64);
  o.sharedMemoryPerSm = 100 * 1024; // sm_86, sm_89
  s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.bn, 64);
  // 96 KB + 1 KB must fit.
  o.sharedMemoryPerSm = 97 * 1024 - 1;
  EXPECT_EQ(choose(p, o).bn, 32);
  o.sharedMemoryPerSm = 100 * 1024;
  // A dynamic L: the largest program that fits.
  p.qLen = kDynamic;
  EXPECT_EQ(choose(p, o).bm, 64);
  o.sharedMemoryPerSm = 228 * 1024;
  EXPECT_EQ(choose(p, o).bm, 128);
  p.qLen = 4096;
  // 64 rows exactly: 64 x 64.
  p.qLen = 64;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 64);
  // Decode (16 packed rows) and 32-row programs keep 32 keys.
  p.qLen = 1;
  p.qHeads = 32;
  s = choose(p, o);
  EXPECT_EQ(s.group, 4);
  EXPECT_EQ(s.bm, 16);
  EXPECT_EQ(s.bn, 32);
  p.qLen = 8;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 32);
  EXPECT_EQ(s.bn, 32);
  p.qLen = 4096;
  p.qHeads = 8;
  // f32 K/V (the scalar lowering), D = 128 and D = 320: not this rule.
  p.kvElementBits = 32;
  EXPECT_EQ(choose(p, o).bn, 32);
  p.kvElementBits = 16;
  p.valueHeadDim = 320;
  EXPECT_EQ(largeHeadDimBlocks(p, 128, 0).bn, 0);
  p.valueHeadDim = 128; // D = 256, Dv = 128: 128 x 64 (96 KB) fits 100 KB
  EXPECT_EQ(largeHeadDimBlocks(p, 128, 100 * 1024).bm, 64);
  EXPECT_EQ(largeHeadDimBlocks(p, 128, 164 * 1024).bm, 128);
  p.valueHeadDim = 0;
  p.headDim = 128;
  EXPECT_EQ(largeHeadDimBlocks(p, 128, 0).bn, 0);
  // An explicit option wins.
  p.headDim = 256;
  o.blockN = 32;
  EXPECT_EQ(choose(p, o).bn, 32);
  EXPECT_EQ(choose(p, o).bm, 64);
}

TEST(Schedule, ChooseWgmmaBlockN) {
  Problem p;
  p.qHeads = p.kvHeads = 8;
  p.qLen = 4096;
  p.logicalKeys = 4096;
  p.headDim = 64;
  p.kvElementBits = 16;
  p.queryInKvType = true;
  Options o;
  EXPECT_EQ(choose(p, o).bn, 64); // not sm_90a
  o.wgmma = true;
  // More than 64 rows: two consumer warpgroups (128 rows, 8 warps).
  Blocks s = choose(p, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.numWarps, 8);
  EXPECT_EQ(s.bn, 128);
  // 64 rows or fewer: one warpgroup.
  p.qLen = 64;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.numWarps, 4);
  EXPECT_EQ(s.bn, 128);
  p.qLen = 4096;
  // Explicit block-m 64 with 4 warps too.
  o.blockM = 64;
  o.numWarps = 4;
  EXPECT_EQ(choose(p, o).bn, 128);
  // 32-row warps are not warpgroups of wgmma's m64 rows.
  o.blockM = 128;
  o.numWarps = 4;
  EXPECT_EQ(choose(p, o).bn, 64);
  o.blockM = o.numWarps = 0;
  // An explicit block-n is taken as given.
  o.blockN = 32;
  EXPECT_EQ(choose(p, o).bn, 32);
  o.blockN = 0;
  // Fewer rows than a warpgroup (decode): 16 or 32 rows keep 64 keys.
  p.qLen = 20;
  EXPECT_EQ(choose(p, o).bm, 32);
  EXPECT_EQ(choose(p, o).bn, 64);
  p.qLen = 4096;
  // D = 128 and Dv != D (64 or 128) as well: the query is not kept in
  // registers, so 64 scores and 64 accumulators per thread fit.
  p.headDim = 128;
  EXPECT_EQ(choose(p, o).bn, 128);
  p.headDim = 64;
  p.valueHeadDim = 128;
  EXPECT_EQ(choose(p, o).bn, 128);
  p.valueHeadDim = 64; // Dv = D given explicitly
  EXPECT_EQ(choose(p, o).bn, 128);
  // Wider heads: the most keys, a multiple of 32, whose two K/V stages
  // fit beside the query tile in 227 KB and whose scores fit beside the
  // accumulator in 160 registers: 64 at D = Dv = 256 (32 + 128 registers;
  // 96 keys would be 48 + 128), 96 at 192 (128 keys: 241 KB of shared
  // memory), 96 at D = 256, Dv = 128 (128 keys: 225 KB + the query's
  // 64 KB), 64 at D = 128, Dv = 256.
  p.headDim = p.valueHeadDim = 256;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 128);
  EXPECT_EQ(s.numWarps, 8);
  EXPECT_EQ(s.bn, 64);
  EXPECT_EQ(wgmmaBlockN(p, 128, 8), 64);
  EXPECT_EQ(wgmmaBlockN(p, 64, 4), 64);
  p.headDim = p.valueHeadDim = 192;
  EXPECT_EQ(choose(p, o).bn, 96);
  p.headDim = 256;
  p.valueHeadDim = 128;
  EXPECT_EQ(choose(p, o).bn, 96);
  p.headDim = 128;
  p.valueHeadDim = 256;
  EXPECT_EQ(choose(p, o).bn, 64);
  // Beyond 256 columns (P.V's N, four 64-column panels), or not a multiple
  // of 64: not wgmma (mma.sync's 64 rows and 32 keys).
  p.headDim = p.valueHeadDim = 320;
  EXPECT_FALSE(wgmmaFits(p));
  EXPECT_EQ(wgmmaBlockN(p, 128, 8), 0);
  p.headDim = p.valueHeadDim = 160;
  EXPECT_FALSE(wgmmaFits(p));
  p.headDim = p.valueHeadDim = 96;
  EXPECT_FALSE(wgmmaFits(p));
  p.headDim = p.valueHeadDim = 256;
  p.queryInKvType = false;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 32);
  p.queryInKvType = true;
  p.headDim = p.valueHeadDim = 64;
  p.kvElementBits = 32;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 64);
  p.kvElementBits = 16;
  p.queryInKvType = false;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 64);
  EXPECT_EQ(s.bn, 64);
}

TEST(Schedule, VarlenPrograms) {
  // (Hq / G) x (floor(G * T / BM) + B): GQA 32/8 over T = 37 packed rows
  // of 3 sequences in 16-row blocks: 8 x (floor(148 / 16) + 3) = 96.
  EXPECT_EQ(varlenPrograms(32, 4, 37, 16, 3), 96);
  // Unpacked: 32 x (floor(37 / 16) + 3) = 160.
  EXPECT_EQ(varlenPrograms(32, 1, 37, 16, 3), 160);
  // Decode rows only (T = B = 8, G = 4, BM = 32): 8 x (1 + 8) = 72.
  EXPECT_EQ(varlenPrograms(32, 4, 8, 32, 8), 72);
  // No row: one (empty) block per sequence.
  EXPECT_EQ(varlenPrograms(8, 1, 0, 16, 5), 40);
  // Saturating, never wrapping; negative sizes count as 0.
  EXPECT_EQ(varlenPrograms(INT64_MAX, 1, INT64_MAX, 1, INT64_MAX), INT64_MAX);
  EXPECT_EQ(varlenPrograms(8, 1, -4, 16, -1), 0);
}

TEST(Schedule, ChooseRaggedAndEmpty) {
  Options o;
  o.splitKv = 0;
  // A ragged decode step of one sequence over 32768 keys: 4 heads packed
  // into a 16-row block, P = 8 x (floor(4 / 16) + 1) = 8 programs, so the
  // same 33 chunks as the non-ragged decode (ChooseStaticDecode).
  Problem p = gqaDecode();
  p.varlen = true;
  p.qLen = 1;
  p.sequences = 1;
  Blocks s = choose(p, o);
  EXPECT_EQ(s.group, 4);
  EXPECT_EQ(s.bm, 16);
  EXPECT_EQ(s.bn, 32);
  EXPECT_EQ(s.splits, 33);
  EXPECT_FALSE(s.runTimeSplit);
  // Eight decode rows of eight sequences: 32 packed rows take 32-row
  // blocks of 64 keys, P = 8 x (1 + 8) = 72 (the grid, spare blocks
  // included): ceil(2 x 132 / 72) = 4 chunks would make 288 programs on
  // 264 slots, two waves of quarters; 7 make two waves of sevenths.
  p.qLen = 8;
  p.sequences = 8;
  s = choose(p, o);
  EXPECT_EQ(s.bm, 32);
  EXPECT_EQ(s.bn, 64);
  EXPECT_EQ(s.splits, 7);
  // The GPU pipeline's rule (8 warps per SM: 4 two-warp programs, chunks
  // of at least 512 keys): ceil(4 x 132 / 72) = 8 chunks would make 576
  // programs on 528 slots, two waves of eighths; 7 make one of sevenths.
  Options gpu = o;
  gpu.splitWarpsPerSm = 8;
  gpu.splitMinKeys = 512;
  EXPECT_EQ(choose(p, gpu).splits, 7);
  // A prefill-sized step (T = 4096 of 2 sequences): 8 x (256 + 2) = 2064
  // programs fill the SMs, no split.
  p.qLen = 4096;
  p.sequences = 2;
  EXPECT_EQ(choose(p, o).splits, 1);
  // Run-time T or B (a serving engine's compile): a run-time split bounded
  // by 64 chunks (1024 blocks of 32768 keys).
  p.qLen = kDynamic;
  s = choose(p, o);
  EXPECT_TRUE(s.runTimeSplit);
  EXPECT_EQ(s.splits, 64);
  p.qLen = 8;
  p.sequences = kDynamic;
  EXPECT_TRUE(choose(p, o).runTimeSplit);
  // An explicit split-kv applies as it does to other batches.
  Options fixed = o;
  fixed.splitKv = 3;
  EXPECT_EQ(choose(p, fixed).splits, 3);
  // No packed row at all: nothing to merge, no split.
  p.qLen = 0;
  p.sequences = 4;
  s = choose(p, o);
  EXPECT_EQ(s.splits, 1);
  EXPECT_FALSE(s.runTimeSplit);
  // A statically empty grid: no split.
  p = gqaDecode();
  p.batch = 0;
  s = choose(p, o);
  EXPECT_EQ(s.splits, 1);
  EXPECT_FALSE(s.runTimeSplit);
}

} // namespace
