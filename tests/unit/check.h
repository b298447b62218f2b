/* A failing check prints where and why and is counted; main() returns
 * non-zero if any failed. */
#ifndef MKX_TESTS_UNIT_CHECK_H
#define MKX_TESTS_UNIT_CHECK_H

#include <stdio.h>

static int failures, checks;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    checks++;                                                                \
    if (!(cond)) {                                                           \
      failures++;                                                            \
      printf("not ok - %s:%d: ", __FILE__, __LINE__);                        \
      printf(__VA_ARGS__);                                                   \
      printf("\n");                                                          \
    }                                                                        \
  } while (0)

#endif
