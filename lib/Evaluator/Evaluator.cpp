//===- Evaluator.cpp - evaluate kvattn IR with the reference --------------===//

#include "kvattn/Evaluator/Evaluator.h"

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Reference/Fp8KvCache.h"
#include "kvattn/Reference/Reference.h"
#include "kvattn/Support/Float16.h"
#include "kvattn/Support/TensorCheck.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <memory>

using namespace mlir;

namespace mlir {
namespace kvattn {

std::optional<ElementType> toElementType(Type type) {
  if (type.isF32())
    return ElementType::F32;
  if (type.isF16())
    return ElementType::F16;
  if (type.isBF16())
    return ElementType::BF16;
  if (isa<Float8E4M3FNType>(type))
    return ElementType::F8E4M3FN;
  if (isa<Float8E5M2Type>(type))
    return ElementType::F8E5M2;
  if (type.isF64())
    return ElementType::F64;
  if (type.isInteger(1))
    return ElementType::I1;
  if (type.isInteger(32))
    return ElementType::I32;
  if (type.isInteger(64) || type.isIndex())
    return ElementType::I64;
  return std::nullopt;
}

namespace {

/// A check-only run's kvattn.append (which writes nothing: its cache is
/// the caller's memory on every compiled path's validation): the rows it
/// would write, over the cache before it.
struct PendingAppend {
  reference::AppendedRows rows;
  HostTensor pos;
  bool paged = false;
  HostTensor blockTable; ///< paged
  bool skipPadding = false;
};

/// A value during evaluation: a tensor (scalars are rank-0 tensors) and,
/// for the result of kvattn.append, the logical number of keys per batch.
struct RtValue {
  HostTensor tensor;
  std::vector<int64_t> logicalLength; // empty: every slot is a key
  /// Set: `tensor` is a view of the cache before this append, which
  /// tensor() materialises for any reader but a check-only attention
  /// (which reads the rows over the cache in place).
  std::shared_ptr<const PendingAppend> pending;
};

/// "file:line:col" when the op has a file location, else the printed loc.
std::string locationOf(Operation *op) {
  if (auto file = op->getLoc()->findInstanceOf<FileLineColLoc>())
    return file.getFilename().str() + ":" + std::to_string(file.getLine()) +
           ":" + std::to_string(file.getColumn());
  std::string s;
  llvm::raw_string_ostream os(s);
  op->getLoc().print(os);
  return s;
}

class Interpreter {
public:
  explicit Interpreter(const AttentionExecutor *executor = nullptr,
                       reference::Compute compute = reference::Compute::Values)
      : executor(executor), compute(compute) {}

  Status run(func::FuncOp func, const std::vector<HostTensor> &arguments,
             std::vector<HostTensor> &results);

private:
  Status eval(Operation *op);
  Status fail(Operation *op, const std::string &message) {
    return Status::error(locationOf(op) + ": '" +
                         op->getName().getStringRef().str() + "': " + message);
  }

  /// The value as it is, a pending append not materialised.
  const RtValue &get(Value v) { return values.find(v)->second; }
  /// The value's tensor, a pending append written into a copy first.
  const HostTensor &tensor(Value v) {
    RtValue &value = values.find(v)->second;
    if (value.pending)
      materialize(value);
    return value.tensor;
  }
  const HostTensor *optional(Value v) { return v ? &tensor(v) : nullptr; }
  int64_t scalar(Value v) { return tensor(v).getInt(0); }
  void materialize(RtValue &value) {
    const PendingAppend &p = *value.pending;
    HostTensor written;
    // The checks passed when the append was evaluated: these cannot fail
    // (and if they did, no value could stand for the written cache).
    Status s =
        p.paged ? reference::appendPaged(value.tensor, p.rows.rows, p.pos,
                                         p.blockTable, written, p.skipPadding)
                : reference::append(value.tensor, p.rows.rows, p.pos, written);
    if (s.isError())
      llvm::report_fatal_error(
          llvm::Twine("kvattn: a pending append failed its own checks: ") +
          s.message());
    value.tensor = std::move(written);
    value.pending.reset();
  }
  /// `type`'s shape with its dynamic sizes (in order) taken from `dynamic`.
  std::vector<int64_t> runTimeShape(ShapedType type, ValueRange dynamic) {
    std::vector<int64_t> shape;
    auto dyn = dynamic.begin();
    for (int64_t d : type.getShape())
      shape.push_back(ShapedType::isDynamic(d) ? scalar(*dyn++) : d);
    return shape;
  }
  void set(Value v, HostTensor t, std::vector<int64_t> logical = {}) {
    values[v] = RtValue{std::move(t), std::move(logical)};
  }

  /// Resolves static/dynamic offsets, sizes or strides.
  std::vector<int64_t> mixed(ArrayRef<OpFoldResult> values) {
    std::vector<int64_t> out;
    for (OpFoldResult ofr : values) {
      if (auto attr = dyn_cast<Attribute>(ofr))
        out.push_back(cast<IntegerAttr>(attr).getInt());
      else
        out.push_back(scalar(cast<Value>(ofr)));
    }
    return out;
  }

  /// Converts an f64 reference result to the result type of `v`.
  Status setRounded(Operation *op, Value v, const HostTensor &f64) {
    auto type = cast<RankedTensorType>(v.getType());
    std::optional<ElementType> elt = toElementType(type.getElementType());
    if (!elt)
      return fail(op, "unsupported result element type");
    HostTensor rounded;
    KVATTN_RETURN_IF_ERROR(f64.convertTo(*elt, rounded));
    set(v, std::move(rounded));
    return Status::ok();
  }

  Status evalAttention(mlir::kvattn::AttentionOp op);
  Status evalSdpa(mlir::kvattn::SdpaOp op);
  Status evalAppend(mlir::kvattn::AppendOp op);
  Status evalConstant(arith::ConstantOp op);
  Status evalBinary(Operation *op);
  Status evalInsertSlice(tensor::InsertSliceOp op);
  Status evalExtractSlice(tensor::ExtractSliceOp op);
  Status evalConcat(tensor::ConcatOp op);
  Status evalLinalg(linalg::LinalgOp op);
  Status evalForall(scf::ForallOp op);
  Status evalAffineMap(Operation *op, AffineMap map, ValueRange operands,
                       int kind);

