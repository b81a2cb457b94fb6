//===- VerifyTarget.cpp - the chips kvattn can generate code for ----------===//

#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/TargetParser/Triple.h"

#include <memory>
#include <mutex>

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_VERIFYTARGETPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTargetMC();

using namespace mlir;

std::string mlir::kvattn::unsupportedChipReason(llvm::StringRef chip) {
  static constexpr int64_t kMinimum = 80;
  llvm::StringRef digits = chip;
  unsigned sm = 0;
  if (!digits.consume_front("sm_") || digits.empty() ||
      !std::isdigit(static_cast<unsigned char>(digits.front())))
    return "'" + chip.str() + "' is not a chip name like sm_80 or sm_90a";
  digits = digits.take_while([](char c) { return std::isdigit(c); });
  if (digits.getAsInteger(10, sm) || sm < kMinimum)
    return "'" + chip.str() +
           "' is older than sm_80: kvattn's kernels need mma.sync m16n8k16, "
           "ldmatrix and cp.async (sm_80 or newer)";
  static std::once_flag initialised;
  std::call_once(initialised, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
  });
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return "LLVM has no NVPTX back end: " + error;
  // The generic subtarget: creating one for an unknown chip would print a
  // warning; its table of chips answers the question.
  std::unique_ptr<llvm::MCSubtargetInfo> info(
      target->createMCSubtargetInfo(triple, "", ""));
  if (!info || !info->isCPUStringValid(chip))
    return "'" + chip.str() + "' is not a chip LLVM's NVPTX back end knows";
  // sm_90a selects the wgmma lowering (docs/gpu-lowering.md, "Hopper");
  // sm_90 and the other chips the mma.sync kernels.
  return "";
}

int64_t mlir::kvattn::maxSharedMemoryPerBlock(llvm::StringRef chip) {
  llvm::StringRef digits = chip;
  unsigned sm = 0;
  if (!digits.consume_front("sm_") ||
      digits.take_while([](char c) { return std::isdigit(c); })
          .getAsInteger(10, sm))
    return 0;
  // The opt-in maximum per block (CUDA C Programming Guide, "Technical
  // Specifications per Compute Capability").
  switch (sm) {
  case 80:
  case 87:
    return 163 * 1024;
  case 90:
  case 100:
  case 101:
  case 103:
  case 110:
    return 227 * 1024;
  default: // 8.6, 8.9, 12.x and chips not listed: the smallest of sm_80+
    return 99 * 1024;
  }
}

namespace {

struct VerifyTargetPass
    : mlir::kvattn::impl::VerifyTargetPassBase<VerifyTargetPass> {
  using Base::Base;

  void runOnOperation() override {
    if (checkChip) {
      std::string why = mlir::kvattn::unsupportedChipReason(chip);
      if (!why.empty()) {
        getOperation().emitError()
            << "cannot generate code for chip '" << chip << "': " << why;
        signalPassFailure();
      }
      return;
    }
    getOperation().walk([&](gpu::GPUModuleOp module) {
      ArrayAttr targets = module.getTargetsAttr();
      if (!targets)
        return;
      for (Attribute attr : targets) {
        auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(attr);
        if (!nvvm)
          continue;
        std::string why = mlir::kvattn::unsupportedChipReason(nvvm.getChip());
        if (!why.empty()) {
          module.emitError() << "cannot generate code for chip '"
                             << nvvm.getChip() << "': " << why;
          signalPassFailure();
          continue;
        }
        const int64_t limit =
            mlir::kvattn::maxSharedMemoryPerBlock(nvvm.getChip());
        module.walk([&](gpu::GPUFuncOp kernel) {
          auto bytes =
              kernel->getAttrOfType<IntegerAttr>("kvattn.dynamic_smem_bytes");
          if (!bytes || bytes.getInt() <= limit)
            return;
          kernel.emitError()
              << "kernel '" << kernel.getName() << "' needs " << bytes.getInt()
              << " bytes of shared memory per block; " << nvvm.getChip()
              << " allows " << limit
              << " (use smaller block-m / block-n, or fewer stages)";
          signalPassFailure();
        });
      }
    });
  }
};

} // namespace
