//===- CpuRunner.cpp - compile kvattn IR for the host and run it ----------===//

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Dialect/KVAttnOps.h"
#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/IR/DiagnosticCollector.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Support/HostLibcalls.h"
#include "kvattn/Support/Limits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <set>
#include <unistd.h>

using namespace mlir;

namespace mlir {
namespace kvattn {

/// The global that -kvattn-tile{stats=true} creates.
static const char kStatsSymbol[] = "kvattn_tile_stats";
/// memref.get_global puts this in the allocated pointer of a descriptor.
static const uintptr_t kDeadBeef = 0xdeadbeef;

namespace {

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

/// Words of a ranked memref descriptor: allocated, aligned, offset,
/// sizes[rank], strides[rank].
int64_t descriptorWords(int64_t rank) { return 3 + 2 * rank; }

std::string errorToString(llvm::Error error) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << error;
  return s;
}

/// An unranked memref as the LLVM lowering passes it: the rank and a pointer
/// to the ranked descriptor.
struct UnrankedDescriptor {
  int64_t rank;
  int64_t *descriptor;
};

/// `memrefCopy(elementSize, src, dst)`, the function the MemRef-to-LLVM
/// lowering calls for a memref.copy between views that are not both
/// contiguous: copies every element of `src` into `dst` (same shape, any
/// strides). Defined here and given to the JIT, so the CPU target needs no
/// library of MLIR's at run time (MLIR's c_runner_utils, on Debian, needs
/// libMLIR.so itself).
void kvattnMemrefCopy(int64_t elementSize, UnrankedDescriptor *src,
                      UnrankedDescriptor *dst) {
  const int64_t rank = src->rank;
  auto *srcBase = reinterpret_cast<char *>(src->descriptor[1]);
  auto *dstBase = reinterpret_cast<char *>(dst->descriptor[1]);
  const int64_t srcOffset = src->descriptor[2], dstOffset = dst->descriptor[2];
  const int64_t *sizes = src->descriptor + 3;
  const int64_t *srcStrides = src->descriptor + 3 + rank;
  const int64_t *dstStrides = dst->descriptor + 3 + rank;
  for (int64_t d = 0; d < rank; ++d)
    if (sizes[d] == 0)
      return;
  // The innermost run both views store contiguously is copied as one block.
  int64_t inner = 1, dims = rank;
  while (dims > 0 && srcStrides[dims - 1] == inner &&
         dstStrides[dims - 1] == inner) {
    inner *= sizes[dims - 1];
    --dims;
  }
  const int64_t blockBytes = inner * elementSize;
  llvm::SmallVector<int64_t, 8> index(dims, 0);
  int64_t srcAt = srcOffset, dstAt = dstOffset;
  while (true) {
    std::memcpy(dstBase + dstAt * elementSize, srcBase + srcAt * elementSize,
                blockBytes);
    int64_t d = dims - 1;
    for (; d >= 0; --d) {
      srcAt += srcStrides[d];
      dstAt += dstStrides[d];
      if (++index[d] < sizes[d])
        break;
      srcAt -= srcStrides[d] * sizes[d];
      dstAt -= dstStrides[d] * sizes[d];
      index[d] = 0;
    }
    if (d < 0)
      return;
  }
}

/// A run-time library the JIT loads: the path the build found, else the same
/// file beside the binary that holds this code or in its ../lib (a
/// relocated install, or the bundle of scripts/device-bundle.sh).
std::string jitLibrary(llvm::StringRef configured) {
  if (::access(configured.str().c_str(), R_OK) == 0)
    return configured.str();
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&kvattnMemrefCopy), &info) &&
      info.dli_fname) {
    llvm::StringRef self(info.dli_fname);
    llvm::StringRef dir = self.rsplit('/').first;
    llvm::StringRef name = configured.rsplit('/').second;
    for (std::string candidate :
         {(dir + "/" + name).str(), (dir + "/../lib/" + name).str()})
      if (::access(candidate.c_str(), R_OK) == 0)
        return candidate;
  }
  return configured.str();
}

} // namespace

