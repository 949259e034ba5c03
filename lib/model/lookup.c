/* lookup.c - what a model argument names: a config.json, a folder holding one, a preset, or a
 * Hugging Face Hub id found in the local Hub cache, else fetched from the Hub into it (hub.c),
 * else a preset of the same name, with a notice; when nothing matches, the closest presets, of
 * the same family first, then size. */
#include "model/model.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with_ci(const char *s, const char *tail)
{
    size_t ls = strlen(s), lt = strlen(tail);
    return ls >= lt && !oomi_strcasecmp(s + ls - lt, tail);
}

/* An argument meant as a file: it ends in .json, or it has a '/' and starts as a path does
 * ('/', './', '../', '~'). A Hub id ("ORG/NAME") does neither. */
static bool looks_like_path(const char *arg)
{
    if (ends_with_ci(arg, ".json"))
        return true;
    return strchr(arg, '/') &&
           (arg[0] == '/' || arg[0] == '~' || !strncmp(arg, "./", 2) || !strncmp(arg, "../", 3));
}

/* "~/x" with $HOME for "~" (a shell leaves it as is inside quotes or after '='); else a copy. */
static char *expand_home(const char *arg)
{
    const char *home = getenv("HOME");
    if (arg[0] == '~' && (arg[1] == '/' || !arg[1]) && home && *home)
        return oomi_asprintf("%s%s", home, arg + 1);
    return oomi_strdup(arg);
}

/* ---- presets ------------------------------------------------------------------------------ */

/* The preset `name` names exactly, case and '_' for '-' aside (oomi_name_cmp's rule: the files
 * are named in lower case with '-'); *out NULL when none. OOM_ENOMEM only. */
static int exact_preset(char **out, const char *name)
{
    char *norm, *c;

    *out = NULL;
    if (strchr(name, '/'))
        return OOM_OK;
    if (!(norm = oomi_strdup(name)))
        return oomi_nomem();
    for (c = norm; *c; c++)
        *c = (char)(*c == '_' || *c == ' ' ? '-' : oomi_tolower((unsigned char)*c));
    *out = oomi_asprintf("%s/models/%s.json", oomi_data_dir(), norm);
    oomi_free(norm);
    if (!*out)
        return oomi_nomem();
    if (!is_file(*out)) {
        oomi_free(*out);
        *out = NULL;
    }
    return OOM_OK;
}

/* Release variants of one architecture: "Qwen2.5-7B-Instruct", "Llama-2-7b-chat-hf" and
 * "gemma-2-9b-it" are the weights of qwen2.5-7b, llama-2-7b and gemma-2-9b tuned further, with
 * the same config.json shapes. */
static const char *const variant_suffixes[] = {"-instruct", "-chat", "-base", "-it", "-pt", "-hf"};

/* The preset a Hub repository name stands for once its variant suffixes (and Meta's "Meta-"
 * prefix, "Meta-Llama-3.1-8B") are dropped: *out NULL when none. */
static int variant_preset(char **out, const char *name)
{
    char *base = oomi_strdup(name);
    size_t len, i;
    bool cut = true;
    int err = OOM_OK;

    *out = NULL;
    if (!base)
        return oomi_nomem();
    if (!oomi_strncasecmp(base, "meta-", 5) && !oomi_strncasecmp(base + 5, "llama", 5))
        memmove(base, base + 5, strlen(base + 5) + 1);
    while (!err && !*out && cut) {
        if ((err = exact_preset(out, base)))
            break;
        len = strlen(base);
        cut = false;
        for (i = 0; i < sizeof(variant_suffixes) / sizeof(*variant_suffixes) && !cut; i++) {
            size_t ls = strlen(variant_suffixes[i]);
            if (len > ls && ends_with_ci(base, variant_suffixes[i])) {
                base[len - ls] = '\0';
                cut = true;
            }
        }
    }
    oomi_free(base);
    return err;
}

/* ---- the local Hugging Face Hub cache ----------------------------------------------------- */

/* The repository folder "models--ORG--NAME" in `cache`, its spelling matched case-insensitively
 * (the exact spelling first). *out NULL when none. */
