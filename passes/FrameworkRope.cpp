//===- FrameworkRope.cpp - Recognise RoPE as frameworks write it ----------===//
//
// See FrameworkRope.h. The analysis reads the IR only; it never creates or
// changes an op.
//
//===----------------------------------------------------------------------===//

#include "passes/FrameworkRope.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kvattn;
using namespace mlir::kvattn::framework_rope;

namespace mlir {
namespace kvattn {
namespace framework_rope {

/// A scalar expression. Index expressions (the symbolic loop indices and
/// their affine combinations) are kept affine so that slices, concats and
/// reshapes can move them; everything else is a tree of ops over leaves
/// (an element of a tensor the analysis does not see through, or a scalar
/// from above).
struct Expr {
  enum Kind { Const, Index, Elem, Op } kind;
  /// Const: the value (integers are exact below 2^53) and its type.
  double value = 0;
  Type type;
  /// Index: an affine expression over d0..d3.
  AffineExpr index;
  /// Elem: the tensor (or scalar) read; its indices are `operands`.
  Value tensor;
  /// Op: the op's name; its operands are `operands`, its type `type`.
  StringRef name;
  SmallVector<ExprRef, 4> operands;
};

} // namespace framework_rope
} // namespace kvattn
} // namespace mlir

namespace {

ExprRef makeConst(double v, Type type) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Const;
  e->value = v;
  e->type = type;
  return e;
}

ExprRef makeIndex(AffineExpr index) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Index;
  e->index = simplifyAffineExpr(index, 4, 0);
  return e;
}

ExprRef makeElem(Value tensor, ArrayRef<ExprRef> indices) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Elem;
  e->tensor = tensor;
  e->operands.assign(indices.begin(), indices.end());
  return e;
}

bool isCommutative(StringRef name) {
  return name == "arith.addf" || name == "arith.mulf" || name == "arith.addi" ||
         name == "arith.muli" || name == "arith.maxsi" || name == "arith.minsi";
}

bool equal(const ExprRef &a, const ExprRef &b) {
  if (a == b)
    return true;
  if (!a || !b || a->kind != b->kind)
    return false;
  switch (a->kind) {
  case Expr::Const:
    return a->value == b->value && a->type == b->type;
  case Expr::Index:
    return a->index == b->index;
  case Expr::Elem:
  case Expr::Op: {
    if (a->tensor != b->tensor || a->name != b->name || a->type != b->type ||
        a->operands.size() != b->operands.size())
      return false;
    auto same = [&](bool swap) {
      for (size_t n = 0; n < a->operands.size(); ++n)
        if (!equal(a->operands[n],
                   b->operands[swap ? a->operands.size() - 1 - n : n]))
          return false;
      return true;
    };
    return same(false) || (a->kind == Expr::Op && isCommutative(a->name) &&
                           a->operands.size() == 2 && same(true));
  }
  }
  return false;
}

/// An op of arith or math (an unregistered op has no dialect).
bool isArithOrMath(Operation *op) {
  return isa_and_nonnull<arith::ArithDialect, math::MathDialect>(
      op->getDialect());
}

bool isOp(const ExprRef &e, StringRef name) {
  return e && e->kind == Expr::Op && e->name == name;
}

bool usesDim(const ExprRef &e, unsigned dim) {
  if (!e)
    return false;
  if (e->kind == Expr::Index)
    return e->index.isFunctionOfDim(dim);
  return llvm::any_of(e->operands,
                      [&](const ExprRef &o) { return usesDim(o, dim); });
}

/// e = sum(coef[d] * d) + constant, when e is such a form.
struct AffineLinear {
  int64_t coef[4] = {0, 0, 0, 0};
  int64_t constant = 0;
};
std::optional<AffineLinear> linearize(AffineExpr e) {
  AffineLinear l;
  if (auto c = dyn_cast<AffineConstantExpr>(e)) {
    l.constant = c.getValue();
    return l;
  }
  if (auto d = dyn_cast<AffineDimExpr>(e)) {
    if (d.getPosition() >= 4)
      return std::nullopt;
    l.coef[d.getPosition()] = 1;
    return l;
  }
  auto bin = dyn_cast<AffineBinaryOpExpr>(e);
  if (!bin)
    return std::nullopt;
  std::optional<AffineLinear> x = linearize(bin.getLHS()),
                              y = linearize(bin.getRHS());
  if (!x || !y)
    return std::nullopt;
  if (e.getKind() == AffineExprKind::Add) {
    for (int d = 0; d < 4; ++d)
      x->coef[d] += y->coef[d];
    x->constant += y->constant;
    return x;
  }
  if (e.getKind() == AffineExprKind::Mul) {
    bool xConst = llvm::all_of(x->coef, [](int64_t c) { return c == 0; });
    bool yConst = llvm::all_of(y->coef, [](int64_t c) { return c == 0; });
    if (!xConst && !yConst)
      return std::nullopt;
    AffineLinear &lin = xConst ? *y : *x;
    int64_t s = xConst ? x->constant : y->constant;
    for (int d = 0; d < 4; ++d)
      lin.coef[d] *= s;
    lin.constant *= s;
    return lin;
  }
  return std::nullopt;
}

