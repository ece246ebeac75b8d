/*
 * check_hash.c: proto_hash32. The hashes are stored with every seq
 * (migrations/0009) and compared with those of resends, so the function
 * may never change: fixed values pin it, on every machine (it reads
 * little-endian whatever the byte order). Also: never 0 (the store's
 * "not known"), every length from 0 to 17 (the 8-byte steps and their
 * tails), and a flipped bit anywhere changes the hash.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

START_TEST(test_hash_values_are_fixed)
{
    static const char text[] = "the quick brown fox jumps over the lazy dog";

    ck_assert_uint_eq(proto_hash32("", 0), 0x2863592au);
    ck_assert_uint_eq(proto_hash32(text, strlen(text)), 0xfb7ad480u);
    ck_assert_uint_eq(proto_hash32(text, 8), 0x1232d95fu);
}
END_TEST

START_TEST(test_hash_sees_every_bit_and_length)
{
    unsigned char buf[64];
    uint32_t h[18], flipped;
    size_t n, i, j;
    int bit;

    for (i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 37 + 11);
    for (n = 0; n < 18; n++) {
        h[n] = proto_hash32(buf, n);
        ck_assert_uint_ne(h[n], 0);
        for (j = 0; j < n; j++)
            ck_assert_msg(h[j] != h[n], "lengths %zu and %zu collide", j, n);
    }
    for (i = 0; i < 17; i++)
        for (bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1u << bit);
            flipped = proto_hash32(buf, 17);
            buf[i] ^= (unsigned char)(1u << bit);
            ck_assert_msg(flipped != h[17], "byte %zu bit %d unseen", i, bit);
        }
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("hash");

    tcase_add_test(tc, test_hash_values_are_fixed);
    tcase_add_test(tc, test_hash_sees_every_bit_and_length);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
