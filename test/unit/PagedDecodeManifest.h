//===- PagedDecodeManifest.h - a plan's manifest for the tests --*- C++ -*-===//
//
// A paged decode attention compiled with device validation, as the launch
// manifest gives it: its validation kernel (q_offset, kv_len, block_table,
// status, the sizes, phase), then the kernel (query, key, value, q_offset,
// kv_len, block_table, out, status after the pointers, the sizes). Shared
// by PlanTest and the thread stress test (ThreadTest).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TEST_UNIT_PAGEDDECODEMANIFEST_H
#define KVATTN_TEST_UNIT_PAGEDDECODEMANIFEST_H

namespace kvattn_test {

inline const char *const kPagedDecodeManifest =
    R"json({
  "format": "kvattn-launch-manifest", "version": 1, "chip": "sm_90",
  "ptx_file": "p.ptx",
  "kernels": [
    {
      "name": "d_validate",
      "params": [
        {"index": 0, "name": "q_offset", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 1, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 2, "name": "block_table", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B", "max_pages"], "access": "read"},
        {"index": 3, "name": "status", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": [16], "access": "write"},
        {"index": 4, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 5, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 6, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 7, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 8, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 9, "name": "num_pages", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 10, "name": "page_size", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 11, "name": "max_pages", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 12, "name": "phase", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "B", "y": 1, "z": 1}, "block": {"x": 128, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 0,
      "tile": {"block_m": 1, "block_n": 0, "num_warps": 4, "num_stages": 1},
      "kind": "validate"
    },
    {
      "name": "d",
      "params": [
        {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, 1, 64], "access": "read"},
        {"index": 1, "name": "key", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["num_pages", 16, 2, 64], "access": "read"},
        {"index": 2, "name": "value", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["num_pages", 16, 2, 64], "access": "read"},
        {"index": 3, "name": "q_offset", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 4, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
        {"index": 5, "name": "block_table", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B", "max_pages"], "access": "read"},
        {"index": 6, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, 1, 64], "access": "write"},
        {"index": 7, "name": "status", "kind": "pointer", "type": "u64", "element_type": "i64", "shape": [16], "access": "read"},
        {"index": 8, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 9, "name": "Hq", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 10, "name": "Hkv", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 11, "name": "L", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 12, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 13, "name": "num_pages", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 14, "name": "page_size", "kind": "scalar", "type": "i64", "element_type": "i64"},
        {"index": 15, "name": "max_pages", "kind": "scalar", "type": "i64", "element_type": "i64"}
      ],
      "grid": {"x": "B * Hq / 4", "y": "ceil(4 * L / 16)", "z": 1},
      "block": {"x": 128, "y": 1, "z": 1},
      "dynamic_shared_memory_bytes": 1024,
      "tile": {"block_m": 16, "block_n": 64, "num_warps": 4, "num_stages": 2, "group": 4, "split_kv": 1},
      "kind": "attention"
    }
  ]
})json";

} // namespace kvattn_test

#endif // KVATTN_TEST_UNIT_PAGEDDECODEMANIFEST_H
