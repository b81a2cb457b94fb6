//===- KernelCache.cpp - compiled kernels cached on disk ------------------===//

#include "kvattn/Target/KernelCache.h"

#include "KVAttnCompilerHash.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mlir {
namespace kvattn {

namespace {

std::string sha256(llvm::StringRef data) {
  llvm::SHA256 hash;
  hash.update(data);
  return llvm::toHex(hash.final(), /*LowerCase=*/true);
}

/// The most an entry may hold: the PTX of a module's kernels is a few MB.
constexpr uint64_t kMaxEntryBytes = uint64_t(256) << 20;
/// The most the libdevice file may hold (0.5 MB in CUDA 12 and 13).
constexpr uint64_t kMaxLibdeviceBytes = uint64_t(64) << 20;

/// How reading a file went.
enum class Read { Ok, Missing, NotRegular, TooLarge, Failed };

/// Reads `path` (symbolic links followed) into `buffer` when it is a
/// regular file of at most `maxBytes`: the file is opened without blocking
/// (a FIFO has no writer to wait for), its type and size are taken from
/// the open descriptor (no window between a check and the read), and no
/// more than that size is read (a link to /dev/zero is refused, not read
/// until memory runs out).
Read readRegularFile(const std::string &path, uint64_t maxBytes,
                     std::unique_ptr<llvm::MemoryBuffer> &buffer) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT || errno == ENOTDIR ? Read::Missing : Read::Failed;
  struct stat st;
  Read result = Read::Ok;
  if (::fstat(fd, &st) != 0)
    result = Read::Failed;
  else if (!S_ISREG(st.st_mode))
    result = Read::NotRegular;
  else if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > maxBytes)
    result = Read::TooLarge;
  if (result == Read::Ok) {
    // Read, not mapped (IsVolatile): a file truncated meanwhile reads
    // short (and fails its checksum) instead of faulting.
    auto read = llvm::MemoryBuffer::getOpenFile(
        llvm::sys::fs::convertFDToNativeFile(fd), path, st.st_size,
        /*RequiresNullTerminator=*/false, /*IsVolatile=*/true);
    if (read)
      buffer = std::move(*read);
    else
      result = Read::Failed;
  }
  ::close(fd);
  return result;
}

/// The content hash of a file, memoised per process (libdevice: 0.5 MB,
/// the same file for every compilation). Empty when it cannot be read (or
/// is no regular file of a plausible size).
std::string fileHash(const std::string &path) {
  static std::mutex mutex;
  static std::map<std::string, std::string> hashes;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = hashes.try_emplace(path);
  if (inserted) {
    std::unique_ptr<llvm::MemoryBuffer> buffer;
    if (readRegularFile(path, kMaxLibdeviceBytes, buffer) == Read::Ok)
      it->second = sha256(buffer->getBuffer());
  }
  return it->second;
}

const char *imageName(DeviceImage image) {
  return image == DeviceImage::LlvmIR ? "llvm" : "ptx";
}

/// The fields of an entry, one per line, names and numbers separated by
/// single spaces; the image last, as a byte count and the bytes.
std::string serialize(const PtxModule &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "chip " << m.chip << "\n"
     << "image " << imageName(m.image) << "\n"
     << "index-bits " << m.indexBits << "\n"
     << "kernels " << m.kernels.size() << "\n";
  for (const KernelManifest &k : m.kernels) {
    os << "kernel " << k.name << " " << k.blockM << " " << k.blockN << " "
       << k.numWarps << " " << k.numStages << " " << k.group << " " << k.splitKv
       << " " << k.kind << " " << k.threadsPerBlock << " "
       << k.dynamicSharedMemoryBytes << " " << k.params.size() << "\n";
    if (const KernelManifest::SplitRule &r = k.splitRule; r.maxSplits > 0)
      os << "split " << r.maxSplits << " " << r.blockM << " " << r.blockN << " "
         << r.group << " " << r.programsPerSm << " " << r.minKeys << " "
         << r.numSms << "\n";
    if (k.skipPadding) // an append whose -1 pages are padding
      os << "skip-padding\n";
    for (const KernelParam &p : k.params) {
      os << "param " << p.name << " " << p.kind << " " << p.elementType << " "
         << (p.access.empty() ? "-" : p.access) << " " << p.shape.size();
      for (const std::string &d : p.shape)
        os << " " << d;
      os << "\n";
      if (p.kind == "tensor_maps")
        os << "maps " << p.mapsJson << "\n";
    }
  }
  // The compiler's diagnostics: severity and the byte counts of location
  // and message, then both.
  os << "diagnostics " << m.diagnostics.size() << "\n";
  for (const CompilerDiagnostic &d : m.diagnostics)
    os << "diagnostic " << static_cast<int>(d.severity) << " "
       << d.location.size() << " " << d.message.size() << "\n"
       << d.location << d.message << "\n";
  os << "bytes " << m.ptx.size() << "\n" << m.ptx;
  return s;
}

