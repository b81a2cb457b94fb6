//===- Runtime.cpp - the C API's runtime ----------------------------------===//
//
// kvattn_runtime_*: the CUDA driver (or the emulated one) on one device, its
// streams, device memory and copies, CUDA-graph capture, call counts.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

#include "kvattn/Runtime/EmulatedGpu.h"

using mlir::kvattn::Status;
using namespace mlir::kvattn::capi;

struct kvattn_graph {
  mlir::kvattn::rt::Runtime *runtime;
  std::unique_ptr<mlir::kvattn::rt::Graph> graph;
};

extern "C" {

void kvattn_runtime_options_init(kvattn_runtime_options *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
}

int kvattn_runtime_create_with_options(kvattn_runtime **runtime,
                                       const kvattn_runtime_options *given,
                                       char **error) {
  const std::string prefix = "kvattn_runtime_create: ";
  if (!runtime)
    return report(Status::error(prefix + "null argument"), error);
  kvattn_runtime_options o;
  kvattn_runtime_options_init(&o);
  if (given) {
    if (int failed = report(
            readVersioned(prefix + "options", "kvattn_runtime_options_init",
                          offsetof(kvattn_runtime_options, device) +
                              sizeof(o.device),
                          *given, o),
            error))
      return failed;
    if (o.reserved0)
      return report(Status::error(prefix + "options.reserved0 must be 0"),
                    error);
  }
  mlir::kvattn::rt::RuntimeOptions options;
  options.device = o.device;
  if (o.driver_library)
    options.libraryPath = o.driver_library;
  auto rt = std::make_unique<kvattn_runtime>();
  rt->device = o.device;
  if (int failed = report(
          mlir::kvattn::rt::Runtime::create(rt->runtime, options), error))
    return failed;
  *runtime = rt.release();
  return 0;
}

int kvattn_runtime_create(kvattn_runtime **runtime, char **error) {
  return kvattn_runtime_create_with_options(runtime, nullptr, error);
}

int kvattn_runtime_device_info(const kvattn_runtime *runtime, int *device,
                               int *compute_capability,
                               int *multiprocessor_count, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_device_info: null runtime"),
                  error);
  if (device)
    *device = runtime->device;
  if (compute_capability)
    *compute_capability = runtime->runtime->computeCapability();
  if (multiprocessor_count)
    *multiprocessor_count = runtime->runtime->multiprocessorCount();
  return 0;
}

int kvattn_emulated_driver_path(char **path, char **error) {
  if (!path)
    return report(Status::error("kvattn_emulated_driver_path: null path"),
                  error);
  *path = copyString(mlir::kvattn::emulatedDriverPath());
  return 0;
}

void kvattn_runtime_destroy(kvattn_runtime *runtime) { delete runtime; }

int kvattn_runtime_set_stream(kvattn_runtime *runtime, uint64_t stream,
                              char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_set_stream: null runtime"),
                  error);
  runtime->runtime->setStream(stream);
  return 0;
}

int kvattn_runtime_use_own_stream(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_use_own_stream: null runtime"),
                  error);
  runtime->runtime->useOwnStream();
  return 0;
}

int kvattn_runtime_reserve_metadata(kvattn_runtime *runtime, size_t bytes,
                                    char **error) {
  if (!runtime)
    return report(
        Status::error("kvattn_runtime_reserve_metadata: null runtime"), error);
  return report(runtime->runtime->reserveMetadata(bytes), error);
}

int kvattn_device_alloc(kvattn_runtime *runtime, size_t bytes,
                        uint64_t *device_ptr, char **error) {
  if (!runtime || !device_ptr)
    return report(Status::error(std::string("kvattn_device_alloc: null ") +
                                (runtime ? "device_ptr" : "runtime")),
                  error);
  return report(runtime->runtime->allocate(bytes, *device_ptr), error);
}

int kvattn_device_free(kvattn_runtime *runtime, uint64_t device_ptr,
                       char **error) {
  if (!runtime)
    return report(Status::error("kvattn_device_free: null runtime"), error);
  return report(runtime->runtime->release(device_ptr), error);
}

int kvattn_copy_to_device(kvattn_runtime *runtime, uint64_t dst,
                          const void *src, size_t bytes, char **error) {
  if (!runtime || (!src && bytes))
    return report(Status::error(std::string("kvattn_copy_to_device: null ") +
                                (runtime ? "src" : "runtime")),
                  error);
  return report(runtime->runtime->copyToDevice(dst, src, bytes), error);
}

int kvattn_copy_to_host(kvattn_runtime *runtime, void *dst, uint64_t src,
                        size_t bytes, char **error) {
  if (!runtime || (!dst && bytes))
    return report(Status::error(std::string("kvattn_copy_to_host: null ") +
                                (runtime ? "dst" : "runtime")),
                  error);
  return report(runtime->runtime->copyToHost(dst, src, bytes), error);
}

int kvattn_synchronize(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_synchronize: null runtime"), error);
  return report(runtime->runtime->synchronize(), error);
}

int kvattn_graph_begin_capture(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_graph_begin_capture: null runtime"),
                  error);
  return report(runtime->runtime->beginCapture(), error);
}

int kvattn_graph_end_capture(kvattn_runtime *runtime, kvattn_graph **graph,
                             char **error) {
  if (!runtime || !graph)
    return report(Status::error("kvattn_graph_end_capture: null argument"),
                  error);
  auto g = std::make_unique<kvattn_graph>();
  g->runtime = runtime->runtime.get();
  if (int failed = report(runtime->runtime->endCapture(g->graph), error))
    return failed;
  *graph = g.release();
  return 0;
}

int kvattn_graph_launch(kvattn_graph *graph, char **error) {
  if (!graph)
    return report(Status::error("kvattn_graph_launch: null graph"), error);
  return report(graph->runtime->launchGraph(*graph->graph), error);
}

void kvattn_graph_destroy(kvattn_graph *graph) { delete graph; }

int kvattn_runtime_call_counts(kvattn_runtime *runtime,
                               kvattn_call_counts *counts, int reset,
                               char **error) {
  if (!runtime || !counts)
    return report(Status::error("kvattn_runtime_call_counts: null argument"),
                  error);
  mlir::kvattn::rt::CallCounts c = runtime->runtime->callCounts();
  counts->launches = c.launches;
  counts->graph_launches = c.graphLaunches;
  counts->synchronizations = c.synchronizations;
  counts->allocations = c.allocations;
  counts->synchronous_copies = c.synchronousCopies;
  counts->async_copies = c.asyncCopies;
  if (reset)
    runtime->runtime->resetCallCounts();
  return 0;
}

} // extern "C"
