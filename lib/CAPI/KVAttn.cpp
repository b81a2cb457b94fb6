//===- KVAttn.cpp - the kvattn C API --------------------------------------===//

#include "kvattn-c/KVAttn.h"
#include "Diagnostics.h"

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/GPU/PlanCompile.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Runtime/EmulatedGpu.h"
#include "kvattn/Runtime/Plan.h"
#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/TensorCheck.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <type_traits>

using mlir::kvattn::ElementType;
using mlir::kvattn::HostTensor;
using mlir::kvattn::Status;

struct kvattn_runtime {
  std::unique_ptr<mlir::kvattn::rt::Runtime> runtime;
  int device = 0;
};

/// The type of one argument or result of a CPU program's function.
using TensorType = mlir::kvattn::ExpectedTensor;

struct kvattn_cpu_program {
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string entry;
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  std::vector<TensorType> arguments, results;
  /// The results of the last successful run (kvattn_cpu_program_result).
  std::vector<HostTensor> last;
};

const mlir::kvattn::CpuProgram &kvattn::capi::cpuProgram(
    const kvattn_cpu_program &program) {
  return *program.program;
}

struct kvattn_plan {
  kvattn_runtime *runtime;
  std::string manifestJson;
  std::unique_ptr<mlir::kvattn::rt::Plan> plan;
};

struct kvattn_graph {
  mlir::kvattn::rt::Runtime *runtime;
  std::unique_ptr<mlir::kvattn::rt::Graph> graph;
};

struct kvattn_kernel {
  mlir::kvattn::rt::Runtime *runtime;
  const mlir::kvattn::rt::Module *module;
  mlir::kvattn::rt::KernelInfo info;
};

static char *copyString(const std::string &s) {
  char *out = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

/// 0 on success; else sets *error (when wanted) and returns 1.
static int report(const Status &status, char **error) {
  if (status.isOk())
    return 0;
  if (error)
    *error = copyString(status.message());
  return 1;
}

/// Parses `ir` into `module`; errors carry the parser's diagnostics.
static Status parse(const char *ir, mlir::MLIRContext &context,
                    mlir::OwningOpRef<mlir::ModuleOp> &module) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context, "input");
  if (!module)
    return Status::error("cannot parse the IR: " + diagnostics);
  return Status::ok();
}

/// A caller's struct_size-versioned struct over `out` (its defaults): the
/// first struct_size bytes are the caller's (an older header has fewer
/// fields), the rest keep their defaults. `what` names it in errors
/// ("options", "desc"), `init` is its initialiser, `minimum` the fewest
/// bytes a caller may give.
template <typename T>
static Status readVersioned(const std::string &what, const char *init,
                            size_t minimum, const T &given, T &out) {
  if (given.struct_size < minimum)
    return Status::error(what + ".struct_size is " +
                         std::to_string(given.struct_size) + ": set it with " +
                         init + " (sizeof = " + std::to_string(sizeof(T)) +
                         ")");
  if (given.struct_size > sizeof(T))
    return Status::error(
        what + ".struct_size is " + std::to_string(given.struct_size) +
        ", larger than this library's " + std::to_string(sizeof(T)) +
        " (a header newer than the library)");
  std::memcpy(&out, &given, given.struct_size);
  out.struct_size = sizeof(T);
  return Status::ok();
}

/// A 0/1 field: `field` names it ("prefix: options.tensor_cores").
static Status checkFlag(const std::string &field, int32_t value) {
  return value != 0 && value != 1
             ? Status::error(field + " = " + std::to_string(value) +
                             " is not 0 or 1")
             : Status::ok();
}

/// The caller's options over the defaults: the first struct_size bytes are
/// the caller's (an older header has fewer fields), the rest keep their
/// defaults. Null: the defaults.
static Status readOptions(const char *what, const kvattn_compile_options *given,
                          kvattn_compile_options &options) {
  kvattn_compile_options_init(&options);
  if (!given)
    return Status::ok();
  const std::string prefix = std::string(what) + ": ";
  KVATTN_RETURN_IF_ERROR(readVersioned(
      prefix + "options", "kvattn_compile_options_init",
      offsetof(kvattn_compile_options, chip) + sizeof(given->chip), *given,
      options));
  auto nonNegative = [&](const char *name, int64_t value) {
    return value < 0 ? Status::error(prefix + "options." + name + " = " +
                                     std::to_string(value) + " is negative")
                     : Status::ok();
  };
  auto boolean = [&](const char *name, int32_t value) {
    return checkFlag(prefix + "options." + name, value);
  };
  KVATTN_RETURN_IF_ERROR(nonNegative("block_m", options.block_m));
  KVATTN_RETURN_IF_ERROR(nonNegative("block_n", options.block_n));
  KVATTN_RETURN_IF_ERROR(nonNegative("num_warps", options.num_warps));
  KVATTN_RETURN_IF_ERROR(nonNegative("num_stages", options.num_stages));
  KVATTN_RETURN_IF_ERROR(nonNegative("split_kv", options.split_kv));
  KVATTN_RETURN_IF_ERROR(nonNegative("num_sms", options.num_sms));
  KVATTN_RETURN_IF_ERROR(nonNegative("vector_width", options.vector_width));
  KVATTN_RETURN_IF_ERROR(nonNegative("threads", options.threads));
  KVATTN_RETURN_IF_ERROR(boolean("pack_gqa", options.pack_gqa));
  KVATTN_RETURN_IF_ERROR(boolean("tensor_cores", options.tensor_cores));
  KVATTN_RETURN_IF_ERROR(boolean("use_kernel_cache", options.use_kernel_cache));
  KVATTN_RETURN_IF_ERROR(boolean("vectorize", options.vectorize));
  if (options.opt_level < 0 || options.opt_level > 3)
    return Status::error(
        prefix + "options.opt_level = " + std::to_string(options.opt_level) +
        " is outside [0, 3]");
  if (options.reserved0)
    return Status::error(prefix + "options.reserved0 must be 0");
  KVATTN_RETURN_IF_ERROR(
      boolean("device_validation", options.device_validation));
  if (options.reserved1)
    return Status::error(prefix + "options.reserved1 must be 0");
  KVATTN_RETURN_IF_ERROR(
      boolean("fix_upper_left_appends", options.fix_upper_left_appends));
  if (options.reserved2)
    return Status::error(prefix + "options.reserved2 must be 0");
  return Status::ok();
}

