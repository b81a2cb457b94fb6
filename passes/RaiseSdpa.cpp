//===- RaiseSdpa.cpp - upstream SDPA -> kvattn.sdpa
//------------------------===//
//
// Recognises scaled dot-product attention written in upstream dialects
// (linalg on tensors, TOSA) and rewrites it into kvattn.sdpa, so that
// -kvattn-resolve-cached-append can make its positions explicit. The
// matchers live in RaiseSdpaLinalg.cpp and RaiseSdpaTosa.cpp; this file
// holds what they share (the rewrite, the mask analysis) and the pass.
//
// A candidate that looks like attention but differs from SDPA in a way that
// matters (softmax over another dimension, a mask on the wrong axis, a
// scale that is not a constant, ...) is left alone with a remark that says
// why: a wrong rewrite is worse than none.
//
//===----------------------------------------------------------------------===//

#include "RaiseSdpa.h"

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_RAISESDPAPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;
using namespace mlir::kvattn::raise;

//===----------------------------------------------------------------------===//
// Shared analysis
//===----------------------------------------------------------------------===//

std::optional<double> raise::getFloatSplat(Value v) {
  Attribute attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto dense = dyn_cast<DenseFPElementsAttr>(attr))
    if (dense.isSplat())
      return dense.getSplatValue<APFloat>().convertToDouble();
  return std::nullopt;
}

std::optional<int64_t> raise::constantCausalOffset(DenseElementsAttr mask) {
  auto type = cast<ShapedType>(mask.getType());
  if (type.getRank() < 2 || !type.hasStaticShape())
    return std::nullopt;
  int64_t rows = type.getDimSize(type.getRank() - 2);
  int64_t cols = type.getDimSize(type.getRank() - 1);
  if (rows == 0 || cols == 0)
    return std::nullopt;
  bool isBool = type.getElementType().isInteger(1);
  if (!isBool && !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  // allowed(flat index), or nullopt when a value is neither kind.
  SmallVector<int8_t> allowed;
  allowed.reserve(type.getNumElements());
  if (isBool) {
    for (bool b : mask.getValues<bool>())
      allowed.push_back(b);
  } else {
    for (APFloat f : mask.getValues<APFloat>()) {
      if (f.isZero())
        allowed.push_back(1);
      else if (f.isInfinity() && f.isNegative())
        allowed.push_back(0);
      else
        return std::nullopt;
    }
  }
  // Row 0 allows keys 0..c exactly; c must leave every row partly allowed
  // and partly excluded somewhere, or the mask does not pin c down.
  int64_t count0 = 0;
  while (count0 < cols && allowed[count0])
    ++count0;
  int64_t c = count0 - 1;
  // c >= cols - 1: row 0 sees every key, and a larger c would say the same.
  if (c < 0 || c >= cols - 1)
    return std::nullopt;
  int64_t n = static_cast<int64_t>(allowed.size());
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t j = flat % cols;
    int64_t i = (flat / cols) % rows;
    if (static_cast<bool>(allowed[flat]) != (j <= i + c))
      return std::nullopt;
  }
  return c;
}

