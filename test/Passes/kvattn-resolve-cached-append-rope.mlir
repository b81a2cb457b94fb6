// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-resolve-cached-append | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-resolve-cached-append=fuse-rope=false | FileCheck %s --check-prefix=NOFUSE --enable-var-scope
//
// -kvattn-resolve-cached-append recognises RoPE applied by the framework
// (as torch-mlir lowers HF transformers' models) and moves it into
// kvattn.attention / kvattn.append where the positions provably agree
// (docs/passes.md, "RoPE applied by the framework"); numerics in
// test/Numerics/resolve-rope.mlir.

// HF transformers' apply_rotary_pos_emb on the query and on the new keys,
// cos/sin from position_ids = pos[b] + i (the cache write's positions) and
// a constant inv_freq equal to f32(10000^(-2k/8)): the rotations move into
// the attention (the un-rotated query at q_offset = pos) and the append
// (the un-rotated keys at pos[b] + t); the framework's rotation is erased.

// CHECK-LABEL: func @hf_append
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x2x8xf32>, %[[KC:[^:]+]]: tensor<1x2x8x8xf32>
// CHECK-SAME:    %[[KN:[^:]+]]: tensor<1x2x2x8xf32>, %{{[^:]+}}: tensor<1x2x2x8xf32>, %[[POS:[^:]+]]: tensor<1xi64>
// CHECK-NOT:     linalg.
// CHECK:         %[[K:.*]] = kvattn.append %[[KN]] into %[[KC]] at %[[POS]] rope = <rotary_dim = 8, theta = 1.000000e+04> :
// CHECK:         kvattn.attention %[[Q]], %[[K]], %{{.*}} q_offset(%[[POS]] : tensor<1xi64>) kv_len(%{{.*}}) causal rope = <rotary_dim = 8, theta = 1.000000e+04> :
// CHECK-NOT:     linalg.
// NOFUSE-LABEL: func @hf_append
// NOFUSE:         kvattn.append %{{.*}} into
// NOFUSE-NOT:     rope
// NOFUSE:         kvattn.attention
// NOFUSE-NOT:     rope
func.func @hf_append(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vnew: tensor<1x2x2x8xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x8xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<1xi64>) outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %invb0 = tensor.empty() : tensor<1x4x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<4xf32>) outs(%invb0 : tensor<1x4x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x4x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x4x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x4xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x4x2xf32>) outs(%fr3 : tensor<1x2x4xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x8xf32>
  %cs0 = tensor.empty() : tensor<1x2x8xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x8xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qe = tensor.empty() : tensor<1x2x2x4xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x4xf32>) outs(%qe : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %qcE = tensor.empty() : tensor<1x2x2x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %v = kvattn.append %vnew into %vcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// Decode without a causal rule, bf16 (extf, f32 arithmetic, truncf),
// partial rotary (4 of 8 columns), cos/sin gathered from [16, 2] tables at
// position_ids: the tables become rotary_cos / rotary_sin of both ops, and
// the query gets q_offset = pos (no mask reads it; RoPE does).

// CHECK-LABEL: func @tables_decode
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x1x8xbf16>
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<1xi64>, %[[COS:[^:]+]]: tensor<16x2xf32>, %[[SIN:[^:]+]]: tensor<16x2xf32>
// CHECK:         %[[K:.*]] = kvattn.append {{.*}} rope = <rotary_dim = 4> rotary_cos(%[[COS]] : tensor<16x2xf32>) rotary_sin(%[[SIN]] : tensor<16x2xf32>) :
// CHECK:         kvattn.attention %[[Q]], %[[K]], %{{.*}} q_offset(%[[POS]] : tensor<1xi64>) kv_len(%{{.*}}) rope = <rotary_dim = 4> rotary_cos(%[[COS]] : tensor<16x2xf32>) rotary_sin(%[[SIN]] : tensor<16x2xf32>) :
func.func @tables_decode(%q: tensor<1x2x1x8xbf16>, %kcache: tensor<1x1x8x8xbf16>,
    %vcache: tensor<1x1x8x8xbf16>, %knew: tensor<1x1x1x8xbf16>, %vn: tensor<1x1x1x8xbf16>,
    %pos: tensor<1xi64>, %cos_table: tensor<16x2xf32>, %sin_table: tensor<16x2xf32>) -> tensor<1x2x1x8xbf16> {
  %pidse = tensor.empty() : tensor<1x1xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<1xi64>) outs(%pidse : tensor<1x1xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<1x1xi64>
  %cosg0 = tensor.empty() : tensor<1x1x2xf32>
  %cosg = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x1xi64>) outs(%cosg0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %k = linalg.index 2 : index
    %v = tensor.extract %cos_table[%row, %k] : tensor<16x2xf32>
    linalg.yield %v : f32
  } -> tensor<1x1x2xf32>
  %cosc = tensor.concat dim(2) %cosg, %cosg : (tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x4xf32>
  %cos = tensor.expand_shape %cosc [[0], [1, 2], [3]] output_shape [1, 1, 1, 4] : tensor<1x1x4xf32> into tensor<1x1x1x4xf32>
  %sing0 = tensor.empty() : tensor<1x1x2xf32>
  %sing = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x1xi64>) outs(%sing0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %k = linalg.index 2 : index
    %v = tensor.extract %sin_table[%row, %k] : tensor<16x2xf32>
    linalg.yield %v : f32
  } -> tensor<1x1x2xf32>
  %sinc = tensor.concat dim(2) %sing, %sing : (tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x4xf32>
  %sin = tensor.expand_shape %sinc [[0], [1, 2], [3]] output_shape [1, 1, 1, 4] : tensor<1x1x4xf32> into tensor<1x1x1x4xf32>
  %qw0 = tensor.empty() : tensor<1x2x1x8xf32>
  %qw = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : tensor<1x2x1x8xbf16>) outs(%qw0 : tensor<1x2x1x8xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %e = arith.extf %a : bf16 to f32
    linalg.yield %e : f32
  } -> tensor<1x2x1x8xf32>
  %qrot = tensor.extract_slice %qw[0, 0, 0, 0] [1, 2, 1, 4] [1, 1, 1, 1] : tensor<1x2x1x8xf32> to tensor<1x2x1x4xf32>
  %qpass = tensor.extract_slice %qw[0, 0, 0, 4] [1, 2, 1, 4] [1, 1, 1, 1] : tensor<1x2x1x8xf32> to tensor<1x2x1x4xf32>
  %q1 = tensor.extract_slice %qrot[0, 0, 0, 0] [1, 2, 1, 2] [1, 1, 1, 1] : tensor<1x2x1x4xf32> to tensor<1x2x1x2xf32>
  %q2 = tensor.extract_slice %qrot[0, 0, 0, 2] [1, 2, 1, 2] [1, 1, 1, 1] : tensor<1x2x1x4xf32> to tensor<1x2x1x2xf32>
  %qe = tensor.empty() : tensor<1x2x1x2xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x1x2xf32>) outs(%qe : tensor<1x2x1x2xf32>) -> tensor<1x2x1x2xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x1x2xf32>, tensor<1x2x1x2xf32>) -> tensor<1x2x1x4xf32>
  %qcE = tensor.empty() : tensor<1x2x1x4xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrot, %cos : tensor<1x2x1x4xf32>, tensor<1x1x1x4xf32>) outs(%qcE : tensor<1x2x1x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x1x4xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x1x4xf32>, tensor<1x1x1x4xf32>) outs(%qcE : tensor<1x2x1x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x1x4xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x1x4xf32>, tensor<1x2x1x4xf32>) outs(%qcE : tensor<1x2x1x4xf32>) -> tensor<1x2x1x4xf32>
  %qfull = tensor.concat dim(3) %qr, %qpass : (tensor<1x2x1x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x1x8xf32>
  %qn0 = tensor.empty() : tensor<1x2x1x8xbf16>
  %qout = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qfull : tensor<1x2x1x8xf32>) outs(%qn0 : tensor<1x2x1x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %e = arith.truncf %a : f32 to bf16
    linalg.yield %e : bf16
  } -> tensor<1x2x1x8xbf16>
  %kw0 = tensor.empty() : tensor<1x1x1x8xf32>
  %kw = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew : tensor<1x1x1x8xbf16>) outs(%kw0 : tensor<1x1x1x8xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %e = arith.extf %a : bf16 to f32
    linalg.yield %e : f32
  } -> tensor<1x1x1x8xf32>
  %krot = tensor.extract_slice %kw[0, 0, 0, 0] [1, 1, 1, 4] [1, 1, 1, 1] : tensor<1x1x1x8xf32> to tensor<1x1x1x4xf32>
  %kpass = tensor.extract_slice %kw[0, 0, 0, 4] [1, 1, 1, 4] [1, 1, 1, 1] : tensor<1x1x1x8xf32> to tensor<1x1x1x4xf32>
  %k1 = tensor.extract_slice %krot[0, 0, 0, 0] [1, 1, 1, 2] [1, 1, 1, 1] : tensor<1x1x1x4xf32> to tensor<1x1x1x2xf32>
  %k2 = tensor.extract_slice %krot[0, 0, 0, 2] [1, 1, 1, 2] [1, 1, 1, 1] : tensor<1x1x1x4xf32> to tensor<1x1x1x2xf32>
  %ke = tensor.empty() : tensor<1x1x1x2xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x1x1x2xf32>) outs(%ke : tensor<1x1x1x2xf32>) -> tensor<1x1x1x2xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x1x1x2xf32>, tensor<1x1x1x2xf32>) -> tensor<1x1x1x4xf32>
  %kcE = tensor.empty() : tensor<1x1x1x4xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krot, %cos : tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) outs(%kcE : tensor<1x1x1x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x1x1x4xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) outs(%kcE : tensor<1x1x1x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x1x1x4xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) outs(%kcE : tensor<1x1x1x4xf32>) -> tensor<1x1x1x4xf32>
  %kfull = tensor.concat dim(3) %kr, %kpass : (tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x1x1x8xf32>
  %kn0 = tensor.empty() : tensor<1x1x1x8xbf16>
  %kout = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%kfull : tensor<1x1x1x8xf32>) outs(%kn0 : tensor<1x1x1x8xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %e = arith.truncf %a : f32 to bf16
    linalg.yield %e : bf16
  } -> tensor<1x1x1x8xbf16>
  %k = kvattn.append %kout into %kcache at %pos : tensor<1x1x1x8xbf16> into tensor<1x1x8x8xbf16>, tensor<1xi64>
  %v = kvattn.append %vn into %vcache at %pos : tensor<1x1x1x8xbf16> into tensor<1x1x8x8xbf16>, tensor<1xi64>
  %o = kvattn.sdpa %qout, %k, %v
      : tensor<1x2x1x8xbf16>, tensor<1x1x8x8xbf16>, tensor<1x1x8x8xbf16> -> tensor<1x2x1x8xbf16>
  return %o : tensor<1x2x1x8xbf16>
}

