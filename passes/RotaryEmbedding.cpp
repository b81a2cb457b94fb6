//===- RotaryEmbedding.cpp - RoPE arithmetic shared by the lowerings ------===//

#include "passes/RotaryEmbedding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kvattn;

Value mlir::kvattn::emitRotaryAngle(OpBuilder &b, Location loc, RopeAttr rope,
                                    Value pos, Value k) {
  const int64_t half = rope.getRotaryDim() / 2;
  Type f32 = b.getF32Type();
  // inv_freq as the attribute defines it: constants, picked by k.
  SmallVector<float> invFreq;
  for (int64_t i = 0; i < half; ++i)
    invFreq.push_back(rope.getInvFreq(i));
  auto tableType = VectorType::get({half}, f32);
  Value table = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(tableType, ArrayRef<float>(invFreq)));
  Value freq =
      vector::ExtractOp::create(b, loc, table, ArrayRef<OpFoldResult>{k});
  Value p = arith::IndexCastOp::create(b, loc, b.getI64Type(), pos);
  p = arith::SIToFPOp::create(b, loc, f32, p);
  return arith::MulFOp::create(b, loc, p, freq);
}

std::pair<Value, Value> mlir::kvattn::emitCosSin(OpBuilder &b, Location loc,
                                                 Value angle, SinCos how) {
  if (how == SinCos::Math)
    return {math::CosOp::create(b, loc, angle),
            math::SinOp::create(b, loc, angle)};
  Type f64 = b.getF64Type(), i64 = b.getI64Type();
  auto c = [&](double v) {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v)).getResult();
  };
  auto mul = [&](Value x, Value y) {
    return arith::MulFOp::create(b, loc, x, y).getResult();
  };
  auto add = [&](Value x, Value y) {
    return arith::AddFOp::create(b, loc, x, y).getResult();
  };
  auto sub = [&](Value x, Value y) {
    return arith::SubFOp::create(b, loc, x, y).getResult();
  };
  // n = round(x / (pi/2)) (x >= 0), r = x - n * pi/2 with pi/2 = P1 + P2.
  constexpr double kTwoOverPi = 0.63661977236758134308;
  constexpr double kPiOver2Hi = 1.5707963267948965580;
  constexpr double kPiOver2Lo = 6.123233995736766036e-17;
  Value x = arith::ExtFOp::create(b, loc, f64, angle);
  Value n =
      arith::FPToSIOp::create(b, loc, i64, add(mul(x, c(kTwoOverPi)), c(0.5)));
  Value nf = arith::SIToFPOp::create(b, loc, f64, n);
  Value r = sub(sub(x, mul(nf, c(kPiOver2Hi))), mul(nf, c(kPiOver2Lo)));
  Value r2 = mul(r, r);
  // Taylor polynomials, Horner form.
  auto horner = [&](ArrayRef<double> coefficients) {
    Value acc = c(coefficients.back());
    for (double k : llvm::reverse(coefficients.drop_back()))
      acc = add(c(k), mul(r2, acc));
    return acc;
  };
  Value sinP = mul(r, horner({1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040,
                              1.0 / 362880, -1.0 / 39916800}));
  Value cosP = horner({1.0, -1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320,
                       -1.0 / 3628800, 1.0 / 479001600});
  // The quadrant n mod 4.
  Value q = arith::AndIOp::create(b, loc, n,
                                  arith::ConstantIntOp::create(b, loc, i64, 3));
  auto is = [&](int64_t v) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, q,
                                 arith::ConstantIntOp::create(b, loc, i64, v))
        .getResult();
  };
  Value negSin = arith::NegFOp::create(b, loc, sinP);
  Value negCos = arith::NegFOp::create(b, loc, cosP);
  auto pick = [&](Value v0, Value v1, Value v2, Value v3) {
    Value v = arith::SelectOp::create(b, loc, is(2), v2, v3);
    v = arith::SelectOp::create(b, loc, is(1), v1, v);
    return arith::SelectOp::create(b, loc, is(0), v0, v).getResult();
  };
  Value sin = pick(sinP, cosP, negSin, negCos);
  Value cos = pick(cosP, negSin, negCos, sinP);
  Type f32 = b.getF32Type();
  return {arith::TruncFOp::create(b, loc, f32, cos),
          arith::TruncFOp::create(b, loc, f32, sin)};
}

