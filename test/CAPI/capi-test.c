/*===- capi-test.c - the kvattn C API from C ------------------------------===//
 *
 * Compiles a cached append to PTX, then (with whatever driver
 * $KVATTN_LIBCUDA names, or libcuda.so.1) creates a runtime, uploads the
 * inputs, launches from the manifest, reads the output back and destroys
 * everything. Prints what happened for FileCheck (test/CAPI/capi.test).
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kIR =
    "func.func @append(%q: tensor<1x2x4x64xf16>, %k: tensor<1x1x16x64xf16>,\n"
    "                  %v: tensor<1x1x16x64xf16>, %pos: tensor<1xi32>,\n"
    "                  %len: tensor<1xi32>) -> tensor<1x2x4x64xf16> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>)\n"
    "      kv_len(%len : tensor<1xi32>) causal\n"
    "      : tensor<1x2x4x64xf16>, tensor<1x1x16x64xf16>,\n"
    "        tensor<1x1x16x64xf16> -> tensor<1x2x4x64xf16>\n"
    "  return %o : tensor<1x2x4x64xf16>\n"
    "}\n";

static int fail(const char *what, char *error) {
  printf("%s failed: %s\n", what, error ? error : "(no message)");
  kvattn_free(error);
  return 1;
}

/* Prints the error of a call that must fail. */
static void refused(const char *what, int rc, char **error) {
  printf("%s %s: %s\n", what, rc ? "refused" : "ACCEPTED",
         *error ? *error : "(no message)");
  kvattn_free(*error);
  *error = NULL;
}

