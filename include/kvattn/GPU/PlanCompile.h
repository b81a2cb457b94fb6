//===- PlanCompile.h - compile and plan -------------------------*- C++ -*-===//
//
// rt::Plan (the runtime, no MLIR) runs what was compiled; these compile it:
// every kernel of a module with device validation (or from the kernel
// cache), loaded as a plan for shape bounds. planModule is the C API's
// kvattn_plan_create; planAttention builds the module of an
// AttentionDescription first (kvattn_plan_create_from_desc), so the two
// plan the same IR the same way.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_GPU_PLANCOMPILE_H
#define KVATTN_GPU_PLANCOMPILE_H

#include "kvattn/Runtime/Plan.h"
#include "kvattn/Target/AttentionDescription.h"
#include "kvattn/Passes/PtxOptions.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
namespace kvattn {

/// The buffer names of a plan's kernels (rt::Plan::create's `names`): the
/// n-th append kernel of the manifest is the n-th kvattn.append of
/// `module`; one whose result is an attention's key binds `update` to
/// `update_k` and `cache` to `key` (the cache it writes in place is the
/// key the attention reads), one whose result is the value `update_v` and
/// `value`. Empty maps when the counts differ.
std::vector<std::map<std::string, std::string>>
planBufferNames(ModuleOp module, const rt::Manifest &manifest);

/// Compiles `module` with `options` and device validation, loads it on
/// `runtime` and plans it for `bounds`; `manifestJson` (optional) receives
/// the launch manifest (image file "plan.ptx" or "plan.ll"). A module with
/// more than one public function, or more than one attention, is refused by
/// name (a plan has one buffer namespace).
Status planModule(rt::Runtime &runtime, ModuleOp module, PtxOptions options,
                  const rt::Sizes &bounds, std::unique_ptr<rt::Plan> &plan,
                  std::string *manifestJson = nullptr);

/// buildAttentionModule, then planModule.
Status planAttention(rt::Runtime &runtime,
                     const AttentionDescription &description,
                     const PtxOptions &options, const rt::Sizes &bounds,
                     std::unique_ptr<rt::Plan> &plan,
                     std::string *manifestJson = nullptr);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_GPU_PLANCOMPILE_H
