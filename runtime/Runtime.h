//===- Runtime.h - load PTX, launch it --------------------------*- C++ -*-===//
//
// The kvattn runtime: no MLIR, no link-time dependency on libcuda. The
// driver library is opened with dlopen ("libcuda.so.1", or the path in
// $KVATTN_LIBCUDA) and its entry points are resolved by name. Every call
// returns a Status whose message says what the runtime was doing and, for
// driver failures, the CUDA error name and string.
//
//   std::unique_ptr<Runtime> rt;
//   KVATTN_RETURN_IF_ERROR(Runtime::create(rt));
//   Manifest manifest;  KVATTN_RETURN_IF_ERROR(parseManifest(json, manifest));
//   const Module *module;  KVATTN_RETURN_IF_ERROR(rt->loadModule(ptx, module));
//   LaunchArgs args;  args.sizes = {B, Hq, Hkv, L, S};
//   args.buffers["query"] = dq; ...  args.metadata["q_offset"] = {pos...};
//   KVATTN_RETURN_IF_ERROR(rt->launch(*module, manifest.kernels[0], args));
//
// Launches, copies and timing run on the runtime's own stream, or on a
// caller's (setStream: e.g. the current stream of a framework), or on the
// stream a call names (`stream`, kCurrentStream: the current one).
//
// Threads: a Runtime and its Plans may be used from several threads at once
// (docs/runtime.md, "Threads"). Module loads, allocations, the metadata
// ring and the call counts are locked; each launch packs its own
// parameters. setStream changes the stream of every thread: a thread that
// wants its own stream passes it per call. Destroying a Runtime or a Plan
// while another thread uses it is the caller's error.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_RUNTIME_RUNTIME_H
#define KVATTN_RUNTIME_RUNTIME_H

