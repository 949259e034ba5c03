/* apply_run.c - the edit set behind `oomless apply`: assignments, one run over several files
 * (all edited in memory and checked, then all written or none: apply_files.c; the report of
 * what was done: apply_report.c).
 *
 * A run that writes holds an exclusive lock on each file from before reading it until its
 * replacement is in place (filelock.c), so two runs on one file follow each other; just before
 * the first rename every file is checked to be the one that was read (programs that do not
 * lock). Backups are staged like the files: the new backup is written beside the old one under a
 * temporary name and only renamed into place once its file has been replaced. */
#include "apply/apply.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_LOCK_MS 10000

int oom_apply_create(oom_apply **out)
{
    oom_apply *a = oomi_calloc(1, sizeof(*a));

    *out = NULL;
    if (!a || !(a->suffix = oomi_strdup(".bak"))) {
        oomi_free(a);
        return oomi_nomem();
    }
    a->lock_ms = DEFAULT_LOCK_MS;
    *out = a;
    return OOM_OK;
}

/* what an edit of the file made (its edits, its new text, its notes), to edit it again */
static void drop_edits(struct file *f)
{
    size_t j;

    for (j = 0; j < f->nedits; j++) {
        oomi_free(f->edits[j].key);
        oomi_aval_clear(&f->edits[j].res.old);
        oomi_free(f->edits[j].res.reason);
        oomi_aval_clear(&f->edits[j].val);
    }
    for (j = 0; j < f->nnotes; j++)
        oomi_free(f->notes[j].msg);
    oomi_free(f->notes);
    oomi_free(f->edits);
    oomi_free(f->text);
    f->notes = NULL, f->edits = NULL, f->text = NULL;
    f->nnotes = f->nedits = 0;
}

static void free_files(oom_apply *a)
{
    size_t i;

    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        drop_edits(f);
        if (f->tmp)
            unlink(f->tmp);
        if (f->btmp)
            unlink(f->btmp);
        if (f->fd >= 0)
            close(f->fd);
        oomi_free(f->name);
        oomi_free(f->real);
        oomi_free(f->old);
        oomi_free(f->tmp);
        oomi_free(f->backup);
        oomi_free(f->btmp);
    }
    oomi_free(a->files);
    a->files = NULL;
    a->nfiles = 0;
    a->ran = a->dry = a->written = false;
}

void oom_apply_free(oom_apply *a)
{
    size_t i;

    if (!a)
        return;
    free_files(a);
    for (i = 0; i < a->nas; i++) {
        oomi_free(a->as[i].key);
        oomi_free(a->as[i].spec);
        oomi_free(a->as[i].unset);
    }
    oomi_free(a->as);
    oomi_free(a->suffix);
    if (a->plan)
        json_object_put(a->plan);
    oomi_free(a);
}

int oom_apply_load_plan(oom_apply *a, const char *text, const char *name)
{
    struct json_object *doc;
    char *label;
    int err;

    if (!(label = oomi_asprintf("plan '%s'", name)))
        return oomi_nomem();
    err = oomi_json_load(&doc, text, strlen(text), label);
    oomi_free(label);
    if (err)
        return err;
    if (!json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        return oomi_fail(OOM_EINVAL, "plan '%s' is not a JSON object", name);
    }
    if (a->plan)
        json_object_put(a->plan);
    a->plan = doc;
    return OOM_OK;
}

/* an assignment (oom_apply_set's, with a preset's group and default) */
static int add_assign(oom_apply *a, const char *key, const char *spec, unsigned flags,
                      unsigned group, const char *unset)
{
    oomi_pathseg *segs;
    size_t n, i;
    struct assign *grown, as = {NULL, NULL, (flags & OOM_APPLY_OPTIONAL) != 0, group, NULL};
    int err;

    if ((err = oomi_path_parse(&segs, &n, key)))
        return err;
    oomi_path_free(segs, n);
    if ((err = oomi_spec_check(spec)))
        return err;
    if (!(as.key = oomi_strdup(key)) || !(as.spec = oomi_strdup(spec)) ||
        (unset && !(as.unset = oomi_strdup(unset)))) {
        oomi_free(as.key);
        oomi_free(as.spec);
        return oomi_nomem();
    }
    for (i = 0; i < a->nas && strcmp(a->as[i].key, key); i++)
        ;
    if (i < a->nas && as.optional && !a->as[i].optional) {
        oomi_free(as.key);
        oomi_free(as.spec);
        oomi_free(as.unset);
        return OOM_OK;
    }
    if (i == a->nas) {
        if (!(grown = oomi_reallocarray(a->as, a->nas + 1, sizeof(*grown)))) {
            oomi_free(as.key);
            oomi_free(as.spec);
            oomi_free(as.unset);
            return oomi_nomem();
        }
        a->as = grown;
        a->nas++;
    } else {
        oomi_free(a->as[i].key);
        oomi_free(a->as[i].spec);
        oomi_free(a->as[i].unset);
    }
    a->as[i] = as;
    return OOM_OK;
}

