//===- FakeCuda.cpp - a CUDA driver over host memory, for tests -----------===//

#include "FakeCuda.h"

#include "runtime/CudaApi.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>

using namespace mlir::kvattn::cuda;

namespace {

FakeCudaState state;
/// Every entry point holds it: the runtime may call the driver from several
/// threads (RuntimeThreadTest), as a real driver allows.
std::recursive_mutex mutex;
#define LOCK() std::lock_guard<std::recursive_mutex> lock(mutex)
void (*launchHook)(const FakeLaunch &, void *) = nullptr;
void *launchHookData = nullptr;
std::map<std::string, int> failures;
int dummy;
/// The stream being captured, if any, and its graph.
bool capturing = false;
uint64_t capturedStream = 0;
std::vector<FakeLaunch> *currentCapture = nullptr;

/// Returns the injected failure of `symbol`, if any.
int injected(const char *symbol) {
  auto it = failures.find(symbol);
  if (it == failures.end())
    return CUDA_SUCCESS;
  int code = it->second;
  failures.erase(it);
  return code;
}

struct Function {
  std::string name;
  int numParams;
};
std::map<CUfunction, Function> functions;
std::vector<std::unique_ptr<Function>> storage;

} // namespace

#define FAIL_IF_INJECTED(symbol)                                               \
  if (int code = injected(symbol))                                             \
  return code

namespace {
/// Page-locked host memory: start -> size, so copies can say whether their
/// source is pinned.
std::map<uintptr_t, size_t> &pinned() {
  static std::map<uintptr_t, size_t> ranges;
  return ranges;
}
bool isPinned(const void *p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  auto it = pinned().upper_bound(address);
  if (it == pinned().begin())
    return false;
  --it;
  return address < it->first + it->second;
}
} // namespace

