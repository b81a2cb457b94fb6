//===- Passes.h - kvattn passes ---------------------------------*- C++ -*-===//

#ifndef KVATTN_PASSES_PASSES_H
#define KVATTN_PASSES_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace kvattn {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Patterns of -kvattn-resolve-cached-append, usable without the pass.
void populateResolveCachedAppendPatterns(RewritePatternSet &patterns,
                                         bool fixUpperLeftAppends);

/// Patterns of -kvattn-lower-append.
void populateLowerAppendPatterns(RewritePatternSet &patterns);

/// Patterns of -kvattn-lower-tile-to-loops.
void populateLowerTileToLoopsPatterns(RewritePatternSet &patterns);

/// Registers the kvattn-to-cpu pipeline.
void registerKVAttnPipelines();

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_PASSES_H
