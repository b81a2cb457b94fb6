/*===- plan-desc-test.c - a plan from an attention description ------------===*
 *
 * kvattn_plan_create_from_desc against kvattn_plan_create on the equivalent
 * IR written by hand, on the emulated GPU: the same manifest, and the same
 * bytes in every output (out, lse, the caches an append writes) for the
 * same inputs; then bad descriptions, each refused with its message.
 *
 *   KVATTN_LIBCUDA=libkvattn_cuda_emu.so kvattn-plan-desc-test
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"


static const char *(*takeReports)(void);

enum { MAX_BUFFERS = 12 };

/* One buffer of a run: its name, bytes and initial contents (NULL: a
 * pattern), `output` when it is compared after the run. */
typedef struct {
  const char *name;
  size_t bytes;
  const void *init;
  int output;
} Buffer;

/* Runs `plan` once on fresh copies of `buffers`; `results[i]` receives
 * buffer i after the run (outputs only). */
static void runOnce(kvattn_runtime *rt, kvattn_plan *plan, kvattn_sizes sizes,
                    const Buffer *buffers, size_t n, unsigned char **results) {
  char *error = NULL;
  kvattn_buffer named[MAX_BUFFERS];
  uint64_t dev[MAX_BUFFERS];
  for (size_t i = 0; i < n; ++i) {
    unsigned char *host = malloc(buffers[i].bytes);
    if (buffers[i].init)
      memcpy(host, buffers[i].init, buffers[i].bytes);
    else /* small distinct values: bf16/f16/f32 bytes of moderate size */
      for (size_t b = 0; b < buffers[i].bytes; ++b)
        host[b] = (unsigned char)(b % 2 ? 0x3c - (b / 2) % 3 : b * 13 + i);
    if (kvattn_device_alloc(rt, buffers[i].bytes, &dev[i], &error) ||
        kvattn_copy_to_device(rt, dev[i], host, buffers[i].bytes, &error))
      die("buffer", error);
    free(host);
    named[i] = (kvattn_buffer){buffers[i].name, dev[i]};
  }
  if (kvattn_plan_run(plan, sizes, named, n, KVATTN_CURRENT_STREAM, &error))
    die("run", error);
  CHECK(kvattn_plan_status(plan, &error) == 0, "status: %s", error);
  const char *reports = takeReports ? takeReports() : "";
  CHECK(!reports[0], "emulator reports: %s", reports);
  for (size_t i = 0; i < n; ++i) {
    results[i] = NULL;
    if (buffers[i].output) {
      results[i] = malloc(buffers[i].bytes);
      if (kvattn_copy_to_host(rt, results[i], dev[i], buffers[i].bytes, &error))
        die("copy back", error);
    }
    kvattn_device_free(rt, dev[i], &error);
  }
}

