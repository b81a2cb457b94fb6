//===- HostTensor.cpp - a dense tensor in host memory ---------------------===//

#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Float16.h"
#include "kvattn/Support/Float8.h"
#include "kvattn/Support/Limits.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unistd.h>

namespace mlir {
namespace kvattn {

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F64:
    return "f64";
  case ElementType::I1:
    return "i1";
  case ElementType::I32:
    return "i32";
  case ElementType::I64:
    return "i64";
  case ElementType::F8E4M3FN:
    return "f8E4M3FN";
  case ElementType::F8E5M2:
    return "f8E5M2";
  }
  return "?";
}

std::optional<ElementType> parseElementType(const std::string &name) {
  for (ElementType t :
       {ElementType::F32, ElementType::F16, ElementType::BF16, ElementType::F64,
        ElementType::I1, ElementType::I32, ElementType::I64,
        ElementType::F8E4M3FN, ElementType::F8E5M2})
    if (name == elementTypeName(t))
      return t;
  return std::nullopt;
}

size_t elementTypeSize(ElementType type) {
  switch (type) {
  case ElementType::F16:
  case ElementType::BF16:
    return 2;
  case ElementType::F32:
  case ElementType::I32:
    return 4;
  case ElementType::F64:
  case ElementType::I64:
    return 8;
  case ElementType::I1:
  case ElementType::F8E4M3FN:
  case ElementType::F8E5M2:
    return 1;
  }
  return 1;
}

bool isFloatType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F16 ||
         type == ElementType::BF16 || type == ElementType::F64 ||
         isFp8Type(type);
}

bool isFp8Type(ElementType type) {
  return type == ElementType::F8E4M3FN || type == ElementType::F8E5M2;
}

bool fitsIn(ElementType type, int64_t value) {
  switch (type) {
  case ElementType::I1:
    return value == 0 || value == 1;
  case ElementType::I32:
    return value >= INT32_MIN && value <= INT32_MAX;
  case ElementType::I64:
    return true;
  default:
    return false;
  }
}

HostTensor::HostTensor(ElementType type, std::vector<int64_t> shape)
    : type_(type), shape_(std::move(shape)) {
  assert(limits::elementCount(shape_) && "negative or too large shape");
  bytes_.assign(static_cast<size_t>(numElements()) * elementTypeSize(type_), 0);
}

Status HostTensor::checkShape(ElementType type,
                              const std::vector<int64_t> &shape) {
  std::string spelled;
  for (int64_t d : shape)
    spelled += std::to_string(d) + "x";
  spelled += elementTypeName(type);
  std::optional<int64_t> count = limits::elementCount(shape);
  if (!count)
    return Status::error("a " + spelled + " tensor cannot be made: " +
                         (std::any_of(shape.begin(), shape.end(),
                                      [](int64_t d) { return d < 0; })
                              ? std::string("negative dimension")
                              : "more than 2^48 elements"));
  const uint64_t bytes = static_cast<uint64_t>(*count) * elementTypeSize(type);
  const long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0 &&
      bytes > static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize))
    return Status::error("a " + spelled + " tensor needs " +
                         std::to_string(bytes) +
                         " bytes, more than this machine's memory (" +
                         std::to_string(static_cast<uint64_t>(pages) *
                                        static_cast<uint64_t>(pageSize)) +
                         " bytes)");
  return Status::ok();
}

Status HostTensor::make(ElementType type, std::vector<int64_t> shape,
                        HostTensor &result) {
  KVATTN_RETURN_IF_ERROR(checkShape(type, shape));
  result = HostTensor(type, std::move(shape));
  return Status::ok();
}

Status HostTensor::view(ElementType type, std::vector<int64_t> shape,
                        const uint8_t *data, HostTensor &result) {
  KVATTN_RETURN_IF_ERROR(checkShape(type, shape));
  HostTensor t;
  t.type_ = type;
  t.shape_ = std::move(shape);
  t.externalSize_ =
      static_cast<size_t>(t.numElements()) * elementTypeSize(type);
  if (t.externalSize_ && !data)
    return Status::error("a view of a " + t.shapeString() +
                         " tensor over a null pointer");
  // An empty view still needs a non-null pointer to be a view.
  static const uint8_t empty[1] = {0};
  t.external_ = t.externalSize_ ? data : empty;
  result = std::move(t);
  return Status::ok();
}

HostTensor HostTensor::ownedCopy() const {
  if (!isView())
    return *this;
  HostTensor copy;
  copy.type_ = type_;
  copy.shape_ = shape_;
  copy.bytes_.assign(external_, external_ + externalSize_);
  return copy;
}

