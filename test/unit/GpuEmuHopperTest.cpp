//===- GpuEmuHopperTest.cpp - the emulated GPU's sm_90a instructions ------===//
//
// The hand-written sm_90a kernels of test/GpuEmu/Inputs (device LLVM IR; the
// lit test test/GpuEmu/hopper-ptxas.test assembles each with ptxas
// -arch=sm_90a), run on libkvattn_cuda_emu.so and checked against host
// computations:
//   - cuTensorMapEncodeTiled's validation;
//   - a TMA + mbarrier producer/consumer ring (setmaxnreg, elect.sync, a
//     named barrier) with out-of-bounds fill (zero and NaN), swizzled and
//     not, and its counters; the same with MLIR's inline try_wait loop;
//   - 3D and 5D TMA loads and stores (64B swizzle, a box partly outside);
//   - bar.arrive / bar.sync on a named barrier (what the arrive releases);
//   - wgmma.mma_async shared x shared (K-major) and registers x shared
//     (B MN-major) at every swizzle (none, 32B, 64B, 128B) against a GEMM;
//   - each planted fault (--emu-fault) reported: a dropped mbarrier wait, a
//     wrong expect_tx (a deadlock naming the barrier), a dropped
//     fence.proxy.async (before a wgmma and before a TMA store) and a
//     dropped wgmma.wait_group; and wgmma misuse (no wgmma.fence, a store
//     into a source in flight).
// The shared-memory images are laid out here from the swizzle atoms (chunk
// c of row r of an atom stored at chunk c ^ f(r)), independently of the
// emulator's address-bit formulation.
//
//===----------------------------------------------------------------------===//

#include "EmuDriverHelper.h"
#include "kvattn/Support/Float16.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace mlir::kvattn::cuda;
using kvattn_test::driver;
using kvattn_test::EmuDriver;

