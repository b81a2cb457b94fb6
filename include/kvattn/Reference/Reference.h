//===- Reference.h - the scalar reference of kvattn -------------*- C++ -*-===//
//
// The oracle every compiled path is tested against. It implements the
// semantics contract (docs/semantics.md, DESIGN §1) literally: one query row
// at a time, every allowed key visited in order, accumulation in double.
// No MLIR, no LLVM: plain C++ over HostTensor.
//
// Results are f64 tensors; callers round them to the op's result type when
// they need to (kvattn-run does), and compare compiled outputs against the
// unrounded values.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_REFERENCE_REFERENCE_H
#define KVATTN_REFERENCE_REFERENCE_H

#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"

#include <functional>
#include <optional>

namespace mlir {
namespace kvattn {
namespace reference {

/// The operands of `kvattn.attention`. Absent optional operands are null.
struct AttentionOperands {
  const HostTensor *query = nullptr;    ///< [B, Hq, L, D]   f32/f16/bf16
  const HostTensor *key = nullptr;      ///< [B, Hkv, S, D]
  const HostTensor *value = nullptr;    ///< [B, Hkv, S, Dv]
  const HostTensor *qOffset = nullptr;  ///< [B] i32/i64
  const HostTensor *kOffset = nullptr;  ///< [B] i32/i64 (default 0)
  const HostTensor *qPos = nullptr;     ///< [B, L] i32/i64
  const HostTensor *kPos = nullptr;     ///< [B, S] i32/i64
  const HostTensor *kvLen = nullptr;    ///< [B] i32/i64
  const HostTensor *keyValid = nullptr; ///< [B, S] i1
  const HostTensor *mask = nullptr;     ///< broadcastable to [B, Hq, L, S]
  /// A ragged batch: [B + 1] i32/i64 starts of each sequence's rows in the
  /// packed query [1, Hq, T, D] (out [1, Hq, T, Dv]); K and V keep
  /// [B, Hkv, S, D]. Sequence b's row q_start[b] + i is row i of batch b.
  const HostTensor *qStart = nullptr;
  /// Attention sinks [Hq] f32: row (b, h, i)'s softmax denominator also
  /// holds exp(sinks[h]), which contributes no value; a row without allowed
  /// keys gets out = 0, lse = sinks[h].
  const HostTensor *sinks = nullptr;
  /// ALiBi slopes [Hq] f32: -alibiSlopes[h] * |qp - kp| is added to every
  /// allowed score (after the softcap and a float mask).
  const HostTensor *alibiSlopes = nullptr;
  /// [B, S] i32/i64: the positions the cached keys were rotated at; every
  /// valid key must be attended at its recorded position.
  const HostTensor *kRopePos = nullptr;
  /// Speculative decoding (needs qStart and qOffset): [T] i32/i64, per
  /// packed row its parent's local row in its sequence's draft-token tree
  /// (-1: a root). Row i sits at q_offset[b] + depth(i); key
  /// kv_len[b] - L_b + a is draft token a, at the same position as its row,
  /// allowed for row i only when a is i or an ancestor of i
  /// (kvattn/Support/TreeParents.h).
  const HostTensor *treeParents = nullptr;
  /// Paged K/V, for Compute::ChecksOnly (attention() refuses it otherwise:
  /// gather the pages with gatherPages): key and value are page pools
  /// `[num_pages, page_size, Hkv, D]` (`Dv`), read through this
  /// `[B, max_pages]` i32/i64 table up to kv_len (required), as the logical
  /// `[B, Hkv, max_pages * page_size, D]` caches gatherPages would build;
  /// the checks (the table's, the f32 range over the rows keys own) read
  /// the pages in place instead of a gathered copy.
  const HostTensor *blockTable = nullptr;
  /// The latent form (DeepSeek MLA, `kvattn.attention` with value_dim): when
  /// positive, `value` is null and V is the first latentValueDim columns of
  /// `key` (1 <= latentValueDim <= D); out is [B, Hq, L, latentValueDim].
  int64_t latentValueDim = 0;
  /// FP8 caches read in place, for Compute::ChecksOnly (attention() refuses
  /// them otherwise: dequantise first, dequantizeKvCache): key and value
  /// hold the codes and these their f32 scales, checked by
  /// checkKvCacheScale — per tensor ([1] or rank 0), per KV head ([Hkv]) or
  /// per cache row (the cache's shape without D). The range check takes
  /// each row's largest finite |code| times the row's scale: the largest
  /// value of the dequantised cache, without making it.
  const HostTensor *keyScale = nullptr;
  const HostTensor *valueScale = nullptr;
  /// Compute::ChecksOnly of the latent form (attention() sets it; 0
  /// otherwise): `value` is `key`, and V its first valueColumns columns,
  /// read in place instead of copied (latentValue) on every call.
  int64_t valueColumns = 0;
  /// Compute::ChecksOnly over caches a kvattn.append of the same call
  /// writes (a check-only run writes nothing: the cache is the caller's
  /// memory): `key` (`value`) is the cache before the append, and batch
  /// b's logical rows [pos[b], pos[b] + L) read as rows [0, L) of
  /// `rows` [B, Hkv, L, D] (Dv; the latent form: the key's, V its first
  /// valueColumns columns) — the values the attention reads there:
  /// the cache's type, or f32 (an FP8 cache's rows dequantised). Paged
  /// caches: the logical rows through blockTable. See AppendedRows.
  struct Appended {
    const HostTensor *rows = nullptr;
    const HostTensor *pos = nullptr; ///< [B] i32/i64
  };
  Appended keyAppended, valueAppended;
};

/// What a kvattn.append writes, for a check-only run, which does not write
/// (append(), appendPaged(), appendRotated(), appendQuantized() fill it
/// instead of their result when given one).
struct AppendedRows {
  /// [B, H, L, D]: the rows as the cache holds them (an FP8 cache: codes).
  HostTensor rows;
  /// An FP8 cache's rows dequantised with the scales of the rows they go
  /// to (f32, as attention reads them); empty otherwise.
  HostTensor values;
};

/// The latent form's value: the first `valueDim` columns of every row of
/// `key` ([..., D] -> [..., valueDim], the same element type, copied
/// exactly). Fails unless 1 <= valueDim <= D.
Status latentValue(const HostTensor &key, int64_t valueDim, HostTensor &value);

/// A rotary position embedding (#kvattn.rope): for a vector x[0, D) at
/// position p and pair k < rotaryDim / 2, inv_freq = f32(theta^(-2k/R)),
/// angle = f32(f32(p) * inv_freq), (a, b) -> (a cos - b sin, b cos + a sin)
/// in f32; the pair is (x[k], x[k + R/2]) (GPT-NeoX halves) or
/// (x[2k], x[2k + 1]) (interleaved). Dimensions from R on pass through.
/// With tables (`cos` and `sin`, [P, rotaryDim / 2] f32/f16/bf16, row =
/// position; FlashAttention's rotary_cos / rotary_sin) theta is not used:
/// c = f32(cos[p, k]), s = f32(sin[p, k]), and a position at or past P is
/// an error ("rotary_cos: position p of batch b, row i is outside the
/// table's P rows").
struct Rope {
  int64_t rotaryDim = 0; ///< even, 2 <= rotaryDim <= D
  double theta = 10000.0;
  /// The tables (both or neither); not owned.
  const HostTensor *cos = nullptr, *sin = nullptr;
  bool interleaved = false;
  /// The rotated query stays f32 (else it is rounded to the query's
  /// element type before the products).
  bool f32Query = false;
};

/// Rotates the rows of `x [B, H, L, D]`: row (b, ., i) at position(b, i),
/// the result rounded to `resultType` (f32 math either way). Fails on a
/// rotary dim that is odd, below 2 or above D, or a negative position.
Status rotate(const HostTensor &x, const Rope &rope,
              const std::function<int64_t(int64_t, int64_t)> &position,
              ElementType resultType, HostTensor &result);

/// The attributes of `kvattn.attention`.
struct AttentionAttributes {
  bool causal = false;
  std::optional<int64_t> window; ///< > 0
  /// Keys at most this many positions after the query: kp - qp <=
  /// windowRight (>= 0; not with causal).
  std::optional<int64_t> windowRight;
  std::optional<double> softcap; ///< > 0
  std::optional<double> scale;   ///< default 1/sqrt(D)
  /// The query is rotated at its positions before the products.
  std::optional<Rope> rope;
  /// The query arrives rotated (refused with `rope`).
  bool queryRotated = false;
};

/// `out [B, Hq, L, Dv]` and `lse [B, Hq, L]`, both f64.
struct AttentionResult {
  HostTensor out;
  HostTensor lse;
};

/// What attention() and sdpa() do after validating their operands.
enum class Compute {
  /// The values (in f64, on all cores for large problems).
  Values,
  /// Nothing: every check runs, the results are zeros of the right shapes.
  /// For callers that only need the run-time values validated.
  ChecksOnly,
};

/// Evaluates `kvattn.attention`. Fails, naming the operand, the batch and
/// the value, on inconsistent shapes, negative positions or offsets, and
/// `kv_len` outside `[0, S]`. NaN in an input propagates to the rows that
/// read it. Rows are computed in parallel (each independently, so the
/// result does not depend on the thread count).
Status attention(const AttentionOperands &operands,
                 const AttentionAttributes &attributes, AttentionResult &result,
                 Compute compute = Compute::Values);

/// Causal alignment of a framework SDPA call.
enum class CausalAlignment {
  None,       ///< no causal rule
  UpperLeft,  ///< torch `is_causal=True`: key j allowed for row i if j <= i
  LowerRight, ///< torch `causal_lower_right`: j <= i + S - L
};

/// The operands of `kvattn.sdpa`.
struct SdpaOperands {
  const HostTensor *query = nullptr;
  const HostTensor *key = nullptr;
  const HostTensor *value = nullptr;
  const HostTensor *mask = nullptr; ///< i1 (true = allowed) or float (added)
  /// Optional [B]: the keys are the first kv_len[b] slots of `key` (a cache
  /// written by kvattn.append); SDPA then runs over that logical cache, so
  /// lower-right aligns the last query with key kv_len[b] - 1.
  const HostTensor *kvLen = nullptr;
};

struct SdpaAttributes {
  CausalAlignment causal = CausalAlignment::None;
  /// Sliding window (needs `causal`): row i sees key j only when
  /// p(i) - j < window, p(i) the row's causal position.
  std::optional<int64_t> window;
  std::optional<double> softcap; ///< s = softcap * tanh(s / softcap)
  std::optional<double> scale;
};

/// Evaluates `kvattn.sdpa` (PyTorch SDPA meaning, dropout 0). A row with no
/// allowed key yields 0 (torch's math backend yields NaN) and lse = -inf.
/// `out` and `lse` are f64; `lse` may be null.
Status sdpa(const SdpaOperands &operands, const SdpaAttributes &attributes,
            HostTensor &out, Compute compute = Compute::Values,
            HostTensor *lse = nullptr);

/// Evaluates `kvattn.append`: a copy of `cache [B, H, C, D]` with the rows
/// of `update [B, H, L, D]` written at `pos[b]`. Fails when a write would
/// pass the capacity or a position is negative. `result` has the cache's
/// element type. With `checkOnly`, every check runs and the rows written
/// go there instead (result untouched; no copy of the cache is made): what
/// a compiled path's validation runs on the caller's memory. So for the
/// other appends below.
Status append(const HostTensor &cache, const HostTensor &update,
              const HostTensor &pos, HostTensor &result,
              AppendedRows *checkOnly = nullptr);

/// Evaluates `kvattn.append` with `rope`: the update rotated at positions
/// pos[b] + t (f32, rounded to the cache's element type), then written as
/// append() does. With `ropePos [B, C]` (i32/i64) `ropePosResult` is a copy
/// with ropePos[b, pos[b] + t] = pos[b] + t.
Status appendRotated(const HostTensor &cache, const HostTensor &update,
                     const HostTensor &pos, const Rope &rope,
                     const HostTensor *ropePos, HostTensor &result,
                     HostTensor *ropePosResult,
                     AppendedRows *checkOnly = nullptr);

/// Evaluates the paged `kvattn.append`: a copy of `pages [num_pages,
/// page_size, H, D]` in which token `p = pos[b] + t` (t < L) of `update
/// [B, H, L, D]` is written to row `p % page_size` of page
/// `blockTable[b][p / page_size]`. Validates first, naming the batch, the
/// slot and the value: the table rules of validateBlockTable (without
/// lengths), `pos[b] >= 0`, the written tokens inside the sequence's pages
/// (`pos[b] + L <= pages(b) * page_size`), and no row of a shared page
/// written by two sequences. `result` has the pages' element type. With
/// `skipPadding` (`kvattn.append ... skip_padding`) a token whose table
/// entry is `-1` is padding and writes nothing; the tokens must then lie in
/// the table's `max_pages` slots (checkPagedWrite).
Status appendPaged(const HostTensor &pages, const HostTensor &update,
                   const HostTensor &pos, const HostTensor &blockTable,
                   HostTensor &result, bool skipPadding = false,
                   AppendedRows *checkOnly = nullptr);

/// Evaluates `kvattn.merge`: parts `outParts [N, B, Hq, L, Dv]` and
/// `lseParts [N, B, Hq, L]` combined in index order into `out` and `lse`
/// (f64). Parts with lse = -inf contribute nothing; all empty gives
/// (0, -inf).
Status merge(const HostTensor &outParts, const HostTensor &lseParts,
             AttentionResult &result);

/// The operands of `kvattn.cascade` (shared-prefix attention).
struct CascadeOperands {
  const HostTensor *query = nullptr;       ///< [1, Hq, T, D]
  const HostTensor *prefixKey = nullptr;   ///< [1, Hkv, P, D]
  const HostTensor *prefixValue = nullptr; ///< [1, Hkv, P, Dv]
  const HostTensor *key = nullptr;         ///< [B, Hkv, S, D]
  const HostTensor *value = nullptr;       ///< [B, Hkv, S, Dv]
  const HostTensor *qStart = nullptr;      ///< [B + 1]
  const HostTensor *qOffset = nullptr;     ///< [B], from the prefix's end
  const HostTensor *kvLen = nullptr;       ///< [B], the suffix keys
  /// A paged prefix: prefix_key/prefix_value are page pools
  /// [num_pages, page_size, Hkv, D|Dv], the prefix the first prefix_len[0]
  /// keys of pages prefix_pages[0], [1], ... (null: contiguous).
  const HostTensor *prefixPages = nullptr; ///< [prefix_max_pages]
  const HostTensor *prefixLen = nullptr;   ///< [1]
  /// Paged suffixes: key/value are page pools, mapped per sequence.
  const HostTensor *blockTable = nullptr; ///< [B, max_pages]
};

/// Evaluates `kvattn.cascade` by its definition: plain attention of each
/// sequence's rows over its prefix + suffix keys (the prefix at positions
/// 0 .. P - 1, suffix key j at P + j, row i at P + q_offset[b] + i), as
/// attention() of the concatenated caches. `attributes` takes causal,
/// softcap and scale. Fails, naming the operand and batch, on a negative
/// q_offset, kv_len outside [0, S] or inconsistent shapes. Paged levels are
/// gathered first (gatherPages), after their tables are validated
/// (checkBlockTable: for the prefix, messages name prefix_pages and
/// prefix_len).
Status cascade(const CascadeOperands &operands,
               const AttentionAttributes &attributes, AttentionResult &result,
               Compute compute = Compute::Values);

/// Checks a paged KV layout before anything reads it: `blockTable [B,
/// max_pages]` (i32/i64) maps sequence `b`'s logical page `slot` to a
/// physical page id in [0, numPages), with a `-1` tail; `kvLen [B]`
/// (i32/i64) is each sequence's length in tokens. Every error names the
/// batch, the slot and the value:
///  - a page id outside [0, numPages) (other than -1);
///  - a page id after a -1 (the tail must be canonical);
///  - a page used twice among the active pages of one sequence;
///  - kv_len negative or more than (active pages) x pageSize.
Status validateBlockTable(const HostTensor &blockTable, const HostTensor &kvLen,
                          int64_t numPages, int64_t pageSize);

/// Gathers a paged cache `pages [num_pages, page_size, Hkv, D]` into the
/// logical layout `[B, Hkv, max_pages * page_size, D]` that
/// `kvattn.attention` reads: logical key `t` of sequence `b` is row
/// `t % page_size` of page `blockTable[b][t / page_size]`. Keys at or past
/// kv_len[b] are zero (attention must mask them with kv_len). Validates the
/// block table first; `logical` has the pages' element type.
Status gatherPages(const HostTensor &pages, const HostTensor &blockTable,
                   const HostTensor &kvLen, HostTensor &logical);

/// Where each batch's keys live without pages (kvattn/Support/KeyRows.h):
/// ragged keys `kStart [B + 1]` over a packed `cache [1, Hkv, N, D]`, or a
/// batch-to-cache map `cacheBatchIdx [B]` over `cache [C, Hkv, S, D]`.
struct KeyRowsOperands {
  const HostTensor *kStart = nullptr;        ///< [B + 1] i32/i64
  const HostTensor *cacheBatchIdx = nullptr; ///< [B] i32/i64
  const HostTensor *kvLen = nullptr;         ///< [B] i32/i64 (optional)
};

/// Gathers the logical cache `[B, Hkv, S, D]` that `kvattn.attention`
/// reads: with k_start, batch `b`'s key `j` is row `kStart[b] + j` of the
/// packed cache (S = the longest sequence, at least 1; rows past a
/// sequence's length are zero), with cacheBatchIdx batch `b`'s rows are
/// cache row `cacheBatchIdx[b]`. Validates the rules first (checkKeyStarts,
/// checkCacheBatchIndex: the messages of the verifier and the runtime).
/// With k_start, `kvLen` (i64 [B]) receives the effective lengths (kv_len,
/// or `kStart[b + 1] - kStart[b]`).
Status gatherKeyRows(const HostTensor &cache, const KeyRowsOperands &ops,
                     int64_t batch, HostTensor &logical, HostTensor &kvLen);

} // namespace reference
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_REFERENCE_REFERENCE_H
