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

TEST(CudaAbi, ResultCodes) {
  // The static_asserts above are the real checks (a mismatch does not
  // compile); the runtime's result codes are plain ints.
  EXPECT_EQ(k::CUDA_SUCCESS, static_cast<int>(CUDA_SUCCESS));
  EXPECT_EQ(sizeof(k::CUresult), sizeof(CUresult));
}
