//===- TensorMaps.cpp - TMA tensor maps of a launch -----------------------===//
//
// The cuTensorMapEncodeTiled arguments of a `tensor_maps` parameter's maps
// (docs/kernel-abi.md, "Tensor maps"), derived from the launch's sizes and
// buffers and checked here, so that every error names the map and the field
// rather than being the driver's bare CUDA_ERROR_INVALID_VALUE.
//
//===----------------------------------------------------------------------===//

#include "CudaApi.h"
#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Support/Decimal.h"

#include <cctype>

namespace mlir {
namespace kvattn {
namespace rt {

bool TensorMapArgs::operator==(const TensorMapArgs &o) const {
  if (dataType != o.dataType || rank != o.rank || address != o.address ||
      swizzle != o.swizzle || oobFill != o.oobFill || empty != o.empty)
    return false;
  for (unsigned i = 0; i < 5; ++i)
    if (dims[i] != o.dims[i] || box[i] != o.box[i] ||
        (i < 4 && strides[i] != o.strides[i]))
      return false;
  return true;
}

Status tensorMapArguments(const KernelInfo &kernel, const TensorMapInfo &map,
                          const Sizes &sizes,
                          const std::map<std::string, DevicePtr> &buffers,
                          TensorMapArgs &args) {
  using namespace cuda;
  const std::string where = "launch of '" + kernel.name + "': tensor map '" +
                            map.name + "' (buffer '" + map.buffer + "'): ";
  auto str = [](uint64_t v) { return std::to_string(v); };
  const ParamInfo *buffer = nullptr;
  for (const ParamInfo &p : kernel.params)
    if (p.kind == "pointer" && p.name == map.buffer)
      buffer = &p;
  if (!buffer) // parseManifest refuses it; a hand-built KernelInfo may not.
    return Status::error(where + "no pointer parameter of that name");
  auto ptr = buffers.find(map.buffer);
  if (ptr == buffers.end() || ptr->second == 0)
    return Status::error(where + "no device buffer given for '" + map.buffer +
                         "'");
  if (ptr->second % 16)
    return Status::error(where + "the buffer's address " + str(ptr->second) +
                         " is not 16-byte aligned (a tensor map's base must "
                         "be)");
  args = TensorMapArgs();
  args.address = ptr->second;
  args.rank = static_cast<unsigned>(map.dims.size());
  args.dataType = map.elementType == "f16"    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                  : map.elementType == "bf16" ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                              : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const uint64_t elementBytes = map.elementType == "f32" ? 4 : 2;
  args.swizzle = map.swizzleBytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                 : map.swizzleBytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                 : map.swizzleBytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                          : CU_TENSOR_MAP_SWIZZLE_NONE;
  args.oobFill = map.nanFill ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                             : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;

  // The buffer's sizes and dense row-major byte strides.
  const size_t rank = buffer->shape.size();
  std::vector<uint64_t> size(rank), stride(rank);
  for (size_t d = 0; d < rank; ++d) {
    const std::string &dim = buffer->shape[d];
    int64_t v;
    if (!dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0]))) {
      std::optional<int64_t> parsed = parseDecimal(dim);
      v = parsed ? *parsed : -1;
    } else {
      v = sizeByName(sizes, dim);
    }
    if (v < 0)
      return Status::error(where + "buffer dimension " + str(d) + " ('" + dim +
                           "') has no size");
    size[d] = static_cast<uint64_t>(v);
  }
  uint64_t running = elementBytes;
  for (size_t d = rank; d-- > 0;) {
    stride[d] = running;
    if (size[d] && __builtin_mul_overflow(running, size[d], &running))
      return Status::error(where + "the buffer's byte size overflows 64 bits");
  }
  std::vector<bool> used(rank, false);
  for (unsigned i = 0; i < args.rank; ++i) {
    const int d = map.dims[i];
    used[d] = true;
    const std::string field = "dimension " + str(i) + " (buffer dimension " +
                              str(d) + ", '" + buffer->shape[d] + "')";
    if (size[d] == 0)
      args.empty = true;
    if (size[d] > (uint64_t(1) << 32))
      return Status::error(where + field + ": size " + str(size[d]) +
                           " is above 2^32");
    args.dims[i] = size[d];
    args.box[i] = map.box[i];
    if (i == 0) {
      if (stride[d] != elementBytes)
        return Status::error(where + field +
                             ": the innermost map dimension must be "
                             "contiguous (stride " +
                             str(stride[d]) + " bytes, not one element)");
      continue;
    }
    if (stride[d] % 16)
      return Status::error(where + field + ": stride of " + str(stride[d]) +
                           " bytes is not a multiple of 16");
    if (stride[d] >= (uint64_t(1) << 40))
      return Status::error(where + field + ": stride of " + str(stride[d]) +
                           " bytes is 2^40 or more");
    args.strides[i - 1] = stride[d];
  }
  for (size_t d = 0; d < rank; ++d)
    if (!used[d] && size[d] != 1)
      return Status::error(where + "buffer dimension " + str(d) + " ('" +
                           buffer->shape[d] +
                           "') is not in the map, so its "
                           "size must be 1, not " +
                           str(size[d]));
  return Status::ok();
}

} // namespace rt
} // namespace kvattn
} // namespace mlir