/// Walks a tensor value back to a scalar expression of its element at
/// symbolic indices. Returns null where it cannot say.
class ElementReader {
public:
  ElementReader(MLIRContext *ctx, ArrayRef<int64_t> sizes) : ctx(ctx) {
    for (auto [d, s] : llvm::enumerate(sizes))
      this->sizes[d] = s;
  }

  /// Index d (0 for a dimension of size 1, so that every path that reaches
  /// it, a reshape dropping it included, says the same).
  ExprRef dim(unsigned d) {
    return makeIndex(sizes[d] == 1 ? getAffineConstantExpr(0, ctx)
                                   : getAffineDimExpr(d, ctx));
  }

  ExprRef at(Value v, ArrayRef<ExprRef> idx);

private:
  /// A linalg op being looked through: its loop indices.
  struct Body {
    linalg::LinalgOp op;
    SmallVector<ExprRef> loops;
  };

  ExprRef scalar(Value s, Body *body);
  ExprRef atLinalg(linalg::LinalgOp op, unsigned result, ArrayRef<ExprRef> idx);
  std::optional<SmallVector<ExprRef>> apply(AffineMap map,
                                            ArrayRef<ExprRef> loops);
  ExprRef makeOp(StringRef name, Type type, ArrayRef<ExprRef> operands);
  /// Inclusive bounds of an index expression.
  std::optional<std::pair<int64_t, int64_t>> bounds(const ExprRef &e);

  /// Expressions visited, at most: the analysis gives up on anything
  /// larger than a rotation (HF's takes about 150).
  static constexpr int kWorkLimit = 4096;

  MLIRContext *ctx;
  int64_t sizes[4] = {1, 1, 1, 1};
  int depth = 0;
};

std::optional<std::pair<int64_t, int64_t>>
ElementReader::bounds(const ExprRef &e) {
  if (!e || e->kind != Expr::Index)
    return std::nullopt;
  std::optional<AffineLinear> l = linearize(e->index);
  if (!l)
    return std::nullopt;
  int64_t lo = l->constant, hi = l->constant;
  for (int d = 0; d < 4; ++d) {
    int64_t span = l->coef[d] * (sizes[d] - 1);
    (span < 0 ? lo : hi) += span;
  }
  return std::make_pair(lo, hi);
}

ExprRef ElementReader::makeOp(StringRef name, Type type,
                              ArrayRef<ExprRef> operands) {
  if (llvm::any_of(operands, [](const ExprRef &o) { return !o; }))
    return nullptr;
  // Casts and sums of indices stay indices.
  if ((name == "arith.index_cast" || name == "arith.index_castui" ||
       name == "arith.extsi" || name == "arith.extui") &&
      operands[0]->kind == Expr::Index)
    return operands[0];
  if (name == "arith.addi" || name == "arith.subi" || name == "arith.muli") {
    auto asAffine = [&](const ExprRef &o) -> std::optional<AffineExpr> {
      if (o->kind == Expr::Index)
        return o->index;
      if (o->kind == Expr::Const)
        return getAffineConstantExpr(static_cast<int64_t>(o->value), ctx);
      return std::nullopt;
    };
    std::optional<AffineExpr> x = asAffine(operands[0]),
                              y = asAffine(operands[1]);
    if (x && y &&
        (operands[0]->kind == Expr::Index ||
         operands[1]->kind == Expr::Index)) {
      if (name == "arith.addi")
        return makeIndex(*x + *y);
      if (name == "arith.subi")
        return makeIndex(*x - *y);
      if (isa<AffineConstantExpr>(*x) || isa<AffineConstantExpr>(*y))
        return makeIndex(*x * *y);
    }
  }
  // 0 + x = x: the framework's sum of a one-term product (a size-1
  // contraction from a zero fill). Only +0.0: -0.0 + x differs for x = -0.
  if (name == "arith.addf")
    for (int n = 0; n < 2; ++n)
      if (operands[n]->kind == Expr::Const && operands[n]->value == 0 &&
          !std::signbit(operands[n]->value))
        return operands[1 - n];
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Op;
  e->name = name;
  e->type = type;
  e->operands.assign(operands.begin(), operands.end());
  return e;
}

std::optional<SmallVector<ExprRef>>
ElementReader::apply(AffineMap map, ArrayRef<ExprRef> loops) {
  SmallVector<ExprRef> out;
  for (AffineExpr r : map.getResults()) {
    if (auto d = dyn_cast<AffineDimExpr>(r)) {
      out.push_back(loops[d.getPosition()]);
      continue;
    }
    // An affine combination of loops: only of index-valued loops.
    SmallVector<AffineExpr> repl;
    for (auto [d, l] : llvm::enumerate(loops)) {
      if (r.isFunctionOfDim(d) && l->kind != Expr::Index)
        return std::nullopt;
      repl.push_back(l->kind == Expr::Index ? l->index
                                            : getAffineConstantExpr(0, ctx));
    }
    out.push_back(makeIndex(r.replaceDims(repl)));
  }
  return out;
}

