/*===- plan-test.c - device validation of a plan on the emulated GPU -----===*
 *
 * One paged GQA decode attention planned once (kvattn_plan_create), run
 * with device-resident metadata that breaks one rule at a time. Each bad
 * run must record, in the plan's status word, the message the host
 * validation gives for the same metadata (kvattn_plan_run_host_metadata),
 * with no memcheck report and the output untouched; after
 * kvattn_plan_clear_status a good run computes again.
 *
 *   KVATTN_LIBCUDA=libkvattn_cuda_emu.so kvattn-plan-test
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { B = 2, HQ = 8, HKV = 2, D = 64, PAGE = 16, MAX_PAGES = 4, POOL = 6 };

static const char *kIR =
    "func.func @decode(%q: tensor<?x8x1x64xbf16>,\n"
    "                  %k: tensor<?x16x2x64xbf16>, %v: "
    "tensor<?x16x2x64xbf16>,\n"
    "                  %pos: tensor<?xi32>, %len: tensor<?xi32>,\n"
    "                  %table: tensor<?x?xi32>) -> tensor<?x8x1x64xbf16> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)\n"
    "      kv_len(%len : tensor<?xi32>) block_table(%table : tensor<?x?xi32>)\n"
    "      causal : tensor<?x8x1x64xbf16>, tensor<?x16x2x64xbf16>,\n"
    "      tensor<?x16x2x64xbf16> -> tensor<?x8x1x64xbf16>\n"
    "  return %o : tensor<?x8x1x64xbf16>\n"
    "}\n";


typedef struct {
  const char *name;
  int32_t qOffset[B], kvLen[B], table[B * MAX_PAGES];
} Case;

int main(void) {
  char *error = NULL;
  kvattn_runtime *rt = NULL;
  if (kvattn_runtime_create(&rt, &error))
    die("runtime", error);
  const char *driver = getenv("KVATTN_LIBCUDA");
  void *emu = driver ? dlopen(driver, RTLD_NOW | RTLD_NOLOAD) : NULL;
  const char *(*takeReports)(void) =
      emu ? (const char *(*)(void))dlsym(emu, "kvattn_emu_take_reports") : NULL;
  kvattn_sizes sizes = {B, HQ, HKV, 1, MAX_PAGES * PAGE, POOL, PAGE, MAX_PAGES};
  kvattn_plan *plan = NULL;
  if (kvattn_plan_create(rt, kIR, NULL, KVATTN_IMAGE_DEVICE_IR, sizes, &plan,
                         &error))
    die("plan", error);

  /* Device tensors: query and pages of small values, metadata buffers. */
  const size_t qBytes = (size_t)B * HQ * D * 2;
  const size_t cacheBytes = (size_t)POOL * PAGE * HKV * D * 2;
  uint64_t q, k, v, out, dOffset, dLen, dTable;
  if (kvattn_device_alloc(rt, qBytes, &q, &error) ||
      kvattn_device_alloc(rt, qBytes, &out, &error) ||
      kvattn_device_alloc(rt, cacheBytes, &k, &error) ||
      kvattn_device_alloc(rt, cacheBytes, &v, &error) ||
      kvattn_device_alloc(rt, B * 4, &dOffset, &error) ||
      kvattn_device_alloc(rt, B * 4, &dLen, &error) ||
      kvattn_device_alloc(rt, B * MAX_PAGES * 4, &dTable, &error))
    die("alloc", error);
  uint16_t *host = calloc(cacheBytes, 1);
  for (size_t i = 0; i < cacheBytes / 2; ++i)
    host[i] = 0x3c00 + (uint16_t)(i % 64); /* bf16 around 0.0078 */
  if (kvattn_copy_to_device(rt, q, host, qBytes, &error) ||
      kvattn_copy_to_device(rt, k, host, cacheBytes, &error) ||
      kvattn_copy_to_device(rt, v, host, cacheBytes, &error))
    die("copy", error);
  kvattn_buffer buffers[] = {{"query", q},           {"key", k},
                             {"value", v},           {"out", out},
                             {"q_offset", dOffset},  {"kv_len", dLen},
                             {"block_table", dTable}};

  const Case good = {"good", {4, 20}, {5, 21}, {0, -1, -1, -1, 1, 2, -1, -1}};
  const Case cases[] = {
      {"kv_len negative", {4, 20}, {5, -1}, {0, -1, -1, -1, 1, 2, -1, -1}},
      {"kv_len too large", {4, 20}, {65, 21}, {0, -1, -1, -1, 1, 2, -1, -1}},
      {"q_offset negative", {4, -5}, {5, 21}, {0, -1, -1, -1, 1, 2, -1, -1}},
      {"page out of range", {4, 20}, {5, 21}, {0, -1, -1, -1, 1, 6, -1, -1}},
      {"page repeated", {4, 20}, {5, 21}, {0, 0, -1, -1, 1, 2, -1, -1}},
      {"page after -1", {4, 20}, {5, 21}, {0, -1, 3, -1, 1, 2, -1, -1}},
      {"kv_len beyond the pages",
       {4, 20},
       {17, 21},
       {0, -1, -1, -1, 1, 2, -1, -1}},
      {"two violations: the host's first",
       {4, -5},
       {70, 21},
       {0, 0, -1, -1, 1, 2, -1, -1}},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const Case *bad = &cases[c];
    /* The host validation's message for these values. */
    int64_t o64[B], l64[B], t64[B * MAX_PAGES];
    for (int i = 0; i < B; ++i)
      o64[i] = bad->qOffset[i], l64[i] = bad->kvLen[i];
    for (int i = 0; i < B * MAX_PAGES; ++i)
      t64[i] = bad->table[i];
    kvattn_metadata metadata[] = {{"q_offset", o64, B},
                                  {"kv_len", l64, B},
                                  {"block_table", t64, B * MAX_PAGES}};
    char *hostMessage = NULL;
    CHECK(kvattn_plan_run_host_metadata(plan, sizes, buffers, 4, metadata, 3,
                                        KVATTN_CURRENT_STREAM, &hostMessage),
          "%s: the host path accepted it", bad->name);
    /* The same values on the device. */
    uint16_t sentinel[B * HQ * D], after[B * HQ * D];
    memset(sentinel, 0x5a, sizeof(sentinel));
    if (kvattn_copy_to_device(rt, out, sentinel, qBytes, &error) ||
        kvattn_copy_to_device(rt, dOffset, bad->qOffset, B * 4, &error) ||
        kvattn_copy_to_device(rt, dLen, bad->kvLen, B * 4, &error) ||
        kvattn_copy_to_device(rt, dTable, bad->table, B * MAX_PAGES * 4,
                              &error))
      die("copy", error);
    char *runError = NULL;
    CHECK(!kvattn_plan_run(plan, sizes, buffers, 7, KVATTN_CURRENT_STREAM,
                           &runError),
          "%s: run failed: %s", bad->name, runError);
    kvattn_free(runError);
    char *deviceMessage = NULL;
    CHECK(kvattn_plan_status(plan, &deviceMessage), "%s: no violation recorded",
          bad->name);
    CHECK(hostMessage && deviceMessage && !strcmp(hostMessage, deviceMessage),
          "%s: device '%s' != host '%s'", bad->name,
          deviceMessage ? deviceMessage : "(none)",
          hostMessage ? hostMessage : "(none)");
    if (kvattn_copy_to_host(rt, after, out, qBytes, &error))
      die("copy", error);
    CHECK(!memcmp(sentinel, after, qBytes), "%s: the output was written",
          bad->name);
    const char *reports = takeReports ? takeReports() : "";
    CHECK(!reports[0], "%s: emulator reports: %s", bad->name, reports);
    printf("%-34s %s\n", bad->name, deviceMessage ? deviceMessage : "(none)");
    kvattn_free(hostMessage);
    kvattn_free(deviceMessage);
    /* A further run with good metadata still does nothing: the word stays
     * until cleared. */
    if (kvattn_copy_to_device(rt, dOffset, good.qOffset, B * 4, &error) ||
        kvattn_copy_to_device(rt, dLen, good.kvLen, B * 4, &error) ||
        kvattn_copy_to_device(rt, dTable, good.table, B * MAX_PAGES * 4,
                              &error) ||
        kvattn_plan_run(plan, sizes, buffers, 7, KVATTN_CURRENT_STREAM,
                        &error) ||
        kvattn_synchronize(rt, &error) ||
        kvattn_copy_to_host(rt, after, out, qBytes, &error))
      die("good run", error);
    CHECK(!memcmp(sentinel, after, qBytes),
          "%s: a run computed while the status word was set", bad->name);
    if (kvattn_plan_clear_status(plan, &error))
      die("clear", error);
  }

  /* Cleared: a good run computes and records nothing. */
  uint16_t sentinel[B * HQ * D], after[B * HQ * D];
  memset(sentinel, 0x5a, sizeof(sentinel));
  if (kvattn_copy_to_device(rt, out, sentinel, qBytes, &error) ||
      kvattn_plan_run(plan, sizes, buffers, 7, KVATTN_CURRENT_STREAM, &error) ||
      kvattn_synchronize(rt, &error) ||
      kvattn_copy_to_host(rt, after, out, qBytes, &error))
    die("good run", error);
  CHECK(kvattn_plan_status(plan, &error) == 0, "good run: %s", error);
  CHECK(memcmp(sentinel, after, qBytes) != 0, "good run: nothing written");
  printf("good run after clear: %s\n",
         memcmp(sentinel, after, qBytes) ? "computed" : "NOT computed");

  kvattn_plan_destroy(plan);
  kvattn_runtime_destroy(rt);
  free(host);
  return finish();
}
