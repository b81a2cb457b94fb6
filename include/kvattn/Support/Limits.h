//===- Limits.h - the sizes kvattn accepts ----------------------*- C++ -*-===//
//
// Every size limit the compiler, the reference and the runtime enforce, in
// one place: each is checked before any lowering or allocation and refused
// with an error naming the value and the limit (docs/robustness.md lists
// them with their reasons).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_LIMITS_H
#define KVATTN_SUPPORT_LIMITS_H

#include <cstdint>
#include <optional>
#include <vector>

namespace mlir::kvattn::limits {

/// Largest position (offset + row, explicit positions, k_offset + key):
/// `pos + L`, `pos + S` and position differences stay far from overflowing
/// int64.
inline constexpr int64_t kMaxPosition = int64_t(1) << 62;

/// Head dims D and Dv of a compiled attention (CPU and GPU): the
/// per-program tiles are sized by them (on the CPU they live on the stack).
/// 576 is DeepSeek MLA's latent + rotary query/key head (512 + 64).
inline constexpr int64_t kMaxHeadDim = 576;
/// Head dims of a GPU kernel: beyond 256 the per-thread registers, the
/// shared memory and the NVPTX compile time (seconds at D = 512, minutes at
/// D = 4096) grow without benefit; FlashAttention stops at 256 too.
inline constexpr int64_t kMaxGpuHeadDim = 256;
/// Head dims of a GPU kernel of the latent form (DeepSeek MLA: D = 576,
/// Dv = 512), whose value split keeps a wide accumulator within the
/// registers (docs/gpu-lowering.md, "The latent form"); the split-KV merge
/// takes the same.
inline constexpr int64_t kMaxGpuLatentHeadDim = kMaxHeadDim;

/// Query rows and keys per program / KV block (pass options and automatic
/// choices). With kMaxHeadDim this bounds a CPU program's scratch tiles to
/// about 1.5 MiB of stack (256 x 576 f32 query and accumulator tiles,
/// 256 x 256 scores).
inline constexpr int64_t kMaxBlockM = 256;
inline constexpr int64_t kMaxBlockN = 256;
/// Warps per GPU program (512 threads; the hardware allows 1024).
inline constexpr int64_t kMaxNumWarps = 16;
/// K/V pipeline stages.
inline constexpr int64_t kMaxNumStages = 8;
/// KV chunks per program of a split-KV schedule (the automatic choice takes
/// at most 16); the partial results are split x the output.
inline constexpr int64_t kMaxSplitKv = 256;

/// Threads of the CPU grid (the OpenMP team); each holds one program's
/// scratch tiles on its stack (libomp's worker stacks are 4 MiB).
inline constexpr int64_t kMaxThreads = 1024;

/// Elements of one tensor (a static shape in the IR, or a tensor made on
/// the host): 2^48 elements is 1 PiB of f32, far above any memory, and far
/// from overflowing int64 in byte counts and index arithmetic.
inline constexpr int64_t kMaxElements = int64_t(1) << 48;

/// The product of `shape`, or std::nullopt when a dimension is negative or
/// the product of its non-zero dimensions exceeds kMaxElements. A 0 makes
/// the tensor empty, but its strides are still products of the other dims:
/// in tensor<0x6x9223372036854775807x8xf32> the stride of dim 1 overflows.
inline std::optional<int64_t> elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > kMaxElements / d)
      return std::nullopt;
    n *= d;
  }
  return empty ? 0 : n;
}

} // namespace mlir::kvattn::limits

#endif // KVATTN_SUPPORT_LIMITS_H
