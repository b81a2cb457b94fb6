// RUN: kvattn-opt %s -split-input-file -kvattn-lower-tile-to-vectors -verify-diagnostics

// The lowering obeys the tiles' #kvattn.vector_layout and refuses, before
// anything is rewritten, a tile without one or layouts it cannot lower.

func.func @no_layout(%q: memref<16x8xf32>, %k: memref<1x2x?x8xf32>, %s: memref<16x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  // expected-error @+1 {{kvattn-lower-tile-to-vectors: the query tile has no #kvattn.vector_layout (run -kvattn-assign-vector-layouts before the lowering)}}
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xf32>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}

// -----

// The scores are vectorised over rows: a columns layout is refused.

func.func @wrong_axis(%q: memref<16x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>},
                      %k: memref<1x2x?x8xf32>,
                      %s: memref<16x32xf32> {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 16>},
                      %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  // expected-error @+1 {{kvattn-lower-tile-to-vectors vectorises the scores tile along its rows, its layout is #kvattn.vector_layout<columns, width = 16>}}
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xf32>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}

// -----

// A width must divide the extent its vectors run along (12 rows in vectors
// of 8 would read past the tile).

func.func @width_not_dividing(%q: memref<12x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 8>},
                              %qb: memref<1x2x12x8xf32>, %b: index, %h: index, %q0: index, %rows: index) {
  // expected-error @+1 {{kvattn-lower-tile-to-vectors: the query tile's layout #kvattn.vector_layout<rows, width = 8> does not divide its 12 rows}}
  kvattn.tile.load_q %qb[%b, %h, %q0] rows(%rows) into %q : memref<1x2x12x8xf32>, memref<12x8xf32>
  return
}

// -----

// The query and the scores of one program hold the same rows: one layout
// (here the few-rows bounds differ, which would run Q.K^T in one form and
// the softmax in the other).

func.func @rows_disagree(%q: memref<16x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16, few_rows = 8>},
                         %k: memref<1x2x?x8xf32>,
                         %s: memref<16x32xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>},
                         %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  // expected-error @+1 {{kvattn-lower-tile-to-vectors: the query and scores tiles hold the same rows in one layout, got #kvattn.vector_layout<rows, width = 16, few_rows = 8> and #kvattn.vector_layout<rows, width = 16>}}
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xf32>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}

// -----

// The accumulator of P.V: vectors over the value dimension (8 columns do
// not take vectors of 16).

func.func @accumulator_width(%s: memref<16x32xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>},
                             %v: memref<1x2x64x8xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index,
                             %m: memref<16xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>},
                             %l: memref<16xf32> {kvattn.vector_layout = #kvattn.vector_layout<rows, width = 16>},
                             %acc: memref<16x8xf32> {kvattn.vector_layout = #kvattn.vector_layout<columns, width = 16>}) {
  // expected-error @+1 {{kvattn-lower-tile-to-vectors: the accumulator tile's layout #kvattn.vector_layout<columns, width = 16> does not divide its 8 columns}}
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xf32>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}
