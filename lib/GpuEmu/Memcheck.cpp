//===- Memcheck.cpp - out-of-bounds accesses ------------------------------===//
//
// Every global access must fall inside one of the launch's buffers (the
// allocation a pointer parameter points into) and every shared access
// inside the launch's shared memory; a miss is reported with the nearest
// buffer.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

const Buffer *Launch::findBuffer(uint64_t address, uint64_t size) const {
  for (const Buffer &b : buffers_)
    if (address >= b.base && address + size <= b.base + b.bytes &&
        address + size >= address)
      return &b;
  return nullptr;
}

std::string Launch::describeMiss(uint64_t address, uint64_t size) const {
  const Buffer *nearest = nullptr;
  uint64_t distance = ~uint64_t(0);
  for (const Buffer &b : buffers_) {
    uint64_t d = address < b.base ? b.base - address
                 : address + size > b.base + b.bytes
                     ? address + size - (b.base + b.bytes)
                     : 0;
    if (d < distance) {
      distance = d;
      nearest = &b;
    }
  }
  if (!nearest)
    return "the launch has no buffers";
  std::string s = "in no buffer of the launch; the nearest, parameter " +
                  std::to_string(nearest->param) + " [0x" +
                  llvm::utohexstr(nearest->base) + ", +" +
                  std::to_string(nearest->bytes) + " bytes), ";
  if (address < nearest->base)
    return s + "starts " + std::to_string(distance) + " bytes above it";
  if (address >= nearest->base + nearest->bytes)
    return s + "ends " +
           std::to_string(address - (nearest->base + nearest->bytes)) +
           " bytes below it";
  return s + "ends " + std::to_string(distance) +
         " bytes before the access does";
}

void Launch::access(uint64_t address, uint64_t size, uint32_t siteId) {
  Thread &t = thread();
  const Site &site = sites()[siteId];
  bool write = site.op == Op::Store;
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  if (address >= arena && address < arena + Arena::kBytes) {
    uint64_t offset = address - arena;
    if (offset + size > sharedBytes_)
      fault(t, "memcheck: " + kernelName() + ": invalid shared " +
                   (write ? "write" : "read") + " of " + std::to_string(size) +
                   " bytes at shared offset " + std::to_string(offset) +
                   " by " + where(t) + ", at " + site.describe() +
                   ": the launch has " + std::to_string(sharedBytes_) +
                   " bytes of shared memory (" +
                   std::to_string(module_.staticSharedBytes) + " static)");
    checkShared(t, offset, size, write, siteId);
    record(t, address, size, siteId, true);
    return;
  }
  if (address >= t.stackLo && address < t.stackHi)
    return; // the thread's own stack: local memory
  if (!findBuffer(address, size))
    fault(t, "memcheck: " + kernelName() + ": invalid global " +
                 (write ? "write" : "read") + " of " + std::to_string(size) +
                 " bytes at 0x" + llvm::utohexstr(address) + " by " + where(t) +
                 ", at " + site.describe() + ": " +
                 describeMiss(address, size));
  record(t, address, size, siteId, false);
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir
