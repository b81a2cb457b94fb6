//===- Schedule.h - the tile schedule's block sizes and split ---*- C++ -*-===//
//
// The schedule policy of -kvattn-tile as plain integer arithmetic: the block
// sizes, warps, GQA packing and the split-KV chunk count chosen for one
// attention from its sizes and the pass options (docs/tile-program.md,
// "Choosing the blocks", "Choosing N"). The pass turns the result into IR;
// the runtime evaluates the same split rule per launch for a run-time split
// (rt::splitCount). Plain C++: the runtime links it without MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_SCHEDULE_H
#define KVATTN_SUPPORT_SCHEDULE_H

#include <cstdint>
#include <limits>

namespace mlir {
namespace kvattn {
namespace schedule {

/// A size known only at run time (MLIR's ShapedType::kDynamic).
inline constexpr int64_t kDynamic = std::numeric_limits<int64_t>::min();

/// The largest automatic split: the GPU merge keeps a row's part lses in
/// registers up to that.
inline constexpr int64_t kMaxAutomaticSplit = 64;

/// The largest block-m the automatic choice takes: with the f32 query and
/// score tiles in shared memory, 64 rows of D = 128 already need about
/// 82 KB on the GPU (and 187-194 registers per thread).
inline constexpr int64_t kMaxAutoBlockM = 64;

/// -kvattn-tile's options that shape the schedule; 0 means "automatic" for
/// blockM, blockN, numWarps and splitKv.
struct Options {
  int64_t blockM = 0, blockN = 0, numWarps = 0, numStages = 2;
  /// KV chunks per program (1: no split, 0: automatic).
  int64_t splitKv = 1;
  /// The multiprocessors the automatic split aims at.
  int64_t numSms = 132;
  bool packGqa = true;
  /// split-kv = 0: the fewest keys a chunk may cover (0: one block), and
  /// the resident warps per multiprocessor to aim at (0: two programs per
  /// multiprocessor).
  int64_t splitMinKeys = 0, splitWarpsPerSm = 0;
  /// The most query rows per warp the automatic choice gives (16 or 32):
  /// with 32, programs of more than 64 rows (or a dynamic L) whose tiles
  /// fit the tensor-core registers (wideWarpsFit) take 128 rows on 4 warps,
  /// two m16 tiles per warp (FlashAttention-2's sm_80/sm_90 tile), where
  /// two such programs fit `sharedMemoryPerSm` bytes (0: no limit; 1 KB
  /// reserved per program) with 64-key blocks, or else with 32-key blocks
  /// (wideBlockN). The GPU pipeline sets both from the chip.
  int64_t maxWarpRows = 16;
  int64_t sharedMemoryPerSm = 0;
  /// sm_90a's wgmma lowering: automatic blocks of up to two warpgroups
  /// (128 rows on 8 warps of 16 rows) at D and Dv multiples of 64 up to
  /// 256 with 16-bit K/V and Q in the K/V type (wgmmaFits); whole
  /// warpgroups take 128 keys at D, Dv <= 128, fewer above (wgmmaBlockN).
  bool wgmma = false;
  /// The GPU's tensor-core lowering runs the programs: automatic blocks of
  /// 16-bit K/V with 128 < D <= 256 take 64 keys and, where one fits
  /// `sharedMemoryPerSm`, 128 rows on 8 warps (largeHeadDimBlocks).
  bool tensorCores = false;
};

/// The sizes of one attention the schedule depends on; any may be kDynamic
/// except the head dims.
struct Problem {
  int64_t batch = 1, qHeads = 1, kvHeads = 1, qLen = 1;
  /// The keys a program may visit: S, or max_pages x page_size when paged.
  int64_t logicalKeys = 0;
  int64_t headDim = 0;
  /// A ragged batch (q_start): always packed where the head counts allow;
  /// `batch` is 1 (the packed query) and `sequences` the sequence count B
  /// (q_start's length - 1), `qLen` the packed rows T.
  bool varlen = false;
  int64_t sequences = 0;
  /// Draft-token trees (tree_parents): the mask's walks need registers, so
  /// wideWarpsFit leaves them more.
  bool tree = false;
  /// ALiBi: the bias of every score needs registers too (wideWarpsFit).
  bool alibi = false;
  /// The value head dim (0: D) and the K/V element width in bits (0:
  /// unknown), for wideWarpsFit.
  int64_t valueHeadDim = 0, kvElementBits = 0;
  /// Whether Q has the K/V element type (the wgmma lowering reads Q and K
  /// from shared memory as operands of one instruction).
  bool queryInKvType = false;
  /// The latent form (DeepSeek MLA): V is the key cache's first Dv columns,
  /// read from the K stage (latentBlocks).
  bool latent = false;
  /// The query's element width in bits (0: unknown): an FP8 cache is staged
  /// converted to the query's type, so a latent FP8 cache with a 16-bit
  /// query has the 16-bit K stage latentBlocks needs.
  int64_t queryElementBits = 0;
};

/// Whether 32-row warps (two m16 tiles) with 64-key blocks fit the
/// tensor-core lowering's registers: 16-bit K/V, D a multiple of 16 and Dv
/// of 8, and the lane's scores and accumulator of both tiles plus the query
/// fragments where they are kept (up to 32 registers) within 192
/// (passes/Conversion/TileToGPU/SharedMemoryLayout.h,
/// keepScoresInRegisters, with mmaTiles = 2): D = Dv up to 128; within 160
/// for trees and ALiBi (D = Dv up to 64).
bool wideWarpsFit(const Problem &problem);

/// The shared memory of a 128-row tensor-core program with `blockN`-key
/// blocks: the 16-bit query tile and the K and V stages.
int64_t wideProgramSharedBytes(const Problem &problem, int64_t blockN = 64);

/// The key block of the automatic 128-row programs on 32-row warps, 0 where
/// they are not taken: 64 where two such programs fit `sharedMemoryPerSm`
/// (0: no limit; 1 KB reserved per program), else 32 where two of those fit
/// (D = 128 on the 100 KB sm_86/sm_89: 2 x 48 KB), else 0; and 0 unless
/// wideWarpsFit, except ALiBi's D = 128 where only 32-key blocks fit (32
/// where the problem without ALiBi fits, its 32 scores per lane fewer).
int64_t wideBlockN(const Problem &problem, int64_t sharedMemoryPerSm);

/// The shared memory of a tensor-core program of 16-row warps with the
/// scores in registers: the `bm` x D 16-bit query tile and `bn`-key K and V
/// stages.
int64_t tensorCoreProgramSharedBytes(const Problem &problem, int64_t bm,
                                     int64_t bn);

/// Automatic blocks for the large head dims on tensor cores (Options::
/// tensorCores): 16-bit K/V, 128 < D <= 256 a multiple of 16, Dv <= 256 a
/// multiple of 8, a program of 64 rows or more (`bm`, from
/// automaticBlockM). The scores of 64-key blocks stay in registers there
/// (BN / 2 + Dv / 2 <= 160 per lane; SharedMemoryLayout.h,
/// keepScoresInRegisters), so the block takes 64 keys where the program
/// fits `sharedMemoryPerSm` (96 KB at D = Dv = 256, 1 KB reserved), and a
/// 128-row program of 8 warps where that one fits (128 KB: sm_80, sm_90;
/// the 100 KB sm_86/sm_89 keep 64 rows): FlashAttention-2's hd256 tiles.
/// Returns {bm, bn}, or {0, 0} where this does not apply.
struct BlockPair {
  int64_t bm = 0, bn = 0;
};
BlockPair largeHeadDimBlocks(const Problem &problem, int64_t bm,
                             int64_t sharedMemoryPerSm);

/// The warps that share each 16 rows of a latent program on tensor cores
/// (DeepSeek MLA's Dv = 512): each owns Dv / split output columns, so that
/// the lane's accumulator stays at 64 registers or fewer per m16 tile
/// (Dv / split / 2; the 128-column slice of hd 128), and the Q.K^T of a
/// block is split among them by keys. 1 for Dv <= 128; at most 4, and Dv a
/// multiple of 16 x split (whole 8-column slices per warp, in pairs).
int64_t latentValueSplit(int64_t valueHeadDim);

/// The shared memory of a latent tensor-core program: the `bm` x D 16-bit
/// query tile, one `bn` x D K stage (V is its first Dv columns) and, with
/// a value split, the `bm` x `bn` f32 tile through which the warps of a
/// row group exchange their scores.
int64_t latentProgramSharedBytes(const Problem &problem, int64_t bm,
                                 int64_t bn);

/// Automatic blocks of a latent program on tensor cores (16-bit K, D a
/// multiple of 16): 32-key blocks, the fewest 16-row groups that hold the
/// rows up to 64 (GQA packing puts the query heads in the M tile: 16 heads
/// one group, 128 heads two programs of 64 rows), fewer where the program
/// does not fit `sharedMemoryPerSm` (0: no limit; 1 KB reserved), and
/// latentValueSplit warps per group, halved (while each warp keeps at most
/// 256 columns) where the program would have more than 8 warps: a thread of
/// 16 warps has 128 registers, and ptxas spilled there (64 rows: 8 warps of
/// 256 columns, hd 256's budget). {0, 0, 0} where this does not apply.
///
/// With `wgmma` (sm_90a) a program of whole warpgroups whose value split
/// shares one warpgroup's row maxima and probabilities (SharedMemoryLayout's
/// shareExchange) takes 64-key blocks where the TMA ring of two such K
/// stages fits beside the query tile (latentWgmmaSharedBytes within
/// kWgmmaSharedMemoryBytes): DeepSeek MLA's 128 heads, 64 rows of two
/// warpgroups, as FlashMLA's 64 x 64 tile.
struct LatentBlocks {
  int64_t bm = 0, bn = 0, numWarps = 0;
};
LatentBlocks latentBlocks(const Problem &problem, int64_t rows,
                          int64_t sharedMemoryPerSm, bool wgmma = false);

/// The shared memory of a latent wgmma program of `bm` rows and `bn`-key
/// blocks with its TMA ring: the query tile, the share exchange (the rows'
/// maxima and the bm x bn 16-bit probabilities the score warpgroup gives
/// the others, padded to 1024 bytes so that the stages after it keep the
/// 128-byte swizzle's alignment), two K stages and the ring's mbarriers.
int64_t latentWgmmaSharedBytes(const Problem &problem, int64_t bm, int64_t bn);

/// What the policy chose.
struct Blocks {
  /// GQA packing: query heads per program (1: none).
  int64_t group = 1;
  int64_t bm = 0, bn = 0, numWarps = 0, numStages = 0;
  /// KV chunks per program; with a run-time split, the most (N_max).
  int64_t splits = 1;
  /// split-kv = 0 with a dynamic size: the chunk count is computed per
  /// launch (splitRule) and `splits` bounds it.
  bool runTimeSplit = false;
  /// The rule's programs per multiprocessor (a run-time split).
  int64_t splitPerSm = 0;
};

/// block-m = 0: the fewest 16-row warps that hold `rows` (a program's query
/// rows, or the packed rows of a GQA group) up to `maxBlockM`; dynamic:
/// `maxBlockM` (kMaxAutoBlockM, or 128 with 32-row warps).
int64_t automaticBlockM(int64_t rows, int64_t maxBlockM = kMaxAutoBlockM);

/// block-n = 0: 64 keys for head dims up to 128, else 32; 32 as well for
/// one-warp programs (block-m = 16) with D > 64.
int64_t automaticBlockN(int64_t headDim, int64_t bm);

/// Whether sm_90a's wgmma lowering takes the problem's tiles: D and Dv 64,
/// 128, 192 or 256 (64-column panels), 16-bit K/V in Q's type. With
/// Options::wgmma and no explicit block-m or num-warps, such problems take up
/// to 128 rows per program: two warpgroups of 64 rows (8 warps of 16 rows).
bool wgmmaFits(const Problem &problem);

/// The shared memory a CTA may use on sm_90 (227 KB) and the data
/// registers (scores and output accumulator, f32) a consumer thread of the
/// wgmma lowering keeps (of the 240 setmaxnreg gives it).
inline constexpr int64_t kWgmmaSharedMemoryBytes = 227 * 1024;
inline constexpr int64_t kWgmmaDataRegisters = 160;

/// block-n = 0 with Options::wgmma, for a program of whole warpgroups
/// (`numWarps` a multiple of 4, `bm` = 16 x numWarps) whose tiles wgmma
/// takes (wgmmaFits): 128 keys at D, Dv <= 128 (64 score and up to 64
/// accumulator registers per thread in the wgmma lowering, which reads the
/// query from shared memory: 204-246 per thread, no spill;
/// docs/gpu-lowering.md, "Hopper (sm_90a)"), half the KV iterations and
/// their waits of 64-key blocks; wider heads the most keys whose two K/V
/// stages fit beside the query tile (kWgmmaSharedMemoryBytes) and whose
/// scores fit beside the accumulator (kWgmmaDataRegisters), a multiple of
/// 32: 64 at 256, 96 at 192. 0 where that does not apply.
int64_t wgmmaBlockN(const Problem &problem, int64_t bm, int64_t numWarps);

/// The programs per multiprocessor split-kv = 0 aims at: enough for
/// `splitWarpsPerSm` resident warps (0: two programs).
int64_t programsPerSm(int64_t numWarps, int64_t splitWarpsPerSm);

/// a * b for non-negative a and b, INT64_MAX where that overflows.
int64_t saturatingMul(int64_t a, int64_t b);

/// The split rule: `programs` program instances over `keys` keys in blocks
/// of `bn`, `perSm` programs per multiprocessor on `numSms` of them, chunks
/// of at least `minKeys` keys (0: one block), at most `maxSplits` chunks.
/// It is the fewest chunks that give every slot (perSm x numSms) a program,
/// unless that overshoots into a partial last wave: then, up to twice that,
/// the count n with the least ceil(programs * n / slots) / n (waves of 1/n
/// of the keys each), a larger n only where that is at least 5 % less. The
/// chunk count is in [1, maxSplits]; no intermediate overflows for any
/// non-negative sizes.
int64_t splitRule(int64_t programs, int64_t keys, int64_t bn, int64_t perSm,
                  int64_t numSms, int64_t minKeys, int64_t maxSplits);

/// The programs of a ragged batch's grid (docs/tile-program.md, "Ragged
/// batches"): (qHeads / group) x (floor(group x rows / bm) + sequences),
/// with `rows` the packed query rows T and `sequences` the sequence count B.
/// Each sequence takes its ceil(G * L_b / BM) query blocks and at most one
/// empty one, so this is the most programs that can have rows, a bound the
/// host knows without reading q_start (the split rule's P for a ragged
/// batch). Saturates at INT64_MAX; negative sizes count as 0.
int64_t varlenPrograms(int64_t qHeads, int64_t group, int64_t rows, int64_t bm,
                       int64_t sequences);

/// The bound N_max of a run-time split: kMaxAutomaticSplit, or fewer when
/// the keys are static.
int64_t runTimeSplitMax(int64_t logicalKeys, int64_t bn, int64_t minKeys);

/// The whole choice for one attention.
Blocks choose(const Problem &problem, const Options &options);

} // namespace schedule
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_SCHEDULE_H
