/*
 * relpack.h: valid requests for the reliability tests, packed with
 * msgpack-c: a schema-3 receipt in map form and its request envelope.
 *
 * Thread: pure functions.
 */
#ifndef RECEIPTD_TESTS_RELPACK_H
#define RECEIPTD_TESTS_RELPACK_H

#include <stdint.h>

#include <msgpack.h>

/*
 * Packs a valid schema-3 receipt map whose counters derive from n. With
 * extra, two unknown keys are added ("flavour" at the top and
 * "counters.new_thing"), so decoding allocates r->extra. Returns 0 or -1.
 */
int relpack_receipt(msgpack_packer *pk, uint64_t n, int extra);

/*
 * Appends one whole frame (length prefix included) to sb: a `receipt`
 * request with id and, when has_seq, seq, whose body is relpack_receipt(n).
 * Returns 0 or -1.
 */
int relpack_receipt_frame(msgpack_sbuffer *sb, uint64_t id, int has_seq,
                          uint64_t seq, uint64_t n, int extra);

/* Appends a `hello` frame naming source (NUL-terminated, borrowed). */
int relpack_hello_frame(msgpack_sbuffer *sb, uint64_t id, const char *source);

#endif
