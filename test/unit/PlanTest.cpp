//===- PlanTest.cpp - plan / run, status word and graphs (fake driver) ----===//
//
// A serving step through rt::Plan over the fake driver: the launches a run
// queues (validation phases, then the kernel, each with the status word),
// that a run neither waits, allocates nor copies, CUDA-graph capture and
// replay, the bounds, and that a recorded violation reads back as the host
// validation's message.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Runtime/Plan.h"
#include "kvattn/Support/StatusWord.h"

#include "test/fakecuda/FakeCuda.h"

#include "PagedDecodeManifest.h"

#include "gtest/gtest.h"

#include <cstring>
#include <limits>

using namespace mlir::kvattn;
using namespace mlir::kvattn::rt;

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

class PlanTest : public ::testing::Test {
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
    // Device buffers (fake: host memory): tensors and metadata.
    for (const char *name : {"query", "key", "value", "out", "q_offset",
                             "kv_len", "block_table"}) {
      DevicePtr p = 0;
      ASSERT_TRUE(runtime->allocate(1 << 16, p).isOk());
      buffers[name] = p;
    }
  }
  void TearDown() override {
    plan.reset();
    for (auto &b : buffers)
      (void)runtime->release(b.second);
  }

  std::unique_ptr<Runtime> runtime;
  Manifest manifest;
  std::string ptx;
  Sizes bounds;
  std::unique_ptr<Plan> plan;
  std::map<std::string, DevicePtr> buffers;
};

} // namespace

// Planning owns the status word (cleared: no rule, the largest key).
TEST_F(PlanTest, PlanClearsItsStatusWord) {
  EXPECT_EQ(plan->workspaceBytes(), 128u);
  EXPECT_TRUE(plan->status().isOk());
  std::vector<std::string> names = plan->parameters();
  EXPECT_EQ(names.size(), 7u); // query, key, value, q_offset, kv_len, ...
}

// A run queues the validation kernel twice (phase 0, phase 1), then the
// kernel; each gets the plan's status word, the metadata pointers as given.
TEST_F(PlanTest, RunQueuesValidationThenTheKernel) {
  FakeCudaState &st = *fakecuda_state();
  st.launches.clear();
  Sizes sizes{3, 8, 2, 1, 128, 64, 16, 8};
  ASSERT_TRUE(plan->run(sizes, buffers).isOk());
  ASSERT_EQ(st.launches.size(), 3u);
  EXPECT_EQ(st.launches[0].kernel, "d_validate");
  EXPECT_EQ(st.launches[0].grid[0], 3u);    // one block per batch
  EXPECT_EQ(st.launches[0].params[12], 0u); // phase 0
  EXPECT_EQ(st.launches[1].params[12], 1u); // phase 1
  EXPECT_EQ(st.launches[0].params[2], buffers["block_table"]);
  EXPECT_EQ(st.launches[2].kernel, "d");
  EXPECT_EQ(st.launches[2].grid[0], 6u); // B * Hq / group
  EXPECT_EQ(st.launches[2].params[4], buffers["kv_len"]);
  EXPECT_EQ(st.launches[2].params[7], st.launches[0].params[3]); // status
}

// The serving budget: 40 steps with new lengths, zero synchronisations,
// allocations and copies of any kind (the fake driver and the runtime's own
// counts agree).
TEST_F(PlanTest, DecodeLoopMakesNoSyncAllocationOrCopy) {
  FakeCudaState &st = *fakecuda_state();
  const int allocations = st.deviceAllocationCalls + st.hostAllocationCalls;
  const size_t transfers = st.transfers.size(),
               syncs = st.synchronizedStreams.size();
  runtime->resetCallCounts();
  st.launches.clear();
  for (int step = 0; step < 40; ++step) {
    Sizes sizes{1 + step % 8, 8, 2, 1, 128, 64, 16, 8};
    ASSERT_TRUE(plan->run(sizes, buffers).isOk()) << "step " << step;
  }
  EXPECT_EQ(st.deviceAllocationCalls + st.hostAllocationCalls, allocations);
  EXPECT_EQ(st.transfers.size(), transfers);
  EXPECT_EQ(st.synchronizedStreams.size(), syncs);
  EXPECT_EQ(st.eventSynchronizations, 0);
  EXPECT_EQ(st.launches.size(), 120u);
  CallCounts c = runtime->callCounts();
  EXPECT_EQ(c.launches, 120);
  EXPECT_EQ(c.synchronizations, 0);
  EXPECT_EQ(c.allocations, 0);
  EXPECT_EQ(c.synchronousCopies, 0);
  EXPECT_EQ(c.asyncCopies, 0);
}