/* Plans `desc` and `ir`, compares the manifests and one run's outputs. */
static void compare(kvattn_runtime *rt, const char *label,
                    const kvattn_attention_desc *desc, const char *ir,
                    kvattn_sizes sizes, const Buffer *buffers, size_t n) {
  char *error = NULL;
  kvattn_plan *fromDesc = NULL, *fromIR = NULL;
  if (kvattn_plan_create_from_desc(rt, desc, NULL, KVATTN_IMAGE_DEVICE_IR,
                                   sizes, &fromDesc, &error))
    die("plan from the description", error);
  if (kvattn_plan_create(rt, ir, NULL, KVATTN_IMAGE_DEVICE_IR, sizes, &fromIR,
                         &error))
    die("plan from the IR", error);
  char *m1 = NULL, *m2 = NULL;
  if (kvattn_plan_manifest(fromDesc, &m1, &error) ||
      kvattn_plan_manifest(fromIR, &m2, &error))
    die("manifest", error);
  CHECK(!strcmp(m1, m2), "%s: the manifests differ:\n%s\n---\n%s", label, m1,
        m2);
  int kernels = 0;
  for (const char *at = m1; (at = strstr(at, "\"tile\"")); ++at)
    ++kernels;
  unsigned char *a[MAX_BUFFERS], *b[MAX_BUFFERS];
  runOnce(rt, fromDesc, sizes, buffers, n, a);
  runOnce(rt, fromIR, sizes, buffers, n, b);
  int same = 1, computed = 1;
  for (size_t i = 0; i < n; ++i) {
    if (!buffers[i].output)
      continue;
    if (memcmp(a[i], b[i], buffers[i].bytes)) {
      printf("  %s: '%s' differs\n", label, buffers[i].name);
      same = 0;
    }
    /* Every output was written (an output starts as the pattern). */
    unsigned char *pattern = malloc(buffers[i].bytes);
    for (size_t k = 0; k < buffers[i].bytes; ++k)
      pattern[k] = (unsigned char)(k % 2 ? 0x3c - (k / 2) % 3 : k * 13 + i);
    if (!memcmp(pattern, a[i], buffers[i].bytes)) {
      printf("  %s: '%s' was not written\n", label, buffers[i].name);
      computed = 0;
    }
    free(pattern);
    free(a[i]);
    free(b[i]);
  }
  CHECK(same, "%s: the outputs differ", label);
  CHECK(computed, "%s: an output was not written", label);
  printf("%s: manifests %s (%d kernels), outputs %s%s\n", label,
         strcmp(m1, m2) ? "DIFFER" : "identical", kernels,
         same ? "identical" : "DIFFER", computed ? "" : " (NOT written)");
  kvattn_free(m1);
  kvattn_free(m2);
  kvattn_plan_destroy(fromDesc);
  kvattn_plan_destroy(fromIR);
}

/* A paged GQA decode step, bf16: append K and V at pos, then attention. */
static const char *kPagedStepIR =
    "func.func @attention(%q: tensor<2x8x1x64xbf16>,\n"
    "    %k: tensor<6x16x2x64xbf16>, %v: tensor<6x16x2x64xbf16>,\n"
    "    %kn: tensor<2x2x1x64xbf16>, %vn: tensor<2x2x1x64xbf16>,\n"
    "    %pos: tensor<2xi32>, %len: tensor<2xi32>, %t: tensor<2x4xi32>)\n"
    "    -> (tensor<2x8x1x64xbf16>, tensor<6x16x2x64xbf16>,\n"
    "        tensor<6x16x2x64xbf16>) {\n"
    "  %k2 = kvattn.append %kn into %k at %pos block_table(%t : "
    "tensor<2x4xi32>)\n"
    "      : tensor<2x2x1x64xbf16> into tensor<6x16x2x64xbf16>, "
    "tensor<2xi32>\n"
    "  %v2 = kvattn.append %vn into %v at %pos block_table(%t : "
    "tensor<2x4xi32>)\n"
    "      : tensor<2x2x1x64xbf16> into tensor<6x16x2x64xbf16>, "
    "tensor<2xi32>\n"
    "  %o = kvattn.attention %q, %k2, %v2 q_offset(%pos : tensor<2xi32>)\n"
    "      kv_len(%len : tensor<2xi32>) block_table(%t : tensor<2x4xi32>)\n"
    "      causal : tensor<2x8x1x64xbf16>, tensor<6x16x2x64xbf16>,\n"
    "      tensor<6x16x2x64xbf16> -> tensor<2x8x1x64xbf16>\n"
    "  return %o, %k2, %v2 : tensor<2x8x1x64xbf16>, tensor<6x16x2x64xbf16>,\n"
    "      tensor<6x16x2x64xbf16>\n"
    "}\n";

