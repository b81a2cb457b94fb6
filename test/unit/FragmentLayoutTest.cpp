//===- FragmentLayoutTest.cpp - lane ownership of the GPU tiles ----------===//
//
// passes/Conversion/TileToGPU/FragmentLayout.h against the fragments of
// mma.sync.m16n8k16 as the PTX ISA states them ("Matrix fragments for
// mma.m16n8k16 with floating point type"), written out here independently:
// for lane l, groupID = l >> 2, threadID_in_group = l % 4,
//   C/D c_i (i = 0..3): row groupID + 8 * (i >= 2), col 2 * tig + (i & 1)
//   A   a_i (i = 0..7): row groupID + 8 * (i % 4 >= 2),
//                       col 2 * tig + (i & 1) + 8 * (i >= 4)
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/TileToGPU/FragmentLayout.h"
#include "passes/Conversion/TileToGPU/WgmmaLayout.h"

#include "gtest/gtest.h"

#include <set>
#include <utility>
#include <vector>

using mlir::kvattn::FragmentLayout;

namespace {

constexpr FragmentLayout kLayout = FragmentLayout::mmaM16N8K16Accumulator();

/// (row, column) of the lane's entry (k, slice j, element el) in its warp's
/// tile, from the layout.
std::pair<int64_t, int64_t> entryOf(int64_t lane, int k, int64_t j, int el) {
  return {lane / kLayout.lanesPerRow + kLayout.rowOffset(k),
          kLayout.columnOffset(j, el) +
              kLayout.elementsPerRow * (lane % kLayout.lanesPerRow)};
}

TEST(FragmentLayout, AccumulatorIsThePtxCFragment) {
  EXPECT_EQ(kLayout.warpRows, 16);
  EXPECT_EQ(kLayout.sliceColumns, 8);
  EXPECT_EQ(kLayout.registersPerSlice(), 4);
  for (int64_t lane = 0; lane < 32; ++lane) {
    const int64_t group = lane >> 2, tig = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int k = kLayout.rowOfRegister(i);
      const int el = kLayout.elementOfRegister(i);
      auto [row, col] = entryOf(lane, k, /*j=*/0, el);
      EXPECT_EQ(row, group + 8 * (i >= 2)) << "lane " << lane << " c" << i;
      EXPECT_EQ(col, 2 * tig + (i & 1)) << "lane " << lane << " c" << i;
    }
  }
}

TEST(FragmentLayout, EveryEntryOwnedOnce) {
  // A [16 x 64] tile (8 slices): each element belongs to exactly one
  // (lane, k, slice, element), and a lane holds entriesPerLane of them.
  const int64_t columns = 64;
  EXPECT_EQ(kLayout.slices(columns), 8);
  EXPECT_EQ(kLayout.entriesPerLane(columns), 32);
  std::set<std::pair<int64_t, int64_t>> owned;
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int k = 0; k < kLayout.rowsPerLane; ++k)
      for (int64_t j = 0; j < kLayout.slices(columns); ++j)
        for (int el = 0; el < kLayout.elementsPerRow; ++el) {
          auto entry = entryOf(lane, k, j, el);
          EXPECT_LT(entry.first, kLayout.warpRows);
          EXPECT_LT(entry.second, columns);
          EXPECT_TRUE(owned.insert(entry).second)
              << "(" << entry.first << ", " << entry.second << ") twice";
        }
  EXPECT_EQ(owned.size(), static_cast<size_t>(kLayout.warpRows * columns));
  // Odd widths round up to whole slices.
  EXPECT_EQ(kLayout.slices(12), 2);
}

TEST(FragmentLayout, RowShufflesCombineTheLanesOfARow) {
  // xor 1 and 2 reach exactly the lanes with the same groupID.
  EXPECT_EQ(kLayout.rowShuffleOffsets(), (std::vector<int32_t>{1, 2}));
  for (int64_t lane = 0; lane < 32; ++lane) {
    std::set<int64_t> reached = {lane};
    for (int32_t offset : kLayout.rowShuffleOffsets()) {
      std::set<int64_t> next = reached;
      for (int64_t l : reached)
        next.insert(l ^ offset);
      reached = next;
    }
    std::set<int64_t> sameRow;
    for (int64_t l = 0; l < 32; ++l)
      if (l >> 2 == lane >> 2)
        sameRow.insert(l);
    EXPECT_EQ(reached, sameRow) << "lane " << lane;
  }
}

TEST(FragmentLayout, AccumulatorOfTwoSlicesIsTheAOperand) {
  // P.V's A operand of k step kk (keys 16kk .. 16kk + 15) from the lane's
  // own Q.K^T accumulator entries: register pair p = a_{2p}, a_{2p+1}.
  for (int64_t kk = 0; kk < 4; ++kk) {
    auto entries = kLayout.aOperandEntries(kk);
    for (int64_t lane = 0; lane < 32; ++lane) {
      const int64_t group = lane >> 2, tig = lane % 4;
      for (int i = 0; i < 8; ++i) {
        const auto &entry = entries[i / 2];
        auto [row, col] = entryOf(lane, entry.k, entry.slice, i & 1);
        EXPECT_EQ(row, group + 8 * (i % 4 >= 2)) << "lane " << lane;
        EXPECT_EQ(col, 16 * kk + 2 * tig + (i & 1) + 8 * (i >= 4))
            << "lane " << lane << " a" << i << " kk " << kk;
      }
    }
  }
}

