// The column form (few-rows=0: every program, whatever its row count):
// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts="vector-width=16 few-rows=0" -kvattn-lower-tile-to-vectors -cse | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts="vector-width=4 few-rows=0" -kvattn-lower-tile-to-vectors -cse | FileCheck %s --check-prefix=W4
// The default: programs of at most 8 rows run the few-rows form, the others
// the column form, chosen at run time from the row count.
// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts=vector-width=16 -kvattn-lower-tile-to-vectors -cse | FileCheck %s --check-prefix=FEW --enable-var-scope
// Paged caches read through the table everywhere, prefetch dropped:
// RUN: kvattn-opt %s -split-input-file -kvattn-assign-vector-layouts="vector-width=16 few-rows=0" -kvattn-lower-tile-to-vectors=paged-blocks=false -cse | FileCheck %s --check-prefix=OFF

// Q.K^T as outer products over the transposed tiles: 64 rows are four row
// vectors of 16, six keys per register tile (24 accumulators), one
// broadcast key element per four FMAs; scaled, then -inf past the keys.

// CHECK-LABEL: func @qk
// CHECK-SAME:    %[[COLS:[^:]+]]: index)
// CHECK-DAG:     %[[QT:.*]] = memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [8, 64], strides: [64, 1]
// CHECK-DAG:     %[[ST:.*]] = memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [32, 64], strides: [64, 1]
// CHECK:         scf.for
// CHECK:           scf.for %{{.*}} step %c6
// CHECK:             %[[ACC:.*]]:24 = scf.for %[[X:.*]] = %{{.*}} to %c8 step %c1 iter_args
// CHECK:               %[[Q0:.*]] = vector.load %[[QT]][%[[X]], %{{.*}}] : memref<8x64xf32>, vector<16xf32>
// CHECK:               %[[K:.*]] = memref.load %{{.*}} : memref<1x2x?x8xf16>
// CHECK:               %[[KF:.*]] = arith.extf %[[K]] : f16 to f32
// CHECK:               %[[KB:.*]] = vector.broadcast %[[KF]] : f32 to vector<16xf32>
// CHECK:               vector.fma %[[Q0]], %[[KB]], %{{.*}} : vector<16xf32>
// CHECK:             arith.mulf %[[ACC]]#0, %{{.*}} : vector<16xf32>
// CHECK:             vector.store %{{.*}}, %[[ST]]
// CHECK:         scf.for %{{.*}} = %[[COLS]] to %c32
// CHECK:           vector.store %{{.*}}, %[[ST]]{{.*}} : memref<32x64xf32>, vector<16xf32>
// CHECK-NOT:     kvattn.tile

// W4-LABEL: func @qk
// W4:         vector.fma {{.*}} : vector<4xf32>
func.func @qk(%q: memref<64x8xf32>, %k: memref<1x2x?x8xf16>, %s: memref<64x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<64x8xf32>, memref<1x2x?x8xf16>, memref<64x32xf32>
  return
}

// -----

// The softcap is vector arithmetic too: tanh becomes a polynomial (no
// math.tanh left for libm).

// CHECK-LABEL: func @qk_softcap
// CHECK-NOT:     math.tanh
// CHECK:         return
func.func @qk_softcap(%q: memref<16x8xf32>, %k: memref<1x2x?x8xf32>, %s: memref<16x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5 softcap = 20.0
      : memref<16x8xf32>, memref<1x2x?x8xf32>, memref<16x32xf32>
  return
}

// -----

// The offset-form mask is vector arithmetic over a row vector's positions:
// q_base + r0 + iota, compared with each key's position.

// CHECK-LABEL: func @mask_offsets
// CHECK:         %[[IOTA:.*]] = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : vector<16xi64>
// CHECK:         scf.for %[[R0:.*]] =
// CHECK:           arith.addi %{{.*}}, %[[IOTA]] : vector<16xi64>
// CHECK:           %[[QP:.*]] = arith.addi
// CHECK:           scf.for %[[C:.*]] =
// CHECK:             %[[INLEN:.*]] = arith.cmpi slt
// CHECK:             %[[KP:.*]] = vector.broadcast %{{.*}} : i64 to vector<16xi64>
// CHECK:             %[[CAUSAL:.*]] = arith.cmpi sle, %[[KP]], %[[QP]] : vector<16xi64>
// CHECK:             arith.subi %[[QP]], %[[KP]] : vector<16xi64>
// CHECK:             %[[S:.*]] = vector.load
// CHECK:             arith.select %{{.*}}, %[[S]], %{{.*}} : vector<16xi1>, vector<16xf32>
func.func @mask_offsets(%s: memref<16x32xf32>, %b: index, %h: index, %qs: index, %ks: index,
                        %rows: index, %cols: index, %len: index, %qb: index, %kb: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) causal window = 8 : memref<16x32xf32>
  return
}