#include "kvattn/Support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mlir {
namespace kvattn {
namespace rt {

/// A device address (CUdeviceptr).
using DevicePtr = uint64_t;

/// A `stream` argument meaning the runtime's current stream (setStream,
/// else its own); the C API's KVATTN_CURRENT_STREAM.
constexpr uint64_t kCurrentStream = UINT64_MAX;

/// The most host-given metadata one launch may stage (and
/// Runtime::reserveMetadata may reserve), in bytes: 2^32. Each of the ring's
/// 8 slots holds this much page-locked and device memory at most.
constexpr size_t kMaxMetadataBytes = size_t(1) << 32;

//===----------------------------------------------------------------------===//
// The launch manifest (docs/kernel-abi.md)
//===----------------------------------------------------------------------===//

/// One TMA tensor map of a `tensor_maps` parameter (docs/kernel-abi.md,
/// "Tensor maps"): a tiled view of a pointer parameter's dense row-major
/// buffer that the runtime encodes with cuTensorMapEncodeTiled per launch.
struct TensorMapInfo {
  std::string name;   ///< for messages: "q_load"
  std::string buffer; ///< the pointer parameter it describes: "query"
  /// The buffer dimension of each map dimension, innermost first: {3, 1, 2,
  /// 0} over `[B, Hq, L, D]` is the view {D, Hq, L, B}. Each buffer
  /// dimension at most once; one left out must have size 1 at launch.
  std::vector<int> dims;
  /// The box (elements per map dimension), each in [1, 256].
  std::vector<uint32_t> box;
  int swizzleBytes = 0;    ///< 0 (none), 32, 64 or 128
  std::string elementType; ///< f16, bf16 or f32: the buffer's
  bool nanFill = false;    ///< oob_fill "nan" (NAN_REQUEST_ZERO_FMA), else zero
};

/// Bytes per encoded tensor map (CUtensorMap), also the alignment the
/// runtime gives each map in device memory (CUDA 13's cuda.h declares
/// 128-byte alignment; the driver requires 64).
constexpr size_t kTensorMapBytes = 128;

struct ParamInfo {
  std::string name; ///< query, key, ..., lse, B, Hq, Hkv, L, S
  /// "pointer", "scalar" or "tensor_maps" (a device pointer to the
  /// parameter's `maps`, kTensorMapBytes each, in order, which the runtime
  /// encodes for the launch's buffers and sizes).
  std::string kind;
  std::string elementType; ///< f32, f16, bf16, i1, i32, i64
  /// Pointers: per dimension a size name ("B") or a number ("128").
  std::vector<std::string> shape;
  std::string access;              ///< "read" / "write" (pointers)
  std::vector<TensorMapInfo> maps; ///< kind "tensor_maps"
};

struct KernelInfo {
  std::string name;
  std::vector<ParamInfo> params;
  int64_t blockX = 0;
  int64_t blockM = 0, blockN = 0, numWarps = 0, numStages = 0;
  /// Query heads per program (GQA packing): the grid is
  /// (B * Hq / group, ceil(group * L / blockM)).
  int64_t group = 1;
  /// KV chunks of a split-KV kernel: the grid's z dimension; 0: chosen at
  /// run time (splitRule, splitCount).
  int64_t splitKv = 1;
  /// A run-time split's rule (manifest `split`, version 2), on both its
  /// kernels: the attention (grid z = N) and the merge (N parts); maxSplits
  /// 0: none. Both take the chunk count as their last scalar `N`.
  struct SplitRule {
    int64_t maxSplits = 0, blockM = 0, blockN = 0, group = 1, programsPerSm = 0,
            minKeys = 0, numSms = 0;
  } splitRule;
  /// "cascade_prefix" and "cascade_merge": a shared-prefix attention's
  /// kernels that run with B = 1 (kernelSizes): the attention of every
  /// packed row over the prefix (its keys P) and the merge of the prefix
  /// and suffix parts (docs/kernel-abi.md, "Cascade kernels").
  /// "attention", or "merge": the kernel that merges the partial states
  /// (`out_parts`, `lse_parts`) a split-KV attention kernel wrote,
  /// "merge_varlen": that of a ragged batch ("attention_varlen"), over the
  /// packed rows (grid Hq x ceil(L / blockM); its split rule counts the
  /// ragged grid's programs, splitCount), or
  /// "append": a cache write (`update`, `cache` written in place, `pos`,
  /// `block_table`; grid ceil(B * L / blockM), one warp per new token).
  /// Launch the kernels of a manifest in order, on one stream.
  std::string kind = "attention";
  /// An append whose tokens on a -1 block-table entry are padding: skipped
  /// by the kernel and accepted by the validation (the manifest's
  /// `"skip_padding": true`; `kvattn.append ... skip_padding`).
  bool skipPadding = false;
  int64_t dynamicSharedMemoryBytes = 0;
  /// Bits of the kernel's index arithmetic (the manifest's `index_bits`):
  /// a 32-bit kernel refuses a launch with a buffer of 2^31 elements or
  /// more, or a size of 2^31 or more (validateLaunch).
  int indexBits = 64;
};

struct Manifest {
  int version = 0;
  std::string chip;
  std::string ptxFile;
  /// `index_bits`, 64 when absent (older manifests); every kernel's too.
  int indexBits = 64;
  std::vector<KernelInfo> kernels;
};

/// Parses a launch manifest; rejects unknown formats and versions.
Status parseManifest(const std::string &json, Manifest &manifest);

//===----------------------------------------------------------------------===//
// Launch arguments and their validation
//===----------------------------------------------------------------------===//

struct Sizes {
  int64_t B = 0, Hq = 0, Hkv = 0, L = 0, S = 0;
  /// Paged kernels only (a `block_table` parameter): the page cache
  /// `[numPages, pageSize, Hkv, D]` and the table `[B, maxPages]`;
  /// S is then the logical key count `maxPages * pageSize`.
  int64_t numPages = 0, pageSize = 0, maxPages = 0;
  /// A run-time split's chunk count (the size `N`): set by the runtime
  /// (launch, Plan) from splitCount; callers leave it.
  int64_t N = 0;
  /// Kernels with a batch-to-cache map (a `cache_batch_idx` parameter):
  /// the cache rows C of K and V `[C, Hkv, S, D]` (the size `cache_rows`).
  /// With ragged keys (`k_start`) K and V are `[1, Hkv, S, D]`: S is the
  /// packed key rows N.
  int64_t cacheRows = 0;
  /// Shared-prefix (cascade) kernels: the keys P of the shared prefix
  /// (the size `P` of the kind "cascade_prefix"; 0 with a static prefix:
  /// the manifest's number; a paged prefix: 0 or
  /// prefixMaxPages * prefixPageSize).
  int64_t P = 0;
  /// A paged shared prefix (a "prefix_pages" parameter): its pool
  /// `prefix_key`/`prefix_value` `[prefixNumPages, prefixPageSize, Hkv,
  /// D]` and its table `prefix_pages [prefixMaxPages]` of `prefix_len [1]`
  /// keys (the sizes `prefix_num_pages`, `prefix_page_size`,
  /// `prefix_max_pages`). The same pool as the suffixes' takes the same
  /// numbers.
  int64_t prefixNumPages = 0, prefixPageSize = 0, prefixMaxPages = 0;
};

/// The sizes kernel `kernel` runs with: `sizes`, except for a cascade's
/// B = 1 kernels ("cascade_prefix", "cascade_merge", and the validation
/// kernel of a paged prefix's prefix_pages: B = 1, and when
/// `sizes.P` is 0 a static prefix length P from the manifest, a paged
/// prefix's prefixMaxPages * prefixPageSize). Every launch
/// (Runtime::launch, Plan) applies it.
Sizes kernelSizes(const KernelInfo &kernel, const Sizes &sizes);

/// A run-time split's chunk count for a launch over `sizes` on a device
/// with `numSms` multiprocessors (docs/runtime.md, "Run-time split-KV"):
/// with P = B * (Hq / G) * ceil(G * L / BM) programs (at least 1),
///   n = clamp(min(ceil(R * numSms / P), ceil(S / BN) [, floor(S / min_keys)]),
///             1, max)
/// from the kernel's rule (BM, BN, G, R = programs_per_sm, min_keys, max):
/// the compiler's rule (passes/Tile.cpp splitRule) with the device's
/// multiprocessor count. The kernel's static split_kv for other kernels.
int64_t splitCount(const KernelInfo &kernel, const Sizes &sizes,
                   int64_t numSms);

/// The size a manifest names ("B", "Hq", "Hkv", "L", "S", "num_pages",
/// "page_size", "max_pages", "N", "cache_rows", "P", "prefix_num_pages",
/// "prefix_page_size", "prefix_max_pages"); -1 for an unknown name.
int64_t sizeByName(const Sizes &sizes, const std::string &name);

struct LaunchArgs {
  Sizes sizes;
  /// Device buffers by parameter name: query, key, value, mask, out, lse,
  /// and for split-KV kernels the f32 workspaces out_parts and lse_parts.
  std::map<std::string, DevicePtr> buffers;
  /// Run-time metadata on the host by parameter name: q_offset, k_offset,
  /// q_pos, k_pos, kv_len, block_table (integers), key_valid (0/1). The runtime
  /// validates them and copies them to the device before the launch.
  std::map<std::string, std::vector<int64_t>> metadata;
  /// The metadata lives on the device (a plan's run): every metadata
  /// parameter is a device pointer in `buffers`, checked like the other
  /// buffers (present, aligned to its element size); its values are not
  /// read (a validation kernel checks them on the device).
  bool metadataOnDevice = false;
};

/// Checks `args` against the kernel's parameters before anything is
/// launched: every parameter present, sizes matching the static dims of the
/// manifest, metadata of the right length, offsets and positions
/// non-negative and in range, explicit positions strictly increasing per
/// batch, kv_len within [0, S], device buffers 16-byte aligned (cp.async
/// copies 16 bytes); for paged kernels the block-table rules
/// (kvattn/Support/BlockTable.h: page ids in range, canonical -1 tail, no
/// page twice per sequence, kv_len fits the pages) and S = max_pages *
/// page_size; for append kernels the write rules of the reference (rows
/// [pos, pos + L) inside the capacity S; paged: the table rules, then
/// checkPagedWrite). Errors name the parameter, the batch and the value.
/// A kernel with 32-bit index arithmetic (KernelInfo::indexBits) refuses
/// sizes and buffers of 2^31 elements or more, naming them and the
/// 64-bit option.
Status validateLaunch(const KernelInfo &kernel, const LaunchArgs &args);

/// The cuTensorMapEncodeTiled arguments of one tensor map for a launch.
struct TensorMapArgs {
  int dataType = 0; ///< CUtensorMapDataType
  unsigned rank = 0;
  DevicePtr address = 0;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {}; ///< bytes, of dimensions 1..rank-1
  uint32_t box[5] = {};
  int swizzle = 0; ///< CUtensorMapSwizzle
  int oobFill = 0; ///< CUtensorMapFloatOOBfill
  /// A dimension of size 0 (an empty tensor): the map is written as zeros
  /// (cuTensorMapEncodeTiled refuses size 0); the kernel issues no copy
  /// from an empty tensor.
  bool empty = false;
  bool operator==(const TensorMapArgs &o) const;
};

/// The arguments of `map` (of `kernel`'s tensor_maps parameter) for `sizes`
/// and `buffers`, checked before the driver sees them: every error names
/// the kernel, the map and the field (the buffer absent or not 16-byte
/// aligned, a left-out dimension not of size 1, a size above 2^32, a byte
/// stride not a multiple of 16 or of 2^40 or more).
Status tensorMapArguments(const KernelInfo &kernel, const TensorMapInfo &map,
                          const Sizes &sizes,
                          const std::map<std::string, DevicePtr> &buffers,
                          TensorMapArgs &args);

//===----------------------------------------------------------------------===//
// The runtime
//===----------------------------------------------------------------------===//

/// What the runtime asked the driver for (Runtime::callCounts): a serving
/// step's budget is zero synchronisations, allocations and synchronous
/// copies.
struct CallCounts {
  int64_t launches = 0;          ///< cuLaunchKernel
  int64_t graphLaunches = 0;     ///< cuGraphLaunch
  int64_t synchronizations = 0;  ///< cuStreamSynchronize, cuEventSynchronize
  int64_t allocations = 0;       ///< cuMemAlloc, cuMemAllocHost
  int64_t synchronousCopies = 0; ///< cuMemcpyHtoD, cuMemcpyDtoH
  int64_t asyncCopies = 0;       ///< cuMemcpyHtoDAsync, DtoDAsync, memset
};

struct RuntimeOptions {
  /// Path of the driver library; empty: $KVATTN_LIBCUDA, else "libcuda.so.1".
  std::string libraryPath;
  int device = 0;
};

class Module;
class Driver;
class TensorMapSlots;
struct MetadataSlot;
class Graph;

class Runtime {
public:
  /// Opens the driver, initialises it, makes device `options.device`'s
  /// primary context current and creates a stream. Without a driver: one
  /// error that says so.
  static Status create(std::unique_ptr<Runtime> &runtime,
                       const RuntimeOptions &options = {});
  ~Runtime();

