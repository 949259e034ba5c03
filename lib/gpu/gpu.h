/*
 * gpu/gpu.h - what the GPU layer's files share: GPU detection behind a vendor table (gpu.c,
 * backend.h, gpu_nvml.c), profile entries (profile.c), the catalog (catalog.c), the user config
 * (config.c) and target resolution (target.c). Uses core.
 */
#ifndef OOMLESS_GPU_GPU_H
#define OOMLESS_GPU_GPU_H

#include "core/core.h"

struct json_object;

/* One GPU profile as read from a catalog or config entry, with its aliases (profile.c). */
struct oomi_gpu_entry {
    oom_gpu_profile p;
    char **aliases;
    size_t alias_count;
};
/* Parses one entry of a `gpus` list (catalog or config format; `user`: the config's, which may
 * leave out fields); with `e` NULL it only validates. OOM_EPARSE naming source, index and key. */
int oomi_gpu_entry_parse(struct oomi_gpu_entry *e, struct json_object *obj, const char *source,
                         size_t index, int user);
void oomi_gpu_entry_clear(struct oomi_gpu_entry *e);
/* Checks a list of GPU entries (catalog or config format) without keeping them. */
int oomi_catalog_validate_entries(struct json_object *list, const char *source);
/* Copies a profile's strings into `dst` (strings owned by dst; free with oomi_profile_clear). */
int oomi_profile_copy(oom_gpu_profile *dst, const oom_gpu_profile *src);
void oomi_profile_clear(oom_gpu_profile *p);

/* The config's `gpus` list (borrowed), or NULL (config.c). */
struct json_object *oomi_config_gpus(const oom_config *config);
/* oom_target_resolve() for a request alone (NULL: the defaults): loads the user config when the
 * request names none, and the catalog, and releases both (the target owns its strings). On
 * success free *t with oom_target_free(); on failure *t is not set. */
int oomi_target_resolve_request(oom_target *t, const oom_target_request *request);

#endif
