// Every kvattn-run option is range-checked, with an error that names it
// (issue 30 item 11): before, --opt-level=99 was accepted (the C API refuses
// above 3), --input N given twice kept the last silently and an empty
// --emu-fault= planted nothing and said nothing.
// RUN: not kvattn-run %s --opt-level=99 --input 3=0 --input 4=5 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --input 3=1 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --block-m=-1 2>&1 | FileCheck %s --check-prefix=BLOCKM
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --index-bitwidth=16 2>&1 | FileCheck %s --check-prefix=BITS
// The compile options' ranges are declared once for the tools
// (tools/common/CompileFlags): kvattn/Support/Limits.h's, named before
// anything is compiled.
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --block-m=512 2>&1 | FileCheck %s --check-prefix=BLOCKMAX
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --num-threads=2000 2>&1 | FileCheck %s --check-prefix=THREADSMAX
// RUN: not kvattn-compile %s -o %t --num-stages=0 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not kvattn-bench --split-kv=300 2>&1 | FileCheck %s --check-prefix=SPLITMAX
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --magnitude=nan 2>&1 | FileCheck %s --check-prefix=MAG
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --magnitude=0 2>&1 | FileCheck %s --check-prefix=MAG0
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --fp8-magnitude=-448 2>&1 | FileCheck %s --check-prefix=FP8MAG
// (--vector-width and --num-threads: the library's limits, test/Numerics/cpu-vectorized.test.)
// RUN: not kvattn-run %s --input 3=0 --input 4=5 --target=gpu-emu --emu-fault= 2>&1 | FileCheck %s --check-prefix=NOFAULT
// In range, the same run computes.
// RUN: kvattn-run %s --input 3=0 --input 4=5 --opt-level=3 --target=cpu --check | FileCheck %s --check-prefix=OK

// OPT: kvattn-run: error: --opt-level=99 is outside [0, 3]
// TWICE: kvattn-run: error: --input '3=1': argument 3 is already given (--input 3=0)
// BLOCKM: kvattn-run: error: --block-m=-1 is negative
// BITS: kvattn-run: error: --index-bitwidth=16 is not 32 or 64
// BLOCKMAX: kvattn-run: error: --block-m=512 is outside [0, 256]
// THREADSMAX: kvattn-run: error: --num-threads=2000 is outside [0, 1024]
// STAGES: kvattn-compile: error: --num-stages=0 is outside [1, 8]
// SPLITMAX: kvattn-bench: error: --split-kv=300 is outside [0, 256]
// MAG: kvattn-run: error: --magnitude=nan is not a positive finite number
// MAG0: kvattn-run: error: --magnitude=0.000000 is not a positive finite number
// FP8MAG: kvattn-run: error: --fp8-magnitude=-448.000000 is not a positive finite number (or 0: --magnitude)
// NOFAULT: kvattn-run: error: --emu-fault='' names no fault (drop-barrier, wait-group, global-offset, drop-mbarrier-wait, drop-wgmma-wait, drop-fence-proxy or expect-tx, with an optional :N)
// OK: PASS

func.func @attention(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x5x4xf32>, %v: tensor<1x1x5x4xf32>,
    %qo: tensor<1xi32>, %len: tensor<1xi32>) -> tensor<1x1x2x4xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) kv_len(%len : tensor<1xi32>) causal
      : tensor<1x1x2x4xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x4xf32> -> tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}
