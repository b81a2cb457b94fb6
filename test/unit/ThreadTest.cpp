//===- ThreadTest.cpp - one runtime and one plan from many threads --------===//
//
// A serving engine runs plans from several threads: here T threads share
// one rt::Runtime and one rt::Plan over the fake driver, each on a stream
// of its own, and mix host-metadata runs (the metadata ring), device-
// metadata runs, allocations and frees, metadata reservations, module loads
// and call-count reads. The fake driver runs a kernel when it is launched,
// so a hook inside cuLaunchKernel reads what the kernel would read: every
// launch must carry its own thread's buffers and metadata, in its thread's
// order. Before issue 30 the plan packed every run's parameters into one
// shared vector and the ring was unlocked: runs launched with NULL
// parameters, with another thread's q_offset, or corrupted the heap.
//
// Its own binary, so that scripts/tsan.sh builds only this with
// ThreadSanitizer. KVATTN_THREAD_TEST_THREADS, _ITERATIONS and _SEED
// (defaults 12, 2000, 1) size it.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Runtime/Plan.h"

#include "runtime/CudaApi.h"
#include "test/fakecuda/FakeCuda.h"

#include "PagedDecodeManifest.h"

#include "gtest/gtest.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>

using namespace mlir::kvattn;
using namespace mlir::kvattn::rt;

extern "C" {
cuda::CUresult cuStreamCreate(cuda::CUstream *stream, unsigned flags);
cuda::CUresult cuStreamDestroy_v2(cuda::CUstream stream);
}

namespace {

/// A paged decode attention compiled with device validation
/// (PagedDecodeManifest.h)
const char *const kManifest = kvattn_test::kPagedDecodeManifest;

std::string entry(const std::string &name, int params) {
  std::string s = ".visible .entry " + name + "(\n";
  for (int i = 0; i < params; ++i)
    s += ".param .u64 " + name + "_param_" + std::to_string(i) +
         (i + 1 < params ? ",\n" : "\n");
  return s + ")\n{\nret;\n}\n";
}

int envOr(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

/// A run's metadata encodes its thread and step: q_offset = {t * 10^6 +
/// 2 i, t * 10^6 + 2 i + 1}, kv_len = {1 + i % 16, 1 + (i + t) % 16}, one
/// page per sequence (pages t % 60 and t % 60 + 1).
constexpr int64_t kThreadStride = 1000000;
constexpr int64_t kBatch = 2, kMaxPages = 8;
std::vector<int64_t> qOffsets(int t, int i) {
  return {t * kThreadStride + 2 * i, t * kThreadStride + 2 * i + 1};
}
std::vector<int64_t> kvLens(int t, int i) {
  return {1 + i % 16, 1 + (i + t) % 16};
}
std::vector<int64_t> table(int t) {
  std::vector<int64_t> pages(kBatch * kMaxPages, -1);
  pages[0] = t % 60;
  pages[kMaxPages] = t % 60 + 1;
  return pages;
}

/// What the hook saw (written under the fake driver's lock, read after the
/// threads joined).
struct Seen {
  std::map<uint64_t, int> owner;       ///< stream -> thread
  std::vector<DevicePtr> out;          ///< each thread's output
  std::vector<std::vector<int>> steps; ///< attention launches' steps
  std::vector<std::string> errors;
  DevicePtr status = 0;
};

int32_t readI32(uint64_t address, int index) {
  int32_t v;
  std::memcpy(&v, reinterpret_cast<const void *>(address + 4 * index), 4);
  return v;
}

/// Checks a launch of `d` or `d_validate` against its stream's thread.
void checkLaunch(const FakeLaunch &launch, void *data) {
  Seen &seen = *static_cast<Seen *>(data);
  auto fail = [&](const std::string &what) {
    if (seen.errors.size() < 20)
      seen.errors.push_back(launch.kernel + ": " + what);
  };
  auto owner = seen.owner.find(launch.stream);
  if (owner == seen.owner.end())
    return fail("a launch on an unknown stream");
  const int t = owner->second;
  const bool attention = launch.kernel == "d";
  const size_t qAt = attention ? 3 : 0, lenAt = attention ? 4 : 1,
               tableAt = attention ? 5 : 2, statusAt = attention ? 7 : 3;
  for (size_t p : {qAt, lenAt, tableAt, statusAt})
    if (launch.params.at(p) == 0)
      return fail("a NULL pointer parameter " + std::to_string(p));
  if (launch.params[statusAt] != seen.status)
    return fail("not the plan's status word");
  const int32_t q0 = readI32(launch.params[qAt], 0),
                q1 = readI32(launch.params[qAt], 1);
  if (q0 / kThreadStride != t)
    return fail("thread " + std::to_string(t) + " launched with q_offset " +
                std::to_string(q0) + " (thread " +
                std::to_string(q0 / kThreadStride) + "'s)");
  const int i = static_cast<int>(q0 % kThreadStride) / 2;
  const std::vector<int64_t> len = kvLens(t, i);
  if (q1 != q0 + 1 || readI32(launch.params[lenAt], 0) != len[0] ||
      readI32(launch.params[lenAt], 1) != len[1])
    return fail("thread " + std::to_string(t) + " step " + std::to_string(i) +
                ": metadata of mixed runs");
  if (readI32(launch.params[tableAt], 0) != t % 60 ||
      readI32(launch.params[tableAt], kMaxPages) != t % 60 + 1)
    return fail("another thread's block table");
  if (attention) {
    if (launch.params[6] != seen.out[t])
      return fail("another thread's output");
    seen.steps[t].push_back(i);
  }
}

class RuntimeThreadTest : public ::testing::Test {
protected:
  void SetUp() override {
    fakecuda_reset();
    RuntimeOptions options;
    options.libraryPath = KVATTN_FAKE_CUDA;
    Status s = Runtime::create(runtime, options);
    ASSERT_TRUE(s.isOk()) << s.message();
    ASSERT_TRUE(parseManifest(kManifest, manifest).isOk());
    ptx = ".version 8.0\n.target sm_90\n" + entry("d_validate", 13) +
          entry("d", 16);
    bounds = {8, 8, 2, 1, 8 * 16, 64, 16, 8};
    s = Plan::create(*runtime, ptx, manifest, bounds, plan);
    ASSERT_TRUE(s.isOk()) << s.message();
    threads = envOr("KVATTN_THREAD_TEST_THREADS", 12);
    iterations = envOr("KVATTN_THREAD_TEST_ITERATIONS", 2000);
    seed = envOr("KVATTN_THREAD_TEST_SEED", 1);
  }
  void TearDown() override {
    fakecuda_set_launch_hook(nullptr, nullptr);
    plan.reset();
    runtime.reset();
  }

  std::unique_ptr<Runtime> runtime;
  Manifest manifest;
  std::string ptx;
  Sizes bounds;
  std::unique_ptr<Plan> plan;
  int threads = 0, iterations = 0, seed = 0;
};

} // namespace

// T threads x one runtime x one plan, each on its own stream: host- and
// device-metadata runs, allocations, reservations, loads. Every launch
// carries its own thread's buffers and metadata, in its thread's order;
// no call fails; nothing leaks.
TEST_F(RuntimeThreadTest, ThreadsShareOneRuntimeAndOnePlan) {
  std::printf("threads %d, iterations %d, seed %d\n", threads, iterations,
              seed);
  FakeCudaState &st = *fakecuda_state();
  Seen seen;
  seen.out.resize(threads);
  seen.steps.resize(threads);
  std::vector<cuda::CUstream> streams(threads);
  std::map<std::string, DevicePtr> shared;
  for (const char *name : {"query", "key", "value"}) {
    DevicePtr p = 0;
    ASSERT_TRUE(runtime->allocate(1 << 16, p).isOk());
    shared[name] = p;
  }
  // Each thread's own output and device metadata.
  std::vector<std::map<std::string, DevicePtr>> own(threads);
  for (int t = 0; t < threads; ++t) {
    ASSERT_EQ(cuStreamCreate(&streams[t], 0), 0);
    seen.owner[reinterpret_cast<uintptr_t>(streams[t])] = t;
    own[t] = shared;
    for (const char *name : {"out", "q_offset", "kv_len", "block_table"}) {
      DevicePtr p = 0;
      ASSERT_TRUE(runtime->allocate(1 << 12, p).isOk());
      own[t][name] = p;
    }
    seen.out[t] = own[t]["out"];
  }
  // The status word: the validation kernel's parameter 3 of a first run.
  st.launches.clear();
  {
    std::vector<int32_t> q = {0, 1}, len = {1, 1}, pages(16, -1);
    pages[0] = 0;
    pages[8] = 1;
    ASSERT_TRUE(runtime->copyToDevice(own[0]["q_offset"], q.data(), 8).isOk());
    ASSERT_TRUE(runtime->copyToDevice(own[0]["kv_len"], len.data(), 8).isOk());
    ASSERT_TRUE(
        runtime->copyToDevice(own[0]["block_table"], pages.data(), 64).isOk());
    ASSERT_TRUE(plan->run({2, 8, 2, 1, 128, 64, 16, 8}, own[0]).isOk());
    ASSERT_EQ(st.launches.size(), 3u);
    seen.status = st.launches[0].params[3];
  }
  const int liveBefore = st.liveAllocations, pinnedBefore = st.livePinned;
  runtime->resetCallCounts();
  st.launches.clear();
  fakecuda_set_launch_hook(checkLaunch, &seen);

  std::atomic<int> failures{0}, runs{0};
  std::vector<std::string> firstError(threads);
  auto body = [&](int t) {
    std::mt19937 rng(seed * 7919 + t);
    const uint64_t stream = reinterpret_cast<uintptr_t>(streams[t]);
    const Sizes sizes{kBatch, 8, 2, 1, 128, 64, 16, kMaxPages};
    auto check = [&](const Status &s, const char *what) {
      if (s.isOk())
        return true;
      ++failures;
      if (firstError[t].empty())
        firstError[t] = std::string(what) + ": " + s.message();
      return false;
    };
    std::map<std::string, DevicePtr> tensors;
    for (const char *name : {"query", "key", "value", "out"})
      tensors[name] = own[t][name];
    for (int i = 0; i < iterations; ++i) {
      switch (rng() % 8) {
      case 0:
      case 1:
      case 2: { // host metadata through the ring (twice: the second run
                // reuses the slot on the same stream, no copy)
        std::map<std::string, std::vector<int64_t>> metadata = {
            {"q_offset", qOffsets(t, i)},
            {"kv_len", kvLens(t, i)},
            {"block_table", table(t)}};
        for (int repeat = 0; repeat < (i % 2 ? 2 : 1); ++repeat)
          if (check(plan->runWithHostMetadata(sizes, tensors, metadata, stream),
                    "host-metadata run"))
            ++runs;
        break;
      }
      case 3:
      case 4: { // device metadata: this thread's buffers
        std::vector<int32_t> q, len, pages;
        for (int64_t v : qOffsets(t, i))
          q.push_back(static_cast<int32_t>(v));
        for (int64_t v : kvLens(t, i))
          len.push_back(static_cast<int32_t>(v));
        for (int64_t v : table(t))
          pages.push_back(static_cast<int32_t>(v));
        check(runtime->copyToDevice(own[t]["q_offset"], q.data(), 8), "copy");
        check(runtime->copyToDevice(own[t]["kv_len"], len.data(), 8), "copy");
        check(runtime->copyToDevice(own[t]["block_table"], pages.data(),
                                    4 * pages.size()),
              "copy");
        if (check(plan->run(sizes, own[t], stream), "device-metadata run"))
          ++runs;
        break;
      }
      case 5: { // allocate and free; a foreign pointer is still refused
        DevicePtr p = 0;
        if (check(runtime->allocate(64 + rng() % 4096, p), "allocate"))
          check(runtime->release(p), "release");
        if (runtime->release(0x10 + 16 * t).isOk())
          check(Status::error("a foreign pointer was freed"), "release");
        break;
      }
      case 6: // grow the ring while other threads use it
        check(runtime->reserveMetadata(4096u << (rng() % 3)), "reserve");
        break;
      default: { // cached loads and counts
        const Module *module = nullptr;
        check(runtime->loadModule(ptx, module), "load");
        (void)runtime->callCounts();
        (void)runtime->metadataWaits();
        (void)runtime->loadedModules();
        break;
      }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(body, t);
  for (std::thread &th : pool)
    th.join();
  fakecuda_set_launch_hook(nullptr, nullptr);

  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < threads; ++t)
    EXPECT_TRUE(firstError[t].empty())
        << "thread " << t << ": " << firstError[t];
  for (const std::string &e : seen.errors)
    ADD_FAILURE() << e;
  // Every run's attention launch arrived once, in its thread's order.
  size_t attentions = 0;
  for (int t = 0; t < threads; ++t) {
    attentions += seen.steps[t].size();
    for (size_t k = 1; k < seen.steps[t].size(); ++k)
      ASSERT_LE(seen.steps[t][k - 1], seen.steps[t][k]) << "thread " << t;
  }
  EXPECT_EQ(attentions, static_cast<size_t>(runs.load()));
  EXPECT_EQ(runtime->callCounts().launches,
            static_cast<int64_t>(st.launches.size()));
  EXPECT_EQ(st.liveAllocations - (st.livePinned - pinnedBefore), liveBefore);
  std::printf("%d runs, %zu launches, %lld metadata waits\n", runs.load(),
              st.launches.size(),
              static_cast<long long>(runtime->metadataWaits()));
  for (cuda::CUstream s : streams)
    cuStreamDestroy_v2(s);
}

// The same module text loaded from every thread at once is loaded once.
TEST_F(RuntimeThreadTest, ConcurrentLoadsShareOneModule) {
  const std::string text = ptx + "// another image\n";
  std::vector<const Module *> modules(threads, nullptr);
  std::vector<std::thread> pool;
  const int before = fakecuda_state()->moduleLoads;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(
        [&, t] { EXPECT_TRUE(runtime->loadModule(text, modules[t]).isOk()); });
  for (std::thread &th : pool)
    th.join();
  EXPECT_EQ(fakecuda_state()->moduleLoads, before + 1);
  for (const Module *m : modules)
    EXPECT_EQ(m, modules[0]);
}
