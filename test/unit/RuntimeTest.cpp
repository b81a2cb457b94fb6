//===- RuntimeTest.cpp - the CUDA runtime over the fake driver ------------===//
//
// Everything the runtime does before and around a launch, checked without a
// GPU: the fake driver (test/fakecuda) implements the entry points over host
// memory and records the calls.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Runtime/Runtime.h"

#include "test/fakecuda/FakeCuda.h"

#include "gtest/gtest.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace mlir::kvattn;
using namespace mlir::kvattn::rt;

namespace {

/// A kernel with every kind of parameter: 64x64 tiles, 4 warps, Hq = 8,
/// head dim 128, more than 48 KiB of dynamic shared memory.
const char *kManifest = R"json({
  "format": "kvattn-launch-manifest",
  "version": 1,
  "chip": "sm_80",
  "ptx_file": "k.ptx",
  "kernels": [
    {
      "name": "k0",
      "params": [
        {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "L", 128], "access": "read"},
        {"index": 1, "name": "key", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", "Hkv", "S", 128], "access": "read"},
        {"index": 2, "name": "value", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", "Hkv", "S", 128], "access": "read"},
        {"index": 3, "name": "q_offset", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 4, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": ["B"], "access": "read"},
        {"index": 5, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "L", 128], "access": "write"},
        {"index": 6, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 7, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 8, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 9, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 10, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "B * Hq", "y": "ceil(L / 64)", "z": 1},
      "block": {"x": 128, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 98816,
      "tile": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}
    }
  ]
})json";

const char *kPtx = ".version 8.0\n.target sm_80\n.visible .entry k0(\n"
                   ".param .u64 .ptr .align 1 k0_param_0,\n"
                   ".param .u64 .ptr .align 1 k0_param_1,\n"
                   ".param .u64 .ptr .align 1 k0_param_2,\n"
                   ".param .u64 .ptr .align 1 k0_param_3,\n"
                   ".param .u64 .ptr .align 1 k0_param_4,\n"
                   ".param .u64 .ptr .align 1 k0_param_5,\n"
                   ".param .u64 k0_param_6,\n.param .u64 k0_param_7,\n"
                   ".param .u64 k0_param_8,\n.param .u64 k0_param_9,\n"
                   ".param .u64 k0_param_10\n)\n{\nret;\n}\n";

class RuntimeTest : public ::testing::Test {
protected:
  void SetUp() override {
    fakecuda_reset();
    RuntimeOptions options;
    options.libraryPath = KVATTN_FAKE_CUDA;
    Status s = Runtime::create(runtime, options);
    ASSERT_TRUE(s.isOk()) << s.message();
    ASSERT_TRUE(parseManifest(kManifest, manifest).isOk());
  }

  /// Arguments for B = 2, Hq = 8, Hkv = 2, L = 100, S = 300.
  LaunchArgs validArgs() {
    LaunchArgs args;
    args.sizes = {2, 8, 2, 100, 300};
    args.buffers = {
        {"query", 0x1000}, {"key", 0x2000}, {"value", 0x3000}, {"out", 0x4000}};
    args.metadata = {{"q_offset", {200, 150}}, {"kv_len", {300, 250}}};
    return args;
  }

  std::string launchError(const LaunchArgs &args) {
    const Module *module;
    EXPECT_TRUE(runtime->loadModule(kPtx, module).isOk());
    Status s = runtime->launch(*module, manifest.kernels[0], args);
    EXPECT_TRUE(s.isError());
    EXPECT_TRUE(fakecuda_state()->launches.empty()) << "launched anyway";
    return s.message();
  }

  std::unique_ptr<Runtime> runtime;
  Manifest manifest;
};

} // namespace

TEST(RuntimeDriver, NoDriverIsOneClearMessage) {
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = "/nonexistent/libcuda.so.1";
  Status s = Runtime::create(runtime, options);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("no CUDA driver: cannot load "
                             "'/nonexistent/libcuda.so.1'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("set KVATTN_LIBCUDA"), std::string::npos);
}

TEST(RuntimeDriver, RealDlopenOfLibcuda) {
  // The real dlopen path with the default name. Only meaningful where no
  // driver is installed (CI and development machines have none).
  if (void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(h);
    GTEST_SKIP() << "a CUDA driver is installed here; the no-driver path "
                    "cannot be exercised";
  }
  unsetenv("KVATTN_LIBCUDA");
  std::unique_ptr<Runtime> runtime;
  Status s = Runtime::create(runtime);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("no CUDA driver: cannot load 'libcuda.so.1'"),
            std::string::npos)
      << s.message();
}

TEST(RuntimeDriver, EnvironmentNamesTheLibrary) {
  setenv("KVATTN_LIBCUDA", KVATTN_FAKE_CUDA, 1);
  std::unique_ptr<Runtime> runtime;
  Status s = Runtime::create(runtime);
  unsetenv("KVATTN_LIBCUDA");
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(runtime->computeCapability(), 90);
}

TEST(RuntimeDriver, LibraryWithoutEntryPoints) {
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = "libm.so.6";
  Status s = Runtime::create(runtime, options);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("has no entry point 'cuGetErrorName'"),
            std::string::npos)
      << s.message();
}

TEST(RuntimeDriver, InitFailureIsNamed) {
  fakecuda_reset();
  fakecuda_fail_next("cuInit", 100);
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = KVATTN_FAKE_CUDA;
  Status s = Runtime::create(runtime, options);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "initialising the driver failed: CUDA_ERROR_NO_DEVICE (100): no "
            "CUDA-capable device is detected");
}

TEST_F(RuntimeTest, ErrorsNameTheStepAndTheCudaError) {
  fakecuda_fail_next("cuMemAlloc_v2", 2);
  DevicePtr p;
  Status s = runtime->allocate(64, p);
  EXPECT_EQ(s.message(), "allocating 64 bytes of device memory failed: "
                         "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
}

TEST_F(RuntimeTest, ModulesAreCachedByContent) {
  const Module *a, *b, *c;
  ASSERT_TRUE(runtime->loadModule(kPtx, a).isOk());
  ASSERT_TRUE(runtime->loadModule(std::string(kPtx), b).isOk());
  EXPECT_EQ(a, b);
  EXPECT_EQ(fakecuda_state()->moduleLoads, 1);
  ASSERT_TRUE(runtime->loadModule(std::string(kPtx) + "\n// other", c).isOk());
  EXPECT_NE(a, c);
  EXPECT_EQ(fakecuda_state()->moduleLoads, 2);
  EXPECT_EQ(runtime->loadedModules(), 2u);
}

TEST_F(RuntimeTest, FailedLoadReportsTheJitLog) {
  const Module *m;
  Status s = runtime->loadModule("// FAKE_INVALID\n", m);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("loading the device module failed: "
                             "CUDA_ERROR_INVALID_PTX (218)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("JIT log: ptxas: line 1: fake syntax error"),
            std::string::npos)
      << s.message();
}

TEST_F(RuntimeTest, LaunchPacksArgumentsInManifestOrder) {
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  LaunchArgs args = validArgs();
  Status s = runtime->launch(*module, manifest.kernels[0], args);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(fakecuda_state()->launches.size(), 1u);
  const FakeLaunch &l = fakecuda_state()->launches[0];
  EXPECT_EQ(l.kernel, "k0");
  // grid = (B * Hq, ceil(L / 64), 1), block = (128, 1, 1)
  EXPECT_EQ(l.grid[0], 16u);
  EXPECT_EQ(l.grid[1], 2u);
  EXPECT_EQ(l.grid[2], 1u);
  EXPECT_EQ(l.block[0], 128u);
  EXPECT_EQ(l.sharedMemBytes, 98816u);
  ASSERT_EQ(l.params.size(), 11u);
  EXPECT_EQ(l.params[0], 0x1000u);
  EXPECT_EQ(l.params[1], 0x2000u);
  EXPECT_EQ(l.params[2], 0x3000u);
  EXPECT_EQ(l.params[5], 0x4000u);
  // Metadata uploaded in the kernel's element types: q_offset i32, kv_len
  // i64.
  int32_t qOffset[2];
  std::memcpy(qOffset, reinterpret_cast<void *>(l.params[3]), 8);
  EXPECT_EQ(qOffset[0], 200);
  EXPECT_EQ(qOffset[1], 150);
  int64_t kvLen[2];
  std::memcpy(kvLen, reinterpret_cast<void *>(l.params[4]), 16);
  EXPECT_EQ(kvLen[0], 300);
  EXPECT_EQ(kvLen[1], 250);
  EXPECT_EQ(l.params[6], 2u);    // B
  EXPECT_EQ(l.params[7], 8u);    // Hq
  EXPECT_EQ(l.params[8], 2u);    // Hkv
  EXPECT_EQ(l.params[9], 100u);  // L
  EXPECT_EQ(l.params[10], 300u); // S
  // More than 48 KiB of dynamic shared memory is requested first.
  ASSERT_EQ(fakecuda_state()->functionAttributes.size(), 1u);
  EXPECT_EQ(fakecuda_state()->functionAttributes[0].second, 98816);
}

TEST_F(RuntimeTest, DeviceBuffersMustBe16ByteAligned) {
  LaunchArgs args = validArgs();
  args.buffers["key"] = 0x2008;
  EXPECT_NE(launchError(args).find(
                "device buffer 'key' at 0x2008 is not 16-byte aligned"),
            std::string::npos);
}

TEST_F(RuntimeTest, PackedGqaKernelsLaunchOneProgramPerKvHead) {
  // The same kernel compiled with GQA packing: group = Hq / Hkv = 4 heads
  // per program, so the grid is (B * Hq / 4, ceil(4 * L / 64)).
  KernelInfo kernel = manifest.kernels[0];
  kernel.group = 4;
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  LaunchArgs args = validArgs();
  args.sizes.L = 3;
  Status s = runtime->launch(*module, kernel, args);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(fakecuda_state()->launches.size(), 1u);
  const FakeLaunch &l = fakecuda_state()->launches[0];
  EXPECT_EQ(l.grid[0], 4u); // 2 batches x 2 kv heads
  EXPECT_EQ(l.grid[1], 1u); // 12 packed rows in one 64-row block
  EXPECT_EQ(l.grid[2], 1u);

  // The manifest field round-trips; a group below 1 is refused.
  std::string json = kManifest;
  std::string stages = "\"num_stages\": 2}";
  json.replace(json.find(stages), stages.size(),
               "\"num_stages\": 2, \"group\": 4}");
  Manifest packed;
  ASSERT_TRUE(parseManifest(json, packed).isOk());
  EXPECT_EQ(packed.kernels[0].group, 4);
  json.replace(json.find("\"group\": 4"), std::strlen("\"group\": 4"),
               "\"group\": 0");
  s = parseManifest(json, packed);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("group 0 (must be >= 1)"), std::string::npos)
      << s.message();
}

