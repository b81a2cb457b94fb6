//===- KVAttnAttrs.cpp - kvattn attributes --------------------------------===//
//
// The typed metadata's verifiers, its accessors, and the dialect's check of
// the discardable attributes (kvattn.role, kvattn.tile_config,
// kvattn.params) on any op.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Dialect/KVAttnDialect.h"
#include "kvattn/Support/Limits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kvattn;

#include "kvattn/Dialect/KVAttnEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "kvattn/Dialect/KVAttnAttrs.cpp.inc"

void KVAttnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kvattn/Dialect/KVAttnAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// kvattn.rope
//===----------------------------------------------------------------------===//

Attribute RopeAttr::parse(AsmParser &parser, Type) {
  int64_t rotaryDim = 0;
  FloatAttr theta;
  bool interleaved = false, f32Query = false;
  if (parser.parseLess() || parser.parseKeyword("rotary_dim") ||
      parser.parseEqual() || parser.parseInteger(rotaryDim))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef keyword;
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword))
      return {};
    if (keyword == "theta" && !theta && !interleaved && !f32Query) {
      double value = 0;
      if (parser.parseEqual() || parser.parseFloat(value))
        return {};
      theta = FloatAttr::get(Float64Type::get(parser.getContext()), value);
    } else if (keyword == "interleaved") {
      interleaved = true;
    } else if (keyword == "f32_query") {
      f32Query = true;
    } else {
      parser.emitError(loc) << "rope: expected 'theta' (right after "
                               "rotary_dim), 'interleaved' or 'f32_query', "
                               "got '"
                            << keyword << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<RopeAttr>(parser.getContext(), rotaryDim, theta,
                                     interleaved, f32Query);
}

void RopeAttr::print(AsmPrinter &printer) const {
  printer << "<rotary_dim = " << getRotaryDim();
  if (FloatAttr theta = getTheta()) {
    printer << ", theta = ";
    printer.printFloat(theta.getValue());
  }
  if (getInterleaved())
    printer << ", interleaved";
  if (getF32Query())
    printer << ", f32_query";
  printer << ">";
}

float RopeAttr::getInvFreq(int64_t k) const {
  assert(getTheta() && "inv_freq needs theta (tables give cos and sin)");
  return static_cast<float>(
      std::pow(*getThetaValue(), -2.0 * static_cast<double>(k) /
                                     static_cast<double>(getRotaryDim())));
}

LogicalResult RopeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t rotaryDim, FloatAttr thetaAttr, bool,
                               bool) {
  if (rotaryDim < 2 || rotaryDim % 2)
    return emitError() << "rope: rotary_dim = " << rotaryDim
                       << " must be even and at least 2";
  if (!thetaAttr)
    return success();
  if (!thetaAttr.getType().isF64())
    return emitError() << "rope: theta must be an f64 attribute";
  double theta = thetaAttr.getValueAsDouble();
  if (!(theta > 1.0) || !std::isfinite(theta))
    return emitError() << "rope: theta = " << theta
                       << " must be a finite value above 1";
  return success();
}

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

LogicalResult
SplitRuleAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t max,
                      int64_t blockM, int64_t blockN, int64_t group,
                      int64_t programsPerSm, int64_t minKeys, int64_t numSms) {
  // The runtime's rule (rt::parseManifest): what splitCount can use.
  if (max < 1 || max > 65535)
    return emitError() << "split_rule: max = " << max
                       << " is outside [1, 65535]";
  for (auto [name, value] :
       {std::pair<const char *, int64_t>{"block_m", blockM},
        {"block_n", blockN},
        {"group", group},
        {"programs_per_sm", programsPerSm}})
    if (value < 1)
      return emitError() << "split_rule: " << name << " = " << value
                         << " must be at least 1";
  if (minKeys < 0)
    return emitError() << "split_rule: min_keys = " << minKeys
                       << " is negative";
  if (numSms < 0)
    return emitError() << "split_rule: num_sms = " << numSms << " is negative";
  return success();
}