std::optional<AlibiBias> raise::constantAlibi(DenseElementsAttr mask,
                                              int64_t rows, int64_t cols) {
  auto type = cast<ShapedType>(mask.getType());
  const int64_t rank = type.getRank();
  if (rank < 2 || !type.hasStaticShape() ||
      !isa<FloatType>(type.getElementType()) ||
      type.getDimSize(rank - 2) != rows || type.getDimSize(rank - 1) != cols ||
      rows == 0 || cols < 2)
    return std::nullopt;
  const int64_t heads = rank >= 3 ? type.getDimSize(rank - 3) : 1;
  for (int64_t d = 0; d + 3 < rank; ++d)
    if (type.getDimSize(d) != 1)
      return std::nullopt;
  SmallVector<double> v;
  v.reserve(type.getNumElements());
  for (APFloat f : mask.getValues<APFloat>()) {
    if (f.isNaN() || (f.isInfinity() && !f.isNegative()))
      return std::nullopt;
    v.push_back(f.isInfinity() ? -INFINITY : f.convertToDouble());
  }
  auto at = [&](int64_t h, int64_t i, int64_t j) {
    return v[(h * rows + i) * cols + j];
  };
  AlibiBias bias;
  bias.causal = llvm::any_of(v, [](double x) { return std::isinf(x); });
  // The offset: the causal part's (row 0 allows keys 0 .. c), or the key of
  // row 0 whose bias is 0 in a head with a nonzero slope.
  std::optional<int64_t> offset;
  if (bias.causal) {
    int64_t allowed = 0;
    while (allowed < cols && !std::isinf(at(0, 0, allowed)))
      ++allowed;
    offset = allowed - 1;
  } else {
    for (int64_t h = 0; h < heads && !offset; ++h) {
      if (llvm::all_of(llvm::seq<int64_t>(0, cols),
                       [&](int64_t j) { return at(h, 0, j) == 0; }))
        continue;
      for (int64_t j = 0; j < cols; ++j)
        if (at(h, 0, j) == 0)
          offset = j;
    }
  }
  if (!offset || *offset < 0)
    return std::nullopt;
  bias.offset = *offset;
  bool anySlope = false;
  for (int64_t h = 0; h < heads; ++h) {
    // The slope from the allowed entry farthest from its row's position,
    // then every entry checked against it (3 ulps of f32).
    double slope = 0;
    int64_t farthest = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t d = std::abs(i + bias.offset - j);
        const bool allowed = !bias.causal || j <= i + bias.offset;
        if (std::isinf(at(h, i, j)) == allowed)
          return std::nullopt;
        if (allowed && d > farthest) {
          farthest = d;
          slope = -at(h, i, j) / static_cast<double>(d);
        }
      }
    if (farthest == 0)
      return std::nullopt;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double x = at(h, i, j);
        if (std::isinf(x))
          continue;
        const double want = -slope * std::abs(i + bias.offset - j);
        if (std::abs(x - want) > 4e-7 * std::max(std::abs(x), std::abs(want)))
          return std::nullopt;
      }
    anySlope |= slope != 0;
    bias.slopes.push_back(static_cast<float>(slope));
  }
  if (!anySlope)
    return std::nullopt;
  return bias;
}

