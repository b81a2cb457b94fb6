//===- EmbeddingTest.cpp - kvattn inside another program ------------------===//
//
// An embedder registers kvattn's dialects in its own context and calls the
// library: no global pass registration (neither kvattn's nor upstream's,
// and this binary calls none), and a failure is a Status, never an abort.
//
//===----------------------------------------------------------------------===//

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Passes/TileToGPU.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Support/HostTensor.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <gtest/gtest.h>

namespace {

constexpr const char *kAttention = R"mlir(
func.func @main(%q: tensor<1x2x3x16xf16>, %k: tensor<1x2x8x16xf16>,
                %v: tensor<1x2x8x16xf16>, %qo: tensor<1xi32>)
    -> tensor<1x2x3x16xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal
      : tensor<1x2x3x16xf16>, tensor<1x2x8x16xf16>, tensor<1x2x8x16xf16>
      -> tensor<1x2x3x16xf16>
  return %o : tensor<1x2x3x16xf16>
}
)mlir";

struct Embedding : ::testing::Test {
  Embedding() {
    mlir::DialectRegistry registry;
    mlir::kvattn::registerAllKVAttnDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
    module = mlir::parseSourceString<mlir::ModuleOp>(kAttention, context.get());
  }
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TEST_F(Embedding, CpuPathNeedsNoPassRegistration) {
  ASSERT_TRUE(module);
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  mlir::kvattn::Status s = mlir::kvattn::CpuProgram::compile(
      *module, "main", mlir::kvattn::CpuCompileOptions(), program);
  ASSERT_FALSE(s.isError()) << s.message();

  // Distinct values per key: a wrong mask moves the result.
  mlir::kvattn::HostTensor q(mlir::kvattn::ElementType::F16, {1, 2, 3, 16}),
      k(mlir::kvattn::ElementType::F16, {1, 2, 8, 16}),
      v(mlir::kvattn::ElementType::F16, {1, 2, 8, 16}),
      qo(mlir::kvattn::ElementType::I32, {1});
  for (int64_t i = 0; i < v.numElements(); ++i)
    v.setDouble(i, static_cast<double>((i / 16) % 8)); // value = key index
  qo.setInt(0, 5); // rows at positions 5, 6, 7: they see 6, 7, 8 keys
  std::vector<mlir::kvattn::HostTensor> out;
  s = program->run({q, k, v, qo}, out);
  ASSERT_FALSE(s.isError()) << s.message();
  ASSERT_EQ(out.size(), 1u);
  // q = k = 0: uniform weights over the visible keys, the mean index.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_NEAR(out[0].getDouble(((h * 3) + i) * 16), (5.0 + i) / 2, 1e-2)
          << "head " << h << " row " << i;
}

// Issue 30 item 12: CpuProgram::run checks what the C API's kvattn_cpu_run
// checks (one shared set of checks, one set of messages): a negative
// position used to abort in the compiled code, and a shape other than the
// IR's was read anyway.
TEST_F(Embedding, CpuRunChecksWhatTheCApiChecks) {
  ASSERT_TRUE(module);
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  mlir::kvattn::Status s = mlir::kvattn::CpuProgram::compile(
      *module, "main", mlir::kvattn::CpuCompileOptions(), program);
  ASSERT_FALSE(s.isError()) << s.message();
  using mlir::kvattn::ElementType;
  using mlir::kvattn::HostTensor;
  HostTensor q(ElementType::F16, {1, 2, 3, 16}),
      k(ElementType::F16, {1, 2, 8, 16}), v(ElementType::F16, {1, 2, 8, 16}),
      qo(ElementType::I32, {1});
  qo.setInt(0, 5);
  std::vector<HostTensor> out;
  ASSERT_FALSE(program->run({q, k, v, qo}, out).isError());

  auto error = [&](std::vector<HostTensor> args) {
    std::vector<HostTensor> results;
    mlir::kvattn::Status st = program->run(args, results);
    EXPECT_TRUE(st.isError());
    return st.isError() ? st.message() : std::string("(ran)");
  };
  // The run-time values, with the reference's messages.
  HostTensor negative = qo;
  negative.setInt(0, -1);
  EXPECT_NE(error({q, k, v, negative}).find("q_offset[0] = -1 is negative"),
            std::string::npos);
  // The types: a cache with 7 keys where the IR has 8, another element
  // type, another rank, a count.
  EXPECT_EQ(error({q, HostTensor(ElementType::F16, {1, 2, 7, 16}), v, qo}),
            "argument 1 of @main is 1x2x7x16xf16, but "
            "tensor<1x2x8x16xf16> has 8 at dim 2");
  EXPECT_EQ(error({q, k, HostTensor(ElementType::F32, {1, 2, 8, 16}), qo}),
            "argument 2 of @main is 1x2x8x16xf32, but "
            "tensor<1x2x8x16xf16> has element type f16");
  EXPECT_EQ(error({q, k, v, HostTensor(ElementType::I32, {1, 1})}),
            "argument 3 of @main is 1x1xi32 (rank 2), but tensor<1xi32> has "
            "rank 1");
  EXPECT_NE(error({q, k, v}).find("takes 4 arguments, 3 given"),
            std::string::npos);
  // The opt level, as the C API limits it.
  mlir::kvattn::CpuCompileOptions tooHigh;
  tooHigh.optLevel = 99;
  std::unique_ptr<mlir::kvattn::CpuProgram> none;
  s = mlir::kvattn::CpuProgram::compile(*module, "main", tooHigh, none);
  EXPECT_EQ(s.message(), "opt level must be 0 to 3, got 99");
}

TEST_F(Embedding, CpuPipelineBuildsWithoutRegistry) {
  ASSERT_TRUE(module);
  mlir::PassManager pm(context.get());
  mlir::kvattn::buildKVAttnToCpuPipeline(pm, mlir::kvattn::CpuCompileOptions());
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
}

TEST_F(Embedding, GpuPathNeedsNoPassRegistration) {
  ASSERT_TRUE(module);
  // Skip reason: compileToPtx refuses to run without libdevice.10.bc (the
  // kernels' exp/log come from it), which only the CUDA toolkit provides;
  // every CI machine here has it, a bare Debian machine may not.
  if (mlir::kvattn::findLibdevice("").empty())
    GTEST_SKIP() << "libdevice.10.bc not found (CUDA toolkit): the GPU path "
                    "needs it for its math functions";
  mlir::kvattn::PtxOptions options;
  options.image = mlir::kvattn::DeviceImage::LlvmIR; // no NVPTX code generation
  mlir::kvattn::PtxModule ptx;
  mlir::kvattn::Status s = mlir::kvattn::compileToPtx(*module, options, ptx);
  ASSERT_FALSE(s.isError()) << s.message();
  EXPECT_EQ(ptx.kernels.size(), 1u);
  EXPECT_NE(ptx.ptx.find("define"), std::string::npos);
}

TEST_F(Embedding, BadOptionsAreStatusNotAbort) {
  ASSERT_TRUE(module);
  mlir::kvattn::PtxOptions options;
  options.chip = "sm_50";
  mlir::kvattn::PtxModule ptx;
  mlir::kvattn::Status s = mlir::kvattn::compileToPtx(*module, options, ptx);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("older than sm_80"), std::string::npos)
      << s.message();