static void pagedStep(kvattn_runtime *rt) {
  kvattn_attention_desc d;
  kvattn_attention_desc_init(&d);
  d.dtype = KVATTN_BF16;
  d.batch = 2;
  d.query_len = 1;
  d.num_query_heads = 8;
  d.num_kv_heads = 2;
  d.head_dim = 64;
  d.causal = 1;
  d.paged = 1;
  d.page_size = 16;
  d.num_pages = 6;
  d.max_pages = 4;
  d.append = 1;
  /* Sequence 0: pages 3, 5, new token at 20; sequence 1: page 0, at 6. */
  static const int32_t pos[2] = {20, 6}, len[2] = {21, 7};
  static const int32_t table[8] = {3, 5, -1, -1, 0, -1, -1, -1};
  const size_t cache = 6 * 16 * 2 * 64 * 2, q = 2 * 8 * 64 * 2,
               update = 2 * 2 * 64 * 2;
  const Buffer buffers[] = {{"query", q, NULL, 0},
                            {"key", cache, NULL, 1},
                            {"value", cache, NULL, 1},
                            {"update_k", update, NULL, 0},
                            {"update_v", update, NULL, 0},
                            {"out", q, NULL, 1},
                            {"pos", 8, pos, 0},
                            {"q_offset", 8, pos, 0},
                            {"kv_len", 8, len, 0},
                            {"block_table", 32, table, 0}};
  kvattn_sizes sizes = {2, 8, 2, 1, 64, 6, 16, 4};
  compare(rt, "paged decode step", &d, kPagedStepIR, sizes, buffers,
          sizeof(buffers) / sizeof(buffers[0]));
}

/* Dynamic shapes (test/CAPI/plan-test.c's attention): a paged GQA decode
 * attention without the append, B, num_pages and max_pages dynamic. */
static const char *kDynamicIR =
    "func.func @attention(%q: tensor<?x8x1x64xbf16>,\n"
    "    %k: tensor<?x16x2x64xbf16>, %v: tensor<?x16x2x64xbf16>,\n"
    "    %pos: tensor<?xi32>, %len: tensor<?xi32>, %t: tensor<?x?xi32>)\n"
    "    -> tensor<?x8x1x64xbf16> {\n"
    "  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>)\n"
    "      kv_len(%len : tensor<?xi32>) block_table(%t : tensor<?x?xi32>)\n"
    "      causal : tensor<?x8x1x64xbf16>, tensor<?x16x2x64xbf16>,\n"
    "      tensor<?x16x2x64xbf16> -> tensor<?x8x1x64xbf16>\n"
    "  return %o : tensor<?x8x1x64xbf16>\n"
    "}\n";

static void dynamicDecode(kvattn_runtime *rt) {
  kvattn_attention_desc d;
  kvattn_attention_desc_init(&d); /* B, num_pages, max_pages: dynamic */
  d.query_len = 1;
  d.num_query_heads = 8;
  d.num_kv_heads = 2;
  d.head_dim = 64;
  d.causal = 1;
  d.paged = 1;
  d.page_size = 16;
  static const int32_t pos[3] = {20, 6, 40}, len[3] = {21, 7, 41};
  static const int32_t table[9] = {3, 5, -1, 0, -1, -1, 1, 2, 4};
  const size_t cache = 6 * 16 * 2 * 64 * 2, q = 3 * 8 * 64 * 2;
  const Buffer buffers[] = {
      {"query", q, NULL, 0},        {"key", cache, NULL, 0},
      {"value", cache, NULL, 0},    {"out", q, NULL, 1},
      {"q_offset", 12, pos, 0},     {"kv_len", 12, len, 0},
      {"block_table", 36, table, 0}};
  kvattn_sizes sizes = {3, 8, 2, 1, 48, 6, 16, 3};
  compare(rt, "dynamic decode", &d, kDynamicIR, sizes, buffers,
          sizeof(buffers) / sizeof(buffers[0]));
}

/* A ragged batch, f16, with lse, a window and soft-capping. */
static const char *kRaggedIR =
    "func.func @attention(%q: tensor<1x4x6x32xf16>,\n"
    "    %k: tensor<3x2x16x32xf16>, %v: tensor<3x2x16x32xf16>,\n"
    "    %starts: tensor<4xi32>, %off: tensor<3xi32>, %len: tensor<3xi32>)\n"
    "    -> (tensor<1x4x6x32xf16>, tensor<1x4x6xf32>) {\n"
    "  %o, %lse = kvattn.attention %q, %k, %v q_start(%starts : "
    "tensor<4xi32>)\n"
    "      q_offset(%off : tensor<3xi32>) kv_len(%len : tensor<3xi32>)\n"
    "      causal window = 4 softcap = 3.000000e+01\n"
    "      : tensor<1x4x6x32xf16>, tensor<3x2x16x32xf16>,\n"
    "      tensor<3x2x16x32xf16> -> tensor<1x4x6x32xf16>, tensor<1x4x6xf32>\n"
    "  return %o, %lse : tensor<1x4x6x32xf16>, tensor<1x4x6xf32>\n"
    "}\n";

