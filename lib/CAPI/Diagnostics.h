//===- Diagnostics.h - the C API's diagnostics, internal --------*- C++ -*-===//
//
// What lib/CAPI/Diagnostics.cpp needs of the C API's objects, defined
// beside them.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_LIB_CAPI_DIAGNOSTICS_H
#define KVATTN_LIB_CAPI_DIAGNOSTICS_H

#include "kvattn-c/KVAttn.h"
#include "kvattn/CPU/CpuRunner.h"

namespace kvattn {
namespace capi {

/// The compiled program of a (non-null) kvattn_cpu_program.
const mlir::kvattn::CpuProgram &cpuProgram(const kvattn_cpu_program &program);

} // namespace capi
} // namespace kvattn

#endif // KVATTN_LIB_CAPI_DIAGNOSTICS_H
