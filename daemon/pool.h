/*
 * pool.h: freed blocks kept for reuse by the thread that freed them.
 *
 * A frame costs a few blocks that live a few milliseconds (its writer job,
 * the job's context, its decoded receipt, its reply's slot in the
 * connection's order). glibc's calloc never takes a
 * block from its per-thread cache, and 512 frames in flight overflow that
 * cache anyway, so each of those blocks took malloc's slow path twice: a
 * single receipt spent about a fifth of the loop thread's instructions in
 * the allocator. A pool keeps, per thread, up to POOL_KEEP freed blocks of
 * each of a few sizes, and hands them out zeroed.
 *
 * Blocks come from malloc, so free() takes any of them; pool_free(p, size)
 * takes only a block that pool_zalloc(size) gave, with the same size.
 * Under AddressSanitizer the pool is plain calloc and free, so that every
 * use after free is still seen.
 */
#ifndef RECEIPTD_DAEMON_POOL_H
#define RECEIPTD_DAEMON_POOL_H

#include <stddef.h>

/* Freed blocks kept per size and thread. A frame in flight holds two
 * blocks of 1 KiB (its writer job and the job's context), so 512 kept
 * sent a third of those to calloc under the bench's 512 single receipts
 * in flight (callgrind: the loop 10% fewer instructions a receipt with
 * this, the reply slots and the write requests pooled; docs/ingest.md).
 * A single receipt's frame buffer (pool_alloc) is a third block of that
 * class: 1,536 of them for 512 frames. At most 7.5 MiB a thread. */
#define POOL_KEEP 2048

/* A zeroed block of at least size bytes, or NULL. */
void *pool_zalloc(size_t size);
/* The same, not zeroed: for a buffer about to be filled. */
void *pool_alloc(size_t size);
/* Gives p (from pool_zalloc(size), or NULL) back. */
void pool_free(void *p, size_t size);
/* Frees every block this thread keeps: a thread that used the pool calls
 * it before it ends. */
void pool_drain(void);

#endif