static void ragged(kvattn_runtime *rt) {
  kvattn_attention_desc d;
  kvattn_attention_desc_init(&d);
  d.dtype = KVATTN_F16;
  d.batch = 3;
  d.query_len = 6;
  d.key_len = 16;
  d.num_query_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 32;
  d.causal = 1;
  d.window = 4;
  d.softcap = 30;
  d.varlen = 1;
  d.with_lse = 1;
  static const int32_t starts[4] = {0, 2, 5, 6}, off[3] = {3, 0, 9},
                       len[3] = {5, 3, 10};
  const size_t q = 6 * 4 * 32 * 2, cache = 3 * 2 * 16 * 32 * 2;
  const Buffer buffers[] = {
      {"query", q, NULL, 0},       {"key", cache, NULL, 0},
      {"value", cache, NULL, 0},   {"out", q, NULL, 1},
      {"lse", 6 * 4 * 4, NULL, 1}, {"q_start", 16, starts, 0},
      {"q_offset", 12, off, 0},    {"kv_len", 12, len, 0}};
  kvattn_sizes sizes = {3, 4, 2, 6, 16, 0, 0, 0};
  compare(rt, "ragged batch", &d, kRaggedIR, sizes, buffers,
          sizeof(buffers) / sizeof(buffers[0]));
}

/* Attention sinks and ALiBi, f32, with lse: the buffers "sinks" and
 * "alibi_slopes" (f32 [Hq]) after the others. */
static const char *kSinksAlibiIR =
    "func.func @attention(%q: tensor<2x4x3x16xf32>,\n"
    "    %k: tensor<2x2x16x16xf32>, %v: tensor<2x2x16x16xf32>,\n"
    "    %off: tensor<2xi32>, %len: tensor<2xi32>, %z: tensor<4xf32>,\n"
    "    %m: tensor<4xf32>)\n"
    "    -> (tensor<2x4x3x16xf32>, tensor<2x4x3xf32>) {\n"
    "  %o, %lse = kvattn.attention %q, %k, %v q_offset(%off : tensor<2xi32>)\n"
    "      kv_len(%len : tensor<2xi32>) sinks(%z : tensor<4xf32>)\n"
    "      alibi_slopes(%m : tensor<4xf32>) causal\n"
    "      : tensor<2x4x3x16xf32>, tensor<2x2x16x16xf32>,\n"
    "      tensor<2x2x16x16xf32> -> tensor<2x4x3x16xf32>, tensor<2x4x3xf32>\n"
    "  return %o, %lse : tensor<2x4x3x16xf32>, tensor<2x4x3xf32>\n"
    "}\n";

static void sinksAlibi(kvattn_runtime *rt) {
  kvattn_attention_desc d;
  kvattn_attention_desc_init(&d);
  d.dtype = KVATTN_F32;
  d.batch = 2;
  d.query_len = 3;
  d.key_len = 16;
  d.num_query_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 16;
  d.causal = 1;
  d.with_lse = 1;
  d.sinks = 1;
  d.alibi = 1;
  static const int32_t off[2] = {9, 2}, len[2] = {12, 5};
  static const float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f},
                     slopes[4] = {0.25f, 0.0625f, 0.015625f, 0.5f};
  const size_t q = 2 * 4 * 3 * 16 * 4, cache = 2 * 2 * 16 * 16 * 4;
  const Buffer buffers[] = {
      {"query", q, NULL, 0},           {"key", cache, NULL, 0},
      {"value", cache, NULL, 0},       {"out", q, NULL, 1},
      {"lse", 2 * 4 * 3 * 4, NULL, 1}, {"q_offset", 8, off, 0},
      {"kv_len", 8, len, 0},           {"sinks", 16, sinks, 0},
      {"alibi_slopes", 16, slopes, 0}};
  kvattn_sizes sizes = {2, 4, 2, 3, 16, 0, 0, 0};
  compare(rt, "sinks and alibi", &d, kSinksAlibiIR, sizes, buffers,
          sizeof(buffers) / sizeof(buffers[0]));
}

