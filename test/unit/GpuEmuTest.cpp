//===- GpuEmuTest.cpp - the emulated GPU on hand-written device IR --------===//
//
// Small NVPTX kernels in LLVM IR, run through libkvattn_cuda_emu.so's
// driver entry points (dlopen, as the runtime does): the PTX ISA's
// fragment layouts of mma.sync and ldmatrix, shfl.sync, cp.async landing
// and zero-fill, and every check and error the emulator promises (memcheck,
// racecheck, barriers some threads never reach, collectives reached by part
// of a warp, unknown intrinsics, PTX given instead of IR), plus the bank
// and sector counters on access patterns whose cost is known.
//
//===----------------------------------------------------------------------===//

#include "EmuDriverHelper.h"
#include "kvattn/Support/Float16.h"
#include "kvattn/Support/Float8.h"
#include "runtime/CudaApi.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace mlir::kvattn::cuda;

namespace {

using kvattn_test::driver;
using kvattn_test::EmuDriver;

const char *kHeader = R"(
target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
@smem = external addrspace(3) global [0 x i8], align 16
)";

// Lane l of the mma.m16n8k16 A fragment (.row, 16-bit elements) holds
// A[row][col] in register (row / 8) + 2 * (col / 8), half col % 2, for
// row % 8 == l / 4 and (col % 8) / 2 == l % 4 (PTX ISA, "Matrix fragments
// for mma.m16n8k16 with floating point type"); B (.col, 16 x 8): B[k][n] in
// register k / 8, half k % 2, for n == l / 4 and (k % 8) / 2 == l % 4;
// C/D: C[row][n] in element 2 * (row / 8) + n % 2 for row % 8 == l / 4,
// n / 2 == l % 4.
TEST(GpuEmuTest, MmaM16N8K16FragmentsFollowTheIsa) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32, i32, i32, i32, i32, i32, float, float, float, float)
define ptx_kernel void @mma(ptr %a, ptr %b, ptr %c, ptr %d) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  %ab = getelementptr [4 x i32], ptr %a, i64 %l64
  %bb = getelementptr [2 x i32], ptr %b, i64 %l64
  %cb = getelementptr [4 x float], ptr %c, i64 %l64
  %db = getelementptr [4 x float], ptr %d, i64 %l64
  %a0 = load i32, ptr %ab
  %p1 = getelementptr i32, ptr %ab, i64 1
  %a1 = load i32, ptr %p1
  %p2 = getelementptr i32, ptr %ab, i64 2
  %a2 = load i32, ptr %p2
  %p3 = getelementptr i32, ptr %ab, i64 3
  %a3 = load i32, ptr %p3
  %b0 = load i32, ptr %bb
  %q1 = getelementptr i32, ptr %bb, i64 1
  %b1 = load i32, ptr %q1
  %c0 = load float, ptr %cb
  %r1 = getelementptr float, ptr %cb, i64 1
  %c1 = load float, ptr %r1
  %r2 = getelementptr float, ptr %cb, i64 2
  %c2 = load float, ptr %r2
  %r3 = getelementptr float, ptr %cb, i64 3
  %c3 = load float, ptr %r3
  %res = call { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, float %c0, float %c1, float %c2, float %c3)
  %d0 = extractvalue { float, float, float, float } %res, 0
  %d1 = extractvalue { float, float, float, float } %res, 1
  %d2 = extractvalue { float, float, float, float } %res, 2
  %d3 = extractvalue { float, float, float, float } %res, 3
  store float %d0, ptr %db
  %s1 = getelementptr float, ptr %db, i64 1
  store float %d1, ptr %s1
  %s2 = getelementptr float, ptr %db, i64 2
  store float %d2, ptr %s2
  %s3 = getelementptr float, ptr %db, i64 3
  store float %d3, ptr %s3
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;

  // Small integers: exact in bf16, and the products' sums exact in f32.
  float A[16][16], B[16][8], C[16][8];
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k)
      A[i][k] = float((i * 7 + k * 3) % 11 - 5);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n)
      B[k][n] = float((k * 5 + n * 2) % 9 - 4);
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      C[i][n] = float(i * 8 + n) * 0.5f;
  uint32_t a[32][4] = {}, b[32][2] = {};
  float c[32][4];
  auto bits = [](float v) {
    return uint32_t(mlir::kvattn::floatToBFloat16Bits(v));
  };
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) {
      int lane = (i % 8) * 4 + (k % 8) / 2;
      a[lane][i / 8 + 2 * (k / 8)] |= bits(A[i][k]) << (16 * (k % 2));
    }
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) {
      int lane = n * 4 + (k % 8) / 2;
      b[lane][k / 8] |= bits(B[k][n]) << (16 * (k % 2));
    }
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      c[(i % 8) * 4 + n / 2][2 * (i / 8) + n % 2] = C[i][n];

  uint64_t pa = d.upload(a, sizeof a), pb = d.upload(b, sizeof b),
           pc = d.upload(c, sizeof c), pd = d.upload(nullptr, sizeof c);
  ASSERT_EQ(d.launch(m, "mma", 1, 32, 0, {pa, pb, pc, pd}), "");
  std::vector<float> out = d.download<float>(pd, 128);
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      float want = C[i][n];
      for (int k = 0; k < 16; ++k)
        want += A[i][k] * B[k][n];
      EXPECT_EQ(out[4 * ((i % 8) * 4 + n / 2) + 2 * (i / 8) + n % 2], want)
          << "D[" << i << "][" << n << "]";
    }
  for (uint64_t p : {pa, pb, pc, pd})
    d.cuMemFree(p);
}

