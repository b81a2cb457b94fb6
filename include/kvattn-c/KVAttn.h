/*===- KVAttn.h - the kvattn C API ------------------------------*- C -*-===//
 *
 * Compile kvattn IR to PTX and a launch manifest; load and launch through
 * the CUDA driver (opened at run time: no link dependency on libcuda).
 *
 * Every function that can fail returns 0 on success and non-zero on
 * failure, with a message in *error (free it with kvattn_free; error may be
 * NULL when the caller does not want the message).
 *
 * Threads: a kvattn_runtime, its plans and its kernels may be used from
 * several threads at once (module loads, allocations and frees, the
 * metadata ring and the call counts are locked; every launch and run packs
 * its own parameters). A thread that wants a stream of its own passes it to
 * kvattn_plan_run / kvattn_plan_run_host_metadata:
 * kvattn_runtime_set_stream changes the current stream of every thread.
 * On the device, the runs of one plan share its status word and split-KV
 * workspaces: runs of a plan with workspaces (kvattn_plan_workspace_bytes
 * above 128) must not overlap on the device (order their streams, or use
 * one plan per stream). Destroying an object while another thread uses it
 * is the caller's error, as is capturing (kvattn_graph_*) one runtime's
 * current stream from two threads.
 *
 *===----------------------------------------------------------------------===*/

#ifndef KVATTN_C_KVATTN_H
#define KVATTN_C_KVATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Frees a string returned by the API. */
void kvattn_free(char *string);

/* Compiles every kvattn.attention / kvattn.sdpa of `ir` (MLIR text) for
 * `chip` (e.g. "sm_80"; NULL for sm_80). On success *ptx and *manifest_json
 * receive the PTX text and its launch manifest (docs/kernel-abi.md). */
int kvattn_compile_to_ptx(const char *ir, const char *chip, char **ptx,
                          char **manifest_json, char **error);

/* As kvattn_compile_to_ptx, but *image receives the device LLVM IR that the
 * NVPTX back end would compile (libdevice linked, optimised): the image of
 * the emulated GPU, whose driver is libkvattn_cuda_emu.so (create the runtime
 * with $KVATTN_LIBCUDA naming it; docs/gpu-emulator.md). */
int kvattn_compile_to_device_ir(const char *ir, const char *chip, char **image,
                                char **manifest_json, char **error);

/*===----------------------------------------------------------------------===*
 * Compile options (both targets)
 *===----------------------------------------------------------------------===*/

/* Every option of the compilation, for the GPU (PtxOptions) and the CPU
 * (CpuCompileOptions). The struct grows at its end only: set struct_size to
 * sizeof(kvattn_compile_options) (kvattn_compile_options_init does, with
 * every default); a library reads the first struct_size bytes and keeps its
 * defaults for fields a caller built against an older header does not have.
 * A struct_size larger than the library knows is refused (a newer header
 * than the library). 0 means "chosen by the compiler" where it says so. */
typedef struct {
  size_t struct_size;
  /* GPU: the chip, e.g. "sm_80", "sm_90" (NULL: sm_80). Ignored by the
   * CPU. The string is read during the call only. */
  const char *chip;
  /* Query rows per program (0: chosen per attention; the CPU: 16 to 64). */
  int64_t block_m;
  /* Keys per KV block (0: chosen per attention on the GPU, 64 on the CPU). */
  int64_t block_n;
  /* GPU: warps per program (0: chosen) and cp.async pipeline stages
   * (default 2). */
  int64_t num_warps;
  int64_t num_stages;
  /* KV chunks per program, merged afterwards (1: no split; 0: automatic,
   * from num_sms on the GPU and the thread count on the CPU). */
  int64_t split_kv;
  /* GPU: streaming multiprocessors the automatic split-KV plans for
   * (default 132). */
  int64_t num_sms;
  /* GQA packing of few query rows (default 1). */
  int32_t pack_gqa;
  /* GPU: tensor cores (mma.sync, ldmatrix, cp.async) for f16/bf16 where
   * the head dims allow (default 1); 0: the scalar lowering. */
  int32_t tensor_cores;
  /* GPU: the on-disk kernel cache that $KVATTN_CACHE_DIR selects (default
   * 1); 0: always compile, touch no file. */
  int32_t use_kernel_cache;
  /* CPU: the vectorised lowering (default 1; 0: scalar loops). */
  int32_t vectorize;
  /* CPU: f32 lanes per vector at most (0: the host's). */
  int64_t vector_width;
  /* CPU: threads running the programs of the grid (0: all cores or
   * OMP_NUM_THREADS; 1: the calling thread only). */
  int64_t threads;
  /* CPU: LLVM optimisation level of the JIT, 0 to 3 (default 3). */
  int32_t opt_level;
  int32_t reserved0; /* zero */
  /* Fields added later: a caller built against an older header has a
   * smaller struct_size and gets their defaults. */
  /* GPU: device validation (PtxOptions::deviceValidation, default 0): every
   * kernel takes the `status` pointer and does nothing while it is set, and
   * every kernel that reads metadata gets its `_validate` kernel (kind
   * "validate"; docs/kernel-abi.md, "The status word"). Plans always
   * compile with it (1 or 0 there: the same). Ignored by the CPU. */
  int32_t device_validation;
  int32_t reserved1; /* zero */
  /* Both targets: -kvattn-resolve-cached-append's fix-upper-left-appends
   * (default 0). 0: an upper-left causal kvattn.sdpa over a KV-cache write
   * keeps torch's is_causal meaning and the compiler warns (the warning is
   * in the program's diagnostics); 1: it is compiled with lower-right
   * positions (the queries after the cached keys) and a remark says so. */
  int32_t fix_upper_left_appends;
  int32_t reserved2; /* zero */
  /* GPU: bits of the kernels' index arithmetic, 32 (default) or 64. A
   * 32-bit kernel is refused at launch for a tensor of 2^31 elements or more
   * (the message names this option); 64 costs some address arithmetic.
   * Ignored by the CPU. */
  int32_t index_bitwidth;
  int32_t reserved3; /* zero */
  /* CPU: in-place appends (default 0). 1: a kvattn.append whose cache is an
   * argument of the entry function writes that argument's memory in place,
   * and kvattn_cpu_run returns such a result as that memory (an output
   * given at the same address is not copied onto itself): a decode step's
   * append costs its new rows, not a copy of the cache. Another input
   * sharing that cache's memory, or an output overlapping it other than the
   * cache itself, is refused before anything runs. 0: kvattn_cpu_run never
   * writes its inputs. Ignored by the GPU. */
  int32_t in_place_appends;
  int32_t reserved4; /* zero */
} kvattn_compile_options;

