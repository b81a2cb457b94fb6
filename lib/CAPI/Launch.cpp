//===- Launch.cpp - the C API's kernel launches ---------------------------===//
//
// kvattn_launch and kvattn_kernel_*: one kernel of a launch manifest loaded
// and launched with the caller's sizes, buffers and host metadata (validated
// by the runtime first); the C structs' launch arguments, which plans use too.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

using namespace mlir::kvattn;
using namespace mlir::kvattn::capi;

struct kvattn_kernel {
  rt::Runtime *runtime;
  const rt::Module *module;
  rt::KernelInfo info;
};

rt::Sizes capi::toSizes(const kvattn_sizes &s) {
  rt::Sizes sizes{s.B, s.Hq, s.Hkv, s.L, s.S};
  sizes.numPages = s.num_pages;
  sizes.pageSize = s.page_size;
  sizes.maxPages = s.max_pages;
  sizes.cacheRows = s.cache_rows;
  sizes.P = s.P;
  sizes.prefixNumPages = s.prefix_num_pages;
  sizes.prefixPageSize = s.prefix_page_size;
  sizes.prefixMaxPages = s.prefix_max_pages;
  return sizes;
}

Status capi::launchArgs(const char *what, kvattn_sizes sizes,
                        const kvattn_buffer *buffers, size_t num_buffers,
                        const kvattn_metadata *metadata, size_t num_metadata,
                        rt::LaunchArgs &args) {
  args = rt::LaunchArgs();
  args.sizes = toSizes(sizes);
  const std::string prefix = std::string(what) + ": ";
  if (num_buffers && !buffers)
    return Status::error(prefix + "null buffers array with num_buffers = " +
                         std::to_string(num_buffers));
  if (num_metadata && !metadata)
    return Status::error(prefix + "null metadata array with num_metadata = " +
                         std::to_string(num_metadata));
  for (size_t i = 0; i < num_buffers; ++i) {
    if (!buffers[i].name)
      return Status::error(prefix + "buffers[" + std::to_string(i) +
                           "] has a null name");
    if (!args.buffers.emplace(buffers[i].name, buffers[i].device_ptr).second)
      return Status::error(prefix + "buffer '" + buffers[i].name +
                           "' is given twice");
  }
  for (size_t i = 0; i < num_metadata; ++i) {
    const kvattn_metadata &m = metadata[i];
    if (!m.name)
      return Status::error(prefix + "metadata[" + std::to_string(i) +
                           "] has a null name");
    if (!m.values && m.count)
      return Status::error(prefix + "metadata '" + m.name +
                           "' has null values with count " +
                           std::to_string(m.count));
    if (args.metadata.count(m.name))
      return Status::error(prefix + "metadata '" + m.name + "' is given twice");
    args.metadata[m.name] = std::vector<int64_t>(m.values, m.values + m.count);
  }
  return Status::ok();
}

/// Kernel `index` of the manifest `json` in `info`; errors start with `what`.
static Status manifestKernel(const char *what, const char *json, size_t index,
                             rt::KernelInfo &info) {
  rt::Manifest manifest;
  KVATTN_RETURN_IF_ERROR(rt::parseManifest(json, manifest));
  if (index >= manifest.kernels.size())
    return Status::error(std::string(what) + ": kernel index " +
                         std::to_string(index) +
                         " is out of range (the manifest has " +
                         std::to_string(manifest.kernels.size()) + ")");
  info = manifest.kernels[index];
  return Status::ok();
}

extern "C" {

int kvattn_launch(kvattn_runtime *runtime, const char *ptx,
                  const char *manifest_json, size_t kernel_index,
                  kvattn_sizes sizes, const kvattn_buffer *buffers,
                  size_t num_buffers, const kvattn_metadata *metadata,
                  size_t num_metadata, char **error) {
  if (!runtime || !ptx || !manifest_json)
    return report(Status::error("kvattn_launch: null argument"), error);
  rt::KernelInfo info;
  if (int failed = report(
          manifestKernel("kvattn_launch", manifest_json, kernel_index, info),
          error))
    return failed;
  rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_launch", sizes, buffers,
                                     num_buffers, metadata, num_metadata, args),
                          error))
    return failed;
  const rt::Module *module;
  if (int failed = report(runtime->runtime->loadModule(ptx, module), error))
    return failed;
  return report(runtime->runtime->launch(*module, info, args), error);
}

int kvattn_kernel_load(kvattn_runtime *runtime, const char *ptx,
                       const char *manifest_json, size_t kernel_index,
                       kvattn_kernel **kernel, char **error) {
  if (!runtime || !ptx || !manifest_json || !kernel)
    return report(Status::error("kvattn_kernel_load: null argument"), error);
  rt::KernelInfo info;
  if (int failed = report(manifestKernel("kvattn_kernel_load", manifest_json,
                                         kernel_index, info),
                          error))
    return failed;
  auto k = std::make_unique<kvattn_kernel>();
  k->runtime = runtime->runtime.get();
  k->info = std::move(info);
  if (int failed = report(k->runtime->loadModule(ptx, k->module), error))
    return failed;
  *kernel = k.release();
  return 0;
}

int kvattn_kernel_launch(kvattn_kernel *kernel, kvattn_sizes sizes,
                         const kvattn_buffer *buffers, size_t num_buffers,
                         const kvattn_metadata *metadata, size_t num_metadata,
                         char **error) {
  if (!kernel)
    return report(Status::error("kvattn_kernel_launch: null kernel"), error);
  rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_kernel_launch", sizes, buffers,
                                     num_buffers, metadata, num_metadata, args),
                          error))
    return failed;
  return report(kernel->runtime->launch(*kernel->module, kernel->info, args),
                error);
}

void kvattn_kernel_destroy(kvattn_kernel *kernel) { delete kernel; }

} // extern "C"
