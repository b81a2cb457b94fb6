/*===- capi-options-test.c - options, device selection, the CPU path ------===//
 *
 * The parts of the C API added after the first one, from C:
 *  - kvattn_compile with every option (the manifest's tile shows them), the
 *    options struct's size rules and validation;
 *  - kvattn_runtime_create_with_options: the device ordinal (out of range is
 *    an error naming the driver's count) and kvattn_runtime_device_info;
 *  - the CPU path: kvattn_cpu_compile + kvattn_cpu_run on host buffers,
 *    checked against a plain C attention (lower-right causal from q_offset,
 *    GQA), and its input/output validation.
 * Prints what happened for FileCheck (test/CAPI/capi-options.test).
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* GQA 4/2, L = 3 new rows at q_offset, S = 8 keys, D = 8, f32. */
static const char *kCpuIR =
    "func.func @append(%q: tensor<2x4x3x8xf32>, %k: tensor<2x2x8x8xf32>,\n"
    "                  %v: tensor<2x2x8x8xf32>, %pos: tensor<2xi32>)\n"
    "    -> tensor<2x4x3x8xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) causal\n"
    "      : tensor<2x4x3x8xf32>, tensor<2x2x8x8xf32>,\n"
    "        tensor<2x2x8x8xf32> -> tensor<2x4x3x8xf32>\n"
    "  return %o : tensor<2x4x3x8xf32>\n"
    "}\n";

/* The same with a dynamic batch. */
static const char *kDynamicIR =
    "func.func @append(%q: tensor<?x4x3x8xf32>, %k: tensor<?x2x8x8xf32>,\n"
    "                  %v: tensor<?x2x8x8xf32>, %pos: tensor<?xi32>)\n"
    "    -> tensor<?x4x3x8xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) causal\n"
    "      : tensor<?x4x3x8xf32>, tensor<?x2x8x8xf32>,\n"
    "        tensor<?x2x8x8xf32> -> tensor<?x4x3x8xf32>\n"
    "  return %o : tensor<?x4x3x8xf32>\n"
    "}\n";

static const char *kGpuIR =
    "func.func @append(%q: tensor<1x2x4x64xf16>, %k: tensor<1x1x16x64xf16>,\n"
    "                  %v: tensor<1x1x16x64xf16>, %pos: tensor<1xi32>)\n"
    "    -> tensor<1x2x4x64xf16> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal\n"
    "      : tensor<1x2x4x64xf16>, tensor<1x1x16x64xf16>,\n"
    "        tensor<1x1x16x64xf16> -> tensor<1x2x4x64xf16>\n"
    "  return %o : tensor<1x2x4x64xf16>\n"
    "}\n";

enum { B = 2, HQ = 4, HKV = 2, L = 3, S = 8, D = 8 };

static void refused(const char *what, int rc, char **error) {
  printf("%s %s: %s\n", what, rc ? "refused" : "ACCEPTED",
         *error ? *error : "(no message)");
  kvattn_free(*error);
  *error = NULL;
}

static int fail(const char *what, char *error) {
  printf("%s failed: %s\n", what, error ? error : "(no message)");
  kvattn_free(error);
  return 1;
}

/* Plain attention: query row i of batch b is at position q_offset[b] + i
 * and sees the keys j <= that position (lower-right causal). */
static void reference(const float *q, const float *k, const float *v,
                      const int *pos, float *out) {
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h) {
      int g = h / (HQ / HKV);
      for (int i = 0; i < L; ++i) {
        const float *qi = q + ((b * HQ + h) * L + i) * D;
        int last = pos[b] + i;
        double s[S], m = -INFINITY, sum = 0;
        for (int j = 0; j <= last; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += qi[d] * k[((b * HKV + g) * S + j) * D + d];
          s[j] = dot / sqrt((double)D);
          if (s[j] > m)
            m = s[j];
        }
        for (int j = 0; j <= last; ++j)
          sum += s[j] = exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j <= last; ++j)
            acc += s[j] * v[((b * HKV + g) * S + j) * D + d];
          out[((b * HQ + h) * L + i) * D + d] = (float)(acc / sum);
        }
      }
    }
}