/* The defaults, with struct_size set. */
void kvattn_compile_options_init(kvattn_compile_options *options);

/* What kvattn_compile produces for the GPU. */
typedef enum {
  /* PTX text for the CUDA driver. */
  KVATTN_IMAGE_PTX = 0,
  /* The device LLVM IR of the emulated GPU (libkvattn_cuda_emu.so). */
  KVATTN_IMAGE_DEVICE_IR = 1
} kvattn_image_kind;

/* kvattn_compile_to_ptx / kvattn_compile_to_device_ir with every option
 * (options NULL: the defaults). The options are validated (non-negative
 * sizes, booleans 0 or 1, opt_level 0 to 3) before anything is compiled. */
int kvattn_compile(const char *ir, const kvattn_compile_options *options,
                   kvattn_image_kind kind, char **image, char **manifest_json,
                   char **error);

/*===----------------------------------------------------------------------===*
 * The CPU path: compile for the host (JIT) and run on host buffers
 *===----------------------------------------------------------------------===*/

/* Element types of host buffers (the MLIR spellings: "f32", ...). i1 is one
 * byte per element, 0 or 1. */
typedef enum {
  KVATTN_F32 = 0,
  KVATTN_F16 = 1,
  KVATTN_BF16 = 2,
  KVATTN_F64 = 3,
  KVATTN_I1 = 4,
  KVATTN_I32 = 5,
  KVATTN_I64 = 6,
  /* FP8 KV caches: one byte a code (f8E4M3FN, f8E5M2), read with f32
   * k_scale / v_scale (docs/semantics.md, "FP8 KV caches"). */
  KVATTN_F8E4M3FN = 7,
  KVATTN_F8E5M2 = 8
} kvattn_dtype;

/* A dense row-major tensor in host memory, owned by the caller. */
typedef struct {
  void *data;
  kvattn_dtype dtype;
  size_t rank;
  const int64_t *shape; /* rank dimensions */
} kvattn_host_tensor;

typedef struct kvattn_cpu_program kvattn_cpu_program;

/* Compiles function `entry` of `ir` (NULL: the module's only public
 * function) through the kvattn-to-cpu pipeline and the JIT. The GPU-only
 * options are ignored. */
int kvattn_cpu_compile(const char *ir, const char *entry,
                       const kvattn_compile_options *options,
                       kvattn_cpu_program **program, char **error);
void kvattn_cpu_program_destroy(kvattn_cpu_program *program);

/* The function's signature: how many arguments and results, and the type of
 * one of them (is_result 0: argument `index`, 1: result `index`); `shape`
 * (may be NULL) receives min(rank, max_rank) dims, -1 for a dynamic one.
 * The counts of a NULL program are 0. */
size_t kvattn_cpu_program_num_arguments(const kvattn_cpu_program *program);
size_t kvattn_cpu_program_num_results(const kvattn_cpu_program *program);
int kvattn_cpu_program_type(const kvattn_cpu_program *program, int is_result,
                            size_t index, kvattn_dtype *dtype, size_t *rank,
                            int64_t *shape, size_t max_rank, char **error);