static int hub_repo(char **out, const char *cache, const char *org, const char *name)
{
    char *want = oomi_asprintf("models--%s--%s", org, name), *found = NULL;
    struct dirent *de;
    int err = OOM_OK;
    DIR *d;

    *out = NULL;
    if (!want)
        return oomi_nomem();
    if (!(d = opendir(cache))) {
        oomi_free(want);
        return OOM_OK;
    }
    while ((de = readdir(d))) {
        if (oomi_strcasecmp(de->d_name, want))
            continue;
        /* several spellings: the exact one, else the first in byte order (any readdir order) */
        if (!found || !strcmp(de->d_name, want) ||
            (strcmp(found, want) && strcmp(de->d_name, found) < 0)) {
            oomi_free(found);
            if (!(found = oomi_strdup(de->d_name))) {
                err = oomi_nomem();
                break;
            }
        }
    }
    closedir(d);
    oomi_free(want);
    if (!err && found && !(*out = oomi_asprintf("%s/%s", cache, found)))
        err = oomi_nomem();
    oomi_free(found);
    return err;
}

/* The snapshot refs/REVISION names, without surrounding white space (*out NULL when none). */
static int ref_commit(char **out, const char *repo, const char *revision)
{
    char *ref = oomi_asprintf("%s/refs/%s", repo, revision), *text = NULL, *s, *e;
    int err;

    *out = NULL;
    if (!ref)
        return oomi_nomem();
    err = is_file(ref) ? oomi_read_file(&text, NULL, ref, 4096) : OOM_ENOTFOUND;
    oomi_free(ref);
    if (err == OOM_ENOMEM)
        return err;
    if (err)
        return OOM_OK; /* unreadable: as if absent, the newest snapshot is taken */
    for (s = text; *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'; s++)
        ;
    for (e = s + strlen(s); e > s && strchr(" \t\n\r", e[-1]); e--)
        ;
    *e = '\0';
    if (*s && !strchr(s, '/') && strcmp(s, "..") && strcmp(s, "."))
        memmove(text, s, strlen(s) + 1), *out = text;
    else
        oomi_free(text);
    return OOM_OK;
}

static bool newer(const struct stat *a, const char *aname, const struct stat *b, const char *bname)
{
    if (a->st_mtim.tv_sec != b->st_mtim.tv_sec)
        return a->st_mtim.tv_sec > b->st_mtim.tv_sec;
    if (a->st_mtim.tv_nsec != b->st_mtim.tv_nsec)
        return a->st_mtim.tv_nsec > b->st_mtim.tv_nsec;
    return strcmp(aname, bname) > 0;
}

/* The newest snapshot folder of `dir` (by its modification time: when the Hub client wrote it)
 * that holds a config.json; *out NULL when none. */
static int newest_snapshot(char **out, const char *dir)
{
    struct stat st, best_st = {0};
    struct dirent *de;
    char *best = NULL;
    int err = OOM_OK;
    DIR *d;

    *out = NULL;
    if (!(d = opendir(dir)))
        return OOM_OK;
    while (!err && (de = readdir(d))) {
        char *snap, *cfg = NULL;
        bool take;
        if (de->d_name[0] == '.')
            continue;
        if (!(snap = oomi_asprintf("%s/%s", dir, de->d_name)) ||
            !(cfg = oomi_asprintf("%s/config.json", snap))) {
            oomi_free(snap);
            err = oomi_nomem();
            break;
        }
        take = is_file(cfg) && stat(snap, &st) == 0 && (!best || newer(&st, snap, &best_st, best));
        oomi_free(cfg);
        if (take) {
            oomi_free(best);
            best = snap;
            best_st = st;
        } else {
            oomi_free(snap);
        }
    }
    closedir(d);
    if (!err)
        *out = best;
    else
        oomi_free(best);
    return err;
}

/* The config.json of a repository folder's snapshot: the one refs/REVISION names (the commit
 * the Hub client resolved it to last) or the snapshot of that name (a commit); for no revision
 * given, refs/main's, else (`newest`) the newest. *out NULL when no snapshot has one. */
static int hub_snapshot(char **out, const char *repo, const char *revision, bool newest)
{
    char *rev = NULL, *dir = NULL, *snap = NULL;
    int err;

    *out = NULL;
    if ((err = ref_commit(&rev, repo, revision ? revision : "main")))
        return err;
    if (!rev && revision && !strchr(revision, '/') && !(rev = oomi_strdup(revision)))
        return oomi_nomem();
    if (rev) {
        *out = oomi_asprintf("%s/snapshots/%s/config.json", repo, rev);
        oomi_free(rev);
        if (!*out)
            return oomi_nomem();
        if (is_file(*out))
            return OOM_OK;
        oomi_free(*out);
        *out = NULL;
    }
    if (revision || !newest) /* that revision, or none */
        return OOM_OK;
    if (!(dir = oomi_asprintf("%s/snapshots", repo)))
        return oomi_nomem();
    err = newest_snapshot(&snap, dir);
    oomi_free(dir);
    if (!err && snap && !(*out = oomi_asprintf("%s/config.json", snap)))
        err = oomi_nomem();
    oomi_free(snap);
    return err;
}

/* A Hub id's config.json in the local cache (*out NULL when it is not there), and its repository
 * folder there, the one found or the one to make (*repo; NULL when there is no cache) */
static int hub_lookup(char **out, char **repo, const char *cache, const char *id,
                      const char *revision, bool newest)
{
    const char *slash = strchr(id, '/');
    char *org;
    int err;

    *out = *repo = NULL;
    if (!cache || !slash || slash == id || !slash[1] || strchr(slash + 1, '/'))
        return OOM_OK;
    if (!(org = oomi_strndup(id, (size_t)(slash - id))))
        return oomi_nomem();
    err = hub_repo(repo, cache, org, slash + 1);
    if (!err && *repo)
        err = hub_snapshot(out, *repo, revision, newest);
    else if (!err && !(*repo = oomi_asprintf("%s/models--%s--%s", cache, org, slash + 1)))
        err = oomi_nomem();
    oomi_free(org);
    return err;
}

/* ---- nothing matched: the closest presets ------------------------------------------------- */

/* A decimal number ("8", "0.5") at *t, advancing *t; -1 when none. */
static double decimal(const char **t, const char *end)
{
    double v = 0, place = 1;
    const char *s = *t;

    for (; s < end && *s >= '0' && *s <= '9'; s++)
        v = v * 10 + (*s - '0');
    if (s == *t)
        return -1;
    if (s + 1 < end && *s == '.' && s[1] >= '0' && s[1] <= '9')
        for (s++; s < end && *s >= '0' && *s <= '9'; s++)
            v += (*s - '0') * (place /= 10);
    *t = s;
    return v;
}

/* The parameters a name token [t, end) states: "8b" 8e9, "0.5b", "135m", "8x7b" 56e9; else 0. */
static double token_size(const char *t, const char *end)
{
    double v = decimal(&t, end), n = 1;

    if (v < 0)
        return 0;
    if (t < end && (*t == 'x' || *t == 'X')) {
        n = v, t++;
        if ((v = decimal(&t, end)) < 0)
            return 0;
    }
    if (t + 1 != end)
        return 0;
    if (*t == 'b' || *t == 'B')
        return n * v * 1e9;
    if (*t == 'm' || *t == 'M')
        return n * v * 1e6;
    return 0;
}

/* The size a name states (its first size token) and the length of what comes before that token
 * (the family: "llama-3" of "llama-3-8b"); 0 and the whole length when it states none. */
static double name_size(const char *name, size_t *family_len)
{
    const char *t = name;

    while (*t) {
        const char *end = t + strcspn(t, "-_ ");
        double v = token_size(t, end);
        if (v > 0) {
            *family_len = (size_t)(t - name);
            while (*family_len && strchr("-_ ", name[*family_len - 1]))
                --*family_len;
            return v;
        }
        t = *end ? end + 1 : end;
    }
    *family_len = strlen(name);
    return 0;
}

static int norm_char(int c)
{
    return c == '_' || c == ' ' ? '-' : oomi_tolower((unsigned char)c);
}

/* How many leading characters two families share (case and '-'/'_' aside). */
static size_t common_prefix(const char *a, size_t la, const char *b, size_t lb)
{
    size_t i = 0;
    while (i < la && i < lb && norm_char(a[i]) == norm_char(b[i]))
        i++;
    return i;
}

typedef struct ranked {
    const oom_preset *p;
    size_t family; /* leading characters of the family shared with the argument's (0: none) */
    double size;   /* |log(size ratio)|; 0 when the argument states no size */
    size_t dist;   /* edit distance of the whole names */
} ranked;

/* Same family (the longest shared family prefix) first, then the nearest size, then spelling. */
static int ranked_cmp(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->family != b->family)
        return a->family > b->family ? -1 : 1;
    if (!a->family && a->dist != b->dist) /* no family shared: spelling before size */
        return a->dist < b->dist ? -1 : 1;
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    if (a->dist != b->dist)
        return a->dist < b->dist ? -1 : 1;
    return strcmp(a->p->name, b->p->name);
}

