/* json.c - the JSON helpers every reader and writer of JSON documents in the library (and the
 * tool) uses: members taken with a type and range check and a message naming the key, values
 * written the same way everywhere. */
#include "core/core.h"

#include <json-c/json.h>
#include <float.h>
#include <stdio.h>
#include <string.h>

/* ---- reading ------------------------------------------------------------------------------- */

json_object *oomi_json_get(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v))
        return NULL;
    return v; /* NULL for a JSON null */
}

bool oomi_json_is_number(json_object *v)
{
    return v && (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double));
}

/* The member, or NULL: absent (or null) is OOM_OK with *found false when found is given, else
 * OOM_ENOTFOUND naming it. */
static int member(json_object **v, bool *found, json_object *o, const char *key, const char *where)
{
    *v = oomi_json_get(o, key);
    if (found)
        *found = *v != NULL;
    if (*v || found)
        return OOM_OK;
    return oomi_fail(OOM_ENOTFOUND, "%s%s is missing", where, key);
}

/* "(1 to 8)", "(at least 0)", "(at most 3)" */
static void range_text(char *buf, size_t size, double min, double max, bool whole)
{
    bool low = whole ? min > (double)INT64_MIN : min > -DBL_MAX;
    bool high = whole ? max < (double)INT64_MAX : max < DBL_MAX;
    if (low && high)
        oomi_snprintf(buf, size, "(%.15g to %.15g)", min, max);
    else if (low)
        oomi_snprintf(buf, size, "(at least %.15g)", min);
    else
        oomi_snprintf(buf, size, "(at most %.15g)", max);
}

int oomi_json_int(int64_t *out, bool *found, json_object *o, const char *key, int64_t min,
                  int64_t max, const char *where)
{
    json_object *v;
    char range[80];
    int64_t i;
    int err;

    if ((err = member(&v, found, o, key, where)) || !v)
        return err;
    if (!json_object_is_type(v, json_type_int))
        return oomi_fail(OOM_EINVAL, "%s%s must be a whole number, not %s", where, key,
                         json_object_to_json_string(v));
    i = json_object_get_int64(v);
    if (i < min || i > max) {
        range_text(range, sizeof(range), (double)min, (double)max, true);
        return oomi_fail(OOM_EINVAL, "%s%s %s is out of range %s", where, key,
                         json_object_to_json_string(v), range);
    }
    *out = i;
    return OOM_OK;
}

int oomi_json_double(double *out, bool *found, json_object *o, const char *key, double min,
                     double max, const char *where)
{
    json_object *v;
    char range[80];
    double d;
    int err;

    if ((err = member(&v, found, o, key, where)) || !v)
        return err;
    if (!oomi_json_is_number(v))
        return oomi_fail(OOM_EINVAL, "%s%s must be a number, not %s", where, key,
                         json_object_to_json_string(v));
    d = json_object_get_double(v);
    if (!(d >= min && d <= max)) {
        range_text(range, sizeof(range), min, max, false);
        return oomi_fail(OOM_EINVAL, "%s%s %s is out of range %s", where, key,
                         json_object_to_json_string(v), range);
    }
    *out = d;
    return OOM_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

int oomi_json_put(json_object *o, const char *key, json_object *v)
{
    return !o || json_object_object_add(o, key, v) ? oomi_nomem() : OOM_OK;
}

json_object *oomi_json_bytes(uint64_t v)
{
    return v == OOM_UNKNOWN ? NULL : json_object_new_int64(v > INT64_MAX ? INT64_MAX : (int64_t)v);
}

json_object *oomi_json_size(uint64_t v)
{
    return json_object_new_int64(v > INT64_MAX ? INT64_MAX : (int64_t)v);
}

json_object *oomi_json_string_or_null(const char *s)
{
    return s && *s ? json_object_new_string(s) : NULL;
}

json_object *oomi_json_number(double v, int decimals)
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
    const char *s;
    if (!root)
        return oomi_nomem();
    s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                 JSON_C_TO_STRING_NOSLASHESCAPE);
    *out = s ? oomi_strdup(s) : NULL;
    json_object_put(root);
    return *out ? OOM_OK : oomi_nomem();
}