  mlir::kvattn::CpuCompileOptions cpu;
  cpu.blockM = 65536;
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  s = mlir::kvattn::CpuProgram::compile(*module, "main", cpu, program);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("block-m = 65536 is above the limit 256"),
            std::string::npos)
      << s.message();

  // The library's own checks of what the tools refuse by flag name first
  // (tools/common/CompileFlags): an embedder reaches these.
  mlir::kvattn::CpuCompileOptions negativeThreads;
  negativeThreads.threads = -1;
  s = mlir::kvattn::CpuProgram::compile(*module, "main", negativeThreads,
                                        program);
  EXPECT_EQ(s.message(), "threads must be 0 (all cores) to 1024, got -1");
  mlir::kvattn::PtxOptions narrow;
  narrow.indexBitwidth = 16;
  s = mlir::kvattn::compileToPtx(*module, narrow, ptx);
  EXPECT_NE(s.message().find("index bitwidth 16 is not supported (32 or 64)"),
            std::string::npos)
      << s.message();
}

// An embedder lowers the tile ops of an mma.sync kernel with the mma.sync
// pattern set alone (kvattn/Passes/TileToGPU.h), after the passes that
// write the kernel's schedule, roles and layouts; the wgmma set does not
// match that kernel and says so.
TEST_F(Embedding, MmaSyncPatternSetOnItsOwn) {
  ASSERT_TRUE(module);
  mlir::PassManager pm(context.get());
  pm.addPass(mlir::kvattn::createTilePass());
  pm.addPass(mlir::kvattn::createOutlineTileProgramsPass());
  pm.nest<mlir::gpu::GPUModuleOp>().addPass(
      mlir::kvattn::createAssignTileLayoutsPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  mlir::gpu::GPUFuncOp kernel;
  module->walk([&](mlir::gpu::GPUFuncOp f) { kernel = f; });
  ASSERT_TRUE(kernel);
  auto countTileOps = [&] {
    int n = 0;
    kernel.walk([&](mlir::Operation *op) {
      n += op->getName().getStringRef().starts_with("kvattn.tile.");
    });
    return n;
  };
  const int tileOps = countTileOps();
  ASSERT_GT(tileOps, 0);

  // The wgmma set: no pattern lowers an mma.sync kernel's ops.
  {
    mlir::OwningOpRef<mlir::ModuleOp> copy(module->clone());
    mlir::gpu::GPUFuncOp other;
    copy->walk([&](mlir::gpu::GPUFuncOp f) { other = f; });
    auto state = mlir::kvattn::prepareGpuTileLowering(other);
    ASSERT_TRUE(mlir::succeeded(state));
    EXPECT_EQ(mlir::kvattn::getTensorCoreMode(**state),
              mlir::kvattn::TensorCoreMode::mma_sync);
    mlir::RewritePatternSet wgmma(context.get());
    mlir::kvattn::populateTileToWgmmaPatterns(wgmma, **state);
    std::string message;
    mlir::ScopedDiagnosticHandler handler(context.get(),
                                          [&](mlir::Diagnostic &d) {
                                            message = d.str();
                                            return mlir::success();
                                          });
    EXPECT_TRUE(mlir::failed(
        mlir::kvattn::applyGpuTilePatterns(**state, std::move(wgmma))));
    EXPECT_NE(message.find("no pattern of the given sets lowers this op on a "
                           "mma_sync kernel"),
              std::string::npos)
        << message;
  }

  auto state = mlir::kvattn::prepareGpuTileLowering(kernel);
  ASSERT_TRUE(mlir::succeeded(state));
  mlir::RewritePatternSet patterns(context.get());
  mlir::kvattn::populateTileToMmaSyncPatterns(patterns, **state);
  ASSERT_TRUE(mlir::succeeded(
      mlir::kvattn::applyGpuTilePatterns(**state, std::move(patterns))));
  EXPECT_EQ(countTileOps(), 0);
  int mma = 0, tiles = 0;
  kernel.walk([&](mlir::Operation *op) {
    mma += op->getName().getStringRef() == "nvvm.mma.sync";
    tiles += op->hasAttr("kvattn.tile_role");
  });
  EXPECT_GT(mma, 0);   // Q.K^T and P.V on tensor cores
  EXPECT_EQ(tiles, 0); // every tile became shared memory or registers
  EXPECT_TRUE(mlir::succeeded(mlir::verify(kernel)));
}

} // namespace

