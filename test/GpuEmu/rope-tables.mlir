// RoPE from tables (FlashAttention's rotary_cos / rotary_sin) on the
// emulated GPU: a #kvattn.rope without theta reads each rotated row's
// cosines and sines at row `position` of the tables [P, R/2] (f32, f16 or
// bf16, widened to f32). The append kernel rotates each new key row from
// the tables at pos[b] + t and writes the RoPE record; the attention
// kernels rotate the query rows as they stage them (the scalar f32 kernel,
// mma.sync bf16, and on sm_90a the wgmma kernel). Generated table values
// in [-1, 1) are no cos/sin of any theta: a kernel that ignored the tables
// fails the comparison. --check compares the output, the whole cache and
// the whole record with the reference; the emulator's memcheck and
// racecheck fail any run that reports. python/tests/test_rope_tables.py
// compares with a NumPy float64 reference of Llama 3 scaled tables.
//
// REQUIRES: libdevice
// The emulator is built without sanitizers (see matrix-sm90a.test); the
// tables' compiler paths run under ASan in Numerics/cpu-rope-tables.mlir.
// UNSUPPORTED: sanitizers

// f32 (the scalar lowering), GPT-NeoX halves, partial rotary (24 of 32),
// GQA 4/2, f32 tables of 2100 rows, positions near their end.
// RUN: kvattn-run %s --entry=halves_f32 --target=gpu-emu --check --input 5=2040,1500 --input 6=-1 --input 7=2043,1503 | FileCheck %s
// bf16 on tensor cores (mma.sync), interleaved pairs, bf16 tables.
// RUN: kvattn-run %s --entry=pairs_bf16 --target=gpu-emu --check --input 5=3000,77 --input 6=-1 --input 7=3002,79 | FileCheck %s
// sm_90a: 64 query rows of D = 64 (a wgmma program), f16 tables, halves.
// RUN: kvattn-run %s --entry=wgmma_bf16 --target=gpu-emu --chip=sm_90a --check --input 3=1000 --input 4=808 --input 5=256 --stats | FileCheck %s --check-prefixes=CHECK,WGMMA
// The same on the mma.sync kernel and on the CPU.
// RUN: kvattn-run %s --entry=wgmma_bf16 --target=gpu-emu --check --input 3=1000 --input 4=808 --input 5=256 | FileCheck %s
// RUN: kvattn-run %s --entry=wgmma_bf16 --target=cpu --check --input 3=1000 --input 4=808 --input 5=256 | FileCheck %s
// The theta formula through the same query staging on sm_90a: the element
// path once stored the rotated query in mma.sync's swizzle instead of
// wgmma's panels, without the TMA ring's proxy fence (racecheck reported
// it).
// RUN: kvattn-run %s --entry=wgmma_theta --target=gpu-emu --chip=sm_90a --check --input 3=1000 --input 4=808 --input 5=256 --stats | FileCheck %s --check-prefixes=CHECK,WGMMA
// WGMMA: wgmma.m64n{{[0-9]+}}k16.bf16.ss
// CHECK: {{^PASS$}}

// Positions outside the tables, refused by name before anything runs (the
// reference's check; a plan's device validation: status rules 29 and 30,
// python/tests/test_rope_tables.py): the append's token 1 of batch 0 at
// 2100, then the query row 63 at 1600 of a 1600-row table.
// RUN: not kvattn-run %s --entry=halves_f32 --target=gpu-emu --input 5=2099,1500 --input 6=-1 --input 7=2102,1503 2>&1 | FileCheck %s --check-prefix=KEY
// KEY: rotary_cos: position 2100 of batch 0, row 1 is outside the table's 2100 rows
// RUN: not kvattn-run %s --entry=wgmma_bf16 --target=gpu-emu --chip=sm_90a --input 3=1537 --input 4=1345 --input 5=256 2>&1 | FileCheck %s --check-prefix=QUERY
// QUERY: rotary_cos: position 1600 of batch 0, row 63 is outside the table's 1600 rows

