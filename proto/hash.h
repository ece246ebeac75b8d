/*
 * hash.h: a fast 32-bit hash of a payload's bytes, to tell a resend of a
 * write (the same bytes under the same (source, seq)) from another write
 * that reuses its seq. Not a cryptographic hash: a collision makes a
 * differing resend look like a duplicate, which is what every resend was
 * before the hash was kept. Never 0, which the store reads as "not known".
 */
#ifndef RECEIPTD_PROTO_HASH_H
#define RECEIPTD_PROTO_HASH_H

#include <stddef.h>
#include <stdint.h>

uint32_t proto_hash32(const void *p, size_t n);

#endif