LogicalResult
TileConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       KernelKind kind, int64_t blockM, int64_t blockN,
                       int64_t numWarps, int64_t numStages, int64_t splitKv,
                       int64_t group, int64_t vectorWidth,
                       SplitRuleAttr splitRule, FlatSymbolRefAttr validates) {
  const StringRef k = stringifyKernelKind(kind);
  // The ranges -kvattn-tile accepts (kvattn/Support/Limits.h); num_warps 0:
  // a program of fewer than 16 query rows, which only the CPU runs.
  if (blockM < 1 || blockM > limits::kMaxBlockM)
    return emitError() << "tile_config: block_m = " << blockM
                       << " is outside [1, " << limits::kMaxBlockM << "]";
  if (blockN < 0 || blockN > limits::kMaxBlockN)
    return emitError() << "tile_config: block_n = " << blockN
                       << " is outside [0, " << limits::kMaxBlockN << "]";
  if (numWarps < 0 || numWarps > limits::kMaxNumWarps)
    return emitError() << "tile_config: num_warps = " << numWarps
                       << " is outside [0, " << limits::kMaxNumWarps << "]";
  if (numStages < 1 || numStages > limits::kMaxNumStages)
    return emitError() << "tile_config: num_stages = " << numStages
                       << " is outside [1, " << limits::kMaxNumStages << "]";
  if (group < 1)
    return emitError() << "tile_config: group = " << group
                       << " must be at least 1";
  if (splitKv < 0)
    return emitError() << "tile_config: split_kv = " << splitKv
                       << " is negative (0: chosen at run time)";
  const bool attention =
      kind == KernelKind::attention || kind == KernelKind::attention_varlen;
  if (splitRule && !attention && kind != KernelKind::merge)
    return emitError() << "tile_config: a " << k << " kernel has no split_rule";
  if (splitKv == 0 && !splitRule)
    return emitError()
           << "tile_config: split_kv = 0 (chosen at run time) needs a "
              "split_rule";
  if (splitRule && attention && splitKv != 0)
    return emitError() << "tile_config: a split_rule goes with split_kv = 0, "
                          "not "
                       << splitKv;
  if (vectorWidth < 0 || (vectorWidth != 0 && kind != KernelKind::append))
    return emitError() << "tile_config: vector_width = " << vectorWidth
                       << (vectorWidth < 0 ? " is negative"
                                           : " belongs to an append kernel");
  if (static_cast<bool>(validates) != (kind == KernelKind::validate))
    return emitError() << "tile_config: "
                       << (validates ? "only a validate kernel names the "
                                       "kernel it validates"
                                     : "a validate kernel names the kernel it "
                                       "validates");
  return success();
}

LogicalResult
KernelParamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        StringRef name, ParamKind kind, Type elementType,
                        ArrayAttr shape, ParamAccess access, ArrayAttr maps) {
  if (name.empty())
    return emitError() << "param: the name is empty";
  if (kind == ParamKind::tensor_maps) {
    if (!elementType.isInteger(64) || shape || access != ParamAccess::read)
      return emitError() << "param '" << name
                         << "': tensor maps are an i64 address without a "
                            "shape, read";
    if (!maps || maps.empty())
      return emitError() << "param '" << name << "': tensor_maps needs maps";
    for (Attribute m : maps) {
      auto dict = dyn_cast<DictionaryAttr>(m);
      auto dims = dict ? dict.getAs<ArrayAttr>("dims") : ArrayAttr();
      auto box = dict ? dict.getAs<ArrayAttr>("box") : ArrayAttr();
      if (!dict || !dict.getAs<StringAttr>("name") ||
          !dict.getAs<StringAttr>("buffer") || !dims || !box ||
          dims.size() != box.size() || dims.empty() || dims.size() > 5 ||
          !dict.getAs<StringAttr>("swizzle") ||
          !dict.getAs<TypeAttr>("element_type") ||
          !dict.getAs<StringAttr>("oob_fill"))
        return emitError() << "param '" << name << "': map " << m
                           << " needs name, buffer, dims and box (1 to 5, "
                              "as many), swizzle, element_type, oob_fill";
    }
    return success();
  }
  if (maps)
    return emitError() << "param '" << name
                       << "': only a tensor_maps parameter has maps";
  if (kind == ParamKind::scalar) {
    if (!elementType.isInteger(64))
      return emitError() << "param '" << name << "': a scalar is an i64, not "
                         << elementType;
    if (shape)
      return emitError() << "param '" << name << "': a scalar has no shape";
    if (access != ParamAccess::read)
      return emitError() << "param '" << name << "': a scalar is not written";
    return success();
  }
  if (!elementType.isIntOrFloat())
    return emitError() << "param '" << name << "': element type " << elementType
                       << " is not an integer or float";
  if (!shape)
    return emitError() << "param '" << name << "': a pointer needs a shape";
  for (Attribute dim : shape) {
    if (auto size = dyn_cast<StringAttr>(dim); size && !size.empty())
      continue;
    auto extent = dyn_cast<IntegerAttr>(dim);
    if (!extent || extent.getInt() < 0)
      return emitError() << "param '" << name << "': dim " << dim
                         << " is neither a size name nor a non-negative "
                            "integer";
  }
  return success();
}

