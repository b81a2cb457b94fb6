//===- Runtime.cpp - load kvattn PTX and launch it (CUDA Driver API) ------===//

#include "kvattn/Runtime/Runtime.h"

#include "CudaApi.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace mlir {
namespace kvattn {
namespace rt {

using namespace cuda;

//===----------------------------------------------------------------------===//
// The driver: dlopen + dlsym
//===----------------------------------------------------------------------===//

class Driver {
public:
#define KVATTN_DECLARE(name, symbol, ret, params) ret(*name) params = nullptr;
  KVATTN_CUDA_ENTRY_POINTS(KVATTN_DECLARE)
#undef KVATTN_DECLARE
  bool emulated = false; ///< the driver is kvattn's emulated GPU

  static Status open(const std::string &path, std::unique_ptr<Driver> &out) {
    std::unique_ptr<Driver> d(new Driver());
    d->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!d->handle_) {
      const char *why = dlerror();
      return Status::error(
          "no CUDA driver: cannot load '" + path + "' (" +
          (why ? why : "unknown dlopen error") +
          "); kvattn needs an NVIDIA driver to launch kernels (set "
          "KVATTN_LIBCUDA to use another library)");
    }
#define KVATTN_RESOLVE(name, symbol, ret, params)                              \
  d->name = reinterpret_cast<ret(*) params>(dlsym(d->handle_, symbol));        \
  if (!d->name)                                                                \
    return Status::error("the CUDA driver '" + path +                          \
                         "' has no entry point "                               \
                         "'" symbol "'");
    KVATTN_CUDA_ENTRY_POINTS(KVATTN_RESOLVE)
#undef KVATTN_RESOLVE
    // kvattn's emulated GPU (lib/GpuEmu) exports its own configuration hook.
    d->emulated = dlsym(d->handle_, "kvattn_emu_configure") != nullptr;
    out = std::move(d);
    return Status::ok();
  }

  ~Driver() {
    if (handle_)
      dlclose(handle_);
  }

  /// An error naming what the runtime was doing and the driver's error.
  Status check(CUresult result, const std::string &doing) const {
    if (result == CUDA_SUCCESS)
      return Status::ok();
    const char *name = nullptr, *text = nullptr;
    if (cuGetErrorName(result, &name) != CUDA_SUCCESS)
      name = nullptr;
    if (cuGetErrorString(result, &text) != CUDA_SUCCESS)
      text = nullptr;
    return Status::error(doing + " failed: " + (name ? name : "CUDA error") +
                         " (" + std::to_string(result) +
                         "): " + (text ? text : "no description"));
  }

private:
  Driver() = default;
  void *handle_ = nullptr;
};

//===----------------------------------------------------------------------===//
// Modules
//===----------------------------------------------------------------------===//

class Module {
public:
  CUmodule handle = nullptr;
  /// Functions looked up so far (under the runtime's mutex).
  std::unordered_map<std::string, CUfunction> functions;
};

/// The metadata of one launch (every host-given metadata parameter, each at
/// a 16-byte aligned offset), on the device and in its page-locked host
/// staging, and the event recorded after the last launch that read it.
struct MetadataSlot {
  DevicePtr device = 0;
  void *host = nullptr;
  size_t capacity = 0;
  CUevent done = nullptr;
  /// An event was recorded and may not have completed.
  bool pending = false;
  /// Launches between their copy (or reuse) of the slot and the event
  /// after them: while non-zero nobody rewrites the slot.
  int users = 0;
  /// What the slot holds, and the stream its copy was queued on.
  std::vector<uint8_t> bytes;
  CUstream stream = nullptr;
};

/// Metadata slots in flight: a launch whose metadata changed takes the next
/// free slot, and waits only if that slot's last launch (kMetadataSlots
/// launches ago) has not finished.
constexpr size_t kMetadataSlots = 8;
/// The smallest slot: a decode step's offsets and lengths for a few hundred
/// sequences.
constexpr size_t kMinMetadataBytes = 4096;

namespace {
/// Driver calls, counted from any thread.
struct AtomicCounts {
  std::atomic<int64_t> launches{0}, graphLaunches{0}, synchronizations{0},
      allocations{0}, synchronousCopies{0}, asyncCopies{0};
};
} // namespace

struct Runtime::Impl {
  std::unique_ptr<Driver> driver;
  CUdevice device = 0;
  CUcontext context = nullptr;
  /// The runtime's own stream, and the one in use (own or the caller's).
  CUstream stream = nullptr;
  std::atomic<CUstream> current{nullptr};
  /// Guards `modules`, every module's function cache and `allocations`.
  std::mutex mutex;
  /// PTX text -> module; the text itself is the key, so equal hashes of
  /// different texts cannot alias.
  std::unordered_map<std::string, std::unique_ptr<Module>> modules;
  /// Guards the ring (`slots`, `lastSlot`); `slotFree` tells waiters that a
  /// slot's users dropped to 0. Lock order: ringMutex, then mutex.
  std::mutex ringMutex;
  std::condition_variable slotFree;
  /// The metadata of the last kMetadataSlots launches (a ring), and the
  /// slot of the last one (-1: none yet).
  std::array<MetadataSlot, kMetadataSlots> slots;
  int lastSlot = -1;
  /// Host waits for a slot (a full ring) since creation.
  std::atomic<int64_t> metadataWaits{0};
  /// Driver calls (callCounts()).
  AtomicCounts counts;
  /// What allocate() returned and release() has not freed, with sizes: a
  /// release of anything else is refused instead of reaching the driver.
  std::unordered_map<DevicePtr, size_t> allocations;
  /// The buffer timeOnStream fills to evict the L2 cache (one timing at a
  /// time: flushMutex).
  std::mutex flushMutex;
  DevicePtr flush = 0;
  size_t flushBytes = 0;