static mlir::kvattn::PtxOptions toPtxOptions(const kvattn_compile_options &o,
                                             mlir::kvattn::DeviceImage image) {
  mlir::kvattn::PtxOptions options;
  if (o.chip)
    options.chip = o.chip;
  options.blockM = o.block_m;
  options.blockN = o.block_n;
  options.numWarps = o.num_warps;
  options.numStages = o.num_stages;
  options.splitKv = o.split_kv;
  options.numSms = o.num_sms;
  options.packGqa = o.pack_gqa;
  options.tensorCores = o.tensor_cores;
  options.useKernelCache = o.use_kernel_cache;
  options.deviceValidation = o.device_validation;
  options.fixUpperLeftAppends = o.fix_upper_left_appends;
  options.image = image;
  return options;
}

static mlir::kvattn::CpuCompileOptions
toCpuOptions(const kvattn_compile_options &o) {
  mlir::kvattn::CpuCompileOptions options;
  options.blockM = o.block_m;
  if (o.block_n) // 0: the CPU's default
    options.blockN = o.block_n;
  options.splitKv = o.split_kv;
  options.packGqa = o.pack_gqa;
  options.vectorize = o.vectorize;
  options.vectorWidth = o.vector_width;
  options.threads = o.threads;
  options.optLevel = static_cast<unsigned>(o.opt_level);
  options.fixUpperLeftAppends = o.fix_upper_left_appends;
  return options;
}

/// Compiles `ir` to a device image (PTX or the emulator's LLVM IR).
static int compile(const char *what, mlir::kvattn::DeviceImage image,
                   const char *ir, const kvattn_compile_options *given,
                   char **ptx, char **manifest_json, char **error) {
  if (!ir || !ptx || !manifest_json)
    return report(Status::error(std::string(what) + ": null argument"), error);
  kvattn_compile_options o;
  if (int failed = report(readOptions(what, given, o), error))
    return failed;
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (int failed = report(parse(ir, context, module), error))
    return failed;
  mlir::kvattn::PtxModule result;
  if (int failed = report(
          mlir::kvattn::compileToPtx(*module, toPtxOptions(o, image), result),
          error))
    return failed;
  *ptx = copyString(result.ptx);
  *manifest_json = copyString(mlir::kvattn::manifestToJson(
      result,
      image == mlir::kvattn::DeviceImage::Ptx ? "kernel.ptx" : "kernel.ll"));
  return 0;
}

/// The chip alone, as the compile functions of the first API take it.
static kvattn_compile_options chipOnly(const char *chip) {
  kvattn_compile_options options;
  kvattn_compile_options_init(&options);
  options.chip = chip;
  return options;
}

/// The value a C caller stored in an enum (a field or a parameter), read as
/// an integer: C allows any int there, and loading a C++ enum outside its
/// enumerators' range is undefined.
template <typename Enum> static int rawEnum(const Enum &value) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &value, sizeof raw);
  return static_cast<int>(raw);
}

static std::optional<ElementType> toElementType(const kvattn_dtype &dtype) {
  switch (rawEnum(dtype)) {
  case KVATTN_F32:
    return ElementType::F32;
  case KVATTN_F16:
    return ElementType::F16;
  case KVATTN_BF16:
    return ElementType::BF16;
  case KVATTN_F64:
    return ElementType::F64;
  case KVATTN_I1:
    return ElementType::I1;
  case KVATTN_I32:
    return ElementType::I32;
  case KVATTN_I64:
    return ElementType::I64;
  }
  return std::nullopt;
}

static kvattn_dtype toDtype(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return KVATTN_F32;
  case ElementType::F16:
    return KVATTN_F16;
  case ElementType::BF16:
    return KVATTN_BF16;
  case ElementType::F64:
    return KVATTN_F64;
  case ElementType::I1:
    return KVATTN_I1;
  case ElementType::I32:
    return KVATTN_I32;
  case ElementType::I64:
    return KVATTN_I64;
  }
  return KVATTN_F32;
}

static std::string shapeString(const std::vector<int64_t> &shape,
                               const char *elementType) {
  std::string out;
  for (int64_t d : shape)
    out += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return out + elementType;
}

/// A caller's host tensor as "2x4x8x64xf16" (its dtype "dtype 9" when not a
/// kvattn_dtype).
static std::string describe(const kvattn_host_tensor &t) {
  std::optional<ElementType> type = toElementType(t.dtype);
  std::vector<int64_t> shape(t.shape, t.shape + (t.shape ? t.rank : 0));
  return shapeString(shape,
                     type ? mlir::kvattn::elementTypeName(*type) : "(dtype ?)");
}

/// Checks a caller's tensor against a function type: a known dtype, a
/// shape, non-negative dims, then the type, rank and every static dim (the
/// shared checks of kvattn/Support/TensorCheck.h; for outputs against the
/// computed results every dim), a size this host can hold, data present.
static Status checkTensor(const std::string &what, const kvattn_host_tensor &t,
                          const TensorType &want) {
  std::optional<ElementType> type = toElementType(t.dtype);
  if (!type)
    return Status::error(what + " has dtype " +
                         std::to_string(rawEnum(t.dtype)) +
                         ", which is not a kvattn_dtype");
  if (t.rank && !t.shape)
    return Status::error(what + " has rank " + std::to_string(t.rank) +
                         " and a null shape");
  for (size_t d = 0; d < t.rank; ++d)
    if (t.shape[d] < 0)
      return Status::error(what + " has a negative dim " +
                           std::to_string(t.shape[d]));
  const std::string given = describe(t);
  std::vector<int64_t> shape(t.shape, t.shape + t.rank);
  KVATTN_RETURN_IF_ERROR(
      mlir::kvattn::checkTensorType(what, *type, shape, want));
  KVATTN_RETURN_IF_ERROR(HostTensor::checkShape(*type, shape));
  int64_t elements = 1;
  for (int64_t d : shape)
    elements *= d;
  if (elements && !t.data)
    return Status::error(what + " (" + given + ") has null data");
  return Status::ok();
}

