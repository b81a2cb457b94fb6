//===- TensorCheck.cpp - a caller's tensor against a function type --------===//

#include "kvattn/Support/TensorCheck.h"

namespace mlir {
namespace kvattn {

static std::string spell(ElementType type, const std::vector<int64_t> &shape) {
  std::string out;
  for (int64_t d : shape)
    out += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return out + elementTypeName(type);
}

Status checkTensorType(const std::string &what, ElementType type,
                       const std::vector<int64_t> &shape,
                       const ExpectedTensor &want) {
  const std::string given = spell(type, shape);
  if (type != want.type)
    return Status::error(what + " is " + given + ", but " + want.spelled +
                         " has element type " + elementTypeName(want.type));
  if (shape.size() != want.shape.size())
    return Status::error(what + " is " + given + " (rank " +
                         std::to_string(shape.size()) + "), but " +
                         want.spelled + " has rank " +
                         std::to_string(want.shape.size()));
  for (size_t d = 0; d < shape.size(); ++d)
    if (want.shape[d] >= 0 && shape[d] != want.shape[d])
      return Status::error(what + " is " + given + ", but " + want.spelled +
                           " has " + std::to_string(want.shape[d]) +
                           " at dim " + std::to_string(d));
  return Status::ok();
}

Status checkTensor(const std::string &what, const HostTensor &t,
                   const ExpectedTensor &want) {
  KVATTN_RETURN_IF_ERROR(
      checkTensorType(what, t.elementType(), t.shape(), want));
  if (t.elementType() == ElementType::I1)
    for (size_t b = 0; b < t.byteSize(); ++b)
      if (t.data()[b] > 1)
        return Status::error(what + " (i1) holds " +
                             std::to_string(t.data()[b]) + " at element " +
                             std::to_string(b) + ": i1 bytes are 0 or 1");
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