ExprRef ElementReader::at(Value v, ArrayRef<ExprRef> idx) {
  if (++depth > kWorkLimit)
    return nullptr;
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return scalar(v, nullptr);
  if (llvm::any_of(idx, [](const ExprRef &e) { return !e; }))
    return nullptr;
  Operation *def = v.getDefiningOp();
  if (!def)
    return makeElem(v, idx);

  if (auto cst = dyn_cast<arith::ConstantOp>(def)) {
    if (auto splat = dyn_cast<SplatElementsAttr>(cst.getValue())) {
      Type elt = type.getElementType();
      if (isa<FloatType>(elt))
        return makeConst(splat.getSplatValue<APFloat>().convertToDouble(), elt);
      return makeConst(
          static_cast<double>(splat.getSplatValue<APInt>().getSExtValue()),
          elt);
    }
    return makeElem(v, idx);
  }
  if (auto op = dyn_cast<linalg::LinalgOp>(def))
    return atLinalg(op, cast<OpResult>(v).getResultNumber(), idx);

  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(def)) {
    if (!slice.hasUnitStride() &&
        !llvm::all_of(slice.getStaticStrides(),
                      [](int64_t s) { return !ShapedType::isDynamic(s); }))
      return nullptr;
    llvm::SmallBitVector dropped = slice.getDroppedDims();
    SmallVector<ExprRef> src;
    size_t next = 0;
    for (int64_t d = 0; d < slice.getSourceType().getRank(); ++d) {
      int64_t off = slice.getStaticOffsets()[d],
              stride = slice.getStaticStrides()[d];
      if (ShapedType::isDynamic(off))
        return nullptr;
      ExprRef i = dropped.test(d) ? makeIndex(getAffineConstantExpr(0, ctx))
                                  : idx[next++];
      if (off == 0 && stride == 1) {
        src.push_back(i);
        continue;
      }
      if (i->kind != Expr::Index)
        return nullptr;
      src.push_back(makeIndex(i->index * stride + off));
    }
    return at(slice.getSource(), src);
  }

  if (auto concat = dyn_cast<tensor::ConcatOp>(def)) {
    int64_t d = concat.getDim();
    std::optional<std::pair<int64_t, int64_t>> range = bounds(idx[d]);
    if (!range)
      return nullptr;
    int64_t start = 0;
    for (Value input : concat.getInputs()) {
      int64_t n = cast<RankedTensorType>(input.getType()).getDimSize(d);
      if (ShapedType::isDynamic(n))
        return nullptr;
      if (range->first >= start && range->second < start + n) {
        SmallVector<ExprRef> src(idx.begin(), idx.end());
        src[d] = makeIndex(idx[d]->index - start);
        return at(input, src);
      }
      start += n;
    }
    return nullptr;
  }

  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
    // Each group of result dims is one source dim: its index is the
    // row-major linearisation (static sizes).
    SmallVector<ExprRef> src;
    for (const ReassociationIndices &group : expand.getReassociationIndices()) {
      AffineExpr lin = getAffineConstantExpr(0, ctx);
      ExprRef single;
      int nonUnit = 0;
      for (int64_t r : group) {
        int64_t size = type.getDimSize(r);
        if (ShapedType::isDynamic(size) && group.size() > 1)
          return nullptr;
        if (size != 1) {
          ++nonUnit;
          single = idx[r];
        }
      }
      if (group.size() == 1) {
        src.push_back(idx[group[0]]);
        continue;
      }
      if (nonUnit <= 1) {
        src.push_back(single ? single
                             : makeIndex(getAffineConstantExpr(0, ctx)));
        continue;
      }
      for (int64_t r : group) {
        if (idx[r]->kind != Expr::Index)
          return nullptr;
        lin = lin * type.getDimSize(r) + idx[r]->index;
      }
      src.push_back(makeIndex(lin));
    }
    return at(expand.getSrc(), src);
  }

  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
    // Each result dim is a group of source dims: split its index (one
    // non-unit dim, or the [n, m] of a stack then flatten with the index
    // m * k + c, 0 <= c < m).
    RankedTensorType srcType = collapse.getSrcType();
    SmallVector<ExprRef> src(srcType.getRank());
    for (auto [r, group] :
         llvm::enumerate(collapse.getReassociationIndices())) {
      if (group.size() == 1) {
        src[group[0]] = idx[r];
        continue;
      }
      SmallVector<int64_t> nonUnit;
      for (int64_t s : group) {
        src[s] = makeIndex(getAffineConstantExpr(0, ctx));
        if (srcType.getDimSize(s) != 1)
          nonUnit.push_back(s);
      }
      if (nonUnit.size() == 1) {
        src[nonUnit[0]] = idx[r];
        continue;
      }
      if (nonUnit.empty())
        continue;
      if (nonUnit.size() != 2 || idx[r]->kind != Expr::Index)
        return nullptr;
      int64_t m = srcType.getDimSize(nonUnit[1]);
      std::optional<AffineLinear> l = linearize(idx[r]->index);
      if (ShapedType::isDynamic(m) || !l || l->constant < 0 ||
          l->constant >= m ||
          llvm::any_of(l->coef, [&](int64_t c) { return c % m != 0; }))
        return nullptr;
      AffineExpr outer = getAffineConstantExpr(0, ctx);
      for (int d = 0; d < 4; ++d)
        outer = outer + getAffineDimExpr(d, ctx) * (l->coef[d] / m);
      src[nonUnit[0]] = makeIndex(outer);
      src[nonUnit[1]] = makeIndex(getAffineConstantExpr(l->constant, ctx));
    }
    return at(collapse.getSrc(), src);
  }

  if (auto splat = dyn_cast<tensor::SplatOp>(def))
    return scalar(splat.getInput(), nullptr);

  // Elementwise arith / math on tensors.
  if (def->getNumResults() == 1 && def->hasTrait<OpTrait::Elementwise>() &&
      isArithOrMath(def)) {
    SmallVector<ExprRef> operands;
    for (Value o : def->getOperands())
      operands.push_back(at(o, idx));
    return makeOp(def->getName().getStringRef(), type.getElementType(),
                  operands);
  }
  return makeElem(v, idx);
}