int oom_apply_set(oom_apply *a, const char *key, const char *spec, unsigned flags)
{
    return add_assign(a, key, spec, flags, 0, NULL);
}

/* "K1|K2: spec" is one group of alternatives; each key may carry the preset's unset value */
int oomi_apply_preset_entry(const char *key, const char *spec, const char *unset, void *user)
{
    oom_apply *a = user;
    const char *p = key;
    unsigned group = strchr(key, '|') ? ++a->groups : 0;
    int err = OOM_OK;

    while (!err && *p) {
        size_t n = strcspn(p, "|");
        char *one = oomi_strndup(p, n);
        if (!one)
            return oomi_nomem();
        err = n ? add_assign(a, one, spec, OOM_APPLY_OPTIONAL, group, unset)
                : oomi_fail(OOM_EINVAL, "key '%s': an empty alternative", key);
        oomi_free(one);
        p += n + (p[n] == '|');
    }
    return err;
}

int oom_apply_preset(oom_apply *a, const char *name)
{
    return oomi_preset_each(name, oomi_apply_preset_entry, a);
}

int oom_apply_set_backup_suffix(oom_apply *a, const char *suffix)
{
    char *s = NULL;

    if (suffix) {
        if (!*suffix)
            return oomi_fail(OOM_EINVAL, "backup suffix '' is empty: the backup would be the "
                                         "file itself (write no backup with --no-backup)");
        if (strchr(suffix, '/'))
            return oomi_fail(OOM_EINVAL, "backup suffix '%s' contains '/'", suffix);
        if (!(s = oomi_strdup(suffix)))
            return oomi_nomem();
    }
    oomi_free(a->suffix);
    a->suffix = s;
    return OOM_OK;
}

int oom_apply_set_document(oom_apply *a, size_t document)
{
    a->document = document;
    return OOM_OK;
}

int oom_apply_set_lock_timeout(oom_apply *a, double seconds)
{
    if (!(seconds >= 0 && seconds <= 86400))
        return oomi_fail(OOM_EINVAL, "lock timeout %g s is not between 0 and 86400 seconds",
                         seconds);
    a->lock_ms = (long)ceil(seconds * 1000);
    return OOM_OK;
}

void oom_apply_set_step_hook(oom_apply *a, oom_apply_step_fn fn, void *user)
{
    a->hook = fn;
    a->user = user;
}

/* ---- editing in memory --------------------------------------------------------------------- */

/* the value of every assignment, then every edit on the text and a read-back of each */
static int edit_file(oom_apply *a, struct file *f, unsigned flags)
{
    oomi_edit *wanted;
    oomi_doc doc = {false, f->name, a->document};
    size_t i, n = 0;
    int err = OOM_OK;
    bool missing;

    drop_edits(f);
    f->json = doc.json = oomi_json_looks(f->name, f->old);
    f->len = f->oldlen;
    if (!(f->edits = oomi_calloc(a->nas ? a->nas : 1, sizeof(*f->edits))))
        return oomi_nomem();
    for (i = 0; i < a->nas; i++) {
        struct edit *e = &f->edits[f->nedits++];
        if (!(e->key = oomi_strdup(a->as[i].key)))
            return oomi_nomem();
        if ((err = oomi_spec_resolve(&e->val, &missing, a->plan, a->as[i].spec)))
            return err;
        if (missing && a->as[i].optional) {
            e->res.action = "skipped";
            e->res.reason = oomi_asprintf("the plan has no '%s'", a->as[i].spec);
            if (!e->res.reason)
                return oomi_nomem();
            continue;
        }
        if (missing)
            return oomi_fail(OOM_ENOTFOUND, "the plan has no field '%s' (for key '%s')",
                             a->as[i].spec, a->as[i].key);
        e->has_val = true;
    }
    if (!(wanted = oomi_calloc(a->nas ? a->nas : 1, sizeof(*wanted))))
        return oomi_nomem();
    for (i = 0; i < f->nedits; i++)
        if (f->edits[i].has_val)
            wanted[n++] = (oomi_edit){f->edits[i].key, &f->edits[i].val, a->as[i].optional,
                                      &f->edits[i].res, a->as[i].group};
    err = oomi_edit_all(f->old, f->oldlen, &f->text, &f->len, &doc, wanted, n, flags);
    oomi_free(wanted);
    return err;
}

