//===- DiagnosticCollector.h - diagnostics into a string --------*- C++ -*-===//

#ifndef KVATTN_IR_DIAGNOSTICCOLLECTOR_H
#define KVATTN_IR_DIAGNOSTICCOLLECTOR_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir {
namespace kvattn {

/// While alive, collects every diagnostic of `ctx` as "location: message"
/// lines, so that a library call can return them in a Status.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext *ctx)
      : handler(ctx, [this](mlir::Diagnostic &diag) {
          llvm::raw_string_ostream os(text_);
          os << diag.getLocation() << ": " << diag << "\n";
          return mlir::success();
        }) {}
  const std::string &text() const { return text_; }

private:
  std::string text_;
  mlir::ScopedDiagnosticHandler handler;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_IR_DIAGNOSTICCOLLECTOR_H