/* Runs the function. `inputs` follow its arguments: each one's dtype must be
 * the argument's element type, its rank and static dims the argument's;
 * the run-time values (offsets, lengths, block tables) are validated as by
 * the scalar reference, with the same messages, before anything is
 * written. The inputs are read in place (not copied; not written, but for
 * the caches of a program compiled with in_place_appends): keep them
 * unchanged until the call returns. With num_outputs equal to
 * the number of results, each result is copied into outputs[i], whose dtype
 * and shape must be the result's (an output at the address of the cache an
 * in-place append wrote is that cache already); with num_outputs 0 the
 * results stay in the program, read with kvattn_cpu_program_result (a
 * cache an in-place append wrote: the caller's memory). */
int kvattn_cpu_run(kvattn_cpu_program *program,
                   const kvattn_host_tensor *inputs, size_t num_inputs,
                   const kvattn_host_tensor *outputs, size_t num_outputs,
                   char **error);

/* Result `index` of the last successful kvattn_cpu_run: its type, shape
 * and data, owned by the program and valid until its next run or
 * destruction (result->data is const in spirit: do not write it); a cache
 * an in-place append wrote (in_place_appends) is the caller's input memory
 * itself. */
int kvattn_cpu_program_result(const kvattn_cpu_program *program, size_t index,
                              kvattn_host_tensor *result, char **error);

/*===----------------------------------------------------------------------===*
 * Diagnostics: what the compiler said (docs/embedding.md, "Diagnostics")
 *===----------------------------------------------------------------------===*/

/* The values of mlir::DiagnosticSeverity that kvattn reports. */
typedef enum {
  KVATTN_DIAGNOSTIC_ERROR = 0,
  KVATTN_DIAGNOSTIC_WARNING = 1,
  KVATTN_DIAGNOSTIC_REMARK = 2,
  /* Attached to the diagnostic before it. */
  KVATTN_DIAGNOSTIC_NOTE = 3
} kvattn_diagnostic_severity;

/* One diagnostic; the strings belong to the object that returned it and
 * live as long as it. */
typedef struct {
  kvattn_diagnostic_severity severity;
  /* "input:12:8" (the IR text is named "input"), or MLIR's spelling of a
   * location without a file. */
  const char *location;
  const char *message;
} kvattn_diagnostic;

/* The warnings and remarks (and their notes) kvattn_cpu_compile collected,
 * in order: e.g. the lint of an upper-left causal kvattn.sdpa over a cache
 * write. Every diagnostic of a compilation is collected by the API itself:
 * none is printed, and none is lost when the embedder has no MLIR handler.
 * The GPU's are in the launch manifest's "diagnostics" array
 * (kvattn_compile, kvattn_plan_manifest; docs/kernel-abi.md), also on a
 * kernel-cache hit. The count of a NULL program is 0. */
size_t kvattn_cpu_program_num_diagnostics(const kvattn_cpu_program *program);
int kvattn_cpu_program_diagnostic(const kvattn_cpu_program *program,
                                  size_t index, kvattn_diagnostic *diagnostic,
                                  char **error);

/*===----------------------------------------------------------------------===*
 * The runtime (CUDA driver API)
 *===----------------------------------------------------------------------===*/

typedef struct kvattn_runtime kvattn_runtime;

/* Opens the driver (libcuda.so.1 or $KVATTN_LIBCUDA), device 0, its primary
 * context and a stream. */
int kvattn_runtime_create(kvattn_runtime **runtime, char **error);
void kvattn_runtime_destroy(kvattn_runtime *runtime);

/* Options of kvattn_runtime_create_with_options; the same growth rule as
 * kvattn_compile_options (struct_size, kvattn_runtime_options_init). */
typedef struct {
  size_t struct_size;
  /* The CUDA device ordinal (default 0). An ordinal the driver does not
   * have is an error naming the driver's device count. */
  int32_t device;
  int32_t reserved0; /* zero */
  /* The driver library (NULL: $KVATTN_LIBCUDA, else libcuda.so.1); e.g.
   * the path from kvattn_emulated_driver_path. Read during the call. */
  const char *driver_library;
} kvattn_runtime_options;

void kvattn_runtime_options_init(kvattn_runtime_options *options);
int kvattn_runtime_create_with_options(kvattn_runtime **runtime,
                                       const kvattn_runtime_options *options,
                                       char **error);

/* The device of a runtime: its ordinal, compute capability (e.g. 90 for
 * sm_90) and multiprocessor count (each pointer may be NULL). */
int kvattn_runtime_device_info(const kvattn_runtime *runtime, int *device,
                               int *compute_capability,
                               int *multiprocessor_count, char **error);

/* The emulated GPU's driver library: $KVATTN_EMU_DRIVER, else
 * libkvattn_cuda_emu.so in the lib/ folder next to the bin/ or lib/ folder
 * of the binary holding the C API (for libkvattn_c.so: beside it, in the
 * build and install trees alike). Whether the file exists is not checked. */
int kvattn_emulated_driver_path(char **path, char **error);

/* Launches, copies and kvattn_synchronize run on `stream` from now on: a
 * CUstream of device 0's primary context (e.g. PyTorch's
 * torch.cuda.current_stream().cuda_stream; 0 is the legacy default stream),
 * kept alive by the caller. kvattn_runtime_use_own_stream goes back to the
 * runtime's own stream. */
int kvattn_runtime_set_stream(kvattn_runtime *runtime, uint64_t stream,
                              char **error);
int kvattn_runtime_use_own_stream(kvattn_runtime *runtime, char **error);

/* Allocates the runtime's metadata slots (a ring of 8 page-locked staging and
 * device buffers) for launches with up to `bytes` bytes of host-given
 * metadata (each metadata parameter rounded up to 16 bytes; a launch with
 * tensor maps also needs 128 bytes per map, at a 128-byte aligned offset),
 * so that no later launch allocates: a plan step's call (docs/runtime.md).
 * More than 2^32 bytes (a launch's metadata limit) is refused. */
int kvattn_runtime_reserve_metadata(kvattn_runtime *runtime, size_t bytes,
                                    char **error);

int kvattn_device_alloc(kvattn_runtime *runtime, size_t bytes,
                        uint64_t *device_ptr, char **error);
int kvattn_device_free(kvattn_runtime *runtime, uint64_t device_ptr,
                       char **error);
int kvattn_copy_to_device(kvattn_runtime *runtime, uint64_t dst,
                          const void *src, size_t bytes, char **error);
int kvattn_copy_to_host(kvattn_runtime *runtime, void *dst, uint64_t src,
                        size_t bytes, char **error);
int kvattn_synchronize(kvattn_runtime *runtime, char **error);

/* The run-time sizes. Paged kernels (a "block_table" parameter) also take
 * num_pages, page_size and max_pages, with S = max_pages * page_size; the
 * others ignore them (zero-initialise the struct). */
typedef struct {
  int64_t B, Hq, Hkv, L, S;
  int64_t num_pages, page_size, max_pages;
  /* Kernels with a batch-to-cache map (a "cache_batch_idx" parameter): the
   * cache rows C of key/value [C, Hkv, S, D]; the others ignore it. With
   * ragged keys ("k_start") key/value are [1, Hkv, S, D], S the packed key
   * rows. */
  int64_t cache_rows;
  /* Shared-prefix (cascade) kernels (a kvattn.cascade: kinds
   * "cascade_prefix" and "cascade_merge", which run with B = 1): the keys
   * P of the shared prefix (prefix_key/prefix_value [1, Hkv, P, D]); 0 when
   * the prefix length is static (the manifest's number). The others ignore
   * it. (Added after cache_rows: zero-initialise the struct.) With a
   * paged prefix (a "prefix_pages" parameter) P is
   * prefix_max_pages * prefix_page_size, or 0 for that. */
  int64_t P;
  /* A cascade's paged prefix (kernels with a "prefix_pages" parameter):
   * its pool prefix_key/prefix_value [prefix_num_pages, prefix_page_size,
   * Hkv, D] and its table prefix_pages [prefix_max_pages] of prefix_len [1]
   * keys; the same pool as the suffixes' takes their numbers. The others
   * ignore them. (Added after P: zero-initialise the struct.) */
  int64_t prefix_num_pages, prefix_page_size, prefix_max_pages;
} kvattn_sizes;

/* A device buffer by parameter name: "query", "key", "value", "mask",
 * "out", "lse"; split-KV kernels (manifest "split_kv" > 1) write and their
 * merge kernel reads the f32 workspaces "out_parts" [N, B, Hq, L, Dv] and
 * "lse_parts" [N, B, Hq, L], which the caller allocates (a ragged batch's:
 * [N, 1, Hq, T, Dv] and [N, 1, Hq, T] at the packed rows, merged by a
 * kernel of kind "merge_varlen"). */
typedef struct {
  const char *name;
  uint64_t device_ptr;
} kvattn_buffer;

/* Run-time metadata on the host by parameter name: "q_offset", "k_offset",
 * "q_pos", "k_pos", "kv_len", "key_valid", "block_table" (row-major
 * [B, max_pages]), "q_start", "k_start", "cache_batch_idx". Validated before
 * the launch. */
typedef struct {
  const char *name;
  const int64_t *values;
  size_t count;
} kvattn_metadata;

/* Launches kernel `kernel_index` of the manifest (the PTX is loaded once per
 * runtime and cached by content). Returns when the launch is queued. A
 * manifest may hold more than one kernel per attention (split-KV: the
 * attention kernel, then a "merge" kernel): launch them in order on the
 * same stream. A launch with host metadata is refused while the stream is
 * being captured (a graph would replay a metadata slot's address). */
int kvattn_launch(kvattn_runtime *runtime, const char *ptx,
                  const char *manifest_json, size_t kernel_index,
                  kvattn_sizes sizes, const kvattn_buffer *buffers,
                  size_t num_buffers, const kvattn_metadata *metadata,
                  size_t num_metadata, char **error);

/* A kernel of a manifest, loaded once, for repeated launches without
 * parsing the manifest or looking the PTX up each time (timing loops,
 * Python). It belongs to the runtime: destroy it before the runtime. */
typedef struct kvattn_kernel kvattn_kernel;

int kvattn_kernel_load(kvattn_runtime *runtime, const char *ptx,
                       const char *manifest_json, size_t kernel_index,
                       kvattn_kernel **kernel, char **error);
/* Validates and launches like kvattn_launch. */
int kvattn_kernel_launch(kvattn_kernel *kernel, kvattn_sizes sizes,
                         const kvattn_buffer *buffers, size_t num_buffers,
                         const kvattn_metadata *metadata, size_t num_metadata,
                         char **error);
void kvattn_kernel_destroy(kvattn_kernel *kernel);

/*===----------------------------------------------------------------------===*
 * Serving: plan once, run every step (docs/runtime.md, "Plan and run")
 *===----------------------------------------------------------------------===*/

typedef struct kvattn_plan kvattn_plan;

/* kvattn_plan_run's stream argument for "the runtime's current stream"
 * (kvattn_runtime_set_stream, else its own). */
#define KVATTN_CURRENT_STREAM UINT64_MAX

/* Compiles every kernel of `ir` (each kvattn.attention, its split merge,
 * each kvattn.append) with device validation, or reads them from the
 * kernel cache, loads the module on `runtime`, allocates the plan's status
 * word and split-KV workspaces for sizes up to `max_sizes` (a zero field:
 * unbounded, allowed only where no workspace depends on it; negative fields,
 * a zero a workspace depends on and workspaces whose size overflows are
 * refused by name) and clears the status word. One plan has one buffer
 * namespace: IR with more than one public function or more than one
 * attention is refused (plan each separately). Refused while the runtime's
 * current stream is being captured (the clearing fills would be recorded).
 * `options` NULL: the defaults, with chip and num_sms from the device; a NULL
 * chip in given options is the device's chip too. `kind`: KVATTN_IMAGE_PTX for
 * a GPU, KVATTN_IMAGE_DEVICE_IR for the emulated GPU. The plan belongs to the
 * runtime: destroy it first. */
int kvattn_plan_create(kvattn_runtime *runtime, const char *ir,
                       const kvattn_compile_options *options,
                       kvattn_image_kind kind, kvattn_sizes max_sizes,
                       kvattn_plan **plan, char **error);
/* An attention described instead of written as IR (docs/runtime.md, "A plan
 * from a description"): kvattn_plan_create_from_desc builds the IR with the
 * dialect's builders and plans it as kvattn_plan_create plans IR text.
 * Same struct_size rule as kvattn_compile_options
 * (kvattn_attention_desc_init writes the defaults). */
