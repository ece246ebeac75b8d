/*
 * dispatch_plan.h: the ops plan, retention and readback (PROTOCOL sections
 * 3, 5 to 7).
 *
 * plan and retention are writes: the body is decoded and validated on the
 * loop thread (pure proto/ code), then handed to the writer as a job whose
 * own apply (writer.h) runs on the writer thread inside the job's
 * savepoint, where the stored plan is read, compared or resolved against,
 * and the result recorded; its done sends the reply, only after the
 * commit. readback reads
 * the store on a libuv threadpool thread with a read-only connection from
 * the query pool, never on the loop.
 */
#ifndef RECEIPTD_DAEMON_DISPATCH_PLAN_H
#define RECEIPTD_DAEMON_DISPATCH_PLAN_H

#include <stdint.h>

#include <msgpack.h>

#include "error.h"

struct conn;
struct conn_slot;
struct envelope;
struct store;
struct store_filter;
struct request;
struct writer_job;

/*
 * Handles a parsed request (dispatch.h) of op plan, retention or readback
 * on the loop thread. The frame is taken: the job or the readback keeps
 * it, because the decoded body borrows its strings.
 */
void dispatch_plan_frame(const struct request *rq);

#endif