// ldmatrix.m8n8.x4: lane 8m + r names row r of matrix m; lane l receives
// elements (l / 4, 2(l % 4)) and (l / 4, 2(l % 4) + 1) of each matrix, or
// with .trans elements (2(l % 4), l / 4) and (2(l % 4) + 1, l / 4).
TEST(GpuEmuTest, LdmatrixX4AndTransDeliverTheIsaLayout) {
  REQUIRE_DRIVER();
  auto kernel = [](bool trans) {
    std::string name = trans ? "x4.trans" : "x4";
    return std::string(kHeader) +
           "declare { i32, i32, i32, i32 } "
           "@llvm.nvvm.ldmatrix.sync.aligned.m8n8." +
           name + ".b16.p3(ptr addrspace(3))\n" + R"(
define ptx_kernel void @ld(ptr %in, ptr %out) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  ; each lane copies 8 bytes of the 4 x 8 x 8 b16 matrices (512 bytes)
  %src = getelementptr i64, ptr %in, i64 %l64
  %dst = getelementptr i64, ptr addrspace(3) @smem, i64 %l64
  %v = load i64, ptr %src
  store i64 %v, ptr addrspace(3) %dst
  %l2 = add i64 %l64, 32
  %src2 = getelementptr i64, ptr %in, i64 %l2
  %dst2 = getelementptr i64, ptr addrspace(3) @smem, i64 %l2
  %v2 = load i64, ptr %src2
  store i64 %v2, ptr addrspace(3) %dst2
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  ; lane l: row l % 8 of matrix l / 8, 16 bytes a row
  %row = getelementptr [16 x i8], ptr addrspace(3) @smem, i64 %l64
  %r = call { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.)" +
           name + R"(.b16.p3(ptr addrspace(3) %row)
  %o = getelementptr [4 x i32], ptr %out, i64 %l64
  %r0 = extractvalue { i32, i32, i32, i32 } %r, 0
  %r1 = extractvalue { i32, i32, i32, i32 } %r, 1
  %r2 = extractvalue { i32, i32, i32, i32 } %r, 2
  %r3 = extractvalue { i32, i32, i32, i32 } %r, 3
  store i32 %r0, ptr %o
  %o1 = getelementptr i32, ptr %o, i64 1
  store i32 %r1, ptr %o1
  %o2 = getelementptr i32, ptr %o, i64 2
  store i32 %r2, ptr %o2
  %o3 = getelementptr i32, ptr %o, i64 3
  store i32 %r3, ptr %o3
  ret void
}
)";
  };
  EmuDriver &d = driver();
  uint16_t matrices[4][8][8];
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c)
        matrices[m][r][c] = uint16_t(m * 64 + r * 8 + c);
  for (bool trans : {false, true}) {
    std::string error;
    CUmodule mod = d.load(kernel(trans), error);
    ASSERT_TRUE(mod) << error;
    uint64_t in = d.upload(matrices, sizeof matrices),
             out = d.upload(nullptr, 32 * 16);
    ASSERT_EQ(d.launch(mod, "ld", 1, 32, 512, {in, out}), "");
    std::vector<uint32_t> regs = d.download<uint32_t>(out, 128);
    for (int l = 0; l < 32; ++l)
      for (int m = 0; m < 4; ++m) {
        int g = l / 4, t = l % 4;
        uint32_t lo = trans ? matrices[m][2 * t][g] : matrices[m][g][2 * t];
        uint32_t hi =
            trans ? matrices[m][2 * t + 1][g] : matrices[m][g][2 * t + 1];
        EXPECT_EQ(regs[4 * l + m], lo | hi << 16)
            << (trans ? ".trans " : "") << "lane " << l << " matrix " << m;
      }
    d.cuMemFree(in);
    d.cuMemFree(out);
  }
}

