//===- RaiseSdpaLinalg.cpp - SDPA in linalg on tensors
//---------------------===//
//
// The linalg matcher of -kvattn-raise-sdpa. From the P·V contraction back:
//
//   P  = linalg.softmax(X) over the last dimension, or its decomposed form
//        E = exp(X - max_j X) (one generic or a sub then an exp; the max may
//        be absent), Σ = sum_j E, P = E / Σ (or E * (1 / Σ));
//   X  = [mask] ([scale] (Q·Kᵀ)): a mask is an elementwise add of a float
//        tensor or a select(-inf) by an i1 tensor or by a condition computed
//        from linalg.index; a scale is an elementwise mul/div by a constant
//        splat, on the scores or on Q;
//   Q·Kᵀ, P·V: any linalg contraction (linalg.matmul, linalg.batch_matmul,
//        with or without indexing_maps, or a linalg.generic) of rank 2 to 4
//        with a zero init, operands in either order of their last two
//        dimensions (linalg.transpose of them is looked through).
//
//===----------------------------------------------------------------------===//

#include "RaiseSdpa.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

#include <algorithm>
#include <cmath>
#include <string>

using namespace mlir;
using namespace mlir::kvattn::raise;

namespace {

int64_t rankOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank();
}

/// The single yielded value of a generic with one result.
Value yielded(linalg::GenericOp g) {
  return g.getBody()->getTerminator()->getOperand(0);
}

/// An elementwise generic: one result, all loops parallel, identity output.
linalg::GenericOp elementwise(Value v) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g->getNumResults() != 1 || g.getNumDpsInits() != 1 ||
      g.getNumReductionLoops() != 0 ||
      !g.getMatchingIndexingMap(g.getDpsInitOperand(0)).isIdentity())
    return {};
  return g;
}

/// The input operand behind a block argument of `g`'s body.
struct Input {
  Value tensor;
  AffineMap map;
};
std::optional<Input> inputOf(linalg::GenericOp g, Value scalar) {
  auto arg = dyn_cast<BlockArgument>(scalar);
  if (!arg || arg.getOwner() != g.getBody())
    return std::nullopt;
  OpOperand *operand = g.getMatchingOpOperand(arg);
  if (!g.isDpsInput(operand))
    return std::nullopt;
  return Input{operand->get(), g.getMatchingIndexingMap(operand)};
}

/// A float constant seen from `g`'s body: an arith.constant (inside or
/// above) or an input that is a splat constant.
std::optional<double> constantIn(linalg::GenericOp g, Value scalar) {
  if (std::optional<Input> in = inputOf(g, scalar))
    return getFloatSplat(in->tensor);
  return getFloatSplat(scalar);
}

bool isNegInf(std::optional<double> v) { return v && std::isinf(*v) && *v < 0; }

/// `map` reads the last `k` of its dimensions in order (a right-aligned
/// broadcast); returns k.
std::optional<unsigned> suffixRank(AffineMap map) {
  unsigned k = map.getNumResults(), n = map.getNumDims();
  for (unsigned r = 0; r < k; ++r) {
    auto d = dyn_cast<AffineDimExpr>(map.getResult(r));
    if (!d || d.getPosition() != n - k + r)
      return std::nullopt;
  }
  return k;
}

/// `map` drops exactly the last dimension: (d0, ..., dn-1) -> (d0, ...,
/// dn-2), the broadcast of a per-row value along the keys.
bool isRowBroadcast(AffineMap map) {
  return map.getNumResults() + 1 == map.getNumDims() &&
         suffixRank(AffineMap::getMultiDimIdentityMap(map.getNumDims() - 1,
                                                      map.getContext())) &&
         llvm::all_of(llvm::enumerate(map.getResults()), [](auto it) {
           auto d = dyn_cast<AffineDimExpr>(it.value());
           return d && d.getPosition() == it.index();
         });
}

std::string mapString(AffineMap map) {
  std::string s;
  llvm::raw_string_ostream os(s);
  map.print(os);
  return s;
}

//===----------------------------------------------------------------------===//
// Causal conditions: linear forms over loop indices
//===----------------------------------------------------------------------===//

/// `cst + sum dims[d] * index_d + symCoeff * symbol`.
struct Linear {
  int64_t cst = 0;
  SmallVector<int64_t, 4> dims;
  int64_t symCoeff = 0;
  Value symbol;
  Value symbolTensor;
  SmallVector<int64_t> symbolIndices;

  bool sameSymbol(const Linear &o) const {
    return symbol == o.symbol && symbolTensor == o.symbolTensor &&
           symbolIndices == o.symbolIndices;
  }
};

