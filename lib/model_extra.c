/* model_extra.c - the preset list (data/models/NAME.json) and LoRA target resolution. */
#include "internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static int preset_cmp(const void *a, const void *b)
{
    return strcmp(((const oom_preset *)a)->name, ((const oom_preset *)b)->name);
}

void oom_model_presets_free(oom_preset *p, size_t n)
{
    size_t i;
    if (!p)
        return;
    for (i = 0; i < n; i++) {
        oomi_free(p[i].name);
        oomi_free(p[i].family);
    }
    oomi_free(p);
}

static int add_preset(oom_preset **list, size_t *n, const char *file)
{
    size_t len = strlen(file);
    oomi_model *m = NULL;
    oom_preset *grown;
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
    if (!(grown = oomi_reallocarray(*list, *n + 1, sizeof(**list)))) {
        oomi_free(name);
        oomi_model_free(m);
        return oomi_nomem();
    }
    *list = grown;
    grown[*n].name = name;
    grown[*n].family = oomi_strdup(m->family);
    grown[*n].params = m->params;
    (*n)++;
    oomi_model_free(m);
    return grown[*n - 1].family ? OOM_OK : oomi_nomem();
}

int oom_model_presets(oom_preset **out, size_t *count)
{
    char *dir = oomi_data_path("models");
    oom_preset *list = NULL;
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

/* adds the linears named `name` (all of them: "dense" or "c_proj" may name several shapes) */
static bool add_target(oomi_lora *l, const oomi_model *m, const char *name, size_t len, long r)
{
    size_t i;
    bool found = false;
    for (i = 0; i < m->nlinears; i++) {
        const oomi_linear *x = &m->linears[i];
        if (strlen(x->name) != len || strncmp(x->name, name, len))
            continue;
        l->params += (uint64_t)x->count * (uint64_t)r * (uint64_t)(x->din + x->dout);
        l->in_elems += (uint64_t)x->count * (uint64_t)x->din;
        l->n_adapted += (uint64_t)x->count;
        found = true;
    }
    return found;
}

int oomi_lora_resolve(oomi_lora *out, const oomi_model *m, const char *targets, long rank)
{
    const char *p;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (!targets || !*targets || !strcmp(targets, "default"))
        targets = m->default_targets;
    if (!strcmp(targets, "all-linear") || !strcmp(targets, "all_linear")) {
        /* PEFT's all-linear: every nn.Linear except the output head */
        for (i = 0; i < m->nlinears; i++)
            add_target(out, m, m->linears[i].name, strlen(m->linears[i].name), rank);
        return OOM_OK;
    }
    for (p = targets; *p;) {
        size_t len = strcspn(p, ",");
        if (len == 0 || !add_target(out, m, p, len, rank)) {
            oomi_sb names = OOMI_SB_INIT;
            for (i = 0; i < m->nlinears; i++)
                oomi_sb_printf(&names, "%s%s", i ? "," : "", m->linears[i].name);
            oomi_fail(OOM_EINVAL, "lora-targets '%s': module '%.*s' is not a linear of %s (%s)",
                      targets, (int)len, p, m->family, names.buf ? names.buf : "none");
            oomi_sb_free(&names);
            return OOM_EINVAL;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return OOM_OK;
}
