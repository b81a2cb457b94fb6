// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts="vector-width=16 few-rows=8" | FileCheck %s
// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts="vector-width=4 few-rows=0" | FileCheck %s --check-prefix=W4

// A program's tiles (scratch allocas, as -kvattn-tile makes them): the
// query, the scores and the running maximum and sum are vectorised over
// rows (48 rows: vectors of 16, or 4), with the few-rows bound; the
// accumulator over its 8 value columns (vectors of 8: the widest power of
// two up to 16 dividing 8).

// CHECK-LABEL: func @program
// CHECK:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<48x8xf32>
// CHECK:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<48x32xf32>
// CHECK:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<48xf32>
// CHECK:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<48xf32>
// CHECK:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 8>} : memref<48x8xf32>
// W4-LABEL: func @program
// W4:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 4>} : memref<48x8xf32>
// W4:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 4>} : memref<48x32xf32>
// W4:   memref.alloca() {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 4>} : memref<48x8xf32>
func.func @program(%qin: memref<1x2x48x8xf32>, %k: memref<1x2x?x8xf32>, %v: memref<1x2x?x8xf32>, %out: memref<1x2x48x8xf32>,
                   %b: index, %h: index, %q0: index, %start: index, %rows: index, %cols: index) {
  %q = memref.alloca() : memref<48x8xf32>
  %s = memref.alloca() : memref<48x32xf32>
  %m = memref.alloca() : memref<48xf32>
  %l = memref.alloca() : memref<48xf32>
  %acc = memref.alloca() : memref<48x8xf32>
  kvattn.tile.init %m, %l, %acc : memref<48xf32>, memref<48xf32>, memref<48x8xf32>
  kvattn.tile.load_q %qin[%b, %h, %q0] rows(%rows) into %q : memref<1x2x48x8xf32>, memref<48x8xf32>
  kvattn.tile.qk %q, %k[%b, %h, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<48x8xf32>, memref<1x2x?x8xf32>, memref<48x32xf32>
  kvattn.tile.softmax_update %s, %v[%b, %h, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<48x32xf32>, memref<1x2x?x8xf32>, memref<48xf32>, memref<48xf32>, memref<48x8xf32>
  kvattn.tile.store state(%m, %l, %acc) into %out[%b, %h, %q0] rows(%rows)
      : memref<48xf32>, memref<48xf32>, memref<48x8xf32>, memref<1x2x48x8xf32>
  return
}

// -----

// Tiles passed in as arguments get the layout as an argument attribute; a
// layout already there is kept (the lowering checks it).

// CHECK-LABEL: func @arguments
// CHECK-SAME:    %{{.*}}: memref<16x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>}
// CHECK-SAME:    %{{.*}}: memref<16x32xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 8>}
func.func @arguments(%q: memref<16x8xf32>, %k: memref<1x2x?x8xf32>,
                     %s: memref<16x32xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 8>},
                     %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xf32>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}