static double maxError(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    if (fabs(a[i] - b[i]) > worst)
      worst = fabs(a[i] - b[i]);
  return worst;
}

static float q[B * HQ * L * D], k[B * HKV * S * D], v[B * HKV * S * D];
static float out[B * HQ * L * D], want[B * HQ * L * D];

static int cpu(void) {
  char *error = NULL;
  for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); ++i)
    q[i] = (float)((int)(i * 37 % 101) - 50) / 32.0f;
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); ++i) {
    k[i] = (float)((int)(i * 53 % 97) - 48) / 32.0f;
    v[i] = (float)((int)(i * 29 % 89) - 44) / 8.0f;
  }
  int pos[B] = {5, 2}; /* distinct: a wrong mask alignment changes rows */

  kvattn_compile_options options;
  kvattn_compile_options_init(&options);
  options.threads = 1;
  options.block_n = 4; /* two KV blocks: the mask crosses a block edge */
  kvattn_cpu_program *program = NULL;
  if (kvattn_cpu_compile(kCpuIR, NULL, &options, &program, &error))
    return fail("cpu compile", error);
  printf("cpu: @append takes %zu, returns %zu\n",
         kvattn_cpu_program_num_arguments(program),
         kvattn_cpu_program_num_results(program));
  kvattn_dtype dtype;
  size_t rank;
  int64_t dims[4];
  if (kvattn_cpu_program_type(program, 0, 3, &dtype, &rank, dims, 4, &error))
    return fail("cpu type", error);
  printf("cpu: argument 3 dtype %d rank %zu dim0 %lld\n", (int)dtype, rank,
         (long long)dims[0]);
  refused("cpu type",
          kvattn_cpu_program_type(program, 1, 1, NULL, NULL, NULL, 0, &error),
          &error);

  int64_t qShape[] = {B, HQ, L, D}, kvShape[] = {B, HKV, S, D},
          posShape[] = {B};
  kvattn_host_tensor in[4] = {{q, KVATTN_F32, 4, qShape},
                              {k, KVATTN_F32, 4, kvShape},
                              {v, KVATTN_F32, 4, kvShape},
                              {pos, KVATTN_I32, 1, posShape}};
  kvattn_host_tensor res = {out, KVATTN_F32, 4, qShape};
  if (kvattn_cpu_run(program, in, 4, &res, 1, &error))
    return fail("cpu run", error);
  reference(q, k, v, pos, want);
  double err = maxError(out, want, sizeof(out) / sizeof(out[0]));
  printf("cpu: max error vs plain C %s (%.2g)\n", err < 1e-4 ? "PASS" : "FAIL",
         err);
  /* The mask is the lower-right one: with q_offset 0 instead of 5 the rows
   * of batch 0 see fewer keys and differ. */
  int shifted[B] = {0, 2};
  reference(q, k, v, shifted, want);
  printf("cpu: differs from a misaligned mask: %s\n",
         maxError(out, want, sizeof(out) / sizeof(out[0])) > 1e-2 ? "yes"
                                                                  : "NO");

  /* Results kept in the program. */
  if (kvattn_cpu_run(program, in, 4, NULL, 0, &error))
    return fail("cpu run (kept)", error);
  kvattn_host_tensor kept;
  if (kvattn_cpu_program_result(program, 0, &kept, &error))
    return fail("cpu result", error);
  reference(q, k, v, pos, want);
  printf("cpu: kept result rank %zu dims %lldx%lldx%lldx%lld %s\n", kept.rank,
         (long long)kept.shape[0], (long long)kept.shape[1],
         (long long)kept.shape[2], (long long)kept.shape[3],
         maxError((const float *)kept.data, want, sizeof(want) / 4) < 1e-4
             ? "PASS"
             : "FAIL");
  refused("cpu result", kvattn_cpu_program_result(program, 1, &kept, &error),
          &error);

  /* Bad inputs: every one a message. */
  refused("cpu run", kvattn_cpu_run(program, in, 3, NULL, 0, &error), &error);
  kvattn_host_tensor bad[4];
  memcpy(bad, in, sizeof(in));
  bad[0].dtype = KVATTN_F16;
  refused("cpu run", kvattn_cpu_run(program, bad, 4, NULL, 0, &error), &error);
  memcpy(bad, in, sizeof(in));
  bad[1].rank = 3;
  refused("cpu run", kvattn_cpu_run(program, bad, 4, NULL, 0, &error), &error);
  int64_t wrongS[] = {B, HKV, S - 1, D};
  memcpy(bad, in, sizeof(in));
  bad[2].shape = wrongS;
  refused("cpu run", kvattn_cpu_run(program, bad, 4, NULL, 0, &error), &error);
  memcpy(bad, in, sizeof(in));
  bad[0].data = NULL;
  refused("cpu run", kvattn_cpu_run(program, bad, 4, NULL, 0, &error), &error);
  memcpy(bad, in, sizeof(in));
  bad[3].dtype = (kvattn_dtype)42;
  refused("cpu run", kvattn_cpu_run(program, bad, 4, NULL, 0, &error), &error);
  int far[B] = {5, -1}; /* a negative offset */
  memcpy(bad, in, sizeof(in));
  bad[3].data = far;
  refused("cpu run", kvattn_cpu_run(program, bad, 4, NULL, 0, &error), &error);
  int64_t wrongOut[] = {B, HQ, L, D + 1};
  kvattn_host_tensor badOut = {out, KVATTN_F32, 4, wrongOut};
  refused("cpu run", kvattn_cpu_run(program, in, 4, &badOut, 1, &error),
          &error);
  badOut.shape = qShape;
  badOut.dtype = KVATTN_BF16;
  refused("cpu run", kvattn_cpu_run(program, in, 4, &badOut, 1, &error),
          &error);
  kvattn_cpu_program_destroy(program);

  /* A dynamic batch: one program, two batch sizes. */
  if (kvattn_cpu_compile(kDynamicIR, "append", &options, &program, &error))
    return fail("cpu compile (dynamic)", error);
  kvattn_cpu_program_type(program, 0, 0, &dtype, &rank, dims, 4, &error);
  printf("cpu: dynamic argument 0 dims %lldx%lldx%lldx%lld\n",
         (long long)dims[0], (long long)dims[1], (long long)dims[2],
         (long long)dims[3]);
  int64_t q1[] = {1, HQ, L, D}, kv1[] = {1, HKV, S, D}, p1[] = {1};
  kvattn_host_tensor in1[4] = {{q, KVATTN_F32, 4, q1},
                               {k, KVATTN_F32, 4, kv1},
                               {v, KVATTN_F32, 4, kv1},
                               {pos, KVATTN_I32, 1, p1}};
  if (kvattn_cpu_run(program, in1, 4, NULL, 0, &error))
    return fail("cpu run (B=1)", error);
  kvattn_cpu_program_result(program, 0, &kept, &error);
  reference(q, k, v, pos, want); /* batch 0 of the B = 2 reference */
  printf("cpu: dynamic B=1 %s\n",
         kept.shape[0] == 1 &&
                 maxError((const float *)kept.data, want, HQ * L * D) < 1e-4
             ? "PASS"
             : "FAIL");
  if (kvattn_cpu_run(program, in, 4, &res, 1, &error))
    return fail("cpu run (B=2)", error);
  printf("cpu: dynamic B=2 %s\n",
         maxError(out, want, sizeof(out) / 4) < 1e-4 ? "PASS" : "FAIL");
  kvattn_cpu_program_destroy(program);

  /* Compile errors. */
  refused("cpu compile",
          kvattn_cpu_compile(kCpuIR, "nope", NULL, &program, &error), &error);
  refused("cpu compile",
          kvattn_cpu_compile("func.func @f(", NULL, NULL, &program, &error),
          &error);
  kvattn_compile_options badOptions = options;
  badOptions.vector_width = 3;
  refused("cpu compile",
          kvattn_cpu_compile(kCpuIR, NULL, &badOptions, &program, &error),
          &error);
  return 0;
}