ExprRef ElementReader::atLinalg(linalg::LinalgOp op, unsigned result,
                                ArrayRef<ExprRef> idx) {
  if (!op.hasPureTensorSemantics() || !op.getBlock())
    return nullptr;
  AffineMap outMap = op.getMatchingIndexingMap(op.getDpsInitOperand(result));
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  Body body{op, SmallVector<ExprRef>(op.getNumLoops())};
  for (auto [r, e] : llvm::enumerate(outMap.getResults())) {
    auto d = dyn_cast<AffineDimExpr>(e);
    if (!d || body.loops[d.getPosition()])
      return nullptr;
    body.loops[d.getPosition()] = idx[r];
  }
  // Loops the result does not index: only size-1 reductions (a one-term
  // sum, e.g. the outer product inv_freq x positions as a matmul).
  for (auto [d, l] : llvm::enumerate(body.loops)) {
    if (l)
      continue;
    if (iterators[d] != utils::IteratorType::reduction || ranges[d] != 1)
      return nullptr;
    l = makeIndex(getAffineConstantExpr(0, ctx));
  }
  auto yield = cast<linalg::YieldOp>(op.getBlock()->getTerminator());
  return scalar(yield.getOperand(result), &body);
}

ExprRef ElementReader::scalar(Value s, Body *body) {
  if (++depth > kWorkLimit)
    return nullptr;
  if (auto arg = dyn_cast<BlockArgument>(s)) {
    if (body && arg.getOwner() == body->op.getBlock()) {
      OpOperand &operand = body->op->getOpOperand(arg.getArgNumber());
      Value t = operand.get();
      if (!isa<RankedTensorType>(t.getType()))
        return scalar(t, nullptr);
      std::optional<SmallVector<ExprRef>> ids =
          apply(body->op.getMatchingIndexingMap(&operand), body->loops);
      if (!ids)
        return nullptr;
      return at(t, *ids);
    }
    return makeElem(s, {});
  }
  Operation *def = s.getDefiningOp();
  bool inBody = body && def->getBlock() == body->op.getBlock();
  if (auto index = dyn_cast<linalg::IndexOp>(def)) {
    if (!inBody)
      return nullptr;
    return body->loops[index.getDim()];
  }
  if (auto extract = dyn_cast<tensor::ExtractOp>(def)) {
    SmallVector<ExprRef> ids;
    for (Value i : extract.getIndices())
      ids.push_back(scalar(i, inBody ? body : nullptr));
    return at(extract.getTensor(), ids);
  }
  if (auto cst = dyn_cast<arith::ConstantOp>(def)) {
    if (auto f = dyn_cast<FloatAttr>(cst.getValue()))
      return makeConst(f.getValueAsDouble(), f.getType());
    if (auto i = dyn_cast<IntegerAttr>(cst.getValue())) {
      if (i.getType().isIndex())
        return makeIndex(getAffineConstantExpr(i.getInt(), ctx));
      return makeConst(static_cast<double>(i.getInt()), i.getType());
    }
    return nullptr;
  }
  if (def->getNumResults() == 1 && isArithOrMath(def)) {
    SmallVector<ExprRef> operands;
    for (Value o : def->getOperands())
      operands.push_back(scalar(o, inBody ? body : nullptr));
    return makeOp(def->getName().getStringRef(), s.getType(), operands);
  }
  if (inBody)
    return nullptr;
  return makeElem(s, {});
}

