//===- CudaApi.h - the CUDA Driver API types kvattn uses --------*- C++ -*-===//
//
// The few CUDA Driver API types, constants and signatures the runtime uses,
// declared here so that the runtime builds without the CUDA toolkit (and
// never links libcuda: the entry points are resolved with dlsym). They are
// the stable driver ABI; test/unit/CudaAbiTest.cpp checks them against
// cuda.h when the toolkit is present.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_RUNTIME_CUDAAPI_H
#define KVATTN_RUNTIME_CUDAAPI_H

#include <cstddef>

namespace mlir {
namespace kvattn {
namespace cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
using CUcontext = CUctx_st *;
struct CUmod_st;
using CUmodule = CUmod_st *;
struct CUfunc_st;
using CUfunction = CUfunc_st *;
struct CUstream_st;
using CUstream = CUstream_st *;
struct CUevent_st;
using CUevent = CUevent_st *;
using CUjit_option = int;
using CUfunction_attribute = int;
using CUdevice_attribute = int;
struct CUgraph_st;
using CUgraph = CUgraph_st *;
struct CUgraphExec_st;
using CUgraphExec = CUgraphExec_st *;
using CUstreamCaptureMode = int;
using CUstreamCaptureStatus = int;
/// TMA tensor maps (sm_90): an opaque 128-byte object (64-byte alignment
/// required, cuda.h of CUDA 13 declares 128)
/// that cuTensorMapEncodeTiled fills; the enums are plain ints.
struct alignas(128) CUtensorMap {
  unsigned long long opaque[16];
};
using CUtensorMapDataType = int;
using CUtensorMapInterleave = int;
using CUtensorMapSwizzle = int;
using CUtensorMapL2promotion = int;
using CUtensorMapFloatOOBfill = int;
constexpr CUtensorMapDataType CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6;
constexpr CUtensorMapDataType CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7;
constexpr CUtensorMapDataType CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9;
constexpr CUtensorMapInterleave CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
constexpr CUtensorMapSwizzle CU_TENSOR_MAP_SWIZZLE_NONE = 0;
constexpr CUtensorMapSwizzle CU_TENSOR_MAP_SWIZZLE_32B = 1;
constexpr CUtensorMapSwizzle CU_TENSOR_MAP_SWIZZLE_64B = 2;
constexpr CUtensorMapSwizzle CU_TENSOR_MAP_SWIZZLE_128B = 3;
constexpr CUtensorMapL2promotion CU_TENSOR_MAP_L2_PROMOTION_NONE = 0;
constexpr CUtensorMapFloatOOBfill CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;
constexpr CUtensorMapFloatOOBfill
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr unsigned CU_EVENT_DEFAULT = 0;
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER = 3;
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES =
    8;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_NONE = 0;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_ACTIVE = 1;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2;

/// The entry points, with the symbol each is resolved from (the `_v2`
/// variants where the driver versions them). cuTensorMapEncodeTiled exists
/// from CUDA 12.0 (the drivers kvattn supports). cuEventElapsedTime stays the
/// original symbol: its `_v2` exists only in drivers of CUDA 12.8 and later.
#define KVATTN_CUDA_ENTRY_POINTS(X)                                            \
  X(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult, const char **))     \
  X(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult, const char **)) \
  X(cuInit, "cuInit", CUresult, (unsigned))                                    \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int *))                   \
  X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice *, int))                   \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult,                    \
    (int *, CUdevice_attribute, CUdevice))                                     \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult,            \
    (CUcontext *, CUdevice))                                                   \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult,       \
    (CUdevice))                                                                \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                 \
  X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream *, unsigned))        \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream))               \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))          \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr *, size_t))            \
  X(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr))                        \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult,                                 \
    (CUdeviceptr, const void *, size_t))                                       \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", CUresult, (void *, CUdeviceptr, size_t))  \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                       \
    (CUdeviceptr, const void *, size_t, CUstream))                             \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", CUresult,                       \
    (CUdeviceptr, CUdeviceptr, size_t, CUstream))                              \
  X(cuMemsetD8Async, "cuMemsetD8Async", CUresult,                              \
    (CUdeviceptr, unsigned char, size_t, CUstream))                            \
  X(cuMemGetInfo, "cuMemGetInfo_v2", CUresult, (size_t *, size_t *))           \
  X(cuMemAllocHost, "cuMemAllocHost_v2", CUresult, (void **, size_t))          \
  X(cuMemFreeHost, "cuMemFreeHost", CUresult, (void *))                        \
  X(cuEventCreate, "cuEventCreate", CUresult, (CUevent *, unsigned))           \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult, (CUevent))                  \
  X(cuEventRecord, "cuEventRecord", CUresult, (CUevent, CUstream))             \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent))             \
  X(cuEventQuery, "cuEventQuery", CUresult, (CUevent))                         \
  X(cuEventElapsedTime, "cuEventElapsedTime", CUresult,                        \
    (float *, CUevent, CUevent))                                               \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", CUresult,                        \
    (CUmodule *, const void *, unsigned, CUjit_option *, void **))             \
  X(cuModuleUnload, "cuModuleUnload", CUresult, (CUmodule))                    \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult,                      \
    (CUfunction *, CUmodule, const char *))                                    \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", CUresult,                        \
    (CUfunction, CUfunction_attribute, int))                                   \
  X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,   \
     unsigned, CUstream, void **, void **))                                    \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", CUresult,                 \
    (CUstream, CUstreamCaptureMode))                                           \
  X(cuStreamEndCapture, "cuStreamEndCapture", CUresult, (CUstream, CUgraph *)) \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", CUresult,                      \
    (CUstream, CUstreamCaptureStatus *))                                       \
  X(cuGraphInstantiate, "cuGraphInstantiateWithFlags", CUresult,               \
    (CUgraphExec *, CUgraph, unsigned long long))                              \
  X(cuGraphLaunch, "cuGraphLaunch", CUresult, (CUgraphExec, CUstream))         \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", CUresult, (CUgraphExec))         \
  X(cuGraphDestroy, "cuGraphDestroy", CUresult, (CUgraph))                     \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", CUresult,                \
    (CUtensorMap *, CUtensorMapDataType, unsigned, void *,                     \
     const unsigned long long *, const unsigned long long *, const unsigned *, \
     const unsigned *, CUtensorMapInterleave, CUtensorMapSwizzle,              \
     CUtensorMapL2promotion, CUtensorMapFloatOOBfill))

} // namespace cuda
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_RUNTIME_CUDAAPI_H
