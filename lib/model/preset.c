/* preset.c - the preset list (data/models/NAME.json); lookup.c resolves a model argument. */
#include "model/model.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

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

static int add_preset(oom_preset ***list, size_t *n, const char *dir, const char *file)
{
    size_t len = strlen(file);
    oomi_model *m = NULL;
    oom_preset **grown, *p;
    char *name, *path;
    int err;

    if (len <= 5 || strcmp(file + len - 5, ".json"))
        return OOM_OK;
    if (!(name = oomi_strndup(file, len - 5)) || !(path = oomi_asprintf("%s/%s", dir, file))) {
        oomi_free(name);
        return oomi_nomem();
    }
    err = oomi_model_load_file(&m, path, name);
    oomi_free(path);
    if (err) {
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
        err = add_preset(&list, &n, dir, de->d_name);
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