Value mlir::kvattn::emitTableRead(OpBuilder &b, Location loc, Value table,
                                  Value pos, Value k) {
  Value v = isa<MemRefType>(table.getType())
                ? memref::LoadOp::create(b, loc, table, ValueRange{pos, k})
                      .getResult()
                : tensor::ExtractOp::create(b, loc, table, ValueRange{pos, k})
                      .getResult();
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

RotaryElement mlir::kvattn::emitRotaryElement(OpBuilder &b, Location loc,
                                              RopeAttr rope, Value pos, Value x,
                                              SinCos how, RotaryTables tables) {
  assert(rope.usesTables() == static_cast<bool>(tables) &&
         "a rope without theta reads tables, one with theta none");
  using P = arith::CmpIPredicate;
  const int64_t r = rope.getRotaryDim(), half = r / 2;
  auto idx = [&](int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v).getResult();
  };
  RotaryElement e;
  e.rotated = arith::CmpIOp::create(b, loc, P::ult, x, idx(r));
  Value first, k, partner;
  if (rope.getInterleaved()) {
    // Pairs (2k, 2k + 1).
    k = arith::DivUIOp::create(b, loc, x, idx(2));
    Value odd = arith::RemUIOp::create(b, loc, x, idx(2));
    first = arith::CmpIOp::create(b, loc, P::eq, odd, idx(0));
    partner = arith::SelectOp::create(b, loc, first,
                                      arith::AddIOp::create(b, loc, x, idx(1)),
                                      arith::SubIOp::create(b, loc, x, idx(1)));
  } else {
    // Halves (k, k + R/2).
    first = arith::CmpIOp::create(b, loc, P::ult, x, idx(half));
    k = arith::SelectOp::create(b, loc, first, x,
                                arith::SubIOp::create(b, loc, x, idx(half)));
    partner = arith::SelectOp::create(
        b, loc, first, arith::AddIOp::create(b, loc, x, idx(half)),
        arith::SubIOp::create(b, loc, x, idx(half)));
  }
  // Beyond rotary_dim: x itself, pair 0 (an index the table has).
  e.partner = arith::SelectOp::create(b, loc, e.rotated, partner, x);
  k = arith::SelectOp::create(b, loc, e.rotated, k, idx(0));
  Value cos, sin;
  if (tables) {
    cos = emitTableRead(b, loc, tables.cos, pos, k);
    sin = emitTableRead(b, loc, tables.sin, pos, k);
  } else {
    Value angle = emitRotaryAngle(b, loc, rope, pos, k);
    std::tie(cos, sin) = emitCosSin(b, loc, angle, how);
  }
  e.cos = cos;
  e.signedSin = arith::SelectOp::create(
      b, loc, first, arith::NegFOp::create(b, loc, sin), sin);
  return e;
}

Value mlir::kvattn::emitRotate(OpBuilder &b, Location loc,
                               const RotaryElement &e, Value self,
                               Value partner) {
  Value v = arith::AddFOp::create(
      b, loc, arith::MulFOp::create(b, loc, self, e.cos),
      arith::MulFOp::create(b, loc, partner, e.signedSin));
  return arith::SelectOp::create(b, loc, e.rotated, v, self);
}

Value mlir::kvattn::emitRoundThrough(OpBuilder &b, Location loc, Value v,
                                     Type type) {
  if (type.isF32())
    return v;
  Value narrow = arith::TruncFOp::create(b, loc, type, v);
  return arith::ExtFOp::create(b, loc, b.getF32Type(), narrow);
}