/* ---- the effective batch --------------------------------------------------------------------- */

/* "45", or "B x 5" when the micro-batch is not known (the factor the file does not set) */
static void eff_text(char *buf, size_t size, const struct batch *b, bool known, long long n,
                     bool old)
{
    const struct factor *ac = &b->f[R_ACCUM];
    long long accum = old ? ac->old : ac->nw;

    if (known)
        oomi_snprintf(buf, size, "%lld", n);
    else if (!b->f[R_MICRO].present && (old ? ac->has_old : ac->has_new) &&
             oomi_apply_factor_ok(accum) && oomi_apply_factor_ok(b->gpus))
        oomi_snprintf(buf, size, "B x %lld", accum * b->gpus);
    else
        oomi_snprintf(buf, size, "an unknown number");
}

/* Assignments that set some of the effective batch's factors where the files lack another one
 * it needs: writing the others changes the effective batch, which is refused unless
 * OOM_APPLY_PARTIAL (then a note says how it changes). OOM_APPLY_CREATE creates keys, so a key
 * is only missing with it where it cannot be created. */
static int check_batch(struct file *f, const struct batch *b, unsigned flags)
{
    const struct factor *m = &b->f[R_MICRO], *ac = &b->f[R_ACCUM], *gap, *have;
    char from[48], to[48], want[48] = "", why[160] = "", change[128];
    bool same = b->has_old && b->has_new && b->old == b->nw,
         partial = (flags & OOM_APPLY_PARTIAL) != 0;

    if (!(m->present || ac->present) || b->f[R_GLOBAL].present || (m->present && ac->present))
        return OOM_OK;
    gap = m->present ? ac : m;
    have = m->present ? m : ac;
    if (!gap->assigned) /* the assignments leave that factor alone: the user's choice */
        return OOM_OK;
    eff_text(from, sizeof(from), b, b->has_old, b->old, true);
    eff_text(to, sizeof(to), b, b->has_new, b->nw, false);
    if (gap->has_plan)
        oomi_snprintf(want, sizeof(want), " %lld", gap->plan);
    oomi_snprintf(why, sizeof(why), "%s",
                  gap == m ? "B: the micro-batch the job uses"
                           : "an accumulation the file does not set is 1");
    if (b->plan_eff > 0)
        oomi_snprintf(why + strlen(why), sizeof(why) - strlen(why),
                      "; the plan's effective batch is %lld", b->plan_eff);
    /* same: the plan's micro-batch is the file's, but the effective batch is not the plan's */
    if (same)
        oomi_snprintf(change, sizeof(change), "%s %s",
                      partial ? "the effective batch stays" : "leave the effective batch at", from);
    else
        oomi_snprintf(change, sizeof(change), "%s from %s to %s",
                      partial ? "the effective batch changes" : "change the effective batch", from,
                      to);
    if (!partial)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' has '%s' but not '%s' (%s%s in the plan): writing only the %s "
                         "would silently %s (%s); --create adds '%s', --partial writes the rest "
                         "anyway; no file is changed",
                         f->name, have->key, gap->key, gap == m ? "batch_size" : "grad_accum", want,
                         have == m ? "micro-batch" : "accumulation", change, why, gap->key);
    return oomi_apply_note(f, 0,
                           oomi_asprintf("no '%s' (--partial): %s (%s)", gap->key, change, why));
}

/* what a comment beside one changed value is checked against */
struct stale {
    struct file *f;
    const struct batch *b;
    const struct edit *e;
};

static int stale_number(size_t line, long long n, void *user)
{
    const struct stale *s = user;
    const struct batch *b = s->b;
    const oomi_aval *old = &s->e->res.old;

    if (b->has_old && b->has_new && b->old != b->nw && n == b->old)
        return oomi_apply_note(
            s->f, line,
            oomi_asprintf("comment mentions effective batch %lld; the new effective "
                          "batch is %lld",
                          n, b->nw));
    if (old->type == OOMI_AV_INT && n == old->i && s->e->val.type == OOMI_AV_INT)
        return oomi_apply_note(
            s->f, line,
            oomi_asprintf("comment mentions %lld, the old value of '%s'; the new "
                          "value is %lld",
                          n, s->e->key, s->e->val.i));
    return OOM_OK;
}

/* comments beside each changed YAML value that name its old value or the old effective batch */
static int find_stale(struct file *f, const struct batch *b)
{
    size_t j;
    int err;

    for (j = 0; !f->json && j < f->nedits; j++) {
        struct stale s = {f, b, &f->edits[j]};
        if (!f->edits[j].res.action || strcmp(f->edits[j].res.action, "set") ||
            !f->edits[j].res.has_span)
            continue;
        if ((err = oomi_comment_numbers(f->old, f->oldlen, f->edits[j].res.start,
                                        f->edits[j].res.end, stale_number, &s)))
            return err;
    }
    return OOM_OK;
}

