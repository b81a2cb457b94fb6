//===- EmulatedGpu.h - kvattn's tools on the emulated GPU -------*- C++ -*-===//
//
// The emulated GPU is a CUDA driver library (libkvattn_cuda_emu.so, see
// kvattn/GpuEmu/EmuDriver.h) that the runtime opens like libcuda. This
// finds it next to the calling binary and reaches its own entry points
// (options, counters, reports) through dlsym.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_RUNTIME_EMULATEDGPU_H
#define KVATTN_RUNTIME_EMULATEDGPU_H

#include "kvattn/Support/Status.h"

#include <string>

namespace mlir {
namespace kvattn {

/// $KVATTN_EMU_DRIVER, else libkvattn_cuda_emu.so in the lib/ folder next
/// to the bin/ or lib/ folder of the binary that holds this code (the build
/// tree and the install tree have the same layout).
std::string emulatedDriverPath();

class EmulatedGpu {
public:
  /// Opens (or finds already open) the emulated driver at `path`.
  static Status open(const std::string &path, EmulatedGpu &gpu);

  /// kvattn_emu_configure: "fault", "fail-on-report", "print-reports".
  Status configure(const std::string &key, const std::string &value) const;
  /// The "emu: ..." counter lines of the launches since the last call.
  std::string takeCounters() const;
  /// The memcheck/racecheck reports since the last call.
  std::string takeReports() const;

private:
  int (*configure_)(const char *, const char *) = nullptr;
  const char *(*takeCounters_)() = nullptr;
  const char *(*takeReports_)() = nullptr;
  const char *(*lastError_)() = nullptr;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_RUNTIME_EMULATEDGPU_H