// Capture one step, replay it 5 times: the graph holds the step's three
// launches; no call was refused during the capture (nothing waited).
TEST_F(PlanTest, ARunCanBeCapturedAndReplayed) {
  FakeCudaState &st = *fakecuda_state();
  st.launches.clear();
  Sizes sizes{4, 8, 2, 1, 128, 64, 16, 8};
  ASSERT_TRUE(runtime->beginCapture().isOk());
  ASSERT_TRUE(plan->run(sizes, buffers).isOk());
  std::unique_ptr<Graph> graph;
  Status s = runtime->endCapture(graph);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(st.captured.size(), 3u);
  EXPECT_TRUE(st.launches.empty()); // captured, not run
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(runtime->launchGraph(*graph).isOk());
  EXPECT_EQ(st.graphLaunches, 5);
  EXPECT_EQ(st.launches.size(), 15u);
  EXPECT_EQ(st.refusedDuringCapture, 0);
  EXPECT_EQ(runtime->callCounts().graphLaunches, 5);
  // A wait inside a capture is refused (what the plan's run never does).
  ASSERT_TRUE(runtime->beginCapture().isOk());
  EXPECT_TRUE(plan->status().isError());
  EXPECT_TRUE(runtime->endCapture(graph).isOk());
}

TEST_F(PlanTest, RunChecksBoundsAndParametersBeforeQueueing) {
  FakeCudaState &st = *fakecuda_state();
  st.launches.clear();
  Sizes sizes{9, 8, 2, 1, 128, 64, 16, 8}; // B above the bound 8
  Status s = plan->run(sizes, buffers);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "plan run: B = 9 exceeds the plan's bound 8");
  sizes.B = 2;
  auto missing = buffers;
  missing.erase("kv_len");
  s = plan->run(sizes, missing);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("missing device metadata 'kv_len'"),
            std::string::npos)
      << s.message();
  auto unaligned = buffers;
  unaligned["kv_len"] += 2;
  s = plan->run(sizes, unaligned);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("is not 4-byte aligned"), std::string::npos);
  EXPECT_TRUE(st.launches.empty());
}

// A plan of 32-bit-index kernels (manifest index_bits 32) refuses a run
// whose pages hold 2^31 elements: key/value [num_pages, 16, 2, 64] have
// 2^11 elements per page.
TEST_F(PlanTest, A32BitPlanRefusesBuffersOf2To31Elements) {
  std::string json = kManifest;
  json.replace(json.find("\"ptx_file\""), 10,
               "\"index_bits\": 32, \"ptx_file\"");
  Manifest m32;
  ASSERT_TRUE(parseManifest(json, m32).isOk());
  Sizes big = bounds;
  big.numPages = int64_t(1) << 20;
  std::unique_ptr<Plan> p;
  Status s = Plan::create(*runtime, ptx, m32, big, p);
  ASSERT_TRUE(s.isOk()) << s.message();
  FakeCudaState &st = *fakecuda_state();
  st.launches.clear();
  Sizes sizes{2, 8, 2, 1, 128, int64_t(1) << 20, 16, 8};
  s = p->run(sizes, buffers);
  EXPECT_EQ(s.message(),
            "launch of 'd': 'key' has 2147483648 elements, 2^31 or more: the "
            "kernel was compiled with 32-bit index arithmetic (manifest "
            "index_bits 32); compile it with index-bitwidth=64 for this size");
  EXPECT_TRUE(st.launches.empty());
  sizes.numPages -= 1;
  s = p->run(sizes, buffers);
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_FALSE(st.launches.empty());
}

TEST_F(PlanTest, AManifestWithoutStatusWordIsRefused) {
  Manifest plain = manifest;
  plain.kernels.erase(plain.kernels.begin());
  plain.kernels[0].params.erase(plain.kernels[0].params.begin() + 7);
  std::unique_ptr<Plan> p;
  Status s = Plan::create(*runtime, ptx, plain, bounds, p);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("without device validation"), std::string::npos);
}