//===----------------------------------------------------------------------===//
// Concrete values, linear forms
//===----------------------------------------------------------------------===//

std::optional<int64_t> concreteIndex(AffineExpr e, ArrayRef<int64_t> dims) {
  std::optional<AffineLinear> l = linearize(e);
  if (!l)
    return std::nullopt;
  int64_t v = l->constant;
  for (int d = 0; d < 4; ++d)
    v += l->coef[d] * dims[d];
  return v;
}

/// The value of `e` at concrete indices, when it depends on constants only.
std::optional<double> concrete(const ExprRef &e, ArrayRef<int64_t> dims) {
  switch (e->kind) {
  case Expr::Const:
    return e->value;
  case Expr::Index:
    if (std::optional<int64_t> v = concreteIndex(e->index, dims))
      return static_cast<double>(*v);
    return std::nullopt;
  case Expr::Elem: {
    DenseElementsAttr attr;
    if (!matchPattern(e->tensor, m_Constant(&attr)))
      return std::nullopt;
    auto type = cast<ShapedType>(attr.getType());
    SmallVector<uint64_t> ids;
    for (auto [d, o] : llvm::enumerate(e->operands)) {
      std::optional<double> v = concrete(o, dims);
      if (!v || *v < 0 || *v >= type.getDimSize(d))
        return std::nullopt;
      ids.push_back(static_cast<uint64_t>(*v));
    }
    if (isa<FloatType>(type.getElementType()))
      return attr.getValues<APFloat>()[ids].convertToDouble();
    return static_cast<double>(attr.getValues<APInt>()[ids].getSExtValue());
  }
  case Expr::Op: {
    SmallVector<double> v;
    for (const ExprRef &o : e->operands) {
      std::optional<double> x = concrete(o, dims);
      if (!x)
        return std::nullopt;
      v.push_back(*x);
    }
    StringRef n = e->name;
    if (n == "arith.index_cast" || n == "arith.extsi" ||
        n == "arith.index_castui" || n == "arith.extui")
      return v[0];
    if (n == "arith.addi")
      return v[0] + v[1];
    if (n == "arith.subi")
      return v[0] - v[1];
    if (n == "arith.muli")
      return v[0] * v[1];
    if (n == "arith.maxsi")
      return std::max(v[0], v[1]);
    if (n == "arith.minsi")
      return std::min(v[0], v[1]);
    return std::nullopt;
  }
  }
  return std::nullopt;
}

/// sum(coef * term) + constant over integer expressions; casts that keep
/// the value (index_cast, extsi) are transparent.
struct LinearForm {
  SmallVector<std::pair<ExprRef, int64_t>> terms;
  int64_t constant = 0;

  void add(const ExprRef &term, int64_t coef) {
    for (auto &[t, c] : terms)
      if (equal(t, term)) {
        c += coef;
        return;
      }
    terms.push_back({term, coef});
  }
  void add(const LinearForm &other, int64_t scale) {
    for (const auto &[t, c] : other.terms)
      add(t, c * scale);
    constant += other.constant * scale;
  }
  bool isConstant() const {
    return llvm::all_of(terms, [](const auto &t) { return t.second == 0; });
  }
};

LinearForm linearForm(MLIRContext *ctx, const ExprRef &e) {
  LinearForm f;
  if (e->kind == Expr::Const) {
    f.constant = static_cast<int64_t>(e->value);
    return f;
  }
  if (e->kind == Expr::Index) {
    if (std::optional<AffineLinear> l = linearize(e->index)) {
      for (unsigned d = 0; d < 4; ++d)
        if (l->coef[d])
          f.add(makeIndex(getAffineDimExpr(d, ctx)), l->coef[d]);
      f.constant = l->constant;
      return f;
    }
  }
  if (e->kind == Expr::Op) {
    StringRef n = e->name;
    if (n == "arith.index_cast" || n == "arith.extsi" ||
        n == "arith.index_castui" || n == "arith.extui")
      return linearForm(ctx, e->operands[0]);
    if (n == "arith.addi" || n == "arith.subi") {
      f.add(linearForm(ctx, e->operands[0]), 1);
      f.add(linearForm(ctx, e->operands[1]), n == "arith.addi" ? 1 : -1);
      return f;
    }
    if (n == "arith.muli") {
      LinearForm x = linearForm(ctx, e->operands[0]),
                 y = linearForm(ctx, e->operands[1]);
      if (x.isConstant() || y.isConstant()) {
        f.add(x.isConstant() ? y : x, x.isConstant() ? x.constant : y.constant);
        return f;
      }
    }
  }
  f.add(e, 1);
  return f;
}

