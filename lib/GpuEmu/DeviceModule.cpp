//===- DeviceModule.cpp - device LLVM IR -> host JIT code -----------------===//
//
// Takes the device LLVM IR that NVPTX would compile and makes it run on the
// host, with LLVM's APIs only:
//   - kernels lose the ptx_kernel calling convention, functions their
//     target-cpu/target-features (sm_XX means nothing to the host);
//   - shared-memory variables become external symbols inside the emulator's
//     shared-memory arena (the dynamic one after the static ones);
//   - every llvm.nvvm.* call is redirected: special registers to
//     kvemu_sreg, scalar math to host functions with the PTX semantics,
//     warp collectives, barriers and cp.async to kvemu_op (8-byte argument
//     and result slots, so aggregates never cross a C ABI);
//   - conversions to and from f16/bf16 call the emulator's round-to-nearest
//     -even conversions (cvt.rn), not the host's libcalls, and so does an
//     f16 multiply (mul.rn.f16: exact in f32, rounded once); any other
//     f16/bf16 arithmetic is refused;
//   - loads and stores that may touch shared or global memory call
//     kvemu_access first (memcheck, racecheck, coalescing and bank
//     counters); accesses to the thread's own stack are left alone;
//   - each basic block adds its instruction count to kvemu_counters, and the
//     kernel's KV loop (its largest top-level loop with a barrier or an
//     mbarrier wait) counts its instructions and iterations apart;
//   - one entry function per kernel unpacks cuLaunchKernel's parameter
//     array.
// Nothing is guessed: an intrinsic without an implementation is an error
// naming it and the kernel that calls it.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "kvattn/Support/HostLibcalls.h"
#include "kvattn/Support/KernelMarkers.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/ModuleSlotTracker.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>

using namespace llvm;

