//===- GpuExecutor.h - run kvattn.attention on a GPU ------------*- C++ -*-===//
//
// Compiles one kvattn.attention with its run-time shapes (kvattn-to-ptx),
// loads the PTX through the runtime and launches it on host tensors:
// copy in, launch, copy out. The PTX of each distinct op and shape is
// compiled once. Used by kvattn-run --target=gpu.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_GPU_GPUEXECUTOR_H
#define KVATTN_GPU_GPUEXECUTOR_H

#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"
#include "kvattn/Target/Ptx.h"

#include <map>
#include <memory>
#include <vector>

namespace mlir {
class Operation;
} // namespace mlir

namespace mlir {
namespace kvattn {

class GpuExecutor {
public:
  /// Opens the driver (an error says why not, e.g. no driver installed).
  /// With options.image == DeviceImage::LlvmIR the kernels run on the
  /// emulated GPU (libkvattn_cuda_emu.so, kvattn/Runtime/EmulatedGpu.h) unless
  /// `runtimeOptions` names another driver library.
  static Status create(const PtxOptions &options,
                       std::unique_ptr<GpuExecutor> &executor,
                       rt::RuntimeOptions runtimeOptions = {});
  ~GpuExecutor();

  /// Runs `attention` (a kvattn.attention) on `operands`.
  Status run(mlir::Operation *attention,
             const std::vector<const HostTensor *> &operands,
             std::vector<HostTensor> &results);

  rt::Runtime &runtime() { return *runtime_; }

private:
  struct Compiled {
    std::string ptx;
    rt::Manifest manifest;
  };
  PtxOptions options_;
  std::unique_ptr<rt::Runtime> runtime_;
  std::map<std::string, Compiled> cache_; // by the printed single-op module
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_GPU_GPUEXECUTOR_H