TEST_F(RuntimeTest, ValidationNamesBatchAndValue) {
  LaunchArgs args = validArgs();
  args.metadata["q_offset"] = {200, -3};
  EXPECT_NE(launchError(args).find("q_offset[1] = -3 is negative (batch 1)"),
            std::string::npos);

  args = validArgs();
  args.metadata["kv_len"] = {301, 250};
  EXPECT_NE(launchError(args).find(
                "kv_len[0] = 301 is outside [0, S = 300] (batch 0)"),
            std::string::npos);

  args = validArgs();
  args.sizes.Hq = 4;
  EXPECT_NE(launchError(args).find("'query' dim 1 is compiled as 8 but Hq = 4"),
            std::string::npos);

  args = validArgs();
  args.metadata["q_offset"] = {1};
  EXPECT_NE(launchError(args).find("'q_offset' has 1 values, expected 2"),
            std::string::npos);

  args = validArgs();
  args.buffers.erase("value");
  EXPECT_NE(launchError(args).find("missing device buffer 'value'"),
            std::string::npos);

  args = validArgs();
  args.metadata["q_pos"] = {1, 2};
  EXPECT_NE(launchError(args).find("the kernel has no parameter 'q_pos'"),
            std::string::npos);

  args = validArgs();
  args.sizes.Hkv = 3;
  EXPECT_NE(launchError(args).find("must be a multiple of kv heads Hkv = 3"),
            std::string::npos);

  args = validArgs();
  args.metadata["q_offset"] = {(int64_t(1) << 62) + 1, 0};
  EXPECT_NE(launchError(args).find("is out of range"), std::string::npos);
}

TEST_F(RuntimeTest, GridBeyondCudaLimitsIsRefused) {
  // L = 64 * 65536 query rows need 65536 blocks in y: one too many.
  LaunchArgs args = validArgs();
  args.sizes.L = int64_t(64) * 65536;
  EXPECT_NE(launchError(args).find("exceeds the CUDA limits"),
            std::string::npos);
}

TEST_F(RuntimeTest, DeviceFigures) {
  EXPECT_EQ(runtime->multiprocessorCount(), 132);
  size_t freeBytes = 0, totalBytes = 0;
  ASSERT_TRUE(runtime->memoryInfo(freeBytes, totalBytes).isOk());
  EXPECT_EQ(totalBytes, size_t(80) << 30);
  EXPECT_EQ(freeBytes, size_t(79) << 30);
}

TEST_F(RuntimeTest, LaunchesRunOnTheCallersStream) {
  const uint64_t own = runtime->stream();
  EXPECT_NE(own, 0u);
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  runtime->setStream(0x1234);
  EXPECT_EQ(runtime->stream(), 0x1234u);
  ASSERT_TRUE(
      runtime->launch(*module, manifest.kernels[0], validArgs()).isOk());
  ASSERT_TRUE(runtime->synchronize().isOk());
  const FakeCudaState &st = *fakecuda_state();
  ASSERT_EQ(st.launches.size(), 1u);
  EXPECT_EQ(st.launches[0].stream, 0x1234u);
  // The metadata upload (q_offset and kv_len in one copy) is ordered on
  // the same stream.
  ASSERT_EQ(st.transfers.size(), 1u);
  EXPECT_EQ(st.transfers[0].kind, "HtoD");
  EXPECT_EQ(st.transfers[0].stream, 0x1234u);
  EXPECT_EQ(st.synchronizedStreams.back(), 0x1234u);
  // 0 is the legacy default stream, a valid choice.
  runtime->setStream(0);
  ASSERT_TRUE(
      runtime->launch(*module, manifest.kernels[0], validArgs()).isOk());
  EXPECT_EQ(st.launches.back().stream, 0u);
  runtime->useOwnStream();
  EXPECT_EQ(runtime->stream(), own);
  ASSERT_TRUE(
      runtime->launch(*module, manifest.kernels[0], validArgs()).isOk());
  EXPECT_EQ(st.launches.back().stream, own);
}

TEST_F(RuntimeTest, UnchangedMetadataIsNotUploadedAgain) {
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  const FakeCudaState &st = *fakecuda_state();
  LaunchArgs args = validArgs();
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  EXPECT_EQ(st.transfers.size(), 1u); // q_offset and kv_len, packed
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  EXPECT_EQ(st.transfers.size(), 1u) << "repeated launches re-uploaded";
  EXPECT_TRUE(st.synchronizedStreams.empty());
  // A change takes the next slot of the ring: no wait, one copy.
  args.metadata["q_offset"] = {7, 9};
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  ASSERT_EQ(st.transfers.size(), 2u);
  EXPECT_TRUE(st.synchronizedStreams.empty());
  EXPECT_EQ(st.eventSynchronizations, 0);
  ASSERT_EQ(st.launches.size(), 4u);
  EXPECT_NE(st.launches[3].params[3], st.launches[0].params[3]);
  int32_t qOffset[2];
  int64_t kvLen[2]; // i64 in this manifest, packed 16-byte aligned
  std::memcpy(qOffset, reinterpret_cast<void *>(st.launches[3].params[3]), 8);
  EXPECT_EQ(qOffset[0], 7);
  EXPECT_EQ(qOffset[1], 9);
  EXPECT_EQ(st.launches[3].params[4] % 16, 0u);
  std::memcpy(kvLen, reinterpret_cast<void *>(st.launches[3].params[4]), 16);
  EXPECT_EQ(kvLen[0], 300);
  EXPECT_EQ(kvLen[1], 250);
  // The first launch's slot still holds its values.
  std::memcpy(qOffset, reinterpret_cast<void *>(st.launches[0].params[3]), 8);
  EXPECT_EQ(qOffset[0], 200);
  // A launch on another stream copies again (the slot's copy was ordered
  // on the first one).
  runtime->setStream(0x77);
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  ASSERT_EQ(st.transfers.size(), 3u);
  EXPECT_EQ(st.transfers[2].stream, 0x77u);
}