namespace {

std::string readInput(const std::string &name) {
  std::ifstream in(std::string(KVATTN_GPUEMU_INPUTS) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

/// Plants `fault` for the next loads, and clears it when it goes.
struct Fault {
  explicit Fault(const char *fault) { driver().configure("fault", fault); }
  ~Fault() { driver().configure("fault", "none"); }
};

//===----------------------------------------------------------------------===//
// cuTensorMapEncodeTiled
//===----------------------------------------------------------------------===//

TEST(GpuEmuHopperTest, TensorMapEncodeValidatesItsArguments) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  uint64_t buffer = d.upload(nullptr, 64 * 1024);
  CUtensorMap map;
  unsigned long long dims[2] = {64, 32}, strides[1] = {128};
  unsigned box[2] = {64, 8}, elem[2] = {1, 1};
  auto encode = [&](int type, void *address, int swizzle) {
    return d.cuTensorMapEncodeTiled(&map, type, 2, address, dims, strides, box,
                                    elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  void *base = reinterpret_cast<void *>(buffer);
  EXPECT_EQ(encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base,
                   CU_TENSOR_MAP_SWIZZLE_128B),
            CUDA_SUCCESS);
  // 64 bf16 = 128 bytes of inner box: too wide for the 64B swizzle.
  CUresult r =
      encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, CU_TENSOR_MAP_SWIZZLE_64B);
  EXPECT_NE(r, CUDA_SUCCESS);
  EXPECT_TRUE(contains(d.errorText(r), "exceeds the swizzle span (64 bytes)"))
      << d.errorText(r);
  // Strides that do not grow with the dimension (a permuted view: rows
  // 64 bytes apart over 64-element rows) are encoded, as by the driver.
  strides[0] = 64;
  EXPECT_EQ(encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base,
                   CU_TENSOR_MAP_SWIZZLE_128B),
            CUDA_SUCCESS);
  strides[0] = 136; // not a multiple of 16
  r = encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base,
             CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_TRUE(contains(d.errorText(r), "must be a multiple of 16"))
      << d.errorText(r);
  strides[0] = 128;
  r = encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             reinterpret_cast<void *>(buffer + 8), CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_TRUE(contains(d.errorText(r), "globalAddress must be 16-byte aligned"))
      << d.errorText(r);
  box[1] = 300;
  r = encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base,
             CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_TRUE(contains(d.errorText(r), "boxDim[1] must be in [1, 256]"))
      << d.errorText(r);
  box[1] = 8;
  r = encode(42, base, CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_TRUE(contains(d.errorText(r), "unknown tensorDataType 42"))
      << d.errorText(r);
  r = d.cuTensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, elem,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_NONE,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
  EXPECT_EQ(r, CUDA_SUCCESS);
  d.cuMemFree(buffer);
}

//===----------------------------------------------------------------------===//
// TMA + mbarrier ring
//===----------------------------------------------------------------------===//

constexpr int kRows = 20, kCols = 40, kTiles = 4, kX0 = 16, kY0 = -5;

struct RingRun {
  std::string error;
  std::vector<float> out;
  std::string counters;
};

/// Runs hopper-tma-ring.ll over a 20 x 40 f32 tensor, tiles of 8 x 32 from
/// (16, -5): columns 40..47 and rows < 0 or >= 20 are outside.
RingRun runRing(int swizzle, int oobFill,
                std::string ir = readInput("hopper-tma-ring.ll")) {
  EmuDriver &d = driver();
  RingRun run;
  CUmodule m = d.load(ir, run.error);
  if (!m)
    return run;
  std::vector<float> tensor(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i)
    tensor[i] = 1.0f + float(i);
  uint64_t data = d.upload(tensor.data(), tensor.size() * 4);
  CUtensorMap map;
  unsigned long long dims[2] = {kCols, kRows}, strides[1] = {kCols * 4};
  unsigned box[2] = {32, 8}, elem[2] = {1, 1};
  CUresult r = d.cuTensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, reinterpret_cast<void *>(data),
      dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_NONE, oobFill);
  if (r != CUDA_SUCCESS) {
    run.error = d.errorText(r);
    return run;
  }
  uint64_t mapBuffer = d.upload(&map, sizeof(map));
  size_t outCount = (kTiles + 1) * 256;
  uint64_t out = d.upload(nullptr, outCount * 4);
  int mask = swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? 7 : 0;
  d.takeCounters();
  run.error = d.launch(m, "tma_ring", 1, 384, 3328,
                       {mapBuffer, out, uint64_t(kTiles), uint64_t(kX0),
                        uint64_t(uint32_t(kY0)), uint64_t(mask)});
  run.counters = d.takeCounters();
  run.out = d.download<float>(out, outCount);
  d.takeReports();
  d.cuMemFree(out);
  d.cuMemFree(mapBuffer);
  d.cuMemFree(data);
  d.cuModuleUnload(m);
  return run;
}

TEST(GpuEmuHopperTest, TmaRingDeliversEveryTileWithOutOfBoundsFill) {
  REQUIRE_DRIVER();
  for (int swizzle : {CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_NONE})
    for (int fill : {CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA}) {
      SCOPED_TRACE("swizzle " + std::to_string(swizzle) + " fill " +
                   std::to_string(fill));
      RingRun run = runRing(swizzle, fill);
      ASSERT_EQ(run.error, "");
      for (int t = 0; t < kTiles; ++t)
        for (int row = 0; row < 8; ++row)
          for (int col = 0; col < 32; ++col) {
            int y = kY0 + 8 * t + row, x = kX0 + col;
            float got = run.out[256 * t + 32 * row + col];
            bool inside = y >= 0 && y < kRows && x < kCols;
            if (inside)
              ASSERT_EQ(got, 1.0f + float(y * kCols + x))
                  << "tile " << t << " row " << row << " col " << col;
            else if (fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
              ASSERT_EQ(got, 0.0f) << "tile " << t << " row " << row;
            else
              ASSERT_TRUE(std::isnan(got)) << "tile " << t << " row " << row;
          }
      // The named barrier's exchange between the consumer warpgroups.
      for (int c = 0; c < 256; ++c)
        ASSERT_EQ(run.out[256 * kTiles + c], float(255 - c)) << c;
      // 4 tiles of 1024 bytes, all by the producer warpgroup.
      EXPECT_TRUE(contains(run.counters, "tma_load_bytes_per_wg=4096/0/0"))
          << run.counters;
      EXPECT_TRUE(contains(run.counters, "mbarrier_waits_per_wg="))
          << run.counters;
      EXPECT_TRUE(contains(run.counters, "wgmma_per_wg=0/0/0")) << run.counters;
    }
}

// The consumers wait with the blocking loop MLIR's NVVM dialect writes as
// inline PTX for nvvm.mbarrier.try_wait.parity instead of the intrinsic.
TEST(GpuEmuHopperTest, MlirTryWaitLoopWaitsLikeTheIntrinsic) {
  REQUIRE_DRIVER();
  std::string ir = readInput("hopper-tma-ring.ll");
  std::string call = "%cok = call i1 "
                     "@llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta("
                     "ptr addrspace(3) %cfb, i32 %fparity)";
  size_t at = ir.find(call);
  ASSERT_NE(at, std::string::npos);
  ir.replace(at, call.size(),
             "call void asm sideeffect \"{\\0A\\09.reg .pred       P1; "
             "\\0A\\09LAB_WAIT: \\0A\\09mbarrier.try_wait.parity.shared.b64 "
             "P1, [$0], $1, $2; \\0A\\09@P1 bra.uni DONE; \\0A\\09bra.uni     "
             "LAB_WAIT; \\0A\\09DONE: \\0A\\09}\", \"r,r,r\"(ptr addrspace(3) "
             "%cfb, i32 %fparity, i32 1000)\n  %cok = icmp eq i32 0, 0");
  RingRun run = runRing(CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE, ir);
  ASSERT_EQ(run.error, "");
  for (int row = 0; row < 8; ++row)
    for (int col = 0; col < 32; ++col) {
      int y = kY0 + 8 + row, x = kX0 + col; // tile 1
      float want = y < kRows && x < kCols ? 1.0f + float(y * kCols + x) : 0;
      ASSERT_EQ(run.out[256 + 32 * row + col], want) << row << " " << col;
    }
}

TEST(GpuEmuHopperTest, RingFaultsAreReported) {
  REQUIRE_DRIVER();
  {
    // expect_tx 16 bytes more than the box: full[0] never completes.
    Fault f("expect-tx:0");
    RingRun run = runRing(CU_TENSOR_MAP_SWIZZLE_128B, 0);
    EXPECT_TRUE(contains(run.error, "deadlock")) << run.error;
    EXPECT_TRUE(contains(run.error, "waits on the mbarrier at shared offset "
                                    "2048 for the phase of parity 0"))
        << run.error;
    EXPECT_TRUE(contains(run.error, "tx-count of 16 bytes")) << run.error;
    EXPECT_TRUE(contains(run.error, "warp 4 lanes 0-31")) << run.error;
  }
  {
    // The consumers' wait on full[s] dropped: they read the stage while its
    // TMA load is in flight (and release it early, so the producer's next
    // arrive on full[0] finds its phase still waiting for bytes).
    Fault f("drop-mbarrier-wait:1");
    RingRun run = runRing(CU_TENSOR_MAP_SWIZZLE_128B, 0);
    EXPECT_TRUE(contains(run.error, "TMA-in-flight hazard")) << run.error;
    EXPECT_TRUE(contains(run.error, "reads it at tma_ring: %v = load float"))
        << run.error;
    EXPECT_TRUE(contains(run.error, "arrives 1 time(s) on the mbarrier at "
                                    "shared offset 2048, whose current phase "
                                    "expects only 0 more"))
        << run.error;
  }
  {
    // The producer's wait on empty[s] dropped: it runs ahead to the third
    // tile and arrives on full[0] again while that barrier's first phase
    // still waits for its bytes (an arrival the phase does not expect).
    Fault f("drop-mbarrier-wait:0");
    RingRun run = runRing(CU_TENSOR_MAP_SWIZZLE_128B, 0);
    EXPECT_TRUE(contains(run.error, "thread (0,0,0) of block (0,0,0) arrives "
                                    "1 time(s) on the mbarrier at shared "
                                    "offset 2048, whose current phase "
                                    "expects only 0 more"))
        << run.error;
  }
  {
    // Named barrier 1 dropped (the second barrier of the kernel): the
    // exchange between the consumer warpgroups is unordered.
    Fault f("drop-barrier:1");
    RingRun run = runRing(CU_TENSOR_MAP_SWIZZLE_128B, 0);
    EXPECT_TRUE(contains(run.error, "read-after-write hazard")) << run.error;
  }
}

// A 3D box, 64B swizzle, partly outside the tensor: loaded by TMA,
// transformed by every thread, stored back by TMA (the elements outside
// are not written); counters of both directions.
TEST(GpuEmuHopperTest, Tma3dLoadAndStoreWithSwizzle64) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  std::string error;
  CUmodule m = d.load(readInput("hopper-tma-3d.ll"), error);
  ASSERT_TRUE(m) << error;
  constexpr int D0 = 24, D1 = 10, D2 = 3, C0 = 12, C1 = 8, C2 = 1;
  std::vector<float> in(D0 * D1 * D2), initial(in.size(), -1.0f);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = float(i) * 0.5f;
  uint64_t inBuf = d.upload(in.data(), in.size() * 4);
  uint64_t outBuf = d.upload(initial.data(), initial.size() * 4);
  unsigned long long dims[3] = {D0, D1, D2}, strides[2] = {D0 * 4, D0 * D1 * 4};
  unsigned box[3] = {16, 4, 2}, elem[3] = {1, 1, 1};
  CUtensorMap maps[2];
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(d.cuTensorMapEncodeTiled(
                  &maps[i], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3,
                  reinterpret_cast<void *>(i ? outBuf : inBuf), dims, strides,
                  box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_SUCCESS);
  uint64_t mapIn = d.upload(&maps[0], sizeof(CUtensorMap));
  uint64_t mapOut = d.upload(&maps[1], sizeof(CUtensorMap));
  d.takeCounters();
  EXPECT_EQ(d.launch(m, "tma_3d", 1, 128, 1032,
                     {mapIn, mapOut, uint64_t(C0), uint64_t(C1), uint64_t(C2)}),
            "");
  std::string counters = d.takeCounters();
  std::vector<float> out = d.download<float>(outBuf, in.size());
  unsigned written = 0;
  for (int z = 0; z < D2; ++z)
    for (int y = 0; y < D1; ++y)
      for (int x = 0; x < D0; ++x) {
        size_t i = (size_t(z) * D1 + y) * D0 + x;
        bool inBox = x >= C0 && x < C0 + 16 && y >= C1 && y < C1 + 4 &&
                     z >= C2 && z < C2 + 2;
        written += inBox;
        ASSERT_EQ(out[i], inBox ? 2 * in[i] + 1 : -1.0f)
            << "x " << x << " y " << y << " z " << z;
      }
  EXPECT_EQ(written, 12u * 2 * 2); // 12 columns, 2 rows, 2 planes inside
  // The whole box is loaded (512 bytes); 48 elements are stored.
  EXPECT_TRUE(contains(counters, "tma_load_bytes_per_wg=512 ")) << counters;
  EXPECT_TRUE(contains(counters, "tma_store_bytes_per_wg=192 ")) << counters;
  d.takeReports();
  d.cuModuleUnload(m);
  {
    // Without the fence, the TMA store reads generic writes the async proxy
    // was never shown.
    Fault f("drop-fence-proxy:0");
    CUmodule faulty = d.load(readInput("hopper-tma-3d.ll"), error);
    ASSERT_TRUE(faulty) << error;
    std::string result =
        d.launch(faulty, "tma_3d", 1, 128, 1032,
                 {mapIn, mapOut, uint64_t(C0), uint64_t(C1), uint64_t(C2)});
    EXPECT_TRUE(contains(result, "generic-proxy write read by a TMA store "
                                 "without fence.proxy.async hazard"))
        << result;
    d.takeReports();
    d.cuModuleUnload(faulty);
  }
  for (uint64_t p : {inBuf, outBuf, mapIn, mapOut})
    d.cuMemFree(p);
}

// The same kernel made 5D (box {16, 4, 2, 1, 1} at (12, 8, 1, 1, 2)) by
// editing its text: only the box's in-bounds elements change.
TEST(GpuEmuHopperTest, Tma5dLoadAndStore) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  std::string ir = readInput("hopper-tma-3d.ll");
  auto replaceAll = [&](const std::string &from, const std::string &to) {
    size_t count = 0;
    for (size_t at = ir.find(from); at != std::string::npos;
         at = ir.find(from, at + to.size()), ++count)
      ir.replace(at, from.size(), to);
    return count;
  };
  ASSERT_EQ(replaceAll("tile.3d", "tile.5d"), 4u);
  ASSERT_EQ(replaceAll("ptr, i32, i32, i32,", "ptr, i32, i32, i32, i32, i32,"),
            2u);
  ASSERT_EQ(replaceAll("i32 %c2, ", "i32 %c2, i32 1, i32 2, "), 2u);
  std::string error;
  CUmodule m = d.load(ir, error);
  ASSERT_TRUE(m) << error;
  constexpr int D[5] = {24, 10, 3, 2, 3};
  const size_t n = size_t(D[0]) * D[1] * D[2] * D[3] * D[4];
  std::vector<float> in(n), initial(n, -1.0f);
  for (size_t i = 0; i < n; ++i)
    in[i] = float(i) * 0.25f;
  uint64_t inBuf = d.upload(in.data(), n * 4);
  uint64_t outBuf = d.upload(initial.data(), n * 4);
  unsigned long long dims[5] = {24, 10, 3, 2, 3}, strides[4];
  strides[0] = D[0] * 4;
  for (int i = 1; i < 4; ++i)
    strides[i] = strides[i - 1] * D[i];
  unsigned box[5] = {16, 4, 2, 1, 1}, elem[5] = {1, 1, 1, 1, 1};
  CUtensorMap maps[2];
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(d.cuTensorMapEncodeTiled(
                  &maps[i], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5,
                  reinterpret_cast<void *>(i ? outBuf : inBuf), dims, strides,
                  box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_SUCCESS);
  uint64_t mapIn = d.upload(&maps[0], sizeof(CUtensorMap));
  uint64_t mapOut = d.upload(&maps[1], sizeof(CUtensorMap));
  EXPECT_EQ(d.launch(m, "tma_3d", 1, 128, 1032, {mapIn, mapOut, 12, 8, 1}), "");
  std::vector<float> out = d.download<float>(outBuf, n);
  unsigned written = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t r = i;
    int c[5];
    for (int k = 0; k < 5; ++k) {
      c[k] = int(r % D[k]);
      r /= D[k];
    }
    bool inBox = c[0] >= 12 && c[1] >= 8 && c[2] >= 1 && c[3] == 1 && c[4] == 2;
    written += inBox;
    ASSERT_EQ(out[i], inBox ? 2 * in[i] + 1 : -1.0f) << "element " << i;
  }
  EXPECT_EQ(written, 12u * 2 * 2);
  d.takeReports();
  d.takeCounters();
  for (uint64_t p : {inBuf, outBuf, mapIn, mapOut})
    d.cuMemFree(p);
  d.cuModuleUnload(m);
}

// bar.arrive releases what its thread did before it, not after: a producer
// warp writes, arrives on barrier 1 (64 threads) and goes on; a consumer
// warp syncs on it and reads. A write the producer makes after its arrive
// is unordered with the read.
TEST(GpuEmuHopperTest, NamedBarrierArriveReleasesOnlyWhatCameBefore) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  const std::string ir = R"(
target triple = "nvptx64-nvidia-cuda"
@smem = external addrspace(3) global [0 x i8], align 16
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.count(i32, i32)
declare void @llvm.nvvm.barrier.cta.arrive.aligned.count(i32, i32)
define ptx_kernel void @arrive(ptr %out, i32 %late) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %producer = icmp ult i32 %tid, 32
  br i1 %producer, label %produce, label %consume
produce:
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %arrive
write:
  store float 1.0, ptr addrspace(3) @smem, align 4
  br label %arrive
arrive:
  call void @llvm.nvvm.barrier.cta.arrive.aligned.count(i32 1, i32 64)
  %again = icmp ne i32 %late, 0
  %both = and i1 %again, %first
  br i1 %both, label %rewrite, label %done
rewrite:
  store float 2.0, ptr addrspace(3) @smem, align 4
  br label %done
consume:
  call void @llvm.nvvm.barrier.cta.sync.aligned.count(i32 1, i32 64)
  %v = load float, ptr addrspace(3) @smem, align 4
  %c = sub i32 %tid, 32
  %c64 = zext i32 %c to i64
  %p = getelementptr float, ptr %out, i64 %c64
  store float %v, ptr %p, align 4
  br label %done
done:
  ret void
}
)";
  for (int late : {0, 1}) {
    std::string error;
    CUmodule m = d.load(ir, error);
    ASSERT_TRUE(m) << error;
    uint64_t out = d.upload(nullptr, 32 * 4);
    std::string result =
        d.launch(m, "arrive", 1, 64, 16, {out, uint64_t(late)});
    if (late) {
      EXPECT_TRUE(
          contains(result, "read-after-write hazard at shared offset 0"))
          << result;
    } else {
      EXPECT_EQ(result, "");
      EXPECT_EQ(d.download<float>(out, 32), std::vector<float>(32, 1.0f));
    }
    d.takeReports();
    d.cuMemFree(out);
    d.cuModuleUnload(m);
  }
}

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