static Status tensorType(mlir::Type type, TensorType &out) {
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type);
  std::optional<ElementType> elt =
      tensor ? mlir::kvattn::toElementType(tensor.getElementType())
             : std::nullopt;
  std::string spelled;
  llvm::raw_string_ostream os(spelled);
  os << type;
  if (!elt)
    return Status::error("the CPU path takes and returns ranked tensors of "
                         "f32/f16/bf16/f64/i1/i32/i64, not " +
                         spelled);
  out.type = *elt;
  out.shape.clear();
  for (int64_t d : tensor.getShape())
    out.shape.push_back(mlir::ShapedType::isDynamic(d) ? -1 : d);
  out.spelled = spelled;
  return Status::ok();
}

static Status cpuCompile(const char *ir, const char *entry,
                         const kvattn_compile_options *given,
                         std::unique_ptr<kvattn_cpu_program> &program) {
  const char *what = "kvattn_cpu_compile";
  kvattn_compile_options o;
  KVATTN_RETURN_IF_ERROR(readOptions(what, given, o));
  auto p = std::make_unique<kvattn_cpu_program>();
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  p->context = std::make_unique<mlir::MLIRContext>(registry);
  KVATTN_RETURN_IF_ERROR(parse(ir, *p->context, p->module));
  mlir::func::FuncOp func;
  if (entry) {
    func = p->module->lookupSymbol<mlir::func::FuncOp>(entry);
    if (!func || func.isExternal())
      return Status::error(std::string(what) + ": the IR has no function '" +
                           entry + "' with a body");
  } else {
    std::string names;
    int candidates = 0;
    for (auto f : p->module->getOps<mlir::func::FuncOp>()) {
      if (f.isExternal() || f.isPrivate())
        continue;
      names += (candidates++ ? ", @" : "@") + f.getName().str();
      func = f;
    }
    if (candidates != 1)
      return Status::error(
          std::string(what) + ": " +
          (candidates ? "the IR has " + std::to_string(candidates) +
                            " public functions (" + names + "): name the entry"
                      : std::string("the IR has no public function")));
  }
  p->entry = func.getName().str();
  for (mlir::Type type : func.getArgumentTypes()) {
    p->arguments.emplace_back();
    KVATTN_RETURN_IF_ERROR(tensorType(type, p->arguments.back()));
  }
  for (mlir::Type type : func.getResultTypes()) {
    p->results.emplace_back();
    KVATTN_RETURN_IF_ERROR(tensorType(type, p->results.back()));
  }
  KVATTN_RETURN_IF_ERROR(mlir::kvattn::CpuProgram::compile(
      *p->module, p->entry, toCpuOptions(o), p->program));
  program = std::move(p);
  return Status::ok();
}

static Status cpuRun(kvattn_cpu_program &p, const kvattn_host_tensor *inputs,
                     size_t numInputs, const kvattn_host_tensor *outputs,
                     size_t numOutputs) {
  const std::string prefix = "kvattn_cpu_run: ";
  const std::string fn = "@" + p.entry;
  if (numInputs != p.arguments.size())
    return Status::error(prefix + std::to_string(numInputs) + " input" +
                         (numInputs == 1 ? "" : "s") + " given, but " + fn +
                         " takes " + std::to_string(p.arguments.size()));
  if (numInputs && !inputs)
    return Status::error(prefix + "null inputs array with num_inputs = " +
                         std::to_string(numInputs));
  if (numOutputs && numOutputs != p.results.size())
    return Status::error(prefix + std::to_string(numOutputs) + " output" +
                         (numOutputs == 1 ? "" : "s") + " given, but " + fn +
                         " returns " + std::to_string(p.results.size()) +
                         " (or pass none and read kvattn_cpu_program_result)");
  if (numOutputs && !outputs)
    return Status::error(prefix + "null outputs array with num_outputs = " +
                         std::to_string(numOutputs));
  std::vector<HostTensor> arguments(numInputs);
  for (size_t i = 0; i < numInputs; ++i) {
    const kvattn_host_tensor &t = inputs[i];
    KVATTN_RETURN_IF_ERROR(checkTensor(prefix + "input " + std::to_string(i) +
                                           " (argument " + std::to_string(i) +
                                           " of " + fn + ")",
                                       t, p.arguments[i]));
    ElementType type = p.arguments[i].type;
    KVATTN_RETURN_IF_ERROR(HostTensor::make(
        type, std::vector<int64_t>(t.shape, t.shape + t.rank), arguments[i]));
    if (arguments[i].byteSize())
      std::memcpy(arguments[i].data(), t.data, arguments[i].byteSize());
  }
  // The checks every entry point runs (i1 bytes here; CpuProgram::run runs
  // them again with the run-time values -- offsets, lengths, block tables,
  // cache writes -- and the reference's messages).
  auto func = p.module->lookupSymbol<mlir::func::FuncOp>(p.entry);
  if (Status s = mlir::kvattn::checkArguments(
          func, arguments,
          [&](size_t i) {
            return "input " + std::to_string(i) + " (argument " +
                   std::to_string(i) + " of " + fn + ")";
          });
      s.isError())
    return Status::error(prefix + s.message());
  std::vector<HostTensor> results;
  KVATTN_RETURN_IF_ERROR(p.program->run(arguments, results));
  for (size_t i = 0; i < numOutputs; ++i) {
    const HostTensor &r = results[i];
    TensorType exact{r.elementType(), r.shape(),
                     "the result " + r.shapeString()};
    KVATTN_RETURN_IF_ERROR(checkTensor(prefix + "output " + std::to_string(i) +
                                           " (result " + std::to_string(i) +
                                           " of " + fn + ")",
                                       outputs[i], exact));
  }
  for (size_t i = 0; i < numOutputs; ++i)
    if (results[i].byteSize())
      std::memcpy(outputs[i].data, results[i].data(), results[i].byteSize());
  p.last = std::move(results);
  return Status::ok();
}