// A word the validation kernel wrote reads back as the host check's
// message for the same violation: compare with validateLaunch on the same
// values.
TEST_F(PlanTest, ARecordedViolationIsTheHostMessage) {
  const KernelInfo &kernel = manifest.kernels[1];
  auto hostMessage = [&](std::vector<int64_t> qOffset,
                         std::vector<int64_t> kvLen,
                         std::vector<int64_t> table) {
    LaunchArgs args;
    args.sizes = {2, 8, 2, 1, 64, 8, 16, 4};
    args.buffers = {{"query", 0x1000},
                    {"key", 0x2000},
                    {"value", 0x3000},
                    {"out", 0x4000},
                    {"status", 0x5000}};
    args.metadata = {
        {"q_offset", qOffset}, {"kv_len", kvLen}, {"block_table", table}};
    Status s = validateLaunch(kernel, args);
    EXPECT_TRUE(s.isError());
    return s.message();
  };
  auto word = [](int rule, int64_t b, int64_t index, int64_t value, int64_t aux,
                 int64_t size, int param) {
    std::array<int64_t, 16> w{};
    w[kStatusRule] = rule;
    w[kStatusBatch] = b;
    w[kStatusIndex] = index;
    w[kStatusValue] = value;
    w[kStatusAux] = aux;
    w[kStatusSize] = size;
    w[kStatusParam] = param;
    return w;
  };
  const std::vector<std::string> names = {"d"};
  const std::vector<int64_t> okTable = {0, 1, -1, -1, 2, -1, -1, -1};
  EXPECT_EQ(describeViolation(
                word(kRuleKvLenRange, 1, 0, 65, 0, 64, kParamKvLen), names),
            hostMessage({0, 0}, {1, 65}, okTable));
  EXPECT_EQ(describeViolation(
                word(kRuleKvLenRange, 0, 0, -2, 0, 64, kParamKvLen), names),
            hostMessage({0, 0}, {-2, 1}, okTable));
  EXPECT_EQ(describeViolation(
                word(kRuleNegative, 1, 0, -3, 0, 64, kParamQOffset), names),
            hostMessage({0, -3}, {1, 1}, okTable));
  EXPECT_EQ(describeViolation(
                word(kRulePageRange, 1, 1, 8, 0, 8, kParamBlockTable), names),
            hostMessage({0, 0}, {1, 1}, {0, 1, -1, -1, 2, 8, -1, -1}));
  EXPECT_EQ(
      describeViolation(
          word(kRuleRepeatedPage, 1, 1, 2, 0, 8, kParamBlockTable), names),
      hostMessage({0, 0}, {1, 1}, {0, 1, -1, -1, 2, 2, -1, -1}));
  EXPECT_EQ(describeViolation(
                word(kRuleAfterEmpty, 0, 3, 5, 2, 8, kParamBlockTable), names),
            hostMessage({0, 0}, {1, 1}, {0, 1, -1, 5, 2, -1, -1, -1}));
  EXPECT_EQ(describeViolation(
                word(kRuleKvLenPages, 1, 0, 17, 1, 16, kParamKvLen), names),
            hostMessage({0, 0}, {1, 17}, okTable));
}

// The rules device validation added for ragged batches (key_valid bytes,
// q_start): each recorded word reads back as the host check's message.
TEST(PlanMessages, KeyValidAndQueryStartsAreTheHostMessages) {
  KernelInfo kernel;
  kernel.name = "r";
  kernel.kind = "attention_varlen";
  auto pointer = [](const char *name, const char *type,
                    std::vector<std::string> shape, const char *access) {
    return ParamInfo{name, "pointer", type, std::move(shape), access};
  };
  kernel.params = {pointer("query", "f32", {"1", "4", "L", "16"}, "read"),
                   pointer("key", "f32", {"B", "2", "S", "16"}, "read"),
                   pointer("value", "f32", {"B", "2", "S", "16"}, "read"),
                   pointer("q_offset", "i32", {"B"}, "read"),
                   pointer("kv_len", "i32", {"B"}, "read"),
                   pointer("key_valid", "i1", {"B", "S"}, "read"),
                   pointer("q_start", "i32", {"B+1"}, "read"),
                   pointer("out", "f32", {"1", "4", "L", "16"}, "write")};
  for (const char *s : {"B", "Hq", "Hkv", "L", "S"})
    kernel.params.push_back(ParamInfo{s, "scalar", "i64", {}, ""});
  // B = 3 sequences of 2, 3 and 1 rows (T = 6), S = 4.
  auto hostMessage = [&](std::vector<int64_t> starts,
                         std::vector<int64_t> qOffset,
                         std::vector<int64_t> kvLen,
                         std::vector<int64_t> valid) {
    LaunchArgs args;
    args.sizes = {3, 4, 2, 6, 4};
    args.buffers = {
        {"query", 0x1000}, {"key", 0x2000}, {"value", 0x3000}, {"out", 0x4000}};
    args.metadata = {{"q_start", starts},
                     {"q_offset", qOffset},
                     {"kv_len", kvLen},
                     {"key_valid", valid}};
    Status s = validateLaunch(kernel, args);
    EXPECT_TRUE(s.isError());
    return s.message();
  };
  auto word = [](int rule, int64_t b, int64_t index, int64_t value, int64_t aux,
                 int64_t size, int64_t aux2, int param) {
    std::array<int64_t, 16> w{};
    w[kStatusRule] = rule;
    w[kStatusBatch] = b;
    w[kStatusIndex] = index;
    w[kStatusValue] = value;
    w[kStatusAux] = aux;
    w[kStatusSize] = size;
    w[kStatusAux2] = aux2;
    w[kStatusParam] = param;
    return w;
  };
  const std::vector<std::string> names = {"r"};
  const std::vector<int64_t> starts = {0, 2, 5, 6}, off = {2, 0, 3},
                             len = {4, 3, 4}, valid(12, 1);
  std::vector<int64_t> badValid = valid;
  badValid[4 + 2] = 2;
  EXPECT_EQ(describeViolation(
                word(kRuleNotBoolean, 1, 2, 2, 0, 4, 0, kParamKeyValid), names),
            hostMessage(starts, off, len, badValid));
  EXPECT_EQ(describeViolation(
                word(kRuleQStartFirst, 0, 0, 1, 0, 6, 0, kParamQStart), names),
            hostMessage({1, 2, 5, 6}, off, len, valid));
  EXPECT_EQ(
      describeViolation(
          word(kRuleQStartDecrease, 1, 2, 1, 2, 6, 0, kParamQStart), names),
      hostMessage({0, 2, 1, 6}, off, len, valid));
  EXPECT_EQ(
      describeViolation(
          word(kRuleQStartPastRows, 1, 2, 7, 2, 6, 0, kParamQStart), names),
      hostMessage({0, 2, 7, 7}, off, len, valid));
  EXPECT_EQ(describeViolation(
                word(kRuleQStartLast, 2, 3, 5, 5, 6, 0, kParamQStart), names),
            hostMessage({0, 2, 5, 5}, off, len, valid));
  // Sequence 1: rows 2..4 at positions 1..3, the cache holds 3 keys.
  EXPECT_EQ(describeViolation(
                word(kRuleQStartCache, 1, 0, 1, 2, 3, 5, kParamQStart), names),
            hostMessage(starts, {2, 1, 3}, len, valid));
}

