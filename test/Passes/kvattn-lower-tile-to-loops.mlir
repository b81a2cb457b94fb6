// RUN: kvattn-opt %s -split-input-file -kvattn-lower-tile-to-loops -cse | FileCheck %s --enable-var-scope

// CHECK-LABEL: func @init
// CHECK-DAG:     %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           memref.store %[[NEGINF]], %{{.*}}[%[[R]]] : memref<16xf32>
// CHECK:           memref.store %[[ZERO]], %{{.*}}[%[[R]]] : memref<16xf32>
// CHECK:           scf.for %[[D:.*]] =
// CHECK:             memref.store %[[ZERO]], %{{.*}}[%[[R]], %[[D]]] : memref<16x8xf32>
// CHECK-NOT:     kvattn.tile
func.func @init(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  kvattn.tile.init %m, %l, %acc : memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// Scores: an f32 dot product over D (reassociable, so it vectorises), the
// scale, the softcap through tanh, and -inf in the columns past the keys.

// CHECK-LABEL: func @qk
// CHECK-SAME:    %[[ROWS:[^:]+]]: index, %{{[^:]+}}: index)
// CHECK:         scf.for %[[R:.*]] = %{{.*}} to %[[ROWS]]
// CHECK:           scf.for %[[C:.*]] = %{{.*}} to %[[COLS:[^ ]+]]
// CHECK:             %[[DOT:.*]] = scf.for {{.*}} iter_args
// CHECK:               %[[K:.*]] = memref.load %{{.*}} : memref<1x2x?x8xf16>
// CHECK:               %[[KF:.*]] = arith.extf %[[K]] : f16 to f32
// CHECK:               arith.mulf %{{.*}}, %[[KF]] fastmath<reassoc,contract>
// CHECK:               arith.addf {{.*}} fastmath<reassoc,contract>
// CHECK:             %[[S:.*]] = arith.mulf %[[DOT]], %{{.*}} : f32
// CHECK:             %[[T:.*]] = math.tanh
// CHECK:             arith.mulf {{.*}}%[[T]]
// CHECK:           scf.for %{{.*}} = %[[COLS]] to
// CHECK:             memref.store %{{.*}}, %{{.*}} : memref<16x32xf32>
func.func @qk(%q: memref<16x8xf32>, %k: memref<1x2x?x8xf16>, %s: memref<16x32xf32>, %b: index, %g: index, %start: index, %rows: index, %cols: index) {
  kvattn.tile.qk %q, %k[%b, %g, %start] size(%rows, %cols) into %s scale = 0.5 softcap = 20.0
      : memref<16x8xf32>, memref<1x2x?x8xf16>, memref<16x32xf32>
  return
}

// -----

// The mask compares positions and writes -inf where a key is forbidden.

// CHECK-LABEL: func @mask_offsets
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[QP:.*]] = arith.addi %{{.*}}, %[[R]]
// CHECK:           scf.for %[[C:.*]] =
// CHECK:             %[[J:.*]] = arith.addi %{{.*}}, %[[C]]
// CHECK:             %[[INLEN:.*]] = arith.cmpi slt, %[[J]], %{{.*}}
// CHECK:             %[[KP:.*]] = arith.addi %{{.*}}, %[[C]]
// CHECK:             %[[CAUSAL:.*]] = arith.cmpi sle, %[[KP]], %[[QP]]
// CHECK:             %[[A1:.*]] = arith.andi %[[INLEN]], %[[CAUSAL]]
// CHECK:             %[[DIST:.*]] = arith.subi %[[QP]], %[[KP]]
// CHECK:             %[[INWIN:.*]] = arith.cmpi slt, %[[DIST]], %{{.*}}
// CHECK:             %[[ALLOWED:.*]] = arith.andi %[[A1]], %[[INWIN]]
// CHECK:             %[[SC:.*]] = memref.load
// CHECK:             arith.select %[[ALLOWED]], %[[SC]], %{{.*}} : f32
func.func @mask_offsets(%s: memref<16x32xf32>, %b: index, %h: index, %qs: index, %ks: index,
                        %rows: index, %cols: index, %len: index, %qb: index, %kb: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) causal window = 8 : memref<16x32xf32>
  return
}

// -----

// Online softmax: the NaN-aware block maximum, the rescale factor, the
// probabilities written back over the scores, the rescaled accumulator.