typedef struct {
  size_t struct_size;
  /* Element type of query, key, value and out: KVATTN_F32, KVATTN_F16 or
   * KVATTN_BF16 (default). */
  kvattn_dtype dtype;
  /* Sizes, -1 (default) for a dynamic one: B; L, the query rows per
   * sequence (varlen: T, the packed rows); S, the capacity of a plain cache
   * (not used when paged: max_pages * page_size). */
  int64_t batch, query_len, key_len;
  /* Static: Hq, Hkv (Hq % Hkv == 0), D and Dv in [1, 256] (value_head_dim
   * 0: D). */
  int64_t num_query_heads, num_kv_heads, head_dim, value_head_dim;
  int32_t causal;   /* 0/1 */
  int32_t with_lse; /* 0/1: the second result lse [B, Hq, L] */
  /* A sliding window of W keys up to the query (needs causal or
   * window_right); 0: none. */
  int64_t window;
  double softcap; /* logit soft-capping c > 0; 0: none */
  double scale;   /* softmax scale > 0; 0: 1/sqrt(D) */
  /* 0/1: key/value are pages [num_pages, page_size, Hkv, D] read through
   * block_table [B, max_pages] (num_pages, max_pages: -1 dynamic). */
  int32_t paged;
  /* 0/1: a ragged batch (q_start [B + 1], query/out [1, Hq, T, D]). */
  int32_t varlen;
  int64_t page_size, num_pages, max_pages;
  /* 0/1: the step first writes its L new tokens (update_k, update_v) into
   * the caches at q_offset (kvattn.append, K then V), as
   * examples/decode-step.mlir; the plan's buffers are then "update_k",
   * "update_v", "key", "value" (the caches, written in place), ...; with
   * latent, "update_k" [B, Hkv, L, D] (the new tokens' whole latent rows)
   * and "key" alone. */
  int32_t append;
  int32_t reserved0; /* zero */
  /* Fields added later (the struct_size rule gives older callers the
   * defaults). A two-sided window: the keys at most window_right positions
   * after the query (kp - qp <= window_right; not with causal), with
   * `window` the keys before it (FlashAttention's window_size = (window - 1,
   * window_right)); -1 (default): no bound after the query. */
  int64_t window_right;
  /* 0/1: attention sinks, the plan's buffer "sinks" (f32 [Hq]): a logit per
   * query head in every row's softmax denominator, with no value (gpt-oss);
   * a row without allowed keys gets out = 0, lse = the sink. */
  int32_t sinks;
  /* 0/1: ALiBi, the plan's buffer "alibi_slopes" (f32 [Hq]):
   * -alibi_slopes[h] * |qp - kp| added to each score, from the positions
   * (FlashAttention's alibi_slopes). */
  int32_t alibi;
  /* 0/1: speculative-decoding trees (needs varlen), the buffer
   * "tree_parents" (i32 [T]): per packed row its parent's local row in its
   * sequence's draft-token tree, -1 a root (docs/semantics.md, "Tree
   * masks"). The IR runs on the CPU target; GPU plans refuse it by name. */
  int32_t tree;
  /* 0/1: ragged keys (FlashAttention's cu_seqlens_k): key/value are one
   * packed buffer [1, Hkv, key_len, D] and the plan's buffer "k_start"
   * (i32 [B + 1]) gives each sequence's first row; kv_len[b] <= k_start[b+1]
   * - k_start[b]. Not with paged, append or cache_batch_idx. */
  int32_t ragged_keys;
  /* 0/1: a batch-to-cache map (FlashAttention's cache_batch_idx):
   * key/value are [cache_rows, Hkv, key_len, D] (cache_rows -1: dynamic)
   * and the plan's buffer "cache_batch_idx" (i32 [B]) names the row each
   * batch reads. Not with paged, append or ragged_keys. */
  int32_t cache_batch_idx;
  int64_t cache_rows;
  /* An FP8 KV cache (docs/semantics.md, "FP8 KV caches"): -1 (default):
   * key and value in `dtype`; KVATTN_F8E4M3FN or KVATTN_F8E5M2: key and
   * value hold FP8 codes (one byte each) read as code * scale, with the
   * plan's buffers "k_scale" and "v_scale" (f32, after the others) of
   * granularity kv_scales: 0 per tensor [1], 1 per KV head [Hkv], 2 per
   * token and head (the cache's shape without D: [B, Hkv, S], paged
   * [num_pages, page_size, Hkv]). Needs dtype f16, bf16 or f32. With
   * append, update_k and update_v (in dtype) are quantised into the caches
   * with k_scale and v_scale (RN_satfinite(x / scale), the written row's
   * scale). */
  int32_t kv_dtype;
  int32_t kv_scales;
  /* 0/1: shared-prefix (cascade) attention (kvattn.cascade, needs varlen;
   * docs/semantics.md): the B sequences share a prefix of prefix_len keys
   * (-1, default: dynamic, the run's kvattn_sizes.P), the plan's buffers
   * "prefix_key" [1, Hkv, P, D] and "prefix_value" [1, Hkv, P, Dv] beside
   * the per-sequence suffixes key/value [B, Hkv, key_len, D]; q_offset
   * counts from the prefix's end (prefix_paged: a paged prefix; paged:
   * paged suffixes). Not with append, a window,
   * sinks, alibi, tree, ragged_keys, cache_batch_idx or kv_dtype. */
  int32_t cascade;
  /* 0/1: the latent form (DeepSeek MLA, docs/semantics.md "Latent KV"): no
   * value buffer; V is the first value_head_dim columns (0: all) of the key
   * cache, whose head dim may reach 576 (512 latent + 64 rotary). The IR
   * runs on the CPU and GPU targets (docs/gpu-lowering.md, "The latent
   * form"). With append one K append writes the new tokens' rows
   * ("update_k" [B, Hkv, L, D]; no "update_v") into the latent cache before
   * the attention reads it. With kv_dtype the latent cache is FP8 and the
   * plan's buffer "k_scale" alone dequantises it (K and the V inside it; no
   * "v_scale"); with append the new rows are quantised with it. */
  int32_t latent;
  int64_t prefix_len; /* with cascade */
  /* RoPE (docs/semantics.md, "Rotary embedding"): rotary_dim > 0 (even, at
   * most head_dim) rotates the query at its positions, and with append the
   * new keys at theirs, with rope_theta (a finite value above 1; default
   * 10000) in GPT-NeoX halves or, rope_interleaved (0/1), GPT-J pairs;
   * 0 (default): none. rope_record (0/1, needs rotary_dim and a plain
   * cache): the plan's buffer "k_rope_pos" (i32 [B, key_len]), the
   * positions the cached keys were rotated at, checked on the device
   * against the keys' positions (status rule 28); with append the K append
   * writes the new tokens' entries in place. Not with cascade, tree or
   * latent. */
  int64_t rotary_dim;
  double rope_theta;
  int32_t rope_interleaved;
  int32_t rope_record;
  /* RoPE from tables (FlashAttention's rotary_cos / rotary_sin; needs
   * rotary_dim): rotary_rows P > 0 takes each rotated row's cosines and
   * sines at row `position` of the plan's buffers "rotary_cos" and
   * "rotary_sin" ([P, rotary_dim / 2] of rotary_dtype, row-major, after the
   * others) instead of rope_theta's formula (any frequency scaling: linear,
   * NTK, YaRN, Llama 3). A rotated row at a position >= P is refused on the
   * device ("rotary_cos: position p of batch b, row i is outside the
   * table's P rows", status rules 29 and 30). 0 (default): the formula.
   * rotary_dtype: KVATTN_F32 (default), KVATTN_F16 or KVATTN_BF16. (Added
   * after rope_record: kvattn_attention_desc_init sets them.) */
  int64_t rotary_rows;
  kvattn_dtype rotary_dtype;
  /* 0/1: a paged shared prefix (needs cascade; docs/semantics.md, "Paged
   * KV"): "prefix_key"/"prefix_value" are a page pool [prefix_num_pages,
   * prefix_page_size, Hkv, D|Dv] (the suffixes' pool may be bound to them:
   * a prefix cached once in the engine's pages), read through the plan's
   * metadata "prefix_pages" (i32 [prefix_max_pages], one sequence's block
   * table) of "prefix_len" (i32 [1]) keys; prefix_len above stays -1.
   * prefix_page_size > 0; prefix_num_pages, prefix_max_pages: -1 dynamic
   * (the run's kvattn_sizes). With paged the suffixes are pages too.
   * (Added after rotary_dtype: kvattn_attention_desc_init sets them.) */
  int32_t prefix_paged;
  int64_t prefix_page_size, prefix_num_pages, prefix_max_pages;
} kvattn_attention_desc;

/* The defaults (bf16, every size dynamic, nothing optional), struct_size
 * set. */
void kvattn_attention_desc_init(kvattn_attention_desc *desc);
/* The IR kvattn_plan_create_from_desc plans (free with kvattn_free): one
 * function @attention(query, [prefix_key, prefix_value], key, value,
 * [update_k, update_v], [q_start], q_offset, kv_len,
 * [prefix_pages, prefix_len], [block_table], [sinks], [alibi_slopes],
 * [tree_parents],
 * [k_start], [cache_batch_idx], [k_scale, v_scale], [k_rope_pos])
 * returning out, [lse], [key, value], [k_rope_pos (with append)]; latent:
 * no value, update_v or v_scale, and key alone among the results.
 * Errors name the field: "attention description: query heads Hq = 8 must
 * be a multiple of kv heads Hkv = 3". */
int kvattn_attention_desc_to_ir(const kvattn_attention_desc *desc, char **ir,
                                char **error);
/* kvattn_plan_create for the IR of `desc`. */
int kvattn_plan_create_from_desc(kvattn_runtime *runtime,
                                 const kvattn_attention_desc *desc,
                                 const kvattn_compile_options *options,
                                 kvattn_image_kind kind, kvattn_sizes max_sizes,
                                 kvattn_plan **plan, char **error);
/* The launch manifest of the plan's kernels (JSON, docs/kernel-abi.md; free
 * with kvattn_free): the parameters, their element types and shapes. */
int kvattn_plan_manifest(const kvattn_plan *plan, char **manifest_json,
                         char **error);
/* The buffer name kvattn_plan_run binds parameter `param` of kernel
 * `kernel` (its index in the manifest's "kernels") to (free with
 * kvattn_free): the parameter's own name, except for the appends of a
 * decode step, whose `update` and `cache` are "update_k" and "key" (the K
 * append) or "update_v" and "value" (the V append). A `param` the kernel
 * does not have is an error naming the kernel's buffers. */
int kvattn_plan_buffer_name(const kvattn_plan *plan, size_t kernel,
                            const char *param, char **name, char **error);
/* Device memory the plan owns (status word and workspaces), in bytes. */
int kvattn_plan_workspace_bytes(const kvattn_plan *plan, size_t *bytes,
                                char **error);
/* One step on `stream` (a CUstream, or KVATTN_CURRENT_STREAM): `buffers`
 * names a device pointer for every tensor ("query", "key", "value", "out",
 * "update_k", ...) AND every metadata parameter ("q_offset", "kv_len",
 * "block_table", "pos", ...; the manifest's element types, e.g. int32).
 * Queues the validation kernels, then the kernels; allocates nothing,
 * copies nothing, never synchronises, so it can be captured in a CUDA
 * graph. Metadata values are checked on the device: read the outcome with
 * kvattn_plan_status. */
int kvattn_plan_run(kvattn_plan *plan, kvattn_sizes sizes,
                    const kvattn_buffer *buffers, size_t num_buffers,
                    uint64_t stream, char **error);
/* The convenience path: metadata on the host, validated on the host before
 * anything is queued (kvattn_launch's messages) and copied asynchronously
 * through the runtime's metadata ring. Not capturable: refused while
 * `stream` is being captured. A buffer or metadata name the plan does not
 * have (e.g. "kv_lenn"), or one name given both as a buffer and as
 * metadata, is refused. */
int kvattn_plan_run_host_metadata(kvattn_plan *plan, kvattn_sizes sizes,
                                  const kvattn_buffer *buffers,
                                  size_t num_buffers,
                                  const kvattn_metadata *metadata,
                                  size_t num_metadata, uint64_t stream,
                                  char **error);