// -----

// GPT-J: pairs (2k, 2k + 1), rotate_every_two as strided slices, a stack
// (expand + concat) and a flatten (collapse).

// CHECK-LABEL: func @gptj_append
// CHECK:         kvattn.append {{.*}} rope = <rotary_dim = 8, theta = 1.000000e+04, interleaved> :
// CHECK:         kvattn.attention {{.*}} rope = <rotary_dim = 8, theta = 1.000000e+04, interleaved> :
func.func @gptj_append(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vn: tensor<1x2x2x8xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x8xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<1xi64>) outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %ang0 = tensor.empty() : tensor<1x2x4xf32>
  %ang = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i)>, affine_map<(b, i, k) -> (k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids, %inv : tensor<1x2xi64>, tensor<4xf32>) outs(%ang0 : tensor<1x2x4xf32>) {
  ^bb0(%p: i64, %f: f32, %o: f32):
    %pf = arith.sitofp %p : i64 to f32
    %a = arith.mulf %pf, %f : f32
    linalg.yield %a : f32
  } -> tensor<1x2x4xf32>
  %cosh = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ang : tensor<1x2x4xf32>) outs(%ang0 : tensor<1x2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x4xf32>
  %cosb0 = tensor.empty() : tensor<1x2x4x2xf32>
  %cosb = linalg.broadcast ins(%cosh : tensor<1x2x4xf32>) outs(%cosb0 : tensor<1x2x4x2xf32>) dimensions = [3]
  %cosr = tensor.collapse_shape %cosb [[0], [1], [2, 3]] : tensor<1x2x4x2xf32> into tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cosr [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sinh = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ang : tensor<1x2x4xf32>) outs(%ang0 : tensor<1x2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.sin %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x4xf32>
  %sinb0 = tensor.empty() : tensor<1x2x4x2xf32>
  %sinb = linalg.broadcast ins(%sinh : tensor<1x2x4xf32>) outs(%sinb0 : tensor<1x2x4x2xf32>) dimensions = [3]
  %sinr = tensor.collapse_shape %sinb [[0], [1], [2, 3]] : tensor<1x2x4x2xf32> into tensor<1x2x8xf32>
  %sin = tensor.expand_shape %sinr [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %qev = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 2] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qod = tensor.extract_slice %q[0, 0, 0, 1] [1, 2, 2, 4] [1, 1, 1, 2] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qe = tensor.empty() : tensor<1x2x2x4xf32>
  %qn = linalg.negf ins(%qod : tensor<1x2x2x4xf32>) outs(%qe : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %qn5 = tensor.expand_shape %qn [[0], [1], [2], [3, 4]] output_shape [1, 2, 2, 4, 1] : tensor<1x2x2x4xf32> into tensor<1x2x2x4x1xf32>
  %qev5 = tensor.expand_shape %qev [[0], [1], [2], [3, 4]] output_shape [1, 2, 2, 4, 1] : tensor<1x2x2x4xf32> into tensor<1x2x2x4x1xf32>
  %qst = tensor.concat dim(4) %qn5, %qev5 : (tensor<1x2x2x4x1xf32>, tensor<1x2x2x4x1xf32>) -> tensor<1x2x2x4x2xf32>
  %qrh = tensor.collapse_shape %qst [[0], [1], [2], [3, 4]] : tensor<1x2x2x4x2xf32> into tensor<1x2x2x8xf32>
  %qcE = tensor.empty() : tensor<1x2x2x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %kev = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 2] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %kod = tensor.extract_slice %knew[0, 0, 0, 1] [1, 2, 2, 4] [1, 1, 1, 2] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%kod : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %kn5 = tensor.expand_shape %kn [[0], [1], [2], [3, 4]] output_shape [1, 2, 2, 4, 1] : tensor<1x2x2x4xf32> into tensor<1x2x2x4x1xf32>
  %kev5 = tensor.expand_shape %kev [[0], [1], [2], [3, 4]] output_shape [1, 2, 2, 4, 1] : tensor<1x2x2x4xf32> into tensor<1x2x2x4x1xf32>
  %kst = tensor.concat dim(4) %kn5, %kev5 : (tensor<1x2x2x4x1xf32>, tensor<1x2x2x4x1xf32>) -> tensor<1x2x2x4x2xf32>
  %krh = tensor.collapse_shape %kst [[0], [1], [2], [3, 4]] : tensor<1x2x2x4x2xf32> into tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %v = kvattn.append %vn into %vcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// Keys from a concat (no append to rotate them): the query's rotation at
// position_ids = 6 + i, the concat's lower-right q_offset = P = 6, moves into
// the attention; the keys' rotation stays in the program.

// CHECK-LABEL: func @concat_query_only
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x2x8xf32>
// CHECK:         linalg.add
// CHECK:         %[[K:.*]] = tensor.concat
// CHECK:         %[[P:.*]] = arith.constant dense<6> : tensor<1xi64>
// CHECK:         kvattn.attention %[[Q]], %[[K]], %{{.*}} q_offset(%[[P]] : tensor<1xi64>) causal rope = <rotary_dim = 8, theta = 1.000000e+04> :
func.func @concat_query_only(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vnew: tensor<1x2x2x8xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x8xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %c = arith.constant 6 : i64
    %r = arith.addi %ii, %c : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %invb0 = tensor.empty() : tensor<1x4x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<4xf32>) outs(%invb0 : tensor<1x4x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x4x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x4x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x4xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x4x2xf32>) outs(%fr3 : tensor<1x2x4xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x8xf32>
  %cs0 = tensor.empty() : tensor<1x2x8xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x8xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qe = tensor.empty() : tensor<1x2x2x4xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x4xf32>) outs(%qe : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %qcE = tensor.empty() : tensor<1x2x2x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %kold = tensor.extract_slice %kcache[0, 0, 0, 0] [1, 2, 6, 8] [1, 1, 1, 1] : tensor<1x2x8x8xf32> to tensor<1x2x6x8xf32>
  %vold = tensor.extract_slice %vcache[0, 0, 0, 0] [1, 2, 6, 8] [1, 1, 1, 1] : tensor<1x2x8x8xf32> to tensor<1x2x6x8xf32>
  %k = tensor.concat dim(2) %kold, %kr : (tensor<1x2x6x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x8x8xf32>
  %v = tensor.concat dim(2) %vold, %vnew : (tensor<1x2x6x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x8x8xf32>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// Only the keys are rotated (the query arrives as it is): the append
// rotates them, and the attention declares its query rotated
// (query_rotated: used as it is, as the SDPA used it).

// CHECK-LABEL: func @keys_only
// CHECK-SAME:    %[[Q:[^:]+]]: tensor<1x2x2x8xf32>
// CHECK:         %[[K:.*]] = kvattn.append {{.*}} rope = <rotary_dim = 8, theta = 1.000000e+04> :
// CHECK:         kvattn.attention %[[Q]], %[[K]], {{.*}} causal query_rotated :
func.func @keys_only(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vnew: tensor<1x2x2x8xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x8xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<1xi64>) outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %invb0 = tensor.empty() : tensor<1x4x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<4xf32>) outs(%invb0 : tensor<1x4x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x4x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x4x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x4xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x4x2xf32>) outs(%fr3 : tensor<1x2x4xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x8xf32>
  %cs0 = tensor.empty() : tensor<1x2x8xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x8xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %v = kvattn.append %vnew into %vcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// position_ids is an argument: nothing says it equals pos[b] + i, so the
// rotations stay as written (unfused), silently.

// CHECK-LABEL: func @positions_unknown
// CHECK:         linalg.add
// CHECK:         kvattn.append
// CHECK-NOT:     rope
// CHECK:         kvattn.attention
// CHECK-NOT:     rope
func.func @positions_unknown(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vnew: tensor<1x2x2x8xf32>,
    %pos: tensor<1xi64>, %pids: tensor<1x2xi64>) -> tensor<1x2x2x8xf32> {
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %invb0 = tensor.empty() : tensor<1x4x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<4xf32>) outs(%invb0 : tensor<1x4x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x4x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x4x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x4xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x4x2xf32>) outs(%fr3 : tensor<1x2x4xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x8xf32>
  %cs0 = tensor.empty() : tensor<1x2x8xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x8xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qe = tensor.empty() : tensor<1x2x2x4xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x4xf32>) outs(%qe : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %qcE = tensor.empty() : tensor<1x2x2x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %v = kvattn.append %vnew into %vcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// The cache write is at position 3 but the framework rotated the new keys
// and the query at position_ids = arange(0, L): a RoPE/cache position
// mismatch. Both are named and the rotations stay as written (the program
// keeps its meaning).

// CHECK-LABEL: func @position_mismatch
// CHECK:         kvattn.append
// CHECK-NOT:     rope
// CHECK:         kvattn.attention
// CHECK-NOT:     rope
func.func @position_mismatch(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vnew: tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32> {
  %pos = arith.constant dense<3> : tensor<1xi64>
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %c = arith.constant 0 : i64
    %r = arith.addi %ii, %c : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %invb0 = tensor.empty() : tensor<1x4x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<4xf32>) outs(%invb0 : tensor<1x4x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x4x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x4x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x4xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x4x2xf32>) outs(%fr3 : tensor<1x2x4xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x8xf32>
  %cs0 = tensor.empty() : tensor<1x2x8xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x8xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qe = tensor.empty() : tensor<1x2x2x4xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x4xf32>) outs(%qe : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %qcE = tensor.empty() : tensor<1x2x2x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  // expected-warning @+1 {{RoPE/cache position mismatch: the new keys are rotated (RoPE) at position 0 but written to the cache at position 3 (batch 0, row 0); the rotation is kept as the framework applied it (unfused)}}
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %v = kvattn.append %vnew into %vcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  // expected-warning @+1 {{RoPE/cache position mismatch: the query is rotated (RoPE) at position 0 but attended at position 3 (batch 0, row 0)}}
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// inv_freq as torch computes it in f32 (1 / 10000^(arange(0, 16, 2) / 16)):
// three of its eight values are one ulp from f32(10000^(-2k/16)), which
// #kvattn.rope's theta means, so no theta says this rotation. The written
// tokens sit below the cache's 8 slots (the append's contract) and the
// query rows are those tokens: tables of the framework's own angles,
// [8, 8] (f32(cos(f32(p) * inv_freq[k]))), rotate both.

// CHECK-LABEL: func @hf_inv_freq
// CHECK:         %[[COS:.*]] = arith.constant dense<{{.*}}> : tensor<8x8xf32>
// CHECK:         %[[SIN:.*]] = arith.constant dense<{{.*}}> : tensor<8x8xf32>
// CHECK:         %[[K:.*]] = kvattn.append {{.*}} rope = <rotary_dim = 16> rotary_cos(%[[COS]] : tensor<8x8xf32>) rotary_sin(%[[SIN]] : tensor<8x8xf32>) :
// CHECK:         kvattn.attention {{.*}} rope = <rotary_dim = 16> rotary_cos(%[[COS]] : tensor<8x8xf32>) rotary_sin(%[[SIN]] : tensor<8x8xf32>) :
func.func @hf_inv_freq(%q: tensor<1x2x2x16xf32>, %kcache: tensor<1x2x8x16xf32>,
    %vcache: tensor<1x2x8x16xf32>, %knew: tensor<1x2x2x16xf32>, %vnew: tensor<1x2x2x16xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x16xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<1xi64>) outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.3162277638912201, 0.10000000149011612, 0.03162277862429619, 0.009999999776482582, 0.003162277862429619, 0.0010000000474974513, 0.0003162277862429619]> : tensor<8xf32>
  %invb0 = tensor.empty() : tensor<1x8x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<8xf32>) outs(%invb0 : tensor<1x8x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x8x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x8x2xf32>) -> tensor<1x8x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x8x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x8x2xf32>) -> tensor<1x8x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x8xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x8x2xf32>) outs(%fr3 : tensor<1x2x8xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x16xf32>
  %cs0 = tensor.empty() : tensor<1x2x16xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x16xf32>) outs(%cs0 : tensor<1x2x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x16xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x16xf32>) outs(%cs0 : tensor<1x2x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x16xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 16] : tensor<1x2x16xf32> into tensor<1x1x2x16xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 16] : tensor<1x2x16xf32> into tensor<1x1x2x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 8] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %qe = tensor.empty() : tensor<1x2x2x8xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x8xf32>) outs(%qe : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x16xf32>
  %qcE = tensor.empty() : tensor<1x2x2x16xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%qcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%qcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x16xf32>, tensor<1x2x2x16xf32>) outs(%qcE : tensor<1x2x2x16xf32>) -> tensor<1x2x2x16xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 8] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %ke = tensor.empty() : tensor<1x2x2x8xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x8xf32>) outs(%ke : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x16xf32>
  %kcE = tensor.empty() : tensor<1x2x2x16xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%kcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%kcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x16xf32>, tensor<1x2x2x16xf32>) outs(%kcE : tensor<1x2x2x16xf32>) -> tensor<1x2x2x16xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x16xf32> into tensor<1x2x8x16xf32>, tensor<1xi64>
  %v = kvattn.append %vnew into %vcache at %pos : tensor<1x2x2x16xf32> into tensor<1x2x8x16xf32>, tensor<1xi64>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// The same inv_freq on a query over a concat: nothing bounds the positions
