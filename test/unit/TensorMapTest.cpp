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
//   - a plan refuses tensor maps by name (not encoded by plans yet).
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
      {"index": 2, "name": "tensor_maps", "kind": "tensor_maps", "type": "u64", "maps": [)json" +
         maps + R"json(]},
      {"index": 3, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 4, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 5, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 6, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
      {"index": 7, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"}
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
  const ParamInfo &p = m.kernels[0].params[2];
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
  Status s = tensorMapArguments(k, k.params[2].maps[0], sizes, buffers, a);
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
  s = tensorMapArguments(k, k.params[2].maps[0], sizes, buffers, a);
  EXPECT_TRUE(contains(s.message(),
                       "launch of 'tma_maps_kvattn_0': tensor map 'q_load' "
                       "(buffer 'query'): the buffer's address 65544 is not "
                       "16-byte aligned"))
      << s.message();
  buffers.erase("query");
  s = tensorMapArguments(k, k.params[2].maps[0], sizes, buffers, a);
  EXPECT_TRUE(contains(s.message(), "no device buffer given for 'query'"))
      << s.message();
  buffers["query"] = 0x10000;

  // An empty tensor (L = 0): written as zeros, nothing for the driver.
  Sizes empty = sizes;
  empty.L = 0;
  ASSERT_TRUE(
      tensorMapArguments(k, k.params[2].maps[0], empty, buffers, a).isOk());
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
  s = tensorMapArguments(m34.kernels[0], m34.kernels[0].params[2].maps[0],
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
  s = tensorMapArguments(m3.kernels[0], m3.kernels[0].params[2].maps[0], sizes,
                         buffers, a);
  EXPECT_TRUE(contains(s.message(), "buffer dimension 0 ('B') is not in the "
                                    "map, so its size must be 1, not 2"))
      << s.message();
  sizes.B = 1;
  EXPECT_TRUE(tensorMapArguments(m3.kernels[0], m3.kernels[0].params[2].maps[0],
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
  s = tensorMapArguments(mi.kernels[0], mi.kernels[0].params[2].maps[0], sizes,
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
    return runtime->loadModule(readInput("hopper-tma-param.ll"), module);
  }
};

/// query -> 2 query + 1 through the kernel's two tensor maps.
Status runKernel(EmuRuntime &e, const Sizes &sizes, DevicePtr query,
                 DevicePtr out) {
  LaunchArgs args;
  args.sizes = sizes;
  args.buffers = {{"query", query}, {"out", out}};
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
  args.buffers = {{"query", 0x10000}, {"out", 0x20000}};
  s = e.runtime->launch(*e.module, e.manifest.kernels[0], args);
  EXPECT_TRUE(contains(s.message(), "tensor map 'q_load' (buffer 'query'): "
                                    "dimension 2 (buffer dimension 2, 'L'): "
                                    "size 4294967297 is above 2^32"))
      << s.message();
}

TEST(TensorMapTest, PlansRefuseTensorMapsByName) {
  EmuRuntime e;
  Status s = e.open();
  ASSERT_TRUE(s.isOk()) << s.message();
  std::unique_ptr<Plan> plan;
  Sizes bounds;
  bounds.B = 2, bounds.Hq = 3, bounds.Hkv = 3, bounds.L = 20, bounds.S = 16;
  s = Plan::create(*e.runtime, readInput("hopper-tma-param.ll"), e.manifest,
                   bounds, plan);
  EXPECT_TRUE(contains(s.message(),
                       "kernel 'tma_maps_kvattn_0' takes tensor maps "
                       "('tensor_maps'), which plans do not encode yet"))
      << s.message();
}

} // namespace
