//===- Npy.h - NumPy .npy files ---------------------------------*- C++ -*-===//
//
// Reads and writes the NumPy .npy format (versions 1.0 to 3.0, C order,
// little endian) for the dtypes kvattn uses: float32, float16, float64, bool,
// int32, int64. NumPy has no bfloat16: bf16 tensors are written as float32
// (exact), and a float32 file read into a bf16 tensor is rounded to nearest
// even (`readNpyAs`).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_NPY_H
#define KVATTN_SUPPORT_NPY_H

#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"

#include <string>

namespace mlir {
namespace kvattn {

/// Reads a .npy file into a tensor of the file's own element type.
Status readNpy(const std::string &path, HostTensor &result);
/// Parses .npy bytes already in memory.
Status parseNpy(const std::string &bytes, HostTensor &result);
/// Reads a .npy file and converts it to `type`: float files may become any
/// float type (f32 -> bf16 rounds to nearest even), integer and bool files
/// any integer type. Float <-> integer is refused with an error.
Status readNpyAs(const std::string &path, ElementType type, HostTensor &result);

/// Writes a tensor; bf16 is written as float32.
Status writeNpy(const std::string &path, const HostTensor &tensor);
/// Serialises a tensor to .npy bytes; bf16 is written as float32.
std::string serializeNpy(const HostTensor &tensor);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_NPY_H