  llvm::DenseMap<Value, RtValue> values;
  const AttentionExecutor *executor;
  reference::Compute compute;
};

} // namespace

/// The reference's description of a #kvattn.rope, with the op's tables
/// (rotary_cos / rotary_sin; null without).
static reference::Rope toReferenceRope(mlir::kvattn::RopeAttr rope,
                                       const HostTensor *cos,
                                       const HostTensor *sin) {
  reference::Rope r;
  r.rotaryDim = rope.getRotaryDim();
  if (std::optional<double> theta = rope.getThetaValue())
    r.theta = *theta;
  r.cos = cos;
  r.sin = sin;
  r.interleaved = rope.getInterleaved();
  r.f32Query = rope.getF32Query();
  return r;
}

Status Interpreter::run(func::FuncOp func,
                        const std::vector<HostTensor> &arguments,
                        std::vector<HostTensor> &results) {
  if (func.isExternal())
    return Status::error("function '" + func.getName().str() + "' has no body");
  Block &entry = func.getBody().front();
  if (arguments.size() != entry.getNumArguments())
    return Status::error("function '" + func.getName().str() + "' takes " +
                         std::to_string(entry.getNumArguments()) +
                         " arguments, " + std::to_string(arguments.size()) +
                         " given");
  // The caller's tensors must have the argument types: the ops below index
  // them by those types' shapes.
  KVATTN_RETURN_IF_ERROR(checkArguments(func, arguments));
  for (auto [arg, value] : llvm::zip(entry.getArguments(), arguments))
    set(arg, value);
  if (!func.getBody().hasOneBlock())
    return Status::error("function '" + func.getName().str() +
                         "' has control flow; the evaluator runs one block");
  for (Operation &op : entry) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      results.clear();
      // (A check-only run's results are not values: a cache an append
      // writes stays the cache before it, not copied to be written.)
      for (Value v : ret.getOperands())
        results.push_back(compute == reference::Compute::ChecksOnly
                              ? get(v).tensor
                              : tensor(v));
      return Status::ok();
    }
    KVATTN_RETURN_IF_ERROR(eval(&op));
  }
  return Status::error("function '" + func.getName().str() +
                       "' has no func.return");
}

Status Interpreter::eval(Operation *op) {
  return llvm::TypeSwitch<Operation *, Status>(op)
      .Case([&](mlir::kvattn::AttentionOp o) { return evalAttention(o); })
      .Case([&](mlir::kvattn::SdpaOp o) { return evalSdpa(o); })
      .Case([&](mlir::kvattn::AppendOp o) { return evalAppend(o); })
      .Case([&](mlir::kvattn::MergeOp o) {
        reference::AttentionResult r;
        Status s = reference::merge(tensor(o.getOutParts()),
                                    tensor(o.getLseParts()), r);
        if (s.isError())
          return fail(o, s.message());
        KVATTN_RETURN_IF_ERROR(setRounded(o, o.getOut(), r.out));
        return setRounded(o, o.getLse(), r.lse);
      })
      .Case([&](mlir::kvattn::CascadeOp o) {
        // An executor (a GPU) runs it whole: kvattn-to-ptx's prefix,
        // suffix and merge kernels.
        if (executor) {
          std::vector<const HostTensor *> operands;
          for (Value v : o->getOperands())
            operands.push_back(&tensor(v));
          std::vector<HostTensor> results;
          if (Status s = (*executor)(o, operands, results); s.isError())
            return fail(o, s.message());
          for (auto [value, result] : llvm::zip(o->getResults(), results))
            set(value, std::move(result));
          return Status::ok();
        }
        // The definition (plain attention over prefix + suffix); compiled
        // targets run -kvattn-expand-cascade's attentions and merge instead.
        reference::CascadeOperands ops;
        ops.query = &tensor(o.getQuery());
        ops.prefixKey = &tensor(o.getPrefixKey());
        ops.prefixValue = &tensor(o.getPrefixValue());
        ops.key = &tensor(o.getKey());
        ops.value = &tensor(o.getValue());
        ops.qStart = &tensor(o.getQStart());
        ops.qOffset = &tensor(o.getQOffset());
        ops.kvLen = &tensor(o.getKvLen());
        if (Value pages = o.getPrefixPages())
          ops.prefixPages = &tensor(pages);
        if (Value len = o.getPrefixLen())
          ops.prefixLen = &tensor(len);
        if (Value table = o.getBlockTable())
          ops.blockTable = &tensor(table);
        reference::AttentionAttributes attrs;
        attrs.causal = o.getCausal();
        if (std::optional<APFloat> cap = o.getSoftcap())
          attrs.softcap = cap->convertToDouble();
        if (std::optional<APFloat> scale = o.getScale())
          attrs.scale = scale->convertToDouble();
        reference::AttentionResult r;
        if (Status s = reference::cascade(ops, attrs, r, compute); s.isError())
          return fail(o, s.message());
        KVATTN_RETURN_IF_ERROR(setRounded(o, o.getOut(), r.out));
        if (Value lse = o.getLse())
          return setRounded(o, lse, r.lse);
        return Status::ok();
      })
      .Case([&](arith::ExtFOp o) {
        // A 16-bit tensor widened to f32 (exact).
        HostTensor converted;
        KVATTN_RETURN_IF_ERROR(
            tensor(o.getIn()).convertTo(ElementType::F32, converted));
        set(o.getResult(), std::move(converted));
        return Status::ok();
      })
      .Case([&](arith::ConstantOp o) { return evalConstant(o); })
      .Case<arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::MaxSIOp,
            arith::MinSIOp>([&](Operation *o) { return evalBinary(o); })
      .Case([&](arith::IndexCastOp o) {
        std::optional<ElementType> elt =
            toElementType(getElementTypeOrSelf(o.getType()));
        HostTensor converted;
        KVATTN_RETURN_IF_ERROR(tensor(o.getIn()).convertTo(*elt, converted));
        set(o.getResult(), std::move(converted));
        return Status::ok();
      })
      .Case([&](tensor::DimOp o) {
        const HostTensor &t = tensor(o.getSource());
        int64_t d = scalar(o.getIndex());
        if (d < 0 || d >= t.rank())
          return fail(o, "dimension " + std::to_string(d) + " out of range");
        HostTensor s(ElementType::I64, {});
        s.setInt(0, t.dim(d));
        set(o.getResult(), std::move(s));
        return Status::ok();
      })
      .Case([&](tensor::SplatOp o) {
        auto type = o.getType();
        std::vector<int64_t> shape = runTimeShape(type, o.getDynamicSizes());
        HostTensor t(*toElementType(type.getElementType()), shape);
        const HostTensor &s = tensor(o.getInput());
        for (int64_t i = 0; i < t.numElements(); ++i) {
          if (isFloatType(t.elementType()))
            t.setDouble(i, s.getDouble(0));
          else
            t.setInt(i, s.getInt(0));
        }
        set(o.getResult(), std::move(t));
        return Status::ok();
      })
      .Case([&](tensor::EmptyOp o) {
        auto type = o.getType();
        std::vector<int64_t> shape = runTimeShape(type, o.getDynamicSizes());
        HostTensor t;
        KVATTN_RETURN_IF_ERROR(
            HostTensor::make(*toElementType(type.getElementType()), shape, t)
                .withContext("tensor.empty"));
        set(o.getResult(), std::move(t));
        return Status::ok();
      })
      .Case([&](tensor::CastOp o) {
        set(o.getResult(), tensor(o.getSource()),
            get(o.getSource()).logicalLength);
        return Status::ok();
      })
      .Case([&](tensor::CollapseShapeOp o) {
        const HostTensor &src = tensor(o.getSrc());
        std::vector<int64_t> shape;
        for (const ReassociationIndices &group : o.getReassociationIndices()) {
          int64_t n = 1;
          for (int64_t d : group)
            n *= src.dim(d);
          shape.push_back(n);
        }
        HostTensor t(src.elementType(), shape);
        std::copy_n(src.data(), src.byteSize(), t.mutableData());
        set(o.getResult(), std::move(t));
        return Status::ok();
      })
      .Case([&](tensor::ExpandShapeOp o) {
        const HostTensor &src = tensor(o.getSrc());
        std::vector<int64_t> shape = mixed(o.getMixedOutputShape());
        HostTensor t(src.elementType(), shape);
        if (t.numElements() != src.numElements())
          return fail(o, "output shape does not match the source size");
        std::copy_n(src.data(), src.byteSize(), t.mutableData());
        set(o.getResult(), std::move(t));
        return Status::ok();
      })
      .Case([&](tensor::InsertSliceOp o) { return evalInsertSlice(o); })
      .Case([&](tensor::ExtractSliceOp o) { return evalExtractSlice(o); })
      .Case([&](tensor::ConcatOp o) { return evalConcat(o); })
      // Tiled programs (TilingInterface + scf.forall, e.g. from
      // transform.structured.tile_using_forall): loops over tiles and the
      // index arithmetic of their offsets.
      .Case([&](scf::ForallOp o) { return evalForall(o); })
      .Case([&](affine::AffineApplyOp o) {
        return evalAffineMap(o, o.getAffineMap(), o.getMapOperands(), 0);
      })
      .Case([&](affine::AffineMinOp o) {
        return evalAffineMap(o, o.getAffineMap(), o.getMapOperands(), -1);
      })
      .Case([&](affine::AffineMaxOp o) {
        return evalAffineMap(o, o.getAffineMap(), o.getMapOperands(), 1);
      })
      .Case([&](tensor::ExtractOp o) {
        // A scalar of a tensor (a cache position read by raised SDPA).
        const HostTensor &src = tensor(o.getTensor());
        std::vector<int64_t> index;
        for (auto [d, v] : llvm::enumerate(o.getIndices())) {
          int64_t i = scalar(v);
          if (i < 0 || i >= src.dim(d))
            return fail(o, "index " + std::to_string(i) + " out of range");
          index.push_back(i);
        }
        HostTensor t(src.elementType(), {});
        int64_t flat = src.flatIndex(index);
        if (isFloatType(t.elementType()))
          t.setDouble(0, src.getDouble(flat));
        else
          t.setInt(0, src.getInt(flat));
        set(o.getResult(), std::move(t));
        return Status::ok();
      })
      .Case([&](linalg::TransposeOp o) {
        // result[i] = input[i permuted back]: result dim d is input dim
        // perm[d].
        if (o->getNumResults() != 1)
          return fail(o, "linalg.transpose on buffers is not supported");
        const HostTensor &src = tensor(o.getInput());
        ArrayRef<int64_t> perm = o.getPermutation();
        std::vector<int64_t> shape;
        for (int64_t p : perm)
          shape.push_back(src.dim(p));
        HostTensor t(src.elementType(), shape);
        std::vector<int64_t> out(shape.size(), 0), in(shape.size(), 0);
        for (int64_t flat = 0; flat < t.numElements(); ++flat) {
          int64_t rest = flat;
          for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0;
               --d) {
            out[d] = rest % shape[d];
            rest /= shape[d];
          }
          for (size_t d = 0; d < perm.size(); ++d)
            in[perm[d]] = out[d];
          int64_t from = src.flatIndex(in);
          if (isFloatType(t.elementType()))
            t.setDouble(flat, src.getDouble(from));
          else
            t.setInt(flat, src.getInt(from));
        }
        set(o->getResult(0), std::move(t));
        return Status::ok();
      })
      // Elementwise and contraction ops on tensors as front ends emit them
      // (RoPE, position arithmetic): each loop point, the body in scalars.
      .Case([&](linalg::LinalgOp o) { return evalLinalg(o); })
      .Default([&](Operation *o) {
        return fail(o, "not supported by the reference evaluator");
      });
}

