/* config.c - the user's config file: default margin, default profile, extra GPUs, the cluster's
 * planner constants. */
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
    char *fit_conf;    /* defaults.fit_confidence, NULL unless set */
    json_object *gpus; /* the `gpus` array, or NULL */
    char *text;        /* the file's YAML (NULL when no file was read) */
    size_t len;
    struct oomi_pk_over cluster; /* the `cluster:` section */
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

/* `cluster:`: any planner constant, in its documented unit */
static int parse_cluster(oom_config *c, json_object *cluster, const char *path)
{
    char where[600];
    enum oomi_pk k;
    int err;

    if (!json_object_is_type(cluster, json_type_object))
        return oomi_fail(OOM_EINVAL, "%s: 'cluster' must be a mapping", path);
    oomi_pk_lines(&c->cluster, c->text, c->len, "cluster", -1);
    json_object_object_foreach(cluster, key, val)
    {
        if ((k = oomi_pk_find(key)) == OOMI_PK_COUNT)
            return oomi_fail(OOM_EINVAL,
                             "%s: unknown key 'cluster.%s' (expected intra_node_gbs, "
                             "inter_node_gbps, pcie_gbs, cpu_adam_params_per_s, mfu_max, "
                             "ridge_flop_per_byte, default_tflops, fp32_divisor, nf4_speed, "
                             "int8_speed, chunked_loss_cost, eager_attention_cost)",
                             path, key);
        oomi_snprintf(where, sizeof(where), "%s:%zu: cluster.", path, c->cluster.line[k]);
        if ((err = oomi_pk_read(&c->cluster, k, val, where)))
            return err;
    }
    return OOM_OK;
}

static int parse_config(oom_config *c, json_object *root, const char *path)
{
    json_object *defaults, *gpus, *cluster;
    int err;
    uint64_t dummy;
    double fit;

    if (!root)
        return OOM_OK;
    if (!json_object_is_type(root, json_type_object))
        return oomi_fail(OOM_EINVAL, "%s: the top level must be a mapping", path);
    json_object_object_foreach(root, key, val)
    {
        (void)val;
        if (strcmp(key, "defaults") && strcmp(key, "gpus") && strcmp(key, "cluster"))
            return oomi_fail(OOM_EINVAL, "%s: unknown key '%s' (expected defaults, gpus, cluster)",
                             path, key);
    }
    if ((defaults = oomi_json_get(root, "defaults"))) {
        if (!json_object_is_type(defaults, json_type_object))
            return oomi_fail(OOM_EINVAL, "%s: 'defaults' must be a mapping", path);
        json_object_object_foreach(defaults, dkey, dval)
        {
            (void)dval;
            if (strcmp(dkey, "safety_margin") && strcmp(dkey, "profile") &&
                strcmp(dkey, "fit_confidence"))
                return oomi_fail(OOM_EINVAL,
                                 "%s: unknown key 'defaults.%s' (expected safety_margin, profile, "
                                 "fit_confidence)",
                                 path, dkey);
        }
        if ((err = take_string(&c->margin, defaults, "safety_margin", path)) ||
            (err = take_string(&c->profile, defaults, "profile", path)) ||
            (err = take_string(&c->fit_conf, defaults, "fit_confidence", path)))
            return err;
        if (c->fit_conf && (err = oomi_parse_confidence(&fit, c->fit_conf, "fit_confidence")))
            return oomi_fail_prefix(err, "%s: defaults.", path);
        if ((err = oom_parse_margin(&dummy, c->margin, 24 * OOM_GiB)))
            return oomi_fail_prefix(err, "%s: defaults.safety_margin: ", path);
    }
    if ((gpus = oomi_json_get(root, "gpus"))) {
        if (!json_object_is_type(gpus, json_type_array))
            return oomi_fail(OOM_EINVAL, "%s: 'gpus' must be a list", path);
        c->gpus = json_object_get(gpus);
    }
    if (json_object_object_get_ex(root, "cluster", &cluster) && cluster &&
        (err = parse_cluster(c, cluster, path)))
        return err;
    return OOM_OK;
}

int oom_config_load(oom_config **out, const char *path)
{
    oom_config *c;
    char *def = NULL;
    json_object *root = NULL;
    struct stat st;
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
        if ((err = oomi_read_regular(&c->text, &c->len, def, "config file", OOMI_READ_MAX)) ||
            (err = oomi_yaml_load(&root, c->text, c->len, def)))
            goto done;
        path = def;
    } else if ((err = oomi_read_file(&c->text, &c->len, path,
                                     OOMI_READ_MAX)) || /* named: <(...) works */
               (err = oomi_yaml_load(&root, c->text, c->len, path))) {
        goto done;
    }
    if (!(c->path = oomi_strdup(path))) {
        err = oomi_nomem();
        goto done;
    }
    err = parse_config(c, root, path);
    if (!err && c->gpus)
        err = oomi_catalog_validate_entries(c->gpus, path, c->text, c->len);
done:
    json_object_put(root);
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
    oomi_free(c->fit_conf);
    json_object_put(c->gpus);
    oomi_free(c->text);
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

const char *oomi_config_fit_confidence(const oom_config *c)
{
    return c ? c->fit_conf : NULL;
}

const char *oom_config_path(const oom_config *c)
{
    return c ? c->path : NULL;
}

struct json_object *oomi_config_gpus(const oom_config *c)
{
    return c ? c->gpus : NULL;
}

const char *oomi_config_text(const oom_config *c, size_t *len)
{
    *len = c ? c->len : 0;
    return c ? c->text : NULL;
}

const struct oomi_pk_over *oomi_config_cluster(const oom_config *c)
{
    static const struct oomi_pk_over none;
    return c ? &c->cluster : &none;
}