// a table would need (no append), so the rotation stays as written.

// CHECK-LABEL: func @concat_inv_freq
// CHECK-NOT:     rope =
func.func @concat_inv_freq(%q: tensor<1x2x2x16xf32>, %kcache: tensor<1x2x8x16xf32>,
    %vcache: tensor<1x2x8x16xf32>, %knew: tensor<1x2x2x16xf32>, %vnew: tensor<1x2x2x16xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x16xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %c = arith.constant 6 : i64
    %r = arith.addi %ii, %c : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.3162277638912201, 0.10000000149011612, 0.03162277862429619, 0.009999999776482582, 0.003162277862429619, 0.0010000000474974513, 0.0003162277862429619]> : tensor<8xf32>
  %invb0 = tensor.empty() : tensor<1x8x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<8xf32>) outs(%invb0 : tensor<1x8x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x8x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x8x2xf32>) -> tensor<1x8x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x8x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x8x2xf32>) -> tensor<1x8x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x8xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x8x2xf32>) outs(%fr3 : tensor<1x2x8xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x16xf32>
  %cs0 = tensor.empty() : tensor<1x2x16xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x16xf32>) outs(%cs0 : tensor<1x2x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x16xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x16xf32>) outs(%cs0 : tensor<1x2x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x16xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 16] : tensor<1x2x16xf32> into tensor<1x1x2x16xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 16] : tensor<1x2x16xf32> into tensor<1x1x2x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 8] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %qe = tensor.empty() : tensor<1x2x2x8xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x8xf32>) outs(%qe : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x16xf32>
  %qcE = tensor.empty() : tensor<1x2x2x16xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%qcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%qcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x16xf32>, tensor<1x2x2x16xf32>) outs(%qcE : tensor<1x2x2x16xf32>) -> tensor<1x2x2x16xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 8] [1, 2, 2, 8] [1, 1, 1, 1] : tensor<1x2x2x16xf32> to tensor<1x2x2x8xf32>
  %ke = tensor.empty() : tensor<1x2x2x8xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x8xf32>) outs(%ke : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x16xf32>
  %kcE = tensor.empty() : tensor<1x2x2x16xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%kcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x16xf32>, tensor<1x1x2x16xf32>) outs(%kcE : tensor<1x2x2x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x16xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x16xf32>, tensor<1x2x2x16xf32>) outs(%kcE : tensor<1x2x2x16xf32>) -> tensor<1x2x2x16xf32>
  %kold = tensor.extract_slice %kcache[0, 0, 0, 0] [1, 2, 6, 16] [1, 1, 1, 1] : tensor<1x2x8x16xf32> to tensor<1x2x6x16xf32>
  %vold = tensor.extract_slice %vcache[0, 0, 0, 0] [1, 2, 6, 16] [1, 1, 1, 1] : tensor<1x2x8x16xf32> to tensor<1x2x6x16xf32>
  %k = tensor.concat dim(2) %kold, %kr : (tensor<1x2x6x16xf32>, tensor<1x2x2x16xf32>) -> tensor<1x2x8x16xf32>
  %v = tensor.concat dim(2) %vold, %vnew : (tensor<1x2x6x16xf32>, tensor<1x2x2x16xf32>) -> tensor<1x2x8x16xf32>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}