  /// The device's compute capability, e.g. 90 for sm_90.
  int computeCapability() const { return computeCapability_; }
  /// Whether the driver is kvattn's emulated GPU (lib/GpuEmu).
  bool emulated() const { return emulated_; }
  /// The chip kvattn compiles for on this device when the caller names
  /// none: the device's own (sm_<capability>), except on a compute
  /// capability 9.0 GPU (H100/H200), where it is the architecture-specific
  /// sm_90a, whose wgmma and TMA kernels ran 1.3-2.4x the sm_90 (mma.sync)
  /// ones on an H200 (docs/benchmarks.md, "Measured on an H200"). The
  /// emulated GPU keeps its own chip (its tests name sm_90a where they run
  /// the wgmma kernels).
  std::string defaultChip() const {
    return "sm_" + std::to_string(computeCapability_) +
           (computeCapability_ == 90 && !emulated_ ? "a" : "");
  }

  /// Loads PTX (cuModuleLoadDataEx, with the JIT logs). Loads are cached
  /// by PTX content: the same text loads once. The module lives as long as
  /// the runtime.
  Status loadModule(const std::string &ptx, const Module *&module);
  /// How many distinct modules were loaded (cache misses).
  size_t loadedModules() const;

  /// Streaming multiprocessors of the device.
  int multiprocessorCount() const { return multiprocessorCount_; }
  /// Free and total device memory in bytes (cuMemGetInfo).
  Status memoryInfo(size_t &freeBytes, size_t &totalBytes);

