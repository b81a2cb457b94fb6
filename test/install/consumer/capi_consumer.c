/* Links KVAttn::KVAttnCAPIShared (libkvattn_c.so) from C alone: compiles the
 * 2x5 example of docs/semantics.md for the host and runs it. Zero queries
 * and keys weigh the allowed values equally; value j is 10 (j + 1), so the
 * rows at positions 3 and 4 average 10..40 and 10..50. */
#include "kvattn-c/KVAttn.h"

#include <stdio.h>

static const char *kIR =
    "func.func @f(%q: tensor<1x1x2x8xf32>, %k: tensor<1x1x5x8xf32>,\n"
    "             %v: tensor<1x1x5x8xf32>, %pos: tensor<1xi32>)\n"
    "    -> tensor<1x1x2x8xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal\n"
    "      : tensor<1x1x2x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>\n"
    "      -> tensor<1x1x2x8xf32>\n"
    "  return %o : tensor<1x1x2x8xf32>\n"
    "}\n";

int main(void) {
  float q[16] = {0}, k[40] = {0}, v[40], out[16];
  int pos[1] = {3};
  for (int i = 0; i < 40; ++i)
    v[i] = 10.0f * (float)(i / 8 + 1);
  const int64_t qShape[4] = {1, 1, 2, 8}, kvShape[4] = {1, 1, 5, 8};
  const int64_t posShape[1] = {1};
  kvattn_host_tensor in[4] = {{q, KVATTN_F32, 4, qShape},
                              {k, KVATTN_F32, 4, kvShape},
                              {v, KVATTN_F32, 4, kvShape},
                              {pos, KVATTN_I32, 1, posShape}};
  kvattn_host_tensor res = {out, KVATTN_F32, 4, qShape};
  kvattn_cpu_program *program = NULL;
  char *error = NULL;
  if (kvattn_cpu_compile(kIR, NULL, NULL, &program, &error) ||
      kvattn_cpu_run(program, in, 4, &res, 1, &error)) {
    printf("capi: error: %s\n", error ? error : "?");
    kvattn_free(error);
    kvattn_cpu_program_destroy(program);
    return 1;
  }
  printf("capi: %g %g\n", out[0], out[8]);
  /* Bad input gets a message, not a crash: a negative position. */
  pos[0] = -1;
  if (kvattn_cpu_run(program, in, 4, &res, 1, &error)) {
    printf("capi: rejected: %s\n", error);
    kvattn_free(error);
  }
  kvattn_cpu_program_destroy(program);
  return 0;
}
