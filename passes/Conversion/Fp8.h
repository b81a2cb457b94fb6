//===- Fp8.h - FP8 KV caches in the lowerings -------------------*- C++ -*-===//
//
// What every lowering of tile.qk / tile.softmax_update does with an FP8
// cache (docs/semantics.md, "FP8 KV caches"): a code becomes f32 exactly,
// in integer arithmetic (no FP8 type reaches LLVM: a software conversion
// that every target runs, the CPU and sm_80 alike), and is multiplied by its
// row's scale in f32, as the reference dequantises.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_FP8_H
#define KVATTN_PASSES_CONVERSION_FP8_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"

namespace mlir {
namespace kvattn {

/// f8E4M3FN or f8E5M2 (scalar or the element type of a shaped type).
bool isFp8(Type type);

/// `value` (f32, f16, bf16, f8E4M3FN or f8E5M2; scalar or vector) as f32:
/// extf for the float types, the exact software decode for FP8 (NaN codes
/// give NaN, e5m2's infinities infinity).
Value castKvToF32(OpBuilder &b, Location loc, Value value);

/// FP8 codes (a vector of f8E4M3FN or f8E5M2) as f32 through f16, for a
/// GPU without FP8 conversions (sm_80, sm_86): castKvToF32's values exactly
/// (a NaN code gives a NaN, e5m2's infinities infinity) in a few bit
/// operations and conversions a code instead of the integer decode. f16
/// holds both formats: an e5m2 code is the upper byte of its f16
/// (infinities and NaNs included); an e4m3 code's sign, exponent and
/// fraction placed in an f16 are its value / 2^8 (the biases are 7 and 15;
/// subnormals too, as f16 subnormals), converted to f32 and multiplied by
/// 2^8, both exact; magnitude 0x7F is NaN. No f16 arithmetic.
Value castFp8ToF32ThroughF16(OpBuilder &b, Location loc, Value codes);

/// `value` (f32, scalar or vector) as FP8 codes of `fp8` (f8E4M3FN or
/// f8E5M2), the quantisation of the reference (kvattn/Support/Float8.h) in
/// integer arithmetic: round to nearest even, finite values beyond the
/// largest finite value and infinities saturate to it, NaN becomes 0x7F.
/// Bit-exact with cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and independent of
/// the floating-point rounding mode.
Value castF32ToFp8(OpBuilder &b, Location loc, Value value, Type fp8);

/// The f32 scale of one cache row of an FP8 cache from its `scale` memref:
/// rank 0 or [1] per tensor, [Hkv] per KV head (`kvHead`; a size-1 scale is
/// read at 0 whatever the head), rank 3 per token and head at
/// `rowIndices[0..2]` (the cache element's indices without the last).
Value loadKvScale(OpBuilder &b, Location loc, Value scale, Value kvHead,
                  ValueRange rowIndices);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_FP8_H
