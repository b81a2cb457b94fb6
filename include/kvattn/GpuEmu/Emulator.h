//===- Emulator.h - run kvattn's device code on the host --------*- C++ -*-===//
//
// The emulated GPU (docs/gpu-emulator.md). It executes the device LLVM IR
// that LLVM's NVPTX back end would compile (the image of
// DeviceImage::LlvmIR): the module is retargeted to the host with LLVM's own
// APIs (calling conventions, target attributes, shared-memory globals, every
// llvm.nvvm.* call redirected to the emulator, memory accesses and basic
// blocks instrumented) and JIT-compiled with ORC. Each CUDA thread of a CTA
// is a fiber; warp collectives (shfl.sync, ldmatrix, mma.sync) are
// rendezvous points of the lanes of a warp, barriers of all threads of the
// CTA; CTAs run one after another.
//
// Like compute-sanitizer it reports global accesses outside the launch's
// buffers, shared accesses outside the launch's shared memory, and
// shared-memory hazards between threads not separated by a barrier
// (including reads of a cp.async destination before its wait_group);
// shared memory is filled with NaN (0xFF bytes) at each CTA's start, device
// allocations likewise. Its counters (instructions, mma, ldmatrix,
// bank-conflict replays, global sectors, barriers, per KV block) are the
// performance proxy until a GPU is measured.
//
// One emulator per process (JIT code calls back into it); not thread-safe.
// libkvattn_cuda_emu.so (EmuDriver.h) puts the CUDA Driver API on top of it.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_GPUEMU_EMULATOR_H
#define KVATTN_GPUEMU_EMULATOR_H

#include "kvattn/Support/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
namespace kvattn {
namespace emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// What one launch did, summed over its CTAs. Warp-level counts count a
/// warp instruction once (an mma.sync of 32 lanes is 1); "kv" counts are
/// those of the kernel's KV loop (docs/gpu-emulator.md, "Counters").
struct LaunchCounters {
  std::string kernel;
  Dim3 grid, block;
  uint64_t sharedBytes = 0; ///< static + dynamic shared memory per CTA
  uint64_t ctas = 0, warpsPerCta = 0;
  /// KV-loop iterations, summed over CTAs (0: the kernel has no KV loop):
  /// per CTA, the loop's latch executions over the threads that ran it
  /// (a producer warpgroup, which never does, is not counted).
  uint64_t kvBlocks = 0;
  /// The most KV-loop iterations of one CTA: the launch's longest program
  /// (with split-KV, its longest chunk), which bounds its time when the
  /// CTAs run side by side.
  uint64_t kvBlocksMaxCta = 0;
  /// The warps of a CTA that ran the KV loop (all of them but a producer
  /// warpgroup's; the most over CTAs): the per-warp figures divide by it.
  uint64_t kvWarpsPerCta = 0;
  /// LLVM IR instructions executed, summed over threads.
  uint64_t threadInsts = 0, kvThreadInsts = 0;
  /// Barriers completed: the CTA's (bar.sync 0) and named ones
  /// (bar.sync id, n), each completion once.
  uint64_t barriers = 0, kvBarriers = 0;
  uint64_t mma = 0, kvMma = 0;
  uint64_t ldmatrix = 0, kvLdmatrix = 0;
  uint64_t shfl = 0, kvShfl = 0;
  /// Shared-memory warp requests (loads, stores, ldmatrix) and the extra
  /// wavefronts their bank conflicts cost (replays).
  uint64_t sharedRequests = 0, kvSharedRequests = 0;
  uint64_t bankConflicts = 0, kvBankConflicts = 0;
  /// Global warp requests, the 32-byte sectors they touch and the distinct
  /// bytes they use (cp.async sources included).
  uint64_t globalRequests = 0, globalSectors = 0, globalBytes = 0;
  uint64_t cpAsyncBytes = 0;
  /// sm_90a (docs/gpu-emulator.md, "Hopper instructions"): per warpgroup of
  /// the CTA (summed over CTAs), wgmma.mma_async issued, bytes TMA moved
  /// (loads into shared memory, stores out of it) and mbarrier waits; and
  /// the wgmma count per shape ("m64n128k16.bf16").
  struct Warpgroup {
    uint64_t wgmma = 0, tmaLoadBytes = 0, tmaStoreBytes = 0, mbarrierWaits = 0;
  };
  std::vector<Warpgroup> warpgroups;
  std::vector<std::pair<std::string, uint64_t>> wgmmaShapes;
  /// Whether the launch executed any sm_90a instruction (the line then
  /// carries the fields above).
  bool hopper = false;