// Ragged keys (k_start) and a batch-to-cache map (cache_batch_idx): each
// recorded word reads back as the host check's message
// (kvattn/Support/KeyRows.h).
TEST(PlanMessages, KeyStartsAndCacheBatchIndexAreTheHostMessages) {
  auto pointer = [](const char *name, const char *type,
                    std::vector<std::string> shape, const char *access) {
    return ParamInfo{name, "pointer", type, std::move(shape), access};
  };
  auto word = [](int rule, int64_t b, int64_t index, int64_t value, int64_t aux,
                 int64_t size, int param) {
    std::array<int64_t, 16> w{};
    w[kStatusRule] = rule;
    w[kStatusBatch] = b;
    w[kStatusIndex] = index;
    w[kStatusValue] = value;
    w[kStatusAux] = aux;
    w[kStatusSize] = size;
    w[kStatusParam] = param;
    return w;
  };
  const std::vector<std::string> names = {"r"};
  // Ragged keys: B = 3 sequences in a packed K/V of N = S = 20 rows.
  KernelInfo packed;
  packed.name = "r";
  packed.params = {pointer("query", "f32", {"B", "4", "L", "16"}, "read"),
                   pointer("key", "f32", {"1", "2", "S", "16"}, "read"),
                   pointer("value", "f32", {"1", "2", "S", "16"}, "read"),
                   pointer("kv_len", "i32", {"B"}, "read"),
                   pointer("out", "f32", {"B", "4", "L", "16"}, "write"),
                   pointer("k_start", "i32", {"B+1"}, "read")};
  for (const char *s : {"B", "Hq", "Hkv", "L", "S"})
    packed.params.push_back(ParamInfo{s, "scalar", "i64", {}, ""});
  auto packedMessage = [&](std::vector<int64_t> starts,
                           std::vector<int64_t> kvLen) {
    LaunchArgs args;
    args.sizes = {3, 4, 2, 1, 20};
    args.buffers = {
        {"query", 0x1000}, {"key", 0x2000}, {"value", 0x3000}, {"out", 0x4000}};
    args.metadata = {{"k_start", starts}, {"kv_len", kvLen}};
    Status s = validateLaunch(packed, args);
    EXPECT_TRUE(s.isError());
    return s.message();
  };
  const std::vector<int64_t> len = {4, 3, 4};
  EXPECT_EQ(
      describeViolation(
          word(kRuleKStartNegative, 0, 0, -1, 0, 20, kParamKStart), names),
      packedMessage({-1, 5, 9, 20}, len));
  EXPECT_EQ(describeViolation(
                word(kRuleKStartDecrease, 1, 2, 4, 5, 20, kParamKStart), names),
            packedMessage({0, 5, 4, 20}, len));
  EXPECT_EQ(
      describeViolation(
          word(kRuleKStartPastRows, 2, 3, 21, 9, 20, kParamKStart), names),
      packedMessage({0, 5, 9, 21}, len));
  // kv_len[1] = 3 > k_start[2] - k_start[1] = 2.
  EXPECT_EQ(describeViolation(
                word(kRuleKStartKvLen, 1, 3, 7, 5, 20, kParamKStart), names),
            packedMessage({0, 5, 7, 20}, len));
  // A batch-to-cache map over C = 4 cache rows.
  KernelInfo mapped;
  mapped.name = "r";
  mapped.params = {
      pointer("query", "f32", {"B", "4", "L", "16"}, "read"),
      pointer("key", "f32", {"cache_rows", "2", "S", "16"}, "read"),
      pointer("value", "f32", {"cache_rows", "2", "S", "16"}, "read"),
      pointer("out", "f32", {"B", "4", "L", "16"}, "write"),
      pointer("cache_batch_idx", "i32", {"B"}, "read")};
  for (const char *s : {"B", "Hq", "Hkv", "L", "S", "cache_rows"})
    mapped.params.push_back(ParamInfo{s, "scalar", "i64", {}, ""});
  LaunchArgs args;
  args.sizes = {3, 4, 2, 1, 20};
  args.sizes.cacheRows = 4;
  args.buffers = {
      {"query", 0x1000}, {"key", 0x2000}, {"value", 0x3000}, {"out", 0x4000}};
  args.metadata = {{"cache_batch_idx", {3, 3, 0}}};
  EXPECT_TRUE(validateLaunch(mapped, args).isOk()); // a row read twice
  args.metadata = {{"cache_batch_idx", {3, 4, 0}}};
  Status s = validateLaunch(mapped, args);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(describeViolation(
                word(kRuleCacheIndexRange, 1, 0, 4, 0, 4, kParamCacheBatchIdx),
                names),
            s.message());
  EXPECT_NE(s.message().find("cache_batch_idx[1] = 4 is outside [0, C = 4)"),
            std::string::npos);
  // An FP8 cache's scales (rules 25-27): the element and its f32 bits, the
  // reference's message.
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return static_cast<int64_t>(u);
  };
  EXPECT_EQ(describeViolation(word(kRuleKvScaleNotPositive, 0, 1, bits(0.0f), 0,
                                   2, kParamKScale),
                              names),
            "launch of 'r': k_scale[1] = 0 must be positive and finite (a KV "
            "scale divides the values it quantises)");
  EXPECT_EQ(
      describeViolation(word(kRuleKvScaleNaN, 0, 0,
                             bits(std::numeric_limits<float>::quiet_NaN()), 0,
                             1, kParamVScale),
                        names),
      "launch of 'r': v_scale[0] = nan must be positive and finite (a KV "
      "scale divides the values it quantises)");
  EXPECT_EQ(
      describeViolation(word(kRuleKvScaleInf, 0, 5,
                             bits(-std::numeric_limits<float>::infinity()), 0,
                             8, kParamKScale),
                        names),
      "launch of 'r': k_scale[5] = -inf must be positive and finite (a "
      "KV scale divides the values it quantises)");
}

