//===- Ptx.cpp - PTX and launch manifests from kvattn IR ------------------===//

#include "kvattn/Target/Ptx.h"
#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/IR/DiagnosticCollector.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Target/KernelCache.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace mlir;

namespace mlir {
namespace kvattn {

static std::string typeName(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  type.print(os);
  return s;
}

static KernelManifest readManifest(gpu::GPUFuncOp kernel) {
  KernelManifest m;
  m.name = kernel.getName().str();
  TileConfigAttr config = getTileConfig(kernel);
  m.blockM = config.getBlockM();
  m.blockN = config.getBlockN();
  m.numWarps = config.getNumWarps();
  m.numStages = config.getNumStages();
  m.group = config.getGroup();
  m.splitKv = config.getSplitKv();
  m.kind = stringifyKernelKind(config.getKind()).str();
  // A cascade's B = 1 kernels (docs/kernel-abi.md, "Cascade kernels").
  if (auto cascade = kernel->getAttrOfType<StringAttr>(kCascadeAttr))
    m.kind = "cascade_" + cascade.str();
  m.skipPadding = kernel->hasAttr(kSkipPaddingAttr);
  // A ragged batch's split merges packed rows (B = 1).
  if (kernel->hasAttr(kVarlenMergeAttr))
    m.kind = "merge_varlen";
  if (SplitRuleAttr rule = config.getSplitRule())
    m.splitRule = {rule.getMax(),   rule.getBlockM(),        rule.getBlockN(),
                   rule.getGroup(), rule.getProgramsPerSm(), rule.getMinKeys(),
                   rule.getNumSms()};
  // The block the outlining gave the kernel: 32 x num_warps, plus a TMA
  // kernel's producer warpgroup.
  m.threadsPerBlock = 32 * m.numWarps;
  if (std::optional<ArrayRef<int32_t>> block = kernel.getKnownBlockSize())
    m.threadsPerBlock = (*block)[0];
  m.dynamicSharedMemoryBytes =
      kernel->getAttrOfType<IntegerAttr>("kvattn.dynamic_smem_bytes").getInt();
  for (KernelParamAttr param : getKernelParams(kernel)) {
    KernelParam p;
    p.name = param.getName().str();
    p.kind = stringifyParamKind(param.getKind()).str();
    p.elementType = typeName(param.getElementType());
    if (param.isPointer()) {
      for (Attribute d : param.getShape())
        p.shape.push_back(isa<StringAttr>(d)
                              ? cast<StringAttr>(d).str()
                              : std::to_string(cast<IntegerAttr>(d).getInt()));
      p.access = stringifyParamAccess(param.getAccess()).str();
    }
    if (ArrayAttr maps = param.getMaps()) {
      std::string json = "[";
      auto str = [](Attribute a) {
        return "\"" + cast<StringAttr>(a).str() + "\"";
      };
      auto ints = [](Attribute a) {
        std::string s = "[";
        for (auto [i, v] : llvm::enumerate(cast<ArrayAttr>(a)))
          s += (i ? ", " : "") + std::to_string(cast<IntegerAttr>(v).getInt());
        return s + "]";
      };
      for (auto [i, a] : llvm::enumerate(maps)) {
        auto d = cast<DictionaryAttr>(a);
        json += std::string(i ? ", " : "") +
                "{\"name\": " + str(d.get("name")) +
                ", \"buffer\": " + str(d.get("buffer")) +
                ", \"dims\": " + ints(d.get("dims")) +
                ", \"box\": " + ints(d.get("box")) +
                ", \"swizzle\": " + str(d.get("swizzle")) +
                ", \"element_type\": \"" +
                typeName(cast<TypeAttr>(d.get("element_type")).getValue()) +
                "\", \"oob_fill\": " + str(d.get("oob_fill")) + "}";
      }
      p.mapsJson = json + "]";
    }
    m.params.push_back(std::move(p));
  }
  return m;
}

static Status compileUncached(ModuleOp module, const PtxOptions &options,
                              const std::string &libdevice, PtxModule &result);

/// $KVATTN_DUMP_DIR, or null.
static const char *dumpDirectory() {
  const char *dir = std::getenv("KVATTN_DUMP_DIR");
  return dir && *dir ? dir : nullptr;
}

/// Writes FILE in $KVATTN_DUMP_DIR (created if needed) with `write`.
static Status dump(llvm::StringRef file,
                   llvm::function_ref<void(llvm::raw_ostream &)> write) {
  const char *dir = dumpDirectory();
  if (!dir)
    return Status::ok();
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return Status::error("KVATTN_DUMP_DIR: cannot create '" + std::string(dir) +
                         "': " + ec.message());
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, file);
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return Status::error("KVATTN_DUMP_DIR: cannot write '" + path.str().str() +
                         "': " + ec.message());
  write(os);
  // Checked after the last flush, and cleared: a stream destroyed with an
  // error ends the process ("LLVM ERROR: IO failure on output stream").
  os.close();
  if (os.has_error()) {
    std::string why = os.error().message();
    os.clear_error();
    return Status::error("KVATTN_DUMP_DIR: writing '" + path.str().str() +
                         "' failed: " + why);
  }
  return Status::ok();
}

/// Whether a value of the module is a static tensor of 2^31 elements or
/// more, which 32-bit kernels cannot index (the runtime would refuse every
/// launch).
static bool hasTensorOf2To31Elements(ModuleOp module) {
  bool found = false;
  module.walk([&](Operation *op) {
    for (Type type : op->getOperandTypes())
      if (auto tensor = dyn_cast<RankedTensorType>(type);
          tensor && tensor.hasStaticShape() &&
          tensor.getNumElements() >= (int64_t(1) << 31))
        found = true;
    return found ? WalkResult::interrupt() : WalkResult::advance();
  });
  return found;
}

Status compileToPtx(ModuleOp module, const PtxOptions &givenOptions,
                    PtxModule &result) {
  auto start = std::chrono::steady_clock::now();
  // Static shapes too large for 32-bit index arithmetic get 64 bits by
  // themselves (dynamic ones are checked per launch, naming the option).
  PtxOptions options = givenOptions;
  if (options.indexBitwidth == 32 && hasTensorOf2To31Elements(module))
    options.indexBitwidth = 64;
  if (std::string why = mlir::kvattn::unsupportedChipReason(options.chip);
      !why.empty())
    return Status::error("cannot generate code for chip '" + options.chip +
                         "': " + why);
  if (options.indexBitwidth != 32 && options.indexBitwidth != 64)
    return Status::error("index bitwidth " +
                         std::to_string(options.indexBitwidth) +
                         " is not supported (32 or 64)");
  if (options.llvmOptLevel > 3)
    return Status::error("LLVM opt level must be 0 to 3, got " +
                         std::to_string(options.llvmOptLevel));
  std::string libdevice = mlir::kvattn::findLibdevice(options.libdevice);
  if (libdevice.empty())
    return Status::error(
        "libdevice.10.bc not found (looked at " +
        (options.libdevice.empty()
             ? std::string("$CUDA_HOME, $CUDA_PATH and /usr/local/cuda")
             : options.libdevice) +
        "): the PTX would call undefined math functions");
  auto elapsedMs = [&] {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
        .count();
  };
  // Pass-manager options and dumps are about running the pipelines: they
  // bypass the cache.
  std::optional<KernelCache> cache;
  if (options.useKernelCache && !options.configurePassManager &&
      !dumpDirectory())
    cache = KernelCache::fromEnvironment();
  if (!cache) {
    KVATTN_RETURN_IF_ERROR(compileUncached(module, options, libdevice, result));
    result.cache = "off";
    result.compileMs = elapsedMs();
    return Status::ok();
  }
  std::string key = KernelCache::key(module, options);
  KernelCache::Lookup found = cache->lookup(key, result);
  if (found == KernelCache::Lookup::Hit) {
    result.cache = "hit";
    result.compileMs = elapsedMs();
    return Status::ok();
  }
  KVATTN_RETURN_IF_ERROR(compileUncached(module, options, libdevice, result));
  result.cache = found == KernelCache::Lookup::Corrupt ? "replaced" : "miss";
  // A cache that cannot be written costs the next process a compile, not
  // this one its result.
  if (Status stored = cache->store(key, result); stored.isError())
    result.cache = "unwritable: " + stored.message();
  result.compileMs = elapsedMs();
  return Status::ok();
}

/// The pipelines themselves: kvattn-to-ptx's two halves, the manifest read
/// in between.
static Status compileUncached(ModuleOp module, const PtxOptions &options,
                              const std::string &libdevice, PtxModule &result) {
  MLIRContext *ctx = module.getContext();
  OwningOpRef<ModuleOp> clone = module.clone();
  DiagnosticCollector diags(ctx);
  auto configure = [&](PassManager &pm) -> Status {
    if (options.configurePassManager && !options.configurePassManager(pm))
      return Status::error("the pass-manager options were refused:\n" +
                           diags.text());
    return Status::ok();
  };
  KVATTN_RETURN_IF_ERROR(
      dump("0-input.mlir", [&](llvm::raw_ostream &os) { module->print(os); }));
  using Clock = std::chrono::steady_clock;
  auto msSince = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start)
        .count();
  };
  PassManager kernels(ctx);
  mlir::kvattn::buildKVAttnToGpuKernelsPipeline(kernels, options);
  KVATTN_RETURN_IF_ERROR(configure(kernels));
  Clock::time_point kernelsStart = Clock::now();
  if (failed(kernels.run(*clone)))
    return Status::error("building the GPU kernels failed:\n" + diags.text());
  const double kernelsMs = msSince(kernelsStart);
  KVATTN_RETURN_IF_ERROR(
      dump("1-kernels.mlir", [&](llvm::raw_ostream &os) { clone->print(os); }));

  result = PtxModule();
  result.chip = options.chip;
  result.indexBits = static_cast<int>(options.indexBitwidth);
  // In launch order (the host's program order): a cache write comes before
  // the attention that reads the cache, whatever order the passes created
  // the kernels in.
  clone->walk([&](gpu::LaunchFuncOp launch) {
    auto kernel = SymbolTable::lookupNearestSymbolFrom<gpu::GPUFuncOp>(
        launch, launch.getKernel());
    if (kernel && hasKernelParams(kernel))
      result.kernels.push_back(readManifest(kernel));
  });
  if (result.kernels.empty())
    return Status::error(
        "nothing to compile: the module has no kvattn.attention, "
        "kvattn.sdpa or kvattn.append");

  PassManager ptx(ctx);
  DeviceCodegenTimes device;
  mlir::kvattn::buildGpuKernelsToPtxPipeline(ptx, options, libdevice, &device);
  KVATTN_RETURN_IF_ERROR(configure(ptx));
  Clock::time_point ptxStart = Clock::now();
  if (failed(ptx.run(*clone)))
    return Status::error("NVVM/PTX code generation failed:\n" + diags.text());
  const double ptxMs = msSince(ptxStart);
  result.kernelsMs = kernelsMs;
  result.diagnostics = diags.diagnostics();
  result.translateMs = device.translateMs;
  result.linkMs = device.linkMs;
  result.optimizeMs = device.optimizeMs;
  result.codegenMs = device.codegenMs;
  result.nvvmMs = std::max(0.0, ptxMs - device.translateMs - device.linkMs -
                                    device.optimizeMs - device.codegenMs);
  auto binary = clone->lookupSymbol<gpu::BinaryOp>("kvattn_kernels");
  if (!binary || binary.getObjects().size() != 1)
    return Status::error("kvattn-gpu-module-to-ptx produced no PTX");
  auto object = cast<gpu::ObjectAttr>(binary.getObjects()[0]);
  result.image = options.image;
  if (options.image == DeviceImage::LlvmIR) {
    // format=llvm gives bitcode; the emulator's image
    // is the same module as text (NUL-free, like PTX, and readable).
    llvm::LLVMContext llvmContext;
    auto buffer = llvm::MemoryBuffer::getMemBuffer(
        object.getObject().getValue(), "kvattn-device", false);
    llvm::Expected<std::unique_ptr<llvm::Module>> device =
        llvm::parseBitcodeFile(buffer->getMemBufferRef(), llvmContext);
    if (!device)
      return Status::error("reading the device bitcode failed: " +
                           llvm::toString(device.takeError()));
    llvm::raw_string_ostream os(result.ptx);
    (*device)->print(os, nullptr);
  } else {
    result.ptx = object.getObject().str();
  }
  const std::string image =
      options.image == DeviceImage::LlvmIR ? "2-device.ll" : "2-kernels.ptx";
  KVATTN_RETURN_IF_ERROR(
      dump(image, [&](llvm::raw_ostream &os) { os << result.ptx; }));
  return dump("3-manifest.json", [&](llvm::raw_ostream &os) {
    os << manifestToJson(result, image);
  });
}

