//===- Options.cpp - the C API's compile options --------------------------===//
//
// kvattn_compile_options: its defaults (those of the C++ options), reading a
// caller's struct (the struct_size rule, every field range-checked) and the
// GPU and CPU compilers' options it becomes.
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

using namespace mlir::kvattn;

Status capi::readOptions(const char *what, const kvattn_compile_options *given,
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
  if (options.index_bitwidth != 32 && options.index_bitwidth != 64)
    return Status::error(prefix + "options.index_bitwidth = " +
                         std::to_string(options.index_bitwidth) +
                         " must be 32 or 64");
  if (options.reserved3)
    return Status::error(prefix + "options.reserved3 must be 0");
  KVATTN_RETURN_IF_ERROR(boolean("in_place_appends", options.in_place_appends));
  if (options.reserved4)
    return Status::error(prefix + "options.reserved4 must be 0");
  return Status::ok();
}

PtxOptions capi::toPtxOptions(const kvattn_compile_options &o,
                              DeviceImage image) {
  PtxOptions options;
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
  options.indexBitwidth = static_cast<unsigned>(o.index_bitwidth);
  options.image = image;
  return options;
}

CpuCompileOptions capi::toCpuOptions(const kvattn_compile_options &o) {
  CpuCompileOptions options;
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
  options.inPlaceAppends = o.in_place_appends;
  return options;
}

extern "C" {

void kvattn_compile_options_init(kvattn_compile_options *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  const PtxOptions gpu;
  const CpuCompileOptions cpu;
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
  options->index_bitwidth = static_cast<int32_t>(gpu.indexBitwidth);
  options->in_place_appends = cpu.inPlaceAppends;
}

} // extern "C"