// A serving engine's decode loop: new lengths every step, launches queued
// without a wait. After the first step (which allocates the ring's slot),
// and with the slots reserved up front, no step allocates, synchronises or
// copies from pageable memory: one asynchronous copy from page-locked
// memory and one launch per step.
TEST_F(RuntimeTest, DecodeLoopNeitherWaitsNorAllocates) {
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  FakeCudaState &st = *fakecuda_state();
  ASSERT_TRUE(runtime->reserveMetadata(64).isOk());
  const int devices = st.deviceAllocationCalls, hosts = st.hostAllocationCalls;
  EXPECT_EQ(hosts, 8); // kMetadataSlots page-locked staging buffers
  LaunchArgs args = validArgs();
  constexpr int kSteps = 40; // five times around the ring
  for (int step = 0; step < kSteps; ++step) {
    args.metadata["q_offset"] = {200 + step, 150 + step};
    args.metadata["kv_len"] = {201 + step, 151 + step};
    args.sizes.L = 1;
    ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk())
        << "step " << step;
  }
  EXPECT_EQ(st.deviceAllocationCalls, devices);
  EXPECT_EQ(st.hostAllocationCalls, hosts);
  EXPECT_TRUE(st.synchronizedStreams.empty());
  EXPECT_EQ(st.eventSynchronizations, 0);
  EXPECT_EQ(runtime->metadataWaits(), 0);
  ASSERT_EQ(st.transfers.size(), size_t(kSteps));
  for (const FakeTransfer &t : st.transfers) {
    EXPECT_EQ(t.kind, "HtoD");
    EXPECT_TRUE(t.pinnedSource) << "a copy from pageable memory";
  }
  // Every launch read its own step's values (the fake driver runs at once).
  ASSERT_EQ(st.launches.size(), size_t(kSteps));
  int64_t last[2]; // kv_len is i64 in this manifest
  std::memcpy(last, reinterpret_cast<void *>(st.launches.back().params[4]), 16);
  EXPECT_EQ(last[0], 201 + kSteps - 1);
  EXPECT_EQ(last[1], 151 + kSteps - 1);
}

// When the device is a whole ring behind, the launch that would reuse a
// slot still being read waits for it (one event wait), then proceeds.
TEST_F(RuntimeTest, AFullRingWaitsForTheOldestLaunch) {
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  FakeCudaState &st = *fakecuda_state();
  LaunchArgs args = validArgs();
  for (int step = 0; step < 8; ++step) {
    args.metadata["q_offset"] = {200 + step, 150};
    ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  }
  fakecuda_fail_next("cuEventQuery", 600); // CUDA_ERROR_NOT_READY
  args.metadata["q_offset"] = {7, 9};
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  EXPECT_EQ(st.eventSynchronizations, 1);
  EXPECT_EQ(runtime->metadataWaits(), 1);
  // The ninth launch reuses the first launch's slot.
  EXPECT_EQ(st.launches[8].params[3], st.launches[0].params[3]);
  int32_t qOffset[2];
  std::memcpy(qOffset, reinterpret_cast<void *>(st.launches[8].params[3]), 8);
  EXPECT_EQ(qOffset[0], 7);
  // An event that failed otherwise is an error, not a wait.
  fakecuda_fail_next("cuEventQuery", 700); // CUDA_ERROR_ILLEGAL_ADDRESS
  args.metadata["q_offset"] = {8, 9};
  Status s = runtime->launch(*module, manifest.kernels[0], args);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("waiting for a launch that read earlier "
                             "metadata"),
            std::string::npos)
      << s.message();
}

TEST_F(RuntimeTest, CopyAndFillAreQueuedOnTheStream) {
  DevicePtr a, b;
  ASSERT_TRUE(runtime->allocate(8, a).isOk());
  ASSERT_TRUE(runtime->allocate(8, b).isOk());
  const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(runtime->copyToDevice(a, bytes, 8).isOk());
  ASSERT_TRUE(runtime->fill(b, 0xab, 8).isOk());
  ASSERT_TRUE(runtime->copyDeviceToDevice(b, a, 4).isOk());
  ASSERT_TRUE(runtime->synchronize().isOk());
  uint8_t out[8];
  ASSERT_TRUE(runtime->copyToHost(out, b, 8).isOk());
  const uint8_t want[8] = {1, 2, 3, 4, 0xab, 0xab, 0xab, 0xab};
  EXPECT_EQ(std::memcmp(out, want, 8), 0);
  const FakeCudaState &st = *fakecuda_state();
  ASSERT_EQ(st.transfers.size(), 2u);
  EXPECT_EQ(st.transfers[0].kind, "memset");
  EXPECT_EQ(st.transfers[1].kind, "DtoD");
  EXPECT_EQ(st.transfers[1].bytes, 4u);
  EXPECT_EQ(st.transfers[1].stream, runtime->stream());
  fakecuda_fail_next("cuMemcpyDtoDAsync_v2", 1);
  EXPECT_EQ(runtime->copyDeviceToDevice(b, a, 8).message(),
            "copying 8 bytes on the device failed: CUDA_ERROR_INVALID_VALUE "
            "(1): invalid argument");
  EXPECT_TRUE(runtime->release(a).isOk());
  EXPECT_TRUE(runtime->release(b).isOk());
}

TEST_F(RuntimeTest, TimeOnStreamTimesEachCall) {
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  FakeCudaState &st = *fakecuda_state();
  st.msPerLaunch = 0.25;
  LaunchArgs args = validArgs();
  std::vector<float> ms;
  Status s = runtime->timeOnStream(
      [&] { return runtime->launch(*module, manifest.kernels[0], args); },
      /*warmup=*/2, /*repeats=*/3, ms);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(st.launches.size(), 5u);
  ASSERT_EQ(ms.size(), 3u);
  for (float t : ms)
    EXPECT_FLOAT_EQ(t, 0.25f);
  // Its own events are gone; the metadata slot keeps its one.
  EXPECT_EQ(st.liveEvents, 1);

  // With an L2 flush: one fill of the flush buffer before every call, the
  // buffer allocated once and kept; the fills are not timed.
  st.transfers.clear();
  int allocations = st.liveAllocations;
  for (int round = 0; round < 2; ++round) {
    s = runtime->timeOnStream(
        [&] { return runtime->launch(*module, manifest.kernels[0], args); }, 1,
        2, ms, /*flushBytes=*/4096);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  EXPECT_EQ(st.liveAllocations, allocations + 1);
  ASSERT_EQ(st.transfers.size(), 6u);
  for (const FakeTransfer &t : st.transfers) {
    EXPECT_EQ(t.kind, "memset");
    EXPECT_EQ(t.bytes, 4096u);
  }
  for (float t : ms)
    EXPECT_FLOAT_EQ(t, 0.25f);
}

TEST_F(RuntimeTest, TimeOnStreamTimesCopies) {
  DevicePtr a, b;
  ASSERT_TRUE(runtime->allocate(1024, a).isOk());
  ASSERT_TRUE(runtime->allocate(1024, b).isOk());
  fakecuda_state()->msPerCopy = 2;
  std::vector<float> ms;
  ASSERT_TRUE(
      runtime
          ->timeOnStream(
              [&] { return runtime->copyDeviceToDevice(b, a, 1024); }, 0, 4, ms)
          .isOk());
  EXPECT_EQ(ms, std::vector<float>(4, 2.0f));
}

TEST_F(RuntimeTest, TimeOnStreamErrors) {
  std::vector<float> ms;
  auto nothing = [] { return Status::ok(); };
  EXPECT_EQ(runtime->timeOnStream(nothing, 1, 0, ms).message(),
            "timing needs warmup >= 0 and repeats >= 1 (got 1 and 0)");

  fakecuda_fail_next("cuEventCreate", 2);
  EXPECT_EQ(runtime->timeOnStream(nothing, 1, 2, ms).message(),
            "creating an event failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of "
            "memory");
  EXPECT_EQ(fakecuda_state()->liveEvents, 0) << "events leaked";

  int calls = 0;
  Status s = runtime->timeOnStream(
      [&] {
        return ++calls == 3 ? Status::error("the work failed") : Status::ok();
      },
      1, 4, ms);
  EXPECT_EQ(s.message(), "timed call 1: the work failed");
  EXPECT_EQ(fakecuda_state()->liveEvents, 0) << "events leaked";
  EXPECT_TRUE(ms.empty());
}

TEST(RuntimeValidation, ExplicitPositionsMustIncrease) {
  KernelInfo kernel;
  kernel.name = "k";
  kernel.blockM = 64;
  kernel.blockX = 128;
  kernel.params = {{"q_pos", "pointer", "i64", {"B", "L"}, "read"},
                   {"k_pos", "pointer", "i64", {"B", "S"}, "read"}};
  LaunchArgs args;
  args.sizes = {2, 1, 1, 2, 3};
  args.metadata = {{"q_pos", {5, 6, 7, 8}}, {"k_pos", {0, 1, 2, 4, 4, 5}}};
  Status s = validateLaunch(kernel, args);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("k_pos[1, 1] = 4 does not increase (previous 4, "
                             "batch 1)"),
            std::string::npos)
      << s.message();
  args.metadata["k_pos"] = {0, 1, 2, 3, 4, 5};
  EXPECT_TRUE(validateLaunch(kernel, args).isOk());
}

/// A paged kernel: pages [num_pages, page_size, Hkv, 64], table
/// [B, max_pages], kv_len [B].
static KernelInfo pagedKernel() {
  KernelInfo kernel;
  kernel.name = "paged";
  kernel.blockM = 64;
  kernel.blockX = 128;
  kernel.params = {
      {"key",
       "pointer",
       "bf16",
       {"num_pages", "page_size", "Hkv", "64"},
       "read"},
      {"kv_len", "pointer", "i32", {"B"}, "read"},
      {"block_table", "pointer", "i32", {"B", "max_pages"}, "read"},
      {"num_pages", "scalar", "i64", {}, ""},
      {"page_size", "scalar", "i64", {}, ""},
      {"max_pages", "scalar", "i64", {}, ""}};
  return kernel;
}