CpuProgram::~CpuProgram() {
  if (source_)
    source_->erase();
}

Status CpuProgram::compile(ModuleOp module, const std::string &entry,
                           const CpuCompileOptions &options,
                           std::unique_ptr<CpuProgram> &program) {
  static std::once_flag initOnce;
  std::call_once(initOnce, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  MLIRContext *ctx = module.getContext();
  registerBuiltinDialectTranslation(*ctx);
  registerLLVMDialectTranslation(*ctx);
  registerOpenMPDialectTranslation(*ctx);

  if (options.threads < 0 || options.threads > limits::kMaxThreads)
    return Status::error("threads must be 0 (all cores) to " +
                         std::to_string(limits::kMaxThreads) + ", got " +
                         std::to_string(options.threads));
  if (options.optLevel > 3)
    return Status::error("opt level must be 0 to 3, got " +
                         std::to_string(options.optLevel));
  const int64_t w = options.vectorWidth;
  if (w < 0 || w > 16 || (w & (w - 1)))
    return Status::error("vector width must be 0 (the host's) or a power "
                         "of two from 1 to 16, got " +
                         std::to_string(w));

  std::unique_ptr<CpuProgram> result(new CpuProgram());
  result->entry_ = entry;
  result->source_ = module.clone().getOperation();

  OwningOpRef<ModuleOp> clone = module.clone();
  auto func = clone->lookupSymbol<func::FuncOp>(entry);
  if (!func || func.isExternal())
    return Status::error("no function '" + entry + "' with a body");
  for (Type type : func.getArgumentTypes())
    if (!isa<RankedTensorType>(type))
      return Status::error("the CPU target takes ranked tensor arguments");
  for (Type type : func.getResultTypes()) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    std::optional<ElementType> elt =
        tensor ? toElementType(tensor.getElementType()) : std::nullopt;
    if (!elt)
      return Status::error("the CPU target returns ranked tensors of "
                           "f32/f16/bf16/f64/i1/i32/i64");
    result->resultTypes_.push_back({*elt, tensor.getRank()});
  }
  // Static sizes the JIT's allocations and index arithmetic can hold.
  for (Type type : llvm::concat<const Type>(func.getArgumentTypes(),
                                            func.getResultTypes())) {
    auto tensor = cast<RankedTensorType>(type);
    std::vector<int64_t> dims;
    for (int64_t d : tensor.getShape())
      if (ShapedType::isStatic(d))
        dims.push_back(d);
    if (!limits::elementCount(dims)) {
      std::string spelled;
      llvm::raw_string_ostream os(spelled);
      os << type;
      return Status::error("'" + entry + "' has a " + spelled +
                           " with more than 2^48 elements");
    }
  }
  func->setAttr("llvm.emit_c_interface", UnitAttr::get(ctx));
  // run() passes the callers' tensors in place: the compiled code must not
  // write them (One-Shot Bufferize copies an argument before it writes),
  // except, with inPlaceAppends, the caches appends write.
  llvm::SmallDenseSet<unsigned> appendedCaches;
  if (options.inPlaceAppends)
    func.walk([&](AppendOp append) {
      if (auto arg = dyn_cast<BlockArgument>(append.getCache());
          arg && arg.getOwner() == &func.getBody().front())
        appendedCaches.insert(arg.getArgNumber());
    });
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    func.setArgAttr(i, "bufferization.writable",
                    BoolAttr::get(ctx, appendedCaches.contains(i)));
  result->inPlaceAppends_ = options.inPlaceAppends;
  result->writtenArguments_.assign(appendedCaches.begin(),
                                   appendedCaches.end());
  llvm::sort(result->writtenArguments_);

  auto start = std::chrono::steady_clock::now();
  {
    DiagnosticCollector diags(ctx);
    PassManager pm(ctx);
    mlir::kvattn::buildKVAttnToCpuPipeline(pm, options);
    if (options.configurePassManager && !options.configurePassManager(pm))
      return Status::error("configuring the kvattn-to-cpu pass manager failed");
    if (failed(pm.run(*clone)))
      return Status::error("the kvattn-to-cpu pipeline failed:\n" +
                           diags.text());
    result->diagnostics_ = diags.diagnostics();
  }
  result->pipelineMs_ = msSince(start);

  start = std::chrono::steady_clock::now();
  // Optimise for this host (its vector width and cost model), as the JIT
  // generates code for it.
  auto hostMachine = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!hostMachine)
    return Status::error("cannot describe the host to LLVM: " +
                         errorToString(hostMachine.takeError()));
  auto targetMachine = hostMachine->createTargetMachine();
  if (!targetMachine)
    return Status::error("cannot create the host's target machine: " +
                         errorToString(targetMachine.takeError()));
  auto transformer = makeOptimizingTransformer(
      options.optLevel, /*sizeLevel=*/0, targetMachine->get());
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = transformer;
  // The OpenMP runtime for the threaded grid (memrefCopy is ours, below).
  std::string libomp = jitLibrary(KVATTN_LIBOMP);
  llvm::SmallVector<llvm::StringRef, 1> libraries;
  if (options.threads != 1)
    libraries.push_back(libomp);
  engineOptions.sharedLibPaths = libraries;
  engineOptions.jitCodeGenOptLevel =
      options.optLevel >= 3   ? llvm::CodeGenOptLevel::Aggressive
      : options.optLevel == 0 ? llvm::CodeGenOptLevel::None
                              : llvm::CodeGenOptLevel::Default;
  auto engine = ExecutionEngine::create(*clone, engineOptions);
  if (!engine)
    return Status::error("JIT compilation failed: " +
                         errorToString(engine.takeError()));
  result->engine_ = std::move(*engine);
  result->engine_->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("memrefCopy")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kvattnMemrefCopy),
        llvm::JITSymbolFlags::Exported};
    // bf16 rounding without AVX512-BF16 (and f16 without F16C) is a libcall
    // the host's libgcc may not define (HostLibcalls.h).
    for (const HostLibcall &call : hostFloat16Libcalls())
      symbols[interner(call.name)] = {
          llvm::orc::ExecutorAddr::fromPtr(call.address),
          llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  result->jitMs_ = msSince(start);

  if (options.stats) {
    auto address = result->engine_->lookup(kStatsSymbol);
    if (!address)
      return Status::error("stats were requested but the JIT has no '" +
                           std::string(kStatsSymbol) +
                           "': " + errorToString(address.takeError()));
    result->statsGlobal_ = static_cast<int64_t *>(*address);
  }
  program = std::move(result);
  return Status::ok();
}

