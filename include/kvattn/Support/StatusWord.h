//===- StatusWord.h - the device status word of a serving plan -*- C++ -*-===//
//
// The layout of the status word (i64[16]) that validation kernels write and
// every kernel compiled with device validation reads (docs/kernel-abi.md,
// "The status word"); shared by the compiler (DeviceValidation.cpp) and the
// runtime (which turns a recorded violation into the host check's message).
// Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_STATUSWORD_H
#define KVATTN_SUPPORT_STATUSWORD_H

#include <cstdint>
#include <string>

namespace mlir {
namespace kvattn {

/// The words of the status word (i64[16]); see docs/kernel-abi.md.
enum StatusWord : int {
  kStatusRule = 0, ///< 0: no violation; else the rule (ViolationRule)
  /// Order key of the first violation (0x7f7f7f7f7f7f7f7f: none): the
  /// validation kernel's ordinal << 52, the rule group << 48, the position.
  kStatusKey = 1,
  kStatusBatch = 2,  ///< the batch
  kStatusIndex = 3,  ///< element index in the row, or the table slot
  kStatusValue = 4,  ///< the offending value
  kStatusAux = 5,    ///< previous value / slot / page count / other batch
  kStatusSize = 6,   ///< S, num_pages or page_size (what the rule compares)
  kStatusParam = 7,  ///< which metadata parameter (ValidatedParam)
  kStatusKernel = 8, ///< ordinal of the validation kernel in the module
  kStatusAux2 = 9,   ///< L, or the token of a shared-row write
  kStatusWords = 16,
};

/// The rules a validation kernel checks (the runtime's messages:
/// runtime/Validation.cpp, kvattn/Support/BlockTable.h).
enum ViolationRule : int {
  kRuleNone = 0,
  kRuleKvLenRange = 1,       ///< kv_len outside [0, S]
  kRuleNotBoolean = 2,       ///< key_valid neither 0 nor 1
  kRuleNegative = 3,         ///< offset/position negative
  kRuleTooLarge = 4,         ///< offset/position above 2^62
  kRuleNotIncreasing = 5,    ///< explicit positions not increasing
  kRulePageRange = 6,        ///< table entry outside [0, num_pages) and not -1
  kRuleAfterEmpty = 7,       ///< a page after a -1
  kRuleRepeatedPage = 8,     ///< a page twice in one sequence
  kRuleKvLenPages = 9,       ///< kv_len beyond the sequence's pages
  kRuleAppendRange = 10,     ///< plain append rows outside the capacity
  kRuleAppendNegative = 11,  ///< paged append: pos negative
  kRuleAppendPages = 12,     ///< paged append: tokens beyond the pages
  kRuleAppendSharedRow = 13, ///< paged append: two batches write one row
  // A ragged batch's q_start (kvattn/Support/QueryStarts.h).
  kRuleQStartFirst = 14,    ///< q_start[0] != 0
  kRuleQStartDecrease = 15, ///< q_start[b + 1] < q_start[b]
  kRuleQStartPastRows = 16, ///< q_start[b + 1] > T
  kRuleQStartLast = 17,     ///< q_start[B] != T
  kRuleQStartCache = 18,    ///< the rows of a sequence are not cache tokens
  /// A 32-bit kernel: an offset or position gives a position of 2^31 - 1
  /// or more (q_offset + L - 1, k_offset + S - 1, q_pos, k_pos).
  kRuleIndex32Position = 19,
  // Ragged keys' k_start and a batch-to-cache map (kvattn/Support/KeyRows.h).
  kRuleKStartNegative = 20,  ///< k_start[0] < 0
  kRuleKStartDecrease = 21,  ///< k_start[b + 1] < k_start[b]
  kRuleKStartPastRows = 22,  ///< k_start[b + 1] > N (S)
  kRuleKStartKvLen = 23,     ///< kv_len[b] > k_start[b + 1] - k_start[b]
  kRuleCacheIndexRange = 24, ///< cache_batch_idx[b] outside [0, C)
  // An FP8 cache's scales (kvattn/Reference/Fp8KvCache.h): the index of
  // the element, its f32 bits as the value.
  kRuleKvScaleNotPositive = 25, ///< k_scale / v_scale <= 0
  kRuleKvScaleNaN = 26,         ///< k_scale / v_scale NaN
  kRuleKvScaleInf = 27,         ///< k_scale / v_scale infinite
  /// RoPE's record (kvattn.attention's k_rope_pos [B, S]): a valid key
  /// (j < kv_len[b], key_valid) rotated at a position other than the one
  /// it is attended at (k_pos[b, j], or k_offset[b] + j); the index is the
  /// slot j, the value the recorded position, aux the key's position.
  kRuleKRopePos = 28,
  /// RoPE from tables (rotary_cos / rotary_sin [P, R/2]): a row's position
  /// at or past P. The index is the row (an attention's query row i, an
  /// append's token t), the value the position, the size P.
  kRuleRotaryQueryPosition = 29, ///< kvattn.attention's query rows
  kRuleRotaryKeyPosition = 30,   ///< kvattn.append's written tokens
  /// 31: allocated to the rotary tables, unused.
  // Draft-token trees' tree_parents (kvattn/Support/TreeParents.h).
  kRuleTreeParent = 32,  ///< a parent neither -1 nor an earlier local row
  kRuleTreeKvLen = 33,   ///< kv_len[b] below the sequence's draft tokens
  kRuleTreeQOffset = 34, ///< q_offset[b] != k_offset + kv_len - L_b
};

/// The first position a kernel with 32-bit index arithmetic cannot take:
/// 2^31 - 1. It forms position + 1 (the end of a causal key range: kp <=
/// qp <=> j < qp - k_offset + 1), so the largest position it computes
/// right is 2^31 - 2 (host and device checks alike, rule 19).
inline constexpr int64_t kIndex32PositionLimit = (int64_t(1) << 31) - 1;

/// What rule 19 says after "q_offset[b] = v" (host and device alike).
inline constexpr const char *kIndex32PositionRule =
    " gives positions of 2^31 - 1 or more";

/// The advice that ends every refusal of a size or position a kernel with
/// 32-bit index arithmetic cannot address (host and device checks alike).
inline constexpr const char *kIndex32Advice =
    ": the kernel was compiled with 32-bit index arithmetic (manifest "
    "index_bits 32); compile it with index-bitwidth=64 for this size";

/// The metadata parameters, as kStatusParam numbers them.
enum ValidatedParam : int {
  kParamQOffset = 0,
  kParamKOffset = 1,
  kParamQPos = 2,
  kParamKPos = 3,
  kParamKvLen = 4,
  kParamPos = 5,
  kParamBlockTable = 6,
  kParamKeyValid = 7,
  kParamQStart = 8,
  kParamKStart = 9,
  kParamCacheBatchIdx = 10,
  kParamKScale = 11,
  kParamVScale = 12,
  kParamKRopePos = 13,
  kParamRotaryCos = 14,
  kParamRotarySin = 15,
  kParamTreeParents = 16,
  /// A cascade's paged prefix: its one-sequence table and length.
  kParamPrefixPages = 17,
  kParamPrefixLen = 18,
};

/// What rules 25-27 say after "k_scale[i] = v" (the reference, the host
/// checks and the device's status word alike).
inline constexpr const char *kKvScaleRule =
    " must be positive and finite (a KV scale divides the values it "
    "quantises)";

/// What rule 28 says (the reference, the host checks and the device's
/// status word alike): "k_rope_pos: the key of batch b, slot j was rotated
/// at position r but is attended at position p".
inline std::string kRopePosMessage(int64_t batch, int64_t slot,
                                   int64_t recorded, int64_t position) {
  return "k_rope_pos: the key of batch " + std::to_string(batch) + ", slot " +
         std::to_string(slot) + " was rotated at position " +
         std::to_string(recorded) + " but is attended at position " +
         std::to_string(position);
}

/// What rules 29 and 30 say (the verifier, the reference, the host checks
/// and the device's status word alike): "rotary_cos: position p of batch
/// b, row i is outside the table's P rows".
inline std::string rotaryTableMessage(int64_t batch, int64_t row,
                                      int64_t position, int64_t rows) {
  return "rotary_cos: position " + std::to_string(position) + " of batch " +
         std::to_string(batch) + ", row " + std::to_string(row) +
         " is outside the table's " + std::to_string(rows) + " rows";
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_STATUSWORD_H
