/*===- EmuDriver.h - libkvattn_cuda_emu.so's own entry points ---*- C -*-===//
 *
 * Besides the CUDA Driver API entry points the runtime uses, the emulated
 * driver exports these; tools resolve them with dlsym from the library the
 * runtime opened (kvattn/Runtime/EmulatedGpu.h does it).
 *
 *===----------------------------------------------------------------------===*/

#ifndef KVATTN_GPUEMU_EMUDRIVER_H
#define KVATTN_GPUEMU_EMUDRIVER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets an option; 0 on success. Keys: "fault" (drop-barrier:N,
 * wait-group:N, global-offset:N or none; applies to modules loaded later),
 * "fail-on-report", "print-reports" and "count-requests" (the shared and
 * global request counters; "0" or "1"). */
int kvattn_emu_configure(const char *key, const char *value);

/* The counters of the launches since the last call, one "emu: ..." line per
 * launch (docs/gpu-emulator.md). The text lives until the next call. */
const char *kvattn_emu_take_counters(void);

/* The memcheck/racecheck reports since the last call, one per line. */
const char *kvattn_emu_take_reports(void);

/* The message of the most recent error (of any entry point). */
const char *kvattn_emu_last_error(void);

/* Device allocations not yet freed. */
size_t kvattn_emu_live_allocations(void);

#ifdef __cplusplus
}
#endif

#endif /* KVATTN_GPUEMU_EMUDRIVER_H */
