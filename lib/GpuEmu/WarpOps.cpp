//===- WarpOps.cpp - warp-level PTX semantics and scalar intrinsics -------===//
//
// The fragment layouts are those of the PTX ISA (9.7.14, "Matrix multiply-
// accumulate operation using mma instruction", and ldmatrix): for lane l,
// groupID g = l / 4 and threadID_in_group t = l % 4.
//
//   mma.m16n8k16 .row A (16 x 16, 4 x b32 of two 16-bit elements):
//     a0,a1: A[g][2t, 2t+1]      a2,a3: A[g+8][2t, 2t+1]
//     a4,a5: A[g][2t+8, 2t+9]    a6,a7: A[g+8][2t+8, 2t+9]
//   .col B (16 x 8, 2 x b32):  b0,b1: B[2t, 2t+1][g]   b2,b3: B[2t+8, 2t+9][g]
//   C, D (16 x 8 f32):  c0,c1: C[g][2t, 2t+1]   c2,c3: C[g+8][2t, 2t+1]
//   (the lower 16 bits of a register hold the element with the lower index)
//
//   ldmatrix .m8n8 .b16: lanes 8m..8m+7 give the row addresses of matrix m;
//     lane l receives row l / 4, columns 2t, 2t+1 of each matrix (.trans:
//     rows 2t, 2t+1 of column l / 4).
//
// Arithmetic: products of two f16 or bf16 values are exact in f32; the
// emulator adds C and the 16 products exactly (in double, which holds them)
// and rounds once to f32. Tensor cores add with an unspecified internal
// precision, so hardware results may differ in the last bits.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "kvattn/Support/Float16.h"
#include "kvattn/Support/Float8.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

float asFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t asBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

} // namespace

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

// The conversions are kvattn's one implementation (kvattn/Support/Float16.h,
// the PTX ISA's cvt.rn: round to nearest even, NaN kept quiet, f16 overflow
// to infinity), independent of the rounding mode the directed-rounding
// instructions below set.
uint16_t floatToBf16(float value) { return floatToBFloat16Bits(value); }
uint16_t floatToHalf(float value) { return floatToHalfBits(value); }
float halfToFloat(uint16_t bits) { return halfBitsToFloat(bits); }
float bf16ToFloat(uint16_t bits) { return bfloat16BitsToFloat(bits); }

uint64_t swizzleOffset(uint64_t offset, unsigned spanBytes) {
  uint64_t bits = spanBytes == 128  ? 7
                  : spanBytes == 64 ? 3
                  : spanBytes == 32 ? 1
                                    : 0;
  return offset ^ (((offset >> 7) & bits) << 4);
}

uint64_t wgmmaElementOffset(uint64_t descriptor, bool mnMajor, int mn, int k) {
  uint64_t start = (descriptor & 0x3FFF) << 4;
  uint64_t lbo = ((descriptor >> 16) & 0x3FFF) << 4;
  uint64_t sbo = ((descriptor >> 32) & 0x3FFF) << 4;
  static const unsigned spans[4] = {0, 128, 64, 32};
  unsigned span = spans[descriptor >> 62];
  uint64_t off;
  if (!mnMajor) {
    // Rows of the M/N dimension; 8-row groups SBO apart. Without swizzle,
    // 8 x 16-byte core matrices, the next 8 k LBO apart; swizzled, a row is
    // `span` bytes of contiguous k.
    off = span == 0 ? start + (mn / 8) * sbo + (k / 8) * lbo + (mn % 8) * 16 +
                          (k % 8) * 2
                    : start + (mn / 8) * sbo + (mn % 8) * span + k * 2;
  } else {
    // M/N contiguous: `span` bytes (16 without swizzle) of it per k row.
    if (span == 0) {
      off =
          start + (mn / 8) * sbo + (mn % 8) * 2 + (k % 8) * 16 + (k / 8) * lbo;
    } else {
      unsigned perRow = span / 2;
      off = start + (mn % perRow) * 2 + (mn / perRow) * lbo + (k % 8) * span +
            (k / 8) * sbo;
    }
  }
  return swizzleOffset(off, span);
}