namespace {

/// A tensor evaluated at compile time: its row-major values (integers, i1
/// and floats alike as doubles; f32 results rounded to f32 as computed).
struct FoldedTensor {
  SmallVector<int64_t> shape;
  std::vector<double> data;
};

constexpr int64_t kMaxFoldedElements = int64_t(1) << 16;
constexpr int kMaxFoldDepth = 32;

std::optional<FoldedTensor> foldTensor(Value v, int depth);

/// One scalar op of a linalg.generic body, from the values of its operands
/// (`env`); nullopt for an op this evaluator does not know.
std::optional<double> evaluateScalar(Operation *op, ArrayRef<double> args,
                                     ArrayRef<int64_t> index,
                                     const DenseMap<Value, FoldedTensor> &cache,
                                     int depth) {
  auto f32Result = [&](double x) {
    Type t = op->getResult(0).getType();
    return t.isF32() ? static_cast<double>(static_cast<float>(x)) : x;
  };
  auto integral = [](double x) { return std::trunc(x) == x; };
  if (auto idx = dyn_cast<linalg::IndexOp>(op))
    return static_cast<double>(index[idx.getDim()]);
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    if (auto f = dyn_cast<FloatAttr>(c.getValue()))
      return f.getValueAsDouble();
    if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
      return i.getType().isInteger(1)
                 ? static_cast<double>(i.getValue().getZExtValue())
                 : static_cast<double>(i.getValue().getSExtValue());
    return std::nullopt;
  }
  if (isa<arith::AddIOp>(op))
    return args[0] + args[1];
  if (isa<arith::SubIOp>(op))
    return args[0] - args[1];
  if (isa<arith::MulIOp>(op))
    return args[0] * args[1];
  if (isa<arith::DivSIOp>(op))
    return args[1] == 0 ? std::optional<double>()
                        : std::trunc(args[0] / args[1]);
  if (isa<arith::RemSIOp>(op))
    return args[1] == 0 ? std::optional<double>() : std::fmod(args[0], args[1]);
  if (isa<arith::MaxSIOp>(op))
    return std::max(args[0], args[1]);
  if (isa<arith::MinSIOp>(op))
    return std::min(args[0], args[1]);
  if (isa<arith::AndIOp>(op) && integral(args[0]))
    return static_cast<double>(static_cast<int64_t>(args[0]) &
                               static_cast<int64_t>(args[1]));
  if (isa<arith::OrIOp>(op))
    return static_cast<double>(static_cast<int64_t>(args[0]) |
                               static_cast<int64_t>(args[1]));
  if (isa<arith::XOrIOp>(op))
    return static_cast<double>(static_cast<int64_t>(args[0]) ^
                               static_cast<int64_t>(args[1]));
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtSIOp,
          arith::ExtUIOp, arith::TruncIOp, arith::SIToFPOp, arith::UIToFPOp,
          arith::ExtFOp>(op))
    return f32Result(args[0]);
  if (isa<arith::FPToSIOp>(op))
    return std::trunc(args[0]);
  if (isa<arith::AddFOp>(op))
    return f32Result(args[0] + args[1]);
  if (isa<arith::SubFOp>(op))
    return f32Result(args[0] - args[1]);
  if (isa<arith::MulFOp>(op))
    return f32Result(args[0] * args[1]);
  if (isa<arith::DivFOp>(op))
    return f32Result(args[0] / args[1]);
  if (isa<arith::NegFOp>(op))
    return -args[0];
  if (isa<arith::MaximumFOp, arith::MaxNumFOp>(op))
    return std::max(args[0], args[1]);
  if (isa<arith::MinimumFOp, arith::MinNumFOp>(op))
    return std::min(args[0], args[1]);
  if (isa<math::AbsFOp, math::AbsIOp>(op))
    return std::abs(args[0]);
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    using P = arith::CmpIPredicate;
    const double a = args[0], b = args[1];
    switch (cmp.getPredicate()) {
    case P::eq:
      return a == b;
    case P::ne:
      return a != b;
    case P::slt:
    case P::ult:
      return a < b;
    case P::sle:
    case P::ule:
      return a <= b;
    case P::sgt:
    case P::ugt:
      return a > b;
    case P::sge:
    case P::uge:
      return a >= b;
    }
    return std::nullopt;
  }
  if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
    using P = arith::CmpFPredicate;
    const double a = args[0], b = args[1];
    switch (cmp.getPredicate()) {
    case P::OEQ:
    case P::UEQ:
      return a == b;
    case P::ONE:
    case P::UNE:
      return a != b;
    case P::OLT:
    case P::ULT:
      return a < b;
    case P::OLE:
    case P::ULE:
      return a <= b;
    case P::OGT:
    case P::UGT:
      return a > b;
    case P::OGE:
    case P::UGE:
      return a >= b;
    default:
      return std::nullopt;
    }
  }
  if (isa<arith::SelectOp>(op))
    return args[0] != 0 ? args[1] : args[2];
  if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
    auto it = cache.find(extract.getTensor());
    if (it == cache.end())
      return std::nullopt;
    const FoldedTensor &t = it->second;
    int64_t flat = 0;
    for (auto [d, size] : llvm::enumerate(t.shape)) {
      const double x = args[d + 1];
      if (x < 0 || x >= size)
        return std::nullopt;
      flat = flat * size + static_cast<int64_t>(x);
    }
    return t.data[flat];
  }
  return std::nullopt;
}