struct LinearContext {
  Region *region;
  unsigned numDims;
  /// The loop dimension a value is the index of, if it is one.
  function_ref<std::optional<unsigned>(Value)> dimOf;
  /// Set when a coefficient or constant leaves the range kept exact (see
  /// bounded): why the condition is not read as a causal offset.
  std::string *outOfRange = nullptr;
};

/// Whether `v`, a constant or coefficient of an integer computation in
/// `type`, stays within +-2^(w-2) for a w-bit type (index: 64): there the
/// program's own arithmetic on indices below 2^(w-2) cannot wrap, and an
/// offset is a position kvattn computes (at most 2^62). Outside, the
/// program's `i + offset` may wrap and mean another mask: not raised.
bool bounded(int64_t v, Type type, const LinearContext &ctx) {
  unsigned bits = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  const int64_t limit = int64_t(1) << (std::min(bits, 64u) - 2);
  if (v >= -limit && v <= limit)
    return true;
  if (ctx.outOfRange && ctx.outOfRange->empty()) {
    std::string spelled;
    llvm::raw_string_ostream os(spelled);
    type.print(os);
    *ctx.outOfRange =
        "its offset arithmetic reaches " + std::to_string(v) + ", beyond +-2^" +
        std::to_string(std::min(bits, 64u) - 2) + " in " + spelled +
        " (the program's `i + offset` may wrap; kvattn's "
        "positions stay within 2^62)";
  }
  return false;
}

/// a + sign * b (sign = +-1), or a * b with `mul`, when it stays bounded.
bool combine(int64_t a, int64_t b, int64_t sign, bool mul, int64_t &out,
             Type type, const LinearContext &ctx) {
  int64_t r;
  bool overflow = mul ? __builtin_mul_overflow(a, b, &r)
                      : __builtin_mul_overflow(sign, b, &r) ||
                            __builtin_add_overflow(a, r, &r);
  if (overflow) {
    if (ctx.outOfRange && ctx.outOfRange->empty())
      *ctx.outOfRange = "its offset arithmetic overflows 64 bits";
    return false;
  }
  out = r;
  return bounded(r, type, ctx);
}

std::optional<Linear> linearize(Value v, const LinearContext &ctx, int depth) {
  if (depth > 16)
    return std::nullopt;
  Linear lin;
  lin.dims.assign(ctx.numDims, 0);
  if (std::optional<unsigned> d = ctx.dimOf(v)) {
    lin.dims[*d] = 1;
    return lin;
  }
  APInt value;
  if (matchPattern(v, m_ConstantInt(&value))) {
    if (value.getSignificantBits() > 64)
      return std::nullopt;
    lin.cst = value.getSExtValue();
    if (!bounded(lin.cst, v.getType(), ctx))
      return std::nullopt;
    return lin;
  }
  Operation *def = v.getDefiningOp();
  bool outside = !ctx.region->isAncestor(v.getParentRegion());
  if (outside) {
    if (!v.getType().isIntOrIndex())
      return std::nullopt;
    lin.symCoeff = 1;
    lin.symbol = v;
    return lin;
  }
  if (!def)
    return std::nullopt;
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtSIOp>(def))
    return linearize(def->getOperand(0), ctx, depth + 1);
  if (auto extract = dyn_cast<tensor::ExtractOp>(def)) {
    Value t = extract.getTensor();
    if (ctx.region->isAncestor(t.getParentRegion()))
      return std::nullopt;
    SmallVector<int64_t> indices;
    for (Value i : extract.getIndices()) {
      APInt c;
      if (!matchPattern(i, m_ConstantInt(&c)))
        return std::nullopt;
      indices.push_back(c.getSExtValue());
    }
    lin.symCoeff = 1;
    lin.symbolTensor = t;
    lin.symbolIndices = indices;
    return lin;
  }
  if (isa<arith::AddIOp, arith::SubIOp>(def)) {
    std::optional<Linear> a = linearize(def->getOperand(0), ctx, depth + 1);
    std::optional<Linear> b = linearize(def->getOperand(1), ctx, depth + 1);
    if (!a || !b)
      return std::nullopt;
    int64_t sign = isa<arith::AddIOp>(def) ? 1 : -1;
    if (a->symCoeff && b->symCoeff && !a->sameSymbol(*b))
      return std::nullopt; // two different symbols
    Type type = def->getResult(0).getType();
    Linear r = *a;
    if (!combine(a->cst, b->cst, sign, false, r.cst, type, ctx))
      return std::nullopt;
    for (unsigned d = 0; d < ctx.numDims; ++d)
      if (!combine(a->dims[d], b->dims[d], sign, false, r.dims[d], type, ctx))
        return std::nullopt;
    if (b->symCoeff && !a->symCoeff) {
      r.symbol = b->symbol;
      r.symbolTensor = b->symbolTensor;
      r.symbolIndices = b->symbolIndices;
    }
    if (!combine(a->symCoeff, b->symCoeff, sign, false, r.symCoeff, type, ctx))
      return std::nullopt;
    return r;
  }
  if (isa<arith::MulIOp>(def)) {
    for (unsigned side = 0; side < 2; ++side) {
      APInt c;
      if (!matchPattern(def->getOperand(side), m_ConstantInt(&c)))
        continue;
      std::optional<Linear> a =
          linearize(def->getOperand(1 - side), ctx, depth + 1);
      if (!a)
        return std::nullopt;
      if (c.getSignificantBits() > 64)
        return std::nullopt;
      int64_t k = c.getSExtValue();
      Type type = def->getResult(0).getType();
      if (!combine(a->cst, k, 1, true, a->cst, type, ctx) ||
          !combine(a->symCoeff, k, 1, true, a->symCoeff, type, ctx))
        return std::nullopt;
      for (int64_t &d : a->dims)
        if (!combine(d, k, 1, true, d, type, ctx))
          return std::nullopt;
      return a;
    }
  }
  return std::nullopt;
}

