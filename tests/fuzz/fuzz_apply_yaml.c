/* fuzz_apply_yaml.c - `apply` on a YAML document in memory: see apply_target.h. */
#define APPLY_FILE_NAME "config.yaml"
#include "apply_target.h"