extern "C" {

void kvattn_free(char *string) { std::free(string); }

void kvattn_compile_options_init(kvattn_compile_options *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  const mlir::kvattn::PtxOptions gpu;
  const mlir::kvattn::CpuCompileOptions cpu;
  options->chip = nullptr; // sm_80
  options->block_m = gpu.blockM;
  options->block_n = gpu.blockN;
  options->num_warps = gpu.numWarps;
  options->num_stages = gpu.numStages;
  options->split_kv = gpu.splitKv;
  options->num_sms = gpu.numSms;
  options->pack_gqa = gpu.packGqa;
  options->tensor_cores = gpu.tensorCores;
  options->use_kernel_cache = gpu.useKernelCache;
  options->vectorize = cpu.vectorize;
  options->vector_width = cpu.vectorWidth;
  options->threads = cpu.threads;
  options->opt_level = static_cast<int32_t>(cpu.optLevel);
  options->device_validation = gpu.deviceValidation;
  options->fix_upper_left_appends = gpu.fixUpperLeftAppends;
}

int kvattn_compile(const char *ir, const kvattn_compile_options *options,
                   kvattn_image_kind kind, char **image, char **manifest_json,
                   char **error) {
  if (rawEnum(kind) != KVATTN_IMAGE_PTX &&
      rawEnum(kind) != KVATTN_IMAGE_DEVICE_IR)
    return report(Status::error("kvattn_compile: image kind " +
                                std::to_string(rawEnum(kind)) +
                                " is neither KVATTN_IMAGE_PTX nor "
                                "KVATTN_IMAGE_DEVICE_IR"),
                  error);
  return compile("kvattn_compile",
                 kind == KVATTN_IMAGE_PTX ? mlir::kvattn::DeviceImage::Ptx
                                          : mlir::kvattn::DeviceImage::LlvmIR,
                 ir, options, image, manifest_json, error);
}

int kvattn_compile_to_ptx(const char *ir, const char *chip, char **ptx,
                          char **manifest_json, char **error) {
  kvattn_compile_options options = chipOnly(chip);
  return compile("kvattn_compile_to_ptx", mlir::kvattn::DeviceImage::Ptx, ir,
                 &options, ptx, manifest_json, error);
}

int kvattn_compile_to_device_ir(const char *ir, const char *chip, char **image,
                                char **manifest_json, char **error) {
  kvattn_compile_options options = chipOnly(chip);
  return compile("kvattn_compile_to_device_ir",
                 mlir::kvattn::DeviceImage::LlvmIR, ir, &options, image,
                 manifest_json, error);
}

int kvattn_cpu_compile(const char *ir, const char *entry,
                       const kvattn_compile_options *options,
                       kvattn_cpu_program **program, char **error) {
  if (!ir || !program)
    return report(Status::error(std::string("kvattn_cpu_compile: null ") +
                                (ir ? "program" : "ir")),
                  error);
  std::unique_ptr<kvattn_cpu_program> p;
  if (int failed = report(cpuCompile(ir, entry, options, p), error))
    return failed;
  *program = p.release();
  return 0;
}

void kvattn_cpu_program_destroy(kvattn_cpu_program *program) { delete program; }

size_t kvattn_cpu_program_num_arguments(const kvattn_cpu_program *program) {
  return program ? program->arguments.size() : 0;
}

size_t kvattn_cpu_program_num_results(const kvattn_cpu_program *program) {
  return program ? program->results.size() : 0;
}

int kvattn_cpu_program_type(const kvattn_cpu_program *program, int is_result,
                            size_t index, kvattn_dtype *dtype, size_t *rank,
                            int64_t *shape, size_t max_rank, char **error) {
  if (!program)
    return report(Status::error("kvattn_cpu_program_type: null program"),
                  error);
  const std::vector<TensorType> &types =
      is_result ? program->results : program->arguments;
  if (index >= types.size())
    return report(Status::error("kvattn_cpu_program_type: " +
                                std::string(is_result ? "result" : "argument") +
                                " " + std::to_string(index) +
                                " is out of range (@" + program->entry +
                                " has " + std::to_string(types.size()) + ")"),
                  error);
  const TensorType &t = types[index];
  if (dtype)
    *dtype = toDtype(t.type);
  if (rank)
    *rank = t.shape.size();
  for (size_t d = 0; shape && d < t.shape.size() && d < max_rank; ++d)
    shape[d] = t.shape[d];
  return 0;
}

int kvattn_cpu_run(kvattn_cpu_program *program,
                   const kvattn_host_tensor *inputs, size_t num_inputs,
                   const kvattn_host_tensor *outputs, size_t num_outputs,
                   char **error) {
  if (!program)
    return report(Status::error("kvattn_cpu_run: null program"), error);
  return report(cpuRun(*program, inputs, num_inputs, outputs, num_outputs),
                error);
}

int kvattn_cpu_program_result(const kvattn_cpu_program *program, size_t index,
                              kvattn_host_tensor *result, char **error) {
  if (!program || !result)
    return report(
        Status::error(std::string("kvattn_cpu_program_result: null ") +
                      (program ? "result" : "program")),
        error);
  if (index >= program->last.size())
    return report(
        Status::error(
            "kvattn_cpu_program_result: result " + std::to_string(index) +
            (program->last.empty()
                 ? " does not exist: no successful kvattn_cpu_run yet"
                 : " is out of range (@" + program->entry + " returns " +
                       std::to_string(program->last.size()) + ")")),
        error);
  const HostTensor &t = program->last[index];
  result->data = const_cast<uint8_t *>(t.data());
  result->dtype = toDtype(t.elementType());
  result->rank = t.shape().size();
  result->shape = t.shape().data();
  return 0;
}

void kvattn_runtime_options_init(kvattn_runtime_options *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
}

int kvattn_runtime_create_with_options(kvattn_runtime **runtime,
                                       const kvattn_runtime_options *given,
                                       char **error) {
  const std::string prefix = "kvattn_runtime_create: ";
  if (!runtime)
    return report(Status::error(prefix + "null argument"), error);
  kvattn_runtime_options o;
  kvattn_runtime_options_init(&o);
  if (given) {
    constexpr size_t minimum =
        offsetof(kvattn_runtime_options, device) + sizeof(o.device);
    if (given->struct_size < minimum ||
        given->struct_size > sizeof(kvattn_runtime_options))
      return report(
          Status::error(prefix + "options.struct_size is " +
                        std::to_string(given->struct_size) +
                        ": set it with kvattn_runtime_options_init (sizeof "
                        "= " +
                        std::to_string(sizeof(kvattn_runtime_options)) + ")"),
          error);
    std::memcpy(&o, given, given->struct_size);
    if (o.reserved0)
      return report(Status::error(prefix + "options.reserved0 must be 0"),
                    error);
  }
  mlir::kvattn::rt::RuntimeOptions options;
  options.device = o.device;
  if (o.driver_library)
    options.libraryPath = o.driver_library;
  auto rt = std::make_unique<kvattn_runtime>();
  rt->device = o.device;
  if (int failed = report(
          mlir::kvattn::rt::Runtime::create(rt->runtime, options), error))
    return failed;
  *runtime = rt.release();
  return 0;
}

int kvattn_runtime_create(kvattn_runtime **runtime, char **error) {
  return kvattn_runtime_create_with_options(runtime, nullptr, error);
}

int kvattn_runtime_device_info(const kvattn_runtime *runtime, int *device,
                               int *compute_capability,
                               int *multiprocessor_count, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_device_info: null runtime"),
                  error);
  if (device)
    *device = runtime->device;
  if (compute_capability)
    *compute_capability = runtime->runtime->computeCapability();
  if (multiprocessor_count)
    *multiprocessor_count = runtime->runtime->multiprocessorCount();
  return 0;
}

