//===- CAPI.h - what the C API's files share --------------------*- C++ -*-===//
//
// The C API (include/kvattn-c/KVAttn.h) is implemented one file per area:
//   Support.cpp     strings, the error convention, parsing, struct_size
//   Options.cpp     kvattn_compile_options: defaults, reading, conversions
//   Compile.cpp     kvattn_compile*: IR to a device image and its manifest
//   CpuProgram.cpp  kvattn_cpu_*: compile once, run on host tensors
//   Runtime.cpp     kvattn_runtime_*: the driver, streams, memory, graphs,
//                   call counts
//   Launch.cpp      kvattn_launch, kvattn_kernel_*: one manifest kernel
//   Plan.cpp        kvattn_plan_*, kvattn_attention_desc_*: serving
// This header declares what several of them use. Everything here is internal:
// hidden in libkvattn_c.so, whose exported symbols are the C API's.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_LIB_CAPI_CAPI_H
#define KVATTN_LIB_CAPI_CAPI_H

#include "kvattn-c/KVAttn.h"

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Support/Status.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Compiler.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

/// A runtime handle: the runtime and the device it was created for (plans,
/// kernels and graphs point back to it).
struct kvattn_runtime {
  std::unique_ptr<mlir::kvattn::rt::Runtime> runtime;
  int device = 0;
};

namespace mlir::kvattn {
namespace LLVM_LIBRARY_VISIBILITY_NAMESPACE capi {

//===----------------------------------------------------------------------===//
// Strings, errors, parsing (Support.cpp)
//===----------------------------------------------------------------------===//

/// `s` in memory the caller releases with kvattn_free.
char *copyString(const std::string &s);

/// 0 on success; else sets *error (when wanted) and returns 1.
int report(const Status &status, char **error);

/// A context with the kvattn dialects and those they lower to.
std::unique_ptr<MLIRContext> newContext();

/// Parses `ir` into `module`; errors carry the parser's diagnostics.
Status parse(const char *ir, MLIRContext &context,
             OwningOpRef<ModuleOp> &module);

/// A 0/1 field: `field` names it ("prefix: options.tensor_cores").
Status checkFlag(const std::string &field, int32_t value);

/// A caller's struct_size-versioned struct over `out` (its defaults): the
/// first struct_size bytes are the caller's (an older header has fewer
/// fields), the rest keep their defaults. `what` names it in errors
/// ("options", "desc"), `init` is its initialiser, `minimum` the fewest
/// bytes a caller may give.
template <typename T>
Status readVersioned(const std::string &what, const char *init, size_t minimum,
                     const T &given, T &out) {
  if (given.struct_size < minimum)
    return Status::error(what + ".struct_size is " +
                         std::to_string(given.struct_size) + ": set it with " +
                         init + " (sizeof = " + std::to_string(sizeof(T)) +
                         ")");
  if (given.struct_size > sizeof(T))
    return Status::error(
        what + ".struct_size is " + std::to_string(given.struct_size) +
        ", larger than this library's " + std::to_string(sizeof(T)) +
        " (a header newer than the library)");
  std::memcpy(&out, &given, given.struct_size);
  out.struct_size = sizeof(T);
  return Status::ok();
}

/// The value a C caller stored in an enum (a field or a parameter), read as
/// an integer: C allows any int there, and loading a C++ enum outside its
/// enumerators' range is undefined.
template <typename Enum> int rawEnum(const Enum &value) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &value, sizeof raw);
  return static_cast<int>(raw);
}

/// The device image a caller's kvattn_image_kind (read with rawEnum) names;
/// an error naming `what` for any other value.
Status imageKind(const char *what, int kind, DeviceImage &image);

//===----------------------------------------------------------------------===//
// Compile options (Options.cpp)
//===----------------------------------------------------------------------===//

/// The caller's options over the defaults (the struct_size rule), each field
/// range-checked; errors start with `what`. Null: the defaults.
Status readOptions(const char *what, const kvattn_compile_options *given,
                   kvattn_compile_options &options);

/// The GPU compiler's options of checked C options, for `image`.
PtxOptions toPtxOptions(const kvattn_compile_options &o, DeviceImage image);

/// The CPU compiler's options of checked C options.
CpuCompileOptions toCpuOptions(const kvattn_compile_options &o);

//===----------------------------------------------------------------------===//
// Launch arguments (Launch.cpp)
//===----------------------------------------------------------------------===//

/// The runtime's sizes of the C struct.
rt::Sizes toSizes(const kvattn_sizes &s);

/// The launch arguments of the C structs: null arrays, null names and
/// names given twice are errors, not crashes or a silent "last wins".
Status launchArgs(const char *what, kvattn_sizes sizes,
                  const kvattn_buffer *buffers, size_t num_buffers,
                  const kvattn_metadata *metadata, size_t num_metadata,
                  rt::LaunchArgs &args);

} // namespace capi
} // namespace mlir::kvattn

#endif // KVATTN_LIB_CAPI_CAPI_H