/// The swizzle of row `r` of an atom: the 16-byte chunk c of the row is
/// stored at chunk c ^ swizzleOf(span, r).
int swizzleOf(int span, int r) {
  return span == 128  ? r % 8
         : span == 64 ? (r / 2) % 4
         : span == 32 ? (r / 4) % 2
                      : 0;
}

uint64_t descriptor(uint64_t start, uint64_t lbo, uint64_t sbo, int span) {
  uint64_t mode = span == 128 ? 1 : span == 64 ? 2 : span == 32 ? 3 : 0;
  return (start >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (mode << 62);
}

/// Byte offset of element (r, k) of a 64 x 64 K-major operand.
size_t kMajorOffset(int span, int r, int k) {
  if (span == 0) // core matrices of 8 rows x 16 bytes, k-adjacent 128 apart
    return (r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
  int perRow = span / 2, panel = k / perRow, kk = k % perRow;
  int chunk = (kk * 2) / 16 ^ swizzleOf(span, r);
  return panel * 64 * span + r * span + chunk * 16 + (kk * 2) % 16;
}

uint64_t kMajorDescriptor(uint64_t base, int span, int step) {
  if (span == 0)
    return descriptor(base + 256 * step, 128, 1024, 0);
  int perRow = span / 2, k0 = 16 * step;
  return descriptor(base + (k0 / perRow) * 64 * span + (k0 % perRow) * 2, 16,
                    8 * span, span);
}

/// Byte offset of element (n, k) of a 64 x 64 MN-major operand (n
/// contiguous, k rows).
size_t mnMajorOffset(int span, int n, int k) {
  if (span == 0) // 8 n (16 bytes) x 8 k rows per core matrix
    return (n / 8) * 1024 + (k / 8) * 128 + (k % 8) * 16 + (n % 8) * 2;
  int perRow = span / 2, panel = n / perRow, nn = n % perRow;
  int chunk = (nn * 2) / 16 ^ swizzleOf(span, k);
  return panel * 64 * span + k * span + chunk * 16 + (nn * 2) % 16;
}

uint64_t mnMajorDescriptor(uint64_t base, int span, int step) {
  if (span == 0)
    return descriptor(base + 256 * step, 128, 1024, 0);
  return descriptor(base + 16 * step * span, 64 * span, 8 * span, span);
}

struct Gemm {
  std::vector<uint16_t> a, b; ///< A[m][k], B[n][k], bf16 bits
  Gemm() : a(64 * 64), b(64 * 64) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (uint16_t &x : a)
      x = mlir::kvattn::floatToBFloat16Bits(u(rng));
    for (uint16_t &x : b)
      x = mlir::kvattn::floatToBFloat16Bits(u(rng));
  }
  float af(int m, int k) const {
    return mlir::kvattn::bfloat16BitsToFloat(a[m * 64 + k]);
  }
  float bf(int n, int k) const {
    return mlir::kvattn::bfloat16BitsToFloat(b[n * 64 + k]);
  }
  /// Checks thread t's accumulator i against the host product.
  void check(const std::vector<float> &out) const {
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 32; ++i) {
        int w = t / 32, g = (t % 32) / 4, q = t % 4, j = i / 4, r = i % 4;
        int row = 16 * w + g + 8 * (r / 2), col = 8 * j + 2 * q + (r % 2);
        double sum = 0;
        for (int k = 0; k < 64; ++k)
          sum += double(af(row, k)) * double(bf(col, k));
        ASSERT_NEAR(out[32 * t + i], sum, 1e-5 * (1 + std::fabs(sum)))
            << "thread " << t << " accumulator " << i << " (row " << row
            << ", column " << col << ")";
      }
  }
};