KernelParamAttr KernelParamAttr::getPointer(MLIRContext *context,
                                            StringRef name, Type elementType,
                                            ArrayAttr shape,
                                            ParamAccess access) {
  return get(context, name, ParamKind::pointer, elementType, shape, access,
             ArrayAttr());
}

KernelParamAttr KernelParamAttr::getTensorMaps(MLIRContext *context,
                                               StringRef name, ArrayAttr maps) {
  return get(context, name, ParamKind::tensor_maps,
             IntegerType::get(context, 64), ArrayAttr(), ParamAccess::read,
             maps);
}

KernelParamAttr KernelParamAttr::getScalar(MLIRContext *context,
                                           StringRef name) {
  return get(context, name, ParamKind::scalar, IntegerType::get(context, 64),
             ArrayAttr(), ParamAccess::read, ArrayAttr());
}

//===----------------------------------------------------------------------===//
// FragmentLayoutAttr
//===----------------------------------------------------------------------===//

LogicalResult
FragmentLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                           MmaShape shape, int64_t rowsPerLane,
                           int64_t tilesPerWarp, FragmentOperand operand) {
  if (shape == MmaShape::mma_m16n8k16) {
    // One or two m16 tiles stacked in a warp; two rows per lane and tile.
    if (tilesPerWarp != 1 && tilesPerWarp != 2)
      return emitError() << "mma_m16n8k16 layouts stack 1 or 2 m16 tiles in "
                            "a warp, got tiles_per_warp = "
                         << tilesPerWarp;
    if (rowsPerLane != 2 * tilesPerWarp)
      return emitError() << "mma_m16n8k16 gives a lane 2 rows per m16 tile: "
                            "rows_per_lane must be "
                         << 2 * tilesPerWarp << ", got " << rowsPerLane;
    return success();
  }
  // wgmma.mma_async m64nNk16: per warp of the warpgroup one m16 pattern.
  if (tilesPerWarp != 1 || rowsPerLane != 2)
    return emitError() << "wgmma_m64nNk16 gives each warp of a warpgroup 16 "
                          "rows, 2 per lane: rows_per_lane = 2 and "
                          "tiles_per_warp = 1, got "
                       << rowsPerLane << " and " << tilesPerWarp;
  if (operand == FragmentOperand::b_operand)
    return emitError() << "wgmma_m64nNk16 reads its B operand from shared "
                          "memory: it has no b_operand register fragment";
  return success();
}

//===----------------------------------------------------------------------===//
// VectorLayoutAttr
//===----------------------------------------------------------------------===//

