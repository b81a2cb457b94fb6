//===- Fp8.h - FP8 KV caches in the lowerings -------------------*- C++ -*-===//
//
// What every lowering of tile.qk / tile.softmax_update does with an FP8
// cache (docs/semantics.md, "FP8 KV caches"): a code becomes f32 exactly,
// in integer arithmetic (no FP8 type reaches LLVM: a software conversion
// that every target runs, the CPU and sm_80 alike), and is multiplied by its
// row's scale in f32, as the reference dequantises; the GPU's tensor-core
// kernels stage the exact codes and apply a scale per tensor or per KV head
// to the dot products and the probabilities instead (foldedKvScale).
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

/// FP8 codes (a vector of a multiple of 4) times `scale` (an f32 scalar;
/// null: 1) in f32, bit for bit castKvToF32(codes) * scale, from packed
/// 32-bit work for the GPU kernels' staging on sm_80/sm_86: one prmt puts
/// two codes in the upper bytes of two 16-bit lanes, an e5m2 code's f16;
/// an e4m3 code's f16 of value / 2^8 takes one shift and two masks per two
/// codes; one conversion to f32 a code, then one multiply by scale (e4m3:
/// by scale * 2^8, the same product). A chunk of e4m3 codes with a NaN
/// (magnitude 0x7F, which the f16 reads as 480), or a scale of 2^120 or more,
/// branches to the two products apart with the NaNs put back, behind one test
/// per chunk.
Value dequantizeFp8Packed(OpBuilder &b, Location loc, Value codes, Value scale);

/// FP8 codes (a vector of a multiple of 4) as f16, exact (every FP8 value
/// is an f16), for an f16 stage of exact codes on sm_80/sm_86: the halves
/// of dequantizeFp8Packed's prmt, an e5m2 code's f16 as it is; an e4m3
/// code's f16 of value / 2^8 times 2^8 in f16 (one mul.rn.f16x2 per two
/// codes, exact; subnormal codes are f16 subnormals there). A chunk with an
/// e4m3 NaN takes dequantizeFp8Packed's f32 route (behind the same one test
/// per chunk).
Value decodeFp8ToF16Packed(OpBuilder &b, Location loc, Value codes);

/// `value` (f32, scalar or vector) as FP8 codes of `fp8` (f8E4M3FN or
/// f8E5M2), the quantisation of the reference (kvattn/Support/Float8.h) in
/// integer arithmetic: round to nearest even, finite values beyond the
/// largest finite value and infinities saturate to it, NaN becomes 0x7F.
/// Bit-exact with cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and independent of
/// the floating-point rounding mode.
Value castF32ToFp8(OpBuilder &b, Location loc, Value value, Type fp8);

/// Whether an FP8 cache's `scale` memref holds one scale per program (per
/// tensor: rank 0 or [1]; per KV head: [Hkv]): the tensor-core kernels
/// then stage the exact codes and apply the scale to the scores (K) and the
/// probabilities (V) instead (foldedKvScale). Null: no scale.
bool isUniformKvScale(Value scale);

/// The scale a tensor-core kernel applies outside the stage for an FP8
/// `cache` (its element type decides) read with `scale` at KV head `kvHead`:
/// the scale when it is uniform (isUniformKvScale), else null (none, or
/// per token: applied while staging).
Value foldedKvScale(OpBuilder &b, Location loc, Value cache, Value scale,
                    Value kvHead);

/// The f32 scale of one cache row of an FP8 cache from its `scale` memref:
/// rank 0 or [1] per tensor, [Hkv] per KV head (`kvHead`; a size-1 scale is
/// read at 0 whatever the head), rank 3 per token and head at
/// `rowIndices[0..2]` (the cache element's indices without the last).
Value loadKvScale(OpBuilder &b, Location loc, Value scale, Value kvHead,
                  ValueRange rowIndices);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_FP8_H
