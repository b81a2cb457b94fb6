//===- Fp8.cpp - FP8 KV caches in the lowerings ---------------------------===//

#include "passes/Conversion/Fp8.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>
#include <limits>

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

/// The i32 constant `v` in `type`'s shape (scalar or vector: a splat).
static Value i32Constant(OpBuilder &b, Location loc, Type type, int64_t v) {
  IntegerAttr attr = b.getI32IntegerAttr(static_cast<int32_t>(v));
  if (auto vt = dyn_cast<VectorType>(type)) {
    auto t = VectorType::get(vt.getShape(), b.getI32Type());
    return arith::ConstantOp::create(b, loc, t,
                                     DenseElementsAttr::get(t, attr));
  }
  return arith::ConstantOp::create(b, loc, attr);
}

Value mlir::kvattn::castKvToF32(OpBuilder &b, Location loc, Value value) {
  Type type = value.getType();
  Type elt = getElementTypeOrSelf(type);
  Type f32 = like(type, b.getF32Type());
  if (elt.isF32())
    return value;
  if (!isFp8(elt))
    return arith::ExtFOp::create(b, loc, f32, value);
  // Through f16, which holds every FP8 value: an e5m2 code is the upper
  // byte of its f16; an e4m3 code's S.EEEE.MMM shifted to the f16's
  // 0.EEEE.MMM (its value / 2^8, subnormals too: 0.MMM x 2^-6 / 2^8 is an
  // f16 subnormal) and scaled by 2^8 in f32, exactly. One conversion
  // (x86's vcvtph2ps, NVPTX's cvt.f32.f16) and a few integer operations a
  // code, where the bit assembly in f32 took three times as many. NaN codes
  // give the canonical NaN with the code's sign (0x7fc00000 | sign), as
  // before; e5m2's infinities come through the f16.
  const bool e4m3 = isa<Float8E4M3FNType>(elt);
  Type i16 = like(type, b.getI16Type());
  Type i32 = like(type, b.getI32Type());
  auto c16 = [&](int64_t v) -> Value {
    IntegerAttr attr = b.getI16IntegerAttr(static_cast<int16_t>(v));
    if (auto vt = dyn_cast<VectorType>(type)) {
      auto t = VectorType::get(vt.getShape(), b.getI16Type());
      return arith::ConstantOp::create(b, loc, t,
                                       DenseElementsAttr::get(t, attr));
    }
    return arith::ConstantOp::create(b, loc, attr);
  };
  auto c32 = [&](int64_t v) { return i32Constant(b, loc, type, v); };
  Value bits =
      arith::BitcastOp::create(b, loc, like(type, b.getI8Type()), value);
  Value code = arith::ExtUIOp::create(b, loc, i16, bits);
  Value magnitude = arith::AndIOp::create(b, loc, code, c16(0x7f));
  Value halfBits =
      e4m3 ? arith::ShLIOp::create(b, loc, magnitude, c16(7)).getResult()
           : arith::ShLIOp::create(b, loc, code, c16(8)).getResult();
  Value half =
      arith::BitcastOp::create(b, loc, like(type, b.getF16Type()), halfBits);
  Value f = arith::ExtFOp::create(b, loc, f32, half);
  Value sign = arith::ShLIOp::create(
      b, loc,
      arith::ExtUIOp::create(b, loc, i32,
                             arith::AndIOp::create(b, loc, code, c16(0x80))),
      c32(24));
  Value isNan;
  if (e4m3) {
    // The magnitude's f32, then the sign (S.1111.111 is NaN: no
    // infinities).
    TypedAttr twoTo8 = b.getF32FloatAttr(256.0f);
    if (auto vt = dyn_cast<VectorType>(f32))
      twoTo8 = DenseElementsAttr::get(vt, twoTo8);
    f = arith::MulFOp::create(b, loc, f,
                              arith::ConstantOp::create(b, loc, twoTo8));
    isNan = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, magnitude,
                                  c16(0x7f));
    Value result = arith::BitcastOp::create(b, loc, i32, f);
    result = arith::SelectOp::create(b, loc, isNan, c32(0x7fc00000), result);
    return arith::BitcastOp::create(b, loc, f32,
                                    arith::OrIOp::create(b, loc, result, sign));
  }
  // e5m2: S.11111.xx with xx != 0 is NaN (the f16's payload is not kept).
  isNan = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, magnitude,
                                c16(0x7c));
  Value result = arith::BitcastOp::create(b, loc, i32, f);
  result = arith::SelectOp::create(
      b, loc, isNan, arith::OrIOp::create(b, loc, c32(0x7fc00000), sign),
      result);
  return arith::BitcastOp::create(b, loc, f32, result);
}