namespace {
/// A scalar of a linalg body: a float (any float type, rounded to it) or an
/// integer (i1 .. i64, index).
struct Scalar {
  double f = 0;
  int64_t i = 0;
};

/// `v` rounded to the float type `type`.
double roundTo(Type type, double v) {
  if (type.isF32())
    return static_cast<double>(static_cast<float>(v));
  if (type.isF16())
    return static_cast<double>(roundToHalf(static_cast<float>(v)));
  if (type.isBF16())
    return static_cast<double>(roundToBFloat16(static_cast<float>(v)));
  return v;
}

/// `v` wrapped to the integer type `type` (sign-extended).
int64_t wrapTo(Type type, int64_t v) {
  unsigned width = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  if (width >= 64)
    return v;
  uint64_t mask = (uint64_t{1} << width) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (width > 1 && (u >> (width - 1)))
    u |= ~mask;
  return static_cast<int64_t>(u);
}
} // namespace

Status Interpreter::evalLinalg(linalg::LinalgOp op) {
  if (!op.hasPureTensorSemantics())
    return fail(op, "linalg ops on buffers are not supported");
  // Loop ranges from the operands' run-time shapes.
  SmallVector<int64_t> shapes;
  for (OpOperand &operand : op->getOpOperands())
    if (isa<RankedTensorType>(operand.get().getType())) {
      const HostTensor &t = tensor(operand.get());
      for (int64_t d = 0; d < t.rank(); ++d)
        shapes.push_back(t.dim(d));
    } else {
      // A scalar input has no dimensions in the shapes map.
    }
  AffineMap shapesToLoops = op.getShapesToLoopsMap();
  if (!shapesToLoops)
    return fail(op, "its loop ranges do not follow from its operands");
  SmallVector<int64_t> ranges = shapesToLoops.compose(shapes);
  std::vector<HostTensor> outs;
  for (OpOperand &init : op.getDpsInitsMutable())
    // (A copy: writing it, a view of an argument's memory too, writes its
    // own bytes: HostTensor::mutableData.)
    outs.push_back(tensor(init.get()));

  Block *body = op.getBlock();
  llvm::DenseMap<Value, Scalar> scalars;
  SmallVector<int64_t> point(ranges.size(), 0);
  int64_t total = 1;
  for (int64_t r : ranges)
    total *= r;
  auto indexOf = [&](OpOperand &operand, const HostTensor &t) {
    SmallVector<int64_t> at =
        op.getMatchingIndexingMap(&operand).compose(point);
    return t.flatIndex(std::vector<int64_t>(at.begin(), at.end()));
  };
  auto read = [&](const HostTensor &t, int64_t flat, Type type) {
    Scalar v;
    if (isa<FloatType>(type))
      v.f = t.getDouble(flat);
    else
      v.i = t.getInt(flat);
    return v;
  };
  for (int64_t n = 0; n < total; ++n) {
    int64_t rest = n;
    for (int64_t d = static_cast<int64_t>(ranges.size()) - 1; d >= 0; --d) {
      point[d] = rest % ranges[d];
      rest /= ranges[d];
    }
    scalars.clear();
    for (OpOperand &operand : op->getOpOperands()) {
      BlockArgument arg = body->getArgument(operand.getOperandNumber());
      Value v = operand.get();
      if (!isa<RankedTensorType>(v.getType())) {
        scalars[arg] = read(tensor(v), 0, arg.getType());
        continue;
      }
      bool isInit = op.isDpsInit(&operand);
      const HostTensor &t =
          isInit ? outs[operand.getOperandNumber() - op.getNumDpsInputs()]
                 : tensor(v);
      scalars[arg] = read(t, indexOf(operand, t), arg.getType());
    }
    for (Operation &inner : body->without_terminator()) {
      auto in = [&](unsigned k) { return scalars[inner.getOperand(k)]; };
      Type type =
          inner.getNumResults() == 1 ? inner.getResult(0).getType() : Type();
      Scalar r;
      bool ok = true;
      llvm::TypeSwitch<Operation *>(&inner)
          .Case([&](linalg::IndexOp o) { r.i = point[o.getDim()]; })
          .Case([&](arith::ConstantOp o) {
            if (auto f = dyn_cast<FloatAttr>(o.getValue()))
              r.f = f.getValueAsDouble();
            else if (auto i = dyn_cast<IntegerAttr>(o.getValue()))
              r.i = i.getType().isInteger(1) ? i.getValue().getZExtValue()
                                             : i.getInt();
            else
              ok = false;
          })
          .Case([&](arith::AddFOp) { r.f = in(0).f + in(1).f; })
          .Case([&](arith::SubFOp) { r.f = in(0).f - in(1).f; })
          .Case([&](arith::MulFOp) { r.f = in(0).f * in(1).f; })
          .Case([&](arith::DivFOp) { r.f = in(0).f / in(1).f; })
          .Case([&](arith::NegFOp) { r.f = -in(0).f; })
          .Case([&](arith::MaxNumFOp) { r.f = std::fmax(in(0).f, in(1).f); })
          .Case([&](arith::MinNumFOp) { r.f = std::fmin(in(0).f, in(1).f); })
          .Case([&](arith::ExtFOp) { r.f = in(0).f; })
          .Case([&](arith::TruncFOp) { r.f = in(0).f; })
          .Case([&](arith::SIToFPOp) { r.f = static_cast<double>(in(0).i); })
          .Case([&](arith::UIToFPOp o) {
            unsigned w = o.getIn().getType().getIntOrFloatBitWidth();
            uint64_t u = static_cast<uint64_t>(in(0).i);
            if (w < 64)
              u &= (uint64_t{1} << w) - 1;
            r.f = static_cast<double>(u);
          })
          .Case([&](arith::AddIOp) { r.i = in(0).i + in(1).i; })
          .Case([&](arith::SubIOp) { r.i = in(0).i - in(1).i; })
          .Case([&](arith::MulIOp) { r.i = in(0).i * in(1).i; })
          .Case([&](arith::MaxSIOp) { r.i = std::max(in(0).i, in(1).i); })
          .Case([&](arith::MinSIOp) { r.i = std::min(in(0).i, in(1).i); })
          .Case<arith::IndexCastOp, arith::ExtSIOp, arith::TruncIOp>(
              [&](Operation *) { r.i = in(0).i; })
          .Case([&](arith::SelectOp) { r = (in(0).i & 1) ? in(1) : in(2); })
          // Transcendentals in double, rounded to the type: what the
          // reference's RoPE computes (f32(cos(f64(angle)))).
          .Case([&](math::CosOp) { r.f = std::cos(in(0).f); })
          .Case([&](math::SinOp) { r.f = std::sin(in(0).f); })
          .Case([&](math::ExpOp) { r.f = std::exp(in(0).f); })
          .Case([&](tensor::ExtractOp o) {
            const HostTensor &t = tensor(o.getTensor());
            std::vector<int64_t> at;
            for (auto [d, v] : llvm::enumerate(o.getIndices())) {
              int64_t i = scalars[v].i;
              if (i < 0 || i >= t.dim(d))
                ok = false;
              at.push_back(i);
            }
            if (ok)
              r = read(t, t.flatIndex(at), type);
          })
          .Default([&](Operation *) { ok = false; });
      if (!ok)
        return fail(op, "its body's '" + inner.getName().getStringRef().str() +
                            "' is not supported by the reference evaluator "
                            "(or reads out of bounds)");
      if (type && isa<FloatType>(type))
        r.f = roundTo(type, r.f);
      else if (type && type.isIntOrIndex())
        r.i = wrapTo(type, r.i);
      scalars[inner.getResult(0)] = r;
    }
    auto yield = cast<linalg::YieldOp>(body->getTerminator());
    for (auto [k, v] : llvm::enumerate(yield.getValues())) {
      HostTensor &out = outs[k];
      int64_t flat = indexOf(*op.getDpsInitOperand(k), out);
      if (isa<FloatType>(v.getType()))
        out.setDouble(flat, scalars[v].f);
      else
        out.setInt(flat, scalars[v].i);
    }
  }
  for (auto [result, out] : llvm::zip(op->getResults(), outs))
    set(result, std::move(out));
  return Status::ok();
}