TEST(RuntimeValidation, PagedBlockTablesAreCheckedBeforeLaunch) {
  KernelInfo kernel = pagedKernel();
  LaunchArgs args;
  args.sizes = {2, 4, 2, 1, 32};
  args.sizes.numPages = 4;
  args.sizes.pageSize = 16;
  args.sizes.maxPages = 2;
  args.buffers = {{"key", 0x1000}};
  args.metadata = {{"kv_len", {16, 20}}, {"block_table", {3, -1, 0, 2}}};
  EXPECT_TRUE(validateLaunch(kernel, args).isOk());

  auto expectError = [&](std::vector<int64_t> table, std::vector<int64_t> len,
                         const std::string &message) {
    args.metadata["block_table"] = std::move(table);
    args.metadata["kv_len"] = std::move(len);
    Status s = validateLaunch(kernel, args);
    ASSERT_TRUE(s.isError()) << message;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  };
  expectError({3, -1, 4, 2}, {16, 20},
              "block_table[1][0] = 4: page id out of range [0, 4) (batch 1)");
  expectError({3, -1, -1, 2}, {16, 0},
              "block_table[1][1] = 2 follows the -1 at slot 0: the -1 tail "
              "must be canonical (batch 1)");
  expectError({3, -1, 2, 2}, {16, 20},
              "block_table[1][1] = 2: page 2 is already used at slot 0 of "
              "the same sequence (batch 1)");
  expectError({3, -1, 0, -1}, {16, 17},
              "kv_len[1] = 17 does not fit the 1 page(s) of block_table[1] "
              "(page_size 16, at most 16 tokens) (batch 1)");
  expectError({3, -1, 0}, {16, 16}, "'block_table' has 3 values, expected 4");

  args.metadata = {{"kv_len", {16, 20}}, {"block_table", {3, -1, 0, 2}}};
  args.sizes.S = 64;
  Status s = validateLaunch(kernel, args);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("S = 64 must be max_pages * page_size = 32"),
            std::string::npos)
      << s.message();
  // 2^40 pages of 2^40 tokens: the product wrapped to 0 and matched S = 0.
  args.sizes.S = 0;
  args.sizes.maxPages = int64_t(1) << 40;
  args.sizes.pageSize = int64_t(1) << 40;
  s = validateLaunch(kernel, args);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "launch of 'paged': max_pages * page_size = "
                         "1099511627776 * 1099511627776 overflows 64 bits");
}

/// A cascade's prefix kernel over a paged prefix: the pool
/// [prefix_num_pages, prefix_page_size, Hkv, 64] through prefix_pages
/// [prefix_max_pages] of prefix_len [1] keys; it runs with B = 1.
static KernelInfo pagedPrefixKernel() {
  KernelInfo kernel;
  kernel.name = "prefix";
  kernel.kind = "cascade_prefix";
  kernel.blockM = 64;
  kernel.blockX = 128;
  kernel.params = {
      {"prefix_key",
       "pointer",
       "bf16",
       {"prefix_num_pages", "prefix_page_size", "Hkv", "64"},
       "read"},
      {"prefix_len", "pointer", "i32", {"1"}, "read"},
      {"prefix_pages", "pointer", "i32", {"prefix_max_pages"}, "read"},
      {"P", "scalar", "i64", {}, ""},
      {"prefix_num_pages", "scalar", "i64", {}, ""},
      {"prefix_page_size", "scalar", "i64", {}, ""},
      {"prefix_max_pages", "scalar", "i64", {}, ""}};
  return kernel;
}

TEST(RuntimeValidation, PagedPrefixTableIsCheckedBeforeLaunch) {
  KernelInfo kernel = pagedPrefixKernel();
  LaunchArgs args;
  // The run's sizes (B = 3 sequences); the prefix kernel's are B = 1 and
  // P = prefix_max_pages * prefix_page_size (kernelSizes).
  Sizes sizes = {3, 4, 2, 5, 40};
  sizes.prefixNumPages = 6;
  sizes.prefixPageSize = 16;
  sizes.prefixMaxPages = 3;
  args.sizes = kernelSizes(kernel, sizes);
  EXPECT_EQ(args.sizes.B, 1);
  EXPECT_EQ(args.sizes.P, 48);
  args.buffers = {{"prefix_key", 0x1000}};
  args.metadata = {{"prefix_len", {40}}, {"prefix_pages", {5, 0, 2}}};
  EXPECT_TRUE(validateLaunch(kernel, args).isOk());

  auto expectError = [&](std::vector<int64_t> pages, int64_t len,
                         const std::string &message) {
    args.metadata["prefix_pages"] = std::move(pages);
    args.metadata["prefix_len"] = {len};
    Status s = validateLaunch(kernel, args);
    ASSERT_TRUE(s.isError()) << message;
    EXPECT_EQ(s.message(), "launch of 'prefix': " + message);
  };
  expectError({5, 6, 2}, 40,
              "prefix_pages[1] = 6: page id out of range [0, 6)");
  expectError({5, -1, 2}, 16,
              "prefix_pages[2] = 2 follows the -1 at slot 1: the -1 tail "
              "must be canonical");
  expectError({5, 0, 5}, 40,
              "prefix_pages[2] = 5: page 5 is already used at slot 0 of the "
              "same sequence");
  expectError({5, 0, -1}, 33,
              "prefix_len[0] = 33 does not fit the 2 page(s) of prefix_pages "
              "(page_size 16, at most 32 tokens)");
  expectError({5, 0, 2}, -1,
              "prefix_len[0] = -1 does not fit the 3 page(s) of prefix_pages "
              "(page_size 16, at most 48 tokens)");
  expectError({5, 0}, 16, "'prefix_pages' has 2 values, expected 3");

  // A P that is not the table's keys, and sizes out of range.
  args.metadata = {{"prefix_len", {40}}, {"prefix_pages", {5, 0, 2}}};
  args.sizes.P = 64;
  Status s = validateLaunch(kernel, args);
  EXPECT_EQ(s.message(), "launch of 'prefix': P = 64 must be "
                         "prefix_max_pages * prefix_page_size = 48 (the "
                         "logical key count of a paged prefix)");
  sizes.prefixPageSize = 0;
  args.sizes = kernelSizes(kernel, sizes);
  s = validateLaunch(kernel, args);
  EXPECT_EQ(s.message(),
            "launch of 'prefix': paged prefix sizes prefix_num_pages = 6, "
            "prefix_page_size = 0, prefix_max_pages = 3 (prefix_page_size "
            "must be positive, the others non-negative)");
}

/// An append kernel (-kvattn-append-to-gpu): update [B, Hkv, L, 64] into
/// the cache at pos, plain or paged.
static KernelInfo appendKernel(bool paged) {
  KernelInfo kernel;
  kernel.name = "append";
  kernel.kind = "append";
  kernel.blockM = 4;
  kernel.blockX = 128;
  kernel.params = {
      {"update", "pointer", "bf16", {"B", "Hkv", "L", "64"}, "read"},
      {"cache", "pointer", "bf16",
       paged ? std::vector<std::string>{"num_pages", "page_size", "Hkv", "64"}
             : std::vector<std::string>{"B", "Hkv", "S", "64"},
       "write"},
      {"pos", "pointer", "i32", {"B"}, "read"}};
  if (paged)
    kernel.params.push_back(
        {"block_table", "pointer", "i32", {"B", "max_pages"}, "read"});
  for (const char *size : {"B", "Hkv", "L", "S"})
    kernel.params.push_back({size, "scalar", "i64", {}, ""});
  if (paged)
    for (const char *size : {"num_pages", "page_size", "max_pages"})
      kernel.params.push_back({size, "scalar", "i64", {}, ""});
  return kernel;
}

TEST(RuntimeValidation, AppendWritesMustFitTheCache) {
  KernelInfo kernel = appendKernel(/*paged=*/false);
  LaunchArgs args;
  // B = 2, Hkv = 2 (Hq is not an append's), L = 3, capacity S = 40.
  args.sizes = {2, 0, 2, 3, 40};
  args.buffers = {{"update", 0x1000}, {"cache", 0x2000}};
  args.metadata = {{"pos", {0, 37}}};
  EXPECT_TRUE(validateLaunch(kernel, args).isOk());
  // The reference's messages (reference::append).
  for (auto [pos, message] :
       {std::pair<std::vector<int64_t>, std::string>{
            {0, 38},
            "pos[1] = 38 writes rows [38, 41) outside the cache "
            "capacity C = 40 (batch 1)"},
        {{-1, 0},
         "pos[0] = -1 writes rows [-1, 2) outside the cache capacity C = 40 "
         "(batch 0)"}}) {
    args.metadata["pos"] = pos;
    Status s = validateLaunch(kernel, args);
    ASSERT_TRUE(s.isError()) << message;
    EXPECT_NE(s.message().find("launch of 'append': " + message),
              std::string::npos)
        << s.message();
  }
}

