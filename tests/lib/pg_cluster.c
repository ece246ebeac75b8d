/*
 * pg_cluster.c: see pg_cluster.h. The script's path comes from the build
 * (PG_CLUSTER_SCRIPT).
 */
#include "pg_cluster.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <libpq-fe.h>

#include "e2e_util.h"
#include "skip.h"

void
pg_cluster_start(const char *dir, char *conninfo, size_t cap)
{
    char cmd[1024];
    FILE *f;
    size_t n;
    int st;

    mkdir(dir, 0700);
    snprintf(cmd, sizeof(cmd), "'%s' start '%s'", PG_CLUSTER_SCRIPT, dir);
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    if (fgets(conninfo, (int)cap, f) == NULL)
        conninfo[0] = '\0';
    st = pclose(f);
    if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP_CODE) {
        ck_assert_msg(getenv("RECEIPTD_CI") == NULL,
                      "PostgreSQL 15 is missing, and CI installs it "
                      "(scripts/install-deps.sh: postgresql-15)");
        skip_now("PostgreSQL 15 (Debian's postgresql-15) is not installed");
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "pg-cluster.sh start %s failed (status %d)", dir, st);
    n = strlen(conninfo);
    while (n > 0 && conninfo[n - 1] == '\n')
        conninfo[--n] = '\0';
    ck_assert_uint_gt(n, 0);
}

int
pg_cluster_stop(const char *dir, const char *mode)
{
    char cmd[1024];
    int st;

    snprintf(cmd, sizeof(cmd), "'%s' stop '%s' %s", PG_CLUSTER_SCRIPT, dir,
             mode);
    st = system(cmd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

void
pg_cluster_database(const char *conninfo, const char *name, char *out,
                    size_t cap)
{
    char sql[256];
    PGconn *pc = PQconnectdb(conninfo);
    PGresult *r;

    ck_assert_msg(PQstatus(pc) == CONNECTION_OK, "%s", PQerrorMessage(pc));
    PQclear(PQexec(pc, "SET client_min_messages = warning"));
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", name);
    r = PQexec(pc, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s",
                  PQerrorMessage(pc));
    PQclear(r);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
    r = PQexec(pc, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s",
                  PQerrorMessage(pc));
    PQclear(r);
    PQfinish(pc);
    snprintf(out, cap, "%s dbname=%s", conninfo, name);
}

void
pg_scratch_up(struct pg_scratch *s, const char *prefix)
{
    const char *tmp = TEST_BINARY_DIR;

    if (strlen(tmp) > 60)
        tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(s->base, sizeof(s->base), "%s/%s-XXXXXX", tmp, prefix);
    ck_assert_ptr_nonnull(mkdtemp(s->base));
    snprintf(s->dir, sizeof(s->dir), "%s/pg", s->base);
    s->conninfo[0] = '\0';
    pg_cluster_start(s->dir, s->conninfo, sizeof(s->conninfo));
}

void
pg_scratch_down(struct pg_scratch *s)
{
    if (s->conninfo[0] != '\0')
        pg_cluster_stop(s->dir, "fast");
    e2e_rmtree(s->base);
}
