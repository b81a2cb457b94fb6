//===- CApiFuzzer.cpp - libFuzzer over the C API --------------------------===//
//
// Drives libkvattn_c's entry points as a careless or hostile caller would:
// each input is a sequence of calls with arguments drawn from its bytes —
// null pointers, unknown and duplicate names, metadata of any length and
// value, sizes from negative to near INT64_MAX, kernel indices out of range,
// manifests and images that are text of any kind, chips of any spelling,
// and IR from small valid programs with random shapes and options.
// Plans too: created from fixed IRs and from descriptions with random
// bounds and options, run on the device path and the host-metadata path
// with random sizes, buffers, metadata and streams, their status read and
// cleared, buffer names asked for any parameter, runs captured in graphs
// and replayed.
// Every call must return 0 or an error code with a message; crashes,
// sanitizer reports and leaks of the API's own objects are bugs.
//
// The runtime opens the fake driver (test/fakecuda, host memory, no GPU):
// launches are validated and recorded, not executed, so any device pointer
// value is harmless; copies stay inside buffers this fuzzer allocated.
//
//===----------------------------------------------------------------------===//

#include "kvattn-c/KVAttn.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

/// A compiled module the launches use: PTX (the fake driver reads its
/// .entry lines) and its manifest.
struct Compiled {
  std::string ptx, manifest;
};

void expectMessage(int rc, char *error, const char *call) {
  if (rc != 0 && (!error || !*error)) {
    std::fprintf(stderr, "%s failed without a message\n", call);
    __builtin_trap();
  }
  kvattn_free(error);
}

std::string compileOnce(const char *ir, Compiled &out) {
  char *ptx = nullptr, *manifest = nullptr, *error = nullptr;
  if (kvattn_compile_to_ptx(ir, "sm_80", &ptx, &manifest, &error)) {
    std::string message = error ? error : "?";
    kvattn_free(error);
    return message;
  }
  out.ptx = ptx;
  out.manifest = manifest;
  kvattn_free(ptx);
  kvattn_free(manifest);
  return "";
}

/// The IRs plans are created from: dynamic plain attention with positions
/// and lengths, a paged decode, a static one (a split-KV candidate), a
/// decode step with its cache writes, and two attentions in one function.
const char *kPlanIRs[] = {
    R"mlir(func.func @plain(%q: tensor<?x4x?x64xf16>, %k: tensor<?x2x?x64xf16>, %v: tensor<?x2x?x64xf16>, %qo: tensor<?xi32>, %n: tensor<?xi32>) -> tensor<?x4x?x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<?xi32>) kv_len(%n : tensor<?xi32>) causal : tensor<?x4x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x4x?x64xf16>
  return %o : tensor<?x4x?x64xf16>
})mlir",
    R"mlir(func.func @paged(%q: tensor<?x4x1x64xf16>, %k: tensor<?x16x2x64xf16>, %v: tensor<?x16x2x64xf16>, %n: tensor<?xi32>, %bt: tensor<?x?xi32>) -> tensor<?x4x1x64xf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%n : tensor<?xi32>) block_table(%bt : tensor<?x?xi32>) : tensor<?x4x1x64xf16>, tensor<?x16x2x64xf16>, tensor<?x16x2x64xf16> -> tensor<?x4x1x64xf16>
  return %o : tensor<?x4x1x64xf16>
})mlir",
    R"mlir(func.func @static(%q: tensor<2x4x1x64xf16>, %k: tensor<2x1x512x64xf16>, %v: tensor<2x1x512x64xf16>, %n: tensor<2xi32>) -> tensor<2x4x1x64xf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%n : tensor<2xi32>) : tensor<2x4x1x64xf16>, tensor<2x1x512x64xf16>, tensor<2x1x512x64xf16> -> tensor<2x4x1x64xf16>
  return %o : tensor<2x4x1x64xf16>
})mlir",
    R"mlir(func.func @step(%q: tensor<?x4x1x64xf16>, %kc: tensor<?x2x?x64xf16>, %vc: tensor<?x2x?x64xf16>, %kn: tensor<?x2x1x64xf16>, %vn: tensor<?x2x1x64xf16>, %pos: tensor<?xi32>, %n: tensor<?xi32>) -> tensor<?x4x1x64xf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<?x2x1x64xf16> into tensor<?x2x?x64xf16>, tensor<?xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<?x2x1x64xf16> into tensor<?x2x?x64xf16>, tensor<?xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) kv_len(%n : tensor<?xi32>) causal : tensor<?x4x1x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x4x1x64xf16>
  return %o : tensor<?x4x1x64xf16>
})mlir",
    R"mlir(func.func @two(%q: tensor<?x4x1x64xf16>, %k: tensor<?x2x?x64xf16>, %v: tensor<?x2x?x64xf16>, %n: tensor<?xi32>) -> (tensor<?x4x1x64xf16>, tensor<?x4x1x64xf16>) {
  %o = kvattn.attention %q, %k, %v kv_len(%n : tensor<?xi32>) : tensor<?x4x1x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x4x1x64xf16>
  %p = kvattn.attention %q, %v, %k kv_len(%n : tensor<?xi32>) : tensor<?x4x1x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x4x1x64xf16>
  return %o, %p : tensor<?x4x1x64xf16>, tensor<?x4x1x64xf16>
})mlir",
    "",
    "func.func @broken(",
};

