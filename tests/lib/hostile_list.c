/*
 * hostile_list.c: reading the hostile corpus list (hostile_list.h).
 * Single-threaded test helper.
 */
#include "hostile_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
hostile_list_load(const char *dir, struct hostile_case *cases, int max)
{
    char path[1024], line[1024], code[160];
    struct hostile_case *e;
    char *colon;
    FILE *f;
    int n = 0;

    snprintf(path, sizeof(path), "%s/README.txt", dir);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL && n < max) {
        e = &cases[n];
        memset(e, 0, sizeof(*e));
        if (sscanf(line, "%127s %15s %159s", e->file, e->outcome, code) != 3 ||
            strstr(e->file, ".bin") == NULL)
            continue;
        colon = strchr(code, ':');
        if (colon != NULL) {
            *colon = '\0';
            e->check_path = 1;
            snprintf(e->path, sizeof(e->path), "%.127s", colon + 1);
        }
        snprintf(e->code, sizeof(e->code), "%s", code);
        n++;
    }
    fclose(f);
    return n;
}

char *
hostile_list_read(const char *dir, const char *file, size_t *len)
{
    char path[1024];
    char *buf = NULL;
    long n;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if ((f = fopen(path, "rb")) == NULL)
        return NULL;
    /* The corpus is ours, but a file is still sized before allocating. */
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= (64L << 20) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}