// CHECK-LABEL: func @softmax
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[OLD:.*]] = memref.load %{{.*}}[%[[R]]] : memref<16xf32>
// CHECK:           %[[BMAX:.*]] = scf.for
// CHECK:             arith.maximumf
// CHECK:           %[[NEW:.*]] = arith.maximumf %[[OLD]], %[[BMAX]]
// CHECK:           %[[ANY:.*]] = arith.cmpf une, %[[NEW]]
// CHECK:           scf.if %[[ANY]] {
// CHECK:             %[[ALPHA:.*]] = math.exp
// CHECK:             scf.for
// CHECK:               math.exp
// CHECK:             arith.mulf %[[ALPHA]]
// CHECK:             memref.store %[[NEW]], %{{.*}}[%[[R]]] : memref<16xf32>
func.func @softmax(%s: memref<16x32xf32>, %v: memref<1x2x64x8xbf16>, %b: index, %g: index, %start: index,
                   %rows: index, %cols: index, %m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>) {
  kvattn.tile.softmax_update %s, %v[%b, %g, %start] size(%rows, %cols) state(%m, %l, %acc)
      : memref<16x32xf32>, memref<1x2x64x8xbf16>, memref<16xf32>, memref<16xf32>, memref<16x8xf32>
  return
}

// -----

// ALiBi: the row head's slope times the position distance |qp - kp| less
// the batch's reference distance (row relative, an exact integer
// difference), negated, is added to an allowed score; a forbidden one
// stays -inf.

// CHECK-LABEL: func @mask_alibi
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[QP:.*]] = arith.addi %{{.*}}, %[[R]]
// CHECK:           scf.for %[[C:.*]] =
// CHECK:             %[[J:.*]] = arith.addi %{{.*}}, %[[C]]
// CHECK:             arith.cmpi slt, %[[J]]
// CHECK:             %[[KP:.*]] = arith.addi %{{.*}}, %[[C]]
// CHECK:             %[[SC:.*]] = memref.load %{{.*}} : memref<16x32xf32>
// CHECK:             %[[SLOPE:.*]] = memref.load %{{.*}} : memref<2xf32>
// CHECK:             %[[D:.*]] = arith.subi %[[QP]], %[[KP]]
// CHECK:             %[[ND:.*]] = arith.subi %{{.*}}, %[[D]]
// CHECK:             %[[ABS:.*]] = arith.maxsi %[[D]], %[[ND]]
// CHECK:             %[[REL:.*]] = arith.subi %[[ABS]], %[[REF:[^ ]*]]
// CHECK:             %[[I:.*]] = arith.index_cast %[[REL]] : index to i64
// CHECK:             %[[F:.*]] = arith.sitofp %[[I]] : i64 to f32
// CHECK:             %[[NEG:.*]] = arith.negf %[[SLOPE]]
// CHECK:             %[[BIAS:.*]] = arith.mulf %[[NEG]], %[[F]]
// CHECK:             %[[BIASED:.*]] = arith.addf %[[SC]], %[[BIAS]]
// CHECK:             arith.select %{{.*}}, %[[BIASED]], %{{.*}} : f32
func.func @mask_alibi(%s: memref<16x32xf32>, %m: memref<2xf32>, %b: index, %h: index, %qs: index, %ks: index,
                      %rows: index, %cols: index, %len: index, %qb: index, %kb: index, %ref: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) alibi(%m, %ref : memref<2xf32>) : memref<16x32xf32>
  return
}

// -----

// Sinks: the head's sink z joins the denominator once: m = max(max, z),
// out = acc * exp(max - m) / (exp(max - m) * sum + exp(z - m)), lse =
// m + log(that sum), -inf only when m is.

