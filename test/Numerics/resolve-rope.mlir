// Numerics of -kvattn-resolve-cached-append's RoPE fusion (fuse-rope): a
// framework's rotary embedding (HF transformers' apply_rotary_pos_emb as
// torch-mlir lowers it) moved into kvattn.attention and the rotating
// kvattn.append keeps the program's meaning. The reference evaluation of
// the framework IR as written (the RoPE in linalg, evaluated op by op in
// f32, cos/sin as f32(cos(f64 angle)) like the reference's RoPE), of the
// resolved IR without the fusion and of the fused IR are bit-identical;
// the CPU path of the fused program (libm cosf/sinf) agrees with the
// reference within the f32 / bf16 tolerances (--check). The inputs are
// seeded values in [-1, 1) at positions 3 and 9 (appends) and 15 and 6
// (decode), where every rotation angle differs: a rotation at another
// theta changes the output (the `not cmp` lines).
//
// RUN: rm -rf %t && mkdir -p %t
// RUN: kvattn-opt %s -kvattn-resolve-cached-append -o %t/fused.mlir
// RUN: kvattn-opt %s -kvattn-resolve-cached-append=fuse-rope=false -o %t/unfused.mlir
// RUN: FileCheck %s --input-file %t/fused.mlir
//
// HF: theta from inv_freq, NeoX halves, GQA 4/2, batch 2, L = 3 new rows.
// RUN: kvattn-run %s --entry=hf_append --input 5=3,9 --dump-outputs %t/hf0
// RUN: kvattn-run %t/unfused.mlir --entry=hf_append --input 5=3,9 --dump-outputs %t/hf1
// RUN: kvattn-run %t/fused.mlir --entry=hf_append --input 5=3,9 --dump-outputs %t/hf2
// RUN: cmp %t/hf0/out0.npy %t/hf1/out0.npy
// RUN: cmp %t/hf0/out0.npy %t/hf2/out0.npy
// RUN: kvattn-run %s --target=cpu --check --entry=hf_append --input 5=3,9 | FileCheck %s --check-prefix=PASS
// RUN: sed 's/theta = 1.000000e+04/theta = 5.000000e+05/g' %t/fused.mlir \
// RUN:   | kvattn-run - --entry=hf_append --input 5=3,9 --dump-outputs %t/hf3
// RUN: not cmp %t/hf0/out0.npy %t/hf3/out0.npy
//
// Decode (L = 1, no causal rule), bf16, partial rotary (8 of 16), cos/sin
// gathered from [32, 4] tables at the positions.
// RUN: kvattn-run %s --entry=tables_decode --input 5=15,6 --dump-outputs %t/tb0
// RUN: kvattn-run %t/unfused.mlir --entry=tables_decode --input 5=15,6 --dump-outputs %t/tb1
// RUN: kvattn-run %t/fused.mlir --entry=tables_decode --input 5=15,6 --dump-outputs %t/tb2
// RUN: cmp %t/tb0/out0.npy %t/tb1/out0.npy
// RUN: cmp %t/tb0/out0.npy %t/tb2/out0.npy
// RUN: kvattn-run %s --target=cpu --check --entry=tables_decode --input 5=15,6 | FileCheck %s --check-prefix=PASS
//
// torch's f32 inv_freq (not theta's in the last bit of three values): the
// framework's angles as [16, 8] tables of the cache's 16 positions.
// RUN: kvattn-run %s --entry=hf_inv_freq --input 5=3,9 --dump-outputs %t/if0
// RUN: kvattn-run %t/unfused.mlir --entry=hf_inv_freq --input 5=3,9 --dump-outputs %t/if1
// RUN: kvattn-run %t/fused.mlir --entry=hf_inv_freq --input 5=3,9 --dump-outputs %t/if2
// RUN: cmp %t/if0/out0.npy %t/if1/out0.npy
// RUN: cmp %t/if0/out0.npy %t/if2/out0.npy
// RUN: kvattn-run %s --target=cpu --check --entry=hf_inv_freq --input 5=3,9 | FileCheck %s --check-prefix=PASS
//
// GPT-J: interleaved pairs (rotate_every_two, repeat_interleave'd cos/sin).
// RUN: kvattn-run %s --entry=gptj_append --input 5=4 --dump-outputs %t/gj0
// RUN: kvattn-run %t/unfused.mlir --entry=gptj_append --input 5=4 --dump-outputs %t/gj1
// RUN: kvattn-run %t/fused.mlir --entry=gptj_append --input 5=4 --dump-outputs %t/gj2
// RUN: cmp %t/gj0/out0.npy %t/gj1/out0.npy
// RUN: cmp %t/gj0/out0.npy %t/gj2/out0.npy
// RUN: kvattn-run %s --target=cpu --check --entry=gptj_append --input 5=4 | FileCheck %s --check-prefix=PASS
// RUN: sed 's/theta = 1.000000e+04, interleaved/theta = 1.000000e+04/g' %t/fused.mlir \
// RUN:   | kvattn-run - --entry=gptj_append --input 5=4 --dump-outputs %t/gj3
// RUN: not cmp %t/gj0/out0.npy %t/gj3/out0.npy

