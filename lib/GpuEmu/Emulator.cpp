//===- Emulator.cpp - the emulated GPU's public face ----------------------===//

#include "kvattn/GpuEmu/Emulator.h"

#include "Internal.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace mlir {
namespace kvattn {
namespace emu {

struct Emulator::State {
  std::vector<std::unique_ptr<Module>> modules;
  std::map<uint64_t, detail::Allocation> allocations;
  std::vector<LaunchCounters> counters;
  std::vector<std::string> reports;
};

Emulator::Emulator() : state_(new State()) {}
Emulator::~Emulator() = default;

Emulator &Emulator::get() {
  // Never destroyed: JIT code and fibers may outlive static destructors.
  static Emulator *emulator = new Emulator();
  return *emulator;
}

Status parseFaultInjection(const std::string &text, FaultInjection &fault) {
  std::string kind = text.substr(0, text.find(':'));
  std::string index = text.find(':') == std::string::npos
                          ? "0"
                          : text.substr(text.find(':') + 1);
  fault = FaultInjection();
  if (kind == "drop-barrier")
    fault.kind = FaultInjection::DropBarrier;
  else if (kind == "wait-group")
    fault.kind = FaultInjection::WaitGroupPlus;
  else if (kind == "global-offset")
    fault.kind = FaultInjection::GlobalOffset;
  else if (kind == "drop-mbarrier-wait")
    fault.kind = FaultInjection::DropMbarrierWait;
  else if (kind == "drop-wgmma-wait")
    fault.kind = FaultInjection::DropWgmmaWait;
  else if (kind == "drop-fence-proxy")
    fault.kind = FaultInjection::DropFenceProxy;
  else if (kind == "expect-tx")
    fault.kind = FaultInjection::ExpectTx;
  else if (text == "none" || text.empty())
    return Status::ok();
  else
    return Status::error((kind.empty() ? "fault '" + text + "' names no kind"
                                       : "unknown fault '" + kind + "'") +
                         " (expected drop-barrier, wait-group, "
                         "global-offset, drop-mbarrier-wait, drop-wgmma-wait, "
                         "drop-fence-proxy or expect-tx, with an optional :N)");
  char *end = nullptr;
  unsigned long n = std::strtoul(index.c_str(), &end, 10);
  if (index.empty() || !std::isdigit(static_cast<unsigned char>(index[0])) ||
      *end || n > 1000000)
    return Status::error("fault '" + text + "': the index must be a number");
  fault.index = static_cast<unsigned>(n);
  return Status::ok();
}

std::string LaunchCounters::line() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  auto perKv = [&](uint64_t count) {
    if (!kvBlocks)
      os << "n/a";
    else
      os << llvm::format("%.2f", double(count) / double(kvBlocks));
  };
  auto perWarpKv = [&](uint64_t count) {
    if (!kvBlocks || !kvWarpsPerCta)
      os << "n/a";
    else
      os << llvm::format("%.2f",
                         double(count) / double(kvBlocks * kvWarpsPerCta));
  };
  os << "emu: kernel=" << kernel << " grid=" << grid.x << "x" << grid.y << "x"
     << grid.z << " block=" << block.x * block.y * block.z
     << " smem=" << sharedBytes << " ctas=" << ctas
     << " warps_per_cta=" << warpsPerCta << " kv_blocks=" << kvBlocks
     << " kv_warps=" << kvWarpsPerCta << " kv_blocks_max_cta=" << kvBlocksMaxCta
     << " warp_insts=" << threadInsts / 32 << " warp_insts_per_kv_block=";
  perWarpKv(kvThreadInsts / 32);
  os << " mma=" << mma << " mma_per_kv_block=";
  perWarpKv(kvMma);
  os << " ldmatrix=" << ldmatrix << " ldmatrix_per_kv_block=";
  perWarpKv(kvLdmatrix);
  os << " shfl=" << shfl << " shfl_per_kv_block=";
  perWarpKv(kvShfl);
  os << " shared_requests=" << sharedRequests
     << " shared_requests_per_kv_block=";
  perWarpKv(kvSharedRequests);
  os << " bank_conflicts=" << bankConflicts << " bank_conflicts_per_kv_block=";
  perWarpKv(kvBankConflicts);
  os << " barriers=" << barriers << " barriers_per_kv_block=";
  perKv(kvBarriers);
  os << " global_requests=" << globalRequests
     << " global_sectors=" << globalSectors << " global_bytes=" << globalBytes
     << " global_sector_efficiency=";
  if (globalSectors)
    os << llvm::format("%.3f", double(globalBytes) / (32.0 * globalSectors));
  else
    os << "n/a";
  os << " cp_async_bytes=" << cpAsyncBytes;
  if (hopper) {
    auto field = [&](const char *name, uint64_t Warpgroup::*member) {
      os << " " << name << "=";
      for (size_t g = 0; g < warpgroups.size(); ++g)
        os << (g ? "/" : "") << warpgroups[g].*member;
    };
    field("wgmma_per_wg", &Warpgroup::wgmma);
    field("tma_load_bytes_per_wg", &Warpgroup::tmaLoadBytes);
    field("tma_store_bytes_per_wg", &Warpgroup::tmaStoreBytes);
    field("mbarrier_waits_per_wg", &Warpgroup::mbarrierWaits);
    for (auto &[shape, count] : wgmmaShapes)
      os << " wgmma." << shape << "=" << count;
  }
  return s;
}

Status Emulator::loadModule(const std::string &image, Module *&module) {
  std::unique_ptr<Module> loaded;
  KVATTN_RETURN_IF_ERROR(
      detail::loadDeviceModule(image, options_.fault, loaded));
  module = loaded.get();
  state_->modules.push_back(std::move(loaded));
  return Status::ok();
}

void Emulator::unloadModule(Module *module) {
  auto &modules = state_->modules;
  for (auto it = modules.begin(); it != modules.end(); ++it)
    if (it->get() == module) {
      modules.erase(it);
      return;
    }
}

bool Emulator::hasKernel(const Module &module, const std::string &name) const {
  return module.kernels.count(name);
}

int Emulator::kernelParamCount(const Module &module,
                               const std::string &name) const {
  auto it = module.kernels.find(name);
  return it == module.kernels.end()
             ? -1
             : static_cast<int>(it->second.pointerParams.size());
}

Status Emulator::allocate(size_t bytes, uint64_t &address) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void *p = std::aligned_alloc(256, rounded);
  if (!p)
    return Status::error("out of host memory for " + std::to_string(bytes) +
                         " bytes of emulated device memory");
  std::memset(p, 0xFF, rounded); // uninitialised device memory reads as NaN
  address = reinterpret_cast<uint64_t>(p);
  state_->allocations[address] = {address, bytes};
  return Status::ok();
}

