/*
 * fuzz_cuda_visible.c - oom_cuda_visible (CUDA_VISIBLE_DEVICES against a list of UUIDs).
 * Input: byte 0 = device count (0..15), byte 1 = room in the output (0..15), then `count` lines of
 * UUIDs ("-" alone = a device whose UUID is unknown, NULL), then the value (the rest).
 * Invariants: the result is at most the room and the device count; every selected index is a
 * device, none twice; only the first `result` slots are written; with no value every device in
 * order; the value parsed again gives the same list.
 */
#include "fuzz.h"
#include "oomless.h"

#include <string.h>

#define MAXDEV 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text, *p, *nl, *value;
    const char *uuids[MAXDEV];
    int vis[MAXDEV + 1], again[MAXDEV + 1];
    size_t count, room, n, i, j;

    if (size < 2)
        return 0;
    count = data[0] % MAXDEV;
    room = data[1] % MAXDEV;
    text = fuzz_cstring(data + 2, size - 2);
    p = text;
    for (i = 0; i < count; i++) {
        nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        uuids[i] = strcmp(p, "-") ? p : NULL;
        p = nl ? nl + 1 : p + strlen(p);
    }
    value = p;

    for (i = 0; i <= MAXDEV; i++)
        vis[i] = -7;
    n = oom_cuda_visible(vis, room, value, uuids, count);
    fuzz_check(n <= room && n <= count);
    for (i = 0; i < n; i++) {
        fuzz_check(vis[i] >= 0 && (size_t)vis[i] < count);
        for (j = 0; j < i; j++)
            fuzz_check(vis[i] != vis[j]);
    }
    for (i = n; i <= MAXDEV; i++)
        fuzz_check(vis[i] == -7);
    fuzz_check(oom_cuda_visible(again, room, value, uuids, count) == n);
    fuzz_check(!memcmp(again, vis, n * sizeof(int)));
    if (!*value)
        fuzz_check(n == 0); /* an empty value selects none */

    n = oom_cuda_visible(vis, room, NULL, uuids, count);
    fuzz_check(n == (count < room ? count : room));
    for (i = 0; i < n; i++)
        fuzz_check(vis[i] == (int)i);
    free(text);
    return 0;
}