// PASS: PASS

// The fusion happened (else the comparisons above compare the unfused
// program with itself):
// CHECK-LABEL: func.func @hf_append
// CHECK:         kvattn.append %arg3 into %arg1 at %arg5 rope = <rotary_dim = 16, theta = 1.000000e+04>
// CHECK:         kvattn.attention %arg0, {{.*}} rope = <rotary_dim = 16, theta = 1.000000e+04>
// CHECK-LABEL: func.func @tables_decode
// CHECK:         kvattn.append %arg3 into %arg1 at %arg5 rope = <rotary_dim = 8> rotary_cos(%arg6
// CHECK:         kvattn.attention %arg0, {{.*}} q_offset(%arg5 : tensor<2xi64>) {{.*}} rope = <rotary_dim = 8> rotary_cos(%arg6
// CHECK-LABEL: func.func @gptj_append
// CHECK:         kvattn.append %arg3 into %arg1 at %arg5 rope = <rotary_dim = 8, theta = 1.000000e+04, interleaved>
// CHECK:         kvattn.attention %arg0, {{.*}} rope = <rotary_dim = 8, theta = 1.000000e+04, interleaved>
// CHECK-LABEL: func.func @hf_inv_freq
// CHECK:         %[[COS:.*]] = arith.constant dense<{{.*}}> : tensor<16x8xf32>
// CHECK:         kvattn.append %arg3 into %arg1 at %arg5 rope = <rotary_dim = 16> rotary_cos(%[[COS]]
// CHECK:         kvattn.attention %arg0, {{.*}} rope = <rotary_dim = 16> rotary_cos(%[[COS]]

