//===- RotaryEmbedding.h - RoPE arithmetic shared by the lowerings -*- C++ -*-//
//
// The rotary embedding of #kvattn.rope as IR, one element at a time, for
// the lowerings that apply it where an element is loaded or written: the
// CPU's tile.load_q, the CPU's kvattn.append (-kvattn-lower-append) and the
// GPU kernels. For element x of a vector at position p:
//
//   rotated[x] = v[x] * cos(angle_k) + v[partner(x)] * sign(x) * sin(angle_k)
//
// for x < rotary_dim (pair k, partner and sign from the convention), and
// v[x] beyond it; angle_k = f32(f32(p) * inv_freq[k]), inv_freq[k] the
// attribute's constants, or, with tables (a `rope` without theta), cos and
// sin read at [p, k] of rotary_cos / rotary_sin. All in f32
// (docs/semantics.md, "RoPE").
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_ROTARYEMBEDDING_H
#define KVATTN_PASSES_ROTARYEMBEDDING_H

#include "kvattn/Dialect/KVAttnOps.h"

#include "mlir/IR/Builders.h"

namespace mlir {
namespace kvattn {

/// What rotates element `x`: the index of its partner (x itself beyond
/// rotary_dim), its pair's cosine and signed sine (f32), and whether x is
/// rotated at all (i1).
struct RotaryElement {
  Value partner, cos, signedSin, rotated;
};

/// The angle of pair `k` (index) at position `pos` (index): f32(pos) *
/// inv_freq[k] in f32. `k` must be in [0, rotary_dim / 2).
Value emitRotaryAngle(OpBuilder &b, Location loc, RopeAttr rope, Value pos,
                      Value k);

/// How cos and sin of the f32 angle are computed.
enum class SinCos {
  /// math.cos / math.sin (the CPU: libm's cosf and sinf).
  Math,
  /// Arithmetic only (the GPU, where no libdevice call is wanted): the
  /// angle reduced modulo pi/2 in f64 (pi/2 in two parts), degree-11/10
  /// Taylor polynomials on [-pi/4, pi/4] in f64, rounded to f32: within
  /// 1 ulp of f32 for angles below 2^24 (positions below 16M).
  Polynomial,
};

/// cos and sin of the f32 `angle` (non-negative), as f32.
std::pair<Value, Value> emitCosSin(OpBuilder &b, Location loc, Value angle,
                                   SinCos how);

/// RoPE's tables (rotary_cos / rotary_sin [P, rotary_dim / 2], f32, f16 or
/// bf16; memrefs or tensors), for a `rope` without theta.
struct RotaryTables {
  Value cos, sin;
  explicit operator bool() const { return static_cast<bool>(cos); }
};

/// Element (pos, k) of a table (memref.load or tensor.extract), widened to
/// f32.
Value emitTableRead(OpBuilder &b, Location loc, Value table, Value pos,
                    Value k);

/// The rotation of element `x` (index) of a vector at position `pos`
/// (index): cos and sin of the attribute's angle (`how`), or, for a `rope`
/// without theta, read from `tables` at row `pos` (the caller guarantees
/// pos < P: the verifier, the host checks or device validation).
RotaryElement emitRotaryElement(OpBuilder &b, Location loc, RopeAttr rope,
                                Value pos, Value x, SinCos how = SinCos::Math,
                                RotaryTables tables = {});

/// v[x] rotated: self * cos + partner * signedSin (f32), or `self` where x
/// is not rotated.
Value emitRotate(OpBuilder &b, Location loc, const RotaryElement &e, Value self,
                 Value partner);

/// `v` (f32) rounded through `type` (f16/bf16) and back, or `v` for f32.
Value emitRoundThrough(OpBuilder &b, Location loc, Value v, Type type);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_ROTARYEMBEDDING_H