int kvattn_emulated_driver_path(char **path, char **error) {
  if (!path)
    return report(Status::error("kvattn_emulated_driver_path: null path"),
                  error);
  *path = copyString(mlir::kvattn::emulatedDriverPath());
  return 0;
}

void kvattn_runtime_destroy(kvattn_runtime *runtime) { delete runtime; }

int kvattn_runtime_set_stream(kvattn_runtime *runtime, uint64_t stream,
                              char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_set_stream: null runtime"),
                  error);
  runtime->runtime->setStream(stream);
  return 0;
}

int kvattn_runtime_use_own_stream(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_runtime_use_own_stream: null runtime"),
                  error);
  runtime->runtime->useOwnStream();
  return 0;
}

int kvattn_runtime_reserve_metadata(kvattn_runtime *runtime, size_t bytes,
                                    char **error) {
  if (!runtime)
    return report(
        Status::error("kvattn_runtime_reserve_metadata: null runtime"), error);
  return report(runtime->runtime->reserveMetadata(bytes), error);
}

int kvattn_device_alloc(kvattn_runtime *runtime, size_t bytes,
                        uint64_t *device_ptr, char **error) {
  if (!runtime || !device_ptr)
    return report(Status::error(std::string("kvattn_device_alloc: null ") +
                                (runtime ? "device_ptr" : "runtime")),
                  error);
  return report(runtime->runtime->allocate(bytes, *device_ptr), error);
}

int kvattn_device_free(kvattn_runtime *runtime, uint64_t device_ptr,
                       char **error) {
  if (!runtime)
    return report(Status::error("kvattn_device_free: null runtime"), error);
  return report(runtime->runtime->release(device_ptr), error);
}

int kvattn_copy_to_device(kvattn_runtime *runtime, uint64_t dst,
                          const void *src, size_t bytes, char **error) {
  if (!runtime || (!src && bytes))
    return report(Status::error(std::string("kvattn_copy_to_device: null ") +
                                (runtime ? "src" : "runtime")),
                  error);
  return report(runtime->runtime->copyToDevice(dst, src, bytes), error);
}

int kvattn_copy_to_host(kvattn_runtime *runtime, void *dst, uint64_t src,
                        size_t bytes, char **error) {
  if (!runtime || (!dst && bytes))
    return report(Status::error(std::string("kvattn_copy_to_host: null ") +
                                (runtime ? "dst" : "runtime")),
                  error);
  return report(runtime->runtime->copyToHost(dst, src, bytes), error);
}

int kvattn_synchronize(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_synchronize: null runtime"), error);
  return report(runtime->runtime->synchronize(), error);
}

