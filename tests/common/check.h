/* The one way a test states what must hold.  CHECK(cond, fmt, ...) and
 * CHECK_RC(rc, want, fmt, ...) count every check and print every failure
 * as a TAP line naming the rank (once the test set one), the file and
 * line, the printf-style message and MKX's last error:
 *   not ok 7 - [rank 1/2] test_x.c:42: what failed (seed 123)
 *   #   last MKX error: ...
 * Passes print "ok N - message" only where a test asks (check_show_passes).
 * ci/gpu-check counts the lines starting with "ok" and "not ok"; make
 * check reads only the exit status (0 pass, 1 fail, CHECK_SKIP skip).
 *
 * Both are expressions worth the outcome (1 passed, 0 failed), so a test
 * can stop at a failure that makes the rest meaningless.  The condition is
 * evaluated once and first; the message's arguments only when its line is
 * printed.  Counting is safe from several threads. */
#ifndef MKX_TESTS_CHECK_H
#define MKX_TESTS_CHECK_H

/* automake's exit status for a skipped test */
#define CHECK_SKIP 77

#define CHECK(cond, ...)                                                       \
  (check_at(__FILE__, __LINE__, (cond) ? 1 : 0) ? check_say(__VA_ARGS__) : 1)

/* An MKX return code equals `want`; a failure also names both codes. */
#define CHECK_RC(rc, want, ...)                                                \
  (check_rc_at(__FILE__, __LINE__, (rc), (want)) ? check_say(__VA_ARGS__) : 1)

#if defined(__GNUC__)
#define CHECK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CHECK_PRINTF(f, a)
#endif

/* Every line names this process as rank `rank` of `size` from now on. */
void check_set_rank(int rank, int size);
/* Print the passes too, not only the failures. */
void check_show_passes(int on);
/* Appended to every failure: what a rerun needs, e.g. the seed. */
void check_set_note(const char *fmt, ...) CHECK_PRINTF(1, 2);
/* Checks so far in this process, and how many of them failed. */
int check_count(void);
int check_failed(void);
/* The end of a single-process test: a PASS or FAIL line naming it, and
 * its exit status (1 if any check failed). */
int check_done(const char *name);

/* For the macros: count one check; nonzero if its line is to be printed
 * by check_say, which returns the outcome. */
int check_at(const char *file, int line, int ok);
int check_rc_at(const char *file, int line, int rc, int want);
int check_say(const char *fmt, ...) CHECK_PRINTF(1, 2);

#endif