  ~Impl() {
    if (!driver)
      return;
    if (CUstream s = current.load())
      driver->cuStreamSynchronize(s);
    for (MetadataSlot &slot : slots) {
      if (slot.device)
        driver->cuMemFree(slot.device);
      if (slot.host)
        driver->cuMemFreeHost(slot.host);
      if (slot.done)
        driver->cuEventDestroy(slot.done);
    }
    if (flush)
      driver->cuMemFree(flush);
    for (auto &entry : modules)
      driver->cuModuleUnload(entry.second->handle);
    if (stream)
      driver->cuStreamDestroy(stream);
    if (context)
      driver->cuDevicePrimaryCtxRelease(device);
  }
};

Runtime::Runtime() : impl_(new Impl()) {}
Runtime::~Runtime() = default;

void *Runtime::resolve(uint64_t stream) const {
  if (stream == kCurrentStream)
    return impl_->current.load();
  return reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
}

/// A stream as the uint64_t the API passes.
static uint64_t handle(void *stream) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(stream));
}

Status Runtime::create(std::unique_ptr<Runtime> &runtime,
                       const RuntimeOptions &options) {
  std::string path = options.libraryPath;
  if (path.empty()) {
    const char *env = std::getenv("KVATTN_LIBCUDA");
    path = env && *env ? env : "libcuda.so.1";
  }
  std::unique_ptr<Runtime> rt(new Runtime());
  Impl &impl = *rt->impl_;
  KVATTN_RETURN_IF_ERROR(Driver::open(path, impl.driver));
  const Driver &d = *impl.driver;
  KVATTN_RETURN_IF_ERROR(d.check(d.cuInit(0), "initialising the driver"));
  int deviceCount = 0;
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuDeviceGetCount(&deviceCount), "counting the devices"));
  if (options.device < 0 || options.device >= deviceCount)
    return Status::error(
        "device " + std::to_string(options.device) +
        " is out of range: the CUDA driver '" + path + "' has " +
        std::to_string(deviceCount) + " device" +
        (deviceCount == 1 ? "" : "s") +
        (deviceCount
             ? " (ordinals 0 to " + std::to_string(deviceCount - 1) + ")"
             : ""));
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuDeviceGet(&impl.device, options.device),
              "opening device " + std::to_string(options.device)));
  int major = 0, minor = 0;
  KVATTN_RETURN_IF_ERROR(d.check(
      d.cuDeviceGetAttribute(
          &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, impl.device),
      "reading the compute capability"));
  KVATTN_RETURN_IF_ERROR(d.check(
      d.cuDeviceGetAttribute(
          &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, impl.device),
      "reading the compute capability"));
  rt->computeCapability_ = major * 10 + minor;
  rt->emulated_ = d.emulated;
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuDeviceGetAttribute(&rt->multiprocessorCount_,
                                     CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                     impl.device),
              "reading the multiprocessor count"));
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuDevicePrimaryCtxRetain(&impl.context, impl.device),
              "retaining the primary context"));
  KVATTN_RETURN_IF_ERROR(d.check(d.cuCtxSetCurrent(impl.context),
                                 "making the primary context current"));
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuStreamCreate(&impl.stream, 0), "creating a stream"));
  impl.current = impl.stream;
  runtime = std::move(rt);
  return Status::ok();
}

Status Runtime::loadModule(const std::string &ptx, const Module *&module) {
  // One load at a time: a second thread loading the same text waits and
  // finds it cached.
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->modules.find(ptx);
  if (it != impl_->modules.end()) {
    module = it->second.get();
    return Status::ok();
  }
  const Driver &d = *impl_->driver;
  std::vector<char> info(8192, 0), error(8192, 0);
  CUjit_option options[] = {
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {
      info.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(info.size())),
      error.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(error.size()))};
  auto loaded = std::make_unique<Module>();
  // The driver reads a NUL-terminated image.
  CUresult result =
      d.cuModuleLoadDataEx(&loaded->handle, ptx.c_str(), 4, options, values);
  if (result != CUDA_SUCCESS) {
    std::string log(error.data(), strnlen(error.data(), error.size()));
    return d.check(result, "loading the device module")
        .withContext(log.empty() ? "JIT log empty" : "JIT log: " + log);
  }
  module = loaded.get();
  impl_->modules.emplace(ptx, std::move(loaded));
  return Status::ok();
}

size_t Runtime::loadedModules() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->modules.size();
}

Status Runtime::allocate(size_t bytes, DevicePtr &ptr) {
  CUdeviceptr p = 0;
  ++impl_->counts.allocations;
  KVATTN_RETURN_IF_ERROR(impl_->driver->check(
      impl_->driver->cuMemAlloc(&p, bytes ? bytes : 1),
      "allocating " + std::to_string(bytes) + " bytes of device memory"));
  ptr = p;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->allocations[ptr] = bytes;
  return Status::ok();
}

Status Runtime::release(DevicePtr ptr) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto it = impl_->allocations.find(ptr);
    if (it == impl_->allocations.end()) {
      char hex[32];
      std::snprintf(hex, sizeof(hex), "0x%llx",
                    static_cast<unsigned long long>(ptr));
      return Status::error(std::string("freeing device memory: ") + hex +
                           " was not allocated by this runtime (or was freed "
                           "already)");
    }
    impl_->allocations.erase(it);
  }
  return impl_->driver->check(impl_->driver->cuMemFree(ptr),
                              "freeing device memory");
}

