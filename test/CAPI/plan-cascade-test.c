/*===- plan-cascade-test.c - a cascade plan on the emulated GPU ----------===*
 *
 * Shared-prefix (cascade) attention planned once (kvattn_plan_create over
 * IR with one kvattn.cascade, a dynamic prefix length P) and run with
 * kvattn_plan_run: the prefix kernel (kind "cascade_prefix", B = 1, the P
 * keys of `prefix_key`/`prefix_value`), the ragged suffix kernel and the
 * merge kernel (kind "cascade_merge") merge the two states on the device.
 * Checked against a float64 reference of plain attention over prefix +
 * suffix, for two prefix lengths (P from kvattn_sizes.P), with device
 * metadata and with host metadata; a negative q_offset is recorded in the
 * status word with the host's message; no memcheck report.
 *
 *   KVATTN_LIBCUDA=libkvattn_cuda_emu.so kvattn-plan-cascade-test
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { B = 3, HQ = 4, HKV = 2, D = 16, DV = 8, S = 12, T = 7, PMAX = 96 };

static const char *kIR =
    "func.func @cascade(%q: tensor<1x4x7x16xf32>,\n"
    "    %pk: tensor<1x2x?x16xf32>, %pv: tensor<1x2x?x8xf32>,\n"
    "    %k: tensor<3x2x12x16xf32>, %v: tensor<3x2x12x8xf32>,\n"
    "    %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>)\n"
    "    -> (tensor<1x4x7x8xf32>, tensor<1x4x7xf32>) {\n"
    "  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v\n"
    "      q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>)\n"
    "      kv_len(%kl : tensor<3xi32>) causal\n"
    "      : tensor<1x4x7x16xf32>, tensor<1x2x?x16xf32>,\n"
    "        tensor<1x2x?x8xf32>, tensor<3x2x12x16xf32>,\n"
    "        tensor<3x2x12x8xf32> -> tensor<1x4x7x8xf32>, tensor<1x4x7xf32>\n"
    "  return %o, %lse : tensor<1x4x7x8xf32>, tensor<1x4x7xf32>\n"
    "}\n";

static float rnd(unsigned *state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Plain attention of each sequence's rows over prefix + suffix, float64. */
static void reference(int p, const float *q, const float *pk, const float *pv,
                      const float *k, const float *v, const int32_t *qs,
                      const int32_t *qo, const int32_t *kl, double *out,
                      double *lse) {
  const double scale = 1.0 / sqrt((double)D);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h) {
      const int g = h / (HQ / HKV);
      for (int t = qs[b]; t < qs[b + 1]; ++t) {
        const int qp = p + qo[b] + (t - qs[b]);
        double s[PMAX + S], m = -INFINITY;
        int n = 0;
        for (int j = 0; j < p + kl[b]; ++j, ++n) {
          const float *key = j < p ? pk + ((size_t)g * p + j) * D
                                   : k + (((size_t)b * HKV + g) * S + j - p) * D;
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += (double)q[((size_t)h * T + t) * D + d] * key[d];
          s[n] = j <= qp ? dot * scale : -INFINITY; /* causal: kp <= qp */
          if (s[n] > m)
            m = s[n];
        }
        double sum = 0, acc[DV] = {0};
        for (int j = 0; j < n; ++j) {
          if (s[j] == -INFINITY)
            continue;
          const double w = exp(s[j] - m);
          const float *val =
              j < p ? pv + ((size_t)g * p + j) * DV
                    : v + (((size_t)b * HKV + g) * S + j - p) * DV;
          sum += w;
          for (int d = 0; d < DV; ++d)
            acc[d] += w * val[d];
        }
        for (int d = 0; d < DV; ++d)
          out[((size_t)h * T + t) * DV + d] = sum > 0 ? acc[d] / sum : 0;
        lse[(size_t)h * T + t] = sum > 0 ? m + log(sum) : -INFINITY;
      }
    }
}

