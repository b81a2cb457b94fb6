//===- KVAttn.cpp - the kvattn C API --------------------------------------===//

#include "kvattn-c/KVAttn.h"

#include "kvattn/Registration/Registration.h"
#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <cstring>

using mlir::kvattn::Status;

struct kvattn_runtime {
  std::unique_ptr<mlir::kvattn::rt::Runtime> runtime;
};

struct kvattn_kernel {
  mlir::kvattn::rt::Runtime *runtime;
  const mlir::kvattn::rt::Module *module;
  mlir::kvattn::rt::KernelInfo info;
};

static char *copyString(const std::string &s) {
  char *out = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

/// 0 on success; else sets *error (when wanted) and returns 1.
static int report(const Status &status, char **error) {
  if (status.isOk())
    return 0;
  if (error)
    *error = copyString(status.message());
  return 1;
}

/// Compiles `ir` to a device image (PTX or the emulator's LLVM IR).
static int compile(const char *what, mlir::kvattn::DeviceImage image,
                   const char *ir, const char *chip, char **ptx,
                   char **manifest_json, char **error) {
  if (!ir || !ptx || !manifest_json)
    return report(Status::error(std::string(what) + ": null argument"), error);
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(ir, &context, "input");
  if (!module)
    return report(Status::error("cannot parse the IR: " + diagnostics), error);
  mlir::kvattn::PtxOptions options;
  if (chip)
    options.chip = chip;
  options.image = image;
  mlir::kvattn::PtxModule result;
  if (int failed =
          report(mlir::kvattn::compileToPtx(*module, options, result), error))
    return failed;
  *ptx = copyString(result.ptx);
  *manifest_json = copyString(mlir::kvattn::manifestToJson(
      result,
      image == mlir::kvattn::DeviceImage::Ptx ? "kernel.ptx" : "kernel.ll"));
  return 0;
}

extern "C" {

void kvattn_free(char *string) { std::free(string); }

int kvattn_compile_to_ptx(const char *ir, const char *chip, char **ptx,
                          char **manifest_json, char **error) {
  return compile("kvattn_compile_to_ptx", mlir::kvattn::DeviceImage::Ptx, ir,
                 chip, ptx, manifest_json, error);
}

int kvattn_compile_to_device_ir(const char *ir, const char *chip, char **image,
                                char **manifest_json, char **error) {
  return compile("kvattn_compile_to_device_ir",
                 mlir::kvattn::DeviceImage::LlvmIR, ir, chip, image,
                 manifest_json, error);
}

int kvattn_runtime_create(kvattn_runtime **runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_create: null argument"), error);
  auto rt = std::make_unique<kvattn_runtime>();
  if (int failed =
          report(mlir::kvattn::rt::Runtime::create(rt->runtime), error))
    return failed;
  *runtime = rt.release();
  return 0;
}

void kvattn_runtime_destroy(kvattn_runtime *runtime) { delete runtime; }

int kvattn_runtime_set_stream(kvattn_runtime *runtime, uint64_t stream,
                              char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_set_stream: null runtime"),
                  error);
  runtime->runtime->setStream(stream);
  return 0;
}

int kvattn_runtime_use_own_stream(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_use_own_stream: null runtime"),
                  error);
  runtime->runtime->useOwnStream();
  return 0;
}

int kvattn_runtime_reserve_metadata(kvattn_runtime *runtime, size_t bytes,
                                    char **error) {
  if (!runtime)
    return report(
        Status::error("kvattn_runtime_reserve_metadata: null runtime"), error);
  return report(runtime->runtime->reserveMetadata(bytes), error);
}

int kvattn_device_alloc(kvattn_runtime *runtime, size_t bytes,
                        uint64_t *device_ptr, char **error) {
  if (!runtime || !device_ptr)
    return report(Status::error(std::string("kvattn_device_alloc: null ") +
                                (runtime ? "device_ptr" : "runtime")),
                  error);
  return report(runtime->runtime->allocate(bytes, *device_ptr), error);
}

int kvattn_device_free(kvattn_runtime *runtime, uint64_t device_ptr,
                       char **error) {
  if (!runtime)
    return report(Status::error("kvattn_device_free: null runtime"), error);
  return report(runtime->runtime->release(device_ptr), error);
}

