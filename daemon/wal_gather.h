/*
 * wal_gather.h: the WAL frames of a commit in one write.
 *
 * SQLite's WAL code writes each frame as two writes, its 24-byte header
 * and then its page: a commit of n frames is 2n pwrite(2) calls (15 a
 * single receipt's commit, 600 for the commit that writes a chunk), and a
 * system call is dear on the machines the daemon runs on. wal_gather
 * takes over the write methods of one WAL file object (the writer
 * connection's, found with SQLITE_FCNTL_JOURNAL_POINTER): writes that
 * follow each other are kept in a buffer and written as one when the
 * commit's last frame is complete (a frame header whose "database size"
 * field is not 0 marks the commit frame, whose page follows), before any
 * read, sync, truncate or size of the file, before a write elsewhere in
 * it, and when the buffer is full. So the file holds every frame of a
 * commit before SQLite publishes the commit in the WAL index (that comes
 * after the frames are written), and an error of the write is the error
 * of the commit's last frame write, where SQLite expects one.
 *
 * Thread: the file's methods may be called from the writer and the syncer
 * at once (a sync beside a commit); a mutex orders them.
 */
#ifndef RECEIPTD_WAL_GATHER_H
#define RECEIPTD_WAL_GATHER_H

#include <sqlite3.h>

/* The buffer; a commit larger than this is written in several parts.
 * Below 128 KiB: SQLite's unix VFS writes at most 0x1ffff bytes in one
 * call and reports a write of a multiple of 128 KiB as a full disk. */
#define WAL_GATHER_BYTES (124 * 1024)

/*
 * Takes over f's methods: 0, or -1 when out of memory (f is left as it
 * was). f's close gives them back and frees what this took. Once per
 * file object.
 */
int wal_gather_install(sqlite3_file *f);

/* Whether f's methods are wal_gather's. */
int wal_gather_installed(const sqlite3_file *f);

#endif
