//===- FakeCuda.h - a CUDA driver over host memory, for tests ---*- C++ -*-===//
//
// libkvattn_fake_cuda.so implements the driver entry points the runtime
// resolves, over host memory, and records what it was asked. Tests load it
// through $KVATTN_LIBCUDA (the runtime's own dlopen path) and link it to
// read the record: dlopen returns the already loaded library, so both see
// the same state.
//
// Every entry point takes one lock, so the runtime may call it from several
// threads; each stream created is its own handle.
//
// Time is a fake clock: launches and device-to-device copies advance it by
// msPerLaunch / msPerCopy, and an event records the clock when it is
// recorded, so timing code gets exact elapsed times.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TEST_FAKECUDA_FAKECUDA_H
#define KVATTN_TEST_FAKECUDA_FAKECUDA_H

#include <cstdint>
#include <string>
#include <vector>

struct FakeLaunch {
  std::string kernel;
  unsigned grid[3], block[3], sharedMemBytes;
  std::vector<uint64_t> params; // each parameter's 8 bytes
  uint64_t stream;
};

/// A queued (async) copy or fill: kind "HtoD", "DtoD" or "memset".
struct FakeTransfer {
  std::string kind;
  uint64_t dst, src; // memset: src is the byte value
  size_t bytes;
  uint64_t stream;
  /// HtoD: the source lies in memory from cuMemAllocHost (page-locked: a
  /// real driver copies it asynchronously, a pageable source it stages).
  bool pinnedSource = false;
};

struct FakeCudaState {
  int moduleLoads = 0;
  std::vector<std::string> images;
  std::vector<FakeLaunch> launches;
  std::vector<std::pair<std::string, int>> functionAttributes;
  int liveAllocations = 0;
  /// Calls of cuMemAlloc and cuMemAllocHost (never reset by frees), and
  /// page-locked host allocations alive.
  int deviceAllocationCalls = 0, hostAllocationCalls = 0, livePinned = 0;
  std::vector<FakeTransfer> transfers;
  /// Streams waited for (cuStreamSynchronize), in order.
  std::vector<uint64_t> synchronizedStreams;
  int liveEvents = 0;
  /// cuEventSynchronize calls (host waits on an event).
  int eventSynchronizations = 0;
  double clockMs = 0, msPerLaunch = 0, msPerCopy = 0;
  /// CUDA graphs: captures begun and ended, graphs instantiated, replays
  /// (cuGraphLaunch). While a stream is captured, its launches go into the
  /// graph (not `launches`); a replay appends them to `launches`. Calls that
  /// wait (cuStreamSynchronize, cuEventSynchronize, cuMemcpyHtoD/DtoH) fail
  /// with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) during a capture, and
  /// count in `refusedDuringCapture`.
  int captureBegins = 0, captureEnds = 0, graphInstantiations = 0,
      graphLaunches = 0, refusedDuringCapture = 0;
  /// Launches recorded into the last captured graph.
  std::vector<FakeLaunch> captured;
  int multiprocessorCount = 132;
  /// Streams created and not destroyed; cuStreamIsCapturing calls.
  int liveStreams = 0, captureQueries = 0;
};

extern "C" {
/// The record (reset by fakecuda_reset).
FakeCudaState *fakecuda_state();
void fakecuda_reset();
/// The next call of `symbol` (e.g. "cuMemAlloc_v2") returns `code`.
void fakecuda_fail_next(const char *symbol, int code);
/// Calls `hook` inside every cuLaunchKernel that runs (not a captured one),
/// under the driver's lock, before the launch is recorded: device memory is
/// host memory, so the hook reads what the kernel would read at that point
/// of its stream (queued copies ran when they were queued). nullptr: none.
void fakecuda_set_launch_hook(void (*hook)(const FakeLaunch &, void *),
                              void *data);
}

#endif // KVATTN_TEST_FAKECUDA_FAKECUDA_H
