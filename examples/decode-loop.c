/*===- decode-loop.c - a serving engine's decode loop over the C API -----===*
 *
 * Plans one paged GQA decode attention (bf16, 8 query heads over 2 kv
 * heads, D = 64, 16-key pages) with a dynamic batch and cache once
 * (kvattn_plan_create: compiled with device validation, or read from the
 * kernel cache), then runs a continuous-batching decode loop with it:
 * sequences of different lengths join and leave the batch, each step
 * appends one token per sequence to its pages (taken from a shared pool as
 * it grows) and attends over its whole cache. The metadata (q_offset,
 * kv_len, block_table) lives in device buffers allocated once; each
 * kvattn_plan_run takes only device pointers and its driver calls are
 * counted (launches, synchronisations, allocations, copies: the budget is
 * zero of the last three). Every step's output is checked against a plain C
 * attention over the same bf16 values; at the end one step is captured in
 * a CUDA graph and replayed, its output checked again.
 *
 *   kvattn-decode-loop [--emulated] [--steps N]
 *
 * --emulated plans the device LLVM IR for the emulated GPU (run with
 * KVATTN_LIBCUDA naming libkvattn_cuda_emu.so); otherwise PTX for the
 * device's chip. What a serving engine would not do here: stage the query,
 * each new token's K/V and the metadata from the host with synchronous
 * copies (a model produces them on the device) and synchronise after each
 * step (only to check the output); these are the example's own calls,
 * outside the counted run.
 *
 *===----------------------------------------------------------------------===*/

#include "kvattn-c/KVAttn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HQ = 8, HKV = 2, D = 64, PAGE = 16, MAX_PAGES = 8, POOL = 24 };
enum { SEQS = 4, MAX_BATCH = SEQS };

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

/* bf16 as the upper half of an f32, rounded to nearest even. */
static uint16_t to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
/* A deterministic value in [-1, 1), distinct per (seed, index). */
static float value(uint32_t seed, uint32_t i) {
  uint32_t x = seed * 0x9E3779B9u ^ (i * 0x85EBCA6Bu + 0x27D4EB2Fu);
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return from_bf16(to_bf16((float)(x >> 8) / 8388608.0f - 1.0f));
}

/* One sequence of the batch: its pages and its tokens' K/V (kept on the
 * host for the check). */
typedef struct {
  int start, stop; /* the steps it is in the batch: [start, stop) */
  int len;         /* tokens in its cache */
  int pages[MAX_PAGES];
  float k[MAX_PAGES * PAGE][HKV][D], v[MAX_PAGES * PAGE][HKV][D];
} Sequence;

static int fail(const char *what, char *error) {
  fprintf(stderr, "decode-loop: %s: %s\n", what, error ? error : "?");
  kvattn_free(error);
  return 1;
}

/* The shared page pool of the K and V caches. */
typedef struct {
  kvattn_runtime *rt;
  uint64_t k, v;
  int free[POOL];
  int count;
} Pool;

/* Appends sequence `s`'s next token: its K/V into its last page, a new page
 * from the pool when that one is full. */
static int append(Pool *pool, Sequence *sq, int s) {
  const int t = sq->len;
  if (t % PAGE == 0) {
    if (pool->count == 0 || t / PAGE >= MAX_PAGES) {
      fprintf(stderr, "decode-loop: out of pages\n");
      return 1;
    }
    sq->pages[t / PAGE] = pool->free[--pool->count];
  }
  const size_t row = ((size_t)sq->pages[t / PAGE] * PAGE + t % PAGE) * HKV * D;
  uint16_t staging[HKV * D];
  char *error = NULL;
  for (int which = 0; which < 2; ++which) {
    for (int h = 0; h < HKV; ++h)
      for (int d = 0; d < D; ++d) {
        float x = value(100 * s + which, (uint32_t)((t * HKV + h) * D + d));
        (which ? sq->v : sq->k)[t][h][d] = x;
        staging[h * D + d] = to_bf16(x);
      }
    if (kvattn_copy_to_device(pool->rt, (which ? pool->v : pool->k) + row * 2,
                              staging, sizeof(staging), &error))
      return fail("append", error);
  }
  sq->len = t + 1;
  return 0;
}

