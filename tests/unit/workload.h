/*
 * workload.h - the unit tests' workloads from "key=value" pairs and their estimates (cmocka: a
 * refused option or a failed estimate fails the test). Include after cmocka.h and oomless.h.
 */
#ifndef OOMLESS_TEST_WORKLOAD_H
#define OOMLESS_TEST_WORKLOAD_H

#include <stdio.h>
#include <string.h>

/* a workload from "key=value" pairs; fails the test when one is refused */
static inline oom_workload *make(const char *const *kv)
{
    oom_workload *w = NULL;
    size_t i;
    assert_int_equal(oom_workload_create(&w), OOM_OK);
    for (i = 0; kv[i]; i++) {
        char key[64];
        const char *eq = strchr(kv[i], '=');
        assert_non_null(eq);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - kv[i]), kv[i]);
        if (oom_workload_set(w, key, eq + 1))
            fail_msg("%s refused: %s", kv[i], oom_last_message());
    }
    return w;
}

#define W(...) make((const char *const[]){__VA_ARGS__, NULL})

static inline oom_estimate run(oom_workload *w)
{
    oom_estimate e = OOM_ESTIMATE_INIT;
    if (oom_estimate_run(&e, w))
        fail_msg("estimate failed: %s", oom_last_message());
    return e;
}

#endif