MLIRContext *contextOf(const ExprRef &e) {
  if (!e)
    return nullptr;
  if (e->kind == Expr::Index)
    return e->index.getContext();
  if (e->tensor)
    return e->tensor.getContext();
  if (e->type)
    return e->type.getContext();
  for (const ExprRef &o : e->operands)
    if (MLIRContext *ctx = contextOf(o))
      return ctx;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// The RoPE formula
//===----------------------------------------------------------------------===//

/// What the matcher needs to know about one rotation candidate.
struct Candidate {
  RankedTensorType type;
  bool narrow = false; // f16/bf16: extf in, truncf out
  Value input;
};

/// e is x[d0, d1, d2, pos] (or extf of it for a 16-bit x).
bool isInput(Candidate &c, ExprRef e, const ExprRef &pos, ElementReader &ev) {
  if (c.narrow) {
    if (!isOp(e, "arith.extf") || !e->type.isF32())
      return false;
    e = e->operands[0];
  }
  if (!e || e->kind != Expr::Elem || e->operands.size() != 4)
    return false;
  if (e->tensor.getType() != c.type)
    return false;
  // A unit dimension's index may have become the constant 0.
  for (unsigned d = 0; d < 3; ++d)
    if (!equal(e->operands[d], ev.dim(d)) &&
        !(c.type.getDimSize(d) == 1 &&
          equal(e->operands[d],
                makeIndex(getAffineConstantExpr(0, c.type.getContext())))))
      return false;
  if (!equal(e->operands[3], pos))
    return false;
  if (c.input && c.input != e->tensor)
    return false;
  c.input = e->tensor;
  return true;
}

/// e = x[.., pos] * coef (either order): returns coef.
ExprRef splitProduct(Candidate &c, const ExprRef &e, const ExprRef &pos,
                     ElementReader &ev) {
  if (!isOp(e, "arith.mulf") || !e->type.isF32())
    return nullptr;
  for (int n = 0; n < 2; ++n)
    if (isInput(c, e->operands[n], pos, ev))
      return e->operands[1 - n];
  return nullptr;
}

/// e = x[.., pos] * coef with x negated (either the product or the input).
ExprRef splitNegatedProduct(Candidate &c, const ExprRef &e, const ExprRef &pos,
                            ElementReader &ev) {
  if (isOp(e, "arith.negf"))
    return splitProduct(c, e->operands[0], pos, ev);
  if (!isOp(e, "arith.mulf") || !e->type.isF32())
    return nullptr;
  for (int n = 0; n < 2; ++n)
    if (isOp(e->operands[n], "arith.negf") &&
        isInput(c, e->operands[n]->operands[0], pos, ev))
      return e->operands[1 - n];
  return nullptr;
}

bool isF32Valued(const ExprRef &e) {
  if (e->kind == Expr::Elem)
    return getElementTypeOrSelf(e->tensor.getType()).isF32();
  return e->type && e->type.isF32();
}

/// Theta from inv_freq[k] (f32 constants), when #kvattn.rope's
/// f32(theta^(-2k/R)) gives exactly these values.
std::optional<double> recoverTheta(MLIRContext *ctx, ArrayRef<double> invFreq,
                                   int64_t rotaryDim, bool interleaved) {
  SmallVector<double> candidates;
  if (invFreq.size() == 1) {
    candidates.push_back(10000.0); // one pair: inv_freq = 1 for every theta
  } else {
    double t = std::pow(invFreq[1], -static_cast<double>(rotaryDim) / 2);
    candidates = {std::round(t), t};
  }
  for (double theta : candidates) {
    if (!(theta > 1) || !std::isfinite(theta))
      continue;
    auto rope = RopeAttr::get(ctx, rotaryDim,
                              FloatAttr::get(Float64Type::get(ctx), theta),
                              interleaved, false);
    bool same = true;
    for (auto [k, v] : llvm::enumerate(invFreq))
      same &= rope.getInvFreq(k) == static_cast<float>(v) &&
              static_cast<double>(static_cast<float>(v)) == v;
    if (same)
      return theta;
  }
  return std::nullopt;
}

std::optional<RopeMatch> matchWith(Value rotated, int64_t rotaryDim,
                                   bool interleaved) {
  MLIRContext *ctx = rotated.getContext();
  Candidate c;
  c.type = cast<RankedTensorType>(rotated.getType());
  c.narrow = !c.type.getElementType().isF32();
  const int64_t half = rotaryDim / 2, d = c.type.getDimSize(3);
  ElementReader ev(ctx, {c.type.getDimSize(0), c.type.getDimSize(1),
                         c.type.getDimSize(2), half});
  AffineExpr k = ev.dim(3)->index;
  ExprRef first = makeIndex(interleaved ? k * 2 : k);
  ExprRef second = makeIndex(interleaved ? k * 2 + 1 : k + half);
  ExprRef e1 = ev.at(rotated, {ev.dim(0), ev.dim(1), ev.dim(2), first});
  ExprRef e2 = ev.at(rotated, {ev.dim(0), ev.dim(1), ev.dim(2), second});
  if (!e1 || !e2)
    return std::nullopt;
  if (c.narrow) {
    for (ExprRef *e : {&e1, &e2}) {
      if (!isOp(*e, "arith.truncf") || (*e)->type != c.type.getElementType())
        return std::nullopt;
      *e = (*e)->operands[0];
    }
  }

  // First member: x1 * c - x2 * s, as x1 * c + (-x2) * s or a subtraction.
  ExprRef cos1, sin1;
  if (isOp(e1, "arith.addf") && e1->type.isF32()) {
    for (int n = 0; n < 2 && !cos1; ++n) {
      Candidate saved = c;
      cos1 = splitProduct(c, e1->operands[n], first, ev);
      if (cos1)
        sin1 = splitNegatedProduct(c, e1->operands[1 - n], second, ev);
      if (!sin1) {
        cos1 = nullptr;
        c = saved;
      }
    }
  } else if (isOp(e1, "arith.subf") && e1->type.isF32()) {
    cos1 = splitProduct(c, e1->operands[0], first, ev);
    if (cos1)
      sin1 = splitProduct(c, e1->operands[1], second, ev);
  }
  if (!cos1 || !sin1)
    return std::nullopt;
  // Second member: x2 * c + x1 * s.
  ExprRef cos2, sin2;
  if (!isOp(e2, "arith.addf") || !e2->type.isF32())
    return std::nullopt;
  for (int n = 0; n < 2 && !cos2; ++n) {
    cos2 = splitProduct(c, e2->operands[n], second, ev);
    if (cos2)
      sin2 = splitProduct(c, e2->operands[1 - n], first, ev);
    if (!sin2)
      cos2 = nullptr;
  }
  if (!cos2 || !equal(cos1, cos2) || !equal(sin1, sin2))
    return std::nullopt;
  // cos and sin are per (batch, row, pair), in f32.
  for (const ExprRef &e : {cos1, sin1})
    if (usesDim(e, 1) || !isF32Valued(e))
      return std::nullopt;

  // Partial rotary: the rest passes through.
  if (rotaryDim < d) {
    ElementReader rest(ctx, {c.type.getDimSize(0), c.type.getDimSize(1),
                             c.type.getDimSize(2), d - rotaryDim});
    ExprRef pos = makeIndex(rest.dim(3)->index + rotaryDim);
    ExprRef e3 = rest.at(rotated, {rest.dim(0), rest.dim(1), rest.dim(2), pos});
    if (c.narrow && isOp(e3, "arith.truncf") &&
        isOp(e3->operands[0], "arith.extf"))
      e3 = e3->operands[0]->operands[0];
    Candidate plain = c;
    plain.narrow = false;
    if (!e3 || !isInput(plain, e3, pos, rest))
      return std::nullopt;
  }

  RopeMatch m;
  m.input = c.input;
  // Theta: cos(f32(pos) * inv_freq[k]), sin of the same angle.
  if (isOp(cos1, "math.cos") && isOp(sin1, "math.sin") &&
      equal(cos1->operands[0], sin1->operands[0])) {
    ExprRef angle = cos1->operands[0];
    if (!isOp(angle, "arith.mulf") || !angle->type.isF32())
      return std::nullopt;
    for (int n = 0; n < 2 && !m.position; ++n) {
      ExprRef p = angle->operands[n], f = angle->operands[1 - n];
      if (!isOp(p, "arith.sitofp") && !isOp(p, "arith.uitofp"))
        continue;
      if (usesDim(f, 0) || usesDim(f, 1) || usesDim(f, 2))
        continue;
      SmallVector<double> invFreq;
      for (int64_t j = 0; j < half; ++j) {
        std::optional<double> v = concrete(f, {0, 0, 0, j});
        if (!v)
          break;
        invFreq.push_back(*v);
      }
      if (static_cast<int64_t>(invFreq.size()) != half || !isF32Valued(f))
        continue;
      std::optional<double> theta =
          recoverTheta(ctx, invFreq, rotaryDim, interleaved);
      if (theta) {
        m.rope = RopeAttr::get(ctx, rotaryDim,
                               FloatAttr::get(Float64Type::get(ctx), *theta),
                               interleaved, false);
      } else {
        // No theta says these constants: tables of the same angles.
        m.rope = RopeAttr::get(ctx, rotaryDim, FloatAttr(), interleaved, false);
        for (double v : invFreq)
          m.invFreq.push_back(static_cast<float>(v));
      }
      m.position = p->operands[0];
    }
  } else {
    // Tables: rotary_cos[pos, k], rotary_sin[pos, k] ([P, R/2]), widened
    // to f32 where 16-bit.
    auto table = [&](ExprRef e) -> ExprRef {
      if (isOp(e, "arith.extf"))
        e = e->operands[0];
      if (e->kind != Expr::Elem || e->operands.size() != 2 ||
          !equal(e->operands[1], ev.dim(3)))
        return nullptr;
      auto type = dyn_cast<RankedTensorType>(e->tensor.getType());
      if (!type || !type.hasStaticShape() || type.getDimSize(1) != half ||
          !isa<Float32Type, Float16Type, BFloat16Type>(type.getElementType()))
        return nullptr;
      return e;
    };
    ExprRef tc = table(cos1), ts = table(sin1);
    if (!tc || !ts || !equal(tc->operands[0], ts->operands[0]) ||
        tc->tensor.getType() != ts->tensor.getType())
      return std::nullopt;
    m.rope = RopeAttr::get(ctx, rotaryDim, FloatAttr(), interleaved, false);
    m.cos = tc->tensor;
    m.sin = ts->tensor;
    m.position = tc->operands[0];
  }
  if (!m.position || usesDim(m.position, 1) || usesDim(m.position, 3))
    return std::nullopt;
  return m;
}

} // namespace