namespace {
/// The f16 bits of dequantizeFp8Packed's prmt (vector<n/2 x i32>: two
/// codes a word) and the codes' 32-bit words (vector<n/4 x i32>).
struct PackedCodes {
  Value bits, words;
};
} // namespace

/// Each code the upper byte of a 16-bit lane, two codes a prmt ({c1, 0, c0,
/// 0} and {c3, 0, c2, 0} of a word {c3, c2, c1, c0}; selector byte 4 is the
/// zero word's): an e5m2 code's f16; an e4m3 code's S.EEEE.MMM moved to
/// S.0EEEE.MMM, the f16 of its value / 2^8 (subnormals too).
static PackedCodes spreadFp8Codes(OpBuilder &b, Location loc, Value codes) {
  auto type = cast<VectorType>(codes.getType());
  const int64_t n = type.getNumElements();
  assert(n % 4 == 0 && "codes come in 32-bit words");
  const bool e4m3 = isa<Float8E4M3FNType>(type.getElementType());
  auto i8 = VectorType::get({n}, b.getI8Type());
  auto pairs = VectorType::get({n / 2}, b.getI32Type());
  auto quads = VectorType::get({n / 4}, b.getI32Type());
  auto word = [&](uint32_t v) -> Value {
    return arith::ConstantOp::create(
        b, loc, pairs,
        DenseElementsAttr::get(
            pairs, Attribute(b.getI32IntegerAttr(static_cast<int32_t>(v)))));
  };
  Value bytes = arith::BitcastOp::create(b, loc, i8, codes);
  Value words = vector::BitCastOp::create(b, loc, quads, bytes);
  Value zero = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
  SmallVector<Value> spread;
  for (int64_t q = 0; q < n / 4; ++q) {
    Value w = vector::ExtractOp::create(b, loc, words, q);
    for (int32_t selector : {0x1404, 0x3424})
      spread.push_back(NVVM::PermuteOp::create(
          b, loc, b.getI32Type(), w, zero,
          arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(selector)),
          NVVM::PermuteMode::DEFAULT));
  }
  Value bits = vector::FromElementsOp::create(b, loc, pairs, spread);
  if (e4m3)
    bits = arith::OrIOp::create(
        b, loc, arith::AndIOp::create(b, loc, bits, word(0x80008000u)),
        arith::AndIOp::create(b, loc,
                              arith::ShRUIOp::create(b, loc, bits, word(1)),
                              word(0x3f803f80u)));
  return {bits, words};
}

/// Whether a chunk's e4m3 codes (their 32-bit words) hold a NaN (magnitude
/// 0x7F): adding 1 to each byte's magnitude carries into its top bit only
/// there.
static Value hasE4m3Nan(OpBuilder &b, Location loc, Value words) {
  auto quads = cast<VectorType>(words.getType());
  auto word = [&](uint32_t v) -> Value {
    return arith::ConstantOp::create(
        b, loc, quads,
        DenseElementsAttr::get(
            quads, Attribute(b.getI32IntegerAttr(static_cast<int32_t>(v)))));
  };
  Value carried = arith::AndIOp::create(
      b, loc,
      arith::AddIOp::create(
          b, loc, arith::AndIOp::create(b, loc, words, word(0x7f7f7f7fu)),
          word(0x01010101u)),
      word(0x80808080u));
  Value any =
      vector::ReductionOp::create(b, loc, vector::CombiningKind::OR, carried);
  return arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ne, any,
      arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
}

