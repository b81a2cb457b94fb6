//===- Plan.cpp - the C API's serving plans -------------------------------===//
//
// kvattn_plan_*: compile once (or load from the kernel cache) for shape
// bounds, from IR text or from a kvattn_attention_desc, then run on device
// pointers and the caller's stream; the device-side validation's status.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

#include "kvattn/GPU/PlanCompile.h"
#include "kvattn/Runtime/Plan.h"

#include "llvm/Support/raw_ostream.h"

using mlir::kvattn::Status;
using namespace mlir::kvattn::capi;

struct kvattn_plan {
  kvattn_runtime *runtime;
  std::string manifestJson;
  std::unique_ptr<mlir::kvattn::rt::Plan> plan;
};

/// A plan's compile options: the caller's over the defaults, the device's
/// chip (and, with NULL options, SM count) where not given.
/// `kind` is the caller's kvattn_image_kind read with rawEnum: passing the
/// enum itself on would load a value C allows but C++ does not.
static Status planOptions(const char *what, kvattn_runtime *runtime,
                          const kvattn_compile_options *options, int kind,
                          mlir::kvattn::PtxOptions &ptx) {
  mlir::kvattn::DeviceImage image;
  KVATTN_RETURN_IF_ERROR(imageKind(what, kind, image));
  kvattn_compile_options o;
  KVATTN_RETURN_IF_ERROR(readOptions(what, options, o));
  mlir::kvattn::rt::Runtime &rt = *runtime->runtime;
  const std::string chip = rt.defaultChip();
  if (!o.chip)
    o.chip = chip.c_str();
  if (!options)
    o.num_sms = rt.multiprocessorCount();
  ptx = toPtxOptions(o, image);
  ptx.deviceValidation = true; // what a plan runs
  return Status::ok();
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
  if (c.window_right < -1)
    return Status::error(
        prefix + "desc.window_right = " + std::to_string(c.window_right) +
        " must be -1 (none) or a key count >= 0");
  if (c.window_right >= 0)
    d.windowRight = c.window_right;
  KVATTN_RETURN_IF_ERROR(boolean("sinks", c.sinks));
  KVATTN_RETURN_IF_ERROR(boolean("alibi", c.alibi));
  d.sinks = c.sinks;
  d.alibi = c.alibi;
  KVATTN_RETURN_IF_ERROR(boolean("tree", c.tree));
  d.tree = c.tree;
  KVATTN_RETURN_IF_ERROR(boolean("ragged_keys", c.ragged_keys));
  KVATTN_RETURN_IF_ERROR(boolean("cache_batch_idx", c.cache_batch_idx));
  d.raggedKeys = c.ragged_keys;
  d.cacheBatchIdx = c.cache_batch_idx;
  d.cacheRows = c.cache_rows;
  switch (c.kv_dtype) {
  case -1:
    break;
  case KVATTN_F8E4M3FN:
    d.kvDtype = "f8E4M3FN";
    break;
  case KVATTN_F8E5M2:
    d.kvDtype = "f8E5M2";
    break;
  default:
    return Status::error(prefix +
                         "desc.kv_dtype = " + std::to_string(c.kv_dtype) +
                         " is not -1 (the dtype), KVATTN_F8E4M3FN or "
                         "KVATTN_F8E5M2");
  }
  d.kvScales = c.kv_scales;
  KVATTN_RETURN_IF_ERROR(boolean("cascade", c.cascade));
  d.cascade = c.cascade;
  d.prefixLen = c.prefix_len;
  KVATTN_RETURN_IF_ERROR(boolean("prefix_paged", c.prefix_paged));
  d.prefixPaged = c.prefix_paged;
  d.prefixPageSize = c.prefix_page_size;
  d.prefixNumPages = c.prefix_num_pages;
  d.prefixMaxPages = c.prefix_max_pages;
  KVATTN_RETURN_IF_ERROR(boolean("latent", c.latent));
  d.latent = c.latent;
  d.rotaryDim = c.rotary_dim;
  d.ropeTheta = c.rope_theta;
  KVATTN_RETURN_IF_ERROR(boolean("rope_interleaved", c.rope_interleaved));
  KVATTN_RETURN_IF_ERROR(boolean("rope_record", c.rope_record));
  d.ropeInterleaved = c.rope_interleaved;
  d.ropeRecord = c.rope_record;
  d.rotaryRows = c.rotary_rows;
  switch (rawEnum(c.rotary_dtype)) {
  case KVATTN_F32:
    d.rotaryDtype = "f32";
    break;
  case KVATTN_F16:
    d.rotaryDtype = "f16";
    break;
  case KVATTN_BF16:
    d.rotaryDtype = "bf16";
    break;
  default:
    return Status::error(prefix + "desc.rotary_dtype = " +
                         std::to_string(rawEnum(c.rotary_dtype)) +
                         " is not KVATTN_F32, KVATTN_F16 or KVATTN_BF16");
  }
  return Status::ok();
}

extern "C" {

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
  std::unique_ptr<mlir::MLIRContext> context = newContext();
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (int failed = report(parse(ir, *context, module), error))
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
  desc->window_right = -1;
  desc->cache_rows = -1;
  desc->kv_dtype = -1;
  desc->prefix_len = -1;
  desc->rope_theta = 10000.0;
  desc->rotary_dtype = KVATTN_F32;
  desc->prefix_num_pages = desc->prefix_max_pages = -1;
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
  std::unique_ptr<mlir::MLIRContext> context = newContext();
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (int failed =
          report(mlir::kvattn::buildAttentionModule(d, *context, module)
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

} // extern "C"
