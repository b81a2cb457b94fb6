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
  // sm_90a (Hopper.cpp).
  WgmmaFence,  ///< wgmma.fence.sync.aligned: the warpgroup
  WgmmaMma,    ///< wgmma.mma_async.sync.aligned: the warpgroup
  WgmmaCommit, ///< wgmma.commit_group.sync.aligned: the warpgroup
  WgmmaWait,   ///< wgmma.wait_group.sync.aligned N: the warpgroup
  SetMaxNReg,  ///< setmaxnreg.{inc,dec}.sync.aligned.u32: the warpgroup
  WgmmaUse,    ///< a read of a wgmma result (the register hazard check)
  ElectSync,   ///< elect.sync: the lanes of its member mask
  MbarInit,
  MbarArrive, ///< arrive / arrive.expect_tx (count, tx as operands)
  MbarExpectTx,
  MbarCompleteTx,
  MbarWait, ///< try_wait.parity / test_wait.parity (blocking in the emulator)
  TmaLoad,  ///< cp.async.bulk.tensor.Nd.shared::cta.global.tile
  TmaStore, ///< cp.async.bulk.tensor.Nd.global.shared::cta.tile
  BulkCommit,
  BulkWait, ///< cp.async.bulk.wait_group[.read] N
  FenceProxyAsync,
  NamedBarrier, ///< barrier.cta.{sync,arrive}[.aligned] id, n
};

inline bool isWarpgroupCollective(Op op) {
  return op == Op::WgmmaFence || op == Op::WgmmaMma || op == Op::WgmmaCommit ||
         op == Op::WgmmaWait || op == Op::SetMaxNReg;
}

inline bool isCollective(Op op) {
  return op == Op::Barrier || op == Op::Shfl || op == Op::Vote ||
         op == Op::WarpSync || op == Op::Ldmatrix || op == Op::Mma ||
         op == Op::ElectSync || isWarpgroupCollective(op);
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
  // sm_90a operands.
  int wgmmaN = 0;       ///< wgmma m64nNk16
  bool wgmmaRs = false; ///< A from registers (4 x b32) instead of a descriptor
  int scaleA = 1, scaleB = 1, transA = 0, transB = 0; ///< immediates
  bool setmaxnregInc = false;
  int setmaxnregCount = 0;
  bool expectTx = false;    ///< mbarrier.arrive.expect_tx
  bool arriveCount = false; ///< the arrive takes a count operand
  bool testWait = false;    ///< test_wait (else try_wait)
  int tmaDims = 0;
  bool bulkRead = false;   ///< cp.async.bulk.wait_group.read
  bool barrierSync = true; ///< named barrier: sync (else arrive)
  /// barrier.cta.red.{popc,and,or}: the CTA barrier that also reduces a
  /// predicate of every thread (operand 1) into each one's result.
  enum BarrierReduction {
    NoReduction,
    Popc,
    And,
    Or
  } barrierReduction = NoReduction;
  uint32_t wgmmaSite = 0; ///< WgmmaUse: the wgmma whose result is read

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
  /// Whether the kernel uses mbarriers or named barriers (racecheck then
  /// keeps vector clocks).
  bool hopperSync = false;
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

/// wgmma.mma_async m64nNk16 .f32 += {bf16,f16} x {bf16,f16} for the 128
/// threads of a warpgroup: `a` is A (64 x 16, row-major 16-bit bits, from
/// the descriptor or gathered from the RS fragments), `b` is B as N x 16
/// (element (n, k) at b[n * 16 + k]); `acc[t]` thread t's N/2 f32 in and
/// out in the ISA's accumulator layout. Products are exact in f32; the sum
/// of D and the 16 products is formed in double and rounded once.
void wgmmaM64NK16(int n, bool bf16, const uint16_t *a, const uint16_t *b,
                  int scaleA, int scaleB, bool scaleD, float *const acc[128]);
/// The A fragment of the register form: thread t's register q (0-3) holds
/// A[16w + g + 8 (q % 2)][8 (q / 2) + 2 i + {0, 1}] (w = t / 32, g = (t %
/// 32) / 4, i = t % 4), the mma.sync A layout per warp.
void wgmmaGatherA(const uint32_t *const regs[128], uint16_t *a);

/// The byte offset inside a wgmma operand of element (mn, k) of one
/// m64nNk16 step, per the matrix descriptor (PTX ISA, "Matrix Descriptor
/// Format"; CUTLASS's canonical GMMA layouts): K-major (trans 0) or MN-major
/// (trans 1), swizzle 0 none, 1 128B, 2 64B, 3 32B, applied to the shared
/// address bits. Returns the shared offset of the element.
uint64_t wgmmaElementOffset(uint64_t descriptor, bool mnMajor, int mn, int k);
/// The swizzle of a shared offset for a span of 128 bytes (bits 4-6 ^=
/// 7-9), 64 (4-5 ^= 7-8), 32 (4 ^= 7) or 0 (none): the pattern TMA writes
/// and wgmma descriptors read.
uint64_t swizzleOffset(uint64_t offset, unsigned spanBytes);

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
// FP8 conversions (cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 and
// cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2}): two values per 16 bits, the first
// operand (a) in the upper half, as the PTX ISA packs them.
uint16_t kvemu_ff_to_e4m3x2_rn(float, float);
uint16_t kvemu_ff_to_e4m3x2_rn_relu(float, float);
uint16_t kvemu_ff_to_e5m2x2_rn(float, float);
uint16_t kvemu_ff_to_e5m2x2_rn_relu(float, float);
uint32_t kvemu_e4m3x2_to_f16x2_rn(uint16_t);
uint32_t kvemu_e4m3x2_to_f16x2_rn_relu(uint16_t);
uint32_t kvemu_e5m2x2_to_f16x2_rn(uint16_t);
uint32_t kvemu_e5m2x2_to_f16x2_rn_relu(uint16_t);
/// prmt.b32 d, a, b, c (the default mode): byte i of d is byte c[4i+2:4i]
/// of the pool {b, a}, or its sign replicated when c[4i+3] is set.
uint32_t kvemu_prmt(uint32_t a, uint32_t b, uint32_t c);
}

#endif // KVATTN_LIB_GPUEMU_INTERNAL_H