/// `allowed = cond` (or `!cond` with `negate`) as `j <= i + offset`, where
/// i and j are the loop dimensions `iDim` and `jDim`.
std::optional<CausalOffset> causalCondition(Value cond,
                                            const LinearContext &ctx,
                                            unsigned iDim, unsigned jDim,
                                            bool negate) {
  // xor with true negates.
  if (auto x = cond.getDefiningOp<arith::XOrIOp>()) {
    for (unsigned side = 0; side < 2; ++side)
      if (matchPattern(x->getOperand(side), m_One()))
        return causalCondition(x->getOperand(1 - side), ctx, iDim, jDim,
                               !negate);
    return std::nullopt;
  }
  auto cmp = cond.getDefiningOp<arith::CmpIOp>();
  if (!cmp)
    return std::nullopt;
  std::optional<Linear> a = linearize(cmp.getLhs(), ctx, 0);
  std::optional<Linear> b = linearize(cmp.getRhs(), ctx, 0);
  if (!a || !b || (a->symCoeff && b->symCoeff && !a->sameSymbol(*b)))
    return std::nullopt;
  // e = a - b; allowed iff e <= -bias after the predicate's normalisation.
  // Exact (the compare is of the program's values; a difference that
  // leaves the bounded range is not read).
  Type type = cmp.getLhs().getType();
  Linear e = *a;
  if (!combine(a->cst, b->cst, -1, false, e.cst, type, ctx))
    return std::nullopt;
  for (unsigned d = 0; d < ctx.numDims; ++d)
    if (!combine(a->dims[d], b->dims[d], -1, false, e.dims[d], type, ctx))
      return std::nullopt;
  if (b->symCoeff && !a->symCoeff) {
    e.symbol = b->symbol;
    e.symbolTensor = b->symbolTensor;
    e.symbolIndices = b->symbolIndices;
  }
  if (!combine(a->symCoeff, b->symCoeff, -1, false, e.symCoeff, type, ctx))
    return std::nullopt;
  // Bring `pred(a, b)` to `e <= 0` (signed predicates only: an unsigned
  // compare of a negative offset means something else).
  auto flip = [&](Linear &l) {
    l.cst = -l.cst;
    l.symCoeff = -l.symCoeff;
    for (int64_t &d : l.dims)
      d = -d;
  };
  arith::CmpIPredicate pred = cmp.getPredicate();
  switch (pred) {
  case arith::CmpIPredicate::sle:
    break;
  case arith::CmpIPredicate::slt:
    e.cst += 1;
    break;
  case arith::CmpIPredicate::sge:
    flip(e);
    break;
  case arith::CmpIPredicate::sgt:
    flip(e);
    e.cst += 1;
    break;
  default:
    return std::nullopt;
  }
  if (negate) { // !(e <= 0) <=> -e + 1 <= 0
    flip(e);
    e.cst += 1;
  }
  for (unsigned d = 0; d < ctx.numDims; ++d) {
    int64_t expected = d == jDim ? 1 : d == iDim ? -1 : 0;
    if (e.dims[d] != expected)
      return std::nullopt;
  }
  // j - i + cst + symCoeff * s <= 0  <=>  j <= i - cst - symCoeff * s.
  CausalOffset offset;
  offset.constant = -e.cst;
  offset.coefficient = -e.symCoeff;
  if (e.symCoeff) {
    offset.symbol = e.symbol;
    offset.symbolTensor = e.symbolTensor;
    offset.symbolIndices = e.symbolIndices;
  }
  return offset;
}

