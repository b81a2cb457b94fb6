//===- Internal.h - the emulated GPU's pieces -------------------*- C++ -*-===//
//
// Shared by the module loader (DeviceModule.cpp: device LLVM IR -> host JIT
// code), the machine (Launch.h; Scheduler.cpp: fibers, warps, barriers;
// Memcheck.cpp, Racecheck.cpp, AsyncCopies.cpp: the checks; Counters.cpp)
// and the warp-level semantics (WarpOps.cpp: mma.sync, ldmatrix,
// shfl.sync with the PTX ISA's fragment layouts).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_LIB_GPUEMU_INTERNAL_H
#define KVATTN_LIB_GPUEMU_INTERNAL_H

#include "kvattn/GpuEmu/Emulator.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
namespace orc {
class LLJIT;
} // namespace orc
} // namespace llvm

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

/// What a site of the rewritten module does. Load/Store sites call
/// kvemu_access; the others kvemu_op (argument and result slots of 8 bytes).
enum class Op : uint8_t {
  Load,
  Store,
  Barrier,  ///< barrier.cta.sync: every thread of the CTA
  Shfl,     ///< shfl.sync: the lanes of its member mask
  Vote,     ///< vote.sync: the lanes of its member mask
  WarpSync, ///< bar.warp.sync: the lanes of its member mask
  Ldmatrix, ///< ldmatrix.sync.aligned: all 32 lanes
  Mma,      ///< mma.sync.aligned: all 32 lanes
  CpAsync,
  CpAsyncCommit,
  CpAsyncWait,
  CpAsyncWaitAll,
};

inline bool isCollective(Op op) {
  return op == Op::Barrier || op == Op::Shfl || op == Op::Vote ||
         op == Op::WarpSync || op == Op::Ldmatrix || op == Op::Mma;
}

struct Site {
  Op op = Op::Load;
  /// The function holding the site, and the instruction as LLVM prints it
  /// (for reports).
  std::string function;
  std::string text;
  /// Inside the KV loop of its kernel (the counters per KV block).
  bool inKvLoop = false;
  // Operand shapes.
  enum ShflMode { Up, Down, Bfly, Idx } shflMode = Bfly;
  bool shflPredicate = false; ///< returns {value, in-range predicate}
  enum VoteMode { All, Any, Uni, Ballot } voteMode = All;
  int matrices = 0; ///< ldmatrix x1/x2/x4
  bool trans = false;
  bool bf16 = false; ///< mma A/B element type: bf16 (else f16)
  int cpBytes = 0;   ///< cp.async size
  bool cpSrcSize = false;
  int waitGroups = 0; ///< cp.async.wait_group N (an immediate)

  std::string describe() const { return function + ": " + text; }
};

/// Every site of every loaded module, by id (ids are process-wide).
std::vector<Site> &sites();

/// Special registers (kvemu_sreg's argument).
enum Sreg : uint32_t {
  TidX,
  TidY,
  TidZ,
  NtidX,
  NtidY,
  NtidZ,
  CtaidX,
  CtaidY,
  CtaidZ,
  NctaidX,
  NctaidY,
  NctaidZ,
  LaneId,
  WarpSize,
};

struct Kernel {
  std::string name;
  void (*entry)(void **params) = nullptr;
  /// Per parameter: a pointer (memcheck learns the launch's buffers from
  /// them) or a scalar.
  std::vector<bool> pointerParams;
  bool hasKvLoop = false;
};

/// The shared-memory arena all CTAs use in turn (CTAs run one at a time):
/// static shared variables at their offsets, then the dynamic shared
/// memory. Its address is fixed for the process.
struct Arena {
  static constexpr uint64_t kBytes = 256 * 1024;
  static uint8_t *base();
};

} // namespace detail

class Module {
public:
  ~Module();
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::map<std::string, detail::Kernel> kernels;
  /// Static shared memory (all of the module's shared variables) and the
  /// offset of the dynamic shared memory in the arena.
  uint64_t staticSharedBytes = 0;
  uint64_t dynamicSharedOffset = 0;
};

namespace detail {

/// Parses, checks, rewrites and JIT-compiles a device LLVM IR image.
Status loadDeviceModule(const std::string &image, const FaultInjection &fault,
                        std::unique_ptr<Module> &module);

/// Device memory the emulator allocated.
struct Allocation {
  uint64_t base = 0, bytes = 0;
};

/// Runs one launch (Scheduler.cpp).
Status runLaunch(const Module &module, const Kernel &kernel, Dim3 grid,
                 Dim3 block, unsigned dynamicSharedBytes, void **params,
                 const std::map<uint64_t, Allocation> &allocations,
                 const EmulatorOptions &options, LaunchCounters &counters,
                 std::vector<std::string> &reports);

// Warp-level semantics (WarpOps.cpp). Lanes are 0..31; `args[l]` and
// `results[l]` are lane l's 8-byte slots.

/// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: per
/// lane A 4 x b32, B 2 x b32, C 4 x f32 in, D 4 x f32 out.
void mmaM16N8K16(bool bf16, uint64_t *const args[32],
                 uint64_t *const results[32]);
/// ldmatrix.sync.aligned.m8n8.xN[.trans].b16: `rows[m][r]` is the address
/// of row r of matrix m (from lane 8m + r); lane l's register m gets its
/// two elements.
void ldmatrix(int matrices, bool trans, const uint8_t *const rows[4][8],
              uint64_t *const results[32]);
/// shfl.sync on 32-bit values; `active` lanes take part.
void shflSync(Site::ShflMode mode, bool predicate, uint32_t active,
              uint64_t *const args[32], uint64_t *const results[32]);

/// Round-to-nearest-even conversions, as cvt.rn does (NaN stays NaN).
uint16_t floatToBf16(float value);
uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);
float bf16ToFloat(uint16_t bits);

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir

extern "C" {
/// Host symbols the JIT code calls and reads (Scheduler.cpp, Counters.cpp).
void kvemu_access(void *address, uint64_t size, uint32_t site);
void kvemu_op(uint32_t site, uint64_t *args, uint64_t *results);
uint32_t kvemu_sreg(uint32_t which);
/// [0] LLVM IR instructions executed, [1] of them in KV loops, [2] KV-loop
/// latch executions (summed over threads).
extern uint64_t kvemu_counters[3];

/// Scalar NVVM intrinsics with the PTX semantics (WarpOps.cpp).
float kvemu_ex2_approx(float);
float kvemu_ex2_approx_ftz(float);
float kvemu_lg2_approx(float);
float kvemu_lg2_approx_ftz(float);
float kvemu_fabs(float);
float kvemu_saturate(float);
float kvemu_fmax(float, float);
float kvemu_fmin(float, float);
float kvemu_fma_rn(float, float, float);
float kvemu_fma_rz(float, float, float);
float kvemu_fma_rm(float, float, float);
float kvemu_fma_rp(float, float, float);
float kvemu_add_rn(float, float);
float kvemu_mul_rn(float, float);
float kvemu_rcp_rn(float);
float kvemu_rcp_approx_ftz(float);
float kvemu_sqrt_rn(float);
uint16_t kvemu_f32_to_bf16(float);
uint16_t kvemu_f32_to_f16(float);
float kvemu_f16_to_f32(uint16_t);
float kvemu_bf16_to_f32(uint16_t);
float kvemu_libcall_truncsfbf2(float);
float kvemu_libcall_truncsfhf2(float);
float kvemu_libcall_extendhfsf2(float);
float kvemu_libcall_extendbfsf2(float);
}

#endif // KVATTN_LIB_GPUEMU_INTERNAL_H