/// Reads what serialize wrote; false on anything else.
bool deserialize(llvm::StringRef text, PtxModule &m) {
  auto line = [&](llvm::SmallVectorImpl<llvm::StringRef> &fields,
                  llvm::StringRef tag) {
    auto [first, rest] = text.split('\n');
    if (first.size() == text.size())
      return false;
    text = rest;
    fields.clear();
    first.split(fields, ' ');
    return !fields.empty() && fields[0] == tag;
  };
  auto number = [](llvm::StringRef field, int64_t &value) {
    return !field.getAsInteger(10, value);
  };
  llvm::SmallVector<llvm::StringRef, 16> f;
  int64_t count = 0;
  if (!line(f, "chip") || f.size() != 2)
    return false;
  m.chip = f[1].str();
  if (!line(f, "image") || f.size() != 2 || (f[1] != "ptx" && f[1] != "llvm"))
    return false;
  m.image = f[1] == "llvm" ? DeviceImage::LlvmIR : DeviceImage::Ptx;
  int64_t indexBits = 0;
  if (!line(f, "index-bits") || f.size() != 2 || !number(f[1], indexBits) ||
      (indexBits != 32 && indexBits != 64))
    return false;
  m.indexBits = static_cast<int>(indexBits);
  if (!line(f, "kernels") || f.size() != 2 || !number(f[1], count) ||
      count < 1 || count > 16)
    return false;
  m.kernels.assign(count, KernelManifest());
  for (KernelManifest &k : m.kernels) {
    int64_t params = 0;
    if (!line(f, "kernel") || f.size() != 12 || !number(f[2], k.blockM) ||
        !number(f[3], k.blockN) || !number(f[4], k.numWarps) ||
        !number(f[5], k.numStages) || !number(f[6], k.group) ||
        !number(f[7], k.splitKv) || !number(f[9], k.threadsPerBlock) ||
        !number(f[10], k.dynamicSharedMemoryBytes) || !number(f[11], params) ||
        params < 0 || params > 64)
      return false;
    k.name = f[1].str();
    k.kind = f[8].str();
    // A run-time split's rule (its attention and merge kernels).
    if (text.starts_with("split ")) {
      KernelManifest::SplitRule &r = k.splitRule;
      if (!line(f, "split") || f.size() != 8 || !number(f[1], r.maxSplits) ||
          !number(f[2], r.blockM) || !number(f[3], r.blockN) ||
          !number(f[4], r.group) || !number(f[5], r.programsPerSm) ||
          !number(f[6], r.minKeys) || !number(f[7], r.numSms) ||
          r.maxSplits < 1)
        return false;
    }
    if (text.starts_with("skip-padding\n")) {
      if (!line(f, "skip-padding") || f.size() != 1)
        return false;
      k.skipPadding = true;
    }
    k.params.assign(params, KernelParam());
    for (KernelParam &p : k.params) {
      int64_t rank = 0;
      if (!line(f, "param") || f.size() < 6 || !number(f[5], rank) ||
          rank < 0 || f.size() != static_cast<size_t>(6 + rank))
        return false;
      p.name = f[1].str();
      p.kind = f[2].str();
      p.elementType = f[3].str();
      p.access = f[4] == "-" ? "" : f[4].str();
      for (int64_t d = 0; d < rank; ++d)
        p.shape.push_back(f[6 + d].str());
      if (p.kind == "tensor_maps") {
        auto [first, rest] = text.split('\n');
        if (first.size() == text.size() || !first.consume_front("maps "))
          return false;
        p.mapsJson = first.str();
        text = rest;
      }
    }
  }
  if (!line(f, "diagnostics") || f.size() != 2 || !number(f[1], count) ||
      count < 0 || count > 4096)
    return false;
  m.diagnostics.assign(count, CompilerDiagnostic());
  for (CompilerDiagnostic &d : m.diagnostics) {
    int64_t severity = 0, locationBytes = 0, messageBytes = 0;
    if (!line(f, "diagnostic") || f.size() != 4 || !number(f[1], severity) ||
        severity < 0 || severity > 3 || !number(f[2], locationBytes) ||
        !number(f[3], messageBytes) || locationBytes < 0 || messageBytes < 0 ||
        static_cast<uint64_t>(locationBytes) + messageBytes + 1 > text.size() ||
        text[locationBytes + messageBytes] != '\n')
      return false;
    d.severity = static_cast<CompilerDiagnostic::Severity>(severity);
    d.location = text.take_front(locationBytes).str();
    d.message = text.substr(locationBytes, messageBytes).str();
    text = text.drop_front(locationBytes + messageBytes + 1);
  }
  int64_t bytes = 0;
  if (!line(f, "bytes") || f.size() != 2 || !number(f[1], bytes) || bytes < 0 ||
      static_cast<size_t>(bytes) != text.size())
    return false;
  m.ptx = text.str();
  return true;
}

constexpr llvm::StringLiteral kMagic = "kvattn-kernel-cache";

} // namespace