  /// Runs launches, copies, fills, timing and synchronize() on a caller's
  /// stream from now on: a CUstream handle of this device's primary context
  /// (e.g. torch.cuda.current_stream().cuda_stream), 0 for the legacy
  /// default stream. The caller keeps the stream alive while it is used.
  void setStream(uint64_t cuStream);
  /// Back to the stream the runtime created (the default).
  void useOwnStream();
  /// The stream in use, as a CUstream handle.
  uint64_t stream() const;

  Status allocate(size_t bytes, DevicePtr &ptr);
  /// Frees what allocate() returned; any other pointer (or a second free)
  /// is an error naming it, not a driver call.
  Status release(DevicePtr ptr);
  /// Synchronous copies between host and device.
  Status copyToDevice(DevicePtr dst, const void *src, size_t bytes);
  Status copyToHost(void *dst, DevicePtr src, size_t bytes);
  /// Queues a device-to-device copy on the stream (cuMemcpyDtoDAsync);
  /// synchronize() waits for it.
  Status copyDeviceToDevice(DevicePtr dst, DevicePtr src, size_t bytes,
                            uint64_t stream = kCurrentStream);
  /// Queues setting `bytes` bytes at `dst` to `value` (cuMemsetD8Async).
  Status fill(DevicePtr dst, uint8_t value, size_t bytes,
              uint64_t stream = kCurrentStream);
  /// Waits for everything queued on the stream.
  Status synchronize(uint64_t stream = kCurrentStream);
  /// Whether `stream` is being captured into a CUDA graph
  /// (cuStreamIsCapturing; an invalidated capture counts as capturing).
  Status isCapturing(uint64_t stream, bool &capturing);

