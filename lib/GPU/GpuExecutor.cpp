//===- GpuExecutor.cpp - run kvattn.attention on a GPU --------------------===//

#include "kvattn/GPU/GpuExecutor.h"
#include "kvattn/Evaluator/Evaluator.h"
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

using namespace mlir;

namespace mlir {
namespace kvattn {

namespace {

/// The role of each operand of a kvattn.attention, in operand order.
std::vector<std::string> operandRoles(mlir::kvattn::AttentionOp op) {
  std::vector<std::string> roles = {"query", "key", "value"};
  auto add = [&](Value v, const char *role) {
    if (v)
      roles.push_back(role);
  };
  add(op.getQOffset(), "q_offset");
  add(op.getKOffset(), "k_offset");
  add(op.getQPos(), "q_pos");
  add(op.getKPos(), "k_pos");
  add(op.getKvLen(), "kv_len");
  add(op.getKeyValid(), "key_valid");
  add(op.getMask(), "mask");
  add(op.getBlockTable(), "block_table");
  return roles;
}

bool isMetadata(const std::string &role) {
  return role == "q_offset" || role == "k_offset" || role == "q_pos" ||
         role == "k_pos" || role == "kv_len" || role == "key_valid" ||
         role == "block_table";
}

/// A module with one function that applies a copy of `op` to arguments of
/// the operands' run-time (static) shapes.
OwningOpRef<ModuleOp>
singleOpModule(mlir::kvattn::AttentionOp op,
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
  // Result shapes follow from the operands: out [B, Hq, L, Dv], lse [B, Hq, L].
  const auto &q = operands[0]->shape(), &v = operands[2]->shape();
  SmallVector<Type> resultTypes;
  resultTypes.push_back(RankedTensorType::get(
      {q[0], q[1], q[2], v[3]}, op.getOut().getType().getElementType()));
  if (op.getLse())
    resultTypes.push_back(
        RankedTensorType::get({q[0], q[1], q[2]}, b.getF32Type()));
  auto func = func::FuncOp::create(b, op.getLoc(), "kvattn_gpu",
                                   b.getFunctionType(argTypes, resultTypes));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  IRMapping mapping;
  for (auto [value, arg] : llvm::zip(op->getOperands(), entry->getArguments()))
    mapping.map(value, arg);
  Operation *clone = b.clone(*op, mapping);
  for (auto [result, type] : llvm::zip(clone->getResults(), resultTypes))
    result.setType(type);
  func::ReturnOp::create(b, op.getLoc(), clone->getResults());
  return module;
}

} // namespace

GpuExecutor::~GpuExecutor() = default;

Status GpuExecutor::create(const PtxOptions &options,
                           std::unique_ptr<GpuExecutor> &executor,
                           rt::RuntimeOptions runtimeOptions) {
  std::unique_ptr<GpuExecutor> e(new GpuExecutor());
  e->options_ = options;
  if (options.image == DeviceImage::LlvmIR &&
      runtimeOptions.libraryPath.empty())
    runtimeOptions.libraryPath = emulatedDriverPath();
  KVATTN_RETURN_IF_ERROR(rt::Runtime::create(e->runtime_, runtimeOptions));
  // The manifest names a chip; compile for the device's own, and choose
  // split-KV (split-kv = 0) for its multiprocessors.
  e->options_.chip = "sm_" + std::to_string(e->runtime_->computeCapability());
  if (int sms = e->runtime_->multiprocessorCount(); sms > 0)
    e->options_.numSms = sms;
  executor = std::move(e);
  return Status::ok();
}

Status GpuExecutor::run(Operation *attention,
                        const std::vector<const HostTensor *> &operands,
                        std::vector<HostTensor> &results) {
  auto op = cast<mlir::kvattn::AttentionOp>(attention);
  OwningOpRef<ModuleOp> module = singleOpModule(op, operands);
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

  const auto &q = operands[0]->shape(), &k = operands[1]->shape(),
             &v = operands[2]->shape();
  rt::LaunchArgs args;
  std::vector<std::string> roles = operandRoles(op);
  if (op.isPaged()) {
    // Pages [num_pages, page_size, Hkv, D], table [B, max_pages].
    size_t tableIndex =
        std::find(roles.begin(), roles.end(), "block_table") - roles.begin();
    int64_t maxPages = operands[tableIndex]->shape()[1];
    args.sizes = {q[0], q[1], k[2], q[2], maxPages * k[1]};
    args.sizes.numPages = k[0];
    args.sizes.pageSize = k[1];
    args.sizes.maxPages = maxPages;
  } else {
    args.sizes = {q[0], q[1], k[1], q[2], k[2]};
  }
  std::vector<rt::DevicePtr> allocations;
  auto freeAll = [&] {
    for (rt::DevicePtr p : allocations)
      (void)runtime_->release(p);
  };
  auto upload = [&](const HostTensor &t, rt::DevicePtr &ptr) -> Status {
    KVATTN_RETURN_IF_ERROR(runtime_->allocate(t.byteSize(), ptr));
    allocations.push_back(ptr);
    return runtime_->copyToDevice(ptr, t.data(), t.byteSize());
  };
  for (size_t i = 0; i < roles.size(); ++i) {
    const HostTensor &t = *operands[i];
    if (isMetadata(roles[i])) {
      std::vector<int64_t> values(t.numElements());
      for (int64_t n = 0; n < t.numElements(); ++n)
        values[n] = t.getInt(n);
      args.metadata[roles[i]] = std::move(values);
      continue;
    }
    rt::DevicePtr ptr;
    if (Status s = upload(t, ptr); s.isError()) {
      freeAll();
      return s;
    }
    args.buffers[roles[i]] = ptr;
  }
  std::optional<ElementType> outType =
      toElementType(op.getOut().getType().getElementType());
  results.clear();
  results.emplace_back(*outType, std::vector<int64_t>{q[0], q[1], q[2], v[3]});
  if (op.getLse())
    results.emplace_back(ElementType::F32,
                         std::vector<int64_t>{q[0], q[1], q[2]});
  const char *outputs[] = {"out", "lse"};
  for (size_t r = 0; r < results.size(); ++r) {
    rt::DevicePtr ptr;
    Status s = runtime_->allocate(results[r].byteSize(), ptr);
    if (s.isError()) {
      freeAll();
      return s;
    }
    allocations.push_back(ptr);
    args.buffers[outputs[r]] = ptr;
  }
  // The kernels run in manifest order: the attention kernel, then (with
  // split-KV) the merge of its partial states, which live in f32 device
  // workspaces. Each kernel gets the buffers and metadata it names.
  Status s = Status::ok();
  for (const rt::KernelInfo &k : it->second.manifest.kernels) {
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
                          : rt::sizeByName(args.sizes, d);
        rt::DevicePtr ptr;
        s = runtime_->allocate(elements * sizeof(float), ptr);
        if (s.isError())
          break;
        allocations.push_back(ptr);
        args.buffers[p.name] = ptr;
      }
      if (auto b = args.buffers.find(p.name); b != args.buffers.end())
        kernelArgs.buffers.insert(*b);
    }
    if (s.isOk())
      s = runtime_->launch(*loaded, k, kernelArgs);
    if (s.isError())
      break;
  }
  if (s.isOk())
    s = runtime_->synchronize();
  for (size_t r = 0; s.isOk() && r < results.size(); ++r)
    s = runtime_->copyToHost(results[r].data(), args.buffers[outputs[r]],
                             results[r].byteSize());
  freeAll();
  return s;
}

} // namespace kvattn
} // namespace mlir