/// Runs hopper-wgmma-{ss,rs}.ll at one swizzle span; returns the error.
std::string runWgmma(bool rs, int span, std::vector<float> &out,
                     std::string *counters = nullptr, std::string ir = "") {
  EmuDriver &d = driver();
  Gemm g;
  std::string error;
  if (ir.empty())
    ir = readInput(rs ? "hopper-wgmma-rs.ll" : "hopper-wgmma-ss.ll");
  CUmodule m = d.load(ir, error);
  if (!m)
    return error;
  // The shared image: A at 0 (SS), B at 8192.
  std::vector<uint8_t> image(16384, 0);
  std::vector<uint64_t> descs(8);
  for (int x = 0; x < 64; ++x)
    for (int k = 0; k < 64; ++k) {
      if (!rs)
        std::memcpy(&image[kMajorOffset(span, x, k)], &g.a[x * 64 + k], 2);
      size_t bOff =
          8192 + (rs ? mnMajorOffset(span, x, k) : kMajorOffset(span, x, k));
      std::memcpy(&image[bOff], &g.b[x * 64 + k], 2);
    }
  for (int s = 0; s < 4; ++s) {
    if (rs) {
      descs[s] = mnMajorDescriptor(8192, span, s);
    } else {
      descs[s] = kMajorDescriptor(0, span, s);
      descs[4 + s] = kMajorDescriptor(8192, span, s);
    }
  }
  uint64_t img = d.upload(image.data(), image.size());
  uint64_t desc = d.upload(descs.data(), descs.size() * 8);
  uint64_t result = d.upload(nullptr, 128 * 32 * 4);
  d.takeCounters();
  if (rs) {
    // Thread t's register q of step s: A[16w + g + 8 (q % 2)][16 s + 8 (q /
    // 2) + 2 i + {0, 1}].
    std::vector<uint32_t> frag(128 * 16);
    for (int t = 0; t < 128; ++t)
      for (int s = 0; s < 4; ++s)
        for (int q = 0; q < 4; ++q) {
          int w = t / 32, gr = (t % 32) / 4, i = t % 4;
          int row = 16 * w + gr + 8 * (q % 2),
              col = 16 * s + 8 * (q / 2) + 2 * i;
          frag[16 * t + 4 * s + q] =
              g.a[row * 64 + col] | uint32_t(g.a[row * 64 + col + 1]) << 16;
        }
    uint64_t a = d.upload(frag.data(), frag.size() * 4);
    error =
        d.launch(m, "wgmma_rs", 1, 128, 16384, {a, img, 16384, desc, result});
    d.cuMemFree(a);
  } else {
    error = d.launch(m, "wgmma_ss", 1, 128, 16384, {img, 16384, desc, result});
  }
  if (counters)
    *counters = d.takeCounters();
  out = d.download<float>(result, 128 * 32);
  if (error.empty())
    g.check(out);
  d.takeReports();
  d.cuMemFree(result);
  d.cuMemFree(desc);
  d.cuMemFree(img);
  d.cuModuleUnload(m);
  return error;
}

