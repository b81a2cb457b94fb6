//===- CommandLine.h - MLIR's --mlir-* flags in kvattn's tools --*- C++ -*-===//
//
// kvattn-compile and kvattn-run take MLIR's own flags (--mlir-timing,
// --mlir-print-ir-after-all, --mlir-disable-threading, ...) like mlir-opt,
// and apply them to the pass managers of a compilation through the
// `configurePassManager` hook of PtxOptions and CpuCompileOptions.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_REGISTRATION_COMMANDLINE_H
#define KVATTN_REGISTRATION_COMMANDLINE_H

#include <functional>

namespace mlir {
class PassManager;
} // namespace mlir

namespace mlir {
namespace kvattn {

/// Registers the pass-manager, timing, context and printer options with
/// LLVM's command line. Call before cl::ParseCommandLineOptions, after the
/// passes are registered (--mlir-print-ir-after=PASS names passes).
void registerMLIRCommandLineOptions();

/// Whether any --mlir-* flag was given on the command line.
bool mlirFlagsGiven();

/// A `configurePassManager` hook applying the parsed flags, or an empty
/// function when none was given (compilations then keep the kernel cache).
std::function<bool(mlir::PassManager &)> mlirFlagsPassManagerHook();

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_REGISTRATION_COMMANDLINE_H
