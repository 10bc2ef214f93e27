/* The smallest test harness: CHECK macros that stop the test binary at the first failure
 * (with the file, line and mqstore_last_error()), and RUN, which counts what passed. Each
 * binary ends with cargo's summary line, which scripts/test counts. */
#ifndef MQSTORE_TEST_H
#define MQSTORE_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqstore.h"

static int tests_passed;

#define FAIL(...)                                                                          \
  do {                                                                                     \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                        \
    fprintf(stderr, __VA_ARGS__);                                                          \
    fprintf(stderr, "\n  last error: %s\ntest result: FAILED. %d passed; 1 failed; 0 ignored\n", \
            mqstore_last_error(), tests_passed);                                           \
    exit(1);                                                                               \
  } while (0)

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) FAIL("CHECK failed: %s", #cond);                                          \
  } while (0)

/* A call that must return `expected` (a mqstore_status). */
#define CHECK_STATUS(call, expected)                                                       \
  do {                                                                                     \
    int got_ = (call);                                                                     \
    if (got_ != (int)(expected))                                                           \
      FAIL("%s returned %d (%s), expected %d (%s)", #call, got_, mqstore_status_name(got_), \
           (int)(expected), mqstore_status_name((int)(expected)));                         \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, MQSTORE_OK)

/* Whether the last error's message contains `part`. */
#define CHECK_ERROR_SAYS(part)                                                             \
  do {                                                                                     \
    if (strstr(mqstore_last_error(), (part)) == NULL)                                      \
      FAIL("the last error does not say \"%s\"", (part));                                  \
  } while (0)

#define CHECK_BYTES(data, len, expected, expected_len)                                     \
  do {                                                                                     \
    if ((size_t)(len) != (size_t)(expected_len) ||                                        \
        ((expected_len) > 0 && memcmp((data), (expected), (expected_len)) != 0))           \
      FAIL("%s (%zu bytes) differs from %s (%zu bytes)", #data, (size_t)(len), #expected,  \
           (size_t)(expected_len));                                                        \
  } while (0)

#define RUN(test)                                                                          \
  do {                                                                                     \
    test();                                                                                \
    tests_passed++;                                                                        \
    printf("test %s ... ok\n", #test);                                                     \
    fflush(stdout);                                                                        \
  } while (0)

#define SUMMARY()                                                                          \
  printf("test result: ok. %d passed; 0 failed; 0 ignored\n", tests_passed)

#define S(text) (const uint8_t *)(text), strlen(text)

#endif
