/*
 * plan_fixture.h: the fixture plan of the plan, retention and readback
 * tests, built with msgpack-c, and small tools to edit decoded msgpack
 * objects by field path so that each test breaks exactly one rule.
 *
 * The fixture (also checked in as tests/data/plans/fixture.msgpack and
 * fixture.json) has three nodes:
 *
 *   embed: tokens (input, u32[8], io/in 0+32), emb.weight (input, weights,
 *          f16[16,4] on weights/w as two touching components w0 0+64 and
 *          w1 64+64), hidden0 (output, activations, f32[8,4], pool/a 0+128)
 *   block: hidden0 (input, read), hidden1 (output, activations, f32[8,4]
 *          strided [16,4], may_alias 0, pool/b 0+128), kv (output, state,
 *          read_write, f16[6,4] blocked [4,4] order [1,0] zero_fill [4,8],
 *          pool/kv 0+64), scratch0 (output, scratch, f32[4] blocked [2]
 *          exact, pool/a 256+16)
 *   head:  hidden1 (input, read, pool/b 0+128), logits (output,
 *          activations, f32[8], pool/a 128+32, touching hidden0), tmp
 *          (output, scratch, u8[8], pool/b 128+8, touching hidden1)
 *
 * Every object these functions return lives in one msgpack zone per
 * process (Check forks each test), freed by fx_done().
 */
#ifndef RECEIPTD_TESTS_PLAN_FIXTURE_H
#define RECEIPTD_TESTS_PLAN_FIXTURE_H

#include <stddef.h>

#include <msgpack.h>

/* Packs the fixture plan body into sb (initialised by the caller). */
void fx_build(msgpack_sbuffer *sb);

/* A fresh, editable, unpacked copy of the fixture plan body. */
msgpack_object *fx_fixture(void);

/* Unpacks msgpack bytes into an editable object. NULL when malformed. */
msgpack_object *fx_unpack(const char *buf, size_t len);

/* An editable object from JSON text (integers up to 2^64-1 exact). */
msgpack_object *fx_json(const char *json);

/*
 * The object at path below root ("nodes[2].values[0].storage",
 * "[1].tensor"), or NULL when there is none. An empty path is root.
 */
msgpack_object *fx_at(msgpack_object *root, const char *path);

/* Replaces the object at path with the value of json; aborts when the
 * path does not exist. */
void fx_set(msgpack_object *root, const char *path, const char *json);

/* Removes the map key at path (its last component must be a key). */
void fx_del(msgpack_object *root, const char *path);

/* Adds key holding the value of json to the map at path. */
void fx_add(msgpack_object *root, const char *path, const char *key,
            const char *json);

/* Adds a second copy of the map key at path to its map. */
void fx_dup(msgpack_object *root, const char *path);

/* Packs o into a new sbuffer owned by the zone; returns its bytes. */
const char *fx_pack(const msgpack_object *o, size_t *len);

/* Reads a whole file under TEST_DATA_DIR into zone memory. NULL when
 * missing. */
char *fx_read_data(const char *rel, size_t *len);

/* Frees the zone. */
void fx_done(void);

#endif
