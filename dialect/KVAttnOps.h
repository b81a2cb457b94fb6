//===- KVAttnOps.h - kvattn operations --------------------------*- C++ -*-===//

#ifndef KVATTN_DIALECT_KVATTNOPS_H
#define KVATTN_DIALECT_KVATTNOPS_H

#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Dialect/KVAttnDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/TilingInterface.h"

namespace mlir {
namespace kvattn {

/// The optional operands and attributes of kvattn.attention, for the
/// builder that infers the result types:
///
///   AttentionExtras extras;
///   extras.qOffset = pos;
///   extras.causal = true;
///   auto op = AttentionOp::create(b, loc, q, k, v, /*withLse=*/false, extras);
struct AttentionExtras {
  Value qOffset, kOffset, qPos, kPos, kvLen, keyValid, mask, blockTable;
  /// A ragged batch: per-sequence starts of the packed query rows.
  Value qStart;
  /// Per query head (f32 [Hq]): attention sinks (a logit in every row's
  /// denominator) and ALiBi slopes (-slope * |qp - kp| added to the score).
  Value sinks, alibiSlopes;
  /// [B, S]: the positions the cached keys were rotated at.
  Value kRopePos;
  /// Ragged keys (k_start [B + 1]) and a batch-to-cache map
  /// (cache_batch_idx [B]).
  Value kStart, cacheBatchIdx;
  bool causal = false;
  /// Speculative decoding: per packed row its parent's local row in its
  /// sequence's draft-token tree (-1: a root); needs qStart and qOffset.
  Value treeParents;
  std::optional<int64_t> window;
  /// Keys at most this many positions after the query (kp - qp <=
  /// windowRight); not with causal.
  std::optional<int64_t> windowRight;
  std::optional<double> softcap;
  std::optional<double> scale;
  /// The rotary embedding applied to the query; null: none.
  RopeAttr rope;
  /// The query arrives rotated (refused with `rope`).
  bool queryRotated = false;
  /// FP8 K / V: f32 scales per tensor, per KV head or per token and head.
  Value kScale, vScale;
  /// The latent form (DeepSeek MLA): V is the first valueDim columns of
  /// key, and the value operand is null.
  std::optional<int64_t> valueDim;
  /// RoPE from tables ([P, rotary_dim / 2], row = position), with a `rope`
  /// without theta; null: none.
  Value rotaryCos, rotarySin;
};

} // namespace kvattn
} // namespace mlir

#define GET_OP_CLASSES
#include "kvattn/Dialect/KVAttnOps.h.inc"

#endif // KVATTN_DIALECT_KVATTNOPS_H