// -----

// GQA packing: row r is query row (q_start + r) / G.

// CHECK-LABEL: func @mask_packed
// CHECK:         %[[G:.*]] = arith.constant dense<4> : vector<16xi64>
// CHECK:         arith.divui %{{.*}}, %[[G]] : vector<16xi64>
func.func @mask_packed(%s: memref<16x32xf32>, %b: index, %h: index, %qs: index, %ks: index,
                       %rows: index, %cols: index, %len: index, %qb: index, %kb: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) causal group = 4 : memref<16x32xf32>
  return
}

// -----

// ALiBi in vectors: the row vector's negated slopes once per row vector
// (unpacked: the head's, broadcast), then per key -slope * |qp - kp| by one
// FMA into the scores before the select.

// CHECK-LABEL: func @mask_alibi
// CHECK:         scf.for %[[R0:.*]] =
// CHECK:           arith.addi %{{.*}}, %{{.*}} : vector<16xi64>
// CHECK:           %[[QP:.*]] = arith.addi
// CHECK:           %[[SLOPE:.*]] = memref.load %{{.*}} : memref<2xf32>
// CHECK:           %[[NEG:.*]] = arith.negf %[[SLOPE]] : f32
// CHECK:           %[[NEGS:.*]] = vector.broadcast %[[NEG]] : f32 to vector<16xf32>
// CHECK:           scf.for %[[C:.*]] =
// CHECK:             %[[KP:.*]] = vector.broadcast %{{.*}} : i64 to vector<16xi64>
// CHECK:             %[[S:.*]] = vector.load
// CHECK:             %[[D:.*]] = arith.subi %[[QP]], %[[KP]] : vector<16xi64>
// CHECK:             %[[ND:.*]] = arith.subi %[[KP]], %[[QP]] : vector<16xi64>
// CHECK:             %[[ABS:.*]] = arith.maxsi %[[D]], %[[ND]] : vector<16xi64>
// CHECK:             %[[REL:.*]] = arith.subi %[[ABS]], %{{.*}} : vector<16xi64>
// CHECK:             %[[F:.*]] = arith.sitofp %[[REL]] : vector<16xi64> to vector<16xf32>
// CHECK:             %[[B:.*]] = vector.fma %[[NEGS]], %[[F]], %[[S]] : vector<16xf32>
// CHECK:             arith.select %{{.*}}, %[[B]], %{{.*}} : vector<16xi1>, vector<16xf32>
func.func @mask_alibi(%s: memref<16x32xf32>, %m: memref<2xf32>, %b: index, %h: index, %qs: index, %ks: index,
                      %rows: index, %cols: index, %len: index, %qb: index, %kb: index, %ref: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) alibi(%m, %ref : memref<2xf32>) causal : memref<16x32xf32>
  return
}

// -----

// Packed ALiBi: lane l of a row vector is head h + (q_start + r0 + l) % G,
// its slope inserted lane by lane.

// CHECK-LABEL: func @mask_alibi_packed
// CHECK-COUNT-16: vector.insert %{{.*}}, %{{.*}} [{{[0-9]+}}] : f32 into vector<16xf32>
// CHECK:         vector.fma
func.func @mask_alibi_packed(%s: memref<16x32xf32>, %m: memref<8xf32>, %b: index, %h: index, %qs: index, %ks: index,
                             %rows: index, %cols: index, %len: index, %qb: index, %kb: index, %ref: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) alibi(%m, %ref : memref<8xf32>) causal group = 4 : memref<16x32xf32>
  return
}

// -----

// Explicit positions: element by element on the transposed scores.

