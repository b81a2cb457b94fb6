//===- FakeCuda.h - a CUDA driver over host memory, for tests ---*- C++ -*-===//
//
// libkvattn_fake_cuda.so implements the driver entry points the runtime
// resolves, over host memory, and records what it was asked. Tests load it
// through $KVATTN_LIBCUDA (the runtime's own dlopen path) and link it to
// read the record: dlopen returns the already loaded library, so both see
// the same state.
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
};

struct FakeCudaState {
  int moduleLoads = 0;
  std::vector<std::string> images;
  std::vector<FakeLaunch> launches;
  std::vector<std::pair<std::string, int>> functionAttributes;
  int liveAllocations = 0;
};

extern "C" {
/// The record (reset by fakecuda_reset).
FakeCudaState *fakecuda_state();
void fakecuda_reset();
/// The next call of `symbol` (e.g. "cuMemAlloc_v2") returns `code`.
void fakecuda_fail_next(const char *symbol, int code);
}

#endif // KVATTN_TEST_FAKECUDA_FAKECUDA_H