// shfl.sync: bfly xors the lane, up/down move within the clamp, idx reads
// one lane; out-of-range sources keep the lane's own value.
TEST(GpuEmuTest, ShflSyncModes) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.up.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.idx.i32(i32, i32, i32, i32)
define ptx_kernel void @shfl(ptr %out) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v = mul i32 %l, 10
  %a = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %v, i32 5, i32 31)
  %b = call i32 @llvm.nvvm.shfl.sync.up.i32(i32 -1, i32 %v, i32 3, i32 0)
  %c = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %v, i32 3, i32 31)
  %e = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 %v, i32 7, i32 31)
  %l64 = zext i32 %l to i64
  %o = getelementptr [4 x i32], ptr %out, i64 %l64
  store i32 %a, ptr %o
  %o1 = getelementptr i32, ptr %o, i64 1
  store i32 %b, ptr %o1
  %o2 = getelementptr i32, ptr %o, i64 2
  store i32 %c, ptr %o2
  %o3 = getelementptr i32, ptr %o, i64 3
  store i32 %e, ptr %o3
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  uint64_t out = d.upload(nullptr, 32 * 16);
  ASSERT_EQ(d.launch(m, "shfl", 1, 32, 0, {out}), "");
  std::vector<int32_t> r = d.download<int32_t>(out, 128);
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(r[4 * l], (l ^ 5) * 10) << "bfly, lane " << l;
    EXPECT_EQ(r[4 * l + 1], (l >= 3 ? l - 3 : l) * 10) << "up, lane " << l;
    EXPECT_EQ(r[4 * l + 2], (l + 3 <= 31 ? l + 3 : l) * 10)
        << "down, lane " << l;
    EXPECT_EQ(r[4 * l + 3], 70) << "idx, lane " << l;
  }
  d.cuMemFree(out);
}

// barrier.cta.red.{or,and,popc}: the CTA barrier reduces one predicate of
// every thread (96 threads: three warps) and hands each thread the result.
TEST(GpuEmuTest, BarrierReductionsReduceTheWholeCta) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare i1 @llvm.nvvm.barrier.cta.red.or.aligned.all(i32, i1)
declare i1 @llvm.nvvm.barrier.cta.red.and.aligned.all(i32, i1)
declare i32 @llvm.nvvm.barrier.cta.red.popc.aligned.all(i32, i1)
define ptx_kernel void @red(ptr %out, i32 %only) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %one = icmp eq i32 %l, %only
  %any = call i1 @llvm.nvvm.barrier.cta.red.or.aligned.all(i32 0, i1 %one)
  %none = call i1 @llvm.nvvm.barrier.cta.red.or.aligned.all(i32 0, i1 false)
  %notone = icmp ne i32 %l, %only
  %all = call i1 @llvm.nvvm.barrier.cta.red.and.aligned.all(i32 0, i1 %notone)
  %bit = and i32 %l, 1
  %odd = icmp ne i32 %bit, 0
  %n = call i32 @llvm.nvvm.barrier.cta.red.popc.aligned.all(i32 0, i1 %odd)
  %l64 = zext i32 %l to i64
  %o = getelementptr [4 x i32], ptr %out, i64 %l64
  %a = zext i1 %any to i32
  store i32 %a, ptr %o
  %o1 = getelementptr i32, ptr %o, i64 1
  %b = zext i1 %none to i32
  store i32 %b, ptr %o1
  %o2 = getelementptr i32, ptr %o, i64 2
  %c = zext i1 %all to i32
  store i32 %c, ptr %o2
  %o3 = getelementptr i32, ptr %o, i64 3
  store i32 %n, ptr %o3
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  uint64_t out = d.upload(nullptr, 96 * 16);
  // Thread 70 alone holds the predicate; then none does.
  for (uint32_t only : {70u, 1000u}) {
    ASSERT_EQ(d.launch(m, "red", 1, 96, 0, {out, only}), "");
    std::vector<int32_t> r = d.download<int32_t>(out, 96 * 4);
    for (int t = 0; t < 96; ++t) {
      EXPECT_EQ(r[4 * t], only < 96 ? 1 : 0) << "or, thread " << t;
      EXPECT_EQ(r[4 * t + 1], 0) << "or of false, thread " << t;
      EXPECT_EQ(r[4 * t + 2], only < 96 ? 0 : 1) << "and, thread " << t;
      EXPECT_EQ(r[4 * t + 3], 48) << "popc, thread " << t;
    }
  }
  d.cuMemFree(out);
}