// CHECK-LABEL: func @store_sinks
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[MAX:.*]] = memref.load %{{.*}} : memref<16xf32>
// CHECK:           %[[SUM:.*]] = memref.load %{{.*}} : memref<16xf32>
// CHECK:           %[[Z:.*]] = memref.load %{{.*}} : memref<2xf32>
// CHECK:           %[[EMPTY:.*]] = arith.cmpf oeq, %[[MAX]]
// CHECK:           %[[PEAK:.*]] = arith.maximumf %[[MAX]], %[[Z]]
// CHECK:           %[[KD:.*]] = arith.subf %[[MAX]], %[[PEAK]]
// CHECK:           %[[KW:.*]] = math.exp %[[KD]]
// CHECK:           %[[ZD:.*]] = arith.subf %[[Z]], %[[PEAK]]
// CHECK:           %[[ZW:.*]] = math.exp %[[ZD]]
// CHECK:           %[[SCALED:.*]] = arith.mulf %[[KW]], %[[SUM]]
// CHECK:           %[[TOTAL:.*]] = arith.addf %[[SCALED]], %[[ZW]]
// CHECK:           %[[INV:.*]] = arith.divf %[[KW]], %[[TOTAL]]
// CHECK:           %[[NONE:.*]] = arith.cmpf oeq, %[[PEAK]]
// CHECK:           scf.for
// CHECK:             %[[V:.*]] = arith.mulf %{{.*}}, %[[INV]]
// CHECK:             arith.select %[[EMPTY]], %{{.*}}, %[[V]]
// CHECK:           %[[LOG:.*]] = math.log %[[TOTAL]]
// CHECK:           %[[L:.*]] = arith.addf %[[PEAK]], %[[LOG]]
// CHECK:           %[[LSE:.*]] = arith.select %[[NONE]], %{{.*}}, %[[L]]
// CHECK:           memref.store %[[LSE]], %{{.*}} : memref<1x2x16xf32>
func.func @store_sinks(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x2x16x8xf16>,
                       %lse: memref<1x2x16xf32>, %z: memref<2xf32>, %b: index, %h: index, %start: index, %rows: index) {
  kvattn.tile.store state(%m, %l, %acc) into %out lse(%lse : memref<1x2x16xf32>) sinks(%z : memref<2xf32>) [%b, %h, %start] rows(%rows)
      : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x2x16x8xf16>
  return
}

// -----

// Sinks with ALiBi: the state is relative to c = -slope * d (f64); the sink
// joins out's normalisation as f32(z - c), and the lse is log-added from the
// sink's own logit and the keys' f32(max + log(sum) + c).

// CHECK-LABEL: func @store_sinks_alibi
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[MAX:.*]] = memref.load %{{.*}} : memref<16xf32>
// CHECK:           %[[SUM:.*]] = memref.load %{{.*}} : memref<16xf32>
// CHECK:           %[[Z:.*]] = memref.load %{{.*}} : memref<2xf32>
// CHECK:           %[[SLOPE:.*]] = memref.load %{{.*}} : memref<2xf32>
// CHECK:           %[[D:.*]] = arith.sitofp %{{.*}} : i64 to f64
// CHECK:           %[[NEG:.*]] = arith.negf %[[SLOPE]] : f32
// CHECK:           %[[NEG64:.*]] = arith.extf %[[NEG]] : f32 to f64
// CHECK:           %[[C:.*]] = arith.mulf %[[NEG64]], %[[D]] : f64
// CHECK:           %[[Z64:.*]] = arith.extf %[[Z]] : f32 to f64
// CHECK:           %[[ZREL64:.*]] = arith.subf %[[Z64]], %[[C]] : f64
// CHECK:           %[[ZREL:.*]] = arith.truncf %[[ZREL64]] : f64 to f32
// CHECK:           arith.maximumf %[[MAX]], %[[ZREL]]
// CHECK:           %[[LOG:.*]] = math.log %[[SUM]]
// CHECK:           %[[REL:.*]] = arith.addf %[[MAX]], %[[LOG]]
// CHECK:           %[[REL64:.*]] = arith.extf %[[REL]] : f32 to f64
// CHECK:           %[[KEYS64:.*]] = arith.addf %[[REL64]], %[[C]] : f64
// CHECK:           %[[KEYS:.*]] = arith.truncf %[[KEYS64]] : f64 to f32
// CHECK:           %[[KEYSLSE:.*]] = arith.select %{{.*}}, %{{.*}}, %[[KEYS]]
// CHECK:           %[[HI:.*]] = arith.maximumf %[[Z]], %[[KEYSLSE]]
// CHECK:           math.log
// CHECK:           memref.store %{{.*}}, %{{.*}} : memref<1x2x16xf32>
func.func @store_sinks_alibi(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x2x16x8xf16>,
                             %lse: memref<1x2x16xf32>, %z: memref<2xf32>, %a: memref<2xf32>, %d: index, %b: index, %h: index, %start: index, %rows: index) {
  kvattn.tile.store state(%m, %l, %acc) into %out lse(%lse : memref<1x2x16xf32>) sinks(%z : memref<2xf32>) alibi(%a, %d : memref<2xf32>) [%b, %h, %start] rows(%rows)
      : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x2x16x8xf16>
  return
}

