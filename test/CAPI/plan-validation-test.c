/*===- plan-validation-test.c - device checks of ragged batches and appends
 *-===*
 *
 * Plans (kvattn_plan_create) on the emulated GPU whose metadata breaks one
 * rule at a time, for the device checks that plan-test.c does not cover:
 *
 *  - a ragged batch (q_start) with key_valid: key_valid bytes other than 0
 *    or 1 and each q_start rule of kvattn/Support/QueryStarts.h;
 *  - a decode step (kvattn.append of the new key into the cache, then the
 *    attention over it), plain and paged: pos outside the capacity, pos
 *    negative, tokens past the pages, a table entry out of range, a row
 *    written by two sequences;
 *  - RoPE's record (k_rope_pos) against the key positions.
 *
 * Each bad run must record, in the status word, the message the host
 * validation gives for the same values (kvattn_plan_run_host_metadata, run
 * on the same plan), leave the output and the cache as they were, and make
 * no memcheck/racecheck report; a good run afterwards computes.
 *
 *   KVATTN_LIBCUDA=libkvattn_cuda_emu.so kvattn-plan-validation-test
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"


enum { MAX_VALUES = 64, MAX_PARAMS = 12 };

/* A metadata parameter: its name, element bytes (4: int32, 1: a key_valid
 * byte), its good values. */
typedef struct {
  const char *name;
  int bytes;
  size_t count;
  int64_t good[MAX_VALUES];
} Meta;

/* A tensor parameter; `watch`: its contents must survive a bad run. */
typedef struct {
  const char *name;
  size_t bytes;
  int watch;
} Tensor;

/* One bad case: up to four (parameter, index, value) changes of the good
 * metadata. */
typedef struct {
  const char *name;
  int n;
  struct {
    const char *param;
    size_t index;
    int64_t value;
  } set[4];
} Case;

static const char *(*takeReports)(void);

static const char *reports(void) { return takeReports ? takeReports() : ""; }

/* Device buffers of a plan's parameters; metadata named twice (an
 * attention's q_offset that is the append's pos) share nothing: each is
 * its own buffer with the same values. */
typedef struct {
  kvattn_runtime *rt;
  kvattn_plan *plan;
  kvattn_sizes sizes;
  const Meta *meta;
  size_t numMeta;
  const Tensor *tensors;
  size_t numTensors;
  uint64_t dev[MAX_PARAMS * 2];
  unsigned char *contents[MAX_PARAMS]; /* what each tensor holds */
} Suite;

static void setUp(Suite *s) {
  char *error = NULL;
  for (size_t i = 0; i < s->numTensors; ++i) {
    s->contents[i] = malloc(s->tensors[i].bytes);
    for (size_t b = 0; b < s->tensors[i].bytes; ++b)
      s->contents[i][b] = (unsigned char)(b % 4 == 3 ? 0x3c : b * 7 + i);
    if (kvattn_device_alloc(s->rt, s->tensors[i].bytes, &s->dev[i], &error) ||
        kvattn_copy_to_device(s->rt, s->dev[i], s->contents[i],
                              s->tensors[i].bytes, &error))
      die("tensor", error);
  }
  for (size_t m = 0; m < s->numMeta; ++m)
    if (kvattn_device_alloc(s->rt, s->meta[m].count * 4 + 16,
                            &s->dev[s->numTensors + m], &error))
      die("metadata", error);
}

static void uploadMetadata(Suite *s, int64_t values[][MAX_VALUES]) {
  char *error = NULL;
  for (size_t m = 0; m < s->numMeta; ++m) {
    unsigned char bytes[MAX_VALUES * 4];
    for (size_t i = 0; i < s->meta[m].count; ++i) {
      if (s->meta[m].bytes == 1) {
        bytes[i] = (unsigned char)values[m][i];
      } else {
        int32_t v = (int32_t)values[m][i];
        memcpy(bytes + 4 * i, &v, 4);
      }
    }
    if (kvattn_copy_to_device(s->rt, s->dev[s->numTensors + m], bytes,
                              s->meta[m].count * s->meta[m].bytes, &error))
      die("metadata copy", error);
  }
}

static void buffersOf(Suite *s, kvattn_buffer *buffers, int withMetadata) {
  for (size_t i = 0; i < s->numTensors; ++i)
    buffers[i] = (kvattn_buffer){s->tensors[i].name, s->dev[i]};
  if (withMetadata)
    for (size_t m = 0; m < s->numMeta; ++m)
      buffers[s->numTensors + m] =
          (kvattn_buffer){s->meta[m].name, s->dev[s->numTensors + m]};
}

