//===- HostLibcalls.h - f16/bf16 libcalls for host JITs ---------*- C++ -*-===//
//
// The libcalls LLVM's x86-64 back end emits for the f16/bf16 conversions a
// host has no instruction for: __truncsfbf2 without AVX512-BF16 (bf16
// rounding, e.g. the CPU target's bf16 outputs on an AMD EPYC before Zen 4),
// __truncsfhf2 / __extendhfsf2 without F16C, __extendbfsf2 where a value
// is kept in an f32 register (phis, selects). The x86-64 ABI passes and
// returns _Float16 and __bf16 in the low 16 bits of an SSE register, which
// a float's bits travel in unchanged. libgcc before GCC 13 defines none of
// the bf16 ones, so the JITs that run host code (the CPU target, the
// emulated GPU) define these for the code they load. Rounding as
// Float16.h: to nearest even, NaN stays NaN.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_HOSTLIBCALLS_H
#define KVATTN_SUPPORT_HOSTLIBCALLS_H

#include "kvattn/Support/Float16.h"

#include <array>

namespace mlir {
namespace kvattn {
namespace host_libcalls {

inline float packedBits(uint16_t bits) { return detail::bitsToFloat(bits); }
inline uint16_t lowBits(float packed) {
  return static_cast<uint16_t>(detail::floatBits(packed));
}

inline float truncsfbf2(float x) { return packedBits(floatToBFloat16Bits(x)); }
inline float truncsfhf2(float x) { return packedBits(floatToHalfBits(x)); }
inline float extendhfsf2(float packed) {
  return halfBitsToFloat(lowBits(packed));
}
inline float extendbfsf2(float packed) {
  return bfloat16BitsToFloat(lowBits(packed));
}

} // namespace host_libcalls

struct HostLibcall {
  const char *name;
  void *address;
};

/// The libcalls above by their libgcc / compiler-rt names.
inline std::array<HostLibcall, 4> hostFloat16Libcalls() {
  using namespace host_libcalls;
  return {{{"__truncsfbf2", reinterpret_cast<void *>(&truncsfbf2)},
           {"__truncsfhf2", reinterpret_cast<void *>(&truncsfhf2)},
           {"__extendhfsf2", reinterpret_cast<void *>(&extendhfsf2)},
           {"__extendbfsf2", reinterpret_cast<void *>(&extendbfsf2)}}};
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_HOSTLIBCALLS_H