TEST(PlanMessages, RopeRecordIsTheHostMessage) {
  auto pointer = [](const char *name, const char *type,
                    std::vector<std::string> shape, const char *access) {
    return ParamInfo{name, "pointer", type, std::move(shape), access};
  };
  // RoPE's record [B, S] beside the key positions k_offset + j, B = 2,
  // S = 8, kv_len = {5, 8}.
  KernelInfo rope;
  rope.name = "r";
  rope.params = {pointer("query", "f32", {"B", "4", "L", "16"}, "read"),
                 pointer("key", "f32", {"B", "2", "S", "16"}, "read"),
                 pointer("value", "f32", {"B", "2", "S", "16"}, "read"),
                 pointer("k_offset", "i32", {"B"}, "read"),
                 pointer("kv_len", "i32", {"B"}, "read"),
                 pointer("out", "f32", {"B", "4", "L", "16"}, "write"),
                 pointer("k_rope_pos", "i64", {"B", "S"}, "read")};
  for (const char *s : {"B", "Hq", "Hkv", "L", "S"})
    rope.params.push_back(ParamInfo{s, "scalar", "i64", {}, ""});
  LaunchArgs args;
  args.sizes = {2, 4, 2, 1, 8};
  args.buffers = {
      {"query", 0x1000}, {"key", 0x2000}, {"value", 0x3000}, {"out", 0x4000}};
  std::vector<int64_t> record = {100, 101, 102, 103, 104, -1, -1, -1,
                                 0,   1,   2,   3,   4,   5,  6,  7};
  args.metadata = {
      {"k_offset", {100, 0}}, {"kv_len", {5, 8}}, {"k_rope_pos", record}};
  // Slots past kv_len hold -1 and are no keys.
  EXPECT_TRUE(validateLaunch(rope, args).isOk());
  args.metadata["k_rope_pos"][8 + 6] = 7;
  Status s = validateLaunch(rope, args);
  ASSERT_TRUE(s.isError());
  std::array<int64_t, 16> w{};
  w[kStatusRule] = kRuleKRopePos;
  w[kStatusBatch] = 1;
  w[kStatusIndex] = 6;
  w[kStatusValue] = 7;
  w[kStatusAux] = 6;
  w[kStatusSize] = 8;
  w[kStatusParam] = kParamKRopePos;
  EXPECT_EQ(describeViolation(w, {"r"}), s.message());
  EXPECT_EQ(s.message(), "launch of 'r': k_rope_pos: the key of batch 1, "
                         "slot 6 was rotated at position 7 but is attended "
                         "at position 6");
  // With device metadata the record is one more device pointer.
  args.metadata.clear();
  args.metadataOnDevice = true;
  args.buffers["k_offset"] = 0x5000;
  args.buffers["kv_len"] = 0x5100;
  args.buffers["k_rope_pos"] = 0x5200;
  EXPECT_TRUE(validateLaunch(rope, args).isOk());
  args.buffers.erase("k_rope_pos");
  s = validateLaunch(rope, args);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "launch of 'r': missing device metadata "
                         "'k_rope_pos'");
}