std::optional<FoldedTensor> foldGeneric(linalg::GenericOp g, int depth) {
  if (g.getNumDpsInits() != 1 || g->getNumResults() != 1 ||
      llvm::any_of(g.getIteratorTypesArray(), [](utils::IteratorType t) {
        return t != utils::IteratorType::parallel;
      }))
    return std::nullopt;
  AffineMap outMap = g.getIndexingMapsArray().back();
  if (!outMap.isIdentity())
    return std::nullopt;
  auto type = cast<RankedTensorType>(g->getResult(0).getType());
  FoldedTensor out{llvm::to_vector(type.getShape()), {}};
  // The inputs (and the init, when the body reads it).
  Block &body = g.getRegion().front();
  SmallVector<std::optional<FoldedTensor>> operands;
  for (OpOperand &operand : g->getOpOperands()) {
    BlockArgument arg = body.getArgument(operand.getOperandNumber());
    if (arg.use_empty()) {
      operands.push_back(FoldedTensor());
      continue;
    }
    std::optional<FoldedTensor> t = foldTensor(operand.get(), depth + 1);
    if (!t)
      return std::nullopt;
    operands.push_back(std::move(t));
  }
  // Tensors the body extracts from.
  DenseMap<Value, FoldedTensor> cache;
  for (Operation &op : body.without_terminator())
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      if (extract.getTensor().getParentRegion() == &g.getRegion())
        return std::nullopt;
      if (!cache.count(extract.getTensor())) {
        std::optional<FoldedTensor> t =
            foldTensor(extract.getTensor(), depth + 1);
        if (!t)
          return std::nullopt;
        cache[extract.getTensor()] = std::move(*t);
      }
    }
  const int64_t n = type.getNumElements();
  out.data.resize(n);
  SmallVector<int64_t> index(out.shape.size(), 0);
  SmallVector<AffineMap> maps = g.getIndexingMapsArray();
  DenseMap<Value, double> env;
  for (int64_t flat = 0; flat < n; ++flat) {
    env.clear();
    for (auto [k, operand] : llvm::enumerate(operands)) {
      BlockArgument arg = body.getArgument(k);
      if (arg.use_empty())
        continue;
      AffineMap map = maps[k];
      if (!map.isProjectedPermutation())
        return std::nullopt;
      int64_t at = 0;
      for (auto [d, e] : llvm::enumerate(map.getResults()))
        at = at * operand->shape[d] +
             index[cast<AffineDimExpr>(e).getPosition()];
      env[arg] = operand->data[at];
    }
    for (Operation &op : body.without_terminator()) {
      if (op.getNumResults() != 1)
        return std::nullopt;
      SmallVector<double> args;
      for (Value operand : op.getOperands()) {
        auto it = env.find(operand);
        if (it != env.end()) {
          args.push_back(it->second);
          continue;
        }
        // A tensor operand (tensor.extract's source) or a value defined
        // above the body: constants only.
        if (isa<TensorType>(operand.getType())) {
          args.push_back(0);
          continue;
        }
        Attribute attr;
        if (!matchPattern(operand, m_Constant(&attr)))
          return std::nullopt;
        if (auto f = dyn_cast<FloatAttr>(attr))
          args.push_back(f.getValueAsDouble());
        else if (auto i = dyn_cast<IntegerAttr>(attr))
          args.push_back(static_cast<double>(i.getValue().getSExtValue()));
        else
          return std::nullopt;
      }
      std::optional<double> r = evaluateScalar(&op, args, index, cache, depth);
      if (!r)
        return std::nullopt;
      env[op.getResult(0)] = *r;
    }
    auto yield = cast<linalg::YieldOp>(body.getTerminator());
    auto it = env.find(yield.getOperand(0));
    if (it == env.end())
      return std::nullopt;
    out.data[flat] = it->second;
    // The next index, row-major.
    for (int64_t d = static_cast<int64_t>(index.size()) - 1; d >= 0; --d) {
      if (++index[d] < out.shape[d])
        break;
      index[d] = 0;
    }
  }
  return out;
}

std::optional<FoldedTensor> foldTensor(Value v, int depth) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (depth > kMaxFoldDepth || !type || !type.hasStaticShape() ||
      type.getNumElements() > kMaxFoldedElements)
    return std::nullopt;
  FoldedTensor out{llvm::to_vector(type.getShape()), {}};
  DenseElementsAttr dense;
  if (matchPattern(v, m_Constant(&dense))) {
    if (isa<FloatType>(type.getElementType())) {
      for (APFloat f : dense.getValues<APFloat>())
        out.data.push_back(f.convertToDouble());
    } else if (type.getElementType().isInteger(1)) {
      for (bool b : dense.getValues<bool>())
        out.data.push_back(b);
    } else if (type.getElementType().isIntOrIndex()) {
      for (APInt i : dense.getValues<APInt>())
        out.data.push_back(static_cast<double>(i.getSExtValue()));
    } else {
      return std::nullopt;
    }
    return out;
  }
  Operation *def = v.getDefiningOp();
  if (!def)
    return std::nullopt;
  if (auto fill = dyn_cast<linalg::FillOp>(def)) {
    Attribute attr;
    if (!matchPattern(fill.value(), m_Constant(&attr)))
      return std::nullopt;
    double x;
    if (auto f = dyn_cast<FloatAttr>(attr))
      x = f.getValueAsDouble();
    else if (auto i = dyn_cast<IntegerAttr>(attr))
      x = static_cast<double>(i.getValue().getSExtValue());
    else
      return std::nullopt;
    out.data.assign(type.getNumElements(), x);
    return out;
  }
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(def)) {
    std::optional<FoldedTensor> source =
        foldTensor(def->getOperand(0), depth + 1);
    if (!source)
      return std::nullopt;
    out.data = std::move(source->data);
    return out;
  }
  if (auto g = dyn_cast<linalg::GenericOp>(def))
    return foldGeneric(g, depth);
  return std::nullopt;
}

} // namespace