// CHECK-LABEL: func @mask_positions
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           scf.for %[[C:.*]] =
// CHECK:             memref.load %{{.*}}[%[[C]], %[[R]]] : memref<32x16xf32>
// CHECK:             arith.select {{.*}} : f32
// CHECK:             memref.store %{{.*}}[%[[C]], %[[R]]] : memref<32x16xf32>
func.func @mask_positions(%s: memref<16x32xf32>, %b: index, %h: index, %qs: index, %ks: index,
                          %rows: index, %cols: index, %len: index, %qp: memref<1x16xi32>, %kp: memref<1x32xi32>) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) positions(%qp, %kp : memref<1x16xi32>, memref<1x32xi32>) causal : memref<16x32xf32>
  return
}

// -----

// The online softmax is vertical (one lane per row): the NaN-aware block
// maximum, alpha = 1 and p = 0 where a row has no allowed key yet; alpha
// goes to a scratch row beside the state. Then P.V on the row-major
// accumulator, vectors over the value dimension (Dv = 8: one vector of 8),
// four rows per register tile: the accumulator rows rescaled by alpha, one
// vector load of a value row (bf16 extended in registers) per key, one
// broadcast probability per row and key, each FMA masked by p != 0.

// CHECK-LABEL: func @softmax
// CHECK:         %[[ALPHAS:.*]] = memref.alloca() : memref<16xf32>
// CHECK:         scf.for %[[R0:.*]] =
// CHECK:           %[[OLD:.*]] = vector.load %{{.*}}[%[[R0]]] : memref<16xf32>, vector<16xf32>
// CHECK:           scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:             arith.maximumf {{.*}} : vector<16xf32>
// CHECK:           %[[BMAX:.*]] = scf.for {{.*}} -> (vector<16xf32>)
// CHECK:           %[[NEW:.*]] = arith.maximumf %[[OLD]], %[[BMAX]] : vector<16xf32>
// CHECK:           %[[ANY:.*]] = arith.cmpf une, %[[NEW]]
// CHECK:           %[[ALPHA:.*]] = arith.select %[[ANY]]
// CHECK:           scf.for {{.*}} -> (vector<16xf32>)
// CHECK-NOT:         math.exp
// CHECK:             arith.select %[[ANY]]
// CHECK:           arith.select %[[ANY]], %[[NEW]], %[[OLD]]
// CHECK:           vector.store %[[ALPHA]], %[[ALPHAS]][%[[R0]]]
// CHECK:         scf.for %[[R:.*]] = %{{.*}} step %c4
// CHECK:           scf.for %[[X0:.*]] =
// CHECK:             %[[A0:.*]] = memref.load %[[ALPHAS]][%[[R]]]
// CHECK:             %[[A0B:.*]] = vector.broadcast %[[A0]] : f32 to vector<8xf32>
// CHECK:             %[[ACC0:.*]] = vector.load %{{.*}}[%[[R]], %[[X0]]] : memref<16x8xf32>, vector<8xf32>
// CHECK:             arith.mulf %[[A0B]], %[[ACC0]]
// CHECK:             scf.for %[[C:.*]] = {{.*}} iter_args
// CHECK:               %[[V:.*]] = vector.load %{{.*}} : memref<1x2x64x8xbf16>, vector<8xbf16>
// CHECK:               %[[VF:.*]] = arith.extf %[[V]] : vector<8xbf16> to vector<8xf32>
// CHECK:               %[[P:.*]] = memref.load %{{.*}}[%[[C]], %[[R]]] : memref<32x16xf32>
// CHECK:               %[[PB:.*]] = vector.broadcast %[[P]] : f32 to vector<8xf32>
// CHECK:               %[[NZ:.*]] = arith.cmpf une, %[[PB]]
// CHECK:               %[[FMA:.*]] = vector.fma %[[PB]], %[[VF]], %[[A:.*]] : vector<8xf32>
// CHECK:               arith.select %[[NZ]], %[[FMA]], %[[A]]
// CHECK:             vector.store %{{.*}} : memref<16x8xf32>, vector<8xf32>
func.func @softmax(%s: memref<16x32xf32>, %v: memref<1x2x64x8xbf16>, %b: index, %g: index, %start: index,
                   %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xbf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// A full block (all_allowed true) multiplies every value by its
// probability; a partial one keeps the p != 0 test.

// CHECK-LABEL: func @softmax_full_block
// CHECK-SAME:    %[[FULL:[^:]+]]: i1
// CHECK:         scf.if %[[FULL]] {
// CHECK:           scf.for {{.*}} iter_args
// CHECK-NOT:         arith.cmpf une
// CHECK:             vector.fma
// CHECK-NOT:         arith.select
// CHECK:             scf.yield
// CHECK:         } else {
// CHECK:           scf.for {{.*}} iter_args
// CHECK:             arith.cmpf une
// CHECK:             vector.fma
// CHECK:             arith.select
// CHECK:             scf.yield
func.func @softmax_full_block(%s: memref<16x32xf32>, %v: memref<1x2x64x8xf32>, %b: index, %g: index, %start: index,
                   %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %full: i1) {
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] all_allowed(%full) size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xf32>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// Paged values (paged-blocks, the default): P.V reads the block once per
// row tile, so the block's rows are first copied into a contiguous
// [BN, Dv] scratch, with one block-table lookup per page the block touches
// (pages of 16 rows, rows Hkv * Dv elements apart), and P.V reads the
// copy: no lookup in its loop. With paged-blocks=false every key row of
// P.V is read through the table, one lookup per key.

// CHECK-LABEL: func @softmax_paged
// CHECK-SAME:    %[[V:[^:]+]]: memref<8x16x2x8xf32>, %[[BT:[^:]+]]: memref<1x4xi32>, %[[B:[^:]+]]: index, %[[G:[^:]+]]: index, %[[START:[^:]+]]: index, %{{[^:]+}}: index, %[[COLS:[^:]+]]: index
// CHECK:         %[[PACK:.*]] = memref.alloca() : memref<32x8xf32>
// CHECK:         %[[END:.*]] = arith.addi %[[START]], %[[COLS]]
// CHECK:         %[[ANY:.*]] = arith.cmpi sgt, %[[COLS]], %c0
// CHECK:         scf.if %[[ANY]] {
// CHECK:           %[[FIRST:.*]] = arith.divui %[[START]], %c16
// CHECK:           %[[LAST:.*]] = arith.ceildivui %[[END]], %c16
// CHECK:           scf.for %[[SLOT:.*]] = %[[FIRST]] to %[[LAST]] step %c1 {
// CHECK:             %[[ID:.*]] = memref.load %[[BT]][%[[B]], %[[SLOT]]] : memref<1x4xi32>
// CHECK:             %[[PAGE:.*]] = arith.index_cast %[[ID]]
// CHECK:             %[[BASE:.*]] = arith.muli %[[SLOT]], %c16
// CHECK:             %[[LO:.*]] = arith.maxui %[[BASE]], %[[START]]
// CHECK:             %[[HI:.*]] = arith.minui %{{.*}}, %[[END]]
// CHECK:             scf.for %[[J:.*]] = %[[LO]] to %[[HI]] step %c1 {
// CHECK-NOT:           memref.load
// CHECK:               %[[IN:.*]] = arith.subi %[[J]], %[[BASE]]
// CHECK:               %[[C:.*]] = arith.subi %[[J]], %[[START]]
// CHECK:               %[[ROW:.*]] = vector.load %[[V]][%[[PAGE]], %[[IN]], %[[G]], %c0] : memref<8x16x2x8xf32>, vector<8xf32>
// CHECK:               vector.store %[[ROW]], %[[PACK]][%[[C]], %c0] : memref<32x8xf32>, vector<8xf32>
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             scf.for %[[K:.*]] = %c0 to %[[COLS]] step %c1 iter_args
// CHECK-NOT:           memref<1x4xi32>
// CHECK:               vector.load %[[PACK]][%[[K]], %{{.*}}] : memref<32x8xf32>, vector<8xf32>
// CHECK-NOT:           memref<1x4xi32>
// CHECK:               vector.fma
// CHECK-NOT:           memref<1x4xi32>
// CHECK:               scf.yield

// OFF-LABEL: func @softmax_paged
// OFF-NOT:       memref.alloca() : memref<32x8xf32>
// OFF:           scf.for %{{.*}} = %c0 to %{{.*}} step %c1 iter_args
// OFF:             memref.load %{{.*}} : memref<1x4xi32>
// OFF-NOT:         memref.load %{{.*}} : memref<1x4xi32>
// OFF:             vector.load %{{.*}} : memref<8x16x2x8xf32>, vector<8xf32>
// OFF:             vector.fma
// OFF:             scf.yield
func.func @softmax_paged(%s: memref<16x32xf32>, %v: memref<8x16x2x8xf32>, %bt: memref<1x4xi32>, %b: index, %g: index, %start: index,
                   %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] pages(%bt : memref<1x4xi32>) size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<8x16x2x8xf32>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// The few-rows form reads the values once per row tile of 4: the block is
// copied only when the program has more rows than one tile (5 to 8).

// FEW-LABEL: func @softmax_paged_few_rows
// FEW-SAME:    %[[ROWS:[^:]+]]: index, %{{[^:]+}}: index, %{{[^:]+}}: memref<16xf32>
// FEW:         %[[FEW:.*]] = arith.cmpi ule, %[[ROWS]], %c8
// FEW:         scf.if %[[FEW]] {
// FEW:           %[[SEVERAL:.*]] = arith.cmpi ugt, %[[ROWS]], %c4
// FEW:           scf.if %[[SEVERAL]] {
// FEW:             scf.for
// FEW:               memref.load %{{.*}} : memref<1x4xi32>
// FEW:               scf.for
// FEW:                 vector.load %{{.*}} : memref<8x16x2x16xbf16>, vector<16xbf16>
// FEW:                 vector.store %{{.*}} : memref<32x16xbf16>, vector<16xbf16>
// FEW:           } else {
// FEW:             memref.load %{{.*}} : memref<1x4xi32>
// FEW:             vector.load %{{.*}} : memref<8x16x2x16xbf16>
func.func @softmax_paged_few_rows(%s: memref<16x32xf32>, %v: memref<8x16x2x16xbf16>, %bt: memref<1x4xi32>, %b: index, %g: index, %start: index,
                   %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x16xf32>) {
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] pages(%bt : memref<1x4xi32>) size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<8x16x2x16xbf16>, memref<16xf32>, memref<16xf32>, memref<16x16xf32>
  return
}

