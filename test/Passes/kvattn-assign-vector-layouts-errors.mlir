// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts=vector-width=16 -verify-diagnostics
// RUN: not kvattn-opt %s -kvattn-assign-vector-layouts=vector-width=3 -o /dev/null 2>&1 | FileCheck %s --check-prefix=WIDTH
// RUN: not kvattn-opt %s -kvattn-assign-vector-layouts=vector-width=32 -o /dev/null 2>&1 | FileCheck %s --check-prefix=WIDTH
// RUN: not kvattn-opt %s -kvattn-assign-vector-layouts=few-rows=65 -o /dev/null 2>&1 | FileCheck %s --check-prefix=FEW
// RUN: not kvattn-opt %s -kvattn-assign-vector-layouts=few-rows=-1 -o /dev/null 2>&1 | FileCheck %s --check-prefix=FEW

// WIDTH: kvattn-assign-vector-layouts: vector-width must be 0 (the host's) or a power of two from 1 to 16, got {{3|32}}
// FEW: kvattn-assign-vector-layouts: few-rows must be 0 to 64, got {{65|-1}}

// One tile used as the query (vectors over rows) and as an accumulator
// (vectors over columns) has no layout both lowerings can use.

func.func @two_layouts(%qin: memref<1x2x16x8xf32>, %b: index, %h: index, %q0: index, %rows: index) {
  %q = memref.alloca() : memref<16x8xf32>
  %m = memref.alloca() : memref<16xf32>
  %l = memref.alloca() : memref<16xf32>
  // expected-note @+1 {{the earlier use}}
  kvattn.tile.load_q %qin[%b, %h, %q0] rows(%rows) into %q : memref<1x2x16x8xf32>, memref<16x8xf32>
  // expected-error @+1 {{kvattn-assign-vector-layouts: this op uses its accumulator tile as #kvattn.vector_layout<columns, width = 8>, an earlier op as #kvattn.vector_layout<rows, width = 16, few_rows = 8>}}
  kvattn.tile.init %m, %l, %q : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// A layout lives on the op defining the tile or on a function argument: a
// loop-carried tile has neither.

func.func @loop_carried(%qin: memref<1x2x16x8xf32>, %q0: memref<16x8xf32>, %b: index, %h: index, %q: index, %rows: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %c1 step %c1 iter_args(%t = %q0) -> memref<16x8xf32> {
    // expected-error @+1 {{kvattn-assign-vector-layouts: a tile is an op's result or a function's argument, this one is neither}}
    kvattn.tile.load_q %qin[%b, %h, %q] rows(%rows) into %t : memref<1x2x16x8xf32>, memref<16x8xf32>
    scf.yield %t : memref<16x8xf32>
  }
  return
}