struct Fixture {
  kvattn_runtime *runtime = nullptr;
  std::vector<Compiled> modules;

  Fixture() {
    setenv("KVATTN_LIBCUDA", KVATTN_FAKE_CUDA, 1);
    // Plans of the fixed IRs compile once, then come from a kernel cache of
    // this process's own (random IR elsewhere is compiled, never cached).
    char cacheDir[] = "/tmp/kvattn-fuzz-capi-XXXXXX";
    if (mkdtemp(cacheDir))
      setenv("KVATTN_CACHE_DIR", cacheDir, 1);
    char *error = nullptr;
    if (kvattn_runtime_create(&runtime, &error)) {
      std::fprintf(stderr, "cannot open the fake driver: %s\n", error);
      std::abort();
    }
    // A plain f16 attention with positions and lengths, a paged one and a
    // split-KV one (two kernels: attention, then merge).
    const char *irs[] = {
        R"mlir(func.func @plain(%q: tensor<?x4x?x64xf16>, %k: tensor<?x2x?x64xf16>, %v: tensor<?x2x?x64xf16>, %qo: tensor<?xi32>, %n: tensor<?xi32>) -> tensor<?x4x?x64xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<?xi32>) kv_len(%n : tensor<?xi32>) causal : tensor<?x4x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x4x?x64xf16>
  return %o : tensor<?x4x?x64xf16>
})mlir",
        R"mlir(func.func @paged(%q: tensor<?x4x1x64xf16>, %k: tensor<?x16x2x64xf16>, %v: tensor<?x16x2x64xf16>, %n: tensor<?xi32>, %bt: tensor<?x?xi32>) -> tensor<?x4x1x64xf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%n : tensor<?xi32>) block_table(%bt : tensor<?x?xi32>) : tensor<?x4x1x64xf16>, tensor<?x16x2x64xf16>, tensor<?x16x2x64xf16> -> tensor<?x4x1x64xf16>
  return %o : tensor<?x4x1x64xf16>
})mlir",
    };
    for (const char *ir : irs) {
      Compiled c;
      std::string why = compileOnce(ir, c);
      if (!why.empty()) // e.g. no libdevice: launches then get empty text
        std::fprintf(stderr,
                     "kvattn-fuzz-capi: the fixture does not compile (%s); "
                     "launches fuzz the argument checks up to the manifest\n",
                     why.c_str());
      modules.push_back(std::move(c));
    }
  }
};