// mul.rn.f16 (LLVM's fmul half, what mul.rn.f16x2 computes): the product
// rounded once to nearest even, subnormals kept, NaN and infinities.
TEST(GpuEmuTest, HalfMultiplyRoundsOnce) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
define ptx_kernel void @mul(ptr %a, ptr %b, ptr %out) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  %pa = getelementptr <2 x half>, ptr %a, i64 %l64
  %pb = getelementptr <2 x half>, ptr %b, i64 %l64
  %po = getelementptr <2 x half>, ptr %out, i64 %l64
  %x = load <2 x half>, ptr %pa
  %y = load <2 x half>, ptr %pb
  %p = fmul <2 x half> %x, %y
  store <2 x half> %p, ptr %po
  ret void
}
)";
  using mlir::kvattn::floatToHalfBits;
  using mlir::kvattn::halfBitsToFloat;
  // (a, b) pairs: exact products, a tie to even, the smallest subnormal
  // times 256, overflow to infinity, NaN, -0.
  const float pairs[][2] = {{3.0f, 0.5f},       {1.0009765625f, 1.5f},
                            {0x1p-24f, 256.0f}, {1.75f / 256.0f, 256.0f},
                            {300.0f, 300.0f},   {NAN, 2.0f},
                            {-0.0f, 5.0f},      {1.5f, 0x1p-20f}};
  constexpr int n = sizeof pairs / sizeof pairs[0];
  uint16_t a[n], b[n];
  for (int i = 0; i < n; ++i) {
    a[i] = floatToHalfBits(pairs[i][0]);
    b[i] = floatToHalfBits(pairs[i][1]);
  }
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  uint64_t da = d.upload(a, sizeof a), db = d.upload(b, sizeof b),
           dout = d.upload(nullptr, sizeof a);
  ASSERT_EQ(d.launch(m, "mul", 1, n / 2, 0, {da, db, dout}), "");
  std::vector<uint16_t> r = d.download<uint16_t>(dout, n);
  for (int i = 0; i < n; ++i) {
    const float want = halfBitsToFloat(
        floatToHalfBits(halfBitsToFloat(a[i]) * halfBitsToFloat(b[i])));
    const float got = halfBitsToFloat(r[i]);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << "pair " << i;
    else
      EXPECT_EQ(floatToHalfBits(got), floatToHalfBits(want))
          << "pair " << i << ": " << got << " against " << want;
  }
  // The tie: (1 + 2^-10) * 1.5 = 1.5 + 1.5 ulps (an ulp is 2^-10 there),
  // halfway between mantissas 0x201 and 0x202: to even, 1.501953125;
  // 2^-24 * 256 is 2^-16 (a subnormal in, a normal out); 300^2 overflows.
  EXPECT_EQ(halfBitsToFloat(r[1]), 1.501953125f);
  EXPECT_EQ(halfBitsToFloat(r[2]), 0x1p-16f);
  EXPECT_EQ(halfBitsToFloat(r[3]), 1.75f);
  EXPECT_TRUE(std::isinf(halfBitsToFloat(r[4])));
  EXPECT_TRUE(std::signbit(halfBitsToFloat(r[6])));
  d.cuMemFree(da);
  d.cuMemFree(db);
  d.cuMemFree(dout);
}