LogicalResult
VectorLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         VectorAxis axis, int64_t width, int64_t fewRows) {
  if (width < 1 || width > 16 || (width & (width - 1)))
    return emitError() << "vector_layout width is a power of two from 1 to "
                          "16 (f32 lanes), got "
                       << width;
  if (fewRows < 0 || fewRows > 64)
    return emitError() << "vector_layout few_rows is 0 to 64, got " << fewRows;
  if (axis == VectorAxis::columns && fewRows != 0)
    return emitError() << "vector_layout few_rows belongs on a rows layout "
                          "(a columns tile has no few-rows form), got "
                       << fewRows;
  return success();
}

//===----------------------------------------------------------------------===//
// GpuScheduleAttr
//===----------------------------------------------------------------------===//

LogicalResult GpuScheduleAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, TensorCoreMode mode,
    int64_t pipelineDepth, int64_t tmaKeyStages, int64_t tmaValueStages,
    bool scoresInRegisters, bool queryInRegisters, int64_t producerWarps,
    bool lazyRescale, bool pingPong, bool intraWarpgroupOverlap) {
  if (pipelineDepth != 1 && pipelineDepth != 2)
    return emitError() << "pipeline_depth is 1 (each tile.qk loads its K "
                          "block) or 2 (one block ahead), got "
                       << pipelineDepth;
  if (tmaKeyStages == 0 && tmaValueStages != 0)
    return emitError() << "a TMA ring has K stages, and V stages only beside "
                          "them: got "
                       << tmaKeyStages << " and " << tmaValueStages;
  // (0 V stages: the latent form, whose V is the K stage.)
  if (tmaKeyStages != 0 &&
      (mode != TensorCoreMode::wgmma || tmaKeyStages != 2 ||
       tmaValueStages < 0 || tmaValueStages > 2))
    return emitError() << "the TMA rings are a wgmma kernel's, 2 K stages and "
                          "0 (the latent form), 1 or 2 V stages: got "
                       << tmaKeyStages << " and " << tmaValueStages
                       << " with mode " << stringifyTensorCoreMode(mode);
  if (scoresInRegisters && mode == TensorCoreMode::scalar)
    return emitError() << "scores_in_registers needs tensor cores (the "
                          "scalar lowering reads the shared score tile)";
  if (queryInRegisters && mode != TensorCoreMode::mma_sync)
    return emitError() << "query_in_registers holds mma.sync A fragments: "
                          "mode "
                       << stringifyTensorCoreMode(mode) << " has none";
  if (producerWarps != 0 && (producerWarps != 4 || tmaKeyStages == 0))
    return emitError() << "producer_warps is 0 or, on a kernel with TMA "
                          "rings, one warpgroup (4): got "
                       << producerWarps << " with "
                       << (tmaKeyStages ? "" : "no ") << "TMA rings";
  if (lazyRescale && mode == TensorCoreMode::scalar)
    return emitError() << "lazy_rescale needs tensor cores (the scalar "
                          "lowering rescales every block)";
  if (pingPong && producerWarps == 0)
    return emitError() << "ping_pong alternates the consumer warpgroups of a "
                          "kernel with a producer warpgroup: producer_warps "
                          "is 0";
  // The deferred P.V reads its V stage while the producer refills the
  // other: two V stages (none: the latent form, whose V is the K stage).
  if (intraWarpgroupOverlap && (producerWarps == 0 || tmaValueStages != 2))
    return emitError() << "intra_warpgroup_overlap defers each P.V past the "
                          "next Q.K^T of a wgmma kernel with a producer "
                          "warpgroup and two TMA V stages: got producer_warps "
                       << producerWarps << " and " << tmaValueStages
                       << " V stages";
  return success();
}

