//===- RotaryEmbedding.cpp - RoPE arithmetic shared by the lowerings ------===//

#include "passes/RotaryEmbedding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
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

RotaryElement mlir::kvattn::emitRotaryElement(OpBuilder &b, Location loc,
                                              RopeAttr rope, Value pos,
                                              Value x) {
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
  Value angle = emitRotaryAngle(b, loc, rope, pos, k);
  e.cos = math::CosOp::create(b, loc, angle);
  Value sin = math::SinOp::create(b, loc, angle);
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