namespace mlir {
namespace kvattn {
namespace emu {

Module::~Module() = default;

namespace detail {

namespace {

constexpr unsigned kSharedAS = 3;
/// kvemu_op's argument and result slots per call (a wgmma m64n256k16 has
/// 128 accumulators in and out).
constexpr unsigned kArgSlots = 144, kResultSlots = 128;

/// Host functions for scalar NVVM intrinsics, with the signature the
/// intrinsic must have ("f(fff)": float(float, float, float)).
struct ScalarIntrinsic {
  const char *name;
  const char *signature;
  const char *symbol;
};

const ScalarIntrinsic kScalarIntrinsics[] = {
    {"llvm.nvvm.ex2.approx.f", "f(f)", "kvemu_ex2_approx"},
    {"llvm.nvvm.ex2.approx.f32", "f(f)", "kvemu_ex2_approx"},
    {"llvm.nvvm.ex2.approx.ftz.f", "f(f)", "kvemu_ex2_approx_ftz"},
    {"llvm.nvvm.ex2.approx.ftz.f32", "f(f)", "kvemu_ex2_approx_ftz"},
    {"llvm.nvvm.lg2.approx.f", "f(f)", "kvemu_lg2_approx"},
    {"llvm.nvvm.lg2.approx.ftz.f", "f(f)", "kvemu_lg2_approx_ftz"},
    {"llvm.nvvm.fabs.f", "f(f)", "kvemu_fabs"},
    {"llvm.nvvm.fabs.f32", "f(f)", "kvemu_fabs"},
    {"llvm.nvvm.saturate.f", "f(f)", "kvemu_saturate"},
    {"llvm.nvvm.fmax.f", "f(ff)", "kvemu_fmax"},
    {"llvm.nvvm.fmin.f", "f(ff)", "kvemu_fmin"},
    {"llvm.nvvm.fma.rn.f", "f(fff)", "kvemu_fma_rn"},
    {"llvm.nvvm.fma.rz.f", "f(fff)", "kvemu_fma_rz"},
    {"llvm.nvvm.fma.rm.f", "f(fff)", "kvemu_fma_rm"},
    {"llvm.nvvm.fma.rp.f", "f(fff)", "kvemu_fma_rp"},
    {"llvm.nvvm.add.rn.f", "f(ff)", "kvemu_add_rn"},
    {"llvm.nvvm.mul.rn.f", "f(ff)", "kvemu_mul_rn"},
    {"llvm.nvvm.rcp.rn.f", "f(f)", "kvemu_rcp_rn"},
    {"llvm.nvvm.sqrt.rn.f", "f(f)", "kvemu_sqrt_rn"},
    // FP8 conversions ('h': <2 x half>, returned by the host as its i32 bits).
    {"llvm.nvvm.ff.to.e4m3x2.rn", "s(ff)", "kvemu_ff_to_e4m3x2_rn"},
    {"llvm.nvvm.ff.to.e4m3x2.rn.relu", "s(ff)", "kvemu_ff_to_e4m3x2_rn_relu"},
    {"llvm.nvvm.ff.to.e5m2x2.rn", "s(ff)", "kvemu_ff_to_e5m2x2_rn"},
    {"llvm.nvvm.ff.to.e5m2x2.rn.relu", "s(ff)", "kvemu_ff_to_e5m2x2_rn_relu"},
    {"llvm.nvvm.e4m3x2.to.f16x2.rn", "h(s)", "kvemu_e4m3x2_to_f16x2_rn"},
    {"llvm.nvvm.e4m3x2.to.f16x2.rn.relu", "h(s)",
     "kvemu_e4m3x2_to_f16x2_rn_relu"},
    {"llvm.nvvm.e5m2x2.to.f16x2.rn", "h(s)", "kvemu_e5m2x2_to_f16x2_rn"},
    {"llvm.nvvm.e5m2x2.to.f16x2.rn.relu", "h(s)",
     "kvemu_e5m2x2_to_f16x2_rn_relu"},
    // Byte permute (prmt.b32, the default mode).
    {"llvm.nvvm.prmt", "i(iii)", "kvemu_prmt"},
};

/// Inline PTX that libdevice uses, as (assembly, constraints): each is one
/// instruction with a host function of the same signature. Any other
/// inline assembly is an error.
struct InlinePtx {
  const char *assembly;
  const char *constraints;
  const char *signature;
  const char *symbol;
};

const InlinePtx kInlinePtx[] = {
    {"rcp.approx.ftz.f32 $0,$1;", "=f,f", "f(f)", "kvemu_rcp_approx_ftz"},
};

/// Host symbols the rewritten module may reference.
struct HostSymbol {
  const char *name;
  void *address;
};

const HostSymbol kHostSymbols[] = {
    {"kvemu_access", reinterpret_cast<void *>(&kvemu_access)},
    {"kvemu_op", reinterpret_cast<void *>(&kvemu_op)},
    {"kvemu_sreg", reinterpret_cast<void *>(&kvemu_sreg)},
    {"kvemu_counters", reinterpret_cast<void *>(&kvemu_counters)},
    {"kvemu_ex2_approx", reinterpret_cast<void *>(&kvemu_ex2_approx)},
    {"kvemu_ex2_approx_ftz", reinterpret_cast<void *>(&kvemu_ex2_approx_ftz)},
    {"kvemu_lg2_approx", reinterpret_cast<void *>(&kvemu_lg2_approx)},
    {"kvemu_lg2_approx_ftz", reinterpret_cast<void *>(&kvemu_lg2_approx_ftz)},
    {"kvemu_fabs", reinterpret_cast<void *>(&kvemu_fabs)},
    {"kvemu_saturate", reinterpret_cast<void *>(&kvemu_saturate)},
    {"kvemu_fmax", reinterpret_cast<void *>(&kvemu_fmax)},
    {"kvemu_fmin", reinterpret_cast<void *>(&kvemu_fmin)},
    {"kvemu_fma_rn", reinterpret_cast<void *>(&kvemu_fma_rn)},
    {"kvemu_fma_rz", reinterpret_cast<void *>(&kvemu_fma_rz)},
    {"kvemu_fma_rm", reinterpret_cast<void *>(&kvemu_fma_rm)},
    {"kvemu_fma_rp", reinterpret_cast<void *>(&kvemu_fma_rp)},
    {"kvemu_add_rn", reinterpret_cast<void *>(&kvemu_add_rn)},
    {"kvemu_mul_rn", reinterpret_cast<void *>(&kvemu_mul_rn)},
    {"kvemu_rcp_rn", reinterpret_cast<void *>(&kvemu_rcp_rn)},
    {"kvemu_rcp_approx_ftz", reinterpret_cast<void *>(&kvemu_rcp_approx_ftz)},
    {"kvemu_sqrt_rn", reinterpret_cast<void *>(&kvemu_sqrt_rn)},
    {"kvemu_f32_to_bf16", reinterpret_cast<void *>(&kvemu_f32_to_bf16)},
    {"kvemu_f32_to_f16", reinterpret_cast<void *>(&kvemu_f32_to_f16)},
    {"kvemu_f16_to_f32", reinterpret_cast<void *>(&kvemu_f16_to_f32)},
    {"kvemu_bf16_to_f32", reinterpret_cast<void *>(&kvemu_bf16_to_f32)},
    {"kvemu_ff_to_e4m3x2_rn", reinterpret_cast<void *>(&kvemu_ff_to_e4m3x2_rn)},
    {"kvemu_ff_to_e4m3x2_rn_relu",
     reinterpret_cast<void *>(&kvemu_ff_to_e4m3x2_rn_relu)},
    {"kvemu_ff_to_e5m2x2_rn", reinterpret_cast<void *>(&kvemu_ff_to_e5m2x2_rn)},
    {"kvemu_ff_to_e5m2x2_rn_relu",
     reinterpret_cast<void *>(&kvemu_ff_to_e5m2x2_rn_relu)},
    {"kvemu_e4m3x2_to_f16x2_rn",
     reinterpret_cast<void *>(&kvemu_e4m3x2_to_f16x2_rn)},
    {"kvemu_prmt", reinterpret_cast<void *>(&kvemu_prmt)},
    {"kvemu_e4m3x2_to_f16x2_rn_relu",
     reinterpret_cast<void *>(&kvemu_e4m3x2_to_f16x2_rn_relu)},
    {"kvemu_e5m2x2_to_f16x2_rn",
     reinterpret_cast<void *>(&kvemu_e5m2x2_to_f16x2_rn)},
    {"kvemu_e5m2x2_to_f16x2_rn_relu",
     reinterpret_cast<void *>(&kvemu_e5m2x2_to_f16x2_rn_relu)},
};

/// "f(fi)" for float(float, i32): the scalar signature of `type`, '?' for
/// anything else.
std::string signatureOf(FunctionType *type) {
  auto code = [](Type *t) -> char {
    if (t->isFloatTy())
      return 'f';
    if (t->isDoubleTy())
      return 'd';
    if (t->isIntegerTy(32))
      return 'i';
    if (t->isIntegerTy(64))
      return 'l';
    if (t->isIntegerTy(16))
      return 's';
    if (auto *vec = dyn_cast<FixedVectorType>(t))
      if (vec->getNumElements() == 2 && vec->getElementType()->isHalfTy())
        return 'h';
    if (t->isVoidTy())
      return 'v';
    return '?';
  };
  std::string s(1, code(type->getReturnType()));
  s += '(';
  for (Type *p : type->params())
    s += code(p);
  return s + ')';
}

std::optional<Sreg> sregOf(StringRef name) {
  if (!name.consume_front("llvm.nvvm.read.ptx.sreg."))
    return std::nullopt;
  static const std::pair<const char *, Sreg> table[] = {
      {"tid.x", TidX},       {"tid.y", TidY},       {"tid.z", TidZ},
      {"ntid.x", NtidX},     {"ntid.y", NtidY},     {"ntid.z", NtidZ},
      {"ctaid.x", CtaidX},   {"ctaid.y", CtaidY},   {"ctaid.z", CtaidZ},
      {"nctaid.x", NctaidX}, {"nctaid.y", NctaidY}, {"nctaid.z", NctaidZ},
      {"laneid", LaneId},    {"warpsize", WarpSize}};
  for (auto &[n, s] : table)
    if (name == n)
      return s;
  return std::nullopt;
}

/// An immediate operand of `call`, or -1.
int64_t immediate(CallInst &call, unsigned i) {
  if (i >= call.arg_size())
    return -1;
  auto *c = dyn_cast<ConstantInt>(call.getArgOperand(i));
  return c ? c->getSExtValue() : -1;
}

/// The sm_90a intrinsics (Hopper.cpp).
std::optional<Site> hopperSiteOf(CallInst &call, StringRef name) {
  Site s;
  auto op = [&](Op o) {
    s.op = o;
    return std::optional<Site>(s);
  };
  if (name == "llvm.nvvm.wgmma.fence.sync.aligned")
    return op(Op::WgmmaFence);
  if (name == "llvm.nvvm.wgmma.commit_group.sync.aligned")
    return op(Op::WgmmaCommit);
  if (name == "llvm.nvvm.wgmma.wait_group.sync.aligned") {
    s.waitGroups = static_cast<int>(immediate(call, 0));
    return s.waitGroups < 0 ? std::nullopt : op(Op::WgmmaWait);
  }
  if (name == "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32" ||
      name == "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32") {
    s.setmaxnregInc = name.contains(".inc.");
    s.setmaxnregCount = static_cast<int>(immediate(call, 0));
    return op(Op::SetMaxNReg);
  }
  if (name == "llvm.nvvm.elect.sync")
    return op(Op::ElectSync);
  if (name == "llvm.nvvm.mbarrier.init.shared" ||
      name == "llvm.nvvm.mbarrier.init")
    return op(Op::MbarInit);
  if (name == "llvm.nvvm.mbarrier.arrive.shared" ||
      name == "llvm.nvvm.mbarrier.arrive")
    return op(Op::MbarArrive);
  if (name == "llvm.nvvm.mbarrier.arrive.scope.cta.space.cta" ||
      name == "llvm.nvvm.mbarrier.arrive.relaxed.scope.cta.space.cta") {
    s.arriveCount = true;
    return op(Op::MbarArrive);
  }
  if (name == "llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta" ||
      name == "llvm.nvvm.mbarrier.arrive.expect.tx.relaxed.scope.cta.space."
              "cta") {
    s.expectTx = true;
    return op(Op::MbarArrive);
  }
  if (name == "llvm.nvvm.mbarrier.expect.tx.scope.cta.space.cta")
    return op(Op::MbarExpectTx);
  if (name == "llvm.nvvm.mbarrier.complete.tx.scope.cta.space.cta")
    return op(Op::MbarCompleteTx);
  for (const char *wait : {"try.wait", "test.wait"})
    for (const char *relaxed : {"", "relaxed."})
      if (name == std::string("llvm.nvvm.mbarrier.") + wait + ".parity." +
                      relaxed + "scope.cta.space.cta") {
        s.testWait = StringRef(wait) == "test.wait";
        return op(Op::MbarWait);
      }
  if (name.consume_front("llvm.nvvm.cp.async.bulk.")) {
    if (name == "commit.group")
      return op(Op::BulkCommit);
    if (name == "wait.group" || name == "wait.group.read") {
      s.bulkRead = name.ends_with(".read");
      s.waitGroups = static_cast<int>(immediate(call, 0));
      return s.waitGroups < 0 ? std::nullopt : op(Op::BulkWait);
    }
    bool load = name.consume_front("tensor.g2s.cta.tile.") ||
                name.consume_front("tensor.g2s.tile.");
    bool store = !load && name.consume_front("tensor.s2g.tile.");
    if ((load || store) && name.size() == 2 && name[1] == 'd' &&
        name[0] >= '1' && name[0] <= '5') {
      s.tmaDims = name[0] - '0';
      return op(load ? Op::TmaLoad : Op::TmaStore);
    }
    return std::nullopt;
  }
  if (name == "llvm.nvvm.fence.proxy.async" ||
      name == "llvm.nvvm.fence.proxy.async.shared_cta")
    return op(Op::FenceProxyAsync);
  if (name == "llvm.nvvm.barrier.cta.sync.aligned.count" ||
      name == "llvm.nvvm.barrier.cta.sync.count" ||
      name == "llvm.nvvm.barrier.cta.arrive.aligned.count" ||
      name == "llvm.nvvm.barrier.cta.arrive.count") {
    s.barrierSync = name.contains(".sync.");
    return op(Op::NamedBarrier);
  }
  return std::nullopt;
}

/// The site an llvm.nvvm.* call becomes, if kvemu_op implements it.
std::optional<Site> opSiteOf(CallInst &call) {
  StringRef name = call.getCalledFunction()->getName();
  Site s;
  if (name == "llvm.nvvm.barrier0" ||
      name == "llvm.nvvm.barrier.cta.sync.aligned.all" ||
      name == "llvm.nvvm.barrier.cta.sync.all" ||
      name == "llvm.nvvm.barrier.sync") {
    s.op = Op::Barrier;
    return s;
  }
  // barrier.cta.red.{popc,and,or}.aligned.all(i32 id, i1 predicate).
  if (name.consume_front("llvm.nvvm.barrier.cta.red.") &&
      name.consume_back(".aligned.all")) {
    s.op = Op::Barrier;
    if (name == "popc")
      s.barrierReduction = Site::Popc;
    else if (name == "and")
      s.barrierReduction = Site::And;
    else if (name == "or")
      s.barrierReduction = Site::Or;
    else
      return std::nullopt;
    return s;
  }
  if (name == "llvm.nvvm.bar.warp.sync") {
    s.op = Op::WarpSync;
    return s;
  }
  if (name.consume_front("llvm.nvvm.shfl.sync.")) {
    s.op = Op::Shfl;
    StringRef mode, rest;
    std::tie(mode, rest) = name.split('.');
    if (mode == "up")
      s.shflMode = Site::Up;
    else if (mode == "down")
      s.shflMode = Site::Down;
    else if (mode == "bfly")
      s.shflMode = Site::Bfly;
    else if (mode == "idx")
      s.shflMode = Site::Idx;
    else
      return std::nullopt;
    if (rest != "f32" && rest != "i32" && rest != "f32p" && rest != "i32p")
      return std::nullopt;
    s.shflPredicate = rest.ends_with("p");
    return s;
  }
  if (name.consume_front("llvm.nvvm.vote.")) {
    s.op = Op::Vote;
    if (name == "all.sync")
      s.voteMode = Site::All;
    else if (name == "any.sync")
      s.voteMode = Site::Any;
    else if (name == "uni.sync")
      s.voteMode = Site::Uni;
    else if (name == "ballot.sync")
      s.voteMode = Site::Ballot;
    else
      return std::nullopt;
    return s;
  }
  if (name.consume_front("llvm.nvvm.ldmatrix.sync.aligned.m8n8.")) {
    s.op = Op::Ldmatrix;
    if (name.consume_front("x1."))
      s.matrices = 1;
    else if (name.consume_front("x2."))
      s.matrices = 2;
    else if (name.consume_front("x4."))
      s.matrices = 4;
    else
      return std::nullopt;
    s.trans = name.consume_front("trans.");
    if (!name.starts_with("b16"))
      return std::nullopt;
    return s;
  }
  if (name == "llvm.nvvm.mma.m16n8k16.row.col.bf16" ||
      name == "llvm.nvvm.mma.m16n8k16.row.col.f32.f32") {
    s.op = Op::Mma;
    s.bf16 = name.ends_with("bf16");
    return s;
  }
  if (std::optional<Site> hopper = hopperSiteOf(call, name))
    return hopper;
  if (name.consume_front("llvm.nvvm.cp.async.")) {
    if (name == "commit.group") {
      s.op = Op::CpAsyncCommit;
      return s;
    }
    if (name == "wait.all") {
      s.op = Op::CpAsyncWaitAll;
      return s;
    }
    if (name == "wait.group") {
      s.op = Op::CpAsyncWait;
      auto *n = dyn_cast<ConstantInt>(call.getArgOperand(0));
      if (!n)
        return std::nullopt;
      s.waitGroups = static_cast<int>(n->getZExtValue());
      return s;
    }
    s.op = Op::CpAsync;
    if (!name.consume_front("ca.shared.global.") &&
        !name.consume_front("cg.shared.global."))
      return std::nullopt;
    StringRef size, rest;
    std::tie(size, rest) = name.split('.');
    if (size.getAsInteger(10, s.cpBytes) ||
        (s.cpBytes != 4 && s.cpBytes != 8 && s.cpBytes != 16))
      return std::nullopt;
    if (rest == "s")
      s.cpSrcSize = true;
    else if (!rest.empty())
      return std::nullopt;
    return s;
  }
  return std::nullopt;
}

/// An operand fence (CUTLASS's warpgroup_fence_operand; the wgmma
/// lowering's fenceAccumulator): an empty asm whose every output is tied to
/// the input of its index ("=f,...,0,1,..."). It emits nothing; it only
/// keeps the compiler from moving the registers' uses across it. The
/// emulated GPU runs it as the identity.
bool isOperandFence(CallInst &call) {
  auto *assembly = cast<InlineAsm>(call.getCalledOperand());
  if (!StringRef(assembly->getAsmString()).trim().empty())
    return false;
  SmallVector<StringRef> constraints;
  StringRef(assembly->getConstraintString()).split(constraints, ',');
  const size_t n = call.arg_size();
  auto *type = dyn_cast<StructType>(call.getType());
  if (n == 0 || constraints.size() != 2 * n || !type ||
      type->getNumElements() != n)
    return false;
  for (size_t i = 0; i < n; ++i)
    if (!constraints[i].starts_with("=") ||
        constraints[n + i] != std::to_string(i) ||
        type->getElementType(i) != call.getArgOperand(i)->getType())
      return false;
  return true;
}

/// Inline PTX of the sm_90a lowering that has no LLVM intrinsic: the forms
/// MLIR's NVVM dialect writes (`wgmma.mma_async` SS, with `scale-d` set by
/// `setp.ne.b32 p, $k, 0`; the blocking `mbarrier.try_wait.parity` loop) and
/// the register form of `wgmma.mma_async` (A as `{$a, $b, $c, $d}`).
/// `operands` receives the values in kvemu_op's order: for wgmma the N/2
/// accumulator inputs, the A descriptor (or the 4 A registers), the B
/// descriptor, scale-d; for the wait the mbarrier and the parity.
bool hopperInlineSite(CallInst &call, Site &site,
                      SmallVectorImpl<Value *> &operands, std::string &why) {
  auto *assembly = cast<InlineAsm>(call.getCalledOperand());
  std::string text;
  for (char c : assembly->getAsmString())
    text += (c == '\n' || c == '\t') ? ' ' : c;
  SmallVector<StringRef> constraints;
  StringRef(assembly->getConstraintString()).split(constraints, ',');
  unsigned outputs = 0;
  for (StringRef c : constraints)
    outputs += c.starts_with("=");
  // The value of asm operand `$k` (an input) and the constraint of it.
  auto input = [&](unsigned k) -> Value * {
    if (k < outputs || k - outputs >= call.arg_size())
      return nullptr;
    return call.getArgOperand(k - outputs);
  };
  auto reference = [](StringRef token, unsigned &k) {
    token = token.trim();
    return token.consume_front("$") && !token.getAsInteger(10, k);
  };
  StringRef t(text);
  if (t.contains("mbarrier.try_wait.parity.shared.b64") &&
      t.contains("bra.uni")) {
    size_t at = t.find("mbarrier.try_wait.parity.shared.b64");
    StringRef rest = t.substr(at).split(';').first;
    // mbarrier.try_wait.parity.shared.b64 P, [$a], $p[, $hint]
    SmallVector<StringRef> parts;
    rest.split(parts, ',');
    unsigned a, p;
    if (parts.size() < 3 || !reference(parts[1].trim().trim("[]"), a) ||
        !reference(parts[2], p) || !input(a) || !input(p)) {
      why = "an mbarrier.try_wait.parity loop whose operands are not "
            "[$a], $p";
      return false;
    }
    site.op = Op::MbarWait;
    operands.assign({input(a), input(p)});
    return true;
  }
  size_t at = t.find("wgmma.mma_async.sync.aligned.m64n");
  if (at == StringRef::npos)
    return false;
  StringRef rest = t.substr(at + strlen("wgmma.mma_async.sync.aligned.m64n"));
  unsigned n;
  StringRef shape = rest.take_while([](char c) { return isdigit(c); });
  if (shape.getAsInteger(10, n) || n % 8 || n < 8 || n > 256) {
    why = "a wgmma shape other than m64nNk16 (N a multiple of 8 up to 256)";
    return false;
  }
  rest = rest.drop_front(shape.size());
  bool bf16;
  if (rest.consume_front("k16.f32.bf16.bf16"))
    bf16 = true;
  else if (rest.consume_front("k16.f32.f16.f16"))
    bf16 = false;
  else {
    why = "a wgmma type other than .f32.bf16.bf16 or .f32.f16.f16";
    return false;
  }
  StringRef body = rest.split(';').first.trim();
  SmallVector<StringRef> ops;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    if (i == body.size() || (body[i] == ',' && depth == 0)) {
      ops.push_back(body.slice(start, i).trim());
      start = i + 1;
      continue;
    }
    depth += body[i] == '{';
    depth -= body[i] == '}';
  }
  auto list = [&](StringRef op, SmallVectorImpl<unsigned> &out) {
    if (!op.consume_front("{") || !op.consume_back("}"))
      return false;
    SmallVector<StringRef> parts;
    op.split(parts, ',');
    for (StringRef p : parts) {
      unsigned k;
      if (!reference(p, k))
        return false;
      out.push_back(k);
    }
    return true;
  };
  SmallVector<unsigned> d, aRegs;
  bool rs = ops.size() >= 2 && ops[1].starts_with("{");
  if (ops.size() != (rs ? 7u : 8u) || !list(ops[0], d) || d.size() != n / 2 ||
      (rs && (!list(ops[1], aRegs) || aRegs.size() != 4))) {
    why = "wgmma operands other than {d...}, a, b-desc, scale-d, imm-scale-a, "
          "imm-scale-b[, imm-trans-a], imm-trans-b";
    return false;
  }
  // Immediates: literal, or an "n" operand.
  auto imm = [&](StringRef op, int &value) {
    unsigned k;
    if (reference(op, k)) {
      auto *c = dyn_cast_or_null<ConstantInt>(input(k));
      if (!c)
        return false;
      value = static_cast<int>(c->getSExtValue());
      return true;
    }
    return !op.getAsInteger(10, value);
  };
  int scaleA, scaleB, transA = 0, transB;
  if (!imm(ops[4], scaleA) || !imm(ops[5], scaleB) ||
      (!rs && !imm(ops[6], transA)) || !imm(ops[rs ? 6 : 7], transB) ||
      (scaleA != 1 && scaleA != -1) || (scaleB != 1 && scaleB != -1) ||
      transA < 0 || transA > 1 || transB < 0 || transB > 1) {
    why = "wgmma immediates that are not constants (scales 1 or -1, "
          "transposes 0 or 1)";
    return false;
  }
  // The accumulator inputs: each output tied to an input.
  for (unsigned o = 0; o < n / 2; ++o) {
    if (d[o] != o) {
      why = "wgmma outputs other than $0..$" + std::to_string(n / 2 - 1);
      return false;
    }
    Value *tied = nullptr;
    for (unsigned i = outputs; i < constraints.size(); ++i)
      if (constraints[i] == std::to_string(o))
        tied = input(i);
    if (!tied) {
      why = "a wgmma accumulator register not tied to an input";
      return false;
    }
    operands.push_back(tied);
  }
  unsigned k;
  if (rs) {
    for (unsigned r : aRegs) {
      if (!input(r)) {
        why = "a wgmma A register that is not an input";
        return false;
      }
      operands.push_back(input(r));
    }
  } else {
    if (!reference(ops[1], k) || !input(k)) {
      why = "a wgmma A descriptor that is not an input";
      return false;
    }
    operands.push_back(input(k));
  }
  if (!reference(ops[2], k) || !input(k)) {
    why = "a wgmma B descriptor that is not an input";
    return false;
  }
  operands.push_back(input(k));
  // scale-d: a predicate from setp.ne.b32 P, $k, 0, or a literal.
  StringRef scaleD = ops[3];
  int literal;
  if (!scaleD.getAsInteger(10, literal)) {
    operands.push_back(
        ConstantInt::get(Type::getInt32Ty(call.getContext()), literal != 0));
  } else {
    std::string setp = "setp.ne.b32 " + scaleD.str() + ", ";
    size_t where = t.find(setp);
    StringRef ref = where == StringRef::npos
                        ? StringRef()
                        : t.substr(where + setp.size()).split(',').first;
    if (!reference(ref, k) || !input(k)) {
      why = "a wgmma scale-d predicate not set by setp.ne.b32 P, $k, 0";
      return false;
    }
    operands.push_back(input(k));
  }
  site.op = Op::WgmmaMma;
  site.wgmmaN = static_cast<int>(n);
  site.wgmmaRs = rs;
  site.bf16 = bf16;
  site.scaleA = scaleA;
  site.scaleB = scaleB;
  site.transA = transA;
  site.transB = transB;
  return true;
}

bool isBarrierCall(const Instruction &inst) {
  auto *call = dyn_cast<CallInst>(&inst);
  if (!call || !call->getCalledFunction())
    return false;
  StringRef name = call->getCalledFunction()->getName();
  return name.starts_with("llvm.nvvm.barrier");
}

/// An mbarrier wait: the intrinsics' try/test wait, or the blocking
/// `mbarrier.try_wait.parity` loop written as inline PTX.
bool isMbarrierWait(const Instruction &inst) {
  auto *call = dyn_cast<CallInst>(&inst);
  if (!call)
    return false;
  if (call->isInlineAsm())
    return StringRef(cast<InlineAsm>(call->getCalledOperand())->getAsmString())
        .contains("mbarrier.try_wait.parity");
  if (!call->getCalledFunction())
    return false;
  StringRef name = call->getCalledFunction()->getName();
  return name.starts_with("llvm.nvvm.mbarrier.try.wait.") ||
         name.starts_with("llvm.nvvm.mbarrier.test.wait.");
}

std::string printed(const Instruction &inst, ModuleSlotTracker &slots) {
  std::string text;
  raw_string_ostream os(text);
  inst.print(os, slots);
  StringRef t = StringRef(text).trim();
  if (t.size() > 160)
    return t.take_front(157).str() + "...";
  return t.str();
}

/// Everything one load does to the module.
class Rewriter {
public:
  Rewriter(llvm::Module &m, const FaultInjection &fault)
      : m_(m), ctx_(m.getContext()), fault_(fault) {}