/* Restores every tensor to its contents (a good run may have changed
 * them). */
static void restore(Suite *s) {
  char *error = NULL;
  for (size_t i = 0; i < s->numTensors; ++i)
    if (kvattn_copy_to_device(s->rt, s->dev[i], s->contents[i],
                              s->tensors[i].bytes, &error))
      die("restore", error);
}

static int unchanged(Suite *s, const char *label) {
  char *error = NULL;
  int same = 1;
  for (size_t i = 0; i < s->numTensors; ++i) {
    if (!s->tensors[i].watch)
      continue;
    unsigned char *now = malloc(s->tensors[i].bytes);
    if (kvattn_copy_to_host(s->rt, now, s->dev[i], s->tensors[i].bytes, &error))
      die("copy back", error);
    if (memcmp(now, s->contents[i], s->tensors[i].bytes)) {
      printf("  %s: '%s' was written\n", label, s->tensors[i].name);
      same = 0;
    }
    free(now);
  }
  return same;
}

static void runCases(Suite *s, const Case *cases, size_t numCases) {
  char *error = NULL;
  kvattn_buffer buffers[MAX_PARAMS * 2];
  kvattn_metadata metadata[MAX_PARAMS];
  static int64_t values[MAX_PARAMS][MAX_VALUES];
  for (size_t c = 0; c < numCases; ++c) {
    const Case *bad = &cases[c];
    for (size_t m = 0; m < s->numMeta; ++m) {
      memcpy(values[m], s->meta[m].good, sizeof(values[m]));
      metadata[m] =
          (kvattn_metadata){s->meta[m].name, values[m], s->meta[m].count};
    }
    for (int k = 0; k < bad->n; ++k) {
      size_t m = 0;
      while (m < s->numMeta && strcmp(s->meta[m].name, bad->set[k].param))
        ++m;
      if (m == s->numMeta || bad->set[k].index >= s->meta[m].count)
        die(bad->name, "no such metadata value");
      values[m][bad->set[k].index] = bad->set[k].value;
    }
    /* The host validation's message for these values. */
    char *hostMessage = NULL;
    buffersOf(s, buffers, 0);
    CHECK(kvattn_plan_run_host_metadata(s->plan, s->sizes, buffers,
                                        s->numTensors, metadata, s->numMeta,
                                        KVATTN_CURRENT_STREAM, &hostMessage),
          "%s: the host path accepted it", bad->name);
    /* The same values on the device. */
    restore(s);
    uploadMetadata(s, values);
    buffersOf(s, buffers, 1);
    char *runError = NULL;
    CHECK(!kvattn_plan_run(s->plan, s->sizes, buffers,
                           s->numTensors + s->numMeta, KVATTN_CURRENT_STREAM,
                           &runError),
          "%s: run failed: %s", bad->name, runError);
    kvattn_free(runError);
    char *deviceMessage = NULL;
    CHECK(kvattn_plan_status(s->plan, &deviceMessage),
          "%s: no violation recorded", bad->name);
    CHECK(hostMessage && deviceMessage && !strcmp(hostMessage, deviceMessage),
          "%s: device '%s' != host '%s'", bad->name,
          deviceMessage ? deviceMessage : "(none)",
          hostMessage ? hostMessage : "(none)");
    CHECK(unchanged(s, bad->name), "%s: a tensor was written", bad->name);
    const char *r = reports();
    CHECK(!r[0], "%s: emulator reports: %s", bad->name, r);
    printf("%-30s %s\n", bad->name, deviceMessage ? deviceMessage : "(none)");
    kvattn_free(hostMessage);
    kvattn_free(deviceMessage);
    if (kvattn_plan_clear_status(s->plan, &error))
      die("clear", error);
  }
  /* Good metadata after a clear: computes, records nothing. */
  for (size_t m = 0; m < s->numMeta; ++m)
    memcpy(values[m], s->meta[m].good, sizeof(values[m]));
  restore(s);
  uploadMetadata(s, values);
  buffersOf(s, buffers, 1);
  kvattn_call_counts counts;
  if (kvattn_runtime_call_counts(s->rt, &counts, 1, &error) ||
      kvattn_plan_run(s->plan, s->sizes, buffers, s->numTensors + s->numMeta,
                      KVATTN_CURRENT_STREAM, &error) ||
      kvattn_runtime_call_counts(s->rt, &counts, 1, &error) ||
      kvattn_synchronize(s->rt, &error))
    die("good run", error);
  /* The run's driver calls: launches only (the validation kernels' two
   * phases, the kernels). */
  printf("good run: launches=%lld syncs=%lld allocs=%lld sync_copies=%lld "
         "async_copies=%lld\n",
         (long long)counts.launches, (long long)counts.synchronizations,
         (long long)counts.allocations, (long long)counts.synchronous_copies,
         (long long)counts.async_copies);
  CHECK(kvattn_plan_status(s->plan, &error) == 0, "good run: %s", error);
  const char *r = reports();
  CHECK(!r[0], "good run: emulator reports: %s", r);
  printf("good run: %s\n",
         unchanged(s, "good run") ? "NOT computed" : "computed");
}