// The FP8 conversions of the PTX ISA (cvt.rn.satfinite{.relu}.e4m3x2.f32 /
// .e5m2x2.f32, cvt.rn{.relu}.f16x2.e4m3x2 / .e5m2x2): operand a in the upper
// byte (half), round to nearest even, saturation to the largest finite value
// (infinities too), the canonical NaNs; checked against
// kvattn/Support/Float8.h, which Float8Test checks against a search over
// every code.
TEST(GpuEmuTest, Fp8ConversionsFollowTheIsa) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare i16 @llvm.nvvm.ff.to.e4m3x2.rn(float, float)
declare i16 @llvm.nvvm.ff.to.e4m3x2.rn.relu(float, float)
declare i16 @llvm.nvvm.ff.to.e5m2x2.rn(float, float)
declare <2 x half> @llvm.nvvm.e4m3x2.to.f16x2.rn(i16)
declare <2 x half> @llvm.nvvm.e5m2x2.to.f16x2.rn(i16)
declare <2 x half> @llvm.nvvm.e4m3x2.to.f16x2.rn.relu(i16)
define ptx_kernel void @fp8(ptr %in, ptr %out) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  %pa = getelementptr [2 x float], ptr %in, i64 %l64
  %a = load float, ptr %pa
  %pb = getelementptr float, ptr %pa, i64 1
  %b = load float, ptr %pb
  %e4 = call i16 @llvm.nvvm.ff.to.e4m3x2.rn(float %a, float %b)
  %e4r = call i16 @llvm.nvvm.ff.to.e4m3x2.rn.relu(float %a, float %b)
  %e5 = call i16 @llvm.nvvm.ff.to.e5m2x2.rn(float %a, float %b)
  %h4 = call <2 x half> @llvm.nvvm.e4m3x2.to.f16x2.rn(i16 %e4)
  %h5 = call <2 x half> @llvm.nvvm.e5m2x2.to.f16x2.rn(i16 %e5)
  %h4r = call <2 x half> @llvm.nvvm.e4m3x2.to.f16x2.rn.relu(i16 %e4)
  %o = getelementptr [6 x i32], ptr %out, i64 %l64
  %e4w = zext i16 %e4 to i32
  store i32 %e4w, ptr %o
  %o1 = getelementptr i32, ptr %o, i64 1
  %e4rw = zext i16 %e4r to i32
  store i32 %e4rw, ptr %o1
  %o2 = getelementptr i32, ptr %o, i64 2
  %e5w = zext i16 %e5 to i32
  store i32 %e5w, ptr %o2
  %o3 = getelementptr i32, ptr %o, i64 3
  store <2 x half> %h4, ptr %o3
  %o4 = getelementptr i32, ptr %o, i64 4
  store <2 x half> %h5, ptr %o4
  %o5 = getelementptr i32, ptr %o, i64 5
  store <2 x half> %h4r, ptr %o5
  ret void
}
)";
  using mlir::kvattn::Float8Format;
  using mlir::kvattn::float8ToFloat;
  using mlir::kvattn::floatToFloat8;
  using mlir::kvattn::floatToHalfBits;
  const float inf = INFINITY, nan = NAN;
  std::vector<float> in = {1.0f,
                           -2.0f,
                           448.0f,
                           500.0f,
                           1e9f,
                           -inf,
                           nan,
                           0.0f,
                           -0.0f,
                           1.0625f,
                           1.1875f,
                           0.001953125f,
                           57344.0f,
                           60000.0f,
                           -3.3f,
                           0.1f,
                           std::ldexp(1.5f, -10),
                           std::ldexp(1.0f, -17),
                           inf,
                           -1e-3f};
  in.resize(64, 0.75f);
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  uint64_t dIn = d.upload(in.data(), in.size() * 4);
  uint64_t dOut = d.upload(nullptr, 32 * 6 * 4);
  ASSERT_EQ(d.launch(m, "fp8", 1, 32, 0, {dIn, dOut}), "");
  std::vector<uint32_t> r = d.download<uint32_t>(dOut, 32 * 6);
  auto half = [&](uint8_t code, Float8Format f, bool relu) -> uint32_t {
    float x = float8ToFloat(code, f);
    if (std::isnan(x))
      return 0x7fff;
    if (relu && x < 0)
      return 0;
    return floatToHalfBits(x);
  };
  for (int l = 0; l < 32; ++l) {
    float a = in[2 * l], b = in[2 * l + 1];
    auto pack = [&](Float8Format f, bool relu) {
      auto one = [&](float x) {
        return floatToFloat8(relu && x < 0 ? 0.0f : x, f);
      };
      return static_cast<uint32_t>(one(a) << 8 | one(b));
    };
    const uint32_t e4 = pack(Float8Format::E4M3FN, false);
    const uint32_t e5 = pack(Float8Format::E5M2, false);
    EXPECT_EQ(r[6 * l], e4) << "e4m3x2, lane " << l;
    EXPECT_EQ(r[6 * l + 1], pack(Float8Format::E4M3FN, true))
        << "e4m3x2.relu, lane " << l;
    EXPECT_EQ(r[6 * l + 2], e5) << "e5m2x2, lane " << l;
    auto widen = [&](uint32_t pair, Float8Format f, bool relu) {
      return half(pair >> 8, f, relu) << 16 | half(pair & 0xff, f, relu);
    };
    EXPECT_EQ(r[6 * l + 3], widen(e4, Float8Format::E4M3FN, false))
        << "f16x2.e4m3x2, lane " << l;
    EXPECT_EQ(r[6 * l + 4], widen(e5, Float8Format::E5M2, false))
        << "f16x2.e5m2x2, lane " << l;
    EXPECT_EQ(r[6 * l + 5], widen(e4, Float8Format::E4M3FN, true))
        << "f16x2.e4m3x2.relu, lane " << l;
  }
  // Spot values of the ISA: 500 and 1e9 saturate to 448 (0x7e), -inf to
  // -448 (0xfe), NaN is 0x7f; 60000 saturates to 57344 (e5m2 0x7b).
  EXPECT_EQ(r[6 * 1], 0x7e7eu);
  EXPECT_EQ(r[6 * 2], 0x7efeu);
  EXPECT_EQ(r[6 * 3] >> 8, 0x7fu);
  EXPECT_EQ(r[6 * 6 + 2] & 0xff, 0x7bu);
  d.cuMemFree(dIn);
  d.cuMemFree(dOut);
}