Status Runtime::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  ++impl_->counts.synchronousCopies;
  return impl_->driver->check(impl_->driver->cuMemcpyHtoD(dst, src, bytes),
                              "copying " + std::to_string(bytes) +
                                  " bytes to the device");
}

Status Runtime::copyToHost(void *dst, DevicePtr src, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  ++impl_->counts.synchronousCopies;
  return impl_->driver->check(impl_->driver->cuMemcpyDtoH(dst, src, bytes),
                              "copying " + std::to_string(bytes) +
                                  " bytes to the host");
}

Status Runtime::memoryInfo(size_t &freeBytes, size_t &totalBytes) {
  return impl_->driver->check(
      impl_->driver->cuMemGetInfo(&freeBytes, &totalBytes),
      "reading the device memory size");
}

void Runtime::setStream(uint64_t cuStream) {
  impl_->current = reinterpret_cast<CUstream>(static_cast<uintptr_t>(cuStream));
}

void Runtime::useOwnStream() { impl_->current = impl_->stream; }

uint64_t Runtime::stream() const { return handle(impl_->current.load()); }

Status Runtime::copyDeviceToDevice(DevicePtr dst, DevicePtr src, size_t bytes,
                                   uint64_t stream) {
  if (bytes == 0)
    return Status::ok();
  ++impl_->counts.asyncCopies;
  return impl_->driver->check(
      impl_->driver->cuMemcpyDtoDAsync(dst, src, bytes,
                                       static_cast<CUstream>(resolve(stream))),
      "copying " + std::to_string(bytes) + " bytes on the device");
}

Status Runtime::fill(DevicePtr dst, uint8_t value, size_t bytes,
                     uint64_t stream) {
  if (bytes == 0)
    return Status::ok();
  ++impl_->counts.asyncCopies;
  return impl_->driver->check(
      impl_->driver->cuMemsetD8Async(dst, value, bytes,
                                     static_cast<CUstream>(resolve(stream))),
      "filling " + std::to_string(bytes) + " bytes of device memory");
}

Status Runtime::synchronize(uint64_t stream) {
  ++impl_->counts.synchronizations;
  return impl_->driver->check(impl_->driver->cuStreamSynchronize(
                                  static_cast<CUstream>(resolve(stream))),
                              "waiting for the stream");
}

Status Runtime::isCapturing(uint64_t stream, bool &capturing) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  KVATTN_RETURN_IF_ERROR(
      impl_->driver->check(impl_->driver->cuStreamIsCapturing(
                               static_cast<CUstream>(resolve(stream)), &status),
                           "asking whether the stream is being captured"));
  capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  return Status::ok();
}

namespace {

/// CUDA events, destroyed with the object.
class Events {
public:
  explicit Events(const Driver &d) : d_(d) {}
  ~Events() {
    for (CUevent e : events_)
      d_.cuEventDestroy(e);
  }
  Status create(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      CUevent e = nullptr;
      KVATTN_RETURN_IF_ERROR(d_.check(d_.cuEventCreate(&e, CU_EVENT_DEFAULT),
                                      "creating an event"));
      events_.push_back(e);
    }
    return Status::ok();
  }
  CUevent operator[](size_t i) const { return events_[i]; }

private:
  const Driver &d_;
  std::vector<CUevent> events_;
};

} // namespace

Status Runtime::timeOnStream(const std::function<Status()> &work, int warmup,
                             int repeats, std::vector<float> &ms,
                             size_t flushBytes) {
  ms.clear();
  if (warmup < 0 || repeats < 1)
    return Status::error("timing needs warmup >= 0 and repeats >= 1 (got " +
                         std::to_string(warmup) + " and " +
                         std::to_string(repeats) + ")");
  const Driver &d = *impl_->driver;
  // One timing at a time owns the flush buffer; the stream is the one
  // current when the timing starts.
  std::lock_guard<std::mutex> lock(impl_->flushMutex);
  CUstream stream = impl_->current.load();
  if (flushBytes > impl_->flushBytes) {
    if (impl_->flush)
      KVATTN_RETURN_IF_ERROR(release(impl_->flush));
    impl_->flush = 0;
    impl_->flushBytes = 0;
    KVATTN_RETURN_IF_ERROR(allocate(flushBytes, impl_->flush));
    impl_->flushBytes = flushBytes;
  }
  auto call = [&]() -> Status {
    if (flushBytes)
      KVATTN_RETURN_IF_ERROR(fill(impl_->flush, 0, flushBytes, handle(stream)));
    return work();
  };
  Events events(d);
  KVATTN_RETURN_IF_ERROR(events.create(2 * static_cast<size_t>(repeats)));
  for (int i = 0; i < warmup; ++i)
    KVATTN_RETURN_IF_ERROR(
        call().withContext("warm-up call " + std::to_string(i)));
  for (int r = 0; r < repeats; ++r) {
    if (flushBytes)
      KVATTN_RETURN_IF_ERROR(fill(impl_->flush, 0, flushBytes, handle(stream)));
    KVATTN_RETURN_IF_ERROR(
        d.check(d.cuEventRecord(events[2 * r], stream), "recording an event"));
    KVATTN_RETURN_IF_ERROR(
        work().withContext("timed call " + std::to_string(r)));
    KVATTN_RETURN_IF_ERROR(d.check(d.cuEventRecord(events[2 * r + 1], stream),
                                   "recording an event"));
  }
  ++impl_->counts.synchronizations;
  KVATTN_RETURN_IF_ERROR(d.check(d.cuEventSynchronize(events[2 * repeats - 1]),
                                 "waiting for the timed calls"));
  for (int r = 0; r < repeats; ++r) {
    float elapsed = 0;
    KVATTN_RETURN_IF_ERROR(d.check(
        d.cuEventElapsedTime(&elapsed, events[2 * r], events[2 * r + 1]),
        "reading an event's elapsed time"));
    ms.push_back(elapsed);
  }
  return Status::ok();
}