/// The launch arguments of the C structs: null arrays, null names and
/// names given twice are errors, not crashes or a silent "last wins".
static Status launchArgs(const char *what, kvattn_sizes sizes,
                         const kvattn_buffer *buffers, size_t num_buffers,
                         const kvattn_metadata *metadata, size_t num_metadata,
                         mlir::kvattn::rt::LaunchArgs &args) {
  args = mlir::kvattn::rt::LaunchArgs();
  args.sizes = {sizes.B, sizes.Hq, sizes.Hkv, sizes.L, sizes.S};
  args.sizes.numPages = sizes.num_pages;
  args.sizes.pageSize = sizes.page_size;
  args.sizes.maxPages = sizes.max_pages;
  const std::string prefix = std::string(what) + ": ";
  if (num_buffers && !buffers)
    return Status::error(prefix + "null buffers array with num_buffers = " +
                         std::to_string(num_buffers));
  if (num_metadata && !metadata)
    return Status::error(prefix + "null metadata array with num_metadata = " +
                         std::to_string(num_metadata));
  for (size_t i = 0; i < num_buffers; ++i) {
    if (!buffers[i].name)
      return Status::error(prefix + "buffers[" + std::to_string(i) +
                           "] has a null name");
    if (!args.buffers.emplace(buffers[i].name, buffers[i].device_ptr).second)
      return Status::error(prefix + "buffer '" + buffers[i].name +
                           "' is given twice");
  }
  for (size_t i = 0; i < num_metadata; ++i) {
    const kvattn_metadata &m = metadata[i];
    if (!m.name)
      return Status::error(prefix + "metadata[" + std::to_string(i) +
                           "] has a null name");
    if (!m.values && m.count)
      return Status::error(prefix + "metadata '" + m.name +
                           "' has null values with count " +
                           std::to_string(m.count));
    if (args.metadata.count(m.name))
      return Status::error(prefix + "metadata '" + m.name + "' is given twice");
    args.metadata[m.name] = std::vector<int64_t>(m.values, m.values + m.count);
  }
  return Status::ok();
}

int kvattn_launch(kvattn_runtime *runtime, const char *ptx,
                  const char *manifest_json, size_t kernel_index,
                  kvattn_sizes sizes, const kvattn_buffer *buffers,
                  size_t num_buffers, const kvattn_metadata *metadata,
                  size_t num_metadata, char **error) {
  if (!runtime || !ptx || !manifest_json)
    return report(Status::error("kvattn_launch: null argument"), error);
  mlir::kvattn::rt::Manifest manifest;
  if (int failed = report(
          mlir::kvattn::rt::parseManifest(manifest_json, manifest), error))
    return failed;
  if (kernel_index >= manifest.kernels.size())
    return report(Status::error("kvattn_launch: kernel index " +
                                std::to_string(kernel_index) +
                                " is out of range (the manifest has " +
                                std::to_string(manifest.kernels.size()) + ")"),
                  error);
  mlir::kvattn::rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_launch", sizes, buffers,
                                     num_buffers, metadata, num_metadata, args),
                          error))
    return failed;
  const mlir::kvattn::rt::Module *module;
  if (int failed = report(runtime->runtime->loadModule(ptx, module), error))
    return failed;
  return report(
      runtime->runtime->launch(*module, manifest.kernels[kernel_index], args),
      error);
}

int kvattn_kernel_load(kvattn_runtime *runtime, const char *ptx,
                       const char *manifest_json, size_t kernel_index,
                       kvattn_kernel **kernel, char **error) {
  if (!runtime || !ptx || !manifest_json || !kernel)
    return report(Status::error("kvattn_kernel_load: null argument"), error);
  mlir::kvattn::rt::Manifest manifest;
  if (int failed = report(
          mlir::kvattn::rt::parseManifest(manifest_json, manifest), error))
    return failed;
  if (kernel_index >= manifest.kernels.size())
    return report(Status::error("kvattn_kernel_load: kernel index " +
                                std::to_string(kernel_index) +
                                " is out of range (the manifest has " +
                                std::to_string(manifest.kernels.size()) + ")"),
                  error);
  auto k = std::make_unique<kvattn_kernel>();
  k->runtime = runtime->runtime.get();
  k->info = manifest.kernels[kernel_index];
  if (int failed = report(k->runtime->loadModule(ptx, k->module), error))
    return failed;
  *kernel = k.release();
  return 0;
}

int kvattn_kernel_launch(kvattn_kernel *kernel, kvattn_sizes sizes,
                         const kvattn_buffer *buffers, size_t num_buffers,
                         const kvattn_metadata *metadata, size_t num_metadata,
                         char **error) {
  if (!kernel)
    return report(Status::error("kvattn_kernel_launch: null kernel"), error);
  mlir::kvattn::rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_kernel_launch", sizes, buffers,
                                     num_buffers, metadata, num_metadata, args),
                          error))
    return failed;
  return report(kernel->runtime->launch(*kernel->module, kernel->info, args),
                error);
}

void kvattn_kernel_destroy(kvattn_kernel *kernel) { delete kernel; }

//===----------------------------------------------------------------------===//
// Serving: plan / run, graphs, call counts
//===----------------------------------------------------------------------===//

static mlir::kvattn::rt::Sizes toSizes(const kvattn_sizes &s) {
  mlir::kvattn::rt::Sizes sizes{s.B, s.Hq, s.Hkv, s.L, s.S};
  sizes.numPages = s.num_pages;
  sizes.pageSize = s.page_size;
  sizes.maxPages = s.max_pages;
  return sizes;
}

/// A plan's compile options: the caller's over the defaults, the device's
/// chip (and, with NULL options, SM count) where not given.
/// `kind` is the caller's kvattn_image_kind read with rawEnum: passing the
/// enum itself on would load a value C allows but C++ does not.
static Status planOptions(const char *what, kvattn_runtime *runtime,
                          const kvattn_compile_options *options, int kind,
                          mlir::kvattn::PtxOptions &ptx) {
  if (kind != KVATTN_IMAGE_PTX && kind != KVATTN_IMAGE_DEVICE_IR)
    return Status::error(std::string(what) + ": image kind " +
                         std::to_string(kind) +
                         " is neither KVATTN_IMAGE_PTX nor "
                         "KVATTN_IMAGE_DEVICE_IR");
  kvattn_compile_options o;
  KVATTN_RETURN_IF_ERROR(readOptions(what, options, o));
  mlir::kvattn::rt::Runtime &rt = *runtime->runtime;
  const std::string chip = "sm_" + std::to_string(rt.computeCapability());
  if (!o.chip)
    o.chip = chip.c_str();
  if (!options)
    o.num_sms = rt.multiprocessorCount();
  ptx = toPtxOptions(o, kind == KVATTN_IMAGE_PTX
                            ? mlir::kvattn::DeviceImage::Ptx
                            : mlir::kvattn::DeviceImage::LlvmIR);
  ptx.deviceValidation = true; // what a plan runs
  return Status::ok();
}

