//===- PlanCompile.cpp - compile and plan, from IR or a description -------===//

#include "kvattn/GPU/PlanCompile.h"

#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

namespace mlir {
namespace kvattn {

std::vector<std::map<std::string, std::string>>
planBufferNames(ModuleOp module, const rt::Manifest &manifest) {
  std::vector<std::map<std::string, std::string>> names(
      manifest.kernels.size());
  std::vector<std::map<std::string, std::string>> appends;
  module.walk([&](AppendOp append) {
    std::map<std::string, std::string> bind;
    for (Operation *user : append->getUsers()) {
      // The attention that reads the cache: a kvattn.attention, or a
      // kvattn.sdpa that the compilation resolves into one (the module is
      // the caller's, not the compiled copy).
      Value key, value;
      if (auto attention = dyn_cast<AttentionOp>(user)) {
        key = attention.getKey();
        value = attention.getValue();
      } else if (auto sdpa = dyn_cast<SdpaOp>(user)) {
        key = sdpa.getKey();
        value = sdpa.getValue();
      } else {
        continue;
      }
      // An FP8 cache's append names its scales k_scale: the V append's
      // are the attention's v_scale.
      if (key == append.getResult())
        bind = {{"update", "update_k"}, {"cache", "key"}};
      else if (value == append.getResult())
        bind = {
            {"update", "update_v"}, {"cache", "value"}, {"k_scale", "v_scale"}};
      break;
    }
    appends.push_back(bind);
  });
  std::vector<size_t> appendKernels;
  for (size_t i = 0; i < manifest.kernels.size(); ++i)
    if (manifest.kernels[i].kind == "append")
      appendKernels.push_back(i);
  if (appendKernels.size() != appends.size())
    return names;
  for (size_t n = 0; n < appends.size(); ++n)
    names[appendKernels[n]] = appends[n];
  return names;
}

Status planModule(rt::Runtime &runtime, ModuleOp module, PtxOptions options,
                  const rt::Sizes &bounds, std::unique_ptr<rt::Plan> &plan,
                  std::string *manifestJson) {
  options.deviceValidation = true;
  // One buffer namespace per plan: the kernels of two public functions
  // would bind the same names (query, out, ...). Refused before compiling.
  std::vector<std::string> publics;
  module.walk([&](func::FuncOp f) {
    if (f.isPublic() && !f.isExternal())
      publics.push_back(f.getSymName().str());
  });
  if (publics.size() > 1)
    return Status::error(
        "planning: the module has " + std::to_string(publics.size()) +
        " public functions (@" + publics[0] + ", @" + publics[1] +
        (publics.size() > 2 ? ", ..." : "") +
        "): a plan runs the kernels of one function and binds their buffers "
        "by name; plan each function from its own module");
  PtxModule compiled;
  KVATTN_RETURN_IF_ERROR(compileToPtx(module, options, compiled));
  rt::Manifest manifest;
  KVATTN_RETURN_IF_ERROR(
      rt::parseManifest(manifestToJson(compiled, "plan"), manifest));
  if (manifestJson)
    *manifestJson = manifestToJson(
        compiled, options.image == DeviceImage::Ptx ? "plan.ptx" : "plan.ll");
  std::vector<std::map<std::string, std::string>> names =
      planBufferNames(module, manifest);
  // Two appends bound to one cache buffer would write the same memory (the
  // second update over the first): refuse what the names cannot tell apart.
  std::map<std::string, std::string> writer;
  for (size_t i = 0; i < manifest.kernels.size(); ++i) {
    const rt::KernelInfo &k = manifest.kernels[i];
    if (k.kind != "append")
      continue;
    auto bound = names[i].find("cache");
    const std::string cache =
        bound == names[i].end() ? std::string("cache") : bound->second;
    auto [it, fresh] = writer.emplace(cache, k.name);
    if (!fresh)
      return Status::error(
          "planning: the appends '" + it->second + "' and '" + k.name +
          "' would both write the buffer '" + cache +
          "': a plan binds buffers by name, and an append is told apart only "
          "when its result is the key or the value of an attention of the "
          "module (kvattn.attention or kvattn.sdpa)");
  }
  return rt::Plan::create(runtime, compiled.ptx, manifest, bounds, plan, names);
}

Status planAttention(rt::Runtime &runtime,
                     const AttentionDescription &description,
                     const PtxOptions &options, const rt::Sizes &bounds,
                     std::unique_ptr<rt::Plan> &plan,
                     std::string *manifestJson) {
  DialectRegistry registry;
  registerAllKVAttnDialects(registry);
  MLIRContext context(registry);
  OwningOpRef<ModuleOp> module;
  KVATTN_RETURN_IF_ERROR(buildAttentionModule(description, context, module));
  return planModule(runtime, *module, options, bounds, plan, manifestJson);
}

} // namespace kvattn
} // namespace mlir