// -----

// Epilogue: 0 and -inf for rows without an allowed key, else acc / sum and
// max + log(sum); the output is rounded to its element type.

// CHECK-LABEL: func @store
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[EMPTY:.*]] = arith.cmpf oeq
// CHECK:           scf.for
// CHECK:             %[[V:.*]] = arith.select %[[EMPTY]]
// CHECK:             %[[T:.*]] = arith.truncf %[[V]] : f32 to f16
// CHECK:             memref.store %[[T]], %{{.*}} : memref<1x2x16x8xf16>
// CHECK:           math.log
// CHECK:           memref.store %{{.*}} : memref<1x2x16xf32>
func.func @store(%m: memref<16xf32>, %l: memref<16xf32>, %acc: memref<16x8xf32>, %out: memref<1x2x16x8xf16>,
                 %lse: memref<1x2x16xf32>, %b: index, %h: index, %start: index, %rows: index) {
  kvattn.tile.store state(%m, %l, %acc) into %out lse(%lse : memref<1x2x16xf32>) [%b, %h, %start] rows(%rows)
      : memref<16xf32>, memref<16xf32>, memref<16x8xf32>, memref<1x2x16x8xf16>
  return
}

// -----

// A tree mask: the row's depth is a walk to the root through the parents
// (clamped into [-1, x - 1]), qp = q_base + depth; a draft key walks from
// the row towards it (ancestry), a cache key walks nowhere.

// CHECK-LABEL: func @mask_tree
// CHECK:         scf.for %[[R:.*]] =
// CHECK:           %[[ROW:.*]] = arith.addi %{{.*}}, %[[R]]
// CHECK:           %[[DEPTH:.*]]:2 = scf.while (%[[X:.*]] = %[[ROW]], %{{.*}} = %{{.*}})
// CHECK:             arith.cmpi sgt, %[[X]]
// CHECK:             arith.cmpi sge, %[[X]]
// CHECK:             scf.condition
// CHECK:             memref.load %{{.*}} : memref<?xi32>
// CHECK:             arith.minsi
// CHECK:             arith.maxsi
// CHECK:           scf.for %[[C:.*]] =
// CHECK:             %[[J:.*]] = arith.addi %{{.*}}, %[[C]]
// CHECK:             %[[DRAFT:.*]] = arith.cmpi sge, %[[J]], %{{.*}}
// CHECK:             %[[TARGET:.*]] = arith.select %[[DRAFT]]
// CHECK:             %[[WALK:.*]]:2 = scf.while
// CHECK:             %[[CACHE:.*]] = arith.cmpi slt, %[[J]]
// CHECK:             %[[ANC:.*]] = arith.cmpi eq, %[[WALK]]#0, %[[TARGET]]
// CHECK:             arith.ori %[[CACHE]], %[[ANC]]
// CHECK:             arith.subi %{{.*}}, %[[WALK]]#1
// CHECK:             arith.select %[[DRAFT]]
func.func @mask_tree(%s: memref<16x32xf32>, %p: memref<?xi32>, %b: index, %h: index, %qs: index, %ks: index,
                     %rows: index, %cols: index, %len: index, %qb: index, %kb: index, %row0: index, %draft: index) {
  kvattn.tile.mask %s[%b, %h, %qs, %ks] size(%rows, %cols) kv_len(%len) offsets(%qb, %kb) tree(%p, %row0, %draft : memref<?xi32>) causal : memref<16x32xf32>
  return
}

// -----

// RoPE's record is checked before the program runs: the loops read nothing
// of it, and the op leaves no code.
// CHECK-LABEL: func @key_record
// CHECK-NOT: kvattn.tile.key_record
// CHECK-NOT: memref.load
// CHECK: return
func.func @key_record(%r: memref<2x40xi32>) {
  kvattn.tile.key_record %r : memref<2x40xi32>
  return
}
