//===- Evaluator.h - evaluate kvattn IR with the reference ------*- C++ -*-===//
//
// Interprets a function made of kvattn ops (and the few tensor/arith ops the
// front end and the resolve pass produce) on host tensors, evaluating each
// kvattn op with the scalar reference. It is the meaning of a whole program
// without compiling it: `kvattn-run --target=reference` uses it, and every
// compiled target is compared against it.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_EVALUATOR_EVALUATOR_H
#define KVATTN_EVALUATOR_EVALUATOR_H

#include "kvattn/Support/Compare.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Support/Status.h"

#include <functional>
#include <vector>

namespace mlir {
class Operation;
class Type;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace mlir {
namespace kvattn {

/// The HostTensor element type for an MLIR element type (index -> i64), or
/// std::nullopt when kvattn cannot hold it.
std::optional<ElementType> toElementType(mlir::Type type);

/// Evaluates `func` on `arguments` (one per function argument, with the
/// argument's element type and a shape that matches its static dims).
/// Results are in the function's result element types, rounded to nearest
/// even. Errors name the op's location and the offending value.
///
/// The supported ops: kvattn.{attention, sdpa, append}; tensor.{concat,
/// insert_slice, extract_slice, dim, collapse_shape, expand_shape, splat,
/// empty, cast}; arith.{constant, addi, subi, muli, maxsi, minsi,
/// index_cast}; func.return.
Status evaluateFunction(mlir::func::FuncOp func,
                        const std::vector<HostTensor> &arguments,
                        std::vector<HostTensor> &results);

/// Checks `arguments` against the argument types of `func`: each one's
/// element type, rank, static dims, and i1 bytes 0 or 1
/// (kvattn/Support/TensorCheck.h; the C API's messages). `name(i)` names
/// argument i in a message (default "argument i of @func"). evaluateFunction,
/// validateFunction and CpuProgram::run run it first.
Status checkArguments(mlir::func::FuncOp func,
                      const std::vector<HostTensor> &arguments,
                      const std::function<std::string(size_t)> &name = nullptr);

/// Runs every check evaluateFunction runs (shapes, positions, lengths,
/// block tables, cache writes, value ranges) without computing attention:
/// kvattn.attention and kvattn.sdpa yield zeros, and nothing is written (a
/// kvattn.append's rows are kept beside its cache, which an attention's
/// range check reads with them; `arguments` may be views of the caller's
/// memory). For callers that run the
/// function elsewhere and need its run-time values validated first, in
/// time linear in the inputs.
Status validateFunction(mlir::func::FuncOp func,
                        const std::vector<HostTensor> &arguments);

/// Runs one kvattn.attention, kvattn.cascade or kvattn.append elsewhere
/// (e.g. on a GPU):
/// `operands` are the op's operands in order, `results` must receive its
/// results in their result types.
using AttentionExecutor = std::function<Status(
    mlir::Operation *attention, const std::vector<const HostTensor *> &operands,
    std::vector<HostTensor> &results)>;

/// As above, but every kvattn.attention, kvattn.cascade and kvattn.append
/// is run by
/// `executor` while every other op is evaluated as usual (the reference).
/// The appends' run-time values are not checked here: run
/// validateFunction first.
Status evaluateFunction(mlir::func::FuncOp func,
                        const std::vector<HostTensor> &arguments,
                        std::vector<HostTensor> &results,
                        const AttentionExecutor &executor);

/// The operand magnitudes (Compare.h) that the tolerances of `func`'s
/// results on `arguments` grow with, their floats generated in
/// [-magnitude, magnitude) or given: `magnitude` for each operand, except
/// that an FP8 cache's keys and values are counted dequantised (the
/// largest finite |code| of the cache argument times its largest scale)
/// where that is larger. A cache that a kvattn.append wrote is traced to
/// the argument it updates (the appended tokens are generated values).
OperandMagnitudes operandMagnitudes(mlir::func::FuncOp func,
                                    const std::vector<HostTensor> &arguments,
                                    double magnitude);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_EVALUATOR_EVALUATOR_H