static void tearDown(Suite *s) {
  for (size_t i = 0; i < s->numTensors; ++i)
    free(s->contents[i]);
  kvattn_plan_destroy(s->plan);
}

/*===----------------------------------------------------------------------===*
 * A ragged batch: 3 sequences of 2, 3 and 1 rows (T = 6), key_valid.
 *===----------------------------------------------------------------------===*/

static const char *kVarlenIR =
    "func.func @ragged(%q: tensor<1x4x6x16xf32>, %k: tensor<3x2x16x16xf32>,\n"
    "                  %v: tensor<3x2x16x16xf32>, %starts: tensor<4xi32>,\n"
    "                  %off: tensor<3xi32>, %len: tensor<3xi32>,\n"
    "                  %valid: tensor<3x16xi1>) -> tensor<1x4x6x16xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_start(%starts : tensor<4xi32>)\n"
    "      q_offset(%off : tensor<3xi32>) kv_len(%len : tensor<3xi32>)\n"
    "      key_valid(%valid : tensor<3x16xi1>) causal\n"
    "      : tensor<1x4x6x16xf32>, tensor<3x2x16x16xf32>,\n"
    "        tensor<3x2x16x16xf32> -> tensor<1x4x6x16xf32>\n"
    "  return %o : tensor<1x4x6x16xf32>\n"
    "}\n";