/// The causal offset of a mask tensor `[..., L, S]`: a constant, or a
/// linalg.generic / tensor.generate whose value is a causal condition of
/// its last two indices (i1: the condition; float: select(cond, 0, -inf)).
std::optional<CausalOffset> causalOfMaskTensor(Value mask) {
  auto type = cast<RankedTensorType>(mask.getType());
  int64_t k = type.getRank();
  if (k < 2)
    return std::nullopt;
  DenseElementsAttr dense;
  if (matchPattern(mask, m_Constant(&dense))) {
    if (std::optional<int64_t> c = constantCausalOffset(dense)) {
      CausalOffset offset;
      offset.constant = *c;
      return offset;
    }
    return std::nullopt;
  }
  Region *region = nullptr;
  Value value;
  std::function<std::optional<unsigned>(Value)> dimOf;
  if (auto g = elementwise(mask)) {
    region = &g.getRegion();
    value = yielded(g);
    dimOf = [](Value v) -> std::optional<unsigned> {
      if (auto index = v.getDefiningOp<linalg::IndexOp>())
        return index.getDim();
      return std::nullopt;
    };
  } else if (auto gen = mask.getDefiningOp<tensor::GenerateOp>()) {
    region = &gen.getBody();
    value = gen.getBody().front().getTerminator()->getOperand(0);
    Block *body = &gen.getBody().front();
    dimOf = [body](Value v) -> std::optional<unsigned> {
      auto arg = dyn_cast<BlockArgument>(v);
      if (arg && arg.getOwner() == body)
        return arg.getArgNumber();
      return std::nullopt;
    };
  } else {
    return std::nullopt;
  }
  LinearContext ctx{region, static_cast<unsigned>(k), dimOf};
  unsigned iDim = k - 2, jDim = k - 1;
  if (type.getElementType().isInteger(1))
    return causalCondition(value, ctx, iDim, jDim, /*negate=*/false);
  auto select = value.getDefiningOp<arith::SelectOp>();
  if (!select)
    return std::nullopt;
  std::optional<double> t = getFloatSplat(select.getTrueValue());
  std::optional<double> f = getFloatSplat(select.getFalseValue());
  if (t && *t == 0.0 && isNegInf(f))
    return causalCondition(select.getCondition(), ctx, iDim, jDim, false);
  if (f && *f == 0.0 && isNegInf(t))
    return causalCondition(select.getCondition(), ctx, iDim, jDim, true);
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// The steps of the chain
//===----------------------------------------------------------------------===//

/// A contraction `C[batch..., m, n] = sum_k A[batch..., m, k] B[batch..., k,
/// n]` of rank 2 to 4 with a zero init; `lhsSwapped`: A is stored `[...,
/// k, m]`; `rhsSwapped`: B is stored `[..., n, k]`.
struct Contraction {
  Value lhs, rhs;
  bool lhsSwapped = false, rhsSwapped = false;
};

bool isLinalgContraction(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  return linalgOp && linalgOp.hasPureTensorSemantics() &&
         linalgOp->getNumResults() == 1 &&
         linalg::isaContractionOpInterface(linalgOp);
}

bool isZeroInit(Value init) {
  if (auto fill = init.getDefiningOp<linalg::FillOp>()) {
    std::optional<double> v = getFloatSplat(fill.getInputs()[0]);
    return v && *v == 0.0;
  }
  std::optional<double> v = getFloatSplat(init);
  return v && *v == 0.0;
}

Step matchContraction(Value v, Contraction &c, Refusal &why, StringRef what) {
  Operation *def = v.getDefiningOp();
  if (!def || !isLinalgContraction(def))
    return Step::None;
  auto op = cast<linalg::LinalgOp>(def);
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1)
    return Step::None;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  int64_t rank = rankOf(v);
  if (failed(dims) || dims->m.size() != 1 || dims->n.size() != 1 ||
      dims->k.size() != 1 ||
      static_cast<int64_t>(dims->batch.size()) != rank - 2)
    return refuse(why, what + " is not a (batched) matrix product with one "
                              "row, column and reduction dimension each");
  if (rank < 2 || rank > 4)
    return refuse(why, what + " has rank " + Twine(rank) +
                           "; kvattn.sdpa takes ranks 2 to 4");
  Type elt = getElementTypeOrSelf(v.getType());
  for (Value operand : op->getOperands())
    if (getElementTypeOrSelf(operand.getType()) != elt || !isa<FloatType>(elt))
      return refuse(why, what + " mixes element types");
  if (!isZeroInit(op.getDpsInits()[0]))
    return refuse(why, what + " accumulates into an init that is not zero");
  unsigned m = dims->m[0], n = dims->n[0], k = dims->k[0];
  auto dimsOf = [](AffineMap map) {
    SmallVector<unsigned> out;
    for (AffineExpr e : map.getResults())
      out.push_back(cast<AffineDimExpr>(e).getPosition());
    return out;
  };
  SmallVector<unsigned> batch(dims->batch.begin(), dims->batch.end());
  auto expect = [&](ArrayRef<unsigned> tail) {
    SmallVector<unsigned> r = batch;
    llvm::append_range(r, tail);
    return r;
  };
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (!llvm::all_of(maps, [](AffineMap map) {
        return map.isProjectedPermutation(/*allowZeroInResults=*/false);
      }))
    return refuse(why, what + " has indexing maps that are not permutations");
  SmallVector<unsigned> out = dimsOf(maps[2]), a = dimsOf(maps[0]),
                        b = dimsOf(maps[1]);
  if (out != expect({m, n}))
    return refuse(why, what + " writes its result in another order than "
                              "[batch..., rows, columns]");
  if (a == expect({m, k}))
    c.lhsSwapped = false;
  else if (a == expect({k, m}))
    c.lhsSwapped = true;
  else
    return refuse(why, what + "'s left operand has its batch dimensions in "
                              "another order");
  if (b == expect({k, n}))
    c.rhsSwapped = false;
  else if (b == expect({n, k}))
    c.rhsSwapped = true;
  else
    return refuse(why, what + "'s right operand has its batch dimensions in "
                              "another order");
  c.lhs = op.getDpsInputs()[0];
  c.rhs = op.getDpsInputs()[1];
  return Step::Matched;
}

