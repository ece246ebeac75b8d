/*
 * op.h: the ops of PROTOCOL section 3 and the protocol version, as plain
 * constants (envelope.h parses and names them).
 */
#ifndef RECEIPTD_PROTO_OP_H
#define RECEIPTD_PROTO_OP_H

#define PROTO_VERSION 1

enum proto_op {
    PROTO_OP_HELLO,
    PROTO_OP_PING,
    PROTO_OP_RECEIPT,
    PROTO_OP_RECEIPTS,
    PROTO_OP_PLAN,
    PROTO_OP_RETENTION,
    PROTO_OP_READBACK,
    PROTO_OP_QUERY,
    PROTO_OP_RELAY,
    PROTO_OP_COUNT
};

#endif