func.func @hf_append(%q: tensor<2x4x3x16xf32>, %kcache: tensor<2x2x16x16xf32>,
    %vcache: tensor<2x2x16x16xf32>, %knew: tensor<2x2x3x16xf32>, %vn: tensor<2x2x3x16xf32>,
    %pos: tensor<2xi64>) -> tensor<2x4x3x16xf32> {
  %pidse = tensor.empty() : tensor<2x3xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<2xi64>) outs(%pidse : tensor<2x3xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<2x3xi64>
  %inv = arith.constant dense<[1.0, 0.3162277638912201, 0.10000000149011612, 0.03162277489900589, 0.009999999776482582, 0.003162277629598975, 0.0010000000474974513, 0.0003162277571391314]> : tensor<8xf32>
  %invb0 = tensor.empty() : tensor<2x8x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<8xf32>) outs(%invb0 : tensor<2x8x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<2x1x3xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<2x3xi64>) outs(%pf0 : tensor<2x1x3xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<2x1x3xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<2x8x3xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<2x8x3xf32>) -> tensor<2x8x3xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<2x8x1xf32>, tensor<2x1x3xf32>) outs(%fr1 : tensor<2x8x3xf32>) -> tensor<2x8x3xf32>
  %fr3 = tensor.empty() : tensor<2x3x8xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<2x8x3xf32>) outs(%fr3 : tensor<2x3x8xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x16xf32>
  %cs0 = tensor.empty() : tensor<2x3x16xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<2x3x16xf32>) outs(%cs0 : tensor<2x3x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<2x3x16xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<2x3x16xf32>) outs(%cs0 : tensor<2x3x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [2, 1, 3, 16] : tensor<2x3x16xf32> into tensor<2x1x3x16xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [2, 1, 3, 16] : tensor<2x3x16xf32> into tensor<2x1x3x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [2, 4, 3, 8] [1, 1, 1, 1] : tensor<2x4x3x16xf32> to tensor<2x4x3x8xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 8] [2, 4, 3, 8] [1, 1, 1, 1] : tensor<2x4x3x16xf32> to tensor<2x4x3x8xf32>
  %qe = tensor.empty() : tensor<2x4x3x8xf32>
  %qn = linalg.negf ins(%q2 : tensor<2x4x3x8xf32>) outs(%qe : tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> tensor<2x4x3x16xf32>
  %qcE = tensor.empty() : tensor<2x4x3x16xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<2x4x3x16xf32>, tensor<2x1x3x16xf32>) outs(%qcE : tensor<2x4x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x3x16xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<2x4x3x16xf32>, tensor<2x1x3x16xf32>) outs(%qcE : tensor<2x4x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x3x16xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<2x4x3x16xf32>, tensor<2x4x3x16xf32>) outs(%qcE : tensor<2x4x3x16xf32>) -> tensor<2x4x3x16xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [2, 2, 3, 8] [1, 1, 1, 1] : tensor<2x2x3x16xf32> to tensor<2x2x3x8xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 8] [2, 2, 3, 8] [1, 1, 1, 1] : tensor<2x2x3x16xf32> to tensor<2x2x3x8xf32>
  %ke = tensor.empty() : tensor<2x2x3x8xf32>
  %kn = linalg.negf ins(%k2 : tensor<2x2x3x8xf32>) outs(%ke : tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<2x2x3x8xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x16xf32>
  %kcE = tensor.empty() : tensor<2x2x3x16xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<2x2x3x16xf32>, tensor<2x1x3x16xf32>) outs(%kcE : tensor<2x2x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x3x16xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<2x2x3x16xf32>, tensor<2x1x3x16xf32>) outs(%kcE : tensor<2x2x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x3x16xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<2x2x3x16xf32>, tensor<2x2x3x16xf32>) outs(%kcE : tensor<2x2x3x16xf32>) -> tensor<2x2x3x16xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<2x2x3x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi64>
  %v = kvattn.append %vn into %vcache at %pos : tensor<2x2x3x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi64>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<2x4x3x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32> -> tensor<2x4x3x16xf32>
  return %o : tensor<2x4x3x16xf32>
}