/// Looks through a linalg.transpose that swaps the last two dimensions.
void peelTranspose(Value &v, bool &swapped) {
  auto t = v.getDefiningOp<linalg::TransposeOp>();
  if (!t)
    return;
  ArrayRef<int64_t> perm = t.getPermutation();
  int64_t r = perm.size();
  if (r < 2)
    return;
  for (int64_t d = 0; d < r - 2; ++d)
    if (perm[d] != d)
      return;
  if (perm[r - 2] != r - 1 || perm[r - 1] != r - 2)
    return;
  v = t.getInput();
  swapped = !swapped;
}

/// An elementwise multiply or divide by a constant splat: `v = x * c` or
/// `x / c`.
Step matchScale(Value v, Value &x, double &factor, Refusal &why) {
  linalg::GenericOp g = elementwise(v);
  if (!g)
    return Step::None;
  Operation *op = yielded(g).getDefiningOp();
  if (!op || !isa<arith::MulFOp, arith::DivFOp>(op) ||
      op->getBlock() != g.getBody())
    return Step::None;
  for (unsigned side = 0; side < 2; ++side) {
    if (isa<arith::DivFOp>(op) && side == 1)
      break;
    std::optional<Input> in = inputOf(g, op->getOperand(side));
    if (!in || !in->map.isIdentity())
      continue;
    Value other = op->getOperand(1 - side);
    std::optional<double> c = constantIn(g, other);
    if (!c) {
      std::optional<Input> o = inputOf(g, other);
      Attribute attr;
      if (o && matchPattern(o->tensor, m_Constant(&attr)))
        return refuse(why, "the scores are scaled by a constant that is not "
                           "a splat");
      return refuse(why, "the scores are scaled by a value that is not a "
                         "constant");
    }
    if (isa<arith::DivFOp>(op)) {
      if (*c == 0.0)
        return refuse(why, "the scores are divided by zero");
      factor = 1.0 / *c;
    } else {
      factor = *c;
    }
    x = in->tensor;
    return Step::Matched;
  }
  return Step::None;
}

/// The refusal of a mask computed in the body that is not read as a causal
/// offset (`outOfRange`: why, when the offset's arithmetic left the range).
std::string notCausal(const std::string &outOfRange) {
  if (!outOfRange.empty())
    return "the mask computed in the body is `key <= query + offset`, but " +
           outOfRange;
  return "the mask computed in the body is not `key <= query + offset` over "
         "the last two dimensions";
}

