//===- RaiseSdpaTosa.cpp - SDPA in TOSA
//------------------------------------===//
//
// The TOSA matcher of -kvattn-raise-sdpa: the form a framework SDPA lowers
// to, on rank-3 `[B*H, L, D]` tensors. From the P·V tosa.matmul back:
//
//   P  = tosa.mul(E, tosa.reciprocal(tosa.reduce_sum(E, axis = 2)), shift 0)
//   E  = tosa.exp(tosa.sub(X, tosa.reduce_max(X, axis = 2)))  (or exp(X))
//   X  = [tosa.add(·, mask) | tosa.select(mask, ·, -inf)]
//        ([tosa.mul(·, constant splat, shift 0)] (tosa.matmul(Q, Kᵀ)))
//   Kᵀ = tosa.transpose(K, perms = [0, 2, 1]), or any [B*H, D, S] tensor;
//   Q may carry the constant scale instead of the scores.
//
// Zero points must be zero constants. A constant mask that is exactly a
// causal triangle becomes the causal form.
//
//===----------------------------------------------------------------------===//

#include "RaiseSdpa.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kvattn::raise;

namespace {

bool isZero(Value v) {
  Attribute attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  if (isa<FloatType>(dense.getElementType()))
    return dense.getSplatValue<APFloat>().isZero();
  return dense.getSplatValue<APInt>().isZero();
}

bool isNegInf(Value v) {
  std::optional<double> d = getFloatSplat(v);
  return d && std::isinf(*d) && *d < 0;
}

/// The constant factor of `v = tosa.mul(x, c)` (either order, shift 0).
Step matchScale(Value v, Value &x, double &factor, Refusal &why) {
  auto mul = v.getDefiningOp<tosa::MulOp>();
  if (!mul)
    return Step::None;
  for (unsigned side = 0; side < 2; ++side) {
    Value other = mul->getOperand(1 - side);
    std::optional<double> c = getFloatSplat(other);
    if (!c)
      continue;
    if (!isZero(mul.getShift()))
      return refuse(why, "the scale's tosa.mul has a non-zero shift");
    factor = *c;
    x = mul->getOperand(side);
    return Step::Matched;
  }
  return Step::None;
}

/// `v = X - max(X)`'s exponent, or `exp(X)`: returns X.
Step matchExp(Value e, Value &x, Refusal &why) {
  auto exp = e.getDefiningOp<tosa::ExpOp>();
  if (!exp)
    return Step::None;
  Value arg = exp.getInput1();
  auto sub = arg.getDefiningOp<tosa::SubOp>();
  if (!sub) {
    x = arg;
    return Step::Matched;
  }
  auto max = sub.getInput2().getDefiningOp<tosa::ReduceMaxOp>();
  if (!max || max.getInput() != sub.getInput1())
    return refuse(why, "the softmax subtracts something other than the row "
                       "maximum of the same scores");
  int64_t rank = cast<RankedTensorType>(arg.getType()).getRank();
  if (max.getAxis() != rank - 1)
    return refuse(why, "the softmax's tosa.reduce_max is over axis " +
                           Twine(max.getAxis()) + ", not the key axis " +
                           Twine(rank - 1));
  x = sub.getInput1();
  return Step::Matched;
}

/// P = E * reciprocal(sum(E)): returns X, the softmax's input.
Step matchSoftmax(Value p, Value &x, Refusal &why) {
  auto mul = p.getDefiningOp<tosa::MulOp>();
  if (!mul)
    return Step::None;
  int64_t rank = cast<RankedTensorType>(p.getType()).getRank();
  for (unsigned side = 0; side < 2; ++side) {
    auto rcp = mul->getOperand(1 - side).getDefiningOp<tosa::ReciprocalOp>();
    if (!rcp)
      continue;
    Value e = mul->getOperand(side);
    auto sum = rcp.getInput1().getDefiningOp<tosa::ReduceSumOp>();
    if (!sum || sum.getInput() != e)
      return refuse(why, "the softmax divides by something other than the "
                         "row sum of the same exponentials");
    if (sum.getAxis() != rank - 1)
      return refuse(why, "the softmax's tosa.reduce_sum is over axis " +
                             Twine(sum.getAxis()) + ", not the key axis " +
                             Twine(rank - 1));
    if (!isZero(mul.getShift()))
      return refuse(why, "the softmax's tosa.mul has a non-zero shift");
    return matchExp(e, x, why);
  }
  return Step::None;
}

/// A mask on the scores: tosa.add of a float tensor, or tosa.select of the
/// scores and -inf by an i1 tensor.
Step matchMask(Value v, Value &x, SdpaMatch &match, Refusal &why) {
  auto scores = cast<RankedTensorType>(v.getType());
  auto take = [&](Value mask) -> Step {
    auto type = cast<RankedTensorType>(mask.getType());
    int64_t r = type.getRank(), sr = scores.getRank();
    DenseElementsAttr dense;
    // A constant triangle over the full [L, S] is the causal form.
    if (r >= 2 && type.getDimSize(r - 1) == scores.getDimSize(sr - 1) &&
        type.getDimSize(r - 2) == scores.getDimSize(sr - 2) &&
        matchPattern(mask, m_Constant(&dense)))
      if (std::optional<int64_t> c = constantCausalOffset(dense)) {
        CausalOffset offset;
        offset.constant = *c;
        match.causal = offset;
        return Step::Matched;
      }
    match.mask = mask;
    return Step::Matched;
  };
  if (auto add = v.getDefiningOp<tosa::AddOp>()) {
    unsigned first = 0;
    Operation *a = add.getInput1().getDefiningOp();
    if (!a || !isa<tosa::MatMulOp, tosa::MulOp>(a))
      first = 1;
    x = add->getOperand(first);
    return take(add->getOperand(1 - first));
  }
  if (auto sel = v.getDefiningOp<tosa::SelectOp>()) {
    if (!isNegInf(sel.getInput3())) {
      if (isNegInf(sel.getInput2()))
        return refuse(why, "the boolean mask is inverted (true excludes a "
                           "key)");
      return refuse(why, "the masked scores are replaced by a value that is "
                         "not -inf");
    }
    x = sel.getInput2();
    return take(sel.getInput1());
  }
  return Step::None;
}

bool isFloatTensor(Value v) {
  return isa<FloatType>(getElementTypeOrSelf(v.getType()));
}

} // namespace

