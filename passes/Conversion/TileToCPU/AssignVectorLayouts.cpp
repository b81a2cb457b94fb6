//===- AssignVectorLayouts.cpp - the CPU tiles' vector layouts as IR ------===//
//
// -kvattn-assign-vector-layouts (Passes.td): the width and form each tile of
// a CPU tile program is vectorised in, written as #kvattn.vector_layout for
// -kvattn-lower-tile-to-vectors to obey (docs/cpu-lowering.md, "Vector
// layouts").
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/Passes.h"
#include "passes/Conversion/TileToCPU/VectorLayouts.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/TargetParser/Host.h"

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_ASSIGNVECTORLAYOUTSPASS
#include "kvattn/Passes/Passes.h.inc"
} // namespace kvattn
} // namespace mlir

using namespace mlir;
using namespace mlir::kvattn;

int64_t mlir::kvattn::hostVectorWidth() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  if (features.lookup("avx512f"))
    return 16;
  if (features.lookup("avx"))
    return 8;
  return 4;
}

/// The widest power of two up to `maxWidth` that divides `extent`.
static int64_t widestDividing(int64_t extent, int64_t maxWidth) {
  int64_t w = 1;
  while (w * 2 <= maxWidth && extent % (w * 2) == 0)
    w *= 2;
  return w;
}

LogicalResult mlir::kvattn::assignVectorLayouts(Operation *root,
                                                int64_t maxWidth,
                                                int64_t fewRows) {
  if (maxWidth < 1 || maxWidth > 16 || (maxWidth & (maxWidth - 1)))
    return root->emitError()
           << "kvattn-assign-vector-layouts: vector-width must be 0 (the "
              "host's) or a power of two from 1 to 16, got "
           << maxWidth;
  if (fewRows < 0 || fewRows > 64)
    return root->emitError()
           << "kvattn-assign-vector-layouts: few-rows must be 0 to 64, got "
           << fewRows;
  MLIRContext *ctx = root->getContext();
  // Every tile's layout from its first use; later uses must agree.
  llvm::MapVector<Value, std::pair<VectorLayoutAttr, Operation *>> chosen;
  WalkResult walk = root->walk([&](Operation *op) {
    for (const VectorTileUse &use : vectorTileUses(op)) {
      if (getVectorLayout(use.tile))
        continue; // an earlier pass's or an embedder's: kept (and checked
                  // by the lowering)
      int64_t extent = vectorAxisExtent(use.tile, use.axis);
      assert(!ShapedType::isDynamic(extent) &&
             "the tile ops' verifiers require tiles of static shape");
      auto layout =
          VectorLayoutAttr::get(ctx, use.axis, widestDividing(extent, maxWidth),
                                use.axis == VectorAxis::rows ? fewRows : 0);
      auto [it, inserted] = chosen.try_emplace(use.tile, layout, op);
      if (!inserted && it->second.first != layout) {
        InFlightDiagnostic diag =
            op->emitOpError()
            << "kvattn-assign-vector-layouts: this op uses its " << use.role
            << " tile as " << layout << ", an earlier op as "
            << it->second.first;
        diag.attachNote(it->second.second->getLoc()) << "the earlier use";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  for (auto &[tile, entry] : chosen) {
    if (failed(setVectorLayout(tile, entry.first)))
      return entry.second->emitOpError()
             << "kvattn-assign-vector-layouts: a tile is an op's result or a "
                "function's argument, this one is neither";
  }
  return success();
}

namespace {

struct AssignVectorLayoutsPass
    : mlir::kvattn::impl::AssignVectorLayoutsPassBase<AssignVectorLayoutsPass> {
  using Base::Base;
  void runOnOperation() override {
    // 0: the host's widest (the other values are checked with the rest).
    const int64_t width = vectorWidth == 0 ? hostVectorWidth() : vectorWidth;
    if (failed(assignVectorLayouts(getOperation(), width, fewRows)))
      signalPassFailure();
  }
};

} // namespace