/* A family shares at least this many characters to count ("gpt" of gpt2 and gpt-j, "qwen"). */
#define FAMILY_MIN  3
#define SUGGESTIONS 3

/* OOM_ENOTFOUND for `arg` (whose repository name is `name`), naming the closest presets. */
static int no_match(const char *arg, const char *name, const char *cache, const char *why)
{
    oom_preset **p = NULL;
    size_t n = 0, i, qfam, pfam;
    double qsize = name_size(name, &qfam);
    ranked *r = NULL;
    oomi_sb sb = OOMI_SB_INIT;
    char *msg = NULL;
    int err = oom_model_presets(&p, &n);

    if (err == OOM_ENOMEM)
        return err;
    if (strchr(arg, '/'))
        oomi_sb_printf(&sb,
                       "model '%s' is not in the Hugging Face cache (%s), could not be fetched "
                       "(%s) and names no preset",
                       arg,
                       cache ? cache : "none: neither $HF_HUB_CACHE, $HF_HOME nor $HOME is set",
                       why ? why : "there is no cache to fetch it into");
    else
        oomi_sb_printf(
            &sb, "model '%s' is neither a preset, a config.json nor a folder holding one", arg);
    if (!err && n && (r = oomi_calloc(n, sizeof(*r)))) {
        for (i = 0; i < n; i++) {
            double psize = name_size(p[i]->name, &pfam);
            r[i].p = p[i];
            r[i].family = common_prefix(name, qfam, p[i]->name, pfam);
            if (r[i].family < FAMILY_MIN)
                r[i].family = 0;
            if (qsize > 0)
                r[i].size = fabs(log(qsize / (p[i]->params ? (double)p[i]->params : psize)));
            r[i].dist = oomi_name_distance(name, p[i]->name);
        }
        qsort(r, n, sizeof(*r), ranked_cmp);
        oomi_sb_printf(&sb, " (closest presets:");
        for (i = 0; i < n && i < SUGGESTIONS; i++)
            oomi_sb_printf(&sb, "%s %s", i ? "," : "", r[i].p->name);
        if (strchr(arg, '/'))
            oomi_sb_printf(&sb,
                           "; see --list-models; where the Hub is reachable oomless fetches "
                           "the config itself (or run 'hf download %s config.json'); or "
                           "give the path of its config.json)",
                           arg);
        else
            oomi_sb_printf(&sb, "; see --list-models, or give the path of its config.json)");
    } else if (!err && n) {
        err = oomi_nomem();
    }
    oomi_free(r);
    oom_model_presets_free(p, n);
    if (err == OOM_ENOMEM) {
        oomi_sb_free(&sb);
        return err;
    }
    if ((err = oomi_sb_finish(&sb, &msg)))
        return err;
    err = oomi_fail(OOM_ENOTFOUND, "%s", msg);
    oomi_free(msg);
    return err;
}