  Status run(emu::Module &out);

private:
  Status injectFault();
  void analyseKvLoops();
  void instrumentMemory();
  Status layOutSharedMemory(emu::Module &out);
  Status redirectIntrinsics();
  Status convertHalfPrecision();
  void countInstructions();
  void stripTargetAttributes();
  void addEntryPoints();

  /// Slot numbers of `f`'s values, for printing its instructions.
  ModuleSlotTracker *slotsFor(Function &f) {
    if (!slots_)
      slots_ = std::make_unique<ModuleSlotTracker>(&m_);
    if (slotsFunction_ != &f) {
      slots_->incorporateFunction(f);
      slotsFunction_ = &f;
    }
    return slots_.get();
  }

  /// A fresh numbering: instructions were added since the last one.
  void renumber() {
    slots_.reset();
    slotsFunction_ = nullptr;
  }

  uint32_t addSite(Site site, Instruction &at, std::string text = "") {
    site.function = at.getFunction()->getName().str();
    site.text = text.empty() ? printed(at, *slotsFor(*at.getFunction())) : text;
    site.inKvLoop = kvBlocks_.count(at.getParent());
    sites().push_back(std::move(site));
    return static_cast<uint32_t>(sites().size() - 1);
  }

  /// The kernels that (transitively) call `f`, for error messages.
  std::string kernelsCalling(Function &f);

