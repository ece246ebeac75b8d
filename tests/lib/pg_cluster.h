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

#endif