Fixture &fixture() {
  static Fixture *f = new Fixture();
  return *f;
}

const char *kNames[] = {
    "query", "key",       "value",     "out",       "lse",
    "mask",  "out_parts", "lse_parts", "q_offset",  "k_offset",
    "q_pos", "k_pos",     "kv_len",    "key_valid", "block_table",
    "",      "QUERY",     "query ",    "update_k",  "update_v",
    "pos",   "status",    "update",    "cache",     "kv_lenn"};

int64_t drawSize(FuzzedDataProvider &in) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
  case 0:
    return in.ConsumeIntegralInRange<int64_t>(-4, 4);
  case 1:
    return in.ConsumeIntegralInRange<int64_t>(0, 300);
  case 2:
    return in.ConsumeIntegral<int64_t>();
  case 3:
    return (int64_t(1) << in.ConsumeIntegralInRange<int>(20, 62)) +
           in.ConsumeIntegralInRange<int64_t>(-1, 1);
  default:
    return in.ConsumeIntegralInRange<int64_t>(1, 16);
  }
}

/// An IR program of random shapes and attributes, sometimes broken.
std::string drawIR(FuzzedDataProvider &in) {
  auto dim = [&]() -> std::string {
    int64_t d = drawSize(in);
    return in.ConsumeBool() ? "?"
                            : std::to_string(d < 0 ? -(d + 1) : d); // no UB
  };
  const char *types[] = {"f16", "bf16", "f32", "f64", "i32"};
  std::string elt = types[in.ConsumeIntegralInRange<int>(0, 4)];
  std::string b = dim(), hq = dim(), hkv = dim(), l = dim(), s = dim(),
              d = std::to_string(in.PickValueInArray<int64_t>(
                  {8, 16, 64, 128, 256, 512, 1024})),
              dv = in.ConsumeBool() ? d : dim();
  std::string q = "tensor<" + b + "x" + hq + "x" + l + "x" + d + "x" + elt +
                  ">",
              k = "tensor<" + b + "x" + hkv + "x" + s + "x" + d + "x" + elt +
                  ">",
              v = "tensor<" + b + "x" + hkv + "x" + s + "x" + dv + "x" + elt +
                  ">",
              o = "tensor<" + b + "x" + hq + "x" + l + "x" + dv + "x" + elt +
                  ">";
  std::string attrs = in.ConsumeBool() ? " causal" : "";
  if (in.ConsumeBool())
    attrs += " window = " + std::to_string(drawSize(in));
  std::string ir = "func.func @f(%q: " + q + ", %k: " + k + ", %v: " + v +
                   ", %qo: tensor<" + b + "xi32>) -> " + o +
                   " {\n  %o = kvattn.attention %q, %k, %v q_offset(%qo : "
                   "tensor<" +
                   b + "xi32>)" + attrs + " : " + q + ", " + k + ", " + v +
                   " -> " + o + "\n  return %o : " + o + "\n}\n";
  if (in.ConsumeBool() && !ir.empty()) // truncated or corrupted text
    ir.resize(in.ConsumeIntegralInRange<size_t>(0, ir.size()));
  return ir;
}

kvattn_sizes drawSizes(FuzzedDataProvider &in) {
  return {drawSize(in), drawSize(in), drawSize(in), drawSize(in),
          drawSize(in), drawSize(in), drawSize(in), drawSize(in)};
}

/// Buffers by name: the plan's allocations or any pointer value.
std::vector<kvattn_buffer> drawBuffers(FuzzedDataProvider &in,
                                       const std::vector<uint64_t> &ours) {
  std::vector<kvattn_buffer> buffers(in.ConsumeIntegralInRange(0, 12));
  for (kvattn_buffer &buffer : buffers) {
    buffer.name = in.ConsumeIntegralInRange(0, 20) == 0
                      ? nullptr
                      : in.PickValueInArray(kNames);
    buffer.device_ptr =
        in.ConsumeBool() || ours.empty()
            ? (in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>() : 0)
            : ours[in.ConsumeIntegralInRange<size_t>(0, ours.size() - 1)];
  }
  return buffers;
}