TEST(GpuEmuHopperTest, WgmmaSharedSharedAtEverySwizzle) {
  REQUIRE_DRIVER();
  for (int span : {0, 32, 64, 128}) {
    SCOPED_TRACE("swizzle span " + std::to_string(span));
    std::vector<float> out;
    std::string counters;
    EXPECT_EQ(runWgmma(false, span, out, &counters), "");
    EXPECT_TRUE(contains(counters, "wgmma_per_wg=4 ")) << counters;
    EXPECT_TRUE(contains(counters, "wgmma.m64n64k16.bf16.ss=4")) << counters;
  }
}

TEST(GpuEmuHopperTest, WgmmaRegistersSharedMnMajorAtEverySwizzle) {
  REQUIRE_DRIVER();
  for (int span : {0, 32, 64, 128}) {
    SCOPED_TRACE("swizzle span " + std::to_string(span));
    std::vector<float> out;
    std::string counters;
    EXPECT_EQ(runWgmma(true, span, out, &counters), "");
    EXPECT_TRUE(contains(counters, "wgmma.m64n64k16.bf16.rs=4")) << counters;
  }
}

TEST(GpuEmuHopperTest, WgmmaFaultsAreReported) {
  REQUIRE_DRIVER();
  std::vector<float> out;
  {
    // The generic stores of the image are not published to the async proxy.
    Fault f("drop-fence-proxy:0");
    std::string error = runWgmma(false, 128, out);
    EXPECT_TRUE(contains(error, "generic-proxy write read by wgmma without "
                                "fence.proxy.async hazard"))
        << error;
  }
  {
    // The accumulators are read before a wait_group retires the wgmma.
    Fault f("drop-wgmma-wait:0");
    std::string error = runWgmma(true, 128, out);
    EXPECT_TRUE(contains(error, "while that wgmma is still in flight"))
        << error;
    EXPECT_TRUE(contains(error, "ended with 4 wgmma.mma_async in flight"))
        << error;
  }
}