  /// One line: "emu: kernel=NAME key=value ..." (the fields of
  /// docs/gpu-emulator.md).
  std::string line() const;
};

/// A fault planted in a module when it is loaded, to prove that the checks
/// catch it (test/GpuEmu). `index` counts sites of that kind in module
/// order.
struct FaultInjection {
  enum Kind {
    None,
    DropBarrier,   ///< delete the index-th CTA barrier
    WaitGroupPlus, ///< the index-th cp.async.wait_group waits for one less
    GlobalOffset,  ///< the index-th global load reads 1 GiB below its address
    DropMbarrierWait, ///< delete the index-th mbarrier wait (try/test_wait)
    DropWgmmaWait,    ///< delete the index-th wgmma.wait_group
    DropFenceProxy,   ///< delete the index-th fence.proxy.async
    ExpectTx,         ///< the index-th expect_tx expects 16 bytes more
  } kind = None;
  unsigned index = 0;
};

/// Parses "drop-barrier:N", "wait-group:N", "global-offset:N",
/// "drop-mbarrier-wait:N", "drop-wgmma-wait:N", "drop-fence-proxy:N",
/// "expect-tx:N" (N defaults to 0).
Status parseFaultInjection(const std::string &text, FaultInjection &fault);

struct EmulatorOptions {
  /// A launch with a memcheck or racecheck report fails (the default);
  /// false: reports are only collected.
  bool failOnReport = true;
  /// Print each report to stderr as it is found.
  bool printReports = false;
  /// Group accesses into warp requests for the shared/global counters
  /// (bank conflicts, sectors). Off, the checks still run and the other
  /// counters are still kept; runs are about a third faster.
  bool countRequests = true;
  FaultInjection fault;
};

/// cuTensorMapEncodeTiled of the emulated driver: validates the arguments
/// as the CUDA driver documents them and writes the emulator's encoding
/// into the 128-byte opaque map (TMA reads it back from device memory).
/// The enums are the driver's values (CUtensorMapDataType, ...Interleave,
/// ...Swizzle, ...L2promotion, ...FloatOOBfill).
Status encodeTensorMapTiled(void *tensorMap, int dataType, unsigned rank,
                            void *globalAddress, const uint64_t *globalDim,
                            const uint64_t *globalStrides,
                            const uint32_t *boxDim,
                            const uint32_t *elementStrides, int interleave,
                            int swizzle, int l2Promotion, int oobFill);

class Module;

class Emulator {
public:
  /// The process's emulator.
  static Emulator &get();

  EmulatorOptions &options() { return options_; }

  /// Loads a device LLVM IR image (text). Errors name what the emulator
  /// cannot run: PTX instead of LLVM IR, an unknown intrinsic (with the
  /// kernel that calls it), an undefined function.
  Status loadModule(const std::string &image, Module *&module);
  void unloadModule(Module *module);
  /// Whether `module` defines kernel `name`.
  bool hasKernel(const Module &module, const std::string &name) const;
  /// The number of parameters of kernel `name` (each 8 bytes in kvattn's
  /// ABI); -1 when the module has no such kernel.
  int kernelParamCount(const Module &module, const std::string &name) const;

  /// Device memory: host memory the emulator tracks (memcheck knows each
  /// allocation's extent). New memory holds 0xFF bytes (NaN).
  Status allocate(size_t bytes, uint64_t &address);
  Status release(uint64_t address);
  /// Checks that [address, address + bytes) lies in one allocation.
  Status checkRange(uint64_t address, size_t bytes,
                    const std::string &doing) const;
  size_t liveAllocations() const;

  /// Runs a kernel to completion. `params` is cuLaunchKernel's array: one
  /// pointer to each parameter's value. Fails on a fault (the first one
  /// ends the launch) or, with failOnReport, on any report; the message
  /// holds the reports.
  /// `invalidLaunch` (optional) tells a launch refused before it ran (no
  /// such kernel, bad dimensions, too much shared memory) from one that
  /// failed while running.
  Status launch(Module &module, const std::string &kernel, Dim3 grid,
                Dim3 block, unsigned dynamicSharedBytes, void **params,
                bool *invalidLaunch = nullptr);

  /// The counters of the launches since the last call, in order.
  std::vector<LaunchCounters> takeCounters();
  /// Every report of the launches since the last call.
  std::vector<std::string> takeReports();

  /// Largest static + dynamic shared memory per CTA (sm_90: 227 KiB).
  static constexpr uint64_t kMaxSharedBytes = 227 * 1024;
  static constexpr unsigned kMaxThreadsPerBlock = 1024;

private:
  Emulator();
  ~Emulator();
  EmulatorOptions options_;
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace emu
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_GPUEMU_EMULATOR_H
