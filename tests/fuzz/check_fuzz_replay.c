/*
 * check_fuzz_replay.c: replays every checked-in corpus input of every fuzz
 * target through the target's own entry point, compiled into this ordinary
 * Check binary, so the seeds and every crasher ever found run in each
 * build (gcc too, and under the sanitizer build) without libFuzzer.
 *
 * The corpus lists are read in main, before Check forks.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#ifndef FUZZ_CORPUS_DIR
#error "FUZZ_CORPUS_DIR must name tests/fuzz/corpus"
#endif

/* The target compiled in, by corpus directory name (tests/fuzz/CMakeLists.txt
 * builds one replay binary per target). */
#ifndef FUZZ_TARGET
#define FUZZ_TARGET "frame"
#endif
static const char *const targets[] = { FUZZ_TARGET };

static char **files;
static size_t nfiles;

static int
name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
list_corpus(void)
{
    char dir[1024], path[2048];
    struct dirent *de;
    size_t t, cap = 0, first;
    DIR *d;

    for (t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
        snprintf(dir, sizeof(dir), "%s/%s", FUZZ_CORPUS_DIR, targets[t]);
        d = opendir(dir);
        if (d == NULL) {
            fprintf(stderr, "cannot open %s: %s\n", dir, strerror(errno));
            return -1;
        }
        first = nfiles;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            if (nfiles == cap) {
                cap = cap ? cap * 2 : 64;
                files = realloc(files, cap * sizeof(*files));
                if (files == NULL)
                    return -1;
            }
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            files[nfiles] = strdup(path);
            if (files[nfiles] == NULL)
                return -1;
            nfiles++;
        }
        closedir(d);
        qsort(files + first, nfiles - first, sizeof(*files), name_cmp);
    }
    return 0;
}

START_TEST(test_fuzz_replay_corpus)
{
    const char *path = files[_i];
    unsigned char *buf;
    FILE *f;
    long n;

    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    /* One spare byte, so an empty input still has a valid pointer. */
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    ck_assert_int_eq(LLVMFuzzerTestOneInput(buf, (size_t)n), 0);
    free(buf);
}
END_TEST

int
main(void)
{
    Suite *s;
    TCase *tc;
    SRunner *sr;
    int failed;
    size_t i;

    if (list_corpus() != 0)
        return EXIT_FAILURE;
    /* An empty corpus would make this test pass while proving nothing. */
    if (nfiles < 10) {
        fprintf(stderr, "only %zu corpus files under %s\n", nfiles,
                FUZZ_CORPUS_DIR);
        return EXIT_FAILURE;
    }
    s = suite_create("fuzz_replay");
    tc = tcase_create("corpus");
    tcase_add_loop_test(tc, test_fuzz_replay_corpus, 0, (int)nfiles);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (i = 0; i < nfiles; i++)
        free(files[i]);
    free(files);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
