//===- StaticLLVMTargets.cpp - the LLVM targets kvattn does not use -------===//
//
// Only in a KVATTN_STATIC_LLVM build (CMakeLists.txt). MLIR's
// registerAllPasses reaches llvm::InitializeAllTargets, which names every
// target Debian's LLVM was built with; linked from the archives, that would
// put twenty back ends (AMDGPU alone tens of megabytes) into libkvattn_c.so.
// kvattn generates code for two: the host (X86, the CPU target's JIT) and
// NVPTX. The other targets' initialisers are defined here as no-ops, so their
// archives are never pulled in and those targets stay unregistered: a
// lookup of one fails with LLVM's "no such target" error, as for any target
// an LLVM was built without.
//
//===----------------------------------------------------------------------===//

#define KVATTN_UNUSED_TARGET(T)                                                \
  extern "C" void LLVMInitialize##T##TargetInfo() {}                           \
  extern "C" void LLVMInitialize##T##Target() {}                               \
  extern "C" void LLVMInitialize##T##TargetMC() {}                             \
  extern "C" void LLVMInitialize##T##AsmParser() {}                            \
  extern "C" void LLVMInitialize##T##AsmPrinter() {}                           \
  extern "C" void LLVMInitialize##T##Disassembler() {}

KVATTN_UNUSED_TARGET(AArch64)
KVATTN_UNUSED_TARGET(AMDGPU)
KVATTN_UNUSED_TARGET(ARM)
KVATTN_UNUSED_TARGET(AVR)
KVATTN_UNUSED_TARGET(BPF)
KVATTN_UNUSED_TARGET(Hexagon)
KVATTN_UNUSED_TARGET(Lanai)
KVATTN_UNUSED_TARGET(LoongArch)
KVATTN_UNUSED_TARGET(M68k)
KVATTN_UNUSED_TARGET(MSP430)
KVATTN_UNUSED_TARGET(Mips)
KVATTN_UNUSED_TARGET(PowerPC)
KVATTN_UNUSED_TARGET(RISCV)
KVATTN_UNUSED_TARGET(SPIRV)
KVATTN_UNUSED_TARGET(Sparc)
KVATTN_UNUSED_TARGET(SystemZ)
KVATTN_UNUSED_TARGET(VE)
KVATTN_UNUSED_TARGET(WebAssembly)
KVATTN_UNUSED_TARGET(XCore)
KVATTN_UNUSED_TARGET(Xtensa)