/// Bytes per element of a manifest element type.
static size_t elementBytes(const std::string &type) {
  if (type == "f32" || type == "i32")
    return 4;
  if (type == "f16" || type == "bf16")
    return 2;
  if (type == "i1")
    return 1;
  return 8;
}

/// "N bytes is above the limit ...": metadata beyond kMaxMetadataBytes.
static std::string metadataLimit(size_t bytes) {
  return std::to_string(bytes) + " bytes of metadata are above the limit of " +
         std::to_string(kMaxMetadataBytes) + " bytes (2^32) per launch";
}

Status Runtime::launch(const Module &module, const KernelInfo &kernel,
                       const LaunchArgs &argsIn, uint64_t streamArg) {
  // A run-time split: the chunk count N from the sizes and this device.
  // A cascade's B = 1 kernels: their sizes (kernelSizes).
  LaunchArgs withSplit;
  const bool runTimeSplit = kernel.splitRule.maxSplits > 0;
  const bool cascade =
      kernel.kind == "cascade_prefix" || kernel.kind == "cascade_merge";
  if (runTimeSplit || cascade) {
    withSplit = argsIn;
    withSplit.sizes = kernelSizes(kernel, argsIn.sizes);
    withSplit.sizes.N =
        splitCount(kernel, withSplit.sizes, multiprocessorCount_);
  }
  const LaunchArgs &args = runTimeSplit || cascade ? withSplit : argsIn;
  KVATTN_RETURN_IF_ERROR(validateLaunch(kernel, args));
  // The stream, once: another thread's setStream cannot move this launch
  // between its copy and its kernel.
  const uint64_t stream = handle(resolve(streamArg));

  // Metadata: the validated host values, in the kernel's element type,
  // packed into one buffer (each parameter 16-byte aligned) that one
  // asynchronous copy from page-locked memory takes to the device. All of
  // it is this call's own: concurrent launches share nothing but the ring.
  std::vector<uint64_t> values; // one 8-byte slot per parameter
  std::vector<std::pair<size_t, size_t>> metadataAt; // (value index, offset)
  std::vector<uint8_t> packed;
  size_t mapParams = 0; // tensor_maps parameters packed with the metadata
  for (const ParamInfo &p : kernel.params) {
    if (p.kind == "scalar") {
      values.push_back(static_cast<uint64_t>(sizeByName(args.sizes, p.name)));
      continue;
    }
    if (p.kind == "tensor_maps") {
      ++mapParams;
      // Encoded for this launch's buffers and sizes, packed with the
      // metadata (each map kTensorMapBytes-aligned in the slot).
      std::vector<CUtensorMap> maps(p.maps.size());
      KVATTN_RETURN_IF_ERROR(
          encodeTensorMaps(kernel, p, args.sizes, args.buffers,
                           reinterpret_cast<uint8_t *>(maps.data())));
      size_t offset = (packed.size() + kTensorMapBytes - 1) / kTensorMapBytes *
                      kTensorMapBytes;
      packed.resize(offset + maps.size() * kTensorMapBytes);
      std::memcpy(packed.data() + offset, maps.data(),
                  maps.size() * kTensorMapBytes);
      metadataAt.push_back({values.size(), offset});
      values.push_back(0); // the slot's address, below
      continue;
    }
    auto meta = args.metadata.find(p.name);
    if (args.metadataOnDevice || meta == args.metadata.end()) {
      // (Absent only where validateLaunch allows it: the unused parts of a
      // one-chunk run-time split.)
      auto buffer = args.buffers.find(p.name);
      values.push_back(buffer == args.buffers.end() ? 0 : buffer->second);
      continue;
    }
    size_t width = elementBytes(p.elementType);
    size_t offset = (packed.size() + 15) / 16 * 16;
    size_t bytes = 0, end = 0;
    if (__builtin_mul_overflow(meta->second.size(), width, &bytes) ||
        __builtin_add_overflow(offset, bytes, &end) || end > kMaxMetadataBytes)
      return Status::error("launch of '" + kernel.name +
                           "': " + metadataLimit(end > bytes ? end : SIZE_MAX));
    packed.resize(end);
    uint8_t *out = packed.data() + offset;
    for (size_t i = 0; i < meta->second.size(); ++i) {
      int64_t v = meta->second[i];
      if (width == 4) {
        int32_t narrow = static_cast<int32_t>(v);
        std::memcpy(&out[i * 4], &narrow, 4);
      } else if (width == 1) {
        out[i] = static_cast<uint8_t>(v);
      } else {
        std::memcpy(&out[i * 8], &v, 8);
      }
    }
    metadataAt.push_back({values.size(), offset});
    values.push_back(0); // the slot's address, below
  }
  MetadataSlot *slot = nullptr;
  // Metadata of no bytes (a key_valid of [B, 0]) needs no slot: its
  // pointers stay null and nothing reads them. (A zero-byte copy to a slot
  // never grown is a copy to address 0, which a driver may refuse.)
  if (!metadataAt.empty() && !packed.empty()) {
    // A captured launch would keep the slot's address, which later
    // launches rewrite: a replay would read another launch's metadata.
    bool capturing = false;
    KVATTN_RETURN_IF_ERROR(isCapturing(stream, capturing));
    const bool hasMetadata = metadataAt.size() > mapParams;
    if (capturing)
      return Status::error(
          "launch of '" + kernel.name +
          "': " + (hasMetadata ? std::string("host metadata") : "tensor maps") +
          " cannot be captured: the stream is being captured into a CUDA "
          "graph, which would replay the address of a metadata slot that "
          "later launches rewrite; keep the metadata on the device (a plan's "
          "run) to capture");
    KVATTN_RETURN_IF_ERROR(metadataSlot(packed, resolve(stream), slot));
    for (auto [index, offset] : metadataAt)
      values[index] = slot->device + offset;
  }
  Status launched = launchPacked(module, kernel, args.sizes, values, stream);
  // The slot may be rewritten once this launch has read it.
  if (slot)
    releaseSlot(*slot, resolve(stream), launched);
  return launched;
}

