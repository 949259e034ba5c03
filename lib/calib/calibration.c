/*
 * calibration.c - measured lines saved by `probe` (JSONL, one record per line, appended) and
 * looked up by GPU name + command template + workload, so that `run`, `plan` and `estimate` can
 * use what was measured on this machine.
 */
#include "calib/calib.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int oom_calibration_default_path(char **out)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!out)
        return oomi_fail(OOM_EINVAL, "calibration path: no output");
    if (xdg && *xdg)
        *out = oomi_asprintf("%s/oomless/calibration.jsonl", xdg);
    else if (home && *home)
        *out = oomi_asprintf("%s/.cache/oomless/calibration.jsonl", home);
    else
        return oomi_fail(OOM_ENOTFOUND, "calibration: neither $XDG_CACHE_HOME nor $HOME is set");
    return *out ? OOM_OK : oomi_nomem();
}

int oom_calibration_command_key(char **out, const char *const *argv)
{
    json_object *a;
    const char *s;
    size_t i;

    if (!out || !argv)
        return oomi_fail(OOM_EINVAL, "calibration: no command");
    *out = NULL;
    if (!(a = json_object_new_array()))
        return oomi_nomem();
    for (i = 0; argv[i]; i++)
        json_object_array_add(a, json_object_new_string(argv[i]));
    s = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    *out = s ? oomi_strdup(s) : NULL;
    json_object_put(a);
    return *out ? OOM_OK : oomi_nomem();
}

/* mkdir -p of the directory part of path */
static int make_parents(const char *path)
{
    char *dir = oomi_strdup(path), *p;
    int err = OOM_OK;
    if (!dir)
        return oomi_nomem();
    for (p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            err = oomi_fail(OOM_EIO, "cannot create '%s': %s", dir, strerror(errno));
            break;
        }
        *p = '/';
    }
    oomi_free(dir);
    return err;
}

static json_object *record_json(const oom_calibration *c)
{
    json_object *o = json_object_new_object(), *cmd = NULL;
    if (!o)
        return NULL;
    if (c->command)
        cmd = json_tokener_parse(c->command);
    json_object_object_add(o, "time", oomi_json_number(c->time, 3));
    json_object_object_add(o, "gpu", json_object_new_string(c->gpu ? c->gpu : ""));
    json_object_object_add(o, "command",
                           cmd ? cmd : json_object_new_string(c->command ? c->command : ""));
    json_object_object_add(o, "workload", json_object_new_string(c->workload ? c->workload : ""));
    json_object_object_add(o, "fixed_bytes", json_object_new_int64(llround(c->fit.fixed_bytes)));
    json_object_object_add(o, "per_sample_bytes",
                           json_object_new_int64(llround(c->fit.per_sample_bytes)));
    json_object_object_add(o, "per_sample2_bytes",
                           json_object_new_double(c->fit.per_sample2_bytes));
    json_object_object_add(o, "recommended_batch", json_object_new_int(c->recommended_batch));
    json_object_object_add(o, "max_batch", json_object_new_int(c->max_batch));
    json_object_object_add(o, "usable_bytes", json_object_new_int64((int64_t)c->usable_bytes));
    if (c->traced)
        json_object_object_add(o, "traced", json_object_new_boolean(1));
    return o;
}

int oom_calibration_save(const char *path, const oom_calibration *c)
{
    char *def = NULL, *line = NULL;
    json_object *o = NULL;
    const char *s;
    int err, fd = -1;
    ssize_t w;

    if (!c || !c->fit.valid)
        return oomi_fail(OOM_EINVAL, "calibration: no measured line to save");
    if (!path && (err = oom_calibration_default_path(&def)))
        return err;
    path = path ? path : def;
    if ((err = make_parents(path)))
        goto done;
    if (!(o = record_json(c)) ||
        !(s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE)) ||
        !(line = oomi_asprintf("%s\n", s))) {
        err = oomi_nomem();
        goto done;
    }
    if ((fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0 ||
        (w = write(fd, line, strlen(line))) != (ssize_t)strlen(line))
        err = oomi_fail(OOM_EIO, "cannot write the calibration file '%s': %s", path,
                        strerror(errno ? errno : EIO));
done:
    if (fd >= 0)
        close(fd);
    json_object_put(o);
    oomi_free(line);
    oomi_free(def);
    return err;
}