/// A mask: `v = x + m`, `select(m, x, -inf)` or the same with a condition
/// computed from linalg.index.
Step matchMask(Value v, Value &x, SdpaMatch &match, Refusal &why) {
  linalg::GenericOp g = elementwise(v);
  if (!g)
    return Step::None;
  int64_t rank = rankOf(v);
  Value y = yielded(g);
  Operation *op = y.getDefiningOp();
  if (!op || op->getBlock() != g.getBody())
    return Step::None;
  auto dimOf = [](Value s) -> std::optional<unsigned> {
    if (auto index = s.getDefiningOp<linalg::IndexOp>())
      return index.getDim();
    return std::nullopt;
  };
  std::string outOfRange;
  LinearContext ctx{&g.getRegion(), static_cast<unsigned>(rank), dimOf,
                    &outOfRange};
  unsigned iDim = rank - 2, jDim = rank - 1;
  auto takeTensorMask = [&](const Input &m) -> Step {
    std::optional<unsigned> k = suffixRank(m.map);
    if (!k)
      return refuse(why, "the mask is read through " + mapString(m.map) +
                             ", which does not align its dimensions with "
                             "the trailing dimensions of the scores");
    if (*k == 0)
      return refuse(why, "the mask is a scalar");
    if (std::optional<CausalOffset> c = causalOfMaskTensor(m.tensor))
      match.causal = c;
    else
      match.mask = m.tensor;
    return Step::Matched;
  };
  if (auto add = dyn_cast<arith::AddFOp>(op)) {
    // The scores are the side computed by linalg (when both are tensors).
    unsigned first = 0;
    if (std::optional<Input> a = inputOf(g, add->getOperand(0)))
      if (std::optional<Input> b = inputOf(g, add->getOperand(1)))
        if (!a->tensor.getDefiningOp<linalg::LinalgOp>() &&
            b->tensor.getDefiningOp<linalg::LinalgOp>())
          first = 1;
    for (unsigned side : {first, 1 - first}) {
      std::optional<Input> in = inputOf(g, add->getOperand(side));
      if (!in || !in->map.isIdentity())
        continue;
      Value other = add->getOperand(1 - side);
      x = in->tensor;
      if (std::optional<Input> m = inputOf(g, other))
        return takeTensorMask(*m);
      if (auto sel = other.getDefiningOp<arith::SelectOp>()) {
        std::optional<double> t = constantIn(g, sel.getTrueValue());
        std::optional<double> f = constantIn(g, sel.getFalseValue());
        std::optional<CausalOffset> c;
        if (t && *t == 0.0 && isNegInf(f))
          c = causalCondition(sel.getCondition(), ctx, iDim, jDim, false);
        else if (f && *f == 0.0 && isNegInf(t))
          c = causalCondition(sel.getCondition(), ctx, iDim, jDim, true);
        if (!c)
          return refuse(why, notCausal(outOfRange));
        match.causal = c;
        return Step::Matched;
      }
      return refuse(why, "the scores are added to something that is neither "
                         "a mask tensor nor a causal condition");
    }
    return Step::None;
  }
  if (auto sel = dyn_cast<arith::SelectOp>(op)) {
    bool negate;
    std::optional<Input> in;
    if ((in = inputOf(g, sel.getTrueValue())) && in->map.isIdentity() &&
        isNegInf(constantIn(g, sel.getFalseValue())))
      negate = false;
    else if ((in = inputOf(g, sel.getFalseValue())) && in->map.isIdentity() &&
             isNegInf(constantIn(g, sel.getTrueValue())))
      negate = true;
    else if (inputOf(g, sel.getTrueValue()) || inputOf(g, sel.getFalseValue()))
      return refuse(why, "the masked scores are replaced by a value that is "
                         "not -inf");
    else
      return Step::None;
    x = in->tensor;
    if (std::optional<Input> m = inputOf(g, sel.getCondition())) {
      if (negate)
        return refuse(why, "the boolean mask is inverted (true excludes a "
                           "key)");
      return takeTensorMask(*m);
    }
    std::optional<CausalOffset> c =
        causalCondition(sel.getCondition(), ctx, iDim, jDim, negate);
    if (!c)
      return refuse(why, notCausal(outOfRange));
    match.causal = c;
    return Step::Matched;
  }
  return Step::None;
}

