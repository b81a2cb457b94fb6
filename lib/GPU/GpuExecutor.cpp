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
#include <cstring>

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

Status GpuExecutor::runPlan(
    ModuleOp module, const std::string &key, const rt::LaunchArgs &args,
    const std::vector<HostTensor> &results,
    const std::vector<std::string> &outputs,
    const std::function<Status(size_t, rt::DevicePtr &)> &allocate) {
  // (At least 1: a bound of 0 means unbounded, which planning refuses
  // where a workspace depends on it.)
  rt::Sizes bounds = args.sizes;
  bounds.B = std::max<int64_t>(bounds.B + planSlack_, 1);
  bounds.L = std::max<int64_t>(bounds.L + planSlack_, 1);
  bounds.S = std::max<int64_t>(bounds.S + planSlack_, 1);
  const std::string planKey = key + "\nbounds " + std::to_string(bounds.B) +
                              " " + std::to_string(bounds.L) + " " +
                              std::to_string(bounds.S);
  auto found = plans_.find(planKey);
  if (found == plans_.end()) {
    std::unique_ptr<rt::Plan> plan;
    KVATTN_RETURN_IF_ERROR(
        planModule(*runtime_, module, options_, bounds, plan));
    found = plans_.emplace(planKey, std::move(plan)).first;
  }
  rt::Plan &plan = *found->second;

  std::map<std::string, rt::DevicePtr> buffers = args.buffers;
  if (planMetadata_ == PlanMetadata::Device) {
    // Each metadata parameter in a device buffer of the manifest's element
    // type (i1: a byte; i32; i64).
    std::map<std::string, std::string> typeOf;
    for (const rt::KernelInfo &k : plan.manifest().kernels)
      for (const rt::ParamInfo &p : k.params)
        if (p.kind == "pointer")
          typeOf.emplace(p.name, p.elementType);
    for (const auto &[name, values] : args.metadata) {
      const std::string &type = typeOf[name];
      const size_t width = type == "i1" ? 1 : type == "i32" ? 4 : 8;
      std::vector<uint8_t> bytes(values.size() * width);
      for (size_t i = 0; i < values.size(); ++i) {
        const int32_t narrow = static_cast<int32_t>(values[i]);
        const uint8_t byte = static_cast<uint8_t>(values[i]);
        std::memcpy(bytes.data() + i * width,
                    width == 1   ? static_cast<const void *>(&byte)
                    : width == 4 ? static_cast<const void *>(&narrow)
                                 : static_cast<const void *>(&values[i]),
                    width);
      }
      rt::DevicePtr ptr = 0;
      KVATTN_RETURN_IF_ERROR(allocate(bytes.size(), ptr));
      KVATTN_RETURN_IF_ERROR(
          runtime_->copyToDevice(ptr, bytes.data(), bytes.size()));
      buffers[name] = ptr;
    }
  }
  for (int64_t run = 0; run < std::max<int64_t>(planRuns_, 1); ++run) {
    for (size_t r = 0; r < results.size(); ++r)
      KVATTN_RETURN_IF_ERROR(
          runtime_->fill(buffers.at(outputs[r]), 0xff, results[r].byteSize()));
    KVATTN_RETURN_IF_ERROR(
        planMetadata_ == PlanMetadata::Device
            ? plan.run(args.sizes, buffers)
            : plan.runWithHostMetadata(args.sizes, buffers, args.metadata));
  }
  if (Status s = plan.status(); s.isError())
    return Status::error("the plan's device validation recorded a "
                         "violation: " +
                         s.message());
  return Status::ok();
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

  // Through a plan (attention and cascade ops): planned below, once the
  // sizes are known.
  const bool planned = planMetadata_ != PlanMetadata::None && !append;
  const rt::Module *loaded = nullptr;
  const rt::Manifest *manifest = nullptr;
  if (!planned) {
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      PtxModule ptx;
      KVATTN_RETURN_IF_ERROR(compileToPtx(*module, options_, ptx));
      Compiled compiled;
      compiled.ptx = ptx.ptx;
      // Through the JSON on purpose: the runtime launches from the manifest
      // as an embedder would.
      KVATTN_RETURN_IF_ERROR(rt::parseManifest(
          manifestToJson(ptx, "kvattn.ptx"), compiled.manifest));
      it = cache_.emplace(key, std::move(compiled)).first;
    }
    KVATTN_RETURN_IF_ERROR(runtime_->loadModule(it->second.ptx, loaded));
    manifest = &it->second.manifest;
  }

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
  auto shapeOf = [&](const char *role) -> const std::vector<int64_t> & {
    size_t i = std::find(roles.begin(), roles.end(), role) - roles.begin();
    return operands[i]->shape();
  };
  if (append) {
    // update [B, H, L, D]; cache [B, H, C, D] or pages [num_pages,
    // page_size, H, D] with table [B, max_pages]. No query heads: Hq = H.
    const auto &u = shapeOf("update"), &c = shapeOf("cache");
    if (append.isPaged()) {
      int64_t maxPages = shapeOf("block_table")[1];
      args.sizes = {u[0], u[1], u[1], u[2], maxPages * c[1]};
      args.sizes.numPages = c[0];
      args.sizes.pageSize = c[1];
      args.sizes.maxPages = maxPages;
    } else {
      args.sizes = {u[0], u[1], u[1], u[2], c[2]};
    }
  } else if (cascade) {
    // A ragged batch of B sequences (L: the packed rows T) over suffixes
    // [B, Hkv, S, D] or pages [num_pages, page_size, Hkv, D] through the
    // table [B, max_pages]; the prefix kernel's P keys, or its pool
    // [prefix_num_pages, prefix_page_size, Hkv, D] through prefix_pages
    // [prefix_max_pages] (P = prefix_max_pages * prefix_page_size).
    const auto &q = shapeOf("query"), &k = shapeOf("key");
    const int64_t batch = shapeOf("q_start")[0] - 1;
    if (cascade.isPaged()) {
      const int64_t maxPages = shapeOf("block_table")[1];
      args.sizes = {batch, q[1], k[2], q[2], maxPages * k[1]};
      args.sizes.numPages = k[0];
      args.sizes.pageSize = k[1];
      args.sizes.maxPages = maxPages;
    } else {
      args.sizes = {batch, q[1], k[1], q[2], k[2]};
    }
    const auto &pk = shapeOf("prefix_key");
    if (cascade.isPrefixPaged()) {
      args.sizes.prefixNumPages = pk[0];
      args.sizes.prefixPageSize = pk[1];
      args.sizes.prefixMaxPages = shapeOf("prefix_pages")[0];
      args.sizes.P = args.sizes.prefixMaxPages * pk[1];
    } else {
      args.sizes.P = pk[2];
    }
  } else if (attention.isPaged()) {
    // Pages [num_pages, page_size, Hkv, D], table [B, max_pages].
    const auto &q = shapeOf("query"), &k = shapeOf("key");
    int64_t maxPages = shapeOf("block_table")[1];
    args.sizes = {q[0], q[1], k[2], q[2], maxPages * k[1]};
    args.sizes.numPages = k[0];
    args.sizes.pageSize = k[1];
    args.sizes.maxPages = maxPages;
  } else {
    const auto &q = shapeOf("query"), &k = shapeOf("key");
    args.sizes = {q[0], q[1], k[1], q[2], k[2]};
  }
  // A ragged batch: B is the sequence count (q_start has B + 1 entries), L
  // the packed rows T.
  if (attention && attention.isVarlen())
    args.sizes.B = shapeOf("q_start")[0] - 1;
  // A batch-to-cache map: K and V have C cache rows.
  if (attention && attention.hasCacheBatchIdx())
    args.sizes.cacheRows = shapeOf("key")[0];

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
  if (planned && s.isOk())
    s = runPlan(*module, key, args, results, outputs, allocate);
  // The kernels run in manifest order: the attention kernel, then (with
  // split-KV) the merge of its partial states, which live in f32 device
  // workspaces; or the one append kernel. Each kernel gets the buffers
  // and metadata it names.
  const std::vector<rt::KernelInfo> none;
  for (const rt::KernelInfo &k : planned ? none : manifest->kernels) {
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
    s = runtime_->copyToHost(results[r].data(), args.buffers[outputs[r]],
                             results[r].byteSize());
  }
  if (!residentOp && !synchronized && s.isOk())
    s = runtime_->synchronize();
  freeTemporaries();
  return s;
}

} // namespace kvattn
} // namespace mlir
