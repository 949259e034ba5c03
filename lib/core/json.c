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

/* JSON's whitespace (RFC 8259): what may follow the document; from `at`, where it ends */
static size_t skip_space(const char *text, size_t len, size_t at)
{
    while (at < len &&
           (text[at] == ' ' || text[at] == '\t' || text[at] == '\r' || text[at] == '\n'))
        at++;
    return at;
}

int oomi_json_load(json_object **out, const char *text, size_t len, const char *name)
{
    size_t bom = oomi_bom_len(text, len), end, line, col;
    enum json_tokener_error jerr;
    json_tokener *tok;
    json_object *o;

    *out = NULL;
    if (len - bom > INT32_MAX) /* json-c takes an int length; files are read with a smaller cap */
        return oomi_fail(OOM_EINVAL, "%s is larger than the 2 GiB a JSON document may be", name);
    if (!(tok = json_tokener_new())) /* json-c's own depth limit, JSON_TOKENER_DEFAULT_DEPTH */
        return oomi_nomem();
    o = json_tokener_parse_ex(tok, text + bom, (int)(len - bom));
    jerr = json_tokener_get_error(tok);
    end = skip_space(text, len, bom + json_tokener_get_parse_end(tok));
    json_tokener_free(tok);
    if (o && jerr == json_tokener_success && end == len) {
        *out = o;
        return OOM_OK;
    }
    json_object_put(o);
    if (jerr == json_tokener_error_depth)
        return oomi_fail(OOM_EPARSE,
                         "%s nests deeper than %d levels, the most json-c reads (its "
                         "JSON_TOKENER_DEFAULT_DEPTH)",
                         name, JSON_TOKENER_DEFAULT_DEPTH);
    oomi_line_col(text, end, &line, &col);
    return oomi_fail(OOM_EPARSE, "%s line %zu column %zu: %s", name, line, col,
                     jerr == json_tokener_continue
                         ? (skip_space(text, len, bom) == len ? "empty" : "unexpected end of input")
                     : jerr != json_tokener_success ? json_tokener_error_desc(jerr)
                                                    : "text after the JSON document");
}

int oomi_json_load_file(json_object **out, const char *path, const char *what)
{
    char *text = NULL, *name = NULL;
    size_t len;
    int err;

    *out = NULL;
    if ((err = oomi_read_regular(&text, &len, path, what, OOMI_READ_MAX)))
        return err;
    if (!(name = oomi_asprintf("%s '%s'", what, path)))
        err = oomi_nomem();
    else
        err = oomi_json_load(out, text, len, name);
    oomi_free(name);
    oomi_free(text);
    return err;
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
