//===- Schedule.cpp - the tile schedule's block sizes and split ----------===//

#include "kvattn/Support/Schedule.h"

#include <algorithm>
#include <cstdint>

namespace mlir {
namespace kvattn {
namespace schedule {

static bool isDynamic(int64_t size) { return size == kDynamic; }

int64_t automaticBlockM(int64_t rows, int64_t maxBlockM) {
  if (isDynamic(rows))
    return maxBlockM;
  for (int64_t bm = 16; bm < maxBlockM; bm *= 2)
    if (rows <= bm)
      return bm;
  return maxBlockM;
}

bool wideWarpsFit(const Problem &p) {
  const int64_t d = p.headDim, dv = p.valueHeadDim ? p.valueHeadDim : d;
  if (p.kvElementBits != 16 || d <= 0 || d % 16 != 0 || dv % 8 != 0 ||
      d > 128 || dv > 128)
    return false;
  // Two tiles' scores (BN / 2 each, BN = 64) and accumulators (Dv / 2
  // each), the query fragments when they take at most 32 registers.
  const int64_t query = 2 * d / 4 <= 32 ? 2 * d / 4 : 0;
  // A tree's mask walks each draft token's ancestry with the scores live:
  // 32 registers fewer (at hd128 the 128-row program spilled 172 bytes on
  // sm_80; hd64 fits). So does ALiBi's bias, converted to f32 per score
  // with the row's slope live (at hd128 the 128-row program kept a 16-32
  // byte stack frame on sm_80; hd64 fits).
  return 2 * (64 / 2 + dv / 2) + query <= (p.tree || p.alibi ? 160 : 192);
}

int64_t wideProgramSharedBytes(const Problem &p, int64_t blockN) {
  const int64_t dv = p.valueHeadDim ? p.valueHeadDim : p.headDim;
  return 2 * (128 * p.headDim + blockN * p.headDim + blockN * dv);
}

int64_t wideBlockN(const Problem &p, int64_t sharedMemoryPerSm) {
  auto twoFit = [&](int64_t blockN) {
    return sharedMemoryPerSm == 0 ||
           2 * (wideProgramSharedBytes(p, blockN) + 1024) <= sharedMemoryPerSm;
  };
  if (!wideWarpsFit(p)) {
    // ALiBi where two 64-key programs do not fit anyway (D = 128 on the
    // 100 KB chips): 128 x 32 keeps 32 score registers fewer per lane than
    // wideWarpsFit counts, and assembles without a stack frame.
    Problem withoutBias = p;
    withoutBias.alibi = false;
    if (!p.alibi || p.tree || !wideWarpsFit(withoutBias) || twoFit(64) ||
        !twoFit(32))
      return 0;
    return 32;
  }
  if (twoFit(64))
    return 64;
  // The 100 KB chips (sm_86, sm_89) at D = 128: 128 x 64 takes 64 KB, one
  // program per multiprocessor (4 warps: nothing hides a warp's latency
  // but the others of its program; and ptxas spills 32 bytes of the sm_89
  // append kernel). 128 x 32 takes 48 KB: two programs, and each K/V
  // fragment still feeds 32 rows — 28.7 KB of shared-memory traffic per
  // unit of work against 41.3 KB for 64 x 64 on 16-row warps
  // (docs/gpu-lowering.md, "Block sizes"). FlashAttention-2 takes 128 x 32
  // there for non-causal attention for the same reason. 32 keys need fewer
  // registers than 64: wideWarpsFit holds a fortiori.
  if (twoFit(32))
    return 32;
  return 0;
}

// The K/V staging blocks and the score tile stay within shared memory: one
// warp's 64-key K and V blocks at D = 128 (32 KB, 16-bit) would leave room
// for 5 programs in a 227 KB multiprocessor, 8 fit with 32 keys
// (docs/gpu-lowering.md's formula).
int64_t automaticBlockN(int64_t headDim, int64_t bm) {
  if (headDim > 128)
    return 32;
  return bm == 16 && headDim > 64 ? 32 : 64;
}

int64_t tensorCoreProgramSharedBytes(const Problem &p, int64_t bm, int64_t bn) {
  const int64_t dv = p.valueHeadDim ? p.valueHeadDim : p.headDim;
  return 2 * (bm * p.headDim + bn * p.headDim + bn * dv);
}

BlockPair largeHeadDimBlocks(const Problem &p, int64_t bm,
                             int64_t sharedMemoryPerSm) {
  const int64_t d = p.headDim, dv = p.valueHeadDim ? p.valueHeadDim : d;
  if (p.kvElementBits != 16 || d <= 128 || d > 256 || d % 16 != 0 ||
      dv % 8 != 0 || dv > 256 || bm < 64)
    return {};
  auto fits = [&](int64_t rows) {
    return sharedMemoryPerSm == 0 ||
           tensorCoreProgramSharedBytes(p, rows, 64) + 1024 <=
               sharedMemoryPerSm;
  };
  if (bm > 64 && fits(128))
    return {128, 64};
  if (fits(64))
    return {64, 64};
  return {};
}

int64_t latentValueSplit(int64_t dv) {
  int64_t split = 1;
  while (split < 4 && dv / split > 128 && dv % (16 * 2 * split) == 0)
    split *= 2;
  return split;
}

int64_t latentProgramSharedBytes(const Problem &p, int64_t bm, int64_t bn) {
  const int64_t dv = p.valueHeadDim ? p.valueHeadDim : p.headDim;
  const int64_t scores = latentValueSplit(dv) > 1 ? 4 * bm * bn : 0;
  return 2 * (bm * p.headDim + bn * p.headDim) + scores;
}

int64_t latentWgmmaSharedBytes(const Problem &p, int64_t bm, int64_t bn) {
  auto align = [](int64_t v, int64_t a) { return (v + a - 1) / a * a; };
  const int64_t exchange = align(align(bm * 4, 16) + bm * bn * 2, 1024);
  const int64_t ringBarriers = 8 * 8;
  return align(2 * bm * p.headDim, 1024) + exchange +
         2 * align(2 * bn * p.headDim, 1024) + ringBarriers;
}

LatentBlocks latentBlocks(const Problem &p, int64_t rows,
                          int64_t sharedMemoryPerSm, bool wgmma) {
  const int64_t dv = p.valueHeadDim ? p.valueHeadDim : p.headDim;
  // The K stage's element width: an FP8 cache is staged in the query's type.
  const int64_t stageBits =
      p.kvElementBits == 8 ? p.queryElementBits : p.kvElementBits;
  if (!p.latent || stageBits != 16 || p.headDim % 16 != 0 || dv % 8 != 0)
    return {};
  // 32 keys: four 8-key slices, one per warp of a split of 4.
  const int64_t bn = 32;
  int64_t bm = automaticBlockM(rows, kMaxAutoBlockM);
  while (bm > 16 && sharedMemoryPerSm != 0 &&
         latentProgramSharedBytes(p, bm, bn) + 1024 > sharedMemoryPerSm)
    bm /= 2;
  // At most 8 warps: a thread of a 16-warp program has 128 registers, and
  // the 64-register accumulator with its scores and operands spilled there.
  // 64 rows take a split of 2 (128 accumulator registers per lane, hd 256's
  // budget) rather than fewer rows (each program reloads the K blocks).
  int64_t split = latentValueSplit(dv);
  while (split > 1 && bm / 16 * split > 8 && dv / (split / 2) <= 256)
    split /= 2;
  // sm_90a: whole warpgroups sharing each 64 rows (split > 1) exchange
  // maxima and 16-bit probabilities instead of f32 scores, which leaves
  // room for two stages of 64 keys: half the blocks, so half the
  // accumulator rescales and per-block softmax work (docs/gpu-lowering.md,
  // "The latent form on wgmma"). Fewer rows (16 heads) are padded to the
  // warpgroup's 64, FlashMLA's tile at every head count: wgmma reads each
  // K block from shared memory once per warpgroup, where a 16-row program
  // reads it through ldmatrix for every 16 rows, and the padding's tensor
  // work is what a decode has to spare.
  if (wgmma) {
    const int64_t rowsW = std::max<int64_t>(bm, 64);
    int64_t splitW = latentValueSplit(dv);
    while (splitW > 1 && rowsW / 16 * splitW > 8 && dv / (splitW / 2) <= 256)
      splitW /= 2;
    if (splitW > 1 && rowsW % 64 == 0 && p.headDim % 64 == 0 &&
        latentWgmmaSharedBytes(p, rowsW, 2 * bn) <= kWgmmaSharedMemoryBytes)
      return {rowsW, 2 * bn, rowsW / 16 * splitW};
  }
  return {bm, bn, bm / 16 * split};
}

bool wgmmaFits(const Problem &p) {
  const int64_t dv = p.valueHeadDim ? p.valueHeadDim : p.headDim;
  // 64-column panels; P.V's N (Dv) and the Q.K^T steps at most 256.
  auto panelled = [](int64_t cols) {
    return cols > 0 && cols % 64 == 0 && cols <= 256;
  };
  return panelled(p.headDim) && panelled(dv) && p.kvElementBits == 16 &&
         p.queryInKvType;
}

int64_t wgmmaBlockN(const Problem &p, int64_t bm, int64_t numWarps) {
  if (!wgmmaFits(p) || numWarps <= 0 || numWarps % 4 != 0 ||
      bm != 16 * numWarps)
    return 0;
  const int64_t d = p.headDim, dv = p.valueHeadDim ? p.valueHeadDim : d;
  if (d <= 128 && dv <= 128)
    return 128;
  // Wider heads: the most keys (a multiple of 32) whose two K/V stages fit
  // beside the query tile in a CTA's shared memory and whose scores fit
  // beside the accumulator in a consumer's data registers: 64 at hd 256,
  // 96 at hd 192. (FlashAttention-3 takes 80 and 112 there; with ptxas
  // 13.0 kvattn's consumers spilled 32-112 bytes at 80 keys and hd 256 and
  // 8-12 at 112 keys and hd 192 on paged or dynamic caches, none at 64 and
  // 96: docs/gpu-lowering.md, "Hopper (sm_90a)".)
  for (int64_t bn = 128; bn >= 32; bn -= 32) {
    const int64_t shared = 2 * (bm * d + 2 * bn * (d + dv)) + 1024;
    if (shared <= kWgmmaSharedMemoryBytes &&
        bn / 2 + dv / 2 <= kWgmmaDataRegisters)
      return bn;
  }
  return 0;
}

int64_t programsPerSm(int64_t numWarps, int64_t splitWarpsPerSm) {
  // (block-m < 16 records 0 warps: count one.)
  const int64_t warps = std::max<int64_t>(numWarps, 1);
  return splitWarpsPerSm > 0 ? (splitWarpsPerSm + warps - 1) / warps : 2;
}

int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t out;
  return __builtin_mul_overflow(a, b, &out) ? INT64_MAX : out;
}

/// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1.
static int64_t ceilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/// The most chunks `keys` split into: one per `bn`-key block, each of at
/// least `minKeys` keys (0: no minimum), 1 to `maxSplits`.
static int64_t chunkLimit(int64_t keys, int64_t bn, int64_t minKeys,
                          int64_t maxSplits) {
  keys = std::max<int64_t>(keys, 0);
  int64_t chunks = ceilDiv(keys, std::max<int64_t>(bn, 1));
  if (minKeys > 0)
    chunks = std::min(chunks, keys / minKeys);
  return std::clamp<int64_t>(chunks, 1, std::max<int64_t>(maxSplits, 1));
}

int64_t splitRule(int64_t programs, int64_t keys, int64_t bn, int64_t perSm,
                  int64_t numSms, int64_t minKeys, int64_t maxSplits) {
  programs = std::max<int64_t>(programs, 1);
  const int64_t slots =
      saturatingMul(std::max<int64_t>(perSm, 0), std::max<int64_t>(numSms, 1));
  const int64_t wanted = ceilDiv(slots, programs);
  const int64_t limit = chunkLimit(keys, bn, minKeys, maxSplits);
  const int64_t fill = std::min(wanted, limit);
  // One wave holds every program at `fill` chunks: as many as allowed.
  if (saturatingMul(programs, fill) <= slots)
    return std::max<int64_t>(fill, 1);
  // Two waves or more of unsplit programs: the last one's idle share is at
  // most a half and shrinks with their count, while every chunk's partial
  // output is written and merged (a causal prefill's programs, unequal,
  // fill the tail by their heaviest-first order anyway): no split.
  if (fill == 1 && programs >= saturatingMul(slots, 2))
    return 1;
  // The chunk count that fills every slot overshoots into a partial last
  // wave (64 MLA programs x 3 chunks on 132 one-program SMs: 1.45 waves,
  // 73 % of the slots busy), or the programs alone do (128 MLA programs on
  // an A100's 108: a second wave 19 % busy). A launch of n chunks takes
  // about ceil(programs * n / slots) waves of 1/n of the keys each: take
  // the n up to twice that count (at least 2) with the least
  // ceil(programs * n / slots) / n, a larger n only where that is at least
  // 5 % less (the merge reads every chunk): 2 in both examples, one wave
  // of halves and three.
  const int64_t last =
      std::min(limit, std::max<int64_t>(2, saturatingMul(fill, 2)));
  auto waves = [&](int64_t n) {
    return ceilDiv(saturatingMul(programs, n), slots);
  };
  int64_t best = 1;
  for (int64_t n = 2; n <= last; ++n) {
    if (saturatingMul(programs, n) == INT64_MAX)
      break; // (a launch the grid limits refuse anyway)
    // waves(n) / n < 0.95 * waves(best) / best, without division.
    if (saturatingMul(saturatingMul(waves(n), best), 20) <
        saturatingMul(saturatingMul(waves(best), n), 19))
      best = n;
  }
  return best;
}

int64_t varlenPrograms(int64_t qHeads, int64_t group, int64_t rows, int64_t bm,
                       int64_t sequences) {
  const int64_t g = std::max<int64_t>(group, 1);
  const int64_t packedRows = saturatingMul(g, std::max<int64_t>(rows, 0));
  const int64_t blocks = packedRows / std::max<int64_t>(bm, 1);
  const int64_t seqs = std::max<int64_t>(sequences, 0);
  const int64_t perHead = blocks > INT64_MAX - seqs ? INT64_MAX : blocks + seqs;
  return saturatingMul(std::max<int64_t>(qHeads, 0) / g, perHead);
}

int64_t runTimeSplitMax(int64_t logicalKeys, int64_t bn, int64_t minKeys) {
  if (isDynamic(logicalKeys))
    return kMaxAutomaticSplit;
  return chunkLimit(logicalKeys, bn, minKeys, kMaxAutomaticSplit);
}

Blocks choose(const Problem &p, const Options &o) {
  Blocks s;
  // 32-row warps: 128-row programs on 4 warps where the chip's shared
  // memory and the tensor-core registers allow (blocks of up to 64 rows
  // keep 16-row warps: more warps for fewer rows).
  // (FlashAttention-2's choice: 128 x 64 at hd128 on sm_80/sm_90, 64 x 64
  // on the 100 KB sm_86/sm_89, 128-row tiles at hd64 on all of them.)
  const int64_t wideBn =
      !o.blockM && !o.numWarps && !o.blockN && o.maxWarpRows >= 32
          ? wideBlockN(p, o.sharedMemoryPerSm)
          : 0;
  const bool wide = wideBn != 0;
  // sm_90a: programs of more than 64 rows (or a dynamic L) whose tiles
  // the wgmma lowering takes are two consumer warpgroups of 64 rows (8
  // warps of 16 rows), which share each K/V block (FlashAttention-3's
  // 128-row tile).
  const bool twoWarpgroups =
      !o.blockM && !o.numWarps && o.wgmma && wgmmaFits(p);
  // The largest block-m the automatic choice below takes.
  const int64_t maxAutoBm =
      wide || twoWarpgroups ? 2 * kMaxAutoBlockM : kMaxAutoBlockM;
  // GQA packing needs only the head counts static: B and S may be dynamic,
  // and so may L (a serving step's query length is known only at run time;
  // packing never reads more K/V than the unpacked schedule, and G times
  // less for few rows). A ragged batch packs whenever it can: its
  // sequences' query lengths are known only at run time, and decode tokens
  // (L = 1) are the common case of a serving step.
  const bool packable = o.packGqa && !isDynamic(p.qHeads) &&
                        !isDynamic(p.kvHeads) && p.kvHeads > 0;
  if (packable && (p.varlen || isDynamic(p.qLen) ||
                   p.qLen < (o.blockM ? o.blockM : kMaxAutoBlockM)))
    s.group = p.qHeads / p.kvHeads;
  // A static L from there up to below the 128 rows of a wide or
  // two-warpgroup program (L = 64 at hd 128 on sm_80): one head's rows take
  // a 64-row program of 16-row warps, G heads' rows fill 128-row ones,
  // which read each K/V fragment for 32 rows (half the shared-memory
  // traffic per unit of work) and K/V G times less. Unless the packed
  // launch, split into as many chunks as allowed, leaves a multiprocessor
  // without a program (B = 1 over 8 KV heads: 16 programs x 8 chunks of
  // 512 keys = 128 on an L40S's 142), which the unpacked one, G times the
  // programs, does not.
  if (packable && s.group == 1 && !p.varlen && !o.blockM &&
      maxAutoBm > kMaxAutoBlockM && !isDynamic(p.qLen) && p.qLen < maxAutoBm &&
      !isDynamic(p.batch) && !isDynamic(p.logicalKeys) &&
      p.qHeads / p.kvHeads > 1) {
    const int64_t g = p.qHeads / p.kvHeads;
    const int64_t programs =
        saturatingMul(saturatingMul(p.batch, p.kvHeads),
                      ceilDiv(saturatingMul(p.qLen, g), maxAutoBm));
    const int64_t chunks = o.splitKv
                               ? o.splitKv
                               : chunkLimit(p.logicalKeys, kMaxAutoBlockM,
                                            o.splitMinKeys, kMaxAutomaticSplit);
    if (saturatingMul(programs, chunks) >= o.numSms)
      s.group = g;
  }
  s.bm = o.blockM
             ? o.blockM
             : automaticBlockM(isDynamic(p.qLen) ? kDynamic : p.qLen * s.group,
                               maxAutoBm);
  s.numWarps = o.numWarps
                   ? o.numWarps
                   : (wide && s.bm > kMaxAutoBlockM ? s.bm / 32 : s.bm / 16);
  const int64_t wgmmaBn = o.wgmma ? wgmmaBlockN(p, s.bm, s.numWarps) : 0;
  // D = 129 ... 256 on tensor cores: 64-key blocks, scores in registers,
  // 128 rows on 8 warps where one such program fits (the automatic block-m
  // asked for more than 64 rows: rows > 64 or a dynamic L).
  BlockPair large;
  if (o.tensorCores && !o.blockM && !o.blockN && !o.numWarps) {
    const int64_t rowsBm = automaticBlockM(
        isDynamic(p.qLen) ? kDynamic : p.qLen * s.group, 2 * kMaxAutoBlockM);
    large = largeHeadDimBlocks(p, rowsBm, o.sharedMemoryPerSm);
    if (large.bm) {
      s.bm = large.bm;
      s.numWarps = large.bm / 16;
    }
  }
  // The latent form (DeepSeek MLA) on tensor cores: one K stage serves
  // Q.K^T and P.V, Dv split across the warps of a row group.
  LatentBlocks latent;
  if (o.tensorCores && p.latent && !o.blockM && !o.numWarps) {
    latent = latentBlocks(p, isDynamic(p.qLen) ? kDynamic : p.qLen * s.group,
                          o.sharedMemoryPerSm, o.wgmma);
    if (latent.bm) {
      s.bm = latent.bm;
      s.numWarps = latent.numWarps;
    }
  }
  const bool wideProgram = wide && s.bm > kMaxAutoBlockM;
  s.bn = o.blockN      ? o.blockN
         : latent.bn   ? latent.bn
         : wgmmaBn     ? wgmmaBn
         : large.bn    ? large.bn
         : wideProgram ? wideBn
                       : automaticBlockN(p.headDim, s.bm);
  s.numStages = o.numStages;
  // Split-KV: each program's visible range is cut into `splits` chunks,
  // merged afterwards in chunk order. With a statically empty B, Hq or L
  // (a ragged batch: no packed row) there is no row to merge and no part
  // buffer to index: no split.
  const bool emptyGrid =
      (!p.varlen && p.batch == 0) || p.qHeads == 0 || p.qLen == 0;
  if (emptyGrid) {
    s.splits = 1;
    return s;
  }
  if (o.splitKv != 0) {
    s.splits = o.splitKv;
    return s;
  }
  const int64_t perSm = programsPerSm(s.numWarps, o.splitWarpsPerSm);
  // A ragged batch: P is its grid, (Hq / G) x (floor(G * T / BM) + B),
  // static when Hq, T and the sequence count B are.
  if (p.varlen && !isDynamic(p.qHeads) && !isDynamic(p.qLen) &&
      !isDynamic(p.sequences) && !isDynamic(p.logicalKeys)) {
    const int64_t programs =
        varlenPrograms(p.qHeads, s.group, p.qLen, s.bm, p.sequences);
    s.splits = splitRule(programs, p.logicalKeys, s.bn, perSm, o.numSms,
                         o.splitMinKeys, kMaxAutomaticSplit);
    return s;
  }
  if (!p.varlen && !isDynamic(p.batch) && !isDynamic(p.qHeads) &&
      !isDynamic(p.qLen) && !isDynamic(p.logicalKeys)) {
    // With GQA packing a program takes `group` heads' rows.
    const int64_t heads = p.qHeads / s.group, rows = p.qLen * s.group;
    const int64_t programs = p.batch * heads * ((rows + s.bm - 1) / s.bm);
    s.splits = splitRule(programs, p.logicalKeys, s.bn, perSm, o.numSms,
                         o.splitMinKeys, kMaxAutomaticSplit);
    return s;
  }
  // A dynamic size: chosen at run time, at most runTimeSplitMax chunks
  // (none when that is 1).
  s.splits = runTimeSplitMax(p.logicalKeys, s.bn, o.splitMinKeys);
  s.runTimeSplit = s.splits > 1;
  s.splitPerSm = perSm;
  return s;
}

} // namespace schedule
} // namespace kvattn
} // namespace mlir