std::optional<DenseElementsAttr> raise::evaluateConstantMask(Value mask) {
  auto type = dyn_cast<RankedTensorType>(mask.getType());
  if (!type || !type.getElementType().isF32())
    return std::nullopt;
  DenseElementsAttr dense;
  if (matchPattern(mask, m_Constant(&dense)))
    return dense;
  std::optional<FoldedTensor> folded = foldTensor(mask, 0);
  if (!folded)
    return std::nullopt;
  SmallVector<float> values;
  values.reserve(folded->data.size());
  for (double x : folded->data)
    values.push_back(static_cast<float>(x));
  return DenseElementsAttr::get(type, ArrayRef<float>(values));
}

void raise::eraseDeadProducers(RewriterBase &rewriter, ValueRange roots) {
  SmallVector<Operation *> worklist;
  for (Value v : roots)
    if (Operation *def = v.getDefiningOp())
      worklist.push_back(def);
  // An op may be reached twice; remember what is gone (nothing is created
  // here, so a freed address is not reused meanwhile).
  llvm::SmallPtrSet<Operation *, 32> erased;
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (erased.contains(op) || !isOpTriviallyDead(op))
      continue;
    SmallVector<Operation *> producers;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        producers.push_back(def);
    // Values captured by regions (a mask's cache position) too.
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && !op->isAncestor(def))
          producers.push_back(def);
    });
    erased.insert(op);
    rewriter.eraseOp(op);
    for (Operation *p : producers)
      if (!erased.contains(p))
        worklist.push_back(p);
  }
}

bool raise::looksLikeAttention(Value v,
                               function_ref<bool(Operation *)> isContraction,
                               function_ref<bool(Operation *)> isExp) {
  bool sawExp = false, sawContraction = false;
  SmallVector<std::pair<Value, int>> worklist{{v, 0}};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!worklist.empty() && !(sawExp && sawContraction)) {
    auto [value, depth] = worklist.pop_back_val();
    Operation *def = value.getDefiningOp();
    if (!def || depth > 12 || !seen.insert(def).second)
      continue;
    if (isContraction(def)) {
      sawContraction = true;
      continue;
    }
    if (isExp(def))
      sawExp = true;
    for (Value operand : def->getOperands())
      worklist.push_back({operand, depth + 1});
  }
  return sawExp && sawContraction;
}

Step raise::refuse(Refusal &why, const Twine &reason) {
  why.reason = reason.str();
  return Step::Refused;
}

LogicalResult raise::peelMaskAndScales(Value &x, SdpaMatch &match, Refusal &why,
                                       const ScoreSteps &steps) {
  bool scaled = false;
  for (int depth = 0; depth < 8; ++depth) {
    Value inner;
    if (!match.mask && !match.causal) {
      Step s = steps.mask(x, inner, match, why);
      if (s == Step::Refused)
        return failure();
      if (s == Step::Matched) {
        if (scaled) {
          why.reason = "the scores are scaled after the mask is added";
          return failure();
        }
        x = inner;
        continue;
      }
    }
    double factor = 1.0;
    Step s = steps.scale(x, inner, factor, why);
    if (s == Step::Refused)
      return failure();
    if (s == Step::None)
      break;
    match.scale *= factor;
    scaled = true;
    x = inner;
  }
  return success();
}

void raise::peelQueryScales(SdpaMatch &match, const ScoreSteps &steps) {
  for (int depth = 0; depth < 4; ++depth) {
    Value inner;
    double factor = 1.0;
    Refusal ignored;
    if (steps.scale(match.query, inner, factor, ignored) != Step::Matched)
      break;
    match.scale *= factor;
    match.query = inner;
  }
}

void raise::remarkNotRaised(Operation *root, const Refusal &why) {
  root->emitRemark() << "not raised to kvattn.sdpa: " << why.reason;
}

//===----------------------------------------------------------------------===//
// The rewrite
//===----------------------------------------------------------------------===//

/// `v` with its last two dimensions swapped (linalg.transpose).
static Value swapLastTwo(RewriterBase &rewriter, Location loc, Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 1], perm[rank - 2]);
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(rewriter, loc, v);
  std::swap(sizes[rank - 1], sizes[rank - 2]);
  Value init =
      tensor::EmptyOp::create(rewriter, loc, sizes, type.getElementType());
  return linalg::TransposeOp::create(rewriter, loc, v, init, perm)
      ->getResult(0);
}