int main(void) {
  char *ptx = NULL, *manifest = NULL, *error = NULL;
  if (kvattn_compile_to_ptx(kIR, "sm_80", &ptx, &manifest, &error))
    return fail("compile", error);
  printf("compiled: %s, %s\n",
         strstr(ptx, ".entry append_kvattn_0(") ? "PTX has the entry"
                                                : "PTX lacks the entry",
         strstr(manifest, "\"format\": \"kvattn-launch-manifest\"")
             ? "manifest ok"
             : "manifest bad");

  /* Bad IR gives a message, not a crash. */
  char *p2 = NULL, *m2 = NULL;
  if (kvattn_compile_to_ptx("func.func @f(", NULL, &p2, &m2, &error)) {
    printf("bad IR: %.40s\n", error);
    kvattn_free(error);
    error = NULL;
  }

  /* A chip the lowering does not support is a named error, not an abort. */
  refused("compile", kvattn_compile_to_ptx(kIR, "sm_50", &p2, &m2, &error),
          &error);
  /* sm_90a selects the wgmma lowering (issue 32) where a kernel fits it. */
  if (kvattn_compile_to_ptx(kIR, "sm_90a", &p2, &m2, &error))
    return fail("compile sm_90a", error);
  printf("compiled sm_90a: %s\n", strstr(p2, ".target sm_90a")
                                      ? "PTX targets sm_90a"
                                      : "PTX TARGET MISSING");
  kvattn_free(p2);
  kvattn_free(m2);
  p2 = m2 = NULL;

  kvattn_runtime *rt = NULL;
  if (kvattn_runtime_create(&rt, &error)) {
    printf("runtime: %s\n", error);
    kvattn_free(error);
    kvattn_free(ptx);
    kvattn_free(manifest);
    return 0; /* No driver: the message is the result. */
  }
  printf("runtime: created\n");

  size_t qBytes = 1 * 2 * 4 * 64 * 2, kvBytes = 1 * 1 * 16 * 64 * 2;
  uint64_t q, k, v, out;
  if (kvattn_device_alloc(rt, qBytes, &q, &error) ||
      kvattn_device_alloc(rt, kvBytes, &k, &error) ||
      kvattn_device_alloc(rt, kvBytes, &v, &error) ||
      kvattn_device_alloc(rt, qBytes, &out, &error))
    return fail("alloc", error);
  unsigned short *host = calloc(kvBytes, 1);
  if (kvattn_copy_to_device(rt, q, host, qBytes, &error) ||
      kvattn_copy_to_device(rt, k, host, kvBytes, &error) ||
      kvattn_copy_to_device(rt, v, host, kvBytes, &error))
    return fail("copy in", error);

  kvattn_sizes sizes = {1, 2, 1, 4, 16};
  kvattn_buffer buffers[] = {
      {"query", q}, {"key", k}, {"value", v}, {"out", out}};
  int64_t pos[] = {12}, len[] = {16}, bad[] = {17};
  kvattn_metadata metadata[] = {{"q_offset", pos, 1}, {"kv_len", len, 1}};
  if (kvattn_launch(rt, ptx, manifest, 0, sizes, buffers, 4, metadata, 2,
                    &error))
    return fail("launch", error);
  if (kvattn_synchronize(rt, &error) ||
      kvattn_copy_to_host(rt, host, out, qBytes, &error))
    return fail("copy out", error);
  printf("launch: ok\n");

  /* The same launch on a caller's stream (here the legacy default, 0). */
  if (kvattn_runtime_set_stream(rt, 0, &error) ||
      kvattn_launch(rt, ptx, manifest, 0, sizes, buffers, 4, metadata, 2,
                    &error) ||
      kvattn_synchronize(rt, &error) ||
      kvattn_runtime_use_own_stream(rt, &error))
    return fail("launch on a caller's stream", error);
  printf("launch on stream 0: ok\n");

  /* A kernel loaded once, launched twice, with the metadata slots reserved
   * first (a plan step). */
  kvattn_kernel *kernel = NULL;
  if (kvattn_runtime_reserve_metadata(rt, 64, &error) ||
      kvattn_kernel_load(rt, ptx, manifest, 0, &kernel, &error) ||
      kvattn_kernel_launch(kernel, sizes, buffers, 4, metadata, 2, &error) ||
      kvattn_kernel_launch(kernel, sizes, buffers, 4, metadata, 2, &error) ||
      kvattn_synchronize(rt, &error))
    return fail("loaded kernel", error);
  kvattn_kernel_destroy(kernel);
  if (kvattn_kernel_load(rt, ptx, manifest, 1, &kernel, &error)) {
    printf("kernel 1: %s\n", error);
    kvattn_free(error);
    error = NULL;
  }
  printf("loaded kernel: ok\n");
  /* SIZE_MAX looped forever (the slot capacity doubled until it wrapped). */
  refused("reserve SIZE_MAX",
          kvattn_runtime_reserve_metadata(rt, SIZE_MAX, &error), &error);

  /* A bad kv_len is refused before launching, with the value named. */
  metadata[1].values = bad;
  if (kvattn_launch(rt, ptx, manifest, 0, sizes, buffers, 4, metadata, 2,
                    &error)) {
    printf("bad kv_len: %s\n", error);
    kvattn_free(error);
  }
  metadata[1].values = len;

  /* Null pointers and names given twice are errors, never crashes or a
   * silent "last wins". */
  kvattn_metadata twice[] = {{"q_offset", pos, 1}, {"q_offset", pos, 1}};
  kvattn_buffer unnamed[] = {{NULL, q}};
  uint64_t scratch = 0;
  refused("alloc", kvattn_device_alloc(NULL, 16, &scratch, &error), &error);
  refused("alloc", kvattn_device_alloc(rt, 16, NULL, &error), &error);
  refused("copy in", kvattn_copy_to_device(rt, q, NULL, 16, &error), &error);
  refused("copy out", kvattn_copy_to_host(rt, NULL, q, 16, &error), &error);
  refused("sync", kvattn_synchronize(NULL, &error), &error);
  refused(
      "launch",
      kvattn_launch(rt, ptx, manifest, 0, sizes, NULL, 4, metadata, 2, &error),
      &error);
  refused("launch",
          kvattn_launch(rt, ptx, manifest, 0, sizes, unnamed, 1, metadata, 2,
                        &error),
          &error);
  refused(
      "launch",
      kvattn_launch(rt, ptx, manifest, 0, sizes, buffers, 4, twice, 2, &error),
      &error);

  kvattn_device_free(rt, q, NULL);
  kvattn_device_free(rt, k, NULL);
  kvattn_device_free(rt, v, NULL);
  kvattn_device_free(rt, out, NULL);
  kvattn_runtime_destroy(rt);
  free(host);
  kvattn_free(ptx);
  kvattn_free(manifest);
  printf("destroyed\n");
  return 0;
}