std::optional<RopeMatch> framework_rope::matchRope(Value rotated) {
  auto type = dyn_cast<RankedTensorType>(rotated.getType());
  if (!type || type.getRank() != 4 || !type.hasStaticShape() ||
      !isa<Float32Type, Float16Type, BFloat16Type>(type.getElementType()))
    return std::nullopt;
  int64_t rotaryDim = type.getDimSize(3);
  // Partial rotary: concat(rope(x[..., :R]), x[..., R:]), possibly under
  // elementwise casts (a 16-bit x: truncf of the f32 rotation).
  Value v = rotated;
  while (auto op = v.getDefiningOp<linalg::LinalgOp>()) {
    if (op.getNumDpsInputs() != 1 || op->getNumResults() != 1 ||
        !op.getMatchingIndexingMap(op.getDpsInputOperand(0)).isIdentity())
      break;
    v = op.getDpsInputOperand(0)->get();
  }
  if (auto concat = v.getDefiningOp<tensor::ConcatOp>();
      concat && concat.getDim() == 3 && concat.getInputs().size() == 2)
    rotaryDim =
        cast<RankedTensorType>(concat.getInputs()[0].getType()).getDimSize(3);
  if (rotaryDim < 2 || rotaryDim % 2)
    return std::nullopt;
  for (bool interleaved : {false, true})
    if (std::optional<RopeMatch> m = matchWith(rotated, rotaryDim, interleaved))
      return m;
  return std::nullopt;
}

