//===- DiagnosticCollector.h - diagnostics into a string --------*- C++ -*-===//

#ifndef KVATTN_IR_DIAGNOSTICCOLLECTOR_H
#define KVATTN_IR_DIAGNOSTICCOLLECTOR_H

#include "kvattn/Support/CompilerDiagnostic.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace mlir {
namespace kvattn {

/// While alive, collects every diagnostic of `ctx`: as "location: message"
/// lines, so that a library call can return them in a Status, and one by
/// one (each note after the diagnostic it belongs to), so that a compiled
/// program can carry its warnings and remarks (CompilerDiagnostic.h). Every
/// diagnostic is handled here: none reaches an outer handler, nor MLIR's
/// default one, which would drop warnings and remarks.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext *ctx)
      : handler(ctx, [this](mlir::Diagnostic &diag) {
          {
            llvm::raw_string_ostream os(text_);
            os << diag.getLocation() << ": " << diag << "\n";
          }
          record(diag, toSeverity(diag.getSeverity()));
          // Not the operation MLIR prints with a pass's diagnostic (its
          // generic form, kept in text() for errors).
          for (mlir::Diagnostic &note : diag.getNotes())
            if (!llvm::StringRef(note.str())
                     .starts_with("see current operation: "))
              record(note, CompilerDiagnostic::Severity::Note);
          return mlir::success();
        }) {}
  const std::string &text() const { return text_; }
  const std::vector<CompilerDiagnostic> &diagnostics() const {
    return diagnostics_;
  }

private:
  static CompilerDiagnostic::Severity
  toSeverity(mlir::DiagnosticSeverity severity) {
    switch (severity) {
    case mlir::DiagnosticSeverity::Error:
      return CompilerDiagnostic::Severity::Error;
    case mlir::DiagnosticSeverity::Warning:
      return CompilerDiagnostic::Severity::Warning;
    case mlir::DiagnosticSeverity::Remark:
      return CompilerDiagnostic::Severity::Remark;
    case mlir::DiagnosticSeverity::Note:
      return CompilerDiagnostic::Severity::Note;
    }
    return CompilerDiagnostic::Severity::Error;
  }
  void record(mlir::Diagnostic &diag, CompilerDiagnostic::Severity severity) {
    CompilerDiagnostic d;
    d.severity = severity;
    // file:line:col where the location has one (possibly inside a fused,
    // named or call-site location), else MLIR's spelling of it.
    diag.getLocation()->walk([&](mlir::Location loc) {
      if (auto file = mlir::dyn_cast<mlir::FileLineColLoc>(loc)) {
        d.location = file.getFilename().str() + ":" +
                     std::to_string(file.getLine()) + ":" +
                     std::to_string(file.getColumn());
        return mlir::WalkResult::interrupt();
      }
      return mlir::WalkResult::advance();
    });
    if (d.location.empty()) {
      llvm::raw_string_ostream os(d.location);
      os << diag.getLocation();
    }
    d.message = diag.str();
    diagnostics_.push_back(std::move(d));
  }

  std::string text_;
  std::vector<CompilerDiagnostic> diagnostics_;
  mlir::ScopedDiagnosticHandler handler;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_IR_DIAGNOSTICCOLLECTOR_H
