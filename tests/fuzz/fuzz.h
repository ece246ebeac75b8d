/*
 * fuzz.h: the libFuzzer entry point, declared once for the fuzz targets and
 * for the replay test that compiles them into an ordinary Check binary.
 */
#ifndef RECEIPTD_TESTS_FUZZ_H
#define RECEIPTD_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input through the target; returns 0. Aborts on a finding. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