Status Runtime::encodeTensorMaps(
    const KernelInfo &kernel, const ParamInfo &param, const Sizes &sizes,
    const std::map<std::string, DevicePtr> &buffers, uint8_t *out) {
  const Driver &d = *impl_->driver;
  for (size_t m = 0; m < param.maps.size(); ++m) {
    const TensorMapInfo &map = param.maps[m];
    TensorMapArgs a;
    KVATTN_RETURN_IF_ERROR(tensorMapArguments(kernel, map, sizes, buffers, a));
    uint8_t *at = out + m * kTensorMapBytes;
    std::memset(at, 0, kTensorMapBytes);
    if (a.empty)
      continue;
    const unsigned elementStrides[5] = {1, 1, 1, 1, 1};
    KVATTN_RETURN_IF_ERROR(
        d.check(d.cuTensorMapEncodeTiled(
                    reinterpret_cast<CUtensorMap *>(at), a.dataType, a.rank,
                    reinterpret_cast<void *>(a.address),
                    reinterpret_cast<const unsigned long long *>(a.dims),
                    reinterpret_cast<const unsigned long long *>(a.strides),
                    a.box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    a.swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE, a.oobFill),
                "encoding tensor map '" + map.name + "' of '" + kernel.name +
                    "' (buffer '" + map.buffer + "')"));
  }
  return Status::ok();
}

struct TensorMapSlots::Slot {
  DevicePtr device = 0;
  void *host = nullptr; ///< page-locked staging
  CUevent read = nullptr;
  bool pending = false; ///< `read` recorded and maybe not complete
  bool held = false;    ///< holds `key`
  bool kept = false;    ///< used by a captured graph: never rewritten
  uint64_t lastUse = 0;
  std::vector<TensorMapArgs> key;
};

TensorMapSlots::~TensorMapSlots() {
  // Launches queued earlier may still read the maps.
  if (runtime_)
    (void)runtime_->synchronize();
  for (auto &slot : slots_) {
    if (slot->device)
      (void)runtime_->release(slot->device);
    if (slot->host)
      driver_->cuMemFreeHost(slot->host);
    if (slot->read)
      driver_->cuEventDestroy(slot->read);
  }
}

int64_t TensorMapSlots::encodes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return encodes_;
}

size_t TensorMapSlots::keptForGraphs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t kept = 0;
  for (const auto &slot : slots_)
    kept += slot->kept;
  return kept;
}

Status Runtime::createTensorMapSlots(const ParamInfo &param, size_t count,
                                     std::unique_ptr<TensorMapSlots> &result) {
  const Driver &d = *impl_->driver;
  std::unique_ptr<TensorMapSlots> slots(new TensorMapSlots());
  slots->runtime_ = this;
  slots->driver_ = impl_->driver.get();
  slots->bytes_ = param.maps.size() * kTensorMapBytes;
  for (size_t i = 0; i < count; ++i) {
    slots->slots_.push_back(std::make_unique<TensorMapSlots::Slot>());
    TensorMapSlots::Slot &slot = *slots->slots_.back();
    // cuMemAlloc's 256-byte alignment covers the maps' 128.
    KVATTN_RETURN_IF_ERROR(allocate(slots->bytes_, slot.device));
    ++impl_->counts.allocations;
    KVATTN_RETURN_IF_ERROR(
        d.check(d.cuMemAllocHost(&slot.host, slots->bytes_),
                "allocating page-locked staging for tensor maps"));
    KVATTN_RETURN_IF_ERROR(d.check(
        d.cuEventCreate(&slot.read, CU_EVENT_DEFAULT), "creating an event"));
  }
  result = std::move(slots);
  return Status::ok();
}

