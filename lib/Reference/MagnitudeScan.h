//===- MagnitudeScan.h - the largest finite magnitude -----------*- C++ -*-===//
//
// The range check (docs/semantics.md, "Range") reads every cached K and V
// element a key owns on each call of the CPU path, a second read of the
// whole cache beside the kernel's own: this scan runs at the memory's speed.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_LIB_REFERENCE_MAGNITUDESCAN_H
#define KVATTN_LIB_REFERENCE_MAGNITUDESCAN_H

#include <cstdint>

namespace mlir {
namespace kvattn {
namespace reference {

/// The largest bit pattern, sign cleared, of the `n` elements of `width`
/// bytes (4: f32, 2: f16/bf16, 1: an FP8 code) at `p` that is below `inf`
/// (the format's +Inf pattern, sign cleared: 0x7f800000, 0x7f80, 0x7c00,
/// 0x7f for e4m3fn's NaN, 0x7c for e5m2), 0 when there is none. The
/// magnitudes of finite floats order as their bit patterns without the
/// sign, so this is the largest finite |x| as bits. With AVX2 where the
/// host has it (chosen at run time), in portable code otherwise; the result
/// does not depend on which.
uint32_t finiteMagnitudeBitsMax(const uint8_t *p, int64_t n, int width,
                                uint32_t inf);

} // namespace reference
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_LIB_REFERENCE_MAGNITUDESCAN_H