TEST(RuntimeValidation, PagedAppendChecksTheTableAndTheWrites) {
  KernelInfo kernel = appendKernel(/*paged=*/true);
  LaunchArgs args;
  // Pages [5, 4, 2, 64], table [2, 3], L = 2.
  args.sizes = {2, 0, 2, 2, 12};
  args.sizes.numPages = 5;
  args.sizes.pageSize = 4;
  args.sizes.maxPages = 3;
  args.buffers = {{"update", 0x1000}, {"cache", 0x2000}};
  args.metadata = {{"pos", {3, 10}}, {"block_table", {4, 1, -1, 0, 2, 3}}};
  EXPECT_TRUE(validateLaunch(kernel, args).isOk());
  auto expectError = [&](std::vector<int64_t> pos, std::vector<int64_t> table,
                         const std::string &message) {
    args.metadata["pos"] = std::move(pos);
    args.metadata["block_table"] = std::move(table);
    Status s = validateLaunch(kernel, args);
    ASSERT_TRUE(s.isError()) << message;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  };
  // The messages of reference::appendPaged (kvattn/Support/BlockTable.h).
  expectError({3, 10}, {4, 1, -1, 0, 5, 3},
              "block_table[1][1] = 5: page id out of range [0, 5) (batch 1)");
  expectError({7, 10}, {4, 1, -1, 0, 2, 3},
              "pos[0] = 7 with L = 2 does not fit the 2 page(s) of "
              "block_table[0] (page_size 4, at most 8 tokens): token 8 falls "
              "in slot 2 (batch 0)");
  expectError({-2, 10}, {4, 1, -1, 0, 2, 3}, "pos[0] = -2 is negative");
  expectError({1, 1}, {4, 1, -1, 4, 2, 3},
              "token 1 writes row 1 of page 4, which batch 0 also writes "
              "(batch 1)");
}

/// A varlen kernel (q_start): packed query [1, Hq, L, 64] with L the packed
/// rows T and B the sequences; q_start [B + 1].
static KernelInfo varlenKernel() {
  KernelInfo kernel;
  kernel.name = "varlen";
  kernel.kind = "attention_varlen";
  kernel.blockM = 16;
  kernel.blockX = 32;
  kernel.group = 4;
  kernel.params = {{"query", "pointer", "bf16", {"1", "Hq", "L", "64"}, "read"},
                   {"q_offset", "pointer", "i32", {"B"}, "read"},
                   {"kv_len", "pointer", "i32", {"B"}, "read"},
                   {"q_start", "pointer", "i32", {"B+1"}, "read"},
                   {"out", "pointer", "bf16", {"1", "Hq", "L", "64"}, "write"}};
  for (const char *size : {"B", "Hq", "Hkv", "L", "S"})
    kernel.params.push_back({size, "scalar", "i64", {}, ""});
  return kernel;
}

TEST(RuntimeValidation, VarlenQueryStartsAreCheckedBeforeLaunch) {
  KernelInfo kernel = varlenKernel();
  LaunchArgs args;
  args.sizes = {3, 8, 2, 19, 128}; // 3 sequences, 19 packed rows
  args.buffers = {{"query", 0x1000}, {"out", 0x2000}};
  args.metadata = {{"q_start", {0, 1, 18, 19}},
                   {"q_offset", {99, 20, 0}},
                   {"kv_len", {100, 37, 1}}};
  Status ok = validateLaunch(kernel, args);
  EXPECT_TRUE(ok.isOk()) << ok.message();

  auto expectError = [&](std::vector<int64_t> starts,
                         const std::string &message) {
    args.metadata["q_start"] = std::move(starts);
    Status s = validateLaunch(kernel, args);
    ASSERT_TRUE(s.isError()) << message;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  };
  expectError({1, 1, 18, 19}, "q_start[0] = 1 must be 0: the first sequence "
                              "starts the packed query (batch 0)");
  expectError({0, 5, 2, 19}, "q_start[2] = 2 is below q_start[1] = 5: "
                             "sequence starts must not decrease (batch 1)");
  expectError({0, 1, 18, 18}, "q_start[3] = 18 must equal the packed query "
                              "rows T = 19: the last entry closes batch 2 "
                              "(batch 2)");
  expectError({0, 1, 30, 19},
              "q_start[2] = 30 is past the packed query rows T = 19 (batch 1)");
  expectError({0, 2, 18, 19},
              "q_offset[0] = 99 with L = 2 row(s) (q_start[0] = 0 .. "
              "q_start[1] = 2) puts the last query at position 100, past the "
              "last cached key at position 99 (kv_len[0] = 100): the rows of "
              "a sequence must be tokens of its cache (batch 0)");
  expectError({0, 1, 18}, "'q_start' has 3 values, expected 4");
}

TEST_F(RuntimeTest, VarlenGridIsHeadsByBlocksPlusSequences) {
  // A ragged batch of 3 sequences, 19 packed rows, 8 query heads packed by
  // 4: x = Hq / 4 = 2 programs, y = floor(4 * 19 / 16) + 3 = 7 blocks.
  KernelInfo kernel = varlenKernel();
  // A module whose kernel takes exactly the 10 parameters of varlenKernel()
  // (the fake driver reads as many as the PTX declares).
  std::string ptx = ".version 8.0\n.target sm_80\n.visible .entry varlen(\n";
  for (int i = 0; i < 10; ++i)
    ptx += std::string(".param .u64 varlen_param_") + std::to_string(i) +
           (i < 9 ? ",\n" : "\n");
  ptx += ")\n{\nret;\n}\n";
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(ptx, module).isOk());
  LaunchArgs args;
  args.sizes = {3, 8, 2, 19, 128};
  args.buffers = {{"query", 0x1000}, {"out", 0x2000}};
  args.metadata = {{"q_start", {0, 1, 18, 19}},
                   {"q_offset", {99, 20, 0}},
                   {"kv_len", {100, 37, 1}}};
  Status s = runtime->launch(*module, kernel, args);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(fakecuda_state()->launches.size(), 1u);
  const FakeLaunch &l = fakecuda_state()->launches[0];
  EXPECT_EQ(l.grid[0], 2u);
  EXPECT_EQ(l.grid[1], 7u);
  EXPECT_EQ(l.grid[2], 1u);

  // The manifest's kind round-trips.
  std::string json = kManifest;
  std::string stages = "\"num_stages\": 2}";
  json.replace(json.find(stages), stages.size(),
               "\"num_stages\": 2}, \"kind\": \"attention_varlen\"");
  Manifest parsed;
  s = parseManifest(json, parsed);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(parsed.kernels[0].kind, "attention_varlen");
}

/// kManifest compiled with 32-bit index arithmetic (`index_bits` 32).
std::string index32Manifest() {
  std::string m = kManifest;
  m.replace(m.find("\"ptx_file\""), 10, "\"index_bits\": 32, \"ptx_file\"");
  return m;
}