bool HostTensor::sharesMemoryWith(const HostTensor &other) const {
  const uint8_t *begin = data(), *end = begin + byteSize();
  const uint8_t *otherBegin = other.data(),
                *otherEnd = otherBegin + other.byteSize();
  return begin < end && otherBegin < otherEnd && begin < otherEnd &&
         otherBegin < end;
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape_)
    n *= d;
  return n;
}

std::string HostTensor::shapeString() const {
  std::string s;
  for (int64_t d : shape_)
    s += std::to_string(d) + "x";
  return s + elementTypeName(type_);
}

template <typename T> static T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T> static void store(uint8_t *p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double HostTensor::getDouble(int64_t i) const {
  const uint8_t *p = data() + i * elementTypeSize(type_);
  switch (type_) {
  case ElementType::F32:
    return load<float>(p);
  case ElementType::F16:
    return halfBitsToFloat(load<uint16_t>(p));
  case ElementType::BF16:
    return bfloat16BitsToFloat(load<uint16_t>(p));
  case ElementType::F64:
    return load<double>(p);
  case ElementType::I1:
    return *p ? 1.0 : 0.0;
  case ElementType::I32:
    return load<int32_t>(p);
  case ElementType::I64:
    return static_cast<double>(load<int64_t>(p));
  case ElementType::F8E4M3FN:
    return float8ToFloat(*p, Float8Format::E4M3FN);
  case ElementType::F8E5M2:
    return float8ToFloat(*p, Float8Format::E5M2);
  }
  return 0.0;
}

int64_t HostTensor::getInt(int64_t i) const {
  const uint8_t *p = data() + i * elementTypeSize(type_);
  switch (type_) {
  case ElementType::I1:
    return *p ? 1 : 0;
  case ElementType::I32:
    return load<int32_t>(p);
  case ElementType::I64:
    return load<int64_t>(p);
  default:
    return static_cast<int64_t>(getDouble(i));
  }
}

void HostTensor::setDouble(int64_t i, double value) {
  uint8_t *p = mutableData() + i * elementTypeSize(type_);
  switch (type_) {
  case ElementType::F32:
    return store<float>(p, static_cast<float>(value));
  case ElementType::F16:
    return store<uint16_t>(p, floatToHalfBits(static_cast<float>(value)));
  case ElementType::BF16:
    return store<uint16_t>(p, floatToBFloat16Bits(static_cast<float>(value)));
  case ElementType::F64:
    return store<double>(p, value);
  case ElementType::I1:
    *p = value != 0.0 ? 1 : 0;
    return;
  case ElementType::I32:
    return store<int32_t>(p, static_cast<int32_t>(value));
  case ElementType::I64:
    return store<int64_t>(p, static_cast<int64_t>(value));
  case ElementType::F8E4M3FN:
    *p = floatToFloat8(static_cast<float>(value), Float8Format::E4M3FN);
    return;
  case ElementType::F8E5M2:
    // A stored infinity stays one (e5m2 has them; kvattn-run --fill
    // poisons caches with it); finite values round and saturate.
    *p = std::isinf(value)
             ? (value > 0 ? 0x7c : 0xfc)
             : floatToFloat8(static_cast<float>(value), Float8Format::E5M2);
    return;
  }
}

void HostTensor::setInt(int64_t i, int64_t value) {
  uint8_t *p = mutableData() + i * elementTypeSize(type_);
  switch (type_) {
  case ElementType::I1:
    *p = value != 0 ? 1 : 0;
    return;
  case ElementType::I32:
    return store<int32_t>(p, static_cast<int32_t>(value));
  case ElementType::I64:
    return store<int64_t>(p, value);
  default:
    return setDouble(i, static_cast<double>(value));
  }
}

int64_t HostTensor::flatIndex(const std::vector<int64_t> &index) const {
  assert(index.size() == shape_.size() && "index rank mismatch");
  int64_t flat = 0;
  for (size_t d = 0; d < shape_.size(); ++d)
    flat = flat * shape_[d] + index[d];
  return flat;
}

Status HostTensor::convertTo(ElementType type, HostTensor &result) const {
  if (isFloatType(type) != isFloatType(type_))
    return Status::error(std::string("cannot convert ") +
                         elementTypeName(type_) + " to " +
                         elementTypeName(type) +
                         " (float <-> integer conversion is not allowed)");
  HostTensor converted(type, shape_);
  int64_t n = numElements();
  if (isFloatType(type)) {
    for (int64_t i = 0; i < n; ++i)
      converted.setDouble(i, getDouble(i));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = getInt(i);
      if (!fitsIn(type, v))
        return Status::error("element " + std::to_string(i) + " = " +
                             std::to_string(v) + " does not fit in " +
                             elementTypeName(type));
      converted.setInt(i, v);
    }
  }
  result = std::move(converted);
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