/* ---- the rules, in order ------------------------------------------------------------------ */

/* The preset's name from its path ("<data>/models/qwen2.5-7b.json"), for notices. */
static void preset_name(const char *path, char *buf, size_t size)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t len = strlen(base);
    oomi_snprintf(buf, size, "%.*s", (int)(len > 5 ? len - 5 : len), base);
}

/* A name that is no file: a preset; a Hub id ("ORG/NAME", "ORG/NAME@REVISION") in the cache, else
 * fetched from the Hub; a preset by the Hub id's name. */
static int resolve_name(char **out, const char *arg)
{
    const char *at = strchr(arg, '/') ? strrchr(arg, '@') : NULL, *name;
    char *id = NULL, *cache = NULL, *repo = NULL, *why = NULL, buf[256];
    const char *revision = at ? at + 1 : NULL;
    int err;

    if ((err = exact_preset(out, arg)) || *out)
        return err;
    if (!(id = at ? oomi_strndup(arg, (size_t)(at - arg)) : oomi_strdup(arg)))
        return oomi_nomem();
    name = strrchr(id, '/') ? strrchr(id, '/') + 1 : id;
    if (at && (!*revision || strchr(at + 1, '@') || !strchr(id, '/'))) {
        err = oomi_fail(OOM_EINVAL,
                        "model '%s': 'ORG/NAME@REVISION' names a branch, tag or commit"
                        " after the '@'",
                        arg);
        goto done;
    }
    if (strchr(id, '/')) {
        /* the snapshot the revision (main) names; else fetched; else the newest one cached */
        if ((err = oomi_hub_cache(&cache)) ||
            (err = hub_lookup(out, &repo, cache, id, revision, false)) || *out)
            goto done;
        if (repo && (err = oomi_hub_fetch(out, repo, id, revision ? revision : "main")) != OOM_OK) {
            if (err == OOM_ENOMEM || err == OOM_EINVAL)
                goto done;
            if (!(why = oomi_strdup(oom_last_message()))) {
                err = oomi_nomem();
                goto done;
            }
            oomi_free(repo);
            if ((err = hub_lookup(out, &repo, cache, id, revision, true)))
                goto done;
        }
        if (*out)
            goto done;
    }
    if ((err = variant_preset(out, name)))
        goto done;
    if (!*out) {
        err = no_match(arg, name, cache, why);
        goto done;
    }
    preset_name(*out, buf, sizeof(buf));
    if (name != id)
        oomi_notice("model '%s' is not in the Hugging Face cache (%s) and could not be fetched "
                    "(%s): using the preset %s%s",
                    arg, cache ? cache : "none", why ? why : "there is no cache to fetch it into",
                    buf,
                    oomi_name_cmp(name, buf) ? " (instruct, chat and base variants share the "
                                               "architecture)"
                                             : "");
    else
        oomi_notice("model '%s': using the preset %s (instruct, chat and base variants share the "
                    "architecture)",
                    arg, buf);
done:
    oomi_free(id);
    oomi_free(cache);
    oomi_free(repo);
    oomi_free(why);
    return err;
}

