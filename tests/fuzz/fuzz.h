/*
 * fuzz.h - what the fuzz targets share. Each target defines LLVMFuzzerTestOneInput (and may
 * define LLVMFuzzerInitialize); it is linked either with libFuzzer (-fsanitize=fuzzer, make fuzz)
 * or with replay.c, a main() that runs it once over every file of its corpus (ctest fuzz.*).
 *
 * A target aborts (fuzz_check) when an invariant of the API does not hold, so that libFuzzer
 * and the replay both report it as a crash.
 */
#ifndef OOMLESS_FUZZ_H
#define OOMLESS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define fuzz_check(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A NUL-terminated copy of the input (malloc'd; the caller frees it). */
char *fuzz_cstring(const uint8_t *data, size_t size);

/* Puts the input into an anonymous in-memory file and returns a path that opens it
 * ("/proc/self/fd/N"); the same file is reused from one input to the next. NULL on failure. */
const char *fuzz_memfile(const uint8_t *data, size_t size);

/* The environment every target runs in: no user config, no NVML, the source tree's data. */
void fuzz_setup_env(void);

#endif