ExprRef framework_rope::offsetPosition(MLIRContext *ctx, Value offset,
                                       int64_t batch, int64_t rows) {
  ElementReader ev(ctx, {batch, 1, rows, 1});
  if (!offset)
    return ev.dim(2);
  ExprRef o = ev.at(offset, {ev.dim(0)});
  if (!o)
    return nullptr;
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Op;
  e->name = "arith.addi";
  e->type = getElementTypeOrSelf(offset.getType());
  e->operands = {o, ev.dim(2)};
  return e;
}

PositionComparison framework_rope::comparePositions(const ExprRef &lhs,
                                                    const ExprRef &rhs,
                                                    int64_t batch,
                                                    int64_t rows) {
  PositionComparison result;
  MLIRContext *ctx = contextOf(lhs) ? contextOf(lhs) : contextOf(rhs);
  if (!lhs || !rhs || !ctx)
    return result;
  LinearForm diff = linearForm(ctx, lhs);
  diff.add(linearForm(ctx, rhs), -1);
  if (diff.isConstant()) {
    if (diff.constant == 0) {
      result.kind = PositionComparison::Equal;
      return result;
    }
    result.kind = PositionComparison::Different;
    result.difference = diff.constant;
  }
  // Constants at every (b, i): compare the values.
  if (ShapedType::isDynamic(batch) || ShapedType::isDynamic(rows) ||
      batch * rows > (1 << 16))
    return result;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i) {
      std::optional<double> x = concrete(lhs, {b, 0, i, 0}),
                            y = concrete(rhs, {b, 0, i, 0});
      if (!x || !y)
        return result;
      if (*x != *y) {
        result.kind = PositionComparison::Different;
        result.batch = b;
        result.row = i;
        result.lhs = static_cast<int64_t>(*x);
        result.rhs = static_cast<int64_t>(*y);
        return result;
      }
    }
  result.kind = PositionComparison::Equal;
  return result;
}

std::pair<Value, Value> framework_rope::makeTables(OpBuilder &b, Location loc,
                                                   ArrayRef<float> invFreq,
                                                   int64_t rows) {
  const int64_t half = invFreq.size();
  SmallVector<float> cos, sin;
  cos.reserve(rows * half);
  sin.reserve(rows * half);
  for (int64_t p = 0; p < rows; ++p)
    for (float f : invFreq) {
      const float angle = static_cast<float>(p) * f;
      cos.push_back(static_cast<float>(std::cos(static_cast<double>(angle))));
      sin.push_back(static_cast<float>(std::sin(static_cast<double>(angle))));
    }
  auto type = RankedTensorType::get({rows, half}, b.getF32Type());
  auto make = [&](ArrayRef<float> values) {
    return arith::ConstantOp::create(b, loc,
                                     DenseElementsAttr::get(type, values))
        .getResult();
  };
  return {make(cos), make(sin)};
}
