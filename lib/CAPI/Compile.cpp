//===- Compile.cpp - the C API's compilers to a device image --------------===//
//
// kvattn_compile (every option, PTX or the emulator's LLVM IR) and the first
// API's kvattn_compile_to_ptx / kvattn_compile_to_device_ir (a chip alone):
// IR text in, the image and its launch manifest (JSON) out.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

using namespace mlir::kvattn;
using namespace mlir::kvattn::capi;

/// Compiles `ir` to a device image (PTX or the emulator's LLVM IR).
static int compile(const char *what, DeviceImage image, const char *ir,
                   const kvattn_compile_options *given, char **ptx,
                   char **manifest_json, char **error) {
  if (!ir || !ptx || !manifest_json)
    return report(Status::error(std::string(what) + ": null argument"), error);
  kvattn_compile_options o;
  if (int failed = report(readOptions(what, given, o), error))
    return failed;
  std::unique_ptr<mlir::MLIRContext> context = newContext();
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (int failed = report(parse(ir, *context, module), error))
    return failed;
  PtxModule result;
  if (int failed =
          report(compileToPtx(*module, toPtxOptions(o, image), result), error))
    return failed;
  *ptx = copyString(result.ptx);
  *manifest_json = copyString(manifestToJson(
      result, image == DeviceImage::Ptx ? "kernel.ptx" : "kernel.ll"));
  return 0;
}

/// The chip alone, as the compile functions of the first API take it.
static kvattn_compile_options chipOnly(const char *chip) {
  kvattn_compile_options options;
  kvattn_compile_options_init(&options);
  options.chip = chip;
  return options;
}

extern "C" {

int kvattn_compile(const char *ir, const kvattn_compile_options *options,
                   kvattn_image_kind kind, char **image, char **manifest_json,
                   char **error) {
  DeviceImage deviceImage;
  if (int failed = report(
          imageKind("kvattn_compile", rawEnum(kind), deviceImage), error))
    return failed;
  return compile("kvattn_compile", deviceImage, ir, options, image,
                 manifest_json, error);
}

int kvattn_compile_to_ptx(const char *ir, const char *chip, char **ptx,
                          char **manifest_json, char **error) {
  kvattn_compile_options options = chipOnly(chip);
  return compile("kvattn_compile_to_ptx", DeviceImage::Ptx, ir, &options, ptx,
                 manifest_json, error);
}

int kvattn_compile_to_device_ir(const char *ir, const char *chip, char **image,
                                char **manifest_json, char **error) {
  kvattn_compile_options options = chipOnly(chip);
  return compile("kvattn_compile_to_device_ir", DeviceImage::LlvmIR, ir,
                 &options, image, manifest_json, error);
}

} // extern "C"
