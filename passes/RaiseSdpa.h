//===- RaiseSdpa.h - shared matcher of -kvattn-raise-sdpa -------*- C++ -*-===//
//
// What the linalg and TOSA matchers of -kvattn-raise-sdpa find, and the one
// rewrite both share. A matcher walks back from the P·V contraction (the
// root) to Q·Kᵀ and fills an SdpaMatch; buildRaisedSdpa turns it into
// kvattn.sdpa (or kvattn.attention where the causal offset is not one that
// kvattn.sdpa can say). Internal to passes/.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_LIB_PASSES_RAISESDPA_H
#define KVATTN_LIB_PASSES_RAISESDPA_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Value.h"

#include <optional>
#include <string>

namespace mlir {
namespace kvattn {
namespace raise {

/// A causal mask `allowed(i, j) = j <= i + offset` over the last two score
/// dimensions (query row i, key column j), with `offset = constant +
/// coefficient * symbol` where the symbol (when present) is an integer or
/// index value: a value defined above the mask computation, or a
/// `tensor.extract` of such a tensor at constant indices (re-created at the
/// rewrite).
struct CausalOffset {
  int64_t constant = 0;
  int64_t coefficient = 0;
  Value symbol;
  /// When the symbol is read in a region by tensor.extract: its tensor and
  /// constant indices.
  Value symbolTensor;
  SmallVector<int64_t> symbolIndices;

  bool isStatic() const { return coefficient == 0; }
};

/// One recognised SDPA. Shapes are those of the matched program, of rank r
/// in [2, 4]: the scores are `[batch..., L, S]`.
struct SdpaMatch {
  /// The P·V contraction whose result the raised op replaces.
  Operation *root = nullptr;
  /// `[batch..., L, D]`, or `[batch..., D, L]` when queryTransposed.
  Value query;
  bool queryTransposed = false;
  /// `[batch..., S, D]`, or `[batch..., D, S]` when keyTransposed (Kᵀ as
  /// the contraction reads it).
  Value key;
  bool keyTransposed = false;
  /// `[batch..., S, Dv]`, or `[batch..., Dv, S]` when valueTransposed.
  Value value;
  bool valueTransposed = false;
  /// The product of every constant factor on the scores or on Q.
  double scale = 1.0;
  /// A general mask, right-aligned with the scores (rank 1 to r): i1 (true
  /// means allowed) or float (added to the scaled scores).
  Value mask;
  /// A causal mask proven from its computation or its constant values.
  std::optional<CausalOffset> causal;
};

/// Why a candidate was not raised.
struct Refusal {
  std::string reason;
};

/// What one matcher step found: not its pattern (the caller tries another
/// reading), its pattern, or its pattern with something kvattn cannot say
/// (`Refusal::reason` set).
enum class Step { None, Matched, Refused };

/// Sets `why.reason` and returns Step::Refused.
Step refuse(Refusal &why, const Twine &reason);

/// A dialect's readers of the steps between Q·Kᵀ and the softmax: an
/// additive or boolean mask (filling `match.mask` or `match.causal`) and a
/// constant factor; each gives its input in `x`.
struct ScoreSteps {
  function_ref<Step(Value v, Value &x, SdpaMatch &match, Refusal &why)> mask;
  function_ref<Step(Value v, Value &x, double &factor, Refusal &why)> scale;
};

/// Walks from the softmax's input `x` back through its mask and scale
/// steps, outermost first, to the scores (left in `x`): at most one mask,
/// which must be outside every scale (kvattn adds it to the scaled scores),
/// factors multiplied into `match.scale`. Fails with `why` set when a step
/// is refused or a scale is applied after the mask.
LogicalResult peelMaskAndScales(Value &x, SdpaMatch &match, Refusal &why,
                                const ScoreSteps &steps);

/// Multiplies constant factors applied to `match.query` into `match.scale`
/// and moves `match.query` to the unscaled query.
void peelQueryScales(SdpaMatch &match, const ScoreSteps &steps);

/// Replaces `match.root` by kvattn.sdpa (upper_left when the causal offset
/// is 0, lower_right when it is S - L, both static) or kvattn.attention
/// with `q_offset` = the offset (any other offset, a dynamic one, or a
/// causal mask together with a general mask). Operands are brought to rank
/// 4 with unit leading dimensions and to kvattn's layout with
/// linalg.transpose where needed; the result is collapsed back. Returns the
/// op created.
Operation *buildRaisedSdpa(RewriterBase &rewriter, const SdpaMatch &match);

/// The causal offset c such that the constant mask (i1: true allowed;
/// float: 0 allowed, -inf excluded) is exactly `j <= i + c` over its last
/// two dimensions, the same for every leading index; nullopt if it is no
/// such mask or if every row is fully allowed or some row fully excluded
/// (then c is not determined by the mask).
std::optional<int64_t> constantCausalOffset(DenseElementsAttr mask);

/// An ALiBi bias as a constant float mask (`[..., H | 1, L, S]`, every
/// dimension before the head one of size 1): `-slopes[h] * |i + offset - j|`
/// on every finite entry of head h (query row i, key column j), within f32
/// rounding, and -inf exactly where `j > i + offset` when `causal` (else
/// nowhere). `slopes` has one entry per head of the mask (1: every head).
struct AlibiBias {
  SmallVector<float> slopes;
  int64_t offset = 0;
  bool causal = false;
};

/// The ALiBi bias a constant mask of `rows` x `cols` scores is, or nullopt:
/// not one, every slope 0 (a zero mask), or an offset the mask does not pin
/// down (no zero bias in row 0 without the causal part, or a negative one).
std::optional<AlibiBias> constantAlibi(DenseElementsAttr mask, int64_t rows,
                                       int64_t cols);

/// The values of a float mask tensor computed without run-time inputs: a
/// constant, or a DAG of elementwise linalg.generic ops (parallel loops,
/// projected-permutation maps, static shapes, at most 2^16 elements) over
/// linalg.index, constants, tensor.extract of constants and the results of
/// such ops, linalg.fill of a constant and reshapes — as exporters write an
/// ALiBi bias from `arange`. nullopt for anything else.
std::optional<DenseElementsAttr> evaluateConstantMask(Value mask);

/// The value of a float constant: a scalar, or a splat tensor.
std::optional<double> getFloatSplat(Value v);

/// Removes the ops of the matched chain that the rewrite left unused.
void eraseDeadProducers(RewriterBase &rewriter, ValueRange roots);

/// Whether walking back from `v` through at most a few ops reaches an `exp`
/// and a contraction: `v` is then the probabilities of an SDPA-shaped
/// chain, and a failed match deserves a remark. `isContraction` and `isExp`
/// classify ops of the dialect at hand.
bool looksLikeAttention(Value v, function_ref<bool(Operation *)> isContraction,
                        function_ref<bool(Operation *)> isExp);

/// The remark on a root that looked like SDPA but was not raised.
void remarkNotRaised(Operation *root, const Refusal &why);

/// Each matcher: fills `match` and returns success, or returns failure with
/// `why.reason` empty (not an SDPA at all) or naming the mismatch.
LogicalResult matchLinalgSdpa(Operation *root, SdpaMatch &match, Refusal &why);
LogicalResult matchTosaSdpa(Operation *root, SdpaMatch &match, Refusal &why);

} // namespace raise
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_LIB_PASSES_RAISESDPA_H