/* Reads the plan's status word (this waits for the runtime's current
 * stream): 0 when no run recorded a violation; else 1 and *error is the
 * message the host validation gives for the first violation, e.g.
 * "launch of 'decode_kvattn_0': kv_len[1] = 301 is outside [0, S = 128]
 * (batch 1)". While a violation is recorded every kernel of the plan
 * computes and writes nothing. */
int kvattn_plan_status(kvattn_plan *plan, char **error);
/* Clears the status word (queued on the current stream). */
int kvattn_plan_clear_status(kvattn_plan *plan, char **error);
void kvattn_plan_destroy(kvattn_plan *plan);

/* CUDA graphs on the runtime's current stream (not the legacy stream 0):
 * begin capturing, queue plan runs (or other capturable work), end the
 * capture (instantiates the graph), replay it any number of times. A graph
 * replays the same device pointers: rewrite the metadata buffers between
 * replays (e.g. with a captured device copy, or a kernel of the engine).
 * Host metadata is never captured: kvattn_launch / kvattn_kernel_launch with
 * metadata, kvattn_plan_run_host_metadata and kvattn_plan_create are
 * refused while their stream is being captured. */
typedef struct kvattn_graph kvattn_graph;
int kvattn_graph_begin_capture(kvattn_runtime *runtime, char **error);
int kvattn_graph_end_capture(kvattn_runtime *runtime, kvattn_graph **graph,
                             char **error);
int kvattn_graph_launch(kvattn_graph *graph, char **error);
void kvattn_graph_destroy(kvattn_graph *graph);

/* The driver calls the runtime made since it was created or since the last
 * reset: what a serving step costs on the host. */
typedef struct {
  int64_t launches;           /* cuLaunchKernel */
  int64_t graph_launches;     /* cuGraphLaunch */
  int64_t synchronizations;   /* stream and event waits */
  int64_t allocations;        /* device and page-locked host allocations */
  int64_t synchronous_copies; /* cuMemcpyHtoD / DtoH */
  int64_t async_copies;       /* queued copies and fills */
} kvattn_call_counts;
int kvattn_runtime_call_counts(kvattn_runtime *runtime,
                               kvattn_call_counts *counts, int reset,
                               char **error);

/*===----------------------------------------------------------------------===*
 * Cache identity (docs/runtime.md, "Cache identity")
 *===----------------------------------------------------------------------===*/

/* One sequence's cached prefix (tokens 0 .. length-1) in a K and a V
 * buffer. Contiguous caches (page_size 0) are [batch_size, Hkv, capacity, D]
 * (V: Dv); paged caches are [num_pages, page_size, Hkv, D] pages with the
 * sequence's block-table row (max_pages entries). The struct grows at its
 * end only (struct_size, as kvattn_compile_options). */
typedef struct {
  size_t struct_size;
  const char *dtype; /* "f32", "f16" or "bf16" */
  int64_t num_kv_heads, head_dim, value_head_dim;
  int64_t length; /* tokens in the prefix */
  int64_t batch;  /* the sequence (contiguous: its row; paged: named in
                     errors) */
  int64_t batch_size, capacity;            /* contiguous caches */
  int64_t page_size, num_pages, max_pages; /* paged caches */
  const int64_t *block_table_row;          /* paged: max_pages entries */
  /* The logical position of each token (length entries), or NULL: token t
   * is at position t. */
  const int64_t *positions;
  /* The RoPE state the cached K was written in (NULL or "": none). */
  const char *rope;
  /* The buffers' sizes in bytes: every row read is checked against them. */
  uint64_t key_bytes, value_bytes;
} kvattn_cache_prefix;

/* Zeroes the struct and sets struct_size. */
void kvattn_cache_prefix_init(kvattn_cache_prefix *prefix);

/* The prefix's fingerprint: a SHA-256 over its dtype, head geometry, RoPE
 * state, and per token its position and K/V rows in logical order, so it
 * does not depend on the layout or on which pages hold the rows. `key` and
 * `value` are host memory. */
int kvattn_cache_fingerprint(const kvattn_cache_prefix *prefix, const void *key,
                             const void *value, uint8_t digest[32],
                             char **error);

/* The same over device buffers: waits for the runtime's current stream,
 * then copies the prefix's rows (a page, or a run of rows of a head, per
 * copy) to the host. */
int kvattn_runtime_cache_fingerprint(kvattn_runtime *runtime,
                                     const kvattn_cache_prefix *prefix,
                                     uint64_t key, uint64_t value,
                                     uint8_t digest[32], char **error);

/* 0 when `actual` equals `expected`; else 1 with an error naming the
 * sequence, its length, dtype, RoPE state and both digests ("cache prefix
 * mismatch: ..."). */
int kvattn_cache_check_fingerprint(const kvattn_cache_prefix *prefix,
                                   const uint8_t actual[32],
                                   const uint8_t expected[32], char **error);

#ifdef __cplusplus
}
#endif

#endif /* KVATTN_C_KVATTN_H */
