//===- Fp8.cpp - FP8 KV caches in the lowerings ---------------------------===//

#include "passes/Conversion/Fp8.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kvattn;

bool mlir::kvattn::isFp8(Type type) {
  return isa<Float8E4M3FNType, Float8E5M2Type>(getElementTypeOrSelf(type));
}

/// `type`'s shape (scalar or vector) with element type `elt`.
static Type like(Type type, Type elt) {
  if (auto vt = dyn_cast<VectorType>(type))
    return VectorType::get(vt.getShape(), elt);
  return elt;
}

Value mlir::kvattn::castKvToF32(OpBuilder &b, Location loc, Value value) {
  Type type = value.getType();
  Type elt = getElementTypeOrSelf(type);
  Type f32 = like(type, b.getF32Type());
  if (elt.isF32())
    return value;
  if (!isFp8(elt))
    return arith::ExtFOp::create(b, loc, f32, value);
  const bool e4m3 = isa<Float8E4M3FNType>(elt);
  const int mantissa = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  Type i32 = like(type, b.getI32Type());
  auto c = [&](int64_t v) -> Value {
    IntegerAttr attr = b.getI32IntegerAttr(static_cast<int32_t>(v));
    if (auto vt = dyn_cast<VectorType>(type)) {
      auto t = VectorType::get(vt.getShape(), b.getI32Type());
      return arith::ConstantOp::create(b, loc, t,
                                       DenseElementsAttr::get(t, attr));
    }
    return arith::ConstantOp::create(b, loc, attr);
  };
  auto cf = [&](double v) -> Value {
    auto attr = b.getF32FloatAttr(static_cast<float>(v));
    if (auto vt = dyn_cast<VectorType>(type)) {
      auto t = VectorType::get(vt.getShape(), b.getF32Type());
      return arith::ConstantOp::create(b, loc, t,
                                       DenseElementsAttr::get(t, attr));
    }
    return arith::ConstantOp::create(b, loc, attr);
  };
  Value bits =
      arith::BitcastOp::create(b, loc, like(type, b.getI8Type()), value);
  Value code = arith::ExtUIOp::create(b, loc, i32, bits);
  Value sign = arith::ShLIOp::create(
      b, loc, arith::AndIOp::create(b, loc, code, c(0x80)), c(24));
  Value magnitude = arith::AndIOp::create(b, loc, code, c(0x7f));
  Value exponent = arith::ShRUIOp::create(b, loc, magnitude, c(mantissa));
  Value fraction =
      arith::AndIOp::create(b, loc, magnitude, c((1 << mantissa) - 1));
  // Normal: the f32 with exponent e - bias and the fraction on top.
  Value normal = arith::OrIOp::create(
      b, loc,
      arith::ShLIOp::create(
          b, loc, arith::AddIOp::create(b, loc, exponent, c(127 - bias)),
          c(23)),
      arith::ShLIOp::create(b, loc, fraction, c(23 - mantissa)));
  // Subnormal: fraction * 2^(1 - bias - mantissa), exact in f32.
  Value subnormal = arith::BitcastOp::create(
      b, loc, i32,
      arith::MulFOp::create(b, loc,
                            arith::UIToFPOp::create(b, loc, f32, fraction),
                            cf(std::ldexp(1.0, 1 - bias - mantissa))));
  Value isSubnormal =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, exponent, c(0));
  Value result =
      arith::SelectOp::create(b, loc, isSubnormal, subnormal, normal);
  if (e4m3) {
    // S.1111.111 is NaN (no infinities).
    Value isNan = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                        magnitude, c(0x7f));
    result = arith::SelectOp::create(b, loc, isNan, c(0x7fc00000), result);
  } else {
    // S.11111.00 is infinity, S.11111.xx NaN.
    Value special = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          exponent, c(31));
    Value isInf =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, fraction, c(0));
    Value nonFinite =
        arith::SelectOp::create(b, loc, isInf, c(0x7f800000), c(0x7fc00000));
    result = arith::SelectOp::create(b, loc, special, nonFinite, result);
  }
  return arith::BitcastOp::create(b, loc, f32,
                                  arith::OrIOp::create(b, loc, result, sign));
}

Value mlir::kvattn::loadKvScale(OpBuilder &b, Location loc, Value scale,
                                Value kvHead, ValueRange rowIndices) {
  auto type = cast<MemRefType>(scale.getType());
  if (type.getRank() == 0)
    return memref::LoadOp::create(b, loc, scale, ValueRange{});
  if (type.getRank() == 1) {
    // [1] per tensor or [Hkv] per KV head; a dynamic size decides at run
    // time.
    Value index;
    if (type.getDimSize(0) == 1) {
      index = arith::ConstantIndexOp::create(b, loc, 0);
    } else if (ShapedType::isStatic(type.getDimSize(0))) {
      index = kvHead;
    } else {
      Value one = arith::ConstantIndexOp::create(b, loc, 1);
      Value size = memref::DimOp::create(b, loc, scale, 0);
      Value perTensor =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, size, one);
      index = arith::SelectOp::create(
          b, loc, perTensor, arith::ConstantIndexOp::create(b, loc, 0), kvHead);
    }
    return memref::LoadOp::create(b, loc, scale, ValueRange{index});
  }
  return memref::LoadOp::create(b, loc, scale, rowIndices.take_front(3));
}