// prmt.b32 (the default mode) picks each result byte from the pool {b, a}
// by a selector nibble, or replicates its sign when the nibble's top bit is
// set: the sm_80 FP8 staging's {c1, 0, c0, 0} (0x1404) among others.
TEST(GpuEmuTest, PrmtFollowsTheIsa) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare i32 @llvm.nvvm.prmt(i32, i32, i32)
define ptx_kernel void @prmt(ptr %in, ptr %out) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  %p = getelementptr [3 x i32], ptr %in, i64 %l64
  %a = load i32, ptr %p
  %pb = getelementptr i32, ptr %p, i64 1
  %b = load i32, ptr %pb
  %pc = getelementptr i32, ptr %p, i64 2
  %c = load i32, ptr %pc
  %d = call i32 @llvm.nvvm.prmt(i32 %a, i32 %b, i32 %c)
  %o = getelementptr i32, ptr %out, i64 %l64
  store i32 %d, ptr %o
  ret void
}
)";
  // (a, b, selector, expected).
  const uint32_t cases[][4] = {
      {0x44332211u, 0x88776655u, 0x3210u, 0x44332211u},
      {0x44332211u, 0x88776655u, 0x7654u, 0x88776655u},
      {0x44332211u, 0x88776655u, 0x0123u, 0x11223344u},
      {0xa3b2c1d0u, 0, 0x1404u, 0xc100d000u},
      {0xa3b2c1d0u, 0, 0x3424u, 0xa300b200u},
      {0x0080017fu, 0, 0x0a0au, 0x7fff7fffu},
      {0x44332211u, 0x88776655u, 0xf0f7u, 0xff11ff88u},
  };
  std::vector<uint32_t> in;
  for (const auto &c : cases)
    in.insert(in.end(), {c[0], c[1], c[2]});
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  const unsigned n = std::size(cases);
  uint64_t dIn = d.upload(in.data(), in.size() * 4);
  uint64_t dOut = d.upload(nullptr, n * 4);
  ASSERT_EQ(d.launch(m, "prmt", 1, n, 0, {dIn, dOut}), "");
  std::vector<uint32_t> r = d.download<uint32_t>(dOut, n);
  for (unsigned i = 0; i < n; ++i)
    EXPECT_EQ(r[i], cases[i][3])
        << "case " << i << std::hex << ": selector 0x" << cases[i][2];
  d.cuMemFree(dIn);
  d.cuMemFree(dOut);
}

// A cp.async lands at the wait_group that completes it, zero-filling past
// its src-size; reading the destination before is a reported hazard.
TEST(GpuEmuTest, CpAsyncLandsAtItsWaitAndZeroFills) {
  REQUIRE_DRIVER();
  auto kernel = [](bool early) {
    return std::string(kHeader) + R"(
declare void @llvm.nvvm.cp.async.ca.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)
declare void @llvm.nvvm.cp.async.commit.group()
declare void @llvm.nvvm.cp.async.wait.group(i32)
define ptx_kernel void @copy(ptr %in, ptr %out) {
  %g = addrspacecast ptr %in to ptr addrspace(1)
  call void @llvm.nvvm.cp.async.ca.shared.global.16.s(ptr addrspace(3) @smem, ptr addrspace(1) %g, i32 4)
  call void @llvm.nvvm.cp.async.commit.group()
)" + (early ? "  %early = load i32, ptr addrspace(3) @smem\n" : "") +
           R"(  call void @llvm.nvvm.cp.async.wait.group(i32 0)
  %v = load <4 x i32>, ptr addrspace(3) @smem
  store <4 x i32> %v, ptr %out
  ret void
}
)";
  };
  EmuDriver &d = driver();
  uint32_t data[4] = {7, 8, 9, 10};
  for (bool early : {false, true}) {
    std::string error;
    CUmodule m = d.load(kernel(early), error);
    ASSERT_TRUE(m) << error;
    uint64_t in = d.upload(data, 16), out = d.upload(nullptr, 16);
    std::string result = d.launch(m, "copy", 1, 1, 16, {in, out});
    if (!early) {
      ASSERT_EQ(result, "");
      std::vector<uint32_t> v = d.download<uint32_t>(out, 4);
      EXPECT_EQ(v, (std::vector<uint32_t>{7, 0, 0, 0}));
    } else {
      EXPECT_NE(result.find("cp.async-in-flight hazard at shared offset 0"),
                std::string::npos)
          << result;
    }
    d.takeReports();
    d.cuMemFree(in);
    d.cuMemFree(out);
  }
}