int main(int argc, char **argv) {
  int emulated = 0, steps = 12;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--emulated"))
      emulated = 1;
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
  }
  if (steps < 1 || steps > 40) {
    fprintf(stderr, "decode-loop: --steps takes 1 to 40\n");
    return 2;
  }
  char *error = NULL;

  /* Plan: compile once (the kernel cache makes the next process's compile
   * a file read) for the device's chip, load the kernels, size everything
   * for the largest batch. */
  kvattn_runtime *rt = NULL;
  if (kvattn_runtime_create(&rt, &error))
    return fail("runtime", error);
  kvattn_sizes bounds = {MAX_BATCH,        HQ,   HKV,  1,
                         MAX_PAGES * PAGE, POOL, PAGE, MAX_PAGES};
  kvattn_plan *plan = NULL;
  if (kvattn_plan_create(rt, kIR, NULL,
                         emulated ? KVATTN_IMAGE_DEVICE_IR : KVATTN_IMAGE_PTX,
                         bounds, &plan, &error))
    return fail("plan", error);
  size_t workspace = 0;
  if (kvattn_plan_workspace_bytes(plan, &workspace, &error))
    return fail("plan", error);
  printf("planned: %zu bytes of plan workspace\n", workspace);
  const size_t qBytes = (size_t)MAX_BATCH * HQ * D * 2;
  const size_t cacheBytes = (size_t)POOL * PAGE * HKV * D * 2;
  uint64_t q, k, v, out, dOffset, dLen, dTable;
  if (kvattn_device_alloc(rt, qBytes, &q, &error) ||
      kvattn_device_alloc(rt, qBytes, &out, &error) ||
      kvattn_device_alloc(rt, cacheBytes, &k, &error) ||
      kvattn_device_alloc(rt, cacheBytes, &v, &error) ||
      kvattn_device_alloc(rt, MAX_BATCH * 4, &dOffset, &error) ||
      kvattn_device_alloc(rt, MAX_BATCH * 4, &dLen, &error) ||
      kvattn_device_alloc(rt, MAX_BATCH * MAX_PAGES * 4, &dTable, &error))
    return fail("alloc", error);
  kvattn_call_counts total = {0};

  /* Sequences with different prompts, joining and leaving the batch. */
  static Sequence seqs[SEQS];
  const int prompts[SEQS] = {5, 17, 1, 30}, starts[SEQS] = {0, 0, 2, 4};
  const int stops[SEQS] = {7, 100, 100, 9};

  double worst = 0;
  int launches = 0;
  Pool pool = {rt, k, v, {0}, POOL};
  for (int p = 0; p < POOL; ++p)
    pool.free[p] = POOL - 1 - p;

  for (int s = 0; s < SEQS; ++s) {
    seqs[s].start = starts[s];
    seqs[s].stop = stops[s];
    for (int t = 0; t < prompts[s] - 1; ++t)
      if (append(&pool, &seqs[s], s))
        return 1;
  }

  /* Run: one launch per step over the sequences in the batch. */
  for (int step = 0; step < steps; ++step) {
    int batch[MAX_BATCH], B = 0;
    for (int s = 0; s < SEQS; ++s) {
      if (step == seqs[s].stop) /* it leaves: its pages go back */
        for (int p = 0; p * PAGE < seqs[s].len; ++p)
          pool.free[pool.count++] = seqs[s].pages[p];
      if (step >= seqs[s].start && step < seqs[s].stop)
        batch[B++] = s;
    }
    int32_t qOffset[MAX_BATCH], kvLen[MAX_BATCH], table[MAX_BATCH * MAX_PAGES];
    uint16_t qHost[MAX_BATCH * HQ * D];
    for (int b = 0; b < B; ++b) {
      Sequence *sq = &seqs[batch[b]];
      if (append(&pool, sq, batch[b])) /* this step's token */
        return 1;
      qOffset[b] = sq->len - 1;
      kvLen[b] = sq->len;
      for (int p = 0; p < MAX_PAGES; ++p)
        table[b * MAX_PAGES + p] = p * PAGE < sq->len ? sq->pages[p] : -1;
      for (int i = 0; i < HQ * D; ++i)
        qHost[b * HQ * D + i] =
            to_bf16(value(1000 + 100 * batch[b] + step, (uint32_t)i));
    }
    if (B == 0)
      continue;
    /* Staging (the model's part in an engine): query and metadata. */
    if (kvattn_copy_to_device(rt, q, qHost, (size_t)B * HQ * D * 2, &error) ||
        kvattn_copy_to_device(rt, dOffset, qOffset, (size_t)B * 4, &error) ||
        kvattn_copy_to_device(rt, dLen, kvLen, (size_t)B * 4, &error) ||
        kvattn_copy_to_device(rt, dTable, table, (size_t)B * MAX_PAGES * 4,
                              &error))
      return fail("staging", error);
    kvattn_sizes sizes = {B,    HQ,   HKV,      1, MAX_PAGES * PAGE,
                          POOL, PAGE, MAX_PAGES};
    kvattn_buffer buffers[] = {{"query", q},           {"key", k},
                               {"value", v},           {"out", out},
                               {"q_offset", dOffset},  {"kv_len", dLen},
                               {"block_table", dTable}};
    /* The step itself, counted. */
    kvattn_call_counts counts;
    if (kvattn_runtime_call_counts(rt, &counts, 1, &error) ||
        kvattn_plan_run(plan, sizes, buffers, 7, KVATTN_CURRENT_STREAM,
                        &error) ||
        kvattn_runtime_call_counts(rt, &counts, 0, &error))
      return fail("run", error);
    total.launches += counts.launches;
    total.synchronizations += counts.synchronizations;
    total.allocations += counts.allocations;
    total.synchronous_copies += counts.synchronous_copies;
    total.async_copies += counts.async_copies;
    ++launches;
    if (kvattn_plan_status(plan, &error))
      return fail("device validation", error);

    /* The check (a serving engine would not wait here). */
    uint16_t outHost[MAX_BATCH * HQ * D];
    if (kvattn_synchronize(rt, &error) ||
        kvattn_copy_to_host(rt, outHost, out, (size_t)B * HQ * D * 2, &error))
      return fail("output", error);
    for (int b = 0; b < B; ++b) {
      Sequence *sq = &seqs[batch[b]];
      for (int h = 0; h < HQ; ++h) {
        const int g = h / (HQ / HKV);
        double s[MAX_PAGES * PAGE], m = -INFINITY, sum = 0;
        for (int j = 0; j < sq->len; ++j) {
          s[j] = 0;
          for (int d = 0; d < D; ++d)
            s[j] += from_bf16(qHost[(b * HQ + h) * D + d]) * sq->k[j][g][d];
          s[j] /= sqrt((double)D);
          m = s[j] > m ? s[j] : m;
        }
        for (int j = 0; j < sq->len; ++j)
          sum += exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double want = 0;
          for (int j = 0; j < sq->len; ++j)
            want += exp(s[j] - m) / sum * sq->v[j][g][d];
          double got = from_bf16(outHost[(b * HQ + h) * D + d]);
          double err = fabs(got - want) / (1 + fabs(want));
          worst = err > worst ? err : worst;
        }
      }
    }
    printf("step %2d: B=%d kv_len=", step, B);
    for (int b = 0; b < B; ++b)
      printf("%s%lld", b ? "," : "", (long long)kvLen[b]);
    printf(" | run: launches=%lld syncs=%lld allocs=%lld sync_copies=%lld "
           "async_copies=%lld\n",
           (long long)counts.launches, (long long)counts.synchronizations,
           (long long)counts.allocations, (long long)counts.synchronous_copies,
           (long long)counts.async_copies);
    if (step == steps - 1) {
      /* Capture this step in a CUDA graph and replay it: the same device
       * pointers, so the same output. */
      uint16_t want[MAX_BATCH * HQ * D], got[MAX_BATCH * HQ * D];
      kvattn_graph *graph = NULL;
      const size_t bytes = (size_t)B * HQ * D * 2;
      if (kvattn_copy_to_host(rt, want, out, bytes, &error) ||
          kvattn_graph_begin_capture(rt, &error) ||
          kvattn_plan_run(plan, sizes, buffers, 7, KVATTN_CURRENT_STREAM,
                          &error) ||
          kvattn_graph_end_capture(rt, &graph, &error))
        return fail("capture", error);
      int same = 1;
      for (int replay = 0; replay < 3; ++replay) {
        uint16_t nan[MAX_BATCH * HQ * D];
        memset(nan, 0xff, bytes);
        if (kvattn_copy_to_device(rt, out, nan, bytes, &error) ||
            kvattn_graph_launch(graph, &error) ||
            kvattn_synchronize(rt, &error) ||
            kvattn_copy_to_host(rt, got, out, bytes, &error))
          return fail("replay", error);
        same &= !memcmp(want, got, bytes);
      }
      kvattn_graph_destroy(graph);
      printf("graph: 1 step captured, 3 replays, output %s\n",
             same ? "identical" : "DIFFERENT");
      worst = same ? worst : 1;
    }
  }
  int ok = worst < 0.02;
  printf("%d runs: %lld launches, %lld syncs, %lld allocations, %lld "
         "synchronous copies, %lld async copies\n",
         launches, (long long)total.launches, (long long)total.synchronizations,
         (long long)total.allocations, (long long)total.synchronous_copies,
         (long long)total.async_copies);
  ok &= total.synchronizations == 0 && total.allocations == 0 &&
        total.synchronous_copies == 0 && total.async_copies == 0;
  printf("%d launches, %d pages in use, max error %.3g: %s\n", launches,
         POOL - pool.count, worst, ok ? "PASS" : "FAIL");

  kvattn_plan_destroy(plan);
  kvattn_device_free(rt, dOffset, NULL);
  kvattn_device_free(rt, dLen, NULL);
  kvattn_device_free(rt, dTable, NULL);
  kvattn_device_free(rt, q, NULL);
  kvattn_device_free(rt, out, NULL);
  kvattn_device_free(rt, k, NULL);
  kvattn_device_free(rt, v, NULL);
  kvattn_runtime_destroy(rt);
  return ok ? 0 : 1;
}