void oom_calibration_free(oom_calibration *c)
{
    if (!c)
        return;
    oomi_free(c->gpu);
    oomi_free(c->command);
    oomi_free(c->workload);
    oomi_free(c);
}

static const char *get_str(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v)
               : NULL;
}

static double get_num(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

/* A record `oomless trace --calibrate` wrote: allocated bytes, valid on any GPU. */
static int is_traced(json_object *o)
{
    json_object *v;
    return json_object_object_get_ex(o, "traced", &v) && json_object_get_boolean(v);
}

/* Whether a line's record is for this key (a traced record, gpu "", is for every GPU). */
static int matches(json_object *o, const char *gpu, const char *command, const char *workload)
{
    json_object *cmd;
    const char *g = get_str(o, "gpu"), *w = get_str(o, "workload"), *cs;
    if (!g || (strcmp(g, gpu ? gpu : "") && !(is_traced(o) && !*g)) ||
        strcmp(w ? w : "", workload ? workload : ""))
        return 0;
    if (!json_object_object_get_ex(o, "command", &cmd))
        return 0;
    cs = json_object_to_json_string_ext(cmd,
                                        JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    return cs && !strcmp(cs, command ? command : "");
}

static int to_record(oom_calibration **out, json_object *o, const char *command)
{
    oom_calibration *c = oomi_calloc(1, sizeof(*c));
    if (!c || !(c->gpu = oomi_strdup(get_str(o, "gpu"))) || !(c->command = oomi_strdup(command)) ||
        !(c->workload = oomi_strdup(get_str(o, "workload") ? get_str(o, "workload") : ""))) {
        oom_calibration_free(c);
        return oomi_nomem();
    }
    c->fit.valid = 1;
    c->fit.fixed_bytes = get_num(o, "fixed_bytes");
    c->fit.per_sample_bytes = get_num(o, "per_sample_bytes");
    c->fit.per_sample2_bytes = get_num(o, "per_sample2_bytes");
    c->fit.quadratic = c->fit.per_sample2_bytes != 0;
    c->recommended_batch = (int)get_num(o, "recommended_batch");
    c->max_batch = (int)get_num(o, "max_batch");
    c->usable_bytes = (uint64_t)get_num(o, "usable_bytes");
    c->time = get_num(o, "time");
    c->traced = is_traced(o);
    *out = c;
    return OOM_OK;
}

int oom_calibration_lookup(oom_calibration **out, const char *path, const char *gpu,
                           const char *command, const char *workload)
{
    char *def = NULL, *text = NULL, *line, *save = NULL;
    json_object *best = NULL;
    size_t len;
    int err;

    if (!out || !command)
        return oomi_fail(OOM_EINVAL, "calibration lookup: missing argument");
    *out = NULL;
    if (!path && (err = oom_calibration_default_path(&def)))
        return err;
    path = path ? path : def;
    if (access(path, F_OK) != 0) {
        err = oomi_fail(OOM_ENOTFOUND, "no calibration file '%s'", path);
        goto done;
    }
    if ((err = oomi_read_file(&text, &len, path)))
        goto done;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_object *o = json_tokener_parse(line);
        /* the newest match wins, but a traced record never replaces a measured one */
        if (o && json_object_is_type(o, json_type_object) && matches(o, gpu, command, workload) &&
            !(best && !is_traced(best) && is_traced(o))) {
            json_object_put(best);
            best = o;
        } else {
            json_object_put(o);
        }
    }
    if (!best)
        err = oomi_fail(OOM_ENOTFOUND, "no calibration record in '%s' for GPU '%s', command %s%s%s",
                        path, gpu ? gpu : "", command, workload && *workload ? ", workload " : "",
                        workload ? workload : "");
    else
        err = to_record(out, best, command);
done:
    json_object_put(best);
    oomi_free(text);
    oomi_free(def);
    return err;
}
