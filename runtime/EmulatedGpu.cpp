//===- EmulatedGpu.cpp - kvattn's tools on the emulated GPU ---------------===//

#include "kvattn/Runtime/EmulatedGpu.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace mlir {
namespace kvattn {

std::string emulatedDriverPath() {
  if (const char *env = std::getenv("KVATTN_EMU_DRIVER"); env && *env)
    return env;
  Dl_info info;
  std::string self;
  if (dladdr(reinterpret_cast<void *>(&emulatedDriverPath), &info) &&
      info.dli_fname)
    self = info.dli_fname;
  // Linked into an executable run through PATH, dladdr names the
  // executable as it was typed ("kvattn-bench"): its real path then.
  if (self.find('/') == std::string::npos) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0)
      self.assign(exe, static_cast<size_t>(n));
  }
  std::string dir = self.substr(0, self.find_last_of('/') + 1);
  if (dir.empty())
    dir = "./";
  // Beside the binary (the pip package: both libraries in kvattn/), else
  // in the lib/ folder next to its bin/ or lib/ folder.
  if (access((dir + "libkvattn_cuda_emu.so").c_str(), F_OK) == 0)
    return dir + "libkvattn_cuda_emu.so";
  return dir + "../lib/libkvattn_cuda_emu.so";
}

Status EmulatedGpu::open(const std::string &path, EmulatedGpu &gpu) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return Status::error("cannot load the emulated GPU '" + path + "' (" +
                         (why ? why : "unknown dlopen error") + ")");
  }
  gpu.configure_ = reinterpret_cast<int (*)(const char *, const char *)>(
      dlsym(handle, "kvattn_emu_configure"));
  gpu.takeCounters_ = reinterpret_cast<const char *(*)()>(
      dlsym(handle, "kvattn_emu_take_counters"));
  gpu.takeReports_ = reinterpret_cast<const char *(*)()>(
      dlsym(handle, "kvattn_emu_take_reports"));
  gpu.lastError_ = reinterpret_cast<const char *(*)()>(
      dlsym(handle, "kvattn_emu_last_error"));
  if (!gpu.configure_ || !gpu.takeCounters_ || !gpu.takeReports_ ||
      !gpu.lastError_)
    return Status::error("'" + path +
                         "' is not kvattn's emulated GPU (no "
                         "kvattn_emu_* entry points)");
  return Status::ok();
}

Status EmulatedGpu::configure(const std::string &key,
                              const std::string &value) const {
  if (configure_(key.c_str(), value.c_str()) != 0)
    return Status::error("the emulated GPU refused the option " + key + "=" +
                         value + ": " + lastError_());
  return Status::ok();
}

std::string EmulatedGpu::takeCounters() const { return takeCounters_(); }
std::string EmulatedGpu::takeReports() const { return takeReports_(); }

} // namespace kvattn
} // namespace mlir