// -----

// tile.prefetch of a paged cache: each 64-byte line (32 bf16) of the
// announced rows, one block-table lookup per page. A contiguous cache's
// prefetch (and every prefetch with paged-blocks=false) is dropped.

// CHECK-LABEL: func @prefetch_paged
// CHECK-SAME:    %[[K:[^:]+]]: memref<8x16x2x64xbf16>, %[[BT:[^:]+]]: memref<1x4xi32>, %[[B:[^:]+]]: index, %[[G:[^:]+]]: index
// CHECK:         scf.if
// CHECK:           scf.for %[[SLOT:.*]] =
// CHECK:             memref.load %[[BT]][%[[B]], %[[SLOT]]]
// CHECK:             scf.for
// CHECK-NOT:           memref.load
// CHECK:               memref.prefetch %[[K]][%{{.*}}, %{{.*}}, %[[G]], %c0], read, locality<3>, data : memref<8x16x2x64xbf16>
// CHECK-NEXT:          memref.prefetch %[[K]][%{{.*}}, %{{.*}}, %[[G]], %c32], read, locality<3>, data : memref<8x16x2x64xbf16>
// CHECK-NOT:           memref.prefetch
// CHECK-LABEL: func @prefetch_contiguous
// CHECK-NOT:     memref.prefetch
// CHECK:         return