static int gpuOptions(void) {
  char *error = NULL, *image = NULL, *manifest = NULL;
  kvattn_compile_options options;
  kvattn_compile_options_init(&options);
  printf("defaults: size %s, block_m %lld, num_stages %lld, split_kv %lld, "
         "pack_gqa %d, tensor_cores %d, opt_level %d, device_validation %d\n",
         options.struct_size == sizeof(options) ? "ok" : "BAD",
         (long long)options.block_m, (long long)options.num_stages,
         (long long)options.split_kv, options.pack_gqa, options.tensor_cores,
         options.opt_level, options.device_validation);
  options.chip = "sm_90";
  options.block_m = 16;
  options.block_n = 32;
  options.num_warps = 1;
  options.split_kv = 1;
  options.tensor_cores = 0;
  if (kvattn_compile(kGpuIR, &options, KVATTN_IMAGE_PTX, &image, &manifest,
                     &error))
    return fail("compile with options", error);
  const char *tile = strstr(manifest, "\"tile\"");
  const char *chip = strstr(manifest, "\"chip\"");
  printf("options: %.15s %.60s\n", chip ? chip : "(no chip)",
         tile ? tile : "(no tile)");
  kvattn_free(image);
  kvattn_free(manifest);
  options.split_kv = 2;
  if (kvattn_compile(kGpuIR, &options, KVATTN_IMAGE_DEVICE_IR, &image,
                     &manifest, &error))
    return fail("compile split", error);
  printf("split: %s, image %s\n",
         strstr(manifest, "\"kind\": \"merge\"") ? "merge kernel"
                                                 : "NO merge kernel",
         strstr(image, "nvptx64") ? "device IR" : "NOT device IR");
  kvattn_free(image);
  kvattn_free(manifest);

  /* An older caller: the header's first fields only (chip), the rest the
   * library's defaults. */
  kvattn_compile_options old;
  memset(&old, 0x7f, sizeof(old));
  old.struct_size = sizeof(size_t) + sizeof(const char *);
  old.chip = "sm_80";
  if (kvattn_compile(kGpuIR, &old, KVATTN_IMAGE_PTX, &image, &manifest, &error))
    return fail("compile (old struct)", error);
  printf("old struct: ok\n");
  kvattn_free(image);
  kvattn_free(manifest);

  /* Device validation: the status word in every kernel, a validation
   * kernel for the one reading q_offset. */
  kvattn_compile_options validated = options;
  validated.split_kv = 1;
  validated.device_validation = 1;
  if (kvattn_compile(kGpuIR, &validated, KVATTN_IMAGE_DEVICE_IR, &image,
                     &manifest, &error))
    return fail("compile with device validation", error);
  printf("device_validation 1: %s, %s\n",
         strstr(manifest, "\"name\": \"status\"") ? "status word"
                                                  : "NO status word",
         strstr(manifest, "\"kind\": \"validate\"") ? "validation kernel"
                                                    : "NO validation kernel");
  kvattn_free(image);
  kvattn_free(manifest);
  /* A caller built before device_validation existed: its struct ends
   * there, whatever the bytes after it hold (0x7f), so the default (off). */
  kvattn_compile_options older;
  memset(&older, 0x7f, sizeof(older));
  memcpy(&older, &validated,
         offsetof(kvattn_compile_options, device_validation));
  older.struct_size = offsetof(kvattn_compile_options, device_validation);
  if (kvattn_compile(kGpuIR, &older, KVATTN_IMAGE_DEVICE_IR, &image, &manifest,
                     &error))
    return fail("compile (struct before device_validation)", error);
  printf("struct before device_validation: %s\n", strstr(manifest, "\"status\"")
                                                      ? "status word (WRONG)"
                                                      : "no status word");
  kvattn_free(image);
  kvattn_free(manifest);

  /* 64-bit index arithmetic, for tensors of 2^31 elements or more: the
   * manifest records it (the runtime then accepts such sizes). */
  kvattn_compile_options wide = options;
  wide.index_bitwidth = 64;
  if (kvattn_compile(kGpuIR, &wide, KVATTN_IMAGE_PTX, &image, &manifest,
                     &error))
    return fail("compile (index_bitwidth 64)", error);
  printf("index_bitwidth 64: %s\n", strstr(manifest, "\"index_bits\": 64")
                                        ? "manifest index_bits 64"
                                        : "no index_bits 64 (WRONG)");
  kvattn_free(image);
  kvattn_free(manifest);

  kvattn_compile_options bad = options;
  bad.device_validation = 2;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.reserved1 = 5;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.index_bitwidth = 48;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.in_place_appends = 2;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.reserved4 = 1;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.struct_size = 4;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.struct_size = sizeof(bad) + 8;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.block_m = -16;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  bad = options;
  bad.pack_gqa = 2;
  refused(
      "compile",
      kvattn_compile(kGpuIR, &bad, KVATTN_IMAGE_PTX, &image, &manifest, &error),
      &error);
  refused("compile",
          kvattn_compile(kGpuIR, NULL, (kvattn_image_kind)7, &image, &manifest,
                         &error),
          &error);
  return 0;
}