  llvm::Module &m_;
  LLVMContext &ctx_;
  FaultInjection fault_;
  std::vector<Function *> kernels_;
  DenseSet<BasicBlock *> kvBlocks_;
  SmallPtrSet<BasicBlock *, 8> kvLatches_;
  std::set<std::string> kernelsWithKvLoop_;
  std::map<BasicBlock *, unsigned> blockSizes_;
  std::unique_ptr<ModuleSlotTracker> slots_;
  Function *slotsFunction_ = nullptr;
  std::map<Function *, std::pair<AllocaInst *, AllocaInst *>> opSlots_;

public:
  /// Shared variables as external symbols and their arena offsets.
  std::vector<std::pair<std::string, uint64_t>> sharedSymbols_;
};

std::string Rewriter::kernelsCalling(Function &f) {
  std::set<std::string> names;
  SmallVector<Function *> work = {&f};
  SmallPtrSet<Function *, 16> seen;
  while (!work.empty()) {
    Function *g = work.pop_back_val();
    if (!seen.insert(g).second)
      continue;
    if (g->getCallingConv() == CallingConv::PTX_Kernel)
      names.insert(g->getName().str());
    for (User *u : g->users())
      if (auto *call = dyn_cast<CallBase>(u))
        work.push_back(call->getFunction());
  }
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "no kernel" : s;
}

Status Rewriter::injectFault() {
  if (fault_.kind == FaultInjection::None)
    return Status::ok();
  unsigned seen = 0;
  for (Function &f : m_)
    for (Instruction &inst : make_early_inc_range(instructions(f))) {
      auto *call = dyn_cast<CallInst>(&inst);
      StringRef callee = call && call->getCalledFunction()
                             ? call->getCalledFunction()->getName()
                             : "";
      switch (fault_.kind) {
      case FaultInjection::DropBarrier:
        if (isBarrierCall(inst) && seen++ == fault_.index) {
          inst.eraseFromParent();
          return Status::ok();
        }
        break;
      case FaultInjection::WaitGroupPlus:
        if (callee == "llvm.nvvm.cp.async.wait.group" &&
            seen++ == fault_.index) {
          auto *n = cast<ConstantInt>(call->getArgOperand(0));
          call->setArgOperand(
              0, ConstantInt::get(n->getType(), n->getZExtValue() + 1));
          return Status::ok();
        }
        break;
      case FaultInjection::GlobalOffset:
        if (auto *load = dyn_cast<LoadInst>(&inst)) {
          const Value *base = getUnderlyingObject(load->getPointerOperand());
          if (isa<Argument>(base) && seen++ == fault_.index) {
            IRBuilder<> b(load);
            load->setOperand(0, b.CreateGEP(b.getInt8Ty(),
                                            load->getPointerOperand(),
                                            b.getInt64(-(int64_t(1) << 30))));
            return Status::ok();
          }
        }
        break;
      case FaultInjection::DropMbarrierWait: {
        if (isMbarrierWait(inst) && seen++ == fault_.index) {
          if (!call->getType()->isVoidTy())
            call->replaceAllUsesWith(ConstantInt::getTrue(call->getType()));
          call->eraseFromParent();
          return Status::ok();
        }
        break;
      }
      case FaultInjection::DropWgmmaWait:
        if (callee == "llvm.nvvm.wgmma.wait_group.sync.aligned" &&
            seen++ == fault_.index) {
          call->eraseFromParent();
          return Status::ok();
        }
        break;
      case FaultInjection::DropFenceProxy:
        if ((callee == "llvm.nvvm.fence.proxy.async" ||
             callee == "llvm.nvvm.fence.proxy.async.shared_cta") &&
            seen++ == fault_.index) {
          call->eraseFromParent();
          return Status::ok();
        }
        break;
      case FaultInjection::ExpectTx:
        if ((callee.starts_with("llvm.nvvm.mbarrier.arrive.expect.tx.") ||
             callee.starts_with("llvm.nvvm.mbarrier.expect.tx.")) &&
            seen++ == fault_.index) {
          IRBuilder<> b(call);
          call->setArgOperand(
              1, b.CreateAdd(call->getArgOperand(1), b.getInt32(16)));
          return Status::ok();
        }
        break;
      case FaultInjection::None:
        break;
      }
    }
  return Status::error("fault injection: the module has only " +
                       std::to_string(seen) + " sites of that kind (asked " +
                       "for index " + std::to_string(fault_.index) + ")");
}

void Rewriter::analyseKvLoops() {
  for (Function *kernel : kernels_) {
    DominatorTree dt(*kernel);
    LoopInfo li(dt);
    Loop *best = nullptr;
    size_t bestSize = 0;
    for (Loop *loop : li) {
      bool barrier = false;
      size_t size = 0;
      // The KV loop synchronises its warps every block: a CTA or named
      // barrier, or (sm_90a's TMA ring) an mbarrier wait.
      for (BasicBlock *bb : loop->blocks()) {
        size += bb->size();
        for (Instruction &inst : *bb)
          barrier |= isBarrierCall(inst) || isMbarrierWait(inst);
      }
      if (barrier && size > bestSize) {
        best = loop;
        bestSize = size;
      }
    }
    if (!best)
      continue;
    kernelsWithKvLoop_.insert(kernel->getName().str());
    for (BasicBlock *bb : best->blocks())
      kvBlocks_.insert(bb);
    SmallVector<BasicBlock *> latches;
    best->getLoopLatches(latches);
    for (BasicBlock *bb : latches)
      kvLatches_.insert(bb);
    // A KV block peeled off the loop (the intra-warpgroup overlap) starts
    // with the lowering's marker: each execution of its basic block is one
    // trip, and the code that block dominates (that trip's, up to the
    // merge before the loop) counts as the KV loop's. The marker itself
    // emits nothing: it is removed.
    SmallVector<CallInst *> markers;
    for (Instruction &inst : instructions(*kernel))
      if (auto *call = dyn_cast<CallInst>(&inst))
        if (call->isInlineAsm() && call->arg_empty() &&
            cast<InlineAsm>(call->getCalledOperand())->getAsmString() ==
                kPeeledKvBlockMarker)
          markers.push_back(call);
    for (CallInst *marker : markers) {
      BasicBlock *entry = marker->getParent();
      for (BasicBlock &bb : *kernel)
        if (dt.dominates(entry, &bb))
          kvBlocks_.insert(&bb);
      kvLatches_.insert(entry);
      marker->eraseFromParent();
    }
  }
}

void Rewriter::instrumentMemory() {
  Type *ptrTy = PointerType::get(ctx_, 0);
  FunctionCallee hook =
      m_.getOrInsertFunction("kvemu_access", Type::getVoidTy(ctx_), ptrTy,
                             Type::getInt64Ty(ctx_), Type::getInt32Ty(ctx_));
  const DataLayout &dl = m_.getDataLayout();
  struct Access {
    Instruction *inst;
    Value *pointer;
    Value *bytes; // i64
    Op op;
  };
  std::vector<Access> accesses;
  renumber();
  auto needsCheck = [](Value *pointer) {
    const Value *base = getUnderlyingObject(pointer);
    if (isa<AllocaInst>(base))
      return false; // the thread's own stack
    if (auto *gv = dyn_cast<GlobalVariable>(base))
      return gv->getAddressSpace() == kSharedAS; // constants: JIT memory
    return true;
  };
  auto constant = [&](uint64_t n) {
    return ConstantInt::get(Type::getInt64Ty(ctx_), n);
  };
  for (Function &f : m_) {
    for (Instruction &inst : instructions(f)) {
      if (auto *load = dyn_cast<LoadInst>(&inst)) {
        if (needsCheck(load->getPointerOperand()))
          accesses.push_back({load, load->getPointerOperand(),
                              constant(dl.getTypeStoreSize(load->getType())),
                              Op::Load});
      } else if (auto *store = dyn_cast<StoreInst>(&inst)) {
        if (needsCheck(store->getPointerOperand()))
          accesses.push_back({store, store->getPointerOperand(),
                              constant(dl.getTypeStoreSize(
                                  store->getValueOperand()->getType())),
                              Op::Store});
      } else if (auto *rmw = dyn_cast<AtomicRMWInst>(&inst)) {
        if (needsCheck(rmw->getPointerOperand()))
          accesses.push_back({rmw, rmw->getPointerOperand(),
                              constant(dl.getTypeStoreSize(rmw->getType())),
                              Op::Store});
      } else if (auto *cas = dyn_cast<AtomicCmpXchgInst>(&inst)) {
        if (needsCheck(cas->getPointerOperand()))
          accesses.push_back({cas, cas->getPointerOperand(),
                              constant(dl.getTypeStoreSize(
                                  cas->getCompareOperand()->getType())),
                              Op::Store});
      } else if (auto *transfer = dyn_cast<MemTransferInst>(&inst)) {
        if (needsCheck(transfer->getSource()))
          accesses.push_back({transfer, transfer->getSource(),
                              transfer->getLength(), Op::Load});
        if (needsCheck(transfer->getDest()))
          accesses.push_back({transfer, transfer->getDest(),
                              transfer->getLength(), Op::Store});
      } else if (auto *set = dyn_cast<MemSetInst>(&inst)) {
        if (needsCheck(set->getDest()))
          accesses.push_back(
              {set, set->getDest(), set->getLength(), Op::Store});
      }
    }
  }
  for (Access &a : accesses) {
    Site site;
    site.op = a.op;
    uint32_t id = addSite(site, *a.inst);
    IRBuilder<> b(a.inst);
    Value *p = a.pointer;
    if (p->getType()->getPointerAddressSpace() != 0)
      p = b.CreateAddrSpaceCast(p, ptrTy);
    Value *bytes = b.CreateZExtOrTrunc(a.bytes, b.getInt64Ty());
    b.CreateCall(hook, {p, bytes, b.getInt32(id)});
  }
}

Status Rewriter::layOutSharedMemory(emu::Module &out) {
  const DataLayout &dl = m_.getDataLayout();
  std::vector<GlobalVariable *> statics, dynamics;
  for (GlobalVariable &gv : m_.globals()) {
    if (gv.getAddressSpace() != kSharedAS)
      continue;
    auto *array = dyn_cast<ArrayType>(gv.getValueType());
    if (gv.isDeclaration() && array && array->getNumElements() == 0)
      dynamics.push_back(&gv);
    else if (gv.isDeclaration())
      return Status::error("shared variable '" + gv.getName().str() +
                           "' is declared but not defined and has a size");
    else
      statics.push_back(&gv);
  }
  uint64_t offset = 0;
  std::vector<std::pair<GlobalVariable *, uint64_t>> placed;
  for (GlobalVariable *gv : statics) {
    uint64_t align = gv->getAlign() ? gv->getAlign()->value() : 16;
    offset = alignTo(offset, align);
    placed.push_back({gv, offset});
    offset += dl.getTypeAllocSize(gv->getValueType());
  }
  out.staticSharedBytes = offset;
  uint64_t dynamicAlign = 16;
  for (GlobalVariable *gv : dynamics)
    if (gv->getAlign())
      dynamicAlign = std::max<uint64_t>(dynamicAlign, gv->getAlign()->value());
  out.dynamicSharedOffset = alignTo(offset, dynamicAlign);
  for (GlobalVariable *gv : dynamics)
    placed.push_back({gv, out.dynamicSharedOffset});
  if (out.dynamicSharedOffset > Arena::kBytes)
    return Status::error("the module's static shared memory (" +
                         std::to_string(offset) +
                         " bytes) exceeds the emulator's arena");
  // Each variable becomes an external symbol at its arena address.
  for (auto [gv, at] : placed) {
    std::string symbol = "kvemu_shared_" + std::to_string(at) + "_" +
                         std::to_string(reinterpret_cast<uintptr_t>(gv));
    auto *replacement = new GlobalVariable(
        m_, gv->getValueType(), false, GlobalValue::ExternalLinkage, nullptr,
        symbol, nullptr, GlobalValue::NotThreadLocal, kSharedAS);
    replacement->setAlignment(gv->getAlign());
    gv->replaceAllUsesWith(replacement);
    gv->eraseFromParent();
    sharedSymbols_.push_back({symbol, at});
  }
  return Status::ok();
}

std::pair<Value *, Value *>
slotsIn(Function &f,
        std::map<Function *, std::pair<AllocaInst *, AllocaInst *>> &cache) {
  auto it = cache.find(&f);
  if (it != cache.end())
    return it->second;
  IRBuilder<> b(&*f.getEntryBlock().getFirstInsertionPt());
  Type *i64 = b.getInt64Ty();
  AllocaInst *args =
      b.CreateAlloca(ArrayType::get(i64, kArgSlots), nullptr, "kvemu.args");
  AllocaInst *results = b.CreateAlloca(ArrayType::get(i64, kResultSlots),
                                       nullptr, "kvemu.results");
  args->setAlignment(Align(8));
  results->setAlignment(Align(8));
  cache[&f] = {args, results};
  return {args, results};
}

Status Rewriter::redirectIntrinsics() {
  Type *ptrTy = PointerType::get(ctx_, 0);
  Type *i32 = Type::getInt32Ty(ctx_), *i64 = Type::getInt64Ty(ctx_);
  FunctionCallee sreg = m_.getOrInsertFunction("kvemu_sreg", i32, i32);
  FunctionCallee op = m_.getOrInsertFunction("kvemu_op", Type::getVoidTy(ctx_),
                                             i32, ptrTy, ptrTy);
  const DataLayout &dl = m_.getDataLayout();
  std::vector<CallInst *> calls;
  std::vector<std::pair<CallInst *, const InlinePtx *>> inlinePtx;
  struct HopperAsm {
    CallInst *call;
    Site site;
    SmallVector<Value *> operands;
  };
  std::vector<HopperAsm> hopperAsm;
  std::vector<CallInst *> operandFences;
  for (Function &f : m_)
    for (Instruction &inst : instructions(f))
      if (auto *call = dyn_cast<CallInst>(&inst)) {
        Function *callee = call->getCalledFunction();
        if (!callee && !call->isInlineAsm())
          continue;
        if (call->isInlineAsm()) {
          if (isOperandFence(*call)) {
            operandFences.push_back(call);
            continue;
          }
          auto *assembly = cast<InlineAsm>(call->getCalledOperand());
          const InlinePtx *known = nullptr;
          for (const InlinePtx &candidate : kInlinePtx)
            if (assembly->getAsmString() == candidate.assembly &&
                assembly->getConstraintString() == candidate.constraints &&
                signatureOf(call->getFunctionType()) == candidate.signature)
              known = &candidate;
          if (!known) {
            HopperAsm h;
            h.call = call;
            std::string why;
            if (hopperInlineSite(*call, h.site, h.operands, why)) {
              hopperAsm.push_back(std::move(h));
              continue;
            }
            return Status::error(
                "kernel(s) " + kernelsCalling(f) +
                " use inline PTX assembly that the emulated GPU does not "
                "implement" +
                (why.empty() ? std::string() : " (" + why + ")") + ": " +
                printed(*call, *slotsFor(f)));
          }
          inlinePtx.push_back({call, known});
          continue;
        }
        if (callee->getName().starts_with("llvm.nvvm.") ||
            callee->getName().starts_with("llvm.nvptx."))
          calls.push_back(call);
      }
  // The fences' values are their inputs (a wgmma result read through one
  // is then read where the fence stands: the check below applies).
  for (CallInst *call : operandFences) {
    IRBuilder<> b(call);
    Value *same = PoisonValue::get(call->getType());
    for (unsigned i = 0; i < call->arg_size(); ++i)
      same = b.CreateInsertValue(same, call->getArgOperand(i), {i});
    call->replaceAllUsesWith(same);
    call->eraseFromParent();
  }
  for (auto [call, known] : inlinePtx) {
    FunctionCallee host =
        m_.getOrInsertFunction(known->symbol, call->getFunctionType());
    SmallVector<Value *> args(call->args());
    Value *v = IRBuilder<>(call).CreateCall(host, args);
    call->replaceAllUsesWith(v);
    call->eraseFromParent();
  }
  renumber();
  std::map<CallInst *, std::string> texts;
  for (CallInst *call : calls)
    texts[call] = printed(*call, *slotsFor(*call->getFunction()));
  // Replaces `call` by kvemu_op(site) with `operands` in the argument slots
  // and the result read back from the result slots.
  auto emit = [&](CallInst *call, const Site &site, ArrayRef<Value *> operands,
                  const std::string &text) -> Status {
    std::string name = text;
    uint32_t id = addSite(site, *call, text);
    auto [argSlots, resultSlots] = slotsIn(*call->getFunction(), opSlots_);
    IRBuilder<> b(call);
    if (operands.size() > kArgSlots)
      return Status::error(name + ": too many operands");
    for (unsigned i = 0; i < operands.size(); ++i) {
      Value *a = operands[i];
      if (dl.getTypeStoreSize(a->getType()) > 8)
        return Status::error(name + ": an operand wider than 8 bytes");
      b.CreateStore(a, b.CreateConstGEP2_32(ArrayType::get(i64, kArgSlots),
                                            argSlots, 0, i));
    }
    b.CreateCall(op, {b.getInt32(id), argSlots, resultSlots});
    Type *type = call->getType();
    Value *result = nullptr;
    auto slot = [&](unsigned i) {
      return b.CreateConstGEP2_32(ArrayType::get(i64, kResultSlots),
                                  resultSlots, 0, i);
    };
    if (auto *st = dyn_cast<StructType>(type)) {
      if (st->getNumElements() > kResultSlots)
        return Status::error(name + ": too many results");
      result = PoisonValue::get(st);
      for (unsigned i = 0; i < st->getNumElements(); ++i)
        result = b.CreateInsertValue(
            result, b.CreateLoad(st->getElementType(i), slot(i)), i);
    } else if (!type->isVoidTy()) {
      result = b.CreateLoad(type, slot(0));
    }
    if (result)
      call->replaceAllUsesWith(result);
    call->eraseFromParent();
    return Status::ok();
  };
  for (CallInst *call : calls) {
    Function *callee = call->getCalledFunction();
    StringRef name = callee->getName();
    IRBuilder<> b(call);
    if (std::optional<Sreg> s = sregOf(name)) {
      Value *v = b.CreateCall(sreg, {b.getInt32(*s)});
      v = b.CreateZExtOrTrunc(v, call->getType());
      call->replaceAllUsesWith(v);
      call->eraseFromParent();
      continue;
    }
    const ScalarIntrinsic *scalar = nullptr;
    for (const ScalarIntrinsic &candidate : kScalarIntrinsics)
      if (name == candidate.name)
        scalar = &candidate;
    if (scalar) {
      if (signatureOf(callee->getFunctionType()) != scalar->signature)
        return Status::error("kernel(s) " +
                             kernelsCalling(*call->getFunction()) + " call " +
                             name.str() + " with an unexpected signature");
      // A <2 x half> result travels as its 32 bits (the host function
      // returns them in an integer register).
      FunctionType *type = callee->getFunctionType();
      Type *result = type->getReturnType();
      const bool halfPair = isa<FixedVectorType>(result);
      if (halfPair)
        type = FunctionType::get(b.getInt32Ty(), type->params(), false);
      FunctionCallee host = m_.getOrInsertFunction(scalar->symbol, type);
      SmallVector<Value *> args(call->args());
      Value *v = b.CreateCall(host, args);
      if (halfPair)
        v = b.CreateBitCast(v, result);
      call->replaceAllUsesWith(v);
      call->eraseFromParent();
      continue;
    }
    std::optional<Site> site = opSiteOf(*call);
    if (!site)
      return Status::error("kernel(s) " + kernelsCalling(*call->getFunction()) +
                           " call " + name.str() +
                           ", which the emulated GPU does not implement");
    KVATTN_RETURN_IF_ERROR(
        emit(call, *site, SmallVector<Value *>(call->args()), texts[call]));
  }
  for (HopperAsm &h : hopperAsm) {
    Site site = h.site;
    std::string text = printed(*h.call, *slotsFor(*h.call->getFunction()));
    // A read of a wgmma result must follow the wait_group that retires it:
    // each direct use (not a phi, not another wgmma's tied accumulator)
    // checks at run time that the latest instance of this wgmma in its
    // thread is no longer in flight.
    SmallVector<Instruction *> uses;
    if (site.op == Op::WgmmaMma) {
      SmallVector<Instruction *> work;
      for (User *u : h.call->users())
        if (auto *e = dyn_cast<ExtractValueInst>(u)) {
          for (User *v : e->users())
            work.push_back(cast<Instruction>(v));
        } else {
          work.push_back(cast<Instruction>(u));
        }
      for (Instruction *v : work) {
        if (isa<PHINode>(v))
          continue;
        if (auto *c = dyn_cast<CallInst>(v))
          if (c->isInlineAsm() &&
              StringRef(cast<InlineAsm>(c->getCalledOperand())->getAsmString())
                  .contains("wgmma.mma_async"))
            continue;
        if (!llvm::is_contained(uses, v))
          uses.push_back(v);
      }
    }
    uint32_t wgmmaId = static_cast<uint32_t>(sites().size());
    KVATTN_RETURN_IF_ERROR(emit(h.call, site, h.operands, text));
    for (Instruction *v : uses) {
      Site use;
      use.op = Op::WgmmaUse;
      use.wgmmaSite = wgmmaId;
      uint32_t id = addSite(use, *v);
      auto [argSlots, resultSlots] = slotsIn(*v->getFunction(), opSlots_);
      IRBuilder<> b(v);
      b.CreateCall(op, {b.getInt32(id), argSlots, resultSlots});
    }
  }
  for (Function &f : make_early_inc_range(m_))
    if (f.isDeclaration() && f.use_empty() &&
        (f.getName().starts_with("llvm.nvvm.") ||
         f.getName().starts_with("llvm.nvptx.")))
      f.eraseFromParent();
  for (Function &f : m_)
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty() &&
        !f.getName().starts_with("kvemu_"))
      return Status::error("kernel(s) " + kernelsCalling(f) +
                           " call the undefined function '" +
                           f.getName().str() + "'");
  return Status::ok();
}

Status Rewriter::convertHalfPrecision() {
  Type *i16 = Type::getInt16Ty(ctx_), *f32 = Type::getFloatTy(ctx_);
  FunctionCallee toBf16 = m_.getOrInsertFunction("kvemu_f32_to_bf16", i16, f32);
  FunctionCallee toHalf = m_.getOrInsertFunction("kvemu_f32_to_f16", i16, f32);
  FunctionCallee fromHalf =
      m_.getOrInsertFunction("kvemu_f16_to_f32", f32, i16);
  auto isHalf = [](Type *t) {
    t = t->getScalarType();
    return t->isHalfTy() || t->isBFloatTy();
  };
  std::vector<Instruction *> work;
  renumber();
  for (Function &f : m_)
    for (Instruction &inst : instructions(f)) {
      if (isa<FPTruncInst>(inst) && isHalf(inst.getType())) {
        work.push_back(&inst);
        continue;
      }
      if (isa<FPExtInst>(inst) &&
          inst.getOperand(0)->getType()->getScalarType()->isHalfTy()) {
        work.push_back(&inst);
        continue;
      }
      if (isa<FPExtInst>(inst))
        continue; // bf16 -> f32 is exact everywhere: a shift
      // mul.rn.f16: the product of two f16 values is exact in f32, so the
      // f32 product rounded once to f16 is the f16 product (subnormals
      // kept, as PTX's f16 arithmetic without .ftz).
      if (inst.getOpcode() == Instruction::FMul &&
          inst.getType()->getScalarType()->isHalfTy()) {
        work.push_back(&inst);
        continue;
      }
      bool arithmetic = isa<BinaryOperator>(inst) || isa<UnaryOperator>(inst) ||
                        isa<CmpInst>(inst) || isa<CastInst>(inst) ||
                        isa<IntrinsicInst>(inst);
      if (!arithmetic || isa<BitCastInst>(inst))
        continue;
      bool half = isHalf(inst.getType());
      for (Value *operand : inst.operands())
        half |= isHalf(operand->getType());
      if (half)
        return Status::error(
            "kernel(s) " + kernelsCalling(f) +
            " compute in half precision, which the emulated GPU does not "
            "implement: " +
            printed(inst, *slotsFor(f)));
    }
  for (Instruction *inst : work) {
    IRBuilder<> b(inst);
    Value *in = inst->getOperand(0);
    Type *outType = inst->getType();
    if (inst->getOpcode() == Instruction::FMul) {
      auto product = [&](Value *x, Value *y) -> Value * {
        Value *p =
            b.CreateFMul(b.CreateCall(fromHalf, {b.CreateBitCast(x, i16)}),
                         b.CreateCall(fromHalf, {b.CreateBitCast(y, i16)}));
        return b.CreateBitCast(b.CreateCall(toHalf, {p}),
                               outType->getScalarType());
      };
      Value *x = inst->getOperand(0), *y = inst->getOperand(1);
      Value *result;
      if (auto *vector = dyn_cast<FixedVectorType>(outType)) {
        result = PoisonValue::get(vector);
        for (unsigned i = 0; i < vector->getNumElements(); ++i)
          result = b.CreateInsertElement(result,
                                         product(b.CreateExtractElement(x, i),
                                                 b.CreateExtractElement(y, i)),
                                         i);
      } else {
        result = product(x, y);
      }
      inst->replaceAllUsesWith(result);
      inst->eraseFromParent();
      continue;
    }
    auto convert = [&](Value *scalar, Type *to) -> Value * {
      if (isa<FPTruncInst>(inst)) {
        Value *f = scalar->getType()->isFloatTy()
                       ? scalar
                       : b.CreateFPTrunc(scalar, f32); // double: two roundings
        Value *bits = b.CreateCall(to->isBFloatTy() ? toBf16 : toHalf, {f});
        return b.CreateBitCast(bits, to);
      }
      Value *f = b.CreateCall(fromHalf, {b.CreateBitCast(scalar, i16)});
      return to->isFloatTy() ? f : b.CreateFPExt(f, to);
    };
    Value *result;
    if (auto *vector = dyn_cast<FixedVectorType>(outType)) {
      result = PoisonValue::get(vector);
      for (unsigned i = 0; i < vector->getNumElements(); ++i)
        result = b.CreateInsertElement(
            result,
            convert(b.CreateExtractElement(in, i), vector->getElementType()),
            i);
    } else {
      result = convert(in, outType);
    }
    inst->replaceAllUsesWith(result);
    inst->eraseFromParent();
  }
  return Status::ok();
}

void Rewriter::countInstructions() {
  Type *i64 = Type::getInt64Ty(ctx_);
  ArrayType *type = ArrayType::get(i64, 3);
  auto *counters = new GlobalVariable(
      m_, type, false, GlobalValue::ExternalLinkage, nullptr, "kvemu_counters");
  for (auto [bb, size] : blockSizes_) {
    IRBuilder<> b(&*bb->getFirstInsertionPt());
    auto add = [&](unsigned slot, uint64_t n) {
      Value *p = b.CreateConstGEP2_32(type, counters, 0, slot);
      b.CreateStore(b.CreateAdd(b.CreateLoad(i64, p), b.getInt64(n)), p);
    };
    add(0, size);
    if (kvBlocks_.count(bb))
      add(1, size);
    if (kvLatches_.count(bb))
      add(2, 1);
  }
}

void Rewriter::stripTargetAttributes() {
  for (Function &f : m_) {
    SmallVector<std::string> remove = {"target-cpu", "target-features",
                                       "tune-cpu"};
    for (const Attribute &a : f.getAttributes().getFnAttrs())
      if (a.isStringAttribute() && a.getKindAsString().starts_with("nvvm."))
        remove.push_back(a.getKindAsString().str());
    for (const std::string &kind : remove)
      f.removeFnAttr(kind);
    if (f.getCallingConv() == CallingConv::PTX_Kernel)
      f.setCallingConv(CallingConv::C);
  }
  if (NamedMDNode *annotations = m_.getNamedMetadata("nvvm.annotations"))
    m_.eraseNamedMetadata(annotations);
}

void Rewriter::addEntryPoints() {
  Type *ptrTy = PointerType::get(ctx_, 0);
  for (Function *kernel : kernels_) {
    Function *entry = Function::Create(
        FunctionType::get(Type::getVoidTy(ctx_), {ptrTy}, false),
        GlobalValue::ExternalLinkage, "kvemu_entry_" + kernel->getName(), m_);
    IRBuilder<> b(BasicBlock::Create(ctx_, "", entry));
    SmallVector<Value *> args;
    for (Argument &a : kernel->args()) {
      Value *slot = b.CreateLoad(
          ptrTy, b.CreateConstGEP1_64(ptrTy, entry->getArg(0), a.getArgNo()));
      args.push_back(b.CreateLoad(a.getType(), slot));
    }
    b.CreateCall(kernel, args);
    b.CreateRetVoid();
  }
}

Status Rewriter::run(emu::Module &out) {
  for (Function &f : m_)
    if (f.getCallingConv() == CallingConv::PTX_Kernel && !f.isDeclaration())
      kernels_.push_back(&f);
  if (kernels_.empty())
    return Status::error("the device image defines no kernel");
  KVATTN_RETURN_IF_ERROR(injectFault());
  const size_t firstSite = sites().size();
  analyseKvLoops();
  for (Function &f : m_)
    for (BasicBlock &bb : f)
      blockSizes_[&bb] = bb.sizeWithoutDebug();
  instrumentMemory();
  KVATTN_RETURN_IF_ERROR(layOutSharedMemory(out));
  KVATTN_RETURN_IF_ERROR(redirectIntrinsics());
  KVATTN_RETURN_IF_ERROR(convertHalfPrecision());
  countInstructions();
  stripTargetAttributes();
  for (Function *kernel : kernels_) {
    Kernel k;
    k.name = kernel->getName().str();
    for (Argument &a : kernel->args())
      k.pointerParams.push_back(a.getType()->isPointerTy());
    k.hasKvLoop = kernelsWithKvLoop_.count(k.name);
    for (size_t i = firstSite; i < sites().size(); ++i) {
      Op o = sites()[i].op;
      k.hopperSync |= o == Op::MbarInit || o == Op::NamedBarrier ||
                      o == Op::MbarWait || o == Op::WgmmaMma;
    }
    out.kernels[k.name] = std::move(k);
  }
  addEntryPoints();
  return Status::ok();
}

} // namespace

Status loadDeviceModule(const std::string &image, const FaultInjection &fault,
                        std::unique_ptr<Module> &module) {
  StringRef text = StringRef(image).ltrim();
  if (text.starts_with("//") || text.starts_with(".version") ||
      text.contains("\n.version "))
    return Status::error(
        "the emulated GPU runs the device LLVM IR, not PTX: compile with "
        "DeviceImage::LlvmIR (kvattn-run --target=gpu-emu, kvattn-compile "
        "--device-ir, kvattn_compile_to_device_ir)");
  static std::once_flag initialised;
  std::call_once(initialised, [] {
    InitializeNativeTarget();
    InitializeNativeTargetAsmPrinter();
  });

  auto context = std::make_unique<LLVMContext>();
  SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> m =
      parseAssemblyString(image, diagnostic, *context);
  if (!m) {
    std::string message;
    raw_string_ostream os(message);
    diagnostic.print("device image", os, false);
    return Status::error("the device image is not LLVM IR: " + message);
  }
  if (!m->getTargetTriple().isNVPTX())
    return Status::error("the device image is not NVPTX device code (target "
                         "triple '" +
                         m->getTargetTriple().str() + "')");

  auto out = std::make_unique<Module>();
  Rewriter rewriter(*m, fault);
  KVATTN_RETURN_IF_ERROR(rewriter.run(*out));

  Expected<orc::JITTargetMachineBuilder> machine =
      orc::JITTargetMachineBuilder::detectHost();
  if (!machine)
    return Status::error("no host target for the JIT: " +
                         toString(machine.takeError()));
  machine->setRelocationModel(Reloc::PIC_);
  machine->setCodeModel(CodeModel::Small);
  machine->setCodeGenOptLevel(CodeGenOptLevel::Default);
  Expected<DataLayout> layout = machine->getDefaultDataLayoutForTarget();
  if (!layout)
    return Status::error("no host data layout: " +
                         toString(layout.takeError()));
  m->setDataLayout(*layout);
  m->setTargetTriple(machine->getTargetTriple());
  {
    std::string problems;
    raw_string_ostream os(problems);
    if (verifyModule(*m, &os))
      return Status::error("the rewritten device module is invalid (an "
                           "emulator bug): " +
                           problems);
  }

  // $KVATTN_EMU_DUMP: where to write the rewritten module (debugging).
  if (const char *dump = std::getenv("KVATTN_EMU_DUMP"); dump && *dump) {
    std::error_code ec;
    raw_fd_ostream os(dump, ec);
    if (ec)
      return Status::error("KVATTN_EMU_DUMP: cannot write '" +
                           std::string(dump) + "': " + ec.message());
    m->print(os, nullptr);
    // Checked after the last flush, and cleared (a stream destroyed with an
    // error ends the process).
    os.close();
    if (os.has_error()) {
      std::string why = os.error().message();
      os.clear_error();
      return Status::error("KVATTN_EMU_DUMP: writing '" + std::string(dump) +
                           "' failed: " + why);
    }
  }

  Expected<std::unique_ptr<orc::LLJIT>> jit =
      orc::LLJITBuilder()
          .setJITTargetMachineBuilder(std::move(*machine))
          .create();
  if (!jit)
    return Status::error("creating the JIT failed: " +
                         toString(jit.takeError()));
  orc::SymbolMap symbols;
  auto define = [&](const std::string &name, void *address) {
    symbols[(*jit)->mangleAndIntern(name)] = {
        orc::ExecutorAddr::fromPtr(address), JITSymbolFlags::Exported};
  };
  for (const HostSymbol &s : kHostSymbols)
    define(s.name, s.address);
  // Libcalls of the host back end for f16/bf16 values it converts.
  for (const HostLibcall &s : hostFloat16Libcalls())
    define(s.name, s.address);
  for (auto &[name, offset] : rewriter.sharedSymbols_)
    define(name, Arena::base() + offset);
  if (Error e = (*jit)->getMainJITDylib().define(
          orc::absoluteSymbols(std::move(symbols))))
    return Status::error("defining the emulator's symbols failed: " +
                         toString(std::move(e)));
  // libm (expf, exp2f, ...) of the host process.
  auto libm = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!libm)
    return Status::error("process symbols: " + toString(libm.takeError()));
  (*jit)->getMainJITDylib().addGenerator(std::move(*libm));
  if (Error e = (*jit)->addIRModule(
          orc::ThreadSafeModule(std::move(m), std::move(context))))
    return Status::error("adding the device module to the JIT failed: " +
                         toString(std::move(e)));
  for (auto &[name, kernel] : out->kernels) {
    Expected<orc::ExecutorAddr> entry = (*jit)->lookup("kvemu_entry_" + name);
    if (!entry)
      return Status::error(
          "compiling kernel '" + name +
          "' for the host failed: " + toString(entry.takeError()));
    kernel.entry = entry->toPtr<void (*)(void **)>();
  }
  out->jit = std::move(*jit);
  module = std::move(out);
  return Status::ok();
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir
