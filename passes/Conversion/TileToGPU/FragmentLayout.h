//===- FragmentLayout.h - which lane holds which element --------*- C++ -*-===//
//
// The ownership of a warp's score, probability and accumulator entries by
// its lanes, described once. The GPU lowering (scalar and tensor cores)
// asks it for a lane's rows and columns, the private register array of a
// tile, the shuffles that combine the lanes of a row and which accumulator
// entries form an A operand, instead of spelling out mma.sync.m16n8k16's
// fragment in each tile op. One layout today, the m16n8k16 accumulator;
// wgmma's m64nNk16 accumulator is the same pattern per warp of a warpgroup
// (a second instance with 16 * (warp % 4) row offsets and N-wide slices).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_FRAGMENTLAYOUT_H
#define KVATTN_PASSES_CONVERSION_FRAGMENTLAYOUT_H

#include <array>
#include <cstdint>
#include <vector>

namespace mlir {
namespace kvattn {

/// A warp's [warpRows x N] tile, split into slices of `sliceColumns`
/// columns. In every slice lane l holds `rowsPerLane` rows,
/// `l / lanesPerRow + rowStride * k`, and in each of them
/// `elementsPerRow` adjacent columns,
/// `elementsPerRow * (l % lanesPerRow) + el`. A lane's entries of a tile are
/// its private [rowsPerLane][slices][elementsPerRow] array, indexed by
/// compile-time constants only (registers: privateTileType in
/// GpuEmitter.h). Plain C++, no MLIR: test/unit/FragmentLayoutTest.cpp
/// checks it against the PTX ISA's fragments.
struct FragmentLayout {
  int64_t warpRows;
  int64_t rowsPerLane;
  int64_t rowStride;
  int64_t sliceColumns;
  int64_t elementsPerRow;
  int64_t lanesPerRow;

  /// mma.sync.m16n8k16's accumulator (C and D, PTX ISA "Matrix fragments
  /// for mma.m16n8k16"): c0 c1 = (l / 4, 2 (l % 4) + {0, 1}),
  /// c2 c3 = (l / 4 + 8, ...), per 8-column slice.
  static constexpr FragmentLayout mmaM16N8K16Accumulator() {
    return {/*warpRows=*/16,    /*rowsPerLane=*/2,
            /*rowStride=*/8,
            /*sliceColumns=*/8, /*elementsPerRow=*/2,
            /*lanesPerRow=*/4};
  }

  /// Slices of a tile `columns` wide.
  int64_t slices(int64_t columns) const {
    return (columns + sliceColumns - 1) / sliceColumns;
  }
  /// The entries a lane holds of a [warpRows x columns] tile.
  int64_t entriesPerLane(int64_t columns) const {
    return rowsPerLane * slices(columns) * elementsPerRow;
  }
  /// The offset of a lane's row k within its warp's rows, from the lane's
  /// index within its row group (`lane / lanesPerRow`).
  int64_t rowOffset(int k) const { return rowStride * k; }
  /// The first column of element `el` of slice `j`, before the lane's own
  /// offset `elementsPerRow * (lane % lanesPerRow)`.
  int64_t columnOffset(int64_t j, int el) const {
    return sliceColumns * j + el;
  }
  /// Register i of an mma accumulator slice (c0 .. c3) is the lane's entry
  /// (row k, element el) of that slice.
  int rowOfRegister(int i) const { return i / elementsPerRow; }
  int elementOfRegister(int i) const { return i % elementsPerRow; }
  int registersPerSlice() const { return rowsPerLane * elementsPerRow; }

  /// The xor distances of the shuffles that combine the `lanesPerRow`
  /// lanes of a row (1, 2 for a quad).
  std::vector<int32_t> rowShuffleOffsets() const {
    std::vector<int32_t> offsets;
    for (int64_t d = 1; d < lanesPerRow; d *= 2)
      offsets.push_back(static_cast<int32_t>(d));
    return offsets;
  }

  /// The entries whose 16-bit pairs form the A operand of the m16n8k16 k
  /// step `kk` (16 columns from 16 kk): registers a0a1, a2a3, a4a5, a6a7 are
  /// (slice 2kk, row 0), (slice 2kk, row 1), (slice 2kk + 1, row 0),
  /// (slice 2kk + 1, row 1), elements {0, 1} each — the accumulator of two
  /// adjacent slices is the A fragment (FlashAttention-2's observation), so
  /// P.V reads the probabilities where Q.K^T left its scores.
  struct Entry {
    int k;
    int64_t slice;
  };
  std::array<Entry, 4> aOperandEntries(int64_t kk) const {
    return {Entry{0, 2 * kk}, Entry{1, 2 * kk}, Entry{0, 2 * kk + 1},
            Entry{1, 2 * kk + 1}};
  }
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_FRAGMENTLAYOUT_H