Status Interpreter::evalAttention(mlir::kvattn::AttentionOp op) {
  if (executor) {
    std::vector<const HostTensor *> operands;
    for (Value v : op->getOperands())
      operands.push_back(&tensor(v));
    std::vector<HostTensor> results;
    if (Status s = (*executor)(op, operands, results); s.isError())
      return fail(op, s.message());
    for (auto [value, result] : llvm::zip(op->getResults(), results))
      set(value, std::move(result));
    return Status::ok();
  }
  reference::AttentionOperands ops;
  ops.query = &tensor(op.getQuery());
  // A check-only run (a compiled path's validation, every call) reads the
  // caches in place — an FP8 cache's codes with their scales, the latent
  // form's V as the key's first columns, the rows an append of the same
  // call writes beside the cache — unless key rows gather them (k_start,
  // cache_batch_idx: the rows' scales would have to be gathered too);
  // computing takes copies (dequantised, V's columns, the written cache).
  const bool inPlace = compute == reference::Compute::ChecksOnly &&
                       !op.getKStart() && !op.getCacheBatchIdx();
  // A cache in place, with the rows of a pending append over it.
  auto cacheOf =
      [&](Value v,
          reference::AttentionOperands::Appended &rows) -> const HostTensor * {
    // (Pages the append wrote through another table than the attention
    // reads: the written copy.)
    auto append = v.getDefiningOp<mlir::kvattn::AppendOp>();
    if (!inPlace || (append && append.getBlockTable() != op.getBlockTable()))
      return &tensor(v);
    const RtValue &value = get(v);
    if (const PendingAppend *p = value.pending.get()) {
      // (An FP8 cache's rows dequantised, as attention reads them.)
      rows.rows = p->rows.values.rank() ? &p->rows.values : &p->rows.rows;
      rows.pos = &p->pos;
    }
    return &value.tensor;
  };
  ops.key = cacheOf(op.getKey(), ops.keyAppended);
  // The latent form (value_dim): V is the key's first value_dim columns,
  // taken here so that every layout below (pages, key rows) gathers it as
  // it gathers the key.
  HostTensor latentValue;
  if (std::optional<int64_t> dv = op.getValueDim(); dv && inPlace) {
    ops.value = nullptr;
    ops.latentValueDim = *dv;
  } else if (dv) {
    if (Status s = reference::latentValue(*ops.key, *dv, latentValue);
        s.isError())
      return fail(op, s.message());
    ops.value = &latentValue;
  } else {
    ops.value = cacheOf(op.getValue(), ops.valueAppended);
  }
  // An FP8 cache: the attention reads f32(code) * scale
  // (kvattn/Reference/Fp8KvCache.h), whatever the layout.
  HostTensor dequantKey, dequantValue;
  if (op.getKScale() || op.getVScale()) {
    const int headDim = static_cast<int>(op.getKeyHeadDim());
    // The latent form's V is the key's first columns: k_scale's codes.
    const bool latent = op.getValueDim().has_value();
    const HostTensor &keyScale = tensor(op.getKScale());
    const HostTensor &valueScale =
        tensor(latent ? op.getKScale() : op.getVScale());
    const char *valueScaleName = latent ? "k_scale" : "v_scale";
    if (inPlace) {
      // (The latent form's V, read in place, is the key's columns: its
      // scale's check is the key's.)
      reference::KvScaleGranularity g;
      for (auto [cache, name, scale] :
           {std::tuple{ops.key, "k_scale", &keyScale},
            std::tuple{ops.value, valueScaleName, &valueScale}})
        if (cache)
          if (Status s = reference::checkKvCacheScale(*cache, headDim, name,
                                                      *scale, g);
              s.isError())
            return fail(op, s.message());
      ops.keyScale = &keyScale;
      ops.valueScale = &valueScale;
    } else {
      if (Status s = reference::dequantizeKvCache(*ops.key, headDim, "k_scale",
                                                  keyScale, dequantKey);
          s.isError())
        return fail(op, s.message());
      if (Status s = reference::dequantizeKvCache(
              *ops.value, headDim, valueScaleName, valueScale, dequantValue);
          s.isError())
        return fail(op, s.message());
      ops.key = &dequantKey;
      ops.value = &dequantValue;
    }
  }
  // Paged K/V: validate the block table and gather the logical caches; a
  // check-only run reads the pages in place (no O(cache) copy per call).
  HostTensor logicalKey, logicalValue;
  if (Value table = op.getBlockTable();
      table && compute == reference::Compute::ChecksOnly) {
    ops.blockTable = &tensor(table);
  } else if (table) {
    const HostTensor &kvLen = tensor(op.getKvLen());
    for (auto [pages, logical] :
         {std::pair{ops.key, &logicalKey}, std::pair{ops.value, &logicalValue}})
      if (Status s =
              reference::gatherPages(*pages, tensor(table), kvLen, *logical);
          s.isError())
        return fail(op, s.message());
    ops.key = &logicalKey;
    ops.value = &logicalValue;
  }
  ops.qOffset = optional(op.getQOffset());
  ops.kOffset = optional(op.getKOffset());
  ops.qPos = optional(op.getQPos());
  ops.kPos = optional(op.getKPos());
  ops.kvLen = optional(op.getKvLen());
  // Ragged keys or a batch-to-cache map: validate them and gather each
  // batch's logical cache (with k_start, also its effective lengths).
  HostTensor keyRowsLen;
  if (op.getKStart() || op.getCacheBatchIdx()) {
    reference::KeyRowsOperands rowsOps;
    rowsOps.kStart = optional(op.getKStart());
    rowsOps.cacheBatchIdx = optional(op.getCacheBatchIdx());
    rowsOps.kvLen = ops.kvLen;
    const int64_t batch =
        op.getQStart() ? tensor(op.getQStart()).dim(0) - 1 : ops.query->dim(0);
    for (auto [cache, logical] :
         {std::pair{ops.key, &logicalKey}, std::pair{ops.value, &logicalValue}})
      if (Status s = reference::gatherKeyRows(*cache, rowsOps, batch, *logical,
                                              keyRowsLen);
          s.isError())
        return fail(op, s.message());
    ops.key = &logicalKey;
    ops.value = &logicalValue;
    if (op.getKStart())
      ops.kvLen = &keyRowsLen;
  }
  ops.keyValid = optional(op.getKeyValid());
  ops.mask = optional(op.getMask());
  ops.qStart = optional(op.getQStart());
  ops.sinks = optional(op.getSinks());
  ops.alibiSlopes = optional(op.getAlibiSlopes());
  ops.kRopePos = optional(op.getKRopePos());
  ops.treeParents = optional(op.getTreeParents());
  reference::AttentionAttributes attrs;
  if (mlir::kvattn::RopeAttr rope = op.getRopeAttr())
    attrs.rope = toReferenceRope(rope, optional(op.getRotaryCos()),
                                 optional(op.getRotarySin()));
  attrs.queryRotated = op.getQueryRotated();
  attrs.causal = op.getCausal();
  attrs.window = op.getWindow();
  attrs.windowRight = op.getWindowRight();
  if (std::optional<APFloat> cap = op.getSoftcap())
    attrs.softcap = cap->convertToDouble();
  if (std::optional<APFloat> scale = op.getScale())
    attrs.scale = scale->convertToDouble();
  reference::AttentionResult result;
  Status s = reference::attention(ops, attrs, result, compute);
  if (s.isError())
    return fail(op, s.message());
  KVATTN_RETURN_IF_ERROR(setRounded(op, op.getOut(), result.out));
  if (Value lse = op.getLse())
    KVATTN_RETURN_IF_ERROR(setRounded(op, lse, result.lse));
  return Status::ok();
}