Value mlir::kvattn::dequantizeFp8Packed(OpBuilder &b, Location loc, Value codes,
                                        Value scale) {
  auto type = cast<VectorType>(codes.getType());
  const int64_t n = type.getNumElements();
  const bool e4m3 = isa<Float8E4M3FNType>(type.getElementType());
  auto f16 = VectorType::get({n}, b.getF16Type());
  auto f32 = VectorType::get({n}, b.getF32Type());
  auto splat = [&](VectorType t, Attribute v) -> Value {
    return arith::ConstantOp::create(b, loc, t, DenseElementsAttr::get(t, v));
  };
  auto f32Constant = [&](float v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  };
  auto times = [&](Value v, Value factor) -> Value {
    return arith::MulFOp::create(
        b, loc, v, vector::BroadcastOp::create(b, loc, f32, factor));
  };
  auto [bits, words] = spreadFp8Codes(b, loc, codes);
  Value halves = arith::ExtFOp::create(
      b, loc, f32, vector::BitCastOp::create(b, loc, f16, bits).getResult());
  if (!e4m3) // exact, infinities and NaNs included
    return scale ? times(halves, scale) : halves;
  // e4m3: value * scale = (value / 2^8) * (scale * 2^8), both factors exact
  // and so the product's rounding (value / 2^8 is an f32 normal), unless
  // scale * 2^8 overflows (scale >= 2^120) or a code is NaN (magnitude
  // 0x7F, read as 480 / 2^8 here: hasE4m3Nan). Such a chunk (never, in
  // practice) takes the two products apart and puts the NaNs back.
  Value scaled = scale
                     ? arith::MulFOp::create(b, loc, scale, f32Constant(256.0f))
                           .getResult()
                     : f32Constant(256.0f);
  Value nan = hasE4m3Nan(b, loc, words);
  Value slow = arith::OrIOp::create(
      b, loc, nan,
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UGT, scaled,
                            f32Constant(std::numeric_limits<float>::max())));
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{f32}, slow,
                                /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value value = times(halves, f32Constant(256.0f));
    Value isNan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                        math::AbsFOp::create(b, loc, value),
                                        splat(f32, b.getF32FloatAttr(480.0f)));
    value = arith::SelectOp::create(
        b, loc, isNan, splat(f32, b.getF32FloatAttr(std::nanf(""))), value);
    scf::YieldOp::create(b, loc, scale ? times(value, scale) : value);
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, times(halves, scaled));
  }
  return ifOp.getResult(0);
}

Value mlir::kvattn::decodeFp8ToF16Packed(OpBuilder &b, Location loc,
                                         Value codes) {
  auto type = cast<VectorType>(codes.getType());
  const int64_t n = type.getNumElements();
  auto f16 = VectorType::get({n}, b.getF16Type());
  auto [bits, words] = spreadFp8Codes(b, loc, codes);
  Value halves = vector::BitCastOp::create(b, loc, f16, bits);
  // e5m2: exact, infinities and NaNs included.
  if (!isa<Float8E4M3FNType>(type.getElementType()))
    return halves;
  // e4m3: (value / 2^8) * 2^8, exact in f16 (at most 448; subnormal codes
  // are f16 subnormals, which f16 arithmetic keeps), unless the chunk has
  // a NaN (read as 480 here): then dequantizeFp8Packed's route.
  auto ifOp =
      scf::IfOp::create(b, loc, TypeRange{f16}, hasE4m3Nan(b, loc, words),
                        /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(
        b, loc,
        arith::TruncFOp::create(b, loc, f16,
                                dequantizeFp8Packed(b, loc, codes, Value()))
            .getResult());
    b.setInsertionPointToStart(ifOp.elseBlock());
    Value twoTo8 = arith::ConstantOp::create(
        b, loc, f16, DenseElementsAttr::get(f16, b.getF16FloatAttr(256.0f)));
    scf::YieldOp::create(
        b, loc, arith::MulFOp::create(b, loc, halves, twoTo8).getResult());
  }
  return ifOp.getResult(0);
}