TEST_F(RuntimeTest, Index32KernelsRefuseBuffersOf2To31Elements) {
  Manifest m32;
  Status parsed = parseManifest(index32Manifest(), m32);
  ASSERT_TRUE(parsed.isOk()) << parsed.message();
  EXPECT_EQ(m32.indexBits, 32);
  EXPECT_EQ(m32.kernels[0].indexBits, 32);
  // Older manifests have 64-bit kernels.
  EXPECT_EQ(manifest.indexBits, 64);
  EXPECT_EQ(manifest.kernels[0].indexBits, 64);
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  const std::string advice =
      ": the kernel was compiled with 32-bit index arithmetic (manifest "
      "index_bits 32); compile it with index-bitwidth=64 for this size";

  // key [B, Hkv, S, 128] with B = Hkv = 2: 512 * S elements. S = 2^22 - 1
  // is the largest cache a 32-bit kernel addresses (2^31 - 512 elements).
  LaunchArgs args = validArgs();
  args.sizes.S = (int64_t(1) << 22) - 1;
  Status s = runtime->launch(*module, m32.kernels[0], args);
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(fakecuda_state()->launches.size(), 1u);

  // One key more: exactly 2^31 elements in key (and value).
  args.sizes.S = int64_t(1) << 22;
  s = runtime->launch(*module, m32.kernels[0], args);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "launch of 'k0': 'key' has 2147483648 elements, 2^31 "
                         "or more" +
                             advice);
  EXPECT_EQ(fakecuda_state()->launches.size(), 1u) << "launched anyway";
  // The 64-bit kernel takes it.
  s = runtime->launch(*module, manifest.kernels[0], args);
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(fakecuda_state()->launches.size(), 2u);

  // A size of 2^31 is refused before any buffer is looked at.
  args = validArgs();
  args.sizes.S = int64_t(1) << 31;
  s = runtime->launch(*module, m32.kernels[0], args);
  EXPECT_EQ(s.message(),
            "launch of 'k0': size S = 2147483648 is 2^31 or more" + advice);

  // Positions: q_offset + L - 1 must stay below 2^31 - 1 (L = 100): the
  // kernels form the last position plus one in 32 bits (issue 30 item 1: a
  // last position of 2^31 - 1 was accepted, and its rows saw no key).
  args = validArgs();
  args.metadata["q_offset"] = {(int64_t(1) << 31) - 101, 0};
  s = runtime->launch(*module, m32.kernels[0], args);
  EXPECT_TRUE(s.isOk()) << s.message();
  args.metadata["q_offset"] = {0, (int64_t(1) << 31) - 100};
  s = runtime->launch(*module, m32.kernels[0], args);
  EXPECT_EQ(s.message(), "launch of 'k0': q_offset[1] = 2147483548 gives "
                         "positions of 2^31 - 1 or more (batch 1)" +
                             advice);
  args.metadata["q_offset"] = {0, (int64_t(1) << 31) - 99};
  s = runtime->launch(*module, m32.kernels[0], args);
  EXPECT_EQ(s.message(), "launch of 'k0': q_offset[1] = 2147483549 gives "
                         "positions of 2^31 - 1 or more (batch 1)" +
                             advice);
  s = runtime->launch(*module, manifest.kernels[0], args);
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(fakecuda_state()->launches.size(), 4u);

  // index_bits is 32 or 64.
  std::string bad = index32Manifest();
  bad.replace(bad.find("\"index_bits\": 32"), 16, "\"index_bits\": 16");
  Manifest m;
  s = parseManifest(bad, m);
  EXPECT_EQ(s.message(), "manifest: \"index_bits\" is 16 (must be 32 or 64)");
}

TEST(RuntimeManifest, RejectsBadManifests) {
  Manifest m;
  Status s = parseManifest("{", m);
  EXPECT_NE(s.message().find("invalid JSON at byte"), std::string::npos)
      << s.message();
  std::string v3 = kManifest;
  v3.replace(v3.find("\"version\": 1"), 12, "\"version\": 3");
  s = parseManifest(v3, m);
  EXPECT_NE(s.message().find("version 3 is not supported"), std::string::npos)
      << s.message();
  std::string other = kManifest;
  other.replace(other.find("kvattn-launch-manifest"), 22, "something-else");
  s = parseManifest(other, m);
  EXPECT_NE(s.message().find("format is \"something-else\""),
            std::string::npos);
  std::string badIndex = kManifest;
  badIndex.replace(badIndex.find("\"index\": 1,"), 11, "\"index\": 7,");
  s = parseManifest(badIndex, m);
  EXPECT_NE(s.message().find("param 1 has index 7"), std::string::npos)
      << s.message();
  ASSERT_TRUE(parseManifest(kManifest, m).isOk());
  EXPECT_EQ(m.kernels[0].params.size(), 11u);
  EXPECT_EQ(m.kernels[0].params[0].shape[1], "8");
}

//===----------------------------------------------------------------------===//
// Run-time split-KV (manifest version 2)
//===----------------------------------------------------------------------===//

namespace {

/// What kvattn-compile writes for a dynamic-shape GQA attention (B, L, S
/// dynamic; 32 query heads over 8 kv heads, D = 128, bf16): the attention
/// kernel's grid z and both kernels' last scalar N are chosen at run time by
/// the rule.
const char *kSplitManifest = R"json({
  "format": "kvattn-launch-manifest", "version": 2, "chip": "sm_90",
  "ptx_file": "s.ptx",
  "kernels": [
    {
      "name": "a",
      "params": [
        {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, "L", 128], "access": "read"},
        {"index": 1, "name": "key", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "S", 128], "access": "read"},
        {"index": 2, "name": "value", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "S", 128], "access": "read"},
        {"index": 3, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 4, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, "L", 128], "access": "write"},
        {"index": 5, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, "L", 128], "access": "write"},
        {"index": 6, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, "L"], "access": "write"},
        {"index": 7, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 8, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 9, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 10, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 11, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 12, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "B * Hq / 4", "y": "ceil(4 * L / 16)", "z": "N"},
      "block": {"x": 32, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 26752,
      "tile": {"block_m": 16, "block_n": 32, "num_warps": 1, "num_stages": 2, "group": 4, "split_kv": 0},
      "split": {"max": 64, "block_m": 16, "block_n": 32, "group": 4, "programs_per_sm": 8, "min_keys": 512, "num_sms": 132},
      "kind": "attention"
    },
    {
      "name": "m",
      "params": [
        {"index": 0, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, "L", 128], "access": "write"},
        {"index": 1, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, "L", 128], "access": "read"},
        {"index": 2, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, "L"], "access": "read"},
        {"index": 3, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 4, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 5, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 6, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "B * Hq", "y": "ceil(L / 16)", "z": 1},
      "block": {"x": 32, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 0,
      "tile": {"block_m": 16, "block_n": 32, "num_warps": 1, "num_stages": 2, "group": 1, "split_kv": 1},
      "split": {"max": 64, "block_m": 16, "block_n": 32, "group": 4, "programs_per_sm": 8, "min_keys": 512, "num_sms": 132},
      "kind": "merge"
    }
  ]
})json";

std::string entryOf(const std::string &name, int params) {
  std::string s = ".visible .entry " + name + "(\n";
  for (int i = 0; i < params; ++i)
    s += ".param .u64 " + name + "_param_" + std::to_string(i) +
         (i + 1 < params ? ",\n" : "\n");
  return s + ")\n{\nret;\n}\n";
}

/// docs/runtime.md's formula, written out: P = B * (32 / 4) *
/// ceil(4 * L / 16) programs, n = clamp(min(ceil(8 * sms / P), ceil(S /
/// 32), floor(S / 512)), 1, 64).
int64_t documentedSplit(int64_t b, int64_t l, int64_t s, int64_t sms) {
  int64_t programs = std::max<int64_t>(b * 8 * ((4 * l + 15) / 16), 1);
  int64_t slots = 8 * sms;
  int64_t wanted = (slots + programs - 1) / programs;
  int64_t chunks = std::min((s + 31) / 32, s / 512);
  int64_t cap = std::clamp<int64_t>(chunks, 1, 64);
  int64_t n = std::clamp<int64_t>(std::min(wanted, cap), 1, 64);
  if (n == 1 || programs * n <= slots)
    return n;
  // Waves (docs/tile-program.md): the least ceil(P n / slots) / n for n up
  // to twice that, a larger n only where it is 5 % less.
  double best = 1, bestTime = std::ceil(double(programs) / slots);
  for (int64_t m = 2; m <= std::min(cap, 2 * n); ++m) {
    double time = std::ceil(double(programs) * m / slots) / m;
    if (time < 0.95 * bestTime)
      best = m, bestTime = time;
  }
  return static_cast<int64_t>(best);
}

} // namespace