int kvattn_plan_create(kvattn_runtime *runtime, const char *ir,
                       const kvattn_compile_options *options,
                       kvattn_image_kind kind, kvattn_sizes max_sizes,
                       kvattn_plan **plan, char **error) {
  if (!runtime || !ir || !plan)
    return report(Status::error("kvattn_plan_create: null argument"), error);
  mlir::kvattn::PtxOptions ptx;
  if (int failed = report(planOptions("kvattn_plan_create", runtime, options,
                                      rawEnum(kind), ptx),
                          error))
    return failed;
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (int failed = report(parse(ir, context, module), error))
    return failed;
  auto p = std::make_unique<kvattn_plan>();
  p->runtime = runtime;
  if (int failed = report(mlir::kvattn::planModule(*runtime->runtime, *module,
                                                   ptx, toSizes(max_sizes),
                                                   p->plan, &p->manifestJson),
                          error))
    return failed;
  *plan = p.release();
  return 0;
}

void kvattn_attention_desc_init(kvattn_attention_desc *desc) {
  if (!desc)
    return;
  std::memset(desc, 0, sizeof(*desc));
  desc->struct_size = sizeof(*desc);
  desc->dtype = KVATTN_BF16;
  desc->batch = desc->query_len = desc->key_len = -1;
  desc->num_pages = desc->max_pages = -1;
}

/// The caller's description (struct_size rule of the options) as the C++
/// one.
static Status readDescription(const char *what,
                              const kvattn_attention_desc *given,
                              mlir::kvattn::AttentionDescription &d) {
  const std::string prefix = std::string(what) + ": ";
  if (!given)
    return Status::error(prefix + "null description");
  kvattn_attention_desc c;
  kvattn_attention_desc_init(&c);
  KVATTN_RETURN_IF_ERROR(
      readVersioned(prefix + "desc", "kvattn_attention_desc_init",
                    offsetof(kvattn_attention_desc, causal), *given, c));
  auto boolean = [&](const char *name, int32_t value) {
    return checkFlag(prefix + "desc." + name, value);
  };
  KVATTN_RETURN_IF_ERROR(boolean("causal", c.causal));
  KVATTN_RETURN_IF_ERROR(boolean("with_lse", c.with_lse));
  KVATTN_RETURN_IF_ERROR(boolean("paged", c.paged));
  KVATTN_RETURN_IF_ERROR(boolean("varlen", c.varlen));
  KVATTN_RETURN_IF_ERROR(boolean("append", c.append));
  if (c.reserved0)
    return Status::error(prefix + "desc.reserved0 must be 0");
  switch (rawEnum(c.dtype)) {
  case KVATTN_F32:
    d.dtype = "f32";
    break;
  case KVATTN_F16:
    d.dtype = "f16";
    break;
  case KVATTN_BF16:
    d.dtype = "bf16";
    break;
  default:
    return Status::error(prefix +
                         "desc.dtype = " + std::to_string(rawEnum(c.dtype)) +
                         " is not KVATTN_F32, KVATTN_F16 or KVATTN_BF16");
  }
  d.batch = c.batch;
  d.queryLen = c.query_len;
  d.keyLen = c.key_len;
  d.numQueryHeads = c.num_query_heads;
  d.numKvHeads = c.num_kv_heads;
  d.headDim = c.head_dim;
  d.valueHeadDim = c.value_head_dim;
  d.causal = c.causal;
  if (c.window != 0)
    d.window = c.window;
  if (c.softcap != 0)
    d.softcap = c.softcap;
  if (c.scale != 0)
    d.scale = c.scale;
  d.paged = c.paged;
  d.pageSize = c.page_size;
  d.numPages = c.num_pages;
  d.maxPages = c.max_pages;
  d.varlen = c.varlen;
  d.withLse = c.with_lse;
  d.append = c.append;
  return Status::ok();
}

int kvattn_attention_desc_to_ir(const kvattn_attention_desc *desc, char **ir,
                                char **error) {
  if (!ir)
    return report(Status::error("kvattn_attention_desc_to_ir: null argument"),
                  error);
  mlir::kvattn::AttentionDescription d;
  if (int failed = report(
          readDescription("kvattn_attention_desc_to_ir", desc, d), error))
    return failed;
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (int failed = report(mlir::kvattn::buildAttentionModule(d, context, module)
                              .withContext("kvattn_attention_desc_to_ir"),
                          error))
    return failed;
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  *ir = copyString(text);
  return 0;
}

int kvattn_plan_create_from_desc(kvattn_runtime *runtime,
                                 const kvattn_attention_desc *desc,
                                 const kvattn_compile_options *options,
                                 kvattn_image_kind kind, kvattn_sizes max_sizes,
                                 kvattn_plan **plan, char **error) {
  const char *what = "kvattn_plan_create_from_desc";
  if (!runtime || !plan)
    return report(Status::error(std::string(what) + ": null argument"), error);
  mlir::kvattn::AttentionDescription d;
  if (int failed = report(readDescription(what, desc, d), error))
    return failed;
  mlir::kvattn::PtxOptions ptx;
  if (int failed = report(
          planOptions(what, runtime, options, rawEnum(kind), ptx), error))
    return failed;
  auto p = std::make_unique<kvattn_plan>();
  p->runtime = runtime;
  if (int failed = report(mlir::kvattn::planAttention(*runtime->runtime, d, ptx,
                                                      toSizes(max_sizes),
                                                      p->plan, &p->manifestJson)
                              .withContext(what),
                          error))
    return failed;
  *plan = p.release();
  return 0;
}