/* every file's effective batch checked (a refusal leaves every file alone), then the notes */
static int check_edits(oom_apply *a, unsigned flags)
{
    struct batch *b = oomi_calloc(a->nfiles ? a->nfiles : 1, sizeof(*b));
    size_t i;
    int err = OOM_OK;

    if (!b)
        return oomi_nomem();
    for (i = 0; !err && i < a->nfiles; i++)
        err = oomi_apply_batch(a, &a->files[i], &b[i]);
    for (i = 0; !err && i < a->nfiles; i++)
        err = check_batch(&a->files[i], &b[i], flags);
    for (i = 0; !err && i < a->nfiles; i++)
        err = find_stale(&a->files[i], &b[i]);
    oomi_free(b);
    return err;
}

/* ---- writing ------------------------------------------------------------------------------- */

static int make_diff(oom_apply *a, char **diff)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i;
    int err = OOM_OK;

    oomi_sb_puts(&sb, "");
    for (i = 0; !err && i < a->nfiles; i++)
        err = oomi_diff(&sb, a->files[i].name, a->files[i].old, a->files[i].oldlen,
                        oomi_apply_text(&a->files[i]), a->files[i].len);
    if (err) {
        oomi_sb_free(&sb);
        return err;
    }
    return oomi_sb_finish(&sb, diff);
}

/* what apply checks before it writes (apply_guard.c): each file's effective batch kept (its text
 * edited again with the accumulation that keeps it), then the keys the plan's memory needs */
static int guard(oom_apply *a, unsigned flags)
{
    struct json_object *orig = a->plan, *kept = NULL;
    char *note = NULL;
    size_t i;
    int err = OOM_OK;

    for (i = 0; !err && i < a->nfiles; i++) {
        if ((err = oomi_apply_keep_batch(a, &a->files[i], flags, &kept, &note)) || !kept)
            continue;
        a->plan = kept;
        err = edit_file(a, &a->files[i], flags);
        a->plan = orig;
        json_object_put(kept);
        kept = NULL;
        if (err)
            oomi_free(note);
        else /* (the note is taken, also on failure) */
            err = oomi_apply_note(&a->files[i], 0, note);
        note = NULL;
    }
    return err ? err : oomi_apply_memory_keys(a, flags);
}

int oom_apply_run(oom_apply *a, const char *const *files, size_t count, unsigned flags, char **diff)
{
    size_t i;
    int err = OOM_OK;

    if (diff)
        *diff = NULL;
    free_files(a);
    if (!count)
        return oomi_fail(OOM_EINVAL, "no file to edit");
    if (!a->nas)
        return oomi_fail(OOM_EINVAL, "nothing to set (give --set or --preset)");
    if (!(a->files = oomi_calloc(count, sizeof(*a->files))))
        return oomi_nomem();
    err = oomi_apply_read_files(a, files, count, flags);
    for (i = 0; !err && i < count; i++)
        err = edit_file(a, &a->files[i], flags);
    if (!err && !(err = guard(a, flags)))
        err = check_edits(a, flags);
    if (!err && diff)
        err = make_diff(a, diff);
    a->dry = (flags & OOM_APPLY_DRY_RUN) != 0;
    if (!err && !a->dry)
        err = oomi_apply_write_files(a);
    oomi_apply_finish_files(a);
    if (err && diff) {
        oomi_free(*diff);
        *diff = NULL;
    }
    a->ran = !err;
    return err;
}

int oom_apply_buffer(oom_apply *a, const char *name, const char *text, size_t len, unsigned flags,
                     char **out, size_t *out_len)
{
    struct file *f;
    int err;

    *out = NULL;
    free_files(a);
    if (!(a->files = oomi_calloc(1, sizeof(*a->files))))
        return oomi_nomem();
    f = &a->files[0];
    f->fd = -1;
    a->nfiles = 1;
    a->dry = true;
    if (!(f->name = oomi_strdup(name)) || !(f->old = oomi_strndup(text, len)))
        return oomi_nomem();
    f->oldlen = len;
    if ((err = edit_file(a, f, flags)) || (err = guard(a, flags)) || (err = check_edits(a, flags)))
        return err;
    if (!(*out = oomi_strndup(oomi_apply_text(f), f->len)))
        return oomi_nomem();
    *out_len = f->len;
    a->ran = true;
    return OOM_OK;
}