LogicalResult
SharedMemoryAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         int64_t bytes, int64_t keyStage, int64_t valueStage,
                         int64_t keyStage1, int64_t valueStage1,
                         int64_t barriers, int64_t exchange,
                         int64_t exchangeProbs) {
  if (bytes <= 0)
    return emitError() << "bytes is the kernel's dynamic shared memory, a "
                          "positive count: got "
                       << bytes;
  auto inside = [&](StringRef name, int64_t offset,
                    bool optional) -> LogicalResult {
    if ((optional && offset == -1) || (offset >= 0 && offset < bytes))
      return success();
    return emitError() << name << " = " << offset << " is not a byte offset in "
                       << "the kernel's " << bytes << " bytes";
  };
  if (failed(inside("key_stage", keyStage, false)) ||
      failed(inside("value_stage", valueStage, true)) ||
      failed(inside("key_stage1", keyStage1, true)) ||
      failed(inside("value_stage1", valueStage1, true)) ||
      failed(inside("barriers", barriers, true)) ||
      failed(inside("exchange", exchange, true)) ||
      failed(inside("exchange_probs", exchangeProbs, true)))
    return failure();
  if ((keyStage1 == -1) != (barriers == -1) ||
      (keyStage1 == -1) != (valueStage1 == -1))
    return emitError() << "a TMA ring has key_stage1, value_stage1 and "
                          "barriers, or none of them";
  if ((exchange == -1) != (exchangeProbs == -1))
    return emitError() << "a share exchange has exchange and exchange_probs, "
                          "or neither";
  return success();
}

LogicalResult
StageSyncAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      bool barrierBeforeCopies, int64_t waitCopies,
                      bool proxyFence, bool barrier) {
  if (waitCopies < -1)
    return emitError() << "wait_copies is a count of copy groups left in "
                          "flight (or absent): got "
                       << waitCopies;
  if (proxyFence && waitCopies < 0)
    return emitError() << "proxy_fence orders the copies a wait retired: it "
                          "needs wait_copies";
  return success();
}

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

std::optional<BufferRole> mlir::kvattn::getBufferRole(Operation *op) {
  if (auto role = op->getAttrOfType<BufferRoleAttr>(kBufferRoleAttrName))
    return role.getValue();
  return std::nullopt;
}

void mlir::kvattn::setBufferRole(Operation *op, BufferRole role) {
  op->setAttr(kBufferRoleAttrName, BufferRoleAttr::get(op->getContext(), role));
}

TileConfigAttr mlir::kvattn::getTileConfig(Operation *op) {
  return op->getAttrOfType<TileConfigAttr>(kTileConfigAttrName);
}

void mlir::kvattn::setTileConfig(Operation *op, TileConfigAttr config) {
  op->setAttr(kTileConfigAttrName, config);
}

std::optional<TileRole> mlir::kvattn::getTileRole(Operation *op) {
  if (auto role = op->getAttrOfType<TileRoleAttr>(kTileRoleAttrName))
    return role.getValue();
  return std::nullopt;
}

void mlir::kvattn::setTileRole(Operation *op, TileRole role) {
  op->setAttr(kTileRoleAttrName, TileRoleAttr::get(op->getContext(), role));
}

FragmentLayoutAttr mlir::kvattn::getFragmentLayout(Operation *op) {
  return op->getAttrOfType<FragmentLayoutAttr>(kFragmentLayoutAttrName);
}

void mlir::kvattn::setFragmentLayout(Operation *op, FragmentLayoutAttr layout) {
  op->setAttr(kFragmentLayoutAttrName, layout);
}

VectorLayoutAttr mlir::kvattn::getVectorLayout(Value tile) {
  if (Operation *def = tile.getDefiningOp())
    return def->getAttrOfType<VectorLayoutAttr>(kVectorLayoutAttrName);
  auto arg = cast<BlockArgument>(tile);
  auto function =
      dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!function || arg.getOwner() != &function.getFunctionBody().front())
    return {};
  return function.getArgAttrOfType<VectorLayoutAttr>(arg.getArgNumber(),
                                                     kVectorLayoutAttrName);
}

LogicalResult mlir::kvattn::setVectorLayout(Value tile,
                                            VectorLayoutAttr layout) {
  if (Operation *def = tile.getDefiningOp()) {
    def->setAttr(kVectorLayoutAttrName, layout);
    return success();
  }
  auto arg = cast<BlockArgument>(tile);
  auto function =
      dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!function || arg.getOwner() != &function.getFunctionBody().front())
    return failure();
  function.setArgAttr(arg.getArgNumber(), kVectorLayoutAttrName, layout);
  return success();
}