/// `v` with unit dimensions prepended up to `rank`.
static Value prependUnitDims(RewriterBase &rewriter, Location loc, Value v,
                             int64_t rank) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t extra = rank - type.getRank();
  if (extra <= 0)
    return v;
  SmallVector<int64_t> shape(extra, 1);
  llvm::append_range(shape, type.getShape());
  SmallVector<ReassociationIndices> groups;
  groups.push_back(llvm::to_vector<2>(llvm::seq<int64_t>(0, extra + 1)));
  for (int64_t d = extra + 1; d < rank; ++d)
    groups.push_back({d});
  return tensor::ExpandShapeOp::create(
      rewriter, loc, RankedTensorType::get(shape, type.getElementType()), v,
      groups);
}

/// A dynamic causal offset `constant + coefficient * symbol` as an i64.
static Value buildDynamicOffset(RewriterBase &rewriter, Location loc,
                                const CausalOffset &causal) {
  Type i64 = rewriter.getI64Type();
  Type index = rewriter.getIndexType();
  Value offset;
  {
    Value symbol = causal.symbol;
    if (causal.symbolTensor) {
      SmallVector<Value> indices;
      for (int64_t i : causal.symbolIndices)
        indices.push_back(arith::ConstantIndexOp::create(rewriter, loc, i));
      symbol = tensor::ExtractOp::create(rewriter, loc, causal.symbolTensor,
                                         indices);
    }
    if (!symbol.getType().isIndex())
      symbol = arith::IndexCastOp::create(rewriter, loc, index, symbol);
    if (causal.coefficient != 1)
      symbol = arith::MulIOp::create(
          rewriter, loc, symbol,
          arith::ConstantIndexOp::create(rewriter, loc, causal.coefficient));
    if (causal.constant != 0)
      symbol = arith::AddIOp::create(
          rewriter, loc, symbol,
          arith::ConstantIndexOp::create(rewriter, loc, causal.constant));
    offset = arith::IndexCastOp::create(rewriter, loc, i64, symbol);
  }
  return offset;
}

/// The causal offset c (`j <= i + c`) as positions: q_offset and k_offset
/// tensors<Bxi64> with qp - kp = c, both non-negative (kvattn refuses a
/// negative position): c >= 0 is q_offset = c (no k_offset), c < 0 is
/// q_offset = 0, k_offset = -c; a dynamic c is q_offset = max(c, 0),
/// k_offset = max(-c, 0).
static std::pair<Value, Value> buildOffsets(RewriterBase &rewriter,
                                            Location loc,
                                            const CausalOffset &causal,
                                            Value query4) {
  Type i64 = rewriter.getI64Type();
  auto qType = cast<RankedTensorType>(query4.getType());
  SmallVector<Value> dynamic;
  if (qType.isDynamicDim(0))
    dynamic.push_back(tensor::DimOp::create(rewriter, loc, query4, 0));
  auto splat = [&](Value v) -> Value {
    return tensor::SplatOp::create(
        rewriter, loc, RankedTensorType::get({qType.getDimSize(0)}, i64), v,
        dynamic);
  };
  if (causal.isStatic()) {
    const int64_t c = causal.constant;
    Value q = arith::ConstantIntOp::create(rewriter, loc, i64,
                                           std::max<int64_t>(c, 0));
    if (c >= 0)
      return {splat(q), Value()};
    Value k = arith::ConstantIntOp::create(rewriter, loc, i64, -c);
    return {splat(q), splat(k)};
  }
  Value offset = buildDynamicOffset(rewriter, loc, causal);
  Value zero = arith::ConstantIntOp::create(rewriter, loc, i64, 0);
  Value q = arith::MaxSIOp::create(rewriter, loc, offset, zero);
  Value k = arith::MaxSIOp::create(
      rewriter, loc, arith::SubIOp::create(rewriter, loc, zero, offset), zero);
  return {splat(q), splat(k)};
}

