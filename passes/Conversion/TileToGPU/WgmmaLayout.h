//===- WgmmaLayout.h - shared tiles and matrix descriptors ------*- C++ -*-===//
//
// The shared-memory side of the sm_90a (wgmma) lowering, plain C++ so that
// test/unit/FragmentLayoutTest.cpp checks it against the PTX ISA's rules
// (docs/gpu-lowering.md, "Hopper (sm_90a)"):
//
// - the 16-bit tiles (query tile, K stage, V stage) are stored as 64-column
//   *panels*: panel p = col / 64 holds columns [64p, 64p + 64) of every row,
//   128 bytes per row, rows one after the other, and inside a row the
//   16-byte chunk (col % 64) / 8 is XORed with row % 8. With the tile
//   1024-byte aligned that is exactly wgmma's 128-byte swizzle (address
//   bits 4-6 ^= bits 7-9) of a K-major (or, for V, MN-major) operand; a
//   64-column tile is one panel, which is the sm_80 lowering's swizzle
//   (swizzledCol) too;
// - a matrix descriptor is start address >> 4 (bits 0-13), the leading
//   byte offset >> 4 (16-29), the stride byte offset >> 4 (32-45), base
//   offset 0 (49-51) and the swizzle mode (62-63: 0 none, 1 128B, 2 64B,
//   3 32B).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_WGMMALAYOUT_H
#define KVATTN_PASSES_CONVERSION_WGMMALAYOUT_H

#include <cstdint>

namespace mlir {
namespace kvattn {
namespace wgmma {

/// Swizzle modes of a matrix descriptor (bits 62-63).
enum class Swizzle : uint64_t { None = 0, B128 = 1, B64 = 2, B32 = 3 };

/// 16-bit elements per panel row (128 bytes: the 128B swizzle's span).
inline constexpr int64_t kPanelColumns = 64;
inline constexpr int64_t kPanelRowBytes = 128;
/// Bytes of 8 panel rows: one swizzle pattern (the SBO of every operand).
inline constexpr int64_t kSwizzleAtomBytes = 1024;

/// The matrix descriptor of wgmma (PTX ISA, "Matrix Descriptor Format").
constexpr uint64_t encodeDescriptor(uint64_t startAddress,
                                    uint64_t leadingByteOffset,
                                    uint64_t strideByteOffset,
                                    Swizzle swizzle) {
  return ((startAddress >> 4) & 0x3FFF) |
         (((leadingByteOffset >> 4) & 0x3FFF) << 16) |
         (((strideByteOffset >> 4) & 0x3FFF) << 32) |
         (static_cast<uint64_t>(swizzle) << 62);
}

/// The element offset of (row, col) in a panelled 16-bit tile of `rows`
/// rows (col below the tile's width, a multiple of 64).
constexpr int64_t panelElementOffset(int64_t rows, int64_t row, int64_t col) {
  const int64_t panel = col / kPanelColumns, c = col % kPanelColumns;
  return panel * rows * kPanelColumns + row * kPanelColumns +
         ((c / 8) ^ (row % 8)) * 8 + c % 8;
}

/// What a descriptor of one k16 step holds besides the tile's address:
/// the byte offset from the tile's start, LBO and SBO.
struct StepDescriptor {
  int64_t offset, leadingByteOffset, strideByteOffset;
};

/// A K-major operand (Q as A of Q.K^T, K as B: rows are M or N, the 16
/// columns of k step `kk` are contiguous) of a panelled tile of `rows`
/// rows, starting at row `firstRow` (a multiple of 8: a warpgroup's 64
/// rows of Q): panel kk / 4, 32 bytes per step inside it; 8-row groups
/// 1024 bytes apart (SBO); LBO is unused with a swizzle (1, as the ISA
/// asks for).
constexpr StepDescriptor kMajorStep(int64_t rows, int64_t firstRow,
                                    int64_t kk) {
  return {(kk / 4) * rows * kPanelRowBytes + firstRow * kPanelRowBytes +
              (kk % 4) * 32,
          16, kSwizzleAtomBytes};
}

/// An MN-major operand (V as B of P.V, imm-trans-b = 1: the k dimension is
/// the tile's rows, the keys; N its columns) of a panelled tile of `rows`
/// rows: k step kk starts at row 16 kk; the next 64 columns are the next
/// panel (LBO = rows x 128 bytes), the next 8 keys 1024 bytes further
/// (SBO).
constexpr StepDescriptor mnMajorStep(int64_t rows, int64_t kk) {
  return {16 * kk * kPanelRowBytes, rows * kPanelRowBytes, kSwizzleAtomBytes};
}

} // namespace wgmma
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_WGMMALAYOUT_H