Status CpuProgram::run(const std::vector<HostTensor> &arguments,
                       std::vector<HostTensor> &results) {
  // The C API's checks, in one place (the compiled code trusts its
  // arguments: a shape other than the IR's is read out of bounds, a
  // negative position faults): types, then the run-time values.
  auto func = cast<ModuleOp>(source_).lookupSymbol<func::FuncOp>(entry_);
  // A cache an in-place append writes is read and written while the other
  // arguments are read: none may share its memory.
  for (unsigned w : writtenArguments_) {
    if (w >= arguments.size())
      break;
    for (unsigned i = 0; i < arguments.size(); ++i) {
      if (i != w && arguments[i].sharesMemoryWith(arguments[w]))
        return Status::error(
            "argument " + std::to_string(i) + " of @" + entry_ +
            " shares memory with argument " + std::to_string(w) +
            ", the cache an in-place append writes (in_place_appends): "
            "pass separate buffers");
    }
  }
  KVATTN_RETURN_IF_ERROR(validateFunction(func, arguments));
  return runUnchecked(arguments, results);
}

Status CpuProgram::runUnchecked(const std::vector<HostTensor> &arguments,
                                std::vector<HostTensor> &results) {
  // The arguments are passed in place: compile() marks them read-only for
  // bufferization, so the compiled code copies before it writes.
  std::vector<std::vector<int64_t>> descriptors;
  descriptors.reserve(arguments.size());
  static uint8_t emptyBuffer[1];
  for (const HostTensor &arg : arguments) {
    std::vector<int64_t> desc(descriptorWords(arg.rank()));
    auto ptr = reinterpret_cast<int64_t>(
        arg.byteSize() ? const_cast<uint8_t *>(arg.data()) : emptyBuffer);
    desc[0] = desc[1] = ptr;
    desc[2] = 0;
    int64_t stride = 1;
    for (int64_t d = arg.rank() - 1; d >= 0; --d) {
      desc[3 + d] = arg.dim(d);
      desc[3 + arg.rank() + d] = stride;
      stride *= arg.dim(d);
    }
    descriptors.push_back(std::move(desc));
  }

  int64_t resultWords = 0;
  for (auto [type, rank] : resultTypes_)
    resultWords += descriptorWords(rank);
  std::vector<int64_t> resultStorage(std::max<int64_t>(resultWords, 1));

  std::vector<void *> descriptorPtrs;
  for (auto &desc : descriptors)
    descriptorPtrs.push_back(desc.data());
  void *resultPtr = resultStorage.data();
  std::vector<void *> packed;
  if (!resultTypes_.empty())
    packed.push_back(&resultPtr);
  for (void *&ptr : descriptorPtrs)
    packed.push_back(&ptr);

  if (llvm::Error error =
          engine_->invokePacked("_mlir_ciface_" + entry_, packed))
    return Status::error("invoking '" + entry_ +
                         "' failed: " + errorToString(std::move(error)));

  results.clear();
  std::set<uintptr_t> inputs, freed;
  for (const auto &desc : descriptors)
    inputs.insert(static_cast<uintptr_t>(desc[0]));
  int64_t *word = resultStorage.data();
  for (auto [type, rank] : resultTypes_) {
    std::vector<int64_t> shape(word + 3, word + 3 + rank);
    const size_t width = elementTypeSize(type);
    auto *base = reinterpret_cast<const uint8_t *>(word[1]) + word[2] * width;
    const int64_t *strides = word + 3 + rank;
    bool rowMajor = true;
    for (int64_t d = rank - 1, expected = 1; d >= 0; --d) {
      rowMajor &= shape[d] == 1 || strides[d] == expected;
      expected *= shape[d];
    }
    HostTensor tensor;
    if (rowMajor && inPlaceAppends_ &&
        inputs.count(static_cast<uintptr_t>(word[0]))) {
      // A cache an append wrote in place: the caller's memory, as it is.
      KVATTN_RETURN_IF_ERROR(HostTensor::view(type, shape, base, tensor));
    } else if (rowMajor) {
      tensor = HostTensor(type, shape);
      if (tensor.byteSize())
        std::memcpy(tensor.mutableData(), base, tensor.byteSize());
    } else {
      tensor = HostTensor(type, shape);
      std::vector<int64_t> index(rank, 0);
      for (int64_t n = 0; n < tensor.numElements(); ++n) {
        int64_t rest = n, offset = 0;
        for (int64_t d = rank - 1; d >= 0; --d) {
          index[d] = rest % shape[d];
          rest /= shape[d];
        }
        for (int64_t d = 0; d < rank; ++d)
          offset += index[d] * strides[d];
        std::memcpy(tensor.mutableData() + n * width, base + offset * width, width);
      }
    }
    results.push_back(std::move(tensor));
    word += descriptorWords(rank);
  }
  // Fresh allocations made by the compiled code are ours to free, once
  // every result has been copied (two results may share one allocation).
  word = resultStorage.data();
  for (auto [type, rank] : resultTypes_) {
    auto allocated = static_cast<uintptr_t>(word[0]);
    if (allocated && allocated != kDeadBeef && !inputs.count(allocated) &&
        freed.insert(allocated).second)
      std::free(reinterpret_cast<void *>(allocated));
    word += descriptorWords(rank);
  }
  return Status::ok();
}

BlockStats CpuProgram::stats() const {
  if (!statsGlobal_)
    return {};
  return {statsGlobal_[0], statsGlobal_[1], statsGlobal_[2], statsGlobal_[3]};
}

void CpuProgram::resetStats() {
  if (statsGlobal_)
    std::memset(statsGlobal_, 0, 4 * sizeof(int64_t));
}

} // namespace kvattn
} // namespace mlir
