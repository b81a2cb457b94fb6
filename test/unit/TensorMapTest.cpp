//===- TensorMapTest.cpp - tensor map parameters through the runtime ------===//
//
// A kernel's `tensor_maps` parameter (docs/kernel-abi.md, "Tensor maps"):
//   - the manifest's maps parsed and refused by field (swizzle, box, buffer,
//     element type, dims);
//   - the encode arguments derived from the launch's sizes and buffers
//     (permuted views, byte strides) and refused by name (stride not a
//     multiple of 16, unaligned base, a left-out dimension of size > 1);
//   - test/GpuEmu/Inputs/hopper-tma-param.ll launched by Runtime::launch on
//     the emulated driver: its two maps (a 128B-swizzled load, an unswizzled
//     store, a box partly past L) encoded by the runtime and passed as one
//     pointer, the result against the host, and again after the buffers
//     move;
//   - a plan's maps: encoded on the first run, re-encoded (one asynchronous
//     copy, no wait) only when a buffer pointer or a size changes, slots
//     reused past their count; a captured run's maps replayed after other
//     runs reused the other slots; every slot kept by graphs refused.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Runtime/Plan.h"
#include "kvattn/Runtime/Runtime.h"

#include "runtime/CudaApi.h"

#include "gtest/gtest.h"

#include <dlfcn.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

using namespace mlir::kvattn;
using namespace mlir::kvattn::rt;

namespace {

/// The manifest of hopper-tma-param.ll with `maps` and the query's head
/// dim `D` substituted.
std::string manifestWith(const std::string &maps, const std::string &D = "32",
                         const std::string &outType = "f32") {
  return R"json({
  "format": "kvattn-launch-manifest", "version": 1, "chip": "sm_90a",
  "ptx_file": "k.ptx",
  "kernels": [{
    "name": "tma_maps_kvattn_0",
    "params": [
      {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["B", "Hq", "L", )json" +
         D + R"json(], "access": "read"},
      {"index": 1, "name": "out", "kind": "pointer", "type": "u64", "element_type": ")json" +
         outType + R"json(", "shape": ["B", "Hq", "L", )json" + D +
         R"json(], "access": "write"},
      {"index": 2, "name": "status", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": [16], "access": "write"},
      {"index": 3, "name": "tensor_maps", "kind": "tensor_maps", "type": "u64", "maps": [)json" +
         maps + R"json(]},
      {"index": 4, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 5, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 6, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 7, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 8, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"}
    ],
    "grid": {"x": "B * Hq", "y": "ceil(L / 16)", "z": 1},
    "block": {"x": 512, "y": 1, "z": 1},
    "dynamic_shared_memory_bytes": 4112,
    "tile": {"block_m": 16, "block_n": 16, "num_warps": 16, "num_stages": 1}
  }]
})json";
}

const char *kQueryMap =
    R"({"name": "q_load", "buffer": "query", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "128B", "element_type": "f32", "oob_fill": "nan"})";
const char *kOutMap =
    R"({"name": "o_store", "buffer": "out", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})";

std::string kernelManifest() {
  return manifestWith(std::string(kQueryMap) + ", " + kOutMap);
}

/// parseManifest's error for `maps` (or "" when it parses).
std::string parseError(const std::string &maps, const std::string &D = "32",
                       const std::string &outType = "f32") {
  Manifest m;
  Status s = parseManifest(manifestWith(maps, D, outType), m);
  return s.isOk() ? "" : s.message();
}

bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

TEST(TensorMapTest, ManifestParsesTheMaps) {
  Manifest m;
  Status s = parseManifest(kernelManifest(), m);
  ASSERT_TRUE(s.isOk()) << s.message();
  const ParamInfo &p = m.kernels[0].params[3];
  EXPECT_EQ(p.kind, "tensor_maps");
  ASSERT_EQ(p.maps.size(), 2u);
  EXPECT_EQ(p.maps[0].name, "q_load");
  EXPECT_EQ(p.maps[0].buffer, "query");
  EXPECT_EQ(p.maps[0].dims, (std::vector<int>{3, 1, 2, 0}));
  EXPECT_EQ(p.maps[0].box, (std::vector<uint32_t>{32, 1, 16, 1}));
  EXPECT_EQ(p.maps[0].swizzleBytes, 128);
  EXPECT_TRUE(p.maps[0].nanFill);
  EXPECT_EQ(p.maps[1].swizzleBytes, 0);
  EXPECT_FALSE(p.maps[1].nanFill);
}

TEST(TensorMapTest, ManifestRefusesBadMapsByField) {
  // The swizzle does not allow the box: 32 f32 = 128 bytes per row.
  std::string e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "64B", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "tensor map 'q' swizzle 64B does not allow its "
                          "box: box[0] = 32 f32 is 128 bytes, more than the "
                          "swizzle's 64B"))
      << e;
  // An inner box row that is not a multiple of 16 bytes.
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [6, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(
      contains(e, "tensor map 'q' box[0] = 6 f32 is 24 bytes, not a multiple "
                  "of 16"))
      << e;
  // A box larger than a static dimension of the tensor.
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [64, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "tensor map 'q' box[0] = 64 is larger than the "
                          "tensor: 'query' dimension 3 is 32"))
      << e;
  // Except a static dimension of 0: an empty tensor, from which nothing is
  // loaded (the runtime leaves its map zero), takes the kernel's box.
  e = parseError(std::string(kQueryMap) + ", " + kOutMap, "0");
  EXPECT_EQ(e, "");
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [32, 1, 300, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "box[2] must be an integer in [1, 256]")) << e;
  e = parseError(
      R"({"name": "q", "buffer": "keys", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "tensor map 'q' describes 'keys', which is no "
                          "pointer parameter of the kernel"))
      << e;
  e = parseError(
      R"({"name": "o", "buffer": "out", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})",
      "32", "bf16");
  EXPECT_TRUE(contains(e, "tensor map 'o' has element type 'f32' but 'out' "
                          "is 'bf16'"))
      << e;
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 1, 0], "box": [32, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "dims[2] = 1 names a dimension of 'query' twice"))
      << e;
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 4, 0], "box": [32, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "dims[2] = 4 is not a dimension of 'query' (rank 4)"))
      << e;
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [32, 1, 16], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "has 3 box sizes for 4 dims")) << e;
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "16B", "element_type": "f32", "oob_fill": "zero"})");
  EXPECT_TRUE(contains(e, "has swizzle \"16B\"")) << e;
  e = parseError(
      R"({"name": "q", "buffer": "query", "dims": [3, 1, 2, 0], "box": [32, 1, 16, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "inf"})");
  EXPECT_TRUE(contains(e, "has oob_fill \"inf\"")) << e;
  e = parseError("");
  EXPECT_TRUE(contains(e, "has no maps")) << e;
}

TEST(TensorMapTest, ArgumentsComeFromTheLaunchSizes) {
  Manifest m;
  ASSERT_TRUE(parseManifest(kernelManifest(), m).isOk());
  const KernelInfo &k = m.kernels[0];
  Sizes sizes;
  sizes.B = 2, sizes.Hq = 3, sizes.Hkv = 3, sizes.L = 20, sizes.S = 16;
  std::map<std::string, DevicePtr> buffers = {{"query", 0x10000},
                                              {"out", 0x20000}};
  TensorMapArgs a;
  Status s = tensorMapArguments(k, k.params[3].maps[0], sizes, buffers, a);
  ASSERT_TRUE(s.isOk()) << s.message();
  // {D, Hq, L, B} over [B, Hq, L, D]: a permuted view.
  EXPECT_EQ(a.rank, 4u);
  EXPECT_EQ(a.address, 0x10000u);
  EXPECT_EQ(a.dims[0], 32u);
  EXPECT_EQ(a.dims[1], 3u);
  EXPECT_EQ(a.dims[2], 20u);
  EXPECT_EQ(a.dims[3], 2u);
  EXPECT_EQ(a.strides[0], 20u * 32 * 4); // Hq
  EXPECT_EQ(a.strides[1], 32u * 4);      // L
  EXPECT_EQ(a.strides[2], 3u * 20 * 32 * 4);
  EXPECT_EQ(a.box[2], 16u);
  EXPECT_EQ(a.swizzle, cuda::CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_EQ(a.oobFill, cuda::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
  EXPECT_EQ(a.dataType, cuda::CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
  EXPECT_FALSE(a.empty);

  // An unaligned base, named with the map.
  buffers["query"] = 0x10008;
  s = tensorMapArguments(k, k.params[3].maps[0], sizes, buffers, a);
  EXPECT_TRUE(contains(s.message(),
                       "launch of 'tma_maps_kvattn_0': tensor map 'q_load' "
                       "(buffer 'query'): the buffer's address 65544 is not "
                       "16-byte aligned"))
      << s.message();
  buffers.erase("query");
  s = tensorMapArguments(k, k.params[3].maps[0], sizes, buffers, a);
  EXPECT_TRUE(contains(s.message(), "no device buffer given for 'query'"))
      << s.message();
  buffers["query"] = 0x10000;

  // An empty tensor (L = 0): written as zeros, nothing for the driver.
  Sizes empty = sizes;
  empty.L = 0;
  ASSERT_TRUE(
      tensorMapArguments(k, k.params[3].maps[0], empty, buffers, a).isOk());
  EXPECT_TRUE(a.empty);

  // A row of 34 f32 = 136 bytes: not a multiple of 16.
  Manifest m34;
  ASSERT_TRUE(
      parseManifest(
          manifestWith(
              R"({"name": "q", "buffer": "query", "dims": [3, 2, 1, 0], "box": [16, 8, 1, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})",
              "34"),
          m34)
          .isOk());
  s = tensorMapArguments(m34.kernels[0], m34.kernels[0].params[3].maps[0],
                         sizes, buffers, a);
  EXPECT_TRUE(contains(s.message(),
                       "tensor map 'q' (buffer 'query'): dimension 1 (buffer "
                       "dimension 2, 'L'): stride of 136 bytes is not a "
                       "multiple of 16"))
      << s.message();

  // A buffer dimension left out of the map must have size 1.
  Manifest m3;
  ASSERT_TRUE(
      parseManifest(
          manifestWith(
              R"({"name": "q", "buffer": "query", "dims": [3, 2, 1], "box": [32, 8, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})"),
          m3)
          .isOk());
  s = tensorMapArguments(m3.kernels[0], m3.kernels[0].params[3].maps[0], sizes,
                         buffers, a);
  EXPECT_TRUE(contains(s.message(), "buffer dimension 0 ('B') is not in the "
                                    "map, so its size must be 1, not 2"))
      << s.message();
  sizes.B = 1;
  EXPECT_TRUE(tensorMapArguments(m3.kernels[0], m3.kernels[0].params[3].maps[0],
                                 sizes, buffers, a)
                  .isOk());
  // The innermost map dimension must be the contiguous one.
  Manifest mi;
  ASSERT_TRUE(
      parseManifest(
          manifestWith(
              R"({"name": "q", "buffer": "query", "dims": [2, 3, 1, 0], "box": [16, 8, 1, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})"),
          mi)
          .isOk());
  s = tensorMapArguments(mi.kernels[0], mi.kernels[0].params[3].maps[0], sizes,
                         buffers, a);
  EXPECT_TRUE(contains(s.message(), "the innermost map dimension must be "
                                    "contiguous"))
      << s.message();
}

//===----------------------------------------------------------------------===//
// On the emulated driver
//===----------------------------------------------------------------------===//

std::string readInput(const std::string &name) {
  std::ifstream in(std::string(KVATTN_GPUEMU_INPUTS) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct EmuRuntime {
  std::unique_ptr<Runtime> runtime;
  const Module *module = nullptr;
  Manifest manifest;
  Status open() {
    RuntimeOptions options;
    options.libraryPath = KVATTN_EMU_DRIVER;
    KVATTN_RETURN_IF_ERROR(Runtime::create(runtime, options));
    KVATTN_RETURN_IF_ERROR(parseManifest(kernelManifest(), manifest));
    KVATTN_RETURN_IF_ERROR(runtime->allocate(128, status));
    KVATTN_RETURN_IF_ERROR(runtime->fill(status, 0, 128));
    return runtime->loadModule(readInput("hopper-tma-param.ll"), module);
  }
  DevicePtr status = 0; // the kernel's (unread) status word
};

/// query -> 2 query + 1 through the kernel's two tensor maps.
Status runKernel(EmuRuntime &e, const Sizes &sizes, DevicePtr query,
                 DevicePtr out) {
  LaunchArgs args;
  args.sizes = sizes;
  args.buffers = {{"query", query}, {"out", out}, {"status", e.status}};
  KVATTN_RETURN_IF_ERROR(
      e.runtime->launch(*e.module, e.manifest.kernels[0], args));
  return e.runtime->synchronize();
}

TEST(TensorMapTest, KernelLoadsAndStoresThroughTheRuntimesMaps) {
  EmuRuntime e;
  Status s = e.open();
  ASSERT_TRUE(s.isOk()) << s.message();
  Sizes sizes;
  sizes.B = 2, sizes.Hq = 3, sizes.Hkv = 3, sizes.L = 20, sizes.S = 16;
  const size_t count = 2 * 3 * 20 * 32;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> q1(count), q2(count);
  for (float &v : q1)
    v = dist(rng);
  for (float &v : q2)
    v = dist(rng);
  DevicePtr query1, query2, out1, out2;
  for (DevicePtr *p : {&query1, &query2, &out1, &out2})
    ASSERT_TRUE(e.runtime->allocate(count * 4, *p).isOk());
  ASSERT_TRUE(e.runtime->copyToDevice(query1, q1.data(), count * 4).isOk());
  ASSERT_TRUE(e.runtime->copyToDevice(query2, q2.data(), count * 4).isOk());

  auto check = [&](DevicePtr out, const std::vector<float> &q) {
    std::vector<float> got(count, -1.0f);
    ASSERT_TRUE(e.runtime->copyToHost(got.data(), out, count * 4).isOk());
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(got[i], q[i] * 2.0f + 1.0f) << "element " << i;
  };
  ASSERT_TRUE(e.runtime->synchronize().isOk());
  e.runtime->resetCallCounts();
  s = runKernel(e, sizes, query1, out1);
  ASSERT_TRUE(s.isOk()) << s.message();
  check(out1, q1);
  // The maps travel with the launch: one asynchronous copy, no wait
  // but the caller's synchronize.
  CallCounts c = e.runtime->callCounts();
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.asyncCopies, 1);
  EXPECT_EQ(c.synchronizations, 1);
  // Other buffers: the next launch's maps describe them.
  s = runKernel(e, sizes, query2, out2);
  ASSERT_TRUE(s.isOk()) << s.message();
  check(out2, q2);
  // Other sizes over the same memory (B = 1, L = 7: one partial box).
  Sizes small = sizes;
  small.B = 1, small.L = 7;
  std::vector<float> want(q1.begin(), q1.begin() + 3 * 7 * 32);
  ASSERT_TRUE(
      e.runtime->copyToDevice(query1, want.data(), want.size() * 4).isOk());
  ASSERT_TRUE(e.runtime->fill(out1, 0, count * 4).isOk());
  s = runKernel(e, small, query1, out1);
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<float> got(count, -1.0f);
  ASSERT_TRUE(e.runtime->copyToHost(got.data(), out1, count * 4).isOk());
  for (size_t i = 0; i < count; ++i)
    ASSERT_EQ(got[i], i < want.size() ? want[i] * 2.0f + 1.0f : 0.0f)
        << "element " << i;
  for (DevicePtr p : {query1, query2, out1, out2})
    ASSERT_TRUE(e.runtime->release(p).isOk());
}

TEST(TensorMapTest, LaunchErrorsNameTheMap) {
  EmuRuntime e;
  Status s = e.open();
  ASSERT_TRUE(s.isOk()) << s.message();
  Sizes sizes;
  sizes.B = 1, sizes.Hq = 1, sizes.Hkv = 1, sizes.L = 16, sizes.S = 16;
  // L of 2^32 + 1 rows: above what a tensor map addresses.
  Sizes huge = sizes;
  huge.L = (int64_t(1) << 32) + 1;
  LaunchArgs args;
  args.sizes = huge;
  args.buffers = {{"query", 0x10000}, {"out", 0x20000}, {"status", e.status}};
  s = e.runtime->launch(*e.module, e.manifest.kernels[0], args);
  EXPECT_TRUE(contains(s.message(), "tensor map 'q_load' (buffer 'query'): "
                                    "dimension 2 (buffer dimension 2, 'L'): "
                                    "size 4294967297 is above 2^32"))
      << s.message();
}

/// A plan over hopper-tma-param.ll and device buffers for its largest run.
struct PlanFixture {
  EmuRuntime e;
  std::unique_ptr<Plan> plan;
  DevicePtr query[2] = {}, out[2] = {};
  static constexpr size_t kCount = 2 * 3 * 20 * 32;
  std::mt19937 rng{11};
  Status open() {
    KVATTN_RETURN_IF_ERROR(e.open());
    Sizes bounds;
    bounds.B = 2, bounds.Hq = 3, bounds.Hkv = 3, bounds.L = 20, bounds.S = 16;
    KVATTN_RETURN_IF_ERROR(Plan::create(*e.runtime,
                                        readInput("hopper-tma-param.ll"),
                                        e.manifest, bounds, plan));
    for (int i = 0; i < 2; ++i) {
      KVATTN_RETURN_IF_ERROR(e.runtime->allocate(kCount * 4, query[i]));
      KVATTN_RETURN_IF_ERROR(e.runtime->allocate(kCount * 4, out[i]));
    }
    return Status::ok();
  }
  static Sizes sizes(int64_t B, int64_t L) {
    Sizes s;
    s.B = B, s.Hq = 3, s.Hkv = 3, s.L = L, s.S = 16;
    return s;
  }
  /// New values in query[i], out[i] cleared: what the next run must give.
  std::vector<float> prepare(int i, const Sizes &s) {
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    std::vector<float> q(size_t(s.B * s.Hq * s.L * 32));
    for (float &v : q)
      v = dist(rng);
    EXPECT_TRUE(
        e.runtime->copyToDevice(query[i], q.data(), q.size() * 4).isOk());
    EXPECT_TRUE(e.runtime->fill(out[i], 0, kCount * 4).isOk());
    EXPECT_TRUE(e.runtime->synchronize().isOk());
    return q;
  }
  /// out[i] is 2 q + 1 over q's elements and untouched after them.
  void check(int i, const std::vector<float> &q) {
    ASSERT_TRUE(e.runtime->synchronize().isOk());
    std::vector<float> got(kCount, -1.0f);
    ASSERT_TRUE(e.runtime->copyToHost(got.data(), out[i], kCount * 4).isOk());
    for (size_t k = 0; k < kCount; ++k)
      ASSERT_EQ(got[k], k < q.size() ? q[k] * 2.0f + 1.0f : 0.0f)
          << "element " << k;
  }
  /// One plan run; the driver calls it made.
  CallCounts run(int i, const Sizes &s) {
    e.runtime->resetCallCounts();
    Status st = plan->run(s, {{"query", query[i]}, {"out", out[i]}});
    EXPECT_TRUE(st.isOk()) << st.message();
    return e.runtime->callCounts();
  }
};

TEST(TensorMapTest, PlanEncodesOnlyWhenABufferOrASizeChanges) {
  PlanFixture f;
  Status s = f.open();
  ASSERT_TRUE(s.isOk()) << s.message();
  // 4 map slots of 2 maps of 128 bytes, besides the status word.
  EXPECT_EQ(f.plan->workspaceBytes(), 128u + 4 * 2 * 128);
  const Sizes full = PlanFixture::sizes(2, 20);
  std::vector<float> q = f.prepare(0, full);
  // The first run encodes and copies the maps: one asynchronous copy, no
  // wait, no allocation.
  CallCounts c = f.run(0, full);
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.asyncCopies, 1);
  EXPECT_EQ(c.synchronizations, 0);
  EXPECT_EQ(c.allocations, 0);
  EXPECT_EQ(c.synchronousCopies, 0);
  f.check(0, q);
  // The same buffers and sizes: nothing but the launch.
  q = f.prepare(0, full);
  c = f.run(0, full);
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.asyncCopies, 0);
  EXPECT_EQ(c.synchronizations, 0);
  f.check(0, q);
  // Other buffers: re-encoded once.
  std::vector<float> q1 = f.prepare(1, full);
  c = f.run(1, full);
  EXPECT_EQ(c.asyncCopies, 1);
  EXPECT_EQ(c.synchronizations, 0);
  f.check(1, q1);
  // Back to the first buffers: still in a slot, nothing encoded.
  q = f.prepare(0, full);
  c = f.run(0, full);
  EXPECT_EQ(c.asyncCopies, 0);
  f.check(0, q);
  // Other sizes (B = 1, L = 7: one partial box per program).
  const Sizes small = PlanFixture::sizes(1, 7);
  q = f.prepare(0, small);
  c = f.run(0, small);
  EXPECT_EQ(c.asyncCopies, 1);
  EXPECT_EQ(c.synchronizations, 0);
  f.check(0, q);
  // More combinations than slots: each new one re-encodes, the results
  // stay right as slots are reused.
  // Held now: (B 2, L 20) over buffers 0 and 1, (1, 7) over 0; one slot
  // free. The least recently used is replaced.
  const std::pair<int64_t, int> steps[] = {{9, 1},  {11, 1}, {13, 1}, {9, 0},
                                           {15, 1}, {11, 0}, {20, 1}};
  for (auto [L, copies] : steps) {
    SCOPED_TRACE("L = " + std::to_string(L));
    const Sizes sz = PlanFixture::sizes(2, L);
    q = f.prepare(0, sz);
    c = f.run(0, sz);
    EXPECT_EQ(c.asyncCopies, copies);
    EXPECT_EQ(c.synchronizations, 0);
    f.check(0, q);
  }
}

TEST(TensorMapTest, PlanRunsWithTensorMapsAreCapturable) {
  PlanFixture f;
  Status s = f.open();
  ASSERT_TRUE(s.isOk()) << s.message();
  // Captured with maps no slot holds: the encode's copy is part of the
  // graph (from its slot's page-locked staging, which nothing rewrites).
  const Sizes captured = PlanFixture::sizes(2, 15);
  ASSERT_TRUE(f.e.runtime->beginCapture().isOk());
  s = f.plan->run(captured, {{"query", f.query[1]}, {"out", f.out[1]}});
  ASSERT_TRUE(s.isOk()) << s.message();
  std::unique_ptr<Graph> graph;
  s = f.e.runtime->endCapture(graph);
  ASSERT_TRUE(s.isOk()) << s.message();
  // Eager runs over other combinations reuse the other slots only.
  for (int64_t L : {3, 5, 7, 9, 11, 13}) {
    const Sizes sz = PlanFixture::sizes(2, L);
    std::vector<float> q = f.prepare(0, sz);
    f.run(0, sz);
    f.check(0, q);
  }
  // The replay reads the captured maps: query[1], out[1], L = 15.
  std::vector<float> q = f.prepare(1, captured);
  f.e.runtime->resetCallCounts();
  s = f.e.runtime->launchGraph(*graph);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(f.e.runtime->callCounts().synchronizations, 0);
  f.check(1, q);
  // A capture over maps a slot already holds keeps that slot too; with
  // every slot kept, a capture needing a new one is refused by name.
  std::vector<std::unique_ptr<Graph>> graphs;
  for (int64_t L : {3, 5, 7}) {
    ASSERT_TRUE(f.e.runtime->beginCapture().isOk());
    s = f.plan->run(PlanFixture::sizes(2, L),
                    {{"query", f.query[0]}, {"out", f.out[0]}});
    ASSERT_TRUE(s.isOk()) << s.message();
    graphs.emplace_back();
    ASSERT_TRUE(f.e.runtime->endCapture(graphs.back()).isOk());
  }
  s = f.plan->run(PlanFixture::sizes(1, 1),
                  {{"query", f.query[0]}, {"out", f.out[0]}});
  EXPECT_TRUE(contains(s.message(),
                       "every one of the 4 tensor-map slots of "
                       "'tensor_maps' is kept for a captured CUDA graph"))
      << s.message();
  // What the kept slots hold still runs.
  q = f.prepare(0, PlanFixture::sizes(2, 5));
  ASSERT_TRUE(f.e.runtime->launchGraph(*graphs[1]).isOk());
  f.check(0, q);
  q = f.prepare(0, PlanFixture::sizes(2, 5));
  f.run(0, PlanFixture::sizes(2, 5));
  f.check(0, q);
}

TEST(TensorMapTest, PlanRunsRefuseBadMapsBeforeLaunching) {
  EmuRuntime e;
  Status s = e.open();
  ASSERT_TRUE(s.isOk()) << s.message();
  // Rows of 34 f32 (136 bytes): the map's row stride is refused at the
  // run, before anything is queued.
  Manifest m;
  ASSERT_TRUE(
      parseManifest(
          manifestWith(
              R"({"name": "q", "buffer": "query", "dims": [3, 2, 1, 0], "box": [16, 8, 1, 1], "swizzle": "none", "element_type": "f32", "oob_fill": "zero"})",
              "34"),
          m)
          .isOk());
  Sizes bounds = PlanFixture::sizes(2, 20);
  std::unique_ptr<Plan> plan;
  s = Plan::create(*e.runtime, readInput("hopper-tma-param.ll"), m, bounds,
                   plan);
  ASSERT_TRUE(s.isOk()) << s.message();
  DevicePtr q, o;
  ASSERT_TRUE(e.runtime->allocate(2 * 3 * 20 * 34 * 4, q).isOk());
  ASSERT_TRUE(e.runtime->allocate(2 * 3 * 20 * 34 * 4, o).isOk());
  ASSERT_TRUE(e.runtime->synchronize().isOk());
  e.runtime->resetCallCounts();
  s = plan->run(bounds, {{"query", q}, {"out", o}});
  EXPECT_TRUE(contains(s.message(),
                       "launch of 'tma_maps_kvattn_0': tensor map 'q' (buffer "
                       "'query'): dimension 1 (buffer dimension 2, 'L'): "
                       "stride of 136 bytes is not a multiple of 16"))
      << s.message();
  EXPECT_EQ(e.runtime->callCounts().launches, 0);
  EXPECT_EQ(e.runtime->callCounts().asyncCopies, 0);
}

} // namespace