Status Interpreter::evalSdpa(mlir::kvattn::SdpaOp op) {
  for (Value kv : {op.getKey(), op.getValue()})
    if (auto append = kv.getDefiningOp<mlir::kvattn::AppendOp>();
        append && append.getBlockTable())
      return fail(op, "kvattn.sdpa reads a paged cache (a kvattn.append with "
                      "block_table); it has no paged form: use "
                      "kvattn.attention with block_table");
  reference::SdpaOperands ops;
  ops.query = &tensor(op.getQuery());
  ops.key = &tensor(op.getKey());
  ops.value = &tensor(op.getValue());
  ops.mask = optional(op.getMask());
  // Keys written by kvattn.append: the slots past the write are no keys
  // (kvattn.append's contract); the SDPA sees the logical cache.
  HostTensor logical;
  const std::vector<int64_t> &len = get(op.getKey()).logicalLength;
  if (!len.empty()) {
    logical = HostTensor(ElementType::I64, {static_cast<int64_t>(len.size())});
    for (size_t b = 0; b < len.size(); ++b)
      logical.setInt(b, len[b]);
    ops.kvLen = &logical;
  }
  reference::SdpaAttributes attrs;
  if (std::optional<mlir::kvattn::CausalAlignment> causal = op.getCausal())
    attrs.causal = *causal == mlir::kvattn::CausalAlignment::upper_left
                       ? reference::CausalAlignment::UpperLeft
                       : reference::CausalAlignment::LowerRight;
  attrs.window = op.getWindow();
  if (std::optional<APFloat> softcap = op.getSoftcap())
    attrs.softcap = softcap->convertToDouble();
  if (std::optional<APFloat> scale = op.getScale())
    attrs.scale = scale->convertToDouble();
  HostTensor out, lse;
  Status s =
      reference::sdpa(ops, attrs, out, compute, op.getLse() ? &lse : nullptr);
  if (s.isError())
    return fail(op, s.message());
  KVATTN_RETURN_IF_ERROR(setRounded(op, op.getOut(), out));
  if (Value lseValue = op.getLse())
    KVATTN_RETURN_IF_ERROR(setRounded(op, lseValue, lse));
  return Status::ok();
}

