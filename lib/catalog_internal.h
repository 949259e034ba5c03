/* catalog_internal.h - what config.c and catalog.c share. */
#ifndef OOMLESS_CATALOG_INTERNAL_H
#define OOMLESS_CATALOG_INTERNAL_H

#include "internal.h"

struct json_object;
/* Checks a list of GPU entries (catalog or config format) without keeping them. */
int oomi_catalog_validate_entries(struct json_object *list, const char *source);
/* The config's `gpus` list (borrowed), or NULL. */
struct json_object *oomi_config_gpus(const oom_config *config);
/* Copies a profile's strings into `dst` (strings owned by dst; free with oomi_profile_clear). */
int oomi_profile_copy(oom_gpu_profile *dst, const oom_gpu_profile *src);
void oomi_profile_clear(oom_gpu_profile *p);

#endif