/* The config.json `arg` names, by the rules of oom_model_resolve(). */
static int resolve(char **out, const char *arg)
{
    char *path;
    struct stat st;
    int err = OOM_OK;

    *out = NULL;
    if (!arg || !*arg)
        return oomi_fail(OOM_EINVAL, "model '' is empty");
    if (!(path = expand_home(arg)))
        return oomi_nomem();
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (!(*out = oomi_asprintf("%s/config.json", path)))
            err = oomi_nomem();
        else if (stat(*out, &st) == 0 && !S_ISREG(st.st_mode)) /* never opened: a FIFO waits */
            err = oomi_fail(OOM_EINVAL, "model folder '%s': '%s' is %s, not a regular file", arg,
                            *out, oomi_file_kind(st.st_mode));
        else if (!is_file(*out))
            err = oomi_fail(OOM_ENOTFOUND, "model folder '%s' holds no config.json", arg);
    } else if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode))
            *out = path, path = NULL;
        else
            err = oomi_fail(OOM_EINVAL, "model '%s' is %s, not a regular file", arg,
                            oomi_file_kind(st.st_mode));
    } else if (looks_like_path(arg)) {
        err = oomi_fail(OOM_ENOTFOUND, "model file '%s' does not exist", arg);
    } else {
        err = resolve_name(out, arg);
    }
    oomi_free(path);
    if (err) {
        oomi_free(*out);
        *out = NULL;
    }
    return err;
}

int oom_model_resolve(char **out, const char *model)
{
    if (!out)
        return oomi_fail(OOM_EINVAL, "oom_model_resolve: out is NULL");
    return resolve(out, model);
}

int oomi_model_load(oomi_model **out, const char *arg)
{
    char *path = NULL;
    int err;

    *out = NULL;
    if ((err = resolve(&path, arg)))
        return err;
    err = oomi_model_load_file(out, path, arg);
    oomi_free(path);
    return err;
}
