// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts=vector-width=16 -kvattn-lower-tile-to-vectors -verify-diagnostics

// The layouts' own errors (a tile without one, layouts that disagree):
// kvattn-lower-tile-to-vectors-layout-errors.mlir; the width and few-rows
// options: kvattn-assign-vector-layouts-errors.mlir.

// Tiles are addressed through transposed views: a strided tile is refused
// by name before anything is rewritten.

func.func @strided(%q: memref<16x8xf32, strided<[16, 1]>>, %k: memref<1x2x?x8xf32>, %s: memref<16x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  // expected-error @+1 {{needs tiles of static shape and identity layout, got 'memref<16x8xf32, strided<[16, 1]>>'}}
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xf32, strided<[16, 1]>>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}

// -----

func.func @strided_rows(%s: memref<16x32xf32>, %v: memref<1x2x64x8xf32>, %b: index, %g: index, %start: index,
                        %rows: index, %cols: index, %m: memref<16xf32, strided<[2]>>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{needs tiles of static shape and identity layout, got 'memref<16xf32, strided<[2]>>'}}
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xf32>, memref<16xf32, strided<[2]>>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

func.func @strided_values(%s: memref<16x32xf32>, %v: memref<1x2x64x8xf32, strided<[1024, 512, 8, 2]>>, %b: index, %g: index, %start: index,
                          %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  // expected-error @+1 {{needs value rows with unit stride, got 'memref<1x2x64x8xf32, strided<[1024, 512, 8, 2]>>'}}
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xf32, strided<[1024, 512, 8, 2]>>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// A 16-bit query tile is the tensor-core GPU kernels' form: the CPU
// lowerings read the query tile in f32.

func.func @query_tile_16(%q: memref<16x8xbf16>, %k: memref<1x2x?x8xbf16>, %s: memref<16x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  // expected-error @+1 {{kvattn-lower-tile-to-vectors reads the query tile in f32 (16-bit query tiles are the tensor-core GPU kernels'), got 'memref<16x8xbf16>'}}
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<16x8xbf16>, memref<1x2x?x8xbf16>, memref<16x32xf32>
  return
}
