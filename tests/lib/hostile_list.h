/*
 * hostile_list.h: the list of the hostile corpus (tests/hostile/README.txt,
 * written by scripts/gen-hostile.py): each frame file with the outcome
 * PROTOCOL.md requires. Shared by check_hostile.c (proto) and
 * e2e_hostile.c (the real daemon).
 */
#ifndef RECEIPTD_TESTS_HOSTILE_LIST_H
#define RECEIPTD_TESTS_HOSTILE_LIST_H

#include <stddef.h>

#define HOSTILE_MAX   512
#define HOSTILE_CLOSE "close" /* error reply with code, then a close */
#define HOSTILE_REPLY "reply" /* a reply (code "ok" or an error); open */
#define HOSTILE_WAIT  "wait"  /* the frame never completes */

struct hostile_case {
    char file[128];   /* name inside the corpus directory */
    char outcome[16]; /* HOSTILE_CLOSE, HOSTILE_REPLY or HOSTILE_WAIT */
    char code[160];   /* wire code name, "ok", or "-" */
    int check_path;   /* 1 when path must match */
    char path[128];   /* the field path the reply must name */
};

/*
 * Reads dir/README.txt into cases[0..max). Returns the number of cases, or
 * -1 when the list cannot be read.
 */
int hostile_list_load(const char *dir, struct hostile_case *cases, int max);

/* Reads dir/file into a malloc'd buffer (the caller frees it); *len gets
 * its size. NULL on failure. */
char *hostile_list_read(const char *dir, const char *file, size_t *len);

#endif
