//===- GpuExecutor.cpp - run kvattn.attention on a GPU --------------------===//

#include "kvattn/GPU/GpuExecutor.h"
#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/GPU/PlanCompile.h"
#include "kvattn/Runtime/EmulatedGpu.h"
#include "kvattn/Support/Decimal.h"

#include "kvattn/Dialect/KVAttnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

using namespace mlir;

namespace mlir {
namespace kvattn {

namespace {

/// The role of each operand of a kvattn.attention, in operand order.
std::vector<std::string> operandRoles(mlir::kvattn::AttentionOp op) {
  std::vector<std::string> roles = {"query", "key"};
  auto add = [&](Value v, const char *role) {
    if (v)
      roles.push_back(role);
  };
  add(op.getValue(), "value"); // none in the latent form
  add(op.getQOffset(), "q_offset");
  add(op.getKOffset(), "k_offset");
  add(op.getQPos(), "q_pos");
  add(op.getKPos(), "k_pos");
  add(op.getKvLen(), "kv_len");
  add(op.getKeyValid(), "key_valid");
  add(op.getMask(), "mask");
  add(op.getBlockTable(), "block_table");
  add(op.getQStart(), "q_start");
  add(op.getSinks(), "sinks");
  add(op.getAlibiSlopes(), "alibi_slopes");
  add(op.getKRopePos(), "k_rope_pos");
  add(op.getKStart(), "k_start");
  add(op.getCacheBatchIdx(), "cache_batch_idx");
  add(op.getTreeParents(), "tree_parents");
  add(op.getKScale(), "k_scale");
  add(op.getVScale(), "v_scale");
  add(op.getRotaryCos(), "rotary_cos");
  add(op.getRotarySin(), "rotary_sin");
  return roles;
}

bool isMetadata(const std::string &role) {
  return role == "q_offset" || role == "k_offset" || role == "q_pos" ||
         role == "k_pos" || role == "kv_len" || role == "key_valid" ||
         role == "block_table" || role == "pos" || role == "q_start" ||
         role == "k_start" || role == "cache_batch_idx" ||
         role == "tree_parents" || role == "prefix_pages" ||
         role == "prefix_len";
}

/// The roles of a kvattn.append's operands, in operand order.
std::vector<std::string> appendRoles(mlir::kvattn::AppendOp op) {
  std::vector<std::string> roles = {"update", "cache", "pos"};
  if (op.isPaged())
    roles.push_back("block_table");
  if (op.getRopePos()) // RoPE: the record, written in place like the cache
    roles.push_back("k_rope_pos");
  if (op.getKvScale()) // an FP8 cache's scales (the kernel's k_scale)
    roles.push_back("k_scale");
  if (op.getRotaryCos()) { // RoPE's tables
    roles.push_back("rotary_cos");
    roles.push_back("rotary_sin");
  }
  return roles;
}

/// The operands an append writes in place: the cache and its RoPE record.
bool isWrittenInPlace(const std::string &role) {
  return role == "cache" || role == "k_rope_pos";
}

/// Appends to `b`'s block a function `kvattn_gpu` of `argTypes` that applies
/// a copy of `op` to its arguments and returns the copy's results, typed
/// `resultTypes`.
void addApplyingFunc(OpBuilder &b, Operation *op, TypeRange argTypes,
                     TypeRange resultTypes) {
  auto func = func::FuncOp::create(b, op->getLoc(), "kvattn_gpu",
                                   b.getFunctionType(argTypes, resultTypes));
  Block *entry = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  IRMapping mapping;
  for (auto [value, arg] : llvm::zip(op->getOperands(), entry->getArguments()))
    mapping.map(value, arg);
  Operation *clone = b.clone(*op, mapping);
  for (auto [result, type] : llvm::zip(clone->getResults(), resultTypes))
    result.setType(type);
  func::ReturnOp::create(b, op->getLoc(), clone->getResults());
}

/// The roles of a kvattn.cascade's operands (its prefix kernel's K/V are
/// prefix_key/prefix_value, a paged prefix's table and length
/// prefix_pages/prefix_len).
std::vector<std::string> cascadeRoles(mlir::kvattn::CascadeOp op) {
  std::vector<std::string> roles = {"query",    "prefix_key", "prefix_value",
                                    "key",      "value",      "q_start",
                                    "q_offset", "kv_len"};
  if (op.isPrefixPaged())
    roles.insert(roles.end(), {"prefix_pages", "prefix_len"});
  if (op.isPaged())
    roles.push_back("block_table");
  return roles;
}

/// A module with one function that applies a copy of `op` (a
/// kvattn.attention or kvattn.cascade: query first, a value [.., Dv] third
/// — the cascade's prefix value — and results out, lse) to arguments of the
/// operands' run-time (static) shapes.
OwningOpRef<ModuleOp>
singleOpModule(Operation *op, Type outElementType, bool hasLse,
               const std::vector<const HostTensor *> &operands,
               bool keepDynamicShapes) {
  MLIRContext *ctx = op->getContext();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(op->getLoc());
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes;
  for (auto [value, tensor] : llvm::zip(op->getOperands(), operands)) {
    Type elt = cast<ShapedType>(value.getType()).getElementType();
    argTypes.push_back(keepDynamicShapes
                           ? value.getType()
                           : RankedTensorType::get(tensor->shape(), elt));
  }
  // Result shapes follow from the operands: out [B, Hq, L, Dv], lse [B, Hq, L].
  // (The latent form has no value operand: Dv is its value_dim.)
  const auto &q = operands[0]->shape();
  auto attention = dyn_cast<mlir::kvattn::AttentionOp>(op);
  const int64_t dv = attention && attention.isLatent()
                         ? attention.getValueHeadDim()
                         : operands[2]->shape()[3];
  SmallVector<Type> resultTypes;
  if (keepDynamicShapes) {
    resultTypes.append(op->result_type_begin(), op->result_type_end());
  } else {
    resultTypes.push_back(
        RankedTensorType::get({q[0], q[1], q[2], dv}, outElementType));
    if (hasLse)
      resultTypes.push_back(
          RankedTensorType::get({q[0], q[1], q[2]}, b.getF32Type()));
  }
  addApplyingFunc(b, op, argTypes, resultTypes);
  return module;
}

/// The same for a kvattn.append: its result has the cache's shape.
OwningOpRef<ModuleOp>
singleAppendModule(mlir::kvattn::AppendOp op,
                   const std::vector<const HostTensor *> &operands) {
  MLIRContext *ctx = op.getContext();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(op.getLoc());
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes;
  for (auto [value, tensor] : llvm::zip(op->getOperands(), operands)) {
    Type elt = cast<ShapedType>(value.getType()).getElementType();
    argTypes.push_back(RankedTensorType::get(tensor->shape(), elt));
  }
  // The results: the cache, and with RoPE the record (operand rope_pos).
  SmallVector<Type> resultTypes = {argTypes[1]};
  if (op.getRopePos())
    resultTypes.push_back(argTypes[op.getODSOperandIndexAndLength(4).first]);
  addApplyingFunc(b, op, argTypes, resultTypes);
  return module;
}

/// The sizes of a launch of `op` (kvattn.attention, kvattn.cascade or
/// kvattn.append) on `operands`, whose roles are `roles`.
rt::Sizes launchSizes(Operation *op, const std::vector<std::string> &roles,
                      const std::vector<const HostTensor *> &operands) {
  auto attention = dyn_cast<mlir::kvattn::AttentionOp>(op);
  auto append = dyn_cast<mlir::kvattn::AppendOp>(op);
  auto cascade = dyn_cast<mlir::kvattn::CascadeOp>(op);
  rt::Sizes sizes;
  auto shapeOf = [&](const char *role) -> const std::vector<int64_t> & {
    size_t i = std::find(roles.begin(), roles.end(), role) - roles.begin();
    return operands[i]->shape();
  };
  // A pool of pages [num_pages, page_size, ...] read through the table
  // [B, max_pages]: S is the logical key count max_pages * page_size.
  auto setPages = [&](const std::vector<int64_t> &pool) {
    const int64_t maxPages = shapeOf("block_table")[1];
    sizes.S = maxPages * pool[1];
    sizes.numPages = pool[0];
    sizes.pageSize = pool[1];
    sizes.maxPages = maxPages;
  };
  if (append) {
    // update [B, H, L, D]; cache [B, H, C, D] or pages [num_pages,
    // page_size, H, D] with table [B, max_pages]. No query heads: Hq = H.
    const auto &u = shapeOf("update"), &c = shapeOf("cache");
    sizes = {u[0], u[1], u[1], u[2], c[2]};
    if (append.isPaged())
      setPages(c);
  } else if (cascade) {
    // A ragged batch of B sequences (L: the packed rows T) over suffixes
    // [B, Hkv, S, D] or pages [num_pages, page_size, Hkv, D] through the
    // table [B, max_pages]; the prefix kernel's P keys, or its pool
    // [prefix_num_pages, prefix_page_size, Hkv, D] through prefix_pages
    // [prefix_max_pages] (P = prefix_max_pages * prefix_page_size).
    const auto &q = shapeOf("query"), &k = shapeOf("key");
    const int64_t batch = shapeOf("q_start")[0] - 1;
    sizes = {batch, q[1], k[1], q[2], k[2]};
    if (cascade.isPaged()) {
      sizes.Hkv = k[2];
      setPages(k);
    }
    const auto &pk = shapeOf("prefix_key");
    if (cascade.isPrefixPaged()) {
      sizes.prefixNumPages = pk[0];
      sizes.prefixPageSize = pk[1];
      sizes.prefixMaxPages = shapeOf("prefix_pages")[0];
      sizes.P = sizes.prefixMaxPages * pk[1];
    } else {
      sizes.P = pk[2];
    }
  } else if (attention.isPaged()) {
    // Pages [num_pages, page_size, Hkv, D], table [B, max_pages].
    const auto &q = shapeOf("query"), &k = shapeOf("key");
    sizes = {q[0], q[1], k[2], q[2], 0};
    setPages(k);
  } else {
    const auto &q = shapeOf("query"), &k = shapeOf("key");
    sizes = {q[0], q[1], k[1], q[2], k[2]};
  }
  // A ragged batch: B is the sequence count (q_start has B + 1 entries), L
  // the packed rows T.
  if (attention && attention.isVarlen())
    sizes.B = shapeOf("q_start")[0] - 1;
  // A batch-to-cache map: K and V have C cache rows.
  if (attention && attention.hasCacheBatchIdx())
    sizes.cacheRows = shapeOf("key")[0];

  return sizes;
}

/// Whether `value` is defined at the top level of its function (an argument
/// or a result of an op in the function's body). Only those are kept on the
/// device between ops: a value defined inside a loop (the scf.forall of a
/// tiled program) takes new contents at every iteration under the same SSA
/// value.
bool isFunctionLevel(Value value) {
  return isa<func::FuncOp>(value.getParentRegion()->getParentOp());
}

/// Whether an op other than the device's (kvattn.append, kvattn.attention)
/// uses `value`, or an attention takes it as RoPE's record (metadata, which
/// the runtime checks on the host): then its host tensor must hold the
/// device's values.
bool neededOnHost(Value value) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (auto attention = dyn_cast<mlir::kvattn::AttentionOp>(user);
        attention && attention.getKRopePos() == value)
      return true;
    if (!isa<mlir::kvattn::AppendOp, mlir::kvattn::AttentionOp,
             mlir::kvattn::CascadeOp>(user))
      return true;
  }
  return false;
}

} // namespace

