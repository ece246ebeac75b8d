/*
 * store_migrations.h: the SQL files of migrations/, embedded into the binary
 * at build time by embed_migrations.cmake (the generated store_migrations.c
 * lives in the build tree). Entry i has version i + 1.
 */
#ifndef RECEIPTD_DAEMON_STORE_MIGRATIONS_H
#define RECEIPTD_DAEMON_STORE_MIGRATIONS_H

struct store_migration {
    int version;      /* the file's number: 1, 2, ... */
    const char *name; /* "0001_create_receipts.sql" */
    const char *sql;  /* the whole file, NUL-terminated */
};

extern const struct store_migration store_migrations[];
extern const int store_migrations_count;

#endif