extern "C" {

FakeCudaState *fakecuda_state() { return &state; }

void fakecuda_reset() {
  LOCK();
  state = FakeCudaState();
  launchHook = nullptr;
  launchHookData = nullptr;
  capturing = false;
  failures.clear();
}

void fakecuda_fail_next(const char *symbol, int code) {
  LOCK();
  failures[symbol] = code;
}

void fakecuda_set_launch_hook(void (*hook)(const FakeLaunch &, void *),
                              void *data) {
  LOCK();
  launchHook = hook;
  launchHookData = data;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
  LOCK();
  static const std::map<int, const char *> names = {
      {0, "CUDA_SUCCESS"},
      {1, "CUDA_ERROR_INVALID_VALUE"},
      {2, "CUDA_ERROR_OUT_OF_MEMORY"},
      {3, "CUDA_ERROR_NOT_INITIALIZED"},
      {100, "CUDA_ERROR_NO_DEVICE"},
      {101, "CUDA_ERROR_INVALID_DEVICE"},
      {218, "CUDA_ERROR_INVALID_PTX"},
      {400, "CUDA_ERROR_INVALID_HANDLE"},
      {500, "CUDA_ERROR_NOT_FOUND"},
      {999, "CUDA_ERROR_UNKNOWN"}};
  auto it = names.find(error);
  if (it == names.end())
    return 1;
  *name = it->second;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  LOCK();
  static const std::map<int, const char *> texts = {
      {0, "no error"},
      {1, "invalid argument"},
      {2, "out of memory"},
      {3, "initialization error"},
      {100, "no CUDA-capable device is detected"},
      {101, "invalid device ordinal"},
      {218, "a PTX JIT compilation failed"},
      {400, "invalid resource handle"},
      {500, "named symbol not found"},
      {999, "unknown error"}};
  auto it = texts.find(error);
  if (it == texts.end())
    return 1;
  *text = it->second;
  return CUDA_SUCCESS;
}

CUresult cuInit(unsigned) {
  LOCK();
  FAIL_IF_INJECTED("cuInit");
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  LOCK();
  FAIL_IF_INJECTED("cuDeviceGetCount");
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  LOCK();
  FAIL_IF_INJECTED("cuDeviceGet");
  if (ordinal != 0)
    return 101;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute,
                              CUdevice) {
  LOCK();
  *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
           : attribute == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
               ? state.multiprocessorCount
               : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice) {
  LOCK();
  *context = reinterpret_cast<CUcontext>(&dummy);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
/// Each stream its own handle (threads run on streams of their own).
CUresult cuStreamCreate(CUstream *stream, unsigned) {
  LOCK();
  *stream = reinterpret_cast<CUstream>(new char);
  ++state.liveStreams;
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream stream) {
  LOCK();
  delete reinterpret_cast<char *>(stream);
  --state.liveStreams;
  return CUDA_SUCCESS;
}
#define REFUSE_WHILE_CAPTURING()                                               \
  if (capturing) {                                                             \
    ++state.refusedDuringCapture;                                              \
    return 900;                                                                \
  }

CUresult cuStreamSynchronize(CUstream stream) {
  LOCK();
  FAIL_IF_INJECTED("cuStreamSynchronize");
  REFUSE_WHILE_CAPTURING();
  state.synchronizedStreams.push_back(reinterpret_cast<uintptr_t>(stream));
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
  LOCK();
  FAIL_IF_INJECTED("cuMemAlloc_v2");
  // More than the device's memory (cuMemGetInfo), or more than the host
  // gives: out of memory, as a real driver says, never a null "success".
  if (bytes > (size_t(80) << 30))
    return 2; // CUDA_ERROR_OUT_OF_MEMORY
  void *memory = std::calloc(bytes ? bytes : 1, 1);
  if (!memory)
    return 2; // CUDA_ERROR_OUT_OF_MEMORY
  *ptr = reinterpret_cast<CUdeviceptr>(memory);
  ++state.liveAllocations;
  ++state.deviceAllocationCalls;
  return CUDA_SUCCESS;
}
CUresult cuMemAllocHost_v2(void **ptr, size_t bytes) {
  LOCK();
  FAIL_IF_INJECTED("cuMemAllocHost_v2");
  *ptr = std::calloc(bytes ? bytes : 1, 1);
  if (!*ptr)
    return 2; // CUDA_ERROR_OUT_OF_MEMORY
  pinned()[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  ++state.livePinned;
  ++state.hostAllocationCalls;
  return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void *ptr) {
  LOCK();
  pinned().erase(reinterpret_cast<uintptr_t>(ptr));
  std::free(ptr);
  --state.livePinned;
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) {
  LOCK();
  std::free(reinterpret_cast<void *>(ptr));
  --state.liveAllocations;
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  LOCK();
  FAIL_IF_INJECTED("cuMemcpyHtoD_v2");
  REFUSE_WHILE_CAPTURING();
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  LOCK();
  REFUSE_WHILE_CAPTURING();
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  return CUDA_SUCCESS;
}

// Queued operations run at once (host memory); they are recorded with their
// stream.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
                              CUstream stream) {
  LOCK();
  FAIL_IF_INJECTED("cuMemcpyHtoDAsync_v2");
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  state.transfers.push_back({"HtoD", dst, reinterpret_cast<uintptr_t>(src),
                             bytes, reinterpret_cast<uintptr_t>(stream),
                             isPinned(src)});
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              CUstream stream) {
  LOCK();
  FAIL_IF_INJECTED("cuMemcpyDtoDAsync_v2");
  std::memmove(reinterpret_cast<void *>(dst),
               reinterpret_cast<const void *>(src), bytes);
  state.transfers.push_back(
      {"DtoD", dst, src, bytes, reinterpret_cast<uintptr_t>(stream)});
  state.clockMs += state.msPerCopy;
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes,
                         CUstream stream) {
  LOCK();
  FAIL_IF_INJECTED("cuMemsetD8Async");
  std::memset(reinterpret_cast<void *>(dst), value, bytes);
  state.transfers.push_back(
      {"memset", dst, value, bytes, reinterpret_cast<uintptr_t>(stream)});
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo_v2(size_t *freeBytes, size_t *totalBytes) {
  LOCK();
  *totalBytes = size_t(80) << 30;
  *freeBytes = size_t(79) << 30;
  return CUDA_SUCCESS;
}

/// An event holds the fake clock at its last record; -1: never recorded.
CUresult cuEventCreate(CUevent *event, unsigned) {
  LOCK();
  FAIL_IF_INJECTED("cuEventCreate");
  *event = reinterpret_cast<CUevent>(new double(-1));
  ++state.liveEvents;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent event) {
  LOCK();
  delete reinterpret_cast<double *>(event);
  --state.liveEvents;
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent event, CUstream) {
  LOCK();
  FAIL_IF_INJECTED("cuEventRecord");
  *reinterpret_cast<double *>(event) = state.clockMs;
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) {
  LOCK();
  FAIL_IF_INJECTED("cuEventSynchronize");
  REFUSE_WHILE_CAPTURING();
  ++state.eventSynchronizations;
  return CUDA_SUCCESS;
}
/// Work runs at once here, so every event has completed; a test makes one
/// "not ready" with fakecuda_fail_next("cuEventQuery", 600).
CUresult cuEventQuery(CUevent) {
  LOCK();
  FAIL_IF_INJECTED("cuEventQuery");
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  LOCK();
  double a = *reinterpret_cast<double *>(start),
         b = *reinterpret_cast<double *>(end);
  if (a < 0 || b < 0)
    return 400; // CUDA_ERROR_INVALID_HANDLE: an event never recorded
  *ms = static_cast<float>(b - a);
  return CUDA_SUCCESS;
}

/// Records the image; an image containing FAKE_INVALID fails with a log.
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                            unsigned numOptions, CUjit_option *options,
                            void **values) {
  LOCK();
  FAIL_IF_INJECTED("cuModuleLoadDataEx");
  std::string text(static_cast<const char *>(image));
  if (text.find("FAKE_INVALID") != std::string::npos) {
    for (unsigned i = 0; i < numOptions; ++i)
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
        std::strcpy(static_cast<char *>(values[i]),
                    "ptxas: line 1: fake syntax error");
    return 218;
  }
  ++state.moduleLoads;
  state.images.push_back(text);
  *module =
      reinterpret_cast<CUmodule>(static_cast<uintptr_t>(state.images.size()));
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }

/// Finds `.entry name(` in the module's PTX and counts its parameters.
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module,
                             const char *name) {
  LOCK();
  size_t index = reinterpret_cast<uintptr_t>(module) - 1;
  const std::string &ptx = state.images.at(index);
  std::smatch match;
  std::regex entry("\\.entry\\s+" + std::string(name) + "\\s*\\(([^)]*)\\)");
  if (!std::regex_search(ptx, match, entry))
    return 500;
  std::string params = match[1];
  int count = 0;
  for (size_t p = params.find(".param"); p != std::string::npos;
       p = params.find(".param", p + 1))
    ++count;
  storage.push_back(std::make_unique<Function>(Function{name, count}));
  *function = reinterpret_cast<CUfunction>(storage.back().get());
  functions[*function] = *storage.back();
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute,
                            int value) {
  LOCK();
  state.functionAttributes.push_back({functions.at(function).name, value});
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction function, unsigned gx, unsigned gy,
                        unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream stream, void **params,
                        void **) {
  LOCK();
  FAIL_IF_INJECTED("cuLaunchKernel");
  const Function &f = functions.at(function);
  FakeLaunch launch{f.name, {gx, gy, gz}, {bx, by, bz},
                    shared, {},           reinterpret_cast<uintptr_t>(stream)};
  state.clockMs += state.msPerLaunch;
  for (int i = 0; i < f.numParams; ++i) {
    uint64_t v;
    std::memcpy(&v, params[i], 8);
    launch.params.push_back(v);
  }
  if (capturing && launch.stream == capturedStream) {
    currentCapture->push_back(launch);
  } else {
    // The kernel "runs" now: a hook reads what it would read.
    if (launchHook)
      launchHook(launch, launchHookData);
    state.launches.push_back(launch);
  }
  return CUDA_SUCCESS;
}

// A graph is the list of launches captured on the stream.
CUresult cuStreamBeginCapture_v2(CUstream stream, int) {
  LOCK();
  FAIL_IF_INJECTED("cuStreamBeginCapture_v2");
  if (capturing || !stream)
    return 900;
  capturing = true;
  capturedStream = reinterpret_cast<uintptr_t>(stream);
  currentCapture = new std::vector<FakeLaunch>();
  ++state.captureBegins;
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  LOCK();
  FAIL_IF_INJECTED("cuStreamEndCapture");
  if (!capturing || reinterpret_cast<uintptr_t>(stream) != capturedStream)
    return 1;
  capturing = false;
  state.captured = *currentCapture;
  *graph = reinterpret_cast<CUgraph>(currentCapture);
  currentCapture = nullptr;
  ++state.captureEnds;
  return CUDA_SUCCESS;
}
/// ACTIVE for the stream being captured, NONE for the others.
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
  LOCK();
  FAIL_IF_INJECTED("cuStreamIsCapturing");
  ++state.captureQueries;
  *status = capturing && reinterpret_cast<uintptr_t>(stream) == capturedStream
                ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                     unsigned long long) {
  LOCK();
  FAIL_IF_INJECTED("cuGraphInstantiateWithFlags");
  *exec = reinterpret_cast<CUgraphExec>(new std::vector<FakeLaunch>(
      *reinterpret_cast<std::vector<FakeLaunch> *>(graph)));
  ++state.graphInstantiations;
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream) {
  LOCK();
  FAIL_IF_INJECTED("cuGraphLaunch");
  for (const FakeLaunch &l : *reinterpret_cast<std::vector<FakeLaunch> *>(exec))
    state.launches.push_back(l);
  ++state.graphLaunches;
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec exec) {
  LOCK();
  delete reinterpret_cast<std::vector<FakeLaunch> *>(exec);
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph graph) {
  LOCK();
  delete reinterpret_cast<std::vector<FakeLaunch> *>(graph);
  return CUDA_SUCCESS;
}
// The fake launches nothing, so a tensor map only has to be well-formed
// enough for the runtime's own checks: rank 1-5 and the pointers given
// (the emulated driver validates every field, GpuEmuTest).
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, int, unsigned rank,
                                void *address, const unsigned long long *dims,
                                const unsigned long long *, const unsigned *box,
                                const unsigned *strides, int, int, int, int) {
  LOCK();
  FAIL_IF_INJECTED("cuTensorMapEncodeTiled");
  if (!map || !address || !dims || !box || !strides || rank < 1 || rank > 5)
    return 1;
  std::memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}

} // extern "C"