/// A reduction of `x` over its last dimension with a body `combine(in,
/// out)`: returns the reduced input (or null) and refuses other dims.
template <typename... Combine>
Step matchRowReduction(Value v, Value &x, Refusal &why, StringRef what) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 1 || g.getNumDpsInits() != 1 ||
      g.getNumReductionLoops() != 1)
    return Step::None;
  Operation *op = yielded(g).getDefiningOp();
  if (!op || !isa<Combine...>(op))
    return Step::None;
  SmallVector<utils::IteratorType> iters = g.getIteratorTypesArray();
  unsigned n = iters.size();
  AffineMap inMap = g.getMatchingIndexingMap(g.getDpsInputOperand(0));
  AffineMap outMap = g.getMatchingIndexingMap(g.getDpsInitOperand(0));
  if (!inMap.isIdentity())
    return refuse(why, what + " reads the scores through " + mapString(inMap));
  if (iters[n - 1] != utils::IteratorType::reduction || !isRowBroadcast(outMap))
    for (unsigned d = 0; d < n; ++d)
      if (iters[d] == utils::IteratorType::reduction)
        return refuse(why, what + " reduces dimension " + Twine(d) +
                               ", not the key dimension " + Twine(n - 1));
  if (!isRowBroadcast(outMap))
    return refuse(why, what + " writes through " + mapString(outMap));
  x = g.getDpsInputs()[0];
  return Step::Matched;
}

/// `E = exp(X - max X)` (or `exp(X)`), fused or as a sub then an exp.
Step matchExpOfShifted(Value e, Value &x, Refusal &why) {
  linalg::GenericOp g = elementwise(e);
  if (!g)
    return Step::None;
  auto exp = yielded(g).getDefiningOp<math::ExpOp>();
  if (!exp)
    return Step::None;
  Value arg = exp.getOperand();
  Value shifted, rowMax;
  if (auto sub = arg.getDefiningOp<arith::SubFOp>();
      sub && sub->getBlock() == g.getBody()) {
    std::optional<Input> a = inputOf(g, sub.getLhs());
    std::optional<Input> b = inputOf(g, sub.getRhs());
    if (!a || !b || !a->map.isIdentity())
      return refuse(why, "the softmax's exponent is not scores minus their "
                         "row maximum");
    if (!isRowBroadcast(b->map))
      return refuse(why, "the softmax subtracts a maximum broadcast through " +
                             mapString(b->map) +
                             " rather than along the key dimension");
    shifted = a->tensor;
    rowMax = b->tensor;
  } else if (std::optional<Input> a = inputOf(g, arg)) {
    if (!a->map.isIdentity())
      return Step::None;
    // A separate subtraction, or none.
    linalg::GenericOp s = elementwise(a->tensor);
    auto sub = s ? yielded(s).getDefiningOp<arith::SubFOp>() : nullptr;
    if (!sub) {
      x = a->tensor;
      return Step::Matched;
    }
    std::optional<Input> l = inputOf(s, sub.getLhs());
    std::optional<Input> r = inputOf(s, sub.getRhs());
    if (!l || !r || !l->map.isIdentity())
      return refuse(why, "the softmax's exponent is not scores minus their "
                         "row maximum");
    if (!isRowBroadcast(r->map))
      return refuse(why, "the softmax subtracts a maximum broadcast through " +
                             mapString(r->map) +
                             " rather than along the key dimension");
    shifted = l->tensor;
    rowMax = r->tensor;
  } else {
    return Step::None;
  }
  Value maxInput;
  Step s = matchRowReduction<arith::MaxNumFOp, arith::MaximumFOp>(
      rowMax, maxInput, why, "the softmax's maximum");
  if (s == Step::Refused)
    return s;
  if (s == Step::None || maxInput != shifted)
    return refuse(why, "the softmax subtracts something other than the row "
                       "maximum of the same scores");
  // The max's init must be neutral: -inf, NaN or the lowest float.
  auto red = rowMax.getDefiningOp<linalg::GenericOp>();
  Value init = red.getDpsInits()[0];
  if (auto fill = init.getDefiningOp<linalg::FillOp>())
    init = fill.getInputs()[0];
  std::optional<double> i = getFloatSplat(init);
  if (!i || !(std::isnan(*i) || (*i < 0 && (std::isinf(*i) || *i < -3.0e38))))
    return refuse(why, "the softmax's maximum starts from a value that is "
                       "not -inf");
  x = shifted;
  return Step::Matched;
}