/* A decode step with RoPE and its record (rotary_dim, rope_record): the K
 * append rotates the new key at its position and writes its entry of the
 * record in place; the attention rotates the query and checks the record
 * on the device. */
static const char *kRopeStepIR =
    "func.func @attention(%q: tensor<2x4x1x16xf32>,\n"
    "    %k: tensor<2x2x16x16xf32>, %v: tensor<2x2x16x16xf32>,\n"
    "    %kn: tensor<2x2x1x16xf32>, %vn: tensor<2x2x1x16xf32>,\n"
    "    %pos: tensor<2xi32>, %len: tensor<2xi32>, %rec: tensor<2x16xi32>)\n"
    "    -> (tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "        tensor<2x2x16x16xf32>, tensor<2x16xi32>) {\n"
    "  %k2, %r2 = kvattn.append %kn into %k at %pos\n"
    "      rope = <rotary_dim = 16, theta = 10000.0, interleaved>\n"
    "      rope_pos(%rec : tensor<2x16xi32>)\n"
    "      : tensor<2x2x1x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>\n"
    "  %v2 = kvattn.append %vn into %v at %pos\n"
    "      : tensor<2x2x1x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>\n"
    "  %o = kvattn.attention %q, %k2, %v2 q_offset(%pos : tensor<2xi32>)\n"
    "      kv_len(%len : tensor<2xi32>) k_rope_pos(%r2 : tensor<2x16xi32>)\n"
    "      causal rope = <rotary_dim = 16, theta = 10000.0, interleaved>\n"
    "      : tensor<2x4x1x16xf32>, tensor<2x2x16x16xf32>,\n"
    "        tensor<2x2x16x16xf32> -> tensor<2x4x1x16xf32>\n"
    "  return %o, %k2, %v2, %r2 : tensor<2x4x1x16xf32>,\n"
    "      tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x16xi32>\n"
    "}\n";

static void ropeStep(kvattn_runtime *rt) {
  kvattn_attention_desc d;
  kvattn_attention_desc_init(&d);
  d.dtype = KVATTN_F32;
  d.batch = 2;
  d.query_len = 1;
  d.key_len = 16;
  d.num_query_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 16;
  d.causal = 1;
  d.append = 1;
  d.rotary_dim = 16;
  d.rope_interleaved = 1;
  d.rope_record = 1;
  /* The new tokens at 9 and 2; the record holds the old keys' slots. */
  static const int32_t pos[2] = {9, 2}, len[2] = {10, 3};
  static const int32_t record[32] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  -1, -1, -1, -1, -1, -1, -1,
      0,  1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  const size_t cache = 2 * 2 * 16 * 16 * 4, q = 2 * 4 * 16 * 4,
               update = 2 * 2 * 16 * 4;
  const Buffer buffers[] = {{"query", q, NULL, 0},
                            {"key", cache, NULL, 1},
                            {"value", cache, NULL, 1},
                            {"update_k", update, NULL, 0},
                            {"update_v", update, NULL, 0},
                            {"out", q, NULL, 1},
                            {"pos", 8, pos, 0},
                            {"q_offset", 8, pos, 0},
                            {"kv_len", 8, len, 0},
                            {"k_rope_pos", 128, record, 1}};
  kvattn_sizes sizes = {2, 4, 2, 1, 16, 0, 0, 0};
  compare(rt, "rope decode step", &d, kRopeStepIR, sizes, buffers,
          sizeof(buffers) / sizeof(buffers[0]));
}

static void refused(kvattn_runtime *rt, const char *label,
                    const kvattn_attention_desc *d) {
  char *error = NULL, *ir = NULL;
  CHECK(kvattn_attention_desc_to_ir(d, &ir, &error) != 0, "%s: accepted",
        label);
  printf("%-26s %s\n", label, error ? error : "(none)");
  kvattn_free(error);
  kvattn_free(ir);
  (void)rt;
}

static void badDescriptions(kvattn_runtime *rt) {
  kvattn_attention_desc good;
  kvattn_attention_desc_init(&good);
  good.num_query_heads = 8;
  good.num_kv_heads = 2;
  good.head_dim = 64;
  kvattn_attention_desc d;
#define BAD(label, change)                                                     \
  do {                                                                         \
    d = good;                                                                  \
    change;                                                                    \
    refused(rt, label, &d);                                                    \
  } while (0)
  BAD("heads", d.num_kv_heads = 3);
  BAD("no kv heads", d.num_kv_heads = 0);
  BAD("head dim too large", d.head_dim = 300);
  BAD("value head dim", d.value_head_dim = -2);
  BAD("page size 0", d.paged = 1);
  BAD("page size not paged", d.page_size = 16);
  BAD("window without causal", d.window = 32);
  BAD("window negative", (d.causal = 1, d.window = -1));
  BAD("softcap", d.softcap = -1);
  BAD("scale", d.scale = -0.5);
  BAD("varlen append", (d.varlen = 1, d.append = 1));
  BAD("batch", d.batch = -4);
  BAD("dtype", d.dtype = (kvattn_dtype)42);
  BAD("causal flag", d.causal = 2);
  BAD("sinks flag", d.sinks = 3);
  BAD("alibi flag", d.alibi = -1);
  BAD("struct_size", d.struct_size = 4);
  BAD("rotary_dim odd", d.rotary_dim = 7);
  BAD("rotary_dim above D", d.rotary_dim = 80);
  BAD("rope_theta 1", (d.rotary_dim = 64, d.rope_theta = 1));
  BAD("rope_record alone", d.rope_record = 1);
  BAD("rope_record paged",
      (d.rotary_dim = 64, d.rope_record = 1, d.paged = 1, d.page_size = 16));
  BAD("rope_interleaved flag", (d.rotary_dim = 64, d.rope_interleaved = 2));
  BAD("rotary_rows alone", d.rotary_rows = 4096);
  BAD("rotary_rows negative", (d.rotary_dim = 64, d.rotary_rows = -2));
  BAD("rotary_dtype", (d.rotary_dim = 64, d.rotary_rows = 4096,
                       d.rotary_dtype = (kvattn_dtype)42));
  /* The plan entry point gives the same message, after its name. */
  char *error = NULL;
  kvattn_plan *plan = NULL;
  d = good;
  d.num_kv_heads = 3;
  kvattn_sizes sizes = {0};
  CHECK(kvattn_plan_create_from_desc(rt, &d, NULL, KVATTN_IMAGE_DEVICE_IR,
                                     sizes, &plan, &error) != 0,
        "plan: accepted");
  printf("plan refused: %s\n", error ? error : "(none)");
  kvattn_free(error);
  /* Two appends whose caches no attention reads: the plan cannot tell
   * their buffers apart. */
  static const char *twoAppends =
      "func.func @w(%kc: tensor<2x2x16x16xf32>, %vc: tensor<2x2x16x16xf32>,\n"
      "    %kn: tensor<2x2x1x16xf32>, %vn: tensor<2x2x1x16xf32>,\n"
      "    %pos: tensor<2xi32>) -> (tensor<2x2x16x16xf32>,\n"
      "    tensor<2x2x16x16xf32>) {\n"
      "  %k = kvattn.append %kn into %kc at %pos\n"
      "      : tensor<2x2x1x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>\n"
      "  %v = kvattn.append %vn into %vc at %pos\n"
      "      : tensor<2x2x1x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>\n"
      "  return %k, %v : tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>\n"
      "}\n";
  kvattn_sizes appendSizes = {2, 2, 2, 1, 16, 0, 0, 0};
  CHECK(kvattn_plan_create(rt, twoAppends, NULL, KVATTN_IMAGE_DEVICE_IR,
                           appendSizes, &plan, &error) != 0,
        "two appends: accepted");
  printf("two appends refused: %s\n", error ? error : "(none)");
  kvattn_free(error);
  /* The good description's IR verifies (dynamic B, L, S). */
  char *ir = NULL;
  if (kvattn_attention_desc_to_ir(&good, &ir, &error))
    die("good description", error);
  printf("good description: %s", strstr(ir, "kvattn.attention") ? "" : "NO ");
  printf("kvattn.attention, %s\n", strstr(ir, "tensor<?x8x?x64xbf16>")
                                       ? "tensor<?x8x?x64xbf16>"
                                       : "NOT dynamic");
  kvattn_free(ir);
}

/* One buffer namespace per plan: modules with two attentions or two public
 * functions are refused by name (both would bind `query`, `out`, ...), and
 * kvattn_plan_buffer_name refuses a parameter the kernel does not have. */
static void oneNamespace(kvattn_runtime *rt) {
#define ATTENTION(q, k, v, off, len, name)                                     \
  "  %" name " = kvattn.attention " q ", " k ", " v " q_offset(" off            \
  " : tensor<2xi32>)\n"                                                        \
  "      kv_len(" len " : tensor<2xi32>) causal : tensor<2x4x1x16xf32>,\n"     \
  "      tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x4x1x16xf32>\n"
#define ARGS                                                                   \
  "(%q: tensor<2x4x1x16xf32>, %k: tensor<2x2x8x16xf32>,\n"                     \
  "    %v: tensor<2x2x8x16xf32>, %off: tensor<2xi32>, %len: tensor<2xi32>)"
  static const char *twoAttentions =
      "func.func @two" ARGS " -> (tensor<2x4x1x16xf32>, tensor<2x4x1x16xf32>) {\n"
      ATTENTION("%q", "%k", "%v", "%off", "%len", "a")
      ATTENTION("%q", "%v", "%k", "%off", "%len", "b")
      "  return %a, %b : tensor<2x4x1x16xf32>, tensor<2x4x1x16xf32>\n"
      "}\n";
  static const char *twoFunctions =
      "func.func @f" ARGS " -> tensor<2x4x1x16xf32> {\n"
      ATTENTION("%q", "%k", "%v", "%off", "%len", "a")
      "  return %a : tensor<2x4x1x16xf32>\n"
      "}\n"
      "func.func @g" ARGS " -> tensor<2x4x1x16xf32> {\n"
      ATTENTION("%q", "%k", "%v", "%off", "%len", "a")
      "  return %a : tensor<2x4x1x16xf32>\n"
      "}\n";
  static const char *one =
      "func.func @one" ARGS " -> tensor<2x4x1x16xf32> {\n"
      ATTENTION("%q", "%k", "%v", "%off", "%len", "a")
      "  return %a : tensor<2x4x1x16xf32>\n"
      "}\n";
  kvattn_sizes sizes = {2, 4, 2, 1, 8, 0, 0, 0};
  char *error = NULL;
  kvattn_plan *plan = NULL;
  CHECK(kvattn_plan_create(rt, twoAttentions, NULL, KVATTN_IMAGE_DEVICE_IR,
                           sizes, &plan, &error) != 0,
        "two attentions: accepted");
  printf("two attentions refused: %s\n", error ? error : "(none)");
  kvattn_free(error);
  error = NULL;
  CHECK(kvattn_plan_create(rt, twoFunctions, NULL, KVATTN_IMAGE_DEVICE_IR,
                           sizes, &plan, &error) != 0,
        "two functions: accepted");
  printf("two functions refused: %s\n", error ? error : "(none)");
  kvattn_free(error);
  error = NULL;
  if (kvattn_plan_create(rt, one, NULL, KVATTN_IMAGE_DEVICE_IR, sizes, &plan,
                         &error))
    die("one attention", error);
  char *name = NULL;
  if (kvattn_plan_buffer_name(plan, 1, "kv_len", &name, &error))
    die("buffer name", error);
  printf("buffer name of kv_len: %s\n", name);
  kvattn_free(name);
  name = NULL;
  CHECK(kvattn_plan_buffer_name(plan, 1, "no_such_param", &name, &error) != 0,
        "unknown parameter: named '%s'", name ? name : "");
  printf("unknown parameter refused: %s\n", error ? error : "(none)");
  kvattn_free(error);
  kvattn_plan_destroy(plan);
#undef ATTENTION
#undef ARGS
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
  pagedStep(rt);
  dynamicDecode(rt);
  ragged(rt);
  sinksAlibi(rt);
  ropeStep(rt);
  badDescriptions(rt);
  oneNamespace(rt);
  kvattn_runtime_destroy(rt);
  return finish();
}