TEST(FragmentLayout, TwoTilesPerWarpAreTheCFragmentsOfStackedMmas) {
  // 32-row warps: m16 tile t is rows [16t, 16t + 16); its mma registers c_i
  // and A registers a_i are the PTX fragments shifted down by 16t, and the
  // warp's [32 x 64] tile is owned once.
  constexpr FragmentLayout two = FragmentLayout::mmaM16N8K16Accumulator(2);
  EXPECT_EQ(two.warpRows, 32);
  EXPECT_EQ(two.rowsPerLane, 4);
  EXPECT_EQ(two.mmaTiles(), 2);
  EXPECT_EQ(two.rowsPerLanePerTile(), 2);
  EXPECT_EQ(two.registersPerSlice(), 4);
  EXPECT_EQ(kLayout.mmaTiles(), 1);
  auto entry = [&](int64_t lane, int k, int64_t j, int el) {
    return std::pair<int64_t, int64_t>{
        lane / two.lanesPerRow + two.rowOffset(k),
        two.columnOffset(j, el) +
            two.elementsPerRow * (lane % two.lanesPerRow)};
  };
  for (int64_t tile = 0; tile < 2; ++tile)
    for (int64_t lane = 0; lane < 32; ++lane) {
      const int64_t group = lane >> 2, tig = lane % 4;
      for (int i = 0; i < 4; ++i) {
        auto [row, col] = entry(lane, two.rowOfRegister(i, tile), 0,
                                two.elementOfRegister(i));
        EXPECT_EQ(row, 16 * tile + group + 8 * (i >= 2)) << "lane " << lane;
        EXPECT_EQ(col, 2 * tig + (i & 1));
      }
      for (int64_t kk = 0; kk < 4; ++kk) {
        auto entries = two.aOperandEntries(kk, tile);
        for (int i = 0; i < 8; ++i) {
          auto [row, col] =
              entry(lane, entries[i / 2].k, entries[i / 2].slice, i & 1);
          EXPECT_EQ(row, 16 * tile + group + 8 * (i % 4 >= 2));
          EXPECT_EQ(col, 16 * kk + 2 * tig + (i & 1) + 8 * (i >= 4));
        }
      }
    }
  std::set<std::pair<int64_t, int64_t>> owned;
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int k = 0; k < two.rowsPerLane; ++k)
      for (int64_t j = 0; j < two.slices(64); ++j)
        for (int el = 0; el < two.elementsPerRow; ++el)
          EXPECT_TRUE(owned.insert(entry(lane, k, j, el)).second);
  EXPECT_EQ(owned.size(), static_cast<size_t>(32 * 64));
  EXPECT_EQ(two.entriesPerLane(64), 64);
}

// wgmma.mma_async.m64nNk16's f32 accumulator (PTX ISA, "Register fragments:
// wgmma .m64nNk16", written out here): thread t of the warpgroup holds
// d[i] at row 16 (t / 32) + (t % 32) / 4 + 8 ((i % 4) / 2), column
// 8 (i / 4) + 2 (t % 4) + i % 2. The layout's warp w owns rows 16w + ..., so
// the program's warp w (16-row warps) is warp w % 4 of warpgroup w / 4.
TEST(FragmentLayout, WgmmaAccumulatorIsThePtxFragment) {
  constexpr FragmentLayout wg = FragmentLayout::wgmmaM64NK16Accumulator();
  EXPECT_EQ(wg.mmaRows(), 64);
  EXPECT_EQ(wg.warpsPerMma, 4);
  for (int64_t n : {64, 128, 256}) {
    std::set<std::pair<int64_t, int64_t>> owned;
    for (int64_t t = 0; t < 128; ++t) {
      const int64_t warp = t / 32, lane = t % 32;
      for (int i = 0; i < n / 2; ++i) {
        FragmentLayout::WgmmaEntry e = wg.registerOfWgmma(i);
        const int64_t row =
            warp * wg.warpRows + lane / wg.lanesPerRow + wg.rowOffset(e.k);
        const int64_t col = wg.columnOffset(e.slice, e.el) +
                            wg.elementsPerRow * (lane % wg.lanesPerRow);
        EXPECT_EQ(row, 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2));
        EXPECT_EQ(col, 8 * (i / 4) + 2 * (t % 4) + i % 2);
        EXPECT_TRUE(owned.insert({row, col}).second);
      }
    }
    EXPECT_EQ(owned.size(), static_cast<size_t>(64 * n));
    EXPECT_EQ(wg.entriesPerLane(n), n / 2);
  }
  // The RS A fragment of k step kk is the accumulator of slices 2kk, 2kk+1
  // (the mma.sync A layout per warp): as for mma.sync.
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int64_t kk = 0; kk < 4; ++kk) {
      auto entries = wg.aOperandEntries(kk);
      for (int i = 0; i < 8; ++i) {
        const int64_t row = lane / 4 + wg.rowOffset(entries[i / 2].k);
        const int64_t col =
            wg.columnOffset(entries[i / 2].slice, i & 1) + 2 * (lane % 4);
        EXPECT_EQ(row, lane / 4 + 8 * (i % 4 >= 2));
        EXPECT_EQ(col, 16 * kk + 2 * (lane % 4) + (i & 1) + 8 * (i >= 4));
      }
    }
}

