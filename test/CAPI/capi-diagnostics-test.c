/*===- capi-diagnostics-test.c - the compiler's diagnostics, from C -------===*
 *
 * The upper-left append lint through the C API, with no MLIR diagnostic
 * handler anywhere (a C program cannot register one):
 *  - kvattn_cpu_compile keeps torch's is_causal meaning, the program carries
 *    the warning (kvattn_cpu_program_diagnostic) and runs the seeds' 2x5
 *    example to 10 and 15; with options.fix_upper_left_appends = 1 it
 *    carries the fix's remark and gives 25 and 30; lower-right IR has no
 *    diagnostic;
 *  - kvattn_compile (the emulated GPU's image) puts the same warning in the
 *    manifest's "diagnostics", and again when the kernel cache answers;
 *  - the accessor's errors.
 * Prints what happened for FileCheck (test/CAPI/capi-diagnostics.test).
 *
 *===----------------------------------------------------------------------===*/

#include "check.h"
#include "kvattn-c/KVAttn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* examples/cached-append.mlir's framework IR: 2 tokens appended to a cache
 * of capacity 5 that holds 3, then SDPA with the given causal alignment. */
static const char *kIR =
    "func.func @step(%q: tensor<1x1x2x1xf32>, %kc: tensor<1x1x5x1xf32>,\n"
    "    %vc: tensor<1x1x5x1xf32>, %kn: tensor<1x1x2x1xf32>,\n"
    "    %vn: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>)\n"
    "    -> tensor<1x1x2x1xf32> {\n"
    "  %k = kvattn.append %kn into %kc at %pos\n"
    "      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>\n"
    "  %v = kvattn.append %vn into %vc at %pos\n"
    "      : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>\n"
    "  %o = kvattn.sdpa %q, %k, %v causal = ";
static const char *kIRTail =
    "\n      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32>\n"
    "      -> tensor<1x1x2x1xf32>\n"
    "  return %o : tensor<1x1x2x1xf32>\n"
    "}\n";

/* The IR with `causal` as its alignment. */
static void makeIR(char *ir, size_t size, const char *causal) {
  snprintf(ir, size, "%s%s%s", kIR, causal, kIRTail);
}

static void printDiagnostics(const char *what, kvattn_cpu_program *p) {
  size_t n = kvattn_cpu_program_num_diagnostics(p);
  printf("%s: %zu diagnostic%s\n", what, n, n == 1 ? "" : "s");
  for (size_t i = 0; i < n; ++i) {
    kvattn_diagnostic d;
    char *error = NULL;
    if (kvattn_cpu_program_diagnostic(p, i, &d, &error))
      die("kvattn_cpu_program_diagnostic", error);
    static const char *names[] = {"error", "warning", "remark", "note"};
    printf("  %s at %s: %.60s\n", names[d.severity], d.location, d.message);
  }
}

/* Compiles `causal` IR for the CPU and runs the 2x5 example. */
static kvattn_cpu_program *run(const char *what, const char *causal, int fix) {
  char ir[2048];
  makeIR(ir, sizeof ir, causal);
  kvattn_compile_options options;
  kvattn_compile_options_init(&options);
  options.threads = 1;
  options.fix_upper_left_appends = fix;
  kvattn_cpu_program *p = NULL;
  char *error = NULL;
  if (kvattn_cpu_compile(ir, NULL, &options, &p, &error))
    die(what, error);
  float q[2] = {0, 0}, kc[5] = {0, 0, 0, 0, 0}, vc[5] = {10, 20, 30, 0, 0};
  float kn[2] = {0, 0}, vn[2] = {40, 50}, out[2] = {0, 0};
  int32_t pos[1] = {3};
  int64_t s2[4] = {1, 1, 2, 1}, s5[4] = {1, 1, 5, 1}, s1[1] = {1};
  kvattn_host_tensor in[6] = {
      {q, KVATTN_F32, 4, s2},  {kc, KVATTN_F32, 4, s5},
      {vc, KVATTN_F32, 4, s5}, {kn, KVATTN_F32, 4, s2},
      {vn, KVATTN_F32, 4, s2}, {pos, KVATTN_I32, 1, s1}};
  kvattn_host_tensor o = {out, KVATTN_F32, 4, s2};
  if (kvattn_cpu_run(p, in, 6, &o, 1, &error))
    die(what, error);
  printf("%s: out %g %g\n", what, out[0], out[1]);
  printDiagnostics(what, p);
  return p;
}

static const char *manifestDiagnostics(const char *manifest) {
  const char *d = strstr(manifest, "\"diagnostics\"");
  return d ? d : "(no \"diagnostics\")";
}

int main(void) {
  kvattn_cpu_program *upper = run("cpu upper_left", "upper_left", 0);
  CHECK(kvattn_cpu_program_num_diagnostics(upper) == 1, "one warning");
  kvattn_cpu_program *fixed = run("cpu fixed", "upper_left", 1);
  CHECK(kvattn_cpu_program_num_diagnostics(fixed) == 1, "one remark");
  kvattn_cpu_program *lower = run("cpu lower_right", "lower_right", 0);
  CHECK(kvattn_cpu_program_num_diagnostics(lower) == 0, "no diagnostic");

  kvattn_diagnostic d;
  char *error = NULL;
  int rc = kvattn_cpu_program_diagnostic(upper, 1, &d, &error);
  printf("index 1 refused: %d %s\n", rc, error ? error : "?");
  kvattn_free(error);
  error = NULL;
  rc = kvattn_cpu_program_diagnostic(NULL, 0, &d, &error);
  printf("null program refused: %d %s\n", rc, error ? error : "?");
  kvattn_free(error);
  printf("null program count: %zu\n", kvattn_cpu_program_num_diagnostics(NULL));
  kvattn_cpu_program_destroy(upper);
  kvattn_cpu_program_destroy(fixed);
  kvattn_cpu_program_destroy(lower);

  /* The GPU image: the manifest says it, compiled and from the cache. */
  char ir[2048];
  makeIR(ir, sizeof ir, "upper_left");
  for (int i = 0; i < 2; ++i) {
    char *image = NULL, *manifest = NULL;
    if (kvattn_compile(ir, NULL, KVATTN_IMAGE_DEVICE_IR, &image, &manifest,
                       &error))
      die("kvattn_compile", error);
    printf("gpu %d: %.120s\n", i, manifestDiagnostics(manifest));
    kvattn_free(image);
    kvattn_free(manifest);
  }
  kvattn_compile_options options;
  kvattn_compile_options_init(&options);
  options.fix_upper_left_appends = 2;
  char *image = NULL, *manifest = NULL;
  rc = kvattn_compile(ir, &options, KVATTN_IMAGE_DEVICE_IR, &image, &manifest,
                      &error);
  printf("fix 2 refused: %d %s\n", rc, error ? error : "?");
  kvattn_free(error);
  return finish();
}
