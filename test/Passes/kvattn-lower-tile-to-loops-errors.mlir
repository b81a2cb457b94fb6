// RUN: kvattn-opt %s -split-input-file -kvattn-lower-tile-to-loops -verify-diagnostics

// A 16-bit query tile is the tensor-core GPU kernels' form: the scalar CPU
// lowering reads the query tile in f32, and refuses it before rewriting
// anything.

func.func @load_q_tile_16(%qin: memref<1x2x16x8xbf16>, %q: memref<16x8xbf16>, %b: index, %h: index, %start: index, %rows: index) {
  // expected-error @+1 {{kvattn-lower-tile-to-loops reads the query tile in f32 (16-bit query tiles are the tensor-core GPU kernels'), got 'memref<16x8xbf16>'}}
  kvattn.tile.load_q %qin[%b, %h, %start] rows(%rows) into %q : memref<1x2x16x8xbf16>, memref<16x8xbf16>
  return
}