namespace wgmma = mlir::kvattn::wgmma;

/// The shared byte a descriptor addresses for element (mn, k) of a 64 x 16
/// or N x 16 operand, as the PTX ISA ("Matrix Descriptor Format", "Shared
/// Memory Matrix Layout") states it for the 128-byte swizzle: K-major rows
/// of 128 bytes, 8-row groups SBO apart; MN-major 64 elements of MN per
/// 128-byte k row, the next 64 LBO further, 8-k groups SBO apart; then
/// address bits 4-6 ^= bits 7-9.
uint64_t decode(uint64_t desc, bool mnMajor, int64_t mn, int64_t k) {
  const uint64_t start = (desc & 0x3FFF) << 4;
  const uint64_t lbo = ((desc >> 16) & 0x3FFF) << 4;
  const uint64_t sbo = ((desc >> 32) & 0x3FFF) << 4;
  EXPECT_EQ(desc >> 62, 1u) << "128B swizzle";
  const uint64_t off = mnMajor
                           ? start + (mn % 64) * 2 + (mn / 64) * lbo +
                                 (k % 8) * 128 + (k / 8) * sbo
                           : start + (mn / 8) * sbo + (mn % 8) * 128 + k * 2;
  return off ^ (((off >> 7) & 7) << 4);
}

TEST(WgmmaLayout, DescriptorFields) {
  EXPECT_EQ(wgmma::encodeDescriptor(0x12340, 16, 1024, wgmma::Swizzle::B128),
            0x1234ull | (1ull << 16) | (64ull << 32) | (1ull << 62));
  EXPECT_EQ(wgmma::encodeDescriptor(0, 0, 0, wgmma::Swizzle::B32) >> 62, 3u);
  // Addresses above 256 KB wrap: the field is 14 bits.
  EXPECT_EQ(wgmma::encodeDescriptor(0x40010, 0, 0, wgmma::Swizzle::None), 1u);
}

// Every element a k16 step's descriptor reads is where the panelled tile
// stores it (Q and K: K-major, a warpgroup's rows; V: MN-major).
TEST(WgmmaLayout, DescriptorsReadThePanelledTiles) {
  const uint64_t base = 3 * 1024 * 8; // a 1024-aligned tile offset
  for (int64_t rows : {64, 128}) {
    for (int64_t width : {64, 128, 256}) {
      for (int64_t first : {int64_t(0), rows - 64})
        for (int64_t kk = 0; kk < width / 16; ++kk) {
          wgmma::StepDescriptor s = wgmma::kMajorStep(rows, first, kk);
          const uint64_t desc =
              wgmma::encodeDescriptor(base + s.offset, s.leadingByteOffset,
                                      s.strideByteOffset, wgmma::Swizzle::B128);
          for (int64_t m = 0; m < 64; ++m)
            for (int64_t k = 0; k < 16; ++k)
              ASSERT_EQ(decode(desc, false, m, k),
                        base + 2 * wgmma::panelElementOffset(rows, first + m,
                                                             16 * kk + k))
                  << rows << " " << width << " " << kk << " " << m << " " << k;
        }
      // V: rows are keys (the k of P.V), columns the N.
      for (int64_t kk = 0; kk < rows / 16; ++kk) {
        wgmma::StepDescriptor s = wgmma::mnMajorStep(rows, kk);
        const uint64_t desc =
            wgmma::encodeDescriptor(base + s.offset, s.leadingByteOffset,
                                    s.strideByteOffset, wgmma::Swizzle::B128);
        for (int64_t n = 0; n < width; ++n)
          for (int64_t k = 0; k < 16; ++k)
            ASSERT_EQ(decode(desc, true, n, k),
                      base +
                          2 * wgmma::panelElementOffset(rows, 16 * kk + k, n));
      }
    }
  }
  // One panel is the sm_80 lowering's chunk swizzle (swizzledCol).
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 64; ++c)
      EXPECT_EQ(wgmma::panelElementOffset(64, r, c),
                r * 64 + ((c / 8) ^ (r % 8)) * 8 + c % 8);
}

} // namespace