Value mlir::kvattn::castF32ToFp8(OpBuilder &b, Location loc, Value value,
                                 Type fp8) {
  Type type = value.getType();
  const bool e4m3 = isa<Float8E4M3FNType>(fp8);
  const int m = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int64_t maxFinite = e4m3 ? 0x7e : 0x7b;
  Type i32 = like(type, b.getI32Type());
  auto c = [&](int64_t v) { return i32Constant(b, loc, type, v); };
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, loc, p, x, y);
  };
  auto sel = [&](Value cond, Value x, Value y) -> Value {
    return arith::SelectOp::create(b, loc, cond, x, y);
  };
  auto add = [&](Value x, Value y) -> Value {
    return arith::AddIOp::create(b, loc, x, y);
  };
  auto andi = [&](Value x, Value y) -> Value {
    return arith::AndIOp::create(b, loc, x, y);
  };
  auto shr = [&](Value x, Value y) -> Value {
    return arith::ShRUIOp::create(b, loc, x, y);
  };
  Value bits = arith::BitcastOp::create(b, loc, i32, value);
  Value sign = andi(shr(bits, c(24)), c(0x80));
  Value abs = andi(bits, c(0x7fffffff));
  Value isNan = cmp(arith::CmpIPredicate::ugt, abs, c(0x7f800000));
  // Infinities and huge values become 2^127: they saturate below.
  abs = arith::MinUIOp::create(b, loc, abs, c(0x7f000000));
  Value exponent = shr(abs, c(23));
  // A normal FP8 result (|x| >= 2^(1 - bias)): the f32 bits rebiased, the
  // 23 - m dropped bits rounded to nearest even (a carry moves into the
  // exponent as it should).
  Value lsb = andi(shr(abs, c(23 - m)), c(1));
  Value rounded = shr(add(abs, add(c((1 << (22 - m)) - 1), lsb)), c(23 - m));
  Value normal = arith::SubIOp::create(b, loc, rounded, c((127 - bias) << m));
  // A subnormal FP8 result: the significand (with its implicit bit) shifted
  // right by s = 151 - bias - m - e (at least 21 here; at most 31: smaller
  // values round to 0), rounded to nearest even.
  Value significand =
      arith::OrIOp::create(b, loc, andi(abs, c(0x7fffff)), c(0x800000));
  // (Clamped to [1, 31] for the normal values too, which do not use it: no
  // shift is out of range.)
  Value shift = arith::MaxSIOp::create(
      b, loc,
      arith::MinSIOp::create(
          b, loc, arith::SubIOp::create(b, loc, c(151 - bias - m), exponent),
          c(31)),
      c(1));
  Value kept = shr(significand, shift);
  Value one = c(1);
  Value half = arith::ShLIOp::create(b, loc, one,
                                     arith::SubIOp::create(b, loc, shift, one));
  Value rest = andi(
      significand, arith::SubIOp::create(
                       b, loc, arith::ShLIOp::create(b, loc, one, shift), one));
  Value up = arith::OrIOp::create(
      b, loc, cmp(arith::CmpIPredicate::ugt, rest, half),
      andi(cmp(arith::CmpIPredicate::eq, rest, half),
           cmp(arith::CmpIPredicate::ne, andi(kept, one), c(0))));
  Value subnormal = add(kept, arith::ExtUIOp::create(b, loc, i32, up));
  Value isNormal = cmp(arith::CmpIPredicate::sgt, exponent, c(127 - bias));
  Value code = sel(isNormal, normal, subnormal);
  code = arith::MinSIOp::create(b, loc, code, c(maxFinite));
  code = arith::OrIOp::create(b, loc, code, sign);
  code = sel(isNan, c(0x7f), code);
  Value byte = arith::TruncIOp::create(b, loc, like(type, b.getI8Type()), code);
  return arith::BitcastOp::create(b, loc, like(type, fp8), byte);
}

bool mlir::kvattn::isUniformKvScale(Value scale) {
  return scale && cast<MemRefType>(scale.getType()).getRank() <= 1;
}

Value mlir::kvattn::foldedKvScale(OpBuilder &b, Location loc, Value cache,
                                  Value scale, Value kvHead) {
  if (!isFp8(cache.getType()) || !isUniformKvScale(scale))
    return {};
  return loadKvScale(b, loc, scale, kvHead, ValueRange{});
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