Operation *raise::buildRaisedSdpa(RewriterBase &rewriter,
                                  const SdpaMatch &match) {
  Operation *root = match.root;
  Location loc = root->getLoc();
  rewriter.setInsertionPoint(root);
  auto resultType = cast<RankedTensorType>(root->getResult(0).getType());
  int64_t rank = resultType.getRank();

  Value query = match.query, key = match.key, value = match.value;
  if (match.queryTransposed)
    query = swapLastTwo(rewriter, loc, query);
  if (match.keyTransposed)
    key = swapLastTwo(rewriter, loc, key);
  if (match.valueTransposed)
    value = swapLastTwo(rewriter, loc, value);
  query = prependUnitDims(rewriter, loc, query, 4);
  key = prependUnitDims(rewriter, loc, key, 4);
  value = prependUnitDims(rewriter, loc, value, 4);
  // A constant ALiBi bias (slopes times the position distance, as HF's and
  // FlashAttention's ALiBi) becomes alibi_slopes with the positions it
  // implies; a causal part of its own, or one proven apart from it with the
  // same offset, stays causal.
  std::optional<AlibiBias> alibi;
  const int64_t rows = resultType.getDimSize(rank - 2);
  const int64_t cols = cast<RankedTensorType>(key.getType()).getDimSize(2);
  const int64_t heads = cast<RankedTensorType>(query.getType()).getDimSize(1);
  if (match.mask && !ShapedType::isDynamic(rows) &&
      !ShapedType::isDynamic(cols) && !ShapedType::isDynamic(heads))
    if (std::optional<DenseElementsAttr> values =
            evaluateConstantMask(match.mask))
      alibi = constantAlibi(*values, rows, cols);
  if (alibi && alibi->slopes.size() != 1 &&
      static_cast<int64_t>(alibi->slopes.size()) != heads)
    alibi.reset();
  if (alibi && match.causal &&
      !(match.causal->isStatic() && !alibi->causal &&
        match.causal->constant == alibi->offset))
    alibi.reset();
  Value mask = alibi ? Value() : match.mask;
  if (mask)
    mask = prependUnitDims(rewriter, loc, mask, 2);

  SmallVector<int64_t> outShape(4 - rank, 1);
  llvm::append_range(outShape, resultType.getShape());
  auto outType = RankedTensorType::get(outShape, resultType.getElementType());
  FloatAttr scale = rewriter.getF32FloatAttr(match.scale);

  // kvattn.sdpa says causal offsets 0 (upper-left) and S - L (lower-right)
  // when there is no other mask; everything else is a position.
  std::optional<CausalAlignment> alignment;
  if (match.causal && !mask && match.causal->isStatic()) {
    int64_t c = match.causal->constant;
    int64_t l = resultType.getDimSize(rank - 2);
    int64_t s = cast<RankedTensorType>(key.getType()).getDimSize(2);
    if (!ShapedType::isDynamic(l) && !ShapedType::isDynamic(s) && c == s - l)
      alignment = CausalAlignment::lower_right;
    else if (c == 0)
      alignment = CausalAlignment::upper_left;
  }

  Operation *raised;
  Value out;
  if (alibi) {
    CausalOffset positions;
    positions.constant = alibi->offset;
    auto [qOffset, kOffset] = buildOffsets(rewriter, loc, positions, query);
    SmallVector<float> slopes(alibi->slopes);
    if (slopes.size() == 1)
      slopes.assign(heads, slopes.front());
    auto slopesType = RankedTensorType::get({heads}, rewriter.getF32Type());
    Value slopesValue = arith::ConstantOp::create(
        rewriter, loc, slopesType,
        DenseElementsAttr::get(slopesType, ArrayRef<float>(slopes)));
    auto attention = AttentionOp::create(
        rewriter, loc, outType, /*lse=*/Type(), query, key, value, qOffset,
        kOffset, /*q_pos=*/Value(), /*k_pos=*/Value(),
        /*kv_len=*/Value(), /*key_valid=*/Value(), /*mask=*/Value(),
        /*block_table=*/Value(), /*q_start=*/Value(),
        /*sinks=*/Value(), slopesValue, /*k_rope_pos=*/Value(),
        /*k_start=*/Value(), /*cache_batch_idx=*/Value(),
        /*causal=*/alibi->causal || match.causal.has_value(),
        /*window=*/IntegerAttr(), /*softcap=*/FloatAttr(), scale,
        /*window_right=*/IntegerAttr(), /*tree_parents=*/Value(),
        /*rope=*/RopeAttr(), /*query_rotated=*/false, /*k_scale=*/Value(),
        /*v_scale=*/Value(), /*value_dim=*/IntegerAttr(),
        /*rotary_cos=*/Value(), /*rotary_sin=*/Value());
    raised = attention;
    out = attention.getOut();
  } else if (match.causal && !alignment) {
    auto [qOffset, kOffset] = buildOffsets(rewriter, loc, *match.causal, query);
    auto attention = AttentionOp::create(
        rewriter, loc, outType, /*lse=*/Type(), query, key, value, qOffset,
        kOffset, /*q_pos=*/Value(), /*k_pos=*/Value(),
        /*kv_len=*/Value(), /*key_valid=*/Value(), mask,
        /*block_table=*/Value(), /*q_start=*/Value(),
        /*sinks=*/Value(), /*alibi_slopes=*/Value(), /*k_rope_pos=*/Value(),
        /*k_start=*/Value(), /*cache_batch_idx=*/Value(), /*causal=*/true,
        /*window=*/IntegerAttr(), /*softcap=*/FloatAttr(), scale,
        /*window_right=*/IntegerAttr(), /*tree_parents=*/Value(),
        /*rope=*/RopeAttr(), /*query_rotated=*/false, /*k_scale=*/Value(),
        /*v_scale=*/Value(), /*value_dim=*/IntegerAttr(),
        /*rotary_cos=*/Value(), /*rotary_sin=*/Value());
    raised = attention;
    out = attention.getOut();
  } else {
    CausalAlignmentAttr causalAttr;
    if (alignment)
      causalAttr = CausalAlignmentAttr::get(rewriter.getContext(), *alignment);
    auto sdpa = SdpaOp::create(rewriter, loc, outType, /*lse=*/Type(), query,
                               key, value, mask, causalAttr,
                               /*window=*/IntegerAttr(),
                               /*softcap=*/FloatAttr(), scale);
    raised = sdpa;
    out = sdpa.getOut();
  }
  if (rank < 4) {
    SmallVector<ReassociationIndices> groups;
    groups.push_back(llvm::to_vector<2>(llvm::seq<int64_t>(0, 4 - rank + 1)));
    for (int64_t d = 4 - rank + 1; d < 4; ++d)
      groups.push_back({d});
    out =
        tensor::CollapseShapeOp::create(rewriter, loc, resultType, out, groups);
  }
  SmallVector<Value> oldOperands(root->getOperands());
  rewriter.replaceOp(root, out);
  eraseDeadProducers(rewriter, oldOperands);
  return raised;
}

