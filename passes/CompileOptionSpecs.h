//===- CompileOptionSpecs.h - compile options, declared once ----*- C++ -*-===//
//
// The compile options every front end spells the same way, each with its
// name, description and range: kvattn-opt's pipelines (kvattn-to-cpu,
// kvattn-to-ptx in Pipelines.cpp) and the tools (kvattn-run, kvattn-bench,
// kvattn-compile through tools/common/CompileFlags). The ranges are
// kvattn/Support/Limits.h's, which -kvattn-tile enforces; the tools check
// them by name before compiling. The C API's kvattn_compile_options has the
// same fields (docs/runtime.md) but for the two GPU schedule switches
// producer-warpgroup and lazy-rescale (measurement switches: their defaults
// are the kernels kvattn ships).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_COMPILEOPTIONSPECS_H
#define KVATTN_PASSES_COMPILEOPTIONSPECS_H

#include "kvattn/Support/Limits.h"

#include <cstdint>

namespace mlir::kvattn {

/// One compile option: its flag name (without dashes), what it means, and
/// the values it takes.
struct CompileOptionSpec {
  const char *name;
  const char *description;
  int64_t min, max;
};

namespace compile_options {

inline constexpr int64_t kUnbounded = INT64_MAX;

inline constexpr CompileOptionSpec kBlockM{
    "block-m",
    "Query rows per program (GPU: 16 x num-warps; 0: chosen per attention)", 0,
    limits::kMaxBlockM};
inline constexpr CompileOptionSpec kBlockN{
    "block-n",
    "Keys per KV block (GPU: a multiple of 8; 0: chosen from the head dims)", 0,
    limits::kMaxBlockN};
inline constexpr CompileOptionSpec kNumWarps{
    "num-warps", "GPU: warps per program (0: block-m / 16)", 0,
    limits::kMaxNumWarps};
inline constexpr CompileOptionSpec kNumStages{
    "num-stages", "GPU: K/V pipeline depth", 1, limits::kMaxNumStages};
inline constexpr CompileOptionSpec kSplitKv{
    "split-kv",
    "KV chunks per program, merged in chunk order by a second program (1: no "
    "split; 0: chosen from the sizes and the multiprocessors)",
    0, limits::kMaxSplitKv};
inline constexpr CompileOptionSpec kNumSms{
    "num-sms", "GPU: multiprocessors, for split-kv = 0", 0, kUnbounded};
inline constexpr CompileOptionSpec kPackGqa{
    "pack-gqa", "GQA packing: one program per kv head for few query rows", 0,
    1};
inline constexpr CompileOptionSpec kTensorCores{
    "tensor-cores",
    "GPU: mma.sync, ldmatrix and cp.async for f16/bf16 where the head dims "
    "allow (false: the scalar lowering)",
    0, 1};
inline constexpr CompileOptionSpec kProducerWarpgroup{
    "producer-warpgroup",
    "GPU, sm_90a: a producer warpgroup issues the TMA boxes of the K/V rings "
    "(false: the consumers' thread 0 does, no register reallocation)",
    0, 1};
inline constexpr CompileOptionSpec kLazyRescale{
    "lazy-rescale",
    "GPU, tensor cores: a warp rescales its accumulator only when one of its "
    "rows took a new maximum, where the registers allow (false: every block)",
    0, 1};
inline constexpr CompileOptionSpec kPingPong{
    "ping-pong",
    "GPU, sm_90a: the two consumer warpgroups of a kernel with a producer "
    "warpgroup take turns at the tensor cores (false: each issues its wgmma "
    "when ready)",
    0, 1};
inline constexpr CompileOptionSpec kIntraWarpgroupOverlap{
    "intra-warpgroup-overlap",
    "GPU, sm_90a: issue each block's P.V after the next block's Q.K^T so "
    "that it runs during that block's softmax (kernels with a producer "
    "warpgroup and two V stages; false: P.V right after its softmax)",
    0, 1};
inline constexpr CompileOptionSpec kTwoValueStages{
    "two-value-stages",
    "GPU, sm_90a: kernels with a producer warpgroup keep two V stages "
    "wherever they fit (one CTA per SM either way: their registers bind "
    "them), so that the 64-row and hd 64 programs take the intra-warpgroup "
    "overlap too (false: one V stage where two fit fewer programs by shared "
    "memory)",
    0, 1};
inline constexpr CompileOptionSpec kHeaviestFirst{
    "heaviest-first",
    "GPU: start an attention's last query blocks first (under a causal mask "
    "they read the most keys; false: in increasing order)",
    0, 1};
inline constexpr CompileOptionSpec kIndexBitwidth{
    "index-bitwidth",
    "GPU: bits of the kernels' index arithmetic: 32 (every buffer under 2^31 "
    "elements, checked at launch) or 64 (larger caches)",
    32, 64};
inline constexpr CompileOptionSpec kVectorize{
    "vectorize", "CPU: the vectorised lowering (false: the scalar loops)", 0,
    1};
inline constexpr CompileOptionSpec kVectorWidth{
    "vector-width",
    "CPU: f32 lanes per vector at most (0: the host's widest; a power of two)",
    0, 16};
/// kvattn-to-cpu spells it `threads` (the pass pipeline's older name).
inline constexpr CompileOptionSpec kNumThreads{
    "num-threads",
    "CPU: threads of the grid (0: all cores; 1: the calling thread)", 0,
    limits::kMaxThreads};
inline constexpr CompileOptionSpec kOptLevel{
    "opt-level", "CPU: LLVM optimisation level of the JIT", 0, 3};

} // namespace compile_options
} // namespace mlir::kvattn

#endif // KVATTN_PASSES_COMPILEOPTIONSPECS_H
