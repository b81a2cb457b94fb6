//===- Support.cpp - the C API's strings, errors and parsing --------------===//
//
// kvattn_free and what every area shares: strings the caller frees, a
// Status as 1 and a message, the parser's diagnostics in errors, the
// struct_size rule's flags and image kinds.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

#include "kvattn/Registration/Registration.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir::kvattn;

char *capi::copyString(const std::string &s) {
  char *out = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

int capi::report(const Status &status, char **error) {
  if (status.isOk())
    return 0;
  if (error)
    *error = copyString(status.message());
  return 1;
}

std::unique_ptr<mlir::MLIRContext> capi::newContext() {
  mlir::DialectRegistry registry;
  registerAllKVAttnDialects(registry);
  return std::make_unique<mlir::MLIRContext>(registry);
}

Status capi::parse(const char *ir, mlir::MLIRContext &context,
                   mlir::OwningOpRef<mlir::ModuleOp> &module) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context, "input");
  if (!module)
    return Status::error("cannot parse the IR: " + diagnostics);
  return Status::ok();
}

Status capi::checkFlag(const std::string &field, int32_t value) {
  return value != 0 && value != 1
             ? Status::error(field + " = " + std::to_string(value) +
                             " is not 0 or 1")
             : Status::ok();
}

Status capi::imageKind(const char *what, int kind, DeviceImage &image) {
  if (kind != KVATTN_IMAGE_PTX && kind != KVATTN_IMAGE_DEVICE_IR)
    return Status::error(std::string(what) + ": image kind " +
                         std::to_string(kind) +
                         " is neither KVATTN_IMAGE_PTX nor "
                         "KVATTN_IMAGE_DEVICE_IR");
  image = kind == KVATTN_IMAGE_PTX ? DeviceImage::Ptx : DeviceImage::LlvmIR;
  return Status::ok();
}

extern "C" {

void kvattn_free(char *string) { std::free(string); }

} // extern "C"
