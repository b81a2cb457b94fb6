//===- Hopper.cpp - sm_90a: mbarriers, TMA, wgmma, named barriers ---------===//
//
// The sm_90a instructions of the Hopper lowering (docs/gpu-lowering.md,
// "Hopper"), with the PTX ISA's semantics and the same checks as the rest:
//
//   mbarrier    init / arrive / arrive.expect_tx / expect_tx / complete_tx
//               and try_wait.parity / test_wait.parity. A wait whose phase
//               has not completed blocks the thread; when nothing can
//               progress (after every TMA in flight has landed) the launch
//               is a deadlock naming the barrier and the waiting warps.
//   TMA         cp.async.bulk.tensor tile mode, 1-5D, from the tensor maps
//               of cuTensorMapEncodeTiled (TensorMap below): loads land at
//               the latest point allowed (when no thread can progress
//               without them) and complete_tx their mbarrier; their
//               destination is in flight until then. Stores read shared
//               memory at the bulk wait_group that completes them.
//   wgmma       fence / mma_async (SS, RS) / commit_group / wait_group per
//               warpgroup: operands from the matrix descriptors, sources in
//               flight (a write to them is a hazard) and results tracked
//               until the wait_group that retires them.
//   others      fence.proxy.async (the generic-proxy writes an async read
//               needs), named barriers (bar.sync / bar.arrive id, n),
//               setmaxnreg (the register budget of the CTA), elect.sync.
//
// Ordering: besides the CTA barrier intervals of Racecheck.cpp, threads
// carry vector clocks in kernels that use mbarriers or named barriers: an
// arrive releases, a successful wait acquires; an arrival on a named
// barrier releases and its bar.sync participants acquire at completion; a
// TMA load releases its issuer's clock at issue when it lands.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
namespace kvattn {
namespace emu {

//===----------------------------------------------------------------------===//
// Tensor maps
//===----------------------------------------------------------------------===//

/// The emulator's encoding inside the driver's 128-byte opaque CUtensorMap.
struct TensorMap {
  uint32_t magic;
  uint8_t rank, dataType, elementBytes, interleave, swizzle, oobFill, l2;
  uint8_t pad0;
  uint64_t address;
  uint64_t dims[5];
  uint64_t strides[5]; ///< bytes; strides[0] = the element size
  uint16_t box[5];
  uint8_t elementStrides[5];
};

namespace {

constexpr uint32_t kTensorMapMagic = 0x4d54564bu; // "KVTM"

static_assert(sizeof(TensorMap) <= 128, "a CUtensorMap is 128 bytes");

int elementBytesOf(int dataType) {
  switch (dataType) {
  case 0: // UINT8
    return 1;
  case 1: // UINT16
  case 6: // FLOAT16
  case 9: // BFLOAT16
    return 2;
  case 2:  // UINT32
  case 3:  // INT32
  case 7:  // FLOAT32
  case 10: // FLOAT32_FTZ
  case 11: // TFLOAT32
  case 12: // TFLOAT32_FTZ
    return 4;
  case 4: // UINT64
  case 5: // INT64
  case 8: // FLOAT64
    return 8;
  default:
    return 0;
  }
}

bool isFloatType(int dataType) { return dataType >= 6 && dataType <= 12; }

} // namespace

Status encodeTensorMapTiled(void *tensorMap, int dataType, unsigned rank,
                            void *globalAddress, const uint64_t *globalDim,
                            const uint64_t *globalStrides,
                            const uint32_t *boxDim,
                            const uint32_t *elementStrides, int interleave,
                            int swizzle, int l2Promotion, int oobFill) {
  auto bad = [](const std::string &why) {
    return Status::error("cuTensorMapEncodeTiled: " + why);
  };
  if (!tensorMap)
    return bad("tensorMap is null");
  if (reinterpret_cast<uintptr_t>(tensorMap) % 64)
    return bad("tensorMap must be 64-byte aligned");
  int bytes = elementBytesOf(dataType);
  if (!bytes)
    return bad("unknown tensorDataType " + std::to_string(dataType));
  if (interleave < 0 || interleave > 2)
    return bad("unknown interleave " + std::to_string(interleave));
  if (swizzle < 0 || swizzle > 3)
    return bad("unknown swizzle " + std::to_string(swizzle) +
               " (0 none, 1 32B, 2 64B, 3 128B)");
  if (l2Promotion < 0 || l2Promotion > 3)
    return bad("unknown l2Promotion " + std::to_string(l2Promotion));
  if (oobFill < 0 || oobFill > 1)
    return bad("unknown oobFill " + std::to_string(oobFill));
  if (oobFill == 1 && !isFloatType(dataType))
    return bad("oobFill NAN_REQUEST_ZERO_FMA needs a floating-point type");
  if (rank < 1 || rank > 5 || (interleave && rank < 3))
    return bad("tensorRank " + std::to_string(rank) +
               " is outside [1, 5] (3-5 with interleave)");
  if (!globalAddress || !globalDim || !boxDim || !elementStrides ||
      (rank > 1 && !globalStrides))
    return bad("a required array or the global address is null");
  uintptr_t address = reinterpret_cast<uintptr_t>(globalAddress);
  if (address % (interleave == 2 ? 32 : 16))
    return bad("globalAddress must be " +
               std::to_string(interleave == 2 ? 32 : 16) + "-byte aligned");
  TensorMap map = {};
  map.magic = kTensorMapMagic;
  map.rank = static_cast<uint8_t>(rank);
  map.dataType = static_cast<uint8_t>(dataType);
  map.elementBytes = static_cast<uint8_t>(bytes);
  map.interleave = static_cast<uint8_t>(interleave);
  map.swizzle = static_cast<uint8_t>(swizzle);
  map.oobFill = static_cast<uint8_t>(oobFill);
  map.l2 = static_cast<uint8_t>(l2Promotion);
  map.address = address;
  map.strides[0] = bytes;
  for (unsigned i = 0; i < rank; ++i) {
    std::string d = "[" + std::to_string(i) + "]";
    if (globalDim[i] == 0 || globalDim[i] > (uint64_t(1) << 32))
      return bad("globalDim" + d + " must be in [1, 2^32]");
    if (boxDim[i] == 0 || boxDim[i] > 256)
      return bad("boxDim" + d + " must be in [1, 256]");
    if (elementStrides[i] == 0 || elementStrides[i] > 8)
      return bad("elementStrides" + d + " must be in [1, 8]");
    map.dims[i] = globalDim[i];
    map.box[i] = static_cast<uint16_t>(boxDim[i]);
    map.elementStrides[i] = static_cast<uint8_t>(elementStrides[i]);
    if (i > 0) {
      uint64_t stride = globalStrides[i - 1];
      std::string s = "globalStrides[" + std::to_string(i - 1) + "]";
      if (stride % (interleave == 2 ? 32 : 16))
        return bad(s + " (" + std::to_string(stride) +
                   ") must be a multiple of " +
                   std::to_string(interleave == 2 ? 32 : 16));
      if (stride >= (uint64_t(1) << 40))
        return bad(s + " must be below 2^40");
      // Strides need not grow with the dimension: a permuted view ({D, H,
      // S, B} over a [B, S, H, D] tensor, as FlashAttention-3's maps and
      // the sm_90a lowering's query map are) is encoded by the driver.
      map.strides[i] = stride;
    }
  }
  if (interleave == 0) {
    uint64_t inner = uint64_t(boxDim[0]) * bytes;
    if (inner % 16)
      return bad("boxDim[0] * element size (" + std::to_string(inner) +
                 " bytes) must be a multiple of 16 bytes");
    static const unsigned spans[4] = {0, 32, 64, 128};
    if (swizzle && inner > spans[swizzle])
      return bad("boxDim[0] * element size (" + std::to_string(inner) +
                 " bytes) exceeds the swizzle span (" +
                 std::to_string(spans[swizzle]) + " bytes)");
  }
  std::memset(tensorMap, 0, 128);
  std::memcpy(tensorMap, &map, sizeof(map));
  return Status::ok();
}

namespace detail {

namespace {

std::string hex(uint64_t v) { return "0x" + llvm::utohexstr(v); }

unsigned swizzleSpan(int tensorMapSwizzle) {
  static const unsigned spans[4] = {0, 32, 64, 128};
  return spans[tensorMapSwizzle & 3];
}

} // namespace

//===----------------------------------------------------------------------===//
// mbarriers
//===----------------------------------------------------------------------===//

Mbarrier &Launch::mbarrierAt(Thread &t, uint64_t address, const Site &site,
                             uint64_t &offset, bool mustExist) {
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  offset = address - arena;
  if (address < arena || offset + 8 > sharedBytes_ || address % 8)
    fault(t, "memcheck: " + kernelName() + ": mbarrier address " +
                 hex(address) + " by " + where(t) +
                 (address % 8 ? " is not 8-byte aligned"
                              : " is outside the launch's " +
                                    std::to_string(sharedBytes_) +
                                    " bytes of shared memory") +
                 ", at " + site.describe());
  auto it = mbarriers_.find(offset);
  if (it == mbarriers_.end() && mustExist)
    fault(t, kernelName() + ": " + where(t) +
                 " uses the mbarrier at shared "
                 "offset " +
                 std::to_string(offset) +
                 ", which no mbarrier.init initialised, at " + site.describe());
  return mbarriers_[offset];
}

void Launch::wakeWaiters(uint64_t offset) {
  const Mbarrier &b = mbarriers_[offset];
  for (Thread &w : threads_)
    if (w.state == State::AtMbarrier && w.waitBarrier == offset &&
        (b.phase & 1) != w.waitParity)
      w.state = State::Runnable;
}

void Launch::mbarrierArrive(Mbarrier &b, uint64_t offset, uint32_t count,
                            int64_t tx, const std::vector<uint32_t> *clock) {
  b.tx += tx;
  b.pending -= count;
  if (clock) {
    if (b.clock.size() < clock->size())
      b.clock.resize(clock->size(), 0);
    for (size_t i = 0; i < clock->size(); ++i)
      b.clock[i] = std::max(b.clock[i], (*clock)[i]);
  }
  if (b.pending == 0 && b.tx == 0) {
    b.completed = std::move(b.clock);
    b.clock.clear();
    ++b.phase;
    b.pending = b.expected;
    wakeWaiters(offset);
  }
}

std::string Launch::describeWait(const Thread &t) const {
  auto it = mbarriers_.find(t.waitBarrier);
  std::string s = "waits on the mbarrier at shared offset " +
                  std::to_string(t.waitBarrier) + " for the phase of parity " +
                  std::to_string(t.waitParity);
  if (it == mbarriers_.end())
    return s;
  const Mbarrier &b = it->second;
  return s + " (its current phase " + std::to_string(b.phase) + ", parity " +
         std::to_string(b.phase & 1) + ", still expects " +
         std::to_string(b.pending) + " of " + std::to_string(b.expected) +
         " arrivals and a tx-count of " + std::to_string(b.tx) +
         " bytes), at " + sites()[t.site].describe();
}

//===----------------------------------------------------------------------===//
// TMA
//===----------------------------------------------------------------------===//

namespace {

/// The elements of a map's box a TMA copy moves (every elementStrides-th
/// along each dimension).
uint64_t boxElements(const TensorMap &map) {
  uint64_t elements = 1;
  for (int i = 0; i < map.rank; ++i)
    elements *=
        (map.box[i] + map.elementStrides[i] - 1) / map.elementStrides[i];
  return elements;
}

/// The shared-memory alignment a TMA copy with this map's swizzle needs.
uint64_t sharedAlignment(const TensorMap &map) {
  unsigned span = swizzleSpan(map.swizzle);
  return span ? 8 * span : 128;
}

/// Reads and checks the tensor map at `address` (device memory).
bool readTensorMap(uint64_t address, TensorMap &map, std::string &why) {
  std::memcpy(&map, reinterpret_cast<const void *>(address), sizeof(map));
  if (map.magic != kTensorMapMagic) {
    why = "is not a tensor map that cuTensorMapEncodeTiled wrote";
    return false;
  }
  if (map.interleave) {
    why = "uses an interleaved layout, which the emulated GPU does not model";
    return false;
  }
  unsigned span = swizzleSpan(map.swizzle);
  if (span && uint64_t(map.box[0]) * map.elementBytes != span) {
    why = "has a swizzled box whose inner dimension (" +
          std::to_string(map.box[0] * map.elementBytes) +
          " bytes) is narrower than the swizzle span (" + std::to_string(span) +
          " bytes), which the emulated GPU does not model";
    return false;
  }
  return true;
}

/// The box's elements in shared-memory order (dimension 0 fastest), each
/// with its global coordinates.
template <typename F>
void forEachBoxElement(const TensorMap &map, const int32_t *coords, F f) {
  int64_t count[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < map.rank; ++i)
    count[i] = (map.box[i] + map.elementStrides[i] - 1) / map.elementStrides[i];
  uint64_t index = 0;
  for (int64_t e4 = 0; e4 < count[4]; ++e4)
    for (int64_t e3 = 0; e3 < count[3]; ++e3)
      for (int64_t e2 = 0; e2 < count[2]; ++e2)
        for (int64_t e1 = 0; e1 < count[1]; ++e1)
          for (int64_t e0 = 0; e0 < count[0]; ++e0) {
            int64_t e[5] = {e0, e1, e2, e3, e4};
            bool inside = true;
            uint64_t global = map.address;
            for (int i = 0; i < map.rank; ++i) {
              int64_t x = int64_t(coords[i]) + e[i] * map.elementStrides[i];
              if (x < 0 || uint64_t(x) >= map.dims[i])
                inside = false;
              else
                global += uint64_t(x) * map.strides[i];
            }
            f(index++, inside, global);
          }
}

} // namespace

void Launch::readTmaOperand(Thread &t, const Site &site, uint64_t mapAddress,
                            const char *what, TensorMap &map) {
  const Allocation *mapAlloc = nullptr;
  for (auto &[base, a] : allocations_)
    if (mapAddress >= a.base && mapAddress + 128 <= a.base + a.bytes)
      mapAlloc = &a;
  if (!mapAlloc || mapAddress % 64)
    fault(t, "memcheck: " + kernelName() + ": the tensor map at " +
                 hex(mapAddress) + " of " + where(t) +
                 (mapAlloc ? " is not 64-byte aligned"
                           : " is not inside device memory") +
                 ", at " + site.describe());
  std::string why;
  if (!readTensorMap(mapAddress, map, why))
    fault(t, kernelName() + ": the tensor map at " + hex(mapAddress) + " " +
                 why + " (" + where(t) + ", at " + site.describe() + ")");
  if (map.rank != site.tmaDims)
    fault(t, kernelName() + ": a " + std::to_string(site.tmaDims) + "D TMA " +
                 what + " uses a tensor map of rank " +
                 std::to_string(map.rank) + " (" + where(t) + ", at " +
                 site.describe() + ")");
}

void Launch::tmaLoad(Thread &t, const Site &site, uint32_t siteId,
                     uint64_t *args) {
  uint64_t dst = args[0], barrier = args[1], mapAddress = args[2];
  TensorMap map;
  readTmaOperand(t, site, mapAddress, "copy", map);
  int32_t coords[5] = {};
  for (int i = 0; i < map.rank; ++i)
    coords[i] = static_cast<int32_t>(args[3 + i]);
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  unsigned span = swizzleSpan(map.swizzle);
  uint64_t align = sharedAlignment(map);
  uint64_t elements = boxElements(map);
  uint64_t bytes = elements * map.elementBytes;
  uint64_t offset = dst - arena;
  if (dst < arena || offset + bytes > sharedBytes_ || offset % align)
    fault(t, "memcheck: " + kernelName() + ": TMA destination " + hex(dst) +
                 " (" + std::to_string(bytes) + " bytes) by " + where(t) +
                 (dst >= arena && offset + bytes <= sharedBytes_
                      ? " is not " + std::to_string(align) +
                            "-byte aligned (the emulator requires the box to "
                            "start on a whole swizzle pattern)"
                      : " is outside the launch's " +
                            std::to_string(sharedBytes_) +
                            " bytes of shared memory") +
                 ", at " + site.describe());
  uint64_t barrierOffset;
  mbarrierAt(t, barrier, site, barrierOffset);
  TmaOp op;
  op.load = true;
  op.issuer = t.index;
  op.site = siteId;
  op.barrier = barrierOffset;
  op.bytes = bytes;
  op.elementBytes = map.elementBytes;
  op.smem.reserve(elements);
  op.data.resize(bytes);
  std::vector<ShadowByte> &shadowBytes = shadow();
  forEachBoxElement(map, coords, [&](uint64_t e, bool inside, uint64_t global) {
    uint64_t s = swizzleOffset(offset + e * map.elementBytes, span);
    op.smem.push_back(static_cast<uint32_t>(s));
    uint8_t *out = op.data.data() + e * map.elementBytes;
    if (inside) {
      const Allocation *a = nullptr;
      auto it = allocations_.upper_bound(global);
      if (it != allocations_.begin() &&
          global + map.elementBytes <=
              std::prev(it)->second.base + std::prev(it)->second.bytes)
        a = &std::prev(it)->second;
      if (!a)
        fault(t, "memcheck: " + kernelName() + ": a TMA load of " + where(t) +
                     " reads " + hex(global) +
                     ", outside device memory (the tensor map's global "
                     "address or strides are wrong), at " +
                     site.describe());
      std::memcpy(out, reinterpret_cast<const void *>(global),
                  map.elementBytes);
    } else if (map.oobFill == 1) {
      // NaN of the element type.
      if (map.elementBytes == 2) {
        uint16_t nan = 0x7fff;
        std::memcpy(out, &nan, 2);
      } else if (map.elementBytes == 4) {
        uint32_t nan = 0x7fffffffu;
        std::memcpy(out, &nan, 4);
      } else {
        uint64_t nan = 0x7fffffffffffffffull;
        std::memcpy(out, &nan, 8);
      }
    } else {
      std::memset(out, 0, map.elementBytes);
    }
    for (uint64_t i = s; i < s + map.elementBytes; ++i) {
      ShadowByte &b = shadowBytes[i];
      if (b.generation != generation_) {
        b = ShadowByte();
        b.generation = generation_;
      }
      // Two copies in flight to one byte are unordered, whoever issued them.
      if (b.pending)
        hazard("write-after-write", i, t, siteId, b.pending - 1, b.writeSite,
               true);
      else
        checkWriteOrder(b, t, i, siteId);
      b.pending = static_cast<uint16_t>(t.index + 1);
      b.pendingTma = true;
      b.writeSite = siteId;
    }
  });
  if (!clocks_.empty())
    op.clock = clocks_[t.index];
  counters_.hopper = true;
  counters_.warpgroups[t.index / 128].tmaLoadBytes += bytes;
  tmaLoads_.push_back(std::move(op));
}

void Launch::landTma(TmaOp &op) {
  std::vector<ShadowByte> &bytes = shadow();
  uint8_t *arena = Arena::base();
  for (size_t e = 0; e < op.smem.size(); ++e) {
    std::memcpy(arena + op.smem[e], op.data.data() + e * op.elementBytes,
                op.elementBytes);
    for (uint64_t i = op.smem[e]; i < op.smem[e] + op.elementBytes; ++i) {
      ShadowByte &s = bytes[i];
      if (s.pending == op.issuer + 1)
        s.pending = 0;
      s.pendingTma = false;
      // A write by the issuer as of its issue, in the current interval.
      s.writeEpoch = epoch_;
      s.writer = static_cast<uint16_t>(op.issuer);
      s.writeSite = op.site;
      s.writeSync = warpSyncs_[op.issuer / 32];
      s.writeClock = op.clock.empty() ? 0 : op.clock[op.issuer];
      s.genericWrite = false;
    }
  }
  auto it = mbarriers_.find(op.barrier);
  if (it != mbarriers_.end())
    mbarrierArrive(it->second, op.barrier, 0, -int64_t(op.bytes), &op.clock);
}

bool Launch::landAllTma() {
  if (tmaLoads_.empty())
    return false;
  std::vector<TmaOp> loads = std::move(tmaLoads_);
  tmaLoads_.clear();
  for (TmaOp &op : loads)
    landTma(op);
  return true;
}

void Launch::asyncRead(uint32_t reader, uint64_t offset, uint32_t site,
                       const char *what) {
  ShadowByte &s = shadow()[offset];
  if (s.generation != generation_) {
    s = ShadowByte();
    s.generation = generation_;
  }
  const Thread &t = threads_[reader];
  if (s.pending) {
    hazard(s.pendingTma ? "TMA-in-flight" : "cp.async-in-flight", offset, t,
           site, s.pending - 1, s.writeSite, false);
    return;
  }
  if (unordered(t, s.writeEpoch, s.writer, s.writeSync, s.writeClock))
    hazard("read-after-write", offset, t, site, s.writer, s.writeSite, false);
  else if (s.genericWrite && s.writeEpoch &&
           (fences_.empty() ? 0 : fences_[s.writer]) == s.writeFence)
    hazard(what, offset, t, site, s.writer, s.writeSite, false);
}

void Launch::tmaStore(Thread &t, const Site &site, uint32_t siteId,
                      uint64_t *args) {
  uint64_t src = args[0], mapAddress = args[1];
  TensorMap map;
  readTmaOperand(t, site, mapAddress, "store", map);
  int32_t coords[5] = {};
  for (int i = 0; i < map.rank; ++i)
    coords[i] = static_cast<int32_t>(args[2 + i]);
  uint64_t arena = reinterpret_cast<uint64_t>(Arena::base());
  unsigned span = swizzleSpan(map.swizzle);
  uint64_t align = sharedAlignment(map);
  uint64_t elements = boxElements(map);
  uint64_t offset = src - arena;
  if (src < arena || offset + elements * map.elementBytes > sharedBytes_ ||
      offset % align)
    fault(t, "memcheck: " + kernelName() + ": TMA store source " + hex(src) +
                 " by " + where(t) +
                 " is outside the launch's shared memory "
                 "or not " +
                 std::to_string(align) + "-byte aligned, at " +
                 site.describe());
  TmaOp op;
  op.load = false;
  op.issuer = t.index;
  op.site = siteId;
  op.group = t.bulkGroup;
  op.elementBytes = map.elementBytes;
  std::vector<ShadowByte> &bytes = shadow();
  forEachBoxElement(map, coords, [&](uint64_t e, bool inside, uint64_t global) {
    uint64_t s = swizzleOffset(offset + e * map.elementBytes, span);
    for (uint64_t i = s; i < s + map.elementBytes; ++i) {
      asyncRead(t.index, i, siteId,
                "generic-proxy write read by a TMA store without "
                "fence.proxy.async");
      ShadowByte &b = bytes[i];
      ++b.wgmmaReads;
      b.wgmmaSite = siteId;
      b.wgmmaIssuer = static_cast<uint16_t>(t.index);
    }
    if (!inside)
      return;
    auto it = allocations_.upper_bound(global);
    if (it == allocations_.begin() ||
        global + map.elementBytes >
            std::prev(it)->second.base + std::prev(it)->second.bytes)
      fault(t, "memcheck: " + kernelName() + ": a TMA store of " + where(t) +
                   " writes " + hex(global) + ", outside device memory, at " +
                   site.describe());
    op.smem.push_back(static_cast<uint32_t>(s));
    op.global.push_back(global);
    op.bytes += map.elementBytes;
  });
  for (uint64_t e = 0; e < elements; ++e)
    op.sources.push_back(static_cast<uint32_t>(
        swizzleOffset(offset + e * map.elementBytes, span)));
  counters_.hopper = true;
  counters_.warpgroups[t.index / 128].tmaStoreBytes += op.bytes;
  t.bulkStores.push_back(std::move(op));
}

void Launch::completeBulkStores(Thread &t, uint32_t keepGroups) {
  uint32_t limit = t.bulkGroup >= keepGroups ? t.bulkGroup - keepGroups : 0;
  std::vector<ShadowByte> &bytes = shadow();
  uint8_t *arena = Arena::base();
  auto end =
      std::stable_partition(t.bulkStores.begin(), t.bulkStores.end(),
                            [&](const TmaOp &op) { return op.group >= limit; });
  for (auto it = end; it != t.bulkStores.end(); ++it) {
    TmaOp &op = *it;
    for (size_t e = 0; e < op.smem.size(); ++e)
      std::memcpy(reinterpret_cast<void *>(op.global[e]), arena + op.smem[e],
                  op.elementBytes);
    for (uint32_t s : op.sources)
      for (uint64_t i = s; i < s + op.elementBytes; ++i)
        if (bytes[i].wgmmaReads)
          --bytes[i].wgmmaReads;
  }
  t.bulkStores.erase(end, t.bulkStores.end());
}

//===----------------------------------------------------------------------===//
// The thread-level operations
//===----------------------------------------------------------------------===//

void Launch::hopperOp(Thread &t, const Site &site, uint32_t siteId,
                      uint64_t *args, uint64_t *results) {
  counters_.hopper = true;
  LaunchCounters::Warpgroup &wgCounters = counters_.warpgroups[t.index / 128];
  switch (site.op) {
  case Op::MbarInit: {
    uint64_t offset;
    Mbarrier &b = mbarrierAt(t, args[0], site, offset, false);
    uint32_t count = static_cast<uint32_t>(args[1]);
    if (count == 0 || count >= (1u << 20))
      fault(t, kernelName() + ": mbarrier.init with count " +
                   std::to_string(count) + " (must be in [1, 2^20 - 1]) by " +
                   where(t) + ", at " + site.describe());
    for (const Thread &w : threads_)
      if (w.state == State::AtMbarrier && w.waitBarrier == offset)
        fault(t, kernelName() + ": " + where(t) +
                     " initialises the mbarrier at shared offset " +
                     std::to_string(offset) + " while " + threadName(w.index) +
                     " waits on it, at " + site.describe());
    b = Mbarrier();
    b.expected = b.pending = count;
    b.initSite = siteId;
    return;
  }
  case Op::MbarArrive: {
    uint64_t offset;
    Mbarrier &b = mbarrierAt(t, args[0], site, offset);
    uint32_t count = site.arriveCount ? static_cast<uint32_t>(args[1]) : 1;
    int64_t tx = site.expectTx ? int64_t(static_cast<uint32_t>(args[1])) : 0;
    if (site.expectTx && site.arriveCount)
      count = 1;
    if (count == 0 || count > b.pending)
      fault(t, kernelName() + ": " + where(t) + " arrives " +
                   std::to_string(count) +
                   " time(s) on the mbarrier at "
                   "shared offset " +
                   std::to_string(offset) +
                   ", whose current phase expects only " +
                   std::to_string(b.pending) + " more, at " + site.describe());
    results[0] = b.phase;
    std::vector<uint32_t> released;
    release(t.index, released);
    mbarrierArrive(b, offset, count, tx, &released);
    return;
  }
  case Op::MbarExpectTx:
  case Op::MbarCompleteTx: {
    uint64_t offset;
    Mbarrier &b = mbarrierAt(t, args[0], site, offset);
    int64_t tx = int64_t(static_cast<uint32_t>(args[1]));
    mbarrierArrive(b, offset, 0, site.op == Op::MbarExpectTx ? tx : -tx,
                   nullptr);
    return;
  }
  case Op::MbarWait: {
    uint64_t offset;
    Mbarrier *b = &mbarrierAt(t, args[0], site, offset);
    uint32_t parity = static_cast<uint32_t>(args[1]) & 1;
    ++wgCounters.mbarrierWaits;
    if ((b->phase & 1) == parity) {
      t.state = State::AtMbarrier;
      t.site = siteId;
      t.waitBarrier = offset;
      t.waitParity = parity;
      wait(t);
      b = &mbarriers_[offset];
    }
    acquire(t.index, b->completed);
    results[0] = 1;
    return;
  }
  case Op::TmaLoad:
    tmaLoad(t, site, siteId, args);
    return;
  case Op::TmaStore:
    tmaStore(t, site, siteId, args);
    return;
  case Op::BulkCommit:
    ++t.bulkGroup;
    return;
  case Op::BulkWait:
    completeBulkStores(t, static_cast<uint32_t>(site.waitGroups));
    return;
  case Op::FenceProxyAsync:
    ++fences_[t.index];
    return;
  case Op::NamedBarrier: {
    uint32_t id = static_cast<uint32_t>(args[0]);
    uint32_t n = static_cast<uint32_t>(args[1]);
    if (id > 15 || n == 0 || n % 32 || n > threadsPerCta_)
      fault(t, kernelName() + ": " + where(t) + " uses barrier " +
                   std::to_string(id) + " with " + std::to_string(n) +
                   " threads (ids are 0-15; the count a nonzero multiple of "
                   "32 up to the block's " +
                   std::to_string(threadsPerCta_) + "), at " + site.describe());
    NamedBarrierState &b = namedBarriers_[id];
    if (b.arrived == 0)
      b.expected = n;
    else if (b.expected != n)
      fault(t, kernelName() + ": " + where(t) + " uses barrier " +
                   std::to_string(id) + " with " + std::to_string(n) +
                   " threads while others use it with " +
                   std::to_string(b.expected) + ", at " + site.describe());
    ++b.arrived;
    // An arrival releases the thread's accesses so far; the threads that
    // wait (bar.sync, not bar.arrive) acquire them all when it completes.
    release(t.index, b.clock);
    if (site.barrierSync)
      b.waiters.push_back(t.index);
    if (b.arrived == b.expected) {
      // One completion (counted as the CTA barriers are).
      ++counters_.barriers;
      if (site.inKvLoop)
        ++counters_.kvBarriers;
      std::vector<uint32_t> clock = std::move(b.clock);
      std::vector<uint32_t> waiters = std::move(b.waiters);
      namedBarriers_.erase(id);
      for (uint32_t p : waiters) {
        acquire(p, clock);
        Thread &w = threads_[p];
        if (w.state == State::AtNamedBarrier && w.namedBarrier == id)
          w.state = State::Runnable;
      }
      return;
    }
    if (site.barrierSync) {
      t.state = State::AtNamedBarrier;
      t.namedBarrier = id;
      t.site = siteId;
      wait(t);
    }
    return;
  }
  case Op::WgmmaUse: {
    const WarpgroupState &wg = warpgroups_[t.index / 128];
    for (auto &[s, instance] : t.wgmmaLatest)
      if (s == site.wgmmaSite)
        for (const WgmmaOp &op : wg.inFlight)
          if (op.instance == instance) {
            ++hazards_;
            if (hazardsSeen_.insert({"wgmma-register", siteId, s}).second) {
              std::string text = "racecheck: " + kernelName() + ": " +
                                 where(t) + " reads a result of " +
                                 sites()[s].describe() + " at " +
                                 site.describe() +
                                 " while that wgmma is still in flight (no "
                                 "wgmma.wait_group retired it)";
              if (options_.printReports)
                llvm::errs() << text << "\n";
              reports_.push_back(std::move(text));
            }
            return;
          }
    return;
  }
  default:
    fault(t, kernelName() + ": " + site.describe() +
                 " reached the emulator as an sm_90a operation (an emulator "
                 "bug)");
  }
}

//===----------------------------------------------------------------------===//
// Warpgroup collectives
//===----------------------------------------------------------------------===//

Status Launch::completeWarpgroup(unsigned warp, const Site &site,
                                 uint32_t siteId, bool &progress) {
  const unsigned group = warp / 4;
  const std::string what =
      kernelName() + ", warpgroup " + std::to_string(group) + " of block (" +
      std::to_string(cta_.x) + "," + std::to_string(cta_.y) + "," +
      std::to_string(cta_.z) + ")";
  if (128 * (group + 1) > threadsPerCta_)
    return Status::error(what + ": " + site.describe() +
                         " needs a whole warpgroup (128 threads); the block "
                         "has " +
                         std::to_string(threadsPerCta_) + " threads");
  for (unsigned i = 128 * group; i < 128 * (group + 1); ++i) {
    const Thread &t = threads_[i];
    if (t.state == State::AtCollective && t.site == siteId)
      continue;
    if (t.state == State::Exited || (t.state == State::AtCollective &&
                                     isWarpgroupCollective(sites()[t.site].op)))
      return Status::error(
          what +
          ": a warpgroup instruction reached by only part of the "
          "warpgroup: " +
          site.describe() + " waits for " + threadName(i) + ", which " +
          (t.state == State::Exited ? std::string("ended")
                                    : "is at " + sites()[t.site].describe()));
    return Status::ok(); // not there yet
  }
  for (unsigned w = 4 * group; w < 4 * group + 4; ++w)
    flushWarp(w);
  WarpgroupState &wg = warpgroups_[group];
  LaunchCounters::Warpgroup &wgCounters = counters_.warpgroups[group];
  counters_.hopper = true;
  Thread *threads = &threads_[128 * group];
  auto joinWarpgroup = [&] {
    if (clocks_.empty())
      return;
    std::vector<uint32_t> joined;
    for (unsigned i = 0; i < 128; ++i)
      release(128 * group + i, joined);
    for (unsigned i = 0; i < 128; ++i)
      acquire(128 * group + i, joined);
  };
  switch (site.op) {
  case Op::WgmmaFence:
    wg.fenced = true;
    break;
  case Op::WgmmaCommit:
    ++wg.group;
    break;
  case Op::SetMaxNReg: {
    unsigned n = static_cast<unsigned>(site.setmaxnregCount);
    if (n < 24 || n > 256 || n % 8)
      return Status::error(what + ": setmaxnreg " + std::to_string(n) +
                           " is outside [24, 256] or not a multiple of 8, at " +
                           site.describe());
    if (site.setmaxnregInc ? n < wg.registers : n > wg.registers)
      return Status::error(what + ": " + site.describe() + " asks for " +
                           std::to_string(n) +
                           " registers per thread, but the warpgroup has " +
                           std::to_string(wg.registers) +
                           " (inc must not lower, dec must not "
                           "raise the count)");
    unsigned others = 0;
    for (size_t g = 0; g < warpgroups_.size(); ++g)
      if (g != group)
        others += 128 * warpgroups_[g].registers;
    if (site.setmaxnregInc && others + 128 * n > 65536)
      return Status::ok(); // waits until other warpgroups release registers
    wg.registers = n;
    break;
  }
  case Op::WgmmaWait: {
    uint32_t keep = static_cast<uint32_t>(site.waitGroups);
    uint32_t limit = wg.group >= keep ? wg.group - keep : 0;
    std::vector<ShadowByte> &bytes = shadow();
    auto end = std::stable_partition(
        wg.inFlight.begin(), wg.inFlight.end(),
        [&](const WgmmaOp &op) { return op.group >= limit; });
    for (auto it = end; it != wg.inFlight.end(); ++it)
      for (uint32_t s : it->sources) {
        ShadowByte &b = bytes[s];
        if (b.wgmmaReads)
          --b.wgmmaReads;
        // The read, complete now: by the warpgroup's first thread.
        if (b.readEpoch != epoch_) {
          b.readEpoch = epoch_;
          b.reader = static_cast<uint16_t>(128 * group);
          b.readSite = it->site;
          b.readSync = warpSyncs_[4 * group];
          b.multipleReaders = false;
          b.readersInOneWarp = true;
        } else if (b.reader != 128 * group) {
          b.multipleReaders = true;
          b.readersInOneWarp = false;
        }
        b.lastReader = static_cast<uint16_t>(128 * group);
        b.lastReadClock = ownClock(128 * group);
      }
    wg.inFlight.erase(end, wg.inFlight.end());
    wg.fenced = false;
    joinWarpgroup();
    break;
  }
  case Op::WgmmaMma: {
    const int n = site.wgmmaN, half = n / 2;
    const uint64_t *a0 = threads[0].args;
    uint64_t descB = a0[half + (site.wgmmaRs ? 4 : 1)];
    bool scaleD = (a0[half + (site.wgmmaRs ? 5 : 2)] & 0xffffffffu) != 0;
    if (!wg.fenced)
      return Status::error(what + ": " + site.describe() +
                           " without a wgmma.fence since the warpgroup's last "
                           "wgmma.wait_group (its registers and shared "
                           "operands are not ordered before it)");
    for (unsigned i = 1; i < 128; ++i) {
      const uint64_t *ai = threads[i].args;
      if (ai[half + (site.wgmmaRs ? 4 : 1)] != descB ||
          (!site.wgmmaRs && ai[half] != a0[half]))
        return Status::error(what + ": " + site.describe() +
                             ": the matrix descriptors differ between thread "
                             "0 and thread " +
                             std::to_string(i) +
                             " of the warpgroup (they must be uniform)");
    }
    std::vector<uint16_t> a(64 * 16), b(static_cast<size_t>(n) * 16);
    WgmmaOp op;
    op.group = wg.group;
    op.site = siteId;
    op.instance = ++wg.instances;
    auto readOperand = [&](uint64_t desc, bool mnMajor, int mn, int k,
                           uint16_t &out) -> Status {
      if ((desc >> 49) & 7)
        return Status::error(what + ": " + site.describe() +
                             ": a matrix descriptor with a nonzero base "
                             "offset, which the emulated GPU does not model");
      uint64_t off = wgmmaElementOffset(desc, mnMajor, mn, k);
      if (off + 2 > sharedBytes_ || off % 2)
        return Status::error(
            "memcheck: " + what + ": " + site.describe() +
            " reads shared offset " + std::to_string(off) +
            " through its descriptor " + hex(desc) + ", outside the launch's " +
            std::to_string(sharedBytes_) + " bytes of shared memory");
      std::memcpy(&out, Arena::base() + off, 2);
      for (uint64_t i = off; i < off + 2; ++i) {
        asyncRead(128 * group, i, siteId,
                  "generic-proxy write read by wgmma without "
                  "fence.proxy.async");
        op.sources.push_back(static_cast<uint32_t>(i));
      }
      return Status::ok();
    };
    if (site.wgmmaRs) {
      const uint32_t *regs[128];
      std::vector<uint32_t> storage(128 * 4);
      for (unsigned i = 0; i < 128; ++i) {
        for (int q = 0; q < 4; ++q)
          storage[4 * i + q] = static_cast<uint32_t>(threads[i].args[half + q]);
        regs[i] = &storage[4 * i];
      }
      wgmmaGatherA(regs, a.data());
    } else {
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k)
          KVATTN_RETURN_IF_ERROR(
              readOperand(a0[half], site.transA, m, k, a[m * 16 + k]));
    }
    for (int col = 0; col < n; ++col)
      for (int k = 0; k < 16; ++k)
        KVATTN_RETURN_IF_ERROR(
            readOperand(descB, site.transB, col, k, b[col * 16 + k]));
    std::vector<float> acc(static_cast<size_t>(128) * half);
    float *accs[128];
    for (unsigned i = 0; i < 128; ++i) {
      for (int r = 0; r < half; ++r) {
        uint32_t bits = static_cast<uint32_t>(threads[i].args[r]);
        std::memcpy(&acc[i * half + r], &bits, 4);
      }
      accs[i] = &acc[i * half];
    }
    wgmmaM64NK16(n, site.bf16, a.data(), b.data(), site.scaleA, site.scaleB,
                 scaleD, accs);
    for (unsigned i = 0; i < 128; ++i) {
      for (int r = 0; r < half; ++r) {
        uint32_t bits;
        std::memcpy(&bits, &acc[i * half + r], 4);
        threads[i].results[r] = bits;
      }
      bool found = false;
      for (auto &[s, instance] : threads[i].wgmmaLatest)
        if (s == siteId) {
          instance = op.instance;
          found = true;
        }
      if (!found)
        threads[i].wgmmaLatest.push_back({siteId, op.instance});
    }
    std::sort(op.sources.begin(), op.sources.end());
    op.sources.erase(std::unique(op.sources.begin(), op.sources.end()),
                     op.sources.end());
    std::vector<ShadowByte> &bytes = shadow();
    for (uint32_t s : op.sources) {
      ++bytes[s].wgmmaReads;
      bytes[s].wgmmaSite = siteId;
      bytes[s].wgmmaIssuer = static_cast<uint16_t>(128 * group);
    }
    wg.inFlight.push_back(std::move(op));
    ++wgCounters.wgmma;
    std::string shape = "m64n" + std::to_string(n) + "k16." +
                        (site.bf16 ? "bf16" : "f16") +
                        (site.wgmmaRs ? ".rs" : ".ss");
    bool counted = false;
    for (auto &[s, c] : counters_.wgmmaShapes)
      if (s == shape) {
        ++c;
        counted = true;
      }
    if (!counted)
      counters_.wgmmaShapes.push_back({shape, 1});
    break;
  }
  default:
    return Status::error(what + ": " + site.describe() +
                         " is not a warpgroup instruction (an emulator bug)");
  }
  for (unsigned i = 0; i < 128; ++i)
    threads[i].state = State::Runnable;
  progress = true;
  return Status::ok();
}

Status Launch::endOfCta() {
  landAllTma();
  for (Thread &t : threads_)
    completeBulkStores(t, 0);
  for (size_t g = 0; g < warpgroups_.size(); ++g)
    if (!warpgroups_[g].inFlight.empty()) {
      ++hazards_;
      std::string text =
          "racecheck: " + kernelName() + ": warpgroup " + std::to_string(g) +
          " of block (" + std::to_string(cta_.x) + "," +
          std::to_string(cta_.y) + "," + std::to_string(cta_.z) +
          ") ended with " + std::to_string(warpgroups_[g].inFlight.size()) +
          " wgmma.mma_async in flight (issued at " +
          sites()[warpgroups_[g].inFlight.front().site].describe() +
          "; no wgmma.wait_group retired it)";
      if (options_.printReports)
        llvm::errs() << text << "\n";
      reports_.push_back(std::move(text));
    }
  return Status::ok();
}

} // namespace detail
} // namespace emu
} // namespace kvattn
} // namespace mlir