namespace {

/// A dynamic-shape GQA decode (32 query heads over 8 kv heads, D = 128)
/// with a run-time split, compiled with device validation: validation
/// kernel, attention (grid z = N), merge (N parts); both take N last.
const char *kSplitManifest = R"json({
  "format": "kvattn-launch-manifest", "version": 2, "chip": "sm_90",
  "ptx_file": "s.ptx",
  "kernels": [
    {
      "name": "a_validate",
      "params": [
        {"index": 0, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 1, "name": "status", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": [16], "access": "write"},
        {"index": 2, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 3, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 4, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 5, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 6, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 7, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 8, "name": "phase", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "B", "y": 1, "z": 1}, "block": {"x": 128, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 0,
      "tile": {"block_m": 1, "block_n": 0, "num_warps": 4, "num_stages": 1},
      "kind": "validate"
    },
    {
      "name": "a",
      "params": [
        {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, 1, 128], "access": "read"},
        {"index": 1, "name": "key", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "S", 128], "access": "read"},
        {"index": 2, "name": "value", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, "S", 128], "access": "read"},
        {"index": 3, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 4, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, 1, 128], "access": "write"},
        {"index": 5, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1, 128], "access": "write"},
        {"index": 6, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1], "access": "write"},
        {"index": 7, "name": "status", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": [16], "access": "read"},
        {"index": 8, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 9, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 10, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 11, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 12, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 13, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
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
        {"index": 0, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, 1, 128], "access": "write"},
        {"index": 1, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1, 128], "access": "read"},
        {"index": 2, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1], "access": "read"},
        {"index": 3, "name": "status", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": [16], "access": "read"},
        {"index": 4, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 5, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 6, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 7, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
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

} // namespace

// A decode loop whose cache grows: the plan's workspaces are sized once for
// the bounds and N_max = 64; each run picks n from its own sizes (host
// integers: no copy, no wait, no allocation), the attention's grid z and
// both kernels' N agree, and n changes as S grows (132 SMs, B = 1:
// min(ceil(1056 / 8), floor(S / 512)) until 64).
TEST(PlanSplit, DecodeLoopPicksTheSplitPerRunWithoutAllocating) {
  fakecuda_reset();
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = KVATTN_FAKE_CUDA;
  ASSERT_TRUE(Runtime::create(runtime, options).isOk());
  Manifest manifest;
  Status s = parseManifest(kSplitManifest, manifest);
  ASSERT_TRUE(s.isOk()) << s.message();
  const std::string image = ".version 8.0\n.target sm_90\n" +
                            entry("a_validate", 9) + entry("a", 14) +
                            entry("m", 8);
  const Sizes bounds{8, 32, 8, 1, 32768};
  std::unique_ptr<Plan> plan;
  s = Plan::create(*runtime, image, manifest, bounds, plan);
  ASSERT_TRUE(s.isOk()) << s.message();
  // Status word, then out_parts [64, 8, 32, 1, 128] and lse_parts
  // [64, 8, 32, 1] in f32.
  EXPECT_EQ(plan->workspaceBytes(),
            128u + 64u * 8 * 32 * 128 * 4 + 64u * 8 * 32 * 4);
  std::map<std::string, DevicePtr> buffers;
  for (const char *name : {"query", "key", "value", "out", "kv_len"}) {
    DevicePtr p = 0;
    ASSERT_TRUE(runtime->allocate(1 << 16, p).isOk());
    buffers[name] = p;
  }
  FakeCudaState &st = *fakecuda_state();
  const int allocations = st.deviceAllocationCalls + st.hostAllocationCalls;
  const size_t transfers = st.transfers.size(),
               syncs = st.synchronizedStreams.size();
  runtime->resetCallCounts();
  st.launches.clear();
  const int64_t steps[] = {512, 1000, 1024, 2048, 4096, 4607, 8192, 32768};
  const int64_t expected[] = {1, 1, 2, 4, 8, 8, 16, 64};
  for (int64_t S : steps) {
    ASSERT_TRUE(plan->run({1, 32, 8, 1, S}, buffers).isOk()) << "S " << S;
  }
  EXPECT_EQ(st.deviceAllocationCalls + st.hostAllocationCalls, allocations);
  EXPECT_EQ(st.transfers.size(), transfers);
  EXPECT_EQ(st.synchronizedStreams.size(), syncs);
  EXPECT_EQ(st.eventSynchronizations, 0);
  CallCounts c = runtime->callCounts();
  EXPECT_EQ(c.allocations, 0);
  EXPECT_EQ(c.synchronizations, 0);
  EXPECT_EQ(c.synchronousCopies, 0);
  EXPECT_EQ(c.asyncCopies, 0);
  // Per run: the validation kernel twice, the attention, the merge (none
  // for n = 1: the attention stored out itself).
  ASSERT_EQ(st.launches.size(), 4 * std::size(steps) - 2);
  size_t at = 0;
  for (size_t i = 0; i < std::size(steps); ++i) {
    EXPECT_EQ(st.launches[at].kernel, "a_validate");
    const FakeLaunch &a = st.launches[at + 2];
    at += expected[i] > 1 ? 4 : 3;
    EXPECT_EQ(a.kernel, "a");
    EXPECT_EQ(a.grid[0], 8u);
    EXPECT_EQ(a.grid[2], static_cast<unsigned>(expected[i]))
        << "S " << steps[i];
    EXPECT_EQ(a.params[13], static_cast<uint64_t>(expected[i]));
    if (expected[i] == 1)
      continue;
    const FakeLaunch &m = st.launches[at - 1];
    EXPECT_EQ(m.kernel, "m");
    EXPECT_EQ(m.params[7], static_cast<uint64_t>(expected[i]));
    EXPECT_EQ(m.grid[0], 32u);
    EXPECT_EQ(m.grid[2], 1u);
  }
  plan.reset();
  for (auto &b : buffers)
    (void)runtime->release(b.second);
}

namespace {
/// The paged decode's metadata on the host: B = 2, max_pages = 8.
std::map<std::string, std::vector<int64_t>> hostMetadata(int64_t offset) {
  std::vector<int64_t> table(16, -1);
  table[0] = 0;
  table[8] = 1;
  return {{"q_offset", {offset, offset + 1}},
          {"kv_len", {4, 5}},
          {"block_table", table}};
}
} // namespace

// Issue 30, item 2: a host-metadata run whose metadata equals the last
// one's queues no copy, so it used to capture fine, and the graph kept a
// ring slot's address that later runs rewrite. It is refused while the
// stream is captured, before anything is queued.
TEST_F(PlanTest, HostMetadataRunsAreRefusedWhileCapturing) {
  FakeCudaState &st = *fakecuda_state();
  Sizes sizes{2, 8, 2, 1, 128, 64, 16, 8};
  std::map<std::string, DevicePtr> tensors;
  for (const char *name : {"query", "key", "value", "out"})
    tensors[name] = buffers[name];
  Status s = plan->runWithHostMetadata(sizes, tensors, hostMetadata(3));
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_TRUE(runtime->beginCapture().isOk());
  s = plan->runWithHostMetadata(sizes, tensors, hostMetadata(3));
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "plan run: host metadata cannot be captured: the stream is being "
            "captured into a CUDA graph, which would replay the address of a "
            "metadata slot that later runs rewrite; pass the metadata as "
            "device buffers (Plan::run, kvattn_plan_run) to capture");
  std::unique_ptr<Graph> graph;
  ASSERT_TRUE(runtime->endCapture(graph).isOk());
  EXPECT_TRUE(st.captured.empty());
  // Not captured: runs again.
  EXPECT_TRUE(
      plan->runWithHostMetadata(sizes, tensors, hostMetadata(3)).isOk());
}