// OFF-LABEL: func @prefetch_paged
// OFF-NOT:       memref.prefetch
// OFF:           return
func.func @prefetch_paged(%k: memref<8x16x2x64xbf16>, %bt: memref<1x4xi32>, %b: index, %g: index, %start: index, %cols: index) {
  kvattn.tile.prefetch %k[%b, %g, %start] pages(%bt : memref<1x4xi32>) size(%cols) : memref<8x16x2x64xbf16>
  return
}
func.func @prefetch_contiguous(%k: memref<1x2x?x64xbf16>, %b: index, %g: index, %start: index, %cols: index) {
  kvattn.tile.prefetch %k[%b, %g, %start] size(%cols) : memref<1x2x?x64xbf16>
  return
}

// -----

// load_q once per program, element by element, through the transposed
// view; store reads the row-major accumulator.

// CHECK-LABEL: func @load_store
// CHECK:         memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [8, 16], strides: [16, 1]
// CHECK:         memref.store %{{.*}} : memref<8x16xf32>
// CHECK:         memref.load %{{.*}} : memref<16x8xf32>
// CHECK:         math.log
func.func @load_store(%qin: memref<1x2x16x8xf32>, %q: memref<16x8xf32>, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x2x16x8xf16>,
                      %lse: memref<1x2x16xf32>, %b: index, %h: index, %start: index, %rows: index) {
  kvattn.tile.load_q %qin[%b, %h, %start] rows(%rows) into %q : memref<1x2x16x8xf32>, memref<16x8xf32>
  kvattn.tile.store state(%m, %l, %acc) into %out lse(%lse : memref<1x2x16xf32>) [%b, %h, %start] rows(%rows)
      : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x2x16x8xf16>
  return
}


