// REQUIRES: libdevice
// RUN: rm -rf %t && kvattn-compile %s -o %t/decode --chip=sm_90 | FileCheck %s --check-prefix=TOOL
// RUN: FileCheck %s --input-file=%t/decode.json
// RUN: FileCheck %s --input-file=%t/decode.ptx --check-prefix=PTX
// RUN: kvattn-compile %s -o %t/nosplit --chip=sm_90 --split-kv=1 > /dev/null
// RUN: FileCheck %s --input-file=%t/nosplit.json --check-prefix=NOSPLIT
// The kernel cache keeps the rule: a hit writes the same manifest.
// RUN: env KVATTN_CACHE_DIR=%t/cache kvattn-compile %s -o %t/miss --chip=sm_90 --kernel-cache | FileCheck %s --check-prefix=MISS
// RUN: env KVATTN_CACHE_DIR=%t/cache kvattn-compile %s -o %t/hit --chip=sm_90 --kernel-cache | FileCheck %s --check-prefix=HIT
// RUN: FileCheck %s --input-file=%t/hit.json
// MISS: kernel cache: miss
// HIT: kernel cache: hit
//
// A GQA decode (32 query heads over 8 kv heads, D = 128, bf16) compiled with
// dynamic B and S, kvattn-compile's default split-kv = 0: a run-time split
// (docs/kernel-abi.md, "Run-time split-KV"). Manifest version 2; the
// attention kernel's grid z and both kernels' last scalar are N; the part
// buffers are [N, B, 32, 1, ...] (the attention writes out itself when
// N = 1); both carry the rule (N_max 64, the
// attention's 16 x 32 tiles, G = 4, 8 one-warp programs per
// multiprocessor, chunks of at least 512 keys).

// TOOL: decode_kvattn_0: 13 params
// TOOL: decode_kvattn_1: 7 params

// CHECK: "version": 2,
// CHECK: "name": "decode_kvattn_0",
// CHECK: {"index": 4, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 32, 1, 128], "access": "write"},
// CHECK: {"index": 5, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1, 128], "access": "write"},
// CHECK: {"index": 6, "name": "lse_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1], "access": "write"},
// CHECK: {"index": 11, "name": "S", "kind": "scalar"
// CHECK: {"index": 12, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
// CHECK: "grid": {"x": "B * Hq / 4", "y": "ceil(4 * L / 16)", "z": "N"},
// CHECK: "tile": {"block_m": 16, "block_n": 32, "num_warps": 1, "num_stages": 2, "group": 4, "split_kv": 0},
// CHECK: "split": {"max": 64, "block_m": 16, "block_n": 32, "group": 4, "programs_per_sm": 8, "min_keys": 512, "num_sms": 132},
// CHECK: "kind": "attention"
// CHECK: "name": "decode_kvattn_1",
// CHECK: {"index": 1, "name": "out_parts", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["N", "B", 32, 1, 128], "access": "read"},
// CHECK: {"index": 6, "name": "N", "kind": "scalar", "type": "i64", "element_type": "i64"}
// CHECK: "grid": {"x": "B * Hq", "y": "ceil(L / 16)", "z": 1},
// CHECK: "split": {"max": 64, "block_m": 16, "block_n": 32, "group": 4, "programs_per_sm": 8, "min_keys": 512, "num_sms": 132},
// CHECK: "kind": "merge"

// The kernels' .entry take 13 and 7 parameters.
// PTX: .visible .entry decode_kvattn_0(
// PTX: .param .u64 decode_kvattn_0_param_12
// PTX-NOT: decode_kvattn_0_param_13
// PTX: .visible .entry decode_kvattn_1(
// PTX: .param .u64 decode_kvattn_1_param_6
// PTX-NOT: decode_kvattn_1_param_7

// split-kv = 1: version 1, one kernel, no N.
// NOSPLIT: "version": 1,
// NOSPLIT-NOT: "N"
// NOSPLIT: "z": 1},
// NOSPLIT-NOT: "split":
// NOSPLIT-NOT: decode_kvattn_1

func.func @decode(%q: tensor<?x32x1x128xbf16>, %k: tensor<?x8x?x128xbf16>,
                  %v: tensor<?x8x?x128xbf16>, %len: tensor<?xi32>) -> tensor<?x32x1x128xbf16> {
  %o = kvattn.attention %q, %k, %v kv_len(%len : tensor<?xi32>)
      : tensor<?x32x1x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16> -> tensor<?x32x1x128xbf16>
  return %o : tensor<?x32x1x128xbf16>
}
