// REQUIRES: libdevice
// RUN: kvattn-opt %s -split-input-file -kvattn-gpu-module-to-ptx -verify-diagnostics | FileCheck %s
// RUN: kvattn-opt %s -split-input-file -kvattn-gpu-module-to-ptx="format=llvm" -verify-diagnostics | FileCheck %s --check-prefix=IR
// RUN: kvattn-opt %s -split-input-file -kvattn-gpu-module-to-ptx="llvm-pipeline=standard" -verify-diagnostics | FileCheck %s --check-prefix=STD
// RUN: not kvattn-opt %s -split-input-file -kvattn-gpu-module-to-ptx="format=cubin" 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not kvattn-opt %s -split-input-file -kvattn-gpu-module-to-ptx="llvm-pipeline=O1" 2>&1 | FileCheck %s --check-prefix=PIPELINE
// FORMAT: error: kvattn-gpu-module-to-ptx: format must be isa or llvm, not 'cubin'
// PIPELINE: error: kvattn-gpu-module-to-ptx: llvm-pipeline must be kvattn or standard, not 'O1'

// An accumulator in an alloca, filled and read by constant-trip-count loops
// (what kvattn's fragment loops look like after MLIR): kvattn's pipeline
// must unroll them and put the four floats in registers, so the PTX has no
// local memory (__local_depot) and the device IR no alloca: the sum of
// x * 0, x * 1, x * 2 and x * 3, the last a multiplication by 3.0
// (0f40400000). The target's O (2 by default) is recorded, as
// gpu-module-to-binary does.

// CHECK-LABEL: gpu.binary @accumulate
// CHECK-SAME: #gpu.object<#nvvm.target<chip = "sm_90">, properties = {O = 2 : i32}, assembly = "
// CHECK-SAME: .entry acc(
// CHECK-NOT: __local_depot
// CHECK-SAME: mul.rn.f32 {{.*}}0f40400000
// CHECK-NOT: __local_depot
// CHECK-SAME: st.global.b32
// IR-LABEL: gpu.binary @accumulate
// IR-SAME: offload = "BC\C0\DE
// STD-LABEL: gpu.binary @accumulate
// STD-NOT: __local_depot
// STD-SAME: .entry acc(
module attributes {gpu.container_module} {
  gpu.module @accumulate [#nvvm.target<chip = "sm_90">] {
    llvm.func @acc(%out: !llvm.ptr<1>, %x: f32) attributes {nvvm.kernel} {
      %c0 = llvm.mlir.constant(0 : i64) : i64
      %c1 = llvm.mlir.constant(1 : i64) : i64
      %c4 = llvm.mlir.constant(4 : i64) : i64
      %zero = llvm.mlir.constant(0.0 : f32) : f32
      %buf = llvm.alloca %c4 x f32 : (i64) -> !llvm.ptr
      llvm.br ^fill(%c0 : i64)
    ^fill(%i: i64):
      %more = llvm.icmp "slt" %i, %c4 : i64
      llvm.cond_br %more, ^fillBody, ^sum(%c0, %zero : i64, f32)
    ^fillBody:
      %p = llvm.getelementptr %buf[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
      %fi = llvm.sitofp %i : i64 to f32
      %v = llvm.fmul %fi, %x : f32
      llvm.store %v, %p : f32, !llvm.ptr
      %next = llvm.add %i, %c1 : i64
      llvm.br ^fill(%next : i64)
    ^sum(%j: i64, %s: f32):
      %more2 = llvm.icmp "slt" %j, %c4 : i64
      llvm.cond_br %more2, ^sumBody, ^done
    ^sumBody:
      %q = llvm.getelementptr %buf[%j] : (!llvm.ptr, i64) -> !llvm.ptr, f32
      %w = llvm.load %q : !llvm.ptr -> f32
      %s2 = llvm.fadd %s, %w : f32
      %next2 = llvm.add %j, %c1 : i64
      llvm.br ^sum(%next2, %s2 : i64, f32)
    ^done:
      llvm.store %s, %out : f32, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

// A module that calls libdevice gets it linked and inlined: no call to, or
// declaration of, __nv_expf is left in the PTX (expf is ex2.approx there).
// CHECK-LABEL: gpu.binary @math
// CHECK-NOT: __nv_expf
// CHECK-SAME: ex2.approx
// CHECK-NOT: __nv_expf
// CHECK-SAME: "
// IR-LABEL: gpu.binary @math
// STD-LABEL: gpu.binary @math
// STD-NOT: __nv_expf
// STD-SAME: ex2.approx
module attributes {gpu.container_module} {
  gpu.module @math [#nvvm.target<chip = "sm_90">] {
    llvm.func @__nv_expf(f32) -> f32
    llvm.func @k(%out: !llvm.ptr<1>, %x: f32) attributes {nvvm.kernel} {
      %e = llvm.call @__nv_expf(%x) : (f32) -> f32
      llvm.store %e, %out : f32, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

// libdevice is read only by modules that call it: a link file that does
// not exist is no error for a module without __nv_* calls...
// CHECK-LABEL: gpu.binary @nomath
// CHECK-SAME: .entry k(
module attributes {gpu.container_module} {
  gpu.module @nomath [#nvvm.target<chip = "sm_90", link = ["/nonexistent/libdevice.10.bc"]>] {
    llvm.func @k(%out: !llvm.ptr<1>, %x: f32) attributes {nvvm.kernel} {
      llvm.store %x, %out : f32, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

// ...and an error, naming the file, for one that calls it.
module attributes {gpu.container_module} {
  // expected-error @below {{File path: "/nonexistent/libdevice.10.bc" does not exist or is not a file.}}
  // expected-error @below {{compiling gpu.module 'badlink' for sm_90 failed}}
  gpu.module @badlink [#nvvm.target<chip = "sm_90", link = ["/nonexistent/libdevice.10.bc"]>] {
    llvm.func @__nv_expf(f32) -> f32
    llvm.func @k(%out: !llvm.ptr<1>, %x: f32) attributes {nvvm.kernel} {
      %e = llvm.call @__nv_expf(%x) : (f32) -> f32
      llvm.store %e, %out : f32, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @below {{gpu.module 'untargeted' has no target: run nvvm-attach-target first}}
  gpu.module @untargeted {
  }
}