  /// Times `work` with CUDA events on the stream. `work` queues device work
  /// (a launch, a copy) and returns; it is called `warmup` times untimed,
  /// then `repeats` times, each call between two recorded events. All of it
  /// is queued before one wait, and `ms` receives the device time of each
  /// timed call, in order. With `flushBytes` > 0 a device buffer of that
  /// size (allocated once, kept) is filled before every call, outside the
  /// timed interval: each call starts with a cold L2 cache, and the fill
  /// keeps the device busy while the host queues the call.
  Status timeOnStream(const std::function<Status()> &work, int warmup,
                      int repeats, std::vector<float> &ms,
                      size_t flushBytes = 0);

  /// Validates `args`, uploads the metadata, packs the parameters in the
  /// manifest's order and launches the kernel on the stream with the grid,
  /// block and dynamic shared memory of the manifest. Returns after the
  /// launch is queued, without waiting for the device: call synchronize()
  /// to wait. The host-given metadata of a launch is packed into one slot
  /// of a ring of page-locked host staging and device buffers and copied
  /// asynchronously on the stream; metadata equal to the previous launch's
  /// (on the same stream) is not copied again. A slot is reused
  /// kMetadataSlots (8) launches later, after an event query: the host
  /// waits only when the device is 8 metadata changes behind
  /// (metadataWaits() counts it). Slots are allocated on first use and
  /// grow when a launch's metadata outgrows them; reserveMetadata() makes
  /// every later launch allocation-free. A slot is held by one launch
  /// from its copy until the event after it is recorded, so concurrent
  /// launches (threads) never share or rewrite each other's slot.
  /// A launch with host metadata is refused while its stream is captured
  /// (a graph would replay the slot's address, which later launches
  /// rewrite); more than kMaxMetadataBytes of metadata is refused.
  Status launch(const Module &module, const KernelInfo &kernel,
                const LaunchArgs &args, uint64_t stream = kCurrentStream);

  /// Allocates every metadata slot for launches of up to `bytes` bytes of
  /// metadata (the sum of their metadata parameters, each rounded up to 16
  /// bytes), so that no later launch allocates (a plan step's call).
  /// Above kMaxMetadataBytes: an error naming the limit.
  Status reserveMetadata(size_t bytes);
  /// How often a launch waited for the device to free a metadata slot.
  int64_t metadataWaits() const;

  /// Encodes the maps of `param` (kind "tensor_maps") for `sizes` and
  /// `buffers` into `out` (kTensorMapBytes each, in order; `out` 64-byte
  /// aligned): tensorMapArguments, then cuTensorMapEncodeTiled, whose
  /// failure is reported with the map's name.
  Status encodeTensorMaps(const KernelInfo &kernel, const ParamInfo &param,
                          const Sizes &sizes,
                          const std::map<std::string, DevicePtr> &buffers,
                          uint8_t *out);