std::optional<KernelCache> KernelCache::fromEnvironment() {
  if (const char *dir = std::getenv("KVATTN_CACHE_DIR"); dir && *dir) {
    if (llvm::StringRef(dir) == "off")
      return std::nullopt;
    return KernelCache(dir);
  }
  llvm::SmallString<256> path;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    path = xdg;
  else if (const char *home = std::getenv("HOME"); home && *home)
    llvm::sys::path::append(path, home, ".cache");
  else
    return std::nullopt;
  llvm::sys::path::append(path, "kvattn");
  return KernelCache(path.str().str());
}

std::string KernelCache::key(mlir::ModuleOp module, const PtxOptions &options) {
  const std::string libdevice = mlir::kvattn::findLibdevice(options.libdevice);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << kMagic << " " << kKernelCacheFormat << "\n"
     << "compiler " << KVATTN_COMPILER_HASH << "\n"
     << "llvm " << LLVM_VERSION_STRING << "\n"
     << "manifest " << kManifestVersion << "\n"
     << "libdevice " << fileHash(libdevice) << "\n"
     << "chip " << options.chip << "\n"
     << "features " << options.features << "\n"
     << "tile " << options.blockM << " " << options.blockN << " "
     << options.numWarps << " " << options.numStages << "\n"
     << "pack-gqa " << options.packGqa << "\n"
     << "split " << options.splitKv << " " << options.numSms << "\n"
     << "tensor-cores " << options.tensorCores << "\n"
     << "producer-warpgroup " << options.producerWarpgroup << "\n"
     << "lazy-rescale " << options.lazyRescale << "\n"
     << "ping-pong " << options.pingPong << "\n"
     << "intra-warpgroup-overlap " << options.intraWarpgroupOverlap << "\n"
     << "two-value-stages " << options.twoValueStages << "\n"
     << "heaviest-first " << options.heaviestFirst << "\n"
     << "device-validation " << options.deviceValidation << "\n"
     << "fix-upper-left-appends " << options.fixUpperLeftAppends << "\n"
     << "index-bits " << options.indexBitwidth << "\n"
     << "image " << imageName(options.image) << "\n"
     << "llvm-opt " << options.llvmOptLevel << "\n"
     << "llvm-pipeline "
     << (options.llvmPipeline == LlvmPipeline::Kvattn ? "kvattn" : "standard")
     << "\n"
     << "ir\n";
  mlir::OpPrintingFlags flags;
  flags.enableDebugInfo(false);
  module->print(os, flags);
  return sha256(text);
}

std::string KernelCache::pathOf(const std::string &key) const {
  llvm::SmallString<256> path(directory_);
  llvm::sys::path::append(path, key + ".kvc");
  return path.str().str();
}

KernelCache::Lookup KernelCache::lookup(const std::string &key,
                                        PtxModule &result) const {
  // Only a regular file of a plausible size is read: a FIFO, a device or a
  // huge file there is no entry and is replaced (store renames over it).
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  switch (readRegularFile(pathOf(key), kMaxEntryBytes, buffer)) {
  case Read::Ok:
    break;
  case Read::Missing:
  case Read::Failed:
    return Lookup::Miss;
  case Read::NotRegular:
  case Read::TooLarge:
    return Lookup::Corrupt;
  }
  // Header: magic and format, the key, the payload's checksum.
  llvm::StringRef text = buffer->getBuffer();
  llvm::StringRef magic, keyLine, sumLine;
  std::tie(magic, text) = text.split('\n');
  std::tie(keyLine, text) = text.split('\n');
  std::tie(sumLine, text) = text.split('\n');
  if (magic != (kMagic + " " + llvm::Twine(kKernelCacheFormat)).str() ||
      keyLine != "key " + key || sumLine != "sha256 " + sha256(text))
    return Lookup::Corrupt;
  PtxModule entry;
  if (!deserialize(text, entry))
    return Lookup::Corrupt;
  result = std::move(entry);
  return Lookup::Hit;
}

Status KernelCache::store(const std::string &key,
                          const PtxModule &module) const {
  if (std::error_code ec = llvm::sys::fs::create_directories(directory_))
    return Status::error("cannot create the kernel cache directory '" +
                         directory_ + "': " + ec.message());
  std::string payload = serialize(module);
  int fd = -1;
  llvm::SmallString<256> temporary;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          pathOf(key) + ".%%%%%%%%.tmp", fd, temporary))
    return Status::error("cannot write in the kernel cache directory '" +
                         directory_ + "': " + ec.message());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << kMagic << " " << kKernelCacheFormat << "\n"
       << "key " << key << "\n"
       << "sha256 " << sha256(payload) << "\n"
       << payload;
    os.close();
    if (os.has_error()) {
      std::string why = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(temporary);
      return Status::error("writing the kernel cache entry '" +
                           temporary.str().str() + "' failed: " + why);
    }
  }
  // Atomic: a concurrent reader sees the old entry or the new one, never a
  // part; of two writers of one key the last rename wins (both are whole).
  if (std::error_code ec = llvm::sys::fs::rename(temporary, pathOf(key))) {
    llvm::sys::fs::remove(temporary);
    return Status::error("cannot rename '" + temporary.str().str() +
                         "' into the kernel cache: " + ec.message());
  }
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
