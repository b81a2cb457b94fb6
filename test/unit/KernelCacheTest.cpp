//===- KernelCacheTest.cpp - compileToPtx's on-disk kernel cache ----------===//
//
// Misses, hits, keys, corrupt and unwritable entries, and processes racing
// on one entry (threads here, each with its own context), through
// compileToPtx with KVATTN_CACHE_DIR pointing at a fresh directory. Needs
// libdevice (the CUDA toolkit): without it the tests skip and say so.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Target/KernelCache.h"
#include "kvattn/Passes/Passes.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Target/Ptx.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

// f32 on the scalar lowering: the quickest kernel to compile.
constexpr const char *kAttention = R"mlir(
func.func @main(%q: tensor<1x2x3x16xf32>, %k: tensor<1x2x8x16xf32>,
                %v: tensor<1x2x8x16xf32>, %qo: tensor<1xi32>)
    -> tensor<1x2x3x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal
      : tensor<1x2x3x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>
      -> tensor<1x2x3x16xf32>
  return %o : tensor<1x2x3x16xf32>
}
)mlir";

/// The cache's files (entries and temporaries) in `dir`.
std::vector<std::string> filesIn(const std::string &dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    files.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(files.begin(), files.end());
  return files;
}

struct KernelCacheTest : ::testing::Test {
  void SetUp() override {
    if (mlir::kvattn::findLibdevice("").empty())
      GTEST_SKIP() << "libdevice.10.bc not found (no CUDA toolkit at "
                      "$CUDA_HOME or /usr/local/cuda): nothing compiles";
    llvm::SmallString<128> path;
    ASSERT_FALSE(
        llvm::sys::fs::createUniqueDirectory("kvattn-kernel-cache", path));
    dir = path.str().str();
    ::setenv("KVATTN_CACHE_DIR", dir.c_str(), 1);
    module = parse(context);
    ASSERT_TRUE(module);
  }
  void TearDown() override {
    ::unsetenv("KVATTN_CACHE_DIR");
    if (!dir.empty())
      llvm::sys::fs::remove_directories(dir);
  }

  static mlir::OwningOpRef<mlir::ModuleOp> parse(mlir::MLIRContext &ctx) {
    mlir::DialectRegistry registry;
    mlir::kvattn::registerAllKVAttnDialects(registry);
    ctx.appendDialectRegistry(registry);
    return mlir::parseSourceString<mlir::ModuleOp>(kAttention, &ctx);
  }
  mlir::kvattn::PtxModule
  compile(const mlir::kvattn::PtxOptions &options = {}) {
    mlir::kvattn::PtxModule result;
    mlir::kvattn::Status s =
        mlir::kvattn::compileToPtx(*module, options, result);
    EXPECT_TRUE(s.isOk()) << s.message();
    return result;
  }
  std::string entryPath() {
    return mlir::kvattn::KernelCache(dir).pathOf(
        mlir::kvattn::KernelCache::key(*module, mlir::kvattn::PtxOptions()));
  }