void wgmmaGatherA(const uint32_t *const regs[128], uint16_t *a) {
  for (int t = 0; t < 128; ++t) {
    int w = t / 32, g = (t % 32) / 4, i = t % 4;
    for (int q = 0; q < 4; ++q) {
      int row = 16 * w + g + 8 * (q % 2), col = 8 * (q / 2) + 2 * i;
      a[row * 16 + col] = static_cast<uint16_t>(regs[t][q] & 0xffffu);
      a[row * 16 + col + 1] = static_cast<uint16_t>(regs[t][q] >> 16);
    }
  }
}

void wgmmaM64NK16(int n, bool bf16, const uint16_t *a, const uint16_t *b,
                  int scaleA, int scaleB, bool scaleD, float *const acc[128]) {
  auto element = [&](uint16_t bits) {
    return bf16 ? bf16ToFloat(bits) : halfToFloat(bits);
  };
  std::vector<float> fa(64 * 16), fb(static_cast<size_t>(n) * 16);
  for (int i = 0; i < 64 * 16; ++i)
    fa[i] = element(a[i]) * float(scaleA);
  for (int i = 0; i < n * 16; ++i)
    fb[i] = element(b[i]) * float(scaleB);
  for (int t = 0; t < 128; ++t) {
    int w = t / 32, g = (t % 32) / 4, q = t % 4;
    for (int i = 0; i < n / 2; ++i) {
      int j = i / 4, r = i % 4;
      int row = 16 * w + g + 8 * (r / 2), col = 8 * j + 2 * q + (r % 2);
      double sum = scaleD ? double(acc[t][i]) : 0.0;
      for (int k = 0; k < 16; ++k)
        sum += double(fa[row * 16 + k] * fb[col * 16 + k]);
      acc[t][i] = static_cast<float>(sum);
    }
  }
}

void mmaM16N8K16(bool bf16, uint64_t *const args[32],
                 uint64_t *const results[32]) {
  float a[16][16], b[16][8], c[16][8];
  auto element = [&](uint32_t bits) {
    return bf16 ? bf16ToFloat(static_cast<uint16_t>(bits))
                : halfToFloat(static_cast<uint16_t>(bits));
  };
  auto pair = [&](uint64_t slot, float &lo, float &hi) {
    uint32_t reg = static_cast<uint32_t>(slot);
    lo = element(reg & 0xffffu);
    hi = element(reg >> 16);
  };
  for (int l = 0; l < 32; ++l) {
    int g = l / 4, t = l % 4;
    const uint64_t *in = args[l];
    pair(in[0], a[g][2 * t], a[g][2 * t + 1]);
    pair(in[1], a[g + 8][2 * t], a[g + 8][2 * t + 1]);
    pair(in[2], a[g][2 * t + 8], a[g][2 * t + 9]);
    pair(in[3], a[g + 8][2 * t + 8], a[g + 8][2 * t + 9]);
    pair(in[4], b[2 * t][g], b[2 * t + 1][g]);
    pair(in[5], b[2 * t + 8][g], b[2 * t + 9][g]);
    c[g][2 * t] = asFloat(static_cast<uint32_t>(in[6]));
    c[g][2 * t + 1] = asFloat(static_cast<uint32_t>(in[7]));
    c[g + 8][2 * t] = asFloat(static_cast<uint32_t>(in[8]));
    c[g + 8][2 * t + 1] = asFloat(static_cast<uint32_t>(in[9]));
  }
  float d[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double sum = c[i][j];
      for (int k = 0; k < 16; ++k)
        sum += double(a[i][k]) * double(b[k][j]);
      d[i][j] = static_cast<float>(sum);
    }
  for (int l = 0; l < 32; ++l) {
    int g = l / 4, t = l % 4;
    uint64_t *out = results[l];
    out[0] = asBits(d[g][2 * t]);
    out[1] = asBits(d[g][2 * t + 1]);
    out[2] = asBits(d[g + 8][2 * t]);
    out[3] = asBits(d[g + 8][2 * t + 1]);
  }
}

