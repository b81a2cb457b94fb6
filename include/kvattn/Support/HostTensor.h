//===- HostTensor.h - a dense tensor in host memory -------------*- C++ -*-===//
//
// The value type every non-MLIR part of kvattn passes around: the reference,
// .npy I/O, kvattn-run and the tests. Row-major, contiguous, owning (or a
// view of memory its creator owns: HostTensor::view).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_HOSTTENSOR_H
#define KVATTN_SUPPORT_HOSTTENSOR_H

#include "kvattn/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace kvattn {

/// F8E4M3FN and F8E5M2 hold the codes of an FP8 KV cache (one byte each;
/// kvattn/Support/Float8.h): getDouble decodes exactly, setDouble rounds to
/// nearest even and saturates, as bf16 and f16 round.
enum class ElementType { F32, F16, BF16, F64, I1, I32, I64, F8E4M3FN, F8E5M2 };

/// "f32", "f16", "bf16", "f64", "i1", "i32", "i64", "f8E4M3FN", "f8E5M2"
/// (MLIR spelling).
const char *elementTypeName(ElementType type);
/// Parses the MLIR spelling; std::nullopt for anything else.
std::optional<ElementType> parseElementType(const std::string &name);
/// Bytes per element (i1 is stored as one byte, 0 or 1).
size_t elementTypeSize(ElementType type);
bool isFloatType(ElementType type);
/// F8E4M3FN or F8E5M2 (float types too).
bool isFp8Type(ElementType type);
/// Whether an integer type holds `value` exactly (i1: 0 or 1; float types
/// are not integer types: false).
bool fitsIn(ElementType type, int64_t value);

class HostTensor {
public:
  HostTensor() = default;
  /// A zero-filled tensor. Every dimension must be non-negative and the
  /// size within limits (see `make` for shapes that come from users).
  HostTensor(ElementType type, std::vector<int64_t> shape);

  /// Why a tensor of this type and shape cannot be made on this host (a
  /// negative dimension, more than limits::kMaxElements elements, more bytes
  /// than the machine's memory), or ok.
  static Status checkShape(ElementType type, const std::vector<int64_t> &shape);
  /// `result` = a zero-filled tensor, after checkShape.
  static Status make(ElementType type, std::vector<int64_t> shape,
                     HostTensor &result);
  /// `result` = a tensor over `data` (row-major, the shape's size), after
  /// checkShape: no copy. The caller keeps that memory alive and unchanged
  /// while the view (or a copy of it: copies share the memory) is used.
  /// A view is read-only memory: the first write to it (mutableData,
  /// setDouble, setInt) gives the tensor its own copy first, so that no
  /// write through a HostTensor reaches the caller's memory.
  static Status view(ElementType type, std::vector<int64_t> shape,
                     const uint8_t *data, HostTensor &result);
  /// Whether this tensor is a view of memory it does not own.
  bool isView() const { return external_ != nullptr; }
  /// A copy that owns its memory, a view's too.
  HostTensor ownedCopy() const;
  /// Whether the two tensors' bytes overlap (an empty tensor shares none).
  bool sharesMemoryWith(const HostTensor &other) const;

  ElementType elementType() const { return type_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i]; }
  int64_t numElements() const;
  /// "2x8x4x64xf16" (MLIR tensor spelling without `tensor<>`).
  std::string shapeString() const;

  /// Element `i` (flat row-major index) as a double / as an integer. Floats
  /// are read exactly; integer reads of floats truncate, which callers avoid.
  double getDouble(int64_t i) const;
  int64_t getInt(int64_t i) const;
  /// Stores a value, rounding to nearest even for f16/bf16/f32 (a view
  /// takes its own copy first: mutableData).
  void setDouble(int64_t i, double value);
  void setInt(int64_t i, int64_t value);

  /// Row-major flat index of a multi-index.
  int64_t flatIndex(const std::vector<int64_t> &index) const;

  /// Raw storage (bf16/f16 as their 16-bit patterns, i1 as bytes), to read.
  const uint8_t *data() const { return external_ ? external_ : bytes_.data(); }
  /// Raw storage to write: a view first becomes a tensor that owns a copy
  /// of its bytes (copy-on-write), so the memory it viewed is never
  /// written.
  uint8_t *mutableData() {
    if (external_)
      *this = ownedCopy();
    return bytes_.data();
  }
  size_t byteSize() const { return external_ ? externalSize_ : bytes_.size(); }

  /// A copy with another element type, converting each element (rounding to
  /// nearest even when narrowing floats). Float <-> integer conversion is
  /// refused.
  Status convertTo(ElementType type, HostTensor &result) const;

private:
  ElementType type_ = ElementType::F32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
  /// A view's memory (HostTensor::view), null for an owning tensor.
  const uint8_t *external_ = nullptr;
  size_t externalSize_ = 0;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_HOSTTENSOR_H