static std::string quoted(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

/// A JSON string: quotes, backslashes and control characters escaped.
static std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string manifestToJson(const PtxModule &module,
                           const std::string &ptxFile) {
  std::string j;
  llvm::raw_string_ostream os(j);
  const bool runTimeSplit =
      llvm::any_of(module.kernels, [](const KernelManifest &m) {
        return m.splitRule.maxSplits > 0;
      });
  os << "{\n"
     << "  \"format\": \"kvattn-launch-manifest\",\n"
     << "  \"version\": "
     << (runTimeSplit ? kManifestVersionRunTimeSplit : kManifestVersion)
     << ",\n"
     << "  \"chip\": " << quoted(module.chip) << ",\n"
     << "  \"index_bits\": " << module.indexBits << ",\n"
     << "  \"ptx_file\": " << quoted(ptxFile) << ",\n"
     << "  \"kernels\": [";
  for (size_t k = 0; k < module.kernels.size(); ++k) {
    const KernelManifest &m = module.kernels[k];
    os << (k ? "," : "") << "\n    {\n"
       << "      \"name\": " << quoted(m.name) << ",\n"
       << "      \"params\": [";
    for (size_t i = 0; i < m.params.size(); ++i) {
      const KernelParam &p = m.params[i];
      os << (i ? "," : "") << "\n        {\"index\": " << i
         << ", \"name\": " << quoted(p.name) << ", \"kind\": " << quoted(p.kind)
         << ", \"type\": " << quoted(p.kind == "scalar" ? "i64" : "u64");
      if (p.kind == "tensor_maps") {
        os << ", \"maps\": " << p.mapsJson << "}";
        continue;
      }
      os << ", \"element_type\": " << quoted(p.elementType);
      if (p.kind == "pointer") {
        os << ", \"shape\": [";
        for (size_t d = 0; d < p.shape.size(); ++d) {
          bool number = !p.shape[d].empty() && std::isdigit(p.shape[d][0]);
          os << (d ? ", " : "") << (number ? p.shape[d] : quoted(p.shape[d]));
        }
        os << "], \"access\": " << quoted(p.access);
      }
      os << "}";
    }
    os << "\n      ],\n"
       << "      \"grid\": ";
    if (m.kind == "validate")
      // One block per batch.
      os << "{\"x\": \"B\", \"y\": 1, \"z\": 1},\n";
    else if (m.kind == "append")
      // One warp per new token, block_m tokens per thread block.
      os << "{\"x\": \"ceil(B * L / " << m.blockM
         << ")\", \"y\": 1, \"z\": 1},\n";
    else if (m.kind == "cascade_prefix")
      // B = 1: every packed row of the cascade over the shared prefix.
      os << "{\"x\": \""
         << (m.group > 1 ? "Hq / " + std::to_string(m.group) : "Hq")
         << "\", \"y\": \"ceil("
         << (m.group > 1 ? std::to_string(m.group) + " * L" : "L") << " / "
         << m.blockM << ")\", \"z\": 1},\n";
    else if (m.kind == "cascade_merge" || m.kind == "merge_varlen")
      // B = 1: the packed rows.
      os << "{\"x\": \"Hq\", \"y\": \"ceil(L / " << m.blockM
         << ")\", \"z\": 1},\n";
    else if (m.kind == "attention_varlen")
      // A ragged batch: x the (kv) heads, y floor(G * T / BM) + B query
      // blocks (L stands for the packed rows T, B for the sequences).
      os << "{\"x\": \""
         << (m.group > 1 ? "Hq / " + std::to_string(m.group) : "Hq")
         << "\", \"y\": \"floor("
         << (m.group > 1 ? std::to_string(m.group) + " * L" : "L") << " / "
         << m.blockM << ") + B\", \"z\": "
         << (m.splitKv == 0 ? std::string("\"N\"") : std::to_string(m.splitKv))
         << "},\n";
    else
      os << "{\"x\": \""
         << (m.group > 1 ? "B * Hq / " + std::to_string(m.group) : "B * Hq")
         << "\", \"y\": \"ceil("
         << (m.group > 1 ? std::to_string(m.group) + " * L" : "L") << " / "
         << m.blockM << ")\", \"z\": "
         << (m.splitKv == 0 ? std::string("\"N\"") : std::to_string(m.splitKv))
         << "},\n";
    os << "      \"block\": {\"x\": " << m.threadsPerBlock
       << ", \"y\": 1, \"z\": 1},\n"
       << "      \"dynamic_shared_memory_bytes\": "
       << m.dynamicSharedMemoryBytes << ",\n"
       << "      \"tile\": {\"block_m\": " << m.blockM
       << ", \"block_n\": " << m.blockN << ", \"num_warps\": " << m.numWarps
       << ", \"num_stages\": " << m.numStages << ", \"group\": " << m.group
       << ", \"split_kv\": " << m.splitKv << "},\n";
    if (const KernelManifest::SplitRule &r = m.splitRule; r.maxSplits > 0)
      os << "      \"split\": {\"max\": " << r.maxSplits
         << ", \"block_m\": " << r.blockM << ", \"block_n\": " << r.blockN
         << ", \"group\": " << r.group
         << ", \"programs_per_sm\": " << r.programsPerSm
         << ", \"min_keys\": " << r.minKeys << ", \"num_sms\": " << r.numSms
         << "},\n";
    if (m.skipPadding)
      os << "      \"skip_padding\": true,\n";
    os << "      \"kind\": " << quoted(m.kind) << "\n"
       << "    }";
  }
  os << "\n  ],\n"
     << "  \"diagnostics\": [";
  for (size_t i = 0; i < module.diagnostics.size(); ++i) {
    const CompilerDiagnostic &d = module.diagnostics[i];
    os << (i ? "," : "") << "\n    {\"severity\": "
       << jsonString(CompilerDiagnostic::severityName(d.severity))
       << ", \"location\": " << jsonString(d.location)
       << ", \"message\": " << jsonString(d.message) << "}";
  }
  os << (module.diagnostics.empty() ? "]\n" : "\n  ]\n") << "}\n";
  return j;
}

} // namespace kvattn
} // namespace mlir
