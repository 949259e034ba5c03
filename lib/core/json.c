/* json.c - JSON output helpers shared by every writer of JSON documents. */
#include "core/core.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

struct json_object *oomi_json_number(double v, int decimals)
{
    char buf[64];
    size_t n;
    oomi_snprintf(buf, sizeof(buf), "%.*f", decimals, v);
    n = strlen(buf); /* "0.050" -> "0.05", "2.000" -> "2.0"; "1000" stays */
    while (strchr(buf, '.') && n > 2 && buf[n - 1] == '0' && buf[n - 2] != '.')
        buf[--n] = '\0';
    return json_object_new_double_s(v, buf);
}

int oomi_json_finish(char **out, json_object *root)
{
    const char *s = json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    *out = s ? oomi_strdup(s) : NULL;
    json_object_put(root);
    return *out ? OOM_OK : oomi_nomem();
}