// -----

// The few-rows form of tile.qk: dot products along D with vectors of 16
// elements of D (bf16 keys extended in registers, the last 8 of D = 24 by
// masked loads), 16 accumulators reduced by a transpose (shuffles) into
// one vector of scores, stored into the row-major score tile. A program of
// one row takes 16 keys per register tile; two rows 8 keys each; more rows
// 4 x 4. The column form stays for programs of more than 8 rows.

// FEW-LABEL: func @qk_few_rows
// FEW-SAME:    %[[ROWS:[^:]+]]: index, %{{[^:]+}}: index)
// FEW:         %[[FEW:.*]] = arith.cmpi ule, %[[ROWS]], %c8
// FEW:         scf.if %[[FEW]] {
// FEW:           %[[ONE:.*]] = arith.cmpi eq, %[[ROWS]], %c1
// FEW:           scf.if %[[ONE]] {
// FEW:             %[[ACC:.*]]:16 = scf.for {{.*}} step %c16 iter_args
// FEW:               vector.load %{{.*}} : memref<64x24xf32>, vector<16xf32>
// FEW:               vector.load %{{.*}} : memref<1x2x?x24xbf16>, vector<16xbf16>
// FEW:               arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// FEW:               vector.fma %{{.*}} : vector<16xf32>
// FEW:             vector.maskedload %{{.*}} : memref<1x2x?x24xbf16>, vector<16xi1>, vector<16xbf16> into vector<16xbf16>
// FEW:             vector.shuffle
// FEW:             vector.store %{{.*}} : memref<64x32xf32>, vector<16xf32>
// FEW:           } else {
// FEW:             arith.cmpi eq, %[[ROWS]], %c2
// FEW:             vector.store %{{.*}} : memref<64x32xf32>, vector<8xf32>
// FEW:           } else {
// FEW:             vector.store %{{.*}} : memref<64x32xf32>, vector<4xf32>
// FEW:         } else {
// FEW:           memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [24, 64], strides: [64, 1]
func.func @qk_few_rows(%q: memref<64x24xf32>, %k: memref<1x2x?x24xbf16>, %s: memref<64x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5
      : memref<64x24xf32>, memref<1x2x?x24xbf16>, memref<64x32xf32>
  return
}

// -----

// The few-rows form of the mask: the offset form with vectors over keys,
// one row at a time, on the row-major score tile.

// FEW-LABEL: func @mask_few_rows
// FEW:         scf.if
// FEW:           scf.for %[[R:.*]] =
// FEW:             scf.for %[[C0:.*]] = %c0 to %c32 step %c16
// FEW:               arith.cmpi sle, %{{.*}} : vector<16xi64>
// FEW:               vector.load %{{.*}}[%[[R]], %[[C0]]] : memref<16x32xf32>, vector<16xf32>
// FEW:               arith.select %{{.*}} : vector<16xi1>, vector<16xf32>
// FEW:         } else {
func.func @mask_few_rows(%s: memref<16x32xf32>, %b: index, %h: index, %qs: index, %ks: index,
                         %rows: index, %cols: index, %len: index, %qb: index, %kb: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) causal group = 4 : memref<16x32xf32>
  return
}

// -----

// The few-rows form of the online softmax: per row, the block maximum over
// vectors of keys (a reduction), p = exp(s - max) as a polynomial, the
// block sum by a fixed tree of halves; P.V reads p from the row-major tile.

// FEW-LABEL: func @softmax_few_rows
// FEW:         scf.if
// FEW:           scf.for %[[R:.*]] =
// FEW:             vector.reduction <maximumf>, %{{.*}} : vector<16xf32> into f32
// FEW-NOT:         math.exp {{.*}} : vector
// FEW:             vector.extract_strided_slice %{{.*}} {offsets = [0], sizes = [8], strides = [1]}
// FEW:           scf.for {{.*}} iter_args
// FEW:             memref.load %{{.*}} : memref<16x32xf32>
// FEW:             vector.fma
// FEW:         } else {
func.func @softmax_few_rows(%s: memref<16x32xf32>, %v: memref<1x2x64x8xf32>, %b: index, %g: index, %start: index,
                            %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xf32>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}