// Planning while the stream is captured would record the status word's
// clearing fills into the graph: refused, nothing allocated.
TEST_F(PlanTest, PlanningIsRefusedWhileCapturing) {
  FakeCudaState &st = *fakecuda_state();
  const int live = st.liveAllocations;
  ASSERT_TRUE(runtime->beginCapture().isOk());
  std::unique_ptr<Plan> p;
  Status s = Plan::create(*runtime, ptx, manifest, bounds, p);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "planning: the runtime's stream is being captured into a CUDA "
            "graph; planning allocates and clears the status word, which a "
            "graph would record and replay: create plans before beginning "
            "the capture");
  EXPECT_FALSE(p);
  EXPECT_EQ(st.liveAllocations, live);
  std::unique_ptr<Graph> graph;
  ASSERT_TRUE(runtime->endCapture(graph).isOk());
}

// Issue 30, item 6: names no kernel of the plan has (a typo such as
// `kv_lenn`, which was ignored) are refused, and so is a name given as a
// buffer and as metadata.
TEST_F(PlanTest, UnknownNamesAreRefusedInHostMetadataRuns) {
  FakeCudaState &st = *fakecuda_state();
  st.launches.clear();
  Sizes sizes{2, 8, 2, 1, 128, 64, 16, 8};
  std::map<std::string, DevicePtr> tensors;
  for (const char *name : {"query", "key", "value", "out"})
    tensors[name] = buffers[name];
  auto metadata = hostMetadata(3);
  metadata["kv_lenn"] = {1, 1};
  Status s = plan->runWithHostMetadata(sizes, tensors, metadata);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(
      s.message(),
      "plan run: the plan has no parameter 'kv_lenn' (given as metadata)");
  auto typo = tensors;
  typo["outt"] = buffers["out"];
  s = plan->runWithHostMetadata(sizes, typo, hostMetadata(3));
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "plan run: the plan has no parameter 'outt'");
  auto both = tensors;
  both["kv_len"] = buffers["kv_len"];
  s = plan->runWithHostMetadata(sizes, both, hostMetadata(3));
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(), "plan run: 'kv_len' is given both as a device "
                         "buffer and as host metadata");
  EXPECT_TRUE(st.launches.empty());
  EXPECT_TRUE(plan->hasParameter(1, "kv_len"));
  EXPECT_FALSE(plan->hasParameter(1, "no_such_param"));
  EXPECT_FALSE(plan->hasParameter(2, "kv_len"));
}