GpuScheduleAttr mlir::kvattn::getGpuSchedule(Operation *op) {
  return op->getAttrOfType<GpuScheduleAttr>(kGpuScheduleAttrName);
}

void mlir::kvattn::setGpuSchedule(Operation *op, GpuScheduleAttr schedule) {
  op->setAttr(kGpuScheduleAttrName, schedule);
}

/// The i64 of the discardable attribute `name` of `op` (the pairing ids, a
/// tile's shared-memory offset); none when absent.
static std::optional<int64_t> getI64Attr(Operation *op, StringRef name) {
  if (auto value = op->getAttrOfType<IntegerAttr>(name))
    return value.getInt();
  return std::nullopt;
}

static void setI64Attr(Operation *op, StringRef name, int64_t value) {
  op->setAttr(name,
              IntegerAttr::get(IntegerType::get(op->getContext(), 64), value));
}

std::optional<int64_t> mlir::kvattn::getValuePrefetchId(Operation *op) {
  return getI64Attr(op, kValuePrefetchAttrName);
}

void mlir::kvattn::setValuePrefetchId(Operation *op, int64_t id) {
  setI64Attr(op, kValuePrefetchAttrName, id);
}

std::optional<int64_t> mlir::kvattn::getKeyPrefetchId(Operation *op) {
  return getI64Attr(op, kKeyPrefetchAttrName);
}

void mlir::kvattn::setKeyPrefetchId(Operation *op, int64_t id) {
  setI64Attr(op, kKeyPrefetchAttrName, id);
}

SharedMemoryAttr mlir::kvattn::getSharedMemory(Operation *op) {
  return op->getAttrOfType<SharedMemoryAttr>(kSharedMemoryAttrName);
}

void mlir::kvattn::setSharedMemory(Operation *op, SharedMemoryAttr memory) {
  op->setAttr(kSharedMemoryAttrName, memory);
}

std::optional<int64_t> mlir::kvattn::getSharedOffset(Operation *op) {
  return getI64Attr(op, kSharedOffsetAttrName);
}

void mlir::kvattn::setSharedOffset(Operation *op, int64_t offset) {
  setI64Attr(op, kSharedOffsetAttrName, offset);
}

StageSyncAttr mlir::kvattn::getStageSync(Operation *op) {
  return op->getAttrOfType<StageSyncAttr>(kStageSyncAttrName);
}

void mlir::kvattn::setStageSync(Operation *op, StageSyncAttr sync) {
  op->setAttr(kStageSyncAttrName, sync);
}

bool mlir::kvattn::issuesPendingPV(Operation *op) {
  return op->hasAttrOfType<UnitAttr>(kPendingPVAttrName);
}

void mlir::kvattn::setIssuesPendingPV(Operation *op) {
  op->setAttr(kPendingPVAttrName, UnitAttr::get(op->getContext()));
}

bool mlir::kvattn::hasKernelParams(Operation *kernel) {
  return static_cast<bool>(
      kernel->getAttrOfType<ArrayAttr>(kKernelParamsAttrName));
}

SmallVector<KernelParamAttr> mlir::kvattn::getKernelParams(Operation *kernel) {
  SmallVector<KernelParamAttr> params;
  if (auto array = kernel->getAttrOfType<ArrayAttr>(kKernelParamsAttrName))
    for (Attribute a : array)
      params.push_back(cast<KernelParamAttr>(a));
  return params;
}

void mlir::kvattn::setKernelParams(Operation *kernel,
                                   ArrayRef<KernelParamAttr> params) {
  SmallVector<Attribute> attrs(params.begin(), params.end());
  kernel->setAttr(kKernelParamsAttrName,
                  ArrayAttr::get(kernel->getContext(), attrs));
}