  /// A plan's tensor maps of one `tensor_maps` parameter (`param`): `count`
  /// device buffers of its maps, each with page-locked staging; allocated
  /// here, once (Plan::create).
  Status createTensorMapSlots(const ParamInfo &param, size_t count,
                              std::unique_ptr<TensorMapSlots> &slots);
  /// The device address of `param`'s maps for `sizes` and `buffers`: a slot
  /// that already holds them (no driver call), else the least recently used
  /// slot no captured graph holds, re-encoded and copied with one
  /// cuMemcpyHtoDAsync on `stream` (after an event query: the slot's last
  /// reader, `count` map changes ago, must be done; if not, one counted
  /// wait). While `stream` is captured the slot used is kept for the graph
  /// for good (its replays read the slot and, when captured, its staging);
  /// with every slot kept, an error that says so. `slot` is for
  /// tensorMapsRead.
  Status stageTensorMaps(TensorMapSlots &slots, const KernelInfo &kernel,
                         const ParamInfo &param, const Sizes &sizes,
                         const std::map<std::string, DevicePtr> &buffers,
                         uint64_t stream, DevicePtr &address, size_t &slot);
  /// Records, after the launch that read slot `slot`, the event its reuse
  /// waits for (nothing while `stream` is captured: that slot is kept).
  Status tensorMapsRead(TensorMapSlots &slots, size_t slot, uint64_t stream);

  /// Launches `kernel` with its parameters packed (`values`: one 8-byte
  /// value per manifest parameter, in order) on the stream, with the
  /// manifest's grid for `sizes` (kind "validate": one block per batch).
  /// Nothing is validated or copied: what Plan::run uses.
  Status launchPacked(const Module &module, const KernelInfo &kernel,
                      const Sizes &sizes, std::vector<uint64_t> &values,
                      uint64_t stream = kCurrentStream);

  /// CUDA graphs: begins capturing the stream's work (cuStreamBeginCapture,
  /// thread-local mode; the legacy default stream 0 cannot be captured),
  /// ends the capture and instantiates it, replays it on the stream.
  Status beginCapture();
  Status endCapture(std::unique_ptr<Graph> &graph);
  Status launchGraph(const Graph &graph);

  /// The driver calls made since creation (or resetCallCounts()).
  CallCounts callCounts() const;
  void resetCallCounts();

private:
  Runtime();
  Status metadataSlot(const std::vector<uint8_t> &packed, void *stream,
                      MetadataSlot *&slot);
  void releaseSlot(MetadataSlot &slot, void *stream, Status &status);
  Status growSlot(MetadataSlot &slot, size_t bytes);
  void *resolve(uint64_t stream) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int computeCapability_ = 0;
  int multiprocessorCount_ = 0;
  bool emulated_ = false;
};

/// Encoded tensor maps a plan keeps (Runtime::createTensorMapSlots); they
/// must not outlive their runtime. Thread-safe.
class TensorMapSlots {
public:
  ~TensorMapSlots();
  TensorMapSlots(const TensorMapSlots &) = delete;
  TensorMapSlots &operator=(const TensorMapSlots &) = delete;
  /// How often the maps were encoded and copied (a change of a buffer
  /// pointer or a size not held by a slot).
  int64_t encodes() const;
  /// Slots kept for captured graphs.
  size_t keptForGraphs() const;

private:
  friend class Runtime;
  TensorMapSlots() = default;
  struct Slot;
  Runtime *runtime_ = nullptr;
  const Driver *driver_ = nullptr;
  size_t bytes_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mutex_;
  uint64_t clock_ = 0;
  int64_t encodes_ = 0;
};

/// A captured and instantiated CUDA graph (Runtime::endCapture); destroyed
/// with the object, which must not outlive its runtime.
class Graph {
public:
  ~Graph();
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

private:
  friend class Runtime;
  Graph() = default;
  const Driver *driver_ = nullptr;
  void *graph_ = nullptr, *exec_ = nullptr;
};

} // namespace rt
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_RUNTIME_RUNTIME_H