func.func @tables_decode(%q: tensor<2x4x1x16xbf16>, %kcache: tensor<2x2x16x16xbf16>,
    %vcache: tensor<2x2x16x16xbf16>, %knew: tensor<2x2x1x16xbf16>, %vn: tensor<2x2x1x16xbf16>,
    %pos: tensor<2xi64>, %cos_table: tensor<32x4xf32>, %sin_table: tensor<32x4xf32>) -> tensor<2x4x1x16xbf16> {
  %pidse = tensor.empty() : tensor<2x1xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<2xi64>) outs(%pidse : tensor<2x1xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<2x1xi64>
  %cosg0 = tensor.empty() : tensor<2x1x4xf32>
  %cosg = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<2x1xi64>) outs(%cosg0 : tensor<2x1x4xf32>) {
  ^bb0(%p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %k = linalg.index 2 : index
    %v = tensor.extract %cos_table[%row, %k] : tensor<32x4xf32>
    linalg.yield %v : f32
  } -> tensor<2x1x4xf32>
  %cosc = tensor.concat dim(2) %cosg, %cosg : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x1x8xf32>
  %cos = tensor.expand_shape %cosc [[0], [1, 2], [3]] output_shape [2, 1, 1, 8] : tensor<2x1x8xf32> into tensor<2x1x1x8xf32>
  %sing0 = tensor.empty() : tensor<2x1x4xf32>
  %sing = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<2x1xi64>) outs(%sing0 : tensor<2x1x4xf32>) {
  ^bb0(%p: i64, %o: f32):
    %row = arith.index_cast %p : i64 to index
    %k = linalg.index 2 : index
    %v = tensor.extract %sin_table[%row, %k] : tensor<32x4xf32>
    linalg.yield %v : f32
  } -> tensor<2x1x4xf32>
  %sinc = tensor.concat dim(2) %sing, %sing : (tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> tensor<2x1x8xf32>
  %sin = tensor.expand_shape %sinc [[0], [1, 2], [3]] output_shape [2, 1, 1, 8] : tensor<2x1x8xf32> into tensor<2x1x1x8xf32>
  %qw0 = tensor.empty() : tensor<2x4x1x16xf32>
  %qw = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : tensor<2x4x1x16xbf16>) outs(%qw0 : tensor<2x4x1x16xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %e = arith.extf %a : bf16 to f32
    linalg.yield %e : f32
  } -> tensor<2x4x1x16xf32>
  %qrot = tensor.extract_slice %qw[0, 0, 0, 0] [2, 4, 1, 8] [1, 1, 1, 1] : tensor<2x4x1x16xf32> to tensor<2x4x1x8xf32>
  %qpass = tensor.extract_slice %qw[0, 0, 0, 8] [2, 4, 1, 8] [1, 1, 1, 1] : tensor<2x4x1x16xf32> to tensor<2x4x1x8xf32>
  %q1 = tensor.extract_slice %qrot[0, 0, 0, 0] [2, 4, 1, 4] [1, 1, 1, 1] : tensor<2x4x1x8xf32> to tensor<2x4x1x4xf32>
  %q2 = tensor.extract_slice %qrot[0, 0, 0, 4] [2, 4, 1, 4] [1, 1, 1, 1] : tensor<2x4x1x8xf32> to tensor<2x4x1x4xf32>
  %qe = tensor.empty() : tensor<2x4x1x4xf32>
  %qn = linalg.negf ins(%q2 : tensor<2x4x1x4xf32>) outs(%qe : tensor<2x4x1x4xf32>) -> tensor<2x4x1x4xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>) -> tensor<2x4x1x8xf32>
  %qcE = tensor.empty() : tensor<2x4x1x8xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrot, %cos : tensor<2x4x1x8xf32>, tensor<2x1x1x8xf32>) outs(%qcE : tensor<2x4x1x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x1x8xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<2x4x1x8xf32>, tensor<2x1x1x8xf32>) outs(%qcE : tensor<2x4x1x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x1x8xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>) outs(%qcE : tensor<2x4x1x8xf32>) -> tensor<2x4x1x8xf32>
  %qfull = tensor.concat dim(3) %qr, %qpass : (tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>) -> tensor<2x4x1x16xf32>
  %qn0 = tensor.empty() : tensor<2x4x1x16xbf16>
  %qout = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qfull : tensor<2x4x1x16xf32>) outs(%qn0 : tensor<2x4x1x16xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %e = arith.truncf %a : f32 to bf16
    linalg.yield %e : bf16
  } -> tensor<2x4x1x16xbf16>
  %kw0 = tensor.empty() : tensor<2x2x1x16xf32>
  %kw = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew : tensor<2x2x1x16xbf16>) outs(%kw0 : tensor<2x2x1x16xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %e = arith.extf %a : bf16 to f32
    linalg.yield %e : f32
  } -> tensor<2x2x1x16xf32>
  %krot = tensor.extract_slice %kw[0, 0, 0, 0] [2, 2, 1, 8] [1, 1, 1, 1] : tensor<2x2x1x16xf32> to tensor<2x2x1x8xf32>
  %kpass = tensor.extract_slice %kw[0, 0, 0, 8] [2, 2, 1, 8] [1, 1, 1, 1] : tensor<2x2x1x16xf32> to tensor<2x2x1x8xf32>
  %k1 = tensor.extract_slice %krot[0, 0, 0, 0] [2, 2, 1, 4] [1, 1, 1, 1] : tensor<2x2x1x8xf32> to tensor<2x2x1x4xf32>
  %k2 = tensor.extract_slice %krot[0, 0, 0, 4] [2, 2, 1, 4] [1, 1, 1, 1] : tensor<2x2x1x8xf32> to tensor<2x2x1x4xf32>
  %ke = tensor.empty() : tensor<2x2x1x4xf32>
  %kn = linalg.negf ins(%k2 : tensor<2x2x1x4xf32>) outs(%ke : tensor<2x2x1x4xf32>) -> tensor<2x2x1x4xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<2x2x1x4xf32>, tensor<2x2x1x4xf32>) -> tensor<2x2x1x8xf32>
  %kcE = tensor.empty() : tensor<2x2x1x8xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krot, %cos : tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>) outs(%kcE : tensor<2x2x1x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x1x8xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<2x2x1x8xf32>, tensor<2x1x1x8xf32>) outs(%kcE : tensor<2x2x1x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x1x8xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>) outs(%kcE : tensor<2x2x1x8xf32>) -> tensor<2x2x1x8xf32>
  %kfull = tensor.concat dim(3) %kr, %kpass : (tensor<2x2x1x8xf32>, tensor<2x2x1x8xf32>) -> tensor<2x2x1x16xf32>
  %kn0 = tensor.empty() : tensor<2x2x1x16xbf16>
  %kout = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%kfull : tensor<2x2x1x16xf32>) outs(%kn0 : tensor<2x2x1x16xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %e = arith.truncf %a : f32 to bf16
    linalg.yield %e : bf16
  } -> tensor<2x2x1x16xbf16>
  %k = kvattn.append %kout into %kcache at %pos : tensor<2x2x1x16xbf16> into tensor<2x2x16x16xbf16>, tensor<2xi64>
  %v = kvattn.append %vn into %vcache at %pos : tensor<2x2x1x16xbf16> into tensor<2x2x16x16xbf16>, tensor<2xi64>
  %o = kvattn.sdpa %qout, %k, %v
      : tensor<2x4x1x16xbf16>, tensor<2x2x16x16xbf16>, tensor<2x2x16x16xbf16> -> tensor<2x4x1x16xbf16>
  return %o : tensor<2x4x1x16xbf16>
}

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