GpuExecutor::~GpuExecutor() { (void)endFunction(); }

void GpuExecutor::beginFunction() {
  (void)endFunction();
  resident_ = true;
}

Status GpuExecutor::endFunction() {
  Status first = Status::ok();
  if (!owned_.empty()) {
    // The buffers may still be in use by queued work.
    first = runtime_->synchronize();
    for (rt::DevicePtr p : owned_)
      if (Status s = runtime_->release(p); s.isError() && first.isOk())
        first = s;
  }
  owned_.clear();
  values_.clear();
  resident_ = false;
  return first;
}

Status GpuExecutor::create(const PtxOptions &options,
                           std::unique_ptr<GpuExecutor> &executor,
                           rt::RuntimeOptions runtimeOptions) {
  std::unique_ptr<GpuExecutor> e(new GpuExecutor());
  e->options_ = options;
  if (options.image == DeviceImage::LlvmIR &&
      runtimeOptions.libraryPath.empty())
    runtimeOptions.libraryPath = emulatedDriverPath();
  KVATTN_RETURN_IF_ERROR(rt::Runtime::create(e->runtime_, runtimeOptions));
  // The manifest names a chip; compile for the device's (its default chip,
  // Runtime::defaultChip: sm_90a on a 9.0 device), and choose split-KV
  // (split-kv = 0) for its multiprocessors. The device's plain chip or its
  // architecture-specific variant is kept when asked for (sm_90 on a 9.0
  // device: the mma.sync kernels).
  const std::string device =
      "sm_" + std::to_string(e->runtime_->computeCapability());
  e->options_.chip = options.chip == device || options.chip == device + "a"
                         ? options.chip
                         : e->runtime_->defaultChip();
  if (int sms = e->runtime_->multiprocessorCount(); sms > 0)
    e->options_.numSms = sms;
  executor = std::move(e);
  return Status::ok();
}