// Issue 30, item 5: two attentions in one plan would bind the same query,
// kv_len and out; refused by name.
TEST_F(PlanTest, TwoAttentionsAreRefused) {
  Manifest two = manifest;
  KernelInfo second = two.kernels[1];
  second.name = "d2";
  two.kernels.push_back(second);
  std::unique_ptr<Plan> p;
  Status s = Plan::create(*runtime, ptx, two, bounds, p);
  ASSERT_TRUE(s.isError());
  EXPECT_EQ(s.message(),
            "planning: the module has 2 attention kernels ('d', 'd2'): a plan "
            "binds its buffers by name (query, key, value, out, q_offset, "
            "kv_len, ...), so both would read and write the same buffers; "
            "plan each attention separately");
}

// Issue 30, item 4: the split-KV workspaces are sized from the bounds; a
// bound of 0 (unbounded) that they depend on, a negative bound, or a size
// that overflows gave a tiny workspace that a run within the bounds wrote
// past. Each is refused by name, and nothing stays allocated.
TEST(PlanSplit, WorkspaceBoundsAreChecked) {
  fakecuda_reset();
  std::unique_ptr<Runtime> runtime;
  RuntimeOptions options;
  options.libraryPath = KVATTN_FAKE_CUDA;
  ASSERT_TRUE(Runtime::create(runtime, options).isOk());
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kSplitManifest, manifest).isOk());
  const std::string image = ".version 8.0\n.target sm_90\n" +
                            entry("a_validate", 9) + entry("a", 14) +
                            entry("m", 8);
  FakeCudaState &st = *fakecuda_state();
  auto refused = [&](Sizes bounds) {
    std::unique_ptr<Plan> plan;
    Status s = Plan::create(*runtime, image, manifest, bounds, plan);
    EXPECT_TRUE(s.isError());
    EXPECT_EQ(st.liveAllocations, 0);
    return s.message();
  };
  EXPECT_EQ(refused({0, 32, 8, 1, 32768}),
            "planning the split-KV workspace 'out_parts' of 'a': its size "
            "depends on B, which the bounds leave unbounded (0): give B a "
            "positive bound (max_sizes)");
  EXPECT_EQ(refused({-1, 32, 8, 1, 32768}),
            "planning: the bound B = -1 is negative (0: unbounded, where no "
            "workspace depends on it)");
  EXPECT_EQ(refused({8, 32, 8, 1, -5}),
            "planning: the bound S = -5 is negative (0: unbounded, where no "
            "workspace depends on it)");
  // B = 2^58, S = 2^40: 64 x 2^58 elements.
  EXPECT_EQ(refused({int64_t(1) << 58, 32, 8, 1, int64_t(1) << 40}),
            "planning the split-KV workspace 'out_parts' of 'a': 64 x "
            "288230376151711744... elements overflow 64 bits: lower the "
            "bounds");
  // 2^62 elements fit 64 bits, their 4-byte floats do not.
  EXPECT_EQ(refused({int64_t(1) << 44, 32, 8, 1, 32768}),
            "planning the split-KV workspace 'out_parts' of 'a': 64 x "
            "17592186044416 x 32 x 1 x 128 f32 elements overflow 64 bits of "
            "bytes: lower the bounds");
  // S and L may stay unbounded: no workspace depends on them (L is static
  // here: [N, B, 32, 1, 128]).
  std::unique_ptr<Plan> plan;
  Status s = Plan::create(*runtime, image, manifest, {8, 32, 8, 0, 0}, plan);
  EXPECT_TRUE(s.isOk()) << s.message();
}
