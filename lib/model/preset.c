/* preset.c - the preset list (data/models/NAME.json) and the lookup of a model argument: a
 * preset, a Hub id, a config.json or a folder holding one. */
#include "model/model.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int preset_cmp(const void *a, const void *b)
{
    return strcmp((*(oom_preset *const *)a)->name, (*(oom_preset *const *)b)->name);
}

void oom_model_presets_free(oom_preset **p, size_t n)
{
    size_t i;
    if (!p)
        return;
    for (i = 0; i < n; i++) {
        if (!p[i])
            continue;
        oomi_free(p[i]->name);
        oomi_free(p[i]->family);
        oomi_free(p[i]);
    }
    oomi_free(p);
}

static int add_preset(oom_preset ***list, size_t *n, const char *file)
{
    size_t len = strlen(file);
    oomi_model *m = NULL;
    oom_preset **grown, *p;
    char *name;
    int err;

    if (len <= 5 || strcmp(file + len - 5, ".json"))
        return OOM_OK;
    if (!(name = oomi_strndup(file, len - 5)))
        return oomi_nomem();
    if ((err = oomi_model_load(&m, name))) {
        oomi_free(name);
        return err;
    }
    if (!(grown = oomi_reallocarray(*list, *n + 1, sizeof(**list))) ||
        !(p = oomi_calloc(1, sizeof(*p)))) {
        if (grown)
            *list = grown;
        oomi_free(name);
        oomi_model_free(m);
        return oomi_nomem();
    }
    *list = grown;
    grown[(*n)++] = p;
    p->version = OOM_PRESET_VERSION;
    p->name = name;
    p->family = oomi_strdup(m->family);
    p->params = m->params;
    oomi_model_free(m);
    return p->family ? OOM_OK : oomi_nomem();
}

int oom_model_presets(oom_preset ***out, size_t *count)
{
    char *dir = oomi_data_path("models");
    oom_preset **list = NULL;
    size_t n = 0;
    struct dirent *de;
    DIR *d;
    int err = OOM_OK;

    *out = NULL;
    *count = 0;
    if (!dir)
        return oomi_nomem();
    if (!(d = opendir(dir))) {
        err = oomi_fail(OOM_EIO, "cannot open the model presets folder '%s'", dir);
        oomi_free(dir);
        return err;
    }
    while (!err && (de = readdir(d)))
        err = add_preset(&list, &n, de->d_name);
    closedir(d);
    oomi_free(dir);
    if (err) {
        oom_model_presets_free(list, n);
        return err;
    }
    if (n)
        qsort(list, n, sizeof(*list), preset_cmp);
    *out = list;
    *count = n;
    return OOM_OK;
}

/* ---- lookup: a preset name, a Hub id's last part, a config.json or a folder ------------ */

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A preset matched case-insensitively ("Llama-3.1-8B"), or by the last part of a Hub id
 * ("meta-llama/Llama-3.1-8B"). OOM_ENOTFOUND naming the closest preset otherwise. */
static int find_preset(oomi_model **out, const char *arg)
{
    const char *name = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
    oom_preset **p = NULL;
    size_t n = 0, i, best = 0, bestd = (size_t)-1;
    char *path;
    int err = oom_model_presets(&p, &n);

    if (err == OOM_ENOMEM)
        return err;
    if (err || n == 0)
        return oomi_fail(OOM_ENOTFOUND, "model '%s' is neither a preset nor a file", arg);
    for (i = 0; i < n; i++) {
        size_t d = oomi_name_distance(name, p[i]->name);
        if (d < bestd)
            bestd = d, best = i;
    }
    if (oomi_name_cmp(name, p[best]->name) == 0) {
        path = oomi_asprintf("%s/models/%s.json", oomi_data_dir(), p[best]->name);
        err = path ? oomi_model_load_file(out, path, arg) : oomi_nomem();
        oomi_free(path);
    } else {
        err = oomi_fail(OOM_ENOTFOUND,
                        "model '%s' is neither a preset nor a file (closest preset: %s; see "
                        "--list-models, or give the path of its config.json)",
                        arg, p[best]->name);
    }
    oom_model_presets_free(p, n);
    return err;
}

int oomi_model_load(oomi_model **out, const char *arg)
{
    char *path = NULL;
    int err;

    *out = NULL;
    if (!arg || !*arg)
        return oomi_fail(OOM_EINVAL, "model '' is empty");
    if (is_dir(arg))
        path = oomi_asprintf("%s/config.json", arg);
    else if (is_file(arg))
        path = oomi_strdup(arg);
    else if (!strchr(arg, '/'))
        path = oomi_asprintf("%s/models/%s.json", oomi_data_dir(), arg);
    else
        return find_preset(out, arg);
    if (!path)
        return oomi_nomem();
    if (!is_file(path)) {
        oomi_free(path);
        return find_preset(out, arg);
    }
    err = oomi_model_load_file(out, path, arg);
    oomi_free(path);
    return err;
}