/// P = softmax over the last dimension of X.
Step matchSoftmax(Value p, Value &x, Refusal &why) {
  int64_t rank = rankOf(p);
  if (auto sm = p.getDefiningOp<linalg::SoftmaxOp>()) {
    if (static_cast<int64_t>(sm.getDimension()) != rank - 1)
      return refuse(why, "the softmax is over dimension " +
                             Twine(sm.getDimension()) +
                             ", not the key dimension " + Twine(rank - 1));
    x = sm.getInput();
    return Step::Matched;
  }
  linalg::GenericOp g = elementwise(p);
  if (!g)
    return Step::None;
  Operation *op = yielded(g).getDefiningOp();
  if (!op || op->getBlock() != g.getBody() ||
      !isa<arith::DivFOp, arith::MulFOp>(op))
    return Step::None;
  // E / Σ, or E * R with R = 1 / Σ.
  Value e, sum;
  for (unsigned side = 0; side < 2 && !e; ++side) {
    if (isa<arith::DivFOp>(op) && side == 1)
      break;
    std::optional<Input> a = inputOf(g, op->getOperand(side));
    std::optional<Input> b = inputOf(g, op->getOperand(1 - side));
    if (!a || !b || !a->map.isIdentity() || getFloatSplat(b->tensor))
      continue;
    if (!isRowBroadcast(b->map))
      return refuse(why, "the softmax's normaliser is broadcast through " +
                             mapString(b->map) +
                             " rather than along the key dimension");
    if (isa<arith::DivFOp>(op)) {
      e = a->tensor;
      sum = b->tensor;
      break;
    }
    // R = 1 / Σ.
    linalg::GenericOp r = elementwise(b->tensor);
    auto div = r ? yielded(r).getDefiningOp<arith::DivFOp>() : nullptr;
    std::optional<double> one =
        div ? constantIn(r, div.getLhs()) : std::nullopt;
    std::optional<Input> s = div ? inputOf(r, div.getRhs()) : std::nullopt;
    if (!one || *one != 1.0 || !s || !s->map.isIdentity())
      continue;
    e = a->tensor;
    sum = s->tensor;
  }
  if (!e)
    return Step::None;
  Value sumInput;
  Step s =
      matchRowReduction<arith::AddFOp>(sum, sumInput, why, "the softmax's sum");
  if (s == Step::Refused)
    return s;
  if (s == Step::None || sumInput != e)
    return refuse(why, "the softmax divides by something other than the row "
                       "sum of the same exponentials");
  if (!isZeroInit(sum.getDefiningOp<linalg::GenericOp>().getDpsInits()[0]))
    return refuse(why, "the softmax's sum starts from a value that is not 0");
  return matchExpOfShifted(e, x, why);
}

bool isExpLike(Operation *op) {
  if (isa<linalg::SoftmaxOp, math::ExpOp>(op))
    return true;
  if (auto g = dyn_cast<linalg::GenericOp>(op)) {
    bool found = false;
    g.getBody()->walk([&](math::ExpOp) { found = true; });
    return found;
  }
  return false;
}

} // namespace

LogicalResult mlir::kvattn::raise::matchLinalgSdpa(Operation *root,
                                                   SdpaMatch &match,
                                                   Refusal &why) {
  if (!isLinalgContraction(root))
    return failure();
  Value out = root->getResult(0);
  Contraction pv;
  Step s = matchContraction(out, pv, why, "the P·V product");
  bool sdpaShaped =
      looksLikeAttention(cast<linalg::LinalgOp>(root).getDpsInputs()[0],
                         isLinalgContraction, isExpLike);
  auto fail = [&]() {
    if (!sdpaShaped)
      why.reason.clear();
    return failure();
  };
  if (s != Step::Matched || !sdpaShaped)
    return fail();
  if (pv.lhsSwapped) {
    why.reason = "the probabilities enter the P·V product transposed";
    return fail();
  }
  match.root = root;
  match.value = pv.rhs;
  match.valueTransposed = pv.rhsSwapped;
  peelTranspose(match.value, match.valueTransposed);

  Value x;
  s = matchSoftmax(pv.lhs, x, why);
  if (s != Step::Matched) {
    if (s == Step::None)
      why.reason = "the probabilities are not a softmax over the key "
                   "dimension";
    return fail();
  }
  const ScoreSteps steps{matchMask, matchScale};
  if (failed(peelMaskAndScales(x, match, why, steps)))
    return fail();
  Contraction qk;
  s = matchContraction(x, qk, why, "the Q·Kᵀ product");
  if (s != Step::Matched) {
    if (s == Step::None)
      why.reason = "the softmax's input is not Q·Kᵀ up to a constant scale "
                   "and a mask";
    return fail();
  }
  match.query = qk.lhs;
  match.queryTransposed = qk.lhsSwapped;
  // A scale on Q.
  peelQueryScales(match, steps);
  peelTranspose(match.query, match.queryTransposed);
  match.key = qk.rhs;
  match.keyTransposed = !qk.rhsSwapped;
  peelTranspose(match.key, match.keyTransposed);
  if (getElementTypeOrSelf(match.query.getType()) !=
      getElementTypeOrSelf(out.getType())) {
    why.reason = "the result's element type differs from the query's";
    return fail();
  }
  if (match.mask && rankOf(match.mask) > rankOf(out)) {
    why.reason = "the mask has a higher rank than the scores";
    return fail();
  }
  return success();
}
