/*
 * testcerts.h: certificates for the TLS tests, made at test time by
 * Debian's openssl in a fresh directory under TEST_BINARY_DIR. NAME.pem
 * and NAME.key for each of: ca and ca2 (two CAs); server (localhost and
 * 127.0.0.1, from ca), expired (the same names, expired yesterday),
 * wrongname (elsewhere.example), server2 (localhost and 127.0.0.1, from
 * ca2); client and rogue (CN node-17, from ca and ca2). Valid two days.
 */
#ifndef RECEIPTD_TESTS_TESTCERTS_H
#define RECEIPTD_TESTS_TESTCERTS_H

#include <stddef.h>

#include <check.h>

/* Makes them; the directory's path goes into dir (len bytes). Returns 0,
 * or -1 with dir empty when openssl is missing or failed (a test then
 * skips). */
int testcerts_make(char *dir, size_t len);

/* Removes the directory and everything in it; dir "" is a no-op. */
void testcerts_remove(const char *dir);

/*
 * A TLS test binary's main() (name for its message): makes the certificates
 * into dir (empty when they cannot be made, and the tests then skip), runs
 * suite s (taken), removes them. Returns skip_status() (skip.h) for main() to
 * return.
 */
int testcerts_run(const char *name, Suite *s, char *dir, size_t len);

#endif