//===----------------------------------------------------------------------===//
// The discardable attributes on any op
//===----------------------------------------------------------------------===//

/// kvattn.params: typed entries with distinct names, one per argument of the
/// function they describe, in its order (a pointer's argument is a buffer or
/// a pointer, a scalar's an integer or index).
static LogicalResult verifyKernelParams(Operation *op, Attribute value) {
  auto array = dyn_cast<ArrayAttr>(value);
  if (!array)
    return op->emitError() << "'" << kKernelParamsAttrName
                           << "' is not an array of #kvattn.param";
  llvm::StringSet<> names;
  for (auto [i, a] : llvm::enumerate(array)) {
    auto param = dyn_cast<KernelParamAttr>(a);
    if (!param)
      return op->emitError() << "'" << kKernelParamsAttrName << "' entry " << i
                             << " is not a #kvattn.param: " << a;
    if (!names.insert(param.getName()).second)
      return op->emitError()
             << "'" << kKernelParamsAttrName << "' names parameter '"
             << param.getName() << "' twice";
  }
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitError() << "'" << kKernelParamsAttrName
                           << "' belongs on a kernel function";
  ArrayRef<Type> arguments = function.getArgumentTypes();
  if (arguments.size() != array.size())
    return op->emitError() << "'" << kKernelParamsAttrName << "' has "
                           << array.size() << " entries, the kernel takes "
                           << arguments.size() << " arguments";
  for (auto [a, type] : llvm::zip(array, arguments)) {
    auto param = cast<KernelParamAttr>(a);
    if ((param.getKind() == ParamKind::scalar) != type.isIntOrIndex())
      return op->emitError() << "'" << kKernelParamsAttrName << "': parameter '"
                             << param.getName() << "' is a "
                             << stringifyParamKind(param.getKind())
                             << ", the argument a " << type;
  }
  return success();
}

