//===- AsyncCopies.cpp - cp.async in flight -------------------------------===//
//
// A cp.async is recorded with its group and lands at the latest point the
// memory model allows: the cp.async.wait_group that must complete it. Until
// then its destination bytes are marked pending, so an early read shows.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

void Launch::cpAsync(Thread &t, const Site &site, uint32_t siteId,
                     const uint64_t *args) {
  uint64_t dst = args[0], src = args[1];
  uint32_t srcBytes =
      site.cpSrcSize ? static_cast<uint32_t>(args[2]) : site.cpBytes;
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  uint64_t offset = dst - arena;
  if (dst < arena || offset + site.cpBytes > sharedBytes_ || dst % site.cpBytes)
    fault(t, "memcheck: " + kernelName() + ": cp.async destination 0x" +
                 llvm::utohexstr(dst) + " by " + where(t) +
                 (dst % site.cpBytes ? " is not aligned to its size"
                                     : " is outside the launch's " +
                                           std::to_string(sharedBytes_) +
                                           " bytes of shared memory") +
                 ", at " + site.describe());
  if (srcBytes > static_cast<uint32_t>(site.cpBytes))
    fault(t, "memcheck: " + kernelName() + ": cp.async src-size " +
                 std::to_string(srcBytes) + " exceeds its copy size " +
                 std::to_string(site.cpBytes) + " (" + where(t) + ", at " +
                 site.describe() + ")");
  if (srcBytes) {
    if (!findBuffer(src, srcBytes))
      fault(t, "memcheck: " + kernelName() + ": invalid global read of " +
                   std::to_string(srcBytes) + " bytes at 0x" +
                   llvm::utohexstr(src) + " by a cp.async of " + where(t) +
                   ", at " + site.describe() + ": " +
                   describeMiss(src, srcBytes));
    record(t, src, srcBytes, siteId, false);
  }
  counters_.cpAsyncBytes += site.cpBytes;
  // The destination is in flight until the wait_group that completes it.
  std::vector<ShadowByte> &bytes = shadow();
  for (uint64_t i = offset; i < offset + site.cpBytes; ++i) {
    ShadowByte &s = bytes[i];
    if (s.generation != generation_) {
      s = ShadowByte();
      s.generation = generation_;
    }
    if (s.pending && uint32_t(s.pending - 1) != t.index)
      hazard("write-after-write", i, t, siteId, s.pending - 1, s.writeSite,
             true);
    else // the copy may land at once: ordered like a write issued now
      checkWriteOrder(s, t, i, siteId);
    s.pending = static_cast<uint16_t>(t.index + 1);
    s.writeSite = siteId;
  }
  t.copies.push_back(
      {reinterpret_cast<uint8_t *>(dst), reinterpret_cast<const uint8_t *>(src),
       static_cast<uint32_t>(site.cpBytes), srcBytes, t.group, siteId});
}

void Launch::landCopies(Thread &t, uint32_t keepGroups) {
  uint32_t limit = t.group >= keepGroups ? t.group - keepGroups : 0;
  std::vector<ShadowByte> &bytes = shadow();
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  auto end = std::stable_partition(
      t.copies.begin(), t.copies.end(),
      [&](const AsyncCopy &c) { return c.group >= limit; });
  for (auto it = end; it != t.copies.end(); ++it) {
    const AsyncCopy &c = *it;
    std::memcpy(c.dst, c.src, c.srcBytes);
    std::memset(c.dst + c.srcBytes, 0, c.bytes - c.srcBytes);
    uint64_t offset = reinterpret_cast<uint64_t>(c.dst) - arena;
    for (uint64_t i = offset; i < offset + c.bytes; ++i)
      if (bytes[i].pending == t.index + 1)
        bytes[i].pending = 0;
    // It lands now: a write by this thread in the current interval.
    checkShared(t, offset, c.bytes, true, c.site);
  }
  t.copies.erase(end, t.copies.end());
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir
