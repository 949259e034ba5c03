/*
 * fuzz_size.c - oom_parse_size / oom_parse_margin / oom_format_size / oom_budget_make.
 * Input: the text of a size or margin ("16GiB", "10%", "  20.5 m ").
 * Invariants: an accepted size is below 2^63 bytes and the input left untouched on refusal; a
 * unit in the text makes the bare unit irrelevant; a margin percentage is at most the target;
 * the formatted size fits the documented 16 bytes; a budget's usable + margin = target.
 */
#include "fuzz.h"
#include "oomless.h"

#include <string.h>

static void check_format(uint64_t bytes)
{
    char big[64], small[16];
    memset(big, 'x', sizeof(big));
    oom_format_size(big, sizeof(big), bytes);
    fuzz_check(memchr(big, '\0', sizeof(big)) != NULL);
    fuzz_check(strlen(big) < sizeof(small)); /* "16 bytes are always enough" */
    oom_format_size(small, sizeof(small), bytes);
    fuzz_check(!strcmp(big, small));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstring(data, size);
    uint64_t v[3], margin, target;
    int err[3], i;
    oom_budget b = OOM_BUDGET_INIT;

    for (i = 0; i < 3; i++) {
        v[i] = 0x5a5a5a5a;
        err[i] = oom_parse_size(&v[i], text, (oom_size_unit)i);
        fuzz_check(err[i] == OOM_OK || err[i] == OOM_EINVAL);
        if (err[i]) {
            fuzz_check(v[i] == 0x5a5a5a5a);
            fuzz_check(oom_last_message()[0] != '\0');
        } else {
            fuzz_check(v[i] < ((uint64_t)1 << 63));
            check_format(v[i]);
        }
    }
    /* the bare unit only scales a bare number: a larger one can only overflow, never parse
     * what a smaller one refuses; with a unit in the text all three agree */
    fuzz_check((err[2] || !err[1]) && (err[1] || !err[0]));
    if (!err[2])
        fuzz_check(v[0] <= v[1] && v[1] <= v[2]);
    if (!err[2] && v[0] && v[0] == v[1])
        fuzz_check(v[1] == v[2]);

    for (i = 0; i < 3; i++) {
        target = i == 0 ? 24 * OOM_GiB : i == 1 ? 0 : ((uint64_t)1 << 63) - 1;
        margin = 0x5a5a5a5a;
        if (oom_parse_margin(&margin, text, target) == OOM_OK) {
            if (strchr(text, '%'))
                fuzz_check(margin <= target);
            if (oom_budget_make(&b, target, margin) == OOM_OK) {
                fuzz_check(b.usable_bytes + b.safety_margin_bytes == b.target_bytes);
                fuzz_check(b.usable_bytes > 0);
            }
        } else
            fuzz_check(margin == 0x5a5a5a5a);
    }
    free(text);
    return 0;
}
