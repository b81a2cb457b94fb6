//===- Registration.h - register everything kvattn provides ----*- C++ -*-===//
//
// One entry point for tools and embedders: kvattn-opt, kvattn-run and any
// program that wants to parse kvattn IR or run its passes call these.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_REGISTRATION_REGISTRATION_H
#define KVATTN_REGISTRATION_REGISTRATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir {
namespace kvattn {

/// Registers the kvattn dialect and the upstream dialects (and their
/// interface extensions) that kvattn's pipelines produce or consume.
void registerAllKVAttnDialects(mlir::DialectRegistry &registry);

/// Registers kvattn's passes and pipelines with the global pass registry.
void registerAllKVAttnPasses();

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_REGISTRATION_REGISTRATION_H