/// Host metadata of any length and value; `values` keeps the arrays.
std::vector<kvattn_metadata>
drawMetadata(FuzzedDataProvider &in,
             std::vector<std::vector<int64_t>> &values) {
  std::vector<kvattn_metadata> metadata(in.ConsumeIntegralInRange(0, 6));
  for (kvattn_metadata &entry : metadata) {
    entry.name = in.ConsumeIntegralInRange(0, 20) == 0
                     ? nullptr
                     : in.PickValueInArray(kNames);
    values.emplace_back(in.ConsumeIntegralInRange<size_t>(0, 40));
    for (int64_t &v : values.back())
      v = drawSize(in);
    entry.values =
        in.ConsumeIntegralInRange(0, 20) == 0 ? nullptr : values.back().data();
    entry.count = values.back().size();
  }
  return metadata;
}

/// A stream argument: the current one mostly, else 0 or any value (a
/// foreign handle the fake driver refuses).
uint64_t drawStream(FuzzedDataProvider &in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
  case 0:
    return 0;
  case 1:
    return in.ConsumeIntegral<uint64_t>();
  default:
    return KVATTN_CURRENT_STREAM;
  }
}

/// A description with every field drawn (kvattn_attention_desc_to_ir
/// checks them), or one of few valid ones (cheap to plan: cached).
kvattn_attention_desc drawDescription(FuzzedDataProvider &in, bool anyValue) {
  kvattn_attention_desc d;
  kvattn_attention_desc_init(&d);
  if (anyValue) {
    d.dtype = static_cast<kvattn_dtype>(in.ConsumeIntegralInRange(-1, 8));
    d.batch = drawSize(in);
    d.query_len = drawSize(in);
    d.key_len = drawSize(in);
    d.num_query_heads = drawSize(in);
    d.num_kv_heads = drawSize(in);
    d.head_dim = drawSize(in);
    d.value_head_dim = drawSize(in);
    d.causal = in.ConsumeIntegralInRange(-1, 2);
    d.with_lse = in.ConsumeIntegralInRange(-1, 2);
    d.window = drawSize(in);
    d.softcap = in.ConsumeFloatingPoint<double>();
    d.scale = in.ConsumeFloatingPoint<double>();
    d.paged = in.ConsumeIntegralInRange(-1, 2);
    d.varlen = in.ConsumeIntegralInRange(-1, 2);
    d.page_size = drawSize(in);
    d.num_pages = drawSize(in);
    d.max_pages = drawSize(in);
    d.append = in.ConsumeIntegralInRange(-1, 2);
    d.reserved0 = in.ConsumeIntegralInRange(0, 20) == 0;
    if (in.ConsumeIntegralInRange(0, 20) == 0)
      d.struct_size = in.ConsumeIntegralInRange<size_t>(0, 4 * sizeof(d));
    return d;
  }
  d.dtype = in.PickValueInArray({KVATTN_F16, KVATTN_BF16, KVATTN_F32});
  d.query_len = 1;
  d.num_query_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 64;
  d.causal = 1;
  d.paged = in.ConsumeBool();
  d.page_size = d.paged ? 16 : 0;
  d.append = in.ConsumeBool();
  return d;
}