Status Interpreter::evalAppend(mlir::kvattn::AppendOp op) {
  HostTensor result;
  const HostTensor &pos = tensor(op.getPos());
  const HostTensor &update = tensor(op.getUpdate());
  if (executor) {
    // The cache write runs where attention does (its run-time values were
    // validated before: validateFunction, and the runtime before a launch).
    std::vector<const HostTensor *> operands;
    for (Value v : op->getOperands())
      operands.push_back(&tensor(v));
    std::vector<HostTensor> results;
    if (Status s = (*executor)(op, operands, results); s.isError())
      return fail(op, s.message());
    std::vector<int64_t> logical;
    if (!op.isPaged())
      for (int64_t b = 0; b < pos.numElements(); ++b)
        logical.push_back(pos.getInt(b) + update.dim(2));
    // With RoPE and a record: the record, written in place too.
    if (Value recordValue = op.getRopePosResult())
      set(recordValue, std::move(results[1]));
    set(op.getResult(), std::move(results[0]), std::move(logical));
    return Status::ok();
  }
  // A check-only run writes nothing (the cache is the caller's memory on a
  // compiled path): the rows the append writes are kept beside the cache.
  auto pending = std::make_shared<PendingAppend>();
  reference::AppendedRows *checkOnly =
      compute == reference::Compute::ChecksOnly ? &pending->rows : nullptr;
  // The result: the written copy, or the cache with the pending rows.
  auto setResult = [&](HostTensor written, std::vector<int64_t> logical) {
    if (!checkOnly) {
      set(op.getResult(), std::move(written), std::move(logical));
      return Status::ok();
    }
    const HostTensor &cache = tensor(op.getCache());
    HostTensor before;
    KVATTN_RETURN_IF_ERROR(HostTensor::view(cache.elementType(), cache.shape(),
                                            cache.data(), before));
    pending->pos = pos;
    if (Value table = op.getBlockTable()) {
      pending->paged = true;
      pending->blockTable = tensor(table);
    }
    pending->skipPadding = op.getSkipPadding();
    set(op.getResult(), std::move(before), std::move(logical));
    values.find(op.getResult())->second.pending = std::move(pending);
    return Status::ok();
  };
  if (Value scale = op.getKvScale()) {
    // An FP8 cache: the update (rotated first with rope) quantised with the
    // scales of the rows it is written to.
    std::optional<reference::Rope> rope;
    if (mlir::kvattn::RopeAttr attr = op.getRopeAttr())
      rope = toReferenceRope(attr, optional(op.getRotaryCos()),
                             optional(op.getRotarySin()));
    HostTensor record;
    Status s = reference::appendQuantized(
        tensor(op.getCache()), update, pos, optional(op.getBlockTable()),
        tensor(scale), rope ? &*rope : nullptr, optional(op.getRopePos()),
        result, op.getRopePos() ? &record : nullptr, op.getSkipPadding(),
        checkOnly);
    if (s.isError())
      return fail(op, s.message());
    if (Value recordValue = op.getRopePosResult())
      set(recordValue, std::move(record));
    std::vector<int64_t> logical;
    if (!op.isPaged())
      for (int64_t b = 0; b < pos.numElements(); ++b)
        logical.push_back(pos.getInt(b) + update.dim(2));
    return setResult(std::move(result), std::move(logical));
  }
  if (Value table = op.getBlockTable()) {
    // Paged: the pages have no per-sequence length of their own (attention
    // reads them through the table and kv_len), so no logical length.
    // RoPE: the update rotated at pos[b] + t first, cast to the cache's
    // type (as -kvattn-lower-append and the GPU's append kernel do; this
    // path used to write the keys unrotated).
    HostTensor rotated;
    const HostTensor *written = &update;
    if (mlir::kvattn::RopeAttr rope = op.getRopeAttr()) {
      const HostTensor &cache = tensor(op.getCache());
      if (Status s = reference::rotate(
              update,
              toReferenceRope(rope, optional(op.getRotaryCos()),
                              optional(op.getRotarySin())),
              [&](int64_t b, int64_t t) { return pos.getInt(b) + t; },
              cache.elementType(), rotated);
          s.isError())
        return fail(op, s.message());
      written = &rotated;
    }
    Status s = reference::appendPaged(tensor(op.getCache()), *written, pos,
                                      tensor(table), result,
                                      op.getSkipPadding(), checkOnly);
    if (s.isError())
      return fail(op, s.message());
    return setResult(std::move(result), {});
  }
  if (mlir::kvattn::RopeAttr rope = op.getRopeAttr()) {
    HostTensor record;
    Status s = reference::appendRotated(
        tensor(op.getCache()), update, pos,
        toReferenceRope(rope, optional(op.getRotaryCos()),
                        optional(op.getRotarySin())),
        optional(op.getRopePos()), result, op.getRopePos() ? &record : nullptr,
        checkOnly);
    if (s.isError())
      return fail(op, s.message());
    if (Value recordValue = op.getRopePosResult())
      set(recordValue, std::move(record));
  } else if (Status s = reference::append(tensor(op.getCache()), update, pos,
                                          result, checkOnly);
             s.isError())
    return fail(op, s.message());
  std::vector<int64_t> logical;
  for (int64_t b = 0; b < pos.numElements(); ++b)
    logical.push_back(pos.getInt(b) + update.dim(2));
  return setResult(std::move(result), std::move(logical));
}

Status Interpreter::evalConstant(arith::ConstantOp op) {
  Type type = op.getType();
  std::optional<ElementType> elt = toElementType(getElementTypeOrSelf(type));
  if (!elt)
    return fail(op, "unsupported constant type");
  Attribute value = op.getValue();
  if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    auto shaped = cast<ShapedType>(type);
    if (!shaped.hasStaticShape())
      return fail(op, "dynamic constant");
    HostTensor t(*elt, std::vector<int64_t>(shaped.getShape().begin(),
                                            shaped.getShape().end()));
    int64_t i = 0;
    if (isFloatType(*elt)) {
      for (APFloat v : dense.getValues<APFloat>())
        t.setDouble(i++, v.convertToDouble());
    } else {
      for (APInt v : dense.getValues<APInt>())
        t.setInt(i++,
                 *elt == ElementType::I1 ? v.getZExtValue() : v.getSExtValue());
    }
    set(op.getResult(), std::move(t));
    return Status::ok();
  }
  HostTensor t(*elt, {});
  if (auto i = dyn_cast<IntegerAttr>(value))
    t.setInt(0, *elt == ElementType::I1 ? i.getValue().getZExtValue()
                                        : i.getValue().getSExtValue());
  else if (auto f = dyn_cast<FloatAttr>(value))
    t.setDouble(0, f.getValueAsDouble());
  else
    return fail(op, "unsupported constant attribute");
  set(op.getResult(), std::move(t));
  return Status::ok();
}