  std::string dir;
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TEST_F(KernelCacheTest, MissStoresHitReadsTheSameResult) {
  mlir::kvattn::PtxModule cold = compile();
  EXPECT_EQ(cold.cache, "miss");
  EXPECT_EQ(filesIn(dir), std::vector<std::string>{
                              llvm::sys::path::filename(entryPath()).str()});
  mlir::kvattn::PtxModule warm = compile();
  EXPECT_EQ(warm.cache, "hit");
  EXPECT_EQ(warm.ptx, cold.ptx);
  EXPECT_EQ(warm.chip, cold.chip);
  // The index width is read back (the manifest's index_bits).
  EXPECT_EQ(cold.indexBits, 32);
  EXPECT_EQ(warm.indexBits, 32);
  EXPECT_EQ(mlir::kvattn::manifestToJson(warm, "k.ptx"),
            mlir::kvattn::manifestToJson(cold, "k.ptx"));
  // The manifest carries real values (a hit is not an empty result).
  ASSERT_EQ(warm.kernels.size(), 1u);
  EXPECT_GT(warm.kernels[0].params.size(), 5u);
  EXPECT_GT(warm.kernels[0].threadsPerBlock, 0);
  // 64-bit kernels are another entry, and read back as 64-bit.
  mlir::kvattn::PtxOptions wide;
  wide.indexBitwidth = 64;
  EXPECT_EQ(compile(wide).cache, "miss");
  mlir::kvattn::PtxModule wideWarm = compile(wide);
  EXPECT_EQ(wideWarm.cache, "hit");
  EXPECT_EQ(wideWarm.indexBits, 64);
  EXPECT_NE(wideWarm.ptx, warm.ptx);
}

TEST_F(KernelCacheTest, KeyFollowsOptionsAndIrNotLocations) {
  mlir::kvattn::PtxOptions base;
  std::string key = mlir::kvattn::KernelCache::key(*module, base);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(mlir::kvattn::KernelCache::key(*module, base), key);
  mlir::kvattn::PtxOptions chip = base;
  chip.chip = "sm_90";
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, chip), key);
  mlir::kvattn::PtxOptions tile = base;
  tile.blockN = 32;
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, tile), key);
  mlir::kvattn::PtxOptions image = base;
  image.image = mlir::kvattn::DeviceImage::LlvmIR;
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, image), key);
  mlir::kvattn::PtxOptions wide = base;
  wide.indexBitwidth = 64;
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, wide), key);
  // The LLVM pipeline decides the PTX too.
  mlir::kvattn::PtxOptions pipeline = base;
  pipeline.llvmPipeline = mlir::kvattn::LlvmPipeline::Standard;
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, pipeline), key);
  // So do the GPU schedule switches.
  mlir::kvattn::PtxOptions noProducer = base;
  noProducer.producerWarpgroup = false;
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, noProducer), key);
  mlir::kvattn::PtxOptions eager = base;
  eager.lazyRescale = false;
  EXPECT_NE(mlir::kvattn::KernelCache::key(*module, eager), key);
  // The same IR parsed again (other locations): the same key.
  mlir::MLIRContext other;
  mlir::OwningOpRef<mlir::ModuleOp> again = parse(other);
  ASSERT_TRUE(again);
  again->walk([&](mlir::Operation *op) {
    op->setLoc(mlir::FileLineColLoc::get(&other, "elsewhere.mlir", 7, 3));
  });
  EXPECT_EQ(mlir::kvattn::KernelCache::key(*again, base), key);
  // Another IR: another key.
  mlir::OwningOpRef<mlir::ModuleOp> causalOff = parse(other);
  causalOff->walk([](mlir::Operation *op) { op->removeAttr("causal"); });
  EXPECT_NE(mlir::kvattn::KernelCache::key(*causalOff, base), key);
}

TEST_F(KernelCacheTest, CorruptEntriesAreRecompiledAndReplaced) {
  mlir::kvattn::PtxModule cold = compile();
  ASSERT_EQ(cold.cache, "miss");
  auto rewrite = [&](auto edit) {
    auto buffer = llvm::MemoryBuffer::getFile(entryPath());
    ASSERT_TRUE(buffer);
    std::string text = (*buffer)->getBuffer().str();
    edit(text);
    std::error_code ec;
    llvm::raw_fd_ostream os(entryPath(), ec);
    ASSERT_FALSE(ec);
    os << text;
  };
  // One flipped byte in the PTX, a truncated file, another format, an
  // empty file: each is detected, recompiled and rewritten whole.
  std::vector<std::function<void(std::string &)>> damages = {
      [](std::string &t) { t[t.size() - 10] ^= 1; },
      [](std::string &t) { t.resize(t.size() / 2); },
      [](std::string &t) { t.replace(0, 19, "kvattn-kernel-cach3"); },
      [](std::string &t) { t.clear(); },
  };
  for (size_t i = 0; i < damages.size(); ++i) {
    rewrite(damages[i]);
    mlir::kvattn::PtxModule again = compile();
    EXPECT_EQ(again.cache, "replaced") << "damage " << i;
    EXPECT_EQ(again.ptx, cold.ptx) << "damage " << i;
    EXPECT_EQ(compile().cache, "hit") << "damage " << i;
  }
}

