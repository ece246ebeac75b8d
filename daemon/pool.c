/*
 * pool.c: freed blocks kept for reuse (pool.h).
 *
 * Sizes are rounded up to a power of two from 256 to 2,048 bytes; larger
 * ones go to calloc and free directly. Each thread has its own lists, so
 * nothing is locked; a block freed on another thread than the one that
 * made it joins that thread's list.
 */
#include "pool.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define POOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_OFF 1
#endif
#endif

#ifdef POOL_OFF

void *
pool_zalloc(size_t size)
{
    return calloc(1, size);
}

void *
pool_alloc(size_t size)
{
    return malloc(size);
}

void
pool_free(void *p, size_t size)
{
    (void)size;
    free(p);
}

void
pool_drain(void)
{
}

#else

#define POOL_MIN_SHIFT 8 /* 256 bytes */
#define POOL_CLASSES   4 /* 256, 512, 1,024, 2,048 */

struct pool_block {
    struct pool_block *next;
};

struct pool_list {
    struct pool_block *head;
    unsigned n;
};

static _Thread_local struct pool_list lists[POOL_CLASSES];

/* The class of size, or -1 when it is larger than the largest. */
static int
class_of(size_t size)
{
    int c = 0;

    while (c < POOL_CLASSES && ((size_t)1 << (POOL_MIN_SHIFT + c)) < size)
        c++;
    return c < POOL_CLASSES ? c : -1;
}

/* A kept block of class c, or NULL when none is kept. */
static struct pool_block *
take(int c)
{
    struct pool_block *b = lists[c].head;

    if (b != NULL) {
        lists[c].head = b->next;
        lists[c].n--;
    }
    return b;
}

void *
pool_zalloc(size_t size)
{
    int c = class_of(size);
    struct pool_block *b;

    if (c < 0)
        return calloc(1, size);
    if ((b = take(c)) == NULL)
        return calloc(1, (size_t)1 << (POOL_MIN_SHIFT + c));
    memset(b, 0, size);
    return b;
}

void *
pool_alloc(size_t size)
{
    int c = class_of(size);
    struct pool_block *b;

    if (c < 0)
        return malloc(size);
    if ((b = take(c)) == NULL)
        return malloc((size_t)1 << (POOL_MIN_SHIFT + c));
    return b;
}

void
pool_free(void *p, size_t size)
{
    int c = class_of(size);
    struct pool_block *b = p;

    if (p == NULL)
        return;
    if (c < 0 || lists[c].n >= POOL_KEEP) {
        free(p);
        return;
    }
    b->next = lists[c].head;
    lists[c].head = b;
    lists[c].n++;
}

void
pool_drain(void)
{
    struct pool_block *b;
    int c;

    for (c = 0; c < POOL_CLASSES; c++) {
        while ((b = lists[c].head) != NULL) {
            lists[c].head = b->next;
            free(b);
        }
        lists[c].n = 0;
    }
}

#endif