Status Interpreter::evalBinary(Operation *op) {
  const HostTensor &a = tensor(op->getOperand(0));
  const HostTensor &b = tensor(op->getOperand(1));
  if (a.shape() != b.shape())
    return fail(op, "operand shapes differ: " + a.shapeString() + " and " +
                        b.shapeString());
  HostTensor r(a.elementType(), a.shape());
  for (int64_t i = 0; i < a.numElements(); ++i) {
    int64_t x = a.getInt(i), y = b.getInt(i), z = 0;
    if (isa<arith::AddIOp>(op))
      z = x + y;
    else if (isa<arith::SubIOp>(op))
      z = x - y;
    else if (isa<arith::MulIOp>(op))
      z = x * y;
    else if (isa<arith::MaxSIOp>(op))
      z = std::max(x, y);
    else
      z = std::min(x, y);
    r.setInt(i, z); // Wraps to the element width, as arith does.
  }
  set(op->getResult(0), std::move(r));
  return Status::ok();
}

/// Calls `fn(srcFlat, dstFlat)` for every element of a strided slice of
/// `big` with the given offsets/sizes/strides; `small` is dense.
template <typename Fn>
static void forEachSliceElement(const HostTensor &big,
                                const std::vector<int64_t> &offsets,
                                const std::vector<int64_t> &sizes,
                                const std::vector<int64_t> &strides, Fn fn) {
  int64_t count = 1;
  for (int64_t s : sizes)
    count *= s;
  std::vector<int64_t> index(sizes.size());
  for (int64_t n = 0; n < count; ++n) {
    int64_t rest = n, bigFlat = 0;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
    }
    for (size_t d = 0; d < sizes.size(); ++d)
      bigFlat = bigFlat * big.dim(d) + offsets[d] + index[d] * strides[d];
    fn(n, bigFlat);
  }
}

static Status checkSliceBounds(const HostTensor &big,
                               const std::vector<int64_t> &offsets,
                               const std::vector<int64_t> &sizes,
                               const std::vector<int64_t> &strides) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t last = offsets[d] + (sizes[d] - 1) * strides[d];
    if (offsets[d] < 0 || (sizes[d] > 0 && last >= big.dim(d)))
      return Status::error("slice dim " + std::to_string(d) + " [offset " +
                           std::to_string(offsets[d]) + ", size " +
                           std::to_string(sizes[d]) + "] is outside 0.." +
                           std::to_string(big.dim(d)));
  }
  return Status::ok();
}

Status Interpreter::evalInsertSlice(tensor::InsertSliceOp op) {
  if (op.getSourceType().getRank() != op.getDestType().getRank())
    return fail(op, "rank-reducing insert_slice is not supported");
  const HostTensor &src = tensor(op.getSource());
  // A copy: writing it, a view of an argument's memory too (a compiled
  // path's validation), writes its own bytes (HostTensor::mutableData).
  HostTensor dst = tensor(op.getDest());
  std::vector<int64_t> offsets = mixed(op.getMixedOffsets()),
                       sizes = mixed(op.getMixedSizes()),
                       strides = mixed(op.getMixedStrides());
  if (Status s = checkSliceBounds(dst, offsets, sizes, strides); s.isError())
    return fail(op, s.message());
  size_t width = elementTypeSize(dst.elementType());
  forEachSliceElement(dst, offsets, sizes, strides,
                      [&](int64_t srcFlat, int64_t dstFlat) {
                        std::copy_n(src.data() + srcFlat * width, width,
                                    dst.mutableData() + dstFlat * width);
                      });
  set(op.getResult(), std::move(dst));
  return Status::ok();
}

Status Interpreter::evalExtractSlice(tensor::ExtractSliceOp op) {
  if (op.getSourceType().getRank() != op.getType().getRank())
    return fail(op, "rank-reducing extract_slice is not supported");
  const HostTensor &src = tensor(op.getSource());
  std::vector<int64_t> offsets = mixed(op.getMixedOffsets()),
                       sizes = mixed(op.getMixedSizes()),
                       strides = mixed(op.getMixedStrides());
  if (Status s = checkSliceBounds(src, offsets, sizes, strides); s.isError())
    return fail(op, s.message());
  HostTensor dst(src.elementType(), sizes);
  size_t width = elementTypeSize(src.elementType());
  forEachSliceElement(src, offsets, sizes, strides,
                      [&](int64_t dstFlat, int64_t srcFlat) {
                        std::copy_n(src.data() + srcFlat * width, width,
                                    dst.mutableData() + dstFlat * width);
                      });
  set(op.getResult(), std::move(dst));
  return Status::ok();
}

/// affine.apply (kind 0, one result), affine.min (-1) and affine.max (1)
/// over index scalars.
Status Interpreter::evalAffineMap(Operation *op, AffineMap map,
                                  ValueRange operands, int kind) {
  Builder b(op->getContext());
  SmallVector<Attribute> constants;
  for (Value v : operands)
    constants.push_back(b.getIndexAttr(scalar(v)));
  SmallVector<Attribute> folded;
  if (failed(map.constantFold(constants, folded)) || folded.empty())
    return fail(op, "the affine map does not evaluate to constants");
  int64_t value = cast<IntegerAttr>(folded.front()).getInt();
  for (Attribute a : ArrayRef(folded).drop_front()) {
    int64_t x = cast<IntegerAttr>(a).getInt();
    value = kind < 0 ? std::min(value, x) : std::max(value, x);
  }
  HostTensor t(ElementType::I64, {});
  t.setInt(0, value);
  set(op->getResult(0), std::move(t));
  return Status::ok();
}