// -----

// position_ids = pos[b] + i + 1 (the position of the token after): one
// position after the cache write's, whatever pos is. Named, and left as
// written.

// CHECK-LABEL: func @position_off_by_one
// CHECK-NOT:     rope =
func.func @position_off_by_one(%q: tensor<1x2x2x8xf32>, %kcache: tensor<1x2x8x8xf32>,
    %vcache: tensor<1x2x8x8xf32>, %knew: tensor<1x2x2x8xf32>, %vnew: tensor<1x2x2x8xf32>,
    %pos: tensor<1xi64>) -> tensor<1x2x2x8xf32> {
  %pidse = tensor.empty() : tensor<1x2xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<1xi64>) outs(%pidse : tensor<1x2xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r0 = arith.addi %p, %ii : i64
    %one = arith.constant 1 : i64
    %r = arith.addi %r0, %one : i64
    linalg.yield %r : i64
  } -> tensor<1x2xi64>
  %inv = arith.constant dense<[1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513]> : tensor<4xf32>
  %invb0 = tensor.empty() : tensor<1x4x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<4xf32>) outs(%invb0 : tensor<1x4x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<1x1x2xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<1x2xi64>) outs(%pf0 : tensor<1x1x2xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<1x1x2xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<1x4x2xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<1x4x1xf32>, tensor<1x1x2xf32>) outs(%fr1 : tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %fr3 = tensor.empty() : tensor<1x2x4xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<1x4x2xf32>) outs(%fr3 : tensor<1x2x4xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x8xf32>
  %cs0 = tensor.empty() : tensor<1x2x8xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<1x2x8xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<1x2x8xf32>) outs(%cs0 : tensor<1x2x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [1, 1, 2, 8] : tensor<1x2x8xf32> into tensor<1x1x2x8xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %qe = tensor.empty() : tensor<1x2x2x4xf32>
  %qn = linalg.negf ins(%q2 : tensor<1x2x2x4xf32>) outs(%qe : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %qcE = tensor.empty() : tensor<1x2x2x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%qcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 4] [1, 2, 2, 4] [1, 1, 1, 1] : tensor<1x2x2x8xf32> to tensor<1x2x2x4xf32>
  %ke = tensor.empty() : tensor<1x2x2x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<1x2x2x4xf32>) outs(%ke : tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %kcE = tensor.empty() : tensor<1x2x2x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<1x2x2x8xf32>, tensor<1x1x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) outs(%kcE : tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  // expected-warning @+1 {{RoPE/cache position mismatch: the new keys are rotated (RoPE) 1 position after the positions they are written to the cache at; the rotation is kept as the framework applied it (unfused)}}
  %k = kvattn.append %kr into %kcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  %v = kvattn.append %vnew into %vcache at %pos : tensor<1x2x2x8xf32> into tensor<1x2x8x8xf32>, tensor<1xi64>
  // expected-warning @+1 {{RoPE/cache position mismatch: the query is rotated (RoPE) 1 position after the positions it is attended at}}
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<1x2x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}
