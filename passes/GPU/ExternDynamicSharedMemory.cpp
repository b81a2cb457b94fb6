//===- ExternDynamicSharedMemory.cpp - extern .shared for dynamic smem ----===//

#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_EXTERNDYNAMICSHAREDMEMORYPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;

namespace {

/// The NVVM address space of shared memory.
constexpr unsigned kSharedAddressSpace = 3;

struct ExternDynamicSharedMemoryPass
    : mlir::kvattn::impl::ExternDynamicSharedMemoryPassBase<
          ExternDynamicSharedMemoryPass> {
  void runOnOperation() override {
    // wgmma kernels (sm_90a) address the tiles through 128-byte-swizzle
    // matrix descriptors: the dynamic shared memory starts on a 1024-byte
    // pattern (docs/gpu-lowering.md, "Hopper (sm_90a)").
    bool wgmma = false;
    getOperation().walk([&](LLVM::InlineAsmOp op) {
      wgmma |= op.getAsmString().contains("wgmma.mma_async");
    });
    getOperation().walk([&](LLVM::GlobalOp global) {
      auto array = dyn_cast<LLVM::LLVMArrayType>(global.getGlobalType());
      bool uninitialized =
          !global.getValueOrNull() && global.getInitializerRegion().empty();
      if (global.getAddrSpace() == kSharedAddressSpace && array &&
          array.getNumElements() == 0 && uninitialized &&
          global.getLinkage() == LLVM::Linkage::Internal) {
        global.setLinkage(LLVM::Linkage::External);
        if (wgmma && global.getAlignment().value_or(0) < 1024)
          global.setAlignment(1024);
      }
    });
  }
};

} // namespace
