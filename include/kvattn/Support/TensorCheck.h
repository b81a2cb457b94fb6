//===- TensorCheck.h - a tensor against a function type ---------*- C++ -*-===//
//
// The checks every entry point that takes tensors for a function runs before
// it uses them (CpuProgram::run, evaluateFunction and validateFunction, the
// C API's kvattn_cpu_run), with one set of messages: the element type, the
// rank, every static dimension, and i1 elements that are 0 or 1. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_TENSORCHECK_H
#define KVATTN_SUPPORT_TENSORCHECK_H

#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
namespace kvattn {

/// The type a tensor must have: its element type, its dims (-1: dynamic,
/// any size), and its spelling for messages ("tensor<?x4x8x64xf32>").
struct ExpectedTensor {
  ElementType type;
  std::vector<int64_t> shape;
  std::string spelled;
};

/// Checks a tensor of `type` and `shape` against `want`: "<what> is
/// 2x4x8xf16, but tensor<2x4x8xf32> has element type f32", "... (rank 3),
/// but ... has rank 4", "..., but ... has 8 at dim 2".
Status checkTensorType(const std::string &what, ElementType type,
                       const std::vector<int64_t> &shape,
                       const ExpectedTensor &want);

/// checkTensorType on `t`, then (i1) every byte 0 or 1: "<what> (i1) holds 2
/// at element 5: i1 bytes are 0 or 1".
Status checkTensor(const std::string &what, const HostTensor &t,
                   const ExpectedTensor &want);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_TENSORCHECK_H
