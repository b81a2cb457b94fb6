//===- CudaAbiTest.cpp - runtime/CudaApi.h against cuda.h
//-----------------===//
//
// Built only when cuda.h is found: the runtime declares the driver types
// and constants itself (it must build without the toolkit); this checks
// them against the real header.
//
//===----------------------------------------------------------------------===//

#include "runtime/CudaApi.h"

#include <cuda.h>

#include "gtest/gtest.h"

namespace k = mlir::kvattn::cuda;

static_assert(sizeof(k::CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
static_assert(sizeof(k::CUdevice) == sizeof(CUdevice), "CUdevice");
static_assert(k::CU_JIT_INFO_LOG_BUFFER == CU_JIT_INFO_LOG_BUFFER, "");
static_assert(k::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ==
                  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
              "");
static_assert(k::CU_JIT_ERROR_LOG_BUFFER == CU_JIT_ERROR_LOG_BUFFER, "");
static_assert(k::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES ==
                  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
              "");
static_assert(k::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ==
                  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
              "");
static_assert(k::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ==
                  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
              "");
static_assert(k::CU_EVENT_DEFAULT == CU_EVENT_DEFAULT, "");
static_assert(k::CU_STREAM_CAPTURE_MODE_GLOBAL == CU_STREAM_CAPTURE_MODE_GLOBAL,
              "");
static_assert(k::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ==
                  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
              "");
static_assert(k::CU_STREAM_CAPTURE_STATUS_NONE == CU_STREAM_CAPTURE_STATUS_NONE,
              "");
static_assert(k::CU_STREAM_CAPTURE_STATUS_ACTIVE ==
                  CU_STREAM_CAPTURE_STATUS_ACTIVE,
              "");
static_assert(k::CU_STREAM_CAPTURE_STATUS_INVALIDATED ==
                  CU_STREAM_CAPTURE_STATUS_INVALIDATED,
              "");
static_assert(k::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ==
                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
              "");
static_assert(k::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ==
                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
              "");

static_assert(sizeof(k::CUtensorMap) == sizeof(CUtensorMap), "CUtensorMap");
static_assert(alignof(k::CUtensorMap) == alignof(CUtensorMap), "CUtensorMap");
static_assert(k::CU_TENSOR_MAP_DATA_TYPE_FLOAT16 ==
                  CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
              "");
static_assert(k::CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ==
                  CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
              "");
static_assert(k::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ==
                  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
              "");
static_assert(k::CU_TENSOR_MAP_INTERLEAVE_NONE == CU_TENSOR_MAP_INTERLEAVE_NONE,
              "");
static_assert(k::CU_TENSOR_MAP_SWIZZLE_32B == CU_TENSOR_MAP_SWIZZLE_32B, "");
static_assert(k::CU_TENSOR_MAP_SWIZZLE_64B == CU_TENSOR_MAP_SWIZZLE_64B, "");
static_assert(k::CU_TENSOR_MAP_SWIZZLE_128B == CU_TENSOR_MAP_SWIZZLE_128B, "");
static_assert(k::CU_TENSOR_MAP_L2_PROMOTION_NONE ==
                  CU_TENSOR_MAP_L2_PROMOTION_NONE,
              "");
static_assert(k::CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA ==
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
              "");
static_assert(sizeof(cuuint64_t) == sizeof(unsigned long long), "cuuint64_t");
static_assert(sizeof(cuuint32_t) == sizeof(unsigned), "cuuint32_t");

TEST(CudaAbi, ResultCodes) {
  // The static_asserts above are the real checks (a mismatch does not
  // compile); the runtime's result codes are plain ints.
  EXPECT_EQ(k::CUDA_SUCCESS, static_cast<int>(CUDA_SUCCESS));
  EXPECT_EQ(sizeof(k::CUresult), sizeof(CUresult));
}
