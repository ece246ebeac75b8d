/*
 * fuzz_plan.c: libFuzzer target for the plan, retention and readback
 * decoders (proto/plan.c, proto/retention.c).
 *
 * An input is one msgpack object, checked by mpcheck() exactly as a frame
 * body would be. Every decoder is tried on it directly; when it is an array
 * [plan, retention spec, readback], the three are also decoded together so
 * that resolution, the claimed-resolution comparison and the readback
 * checks run on related inputs. Invariants checked (abort on violation):
 * the canonical encoding of a plan decodes again to the same canonical
 * bytes; resolved values are strictly sorted by value_id and their ranges
 * do not wrap; stored values decode back to what was encoded.
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt, and compiled into
 * check_fuzz_replay_plan in every build. Thread: single-threaded, as
 * libFuzzer calls it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "fuzz.h"
#include "fuzz_plan_check.h"
#include "mpcheck.h"
#include "plan.h"
#include "retention.h"

static void
check_resolved(const struct retained_value *v, size_t n)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    struct retained_value *back;
    struct proto_err err;
    size_t i, m, off = 0;
    uint64_t end;

    for (i = 0; i < n; i++) {
        if (i > 0 && identity_cmp(v[i - 1].value_id, v[i].value_id) >= 0)
            abort();
        if (__builtin_add_overflow(v[i].logical_offset_bytes,
                                   v[i].tensor.min_storage_bytes, &end))
            abort();
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, n);
    for (i = 0; i < n; i++)
        if (retention_value_encode(&v[i], &pk) != 0)
            abort();
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, sb.data, sb.size, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        retention_values_decode(&up.data, &back, &m, &err) != 0 || m != n)
        abort();
    for (i = 0; i < n; i++)
        if (!tensor_equal(&v[i].tensor, &back[i].tensor) ||
            retention_find(back, m, v[i].value_id) != &back[i])
            abort();
    free(back);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}

static void
readback(const msgpack_object *o, const struct retained_value *v, size_t n)
{
    struct readback_request req;
    struct proto_err err;
    struct readback rb;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (retention_readback_decode(o, &rb, &err) != 0)
        return;
    if (retention_readback_check(&rb, retention_find(v, n, rb.value_id), &req,
                                 &err) != 0)
        return;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (retention_readback_encode(&req, &pk) != 0)
        abort();
    msgpack_sbuffer_destroy(&sb);
}

static void
together(const msgpack_object *o)
{
    struct retention_spec *s = NULL;
    struct retained_value *v = NULL;
    struct proto_err err;
    struct plan *p = NULL;
    size_t n = 0;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2)
        return;
    if (plan_decode(&o->via.array.ptr[0], &p, &err) != 0)
        return;
    if (retention_spec_decode(&o->via.array.ptr[1], &s, &err) == 0 &&
        retention_resolve(p, s, &v, &n, &err) == 0) {
        check_resolved(v, n);
        if (o->via.array.size > 2)
            readback(&o->via.array.ptr[2], v, n);
    }
    free(v);
    retention_spec_free(s);
    plan_free(p);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct retention_spec *s;
    struct retained_value *v;
    struct readback rb;
    struct proto_err err;
    msgpack_unpacked up;
    struct plan *p;
    size_t off = 0, n;

    if (mpcheck((const char *)data, size, &err) != 0)
        return 0;
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, (const char *)data, size, &off) !=
        MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&up);
        return 0;
    }
    if (plan_decode(&up.data, &p, &err) == 0) {
        fuzz_check_canonical(p);
        plan_free(p);
    }
    if (retention_spec_decode(&up.data, &s, &err) == 0)
        retention_spec_free(s);
    if (retention_values_decode(&up.data, &v, &n, &err) == 0)
        free(v);
    (void)retention_readback_decode(&up.data, &rb, &err);
    together(&up.data);
    msgpack_unpacked_destroy(&up);
    return 0;
}