bool GpuExecutor::isPlannableFunction(func::FuncOp func) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return false;
  int attentions = 0;
  for (Operation &op : func.getBody().front()) {
    if (isa<mlir::kvattn::AttentionOp, mlir::kvattn::CascadeOp>(op))
      ++attentions;
    else if (!isa<mlir::kvattn::AppendOp, func::ReturnOp>(op))
      return false;
  }
  return attentions == 1;
}

Status GpuExecutor::runFunctionThroughPlan(func::FuncOp func,
                                           const std::vector<HostTensor> &args,
                                           std::vector<HostTensor> &results,
                                           PlanMetadata form, int64_t slack,
                                           int64_t runs) {
  const std::string where = "planning @" + func.getSymName().str() + ": ";
  if (!isPlannableFunction(func))
    return Status::error(where + "a plan runs a function of kvattn.append "
                                 "ops and one kvattn.attention or "
                                 "kvattn.cascade, and nothing else");
  if (args.size() != func.getNumArguments())
    return Status::error(where + std::to_string(args.size()) +
                         " arguments, the function takes " +
                         std::to_string(func.getNumArguments()));
  Operation *attentionOp = nullptr;
  std::vector<mlir::kvattn::AppendOp> appends;
  for (Operation &op : func.getBody().front()) {
    if (auto append = dyn_cast<mlir::kvattn::AppendOp>(op))
      appends.push_back(append);
    else if (isa<mlir::kvattn::AttentionOp, mlir::kvattn::CascadeOp>(op))
      attentionOp = &op;
  }
  auto attention = dyn_cast<mlir::kvattn::AttentionOp>(attentionOp);
  auto cascade = dyn_cast<mlir::kvattn::CascadeOp>(attentionOp);

  // The host tensor of a value: an argument's; an append's cache (result
  // 0) or RoPE record (result 1) has the shape of the operand it writes.
  std::function<const HostTensor *(Value)> tensorOf =
      [&](Value v) -> const HostTensor * {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return &args[arg.getArgNumber()];
    if (auto append = v.getDefiningOp<mlir::kvattn::AppendOp>())
      return tensorOf(cast<OpResult>(v).getResultNumber() == 0
                          ? append.getCache()
                          : append->getOperand(
                                append.getODSOperandIndexAndLength(4).first));
    return nullptr;
  };
  auto operandsOf = [&](Operation *op) {
    std::vector<const HostTensor *> operands;
    for (Value v : op->getOperands())
      operands.push_back(tensorOf(v));
    return operands;
  };
  const std::vector<std::string> roles =
      attention ? operandRoles(attention) : cascadeRoles(cascade);
  const std::vector<const HostTensor *> operands = operandsOf(attentionOp);
  const rt::Sizes sizes = launchSizes(attentionOp, roles, operands);
  for (mlir::kvattn::AppendOp append : appends) {
    const rt::Sizes own =
        launchSizes(append, appendRoles(append), operandsOf(append));
    if (own.B != sizes.B || own.L != sizes.L || own.Hkv != sizes.Hkv ||
        own.S != sizes.S)
      return Status::error(
          where + "an append writes B = " + std::to_string(own.B) +
          ", L = " + std::to_string(own.L) + " tokens of Hkv = " +
          std::to_string(own.Hkv) + " heads into S = " + std::to_string(own.S) +
          " slots, the attention reads B = " + std::to_string(sizes.B) +
          ", L = " + std::to_string(sizes.L) + ", Hkv = " +
          std::to_string(sizes.Hkv) + ", S = " + std::to_string(sizes.S) +
          ": a plan runs with one set of sizes");
  }

  // The plan of a module holding a copy of the function.
  OwningOpRef<ModuleOp> module = ModuleOp::create(func.getLoc());
  {
    OpBuilder b(func.getContext());
    b.setInsertionPointToEnd(module->getBody());
    cast<func::FuncOp>(b.clone(*func.getOperation())).setPublic();
  }
  rt::Sizes bounds = sizes;
  bounds.B = std::max<int64_t>(bounds.B + slack, 1);
  bounds.L = std::max<int64_t>(bounds.L + slack, 1);
  bounds.S = std::max<int64_t>(bounds.S + slack, 1);
  std::unique_ptr<rt::Plan> plan;
  if (Status planned = planModule(*runtime_, *module, options_, bounds, plan);
      planned.isError())
    return Status::error(where + planned.message());

  // Buffer names: the attention's operand roles; an append's roles as the
  // C API renames them (planBufferNames, the n-th append kernel of the
  // manifest for the n-th append). A value an append writes is bound to
  // its cache's name wherever the attention reads it.
  const std::vector<std::map<std::string, std::string>> renames =
      planBufferNames(*module, plan->manifest());
  std::vector<size_t> appendKernels;
  for (size_t i = 0; i < plan->manifest().kernels.size(); ++i)
    if (plan->manifest().kernels[i].kind == "append")
      appendKernels.push_back(i);
  std::map<unsigned, std::set<std::string>> argNames;
  std::map<std::string, unsigned> argOf; // a buffer name's argument
  auto bindArg = [&](Value v, const std::string &name) -> Status {
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg)
      return Status::error(where + "the plan's buffer '" + name +
                           "' is not a function argument");
    if (auto [it, fresh] = argOf.emplace(name, arg.getArgNumber());
        !fresh && it->second != arg.getArgNumber())
      return Status::error(where + "the plan's buffer '" + name +
                           "' would be two arguments (" +
                           std::to_string(it->second) + " and " +
                           std::to_string(arg.getArgNumber()) + ")");
    argNames[arg.getArgNumber()].insert(name);
    return Status::ok();
  };
  std::map<const void *, std::string> writtenAs; // append result -> name
  for (auto [n, append] : llvm::enumerate(appends)) {
    const std::vector<std::string> appendNames = appendRoles(append);
    const std::map<std::string, std::string> &rename =
        n < appendKernels.size() ? renames[appendKernels[n]]
                                 : std::map<std::string, std::string>();
    for (auto [v, role] : llvm::zip(append->getOperands(), appendNames)) {
      auto it = rename.find(role);
      const std::string name = it == rename.end() ? role : it->second;
      KVATTN_RETURN_IF_ERROR(bindArg(v, name));
      if (role == "cache")
        writtenAs[append->getResult(0).getAsOpaquePointer()] = name;
      if (role == "k_rope_pos" && append->getNumResults() > 1)
        writtenAs[append->getResult(1).getAsOpaquePointer()] = name;
    }
  }
  for (auto [v, role] : llvm::zip(attentionOp->getOperands(), roles)) {
    if (auto it = writtenAs.find(v.getAsOpaquePointer());
        it != writtenAs.end()) {
      if (it->second != role)
        return Status::error(where + "the attention reads as '" + role +
                             "' what an append writes as '" + it->second + "'");
      continue;
    }
    KVATTN_RETURN_IF_ERROR(bindArg(v, role));
  }

  // Device buffers: one per tensor argument; metadata in device buffers of
  // the manifest's element types (Device) or on the host.
  std::map<std::string, std::string> typeOf;
  for (const rt::KernelInfo &k : plan->manifest().kernels)
    for (const rt::ParamInfo &p : k.params)
      if (p.kind == "pointer")
        typeOf.emplace(p.name, p.elementType);
  std::vector<rt::DevicePtr> owned;
  auto freeAll = [&] {
    plan.reset();
    for (rt::DevicePtr p : owned)
      (void)runtime_->release(p);
  };
  auto allocate = [&](size_t bytes, rt::DevicePtr &ptr) -> Status {
    KVATTN_RETURN_IF_ERROR(runtime_->allocate(bytes, ptr));
    owned.push_back(ptr);
    return Status::ok();
  };
  // What the plan's kernels take (a cascade without query rows has only
  // its merge kernel): the run refuses names it does not have.
  const std::set<std::string> parameters(plan->parameters().begin(),
                                         plan->parameters().end());
  std::map<std::string, rt::DevicePtr> buffers;
  std::map<std::string, std::vector<int64_t>> hostMetadata;
  std::map<unsigned, rt::DevicePtr> argBuffer;
  Status s = Status::ok();
  for (const auto &[index, names] : argNames) {
    const HostTensor &t = args[index];
    for (const std::string &name : names) {
      if (s.isError())
        break;
      if (!parameters.count(name))
        continue;
      if (!isMetadata(name) && name != "k_rope_pos") {
        if (!argBuffer.count(index)) {
          rt::DevicePtr ptr = 0;
          s = allocate(t.byteSize(), ptr);
          if (s.isOk())
            s = runtime_->copyToDevice(ptr, t.data(), t.byteSize());
          argBuffer[index] = ptr;
        }
        buffers[name] = argBuffer[index];
        continue;
      }
      if (form == PlanMetadata::Host && name != "k_rope_pos") {
        std::vector<int64_t> &values = hostMetadata[name];
        for (int64_t i = 0; i < t.numElements(); ++i)
          values.push_back(t.getInt(i));
        continue;
      }
      // On the device as the host tensor holds it: the IR's element type,
      // which is the kernel's (i1 as bytes, i32, i64).
      if (typeOf[name] != elementTypeName(t.elementType())) {
        s = Status::error(where + "the plan takes '" + name + "' as " +
                          typeOf[name] + ", the argument is " +
                          elementTypeName(t.elementType()));
        break;
      }
      rt::DevicePtr ptr = 0;
      s = allocate(t.byteSize(), ptr);
      if (s.isOk())
        s = runtime_->copyToDevice(ptr, t.data(), t.byteSize());
      buffers[name] = ptr;
      if (name == "k_rope_pos") // written in place by an append
        argBuffer[index] = ptr;
    }
  }
  // The attention's results.
  const auto &q = operands[0]->shape();
  const int64_t dv = attention && attention.isLatent()
                         ? attention.getValueHeadDim()
                         : operands[2]->shape()[3];
  std::vector<HostTensor> computed;
  std::optional<ElementType> outType =
      toElementType(getElementTypeOrSelf(attentionOp->getResult(0).getType()));
  computed.emplace_back(*outType, std::vector<int64_t>{q[0], q[1], q[2], dv});
  if (attentionOp->getNumResults() > 1)
    computed.emplace_back(ElementType::F32,
                          std::vector<int64_t>{q[0], q[1], q[2]});
  const char *outputs[] = {"out", "lse"};
  for (size_t r = 0; s.isOk() && r < computed.size(); ++r)
    s = allocate(computed[r].byteSize(), buffers[outputs[r]]);

  for (int64_t run = 0; s.isOk() && run < std::max<int64_t>(runs, 1); ++run) {
    for (size_t r = 0; s.isOk() && r < computed.size(); ++r)
      s = runtime_->fill(buffers[outputs[r]], 0xff, computed[r].byteSize());
    if (s.isOk())
      s = form == PlanMetadata::Device
              ? plan->run(sizes, buffers)
              : plan->runWithHostMetadata(sizes, buffers, hostMetadata);
    if (s.isError())
      s = Status::error("running the plan of @" + func.getSymName().str() +
                        ": " + s.message());
  }
  if (s.isOk())
    if (Status status = plan->status(); status.isError())
      s = Status::error("the plan's device validation recorded a "
                        "violation: " +
                        status.message());
  for (size_t r = 0; s.isOk() && r < computed.size(); ++r)
    s = runtime_->copyToHost(computed[r].mutableData(), buffers[outputs[r]],
                             computed[r].byteSize());
  // The function's results: the attention's, or a buffer an append wrote
  // in place (its argument's), or an argument.
  results.clear();
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (Value v : ret.getOperands()) {
    if (s.isError())
      break;
    if (v.getDefiningOp() == attentionOp) {
      results.push_back(computed[cast<OpResult>(v).getResultNumber()]);
      continue;
    }
    const HostTensor *t = tensorOf(v);
    results.emplace_back(t->elementType(), t->shape());
    auto written = writtenAs.find(v.getAsOpaquePointer());
    if (written == writtenAs.end()) {
      results.back() = *t;
      continue;
    }
    s = runtime_->copyToHost(results.back().mutableData(),
                             argBuffer[argOf[written->second]],
                             results.back().byteSize());
  }
  freeAll();
  return s;
}

