//===- DeviceValidation.h - status word, validation kernels -----*- C++ -*-===//
//
// -kvattn-device-validation (docs/kernel-abi.md, "The status word"): for
// metadata that lives on the device (a serving plan's run, a CUDA graph)
// every kernel of @kvattn_kernels takes one more pointer, `status`
// (i64[16], after the other pointers), and computes and writes nothing
// when status[0] != 0; every kernel that reads metadata gets a validation
// kernel `<name>_validate` (kind "validate") that checks the metadata on
// the device against the runtime's rules and records the first violation
// in the status word. Runs after the kernels are built (the end of
// buildKVAttnToGpuKernelsPipeline with PtxOptions::deviceValidation).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_DEVICEVALIDATION_H
#define KVATTN_PASSES_DEVICEVALIDATION_H

#include "kvattn/Support/StatusWord.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace mlir {
namespace kvattn {

/// -kvattn-device-validation (declared in Passes.td, registered with the
/// other passes) with `indexBitwidth` (32 or 64): the index width
/// -kvattn-gpu-to-nvvm gives the kernels; with 32 the validation kernels
/// also refuse offsets and positions that give a position of 2^31 - 1 or
/// more (the runtime's rule for 32-bit kernels, runtime/Validation.cpp;
/// kIndex32PositionLimit). createDeviceValidationPass(const
/// DeviceValidationPassOptions &) is declared in Passes.h.
std::unique_ptr<Pass> createDeviceValidationPass(unsigned indexBitwidth);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_DEVICEVALIDATION_H