static int devices(void) {
  char *error = NULL, *path = NULL;
  if (kvattn_emulated_driver_path(&path, &error))
    return fail("emulated driver path", error);
  printf("emulated driver: %s\n",
         strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
  kvattn_free(path);
  kvattn_runtime_options options;
  kvattn_runtime_options_init(&options);
  kvattn_runtime *rt = NULL;
  options.device = 1;
  refused("device 1", kvattn_runtime_create_with_options(&rt, &options, &error),
          &error);
  options.device = -1;
  refused("device -1",
          kvattn_runtime_create_with_options(&rt, &options, &error), &error);
  options.device = 0;
  /* The struct_size rule of every versioned struct, before any driver. */
  options.struct_size = 4;
  refused("runtime options",
          kvattn_runtime_create_with_options(&rt, &options, &error), &error);
  options.struct_size = sizeof(options) + 8;
  refused("runtime options",
          kvattn_runtime_create_with_options(&rt, &options, &error), &error);
  options.struct_size = sizeof(options);
  options.reserved0 = 1;
  refused("runtime options",
          kvattn_runtime_create_with_options(&rt, &options, &error), &error);
  options.reserved0 = 0;
  options.driver_library = "/nonexistent/libcuda.so";
  refused("driver", kvattn_runtime_create_with_options(&rt, &options, &error),
          &error);
  options.driver_library = NULL;
  if (kvattn_runtime_create_with_options(&rt, &options, &error)) {
    printf("device 0: %s\n", error);
    kvattn_free(error);
    return 0;
  }
  int device = -1, cc = 0, sms = 0;
  if (kvattn_runtime_device_info(rt, &device, &cc, &sms, &error))
    return fail("device info", error);
  printf("device 0: ordinal %d, sm_%d, %d SMs\n", device, cc, sms);
  kvattn_runtime_destroy(rt);
  return 0;
}

/* A dump directory on a full disk (issue 30 item 8): a dumped file that
 * links to /dev/full (every write fails with ENOSPC). The library used to
 * end the host process ("LLVM ERROR: IO failure on output stream"); now the
 * compile fails with the file and the reason. */
static int dumps(void) {
  char dir[] = "/tmp/kvattn-capi-dump-XXXXXX";
  if (!mkdtemp(dir))
    return fail("mkdtemp", NULL);
  char link[128];
  snprintf(link, sizeof(link), "%s/0-input.mlir", dir);
  if (symlink("/dev/full", link))
    return fail("symlink", NULL);
  setenv("KVATTN_DUMP_DIR", dir, 1);
  char *ptx = NULL, *manifest = NULL, *error = NULL;
  int rc = kvattn_compile_to_ptx(kGpuIR, "sm_90", &ptx, &manifest, &error);
  unsetenv("KVATTN_DUMP_DIR");
  const char *tail = error ? strstr(error, "/0-input.mlir") : NULL;
  printf("dump on a full disk %s: %s\n", rc ? "refused" : "ACCEPTED",
         tail ? tail : (error ? error : "(no message)"));
  kvattn_free(ptx);
  kvattn_free(manifest);
  kvattn_free(error);
  unlink(link);
  rmdir(dir);
  return 0;
}

int main(void) {
  if (cpu() || gpuOptions() || devices() || dumps())
    return 1;
  printf("done\n");
  return 0;
}