void ldmatrix(int matrices, bool trans, const uint8_t *const rows[4][8],
              uint64_t *const results[32]) {
  auto at = [&](int m, int row, int col) {
    uint16_t v;
    std::memcpy(&v, rows[m][row] + 2 * col, 2);
    return uint32_t(v);
  };
  for (int l = 0; l < 32; ++l) {
    int g = l / 4, t = l % 4;
    for (int m = 0; m < matrices; ++m) {
      uint32_t lo, hi;
      if (trans) {
        lo = at(m, 2 * t, g);
        hi = at(m, 2 * t + 1, g);
      } else {
        lo = at(m, g, 2 * t);
        hi = at(m, g, 2 * t + 1);
      }
      results[l][m] = lo | (hi << 16);
    }
  }
}

void shflSync(Site::ShflMode mode, bool predicate, uint32_t active,
              uint64_t *const args[32], uint64_t *const results[32]) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(active >> lane & 1u))
      continue;
    const uint64_t *in = args[lane];
    int b = static_cast<int>(in[2] & 0x1fu);
    uint32_t c = static_cast<uint32_t>(in[3]);
    int clamp = static_cast<int>(c & 0x1fu);
    int segmask = static_cast<int>((c >> 8) & 0x1fu);
    int maxLane = (lane & segmask) | (clamp & ~segmask);
    int minLane = lane & segmask;
    int j = lane;
    bool inRange = false;
    switch (mode) {
    case Site::Up:
      j = lane - b;
      inRange = j >= maxLane;
      break;
    case Site::Down:
      j = lane + b;
      inRange = j <= maxLane;
      break;
    case Site::Bfly:
      j = lane ^ b;
      inRange = j <= maxLane;
      break;
    case Site::Idx:
      j = minLane | (b & ~segmask);
      inRange = j <= maxLane;
      break;
    }
    if (!inRange)
      j = lane;
    results[lane][0] = static_cast<uint32_t>(args[j][1]);
    if (predicate)
      results[lane][1] = inRange ? 1 : 0;
  }
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir

//===----------------------------------------------------------------------===//
// Scalar intrinsics (called from JIT code through the C ABI)
//===----------------------------------------------------------------------===//

using namespace mlir::kvattn::emu::detail;

