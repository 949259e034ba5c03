/*
 * fuzz_config.c - the user config file: YAML -> oom_config_load, then what uses a config:
 * oom_catalog_load with its GPUs, oom_catalog_to_json, oom_catalog_find / match of its
 * profiles, and oom_target_resolve for its default profile (no NVML: the fallback path).
 * Input: the file's bytes.
 * Invariants: a refusal is EIO/EPARSE/EINVAL/ENOTFOUND with a message, leaves *out NULL and
 * leaks nothing; an accepted config's margin parses; every config GPU is in the catalog and
 * found by its id; a resolved target has a budget usable + margin = target.
 */
#include "fuzz.h"
#include "oomless.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_env();
    return 0;
}

static void check_target(const oom_catalog *cat, const oom_config *cfg, const char *gpu)
{
    oom_target t = OOM_TARGET_INIT;
    oom_target_request req = {OOM_TARGET_REQUEST_VERSION, gpu, NULL, NULL, cfg};
    int err = oom_target_resolve(&t, &req, cat);

    /* an id of digits is taken as a GPU index: with no NVML there is none */
    fuzz_check(err == OOM_OK || err == OOM_EINVAL || err == OOM_ENOTFOUND ||
               (err == OOM_ENODEV && gpu && strspn(gpu, "0123456789") == strlen(gpu)));
    if (err)
        return;
    fuzz_check(t.budget.usable_bytes + t.budget.safety_margin_bytes == t.budget.target_bytes);
    fuzz_check(t.profile.id && t.profile.name);
    oom_target_dispose(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_memfile(data, size);
    oom_config *cfg = (oom_config *)1;
    oom_catalog *cat = NULL;
    const oom_gpu_profile *p, *q;
    char *json = NULL;
    uint64_t m;
    size_t i;
    int err;

    if (!path)
        return 0;
    err = oom_config_load(&cfg, path);
    if (err) {
        fuzz_check(err == OOM_EIO || err == OOM_EPARSE || err == OOM_EINVAL ||
                   err == OOM_ENOTFOUND);
        fuzz_check(cfg == NULL && oom_last_message()[0]);
        return 0;
    }
    fuzz_check(cfg && !strcmp(oom_config_path(cfg), path));
    fuzz_check(oom_parse_margin(&m, oom_config_default_margin(cfg), 24 * OOM_GiB) == OOM_OK);

    err = oom_catalog_load(&cat, cfg);
    fuzz_check(err == OOM_OK || err == OOM_EINVAL);
    if (!err) {
        for (i = 0; i < oom_catalog_count(cat); i++) {
            p = oom_catalog_at(cat, i);
            fuzz_check(p && p->id && p->name && p->vendor && p->match);
            if (!p->user_defined)
                continue;
            fuzz_check(oom_catalog_find(&q, cat, p->id) == OOM_OK);
            fuzz_check(oom_catalog_match(cat, p->name, p->memory_bytes) != NULL || !*p->match ||
                       strstr(p->name, p->match) == NULL);
            check_target(cat, cfg, p->id);
        }
        fuzz_check(oom_catalog_to_json(&json, cat) == OOM_OK && json && json[0] == '{');
        oom_free(json);
        check_target(cat, cfg, NULL); /* auto: no NVML, the config's default profile */
        oom_catalog_free(cat);
    }
    oom_config_free(cfg);
    return 0;
}
