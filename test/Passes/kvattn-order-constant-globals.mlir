// RUN: kvattn-opt %s -split-input-file -kvattn-order-constant-globals | FileCheck %s

// Private constant globals are sorted by type and value, renamed in that
// order and moved to the top; every memref.get_global follows its global.
// Other globals (mutable, public, not bufferization's) are left alone.

// CHECK: memref.global "private" constant @__constant_1xi32_0 : memref<1xi32> = dense<2>
// CHECK-NEXT: memref.global "private" constant @__constant_1xi32_1 : memref<1xi32> = dense<5>
// CHECK-NEXT: memref.global "private" constant @__constant_2xf32_2 : memref<2xf32> = dense<[1.000000e+00, 2.000000e+00]>
// CHECK-LABEL: func.func @first
// CHECK: memref.get_global @__constant_1xi32_1 : memref<1xi32>
// CHECK: memref.get_global @__constant_2xf32_2 : memref<2xf32>
// CHECK-LABEL: func.func @second
// CHECK: memref.get_global @__constant_1xi32_0 : memref<1xi32>
// CHECK: memref.get_global @state : memref<1xi32>
// CHECK: memref.global "private" @state : memref<1xi32> = dense<0>
// CHECK: memref.global constant @__constant_public : memref<1xi32> = dense<7>
func.func @first() -> (memref<1xi32>, memref<2xf32>) {
  %a = memref.get_global @__constant_1xi32 : memref<1xi32>
  %b = memref.get_global @__constant_2xf32 : memref<2xf32>
  return %a, %b : memref<1xi32>, memref<2xf32>
}
func.func @second() -> (memref<1xi32>, memref<1xi32>) {
  %a = memref.get_global @__constant_1xi32_0 : memref<1xi32>
  %s = memref.get_global @state : memref<1xi32>
  return %a, %s : memref<1xi32>, memref<1xi32>
}
memref.global "private" constant @__constant_1xi32 : memref<1xi32> = dense<5>
memref.global "private" constant @__constant_2xf32 : memref<2xf32> = dense<[1.0, 2.0]>
memref.global "private" @state : memref<1xi32> = dense<0>
memref.global constant @__constant_public : memref<1xi32> = dense<7>
memref.global "private" constant @__constant_1xi32_0 : memref<1xi32> = dense<2>

// -----

// Nothing to order: the module is unchanged.
// CHECK-LABEL: func.func @none
// CHECK-NOT: memref.global
func.func @none() {
  return
}