// Misuse the fault kinds do not plant, made by editing the kernel's text.
TEST(GpuEmuHopperTest, WgmmaMisuseIsReported) {
  REQUIRE_DRIVER();
  std::vector<float> out;
  const std::string ss = readInput("hopper-wgmma-ss.ll");
  {
    // No wgmma.fence before the first wgmma.mma_async.
    std::string ir = ss;
    std::string fence = "  call void @llvm.nvvm.wgmma.fence.sync.aligned()\n";
    ASSERT_NE(ir.find(fence), std::string::npos);
    ir.erase(ir.find(fence), fence.size());
    std::string error = runWgmma(false, 128, out, nullptr, ir);
    EXPECT_TRUE(contains(error, "without a wgmma.fence since the warpgroup's "
                                "last wgmma.wait_group"))
        << error;
  }
  {
    // A store into A's tile while the first wgmma still reads it.
    std::string ir = ss;
    std::string after = "  %e0_0 = extractvalue";
    ASSERT_NE(ir.find(after), std::string::npos);
    ir.insert(ir.find(after),
              "  store i32 0, ptr addrspace(3) @smem, align 4\n");
    std::string error = runWgmma(false, 128, out, nullptr, ir);
    EXPECT_TRUE(contains(error, "async-source-in-flight hazard at shared "
                                "offset 0"))
        << error;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Captured host copies (a plan's tensor maps)
//===----------------------------------------------------------------------===//

namespace {

// A copy from page-locked memory is recorded and reads its source at each
// replay, as a CUDA graph's memcpy node does; one from pageable memory
// invalidates the capture.
TEST(GpuEmuHopperTest, CapturedHostCopiesReadPageLockedMemoryAtReplay) {
  REQUIRE_DRIVER();
  EmuDriver &d = driver();
  CUstream stream = nullptr;
  ASSERT_EQ(d.cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  uint64_t device = d.upload(nullptr, 64);
  void *host = nullptr;
  ASSERT_EQ(d.cuMemAllocHost(&host, 64), CUDA_SUCCESS);
  std::memset(host, 1, 64);
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS);
  ASSERT_EQ(d.cuMemcpyHtoDAsync(device, host, 64, stream), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  // Nothing was copied while capturing; the replay copies what the
  // staging holds then.
  EXPECT_NE(d.download<uint8_t>(device, 64)[0], 1);
  std::memset(host, 7, 64);
  ASSERT_EQ(d.cuGraphLaunch(exec, stream), CUDA_SUCCESS);
  std::vector<uint8_t> got = d.download<uint8_t>(device, 64);
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[63], 7);
  // Pageable memory.
  std::vector<uint8_t> pageable(64, 3);
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS);
  CUresult r = d.cuMemcpyHtoDAsync(device, pageable.data(), 64, stream);
  EXPECT_NE(r, CUDA_SUCCESS);
  EXPECT_TRUE(contains(d.errorText(r), "from pageable host memory while "
                                       "capturing"))
      << d.errorText(r);
  d.cuStreamEndCapture(stream, &graph);
  d.cuGraphExecDestroy(exec);
  d.cuMemFreeHost(host);
  d.cuMemFree(device);
  d.cuStreamDestroy(stream);
}

} // namespace