Status Emulator::release(uint64_t address) {
  auto it = state_->allocations.find(address);
  if (it == state_->allocations.end())
    return Status::error("0x" + llvm::utohexstr(address) +
                         " is not an allocation of the emulated device");
  std::free(reinterpret_cast<void *>(address));
  state_->allocations.erase(it);
  return Status::ok();
}

Status Emulator::checkRange(uint64_t address, size_t bytes,
                            const std::string &doing) const {
  auto it = state_->allocations.upper_bound(address);
  if (it != state_->allocations.begin()) {
    --it;
    if (address >= it->second.base &&
        address + bytes <= it->second.base + it->second.bytes)
      return Status::ok();
  }
  return Status::error(doing + ": [0x" + llvm::utohexstr(address) + ", +" +
                       std::to_string(bytes) +
                       " bytes) is not inside one allocation of the "
                       "emulated device");
}

size_t Emulator::liveAllocations() const { return state_->allocations.size(); }

Status Emulator::launch(Module &module, const std::string &kernel, Dim3 grid,
                        Dim3 block, unsigned dynamicSharedBytes, void **params,
                        bool *invalidLaunch) {
  if (invalidLaunch)
    *invalidLaunch = true;
  auto it = module.kernels.find(kernel);
  if (it == module.kernels.end())
    return Status::error("the module has no kernel '" + kernel + "'");
  uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (!grid.x || !grid.y || !grid.z || !threads)
    return Status::error("launching '" + kernel + "': empty grid or block");
  if (threads > kMaxThreadsPerBlock || block.z > 64 || grid.y > 65535 ||
      grid.z > 65535)
    return Status::error("launching '" + kernel +
                         "': " + std::to_string(threads) +
                         " threads per block or the grid exceed the limits "
                         "(1024 threads, block z 64, grid y/z 65535)");
  uint64_t shared = dynamicSharedBytes
                        ? module.dynamicSharedOffset + dynamicSharedBytes
                        : module.staticSharedBytes;
  if (shared > kMaxSharedBytes)
    return Status::error("launching '" + kernel +
                         "': " + std::to_string(shared) +
                         " bytes of shared memory exceed the " +
                         std::to_string(kMaxSharedBytes) + " of a block");
  if (invalidLaunch)
    *invalidLaunch = false;
  LaunchCounters counters;
  std::vector<std::string> reports;
  Status s = detail::runLaunch(module, it->second, grid, block,
                               dynamicSharedBytes, params, state_->allocations,
                               options_, counters, reports);
  state_->counters.push_back(counters);
  for (std::string &r : reports)
    state_->reports.push_back(std::move(r));
  return s;
}

std::vector<LaunchCounters> Emulator::takeCounters() {
  std::vector<LaunchCounters> taken;
  taken.swap(state_->counters);
  return taken;
}

std::vector<std::string> Emulator::takeReports() {
  std::vector<std::string> taken;
  taken.swap(state_->reports);
  return taken;
}

} // namespace emu
} // namespace kvattn
} // namespace mlir