static void varlenSuite(kvattn_runtime *rt) {
  char *error = NULL;
  static const Meta meta[] = {
      {"q_start", 4, 4, {0, 2, 5, 6}},
      {"q_offset", 4, 3, {3, 0, 9}},
      {"kv_len", 4, 3, {5, 3, 10}},
      {"key_valid", 1, 48, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                            1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
  };
  static const Tensor tensors[] = {{"query", 6 * 4 * 16 * 4, 0},
                                   {"key", 3 * 2 * 16 * 16 * 4, 0},
                                   {"value", 3 * 2 * 16 * 16 * 4, 0},
                                   {"out", 6 * 4 * 16 * 4, 1}};
  Suite s = {rt, NULL, {3, 4, 2, 6, 16, 0, 0, 0}, meta, 4, tensors, 4};
  if (kvattn_plan_create(rt, kVarlenIR, NULL, KVATTN_IMAGE_DEVICE_IR, s.sizes,
                         &s.plan, &error))
    die("varlen plan", error);
  setUp(&s);
  static const Case cases[] = {
      {"key_valid 2", 1, {{"key_valid", 16 + 3, 2}}},
      {"key_valid 255", 1, {{"key_valid", 2 * 16 + 15, 255}}},
      {"q_start[0] not 0", 1, {{"q_start", 0, 1}}},
      {"q_start decreasing", 2, {{"q_start", 1, 4}, {"q_start", 2, 2}}},
      {"q_start past the rows", 1, {{"q_start", 2, 7}}},
      {"q_start[B] not T", 1, {{"q_start", 3, 5}}},
      {"rows not cache tokens", 1, {{"q_offset", 1, 1}}},
      {"key_valid before q_start",
       2,
       {{"q_start", 0, 1}, {"key_valid", 40, 3}}},
      {"kv_len before q_start", 2, {{"q_start", 2, 9}, {"kv_len", 2, 17}}},
      {"q_start before kv_len rows", 2, {{"q_start", 3, 7}, {"kv_len", 0, 2}}},
      /* 32-bit kernels (the default): q_offset + T - 1 reaches 2^31. */
      {"q_offset 2^31", 1, {{"q_offset", 0, 2147483647}}},
      /* The last query at 2^31 - 1 exactly (T = 6): the kernels form it
       * plus one in 32 bits, which wraps (issue 30 item 1). */
      {"q_offset last 2^31-1", 1, {{"q_offset", 0, 2147483642}}},
  };
  runCases(&s, cases, sizeof(cases) / sizeof(cases[0]));
  tearDown(&s);
}

/*===----------------------------------------------------------------------===*
 * A decode step as examples/decode-step.mlir: the new token's K and V
 * appended at pos (two launches of one append kernel, which the plan binds
 * to update_k / key and update_v / value), then attention over the caches
 * (q_offset = pos, kv_len = pos + 1).
 *===----------------------------------------------------------------------===*/

static const char *kPlainStepIR =
    "func.func @step(%q: tensor<2x4x1x16xf32>, %kc: tensor<2x2x16x16xf32>,\n"
    "                %vc: tensor<2x2x16x16xf32>, %kn: tensor<2x2x1x16xf32>,\n"
    "                %vn: tensor<2x2x1x16xf32>, %pos: tensor<2xi32>,\n"
    "                %len: tensor<2xi32>) -> (tensor<2x4x1x16xf32>,\n"
    "                tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>) {\n"
    "  %k = kvattn.append %kn into %kc at %pos\n"
    "      : tensor<2x2x1x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>\n"
    "  %v = kvattn.append %vn into %vc at %pos\n"
    "      : tensor<2x2x1x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>)\n"
    "      kv_len(%len : tensor<2xi32>) causal\n"
    "      : tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "        tensor<2x2x16x16xf32> -> tensor<2x4x1x16xf32>\n"
    "  return %o, %k, %v : tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "      tensor<2x2x16x16xf32>\n"
    "}\n";

static void plainStepSuite(kvattn_runtime *rt) {
  char *error = NULL;
  static const Meta meta[] = {
      {"pos", 4, 2, {7, 12}},
      {"q_offset", 4, 2, {7, 12}},
      {"kv_len", 4, 2, {8, 13}},
  };
  static const Tensor tensors[] = {
      {"query", 2 * 4 * 16 * 4, 0},      {"update_k", 2 * 2 * 16 * 4, 0},
      {"update_v", 2 * 2 * 16 * 4, 0},   {"key", 2 * 2 * 16 * 16 * 4, 1},
      {"value", 2 * 2 * 16 * 16 * 4, 1}, {"out", 2 * 4 * 16 * 4, 1}};
  Suite s = {rt, NULL, {2, 4, 2, 1, 16, 0, 0, 0}, meta, 3, tensors, 6};
  if (kvattn_plan_create(rt, kPlainStepIR, NULL, KVATTN_IMAGE_DEVICE_IR,
                         s.sizes, &s.plan, &error))
    die("decode step plan", error);
  setUp(&s);
  static const Case cases[] = {
      {"pos past the capacity", 1, {{"pos", 1, 16}}},
      {"pos negative", 1, {{"pos", 0, -1}}},
      /* Both kernels break a rule: the append's comes first (launch
       * order). */
      {"append before attention", 2, {{"pos", 1, 20}, {"kv_len", 0, 17}}},
      {"attention after a good append", 1, {{"kv_len", 1, 17}}},
      /* A decode row at position 2^31 - 1 (issue 30 item 1). */
      {"decode at 2^31-1", 1, {{"q_offset", 1, 2147483647}}},
  };
  runCases(&s, cases, sizeof(cases) / sizeof(cases[0]));
  tearDown(&s);
}

static const char *kPagedStepIR =
    "func.func @step(%q: tensor<2x4x1x16xf32>, %kp: tensor<6x8x2x16xf32>,\n"
    "                %vp: tensor<6x8x2x16xf32>, %kn: tensor<2x2x1x16xf32>,\n"
    "                %vn: tensor<2x2x1x16xf32>, %pos: tensor<2xi32>,\n"
    "                %len: tensor<2xi32>, %table: tensor<2x3xi32>)\n"
    "    -> (tensor<2x4x1x16xf32>, tensor<6x8x2x16xf32>,\n"
    "        tensor<6x8x2x16xf32>) {\n"
    "  %k = kvattn.append %kn into %kp at %pos\n"
    "      block_table(%table : tensor<2x3xi32>)\n"
    "      : tensor<2x2x1x16xf32> into tensor<6x8x2x16xf32>, tensor<2xi32>\n"
    "  %v = kvattn.append %vn into %vp at %pos\n"
    "      block_table(%table : tensor<2x3xi32>)\n"
    "      : tensor<2x2x1x16xf32> into tensor<6x8x2x16xf32>, tensor<2xi32>\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>)\n"
    "      kv_len(%len : tensor<2xi32>) block_table(%table : tensor<2x3xi32>)\n"
    "      causal : tensor<2x4x1x16xf32>, tensor<6x8x2x16xf32>,\n"
    "        tensor<6x8x2x16xf32> -> tensor<2x4x1x16xf32>\n"
    "  return %o, %k, %v : tensor<2x4x1x16xf32>, tensor<6x8x2x16xf32>,\n"
    "      tensor<6x8x2x16xf32>\n"
    "}\n";

static void pagedStepSuite(kvattn_runtime *rt) {
  char *error = NULL;
  /* Sequence 0: pages 4, 1 (tokens 0..15), new token at 9; sequence 1:
   * page 0 (tokens 0..7), new token at 3. */
  static const Meta meta[] = {
      {"pos", 4, 2, {9, 3}},
      {"q_offset", 4, 2, {9, 3}},
      {"kv_len", 4, 2, {10, 4}},
      {"block_table", 4, 6, {4, 1, -1, 0, -1, -1}},
  };
  static const Tensor tensors[] = {
      {"query", 2 * 4 * 16 * 4, 0},     {"update_k", 2 * 2 * 16 * 4, 0},
      {"update_v", 2 * 2 * 16 * 4, 0},  {"key", 6 * 8 * 2 * 16 * 4, 1},
      {"value", 6 * 8 * 2 * 16 * 4, 1}, {"out", 2 * 4 * 16 * 4, 1}};
  Suite s = {rt, NULL, {2, 4, 2, 1, 24, 6, 8, 3}, meta, 4, tensors, 6};
  if (kvattn_plan_create(rt, kPagedStepIR, NULL, KVATTN_IMAGE_DEVICE_IR,
                         s.sizes, &s.plan, &error))
    die("paged decode step plan", error);
  setUp(&s);
  static const Case cases[] = {
      {"pos past the pages", 1, {{"pos", 1, 8}}},
      {"pos negative", 1, {{"pos", 0, -2}}},
      {"table entry out of range", 1, {{"block_table", 1, 6}}},
      {"page after -1", 1, {{"block_table", 5, 2}}},
      /* Sequence 1 writes token 1 into page 1 row 1; sequence 0 writes its
       * token 9 there too. */
      {"row written twice", 2, {{"block_table", 3, 1}, {"pos", 1, 1}}},
  };
  runCases(&s, cases, sizeof(cases) / sizeof(cases[0]));
  tearDown(&s);
}

/*===----------------------------------------------------------------------===*
 * A decode step with explicit positions (L = 1): q_pos [B, 1], k_pos [B, S].
 * The host named a q_pos value q_pos[b] when L = 1 and the device q_pos[b,
 * i] (issue 30 item 10): one text, q_pos[b, i], on both.
 *===----------------------------------------------------------------------===*/

static const char *kExplicitIR =
    "func.func @decode(%q: tensor<2x4x1x16xf32>, %k: tensor<2x2x16x16xf32>,\n"
    "                  %v: tensor<2x2x16x16xf32>, %qp: tensor<2x1xi32>,\n"
    "                  %kp: tensor<2x16xi32>, %len: tensor<2xi32>)\n"
    "    -> tensor<2x4x1x16xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x1xi32>)\n"
    "      k_pos(%kp : tensor<2x16xi32>) kv_len(%len : tensor<2xi32>) causal\n"
    "      : tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "        tensor<2x2x16x16xf32> -> tensor<2x4x1x16xf32>\n"
    "  return %o : tensor<2x4x1x16xf32>\n"
    "}\n";

static void explicitSuite(kvattn_runtime *rt) {
  char *error = NULL;
  static const Meta meta[] = {
      {"q_pos", 4, 2, {20, 15}},
      {"k_pos", 4, 32, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 20,
                        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
      {"kv_len", 4, 2, {16, 16}},
  };
  static const Tensor tensors[] = {{"query", 2 * 4 * 16 * 4, 0},
                                   {"key", 2 * 2 * 16 * 16 * 4, 0},
                                   {"value", 2 * 2 * 16 * 16 * 4, 0},
                                   {"out", 2 * 4 * 16 * 4, 1}};
  Suite s = {rt, NULL, {2, 4, 2, 1, 16, 0, 0, 0}, meta, 3, tensors, 4};
  if (kvattn_plan_create(rt, kExplicitIR, NULL, KVATTN_IMAGE_DEVICE_IR, s.sizes,
                         &s.plan, &error))
    die("explicit decode plan", error);
  setUp(&s);
  static const Case cases[] = {
      {"q_pos negative", 1, {{"q_pos", 1, -1}}},
      {"q_pos 2^31-1", 1, {{"q_pos", 0, 2147483647}}},
      {"k_pos 2^31-1", 1, {{"k_pos", 15, 2147483647}}},
      {"k_pos not increasing", 1, {{"k_pos", 16 + 4, 3}}},
  };
  runCases(&s, cases, sizeof(cases) / sizeof(cases[0]));
  tearDown(&s);
}

/*===----------------------------------------------------------------------===*
 * RoPE's record (k_rope_pos [B, S], rule 28): every valid key attended at
 * the position it was rotated at, k_offset[b] + j; the slots past kv_len
 * hold -1 (never written) and are no keys.
 *===----------------------------------------------------------------------===*/

static const char *kRopeRecordIR =
    "func.func @rope(%q: tensor<2x4x1x16xf32>, %k: tensor<2x2x16x16xf32>,\n"
    "                %v: tensor<2x2x16x16xf32>, %qo: tensor<2xi32>,\n"
    "                %ko: tensor<2xi32>, %len: tensor<2xi32>,\n"
    "                %rec: tensor<2x16xi32>) -> tensor<2x4x1x16xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>)\n"
    "      k_offset(%ko : tensor<2xi32>) kv_len(%len : tensor<2xi32>)\n"
    "      k_rope_pos(%rec : tensor<2x16xi32>) causal\n"
    "      rope = <rotary_dim = 16, theta = 10000.0>\n"
    "      : tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "        tensor<2x2x16x16xf32> -> tensor<2x4x1x16xf32>\n"
    "  return %o : tensor<2x4x1x16xf32>\n"
    "}\n";

static void ropeRecordSuite(kvattn_runtime *rt) {
  char *error = NULL;
  static const Meta meta[] = {
      {"q_offset", 4, 2, {7, 12}},
      {"k_offset", 4, 2, {0, 0}},
      {"kv_len", 4, 2, {8, 13}},
      {"k_rope_pos", 4, 32, {0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1,
                             -1, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                             -1, -1, -1}},
  };
  static const Tensor tensors[] = {{"query", 2 * 4 * 16 * 4, 0},
                                   {"key", 2 * 2 * 16 * 16 * 4, 0},
                                   {"value", 2 * 2 * 16 * 16 * 4, 0},
                                   {"out", 2 * 4 * 16 * 4, 1}};
  Suite s = {rt, NULL, {2, 4, 2, 1, 16, 0, 0, 0}, meta, 4, tensors, 4};
  if (kvattn_plan_create(rt, kRopeRecordIR, NULL, KVATTN_IMAGE_DEVICE_IR,
                         s.sizes, &s.plan, &error))
    die("rope record plan", error);
  setUp(&s);
  static const Case cases[] = {
      /* Batch 1's keys attended one position later than they were
       * rotated: its first key names it. */
      {"k_offset shifted", 1, {{"k_offset", 1, 1}}},
      {"one slot rotated elsewhere", 1, {{"k_rope_pos", 16 + 5, 7}}},
      /* The first violation in (batch, slot) order. */
      {"first of two", 2, {{"k_rope_pos", 16 + 2, 9}, {"k_rope_pos", 6, 0}}},
      /* A slot past kv_len is no key: only kv_len's growth makes it one. */
      {"kv_len takes an unwritten slot", 1, {{"kv_len", 0, 9}}},
      /* kv_len outside [0, S] is reported first (the values before the
       * record), and the record's check reads nothing past the row. */
      {"kv_len before the record", 2, {{"kv_len", 1, 17}, {"k_rope_pos", 0, 3}}},
  };
  runCases(&s, cases, sizeof(cases) / sizeof(cases[0]));
  tearDown(&s);
}

/* Explicit positions: a key's position is k_pos[b, j] (keys after an
 * eviction: batch 0 lost positions 4..7); a key with key_valid 0 is no key,
 * whatever its record says. */
static const char *kRopeExplicitIR =
    "func.func @rope(%q: tensor<2x4x1x16xf32>, %k: tensor<2x2x16x16xf32>,\n"
    "                %v: tensor<2x2x16x16xf32>, %qp: tensor<2x1xi32>,\n"
    "                %kp: tensor<2x16xi32>, %len: tensor<2xi32>,\n"
    "                %valid: tensor<2x16xi1>, %rec: tensor<2x16xi32>)\n"
    "    -> tensor<2x4x1x16xf32> {\n"
    "  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<2x1xi32>)\n"
    "      k_pos(%kp : tensor<2x16xi32>) kv_len(%len : tensor<2xi32>)\n"
    "      key_valid(%valid : tensor<2x16xi1>)\n"
    "      k_rope_pos(%rec : tensor<2x16xi32>) causal\n"
    "      rope = <rotary_dim = 16, theta = 10000.0>\n"
    "      : tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "        tensor<2x2x16x16xf32> -> tensor<2x4x1x16xf32>\n"
    "  return %o : tensor<2x4x1x16xf32>\n"
    "}\n";

static void ropeExplicitSuite(kvattn_runtime *rt) {
  char *error = NULL;
  static const Meta meta[] = {
      {"q_pos", 4, 2, {20, 15}},
      {"k_pos", 4, 32, {0,  1,  2,  3,  8,  9,  10, 11, 12, 13, 14,
                        15, 16, 17, 18, 19, 0,  1,  2,  3,  4,  5,
                        6,  7,  8,  9,  10, 11, 12, 13, 14, 15}},
      {"kv_len", 4, 2, {16, 14}},
      {"key_valid", 1, 32, {1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
      /* Batch 0's slot 3 (key_valid 0) holds a stale record. */
      {"k_rope_pos", 4, 32, {0,  1,  2,  99, 8,  9,  10, 11, 12, 13, 14,
                             15, 16, 17, 18, 19, 0,  1,  2,  3,  4,  5,
                             6,  7,  8,  9,  10, 11, 12, 13, -1, -1}},
  };
  static const Tensor tensors[] = {{"query", 2 * 4 * 16 * 4, 0},
                                   {"key", 2 * 2 * 16 * 16 * 4, 0},
                                   {"value", 2 * 2 * 16 * 16 * 4, 0},
                                   {"out", 2 * 4 * 16 * 4, 1}};
  Suite s = {rt, NULL, {2, 4, 2, 1, 16, 0, 0, 0}, meta, 5, tensors, 4};
  if (kvattn_plan_create(rt, kRopeExplicitIR, NULL, KVATTN_IMAGE_DEVICE_IR,
                         s.sizes, &s.plan, &error))
    die("rope explicit plan", error);
  setUp(&s);
  static const Case cases[] = {
      /* The record of slot 4 says 4: the eviction moved the key to 8. */
      {"record before the eviction", 1, {{"k_rope_pos", 4, 4}}},
      /* k_pos (still increasing) puts batch 0's last key at 25. */
      {"k_pos moved", 1, {{"k_pos", 15, 25}}},
      /* Slot 3 becomes a key: its stale record is named. */
      {"a padding slot becomes a key", 1, {{"key_valid", 3, 1}}},
  };
  runCases(&s, cases, sizeof(cases) / sizeof(cases[0]));
  tearDown(&s);
}

int main(void) {
  char *error = NULL;
  kvattn_runtime *rt = NULL;
  if (kvattn_runtime_create(&rt, &error))
    die("runtime", error);
  const char *driver = getenv("KVATTN_LIBCUDA");
  void *emu = driver ? dlopen(driver, RTLD_NOW | RTLD_NOLOAD) : NULL;
  takeReports =
      emu ? (const char *(*)(void))dlsym(emu, "kvattn_emu_take_reports") : NULL;
  CHECK(takeReports != NULL, "not on the emulated GPU (no reports)");

  printf("== ragged batch\n");
  varlenSuite(rt);
  printf("== decode step\n");
  plainStepSuite(rt);
  printf("== paged decode step\n");
  pagedStepSuite(rt);
  printf("== explicit positions, L = 1\n");
  explicitSuite(rt);
  printf("== RoPE record\n");
  ropeRecordSuite(rt);
  printf("== RoPE record, explicit positions\n");
  ropeExplicitSuite(rt);

  kvattn_runtime_destroy(rt);
  return finish();
}