/// A kernel where thread 0 stores 1.0 to shared[0] and thread 1 loads it,
/// with or without a barrier in between.
/// Thread 0 writes a shared word, thread `reader` reads it, with `sync`
/// (a barrier call, or nothing) in between.
std::string handOff(const std::string &sync, int reader = 1) {
  return std::string(kHeader) + R"(
declare void @llvm.nvvm.bar.warp.sync(i32)
define ptx_kernel void @handoff(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %first = icmp eq i32 %t, 0
  br i1 %first, label %write, label %next
write:
  store float 1.0, ptr addrspace(3) @smem
  br label %next
next:
)" + sync +
         R"(  %second = icmp eq i32 %t, )" + std::to_string(reader) + R"(
  br i1 %second, label %read, label %done
read:
  %v = load float, ptr addrspace(3) @smem
  store float %v, ptr %out
  br label %done
done:
  ret void
}
)";
}

constexpr const char *kCtaBarrier =
    "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)\n";
constexpr const char *kWarpBarrier =
    "  call void @llvm.nvvm.bar.warp.sync(i32 -1)\n";

TEST(GpuEmuTest, RacecheckReportsAHandOffWithoutABarrier) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  for (bool barrier : {true, false}) {
    std::string error;
    CUmodule m = d.load(handOff(barrier ? kCtaBarrier : ""), error);
    ASSERT_TRUE(m) << error;
    uint64_t out = d.upload(nullptr, 4);
    std::string result = d.launch(m, "handoff", 1, 64, 4, {out});
    if (barrier) {
      EXPECT_EQ(result, "");
      EXPECT_EQ(d.download<float>(out, 1)[0], 1.0f);
    } else {
      EXPECT_NE(result.find("read-after-write hazard at shared offset 0"),
                std::string::npos)
          << result;
      EXPECT_NE(result.find("thread (1,0,0) of block (0,0,0) reads it"),
                std::string::npos)
          << result;
      EXPECT_NE(result.find("thread (0,0,0) wrote it"), std::string::npos)
          << result;
    }
    d.takeReports();
    d.cuMemFree(out);
  }
}

// A warp barrier orders the accesses of its own warp only: a hand-off from
// lane 0 to lane 1 through it is clean, one to thread 32 (another warp) is
// a hazard.
TEST(GpuEmuTest, RacecheckWarpBarrierOrdersOnlyItsWarp) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  for (int reader : {1, 32}) {
    std::string error;
    CUmodule m = d.load(handOff(kWarpBarrier, reader), error);
    ASSERT_TRUE(m) << error;
    uint64_t out = d.upload(nullptr, 4);
    std::string result = d.launch(m, "handoff", 1, 64, 4, {out});
    if (reader == 1) {
      EXPECT_EQ(result, "");
      EXPECT_EQ(d.download<float>(out, 1)[0], 1.0f);
    } else {
      EXPECT_NE(result.find("read-after-write hazard at shared offset 0"),
                std::string::npos)
          << result;
    }
    d.takeReports();
    d.cuMemFree(out);
  }
}

TEST(GpuEmuTest, UnwrittenSharedMemoryReadsAsNaN) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
define ptx_kernel void @poison(ptr %out) {
  %p = getelementptr float, ptr addrspace(3) @smem, i64 5
  %v = load float, ptr addrspace(3) %p
  store float %v, ptr %out
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  uint64_t out = d.upload(nullptr, 4);
  ASSERT_EQ(d.launch(m, "poison", 1, 1, 64, {out}), "");
  EXPECT_TRUE(std::isnan(d.download<float>(out, 1)[0]));
  d.cuMemFree(out);
}

TEST(GpuEmuTest, MemcheckReportsSharedAccessesPastTheLaunchSize) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
define ptx_kernel void @oob() {
  %p = getelementptr i8, ptr addrspace(3) @smem, i64 64
  store i32 1, ptr addrspace(3) %p
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  std::string result = d.launch(m, "oob", 1, 1, 64, {});
  EXPECT_NE(result.find("memcheck: kernel 'oob': invalid shared write of 4 "
                        "bytes at shared offset 64 by thread (0,0,0) of "
                        "block (0,0,0)"),
            std::string::npos)
      << result;
  EXPECT_NE(result.find("the launch has 64 bytes of shared memory"),
            std::string::npos)
      << result;
}

TEST(GpuEmuTest, ABarrierSomeThreadsNeverReachIsAnError) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
define ptx_kernel void @early_exit() {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %late = icmp uge i32 %t, 32
  br i1 %late, label %exit, label %sync
sync:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br label %exit
exit:
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  std::string result = d.launch(m, "early_exit", 1, 64, 0, {});
  EXPECT_NE(result.find("kernel 'early_exit': a barrier that 32 thread(s) "
                        "never reach (they ended) in block (0,0,0)"),
            std::string::npos)
      << result;
  EXPECT_NE(result.find("warp 1 lanes 0-31: ended"), std::string::npos)
      << result;
}

