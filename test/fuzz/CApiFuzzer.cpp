//===- CApiFuzzer.cpp - libFuzzer over the C API --------------------------===//
//
// Drives libkvattn_c's entry points as a careless or hostile caller would:
// each input is a sequence of calls with arguments drawn from its bytes —
// null pointers, unknown and duplicate names, metadata of any length and
// value, sizes from negative to near INT64_MAX, kernel indices out of range,
// manifests and images that are text of any kind, chips of any spelling,
// and IR from small valid programs with random shapes and options.
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

struct Fixture {
  kvattn_runtime *runtime = nullptr;
  std::vector<Compiled> modules;

  Fixture() {
    setenv("KVATTN_LIBCUDA", KVATTN_FAKE_CUDA, 1);
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
    "query",     "key",       "value",       "out",      "lse",   "mask",
    "out_parts", "lse_parts", "q_offset",    "k_offset", "q_pos", "k_pos",
    "kv_len",    "key_valid", "block_table", "",         "QUERY", "query "};

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

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Fixture &f = fixture();
  FuzzedDataProvider in(data, size);
  std::vector<uint64_t> allocations;
  std::vector<kvattn_kernel *> kernels;
  // Storage that outlives each call's arrays.
  std::vector<std::vector<int64_t>> values;

  for (int step = 0; step < 8 && in.remaining_bytes() > 0; ++step) {
    char *error = nullptr;
    const Compiled &m =
        f.modules[in.ConsumeIntegralInRange<size_t>(0, f.modules.size() - 1)];
    // (Exhausted input reads as 0: the cheap synchronize, not a compile.)
    switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 7: { // compile random IR for a random chip (rarely: it is slow)
      if (in.ConsumeIntegralInRange<int>(0, 15) != 15)
        break;
      std::string ir = drawIR(in);
      const char *chips[] = {"sm_80", "sm_90a",  "sm_60",  "",
                             "SM_80", "sm_1000", "gfx90a", nullptr};
      const char *chip = in.PickValueInArray(chips);
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
  for (uint64_t ptr : allocations) {
    char *error = nullptr;
    kvattn_device_free(f.runtime, ptr, &error);
    kvattn_free(error);
  }
  return 0;
}