//===----------------------------------------------------------------------===//
// Patterns and the pass
//===----------------------------------------------------------------------===//

namespace {

/// Tries both matchers on one root; raises it, remarks on a near miss, or
/// says nothing (not an SDPA).
LogicalResult raiseRoot(RewriterBase &rewriter, Operation *root, bool remarks) {
  SdpaMatch match;
  Refusal why;
  LogicalResult matched = failure();
  if (isa<linalg::LinalgOp>(root))
    matched = matchLinalgSdpa(root, match, why);
  else if (isa<tosa::MatMulOp>(root))
    matched = matchTosaSdpa(root, match, why);
  if (failed(matched)) {
    if (remarks && !why.reason.empty())
      remarkNotRaised(root, why);
    return failure();
  }
  buildRaisedSdpa(rewriter, match);
  return success();
}

struct RaiseLinalgSdpaPattern : OpInterfaceRewritePattern<linalg::LinalgOp> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;
  LogicalResult matchAndRewrite(linalg::LinalgOp op,
                                PatternRewriter &rewriter) const override {
    return raiseRoot(rewriter, op, /*remarks=*/false);
  }
};

struct RaiseTosaSdpaPattern : OpRewritePattern<tosa::MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tosa::MatMulOp op,
                                PatternRewriter &rewriter) const override {
    return raiseRoot(rewriter, op, /*remarks=*/false);
  }
};

struct RaiseSdpaPass : mlir::kvattn::impl::RaiseSdpaPassBase<RaiseSdpaPass> {
  using Base::Base;

  void runOnOperation() override {
    // A plain walk rather than a greedy driver: each root is tried exactly
    // once, so each remark is emitted exactly once. Roots are the last
    // contraction of a chain; the rewrite erases only ops that precede it.
    SmallVector<Operation *> roots;
    getOperation()->walk([&](Operation *op) {
      if ((isa<linalg::LinalgOp>(op) && op->getNumResults() == 1) ||
          isa<tosa::MatMulOp>(op))
        roots.push_back(op);
    });
    llvm::SmallPtrSet<Operation *, 16> erased;
    IRRewriter rewriter(&getContext());
    // Ops erased by an earlier rewrite are reported through the listener.
    struct Listener : RewriterBase::Listener {
      llvm::SmallPtrSet<Operation *, 16> *erased;
      void notifyOperationErased(Operation *op) override { erased->insert(op); }
    } listener;
    listener.erased = &erased;
    rewriter.setListener(&listener);
    for (Operation *root : roots) {
      if (erased.contains(root))
        continue;
      (void)raiseRoot(rewriter, root, remarks);
    }
  }
};

} // namespace

void mlir::kvattn::populateRaiseSdpaPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseLinalgSdpaPattern, RaiseTosaSdpaPattern>(
      patterns.getContext());
}