TEST(GpuEmuTest, ACollectiveReachedByPartOfAWarpIsAnError) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)
define ptx_kernel void @half_warp(ptr %out) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %low = icmp ult i32 %t, 16
  br i1 %low, label %shuffle, label %exit
shuffle:
  %v = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float 1.0, i32 1, i32 31)
  store float %v, ptr %out
  br label %exit
exit:
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  uint64_t out = d.upload(nullptr, 4);
  std::string result = d.launch(m, "half_warp", 1, 32, 0, {out});
  EXPECT_NE(result.find("kernel 'half_warp', warp 0 of block (0,0,0): a "
                        "collective reached by only part of the warp: lane 0 "
                        "is at half_warp: "),
            std::string::npos)
      << result;
  EXPECT_NE(result.find("but lane 16 never gets there (it ended)"),
            std::string::npos)
      << result;
  d.cuMemFree(out);
}

TEST(GpuEmuTest, UnknownIntrinsicsAndPtxAreRefusedByName) {
  REQUIRE_DRIVER();
  std::string ir = std::string(kHeader) + R"(
declare i64 @llvm.nvvm.read.ptx.sreg.globaltimer()
define ptx_kernel void @timer(ptr %out) {
  %t = call i64 @llvm.nvvm.read.ptx.sreg.globaltimer()
  store i64 %t, ptr %out
  ret void
}
)";
  EmuDriver &d = driver();
  std::string error;
  EXPECT_FALSE(d.load(ir, error));
  EXPECT_NE(error.find("kernel(s) timer call "
                       "llvm.nvvm.read.ptx.sreg.globaltimer, which the "
                       "emulated GPU does not implement"),
            std::string::npos)
      << error;
  error.clear();
  EXPECT_FALSE(d.load("//\n.version 8.0\n.target sm_80\n", error));
  EXPECT_NE(error.find("runs the device LLVM IR, not PTX"), std::string::npos)
      << error;
}

/// One "key=value" field of a counter line.
std::string field(const std::string &line, const std::string &key) {
  size_t at = line.find(" " + key + "=");
  if (at == std::string::npos)
    return "(missing)";
  at += key.size() + 2;
  return line.substr(at, line.find_first_of(" \n", at) - at);
}

// Bank conflicts: 32 lanes reading floats 32 apart all hit bank 0 (32
// wavefronts: 31 replays); consecutive floats hit 32 banks (none). Global
// sectors: 32 consecutive floats use 4 sectors fully; a stride of 2 floats
// touches 8 sectors for the same 128 bytes.
TEST(GpuEmuTest, BankConflictAndSectorCounters) {
  REQUIRE_DRIVER();
  auto kernel = [](int stride) {
    return std::string(kHeader) + R"(
define ptx_kernel void @pattern(ptr %in, ptr %out) {
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  %i = mul i64 %l64, )" +
           std::to_string(stride) + R"(
  %src = getelementptr float, ptr %in, i64 %i
  %v = load float, ptr %src
  %s = getelementptr float, ptr addrspace(3) @smem, i64 %i
  store float %v, ptr addrspace(3) %s
  %w = load float, ptr addrspace(3) %s
  %dst = getelementptr float, ptr %out, i64 %l64
  store float %w, ptr %dst
  ret void
}
)";
  };
  EmuDriver &d = driver();
  d.takeCounters();
  struct Expect {
    int stride;
    const char *conflicts, *sectors, *efficiency;
  };
  // Shared: a store and a load per lane. Global: the load (stride) and the
  // store (consecutive: 4 sectors).
  for (Expect e : {Expect{1, "0", "8", "1.000"}, Expect{2, "2", "12", "0.667"},
                   Expect{32, "62", "36", "0.222"}}) {
    std::string error;
    CUmodule m = d.load(kernel(e.stride), error);
    ASSERT_TRUE(m) << error;
    uint64_t in = d.upload(nullptr, 32 * 32 * 4),
             out = d.upload(nullptr, 32 * 4);
    ASSERT_EQ(d.launch(m, "pattern", 1, 32, 32 * 32 * 4, {in, out}), "");
    std::string line = d.takeCounters();
    EXPECT_EQ(field(line, "shared_requests"), "2") << line;
    EXPECT_EQ(field(line, "bank_conflicts"), e.conflicts) << line;
    EXPECT_EQ(field(line, "global_requests"), "2") << line;
    EXPECT_EQ(field(line, "global_sectors"), e.sectors) << line;
    EXPECT_EQ(field(line, "global_bytes"), "256") << line;
    EXPECT_EQ(field(line, "global_sector_efficiency"), e.efficiency) << line;
    d.cuMemFree(in);
    d.cuMemFree(out);
  }
}

} // namespace