LogicalResult mlir::kvattn::raise::matchTosaSdpa(Operation *root,
                                                 SdpaMatch &match,
                                                 Refusal &why) {
  auto pv = dyn_cast<tosa::MatMulOp>(root);
  if (!pv || !isFloatTensor(pv.getA()))
    return failure();
  auto isMatmul = [](Operation *op) { return isa<tosa::MatMulOp>(op); };
  auto isExp = [](Operation *op) { return isa<tosa::ExpOp>(op); };
  if (!looksLikeAttention(pv.getA(), isMatmul, isExp))
    return failure();
  auto zeroPoints = [&](tosa::MatMulOp mm) {
    if (isZero(mm.getAZp()) && isZero(mm.getBZp()))
      return true;
    why.reason = "a tosa.matmul has non-zero zero points";
    return false;
  };
  if (!zeroPoints(pv))
    return failure();
  match.root = root;
  match.value = pv.getB();
  Value x;
  Step s = matchSoftmax(pv.getA(), x, why);
  if (s != Step::Matched) {
    if (s == Step::None)
      why.reason = "the probabilities are not a softmax over the key axis";
    return failure();
  }
  const ScoreSteps steps{matchMask, matchScale};
  if (failed(peelMaskAndScales(x, match, why, steps)))
    return failure();
  auto qk = x.getDefiningOp<tosa::MatMulOp>();
  if (!qk) {
    if (x.getDefiningOp<tosa::MulOp>())
      why.reason = "the scores are scaled by a value that is not a constant "
                   "splat";
    else
      why.reason = "the softmax's input is not Q·Kᵀ up to a constant scale "
                   "and a mask";
    return failure();
  }
  if (!zeroPoints(qk))
    return failure();
  match.query = qk.getA();
  peelQueryScales(match, steps);
  // Kᵀ: [B*H, D, S].
  match.key = qk.getB();
  match.keyTransposed = true;
  if (auto t = match.key.getDefiningOp<tosa::TransposeOp>()) {
    // Any other permutation is just how Kᵀ was made: keep it as a tensor.
    ArrayRef<int32_t> perms = t.getPerms();
    if (perms.size() == 3 && perms[0] == 0 && perms[1] == 2 && perms[2] == 1) {
      match.key = t.getInput1();
      match.keyTransposed = false;
    }
  }
  Type elt = getElementTypeOrSelf(pv.getType());
  for (Value v : {match.query, match.key, match.value, x})
    if (getElementTypeOrSelf(v.getType()) != elt) {
      why.reason = "the operands mix element types";
      return failure();
    }
  return success();
}