TEST_F(KernelCacheTest, OffAndUnwritableStillCompile) {
  mlir::kvattn::PtxOptions noCache;
  noCache.useKernelCache = false;
  EXPECT_EQ(compile(noCache).cache, "off");
  ::setenv("KVATTN_CACHE_DIR", "off", 1);
  EXPECT_EQ(compile().cache, "off");
  EXPECT_TRUE(filesIn(dir).empty());
  // A directory that cannot be created (below a regular file).
  std::string file = dir + "/not-a-directory";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
  }
  std::string below = file + "/cache";
  ::setenv("KVATTN_CACHE_DIR", below.c_str(), 1);
  mlir::kvattn::PtxModule result = compile();
  EXPECT_EQ(result.cache.rfind("unwritable: cannot create the kernel cache "
                               "directory",
                               0),
            0u)
      << result.cache;
  EXPECT_FALSE(result.ptx.empty());
}

TEST_F(KernelCacheTest, ConcurrentWritersLeaveOneWholeEntry) {
  constexpr int kWriters = 4;
  std::vector<std::string> status(kWriters), ptx(kWriters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i)
    threads.emplace_back([&, i] {
      mlir::MLIRContext ctx;
      ctx.disableMultithreading();
      mlir::OwningOpRef<mlir::ModuleOp> m = parse(ctx);
      mlir::kvattn::PtxModule result;
      if (m &&
          mlir::kvattn::compileToPtx(*m, mlir::kvattn::PtxOptions(), result)
              .isOk()) {
        status[i] = result.cache;
        ptx[i] = result.ptx;
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < kWriters; ++i) {
    EXPECT_TRUE(status[i] == "miss" || status[i] == "hit") << status[i];
    EXPECT_EQ(ptx[i], ptx[0]);
  }
  // One entry, no temporary left behind, and it reads back.
  EXPECT_EQ(filesIn(dir).size(), 1u);
  EXPECT_EQ(compile().cache, "hit");
}

/// A fresh directory for lookups that compile nothing (no libdevice
/// needed), removed at the end.
struct CacheDirectory {
  CacheDirectory() {
    llvm::SmallString<128> path;
    EXPECT_FALSE(
        llvm::sys::fs::createUniqueDirectory("kvattn-kernel-cache", path));
    dir = path.str().str();
  }
  ~CacheDirectory() { llvm::sys::fs::remove_directories(dir); }
  std::string dir;
};

const std::string kSomeKey(64, 'a');

/// lookup(key) within 20 s; a lookup that hangs on a FIFO entry is released
/// (a writer opens and closes the FIFO) and reported.
mlir::kvattn::KernelCache::Lookup
lookupWithin(const mlir::kvattn::KernelCache &cache, bool &hung) {
  mlir::kvattn::PtxModule result;
  auto pending = std::async(std::launch::async,
                            [&] { return cache.lookup(kSomeKey, result); });
  hung =
      pending.wait_for(std::chrono::seconds(20)) != std::future_status::ready;
  if (hung) {
    int fd = ::open(cache.pathOf(kSomeKey).c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0)
      ::close(fd);
  }
  return pending.get();
}

// Issue 30 item 7: only a regular file of a plausible size is read as an
// entry. A FIFO hung the lookup (open waits for a writer); a link to
// /dev/zero was read until memory ran out; a huge file was read whole.
// Each is no entry (Corrupt: compiled and replaced), and is not read.
TEST(KernelCacheEntries, FifoIsNotWaitedFor) {
  CacheDirectory d;
  mlir::kvattn::KernelCache cache(d.dir);
  ASSERT_EQ(::mkfifo(cache.pathOf(kSomeKey).c_str(), 0600), 0);
  bool hung = false;
  EXPECT_EQ(lookupWithin(cache, hung),
            mlir::kvattn::KernelCache::Lookup::Corrupt);
  EXPECT_FALSE(hung) << "the lookup waited for a writer of the FIFO";
}

TEST(KernelCacheEntries, LinkToDevZeroIsNotRead) {
  CacheDirectory d;
  mlir::kvattn::KernelCache cache(d.dir);
  ASSERT_EQ(::symlink("/dev/zero", cache.pathOf(kSomeKey).c_str()), 0);
  bool hung = false;
  EXPECT_EQ(lookupWithin(cache, hung),
            mlir::kvattn::KernelCache::Lookup::Corrupt);
  EXPECT_FALSE(hung);
}

TEST(KernelCacheEntries, HugeFileIsNotRead) {
  CacheDirectory d;
  mlir::kvattn::KernelCache cache(d.dir);
  // Sparse: 1 GiB of size, no blocks.
  int fd = ::open(cache.pathOf(kSomeKey).c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(1) << 30), 0);
  ::close(fd);
  bool hung = false;
  EXPECT_EQ(lookupWithin(cache, hung),
            mlir::kvattn::KernelCache::Lookup::Corrupt);
  // A directory there is no entry either; nothing there is a miss.
  llvm::sys::fs::remove(cache.pathOf(kSomeKey));
  EXPECT_EQ(lookupWithin(cache, hung), mlir::kvattn::KernelCache::Lookup::Miss);
  ASSERT_FALSE(llvm::sys::fs::create_directory(cache.pathOf(kSomeKey)));
  EXPECT_EQ(lookupWithin(cache, hung),
            mlir::kvattn::KernelCache::Lookup::Corrupt);
}

// Through compileToPtx: a FIFO or a link to /dev/zero in place of the entry
// is recompiled and replaced by a whole entry (the rename replaces the
// FIFO or the link, never writes into /dev/zero).
TEST_F(KernelCacheTest, SpecialFilesAreReplaced) {
  mlir::kvattn::PtxModule cold = compile();
  ASSERT_EQ(cold.cache, "miss");
  for (int kind = 0; kind < 2; ++kind) {
    ASSERT_FALSE(llvm::sys::fs::remove(entryPath()));
    if (kind == 0)
      ASSERT_EQ(::mkfifo(entryPath().c_str(), 0600), 0);
    else
      ASSERT_EQ(::symlink("/dev/zero", entryPath().c_str()), 0);
    auto pending = std::async(std::launch::async, [&] { return compile(); });
    if (pending.wait_for(std::chrono::seconds(60)) !=
        std::future_status::ready) {
      ADD_FAILURE() << "compileToPtx hung on the entry (kind " << kind << ")";
      int fd = ::open(entryPath().c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0)
        ::close(fd);
    }
    mlir::kvattn::PtxModule again = pending.get();
    EXPECT_EQ(again.cache, "replaced") << "kind " << kind;
    EXPECT_EQ(again.ptx, cold.ptx) << "kind " << kind;
    struct stat st;
    ASSERT_EQ(::lstat(entryPath().c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "kind " << kind;
    EXPECT_EQ(compile().cache, "hit") << "kind " << kind;
  }
}

} // namespace

// A kernel with a `tensor_maps` parameter (the sm_90a TMA ring): its maps
// are part of the entry and read back whole, so that a cache hit gives the
// same manifest (docs/kernel-abi.md, "Tensor maps").
TEST(KernelCacheEntries, TensorMapsReadBack) {
  CacheDirectory d;
  mlir::kvattn::KernelCache cache(d.dir);
  mlir::kvattn::PtxModule m;
  m.chip = "sm_90a";
  m.indexBits = 32;
  m.ptx = "// ptx\n";
  mlir::kvattn::KernelManifest k;
  k.name = "main_kvattn_0";
  k.kind = "attention";
  k.blockM = k.blockN = 64;
  k.numWarps = 4;
  k.numStages = 2;
  k.threadsPerBlock = 128;
  k.dynamicSharedMemoryBytes = 65600;
  mlir::kvattn::KernelParam key;
  key.name = "key";
  key.kind = "pointer";
  key.elementType = "bf16";
  key.shape = {"B", "8", "S", "128"};
  key.access = "read";
  mlir::kvattn::KernelParam maps;
  maps.name = "tensor_maps";
  maps.kind = "tensor_maps";
  maps.elementType = "i64";
  maps.mapsJson = "[{\"name\": \"k_load\", \"buffer\": \"key\", \"dims\": "
                  "[3, 2, 1, 0], \"box\": [64, 64, 1, 1], \"swizzle\": "
                  "\"128B\", \"element_type\": \"bf16\", \"oob_fill\": "
                  "\"zero\"}]";
  k.params = {key, maps};
  m.kernels = {k};
  ASSERT_TRUE(cache.store(kSomeKey, m).isOk());
  mlir::kvattn::PtxModule back;
  ASSERT_EQ(cache.lookup(kSomeKey, back),
            mlir::kvattn::KernelCache::Lookup::Hit);
  ASSERT_EQ(back.kernels.size(), 1u);
  ASSERT_EQ(back.kernels[0].params.size(), 2u);
  EXPECT_EQ(back.kernels[0].params[1].kind, "tensor_maps");
  EXPECT_EQ(back.kernels[0].params[1].mapsJson, maps.mapsJson);
  EXPECT_EQ(mlir::kvattn::manifestToJson(back, "k.ptx"),
            mlir::kvattn::manifestToJson(m, "k.ptx"));
  EXPECT_NE(mlir::kvattn::manifestToJson(back, "k.ptx")
                .find("\"kind\": \"tensor_maps\", \"type\": \"u64\", \"maps\": "
                      "[{\"name\": \"k_load\""),
            std::string::npos);
}

// An append kernel of `kvattn.append ... skip_padding`: the flag is part of
// the entry, so that a cache hit's manifest still lets the validation take
// a -1 page as padding (a hit without it refused every padded write).
TEST(KernelCacheEntries, SkipPaddingReadsBack) {
  CacheDirectory d;
  mlir::kvattn::KernelCache cache(d.dir);
  mlir::kvattn::PtxModule m;
  m.chip = "sm_90";
  m.ptx = "// ptx\n";
  mlir::kvattn::KernelManifest padded, plain;
  for (mlir::kvattn::KernelManifest *k : {&padded, &plain}) {
    k->kind = "append";
    k->blockM = k->numWarps = 4;
    k->numStages = 1;
    k->threadsPerBlock = 128;
  }
  padded.name = "write_kvattn_append_0";
  padded.skipPadding = true;
  plain.name = "write_kvattn_append_1";
  m.kernels = {padded, plain};
  ASSERT_TRUE(cache.store(kSomeKey, m).isOk());
  mlir::kvattn::PtxModule back;
  ASSERT_EQ(cache.lookup(kSomeKey, back),
            mlir::kvattn::KernelCache::Lookup::Hit);
  ASSERT_EQ(back.kernels.size(), 2u);
  EXPECT_TRUE(back.kernels[0].skipPadding);
  EXPECT_FALSE(back.kernels[1].skipPadding);
  const std::string json = mlir::kvattn::manifestToJson(back, "k.ptx");
  EXPECT_EQ(json, mlir::kvattn::manifestToJson(m, "k.ptx"));
  EXPECT_NE(json.find("\"skip_padding\": true"), std::string::npos);
}
