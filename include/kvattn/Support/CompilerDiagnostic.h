//===- CompilerDiagnostic.h - a compiler diagnostic as plain data -*- C++ -*-=//
//
// What the compiler said while it compiled (the lint of
// -kvattn-resolve-cached-append, remarks of the fixes it applied): returned
// on every compiled program (CpuProgram::diagnostics, PtxModule::diagnostics,
// the C API, the manifest's "diagnostics"), so that an embedding without a
// diagnostic handler of its own cannot lose them. Plain C++: the runtime and
// the kernel cache carry them without MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_COMPILERDIAGNOSTIC_H
#define KVATTN_SUPPORT_COMPILERDIAGNOSTIC_H

#include <string>

namespace mlir {
namespace kvattn {

struct CompilerDiagnostic {
  /// The values of kvattn_diagnostic_severity (kvattn-c/KVAttn.h).
  enum class Severity { Error = 0, Warning = 1, Remark = 2, Note = 3 };
  Severity severity = Severity::Warning;
  /// Where, as MLIR prints a location ("input":12:8, or loc(unknown)).
  std::string location;
  std::string message;

  static const char *severityName(Severity severity) {
    switch (severity) {
    case Severity::Error:
      return "error";
    case Severity::Warning:
      return "warning";
    case Severity::Remark:
      return "remark";
    case Severity::Note:
      return "note";
    }
    return "error";
  }
  /// "LOCATION: SEVERITY: MESSAGE", as mlir-opt prints one.
  std::string str() const {
    return location + ": " + severityName(severity) + ": " + message;
  }
  bool operator==(const CompilerDiagnostic &other) const {
    return severity == other.severity && location == other.location &&
           message == other.message;
  }
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_COMPILERDIAGNOSTIC_H
