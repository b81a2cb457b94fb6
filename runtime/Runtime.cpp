//===- Runtime.cpp - load kvattn PTX and launch it (CUDA Driver API) ------===//

#include "kvattn/Runtime/Runtime.h"

#include "CudaApi.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

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
  std::unordered_map<std::string, CUfunction> functions;
};

struct Runtime::Impl {
  std::unique_ptr<Driver> driver;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  /// PTX text -> module; the text itself is the key, so equal hashes of
  /// different texts cannot alias.
  std::unordered_map<std::string, std::unique_ptr<Module>> modules;
  /// Device copies of the metadata of the last launches, reused.
  std::unordered_map<std::string, std::pair<DevicePtr, size_t>> scratch;

  ~Impl() {
    if (!driver)
      return;
    for (auto &entry : scratch)
      driver->cuMemFree(entry.second.first);
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
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuDevicePrimaryCtxRetain(&impl.context, impl.device),
              "retaining the primary context"));
  KVATTN_RETURN_IF_ERROR(d.check(d.cuCtxSetCurrent(impl.context),
                                 "making the primary context current"));
  KVATTN_RETURN_IF_ERROR(
      d.check(d.cuStreamCreate(&impl.stream, 0), "creating a stream"));
  runtime = std::move(rt);
  return Status::ok();
}

Status Runtime::loadModule(const std::string &ptx, const Module *&module) {
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
    return d.check(result, "loading the PTX module")
        .withContext(log.empty() ? "JIT log empty" : "JIT log: " + log);
  }
  module = loaded.get();
  impl_->modules.emplace(ptx, std::move(loaded));
  return Status::ok();
}

size_t Runtime::loadedModules() const { return impl_->modules.size(); }

Status Runtime::allocate(size_t bytes, DevicePtr &ptr) {
  CUdeviceptr p = 0;
  KVATTN_RETURN_IF_ERROR(impl_->driver->check(
      impl_->driver->cuMemAlloc(&p, bytes ? bytes : 1),
      "allocating " + std::to_string(bytes) + " bytes of device memory"));
  ptr = p;
  return Status::ok();
}

Status Runtime::release(DevicePtr ptr) {
  return impl_->driver->check(impl_->driver->cuMemFree(ptr),
                              "freeing device memory");
}

Status Runtime::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  return impl_->driver->check(impl_->driver->cuMemcpyHtoD(dst, src, bytes),
                              "copying " + std::to_string(bytes) +
                                  " bytes to the device");
}

Status Runtime::copyToHost(void *dst, DevicePtr src, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  return impl_->driver->check(impl_->driver->cuMemcpyDtoH(dst, src, bytes),
                              "copying " + std::to_string(bytes) +
                                  " bytes to the host");
}

Status Runtime::synchronize() {
  return impl_->driver->check(impl_->driver->cuStreamSynchronize(impl_->stream),
                              "waiting for the stream");
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

Status Runtime::launch(const Module &module, const KernelInfo &kernel,
                       const LaunchArgs &args) {
  KVATTN_RETURN_IF_ERROR(validateLaunch(kernel, args));
  const Driver &d = *impl_->driver;
  const std::string doing = "launching '" + kernel.name + "'";

  // Metadata: the validated host values, in the kernel's element type, in
  // device scratch buffers owned by the runtime.
  std::vector<uint64_t> values; // one 8-byte slot per parameter
  for (const ParamInfo &p : kernel.params) {
    if (p.kind == "scalar") {
      const Sizes &s = args.sizes;
      int64_t v = p.name == "B"     ? s.B
                  : p.name == "Hq"  ? s.Hq
                  : p.name == "Hkv" ? s.Hkv
                  : p.name == "L"   ? s.L
                                    : s.S;
      values.push_back(static_cast<uint64_t>(v));
      continue;
    }
    auto meta = args.metadata.find(p.name);
    if (meta == args.metadata.end()) {
      values.push_back(args.buffers.at(p.name));
      continue;
    }
    size_t width = elementBytes(p.elementType);
    std::vector<uint8_t> bytes(meta->second.size() * width);
    for (size_t i = 0; i < meta->second.size(); ++i) {
      int64_t v = meta->second[i];
      if (width == 4) {
        int32_t narrow = static_cast<int32_t>(v);
        std::memcpy(&bytes[i * 4], &narrow, 4);
      } else if (width == 1) {
        bytes[i] = static_cast<uint8_t>(v);
      } else {
        std::memcpy(&bytes[i * 8], &v, 8);
      }
    }
    auto &slot = impl_->scratch[p.name];
    if (slot.second < bytes.size()) {
      if (slot.first)
        KVATTN_RETURN_IF_ERROR(release(slot.first));
      slot = {0, 0};
      KVATTN_RETURN_IF_ERROR(allocate(bytes.size(), slot.first));
      slot.second = bytes.size();
    }
    KVATTN_RETURN_IF_ERROR(
        copyToDevice(slot.first, bytes.data(), bytes.size()));
    values.push_back(slot.first);
  }

  // The grid of the manifest: x = B * Hq programs, y = query blocks.
  const int64_t gridX = args.sizes.B * args.sizes.Hq;
  const int64_t gridY = (args.sizes.L + kernel.blockM - 1) / kernel.blockM;
  if (gridX == 0 || gridY == 0)
    return Status::ok(); // No program: nothing to compute.
  if (gridX > 0x7fffffff || gridY > 65535)
    return Status::error(doing + ": the grid (" + std::to_string(gridX) +
                         " x " + std::to_string(gridY) +
                         ") exceeds the CUDA limits");

  auto &functions = const_cast<Module &>(module).functions;
  CUfunction function;
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

  std::vector<void *> params;
  for (uint64_t &v : values)
    params.push_back(&v);
  return d.check(
      d.cuLaunchKernel(function, static_cast<unsigned>(gridX),
                       static_cast<unsigned>(gridY), 1,
                       static_cast<unsigned>(kernel.blockX), 1, 1,
                       static_cast<unsigned>(kernel.dynamicSharedMemoryBytes),
                       impl_->stream, params.data(), nullptr),
      doing);
}

} // namespace rt
} // namespace kvattn
