//===- Racecheck.cpp - shared-memory hazards ------------------------------===//
//
// Two accesses to a shared byte by different threads in the same barrier
// interval ("epoch"), at least one a write, and not ordered by a barrier of
// their common warp, are a hazard; so is any access to a cp.async
// destination before its wait_group.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace kvattn {
namespace emu {
namespace detail {

std::vector<ShadowByte> &shadow() {
  static std::vector<ShadowByte> bytes(Arena::kBytes);
  return bytes;
}
void Launch::hazard(const char *kind, uint64_t offset, const Thread &t,
                    uint32_t site, int other, uint32_t otherSite, bool write) {
  ++hazards_;
  if (!hazardsSeen_.insert({kind, site, otherSite}).second)
    return;
  if (hazardsSeen_.size() > kMaxReports) {
    ++hazardsNotShown_;
    return;
  }
  std::string text =
      "racecheck: " + kernelName() + ": " + kind + " hazard at shared offset " +
      std::to_string(offset) + " (address 0x" +
      llvm::utohexstr(reinterpret_cast<uint64_t>(Arena::base()) + offset) +
      "): " + where(t) + (write ? " writes it" : " reads it") + " at " +
      sites()[site].describe() + "; " +
      (other >= 0 ? threadName(static_cast<uint32_t>(other))
                  : std::string("another thread")) +
      " " +
      (std::string(kind) == "read-after-write" ||
               std::string(kind) == "write-after-write"
           ? "wrote"
       : std::string(kind) == "write-after-read" ? "read"
                                                 : "copies to") +
      " it at " + sites()[otherSite].describe() +
      ", with no barrier in between";
  if (options_.printReports)
    llvm::errs() << text << "\n";
  reports_.push_back(std::move(text));
}

bool Launch::unordered(const Thread &t, uint32_t accessEpoch, uint32_t other,
                       uint32_t otherSyncs, uint32_t otherClock) const {
  const uint32_t warp = t.index / 32;
  return accessEpoch == epoch_ && other != t.index &&
         !(other / 32 == warp && otherSyncs != warpSyncs_[warp]) &&
         !clockOrdered(t.index, other, otherClock);
}

void Launch::release(uint32_t t, std::vector<uint32_t> &into) {
  if (clocks_.empty())
    return;
  std::vector<uint32_t> &mine = clocks_[t];
  if (into.size() < mine.size())
    into.resize(mine.size(), 0);
  for (size_t i = 0; i < mine.size(); ++i)
    into[i] = std::max(into[i], mine[i]);
  ++mine[t];
}

void Launch::acquire(uint32_t t, const std::vector<uint32_t> &from) {
  if (clocks_.empty())
    return;
  std::vector<uint32_t> &mine = clocks_[t];
  for (size_t i = 0; i < from.size() && i < mine.size(); ++i)
    mine[i] = std::max(mine[i], from[i]);
}

void Launch::checkWriteOrder(const ShadowByte &s, const Thread &t,
                             uint64_t offset, uint32_t site) {
  const uint32_t warp = t.index / 32;
  if (s.wgmmaReads)
    hazard("async-source-in-flight", offset, t, site, s.wgmmaIssuer,
           s.wgmmaSite, true);
  else if (unordered(t, s.writeEpoch, s.writer, s.writeSync, s.writeClock))
    hazard("write-after-write", offset, t, site, s.writer, s.writeSite, true);
  else if (s.readEpoch == epoch_ &&
           (s.multipleReaders
                ? !(s.readersInOneWarp && s.reader / 32 == warp &&
                    s.readSync != warpSyncs_[warp]) &&
                      !clockOrdered(t.index, s.lastReader, s.lastReadClock)
                : unordered(t, s.readEpoch, s.reader, s.readSync,
                            s.lastReadClock)))
    hazard("write-after-read", offset, t, site,
           s.reader != t.index ? int(s.reader) : -1, s.readSite, true);
}

void Launch::checkShared(Thread &t, uint64_t offset, uint64_t size, bool write,
                         uint32_t site) {
  std::vector<ShadowByte> &bytes = shadow();
  for (uint64_t i = offset; i < offset + size; ++i) {
    ShadowByte &s = bytes[i];
    if (s.generation != generation_) {
      s = ShadowByte();
      s.generation = generation_;
    }
    if (s.pending) {
      hazard(s.pendingTma ? "TMA-in-flight" : "cp.async-in-flight", i, t, site,
             s.pending - 1, s.writeSite, write);
      continue;
    }
    const uint32_t warp = t.index / 32, syncs = warpSyncs_[warp];
    if (write) {
      checkWriteOrder(s, t, i, site);
      s.writeEpoch = epoch_;
      s.writer = static_cast<uint16_t>(t.index);
      s.writeSite = site;
      s.writeSync = syncs;
      s.writeClock = ownClock(t.index);
      s.genericWrite = true;
      s.writeFence = fences_.empty() ? 0 : fences_[t.index];
    } else {
      if (unordered(t, s.writeEpoch, s.writer, s.writeSync, s.writeClock))
        hazard("read-after-write", i, t, site, s.writer, s.writeSite, false);
      if (s.readEpoch != epoch_) {
        s.readEpoch = epoch_;
        s.reader = static_cast<uint16_t>(t.index);
        s.readSite = site;
        s.readSync = syncs;
        s.multipleReaders = false;
        s.readersInOneWarp = true;
      } else if (s.reader != t.index) {
        s.multipleReaders = true;
        s.readersInOneWarp = s.readersInOneWarp && s.reader / 32 == warp;
        s.readSync = std::max(s.readSync, syncs);
      }
      s.lastReader = static_cast<uint16_t>(t.index);
      s.lastReadClock = ownClock(t.index);
    }
  }
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir
