//===- FrameworkRope.h - Recognise RoPE as frameworks write it -*- C++ -*-===//
//
// The rotary embedding that a framework applies before attention, as it
// reaches MLIR through torch-mlir / torch.export (linalg on tensors, tensor
// slices and concats, arith, math), recognised by its value rather than by
// its op sequence: each element of the rotated tensor is read back as a
// scalar expression over symbolic indices (batch b, head h, row i, pair k),
// through every elementwise linalg op (named or generic, broadcasts
// included), tensor.extract_slice / concat / expand_shape / collapse_shape
// and size-1 contractions, and that expression is compared with RoPE's
// formula (docs/passes.md, "RoPE applied by the framework"):
//
//   out[.., first(k)]  = x[.., first(k)] * c - x[.., second(k)] * s
//   out[.., second(k)] = x[.., second(k)] * c + x[.., first(k)] * s
//   out[.., R + j]     = x[.., R + j]
//
// with c = c(b, i, k), s = s(b, i, k), (first, second) = (k, k + R/2)
// (GPT-NeoX's rotate_half) or (2k, 2k + 1) (GPT-J's rotate_every_two), and c, s
// either cos/sin(f32(pos(b, i)) * inv_freq[k]) with inv_freq a constant equal
// to #kvattn.rope's f32(theta^(-2k/R)), or tables read at [pos(b, i), k].
//
// The same machinery compares integer position expressions (the positions
// the framework rotated at against those the resolved ops will use).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_FRAMEWORKROPE_H
#define KVATTN_PASSES_FRAMEWORKROPE_H

#include "kvattn/Dialect/KVAttnOps.h"

#include <memory>
#include <optional>

namespace mlir {
namespace kvattn {
namespace framework_rope {

struct Expr;
/// A scalar expression over the symbolic indices d0..d3 (batch, head, row,
/// pair): shared, immutable.
using ExprRef = std::shared_ptr<const Expr>;

/// A RoPE recognised on a [B, H, L, D] tensor.
struct RopeMatch {
  /// The tensor before the rotation ([B, H, L, D], the rotated tensor's
  /// type).
  Value input;
  /// The attribute that says the same rotation (theta or tables).
  RopeAttr rope;
  /// With tables: rotary_cos / rotary_sin, [P, R / 2].
  Value cos, sin;
  /// A constant inv_freq that no theta gives exactly (torch's own f32
  /// computation, say): `rope` has no theta and the caller builds the
  /// tables (makeTables) for the positions it can bound.
  SmallVector<float> invFreq;
  /// The inv_freq that built `cos` / `sin` (then `invFreq` is empty).
  SmallVector<float> builtFrom;
  /// The position of row (b = d0, i = d2), an integer expression.
  ExprRef position;

  /// True when the tables still have to be built.
  bool needsTables() const { return !invFreq.empty(); }
};

/// cos and sin of f32(f32(p) * inv_freq[k]) for p < rows, as [rows, R/2]
/// f32 constants: the framework's angles, cos/sin rounded from f64 (what
/// the reference computes for math.cos/sin and for #kvattn.rope).
std::pair<Value, Value> makeTables(OpBuilder &b, Location loc,
                                   ArrayRef<float> invFreq, int64_t rows);

/// Recognises `rotated` ([B, H, L, D], static) as RoPE applied to another
/// tensor. Creates no IR.
std::optional<RopeMatch> matchRope(Value rotated);

/// The expression `offset[b] + i` (offset a [B] tensor; null: `i`), the
/// position of row i < rows of batch b < batch under the offset form.
ExprRef offsetPosition(MLIRContext *ctx, Value offset, int64_t batch,
                       int64_t rows);

/// How two position expressions relate over b < batch, i < rows.
struct PositionComparison {
  enum Kind { Equal, Different, Unknown } kind = Unknown;
  /// Different: a (b, i) and the two positions there, when known; a
  /// constant difference otherwise.
  int64_t batch = -1, row = -1, lhs = 0, rhs = 0;
  std::optional<int64_t> difference;
};
PositionComparison comparePositions(const ExprRef &lhs, const ExprRef &rhs,
                                    int64_t batch, int64_t rows);

} // namespace framework_rope
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_FRAMEWORKROPE_H