LogicalResult KVAttnDialect::verifyOperationAttribute(Operation *op,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  Attribute value = attr.getValue();
  if (name == kBufferRoleAttrName) {
    if (!isa<BufferRoleAttr>(value))
      return op->emitError() << "'" << kBufferRoleAttrName
                             << "' is not a #kvattn.role: " << value;
    if (op->getNumResults() != 1 ||
        !isa<BaseMemRefType>(op->getResultTypes()[0]))
      return op->emitError() << "'" << kBufferRoleAttrName
                             << "' belongs on an op defining one buffer";
    return success();
  }
  if (name == kTileConfigAttrName) {
    if (!isa<TileConfigAttr>(value))
      return op->emitError() << "'" << kTileConfigAttrName
                             << "' is not a #kvattn.tile_config: " << value;
    return success();
  }
  if (name == kTileRoleAttrName || name == kFragmentLayoutAttrName) {
    if (name == kTileRoleAttrName ? !isa<TileRoleAttr>(value)
                                  : !isa<FragmentLayoutAttr>(value))
      return op->emitError()
             << "'" << name << "' is not a #"
             << (name == kTileRoleAttrName ? "kvattn.tile_role"
                                           : "kvattn.fragment_layout")
             << ": " << value;
    if (op->getNumResults() != 1 || !isa<MemRefType>(op->getResultTypes()[0]) ||
        !cast<MemRefType>(op->getResultTypes()[0]).hasStaticShape())
      return op->emitError() << "'" << name
                             << "' belongs on an op defining one statically "
                                "shaped tile";
    return success();
  }
  if (name == kVectorLayoutAttrName) {
    if (!isa<VectorLayoutAttr>(value))
      return op->emitError() << "'" << kVectorLayoutAttrName
                             << "' is not a #kvattn.vector_layout: " << value;
    if (op->getNumResults() != 1 || !isa<MemRefType>(op->getResultTypes()[0]))
      return op->emitError() << "'" << kVectorLayoutAttrName
                             << "' belongs on an op defining one tile";
    return success();
  }
  if (name == kGpuScheduleAttrName) {
    if (!isa<GpuScheduleAttr>(value))
      return op->emitError() << "'" << kGpuScheduleAttrName
                             << "' is not a #kvattn.gpu_schedule: " << value;
    if (!isa<FunctionOpInterface>(op))
      return op->emitError()
             << "'" << kGpuScheduleAttrName << "' belongs on a kernel function";
    return success();
  }
  if (name == kValuePrefetchAttrName || name == kKeyPrefetchAttrName) {
    auto id = dyn_cast<IntegerAttr>(value);
    if (!id || !id.getType().isInteger(64) || id.getInt() < 0)
      return op->emitError()
             << "'" << name << "' is a non-negative i64 pairing id, got "
             << value;
    // kvattn.value_prefetch pairs a tile.qk with the tile.softmax_update
    // whose V block it issues; kvattn.key_prefetch a tile.prefetch with the
    // tile.softmax_update that issues it.
    StringRef issuer = name == kValuePrefetchAttrName ? "kvattn.tile.qk"
                                                      : "kvattn.tile.prefetch";
    StringRef opName = op->getName().getStringRef();
    if (opName != issuer && opName != "kvattn.tile.softmax_update")
      return op->emitError() << "'" << name << "' belongs on a " << issuer
                             << " or a kvattn.tile.softmax_update";
    return success();
  }
  if (name == kSharedMemoryAttrName) {
    if (!isa<SharedMemoryAttr>(value))
      return op->emitError() << "'" << kSharedMemoryAttrName
                             << "' is not a #kvattn.shared_memory: " << value;
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kSharedMemoryAttrName
                             << "' belongs on a kernel function";
    return success();
  }
  if (name == kSharedOffsetAttrName) {
    auto offset = dyn_cast<IntegerAttr>(value);
    if (!offset || !offset.getType().isInteger(64) || offset.getInt() < 0)
      return op->emitError()
             << "'" << kSharedOffsetAttrName
             << "' is a non-negative i64 byte offset, got " << value;
    if (op->getNumResults() != 1 || !isa<MemRefType>(op->getResultTypes()[0]))
      return op->emitError() << "'" << kSharedOffsetAttrName
                             << "' belongs on an op defining one tile";
    return success();
  }
  if (name == kStageSyncAttrName) {
    if (!isa<StageSyncAttr>(value))
      return op->emitError() << "'" << kStageSyncAttrName
                             << "' is not a #kvattn.stage_sync: " << value;
    StringRef opName = op->getName().getStringRef();
    if (opName != "kvattn.tile.qk" && opName != "kvattn.tile.softmax_update")
      return op->emitError()
             << "'" << kStageSyncAttrName
             << "' belongs on a kvattn.tile.qk or a kvattn.tile.softmax_update";
    return success();
  }
  if (name == kPendingPVAttrName) {
    if (!isa<UnitAttr>(value) ||
        op->getName().getStringRef() != "kvattn.tile.qk")
      return op->emitError() << "'" << kPendingPVAttrName
                             << "' is a unit attribute of a kvattn.tile.qk";
    return success();
  }
  if (name == kKernelParamsAttrName)
    return verifyKernelParams(op, value);
  return success();
}

LogicalResult KVAttnDialect::verifyRegionArgAttribute(Operation *op,
                                                      unsigned regionIndex,
                                                      unsigned argIndex,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (name != kVectorLayoutAttrName)
    return op->emitError() << "'" << name
                           << "' is not a kvattn argument attribute (only '"
                           << kVectorLayoutAttrName << "' is)";
  if (!isa<VectorLayoutAttr>(attr.getValue()))
    return op->emitError() << "'" << kVectorLayoutAttrName
                           << "' is not a #kvattn.vector_layout: "
                           << attr.getValue();
  Region &region = op->getRegion(regionIndex);
  if (region.empty() || argIndex >= region.front().getNumArguments() ||
      !isa<MemRefType>(region.front().getArgument(argIndex).getType()))
    return op->emitError() << "'" << kVectorLayoutAttrName
                           << "' belongs on a memref argument";
  return success();
}
