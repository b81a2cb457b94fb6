//===- CpuProgram.cpp - the C API's CPU path ------------------------------===//
//
// kvattn_cpu_*: a function compiled once for the host (JIT) and run on the
// caller's host tensors, each checked against the function's type before a
// byte is read; results copied out or kept for kvattn_cpu_program_result.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"
#include "Diagnostics.h"

#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/TensorCheck.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <vector>

using mlir::kvattn::ElementType;
using mlir::kvattn::HostTensor;
using mlir::kvattn::Status;
using namespace mlir::kvattn::capi;

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

const mlir::kvattn::CpuProgram & ::kvattn::capi::cpuProgram(
    const kvattn_cpu_program &program) {
  return *program.program;
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
  case KVATTN_F8E4M3FN:
    return ElementType::F8E4M3FN;
  case KVATTN_F8E5M2:
    return ElementType::F8E5M2;
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
  case ElementType::F8E4M3FN:
    return KVATTN_F8E4M3FN;
  case ElementType::F8E5M2:
    return KVATTN_F8E5M2;
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
  p->context = newContext();
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
    // The caller's memory, read in place (the compiled code never writes
    // its arguments: CpuProgram::compile marks them read-only).
    ElementType type = p.arguments[i].type;
    KVATTN_RETURN_IF_ERROR(
        HostTensor::view(type, std::vector<int64_t>(t.shape, t.shape + t.rank),
                         static_cast<const uint8_t *>(t.data), arguments[i]));
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
  // An output that overlaps a cache an in-place append writes, other than
  // that cache itself, could not receive the result (the copy would read
  // what it writes): refused before anything runs.
  for (size_t i = 0; i < numOutputs; ++i)
    for (unsigned w : p.program->writtenArguments()) {
      const kvattn_host_tensor &o = outputs[i];
      std::optional<ElementType> type = toElementType(o.dtype);
      if (w >= arguments.size() || !o.data || !type || (o.rank && !o.shape))
        continue; // (a malformed output is refused after the run)
      HostTensor out;
      if (HostTensor::view(*type,
                           std::vector<int64_t>(o.shape, o.shape + o.rank),
                           static_cast<const uint8_t *>(o.data), out)
              .isError())
        continue;
      if (out.data() != arguments[w].data() &&
          out.sharesMemoryWith(arguments[w]))
        return Status::error(prefix + "output " + std::to_string(i) +
                             " overlaps input " + std::to_string(w) +
                             ", the cache an in-place append writes: pass "
                             "that cache itself or a separate buffer");
    }
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
  // (A cache an in-place append wrote is already where the caller wants it
  // when the output is that input.)
  for (size_t i = 0; i < numOutputs; ++i)
    if (results[i].byteSize() && outputs[i].data != results[i].data())
      std::memcpy(outputs[i].data, results[i].data(), results[i].byteSize());
  p.last = std::move(results);
  return Status::ok();
}

extern "C" {

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

} // extern "C"