namespace {

/// ftz: subnormal inputs and results become zero of the same sign.
float flush(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

float fmaRounded(float a, float b, float c, int mode) {
  int saved = std::fegetround();
  std::fesetround(mode);
  volatile float va = a, vb = b, vc = c;
  float r = std::fmaf(va, vb, vc);
  std::fesetround(saved);
  return r;
}

} // namespace

extern "C" {

// ex2.approx.f32: the hardware's maximum relative error is 2^-22 or so
// (PTX ISA: "maximum relative error ... 2 ulp" across the range); the host's
// exp2f is within 1 ulp. Results may differ from a GPU's in the last bits.
float kvemu_ex2_approx(float x) { return std::exp2(x); }
float kvemu_ex2_approx_ftz(float x) { return flush(std::exp2(flush(x))); }
float kvemu_lg2_approx(float x) { return std::log2(x); }
float kvemu_lg2_approx_ftz(float x) { return flush(std::log2(flush(x))); }
float kvemu_fabs(float x) { return std::fabs(x); }
float kvemu_saturate(float x) {
  if (std::isnan(x))
    return 0.0f;
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
float kvemu_fmax(float a, float b) { return std::fmax(a, b); }
float kvemu_fmin(float a, float b) { return std::fmin(a, b); }
float kvemu_fma_rn(float a, float b, float c) {
  return fmaRounded(a, b, c, FE_TONEAREST);
}
float kvemu_fma_rz(float a, float b, float c) {
  return fmaRounded(a, b, c, FE_TOWARDZERO);
}
float kvemu_fma_rm(float a, float b, float c) {
  return fmaRounded(a, b, c, FE_DOWNWARD);
}
float kvemu_fma_rp(float a, float b, float c) {
  return fmaRounded(a, b, c, FE_UPWARD);
}
float kvemu_add_rn(float a, float b) { return a + b; }
float kvemu_mul_rn(float a, float b) { return a * b; }
float kvemu_rcp_rn(float x) { return 1.0f / x; }
// rcp.approx.ftz.f32: the hardware's maximum relative error is 1 ulp; the
// emulator rounds the exact reciprocal.
float kvemu_rcp_approx_ftz(float x) { return flush(1.0f / flush(x)); }
float kvemu_sqrt_rn(float x) { return std::sqrt(x); }
uint16_t kvemu_f32_to_bf16(float x) { return floatToBf16(x); }
uint16_t kvemu_f32_to_f16(float x) { return floatToHalf(x); }
float kvemu_f16_to_f32(uint16_t bits) { return halfToFloat(bits); }
float kvemu_bf16_to_f32(uint16_t bits) { return bf16ToFloat(bits); }

// FP8 (PTX ISA, cvt): f32 pairs to e4m3x2/e5m2x2 round to nearest even and
// saturate to the largest finite value (.satfinite, required by the ISA for
// these conversions), NaN to the canonical NaN; .relu clamps negative
// values to +0 first (NaN stays NaN). e4m3x2/e5m2x2 to f16x2 is exact; a NaN
// becomes the canonical f16 NaN 0x7fff, .relu clamps negative results to
// +0. Operand a (the first) lands in the upper half.
namespace {
using mlir::kvattn::Float8Format;
uint8_t toFloat8(float x, Float8Format f, bool relu) {
  if (relu && !std::isnan(x) && x < 0.0f)
    x = 0.0f;
  return mlir::kvattn::floatToFloat8(x, f);
}
uint16_t toHalfBits(uint8_t code, Float8Format f, bool relu) {
  float x = mlir::kvattn::float8ToFloat(code, f);
  if (std::isnan(x))
    return 0x7fff;
  if (relu && x < 0.0f)
    return 0;
  return mlir::kvattn::floatToHalfBits(x); // exact
}
uint16_t packFloat8(float a, float b, Float8Format f, bool relu) {
  return static_cast<uint16_t>(toFloat8(a, f, relu) << 8 |
                               toFloat8(b, f, relu));
}
uint32_t unpackFloat8(uint16_t pair, Float8Format f, bool relu) {
  return static_cast<uint32_t>(toHalfBits(pair >> 8, f, relu)) << 16 |
         toHalfBits(pair & 0xff, f, relu);
}
} // namespace

uint16_t kvemu_ff_to_e4m3x2_rn(float a, float b) {
  return packFloat8(a, b, Float8Format::E4M3FN, false);
}
uint16_t kvemu_ff_to_e4m3x2_rn_relu(float a, float b) {
  return packFloat8(a, b, Float8Format::E4M3FN, true);
}
uint16_t kvemu_ff_to_e5m2x2_rn(float a, float b) {
  return packFloat8(a, b, Float8Format::E5M2, false);
}
uint16_t kvemu_ff_to_e5m2x2_rn_relu(float a, float b) {
  return packFloat8(a, b, Float8Format::E5M2, true);
}
uint32_t kvemu_prmt(uint32_t a, uint32_t b, uint32_t c) {
  const uint64_t pool = uint64_t(b) << 32 | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t select = c >> (4 * i) & 0xf;
    uint32_t byte = pool >> (8 * (select & 7)) & 0xff;
    if (select & 8)
      byte = byte & 0x80 ? 0xff : 0;
    d |= byte << (8 * i);
  }
  return d;
}

uint32_t kvemu_e4m3x2_to_f16x2_rn(uint16_t pair) {
  return unpackFloat8(pair, Float8Format::E4M3FN, false);
}
uint32_t kvemu_e4m3x2_to_f16x2_rn_relu(uint16_t pair) {
  return unpackFloat8(pair, Float8Format::E4M3FN, true);
}
uint32_t kvemu_e5m2x2_to_f16x2_rn(uint16_t pair) {
  return unpackFloat8(pair, Float8Format::E5M2, false);
}
uint32_t kvemu_e5m2x2_to_f16x2_rn_relu(uint16_t pair) {
  return unpackFloat8(pair, Float8Format::E5M2, true);
}
}
