/*
 * pg_cluster.h: a private PostgreSQL cluster for the tests of the
 * PostgreSQL backend, through scripts/pg-cluster.sh (a Unix socket in the
 * cluster's directory, fsync on; as root the server runs as postgres or
 * nobody).
 */
#ifndef RECEIPTD_TESTS_PG_CLUSTER_H
#define RECEIPTD_TESTS_PG_CLUSTER_H

#include <stddef.h>

/*
 * Starts (initdb on first use) a cluster in dir (made if missing) and
 * writes its libpq conninfo into conninfo (cap bytes). When PostgreSQL 15
 * is not installed the test is skipped (skip_now), unless RECEIPTD_CI is
 * set: CI installs it, so there it is a failure. Any other failure is a
 * failed assertion. Check's context: a test or a fixture.
 */
void pg_cluster_start(const char *dir, char *conninfo, size_t cap);

/* Stops the cluster in dir: mode "fast" or "immediate" (a crash: the
 * server recovers from its WAL at the next start). Returns 0 or -1. */
int pg_cluster_stop(const char *dir, const char *mode);

/*
 * Creates database name (dropped first when it exists) on the cluster of
 * conninfo and writes the conninfo that names it into out (cap bytes).
 */
void pg_cluster_database(const char *conninfo, const char *name, char *out,
                         size_t cap);

/*
 * A cluster for a test binary's whole run, made by an unchecked fixture
 * (Check's parent process, so that it is stopped whatever the tests do):
 * in a new directory "PREFIX-XXXXXX" under the build tree, or under
 * TMPDIR when that path is too long for the server's Unix socket.
 * pg_scratch_down stops it and removes the directory, unless E2E_KEEP is
 * set.
 */
struct pg_scratch {
    char base[150];     /* the directory made for the run */
    char dir[300];      /* the cluster's, inside base */
    char conninfo[512]; /* "" until the cluster has started */
};

void pg_scratch_up(struct pg_scratch *s, const char *prefix);
void pg_scratch_down(struct pg_scratch *s);

#endif