Status Runtime::stageTensorMaps(TensorMapSlots &slots, const KernelInfo &kernel,
                                const ParamInfo &param, const Sizes &sizes,
                                const std::map<std::string, DevicePtr> &buffers,
                                uint64_t streamArg, DevicePtr &address,
                                size_t &index) {
  const Driver &d = *impl_->driver;
  std::vector<TensorMapArgs> key(param.maps.size());
  for (size_t m = 0; m < param.maps.size(); ++m)
    KVATTN_RETURN_IF_ERROR(
        tensorMapArguments(kernel, param.maps[m], sizes, buffers, key[m]));
  const CUstream stream = static_cast<CUstream>(resolve(streamArg));
  bool capturing = false;
  KVATTN_RETURN_IF_ERROR(isCapturing(handle(stream), capturing));
  std::lock_guard<std::mutex> lock(slots.mutex_);
  ++slots.clock_;
  // Held already: no driver call.
  for (size_t i = 0; i < slots.slots_.size(); ++i) {
    TensorMapSlots::Slot &slot = *slots.slots_[i];
    if (slot.held && slot.key == key) {
      slot.lastUse = slots.clock_;
      slot.kept |= capturing;
      address = slot.device;
      index = i;
      return Status::ok();
    }
  }
  // The least recently used slot no graph keeps.
  TensorMapSlots::Slot *victim = nullptr;
  for (size_t i = 0; i < slots.slots_.size(); ++i) {
    TensorMapSlots::Slot &slot = *slots.slots_[i];
    if (!slot.kept && (!victim || slot.lastUse < victim->lastUse)) {
      victim = &slot;
      index = i;
    }
  }
  if (!victim)
    return Status::error(
        "launch of '" + kernel.name + "': every one of the " +
        std::to_string(slots.slots_.size()) + " tensor-map slots of '" +
        param.name +
        "' is kept for a captured CUDA graph (a graph's replays read its "
        "slot): capture at most that many buffer and size combinations per "
        "plan, or make a new plan");
  TensorMapSlots::Slot &slot = *victim;
  if (slot.pending) {
    // Its last reader, `count` changes ago: usually done.
    CUresult state = d.cuEventQuery(slot.read);
    if (state == CUDA_ERROR_NOT_READY) {
      ++impl_->metadataWaits;
      ++impl_->counts.synchronizations;
      state = d.cuEventSynchronize(slot.read);
    }
    KVATTN_RETURN_IF_ERROR(
        d.check(state, "waiting for a launch that read earlier tensor maps"));
    slot.pending = false;
  }
  slot.held = false;
  // Encoded where the driver's alignment holds, then staged.
  std::vector<CUtensorMap> maps(param.maps.size());
  KVATTN_RETURN_IF_ERROR(encodeTensorMaps(
      kernel, param, sizes, buffers, reinterpret_cast<uint8_t *>(maps.data())));
  std::memcpy(slot.host, maps.data(), slots.bytes_);
  ++impl_->counts.asyncCopies;
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuMemcpyHtoDAsync(slot.device, slot.host, slots.bytes_, stream),
              "copying tensor maps of '" + kernel.name + "' to the device"));
  ++slots.encodes_;
  slot.key = std::move(key);
  slot.held = true;
  slot.kept = capturing;
  slot.lastUse = slots.clock_;
  address = slot.device;
  return Status::ok();
}

Status Runtime::tensorMapsRead(TensorMapSlots &slots, size_t index,
                               uint64_t streamArg) {
  const Driver &d = *impl_->driver;
  const CUstream stream = static_cast<CUstream>(resolve(streamArg));
  std::lock_guard<std::mutex> lock(slots.mutex_);
  TensorMapSlots::Slot &slot = *slots.slots_.at(index);
  if (slot.kept)
    return Status::ok();
  KVATTN_RETURN_IF_ERROR(d.check(d.cuEventRecord(slot.read, stream),
                                 "recording the end of a tensor-map read"));
  slot.pending = true;
  return Status::ok();
}