// The grid's z and the N both kernels get are the documented formula with
// the device's multiprocessor count, for several sizes and SM counts.
TEST(RuntimeSplit, GridZAndNFollowTheFormula) {
  struct Case {
    int64_t b, l, s, expected;
  };
  // 132 SMs (H100/H200), figures worked out in docs/tile-program.md: B = 1
  // over 4096 keys: min(132, 8) = 8; over 32768: min(132, 64) = 64; B = 8
  // over 4096: min(17, 8) = 8; B = 64 over 32768: ceil(1056 / 512) = 3
  // chunks would be two waves of thirds, 2 are one of halves; under 1024
  // keys: floor(S / 512) <= 1, no split; L = 5 (2 query blocks of 4 x 5
  // packed rows, 64 programs): 17 chunks overshoot 1056 slots, 16 are one
  // wave.
  const Case h200[] = {{1, 1, 4096, 8},   {1, 1, 32768, 64}, {8, 1, 4096, 8},
                       {64, 1, 32768, 2}, {3, 1, 1000, 1},   {2, 1, 1100, 2},
                       {4, 5, 32768, 16}};
  for (int sms : {132, 108, 16}) {
    fakecuda_reset();
    fakecuda_state()->multiprocessorCount = sms;
    std::unique_ptr<Runtime> runtime;
    RuntimeOptions options;
    options.libraryPath = KVATTN_FAKE_CUDA;
    ASSERT_TRUE(Runtime::create(runtime, options).isOk());
    ASSERT_EQ(runtime->multiprocessorCount(), sms);
    Manifest manifest;
    Status ps = parseManifest(kSplitManifest, manifest);
    ASSERT_TRUE(ps.isOk()) << ps.message();
    ASSERT_EQ(manifest.version, 2);
    ASSERT_EQ(manifest.kernels[0].splitKv, 0);
    ASSERT_EQ(manifest.kernels[1].splitRule.maxSplits, 64);
    const Module *module;
    ASSERT_TRUE(
        runtime->loadModule(entryOf("a", 13) + entryOf("m", 7), module).isOk());
    for (const Case &c : h200) {
      FakeCudaState &st = *fakecuda_state();
      st.launches.clear();
      LaunchArgs args;
      args.sizes = {c.b, 32, 8, c.l, c.s};
      args.buffers = {{"query", 0x1000},     {"key", 0x2000},
                      {"value", 0x3000},     {"out", 0x4000},
                      {"out_parts", 0x5000}, {"lse_parts", 0x6000}};
      args.metadata["kv_len"] = std::vector<int64_t>(c.b, c.s);
      // Each kernel gets the buffers and metadata it names.
      for (const KernelInfo &k : manifest.kernels) {
        LaunchArgs own;
        own.sizes = args.sizes;
        for (const ParamInfo &p : k.params) {
          if (args.buffers.count(p.name))
            own.buffers[p.name] = args.buffers.at(p.name);
          if (args.metadata.count(p.name))
            own.metadata[p.name] = args.metadata.at(p.name);
        }
        Status s = runtime->launch(*module, k, own);
        ASSERT_TRUE(s.isOk()) << s.message();
      }
      const int64_t n = documentedSplit(c.b, c.l, c.s, sms);
      if (sms == 132) {
        EXPECT_EQ(n, c.expected) << "B " << c.b << " S " << c.s;
      }
      EXPECT_EQ(splitCount(manifest.kernels[0], args.sizes, sms), n);
      EXPECT_EQ(splitCount(manifest.kernels[1], args.sizes, sms), n);
      // n = 1: the attention stores out itself, the merge is not launched.
      ASSERT_EQ(st.launches.size(), n > 1 ? 2u : 1u);
      const FakeLaunch &a = st.launches[0];
      EXPECT_EQ(a.grid[0], c.b * 8u);
      EXPECT_EQ(a.grid[1], (4u * c.l + 15) / 16);
      EXPECT_EQ(a.grid[2], static_cast<unsigned>(n))
          << "sms " << sms << " B " << c.b << " S " << c.s;
      EXPECT_EQ(a.params[12], static_cast<uint64_t>(n));
      if (n == 1)
        continue;
      const FakeLaunch &m = st.launches[1];
      // The merge: one instance per (batch x head, query block), N parts.
      EXPECT_EQ(m.grid[0], c.b * 32u);
      EXPECT_EQ(m.grid[2], 1u);
      EXPECT_EQ(m.params[6], static_cast<uint64_t>(n));
      EXPECT_EQ(m.params[3], static_cast<uint64_t>(c.b));
    }
  }
}

