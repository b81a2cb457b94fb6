//===- FragmentLayout.h - which lane holds which element --------*- C++ -*-===//
//
// The ownership of a warp's score, probability and accumulator entries by
// its lanes, described once. The GPU lowering (scalar and tensor cores)
// asks it for a lane's rows and columns, the private register array of a
// tile, the shuffles that combine the lanes of a row and which accumulator
// entries form an A operand, instead of spelling out mma.sync.m16n8k16's
// fragment in each tile op. The m16n8k16 accumulator of one or two m16
// tiles per warp (16- or 32-row warps: the second tile's rows are the
// first's + 16, its registers rows k = 2, 3 of the lane); wgmma's m64nNk16
// accumulator is the same pattern per warp of a warpgroup (a further
// instance with 16 * (warp % 4) row offsets and N-wide slices).
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
  /// Warps that issue one MMA together: 1 for mma.sync, 4 for wgmma (a
  /// warpgroup, whose m64 accumulator is 4 warps x warpRows rows).
  int64_t warpsPerMma = 1;

  /// mma.sync.m16n8k16's accumulator (C and D, PTX ISA "Matrix fragments
  /// for mma.m16n8k16"): c0 c1 = (l / 4, 2 (l % 4) + {0, 1}),
  /// c2 c3 = (l / 4 + 8, ...), per 8-column slice. With `mmaTiles` = 2 a
  /// warp owns 32 rows as two m16 tiles stacked: tile t's c0..c3 are the
  /// lane's rows k = 2t, 2t + 1 (l / 4 + 16t, l / 4 + 16t + 8), so every
  /// K/V fragment a warp loads feeds two mma.
  static constexpr FragmentLayout mmaM16N8K16Accumulator(int64_t mmaTiles = 1) {
    return {/*warpRows=*/16 * mmaTiles,
            /*rowsPerLane=*/2 * mmaTiles,
            /*rowStride=*/8,
            /*sliceColumns=*/8,
            /*elementsPerRow=*/2,
            /*lanesPerRow=*/4};
  }

  /// wgmma.mma_async.m64nNk16's f32 accumulator (PTX ISA, "Register
  /// fragments: wgmma .m64nNk16"): warp w (0-3) of the warpgroup owns rows
  /// [16w, 16w + 16) of its 64, lane l holds d[4j + r] at row
  /// l / 4 + 8 (r / 2) of them and column 8j + 2 (l % 4) + r % 2: per warp
  /// mma.sync's m16n8 C fragment, repeated over the N / 8 column slices. The
  /// lowering's 16-row warps own exactly those entries (warp w of the
  /// program = warp w % 4 of warpgroup w / 4), so the mask, the softmax and
  /// the epilogue do not change; registerOfWgmma gives d's order.
  static constexpr FragmentLayout wgmmaM64NK16Accumulator() {
    return {/*warpRows=*/16,    /*rowsPerLane=*/2,
            /*rowStride=*/8,
            /*sliceColumns=*/8, /*elementsPerRow=*/2,
            /*lanesPerRow=*/4,
            /*warpsPerMma=*/4};
  }

  /// The rows one MMA instruction covers: 16 (a warp's m16 tile) or 64 (a
  /// warpgroup's m64).
  int64_t mmaRows() const { return 16 * warpsPerMma; }
  /// The lane's entry of wgmma accumulator register d[i]: slice i / 4, row
  /// k and element el of register i % 4 of that slice (c0 .. c3 order).
  struct WgmmaEntry {
    int k;
    int64_t slice;
    int el;
  };
  WgmmaEntry registerOfWgmma(int i) const {
    const int r = i % registersPerSlice();
    return {rowOfRegister(r), i / registersPerSlice(), elementOfRegister(r)};
  }

  /// The m16 tiles of a warp's rows (1 or 2), and the rows of one lane in
  /// one of them (2: c0c1 and c2c3).
  int64_t mmaTiles() const { return warpRows / 16; }
  int64_t rowsPerLanePerTile() const { return rowsPerLane / mmaTiles(); }

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
  /// Register i of an mma accumulator slice (c0 .. c3) of m16 tile `tile`
  /// is the lane's entry (row k, element el) of that slice.
  int rowOfRegister(int i, int64_t tile = 0) const {
    return static_cast<int>(tile * rowsPerLanePerTile()) + i / elementsPerRow;
  }
  int elementOfRegister(int i) const { return i % elementsPerRow; }
  /// The registers of one mma accumulator slice (c0 .. c3): one m16 tile.
  int registersPerSlice() const {
    return static_cast<int>(rowsPerLanePerTile() * elementsPerRow);
  }

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
  /// P.V reads the probabilities where Q.K^T left its scores. Of m16 tile
  /// `tile`: its rows k = 2 tile, 2 tile + 1.
  struct Entry {
    int k;
    int64_t slice;
  };
  std::array<Entry, 4> aOperandEntries(int64_t kk, int64_t tile = 0) const {
    const int k0 = rowOfRegister(0, tile),
              k1 = rowOfRegister(elementsPerRow, tile);
    return {Entry{k0, 2 * kk}, Entry{k1, 2 * kk}, Entry{k0, 2 * kk + 1},
            Entry{k1, 2 * kk + 1}};
  }
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_FRAGMENTLAYOUT_H