int kvattn_plan_manifest(const kvattn_plan *plan, char **manifest_json,
                         char **error) {
  if (!plan || !manifest_json)
    return report(Status::error("kvattn_plan_manifest: null argument"), error);
  *manifest_json = copyString(plan->manifestJson);
  return 0;
}

int kvattn_plan_buffer_name(const kvattn_plan *plan, size_t kernel,
                            const char *param, char **name, char **error) {
  if (!plan || !param || !name)
    return report(Status::error("kvattn_plan_buffer_name: null argument"),
                  error);
  if (kernel >= plan->plan->manifest().kernels.size())
    return report(
        Status::error(
            "kvattn_plan_buffer_name: kernel " + std::to_string(kernel) +
            " is out of range (the plan has " +
            std::to_string(plan->plan->manifest().kernels.size()) + ")"),
        error);
  if (!plan->plan->hasParameter(kernel, param)) {
    const mlir::kvattn::rt::KernelInfo &k =
        plan->plan->manifest().kernels[kernel];
    std::string names;
    for (const mlir::kvattn::rt::ParamInfo &p : k.params)
      if (p.kind == "pointer" && p.name != "status")
        names += (names.empty() ? "" : ", ") + p.name;
    return report(Status::error("kvattn_plan_buffer_name: kernel " +
                                std::to_string(kernel) + " ('" + k.name +
                                "') has no parameter '" + param +
                                "' (its buffers: " + names + ")"),
                  error);
  }
  *name = copyString(plan->plan->bound(kernel, param));
  return 0;
}

int kvattn_plan_workspace_bytes(const kvattn_plan *plan, size_t *bytes,
                                char **error) {
  if (!plan || !bytes)
    return report(Status::error("kvattn_plan_workspace_bytes: null argument"),
                  error);
  *bytes = plan->plan->workspaceBytes();
  return 0;
}

// A run's stream goes with the call (never through the runtime's current
// stream, which other threads share).
static_assert(KVATTN_CURRENT_STREAM == mlir::kvattn::rt::kCurrentStream,
              "the C and C++ spellings of the current stream");

int kvattn_plan_run(kvattn_plan *plan, kvattn_sizes sizes,
                    const kvattn_buffer *buffers, size_t num_buffers,
                    uint64_t stream, char **error) {
  if (!plan)
    return report(Status::error("kvattn_plan_run: null plan"), error);
  mlir::kvattn::rt::LaunchArgs args;
  if (int failed = report(launchArgs("kvattn_plan_run", sizes, buffers,
                                     num_buffers, nullptr, 0, args),
                          error))
    return failed;
  return report(plan->plan->run(args.sizes, args.buffers, stream), error);
}

int kvattn_plan_run_host_metadata(kvattn_plan *plan, kvattn_sizes sizes,
                                  const kvattn_buffer *buffers,
                                  size_t num_buffers,
                                  const kvattn_metadata *metadata,
                                  size_t num_metadata, uint64_t stream,
                                  char **error) {
  if (!plan)
    return report(Status::error("kvattn_plan_run_host_metadata: null plan"),
                  error);
  mlir::kvattn::rt::LaunchArgs args;
  if (int failed =
          report(launchArgs("kvattn_plan_run_host_metadata", sizes, buffers,
                            num_buffers, metadata, num_metadata, args),
                 error))
    return failed;
  return report(plan->plan->runWithHostMetadata(args.sizes, args.buffers,
                                                args.metadata, stream),
                error);
}

int kvattn_plan_status(kvattn_plan *plan, char **error) {
  if (!plan)
    return report(Status::error("kvattn_plan_status: null plan"), error);
  return report(plan->plan->status(), error);
}

int kvattn_plan_clear_status(kvattn_plan *plan, char **error) {
  if (!plan)
    return report(Status::error("kvattn_plan_clear_status: null plan"), error);
  return report(plan->plan->clearStatus(), error);
}

void kvattn_plan_destroy(kvattn_plan *plan) { delete plan; }

int kvattn_graph_begin_capture(kvattn_runtime *runtime, char **error) {
  if (!runtime)
    return report(Status::error("kvattn_graph_begin_capture: null runtime"),
                  error);
  return report(runtime->runtime->beginCapture(), error);
}

int kvattn_graph_end_capture(kvattn_runtime *runtime, kvattn_graph **graph,
                             char **error) {
  if (!runtime || !graph)
    return report(Status::error("kvattn_graph_end_capture: null argument"),
                  error);
  auto g = std::make_unique<kvattn_graph>();
  g->runtime = runtime->runtime.get();
  if (int failed = report(runtime->runtime->endCapture(g->graph), error))
    return failed;
  *graph = g.release();
  return 0;
}

int kvattn_graph_launch(kvattn_graph *graph, char **error) {
  if (!graph)
    return report(Status::error("kvattn_graph_launch: null graph"), error);
  return report(graph->runtime->launchGraph(*graph->graph), error);
}

void kvattn_graph_destroy(kvattn_graph *graph) { delete graph; }

int kvattn_runtime_call_counts(kvattn_runtime *runtime,
                               kvattn_call_counts *counts, int reset,
                               char **error) {
  if (!runtime || !counts)
    return report(Status::error("kvattn_runtime_call_counts: null argument"),
                  error);
  mlir::kvattn::rt::CallCounts c = runtime->runtime->callCounts();
  counts->launches = c.launches;
  counts->graph_launches = c.graphLaunches;
  counts->synchronizations = c.synchronizations;
  counts->allocations = c.allocations;
  counts->synchronous_copies = c.synchronousCopies;
  counts->async_copies = c.asyncCopies;
  if (reset)
    runtime->runtime->resetCallCounts();
  return 0;
}

} // extern "C"