int kvattn_copy_to_device(kvattn_runtime *runtime, uint64_t dst,
                          const void *src, size_t bytes, char **error) {
  if (!runtime || (!src && bytes))
    return report(Status::error(std::string("kvattn_copy_to_device: null ") +
                                (runtime ? "src" : "runtime")),
                  error);
  return report(runtime->runtime->copyToDevice(dst, src, bytes), error);
}

int kvattn_copy_to_host(kvattn_runtime *runtime, void *dst, uint64_t src,
                        size_t bytes, char **error) {
  if (!runtime || (!dst && bytes))
    return report(Status::error(std::string("kvattn_copy_to_host: null ") +
                                (runtime ? "dst" : "runtime")),
                  error);
  return report(runtime->runtime->copyToHost(dst, src, bytes), error);
}

int kvattn_synchronize(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_synchronize: null runtime"), error);
  return report(runtime->runtime->synchronize(), error);
}

/// The launch arguments of the C structs: null arrays, null names and
/// names given twice are errors, not crashes or a silent "last wins".
static Status launchArgs(const char *what, kvattn_sizes sizes,
                         const kvattn_buffer *buffers, size_t num_buffers,
                         const kvattn_metadata *metadata, size_t num_metadata,
                         mlir::kvattn::rt::LaunchArgs &args) {
  args = mlir::kvattn::rt::LaunchArgs();
  args.sizes = {sizes.B, sizes.Hq, sizes.Hkv, sizes.L, sizes.S};
  args.sizes.numPages = sizes.num_pages;
  args.sizes.pageSize = sizes.page_size;
  args.sizes.maxPages = sizes.max_pages;
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

int kvattn_launch(kvattn_runtime *runtime, const char *ptx,
                  const char *manifest_json, size_t kernel_index,
                  kvattn_sizes sizes, const kvattn_buffer *buffers,
                  size_t num_buffers, const kvattn_metadata *metadata,
                  size_t num_metadata, char **error) {
  if (!runtime || !ptx || !manifest_json)
    return report(Status::error("kvattn_launch: null argument"), error);
  mlir::kvattn::rt::Manifest manifest;
  if (int failed = report(
          mlir::kvattn::rt::parseManifest(manifest_json, manifest), error))
    return failed;
  if (kernel_index >= manifest.kernels.size())
    return report(Status::error("kvattn_launch: kernel index " +
                                std::to_string(kernel_index) +
                                " is out of range (the manifest has " +
                                std::to_string(manifest.kernels.size()) + ")"),
                  error);
  mlir::kvattn::rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_launch", sizes, buffers,
                                     num_buffers, metadata, num_metadata, args),
                          error))
    return failed;
  const mlir::kvattn::rt::Module *module;
  if (int failed = report(runtime->runtime->loadModule(ptx, module), error))
    return failed;
  return report(
      runtime->runtime->launch(*module, manifest.kernels[kernel_index], args),
      error);
}

int kvattn_kernel_load(kvattn_runtime *runtime, const char *ptx,
                       const char *manifest_json, size_t kernel_index,
                       kvattn_kernel **kernel, char **error) {
  if (!runtime || !ptx || !manifest_json || !kernel)
    return report(Status::error("kvattn_kernel_load: null argument"), error);
  mlir::kvattn::rt::Manifest manifest;
  if (int failed = report(
          mlir::kvattn::rt::parseManifest(manifest_json, manifest), error))
    return failed;
  if (kernel_index >= manifest.kernels.size())
    return report(Status::error("kvattn_kernel_load: kernel index " +
                                std::to_string(kernel_index) +
                                " is out of range (the manifest has " +
                                std::to_string(manifest.kernels.size()) + ")"),
                  error);
  auto k = std::make_unique<kvattn_kernel>();
  k->runtime = runtime->runtime.get();
  k->info = manifest.kernels[kernel_index];
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
  mlir::kvattn::rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_kernel_launch", sizes, buffers,
                                     num_buffers, metadata, num_metadata, args),
                          error))
    return failed;
  return report(kernel->runtime->launch(*kernel->module, kernel->info, args),
                error);
}

void kvattn_kernel_destroy(kvattn_kernel *kernel) { delete kernel; }

} // extern "C"