func.func @halves_f32(%q: tensor<2x4x3x32xf32>, %kn: tensor<2x2x3x32xf32>,
                      %vn: tensor<2x2x3x32xf32>, %kc: tensor<2x2x2200x32xf32>,
                      %vc: tensor<2x2x2200x32xf32>, %pos: tensor<2xi32>,
                      %rec: tensor<2x2200xi32>, %kl: tensor<2xi32>,
                      %cos: tensor<2100x12xf32>, %sin: tensor<2100x12xf32>)
    -> (tensor<2x4x3x32xf32>, tensor<2x2x2200x32xf32>, tensor<2x2200xi32>) {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 24>
      rotary_cos(%cos : tensor<2100x12xf32>) rotary_sin(%sin : tensor<2100x12xf32>)
      rope_pos(%rec : tensor<2x2200xi32>) : tensor<2x2x3x32xf32> into tensor<2x2x2200x32xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x3x32xf32> into tensor<2x2x2200x32xf32>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      causal rope = <rotary_dim = 24>
      rotary_cos(%cos : tensor<2100x12xf32>) rotary_sin(%sin : tensor<2100x12xf32>)
      : tensor<2x4x3x32xf32>, tensor<2x2x2200x32xf32>, tensor<2x2x2200x32xf32> -> tensor<2x4x3x32xf32>
  return %o, %k, %k_rec : tensor<2x4x3x32xf32>, tensor<2x2x2200x32xf32>, tensor<2x2200xi32>
}

func.func @pairs_bf16(%q: tensor<2x4x2x64xbf16>, %kn: tensor<2x1x2x64xbf16>,
                      %vn: tensor<2x1x2x64xbf16>, %kc: tensor<2x1x3100x64xbf16>,
                      %vc: tensor<2x1x3100x64xbf16>, %pos: tensor<2xi32>,
                      %rec: tensor<2x3100xi32>, %kl: tensor<2xi32>,
                      %cos: tensor<3002x32xbf16>, %sin: tensor<3002x32xbf16>)
    -> (tensor<2x4x2x64xbf16>, tensor<2x1x3100x64xbf16>, tensor<2x3100xi32>) {
  %k, %k_rec = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, interleaved>
      rotary_cos(%cos : tensor<3002x32xbf16>) rotary_sin(%sin : tensor<3002x32xbf16>)
      rope_pos(%rec : tensor<2x3100xi32>) : tensor<2x1x2x64xbf16> into tensor<2x1x3100x64xbf16>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x1x2x64xbf16> into tensor<2x1x3100x64xbf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%kl : tensor<2xi32>)
      causal rope = <rotary_dim = 64, interleaved>
      rotary_cos(%cos : tensor<3002x32xbf16>) rotary_sin(%sin : tensor<3002x32xbf16>)
      : tensor<2x4x2x64xbf16>, tensor<2x1x3100x64xbf16>, tensor<2x1x3100x64xbf16> -> tensor<2x4x2x64xbf16>
  return %o, %k, %k_rec : tensor<2x4x2x64xbf16>, tensor<2x1x3100x64xbf16>, tensor<2x3100xi32>
}

// The query's rotation alone: 64 rows at q_offset + i over 256 cached
// keys from k_offset (keys as the cache holds them).
func.func @wgmma_bf16(%q: tensor<1x2x64x64xbf16>, %k: tensor<1x2x256x64xbf16>, %v: tensor<1x2x256x64xbf16>,
                      %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>,
                      %cos: tensor<1600x24xf16>, %sin: tensor<1600x24xf16>) -> tensor<1x2x64x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) causal rope = <rotary_dim = 48>
      rotary_cos(%cos : tensor<1600x24xf16>) rotary_sin(%sin : tensor<1600x24xf16>)
      : tensor<1x2x64x64xbf16>, tensor<1x2x256x64xbf16>, tensor<1x2x256x64xbf16> -> tensor<1x2x64x64xbf16>
  return %o : tensor<1x2x64x64xbf16>
}

func.func @wgmma_theta(%q: tensor<1x2x64x64xbf16>, %k: tensor<1x2x256x64xbf16>, %v: tensor<1x2x256x64xbf16>,
                       %qo: tensor<1xi32>, %ko: tensor<1xi32>, %kl: tensor<1xi32>) -> tensor<1x2x64x64xbf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) k_offset(%ko : tensor<1xi32>)
      kv_len(%kl : tensor<1xi32>) causal rope = <rotary_dim = 48, theta = 10000.0>
      : tensor<1x2x64x64xbf16>, tensor<1x2x256x64xbf16>, tensor<1x2x256x64xbf16> -> tensor<1x2x64x64xbf16>
  return %o : tensor<1x2x64x64xbf16>
}
