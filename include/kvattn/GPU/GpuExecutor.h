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
class ModuleOp;
class Operation;
namespace func {
class FuncOp;
} // namespace func
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

  /// Runs `op` (a kvattn.attention, or a kvattn.append: the cache write
  /// kernel of -kvattn-append-to-gpu) on `operands`.
  Status run(mlir::Operation *op,
             const std::vector<const HostTensor *> &operands,
             std::vector<HostTensor> &results);

  /// Between beginFunction() and endFunction() the ops of one function run
  /// on device-resident values: an SSA value is uploaded once, a result
  /// stays in its device buffer, and a kvattn.append writes its cache's
  /// buffer in place when the cache value has no other use (as One-Shot
  /// Bufferize does on the CPU path; otherwise into a device copy), so the
  /// attention that follows reads the updated cache with no host round
  /// trip. A result is copied to the host only when an op other than
  /// kvattn.append/attention uses it (func.return, tensor.concat); the
  /// host tensors of the other results are left unfilled. Every op runs
  /// in order on the runtime's one stream. The ops passed to run() must
  /// all belong to one function that outlives endFunction(), which frees
  /// the device buffers.
  void beginFunction();
  Status endFunction();

  rt::Runtime &runtime() { return *runtime_; }

  /// false (the default): each op is compiled for its operands' concrete
  /// shapes. true: compiled once with the op's own types, dynamic
  /// dimensions kept, as a serving engine compiles: one kernel for every
  /// shape, the split-KV chunk count chosen by the runtime per launch
  /// (docs/runtime.md, "Run-time split-KV").
  void setKeepDynamicShapes(bool keep) { keepDynamicShapes_ = keep; }

  /// Runs all of `func` through one plan of its own module, as an engine
  /// runs a serving step it planned (kvattn_plan_create over the step's
  /// IR, compiled with its own types): the function's body must be
  /// kvattn.append ops and one kvattn.attention or kvattn.cascade (a decode
  /// or prefill step writing its new tokens, then attending), and their
  /// return. The plan's bounds are the run's B, L and S plus `slack` (at
  /// least 1); it runs `runs` times, each into outputs first filled with
  /// all-ones bytes (NaN: a slot the kernels leave unwritten shows), with
  /// the metadata in device buffers of the manifest's element types
  /// (Device: Plan::run, validated on the device) or on the host (Host:
  /// Plan::runWithHostMetadata); then the status word is read, and a
  /// recorded violation is the error. Buffers are bound by name as the C
  /// API binds them (planBufferNames: an append into the attention's key
  /// writes `key` from `update_k`), the caches written in place. `results`
  /// are the function's: an append's is its cache after the step. Every
  /// append's sizes must be the attention's (a plan runs with one set of
  /// sizes).
  enum class PlanMetadata { Device, Host };
  Status runFunctionThroughPlan(func::FuncOp func,
                                const std::vector<HostTensor> &args,
                                std::vector<HostTensor> &results,
                                PlanMetadata metadata, int64_t slack = 0,
                                int64_t runs = 1);
  /// Whether runFunctionThroughPlan takes `func` (the body above).
  static bool isPlannableFunction(func::FuncOp func);

private:
  struct Compiled {
    std::string ptx;
    rt::Manifest manifest;
  };
  PtxOptions options_;
  bool keepDynamicShapes_ = false;
  std::unique_ptr<rt::Runtime> runtime_;
  std::map<std::string, Compiled> cache_; // by the printed single-op module
  /// beginFunction(): device buffers by SSA value (Value's opaque
  /// pointer), and every buffer allocated until endFunction().
  bool resident_ = false;
  std::map<const void *, rt::DevicePtr> values_;
  std::vector<rt::DevicePtr> owned_;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_GPU_GPUEXECUTOR_H
