/* fuzz_apply_json.c - `apply` on a JSON document in memory: see apply_target.h. */
#define APPLY_FILE_NAME "config.json"
#define APPLY_JSON      1
#include "apply_target.h"
