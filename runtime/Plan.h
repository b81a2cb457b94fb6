//===- Plan.h - plan once, run every serving step ---------------*- C++ -*-===//
//
// A serving engine calls attention every step with new lengths and block
// tables. A Plan holds what does not change: the loaded kernels of one
// compiled module (attention, split merge, cache writes and their
// validation kernels), the device status word and the workspaces, sized
// for shape bounds. Plan::run then only queues launches on the runtime's
// stream: no allocation, no synchronisation, no copy, so a decode loop's
// runs can be captured in a CUDA graph (Runtime::beginCapture).
//
// The image must be compiled with PtxOptions::deviceValidation (the C API's
// kvattn_plan_create does it): metadata given as device pointers is
// validated on the device, the first violation recorded in the status
// word, and every kernel of the plan does nothing while the word is set.
// Plan::status() reads it (waiting for the stream) and gives the host
// check's message for that violation.
//
// The runtime library (no MLIR): compiling is the caller's part (Target's
// compileToPtx, or kvattn_plan_create over IR text).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_RUNTIME_PLAN_H
#define KVATTN_RUNTIME_PLAN_H

#include "kvattn/Runtime/Runtime.h"

#include <array>

namespace mlir {
namespace kvattn {
namespace rt {

/// Slots of encoded tensor maps a plan keeps per `tensor_maps` parameter:
/// runs alternating between this many buffer/size combinations encode
/// nothing; a captured graph keeps the slot it used.
constexpr size_t kTensorMapSlots = 4;

class Plan {
public:
  /// Loads `image` (PTX, or the emulator's device IR) described by
  /// `manifest` on `runtime`, allocates the status word and the split-KV
  /// workspaces for sizes up to `bounds` (B, Hq, L, S, ...: each run's
  /// sizes must stay within them), and clears the status word. The runtime
  /// must outlive the plan.
  ///
  /// Refused by name: a negative bound; a bound of 0 ("unbounded") that a
  /// workspace's size depends on; a workspace whose size overflows 64 bits;
  /// a manifest with more than one attention kernel (the plan binds buffers
  /// by name: two attentions would share `query`, `out`, ...); planning
  /// while the runtime's current stream is being captured (the status
  /// word's clearing fills would be recorded into the graph).
  ///
  /// `names` (optional, one map per manifest kernel) renames the buffers a
  /// kernel's parameters bind to: run() looks parameter `p` of kernel `i`
  /// up as `names[i][p]` when given. A decode step's appends need it: the
  /// two launches of one append kernel (K, then V) share the parameter
  /// names `update` and `cache`, so the C API binds them to `update_k` /
  /// `key` and `update_v` / `value` (planBufferNames in
  /// kvattn/GPU/PlanCompile.h). A validation kernel that checks what an
  /// earlier one checks (the V append's) is not launched.
  static Status
  create(Runtime &runtime, const std::string &image, const Manifest &manifest,
         const Sizes &bounds, std::unique_ptr<Plan> &plan,
         const std::vector<std::map<std::string, std::string>> &names = {});
  ~Plan();

  /// Device memory the plan owns: the status word and the workspaces.
  size_t workspaceBytes() const { return workspaceBytes_; }
  /// The parameters run() takes (tensors and metadata), by name.
  const std::vector<std::string> &parameters() const { return parameters_; }
  const Manifest &manifest() const { return manifest_; }
  /// The buffer name run() looks parameter `param` of kernel `index` (in
  /// the manifest) up as: `param`, or its name in create()'s `names`.
  const std::string &bound(size_t index, const std::string &param) const;
  /// Whether kernel `index` of the manifest has a parameter `param`.
  bool hasParameter(size_t index, const std::string &param) const;

  /// One step on the runtime's current stream: `buffers` names a device
  /// pointer for every tensor and every metadata parameter. Queues the
  /// validation kernels, then the kernels, in the manifest's order; checks
  /// on the host only what needs no device value (sizes within the bounds,
  /// every parameter given, alignment, tensor maps). No allocation or
  /// wait; a copy only where a kernel's tensor maps changed (a buffer
  /// pointer or a size no map slot holds: docs/runtime.md, "Tensor maps
  /// and plans").
  /// `stream`: where to queue (kCurrentStream: the runtime's current one).
  ///
  /// Threads: runs of one plan may be queued from several threads at once
  /// (each call packs its own parameters); on the device they share the
  /// plan's status word and split-KV workspaces, so runs of a plan with
  /// workspaces (workspaceBytes() above the status word's 128 bytes) must
  /// not overlap on the device: order their streams or use one plan per
  /// stream.
  Status run(const Sizes &sizes,
             const std::map<std::string, DevicePtr> &buffers,
             uint64_t stream = kCurrentStream);
  /// The convenience path: metadata on the host, validated on the host with
  /// Runtime::launch's rules and messages and copied through the runtime's
  /// metadata ring (one asynchronous copy per kernel whose metadata
  /// changed). Not capturable: refused while `stream` is being captured (a
  /// graph would replay the staging address). A buffer or metadata name
  /// that is no parameter of the plan, or a name given as both, is refused.
  Status runWithHostMetadata(
      const Sizes &sizes, const std::map<std::string, DevicePtr> &buffers,
      const std::map<std::string, std::vector<int64_t>> &metadata,
      uint64_t stream = kCurrentStream);

  /// Reads the status word (synchronises the stream, then one synchronous
  /// copy): ok when no violation was recorded, else the message the host
  /// validation gives for the first violation, e.g. "launch of
  /// 'decode_kvattn_0': kv_len[1] = 301 is outside [0, S = 128] (batch 1)".
  Status status();
  /// Clears the status word (two fills queued on the stream): later runs
  /// compute again.
  Status clearStatus();

private:
  Plan(Runtime &runtime) : runtime_(runtime) {}
  Status launchKernel(size_t index, const Sizes &sizes,
                      const std::map<std::string, DevicePtr> &buffers,
                      int64_t phase, uint64_t stream);
  Runtime &runtime_;
  Manifest manifest_;
  const Module *module_ = nullptr;
  Sizes bounds_;
  DevicePtr status_ = 0;
  /// Split-KV workspaces by name (out_parts, lse_parts).
  std::map<std::string, DevicePtr> workspaces_;
  size_t workspaceBytes_ = 0;
  std::vector<std::string> parameters_;
  std::vector<std::map<std::string, std::string>> names_;
  /// Encoded tensor maps by kernel and parameter (null: not a tensor_maps
  /// parameter); thread-safe themselves.
  std::vector<std::vector<std::unique_ptr<TensorMapSlots>>> mapSlots_;
  /// Kernel `index`'s pointer parameters by parameter name (the maps'
  /// `buffer`): `buffers` through create()'s names, and the workspaces.
  std::map<std::string, DevicePtr>
  mapBuffers(size_t index,
             const std::map<std::string, DevicePtr> &buffers) const;
  /// Launch order: the validation kernels, then the others.
  std::vector<size_t> validators_, kernels_;
  /// The kernel each validation ordinal checks (status()).
  std::vector<std::string> checked_;
  // Nothing above changes after create(): concurrent runs only read it.
};

/// The message of the violation a status word records (words[0] != 0),
/// as the host validation words it; `kernels` names the kernel each
/// validation ordinal checks.
std::string describeViolation(const std::array<int64_t, 16> &words,
                              const std::vector<std::string> &kernels);

} // namespace rt
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_RUNTIME_PLAN_H