func.func @hf_inv_freq(%q: tensor<2x4x3x16xf32>, %kcache: tensor<2x2x16x16xf32>,
    %vcache: tensor<2x2x16x16xf32>, %knew: tensor<2x2x3x16xf32>, %vn: tensor<2x2x3x16xf32>,
    %pos: tensor<2xi64>) -> tensor<2x4x3x16xf32> {
  %pidse = tensor.empty() : tensor<2x3xi64>
  %pids = linalg.generic {indexing_maps = [affine_map<(b, i) -> (b)>, affine_map<(b, i) -> (b, i)>], iterator_types = ["parallel", "parallel"]}
      ins(%pos : tensor<2xi64>) outs(%pidse : tensor<2x3xi64>) {
  ^bb0(%p: i64, %o: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %r = arith.addi %p, %ii : i64
    linalg.yield %r : i64
  } -> tensor<2x3xi64>
  %inv = arith.constant dense<[1.0, 0.3162277638912201, 0.10000000149011612, 0.03162277862429619, 0.009999999776482582, 0.003162277862429619, 0.0010000000474974513, 0.0003162277862429619]> : tensor<8xf32>
  %invb0 = tensor.empty() : tensor<2x8x1xf32>
  %invb = linalg.broadcast ins(%inv : tensor<8xf32>) outs(%invb0 : tensor<2x8x1xf32>) dimensions = [0, 2]
  %pf0 = tensor.empty() : tensor<2x1x3xf32>
  %pf = linalg.generic {indexing_maps = [affine_map<(b, o, i) -> (b, i)>, affine_map<(b, o, i) -> (b, o, i)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%pids : tensor<2x3xi64>) outs(%pf0 : tensor<2x1x3xf32>) {
  ^bb0(%p: i64, %o: f32):
    %f = arith.sitofp %p : i64 to f32
    linalg.yield %f : f32
  } -> tensor<2x1x3xf32>
  %zero = arith.constant 0.0 : f32
  %fr0 = tensor.empty() : tensor<2x8x3xf32>
  %fr1 = linalg.fill ins(%zero : f32) outs(%fr0 : tensor<2x8x3xf32>) -> tensor<2x8x3xf32>
  %fr2 = linalg.batch_matmul ins(%invb, %pf : tensor<2x8x1xf32>, tensor<2x1x3xf32>) outs(%fr1 : tensor<2x8x3xf32>) -> tensor<2x8x3xf32>
  %fr3 = tensor.empty() : tensor<2x3x8xf32>
  %freqs = linalg.transpose ins(%fr2 : tensor<2x8x3xf32>) outs(%fr3 : tensor<2x3x8xf32>) permutation = [0, 2, 1]
  %emb = tensor.concat dim(2) %freqs, %freqs : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x16xf32>
  %cs0 = tensor.empty() : tensor<2x3x16xf32>
  %cos3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<2x3x16xf32>) outs(%cs0 : tensor<2x3x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = math.cos %a : f32
    linalg.yield %c : f32
  } -> tensor<2x3x16xf32>
  %sin3 = linalg.generic {indexing_maps = [affine_map<(b, i, k) -> (b, i, k)>, affine_map<(b, i, k) -> (b, i, k)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb : tensor<2x3x16xf32>) outs(%cs0 : tensor<2x3x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.sin %a : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16xf32>
  %cos = tensor.expand_shape %cos3 [[0], [1, 2], [3]] output_shape [2, 1, 3, 16] : tensor<2x3x16xf32> into tensor<2x1x3x16xf32>
  %sin = tensor.expand_shape %sin3 [[0], [1, 2], [3]] output_shape [2, 1, 3, 16] : tensor<2x3x16xf32> into tensor<2x1x3x16xf32>
  %q1 = tensor.extract_slice %q[0, 0, 0, 0] [2, 4, 3, 8] [1, 1, 1, 1] : tensor<2x4x3x16xf32> to tensor<2x4x3x8xf32>
  %q2 = tensor.extract_slice %q[0, 0, 0, 8] [2, 4, 3, 8] [1, 1, 1, 1] : tensor<2x4x3x16xf32> to tensor<2x4x3x8xf32>
  %qe = tensor.empty() : tensor<2x4x3x8xf32>
  %qn = linalg.negf ins(%q2 : tensor<2x4x3x8xf32>) outs(%qe : tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32>
  %qrh = tensor.concat dim(3) %qn, %q1 : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> tensor<2x4x3x16xf32>
  %qcE = tensor.empty() : tensor<2x4x3x16xf32>
  %qc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q, %cos : tensor<2x4x3x16xf32>, tensor<2x1x3x16xf32>) outs(%qcE : tensor<2x4x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x3x16xf32>
  %qs = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%qrh, %sin : tensor<2x4x3x16xf32>, tensor<2x1x3x16xf32>) outs(%qcE : tensor<2x4x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x4x3x16xf32>
  %qr = linalg.add ins(%qc, %qs : tensor<2x4x3x16xf32>, tensor<2x4x3x16xf32>) outs(%qcE : tensor<2x4x3x16xf32>) -> tensor<2x4x3x16xf32>
  %k1 = tensor.extract_slice %knew[0, 0, 0, 0] [2, 2, 3, 8] [1, 1, 1, 1] : tensor<2x2x3x16xf32> to tensor<2x2x3x8xf32>
  %k2 = tensor.extract_slice %knew[0, 0, 0, 8] [2, 2, 3, 8] [1, 1, 1, 1] : tensor<2x2x3x16xf32> to tensor<2x2x3x8xf32>
  %ke = tensor.empty() : tensor<2x2x3x8xf32>
  %kn = linalg.negf ins(%k2 : tensor<2x2x3x8xf32>) outs(%ke : tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  %krh = tensor.concat dim(3) %kn, %k1 : (tensor<2x2x3x8xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x16xf32>
  %kcE = tensor.empty() : tensor<2x2x3x16xf32>
  %kc = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%knew, %cos : tensor<2x2x3x16xf32>, tensor<2x1x3x16xf32>) outs(%kcE : tensor<2x2x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x3x16xf32>
  %ks = linalg.generic {indexing_maps = [affine_map<(b, h, i, k) -> (b, h, i, k)>, affine_map<(b, h, i, k) -> (b, 0, i, k)>, affine_map<(b, h, i, k) -> (b, h, i, k)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%krh, %sin : tensor<2x2x3x16xf32>, tensor<2x1x3x16xf32>) outs(%kcE : tensor<2x2x3x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x3x16xf32>
  %kr = linalg.add ins(%kc, %ks : tensor<2x2x3x16xf32>, tensor<2x2x3x16xf32>) outs(%kcE : tensor<2x2x3x16xf32>) -> tensor<2x2x3x16xf32>
  %k = kvattn.append %kr into %kcache at %pos : tensor<2x2x3x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi64>
  %v = kvattn.append %vn into %vcache at %pos : tensor<2x2x3x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi64>
  %o = kvattn.sdpa %qr, %k, %v causal = lower_right
      : tensor<2x4x3x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32> -> tensor<2x4x3x16xf32>
  return %o : tensor<2x4x3x16xf32>
}