/// Plans: created with random bounds and options, then run (device and
/// host metadata), captured, replayed, asked for names, status, workspace.
void planStep(FuzzedDataProvider &in, kvattn_runtime *runtime,
              std::vector<kvattn_plan *> &plans,
              std::vector<uint64_t> &allocations,
              std::vector<std::vector<int64_t>> &values) {
  char *error = nullptr;
  if (plans.empty() || in.ConsumeIntegralInRange(0, 7) == 0) {
    if (plans.size() >= 3)
      return;
    kvattn_compile_options options;
    kvattn_compile_options_init(&options);
    options.split_kv = in.PickValueInArray<int64_t>({1, 0, 2, 4, -1});
    options.block_n = in.PickValueInArray<int64_t>({0, 32, 64});
    options.num_warps = in.PickValueInArray<int64_t>({0, 4});
    const bool defaults = in.ConsumeIntegralInRange(0, 7) == 0;
    kvattn_sizes bounds = drawSizes(in);
    kvattn_plan *plan = nullptr;
    int rc;
    if (in.ConsumeIntegralInRange(0, 5) == 0) {
      kvattn_attention_desc desc = drawDescription(in, false);
      rc = kvattn_plan_create_from_desc(
          runtime, &desc, defaults ? nullptr : &options, KVATTN_IMAGE_PTX,
          bounds, &plan, &error);
    } else {
      const char *ir = in.PickValueInArray(kPlanIRs);
      rc = kvattn_plan_create(
          in.ConsumeIntegralInRange(0, 30) == 0 ? nullptr : runtime, ir,
          defaults ? nullptr : &options,
          static_cast<kvattn_image_kind>(
              in.ConsumeIntegralInRange(0, 20) == 0 ? 7 : KVATTN_IMAGE_PTX),
          bounds, &plan, &error);
    }
    expectMessage(rc, error, "kvattn_plan_create");
    if (rc == 0)
      plans.push_back(plan);
    return;
  }
  kvattn_plan *plan =
      plans[in.ConsumeIntegralInRange<size_t>(0, plans.size() - 1)];
  switch (in.ConsumeIntegralInRange(0, 9)) {
  case 0:
  case 1: { // the device path
    kvattn_sizes sizes = drawSizes(in);
    std::vector<kvattn_buffer> buffers = drawBuffers(in, allocations);
    expectMessage(kvattn_plan_run(plan, sizes,
                                  in.ConsumeIntegralInRange(0, 20) == 0
                                      ? nullptr
                                      : buffers.data(),
                                  buffers.size(), drawStream(in), &error),
                  error, "kvattn_plan_run");
    break;
  }
  case 2:
  case 3: { // the host-metadata path
    kvattn_sizes sizes = drawSizes(in);
    std::vector<kvattn_buffer> buffers = drawBuffers(in, allocations);
    std::vector<kvattn_metadata> metadata = drawMetadata(in, values);
    expectMessage(
        kvattn_plan_run_host_metadata(
            plan, sizes, buffers.data(), buffers.size(),
            in.ConsumeIntegralInRange(0, 20) == 0 ? nullptr : metadata.data(),
            metadata.size(), drawStream(in), &error),
        error, "kvattn_plan_run_host_metadata");
    break;
  }
  case 4: { // a captured run (either path), replayed
    expectMessage(kvattn_graph_begin_capture(runtime, &error), error,
                  "kvattn_graph_begin_capture");
    error = nullptr;
    kvattn_sizes sizes = drawSizes(in);
    std::vector<kvattn_buffer> buffers = drawBuffers(in, allocations);
    if (in.ConsumeBool()) {
      expectMessage(kvattn_plan_run(plan, sizes, buffers.data(), buffers.size(),
                                    KVATTN_CURRENT_STREAM, &error),
                    error, "kvattn_plan_run (capturing)");
    } else {
      std::vector<kvattn_metadata> metadata = drawMetadata(in, values);
      expectMessage(kvattn_plan_run_host_metadata(
                        plan, sizes, buffers.data(), buffers.size(),
                        metadata.data(), metadata.size(), KVATTN_CURRENT_STREAM,
                        &error),
                    error, "kvattn_plan_run_host_metadata (capturing)");
    }
    error = nullptr;
    kvattn_graph *graph = nullptr;
    int rc = kvattn_graph_end_capture(runtime, &graph, &error);
    expectMessage(rc, error, "kvattn_graph_end_capture");
    if (rc == 0) {
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) {
        error = nullptr;
        expectMessage(kvattn_graph_launch(graph, &error), error,
                      "kvattn_graph_launch");
      }
      kvattn_graph_destroy(graph);
    }
    break;
  }
  case 5: { // names of any kernel index and parameter
    char *name = nullptr;
    const char *params[] = {"query", "update",  "cache", "pos",
                            "out",   "no_such", "",      nullptr};
    int rc =
        kvattn_plan_buffer_name(plan, in.ConsumeIntegralInRange<size_t>(0, 6),
                                in.PickValueInArray(params),
                                in.ConsumeBool() ? &name : nullptr, &error);
    expectMessage(rc, error, "kvattn_plan_buffer_name");
    if (rc == 0)
      kvattn_free(name);
    break;
  }
  case 6: {
    char *manifest = nullptr;
    size_t bytes = 0;
    int rc = kvattn_plan_manifest(plan, &manifest, &error);
    expectMessage(rc, error, "kvattn_plan_manifest");
    if (rc == 0)
      kvattn_free(manifest);
    error = nullptr;
    expectMessage(kvattn_plan_workspace_bytes(plan, &bytes, &error), error,
                  "kvattn_plan_workspace_bytes");
    break;
  }
  case 7: { // the status word, read (waits) and cleared
    int rc = kvattn_plan_status(plan, &error);
    expectMessage(rc, error, "kvattn_plan_status");
    error = nullptr;
    if (in.ConsumeBool())
      expectMessage(kvattn_plan_clear_status(plan, &error), error,
                    "kvattn_plan_clear_status");
    break;
  }
  case 8: { // a description to IR, every field drawn
    kvattn_attention_desc desc = drawDescription(in, true);
    char *ir = nullptr;
    int rc = kvattn_attention_desc_to_ir(&desc, &ir, &error);
    expectMessage(rc, error, "kvattn_attention_desc_to_ir");
    if (rc == 0)
      kvattn_free(ir);
    break;
  }
  default: { // the metadata ring, within what a host can allocate
    expectMessage(
        kvattn_runtime_reserve_metadata(
            runtime, in.ConsumeIntegralInRange<size_t>(0, 1 << 20), &error),
        error, "kvattn_runtime_reserve_metadata");
    break;
  }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Fixture &f = fixture();
  FuzzedDataProvider in(data, size);
  std::vector<uint64_t> allocations;
  std::vector<kvattn_kernel *> kernels;
  std::vector<kvattn_plan *> plans;
  // Storage that outlives each call's arrays.
  std::vector<std::vector<int64_t>> values;

  for (int step = 0; step < 8 && in.remaining_bytes() > 0; ++step) {
    char *error = nullptr;
    const Compiled &m =
        f.modules[in.ConsumeIntegralInRange<size_t>(0, f.modules.size() - 1)];
    // (Exhausted input reads as 0: the cheap synchronize, not a compile.)
    switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 8:
      planStep(in, f.runtime, plans, allocations, values);
      break;
    case 7: { // compile random IR for a random chip (rarely: it is slow)
      if (in.ConsumeIntegralInRange<int>(0, 15) != 15)
        break;
      std::string ir = drawIR(in);
      const char *chips[] = {"sm_80", "sm_90",   "sm_90a", "sm_60", "",
                             "SM_80", "sm_1000", "gfx90a", nullptr};
      const char *chip = in.PickValueInArray(chips);
      if (std::getenv("KVATTN_FUZZ_PRINT")) // reproducing an artifact
        std::fprintf(stderr, "chip %s, IR:\n%s\n", chip ? chip : "(null)",
                     ir.c_str());
      char *image = nullptr, *manifest = nullptr;
      int rc = in.ConsumeBool()
                   ? kvattn_compile_to_device_ir(ir.c_str(), chip, &image,
                                                 &manifest, &error)
                   : kvattn_compile_to_ptx(ir.c_str(), chip, &image, &manifest,
                                           &error);
      expectMessage(rc, error, "compile");
      if (rc == 0) {
        kvattn_free(image);
        kvattn_free(manifest);
      }
      break;
    }
    case 1: { // a launch or a loaded kernel's launch with random arguments
      kvattn_sizes sizes = {drawSize(in), drawSize(in), drawSize(in),
                            drawSize(in), drawSize(in), drawSize(in),
                            drawSize(in), drawSize(in)};
      std::vector<kvattn_buffer> buffers(in.ConsumeIntegralInRange(0, 10));
      for (kvattn_buffer &buffer : buffers) {
        buffer.name = in.ConsumeIntegralInRange(0, 20) == 0
                          ? nullptr
                          : in.PickValueInArray(kNames);
        buffer.device_ptr = in.ConsumeBool() || allocations.empty()
                                ? in.ConsumeIntegral<uint64_t>()
                                : allocations[in.ConsumeIntegralInRange<size_t>(
                                      0, allocations.size() - 1)];
      }
      std::vector<kvattn_metadata> metadata(in.ConsumeIntegralInRange(0, 6));
      for (kvattn_metadata &entry : metadata) {
        entry.name = in.ConsumeIntegralInRange(0, 20) == 0
                         ? nullptr
                         : in.PickValueInArray(kNames);
        values.emplace_back(in.ConsumeIntegralInRange<size_t>(0, 40));
        for (int64_t &v : values.back())
          v = drawSize(in);
        entry.values = in.ConsumeIntegralInRange(0, 20) == 0
                           ? nullptr
                           : values.back().data();
        entry.count = values.back().size();
      }
      const size_t index = in.ConsumeIntegralInRange<size_t>(0, 3);
      const kvattn_buffer *bufferArg =
          in.ConsumeIntegralInRange(0, 20) == 0 ? nullptr : buffers.data();
      const kvattn_metadata *metadataArg =
          in.ConsumeIntegralInRange(0, 20) == 0 ? nullptr : metadata.data();
      int rc;
      if (!kernels.empty() && in.ConsumeBool())
        rc = kvattn_kernel_launch(
            kernels[in.ConsumeIntegralInRange<size_t>(0, kernels.size() - 1)],
            sizes, bufferArg, buffers.size(), metadataArg, metadata.size(),
            &error);
      else
        rc = kvattn_launch(
            in.ConsumeIntegralInRange(0, 30) == 0 ? nullptr : f.runtime,
            m.ptx.c_str(), m.manifest.c_str(), index, sizes, bufferArg,
            buffers.size(), metadataArg, metadata.size(), &error);
      expectMessage(rc, error, "launch");
      break;
    }
    case 2: { // a manifest or an image that is any text
      std::string manifest =
          in.ConsumeBool() ? in.ConsumeRandomLengthString(512) : m.manifest;
      std::string image =
          in.ConsumeBool() ? in.ConsumeRandomLengthString(512) : m.ptx;
      kvattn_kernel *kernel = nullptr;
      int rc = kvattn_kernel_load(f.runtime, image.c_str(), manifest.c_str(),
                                  in.ConsumeIntegralInRange<size_t>(0, 3),
                                  &kernel, &error);
      expectMessage(rc, error, "kvattn_kernel_load");
      if (rc == 0)
        kernels.push_back(kernel);
      break;
    }
    case 3: { // device memory: modest sizes, copies within the allocation
      size_t bytes = in.ConsumeIntegralInRange<size_t>(0, 4096);
      uint64_t ptr = 0;
      int rc = kvattn_device_alloc(f.runtime, bytes, &ptr, &error);
      expectMessage(rc, error, "kvattn_device_alloc");
      if (rc)
        break;
      allocations.push_back(ptr);
      std::vector<uint8_t> host(bytes);
      size_t n = in.ConsumeIntegralInRange<size_t>(0, bytes);
      expectMessage(
          kvattn_copy_to_device(f.runtime, ptr, host.data(), n, &error), error,
          "kvattn_copy_to_device");
      error = nullptr;
      expectMessage(kvattn_copy_to_host(f.runtime, host.data(), ptr, n, &error),
                    error, "kvattn_copy_to_host");
      break;
    }
    case 4: { // null arguments everywhere
      uint64_t ptr;
      kvattn_kernel *kernel;
      char *a, *b;
      switch (in.ConsumeIntegralInRange(0, 9)) {
      case 0:
        expectMessage(kvattn_compile_to_ptx(nullptr, nullptr, &a, &b, &error),
                      error, "compile(null)");
        break;
      case 1:
        expectMessage(
            kvattn_compile_to_ptx("", "sm_80", nullptr, nullptr, &error), error,
            "compile(null outputs)");
        break;
      case 2:
        expectMessage(kvattn_runtime_create(nullptr, &error), error,
                      "kvattn_runtime_create(null)");
        break;
      case 3:
        expectMessage(kvattn_device_alloc(nullptr, 16, &ptr, &error), error,
                      "kvattn_device_alloc(null)");
        break;
      case 4:
        expectMessage(kvattn_device_alloc(f.runtime, 16, nullptr, &error),
                      error, "kvattn_device_alloc(null out)");
        break;
      case 5:
        expectMessage(kvattn_copy_to_host(f.runtime, nullptr, 0, 8, &error),
                      error, "kvattn_copy_to_host(null)");
        break;
      case 6:
        expectMessage(kvattn_kernel_load(f.runtime, m.ptx.c_str(),
                                         m.manifest.c_str(), 0, nullptr,
                                         &error),
                      error, "kvattn_kernel_load(null out)");
        break;
      case 7:
        expectMessage(kvattn_kernel_launch(nullptr, kvattn_sizes{}, nullptr, 0,
                                           nullptr, 0, &error),
                      error, "kvattn_kernel_launch(null)");
        break;
      case 8:
        expectMessage(kvattn_synchronize(nullptr, &error), error,
                      "kvattn_synchronize(null)");
        break;
      default:
        // No message wanted (error = NULL): only the code.
        if (kvattn_kernel_load(nullptr, nullptr, nullptr, 0, &kernel,
                               nullptr) == 0)
          __builtin_trap();
        break;
      }
      break;
    }
    case 0:
      expectMessage(kvattn_synchronize(f.runtime, &error), error,
                    "kvattn_synchronize");
      break;
    case 6:
      if (!kernels.empty()) {
        kvattn_kernel_destroy(kernels.back());
        kernels.pop_back();
      }
      break;
    case 5: { // frees of ours, of foreign pointers and double frees
      const bool ours = !allocations.empty() && in.ConsumeBool();
      const uint64_t ptr =
          ours ? allocations.back() : in.ConsumeIntegral<uint64_t>() | 1;
      const int rc = kvattn_device_free(f.runtime, ptr, &error);
      if (ours != (rc == 0)) {
        std::fprintf(stderr, "kvattn_device_free(%s) returned %d\n",
                     ours ? "an allocation" : "a foreign pointer", rc);
        __builtin_trap();
      }
      expectMessage(rc, error, "kvattn_device_free");
      if (ours)
        allocations.pop_back();
      break;
    }
    }
  }
  for (kvattn_kernel *kernel : kernels)
    kvattn_kernel_destroy(kernel);
  for (kvattn_plan *plan : plans)
    kvattn_plan_destroy(plan);
  for (uint64_t ptr : allocations) {
    char *error = nullptr;
    kvattn_device_free(f.runtime, ptr, &error);
    kvattn_free(error);
  }
  return 0;
}