Status Runtime::launchPacked(const Module &module, const KernelInfo &kernel,
                             const Sizes &sizesIn,
                             std::vector<uint64_t> &values,
                             uint64_t streamArg) {
  const Sizes sizes = kernelSizes(kernel, sizesIn);

  // The grid of the manifest: x = B * Hq / group programs, y = blocks of
  // group * L (packed) query rows; an append kernel: x = blocks of block_m
  // new tokens (one warp each) of the B * L.
  const Driver &d = *impl_->driver;
  const std::string doing = "launching '" + kernel.name + "'";
  // A ragged batch ("attention_varlen"): x = Hq / group, y = floor(group *
  // L / block_m) + B (L the packed rows, B the sequences); a validation
  // kernel: one block per sequence.
  const bool append = kernel.kind == "append";
  const bool validate = kernel.kind == "validate";
  const bool varlen = kernel.kind == "attention_varlen";
  // A ragged batch's merge: x = Hq, y = ceil(L / block_m) over the packed
  // rows (B = 1).
  const bool varlenMerge = kernel.kind == "merge_varlen";
  if (sizes.B < 0 || sizes.Hq < 0 || sizes.L < 0 || kernel.blockM <= 0 ||
      kernel.group <= 0)
    return Status::error(doing + ": negative sizes or a tile without rows");
  // Every product checked: sizes near 2^63 must not wrap into a small grid.
  int64_t bl = 0, bh = 0, gl = 0;
  const bool overflow = __builtin_mul_overflow(sizes.B, sizes.L, &bl) ||
                        __builtin_mul_overflow(sizes.B, sizes.Hq, &bh) ||
                        __builtin_mul_overflow(kernel.group, sizes.L, &gl) ||
                        bl > INT64_MAX - kernel.blockM ||
                        gl > INT64_MAX - kernel.blockM ||
                        gl / kernel.blockM > INT64_MAX - sizes.B;
  if (overflow)
    return Status::error(doing +
                         ": the grid for B = " + std::to_string(sizes.B) +
                         ", Hq = " + std::to_string(sizes.Hq) +
                         ", L = " + std::to_string(sizes.L) +
                         " overflows 64 bits (beyond the CUDA limits)");
  const int64_t gridX = validate      ? sizes.B
                        : append      ? (bl + kernel.blockM - 1) / kernel.blockM
                        : varlen      ? sizes.Hq / kernel.group
                        : varlenMerge ? sizes.Hq
                                      : bh / kernel.group;
  const int64_t gridY = append || validate ? 1
                        : varlen           ? gl / kernel.blockM + sizes.B
                                 : (gl + kernel.blockM - 1) / kernel.blockM;
  if (gridX == 0 || gridY == 0)
    return Status::ok(); // No program: nothing to compute.
  // KV chunks of a split: static, or chosen per launch (the `N` the
  // kernels take is the same splitCount).
  const int64_t gridZ = kernel.splitKv > 0
                            ? kernel.splitKv
                            : splitCount(kernel, sizes, multiprocessorCount_);
  // A run-time split of one chunk: the attention kernel stored out itself,
  // there is nothing to merge.
  if ((kernel.kind == "merge" || varlenMerge) &&
      kernel.splitRule.maxSplits > 0 &&
      splitCount(kernel, sizes, multiprocessorCount_) == 1)
    return Status::ok();
  if (gridX > 0x7fffffff || gridY > 65535 || gridZ > 65535)
    return Status::error(doing + ": the grid (" + std::to_string(gridX) +
                         " x " + std::to_string(gridY) + " x " +
                         std::to_string(gridZ) + ") exceeds the CUDA limits");

  CUfunction function;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto &functions = const_cast<Module &>(module).functions;
    auto f = functions.find(kernel.name);
    if (f == functions.end()) {
      KVATTN_RETURN_IF_ERROR(d.check(
          d.cuModuleGetFunction(&function, module.handle, kernel.name.c_str()),
          "finding kernel '" + kernel.name + "' in the module"));
      if (kernel.dynamicSharedMemoryBytes > 48 * 1024)
        KVATTN_RETURN_IF_ERROR(d.check(
            d.cuFuncSetAttribute(
                function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                static_cast<int>(kernel.dynamicSharedMemoryBytes)),
            "allowing " + std::to_string(kernel.dynamicSharedMemoryBytes) +
                " bytes of dynamic shared memory for '" + kernel.name + "'"));
      functions[kernel.name] = function;
    } else {
      function = f->second;
    }
  }

  ++impl_->counts.launches;
  std::vector<void *> params;
  for (uint64_t &v : values)
    params.push_back(&v);
  KVATTN_RETURN_IF_ERROR(d.check(
      d.cuLaunchKernel(
          function, static_cast<unsigned>(gridX), static_cast<unsigned>(gridY),
          static_cast<unsigned>(gridZ), static_cast<unsigned>(kernel.blockX), 1,
          1, static_cast<unsigned>(kernel.dynamicSharedMemoryBytes),
          static_cast<CUstream>(resolve(streamArg)), params.data(), nullptr),
      doing));
  return Status::ok();
}

Status Runtime::metadataSlot(const std::vector<uint8_t> &packed,
                             void *streamPtr, MetadataSlot *&result) {
  const Driver &d = *impl_->driver;
  CUstream stream = static_cast<CUstream>(streamPtr);
  std::unique_lock<std::mutex> lock(impl_->ringMutex);
  // Unchanged metadata on the same stream: the last slot, no copy. (A
  // launch on that stream that still holds it is ordered with this one.)
  if (impl_->lastSlot >= 0) {
    MetadataSlot &last = impl_->slots[impl_->lastSlot];
    if (last.stream == stream && last.bytes == packed) {
      ++last.users;
      result = &last;
      return Status::ok();
    }
  }
  // The next slot no launch holds, after the last one; all held (more
  // launches in flight on other threads than slots): wait for one.
  int next = -1;
  for (;;) {
    for (size_t i = 1; i <= kMetadataSlots && next < 0; ++i) {
      int candidate = static_cast<int>((impl_->lastSlot + static_cast<int>(i)) %
                                       kMetadataSlots);
      if (impl_->slots[candidate].users == 0)
        next = candidate;
    }
    if (next >= 0)
      break;
    ++impl_->metadataWaits;
    impl_->slotFree.wait(lock);
  }
  MetadataSlot &slot = impl_->slots[next];
  // The launch that last read this slot (kMetadataSlots launches ago) must
  // be done before its staging and device copy change: usually it is.
  if (slot.pending) {
    CUresult state = d.cuEventQuery(slot.done);
    if (state == CUDA_ERROR_NOT_READY) {
      ++impl_->metadataWaits;
      ++impl_->counts.synchronizations;
      state = d.cuEventSynchronize(slot.done);
    }
    KVATTN_RETURN_IF_ERROR(
        d.check(state, "waiting for a launch that read earlier metadata"));
    slot.pending = false;
  }
  if (slot.capacity < packed.size())
    KVATTN_RETURN_IF_ERROR(growSlot(slot, packed.size()));
  // Until the copy is queued the slot matches nothing.
  slot.bytes.clear();
  slot.stream = nullptr;
  std::memcpy(slot.host, packed.data(), packed.size());
  ++impl_->counts.asyncCopies;
  KVATTN_RETURN_IF_ERROR(d.check(
      d.cuMemcpyHtoDAsync(slot.device, slot.host, packed.size(), stream),
      "copying the launch's metadata to the device"));
  slot.bytes = packed;
  slot.stream = stream;
  impl_->lastSlot = next;
  ++slot.users;
  result = &slot;
  return Status::ok();
}

