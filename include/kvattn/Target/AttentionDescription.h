//===- AttentionDescription.h - an attention described ----------*- C++ -*-===//
//
// What a serving engine knows about its attention (dtype, head counts, head
// dims, shape bounds, masking, paged or not, ragged or not, whether the
// step writes the cache) without writing kvattn IR. buildAttentionModule
// builds the IR with the dialect's builders (AttentionOp::create,
// AppendOp::create): one function @attention whose form is documented in
// docs/runtime.md ("A plan from a description"); the plan of that module is
// the plan of the same IR written by hand.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TARGET_ATTENTIONDESCRIPTION_H
#define KVATTN_TARGET_ATTENTIONDESCRIPTION_H

#include "kvattn/Support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir {
namespace kvattn {

struct AttentionDescription {
  /// Element type of query, key, value and out: "f32", "f16" or "bf16".
  std::string dtype = "bf16";
  /// Sizes; kDynamic (-1) leaves the dimension dynamic (bounded by the
  /// plan's max sizes). batch: B; queryLen: L, the query rows per sequence
  /// (varlen: T, the packed rows of all sequences); keyLen: S, the cache
  /// capacity of a plain cache (paged: max_pages * page_size, not used).
  int64_t batch = kDynamic, queryLen = kDynamic, keyLen = kDynamic;
  /// Head counts and head dims: static, Hq % Hkv == 0, D and Dv in
  /// [1, 256] (the GPU kernels' limit); valueHeadDim 0: D.
  int64_t numQueryHeads = 0, numKvHeads = 0, headDim = 0, valueHeadDim = 0;
  bool causal = false;
  /// A sliding window of W keys up to the query (needs causal or
  /// windowRight).
  std::optional<int64_t> window;
  /// Keys at most this many positions after the query (not with causal).
  std::optional<int64_t> windowRight;
  /// Logit soft-capping c > 0.
  std::optional<double> softcap;
  /// Softmax scale (> 0); none: 1/sqrt(D).
  std::optional<double> scale;
  /// A paged cache: key/value [num_pages, page_size, Hkv, D], block_table
  /// [B, max_pages]; numPages / maxPages may be kDynamic.
  bool paged = false;
  int64_t pageSize = 0, numPages = kDynamic, maxPages = kDynamic;
  /// A ragged batch: q_start [B + 1], query/out [1, Hq, T, D].
  bool varlen = false;
  /// The second result lse [B, Hq, L] (f32).
  bool withLse = false;
  /// The step writes its L new tokens' K and V into the caches first
  /// (kvattn.append at pos, the attention's q_offset), as
  /// examples/decode-step.mlir does.
  bool append = false;
  /// Attention sinks: an argument sinks f32 [Hq] after the others.
  bool sinks = false;
  /// ALiBi: an argument alibi_slopes f32 [Hq] after the others (and after
  /// sinks).
  bool alibi = false;
  /// Speculative decoding (needs varlen): an argument tree_parents i32 [T]
  /// after the others.
  bool tree = false;
  /// Ragged keys: key/value [1, Hkv, keyLen, D] packed, an argument
  /// k_start i32 [B + 1] after the others.
  bool raggedKeys = false;
  /// A batch-to-cache map: key/value [cacheRows, Hkv, keyLen, D], an
  /// argument cache_batch_idx i32 [B] after the others (and k_start).
  bool cacheBatchIdx = false;
  int64_t cacheRows = kDynamic;
  /// An FP8 cache: "" (key and value in dtype), "f8E4M3FN" or "f8E5M2";
  /// arguments k_scale and v_scale (f32) after the others, per tensor [1]
  /// (kvScales 0), per KV head [Hkv] (1) or per token and head (2: the
  /// cache's shape without D).
  std::string kvDtype;
  int kvScales = 0;
  /// Shared-prefix (cascade) attention (needs varlen): kvattn.cascade with
  /// the arguments prefix_key [1, Hkv, P, D] and prefix_value [1, Hkv, P,
  /// Dv] after the query; prefixLen P (kDynamic: dynamic). With paged the
  /// suffixes are pages (key/value, block_table as for attention).
  bool cascade = false;
  int64_t prefixLen = kDynamic;
  /// A paged shared prefix (needs cascade): prefix_key/prefix_value are a
  /// page pool [prefixNumPages, prefixPageSize, Hkv, D|Dv] (the suffixes'
  /// pool may be passed for it), and the arguments prefix_pages
  /// [prefixMaxPages] and prefix_len [1] follow kv_len; prefixLen is not
  /// used. prefixNumPages / prefixMaxPages may be kDynamic.
  bool prefixPaged = false;
  int64_t prefixPageSize = 0, prefixNumPages = kDynamic,
          prefixMaxPages = kDynamic;
  /// The latent form (DeepSeek MLA): no value argument, V is the first
  /// valueHeadDim columns (0: all D) of the key; D and Dv up to
  /// limits::kMaxHeadDim (the CPU target's; GPU plans refuse the form).
  bool latent = false;
  /// RoPE (docs/semantics.md, "Rotary embedding"): rotaryDim > 0 (even, at
  /// most D) rotates the query at its positions, and with append the new
  /// keys at theirs, by #kvattn.rope<rotaryDim, ropeTheta (> 1)> in
  /// GPT-NeoX halves or, ropeInterleaved, GPT-J pairs; 0: none.
  int64_t rotaryDim = 0;
  double ropeTheta = 10000.0;
  bool ropeInterleaved = false;
  /// RoPE's record (needs rotaryDim and a plain cache): an argument
  /// k_rope_pos i32 [B, S] last, the attention's k_rope_pos; with append
  /// the K append writes the new tokens' entries in place (rope_pos) and
  /// the function returns it last.
  bool ropeRecord = false;
  /// RoPE from tables (FlashAttention's rotary_cos / rotary_sin; needs
  /// rotaryDim): rotaryRows P > 0 adds the arguments rotary_cos and
  /// rotary_sin [P, rotaryDim / 2] of rotaryDtype ("f32", "f16", "bf16")
  /// after the record, and #kvattn.rope has no theta (ropeTheta unused);
  /// 0: the theta formula.
  int64_t rotaryRows = 0;
  std::string rotaryDtype = "f32";

  static constexpr int64_t kDynamic = -1;
};

/// The description's errors, each naming the field, e.g. "query heads Hq =
/// 8 must be a multiple of kv heads Hkv = 3", "page_size = 0 must be
/// positive for a paged cache".
Status checkAttentionDescription(const AttentionDescription &description);

/// Checks the description, then builds and verifies its module in
/// `context` (which must have the kvattn dialects loaded or registered).
Status buildAttentionModule(const AttentionDescription &description,
                            MLIRContext &context,
                            OwningOpRef<ModuleOp> &module);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_TARGET_ATTENTIONDESCRIPTION_H
