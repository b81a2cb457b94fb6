//===- EmuDriverHelper.h - the emulated driver for unit tests --*- C++ -*-===//
//
// libkvattn_cuda_emu.so opened with dlopen, as the runtime opens a driver,
// with the helpers the emulator's unit tests share (GpuEmuTest.cpp,
// GpuEmuHopperTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TEST_UNIT_EMUDRIVERHELPER_H
#define KVATTN_TEST_UNIT_EMUDRIVERHELPER_H

#include "runtime/CudaApi.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvattn_test {

using namespace mlir::kvattn::cuda;

/// The emulated driver, opened like the runtime opens a driver.
class EmuDriver {
public:
  EmuDriver() {
    handle_ = dlopen(KVATTN_EMU_DRIVER, RTLD_NOW | RTLD_LOCAL);
    if (!handle_)
      return;
#define KVATTN_RESOLVE(name, symbol, ret, params)                              \
  name = reinterpret_cast<ret(*) params>(dlsym(handle_, symbol));
    KVATTN_CUDA_ENTRY_POINTS(KVATTN_RESOLVE)
#undef KVATTN_RESOLVE
    takeCounters = reinterpret_cast<const char *(*)()>(
        dlsym(handle_, "kvattn_emu_take_counters"));
    takeReports = reinterpret_cast<const char *(*)()>(
        dlsym(handle_, "kvattn_emu_take_reports"));
    configure = reinterpret_cast<int (*)(const char *, const char *)>(
        dlsym(handle_, "kvattn_emu_configure"));
    cuInit(0);
  }
  bool ok() const { return handle_ && cuInit && takeCounters; }

#define KVATTN_DECLARE(name, symbol, ret, params) ret(*name) params = nullptr;
  KVATTN_CUDA_ENTRY_POINTS(KVATTN_DECLARE)
#undef KVATTN_DECLARE
  const char *(*takeCounters)() = nullptr;
  const char *(*takeReports)() = nullptr;
  /// kvattn_emu_configure(key, value): "fault", "fail-on-report", ...
  int (*configure)(const char *, const char *) = nullptr;

  std::string errorText(CUresult r) {
    const char *text = "";
    cuGetErrorString(r, &text);
    return text;
  }

  /// Loads `ir`; on failure returns null and sets `error`.
  CUmodule load(const std::string &ir, std::string &error) {
    CUmodule m = nullptr;
    CUresult r = cuModuleLoadDataEx(&m, ir.c_str(), 0, nullptr, nullptr);
    if (r != CUDA_SUCCESS) {
      error = errorText(r);
      return nullptr;
    }
    return m;
  }

  /// Launches `kernel` of `module` with pointer/integer parameters; returns
  /// "" or the error text.
  std::string launch(CUmodule module, const char *kernel, unsigned grid,
                     unsigned block, unsigned smem,
                     std::vector<uint64_t> params) {
    CUfunction f;
    CUresult r = cuModuleGetFunction(&f, module, kernel);
    if (r != CUDA_SUCCESS)
      return errorText(r);
    std::vector<void *> slots;
    for (uint64_t &p : params)
      slots.push_back(&p);
    r = cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, nullptr, slots.data(),
                       nullptr);
    return r == CUDA_SUCCESS ? "" : errorText(r);
  }

  uint64_t upload(const void *data, size_t bytes) {
    CUdeviceptr p;
    cuMemAlloc(&p, bytes);
    if (data)
      cuMemcpyHtoD(p, data, bytes);
    return p;
  }

  template <typename T> std::vector<T> download(uint64_t p, size_t n) {
    std::vector<T> v(n);
    cuMemcpyDtoH(v.data(), p, n * sizeof(T));
    return v;
  }

private:
  void *handle_ = nullptr;
};

inline EmuDriver &driver() {
  static EmuDriver d;
  return d;
}

} // namespace kvattn_test

#define REQUIRE_DRIVER()                                                       \
  ASSERT_TRUE(driver().ok()) << "cannot open " KVATTN_EMU_DRIVER

#endif // KVATTN_TEST_UNIT_EMUDRIVERHELPER_H
