/* config.c - the user's config file: default margin, default profile, extra GPUs. */
#include "gpu/gpu.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct oom_config {
    char *path;        /* NULL when no file was read */
    char *margin;      /* "1GiB" unless set */
    char *profile;     /* OOM_DEFAULT_PROFILE unless set */
    json_object *gpus; /* the `gpus` array, or NULL */
};

/* The default path in *out, or NULL when neither XDG_CONFIG_HOME nor HOME is set. */
static int default_path(char **out)
{
    char *base = NULL;
    int err;

    *out = NULL;
    if ((err = oomi_xdg_base(&base, NULL, "XDG_CONFIG_HOME", ".config")) || !base)
        return err;
    *out = oomi_asprintf("%s/oomless/config.yaml", base);
    oomi_free(base);
    return *out ? OOM_OK : oomi_nomem();
}

static int take_string(char **dst, json_object *obj, const char *key, const char *path)
{
    json_object *v;
    char buf[64];
    const char *s;

    if (!(v = oomi_json_get(obj, key)))
        return OOM_OK;
    if (json_object_is_type(v, json_type_string))
        s = json_object_get_string(v);
    else if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        oomi_snprintf(buf, sizeof(buf), "%s", json_object_to_json_string(v));
        s = buf;
    } else
        return oomi_fail(OOM_EINVAL, "%s: defaults.%s must be a string", path, key);
    oomi_free(*dst);
    return (*dst = oomi_strdup(s)) ? OOM_OK : oomi_nomem();
}

static int parse_config(oom_config *c, json_object *root, const char *path)
{
    json_object *defaults, *gpus;
    int err;
    uint64_t dummy;

    if (!root)
        return OOM_OK;
    if (!json_object_is_type(root, json_type_object))
        return oomi_fail(OOM_EINVAL, "%s: the top level must be a mapping", path);
    json_object_object_foreach(root, key, val)
    {
        (void)val;
        if (strcmp(key, "defaults") && strcmp(key, "gpus"))
            return oomi_fail(OOM_EINVAL, "%s: unknown key '%s' (expected defaults, gpus)", path,
                             key);
    }
    if ((defaults = oomi_json_get(root, "defaults"))) {
        if (!json_object_is_type(defaults, json_type_object))
            return oomi_fail(OOM_EINVAL, "%s: 'defaults' must be a mapping", path);
        json_object_object_foreach(defaults, dkey, dval)
        {
            (void)dval;
            if (strcmp(dkey, "safety_margin") && strcmp(dkey, "profile"))
                return oomi_fail(OOM_EINVAL,
                                 "%s: unknown key 'defaults.%s' (expected safety_margin, profile)",
                                 path, dkey);
        }
        if ((err = take_string(&c->margin, defaults, "safety_margin", path)) ||
            (err = take_string(&c->profile, defaults, "profile", path)))
            return err;
        if ((err = oom_parse_margin(&dummy, c->margin, 24 * OOM_GiB)))
            return oomi_fail_prefix(err, "%s: defaults.safety_margin: ", path);
    }
    if ((gpus = oomi_json_get(root, "gpus"))) {
        if (!json_object_is_type(gpus, json_type_array))
            return oomi_fail(OOM_EINVAL, "%s: 'gpus' must be a list", path);
        c->gpus = json_object_get(gpus);
    }
    return OOM_OK;
}

int oom_config_load(oom_config **out, const char *path)
{
    oom_config *c;
    char *def = NULL, *text = NULL;
    json_object *root = NULL;
    struct stat st;
    size_t len;
    int err = OOM_OK;

    if (!out)
        return oomi_fail(OOM_EINVAL, "config: no output");
    *out = NULL;
    if (!(c = oomi_calloc(1, sizeof(*c))))
        return oomi_nomem();
    if (!(c->margin = oomi_strdup("1GiB")) || !(c->profile = oomi_strdup(OOM_DEFAULT_PROFILE))) {
        err = oomi_nomem();
        goto done;
    }
    if (!path) {
        if ((err = default_path(&def)))
            goto done;
        if (!def || stat(def, &st) != 0)
            goto done; /* no default file: defaults apply */
        /* a regular file only: a FIFO there would make every command wait */
        if ((err = oomi_read_regular(&text, &len, def, "config file", OOMI_READ_MAX)) ||
            (err = oomi_yaml_load(&root, text, len, def)))
            goto done;
        path = def;
    } else if ((err = oomi_yaml_load_file(&root, path))) { /* named: <(...) works */
        goto done;
    }
    if (!(c->path = oomi_strdup(path))) {
        err = oomi_nomem();
        goto done;
    }
    err = parse_config(c, root, path);
    if (!err && c->gpus)
        err = oomi_catalog_validate_entries(c->gpus, path);
done:
    json_object_put(root);
    oomi_free(text);
    oomi_free(def);
    if (err) {
        oom_config_free(c);
        return err;
    }
    *out = c;
    return OOM_OK;
}

void oom_config_free(oom_config *c)
{
    if (!c)
        return;
    oomi_free(c->path);
    oomi_free(c->margin);
    oomi_free(c->profile);
    json_object_put(c->gpus);
    oomi_free(c);
}

const char *oom_config_default_margin(const oom_config *c)
{
    return c ? c->margin : "1GiB";
}

const char *oom_config_default_profile(const oom_config *c)
{
    return c ? c->profile : OOM_DEFAULT_PROFILE;
}

const char *oom_config_path(const oom_config *c)
{
    return c ? c->path : NULL;
}

struct json_object *oomi_config_gpus(const oom_config *c)
{
    return c ? c->gpus : NULL;
}
