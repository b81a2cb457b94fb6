//===- KernelMarkers.h - what kernels tell the emulated GPU -----*- C++ -*-===//
//
// Marks the GPU lowering puts in a kernel's code for the emulated GPU
// (lib/GpuEmu), written once for both: they emit nothing a GPU executes.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_KERNELMARKERS_H
#define KVATTN_SUPPORT_KERNELMARKERS_H

namespace mlir {
namespace kvattn {

/// The text of an inline-asm statement (no operands; a PTX comment) that
/// starts the KV block the intra-warpgroup overlap peels off the KV loop
/// (docs/gpu-lowering.md, "Intra-warpgroup overlap"). The emulator counts
/// each execution of it as one trip of the KV loop and the code it
/// dominates as that trip's (docs/gpu-emulator.md, "Counters").
inline constexpr const char kPeeledKvBlockMarker[] =
    "// kvattn: the first KV block, peeled off the KV loop";

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_KERNELMARKERS_H
