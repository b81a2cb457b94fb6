/*===- KVAttn.h - the kvattn C API ------------------------------*- C -*-===//
 *
 * Compile kvattn IR to PTX and a launch manifest; load and launch through
 * the CUDA driver (opened at run time: no link dependency on libcuda).
 *
 * Every function that can fail returns 0 on success and non-zero on
 * failure, with a message in *error (free it with kvattn_free; error may be
 * NULL when the caller does not want the message).
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

typedef struct kvattn_runtime kvattn_runtime;

/* Opens the driver (libcuda.so.1 or $KVATTN_LIBCUDA), device 0, its primary
 * context and a stream. */
int kvattn_runtime_create(kvattn_runtime **runtime, char **error);
void kvattn_runtime_destroy(kvattn_runtime *runtime);

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
 * metadata (each metadata parameter rounded up to 16 bytes), so that no later
 * launch allocates: a plan step's call (docs/runtime.md). */
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
} kvattn_sizes;

/* A device buffer by parameter name: "query", "key", "value", "mask",
 * "out", "lse"; split-KV kernels (manifest "split_kv" > 1) write and their
 * merge kernel reads the f32 workspaces "out_parts" [N, B, Hq, L, Dv] and
 * "lse_parts" [N, B, Hq, L], which the caller allocates. */
typedef struct {
  const char *name;
  uint64_t device_ptr;
} kvattn_buffer;

/* Run-time metadata on the host by parameter name: "q_offset", "k_offset",
 * "q_pos", "k_pos", "kv_len", "key_valid", "block_table" (row-major
 * [B, max_pages]). Validated before the launch. */
typedef struct {
  const char *name;
  const int64_t *values;
  size_t count;
} kvattn_metadata;

/* Launches kernel `kernel_index` of the manifest (the PTX is loaded once per
 * runtime and cached by content). Returns when the launch is queued. A
 * manifest may hold more than one kernel per attention (split-KV: the
 * attention kernel, then a "merge" kernel): launch them in order on the
 * same stream. */
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

#ifdef __cplusplus
}
#endif

#endif /* KVATTN_C_KVATTN_H */