int main(void) {
  char *error = NULL;
  kvattn_runtime *rt = NULL;
  if (kvattn_runtime_create(&rt, &error))
    die("runtime", error);
  const char *driver = getenv("KVATTN_LIBCUDA");
  void *emu = driver ? dlopen(driver, RTLD_NOW | RTLD_NOLOAD) : NULL;
  const char *(*takeReports)(void) =
      emu ? (const char *(*)(void))dlsym(emu, "kvattn_emu_take_reports") : NULL;

  kvattn_sizes bounds = {B, HQ, HKV, T, S};
  kvattn_plan *plan = NULL;
  if (kvattn_plan_create(rt, kIR, NULL, KVATTN_IMAGE_DEVICE_IR, bounds, &plan,
                         &error))
    die("plan", error);
  char *manifest = NULL;
  if (kvattn_plan_manifest(plan, &manifest, &error))
    die("manifest", error);
  printf("kinds: %s %s\n",
         strstr(manifest, "\"kind\": \"cascade_prefix\"") ? "cascade_prefix"
                                                           : "-",
         strstr(manifest, "\"kind\": \"cascade_merge\"") ? "cascade_merge"
                                                          : "-");
  kvattn_free(manifest);

  /* Sequences of 2, 1 and 4 rows; suffixes of 5, 1 and 12 keys; the rows
   * are the last tokens of each (lower-right). */
  const int32_t qs[B + 1] = {0, 2, 3, 7}, kl[B] = {5, 1, 12};
  const int32_t qo[B] = {3, 0, 8};
  unsigned state = 7;
  static float q[HQ * T * D], pk[HKV * PMAX * D], pv[HKV * PMAX * DV],
      k[B * HKV * S * D], v[B * HKV * S * DV];
  for (size_t i = 0; i < sizeof(q) / 4; ++i)
    q[i] = rnd(&state);
  for (size_t i = 0; i < sizeof(k) / 4; ++i)
    k[i] = rnd(&state);
  for (size_t i = 0; i < sizeof(v) / 4; ++i)
    v[i] = rnd(&state);
  /* Suffix slots past kv_len hold NaN: never read. */
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < HKV; ++g)
      for (int j = kl[b]; j < S; ++j) {
        for (int d = 0; d < D; ++d)
          k[(((size_t)b * HKV + g) * S + j) * D + d] = NAN;
        for (int d = 0; d < DV; ++d)
          v[(((size_t)b * HKV + g) * S + j) * DV + d] = NAN;
      }

  uint64_t dq, dpk, dpv, dk, dv, dout, dlse, dqs, dqo, dkl;
  if (kvattn_device_alloc(rt, sizeof(q), &dq, &error) ||
      kvattn_device_alloc(rt, sizeof(pk), &dpk, &error) ||
      kvattn_device_alloc(rt, sizeof(pv), &dpv, &error) ||
      kvattn_device_alloc(rt, sizeof(k), &dk, &error) ||
      kvattn_device_alloc(rt, sizeof(v), &dv, &error) ||
      kvattn_device_alloc(rt, HQ * T * DV * 4, &dout, &error) ||
      kvattn_device_alloc(rt, HQ * T * 4, &dlse, &error) ||
      kvattn_device_alloc(rt, sizeof(qs), &dqs, &error) ||
      kvattn_device_alloc(rt, sizeof(qo), &dqo, &error) ||
      kvattn_device_alloc(rt, sizeof(kl), &dkl, &error))
    die("alloc", error);
  if (kvattn_copy_to_device(rt, dq, q, sizeof(q), &error) ||
      kvattn_copy_to_device(rt, dk, k, sizeof(k), &error) ||
      kvattn_copy_to_device(rt, dv, v, sizeof(v), &error) ||
      kvattn_copy_to_device(rt, dqs, qs, sizeof(qs), &error) ||
      kvattn_copy_to_device(rt, dqo, qo, sizeof(qo), &error) ||
      kvattn_copy_to_device(rt, dkl, kl, sizeof(kl), &error))
    die("copy", error);
  kvattn_buffer buffers[] = {
      {"query", dq},   {"prefix_key", dpk}, {"prefix_value", dpv},
      {"key", dk},     {"value", dv},       {"out", dout},
      {"lse", dlse},   {"q_start", dqs},    {"q_offset", dqo},
      {"kv_len", dkl}};

  const int prefixes[] = {PMAX, 37};
  for (int c = 0; c < 2; ++c) {
    const int p = prefixes[c];
    for (int i = 0; i < HKV * p * D; ++i)
      pk[i] = rnd(&state);
    for (int i = 0; i < HKV * p * DV; ++i)
      pv[i] = rnd(&state);
    if (kvattn_copy_to_device(rt, dpk, pk, (size_t)HKV * p * D * 4, &error) ||
        kvattn_copy_to_device(rt, dpv, pv, (size_t)HKV * p * DV * 4, &error))
      die("copy", error);
    static double want[HQ * T * DV], wantLse[HQ * T];
    reference(p, q, pk, pv, k, v, qs, qo, kl, want, wantLse);
    kvattn_sizes sizes = {B, HQ, HKV, T, S};
    sizes.P = p;
    for (int host = 0; host < 2; ++host) {
      float out[HQ * T * DV], lse[HQ * T];
      memset(out, 0x7f, sizeof(out)); /* NaN-free sentinel, far off */
      if (kvattn_copy_to_device(rt, dout, out, sizeof(out), &error))
        die("copy", error);
      int64_t qs64[B + 1], qo64[B], kl64[B];
      for (int b = 0; b <= B; ++b)
        qs64[b] = qs[b];
      for (int b = 0; b < B; ++b)
        qo64[b] = qo[b], kl64[b] = kl[b];
      kvattn_metadata metadata[] = {
          {"q_start", qs64, B + 1}, {"q_offset", qo64, B}, {"kv_len", kl64, B}};
      int rc = host ? kvattn_plan_run_host_metadata(
                          plan, sizes, buffers, 7, metadata, 3,
                          KVATTN_CURRENT_STREAM, &error)
                    : kvattn_plan_run(plan, sizes, buffers, 10,
                                      KVATTN_CURRENT_STREAM, &error);
      if (rc || kvattn_synchronize(rt, &error) ||
          kvattn_copy_to_host(rt, out, dout, sizeof(out), &error) ||
          kvattn_copy_to_host(rt, lse, dlse, sizeof(lse), &error))
        die("run", error);
      CHECK(kvattn_plan_status(plan, &error) == 0, "P = %d: status %s", p,
            error);
      double err = 0, errLse = 0;
      for (int i = 0; i < HQ * T * DV; ++i)
        err = fmax(err, fabs(out[i] - want[i]));
      for (int i = 0; i < HQ * T; ++i)
        errLse = fmax(errLse, fabs(lse[i] - wantLse[i]));
      /* f32 kernels against float64: 1e-5 on values of magnitude ~1. */
      CHECK(err < 1e-5 && errLse < 1e-5, "P = %d (%s metadata): max error "
            "out %g, lse %g", p, host ? "host" : "device", err, errLse);
      const char *reports = takeReports ? takeReports() : "";
      CHECK(!reports[0], "P = %d: emulator reports: %s", p, reports);
      printf("P = %d, %s metadata: max |out - ref| %s 1e-5, max |lse - ref| "
             "%s 1e-5\n",
             p, host ? "host" : "device", err < 1e-5 ? "<" : ">=",
             errLse < 1e-5 ? "<" : ">=");
    }
    /* Without the prefix the answer changes (the test can fail). */
    if (c == 0) {
      static double noPrefix[HQ * T * DV], noPrefixLse[HQ * T];
      reference(0, q, pk, pv, k, v, qs, qo, kl, noPrefix, noPrefixLse);
      double diff = 0;
      for (int i = 0; i < HQ * T * DV; ++i)
        diff = fmax(diff, fabs(noPrefix[i] - want[i]));
      CHECK(diff > 0.01, "the prefix changes nothing (%g)", diff);
    }
  }

  /* A negative q_offset (a query inside the prefix) on the device: the
   * host's message in the status word, the output untouched. */
  {
    const int32_t bad[B] = {3, -1, 8};
    int64_t qs64[B + 1] = {0, 2, 3, 7}, bad64[B] = {3, -1, 8},
            kl64[B] = {5, 1, 12};
    kvattn_metadata metadata[] = {
        {"q_start", qs64, B + 1}, {"q_offset", bad64, B}, {"kv_len", kl64, B}};
    kvattn_sizes sizes = {B, HQ, HKV, T, S};
    sizes.P = 37;
    char *hostMessage = NULL, *deviceMessage = NULL;
    CHECK(kvattn_plan_run_host_metadata(plan, sizes, buffers, 7, metadata, 3,
                                        KVATTN_CURRENT_STREAM, &hostMessage),
          "negative q_offset: the host path accepted it");
    if (kvattn_copy_to_device(rt, dqo, bad, sizeof(bad), &error) ||
        kvattn_plan_run(plan, sizes, buffers, 10, KVATTN_CURRENT_STREAM,
                        &error))
      die("run", error);
    CHECK(kvattn_plan_status(plan, &deviceMessage), "no violation recorded");
    CHECK(hostMessage && deviceMessage && !strcmp(hostMessage, deviceMessage),
          "device '%s' != host '%s'", deviceMessage ? deviceMessage : "-",
          hostMessage ? hostMessage : "-");
    printf("negative q_offset: %s\n", deviceMessage ? deviceMessage : "-");
    kvattn_free(hostMessage);
    kvattn_free(deviceMessage);
    const char *reports = takeReports ? takeReports() : "";
    CHECK(!reports[0], "negative q_offset: emulator reports: %s", reports);
  }

  kvattn_plan_destroy(plan);

  /* The same cascade from a description (kvattn_attention_desc.cascade):
   * the IR is built with the dialect's builders, P dynamic. */
  kvattn_attention_desc desc;
  kvattn_attention_desc_init(&desc);
  desc.dtype = KVATTN_F32;
  desc.batch = B;
  desc.query_len = T;
  desc.key_len = S;
  desc.num_query_heads = HQ;
  desc.num_kv_heads = HKV;
  desc.head_dim = D;
  desc.value_head_dim = DV;
  desc.causal = 1;
  desc.with_lse = 1;
  desc.varlen = 1;
  desc.cascade = 1;
  kvattn_plan *fromDesc = NULL;
  if (kvattn_plan_create_from_desc(rt, &desc, NULL, KVATTN_IMAGE_DEVICE_IR,
                                   bounds, &fromDesc, &error))
    die("plan from desc", error);
  {
    const int p = 37;
    static double want[HQ * T * DV], wantLse[HQ * T];
    reference(p, q, pk, pv, k, v, qs, qo, kl, want, wantLse);
    if (kvattn_copy_to_device(rt, dqo, qo, sizeof(qo), &error))
      die("copy", error);
    kvattn_sizes sizes = {B, HQ, HKV, T, S};
    sizes.P = p;
    float out[HQ * T * DV], lse[HQ * T];
    if (kvattn_plan_run(fromDesc, sizes, buffers, 10, KVATTN_CURRENT_STREAM,
                        &error) ||
        kvattn_synchronize(rt, &error) ||
        kvattn_copy_to_host(rt, out, dout, sizeof(out), &error) ||
        kvattn_copy_to_host(rt, lse, dlse, sizeof(lse), &error))
      die("run", error);
    CHECK(kvattn_plan_status(fromDesc, &error) == 0, "desc: status %s", error);
    double err = 0, errLse = 0;
    for (int i = 0; i < HQ * T * DV; ++i)
      err = fmax(err, fabs(out[i] - want[i]));
    for (int i = 0; i < HQ * T; ++i)
      errLse = fmax(errLse, fabs(lse[i] - wantLse[i]));
    CHECK(err < 1e-5 && errLse < 1e-5, "desc: max error out %g, lse %g", err,
          errLse);
    const char *reports = takeReports ? takeReports() : "";
    CHECK(!reports[0], "desc: emulator reports: %s", reports);
    printf("desc, P = %d: max |out - ref| %s 1e-5, max |lse - ref| %s 1e-5\n",
           p, err < 1e-5 ? "<" : ">=", errLse < 1e-5 ? "<" : ">=");
  }
  kvattn_plan_destroy(fromDesc);
  /* Misuse is named. */
  desc.varlen = 0;
  char *ir = NULL, *descError = NULL;
  CHECK(kvattn_attention_desc_to_ir(&desc, &ir, &descError),
        "cascade without varlen accepted");
  printf("desc without varlen: %s\n", descError ? descError : "-");
  kvattn_free(descError);
  desc.varlen = 1;
  desc.sinks = 1;
  descError = NULL;
  CHECK(kvattn_attention_desc_to_ir(&desc, &ir, &descError),
        "cascade with sinks accepted");
  printf("desc with sinks: %s\n", descError ? descError : "-");
  kvattn_free(descError);

  kvattn_runtime_destroy(rt);
  return finish();
}