// The CPU's vector patterns on their own (kvattn/Passes/Passes.h): they
// lower a tile op only in its tiles' #kvattn.vector_layout, which
// assignVectorLayouts writes; without one the op is left in place (the
// pass refuses it by name), never lowered at a guessed width.
TEST_F(Embedding, VectorPatternsObeyTheLayouts) {
  constexpr const char *kTileQK = R"mlir(
func.func @qk(%q: memref<16x8xf32>, %k: memref<1x2x?x8xf32>,
              %s: memref<16x32xf32>, %b: index, %g: index, %start: index,
              %rows: index, %cols: index) {
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xf32>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}
)mlir";
  auto countTileOps = [](mlir::ModuleOp m) {
    int n = 0;
    m.walk([&](mlir::Operation *op) {
      n += op->getName().getStringRef().starts_with("kvattn.tile.");
    });
    return n;
  };
  // Patterns applied outside a pass create ops of dialects the pass would
  // have declared as dependent: the embedder loads them.
  context->loadAllAvailableDialects();
  auto lower = [&](mlir::ModuleOp m) {
    mlir::RewritePatternSet patterns(context.get());
    mlir::kvattn::populateLowerTileToVectorsPatterns(patterns);
    (void)mlir::applyPatternsGreedily(m, std::move(patterns));
  };
  mlir::OwningOpRef<mlir::ModuleOp> bare =
      mlir::parseSourceString<mlir::ModuleOp>(kTileQK, context.get());
  ASSERT_TRUE(bare);
  lower(*bare);
  EXPECT_EQ(countTileOps(*bare), 1);

  mlir::OwningOpRef<mlir::ModuleOp> laid =
      mlir::parseSourceString<mlir::ModuleOp>(kTileQK, context.get());
  ASSERT_TRUE(laid);
  ASSERT_TRUE(mlir::succeeded(
      mlir::kvattn::assignVectorLayouts(*laid, /*maxWidth=*/4, /*fewRows=*/0)));
  auto fn = *laid->getOps<mlir::func::FuncOp>().begin();
  auto layout = fn.getArgAttrOfType<mlir::kvattn::VectorLayoutAttr>(
      0, mlir::kvattn::kVectorLayoutAttrName);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout.getAxis(), mlir::kvattn::VectorAxis::rows);
  EXPECT_EQ(layout.getWidth(), 4);
  lower(*laid);
  EXPECT_EQ(countTileOps(*laid), 0);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*laid)));
}