/// A ragged batch's run-time split (docs/tile-program.md, "Split-KV of a
/// ragged batch"): the attention_varlen kernel over the packed rows and
/// its merge_varlen kernel, GQA 32/8 packed in 16-row blocks.
const char *kVarlenSplitManifest = R"json({
  "format": "kvattn-launch-manifest", "version": 2, "chip": "sm_90",
  "ptx_file": "v.ptx",
  "kernels": [
    {
      "name": "a",
      "params": [
        {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": [1, 32, "L", 128], "access": "read"},
        {"index": 1, "name": "key", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "S", 128], "access": "read"},
        {"index": 2, "name": "value", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "S", 128], "access": "read"},
        {"index": 3, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 4, "name": "q_start", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B+1"], "access": "read"},
        {"index": 5, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": [1, 32, "L", 128], "access": "write"},
        {"index": 6, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", 1, 32, "L", 128], "access": "write"},
        {"index": 7, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", 1, 32, "L"], "access": "write"},
        {"index": 8, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 9, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 10, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 11, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "Hq / 4", "y": "floor(4 * L / 16) + B", "z": "N"},
      "block": {"x": 32, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 26752,
      "tile": {"block_m": 16, "block_n": 32, "num_warps": 1, "num_stages": 2, "group": 4, "split_kv": 0},
      "split": {"max": 64, "block_m": 16, "block_n": 32, "group": 4, "programs_per_sm": 8, "min_keys": 512, "num_sms": 132},
      "kind": "attention_varlen"
    },
    {
      "name": "m",
      "params": [
        {"index": 0, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": [1, 32, "L", 128], "access": "write"},
        {"index": 1, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", 1, 32, "L", 128], "access": "read"},
        {"index": 2, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", 1, 32, "L"], "access": "read"},
        {"index": 3, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 4, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "Hq", "y": "ceil(L / 16)", "z": 1},
      "block": {"x": 32, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 0,
      "tile": {"block_m": 16, "block_n": 32, "num_warps": 1, "num_stages": 2, "group": 1, "split_kv": 1},
      "split": {"max": 64, "block_m": 16, "block_n": 32, "group": 4, "programs_per_sm": 8, "min_keys": 512, "num_sms": 132},
      "kind": "merge_varlen"
    }
  ]
})json";

// A ragged batch: the rule's P is the ragged grid, (Hq / G) x (floor(G * T
// / BM) + B) with B the sequences and T the packed rows; the attention's
// grid is (Hq / G, floor(G * T / BM) + B, n), the merge's (Hq, ceil(T /
// BM), 1) over the packed rows whatever B is, and with n = 1 the merge is
// not launched.
TEST(RuntimeSplit, RaggedBatchGridAndN) {
  struct Case {
    std::vector<int64_t> qLens;
    int64_t s, expected;
  };
  // 132 SMs, 8 programs per SM: one decode row over 4096 keys: P = 8 x (0
  // + 1) = 8, min(132, 128, 8) = 8; four decode rows beside a 30-row
  // prefill chunk (T = 34) over 32768 keys: P = 8 x (floor(136 / 16) + 5)
  // = 104, min(ceil(1056 / 104) = 11, 64) = 11 chunks would overshoot the
  // 1056 slots (two waves of elevenths), 10 are one wave of tenths; 1000
  // keys: floor(1000 / 512) = 1, no split (and no merge launch).
  const Case cases[] = {
      {{1}, 4096, 8}, {{1, 1, 30, 1, 1}, 32768, 10}, {{1, 1, 1}, 1000, 1}};
  fakecuda_reset();
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = KVATTN_FAKE_CUDA;
  ASSERT_TRUE(Runtime::create(runtime, options).isOk());
  ASSERT_EQ(runtime->multiprocessorCount(), 132);
  Manifest manifest;
  Status ps = parseManifest(kVarlenSplitManifest, manifest);
  ASSERT_TRUE(ps.isOk()) << ps.message();
  ASSERT_EQ(manifest.kernels[1].kind, "merge_varlen");
  const Module *module;
  ASSERT_TRUE(
      runtime->loadModule(entryOf("a", 12) + entryOf("m", 5), module).isOk());
  for (const Case &c : cases) {
    FakeCudaState &st = *fakecuda_state();
    st.launches.clear();
    const int64_t b = static_cast<int64_t>(c.qLens.size());
    std::vector<int64_t> qStart = {0};
    for (int64_t l : c.qLens)
      qStart.push_back(qStart.back() + l);
    const int64_t t = qStart.back();
    LaunchArgs args;
    args.sizes = {b, 32, 8, t, c.s};
    args.buffers = {{"query", 0x1000},     {"key", 0x2000},
                    {"value", 0x3000},     {"out", 0x4000},
                    {"out_parts", 0x5000}, {"lse_parts", 0x6000}};
    args.metadata["kv_len"] = std::vector<int64_t>(b, c.s);
    args.metadata["q_start"] = qStart;
    for (const KernelInfo &k : manifest.kernels) {
      LaunchArgs own;
      own.sizes = args.sizes;
      for (const ParamInfo &p : k.params) {
        if (args.buffers.count(p.name))
          own.buffers[p.name] = args.buffers.at(p.name);
        if (args.metadata.count(p.name))
          own.metadata[p.name] = args.metadata.at(p.name);
      }
      Status s = runtime->launch(*module, k, own);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    const int64_t n = c.expected;
    EXPECT_EQ(splitCount(manifest.kernels[0], args.sizes, 132), n);
    EXPECT_EQ(splitCount(manifest.kernels[1], args.sizes, 132), n);
    ASSERT_EQ(st.launches.size(), n > 1 ? 2u : 1u) << "T " << t;
    const FakeLaunch &a = st.launches[0];
    EXPECT_EQ(a.grid[0], 8u);
    EXPECT_EQ(a.grid[1], static_cast<unsigned>(4 * t / 16 + b));
    EXPECT_EQ(a.grid[2], static_cast<unsigned>(n));
    EXPECT_EQ(a.params[11], static_cast<uint64_t>(n));
    if (n == 1)
      continue;
    const FakeLaunch &m = st.launches[1];
    EXPECT_EQ(m.grid[0], 32u);
    EXPECT_EQ(m.grid[1], static_cast<unsigned>((t + 15) / 16));
    EXPECT_EQ(m.grid[2], 1u);
    EXPECT_EQ(m.params[3], static_cast<uint64_t>(t));
    EXPECT_EQ(m.params[4], static_cast<uint64_t>(n));
  }
}

TEST(RuntimeSplit, ManifestRulesAreChecked) {
  Manifest m;
  // A split rule in a version 1 manifest.
  std::string v1 = kSplitManifest;
  v1.replace(v1.find("\"version\": 2"), 12, "\"version\": 1");
  Status s = parseManifest(v1, m);
  EXPECT_NE(s.message().find("has a 'split' rule, which needs version 2"),
            std::string::npos)
      << s.message();
  // split_kv 0 without a rule.
  std::string noRule = kSplitManifest;
  noRule.erase(noRule.find("\"split\": {"),
               noRule.find("\"kind\": \"attention\"") -
                   noRule.find("\"split\": {"));
  s = parseManifest(noRule, m);
  EXPECT_NE(s.message().find("has split_kv 0 (chosen at run time) but no "
                             "'split' rule"),
            std::string::npos)
      << s.message();
  // A rule with max 0.
  std::string zero = kSplitManifest;
  zero.replace(zero.find("\"max\": 64"), 9, "\"max\": 0");
  s = parseManifest(zero, m);
  EXPECT_NE(s.message().find("invalid split rule"), std::string::npos)
      << s.message();
  // A rule on a kernel without the scalar N.
  std::string noN = kSplitManifest;
  noN.replace(noN.find("\"name\": \"N\""), 11, "\"name\": \"X\"");
  s = parseManifest(noN, m);
  EXPECT_NE(s.message().find("has a split rule but no scalar 'N'"),
            std::string::npos)
      << s.message();
}

// n = 1: the attention kernel writes out itself and leaves the parts
// alone, so a caller may pass none (the launch gets null pointers); with
// n > 1 they are required.
TEST(RuntimeSplit, OneChunkNeedsNoParts) {
  fakecuda_reset();
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = KVATTN_FAKE_CUDA;
  ASSERT_TRUE(Runtime::create(runtime, options).isOk());
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kSplitManifest, manifest).isOk());
  const Module *module;
  ASSERT_TRUE(
      runtime->loadModule(entryOf("a", 13) + entryOf("m", 7), module).isOk());
  LaunchArgs args;
  args.sizes = {2, 32, 8, 1, 700}; // floor(700 / 512) = 1 chunk
  args.buffers = {
      {"query", 0x1000}, {"key", 0x2000}, {"value", 0x3000}, {"out", 0x4000}};
  args.metadata["kv_len"] = {700, 333};
  Status s = runtime->launch(*module, manifest.kernels[0], args);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(fakecuda_state()->launches.size(), 1u);
  EXPECT_EQ(fakecuda_state()->launches[0].grid[2], 1u);
  EXPECT_EQ(fakecuda_state()->launches[0].params[5], 0u); // out_parts
  args.sizes.S = 4096; // 8 chunks: the parts are needed
  args.metadata["kv_len"] = {4096, 333};
  s = runtime->launch(*module, manifest.kernels[0], args);
  EXPECT_NE(s.message().find("missing device buffer 'out_parts'"),
            std::string::npos)
      << s.message();
}

// kvattn_runtime_reserve_metadata(rt, SIZE_MAX) looped forever: the slot
// capacity doubled until it wrapped to 0. Beyond 2^32 bytes a reservation
// (or a launch's metadata) is refused by name, before any allocation.
TEST_F(RuntimeTest, ReservingBeyondTheMetadataLimitIsRefused) {
  FakeCudaState &st = *fakecuda_state();
  for (size_t bytes : {SIZE_MAX, SIZE_MAX / 2 + 2, kMaxMetadataBytes + 1}) {
    Status s = runtime->reserveMetadata(bytes);
    ASSERT_TRUE(s.isError()) << bytes;
    EXPECT_EQ(s.message(), "reserving metadata: " + std::to_string(bytes) +
                               " bytes of metadata are above the limit of "
                               "4294967296 bytes (2^32) per launch");
  }
  EXPECT_EQ(st.deviceAllocationCalls + st.hostAllocationCalls, 0);
  ASSERT_TRUE(runtime->reserveMetadata(100000).isOk());
  EXPECT_EQ(st.hostAllocationCalls, 8);
}

// B * Hq wrapped to 0 for B = 2^61 and Hq = 8: the launch "had no program"
// and returned ok without computing. Every grid product is checked.
TEST_F(RuntimeTest, GridProductsThatOverflowAreRefused) {
  LaunchArgs args = validArgs();
  args.sizes.B = int64_t(1) << 61;
  args.sizes.L = 1;
  args.metadata.clear();
  args.metadataOnDevice = true;
  args.buffers["q_offset"] = 0x5000;
  args.buffers["kv_len"] = 0x6000;
  EXPECT_EQ(launchError(args),
            "launching 'k0': the grid for B = 2305843009213693952, Hq = 8, L "
            "= 1 overflows 64 bits (beyond the CUDA limits)");
}

// A host-metadata launch is refused while its stream is captured: a graph
// would keep the ring slot's address (no copy is even queued when the
// metadata equals the last launch's). Launches without host metadata
// still capture.
TEST_F(RuntimeTest, HostMetadataLaunchesAreRefusedWhileCapturing) {
  const Module *module;
  ASSERT_TRUE(runtime->loadModule(kPtx, module).isOk());
  FakeCudaState &st = *fakecuda_state();
  LaunchArgs args = validArgs();
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], args).isOk());
  ASSERT_TRUE(runtime->beginCapture().isOk());
  Status s = runtime->launch(*module, manifest.kernels[0], args);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "launch of 'k0': host metadata cannot be captured: the stream is "
            "being captured into a CUDA graph, which would replay the address "
            "of a metadata slot that later launches rewrite; keep the "
            "metadata on the device (a plan's run) to capture");
  LaunchArgs device = args;
  device.metadata.clear();
  device.metadataOnDevice = true;
  device.buffers["q_offset"] = 0x5000;
  device.buffers["kv_len"] = 0x6000;
  ASSERT_TRUE(runtime->launch(*module, manifest.kernels[0], device).isOk());
  std::unique_ptr<Graph> graph;
  ASSERT_TRUE(runtime->endCapture(graph).isOk());
  EXPECT_EQ(st.captured.size(), 1u);
  EXPECT_EQ(st.captured[0].params[3], 0x5000u);
  // Other streams are not captured: their launches go on.
  runtime->setStream(0x99);
  ASSERT_TRUE(runtime->beginCapture().isOk());
  EXPECT_TRUE(
      runtime->launch(*module, manifest.kernels[0], args, 0x1234).isOk());
  EXPECT_TRUE(runtime->endCapture(graph).isOk());
}

// The split rule's products saturate: sizes near 2^63 (refused later by
// the grid limits) give one chunk or the rule's maximum, never a product
// that overflowed (undefined behaviour; UBSan reports it).
TEST(RuntimeSplit, HugeSizesDoNotOverflowTheRule) {
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kSplitManifest, manifest).isOk());
  Sizes huge{int64_t(1) << 62, 32, 8, int64_t(1) << 62, int64_t(1) << 62};
  EXPECT_EQ(splitCount(manifest.kernels[0], huge, 132), 1);
  Sizes keys{1, 32, 8, 1, INT64_MAX};
  EXPECT_EQ(splitCount(manifest.kernels[0], keys, INT32_MAX),
            manifest.kernels[0].splitRule.maxSplits);
}

// The sizes of a launch are the caller's: the split's program count and
// chunk count saturate instead of overflowing (kvattn-fuzz-capi found
// B * Hq * row blocks past int64 under UBSan). A program count beyond any
// grid needs no split.
TEST(RuntimeSplit, HugeSizesSaturate) {
  KernelInfo k;
  k.splitRule.maxSplits = 64;
  k.splitRule.blockM = 16;
  k.splitRule.blockN = 64;
  k.splitRule.group = 1;
  k.splitRule.programsPerSm = 2;
  Sizes s = {int64_t(1) << 62, 4, 4, 1, int64_t(1) << 20};
  EXPECT_EQ(splitCount(k, s, 132), 1); // B * Hq wrapped to 0: 64
  s = {1, 1, 1, 1, std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(splitCount(k, s, 132), 64); // S + blockN - 1 wrapped: 1
  s = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max(),
       1, std::numeric_limits<int64_t>::max(), 4096};
  EXPECT_EQ(splitCount(k, s, std::numeric_limits<int64_t>::max()), 1);
}
