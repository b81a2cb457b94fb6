// Links only KVAttn::KVAttnRuntime: validates a launch against a manifest
// and tries to open the driver.
#include "kvattn/Runtime/Runtime.h"

#include <cstdio>

int main() {
  const char *manifest =
      R"json({"format": "kvattn-launch-manifest", "version": 1,
    "chip": "sm_80", "ptx_file": "k.ptx", "kernels": [{"name": "k",
    "params": [{"index": 0, "name": "kv_len", "kind": "pointer",
                "type": "u64", "element_type": "i32", "shape": ["B"],
                "access": "read"}],
    "grid": {"x": "B * Hq", "y": "ceil(L / 64)", "z": 1},
    "block": {"x": 128, "y": 1, "z": 1}, "dynamic_shared_memory_bytes": 0,
    "tile": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}}]})json";
  mlir::kvattn::rt::Manifest m;
  mlir::kvattn::Status s = mlir::kvattn::rt::parseManifest(manifest, m);
  std::printf("manifest: %s\n", s.isOk() ? "ok" : s.message().c_str());
  mlir::kvattn::rt::LaunchArgs args;
  args.sizes = {1, 1, 1, 1, 4};
  args.metadata["kv_len"] = {9};
  s = mlir::kvattn::rt::validateLaunch(m.kernels[0], args);
  std::printf("validation: %s\n", s.message().c_str());
  std::unique_ptr<mlir::kvattn::rt::Runtime> rt;
  mlir::kvattn::rt::RuntimeOptions options;
  options.libraryPath = "/nonexistent/libcuda.so.1";
  s = mlir::kvattn::rt::Runtime::create(rt, options);
  std::printf("runtime: %s\n", s.isOk() ? "created" : "no driver");
  return 0;
}