/// scf.forall over tensors: every point of the domain in order, its body
/// evaluated with the induction variables bound, each
/// tensor.parallel_insert_slice of its terminator written into the shared
/// output. Tiles of a correct tiling do not overlap, so the order is
/// immaterial; evaluating them in order keeps the result deterministic.
Status Interpreter::evalForall(scf::ForallOp op) {
  std::vector<int64_t> lower = mixed(op.getMixedLowerBound()),
                       upper = mixed(op.getMixedUpperBound()),
                       step = mixed(op.getMixedStep());
  for (int64_t s : step)
    if (s <= 0)
      return fail(op, "the step must be positive");
  std::vector<HostTensor> outs;
  for (Value init : op.getOutputs())
    outs.push_back(tensor(init));
  Block *body = op.getBody();
  const unsigned rank = op.getRank();
  std::vector<int64_t> iv(lower);
  bool empty = false;
  for (unsigned d = 0; d < rank; ++d)
    empty |= lower[d] >= upper[d];
  while (!empty) {
    for (unsigned d = 0; d < rank; ++d) {
      HostTensor t(ElementType::I64, {});
      t.setInt(0, iv[d]);
      set(body->getArgument(d), std::move(t));
    }
    for (auto [arg, out] : llvm::zip(op.getRegionIterArgs(), outs))
      set(arg, out);
    for (Operation &inner : body->without_terminator())
      KVATTN_RETURN_IF_ERROR(eval(&inner));
    for (Operation &yieldOp : op.getTerminator().getYieldingOps()) {
      auto insert = dyn_cast<tensor::ParallelInsertSliceOp>(yieldOp);
      if (!insert)
        return fail(&yieldOp, "not supported in scf.forall.in_parallel by the "
                              "reference evaluator");
      auto arg = dyn_cast<BlockArgument>(insert.getDest());
      if (!arg || arg.getOwner() != body || arg.getArgNumber() < rank)
        return fail(insert, "the destination must be a shared output");
      if (insert.getSourceType().getRank() != insert.getDestType().getRank())
        return fail(insert, "rank-reducing insertion is not supported");
      HostTensor &dst = outs[arg.getArgNumber() - rank];
      const HostTensor &src = tensor(insert.getSource());
      std::vector<int64_t> offsets = mixed(insert.getMixedOffsets()),
                           sizes = mixed(insert.getMixedSizes()),
                           strides = mixed(insert.getMixedStrides());
      if (Status s = checkSliceBounds(dst, offsets, sizes, strides);
          s.isError())
        return fail(insert, s.message());
      size_t width = elementTypeSize(dst.elementType());
      forEachSliceElement(dst, offsets, sizes, strides,
                          [&](int64_t srcFlat, int64_t dstFlat) {
                            std::copy_n(src.data() + srcFlat * width, width,
                                        dst.mutableData() + dstFlat * width);
                          });
    }
    // The next point, innermost dimension fastest.
    int d = static_cast<int>(rank) - 1;
    for (; d >= 0; --d) {
      iv[d] += step[d];
      if (iv[d] < upper[d])
        break;
      iv[d] = lower[d];
    }
    empty = d < 0;
  }
  for (auto [result, out] : llvm::zip(op.getResults(), outs))
    set(result, std::move(out));
  return Status::ok();
}

Status Interpreter::evalConcat(tensor::ConcatOp op) {
  int64_t dim = op.getDim();
  std::vector<int64_t> shape = tensor(op.getInputs()[0]).shape();
  shape[dim] = 0;
  for (Value input : op.getInputs())
    shape[dim] += tensor(input).dim(dim);
  const HostTensor &first = tensor(op.getInputs()[0]);
  HostTensor dst(first.elementType(), shape);
  std::vector<int64_t> offsets(shape.size(), 0), strides(shape.size(), 1);
  size_t width = elementTypeSize(dst.elementType());
  for (Value input : op.getInputs()) {
    const HostTensor &src = tensor(input);
    forEachSliceElement(dst, offsets, src.shape(), strides,
                        [&](int64_t srcFlat, int64_t dstFlat) {
                          std::copy_n(src.data() + srcFlat * width, width,
                                      dst.mutableData() + dstFlat * width);
                        });
    offsets[dim] += src.dim(dim);
  }
  set(op.getResult(), std::move(dst));
  return Status::ok();
}

Status evaluateFunction(func::FuncOp func,
                        const std::vector<HostTensor> &arguments,
                        std::vector<HostTensor> &results) {
  Interpreter interpreter;
  return interpreter.run(func, arguments, results);
}

Status checkArguments(func::FuncOp func,
                      const std::vector<HostTensor> &arguments,
                      const std::function<std::string(size_t)> &name) {
  const std::string fn = "@" + func.getName().str();
  if (arguments.size() != func.getNumArguments())
    return Status::error(
        fn + " takes " + std::to_string(func.getNumArguments()) +
        " arguments, " + std::to_string(arguments.size()) + " given");
  for (size_t i = 0; i < arguments.size(); ++i) {
    Type type = func.getArgumentTypes()[i];
    auto tensor = dyn_cast<RankedTensorType>(type);
    std::optional<ElementType> elt =
        tensor ? toElementType(tensor.getElementType()) : std::nullopt;
    std::string spelled;
    llvm::raw_string_ostream os(spelled);
    os << type;
    const std::string what =
        name ? name(i) : "argument " + std::to_string(i) + " of " + fn;
    if (!elt)
      return Status::error(what + " has type " + spelled +
                           ", which kvattn cannot hold (ranked tensors of "
                           "f32/f16/bf16/f64/i1/i32/i64)");
    ExpectedTensor want{*elt, {}, spelled};
    for (int64_t d : tensor.getShape())
      want.shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
    KVATTN_RETURN_IF_ERROR(checkTensor(what, arguments[i], want));
  }
  return Status::ok();
}

Status validateFunction(func::FuncOp func,
                        const std::vector<HostTensor> &arguments) {
  Interpreter interpreter(nullptr, reference::Compute::ChecksOnly);
  std::vector<HostTensor> results;
  return interpreter.run(func, arguments, results);
}

Status evaluateFunction(func::FuncOp func,
                        const std::vector<HostTensor> &arguments,
                        std::vector<HostTensor> &results,
                        const AttentionExecutor &executor) {
  Interpreter interpreter(&executor);
  return interpreter.run(func, arguments, results);
}

OperandMagnitudes operandMagnitudes(func::FuncOp func,
                                    const std::vector<HostTensor> &arguments,
                                    double magnitude) {
  OperandMagnitudes m{magnitude, magnitude, magnitude};
  // The function argument behind `v`, through the caches appends write.
  auto argumentOf = [&](Value v) -> const HostTensor * {
    while (auto append = v.getDefiningOp<AppendOp>())
      v = append.getCache();
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg || arg.getOwner() != &func.front() ||
        arg.getArgNumber() >= arguments.size())
      return nullptr;
    return &arguments[arg.getArgNumber()];
  };
  auto largest = [](const HostTensor &t) {
    double x = 0;
    for (int64_t i = 0; i < t.numElements(); ++i)
      if (double a = std::fabs(t.getDouble(i)); std::isfinite(a))
        x = std::max(x, a);
    return x;
  };
  // The largest dequantised |value| of an FP8 cache (0 otherwise).
  auto dequantised = [&](Value cache, Value scale) {
    const HostTensor *codes = argumentOf(cache);
    const HostTensor *scales = scale ? argumentOf(scale) : nullptr;
    if (!codes || !scales || !isFp8Type(codes->elementType()))
      return 0.0;
    return largest(*codes) * largest(*scales);
  };
  func.walk([&](AttentionOp op) {
    m.key = std::max(m.key, dequantised(op.getKey(), op.getKScale()));
    // (The latent form's V is columns of its K.)
    m.value = std::max(m.value, op.getValue()
                                    ? dequantised(op.getValue(), op.getVScale())
                                    : dequantised(op.getKey(), op.getKScale()));
  });
  return m;
}

} // namespace kvattn
} // namespace mlir