Status GpuExecutor::run(Operation *op,
                        const std::vector<const HostTensor *> &operands,
                        std::vector<HostTensor> &results) {
  auto attention = dyn_cast<mlir::kvattn::AttentionOp>(op);
  auto append = dyn_cast<mlir::kvattn::AppendOp>(op);
  auto cascade = dyn_cast<mlir::kvattn::CascadeOp>(op);
  if (!attention && !append && !cascade)
    return Status::error("the GPU runs kvattn.attention, kvattn.cascade and "
                         "kvattn.append, not " +
                         op->getName().getStringRef().str());
  OwningOpRef<ModuleOp> module =
      attention
          ? singleOpModule(op, attention.getOut().getType().getElementType(),
                           static_cast<bool>(attention.getLse()), operands,
                           keepDynamicShapes_)
      : cascade
          ? singleOpModule(op, cascade.getOut().getType().getElementType(),
                           static_cast<bool>(cascade.getLse()), operands,
                           keepDynamicShapes_)
          : singleAppendModule(append, operands);
  std::string key;
  llvm::raw_string_ostream os(key);
  module->print(os);

  auto it = cache_.find(key);
  if (it == cache_.end()) {
    PtxModule ptx;
    KVATTN_RETURN_IF_ERROR(compileToPtx(*module, options_, ptx));
    Compiled compiled;
    compiled.ptx = ptx.ptx;
    // Through the JSON on purpose: the runtime launches from the manifest
    // as an embedder would.
    KVATTN_RETURN_IF_ERROR(rt::parseManifest(manifestToJson(ptx, "kvattn.ptx"),
                                             compiled.manifest));
    it = cache_.emplace(key, std::move(compiled)).first;
  }
  const rt::Module *loaded;
  KVATTN_RETURN_IF_ERROR(runtime_->loadModule(it->second.ptx, loaded));

  // Buffers: outside beginFunction() every buffer is this call's and freed
  // at its end; inside, the function's (values_, owned_).
  std::vector<rt::DevicePtr> temporaries;
  // An op inside a loop writes no cache in place and leaves no result on
  // the device (see isFunctionLevel): its buffers are this call's.
  const bool residentOp = resident_ && isa<func::FuncOp>(op->getParentOp());
  auto freeTemporaries = [&] {
    for (rt::DevicePtr p : temporaries)
      (void)runtime_->release(p);
  };
  auto allocate = [&](size_t bytes, rt::DevicePtr &ptr) -> Status {
    KVATTN_RETURN_IF_ERROR(runtime_->allocate(bytes, ptr));
    (residentOp ? owned_ : temporaries).push_back(ptr);
    return Status::ok();
  };
  // The device buffer holding `value` (uploaded from `t` unless resident).
  auto deviceBuffer = [&](Value value, const HostTensor &t,
                          rt::DevicePtr &ptr) -> Status {
    const bool keep = resident_ && isFunctionLevel(value);
    if (keep)
      if (auto found = values_.find(value.getAsOpaquePointer());
          found != values_.end()) {
        ptr = found->second;
        return Status::ok();
      }
    KVATTN_RETURN_IF_ERROR(runtime_->allocate(t.byteSize(), ptr));
    // A kept value's buffer is the function's, whoever uploads it.
    (keep || residentOp ? owned_ : temporaries).push_back(ptr);
    KVATTN_RETURN_IF_ERROR(runtime_->copyToDevice(ptr, t.data(), t.byteSize()));
    if (keep)
      values_[value.getAsOpaquePointer()] = ptr;
    return Status::ok();
  };

  std::vector<std::string> roles = attention ? operandRoles(attention)
                                   : cascade ? cascadeRoles(cascade)
                                             : appendRoles(append);
  rt::LaunchArgs args;
  args.sizes = launchSizes(op, roles, operands);
  auto shapeOf = [&](const char *role) -> const std::vector<int64_t> & {
    size_t i = std::find(roles.begin(), roles.end(), role) - roles.begin();
    return operands[i]->shape();
  };

  Status s = Status::ok();
  for (size_t i = 0; s.isOk() && i < roles.size(); ++i) {
    const HostTensor &t = *operands[i];
    Value value = op->getOperand(i);
    // RoPE's record is an attention's metadata (checked before the launch)
    // and an append's output.
    if (isMetadata(roles[i]) || (attention && roles[i] == "k_rope_pos")) {
      std::vector<int64_t> values(t.numElements());
      for (int64_t n = 0; n < t.numElements(); ++n)
        values[n] = t.getInt(n);
      args.metadata[roles[i]] = std::move(values);
      continue;
    }
    rt::DevicePtr ptr = 0;
    if (isWrittenInPlace(roles[i]) && residentOp && value.hasOneUse() &&
        values_.count(value.getAsOpaquePointer())) {
      // In place: the append consumes the cache's buffer, which from now
      // on holds its result.
      ptr = values_[value.getAsOpaquePointer()];
      values_.erase(value.getAsOpaquePointer());
    } else if (isWrittenInPlace(roles[i]) && residentOp && value.hasOneUse()) {
      // First use of a value with no other use (a function argument): its
      // uploaded buffer is written in place.
      s = allocate(t.byteSize(), ptr);
      if (s.isOk())
        s = runtime_->copyToDevice(ptr, t.data(), t.byteSize());
    } else if (isWrittenInPlace(roles[i])) {
      // The cache value is used again: write a copy of it, on the stream
      // (a resident value) or from the host.
      s = allocate(t.byteSize(), ptr);
      auto found = values_.find(value.getAsOpaquePointer());
      if (s.isOk() && resident_ && isFunctionLevel(value) &&
          found != values_.end())
        s = runtime_->copyDeviceToDevice(ptr, found->second, t.byteSize());
      else if (s.isOk())
        s = runtime_->copyToDevice(ptr, t.data(), t.byteSize());
    } else {
      s = deviceBuffer(value, t, ptr);
    }
    args.buffers[roles[i]] = ptr;
  }
  if (s.isError()) {
    freeTemporaries();
    return s;
  }

  // The results and the device buffers that hold them.
  results.clear();
  std::vector<std::string> outputs;
  if (append) {
    results.emplace_back(operands[1]->elementType(), operands[1]->shape());
    outputs = {"cache"};
    if (append.getRopePos()) {
      const HostTensor &record =
          *operands[append.getODSOperandIndexAndLength(4).first];
      results.emplace_back(record.elementType(), record.shape());
      outputs.push_back("k_rope_pos");
    }
  } else {
    const auto &q = shapeOf("query");
    const int64_t dv = attention && attention.isLatent()
                           ? attention.getValueHeadDim()
                           : shapeOf("value")[3];
    std::optional<ElementType> outType =
        toElementType(getElementTypeOrSelf(op->getResult(0).getType()));
    results.emplace_back(*outType, std::vector<int64_t>{q[0], q[1], q[2], dv});
    outputs = {"out"};
    if (op->getNumResults() > 1) {
      results.emplace_back(ElementType::F32,
                           std::vector<int64_t>{q[0], q[1], q[2]});
      outputs.push_back("lse");
    }
    for (size_t r = 0; s.isOk() && r < results.size(); ++r) {
      rt::DevicePtr ptr;
      s = allocate(results[r].byteSize(), ptr);
      args.buffers[outputs[r]] = ptr;
    }
  }
  // The kernels run in manifest order: the attention kernel, then (with
  // split-KV) the merge of its partial states, which live in f32 device
  // workspaces; or the one append kernel. Each kernel gets the buffers
  // and metadata it names.
  for (const rt::KernelInfo &k : it->second.manifest.kernels) {
    if (s.isError())
      break;
    rt::LaunchArgs kernelArgs;
    kernelArgs.sizes = args.sizes;
    for (const rt::ParamInfo &p : k.params) {
      if (p.kind != "pointer")
        continue;
      if (auto m = args.metadata.find(p.name); m != args.metadata.end()) {
        kernelArgs.metadata.insert(*m);
        continue;
      }
      if ((p.name == "out_parts" || p.name == "lse_parts") &&
          !args.buffers.count(p.name)) {
        int64_t elements = 1;
        for (const std::string &d : p.shape)
          elements *= std::isdigit(static_cast<unsigned char>(d[0]))
                          ? parseDecimal(d).value_or(0)
                      // A run-time split: the launch's chunk count, exactly.
                      : d == "N"
                          ? rt::splitCount(k, args.sizes,
                                           runtime_->multiprocessorCount())
                          : rt::sizeByName(args.sizes, d);
        rt::DevicePtr ptr;
        s = allocate(elements * sizeof(float), ptr);
        if (s.isError())
          break;
        args.buffers[p.name] = ptr;
      }
      if (auto b = args.buffers.find(p.name); b != args.buffers.end())
        kernelArgs.buffers.insert(*b);
    }
    if (s.isOk())
      s = runtime_->launch(*loaded, k, kernelArgs);
  }
  // Results stay on the device when only device ops use them.
  bool synchronized = false;
  for (size_t r = 0; s.isOk() && r < results.size(); ++r) {
    Value value = op->getResult(r);
    if (residentOp)
      values_[value.getAsOpaquePointer()] = args.buffers[outputs[r]];
    if (residentOp && !neededOnHost(value))
      continue;
    if (!synchronized) {
      s = runtime_->synchronize();
      synchronized = true;
      if (s.isError())
        break;
    }
    s = runtime_->copyToHost(results[r].mutableData(), args.buffers[outputs[r]],
                             results[r].byteSize());
  }
  if (!residentOp && !synchronized && s.isOk())
    s = runtime_->synchronize();
  freeTemporaries();
  return s;
}

} // namespace kvattn
} // namespace mlir
