//===- Passes.h - kvattn passes ---------------------------------*- C++ -*-===//

#ifndef KVATTN_PASSES_PASSES_H
#define KVATTN_PASSES_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace kvattn {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Patterns of -kvattn-resolve-cached-append, usable without the pass.
void populateResolveCachedAppendPatterns(RewritePatternSet &patterns,
                                         bool fixUpperLeftAppends);

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_PASSES_H