void Runtime::releaseSlot(MetadataSlot &slot, void *stream, Status &status) {
  const Driver &d = *impl_->driver;
  {
    std::lock_guard<std::mutex> lock(impl_->ringMutex);
    // The copy was queued: whatever the launch did, the event after it
    // tells when the slot may change.
    Status recorded =
        d.check(d.cuEventRecord(slot.done, static_cast<CUstream>(stream)),
                "recording the end of a launch's metadata use");
    if (recorded.isOk())
      slot.pending = true;
    else if (status.isOk())
      status = recorded;
    --slot.users;
  }
  impl_->slotFree.notify_all();
}

Status Runtime::growSlot(MetadataSlot &slot, size_t bytes) {
  const Driver &d = *impl_->driver;
  if (bytes > kMaxMetadataBytes)
    return Status::error("staging metadata: " + metadataLimit(bytes));
  // Powers of two from 4 KB up to 2^32: no overflow.
  size_t capacity = std::max(kMinMetadataBytes, slot.capacity);
  while (capacity < bytes)
    capacity *= 2;
  if (slot.device)
    KVATTN_RETURN_IF_ERROR(release(slot.device));
  slot.device = 0;
  if (slot.host)
    KVATTN_RETURN_IF_ERROR(
        d.check(d.cuMemFreeHost(slot.host), "freeing page-locked memory"));
  slot.host = nullptr;
  slot.capacity = 0;
  slot.bytes.clear();
  KVATTN_RETURN_IF_ERROR(allocate(capacity, slot.device));
  ++impl_->counts.allocations;
  KVATTN_RETURN_IF_ERROR(d.check(d.cuMemAllocHost(&slot.host, capacity),
                                 "allocating " + std::to_string(capacity) +
                                     " bytes of page-locked memory"));
  if (!slot.done)
    KVATTN_RETURN_IF_ERROR(d.check(
        d.cuEventCreate(&slot.done, CU_EVENT_DEFAULT), "creating an event"));
  slot.capacity = capacity;
  return Status::ok();
}

Status Runtime::reserveMetadata(size_t bytes) {
  if (bytes > kMaxMetadataBytes)
    return Status::error("reserving metadata: " + metadataLimit(bytes));
  std::unique_lock<std::mutex> lock(impl_->ringMutex);
  for (MetadataSlot &slot : impl_->slots) {
    // A slot in use by a launch of another thread is grown after it.
    while (!(slot.capacity >= bytes && slot.capacity > 0) && slot.users > 0)
      impl_->slotFree.wait(lock);
    if (slot.capacity >= bytes && slot.capacity > 0)
      continue;
    if (slot.pending) {
      ++impl_->counts.synchronizations;
      KVATTN_RETURN_IF_ERROR(impl_->driver->check(
          impl_->driver->cuEventSynchronize(slot.done),
          "waiting for a launch that read earlier metadata"));
    }
    slot.pending = false;
    KVATTN_RETURN_IF_ERROR(growSlot(slot, std::max<size_t>(bytes, 1)));
  }
  return Status::ok();
}

int64_t Runtime::metadataWaits() const { return impl_->metadataWaits; }

CallCounts Runtime::callCounts() const {
  const AtomicCounts &a = impl_->counts;
  CallCounts c;
  c.launches = a.launches;
  c.graphLaunches = a.graphLaunches;
  c.synchronizations = a.synchronizations;
  c.allocations = a.allocations;
  c.synchronousCopies = a.synchronousCopies;
  c.asyncCopies = a.asyncCopies;
  return c;
}

void Runtime::resetCallCounts() {
  AtomicCounts &a = impl_->counts;
  a.launches = 0;
  a.graphLaunches = 0;
  a.synchronizations = 0;
  a.allocations = 0;
  a.synchronousCopies = 0;
  a.asyncCopies = 0;
}

//===----------------------------------------------------------------------===//
// CUDA graphs
//===----------------------------------------------------------------------===//

Graph::~Graph() {
  if (exec_)
    driver_->cuGraphExecDestroy(static_cast<CUgraphExec>(exec_));
  if (graph_)
    driver_->cuGraphDestroy(static_cast<CUgraph>(graph_));
}

Status Runtime::beginCapture() {
  CUstream stream = impl_->current.load();
  if (!stream)
    return Status::error("capturing a CUDA graph: the legacy default stream "
                         "(0) cannot be captured; use the runtime's own "
                         "stream or a created one");
  return impl_->driver->check(impl_->driver->cuStreamBeginCapture(
                                  stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                              "beginning a stream capture");
}

Status Runtime::endCapture(std::unique_ptr<Graph> &graph) {
  const Driver &d = *impl_->driver;
  std::unique_ptr<Graph> g(new Graph());
  g->driver_ = &d;
  CUgraph captured = nullptr;
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuStreamEndCapture(impl_->current.load(), &captured),
              "ending the stream capture"));
  g->graph_ = captured;
  CUgraphExec exec = nullptr;
  KVATTN_RETURN_IF_ERROR(d.check(d.cuGraphInstantiate(&exec, captured, 0),
                                 "instantiating the captured graph"));
  g->exec_ = exec;
  graph = std::move(g);
  return Status::ok();
}

Status Runtime::launchGraph(const Graph &graph) {
  ++impl_->counts.graphLaunches;
  return impl_->driver->check(
      impl_->driver->cuGraphLaunch(static_cast<CUgraphExec>(graph.exec_),
                                   impl_->current.load()),
      "launching a CUDA graph");
}

} // namespace rt
} // namespace kvattn
} // namespace mlir
