/*===- check.h - the C API test programs' checks --------------------------===*
 *
 * What every C test program of test/CAPI shares: CHECK counts a failure
 * and prints it, die() ends the program on an error it cannot go on after,
 * finish() prints the verdict lit checks (`PASS (0 failures)`) and gives
 * the exit status. Header-only: each program is one translation unit.
 *
 *===----------------------------------------------------------------------===*/

#ifndef KVATTN_TEST_CAPI_CHECK_H
#define KVATTN_TEST_CAPI_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("FAIL: " __VA_ARGS__);                                            \
      printf("\n");                                                            \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static void die(const char *what, const char *error) {
  printf("FATAL: %s: %s\n", what, error ? error : "?");
  exit(1);
}

static int finish(void) {
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}

#endif /* KVATTN_TEST_CAPI_CHECK_H */
